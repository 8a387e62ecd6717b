"""Crafter behind the :class:`~worlds.world.World` interface, without per-step rendering.

``crafter.Env.step`` renders a 64×64 RGB frame and copies the whole semantic map into
``info`` on every step; the frame costs most of the step. :class:`CrafterWorld` drives
the same ``crafter.Env`` internals (its world, player and chunk balancing — the loop in
``crafter/env.py``) and builds a tile-level :class:`~worlds.world.Observation` instead.

One subtlety keeps the dynamics identical to the stock env: at night Crafter's renderer
draws its noise overlay from the *world's* random generator, so rendering changes what
the creatures do next. When no frame is rendered we draw the same number of values from
that generator, which keeps seeds and action sequences reproducing the stock game
exactly (``tests/test_world_crafter.py`` checks this step by step).

One deliberate difference: the stock env picks which creature to despawn by indexing a
``set`` of objects, whose iteration order follows memory addresses, so two stock envs with
the same seed and actions can part ways (they do, e.g. seed 2 after ~170 random steps).
We hand the chunk's objects over in the order they were added to the world — one of the
orders the stock game can produce — which makes episodes reproducible from their seed.

The map itself (``info['semantic']``, the world's material map) never leaves this module.
"""

from __future__ import annotations

import copy
import os
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import get_args

import crafter
import numpy as np
from crafter import constants

from messages.task import Vital
from worlds.world import VOID, Observation, StepResult, UnknownActionError, freeze_view

# Generating a Crafter world runs per-tile Python noise code: ~0.1 s, most of a short
# episode's cost. Worlds reset by seed are kept (a pristine copy, ~50 KB each) and
# restored by copying (~1.5 ms), so training on a pool of worlds pays generation once
# per world. 1,024 worlds is ~50 MB, larger than any training pool we use.
# RLGPT_WORLD_CACHE=0 turns the cache off (benchmarks do, to time generation honestly).
WORLD_CACHE_SIZE = int(os.environ.get("RLGPT_WORLD_CACHE", "1024"))
_WORLDS: OrderedDict[tuple, dict] = OrderedDict()
# Stands for "the world that restores this copy" inside cached copies: game objects point
# at their world, and a copy must point at whichever live world it is restored into.
_THIS_WORLD = object()

STEP_TALLY_ENV = "RLGPT_STEP_TALLY"
"""A folder: when set, every :class:`CrafterWorld` keeps its own step count in a file
there (``<pid>-<n>.steps``, rewritten in place every step), so a test can add up every
world step of a run, whichever process took it, and compare with what the run booked.
Off by default (it costs a system call per step)."""
_tallies = 0

VITALS: tuple[str, ...] = tuple(k for k in constants.items if k in get_args(Vital))
"""Crafter keeps these in the inventory; we report them as status instead, in Crafter's
own order (health, food, drink, energy), which a learned policy's status vector follows."""

# Crafter's default local view: a 9×9 grid of which the bottom 2 rows show the inventory,
# leaving 9 columns × 7 rows of world (see crafter.Env.__init__, item_rows).
VIEW_COLS, VIEW_ROWS = 9, 7


def spawn_ordered(world: crafter.engine.World, objs: Iterable[object]) -> list:
    """The objects of one chunk in the order they were added to ``world``.

    ``world._obj_map`` holds each object's index in the world's object list, which grows
    as objects are added; sorting by it gives a deterministic, address-free order.
    """
    obj_map = world._obj_map
    return sorted(objs, key=lambda obj: int(obj_map[obj.pos[0], obj.pos[1]]))


def _open_tally() -> int | None:
    folder = os.environ.get(STEP_TALLY_ENV)
    if not folder:
        return None
    global _tallies
    _tallies += 1
    path = os.path.join(folder, f"{os.getpid()}-{_tallies}.steps")
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)


def tallied_steps(folder: str | os.PathLike) -> int:
    """The steps every world counted in ``folder`` (see :data:`STEP_TALLY_ENV`)."""
    total = 0
    for name in os.listdir(folder):
        if name.endswith(".steps"):
            with open(os.path.join(folder, name), "rb") as file:
                text = file.read().strip()
            total += int(text) if text else 0
    return total


class CrafterWorld:
    """Crafter as a :class:`~worlds.world.World`.

    Args:
        pixels: render the RGB frame on every step, as the stock env does (slow); when
            False, :meth:`render` still returns the current frame on request.
        length: episode length limit in steps (Crafter's default, 10000).
        size: pixel size of rendered frames.
    """

    def __init__(
        self,
        *,
        pixels: bool = False,
        length: int = 10000,
        area: tuple[int, int] = (64, 64),
        size: tuple[int, int] = (64, 64),
    ) -> None:
        self._env = crafter.Env(area=area, size=size, length=length, reward=True, seed=0)
        self._pixels = pixels
        self._frame: np.ndarray | None = None
        self._action_names = tuple(constants.actions)
        self._action_set = frozenset(self._action_names)
        self._achievement_names = tuple(constants.achievements)
        # The renderer's noise overlay is drawn over the local-view canvas, whose size is
        # the view grid in tiles times the pixel unit (crafter.engine.LocalView.__call__).
        unit = np.array(size) // self._env._view
        self._noise_shape = (int(VIEW_COLS * unit[0]), int(VIEW_ROWS * unit[1]))
        self._names: tuple[str, ...] = ()
        self._start = (0, 0)
        self._counts: dict[str, int] = {}
        self.steps_taken = 0
        """Every step this world took, over all its episodes (the lowest-level count)."""
        self._tally = _open_tally()

    @property
    def action_names(self) -> Sequence[str]:
        return self._action_names

    @property
    def achievement_names(self) -> Sequence[str]:
        return self._achievement_names

    def reset(self, seed: int | None = None) -> Observation:
        """Start an episode; ``reset(s)`` builds the same world as ``crafter.Env(seed=s)``."""
        env = self._env
        if seed is not None:
            # crafter.Env seeds episode k with hash((seed, k)); a fresh env's first
            # episode is k=1, so restart the count to match crafter.Env(seed=seed).
            env._seed = seed
            env._episode = 0
        # ALGO LOGIC: crafter.Env.reset, minus the rendered frame.
        center = (env._world.area[0] // 2, env._world.area[1] // 2)
        env._episode += 1
        env._step = 0
        world = env._world
        key = (env._seed, env._episode, tuple(world.area)) if seed is not None else None
        cached = _WORLDS.get(key) if key is not None else None
        if cached is not None:
            # A world generated before: restore a copy of it as it was, random state
            # included, so what follows is exactly what a fresh generation would give.
            _WORLDS.move_to_end(key)
            fresh = copy.deepcopy(cached, memo={id(_THIS_WORLD): world})
            world.__dict__.clear()
            world.__dict__.update(fresh["world"])
            env._player = fresh["player"]
            env._update_time()
        else:
            world.reset(seed=hash((env._seed, env._episode)) % (2**31 - 1))
            env._update_time()
            env._player = crafter.objects.Player(world, center)
            world.add(env._player)
            crafter.worldgen.generate_world(world, env._player)
            if key is not None and WORLD_CACHE_SIZE > 0:
                _WORLDS[key] = copy.deepcopy(
                    {"world": world.__dict__, "player": env._player},
                    memo={id(world): _THIS_WORLD},
                )
                if len(_WORLDS) > WORLD_CACHE_SIZE:
                    _WORLDS.popitem(last=False)
        env._last_health = env._player.health
        env._unlocked = set()
        self._names = tuple(
            VOID if env._world._mat_names[i] is None else env._world._mat_names[i]
            for i in range(len(env._world._mat_names))
        )
        self._start = (int(env._player.pos[0]), int(env._player.pos[1]))
        self._counts = dict(env._player.achievements)
        self._frame = env.render() if self._pixels else None
        return self._observe()

    def step(self, action: str) -> StepResult:
        if action not in self._action_set:
            raise UnknownActionError(action, self._action_names)
        env = self._env
        player = env._player
        if player is None:
            raise RuntimeError("call reset() before step()")
        self.steps_taken += 1
        if self._tally is not None:
            os.pwrite(self._tally, b"%20d\n" % self.steps_taken, 0)
        # ALGO LOGIC: crafter.Env.step, with the frame rendered only when asked for.
        env._step += 1
        env._update_time()
        player.action = action
        reach = 2 * max(env._view)
        for obj in env._world.objects:
            # Same test as ``player.distance(obj) < reach`` (Manhattan distance, read
            # after earlier updates moved the player) on Python ints: numpy's version
            # was a third of the step.
            ppos, opos = player.pos, obj.pos
            if abs(int(opos[0]) - int(ppos[0])) + abs(int(opos[1]) - int(ppos[1])) < reach:
                obj.update()
        if env._step % 10 == 0:
            for chunk, objs in env._world.chunks.items():
                env._balance_chunk(chunk, spawn_ordered(env._world, objs))
        if self._pixels:
            self._frame = env.render()
        else:
            self._consume_render_randomness()
        reward = (player.health - env._last_health) / 10
        env._last_health = player.health
        unlocked = {
            name
            for name, count in player.achievements.items()
            if count > 0 and name not in env._unlocked
        }
        if unlocked:
            env._unlocked |= unlocked
            reward += 1.0
        gained: list[str] = []
        for name, count in player.achievements.items():
            gained.extend([name] * (count - self._counts[name]))
            self._counts[name] = count
        dead = player.health <= 0
        over = bool(env._length) and env._step >= env._length
        info = {
            "achievements": tuple(gained),
            "discount": 0.0 if dead else 1.0,
        }
        return self._observe(), float(reward), bool(dead or over), info

    def render(self) -> np.ndarray:
        """The RGB frame (H, W, 3) the stock env would show now."""
        if self._pixels and self._frame is not None:
            return self._frame.copy()
        # Rendering draws from the world's generator at night; put its state back so a
        # frame taken on request does not change the game.
        random = self._env._world.random
        state = random.get_state()
        try:
            return self._env.render()
        finally:
            random.set_state(state)

    def achievement_counts(self) -> dict[str, int]:
        """How many times each achievement happened this episode (what Crafter's stats count)."""
        return dict(self._counts)

    def _consume_render_randomness(self) -> None:
        # crafter.engine.LocalView._noise runs when daylight < 0.5 and draws one uniform
        # value per canvas pixel from world.random; draw the same amount, same call.
        if self._env._world.daylight < 0.5:
            self._env._world.random.uniform(32, 127, self._noise_shape)

    def _observe(self) -> Observation:
        env = self._env
        world = env._world
        player = env._player
        px, py = int(player.pos[0]), int(player.pos[1])
        ox, oy = VIEW_COLS // 2, VIEW_ROWS // 2
        x0, y0 = px - ox, py - oy
        area_w, area_h = world.area
        cx0, cx1 = max(x0, 0), min(x0 + VIEW_COLS, area_w)
        cy0, cy1 = max(y0, 0), min(y0 + VIEW_ROWS, area_h)
        view = np.zeros((VIEW_ROWS, VIEW_COLS), np.int16)  # 0 is VOID: beyond the edge
        # Crafter's maps are indexed [x, y]; the view is [row=y, col=x].
        view[cy0 - y0 : cy1 - y0, cx0 - x0 : cx1 - x0] = world._mat_map[cx0:cx1, cy0:cy1].T
        creatures = []
        ripe = []
        missiles = []
        window = world._obj_map[cx0:cx1, cy0:cy1]
        for ix, iy in zip(*np.nonzero(window), strict=True):
            obj = world._objects[window[ix, iy]]
            if obj is None or obj is player:
                continue
            dx, dy = int(cx0 + ix - px), int(cy0 + iy - py)
            creatures.append((type(obj).__name__.lower(), dx, dy))
            if getattr(obj, "ripe", False):
                ripe.append((dx, dy))
            if isinstance(obj, crafter.objects.Arrow):
                missiles.append((dx, dy, int(obj.facing[0]), int(obj.facing[1])))
        creatures.sort(key=lambda c: (abs(c[1]) + abs(c[2]), c[2], c[1]))
        inv = player.inventory
        return Observation(
            view=freeze_view(view),
            creatures=tuple(creatures),
            inventory={k: int(v) for k, v in inv.items() if k not in VITALS},
            status={k: float(inv[k]) for k in VITALS},
            facing=(int(player.facing[0]), int(player.facing[1])),
            daylight=float(world.daylight),
            position=(px - self._start[0], py - self._start[1]),
            names=self._names,
            sleeping=bool(player.sleeping),
            ripe=tuple(sorted(ripe, key=lambda d: (abs(d[0]) + abs(d[1]), d[1], d[0]))),
            missiles=tuple(sorted(missiles, key=lambda m: (abs(m[0]) + abs(m[1]), m[1], m[0]))),
        )
