"""The head process: broker, supervisor and the run's driver under one trio nursery.

``run_head`` lays out ``runs/<run-id>/``, binds the broker (an ipc socket file for local
actors, in a folder only this user may enter; ``inproc`` for in-process ones; and
optionally a tcp endpoint for attached actors, which always demands CURVE: with keys made
for the run in ``RUN_DIR/keys`` when it is loopback and ``keys_dir`` is unset), starts the
configured actor processes, runs the *driver* — the coroutine that
does the run's actual work through an in-process client actor — and then shuts every
actor down. Ctrl-C or SIGTERM at any point stops everything the same way and the
run's exit status says it did not finish. With a tcp endpoint, the head re-reads the
authorized client keys every heartbeat interval and disconnects actors whose key was
revoked (``runtime.security``, ``Broker.check_keys``); every actor must run the head's
source tree (``runtime.provenance``) unless attached with ``--allow-version-mismatch``.
A head killed with SIGKILL cannot remove its socket file: the next head to start
removes it (:func:`claim_ipc_path`).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import secrets
import signal
import socket
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import trio
import zmq

from messages import Envelope
from messages.train import TrainProgress
from runtime import events, provenance
from runtime.actor import Actor, RemoteFailure, handles, wire_cap
from runtime.artifacts import ArtifactServer
from runtime.broker import Broker, BrokerSettings
from runtime.config import ConfigError, RuntimeSettings, Settings, resolve_counts
from runtime.cpu import usable_cores
from runtime.events import log
from runtime.forward import FINAL_WAIT_S
from runtime.security import RUN_KEYS, Authenticator, CurveServer, is_loopback, run_keys
from runtime.supervisor import ChildSpec, RestartIntensityExceeded, Supervisor, actor_argv

# Exit statuses of ``python run.py``: 0 finished; these otherwise.
EXIT_FAILED = 1
EXIT_CONFIG = 2
CONSOLE_ENV = "RLGPT_CONSOLE_LEVEL"
"""Environment variable carrying the console verbosity to actor processes."""
# How long the head waits for its configured actors to register before giving up: a
# cold actor process imports torch and crafter, which takes a few seconds on 2 cores.
REGISTER_TIMEOUT_S = 120.0


class Client(Actor):
    """The head's own in-process actor: the driver sends work through it, and the
    progress that workers report back lands here."""

    role = "head"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.progress: dict[str, TrainProgress] = {}
        """Latest training progress per job name."""

    @handles(TrainProgress)
    def on_progress(self, msg: TrainProgress, env: Envelope) -> None:
        self.progress[msg.name] = msg
        log_progress(msg, env)


def log_progress(msg: TrainProgress, env: Envelope) -> None:
    """The ``training_progress`` event, for whichever actor asked for the training."""
    log.info(
        "training_progress",
        job=msg.name,
        learner=env.frm,
        steps=msg.steps,
        steps_per_s=msg.steps_per_s,
        success_rate=round(msg.success_rate, 3),
    )


@dataclass
class Head:
    """What a driver gets: the client to send work with, and the run's places."""

    client: Client
    broker: Broker
    settings: Settings
    run_dir: Path
    run_id: str
    endpoint: str
    """The ipc endpoint local actors use."""
    listen: str
    """The tcp endpoint attached actors use, or ''."""
    start_local: Callable[[Actor], Awaitable[None]]
    """Start an actor inside the head process (as trio tasks, over ``inproc``); returns
    once it is registered. I/O-bound actors (the agents) live here."""
    keys_dir: Path | None = None
    """The CURVE keys the ``listen`` endpoint demands (``[runtime] keys_dir``, or the
    run's own in ``RUN_DIR/keys`` when listen is loopback and none is set); None without
    listen."""

    async def wait_for(self, role: str, count: int, timeout: float = REGISTER_TIMEOUT_S) -> None:
        """Wait until ``count`` actors of ``role`` are registered (or fail clearly)."""
        with trio.move_on_after(timeout):
            await self.broker.wait_for_actors(role, count)
            return
        have = len(self.broker.roles.get(role, ()))
        raise RuntimeError(
            f"only {have} of {count} {role} actors registered within {timeout:g} s; "
            "see actor_process_exited events in events.jsonl"
        )


Driver = Callable[[Head], Awaitable[dict]]


IPC_PATH_MAX = 107
"""Longest ipc socket path: ``sun_path`` is 108 bytes on Linux, with its NUL (ZeroMQ
refuses a longer one with a bare 'File name too long')."""


def ipc_path(run_id: str) -> Path:
    """The socket file local actors reach the head's broker by, in a folder of this
    user's that no one else may enter (:func:`private_ipc_dir`): the loopback socket has
    no authentication, so who can reach it is who can list and open that folder."""
    return Path(tempfile.gettempdir()) / f"rlgpt-{os.getuid()}" / f"{run_id}.ipc"


IPC_DIR_MODE = 0o700
"""Owner only: another local user cannot connect to a socket in a folder it cannot enter."""


def private_ipc_dir(path: Path) -> None:
    """Make the folder of ipc socket ``path`` (mode 0700), or check one already there is
    this user's own and closed to others; raises :class:`ConfigError` naming TMPDIR."""
    folder = path.parent
    folder.mkdir(mode=IPC_DIR_MODE, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ConfigError(
            str(folder), "", "a socket folder owned by this user",
            f"{str(folder)!r} is a link or belongs to uid {st.st_uid}",
            "remove it, or set TMPDIR to a folder of your own",
        )  # fmt: skip
    if stat.S_IMODE(st.st_mode) != IPC_DIR_MODE:
        os.chmod(folder, IPC_DIR_MODE)


STALE_SOCKET_AGE_S = 1.0
"""A socket file nobody listens on is removed only when at least this old: ZeroMQ makes
the file (bind) a moment before it listens, and another head starting then must not take
it for a leftover."""
PROBE_TIMEOUT_S = 1.0
"""How long a connect to a socket file may take before it counts as alive (a live
head's backlog may be full; a dead one refuses at once)."""


def socket_state(path: Path) -> str:
    """``live`` (a process listens on it), ``stale`` (a socket file of ours that nobody
    listens on: its head died without removing it), ``gone``, or ``foreign`` (not a
    socket, or another user's: never touched)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "gone"
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        return "foreign"
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT_S)
    try:
        probe.connect(str(path))
    except ConnectionRefusedError:
        return "stale"
    except FileNotFoundError:
        return "gone"
    except OSError:
        return "live"  # a timeout or a full backlog: someone is there
    finally:
        probe.close()
    return "live"


def claim_ipc_path(path: Path) -> None:
    """Make ``path`` free for this head's socket: remove the socket files in its folder
    that heads killed with SIGKILL left behind (nobody listens on them), and refuse —
    rather than steal — a path a live head still serves (ZeroMQ would unlink it and bind
    anew, cutting that head off from new actors)."""
    now = time.time()
    for other in sorted(path.parent.glob("*.ipc")):
        state = socket_state(other)
        if other == path and state == "live":
            raise RuntimeError(
                f"another head serves this run: its socket {other} answers; stop that head"
                " (or wait for it to finish) before resuming the run"
            )
        if state != "stale":
            continue
        try:
            age = now - os.lstat(other).st_mtime
        except FileNotFoundError:
            continue
        if other == path or age >= STALE_SOCKET_AGE_S:
            other.unlink(missing_ok=True)
            log.info("stale_socket_removed", path=str(other), age_s=round(age, 1))


RUN_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
"""What a run id given on the command line (``--run-id``) may hold: it names a folder
and the head's socket file, so no path separators, spaces or shell characters."""


def check_run_id(run_id: str) -> str:
    """``run_id`` when it can name a run folder; ValueError saying what is wrong."""
    bad = sorted(set(run_id) - RUN_ID_CHARS)
    if not run_id or bad or run_id.startswith((".", "-")):
        why = f"it holds {''.join(bad)!r}" if bad else "it is empty or starts with . or -"
        raise ValueError(
            f"--run-id {run_id!r} cannot name a run folder ({why}): use letters, digits, "
            "'.', '_' and '-', starting with a letter or digit"
        )
    return run_id


def new_run_dir(settings: Settings, run_id: str = "") -> tuple[str, Path]:
    """Make ``<runs_dir>/<name>-<timestamp>`` (or ``<runs_dir>/<run_id>`` when the caller
    fixes the id: ``run.py --run-id``); raises :class:`ConfigError` (status 2) naming
    ``[run] runs_dir`` or ``[run] name`` when the run could not live there."""
    if not run_id:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        run_id = f"{settings.run.name}-{stamp}-{secrets.token_hex(2)}"
    _check_ipc_path(settings.source, run_id)
    run_dir = Path(settings.run.runs_dir) / run_id
    try:
        run_dir.mkdir(parents=True)
    except OSError as exc:
        raise ConfigError(
            settings.source, "run.runs_dir", "a folder this user can create run folders in",
            f"{settings.run.runs_dir!r} ({exc.strerror or exc})",
            "set runs_dir to a writable folder (it is made if missing), e.g. runs_dir = \"runs\"",
        ) from None  # fmt: skip
    check_run_dir(run_dir, settings.source, "run.runs_dir")
    return run_id, run_dir


def check_run_dir(run_dir: Path, file: str = "", key: str = "") -> None:
    """Raise :class:`ConfigError` unless files can be made in ``run_dir`` and the run's
    ipc socket path fits: checked before the head writes anything there (a resumed run's
    folder may have been made read-only or moved since)."""
    probe = run_dir / f".write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(
            file or str(run_dir), key, "a run folder this user can write",
            f"{str(run_dir)!r} ({exc.strerror or exc})",
            "make it writable (chmod u+w, or a read-write mount), or use another folder",
        ) from None  # fmt: skip
    log_file = run_dir / "events.jsonl"
    if log_file.exists() and not log_file.is_file():
        # A folder, a device (a link to /dev/full) or a pipe: events would fail or vanish.
        raise ConfigError(
            file or str(run_dir), key, "a run folder whose events.jsonl is a plain file",
            f"{str(log_file)!r}: {_kind_of(log_file)}",
            "move it aside (the run writes a new events.jsonl), or use another folder",
        )  # fmt: skip
    _check_ipc_path(file or str(run_dir), run_dir.name)


def _kind_of(path: Path) -> str:
    """What a path that is not a plain file is, in words."""
    if path.is_dir():
        return "a folder"
    if path.is_char_device() or path.is_block_device():
        return "a device" + (f" (a link to {os.path.realpath(path)})" if path.is_symlink() else "")
    if path.is_fifo():
        return "a pipe"
    return "not a plain file"


def _check_ipc_path(file: str, run_id: str) -> None:
    path = str(ipc_path(run_id))
    if len(path.encode()) > IPC_PATH_MAX:
        raise ConfigError(
            file, "run.name", f"a socket path of at most {IPC_PATH_MAX} bytes",
            f"{path!r} ({len(path.encode())} bytes)",
            "shorten [run] name, or set TMPDIR to a shorter folder",
        )  # fmt: skip


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)  # never leave a half-written file behind


# How often the broker's state (jobs in flight per actor) goes to a console view that
# shows it: a live panel redraws a few times a second; once a second reads as live.
STATUS_INTERVAL_S = 1.0


def _choose_actor_counts(settings: Settings) -> None:
    """Replace each ``count = "auto"`` in ``settings.actors`` by the number the cores this
    process may use give (:func:`runtime.config.auto_count`), and log what was chosen and
    why (``actor_counts``). Before ``config.json`` is written: it records the numbers."""
    cores, source = usable_cores()
    settings.actors, rule = resolve_counts(settings.actors, cores)
    log.info(
        "actor_counts",
        cores=cores,
        cores_source=source,
        counts={role: a.count for role, a in settings.actors.items()},
        rule=rule,
    )


async def run_head(
    settings: Settings,
    run_dir: Path,
    run_id: str,
    driver: Driver,
    console_level: str = "info",
    view: events.View | None = None,
) -> int:
    """Run one head to completion; returns the process exit status. ``view`` is what the
    console shows (default: every event as a line)."""
    events.configure(
        events_file=run_dir / "events.jsonl", run=run_id, console_level=console_level, view=view
    )
    os.environ[CONSOLE_ENV] = console_level  # actor processes inherit the head's verbosity
    events.bind(actor="head", role="head")
    _choose_actor_counts(settings)
    rt = settings.runtime
    ctx = zmq.Context()
    ipc_file = ipc_path(run_id)
    endpoint = f"ipc://{ipc_file}"
    inproc = f"inproc://broker-{run_id}"
    sock = _router_socket(ctx, rt.max_frame_bytes)
    status = {"code": EXIT_FAILED, "why": "did not finish"}
    reserve = run_dir / RESERVE_FILE
    bound_ipc = False
    try:
        _reserve_space(reserve)
        _write_json(run_dir / "config.json", {"source": settings.source, **asdict(settings)})
        keys_dir = _keys_dir(rt.listen, rt.keys_dir, run_dir)
        curve = CurveServer.load(keys_dir) if keys_dir is not None else None
        auth = Authenticator(ctx, curve, poll_s=rt.heartbeat_interval)
        sock.bind(inproc)
        private_ipc_dir(ipc_file)
        claim_ipc_path(ipc_file)
        sock.bind(endpoint)
        bound_ipc = True
        listen = _bind_listen(sock, rt.listen, curve, auth)
        _write_json(
            run_dir / "endpoint.json",
            {
                "ipc": endpoint,
                "listen": listen,
                "curve": curve is not None,
                "keys": str(keys_dir) if listen and keys_dir is not None else "",
                "pid": os.getpid(),
            },
        )
        broker = _broker(
            rt, run_id, sock, curve.keys.allows if curve is not None and listen else None
        )
        auth.on_keys_changed = broker.check_keys
        supervisor = Supervisor(
            limit=rt.restart_limit,
            window=rt.restart_window,
            grace=rt.shutdown_grace,
            on_exit=broker.actor_exited,
        )
        broker.settings.on_lost = supervisor.kill
        log.info("run_started", run_dir=str(run_dir), endpoint=endpoint, listen=listen)
        wiring = _Wiring(settings, run_dir, run_id, ctx, inproc, endpoint, listen, broker)
        await _serve(wiring, driver, auth, supervisor, view, status, keys_dir)
        reserve.unlink(missing_ok=True)
    except Exception as exc:
        _record_failure(exc, run_dir, reserve, status)
    finally:
        if status["code"] != 0:
            reserve.unlink(missing_ok=True)  # whatever ended the run, nothing is left
        ctx.destroy(linger=0)
        if bound_ipc:  # never another live head's socket (claim_ipc_path refused it)
            ipc_file.unlink(missing_ok=True)
        if status["code"] != 0:
            log.error("run_stopped", status=status["code"], why=status["why"])
        events.close()
    return int(status["code"])


def _router_socket(ctx: zmq.Context, max_frame_bytes: int) -> zmq.Socket:
    """The broker's ROUTER socket, unbound: it refuses unroutable sends, drops what is
    queued on close, and holds a deep queue each way (a burst of progress messages must
    not block the head)."""
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 100_000)
    sock.setsockopt(zmq.RCVHWM, 100_000)
    sock.setsockopt(zmq.MAXMSGSIZE, wire_cap(max_frame_bytes))
    return sock


def _keys_dir(listen: str, keys_dir: str, run_dir: Path) -> Path | None:
    """The CURVE keys the head's tcp endpoint demands: ``[runtime] keys_dir``, or keys
    made for this run when it listens on loopback without one (None: no tcp endpoint)."""
    if keys_dir:
        return Path(keys_dir)
    if not listen:
        return None
    if not is_loopback(listen):
        raise RuntimeError(f"{listen} is not loopback and no keys_dir is set")
    # Loopback tcp is open to every local user: it demands CURVE as a remote
    # endpoint does, with keys made for this run (RUN_DIR/keys, owner only).
    made = run_dir / RUN_KEYS
    run_keys(made)
    return made


def _bind_listen(
    sock: zmq.Socket, listen: str, curve: CurveServer | None, auth: Authenticator
) -> str:
    """Bind the tcp endpoint ``[runtime] listen`` under CURVE; the endpoint bound (its
    port chosen when ``listen`` ends in ``:0``), or "" when the head does not listen."""
    if not listen:
        return ""
    # CURVE applies to binds made after it is set: local ipc/inproc stay plain
    # (the ipc file's folder admits only this user; inproc is this process).
    assert curve is not None
    curve.apply(sock)
    auth.watch(sock)
    sock.bind(listen.replace(":0", ":*") if listen.endswith(":0") else listen)
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


def _broker(
    rt: RuntimeSettings, run_id: str, sock: zmq.Socket, key_allowed: Callable[[str], bool] | None
) -> Broker:
    """The run's broker on ``sock``, with the runtime settings it enforces."""
    return Broker(
        BrokerSettings(
            heartbeat_interval=rt.heartbeat_interval,
            heartbeat_timeout=rt.heartbeat_timeout,
            max_job_tries=rt.max_job_tries,
            bad_reply_limit=rt.bad_reply_limit,
            max_frame_bytes=rt.max_frame_bytes,
            run_id=run_id,
            key_allowed=key_allowed,
            provenance=provenance.current(),
            remote_events_per_s=rt.remote_events_per_s,
        ),
        sock,
    )


@dataclass(frozen=True)
class _Wiring:
    """What the head's tasks share once the broker is bound."""

    settings: Settings
    run_dir: Path
    run_id: str
    ctx: zmq.Context
    inproc: str
    """The broker's in-process endpoint (the head's own client and actors)."""
    endpoint: str
    """The ipc endpoint actor processes connect to."""
    listen: str
    """The tcp endpoint bound for attached actors, "" if none."""
    broker: Broker


async def _serve(
    w: _Wiring,
    driver: Driver,
    auth: Authenticator,
    supervisor: Supervisor,
    view: events.View | None,
    status: dict[str, Any],
    keys_dir: Path | None,
) -> None:
    """Serve the run: the broker, the head's client and artifact server, the actor
    processes; drive the method to its end, then stop everything in order."""
    rt = w.settings.runtime
    broker = w.broker
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_signals, nursery.cancel_scope, status)
        nursery.start_soon(auth.run)
        await nursery.start(broker.serve)
        if view is not None and view.wants_status:
            nursery.start_soon(_report_status, broker)
        client = Client(max_frame_bytes=rt.max_frame_bytes, name="head")
        await nursery.start(
            functools.partial(
                client.run, w.inproc, context=w.ctx, routing_id=broker.local_identity()
            )
        )
        # The run's files by sha256, for workers on any machine (runtime/artifacts.py).
        artifacts = ArtifactServer(run_dir=w.run_dir, max_frame_bytes=rt.max_frame_bytes)
        await nursery.start(
            functools.partial(
                artifacts.run, w.inproc, context=w.ctx, routing_id=broker.local_identity()
            )
        )
        children_done = trio.Event()
        nursery.start_soon(_supervise_all, w, supervisor, children_done)

        async def start_local(actor: Actor) -> None:
            run = functools.partial(
                actor.run, w.inproc, context=w.ctx, routing_id=broker.local_identity()
            )
            await nursery.start(run)

        head = Head(
            client, broker, w.settings, w.run_dir, w.run_id, w.endpoint, w.listen,
            start_local, keys_dir if w.listen else None,
        )  # fmt: skip
        started = time.monotonic()
        report = await driver(head)
        report.setdefault("wall_s", round(time.monotonic() - started, 3))
        report.setdefault("restarts", supervisor.restart_count)
        _write_json(w.run_dir / "report.json", report)
        log.info("run_finished", **{k: v for k, v in report.items() if _scalar(v)})
        status.update(code=0, why="finished")
        # Ask actors to leave on their own first, then stop what remains.
        supervisor.stopping = True
        broker.shutdown_all("run_finished")
        await broker.sock.flush()
        with trio.move_on_after(rt.shutdown_grace):
            # Attached actors' last events (sent as they stop) go into the file too.
            await broker.wait_for_last_events(min(FINAL_WAIT_S, rt.shutdown_grace))
            await children_done.wait()
        nursery.cancel_scope.cancel()


async def _supervise_all(w: _Wiring, supervisor: Supervisor, done: trio.Event) -> None:
    """Start and watch every configured actor process; ``done`` is set once all ended."""
    rt = w.settings.runtime
    try:
        async with trio.open_nursery() as kids:
            for role, spec in w.settings.actors.items():
                for i in range(spec.count):
                    name = f"{role}-{i}"
                    argv = actor_argv(
                        role, name, w.endpoint, run_dir=w.run_dir,
                        capacity=spec.capacity, device=spec.device,
                        max_frame_bytes=rt.max_frame_bytes,
                    )  # fmt: skip
                    kids.start_soon(supervisor.supervise, ChildSpec(name, role, argv))
    finally:
        done.set()


def _record_failure(exc: Exception, run_dir: Path, reserve: Path, status: dict[str, Any]) -> None:
    """Log why the run failed (``run_failed``) and set ``status`` to say it; a full disk
    first gives back the reserve so that these last records fit."""
    cause = _root_cause(exc)
    full = _disk_full(exc) or _no_room(run_dir)
    if full is not None:
        # The reserve makes room for the last records (run_failed, run_stopped).
        reserve.unlink(missing_ok=True)
        events.mend_file()
        why = (
            f"no space left on the disk that holds {run_dir} ({full}). Free space there,"
            f" or move the run folder to a disk with room, then continue it with"
            f" `python run.py --resume {run_dir}`; what was journalled is kept"
        )
        log.error("run_failed", reason="disk_full", detail=why)
        status.update(code=EXIT_FAILED, why=why)
    elif isinstance(cause, RestartIntensityExceeded):
        log.error("run_failed", reason="restart_intensity", detail=str(cause))
    else:
        log.error("run_failed", reason=type(cause).__name__, detail=str(cause), exc_info=exc)
    if full is None:
        status.update(code=EXIT_FAILED, why=str(cause))


RESERVE_FILE = ".space-reserve"
RESERVE_BYTES = 256 * 1024
"""Space the head holds in the run folder while it runs, given back when the disk fills
so that the run's last records (``run_failed``, ``run_stopped``) still fit."""
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def _reserve_space(path: Path) -> None:
    with open(path, "wb") as f:
        f.write(b"\0" * RESERVE_BYTES)


def _disk_full(exc: BaseException) -> str | None:
    """The message of a full-disk error inside ``exc`` (nested groups, causes and
    contexts, the answer of an actor whose handler hit one) or of this process's events
    file; None when the disk is not what failed."""
    stack: list[BaseException] = [exc]
    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
            return f"[Errno {e.errno}] {e.strerror}"
        if isinstance(e, RemoteFailure):
            for n in DISK_FULL_ERRNOS:
                if f"[Errno {n}]" in str(e):
                    return f"[Errno {n}] {os.strerror(n)}, in {e.failure.reason}"
        if isinstance(e, BaseExceptionGroup):
            stack.extend(e.exceptions)
        stack.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    error = events.file_error()
    if error is not None and error.errno in DISK_FULL_ERRNOS:
        return f"the events file: [Errno {error.errno}] {error.strerror}"
    return None


NO_ROOM_BYTES = 64 * 1024
"""Free space under which a failed run's disk counts as full whatever the error said: a
library that hit the full disk may raise its own error (a RuntimeError from a writer, say)
with no errno in it."""


def _no_room(run_dir: Path) -> str | None:
    """Why the disk holding ``run_dir`` counts as full (less than ``NO_ROOM_BYTES`` free
    for this process), or None."""
    try:
        st = os.statvfs(run_dir)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free >= NO_ROOM_BYTES:
        return None
    return f"{free:,} bytes free when the run failed"


def _root_cause(exc: BaseException) -> BaseException:
    """The error that matters inside (possibly nested) exception groups from nurseries:
    a restart-intensity stop if there is one, else the first leaf that is not a
    cancellation."""
    leaves: list[BaseException] = []
    stack = [exc]
    while stack:
        e = stack.pop(0)
        if isinstance(e, BaseExceptionGroup):
            stack.extend(e.exceptions)
        else:
            leaves.append(e)
    for leaf in leaves:
        if isinstance(leaf, RestartIntensityExceeded):
            return leaf
    real = [leaf for leaf in leaves if not isinstance(leaf, trio.Cancelled)]
    return (real or leaves or [exc])[0]


async def _report_status(broker: Broker) -> None:
    """Hand the console view the jobs in flight per actor, every :data:`STATUS_INTERVAL_S`
    (through the console's queue: this never waits on the terminal)."""
    while True:
        actors = tuple(
            (p.actor_id, p.role, len(p.inflight), p.capacity)
            for p in broker.peers.values()
            if p.actor_id not in ("head", "artifacts")
        )
        queued = sum(len(q) for q in broker.queues.values())
        events.status(events.Status(actors, queued))
        await trio.sleep(STATUS_INTERVAL_S)


def _scalar(value: object) -> bool:
    return isinstance(value, (int, float, str, bool))


async def _watch_signals(scope: trio.CancelScope, status: dict) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            log.warning("run_interrupted", signal=name)
            status.update(code=128 + signum, why=f"interrupted by {name}")
            scope.cancel()
            return
