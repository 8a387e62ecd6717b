"""Setup once, train many: the start-state cache (rl/start_states.py) on real Crafter
episodes — a restored start is the state setup leaves, and setup steps count once."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from messages.task import RLConfig, Subtask
from rl import start_states
from rl.configs import collect_wood_with_coded
from rl.held_out import held_out
from rl.rl_env import SetupError, SubtaskEnv
from rl.start_states import FailedSetup, StartState, StartStates
from worlds.crafter_world import STEP_TALLY_ENV, tallied_steps

# Walks to trees and chops until it has a table's wood (~10-60 steps, collect_wood
# unlocked on the way, creatures moving, the world's generator drawn from).
SETUP = """\
def run(skills):
    need = skills.requirements("table").get("wood", 1)
    yield from skills.collect("tree", need)
"""
# Fails in worlds with water in view after a step (seed 2008 has some), else a few steps.
WET_SETUP = (
    "def run(skills):\n    yield 'noop'\n    if skills.sees('water'):\n"
    "        raise ValueError('wet')\n    yield 'noop'\n    yield 'noop'\n"
)
SEEDS = (3, 11, 2007)


def config(setup: str = SETUP, **fields: Any) -> RLConfig:
    base = collect_wood_with_coded()
    values = {name: getattr(base, name) for name in base.__dataclass_fields__}
    values.update(subtask=Subtask("place_table", achievement="place_table", max_steps=60))
    values.update(setup_code=setup, **fields)
    return RLConfig(**values)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return (type(value).__name__, _plain(fields))
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return sorted((repr(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (set, frozenset)):
        return sorted(repr(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


def _object(obj: Any) -> Any:
    """A game object's own state: its type and every attribute but its links to the
    world, the world's generator and the player (compared on their own)."""
    if obj is None:
        return None
    own = {k: v for k, v in vars(obj).items() if k not in ("world", "random", "player")}
    return (type(obj).__name__, _plain(own))


def fingerprint(env: SubtaskEnv) -> Any:
    """Everything an episode goes on from: the world's arrays, objects (positions,
    health, cooldowns), player (inventory, vitals, achievements), generator state, step
    counter and daylight; the env's counters and observation; the skills' memory."""
    world = env.world
    crafter_env = world._env
    live = crafter_env._world
    state = live.random.get_state()
    skills = env._skills
    nav = skills._nav
    return _plain(
        {
            "mat": live._mat_map,
            "obj": live._obj_map,
            "objects": [_object(o) for o in live._objects],
            "chunks": {
                k: sorted(live._obj_map[o.pos[0], o.pos[1]] for o in v)
                for k, v in live._chunks.items()
            },  # fmt: skip
            "random": (state[0], state[1], state[2], state[3], state[4]),
            "daylight": live.daylight,
            "player": _object(crafter_env._player),
            "player_is_in_world": crafter_env._player in live._objects,
            "zombies_chase_the_player": all(
                o.player is crafter_env._player for o in live._objects if hasattr(o, "player")
            ),
            "env": [
                crafter_env._step,
                crafter_env._episode,
                crafter_env._seed,
                crafter_env._last_health,
                sorted(crafter_env._unlocked),
            ],  # fmt: skip
            "crafter_world": [world._names, world._start, world._counts],
            "subtask_env": [env._counts, env._start_counts, env._steps, env.world_seed],
            "obs": env.observation,
            "skills": [skills._achievements, skills._sightings, skills._random.getstate()],
            "nav": [
                nav.memory,
                nav.now,
                nav._plan,
                nav._plan_key,
                nav._heading,
                nav.creature_map,
                nav._tile_counts,
                nav.tunnel,
            ],  # fmt: skip
            "grid": [nav._grid.tiles, nav._grid.seen, nav._grid.ox, nav._grid.oy],
        }
    )


def play(env: SubtaskEnv, seed: int, decisions: int = 40) -> list[Any]:
    """What the env answers to a fixed, seeded string of decisions (coded actions too)."""
    rng = np.random.default_rng(seed)
    answers = []
    for _ in range(decisions):
        obs, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        info.pop("setup_steps")  # taken at this reset: 0 when restored, by design
        answers.append(_plain((obs, reward, terminated, truncated, info)))
        if terminated or truncated:
            break
    answers.append(fingerprint(env))
    return answers


def test_a_restored_start_is_the_state_setup_leaves_and_plays_on_identically() -> None:
    cache = StartStates()
    cached = SubtaskEnv(config(), start_states=cache)
    for seed in SEEDS:  # make every start (and play in each, to leave the world used)
        _, info = cached.reset(seed=seed)
        assert not info["start_restored"] and info["setup_steps"] > 0
        play(cached, seed, 5)
    for seed in reversed(SEEDS):
        fresh = SubtaskEnv(config())  # no cache: setup runs through the sandbox
        _, fresh_info = fresh.reset(seed=seed)
        _, info = cached.reset(seed=seed)
        assert info["start_restored"] and info["setup_steps"] == 0
        assert fingerprint(cached) == fingerprint(fresh)
        assert play(cached, seed) == play(fresh, seed)
    assert cache.stats()["made"] == len(SEEDS)


def test_setup_steps_are_counted_once_per_world_and_match_the_worlds_own_tally(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv(STEP_TALLY_ENV, str(tmp_path))
    pool, resets = (3, 11, 2007), 9
    per_world = {}
    for seed in pool:  # what setup takes in each world, run fresh
        _, info = SubtaskEnv(config()).reset(seed=seed)
        per_world[seed] = info["setup_steps"]
    for name in list(tmp_path.iterdir()):
        name.unlink()

    def run(cache: StartStates | None) -> SubtaskEnv:
        env = SubtaskEnv(config(), seed=pool[0], world_pool=pool, start_states=cache)
        for _ in range(resets):
            env.reset()
            for _ in range(3):
                _, _, terminated, truncated, _ = env.step(0)
                if terminated or truncated:
                    break
        return env

    before = run(None)
    drawn = [length for length, _, _ in before.take_world_episodes()]
    assert before.setup_steps_total > sum(per_world.values())  # paid at every reset
    assert len(drawn) == resets
    after = run(StartStates())
    episodes = after.take_world_episodes()
    # Every world was drawn (a seeded draw), and setup ran once in each.
    assert after.setup_steps_total == sum(per_world.values())
    assert after.starts_restored == resets - len(pool)
    # The booked lengths add up to every step the world took, by its own count and by
    # the tally files every world keeps (both envs wrote theirs to tmp_path).
    assert sum(length for length, _, _ in episodes) == after.world_steps
    assert after.world.steps_taken == after.world_steps
    assert tallied_steps(tmp_path) == before.world_steps + after.world_steps
    # What setup unlocked is booked with the episode that ran it, not again on restores.
    wood = [counts.get("collect_wood", 0) for _, _, counts in episodes]
    assert sum(n > 0 for n in wood) == len(pool)


def test_a_world_whose_setup_failed_is_skipped_without_running_it_again() -> None:
    cache = StartStates()
    env = SubtaskEnv(config(WET_SETUP), setup_retries=3, start_states=cache)
    _, first = env.reset(seed=2008)
    steps = env.setup_steps_total
    assert first["seed"] != 2008 and first["setup_failures"] >= 1
    assert isinstance(cache.get(cache_key(env, 2008)), FailedSetup)
    _, again = env.reset(seed=2008)  # the same world chosen, as before; no step taken
    assert (again["seed"], again["setup_failures"]) == (first["seed"], first["setup_failures"])
    assert again["start_restored"] and env.setup_steps_total == steps
    # Without retries the known failure is raised again, with its reason, at no cost.
    bare = SubtaskEnv(config(WET_SETUP), start_states=cache)
    with pytest.raises(SetupError, match="wet") as caught:
        bare.reset(seed=2008)
    assert caught.value.failure.cause == "exception" and bare.world_steps == 0
    assert bare.take_world_episodes() == []


def cache_key(env: SubtaskEnv, seed: int) -> tuple:
    return start_states.start_key(
        env.world, seed, env.config.setup_code, env._setup_max_steps, env._setup_wall_s
    )


def test_versions_of_one_sub_action_share_starts_other_setups_do_not() -> None:
    cache = StartStates()
    SubtaskEnv(config(), start_states=cache).reset(seed=11)
    # Another version: other options, reward and cap, the same setup (ancestors).
    other = config(
        coded_actions=[], reward_code="def reward(before, after):\n    return 0.0\n",
        subtask=Subtask("place_table", achievement="place_table", max_steps=30),
    )  # fmt: skip
    _, info = SubtaskEnv(other, start_states=cache).reset(seed=11)
    assert info["start_restored"] and info["setup_steps"] == 0
    _, info = SubtaskEnv(config(WET_SETUP), start_states=cache).reset(seed=11)
    assert not info["start_restored"] and info["setup_steps"] > 0
    assert len(cache) == 2


def test_held_out_evaluations_of_two_versions_set_each_world_up_once() -> None:
    cache = StartStates()
    first, second = {}, {}
    rate1, steps1, rec1 = held_out(config(), lambda obs: 0, [3, 11], first, start_states=cache)
    rate2, steps2, rec2 = held_out(config(), lambda obs: 0, [3, 11], second, start_states=cache)
    assert first["setup_steps"] > 0 and second["setup_steps"] == 0
    # Each record says what its world's setup took: made once, then restored for nothing.
    assert sum(r.pop("setup_steps") for r in rec1) == first["setup_steps"]
    assert [r.pop("setup_steps") for r in rec2] == [0, 0]
    # And its world episodes, which are the tally's, in the order played (a made
    # start's episode holds its setup steps, a restored one's does not).
    for rec, tally in ((rec1, first), (rec2, second)):
        assert [e for r in rec for e in r.pop("world_episodes")] == tally["episodes"]
    assert (rate1, steps1, rec1) == (rate2, steps2, rec2)
    assert sum(length for length, _, _ in second["episodes"]) == second["world_steps"] == steps2


def test_the_cache_keeps_the_newest_entries_within_its_bound() -> None:
    cache = StartStates(2)
    failed = FailedSetup(1, "x", None)
    for key in "abc":
        cache.put(key, failed)
    assert cache.get("a") is None and cache.get("b") is failed
    cache.put("d", failed)  # "c" is now the least recently used
    assert cache.get("c") is None and len(cache) == 2
    assert cache.stats()["evicted"] == 2
    off = StartStates(0)
    off.put("a", failed)
    assert len(off) == 0


def test_the_entry_bound_is_read_from_the_environment(monkeypatch) -> None:
    monkeypatch.setattr(start_states, "_shared", None)
    monkeypatch.setenv(start_states.START_STATES_ENV, "7")
    assert start_states.shared().max_entries == 7
    assert start_states.resolve(True) is start_states.shared()
    monkeypatch.setattr(start_states, "_shared", None)
    monkeypatch.setenv(start_states.START_STATES_ENV, "0")
    assert start_states.resolve(True) is None  # 0 turns it off
    monkeypatch.setattr(start_states, "_shared", None)
    monkeypatch.setenv(start_states.START_STATES_ENV, "many")
    with pytest.raises(ValueError, match="RLGPT_START_STATES='many'"):
        start_states.shared()


def test_one_entry_holds_the_whole_start_in_a_few_hundred_kilobytes() -> None:
    cache = StartStates()
    SubtaskEnv(config(), start_states=cache).reset(seed=3)
    (entry,) = cache._entries.values()
    assert isinstance(entry, StartState) and entry.setup_steps > 0
    assert 20_000 < entry.nbytes() < 400_000


# Setup code that spins until its wall budget runs out: the sandbox stops it (timeout).
SLOW_SETUP = "def run(skills):\n    n = 0\n    while True:\n        n += 1\n    yield 'noop'\n"


def test_a_setup_stopped_by_the_wall_clock_is_not_remembered_as_a_bad_world() -> None:
    # A timeout says the machine was slow, not that the world is bad: the next reset
    # tries that world's setup again instead of skipping it for the process's lifetime.
    cache = StartStates()
    env = SubtaskEnv(config(SLOW_SETUP), start_states=cache, setup_wall_s=0.2)
    with pytest.raises(SetupError) as caught:
        env.reset(seed=3)
    assert caught.value.failure.cause == "timeout"
    assert cache.get(cache_key(env, 3)) is None


def test_a_trained_policys_rollout_books_its_worlds_setup_steps(tmp_path) -> None:
    """A rollout of a trained policy (``RolloutRequest.policy_path``) sets each world up
    with the config's setup code before the policy plays: those steps are the run's too,
    failed setups included, reported with their episodes and in the batch's total."""
    from helpers import wood_policy

    from episodes.runner import Rollouts
    from messages.rollout import RolloutRequest
    from rl.artifacts import sha256_of

    policy = wood_policy(tmp_path / "policy.zip")
    rollouts = Rollouts(tmp_path)
    for setup, seeds in ((SETUP, [3, 11]), (WET_SETUP, [2008])):
        cfg = config(setup)
        req = RolloutRequest(cfg.subtask, policy_path=str(policy), policy_sha256=sha256_of(policy),
                             config=cfg, seeds=seeds, wall_s=60)  # fmt: skip
        tally: dict = {}
        held_out(cfg, lambda obs: 0, seeds, tally)  # what the worlds' setups take
        episodes: list = []
        done = rollouts.run(req, episodes.append)
        reports = [e.report for e in episodes]
        assert sum(r.setup_steps for r in reports) == tally["setup_steps"] > 0
        assert done.steps == sum(r.steps + r.setup_steps for r in reports)
    assert reports[0].cause == "setup_failed" and reports[0].setup_steps > 0
