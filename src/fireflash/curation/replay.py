"""Replay a reference solution as Bash tool calls, the way the agent would issue them (gate 1).

The harness runs every Bash call in one persistent shell; so does this replay: ``solve.sh`` is cut into
complete top-level commands (a heredoc, ``if``/``for`` block or ``\\``-continued line stays whole) and
each is one ``sandbox.exec``. Shell options that would end a persistent shell on the first failing
command (``set -e`` and friends) are dropped, as a harness-driven agent would never send them.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from fireflash.protocols import ExecResult, Sandbox

SHELL_OPTIONS = re.compile(r"^\s*set\s+[-+][euxo]+(\s+pipefail)?\s*(#.*)?$")


def _complete(text: str) -> bool:
    """Whether ``text`` parses as whole shell commands (``bash -n``; an open heredoc counts as incomplete)."""
    if text.rstrip().endswith(("\\", "&&", "||", "|")):
        return False
    result = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, check=False)
    return result.returncode == 0 and "here-document" not in result.stderr


def split_commands(script: str) -> list[str]:
    """Cut a shell script into the top-level commands a Bash tool call would send, in order.

    Raises:
        ValueError: the script does not parse (the message quotes the unparsable tail).
    """
    commands: list[str] = []
    chunk: list[str] = []
    for line in script.splitlines():
        if not chunk and (
            line.startswith("#!")
            or SHELL_OPTIONS.match(line)
            or not line.strip()
            or line.lstrip().startswith("#")
        ):
            continue
        chunk.append(line)
        text = "\n".join(chunk)
        if _complete(text):
            commands.append(text)
            chunk = []
    if chunk:
        raise ValueError(
            f"solution does not parse as shell; unfinished command: {chr(10).join(chunk)[:200]!r}"
        )
    return commands


async def replay_solution(
    sandbox: Sandbox,
    script: Path,
    workdir: str,
    env: dict[str, str] | None = None,
    timeout_sec: float = 900.0,
) -> list[ExecResult]:
    """Run ``script`` command by command in ``sandbox``'s persistent shell, starting in ``workdir``.

    Other files next to the script (helpers a ``solve.sh`` may read from ``/solution``) are written to
    ``/solution`` first and removed afterwards, so the graded state holds no copy of them.

    Args:
        timeout_sec: wall-clock budget of the whole replay (the task's agent timeout), seconds.

    Raises:
        ValueError: the script does not parse, or its helper files cannot be written to ``/solution``.
    """
    commands = split_commands(script.read_text())
    # Harbor keeps helpers beside solve.sh in solution/; a Terminal-Bench solution.sh sits in the task root
    in_solution_dir = script.parent.name == "solution"
    helpers = [
        p
        for p in sorted(script.parent.rglob("*"))
        if in_solution_dir and p.is_file() and not re.match(r"(solve|alt_.*)\.sh$", p.name)
    ]
    for p in helpers:
        try:
            await sandbox.write_file(
                f"/solution/{p.relative_to(script.parent).as_posix()}",
                p.read_bytes(),
                p.stat().st_mode & 0o777,
            )
        except OSError as e:
            raise ValueError(
                f"{p}: solution helper files go to /solution, which this sandbox does not let its user create "
                f"({e.strerror}); inline the helper into {script.name}"
            ) from None
    exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in (env or {}).items())
    results = [await sandbox.exec(f"{exports}cd {shlex.quote(workdir)}", timeout_sec=30)]
    for command in commands:
        results.append(await sandbox.exec(command, timeout_sec=timeout_sec))
    if helpers:
        await sandbox.exec("rm -rf /solution", timeout_sec=30)
    return results
