"""The diamond chain in Minetest as coded skills: the project's own template code.

This is the kind of code the offline backend's template library gives a fast agent (not
a model's output): a policy over :class:`~worlds.minetest.skills.VoxelSkills` for each
step of the chain, tree → planks → sticks → wooden pickaxe → cobble → stone pickaxe →
furnace → coal → iron lump → steel ingot → steel pickaxe → diamond, and the whole chain
as those steps in order. Quantities come from the game's recipes (``skills.recipes``)
and the depths to mine at from its ore definitions (``skills.mining_level``); nothing
here knows where anything is: trees are found by exploring, ores by strip-mining.

Each step also runs alone from :data:`START_STATES` (what the chain carries when it
reaches that step), so that each step's success can be measured on its own::

    result = run_voxel_policy(world, STEPS["default:iron_lump"], 3000, seed=7,
                              inventory=START_STATES["default:iron_lump"])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping

from worlds.minetest.skills import VoxelSkills
from worlds.minetest.world import CHAIN

Policy = Callable[[VoxelSkills], Iterator[str]]

# Which carried item fills a recipe's group ingredient: the template's choice among the
# items of the group (the recipes themselves name only the group).
FILLS = {
    "group:wood": "default:wood",
    "group:stick": "default:stick",
    "group:tree": "default:tree",
    "group:stone": "default:cobble",
}
TREE_NODE = "default:tree"
PLANKS = {"default:tree": "default:wood", "default:pine_tree": "default:pine_wood"}
"""The trunks the tree search digs, and the planks (group:wood) each is crafted into by
the game's recipes: mapgen v6's trees, with pines where the land is snowy."""
STONE_NODE = "default:stone"  # digs into cobble
TOOLS_BY_STEEL = ("default:pick_wood", "default:pick_stone", "default:pick_steel")
SPARE_PLANKS = 8
"""Planks beyond the recipes' needs: sticks for spare stone pickaxes (four per plank
make two pickaxes) and fuel. Digging ~140 stairs and a strip mine wears out the steel
pickaxe (about 180 stone) many times over unless stone pickaxes take the stone."""
LEG_LEVELS = 8
"""Levels descended between checks for a spare pickaxe (a stair digs about 3 stone)."""
LEG_STEPS = 150
"""Steps of strip-mining between checks for a spare pickaxe (a stone one lasts ~60
stone, a strip digs two a node)."""
DETOURS = ((12, 0), (0, 12), (-12, 0), (0, -12), (16, 16), (-16, 16), (-16, -16), (16, -16))
"""Where a descent that found no safe way down tunnels off to, in turn, before it tries
again (far enough to leave a cave's or a lake's window behind)."""
LOOK_EVERY = 16
"""Steps of travelling between looks for a tree in what came into view."""
CLIMB_ABOVE_START = 4
"""The tree search builds its way up only below this many nodes over the start."""
WAYPOINT_STALLS = 3
"""Looks in a row without getting nearer a waypoint before the search gives it up."""
SPIRAL = 24
"""Nodes between the rings of waypoints the tree search heads for (the window sees 4
nodes either side of the path, and forests are patches tens of nodes across)."""

# How many steps each part may take before it gives up: the chain's budget is their sum.
PATIENCE = {
    "trees": 3000,  # exploring for a forest: none for 100 nodes on some coasts and plains
    "stone": 400,  # stone lies a few nodes under the soil
    "coal": 1500,
    "iron": 1500,
    "down": 1500,  # about 140 stairs of 4-5 actions each, and detours around caves
    "diamond": 3000,  # strip-mining: a diamond cluster per ~4,900 nodes of stone seen
}


def _crafts(skills: VoxelSkills, item: str, n: int) -> int:
    """How many crafts of ``item`` make ``n`` of it, by the game's first normal recipe."""
    recipe = _recipe(skills, item)
    return math.ceil(n / recipe["makes"])


def _recipe(skills: VoxelSkills, item: str, method: str = "normal") -> dict:
    """The game's recipe for ``item`` made from the chain's own items (planks from
    trunks, not from slabs or bush stems)."""
    for recipe in skills.recipes(item):
        if recipe["method"] == method and all(
            FILLS.get(n, n) in CHAIN or n in PLANKS for n in recipe["needs"]
        ):
            return recipe
    raise LookupError(f"the game has no {method} recipe for {item} from the chain's items")


def _needs(skills: VoxelSkills, plan: Mapping[str, int]) -> dict[str, int]:
    """The raw items (by :data:`FILLS`) that ``plan`` (item → how many to make) takes."""
    total: dict[str, int] = {}
    for item, n in plan.items():
        recipe = _recipe(skills, item)
        crafts = math.ceil(n / recipe["makes"])
        for need, count in recipe["needs"].items():
            name = FILLS.get(need, need)
            total[name] = total.get(name, 0) + count * crafts
    return total


def _tools_plan() -> dict[str, int]:
    """The crafted items the chain makes from planks, sticks and cobble."""
    return {tool: 1 for tool in TOOLS_BY_STEEL}


def _sticks(skills: VoxelSkills) -> int:
    return _needs(skills, _tools_plan()).get("default:stick", 0)


def _planks(skills: VoxelSkills) -> int:
    """Planks for the pickaxes and for the sticks they need."""
    tools = _needs(skills, _tools_plan()).get("default:wood", 0)
    sticks = _needs(skills, {"default:stick": _sticks(skills)}).get("default:wood", 0)
    return tools + sticks


def _cobble(skills: VoxelSkills) -> int:
    return _needs(skills, {"default:pick_stone": 1, "default:furnace": 1})["default:cobble"]


def _ingots(skills: VoxelSkills) -> int:
    return _needs(skills, {"default:pick_steel": 1})["default:steel_ingot"]


# ------------------------------------------------------------------ the steps


def get_trees(skills: VoxelSkills) -> Iterator[str]:
    """Trunks enough for every plank the chain needs: dig the nearest trunk seen that
    has not proved out of reach, else head on out along a square spiral of waypoints
    around the start, looking again every few steps."""
    want = _needs(skills, {"default:wood": _planks(skills) + SPARE_PLANKS}).get(TREE_NODE, 1)
    # Through leaves and soil by hand, up slopes walking cannot climb; never down a pit.
    skills.tunnel(True, down=False)
    # And climb out of hollows whose stone walls the hand cannot dig (not up mountains:
    # trees grow in the lowlands).
    skills.build(True, below=skills.position()[1] + CLIMB_ABOVE_START)
    start = skills.steps()
    out_of_reach: set[tuple[int, int, int]] = set()
    x0, _, z0 = skills.position()
    waypoints = [
        (x0 + SPIRAL * r * dx, z0 + SPIRAL * r * dz)
        for r in range(1, 9)
        for dx, dz in ((1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1))
    ]
    closest, stalls = 1 << 30, 0  # how near the current waypoint it got, looks since
    while _trunks(skills) < want:
        left = PATIENCE["trees"] - (skills.steps() - start)
        if left <= 0:
            return False
        seen = sorted(
            (v for trunk in PLANKS for v in skills.seen(trunk) if v not in out_of_reach),
            key=lambda v: _distance(skills, v),
        )
        targets = seen[:1]
        if targets:
            if not (yield from skills.dig_node(*targets[0], patience=min(left, 100))):
                out_of_reach.add(targets[0])
            continue
        if not waypoints:
            return False
        before = skills.steps()
        arrived = yield from skills.head_for(*waypoints[0], patience=min(left, LOOK_EVERY))
        x, _, z = skills.position()
        gap = abs(x - waypoints[0][0]) + abs(z - waypoints[0][1])
        if gap < closest:
            closest, stalls = gap, 0
        else:
            stalls += 1
        if arrived or skills.steps() - before < LOOK_EVERY or stalls >= WAYPOINT_STALLS:
            waypoints.pop(0)  # there, or no way on towards it: the next one
            closest, stalls = 1 << 30, 0
    return True


def _trunks(skills: VoxelSkills) -> int:
    carried = skills.inventory()
    return sum(carried.get(trunk, 0) for trunk in PLANKS)


def _distance(skills: VoxelSkills, v: tuple[int, int, int]) -> int:
    x, y, z = skills.position()
    return abs(v[0] - x) + abs(v[1] - y) + abs(v[2] - z)


def make_planks(skills: VoxelSkills) -> Iterator[str]:
    """Planks for the chain from the trunks carried, each kind by its own recipe."""
    want = _planks(skills) + SPARE_PLANKS
    for trunk, planks in PLANKS.items():
        have = skills.inventory().get(trunk, 0)
        per = _recipe(skills, planks)["makes"]
        n = min(have, math.ceil(max(0, want - _planks_carried(skills)) / per))
        if n and not (yield from skills.craft(planks, n)):
            return False
    return _planks_carried(skills) >= _planks(skills)


def _planks_carried(skills: VoxelSkills) -> int:
    carried = skills.inventory()
    return sum(carried.get(planks, 0) for planks in PLANKS.values())


def make_sticks(skills: VoxelSkills) -> Iterator[str]:
    n = _crafts(skills, "default:stick", _sticks(skills))
    return (yield from skills.craft("default:stick", n))


def make_pick_wood(skills: VoxelSkills) -> Iterator[str]:
    return (yield from skills.craft("default:pick_wood"))


def get_cobble(skills: VoxelSkills) -> Iterator[str]:
    """Cobble for the stone pickaxe and the furnace: dig the stone in view (through the
    soil), going a few stairs down when none is in view."""
    want = _cobble(skills)
    skills.tunnel(True)  # the wooden pickaxe digs stone: no pit holds the body now
    start = skills.steps()
    while skills.inventory().get("default:cobble", 0) < want:
        left = PATIENCE["stone"] - (skills.steps() - start)
        if left <= 0:
            return False
        n = want - skills.inventory().get("default:cobble", 0)
        if skills.nearest(STONE_NODE) is not None:
            if (yield from skills.collect(STONE_NODE, n, patience=left)):
                continue
        y = skills.position()[1]
        if not (yield from skills.descend(y - 3, patience=left)):
            return False
    return True


def make_pick_stone(skills: VoxelSkills) -> Iterator[str]:
    return (yield from skills.craft("default:pick_stone"))


def make_furnace(skills: VoxelSkills) -> Iterator[str]:
    return (yield from skills.craft("default:furnace"))


def mine_with_spares(skills: VoxelSkills, item: str, n: int, patience: int, level=None):
    """Strip-mine for ``n`` more ``item`` in legs, with a spare stone pickaxe made between
    legs whenever the last one wore out."""
    want = skills.inventory().get(item, 0) + n
    start = skills.steps()
    while skills.inventory().get(item, 0) < want:
        left = patience - (skills.steps() - start)
        if left <= 0:
            return False
        yield from spare_pickaxe(skills)
        before = skills.steps()
        more = want - skills.inventory().get(item, 0)
        if (yield from skills.mine(item, more, level, patience=min(left, LEG_STEPS))):
            return True
        if skills.steps() - before < min(left, LEG_STEPS):
            return False  # the search gave up: nothing safe to dig on
    return True


def get_coal(skills: VoxelSkills) -> Iterator[str]:
    """A coal lump to smelt the steel with (it burns longest of the fuels carried, for
    several smelts): strip-mine at the coal's level."""
    return (yield from mine_with_spares(skills, "default:coal_lump", 1, PATIENCE["coal"]))


def get_iron(skills: VoxelSkills) -> Iterator[str]:
    """Iron lumps for the steel pickaxe's ingots: strip-mine at the iron's level."""
    want = _ingots(skills) - skills.inventory().get("default:iron_lump", 0)
    if want <= 0:
        return True
    return (yield from mine_with_spares(skills, "default:iron_lump", want, PATIENCE["iron"]))


def make_steel(skills: VoxelSkills) -> Iterator[str]:
    """Smelt every iron lump the pickaxe needs, in a furnace placed here."""
    want = _ingots(skills) - skills.inventory().get("default:steel_ingot", 0)
    if want <= 0:
        return True
    return (yield from skills.smelt("default:steel_ingot", want))


def make_pick_steel(skills: VoxelSkills) -> Iterator[str]:
    return (yield from skills.craft("default:pick_steel"))


def spare_pickaxe(skills: VoxelSkills) -> Iterator[str]:
    """Keep a stone pickaxe for the stone: the body wields the lowest pickaxe that digs a
    node, so the steel one wears (it lasts some 180 stone) only when no other is left.
    Crafts one from cobble and sticks (sticks from planks) when none is carried."""
    carried = skills.inventory()
    if carried.get("default:pick_stone", 0) or carried.get("default:pick_wood", 0):
        return True
    sticks = _recipe(skills, "default:pick_stone")["needs"].get("group:stick", 0)
    if carried.get("default:stick", 0) < sticks:
        yield from skills.craft("default:stick", _crafts(skills, "default:stick", sticks))
    return (yield from skills.craft("default:pick_stone"))


def get_diamond(skills: VoxelSkills) -> Iterator[str]:
    """Down a staircase to where the diamonds are, then strip-mine for one, with a spare
    stone pickaxe made whenever the last one wears out."""
    level = skills.mining_level("default:diamond")
    if level is None:
        return False
    start = skills.steps()
    detours = iter(DETOURS)
    while skills.position()[1] > level:
        left = PATIENCE["down"] - (skills.steps() - start)
        if left <= 0:
            return False
        yield from spare_pickaxe(skills)
        target = max(level, skills.position()[1] - LEG_LEVELS)
        if not (yield from skills.descend(target, patience=left)):
            # Nothing safe below here (a cave, a lake, lava): tunnel off sideways and
            # try again from there.
            detour = next(detours, None)
            if detour is None:
                return False
            x, _, z = skills.position()
            skills.tunnel(True)
            yield from skills.head_for(x + detour[0], z + detour[1], patience=left)
    return (yield from mine_with_spares(skills, "default:diamond", 1, PATIENCE["diamond"], level))


STEPS: dict[str, Policy] = {
    "default:tree": get_trees,
    "default:wood": make_planks,
    "default:stick": make_sticks,
    "default:pick_wood": make_pick_wood,
    "default:cobble": get_cobble,
    "default:pick_stone": make_pick_stone,
    "default:furnace": make_furnace,
    "default:coal_lump": get_coal,
    "default:iron_lump": get_iron,
    "default:steel_ingot": make_steel,
    "default:pick_steel": make_pick_steel,
    "default:diamond": get_diamond,
}
"""Each step of the chain, by the item it obtains (the order of ``worlds.minetest.CHAIN``)."""

START_STATES: dict[str, dict[str, int]] = {
    "default:tree": {},
    "default:wood": {"default:tree": 4},
    "default:stick": {"default:wood": 16},
    "default:pick_wood": {"default:wood": 14, "default:stick": 8},
    "default:cobble": {"default:wood": 11, "default:stick": 6, "default:pick_wood": 1},
    "default:pick_stone": {
        "default:wood": 11,
        "default:stick": 6,
        "default:pick_wood": 1,
        "default:cobble": 11,
    },
    "default:furnace": {
        "default:wood": 11,
        "default:stick": 4,
        "default:pick_wood": 1,
        "default:pick_stone": 1,
        "default:cobble": 8,
    },
}
"""What the chain carries on reaching each step (by the recipes' counts: three trunks make
sixteen planks, two of them sticks, three each pickaxe...): the start state to run the
step alone from. Steps after the furnace add what the steps before them obtained."""
_late = dict(START_STATES["default:furnace"], **{"default:cobble": 0, "default:furnace": 1})
START_STATES["default:coal_lump"] = dict(_late)
START_STATES["default:iron_lump"] = dict(_late, **{"default:coal_lump": 1})
START_STATES["default:steel_ingot"] = dict(
    _late, **{"default:coal_lump": 1, "default:iron_lump": 3}
)
START_STATES["default:pick_steel"] = dict(_late, **{"default:steel_ingot": 3})
START_STATES["default:diamond"] = dict(
    _late, **{"default:stick": 2, "default:furnace": 0, "default:pick_steel": 1}
)


def chain(last: str = "default:diamond", record: list | None = None) -> Policy:
    """The chain's steps in order up to and including the one that obtains ``last``;
    False at the first that fails. ``record`` gets (item, success, steps so far) per
    step run, for a caller that counts where chains stop."""
    names = list(STEPS)
    steps = names[: names.index(last) + 1]

    def run(skills: VoxelSkills) -> Iterator[str]:
        for item in steps:
            ok = yield from STEPS[item](skills)
            if record is not None:
                record.append((item, bool(ok), skills.steps()))
            if not ok:
                return False
        return True

    return run


diamond_chain = chain()
"""The whole chain as one policy."""
