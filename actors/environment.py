"""The environment actor: runs code-as-policy rollouts in the world and reports them.

One actor serves one rollout request at a time, and never runs policy code itself: a
runner child process (:mod:`episodes.runner`), started at setup and kept warm across
requests, owns the world and the sandbox's compile cache and runs every rollout —
coded, composed and trained-policy. The actor hands it each request over a pipe, writes
the Crafter stats rows of the episodes it reports, and watches the wall clock: a runner
that dies (a segfault in a C call, SIGXCPU, an exit) fails the batch's unfinished
episodes with ``crashed``, one whose episode overruns its budget plus grace is killed
and they get ``stalled``; the episodes finished before keep their reports, a fresh runner
starts for the next request, and the actor itself keeps heartbeating and answering.
A code compiles once per runner (the sandbox keeps it by sha256), so a request that
repeats the stages of the last one compiles nothing (``rollout_finished`` counts it).
Torch, loaded only for learned stages, runs one thread per runner (:func:`limit_torch`).
Every failure of the code is an episode outcome, never an exception.

A learned policy (a request's or a stage's) is named by its sha256, with the head's path
beside it: a path inside this actor's run directory is used as it is; any other is never
read, and the file comes from this machine's artifact store instead, fetched from the
head's by its hash when missing (:mod:`runtime.artifacts`), so an actor on any machine
runs any learned stage.

A request with ``stages`` (and ``needs``) runs a composed policy instead: the task
planner of :mod:`episodes.composite` runs coded and learned sub-policies in turn inside each
episode, and each episode report lists its stage runs. With ``start_at`` each episode
starts where that stage begins: the runner makes the start once per world and setup (the
composed episode up to it, reported as the episode's ``setup_steps``) and restores it after.

Per-episode achievement stats go to ``<run dir>/rollouts/stats.jsonl`` in Crafter's own
``Recorder`` format, so Crafter's analysis scripts read them unchanged: one row for each
episode the runner finished (one it did not finish, crashed or stalled, has none; a
batch cancelled mid-way writes none).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sandbox
from episodes.runner import (
    DEFAULT_MEMORY_LIMIT,
    MAX_FRAMES,
    MEMORY_LIMIT_ENV,
    TORCH_THREADS_ENV,
    Runner,
    RunnerEpisode,
    RunnerFailed,
    apply_limits,
    frames_npz,
    limit_torch,
)
from messages import Envelope
from messages.causes import POLICY_UNUSABLE
from messages.rollout import EpisodeReport, RolloutRequest, RolloutResult
from rl.artifacts import PolicyUnusable, inside
from runtime import artifacts
from runtime.actor import Actor, handles
from runtime.events import log
from worlds.stats import StatsWriter

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "MAX_FRAMES",
    "MEMORY_LIMIT_ENV",
    "TORCH_THREADS_ENV",
    "EnvironmentActor",
    "frames_npz",
    "limit_torch",
]
# The policy's printed output kept per result: the sandbox's own cap for one episode.
MAX_OUTPUT_CHARS = sandbox.Limits().max_output_chars


class EnvironmentActor(Actor):
    role = "environment"

    def __init__(self, **kwargs: Any) -> None:
        # One runner, one rollout at a time: more actors, not more capacity, for
        # parallelism (and the stall watch must not run while a rollout waits its turn).
        if kwargs.get("capacity", 1) != 1:
            log.warning("capacity_ignored", role=self.role, asked=kwargs["capacity"], using=1)
        super().__init__(**{**kwargs, "capacity": 1})
        self.runner: Runner | None = None
        self.stats: StatsWriter | None = None
        self.store = artifacts.worker_store(self.run_dir)
        """Policies fetched from the head by sha256 (:mod:`runtime.artifacts`)."""

    @classmethod
    def apply_process_limits(cls) -> dict[str, int]:
        """OS limits for this process (its runner sets the same ones for itself): an
        address-space cap and no core dumps. Called by ``run.py actor`` in the actor's
        own process, never in a shared one."""
        return apply_limits()

    async def setup(self) -> None:
        # The runner's warm-up compiles Crafter's world generator (numba, seconds): it
        # happens now, so the first rollout's budget does not pay for it.
        self.runner = Runner(self.run_dir, self._nursery)
        ready = await self.runner.start()
        if self.run_dir is not None:
            path = self.run_dir / "rollouts" / "stats.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            self.stats = StatsWriter(path, ready.achievement_names)

    async def teardown(self) -> None:
        if self.runner is not None:
            await self.runner.close()

    @handles(RolloutRequest)
    async def on_rollout(self, req: RolloutRequest, env: Envelope) -> RolloutResult:
        if req.world not in ("crafter", "minetest"):
            raise ValueError(f"this environment actor runs crafter or minetest, not {req.world!r}")
        policy = req.policy_path or req.policy_sha256
        if req.stages and (req.code or policy):
            raise ValueError(
                "a rollout request runs either stages (a composed policy) or code or a"
                " policy, not both: leave code, policy_path and policy_sha256 empty with stages"
            )
        if req.needs and not req.stages:
            raise ValueError("needs are served only in a composed policy: give stages too")
        if req.start_at and not 0 < req.start_at < len(req.stages):
            raise ValueError(
                f"start_at {req.start_at} must name a stage after the first of the"
                f" {len(req.stages)} stages (the ones before it are its setup)"
            )
        if req.start_at and req.skip_failed:
            raise ValueError("start_at needs every stage before it done: not with skip_failed")
        if policy and req.config is None:
            raise ValueError("a trained-policy rollout needs the RL config it was trained on")
        local = await self._local_policies(req)
        if isinstance(local, RolloutResult):
            return local
        req = local
        log.info(
            "rollout_started",
            subtask=req.subtask.name,
            episodes=len(req.seeds),
            stages=len(req.stages),
            policy=req.policy_path or None,
            frm=env.frm,
        )
        try:
            outcome = await self.runner.rollout(req)
        except RunnerFailed as exc:
            raise RuntimeError(str(exc)) from None
        done = outcome.done
        for episode in outcome.finished:
            self._book(episode)
        result = RolloutResult.of_episodes(
            req.subtask.name,
            outcome.episodes,
            actor_id=self.actor_id,
            output="\n".join(outcome.output)[-MAX_OUTPUT_CHARS:],
            frames=done.frames if done is not None else b"",
        )
        if outcome.fault:
            log.error(
                "rollout_" + outcome.fault,
                subtask=req.subtask.name,
                detail=outcome.detail,
                finished=sum(1 for e in outcome.episodes if e.cause != outcome.fault),
                episodes=len(req.seeds),
                runner_restarts=self.runner.restarts,
            )
        log.info(
            "rollout_finished",
            subtask=req.subtask.name,
            success_rate=result.success_rate,
            steps=result.steps,
            causes=sorted({e.cause for e in result.episodes}),
            # Stage modules compiled for this request; the rest came from the runner's
            # cache (sandbox.compile_code keeps them per process by sha256).
            compiled=done.compiled if done is not None else 0,
            compile_hits=done.compile_hits if done is not None else 0,
            **({"torch_threads": done.torch_threads} if done and done.torch_threads else {}),
            # The runner's memory before the batch and at its peak in it: what the batch's
            # code made it hold (MiB).
            **(
                {
                    "runner_rss_mib": done.rss_bytes >> 20,
                    "runner_peak_mib": done.peak_rss_bytes >> 20,
                }
                if done and done.peak_rss_bytes
                else {}
            ),
        )
        return result

    def _book(self, episode: RunnerEpisode) -> None:
        """One episode the runner finished: its stats row (exactly one per episode)."""
        if self.stats is not None and episode.stats:
            self.stats.write(episode.length, episode.reward, episode.counts)

    async def _local_policies(self, req: RolloutRequest) -> RolloutRequest | RolloutResult:
        """``req`` with every policy it names as a file of this machine, checked by its
        sha256: a path inside this actor's run directory as it is (the head's run, or a
        learner that shares it); any other policy — a path elsewhere (the head's, on
        another machine) or a sha256 alone — from this machine's artifact store,
        fetched from the head's by its hash when missing. A path outside the run
        directory is never read: a peer named it. A policy without its sha256, or one the
        head's store does not have, fails every episode with ``policy_unusable``."""
        resolved: dict[tuple[str, str], str] = {}

        async def local(path: str, sha256: str) -> str:
            if not path and not sha256:
                return ""
            if (path, sha256) not in resolved:
                resolved[(path, sha256)] = await self._policy_file(path, sha256)
            return resolved[(path, sha256)]

        try:
            top = await local(req.policy_path, req.policy_sha256)
            stages = [
                dataclasses.replace(s, policy_path=await local(s.policy_path, s.policy_sha256))
                for s in req.stages
            ]
            needs = []
            for n in req.needs:
                path = await local(n.stage.policy_path, n.stage.policy_sha256)
                needs.append(
                    dataclasses.replace(n, stage=dataclasses.replace(n.stage, policy_path=path))
                )
        except PolicyUnusable as exc:
            log.warning("policy_refused", subtask=req.subtask.name, detail=str(exc))
            episodes = [
                EpisodeReport(s, False, 0, 0.0, [], POLICY_UNUSABLE, str(exc)) for s in req.seeds
            ]
            return RolloutResult(req.subtask.name, episodes, 0.0, 0, self.actor_id)
        return dataclasses.replace(req, policy_path=top, stages=stages, needs=needs)

    async def _policy_file(self, path: str, sha256: str) -> str:
        if not sha256:
            raise PolicyUnusable(f"{path[:200]!r} comes without its sha256")
        where = ""
        if path:
            try:
                if self.run_dir is None:
                    raise PolicyUnusable(f"{path[:200]!r}: this actor has no run directory")
                found = inside(self.run_dir, path)
                if found.is_file():
                    return str(found)  # the runner checks its sha256 as it loads it
                where = f"{path[:200]!r} is not in the run directory {self.run_dir}"
            except PolicyUnusable as exc:
                where = str(exc)  # elsewhere: never read, fetched by its hash instead
        try:
            return str(await artifacts.fetch(self, sha256, self.store, what="policy"))
        except artifacts.ArtifactError as exc:
            raise PolicyUnusable(f"{where + '; ' if where else ''}{exc}") from None
