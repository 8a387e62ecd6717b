"""The learner actor: trains stable-baselines3 PPO on one subtask at a time.

A ``train.request`` names a job, carries the subtask's RL config (the paper's RL
interface: observation, primitives plus coded options, reward) and a budget. The learner
builds the vectorized :class:`rl.rl_env.SubtaskEnv`, trains in a worker thread (so
heartbeats and progress keep flowing), checkpoints every ``checkpoint_every`` decisions
into ``<run dir>/learners/<job>/``, and answers with a ``train.result``: the SB3 zip
(path and sha256, plus the bytes when the learner is remote), the success rate on
held-out worlds and where the TensorBoard logs are. The result reports every world step
the job's worlds took — PPO's, the setup code's at every reset (failed attempts
included) and the held-out evaluation's — and every world episode with what it unlocked
(:meth:`rl.rl_env.SubtaskEnv.take_world_episodes`); a job whose setup code keeps
failing answers with ``failure`` set and its steps all the same. Setup runs once per
world in a learner process (:mod:`rl.start_states`): its steps are counted when a
world's start is made, and resets that restore it (in this job or a later one on the
same setup) add none.

A re-delivered job (its first learner died) finds the checkpoints of its earlier attempt
and resumes from the newest; the result reports the decisions lost to the crash. Every
checkpoint is also put to the head's artifact store (:mod:`runtime.artifacts`) under the
job's name, and a learner that has none of a job asks the head for its newest, so a job
resumes on any learner, on any machine, losing at most one checkpoint interval. A remote
learner (no run directory) also puts its job's TensorBoard files to the head, which
unpacks them into the run's TensorBoard folder, and leaves nothing behind: a finished
job's folders go at once, and when the learner stops every checkpoint the head
acknowledged goes too (one it never did is kept and logged). An abandoned job (the asker
cancelled or timed out) stops at the next env step.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import trio
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.logger import Logger

from knowledge.options import STAGE_CODE
from messages import Envelope, encode
from messages.artifact import JobReached
from messages.train import PPOSettings, TrainProgress, TrainRequest, TrainResult, WorldEpisode
from method import seeds
from method.tboard import LOG_DIR
from rl.artifacts import PolicyUnusable, policy_spec, restore_checkpoint, sha256_of
from rl.env_workers import EnvWorkers, WorkerDied, WorkerVecEnv
from rl.held_out import held_out, play_learned
from rl.per_env import PerEnvPPO
from rl.rl_env import SetupError, make_env, make_vec_env
from rl.smdp import SMDPPPO
from runtime import artifacts
from runtime.actor import TEST_HOOKS_ENV, Actor, handles
from runtime.devices import check_device
from runtime.events import log

# Finished episodes averaged in progress reports (SB3's own window is 100 as well).
PROGRESS_WINDOW = 100


TORCH_THREADS_ENV = "RLGPT_TORCH_THREADS"
"""Intra-op threads for torch in a learner process (default 1)."""


LINGER_ENV = "RLGPT_TEST_LINGER_S"
"""Test-only (with ``RLGPT_TEST_HOOKS``): seconds a stopped attempt's worker thread
lingers before it ends, as one in a long evaluation does."""


def set_torch_threads() -> int:
    """One torch thread per learner unless told otherwise: the policies are small MLPs,
    which a second thread barely speeds up, while two learners on two cores each running
    two spinning threads slowed each other down fivefold (measured)."""
    threads = int(os.environ.get(TORCH_THREADS_ENV, "1"))
    torch.set_num_threads(threads)
    return threads


def latest_checkpoint(folder: Path) -> tuple[Path, int] | None:
    """The newest ``ckpt-<steps>.zip`` in ``folder``, with its step count."""
    found = []
    for path in folder.glob("ckpt-*.zip"):
        try:
            found.append((int(path.stem.split("-", 1)[1]), path))
        except ValueError:
            continue
    if not found:
        return None
    steps, path = max(found)
    return path, steps


WORKER_POLL_S = 0.1
"""How often a job sent back to this learner checks that its previous attempt's worker
thread has ended."""

FETCHED_DIR = "fetched"
"""A remote learner's checkpoints fetched from the head: ``<base>/fetched/<pid>/``."""

STOP_WAIT_S = 5.0
"""How long a stopping remote learner waits for its training threads to end (they stop
at their next PPO step) before it cleans up its files."""


class LearnerActor(Actor):
    role = "learner"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_device(self.device)
        set_torch_threads()
        self.workdir = self.run_dir or Path(os.environ.get("TMPDIR", "/tmp")) / "rlgpt-learner"
        self._workers: dict[str, threading.Event] = {}
        """Job name → set when the worker thread of its last attempt here has ended."""
        self.store = artifacts.worker_store(self.run_dir)
        """Checkpoints fetched from the head (:mod:`runtime.artifacts`), when this learner
        has a run directory (a remote one fetches into :meth:`_fetch_store`)."""
        self._putting = trio.Lock()
        """One put to the head at a time: checkpoints arrive in the order they were made."""
        self._stops: dict[str, threading.Event] = {}
        """Job name → the stop flag of its last attempt here."""
        self._jobs: set[str] = set()
        """Jobs this process trained (a remote learner cleans up only its own files)."""
        self._acked: dict[str, set[int]] = {}
        """Job name → decisions of its checkpoints the head's store acknowledged."""
        self._fetched: dict[str, set[Path]] = {}
        """Job name → its checkpoints fetched from the head into :attr:`store`."""
        self._curves_kept: set[str] = set()
        """Finished jobs whose TensorBoard files never reached the head (kept here)."""
        self._env_workers = EnvWorkers()
        """Processes that step the envs of jobs with ``subproc`` (started on first need,
        kept for the actor's life: their start-state caches serve later jobs)."""

    @handles(TrainRequest)
    async def on_train(self, req: TrainRequest, env: Envelope) -> TrainResult:
        if not artifacts.plain_name(req.name):
            # It names this job's folders: "../x" would write (and remove) outside them.
            raise ValueError(
                f"train.request name {req.name[:80]!r} is not a plain file name (no /, \\, "
                f"NUL or leading dot, at most {artifacts.NAME_MAX} characters): rename the job"
            )
        device = check_device(req.device or self.device)
        # A cancelled attempt (its deadline passed, say) answers at once, but its worker
        # thread only stops at its next PPO step, or after its evaluation: the same job
        # sent back here waits for it, so that two attempts never train one job (and
        # write one folder) at once.
        previous = self._workers.get(req.name)
        if previous is not None and not previous.is_set():
            log.info("training_waits_for_previous_attempt", job=req.name)
            while not previous.is_set():
                await trio.sleep(WORKER_POLL_S)
        head = await self._head_checkpoint(req.name)
        done = self._workers[req.name] = threading.Event()
        stop = self._stops[req.name] = threading.Event()
        self._jobs.add(req.name)
        log.info(
            "training_started", job=req.name, steps=req.total_steps, device=device,
            envs=req.n_envs, workers=req.n_envs if req.subproc else 0,
        )  # fmt: skip
        try:
            result = await self.run_blocking(
                self._train_then, done, req, device, stop, env.frm, head
            )
        except BaseException:
            stop.set()  # cancelled or failed: make the worker thread stop at its next step
            raise
        if self.run_dir is None:
            if await self._put_tensorboard(req.name):
                self._curves_kept.discard(req.name)
            else:
                self._curves_kept.add(req.name)
            # Everything of the job is in the result or the head's store now.
            await self.run_blocking(self._clean_finished, req.name)
        log.info(
            "training_finished",
            job=req.name,
            steps=result.steps,
            eval_success=result.eval_success_rate,
            steps_lost=result.steps_lost,
            wall_s=result.wall_s,
        )
        return result

    async def _head_checkpoint(self, job: str) -> HeadCheckpoint | None:
        """What the head's store holds of ``job``, its newest checkpoint fetched into this
        machine's store; None when it has no record of the job."""
        try:
            latest = await artifacts.latest_checkpoint(self, job)
        except artifacts.ArtifactError as exc:
            log.warning("checkpoint_not_fetched", job=job, detail=str(exc)[:500])
            return HeadCheckpoint(None, 0, 0, answered=False)
        if not latest.sha256:
            return HeadCheckpoint(None, 0, latest.reached) if latest.reached else None
        try:
            path = await artifacts.fetch(
                self, latest.sha256, self._fetch_store(), what="checkpoint"
            )
        except artifacts.ArtifactError as exc:
            log.warning("checkpoint_not_fetched", job=job, detail=str(exc)[:500])
            return HeadCheckpoint(None, 0, latest.reached)
        self._fetched.setdefault(job, set()).add(path)
        return HeadCheckpoint(path, latest.decisions, latest.reached)

    def share_checkpoint(self, job: str, path: Path, steps: int) -> None:
        """Put a checkpoint just saved (worker thread) to the head's store, in the
        background: training goes on while it travels."""
        data = path.read_bytes()  # now: the next checkpoint replaces the file
        # The head hears how far the job got before the checkpoint travels: a remote
        # learner trusts a local checkpoint only that far (:meth:`_trusted_local`).
        self.tell_reached(job, steps)
        try:
            trio.from_thread.run_sync(
                self._nursery.start_soon, self._put_checkpoint, job, data, steps
            )
        except (RuntimeError, AttributeError, trio.RunFinishedError):
            pass  # trained outside an actor (tests call train() directly): no head

    async def _put_checkpoint(self, job: str, data: bytes, steps: int) -> None:
        async with self._putting:
            try:
                await artifacts.put(self, data, kind="checkpoint", job=job, decisions=steps)
            except artifacts.ArtifactError as exc:
                log.warning("checkpoint_not_shared", job=job, steps=steps, detail=str(exc)[:500])
                return
            self._acked.setdefault(job, set()).add(steps)

    async def _put_tensorboard(self, job: str) -> bool:
        """A remote job's TensorBoard files, packed and put to the head (which unpacks
        them into the run's TensorBoard folder). False when the head did not take them."""
        pack = await self.run_blocking(artifacts.pack_tensorboard, self._base() / LOG_DIR / job)
        if not pack:
            return True
        async with self._putting:
            try:
                await artifacts.put(self, pack, kind="tensorboard", job=job)
            except artifacts.ArtifactError as exc:
                log.warning("tensorboard_not_shared", job=job, detail=str(exc)[:500])
                return False
        return True

    def tell_reached(self, job: str, steps: int) -> None:
        """Tell the head's store how far this attempt got (worker thread)."""
        try:
            trio.from_thread.run_sync(self.tell, "@" + artifacts.ROLE, JobReached(job, steps))
        except (RuntimeError, AttributeError, AssertionError, trio.RunFinishedError):
            pass  # trained outside an actor: no head to tell

    def _fetch_store(self) -> artifacts.Store:
        """Where checkpoints fetched from the head go: the run's store for a learner with
        a run directory; for a remote one a folder of this process's own under
        :meth:`_base`, not the machine's shared cache: it removes what it fetched when a
        job ends, and another learner on the machine may be resuming from the same file."""
        if self.run_dir is not None:
            return self.store
        return artifacts.Store(self._base() / FETCHED_DIR / str(os.getpid()))

    def _base(self) -> Path:
        # A remote learner keeps its files under the head's run id, so a job of the same
        # name in another run never resumes from this run's checkpoints.
        return self.workdir if self.run_dir is not None else self.workdir / self.run_id

    # -- nothing left behind (remote learners only) -----------------------------------

    def _clean_finished(self, job: str) -> None:
        """A remote job just finished (its policy is in the result, its checkpoints and
        TensorBoard files at the head): remove its folders here and the checkpoints of
        it fetched (:meth:`_fetch_store`). TensorBoard files the head did not take
        stay (logged ``learner_files_kept``): they are the only copy."""
        base = self._base()
        tally = _Tally(base)
        tally.remove(base / "learners" / job)
        if job in self._curves_kept:
            self._kept(job, "the head did not take its TensorBoard files", base / LOG_DIR / job)
        else:
            tally.remove(base / LOG_DIR / job)
        for path in self._fetched.pop(job, set()):
            tally.remove(path)
        self._acked.pop(job, None)
        tally.log(job=job, why="job_finished")

    async def teardown(self) -> None:
        """A remote learner stopping (run over, SIGTERM, key revoked) removes what it
        wrote under ``$TMPDIR/rlgpt-learner/<run id>``, all but a checkpoint the head
        never acknowledged (it may be the only copy: logged ``learner_files_kept``).
        Every learner ends its env worker processes."""
        if self.run_dir is None:
            await self._wait_for_workers()
            self._clean_up()
        workers = getattr(self, "_env_workers", None)
        if workers is not None and len(workers):
            if self.run_dir is not None:
                await self._wait_for_workers()  # jobs still stepping end first
            await trio.to_thread.run_sync(workers.close)
        await super().teardown()

    def env_workers(self) -> EnvWorkers:
        """This learner's env worker processes (:mod:`rl.env_workers`)."""
        if getattr(self, "_env_workers", None) is None:  # (tests build learners bare)
            self._env_workers = EnvWorkers()
        return self._env_workers

    async def _wait_for_workers(self) -> None:
        for stop in self._stops.values():
            stop.set()
        with trio.move_on_after(STOP_WAIT_S):
            while not all(done.is_set() for done in self._workers.values()):
                await trio.sleep(WORKER_POLL_S)

    def _clean_up(self) -> None:
        if not self.run_id or not (self._jobs or self._fetched):
            return  # it never worked here (or never joined a run): nothing of it to remove
        base = self._base()
        tally = _Tally(base)
        for job in sorted(self._jobs):
            folder = base / "learners" / job
            done = self._workers.get(job)
            if done is not None and not done.is_set():
                self._kept(job, "its training thread has not stopped", folder)
                continue
            acked = self._acked.get(job, set())
            unconfirmed = [path for steps, path in _checkpoints(folder) if steps not in acked]
            if unconfirmed:
                # Kept with its attempts.jsonl: a learner restarted here resumes from it.
                self._kept(job, "the head never acknowledged this checkpoint", *unconfirmed)
            else:
                tally.remove(folder)
            if job not in self._curves_kept:
                # An unfinished job's curves: it resumes (and logs anew) elsewhere.
                tally.remove(base / LOG_DIR / job)
        for paths in self._fetched.values():
            for path in paths:
                tally.remove(path)  # the head holds them: that is where they came from
        self._fetched.clear()
        tally.remove(base / FETCHED_DIR / str(os.getpid()))
        tally.prune(base)
        try:
            self.workdir.rmdir()  # rlgpt-learner itself, when no other run has files there
        except OSError:
            pass
        tally.log(why="actor_stopped")

    def _kept(self, job: str, why: str, *paths: Path) -> None:
        log.warning("learner_files_kept", job=job, why=why, paths=[str(p) for p in paths])

    def _trusted_local(self, job: str, folder: Path, head: HeadCheckpoint | None) -> bool:
        """Whether a remote learner may resume from the checkpoints in ``folder``. A run
        id can be used again (``attach --run-id``): files an earlier run left here under
        it must not pass for this run's. The head's store is the record: a job it knows
        nothing of has no local past (its folder's files are removed); a local checkpoint
        further than any attempt told the head is not this run's (ignored)."""
        if self.run_dir is not None:
            return True
        local = latest_checkpoint(folder)
        if head is None:
            stale = [p for p in folder.iterdir() if p.is_file()] if folder.is_dir() else []
            if stale:
                log.warning("learner_files_stale", job=job, paths=[str(p) for p in stale])
                for path in stale:
                    path.unlink(missing_ok=True)
            return False
        if not head.answered:
            if local is not None:
                log.warning("checkpoint_not_trusted", job=job, path=str(local[0]),
                            why="the head's store did not answer")  # fmt: skip
            return False
        if local is not None and local[1] > head.reached:
            log.warning(
                "checkpoint_not_trusted", job=job, path=str(local[0]), decisions=local[1],
                why=f"no attempt told the head it reached more than {head.reached} decisions",
            )  # fmt: skip
            return False
        return True

    def _train_then(self, done: threading.Event, *args: Any) -> TrainResult:
        try:
            return self.train(*args)
        finally:
            stop: threading.Event = args[2]
            linger = os.environ.get(LINGER_ENV) if os.environ.get(TEST_HOOKS_ENV) else None
            if linger and stop.is_set():
                # Test-only: a stopped attempt's thread ends this much later, as one in a
                # long evaluation does, so the wait for it is exercised every time.
                time.sleep(float(linger))
            log.info("training_worker_ended", job=args[0].name)
            done.set()

    def _crashed(self, req: TrainRequest, exc: WorkerDied) -> TrainResult:
        """The failed result of a job whose environment process died: no policy, and the
        world steps that process took died with it (uncounted; said in the failure)."""
        detail = (
            f"the policy's code crashed the process that runs it: {exc}; the world steps "
            "it took in that process are lost with it"
        )
        log.warning("training_crashed", job=req.name, detail=detail[:300])
        return TrainResult(
            name=req.name, policy_path="", sha256="", steps=0, primitive_steps=0,
            eval_success_rate=0.0, eval_episodes=0, eval_primitive_steps=0, resumed_from=0,
            steps_lost=0, tensorboard_dir="", wall_s=0.0, train_s=0.0, device="",
            actor_id=self.actor_id, failure=detail[:1000],
        )  # fmt: skip

    def train(
        self,
        req: TrainRequest,
        device: str,
        stop: threading.Event,
        asker: str,
        head: HeadCheckpoint | None = None,
    ) -> TrainResult:
        """Train and evaluate (blocking; runs in a worker thread). ``head``: what the
        head's store holds of this job (its newest checkpoint, fetched). A job whose
        envs' process died under it (policy code that crashed it: a C stack overflow,
        memory) is that version's failure, never this learner's."""
        try:
            return self._train(req, device, stop, asker, head)
        except WorkerDied as exc:
            return self._crashed(req, exc)

    def _train(
        self,
        req: TrainRequest,
        device: str,
        stop: threading.Event,
        asker: str,
        head: HeadCheckpoint | None = None,
    ) -> TrainResult:
        """Train and evaluate (:meth:`train` without the crash's result). ``head``: what the
        head's store holds of this job (its newest checkpoint, fetched)."""
        started = time.monotonic()
        folder, attempts, trusted, reached = self._job_folder(req, head)
        # Beside the run-level figures: one TensorBoard log dir for the whole run.
        curves = self._base() / LOG_DIR / req.name
        vec = self._training_envs(req)
        try:
            model, resumed_from = resume(
                req, vec, device, folder if trusted else None, curves, head
            )
            steps_lost = max(0, reached - resumed_from)
            _append(attempts, {"actor": self.actor_id, "resumed_from": resumed_from})
            callback = self._callbacks(req, asker, stop, vec, folder, attempts, resumed_from)
            remaining = max(0, req.total_steps - resumed_from)
            learn_started = time.monotonic()
            try:
                if remaining:
                    model.learn(remaining, callback=callback, reset_num_timesteps=resumed_from == 0)
            except SetupError as exc:
                # The config's setup died in every world a reset tried: no policy, but
                # the steps its worlds took are still the run's, reported to be counted.
                trained = world_tally(vec)  # (a worker survives its env's error)
                log.warning("training_setup_failed", job=req.name, detail=str(exc)[:300])
                return TrainResult(
                    name=req.name, policy_path="", sha256="", steps=int(model.num_timesteps),
                    primitive_steps=trained["world_steps"] - trained["setup_steps"],
                    eval_success_rate=0.0, eval_episodes=0, eval_primitive_steps=0,
                    resumed_from=resumed_from, steps_lost=steps_lost,
                    tensorboard_dir=str(folder / "tensorboard"),
                    wall_s=round(time.monotonic() - started, 3),
                    train_s=round(time.monotonic() - learn_started, 3),
                    device=str(model.device), actor_id=self.actor_id,
                    episodes=len(trained["episodes"]),
                    achievement_episodes=_unlocked(trained["episodes"]),
                    setup_steps=trained["setup_steps"],
                    world_episodes=[WorldEpisode(*e) for e in trained["episodes"]],
                    failure=str(exc)[:1000],
                )  # fmt: skip
            train_s = time.monotonic() - learn_started
            if stop.is_set():
                raise RuntimeError("training cancelled")
            return self._trained(
                req, model, vec, folder, curves, resumed_from, steps_lost, started, train_s
            )
        finally:
            vec.close()

    def _job_folder(
        self, req: TrainRequest, head: HeadCheckpoint | None
    ) -> tuple[Path, Path, bool, int]:
        """The job's folder (made), its attempts file, whether the folder's files are
        this run's own (:meth:`_trusted_local`), and the furthest step any attempt of
        the job reached (here or in the head's store)."""
        folder = self._base() / "learners" / req.name
        trusted = self._trusted_local(req.name, folder, head)
        folder.mkdir(parents=True, exist_ok=True)
        attempts = folder / "attempts.jsonl"
        if not trusted and attempts.exists():
            # Its records are no more this run's than the folder's checkpoints: counted,
            # they would report decisions lost that this run never made.
            log.warning("learner_files_stale", job=req.name, paths=[str(attempts)])
            attempts.unlink()
        reached = max(_furthest(attempts), head.reached if head is not None else 0)
        return folder, attempts, trusted, reached

    def _training_envs(self, req: TrainRequest) -> Any:
        """The job's vectorised training envs, drawing worlds from its training pool."""
        return make_vec_env(
            req.config,
            req.n_envs,
            req.seed,
            subproc=req.subproc,
            # Long-lived worker processes: both cores step worlds, and the starts they
            # made stay cached for this sub-action's later versions.
            # Long-lived worker processes: the starts they made stay cached for this
            # sub-action's later versions, with ``subproc`` every env steps on a core of
            # its own, and either way the policy code (options, reward, setup) runs
            # there: a version that crashes its process costs that job, not the learner.
            workers=self.env_workers(),
            world_pool=training_worlds(req),
            pool_only=True,  # PPO seeds each env's first reset: a pool world, shared
            setup_retries=seeds.SETUP_RETRIES,
            setup_retry_stride=seeds.RETRY_STRIDE,
            setup_redraws=seeds.SETUP_REDRAWS,
            # Setup once, train many: each world's start is made (and counted) once in
            # this process, then restored; later jobs on the same setup share them.
            start_states=True,
        )

    def _callbacks(
        self,
        req: TrainRequest,
        asker: str,
        stop: threading.Event,
        vec: Any,
        folder: Path,
        attempts: Path,
        resumed_from: int,
    ) -> CallbackList:
        """What runs beside PPO's steps: episode counts, checkpoints (shared with the
        head), progress reports, the stop on cancel and at the job's world-step cap."""
        counter = EpisodeCounter()
        # In this order: the counts first (the report reads them), the stop last (it
        # sees a stop the report set in the same step).
        return CallbackList(
            [
                counter,
                SaveCheckpoints(
                    folder,
                    attempts,
                    self.actor_id,
                    req.checkpoint_every,
                    resumed_from,
                    share=lambda path, steps: self.share_checkpoint(req.name, path, steps),
                ),
                ReportProgress(self, req, asker, counter, attempts, stop, resumed_from),
                StopOnCancel(stop),
                StopAtWorldSteps(vec, req.max_world_steps, req.name),
            ]
        )

    def _trained(
        self,
        req: TrainRequest,
        model: Any,
        vec: Any,
        folder: Path,
        curves: Path,
        resumed_from: int,
        steps_lost: int,
        started: float,
        train_s: float,
    ) -> TrainResult:
        """Save the trained policy, evaluate it on held-out worlds and report the job:
        every world step of training and of the evaluation, setup's included."""
        policy = folder / "policy.zip"
        tmp = folder / "policy.part.zip"
        model.save(tmp)
        os.replace(tmp, policy)
        trained = world_tally(vec)
        held = {}
        success, _ = evaluate(req, str(policy), tally=held, vec=vec, workers=self.env_workers())
        setup = trained["setup_steps"] + held["setup_steps"]
        episodes = [WorldEpisode(*e) for e in trained["episodes"] + held["episodes"]]
        unlocked = _unlocked(trained["episodes"] + held["episodes"])
        digest = sha256_of(policy)
        return TrainResult(
            name=req.name,
            policy_path=str(policy),
            sha256=digest,
            steps=int(model.num_timesteps),
            primitive_steps=trained["world_steps"] - trained["setup_steps"],
            eval_success_rate=success,
            eval_episodes=req.eval_episodes,
            eval_primitive_steps=held["world_steps"] - held["setup_steps"],
            resumed_from=resumed_from,
            steps_lost=steps_lost,
            tensorboard_dir=str(curves),
            wall_s=round(time.monotonic() - started, 3),
            train_s=round(train_s, 3),
            device=str(model.device),
            actor_id=self.actor_id,
            policy_bytes=policy.read_bytes() if self.run_dir is None else b"",
            episodes=len(episodes),
            achievement_episodes=unlocked,
            setup_steps=setup,
            world_episodes=episodes,
        )


def make_ppo(
    settings: PPOSettings, vec: Any, *, seed: int, device: str, tensorboard_log: str | None = None
) -> Any:
    """A fresh SB3 PPO for ``vec`` with ``settings`` (MultiInputPolicy for dict
    observations); the one place learners and benchmarks build their models. With
    ``settings.smdp`` it is :class:`rl.smdp.SMDPPPO` (γ^k per decision)."""
    policy, policy_kwargs = policy_spec(vec.observation_space, settings.net_arch)
    model = ppo_class(settings)(
        policy,
        vec,
        n_steps=settings.n_steps,
        batch_size=settings.batch_size,
        n_epochs=settings.n_epochs,
        learning_rate=settings.learning_rate,
        gamma=settings.gamma,
        gae_lambda=settings.gae_lambda,
        clip_range=settings.clip_range,
        ent_coef=settings.ent_coef,
        policy_kwargs=policy_kwargs,
        seed=seed,
        device=device,
        tensorboard_log=tensorboard_log,
        verbose=0,
    )
    model.collect_mode = settings.collect
    if tensorboard_log is None:
        # Without curves SB3 would still make an empty $TMPDIR/SB3-<time> folder per
        # learn(): a logger with no outputs writes nothing anywhere.
        model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def code_prior(model: Any, req: TrainRequest) -> int | None:
    """Give a fresh ``model`` the job's warm start (``req.ppo.code_prior``): its action
    logits' bias set so the untrained policy picks the stage's own code with that
    probability and every other action alike (SB3 initialises the output layer's weights
    at gain 0.01, so the bias is nearly all of the logits). The index of the stage's
    code among the actions, or None when there is nothing to do (no prior, or the config
    offers no stage code: said as ``code_prior_unused``). Options come after the
    primitives in the action space."""
    p = req.ppo.code_prior
    if p <= 0:
        return None
    names = [c.name for c in req.config.coded_actions]
    if STAGE_CODE not in names:
        log.warning("code_prior_unused", job=req.name, code_prior=p,
                    reason="the job's config offers no stage_code option")  # fmt: skip
        return None
    if not p < 1:
        raise ValueError(f"[training.ppo] code_prior must be in [0, 1): got {p}")
    n = int(model.action_space.n)
    index = n - len(names) + names.index(STAGE_CODE)

    bias = torch.full((n,), math.log((1 - p) / (n - 1)))
    bias[index] = math.log(p)
    with torch.no_grad():
        model.policy.action_net.bias.copy_(bias.to(model.policy.action_net.bias.device))
    log.info("code_prior_set", job=req.name, code_prior=p, action=index)
    return index


class HeadCheckpoint:
    """What the head's artifact store holds of a job."""

    def __init__(
        self, path: Path | None, decisions: int, reached: int, *, answered: bool = True
    ) -> None:
        self.answered = answered
        """False: the head's store did not answer (nothing is known of the job)."""
        self.path = path
        """Its newest checkpoint, fetched into this machine's store (None: none)."""
        self.decisions = decisions
        """Agent decisions that checkpoint holds."""
        self.reached = reached
        """The most decisions any attempt of the job reported reaching."""


def resume(
    req: TrainRequest,
    vec: Any,
    device: str,
    folder: Path | None,
    curves: Path,
    head: HeadCheckpoint | None = None,
) -> tuple[Any, int]:
    """The job's model and the decisions it starts from: a fresh PPO with the job's
    settings, into which the newest checkpoint — in ``folder`` (a crashed attempt's on
    this machine) or the head's (``head``: an attempt's on any learner), whichever holds
    more decisions — is loaded without unpickling
    (:func:`rl.artifacts.restore_checkpoint`); ``folder`` None: the local ones are not
    to be trusted. A checkpoint that cannot be used is
    logged (``checkpoint_unusable``) and training starts over."""
    model = make_ppo(req.ppo, vec, seed=req.seed, device=device, tensorboard_log=str(curves))
    code_prior(model, req)
    found = latest_checkpoint(folder) if folder is not None else None
    if head is not None and head.path is not None and head.decisions > (found or (0, -1))[1]:
        found = head.path, head.decisions
    if found is None:
        return model, 0
    path, steps = found
    try:
        restored = restore_checkpoint(model, path)
        if restored != steps:
            raise PolicyUnusable(f"{path} holds num_timesteps {restored}, its name says {steps}")
    except PolicyUnusable as exc:
        log.warning("checkpoint_unusable", job=req.name, path=str(path), detail=str(exc)[:500])
        # A partial load must not leak into the fresh start: build it again.
        fresh = make_ppo(req.ppo, vec, seed=req.seed, device=device, tensorboard_log=str(curves))
        return fresh, 0
    log.info("training_resumed", job=req.name, from_steps=steps, checkpoint=str(path))
    return model, steps


def ppo_class(settings: PPOSettings) -> Any:
    """The SB3 algorithm class ``settings`` ask for: SMDP PPO or plain PPO."""
    if settings.smdp:
        return SMDPPPO
    if settings.collect == "per_env":
        return PerEnvPPO

    return PPO


SETUP_RETRIES = seeds.SETUP_RETRIES
"""Further worlds a training reset tries when setup code fails (the seed table's)."""


def training_worlds(req: TrainRequest) -> range:
    """The world seeds a job trains on."""
    pool = seeds.training_pool(req.seed if req.pool_seed < 0 else req.pool_seed, req.train_worlds)
    if pool and req.eval_seed < pool.stop and req.eval_seed + req.eval_episodes > pool.start:
        raise ValueError(f"held-out seeds from {req.eval_seed} overlap the training worlds {pool}")
    return pool


def world_tally(vec: Any) -> dict[str, Any]:
    """Every world step and world episode of a vector env's envs (setup and failed
    setups included), read from the envs themselves: ``world_steps``, ``setup_steps``,
    ``episodes`` (the envs' episodes are closed: call once, when training is over)."""
    episodes = [e for taken in vec.env_method("take_world_episodes") for e in taken]
    return {
        "world_steps": sum(vec.get_attr("world_steps")),
        "setup_steps": sum(vec.get_attr("setup_steps_total")),
        "episodes": episodes,
    }


def _unlocked(episodes: list) -> dict[str, int]:
    """Achievement → world episodes (length, reward, counts) that unlocked it."""
    unlocked: dict[str, int] = {}
    for _, _, counts in episodes:
        for name in counts:
            unlocked[name] = unlocked.get(name, 0) + 1
    return dict(sorted(unlocked.items()))


def evaluate(
    req: TrainRequest,
    policy_path: str,
    episodes: int | None = None,
    tally: dict | None = None,
    vec: Any = None,
    workers: EnvWorkers | None = None,
) -> tuple[float, int]:
    """Success rate of the policy saved at ``policy_path`` on held-out world seeds, and
    the world steps it took.

    Actions are sampled from the policy, as in training: a policy trained briefly on a
    sparse reward often has a near-tie between actions, and its argmax can loop where
    the sampled policy succeeds. Each episode samples from a seed of its own (the job's
    seed and the world's), so the figure is reproducible and the same wherever the
    episodes run: split over the job's env workers when ``vec`` is one (both cores
    play; see :meth:`rl.env_workers.WorkerVecEnv.held_out`), else in one of
    ``workers``, else (tests, benchmarks) in this process. A worker that dies under the
    check is replaced once; a second death raises :class:`WorkerDied` (the policy's
    code kills its process: the job fails, not the learner)."""
    count = req.eval_episodes if episodes is None else episodes
    seeds = list(range(req.eval_seed, req.eval_seed + count))
    check = None
    if isinstance(vec, WorkerVecEnv):
        try:
            check = vec.held_out(policy_path, seeds, req.seed)
        except WorkerDied as exc:
            # The policy is trained and saved: check it again rather than lose the job,
            # in a fresh worker, never here (the code that killed it would kill this
            # process). What the dead worker had played is lost with it, uncounted.
            log.warning("held_out_worker_died", job=req.name, detail=str(exc)[:300])
            if workers is None:
                raise
    if check is None and workers is not None:
        check = workers.held_out(encode(req.config), policy_path, seeds, req.seed)
    if check is None:
        check = play_learned(req.config, policy_path, seeds, req.seed)
    if tally is not None:
        tally.update(check["tally"])
    rate = check["wins"] / check["played"] if check["played"] else 0.0
    return rate, check["steps"]


def random_success(req: TrainRequest, episodes: int, seed: int = 0) -> float:
    """The same held-out evaluation for a uniformly random policy: the bar to beat."""
    rng = np.random.default_rng(seed)
    probe = make_env(req.config)
    n = int(probe.action_space.n)
    probe.close()
    seeds = range(req.eval_seed, req.eval_seed + episodes)
    return held_out(req.config, lambda obs: int(rng.integers(n)), seeds)[0]


def _checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """Every ``ckpt-<steps>.zip`` in ``folder`` (a half-saved ``.part`` one counts as
    none), with its step count."""
    found = []
    for path in folder.glob("ckpt-*.zip") if folder.is_dir() else ():
        try:
            found.append((int(path.stem.split("-", 1)[1]), path))
        except ValueError:
            continue
    return sorted(found)


class _Tally:
    """Files and bytes a remote learner removed, logged once (``learner_files_removed``);
    it removes nothing outside ``base`` (the learner's folder of the run)."""

    def __init__(self, base: Path) -> None:
        self.base = base.resolve()
        self.files = 0
        self.bytes = 0
        self.folders = 0

    def remove(self, path: Path) -> None:
        """Remove a file or a whole folder, counting what went; missing is fine; one that
        is not inside :attr:`base` (once links and ``..`` are resolved) is refused."""
        resolved = path.resolve()
        if resolved == self.base or not resolved.is_relative_to(self.base):
            log.warning("learner_files_not_removed", path=str(path),
                        detail=f"not inside the learner's folder {self.base}")  # fmt: skip
            return
        try:
            if path.is_dir() and not path.is_symlink():
                for item in path.rglob("*"):
                    if item.is_file():
                        self.files += 1
                        self.bytes += item.stat().st_size
                shutil.rmtree(path)
                self.folders += 1
            elif path.exists():
                self.bytes += path.stat().st_size
                path.unlink()
                self.files += 1
        except OSError as exc:
            log.warning("learner_files_not_removed", path=str(path), detail=str(exc)[:300])

    def prune(self, folder: Path) -> None:
        """Remove ``folder`` and the folders under it that are empty (never a file).
        Another learner of the same run on this machine may be pruning the same folder at
        the same time: what vanishes meanwhile is fine."""
        if not folder.is_dir():
            return
        found: list[Path] = []
        # os.walk skips a folder that vanished under it (rglob raised FileNotFoundError
        # and ended the learner with status 1: seen when two learners stopped together).
        for top, dirs, _ in os.walk(folder, onerror=lambda _: None):
            found += [Path(top) / d for d in dirs]
        for sub in sorted(found, key=lambda p: len(p.parts), reverse=True):
            if sub.is_dir() and not sub.is_symlink():
                try:
                    sub.rmdir()
                    self.folders += 1
                except OSError:
                    pass  # not empty: something is kept there
        try:
            folder.rmdir()
            self.folders += 1
        except OSError:
            pass

    def log(self, **fields: Any) -> None:
        if self.files or self.folders:
            log.info("learner_files_removed", files=self.files, bytes=self.bytes,
                     folders=self.folders, **fields)  # fmt: skip


def _furthest(path: Path) -> int:
    """The most decisions any earlier attempt of a job reported reaching."""
    if not path.exists():
        return 0
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return max((r.get("reached", 0) for r in records), default=0)


def _append(path: Path, record: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


# ---------------------------------------------------------------------- SB3 callbacks
# One concern each; LearnerActor.train chains them in a CallbackList.


def _record_reached(attempts: Path, actor_id: str, steps: int) -> None:
    """How far this attempt got: if it dies, the next one reports what was lost."""
    _append(attempts, {"actor": actor_id, "reached": steps})


class EpisodeCounter(BaseCallback):
    """Counts the world steps and finished episodes of training, the episodes each
    achievement was unlocked in, and keeps the last returns and successes."""

    def __init__(self) -> None:
        super().__init__()
        self.primitive_steps = 0
        """World steps (a coded action's decision takes several)."""
        self.episodes = 0
        """Training episodes finished."""
        self.achievement_episodes: dict[str, int] = {}
        """Achievement → finished episodes that unlocked it."""
        self._unlocked: dict[int, set[str]] = {}
        """Env index → achievements unlocked in its episode under way."""
        self.successes: list[float] = []
        """1.0 or 0.0 for each of the last :data:`PROGRESS_WINDOW` episodes."""
        self.returns: list[float] = []
        """Returns of the last :data:`PROGRESS_WINDOW` episodes."""

    def _on_step(self) -> bool:
        # Collected env by env (rl.per_env), a step's infos are one env's: env_index.
        first = int(self.locals.get("env_index", 0))
        for index, info in enumerate(self.locals.get("infos", ()), start=first):
            self.primitive_steps += int(info.get("primitive_steps", 1))
            unlocked = self._unlocked.setdefault(index, set())
            unlocked.update(info.get("achievements", ()))
            episode = info.get("episode")
            if episode is not None:
                self.episodes += 1
                for name in unlocked:
                    self.achievement_episodes[name] = self.achievement_episodes.get(name, 0) + 1
                unlocked.clear()
                self.returns = (self.returns + [float(episode["r"])])[-PROGRESS_WINDOW:]
                won = float(bool(info.get("is_success")))
                self.successes = (self.successes + [won])[-PROGRESS_WINDOW:]
        return True


class SaveCheckpoints(BaseCallback):
    """Saves the model every ``every`` decisions as ``ckpt-<steps>.zip`` in ``folder``,
    keeping only the newest, and records how far the attempt got."""

    def __init__(
        self,
        folder: Path,
        attempts: Path,
        actor_id: str,
        every: int,
        since: int,
        share: Callable[[Path, int], None] | None = None,
    ):
        super().__init__()
        self.folder, self.attempts, self.actor_id, self.every = folder, attempts, actor_id, every
        self.share = share
        """Called with each checkpoint saved (the learner puts it to the head's store)."""
        self.last_checkpoint = since
        """Decisions at the newest checkpoint (the one resumed from, at first)."""

    def _on_step(self) -> bool:
        steps = int(self.num_timesteps)
        if steps - self.last_checkpoint >= self.every:
            self._checkpoint(steps)
        return True

    def _checkpoint(self, steps: int) -> None:
        path = self.folder / f"ckpt-{steps}.zip"
        tmp = self.folder / f"ckpt-{steps}.part.zip"
        self.model.save(tmp)
        os.replace(tmp, path)  # a crash mid-save never leaves a half checkpoint
        for old in self.folder.glob("ckpt-*.zip"):
            if old != path and ".part" not in old.name:
                old.unlink(missing_ok=True)
        self.last_checkpoint = steps
        _record_reached(self.attempts, self.actor_id, steps)
        if self.share is not None:
            self.share(path, steps)


class ReportProgress(BaseCallback):
    """Every ``req.progress_every_s`` seconds, and once more when training ends (so a job
    shorter than that still reports), tells the asker a :class:`TrainProgress` (from
    ``counter`` and the last update's losses), records how far the attempt got and logs
    it; sets ``stop`` when the head's trio run is gone."""

    def __init__(
        self,
        actor: LearnerActor,
        req: TrainRequest,
        asker: str,
        counter: EpisodeCounter,
        attempts: Path,
        stop: threading.Event,
        since: int,
    ) -> None:
        super().__init__()
        self.actor, self.req, self.asker, self.counter = actor, req, asker, counter
        self.attempts, self.stop = attempts, stop
        self.losses: dict[str, float] = {}
        """The last update's losses, by SB3's name without the ``train/`` prefix."""
        self.last_report = time.monotonic()
        """When the last report went (the start, at first)."""
        self.last_steps = since
        """Decisions at the last report (the speed is measured from there)."""

    def _on_rollout_start(self) -> None:
        # Losses of the update that just ran (SB3 records them during train()).
        values = self.model.logger.name_to_value
        self.losses = {
            k.split("/", 1)[1]: float(v) for k, v in values.items() if k.startswith("train/")
        }

    def _on_step(self) -> bool:
        now = time.monotonic()
        if now - self.last_report >= self.req.progress_every_s:
            self._report(int(self.num_timesteps), now)
        return True

    def _on_training_end(self) -> None:
        if int(self.num_timesteps) > self.last_steps and not self.stop.is_set():
            self._report(int(self.num_timesteps), time.monotonic())

    def _report(self, steps: int, now: float) -> None:
        rate = (steps - self.last_steps) / max(now - self.last_report, 1e-9)
        self.last_report, self.last_steps = now, steps
        counter = self.counter
        progress = TrainProgress(
            name=self.req.name,
            steps=steps,
            primitive_steps=counter.primitive_steps,
            steps_per_s=round(rate, 1),
            episodes=counter.episodes,
            success_rate=float(np.mean(counter.successes)) if counter.successes else 0.0,
            mean_reward=float(np.mean(counter.returns)) if counter.returns else 0.0,
            losses=self.losses,
        )
        _record_reached(self.attempts, self.actor.actor_id, steps)
        self.actor.tell_reached(self.req.name, steps)
        try:
            trio.from_thread.run_sync(self.actor.tell, self.asker, progress)
        except trio.RunFinishedError:
            self.stop.set()
        except RuntimeError as exc:  # trained outside a trio worker thread (called
            if "Trio" not in str(exc):  # directly, as tests do): no one to tell
                raise
        log.info(
            "training_progress",
            job=self.req.name,
            steps=steps,
            steps_per_s=progress.steps_per_s,
            success_rate=round(progress.success_rate, 3),
        )


class StopAtWorldSteps(BaseCallback):
    """Stops training once the vector env's envs took ``cap`` world steps (setup
    included), read after each rollout (0: never). The rollout under way when the cap is
    passed is finished and trained on: a job passes its cap by less than one rollout."""

    def __init__(self, vec: Any, cap: int, job: str) -> None:
        super().__init__()
        self.vec, self.cap, self.job = vec, cap, job
        self.reached = False

    def _on_rollout_end(self) -> None:
        if self.cap <= 0 or self.reached:
            return
        taken = int(sum(self.vec.get_attr("world_steps")))
        if taken >= self.cap:
            self.reached = True
            log.info(
                "training_capped", job=self.job, world_steps=taken, cap=self.cap,
                decisions=int(self.num_timesteps),
            )  # fmt: skip

    def _on_step(self) -> bool:
        return not self.reached


class StopOnCancel(BaseCallback):
    """Stops training at the next step once ``stop`` is set (the job was cancelled, its
    asker is gone, or the learner is shutting down)."""

    def __init__(self, stop: threading.Event) -> None:
        super().__init__()
        self.stop = stop

    def _on_step(self) -> bool:
        return not self.stop.is_set()
