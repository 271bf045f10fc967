"""The Bash tool: persistent shell, output to file with a head+tail preview, background jobs (RECIPE.md §4).

A foreground command that outlives its timeout is moved to the background by the sandbox
(``on_timeout="background"``), never killed; the result names the job id and its log file. The harness
remembers every job it started or saw moved, reports each one's end in a notice appended to a later tool
result, and lists the live ones through compaction so a job id is never lost.
"""

from __future__ import annotations

import re
import shlex

from fireflash.harness.specs import KILL_JOB_COMMAND
from fireflash.protocols import ExecResult, Job, Sandbox

_KILL = re.compile(rf"^\s*{KILL_JOB_COMMAND}\s+(.+?)\s*$")


NOT_KEPT = "not kept: larger than the sandbox's output budget; rerun with less output, e.g. redirect it to a file"


def preview(text: str, size_bytes: int, path: str, budget_chars: int, kept: bool = True) -> str:
    """Head + tail of command output within ``budget_chars``, with the total size and the log file path.

    ``text`` is the sandbox's own preview (head + tail of the output); cutting its first and last halves
    keeps them a head and a tail of the full output, so no second read of the file is needed. When the
    file was not ``kept`` (deleted for size) the marker says so and names no file.
    """
    if len(text) <= budget_chars:
        return text  # already within budget (a cut preview keeps the sandbox's own marker)
    half = budget_chars // 2
    full = f"Full output: {path} (grep it or Read it with offset/limit)" if kept else f"Full output {NOT_KEPT}"
    return (
        f"{text[:half]}\n[... output cut: {size_bytes:,} bytes in total; showing the first and last {half:,} "
        f"characters. {full} ...]\n{text[-half:]}"
    )


def format_result(result: ExecResult, budget_chars: int, timeout_sec: float) -> str:
    """The tool-result text the model sees for one ``ExecResult``."""
    body = preview(result.preview, result.output_size_bytes, result.output_path, budget_chars, result.output_kept)
    if result.job_id is not None and result.timed_out:
        head = (
            f"Command still running after {timeout_sec:g} s: moved to the background as job {result.job_id} "
            f"(not killed). Output so far: {result.output_size_bytes:,} bytes in {result.output_path}. You will be "
            f"told when it finishes; stop it with `{KILL_JOB_COMMAND} {result.job_id}`."
        )
    elif result.job_id is not None:
        head = (
            f"Started background job {result.job_id}; output goes to {result.output_path}. You will be told when "
            f"it finishes; stop it with `{KILL_JOB_COMMAND} {result.job_id}`."
        )
    else:
        # no duration: identical commands must render identical tokens in training, probing and evaluation
        where = f"in {result.output_path}" if result.output_kept else f"({NOT_KEPT})"
        head = f"exit code {result.exit_code} · {result.output_size_bytes:,} bytes of output {where}"
    if not body:
        return head + ("\n(no output)" if result.job_id is None else "")
    return f"{head}\n{body}"


def clamp_timeout_sec(timeout: float | None, default_sec: float, max_sec: float) -> float:
    """A call's foreground timeout: ``default_sec`` for None, zero, negative or NaN; at most ``max_sec``.

    Compared before converting: ``float()`` of a 400-digit integer raises OverflowError, and the model
    may write any integer.
    """
    if timeout is None or not timeout > 0:  # `not >` also catches NaN
        return default_sec
    return max_sec if timeout >= max_sec else float(timeout)


def describe_job(job: Job) -> str:
    """One line naming a job for the model: id, command, log file."""
    return f"job {job.job_id}: `{job.command[:200]}` (output: {job.output_path}; stop: {KILL_JOB_COMMAND} {job.job_id})"


class BashTool:
    """Runs Bash calls in one sandbox and tracks the background jobs they create.

    Args:
        sandbox: the attempt's sandbox (its shell keeps cwd and exports between calls).
        default_timeout_sec / max_timeout_sec: foreground timeout when the model gives none, and its cap.
        preview_chars: inline output budget, characters.
    """

    def __init__(self, sandbox: Sandbox, default_timeout_sec: float, max_timeout_sec: float, preview_chars: int) -> None:
        self.sandbox = sandbox
        self.default_timeout_sec = default_timeout_sec
        self.max_timeout_sec = max_timeout_sec
        self.preview_chars = preview_chars
        self.running: dict[str, str] = {}  # job id -> command, for jobs not yet reported finished

    async def run(self, command: str, timeout: float | None = None, run_in_background: bool = False) -> str:
        """Execute one Bash call and return the result text. ``timeout`` is in seconds."""
        kill = _KILL.match(command)
        if kill:
            return await self.kill(shlex.split(kill.group(1)))
        if not command.strip():
            return "Error: empty command"
        timeout_sec = clamp_timeout_sec(timeout, self.default_timeout_sec, self.max_timeout_sec)
        result = await self.sandbox.exec(
            command, timeout_sec=timeout_sec, background=run_in_background, on_timeout="background"
        )
        if result.job_id is not None:
            self.running[result.job_id] = command
        return format_result(result, self.preview_chars, timeout_sec)

    async def kill(self, job_ids: list[str]) -> str:
        """Stop background jobs by id: their process trees and the processes that left them (the sandbox's report)."""
        lines = []
        known = {j.job_id: j for j in await self.sandbox.jobs()}
        for job_id in job_ids:
            if job_id not in known:
                lines.append(f"Error: no background job {job_id!r}; known jobs: {', '.join(known) or 'none'}")
                continue
            await self.sandbox.kill_job(job_id)
            self.running.pop(job_id, None)
            after = {j.job_id: j for j in await self.sandbox.jobs()}.get(job_id)
            # the sandbox's own account, so the message never claims more than was killed
            report = after.kill_report if after is not None and after.kill_report else (
                "sent a kill to its process tree (the sandbox did not report what it killed)")
            lines.append(f"Stopped job {job_id}: {report} (output kept in {known[job_id].output_path}).")
        return "\n".join(lines)

    async def finished_notices(self) -> list[str]:
        """Notices for tracked jobs that ended since the last call (empty, and no sandbox call, when none run)."""
        if not self.running:
            return []
        notices = []
        for job in await self.sandbox.jobs():
            if job.job_id in self.running and not job.running:
                del self.running[job.job_id]
                notices.append(
                    f"[background job {job.job_id} (`{job.command[:200]}`) finished with exit code {job.exit_code}; "
                    f"{job.output_size_bytes:,} bytes of output in {job.output_path}]"
                )
        return notices

    async def running_jobs(self) -> list[str]:
        """Descriptions of every background job still running (carried through compaction)."""
        return [describe_job(j) for j in await self.sandbox.jobs() if j.running]
