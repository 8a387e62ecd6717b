"""The offline knowledge: the recipe planner, the skill library and its revisions, on
Crafter's own data and real Crafter episodes."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest
from crafter import constants
from helpers import edited_world

import sandbox
from knowledge import library, options, recipes, revisions, skill_prelude, survival
from knowledge.revisions import Params
from skills.policies import compile_policy
from skills.skills import Skills, run_unsandboxed
from worlds.crafter_world import CrafterWorld

# Fresh seeds, never used while writing the skills.
FRESH_SEEDS = (7001, 7002, 7003)

CAUSES = (
    "step_budget",
    "policy_finished",
    "episode_done",
    "exception",
    "policy_error",
    "timeout",
    "invalid_action",
)


@pytest.fixture(scope="module")
def world() -> CrafterWorld:
    return CrafterWorld()


# ---------------------------------------------------------------------- recipes


def test_diamond_chain_follows_the_data():
    steps = recipes.chain("diamond")
    names = [s.name for s in steps]
    assert names[0] == "collect_wood" and names[-1] == "collect_diamond"
    assert set(names) == {
        "collect_wood", "place_table", "make_wood_pickaxe", "collect_stone",
        "make_stone_pickaxe", "place_furnace", "collect_coal", "collect_iron",
        "make_iron_pickaxe", "collect_diamond",
    }  # fmt: skip
    # Topological: every dependency comes first; stations are placed once.
    for i, step in enumerate(steps):
        assert all(dep in names[:i] for dep in step.depends), step.name
    assert names.count("place_table") == 1
    # Tools required to collect, from data: stone needs the wood pickaxe, and so on.
    by_name = {s.name: s for s in steps}
    for tile in ("stone", "iron", "diamond"):
        for tool in constants.collect[tile]["require"]:
            assert f"make_{tool}" in by_name[f"collect_{tile}"].depends
    # Consumed materials aggregated over the chain: the table's wood plus every tool's.
    wood = constants.place["table"]["uses"].get("wood", 0) + sum(
        constants.make[t]["uses"].get("wood", 0)
        for t in ("wood_pickaxe", "stone_pickaxe", "iron_pickaxe")
    )
    assert by_name["collect_wood"].goal == {"wood": wood}
    stone = constants.make["stone_pickaxe"]["uses"]["stone"] + constants.place["furnace"][
        "uses"
    ].get("stone", 0)
    assert by_name["collect_stone"].goal == {"stone": stone}
    assert by_name["make_iron_pickaxe"].near == tuple(constants.make["iron_pickaxe"]["nearby"])
    assert all(s.achievement in constants.achievements for s in steps)


def test_chain_takes_items_and_achievement_names():
    assert [s.name for s in recipes.chain("collect_diamond")] == [
        s.name for s in recipes.chain("diamond")
    ]
    assert recipes.chain("make_iron_pickaxe")[-1].name == "make_iron_pickaxe"
    assert [s.name for s in recipes.chain("wood_pickaxe")] == [
        "collect_wood", "place_table", "make_wood_pickaxe",
    ]  # fmt: skip
    # A sapling is walled in with stone while it ripens: the stone and its pickaxe first.
    assert [s.name for s in recipes.chain("eat_plant")] == [
        "collect_wood", "place_table", "collect_sapling", "make_wood_pickaxe",
        "place_plant", "collect_stone", "eat_plant",
    ]  # fmt: skip
    assert recipes.chain("place_stone")[-1].kind == "place"
    with pytest.raises(KeyError):
        recipes.chain("unobtainium")


def test_every_achievement_has_a_step_and_the_curriculum_orders_them():
    for name in constants.achievements:
        step = recipes.achievement_step(name)
        assert step.achievement == name and step.max_steps > 0
        assert step.kind in recipes.STEP_KINDS
    order = recipes.curriculum()
    names = [s.name for s in order]
    assert len(names) == len(set(names)) == len(constants.achievements) == 22
    for i, step in enumerate(order):
        assert all(dep in names[:i] for dep in step.depends), step.name
    described = recipes.describe(order)
    assert json.loads(json.dumps(described)) == described
    assert {"name", "goal", "achievement", "depends", "max_steps"} <= set(described[0])


def test_the_curriculum_arms_first_and_leaves_the_slow_and_dangerous_to_the_end():
    names = [s.name for s in recipes.curriculum()]
    # A pickaxe and stone before the first night (its shelter is walled in with stone)
    # and swords before the fights: all before anything that does not need them.
    first = set(names[: names.index("make_stone_sword") + 1])
    assert first == {
        "collect_wood", "place_table", "make_wood_pickaxe", "make_wood_sword",
        "collect_stone", "make_stone_sword",
    }  # fmt: skip
    assert names.index("make_wood_sword") < names.index("defeat_zombie")
    assert set(names[-2:]) == {"defeat_skeleton", "eat_plant"}


# ---------------------------------------------------------------------- library


def _all_sources() -> list[tuple[str, str]]:
    out = []
    for step in recipes.curriculum():
        for params in (revisions.first_params(step), revisions.best_params(step)):
            out.append((step.name, library.code_for(step, params)))
        out.extend((name, src) for name, _, src in options.options_for(step))
    out.extend((name, options.option(name)) for name in options.OPTION_NAMES)
    out.extend((stage.name, stage.source) for stage in survival.survival_stages())
    return out


def test_every_template_option_and_stage_compiles_in_the_sandbox():
    sources = _all_sources()
    assert len(sources) > 100
    for name, source in sources:
        compiled = sandbox.compile_code(source, filename=f"<{name}>")
        assert "run" in compiled.functions, name


def test_options_are_short_coded_actions_for_the_step():
    names = [n for n, _, _ in options.options_for(recipes.achievement_step("collect_wood"))]
    assert names[0] == "walk_to_tree" and {"attack", "explore"} <= set(names)
    names = [n for n, _, _ in options.options_for(recipes.achievement_step("make_wood_pickaxe"))]
    assert {"place_table", "make_wood_pickaxe", "walk_to_table"} <= set(names)
    assert set(options.OPTION_NAMES) >= {"walk_to_tree", "attack", "explore", "place_table"}


def test_each_cause_revises_the_params():
    step = recipes.achievement_step("collect_iron")
    first = revisions.first_params(step)
    assert (first.secure, first.dig, first.fight, first.survive) == (False,) * 4
    for cause in CAUSES:
        revised = revisions.revise(step, first, cause, "detail")
        assert revised is not None, cause
        params, reason = revised
        assert params != first and cause in reason, cause
    assert revisions.revise(step, first, "success", "") is None
    # Revising again and again changes something each time and then stops (→ RL).
    for cause in CAUSES:
        params, seen = first, {first}
        for _ in range(30):
            revised = revisions.revise(step, params, cause, "")
            if revised is None:
                break
            params = revised[0]
            assert params not in seen
            seen.add(params)
        else:
            pytest.fail(f"{cause}: revisions never stop")


def test_revisions_change_the_code():
    step = recipes.achievement_step("collect_iron")
    first = revisions.first_params(step)
    for cause in ("policy_finished", "step_budget", "episode_done"):
        params, _ = revisions.revise(step, first, cause, "")
        assert library.code_for(step, params) != library.code_for(step, first)


def test_survival_stages_cover_every_vital():
    stages = survival.survival_stages()
    assert {s.stat for s in stages} >= {"drink", "food", "energy", "health"}
    for stage in stages:
        assert stage.below < stage.until or stage.stat == "daylight"
        assert stage.reason


def test_params_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Params().patience = 5  # type: ignore[misc]


def test_the_skill_prelude_imports_and_compiles_in_the_sandbox():
    """The prelude is a real module (its placeholder main included) and policy source the
    sandbox accepts, as it stands."""
    assert callable(skill_prelude.run) and callable(skill_prelude.main)
    source = Path(skill_prelude.__file__).read_text(encoding="utf-8")
    compiled = sandbox.compile_code(source, filename="<skill_prelude>")
    assert {"run", "main", "obtain", "vitals"} <= set(compiled.functions)


def test_the_skill_prelude_defaults_are_the_fully_revised_params():
    step = recipes.achievement_step("place_table")  # a step of at most 300 steps
    best = revisions.best_params(step)
    for field in dataclasses.fields(best):
        assert getattr(skill_prelude, field.name.upper()) == getattr(best, field.name), field.name


def _constants(source: str) -> dict[str, object]:
    """A policy's top-level constants, in order."""
    tree = ast.parse(source)
    return {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
    }


def test_a_template_writes_params_and_tables_into_the_prelude_constants():
    step = recipes.achievement_step("make_wood_pickaxe")
    first = revisions.first_params(step)
    written = _constants(library.code_for(step, first))
    own = _constants(Path(skill_prelude.__file__).read_text(encoding="utf-8"))
    assert list(written) == list(own)  # every constant, in the file's order
    for field in dataclasses.fields(first):
        assert written[field.name.upper()] == getattr(first, field.name), field.name
    assert written["HOW"]["wood_pickaxe"] == "make" and "wood" in written["SOURCES"]
    assert written["ACTIONS"] == list(constants.actions)
    assert written["DRINK_BELOW"] == skill_prelude.DRINK_BELOW  # kept as the file has it


# ---------------------------------------------------------------------- real Crafter


def _compose(steps, params):
    codes = [(s, compile_policy(library.code_for(s, params(s)))) for s in steps]

    def policy(skills):
        for step, code in codes:
            if skills.achievements().get(step.achievement):
                continue
            for action in code(skills):
                yield action
                if skills.achievements().get(step.achievement):
                    break

    return policy


def test_best_wood_pickaxe_chain_succeeds_on_fresh_seeds(world):
    steps = recipes.chain("wood_pickaxe")
    policy = _compose(steps, revisions.best_params)
    for seed in FRESH_SEEDS:
        result = run_unsandboxed(
            world,
            policy,
            400,
            seed=seed,
            success=lambda s: bool(s.achievements().get("make_wood_pickaxe")),
        )
        assert result.success, (seed, result.cause, result.steps)
        assert {"collect_wood", "place_table"} <= set(result.achievements)


def test_best_template_runs_in_the_sandbox(world):
    """The make_wood_pickaxe template alone, through the sandbox: it secures its own
    wood and table."""
    step = recipes.achievement_step("make_wood_pickaxe")
    compiled = sandbox.compile_code(library.code_for(step))
    obs = world.reset(FRESH_SEEDS[0])
    skills = Skills(obs, world.action_names, seed=FRESH_SEEDS[0])

    def step_fn(action: str) -> bool:
        obs, _, done, info = world.step(action)
        skills._observe(obs, info)
        return done or bool(skills.achievements().get("make_wood_pickaxe"))

    outcome = sandbox.run_policy(
        compiled,
        skills,
        step_fn,
        max_steps=400,
        wall_s=30.0,
        allowed_actions=world.action_names,
    )
    assert outcome.failure is None, outcome.failure
    assert skills.achievements().get("make_wood_pickaxe")


def test_skills_hold_no_reference_to_the_world(world):
    """What coded policies reach (Skills' public methods, through the sandbox's proxy)
    is built from observations only: no attribute of the skills object is the world,
    its env or its map."""
    skills = Skills(world.reset(5), world.action_names)
    forbidden = (CrafterWorld, type(world._env), type(world._env._world))
    for name, value in vars(skills).items() if hasattr(skills, "__dict__") else ():
        assert not isinstance(value, forbidden), name
    for name in Skills.__slots__ if hasattr(Skills, "__slots__") else ():
        assert not isinstance(getattr(skills, name, None), forbidden), name
    # Everything it remembers was in a local view: at most the first view's tiles now.
    assert len(skills._memory) <= 9 * 7
    proxy = sandbox.ReadOnlyProxy(skills)
    with pytest.raises(AttributeError):
        proxy._memory  # noqa: B018 — private state is out of the policy's reach


def test_walks_never_enter_lava_and_tunnel_with_a_pickaxe(world):
    """On a synthetic remembered map (real Skills): the only short way passes lava, the
    plan goes around it; with a pickaxe and tunnelling on, it digs through stone."""
    skills = Skills(world.reset(5), world.action_names)
    px, py = skills.position()
    memory = {}
    for dx in range(-3, 8):
        for dy in range(-3, 4):
            memory[(px + dx, py + dy)] = "stone"
    for dx in range(0, 6):
        memory[(px + dx, py)] = "grass"  # corridor to the goal …
    memory[(px + 3, py)] = "lava"  # … blocked by lava
    for dx in range(0, 6):
        memory[(px + dx, py + 2)] = "grass"  # a detour two rows down
    memory[(px, py + 1)] = memory[(px + 5, py + 1)] = "grass"
    memory[(px + 6, py)] = "tree"
    skills._memory = memory
    skills._creature_map = {}
    goal = lambda pos, d: memory.get((pos[0] + d[0], pos[1] + d[1])) == "tree"  # noqa: E731
    plan = skills._search(goal)
    assert plan is not None
    visited = [(pos[0] + d[0], pos[1] + d[1]) for d, pos, _ in plan[:-1]]
    assert (px + 3, py) not in visited and all(memory[p] != "lava" for p in visited)
    assert not any(dig for _, _, dig in plan)
    # With a pickaxe and tunnelling on, digging the stone beside the lava is shorter.
    memory[(px, py + 2)] = "stone"  # close the detour's start: only digging remains
    memory[(px, py + 1)] = "stone"
    assert skills._search(goal, dig=False) is None
    skills._obs = dataclasses.replace(
        skills._obs, inventory={**skills._obs.inventory, "wood_pickaxe": 1}
    )
    plan = skills._search(goal, dig=True)
    assert plan is not None and any(dig for _, _, dig in plan)
    assert all(memory.get((p[0] + d[0], p[1] + d[1])) != "lava" for d, p, _ in plan)


def _survival_obs(daylight, drink, food=9.0, health=9.0, water=True):
    import numpy as np

    from worlds.world import Observation, freeze_view

    names = ("void", "grass", "water")
    view = np.ones((7, 9), np.int16)
    if water:
        view[3, 8] = 2  # water four tiles to the right
    return Observation(
        view=freeze_view(view),
        creatures=(),
        inventory={},
        status={"health": health, "food": food, "drink": drink, "energy": 9.0},
        facing=(0, 1),
        daylight=daylight,
        position=(0, 0),
        names=names,
    )


def test_survival_trips_give_way_at_night_and_when_hurt():
    stages = {s.name: s for s in survival.survival_stages()}
    # The shelter need starts at dusk, before the night, so drink and food are topped
    # up while it is light.
    assert stages["shelter"].below >= skill_prelude.NIGHT_BELOW
    drink = compile_policy(stages["drink_water"].source)

    def first_action(obs, policy=drink):
        return next(iter(policy(Skills(obs, constants.actions))), None)

    # By day, low drink: it heads for the water in view.
    assert first_action(_survival_obs(1.0, drink=3.0)) == "move_right"
    # At night a trip to water out of view waits for the shelter unless drink is
    # critical…
    assert first_action(_survival_obs(0.1, drink=3.0, water=False)) is None
    assert first_action(_survival_obs(0.1, drink=1.0, water=False)) is not None
    assert first_action(_survival_obs(0.1, drink=3.0)) == "move_right"  # water in view
    # Low health does not stop it: there is no retreat (HEALTH_BELOW and WEAK are 0,
    # measured better, BENCHMARKS.md, History), and health comes back only while drink
    # and food last…
    assert skill_prelude.WEAK == 0 and skill_prelude.HEALTH_BELOW == 0
    assert first_action(_survival_obs(1.0, drink=3.0, health=3.0)) == "move_right"
    # …while with WEAK set (a retreat to give way to) the same trip waits when hurt.
    source = stages["drink_water"].source
    assert "\nWEAK = 0\n" in source
    weak = compile_policy(source.replace("\nWEAK = 0\n", "\nWEAK = 4\n"))
    assert first_action(_survival_obs(1.0, drink=3.0, health=3.0), weak) is None
    assert first_action(_survival_obs(1.0, drink=3.0), weak) == "move_right"


# ---------------------------------------------------------------------- deaths (real worlds)


def _drive(world, source: str, steps: int) -> list[str]:
    """Run policy ``source`` on ``world`` as it stands for ``steps`` steps; the actions."""
    obs = world._observe()
    skills = Skills(obs, world.action_names)
    actions = []
    for action in compile_policy(source)(skills):
        obs, _, done, info = world.step(action)
        skills._observe(obs, info)
        actions.append(action)
        if done or len(actions) >= steps:
            break
    return actions


STONE_RING = {(1, 0): "stone", (-1, 0): "stone", (0, 1): "stone", (0, -1): "stone"}


def test_a_walled_in_player_waits_for_the_zombie_outside_to_go():
    # At dawn zombies wait next to the nook; stepping out for water with drink at 3 (not
    # critical) walked into them (a common death of the diamond policy).
    stages = {s.name: s for s in survival.survival_stages()}
    held = {"wood_pickaxe": 1, "stone": 1, "drink": 3}
    world = edited_world(7001, STONE_RING, {(2, 0): "Zombie"}, held)
    assert _drive(world, stages["drink_water"].source, 6) == ["noop"] * 6
    # With no hostile outside, the same stage digs out for water at once.
    world = edited_world(7001, STONE_RING, {}, held)
    assert "noop" not in _drive(world, stages["drink_water"].source, 6)
    # A critical drink goes out whatever waits there.
    world = edited_world(7001, STONE_RING, {(2, 0): "Zombie"}, dict(held, drink=1))
    assert "noop" not in _drive(world, stages["drink_water"].source, 3)


def test_a_trip_for_water_gives_way_when_night_falls_on_the_way():
    # A trip that set out at dusk (light 0.59, drink 4: not critical) went on for up to
    # 150 steps into the night on the grassland, where zombies swarm; it now checks
    # between legs of LEG steps and gives way to the shelter once it is dark.
    stages = {s.name: s for s in survival.survival_stages()}
    held = {"drink": 4}
    world = edited_world(7002, {}, {}, held, radius=64, step=140)
    assert world._observe().daylight > skill_prelude.NIGHT_BELOW
    actions = _drive(world, stages["drink_water"].source, 100)
    assert len(actions) <= skill_prelude.LEG + 5
    assert world._observe().daylight < skill_prelude.NIGHT_BELOW
    # By day the same trip goes on searching.
    world = edited_world(7002, {}, {}, held, radius=64, step=0)
    assert len(_drive(world, stages["drink_water"].source, 100)) == 100


def test_a_player_walled_in_by_water_drinks_without_stepping_out():
    # Water is a wall no zombie crosses; a nook by a lake let the player drink from
    # inside, instead of leaving it (at night) once drink ran low.
    stages = {s.name: s for s in survival.survival_stages()}
    walls = {**STONE_RING, (1, 0): "water"}
    held = {"wood_pickaxe": 1, "stone": 1, "health": 5, "drink": 3, "energy": 9}
    world = edited_world(7003, walls, {}, held)
    start = world._observe().position
    _drive(world, stages["retreat"].source, 12)
    obs = world._observe()
    assert obs.position == start
    assert obs.status["drink"] >= 8


def test_the_night_in_the_shelter_lasts_until_zombies_stop_spawning():
    # Leaving the nook at light 0.6 met the night's zombies (Crafter spawns them on the
    # grassland up to light ~0.83 and removes them only above it): the composed policy's
    # shelter need now keeps the player walled in until DAWN. (On sand no zombie spawns
    # here, so nothing else keeps it in.)
    from episodes.composite import run_composed
    from knowledge.survival import survival_needs
    from messages.task import Subtask

    class Dusk(CrafterWorld):
        def reset(self, seed=None):
            super().reset(seed)
            edited_world(seed, STONE_RING, {}, {"wood_pickaxe": 1}, radius=64, step=270,
                          ground="sand", world=self)  # fmt: skip
            return self._observe()

    light = []
    stages = library.coded_stages(recipes.chain("stone_pickaxe"))[3:4]  # collect stone
    goal = Subtask("stone", "collect stone", goal={"stone": 9}, max_steps=60)
    ep = run_composed(Dusk(), stages, survival_needs(), goal, 7004, wall_s=60,
                      on_step=lambda obs, *rest: light.append(obs.daylight))  # fmt: skip
    night = ep.stages[0]
    assert night.name == "shelter" and night.success, ep.stages[:2]
    # Crafter's balance keeps int(3.5 - 3 * light) zombies per grass chunk: none above 0.83.
    assert light[0] < 0.5 and light[night.steps - 1] > 0.83
