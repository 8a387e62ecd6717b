"""Arrows in the real Crafter game: the observation shows where each flies, and a guarded
player steps out of an arrow's way (or waits for it to pass) instead of taking 2 health.

Skeletons' arrows were a third of the health the diamond chain lost (BENCHMARKS.md,
"Arrows"): its walks stepped into tiles an arrow was about to enter.
"""

from __future__ import annotations

import crafter.objects
from helpers import edited_world

from skills.skills import Skills
from worlds.crafter_world import CrafterWorld


def _world(arrows: dict, seed: int = 7101) -> CrafterWorld:
    """A real Crafter world at noon (no zombie spawns), cleared to grass around the player
    at full health, with ``arrows`` (offset → the way it flies) added."""
    world = edited_world(seed, {}, {}, {"health": 9}, radius=5, step=150)
    env = world._env
    px, py = (int(v) for v in env._player.pos)
    for (dx, dy), facing in arrows.items():
        env._world.add(crafter.objects.Arrow(env._world, (px + dx, py + dy), facing))
    return world


def _play(world: CrafterWorld, policy, steps: int, guard: bool = True):
    """Drive ``policy(skills)`` for up to ``steps`` steps; (actions, health, position)."""
    skills = Skills(world._observe(), world.action_names)
    skills.guard(guard)
    actions = []
    for action in policy(skills):
        obs, _, done, info = world.step(action)
        skills._observe(obs, info)
        actions.append(action)
        if done or len(actions) >= steps:
            break
    return actions, skills.status()["health"], skills.position()


def test_the_observation_shows_where_each_arrow_flies():
    world = _world({(2, 0): (-1, 0), (0, -3): (0, 1)})
    assert world._observe().missiles == ((2, 0, -1, 0), (0, -3, 0, 1))
    obs, *_ = world.step("noop")
    assert obs.missiles == ((1, 0, -1, 0), (0, -2, 0, 1))  # one tile along each flight
    assert ("arrow", 1, 0) in obs.creatures


def test_a_guarded_player_steps_across_an_arrow_about_to_hit_it():
    # The arrow next to the player flies into its tile on this step, along the row the
    # walk goes: walking ahead of it only puts the hit off until the player stops.
    def policy(skills):
        yield from skills.walk_to(-4, 0, patience=20)
        yield "noop"
        yield "noop"

    actions, health, _ = _play(_world({(1, 0): (-1, 0)}), policy, 30)
    assert actions[0] in ("move_up", "move_down")  # across the flight, not along it
    assert health == 9
    # Unguarded, the same walk keeps ahead of the arrow, stops, and takes it.
    actions, health, _ = _play(_world({(1, 0): (-1, 0)}), policy, 30, guard=False)
    assert actions[0] == "move_left"
    assert health == 7


def test_a_walk_waits_one_step_for_an_arrow_to_cross_its_path():
    # The walk's next tile (1, 0) is where the arrow flies next: wait, then go on.
    world = _world({(1, -1): (0, 1)})
    skills = Skills(world._observe(), world.action_names)
    skills.guard(False)  # walks wait for arrows whether or not the player fights
    walk = skills.walk_to(4, 0, patience=20)
    assert next(walk) == "noop"
    obs, *_ = world.step("noop")
    skills._observe(obs, {})
    assert (1, 0, 0, 1) in obs.missiles  # it did fly into the tile the walk would enter
    actions = []
    try:
        action = next(walk)
        while True:
            obs, *_ = world.step(action)
            skills._observe(obs, {})
            actions.append(action)
            action = walk.send(None)
    except StopIteration as stop:
        assert stop.value is True
    assert len(actions) <= 5  # around the arrow (it holds its tile a step) or after it
    assert skills.status()["health"] == 9
    assert skills.position() == (3, 0)


def test_model_written_code_reads_the_arrows_in_view():
    # Skills.arrows() is what a policy sees of them (the sandbox hands a model's code this
    # same Skills object; the prompts' skill reference lists the method, test_prompts):
    # the same list as the observation, one tile further along after a step.
    world = _world({(2, 0): (-1, 0), (0, -3): (0, 1)})
    skills = Skills(world._observe(), world.action_names)
    assert skills.arrows() == ((2, 0, -1, 0), (0, -3, 0, 1))
    obs, *_ = world.step("noop")
    skills._observe(obs, {})
    assert skills.arrows() == ((1, 0, -1, 0), (0, -2, 0, 1))
    hits = [a for a in skills.arrows() if (a[0] + a[2], a[1] + a[3]) == (0, 0)]
    assert hits == [(1, 0, -1, 0)]  # the one next to the player flies into it next
