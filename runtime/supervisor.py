"""The supervisor: starts actor processes, restarts crashed ones, stops them all.

Each child runs ``python -m rlgpt actor ROLE --connect ADDR --name ID ...`` in its own
process group, so a Ctrl-C at the terminal reaches only the head, which then stops the
children in order (SIGTERM, then SIGKILL after the grace period). Restarts obey an
intensity limit as in OTP: more than ``limit`` restarts within ``window`` seconds means
something is systematically wrong, and the run stops with :class:`RestartIntensityExceeded`.

A child's output (stdout and stderr, one pipe) is read by the head: its events come as
JSON lines (``--console json``) and go to the head's console view, anything else (a
traceback, a library's warning) as plain lines marked with the actor's id. One process
writes the terminal, so lines from two processes never run together, and a live status
panel is never drawn over.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio

from runtime import events
from runtime.events import log

SOURCE_ROOT = Path(__file__).resolve().parent.parent
"""The folder holding this code's top-level packages (a checkout, or site-packages): put
first on a child's ``PYTHONPATH`` so that ``-m rlgpt`` runs the code the head runs,
whatever the child's working folder."""
PACKAGE = "rlgpt"
"""The command-line package children are started through (``python -m rlgpt actor``)."""
# Longest line of a child's output shown as it is; a longer one is cut (the events file
# has every event whole). Far above any event line; bounds a runaway line's cost.
RELAY_LINE_MAX = 64 * 1024
# After a child exits, how long its output pipe may stay open (a grandchild holding it)
# before the head stops reading it.
RELAY_DRAIN_S = 1.0


class RestartIntensityExceeded(Exception):
    """Actors crashed more often than the restart limit allows."""


@dataclass
class ChildSpec:
    name: str
    """Actor id; a restarted child registers under the same id."""
    role: str
    """Role it plays."""
    argv: list[str]
    """Command line."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables."""


def actor_argv(
    role: str,
    name: str,
    endpoint: str,
    *,
    run_dir: Path,
    capacity: int,
    device: str,
    max_frame_bytes: int,
) -> list[str]:
    return [
        sys.executable, "-m", PACKAGE, "actor", role,
        "--console", "json",
        "--connect", endpoint,
        "--name", name,
        "--capacity", str(capacity),
        "--device", device,
        "--run-dir", str(run_dir),
        "--max-frame-bytes", str(max_frame_bytes),
        "--parent-pid", str(os.getpid()),
    ]  # fmt: skip


def _backoff(attempt: int) -> float:
    # 0.1 s, 0.2 s, 0.4 s ... capped at 5 s: quick first retry, no tight crash loop.
    return min(5.0, 0.1 * 2**attempt)


class Supervisor:
    def __init__(
        self,
        *,
        limit: int,
        window: float,
        grace: float,
        on_exit: Callable[[str, str], None],
    ) -> None:
        self.limit = limit
        self.window = window
        self.grace = grace
        self.on_exit = on_exit
        self.restarts: deque[float] = deque()
        self.restart_count = 0
        self.procs: dict[str, trio.Process] = {}
        self.stopping = False
        """Set when the run is ending: a child that exits now is not restarted."""

    async def supervise(self, spec: ChildSpec) -> None:
        """Run one child forever (until cancelled), restarting it when it dies."""
        attempt = 0
        while True:
            started = trio.current_time()
            proc = await trio.lowlevel.open_process(
                spec.argv,
                env=child_env(spec.env),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            self.procs[spec.name] = proc
            log.info("actor_process_started", actor_id=spec.name, pid=proc.pid, attempt=attempt)
            async with trio.open_nursery() as relays:
                relays.start_soon(relay_output, proc.stdout, spec.name)
                try:
                    code = await proc.wait()
                finally:
                    with trio.CancelScope(shield=True):
                        await self._stop(proc)
                        self.procs.pop(spec.name, None)
                        # Read what the child wrote last; a grandchild holding the
                        # pipe open cannot keep the head here.
                        relays.cancel_scope.deadline = trio.current_time() + RELAY_DRAIN_S
            cause = _describe_exit(code)
            self.on_exit(spec.name, cause)
            if self.stopping:
                log.info("actor_process_exited", actor_id=spec.name, pid=proc.pid, cause=cause)
                return
            log.warning("actor_process_exited", actor_id=spec.name, pid=proc.pid, cause=cause)
            self._count_restart(spec.name)
            # A child that ran a good while before dying starts the backoff afresh.
            attempt = 0 if trio.current_time() - started > self.window else attempt + 1
            await trio.sleep(_backoff(attempt))

    def _count_restart(self, name: str) -> None:
        now = trio.current_time()
        self.restarts.append(now)
        while self.restarts and self.restarts[0] < now - self.window:
            self.restarts.popleft()
        self.restart_count += 1
        if len(self.restarts) > self.limit:
            raise RestartIntensityExceeded(
                f"{len(self.restarts)} actor restarts within {self.window:g} s (limit "
                f"{self.limit}); last was {name}. See the actor_process_exited events; raise "
                "[runtime] restart_limit only if the crashes are expected."
            )

    def kill(self, name: str, reason: str) -> None:
        """Kill a child that stopped answering (its supervise loop then restarts it), so
        the work it still holds cannot finish twice."""
        proc = self.procs.get(name)
        if proc is not None and proc.returncode is None:
            log.warning("actor_process_killed", actor_id=name, pid=proc.pid, reason=reason)
            _signal_group(proc, signal.SIGKILL)

    async def _stop(self, proc: trio.Process) -> None:
        """SIGTERM, wait up to the grace period, then SIGKILL; always reaps. Signals go to
        the child's whole process group (its own session), so helpers it started, such
        as vectorized-env workers, go too."""
        if proc.returncode is not None:
            _signal_group(proc, signal.SIGKILL)  # leftovers of a child that died
            return
        _signal_group(proc, signal.SIGTERM)
        with trio.move_on_after(self.grace):
            await proc.wait()
            _signal_group(proc, signal.SIGKILL)
            return
        log.warning("actor_process_killed", pid=proc.pid, grace_s=self.grace)
        _signal_group(proc, signal.SIGKILL)
        await proc.wait()


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """A child's environment: the head's, :data:`SOURCE_ROOT` first on ``PYTHONPATH``,
    then ``extra``."""
    path = [str(SOURCE_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **extra}


async def relay_output(stream: trio.abc.ReceiveStream | None, actor: str) -> None:
    """Read a child's output to its end: JSON event lines go to the head's console view
    (:func:`runtime.events.relay`; the child wrote them to the events file itself), any
    other line as the actor's plain output. Never stops reading, so the child never
    blocks on a full pipe; what the console cannot take is dropped there."""
    if stream is None:
        return
    pending = b""
    async with stream:
        while chunk := await _receive(stream):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                _relay_line(line, actor)
            if len(pending) > RELAY_LINE_MAX:
                _relay_line(pending, actor)
                pending = b""
    if pending:
        _relay_line(pending, actor)


async def _receive(stream: trio.abc.ReceiveStream) -> bytes:
    try:
        return await stream.receive_some(65536)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return b""


def _relay_line(raw: bytes, actor: str) -> None:
    text = raw[:RELAY_LINE_MAX].decode(errors="replace").rstrip()
    if not text:
        return
    if text.startswith("{"):
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            record = None
        if isinstance(record, dict) and "event" in record:
            events.relay(record)
            return
    events.relay(events.Output(actor, text))


def _signal_group(proc: trio.Process, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"
