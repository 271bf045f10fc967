"""The unbiased pass@k estimator (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1).

With n trials of a task of which c solved it, the probability that at least one of k trials drawn without
replacement solves it is

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n-c+1}^{n} (1 - k / i)

The product form avoids huge binomials. pass@1 reduces to c / n, so Pass@1 averaged over 5 trials per
task (RECIPE.md §6) is the mean of c / n over tasks.
"""

from __future__ import annotations

from collections.abc import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task from ``n`` trials with ``c`` solves.

    Raises:
        ValueError: ``n < 1``, ``c`` outside [0, n] or ``k`` outside [1, n] (pass@k needs at least k trials).
    """
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass@k needs n >= 1 trials and 0 <= c <= n solves; got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n trials; got k={k}, n={n} (raise evaluation.trials_per_task)")
    if n - c < k:  # every draw of k trials contains a solve
        return 1.0
    prob_all_fail = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_fail *= 1.0 - k / i
    return 1.0 - prob_all_fail


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float:
    """Mean pass@k over tasks, each given as ``(n trials, c solves)``.

    Raises:
        ValueError: no tasks, or a task with fewer than ``k`` trials (see ``pass_at_k``).
    """
    if not counts:
        raise ValueError("mean_pass_at_k needs at least one task")
    return sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)
