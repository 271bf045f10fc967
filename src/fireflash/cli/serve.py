"""FireFlash's SGLang-compatible server as a child process: ``python -m fireflash.cli.serve MODEL ...``.

``engines.serve_process.launch_fireflash_server`` (Ray's engine-server actors, tests) starts this module; users run
``fireflash serve``. Arguments are ``EngineConfig`` fields without the ``engine.`` prefix:

    python -m fireflash.cli.serve MODEL [--host H] [--port P] [--weight-sync-timeout-sec S] [max_batch_size=8 ...]

It lives in cli, not beside the server in engines, because reading overrides needs ``fireflash.config``, which
sits above every stage (docs/architecture.md).
"""

from __future__ import annotations

import argparse

from pydantic import ValidationError


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default ``sys.argv[1:]``) and serve until SIGINT / SIGTERM; bad settings, an unknown model
    or a taken port exit with code 2 and one line naming the cause."""
    from fireflash.config import ConfigError, parse_override
    from fireflash.engines.config import EngineConfig
    from fireflash.engines.serve_process import serve_forever

    parser = argparse.ArgumentParser(prog="python -m fireflash.cli.serve",
                                     description="FireFlash's SGLang-compatible server over a local engine.")
    parser.add_argument("model", help="embedded model name or HF directory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--weight-sync-timeout-sec", type=float, default=300.0)
    parser.add_argument("--cache-dir", default=None, help="cache root for embedded models")
    parser.add_argument("overrides", nargs="*", help="EngineConfig fields, e.g. max_batch_size=8")
    ns = parser.parse_intermixed_args(argv)
    try:
        fields = {}
        for text in ns.overrides:
            keys, value = parse_override(text)
            fields[".".join(keys).removeprefix("engine.")] = value
        cfg = EngineConfig.model_validate(fields)
    except (ConfigError, ValidationError) as e:
        parser.exit(2, f"fireflash serve: bad engine settings: {e}\n")
    from fireflash.models import ModelNotFound

    try:
        serve_forever(cfg, ns.model, ns.host, ns.port, ns.cache_dir, ns.weight_sync_timeout_sec)
    except (ModelNotFound, OSError) as e:
        parser.exit(2, f"fireflash serve: {type(e).__name__}: {e}\n")


if __name__ == "__main__":
    main()
