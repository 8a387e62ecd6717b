"""The seed table: no world is used for two purposes, for any run seed."""

from __future__ import annotations

import dataclasses
import inspect
import itertools

import pytest
from helpers import ROOT

from messages.train import TrainRequest
from method import seeds


def test_no_two_seed_ranges_overlap_for_any_run_seed() -> None:
    ranges = [(s, r) for s in seeds.RUN_SEEDS for r in seeds.table(s)]
    for (s1, a), (s2, b) in itertools.combinations(ranges, 2):
        if a.name == b.name and a.name in seeds.SHARED:
            continue  # one range for every run seed (held-out worlds, the arbiter's)
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


def test_a_training_reset_retries_on_worlds_of_the_tables_retry_rows() -> None:
    # Setup that always dies: the env tries the asked world and SETUP_RETRIES more, each
    # RETRY_STRIDE further on, all inside the table's retry rows and no other row.
    from rl.configs import collect_wood_with_coded
    from rl.rl_env import SetupError, SubtaskEnv

    config = dataclasses.replace(
        collect_wood_with_coded(),
        setup_code="def run(skills):\n    raise ValueError('no')\n    yield 'noop'\n",
    )
    env = SubtaskEnv(
        config, setup_retries=seeds.SETUP_RETRIES, setup_retry_stride=seeds.RETRY_STRIDE
    )
    pool = seeds.training_pool(7, 100)
    with pytest.raises(SetupError) as caught:
        env.reset(seed=pool[5])
    last = caught.value.seed
    assert last == pool[5] + seeds.SETUP_RETRIES * seeds.RETRY_STRIDE
    rows = [r.name for r in seeds.table(7) if last in r.worlds]
    assert rows == [f"retry {seeds.SETUP_RETRIES}"]


def test_the_learner_retries_with_the_tables_stride() -> None:
    from actors import learner

    assert learner.SETUP_RETRIES == seeds.SETUP_RETRIES
    source = inspect.getsource(learner.LearnerActor._training_envs)
    assert "setup_retry_stride=seeds.RETRY_STRIDE" in source


def test_every_benchmark_variant_reports_on_the_runs_final_worlds() -> None:
    from benchmarks.crafter_bench import protocol
    from method.settings import load
    from rlgpt.driver import task_of

    assert protocol.final_worlds(3, 100) == seeds.final_seeds(3, 100)
    settings = load(str(ROOT / "rlgpt" / "configs" / "crafter.toml"))
    assert task_of(settings).eval_seeds == protocol.final_worlds(settings.run.seed, 100)
    for row in seeds.table(0):
        if row.name != "final":
            assert not set(protocol.final_worlds(0, 100)) & set(row.worlds)
