"""The Bash tool through a real sandbox: output files and previews, background moves, kills, notices."""

import asyncio
import re
import socket
import time

import pytest

from fireflash.harness.bash import BashTool, preview

pytestmark = [pytest.mark.sandbox, pytest.mark.integration]

PORT_OPEN = "python3 -c \"import socket; s=socket.socket(); s.settimeout(0.5); print('open' if s.connect_ex(('127.0.0.1', {p})) == 0 else 'closed')\""
COUNT_SLEEPERS = (  # processes whose command line holds the marker (split so this one does not match)
    "python3 -c \"import glob\nn = 0\nfor f in glob.glob('/proc/[0-9]*/cmdline'):\n"
    "    try: n += b'3141' b'59' in open(f, 'rb').read()\n    except OSError: pass\nprint(n)\""
)


def bash(sb, timeout=20.0, preview_chars=2000):
    return BashTool(sb, default_timeout_sec=timeout, max_timeout_sec=60.0, preview_chars=preview_chars)


def job_id(text):
    return re.search(r"job (\S+?)[ ;(]", text).group(1)


def free_port():
    """A TCP port nothing listens on now (the sandbox shares the host's network or has its own, emptier one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_binary_output_is_decoded_with_replacement(in_sandbox):
    out = in_sandbox(lambda sb: bash(sb).run("head -c 64 /dev/urandom"))
    assert out.startswith("exit code 0") and "64 bytes of output in /" in out
    out.encode("utf-8")  # always valid text for the model
    # 64 random bytes are valid UTF-8 with probability < 1e-15: some must have come back as U+FFFD
    assert "\ufffd" in out


def test_undecodable_bytes_become_replacement_characters(in_sandbox):
    out = in_sandbox(lambda sb: bash(sb).run(r"printf 'ok \xff\xfe\x80 \xc3\xa9 \xc3'"))
    head, body = out.split("\n", 1)
    assert head.startswith("exit code 0 · 11 bytes of output in /")
    assert body == "ok \ufffd\ufffd\ufffd \u00e9 \ufffd"  # invalid bytes replaced, the valid é kept


def test_100_kb_output_goes_to_file_with_head_tail_preview(in_sandbox):
    async def scenario(sb):
        out = await bash(sb).run("python3 -c \"print('a' * 50000 + 'b' * 50000)\"")
        path = re.search(r"output in (\S+)", out).group(1)
        return out, await sb.read_file(path)

    out, full = in_sandbox(scenario)
    assert "100,001 bytes of output" in out and len(out) < 2000 + 400
    assert "aaaa" in out and "bbbb" in out and "output cut: 100,001 bytes in total" in out
    assert full == b"a" * 50000 + b"b" * 50000 + b"\n"


def test_ls_recursive_usr(in_sandbox):
    out = in_sandbox(lambda sb: bash(sb).run("ls -R /usr"))
    # exit code 1 is fine: a few directories are unreadable for the sandbox's unprivileged user
    assert out.startswith("exit code ") and "output cut" in out and out.splitlines()[1] == "/usr:"
    assert len(out) < 2000 + 400


def test_cwd_persists_and_trailing_ampersand_returns_at_once(in_sandbox):
    async def scenario(sb):
        b = bash(sb)
        await b.run("mkdir -p /tmp/w && cd /tmp/w")
        pwd = await b.run("pwd")
        start = time.perf_counter()
        served = await b.run("python3 -m http.server 8080 >/dev/null 2>&1 &")
        return pwd, served, time.perf_counter() - start

    pwd, served, seconds = in_sandbox(scenario)
    assert pwd.rstrip().endswith("\n/tmp/w")
    assert served.startswith("exit code 0") and seconds < 5


def test_bare_ampersand_server_returns_at_once_and_stopping_it_frees_its_port(in_sandbox):
    """The hard case: the server keeps the command's output file open (no redirection of its own)."""
    port = free_port()

    async def scenario(sb):
        b = bash(sb)
        start = time.perf_counter()
        served = await b.run(f"python3 -m http.server {port} &")
        seconds = time.perf_counter() - start
        for _ in range(50):
            if (await b.run(PORT_OPEN.format(p=port))).rstrip().endswith("open"):
                break
            await asyncio.sleep(0.1)
        opened = await b.run(PORT_OPEN.format(p=port))
        stopped = await b.run("kill $! && wait $!; echo stopped")  # $!: the shell persists between calls
        return served, seconds, opened, stopped, await b.run(PORT_OPEN.format(p=port))

    served, seconds, opened, stopped, closed = in_sandbox(scenario)
    assert served.startswith("exit code 0") and seconds < 5
    assert opened.rstrip().endswith("open") and stopped.rstrip().endswith("stopped")
    assert closed.rstrip().endswith("closed")


def test_loop_past_timeout_moves_to_background_and_is_killed_with_children(in_sandbox):
    loop = "sleep 314159 & python3 -c \"import time\nwhile True: print('tick', flush=True); time.sleep(0.05)\""

    async def scenario(sb):
        b = bash(sb)
        moved = await b.run(loop, timeout=1)
        before = await b.run(COUNT_SLEEPERS)
        killed = await b.run(f"kill_job {job_id(moved)}")
        after = await b.run(COUNT_SLEEPERS)
        return moved, before, killed, after, await b.run("kill_job nosuch")

    moved, before, killed, after, unknown = in_sandbox(scenario)
    assert "moved to the background as job" in moved and "not killed" in moved and "kill_job" in moved
    assert before.splitlines()[-1] == "1" and after.splitlines()[-1] == "0"
    assert killed.startswith("Stopped job")
    assert unknown.startswith("Error: no background job 'nosuch'")


def test_stopping_background_server_frees_its_port(in_sandbox):
    async def scenario(sb):
        b = bash(sb)
        started = await b.run("python3 -m http.server 8765", run_in_background=True)
        for _ in range(50):
            if (await b.run(PORT_OPEN.format(p=8765))).rstrip().endswith("open"):
                break
            await asyncio.sleep(0.1)
        opened = await b.run(PORT_OPEN.format(p=8765))
        await b.run(f"kill_job {job_id(started)}")
        return started, opened, await b.run(PORT_OPEN.format(p=8765))

    started, opened, closed = in_sandbox(scenario)
    assert started.startswith("Started background job")
    assert opened.rstrip().endswith("open") and closed.rstrip().endswith("closed")


def test_finished_background_job_is_noticed_once(in_sandbox):
    async def scenario(sb):
        b = bash(sb)
        started = await b.run("sleep 0.2; echo finished", run_in_background=True)
        await asyncio.sleep(1.0)
        return started, await b.finished_notices(), await b.finished_notices(), await b.running_jobs()

    started, notices, again, running = in_sandbox(scenario)
    [notice] = notices
    assert f"background job {job_id(started)}" in notice and "exit code 0" in notice
    assert again == [] and running == []


def test_preview_keeps_head_and_tail():
    text = "H" * 3000 + "T" * 3000
    out = preview(text, 6000, "/tmp/o.log", 1000)
    assert out.startswith("H" * 500 + "\n[") and out.endswith("]\n" + "T" * 500) and "/tmp/o.log" in out
    assert preview("short", 5, "/x", 1000) == "short"


def test_output_not_kept_is_not_named_as_full_output():
    # the sandbox deletes an output larger than its whole output budget at once: the result named it anyway
    from fireflash.harness.bash import format_result
    from fireflash.protocols import ExecResult

    marker = "\n[... 9000000 bytes omitted; full output (9010000 bytes) was not kept (too big) ...]\n"
    kept = {"exit_code": 0, "output_path": "/tmp/.fireflash/3.log", "output_size_bytes": 9_010_000,
            "preview": "a" * 5000 + marker + "z" * 5000, "preview_truncated": True, "duration_sec": 1.0}
    named = format_result(ExecResult(**kept), 1000, 10)
    gone = format_result(ExecResult(**kept, output_kept=False), 1000, 10)
    assert "Full output: /tmp/.fireflash/3.log" in named and named.startswith("exit code 0 · 9,010,000 bytes of output in /tmp")
    assert "/tmp/.fireflash/3.log" not in gone
    assert gone.startswith("exit code 0 · 9,010,000 bytes of output (not kept: larger than the sandbox's output budget")
    assert "Full output not kept" in gone


def test_kill_job_kills_a_double_forked_server_and_says_what_it_killed(in_sandbox):
    # a server double-forked (and setsid'd) inside a job left the job's tree and survived kill_job,
    # whose message still said it had stopped the job's children
    port = free_port()
    serve = f"sleep 314159 & ( setsid python3 -m http.server {port} >/dev/null 2>&1 & ); wait"

    async def scenario(sb):
        b = bash(sb)
        started = await b.run(serve, run_in_background=True)
        for _ in range(50):
            if (await b.run(PORT_OPEN.format(p=port))).rstrip().endswith("open"):
                break
            await asyncio.sleep(0.1)
        opened = await b.run(PORT_OPEN.format(p=port))
        killed = await b.run(f"kill_job {job_id(started)}")
        await asyncio.sleep(0.2)
        closed = await b.run(PORT_OPEN.format(p=port))
        again = await b.run(f"kill_job {job_id(started)}")
        done = await b.run("( setsid sleep 314159 & ); echo detached", run_in_background=True)
        await asyncio.sleep(0.5)  # the job's shell ends at once; its daemon stays
        left = await b.run(f"kill_job {job_id(done)}")
        return opened, killed, closed, again, left, await b.run(COUNT_SLEEPERS)

    opened, killed, closed, again, left, sleepers = in_sandbox(scenario)
    assert opened.rstrip().endswith("open") and closed.rstrip().endswith("closed"), (killed, closed)
    assert re.search(r"killed its shell and \d+ process(es)? in its process tree, and 1 process that had left the tree",
                     killed), killed
    assert "could not be killed" not in killed
    assert "the job was already stopped and left no process running" in again
    assert "the job had already finished; killed 1 process it left running" in left, left
    assert sleepers.splitlines()[-1] == "0"
