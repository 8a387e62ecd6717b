"""The fast agent: writes each sub-action's code or RL config and revises it (inner loop).

For a coded sub-action it asks its backend for code, has environment actors run it on
the evaluation worlds (composed after the accepted stages it depends on, under the task
planner's survival needs), sends the result to the critic and, while the critique says
*revise*, asks for a revision that answers it. For a learned sub-action it writes the RL
config — observation, primitives plus the skill library's coded high-level actions,
reward — has a learner train PPO on it, evaluates the trained policy the same way, and
revises the config from the critique. Several sub-actions are worked on at once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crafter import constants

from actors.critic import glimpse_dict
from knowledge import recipes
from knowledge.options import (
    OPTION_NAMES,
    STAGE_CODE,
    STAGE_CODE_STEPS,
    option,
    options_for,
    stage_code_option,
)
from knowledge.recipes import Step
from llm.contracts import subtask_achievement
from llm.prompts import skill_names
from messages import Envelope, preferring
from messages.base import to_wire
from messages.control import Failure
from messages.plan import Critique, Review, SubAction, SubActionOutcome, WorkOn
from messages.rollout import EpisodeReport, RolloutRequest, RolloutResult
from messages.task import CodedAction, Need, NeedRule, RLConfig, Stage
from messages.train import TrainProgress, TrainRequest, TrainResult
from method import ledger
from method.agents import AgentCallFailed, Agents
from method.journal import job_key
from method.paired import (
    NOT_REACHED,
    START_DRAW_FACTOR,
    KeptVersion,
    can_grow,
    grow_by,
    reached,
    stage_outcomes,
    worlds_to_draw,
)
from method.seeds import code_seeds_within, more_code_seeds
from method.settings import MethodSettings
from method.split import Affinity, rollout_split
from method.tboard import log_dir
from rl.artifacts import ArtifactRefused, store_artifact
from rl.reward_check import RewardCheck, check_reward_apart
from rl.setup_code import compose_setup, in_training
from runtime import cpu
from runtime.actor import Actor, RemoteFailure, handles
from runtime.events import log
from runtime.failures import BAD_REPLY, BAD_REPLY_TRIES
from runtime.head import log_progress

OPTION_STEPS = 50
"""K of a coded high-level action: long enough for a walk to a visible target."""
TRACE_KEEP = 4
"""Trace segments kept per failed episode in what the critic is sent (the last ones tell
where it failed; whole traces of long episodes would only weigh on the wire)."""
REASK_TEMPERATURE = 0.8
"""Sampling temperature of a code request asked again because its answer repeated a
version already tried: well above the default 0.2, so that sampling leaves the path
that led to the same code, and below 1 so the reply still keeps to its contract."""
ROLLOUT_WALL_S = 120.0
"""Wall-clock budget of one evaluation episode (a long composed chain included)."""


def subaction_dict(sub: SubAction) -> dict[str, Any]:
    return {
        "name": sub.name,
        "description": sub.description or sub.subtask.description,
        "goal": sub.subtask.goal,
        "achievement": sub.subtask.achievement,
        "max_steps": sub.subtask.max_steps,
        "need": sub.need,
    }


def critique_dict(c: Critique | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "verdict": c.verdict,
        "success_rate": c.success_rate,
        "target": c.target,
        "cause": c.cause,
        "count": c.count,
        "causes": dict(c.causes),
        "episodes": c.episodes,
        "detail": c.detail,
        "line": c.line,
        "action": c.action,
        "advice": c.advice,
    }


def code_request(
    sub: SubAction,
    version: int,
    previous: dict[str, Any] | None,
    critique: Critique | None,
    lessons: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """What the fast agent tells its backend to write (or revise) a sub-action's code;
    ``lessons`` (a backend that asks for them): what revisions of the steps it builds
    on changed, and for which cause."""
    request = {
        "subaction": subaction_dict(sub),
        "version": version,
        "previous": previous,
        "critique": critique_dict(critique),
    }
    if lessons:
        request["lessons"] = lessons
    return request


def lesson_of(
    sub: SubAction, critique: Critique | None, before: Any, after: Any
) -> dict[str, Any] | None:
    """What a revision changed (settings of a backend that writes them, e.g. the
    offline one's params), and the cause it answered; None when nothing is known."""
    if critique is None or not isinstance(before, dict) or not isinstance(after, dict):
        return None
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    if not changed:
        return None
    return {"subaction": sub.name, "cause": critique.cause, "changed": changed}


def rl_config(
    sub: SubAction,
    reply: dict[str, Any],
    offered: list[tuple[str, str, str]],
    world_actions: list[str],
    setup: list[Stage],
    needs: Sequence[Need] = (),
    *,
    world: str = "crafter",
    option_steps: int = OPTION_STEPS,
) -> RLConfig:
    """The RL config a ``fast/rl`` reply describes: the offered coded actions it chose,
    the world's primitives it chose — less any that a chosen coded action shares a name
    with (Crafter's ``place_table`` and the library's ``place_table`` option: one action
    name, one meaning; the coded one, which walks to a place first, is kept). The stage's
    own code (:data:`knowledge.options.STAGE_CODE`), when offered and chosen, runs
    resumable for up to :data:`knowledge.options.STAGE_CODE_STEPS` steps a choice. Its
    setup runs the coded ``setup`` stages with the run's survival ``needs`` served as
    the final policy serves them (:func:`rl.setup_code.compose_setup`), and its
    training episodes serve them too (:attr:`RLConfig.needs`). ``world``: the game the
    config plays; ``option_steps``: the cap of one library option's call."""
    for n in needs:
        if not in_training(n):
            # Served in play (until its stage's test holds); setup and training serve a
            # need by its level only, so this one is left out there: said, not silent.
            log.warning(
                "need_not_in_training", subaction=sub.name, need=n.stage.subtask.name,
                reason="no code" if not n.stage.code else "no 'until' level",
            )  # fmt: skip
    sources = {n: src for n, _, src in offered}
    options = [n for n in reply["options"] if n in sources]
    return RLConfig(
        subtask=dataclasses.replace(sub.subtask, max_steps=int(reply["max_steps"])),
        observation=list(reply["observation"]),
        primitives=[
            p for p in dict.fromkeys(reply["primitives"]) if p in world_actions and p not in options
        ],
        coded_actions=[
            CodedAction(n, sources[n], max_steps=option_steps, description=d)
            if n != STAGE_CODE
            else CodedAction(
                n, sources[n], max_steps=STAGE_CODE_STEPS, description=d, resumable=True
            )
            for n, d, _ in offered
            if n in options
        ],
        reward_code=reply.get("reward_code", ""),
        setup_code=compose_setup(setup, needs),
        needs=need_rules(needs),
        world=world,
    )


def need_rules(needs: Sequence[Need]) -> list[NeedRule]:
    """The run's survival ``needs`` as a training episode serves them (:func:`in_training`)."""
    return [
        NeedRule(
            n.stat, n.below, n.until, n.stage.code, n.stage.subtask.max_steps, n.stage.subtask.name
        )
        for n in needs
        if in_training(n)
    ]


def rl_request(
    sub: SubAction,
    version: int,
    offered: list[tuple[str, str, str]],
    primitives: tuple[str, ...],
    previous: dict[str, Any] | None,
    critique: Critique | None,
) -> dict[str, Any]:
    """What the fast agent tells its backend to write a sub-action's RL config."""
    return {
        "subaction": subaction_dict(sub),
        "version": version,
        "options": [{"name": n, "description": d} for n, d, _ in offered],
        "primitives": list(primitives),
        "previous": previous,
        "critique": critique_dict(critique),
    }


def train_request(
    settings: MethodSettings, work: WorkOn, config: RLConfig, version: int, cap: int = 0
) -> TrainRequest:
    """The training job of one version of a sub-action's RL config: its budget from
    ``[task]``, PPO and the job's other numbers from ``[training]``; ``cap``: the world
    steps it may take (0: none)."""
    task, training = settings.task, settings.training
    return TrainRequest(
        max_world_steps=cap,
        name=f"{work.subaction.name}-it{work.iteration}-v{version}",
        config=config,
        total_steps=work.train_steps,
        n_envs=task.train_envs,
        subproc=env_workers(training.env_workers, task.train_envs),
        seed=settings.run.seed + version,
        # Every version draws from the run's one pool of training worlds: the starts an
        # earlier version made are restored where they are held (the same learner).
        pool_seed=settings.run.seed,
        ppo=training.ppo,
        eval_episodes=task.code_episodes,
        train_worlds=training.train_worlds,
        checkpoint_every=training.checkpoint_every,
    )


AUTO_WORKERS_MIN_ENVS = 2
"""``env_workers = "auto"`` turns workers on from this many envs per job (on a machine
with at least as many usable cores). At 2 envs on 2 cores the default diamond run's
training jobs take 20-34 world steps a decision (coded options, needs served), and
there a worker's pipe round trip is small beside them: a collect_iron job from its
saved starts used 9.2 CPU-s in workers against 8.8 in one process (1,024 decisions,
+5 %). What workers buy is the core a learner alone leaves idle: the run's last job
(collect_diamond's last version, ~125 s) trained alone on one core while the other
idled, 12 % of the run's core-seconds (``benchmarks/bench_idle.py``); its envs in two
workers step on both. (At fb4160b, with cheap decisions of a few steps, 2 envs in
workers measured no faster: 452 s against 457 s; BENCHMARKS.md.)"""


AUTO_ENVS_PER_CORE = 2
"""``env_workers = "auto"`` keeps workers on up to this many envs per usable core. A
worker waits for the learner's action after every decision and for the other envs at
each rollout's end; with more workers than cores another one steps meanwhile. The
default diamond run with 4 envs on 2 cores (``n_steps`` 128: the same 512 decisions an
update) kept 0.902-0.903 of its core-seconds busy against 0.875-0.883 with 2, two runs
each (BENCHMARKS.md). More per core was not measured (each worker imports torch)."""


def env_workers(choice: str, n_envs: int) -> bool:
    """Whether a training job's envs step in the learner's worker processes
    (``[training] env_workers``: ``on``, ``off``, or ``auto`` — from
    :data:`AUTO_WORKERS_MIN_ENVS` envs, on a machine with at least 2 usable cores and
    at most :data:`AUTO_ENVS_PER_CORE` envs per core)."""
    if choice == "auto":
        cores = cpu.usable_cores()[0]  # looked up at call time: tests set the count
        return AUTO_WORKERS_MIN_ENVS <= n_envs <= AUTO_ENVS_PER_CORE * cores and cores >= 2
    return choice == "on"


def _trimmed(result: RolloutResult) -> RolloutResult:
    episodes = [
        e
        if not e.trace
        else dataclasses.replace(e, trace=[] if e.success else list(e.trace[-TRACE_KEEP:]))
        for e in result.episodes
    ]
    return dataclasses.replace(result, episodes=episodes, frames=b"", output=result.output[-2000:])


class _TrainingFailed(RemoteFailure):
    """A training job that stopped short (its setup kept failing): its steps count."""

    def __init__(self, result: TrainResult) -> None:
        super().__init__(Failure("training_failed", result.failure))
        self.result = result


def _train_steps(result: TrainResult) -> int:
    """Every world step of a training job: PPO's, setup's, the held-out evaluation's."""
    return result.primitive_steps + result.eval_primitive_steps + result.setup_steps


@dataclasses.dataclass
class _InnerLoop:
    """What the inner loop over one :class:`WorkOn` did so far: its outcome's figures."""

    versions: int = 0
    """Code versions or RL configs written."""
    code_steps: int = 0
    """World steps of the evaluation episodes."""
    train_steps: int = 0
    """World steps of PPO training, its held-out evaluation included."""
    critiques: list[Critique] = dataclasses.field(default_factory=list)
    """The critique of every version, in order."""
    exhausted: bool = False
    """The backend answered a revision with the code unchanged: it has nothing better."""
    coded: KeptVersion = dataclasses.field(default_factory=lambda: KeptVersion(mode="code"))
    """The best coded version."""
    learned: KeptVersion = dataclasses.field(default_factory=lambda: KeptVersion(mode="rl"))
    """The best learned version."""
    rival: KeptVersion = dataclasses.field(default_factory=KeptVersion)
    """``WorkOn.incumbent`` as this loop measured it (:meth:`FastAgent._versus`): on its
    worlds, and on the further worlds where a version's comparison with it grew."""
    failed_trace: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """The last evaluated version's first failed episode: its last high-level actions,
    with what the player saw before and after each (empty when none failed)."""
    worlds: list[int] = dataclasses.field(default_factory=list)
    """From starts: the choosing worlds every version is evaluated on — the first
    ``code_episodes`` seeds and as many more as the first version's evaluation drew
    until ``code_episodes`` of them reached the stage (:meth:`FastAgent._draw`). Empty
    until then, and when evaluating from reset."""

    def best(self, mode: str) -> KeptVersion:
        """The best version in ``mode`` (``code`` or ``rl``)."""
        return self.coded if mode == "code" else self.learned


@dataclasses.dataclass(frozen=True)
class _Tried:
    """A coded version already evaluated for a sub-action, by its code's sha256."""

    version: int
    """Its version number."""
    critique: Critique
    """What the critic said of it."""
    trace: list[dict[str, Any]]
    """The last high-level actions of one of its failed episodes (empty: none failed)."""


@dataclasses.dataclass(frozen=True)
class _LastVersion:
    """A sub-action's last coded version and its critique: where a redo goes on from."""

    previous: dict[str, Any]
    """The version as the backend's next request shows it (code, note, params)."""
    critique: Critique
    """What the critic said of it."""
    version: int
    """Its version number (a redo numbers on from it)."""


def outcome_of(sub: SubAction, loop: _InnerLoop) -> SubActionOutcome:
    """What an inner loop reports: its best version of the sub-action's mode (of the
    other mode when it has none), with its outcomes on every world it played (the grown
    ones after its choosing worlds), and the incumbent's on the worlds it was played on."""
    chosen = loop.best(sub.mode)
    if chosen.stage is None:
        other = loop.best("code" if sub.mode == "rl" else "rl")
        chosen = other if other.stage is not None else chosen
    rival = loop.rival
    return SubActionOutcome(
        name=sub.name,
        mode=chosen.mode,  # type: ignore[arg-type]
        success_rate=max(chosen.rate, 0.0),
        accepted=chosen.meets(sub.target),
        stage=chosen.stage or Stage(subtask=sub.subtask, code=""),
        versions=loop.versions,
        code_steps=loop.code_steps,
        train_steps=loop.train_steps,
        critiques=loop.critiques,
        coded_rate=loop.coded.rate,
        learned_rate=loop.learned.rate,
        task_rate=chosen.task_rate,
        exhausted=loop.exhausted,
        seed_outcomes=chosen.outcomes + [chosen.more[s] for s in chosen.grown()],
        seeds=chosen.seeds + chosen.grown(),
        reached=reached(chosen.outcomes) if chosen.stage is not None else -1,
        incumbent_seeds=rival.seeds + rival.grown(),
        incumbent_outcomes=rival.outcomes + [rival.more[s] for s in rival.grown()],
    )


class FastAgent(Actor):
    """Role ``fast``: answers :class:`WorkOn` with a :class:`SubActionOutcome`."""

    role = "fast"

    def __init__(
        self, *, agents: Agents, settings: MethodSettings, environments: int, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.agents = agents
        """The run's backend, journal and token budget."""
        self.settings = settings
        """The run's settings (task budgets, seed, training jobs)."""
        self.environments = max(1, environments)
        """Environment actors to spread an evaluation over."""
        self.trained_on: dict[str, str] = {}
        """Sub-action → the learner that trained its last version (it holds the starts
        of the run's training pool for that sub-action's setup)."""
        self.affinity = Affinity()
        """Which environment actor holds each world's start (evaluations from starts go
        there preferably: :mod:`method.split`)."""
        self.memory: dict[str, _LastVersion] = {}
        """Sub-action → its last coded version and critique (a redo goes on from it)."""
        self.lessons: dict[str, list[dict[str, Any]]] = {}
        """Sub-action → what each of its code revisions changed and why (passed to a
        backend that asks for them with the first version of a step built on it)."""
        self.best_code: dict[str, tuple[float, str]] = {}
        """Sub-action → (rate, code) of its best coded version so far (the kept version
        of each code loop, the highest rate across them, as the slow agent's setup
        picks): offered as an option when the sub-action moves to RL."""
        self.tried: dict[str, dict[str, _Tried]] = {}
        """Sub-action → the sha256 of each coded version evaluated for it → that version:
        a reply repeating one is asked again instead of evaluated again."""
        self.charged: set[str] = set()
        """Job keys of the evaluations whose steps this agent has counted (see
        :meth:`_charged`)."""

    @handles(TrainProgress)
    def on_progress(self, msg: TrainProgress, env: Envelope) -> None:
        log_progress(msg, env)

    @handles(WorkOn)
    async def on_work(self, work: WorkOn, env: Envelope) -> SubActionOutcome:
        sub = work.subaction
        log.info(
            "subaction_started",
            subaction=sub.name,
            mode=sub.mode,
            iteration=work.iteration,
            hint=work.hint[:200],
        )
        loop = _InnerLoop()
        try:
            if sub.mode == "code":
                await self._code_loop(work, loop)
            else:
                await self._rl_loop(work, loop)
        except AgentCallFailed as exc:
            log.error("subaction_failed", subaction=sub.name, cause=exc.cause, detail=exc.detail)
        coded = loop.coded
        if coded.stage is not None and coded.stage.code:
            if coded.rate > self.best_code.get(sub.name, (-1.0, ""))[0]:
                self.best_code[sub.name] = (coded.rate, coded.stage.code)
        outcome = outcome_of(sub, loop)
        log.info(
            "subaction_finished",
            subaction=sub.name,
            mode=outcome.mode,
            success_rate=outcome.success_rate,
            accepted=outcome.accepted,
            versions=outcome.versions,
        )
        return outcome

    # ------------------------------------------------------------------ code

    async def _code_loop(self, work: WorkOn, loop: _InnerLoop) -> None:
        sub = work.subaction
        previous: dict[str, Any] | None = None
        critique: Critique | None = None
        start = 1
        memo = self.memory.get(sub.name) if work.hint else None
        if memo is not None:
            # A redo goes on from the last version and its critique, not from scratch.
            previous, critique, start = memo.previous, memo.critique, memo.version + 1
        for i in range(work.revisions + 1):
            version = start + i
            lessons = None
            if previous is None and getattr(self.agents.backend, "lessons", False):
                # The steps it builds on, in order: their revisions' settings and causes.
                lessons = [
                    lesson
                    for stage in work.before
                    for lesson in self.lessons.get(stage.subtask.name, ())
                ]
            request = code_request(sub, version, previous, critique, lessons)
            reply = await self.agents.call("fast", "code", request)
            if not (reply.get("unchanged") or not reply.get("code")):
                reply = await self._unrepeated(sub, version, request, reply)
            if reply.get("unchanged") or not reply.get("code"):
                # The backend has no (better) code for it: the slow agent may move it to
                # RL (the revise request says ``exhausted``).
                log.info("code_unchanged", subaction=sub.name, reason=reply.get("note", ""))
                loop.exhausted = True
                break
            code = reply["code"]
            sha = hashlib.sha256(code.encode()).hexdigest()
            loop.versions += 1
            log.info(
                "code_written",
                subaction=sub.name,
                version=version,
                lines=code.count("\n") + 1,
                sha=sha[:12],
                note=reply.get("note", "")[:200],
                revision_of=critique.cause if critique else "",
            )
            self._save(f"code/{sub.name}-it{work.iteration}-v{version}.py", code)
            if previous is not None:  # a revision: what it changed, for which cause
                lesson = lesson_of(sub, critique, previous.get("params"), reply.get("params"))
                if lesson is not None:
                    self.lessons.setdefault(sub.name, []).append(lesson)
            stage = Stage(subtask=sub.subtask, code=code)
            left = work.revisions - i
            critique = await self._measure(work, version, left, stage, loop, code=code)
            tried = _Tried(version, critique, list(loop.failed_trace))
            self.tried.setdefault(sub.name, {})[sha] = tried
            previous = {"code": code, "note": reply.get("note", ""), "params": reply.get("params")}
            self.memory[sub.name] = _LastVersion(previous, critique, version)
            if critique.verdict != "revise":
                break

    async def _unrepeated(
        self, sub: SubAction, version: int, request: dict[str, Any], reply: dict[str, Any]
    ) -> dict[str, Any]:
        """``reply``, unless its code is one already evaluated for ``sub`` (same sha256):
        evaluating it again would cost its episodes and tell nothing new. Then the same
        request is asked once more, hotter (:data:`REASK_TEMPERATURE`), with what was
        wrong with that version — its failure causes, the end of one failed episode and
        the skill API's names — and that answer is taken unless it repeats a tried
        version too: then the reply says ``unchanged`` (the code has run out of answers,
        and the slow agent moves the sub-action on). ``code_repeated`` says which
        happened (``then``: ``asked_again`` or ``exhausted``)."""

        tried = self.tried.get(sub.name, {})
        sha = hashlib.sha256(reply["code"].encode()).hexdigest()
        seen = tried.get(sha)
        if seen is None:
            return reply
        log.warning(
            "code_repeated", subaction=sub.name, version=version, sha=sha[:12],
            same_as=seen.version, then="asked_again", temperature=REASK_TEMPERATURE,
        )  # fmt: skip
        c = seen.critique
        again = {
            **request,
            "repeated": {
                "same_as_version": seen.version,
                "problem": f"your reply was the code of version {seen.version}, already "
                f"evaluated: it succeeded in {c.success_rate:.2f} of the worlds (target "
                f"{c.target:.2f}); write different code that fixes what failed",
                "causes": dict(c.causes) or ({c.cause: c.count} if c.cause else {}),
                "failed_episode": seen.trace,
                "skill_api": skill_names(self.settings.task.world),
            },
        }
        reply = await self.agents.call("fast", "code", again, temperature=REASK_TEMPERATURE)
        if reply.get("unchanged") or not reply.get("code"):
            return reply
        sha = hashlib.sha256(reply["code"].encode()).hexdigest()
        seen = tried.get(sha)
        if seen is None:
            return reply
        log.warning(
            "code_repeated", subaction=sub.name, version=version, sha=sha[:12],
            same_as=seen.version, then="exhausted", temperature=REASK_TEMPERATURE,
        )  # fmt: skip
        return {**reply, "unchanged": True, "note": f"repeated version {seen.version}"}

    # ------------------------------------------------------------------ RL

    async def _rl_loop(self, work: WorkOn, loop: _InnerLoop) -> None:
        sub = work.subaction
        world = self.settings.task.world
        found = self._learning_menu(sub)
        if found is None:
            return
        offered, world_actions, step, option_steps = found
        previous: dict[str, Any] | None = None
        critique: Critique | None = None
        for version in range(1, work.revisions + 2):
            cap = 0
            if work.env_steps_cap > 0:
                cap = work.env_steps_cap - loop.train_steps - loop.code_steps
                ppo = self.settings.training.ppo
                if cap < ppo.n_steps * self.settings.task.train_envs:  # not one rollout
                    log.warning(
                        "training_skipped", subaction=sub.name, version=version,
                        reason="the run's env-step budget (or training's share of it,"
                        " [task] train_share) is spent", steps_left=max(0, cap),
                    )  # fmt: skip
                    break
            request = rl_request(sub, version, offered, world_actions, previous, critique)
            reply = await self.agents.call("fast", "rl", request)
            config = rl_config(
                sub, reply, offered, world_actions, work.setup or work.before, work.needs,
                world=world, option_steps=option_steps,
            )  # fmt: skip
            config, checked = await self._checked_reward(sub, version, config, step)
            # Beside the code versions: what each training job trained on, whole (a
            # learned version the run did not keep can still be played and checked).
            self._save(
                f"code/{sub.name}-it{work.iteration}-v{version}.rl.json",
                json.dumps(to_wire(config), indent=1) + "\n",
            )
            loop.versions += 1
            log.info(
                "rl_config_written",
                subaction=sub.name,
                version=version,
                options=[a.name for a in config.coded_actions],
                primitives=len(config.primitives),
                shaped_reward=bool(config.reward_code),
                reward_check=checked.detail[:200],
                note=reply.get("note", "")[:200],
                revision_of=critique.cause if critique else "",
            )
            try:
                train = await self._train(work, config, version, cap)
            except (RemoteFailure, ArtifactRefused) as exc:
                # The config itself was unusable (its setup or reward code, say), or the
                # learner's answer named a policy outside the run: that is this version's
                # failure, with its cause, not the run's.
                log.error(
                    "training_failed", subaction=sub.name, version=version, detail=str(exc)[-500:]
                )
                if isinstance(exc, _TrainingFailed):
                    loop.train_steps += _train_steps(exc.result)
                break
            loop.train_steps += _train_steps(train)
            policy = store_artifact(self.run_dir, train)
            stage = Stage(
                subtask=sub.subtask,
                policy_path=str(policy),
                policy_sha256=train.sha256,
                config=config,
            )
            left = work.revisions + 1 - version
            critique = await self._measure(work, version, left, stage, loop, train=train)
            if critique.verdict != "revise":
                break
            previous = {"config": reply, "held_out_success": train.eval_success_rate}
            if not checked.ok:
                previous["reward_check"] = f"your reward_code was not used: {checked.detail}"

    def _learning_menu(
        self, sub: SubAction
    ) -> tuple[list[tuple[str, str, str]], tuple[str, ...], Step | None, int] | None:
        """What a learned version of ``sub`` is built from: the coded actions offered,
        the world's actions, the recipe step (Crafter's; None in Minetest) and the step
        cap of one option's call. None (the failure logged) when ``sub`` names no step
        of the game: a name a model made up has no options and nothing to train for."""
        if self.settings.task.world == "minetest":
            from rl.voxel_options import OPTION_CAP
            from worlds.minetest.world import ACTIONS

            item = minetest_item_of(sub.name)
            if item is None:
                log.error(
                    "subaction_failed", subaction=sub.name, cause="unknown_subtask",
                    detail=f"{sub.name!r} names no step of Minetest's diamond chain to learn",
                )  # fmt: skip
                return None
            return self._voxel_menu(sub, item), ACTIONS, None, OPTION_CAP
        meant = subtask_achievement(sub.name, sub.subtask.achievement, sub.subtask.goal)
        if meant is None:
            log.error(
                "subaction_failed", subaction=sub.name, cause="unknown_subtask",
                detail=f"{sub.name!r} (achievement {sub.subtask.achievement!r}, goal "
                f"{sub.subtask.goal}) names no Crafter achievement or item to learn",
            )  # fmt: skip
            return None
        step = recipes.achievement_step(meant)
        return self._menu(sub, step), _world_actions(), step, OPTION_STEPS

    def _voxel_menu(self, sub: SubAction, item: str) -> list[tuple[str, str, str]]:
        """The coded actions a learned Minetest step is offered: the step's own best code
        (resumable) and the 3-D options (:func:`rl.voxel_options.menu`)."""
        # Imported here: a Crafter run's head never loads the 3-D world's modules.
        from rl.voxel_options import menu

        return self._with_own_code(sub, menu(item, sum(sub.subtask.goal.values()) or 1))

    def _menu(self, sub: SubAction, step: Step) -> list[tuple[str, str, str]]:
        """The coded actions a learned version of ``sub`` is offered: the step's menu (or
        the plan's own choice from it), with the stage's best coded version first."""
        offered = options_for(step)
        if sub.options:  # the plan named its own choice of coded actions
            known = set(OPTION_NAMES)
            offered = [o for o in offered if o[0] in sub.options] + [
                (n, n, option(n))
                for n in sub.options
                if n in known and n not in {o[0] for o in offered}
            ]
        return self._with_own_code(sub, offered)

    def _with_own_code(
        self, sub: SubAction, offered: list[tuple[str, str, str]]
    ) -> list[tuple[str, str, str]]:
        """``offered`` with the stage's best coded version, resumable, first (if any)."""
        own = self.best_code.get(sub.name)
        return offered if own is None else [stage_code_option(own[1]), *offered]

    async def _checked_reward(
        self, sub: SubAction, version: int, config: RLConfig, step: Step | None
    ) -> tuple[RLConfig, RewardCheck]:
        """``config`` with its shaped reward tried on scripted transitions before a step
        is trained on it: one that pays for standing still or never for this step's
        progress is dropped (the success reward stays), and the next version is told why.
        In a child process: reward code that crashes its process fails the check, never
        the head (where this agent runs). The transitions are Crafter's: a Minetest
        step (``step`` None) trains on its reward unchecked, and the log says so."""
        if step is None:
            detail = "not checked: the scripted transitions are Crafter's"
            if config.reward_code:
                log.info("reward_check_skipped", subaction=sub.name, version=version)
            return config, RewardCheck(True, detail)
        checked = await self.run_blocking(check_reward_apart, config.reward_code, step)
        if not checked.ok:
            log.warning(
                "reward_check_failed", subaction=sub.name, version=version,
                detail=checked.detail,
            )  # fmt: skip
            config = dataclasses.replace(config, reward_code="")
        return config, checked

    async def _train(
        self, work: WorkOn, config: RLConfig, version: int, cap: int = 0
    ) -> TrainResult:
        req = train_request(self.settings, work, config, version, cap)
        journal = self.agents.journal

        def usable(result: TrainResult) -> bool:
            return Path(result.policy_path).is_file()

        recorded = journal.job(req, check=usable)
        if recorded is not None:
            return recorded
        # The learner that trained this sub-action last holds the starts of its pool
        # (setup made once, restored after): it gets the job when it has room.
        to = preferring("@learner", self.trained_on.get(work.subaction.name, ""))
        log.info("training_requested", job=req.name, subaction=work.subaction.name, to=to)
        result = await self._ask_learner(to, req)
        if result.actor_id:
            self.trained_on[work.subaction.name] = result.actor_id
        if result.failure:
            # No policy, but the steps its worlds took are the run's: booked all the same.
            ledger.append(self.run_dir, [ledger.training_line(result, job_key(req))])
            raise _TrainingFailed(result)
        path = store_artifact(self.run_dir, result)
        # Recorded without the bytes (they are on disk now) and with the local paths: a
        # remote learner put its TensorBoard files to the head before it answered.
        here = {"tensorboard_dir": str(log_dir(self.run_dir) / req.name)}
        result = dataclasses.replace(
            result, policy_bytes=b"", policy_path=str(path), **(here if result.policy_bytes else {})
        )
        # Booked before it is recorded: a kill between the two redoes the job, whose
        # line then replaces this one (the ledger's ids), instead of losing its episodes.
        ledger.append(self.run_dir, [ledger.training_line(result, job_key(req))])
        journal.record_job(req, result, name=req.name)
        log.info(
            "training_result",
            job=req.name,
            held_out_success=round(result.eval_success_rate, 3),
            decisions=result.steps,
            world_steps=result.primitive_steps,
            train_s=round(result.train_s, 1),
        )
        return result

    async def _ask_learner(self, to: str, req: TrainRequest) -> TrainResult:
        """The training job's answer; a wrong one (the peer's fault, charged to it) is
        asked again of any learner, up to :data:`BAD_REPLY_TRIES` times in all."""
        attempt = 1
        while True:
            try:
                return await self.ask(to, req, expect=TrainResult)
            except RemoteFailure as exc:
                if exc.failure.reason != BAD_REPLY or attempt >= BAD_REPLY_TRIES:
                    raise
                log.warning(
                    "training_asked_again", job=req.name, attempt=attempt,
                    detail=exc.failure.detail[:300],
                )  # fmt: skip
            attempt, to = attempt + 1, "@learner"

    # ------------------------------------------------------------------ shared

    def _from_starts(self, work: WorkOn) -> bool:
        """Whether ``work``'s versions are evaluated from starts (``[task]
        eval_from_starts`` and stages before it)."""
        # Starts are saved and restored in Crafter only: a Minetest episode plays the
        # stages before the sub-action every time.
        task = self.settings.task
        return task.eval_from_starts and bool(work.before) and task.world == "crafter"

    async def _evaluate(self, work: WorkOn, stage: Stage) -> RolloutResult:
        """One version's evaluation episodes on ``work.seeds``, composed after
        ``work.before``; from starts (:meth:`_from_starts`) each episode starts where the
        stage begins, the steps of a start counted by the episode that made it. Booked
        in the ledger (setup steps included) and journalled. Its ``steps`` are what the
        budget counts (:meth:`_charged`)."""
        sub = work.subaction
        cap = sum(s.subtask.max_steps for s in work.before) + sub.subtask.max_steps
        cap = min(cap, self.settings.task.episode_steps)
        req = RolloutRequest(
            subtask=dataclasses.replace(sub.subtask, max_steps=cap),
            seeds=list(work.seeds),
            wall_s=ROLLOUT_WALL_S,
            stages=[*work.before, stage],
            needs=list(work.needs),
            start_at=len(work.before) if self._from_starts(work) else 0,
            world=self.settings.task.world,
        )
        recorded = self.agents.journal.job(req)
        if recorded is not None:
            return self._charged(req, recorded)
        result, problem = None, ""
        try:
            result = await rollout_split(self, req, self.environments, self.affinity)
        except* RemoteFailure as group:
            problem = str(group.exceptions[0])[-1000:]
        if result is None:
            # The environment could not run it at all: every episode fails with the reason.
            log.error("evaluation_failed", subaction=sub.name, detail=problem[-300:])
            episodes = [
                EpisodeReport(s, False, 0, 0.0, [], "rollout_failed", problem) for s in req.seeds
            ]
            result = RolloutResult(sub.name, episodes, 0.0, 0, "")
        result = _trimmed(result)
        ledger.append(self.run_dir, ledger.rollout_lines("code", result, job_key(req)))
        self.agents.journal.record_job(req, result, name=sub.name)  # after: see _train
        log.info(
            "evaluation_finished",
            subaction=sub.name,
            kind="learned" if stage.policy_path else "coded",
            success_rate=result.success_rate,
            episodes=len(result.episodes),
            steps=result.steps,
        )
        return self._charged(req, result)

    def _charged(self, req: RolloutRequest, result: RolloutResult) -> RolloutResult:
        """``result`` with the steps the budget counts for it: all of them the first time
        this agent meets its request, none after. An identical request (the incumbent
        evaluated again on the same worlds, in a later inner loop) is answered from the
        journal without a world step, and the ledger books its episodes once; counting
        it again made the budget spend steps no one took (129,422 of 5M in one diamond
        run). After a resume the first answer of each request counts: its steps were
        taken before the stop and are booked."""
        key = job_key(req)
        if key in self.charged:
            return dataclasses.replace(result, steps=0)
        self.charged.add(key)
        return result

    async def _measure(
        self,
        work: WorkOn,
        version: int,
        left: int,
        stage: Stage,
        loop: _InnerLoop,
        code: str = "",
        train: TrainResult | None = None,
    ) -> Critique:
        """Evaluate one version, keep it if it is the best so far, and get its critique.
        From starts, every version plays :attr:`_InnerLoop.worlds`, which the first
        version's evaluation draws (:meth:`_draw`)."""
        first = list(work.seeds)
        if self._from_starts(work) and loop.worlds:
            work = dataclasses.replace(work, seeds=list(loop.worlds))
        result = await self._evaluate(work, stage)
        loop.code_steps += result.steps
        loop.failed_trace = _failed_trace(result)
        if self._from_starts(work) and not loop.worlds:
            result = await self._draw(work, stage, result, loop)
            loop.worlds = [e.seed for e in result.episodes]
            work = dataclasses.replace(work, seeds=list(loop.worlds))
        mode = "rl" if stage.policy_path else "code"
        best = loop.best(mode)
        more = await self._settle(work, best, result, stage, loop)
        more = {**await self._versus(work, result, stage, loop), **more}
        # The whole task's rate on the first code_episodes worlds, as from reset.
        chosen = set(first)
        whole = [e.success for e in result.episodes if e.seed in chosen]
        task_rate = sum(whole) / len(whole) if whole else 0.0
        best.offer(result, work.subaction.name, stage, list(work.seeds), more, task_rate)
        review = Review(
            subaction=work.subaction,
            version=version,
            mode=mode,
            result=result,
            revisions_left=left,
            code=code,
            train=train,
            # Judged on every world it played, not only the loop's first ones: on its 37
            # first worlds alone a learned make_stone_pickaxe passed at 0.97 while all 512
            # it played said 0.85, under the target.
            grown=[o for o in more.values() if o != NOT_REACHED],
        )
        critique: Critique = await self.ask("@critic", review, expect=Critique)
        loop.critiques.append(critique)
        return critique

    async def _versus(
        self, work: WorkOn, result: RolloutResult, stage: Stage, loop: _InnerLoop
    ) -> dict[int, int]:
        """Measure ``stage`` against ``work.incumbent``, the version the run stands on
        (a learned version against the code it would replace; a redo's code against the
        code an earlier loop kept): the incumbent plays this loop's worlds once
        (:attr:`_InnerLoop.rival`), and the paired comparison grows while ``stage`` leads
        it undecided (:meth:`_settle`). Without this the two would pair only on the
        worlds both loops happened to draw (4 to 8 from ``[task] code_episodes``, fewer
        from starts when the setup changed in between), where a version that is truly
        better by 0.15 is almost never measurably so. The challenger's outcomes on the grown
        worlds, by seed; the incumbent's are in ``loop.rival``. Its episodes are booked,
        counted and journalled like any evaluation."""
        incumbent = work.incumbent
        if incumbent is None:
            return {}
        name = work.subaction.name
        if loop.rival.stage is None:
            played = await self._evaluate(work, incumbent)
            loop.code_steps += played.steps
            loop.rival.mode = "rl" if incumbent.policy_path else "code"
            loop.rival.offer(played, name, incumbent, list(work.seeds))
        more = await self._settle(work, loop.rival, result, stage, loop)
        verdict = loop.rival.compare(stage_outcomes(result, name, work.seeds), more)
        log.info(
            "incumbent_compared", subaction=name, incumbent=loop.rival.mode,
            worlds=verdict.worlds, difference=round(verdict.difference, 4),
            lower=round(verdict.lower, 4), better=verdict.challenger_wins,
        )  # fmt: skip
        return more

    async def _settle(
        self, work: WorkOn, best: KeptVersion, result: RolloutResult, stage: Stage, loop: _InnerLoop
    ) -> dict[int, int]:
        """Grow an undecided comparison: while ``stage`` did better than the kept version
        on the worlds so far but the paired bound does not say so, play both on as many
        further choosing worlds again (:func:`method.seeds.more_code_seeds`), up to
        ``[task] decide_episodes`` worlds (from starts: worlds where both reached the
        stage, drawing at most :data:`START_DRAW_FACTOR` times as many:
        :func:`method.paired.grow_by`). The challenger's outcomes there, by seed; the kept
        version's go into ``best.more`` (played once: a later challenger reuses them).
        Every episode is evaluated like any other: booked, counted, journalled."""
        name = work.subaction.name
        seeds = list(work.seeds)
        cap = self.settings.task.decide_episodes
        if not can_grow(best, result, name, seeds):
            return {}
        outcomes = stage_outcomes(result, name, seeds)
        starts = self._from_starts(work)
        more: dict[int, int] = {}
        while True:
            verdict = best.compare(outcomes, more)
            drawn = len(seeds) + len(more)
            count = grow_by(verdict, drawn, cap, starts)
            if count is None:
                return more
            new = more_code_seeds(seeds, drawn, code_seeds_within(seeds, drawn, count))
            if not new:
                return more
            log.info(
                "comparison_extended", subaction=name, worlds=drawn, to=drawn + len(new),
                pairs=verdict.worlds, difference=round(verdict.difference, 4),
                lower=round(verdict.lower, 4),
            )  # fmt: skip
            missing = [s for s in new if s not in best.more]
            if missing:
                kept = await self._evaluate(dataclasses.replace(work, seeds=missing), best.stage)
                loop.code_steps += kept.steps
                best.more.update(zip(missing, stage_outcomes(kept, name, missing), strict=True))
            tried = await self._evaluate(dataclasses.replace(work, seeds=new), stage)
            loop.code_steps += tried.steps
            more.update(zip(new, stage_outcomes(tried, name, new), strict=True))

    async def _draw(
        self, work: WorkOn, stage: Stage, result: RolloutResult, loop: _InnerLoop
    ) -> RolloutResult:
        """From starts: draw further choosing worlds (the next seeds of the run's code
        range, :func:`method.seeds.more_code_seeds`) and evaluate ``stage`` there until
        ``code_episodes`` worlds reach the stage or :data:`START_DRAW_FACTOR` times as
        many were drawn; ``result`` with those episodes added (each evaluation booked,
        counted and journalled). Later versions play the same worlds from the starts
        made here (``worlds_drawn``). How many are drawn, and when drawing stops, is
        :func:`method.paired.worlds_to_draw`'s to say."""
        name = work.subaction.name
        seeds = list(work.seeds)
        want = len(seeds)
        episodes = list(result.episodes)
        got = reached(stage_outcomes(result, name, seeds))
        limit = code_seeds_within(seeds, 0, START_DRAW_FACTOR * want)
        while count := worlds_to_draw(name, want, got, episodes, limit):
            new = more_code_seeds(seeds, len(episodes), count)
            extra = await self._evaluate(dataclasses.replace(work, seeds=new), stage)
            loop.code_steps += extra.steps
            episodes += extra.episodes
            got += reached(stage_outcomes(extra, name, new))
        if len(episodes) > len(seeds):
            log.info("worlds_drawn", subaction=name, worlds=len(episodes), reached=got,
                     wanted=want)  # fmt: skip
        return RolloutResult.of_episodes(
            result.subtask, episodes, actor_id=result.actor_id, output=result.output
        )

    def _save(self, relative: str, text: str) -> None:
        if self.run_dir is None:
            return
        path = self.run_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _failed_trace(result: RolloutResult) -> list[dict[str, Any]]:
    """The last :data:`TRACE_KEEP` high-level actions of ``result``'s first failed
    episode that has a trace, with what the player saw before and after each."""

    for episode in result.episodes:
        if not episode.success and episode.trace:
            return [
                {
                    "action": seg.action,
                    "steps": seg.steps,
                    "before": glimpse_dict(seg.before),
                    "after": glimpse_dict(seg.after),
                }
                for seg in episode.trace[-TRACE_KEEP:]
            ]
    return []


def _world_actions() -> tuple[str, ...]:
    return tuple(constants.actions)


def minetest_item_of(name: str) -> str | None:
    """The chain item of a Minetest step's name (``obtain_tree`` → ``default:tree``)."""
    from worlds.minetest.world import CHAIN, achievement

    return next((item for item in CHAIN if achievement(item) == name), None)
