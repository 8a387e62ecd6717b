"""PPO over coded options in the 3-D world: learning where to look for trees.

The method's shape in Minetest, for the diamond chain's weakest step (the tree search,
``worlds/minetest/chain.py``'s ``get_trees``): the agent's actions are *coded high-level
options* over :class:`~worlds.minetest.skills.VoxelSkills`, and PPO (stable-baselines3)
learns which to take. Code does the walking, climbing and digging; learning chooses
where to look.

The options are policy source text (:data:`OPTIONS_SOURCE`), run through the project's
sandbox like any agent code (``sandbox.load`` once an episode, ``Namespace.start`` for
each option, the skills behind a read-only proxy):

- ``head_n`` … ``head_nw``: head :data:`REACH` nodes towards one of eight compass
  directions with the skills' own planning (tunnelling through leaves and soil, climbing
  on placed blocks as the coded search does); once a trunk not seen before comes into
  view it digs the trunks seen, as ``collect`` does (digging what is seen is coded: the
  learner chooses only where to look);
- ``collect``: dig the nearest seen trunk, and the next, until the step's goal is
  carried or no seen trunk is within reach (nothing to do when none is seen);
- ``explore``: walk towards the nearest ground next to unseen land (``skills.explore``),
  then dig the trunks seen;
- ``search``: one leg (up to four looks) of the coded search's own square spiral of
  waypoints around the start, then dig the trunks seen: the code's systematic way to
  cover ground, offered as one option among the others;
- ``collect_drop``, ``explore_drop``: the same, letting plans drop as far as the body
  survives and dig down (``tunnel(True)``): off plateaus and cliffs the coded search
  never leaves (it drops one node at most, since a pit may hold a body with no
  pickaxe), at that risk.

Each option runs until it returns or :data:`OPTION_CAP` primitive steps; every
primitive step counts against the episode's :data:`BUDGET` (the coded search's own
``PATIENCE["trees"]``).

The observation is what the player could know: counts of remembered trunk, leaf, water,
sand, snow and grass columns and of all columns seen, per eighth of the compass around
the player (log-scaled), whether a trunk is seen and how far, the height over the start,
the fraction of the budget used, the trunks carried against the goal, the last option
taken and how far it moved, and which headings were blocked (tried from near here and
moved the feet under :data:`BLOCKED_MOVE` nodes). No find, teleport or give; nothing of
the map the player did not see.

Reward: +1 for each trunk obtained (up to the goal), minus :data:`STEP_COST` per
primitive step and :data:`DECISION_COST` per option taken. An episode succeeds when the
step's goal is carried: :data:`WANT` trunks, as many as ``get_trees`` collects for the
chain (its start state for planks), so that the learned stage could replace the coded
one in the chain and the two are compared on the same goal.

A fresh training seed each episode (each seed starts its own server, ~0.5 s); one
:class:`~worlds.minetest.MinetestWorld` is reused across episodes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import Any

import gymnasium as gym
import numpy as np

from sandbox import Failure, Namespace, ReadOnlyProxy, SandboxError, compile_code, load
from worlds.minetest import MinetestWorld, VoxelObservation
from worlds.minetest.skills import VoxelSkills
from worlds.minetest.templates import PATIENCE, START_STATES

TRUNKS = ("default:tree", "default:pine_tree")
"""The trunks the coded search digs (the common tree and the snowy land's pine)."""
WANT = sum(START_STATES["default:wood"].get(t, 0) for t in TRUNKS)
"""Trunks the tree step must carry: what the chain's next step (planks) starts from."""
BUDGET = PATIENCE["trees"]
"""Primitive steps an episode may take: the coded tree search's own budget."""
REACH = 20
"""Nodes a heading option aims ahead (a bit more than the window's 17 nodes across)."""
OPTION_CAP = 150
"""Primitive steps one option may take before the host stops it."""
LOOK = 16
"""Steps a heading option walks between looks for new trunks (the chain's LOOK_EVERY)."""
SPIRAL = 24
"""Nodes between the rings of the ``search`` option's waypoints (the chain's SPIRAL)."""
CLIMB_ABOVE_START = 4
"""Options build their way up only below this many nodes over the start (as the chain)."""
STEP_COST = 0.0005
"""Reward per primitive step: the whole budget costs 1.5, a trunk is worth 1."""
DECISION_COST = 0.01
"""Reward per option taken (an option that does nothing still costs)."""
MAX_DECISIONS = 300
"""Options an episode may take before it is cut off (options that take no steps)."""
OPTION_WALL_S = 60.0
"""Wall-clock budget of one option's code (the skills' planning runs inside it)."""
TRAIN_SEEDS = (10_000, 11_000)
"""World seeds training draws from: a fresh one each episode."""
RADIUS = 8
"""The voxel window's reach, as the coded chain's benchmark (17 × 17 nodes across)."""

HEADINGS = {
    "n": (0, 1),
    "ne": (1, 1),
    "e": (1, 0),
    "se": (1, -1),
    "s": (0, -1),
    "sw": (-1, -1),
    "w": (-1, 0),
    "nw": (-1, 1),
}
OPTIONS = tuple(f"head_{h}" for h in HEADINGS) + (
    "collect",
    "explore",
    "search",
    "collect_drop",
    "explore_drop",
)
"""The action space: an option's generator function in :data:`OPTIONS_SOURCE` each."""

_HEAD_FUNCTIONS = "\n".join(
    f"def head_{h}(skills):\n    return (yield from head(skills, {dx}, {dz}))\n"
    for h, (dx, dz) in HEADINGS.items()
)
OPTIONS_SOURCE = (
    '''"""Coded options for the tree search: where to go is the learner's choice."""

# From the host at load: START_Y (the start's altitude, or None: where the first option
# began), CLIMB, REACH, LOOK, WANT.
TRUNKS = ("default:tree", "default:pine_tree")
START = [START_Y]
SKIPPED = {False: [], True: []}  # trunks out of reach this episode, walking / dropping
AROUND = ((1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1))
WAYPOINTS = [(SPIRAL * r * dx, SPIRAL * r * dz) for r in range(1, 9) for dx, dz in AROUND]
FAR = 100000
CLOSEST = [FAR, 0]  # how near the current waypoint the search got, looks since
STALLS = 3
LEG = 4 * LOOK


def prepare(skills, drop=False):
    # Through leaves and soil by hand, never down a pit unless dropping is chosen (falls
    # the body survives, digging down: a pit may then hold it); climb out of hollows.
    if START[0] is None:
        START[0] = skills.position()[1]
    skills.tunnel(True, down=drop)
    skills.build(True, below=START[0] + CLIMB)


def trunks_seen(skills, drop=False):
    return [v for name in TRUNKS for v in skills.seen(name) if v not in SKIPPED[drop]]


def carried(skills):
    have = skills.inventory()
    return sum(have.get(name, 0) for name in TRUNKS)


def head(skills, dx, dz):
    prepare(skills)
    x, y, z = skills.position()
    known = len(trunks_seen(skills))
    while True:
        before = skills.steps()
        there = yield from skills.head_for(x + REACH * dx, z + REACH * dz, patience=LOOK)
        if len(trunks_seen(skills)) > known:
            # Digging what is seen is coded, not learned: the learner picks directions.
            return (yield from gather(skills, False))
        if there or skills.steps() - before < LOOK:
            return there


def gather(skills, drop):
    prepare(skills, drop)
    got = False
    while carried(skills) < WANT:
        x, y, z = skills.position()
        seen = sorted(
            trunks_seen(skills, drop),
            key=lambda v: abs(v[0] - x) + abs(v[1] - y) + abs(v[2] - z),
        )
        if not seen:
            return got
        if (yield from skills.dig_node(seen[0][0], seen[0][1], seen[0][2], patience=100)):
            got = True
        else:
            SKIPPED[drop].append(seen[0])
    return True


def collect(skills):
    return (yield from gather(skills, False))


def collect_drop(skills):
    return (yield from gather(skills, True))


def search(skills):
    # One leg of the coded tree search's square spiral of waypoints around the start
    # (chain.py's get_trees): on to the next waypoint, dropping one it gets no nearer to.
    prepare(skills)
    known = len(trunks_seen(skills))
    start = skills.steps()
    while WAYPOINTS and skills.steps() - start < LEG:
        wx, wz = WAYPOINTS[0]
        before = skills.steps()
        arrived = yield from skills.head_for(wx, wz, patience=LOOK)
        x, y, z = skills.position()
        gap = abs(x - wx) + abs(z - wz)
        if gap < CLOSEST[0]:
            CLOSEST[0], CLOSEST[1] = gap, 0
        else:
            CLOSEST[1] += 1
        if arrived or skills.steps() - before < LOOK or CLOSEST[1] >= STALLS:
            WAYPOINTS.pop(0)
            CLOSEST[0], CLOSEST[1] = FAR, 0
        if len(trunks_seen(skills)) > known:
            return (yield from gather(skills, False))
    return len(WAYPOINTS) > 0


def explore(skills):
    prepare(skills)
    yield from skills.explore(steps=2 * LOOK, patience=2 * LOOK)
    return (yield from gather(skills, False))


def explore_drop(skills):
    prepare(skills, True)
    yield from skills.explore(steps=2 * LOOK, patience=2 * LOOK)
    return (yield from gather(skills, True))


'''
    + _HEAD_FUNCTIONS
)

CATEGORIES = {
    "trunk": TRUNKS + ("default:jungletree", "default:acacia_tree", "default:aspen_tree"),
    "leaves": (
        "default:leaves",
        "default:pine_needles",
        "default:jungleleaves",
        "default:acacia_leaves",
        "default:aspen_leaves",
        "default:apple",
    ),
    "water": ("default:water_source", "default:water_flowing", "default:river_water_source"),
    "sand": ("default:sand", "default:desert_sand", "default:silver_sand", "default:gravel"),
    "snow": ("default:snow", "default:snowblock", "default:dirt_with_snow", "default:ice"),
    "grass": ("default:dirt_with_grass", "default:grass_1", "default:junglegrass"),
}
"""Kinds of node the observation counts per direction, by the game's node names."""
SECTORS = 8
GRID = 400
"""Columns remembered for the observation reach this far from the start each way."""
BLOCKED_MOVE = 4
"""A heading option that moved the feet fewer nodes than this (across) was blocked; the
observation says so while the player is still within this many nodes of where it tried."""
OBS_SIZE = SECTORS * (len(CATEGORIES) + 1) + 6 + len(OPTIONS) + len(HEADINGS)


class ColumnMap:
    """The columns (x, z) the player has seen, and which held each kind of node, kept
    from each voxel window: what the observation's direction counts are made from."""

    def __init__(self) -> None:
        size = 2 * GRID + 1
        self.seen = np.zeros((size, size), bool)
        self.kinds = np.zeros((len(CATEGORIES), size, size), bool)
        self._names: tuple[str, ...] = ()
        self._table = np.zeros(0, np.int8)

    def add(self, obs: VoxelObservation, position: tuple[int, int, int]) -> None:
        """Mark the window's columns: (rows north to south, columns west to east)."""
        if obs.names is not self._names:
            self._names = obs.names
            self._table = np.full(len(obs.names), -1, np.int8)
            for i, (_, names) in enumerate(CATEGORIES.items()):
                for j, name in enumerate(obs.names):
                    if name in names:
                        self._table[j] = i
        _, rows, cols = obs.voxels.shape
        x0, _, z0 = position
        z_lo, x_lo = z0 - rows // 2 + GRID, x0 - cols // 2 + GRID
        if not (0 <= z_lo and z_lo + rows <= 2 * GRID + 1 and 0 <= x_lo <= 2 * GRID + 1 - cols):
            return  # beyond the grid: the counts stop growing there
        kinds = self._table[obs.voxels][:, ::-1, :]  # rows south to north: z upwards
        self.seen[z_lo : z_lo + rows, x_lo : x_lo + cols] = True
        for i in range(len(CATEGORIES)):
            self.kinds[i, z_lo : z_lo + rows, x_lo : x_lo + cols] |= (kinds == i).any(axis=0)

    def sector_counts(self, position: tuple[int, int, int]) -> np.ndarray:
        """(kinds + 1, SECTORS): per kind, then all seen, the columns in each eighth of
        the compass around ``position`` (sector 0 centred on north, clockwise)."""
        out = np.zeros((len(CATEGORIES) + 1, SECTORS), np.float32)
        x0, _, z0 = position
        for i, grid in enumerate((*self.kinds, self.seen)):
            zs, xs = np.nonzero(grid)
            if not len(zs):
                continue
            dx, dz = xs - GRID - x0, zs - GRID - z0
            angle = np.arctan2(dx, dz)  # 0 north, +π/2 east
            sector = np.round(angle / (2 * math.pi / SECTORS)).astype(int) % SECTORS
            near = (dx != 0) | (dz != 0)
            out[i] = np.bincount(sector[near], minlength=SECTORS)[:SECTORS]
        return out


def _carried(obs: VoxelObservation) -> int:
    return sum(obs.inventory.get(t, 0) for t in TRUNKS)


class VoxelTreeOptions(gym.Env):
    """The tree step as a gym env over coded options: ``Discrete(len(OPTIONS))`` actions,
    a ``Box`` of :data:`OBS_SIZE` features. ``world``: a :class:`MinetestWorld` to reuse
    (one is made, and closed by :meth:`close`, when None). ``seeds``: the world seeds
    episodes take in turn (a fresh one each; ``reset(options={"world_seed": s})`` picks
    one)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        world: MinetestWorld | None = None,
        seeds: Iterable[int] = range(*TRAIN_SEEDS),
        budget: int = BUDGET,
        want: int = WANT,
    ) -> None:
        self.action_space = gym.spaces.Discrete(len(OPTIONS))
        self.observation_space = gym.spaces.Box(0.0, 1.0, (OBS_SIZE,), np.float32)
        self._own = world is None
        self.world = world if world is not None else MinetestWorld(radius=RADIUS)
        self._seeds = iter(seeds)
        self.budget = budget
        self.want = want
        self.compiled = compile_code(OPTIONS_SOURCE, filename="<tree options>")
        self.skills: VoxelSkills | None = None
        self.steps = 0
        self.option_steps: list[int] = []
        """Primitive steps each option of the episode took, in order."""
        self.failures: list[Failure] = []
        """Sandbox failures of the episode's options (none expected of this code)."""
        self.decisions = 0
        self.seed_now: int | None = None

    # ------------------------------------------------------------------ gym

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        world_seed = (options or {}).get("world_seed")
        if world_seed is None:
            world_seed = next(self._seeds)
        self.seed_now = int(world_seed)
        obs = self.world.reset(self.seed_now)
        self.skills = VoxelSkills(obs, self.world.node_rules, self.world.game_rules)
        self._proxy = ReadOnlyProxy(self.skills)
        self._columns = ColumnMap()
        self._columns.add(obs, self.skills.position())
        self._start_y = self.skills.position()[1]
        self._namespace = self._load()
        self._obs = obs
        self._done = False
        self.steps, self.decisions, self.option_steps, self.failures = 0, 0, [], []
        self._last = -1
        self._last_moved = 0.0
        self._tried: dict[int, tuple[tuple[int, int, int], int]] = {}
        return self._features(), self._info()

    def step(self, action):
        if self.skills is None or self._done:
            raise RuntimeError("reset() before step()")
        option = OPTIONS[int(action)]
        before = _carried(self._obs)
        start = self.skills.position()
        taken = self._run_option(option)
        here = self.skills.position()
        self._tried[int(action)] = (start, abs(here[0] - start[0]) + abs(here[2] - start[2]))
        self.decisions += 1
        self.option_steps.append(taken)
        self._last, self._last_moved = int(action), taken / OPTION_CAP
        gained = max(0, min(_carried(self._obs), self.want) - min(before, self.want))
        reward = gained - STEP_COST * taken - DECISION_COST
        success = _carried(self._obs) >= self.want
        dead = self._obs.status.get("health", 1) <= 0
        terminated = success or dead
        truncated = not terminated and (
            self.steps >= self.budget or self.decisions >= MAX_DECISIONS
        )
        self._done = terminated or truncated
        return self._features(), float(reward), terminated, truncated, self._info()

    def close(self) -> None:
        if self._own:
            self.world.close()

    # ------------------------------------------------------------------ options

    def _load(self) -> Namespace:
        api = {
            "START_Y": self._start_y,
            "CLIMB": CLIMB_ABOVE_START,
            "REACH": REACH,
            "LOOK": LOOK,
            "SPIRAL": SPIRAL,
            "WANT": self.want,
        }
        return load(self.compiled, api_names=api)

    def _run_option(self, name: str) -> int:
        """Drive option ``name`` through the sandbox until it returns, its cap, the
        budget or the goal; every primitive step taken counts. Returns the steps."""
        assert self.skills is not None
        stepper = self._namespace.start(
            name,
            self._proxy,
            allowed_actions=self.world.action_names,
            deadline=time.monotonic() + OPTION_WALL_S,
            wall_s=OPTION_WALL_S,
        )
        taken = 0
        try:
            while taken < OPTION_CAP and self.steps < self.budget:
                action = stepper.next_action()
                if action is None:
                    break
                obs, _, done, info = self.world.step(action)
                taken += 1
                self.steps += 1
                self.skills._observe(obs, info)  # the driver's hook: remember the window
                self._columns.add(obs, self.skills.position())
                self._obs = obs
                if done or _carried(obs) >= self.want:
                    break
        finally:
            stepper.close()
        if stepper.failure is not None:
            self.failures.append(stepper.failure)
            try:  # a failed namespace stays failed: a fresh one for the next option
                self._namespace = self._load()
            except SandboxError as err:
                self.failures.append(err.failure)
        return taken

    # ------------------------------------------------------------------ observation

    def _features(self) -> np.ndarray:
        assert self.skills is not None
        here = self.skills.position()
        counts = np.log1p(self._columns.sector_counts(here)) / 8.0
        trunks = [v for t in TRUNKS for v in self.skills.seen(t)]
        nearest = min((abs(v[0] - here[0]) + abs(v[2] - here[2]) for v in trunks), default=64)
        last = np.zeros(len(OPTIONS), np.float32)
        if self._last >= 0:
            last[self._last] = 1.0
        extra = [
            1.0 if trunks else 0.0,
            min(nearest, 64) / 64.0,
            (np.clip((here[1] - self._start_y) / 40.0, -1, 1) + 1) / 2,
            min(self.steps / self.budget, 1.0),
            min(_carried(self._obs) / max(self.want, 1), 1.0),
            min(self._last_moved, 1.0),
        ]
        blocked = np.zeros(len(HEADINGS), np.float32)
        for i in range(len(HEADINGS)):
            start, moved = self._tried.get(i, (None, BLOCKED_MOVE))
            if start is not None and moved < BLOCKED_MOVE:
                near = abs(here[0] - start[0]) + abs(here[2] - start[2]) < BLOCKED_MOVE
                blocked[i] = 1.0 if near else 0.0
        parts = [counts.reshape(-1), np.asarray(extra, np.float32), last, blocked]
        vec = np.concatenate(parts)
        return np.clip(vec, 0.0, 1.0).astype(np.float32)

    def _info(self) -> dict[str, Any]:
        return {
            "seed": self.seed_now,
            "steps": self.steps,
            "trunks": _carried(self._obs),
            "success": _carried(self._obs) >= self.want,
            "decisions": self.decisions,
            "failures": len(self.failures),
        }


class RandomOptions:
    """A control that chooses among the options uniformly at random (SB3's ``predict``
    shape), seeded: what the options alone give without learning."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def predict(self, obs, deterministic: bool = False):
        return int(self._rng.integers(len(OPTIONS))), None


def run_learned(
    env: VoxelTreeOptions, policy, world_seed: int, deterministic: bool = False
) -> dict[str, Any]:
    """One episode of ``policy`` (anything with SB3's ``predict``) on ``world_seed``:
    success, primitive steps, trunks, options taken and their counts. By default the
    policy's own distribution is sampled (PPO's policy is stochastic; its argmax can
    repeat an option that does nothing, from an observation that then does not change),
    with torch's generator seeded by the world seed so that a run repeats."""
    if not deterministic and hasattr(policy, "policy"):
        import torch

        torch.manual_seed(world_seed)
    obs, info = env.reset(options={"world_seed": world_seed})
    started = time.perf_counter()
    taken: list[str] = []
    done = False
    while not done:
        action, _ = policy.predict(obs, deterministic=deterministic)
        taken.append(OPTIONS[int(action)])
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    return {
        "success": bool(info["success"]),
        "steps": info["steps"],
        "trunks": info["trunks"],
        "decisions": info["decisions"],
        "failures": info["failures"],
        "options": {name: taken.count(name) for name in OPTIONS if name in taken},
        "wall_s": time.perf_counter() - started,
    }


# ---------------------------------------------------------------------- in a run's menu

OPTION_DESCRIPTIONS = {
    **{
        f"head_{h}": f"head {REACH} nodes {h.upper()} (tunnelling through leaves and soil,"
        " climbing out of hollows); if trunks come into view, dig them"
        for h in HEADINGS
    },
    "collect": "dig the nearest trunk seen, and the next, until the goal is carried",
    "explore": "walk to the nearest ground next to land not yet seen, then dig trunks seen",
    "search": "one leg of a square spiral of waypoints around the start, then dig trunks seen",
    "collect_drop": "as collect, dropping down slopes the body survives and digging down",
    "explore_drop": "as explore, dropping down slopes the body survives and digging down",
}
"""What each tree-search option does, for the fast agent's menu."""

MOVE_SOURCE = '''"""Head REACH nodes one way: the move is coded, the way learned."""


def run(skills):
    x, y, z = skills.position()
    skills.tunnel(True, down=False)
    return (yield from skills.head_for(x + REACH * DX, z + REACH * DZ, patience=2 * LOOK))
'''


def _header(**names: object) -> str:
    return "".join(f"{k} = {v!r}\n" for k, v in names.items()) + "\n"


def tree_option_source(name: str, want: int = WANT) -> str:
    """Option ``name`` of :data:`OPTIONS` as a coded action of an RL config: the options'
    module with its host constants written in and ``run(skills)`` calling ``name``.

    A coded action starts afresh at every call (:class:`~rl.rl_env.SubtaskEnv`), so what
    the benchmark's env keeps across the options of an episode (trunks out of reach, the
    search's next waypoint) lasts one call here, and the climbing limit is measured from
    where the call began."""
    if name not in OPTIONS:
        raise KeyError(f"no tree option {name!r}: one of {', '.join(OPTIONS)}")
    head = _header(
        START_Y=None, CLIMB=CLIMB_ABOVE_START, REACH=REACH, LOOK=LOOK, SPIRAL=SPIRAL, WANT=want
    )
    return head + OPTIONS_SOURCE + f"\n\ndef run(skills):\n    return (yield from {name}(skills))\n"


def move_option_source(heading: str) -> str:
    """A plain move towards ``heading`` (a key of :data:`HEADINGS`) as a coded action."""
    dx, dz = HEADINGS[heading]
    return _header(REACH=REACH, LOOK=LOOK, DX=dx, DZ=dz) + MOVE_SOURCE


def menu(item: str, goal: int) -> list[tuple[str, str, str]]:
    """(name, description, source) of the coded actions a learned Minetest step is offered:
    the tree search's options for the trunks (``goal`` of them), plain moves for any
    other step (beside the step's own code, which the fast agent adds)."""
    if item == "default:tree":
        return [(n, OPTION_DESCRIPTIONS[n], tree_option_source(n, goal)) for n in OPTIONS]
    return [
        (f"move_{h}", f"head {REACH} nodes {h.upper()}", move_option_source(h)) for h in HEADINGS
    ]
