"""The unbiased pass@k estimator against values computed by hand from 1 - C(n-c, k) / C(n, k)."""

import pytest

from fireflash.evaluation.passk import mean_pass_at_k, pass_at_k

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 2 / 5),  # pass@1 = c / n
        (5, 2, 2, 1 - 3 / 10),  # C(3,2)=3, C(5,2)=10
        (5, 1, 3, 1 - 4 / 10),  # C(4,3)=4, C(5,3)=10
        (10, 3, 5, 1 - 21 / 252),  # C(7,5)=21, C(10,5)=252
        (5, 0, 3, 0.0),
        (5, 5, 5, 1.0),
        (4, 2, 3, 1.0),  # n - c < k: every 3 of 4 trials include a solve
    ],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (3, 4, 1), (3, -1, 1), (3, 1, 4), (3, 1, 0)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass@"):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_weighs_each_task_equally():
    # tasks with 5 trials each: 2/5, 5/5, 0/5 solved → pass@1 mean (0.4 + 1 + 0) / 3
    assert mean_pass_at_k([(5, 2), (5, 5), (5, 0)], 1) == pytest.approx(1.4 / 3)
    # pass@2 of the same: (0.7 + 1 + 0) / 3
    assert mean_pass_at_k([(5, 2), (5, 5), (5, 0)], 2) == pytest.approx(1.7 / 3)
    with pytest.raises(ValueError, match="at least one task"):
        mean_pass_at_k([], 1)
