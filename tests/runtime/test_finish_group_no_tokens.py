"""finish_group never queues a group whose attempts sampled no token: the trainer refuses such a step
(training.batch.NoSampledTokens), so the group is dropped as zero-signal even when zero-signal groups train."""

import pytest

from fireflash.protocols import Score, Segment, Trajectory
from fireflash.rl.config import ObjectiveConfig
from fireflash.rollout.attempts import AttemptOutcome
from fireflash.runtime.groups import finish_group

pytestmark = pytest.mark.unit


def _outcome(i: int, reward: float, sampled: bool) -> AttemptOutcome:
    mask = [0, 0, 1, 1] if sampled else [0, 0, 0, 0]
    segment = Segment(token_ids=[5, 6, 7, 8], loss_mask=mask, rollout_logprobs=[-0.5 * m for m in mask],
                      topk_ids=[[7] if m else [] for m in mask], topk_logprobs=[[-0.5] if m else [] for m in mask],
                      weight_version=[0 if m else -1 for m in mask])
    return AttemptOutcome(task_id="t", attempt_id=f"t/{i}", trajectory=Trajectory(task_id="t", attempt_id=f"t/{i}", segments=[segment]),
                          score=Score(reward=reward, solved=reward == 1.0), tries=1)


@pytest.mark.parametrize("discard_zero_signal", [True, False])
def test_a_group_without_sampled_tokens_never_reaches_the_trainer(discard_zero_signal):
    # rewards differ (a flaky grader, a sandbox that changed under it): advantages exist, a gradient does not
    unsampled = [_outcome(0, 1.0, sampled=False), _outcome(1, 0.0, sampled=False)]
    verdict = finish_group("t", unsampled, ObjectiveConfig(), discard_zero_signal)
    assert verdict.kind == "zero_signal"
    sampled = [_outcome(0, 1.0, sampled=True), _outcome(1, 0.0, sampled=False)]
    assert finish_group("t", sampled, ObjectiveConfig(), discard_zero_signal).kind == "train"
