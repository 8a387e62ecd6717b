"""A learner's training envs in worker processes that outlive the job.

A learner steps its job's envs itself. In one process (SB3's ``DummyVecEnv``) that is one
core, however many envs the job has: on a 2-core machine the other core idles while the
learner trains alone, which is most of a run's training time. SB3's ``SubprocVecEnv``
steps each env in a process of its own, but starts those processes per job and ends
them with it, and with them every world start the job made (:mod:`rl.start_states`
is per process): the next version of the same sub-action would run every setup again.

:class:`EnvWorkers` keeps ``n`` worker processes for the learner's whole life. A job
gets a :class:`WorkerVecEnv` over the first ``n_envs`` of them: each worker builds that
job's env from the config's wire bytes, steps it on command, and closes it when the job
ends — and keeps its start-state cache, so later jobs on the same setup restore the
worlds it made. Env ``i`` of a job has world seed ``seed + i`` and draws its worlds from
its own share of the pool, as in one process (``make_vec_env``), and a restored start
is the same state as a made one, so a job's episodes, its counted steps (every start
made once, counted where it is made: the workers' own tallies, read through
``get_attr``) and its trained weights are the same either way.

A job may also keep all its envs in one worker (``env_workers = "off"``: one core, as
in the learner's own process), each in a slot of its own there: the learner never runs a
version's code itself, so code that crashes its process (a C stack overflow, memory) costs
that job (:class:`WorkerDied`, naming the signal), never the learner.

Errors: an exception in a worker's env is sent back and raised again in the learner
(:class:`~rl.rl_env.SetupError` with its fields), and the worker goes on serving, so
the counts of a failed job can still be read. A worker that died (killed, out of memory)
raises :class:`WorkerDied`; the pool then starts fresh workers for the next job.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import tempfile
import threading
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv

from rl.held_out import merge_checks
from rl.rl_env import _build
from sandbox import confine_memory

STOP_TIMEOUT_S = 5.0
"""How long :meth:`EnvWorkers.close` waits for a worker to end before killing it."""
DEATH_WAIT_S = 2.0
"""How long a worker whose pipe closed is waited for, to name how it ended."""


class WorkerDied(RuntimeError):
    """An environment worker process ended while the learner needed it."""


def _serve(conn: Any) -> None:
    """A worker's loop: build, step, reset, query and close one job's envs (one, or all
    of a job's when the learner keeps them in one process), each in a slot of its own."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # no torch thread pool per worker

    # A worker runs its env (and the policy code in it) and nothing beside: each call
    # into policy code may get an address-space cap of its memory budget.
    confine_memory()

    envs: dict[int, Any] = {}
    while True:
        try:
            cmd, slot, data = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return  # the learner is gone
        env = envs.get(slot)
        try:
            if cmd == "make":
                old = envs.pop(slot, None)
                if old is not None:
                    old.close()
                blob, seed, monitor, kwargs = data
                env = envs[slot] = _build(blob, seed, monitor, kwargs)
                result: Any = (env.observation_space, env.action_space)
            elif cmd == "step":
                result = step_and_reset(env, data)
            elif cmd == "reset":
                seed, options = data
                result = env.reset(seed=seed, **({"options": options} if options else {}))
            elif cmd == "get_attr":
                result = env.get_wrapper_attr(data)
            elif cmd == "set_attr":
                result = setattr(env, data[0], data[1])
            elif cmd == "env_method":
                name, args, kwargs = data
                result = env.get_wrapper_attr(name)(*args, **kwargs)
            elif cmd == "is_wrapped":
                from stable_baselines3.common.env_util import is_wrapped

                result = is_wrapped(env, data)
            elif cmd == "held_out":
                from rl.held_out import play_learned

                result = play_learned(*data)
            elif cmd == "release":
                while envs:
                    envs.popitem()[1].close()
                result = None
            elif cmd == "stop":
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown command {cmd!r}")
        except Exception as exc:  # noqa: BLE001 - sent back and raised in the learner
            conn.send(("error", _portable(exc)))
            continue
        try:
            conn.send(("ok", result))
        except (EOFError, OSError):
            return  # the learner is gone
        except Exception as exc:  # noqa: BLE001 - an answer that cannot be pickled
            conn.send(("error", _portable(exc)))


def step_and_reset(env: Any, action: Any) -> tuple[Any, float, bool, dict, dict]:
    """One env's step as SB3's vector envs take it: ``(obs, reward, done, info,
    reset_info)``, the env reset at an episode's end (the last observation in
    ``info["terminal_observation"]``, a step-cap cut in ``info["TimeLimit.truncated"]``)."""
    obs, reward, terminated, truncated, info = env.step(action)
    done = terminated or truncated
    info["TimeLimit.truncated"] = truncated and not terminated
    reset_info: dict = {}
    if done:
        info["terminal_observation"] = obs
        obs, reset_info = env.reset()
    return obs, reward, done, info, reset_info


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError carrying its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any exception that does not round-trip
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return RuntimeError(f"in an environment worker: {text}")


class _Worker:
    def __init__(self, ctx: Any) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.pending = 0
        """Commands sent and not yet answered (an error midway can leave some)."""

    def send(self, cmd: str, data: Any = None, slot: int = 0) -> None:
        try:
            self.conn.send((cmd, slot, data))
        except (BrokenPipeError, EOFError, OSError) as exc:
            raise WorkerDied(f"environment worker {self.process.pid} is gone: {exc}") from None
        self.pending += 1

    def receive(self) -> Any:
        try:
            status, value = self.conn.recv()
        except (EOFError, OSError):
            raise WorkerDied(f"environment worker {self.process.pid} {self.death()}") from None
        self.pending -= 1
        if status == "error":
            raise value
        return value

    def drain(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """Read and drop the answers still owed (so the next command reads its own);
        False when the worker is gone or does not answer in time."""
        while self.pending > 0:
            if self.conn.closed:
                return False
            try:
                if not self.conn.poll(timeout):
                    return False
                self.receive()
            except (WorkerDied, OSError, EOFError):
                return False
            except Exception:  # noqa: BLE001 - an owed answer that was an error: dropped
                pass
        return not self.conn.closed and self.alive()

    def alive(self) -> bool:
        return self.process.is_alive()

    def death(self) -> str:
        """How the process ended, as a cause: the signal that killed it (a segfault of
        policy code's C call, the kernel's OOM killer) or its exit status."""
        self.process.join(DEATH_WAIT_S)  # its pipe closed as it died: reaped in a moment
        code = self.process.exitcode
        if code is None:
            return "stopped answering (its pipe closed)"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with status {code}"

    def stop(self) -> None:
        """End the worker: asked to when it owes no answer, else (or when it does not
        go) killed. Only the thread that owns the worker may call this."""
        try:
            if self.drain():
                self.send("stop")
                if self.conn.poll(STOP_TIMEOUT_S):
                    self.receive()
        except (WorkerDied, EOFError, OSError):
            pass
        self.kill()

    def kill(self) -> None:
        """End the process now, without reading its pipe (another thread may be)."""
        if self.process.is_alive():
            self.process.join(0 if self.conn.closed else 0.5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(STOP_TIMEOUT_S)
        self.pending = 0
        self.conn.close()


def _context(start_method: str | None) -> Any:
    if start_method is None:
        methods = multiprocessing.get_all_start_methods()
        # A fresh interpreter, not a fork of the learner (threads, sockets, torch).
        start_method = "forkserver" if "forkserver" in methods else "spawn"
        if start_method == "forkserver" and not _forkserver_path_fits():
            start_method = "spawn"
    return multiprocessing.get_context(start_method)


UNIX_PATH_MAX = 107
"""The longest socket path Linux binds (``sun_path`` less its terminating zero)."""


def _forkserver_path_fits() -> bool:
    """Whether the forkserver's socket fits: it lives in a folder made under the temporary
    folder (``<tmp>/pymp-XXXXXXXX/listener-XXXXXXXX``), and a learner whose TMPDIR is deep
    (a machine's own scratch disk) would fail to start any worker; spawn needs no socket."""

    return len(tempfile.gettempdir()) + len("/pymp-xxxxxxxx/listener-xxxxxxxx") <= UNIX_PATH_MAX


class EnvWorkers:
    """Worker processes for a learner's training envs, started on first need and kept
    until :meth:`close` (see the module's doc). Thread-safe: each job's vector env holds
    its workers alone until it is closed (a job still ending in another thread keeps
    its own; the next job gets others, started if need be)."""

    def __init__(self, start_method: str | None = None) -> None:
        self._ctx = _context(start_method)
        self._workers: list[_Worker] = []
        self._busy: set[int] = set()
        self._lock = threading.Lock()
        self.started = 0
        """Worker processes started in all (restarts included)."""

    def __len__(self) -> int:
        return len(self._workers)

    def pids(self) -> list[int]:
        """The workers' process ids."""
        return [w.process.pid for w in self._workers]

    def _take(self, n: int) -> list[_Worker]:
        with self._lock:
            dead = [w for w in self._workers if not w.alive() and id(w) not in self._busy]
            for w in dead:  # died between jobs: its cache went with it
                self._workers.remove(w)
                w.stop()
            taken = [w for w in self._workers if id(w) not in self._busy][:n]
            while len(taken) < n:
                w = _Worker(self._ctx)
                self._workers.append(w)
                self.started += 1
                taken.append(w)
            self._busy.update(id(w) for w in taken)
            return taken

    def _give_back(self, workers: Sequence[_Worker]) -> None:
        """Workers a job is done with: back to the pool when they are alive and owe no
        answer, else ended (a later job starts fresh ones)."""
        broken = [w for w in workers if not w.drain()]
        with self._lock:
            for w in workers:
                self._busy.discard(id(w))
            for w in broken:
                if w in self._workers:
                    self._workers.remove(w)
        for w in broken:
            w.stop()

    def vec_env(
        self,
        blob: bytes,
        n_envs: int,
        seed: int,
        *,
        monitor: bool = True,
        world_pools: Sequence[Sequence[int]] | None = None,
        processes: int | None = None,
        **kwargs: Any,
    ) -> WorkerVecEnv:
        """A vector env of ``n_envs`` envs of the encoded config ``blob`` (env ``i`` with
        world seed ``seed + i``), each in a worker of its own, or all in ``processes``
        workers (1: the job steps on one core, as in the learner's own process, while
        its policy code runs outside the learner). Close it when the job ends: that
        closes the envs and frees the workers, which go on living."""
        if n_envs < 1:
            raise ValueError(f"n_envs must be at least 1, not {n_envs}")
        processes = n_envs if processes is None else max(1, min(processes, n_envs))
        taken = self._take(processes)
        workers = [taken[i % processes] for i in range(n_envs)]
        per_env = [
            {**kwargs, "world_pool": tuple(world_pools[i])} if world_pools else kwargs
            for i in range(n_envs)
        ]
        try:
            return WorkerVecEnv(workers, blob, seed, monitor, per_env, self._give_back)
        except BaseException:
            self._give_back(taken)
            raise

    def held_out(
        self, blob: bytes, policy_path: str, seeds: Sequence[int], sample_seed: int
    ) -> dict:
        """The held-out check of the policy at ``policy_path`` on ``seeds`` in one worker
        (:func:`rl.held_out.play_learned`; a fresh one when none is free): for a check
        whose job's workers died under it. Raises :class:`WorkerDied` if this one dies too."""
        from rl.held_out import merge_checks

        (worker,) = self._take(1)
        try:
            worker.send("held_out", (blob, policy_path, list(seeds), sample_seed))
            return merge_checks(seeds, [worker.receive()])
        finally:
            self._give_back([worker])

    def close(self) -> None:
        """End every worker (their envs and caches with them). A worker a job still uses
        is killed without touching its pipe (the job's thread reads it): the job then
        fails with :class:`WorkerDied`."""
        with self._lock:
            workers, self._workers = self._workers, []
            busy, self._busy = self._busy, set()
        for w in workers:
            if id(w) in busy:
                w.process.kill()
                w.process.join(STOP_TIMEOUT_S)
            else:
                w.stop()


def _vec_env_base() -> type:
    return VecEnv


class WorkerVecEnv(_vec_env_base()):  # type: ignore[misc]
    """SB3's vector-env interface over :class:`EnvWorkers`' processes: env ``i`` in
    ``workers[i]``, one env each or several in one (each in a slot of its own there).
    A worker answers in the order it was asked, so the envs' answers are read in
    env order, whichever workers they share."""

    def __init__(
        self,
        workers: Sequence[_Worker],
        blob: bytes,
        seed: int,
        monitor: bool,
        kwargs: Sequence[dict[str, Any]],
        give_back: Callable[[Sequence[_Worker]], None],
    ) -> None:
        self._envs = list(workers)
        """Env index → its worker."""
        self._slots: list[int] = []
        """Env index → its slot in its worker."""
        for i, w in enumerate(self._envs):
            self._slots.append(sum(other is w for other in self._envs[:i]))
        self._workers = list({id(w): w for w in self._envs}.values())
        """The distinct workers, in the order of their first env."""
        self._give_back = give_back
        self._blob = blob
        self._closed = False
        for i, w in enumerate(self._envs):
            w.send("make", (blob, seed + i, monitor, kwargs[i]), self._slots[i])
        spaces = self._gather(self._envs)
        super().__init__(len(self._envs), spaces[0][0], spaces[0][1])

    @property
    def shared(self) -> bool:
        """Whether some worker holds more than one of the envs."""
        return len(self._workers) < len(self._envs)

    def _targets(self, indices: Any) -> list[int]:
        return list(self._get_indices(indices))

    def _send(self, indices: Sequence[int], cmd: str, data: Any = None) -> list[_Worker]:
        """Send ``cmd`` to the envs ``indices``; their workers, in that order (to gather)."""
        for i in indices:
            self._envs[i].send(cmd, data, self._slots[i])
        return [self._envs[i] for i in indices]

    def step_async(self, actions: np.ndarray) -> None:
        for i, action in enumerate(actions):
            self._envs[i].send("step", action, self._slots[i])

    def step_wait(self) -> Any:
        results = self._gather(self._envs)
        obs, rewards, dones, infos, self.reset_infos = zip(*results, strict=True)
        return (
            _stack(obs, self.observation_space),
            np.asarray(rewards, dtype=np.float32),  # as DummyVecEnv's buffer holds them
            np.asarray(dones, dtype=bool),
            list(infos),
        )

    def step_one(self, index: int, action: Any) -> None:
        """Ask env ``index`` alone for a step (:mod:`rl.per_env`); its answer comes
        from :meth:`next_answer` (or, when workers are shared, :meth:`answer_of`)."""
        self._envs[index].send("step", action, self._slots[index])

    def answer_of(self, index: int) -> Any:
        """The answer to the step env ``index`` was asked last (read in the order asked
        when envs share a worker)."""
        return self._envs[index].receive()

    def next_answer(self, indices: Sequence[int]) -> tuple[int, Any]:
        """The first answer to come back from the envs ``indices`` (each asked for one
        step by :meth:`step_one`): ``(index, (obs, reward, done, info, reset_info))``,
        the lowest index of those ready. An error is raised once the others asked
        have answered too (no answer is left in a pipe for the next command)."""
        conns = {id(self._envs[i].conn): i for i in indices}
        ready = wait([self._envs[i].conn for i in indices])
        index = min(conns[id(c)] for c in ready)
        try:
            return index, self._envs[index].receive()
        except WorkerDied:
            raise
        except Exception:
            try:
                self._gather([self._envs[i] for i in indices if i != index])
            except Exception:  # noqa: BLE001 - the first error is the one raised
                pass
            raise

    def held_out(self, policy_path: str, seeds: Sequence[int], sample_seed: int) -> dict:
        """The held-out check of the policy at ``policy_path`` on ``seeds``, played in
        this job's workers at once (worker ``i`` plays ``seeds[i::n]``, fresh envs of
        the job's config beside its training env; see :func:`rl.held_out.play_learned`),
        merged into one result (:func:`rl.held_out.merge_checks`). A world's start is
        made by the worker that plays it and restored there in later jobs, while the
        same workers serve at the same places (a worker started in place of a dead one,
        or a job with another number of envs, makes them again: counted again)."""
        n = len(self._workers)
        asked = [(w, list(seeds[i::n])) for i, w in enumerate(self._workers) if seeds[i::n]]
        for w, part in asked:
            w.send("held_out", (self._blob, policy_path, part, sample_seed))
        return merge_checks(seeds, self._gather([w for w, _ in asked]))

    def reset(self) -> Any:
        for i, w in enumerate(self._envs):
            w.send("reset", (self._seeds[i], self._options[i]), self._slots[i])
        results = self._gather(self._envs)
        obs, self.reset_infos = zip(*results, strict=True)
        self._reset_seeds()
        self._reset_options()
        return _stack(obs, self.observation_space)

    def _gather(self, workers: Sequence[_Worker]) -> list[Any]:
        """Every worker's answer, in order; the first error raised after all answered
        (so no answer is left in a pipe for the next command to read)."""
        answers, error = [], None
        for w in workers:
            try:
                answers.append(w.receive())
            except WorkerDied:
                raise
            except Exception as exc:  # noqa: BLE001 - raised once all have answered
                error = error or exc
                answers.append(None)
        if error is not None:
            raise error
        return answers

    def close(self) -> None:
        """Close the job's envs; the workers go back to the pool, alive."""
        if self._closed:
            return
        self._closed = True
        try:
            for w in self._workers:
                if w.drain():  # answers an error left owed first
                    try:
                        w.send("release")
                    except WorkerDied:
                        pass
            # (_give_back reads the release answers: it drains every worker.)
        finally:
            self._give_back(self._workers)

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return self._gather(self._send(self._targets(indices), "get_attr", attr_name))

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        self._gather(self._send(self._targets(indices), "set_attr", (attr_name, value)))

    def env_method(
        self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any
    ) -> list[Any]:
        call = (method_name, method_args, method_kwargs)
        return self._gather(self._send(self._targets(indices), "env_method", call))

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return self._gather(self._send(self._targets(indices), "is_wrapped", wrapper_class))

    def get_images(self) -> list[Any]:
        raise NotImplementedError("training envs in workers are not rendered")


def _stack(obs: Sequence[Any], space: Any) -> Any:
    """Stack per-env observations as SB3 does: arrays, or dicts/tuples of arrays."""
    if isinstance(space, spaces.Dict):
        return {k: np.stack([o[k] for o in obs]) for k in space.spaces}
    if isinstance(space, spaces.Tuple):
        return tuple(np.stack([o[i] for o in obs]) for i in range(len(space.spaces)))
    return np.stack(obs)
