"""The task mix's source draw (issue 30 deliverable 4): shares track the weights, seeded, resumable."""

from __future__ import annotations

import json
import random

import pytest

from fireflash.curation.mix import SourceMix
from fireflash.protocols import Task

pytestmark = pytest.mark.unit

WEIGHT_SETS = [(0.52, 0.48), (0.5, 0.5), (0.9, 0.1), (1, 1, 1), (5, 3, 2), (0.7, 0.2, 0.05, 0.05), (1, 2, 3, 4, 5)]


def _mix(weights, seed=0) -> SourceMix:
    names = [f"s{i}" for i in range(len(weights))]
    return SourceMix({n: [f"{n}-a", f"{n}-b"] for n in names}, dict(zip(names, weights)), seed)


@pytest.mark.parametrize("weights", WEIGHT_SETS, ids=str)
def test_every_prefix_of_the_draws_is_within_one_group_of_the_weights(weights):
    mix, total = _mix(weights), sum(weights)
    for n in range(1, 2001):
        mix.draw(n - 1)
        for s, w in zip(mix.sources, weights):
            # after n groups each source has its share of n, to within one group (tolerance stated in mix.py)
            assert abs(mix.drawn[s] - w / total * n) < 1.0, (n, mix.drawn)
    assert sum(mix.drawn.values()) == 2000


def test_the_deficit_draw_is_much_closer_to_the_weights_than_iid_draws():
    # the reason for a deficit draw: after 400 groups at 52/48, i.i.d. draws are off by ~10 groups
    rng, iid_errors = random.Random(0), []
    for _ in range(200):
        swe = sum(rng.random() < 0.48 for _ in range(400))
        iid_errors.append(abs(swe - 0.48 * 400))
    mix = _mix((0.52, 0.48))
    for g in range(400):
        mix.draw(g)
    assert abs(mix.drawn["s1"] - 0.48 * 400) < 1 < sorted(iid_errors)[100]  # below the i.i.d. median error


def test_weights_are_normalised_and_reported_next_to_the_shares():
    mix = SourceMix({"agentic": ["a1", "a2"], "swe": ["s1"]}, {"agentic": 52, "swe": 48}, seed=0)
    assert mix.weights == {"agentic": 0.52, "swe": 0.48}
    for g in range(25):
        mix.draw(g)
    mix.count_trained(["s1", "a2", "a1"])
    m = mix.metrics()
    assert m["mix/agentic/weight"] == 0.52 and m["mix/swe/weight"] == 0.48
    assert m["mix/agentic/drawn"] + m["mix/swe/drawn"] == 25 and m["mix/swe/drawn"] == 12
    assert m["mix/swe/drawn_share"] == 12 / 25
    assert (m["mix/agentic/trained"], m["mix/swe/trained"]) == (2, 1) and m["mix/swe/trained_share"] == 1 / 3
    again = mix.metrics()  # a window: counts since the last row, shares over the run
    assert again["mix/swe/drawn"] == 0 and again["mix/swe/trained"] == 0 and again["mix/swe/drawn_share"] == 12 / 25


def test_draws_are_deterministic_by_seed_and_ties_depend_on_it():
    def sequence(seed):
        mix = _mix((1, 1, 1), seed)
        return [mix.draw(g) for g in range(60)]

    assert sequence(3) == sequence(3)
    assert sequence(3) != sequence(4)  # equal weights tie every round; the seed breaks the ties


def test_a_resumed_mix_draws_the_same_sequence_as_the_uninterrupted_one():
    straight = _mix((0.52, 0.48), seed=7)
    expected = [straight.draw(g) for g in range(300)]
    first = _mix((0.52, 0.48), seed=7)
    head = [first.draw(g) for g in range(123)]
    first.count_trained(["s0-a", "s1-b"])
    saved = json.loads(json.dumps(first.state_dict()))  # through the checkpoint cursor's JSON
    resumed = _mix((0.52, 0.48), seed=7)
    resumed.load_state_dict(saved)
    assert resumed.trained == {"s0": 1, "s1": 1}
    assert head + [resumed.draw(g) for g in range(123, 300)] == expected


def test_sources_are_read_from_the_pool_tasks():
    tasks = [Task(id="a", instruction="x", metadata={"source": "agentic"}),
             Task(id="s", instruction="x", metadata={"source": "swe"})]
    mix = SourceMix.from_tasks(tasks, {"agentic": 1, "swe": 1}, seed=0)
    assert mix.task_ids == {"agentic": ["a"], "swe": ["s"]} and mix.source_of("s") == "swe"
    with pytest.raises(ValueError, match=r"task 'b' has source None, not one of tasks.mix's \['agentic', 'swe'\]"):
        SourceMix.from_tasks([*tasks, Task(id="b", instruction="x")], {"agentic": 1, "swe": 1}, seed=0)


@pytest.mark.parametrize("task_ids,weights,error", [
    ({"a": ["t"], "b": []}, {"a": 1, "b": 1}, r"tasks.mix.b: no task in the pool; check its paths"),
    ({"a": ["t"], "b": ["t"]}, {"a": 1, "b": 1}, r"task 't' is in tasks.mix.a and tasks.mix.b; list it under one"),
    ({"a": ["t"]}, {"a": 0.0}, r"tasks.mix.a.weight = 0.0: must be > 0; drop the source"),
    ({"a": ["t"]}, {"a": 1, "b": 1}, r"give every \[tasks.mix\] source its paths and weight"),
], ids=["empty-source", "task-in-two", "zero-weight", "unweighted"])
def test_a_mix_that_cannot_draw_is_refused_by_name(task_ids, weights, error):
    with pytest.raises(ValueError, match=error):
        SourceMix(task_ids, weights, seed=0)
