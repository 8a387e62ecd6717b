"""The seed table: no world is used for two purposes, for any run seed."""

from __future__ import annotations

import itertools

import pytest

from messages.train import TrainRequest
from method import seeds


def test_no_two_seed_ranges_overlap_for_any_run_seed() -> None:
    ranges = [(s, r) for s in seeds.RUN_SEEDS for r in seeds.table(s)]
    for (s1, a), (s2, b) in itertools.combinations(ranges, 2):
        if a.name == b.name == "held_out":
            continue  # one held-out pool for every run seed: it only reports, never trains
        overlap = a.worlds.start < b.worlds.stop and b.worlds.start < a.worlds.stop
        assert not overlap, f"seed {s1} {a.name} {a.worlds} overlaps seed {s2} {b.name} {b.worlds}"


def test_the_learner_held_out_default_is_the_table_held_out_range() -> None:
    held_out = next(r for r in seeds.table(0) if r.name == "held_out").worlds
    assert TrainRequest.__dataclass_fields__["eval_seed"].default == held_out.start


def test_a_request_past_a_range_is_refused_not_spilled_into_the_next() -> None:
    assert seeds.code_seeds(3, 2) == [503_000, 503_001]
    with pytest.raises(ValueError, match="code_episodes is at most 1000"):
        seeds.code_seeds(0, 1001)
    with pytest.raises(ValueError, match="train_worlds is at most 10000"):
        seeds.training_pool(0, 10_001)
