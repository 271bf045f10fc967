"""Malformed workspaces: each mutation leaves what it promises; the fuzz harness counts crashes."""

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fireflash.protocols import TaskEnvironment
from fireflash.sandbox import SandboxConfig, make_backend
from fireflash.tasks.commands import app
from fireflash.tasks.fuzz import HUGE_FILE_BYTES, MUTATIONS, apply_mutation, junk_bytes
from fireflash.tasks.fuzz_run import fuzz_graders
from fireflash.tasks.loader import load_task

FIXTURES = Path(__file__).parent / "fixtures" / "gates"
PROBE = {
    "binary_junk": "cmp -s /app/out.txt /app/ref.bin && echo ok",
    "huge": f"[ $(stat -c %s /app/out.txt) -eq {HUGE_FILE_BYTES} ] && echo ok",
    "missing": "[ ! -e /app/out.txt ] && echo ok",
    "directory": "[ -d /app/out.txt/nested ] && echo ok",
    "wrong_encoding": "head -c 2 /app/out.txt | od -An -tx1 | grep -q 'ff fe' && echo ok",
    "no_permissions": '[ "$(stat -c %a /app/out.txt)" = 0 ] && echo ok',
    "symlink_loop": "cat /app/out.txt 2>&1 | grep -q 'Too many levels' && echo ok",
    "truncated": "[ \"$(tail -c 1 /app/out.txt | od -An -tx1 | tr -d ' ')\" = 00 ] && echo ok",
    "empty": "[ -f /app/out.txt ] && [ ! -s /app/out.txt ] && echo ok",
    "crlf": "grep -q $'\\r$' /app/out.txt && echo ok",
    "dangling_symlink": "[ -L /app/out.txt ] && [ ! -e /app/out.txt ] && echo ok",
    "latin1": "python3 -c \"open('/app/out.txt', encoding='utf-8').read()\" 2>/dev/null || echo ok",
}


def test_junk_is_deterministic():
    assert junk_bytes(3) == junk_bytes(3) != junk_bytes(4) and len(junk_bytes(3)) == 4096


@pytest.mark.sandbox
def test_every_mutation_leaves_what_it_promises():
    assert set(PROBE) == set(MUTATIONS)

    async def body():
        backend = make_backend(SandboxConfig())
        try:
            parent = await backend.prepare(TaskEnvironment(), "fuzz-mutations")
            seen = {}
            for name in MUTATIONS:
                box = await parent.fork()
                await box.write_file("/app/out.txt", b"line one\nline two\n")
                await box.write_file("/app/ref.bin", junk_bytes(0))
                await apply_mutation(box, name, ["/app/out.txt"], seed=0)
                seen[name] = (await box.exec(PROBE[name])).preview.strip()
                await box.close()
            return seen
        finally:
            await backend.close()

    assert asyncio.run(body()) == {name: "ok" for name in MUTATIONS}


@pytest.mark.sandbox
def test_fuzz_harness_counts_crashes_and_agrees_on_rescoring():
    sound = asyncio.run(
        fuzz_graders([load_task(FIXTURES / "valid-sort")], make_backend(SandboxConfig()), 6, 2)
    )
    crashing = asyncio.run(
        fuzz_graders([load_task(FIXTURES / "gate8-crashes-on-junk")], make_backend(SandboxConfig()), 2, 1)
    )
    assert (sound["workspaces"], sound["scorings"], sound["crashes"], sound["nondeterministic"]) == (
        6,
        12,
        0,
        0,
    )
    assert crashing["crashes"] >= 1 and "no_report" in crashing["reasons"]


@pytest.mark.unit
def test_validate_command_reports_and_exits_nonzero(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "validate",
            str(FIXTURES / "gate2-unstated-requirement"),
            str(FIXTURES / "valid-sort"),
            "--gates",
            "2",
            "--report-dir",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 1, result.output
    reports = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert reports["valid-sort"]["passed"] and not reports["gate2-unstated-requirement"]["passed"]
    assert "1/2 tasks passed every gate" in result.output
    # output to a pipe gets plain progress lines: at the start, at least every 30 s, at the end (issue #28)
    assert "validate tasks: 0/2, 0 s" in result.output and "validate tasks: 2/2, " in result.output, result.output


@pytest.mark.unit
def test_validate_command_rejects_bad_gate_list():
    result = CliRunner().invoke(app, ["validate", str(FIXTURES / "valid-sort"), "--gates", "1,12"])
    assert result.exit_code != 0 and "gates are 1..9" in result.output
