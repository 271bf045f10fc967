"""MetricsWriter with TensorBoard on: the event files hold every numeric metric of every step."""

from __future__ import annotations

import math

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fireflash.runtime.tracking import MetricsWriter, read_metrics

pytestmark = pytest.mark.unit


def test_tensorboard_events_hold_the_logged_scalars(tmp_path):
    rows = {
        1: {"rollout/reward_mean": 0.25, "queue/groups": 2.0, "groups/lost_to_infrastructure": 0.0, "entropy/mean": math.nan},
        2: {"rollout/reward_mean": 0.5, "queue/groups": 3.0, "groups/lost_to_infrastructure": 1.0, "entropy/mean": 0.4,
            "entropy/warning": True, "note": "text"},
    }
    writer = MetricsWriter(tmp_path, tensorboard=True)
    for step, metrics in rows.items():
        writer.write(step, metrics)
    writer.close()

    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    # numbers only: the step itself, but not bools, strings or non-finite values (jsonl keeps those)
    assert tags == {"step", "rollout/reward_mean", "queue/groups", "groups/lost_to_infrastructure", "entropy/mean"}
    for tag in tags - {"step", "entropy/mean"}:
        logged = [(e.step, e.value) for e in acc.Scalars(tag)]
        assert logged == [(step, pytest.approx(m[tag])) for step, m in rows.items()], tag
    assert [(e.step, e.value) for e in acc.Scalars("entropy/mean")] == [(2, pytest.approx(0.4))]
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]  # metrics.jsonl is written alongside
