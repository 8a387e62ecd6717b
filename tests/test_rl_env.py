"""The RL interface (SubtaskEnv) on real Crafter episodes, and SB3 PPO on top of it."""

from __future__ import annotations

import dataclasses
import pickle
import typing
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from messages import encode
from messages.task import CodedAction, RLConfig, Subtask, Vital
from rl.configs import (
    COLLECT_WOOD_PRIMITIVES,
    collect_wood_primitive,
    collect_wood_with_coded,
)
from rl.rl_env import (
    FACINGS,
    CodeError,
    SetupError,
    SubtaskEnv,
    crafter_layout,
    env_factory,
    make_env,
    make_vec_env,
)
from rl.start_states import StartStates
from skills.policies import PLACE_TABLE_SOURCE
from worlds.crafter_world import VITALS, CrafterWorld

# Seeds not used while writing the coded actions.
EVAL_SEEDS = range(2000, 2010)

COLLECT_WOOD_SETUP = """\
def run(skills):
    need = skills.requirements("table").get("wood", 1)
    yield from skills.collect("tree", need)
"""


def config_with(**fields) -> RLConfig:
    """collect_wood_with_coded with some fields replaced."""
    base = collect_wood_with_coded()
    values = {
        "subtask": base.subtask,
        "observation": base.observation,
        "primitives": base.primitives,
        "coded_actions": base.coded_actions,
    }
    values.update(fields)
    return RLConfig(**values)


def coded(name: str, body: str, max_steps: int = 50) -> CodedAction:
    return CodedAction(name=name, code=f"def run(skills):\n{body}", max_steps=max_steps)


def act(env: SubtaskEnv, name: str):
    return env.step(env.action_names.index(name))


# ---------------------------------------------------------------------- gymnasium contract


@pytest.mark.parametrize("config", [collect_wood_primitive(), collect_wood_with_coded()])
@pytest.mark.parametrize("flatten", [False, True])
def test_env_passes_gymnasium_check_env_without_warnings(config, flatten):
    env = SubtaskEnv(config, flatten=flatten)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert [str(w.message) for w in caught] == []


def test_action_space_is_primitives_then_coded_actions():
    env = SubtaskEnv(collect_wood_with_coded())
    assert env.action_names == (*COLLECT_WOOD_PRIMITIVES, "walk_to_tree", "chop_tree")
    assert env.action_space.n == 8
    every = SubtaskEnv(config_with(primitives=[], coded_actions=[]))
    assert every.action_names == tuple(CrafterWorld().action_names)


def test_same_seed_gives_same_world_and_episode():
    env = SubtaskEnv(collect_wood_with_coded())
    runs = []
    for _ in range(2):
        obs, info = env.reset(seed=7)
        steps = [act(env, "walk_to_tree"), act(env, "move_left")]
        runs.append((obs, info, steps))
    (obs_a, info_a, steps_a), (obs_b, info_b, steps_b) = runs
    assert info_a == info_b
    np.testing.assert_array_equal(obs_a["view"], obs_b["view"])
    for a, b in zip(steps_a, steps_b, strict=True):
        np.testing.assert_array_equal(a[0]["view"], b[0]["view"])
        assert a[1:] == b[1:]


def test_unseeded_resets_play_fresh_worlds_drawn_from_the_first_seed():
    env = make_env(collect_wood_primitive(), seed=11)
    seeds = [env.reset()[1]["seed"] for _ in range(3)]
    assert seeds[0] == 11 and len(set(seeds)) == 3
    again = make_env(collect_wood_primitive(), seed=11)
    assert [again.reset()[1]["seed"] for _ in range(3)] == seeds


# ---------------------------------------------------------------------- success and caps


def test_walk_to_tree_then_chop_collects_wood_in_most_seeds():
    env = SubtaskEnv(collect_wood_with_coded())
    wins = 0
    for seed in EVAL_SEEDS:
        env.reset(seed=seed)
        _, _, terminated, truncated, walked = act(env, "walk_to_tree")
        assert not terminated and walked["primitive_steps"] >= 1
        if truncated:  # no tree within the step cap
            continue
        _, reward, terminated, _, info = act(env, "chop_tree")
        if info["success"]:
            wins += 1
            assert terminated and reward == 1.0 and info["is_success"]
            assert info["achievements"] == ("collect_wood",)
            assert info["steps"] == walked["primitive_steps"] + info["primitive_steps"]
    assert wins >= 8


class RecordingWorld(CrafterWorld):
    """Crafter that remembers the actions of the current episode."""

    def reset(self, seed=None):
        self.actions = []
        return super().reset(seed)

    def step(self, action):
        self.actions.append(action)
        return super().step(action)


def test_primitive_do_facing_a_tree_succeeds():
    helper = SubtaskEnv(collect_wood_with_coded(), world_factory=RecordingWorld)
    for seed in EVAL_SEEDS:
        helper.reset(seed=seed)
        act(helper, "walk_to_tree")
        if helper.observation.tile(*helper.observation.facing) == "tree":
            break
    else:
        pytest.fail("walk_to_tree never ended facing a tree")
    env = SubtaskEnv(collect_wood_primitive())
    env.reset(seed=seed)
    for action in helper.world.actions:  # the same walk, as primitive actions
        _, reward, terminated, _, _ = act(env, action)
        assert (reward, terminated) == (0.0, False)
    _, reward, terminated, truncated, info = act(env, "do")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)


def test_episode_truncates_at_max_steps_counting_primitive_steps_of_options():
    subtask = Subtask(name="collect_wood", goal={"wood": 1}, max_steps=5)
    wander = coded("wander", "    for _ in range(40):\n        yield 'noop'\n", max_steps=40)
    env = SubtaskEnv(config_with(subtask=subtask, coded_actions=[wander]))
    env.reset(seed=1)
    _, _, terminated, truncated, info = act(env, "noop")
    assert (terminated, truncated, info["steps"]) == (False, False, 1)
    _, reward, terminated, truncated, info = act(env, "wander")
    assert (info["primitive_steps"], info["steps"]) == (4, 5)
    assert (reward, terminated, truncated, info["success"]) == (0.0, False, True, False)
    with pytest.raises(RuntimeError, match="reset"):
        act(env, "noop")


def test_option_stops_after_its_own_max_steps():
    wander = coded("wander", "    while True:\n        yield 'noop'\n", max_steps=7)
    env = SubtaskEnv(config_with(coded_actions=[wander]))
    env.reset(seed=1)
    _, _, _, truncated, info = act(env, "wander")
    assert (info["primitive_steps"], info["option_failure"], truncated) == (7, None, False)


def test_death_terminates_the_episode():
    class DoomedWorld(CrafterWorld):
        """Crafter whose player dies on the third step (health is hard to lose on cue)."""

        def reset(self, seed=None):
            self.steps = 0
            return super().reset(seed)

        def step(self, action):
            obs, reward, done, info = super().step(action)
            self.steps += 1
            if self.steps == 3:
                return obs, reward, True, {**info, "discount": 0.0}
            return obs, reward, done, info

    env = SubtaskEnv(collect_wood_primitive(), world_factory=DoomedWorld)
    env.reset(seed=1)
    results = [act(env, "noop") for _ in range(3)]
    assert [r[2] for r in results] == [False, False, True]
    assert results[-1][4]["died"] and not results[-1][4]["success"]
    assert results[-1][3] is False


# ---------------------------------------------------------------------- setup


def test_setup_code_brings_the_world_to_the_subtask_start():
    subtask = Subtask(name="place_table", achievement="place_table", max_steps=50)
    place = CodedAction(name="place_table_skill", code=PLACE_TABLE_SOURCE, max_steps=50)
    config = config_with(subtask=subtask, coded_actions=[place], setup_code=COLLECT_WOOD_SETUP)
    env = SubtaskEnv(config)
    need = crafter_needs_for_table()
    obs, info = env.reset(seed=3)
    assert env.observation.inventory["wood"] >= need
    assert obs["inventory"][crafter_layout().inventory_names.index("wood")] == pytest.approx(
        env.observation.inventory["wood"] / 9
    )
    assert info["setup_steps"] > 0
    _, reward, terminated, _, info = act(env, "place_table_skill")
    # Setup steps count in info, not toward the subtask's cap.
    assert info["steps"] == info["primitive_steps"]
    assert info["setup_steps"] > 0
    assert (terminated, reward, info["success"]) == (True, 1.0, True)


def crafter_needs_for_table() -> int:
    from crafter import constants

    return constants.place["table"]["uses"]["wood"]


def test_failing_setup_raises_setup_error_with_the_sandbox_failure():
    setup = "def run(skills):\n    yield 'noop'\n    x = 1 // 0\n"
    env = SubtaskEnv(config_with(setup_code=setup), setup_retries=1)
    with pytest.raises(SetupError) as caught:
        env.reset(seed=5)
    err = caught.value
    assert err.failure.cause == "exception" and err.failure.line == 3
    assert "ZeroDivisionError" in err.failure.detail
    assert err.steps == 1 and err.seed != 5  # the retry used another world
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)  # no half-set-up episode to step in


def test_setup_that_fails_in_some_worlds_is_retried_on_other_seeds():
    # Deterministic per world: fails when water is in the first view (seed 2008 has some).
    setup = "def run(skills):\n    if skills.sees('water'):\n        raise ValueError('wet')\n"
    setup += "    yield 'noop'\n"
    env = SubtaskEnv(config_with(setup_code=setup), setup_retries=3)
    _, info = env.reset(seed=2007)
    assert (info["seed"], info["setup_failures"], info["setup_steps"]) == (2007, 0, 1)
    _, info = env.reset(seed=2008)
    assert info["seed"] != 2008 and info["setup_failures"] >= 1 and info["setup_steps"] == 1
    assert "water" not in {env.observation.names[i] for i in np.unique(env.observation.view)}
    with pytest.raises(SetupError, match="wet"):
        SubtaskEnv(config_with(setup_code=setup)).reset(seed=2008)


def test_a_pool_world_whose_every_try_died_gives_way_to_another_once_setup_has_worked():
    # Pool worlds 2007 (setup works) and 2008 (water in view: setup raises). A pool-only
    # env (a learner's) whose setup has made a start draws another pool world when one
    # world and its retries all failed, instead of ending the job; never before that.
    wet = "def run(skills):\n    if skills.sees('water'):\n        raise ValueError('wet')\n"
    wet += "    yield 'noop'\n"

    def env(redraws: int, cache: StartStates | None = None) -> SubtaskEnv:
        return SubtaskEnv(
            config_with(setup_code=wet),
            world_pool=[2007, 2008],
            pool_only=True,
            setup_redraws=redraws,
            start_states=cache,
        )

    with pytest.raises(SetupError, match="wet"):
        env(10).reset(seed=0)  # its first draw is 2008: setup never worked here yet
    worked = env(10)
    _, info = worked.reset(seed=1)  # its first draw is 2007
    assert info["seed"] == 2007
    failures = 0
    for _ in range(12):
        _, info = worked.reset()
        assert info["seed"] == 2007
        failures += info["setup_failures"]
    assert failures >= 1  # 2008 was drawn, failed, and gave way
    plain = env(0)  # as before: the first failed draw ends it
    plain.reset(seed=1)
    with pytest.raises(SetupError, match="wet"):
        for _ in range(12):
            plain.reset()
    # A later job in the same process: its env's first draw dies, but the start cache
    # saw this setup work in an earlier job's env, so it draws again.
    cache = StartStates()
    env(10, cache).reset(seed=1)
    _, info = env(10, cache).reset(seed=0)
    assert info["seed"] == 2007 and info["setup_failures"] >= 1
    with pytest.raises(SetupError, match="wet"):
        env(10, StartStates()).reset(seed=0)  # a cache that never saw it work


def test_a_first_pool_world_whose_setup_died_gives_way_to_another():
    # The same two pool worlds; in 2008 (water in view) the setup stands still until the
    # player dies of thirst: no fault of its code. The env's first draw is 2008, before
    # setup ever made a start: it draws again instead of ending the job at 0 decisions.
    still = "def run(skills):\n    while skills.sees('water'):\n        yield 'noop'\n"
    still += "    yield 'noop'\n"

    def env(redraws: int) -> SubtaskEnv:
        return SubtaskEnv(
            config_with(setup_code=still), world_pool=[2007, 2008], pool_only=True,
            setup_redraws=redraws, setup_max_steps=5000,
        )  # fmt: skip

    _, info = env(10).reset(seed=0)
    assert info["seed"] == 2007 and info["setup_failures"] >= 1
    with pytest.raises(SetupError, match="the episode ended during setup"):
        env(0).reset(seed=0)  # no redraws: the dead first world ends it


def test_every_world_step_is_counted_setup_and_failed_setups_included():
    # Setup walks to wood (achievements on the way), fails in worlds with water in view
    # after a step: the failed attempts' steps and the setup's steps are world steps too.
    setup = "def run(skills):\n    yield 'noop'\n    if skills.sees('water'):\n"
    setup += "        raise ValueError('wet')\n    yield from skills.collect('tree', 1)\n"
    env = SubtaskEnv(config_with(setup_code=setup), setup_retries=3)
    world = env.world
    assert isinstance(world, CrafterWorld)
    setups = 0
    for seed in (2007, 2008, 2009):
        _, info = env.reset(seed=seed)
        setups += info["setup_failures"]
        for _ in range(5):
            _, _, terminated, truncated, _ = env.step(0)
            if terminated or truncated:
                break
    assert setups >= 1  # seed 2008 has water in its first view
    episodes = env.take_world_episodes()
    assert len(episodes) == 3 + setups  # a failed setup is an episode of its own
    assert env.world_steps == world.steps_taken == sum(length for length, _, _ in episodes)
    assert 0 < env.setup_steps_total < env.world_steps
    # What setup unlocked is the episode's (collect_wood happens during setup).
    assert all(counts.get("collect_wood", 0) >= 1 for length, _, counts in episodes if length > 6)
    assert env.take_world_episodes() == []  # each episode is handed over once


# ---------------------------------------------------------------------- code errors


@pytest.mark.parametrize(
    ("fields", "part", "cause", "line"),
    [
        (
            {"coded_actions": [coded("bad", "    yield 'noop'\n    if True\n")]},
            "coded_actions[0] 'bad'",
            "syntax",
            3,
        ),
        ({"reward_code": "x = 1\nimport os\n"}, "reward_code", "forbidden", 2),
        ({"setup_code": "def run(skills):\n    return 1\n"}, "setup_code", "exception", 1),
        ({"reward_code": "def rewards(before, after):\n    return 0\n"}, "reward_code", None, None),
        ({"reward_code": "x = 1\ny = x // 0\n"}, "reward_code", "exception", 2),
    ],
)
def test_bad_code_in_the_config_is_refused_at_construction(fields, part, cause, line):
    with pytest.raises(CodeError) as caught:
        SubtaskEnv(config_with(**fields))
    err = caught.value
    assert err.part == part
    if cause is not None:
        assert (err.failure.cause, err.failure.line) == (cause, line)
        assert f"line {line}" in str(err)


def test_config_mistakes_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="teleport"):
        SubtaskEnv(config_with(primitives=["noop", "teleport"]))
    with pytest.raises(ValueError, match="logs"):
        SubtaskEnv(config_with(subtask=Subtask(name="x", goal={"logs": 1})))
    with pytest.raises(ValueError, match="pixels"):
        SubtaskEnv(config_with(observation=["view", "pixels"]))
    with pytest.raises(ValueError, match="unique"):
        SubtaskEnv(config_with(coded_actions=[coded("do", "    yield 'do'\n")]))
    with pytest.raises(ValueError, match="minedojo"):
        SubtaskEnv(RLConfig(subtask=Subtask(name="x"), world="minedojo"))


# ---------------------------------------------------------------------- options and reward


def test_failing_option_ends_itself_not_the_episode():
    crash = coded("crash", "    yield 'noop'\n    yield 'noop'\n    [][1]\n")
    bad_name = coded("bad_name", "    yield 'fly'\n")
    empty = coded("empty", "    return\n    yield 'noop'\n")
    env = SubtaskEnv(config_with(coded_actions=[crash, bad_name, empty]))
    env.reset(seed=2)
    _, _, terminated, truncated, info = act(env, "crash")
    assert (terminated, truncated, info["primitive_steps"]) == (False, False, 2)
    assert info["option_failure"]["cause"] == "exception"
    assert info["option_failure"]["line"] == 4
    assert info["option_failures"] == 1
    _, _, _, _, info = act(env, "bad_name")
    # No step taken: one idle step keeps time moving.
    assert info["option_failure"]["cause"] == "invalid_action"
    assert (info["primitive_steps"], info["option_failures"]) == (1, 2)
    _, _, _, _, info = act(env, "empty")
    assert (info["primitive_steps"], info["option_failure"], info["option_failures"]) == (
        1,
        None,
        2,
    )
    assert info["steps"] == 4


def test_reward_code_is_summed_over_the_primitive_steps_of_an_option():
    reward_code = (
        "def reward(before, after):\n"
        "    return -0.01 + after['inventory']['wood'] - before['inventory']['wood']\n"
    )
    env = SubtaskEnv(config_with(reward_code=reward_code, success_reward=10.0))
    env.reset(seed=2000)
    _, walk_reward, _, _, walked = act(env, "walk_to_tree")
    assert walk_reward == pytest.approx(-0.01 * walked["primitive_steps"])
    _, reward, terminated, _, info = act(env, "chop_tree")
    assert terminated and info["reward_failures"] == 0
    assert reward == pytest.approx(10.0 + 1.0 - 0.01 * info["primitive_steps"])


@pytest.mark.parametrize(
    "body",
    [
        "    return after['inventory']['logs']\n",  # KeyError
        "    return 'much'\n",
        "    return float('nan')\n",
        "    while True:\n        pass\n",
    ],
)
def test_failing_reward_code_gives_zero_and_is_counted(body):
    reward_code = f"def reward(before, after):\n{body}"
    env = SubtaskEnv(config_with(reward_code=reward_code), reward_wall_s=0.05)
    env.reset(seed=2000)
    _, reward, _, _, info = act(env, "noop")
    assert reward == 0.0 and info["reward_failures"] == 1 and info["reward_failure"]["cause"]
    _, _, _, _, info = act(env, "walk_to_tree")
    assert info["reward_failures"] == 1 + info["primitive_steps"]
    _, reward, terminated, _, info = act(env, "chop_tree")
    assert terminated and reward == 1.0  # world 2000's log: the success reward still comes


def test_reward_snapshots_carry_steps_and_achievements():
    reward_code = (
        "def reward(before, after):\n"
        "    assert after['steps'] == before['steps'] + 1\n"
        "    got = after['achievements'].get('collect_wood', 0)\n"
        "    return 5.0 * (got - before['achievements'].get('collect_wood', 0))\n"
    )
    env = SubtaskEnv(config_with(reward_code=reward_code))
    env.reset(seed=2000)
    act(env, "walk_to_tree")
    _, reward, terminated, _, info = act(env, "chop_tree")
    assert terminated and info["reward_failures"] == 0 and reward == 6.0


# ---------------------------------------------------------------------- observation


def decode_view(encoded: np.ndarray, layout) -> tuple[np.ndarray, set]:
    rows, cols = layout.view_shape
    grid = encoded.reshape(rows, cols, layout.view_channels)
    n_tiles = len(layout.tile_names)
    assert (grid[:, :, :n_tiles].sum(axis=2) == 1).all()  # exactly one tile kind each
    tiles = grid[:, :, :n_tiles].argmax(axis=2)
    kinds = (*layout.creature_kinds, "other")
    rows_at, cols_at, channels = np.nonzero(grid[:, :, n_tiles:])
    creatures = {
        (kinds[c], col - cols // 2, row - rows // 2)
        for row, col, c in zip(rows_at, cols_at, channels, strict=True)
    }
    return tiles, creatures


def test_observation_holds_exactly_what_the_observation_record_holds():
    config = config_with(observation=["view", "inventory", "status", "facing", "daylight"])
    env = SubtaskEnv(config)
    layout = env.layout
    obs, _ = env.reset(seed=2001)
    seen_creatures = 0
    for step in range(60):
        record = env.observation
        tiles, creatures = decode_view(obs["view"], layout)
        np.testing.assert_array_equal(tiles, record.view)
        assert creatures == set(record.creatures)
        seen_creatures += len(creatures)
        inventory = [record.inventory[k] / 9 for k in layout.inventory_names]
        np.testing.assert_allclose(obs["inventory"], inventory)
        np.testing.assert_allclose(obs["status"], [record.status[k] / 9 for k in VITALS])
        assert obs["facing"].tolist() == [float(f == record.facing) for f in FACINGS]
        assert obs["daylight"][0] == pytest.approx(record.daylight)
        # Nothing else: the encoding is a function of the Observation record alone.
        encoded = env.encode(record)
        for part in obs:
            np.testing.assert_array_equal(obs[part], encoded[part])
        obs, _, terminated, truncated, _ = env.step(step % 5)  # noop and the moves
        if terminated or truncated:
            obs, _ = env.reset()
    assert seen_creatures > 0


def test_the_status_vector_holds_every_vital_in_crafters_order():
    # Trained policies read the status by position: the order is part of their input.
    assert VITALS == ("health", "food", "drink", "energy")
    assert set(VITALS) == set(typing.get_args(Vital))
    assert crafter_layout().status_names == VITALS


def test_encoding_ignores_the_world_outside_the_view():
    env = SubtaskEnv(collect_wood_primitive())
    obs, _ = env.reset(seed=2002)
    # Turn every tile outside the view into lava; the player cannot see that.
    world = env.world._env._world
    px, py = env.world._env._player.pos
    mat = world._mat_map.copy()
    lava = world._mat_ids["lava"]
    world._mat_map[:] = lava
    world._mat_map[px - 4 : px + 5, py - 3 : py + 4] = mat[px - 4 : px + 5, py - 3 : py + 4]
    after = env.encode(env.world._observe())
    np.testing.assert_array_equal(after["view"], obs["view"])


def test_flattened_observation_concatenates_the_parts_in_config_order():
    config = config_with(observation=["facing", "view"])
    flat = SubtaskEnv(config, flatten=True)
    parts = SubtaskEnv(config)
    obs, _ = flat.reset(seed=4)
    ref, _ = parts.reset(seed=4)
    np.testing.assert_array_equal(obs, np.concatenate([ref["facing"], ref["view"]]))
    assert flat.observation_space.shape == obs.shape


# ---------------------------------------------------------------------- factories and SB3


def test_env_factory_pickles_and_builds_from_encoded_bytes():
    factory = pickle.loads(pickle.dumps(env_factory(collect_wood_with_coded(), seed=3)))
    env = factory()
    assert env.action_names[-2:] == ("walk_to_tree", "chop_tree")
    assert env.reset()[1]["seed"] == 3
    assert make_env(encode(collect_wood_primitive())).config == collect_wood_primitive()
    with pytest.raises(TypeError):
        make_env(encode(Subtask(name="x")))


@pytest.mark.parametrize("subproc", [False, True])
def test_ppo_learns_for_256_steps_on_vector_envs(subproc):
    from stable_baselines3 import PPO

    vec = make_vec_env(collect_wood_with_coded(), n_envs=2, seed=0, subproc=subproc)
    try:
        model = PPO("MultiInputPolicy", vec, n_steps=64, batch_size=64, n_epochs=1, seed=0)
        before = [p.detach().clone() for p in model.policy.parameters()]
        model.learn(256)
        # Two rollouts of 64 steps in 2 envs, and the updates moved the policy.
        assert model.num_timesteps == 256
        after = list(model.policy.parameters())
        assert any(not (a == b).all() for a, b in zip(after, before, strict=True))
    finally:
        vec.close()


# ---------------------------------------------------------------------- survival needs


LEFT_FOREVER = "def run(skills):\n    while True:\n        yield 'move_left'\n"
NOOPS = "def run(skills):\n    for i in range(10):\n        yield 'noop'\n"


def _needy(needs, coded=()):
    from messages.task import NeedRule

    return RLConfig(
        subtask=Subtask("collect_diamond", goal={"diamond": 1}, max_steps=500),
        primitives=["noop"],
        coded_actions=list(coded),
        needs=[NeedRule(**n) for n in needs],
    )


def test_a_due_need_runs_inside_the_agents_step_and_then_cools_down():
    from rl.setup_code import NEED_COOLDOWN_STEPS

    # Health 9 < 10: always due, never served (until 10): it runs its 3-step cap after
    # the agent's noop, then waits NEED_COOLDOWN_STEPS steps.
    env = SubtaskEnv(_needy([dict(stat="health", below=10, until=10, code=LEFT_FOREVER,
                                  max_steps=3, name="retreat")]))  # fmt: skip
    env.reset(seed=3)
    _, _, _, _, info = env.step(0)
    assert info["primitive_steps"] == 4 and env.needs_run == 1
    singles = 0
    while True:
        _, _, _, _, info = env.step(0)
        if info["primitive_steps"] != 1:
            break
        singles += 1
    # From step 4 the need waits until step 4 + cooldown; the noop that reaches it
    # brings the need again (1 + 3 steps).
    assert singles == NEED_COOLDOWN_STEPS - 1 and info["primitive_steps"] == 4
    assert env.needs_run == 2


def test_a_need_stops_once_its_stat_is_back_and_a_chosen_option_yields_to_it():
    from rl.setup_code import NEED_COOLDOWN_STEPS

    # Daylight at the start of an episode is ~1: a need on it "below 2, until 0.5" is due
    # at once and served at once after one step; the 10-noop option chosen by the agent
    # stops after its first step whenever the need is due.
    opt = CodedAction("wait", NOOPS, max_steps=10)
    env = SubtaskEnv(_needy([dict(stat="daylight", below=2, until=0.5, code=LEFT_FOREVER)],
                            coded=[opt]))  # fmt: skip
    env.reset(seed=3)
    _, _, _, _, info = env.step(1)  # the option: 1 noop, then the need: 1 step, served
    assert info["primitive_steps"] == 2 and env.needs_run == 1
    _, _, _, _, info = env.step(1)  # served, so no cooldown: due again at once
    assert info["primitive_steps"] == 2 and env.needs_run == 2
    assert NEED_COOLDOWN_STEPS > 2


def test_a_need_with_a_stat_the_world_lacks_is_refused():
    with pytest.raises(ValueError, match="stat 'mana'"):
        SubtaskEnv(_needy([dict(stat="mana", below=3, until=5, code=LEFT_FOREVER)]))


def test_no_needs_no_extra_steps():
    env = SubtaskEnv(_needy([]))
    env.reset(seed=3)
    assert all(env.step(0)[4]["primitive_steps"] == 1 for _ in range(20))


def test_need_steps_stay_out_of_the_subtask_cap_and_due_needs_run_one_after_another():
    from episodes.composite import NEED_COOLDOWN_STEPS as PLANNER_COOLDOWN
    from rl.setup_code import NEED_COOLDOWN_STEPS

    assert NEED_COOLDOWN_STEPS == PLANNER_COOLDOWN  # training and play cool down alike
    broken = "def run(skills):\n    yield 'move_left'\n    raise RuntimeError('no')\n"
    config = _needy([
        dict(stat="health", below=10, until=10, code=LEFT_FOREVER, max_steps=3, name="a"),
        dict(stat="food", below=10, until=10, code=broken, max_steps=3, name="b"),
    ])  # fmt: skip
    config = dataclasses.replace(config, subtask=dataclasses.replace(config.subtask, max_steps=5))
    env = SubtaskEnv(config)
    env.reset(seed=3)
    # Both due after the first noop: 3 steps of "a", then 1 of "b" (its code fails).
    _, _, _, truncated, info = env.step(0)
    assert info["primitive_steps"] == 5 and env.needs_run == 2 and not truncated
    assert env.need_failures == 1 and info["option_failures"] == 0
    # The cap of 5 counts the agent's own steps only: 4 more noops, not 0.
    for _ in range(3):
        assert not env.step(0)[3]
    assert env.step(0)[3]


def test_a_resumable_option_starts_afresh_after_a_need_ran():
    counting = "def run(skills):\n    for i in range(40):\n        yield 'noop'\n"
    opt = CodedAction("own", counting, max_steps=15, resumable=True)
    # Never due (health is never below 0): the option is kept after its 15 steps.
    env = SubtaskEnv(_needy([dict(stat="health", below=0, until=9, code=LEFT_FOREVER)],
                            coded=[opt]))  # fmt: skip
    env.reset(seed=3)
    assert env.step(1)[4]["primitive_steps"] == 15 and "own" in env._suspended
    # Due at once (health 9 < 10): the option yields after 1 step, the need runs its cap
    # (1 step), and the option is dropped, as the planner restarts a stage in play.
    env = SubtaskEnv(_needy([dict(stat="health", below=10, until=10, code=LEFT_FOREVER,
                                  max_steps=1)], coded=[opt]))  # fmt: skip
    env.reset(seed=3)
    assert env.step(1)[4]["primitive_steps"] == 2 and "own" not in env._suspended


def _map_ids(obs_map: np.ndarray, layout) -> np.ndarray:
    """The ``map`` part back to tile ids (-1: not seen)."""
    from rl.rl_env import MAP_RADIUS

    side, kinds = 2 * MAP_RADIUS + 1, len(layout.tile_names)
    onehot = obs_map.reshape(side, side, kinds + 1)
    assert (onehot.sum(-1) == 1).all()  # exactly one channel per tile
    ids = onehot.argmax(-1)
    ids[ids == kinds] = -1
    return ids


def test_the_map_part_is_what_the_player_has_seen_around_it_and_nothing_else():
    from rl.rl_env import MAP_RADIUS

    env = SubtaskEnv(config_with(observation=["view", "map"], coded_actions=[]))
    layout = env.layout
    obs, _ = env.reset(seed=2001)
    record = env.observation
    ids = _map_ids(obs["map"], layout)
    rows, cols = record.view.shape
    cx, cy = record.center
    top, left = MAP_RADIUS - cy, MAP_RADIUS - cx
    # At the start the map is the view, centred on the player, and nothing beyond it.
    np.testing.assert_array_equal(ids[top : top + rows, left : left + cols], record.view)
    assert (ids >= 0).sum() == rows * cols
    # Walking: every tile ever in view is remembered where it was, as the player saw it
    # last (absolute position = player position + offset from the crop's centre).
    seen: dict[tuple[int, int], int] = {}
    for step in range(40):
        record = env.observation
        px, py = record.position
        for r in range(rows):
            for c in range(cols):
                seen[(px + c - cx, py + r - cy)] = int(record.view[r, c])
        ids = _map_ids(obs["map"], layout)
        for r in range(2 * MAP_RADIUS + 1):
            for c in range(2 * MAP_RADIUS + 1):
                where = (px + c - MAP_RADIUS, py + r - MAP_RADIUS)
                assert ids[r, c] == seen.get(where, -1), (step, where)
        obs, _, terminated, truncated, _ = env.step(1 + step // 10 % 4)  # the four moves
        assert not (terminated or truncated)
    assert len(seen) > rows * cols  # it did walk: more than one view was seen


def test_a_learned_stage_that_sees_the_map_gets_the_episodes_map_when_attached():
    from skills.skills import Skills
    from worlds.crafter_world import CrafterWorld

    config = config_with(observation=["map"], coded_actions=[])
    world = CrafterWorld()
    obs = world.reset(seed=2002)
    skills = Skills(obs, world.action_names, seed=2002)
    for action in ["move_left"] * 6 + ["move_up"] * 4:  # the episode so far, remembered
        obs, _, _, info = world.step(action)
        skills._observe(obs, info)
    env = SubtaskEnv(config, world_factory=lambda: world)
    attached = env.attach(world, obs, skills)
    fresh = SubtaskEnv(config, world_factory=lambda: world).attach(world, obs)
    # The stage sees what the episode's skills remember, more than a fresh map holds.
    seen = (_map_ids(attached["map"], env.layout) >= 0).sum()
    assert seen > (_map_ids(fresh["map"], env.layout) >= 0).sum() == 63
