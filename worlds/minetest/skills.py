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
``tunnel(True)`` digging through what the hand or a carried tool digs. Unseen nodes count
as solid. ``recipes`` and ``ore_depths`` answer from the game's own definitions.

Untrusted code reaches only public attributes (the sandbox refuses ``_`` names), so the
map and the planner's state live in ``_`` attributes and answers are fresh tuples/dicts.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

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
        return dict(self._obs.inventory)

    def status(self) -> dict[str, float]:
        return dict(self._obs.status)

    def steps(self) -> int:
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

    def tunnel(self, on: bool = True) -> bool:
        """Let plans dig through what the hand or a carried tool digs (leaves, soil, stone
        with a pickaxe), and dig down; off by default. Returns the new setting."""
        self._tunnel = bool(on)
        return self._tunnel

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

    def craft(self, item: str, n: int = 1) -> Iterator[str]:
        """Craft ``item`` ``n`` times by the game's recipes; True if every craft worked."""
        action = "craft_" + _short(item)
        for _ in range(n):
            before = self._obs.inventory.get(item, 0)
            yield action
            if self._obs.inventory.get(item, 0) <= before:
                return False
        return True

    def smelt(self, item: str, n: int = 1) -> Iterator[str]:
        """Smelt ``item`` ``n`` times in a furnace near the agent; True if all worked."""
        action = "smelt_" + _short(item)
        for _ in range(n):
            before = self._obs.inventory.get(item, 0)
            yield action
            if self._obs.inventory.get(item, 0) <= before:
                return False
        return True

    # ------------------------------------------------------------------ internals

    _last_target: str | None = None

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

        for _ in range(SAFE_FALL + 1):
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
        tools = [item for item, count in self._obs.inventory.items() if count > 0]
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
        if self._tunnel:
            below = _add(pos, (0, -1, 0))
            if self._clear(((below, "dig_down"),)):
                land = self._land(below, frozenset((below,)))
                if land is not None:
                    yield ("dig_down",), land, heading

    def _plan(self, goal) -> list[Step] | None:
        """The fewest actions (Dijkstra over steps of several actions) from here to a
        state where ``goal(pos, heading)`` holds."""
        start = (self.position(), HEADINGS.index(self.facing()))
        if goal(start[0], HEADINGS[start[1]]):
            return []
        best = {start: 0}
        parents: dict[tuple[Voxel, int], tuple[tuple[Voxel, int], Step]] = {}
        queue = [(0, 0, start)]
        order = itertools.count(1)
        while queue and len(best) < SEARCH_LIMIT:
            cost, _, state = heapq.heappop(queue)
            if cost > best[state]:
                continue
            if state != start and goal(state[0], HEADINGS[state[1]]):
                steps = []
                while state != start:
                    state, step = parents[state]
                    steps.append(step)
                return steps[::-1]
            for step in self._moves(*state):
                actions, pos, heading = step
                nxt = (pos, heading)
                total = cost + len(actions)
                if total < best.get(nxt, total + 1):
                    best[nxt] = total
                    parents[nxt] = (state, step)
                    heapq.heappush(queue, (total, next(order), nxt))
        return None

    def _reach(self, target: Voxel) -> list[Step] | None:
        """A plan that ends with ``target`` dug (see :meth:`reach_plan`)."""

        def reaches(pos: Voxel, heading: tuple[int, int]) -> str | None:
            for action, (ahead, up, _) in DIG_ACTIONS.items():
                spot = (pos[0] + ahead * heading[0], pos[1] + up, pos[2] + ahead * heading[1])
                if spot == target:
                    return action
            return None

        plan = self._plan(lambda pos, heading: reaches(pos, heading) is not None)
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
        for actions, pos, heading in plan:
            for action in actions:
                if self._steps - start >= patience:
                    return False
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


def run_voxel_policy(world, policy, max_steps: int = 500, *, seed: int | None = None) -> dict:
    """Reset ``world`` and run trusted ``policy(skills)`` in-process for at most
    ``max_steps`` actions (tests and benchmarks; untrusted code goes through the sandbox).
    Returns the steps taken, whether the policy returned True, and the final inventory."""
    obs = world.reset(seed)
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
    return {"steps": steps, "success": result is True, "inventory": skills.inventory()}
