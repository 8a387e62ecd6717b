"""The paper's RL interface: a gymnasium env built from an :class:`~messages.task.RLConfig`.

RL-GPT's fast agent does not train a policy itself; it writes an RL configuration — the
subtask and its success test, the observation, an action space of primitive actions plus
*coded high-level actions*, a reward function, and optional setup code — and a learner
trains PPO on it. :class:`SubtaskEnv` turns such a message into a ``gymnasium.Env``:

- **episode** — ``reset(seed)`` builds the world for that seed (the same seed, the same
  world), then runs ``setup_code`` (if any) through the sandbox to bring the world to the
  subtask's start. The episode *terminates* on success or death and *truncates* after
  ``subtask.max_steps`` primitive steps (setup steps excluded). ``reset()`` without a seed
  draws a fresh world seed from the env's seeded generator: one world per episode.
- **success** — every ``subtask.goal`` inventory count holds, or ``subtask.achievement``
  happened after setup. Reward ``success_reward`` on that step.
- **observation** — the parts named in ``config.observation``, each a flat float32 vector
  in [0, 1] (a ``spaces.Dict`` for SB3's ``MultiInputPolicy``, or one concatenated ``Box``
  with ``flatten=True`` for ``MlpPolicy``):

  ``view``       one-hot of the 9×7 local view, channel-last: per tile, one channel per
                 tile kind (13 for Crafter), one per creature kind (6: cow, zombie, …)
                 and one for any other creature; a creature sets its channel on top of
                 the tile it stands on. Index ``(row * 9 + col) * 20 + channel``; 63 × 20 =
                 1260 floats: a small MLP input that trains well on CPU, where a Box of
                 tile ids would ask the network to learn that id 6 and id 7 are unrelated.
  ``inventory``  item counts / 9 (Crafter caps every item at 9).
  ``status``     health, food, drink, energy / 9.
  ``facing``     one-hot of left, right, up, down (what 'do' hits).
  ``daylight``   0 (night) … 1 (day).
  ``map``        one-hot of the map the player remembers in a 15×15 square around it
                 (:data:`MAP_RADIUS`): 13 tile channels and one for "not seen this
                 episode"; 225 × 14 = 3150 floats. The skills' memory of what the
                 player saw (setup's walks included), as a coded stage navigates by.

  Everything comes from :class:`~worlds.world.Observation` and what the player saw —
  never the hidden world.
- **actions** — ``Discrete(len(primitives) + len(coded_actions))``: first the primitive
  actions (all of the world's when ``config.primitives`` is empty), then the coded
  actions. A coded action runs as an *option*: its ``run(skills)`` generator, in the
  sandbox, drives the world for up to ``max_steps`` primitive steps, until it returns, or
  until the episode ends. Options may yield any of the world's actions (the primitive
  list only limits what the learner picks directly). Each call starts the code afresh,
  unless the coded action is ``resumable`` (the stage's own coded policy is offered so):
  then a call stopped by the step cap leaves the generator suspended, and the next call
  of that action in the episode continues it; once its code finishes or fails, the next
  call starts it afresh, and every episode starts it afresh. What persists in any case
  is the :class:`~skills.skills.Skills` object of the episode, so the map remembered
  during earlier steps (primitive or coded) is there to plan with.
  A coded action failing in the sandbox (exception, timeout, invalid action) ends that
  option, not the episode: its steps so far stand, ``info["option_failure"]`` says why
  and ``info["option_failures"]`` counts them in the episode — a learner can use the
  action again, and the critic reads the count. An option that takes no step (it fails
  or returns at once) costs one idle step (``noop``) so that every ``env.step`` moves
  the world on and the step cap is always reached.
- **reward** — ``success_reward`` on the success step, plus ``reward(before, after)``
  from ``reward_code`` on *every primitive step*, an option's reward being the sum over
  its steps: the same world trajectory earns the same return whether it was walked with
  primitives or with options, and a per-step cost charges an option for the steps it
  spends. ``before``/``after`` are snapshots ``{"inventory", "status", "achievements"
  (counts this episode, setup included), "steps" (subtask steps so far)}``. A reward
  function that fails (or returns a non-finite or non-number) gives 0 for that step and
  is counted in ``info["reward_failures"]``.

- **counting** — every world step the env takes is counted (:attr:`SubtaskEnv.world_steps`;
  of them, setup's in :attr:`SubtaskEnv.setup_steps_total`, failed attempts included),
  and every world episode it started is kept as (length, world reward, achievement
  counts), setup included, for :meth:`SubtaskEnv.take_world_episodes`: a learner books
  them, so no step and no achievement of a training job goes unreported.

- **start states** — with a start-state cache (``start_states``, :mod:`rl.start_states`)
  setup runs once per world: the first reset into a world runs it (its steps counted,
  its episode booked with what setup unlocked), caches the state it leaves, and every
  later reset into that world restores that state — world, observation, achievement
  counts and skills exactly as setup left them — taking no step and counting none
  (``info["setup_steps"]`` is 0, ``info["start_restored"]`` True); such an episode books
  only its own steps and what it unlocked after the start. A world whose setup failed
  fails again at once (the same :class:`SetupError`, no step), so retries go on to the
  next world as before.

- **needs** — ``config.needs`` (:class:`~messages.task.NeedRule`): the run's survival
  needs, served inside training episodes as the final policy's task planner serves them
  (:mod:`episodes.composite`). After the agent's action, a need whose stat is below its
  threshold (not on cooldown) runs its code until the stat is back at ``until``, its code
  returns, or its cap (several due needs one after another, each once a step); an
  option the agent chose stops early when a need falls due, and after a need ran a
  resumable one starts afresh (as a learned stage the planner restarts in play). Its
  world steps belong to the agent's step: counted, rewarded by ``reward_code``, in
  ``info["primitive_steps"]`` (so in the SMDP discount), but not in the subtask's step
  cap (in play a stage's cap counts its own steps). A run that did not serve it, or took
  no step, puts it on cooldown for ``NEED_COOLDOWN_STEPS``; need code that fails counts
  in ``need_failures``, not the agent's ``option_failures``. So a learned sub-action
  trains where it will play: fed, rested and sheltered at night by the same code.

- **attach** — ``attach(world, obs, skills)`` takes over an episode already under way
  instead of resetting one (a composed policy, :mod:`episodes.composite`, hands the world to
  a learned sub-policy mid-episode): no reset, no setup; success, the step cap and the
  achievement counts run from the attach moment, and ``step`` then works as usual.

Errors: bad code in the config (syntax, forbidden constructs, a module body that fails,
a missing ``run``/``reward``) raises :class:`CodeError` at construction, with the
sandbox's :class:`~sandbox.Failure` (cause, detail, line). A setup that fails (the code
fails, the player dies, the step budget runs out) raises :class:`SetupError` from
``reset``, unless ``setup_retries`` allows trying further seeds derived from the asked
one (deterministically, so the same seed still gives the same episode), and after those,
for a pool-only env whose setup has worked before, ``setup_redraws`` further pool worlds.

Worlds: Crafter, and Minetest (``config.world = "minetest"``: a ``minetestserver`` of the
env's own, stopped by :meth:`SubtaskEnv.close`; the episode's skills are
:class:`~worlds.minetest.skills.VoxelSkills`, and ``view``, ``map``, ``inventory`` and
``status`` are the 3-D world's own parts, :mod:`rl.voxel_obs`: kinds of node counted by
direction instead of one-hot tiles). Any other world needs an explicit ``world_factory``
and ``layout``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, get_args

import gymnasium as gym
import numpy as np
from crafter import constants
from gymnasium import spaces

from messages import decode, encode
from messages.causes import TIMEOUT
from messages.task import NeedRule, ObservationPart, RLConfig
from rl.setup_code import NEED_COOLDOWN_STEPS
from rl.start_states import (
    FailedSetup,
    StartState,
    StartStates,
    restore_start,
    save_start,
    start_key,
)
from rl.start_states import resolve as resolve_start_states
from sandbox import (
    CompiledCode,
    Failure,
    Limits,
    Namespace,
    PolicyStepper,
    ReadOnlyProxy,
    SandboxError,
    compile_code,
    load,
)
from sandbox import run_policy as run_sandboxed
from skills.gridmap import UNKNOWN as UNKNOWN_TILE
from skills.skills import Skills
from worlds.crafter_world import VIEW_COLS, VIEW_ROWS, VITALS, CrafterWorld
from worlds.world import VOID, Observation, World

SETUP_SOURCE_CHARS = 2_000_000
"""Longest composed setup: up to ~20 stage modules of ~100k characters each (every one
was compiled on its own under the usual limit when it was evaluated)."""

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecEnv

    from rl.env_workers import EnvWorkers
    from rl.voxel_obs import VoxelParts

OBSERVATION_PARTS: tuple[str, ...] = get_args(ObservationPart)
"""The parts ``RLConfig.observation`` may name."""

MAP_RADIUS = 7
"""The ``map`` part: the remembered map (the skills' :class:`skills.gridmap.GridMap`) in a
square of side ``2·MAP_RADIUS + 1`` centred on the player, one channel per tile kind and
one for tiles not seen this episode; only what the player has seen, never the hidden
world. 15×15 reaches a view and a half: what a coded stage walks towards."""

FACINGS: tuple[tuple[int, int], ...] = ((-1, 0), (1, 0), (0, -1), (0, 1))
"""Order of the ``facing`` one-hot: left, right, up, down."""

# Crafter caps every inventory item at 9 (data.yaml, `max: 9`) and vitals run 0–9: /9
# maps both onto [0, 1]; larger counts (other worlds) are clipped.
COUNT_SCALE = 9.0
# Wall-clock budget of one option call, env steps included: a coded action of 50 steps
# takes ~50 ms (path planning ~1 ms a step); 5 s is far above that yet stops a hang
# before it stalls a PPO rollout, and stays clear of spurious trips on a loaded machine.
DEFAULT_OPTION_WALL_S = 5.0
# Reward functions run on every primitive step: 0.1 s is ~1000× a dict comparison.
DEFAULT_REWARD_WALL_S = 0.1
# Setup may gather resources across the map (e.g. wood for a table: ~10–60 steps);
# 2000 steps and 30 s leave plenty for chains of several subtasks.
DEFAULT_SETUP_MAX_STEPS = 2000
DEFAULT_SETUP_WALL_S = 30.0
# World seeds are drawn below 2**31 - 1, the range Crafter hashes seeds into.
MAX_SEED = 2**31 - 1
# Stride between the seeds tried after a failed setup: a large odd number keeps the
# retried worlds unrelated to the seeds of neighbouring vectorised envs (seed + i).
RETRY_SEED_STRIDE = 1_000_003
IDLE_ACTION = "noop"
"""What a step-less option costs (falls back to the first primitive without one)."""


class CodeError(ValueError):
    """Code in an RLConfig was refused by the sandbox (raised when the env is built)."""

    def __init__(self, part: str, failure: Failure) -> None:
        where = f" (line {failure.line})" if failure.line else ""
        super().__init__(f"{part}: {failure.cause}: {failure.detail}{where}")
        self.part = part
        """Which code: ``setup_code``, ``reward_code`` or ``coded_actions[i] 'name'``."""
        self.failure = failure
        """The sandbox's verdict: cause, detail, line, traceback."""


class SetupError(RuntimeError):
    """``setup_code`` could not bring the world to the subtask's start (from ``reset``)."""

    def __init__(self, seed: int, steps: int, reason: str, failure: Failure | None) -> None:
        super().__init__(f"setup failed for world seed {seed} after {steps} steps: {reason}")
        self.seed = seed
        """World seed of the (last) failed attempt."""
        self.steps = steps
        """Primitive steps the failed setup took."""
        self.reason = reason
        """What went wrong, in one line."""
        self.failure = failure
        """The sandbox failure when the code failed; None when the player died."""

    def __reduce__(self) -> tuple:
        # Picklable with its fields (an env worker sends it back to the learner).
        return (SetupError, (self.seed, self.steps, self.reason, self.failure))


@dataclasses.dataclass(frozen=True, slots=True)
class Layout:
    """Names that fix the observation's shape before any episode is played."""

    tile_names: tuple[str, ...]
    """Tile id → name, as ``Observation.names`` reports them."""
    creature_kinds: tuple[str, ...]
    """Creature kinds with a view channel of their own; others share an ``other`` channel."""
    inventory_names: tuple[str, ...]
    """Items of ``Observation.inventory``, in observation order."""
    status_names: tuple[str, ...]
    """Keys of ``Observation.status``, in observation order."""
    view_shape: tuple[int, int] = (VIEW_ROWS, VIEW_COLS)
    """(rows, cols) of the local view."""

    @property
    def view_channels(self) -> int:
        return len(self.tile_names) + len(self.creature_kinds) + 1


def crafter_layout() -> Layout:
    """Crafter's names, read from its own data (``crafter.constants``)."""
    return Layout(
        tile_names=(VOID, *constants.materials),
        # Every crafter.objects class a player can see (Fence exists, worldgen never adds it).
        creature_kinds=("cow", "zombie", "skeleton", "arrow", "plant", "fence"),
        inventory_names=tuple(k for k in constants.items if k not in VITALS),
        status_names=VITALS,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class _Option:
    name: str
    compiled: CompiledCode
    max_steps: int
    resumable: bool = False


def minetest_layout() -> Layout:
    """Minetest's names for the parts that keep them (:mod:`rl.voxel_obs`): its window's
    node names grow as the server meets them, so no tile list is fixed."""
    from rl.voxel_obs import INVENTORY, STATUS

    return Layout(
        tile_names=(), creature_kinds=(), inventory_names=INVENTORY, status_names=STATUS,
        view_shape=(0, 0),
    )  # fmt: skip


def _minetest_world() -> World:
    from worlds.minetest.world import PLAYER_RADIUS, UNCAPPED, MinetestWorld

    return MinetestWorld(radius=PLAYER_RADIUS, length=UNCAPPED)


WORLDS: dict[str, Callable[[], World]] = {"crafter": CrafterWorld, "minetest": _minetest_world}
"""The worlds with an RL backend: Crafter, and Minetest (a ``minetestserver`` of the env's
own, the window of the skills' reach). The MineDojo adapter is a stand-in, not for training."""


def _world_and_layout(
    config: RLConfig, world_factory: Callable[[], World] | None, layout: Layout | None
) -> tuple[Callable[[], World], Layout]:
    """The world and layout an env of ``config`` plays: its world's own unless given."""
    if world_factory is None:
        if config.world not in WORLDS:
            raise ValueError(
                f"world {config.world!r} has no RL backend (the MineDojo adapter is a"
                f" stand-in, not for training): use one of {sorted(WORLDS)} or pass"
                " world_factory and layout"
            )
        world_factory = WORLDS[config.world]
    if layout is None:
        if config.world == "minetest":
            layout = minetest_layout()
        elif config.world == "crafter":
            layout = crafter_layout()
        else:
            raise ValueError(f"pass a layout for world {config.world!r}")
    return world_factory, layout


@dataclasses.dataclass(frozen=True, slots=True)
class Budgets:
    """Wall-clock and step budgets of an env's code, per world."""

    option_wall_s: float
    setup_max_steps: int
    setup_wall_s: float


def world_budgets(world: str) -> Budgets:
    """Crafter's steps take ~1 ms and its options ~50 ms. A Minetest option walks up to
    150 steps with 3-D path planning between them (seconds), and a setup plays the whole
    chain before a deep step (the chain's own step budget, minutes)."""
    if world == "minetest":
        from worlds.minetest.templates import CHAIN_BUDGET

        return Budgets(option_wall_s=60.0, setup_max_steps=CHAIN_BUDGET, setup_wall_s=900.0)
    return Budgets(DEFAULT_OPTION_WALL_S, DEFAULT_SETUP_MAX_STEPS, DEFAULT_SETUP_WALL_S)


class SubtaskEnv(gym.Env):
    """One subtask of an :class:`RLConfig` as a gymnasium env (see the module docstring).

    Args:
        config: the fast agent's RL configuration.
        world_factory: builds the world (default: :class:`CrafterWorld` for
            ``config.world == "crafter"``; required for any other world).
        layout: observation names for a non-Crafter world.
        flatten: one ``Box`` of all parts (``MlpPolicy``) instead of a ``Dict``.
        seed: world seed of the first ``reset()`` called without one (vectorised envs
            use ``seed + i``); later episodes draw fresh seeds from it.
        option_wall_s: wall-clock budget of one coded-action call, its env steps included
            (None: the world's, :func:`world_budgets`).
        reward_wall_s: wall-clock budget of one ``reward(before, after)`` call.
        setup_max_steps, setup_wall_s: budgets of ``setup_code`` per reset (None: the
            world's).
        setup_retries: further seeds to try when setup fails before raising SetupError.
        setup_retry_stride: how far apart those seeds are (default
            :data:`RETRY_SEED_STRIDE`; a run's learner passes its seed table's).
        setup_redraws: with ``pool_only``, how many further pool worlds a reset draws
            when setup failed in a world and all its retries, once setup has made a start
            in this env or, per ``start_states``, for the same setup in this process, or
            when the last try died without a fault of the code (a setup whose code
            faulted and never worked still raises at once).
        world_pool: world seeds that seedless resets draw from (empty: a fresh world every
            episode). Crafter keeps generated worlds (``worlds.crafter_world``), so a pool
            pays world generation (~0.1 s) once per world instead of once per episode.
        pool_only: with a ``world_pool``, a seeded reset seeds the draw from the pool
            instead of playing the world of that seed: every episode is one of the pool's
            worlds (a learner's training envs, which PPO seeds with its own seed + i:
            the versions of a sub-action, seeded apart, then share every start).
        start_states: the start-state cache (:mod:`rl.start_states`): True for the
            process's shared one, or an instance; None (default) runs setup at every
            reset. With one, a world's setup runs (and is counted) once, and later resets
            into that world restore its state; a world whose setup failed fails again at
            once. Only Crafter worlds with setup code are cached.
        render_mode: ``"rgb_array"`` or None.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        config: RLConfig,
        *,
        world_factory: Callable[[], World] | None = None,
        layout: Layout | None = None,
        flatten: bool = False,
        seed: int | None = None,
        option_wall_s: float | None = None,
        reward_wall_s: float = DEFAULT_REWARD_WALL_S,
        setup_max_steps: int | None = None,
        setup_wall_s: float | None = None,
        setup_retries: int = 0,
        setup_retry_stride: int | None = None,
        setup_redraws: int = 0,
        world_pool: Sequence[int] = (),
        start_states: StartStates | bool | None = None,
        render_mode: str | None = None,
        pool_only: bool = False,
    ) -> None:
        self._own_world = world_factory is None
        world_factory, layout = _world_and_layout(config, world_factory, layout)
        budgets = world_budgets(config.world)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', not {render_mode!r}")
        self.config = config
        self.layout = layout
        self.render_mode = render_mode
        self._flatten = flatten
        self._option_wall_s = budgets.option_wall_s if option_wall_s is None else option_wall_s
        self._reward_wall_s = reward_wall_s
        self._setup_max_steps = (
            budgets.setup_max_steps if setup_max_steps is None else setup_max_steps
        )
        self._setup_wall_s = budgets.setup_wall_s if setup_wall_s is None else setup_wall_s
        self._setup_retries = setup_retries
        self._retry_stride = RETRY_SEED_STRIDE if setup_retry_stride is None else setup_retry_stride
        self._redraws = setup_redraws
        self._starts_made = 0
        self._pending_seed = seed
        self._world_pool = tuple(int(w) for w in world_pool)
        self._pool_only = pool_only and bool(self._world_pool)
        self._world = world_factory()
        self._world_actions = tuple(self._world.action_names)
        self._voxel: VoxelParts | None = None
        """Minetest's observation parts and the columns seen this episode (None: Crafter)."""
        if config.world == "minetest":
            from rl.voxel_obs import VoxelParts

            self._voxel = VoxelParts()

        self._compile_menu()
        self._make_spaces(flatten)
        self._start_states = resolve_start_states(start_states)
        self._init_state()

    def _compile_menu(self) -> None:
        """Check the subtask and primitives and compile what the config's code defines:
        the coded actions, the survival needs, ``setup_code`` and ``reward_code``;
        :attr:`action_names` is the menu PPO chooses from."""
        config = self.config
        self._check_subtask()
        self.primitives = self._check_primitives()
        self._options = tuple(self._compile_options())
        self._needs = tuple(self._compile_needs())
        self._need_cool = [0] * len(self._needs)
        self.needs_run = 0
        """Runs of survival needs inside this env's training steps (all episodes)."""
        self.need_failures = 0
        """Of them, runs whose code failed (not the agent's: not in option_failures)."""
        self._serving = False
        self.action_names: tuple[str, ...] = self.primitives + tuple(o.name for o in self._options)
        """Action index → name: the primitives first, then the coded actions."""
        if len(set(self.action_names)) != len(self.action_names):
            raise ValueError(f"action names must be unique: {self.action_names}")
        self._idle = IDLE_ACTION if IDLE_ACTION in self._world_actions else self.primitives[0]
        self._setup = self._compile_entry("setup_code", config.setup_code, "run", True)
        self._reward_code = self._compile_entry("reward_code", config.reward_code, "reward", False)

    def _make_spaces(self, flatten: bool) -> None:
        """The observation space (the parts the config observes, each a box of one-hot
        channels or counts; one flat box with ``flatten``) and the action space."""
        layout = self.layout
        self._parts = self._check_parts()
        self._tile_eye = np.eye(len(layout.tile_names), dtype=np.float32)
        self._map_eye = np.eye(len(layout.tile_names) + 1, dtype=np.float32)
        self._creature_channel = {
            kind: len(layout.tile_names) + i for i, kind in enumerate(layout.creature_kinds)
        }
        self._other_channel = layout.view_channels - 1
        part_spaces = {
            part: spaces.Box(0.0, 1.0, (self._part_size(part),), np.float32) for part in self._parts
        }
        if flatten:
            total = sum(space.shape[0] for space in part_spaces.values())
            self.observation_space = spaces.Box(0.0, 1.0, (total,), np.float32)
        else:
            self.observation_space = spaces.Dict(part_spaces)
        self.action_space = spaces.Discrete(len(self.action_names))

    def _init_state(self) -> None:
        """The episode's state (set by reset()) and the counters kept across episodes, at
        their start."""
        # Episode state, set by reset().
        self._obs: Observation | None = None
        self._skills: Skills | None = None
        self._proxy: ReadOnlyProxy | None = None
        self._reward_ns: Namespace | None = None
        self._reward_load_failure: Failure | None = None
        self._world_seed = 0
        self._steps = 0
        self._need_steps = 0
        self._setup_steps = 0
        self._setup_failures = 0
        self.world_steps = 0
        """Every world step this env took: setup (failed attempts included), primitive
        steps and the steps of coded actions."""
        self.setup_steps_total = 0
        """Of :attr:`world_steps`, those taken by ``setup_code`` (every attempt)."""
        self._episodes: list[tuple[int, float, dict[str, int]]] = []
        """World episodes this env finished: (world steps, world reward, achievement
        counts), setup steps and achievements included (see :meth:`take_world_episodes`)."""
        self._recording = False
        self._world_reward = 0.0
        self._counts: dict[str, int] = {}
        self._start_counts: dict[str, int] = {}
        self._booked_from: dict[str, int] = {}
        """Achievement counts the episode started with that were booked elsewhere (a
        restored start's: the episode that made it booked them)."""
        self._start_restored = False
        self.starts_restored = 0
        """Resets that restored a cached start instead of running setup (no step taken)."""
        self._option_failures = 0
        self._reward_failures = 0
        self._success = False
        self._ended = True
        self._suspended: dict[str, PolicyStepper] = {}
        """Resumable options stopped at their step cap in this episode: name → the
        running generator, continued the next time the option is chosen."""
        # Per env.step() accumulators.
        self._step_reward = 0.0
        self._step_primitives = 0
        self._step_gained: list[str] = []
        self._step_reward_failure: Failure | None = None
        self._terminated = False
        self._truncated = False
        self._died = False

    # ------------------------------------------------------------------ gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is None and self._pending_seed is not None:
            seed, self._pending_seed = self._pending_seed, None
        super().reset(seed=seed)
        if seed is not None and not self._pool_only:
            base = int(seed) % MAX_SEED
        else:
            base = self._draw_seed()
        self._setup_failures = 0
        redraws = 0
        while True:
            try:
                self._start_retrying(base)
                break
            except SetupError as exc:
                # Every try of this world failed. Once setup has made a start (in this env,
                # or for this setup in the process's start cache), its code works and the
                # failures are the worlds' (a deep chain dies on the way in many): another
                # world of the pool, not the whole job lost. So too when the last try died
                # without a fault of the code (``exc.failure`` None): a chain through a
                # weak step reaches its stage in few worlds, and the first draw's tries all
                # dying would otherwise end the job at 0 decisions (as it did in a run of
                # 20261128-diamond-learn-over-code.toml). A fault before any start raises.
                works = self._setup_worked() or exc.failure is None
                if not (self._pool_only and redraws < self._redraws and works):
                    raise
                redraws += 1
                base = self._draw_seed()
        self._starts_made += 1
        info = {
            "seed": self._world_seed,
            "setup_steps": self._setup_steps,
            "setup_failures": self._setup_failures,
            "start_restored": self._start_restored,
        }
        return self._encode(self._obs), info

    def _setup_worked(self) -> bool:
        """Whether setup has made a start in this env, or for the same setup in this
        process's start-state cache (a later job of the sub-action whose first draw died)."""
        if self._starts_made:
            return True
        key = self._start_key(0)  # None without a cache (or without setup)
        return key is not None and self._start_states.worked(key)

    def _start_retrying(self, base: int) -> None:
        """Start an episode in world ``base``, or in its retry worlds while setup fails."""
        for attempt in range(self._setup_retries + 1):
            world_seed = (base + attempt * self._retry_stride) % MAX_SEED
            try:
                self._start_episode(world_seed)
                return
            except SetupError:
                self._setup_failures += 1
                if attempt == self._setup_retries:
                    raise

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self._ended:
            raise RuntimeError("the episode has ended (or not begun): call reset()")
        index = int(action)
        if not 0 <= index < len(self.action_names):
            raise ValueError(f"action {action!r} outside Discrete({len(self.action_names)})")
        self._step_reward = 0.0
        self._step_primitives = 0
        self._step_gained = []
        self._step_reward_failure = None
        option_failure: Failure | None = None
        if index < len(self.primitives):
            self._primitive(self.primitives[index])
        else:
            option_failure = self._run_option(self._options[index - len(self.primitives)])
        if self._needs and not self._ended:
            self._serve_needs()
        info = {
            "action": self.action_names[index],
            "success": self._success,
            "is_success": self._success,
            "died": self._died,
            "primitive_steps": self._step_primitives,
            "steps": self._steps,
            "setup_steps": self._setup_steps,
            "achievements": tuple(self._step_gained),
            "option_failure": _failure_dict(option_failure),
            "option_failures": self._option_failures,
            "reward_failure": _failure_dict(self._step_reward_failure),
            "reward_failures": self._reward_failures,
        }
        return (
            self._encode(self._obs),
            float(self._step_reward),
            self._terminated,
            self._truncated,
            info,
        )

    def render(self) -> np.ndarray | None:
        if self.render_mode == "rgb_array":
            return self._world.render()
        return None

    def close(self) -> None:
        """Stop the world this env made (a Minetest server); an attached world, or one from
        the caller's factory, is the caller's."""
        self._drop_suspended()
        if self._own_world and self._voxel is not None:
            self._world.close()  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ inspection

    @property
    def world(self) -> World:
        """The world being played (tests and tools; agents see only observations)."""
        return self._world

    @property
    def observation(self) -> Observation | None:
        """The latest :class:`Observation` the encoded observation was built from."""
        return self._obs

    @property
    def world_seed(self) -> int:
        """Seed of the current episode's world."""
        return self._world_seed

    def encode(self, obs: Observation) -> Any:
        """The policy input for ``obs`` (what ``reset``/``step`` return)."""
        return self._encode(obs)

    def attach(
        self,
        world: World,
        obs: Observation,
        skills: Skills | None = None,
        *,
        achievements: Mapping[str, int] | None = None,
    ) -> Any:
        """Take over an episode already under way in ``world`` instead of resetting one:
        a composed policy hands the world to a learned sub-policy mid-episode.

        ``obs`` is the world's latest observation; ``skills`` the episode's skill object
        (its remembered map serves the coded actions; the env feeds it every step it
        takes, so the caller must not); ``achievements`` the episode's achievement counts
        so far. Nothing is reset and ``setup_code`` does not run. From here the episode is
        this env's: success is ``config.subtask``'s test, achievements counted from
        now, the step cap counts from now, and ``step`` works as after ``reset``. The
        world must have this env's actions and layout. Returns the encoded observation.
        """
        if tuple(world.action_names) != self._world_actions:
            raise ValueError("the world's actions differ from this env's")
        self._check_layout(obs)
        self._ended = True  # until attached
        self._close_world_episode()  # the attached episode is the caller's to book
        self._drop_suspended()
        if world is not self._world and self._own_world:
            self.close()  # its own world is left for the caller's
            self._own_world = False
        self._world = world
        self._obs = obs
        self._counts = dict(achievements or {})
        self._start_counts = dict(self._counts)
        self._booked_from = {}
        self._start_restored = False
        self._steps = 0
        self._need_steps = 0
        self._setup_steps = 0
        self._setup_failures = 0
        self._option_failures = 0
        self._reward_failures = 0
        self._success = False
        self._terminated = self._truncated = self._died = False
        if skills is None and (self._options or self._needs or "map" in self._parts):
            skills = self._new_skills(obs, self._world_seed)
        if self._voxel is not None:
            self._voxel.begin(obs)
        self._need_cool = [0] * len(self._needs)
        self._skills = skills
        self._proxy = ReadOnlyProxy(skills) if skills is not None else None
        self._load_reward()
        self._ended = False
        return self._encode(obs)

    def take_world_episodes(self) -> list[tuple[int, float, dict[str, int]]]:
        """Every world episode this env played since the last call, the one under way
        included (it is closed: call this when done with the env): (world steps, world
        reward, achievement counts). Setup steps and what setup unlocked belong to the
        episode, and a reset whose setup failed is an episode of its own, so the
        lengths add up to every world step the env took in its own episodes."""
        self._close_world_episode()
        taken, self._episodes = self._episodes, []
        return taken

    def _close_world_episode(self) -> None:
        length = self._setup_steps + self._steps
        if self._recording and length > 0:  # a reset that took no step played nothing
            base = self._booked_from  # what a restored start had unlocked: booked already
            counts = {k: n - base.get(k, 0) for k, n in self._counts.items()}
            counts = {k: n for k, n in counts.items() if n > 0}
            self._episodes.append((length, round(self._world_reward, 6), counts))
        self._recording = False

    # ------------------------------------------------------------------ construction

    def _check_subtask(self) -> None:
        subtask = self.config.subtask
        # A goal key may name alternatives whose counts add up: "default:tree|default:pine_tree".
        named = {name for key in subtask.goal for name in key.split("|")}
        unknown = sorted(named - set(self.layout.inventory_names))
        if unknown:
            raise ValueError(f"subtask goal names unknown items {unknown}")
        achievements = self._world.achievement_names
        if subtask.achievement and subtask.achievement not in achievements:
            raise ValueError(
                f"subtask achievement {subtask.achievement!r} is not one of the world's"
            )
        if subtask.max_steps < 1:
            raise ValueError(f"subtask max_steps must be positive, not {subtask.max_steps}")

    def _check_primitives(self) -> tuple[str, ...]:
        names = tuple(self.config.primitives) or self._world_actions
        unknown = [name for name in names if name not in self._world_actions]
        if unknown:
            raise ValueError(f"primitives {unknown} are not actions of the world")
        return names

    def _check_parts(self) -> tuple[str, ...]:
        parts = tuple(dict.fromkeys(self.config.observation))  # keep order, drop repeats
        unknown = [part for part in parts if part not in OBSERVATION_PARTS]
        if unknown or not parts:
            raise ValueError(
                f"observation parts must be a non-empty subset of {OBSERVATION_PARTS},"
                f" not {list(self.config.observation)}"
            )
        return parts

    def _compile_options(self) -> list[_Option]:
        options = []
        for i, coded in enumerate(self.config.coded_actions):
            part = f"coded_actions[{i}] {coded.name!r}"
            if coded.max_steps < 1:
                raise ValueError(f"{part}: max_steps must be positive, not {coded.max_steps}")
            compiled = self._compile_entry(part, coded.code, "run", True)
            options.append(_Option(coded.name, compiled, coded.max_steps, coded.resumable))
        return options

    def _compile_needs(self) -> list[tuple[NeedRule, _Option]]:
        needs = []
        for i, rule in enumerate(self.config.needs):
            part = f"needs[{i}] {rule.name or rule.stat!r}"
            if rule.max_steps < 1:
                raise ValueError(f"{part}: max_steps must be positive, not {rule.max_steps}")
            if rule.stat not in (*self.layout.status_names, "daylight"):
                raise ValueError(f"{part}: stat {rule.stat!r} is not one the world reports")
            compiled = self._compile_entry(part, rule.code, "run", True)
            if compiled is None:
                raise ValueError(f"{part}: no code")
            needs.append(
                (rule, _Option(f"need:{rule.name or rule.stat}", compiled, rule.max_steps))
            )
        return needs

    def _compile_entry(
        self, part: str, source: str, entry: str, generator: bool
    ) -> CompiledCode | None:
        """Compile ``source`` and check that loading it defines ``entry``; None if empty."""
        if not source.strip():
            return None
        filename = f"<{part}>"
        # A setup composes every stage before the sub-action, each a whole module.
        limits = Limits(max_source_chars=SETUP_SOURCE_CHARS) if part == "setup_code" else None
        try:
            compiled = compile_code(source, filename=filename, limits=limits)
            namespace = load(compiled)
        except SandboxError as err:
            raise CodeError(part, err.failure) from None
        func = namespace.functions.get(entry)
        if func is None:
            raise CodeError(part, Failure("exception", f"the code defines no function {entry!r}"))
        if generator and not inspect.isgeneratorfunction(func):
            detail = f"{entry!r} must be a generator (yield action names)"
            raise CodeError(part, Failure("exception", detail, func.__code__.co_firstlineno))
        return compiled

    def _part_size(self, part: str) -> int:
        layout = self.layout
        if self._voxel is not None and part in ("view", "map", "inventory", "status"):
            from rl.voxel_obs import SIZES

            return SIZES[part]
        rows, cols = layout.view_shape
        return {
            "view": rows * cols * layout.view_channels,
            "inventory": len(layout.inventory_names),
            "status": len(layout.status_names),
            "facing": len(FACINGS),
            "daylight": 1,
            "map": (2 * MAP_RADIUS + 1) ** 2 * (len(layout.tile_names) + 1),
        }[part]

    # ------------------------------------------------------------------ episode

    def _draw_seed(self) -> int:
        if self._world_pool:
            return self._world_pool[int(self.np_random.integers(len(self._world_pool)))]
        return int(self.np_random.integers(0, MAX_SEED))

    def _start_episode(self, world_seed: int) -> None:
        self._ended = True  # until this episode is fully set up
        self._drop_suspended()
        self._close_world_episode()
        self._world_seed = world_seed
        self._steps = 0
        self._need_steps = 0
        self._setup_steps = 0
        self._option_failures = 0
        self._reward_failures = 0
        self._success = False
        self._terminated = self._truncated = self._died = False
        self._start_restored = False
        self._need_cool = [0] * len(self._needs)
        key = self._start_key(world_seed)
        saved = self._start_states.get(key) if key is not None else None
        if isinstance(saved, FailedSetup):  # known bad: fails again, no step taken
            raise SetupError(world_seed, saved.steps, saved.reason, saved.failure)
        if isinstance(saved, StartState):
            self._restore_start(saved)
        else:
            self._make_start(world_seed, key)
        self._start_counts = dict(self._counts)
        self._load_reward()
        self._ended = False

    def _start_key(self, world_seed: int) -> tuple | None:
        """The start-state cache key of ``world_seed`` (None: no cache, or no setup)."""
        if self._start_states is None or self._setup is None:
            return None
        return start_key(
            self._world,
            world_seed,
            self.config.setup_code,
            self._setup_max_steps,
            self._setup_wall_s,
        )

    def _make_start(self, world_seed: int, key: tuple | None) -> None:
        """Reset the world and run setup (its steps counted here); cache the outcome."""
        self._obs = self._world.reset(world_seed)
        self._recording, self._world_reward = True, 0.0
        self._booked_from = {}
        self._check_layout(self._obs)
        self._counts = {}
        needs_skills = (
            self._setup is not None
            or bool(self._options)
            or bool(self._needs)
            or "map" in self._parts
        )
        self._skills = self._new_skills(self._obs, world_seed) if needs_skills else None
        if self._voxel is not None:
            self._voxel.begin(self._obs)
        self._proxy = ReadOnlyProxy(self._skills) if needs_skills else None
        if self._setup is None:
            return
        try:
            self._run_setup(world_seed)
        except SetupError as err:
            # A world whose setup failed is known bad — unless the wall clock stopped it
            # (a busy machine, not the world and the code): that one is tried again.
            timed_out = err.failure is not None and err.failure.cause == TIMEOUT
            if key is not None and not timed_out:
                self._start_states.put(key, FailedSetup(err.steps, err.reason, err.failure))
            raise
        if key is not None:
            saved = save_start(
                self._world, self._obs, self._skills, self._counts, self._setup_steps
            )
            self._start_states.put(key, saved)

    def _restore_start(self, saved: StartState) -> None:
        """Continue from a cached start: the world, observation, achievement counts and
        skills exactly as setup left them, and no world step taken (none counted). The
        episode books only what happens from here: what setup unlocked was booked with
        the episode that ran it."""
        self._obs, self._skills = restore_start(self._world, saved)
        self._recording, self._world_reward = True, 0.0
        self._counts = dict(saved.counts)
        self._booked_from = dict(saved.counts)
        self._proxy = ReadOnlyProxy(self._skills) if self._skills is not None else None
        self._start_restored = True
        self.starts_restored += 1

    def _new_skills(self, obs: Observation, world_seed: int) -> Any:
        """The episode's skill object: Crafter's :class:`Skills`, or Minetest's
        :class:`~worlds.minetest.skills.VoxelSkills` under the game's rules."""
        if self._voxel is not None:
            from worlds.minetest.skills import VoxelSkills

            world: Any = self._world
            return VoxelSkills(obs, world.node_rules, world.game_rules)
        return Skills(obs, self._world_actions, seed=world_seed)

    def _load_reward(self) -> None:
        self._reward_ns, self._reward_load_failure = None, None
        if self._reward_code is not None:
            # A fresh namespace per episode: module-level state and a tripped budget
            # do not carry over from one episode to the next.
            try:
                self._reward_ns = load(self._reward_code, wall_s=self._reward_wall_s)
            except SandboxError as err:  # loaded fine at construction; counted per step
                self._reward_load_failure = err.failure

    def _check_layout(self, obs: Observation) -> None:
        layout = self.layout
        if self._voxel is not None:
            # Minetest's node names grow as the server meets them; the parts count kinds.
            if not hasattr(obs, "voxels"):
                raise ValueError("a Minetest env needs the world's voxel observations")
            return
        if tuple(obs.names) != layout.tile_names or obs.view.shape != layout.view_shape:
            raise ValueError("the world's tiles or view shape differ from the env's layout")
        if tuple(obs.inventory) != layout.inventory_names:
            raise ValueError("the world's inventory items differ from the env's layout")

    def _run_setup(self, world_seed: int) -> None:
        def step_fn(action: str) -> bool:
            obs, reward, done, info = self._world.step(action)
            self._setup_steps += 1
            self.setup_steps_total += 1
            self.world_steps += 1
            self._world_reward += reward
            self._observe(obs, info)
            return done

        outcome = run_sandboxed(
            self._setup,
            self._proxy,
            step_fn,
            max_steps=self._setup_max_steps,
            wall_s=self._setup_wall_s,
            allowed_actions=self._world_actions,
        )
        if outcome.failure is not None:
            failure = outcome.failure
            reason = f"setup_code {failure.cause}: {failure.detail}"
            if failure.line:
                reason += f" (line {failure.line})"
            raise SetupError(world_seed, outcome.steps, reason, failure)
        if outcome.episode_done:
            raise SetupError(world_seed, outcome.steps, "the episode ended during setup", None)

    def _observe(self, obs: Observation, info: Mapping[str, Any]) -> None:
        self._obs = obs
        for name in info.get("achievements", ()):
            self._counts[name] = self._counts.get(name, 0) + 1
        if self._skills is not None:
            self._skills._observe(obs, info)
        if self._voxel is not None:
            self._voxel.observe(obs)  # type: ignore[arg-type]

    def _primitive(self, action: str) -> None:
        """One world step with its bookkeeping: success, death, cap and reward."""
        before = self._snapshot() if self._reward_code is not None else None
        obs, world_reward, done, info = self._world.step(action)
        self._steps += 1
        self._need_steps += int(self._serving)
        self.world_steps += 1
        self._world_reward += world_reward
        self._step_primitives += 1
        self._step_gained.extend(info.get("achievements", ()))
        self._observe(obs, info)
        self._success = self._succeeded(obs)
        self._died = bool(done) and info.get("discount", 1.0) == 0.0
        reward = self.config.success_reward if self._success else 0.0
        if before is not None:
            reward += self._shaped_reward(before, self._snapshot())
        self._step_reward += reward
        self._terminated = self._success or self._died
        self._truncated = not self._terminated and (
            bool(done) or self._steps - self._need_steps >= self.config.subtask.max_steps
        )
        self._ended = self._terminated or self._truncated

    def _run_option(
        self, option: _Option, until: Callable[[], bool] | None = None
    ) -> Failure | None:
        """Drive one coded action as an option; returns its failure, if it failed.

        A resumable option stopped by its step cap is kept and continued by its next
        call in the episode (its deadline renewed); one whose code finished or failed
        starts afresh. A kept generator that ends before taking a step in this call is
        started afresh at once, so that choosing the option always runs its code.
        ``until``: a need's run stops once it holds; an agent's option stops when a
        survival need falls due (as the task planner interrupts a stage)."""
        if until is None and self._needs:
            until = lambda: self._due_need() is not None  # noqa: E731

        wall_s = self._option_wall_s
        deadline = time.monotonic() + wall_s
        failure: Failure | None = None
        stepper = self._suspended.pop(option.name, None)
        resumed = stepper is not None
        if stepper is not None:
            stepper.deadline = deadline
        else:
            stepper, failure = self._start_option(option, deadline)
        taken = 0
        try:
            # ALGO LOGIC: one resumption of the agent's generator, one world step.
            while stepper is not None and taken < option.max_steps and not self._ended:
                if until is not None and taken > 0 and until():
                    break
                action = stepper.next_action()
                if action is None:
                    if resumed and taken == 0 and stepper.failure is None:
                        resumed = False  # it had finished: this call runs it afresh
                        stepper.close()
                        stepper, failure = self._start_option(option, deadline)
                        continue
                    failure = stepper.failure
                    break
                self._primitive(action)
                taken += 1
                if time.monotonic() > deadline:  # slow steps count against it too
                    failure = Failure("timeout", f"wall-clock budget of {wall_s:g} s exceeded")
                    break
        finally:
            if stepper is not None:
                keep = option.resumable and failure is None and not stepper.finished
                if keep and not self._ended:
                    self._suspended[option.name] = stepper
                else:
                    stepper.close()
        if failure is not None and not self._serving:
            self._option_failures += 1
        if self._step_primitives == 0:
            self._primitive(self._idle)
        return failure

    def _due_need(self, skip: Collection[int] = ()) -> int | None:
        """The first survival need due now (its stat below its threshold, not on
        cooldown, not in ``skip``), None if none."""
        for i, (rule, _) in enumerate(self._needs):
            if i in skip or self._need_cool[i] > self._steps:
                continue
            if _stat(self._obs, rule.stat) < rule.below:
                return i
        return None

    def _serve_needs(self) -> None:
        """Run the survival needs due after the agent's action, inside this step, one
        after another (each at most once a step) as the task planner runs them in play:
        each until its stat is back at ``until``, its code returns, or its cap. Their
        world steps are this step's (counted, rewarded, in the SMDP discount) but not the
        subtask's (the step cap counts the agent's own, as a stage's cap does in play). A
        run that did not serve its need, or took no step, puts it on cooldown (as the
        planner does), so a need that cannot be served does not loop. After a need ran,
        a resumable option the agent had going starts afresh next time, as a learned
        stage restarted by the planner after a need does in play."""
        ran: set[int] = set()
        while not self._ended:
            i = self._due_need(skip=ran)
            if i is None:
                return
            ran.add(i)
            rule, option = self._needs[i]
            start = self._steps
            self.needs_run += 1
            self._serving = True
            try:
                failure = self._run_option(
                    option, until=lambda rule=rule: _stat(self._obs, rule.stat) >= rule.until
                )
            finally:
                self._serving = False
            self.need_failures += failure is not None
            if _stat(self._obs, rule.stat) < rule.until or self._steps == start:
                self._need_cool[i] = self._steps + NEED_COOLDOWN_STEPS
            if self._steps > start:
                self._drop_suspended()

    def _start_option(
        self, option: _Option, deadline: float
    ) -> tuple[PolicyStepper | None, Failure | None]:
        """A fresh run of ``option``'s code: its generator, or why it could not start."""
        wall_s = self._option_wall_s
        try:
            namespace = load(option.compiled, wall_s=wall_s)
        except SandboxError as err:  # the module body behaved differently this time
            return None, err.failure
        stepper = namespace.start(
            "run",
            self._proxy,
            allowed_actions=self._world_actions,
            deadline=deadline,
            wall_s=wall_s,
        )
        return stepper, None

    def _drop_suspended(self) -> None:
        """Close the resumable options kept from the episode that is over."""
        suspended, self._suspended = self._suspended, {}
        for stepper in suspended.values():
            stepper.close()

    def _succeeded(self, obs: Observation) -> bool:
        return self.config.subtask.met(obs.inventory, self._counts, since=self._start_counts)

    def _snapshot(self) -> dict[str, Any]:
        obs = self._obs
        return {
            "inventory": dict(obs.inventory),
            "status": dict(obs.status),
            "achievements": dict(self._counts),
            "steps": self._steps,
        }

    def _shaped_reward(self, before: dict[str, Any], after: dict[str, Any]) -> float:
        if self._reward_ns is None:
            failure, value = self._reward_load_failure, None
        else:
            outcome = self._reward_ns.call("reward", before, after, wall_s=self._reward_wall_s)
            failure, value = outcome.failure, outcome.value
        if failure is None and (type(value) not in (int, float) or not math.isfinite(value)):
            failure = Failure("exception", f"reward returned {value!r:.60}, not a finite number")
        if failure is not None:
            self._reward_failures += 1
            self._step_reward_failure = failure
            return 0.0
        return float(value)

    # ------------------------------------------------------------------ observation

    def _encode(self, obs: Observation) -> Any:
        parts = {part: self._encode_part(part, obs) for part in self._parts}
        if self._flatten:
            return np.concatenate([parts[part] for part in self._parts])
        return parts

    def _encode_part(self, part: str, obs: Observation) -> np.ndarray:
        layout = self.layout
        if self._voxel is not None and part in ("view", "map", "inventory", "status"):
            return self._voxel.encode(part, obs)  # type: ignore[arg-type]
        if part == "view":
            rows, cols = layout.view_shape
            channels = layout.view_channels
            grid = np.zeros((rows * cols, channels), np.float32)
            grid[:, : len(layout.tile_names)] = self._tile_eye[obs.view.reshape(-1)]
            cx, cy = obs.center
            for kind, dx, dy in obs.creatures:
                row, col = cy + dy, cx + dx
                if 0 <= row < rows and 0 <= col < cols:
                    channel = self._creature_channel.get(kind, self._other_channel)
                    grid[row * cols + col, channel] = 1.0
            return grid.reshape(-1)
        if part == "inventory":
            counts = [obs.inventory.get(k, 0) for k in layout.inventory_names]
            return _scaled(counts)
        if part == "status":
            return _scaled([obs.status.get(k, 0.0) for k in layout.status_names])
        if part == "facing":
            onehot = np.zeros(len(FACINGS), np.float32)
            if obs.facing in FACINGS:
                onehot[FACINGS.index(obs.facing)] = 1.0
            return onehot
        if part == "map":
            kinds = len(layout.tile_names)
            ids = self._map_crop().astype(np.int64)
            ids[(ids < 0) | (ids >= kinds)] = kinds  # not seen this episode
            return self._map_eye[ids.reshape(-1)].reshape(-1)
        return np.array([min(max(obs.daylight, 0.0), 1.0)], np.float32)  # daylight

    def _map_crop(self) -> np.ndarray:
        """Tile ids of the remembered map around the player (``gridmap.UNKNOWN`` where
        nothing was seen, or when the map is not kept as arrays)."""
        side = 2 * MAP_RADIUS + 1
        out = np.full((side, side), UNKNOWN_TILE, np.int16)
        grid = self._skills._nav.grid if self._skills is not None else None
        if grid is None:
            return out
        x, y = self._obs.position
        top, left = y + grid.oy - MAP_RADIUS, x + grid.ox - MAP_RADIUS
        height, width = grid.tiles.shape
        r0, c0 = max(top, 0), max(left, 0)
        r1, c1 = min(top + side, height), min(left + side, width)
        if r0 < r1 and c0 < c1:
            out[r0 - top : r1 - top, c0 - left : c1 - left] = grid.tiles[r0:r1, c0:c1]
        return out


def _scaled(values: Sequence[float]) -> np.ndarray:
    return np.clip(np.asarray(values, np.float32) / COUNT_SCALE, 0.0, 1.0)


def _failure_dict(failure: Failure | None) -> dict[str, Any] | None:
    """A failure as plain data for info dicts (pickled by vector envs, logged as JSON)."""
    if failure is None:
        return None
    return {"cause": failure.cause, "detail": failure.detail, "line": failure.line}


# ---------------------------------------------------------------------- factories


def make_env(config: RLConfig | bytes, *, seed: int | None = None, **kwargs: Any) -> SubtaskEnv:
    """A :class:`SubtaskEnv` for ``config`` (an RLConfig or its ``messages.encode`` bytes).

    ``seed`` is the world seed of the first ``reset()``; ``kwargs`` go to SubtaskEnv.
    """
    if isinstance(config, bytes):
        config = decode(config)
        if not isinstance(config, RLConfig):
            raise TypeError(f"expected an encoded RLConfig, got {type(config).__name__}")
    return SubtaskEnv(config, seed=seed, **kwargs)


def env_factory(
    config: RLConfig | bytes, *, seed: int | None = None, monitor: bool = False, **kwargs: Any
) -> Callable[[], gym.Env]:
    """A picklable no-argument constructor, for vector envs in other processes.

    The config travels as ``messages.encode`` bytes (the wire format), so a factory
    pickled here builds the same env in a fresh process. ``monitor`` wraps the env in
    SB3's ``Monitor`` (episode return/length for PPO's logs; length counts decisions).
    """
    blob = config if isinstance(config, bytes) else encode(config)
    return functools.partial(_build, blob, seed, monitor, kwargs)


def _build(blob: bytes, seed: int | None, monitor: bool, kwargs: dict[str, Any]) -> gym.Env:
    env: gym.Env = make_env(blob, seed=seed, **kwargs)
    if monitor:
        from stable_baselines3.common.monitor import Monitor

        env = Monitor(env)
    return env


def make_vec_env(
    config: RLConfig,
    n_envs: int = 1,
    seed: int = 0,
    *,
    subproc: bool = False,
    monitor: bool = True,
    start_method: str | None = None,
    workers: EnvWorkers | None = None,
    **kwargs: Any,
) -> VecEnv:
    """An SB3 vector env of ``n_envs`` copies; env ``i`` starts from world seed ``seed + i``.

    ``world_pool`` (in ``kwargs``) is split among the envs: env ``i`` draws from every
    ``n_envs``-th world of it from the ``i``-th (the whole pool when it has fewer worlds
    than envs). With ``workers`` (:mod:`rl.env_workers`: long-lived processes whose
    start-state caches outlive the job) the envs run there, each in its own process
    when ``subproc``, else all in one, so policy code never runs in this process.
    Without, ``subproc`` runs each env in a process of SB3's ``SubprocVecEnv``
    (``start_method`` as there); otherwise all run in this one (``DummyVecEnv``). Close
    it when done.
    """
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    blob = encode(config)
    pool = tuple(kwargs.pop("world_pool", ()))
    if pool and len(pool) >= n_envs:
        # Each env draws from its own share of the pool (env i: every n_envs-th world
        # from the i-th): a world's start is made once per job wherever its env steps,
        # never once per process that happens to draw it.
        pools = [pool[i::n_envs] for i in range(n_envs)]
    else:
        pools = [pool] * n_envs
    if workers is not None:
        processes = n_envs if subproc else 1
        return workers.vec_env(
            blob, n_envs, seed, monitor=monitor, world_pools=pools, processes=processes, **kwargs
        )
    fns = [
        env_factory(blob, seed=seed + i, monitor=monitor, world_pool=pools[i], **kwargs)
        for i in range(n_envs)
    ]
    if subproc:
        return SubprocVecEnv(fns, start_method=start_method)
    return DummyVecEnv(fns)


def _stat(obs: Observation, stat: str) -> float:
    """A need's statistic: a vital from the status, or ``daylight`` (0–1)."""
    if stat == "daylight":
        return float(obs.daylight)
    return float(obs.status.get(stat, math.inf))
