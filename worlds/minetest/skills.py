"""The skill API in 3-D: what a coded policy may ask and do in a Minetest world.

The same shape as :mod:`skills.skills` for Crafter: a policy is a generator ``run(skills)``
yielding primitive action names, and the helpers are generators to use with
``yield from`` that return True when they reached their goal and False when they gave up::

    def run(skills):
        got = yield from skills.collect("default:tree", 2)
        if got:
            yield from skills.craft("default:wood", 2)

:class:`VoxelSkills` answers from what the agent has perceived: the current voxel window
and a map remembered from earlier windows, in coordinates from where the episode started
(x east, z north) and the altitude (y). Its helpers plan over that map by the body's own
movement rules, as the mod applies them: a step forward into two free nodes and then
a fall (of at most a few nodes, never into lava, never with the head under water), a
jump up one node onto the node in front (also out of water), quarter turns, and with
``tunnel(True)`` digging through what the hand or a carried tool digs (and with
``build(True)`` climbing on blocks it places). Unseen nodes count as solid. ``recipes``,
``ore_depths``, ``ore_for`` and ``mining_level`` answer from the game's own definitions.

Underground: ``descend`` digs a staircase down to an altitude, taking a stair only where
the window shows it safe (no liquid to dig into, a landing on solid ground within a safe
fall, never in lava or with the head under water); ``mine`` strip-mines at an ore's level
and digs the ore that comes into view; ``smelt`` crafts and places a furnace when none is
in reach. ``worlds/minetest/chain.py`` strings them into the diamond chain, as policy
source that :func:`run_voxel_code` runs in the sandbox.

Untrusted code reaches only public attributes (the sandbox refuses ``_`` names), so the
map and the planner's state live in ``_`` attributes and answers are fresh tuples/dicts.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

import sandbox
from messages.causes import EPISODE_DONE, POLICY_FINISHED, SUCCESS
from worlds.minetest.world import GameRules, NodeRules, VoxelObservation

Voxel = tuple[int, int, int]
"""(x east, y up, z north): x and z from where the episode started, y the altitude."""
Step = tuple[tuple[str, ...], Voxel | None, int]
"""One move of a plan: its actions, then where the feet are and the heading (an index
into HEADINGS) after them (None: where they were)."""

DEFAULT_PATIENCE = 300
"""Steps a helper may take before it gives up: crosses a few mapchunks and back."""
SAFE_FALL = 3
"""The planner drops at most this far: the mod's body takes no damage up to here."""
FRONTIER = 4
"""Steps of a plan towards unseen land walked before planning again with what came into
view on the way."""
SEARCH_LIMIT = 20000
"""States the planner expands at most (a window's worth of ground many times over)."""
HEAD_HORIZON = 20
"""Actions ahead :meth:`VoxelSkills.head_for` plans (a window's width of walking)."""
REACH_HORIZON = 80
"""Actions a plan to reach a node may take: a node further than that over the map seen
is as good as out of reach (and the search for a way there would cost seconds)."""
HEAD_STALLS = 6
"""Replans in a row that bring :meth:`VoxelSkills.head_for` no nearer before it stops."""
ORE_MARGIN = 4
"""Mine this far inside an ore's altitudes: the window reaches 4 levels over the feet."""
ORE_PATIENCE = 60
"""Steps spent reaching one ore seen in the window (a few nodes of tunnel) before the
search goes on without it."""
RELOCATE = 24
"""How far a search moves off, each time in a new heading, where no way down is safe."""
DEEPER = 4
"""Levels a strip mine goes down when its level holds no host rock or boxes it in."""
STUCK_LIMIT = 12
"""Moves in a row that bring a descent or a search no further before it tries a detour."""
DETOURS = 4
"""Detours a descent tries before it gives up: one tunnel along the level each way."""
DETOUR_LENGTH = 12
"""Nodes of a descent's detour: far enough to leave a ravine's or a pool's edge behind."""
FURNACE_REACH = 2
"""The mod smelts in a furnace within this many nodes of the feet (a box)."""
BUILD_COST = 6
"""What a plan counts for a block placed, beyond its two actions: walking round is
worth a few steps more than a block."""
BUILD_BLOCKS = ("default:dirt", "default:cobble")
"""What :meth:`VoxelSkills.build` climbs on: what digging soil and stone gives, soil first
(cobble goes into pickaxes and the furnace)."""
SURFACE_TRIES = 12
"""Swims up (a node each) before giving up on surfacing: breath lasts 10 steps."""
FALLING_REDIGS = 8
"""Digs of one spot before giving up on it: sand and gravel above drop into it again."""
STRIP = 24
"""Nodes of a strip mine's long legs; the short legs that join them are a window wide,
turning alternately right and left."""

# Facing (x, z) in the order turn_right goes: north, east, south, west.
HEADINGS: tuple[tuple[int, int], ...] = ((0, 1), (1, 0), (0, -1), (-1, 0))
DIG_ACTIONS: dict[str, tuple[int, int, int]] = {
    # action → (forward, up, …): where the dug node lies from the feet, in the facing.
    "dig": (1, 0, 0),
    "dig_high": (1, 1, 0),
    "dig_low": (1, -1, 0),
    "dig_up": (0, 2, 0),
    "dig_down": (0, -1, 0),
}


def _add(a: Voxel, b: Voxel) -> Voxel:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


class VoxelSkills:
    """What a coded policy may ask and do in a Minetest world; one episode of one world."""

    def __init__(
        self, obs: VoxelObservation, rules: NodeRules, game: GameRules | None = None
    ) -> None:
        self._rules = rules
        self._game = game if game is not None else GameRules(recipes={}, ores={})
        self._memory: dict[Voxel, str] = {}
        self._obs = obs
        self._steps = 0
        self._tunnel = False
        self._observe(obs)

    # ------------------------------------------------------------------ what it knows

    def position(self) -> Voxel:
        """Where the feet are: (x east, y altitude, z north)."""
        obs = self._obs
        return (obs.position[0], obs.altitude, -obs.position[1])

    def facing(self) -> tuple[int, int]:
        """The heading (x, z): (0, 1) north, (1, 0) east, (0, -1) south, (-1, 0) west."""
        fx, fy = self._obs.facing
        return (fx, -fy)

    def inventory(self) -> dict[str, int]:
        """Item → count carried (full names: ``default:wood``); the chain's items are
        always listed, at 0 when none is carried."""
        return dict(self._obs.inventory)

    def status(self) -> dict[str, float]:
        """``health`` (0–20) and ``breath`` (0–10: under water it runs down, then health)."""
        return dict(self._obs.status)

    def steps(self) -> int:
        """Primitive steps taken this episode."""
        return self._steps

    def node(self, x: int, y: int, z: int) -> str | None:
        """The remembered name of the node at (x, y, z); None if never seen."""
        return self._memory.get((x, y, z))

    def seen(self, name: str) -> tuple[Voxel, ...]:
        """Every remembered node called ``name``, nearest (straight-line) first."""
        here = np.array(self.position())
        found = [v for v, n in self._memory.items() if n == name]
        found.sort(key=lambda v: (float(np.sum((np.array(v) - here) ** 2)), v))
        return tuple(found)

    def nearest(self, name: str) -> Voxel | None:
        """The nearest remembered node called ``name``; None if none was seen."""
        found = self.seen(name)
        return found[0] if found else None

    def recipes(self, item: str) -> tuple[dict[str, Any], ...]:
        """The game's recipes for ``item``: each {"method": "normal" (craft) or "cooking"
        (smelt), "needs": {ingredient: n}, "makes": n}; an ingredient "group:wood" is
        any item of that group."""
        return tuple(
            {"method": r.method, "needs": r.needs(), "makes": r.count}
            for r in self._game.recipes.get(item, ())
        )

    def ore_depths(self, ore: str) -> tuple[tuple[int, int], ...]:
        """(lowest, highest) altitudes where mapgen scatters ``ore``, highest first."""
        return tuple((low, high) for low, high, _ in self._game.ores.get(ore, ()))

    # ------------------------------------------------------------------ planning

    def tunnel(self, on: bool = True, down: bool = True) -> bool:
        """Let plans dig through what the hand or a carried tool digs (leaves, soil, stone
        with a pickaxe), and (unless ``down`` is False) dig down under the feet; off by
        default. ``down`` False also keeps plans from dropping more than one node: without
        a pickaxe, a pit or a cave with stone walls may hold the body for good. Returns
        the new setting."""
        self._tunnel = bool(on)
        self._tunnel_down = bool(down)
        return self._tunnel

    def build(self, on: bool = True, below: int | None = None) -> bool:
        """Let plans climb by placing a carried block (soil first, then cobble) in front
        and jumping onto it, while the feet are under altitude ``below`` (None: anywhere);
        off by default. Returns the new setting."""
        self._build = bool(on)
        self._build_below = below
        return self._build

    def path_to(self, x: int, y: int, z: int) -> tuple[str, ...] | None:
        """The actions that bring the feet to (x, y, z) over remembered ground, fewest
        first; None when the map shows no way."""
        plan = self._plan(lambda pos, heading: pos == (x, y, z))
        return None if plan is None else _flat(plan)

    def reach_plan(self, x: int, y: int, z: int) -> tuple[str, ...] | None:
        """The actions that end with the node (x, y, z) dug: walking to a place from which
        a dig action reaches it, turning, then that dig action; None if there is none."""
        plan = self._reach((x, y, z))
        return None if plan is None else _flat(plan)

    # ------------------------------------------------------------------ helpers (generators)

    def walk_to(self, x: int, y: int, z: int, patience: int = DEFAULT_PATIENCE) -> Iterator[str]:
        """Walk until the feet are at (x, y, z), replanning as more is seen."""
        start = self._steps
        while self.position() != (x, y, z):
            plan = self._plan(lambda pos, heading: pos == (x, y, z))
            if not plan or self._steps - start >= patience:
                return False
            yield from self._follow(plan, patience - (self._steps - start))
        return True

    def dig_node(self, x: int, y: int, z: int, patience: int = DEFAULT_PATIENCE) -> Iterator[str]:
        """Walk within reach of the node at (x, y, z) and dig it; True once it is gone."""
        start = self._steps
        while self._steps - start < patience:
            if self.node(x, y, z) in (None, "air"):
                return self.node(x, y, z) == "air"
            plan = self._reach((x, y, z))
            if plan is None:
                return False
            done = yield from self._follow(plan, patience - (self._steps - start))
            if done and self.node(x, y, z) == (self._last_target or ""):
                # The dig did nothing (a better tool is needed, or the inventory is full).
                return False
        return False

    def collect(self, name: str, n: int = 1, patience: int = DEFAULT_PATIENCE) -> Iterator[str]:
        """Dig ``n`` remembered ``name`` nodes, nearest first (what they drop goes to the
        inventory); True on success."""
        start = self._steps
        dug = 0
        tried: set[Voxel] = set()
        while dug < n and self._steps - start < patience:
            targets = [v for v in self.seen(name) if v not in tried]
            if not targets:
                return False
            target = targets[0]
            tried.add(target)
            dug += yield from self.dig_node(*target, patience=patience - (self._steps - start))
        return dug >= n

    def explore(
        self, steps: int = 50, until: str | None = None, patience: int = DEFAULT_PATIENCE
    ) -> Iterator[str]:
        """Walk towards the nearest ground next to unseen land, for up to ``steps`` steps
        or until a node ``until`` has been seen; True when that node was seen (or, with
        no ``until``, when all the steps were walked)."""
        start = self._steps
        budget = min(steps, patience)
        while self._steps - start < budget:
            if until is not None and self.nearest(until) is not None:
                return True
            # Walking first: tunnelling towards unseen land would go underground.
            tunnel, self._tunnel = self._tunnel, False
            plan = self._plan(self._frontier)
            self._tunnel = tunnel
            if not plan and tunnel:
                plan = self._plan(self._frontier)
            if not plan:
                return False
            yield from self._follow(plan[:FRONTIER], budget - (self._steps - start))
        return until is None or self.nearest(until) is not None

    def head_for(
        self,
        x: int,
        z: int,
        until: str | None = None,
        patience: int = DEFAULT_PATIENCE,
    ) -> Iterator[str]:
        """Travel towards the column (x, z) at whatever height the land allows: each
        time the move, within a short horizon of the map seen, that ends nearest to it
        (tunnelling where :meth:`tunnel` allows). True once within 2 nodes of it, or once
        a node ``until`` has been seen; False when no move brings it nearer for a while
        or ``patience`` is spent."""
        start = self._steps
        best = None
        stalls = 0

        def distance(pos: Voxel) -> int:
            return abs(pos[0] - x) + abs(pos[2] - z)

        while (now_at := distance(self.position())) > 2:
            if until is not None and self.nearest(until) is not None:
                return True
            left = patience - (self._steps - start)
            if left <= 0 or stalls >= HEAD_STALLS:
                return False
            # Straight on where one move gets nearer (most land is open: no search).
            step = self._greedy(distance)
            if step is not None:
                yield from self._follow([step], left)
                if distance(self.position()) < now_at:
                    best = min(best, distance(self.position())) if best is not None else None
                    continue
            # Walking first (a small search over open land); digging only where walking
            # gets no nearer.
            tunnel, self._tunnel = self._tunnel, False
            plan = self._plan(None, score=distance, horizon=HEAD_HORIZON)
            self._tunnel = tunnel
            if tunnel and (not plan or distance(plan[-1][1] or self.position()) >= now_at):
                plan = self._plan(None, score=distance, horizon=HEAD_HORIZON // 2)
            if not plan:
                return False
            yield from self._follow(plan[: 2 * FRONTIER], left)
            now = distance(self.position())
            if best is None or now < best:
                best, stalls = now, 0
            else:
                stalls += 1
        return until is None or self.nearest(until) is not None

    def craft(self, item: str, n: int = 1) -> Iterator[str]:
        """Craft ``item`` ``n`` times by the game's recipes; True if every craft worked."""
        return (yield from self._repeat("craft_" + _short(item), item, n))

    def place(self, item: str, patience: int = 20) -> Iterator[str]:
        """Put one ``item`` (a node) in front at foot height, digging that spot free first
        if it holds something the carried tools dig, or turning to a free spot; True once
        it stands there."""
        if self._obs.inventory.get(item, 0) < 1:
            return False
        action = "place_" + _short(item)
        start = self._steps
        for _ in range(4):
            if self._steps - start >= patience:
                return False
            front = self._ahead(0)
            name = self.node(*front)
            if name is not None:  # a liquid gives way to what is placed in it
                if self._solid(front) and self._rules.diggable(name, self._tools()):
                    yield "dig"
                if not self._solid(front):
                    yield action
                    if self.node(*front) == item:
                        return True
            yield "turn_right"
        return False

    def smelt(self, item: str, n: int = 1) -> Iterator[str]:
        """Smelt ``item`` ``n`` times in a furnace near the agent, by the game's cooking
        recipe for it and with fuel from the inventory; without a furnace in reach, one is
        crafted (by the game's recipe) if none is carried, and placed. True if all worked."""
        if self._furnace_near() is None:
            furnace = self._furnace_item()
            if furnace is None:
                return False
            if self._obs.inventory.get(furnace, 0) < 1:
                if not (yield from self.craft(furnace)):
                    return False
            if not (yield from self.place(furnace)):
                return False
        return (yield from self._repeat("smelt_" + _short(item), item, n))

    def _repeat(self, action: str, item: str, n: int) -> Iterator[str]:
        """``action`` ``n`` times, each to add ``item``; True if every one did."""
        for _ in range(n):
            before = self._obs.inventory.get(item, 0)
            yield action
            if self._obs.inventory.get(item, 0) <= before:
                return False
        return True

    # ------------------------------------------------------------------ underground

    def ore_for(self, item: str) -> tuple[str, ...]:
        """The ore nodes that give ``item`` when dug, by the game's node definitions."""
        return tuple(sorted(n for n, d in self._game.drops.items() if d == item))

    def mining_level(self, item: str) -> int | None:
        """The altitude to search for ``item``'s ore at: a few nodes under the highest
        place mapgen scatters it that lies below the feet (so the whole window is inside
        it), or under the feet where the ore is scattered there already; None if it is
        not scattered below."""
        here = self.position()[1]
        tops = [
            high
            for ore in self.ore_for(item)
            for low, high in self.ore_depths(ore)
            if low < here - ORE_MARGIN
        ]
        if not tops:
            return None
        return min(here, max(tops)) - ORE_MARGIN

    def descend(self, y: int, patience: int = DEFAULT_PATIENCE) -> Iterator[str]:
        """Dig a staircase down until the feet are at altitude ``y`` or lower.

        Each stair is dug one node ahead and one down, and taken only when what the
        window shows makes it safe: the nodes to dig hold no liquid, the body would land
        (after at most a safe fall) on solid ground, not in lava and not with its head in
        water. Where the way ahead is not safe it turns to another heading, or goes to a
        spot near by from which a stair is safe; when that gets it no lower for a while it
        tunnels off along the level (a few times, each in a new heading) to try again
        further on; it gives up (False) when nothing around is safe or ``patience``
        steps are spent."""
        start = self._steps
        stuck = 0  # moves since the feet were last lower than ever before
        lowest = self.position()[1]
        detours = DETOURS
        while self.position()[1] > y:
            if self.position()[1] < lowest:
                lowest, stuck = self.position()[1], 0
            left = patience - (self._steps - start)
            if left <= 0:
                return False
            if stuck > STUCK_LIMIT:
                if not detours:
                    return False
                detours -= 1
                stuck = 0
                yield "turn_right"  # each detour in a new heading
                for _ in range(DETOUR_LENGTH):
                    heading = self._safe_heading("level")
                    if heading is None:
                        break
                    yield from self._stair(heading, "level", left)
                continue
            heading = self._safe_heading("down")
            if heading is not None:
                yield from self._stair(heading, "down", left)
                stuck += 1
                continue

            # No safe stair from here (water, a cave, lava around): go where one is, over
            # or through what the map shows, within a short way.
            here = self.position()[1]

            def stair_from(pos: Voxel, _heading: tuple[int, int], here: int = here) -> bool:
                # Not higher than here: a stair from up there would only lead back.
                return (
                    pos[1] <= here
                    and self._memory.get(pos) not in self._rules.liquid
                    and any(self._stair_safe(h, "down", pos) for h in HEADINGS)
                )

            tunnel, self._tunnel = self._tunnel, True
            plan = self._plan(stair_from, horizon=HEAD_HORIZON)
            self._tunnel = tunnel
            if plan:
                yield from self._follow(plan, left)
                stuck += 1
                continue
            heading = self._safe_heading("level")
            if heading is None:
                return False
            yield from self._stair(heading, "level", left)
            stuck += 1
        return True

    def mine(
        self,
        item: str,
        n: int = 1,
        level: int | None = None,
        patience: int = DEFAULT_PATIENCE,
    ) -> Iterator[str]:
        """Get ``n`` more ``item`` from its ore underground: go down to ``level`` (by
        default :meth:`mining_level`) by :meth:`descend`, then strip-mine along that level
        (legs of tunnel whose windows just overlap), and dig every ore of it that comes
        into view. True once ``n`` more are carried.

        Long because it is one generator whose loop state (the level, the leg of the strip,
        the nodes walked and the turns blocked) every branch reads and changes: split, each
        part would take all of it and hand it back."""
        ores = frozenset(self.ore_for(item))
        if not ores:
            return False
        want = self._obs.inventory.get(item, 0) + n
        if level is None:
            level = self.mining_level(item)
            if level is None:
                return False
        start = self._steps
        tunnel, self._tunnel = self._tunnel, True
        tried: set[Voxel] = set()
        visited: set[Voxel] = set()  # where the strips have been: never walked twice
        moves = [(RELOCATE * dx, RELOCATE * dz) for dx, dz in HEADINGS]
        hosts = frozenset(h for ore in ores for h in self._game.hosts.get(ore, ()))
        lowest = min((low for ore in ores for low, _ in self.ore_depths(ore)), default=level)
        # Strips one window's width apart: their windows just touch.
        width = self._obs.voxels.shape[2]
        legs = itertools.cycle(
            (
                (STRIP, "turn_right"),
                (width, "turn_right"),
                (STRIP, "turn_left"),
                (width, "turn_left"),
            )
        )
        leg, turn = next(legs)
        walked = 0
        blocked = 0
        try:
            while self._obs.inventory.get(item, 0) < want:
                left = patience - (self._steps - start)
                if left <= 0 or level < lowest:
                    return False
                target = self._ore_in_view(ores, tried)
                if target is not None:
                    tried.add(target)
                    yield from self.dig_node(*target, patience=min(left, ORE_PATIENCE))
                    continue
                if self.position()[1] > level:
                    if not (yield from self.descend(level, patience=left)):
                        # Water, caves or lava all round below here: try elsewhere.
                        if not moves:
                            return False
                        dx, dz = moves.pop(0)
                        x, _, z = self.position()
                        yield from self.head_for(x + dx, z + dz, patience=left)
                    continue
                if walked >= leg:
                    yield turn
                    leg, turn = next(legs)
                    walked = 0
                    continue
                if not self._host_in_view(hosts):
                    # No rock the ore grows in around here (desert stone, sand): deeper.
                    level -= DEEPER
                    continue
                visited.add(self.position())
                hx, hz = self.facing()
                fresh = self._ahead(0) not in visited
                if fresh and self._stair_safe((hx, hz), "level"):
                    moved = yield from self._stair(HEADINGS.index((hx, hz)), "level", left)
                    walked += 1
                    blocked = 0 if moved else blocked + 1
                elif blocked < 3:
                    # Lava, water, a drop, a node no tool digs or the old tunnel ahead:
                    # a new leg.
                    yield "turn_right"
                    walked = 0
                    blocked += 1
                else:
                    # Boxed in by hazards and old tunnels: strips on a new level below.
                    level -= DEEPER
                    blocked = 0
            return True
        finally:
            self._tunnel = tunnel

    # ------------------------------------------------------------------ internals

    _last_target: str | None = None
    _tunnel_down = True
    _build = False
    _build_below: int | None = None
    _plan_block: str | None = None
    _plan_tools: list[str] = []  # noqa: RUF012 (replaced, never mutated)

    def _tools(self) -> list[str]:
        return [item for item, count in self._obs.inventory.items() if count > 0]

    def _drowning(self) -> bool:
        x, y, z = self.position()
        return self._memory.get((x, y + 1, z)) in self._rules.drowning

    def _surface(self) -> Iterator[str]:
        """Swim (or dig) straight up until the head is out of the liquid."""
        for _ in range(SURFACE_TRIES):
            if not self._drowning():
                return True
            x, y, z = self.position()
            above = self._memory.get((x, y + 2, z))
            if above in self._rules.walkable:
                yield "dig_up"
            yield "jump"
        return not self._drowning()

    def _greedy(self, distance) -> Step | None:
        """One move (turning first if need be) straight towards where ``distance``
        shrinks, along the axis with further to go first; None when there is none."""
        pos = self.position()
        here = HEADINGS.index(self.facing())
        self._plan_tools = self._tools()
        now = distance(pos)
        order = sorted(
            range(4), key=lambda h: distance(_add(pos, (HEADINGS[h][0], 0, HEADINGS[h][1])))
        )
        for heading in order[:2]:
            for actions, land, _ in self._moves(pos, heading):
                if actions[-1] in ("forward", "jump") and distance(land) < now:
                    turns = (heading - here) % 4
                    turn = ("turn_right",) * turns if turns != 3 else ("turn_left",)
                    return (*turn, *actions), land, heading
        return None

    def _ahead(
        self, up: int, heading: tuple[int, int] | None = None, pos: Voxel | None = None
    ) -> Voxel:
        hx, hz = heading if heading is not None else self.facing()
        x, y, z = pos if pos is not None else self.position()
        return (x + hx, y + up, z + hz)

    def _furnace_item(self) -> str | None:
        """The furnace node the game's cooking needs: the item that the recipes of the
        furnace give (read from the rules, so a renamed furnace is found too)."""
        for name in self._game.recipes:
            if name.endswith(":furnace"):
                return name
        return None

    def _furnace_near(self) -> Voxel | None:
        """A remembered furnace within the mod's reach (a box 2 nodes around the feet)."""
        x, y, z = self.position()
        for dx, dy, dz in itertools.product(range(-FURNACE_REACH, FURNACE_REACH + 1), repeat=3):
            name = self._memory.get((x + dx, y + dy, z + dz))
            if name is not None and name.split(":", 1)[-1].startswith("furnace"):
                return (x + dx, y + dy, z + dz)
        return None

    def _host_in_view(self, hosts: frozenset[str]) -> bool:
        """Whether the window shows a node an ore is scattered in (True if unknown)."""
        if not hosts:
            return True
        obs = self._obs
        ids = [i for i, name in enumerate(obs.names) if name in hosts]
        return bool(ids) and bool(np.isin(obs.voxels, ids).any())

    def _ore_in_view(self, ores: frozenset[str], tried: set[Voxel]) -> Voxel | None:
        """The nearest node of ``ores`` in the current window not tried before."""
        obs = self._obs
        ids = [i for i, name in enumerate(obs.names) if name in ores]
        if not ids:
            return None
        levels, rows, cols = np.nonzero(np.isin(obs.voxels, ids))
        x0, y0, z0 = self.position()
        found = []
        for level, row, col in zip(levels, rows, cols, strict=True):
            v = (
                x0 + int(col) - obs.voxels.shape[2] // 2,
                y0 + int(level) - obs.below,
                z0 + obs.voxels.shape[1] // 2 - int(row),
            )
            if v not in tried:
                found.append((abs(v[0] - x0) + abs(v[1] - y0) + abs(v[2] - z0), v))
        return min(found)[1] if found else None

    def _stair_nodes(
        self, heading: tuple[int, int], kind: str, pos: Voxel | None = None
    ) -> tuple[tuple[Voxel, str], ...]:
        """The nodes a stair (one ahead and one down) or a level step clears, with the dig
        action for each, in the order dug: head height first, so that a falling node
        above drops before the body goes in."""
        nodes = (
            (self._ahead(1, heading, pos), "dig_high"),
            (self._ahead(0, heading, pos), "dig"),
        )
        if kind == "down":
            nodes += ((self._ahead(-1, heading, pos), "dig_low"),)
        return nodes

    def _stair_safe(self, heading: tuple[int, int], kind: str, pos: Voxel | None = None) -> bool:
        """Whether the map shows that stepping ``kind`` towards ``heading`` (from ``pos``,
        by default the feet) is safe."""
        rules = self._rules
        tools = self._tools()
        nodes = self._stair_nodes(heading, kind, pos)
        for v, _ in nodes:
            name = self._memory.get(v)
            if name is None or name in rules.liquid or name in rules.damaging:
                return False
            if name in rules.walkable and not rules.diggable(name, tools):
                return False
        land = self._land(nodes[1][0], frozenset(v for v, _ in nodes))
        if land is None:
            return False
        # Never onto a liquid (the body floats there, a pool is a lake or lava below).
        return self._memory.get(land) not in rules.liquid

    def _safe_heading(self, kind: str) -> int | None:
        """The first safe heading for a ``kind`` step: ahead, right, left, then back."""
        here = HEADINGS.index(self.facing())
        for turn in (0, 1, 3, 2):
            heading = (here + turn) % 4
            if self._stair_safe(HEADINGS[heading], kind):
                return heading
        return None

    def _stair(self, heading: int, kind: str, patience: int) -> Iterator[str]:
        """Turn to ``heading``, dig a stair (or a level step) and take it; True when the
        feet moved. Each dig is checked again against what it uncovered."""
        start = self._steps
        here = HEADINGS.index(self.facing())
        turns = (heading - here) % 4
        for _ in range(turns if turns != 3 else 1):
            yield "turn_right" if turns != 3 else "turn_left"
        before = self.position()
        for v, action in self._stair_nodes(HEADINGS[heading], kind):
            for _ in range(FALLING_REDIGS):
                if not self._solid(v) or self._steps - start >= patience:
                    break
                if not self._stair_safe(HEADINGS[heading], kind):
                    return False
                yield action
            if self._solid(v):
                return False
        if not self._stair_safe(HEADINGS[heading], kind):
            return False
        yield "forward"
        return self.position() != before

    def _observe(self, obs: VoxelObservation, info: Mapping[str, Any] | None = None) -> None:
        """The driver's hook: remember the new window."""
        if info is not None:
            self._steps += 1
        self._obs = obs
        levels, rows, cols = obs.voxels.shape
        x0, y0, z0 = self.position()
        base = (x0 - cols // 2, y0 - obs.below, z0 + rows // 2)
        names = obs.names
        memory = self._memory
        for level in range(levels):
            plane = obs.voxels[level]
            y = base[1] + level
            for row in range(rows):
                z = base[2] - row
                line = plane[row]
                for col in range(cols):
                    memory[(base[0] + col, y, z)] = names[line[col]]

    def _frontier(self, pos: Voxel, heading: tuple[int, int]) -> bool:
        """Whether the window from ``pos`` would show ground never seen: a node just
        beyond the window's reach, at foot height, is unknown."""
        if pos == self.position():
            return False
        reach = self._obs.voxels.shape[2] // 2 + 1
        for dx, dz in HEADINGS:
            if (pos[0] + reach * dx, pos[1], pos[2] + reach * dz) not in self._memory:
                return True
        return False

    def _solid(self, v: Voxel) -> bool:
        name = self._memory.get(v)
        return name is None or name in self._rules.walkable

    def _land(self, v: Voxel, dug: frozenset[Voxel] = frozenset()) -> Voxel | None:
        """Where the body comes to rest from ``v`` (nodes in ``dug`` count as air); None
        if that is unknown or unsafe."""
        rules = self._rules

        def name(at: Voxel) -> str | None:
            return "air" if at in dug else self._memory.get(at)

        # Without digging down, drop no further than a jump climbs back.
        for _ in range((SAFE_FALL if self._tunnel_down else 1) + 1):
            here = name(v)
            if here is None or here in rules.damaging:
                return None
            head = name((v[0], v[1] + 1, v[2]))
            if head is None or head in rules.damaging or head in rules.drowning:
                return None
            if here in rules.liquid:
                return v  # it floats, head above the surface
            below = (v[0], v[1] - 1, v[2])
            under = name(below)
            if under is None:
                return None
            if under in rules.walkable:
                return v
            v = below
        return None

    def _clear(self, nodes: tuple[tuple[Voxel, str], ...]) -> tuple[str, ...] | None:
        """The dig actions that clear ``nodes`` ((node, action) pairs) for the body to pass;
        None when one is solid and may not or cannot be dug."""
        digs = []
        tools = self._plan_tools
        for v, action in nodes:
            if not self._solid(v):
                continue
            name = self._memory.get(v)
            if not self._tunnel or name is None or not self._rules.diggable(name, tools):
                return None
            digs.append(action)
        return tuple(digs)

    def _moves(self, pos: Voxel, heading: int) -> Iterator[Step]:
        """Every step the body can take from (pos, heading): the actions, then where it is
        and which way it faces after them."""
        hx, hz = HEADINGS[heading]
        yield ("turn_right",), pos, (heading + 1) % 4
        yield ("turn_left",), pos, (heading + 3) % 4
        ahead = (pos[0] + hx, pos[1], pos[2] + hz)
        digs = self._clear(((ahead, "dig"), (_add(ahead, (0, 1, 0)), "dig_high")))
        if digs is not None:
            land = self._land(ahead, frozenset((ahead, _add(ahead, (0, 1, 0)))))
            if land is not None:
                yield (*digs, "forward"), land, heading
        # A jump needs ground to push off from, or water to climb out of.
        if self._solid(_add(pos, (0, -1, 0))) or self._memory.get(pos) in self._rules.liquid:
            up = _add(ahead, (0, 1, 0))
            if not self._solid(_add(up, (0, 1, 0))):  # too high to dig from here
                above = _add(pos, (0, 2, 0))
                digs = self._clear(((above, "dig_up"), (up, "dig_high")))
                if digs is not None:
                    land = self._land(up, frozenset((above, up)))
                    if land is not None:
                        yield (*digs, "jump"), land, heading
        block = self._plan_block
        ceiling = self._build_below
        if (
            block is not None
            and (ceiling is None or pos[1] < ceiling)
            and self._solid(_add(pos, (0, -1, 0)))
        ):
            # Place a block in front and jump onto it: up a wall or out of a pit that
            # the hand cannot dig through (stone), one node a time.
            up = _add(ahead, (0, 1, 0))
            name = self._memory.get(ahead)
            clear = (up, _add(up, (0, 1, 0)), _add(pos, (0, 2, 0)))
            if (
                name is not None
                and name not in self._rules.liquid
                and not self._solid(ahead)
                and not any(self._solid(v) for v in clear)
                and self._memory.get(_add(up, (0, 1, 0))) not in self._rules.drowning
            ):
                yield ("place_" + _short(block), "jump"), up, heading
        if self._tunnel and self._tunnel_down:
            below = _add(pos, (0, -1, 0))
            if self._clear(((below, "dig_down"),)):
                land = self._land(below, frozenset((below,)))
                if land is not None:
                    yield ("dig_down",), land, heading

    def _plan(self, goal, score=None, horizon: int = 0) -> list[Step] | None:
        """The fewest actions (Dijkstra over steps of several actions) from here to a
        state where ``goal(pos, heading)`` holds. With ``score(pos)`` instead: the plan,
        within ``horizon`` actions, to the state of least score (then fewest actions)."""
        start = (self.position(), HEADINGS.index(self.facing()))
        if goal is not None and goal(start[0], HEADINGS[start[1]]):
            return []
        self._plan_tools = self._tools()  # what digs is fixed while planning
        carried = self._obs.inventory
        self._plan_block = next(
            (b for b in BUILD_BLOCKS if self._build and carried.get(b, 0) > 0), None
        )
        best = {start: 0}
        parents: dict[tuple[Voxel, int], tuple[tuple[Voxel, int], Step]] = {}
        queue = [(0, 0, start)]
        order = itertools.count(1)
        chosen = (score(start[0]), 0, start) if score is not None else None

        def path(state):
            steps = []
            while state != start:
                state, step = parents[state]
                steps.append(step)
            return steps[::-1]

        while queue and len(best) < SEARCH_LIMIT:
            cost, _, state = heapq.heappop(queue)
            if cost > best[state]:
                continue
            if horizon and cost > horizon:
                break
            if score is not None:
                chosen = min(chosen, (score(state[0]), cost, state))
                goal_met = False
            else:
                goal_met = state != start and goal(state[0], HEADINGS[state[1]])
            if goal_met:
                return path(state)
            for step in self._moves(*state):
                actions, pos, heading = step
                nxt = (pos, heading)
                total = cost + len(actions)
                if actions[0].startswith("place_"):
                    total += BUILD_COST  # blocks run out: climb only where it pays
                if total < best.get(nxt, total + 1):
                    best[nxt] = total
                    parents[nxt] = (state, step)
                    heapq.heappush(queue, (total, next(order), nxt))
        if chosen is not None:
            return path(chosen[2])
        return None

    def _reach(self, target: Voxel) -> list[Step] | None:
        """A plan that ends with ``target`` dug (see :meth:`reach_plan`)."""

        def reaches(pos: Voxel, heading: tuple[int, int]) -> str | None:
            for action, (ahead, up, _) in DIG_ACTIONS.items():
                spot = (pos[0] + ahead * heading[0], pos[1] + up, pos[2] + ahead * heading[1])
                if spot == target:
                    return action
            return None

        plan = self._plan(
            lambda pos, heading: reaches(pos, heading) is not None, horizon=REACH_HORIZON
        )
        if plan is None:
            return None
        if plan:
            _, pos, heading = plan[-1]
        else:
            pos, heading = self.position(), HEADINGS.index(self.facing())
        # The dig leaves the body where it is (unless it digs the ground away: dig_down).
        return [*plan, ((reaches(pos, HEADINGS[heading]),), None, heading)]

    def _follow(self, plan: list[Step], patience: int) -> Iterator[str]:
        """Yield ``plan``'s actions while the world does what the map predicted; False
        as soon as it does not (the caller replans with what is now seen)."""
        start = self._steps
        prev_place: Voxel | None = None
        for actions, pos, heading in plan:
            if self._drowning():
                # The map was wrong about the water here: up for air, then replan.
                yield from self._surface()
                return False
            for action in actions:
                if self._steps - start >= patience:
                    return False
                if prev_place is not None:
                    # Never jump towards a block that did not get placed (none left).
                    if not self._solid(prev_place):
                        return False
                    prev_place = None
                if action.startswith("place_"):
                    prev_place = self._ahead(0)
                if action in DIG_ACTIONS:
                    ahead, up, _ = DIG_ACTIONS[action]
                    hx, hz = self.facing()
                    self._last_target = self.node(
                        *_add(self.position(), (ahead * hx, up, ahead * hz))
                    )
                yield action
            if pos is not None and (self.position(), self.facing()) != (pos, HEADINGS[heading]):
                return False
        return True


def _flat(plan: list[Step]) -> tuple[str, ...]:
    return tuple(action for actions, _, _ in plan for action in actions)


def _short(item: str) -> str:
    return item.split(":", 1)[1] if item.startswith("default:") else item.replace(":", "_")


def run_voxel_policy(
    world,
    policy,
    max_steps: int = 500,
    *,
    seed: int | None = None,
    inventory: Mapping[str, int] | None = None,
) -> dict:
    """Reset ``world`` (carrying ``inventory`` at the start, to run one step of a chain
    from the state it needs) and run trusted ``policy(skills)`` in-process for at most
    ``max_steps`` actions (tests' own policies, closures that record what they saw; policy
    source, the chain's templates included, goes through the sandbox: :func:`run_voxel_code`).
    Returns the steps taken, whether the policy returned True, the final inventory,
    vitals and position, and how long the reset took."""
    started = time.perf_counter()
    obs = world.reset(seed, inventory=inventory)
    reset_s = time.perf_counter() - started
    skills = VoxelSkills(obs, world.node_rules, world.game_rules)
    actions = policy(skills)
    valid = frozenset(world.action_names)
    steps, result = 0, None
    try:
        action = next(actions)
        while steps < max_steps:
            if action not in valid:
                raise ValueError(f"not an action name: {action!r:.80}")
            obs, _, done, info = world.step(action)
            steps += 1
            skills._observe(obs, info)
            if done:
                break
            action = actions.send(None)
    except StopIteration as stop:
        result = stop.value
    return {
        "steps": steps,
        "success": result is True,
        "inventory": skills.inventory(),
        "status": skills.status(),
        "position": skills.position(),
        "reset_s": reset_s,
    }


CODE_WALL_S = 600.0
"""Wall-clock budget of :func:`run_voxel_code` by default: the whole chain (about 10,000
steps at a few hundred a second, its planning included) in a fraction of it."""


def run_voxel_code(
    world,
    source: str,
    max_steps: int = 500,
    *,
    seed: int | None = None,
    inventory: Mapping[str, int] | None = None,
    wall_s: float = CODE_WALL_S,
) -> dict:
    """Reset ``world`` (carrying ``inventory`` at the start) and run policy ``source``
    (defining ``run(skills)``) in the sandbox for at most ``max_steps`` actions, as an
    environment actor's runner runs code: compiled by :func:`sandbox.compile_code`,
    driven by :func:`sandbox.run_policy` over a read-only proxy of the skills, under
    ``wall_s`` for loading, the code and the world's steps together. Raises
    :class:`sandbox.SandboxError` for source the sandbox refuses (nothing runs then).

    Returns what :func:`run_voxel_policy` does (success: the policy returned True) and
    the runner's ``cause`` with its ``detail`` and ``line`` (success, the sandbox's
    failure, the episode's end, or the policy's return without success), what the code
    printed (``output``) and the wall time of the run (``wall_s``, the reset excluded).

    The skills plan in host code, outside the sandbox's meter: a long plan inside one
    call (up to ~2 s on the development seeds) counts only against ``wall_s``, and of the
    per-call limits only the memory budget applies (a plan grows the process by a few
    MiB, the budget is 512 MiB). The guards cost ~0.1-0.2 ms a step, mostly the resident
    memory read as each call into the code is armed, against 5-10 ms a step of the world
    and the planning."""
    compiled = sandbox.compile_code(source, filename="<minetest policy>")
    started = time.perf_counter()
    obs = world.reset(seed, inventory=inventory)
    reset_s = time.perf_counter() - started
    skills = VoxelSkills(obs, world.node_rules, world.game_rules)

    def step(action: str) -> bool:
        obs, _, done, info = world.step(action)
        skills._observe(obs, info)
        return bool(done)

    outcome = sandbox.run_policy(
        compiled,
        skills,
        step,
        max_steps=max_steps,
        wall_s=wall_s,
        allowed_actions=world.action_names,
    )
    success = outcome.returned is True
    failure = outcome.failure
    if success:
        cause, detail, line = SUCCESS, "", 0
    elif failure is not None:
        cause, detail, line = failure.cause, failure.detail, failure.line or 0
    elif outcome.episode_done:
        cause, detail, line = (
            EPISODE_DONE,
            "the episode ended (the body died or its length ran out)",
            0,
        )
    else:
        cause, detail, line = POLICY_FINISHED, "the policy returned without success", 0
    return {
        "steps": outcome.steps,
        "success": success,
        "cause": cause,
        "detail": detail,
        "line": line,
        "output": outcome.output,
        "inventory": skills.inventory(),
        "status": skills.status(),
        "position": skills.position(),
        "reset_s": reset_s,
        "wall_s": outcome.wall_s,
    }
