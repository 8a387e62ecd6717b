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

Untrusted code reaches only public attributes (a sandbox refuses ``_``-prefixed names),
so everything the object keeps — the remembered map, the plan being followed — lives in
``_`` attributes, and every answer is a fresh copy built of str/int/float/tuple/dict.

:func:`run_policy` is the driver: it pulls actions from the policy, checks them against
the world's action names, steps the world, feeds the observation back to the skills and
records a compact trace in an :class:`EpisodeResult`.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from envs.world import VOID, Observation, World

Pos = tuple[int, int]
Plan = list[tuple[Pos, Pos]]
"""A walk: (direction to move, position the player must be at before the move)."""

DIRECTIONS: dict[Pos, str] = {
    (-1, 0): "move_left",
    (1, 0): "move_right",
    (0, -1): "move_up",
    (0, 1): "move_down",
}

# How far to look for a goal before giving up on planning: a few times Crafter's
# 64×64 map edge, so a goal anywhere on the known map is found.
MAX_SEARCH_NODES = 20000
# Steps a movement helper may take before it gives up and returns False; long enough
# to cross Crafter's map once and come back, short of an episode budget of 500+.
DEFAULT_PATIENCE = 300
# After a search for a target found no path, wait this many steps before searching
# again: the view reveals at most a 9-tile strip per step, rarely opening a route.
RESEARCH_AFTER = 8


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


def crafter_rules() -> Rules:
    """The rules read from Crafter's own data.yaml, so recipes are never hard-coded."""
    from crafter import constants

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
        self._memory: dict[Pos, str] = {}
        self._tile_counts: dict[str, int] = {}
        self._creature_map: dict[Pos, str] = {}
        self._no_path: dict[object, int] = {}
        self._achievements: dict[str, int] = {}
        self._steps = 0
        self._plan: Plan = []
        self._plan_key: object = None
        self._heading: Pos = (0, 1)
        self._obs = obs
        self._observe(obs)

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

    # ------------------------------------------------------------------ movement

    def path_to(self, kind: str, patience: int = DEFAULT_PATIENCE) -> Iterator[str]:
        """Walk until next to a ``kind`` (exploring while none is known); True on arrival."""
        return self._walk(kind, lambda pos, d: self._adjacent_to(pos, kind), patience)

    def approach(self, kind: str, patience: int = DEFAULT_PATIENCE) -> Iterator[str]:
        """Walk until facing a ``kind`` (exploring while none is known); True when facing."""
        return self._walk(kind, lambda pos, d: self._is_kind(_add(pos, d), kind), patience)

    def face(self, kind: str) -> Iterator[str]:
        """Turn towards an adjacent ``kind`` without walking; True when facing it."""
        if self.facing_tile() == kind:
            return True
        pos = self._obs.position
        for d, action in DIRECTIONS.items():
            target = _add(pos, d)
            if self._is_kind(target, kind) and not self._enterable(target):
                # Moving towards a tile one cannot enter only turns the player.
                yield action
                return self.facing_tile() == kind
        return False

    def explore(self, steps: int) -> Iterator[str]:
        """Walk ``steps`` steps towards unseen ground."""
        for _ in range(steps):
            action = self._explore_action()
            if action is None:
                return False
            yield action
        return True

    # ------------------------------------------------------------------ interaction

    def attack(self, times: int = 1) -> Iterator[str]:
        """Interact with whatever is in front ``times`` times (Crafter's 'do')."""
        for _ in range(times):
            yield "do"
        return True

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
            got += max(0, self._gain_counter(kind, rule, goal) - before)
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
            if self.facing_tile() in where:
                before = self.inventory()
                yield action
                return self.inventory() != before
            start = self._steps
            ok = yield from self._walk(
                ("place", where),
                lambda pos, d: self._placeable(_add(pos, d), where),
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
        for station in rule.get("nearby", []):
            if not self._near(station):
                ok = yield from self.path_to(station, patience=patience)
                if not ok:
                    return False
        before = self.inventory().get(item, 0)
        yield action
        return self.inventory().get(item, 0) > before

    # ------------------------------------------------------------------ internals

    def _observe(self, obs: Observation, info: Mapping[str, Any] | None = None) -> None:
        """Take in the observation after a reset or a step (called by the driver)."""
        self._obs = obs
        px, py = obs.position
        self._creature_map = {(px + dx, py + dy): kind for kind, dx, dy in obs.creatures}
        (cx, cy), names = obs.center, obs.names
        memory, counts = self._memory, self._tile_counts
        for row_index, row in enumerate(obs.view.tolist()):
            y = py + row_index - cy
            for col_index, tile in enumerate(row):
                key, name = (px + col_index - cx, y), names[tile]
                old = memory.get(key)
                if old != name:
                    memory[key] = name
                    counts[name] = counts.get(name, 0) + 1
                    if old is not None:
                        counts[old] -= 1
        if info is not None:
            self._steps += 1
            for name in info.get("achievements", ()):
                self._achievements[name] = self._achievements.get(name, 0) + 1

    def _has(self, uses: Mapping[str, int]) -> bool:
        inventory = self._obs.inventory
        return all(inventory.get(k, 0) >= v for k, v in uses.items())

    def _gain_counter(self, kind: str, rule: Mapping | None, goal: str | None) -> int:
        if goal is not None:
            return self._achievements.get(goal, 0)
        total = 0
        for item in rule["receive"]:
            total += int(self._obs.inventory.get(item, self._obs.status.get(item, 0)))
        return total

    def _creature_at(self, pos: Pos) -> str | None:
        return self._creature_map.get(pos)

    def _is_kind(self, pos: Pos, kind: str) -> bool:
        creature = self._creature_at(pos)
        if creature is not None:
            return creature == kind
        return self._memory.get(pos) == kind

    def _adjacent_to(self, pos: Pos, kind: str) -> bool:
        return any(self._is_kind(_add(pos, d), kind) for d in DIRECTIONS)

    def _near(self, station: str) -> bool:
        # Crafter's make checks the 3×3 square around the player, diagonals included.
        px, py = self._obs.position
        return any(
            self._memory.get((px + dx, py + dy)) == station
            for dx in (-1, 0, 1)
            for dy in (-1, 0, 1)
        )

    def _placeable(self, pos: Pos, where: frozenset[str]) -> bool:
        return self._memory.get(pos) in where and self._creature_at(pos) is None

    def _enterable(self, pos: Pos) -> bool:
        """Whether moving into ``pos`` moves the player there (as far as it knows)."""
        tile = self._memory.get(pos)
        return (tile in self._rules.walkable or tile in self._rules.deadly) and (
            self._creature_at(pos) is None
        )

    def _passable(self, pos: Pos) -> bool:
        """Whether planning may route through ``pos``: a known walkable tile, no creature."""
        return self._memory.get(pos) in self._rules.walkable and self._creature_at(pos) is None

    def _walk(self, key: object, goal: Callable[[Pos, Pos], bool], patience: int) -> Iterator[str]:
        """Follow a plan towards a state where ``goal(pos, facing)`` holds; explore if none."""
        for _ in range(patience):
            pos, facing = self._obs.position, self._obs.facing
            if goal(pos, facing):
                return True
            action = self._next_planned(key, goal)
            if action is None:
                action = self._explore_action()
            if action is None:
                return False
            yield action
        return goal(self._obs.position, self._obs.facing)

    def _next_planned(self, key: object, goal: Callable[[Pos, Pos], bool]) -> str | None:
        # A plan stays valid while the player is where it expected and the next tile is
        # still free; creatures move, so plans towards them are made afresh every step.
        kind_moves = isinstance(key, str) and key in self._rules.creature_goals
        if self._plan_key != key or not self._plan_valid() or kind_moves:
            self._plan = self._search(goal) if self._worth_searching(key) else []
            self._plan = self._plan or []
            self._plan_key = key
            if not self._plan:
                self._no_path[key] = self._steps
        if not self._plan:
            self._plan_key = None
            return None
        d, _ = self._plan.pop(0)
        return DIRECTIONS[d]

    def _worth_searching(self, key: object) -> bool:
        # A full search costs milliseconds; skip it while the target was never seen, and
        # for a few steps after one failed (the map changes slowly while exploring).
        if isinstance(key, str) and not self._tile_counts.get(key):
            if not any(kind == key for kind, _, _ in self._obs.creatures):
                return False
        failed_at = self._no_path.get(key)
        return failed_at is None or self._steps - failed_at >= RESEARCH_AFTER

    def _plan_valid(self) -> bool:
        if not self._plan:
            return False
        d, expected = self._plan[0]
        if expected != self._obs.position:
            return False
        target = _add(expected, d)
        tile = self._memory.get(target)
        if tile in self._rules.deadly:
            return False
        # The last move may be a turn towards a solid tile; earlier ones must enter.
        return len(self._plan) == 1 or self._passable(target)

    def _search(
        self, goal: Callable[[Pos, Pos], bool], order: Iterable[Pos] = tuple(DIRECTIONS)
    ) -> Plan | None:
        """Breadth-first search over known tiles for the shortest walk to ``goal``.

        A move into a passable tile enters it; a move towards anything else turns the
        player in place. ``goal(pos, facing)`` is tested after each such move.
        """
        start = self._obs.position
        parents: dict[Pos, tuple[Pos, Pos] | None] = {start: None}
        queue = deque([start])
        deadly = self._rules.deadly
        order = tuple(order)
        while queue and len(parents) < MAX_SEARCH_NODES:
            pos = queue.popleft()
            for d in order:
                target = (pos[0] + d[0], pos[1] + d[1])
                if self._memory.get(target) in deadly:
                    continue
                enters = self._passable(target)
                landed = target if enters else pos
                if goal(landed, d):
                    return _unwind(parents, pos) + [(d, pos)]
                if enters and target not in parents:
                    parents[target] = (pos, d)
                    queue.append(target)
        return None

    def _explore_action(self) -> str | None:
        """One step towards the nearest edge of the known map (None: all explored).

        The plan is kept until walked out, and the search tries the last heading first,
        so the player sweeps on in one direction instead of dithering between edges.
        """
        if self._plan_key == "explore" and self._plan_valid():
            d, _ = self._plan.pop(0)
            self._heading = d
            return DIRECTIONS[d]
        order = [self._heading] + [d for d in DIRECTIONS if d != self._heading]
        self._plan = self._search(lambda pos, d: self._at_frontier(pos), order) or []
        self._plan_key = "explore"
        if not self._plan:
            return None
        d, _ = self._plan.pop(0)
        self._heading = d
        return DIRECTIONS[d]

    def _at_frontier(self, pos: Pos) -> bool:
        memory = self._memory
        return any((pos[0] + dx, pos[1] + dy) not in memory for dx, dy in DIRECTIONS)


def _add(a: Pos, b: Pos) -> Pos:
    return (a[0] + b[0], a[1] + b[1])


def _unwind(parents: Mapping[Pos, tuple[Pos, Pos] | None], pos: Pos) -> Plan:
    plan: Plan = []
    link = parents[pos]
    while link is not None:
        prev, d = link
        plan.append((d, prev))
        link = parents[prev]
    plan.reverse()
    return plan


# ---------------------------------------------------------------------- the driver

Policy = Callable[[Skills], Iterator[str]]
"""A coded policy: called with the skill API, yields primitive action names."""

# Failure causes an EpisodeResult reports (the critic reads these).
CAUSE_SUCCESS = "success"
CAUSE_FINISHED = "policy_finished"
CAUSE_BUDGET = "step_budget"
CAUSE_DONE = "episode_done"
CAUSE_INVALID = "invalid_action"
CAUSE_ERROR = "policy_error"


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


def run_policy(
    world: World,
    policy: Policy,
    max_steps: int = 500,
    *,
    seed: int | None = None,
    success: Callable[[Skills], bool] | None = None,
    on_step: Callable[[float, Mapping[str, Any], bool], object] | None = None,
) -> EpisodeResult:
    """Reset ``world`` and run ``policy`` for at most ``max_steps`` primitive actions.

    ``success`` is tested after every step and ends the episode as soon as it holds.
    ``on_step(reward, info, done)`` sees every step (e.g. ``StatsWriter.record``).
    """
    obs = world.reset(seed)
    skills = Skills(obs, world.action_names, seed=seed or 0)
    valid = frozenset(world.action_names)
    trace: list[list[Any]] = []
    events: list[tuple[int, str]] = []
    total_reward, steps, cause, error = 0.0, 0, CAUSE_BUDGET, None
    try:
        actions = iter(policy(skills))
    except Exception as exc:  # untrusted policy code: any failure is its own
        actions = iter(())
        cause, error = CAUSE_ERROR, f"{type(exc).__name__}: {exc}"
        max_steps = 0
    while steps < max_steps:
        if success is not None and success(skills):
            cause = CAUSE_SUCCESS
            break
        try:
            action = next(actions)
        except StopIteration:
            cause = CAUSE_FINISHED
            break
        except Exception as exc:  # untrusted policy code: any failure is its own
            cause, error = CAUSE_ERROR, f"{type(exc).__name__}: {exc}"
            break
        if not isinstance(action, str) or action not in valid:
            cause, error = CAUSE_INVALID, f"not an action name: {action!r:.80}"
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
            cause = CAUSE_DONE
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
            cause = CAUSE_SUCCESS
    else:
        ok = cause == CAUSE_FINISHED
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
