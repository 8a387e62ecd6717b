"""The remembered map as arrays, and the planner's search compiled on them.

:class:`GridMap` mirrors :attr:`skills.navigation.Navigator.memory` (position → tile
name) as a 2-D array of tile ids, with the step each tile was last seen, growing as the
player walks. Goal tests that depend only on where the player stands ("at the edge of
the known map", "within two tiles of stone", "seen long ago") become boolean arrays
built by numpy in microseconds, and :func:`search` walks them in numba.

:func:`search` is :meth:`skills.navigation.Navigator.search` step for step: the same
uniform-cost order (cost, then insertion order: a FIFO per cost level), the same
direction order, the same tests in the same order, the same node limit. It returns the
very plan the dict-based search returns (tests/test_navigation.py compares them on real
episodes); it is only faster: an explore planning on a remembered Crafter map took
2.2 ms as dicts and 0.04 ms as arrays (seed 94001, 116 plannings, the same plans).
"""

from __future__ import annotations

import numba
import numpy as np

UNKNOWN = -1
"""Tile id of a position never seen."""
# Room added around the known map when it grows: a view is 9×7, so a grown grid
# takes several steps of walking before it has to grow again.
GROW_MARGIN = 32
# Unknown cells kept around the known map: goal tests look up to three tiles beyond a
# known one (a nook's far wall), and the kept near masks are refreshed in a window of
# twice their radius (2) around each view: no window then needs a bounds check.
BORDER = 5
# Crafter's map is 64×64 and positions are relative to the start: a grid of 2×64
# (+ border) holds any episode without growing.
INITIAL_HALF = 68


class GridMap:
    """Tile ids and last-seen steps of the remembered map, indexed ``[y + oy, x + ox]``."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.tiles = np.full((2 * INITIAL_HALF, 2 * INITIAL_HALF), UNKNOWN, np.int16)
        self.seen = np.zeros(self.tiles.shape, np.int32)
        self.ox = self.oy = INITIAL_HALF
        # Masks kept up to date view by view (only the cells a view can change are
        # recomputed): the frontier, and the near set of each kind asked for.
        self._frontier: np.ndarray | None = None
        self._near: dict[tuple[str, int], np.ndarray] = {}
        self._kind_luts: dict[str, np.ndarray] = {}

    def observe(
        self, view: np.ndarray, left: int, top: int, now: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """Take in ``view`` (tile ids) whose top-left tile is at position (left, top).
        Returns the cells whose tile changed, row by row — positions x and y, the ids
        before (UNKNOWN: never seen) and after — or None when none did."""
        rows, cols = view.shape
        x0, y0 = left + self.ox, top + self.oy
        height, width = self.tiles.shape
        if x0 < BORDER or y0 < BORDER or x0 + cols + BORDER > width or y0 + rows + BORDER > height:
            self._grow(left, top, cols, rows)
            x0, y0 = left + self.ox, top + self.oy
        self.seen[y0 : y0 + rows, x0 : x0 + cols] = now
        here = self.tiles[y0 : y0 + rows, x0 : x0 + cols]
        changed = here != view
        if not changed.any():
            return None  # the kept masks depend on the tiles alone
        before, after = here[changed], view[changed]
        revealed = bool((before == UNKNOWN).any())
        here[...] = view
        if self._frontier is not None and revealed:  # known-ness alone moves the frontier
            self._frontier[y0 - 1 : y0 + rows + 1, x0 - 1 : x0 + cols + 1] = _frontier_of(
                self.tiles[y0 - 2 : y0 + rows + 2, x0 - 2 : x0 + cols + 2]
            )
        for (kind, radius), near in self._near.items():
            lut = self._lut_of(kind)
            if not (lut[before].any() or lut[after].any()):
                continue  # no tile of this kind came or went
            if BORDER < 2 * radius:
                near[:] = self._near_of(kind, radius)  # no window fits: all of it
                continue
            window = self.tiles[
                y0 - 2 * radius : y0 + rows + 2 * radius, x0 - 2 * radius : x0 + cols + 2 * radius
            ]
            near[y0 - radius : y0 + rows + radius, x0 - radius : x0 + cols + radius] = _square(
                lut[window], radius
            )[radius:-radius, radius:-radius]
        ys, xs = np.nonzero(changed)
        return xs + left, ys + top, before, after

    def _lut_of(self, kind: str) -> np.ndarray:
        lut = self._kind_luts.get(kind)
        if lut is None:
            lut = self._kind_luts[kind] = self.lut({kind})
        return lut

    def _grow(self, left: int, top: int, cols: int, rows: int) -> None:
        height, width = self.tiles.shape
        lo_x = min(-self.ox, left - GROW_MARGIN)
        lo_y = min(-self.oy, top - GROW_MARGIN)
        hi_x = max(width - self.ox, left + cols + GROW_MARGIN)
        hi_y = max(height - self.oy, top + rows + GROW_MARGIN)
        tiles = np.full((hi_y - lo_y, hi_x - lo_x), UNKNOWN, np.int16)
        seen = np.zeros(tiles.shape, np.int32)
        dy, dx = -lo_y - self.oy, -lo_x - self.ox
        tiles[dy : dy + height, dx : dx + width] = self.tiles
        seen[dy : dy + height, dx : dx + width] = self.seen
        self.tiles, self.seen, self.ox, self.oy = tiles, seen, -lo_x, -lo_y
        self._frontier = None  # made afresh on the grown grid when next asked for
        self._near.clear()

    def lut(self, names: frozenset[str] | set[str]) -> np.ndarray:
        """Tile id → whether its name is in ``names`` (index -1, unknown, is False)."""
        out = np.zeros(len(self.names) + 1, np.bool_)
        for i, name in enumerate(self.names):
            out[i] = name in names
        return out  # out[-1] is the unknown id's entry: never in a set of names

    def known(self) -> np.ndarray:
        return self.tiles != UNKNOWN

    def frontier(self) -> np.ndarray:
        """Known positions with an unknown neighbour (``Navigator._at_frontier``); kept
        up to date by :meth:`observe` once asked for (read it, do not change it)."""
        if self._frontier is None:
            self._frontier = _frontier_of(np.pad(self.tiles, 1, constant_values=UNKNOWN))
        return self._frontier

    def near(self, kind: str, radius: int) -> np.ndarray:
        """Positions within ``radius`` (both axes) of a known ``kind`` tile; kept up to
        date by :meth:`observe` once asked for (read it, do not change it)."""
        near = self._near.get((kind, radius))
        if near is None:
            near = self._near[(kind, radius)] = self._near_of(kind, radius)
        return near

    def _near_of(self, kind: str, radius: int) -> np.ndarray:
        padded = np.pad(self._lut_of(kind)[self.tiles], radius)
        return _square(padded, radius)[radius:-radius, radius:-radius]

    def stale(self, before: int) -> np.ndarray:
        """Positions last seen at or before step ``before`` (never seen: step 0)."""
        return self.seen <= before

    def nook(
        self,
        creatures: np.ndarray,
        walkable: np.ndarray,
        deadly: np.ndarray,
        diggable: np.ndarray,
        takes_stone: np.ndarray,
        stone: int,
    ) -> np.ndarray:
        """Positions where ``Skills._nook_at`` finds a nook (the same tests as arrays):
        the position can take a stone or be dug, and along some direction d the two
        tiles pos+d, pos+2d can hold the player (walkable or diggable, no creature; with
        no stone held one of them must be diggable) and their five other neighbours are
        solid (known, neither walkable nor deadly, no creature). Lookups are by tile id
        (last entry: unknown)."""
        tiles = self.tiles
        known = tiles != UNKNOWN
        walk, dig = walkable[tiles], diggable[tiles]
        inner = (walk | dig) & ~creatures
        solid = known & ~walk & ~deadly[tiles] & ~creatures
        found = np.zeros(tiles.shape, np.bool_)
        for dx, dy in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            sx, sy = dy, dx  # the side direction, as Skills._nook_at turns d
            ok = _shifted(inner, dx, dy) & _shifted(inner, 2 * dx, 2 * dy)
            if stone < 1:
                ok &= _shifted(dig, dx, dy) | _shifted(dig, 2 * dx, 2 * dy)
            for wx, wy in (
                (dx + sx, dy + sy), (dx - sx, dy - sy),
                (2 * dx + sx, 2 * dy + sy), (2 * dx - sx, 2 * dy - sy), (3 * dx, 3 * dy),
            ):  # fmt: skip
                ok &= _shifted(solid, wx, wy)
            found |= ok
        return found & (takes_stone[tiles] | dig)

    def creatures(self, positions: list[tuple[int, int]]) -> np.ndarray:
        out = np.zeros(self.tiles.shape, np.bool_)
        height, width = out.shape
        for x, y in positions:
            gx, gy = x + self.ox, y + self.oy
            if 0 <= gx < width and 0 <= gy < height:
                out[gy, gx] = True
        return out


def _frontier_of(tiles: np.ndarray) -> np.ndarray:
    """The frontier bits of ``tiles`` without its outermost ring (which lacks neighbours)."""
    known = tiles != UNKNOWN
    inner = known[:-2, 1:-1] & known[2:, 1:-1] & known[1:-1, :-2] & known[1:-1, 2:]
    return known[1:-1, 1:-1] & ~inner


def _square(mask: np.ndarray, radius: int) -> np.ndarray:
    """``mask`` spread to every cell within ``radius`` along both axes (a square); the
    outer ``radius`` rings see only part of their square."""
    rows = mask.copy()
    for r in range(1, radius + 1):
        rows[r:] |= mask[:-r]
        rows[:-r] |= mask[r:]
    out = rows.copy()
    for r in range(1, radius + 1):
        out[:, r:] |= rows[:, :-r]
        out[:, :-r] |= rows[:, r:]
    return out


def _shifted(mask: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """``out[y, x] = mask[y + dy, x + dx]``, False beyond the edges."""
    out = np.zeros_like(mask)
    height, width = mask.shape
    out[max(0, -dy) : height - max(0, dy), max(0, -dx) : width - max(0, dx)] = mask[
        max(0, dy) : height - max(0, -dy), max(0, dx) : width - max(0, -dx)
    ]
    return out


# Compiled when this module is imported (an explicit signature), from numba's cache in
# __pycache__ after the first time: never inside an episode's wall-clock budget (a cold
# compile takes seconds).
@numba.njit(
    "int64[:, ::1](int16[:, ::1], bool_[:, ::1], bool_[::1], bool_[::1], bool_[::1], bool_[:, ::1],"
    " int64, int64, int64[:, ::1], int64, int64)",
    cache=True,
    nogil=True,
)
def search(tiles, creatures, walkable, deadly, diggable, at, sx, sy, order, max_nodes, dig_cost):
    """Uniform-cost search from grid cell (sx, sy) to a cell where ``at`` holds.

    ``walkable``/``deadly``/``diggable`` are tile-id lookups (last entry: unknown);
    ``order`` is the direction order, shape (4, 2) of (dx, dy). Returns the plan as rows
    (direction index, x, y, dig) of grid cells the player must be at before each move, or
    an empty array when nothing is found within ``max_nodes`` reached cells.

    Long because it is one loop compiled whole by numba, the hottest code of a rollout:
    split, each part would take a dozen of its arrays and be called per reached cell.
    """
    height, width = tiles.shape
    size = height * width
    big = np.iinfo(np.int64).max
    cost = np.full(size, big, np.int64)
    parent = np.empty(size, np.int64)  # each read only where written
    parent_dir = np.empty(size, np.int64)
    parent_dig = np.empty(size, np.bool_)
    start = sy * width + sx
    cost[start] = 0
    parent[start] = -1
    nodes = 1
    # Python's heap pops (cost, insertion counter): every push costs 1 or dig_cost more
    # than the cost being expanded, so a FIFO per cost level pops in that very order.
    # Only dig_cost + 1 levels are ever live: a ring of them, each an array FIFO (a
    # level holds at most one entry per push, at most 4 per cell).
    levels = dig_cost + 1
    queue = np.empty((levels, 4 * size + 4), np.int64)
    head = np.zeros(levels, np.int64)
    tail = np.zeros(levels, np.int64)
    queue[0, 0] = start
    tail[0] = 1
    g = 0
    found = -1
    last_dir = 0
    last_dig = False
    while nodes < max_nodes and found < 0:
        slot = g % levels
        if head[slot] == tail[slot]:  # this cost level is done: on to the next one
            head[slot] = tail[slot] = 0
            if (head == tail).all():
                break  # nothing left anywhere: the heap ran empty
            g += 1
            continue
        pos = queue[slot, head[slot]]
        head[slot] += 1
        if g > cost[pos]:
            continue
        py, px = pos // width, pos % width
        for k in range(4):
            tx, ty = px + order[k, 0], py + order[k, 1]
            inside = 0 <= tx < width and 0 <= ty < height
            tile = tiles[ty, tx] if inside else -1
            if deadly[tile]:
                continue
            creature = creatures[ty, tx] if inside else False
            if walkable[tile] and not creature:
                step, digs = 1, False
            else:
                if at[py, px]:
                    found, last_dir, last_dig = pos, k, False
                    break
                if not diggable[tile] or creature:
                    continue
                step, digs = dig_cost, True
            if at[ty, tx]:
                found, last_dir, last_dig = pos, k, digs
                break
            new = g + step
            target = ty * width + tx
            if new < cost[target]:
                if cost[target] == big:
                    nodes += 1
                cost[target] = new
                parent[target] = pos
                parent_dir[target] = k
                parent_dig[target] = digs
                to = new % levels
                queue[to, tail[to]] = target
                tail[to] += 1
    if found < 0:
        return np.zeros((0, 4), np.int64)
    length = 1
    cell = found
    while parent[cell] >= 0:
        length += 1
        cell = parent[cell]
    plan = np.zeros((length, 4), np.int64)
    plan[length - 1] = (last_dir, found % width, found // width, np.int64(last_dig))
    cell = found
    for i in range(length - 2, -1, -1):
        prev = parent[cell]
        plan[i] = (parent_dir[cell], prev % width, prev // width, np.int64(parent_dig[cell]))
        cell = prev
    return plan
