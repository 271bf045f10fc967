"""Starting an SGLang server for FireFlash: ``launch_sglang`` / ``sglang_command`` (SGLang's own flags passed
through, ``SGLANG_RETURN_ORIGINAL_LOGPROB`` removed so logprobs are post-temperature), ``check_sglang_training``
(flags training's weight updates would break, issue #31) and ``deterministic_inference`` (whether the client
sends ``sampling_seed``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fireflash.engines.http import flags_from_args, start_server


def _flag(args: Mapping[str, Any], name: str) -> Any:
    """``engine.args[name]`` whichever way it is spelled (``tp_size``, ``tp-size``, ``--tp-size``)."""
    for key, value in args.items():
        if key.lstrip("-").replace("-", "_") == name:
            return value
    return None


def deterministic_inference(args: Mapping[str, Any]) -> bool:
    """Whether SGLang runs with ``--enable-deterministic-inference`` (``engine.args``): only then is a request's
    ``sampling_seed`` honoured, so only then does the client send it."""
    return bool(_flag(args, "enable_deterministic_inference"))


def check_sglang_training(args: Mapping[str, Any], weight_sync: str) -> list[str]:
    """Refuse SGLang flags that training's weight updates would silently break; return warnings for those that
    only degrade (issue #31).

    * ``quantization`` (e.g. 'fp8'): the trainer sends bf16 / fp32 tensors and SGLang's update routes load them
      as given, with no re-quantization into the FP8 weights and scales the server holds; FireFlash does not
      quantize on the trainer side (it cannot be tested without a GPU). Refused.
    * ``speculative_algorithm`` NEXTN / EAGLE / EAGLE3 (an MTP or draft model): weight updates reach the target
      model only, so the draft keeps the launch weights and its acceptance rate decays as training moves the
      target. Samples stay exact (the target verifies every draft token): warned.

    Args:
        args: ``engine.args``, SGLang's own flags.
        weight_sync: ``engine.weight_sync`` ('collective' or 'disk').

    Raises:
        ValueError: a combination training cannot run, naming the field and the fix.
    """
    quantization = _flag(args, "quantization")
    if quantization:
        raise ValueError(
            f"engine.args.quantization = {quantization!r} with engine.weight_sync = {weight_sync!r}: the trainer sends "
            "unquantized weights after every step and SGLang installs them without re-quantizing, so the served model "
            "would not be the trained one; remove engine.args.quantization for training (eval may keep it)"
        )
    warnings = []
    speculative = _flag(args, "speculative_algorithm")
    if speculative:
        warnings.append(
            f"engine.args.speculative_algorithm = {speculative!r}: weight updates do not reach SGLang's draft (MTP / "
            "NEXTN / EAGLE) model, so its acceptance rate falls as training moves the target model; samples stay "
            "exact, only slower. Watch the server's accept length, or drop the flag for long runs"
        )
    return warnings


def sglang_command(
    model_path: str, port: int, args: Mapping[str, Any] | None = None, host: str = "127.0.0.1"
) -> list[str]:
    """``python -m sglang.launch_server`` with SGLang's own flags passed through verbatim, e.g.
    ``{"speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "mem_fraction_static": 0.7}``."""
    return [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        model_path,
        "--host",
        host,
        "--port",
        str(port),
    ] + (flags_from_args(args or {}))


def launch_sglang(
    model_path: str,
    port: int = 30000,
    args: Mapping[str, Any] | None = None,
    timeout_sec: float = 600.0,
    log_path: Path | None = None,
    host: str = "127.0.0.1",
    die_with_parent: bool = False,
) -> subprocess.Popen:
    """Start an SGLang server and wait for ``/health``; the caller terminates the returned process (it is killed
    here if it never becomes healthy).

    ``SGLANG_RETURN_ORIGINAL_LOGPROB`` is removed from its environment so logprobs are post-temperature.
    ``host``: the interface it listens on ('0.0.0.0': every interface; health is then asked on 127.0.0.1).
    ``die_with_parent``: the kernel kills the server when the calling thread's process dies
    (``http.die_with_parent_hook``).

    Raises:
        EngineHTTPError: the server exited or did not become healthy in time (see its log).
    """
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_RETURN_ORIGINAL_LOGPROB"}
    return start_server(sglang_command(model_path, port, args, host), port, timeout_sec, host=host, log_path=log_path,
                        env=env, die_with_parent=die_with_parent)
