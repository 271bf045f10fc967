"""The records that flow between stages: validation and exact JSON round-trips."""

import math

import pytest
from pydantic import ValidationError

from fireflash.protocols import (
    SCHEMA_VERSION, Group, Message, Score, Segment, Status, ToolCall, Trajectory,
)

pytestmark = pytest.mark.unit


def _segment(n_prompt=3, sampled=((11, -0.25, 0), (12, -1.5, 1))):
    ids = list(range(1, n_prompt + 1)) + [t for t, _, _ in sampled]
    return Segment(
        token_ids=ids,
        loss_mask=[0] * n_prompt + [1] * len(sampled),
        rollout_logprobs=[0.0] * n_prompt + [lp for _, lp, _ in sampled],
        topk_ids=[[]] * n_prompt + [[t, 7] for t, _, _ in sampled],
        topk_logprobs=[[]] * n_prompt + [[lp, -3.0] for _, lp, _ in sampled],
        weight_version=[-1] * n_prompt + [v for _, _, v in sampled],
    )


def _trajectory():
    return Trajectory(
        task_id="t1", attempt_id="t1/0", segments=[_segment(), _segment(2)],
        messages=[Message(role="user", content="do it"),
                  Message(role="assistant", content="", reasoning="think",
                          tool_calls=[ToolCall(id="c0", name="Bash", arguments={"command": "ls -la", "timeout": 5})]),
                  Message(role="tool", content="total 0\n\ufffd", tool_call_id="c0")],
        status=Status.TRUNCATED, finish_reason="max_turns", n_turns=2, timings_sec={"engine": 1.25},
        # a float that is not exactly representable in decimal must survive the round-trip bit-for-bit
    ).model_copy(update={"metadata": {"few_shot": False, "x": 0.1 + 0.2}})


def test_trajectory_json_roundtrip_is_exact(tmp_path):
    traj = _trajectory()
    path = tmp_path / "a" / "traj.json"
    traj.save(path)
    back = Trajectory.load(path)
    assert back == traj
    assert back.metadata["x"] == 0.1 + 0.2 and back.status is Status.TRUNCATED
    assert back.segments[0].rollout_logprobs[-1] == -1.5
    assert back.schema_version == SCHEMA_VERSION


def test_sampled_token_count_spans_segments():
    assert _trajectory().n_sampled_tokens == 4


def test_segment_arrays_must_align():
    seg = _segment().model_dump()
    seg["loss_mask"] = seg["loss_mask"][:-1]
    with pytest.raises(ValidationError, match="loss_mask has 4 entries, token_ids has 5"):
        Segment.model_validate(seg)


def test_newer_schema_is_refused():
    data = _trajectory().model_dump(mode="json")
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValidationError, match="newer than this FireFlash"):
        Trajectory.model_validate(data)


def test_unknown_field_is_refused():
    with pytest.raises(ValidationError, match="Extra inputs"):
        Trajectory.model_validate({"task_id": "t", "attempt_id": "a", "segmnts": []})


@pytest.mark.parametrize("reward", [-0.1, 1.01, math.nan])
def test_score_reward_range(reward):
    with pytest.raises(ValidationError):
        Score(reward=reward, solved=False)


def test_group_alignment():
    t = _trajectory()
    with pytest.raises(ValidationError, match="2 trajectories, 1 scores"):
        Group(task_id="t1", trajectories=[t, t], scores=[Score(reward=1.0, solved=True)])
    with pytest.raises(ValidationError, match="1 advantages, 2 scores"):
        Group(task_id="t1", trajectories=[t, t], scores=[Score(reward=1.0, solved=True)] * 2, advantages=[0.5])
