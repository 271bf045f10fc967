"""The held-out guard: SFT and RL refuse tasks of the bundled ``heldout`` split (``check_not_heldout``)."""

from __future__ import annotations

from fireflash.protocols import Task
from fireflash.tasks.loader import bundled_tasks


class HeldoutLeak(ValueError):
    """Tasks to train on include held-out tasks (they must never be trained on)."""


def check_not_heldout(tasks: list[Task], field: str, allow_with: str | None = None) -> None:
    """Raise ``HeldoutLeak`` naming the tasks if any id or path belongs to the bundled held-out split.

    Args:
        field: the config field the tasks came from (``sft.tasks``, ``tasks.paths``), named in the message.
        allow_with: the override that permits it (``tasks.allow_heldout=true``), offered in the message; None
            when nothing does.
    """
    heldout = bundled_tasks("heldout")
    ids = {t.id for t in heldout}
    paths = {t.path.resolve() for t in heldout if t.path}
    leaked = sorted(t.id for t in tasks if t.id in ids or (t.path and t.path.resolve() in paths))
    if leaked:
        fix = "use bundled:train or your own training tasks"
        fix += f", or set {allow_with} to train on them anyway" if allow_with else ""
        raise HeldoutLeak(f"{field} includes held-out tasks {leaked}; {fix}")
