"""The skill API that code-as-policy programs call, and the driver that runs them.

A policy is a generator function ``run(skills)`` that yields primitive action names::

    def run(skills):
        for _ in range(20):          # "attack 20 times"
            yield "do"

    def run(skills):                 # "collect one wood"
        got = yield from skills.collect("tree", 1)

:class:`Skills` is the only thing such code sees. It answers questions about what the
player has perceived (the current local view and a map remembered from earlier views,
in coordinates relative to the player), and offers movement/interaction helpers that
are themselves generators of primitive actions, to be used with ``yield from``; each
helper returns True when it achieved its goal and False when it gave up.

The helpers: walking (``path_to``, ``approach``, ``walk_to``, ``face``, ``explore`` —
towards unseen ground, optionally among a kind of tile, revisiting stale ground once all
is known), interacting (``collect``, ``place``, ``make``, ``attack``), danger
(``defend`` fights adjacent zombies/skeletons; ``guard(True)`` makes every helper do
so first), ``tunnel(True)`` (walks dig through what the held tools can collect, e.g.
stone with a pickaxe; lava is never entered in any mode), and rest (``shelter`` walls
the player into a nook with a stone, ``rest`` sleeps until energy is back).

Untrusted code reaches only public attributes (a sandbox refuses ``_``-prefixed names),
so everything the object keeps — the remembered map and the plan being followed, both
held by an :class:`skills.navigation.Navigator` — lives in ``_`` attributes, and every
answer is a fresh copy built of str/int/float/tuple/dict.

:func:`run_unsandboxed` runs trusted policy code in-process, without the sandbox (tests
and benchmarks; agents' code goes through :func:`sandbox.run_policy`): it pulls actions
from the policy, checks them against the world's action names, steps the world, feeds
the observation back to the skills and records a compact trace in an
:class:`EpisodeResult`.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from crafter import constants

from messages.causes import (
    EPISODE_DONE,
    INVALID_ACTION,
    POLICY_ERROR,
    POLICY_FINISHED,
    STEP_BUDGET,
    SUCCESS,
)
from skills.navigation import DIRECTIONS, Goal, Navigator, Plan, Pos, add
from worlds.world import VOID, Observation, World

# Steps a movement helper may take before it gives up and returns False; long enough
# to cross Crafter's map once and come back, short of an episode budget of 500+.
DEFAULT_PATIENCE = 300


@dataclasses.dataclass(frozen=True, slots=True)
class Rules:
    """The game's rules the helpers need: what is walkable and each recipe."""

    walkable: frozenset[str]
    """Tiles the player can stand on."""
    deadly: frozenset[str]
    """Tiles the player can enter but dies on (Crafter: lava) — never stepped into."""
    collect: Mapping[str, Mapping[str, Any]]
    """Tile → {'require': {item: n}, 'receive': {item: n}, 'leaves': tile}."""
    place: Mapping[str, Mapping[str, Any]]
    """Item → {'uses': {item: n}, 'where': [tile, ...]}."""
    make: Mapping[str, Mapping[str, Any]]
    """Item → {'uses': {item: n}, 'nearby': [tile, ...]}."""
    creature_goals: Mapping[str, str]
    """Creature kind → the achievement that 'do' on it aims at (eat_cow, …)."""
    hostile: frozenset[str] = frozenset()
    """Creatures that hurt the player (Crafter: zombie, skeleton)."""
    habitat: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Kind → the tile it is found among (diamond → stone: mountains), for exploring."""


def crafter_rules() -> Rules:
    """The rules read from Crafter's own data.yaml, so recipes are never hard-coded."""
    return Rules(
        walkable=frozenset(constants.walkable),
        deadly=frozenset({"lava"}),
        collect=constants.collect,
        place=constants.place,
        make=constants.make,
        creature_goals={
            "cow": "eat_cow",
            "zombie": "defeat_zombie",
            "skeleton": "defeat_skeleton",
            "plant": "eat_plant",
        },
        hostile=frozenset({"zombie", "skeleton"}),
        # Where Crafter's world generator puts things (crafter/worldgen.py): minerals,
        # lava and tunnels inside mountains (stone); trees, cows and zombies on grass.
        habitat={
            "stone": "stone",
            "coal": "stone",
            "iron": "stone",
            "diamond": "stone",
            "lava": "stone",
            "path": "stone",
            "skeleton": "path",
            "tree": "tree",
            "cow": "grass",
            "zombie": "grass",
            "plant": "grass",
            "grass": "grass",
            "water": "water",
            "sand": "water",
        },
    )


class Skills:
    """What a coded policy may ask and do; bound to one episode of one world.

    Offsets are ``(dx, dy)`` from the player: dx grows rightwards, dy downwards.
    """

    def __init__(
        self,
        obs: Observation,
        action_names: Iterable[str],
        rules: Rules | None = None,
        seed: int = 0,
    ) -> None:
        self._rules = rules if rules is not None else crafter_rules()
        self._actions = frozenset(action_names)
        self._random = random.Random(seed)
        self._sightings: dict[Pos, tuple[str, int]] = {}
        self._achievements: dict[str, int] = {}
        self._guard = False
        self._nav = Navigator(self._rules, obs)  # remembers the first view
        self._note_sightings(obs, self._steps)

    # The navigator keeps the latest observation, the step it came at and the remembered
    # map; these are Skills' names for them (the drivers and tests reach some).

    @property
    def _obs(self) -> Observation:
        return self._nav.obs

    @_obs.setter
    def _obs(self, obs: Observation) -> None:
        self._nav.obs = obs

    @property
    def _steps(self) -> int:
        return self._nav.now

    @property
    def _memory(self) -> dict[Pos, str]:
        return self._nav.memory

    @_memory.setter
    def _memory(self, memory: dict[Pos, str]) -> None:
        self._nav.memory = memory

    @property
    def _creature_map(self) -> dict[Pos, str]:
        return self._nav.creature_map

    @_creature_map.setter
    def _creature_map(self, creatures: dict[Pos, str]) -> None:
        self._nav.creature_map = creatures

    # ------------------------------------------------------------------ perception

    def view(self) -> tuple[tuple[str, ...], ...]:
        """Tile names of the local view, rows top to bottom; the player is at the centre."""
        names = self._obs.names
        return tuple(tuple(names[int(i)] for i in row) for row in self._obs.view)

    def creatures(self) -> tuple[tuple[str, int, int], ...]:
        """(kind, dx, dy) of every creature in view, nearest first."""
        return tuple(self._obs.creatures)

    def remembered(self, kind: str) -> tuple[tuple[int, int], ...]:
        """Offsets of every tile of ``kind`` seen so far (as last seen), nearest first."""
        px, py = self._obs.position
        found = [(x - px, y - py) for (x, y), name in self._memory.items() if name == kind]
        found.sort(key=lambda d: (abs(d[0]) + abs(d[1]), d[1], d[0]))
        return tuple(found)

    def sighted(self, kind: str, max_age: int = 300) -> tuple[tuple[int, int], ...]:
        """Offsets where a creature of ``kind`` was last seen within ``max_age`` steps
        and not seen gone since (creatures wander: they are likely still near), nearest
        first. Hostiles are not kept."""
        px, py = self._obs.position
        now = self._steps
        found = [
            (x - px, y - py)
            for (x, y), (name, step) in self._sightings.items()
            if name == kind and now - step <= max_age
        ]
        found.sort(key=lambda d: (abs(d[0]) + abs(d[1]), d[1], d[0]))
        return tuple(found)

    def ripe(self) -> tuple[tuple[int, int], ...]:
        """Offsets of the ripe plants in view (``do`` facing one eats it), nearest first."""
        return tuple(self._obs.ripe)

    def inventory(self) -> dict[str, int]:
        """Item name → count (a copy)."""
        return dict(self._obs.inventory)

    def status(self) -> dict[str, float]:
        """Vital statistics (Crafter: health, food, drink, energy, each 0–9)."""
        return dict(self._obs.status)

    def achievements(self) -> dict[str, int]:
        """Achievement name → times it happened this episode."""
        return dict(self._achievements)

    def position(self) -> tuple[int, int]:
        """The player's offset from where the episode started."""
        return self._obs.position

    def facing(self) -> tuple[int, int]:
        """Unit offset the player faces."""
        return self._obs.facing

    def facing_tile(self) -> str:
        """What is in front of the player: a creature kind if one is there, else the tile."""
        dx, dy = self._obs.facing
        creature = self._obs.creature_at(dx, dy)
        if creature is not None:
            return creature
        return self._obs.tile(dx, dy) or VOID

    def daylight(self) -> float:
        """0 (night) … 1 (day)."""
        return self._obs.daylight

    def steps(self) -> int:
        """Steps taken this episode."""
        return self._steps

    def nearest(self, kind: str) -> tuple[int, int] | None:
        """Offset of the nearest ``kind``: a creature in view, or a tile seen so far."""
        for ckind, dx, dy in self._obs.creatures:
            if ckind == kind:
                return (dx, dy)
        found = self.remembered(kind)
        return found[0] if found else None

    def sees(self, kind: str) -> bool:
        """Whether a tile or creature of ``kind`` is in the current view."""
        if any(ckind == kind for ckind, _, _ in self._obs.creatures):
            return True
        index = self._obs.names.index(kind) if kind in self._obs.names else -1
        return index >= 0 and bool((self._obs.view == index).any())

    def requirements(self, item: str) -> dict[str, int]:
        """Items consumed by placing or making ``item`` (e.g. table → {'wood': …})."""
        rule = self._rules.place.get(item) or self._rules.make.get(item) or {}
        return dict(rule.get("uses", {}))

    # ------------------------------------------------------------------ modes

    def guard(self, on: bool = True) -> bool:
        """Turn self-defence on/off: when on, every movement/interaction helper first
        fights a zombie or skeleton standing next to the player. Returns the old mode."""
        old, self._guard = self._guard, bool(on)
        return old

    def tunnel(self, on: bool = True) -> bool:
        """Turn tunnelling on/off: when on, walks may dig through tiles the player can
        collect with what it holds (stone, coal, iron… once it has a pickaxe), instead
        of walking around mountains; lava is never entered either way. Returns the old
        mode."""
        old, self._nav.tunnel = self._nav.tunnel, bool(on)
        return old

    def hostiles(self) -> tuple[tuple[str, int, int], ...]:
        """(kind, dx, dy) of every creature in view that can hurt the player, nearest first."""
        hostile = self._rules.hostile
        return tuple(c for c in self._obs.creatures if c[0] in hostile)

    def arrows(self) -> tuple[tuple[int, int, int, int], ...]:
        """(dx, dy, fx, fy) of every arrow in view, nearest first: it flies along (fx, fy)
        and enters (dx + fx, dy + fy) on the next step, so one with dx + fx == dy + fy == 0
        hits the player unless it steps off the arrow's line now; a walk should not step
        into a tile an arrow enters next."""
        return tuple(self._obs.missiles)

    def sleeping(self) -> bool:
        """Whether the player is asleep (it ignores actions until it wakes)."""
        return bool(self._obs.sleeping)

    # ------------------------------------------------------------------ movement

    def path_to(self, kind: str, patience: int = DEFAULT_PATIENCE) -> Iterator[str]:
        """Walk until next to a ``kind`` (exploring while none is known); True on arrival."""
        return self._walk(kind, lambda pos, d: self._nav.adjacent_to(pos, kind), patience)

    def approach(self, kind: str, patience: int = DEFAULT_PATIENCE) -> Iterator[str]:
        """Walk until facing a ``kind`` (exploring while none is known); True when facing."""
        return self._walk(kind, lambda pos, d: self._nav.is_kind(add(pos, d), kind), patience)

    def walk_to(self, dx: int, dy: int, patience: int = DEFAULT_PATIENCE) -> Iterator[str]:
        """Walk until facing the tile at offset ``(dx, dy)`` from where the player is
        now (e.g. a plant it placed, remembered via :meth:`position`); True when facing."""
        px, py = self._obs.position
        target = (px + dx, py + dy)
        return self._walk(("at", target), lambda pos, d: add(pos, d) == target, patience)

    def face(self, kind: str) -> Iterator[str]:
        """Turn towards an adjacent ``kind`` without walking; True when facing it."""
        if self.facing_tile() == kind:
            return True
        pos = self._obs.position
        for d, action in DIRECTIONS.items():
            target = add(pos, d)
            if self._nav.is_kind(target, kind) and not self._nav.enterable(target):
                # Moving towards a tile one cannot enter only turns the player.
                yield action
                return self.facing_tile() == kind
        return False

    def explore(self, steps: int, toward: str | None = None) -> Iterator[str]:
        """Walk ``steps`` steps towards unseen ground; with ``toward`` (a tile kind, e.g.
        'stone' for mountains), prefer unseen ground next to that kind."""
        for _ in range(steps):
            action = self._threat_action() or self._nav.explore_action(toward)
            if action is None:
                return False
            yield self._nav.shield(action)
        return True

    # ------------------------------------------------------------------ interaction

    def attack(self, times: int = 1) -> Iterator[str]:
        """Interact with whatever is in front ``times`` times (Crafter's 'do')."""
        for _ in range(times):
            yield "do"
        return True

    def defend(self, patience: int = 30) -> Iterator[str]:
        """Fight zombies/skeletons next to the player until none is adjacent (or
        ``patience`` steps); True if there was anything to fight."""
        fought = False
        for _ in range(patience):
            action = self._threat_action(force=True)
            if action is None:
                break
            fought = True
            yield action
        return fought

    def enclosed(self) -> bool:
        """Whether the player is walled in: no zombie can walk up to it (its pocket of
        at most two free tiles touches no walkable tile)."""
        return self._enclosed()

    def evade(self, steps: int = 1) -> Iterator[str]:
        """Step away from the hostiles in view for up to ``steps`` steps (fighting one
        that is adjacent): to the free neighbouring tile furthest from them, off the rows
        and columns of skeletons (their arrows fly straight). True if there was
        anything to evade."""
        moved = False
        for _ in range(steps):
            action = self._threat_action(force=True) or self._evade_action()
            if action is None:
                break
            moved = True
            yield action
        return moved

    def _evade_action(self) -> str | None:
        near = [(k, dx, dy) for k, dx, dy in self.hostiles() if abs(dx) + abs(dy) <= 6]
        if not near:
            return None
        pos = self._obs.position

        def danger(dx: int, dy: int) -> float:
            score = 0.0
            for kind, hx, hy in near:
                d = abs(hx - dx) + abs(hy - dy)
                score += 10.0 / (1 + d)
                if kind == "skeleton" and (hx == dx or hy == dy) and d <= 5:
                    score += 3.0
            return score

        best, best_score = None, danger(0, 0)
        for d, action in DIRECTIONS.items():
            target = add(pos, d)
            if not self._nav.passable(target) or self._memory.get(target) in self._rules.deadly:
                continue
            score = danger(*d)
            if score < best_score - 1e-9:
                best, best_score = action, score
        return best

    def collect(self, kind: str, n: int = 1, patience: int = DEFAULT_PATIENCE) -> Iterator[str]:
        """Go to ``kind`` and 'do' on it until it gave ``n`` times; True on success.

        Tiles give items (tree → wood, water → drink); creatures count the achievement
        the hit aims at (cow → eat_cow, zombie → defeat_zombie). Returns False at once
        when a required tool is missing, and after ``patience`` steps without success.
        """
        rule = self._rules.collect.get(kind)
        goal = self._rules.creature_goals.get(kind)
        if rule is None and goal is None:
            return False
        if rule is not None and not self._has(rule.get("require", {})):
            return False
        got, budget = 0, patience
        while got < n and budget > 0:
            threat = self._threat_action()
            if threat is not None and kind not in self._rules.hostile:
                yield threat
                budget -= 1
                continue
            if self.facing_tile() != kind:
                start = self._steps
                ok = yield from self.approach(kind, patience=budget)
                budget -= max(1, self._steps - start)  # always progress
                if not ok:
                    return False
                continue
            before = self._gain_counter(kind, rule, goal)
            yield "do"
            budget -= 1
            after = self._gain_counter(kind, rule, goal)
            got += max(0, after[0] - before[0], after[1] - before[1])
        return got >= n

    def place(self, item: str, patience: int = DEFAULT_PATIENCE) -> Iterator[str]:
        """Place ``item`` on a free tile in front, walking to a suitable one; True on success."""
        rule = self._rules.place.get(item)
        action = f"place_{item}"
        if rule is None or action not in self._actions or not self._has(rule["uses"]):
            return False
        where = frozenset(rule["where"])
        budget = patience
        while budget > 0:
            threat = self._threat_action()
            if threat is not None:
                yield threat
                budget -= 1
                continue
            if (
                self.facing_tile() in where
                and self._nav.creature_at(add(self._obs.position, self._obs.facing)) is None
            ):
                before = self.inventory()
                yield action
                if self.inventory() != before:
                    return True
                budget -= 1
                continue
            start = self._steps
            ok = yield from self._walk(
                ("place", where),
                lambda pos, d: self._nav.placeable(add(pos, d), where),
                budget,
            )
            budget -= max(1, self._steps - start)  # always progress
            if not ok:
                return False
        return False

    def make(self, item: str, patience: int = DEFAULT_PATIENCE) -> Iterator[str]:
        """Walk next to the stations ``item`` needs and make it; True on success."""
        rule = self._rules.make.get(item)
        action = f"make_{item}"
        if rule is None or action not in self._actions or not self._has(rule["uses"]):
            return False
        stations = list(rule.get("nearby", []))
        if not all(self._nav.near(s) for s in stations):
            ok = yield from self._walk(
                ("near", tuple(stations)),
                lambda pos, d: all(self._nav.near(s, pos) for s in stations),
                patience,
                explore_for=stations[0] if stations else None,
            )
            if not ok:
                return False
        before = self.inventory().get(item, 0)
        yield action
        return self.inventory().get(item, 0) > before

    def shelter(self, patience: int = 60) -> Iterator[str]:
        """Wall the player in (for sleeping): walk to a nook within ``patience`` steps
        where two tiles in a row have solid walls around them, dig into it if needed,
        step back and block the way in with a stone. True when no zombie can reach the
        player (also when it already stands in such a nook); needs one stone."""
        if self._enclosed():
            return True
        stone = self._rules.place.get("stone")
        if stone is None or "place_stone" not in self._actions:
            return False
        budget = patience
        while budget > 0:
            diggable = self._nav.diggable() if self._nav.tunnel else frozenset()
            d = self._nook_at(self._obs.position, None, diggable)
            if d is not None:
                start = self._steps
                ok = yield from self._dig_in(d)
                budget -= max(1, self._steps - start)
                if ok:
                    return True
                continue
            if self._nav.grid is not None:  # the same goal as an array: the same plan
                found = self._nav.search_at(self._nav.nook_mask(diggable), dig=self._nav.tunnel)
            else:
                found = self._nav.search(
                    lambda pos, f, dg=diggable: self._nook_at(pos, f, dg) is not None,
                    dig=self._nav.tunnel,
                )
            if found is None or len(found) > budget:
                return False
            start = self._steps
            ok = yield from self._nav.follow(found, budget, interrupt=self._threat_action)
            budget -= max(1, self._steps - start)
        return self._enclosed()

    def rest(self, until: int | None = None, patience: int = 300) -> Iterator[str]:
        """Sleep until energy reaches ``until`` (default: full) or the player wakes up
        hurt; True when energy got there."""
        top = until if until is not None else 9
        for _ in range(patience):
            if self._obs.status.get("energy", 0) >= top and not self._obs.sleeping:
                return True
            if not self._obs.sleeping and self._steps > 0 and self._woken():
                return False
            yield "sleep"
        return self._obs.status.get("energy", 0) >= top

    # ------------------------------------------------------------------ internals

    def _woken(self) -> bool:
        # Crafter wakes a sleeping player when it gets hurt; a hostile next to it then.
        return any(abs(dx) + abs(dy) <= 1 for _, dx, dy in self.hostiles())

    def _threat_action(self, force: bool = False) -> str | None:
        """'do' on an adjacent zombie/skeleton, or the turn towards it (guard mode)."""
        if not (self._guard or force):
            return None
        hostile = self._rules.hostile
        fx, fy = self._obs.facing
        for kind, dx, dy in self._obs.creatures:
            if kind in hostile and abs(dx) + abs(dy) == 1:
                if (dx, dy) == (fx, fy):
                    return "do"
                return DIRECTIONS[(dx, dy)]  # occupied: moving towards it only turns
        dodge = self._dodge_action()
        if dodge is not None:
            return dodge
        # A zombie two tiles straight ahead steps next to us and hits at once: a stone
        # in between blocks its straight approach.
        ahead = (fx, fy)
        if self._obs.inventory.get("stone", 0) > 0 and "place_stone" in self._actions:
            where = self._rules.place.get("stone", {}).get("where", ())
            for kind, dx, dy in self._obs.creatures:
                if kind == "zombie" and (dx, dy) == (2 * fx, 2 * fy):
                    if self._obs.tile(*ahead) in where and self._obs.creature_at(*ahead) is None:
                        return "place_stone"
        return None

    def _dodge_action(self) -> str | None:
        """A missile about to enter the player's tile: the step onto a free tile none
        enters, across its flight if possible (the player moves before the missile
        does, so it flies past)."""
        pos = self._obs.position
        if not self._obs.missiles or not self._nav.struck(pos):
            return None
        flights = [
            (fx, fy) for dx, dy, fx, fy in self._obs.missiles if (dx + fx, dy + fy) == (0, 0)
        ]
        moves = sorted(
            DIRECTIONS.items(), key=lambda m: any(m[0][0] * fx + m[0][1] * fy for fx, fy in flights)
        )
        for d, action in moves:
            target = add(pos, d)  # passable: walkable (never lava), no creature there
            if self._nav.passable(target) and not self._nav.struck(target):
                return action
        return None

    def _nook_at(self, pos: Pos, facing: Pos | None, diggable: frozenset[str]) -> Pos | None:
        """A direction d from ``pos`` where pos+d and pos+2d can hold the player and all
        their other neighbours are solid, and pos itself can take a stone."""
        mouth = self._memory.get(pos)
        if mouth not in self._rules.place.get("stone", {}).get("where", ()):
            if mouth not in diggable:  # a dug tile takes a stone again
                return None
        stone = self._obs.inventory.get("stone", 0)
        for d in DIRECTIONS:
            x1, x2 = add(pos, d), add(pos, (2 * d[0], 2 * d[1]))
            inner = (self._memory.get(x1), self._memory.get(x2))
            if any(t not in self._rules.walkable and t not in diggable for t in inner):
                continue
            if any(self._nav.creature_at(x) is not None for x in (x1, x2)):
                continue
            if stone < 1 and not any(t in diggable for t in inner):
                continue
            side = (d[1], d[0])
            walls = (
                add(x1, side), add(x1, (-side[0], -side[1])),
                add(x2, side), add(x2, (-side[0], -side[1])), add(x2, d),
            )  # fmt: skip
            if all(self._solid(w) for w in walls):
                return d
        return None

    def _solid(self, pos: Pos) -> bool:
        tile = self._memory.get(pos)
        if tile is None or tile in self._rules.walkable or tile in self._rules.deadly:
            return False
        return self._nav.creature_at(pos) is None

    def _enclosed(self) -> bool:
        """No walkable tile next to the player's pocket (itself plus free neighbours, ≤2)."""
        pos = self._obs.position
        pocket = {pos}
        frontier = [pos]
        while frontier:
            p = frontier.pop()
            for d in DIRECTIONS:
                q = add(p, d)
                if q in pocket or self._solid(q):
                    continue
                if self._memory.get(q) in self._rules.deadly:
                    continue
                pocket.add(q)
                frontier.append(q)
                if len(pocket) > 2:
                    return False
        return True

    def _dig_in(self, d: Pos) -> Iterator[str]:
        """From a nook's mouth: enter two tiles along ``d``, step back, place a stone."""
        back = (-d[0], -d[1])
        for _ in range(2):
            for _ in range(4):
                target = add(self._obs.position, d)
                if self._nav.passable(target):
                    break
                if self._memory.get(target) in self._rules.deadly:
                    return False
                if self._obs.facing != d:
                    yield DIRECTIONS[d]
                else:
                    yield "do"
            before = self._obs.position
            yield DIRECTIONS[d]
            if self._obs.position == before:
                return False
        yield DIRECTIONS[back]
        if self._obs.facing != back:
            return False
        for _ in range(12):
            if self._enclosed():
                return True
            if self._obs.inventory.get("stone", 0) < 1:
                return False
            mouth = add(self._obs.position, back)
            creature = self._nav.creature_at(mouth)
            if creature is not None and creature not in self._rules.hostile:
                return False
            # A zombie in the way takes the stone's place: hit it until it is gone.
            yield "do" if creature is not None else "place_stone"
        return self._enclosed()

    def _observe(self, obs: Observation, info: Mapping[str, Any] | None = None) -> None:
        """Take in the observation after a reset or a step (called by the driver)."""
        now = self._steps + (info is not None)
        self._nav.observe(obs, now)
        self._note_sightings(obs, now)
        if info is not None:
            for name in info.get("achievements", ()):
                self._achievements[name] = self._achievements.get(name, 0) + 1

    def _note_sightings(self, obs: Observation, now: int) -> None:
        """Keep where harmless creatures were seen at step ``now``; forget those gone."""
        px, py = obs.position
        sightings = self._sightings
        if sightings:
            rows, cols = len(obs.view), len(obs.view[0]) if len(obs.view) else 0
            for key in [k for k in sightings if abs(k[0] - px) <= cols // 2]:
                if abs(key[1] - py) <= rows // 2 and key not in self._creature_map:
                    del sightings[key]  # in view, and gone
        hostile = self._rules.hostile
        for key, kind in self._creature_map.items():
            if kind not in hostile and kind != "arrow":
                sightings[key] = (kind, now)
        if len(sightings) > 200:
            oldest = sorted(sightings, key=lambda k: sightings[k][1])[: len(sightings) - 200]
            for key in oldest:
                del sightings[key]

    def _has(self, uses: Mapping[str, int]) -> bool:
        inventory = self._obs.inventory
        return all(inventory.get(k, 0) >= v for k, v in uses.items())

    def _gain_counter(self, kind: str, rule: Mapping | None, goal: str | None) -> Pos:
        """(items held, achievements counted) that a hit on ``kind`` raises: the
        achievement counts even when the item is at its maximum (drink at 9)."""
        if goal is not None:
            return (self._achievements.get(goal, 0), 0)
        total = counted = 0
        for item in rule["receive"]:
            total += int(self._obs.inventory.get(item, self._obs.status.get(item, 0)))
            counted += self._achievements.get(f"collect_{item}", 0)
        return (total, counted)

    def _walk(
        self, key: object, goal: Goal, patience: int, explore_for: str | None = None
    ) -> Iterator[str]:
        """The navigator's walk towards ``goal``, guard mode answering threats first."""
        return self._nav.walk(
            key, goal, patience, interrupt=self._threat_action, explore_for=explore_for
        )

    def _search(
        self, goal: Goal, order: Iterable[Pos] = tuple(DIRECTIONS), dig: bool = False
    ) -> Plan | None:
        """The navigator's shortest walk to ``goal`` (see :meth:`Navigator.search`); tests
        plan through Skills with it."""
        return self._nav.search(goal, order, dig)


# ---------------------------------------------------------------------- the driver

Policy = Callable[[Skills], Iterator[str]]
"""A coded policy: called with the skill API, yields primitive action names."""


@dataclasses.dataclass(frozen=True, slots=True)
class EpisodeResult:
    """driver → caller: how one coded-policy episode went."""

    success: bool
    """The success test held at the end (without one: the policy finished on its own)."""
    cause: str
    """Why it stopped: success, policy_finished, step_budget, episode_done, invalid_action,
    policy_error."""
    steps: int
    """Primitive actions applied to the world."""
    reward: float
    """Summed world reward."""
    achievements: dict[str, int]
    """Achievement → times it happened this episode."""
    inventory: dict[str, int]
    """Inventory at the end."""
    status: dict[str, float]
    """Vital statistics at the end."""
    trace: tuple[tuple[str, int], ...]
    """Actions run-length encoded: ((action, repeats), ...)."""
    events: tuple[tuple[int, str], ...]
    """(step, achievement) for every achievement as it happened."""
    error: str | None = None
    """For invalid_action / policy_error: what went wrong, in one line."""


def run_unsandboxed(
    world: World,
    policy: Policy,
    max_steps: int = 500,
    *,
    seed: int | None = None,
    success: Callable[[Skills], bool] | None = None,
    on_step: Callable[[float, Mapping[str, Any], bool], object] | None = None,
) -> EpisodeResult:
    """Reset ``world`` and run trusted ``policy`` in-process, without the sandbox, for at
    most ``max_steps`` primitive actions.

    ``success`` is tested after every step and ends the episode as soon as it holds.
    ``on_step(reward, info, done)`` sees every step (e.g. ``StatsWriter.record``).
    """
    obs = world.reset(seed)
    skills = Skills(obs, world.action_names, seed=seed or 0)
    valid = frozenset(world.action_names)
    trace: list[list[Any]] = []
    events: list[tuple[int, str]] = []
    total_reward, steps, cause, error = 0.0, 0, STEP_BUDGET, None
    try:
        actions = iter(policy(skills))
    except Exception as exc:  # untrusted policy code: any failure is its own
        actions = iter(())
        cause, error = POLICY_ERROR, f"{type(exc).__name__}: {exc}"
        max_steps = 0
    while steps < max_steps:
        if success is not None and success(skills):
            cause = SUCCESS
            break
        try:
            action = next(actions)
        except StopIteration:
            cause = POLICY_FINISHED
            break
        except Exception as exc:  # untrusted policy code: any failure is its own
            cause, error = POLICY_ERROR, f"{type(exc).__name__}: {exc}"
            break
        if not isinstance(action, str) or action not in valid:
            cause, error = INVALID_ACTION, f"not an action name: {action!r:.80}"
            break
        obs, reward, done, info = world.step(action)
        steps += 1
        total_reward += reward
        skills._observe(obs, info)
        if trace and trace[-1][0] == action:
            trace[-1][1] += 1
        else:
            trace.append([action, 1])
        events.extend((steps, name) for name in info.get("achievements", ()))
        if on_step is not None:
            on_step(reward, info, done)
        if done:
            cause = EPISODE_DONE
            break
    close = getattr(actions, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # a policy's own cleanup failing changes nothing here
            pass
    if success is not None:
        ok = success(skills)
        if ok:
            cause = SUCCESS
    else:
        ok = cause == POLICY_FINISHED
    return EpisodeResult(
        success=ok,
        cause=cause,
        steps=steps,
        reward=total_reward,
        achievements=skills.achievements(),
        inventory=skills.inventory(),
        status=skills.status(),
        trace=tuple((a, n) for a, n in trace),
        events=tuple(events),
        error=error,
    )
