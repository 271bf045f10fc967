"""FireFlash's SGLang-compatible server as a process: ``serve_forever`` (the body of ``fireflash serve`` and
``python -m fireflash.cli.serve``), ``launch_fireflash_server`` (a child process, waited on until healthy, as
``launch_sglang``) and the EOS ids it stops at (``model_eos_ids``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fireflash.engines.http import start_server
from fireflash.engines.serve import EngineServer


def model_eos_ids(model: Any) -> list[int]:
    """The EOS ids SGLang stops at for ``model`` (a transformers model): its generation config's
    ``eos_token_id`` (an int or a list), else its config's; [] when neither says."""
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(source, "eos_token_id", None)
        if value is not None:
            return [int(value)] if isinstance(value, int) else [int(v) for v in value]
    return []


def serve_forever(
    cfg: Any, model: str, host: str, port: int, cache_dir: str | None = None, weight_sync_timeout_sec: float = 300.0
) -> None:
    """Build the local engine ``cfg`` (an ``EngineConfig``; its kind is taken as 'local') describes over ``model``
    and serve it until SIGINT / SIGTERM. Prints one line with the URL once it listens.

    Raises:
        fireflash.models.ModelNotFound: ``model`` is neither embedded nor a directory.
        OSError: the port is taken.
    """
    from fireflash.engines import make_engine

    engine = make_engine(cfg.model_copy(update={"kind": "local"}), model, cache_dir=cache_dir)
    server = EngineServer(engine, host, port, model_path=model, weight_sync_timeout_sec=weight_sync_timeout_sec,
                          eos_token_ids=model_eos_ids(getattr(engine, "model", None)), log_level="info")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    url = server.start()
    print(f"fireflash serve: {model} on {url} (pid {os.getpid()})", flush=True)
    while not stop.wait(1.0) and server.alive():
        pass
    server.close()


def fireflash_server_command(
    model_path: str,
    port: int,
    args: Mapping[str, Any] | None = None,
    host: str = "127.0.0.1",
    weight_sync_timeout_sec: float = 300.0,
) -> list[str]:
    """``python -m fireflash.cli.serve`` with ``args`` as ``EngineConfig`` overrides of the served local engine,
    e.g. ``{"max_batch_size": 8, "num_threads": 2}`` → ``max_batch_size=8 num_threads=2`` (None values omitted).

    Raises:
        TypeError: a dict value (no engine field of the local engine takes one).
    """
    overrides = []
    for key, value in (args or {}).items():
        if value is None:
            continue
        if isinstance(value, dict):
            raise TypeError(f"fireflash server arg {key}={value!r}: dict values are not engine settings")
        overrides.append(f"{key}={json.dumps(value)}")  # a JSON scalar or list is a TOML literal too
    return [
        sys.executable, "-m", "fireflash.cli.serve", model_path, "--host", host, "--port", str(port),
        "--weight-sync-timeout-sec", str(weight_sync_timeout_sec), *overrides,
    ]


def launch_fireflash_server(
    model_path: str,
    port: int = 30000,
    args: Mapping[str, Any] | None = None,
    timeout_sec: float = 600.0,
    log_path: Path | None = None,
    host: str = "127.0.0.1",
    weight_sync_timeout_sec: float = 300.0,
    die_with_parent: bool = False,
) -> subprocess.Popen:
    """Start FireFlash's server in a child process and wait for ``/health`` (mirrors ``launch_sglang``); the caller
    terminates the returned process (SIGTERM closes it cleanly).

    Args:
        model_path: embedded model name or HF directory.
        port: TCP port to listen on.
        args: ``EngineConfig`` fields for the served local engine (``fireflash_server_command``).
        timeout_sec: how long to wait for health, seconds (loading the model is most of it).
        log_path: the child's stdout and stderr; None discards them.
        host: interface to listen on ('0.0.0.0' for every interface; health is then asked on 127.0.0.1).
        weight_sync_timeout_sec: see ``build_app``.
        die_with_parent: the kernel kills the server when the calling thread's process dies (``http.die_with_parent``).

    Raises:
        EngineHTTPError: the server exited or did not become healthy in time (see its log).
    """
    command = fireflash_server_command(model_path, port, args, host, weight_sync_timeout_sec)
    return start_server(command, port, timeout_sec, host=host, log_path=log_path, die_with_parent=die_with_parent)
