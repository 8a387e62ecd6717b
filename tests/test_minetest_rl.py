"""PPO over coded options for the Minetest tree search (``rl/voxel_options.py``), on a
real ``minetestserver`` (skipped with the install command where Minetest is missing)
and stable-baselines3's real PPO on a tiny budget; development seeds only."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT, need_minetest

from rl.voxel_options import (
    OBS_SIZE,
    OPTION_CAP,
    OPTIONS,
    OPTIONS_SOURCE,
    RADIUS,
    WANT,
    VoxelTreeOptions,
    run_learned,
)
from sandbox import compile_code
from worlds.minetest import MinetestWorld

DEV_SEED = 5  # a development seed with trees a few options away from the spawn point


def test_the_options_are_sandbox_code_with_a_generator_for_each_action() -> None:
    compiled = compile_code(OPTIONS_SOURCE, filename="<tree options>")
    for name in OPTIONS:
        assert f"def {name}(skills):" in compiled.source
    assert WANT == 4  # the chain's planks step starts from four trunks


@pytest.fixture(scope="module")
def world():
    need_minetest()
    with MinetestWorld(radius=RADIUS) as made:
        yield made


def test_the_spaces_and_a_first_observation(world) -> None:
    env = VoxelTreeOptions(world=world, seeds=[DEV_SEED])
    assert env.action_space.n == len(OPTIONS)
    assert env.observation_space.shape == (OBS_SIZE,)
    obs, info = env.reset()
    assert env.observation_space.contains(obs)
    assert info["steps"] == 0 and info["trunks"] == 0 and not info["success"]
    # Something was seen around the spawn: the all-columns counts are not all zero.
    assert np.any(obs[: 8 * 7] > 0)


def test_every_primitive_step_of_an_option_is_counted(world) -> None:
    env = VoxelTreeOptions(world=world, seeds=[DEV_SEED])
    env.reset()
    before = world.steps_taken
    rewards = []
    for option in ("head_e", "explore", "head_n", "collect"):
        _, reward, terminated, truncated, info = env.step(OPTIONS.index(option))
        rewards.append(reward)
        assert 0 <= env.option_steps[-1] <= OPTION_CAP
        if terminated or truncated:
            break
    assert env.steps == world.steps_taken - before == sum(env.option_steps)
    assert env.skills.steps() == env.steps == info["steps"]
    assert env.failures == []
    # The step cost: every primitive step is paid for in the rewards.
    assert sum(rewards) <= info["trunks"] - 0.0005 * env.steps + 1e-9


def test_an_option_with_nothing_to_do_takes_no_step_but_costs(world) -> None:
    env = VoxelTreeOptions(world=world, seeds=[DEV_SEED])
    env.reset()
    if any(env.skills.seen(t) for t in ("default:tree", "default:pine_tree")):
        pytest.skip("a trunk is in view at this spawn")
    _, reward, terminated, truncated, info = env.step(OPTIONS.index("collect"))
    assert info["steps"] == 0 and reward < 0 and not (terminated or truncated)


@pytest.mark.slow
def test_ppo_updates_run_and_the_saved_policy_loads_and_acts(world, tmp_path) -> None:
    from stable_baselines3 import PPO

    env = VoxelTreeOptions(world=world, seeds=range(DEV_SEED, 1000), budget=300)
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=8, n_epochs=2, seed=0, device="cpu")
    model.learn(total_timesteps=32)
    assert model.num_timesteps >= 32
    assert model._n_updates >= 2  # two rollouts of 16 decisions, two epochs each
    model.save(tmp_path / "policy")
    loaded = PPO.load(tmp_path / "policy.zip", device="cpu")
    result = run_learned(env, loaded, DEV_SEED)
    assert result["decisions"] >= 1 and 0 <= result["steps"] <= 300
    assert set(result["options"]) <= set(OPTIONS)


# ------------------------------------------------------------------ the bench's figures


def _bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_minetest_rl

    return bench_minetest_rl


def test_the_bench_s_exact_intervals() -> None:
    bench = _bench()
    low, high = bench.clopper_pearson(3, 10)
    assert abs(low - 0.0667) < 1e-3 and abs(high - 0.6525) < 1e-3  # the tables' values
    assert bench.clopper_pearson(0, 5)[0] == 0.0 and bench.clopper_pearson(5, 5)[1] == 1.0
    rows = [
        {"seed": i, "coded": {"success": i % 3 != 0}, "learned": {"success": i % 4 != 0}}
        for i in range(50)
    ]
    d = bench.difference(rows, "learned", "coded")
    assert len(d["gained_worlds"]) == 12 and len(d["lost_worlds"]) == 8
    assert d["difference"] == (12 - 8) / 50
    assert d["exact95"][0] < d["difference"] < d["exact95"][1]
    assert d["newcombe95"][0] < d["difference"] < d["newcombe95"][1]
    assert abs(d["mcnemar_exact_p"] - 0.5034) < 1e-3
    same = bench.difference(
        [{"seed": 0, "coded": {"success": True}, "learned": {"success": True}}], "learned", "coded"
    )
    assert same["exact95"] is None and same["newcombe95"][0] < 0 < same["newcombe95"][1]


def test_the_bench_refuses_evaluation_seeds_it_developed_or_trained_on(tmp_path) -> None:
    for first in ("0", "10500"):
        done = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "bench_minetest_rl.py"),
             "--first-seed", first, "--seeds", "3", "--train-steps", "0"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "overlap" in done.stderr or "Minetest" in done.stderr
