"""The prelude every coded skill starts with: plain helper generators over the skill API.

A policy is this program with its constants written in and the step's own ``main(skills)``
at the end; :func:`knowledge.library.code_for` builds it from this file's text. The
constant block below is regenerated for each policy: the :class:`knowledge.revisions.Params`
fields (upper-cased) and Crafter's recipe tables are written in, every other constant keeps
the value it has here. The code after the block is copied as it is, up to the placeholder
``main``, which the step's own replaces.

It obeys the sandbox's rules for policy source (no imports, classes or ``_`` names), and
imports and compiles on its own (tests/test_knowledge.py) with the defaults below.
"""

# B007: the sandbox refuses `_` names, so a loop that only counts keeps a named variable.
# F841: two results left unused (recover's `walled`, arm's `ok`) stay as written, so that
# the policies built from this file are the very text the benchmarks measured.
# ruff: noqa: B007, F841

# What a revision changes (knowledge.revisions.Params, one constant per field): written
# in per policy. The defaults are the fully revised values (best_params for a step of up
# to 300 steps), so that the program reads as its final version.
PATIENCE = 300
ATTEMPTS = 40
EXPLORE = 30
SECURE = True
DIG = True
FIGHT = True
SURVIVE = True
CHUNK = 40
CHECK = 5
GUARDED = True
VALIDATE = False
FAR = 24
ARM = True
# Crafter's recipe tables and action names: written in per policy from crafter.constants
# (knowledge.library), empty here so that nothing about a recipe is written by hand.
SWORDS = []
COMPANIONS = {}
STOCK = {}
HOW = {}
USES = {}
NEAR = {}
TOOLS = {}
SOURCES = {}
ORDER = []
ACTIONS = []
# Where each kind lives (what to explore towards), from Crafter's world generator.
HABITAT = {
    "stone": "stone",
    "coal": "stone",
    "iron": "stone",
    "diamond": "stone",
    "tree": "tree",
    "water": "water",
    "cow": "grass",
    "zombie": "grass",
    "skeleton": "path",
    "grass": "grass",
}
# Survival thresholds (Crafter: every vital 0–9; health regenerates only while food,
# drink and energy are all above 0, and drops when one is 0). knowledge.survival's
# stages answer to the same numbers.
DRINK_BELOW = 5  # −1 per ~20 steps: 80 steps to reach water, then fill up
DRINK_UNTIL = 9
FOOD_BELOW = 6  # −1 per ~25 steps: 100 steps to find a cow (+6 each)
FOOD_UNTIL = 8
ENERGY_BELOW = 3  # −1 per ~30 steps: 90 steps to find a nook
ENERGY_UNTIL = 9
# Below HEALTH_BELOW get away, wall in and rest until HEALTH_UNTIL (the retreat). 0: never.
# Every step back measured better: 6 and 8 → 5 and 7, and no retreat at all (with WEAK 0),
# a paired +5.7 % [+2.9, +8.4] and +3.8 % [+1.0, +6.5] diamonds on two sets of 1,000
# development worlds (BENCHMARKS.md, "No retreat at all"): the walk to a nook at low health
# was the deadliest thing the player did (about 2.5 deaths per 1,000 steps), and health
# comes back by itself while food, drink and energy last.
HEALTH_BELOW = 0
HEALTH_UNTIL = 7
# Night (Crafter's daylight < 0.45 for ~120 of every 300 steps): zombies spawn on grass
# chunks at 2-3 per chunk and hit sleepers for 7, so the night is spent walled in,
# sleeping; drink/food are topped up first so that they last until dawn (~120 steps).
NIGHT_BELOW = 0.45
# The night's shelter ends when the light is back at DAWN: Crafter keeps up to
# int(3.5 − 3·light) zombies per grassland chunk, so above ~0.83 it spawns none and
# removes those left; leaving at 0.6 walked into the night's zombies.
DAWN = 0.85
# At night only a vital below this takes the player out for water or a cow (3: at 2,
# not 1 — a paired +1.5 % and +3.3 % [+0.1, +6.5] diamonds on two sets of 1,000
# development worlds, BENCHMARKS.md, "Five changes of the survival code").
CRITICAL = 3
# Health at or below which a trip for drink or food that is not critical gives way to
# the retreat. 0: never (there is no retreat, see HEALTH_BELOW).
WEAK = 0
# Refill on the way when the source is in view: cheap, and it keeps the emergencies
# (a long trip to water or cows, maybe at night) rare.
TOP_UP_DRINK = 6
TOP_UP_FOOD = 5
# At dusk (light falling below 0.6, ~60 steps before night) fill up for the night: a
# full drink lasts ~180 steps, food ~225 — the night in a shelter is ~120 steps.
DUSK = 0.6
DUSK_DRINK = 7
DUSK_FOOD = 6
# Steps a survival trip (to water, a cow, a shelter) may take before giving up.
TRIP = 150
# A trip for drink or food goes in legs of this many steps, and checks between them
# whether it still should (night fell, health ran low).
LEG = 30
# Walled in with a hostile this close outside (Manhattan tiles), the player stays in:
# zombies wait next to a nook all night and hit whoever steps out at dawn. At most LURK
# steps, and never while drink or food is critical.
LURK_NEAR = 3
LURK = 60
# Tiles a cow or zombie can step onto (Crafter's walkable ones): a plant with one of
# these beside it can be eaten.
OPEN = ("grass", "sand", "path")
# What vitals() remembers between calls: the light at the last check (falling light
# below DUSK is dusk).
MEMO = {}


def count(skills, item):
    """How much of an item (or vital) the player holds."""
    held = skills.inventory()
    if item in held:
        return held[item]
    return int(skills.status().get(item, 0))


def dist(offset):
    return abs(offset[0]) + abs(offset[1])


def setup(skills):
    skills.guard(FIGHT)
    skills.tunnel(DIG)


def dark(skills):
    """Night: zombies swarm the grassland, a trip out is worth it only when critical."""
    return skills.daylight() < NIGHT_BELOW


def lurking(skills):
    """A hostile within LURK_NEAR tiles of the player."""
    for kind, dx, dy in skills.hostiles():
        if abs(dx) + abs(dy) <= LURK_NEAR:
            return True
    return False


def wait_out(skills):
    """Walled in with hostiles waiting outside: stay in until they are gone (or LURK
    steps), unless drink or food is critical. True if it waited."""
    waited = 0
    while waited < LURK and skills.enclosed() and lurking(skills):
        if count(skills, "drink") < CRITICAL or count(skills, "food") < CRITICAL:
            break
        yield "noop"
        waited += 1
    return waited > 0


def hurt(skills, vital):
    """Health too low for a trip that can wait (the retreat comes first), or another
    vital more urgent than this one (needs do not interrupt each other: give way)."""
    if count(skills, vital) < CRITICAL:
        return False
    if count(skills, "health") <= WEAK:
        return True
    other = "food" if vital == "drink" else "drink"
    return count(skills, other) < CRITICAL and count(skills, other) < count(skills, vital)


def wait_for_day(skills, vital, source):
    """Night, the vital not critical and no ``source`` in view: the trip waits for the
    shelter (zombies swarm the grassland)."""
    return dark(skills) and count(skills, vital) >= CRITICAL and not skills.sees(source)


def trip(skills, vital, until, kind, habitat):
    """Collect ``kind`` until ``vital`` reaches ``until``, in legs of LEG steps: after
    each, a trip that is no longer urgent gives way — to the shelter when night has
    fallen meanwhile, to the retreat when health ran low."""
    spent = 0
    while count(skills, vital) < until and spent < TRIP:
        if hurt(skills, vital) or wait_for_day(skills, vital, kind):
            return False
        start = skills.steps()
        ok = yield from skills.collect(kind, 1, LEG)
        if not ok and skills.steps() - start < LEG:  # none known or reachable: search
            yield from skills.explore(LEG, habitat)
        if skills.steps() == start:
            yield "noop"
        spent += skills.steps() - start
    return count(skills, vital) >= until


def drink(skills, until):
    """Drink water until the drink vital reaches ``until`` (at night only when it is
    critical: the shelter comes first)."""
    ok = yield from trip(skills, "drink", until, "water", "water")
    return ok


def eat(skills, until):
    """Eat cows until food reaches ``until`` (at night only when it is critical)."""
    ok = yield from trip(skills, "food", until, "cow", "grass")
    return ok


def hide(skills):
    """Get walled in: a nook in stone within reach (dug with a pickaxe), else head for
    the mountains and try again."""
    for tries in range(3):
        walled = yield from skills.shelter(TRIP)
        if walled:
            return True
        if count(skills, "wood_pickaxe") == 0 and SECURE:
            # No pickaxe yet (the first evening): make one — a nook is dug into stone.
            got = yield from obtain(skills, "wood_pickaxe", 1)
            if not got:
                yield from skills.explore(20, "stone")
        elif count(skills, "stone") < 2 and count(skills, "wood_pickaxe") > 0:
            yield from skills.collect("stone", 2, 40)
        else:
            yield from skills.explore(20, "stone")
    return False


def sleep(skills, until):
    """Wall in (dig a nook) if possible, then sleep until energy is back."""
    yield from skills.defend(30)
    walled = yield from hide(skills)
    if walled:
        ok = yield from hold(skills, lambda: count(skills, "energy") >= until, 400)
        return ok
    ok = yield from skills.rest(until, 400)
    return ok


def night(skills):
    """Nights are when zombies swarm: get walled in, sleep (or wait) until dawn.
    At dusk (still light) drink and eat first, so that they last until dawn.
    Without a shelter, carry on (and try again at the next check)."""
    if not dark(skills):
        if count(skills, "drink") < DUSK_DRINK:
            yield from drink(skills, DRINK_UNTIL)
        if count(skills, "food") < DUSK_FOOD:
            yield from eat(skills, FOOD_UNTIL)
    walled = yield from hide(skills)
    if not walled:
        return False
    ok = yield from hold(skills, lambda: skills.daylight() >= DAWN, 300)
    return ok


def sip(skills):
    """Drink from water next to the player without stepping out (a nook by a lake:
    water is a wall no zombie crosses). True if it drank."""
    if count(skills, "drink") >= DRINK_UNTIL:
        return False
    ok = yield from skills.face("water")
    if not ok:
        return False
    yield "do"
    return True


def hold(skills, served, patience):
    """Stay walled in until ``served()`` (or ``patience`` steps, or drink/food run low):
    sleep while tired, re-wall if the nook opens, fight what comes next to the player,
    step away from hostiles when no wall can be had."""
    start = skills.steps()
    while not served() and skills.steps() - start < patience:
        sipped = yield from sip(skills)
        if sipped:
            continue
        if count(skills, "drink") < 2 or count(skills, "food") < 2:
            return False
        before = skills.steps()
        if not skills.enclosed():
            yield from skills.defend(20)
            walled = yield from skills.shelter(30)
            if not walled:
                moved = yield from skills.evade(5)
                if not moved:
                    yield "noop"
                continue
        if count(skills, "energy") < 9:
            yield from skills.rest(9, 10)
        else:
            for wait in range(3):
                yield "noop"
        yield from skills.defend(20)
        if skills.steps() == before:
            yield "noop"
    return served()


def recover(skills, until):
    """Low health: fight off whatever is next to us, wall in, rest until healed (only
    while food and drink last: health regenerates only then)."""
    yield from skills.defend(40)
    walled = yield from hide(skills)
    ok = yield from hold(skills, lambda: count(skills, "health") >= until, 300)
    return ok


def vitals(skills):
    """Keep the player alive: the survival stages, most urgent first. By day vitals are
    topped up (more at dusk, to last the night); at night only a critical one takes
    the player out onto the grass, where the zombies are."""
    yield from skills.defend(30)
    light = skills.daylight()
    falling = light < MEMO.get("light", 1.0)
    MEMO["light"] = light
    dark = light < NIGHT_BELOW
    if not dark:
        if falling and light < DUSK:
            if count(skills, "drink") < DUSK_DRINK:
                yield from drink(skills, DRINK_UNTIL)
            if count(skills, "food") < DUSK_FOOD:
                yield from eat(skills, FOOD_UNTIL)
        if count(skills, "drink") <= TOP_UP_DRINK and skills.sees("water"):
            yield from drink(skills, DRINK_UNTIL)
        if count(skills, "food") <= TOP_UP_FOOD and skills.sees("cow"):
            yield from eat(skills, FOOD_UNTIL)
        if count(skills, "drink") < DRINK_BELOW:
            yield from drink(skills, DRINK_UNTIL)
        if count(skills, "food") < FOOD_BELOW:
            yield from eat(skills, FOOD_UNTIL)
    else:
        if count(skills, "drink") < CRITICAL:
            yield from drink(skills, DRINK_UNTIL)
        if count(skills, "food") < CRITICAL:
            yield from eat(skills, FOOD_UNTIL)
    if count(skills, "health") < HEALTH_BELOW:
        yield from recover(skills, HEALTH_UNTIL)
    if skills.daylight() < NIGHT_BELOW:
        yield from night(skills)
    elif count(skills, "energy") < ENERGY_BELOW:
        yield from sleep(skills, ENERGY_UNTIL)
    return True


def gather(skills, tile, item, n):
    """Hit ``tile`` until holding ``n`` of ``item`` (False when a tool is missing)."""
    spent = 0
    while count(skills, item) < n and spent < PATIENCE:
        start = skills.steps()
        want = n - count(skills, item)
        ok = yield from skills.collect(tile, want, min(CHUNK, PATIENCE - spent))
        spent += skills.steps() - start + 1
        if not ok and skills.steps() == start:
            return False
    return count(skills, item) >= n


def obtain(skills, item, n):
    """Hold ``n`` of ``item``: collect it, or make it (securing what it needs)."""
    tries = 0
    while count(skills, item) < n and tries <= ATTEMPTS:
        tries += 1
        start = skills.steps()
        kind = HOW.get(item)
        if kind == "collect":
            tile = SOURCES[item]
            if SECURE:
                for tool in TOOLS[tile]:
                    ok = yield from obtain(skills, tool, TOOLS[tile][tool])
                    if not ok:
                        return False
            ok = yield from gather(skills, tile, item, n)
            if ok and SECURE and count(skills, item) < STOCK.get(item, 0):
                # Cheap extra while at the source: a short try, no exploring.
                more = STOCK[item]
                yield from skills.collect(tile, more - count(skills, item), CHUNK)
        elif kind == "make":
            ok = yield from build(skills, item, n)
        else:
            return False
        if not ok and EXPLORE:
            yield from skills.explore(EXPLORE, HABITAT.get(SOURCES.get(item, item)))
        if skills.steps() == start:
            yield "noop"  # nothing to do now: let time pass rather than spin
    return count(skills, item) >= n


def secure(skills, needs):
    """Hold every item of ``needs`` at once (deepest first: they consume the shallow)."""
    for rounds in range(3):
        for item in ORDER:
            if item in needs and count(skills, item) < needs[item]:
                ok = yield from obtain(skills, item, needs[item])
                if not ok:
                    return False
        if all(count(skills, item) >= needs[item] for item in needs):
            return True
    return False


def collectable(skills, item):
    """Whether ``item`` can be collected with the tools held now."""
    if HOW.get(item) != "collect":
        return False
    tools = TOOLS[SOURCES[item]]
    return all(count(skills, tool) >= tools[tool] for tool in tools)


def known(skills, station):
    """Offset of a remembered station within FAR steps, else None."""
    spot = skills.nearest(station)
    if spot is not None and dist(spot) <= FAR:
        return spot
    return None


def beside(skills, names):
    """Walk next to the nearest remembered station of ``names`` within FAR steps."""
    for name in names:
        if known(skills, name) is not None:
            ok = yield from skills.path_to(name, min(PATIENCE, 100))
            return ok
    return False


def put(skills, item):
    """Place ``item`` (a station, a stone, a plant) in front, walking to a free tile."""
    if SECURE:
        ok = yield from secure(skills, USES.get(item, {}))
        if not ok:
            return False
    ok = yield from skills.place(item, min(PATIENCE, 100))
    return ok


def stations(skills, names, keep):
    """Stand next to every station in ``names``: walk to one within FAR steps, place
    the others there. ``keep`` are items to hold on to (the recipe's own uses)."""
    if not names:
        return True
    anchor = None
    for name in names:
        if known(skills, name) is not None:
            anchor = name
            break
    needs = dict(keep)
    for name in names:
        if name != anchor:
            for item in USES.get(name, {}):
                needs[item] = needs.get(item, 0) + USES[name][item]
    if ARM:
        for sword in SWORDS:
            if count(skills, sword) > 0 or not all(n in names for n in NEAR[sword]):
                continue
            if all(collectable(skills, item) for item in USES[sword]):
                for item in USES[sword]:
                    needs[item] = needs.get(item, 0) + USES[sword][item]
    ok = yield from secure(skills, needs)
    if not ok:
        return False
    if anchor is not None:
        ok = yield from skills.path_to(anchor, PATIENCE)
        if not ok:
            anchor = None
    for name in names:
        near = skills.nearest(name)
        if near is not None and max(abs(near[0]), abs(near[1])) <= 1:
            continue
        ok = yield from skills.place(name, min(PATIENCE, 100))
        if not ok:
            return False
    if ARM:
        yield from arm(skills, names, keep)
    return True


def arm(skills, names, keep):
    """At the stations: make the swords we lack whose materials are spare."""
    for sword in SWORDS:
        if count(skills, sword) > 0 or not all(n in names for n in NEAR[sword]):
            continue
        uses = USES[sword]
        if all(count(skills, m) >= uses[m] + keep.get(m, 0) for m in uses):
            ok = yield from skills.make(sword, 10)
            keep = dict(keep)


def build(skills, item, n):
    """Make ``item`` until holding ``n`` (securing materials and stations first)."""
    tries = 0
    while count(skills, item) < n and tries <= ATTEMPTS:
        tries += 1
        start = skills.steps()
        ok = True
        if SECURE:
            ok = yield from secure(skills, USES[item])
            if ok:
                ok = yield from stations(skills, NEAR[item], USES[item])
        if ok:
            ok = yield from skills.make(item, PATIENCE)
        if not ok and EXPLORE:
            yield from skills.explore(EXPLORE, None)
        if skills.steps() == start:
            yield "noop"  # nothing to do now: let time pass rather than spin
    return count(skills, item) >= n


def hunt(skills, kind, achievement):
    """Hit a creature of ``kind`` until ``achievement`` happens."""
    spent = 0
    budget = PATIENCE * (ATTEMPTS + 1)
    while skills.achievements().get(achievement, 0) == 0 and spent < budget:
        start = skills.steps()
        ok = yield from skills.collect(kind, 1, CHUNK)
        spent += skills.steps() - start + 1
        if not ok:
            yield from skills.explore(max(EXPLORE, 10), HABITAT.get(kind))
            spent += max(EXPLORE, 10)
        if skills.steps() == start:
            yield "noop"
    return skills.achievements().get(achievement, 0) > 0


def wait_and_sleep(skills):
    """Sleep once (energy must be below its maximum), walled in if possible."""
    spent = 0
    while count(skills, "energy") >= 9 and spent < PATIENCE:
        if SECURE and count(skills, "wood_pickaxe") == 0:
            yield from obtain(skills, "wood_pickaxe", 1)
        elif SECURE and count(skills, "stone") < 2 and count(skills, "wood_pickaxe") > 0:
            yield from obtain(skills, "stone", 2)
        else:
            yield from skills.explore(10, "stone")
        spent += 10
    if SECURE:
        yield from skills.shelter(60)
    ok = yield from skills.rest(9, PATIENCE)
    return ok


def tile_at(skills, offset):
    """The tile at ``offset`` from the player in the current view ("" beyond it)."""
    view = skills.view()
    row = len(view) // 2 + offset[1]
    col = len(view[0]) // 2 + offset[0]
    if 0 <= row < len(view) and 0 <= col < len(view[0]):
        return view[row][col]
    return ""


def toward(skills, spot):
    """The offset of the tile at ``spot`` (a position, see skills.position) from the player."""
    here = skills.position()
    return (spot[0] - here[0], spot[1] - here[1])


def go_face(skills, spot):
    """Walk until facing the tile at position ``spot``; True when facing it."""
    offset = toward(skills, spot)
    ok = yield from skills.walk_to(offset[0], offset[1], CHUNK)
    return ok


def sides_of(spot):
    return [(spot[0] + d[0], spot[1] + d[1]) for d in ((1, 0), (-1, 0), (0, 1), (0, -1))]


def wall_in(skills, spot):
    """Put stone on every side of the plant at ``spot`` that a creature could step on
    (grass, sand, path), the side the player stands on last; False when stone or the
    way to a side runs out."""
    for rounds in range(3):
        here = skills.position()
        sides = sides_of(spot)
        sides.sort(key=lambda side: side == here)
        open_sides = [side for side in sides if tile_at(skills, toward(skills, side)) in OPEN]
        if not open_sides:
            return True
        for side in open_sides:
            if count(skills, "stone") < 1:
                ok = yield from obtain(skills, "stone", len(open_sides))
                if not ok:
                    return False
            ok = yield from go_face(skills, side)
            if not ok:
                continue
            yield from skills.defend(10)
            if skills.facing_tile() in OPEN:
                yield "place_stone"
    return walled_in(skills, spot)


def walled_in(skills, spot):
    """Whether no side of the plant at ``spot`` is open to a creature (as far as seen)."""
    return not any(tile_at(skills, toward(skills, side)) in OPEN for side in sides_of(spot))


def near_plant(skills, spot):
    """Walk up to the nearest side of the plant at ``spot`` (facing it, never digging
    into a wall of its)."""
    sides = sides_of(spot)
    sides.sort(key=lambda side: dist(toward(skills, side)))
    ok = yield from go_face(skills, sides[0])
    return ok


def known_plant(skills):
    """Offset of the nearest plant in view or seen within FAR steps, else None."""
    for kind, dx, dy in skills.creatures():
        if kind == "plant":
            return (dx, dy)
    seen = skills.sighted("plant", 5000)
    if seen and dist(seen[0]) <= FAR:
        return seen[0]
    return None


def grow_and_eat(skills):
    """Eat a ripe plant. Plant a sapling (or take one seen nearby), wall its sides in
    with stone (a cow or zombie next to it eats it), wait beside it while it ripens (it
    grows only while the player is near), then open a side and eat it; without stone,
    guard it from beside it. Starts over from what it sees: a need may interrupt it."""
    tries = 0
    while skills.achievements().get("eat_plant", 0) == 0 and tries <= ATTEMPTS:
        tries += 1
        here = skills.position()
        ripe = skills.ripe()
        if ripe:
            spot = (here[0] + ripe[0][0], here[1] + ripe[0][1])
            if walled_in(skills, spot):
                # Walled in: open the nearest side (collect its stone), then step in.
                ok = yield from near_plant(skills, spot)
                if ok and skills.facing_tile() == "stone":
                    yield "do"
            ok = yield from go_face(skills, spot)
            if ok and skills.facing_tile() == "plant":
                yield "do"
            continue
        found = known_plant(skills)
        if found is None:
            if SECURE and count(skills, "wood_pickaxe") > 0 and count(skills, "stone") < 4:
                yield from obtain(skills, "stone", 4)
            ok = yield from obtain(skills, "sapling", 1)
            if ok:
                yield from skills.place("plant", min(PATIENCE, 100))
            continue
        spot = (here[0] + found[0], here[1] + found[1])
        if dist(found) > 2:
            yield from near_plant(skills, spot)
        walled = False
        if SECURE and count(skills, "wood_pickaxe") > 0:
            walled = yield from wall_in(skills, spot)
        if walled:
            # Wait beside the wall, the plant in view, until it shows ripe.
            waited = 0
            while not skills.ripe() and waited < 60:
                if dist(toward(skills, spot)) > 2:
                    yield from near_plant(skills, spot)
                yield from skills.defend(5)
                for wait in range(5):
                    yield "noop"
                waited += 6
            continue
        # No wall: stand beside it, fight off what comes, try it now and then.
        ok = yield from go_face(skills, spot)
        if not ok or skills.facing_tile() != "plant":
            continue
        yield from skills.defend(10)
        yield "do"
        for wait in range(9):
            yield "noop"
    return skills.achievements().get("eat_plant", 0) > 0


def act(skills, body):
    """Run a stage's generator, catching its own errors when GUARDED."""
    if not GUARDED:
        ok = yield from body
        return ok
    try:
        ok = yield from body
        return ok
    except Exception:
        yield from skills.explore(10, None)
        return False


def run(skills):
    """Run the step's main(); with SURVIVE, pause it every CHECK steps to keep vitals
    up (the paused skill re-plans when it resumes)."""
    setup(skills)
    yield from wait_out(skills)
    last = skills.steps()
    for action in act(skills, main(skills)):
        if VALIDATE and action not in ACTIONS:
            action = "noop"
        yield action
        if SURVIVE and skills.steps() - last >= CHECK:
            yield from vitals(skills)
            last = skills.steps()


def hunt_drink(skills):
    """Drink water once (it counts even when the drink vital is full)."""
    tries = 0
    while skills.achievements().get("collect_drink", 0) == 0 and tries <= ATTEMPTS:
        tries += 1
        ok = yield from skills.collect("water", 1, PATIENCE)
        if not ok and EXPLORE:
            yield from skills.explore(EXPLORE, "water")
    return skills.achievements().get("collect_drink", 0) > 0


def main(skills):
    """The step's goal: a placeholder, so that this program runs on its own. The library
    cuts it and appends the step's own ``main`` (knowledge.library)."""
    ok = yield from skills.explore(EXPLORE, None)
    return ok
