"""The diamond chain in Minetest as policy source: the project's own template code.

This is the kind of code the offline backend's template library gives a fast agent (not
a model's output): a policy over :class:`~worlds.minetest.skills.VoxelSkills` for each
step of the chain, tree → planks → sticks → wooden pickaxe → cobble → stone pickaxe →
furnace → coal → iron lump → steel ingot → steel pickaxe → diamond, and the whole chain
as those steps in order. Quantities come from the game's recipes (``skills.recipes``)
and the depths to mine at from its ore definitions (``skills.mining_level``); nothing
here knows where anything is: trees are found by exploring, ores by strip-mining.

It is policy source the sandbox runs, read as text by :mod:`worlds.minetest.templates`
(the way :mod:`knowledge.library` reads ``knowledge/skill_prelude.py``): no imports, no
classes, no ``_`` names, only the public methods of the skills (the sandbox hands the
code a read-only proxy of them). The constant block below is regenerated for each policy:
``CHAIN`` is written in from :data:`worlds.minetest.world.CHAIN`, ``FIRST`` and ``LAST``
name the steps the policy runs, every other constant keeps the value it has here. Its
entry point ``run(skills)`` runs the steps from ``FIRST`` through ``LAST``.

Each step also runs alone from :data:`START_STATES` (what the chain carries when it
reaches that step), so that each step's success can be measured on its own::

    result = run_voxel_code(world, step_code("default:iron_lump"), 3000, seed=7,
                            inventory=START_STATES["default:iron_lump"])
"""

# The chain's items in order: written in per policy from worlds.minetest.world.CHAIN.
CHAIN = []
# The steps the policy runs: from the one that obtains FIRST through the one that obtains
# LAST (written in per policy: one step alone, or the chain up to an item).
FIRST = "default:tree"
LAST = "default:diamond"
# Which carried item fills a recipe's group ingredient: the template's choice among the
# items of the group (the recipes themselves name only the group).
FILLS = {
    "group:wood": "default:wood",
    "group:stick": "default:stick",
    "group:tree": "default:tree",
    "group:stone": "default:cobble",
}
TREE_NODE = "default:tree"
# The trunks the tree search digs, and the planks (group:wood) each is crafted into by
# the game's recipes: mapgen v6's trees, with pines where the land is snowy.
PLANKS = {"default:tree": "default:wood", "default:pine_tree": "default:pine_wood"}
STONE_NODE = "default:stone"  # digs into cobble
TOOLS_BY_STEEL = ["default:pick_wood", "default:pick_stone", "default:pick_steel"]
# Planks beyond the recipes' needs: sticks for spare stone pickaxes (four per plank make
# two pickaxes) and fuel. Digging ~140 stairs and a strip mine wears out the steel
# pickaxe (about 180 stone) many times over unless stone pickaxes take the stone.
SPARE_PLANKS = 8
# Levels descended between checks for a spare pickaxe (a stair digs about 3 stone).
LEG_LEVELS = 8
# Steps of strip-mining between checks for a spare pickaxe (a stone one lasts ~60 stone,
# a strip digs two a node).
LEG_STEPS = 150
# Where a descent that found no safe way down tunnels off to, in turn, before it tries
# again (far enough to leave a cave's or a lake's window behind).
DETOURS = [(12, 0), (0, 12), (-12, 0), (0, -12), (16, 16), (-16, 16), (-16, -16), (16, -16)]
# Steps of travelling between looks for a tree in what came into view.
LOOK_EVERY = 16
# The tree search builds its way up only below this many nodes over the start.
CLIMB_ABOVE_START = 4
# Looks in a row without getting nearer a waypoint before the search gives it up.
WAYPOINT_STALLS = 3
# Nodes between the rings of waypoints the tree search heads for (the window sees 4
# nodes either side of the path, and forests are patches tens of nodes across).
SPIRAL = 24
# A distance larger than any the tree search measures (its "not near yet").
FAR = 1_073_741_824  # 2 ** 30; a literal, as every constant here is
# How many steps each part may take before it gives up: the chain's budget is their sum.
PATIENCE = {
    "trees": 3000,  # exploring for a forest: none for 100 nodes on some coasts and plains
    "stone": 400,  # stone lies a few nodes under the soil
    "coal": 1500,
    "iron": 1500,
    "down": 1500,  # about 140 stairs of 4-5 actions each, and detours around caves
    "diamond": 3000,  # strip-mining: a diamond cluster per ~4,900 nodes of stone seen
}
# What the chain carries on reaching each step (by the recipes' counts: three trunks make
# sixteen planks, two of them sticks, three each pickaxe...): the start state to run the
# step alone from. Steps after the furnace add what the steps before them obtained.
START_STATES = {
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
    "default:coal_lump": {
        "default:wood": 11,
        "default:stick": 4,
        "default:pick_wood": 1,
        "default:pick_stone": 1,
        "default:cobble": 0,
        "default:furnace": 1,
    },
    "default:iron_lump": {
        "default:wood": 11,
        "default:stick": 4,
        "default:pick_wood": 1,
        "default:pick_stone": 1,
        "default:cobble": 0,
        "default:furnace": 1,
        "default:coal_lump": 1,
    },
    "default:steel_ingot": {
        "default:wood": 11,
        "default:stick": 4,
        "default:pick_wood": 1,
        "default:pick_stone": 1,
        "default:cobble": 0,
        "default:furnace": 1,
        "default:coal_lump": 1,
        "default:iron_lump": 3,
    },
    "default:pick_steel": {
        "default:wood": 11,
        "default:stick": 4,
        "default:pick_wood": 1,
        "default:pick_stone": 1,
        "default:cobble": 0,
        "default:furnace": 1,
        "default:steel_ingot": 3,
    },
    "default:diamond": {
        "default:wood": 11,
        "default:stick": 2,
        "default:pick_wood": 1,
        "default:pick_stone": 1,
        "default:cobble": 0,
        "default:furnace": 0,
        "default:pick_steel": 1,
    },
}


def ceil_div(a, b):
    """⌈a / b⌉ in integers (policy code imports nothing, so no math.ceil)."""
    return -(-a // b)


def crafts(skills, item, n):
    """How many crafts of ``item`` make ``n`` of it, by the game's first normal recipe."""
    return ceil_div(n, recipe(skills, item)["makes"])


def recipe(skills, item, method="normal"):
    """The game's recipe for ``item`` made from the chain's own items (planks from
    trunks, not from slabs or bush stems)."""
    for found in skills.recipes(item):
        if found["method"] == method and all(
            FILLS.get(n, n) in CHAIN or n in PLANKS for n in found["needs"]
        ):
            return found
    raise LookupError(f"the game has no {method} recipe for {item} from the chain's items")


def needs(skills, plan):
    """The raw items (by FILLS) that ``plan`` (item → how many to make) takes."""
    total = {}
    for item, n in plan.items():
        found = recipe(skills, item)
        made = ceil_div(n, found["makes"])
        for need, count in found["needs"].items():
            name = FILLS.get(need, need)
            total[name] = total.get(name, 0) + count * made
    return total


def tools_plan():
    """The crafted items the chain makes from planks, sticks and cobble."""
    return {tool: 1 for tool in TOOLS_BY_STEEL}


def sticks_wanted(skills):
    return needs(skills, tools_plan()).get("default:stick", 0)


def planks_wanted(skills):
    """Planks for the pickaxes and for the sticks they need."""
    tools = needs(skills, tools_plan()).get("default:wood", 0)
    sticks = needs(skills, {"default:stick": sticks_wanted(skills)}).get("default:wood", 0)
    return tools + sticks


def cobble_wanted(skills):
    return needs(skills, {"default:pick_stone": 1, "default:furnace": 1})["default:cobble"]


def ingots_wanted(skills):
    return needs(skills, {"default:pick_steel": 1})["default:steel_ingot"]


def trunks_carried(skills):
    carried = skills.inventory()
    return sum(carried.get(trunk, 0) for trunk in PLANKS)


def planks_carried(skills):
    carried = skills.inventory()
    return sum(carried.get(planks, 0) for planks in PLANKS.values())


def distance(skills, v):
    """Nodes from the feet to ``v``, along the axes."""
    x, y, z = skills.position()
    return abs(v[0] - x) + abs(v[1] - y) + abs(v[2] - z)


# ------------------------------------------------------------------ the steps


def get_trees(skills):
    """Trunks enough for every plank the chain needs: dig the nearest trunk seen that
    has not proved out of reach, else head on out along a square spiral of waypoints
    around the start, looking again every few steps."""
    want = needs(skills, {"default:wood": planks_wanted(skills) + SPARE_PLANKS}).get(TREE_NODE, 1)
    # Through leaves and soil by hand, up slopes walking cannot climb; never down a pit.
    skills.tunnel(True, down=False)
    # And climb out of hollows whose stone walls the hand cannot dig (not up mountains:
    # trees grow in the lowlands).
    skills.build(True, below=skills.position()[1] + CLIMB_ABOVE_START)
    start = skills.steps()
    out_of_reach = set()
    x0, y0, z0 = skills.position()
    waypoints = [
        (x0 + SPIRAL * r * dx, z0 + SPIRAL * r * dz)
        for r in range(1, 9)
        for dx, dz in ((1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1))
    ]
    closest, stalls = FAR, 0  # how near the current waypoint it got, looks since
    while trunks_carried(skills) < want:
        left = PATIENCE["trees"] - (skills.steps() - start)
        if left <= 0:
            return False
        seen = sorted(
            (v for trunk in PLANKS for v in skills.seen(trunk) if v not in out_of_reach),
            key=lambda v: distance(skills, v),
        )
        if seen:
            dug = yield from skills.dig_node(*seen[0], patience=min(left, 100))
            if not dug:
                out_of_reach.add(seen[0])
            continue
        if not waypoints:
            return False
        before = skills.steps()
        arrived = yield from skills.head_for(*waypoints[0], patience=min(left, LOOK_EVERY))
        x, y, z = skills.position()
        gap = abs(x - waypoints[0][0]) + abs(z - waypoints[0][1])
        if gap < closest:
            closest, stalls = gap, 0
        else:
            stalls += 1
        if arrived or skills.steps() - before < LOOK_EVERY or stalls >= WAYPOINT_STALLS:
            waypoints.pop(0)  # there, or no way on towards it: the next one
            closest, stalls = FAR, 0
    return True


def make_planks(skills):
    """Planks for the chain from the trunks carried, each kind by its own recipe."""
    want = planks_wanted(skills) + SPARE_PLANKS
    for trunk, planks in PLANKS.items():
        have = skills.inventory().get(trunk, 0)
        per = recipe(skills, planks)["makes"]
        n = min(have, ceil_div(max(0, want - planks_carried(skills)), per))
        if n:
            made = yield from skills.craft(planks, n)
            if not made:
                return False
    return planks_carried(skills) >= planks_wanted(skills)


def make_sticks(skills):
    n = crafts(skills, "default:stick", sticks_wanted(skills))
    made = yield from skills.craft("default:stick", n)
    return made


def make_pick_wood(skills):
    made = yield from skills.craft("default:pick_wood")
    return made


def get_cobble(skills):
    """Cobble for the stone pickaxe and the furnace: dig the stone in view (through the
    soil), going a few stairs down when none is in view."""
    want = cobble_wanted(skills)
    skills.tunnel(True)  # the wooden pickaxe digs stone: no pit holds the body now
    start = skills.steps()
    while skills.inventory().get("default:cobble", 0) < want:
        left = PATIENCE["stone"] - (skills.steps() - start)
        if left <= 0:
            return False
        n = want - skills.inventory().get("default:cobble", 0)
        if skills.nearest(STONE_NODE) is not None:
            got = yield from skills.collect(STONE_NODE, n, patience=left)
            if got:
                continue
        y = skills.position()[1]
        down = yield from skills.descend(y - 3, patience=left)
        if not down:
            return False
    return True


def make_pick_stone(skills):
    made = yield from skills.craft("default:pick_stone")
    return made


def make_furnace(skills):
    made = yield from skills.craft("default:furnace")
    return made


def mine_with_spares(skills, item, n, patience, level=None):
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
        got = yield from skills.mine(item, more, level, patience=min(left, LEG_STEPS))
        if got:
            return True
        if skills.steps() - before < min(left, LEG_STEPS):
            return False  # the search gave up: nothing safe to dig on
    return True


def get_coal(skills):
    """A coal lump to smelt the steel with (it burns longest of the fuels carried, for
    several smelts): strip-mine at the coal's level."""
    got = yield from mine_with_spares(skills, "default:coal_lump", 1, PATIENCE["coal"])
    return got


def get_iron(skills):
    """Iron lumps for the steel pickaxe's ingots: strip-mine at the iron's level."""
    want = ingots_wanted(skills) - skills.inventory().get("default:iron_lump", 0)
    if want <= 0:
        return True
    got = yield from mine_with_spares(skills, "default:iron_lump", want, PATIENCE["iron"])
    return got


def make_steel(skills):
    """Smelt every iron lump the pickaxe needs, in a furnace placed here."""
    want = ingots_wanted(skills) - skills.inventory().get("default:steel_ingot", 0)
    if want <= 0:
        return True
    made = yield from skills.smelt("default:steel_ingot", want)
    return made


def make_pick_steel(skills):
    made = yield from skills.craft("default:pick_steel")
    return made


def spare_pickaxe(skills):
    """Keep a stone pickaxe for the stone: the body wields the lowest pickaxe that digs a
    node, so the steel one wears (it lasts some 180 stone) only when no other is left.
    Crafts one from cobble and sticks (sticks from planks) when none is carried."""
    carried = skills.inventory()
    if carried.get("default:pick_stone", 0) or carried.get("default:pick_wood", 0):
        return True
    sticks = recipe(skills, "default:pick_stone")["needs"].get("group:stick", 0)
    if carried.get("default:stick", 0) < sticks:
        yield from skills.craft("default:stick", crafts(skills, "default:stick", sticks))
    made = yield from skills.craft("default:pick_stone")
    return made


def get_diamond(skills):
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
        down = yield from skills.descend(target, patience=left)
        if not down:
            # Nothing safe below here (a cave, a lake, lava): tunnel off sideways and
            # try again from there.
            detour = next(detours, None)
            if detour is None:
                return False
            x, y, z = skills.position()
            skills.tunnel(True)
            yield from skills.head_for(x + detour[0], z + detour[1], patience=left)
    got = yield from mine_with_spares(skills, "default:diamond", 1, PATIENCE["diamond"], level)
    return got


def obtain(skills, item):
    """The chain's step that obtains ``item`` (one of CHAIN)."""
    steps = {
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
    ok = yield from steps[item](skills)
    return ok


def run(skills):
    """The chain's steps from FIRST through LAST in order; False at the first that fails.
    Prints a line per step run, ``step ITEM ok|failed STEPS`` (STEPS: the episode's
    steps so far), for a caller that counts where chains stop
    (:func:`worlds.minetest.templates.record`)."""
    for item in CHAIN[CHAIN.index(FIRST) : CHAIN.index(LAST) + 1]:
        ok = yield from obtain(skills, item)
        print("step", item, "ok" if ok else "failed", skills.steps())
        if not ok:
            return False
    return True
