"""The nine gate checks: each takes a ``GateContext`` and returns (passed, detail) (RECIPE.md §3);
passed is None when the gate had nothing to check (reported as skipped, not as passed).

Gate 1 leaves the reference-solved attempt in the context; gates 5-9 read it. See ``gates`` for what
each gate means and ``validate_task`` for how they run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fireflash.curation.checks_leaks import gate_no_leaks
from fireflash.curation.checks_scoring import (
    gate_deterministic,
    gate_malformed_ok,
    gate_not_fragile,
    gate_null_zero,
)
from fireflash.curation.checks_setup import gate_offline, gate_reference, gate_starts, gate_stated
from fireflash.curation.context import GateContext

GATES: dict[int, Callable[[GateContext], Awaitable[tuple[bool | None, str]]]] = {
    1: gate_reference,
    2: gate_stated,
    3: gate_offline,
    4: gate_starts,
    5: gate_no_leaks,
    6: gate_null_zero,
    7: gate_not_fragile,
    8: gate_malformed_ok,
    9: gate_deterministic,
}
