"""What the gates of one task share: its parent sandbox, the reference-solved attempt, the files a
solution is expected to produce (RECIPE.md §3; used by ``checks`` and ``fuzz_run``)."""

from __future__ import annotations

import contextlib
import shlex
import uuid
from collections.abc import AsyncIterator
from pathlib import Path, PurePosixPath

from fireflash.curation.references import referenced_requirements
from fireflash.curation.replay import replay_solution
from fireflash.grading.graders import IMPORT_ERROR, NOT_RUN, make_grader
from fireflash.protocols import Sandbox, SandboxBackend, Score, Task
from fireflash.tasks.config import GatesConfig


class GateContext:
    """What gates share: the parent, the reference-solved attempt, the files the reference changes."""

    def __init__(self, task: Task, backend: SandboxBackend, cfg: GatesConfig) -> None:
        self.task, self.backend, self.cfg = task, backend, cfg
        self.offline_env = task.environment.model_copy(update={"allow_internet": False})
        self.parent: Sandbox | None = None
        self.solved: Sandbox | None = None
        self.reference_score: Score | None = None
        self.reference_log = ""  # what the reference's commands printed (gate 3 looks for network failures)
        self._replay_log = ""
        self.changed: list[str] = []
        self.free_checks: list[str] = []  # checks gate 6's probes pass: no partial credit (GateReport)
        self._expected: list[str] | None = None
        self._not_run: tuple[str | None] | None = None  # verifier_not_run's verdict, once found
        self.grader = make_grader(task.grader)

    async def prepare(self) -> Sandbox:
        """The task's parent environment, built offline on first use (a fresh name: never a cached parent)."""
        if self.parent is None:
            self.parent = await self.backend.prepare(
                self.offline_env, f"{self.task.id}-{uuid.uuid4().hex[:8]}"
            )
        return self.parent

    async def replay(self, script: Path) -> Sandbox:
        """A new attempt (fork of the parent) after replaying ``script`` as Bash tool calls; caller closes it."""
        attempt = await (await self.prepare()).fork()
        results = await replay_solution(
            attempt,
            script,
            self.task.environment.workdir,
            self.task.metadata.get("solution_env"),
            self.task.limits.agent_timeout_sec,
        )
        self._replay_log = "\n".join(r.preview for r in results)
        return attempt

    async def run_reference(self) -> Score:
        """Replay solve.sh into ``self.solved``, grade it, and record the workspace files it changed.

        Raises:
            ValueError: the task has no reference solution.
        """
        task = self.task
        if task.solution_path is None:
            raise ValueError(f"task {task.id}: no reference solution (solution/solve.sh)")
        self.solved = await self.replay(task.solution_path)
        self.reference_log = self._replay_log
        self.reference_score = await self.grade(self.solved)
        workdir = PurePosixPath(task.environment.workdir)
        changed = []
        for raw in await self.solved.diff():
            p = PurePosixPath("/") / raw
            if p.is_relative_to(workdir) and not {"__pycache__", ".git"} & set(p.parts) and p != workdir:
                changed.append(shlex.quote(str(p)))
        if changed:
            # directories the reference created are not files to fake; deleted paths stay listed
            listing = await self.solved.exec(
                f'for p in {" ".join(changed)}; do [ -d "$p" ] || echo "$p"; done; true', timeout_sec=30
            )
            self.changed = sorted(set(listing.preview.split()))
        return self.reference_score

    async def verifier_not_run(self) -> str | None:
        """Why the task's verifier never ran (None: it ran), judged once: on the reference-solved state
        (replayed now if gate 1 has not), else on a do-nothing fork with only the clear-cut signs
        (``graders.why_not_run``). Gates 1, 6, 8 and 9 fail on it (issue 26): scores of a verifier that never
        ran are all 0, which would pass "doing nothing scores 0", "junk does not crash" and "deterministic"."""
        if self._not_run is None:
            task = self.task
            if task.solution_path is not None and task.solution_path.is_file():
                score = self.reference_score or await self.run_reference()
                self._not_run = (not_run_reason(score),)
            else:
                async with closing(await (await self.prepare()).fork()) as probe:
                    score = await self.grade(probe)
                self._not_run = (not_run_reason(score) if score.reason in (NOT_RUN, "grader_error") else None,)
        return self._not_run[0]

    async def grade(self, sandbox: Sandbox) -> Score:
        """Score ``sandbox`` with the task's grader (which grades a fork of it)."""
        return await self.grader.grade(self.task, sandbox)

    async def expected_files(self) -> list[str]:
        """Workspace files a solution is expected to produce: changed by the reference or named by the
        tests; directories of the environment (and parents of other expected paths) are left out."""
        if self._expected is not None:
            return self._expected
        workdir = PurePosixPath(self.task.environment.workdir)
        paths = set(self.changed)
        if self.task.grader.tests_dir is not None:
            for req in referenced_requirements(self.task.grader.tests_dir):
                if req.kind != "path" or "/" not in req.value or req.value.endswith("/"):
                    continue
                p = PurePosixPath(req.value)
                p = p if p.is_absolute() else workdir / p
                if p.is_relative_to(workdir) and p != workdir:
                    paths.add(str(p))
        paths = {p for p in paths if not any(q.startswith(p + "/") for q in paths)}
        if paths:
            quoted = " ".join(shlex.quote(p) for p in sorted(paths))
            dirs = await (await self.prepare()).exec(
                f'for p in {quoted}; do [ -d "$p" ] && echo "$p"; done; true', timeout_sec=30
            )
            paths -= set(dirs.preview.split())
        self._expected = sorted(paths)
        return self._expected


@contextlib.asynccontextmanager
async def closing(sandbox: Sandbox) -> AsyncIterator[Sandbox]:
    try:
        yield sandbox
    finally:
        await sandbox.close()


def fmt(score: Score) -> str:
    return f"reward={score.reward:.3f} checks={score.checks_passed}/{score.checks_total}" + (
        f" reason={score.reason}" if score.reason else ""
    )


NOT_RUN_REASONS = {NOT_RUN, "grader_error", "no_report", "bad_report", "no_checks"}


def not_run_reason(score: Score) -> str | None:
    """Why the verifier did not run, from its score of a state that should pass (the reference-solved one):
    a not-run, crash or missing-report reason, or every check failing on a test file that cannot be
    imported (a module the verifier's Python lacks). None: the tests ran (whatever they found)."""
    if score.solved:
        return None
    last = [ln.strip() for ln in score.log.splitlines() if ln.strip()]
    if score.reason in NOT_RUN_REASONS:
        grader = [ln for ln in last if ln.startswith("[grader]")]
        return f"{score.reason}: {(grader or last or ['no output'])[-1][:300]}"
    imports = IMPORT_ERROR.findall(score.log)
    if score.checks_passed == 0 and imports:
        return f"a test file failed to import: {imports[-1].strip()[:300]}"
    return None
