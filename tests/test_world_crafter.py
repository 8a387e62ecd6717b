"""CrafterWorld against the stock crafter.Env: same game, no map leaks, Recorder stats."""

from __future__ import annotations

import json

import crafter
import numpy as np
import pytest

from worlds.crafter_world import VIEW_COLS, VIEW_ROWS, CrafterWorld, spawn_ordered
from worlds.stats import StatsWriter
from worlds.world import UnknownActionError


def stock_env(seed: int, **kwargs) -> crafter.Env:
    """A stock env whose despawn choice iterates objects in spawn order, as ours does.

    Stock Crafter indexes a set of objects ordered by memory address when it despawns
    a creature, so even two stock envs with one seed part ways; fixing that order in
    both is what makes a step-by-step comparison meaningful.
    """
    env = crafter.Env(seed=seed, **kwargs)
    balance = env._balance_chunk
    env._balance_chunk = lambda chunk, objs: balance(chunk, spawn_ordered(env._world, objs))
    return env


def objects_snapshot(env: crafter.Env) -> list:
    return [(type(o).__name__, tuple(int(c) for c in o.pos), o.health) for o in env._world.objects]


def true_window(env: crafter.Env) -> np.ndarray:
    """The 7×9 tile window around the player, read from the hidden map."""
    px, py = (int(c) for c in env._player.pos)
    out = np.zeros((VIEW_ROWS, VIEW_COLS), np.int64)
    for row in range(VIEW_ROWS):
        for col in range(VIEW_COLS):
            x, y = px + col - VIEW_COLS // 2, py + row - VIEW_ROWS // 2
            if 0 <= x < env._world.area[0] and 0 <= y < env._world.area[1]:
                out[row, col] = env._world._mat_map[x, y]
    return out


@pytest.fixture(scope="module")
def world() -> CrafterWorld:
    return CrafterWorld()


def test_fast_path_replays_the_stock_game_step_by_step(world):
    reached_night = False
    # Seed 0 comes twice: the second time its world is restored from the cache of
    # generated worlds, and must play exactly like a freshly generated one.
    for seed in (0, 3, 0):
        stock = stock_env(seed)
        stock.reset()
        obs = world.reset(seed)
        assert (obs.view == true_window(stock)).all()
        rng = np.random.default_rng(seed)
        for step in range(400):
            index = int(rng.integers(len(world.action_names)))
            obs, reward, done, info = world.step(world.action_names[index])
            _, stock_reward, stock_done, stock_info = stock.step(index)
            ours = world._env
            assert (ours._world._mat_map == stock._world._mat_map).all(), step
            assert objects_snapshot(ours) == objects_snapshot(stock), step
            assert world.achievement_counts() == stock_info["achievements"], step
            assert obs.inventory.items() <= stock_info["inventory"].items(), step
            assert obs.status["health"] == stock_info["inventory"]["health"], step
            assert (reward, done) == (stock_reward, stock_done), step
            reached_night |= stock._world.daylight < 0.5
            if done:
                break
    # At night the stock renderer draws from the game's generator; cover that case.
    assert reached_night


def test_observation_holds_only_the_local_view(world):
    obs = world.reset(11)
    rng = np.random.default_rng(11)
    for _ in range(150):
        env = world._env
        assert obs.view.shape == (VIEW_ROWS, VIEW_COLS)
        assert (obs.view == true_window(env)).all()
        assert not obs.view.flags.writeable
        px, py = (int(c) for c in env._player.pos)
        visible = sorted(
            (type(o).__name__.lower(), int(o.pos[0]) - px, int(o.pos[1]) - py)
            for o in env._world.objects
            if o is not env._player
            and abs(int(o.pos[0]) - px) <= VIEW_COLS // 2
            and abs(int(o.pos[1]) - py) <= VIEW_ROWS // 2
        )
        assert sorted(obs.creatures) == visible
        for value in (obs.inventory, obs.status, obs.names, obs.position, obs.facing):
            assert not isinstance(value, np.ndarray)
        obs, _, done, info = world.step(world.action_names[int(rng.integers(17))])
        assert set(info) == {"achievements", "discount"}
        if done:
            break


def test_render_on_request_leaves_the_game_unchanged():
    plain, rendering = CrafterWorld(), CrafterWorld()
    plain.reset(5)
    rendering.reset(5)
    for step in range(220):  # past dusk (~step 150), when rendering draws noise
        frame = rendering.render()
        assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8
        action = "noop" if step % 3 else "move_left"
        a, b = plain.step(action), rendering.step(action)
        assert (a[0].view == b[0].view).all() and a[0].creatures == b[0].creatures
        assert (
            plain._env._world.random.get_state()[2] == rendering._env._world.random.get_state()[2]
        )


def test_unknown_action_is_refused_with_the_valid_names(world):
    world.reset(1)
    with pytest.raises(UnknownActionError, match="move_left"):
        world.step("fly")


def test_stats_lines_match_crafter_recorder(tmp_path):
    seed, length = 4, 120
    stock = crafter.Recorder(
        stock_env(seed, length=length), tmp_path / "stock", save_video=False, save_episode=False
    )
    ours = CrafterWorld(length=length)
    writer = StatsWriter(tmp_path / "ours" / "stats.jsonl", ours.achievement_names)
    stock.reset()
    ours.reset(seed)
    writer.begin()
    rng = np.random.default_rng(seed)
    done = False
    while not done:
        index = int(rng.integers(17))
        _, _, stock_done, _ = stock.step(index)
        _, reward, done, info = ours.step(ours.action_names[index])
        writer.record(reward, info, done)
        assert done == stock_done
    expected = (tmp_path / "stock" / "stats.jsonl").read_text().splitlines()
    got = writer.path.read_text().splitlines()
    assert [json.loads(line) for line in got] == [json.loads(line) for line in expected]
    assert list(json.loads(got[0])) == list(json.loads(expected[0]))  # same key order


def test_the_pixel_free_path_never_renders():
    # The speed of skipping frames is measured in benchmarks/bench_env.py; here, that
    # the fast path really does skip them.
    world = CrafterWorld()

    def refuse(*args, **kwargs):
        raise AssertionError("rendered a frame nobody asked for")

    world._env.render = refuse
    world._env._local_view = refuse
    world.reset(2)
    for i in range(300):
        if world.step(("noop", "move_left", "move_right", "do")[i % 4])[2]:
            world.reset()


def test_a_world_restored_from_the_cache_belongs_to_the_env_that_restored_it():
    from worlds import crafter_world

    first, second = CrafterWorld(), CrafterWorld()
    seed = 424242
    a = first.reset(seed)
    assert any(key[0] == seed for key in crafter_world._WORLDS)
    b = second.reset(seed)  # restored, not generated
    assert (a.view == b.view).all() and a.inventory == b.inventory
    live = second._env._world
    assert all(obj.world is live for obj in live.objects)
    for step in range(300):  # creatures move, spawn and despawn in the restored world
        action = ("noop", "move_left", "do", "move_up")[step % 4]
        x, y = first.step(action), second.step(action)
        assert (x[0].view == y[0].view).all() and x[0].creatures == y[0].creatures
        if x[2]:
            break
