"""A planner over Crafter's recipe data: the offline slow agent's knowledge.

Everything here is derived from Crafter's own ``data.yaml`` (``crafter.constants``):
which tile gives which item and with which tool (``collect``), what placing a station
uses (``place``) and what making a tool uses and needs nearby (``make``). Nothing about
a recipe is written down twice.

- :func:`chain` — the ordered :class:`Step` list that obtains an item or achievement,
  by backward search over the requirements (tools to collect, materials consumed,
  stations nearby), with consumed materials aggregated over the whole chain.
- :func:`achievement_step` — a step for each of Crafter's 22 achievements;
  :func:`curriculum` orders them all, prerequisites first.
- :func:`describe` — the steps as JSON-able dicts, for prompts.

Success of every step is an achievement (sticky: it happens once and stays counted), so
a composed policy can skip the steps already done.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from typing import Any

STEP_KINDS = ("collect", "place", "make", "achieve")

# Steps a stage may take, by kind. A collect step's cap grows with the tool tier its
# tile needs (no tool: trees and water are everywhere; each tier's material is rarer and
# deeper in the mountains): TIER_STEPS[tier] plus PER_UNIT per unit to gather.
TIER_STEPS = (150, 400, 1200, 3000, 5000)
PER_UNIT = 40
# A stage that places or makes something is short, but may include a night walled in
# (~120 steps) when its code keeps the vitals up.
PLACE_STEPS = 300
MAKE_STEPS = 300

# Achievements that are not "collect X / place X / make X": what 'do' or 'sleep' aims
# at, where to find it, and what must come before. The game's rules (objects.py) are
# behaviour, not data, so this is the one table written by hand.
_OTHER_ACHIEVEMENTS: dict[str, dict[str, Any]] = {
    "eat_cow": {
        "item": "cow",
        "depends": (),
        "max_steps": 400,
        "description": "Find a cow on the grassland and hit it until it is eaten (food +6).",
    },
    "defeat_zombie": {
        "item": "zombie",
        "depends": (),
        "max_steps": 800,
        "description": "Find a zombie (grassland, mostly at night) and hit it until it dies.",
    },
    "defeat_skeleton": {
        "item": "skeleton",
        "depends": ("make_wood_pickaxe",),
        "max_steps": 1500,
        "description": "Find a skeleton in the dark tunnels inside mountains (dig in with "
        "a pickaxe) and hit it until it dies; it shoots arrows from a distance.",
    },
    "eat_plant": {
        "item": "plant",
        "depends": ("place_plant", "collect_stone"),
        "max_steps": 1500,
        "description": "Eat a ripe plant: plant a sapling and wall its sides in with "
        "stone (a cow or zombie next to it eats it), stay near while it ripens (a few "
        "hundred steps; it grows only while the player is close), then open a side and "
        "hit it.",
    },
    "wake_up": {
        "item": "sleep",
        "depends": (),
        "max_steps": 600,
        "description": "Sleep when energy is below its maximum and wake up when it is "
        "restored; wall yourself in with stone first if you can (zombies hit sleepers "
        "hard).",
    },
}


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """One stage of a plan: obtain an item or an achievement."""

    name: str
    """E.g. collect_wood, place_table, make_wood_pickaxe, eat_cow."""
    kind: str
    """collect | place | make | achieve."""
    item: str
    """What the step is about: wood, table, wood_pickaxe, diamond, cow, sleep."""
    goal: dict[str, int]
    """Inventory the step should end with (the chain's total need); may be empty."""
    achievement: str
    """The Crafter achievement that means success (sticky: counts once)."""
    depends: tuple[str, ...]
    """Names of steps that must come before."""
    description: str
    """One or two sentences for prompts."""
    max_steps: int
    """A sensible step cap for this stage alone."""
    source: str = ""
    """For collect steps: the tile to 'do' on (tree for wood, water for drink)."""
    requires: dict[str, int] = dataclasses.field(default_factory=dict)
    """Tools that must be held (collect) — not consumed."""
    uses: dict[str, int] = dataclasses.field(default_factory=dict)
    """Items consumed by one placing/making."""
    near: tuple[str, ...] = ()
    """Stations that must be next to the player (make)."""


# ---------------------------------------------------------------------- the data


@functools.cache
def _data() -> tuple[Mapping, Mapping, Mapping, tuple[str, ...]]:
    from crafter import constants

    return constants.collect, constants.place, constants.make, tuple(constants.achievements)


def achievements() -> tuple[str, ...]:
    """Crafter's achievement names, from its data."""
    return _data()[3]


def sources() -> dict[str, str]:
    """Item → the tile that gives it when hit (wood → tree, drink → water)."""
    collect = _data()[0]
    out: dict[str, str] = {}
    for tile, rule in collect.items():
        for item in rule.get("receive", {}):
            out.setdefault(item, tile)
    return out


def _a(name: str) -> str:
    return ("an " if name[:1] in "aeiou" else "a ") + name


def _tier(tile: str, seen: frozenset[str] = frozenset()) -> int:
    """How many tools deep a tile is: tree 0, stone 1, iron 2, diamond 3."""
    collect, _, make, _ = _data()
    tools = collect.get(tile, {}).get("require", {})
    if not tools or tile in seen:
        return 0
    deepest = 0
    for tool in tools:
        for material in make.get(tool, {}).get("uses", {}):
            source = sources().get(material)
            if source is not None:
                deepest = max(deepest, _tier(source, seen | {tile}))
    return deepest + 1


def _base_step(item: str, kind: str | None = None) -> Step:
    """The step that obtains one ``item`` (inventory item, station, or achievement);
    ``kind`` (collect/place/make) picks the way when there are several (stone)."""
    collect, place, make, names = _data()
    if kind is None:
        kind = (
            "make" if item in make
            else "collect" if item in sources()
            else "place" if item in place
            else "achieve"
        )  # fmt: skip
    if kind == "make" and item in make:
        rule = make[item]
        uses = dict(rule.get("uses", {}))
        near = tuple(rule.get("nearby", ()))
        deps = [_producer(m) for m in uses] + [_producer(s) for s in near]
        what = ", ".join(f"{n} {m}" for m, n in uses.items()) or "nothing"
        where = " and a ".join(near)
        return Step(
            name=f"make_{item}",
            kind="make",
            item=item,
            goal={item: int(rule.get("gives", 1))},
            achievement=f"make_{item}",
            depends=tuple(dict.fromkeys(deps)),
            description=f"Make {_a(item)} from {what}"
            + (f", standing next to {_a(where)}." if where else "."),
            max_steps=MAKE_STEPS,
            uses=uses,
            near=near,
        )
    if kind == "place" and item in place:
        rule = place[item]
        uses = dict(rule.get("uses", {}))
        near = tuple(rule.get("nearby", ()))
        deps = [_producer(m) for m in uses] + [_producer(s) for s in near]
        what = ", ".join(f"{n} {m}" for m, n in uses.items()) or "nothing"
        return Step(
            name=f"place_{item}",
            kind="place",
            item=item,
            goal={},
            achievement=f"place_{item}",
            depends=tuple(dict.fromkeys(deps)),
            description=f"Place {_a(item)} (uses {what}) on a free "
            f"{'/'.join(rule.get('where', ()))} tile in front of you.",
            max_steps=PLACE_STEPS,
            uses=uses,
            near=near,
        )
    source = sources().get(item)
    if kind == "collect" and source is not None:
        rule = collect[source]
        tools = dict(rule.get("require", {}))
        deps = [_producer(t) for t in tools]
        tier = _tier(source)
        chance = rule.get("probability", 1)
        note = f" (it gives with probability {chance})" if chance < 1 else ""
        need = " holding " + " and ".join(_a(t) for t in tools) if tools else ""
        inventory_item = item not in ("health", "food", "drink", "energy")
        return Step(
            name=f"collect_{item}",
            kind="collect",
            item=item,
            goal={item: 1} if inventory_item else {},
            achievement=f"collect_{item}",
            depends=tuple(deps),
            description=f"Collect {item} by facing {_a(source)} and hitting it{need}{note}.",
            max_steps=TIER_STEPS[min(tier, len(TIER_STEPS) - 1)]
            + (PER_UNIT if inventory_item else 0),
            source=source,
            requires=tools,
        )
    for name, other in _OTHER_ACHIEVEMENTS.items():
        if other["item"] == item and name in names:
            return achievement_step(name)
    raise KeyError(f"nothing in Crafter's data gives {item!r}")


def _producer(item: str) -> str:
    """Name of the step that obtains ``item``."""
    return _base_step(item).name


@functools.cache
def _steps_by_name() -> dict[str, Step]:
    """Every step reachable from the data, by name (the 22 achievements' steps)."""
    out: dict[str, Step] = {}
    for name in achievements():
        step = _achievement_base(name)
        out[step.name] = step
    return out


def _achievement_base(name: str) -> Step:
    if name in _OTHER_ACHIEVEMENTS:
        other = _OTHER_ACHIEVEMENTS[name]
        return Step(
            name=name,
            kind="achieve",
            item=other["item"],
            goal={},
            achievement=name,
            depends=tuple(other["depends"]),
            description=other["description"],
            max_steps=other["max_steps"],
        )
    kind, _, item = name.partition("_")
    if kind in ("collect", "place", "make"):
        return _base_step(item, kind)
    raise KeyError(f"unknown achievement {name!r}")


def achievement_step(name: str) -> Step:
    """The step whose success is achievement ``name`` (any of Crafter's 22)."""
    if name not in achievements():
        raise KeyError(f"{name!r} is not a Crafter achievement")
    return _steps_by_name()[name]


# ---------------------------------------------------------------------- planning


def _closure(name: str) -> frozenset[str]:
    """``name`` and every step it depends on, transitively."""
    steps = _steps_by_name()
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        todo.extend(steps[current].depends)
    return frozenset(seen)


def _order(names: Iterable[str], targets: Iterable[str]) -> list[str]:
    """Topological order of ``names`` (closed under depends): among the steps ready to
    run, first the one with the longest dependency path to a target (the critical path
    of the plan), then the one with fewer prerequisites, then by name."""
    steps = _steps_by_name()
    names = set(names)
    users: dict[str, set[str]] = {n: set() for n in names}
    for n in names:
        for dep in steps[n].depends:
            users[dep].add(n)

    @functools.cache
    def depth(n: str) -> int:  # longest path from n to a step nobody needs
        return max((1 + depth(u) for u in users[n]), default=0)

    done: list[str] = []
    remaining = set(names)
    while remaining:
        ready = [n for n in remaining if all(d in done for d in steps[n].depends)]
        ready.sort(key=lambda n: (-depth(n), len(_closure(n)), n))
        done.append(ready[0])
        remaining.discard(ready[0])
    return done


def _normalise(target: str) -> str:
    """A step name for ``target``: an achievement name or an item's producer."""
    if target in achievements():
        return achievement_step(target).name
    return _producer(target)


def chain(target: str) -> list[Step]:
    """The ordered steps that obtain ``target`` (an item such as 'diamond', or an
    achievement such as 'collect_diamond' / 'make_iron_pickaxe').

    Backward search over the requirements: the tools a collect requires, the materials
    a place/make uses, the stations a make needs nearby; each station is placed once.
    Collect steps' goals are the chain's total need of their material (the table's wood
    plus every tool's wood, …), so gathering once serves every later step.
    """
    final = _normalise(target)
    names = _closure(final)
    order = _order(names, [final])
    steps = _steps_by_name()
    need: dict[str, int] = {}
    for name in order:
        for material, n in steps[name].uses.items():
            need[material] = need.get(material, 0) + n
    out = []
    for name in order:
        step = steps[name]
        if step.kind == "collect" and step.goal and step.item in need:
            total = max(need[step.item], step.goal.get(step.item, 0))
            extra = (total - 1) * PER_UNIT
            step = dataclasses.replace(
                step,
                goal={step.item: total},
                max_steps=step.max_steps + extra,
                description=step.description + f" Gather {total} for the steps after.",
            )
        out.append(step)
    return out


LAST = frozenset({"defeat_skeleton", "eat_plant"})
"""Achievements the curriculum leaves to the end (dangerous or slow to wait for)."""

FIRST = ("collect_stone", "make_wood_sword", "make_stone_sword")
"""Achievements the curriculum takes first, with what they need: a pickaxe and stone
before the first night (the night's shelter is a nook walled in with stone, dug with
the pickaxe) and a sword before the fights."""


def curriculum() -> list[Step]:
    """All 22 achievements' steps in one order for an all-achievements run:
    prerequisites first, the :data:`FIRST` ones (tools, stone and swords) before the
    rest, easy before hard, the :data:`LAST` ones at the end."""
    steps = _steps_by_name()
    order = _order(steps, steps)
    # Without a single target the critical path ranks every leaf alike; prefer the
    # steps with fewer prerequisites (the easy ones) as long as dependencies allow —
    # after the FIRST ones: an episode that spends its first day on saplings, water and
    # zombies meets the first night with no pickaxe, so no stone to wall itself in (on
    # development worlds 9,000,000+, a third of the episodes died then).
    # Hunting skeletons in the dark tunnels and guarding a sapling for hundreds of steps
    # risk the episode or stall it: they come after everything else.
    first = frozenset().union(*(_closure(n) for n in FIRST))
    done: list[str] = []
    remaining = set(order)
    while remaining:
        ready = [n for n in remaining if all(d in done for d in steps[n].depends)]
        ready.sort(key=lambda n: (n in LAST, n not in first, len(_closure(n)), order.index(n)))
        done.append(ready[0])
        remaining.discard(ready[0])
    return [steps[n] for n in done]


def describe(steps: Iterable[Step]) -> list[dict[str, Any]]:
    """The steps as JSON-able dicts (for prompts and messages)."""
    out = []
    for step in steps:
        entry: dict[str, Any] = {
            "name": step.name,
            "kind": step.kind,
            "item": step.item,
            "goal": dict(step.goal),
            "achievement": step.achievement,
            "depends": list(step.depends),
            "description": step.description,
            "max_steps": step.max_steps,
        }
        if step.source:
            entry["source"] = step.source
        if step.requires:
            entry["requires"] = dict(step.requires)
        if step.uses:
            entry["uses"] = dict(step.uses)
        if step.near:
            entry["near"] = list(step.near)
        out.append(entry)
    return out
