"""The survival arbiter: when a composed episode breaks off work to survive, and how.

RL-GPT codes what can be written down and learns the rest. The diamond chain's stages
are code, and so are the survival needs that keep the player alive (drink, eat,
retreat, shelter, sleep: :mod:`knowledge.survival`); what code does badly is *when* to
run which, given threats, vitals and daylight. The task planner
(:func:`episodes.composite.run_composed`) asks its needs at every step:

- with no arbiter, each need's threshold decides (a vital below ``below``);
- with an arbiter, :class:`ArbiterHook` answers with one of :data:`OPTIONS`: keep
  working, what the thresholds would do ('coded'), or a need by name, including two
  that only an arbiter runs (``knowledge.survival.ARBITER_ONLY``: defend, evade).
  The options are code; the choice is learned.

With a ``floor`` (:data:`FLOOR`), the thresholds of the vital needs still act when the
policy would let them pass: the policy can run a need earlier, or fight, hide or keep
working, but never starve the player past the coded limits.

The hook asks its policy only every :data:`CHECK` steps and only at a *decision point*
(:func:`decision_point`: a vital low, dusk or night, a hostile near, an arrow in view,
or :data:`DECIDE_EVERY` steps since the last decision); elsewhere the stage keeps
working. What the policy sees is :func:`features`: vitals, daylight, inventory and
progress along the chain, threats in view, water, cows and stone remembered, the
terrain around.

:class:`ArbiterEnv` is the same thing as a gymnasium env for PPO: the composed episode
runs in a thread of its own, and each decision is one env step; the reward of a
decision is everything the world gave until the next one (Crafter's reward: +1 per
achievement, ±0.1 per health point) plus :data:`DIAMOND_BONUS` for the diamond, and
``info["primitive_steps"]`` is the world steps it lasted (SMDP discounting,
:mod:`rl.smdp`). Training episodes are the deployed episodes: the same stages, the
same planner, the same hook.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

OPTIONS = (
    "work", "coded", "drink_water", "eat_cow", "retreat", "shelter", "sleep", "defend",
    "evade",
)  # fmt: skip
"""What the arbiter can choose: keep working on the stage; what the needs' thresholds
would do now; or run one need's stage (knowledge.survival.arbiter_needs) until it is
served: drink to full, eat to full, fight off and wall in until health is back, wall in
until dawn, sleep until rested, fight what comes adjacent, step away from hostiles."""

CODED = OPTIONS.index("coded")

FLOOR = ("drink_water", "eat_cow", "sleep")
"""The vital needs whose thresholds a floored arbiter keeps (``ArbiterHook(floor=...)``):
a lack of drink, food or energy kills by itself, whatever else the player does."""

CHECK = 5
"""Steps between the hook's looks at the world (the prelude's own survival check)."""
DECIDE_EVERY = 50
"""Steps of quiet work after which the arbiter is asked anyway (a cow or water in view
may be worth a detour)."""
LOW = {"health": 6, "food": 6, "drink": 6, "energy": 4}
"""A vital at or below this makes a check a decision point: at or above the needs'
thresholds (knowledge.skill_prelude), so the arbiter sees a need coming before the
thresholds act on it."""
DUSK_LIGHT = 0.65
"""Light below this (the coded dusk is 0.6) makes every check a decision point."""
THREAT_NEAR = 6
"""A hostile within this many tiles (Manhattan) makes a check a decision point."""
HOSTILE = ("zombie", "skeleton")
DIAMOND_BONUS = 10.0
"""Reward for the diamond on top of Crafter's +1: the chain's goal, worth more than
every other unlock of a typical episode together."""

ITEMS = (
    "wood", "stone", "coal", "iron", "sapling", "wood_pickaxe", "stone_pickaxe",
    "iron_pickaxe", "wood_sword", "stone_sword", "iron_sword",
)  # fmt: skip
PROGRESS = (
    "place_table", "make_wood_pickaxe", "collect_stone", "make_stone_pickaxe",
    "place_furnace", "collect_coal", "collect_iron", "make_iron_pickaxe",
)  # fmt: skip
TERRAIN = ("grass", "stone", "path", "sand", "tree", "water")
FAR = 16.0
"""Distances are scaled by this and clipped at 1 (beyond ~a view's width, far is far)."""
N_FEATURES = 4 + 4 + len(ITEMS) + len(PROGRESS) + 9 + 8 + len(TERRAIN) + 2


def _near(offset: tuple[int, int] | None) -> tuple[float, float, float]:
    """(present, dx, dy) scaled: a thing at an offset, or nothing known."""
    if offset is None:
        return 0.0, 0.0, 0.0
    return 1.0, max(-1.0, min(1.0, offset[0] / FAR)), max(-1.0, min(1.0, offset[1] / FAR))


def _dist(offset: tuple[int, int] | None) -> float:
    if offset is None:
        return 1.0
    return min(1.0, (abs(offset[0]) + abs(offset[1])) / FAR)


def _hostiles(obs: Any, kind: str) -> list[tuple[int, int]]:
    near = [(dx, dy) for k, dx, dy in obs.creatures if k == kind]
    return sorted(near, key=lambda d: abs(d[0]) + abs(d[1]))


def features(skills: Any, obs: Any, step: int, since: int) -> np.ndarray:
    """What the arbiter sees (:data:`N_FEATURES` floats, each in [-1, 1]): ``obs`` (the
    world's latest observation) and the skills' memory of the map; only what the player
    perceives and remembers, as a coded policy would."""
    status, inventory = obs.status, obs.inventory
    out: list[float] = [status.get(v, 0.0) / 9.0 for v in ("health", "food", "drink", "energy")]
    out += [float(obs.daylight), float(obs.sleeping), float(skills.enclosed()),
            min(1.0, step / 10_000)]  # fmt: skip
    out += [min(1.0, inventory.get(item, 0) / 9.0) for item in ITEMS]
    unlocked = skills.achievements()
    out += [float(unlocked.get(name, 0) > 0) for name in PROGRESS]
    zombies, skeletons = _hostiles(obs, "zombie"), _hostiles(obs, "skeleton")
    out += [*_near(zombies[0] if zombies else None), min(1.0, len(zombies) / 3)]
    out += [*_near(skeletons[0] if skeletons else None)]
    arrows = obs.missiles
    hits = sum(1 for dx, dy, fx, fy in arrows if dx + fx == 0 and dy + fy == 0)
    out += [min(1.0, len(arrows) / 3), float(hits > 0)]
    out += [_dist(skills.nearest("water")), float(skills.sees("water"))]
    out += [_dist(skills.nearest("cow")), float(skills.sees("cow"))]
    out += [_dist(skills.nearest("stone")), _dist(skills.nearest("table"))]
    out += [_dist(skills.nearest("plant")), float(bool(obs.ripe))]
    view = obs.view
    size = float(view.size) or 1.0
    names = obs.names
    for name in TERRAIN:
        out.append(float((view == names.index(name)).sum()) / size if name in names else 0.0)
    out += [min(1.0, since / DECIDE_EVERY), float(obs.daylight < DUSK_LIGHT)]
    return np.asarray(out, dtype=np.float32)


def decision_point(obs: Any, since: int) -> bool:
    """Whether the arbiter is asked at this check (``since``: steps since it last was)."""
    if since >= DECIDE_EVERY:
        return True
    if any(obs.status.get(name, 9) <= level for name, level in LOW.items()):
        return True
    if obs.daylight < DUSK_LIGHT or obs.missiles:
        return True
    return any(k in HOSTILE and abs(dx) + abs(dy) <= THREAT_NEAR for k, dx, dy in obs.creatures)


Policy = Callable[[np.ndarray], int]
"""Features → an index into :data:`OPTIONS`."""


class ArbiterHook:
    """What the task planner asks at each step: the option to run now.

    Between checks (every :data:`CHECK` steps) and at checks that are no decision
    point: ``"work"``. Otherwise ``OPTIONS[policy(features)]``; every decision is
    counted (``decisions``: option → count) so a run can say what the arbiter did.
    """

    needs = OPTIONS[2:]
    """The need stages its options name (the episode must have them)."""

    def __init__(self, policy: Policy, floor: Sequence[str] = ()) -> None:
        self.policy = policy
        self.floor = tuple(floor)
        """Needs whose thresholds overrule the policy: when the coded thresholds would
        run one of these now, the planner runs it whatever the policy says (a learned
        arbiter may act earlier than the code, never later). Empty: the policy alone."""
        unknown = sorted(set(self.floor) - set(self.needs))
        if unknown:
            raise ValueError(f"floor needs {unknown} are not options of the arbiter")
        self.looked = -CHECK
        self.last = 0
        self.decisions: dict[str, int] = {}

    def choose(self, skills: Any, obs: Any, step: int) -> str:
        if step - self.looked < CHECK:
            return "work"
        self.looked = step
        since = step - self.last
        if not decision_point(obs, since):
            return "work"
        self.last = step
        option = OPTIONS[int(self.policy(features(skills, obs, step, since)))]
        self.decisions[option] = self.decisions.get(option, 0) + 1
        return option


def sb3_policy(model: Any, deterministic: bool = True) -> Policy:
    """A trained SB3 model as an arbiter policy."""

    def policy(x: np.ndarray) -> int:
        action, _ = model.predict(x, deterministic=deterministic)
        return int(action)

    return policy


def load_policy(path: str, deterministic: bool = True) -> Policy:
    """An arbiter saved by ``model.save`` (an SB3 PPO zip) as a policy, on the CPU."""
    from stable_baselines3 import PPO

    return sb3_policy(PPO.load(path, device="cpu"), deterministic)


# ---------------------------------------------------------------------- the PPO env


class _Stop(BaseException):  # noqa: N818 - a control-flow signal, not an error
    """Raised in the episode's thread to end it when the env is closed mid-episode."""


class ArbiterEnv(gym.Env):
    """One decision of the survival arbiter per step, in composed diamond episodes.

    ``play(seed, hook, on_step)`` plays one whole composed episode with the hook
    attached and returns it (``episodes.composite.ComposedEpisode``); it runs in a thread
    of its own while this env hands decisions back and forth. ``seeds`` gives the
    worlds, one per episode, in order (cycled). The reward adds ``diamond_bonus`` for
    the diamond, takes ``death_penalty`` for the player's death, and adds
    ``health_weight`` per health point gained (taken per point lost) on top of Crafter's
    own 0.1: survival's consequences show within a decision or two, where the diamond's
    show only at the episode's end. ``floor`` is the hook's (:class:`ArbiterHook`).
    """

    metadata: dict[str, Any] = {}

    def __init__(
        self,
        play: Callable[[int, ArbiterHook, Callable[..., None]], Any],
        seeds: Sequence[int],
        diamond_bonus: float = DIAMOND_BONUS,
        death_penalty: float = 0.0,
        health_weight: float = 0.0,
        floor: Sequence[str] = (),
    ) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (N_FEATURES,), np.float32)
        self.action_space = gym.spaces.Discrete(len(OPTIONS))
        self._play = play
        self._seeds = list(seeds)
        self._bonus = diamond_bonus
        self._death = death_penalty
        self._health_weight = health_weight
        self._floor = tuple(floor)
        self._health: float | None = None
        self._episodes = 0
        self._thread: threading.Thread | None = None
        self._to_env: queue.Queue = queue.Queue()
        self._to_game: queue.Queue = queue.Queue()
        self._reward = 0.0
        self._steps = 0
        self._stopping = False
        self.finished: list[dict[str, Any]] = []
        """One record per finished episode: seed, success, steps, cause, decisions."""

    # -- the episode's thread

    def _run(self, seed: int) -> None:
        def policy(x: np.ndarray) -> int:
            if self._stopping:
                raise _Stop
            self._to_env.put(("decide", x))
            action = self._to_game.get()
            if action is None:
                self._stopping = True
                raise _Stop
            return action

        hook = ArbiterHook(policy, self._floor)

        def on_step(obs: Any, reward: float, done: bool, info: Mapping[str, Any]) -> None:
            if self._stopping:  # whatever caught the first _Stop, the next step ends it
                raise _Stop
            self._reward += reward
            self._steps += 1
            if "collect_diamond" in info.get("achievements", ()):
                self._reward += self._bonus
            if done and info.get("discount", 1.0) == 0.0:  # Crafter's death
                self._reward -= self._death
            health = float(obs.status.get("health", 0.0))
            if self._health is not None:
                self._reward += self._health_weight * (health - self._health)
            self._health = health

        try:
            episode = self._play(seed, hook, on_step)
        except _Stop:
            return
        except Exception as exc:  # noqa: BLE001 - handed to the env's caller as is
            self._to_env.put(("error", exc))
            return
        record = {"seed": seed, "success": episode.success, "steps": episode.steps,
                  "cause": episode.cause, "decisions": dict(hook.decisions)}  # fmt: skip
        self._to_env.put(("end", record))

    def _next(self) -> tuple[str, Any]:
        kind, value = self._to_env.get()
        if kind == "error":
            raise value
        return kind, value

    def _collect(self) -> tuple[float, int]:
        reward, steps = self._reward, self._steps
        self._reward, self._steps = 0.0, 0
        return reward, steps

    # -- gymnasium

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.close()
        while True:
            world = self._seeds[self._episodes % len(self._seeds)]
            self._episodes += 1
            self._reward, self._steps, self._health = 0.0, 0, None
            self._thread = threading.Thread(target=self._run, args=(world,), daemon=True)
            self._thread.start()
            kind, value = self._next()
            if kind == "decide":
                return value, {}
            self._thread.join()
            self.finished.append(value)  # over before any decision: the next world

    def step(self, action: int):
        self._to_game.put(int(action))
        kind, value = self._next()
        reward, steps = self._collect()
        info: dict[str, Any] = {"primitive_steps": max(1, steps)}
        if kind == "decide":
            return value, reward, False, False, info
        self._thread.join()
        self._thread = None
        self.finished.append(value)
        info["episode_record"] = value
        # The composer's step cap ends an episode that neither died nor won: truncated.
        truncated = value["cause"] == "step_budget"
        return np.zeros(N_FEATURES, np.float32), reward, not truncated, truncated, info

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._to_game.put(None)
            self._thread.join(timeout=10)
        self._thread = None
        self._stopping = False
        while not self._to_env.empty():
            self._to_env.get_nowait()
        while not self._to_game.empty():
            self._to_game.get_nowait()
