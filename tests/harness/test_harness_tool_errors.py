"""Out-of-range numbers from the model are tool results, never exceptions out of the loop (issue 5, §1).

Only sandbox infrastructure failures (``SandboxError``) may escape ``ToolBox.call``; a 400-digit timeout,
a NaN offset or any other ``ArithmeticError`` becomes an ``Error: ...`` result or a clamped value.
"""

import asyncio
import json
import math

import pytest

from fireflash.engines.scripted import ScriptedEngine
from fireflash.harness.agent import run_attempt
from fireflash.harness.bash import clamp_timeout_sec
from fireflash.harness.config import HarnessConfig
from fireflash.harness.parsing import ParsedCall
from fireflash.harness.tools import ToolBox
from fireflash.sandbox import SandboxClosed

HUGE = 10**400  # float(HUGE) raises OverflowError


def call(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class BrokenSandbox:
    """A sandbox whose reads raise a given exception (a fake, so the error's origin is certain)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def read_file(self, path: str) -> bytes:
        raise self.error


@pytest.mark.unit
def test_timeout_is_clamped_without_float_overflow():
    clamp = [clamp_timeout_sec(t, 120.0, 600.0) for t in (None, 0, -5, -math.inf, math.nan, 30, 2.5, math.inf, HUGE)]
    assert clamp == [120.0, 120.0, 120.0, 120.0, 120.0, 30.0, 2.5, 600.0, 600.0]
    assert all(type(t) is float for t in clamp)


@pytest.mark.unit
def test_toolbox_returns_arithmetic_errors_and_raises_sandbox_failures():
    read = ParsedCall("Read", {"file_path": "/app/x"})
    overflow = asyncio.run(ToolBox(BrokenSandbox(OverflowError("int too large")), "/app", HarnessConfig()).call(read))
    assert overflow == "Error: int too large"
    with pytest.raises(SandboxClosed):  # infrastructure: the attempt fails and is retried
        asyncio.run(ToolBox(BrokenSandbox(SandboxClosed("gone")), "/app", HarnessConfig()).call(read))


@pytest.mark.sandbox
@pytest.mark.integration
def test_huge_bash_timeout_runs_the_command_and_the_attempt_completes(in_sandbox, make_task, tiny_tok):
    engine = ScriptedEngine(tiny_tok, [call("Bash", command="echo ok", timeout=HUGE), "Done."])
    traj = in_sandbox(lambda sb: run_attempt(make_task(), sb, engine, tiny_tok, HarnessConfig(), "a-0"))
    assert (traj.status.value, traj.finish_reason, traj.error) == ("completed", "stop", None)
    [result] = [m.content for m in traj.messages if m.role == "tool"]
    assert result.startswith("exit code 0") and result.endswith("\nok\n")


@pytest.mark.sandbox
@pytest.mark.integration
def test_read_offset_and_limit_of_any_size_or_kind(in_sandbox):
    async def scenario(sb):
        await sb.write_file("/app/a.txt", "".join(f"line {i}\n" for i in range(1, 11)).encode())
        box = ToolBox(sb, "/app", HarnessConfig())
        out = {}
        for offset in (-3, 0, math.nan, 2.0, 2.9, math.inf, HUGE):
            out[f"offset={offset!r:.20}"] = await box.files.read("a.txt", offset=offset, limit=1)
        for limit in (-1, 0, math.nan, 1.5, math.inf, HUGE):
            out[f"limit={limit!r:.20}"] = await box.files.read("a.txt", offset=9, limit=limit)
        return out

    out = in_sandbox(scenario)
    first = "     1\tline 1\n(lines 1-1 of 10; continue with offset=2)"
    second = "     2\tline 2\n(lines 2-2 of 10; continue with offset=3)"
    assert [out[f"offset={o}"] for o in ("-3", "0", "nan")] == [first] * 3
    assert out["offset=2.0"] == out["offset=2.9"] == second
    assert out["offset=inf"] == "Error: /app/a.txt has 10 lines; offset inf is past the end"
    assert out[f"offset={HUGE!r:.20}"].endswith(f"offset {HUGE} is past the end")
    tail = "     9\tline 9\n    10\tline 10"
    assert [out[f"limit={lim}"] for lim in ("-1", "0", "nan", "inf", f"{HUGE!r:.20}")] == [tail] * 5
    assert out["limit=1.5"] == "     9\tline 9\n(lines 9-9 of 10; continue with offset=10)"
