"""Setup once, train many: a process-local cache of the states right after setup code.

A learned sub-action trains from its *start*: the world after the coded stages before it
(its setup code, :mod:`rl.setup_code`) have run. That state is a function of the world
(kind and seed) and of the setup code, so it is made once — setup run through the
sandbox, its world steps counted then — and every later reset into the same world
restores it instead (unpickled from bytes kept in this process, ~1.3 ms; no world step
taken, nothing counted).
Versions of one sub-action share entries: the key holds the setup's code, never the
learned sub-action's own code, reward or options.

What one entry holds (:class:`StartState`): the world's whole state (Crafter's map
arrays, objects with their health and cooldowns, the player with inventory, vitals,
achievements and facing, the world's random generator, the step counter and daylight,
the env's unlocked set and last health), the last observation, the episode's
achievement counts and the skill object of the episode (its remembered map, sightings,
plan and random generator) — everything :class:`~rl.rl_env.SubtaskEnv` carries over
from setup. A world whose setup failed is cached too (:class:`FailedSetup`): a reset
into it fails again at once, with the same reason, without a step.

Counting: the setup's world steps are counted (kind ``setup``) by the reset that made the
state, and that reset's world episode books what setup unlocked; a restored reset takes
no step, counts none, and its episode books only its own steps and what it unlocks after
the start (:meth:`~rl.rl_env.SubtaskEnv.take_world_episodes`), so the run's step count
and scoreboard hold each world step and each achievement once, as the worlds' own tallies
(``RLGPT_STEP_TALLY``) see them.

The key (:func:`start_key`): the world's kind and shape (Crafter's area, size — which
fixes how many random values a night step draws — and episode length), the world seed,
the sha256 of the setup code, and the setup's step and wall-clock budgets. The skills'
seed is the world seed and their rules are Crafter's, so both are in the key already.
The learned sub-action's subtask plays no part in setup (its test is checked only
after), so it is not in the key.

Memory: one Crafter entry is ~150–200 KB of bytes (:meth:`StartState.nbytes`), measured
on the diamond chain's setups (make_stone_pickaxe to collect_diamond), most of it the
world's map arrays and objects (as live objects it would be ~250 KB, and thousands of
objects for the garbage collector to walk). The default of 512 entries bounds the cache
near 100 MB per process and holds two sub-actions' training pools (200 worlds each,
``[training] train_worlds``) with their retries and held-out worlds; the least recently
used entry goes first. ``RLGPT_START_STATES`` sets the number of entries (0 turns the
cache off).

Only Crafter worlds are cached (:func:`world_key` is None for any other world: their
state is not known to this module).

Evaluation uses the same cache: a composed episode from a start
(``RolloutRequest.start_at``, :func:`episodes.composite.run_composed`) saves the world when
the planner reaches the stage under test, with the planner's own state as ``extra``
(:func:`save_start`, :func:`restore_state`), keyed by a digest of the stages before it,
the needs and the episode's test (:func:`episodes.composite.composed_start_key`); a runner
process keeps one cache (:func:`shared`) across requests, so every version of the stage
it evaluates plays the same starts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import pickle
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from sandbox import Failure
from skills.skills import Skills
from worlds.crafter_world import CrafterWorld
from worlds.world import Observation

START_STATES_ENV = "RLGPT_START_STATES"
"""Entries the process's shared cache keeps (default :data:`DEFAULT_ENTRIES`; 0: off)."""
DEFAULT_ENTRIES = 512
"""~200 KB each (see the module docstring): ~100 MB at most, room for two sub-actions'
training pools (200 worlds) with their retries and held-out worlds."""


@dataclasses.dataclass(frozen=True)
class StartState:
    """The state right after a successful setup, kept as bytes (:func:`save_start`):
    one object to keep (nothing for the garbage collector to walk), ~60 % of the
    objects' size, and restored by unpickling (~1.3 ms) rather than deep-copying
    (~3.5 ms). The bytes never leave this process."""

    blob: bytes
    """The world's state, the observation and the skills, pickled (:func:`save_start`)."""
    rules: Any
    """The skills' rules: shared by reference, not pickled (never changed)."""
    counts: dict[str, int]
    """Achievement counts of the episode so far (what setup unlocked)."""
    setup_steps: int
    """World steps the setup took when the state was made (counted then, once)."""

    def nbytes(self) -> int:
        """Bytes of the entry's state: what it costs to keep, give or take."""
        return len(self.blob)


@dataclasses.dataclass(frozen=True)
class FailedSetup:
    """A world whose setup failed: a reset into it fails again without a step."""

    steps: int
    """World steps the failed setup took when it was tried (counted then, once)."""
    reason: str
    """The :class:`~rl.rl_env.SetupError`'s reason."""
    failure: Failure | None
    """The sandbox failure, None when the player died."""


Entry = StartState | FailedSetup


class StartStates:
    """A bounded LRU map from :func:`start_key` to :class:`StartState` / :class:`FailedSetup`.

    Thread-safe (a learner's envs may be stepped from worker threads). ``max_entries``
    0 keeps nothing."""

    def __init__(self, max_entries: int = DEFAULT_ENTRIES) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, not {max_entries}")
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.made = 0
        """Entries stored (successful setups and failed ones)."""
        self.restored = 0
        """Lookups answered from the cache (successful states and known failures)."""
        self.evicted = 0
        """Entries dropped to stay within ``max_entries``."""
        self._worked: set[Hashable] = set()
        """The setups (a key without its world) that made a start here, in any world."""

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.restored += 1
            return entry

    def put(self, key: Hashable, entry: Entry) -> None:
        if self.max_entries == 0:
            return
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            self.made += 1
            if isinstance(entry, StartState):
                self._worked.add(_setup_of(key))
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
                self.evicted += 1

    def worked(self, key: Hashable) -> bool:
        """Whether the setup of ``key`` made a start in some world (evicted or not)."""
        with self._lock:
            return _setup_of(key) in self._worked

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._worked.clear()
            self.made = self.restored = self.evicted = 0

    def stats(self) -> dict[str, int]:
        """Entries held, made, restored and evicted (for logs and benchmarks)."""
        return {
            "entries": len(self._entries),
            "made": self.made,
            "restored": self.restored,
            "evicted": self.evicted,
        }


_shared: StartStates | None = None
_shared_lock = threading.Lock()


def shared() -> StartStates:
    """The process's cache, sized by ``RLGPT_START_STATES`` when first asked for: every
    env of a learner process (and every job it runs) shares it."""
    global _shared
    with _shared_lock:
        if _shared is None:
            raw = os.environ.get(START_STATES_ENV, str(DEFAULT_ENTRIES))
            try:
                entries = int(raw)
            except ValueError:
                raise ValueError(
                    f"{START_STATES_ENV}={raw!r} is not a whole number: set it to the entries"
                    f" the start-state cache keeps (0 turns it off; default {DEFAULT_ENTRIES})"
                ) from None
            if entries < 0:
                raise ValueError(f"{START_STATES_ENV} must be >= 0, not {entries}")
            _shared = StartStates(entries)
        return _shared


def resolve(start_states: StartStates | bool | None) -> StartStates | None:
    """What an env's ``start_states`` argument means: True the process's shared cache
    (what survives pickling into a subprocess), an instance itself, None/False none."""
    if start_states is True:
        cache = shared()
        return cache if cache.max_entries > 0 else None
    if start_states is None or start_states is False:
        return None
    if not isinstance(start_states, StartStates):
        raise TypeError(f"start_states must be a StartStates, True or None, not {start_states!r}")
    return start_states


def world_key(world: Any) -> tuple | None:
    """What the start depends on in the world besides its seed; None: not cacheable."""
    if type(world) is not CrafterWorld:
        return None
    env = world._env
    return ("crafter", tuple(env._area), tuple(env._size), int(env._length), world._pixels)


def _setup_of(key: Hashable) -> Hashable:
    """A :func:`start_key` without its world seed: which setup, in which kind of world."""
    return key[:1] + key[2:] if isinstance(key, tuple) else key


def start_key(
    world: Any, world_seed: int, setup_code: str, max_steps: int, wall_s: float
) -> tuple | None:
    """The cache key of the start of ``world_seed`` after ``setup_code`` (None when the
    world cannot be cached)."""
    kind = world_key(world)
    if kind is None:
        return None
    digest = hashlib.sha256(setup_code.encode()).hexdigest()
    return (kind, int(world_seed), digest, int(max_steps), float(wall_s))


# ---------------------------------------------------------------------- Crafter's state


def save_start(
    world: CrafterWorld,
    obs: Observation,
    skills: Skills | None,
    counts: dict[str, int],
    setup_steps: int,
    extra: Any = None,
) -> StartState:
    """Everything a Crafter episode goes on from, pickled: the world (map arrays, objects,
    the player, the random generator, daylight), Crafter's step counter, unlocked set
    and last health, our world's names, start and achievement counts, the observation
    and the skills. Not the world's lifetime step count (``steps_taken``) nor its tally
    file: those count steps, they are not state. The live world object itself (game
    objects point at it) and the skills' rules are saved as references. ``counts`` and
    ``setup_steps`` are the env's: the episode's achievement counts and setup's length.
    ``extra``: what else the caller goes on from (a composed episode's planner state,
    :mod:`episodes.composite`), pickled with the rest (:func:`restore_state` gives it back)."""
    env = world._env
    live = env._world
    state = {
        "world": live.__dict__,
        "player": env._player,
        "env": {
            "_step": env._step,
            "_episode": env._episode,
            "_seed": env._seed,
            "_last_health": env._last_health,
            "_unlocked": env._unlocked,
        },
        "names": world._names,
        "start": world._start,
        "counts": world._counts,
        "frame": world._frame,
        "obs": obs,
        "skills": skills,
        "extra": extra,
    }
    rules = skills._rules if skills is not None else None
    buffer = io.BytesIO()
    _Pickler(buffer, {id(live): "world", id(rules): "rules"}).dump(state)
    return StartState(buffer.getvalue(), rules, dict(counts), setup_steps)


def restore_start(world: CrafterWorld, saved: StartState) -> tuple[Observation, Skills | None]:
    """Put ``world`` in the state ``saved`` holds; returns the observation and a fresh
    copy of the skills (``saved`` stays untouched)."""
    obs, skills, _ = restore_state(world, saved)
    return obs, skills


def restore_state(world: CrafterWorld, saved: StartState) -> tuple[Observation, Skills | None, Any]:
    """As :func:`restore_start`, and a fresh copy of the ``extra`` saved with it."""
    env = world._env
    live = env._world
    refs = {"world": live, "rules": saved.rules}
    fresh = _Unpickler(io.BytesIO(saved.blob), refs).load()
    live.__dict__.clear()
    live.__dict__.update(fresh["world"])
    env._player = fresh["player"]
    for name, value in fresh["env"].items():
        setattr(env, name, value)
    world._names = fresh["names"]
    world._start = fresh["start"]
    world._counts = fresh["counts"]
    world._frame = fresh["frame"]
    return fresh["obs"], fresh["skills"], fresh.get("extra")


class _Pickler(pickle.Pickler):
    """Pickles some objects as named references (the live world, the rules)."""

    def __init__(self, file: io.BytesIO, refs: dict[int, str]) -> None:
        super().__init__(file, protocol=5)
        self._refs = refs

    def persistent_id(self, obj: Any) -> str | None:
        return self._refs.get(id(obj))


class _Unpickler(pickle.Unpickler):
    """Loads what :class:`_Pickler` wrote, the named references resolved to ``refs``."""

    def __init__(self, file: io.BytesIO, refs: dict[str, Any]) -> None:
        super().__init__(file)
        self._refs = refs

    def persistent_load(self, pid: Any) -> Any:
        return self._refs[pid]
