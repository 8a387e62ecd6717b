"""The environment actor: runs code-as-policy rollouts in the world and reports them.

One actor process owns one world (Crafter by default) and serves one rollout request at
a time. Policy code is untrusted: it is compiled and driven by :mod:`sandbox`, in a
worker thread so the actor keeps heartbeating; a code compiles once per process (the
sandbox keeps it by sha256), so a request that repeats the stages of the last one
compiles nothing (``rollout_finished`` counts it). Torch, loaded only for learned
stages, runs one thread per actor process (:func:`limit_torch`). Every failure of the
code is an episode outcome, never an exception. If the worker thread stops answering
its own budget (a single C call that runs away), the actor answers with a ``timeout``
result and then exits, so that the supervisor replaces it with a clean process.

A request with ``stages`` (and ``needs``) runs a composed policy instead: the task
planner of :mod:`envs.composite` runs coded and learned sub-policies in turn inside each
episode, and each episode report lists its stage runs.

Per-episode achievement stats go to ``<run dir>/rollouts/stats.jsonl`` in Crafter's own
``Recorder`` format, so Crafter's analysis scripts read them unchanged.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import os
import resource
import sys
import threading
import time
from typing import Any

import numpy as np
import trio

import sandbox
from envs.artifacts import PolicyUnusable, inside, load_policy
from envs.composite import prepare_stages, run_composed
from envs.crafter_world import CrafterWorld
from envs.held_out import held_out
from envs.stats import StatsWriter
from envs.trace import TracingSkills
from messages import Envelope
from messages.causes import (
    EPISODE_DONE,
    POLICY_FINISHED,
    POLICY_UNUSABLE,
    SETUP_FAILED,
    STEP_BUDGET,
    SUCCESS,
    TIMEOUT,
)
from messages.rollout import EpisodeReport, RolloutRequest, RolloutResult
from runtime.actor import Actor, handles
from runtime.events import log

# Beyond its own budget, how long a rollout may run before the actor presumes its worker
# thread stuck in a C call: generous, since world steps also count in the budget.
WATCHDOG_GRACE_S = float(os.environ.get("RLGPT_WATCHDOG_GRACE_S", "10"))
# Pause between answering a stuck rollout and exiting (see on_rollout).
EXIT_DRAIN_S = 0.5
# Frames kept for a video: 64x64 RGB, 1,000 frames is 12 MB raw, ~1 MB compressed.
MAX_FRAMES = 1000
MEMORY_LIMIT_ENV = "RLGPT_ENV_MEMORY_LIMIT"
"""Bytes of address space an environment actor process may map (overrides the default)."""
TORCH_THREADS_ENV = "RLGPT_TORCH_THREADS"
"""Intra-op torch threads in an environment actor process (default 1), the learners' knob."""
# The variables torch's thread pools (OpenMP, MKL) read when torch is first imported.
THREAD_POOL_ENVS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# An environment actor maps ~0.5 GiB (Python, numpy, numba, Crafter, worker threads);
# 2 GiB leaves it room while bounding what runaway policy code can take from the machine.
# The sandbox's own guards stop big allocations first; this is the OS-level backstop.
DEFAULT_MEMORY_LIMIT = 2 * 1024**3


def limit_torch() -> int:
    """One torch thread in this process unless ``RLGPT_TORCH_THREADS`` says otherwise
    (called at process start): two actors evaluating learned stages on two cores ran
    1.48× slower with torch's default of a thread per core each. torch is imported only
    when a learned stage is evaluated, so the limit goes where its thread pools read it
    at import; if torch is in already, it is set directly."""
    raw = os.environ.get(TORCH_THREADS_ENV, "1")
    threads = int(raw) if raw.strip().isdigit() else 0
    if threads < 1:
        raise ValueError(f"{TORCH_THREADS_ENV}={raw!r}: set it to a whole number of threads ≥ 1")
    for name in THREAD_POOL_ENVS:
        os.environ[name] = str(threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    return threads


def frames_npz(frames: list[np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, frames=np.stack(frames).astype(np.uint8))
    return buffer.getvalue()


class EnvironmentActor(Actor):
    role = "environment"

    def __init__(self, **kwargs: Any) -> None:
        # One world, one rollout at a time: more actors, not more capacity, for parallelism
        # (and the watchdog's deadline must not run while a rollout waits its turn).
        if kwargs.get("capacity", 1) != 1:
            log.warning("capacity_ignored", role=self.role, asked=kwargs["capacity"], using=1)
        super().__init__(**{**kwargs, "capacity": 1})
        self.world = CrafterWorld()
        self.stats: StatsWriter | None = None
        if self.run_dir is not None:
            path = self.run_dir / "rollouts" / "stats.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            self.stats = StatsWriter(path, self.world.achievement_names)
        self._lock = threading.Lock()  # one rollout at a time touches the world

    @classmethod
    def apply_process_limits(cls) -> dict[str, int]:
        """OS limits for a process that runs untrusted code: an address-space cap (a
        ``MemoryError`` instead of an exhausted machine) and no core dumps. Called by
        ``run.py actor`` in the actor's own process, never in a shared one."""
        limit = int(os.environ.get(MEMORY_LIMIT_ENV, DEFAULT_MEMORY_LIMIT))
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        return {"address_space_bytes": limit, "core_bytes": 0, "torch_threads": limit_torch()}

    @staticmethod
    def _counters() -> tuple[int, int]:
        stats = sandbox.compile_stats()
        return stats.compiled, stats.hits

    @staticmethod
    def _threads() -> dict[str, int]:
        """Torch's intra-op threads, measured, once a learned policy brought torch in."""
        torch = sys.modules.get("torch")
        return {} if torch is None else {"torch_threads": torch.get_num_threads()}

    async def setup(self) -> None:
        # The first reset compiles Crafter's world generator (numba, ~4 s); do it now so
        # the first rollout's wall budget does not pay for it.
        await self.run_blocking(self.world.reset, 0)

    @handles(RolloutRequest)
    async def on_rollout(self, req: RolloutRequest, env: Envelope) -> RolloutResult:
        if req.world != "crafter":
            raise ValueError(f"this environment actor runs crafter, not {req.world!r}")
        if req.stages and (req.code or req.policy_path):
            raise ValueError(
                "a rollout request runs either stages (a composed policy) or code or a"
                " policy_path, not both: leave code and policy_path empty with stages"
            )
        if req.needs and not req.stages:
            raise ValueError("needs are served only in a composed policy: give stages too")
        refused = self._foreign_policy(req)
        if refused is not None:
            return refused
        if req.policy_path:
            if req.config is None:
                raise ValueError("a trained-policy rollout needs the RL config it was trained on")
            log.info("rollout_started", subtask=req.subtask.name, policy=req.policy_path)
            result = await self.run_blocking(self.policy_rollout, req)
            log.info(
                "rollout_finished",
                subtask=req.subtask.name,
                success_rate=result.success_rate,
                steps=result.steps,
                **self._threads(),
            )
            return result
        budget = req.wall_s * len(req.seeds) + WATCHDOG_GRACE_S
        log.info(
            "rollout_started",
            subtask=req.subtask.name,
            episodes=len(req.seeds),
            stages=len(req.stages),
            frm=env.frm,
        )
        with trio.move_on_after(budget):
            work = self.composed_rollout if req.stages else self.rollout
            compiled, hits = self._counters()
            result = await self.run_blocking(work, req)
            now_compiled, now_hits = self._counters()
            log.info(
                "rollout_finished",
                subtask=req.subtask.name,
                success_rate=result.success_rate,
                steps=result.steps,
                causes=sorted({e.cause for e in result.episodes}),
                # Stage modules compiled for this request; the rest came from the cache
                # (sandbox.compile_code keeps them per process by sha256).
                compiled=now_compiled - compiled,
                compile_hits=now_hits - hits,
                **self._threads(),
            )
            return result
        # The worker thread ignored its budget (stuck in one C call). Answer, then make
        # way for a fresh process: this one has a thread we cannot stop.
        log.error("rollout_stuck", subtask=req.subtask.name, budget_s=budget)
        episodes = [
            EpisodeReport(s, False, 0, 0.0, [], TIMEOUT, "the policy stopped answering")
            for s in req.seeds
        ]
        self._reply(env, RolloutResult(req.subtask.name, episodes, 0.0, 0, self.actor_id))
        await self._sock.flush()
        # flush() only hands the reply to ZeroMQ (LINGER 0): give its I/O thread a moment
        # to put it on the wire, else the broker may see us die first and re-deliver the
        # job to our replacement, which gets stuck the same way (seen under load).
        await trio.sleep(EXIT_DRAIN_S)
        os._exit(70)  # EX_SOFTWARE; the supervisor restarts us

    def _foreign_policy(self, req: RolloutRequest) -> RolloutResult | None:
        """A request naming a policy file outside this run's directory, or without its
        sha256, fails every episode with ``policy_unusable`` before anything is read:
        the path came from a peer, and loading an SB3 zip unpickles parts of it."""
        named = [(req.policy_path, req.policy_sha256)]
        named += [(s.policy_path, s.policy_sha256) for s in req.stages]
        named += [(n.stage.policy_path, n.stage.policy_sha256) for n in req.needs]
        for path, sha256 in named:
            if not path:
                continue
            try:
                if self.run_dir is None:
                    raise PolicyUnusable(f"{path[:200]!r}: this actor has no run directory")
                inside(self.run_dir, path)
                if not sha256:
                    raise PolicyUnusable(f"{path[:200]!r} comes without its sha256")
            except PolicyUnusable as exc:
                log.warning("policy_refused", subtask=req.subtask.name, detail=str(exc))
                episodes = [
                    EpisodeReport(s, False, 0, 0.0, [], POLICY_UNUSABLE, str(exc))
                    for s in req.seeds
                ]
                return RolloutResult(req.subtask.name, episodes, 0.0, 0, self.actor_id)
        return None

    def rollout(self, req: RolloutRequest) -> RolloutResult:
        """Run every episode of ``req`` (blocking; called in a worker thread)."""
        with self._lock:
            try:
                compiled = sandbox.compile_code(req.code, filename=f"<{req.subtask.name}>")
            except sandbox.SandboxError as err:
                f = err.failure
                episodes = [
                    EpisodeReport(s, False, 0, 0.0, [], f.cause, f.detail, f.line or 0)
                    for s in req.seeds
                ]
                return RolloutResult(req.subtask.name, episodes, 0.0, 0, self.actor_id)
            episodes, output, frames = [], [], []
            for i, seed in enumerate(req.seeds):
                report, printed = self._episode(
                    req, compiled, seed, frames if i == 0 and req.frames else None
                )
                episodes.append(report)
                if printed:
                    output.append(printed)
            return self._result(req, episodes, output, frames)

    def _result(
        self,
        req: RolloutRequest,
        episodes: list[EpisodeReport],
        output: list[str],
        frames: list[np.ndarray],
    ) -> RolloutResult:
        return RolloutResult.of_episodes(
            req.subtask.name,
            episodes,
            actor_id=self.actor_id,
            output="\n".join(output)[-sandbox.Limits().max_output_chars :],
            frames=frames_npz(frames) if frames else b"",
        )

    def composed_rollout(self, req: RolloutRequest) -> RolloutResult:
        """Run a composed policy (``req.stages`` and ``req.needs``) on every seed of
        ``req`` (blocking; in a worker thread): the task planner of
        :mod:`envs.composite` inside each episode. Stages are compiled or loaded once."""
        with self._lock:
            # Loading SB3 zips happens here, before the first episode's budget starts.
            stages = prepare_stages(req.stages, self.world)
            need_stages = prepare_stages([n.stage for n in req.needs], self.world)
            episodes, output, frames = [], [], []
            for i, seed in enumerate(req.seeds):
                episode = run_composed(
                    self.world,
                    stages,
                    req.needs,
                    req.subtask,
                    seed,
                    wall_s=req.wall_s,
                    skills_factory=lambda obs, actions, s: TracingSkills(obs, actions, seed=s),
                    frames=frames if i == 0 and req.frames else None,
                    need_stages=need_stages,
                    skip_failed=req.skip_failed,
                )
                if self.stats is not None:
                    self.stats.write(episode.steps, episode.reward, episode.counts)
                episodes.append(episode.report())
                if episode.output:
                    output.append(episode.output)
            return self._result(req, episodes, output, frames)

    def policy_rollout(self, req: RolloutRequest) -> RolloutResult:
        """Run a trained SB3 policy on ``req``'s worlds (blocking; in a worker thread).
        The policy acts through the RL interface it was trained with, coded actions
        included; each episode's detail lists the actions it chose."""
        try:
            model = load_policy(req.policy_path, req.policy_sha256, self.run_dir, config=req.config)
        except PolicyUnusable as exc:
            episodes = [
                EpisodeReport(s, False, 0, 0.0, [], POLICY_UNUSABLE, str(exc)) for s in req.seeds
            ]
            return RolloutResult(req.subtask.name, episodes, 0.0, 0, self.actor_id)
        config = dataclasses.replace(req.config, subtask=req.subtask)
        rate, steps, records = held_out(
            config, lambda obs: model.predict(obs, deterministic=False)[0], req.seeds
        )
        episodes = []
        for r in records:
            if "skipped" in r:  # the setup died before the policy's turn
                episodes.append(
                    EpisodeReport(r["seed"], False, 0, 0.0, [], SETUP_FAILED, r["skipped"])
                )
                continue
            cause = SUCCESS if r["success"] else EPISODE_DONE if r["died"] else STEP_BUDGET
            used = collections.Counter(r["actions"])
            detail = ", ".join(f"{name}×{n}" for name, n in used.most_common())
            episodes.append(
                EpisodeReport(r["seed"], r["success"], r["steps"], float(r["success"]),
                              list(r["achievements"]), cause, detail)
            )  # fmt: skip
        # Every requested world counts here (a failed setup is a failed episode).
        rate = sum(e.success for e in episodes) / len(episodes) if episodes else 0.0
        return RolloutResult(req.subtask.name, episodes, rate, steps, self.actor_id)

    def _episode(
        self,
        req: RolloutRequest,
        compiled: sandbox.CompiledCode,
        seed: int,
        frames: list[np.ndarray] | None,
    ) -> tuple[EpisodeReport, str]:
        started = time.monotonic()
        world = self.world
        obs = world.reset(seed)
        skills = TracingSkills(obs, world.action_names, seed=seed)
        unlocked: list[str] = []
        reward = 0.0
        length = 0
        counts = dict.fromkeys(world.achievement_names, 0)
        state = {"success": False}
        if frames is not None:
            frames.append(world.render())

        def step(action: str) -> bool:
            nonlocal reward, length
            obs, r, done, info = world.step(action)
            skills._observe(obs, info)
            reward += r
            length += 1
            for name in info.get("achievements", ()):
                counts[name] = counts.get(name, 0) + 1
                unlocked.append(name)
            if frames is not None and len(frames) < MAX_FRAMES:
                frames.append(world.render())
            state["success"] = req.subtask.met(skills.inventory(), skills.achievements())
            return done or state["success"]

        outcome = sandbox.run_policy(
            compiled,
            skills,
            step,
            max_steps=req.subtask.max_steps,
            wall_s=req.wall_s,
            allowed_actions=world.action_names,
        )
        failure = outcome.failure
        if state["success"]:
            cause, detail, line = SUCCESS, "", 0
        elif failure is not None:
            cause, detail, line = failure.cause, failure.detail, failure.line or 0
        elif outcome.episode_done:
            cause, detail, line = EPISODE_DONE, "the player died", 0
        else:
            cause, detail, line = POLICY_FINISHED, "the policy returned before success", 0
        if self.stats is not None:
            self.stats.write(length, reward, counts)
        report = EpisodeReport(
            seed=seed,
            success=state["success"],
            steps=outcome.steps,
            reward=reward,
            achievements=unlocked,
            cause=cause,
            detail=detail,
            line=line,
            trace=skills._segments,
            wall_s=round(time.monotonic() - started, 4),
        )
        return report, outcome.output
