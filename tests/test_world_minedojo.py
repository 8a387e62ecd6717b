"""The MineDojo adapter against MineDojo's documented spaces, via the stand-in env."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from worlds import minedojo_spaces as mds
from worlds.minedojo_world import MineDojoStandIn, MineDojoWorld, make_minedojo_env


@pytest.fixture
def env() -> MineDojoStandIn:
    return MineDojoStandIn(logs=((0, 1), (2, 0)))


def test_action_space_is_minedojos_multidiscrete():
    space = mds.action_space()
    assert space.nvec.tolist() == [3, 3, 4, 25, 25, 8, 244, 36]
    assert space.contains(np.array(mds.NOOP_ACTION))
    assert mds.camera_bin(0) == 12 and mds.camera_bin(-180) == 0 and mds.camera_bin(180) == 24


def test_stand_in_observations_lie_in_the_documented_space(env):
    space = env.observation_space
    assert set(space.spaces) >= {"rgb", "inventory", "voxels", "life_stats", "location_stats"}
    assert space["voxels"]["block_name"].shape == (3, 3, 3)
    assert space["inventory"]["quantity"].shape == (36,)
    obs = env.reset()
    assert space.contains(obs)
    obs, _, _, _ = env.step(np.array(mds.NOOP_ACTION))
    assert space.contains(obs)


def test_primitive_names_map_to_vectors(env):
    world = MineDojoWorld(env)
    world.reset()
    noop = list(mds.NOOP_ACTION)
    assert world.to_vector("noop").tolist() == noop
    assert world.to_vector("forward").tolist() == [1] + noop[1:]
    assert world.to_vector("attack").tolist()[5] == 3
    assert world.to_vector("turn_right").tolist()[4] == mds.camera_bin(90)
    craft = world.to_vector("craft_planks").tolist()
    assert craft[5] == 4 and env.craft_items[craft[6]] == "planks"
    # Placing what the agent lacks is a no-op, as in Crafter.
    assert world.to_vector("place_crafting_table").tolist() == noop
    assert all(mds.action_space().contains(world.to_vector(a)) for a in world.action_names[:40])


def test_adapter_builds_view_inventory_status_and_facing(env):
    world = MineDojoWorld(env)
    obs = world.reset()
    assert obs.view.shape == (3, 3)
    assert obs.tile(0, 1) == "log" and obs.tile(0, 0) == "grass"  # log ahead (south)
    assert obs.facing == (0, 1) and obs.position == (0, 0)
    assert obs.status == {"health": 20.0, "food": 20.0, "oxygen": 300.0, "armor": 0.0}
    obs, reward, _, info = world.step("attack")
    assert obs.inventory == {"log": 1} and reward == 1.0 and info["achievements"] == ()
    obs, *_ = world.step("craft_planks")
    assert obs.inventory == {"planks": 4}
    obs, *_ = world.step("turn_left")
    assert obs.facing == (1, 0)
    obs, *_ = world.step("forward")
    assert obs.position == (1, 0) and obs.tile(1, 0) == "log"
    assert world.render().shape[2] == 3


@pytest.mark.skipif(importlib.util.find_spec("minedojo") is not None, reason="installed")
def test_missing_minedojo_names_the_extra_to_install():
    with pytest.raises(ImportError, match=r"pip install \.\[minedojo\]"):
        make_minedojo_env(task_id="open-ended", image_size=(160, 256))
    with pytest.raises(ImportError, match="minedojo"):
        MineDojoWorld()
