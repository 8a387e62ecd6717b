"""Composed-policy episodes: the task planner running stages and needs inside one episode.

RL-GPT's slow agent splits a task into sub-actions; each is solved by a *stage*, either
coded (``Stage.code``, a ``run(skills)`` generator run in the sandbox) or learned
(``Stage.policy_path``, an SB3 PPO zip acting through the RL interface of
``Stage.config``). :func:`run_composed` plays one episode of such a composed policy:

- **reset** the world with the episode's seed; one :class:`~skills.skills.Skills` object
  (from ``skills_factory``) lives through the whole episode, so the map remembered by
  one stage serves the next, and a tracing skills object records every stage's calls.
- **the planner loop** — until the episode's ``subtask`` test holds, its
  ``subtask.max_steps`` is reached, the world ends the episode, or the wall budget runs
  out: if a need triggers (``status[stat] < below``, the need not on cooldown), run its
  stage; otherwise run the first stage, in order, whose test has not yet held in this
  episode.
- **stage tests are sticky** — a stage's test is its subtask's achievement (unlocked this
  episode) when it names one, else its goal inventory at that moment; once it held, at
  any check between runs or at the end of a run, the stage is done for the episode,
  even if the items are later spent (a table's wood).
- **a stage run** lasts until its test holds, its ``subtask.max_steps``, its code returns
  or fails, or a need triggers (``interrupted``: not a failure, restarted from scratch
  later). A stage that fails is run again — at least :data:`STAGE_RETRIES` more times,
  and beyond that while its failed runs took fewer than :data:`STAGE_ALLOWANCE` × its
  ``max_steps`` steps in all — then the episode gives up with that run's cause; a
  failure that no retry can fix (code that does not compile, a policy that cannot be
  loaded) ends the episode at once.
- **a need run** lasts until ``stat`` reaches ``until`` (when positive; else until its
  stage's test holds, counted from the run's start: an achievement unlocked during the
  run, or the goal inventory), its code returns, or its stage's ``max_steps``. It
  succeeded if ``stat`` reached ``until`` or its stage's test held during the run (a
  drink that one sip served). Needs do not interrupt needs. A need run that does not
  succeed (or takes no step) puts the need on cooldown for :data:`NEED_COOLDOWN_STEPS`
  steps, so a need that cannot be served does not loop; a need whose stage can never
  run (bad code) is off for the episode.

Coded stages compile once per rollout (:func:`prepare_stages`) and load afresh per run
(module state does not survive a restart). Learned stages load their zip once per
rollout after checking its sha256 (``policy_unusable`` otherwise), and drive the SAME
world mid-episode: a :class:`~rl.rl_env.SubtaskEnv` built from the stage's config
(subtask replaced by the stage's, no setup, no shaped reward) *attaches* to the running
episode (:meth:`SubtaskEnv.attach`), then ``model.predict(obs)`` → ``env.step(a)`` until
it terminates or truncates; its coded options run inside that env as in training.

**From a start** (``start_at`` N, :func:`run_composed`): the first N stages are the
setup; the episode is reported from the moment the planner first finds them all done —
where stage N begins. The start is made once per world and setup (and saved with the
planner's state: needs' cooldowns, the stages done, the skills' memory), then restored
for every later episode, which goes on exactly as the one that made it. Its steps are
the ``setup_steps`` of the episode that made it, booked once.

Every world step, whoever takes it, passes through :class:`EpisodeWorld`, which keeps
the episode's books (steps, reward, achievements, frames) and tells the stage to stop
the moment the planner must take over (the stage's test held, a need triggered, the
episode is over). So one episode-wide check serves coded and learned stages alike.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

import sandbox
from messages import encode
from messages.causes import (
    EPISODE_DONE,
    INTERRUPTED,
    POLICY_FINISHED,
    POLICY_UNUSABLE,
    SEARCH_CAUSES,
    SETUP_FAILED,
    STEP_BUDGET,
    SUCCESS,
    TIMEOUT,
)
from messages.rollout import EpisodeReport, Segment, StageRun
from messages.task import DAYLIGHT, Need, NeedStat, Stage, Subtask
from rl.start_states import FailedSetup, StartState, StartStates, restore_state, save_start
from rl.start_states import start_key as _start_key
from skills.skills import Skills
from worlds.world import Observation, World

STAGE_RETRIES = 3
"""Further runs a failed stage always gets (4 runs in all) before the episode gives up."""
STAGE_ALLOWANCE = 4
"""Beyond those, a failed stage is run again while its failed runs took fewer than this
many times its ``max_steps`` in all (and each took a step): a search that gave up early
goes on from where it stands, as a longer search would (a search's causes only:
gave up, or ran into its cap; code that raises gets the fixed retries)."""
MAX_STAGE_FAILURES = 40
"""Failed runs of one stage after which the episode gives up whatever the steps."""
NEED_COOLDOWN_STEPS = 50
"""World steps a need waits after a run that did not serve it (Crafter's vitals drop one
point every ~25–35 steps: 50 steps lets the stages make progress meanwhile)."""
MAX_FRAMES = 1000
"""Frames kept for a video (64×64 RGB: 1,000 frames is 12 MB raw, ~1 MB compressed)."""
MAX_STAGE_RUNS = 500
"""StageRun records kept per episode (a long episode of needs would otherwise grow them
without bound); the planner itself stops after 4× as many runs."""
MAX_OUTPUT_CHARS = sandbox.Limits().max_output_chars
# Causes no retry can change: the code or the policy itself is unusable.
PERMANENT_CAUSES = frozenset({"syntax", "forbidden", POLICY_UNUSABLE})


# ---------------------------------------------------------------------- need statistics


def stat_value(obs: Observation, stat: NeedStat) -> float:
    """A need's statistic: a vital from the status, or ``daylight`` (the light the
    player sees, 0–1)."""
    if stat == DAYLIGHT:
        return float(obs.daylight)
    return float(obs.status.get(stat, float("inf")))


# ---------------------------------------------------------------------- the world tap


class EpisodeWorld:
    """The world as one composed episode sees it: each step, whoever takes it (a coded
    stage, a learned policy, one of its coded options), is counted here, and ``done``
    is reported as soon as ``halt()`` names a reason to stop the running stage."""

    def __init__(
        self,
        world: World,
        *,
        frames: list[np.ndarray] | None = None,
        on_step: Callable[[Observation, float, bool, Mapping[str, Any]], None] | None = None,
        max_frames: int = MAX_FRAMES,
    ) -> None:
        self.world = world
        self.frames = frames
        self.on_step = on_step
        self.max_frames = max_frames
        self.halt: Callable[[], str | None] = lambda: None
        """Set by the planner for each run: a reason to stop the run now, or None."""
        self.halted: str | None = None
        """The reason ``halt`` gave at the last step that stopped a run."""
        self.obs: Observation | None = None
        self.steps = 0
        self.reward = 0.0
        self.counts: dict[str, int] = {}
        self.unlocked: list[str] = []
        self.done = False
        self.died = False

    @property
    def action_names(self) -> Sequence[str]:
        return self.world.action_names

    @property
    def achievement_names(self) -> Sequence[str]:
        return self.world.achievement_names

    def reset(self, seed: int | None = None) -> Observation:
        self.obs = self.world.reset(seed)
        self.steps, self.reward = 0, 0.0
        self.counts, self.unlocked = {}, []
        self.done = self.died = False
        self.halted = None
        if self.frames is not None and len(self.frames) < self.max_frames:
            self.frames.append(self.world.render())
        return self.obs

    def step(self, action: str) -> tuple[Observation, float, bool, dict[str, Any]]:
        if self.done:
            raise RuntimeError("the episode is over")
        obs, reward, done, info = self.world.step(action)
        self.obs = obs
        self.steps += 1
        self.reward += reward
        for name in info.get("achievements", ()):
            self.counts[name] = self.counts.get(name, 0) + 1
            self.unlocked.append(name)
        self.done = bool(done)
        self.died = self.done and info.get("discount", 1.0) == 0.0
        if self.frames is not None and len(self.frames) < self.max_frames:
            self.frames.append(self.world.render())
        if self.on_step is not None:
            self.on_step(obs, reward, bool(done), info)
        reason = self.halt()
        if reason is not None:
            self.halted = reason
        return obs, reward, self.done or reason is not None, info

    def render(self) -> np.ndarray:
        return self.world.render()


# ---------------------------------------------------------------------- preparing stages


@dataclasses.dataclass
class PreparedStage:
    """A stage made ready once per rollout: compiled code, or a loaded policy and the
    env it acts through; ``problem`` when it can never run."""

    stage: Stage
    compiled: sandbox.CompiledCode | None = None
    model: Any = None
    env: Any = None
    problem: sandbox.Failure | None = None

    @property
    def name(self) -> str:
        return self.stage.subtask.name

    @property
    def learned(self) -> bool:
        return bool(self.stage.policy_path)


def prepare_stages(stages: Sequence[Stage], world: World) -> list[PreparedStage]:
    """Compile coded stages and load learned ones (sha256 checked), once per rollout.
    A stage that cannot run gets a ``problem`` (its episode runs fail with it)."""
    return [_prepare(stage, world) for stage in stages]


def _prepare(stage: Stage, world: World) -> PreparedStage:
    prepared = PreparedStage(stage)
    if stage.policy_path:
        try:
            prepared.model, prepared.env = _load_learned(stage, world)
        except _Unusable as err:
            prepared.problem = sandbox.Failure(POLICY_UNUSABLE, str(err))
        except Exception as err:  # noqa: BLE001 - a config the env refuses, a bad zip
            detail = f"{type(err).__name__}: {err}"
            failure = getattr(err, "failure", None)
            line = failure.line if failure is not None else None
            prepared.problem = sandbox.Failure(POLICY_UNUSABLE, detail[:500], line)
        return prepared
    if not stage.code.strip():
        prepared.problem = sandbox.Failure(POLICY_UNUSABLE, "the stage has no code and no policy")
        return prepared
    try:
        prepared.compiled = sandbox.compile_code(stage.code, filename=f"<{stage.subtask.name}>")
    except sandbox.SandboxError as err:
        prepared.problem = err.failure
    return prepared


class _Unusable(Exception):
    pass


def _load_learned(stage: Stage, world: World) -> tuple[Any, Any]:
    from rl.artifacts import PolicyUnusable, load_policy
    from rl.rl_env import SubtaskEnv

    if stage.config is None:
        raise _Unusable("a learned stage needs the RL config its policy was trained on")
    try:
        model = load_policy(stage.policy_path, stage.policy_sha256, config=stage.config)
    except PolicyUnusable as exc:
        raise _Unusable(str(exc)) from None
    subtask = stage.subtask
    if subtask.achievement:  # the planner's test: the achievement when there is one
        subtask = dataclasses.replace(subtask, goal={})
    # The stage's own test and cap; no setup (the episode is under way) and no shaped
    # reward (nothing learns here).
    # The planner serves the needs itself (and interrupts the stage for them).
    config = dataclasses.replace(
        stage.config, subtask=subtask, setup_code="", reward_code="", needs=[]
    )
    flatten = type(model.observation_space).__name__ != "Dict"
    env = SubtaskEnv(config, world_factory=lambda: world, flatten=flatten)
    if env.observation_space != model.observation_space:
        raise _Unusable("the policy's observation space differs from its config's")
    if env.action_space != model.action_space:
        raise _Unusable(
            f"the policy has {model.action_space}, its config offers {env.action_space}"
        )
    return model, env


# ---------------------------------------------------------------------- the episode


@dataclasses.dataclass
class ComposedEpisode:
    """What one composed-policy episode did (:meth:`report` makes the message)."""

    seed: int
    success: bool
    steps: int
    reward: float
    achievements: list[str]
    counts: dict[str, int]
    """Achievement → times it happened in the world episode (Crafter's stats): from a
    start, what setup unlocked too when this episode made the start."""
    cause: str
    detail: str
    line: int
    stages: list[StageRun]
    trace: list[Segment]
    output: str
    wall_s: float
    setup_steps: int = 0
    """From a start: the steps this episode took making it (0: restored, or from reset).
    ``steps``, ``reward``, ``achievements``, ``stages``, ``trace`` are from the start on."""
    setup_reward: float = 0.0
    setup_achievements: list[str] = dataclasses.field(default_factory=list)
    restored: bool = False
    """From a start that was restored, not made (:attr:`EpisodeReport.restored`)."""

    def report(self) -> EpisodeReport:
        return EpisodeReport(
            seed=self.seed,
            success=self.success,
            steps=self.steps,
            reward=self.reward,
            achievements=list(self.achievements),
            cause=self.cause,
            detail=self.detail,
            line=self.line,
            trace=list(self.trace),
            wall_s=self.wall_s,
            stages=list(self.stages),
            setup_steps=self.setup_steps,
            setup_reward=self.setup_reward,
            setup_achievements=list(self.setup_achievements),
            restored=self.restored,
        )


SkillsFactory = Callable[[Observation, Sequence[str], int], Skills]


def run_composed(
    world: World,
    stages: Sequence[Stage | PreparedStage],
    needs: Sequence[Need],
    subtask: Subtask,
    seed: int,
    *,
    wall_s: float,
    skills_factory: SkillsFactory | None = None,
    on_step: Callable[[Observation, float, bool, Mapping[str, Any]], None] | None = None,
    frames: list[np.ndarray] | None = None,
    need_stages: Sequence[PreparedStage] | None = None,
    skip_failed: bool = False,
    start_at: int = 0,
    start_states: StartStates | None = None,
    arbiter: Any = None,
) -> ComposedEpisode:
    """Play one episode of a composed policy (see the module docstring).

    ``arbiter`` (an :class:`episodes.arbiter.ArbiterHook`) decides which need runs, and
    when, instead of the needs' thresholds: it is asked wherever the planner checks its
    needs (between runs, and at every step of a stage's run); each option it names is a
    need's stage name, 'work' (no need) or 'coded' (the thresholds' answer).

    ``stages`` may come prepared (:func:`prepare_stages`, once per rollout) or raw;
    ``need_stages`` are the needs' stages prepared likewise (default: prepared here).
    ``skills_factory(obs, action_names, seed)`` builds the episode's skills (default
    :class:`Skills`; a tracing one gives the trace). ``on_step(obs, reward, done, info)``
    sees every world step; ``frames`` collects rendered frames (the reset frame, then
    one per step, up to :data:`MAX_FRAMES`). ``wall_s`` bounds the whole episode. With
    ``skip_failed`` a stage that gives up is dropped for the episode and the planner goes
    on with the next (a curriculum); the episode then ends once no stage is left.

    ``start_at`` N > 0: the episode is reported from its *start*, the first moment the
    planner finds stages ``0…N-1`` all done (or the episode's test held) — where stage N
    begins. With ``start_states`` (and a world it can save, :func:`composed_start_key`)
    that start is made once — the episode played from reset up to it, its steps reported
    as ``setup_steps`` — and every later episode of the same world, stages before N,
    needs, subtask and wall budget restores it and goes on exactly as the episode that
    made it did (the planner's own state, needs' cooldowns and the skills' memory
    included), taking and reporting no setup step. An episode that ends before its start
    (the player died, a stage before N gave up, the cap) is :data:`SETUP_FAILED` with no
    stage run — stage N not reached — and so is every later one of that world (unless
    the wall clock ended it: that one is tried again).
    """
    if start_at and skip_failed:
        raise ValueError("start_at needs every stage before it done: not with skip_failed")
    if not 0 <= start_at < max(1, len(stages)):
        raise ValueError(f"start_at must name one of the {len(stages)} stages, not {start_at}")
    planner = _Planner(
        world, stages, needs, subtask, seed, wall_s, skills_factory, on_step, frames, need_stages
    )
    planner.skip_failed = skip_failed
    planner.start_at = start_at
    if arbiter is not None:
        planner.arbiter = arbiter
        planner.need_index = {n.stage.subtask.name: i for i, n in enumerate(planner.needs)}
        unknown = sorted(set(arbiter.needs) - planner.need_index.keys())
        if unknown:
            raise ValueError(f"the arbiter chooses needs {unknown} that the episode lacks")
    if start_at and start_states is not None:
        planner.starts = start_states
        planner.key = composed_start_key(
            world,
            seed,
            [p.stage for p in planner.stages[:start_at]],
            needs,
            subtask,
            wall_s,
            after=[p.stage.subtask for p in planner.stages[start_at:]],
        )
    return planner.run()


def composed_start_key(
    world: World,
    seed: int,
    setup: Sequence[Stage],
    needs: Sequence[Need],
    subtask: Subtask,
    wall_s: float,
    after: Sequence[Subtask] = (),
) -> tuple | None:
    """The start-state cache key (:func:`rl.start_states.start_key`) of the start of
    ``world`` ``seed`` after the composed ``setup`` stages: everything that decides it —
    the stages (code, policy and config, tests and caps), the needs, the episode's test
    and cap, and the tests of the stages ``after`` it (the planner's state saved with the
    start says which of them already held; their code plays no part) — as one digest.
    None when the world cannot be saved."""
    parts = setup_parts(setup, needs, subtask, after)
    text = "composed\n" + "\n".join(p.hex() for p in parts)
    return _start_key(world, seed, text, subtask.max_steps, wall_s)


def setup_parts(
    setup: Sequence[Stage], needs: Sequence[Need], subtask: Subtask, after: Sequence[Subtask]
) -> list[bytes]:
    """What decides a start apart from its world and wall budget, encoded: the ``setup``
    stages, the needs, the episode's test and cap, and the tests of the stages ``after``
    it (:func:`composed_start_key`; :func:`method.split.start_setup_key` too, which
    groups a request's worlds by the starts they share)."""

    parts = [encode(s) for s in setup] + [encode(n) for n in needs] + [encode(subtask)]
    return parts + [b"after"] + [encode(t) for t in after]


@dataclasses.dataclass(frozen=True)
class _Start:
    """Where an episode's start is in its books (what it reports comes after)."""

    steps: int
    reward: float
    unlocked: int
    runs: int
    output: int
    made: bool
    """Whether this episode made the start (its setup is reported with it)."""


class _Planner:
    def __init__(
        self,
        world: World,
        stages: Sequence[Stage | PreparedStage],
        needs: Sequence[Need],
        subtask: Subtask,
        seed: int,
        wall_s: float,
        skills_factory: SkillsFactory | None,
        on_step: Callable[..., None] | None,
        frames: list[np.ndarray] | None,
        need_stages: Sequence[PreparedStage] | None,
    ) -> None:
        self.stages = [s if isinstance(s, PreparedStage) else _prepare(s, world) for s in stages]
        self.needs = list(needs)
        if need_stages is None:
            need_stages = prepare_stages([n.stage for n in self.needs], world)
        if len(need_stages) != len(self.needs):
            raise ValueError("need_stages must match needs one for one")
        self.need_stages = list(need_stages)
        self.subtask = subtask
        self.seed = seed
        self.wall_s = wall_s
        self.skills_factory = skills_factory or (
            lambda obs, actions, s: Skills(obs, actions, seed=s)
        )
        self.tap = EpisodeWorld(world, frames=frames, on_step=on_step)
        self.runs: list[StageRun] = []
        self.run_count = 0
        self.output: list[str] = []
        self.deadline = 0.0
        self.skip_failed = False
        self.start_at = 0
        """Stages before this one are the setup (0: none; see :func:`run_composed`)."""
        self.starts: StartStates | None = None
        self.key: tuple | None = None
        self.start: _Start | None = None
        """Where the start was, once it was reached (or restored)."""
        self.arbiter: Any = None
        """The survival arbiter (:class:`episodes.arbiter.ArbiterHook`), or None: the needs'
        thresholds decide."""
        self.chosen: tuple[int, int | None] | None = None
        """The arbiter's answer at a step (step, need or None), until a need runs: the
        stage it interrupted and the loop's top then see the same answer."""

    # ---- the planner's checks, from the tap's books (valid mid-step, before the skills
    # object has seen the step)

    def _episode_end(self) -> str | None:
        tap = self.tap
        if self.subtask.met(tap.obs.inventory, tap.counts):
            return SUCCESS
        if tap.done:
            return EPISODE_DONE
        if tap.steps >= self.subtask.max_steps:
            return STEP_BUDGET
        if time.monotonic() >= self.deadline:
            return TIMEOUT
        return None

    def _triggered_need(self, step: int) -> int | None:
        if self.arbiter is None:
            return self._threshold_need(step)
        if self.chosen is not None and self.chosen[0] == step:
            return self.chosen[1]
        floor = getattr(self.arbiter, "floor", ())
        if floor:  # the thresholds of a floored need act whatever the policy says
            coded = self._threshold_need(step)
            if coded is not None and self.needs[coded].stage.subtask.name in floor:
                self.chosen = (step, coded)
                return coded
        option = self.arbiter.choose(self.skills, self.tap.obs, step)
        if option == "work":
            need = None
        elif option == "coded":
            need = self._threshold_need(step)
        else:
            need = self.need_index[option]
        self.chosen = (step, need)
        return need

    def _threshold_need(self, step: int) -> int | None:
        """The first need, most urgent first, whose stat is below its threshold."""
        obs = self.tap.obs
        for i, need in enumerate(self.needs):
            if self.cooldown[i] <= step and stat_value(obs, need.stat) < need.below:
                return i
        return None

    def _need_served(self, i: int, start_counts: Mapping[str, int]) -> bool:
        """Whether a run of need ``i`` that began at ``start_counts`` may stop: ``stat``
        reached ``until`` (when positive), else the need stage's test held in the run."""
        need = self.needs[i]
        if need.until > 0:
            return stat_value(self.tap.obs, need.stat) >= need.until
        return self._need_test(i, start_counts)

    def _need_test(self, i: int, start_counts: Mapping[str, int]) -> bool:
        tap = self.tap
        return self.needs[i].stage.subtask.met(
            tap.obs.inventory, tap.counts, since=start_counts, achievement_decides=True
        )

    # ---- starts (start_at > 0)

    def _begin(self) -> FailedSetup | None:
        """Reset the world, or restore the episode's start when one is saved; the known
        failure of a world whose setup never reached its start."""
        tap = self.tap
        saved = self.starts.get(self.key) if self.starts is not None and self.key else None
        if isinstance(saved, FailedSetup):
            return saved
        if isinstance(saved, StartState):
            obs, self.skills, state = restore_state(tap.world, saved)
            tap.obs = obs
            for name, value in state["tap"].items():
                setattr(tap, name, value)
            for name, value in state["planner"].items():
                setattr(self, name, value)
            if tap.frames is not None and len(tap.frames) < tap.max_frames:
                tap.frames.append(tap.world.render())
            self.start = self._here(made=False)
            return None
        obs = tap.reset(self.seed)
        self.skills = self.skills_factory(obs, tap.action_names, self.seed)
        self.done = [False] * len(self.stages)
        self.failures = [0] * len(self.stages)
        self.failed_steps = [0] * len(self.stages)
        self.dropped: set[int] = set()
        self.cooldown = [0] * len(self.needs)
        return None

    def _here(self, made: bool) -> _Start:
        tap = self.tap
        return _Start(tap.steps, tap.reward, len(tap.unlocked), len(self.runs),
                      len(self.output), made)  # fmt: skip

    def _reach_start(self) -> None:
        """The start is here: note where, and save it (once per world and setup). The
        skills' trace starts afresh (what the critic reads is the stage's own)."""
        if hasattr(self.skills, "_segments"):
            self.skills._segments = []
        self.start = self._here(made=True)
        if self.starts is None or self.key is None:
            return
        tap = self.tap
        state = {
            "tap": {"steps": tap.steps, "reward": tap.reward, "counts": dict(tap.counts),
                    "unlocked": list(tap.unlocked), "done": tap.done, "died": tap.died},
            "planner": {"done": list(self.done), "failures": list(self.failures),
                        "failed_steps": list(self.failed_steps), "dropped": set(self.dropped),
                        "cooldown": list(self.cooldown), "run_count": self.run_count,
                        "runs": list(self.runs), "output": list(self.output)},
        }  # fmt: skip
        saved = save_start(tap.world, tap.obs, self.skills, tap.counts, tap.steps, state)
        self.starts.put(self.key, saved)

    def _not_reached(self, reason: str, made: bool, started: float) -> ComposedEpisode:
        """The episode of a world whose setup ended before the start: no stage run, no
        step from the start (the setup's steps, when this episode took them)."""
        tap = self.tap
        name = self.stages[self.start_at].name
        return ComposedEpisode(
            seed=self.seed, success=False, steps=0, reward=0.0, achievements=[],
            counts=dict(tap.counts) if made else {}, cause=SETUP_FAILED,
            detail=f"stage {name!r} was not reached: {reason}"[:1000], line=0, stages=[],
            trace=[], output="", wall_s=round(time.monotonic() - started, 4),
            setup_steps=tap.steps if made else 0, setup_reward=tap.reward if made else 0.0,
            setup_achievements=list(tap.unlocked) if made else [], restored=not made,
        )  # fmt: skip

    # ---- the loop

    def run(self) -> ComposedEpisode:
        tap = self.tap
        known = self._begin()
        # The budget starts after the world is built (or restored), as a coded rollout's.
        started = time.monotonic()
        if known is not None:
            return self._not_reached(known.reason, made=False, started=started)
        self.deadline = started + self.wall_s
        obs = tap.obs
        unknown = sorted({n.stat for n in self.needs} - set(obs.status) - {DAYLIGHT})
        if unknown:
            raise ValueError(
                f"needs name unknown stats {unknown}; the world has {list(obs.status)}"
            )
        done, dropped = self.done, self.dropped
        cause, detail, line = "", "", 0
        while True:
            for i, prepared in enumerate(self.stages):
                done[i] = done[i] or prepared.stage.subtask.met(
                    tap.obs.inventory, tap.counts, achievement_decides=True
                )
            if (
                self.start_at
                and self.start is None
                and (all(done[: self.start_at]) or self._episode_end() == SUCCESS)
            ):
                self._reach_start()
            end = self._episode_end()
            if end is not None:
                cause, detail = end, _END_DETAIL[end](self)
                break
            if self.run_count >= 4 * MAX_STAGE_RUNS:
                cause, detail = (
                    POLICY_FINISHED,
                    f"the planner stopped after {self.run_count} runs",
                )
                break
            need = self._triggered_need(tap.steps)
            if need is not None:
                self._run_need(need)
                continue
            todo = [i for i in range(len(self.stages)) if not done[i] and i not in dropped]
            if not todo:
                cause = POLICY_FINISHED
                detail = "every stage's test held, but the subtask's test does not"
                if dropped:
                    names = ", ".join(self.stages[i].name for i in sorted(dropped))
                    detail = f"no stage left; gave up on {names}"
                break
            i = todo[0]
            run = self._run_stage(self.stages[i], need=None)
            if run.success:
                done[i] = True
                continue
            if run.cause == INTERRUPTED or self._episode_end() is not None:
                continue  # a need comes first / the loop's top ends the episode
            ended = self._stage_failed(i, run)
            if ended is not None:
                cause, detail, line = ended
                break
        if self.start_at and self.start is None:
            if self.starts is not None and self.key is not None and cause != TIMEOUT:
                # Known bad for every later episode of this world and setup (not when the
                # wall clock ended it: a busy machine, not the world, is to blame).
                self.starts.put(self.key, FailedSetup(tap.steps, f"{cause}: {detail}", None))
            return self._not_reached(f"{cause}: {detail}", made=True, started=started)
        return self._episode(cause, detail, line, started)

    def _stage_failed(self, i: int, run: StageRun) -> tuple[str, str, int] | None:
        """Count stage ``i``'s failed run; the episode's end (cause, detail, line) once the
        stage has no try left, None while it has one (or is dropped: ``skip_failed``)."""
        self.failures[i] += 1
        self.failed_steps[i] += run.steps
        allowance = STAGE_ALLOWANCE * self.stages[i].stage.subtask.max_steps
        more = self.failures[i] <= STAGE_RETRIES or (
            run.cause in SEARCH_CAUSES
            and run.steps > 0
            and self.failed_steps[i] < allowance
            and self.failures[i] < MAX_STAGE_FAILURES
        )
        if run.cause not in PERMANENT_CAUSES and more:
            return None
        if self.skip_failed:
            self.dropped.add(i)
            return None
        if run.cause in PERMANENT_CAUSES:
            return run.cause, run.detail, run.line
        detail = f"stage {run.name!r} failed {self.failures[i]} times; last: {run.detail}"
        return run.cause, detail, run.line

    def _episode(self, cause: str, detail: str, line: int, started: float) -> ComposedEpisode:
        """The episode as it ended, counted from its start state where it has one."""
        tap = self.tap
        success = cause == SUCCESS
        if success:
            detail, line = "", 0
        at = self.start or _Start(0, 0.0, 0, 0, 0, False)
        made = at.made and bool(self.start_at)
        counts = dict(tap.counts)
        if self.start_at and not made:  # the world episode is only what follows the start
            counts = dict(collections.Counter(tap.unlocked[at.unlocked :]))
        return ComposedEpisode(
            seed=self.seed,
            success=success,
            steps=tap.steps - at.steps,
            reward=tap.reward - at.reward,
            achievements=list(tap.unlocked[at.unlocked :]),
            counts=counts,
            cause=cause,
            detail=detail,
            line=line,
            stages=self.runs[at.runs :],
            trace=list(getattr(self.skills, "_segments", [])),
            output="\n".join(self.output[at.output :])[-MAX_OUTPUT_CHARS:],
            wall_s=round(time.monotonic() - started, 4),
            setup_steps=at.steps if made else 0,
            setup_reward=at.reward if made else 0.0,
            setup_achievements=list(tap.unlocked[: at.unlocked]) if made else [],
            restored=bool(self.start_at) and not made,
        )

    def _run_need(self, i: int) -> None:
        self.chosen = None
        prepared = self.need_stages[i]
        start_step = self.tap.steps
        run = self._run_stage(prepared, need=i)
        if prepared.problem is not None:
            self.cooldown[i] = 1 << 62  # it can never run: off for the episode
        elif not run.success or self.tap.steps == start_step:
            self.cooldown[i] = self.tap.steps + NEED_COOLDOWN_STEPS

    def _run_stage(self, prepared: PreparedStage, need: int | None) -> StageRun:
        """One run of a stage (of need ``need`` when given), recorded as a StageRun."""
        tap = self.tap
        subtask = prepared.stage.subtask
        start_steps = tap.steps
        start_counts = dict(tap.counts)
        self.run_count += 1
        if prepared.problem is not None:
            f = prepared.problem
            return self._record(prepared, False, 0, f.cause, f.detail, f.line or 0)

        def halt() -> str | None:
            if need is None:
                if subtask.met(tap.obs.inventory, tap.counts, achievement_decides=True):
                    return "stage_success"
            elif self._need_served(need, start_counts):
                return "stage_success"
            end = self._episode_end()
            if end is not None:
                return end
            if need is None and self._triggered_need(tap.steps) is not None:
                return INTERRUPTED
            return None

        tap.halt, tap.halted = halt, None
        try:
            if prepared.learned:
                failure, extra = self._drive_learned(prepared)
            else:
                failure, extra = self._drive_coded(prepared)
        finally:
            tap.halt = lambda: None
        steps = tap.steps - start_steps
        reason = tap.halted or halt()
        if reason == "stage_success" or (need is not None and self._need_test(need, start_counts)):
            # (A need run whose stage's test held made progress: no cooldown for it.)
            return self._record(prepared, True, steps, SUCCESS, extra, 0)
        if reason is not None:
            return self._record(prepared, False, steps, reason, _END_DETAIL[reason](self), 0)
        if failure is not None:
            detail = failure.detail + (f" ({extra})" if extra else "")
            return self._record(prepared, False, steps, failure.cause, detail, failure.line or 0)
        if prepared.learned:  # the env truncated it at the stage's cap
            detail = f"the stage's cap of {subtask.max_steps} steps ran out ({extra})"
            return self._record(prepared, False, steps, STEP_BUDGET, detail, 0)
        if not subtask.goal and not subtask.achievement:  # no test: done when it returns
            return self._record(prepared, True, steps, SUCCESS, "", 0)
        detail = "the stage's code returned before its test held"
        return self._record(prepared, False, steps, POLICY_FINISHED, detail, 0)

    def _record(
        self, prepared: PreparedStage, success: bool, steps: int, cause: str, detail: str, line: int
    ) -> StageRun:
        run = StageRun(prepared.name, success, steps, cause, detail, line, prepared.learned)
        if len(self.runs) < MAX_STAGE_RUNS:
            self.runs.append(run)
        return run

    def _drive_coded(self, prepared: PreparedStage) -> tuple[sandbox.Failure | None, str]:
        tap, skills = self.tap, self.skills

        def step(action: str) -> bool:
            obs, _, stop, info = tap.step(action)
            skills._observe(obs, info)
            return stop

        remaining = self.deadline - time.monotonic()
        outcome = sandbox.run_policy(
            prepared.compiled,
            skills,
            step,
            max_steps=prepared.stage.subtask.max_steps,
            wall_s=max(remaining, 0.001),
            allowed_actions=tap.action_names,
        )
        if outcome.output:
            self.output.append(outcome.output)
        return outcome.failure, ""

    def _drive_learned(self, prepared: PreparedStage) -> tuple[sandbox.Failure | None, str]:
        import torch

        tap, skills, env, model = self.tap, self.skills, prepared.env, prepared.model
        torch.manual_seed(self.seed * 1_000_003 + tap.steps)  # reproducible sampling
        obs = env.attach(tap, tap.obs, skills, achievements=tap.counts)
        used: list[str] = []
        failures: list[str] = []
        # A tracing skills object (the environment actor's) offers these host-side hooks.
        opened = skills._open_segment() if hasattr(skills, "_open_segment") else None
        while True:
            if time.monotonic() >= self.deadline:
                tap.halted = TIMEOUT
                break
            action = model.predict(obs, deterministic=False)[0]
            obs, _, terminated, truncated, info = env.step(int(action))
            used.append(str(info["action"]))
            if info.get("option_failure"):
                f = info["option_failure"]
                failures.append(f"{info['action']}: {f['cause']}")
            if terminated or truncated:
                break
        counts = collections.Counter(used)
        shown = ", ".join(f"{name}×{n}" for name, n in counts.most_common())
        if failures:
            shown += f"; option failures: {', '.join(failures[:3])}"
        if opened is not None:
            # One trace segment for the whole run, before the segments of its options.
            skills._close_segment(opened, f"policy({prepared.name!r}): {shown}"[:200])
        return None, shown


_END_DETAIL: dict[str, Callable[[_Planner], str]] = {
    SUCCESS: lambda p: "",
    EPISODE_DONE: lambda p: "the player died" if p.tap.died else "the world ended the episode",
    STEP_BUDGET: lambda p: f"the episode's cap of {p.subtask.max_steps} steps ran out",
    TIMEOUT: lambda p: f"wall-clock budget of {p.wall_s:g} s exceeded",
    INTERRUPTED: lambda p: "a need came first",
}
