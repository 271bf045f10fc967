"""MetricsWriter with TensorBoard on: the event files hold every numeric metric of every step; read_metrics names
bad lines by file and line and skips a torn last one; a fresh run never overwrites an earlier one."""

from __future__ import annotations

import logging
import math
import re

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fireflash.tracking import (
    MetricsError,
    MetricsWriter,
    RunDirInUse,
    read_metrics,
    refuse_existing_run,
)

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


def test_a_truncated_last_line_is_skipped_with_a_warning(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "x": 0.5}\n{"step": 2, "x": 0.6}\n{"step": 3, "x')  # a run killed mid-write
    with caplog.at_level(logging.WARNING, logger="fireflash.tracking"):
        assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]
    assert f"{path}:3: skipped a truncated last line" in caplog.text


@pytest.mark.parametrize("text,line,what", [
    ('{"step": 1}\n{"step": 2, "x\n{"step": 3}\n', 2, "not valid JSON"),
    ('{"step": 1}\n\n{"x": 0.5}\n', 3, 'a metrics row needs an integer "step"'),
    ('[1, 2]\n{"step": 2}\n', 1, 'a metrics row needs an integer "step"'),
    ('{"step": "1"}\n', 1, 'a metrics row needs an integer "step"'),
])
def test_a_malformed_line_is_named_by_file_and_line(tmp_path, text, line, what):
    path = tmp_path / "metrics.jsonl"
    path.write_text(text)
    with pytest.raises(MetricsError, match=re.escape(f"{path}:{line}: {what}")):
        read_metrics(tmp_path)


def test_resume_names_a_malformed_line_and_keeps_the_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"no_step": 1}\n{"step": 3}\n')
    writer = MetricsWriter(tmp_path, tensorboard=False)
    with pytest.raises(MetricsError, match=re.escape(f"{path}:2: a metrics row needs an integer \"step\"")):
        writer.drop_after(1)
    writer.close()
    assert path.read_text() == '{"step": 1}\n{"no_step": 1}\n{"step": 3}\n'


def test_what_counts_as_an_earlier_run(tmp_path):
    (tmp_path / "oracle").mkdir()
    (tmp_path / "metrics.jsonl").write_text("")  # a run killed before its first step, or the SFT oracle set alone
    refuse_existing_run(tmp_path, "sft.run_dir")
    (tmp_path / "checkpoints" / "step-000001").mkdir(parents=True)
    (tmp_path / "checkpoints" / "latest").write_text("step-000001")
    with pytest.raises(RunDirInUse, match=re.escape(f"{tmp_path} already holds a run (checkpoints/); pass --resume "
                                                    "to continue it or set sft.run_dir to a new directory")):
        refuse_existing_run(tmp_path, "sft.run_dir")
