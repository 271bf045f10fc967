"""Grader fuzz: score many malformed workspaces, count crashes and non-identical rescorings.

Gate 8 fuzzes a few workspaces per task; this runs the same mutations at scale over a task set
(issue 4: >= 1,000 malformed workspaces, 0 crashes, identical inputs → identical scores). Each
workspace is one mutation (``fuzz.MUTATIONS``) applied, with its own seed, to all or one of the files
a solution produces, starting from either the reference-solved state or the untouched environment.

    summary = await fuzz_graders(tasks, backend, cases=1000, repeats=2)
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

from fireflash.curation.checks_scoring import CRASH_REASONS
from fireflash.curation.context import GateContext
from fireflash.curation.fuzz import MUTATIONS, apply_mutation
from fireflash.grading.graders import make_grader
from fireflash.protocols import SandboxBackend, Task
from fireflash.tasks.config import GatesConfig


async def fuzz_graders(
    tasks: list[Task], backend: SandboxBackend, cases: int, repeats: int = 2
) -> dict[str, Any]:
    """Score ``cases`` malformed workspaces (spread evenly over ``tasks``), each ``repeats`` times.

    Returns:
        A JSON-able summary: workspaces, scorings, crashes (grader raised or gave a crash reason),
        nondeterministic (rescorings that differ), counts per mutation and per reason, wall seconds.

    Raises:
        ValueError: no tasks, or ``repeats`` < 1.
    """
    if not tasks or repeats < 1:
        raise ValueError("fuzz_graders needs at least one task and repeats >= 1")
    per_task = math.ceil(cases / len(tasks))
    start = time.monotonic()
    crashes: list[str] = []
    nondeterministic: list[str] = []
    reasons: Counter[str] = Counter()
    done = 0
    try:
        for task in tasks:
            ctx = GateContext(task, backend, GatesConfig())
            grader = make_grader(task.grader)
            if task.solution_path is not None:
                await ctx.run_reference()
            else:
                await ctx.prepare()
            files = await ctx.expected_files() or [f"{task.environment.workdir}/output.txt"]
            for i in range(min(per_task, cases - done)):
                mutation = MUTATIONS[i % len(MUTATIONS)]
                variant = (i // len(MUTATIONS)) % (len(files) + 1)
                targets = files if variant == len(files) else [files[variant]]
                base = ctx.solved if (i // 2) % 2 == 0 and ctx.solved is not None else ctx.parent
                label = f"{task.id}#{i}:{mutation}:{','.join(targets)}"
                fork = await base.fork()
                try:
                    await apply_mutation(fork, mutation, targets, seed=i)
                    seen = []
                    for _ in range(repeats):
                        try:
                            score = await grader.grade(task, fork)
                        except Exception as e:  # noqa: BLE001 - counting crashes is the point of the fuzz
                            crashes.append(f"{label}: {type(e).__name__}: {e}"[:300])
                            break
                        reasons[score.reason or "ok"] += 1
                        if score.reason in CRASH_REASONS:
                            crashes.append(f"{label}: reason={score.reason} {score.log[-150:]!r}")
                        seen.append(
                            (
                                score.reward,
                                score.solved,
                                score.checks_passed,
                                score.checks_total,
                                score.reason,
                            )
                        )
                    if len(set(seen)) > 1:
                        nondeterministic.append(f"{label}: {seen}")
                finally:
                    await fork.close()
                done += 1
            for sandbox in (ctx.solved, ctx.parent):
                if sandbox is not None:
                    await sandbox.close()
    finally:
        await backend.close()
    return {
        "tasks": len(tasks),
        "workspaces": done,
        "scorings": sum(reasons.values()),
        "repeats": repeats,
        "crashes": len(crashes),
        "nondeterministic": len(nondeterministic),
        "reasons": dict(reasons),
        "examples": (crashes + nondeterministic)[:20],
        "wall_sec": round(time.monotonic() - start, 1),
    }
