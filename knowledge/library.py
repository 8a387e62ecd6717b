"""The skill library: code templates for each plan step (the offline fast agent's code).

Every template is policy source text defining ``run(skills)`` — a generator of primitive
action names over the skill API (:class:`envs.skills.Skills`) — that the sandbox
accepts (no imports, classes or ``_`` names). A template is a shared *prelude* of plain
helper generators (obtain an item, stand next to stations, keep vitals up, …) followed
by the step's own ``run``; the recipe tables the prelude consults are written into the
text from Crafter's data (:mod:`knowledge.recipes`), never by hand.

- :class:`Params` — the knobs a revision changes; :func:`first_params` is the FIRST,
  deliberately simple version (short patience, no prerequisites, no danger handling);
  :func:`best_params` the fully revised one.
- :func:`code_for` — the source for a step and params.
- :func:`revise` — the rule-based revision for a critique's cause (or None: hand the
  step to RL).
- :func:`options_for` / :func:`option` / :data:`OPTION_NAMES` — small coded actions
  (≤ ~50 steps each) for a step's RL action space.
- :func:`survival_stages` — drink, eat, sleep and recover, with thresholds and code.
"""

from __future__ import annotations

import dataclasses
import functools
import textwrap

from knowledge.recipes import Step, achievement_step, sources

# ---------------------------------------------------------------------- params


@dataclasses.dataclass(frozen=True, slots=True)
class Params:
    """What a revision of a template can change."""

    patience: int = 100
    """Steps one attempt at a sub-goal may take before it counts as failed."""
    attempts: int = 0
    """Further attempts after a failed one (exploring ``explore`` steps in between)."""
    explore: int = 0
    """Steps to explore between attempts (towards where the target lives)."""
    secure: bool = False
    """Obtain missing tools, materials and stations first (recursively)."""
    dig: bool = False
    """Tunnel through stone (and coal, iron…) once holding a pickaxe; never into lava."""
    fight: bool = False
    """Fight a zombie or skeleton that comes next to the player."""
    survive: bool = False
    """Drink, eat, sleep in a shelter and recover when vitals run low."""
    chunk: int = 40
    """Steps per skill call before the code re-decides (explore, retry)."""
    check: int = 10
    """With ``survive``: steps between checks of vitals and nightfall."""
    guarded: bool = False
    """Catch the code's own exceptions, explore a little and carry on."""
    validate: bool = False
    """Replace action names the world does not know by 'noop'."""
    far: int = 24
    """A station further than this (steps) is replaced by a new one if materials allow."""
    arm: bool = False
    """Make a sword at a table when spare materials allow (zombies die in fewer hits)."""


MAX_PATIENCE = 6000
MAX_ATTEMPTS = 40


def first_params(step: Step) -> Params:
    """The FIRST version: the simplest template (short patience, nothing secured, no
    danger handling) — where the offline fast agent starts before any critique."""
    return Params()


def best_params(step: Step, **changes: object) -> Params:
    """The final quality: every revision applied, patience sized to the step
    (``changes`` override fields, e.g. ``survive=False`` under a composer that keeps
    the vitals up itself)."""
    best = Params(
        patience=max(300, step.max_steps),
        attempts=MAX_ATTEMPTS,
        explore=30,
        secure=True,
        dig=True,
        fight=True,
        chunk=40,
        check=5,
        guarded=True,
        validate=False,
        arm=True,
        survive=True,
    )
    return dataclasses.replace(best, **changes)


def revise(step: Step, params: Params, cause: str, detail: str = "") -> tuple[Params, str] | None:
    """The template revision a critique's ``cause`` calls for, with a one-line reason
    naming the cause; None when no change of the code applies (switch to RL).

    Causes: step_budget (ran out of steps), policy_finished (returned before success:
    a helper gave up, a requirement was missing), episode_done (the player died),
    exception / policy_error, timeout, invalid_action (code errors).
    """
    p = params
    replace = dataclasses.replace
    if cause == "policy_finished":
        if not p.secure:
            return replace(p, secure=True), (
                "policy_finished: a requirement was missing — now obtains the tools, "
                "materials and stations the step needs first"
            )
        if p.attempts < MAX_ATTEMPTS:
            attempts = min(MAX_ATTEMPTS, max(3, 2 * p.attempts))
            explore = max(p.explore, 30)
            return replace(p, attempts=attempts, explore=explore), (
                f"policy_finished: a helper gave up — now explores {explore} steps and "
                f"tries again, up to {attempts} times"
            )
        if not p.dig:
            return replace(p, dig=True), (
                "policy_finished: still no target in reach — now tunnels through stone"
            )
        return None
    if cause == "step_budget":
        if not p.dig:
            return replace(p, dig=True), (
                "step_budget: walking around mountains took too long — now tunnels "
                "through stone with a pickaxe (never into lava)"
            )
        if p.patience < min(MAX_PATIENCE, step.max_steps):
            patience = min(step.max_steps, MAX_PATIENCE, 2 * p.patience)
            return replace(p, patience=patience, explore=max(p.explore, 30)), (
                f"step_budget: attempts were cut short — patience {p.patience} → {patience}"
            )
        if p.chunk > 10:
            return replace(p, chunk=p.chunk // 2), (
                "step_budget: long skill calls kept going the wrong way — re-decides twice as often"
            )
        return None
    if cause == "episode_done":
        if not p.fight:
            return replace(p, fight=True), (
                "episode_done: the player died — now fights zombies and skeletons that "
                "come next to it"
            )
        if not p.arm:
            return replace(p, arm=True), (
                "episode_done: the player died fighting — now makes a sword at a table "
                "when spare wood/stone allow"
            )
        if not p.survive:
            return replace(p, survive=True), (
                "episode_done: the player died — now drinks, eats, sleeps in a shelter "
                "and recovers when vitals run low"
            )
        if p.check > 2:
            return replace(p, check=p.check // 2), (
                "episode_done: danger came between checks — checks vitals twice as often"
            )
        return None
    if cause in ("exception", "policy_error"):
        if not p.guarded:
            return replace(p, guarded=True), (
                f"{cause}: the code raised ({detail[:60]}) — now catches its own errors, "
                "explores a little and carries on"
            )
        return None
    if cause == "timeout":
        if p.chunk < 200:
            return replace(p, chunk=p.chunk * 2), (
                "timeout: too much planning per step — calls each skill for twice as many "
                "steps between checks"
            )
        return None
    if cause == "invalid_action":
        if not p.validate:
            return replace(p, validate=True), (
                "invalid_action: an unknown action name was yielded — now checks every "
                "action against the world's names and sends noop instead"
            )
        return None
    return None


# ---------------------------------------------------------------------- the data


@functools.cache
def _tables() -> dict[str, object]:
    """The recipe tables the prelude needs, read from Crafter's data."""
    from crafter import constants

    how: dict[str, str] = {}
    uses: dict[str, dict[str, int]] = {}
    near: dict[str, list[str]] = {}
    for item, rule in constants.place.items():
        how.setdefault(item, "place")
        uses[item] = dict(rule.get("uses", {}))
        near[item] = list(rule.get("nearby", []))
    for item in sources():
        how[item] = "collect"
    for item, rule in constants.make.items():
        how[item] = "make"
        uses[item] = dict(rule.get("uses", {}))
        near[item] = list(rule.get("nearby", []))
    tools = {tile: dict(rule.get("require", {})) for tile, rule in constants.collect.items()}
    src = {item: tile for item, tile in sources().items() if tile != "grass" or item == "sapling"}

    @functools.cache
    def depth(item: str) -> int:
        kind = how.get(item)
        if kind == "collect":
            return 1 + max((depth(t) for t in tools[src[item]]), default=0)
        return 1 + max((depth(m) for m in uses.get(item, {})), default=0)

    order = sorted(how, key=lambda item: (-depth(item), item))
    return {
        "HOW": how,
        "USES": uses,
        "NEAR": near,
        "TOOLS": tools,
        "SOURCES": src,
        "ORDER": order,
        "ACTIONS": list(constants.actions),
        # Station → the other stations some recipe needs next to it (furnace → table):
        # a station is best placed beside its companions.
        "COMPANIONS": {
            item: sorted(
                {
                    s
                    for rule in constants.make.values()
                    if item in rule.get("nearby", [])
                    for s in rule.get("nearby", [])
                    if s != item
                }
            )
            for item in constants.place
        },
        # Gather up to this many while at the source (wood is cheap at the start and a
        # second table far from the first needs it): the inventory's maximum.
        "STOCK": {"wood": int(constants.items["wood"]["max"])},
        # Swords: made items nothing else uses, cheapest first (they add damage).
        "SWORDS": [i for i in constants.make if "sword" in i][:2],
    }


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
# drink and energy are all above 0, and drops when one is 0).
DRINK_BELOW, DRINK_UNTIL = 5, 9  # −1 per ~20 steps: 80 steps to reach water, then fill up
FOOD_BELOW, FOOD_UNTIL = 6, 8  # −1 per ~25 steps: 100 steps to find a cow (+6 each)
ENERGY_BELOW, ENERGY_UNTIL = 3, 9  # −1 per ~30 steps: 90 steps to find a nook
HEALTH_BELOW, HEALTH_UNTIL = 6, 8  # 3 zombie hits from 0: get away, wall in, rest
# Night (Crafter's daylight < 0.45 for ~120 of every 300 steps): zombies spawn on grass
# chunks at 2-3 per chunk and hit sleepers for 7, so the night is spent walled in,
# sleeping; drink/food are topped up first so that they last until dawn (~120 steps).
NIGHT_BELOW, DAWN = 0.45, 0.6
# At night only a vital below this takes the player out for water or a cow.
CRITICAL = 2
# Health at or below which a trip for drink or food that is not critical gives way to
# the retreat (zombies hit for 2: two hits from death).
WEAK = 4
# Refill on the way when the source is in view: cheap, and it keeps the emergencies
# (a long trip to water or cows, maybe at night) rare.
TOP_UP_DRINK, TOP_UP_FOOD = 6, 5
# At dusk (light falling below 0.6, ~60 steps before night) fill up for the night: a
# full drink lasts ~180 steps, food ~225 — the night in a shelter is ~120 steps.
DUSK, DUSK_DRINK, DUSK_FOOD = 0.6, 7, 6
# Steps a survival trip (to water, a cow, a shelter) may take before giving up.
TRIP = 150

_PRELUDE = '''\
PATIENCE = {patience}
ATTEMPTS = {attempts}
EXPLORE = {explore}
SECURE = {secure}
DIG = {dig}
FIGHT = {fight}
SURVIVE = {survive}
CHUNK = {chunk}
CHECK = {check}
GUARDED = {guarded}
VALIDATE = {validate}
FAR = {far}
ARM = {arm}
SWORDS = {SWORDS}
COMPANIONS = {COMPANIONS}
STOCK = {STOCK}
HOW = {HOW}
USES = {USES}
NEAR = {NEAR}
TOOLS = {TOOLS}
SOURCES = {SOURCES}
ORDER = {ORDER}
ACTIONS = {ACTIONS}
HABITAT = {HABITAT}
DRINK_BELOW = {DRINK_BELOW}
DRINK_UNTIL = {DRINK_UNTIL}
FOOD_BELOW = {FOOD_BELOW}
FOOD_UNTIL = {FOOD_UNTIL}
ENERGY_BELOW = {ENERGY_BELOW}
ENERGY_UNTIL = {ENERGY_UNTIL}
HEALTH_BELOW = {HEALTH_BELOW}
HEALTH_UNTIL = {HEALTH_UNTIL}
NIGHT_BELOW = {NIGHT_BELOW}
DAWN = {DAWN}
CRITICAL = {CRITICAL}
WEAK = {WEAK}
TOP_UP_DRINK = {TOP_UP_DRINK}
TOP_UP_FOOD = {TOP_UP_FOOD}
DUSK = {DUSK}
DUSK_DRINK = {DUSK_DRINK}
DUSK_FOOD = {DUSK_FOOD}
TRIP = {TRIP}
MEMO = {{}}


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


def hurt(skills, vital):
    """Health too low for a trip that can wait (the retreat comes first), or another
    vital more urgent than this one (needs do not interrupt each other: give way)."""
    if count(skills, vital) < CRITICAL:
        return False
    if count(skills, "health") <= WEAK:
        return True
    other = "food" if vital == "drink" else "drink"
    return count(skills, other) < CRITICAL and count(skills, other) < count(skills, vital)


def drink(skills, until):
    """Drink water until the drink vital reaches ``until`` (at night only when it is
    critical: the shelter comes first)."""
    if dark(skills) and count(skills, "drink") >= CRITICAL and not skills.sees("water"):
        return False
    spent = 0
    while count(skills, "drink") < until and spent < TRIP:
        if hurt(skills, "drink"):
            return False
        start = skills.steps()
        ok = yield from skills.collect("water", 1, TRIP)
        if not ok:
            yield from skills.explore(EXPLORE + 10, "water")
        if skills.steps() == start:
            yield "noop"
        spent += skills.steps() - start
    return count(skills, "drink") >= until


def eat(skills, until):
    """Eat cows until food reaches ``until`` (at night only when it is critical)."""
    if dark(skills) and count(skills, "food") >= CRITICAL and not skills.sees("cow"):
        return False
    spent = 0
    while count(skills, "food") < until and spent < TRIP:
        if hurt(skills, "food"):
            return False
        start = skills.steps()
        ok = yield from skills.collect("cow", 1, TRIP)
        if not ok:
            yield from skills.explore(EXPLORE + 10, "grass")
        if skills.steps() == start:
            yield "noop"
        spent += skills.steps() - start
    return count(skills, "food") >= until


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


def hold(skills, served, patience):
    """Stay walled in until ``served()`` (or ``patience`` steps, or drink/food run low):
    sleep while tired, re-wall if the nook opens, fight what comes next to the player,
    step away from hostiles when no wall can be had."""
    start = skills.steps()
    while not served() and skills.steps() - start < patience:
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
        ok = yield from secure(skills, USES.get(item, {{}}))
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
            for item in USES.get(name, {{}}):
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


def grow_and_eat(skills):
    """Plant a sapling, guard it until it ripens (hitting it now and then), eat it."""
    spot = None
    tries = 0
    while skills.achievements().get("eat_plant", 0) == 0 and tries <= ATTEMPTS:
        tries += 1
        if spot is None:
            ok = yield from obtain(skills, "sapling", 1)
            if not ok:
                continue
            ok = yield from skills.place("plant", min(PATIENCE, 100))
            if not ok:
                continue
            here = skills.position()
            ahead = skills.facing()
            spot = (here[0] + ahead[0], here[1] + ahead[1])
        waited = 0
        while skills.achievements().get("eat_plant", 0) == 0 and waited < 800:
            here = skills.position()
            ok = yield from skills.walk_to(spot[0] - here[0], spot[1] - here[1], CHUNK)
            if not ok or skills.facing_tile() != "plant":
                spot = None
                break
            yield from skills.defend(10)
            yield "do"
            for wait in range(9):
                yield "noop"
            waited += 10
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
    last = skills.steps()
    for action in act(skills, main(skills)):
        if VALIDATE and action not in ACTIONS:
            action = "noop"
        yield action
        if SURVIVE and skills.steps() - last >= CHECK:
            yield from vitals(skills)
            last = skills.steps()
'''


def _prelude(params: Params) -> str:
    tables = _tables()
    values = {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
    values.update({k: repr(v) for k, v in tables.items()})
    values["HABITAT"] = repr(HABITAT)
    values.update(
        DRINK_BELOW=DRINK_BELOW,
        DRINK_UNTIL=DRINK_UNTIL,
        FOOD_BELOW=FOOD_BELOW,
        FOOD_UNTIL=FOOD_UNTIL,
        ENERGY_BELOW=ENERGY_BELOW,
        ENERGY_UNTIL=ENERGY_UNTIL,
        HEALTH_BELOW=HEALTH_BELOW,
        HEALTH_UNTIL=HEALTH_UNTIL,
        NIGHT_BELOW=NIGHT_BELOW,
        DAWN=DAWN,
        CRITICAL=CRITICAL,
        WEAK=WEAK,
        TOP_UP_DRINK=TOP_UP_DRINK,
        TOP_UP_FOOD=TOP_UP_FOOD,
        DUSK=DUSK,
        DUSK_DRINK=DUSK_DRINK,
        DUSK_FOOD=DUSK_FOOD,
        TRIP=TRIP,
    )
    return _PRELUDE.format(**values)


def _main_for(step: Step) -> str:
    """The step's own ``main(skills)`` (the prelude's ``run`` drives it)."""
    if step.kind == "collect":
        n = max(1, step.goal.get(step.item, 1))
        if step.item in ("drink",):
            body = """
                ok = yield from hunt_drink(skills)
                return ok
            """
        else:
            body = f"""
                ok = yield from obtain(skills, {step.item!r}, {n})
                return ok
            """
    elif step.kind == "make":
        n = max(1, step.goal.get(step.item, 1))
        body = f"""
            if not SECURE:
                ok = yield from skills.make({step.item!r}, PATIENCE)
                return ok
            ok = yield from build(skills, {step.item!r}, {n})
            return ok
        """
    elif step.kind == "place":
        body = f"""
            tries = 0
            while skills.achievements().get({step.achievement!r}, 0) == 0 and tries <= ATTEMPTS:
                tries += 1
                if SECURE and NEAR.get({step.item!r}):
                    ok = yield from stations(skills, NEAR[{step.item!r}], USES[{step.item!r}])
                if SECURE:
                    yield from beside(skills, COMPANIONS.get({step.item!r}, []))
                ok = yield from put(skills, {step.item!r})
                if not ok and EXPLORE:
                    yield from skills.explore(EXPLORE, None)
            return skills.achievements().get({step.achievement!r}, 0) > 0
        """
    elif step.item == "sleep":
        body = """
            ok = yield from wait_and_sleep(skills)
            return ok
        """
    elif step.item == "plant":
        body = """
            ok = yield from grow_and_eat(skills)
            return ok
        """
    else:
        tool = ""
        if step.item == "skeleton":
            tool = """
            if SECURE:
                yield from obtain(skills, "wood_pickaxe", 1)
                yield from obtain(skills, "wood_sword", 1)
            """
        elif step.item == "zombie":
            tool = """
            if SECURE:
                yield from obtain(skills, "wood_sword", 1)
            """
        body = (
            tool
            + f"""
            ok = yield from hunt(skills, {step.item!r}, {step.achievement!r})
            return ok
        """
        )
    return "\n\ndef main(skills):\n" + textwrap.indent(textwrap.dedent(body).strip(), "    ") + "\n"


_DRINK_HELPER = '''

def hunt_drink(skills):
    """Drink water once (it counts even when the drink vital is full)."""
    tries = 0
    while skills.achievements().get("collect_drink", 0) == 0 and tries <= ATTEMPTS:
        tries += 1
        ok = yield from skills.collect("water", 1, PATIENCE)
        if not ok and EXPLORE:
            yield from skills.explore(EXPLORE, "water")
    return skills.achievements().get("collect_drink", 0) > 0
'''


def code_for(step: Step, params: Params | None = None) -> str:
    """Policy source (defines ``run(skills)``) for ``step`` with ``params`` (default:
    :func:`best_params`)."""
    params = params if params is not None else best_params(step)
    header = f'"""Skill for {step.name}: {step.description}"""\n\n'
    return header + _prelude(params) + _DRINK_HELPER + _main_for(step)


# ---------------------------------------------------------------------- survival


@dataclasses.dataclass(frozen=True, slots=True)
class SurvivalStage:
    """A need that interrupts the plan when a vital falls below ``below``."""

    name: str
    stat: str
    below: int
    until: int
    reason: str
    source: str


def _stage_source(call: str, params: Params) -> str:
    return (
        '"""Survival stage."""\n\n'
        + _prelude(params)
        + _DRINK_HELPER
        + f"\n\ndef main(skills):\n    ok = yield from {call}\n    return ok\n"
    )


def survival_params() -> Params:
    """Params of the survival code: patient, fighting, tunnelling; securing (a shelter
    without a pickaxe yet makes one first)."""
    return Params(patience=300, attempts=3, explore=20, secure=True, dig=True, fight=True)


def survival_stages() -> list[SurvivalStage]:
    """Drink, eat, recover, shelter at night, sleep: when each applies (``stat`` below
    ``below``; 'daylight' is the world's light, 0–1), until when, and its code. In the
    order a composer should check them: most urgent first."""
    p = survival_params()
    return [
        SurvivalStage(
            "drink_water",
            "drink",
            DRINK_BELOW,
            DRINK_UNTIL,
            "drink falls 1 per ~20 steps; at 4 there are ~80 steps to reach water before "
            "health starts to drop; fill up to 9 (one 'do' each)",
            _stage_source("drink(skills, DRINK_UNTIL)", p),
        ),
        SurvivalStage(
            "eat_cow",
            "food",
            FOOD_BELOW,
            FOOD_UNTIL,
            "food falls 1 per ~25 steps; at 4 there are ~100 steps to find a cow, which gives 6",
            _stage_source("eat(skills, FOOD_UNTIL)", p),
        ),
        SurvivalStage(
            "retreat",
            "health",
            HEALTH_BELOW,
            HEALTH_UNTIL,
            "two zombie hits (2 each, 7 on a sleeper) from death: fight off what is "
            "adjacent, wall in, rest until health is back",
            _stage_source("recover(skills, HEALTH_UNTIL)", p),
        ),
        SurvivalStage(
            "shelter",
            "daylight",
            DUSK,
            DAWN,
            "at night zombies swarm the grassland (up to 3 per chunk) and hit sleepers "
            "for 7: top up drink and food, wall in a nook of stone and sleep until dawn",
            _stage_source("night(skills)", p),
        ),
        SurvivalStage(
            "sleep",
            "energy",
            ENERGY_BELOW,
            ENERGY_UNTIL,
            "energy falls 1 per ~30 steps; at 3 there are ~90 steps to dig a nook, wall "
            "it with a stone and sleep until energy is full",
            _stage_source("sleep(skills, ENERGY_UNTIL)", p),
        ),
    ]


# ---------------------------------------------------------------------- options

_OPTION_BODIES: dict[str, tuple[str, str]] = {
    "explore": ("walk ~10 steps towards unseen ground", "yield from skills.explore(10)"),
    "explore_mountain": (
        "walk ~10 steps towards unseen ground among stone (tunnels with a pickaxe)",
        'skills.tunnel(True)\n    yield from skills.explore(10, "stone")',
    ),
    "attack": ("'do' on what is in front, 3 times", "yield from skills.attack(3)"),
    "defend": (
        "fight a zombie or skeleton next to the player",
        "yield from skills.defend(20)",
    ),
    "noop": ("wait one step", 'yield "noop"'),
    "sleep": (
        "wall in if possible and sleep until energy is full",
        "skills.tunnel(True)\n    yield from skills.shelter(30)\n    yield from skills.rest(9, 50)",
    ),
    "drink_water": (
        "walk to water and drink up to 5 times",
        'yield from skills.collect("water", 5, 50)',
    ),
    "eat_cow": ("walk to a cow and hit it until eaten", 'yield from skills.collect("cow", 1, 50)'),
}


def _walk_option(kind: str) -> tuple[str, str]:
    return (
        f"walk to the nearest {kind} and face it (exploring while none is known)",
        f"yield from skills.approach({kind!r}, 50)",
    )


def _collect_option(tile: str, item: str) -> tuple[str, str]:
    return (
        f"walk to a {tile} and hit it until it gives one {item}",
        f"yield from skills.collect({tile!r}, 1, 50)",
    )


@functools.cache
def _all_options() -> dict[str, tuple[str, str]]:
    from crafter import constants

    out = dict(_OPTION_BODIES)
    for tile in list(constants.collect) + ["cow", "zombie", "skeleton", "table", "furnace"]:
        out[f"walk_to_{tile}"] = _walk_option(tile)
    for item, tile in sources().items():
        if item in constants.items and item not in ("health", "food", "drink", "energy"):
            out[f"collect_{item}"] = _collect_option(tile, item)
    for item in constants.place:
        out[f"place_{item}"] = (
            f"place a {item} on a free tile in front (walking to one)",
            f"yield from skills.place({item!r}, 30)",
        )
    for item in constants.make:
        out[f"make_{item}"] = (
            f"walk next to the stations and make a {item}",
            f"yield from skills.make({item!r}, 40)",
        )
    return out


def option(name: str) -> str:
    """Source of the coded action ``name`` (a ``run(skills)`` of ≤ ~50 steps)."""
    description, body = _all_options()[name]
    return f'def run(skills):\n    """{description}"""\n    {body}\n'


OPTION_NAMES: tuple[str, ...] = ()
"""Every coded action's name (filled in below from Crafter's data)."""


def options_for(step: Step) -> list[tuple[str, str, str]]:
    """(name, description, source) of the coded actions for ``step``'s RL action space:
    walking to what the step hits, hitting, exploring, placing and making what it needs."""
    names = ["explore", "attack", "defend"]
    if step.kind == "collect":
        names.insert(0, f"walk_to_{step.source}")
        if step.requires:
            names.append("explore_mountain")
    if step.kind in ("place", "make"):
        for item in step.uses:
            tile = sources().get(item)
            if tile is not None:
                names.append(f"walk_to_{tile}")
                names.append(f"collect_{item}")
        for station in step.near:
            names.append(f"walk_to_{station}")
            names.append(f"place_{station}")
        names.append(f"{step.kind}_{step.item}")
    if step.kind == "achieve":
        if step.item == "sleep":
            names.append("sleep")
        elif step.item == "plant":
            names += ["collect_sapling", "place_plant", "walk_to_plant", "noop"]
        elif step.item in ("cow", "zombie", "skeleton"):
            names.insert(0, f"walk_to_{step.item}")
    if step.item in ("stone", "coal", "iron", "diamond") and "explore_mountain" not in names:
        names.append("explore_mountain")
    known = _all_options()
    seen = [n for n in dict.fromkeys(names) if n in known]
    return [(n, known[n][0], option(n)) for n in seen]


OPTION_NAMES = tuple(sorted(_all_options()))


def step_code(name: str, params: Params | None = None) -> str:
    """Source for the achievement step ``name`` (a shortcut for prompts and tests)."""
    return code_for(achievement_step(name), params)


NEED_MAX_STEPS = 300
"""Step cap of one run of a survival need."""


def survival_needs() -> list:
    """:func:`survival_stages` as the task planner takes them (``messages.task.Need``)."""
    from messages.task import Need, Stage, Subtask

    return [
        Need(
            stat=s.stat,
            below=float(s.below),
            stage=Stage(Subtask(s.name, s.reason, max_steps=NEED_MAX_STEPS), code=s.source),
            until=float(s.until),
        )
        for s in survival_stages()
    ]


def coded_stages(steps: list[Step], by_achievement: bool = False) -> list:
    """Coded stages for ``steps`` at the library's final quality, with the tests the
    planner gives them: the goal inventory when there is one, else the achievement
    (``by_achievement``: always the achievement). No survival code of their own: the
    task planner's needs keep the vitals up."""
    from messages.task import Stage, Subtask

    out = []
    for step in steps:
        goal = {} if by_achievement else {k: int(v) for k, v in step.goal.items()}
        subtask = Subtask(
            step.name,
            step.description,
            goal=goal,
            achievement="" if goal else step.achievement,
            max_steps=int(step.max_steps),
        )
        code = code_for(step, best_params(step, survive=False))
        out.append(Stage(subtask, code=code))
    return out
