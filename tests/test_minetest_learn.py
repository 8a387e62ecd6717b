"""A learned step in Minetest: the RL config the fast agent writes for a chain step, the
:class:`~rl.rl_env.SubtaskEnv` a learner trains on over real ``minetestserver``
processes, and the same env attached to an episode under way (as the final policy plays
a learned stage). Skipped with the install command where Minetest is missing."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import trio
from helpers import need_minetest

from actors.fast import minetest_item_of, rl_config, rl_request
from actors.slow import unplanned
from knowledge.options import stage_code_option
from llm.offline import OfflineBackend
from messages.plan import Plan, SubAction
from messages.task import Subtask
from method import games
from method.settings import load as load_settings
from rl.rl_env import SubtaskEnv
from rl.voxel_obs import SIZES
from rl.voxel_options import OPTION_CAP, OPTIONS, menu
from sandbox import compile_code, load
from worlds.minetest.templates import step_code
from worlds.minetest.world import ACTIONS, PLAYER_RADIUS

DEV_SEED = 5  # a development seed with trees a few options away from the spawn point
TRUNKS = "default:tree|default:pine_tree"


def _tree() -> SubAction:
    return SubAction("obtain_tree", Subtask("obtain_tree", goal={TRUNKS: 4}, max_steps=600))


def _config(world: str = "minetest"):
    """The tree step's RL config as the run writes it: the offline backend's reply to the
    fast agent's request, the step's own code offered beside the 3-D options."""
    sub = _tree()
    offered = [stage_code_option(step_code("default:tree")), *menu("default:tree", 4)]
    request = rl_request(sub, 1, offered, ACTIONS, None, None)
    reply = trio.run(OfflineBackend(world=world).call, "fast", "rl", request).data
    return rl_config(sub, reply, offered, list(ACTIONS), [], world=world, option_steps=OPTION_CAP)


def test_the_fast_agent_writes_a_3d_rl_config_for_a_chain_step() -> None:
    config = _config()
    assert config.world == "minetest"
    assert [a.name for a in config.coded_actions] == ["stage_code", *OPTIONS]
    assert config.primitives == ["dig"]
    assert config.observation == ["view", "map", "inventory", "status"]
    assert all(a.max_steps == OPTION_CAP for a in config.coded_actions[1:])
    assert config.coded_actions[0].resumable  # the step's own code goes on where it stopped
    assert minetest_item_of("obtain_tree") == "default:tree"
    assert minetest_item_of("obtain_emerald") is None
    # The reward pays a share of 1 per trunk of either kind up to the goal, less a cost
    # per step; nothing for standing still but the cost, nothing past the goal.
    reward = load(compile_code(config.reward_code))

    def paid(before: dict[str, int], after: dict[str, int]) -> float:
        return reward.call("reward", {"inventory": before}, {"inventory": after}, wall_s=1).value

    assert paid({}, {"default:pine_tree": 1}) == pytest.approx(0.25 - 0.0005)
    assert paid({"default:tree": 2}, {"default:tree": 2}) == pytest.approx(-0.0005)
    assert paid({"default:tree": 4}, {"default:tree": 5}) == pytest.approx(-0.0005)


def test_a_plan_whose_last_goal_names_alternatives_reaches_its_target() -> None:
    """Minetest's planks are "default:wood|default:pine_wood": a plan ending there reaches
    a target of wood, and the slow agent adds nothing to it."""
    need_minetest()
    steps = games.plan_steps("minetest", "wood")
    wood = Subtask("obtain_wood", goal={"default:wood|default:pine_wood": 16})
    plan = Plan("wood", 1, [_tree(), SubAction("obtain_wood", wood)])
    dicts = [{"name": s.name, "achievement": s.achievement, "item": s.item} for s in steps]
    assert unplanned(plan, dicts) == []


def test_a_minetest_step_may_be_learned(tmp_path: Path) -> None:
    need_minetest()
    path = tmp_path / "run.toml"
    path.write_text(
        f'[run]\nname = "t"\nruns_dir = "{tmp_path}"\n\n[task]\nworld = "minetest"\n'
        'target = "pick_wood"\nlearn = ["obtain_tree"]\n'
    )
    assert load_settings(str(path)).task.learn == ["obtain_tree"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_a_learner_s_env_plays_the_3d_world_counting_every_step() -> None:
    need_minetest()
    env = SubtaskEnv(_config(), flatten=True, seed=DEV_SEED)
    try:
        assert env.action_names == ("dig", "stage_code", *OPTIONS)
        parts = ("view", "map", "inventory", "status")
        assert env.observation_space.shape == (sum(SIZES[p] for p in parts),)
        obs, info = env.reset(seed=DEV_SEED)
        assert env.observation_space.contains(obs) and info["seed"] == DEV_SEED
        assert obs[: SIZES["view"]].any()  # the window around the spawn shows land
        world = env.world
        pid = world.server_pid
        before = world.steps_taken
        total = 0.0
        for option in ("explore", "collect", "head_e", "stage_code"):
            obs, reward, terminated, truncated, info = env.step(env.action_names.index(option))
            total += reward
            assert info["option_failure"] is None, info["option_failure"]
            if terminated or truncated:
                break
        assert env.world_steps == world.steps_taken - before == info["steps"] > 0
        assert total <= 2.0  # the goal's share (1) and success (1), less the step costs
        (episode,) = env.take_world_episodes()
        assert episode[0] == env.world_steps
    finally:
        env.close()
    assert pid is not None and not _alive(pid)  # its own server stops with it


def test_a_learned_stage_attaches_to_a_minetest_episode_under_way() -> None:
    need_minetest()
    from worlds.minetest import MinetestWorld
    from worlds.minetest.skills import VoxelSkills

    with MinetestWorld(radius=PLAYER_RADIUS, length=100_000) as world:
        obs = world.reset(DEV_SEED)
        skills = VoxelSkills(obs, world.node_rules, world.game_rules)
        for action in ("turn_left", "forward", "forward"):
            obs, _, _, info = world.step(action)
            skills._observe(obs, info)
        env = SubtaskEnv(_config(), flatten=True, world_factory=lambda: world)
        encoded = env.attach(world, obs, skills)
        assert env.observation_space.contains(encoded)
        before = world.steps_taken
        _, _, terminated, truncated, info = env.step(env.action_names.index("explore"))
        # Its steps count from the attach, and the episode's skills saw them.
        assert info["steps"] == world.steps_taken - before > 0
        assert skills.steps() == 3 + info["steps"]
        env.close()
        assert world.server_pid is not None and _alive(world.server_pid)  # the caller's
        assert np.isfinite(env.encode(world.reset(DEV_SEED))).all()


def test_a_bundle_describes_what_a_learned_minetest_stage_sees() -> None:
    from method.bundle import observation_spec

    spec = observation_spec(_config())
    assert spec["parts"] == {p: SIZES[p] for p in ("view", "map", "inventory", "status")}
    assert spec["view"]["sectors"] == 8 and "ore" in spec["view"]["kinds"]
    assert "default:diamond" in spec["inventory"] and spec["status"] == ["health", "breath"]
    assert spec["actions"] == ["dig", "stage_code", *OPTIONS]
