"""The survival arbiter: a policy over the survival needs, asked by the task planner in
real composed Crafter episodes, and the same as a gymnasium env for PPO."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from helpers import ROOT

from episodes.arbiter import (
    CHECK,
    CODED,
    FLOOR,
    N_FEATURES,
    OPTIONS,
    ArbiterEnv,
    ArbiterHook,
    decision_point,
    features,
)
from episodes.composite import prepare_stages, run_composed
from knowledge import library, recipes
from knowledge.survival import arbiter_needs, survival_needs
from messages.task import Subtask
from skills.skills import Skills
from worlds.crafter_world import CrafterWorld

SEEDS = range(300_500_000, 300_500_006)  # the arbiter's training part, far from its runs


@pytest.fixture(scope="module")
def chain():
    world = CrafterWorld()
    stages = prepare_stages(library.coded_stages(recipes.chain("diamond")), world)
    needs = arbiter_needs()
    return world, stages, needs, prepare_stages([n.stage for n in needs], world)


def _play(chain, seed, hook, on_step=None, max_steps=3000):
    world, stages, needs, need_stages = chain
    goal = Subtask("diamond", "collect a diamond", goal={"diamond": 1}, max_steps=max_steps)
    return run_composed(
        world, stages, needs, goal, seed, wall_s=60, arbiter=hook, on_step=on_step,
        need_stages=need_stages,
    )  # fmt: skip


def _need_runs(episode) -> list[str]:
    names = set(ArbiterHook.needs)
    return [r.name for r in episode.stages if r.name in names]


def test_the_options_name_the_arbiters_needs_and_only_they_carry_no_threshold() -> None:
    names = [n.stage.subtask.name for n in arbiter_needs()]
    assert names == list(OPTIONS[2:])
    shipped = {n.stage.subtask.name for n in survival_needs()}
    assert {"defend", "evade"} == set(names) - shipped
    assert all(n.below == 0 for n in arbiter_needs() if n.stage.subtask.name not in shipped)


def test_features_and_decision_points_on_a_real_observation() -> None:
    world = CrafterWorld()
    obs = world.reset(seed=SEEDS[0])
    skills = Skills(obs, world.action_names, seed=SEEDS[0])
    x = features(skills, obs, 0, 0)
    assert x.shape == (N_FEATURES,) and x.dtype == np.float32
    assert np.all(x >= -1) and np.all(x <= 1)
    assert x[0] == pytest.approx(obs.status["health"] / 9)
    # A fresh daytime world with full vitals and nothing hostile near is no decision
    # point until the quiet interval is over.
    assert not decision_point(obs, 0)
    assert decision_point(obs, 50)


def test_an_arbiter_that_always_works_runs_no_need_and_one_that_drinks_does(chain) -> None:
    # Without the arbiter the thresholds run needs in these episodes; "work" never does.
    world, stages, needs, need_stages = chain
    coded = [_play(chain, s, None) for s in SEEDS[:3]]
    assert any(_need_runs(e) for e in coded)
    work = ArbiterHook(lambda x: OPTIONS.index("work"))
    assert all(not _need_runs(_play(chain, s, work)) for s in SEEDS[:3])
    assert set(work.decisions) == {"work"}
    drink = ArbiterHook(lambda x: OPTIONS.index("drink_water"))
    episode = _play(chain, SEEDS[0], drink, max_steps=600)
    assert "drink_water" in _need_runs(episode)
    assert drink.decisions["drink_water"] >= 1


def test_a_floored_arbiter_that_always_works_still_runs_the_vital_needs(chain) -> None:
    # The floor keeps the thresholds of drink, food and sleep: an arbiter that would
    # always keep working still drinks, eats or sleeps where the code does, and runs
    # no other need (shelter, retreat: not on the floor).
    work = ArbiterHook(lambda x: OPTIONS.index("work"), floor=FLOOR)
    runs = [_need_runs(_play(chain, s, work)) for s in SEEDS[:3]]
    assert any(runs)
    assert set().union(*map(set, runs)) <= set(FLOOR)
    with pytest.raises(ValueError, match="floor needs"):
        ArbiterHook(lambda x: 0, floor=("swim",))


def test_the_hook_is_asked_at_most_once_per_check(chain) -> None:
    asked: list[int] = []
    steps = {"n": 0}

    def policy(x: np.ndarray) -> int:
        asked.append(steps["n"])
        return CODED

    def on_step(*_):
        steps["n"] += 1

    _play(chain, SEEDS[1], ArbiterHook(policy), on_step, max_steps=800)
    assert len(asked) >= 5
    assert all(b - a >= CHECK for a, b in zip(asked, asked[1:], strict=False))


def test_an_arbiter_naming_a_need_the_episode_lacks_is_refused(chain) -> None:
    world, stages, _, _ = chain
    goal = Subtask("diamond", "collect a diamond", goal={"diamond": 1}, max_steps=100)
    with pytest.raises(ValueError, match="defend"):
        run_composed(world, stages, survival_needs(), goal, SEEDS[0], wall_s=60,
                     arbiter=ArbiterHook(lambda x: CODED))  # fmt: skip


def test_the_env_hands_decisions_back_and_forth_and_counts_every_world_step(chain) -> None:
    counted = {"steps": 0}

    def play(seed, hook, on_step):
        def both(*a):
            counted["steps"] += 1
            on_step(*a)

        return _play(chain, seed, hook, both, max_steps=700)

    env = ArbiterEnv(play, list(SEEDS[:2]))
    obs, _ = env.reset()
    assert obs.shape == (N_FEATURES,)
    primitive, decisions, end = 0, 0, None
    rng = np.random.default_rng(0)
    while end is None:
        obs, reward, terminated, truncated, info = env.step(int(rng.integers(len(OPTIONS))))
        primitive += info["primitive_steps"]
        decisions += 1
        if terminated or truncated:
            end = info["episode_record"]
    assert decisions == sum(end["decisions"].values())
    assert primitive == end["steps"] == counted["steps"]
    assert truncated == (end["cause"] == "step_budget")
    # Closing mid-episode ends the episode's thread instead of leaving it blocked.
    env.reset()
    env.step(CODED)
    thread = env._thread
    env.close()
    assert thread is not None and not thread.is_alive()
    assert threading.active_count() < 50


def test_a_short_training_run_saves_a_policy_the_benchmark_plays(tmp_path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_arbiter

    out = tmp_path / "arb"
    bench_arbiter.main(["train", "--decisions", "128", "--envs", "2", "--n-steps", "64",
                        "--batch", "64", "--epochs", "1", "--out", str(out)])  # fmt: skip
    assert (out / "arbiter.zip").is_file() and (out / "train.jsonl").read_text()
    record = bench_arbiter._episode(("learned", SEEDS[2], str(out / "arbiter.zip"), ()))
    assert record["decisions"] and record["steps"] > 0


def test_compare_pairs_worlds_and_writes_the_benchmarks_section() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_arbiter

    def record(variant, seed, success, blow=""):
        return {"variant": variant, "seed": seed, "success": success, "steps": 500,
                "cause": "success" if success else "episode_done", "died": bool(blow),
                "blow": blow, "vitals": {"health": 0, "food": 3, "drink": 3, "energy": 3},
                "achievements": ["collect_wood"] + (["collect_diamond"] if success else []),
                "decisions": {"coded": 3} if variant == "learned" else {}}  # fmt: skip

    # 10 worlds: both win 4, only learned wins 3, only coded wins 1, both lose 2.
    outcomes = [(1, 1)] * 4 + [(0, 1)] * 3 + [(1, 0)] + [(0, 0)] * 2
    results = []
    for seed, (c, le) in enumerate(outcomes):
        results.append(record("coded", seed, bool(c), "" if c else "zombie"))
        results.append(record("learned", seed, bool(le), "" if le else "arrow"))
    figures = bench_arbiter.compare_results(results)
    assert figures["coded"]["diamonds"] == 0.5 and figures["learned"]["diamonds"] == 0.7
    assert figures["coded"]["deaths_by"] == {"zombie": 5}
    paired = figures["paired"]
    assert (paired["learned_only"], paired["coded_only"]) == (3, 1)
    assert paired["difference"] == pytest.approx(0.2)
    lo, hi = paired["interval"]
    assert lo < 0.2 < hi and lo > -0.4 and hi <= 0.4  # 4 discordant of 10: at most ±0.4
    meta = [{"part": "report", "first": 0, "worlds": 10, "policy": "x/arbiter.zip", "only": None}]
    text = bench_arbiter.markdown(figures, meta, None, ["report.json"])
    assert "| coded | 10 | 50.0 %" in text and "| learned | 10 | 70.0 %" in text
    assert "paired on 10 worlds: **+20.0 points**" in text
    assert "--policy runs/arbiter/arbiter.zip" in text and "/x/" not in text
