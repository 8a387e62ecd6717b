"""The rollout runner: the child process where an environment actor's untrusted code runs.

An environment actor never runs policy code itself. At setup it starts one runner
(:func:`main` in a fresh interpreter), keeps it warm across requests (a fresh process pays the
imports and Crafter's numba world generator, seconds, at the first world reset) and
hands it each rollout batch over a pipe. The runner owns the world and the sandbox's
compile cache (by sha256, kept across requests), runs code rollouts, composed rollouts
and trained-policy rollouts, and streams one message per finished episode, then one
when the batch is done. Nothing on the pipe is pickled: the frames are 4-byte big-endian
lengths followed by bodies of our msgpack codec (:mod:`messages.codec`), validated on
the actor's side like any message from the wire.

The runner's OS limits are its own: each call into policy code runs under an
address-space cap of the sandbox's memory budget (:func:`sandbox.confine_memory`), the
runner as a whole under one of ``RLGPT_ENV_MEMORY_LIMIT`` (default 2 GiB, raised by
what torch maps when a learned policy first needs it: :func:`import_policy_libraries`),
no core dumps, one torch thread, and per batch a
CPU-time limit (the soft ``RLIMIT_CPU`` set to the CPU used so far plus the batch's budget
and grace), so a runaway costs SIGXCPU at worst. The actor side (:class:`Runner`) watches
the wall clock: an episode that runs past its own budget plus grace
(``RLGPT_WATCHDOG_GRACE_S``, 10 s), or a batch past the sum of its episodes' budgets plus
grace, gets its runner killed and the unfinished episodes the cause ``stalled``; a runner
that dies (SIGSEGV from a C stack overflow, SIGXCPU, an exit) gives them ``crashed`` with
the signal or exit status in the detail. Either way the episodes finished before it keep
their reports, the rest of the batch is not run (said in their detail), and a fresh runner
is started for the next request; the actor process itself keeps heartbeating and answering
throughout.

Protocol (actor → runner, then runner → actor):

* ``runner.ready`` once, after the warm-up (pid, limits, the world's achievement names);
* per batch: ``runner.batch`` in; ``runner.begin`` as each episode starts and
  ``runner.episode`` as it ends (its report, what it printed, and its Crafter stats row
  for the actor to write to ``stats.jsonl``), then ``runner.done`` (frames, counters) —
  or ``control.failure`` when the batch raised in host code (a bad request), which the
  actor turns into a failed ask.

The actor writes the stats rows once the batch is over, one per ``runner.episode`` it
received: an episode the runner did not finish (crash, stall) has no row, none is
written twice, and a batch cancelled mid-way (its ask abandoned) writes none, as its
result is never seen.

**Fault injection, for tests only** (never set by the product): ``RLGPT_FAULT_INJECT``
makes the runner fail on purpose, so the tests can check the actor's handling of faults
the sandbox's guards already stop in real code. Its value is space-separated words:
``segv`` (the runner sends itself SIGSEGV), ``stall`` (one C call that holds the GIL and
never returns: a regular expression that backtracks without end) or ``exit`` (an
``os._exit(3)``), then optional ``seed=N`` (only at the episode of that seed; default:
the first episode of a batch), ``stage=NAME`` (only in a batch whose subtask is NAME) and
``once=PATH`` (only if the file PATH can still be created: once per run, whichever
runner gets there first).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import io
import math
import os
import re
import resource
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any

import numpy as np
import trio

import sandbox
from episodes.composite import prepare_stages, run_composed
from episodes.trace import TracingSkills
from messages import DEFAULT_MAX_FRAME, DecodeError, decode, encode
from messages.base import message
from messages.causes import (
    CRASHED,
    EPISODE_DONE,
    POLICY_FINISHED,
    POLICY_UNUSABLE,
    SETUP_FAILED,
    STALLED,
    STEP_BUDGET,
    SUCCESS,
)
from messages.control import Failure
from messages.rollout import EpisodeReport, RolloutRequest, StageRun
from messages.task import Stage
from rl.artifacts import PolicyUnusable, load_policy
from rl.held_out import held_out, seed_each_episode
from rl.start_states import resolve as resolve_start_states
from runtime import events
from runtime.events import log
from sandbox import confine_memory
from worlds.crafter_world import CrafterWorld

# Frames kept for a video: 64x64 RGB, 1,000 frames is 12 MB raw, ~1 MB compressed.
MAX_FRAMES = 1000
MEMORY_LIMIT_ENV = "RLGPT_ENV_MEMORY_LIMIT"
"""Bytes of address space a runner (and its environment actor) may map."""
TORCH_THREADS_ENV = "RLGPT_TORCH_THREADS"
"""Intra-op torch threads in a runner process (default 1), the learners' knob."""
# The variables torch's thread pools (OpenMP, MKL) read when torch is first imported.
THREAD_POOL_ENVS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# A runner maps ~0.5 GiB (Python, numpy, numba, Crafter, torch when a learned stage is
# evaluated); 2 GiB leaves it room while bounding what runaway policy code can take from
# the machine. The sandbox's own guards stop big allocations first; this is the backstop.
DEFAULT_MEMORY_LIMIT = 2 * 1024**3
GRACE_ENV = "RLGPT_WATCHDOG_GRACE_S"
"""Seconds a batch may run past its budget before its runner is presumed stuck."""
# Beyond its own budget, how long a batch may run before the actor presumes the runner
# stuck in a C call: generous, since world steps also count in the budget.
DEFAULT_GRACE_S = 10.0
# The CPU limit sits this far past the wall-clock watch, so a stall is reported as
# `stalled` by the watch; SIGXCPU is the backstop should the watch not come.
CPU_MARGIN_S = 5.0
# A fresh runner imports numba, Crafter and the sandbox and builds one world: ~5 s of
# CPU, far longer on a loaded machine; past this it is presumed broken.
START_TIMEOUT_S = 180.0
# Bigger than an actor's reply may be (frames travel here too), bounded all the same.
MAX_PIPE_FRAME = 4 * DEFAULT_MAX_FRAME
FAULT_ENV = "RLGPT_FAULT_INJECT"
"""Test-only fault injection (see the module docstring); the product never sets it."""
OOM_EXIT = 71
"""The runner's exit status when host code ran out of memory (it cannot go on safely)."""
_HEADER = struct.Struct(">I")
RUNNER_MAIN = "import sys; from episodes.runner import main; sys.exit(main())"
"""How an actor starts its runner (``python -c``, argv: the run directory)."""


# ---------------------------------------------------------------------- the protocol


@message("runner.ready")
class RunnerReady:
    """runner → environment actor: warmed up, waiting for batches."""

    pid: int
    """The runner's process id."""
    achievement_names: list[str]
    """The world's achievements, in Crafter's order (the stats rows' columns)."""
    address_space_bytes: int = 0
    """Its RLIMIT_AS."""


@message("runner.batch")
class RunnerBatch:
    """environment actor → runner: run every episode of this request."""

    request: RolloutRequest
    """The rollout request, checked by the actor already."""
    cpu_s: float
    """CPU seconds the batch may use (the runner's soft RLIMIT_CPU is set from it)."""


@message("runner.begin")
class RunnerBegin:
    """runner → environment actor: an episode starts (its own budget's watch starts)."""

    seed: int
    """The episode's world seed."""


@message("runner.episode")
class RunnerEpisode:
    """runner → environment actor: one finished episode of the batch."""

    report: EpisodeReport
    """The episode's report."""
    output: str = ""
    """What the policy printed in it."""
    stats: bool = False
    """Whether the episode has a Crafter stats row (``length``, ``reward``, ``counts``)."""
    length: int = 0
    """Steps, for the stats row."""
    reward: float = 0.0
    """Summed reward, for the stats row."""
    counts: dict[str, int] = field(default_factory=dict)
    """Achievement → times it happened, for the stats row."""


@message("runner.done")
class RunnerDone:
    """runner → environment actor: the batch is over."""

    steps: int
    """World steps the batch's policies took (the result's ``steps``)."""
    frames: bytes = b""
    """The first episode's frames as an .npz, when asked for."""
    compiled: int = 0
    """Stage modules compiled for this batch."""
    compile_hits: int = 0
    """Stage modules that came from the compile cache."""
    torch_threads: int = 0
    """torch's intra-op threads, once a learned policy brought torch in (0: not loaded)."""
    rss_bytes: int = 0
    """The runner's resident memory when the batch began (0: unknown)."""
    peak_rss_bytes: int = 0
    """The most resident memory the runner held during the batch (0: unknown): what the
    batch's code made it allocate, the sandbox's memory cap included or not."""


def _status_bytes(field: str) -> int:
    """A memory figure of this process from the kernel (``VmRSS:``, ``VmHWM:``), 0 where
    it gives none."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next((int(line.split()[1]) * 1024 for line in f if line.startswith(field)), 0)
    except (OSError, ValueError, IndexError):
        return 0


def _reset_peak_rss() -> int:
    """Start a new peak of resident memory (the kernel's ``clear_refs`` 5 sets VmHWM to
    what is resident now); the resident memory now."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        pass  # no /proc: the peak is then the process's own, from its start
    return _status_bytes("VmRSS:")


def write_frame(fd: int, msg: Any) -> None:
    """Send one message on a pipe (blocking; the runner's side)."""
    body = encode(msg)
    data = memoryview(_HEADER.pack(len(body)) + body)
    while data:
        data = data[os.write(fd, data) :]


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> Any | None:
    """Read one message from a pipe (blocking); None at its end."""
    head = _read_exactly(fd, _HEADER.size)
    if head is None:
        return None
    (size,) = _HEADER.unpack(head)
    if size > MAX_PIPE_FRAME:
        raise DecodeError("oversize", f"{size} bytes > cap {MAX_PIPE_FRAME}")
    body = _read_exactly(fd, size)
    if body is None:
        return None
    return decode(body, MAX_PIPE_FRAME)


# ---------------------------------------------------------------------- process limits


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


def apply_limits() -> dict[str, int]:
    """OS limits for a process near untrusted code: an address-space cap (a
    ``MemoryError`` instead of an exhausted machine), no core dumps, one torch thread."""
    raw = os.environ.get(MEMORY_LIMIT_ENV, str(DEFAULT_MEMORY_LIMIT))
    if not raw.strip().isdigit() or int(raw) < 1:
        raise ValueError(f"{MEMORY_LIMIT_ENV}={raw!r}: set it to a number of bytes ≥ 1")
    limit = int(raw)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return {"address_space_bytes": limit, "core_bytes": 0, "torch_threads": limit_torch()}


def mapped_bytes() -> int:
    """Bytes of address space this process maps now (``VmSize``; 0 where /proc lacks it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def import_policy_libraries() -> None:
    """Import torch and stable-baselines3, which a learned policy needs, into a process
    under an address-space cap (:func:`apply_limits`), keeping the room the cap left.

    They are imported only when a learned stage is first evaluated, long after the cap
    was set. A CUDA build of torch maps gigabytes of libraries: on a GPU machine (an H100
    box, torch 2.11+cu130) the import under the 2 GiB cap failed and every learned policy
    was ``policy_unusable`` in evaluation although it trained and passed its held-out
    check in the learner. So the soft cap is lifted to the hard one for the import and
    set again to what the process maps then plus the room it had before: policy code
    gets the same backstop as without torch."""
    if "torch" in sys.modules and "stable_baselines3" in sys.modules:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        import stable_baselines3  # noqa: F401
        import torch  # noqa: F401

        return
    room = max(0, soft - mapped_bytes())
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    try:
        import stable_baselines3  # noqa: F401
        import torch  # noqa: F401
    finally:
        cap = max(soft, mapped_bytes() + room)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def grace_s() -> float:
    """The stall watch's grace (``RLGPT_WATCHDOG_GRACE_S``, default 10 s)."""
    raw = os.environ.get(GRACE_ENV, str(DEFAULT_GRACE_S))
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{GRACE_ENV}={raw!r}: set it to a number of seconds ≥ 0")
    return value


def batch_budget_s(req: RolloutRequest) -> float:
    """Wall seconds a batch may take before the grace: each episode's budget."""
    return req.wall_s * max(1, len(req.seeds))


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _limit_cpu(seconds: float) -> None:
    """Soft RLIMIT_CPU: what this process used so far plus ``seconds`` (the hard limit
    stays, so the next batch can raise the soft one again)."""
    soft = math.ceil(_cpu_used() + seconds)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def frames_npz(frames: list[np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, frames=np.stack(frames).astype(np.uint8))
    return buffer.getvalue()


# ---------------------------------------------------------------------- fault injection


@dataclasses.dataclass
class Fault:
    """A test's request to fail on purpose (see the module docstring)."""

    kind: str
    seed: int | None = None
    stage: str = ""
    once: str = ""

    @classmethod
    def from_env(cls) -> Fault | None:
        raw = os.environ.get(FAULT_ENV, "").split()
        if not raw:
            return None
        if raw[0] not in ("segv", "stall", "exit"):
            raise ValueError(f"{FAULT_ENV}={' '.join(raw)!r}: start with segv, stall or exit")
        fault = cls(raw[0])
        for word in raw[1:]:
            key, _, value = word.partition("=")
            if key == "seed" and value.lstrip("-").isdigit():
                fault.seed = int(value)
            elif key in ("stage", "once") and value:
                setattr(fault, key, value)
            else:
                raise ValueError(f"{FAULT_ENV}: {word!r} is not seed=N, stage=NAME or once=PATH")
        return fault

    def maybe_fire(self, req: RolloutRequest, index: int, seed: int) -> None:
        if (self.seed is None and index != 0) or (self.seed is not None and seed != self.seed):
            return
        if self.stage and req.subtask.name != self.stage:
            return
        if self.once:
            try:
                os.close(os.open(self.once, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                return
        if self.kind == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif self.kind == "exit":
            os._exit(3)
        else:
            # Nested quantifiers backtrack through 2**40 ways to fail: one C call in the
            # regex engine, the GIL held all along.
            re.match(r"(a+)+b", "a" * 40)


# ---------------------------------------------------------------------- the rollouts


Emit = Callable[[RunnerBegin | RunnerEpisode], None]


class Rollouts:
    """The rollouts themselves, in this process: one world, one batch at a time. The
    runner drives it; a benchmark may too (no process in between)."""

    def __init__(self, run_dir: Path | None = None, fault: Fault | None = None) -> None:
        self.world = CrafterWorld()
        self.minetest: Any = None
        """The Minetest world (and its server), started by the first request for it."""
        self.run_dir = run_dir
        self.fault = fault
        self.starts = resolve_start_states(True)
        """Composed episodes' starts (``RolloutRequest.start_at``), made once per world
        and setup in this process and restored after (:mod:`rl.start_states`)."""

    def warm(self) -> None:
        # The first reset compiles Crafter's world generator (numba): pay it now, not
        # inside the first batch's budget.
        self.world.reset(0)

    def run(self, req: RolloutRequest, emit: Emit) -> RunnerDone:
        """Run every episode of ``req``, ``emit`` each as it ends (blocking)."""
        rss = _reset_peak_rss()
        before = sandbox.compile_stats()
        if req.world != "crafter":
            self._world(req)  # refuses what that world cannot run, before any episode
        if req.policy_path or any(stage.policy_path for stage in req.stages):
            import_policy_libraries()
        if req.policy_path:
            done = self._policy(req, emit)
        elif req.stages:
            done = self._composed(req, emit)
        else:
            done = self._code(req, emit)
        after = sandbox.compile_stats()
        torch = sys.modules.get("torch")
        return dataclasses.replace(
            done,
            compiled=after.compiled - before.compiled,
            compile_hits=after.hits - before.hits,
            torch_threads=0 if torch is None else torch.get_num_threads(),
            rss_bytes=rss,
            peak_rss_bytes=_status_bytes("VmHWM:"),
        )

    def _fault(self, req: RolloutRequest, index: int, seed: int) -> None:
        if self.fault is not None:
            self.fault.maybe_fire(req, index, seed)

    def _world(self, req: RolloutRequest) -> tuple[Any, Callable[..., Any]]:
        """The request's world and the skills factory of its episodes."""
        if req.world == "crafter":
            return self.world, lambda obs, actions, s: TracingSkills(obs, actions, seed=s)
        if req.world != "minetest":
            raise ValueError(f"no world {req.world!r}: crafter or minetest")
        # Imported here: a Crafter run's runner never loads Minetest's modules.
        from worlds.minetest.skills import VoxelSkills
        from worlds.minetest.world import PLAYER_RADIUS, UNCAPPED, MinetestWorld

        if self.minetest is None:
            # The request's caps end its episodes: the world's own limit stays out of reach.
            self.minetest = MinetestWorld(radius=PLAYER_RADIUS, length=UNCAPPED)
        world = self.minetest
        return world, lambda obs, actions, s: VoxelSkills(obs, world.node_rules, world.game_rules)

    def _code(self, req: RolloutRequest, emit: Emit) -> RunnerDone:
        if req.world != "crafter":
            # One stage, composed: the same test and budgets, over the world's own skills.
            stage = Stage(req.subtask, code=req.code)
            return self._composed(dataclasses.replace(req, code="", stages=[stage]), emit)
        try:
            compiled = sandbox.compile_code(req.code, filename=f"<{req.subtask.name}>")
        except sandbox.SandboxError as err:
            f = err.failure
            for s in req.seeds:
                emit(RunnerEpisode(EpisodeReport(s, False, 0, 0.0, [], f.cause, f.detail,
                                                 f.line or 0)))  # fmt: skip
            return RunnerDone(0)
        frames: list[np.ndarray] = []
        steps = 0
        for i, seed in enumerate(req.seeds):
            emit(RunnerBegin(seed))
            self._fault(req, i, seed)
            episode = self._episode(req, compiled, seed, frames if i == 0 and req.frames else None)
            steps += episode.report.steps
            emit(episode)
        return RunnerDone(steps, frames=frames_npz(frames) if frames else b"")

    def _composed(self, req: RolloutRequest, emit: Emit) -> RunnerDone:
        world, skills_factory = self._world(req)
        # Loading SB3 zips happens here, before the first episode's budget starts.
        stages = prepare_stages(req.stages, world)
        need_stages = prepare_stages([n.stage for n in req.needs], world)
        frames: list[np.ndarray] = []
        steps = 0
        for i, seed in enumerate(req.seeds):
            emit(RunnerBegin(seed))
            self._fault(req, i, seed)
            episode = run_composed(
                world,
                stages,
                req.needs,
                req.subtask,
                seed,
                wall_s=req.wall_s,
                skills_factory=skills_factory,
                frames=frames if i == 0 and req.frames else None,
                need_stages=need_stages,
                skip_failed=req.skip_failed,
                start_at=req.start_at,
                start_states=self.starts,
            )
            report = episode.report()
            steps += report.steps + report.setup_steps
            # The stats row is the world episode: the setup too when this one made the start;
            # none for a restored start that took no step (it played nothing).
            emit(RunnerEpisode(report, episode.output, report.played,
                               episode.steps + episode.setup_steps,
                               episode.reward + episode.setup_reward,
                               dict(episode.counts)))  # fmt: skip
        return RunnerDone(steps, frames=frames_npz(frames) if frames else b"")

    def _policy(self, req: RolloutRequest, emit: Emit) -> RunnerDone:
        """A trained SB3 policy on ``req``'s worlds, through the RL interface it was
        trained with, coded actions included; each episode's detail lists the actions
        it chose. All episodes come in one call (their reports at its end)."""
        try:
            model = load_policy(
                req.policy_path, req.policy_sha256, root=self.run_dir, config=req.config
            )
        except PolicyUnusable as exc:
            for s in req.seeds:
                emit(RunnerEpisode(EpisodeReport(s, False, 0, 0.0, [], POLICY_UNUSABLE, str(exc))))
            return RunnerDone(0)
        config = dataclasses.replace(req.config, subtask=req.subtask)
        for i, seed in enumerate(req.seeds):
            self._fault(req, i, seed)
        # Each episode samples from a seed of its own (the policy's hash and the world),
        # so a world plays the same episode whichever part of a split request holds it.
        sample = int(req.policy_sha256[:15], 16) if req.policy_sha256 else 0
        _, steps, records = held_out(
            config,
            lambda obs: model.predict(obs, deterministic=False)[0],
            req.seeds,
            begin=seed_each_episode(sample),
        )
        for r in records:
            # Every world step counts: the setup's too (booked with its episode).
            steps += r["setup_steps"]
            if "skipped" in r:  # the setup died before the policy's turn
                report = EpisodeReport(r["seed"], False, 0, 0.0, [], SETUP_FAILED, r["skipped"],
                                       setup_steps=r["setup_steps"])  # fmt: skip
            else:
                cause = SUCCESS if r["success"] else EPISODE_DONE if r["died"] else STEP_BUDGET
                used = collections.Counter(r["actions"])
                detail = ", ".join(f"{name}×{n}" for name, n in used.most_common())
                report = EpisodeReport(r["seed"], r["success"], r["steps"], float(r["success"]),
                                       list(r["achievements"]), cause, detail,
                                       setup_steps=r["setup_steps"])  # fmt: skip
            emit(RunnerEpisode(report))
        return RunnerDone(steps)

    def _episode(
        self, req: RolloutRequest, compiled: Any, seed: int, frames: list[np.ndarray] | None
    ) -> RunnerEpisode:
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
        return RunnerEpisode(report, outcome.output, True, length, reward, counts)


# ---------------------------------------------------------------------- the runner process


def _die_with_parent(parent: int) -> None:
    """Exit when the actor that started this runner is gone, even mid-batch (a thread
    that polls; Linux's PR_SET_PDEATHSIG would fire when the *thread* that started us
    exits, and trio starts processes from worker threads that come and go). A runner
    stuck in a C call is not helped by it, but it is in the actor's process group,
    which the supervisor kills with the actor."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def serve(inp: int, out: int, rollouts: Rollouts) -> None:
    """Answer batches until the pipe closes (blocking)."""
    while True:
        batch = read_frame(inp)
        if batch is None:
            return
        if not isinstance(batch, RunnerBatch):
            raise SystemExit(f"runner: expected runner.batch, got {type(batch).__name__}")
        _limit_cpu(batch.cpu_s)
        try:
            done = rollouts.run(batch.request, lambda episode: write_frame(out, episode))
        except MemoryError:
            os._exit(OOM_EXIT)  # host code out of memory: no safe way on
        except Exception as exc:  # noqa: BLE001 - a bad request: its asker gets the failure
            text = "".join(traceback.format_exception(exc, limit=-4))[-2000:]
            write_frame(out, Failure("handler_error", text))
            continue
        write_frame(out, done)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    run_dir = Path(argv[0]) if argv and argv[0] else None
    _die_with_parent(os.getppid())
    limits = apply_limits()
    # This process runs policy code and nothing else: each call into it gets an
    # address-space cap of its memory budget (the 2 GiB above is the host's backstop).

    confine_memory()
    # The pipe to the actor is fd 1 as started; anything printed by a library goes to
    # stderr instead (the actor's own output), never into the protocol.
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    events.configure(console=None)  # the actor reports what happens here
    rollouts = Rollouts(run_dir, Fault.from_env())
    rollouts.warm()
    names = list(rollouts.world.achievement_names)
    write_frame(out, RunnerReady(os.getpid(), names, limits["address_space_bytes"]))
    serve(0, out, rollouts)
    # The actor closed the pipe: nothing is left to answer, and the runner writes no file
    # of its own. Exit now, without the interpreter's teardown: with torch loaded and the
    # start cache full it outlasted the actor's wait (Runner.close), which then killed it
    # (2 s at the end of every diamond run, with one core or both idle).
    sys.stderr.flush()
    os._exit(0)


# ---------------------------------------------------------------------- the actor's side


@dataclasses.dataclass
class BatchOutcome:
    """What a batch gave back: every episode (finished ones first, then those the runner
    did not finish), the done message if it came, and why it did not."""

    episodes: list[EpisodeReport]
    output: list[str]
    done: RunnerDone | None
    finished: list[RunnerEpisode] = field(default_factory=list)
    """The episodes the runner finished, as it sent them (their stats rows)."""
    fault: str = ""
    """``crashed`` or ``stalled`` when the runner failed the batch; empty otherwise."""
    detail: str = ""


class RunnerFailed(Exception):
    """The runner could not start, or answered a batch with a failure."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"{failure.reason}: {failure.detail}")
        self.failure = failure


class Runner:
    """The actor's handle on its runner process (trio): start it, hand it batches,
    watch it, replace it when it dies or stalls."""

    def __init__(self, run_dir: Path | None, nursery: trio.Nursery) -> None:
        self.run_dir = run_dir
        self.nursery = nursery
        """Where a replacement runner starts (the actor's own nursery)."""
        self.proc: trio.Process | None = None
        self.ready: RunnerReady | None = None
        self._buffer = bytearray()
        self._started = trio.Event()
        """Set once the current runner is ready (or failed to start); replaced when a
        runner is killed, so the next batch waits for its replacement."""
        self.restarts = 0

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    async def start(self) -> RunnerReady:
        """Start a runner and wait for its warm-up."""
        self._buffer = bytearray()
        self.ready = None
        spawned = trio.current_time()
        try:
            self.proc = await trio.lowlevel.open_process(
                # Not ``-m episodes.runner``: the module would then exist twice (as __main__
                # too), each copy registering the runner's message kinds.
                [sys.executable, "-c", RUNNER_MAIN, str(self.run_dir or "")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        except OSError as exc:  # no interpreter, no memory or process slots left, ...
            self.proc = None
            self._started.set()  # wait_ready() says it failed
            detail = f"the runner could not be started ({sys.executable}: {exc})"
            raise RunnerFailed(Failure("runner_failed", detail)) from None
        try:
            with trio.fail_after(START_TIMEOUT_S):
                ready = await self._receive()
        except (trio.TooSlowError, DecodeError):
            ready = None
        except BaseException:
            # Cancelled while it warms up (the actor stopping, say): it must not outlive us.
            await self.kill()
            raise
        if not isinstance(ready, RunnerReady):
            await self.kill()
            self._started.set()  # wait_ready() says it failed
            detail = f"the runner did not start ({self._death()})"
            raise RunnerFailed(Failure("runner_failed", detail))
        self.ready = ready
        self._started.set()
        log.info(
            "runner_started",
            pid=ready.pid,
            address_space_bytes=ready.address_space_bytes,
            warm_s=round(trio.current_time() - spawned, 3),
            restarts=self.restarts,
        )
        return ready

    async def wait_ready(self) -> RunnerReady:
        """The current runner once warm; if the last one failed to start, one more try
        now (its failure then fails this batch's ask)."""
        await self._started.wait()
        if self.ready is None:
            return await self.start()
        return self.ready

    def replace(self) -> None:
        """Start a replacement for a runner just killed, in the background: the next
        batch waits for it (its warm-up is not part of that batch's budget)."""
        self.restarts += 1
        self._started = trio.Event()
        self.ready = None
        self.nursery.start_soon(self._start_quietly)

    async def _start_quietly(self) -> None:
        with contextlib.suppress(RunnerFailed):  # the next batch's wait_ready says it
            await self.start()

    async def kill(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            proc.kill()
        with trio.CancelScope(shield=True):
            await proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    await stream.aclose()

    async def close(self) -> None:
        """Stop the runner: its pipe's end makes it exit; a busy one is killed."""
        proc = self.proc
        if proc is None:
            return
        with trio.CancelScope(shield=True):
            if proc.stdin is not None:
                await proc.stdin.aclose()
            with trio.move_on_after(2.0):
                await proc.wait()
            await self.kill()

    def _death(self) -> str:
        code = self.proc.returncode if self.proc is not None else None
        if code is None:
            return "still running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"{name}, signal {-code}"
        if code == OOM_EXIT:
            return f"exit status {code}: out of memory in host code"
        return f"exit status {code}"

    async def _receive(self) -> Any | None:
        """The next message from the runner; None when its pipe closed (it died)."""
        stream = self.proc.stdout
        while True:
            if len(self._buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(self._buffer)
                if size > MAX_PIPE_FRAME:
                    raise DecodeError("oversize", f"{size} bytes > cap {MAX_PIPE_FRAME}")
                end = _HEADER.size + size
                if len(self._buffer) >= end:
                    body = bytes(self._buffer[_HEADER.size : end])
                    del self._buffer[:end]
                    return decode(body, MAX_PIPE_FRAME)
            chunk = await stream.receive_some(1 << 20)
            if not chunk:
                with trio.move_on_after(5.0):
                    await self.proc.wait()
                return None
            self._buffer += chunk

    async def rollout(self, req: RolloutRequest) -> BatchOutcome:
        """Run ``req`` in the runner; a crash or a stall ends in a fresh runner starting
        and the outcome saying which. Cancelled, it kills the runner (and starts another)."""
        await self.wait_ready()
        if self.proc.returncode is not None or _zombie(self.proc.pid):
            # It died while idle (killed from outside): not this batch's doing. (Not yet
            # reaped, it is a zombie: its exit is not in returncode until someone waits.)
            self.restarts += 1
            await self.start()
        budget, grace = batch_budget_s(req), grace_s()
        episodes: list[EpisodeReport] = []
        finished_episodes: list[RunnerEpisode] = []
        output: list[str] = []
        finished = False
        try:
            batch = RunnerBatch(req, budget + grace + CPU_MARGIN_S)
            body = encode(batch)
            await self.proc.stdin.send_all(_HEADER.pack(len(body)) + body)
            fault, detail = "", ""
            batch_deadline = trio.current_time() + budget + grace
            episode_deadline = math.inf  # set while an episode runs
            while True:
                with trio.move_on_at(min(batch_deadline, episode_deadline)) as watch:
                    try:
                        msg = await self._receive()
                    except DecodeError as exc:
                        fault, detail = CRASHED, f"the runner sent a bad message ({exc})"
                        break
                if watch.cancelled_caught:
                    fault = STALLED
                    if episode_deadline < batch_deadline:
                        detail = (
                            f"ran past the episode's budget of {req.wall_s:g} s + {grace:g} s grace"
                        )
                    else:
                        detail = f"ran past the batch's budget of {budget:g} s + {grace:g} s grace"
                    break
                if msg is None:
                    fault, detail = CRASHED, f"died by {self._death()}"
                    break
                if isinstance(msg, RunnerBegin):
                    episode_deadline = trio.current_time() + req.wall_s + grace
                    continue
                if isinstance(msg, RunnerEpisode):
                    episode_deadline = math.inf
                    episodes.append(msg.report)
                    if msg.output:
                        output.append(msg.output)
                    finished_episodes.append(msg)
                    continue
                if isinstance(msg, RunnerDone):
                    finished = True
                    return BatchOutcome(episodes, output, msg, finished_episodes)
                if isinstance(msg, Failure):
                    finished = True
                    raise RunnerFailed(msg)
                fault, detail = CRASHED, f"the runner sent {type(msg).__name__} mid-batch"
                break
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            fault, detail = CRASHED, f"the runner's pipe broke ({self._death()})"
        finally:
            if not finished:
                # A crash, a stall, or the ask cancelled mid-batch: this runner cannot
                # be trusted with the next batch. Kill it and start a fresh one.
                await self.kill()
                self.replace()
        unfinished = self._unfinished(req, episodes, fault, detail)
        return BatchOutcome(episodes + unfinished, output, None, finished_episodes, fault, detail)

    @staticmethod
    def _unfinished(
        req: RolloutRequest, episodes: list[EpisodeReport], fault: str, detail: str
    ) -> list[EpisodeReport]:
        """Reports for the seeds the runner did not finish: the first was running when
        it failed, the rest never ran."""
        done = {e.seed for e in episodes}
        left = [s for s in req.seeds if s not in done]
        if not left:
            return []
        verb = "crashed" if fault == CRASHED else "stalled"
        if req.policy_path:
            at = f"in its batch of seeds {left[0]}..{left[-1]}"
        else:
            at = f"at seed {left[0]}"
        reports = []
        for i, seed in enumerate(left):
            if i == 0 or req.policy_path:
                text = f"the runner {verb} {at}: {detail}"
            else:
                text = f"not run: the version {verb} the runner {at}"
            reports.append(fault_episode(req, seed, fault, text))
        return reports


def fault_episode(req: RolloutRequest, seed: int, cause: str, detail: str) -> EpisodeReport:
    """The report of an episode a runner did not finish (``crashed`` or ``stalled``). In
    a composed policy, which stage was running is not known (the runner is gone): the
    failure is booked to the stage under test, the last, which the critic then reads as
    that stage's failure rather than as a stage never reached."""
    runs = [StageRun(req.stages[-1].subtask.name, False, 0, cause, detail)] if req.stages else []
    return EpisodeReport(seed, False, 0, 0.0, [], cause, detail, stages=runs)


if __name__ == "__main__":
    sys.exit(main())


def _zombie(pid: int) -> bool:
    """Whether process ``pid`` has exited and awaits reaping (Linux ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].startswith("Z")
