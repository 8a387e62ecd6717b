"""The skill API and the policy driver on real Crafter episodes."""

from __future__ import annotations

import types

import numpy as np
import pytest
from crafter import constants
from RestrictedPython import compile_restricted

from skills import policies
from skills.skills import Skills, run_unsandboxed
from worlds.crafter_world import VIEW_COLS, VIEW_ROWS, CrafterWorld

# Fresh seeds, none used while writing the policies; 10 episodes of ≤500 steps each.
EVAL_SEEDS = range(1000, 1010)


@pytest.fixture(scope="module")
def world() -> CrafterWorld:
    return CrafterWorld()


@pytest.mark.parametrize(
    ("name", "policy", "succeeded"),
    [
        ("collect_wood", policies.collect_wood, policies.wood_collected),
        ("place_table", policies.place_table, policies.table_placed),
    ],
)
def test_reference_policy_succeeds_in_most_episodes(world, name, policy, succeeded):
    results = [run_unsandboxed(world, policy, 500, seed=s, success=succeeded) for s in EVAL_SEEDS]
    wins = sum(r.success for r in results)
    mean_steps = sum(r.steps for r in results) / len(results)
    causes = sorted({r.cause for r in results if not r.success})
    print(f"\n{name}: {wins}/{len(results)} succeeded, mean {mean_steps:.0f} steps {causes}")
    assert wins >= 8


def test_policy_sources_compile_under_restricted_python():
    for name, source in policies.SOURCES.items():
        code = compile_restricted(source, f"<{name}>", "exec")
        assert isinstance(code, types.CodeType)


def test_attack_twenty_times_is_a_four_line_policy(world):
    def attack_20(skills):
        for _ in range(20):
            yield "do"

    result = run_unsandboxed(world, attack_20, 100, seed=3)
    assert result.trace == (("do", 20),)
    assert (result.cause, result.success, result.steps) == ("policy_finished", True, 20)


def test_invalid_action_ends_the_episode_with_its_cause(world):
    def bad(skills):
        yield "move_left"
        yield "teleport"

    result = run_unsandboxed(world, bad, 100, seed=3)
    assert (result.cause, result.steps, result.success) == ("invalid_action", 1, False)
    assert "teleport" in result.error


def test_policy_exception_is_reported_not_raised(world):
    def crashing(skills):
        yield "noop"
        raise ZeroDivisionError("boom")

    result = run_unsandboxed(world, crashing, 100, seed=3)
    assert result.cause == "policy_error" and result.error == "ZeroDivisionError: boom"


def test_step_budget_stops_an_endless_policy(world):
    def forever(skills):
        while True:
            yield "noop"

    result = run_unsandboxed(world, forever, 30, seed=3)
    assert (result.cause, result.steps) == ("step_budget", 30)


def test_skill_answers_are_plain_copies(world):
    skills = Skills(world.reset(7), world.action_names)
    public = [n for n in dir(skills) if not n.startswith("_")]
    assert all(callable(getattr(skills, n)) for n in public)
    inventory = skills.inventory()
    inventory["wood"] = 99
    assert skills.inventory()["wood"] == 0
    view = skills.view()
    assert len(view) == VIEW_ROWS and all(len(row) == VIEW_COLS for row in view)
    for answer in (view, skills.creatures(), skills.remembered("grass"), skills.status()):
        assert not isinstance(answer, np.ndarray)
    assert isinstance(skills.facing_tile(), str)
    assert skills.requirements("table") == dict(constants.place["table"]["uses"])


def test_skills_remember_only_tiles_that_were_in_view(world):
    seen: dict[tuple[int, int], set[int]] = {}
    holder: dict[str, Skills] = {}

    def explorer(skills):
        holder["skills"] = skills
        yield from skills.explore(120)

    def on_step(reward, info, done):
        env = world._env
        px, py = (int(c) for c in env._player.pos)
        for dx in range(-(VIEW_COLS // 2), VIEW_COLS // 2 + 1):
            for dy in range(-(VIEW_ROWS // 2), VIEW_ROWS // 2 + 1):
                x, y = px + dx, py + dy
                if 0 <= x < env._world.area[0] and 0 <= y < env._world.area[1]:
                    seen.setdefault((x, y), set()).add(int(env._world._mat_map[x, y]))
                else:
                    seen.setdefault((x, y), set()).add(0)

    world.reset(21)
    start = tuple(int(c) for c in world._env._player.pos)
    on_step(0.0, {}, False)  # the first view, before any step
    result = run_unsandboxed(world, explorer, 120, seed=21, on_step=on_step)
    assert result.steps > 60  # it did walk
    skills = holder["skills"]
    names = skills._obs.names
    assert len(skills._memory) > VIEW_COLS * VIEW_ROWS
    for (x, y), name in skills._memory.items():
        absolute = (x + start[0], y + start[1])
        assert absolute in seen, f"remembered {absolute} that was never in view"
        assert names.index(name) in seen[absolute]
    px, py = skills.position()
    for kind in ("tree", "water", "stone", "sand"):
        offset = skills.nearest(kind)
        if offset is not None:
            assert (px + offset[0] + start[0], py + offset[1] + start[1]) in seen


# ---------------------------------------------------------------------- synthetic views

_NAMES = ("void", "grass", "stone", "water", "tree", "path", "sand")


def _obs(rows, creatures=(), position=(0, 0), facing=(0, 1), inventory=None, daylight=1.0):
    """An Observation from a 7×9 grid of one-letter tiles: g grass, s stone, w water,
    t tree, p path, a sand."""
    letters = {"g": 1, "s": 2, "w": 3, "t": 4, "p": 5, "a": 6}
    view = np.array([[letters[c] for c in row] for row in rows], np.int16)
    assert view.shape == (VIEW_ROWS, VIEW_COLS)
    from worlds.world import Observation, freeze_view

    return Observation(
        view=freeze_view(view),
        creatures=tuple(creatures),
        inventory=dict(inventory or {}),
        status={"health": 9.0, "food": 9.0, "drink": 9.0, "energy": 9.0},
        facing=facing,
        daylight=daylight,
        position=position,
        names=_NAMES,
    )


_OPEN = ["ggggggggg"] * VIEW_ROWS


def test_sighted_remembers_a_cow_out_of_view_and_forgets_it_when_it_is_gone():
    skills = Skills(_obs(_OPEN, [("cow", 3, 0), ("zombie", -2, 0)]), constants.actions)
    assert skills.sighted("cow") == ((3, 0),)
    assert skills.sighted("zombie") == ()  # hostiles are not kept
    # Walk 6 to the left: the cow's spot (3, 0) is out of view now, still remembered.
    skills._observe(_obs(_OPEN, position=(-6, 0)), {"achievements": ()})
    assert skills.sighted("cow") == ((9, 0),)
    assert skills.sighted("cow", max_age=0) == ()
    # Back where the spot is in view, and no cow there: forgotten.
    skills._observe(_obs(_OPEN, position=(0, 0)), {"achievements": ()})
    assert skills.sighted("cow") == ()


def test_enclosed_and_evade():
    walled = ["sssssssss", "sssssssss", "sssssssss", "ssssgssss", "sssssssss"]
    walled += ["sssssssss", "sssssssss"]
    assert Skills(_obs(walled), constants.actions).enclosed()
    assert not Skills(_obs(_OPEN), constants.actions).enclosed()
    # A zombie two tiles to the right: evade steps left (away), never towards it.
    skills = Skills(_obs(_OPEN, [("zombie", 2, 0)]), constants.actions)
    assert next(iter(skills.evade(1))) == "move_left"
    # Nothing hostile in view: nothing to evade.
    calm = Skills(_obs(_OPEN, [("cow", 2, 0)]), constants.actions)
    assert list(calm.evade(3)) == []
