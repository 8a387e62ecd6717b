"""The diamond chain's skills in Minetest: a descent that never enters lava or water,
smelting in a furnace the skills make and place, and the chain as policy source the
sandbox runs (it compiles, imports nothing, names nothing private, and its first steps
play out in a real world through the sandbox).

The descent's safety is tested on a small stand-in for the mod's body (the same rules of
moving, falling and digging over a map set up here, with lava and water where a test
wants them; no server needed); the rest on a real ``minetestserver``, skipped with the
install command where Minetest is missing."""

from __future__ import annotations

import ast
import dataclasses

import numpy as np
import pytest
from helpers import need_minetest

import sandbox
from worlds.minetest import CHAIN, MinetestWorld
from worlds.minetest.skills import VoxelSkills, run_voxel_code, run_voxel_policy
from worlds.minetest.templates import START_STATES, chain_code, record, step_code
from worlds.minetest.world import FACINGS, GameRules, NodeRules, VoxelObservation

STONE, AIR = "default:stone", "air"
LAVA, WATER = "default:lava_source", "default:water_source"
NAMES = (AIR, STONE, LAVA, WATER, "default:cobble")
RULES = NodeRules(
    walkable=frozenset({STONE, "default:cobble", "unknown"}),
    liquid=frozenset({LAVA, WATER}),
    damaging=frozenset({LAVA}),
    drowning=frozenset({LAVA, WATER}),
    diggers={STONE: frozenset({"default:pick_stone"})},
)
DIGS = {
    "dig": (1, 0),
    "dig_high": (1, 1),
    "dig_low": (1, -1),
    "dig_up": (0, 2),
    "dig_down": (0, -1),
}


@dataclasses.dataclass
class Body:
    """A stand-in for the mod's body in a map of stone (air above y = 0) with what a test
    puts in it: it moves, falls and digs as the mod does, and says when it entered a
    liquid or fell further than the safe height."""

    nodes: dict
    pos: tuple[int, int, int] = (0, 0, 0)
    heading: int = 0  # the mod's: 0 north (+z), 1 east, 2 south, 3 west
    hurt: list = dataclasses.field(default_factory=list)
    radius: int = 4

    def name(self, x: int, y: int, z: int) -> str:
        return self.nodes.get((x, y, z), AIR if y > 0 else STONE)

    def solid(self, p) -> bool:
        return self.name(*p) in RULES.walkable

    def ahead(self, up: int, reach: int = 1):
        dx, dy = FACINGS[self.heading]
        x, y, z = self.pos
        return (x + reach * dx, y + up, z - reach * dy)

    def settle(self) -> None:
        fall = 0
        while True:
            x, y, z = self.pos
            if self.name(x, y, z) in RULES.liquid:
                self.hurt.append(("in", self.name(x, y, z), self.pos))
                return
            if self.solid((x, y - 1, z)):
                if fall > 3:
                    self.hurt.append(("fell", fall, self.pos))
                return
            self.pos, fall = (x, y - 1, z), fall + 1

    def step(self, action: str) -> None:
        if action in ("turn_left", "turn_right"):
            self.heading = (self.heading + (1 if action == "turn_right" else 3)) % 4
        elif action == "forward":
            target = self.ahead(0)
            if not self.solid(target) and not self.solid((target[0], target[1] + 1, target[2])):
                self.pos = target
                self.settle()
        elif action == "jump":  # up onto the node in front, from the ground
            x, y, z = self.pos
            target = self.ahead(1)
            free = not self.solid(target) and not self.solid((target[0], target[1] + 1, target[2]))
            if self.solid((x, y - 1, z)) and not self.solid((x, y + 2, z)) and free:
                self.pos = target
                self.settle()
        elif action in DIGS:
            reach, up = DIGS[action]
            x, y, z = self.ahead(up, reach)
            if self.name(x, y, z) == STONE:
                self.nodes[(x, y, z)] = AIR
            self.settle()
        else:
            raise AssertionError(f"the descent should not need {action}")

    def observe(self) -> VoxelObservation:
        r, below, above = self.radius, 3, 4
        x, y, z = self.pos
        voxels = np.zeros((below + above + 1, 2 * r + 1, 2 * r + 1), np.int16)
        for level in range(below + above + 1):
            for row in range(2 * r + 1):
                for col in range(2 * r + 1):
                    at = (x - r + col, y - below + level, z + r - row)
                    voxels[level, row, col] = NAMES.index(self.name(*at))
        return VoxelObservation(
            view=voxels[below],
            creatures=(),
            inventory={"default:pick_stone": 1},
            status={"health": 20.0, "breath": 10.0},
            facing=FACINGS[self.heading],
            daylight=1.0,
            position=(x, -z),
            names=NAMES,
            voxels=voxels,
            below=below,
            altitude=y,
        )


def descend(body: Body, to: int, patience: int = 300) -> tuple[bool, list[str]]:
    """Run the descent skill on ``body``; (its result, the actions it took)."""
    skills = VoxelSkills(body.observe(), RULES, GameRules(recipes={}, ores={}))
    run = skills.descend(to, patience=patience)
    actions = []
    try:
        action = next(run)
        while len(actions) < patience:
            actions.append(action)
            body.step(action)
            skills._observe(body.observe(), {})
            action = run.send(None)
    except StopIteration as stop:
        return stop.value, actions
    return False, actions


def test_the_descent_digs_a_staircase_down_to_its_altitude() -> None:
    body = Body({})
    done, actions = descend(body, -10)
    assert done and body.pos[1] == -10 and not body.hurt
    # A staircase: one node ahead for every node down, not a shaft.
    assert abs(body.pos[2]) == 10
    assert "dig_down" not in actions


def test_the_descent_steers_around_lava_and_water_it_sees() -> None:
    # Lava under the stairs northwards, a pool of water eastwards, a mere node away.
    nodes = {(x, y, z): LAVA for x in range(-1, 2) for y in range(-6, -2) for z in range(1, 7)}
    nodes.update({(x, -2, z): WATER for x in range(1, 7) for z in range(-1, 2)})
    body = Body(nodes)
    done, _ = descend(body, -8)
    assert done, body.pos
    assert body.pos[1] == -8
    assert not body.hurt, body.hurt


def test_the_descent_gives_up_where_every_way_down_is_lava() -> None:
    # A lava lake two nodes under the feet, further than the descent goes looking.
    nodes = {(x, y, z): LAVA for x in range(-40, 41) for y in (-3, -2) for z in range(-40, 41)}
    body = Body(nodes)
    done, actions = descend(body, -10)
    assert not done
    assert not body.hurt, body.hurt
    assert body.pos[1] >= -1


def test_the_descent_never_drops_into_a_cave_deeper_than_a_safe_fall() -> None:
    # A cave 6 deep ahead and to every side: the body may not step off its edge.
    nodes = {(x, y, z): AIR for x in range(-8, 9) for y in range(-7, 0) for z in range(-8, 9)}
    nodes.update({(x, y, 0): STONE for x in range(-1, 2) for y in range(-7, 0)})
    nodes.update({(0, y, z): STONE for z in range(-1, 2) for y in range(-7, 0)})
    body = Body(nodes)
    descend(body, -10, patience=100)
    assert not [h for h in body.hurt if h[0] == "fell"], body.hurt


# ------------------------------------------------------------------ on a real server


@pytest.fixture(scope="module")
def world():
    need_minetest()
    with MinetestWorld() as made:
        yield made


STEEL = {"default:iron_lump": 3, "default:coal_lump": 1, "default:cobble": 8}


def test_smelting_makes_and_places_a_furnace_then_smelts_iron_into_steel(world) -> None:
    log = {}

    def policy(skills):
        log["furnace"] = skills.recipes("default:furnace")
        ok = yield from skills.smelt("default:steel_ingot", 3)
        x, y, z = skills.position()
        log["placed"] = [
            v for v in skills.seen("default:furnace") if max(abs(v[0] - x), abs(v[2] - z)) <= 2
        ]
        return ok

    result = run_voxel_policy(world, policy, 30, seed=0, inventory=STEEL)
    assert result["success"], result
    assert result["inventory"]["default:steel_ingot"] == 3
    assert result["inventory"]["default:iron_lump"] == 0
    # The furnace came from the game's recipe (8 cobble) and stands next to the body.
    assert result["inventory"].get("default:cobble", 0) == 0
    assert log["placed"]
    assert result["steps"] <= 6


def test_smelting_without_cobble_or_fuel_gives_up(world) -> None:
    def policy(skills):
        return (yield from skills.smelt("default:steel_ingot", 1))

    no_cobble = run_voxel_policy(world, policy, 30, seed=0, inventory={"default:iron_lump": 1})
    assert not no_cobble["success"]
    no_fuel = dict(STEEL, **{"default:coal_lump": 0})
    result = run_voxel_policy(world, policy, 30, seed=0, inventory=no_fuel)
    assert not result["success"]
    assert result["inventory"]["default:iron_lump"] == 3


def test_the_descent_in_a_real_world_reaches_the_iron_and_stays_unhurt(world) -> None:
    track = []

    def policy(skills):
        level = skills.mining_level("default:iron_lump")
        track.append(level)
        ok = yield from skills.descend(level, patience=400)
        track.append(skills.position()[1])
        return ok

    kit = {"default:pick_stone": 1, "default:pick_wood": 1}
    result = run_voxel_policy(world, policy, 400, seed=2, inventory=kit)
    assert result["success"], result
    level, reached = track
    assert level == -4  # from the game's ore definitions: iron from y 0 down
    assert reached <= level
    assert result["status"] == {"health": 20.0, "breath": 10.0}


def test_strip_mining_finds_iron_with_a_stone_pickaxe(world) -> None:
    def policy(skills):
        return (yield from skills.mine("default:iron_lump", 3, patience=600))

    kit = {"default:pick_stone": 1, "default:pick_wood": 1}
    result = run_voxel_policy(world, policy, 600, seed=3, inventory=kit)
    assert result["success"], result
    assert result["inventory"]["default:iron_lump"] >= 3


def test_the_chain_runs_in_the_sandbox_from_nothing_to_a_stone_pickaxe(world) -> None:
    result = run_voxel_code(world, chain_code("default:pick_stone"), 1000, seed=0)
    assert result["success"] and result["cause"] == "success", result
    steps = record(result["output"])
    assert [item for item, ok, _ in steps] == list(CHAIN[: CHAIN.index("default:pick_stone") + 1])
    assert all(ok for _, ok, _ in steps), steps
    assert steps[-1][2] == result["steps"]
    assert result["inventory"]["default:pick_stone"] == 1
    assert world.achievement_counts()["obtain_pick_stone"] == 1


def test_a_step_runs_alone_in_the_sandbox_from_its_start_state(world) -> None:
    item = "default:pick_wood"
    result = run_voxel_code(world, step_code(item), 50, seed=0, inventory=START_STATES[item])
    assert result["success"], result
    assert record(result["output"]) == [(item, True, result["steps"])]
    assert result["inventory"][item] == 1


def test_the_sandbox_reports_why_voxel_code_stopped(world) -> None:
    bad = "def run(skills):\n    yield 'fly'\n"
    assert run_voxel_code(world, bad, 10, seed=0)["cause"] == "invalid_action"
    looping = "def run(skills):\n    while True:\n        yield 'turn_left'\n"
    result = run_voxel_code(world, looping, 10, seed=0)
    assert (result["cause"], result["steps"], result["success"]) == ("step_budget", 10, False)
    with pytest.raises(sandbox.SandboxError):
        run_voxel_code(world, "import os\ndef run(skills):\n    yield 'jump'\n", 10, seed=0)


# ------------------------------------------------------------------ the chain's source


def test_the_sandbox_compiles_every_step_and_the_whole_chain() -> None:
    for item in CHAIN:
        code = sandbox.compile_code(step_code(item))
        assert "run" in code.functions
    whole = chain_code()
    assert "run" in sandbox.compile_code(whole).functions
    assert "LAST = 'default:diamond'" in whole and f"CHAIN = {list(CHAIN)!r}" in whole
    assert "FIRST = 'default:iron_lump'" in step_code("default:iron_lump")
    with pytest.raises(ValueError):
        chain_code("default:mese")


def test_the_chain_source_imports_nothing_and_names_nothing_private() -> None:
    tree = ast.parse(chain_code())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    assert not [n for n in names if n.startswith("_")]
    # The sandbox itself refuses the private names the chain must not use.
    with pytest.raises(sandbox.SandboxError):
        sandbox.compile_code(chain_code() + "\ndef peek(skills):\n    return skills._memory\n")
