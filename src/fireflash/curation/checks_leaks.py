"""Gate 5: nothing the agent can read holds the answer: tests, solution, distinctive lines of the reference's
output, or git history beyond HEAD (kept history judged against the task's declared ``git_premise``)."""

from __future__ import annotations

import shlex
import uuid

from fireflash.curation.context import GateContext, closing
from fireflash.curation.replay import SHELL_OPTIONS
from fireflash.protocols import Task
from fireflash.tasks.git_strip import CHECK_GIT, KEEP_FIELD, PREMISE_FIELD, answer_in_git, git_findings


def _distinctive_lines(task: Task, min_chars: int) -> list[str]:
    """Lines of the solution scripts that would give the answer away if found in the environment."""
    scripts = [task.solution_path] if task.solution_path else []
    if task.path is not None:
        scripts += sorted((task.path / "solution").glob("alt_*.sh"))
    lines = set()
    for script in scripts:
        if script is None or not script.is_file():
            continue
        for line in script.read_text(errors="replace").splitlines():
            text = line.strip()
            long_enough = len(text) >= min_chars
            if (
                long_enough
                and not text.startswith("#")
                and not SHELL_OPTIONS.match(text)
                and text not in task.instruction
            ):
                lines.add(text)
    return sorted(lines)


async def _answer_lines(s: GateContext, max_bytes: int = 1 << 20) -> list[str] | None:
    """Lines the reference solution writes that the environment did not have, and its scripts' distinctive
    lines: what kept git history must not hold (gate 5). None: no reference solution to run."""
    task = s.task
    if task.solution_path is None or not task.solution_path.is_file():
        return None
    if s.solved is None:
        await s.run_reference()
    assert s.solved is not None
    parent, lines = await s.prepare(), set(_distinctive_lines(task, s.cfg.leak_min_line_chars))
    for path in s.changed:
        try:
            new = await s.solved.read_file(path)
        except OSError:
            continue  # deleted by the solution
        if len(new) > max_bytes:
            continue
        try:
            old = set((await parent.read_file(path)).decode("utf-8", "replace").splitlines())
        except OSError:
            old = set()
        for line in new.decode("utf-8", "replace").splitlines():
            text = line.strip()
            if len(text) >= s.cfg.leak_min_line_chars and line not in old and text not in task.instruction:
                lines.add(text)
    return sorted(lines)[:2000]


def _judge_kept_history(
    task: Task, left: list[str], answers: list[list[str]] | None
) -> tuple[list[str], str, str]:
    """Gate 5 on history a task keeps (its point is its git state: a dangling commit to recover, a branch to
    merge): (leaks, note, fix). The reference solution's output in an object reached otherwise than the task's
    declared ``git_premise`` is a leak; reached only that way, the premise (a note), as is history without it."""
    note = f"note: {KEEP_FIELD} = true, so git history was kept: " + "; ".join(left[:12])
    premise = task.metadata.get(PREMISE_FIELD) or []
    if answers is None:
        return [], note + "; not checked for the answer (no reference solution whose output to look for)", ""
    leaks = [(repo, kind, sha) for repo, kind, sha in answers if kind not in premise]
    if not leaks:
        held = f"the answer it holds is the task's premise ({PREMISE_FIELD} = {premise})" if answers else (
            "none of it holds the reference solution's output")
        return [], f"{note}; {held}", ""
    problems = [
        f"{repo.removesuffix('/.git')}: git history reached by {kind} holds the reference solution's output "
        f"(blob {sha[:10]}), which {PREMISE_FIELD} = {premise} does not declare as the task's premise"
        for repo, kind, sha in leaks
    ]
    fix = (
        f" (if recovering it is the task, declare how it is reached: [environment] {PREMISE_FIELD} = "
        f"{sorted({k for _, k, _ in leaks} | set(premise))}; else remove it from the environment)"
    )
    return problems, "", fix


async def gate_no_leaks(s: GateContext) -> tuple[bool, str]:
    """Gate 5: tests, solution and git history beyond HEAD are unreachable from the agent's sandbox."""
    task, problems = s.task, []
    workdir = shlex.quote(task.environment.workdir)
    hidden = ["/tests", "/solution", "/logs/verifier"]
    if task.path is not None:
        hidden += [str(task.path), str(task.path / "tests"), str(task.path / "solution")]
    if task.grader.tests_dir is not None:
        hidden.append(str(task.grader.tests_dir))
    async with closing(await (await s.prepare()).fork()) as agent:
        # an empty /tests or /logs mount point is fine; any content in it, or any host path of the task, is not
        reach = await agent.exec(
            "for p in "
            + " ".join(shlex.quote(h) for h in hidden)
            + '; do { [ -f "$p" ] || [ -n "$(ls -A "$p" 2>/dev/null)" ]; } && echo "$p"; done; true',
            timeout_sec=30,
        )
        problems += [f"{p} is reachable from the agent's sandbox" for p in reach.preview.split()]
        lines = _distinctive_lines(task, s.cfg.leak_min_line_chars)
        if lines:
            end = f"FF_PATTERNS_{uuid.uuid4().hex}"
            patterns = "\n".join(lines)
            found = await agent.exec(
                f"grep -rlFf - -- {workdir} 2>/dev/null <<'{end}'\n{patterns}\n{end}\ntrue", timeout_sec=60
            )
            copies = [f for f in found.preview.split() if f not in s.changed]
            problems += [f"{f} contains lines of the reference solution" for f in copies]
        git = await agent.exec(CHECK_GIT, timeout_sec=120)
        left = [f"{repo}: {finding}" for repo, finding in git_findings(git.preview)]
        answers = None
        if left and task.metadata.get(KEEP_FIELD):
            patterns = await _answer_lines(s)
            if patterns:
                found = await agent.exec(answer_in_git(patterns), timeout_sec=300)
                answers = [line.split("\t") for line in found.preview.splitlines() if line.count("\t") == 2]
    note = fix = ""
    if left and task.metadata.get(KEEP_FIELD):
        leaks, note, fix = _judge_kept_history(task, left, answers)
        problems += leaks
    else:
        problems += left
        fix = (
            f" (task preparation strips git history beyond HEAD, fireflash.tasks.git_strip; a task that "
            f"needs it sets [environment] {KEEP_FIELD} = true)"
        ) if left else ""
    if problems:
        shown = "; ".join(problems[:50]) + (f"; ... and {len(problems) - 50} more" if len(problems) > 50 else "")
        shown += fix
        return False, shown
    return True, note or "tests, solution and git history beyond HEAD are unreachable"
