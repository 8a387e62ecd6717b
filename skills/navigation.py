"""The remembered map of one episode and the walks planned over it.

:class:`Navigator` takes in every observation (:meth:`Navigator.observe`) and keeps the
tiles seen so far, in coordinates relative to where the episode started, with when each
was last seen and where creatures stand now. On that map it plans walks: the shortest
one to a state a goal test accepts (:meth:`Navigator.search`, digging through what the
held tools can collect when tunnelling), followed step by step while it stays valid
(:meth:`Navigator.walk`), and walks towards unseen ground when no goal is known
(:meth:`Navigator.explore_action`).

The explore and shelter searches, the ones run nearly every step while the player
explores, go to :mod:`skills.gridmap`: the same map as arrays, goal tests as masks kept up
to date view by view, the search compiled with numba. They give the very plans the dict
search gives (tests/test_navigation.py), ~50× sooner.

:class:`skills.skills.Skills` holds one navigator per episode and builds its movement
helpers on it; policy code never reaches it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from skills import gridmap
from worlds.world import Observation

if TYPE_CHECKING:
    from skills.skills import Rules

Pos = tuple[int, int]
Plan = list[tuple[Pos, Pos, bool]]
"""A walk: (direction to move, position the player must be at before the move, whether
the tile ahead is dug first)."""
Goal = Callable[[Pos, Pos], bool]
"""``goal(position, facing)``: whether a walk may end there."""

DIRECTIONS: dict[Pos, str] = {
    (-1, 0): "move_left",
    (1, 0): "move_right",
    (0, -1): "move_up",
    (0, 1): "move_down",
}
MOVES: dict[str, Pos] = {action: d for d, action in DIRECTIONS.items()}

# How far to look for a goal before giving up on planning: a few times Crafter's
# 64×64 map edge, so a goal anywhere on the known map is found.
MAX_SEARCH_NODES = 20000
# After a search for a target found no path, wait this many steps before searching
# again: the view reveals at most a 9-tile strip per step, rarely opening a route.
RESEARCH_AFTER = 8
# What a planned walk counts for digging a tile and stepping into it (two actions),
# against 1 for a step on open ground.
DIG_COST = 2
# Once all of the map in reach is known, exploring revisits tiles last seen this many
# steps ago (creatures move; cows and zombies are not remembered).
STALE_AFTER = 100


def add(a: Pos, b: Pos) -> Pos:
    """``a`` moved by the offset ``b``."""
    return (a[0] + b[0], a[1] + b[1])


class Navigator:
    """The remembered map of one episode and the plan being walked on it."""

    def __init__(self, rules: Rules, obs: Observation) -> None:
        """Start an episode's map at its first observation ``obs``."""
        self.rules = rules
        self.tunnel = False  # whether walks may dig (Skills.tunnel)
        self.obs = obs  # the latest observation: where the player is, faces, holds
        self.now = 0  # the step ``obs`` came at
        self._memory: dict[Pos, str] = {}  # position → tile as last seen
        # The same map as arrays, for the explore searches (gridmap.search); it holds
        # only while the map is made by observe() alone (see the memory setter).
        self._grid: gridmap.GridMap | None = gridmap.GridMap(obs.names)
        self._luts: dict[frozenset[str], np.ndarray] = {}
        self.creature_map: dict[Pos, str] = {}  # position → creature in view now
        self._seen: dict[Pos, int] = {}  # position → step last in view (grid: grid.seen)
        self._tile_counts: dict[str, int] = {}  # tile → how many are remembered
        self._no_path: dict[object, int] = {}  # walk key → step its search last failed
        self._plan: Plan = []
        self._plan_key: object = None  # what the plan is for: a walk key, explore, follow
        self._heading: Pos = (0, 1)  # the last exploring direction, tried first
        self._near_cache: tuple[object, frozenset[Pos]] | None = None
        self.observe(obs, 0)

    # ------------------------------------------------------------------ the map

    @property
    def memory(self) -> dict[Pos, str]:
        """Position → tile as last seen."""
        return self._memory

    @memory.setter
    def memory(self, memory: dict[Pos, str]) -> None:
        # A map put in by hand (tests) may change behind observe()'s back: search it
        # as a dict from now on.
        self._memory = memory
        self._drop_grid()

    def observe(self, obs: Observation, now: int) -> None:
        """Take in the observation made at step ``now``: the view joins the map."""
        self.obs = obs
        self.now = now
        px, py = obs.position
        self.creature_map = {(px + dx, py + dy): kind for kind, dx, dy in obs.creatures}
        (cx, cy), names = obs.center, obs.names
        memory, counts = self._memory, self._tile_counts
        grid = self._grid
        if grid is not None and not (obs.names is grid.names or obs.names == grid.names):
            self._drop_grid()  # a world whose tile ids changed meaning: keep to the dict
            grid = None
        if grid is not None:
            # The grid says which tiles changed (and keeps when each was last seen).
            changes = grid.observe(obs.view, px - cx, py - cy, now)
            if changes is not None:
                for x, y, _, new_id in zip(*(a.tolist() for a in changes), strict=True):
                    name = names[new_id]
                    old = memory.get((x, y))
                    if old != name:
                        memory[(x, y)] = name
                        counts[name] = counts.get(name, 0) + 1
                        if old is not None:
                            counts[old] -= 1
            return
        seen = self._seen
        for row_index, row in enumerate(obs.view.tolist()):
            y = py + row_index - cy
            for col_index, tile in enumerate(row):
                key, name = (px + col_index - cx, y), names[tile]
                seen[key] = now
                old = memory.get(key)
                if old != name:
                    memory[key] = name
                    counts[name] = counts.get(name, 0) + 1
                    if old is not None:
                        counts[old] -= 1

    def _drop_grid(self) -> None:
        """Search the dict from now on: it takes over when each tile was last seen."""
        if self._grid is not None:
            self._seen.update(self._grid_seen())
            self._grid = None

    def _grid_seen(self) -> dict[Pos, int]:
        """Position → step last in view, for every known position, from the grid."""
        grid = self._grid
        assert grid is not None
        ys, xs = np.nonzero(grid.known())
        steps = grid.seen[ys, xs].tolist()
        xs, ys = (xs - grid.ox).tolist(), (ys - grid.oy).tolist()
        return {(x, y): step for x, y, step in zip(xs, ys, steps, strict=True)}

    def creature_at(self, pos: Pos) -> str | None:
        return self.creature_map.get(pos)

    def is_kind(self, pos: Pos, kind: str) -> bool:
        """Whether ``pos`` holds a ``kind``: the creature there if any, else the tile."""
        creature = self.creature_at(pos)
        if creature is not None:
            return creature == kind
        return self._memory.get(pos) == kind

    def adjacent_to(self, pos: Pos, kind: str) -> bool:
        return any(self.is_kind(add(pos, d), kind) for d in DIRECTIONS)

    def near(self, station: str, pos: Pos | None = None) -> bool:
        # Crafter's make checks the 3×3 square around the player, diagonals included.
        px, py = self.obs.position if pos is None else pos
        return any(
            self._memory.get((px + dx, py + dy)) == station
            for dx in (-1, 0, 1)
            for dy in (-1, 0, 1)
        )

    def placeable(self, pos: Pos, where: frozenset[str]) -> bool:
        return self._memory.get(pos) in where and self.creature_at(pos) is None

    def enterable(self, pos: Pos) -> bool:
        """Whether moving into ``pos`` moves the player there (as far as it knows)."""
        tile = self._memory.get(pos)
        return (tile in self.rules.walkable or tile in self.rules.deadly) and (
            self.creature_at(pos) is None
        )

    def passable(self, pos: Pos) -> bool:
        """Whether planning may route through ``pos``: a known walkable tile, no creature."""
        return self._memory.get(pos) in self.rules.walkable and self.creature_at(pos) is None

    def diggable(self) -> frozenset[str]:
        """Tiles a walk may dig through now: collectable with the tools held, always
        giving, and leaving walkable ground (Crafter: tree, stone, coal, iron, diamond)."""
        inventory, walkable = self.obs.inventory, self.rules.walkable
        out = set()
        for tile, rule in self.rules.collect.items():
            if tile in walkable or rule.get("leaves") not in walkable:
                continue
            if rule.get("probability", 1) < 1:
                continue
            if all(inventory.get(k, 0) >= v for k, v in rule.get("require", {}).items()):
                out.add(tile)
        return frozenset(out)

    # ------------------------------------------------------------------ walking

    def struck(self, pos: Pos) -> bool:
        """Whether a missile in view flies into ``pos`` on the next step (the player
        moves first, then the missile: standing there then costs health)."""
        px, py = self.obs.position
        for dx, dy, fx, fy in self.obs.missiles:
            if (px + dx + fx, py + dy + fy) == pos:
                return True
        return False

    def shield(self, action: str) -> str:
        """``action``, or 'noop' when it would step into a missile's next tile (waiting
        one step lets the missile pass)."""
        d = MOVES.get(action)
        if d is None or not self.obs.missiles:
            return action
        target = add(self.obs.position, d)
        if self.passable(target) and self.struck(target):
            return "noop"
        return action

    def walk(
        self,
        key: object,
        goal: Goal,
        patience: int,
        *,
        interrupt: Callable[[], str | None],
        explore_for: str | None = None,
    ) -> Iterator[str]:
        """Follow a plan towards a state where ``goal(pos, facing)`` holds; explore if none.

        ``interrupt()`` answers first each step (the guard fighting a hostile); a walk
        for a kind of tile, or for ``explore_for``, explores among that kind's habitat.
        """
        kind = key if isinstance(key, str) else explore_for
        toward = self.rules.habitat.get(kind) if kind is not None else None
        for _ in range(patience):
            pos, facing = self.obs.position, self.obs.facing
            if goal(pos, facing):
                return True
            action = interrupt()
            if action is None:
                action = self._next_planned(key, goal)
            if action is None:
                action = self.explore_action(toward)
            if action is None:
                return False
            yield self.shield(action)
        return goal(self.obs.position, self.obs.facing)

    def follow(
        self, plan: Plan, patience: int, *, interrupt: Callable[[], str | None]
    ) -> Iterator[str]:
        """Walk a plan made by :meth:`search` to its end; False when it broke."""
        self._plan, self._plan_key = list(plan), ("follow", self.now)
        for _ in range(patience):
            if not self._plan:
                return True
            action = interrupt()
            if action is None:
                if not self._plan_valid():
                    return False
                action = self._plan_action()
            yield self.shield(action)
        return not self._plan

    def explore_action(self, toward: str | None = None) -> str | None:
        """One step towards the nearest edge of the known map (None: all explored);
        with ``toward``, towards the nearest edge next to tiles of that kind if any.

        The plan is kept until walked out, and the search tries the last heading first,
        so the player sweeps on in one direction instead of dithering between edges.
        """
        key = ("explore", toward)
        if self._plan_key == key and self._plan_valid():
            self._heading = self._plan[0][0]
            return self._plan_action()
        order = [self._heading] + [d for d in DIRECTIONS if d != self._heading]
        if self._grid is not None:
            plan = self._explore_grid(toward, order)
        else:
            plan = self._explore_dict(toward, order)
        self._plan = plan or []
        self._plan_key = key
        if not self._plan:
            return None
        self._heading = self._plan[0][0]
        return self._plan_action()

    def _explore_dict(self, toward: str | None, order: list[Pos]) -> Plan | None:
        """The explore searches (see :meth:`explore_action`) with goal tests on the dict."""
        plan = None
        if toward is not None and self._tile_counts.get(toward):
            near = self._near_set(toward)
            plan = self.search(
                lambda pos, d: pos in near and self._at_frontier(pos), order, self.tunnel
            )
        if not plan:
            plan = self.search(lambda pos, d: self._at_frontier(pos), order, self.tunnel)
        if not plan:
            # All of the map in reach is known: revisit what was seen longest ago (the
            # creatures there have moved), next to ``toward`` if possible.
            stale = self.now - STALE_AFTER
            seen = self._seen
            if toward is not None and self._tile_counts.get(toward):
                near = self._near_set(toward)
                plan = self.search(
                    lambda pos, d: pos in near and seen.get(pos, 0) <= stale, order, self.tunnel
                )
            if not plan:
                plan = self.search(lambda pos, d: seen.get(pos, 0) <= stale, order, self.tunnel)
        return plan

    def _explore_grid(self, toward: str | None, order: list[Pos]) -> Plan | None:
        """:meth:`_explore_dict` on the grid: the same goals in the same order as
        arrays, the same plans (gridmap.search is :meth:`search` step for step)."""
        grid = self._grid
        assert grid is not None
        near = None
        if toward is not None and self._tile_counts.get(toward):
            near = grid.near(toward, 2)
        frontier = grid.frontier()
        goals = [near & frontier] if near is not None else []
        goals.append(frontier)
        plan = None
        for at in goals:
            plan = self._search_grid(at, order)
            if plan:
                return plan
        stale = grid.stale(self.now - STALE_AFTER)
        goals = [near & stale] if near is not None else []
        goals.append(stale)
        for at in goals:
            plan = self._search_grid(at, order)
            if plan:
                return plan
        return plan

    def _lut(self, names: frozenset[str]) -> np.ndarray:
        lut = self._luts.get(names)
        if lut is None:
            assert self._grid is not None
            lut = self._luts[names] = self._grid.lut(names)
        return lut

    @property
    def grid(self) -> gridmap.GridMap | None:
        """The map as arrays (None once the map was set by hand: search the dict)."""
        return self._grid

    def nook_mask(self, diggable: frozenset[str]) -> np.ndarray:
        """Where ``Skills._nook_at`` holds, as a grid array (needs :attr:`grid`)."""
        grid = self._grid
        assert grid is not None
        where = frozenset(self.rules.place.get("stone", {}).get("where", ()))
        return grid.nook(
            grid.creatures(list(self.creature_map)),
            self._lut(self.rules.walkable),
            self._lut(self.rules.deadly),
            self._lut(diggable),
            self._lut(where),
            int(self.obs.inventory.get("stone", 0)),
        )

    def _search_grid(self, at: np.ndarray, order: list[Pos]) -> Plan | None:
        return self.search_at(at, order, self.tunnel)

    def search_at(
        self, at: np.ndarray, order: Iterable[Pos] = tuple(DIRECTIONS), dig: bool = False
    ) -> Plan | None:
        """:meth:`search` for a goal that depends on the position alone, given as the
        grid array ``at`` (needs :attr:`grid`), through the compiled
        :func:`skills.gridmap.search`: the same plan, much sooner."""
        grid = self._grid
        assert grid is not None
        order = list(order)
        px, py = self.obs.position
        rows = gridmap.search(
            grid.tiles,
            grid.creatures(list(self.creature_map)),
            self._lut(self.rules.walkable),
            self._lut(self.rules.deadly),
            self._lut(self.diggable() if dig else frozenset()),
            at,
            px + grid.ox,
            py + grid.oy,
            np.array(order, np.int64),
            MAX_SEARCH_NODES,
            DIG_COST,
        )
        if not len(rows):
            return None
        ox, oy = grid.ox, grid.oy
        return [(order[k], (x - ox, y - oy), bool(dg)) for k, x, y, dg in rows.tolist()]

    def _next_planned(self, key: object, goal: Goal) -> str | None:
        # A plan stays valid while the player is where it expected and the next tile is
        # still free; creatures move, so plans towards them are made afresh every step.
        kind_moves = isinstance(key, str) and (
            key in self.rules.creature_goals or key in self.rules.hostile
        )
        if self._plan_key != key or not self._plan_valid() or kind_moves:
            plan = self.search(goal, dig=self.tunnel) if self._worth_searching(key) else None
            self._plan = plan or []
            self._plan_key = key
            if not self._plan:
                self._no_path[key] = self.now
        if not self._plan:
            self._plan_key = None
            return None
        return self._plan_action()

    def _plan_action(self) -> str:
        """The action for the plan's first move: enter, turn, or dig the tile ahead."""
        d, expected, dig = self._plan[0]
        target = add(expected, d)
        if dig and not self.passable(target):
            if self.obs.facing != d:
                return DIRECTIONS[d]  # a solid tile: moving towards it only turns
            return "do"
        self._plan.pop(0)
        return DIRECTIONS[d]

    def _worth_searching(self, key: object) -> bool:
        # A full search costs milliseconds; skip it while the target was never seen, and
        # for a few steps after one failed (the map changes slowly while exploring).
        # A creature in view moves: search for it every step.
        if isinstance(key, str) and not self._tile_counts.get(key):
            if not any(kind == key for kind, _, _ in self.obs.creatures):
                return False
            return True
        failed_at = self._no_path.get(key)
        return failed_at is None or self.now - failed_at >= RESEARCH_AFTER

    def _plan_valid(self) -> bool:
        if not self._plan:
            return False
        d, expected, dig = self._plan[0]
        if expected != self.obs.position:
            return False
        target = add(expected, d)
        tile = self._memory.get(target)
        if tile in self.rules.deadly:
            return False
        if dig:
            return self.passable(target) or (
                tile in self.diggable() and self.creature_at(target) is None
            )
        # The last move may be a turn towards a solid tile; earlier ones must enter.
        return len(self._plan) == 1 or self.passable(target)

    # ------------------------------------------------------------------ planning

    def search(
        self,
        goal: Goal,
        order: Iterable[Pos] = tuple(DIRECTIONS),
        dig: bool = False,
    ) -> Plan | None:
        """Shortest walk over known tiles to a state where ``goal`` holds.

        A move into a passable tile enters it; a move towards anything else turns the
        player in place. ``goal(pos, facing)`` is tested after each such move. With
        ``dig``, tiles the player can collect with its tools are entered too, at the
        cost of digging them first (a uniform-cost search then, not breadth-first).
        Lava is never entered.
        """
        start = self.obs.position
        parents: dict[Pos, tuple[Pos, Pos, bool] | None] = {start: None}
        deadly = self.rules.deadly
        memory = self._memory
        order = tuple(order)
        diggable = self.diggable() if dig else frozenset()
        cost: dict[Pos, int] = {start: 0}
        heap: list[tuple[int, int, Pos]] = [(0, 0, start)]
        counter = 0
        while heap and len(parents) < MAX_SEARCH_NODES:
            g, _, pos = heapq.heappop(heap)
            if g > cost[pos]:
                continue
            for d in order:
                target = (pos[0] + d[0], pos[1] + d[1])
                tile = memory.get(target)
                if tile in deadly:
                    continue
                if self.passable(target):
                    step, digs = 1, False
                else:
                    if goal(pos, d):
                        return _unwind(parents, pos) + [(d, pos, False)]
                    if tile not in diggable or self.creature_at(target) is not None:
                        continue
                    step, digs = DIG_COST, True
                if goal(target, d):
                    return _unwind(parents, pos) + [(d, pos, digs)]
                new = g + step
                if new < cost.get(target, new + 1):
                    cost[target] = new
                    parents[target] = (pos, d, digs)
                    counter += 1
                    heapq.heappush(heap, (new, counter, target))
        return None

    def _near_set(self, kind: str, radius: int = 2) -> frozenset[Pos]:
        """Positions within ``radius`` (both axes) of a remembered tile of ``kind``."""
        key = (kind, radius, self._tile_counts.get(kind, 0), len(self._memory))
        if self._near_cache is not None and self._near_cache[0] == key:
            return self._near_cache[1]
        out: set[Pos] = set()
        span = range(-radius, radius + 1)
        for (x, y), name in self._memory.items():
            if name == kind:
                out.update((x + dx, y + dy) for dx in span for dy in span)
        near = frozenset(out)
        self._near_cache = (key, near)
        return near

    def _at_frontier(self, pos: Pos) -> bool:
        memory = self._memory
        return any((pos[0] + dx, pos[1] + dy) not in memory for dx, dy in DIRECTIONS)


def _unwind(parents: Mapping[Pos, tuple[Pos, Pos, bool] | None], pos: Pos) -> Plan:
    plan: Plan = []
    link = parents[pos]
    while link is not None:
        prev, d, dig = link
        plan.append((d, prev, dig))
        link = parents[prev]
    plan.reverse()
    return plan
