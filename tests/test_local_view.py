"""Guard: agents see the local view, their remembered map, inventory and status — never
the world map (issue 6). Real Crafter worlds, the real skills object and the sandbox."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import sandbox
from skills.skills import Skills
from worlds.crafter_world import VIEW_COLS, VIEW_ROWS, CrafterWorld
from worlds.world import Observation

OBSERVATION_FIELDS = {
    "view",
    "creatures",
    "inventory",
    "status",
    "facing",
    "daylight",
    "position",
    "names",
    "sleeping",
    "ripe",
    "missiles",
}


def _walk(world: CrafterWorld, steps: int, seed: int = 3):
    obs = world.reset(seed)
    skills = Skills(obs, world.action_names, seed=seed)
    rng = np.random.default_rng(seed)
    moves = ["move_left", "move_right", "move_up", "move_down", "do"]
    seen = [obs]
    infos = []
    for _ in range(steps):
        obs, _, done, info = world.step(str(rng.choice(moves)))
        skills._observe(obs, info)
        seen.append(obs)
        infos.append(info)
        if done:
            break
    return skills, seen, infos


def test_an_observation_holds_the_local_view_and_nothing_of_the_map() -> None:
    world = CrafterWorld()
    _, seen, infos = _walk(world, 200)
    assert {f.name for f in dataclasses.fields(Observation)} == OBSERVATION_FIELDS
    area = world._env._world.area
    for obs in seen:
        assert obs.view.shape == (VIEW_ROWS, VIEW_COLS)
        assert obs.view.size < area[0] * area[1] / 50
        # Creatures are those in the view, nothing beyond it.
        for _, dx, dy in obs.creatures:
            assert abs(dx) <= VIEW_COLS // 2 and abs(dy) <= VIEW_ROWS // 2
        # Ripe plants are plants in the view (Crafter draws them apart).
        assert set(obs.ripe) <= {(dx, dy) for kind, dx, dy in obs.creatures if kind == "plant"}
        # Missiles are arrows in the view (Crafter draws each pointing where it flies).
        arrows = {(dx, dy) for kind, dx, dy in obs.creatures if kind == "arrow"}
        assert {(dx, dy) for dx, dy, _, _ in obs.missiles} == arrows
        # Position is relative to where the episode started, not world coordinates.
        assert isinstance(obs.position, tuple) and len(obs.position) == 2
    assert seen[0].position == (0, 0)
    # Crafter's own info carries the whole map ('semantic') and the player's world
    # position; the world door passes neither.
    for info in infos:
        assert set(info) <= {"achievements", "discount"}


def test_the_remembered_map_is_made_of_tiles_the_player_saw() -> None:
    world = CrafterWorld()
    skills, seen, _ = _walk(world, 300)
    window = set()
    for obs in seen:
        px, py = obs.position
        cx, cy = obs.center
        for row in range(VIEW_ROWS):
            for col in range(VIEW_COLS):
                window.add((px + col - cx, py + row - cy))
    remembered = set(skills._memory)
    assert remembered, "the skills object remembers what it saw"
    assert remembered <= window  # no tile it never had in view
    area = world._env._world.area
    assert len(remembered) < area[0] * area[1] / 4


@pytest.mark.parametrize(
    "body",
    [
        "w = skills._obs",
        "w = skills._memory",
        "w = getattr(skills, '_obs')",
        "w = skills.__dict__",
        "w = type(skills)",
    ],
)
def test_agent_code_cannot_reach_behind_the_skill_api(body: str) -> None:
    source = f"def run(skills):\n    {body}\n    yield 'noop'\n"
    world = CrafterWorld()
    obs = world.reset(1)
    skills = Skills(obs, world.action_names, seed=1)
    try:
        compiled = sandbox.compile_code(source)
    except sandbox.SandboxError as err:
        assert err.failure.cause == "forbidden"
        return
    outcome = sandbox.run_policy(
        compiled,
        skills,
        lambda action: world.step(action)[2],
        max_steps=5,
        wall_s=5.0,
        allowed_actions=world.action_names,
    )
    assert outcome.failure is not None
    assert outcome.failure.cause in {"forbidden", "exception"}, outcome.failure


def test_a_learned_policy_observes_the_local_view() -> None:
    from messages.task import RLConfig, Subtask
    from rl.rl_env import SubtaskEnv

    config = RLConfig(
        subtask=Subtask("collect_wood", goal={"wood": 1}, max_steps=50),
        observation=["view", "inventory", "status"],
        primitives=["noop", "move_left", "do"],
    )
    env = SubtaskEnv(config, world_factory=CrafterWorld, flatten=False)
    obs, _ = env.reset(seed=0)
    view = np.asarray(obs["view"])
    # One channel per tile kind over the 7×9 local view (one-hot), nothing more.
    cells = VIEW_ROWS * VIEW_COLS
    assert view.size % cells == 0 and view.size // cells <= 40
    area = 64 * 64
    assert sum(np.asarray(v).size for v in obs.values()) < area / 2
