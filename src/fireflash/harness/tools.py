"""Dispatch of parsed tool calls to the four tools; every tool error becomes a result string (RECIPE.md §4)."""

from __future__ import annotations

from fireflash.harness.bash import BashTool
from fireflash.harness.config import HarnessConfig
from fireflash.harness.files import FileTools
from fireflash.harness.parsing import ParsedCall
from fireflash.protocols import Sandbox


class ToolBox:
    """The Bash, Read, Write and Edit tools bound to one attempt's sandbox.

    Args:
        sandbox: the attempt's sandbox.
        workdir: the task's working directory (relative file paths start there).
        cfg: harness settings (timeouts, preview and Read budgets).
    """

    def __init__(self, sandbox: Sandbox, workdir: str, cfg: HarnessConfig) -> None:
        self.bash = BashTool(sandbox, cfg.bash_timeout_sec, cfg.bash_max_timeout_sec, cfg.preview_chars)
        self.files = FileTools(sandbox, workdir, cfg.read_default_lines, cfg.read_max_line_chars, cfg.read_max_chars)

    async def call(self, call: ParsedCall) -> str:
        """Run one validated call and return its result text; a tool error is a result, never an exception.

        Raises:
            fireflash.sandbox.SandboxError: only for infrastructure failures (the attempt then fails).
        """
        try:
            return await self._dispatch(call)
        # the model's input was refused: a NUL byte in a path, a number too large for a float, ...
        except (ValueError, ArithmeticError) as e:
            return f"Error: {e}"

    async def _dispatch(self, call: ParsedCall) -> str:
        args = call.arguments
        if call.name == "Bash":
            return await self.bash.run(args["command"], args.get("timeout"), args.get("run_in_background", False))
        if call.name == "Read":
            return await self.files.read(args["file_path"], args.get("offset"), args.get("limit"))
        if call.name == "Write":
            return await self.files.write(args["file_path"], args["content"])
        if call.name == "Edit":
            return await self.files.edit(args["file_path"], args["old_string"], args["new_string"], args.get("replace_all", False))
        raise RuntimeError(f"unknown tool {call.name!r} reached dispatch; parsing must reject it (a harness bug)")
