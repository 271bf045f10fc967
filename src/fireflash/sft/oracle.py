"""Oracle trajectories: reference solutions replayed through the harness as real tool calls (issue #10).

A task's ``solution/solve.sh`` and ``solution/alt_*.sh`` become assistant turns in the exact tool-call
convention of training (rendered by the harness's own ``ChatRenderer``, after its ``assistant_prefix``). Each is run
through ``run_attempt`` with a ``ScriptedEngine`` in a real sandbox and graded with the task's own grader;
only passing trajectories are kept. The result is token-exact: the same chat template, fragments and
tool-result rendering as a sampled rollout, with ``loss_mask`` = 1 exactly on the assistant tokens.

Variants teach the convention rather than the answers (different but valid tool sequences):

- ``direct``: Bash(script) → submit
- ``look``: Bash(``ls -la WORKDIR``) → Bash(script) → submit
- ``script``: Write(``/tmp/solution.sh``, script) → Bash(``bash /tmp/solution.sh``) → submit
- ``check``: Bash(script) → Bash(``ls -la WORKDIR``) → submit
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fireflash.harness.rendering import ChatRenderer
from fireflash.harness.specs import SUBMIT_COMMAND
from fireflash.protocols import GenerateRequest, Task

VARIANTS = ("direct", "look", "script", "check")
SCRIPT_PATH = "/tmp/solution.sh"


class OracleError(ValueError):
    """A task cannot be turned into oracle trajectories (no solution, or a prefix mismatch)."""


@dataclass(frozen=True)
class ToolTurn:
    """One assistant turn: a single tool call."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class OraclePlan:
    """One oracle trajectory to replay: a task, a reference script and a variant's tool sequence."""

    task_id: str
    solution: str  # file name, e.g. solve.sh
    variant: str
    turns: tuple[ToolTurn, ...]


def solution_scripts(task: Task) -> dict[str, str]:
    """File name → shell script body (the first line's shebang removed) of every reference solution.

    Only the shebang goes: a ``#`` line further down may sit inside a heredoc the script writes.

    Raises:
        OracleError: the task has no ``solution/solve.sh``.
    """
    if task.solution_path is None or not task.solution_path.is_file():
        raise OracleError(f"task {task.id}: no reference solution (solution/solve.sh) to replay")
    files = [task.solution_path] + sorted(task.solution_path.parent.glob("alt_*.sh"))
    scripts = {}
    for f in files:
        lines = f.read_text().splitlines()
        body = "\n".join(lines[1:] if lines and lines[0].startswith("#!") else lines).strip()
        if body:
            scripts[f.name] = body
    return scripts


def variant_turns(variant: str, script: str, workdir: str) -> tuple[ToolTurn, ...]:
    """The tool calls of ``variant`` for ``script`` (the final ``submit`` included)."""
    bash = lambda command: ToolTurn("Bash", {"command": command})
    submit = bash(SUBMIT_COMMAND)
    if variant == "direct":
        return (bash(script), submit)
    if variant == "look":
        return (bash(f"ls -la {workdir}"), bash(script), submit)
    if variant == "script":
        return (ToolTurn("Write", {"file_path": SCRIPT_PATH, "content": script + "\n"}), bash(f"bash {SCRIPT_PATH}"), submit)
    if variant == "check":
        return (bash(script), bash(f"ls -la {workdir}"), submit)
    raise OracleError(f"sft.variants: unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")


def plans_for(tasks: Sequence[Task], variants: Sequence[str]) -> list[OraclePlan]:
    """Every (task, reference script, variant) combination, in a stable order.

    Raises:
        OracleError: a task has no solution, or a variant is unknown.
    """
    plans = []
    for task in tasks:
        for name, script in solution_scripts(task).items():
            for variant in variants:
                turns = variant_turns(variant, script, task.environment.workdir)
                plans.append(OraclePlan(task.id, name, variant, turns))
    return plans


def sampled_text(turn: ToolTurn, renderer: ChatRenderer, assistant_prefix: str) -> str:
    """What the policy itself must write for ``turn``: the rendered call after the harness's assistant prefix.

    The call is rendered by the harness's own ``ChatRenderer`` (the template that shows the model its earlier
    turns), so a demonstration is byte-identical to a sampled turn that makes the same call.

    Raises:
        OracleError: the prefix is not a prefix of the call (the convention cannot express this turn).
    """
    text = renderer.assistant_text("", [{"name": turn.name, "arguments": turn.arguments}])
    if not text.startswith(assistant_prefix):
        raise OracleError(
            f"harness.assistant_prefix = {assistant_prefix!r} does not start the rendered tool call {text[:40]!r}; "
            "use '' or a prefix of the template's tool-call text"
        )
    return text[len(assistant_prefix):]


class OracleScript:
    """The ``ScriptedEngine`` script of many oracle attempts at once: request id → the planned turn.

    Attempt ids are ``<prefix>/<task id>/t<index>#<try>`` (``run_trials``); the turn number comes from the
    request id's ``-turn<n>`` suffix, so retries replay from the first turn.
    """

    _ID = re.compile(r"/(?P<task>[^/]+)/t(?P<index>\d+)#\d+-turn(?P<turn>\d+)$")

    def __init__(self, plans: dict[str, list[OraclePlan]], renderer: ChatRenderer, assistant_prefix: str) -> None:
        self.plans, self.renderer, self.prefix = plans, renderer, assistant_prefix

    def __call__(self, request: GenerateRequest) -> str | None:
        m = self._ID.search(request.request_id)
        if m is None:
            raise OracleError(f"unexpected request id {request.request_id!r}")
        plan = self.plans[m["task"]][int(m["index"])]
        turn = int(m["turn"])
        return sampled_text(plan.turns[turn], self.renderer, self.prefix) if turn < len(plan.turns) else None


def index_plans(plans: Sequence[OraclePlan]) -> dict[str, list[OraclePlan]]:
    """Task id → its plans in order (trial index i replays plan i)."""
    out: dict[str, list[OraclePlan]] = {}
    for p in plans:
        out.setdefault(p.task_id, []).append(p)
    return out


def describe(plan: OraclePlan) -> dict[str, Any]:
    """JSON-able record of a plan, stored in the trajectory's metadata."""
    return {"task_id": plan.task_id, "solution": plan.solution, "variant": plan.variant, "n_turns": len(plan.turns)}
