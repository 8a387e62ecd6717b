"""Structured event logs: one JSON object per line in ``runs/<run-id>/events.jsonl``.

Every process of a run (the head and each local actor) appends to the same file. Each
event is written with a single ``write`` on a file opened with ``O_APPEND``, so lines
from different processes never interleave. An actor attached from another machine has
no such file: its events travel to the head, which appends them (:mod:`runtime.forward`,
:func:`forward_to`, :func:`append_lines`). The same events are shown on the console in
a readable one-line form (:func:`render`), which ``run.py tail`` reuses. The console
never blocks the process: its lines go out from a thread of their own, and when the
console is not read (``run.py ... | less`` left paused, a full stderr pipe) lines past a
bounded backlog are dropped and counted in a ``console_dropped`` event in the file — the
file always gets every event.

What the console shows is up to a *view* (:class:`LineView` by default: every event as
one line; :class:`JsonView` in an actor process whose output the head reads and shows in
its own view; the command line brings a curated view and a live status panel). Views run
in the console's thread, never in the caller's.

Use it like structlog anywhere::

    from runtime.events import log
    log.info("rollout_finished", episodes=4, success=0.75)
"""

from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

import structlog

log = structlog.get_logger()

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}

# Console lines waiting for a slow console before new ones are dropped: a few seconds of
# a busy run's output, so a terminal scrolled back or briefly paused loses nothing, while
# a console nobody reads holds at most ~1 MB (lines are ~100-200 bytes).
CONSOLE_BACKLOG = 5000
# How long close() waits for the console backlog to drain before it counts the rest as
# dropped: long enough for a live terminal, short enough not to hold up the exit.
CONSOLE_CLOSE_S = 1.0

# Keys every event carries, printed first and not repeated among the fields.
_HEAD_KEYS = ("ts", "level", "run", "actor", "role", "event")
_REMOTE_HEAD_KEYS = (*_HEAD_KEYS, "host", "remote")


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, Path):
        return str(value)
    return repr(value)


@dataclass(frozen=True)
class Output:
    """A line an actor process wrote that is not an event (a traceback, a library's
    warning), relayed by the head's supervisor to the head's console."""

    actor: str
    text: str


@dataclass(frozen=True)
class Status:
    """What the broker holds now, for a view that shows it (:func:`status`): per actor
    (id, role, jobs in flight, capacity), and the jobs waiting for an actor."""

    actors: tuple[tuple[str, str, int, int], ...]
    queued: int


Item = dict[str, Any] | Output | Status
"""What goes through the console's queue: an event record, a relayed line, a status."""


class View(Protocol):
    """Turns console items into what the console shows; called from the console's
    thread only. ``show`` returns the text to write (without its newline), or None when
    the item is not shown or the view drew it itself."""

    wants_status: bool

    def show(self, item: Item) -> str | None: ...

    def close(self) -> None: ...


class LineView:
    """Every event as one readable line (:func:`render`), relayed lines as they came."""

    wants_status = False

    def __init__(self, *, color: bool = False) -> None:
        self.color = color

    def show(self, item: Item) -> str | None:
        if isinstance(item, Output):
            return f"{item.actor:<14} | {item.text}"
        if isinstance(item, dict):
            return render(item, color=self.color)
        return None

    def close(self) -> None:
        pass


class JsonView:
    """Every event as one JSON line: the console of an actor process the head started,
    whose output the head's supervisor reads and hands to the head's own view."""

    wants_status = False

    def show(self, item: Item) -> str | None:
        if isinstance(item, dict):
            return json.dumps(item, default=_json_default, separators=(",", ":"))
        return None

    def close(self) -> None:
        pass


class _Console:
    """Writes console lines from a daemon thread through a bounded queue, so a console
    that stops reading never blocks the caller (the head's trio loop above all): past
    :data:`CONSOLE_BACKLOG` waiting items, new ones are dropped and counted, and once the
    console catches up a ``console_dropped`` line says how many, on the console and in
    the events file. The thread hands each item to the :class:`View`, so rendering costs
    the caller nothing either. Streams without a file descriptor (tests' StringIO) are
    written directly."""

    def __init__(self, stream: TextIO, view: View) -> None:
        self.stream = stream
        self.view = view
        self.owner = os.getpid()
        try:
            self.fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError):
            self.fd = None
        self.dropped = 0
        self.lock = threading.Lock()
        self.pid = -1
        self.lines: queue.Queue[Item | None] = queue.Queue()

    def write(self, item: Item) -> None:
        if self.fd is None:
            text = self.view.show(item)
            if text is not None:
                self.stream.write(text + "\n")
                self.stream.flush()
            return
        if self.pid != os.getpid():
            self._start()  # first use, or a forked child (which has no writer thread)
        try:
            self.lines.put_nowait(item)
        except queue.Full:
            with self.lock:
                self.dropped += 1

    def _start(self) -> None:
        self.pid = os.getpid()
        self.lines = queue.Queue(maxsize=CONSOLE_BACKLOG)
        self.dropped = 0
        threading.Thread(target=self._drain, args=(self.lines,), daemon=True).start()

    def _drain(self, lines: queue.Queue[Item | None]) -> None:
        while (item := lines.get()) is not None:
            self._show(item)
            if lines.empty():
                with self.lock:
                    dropped, self.dropped = self.dropped, 0
                if dropped:
                    record = _sink.record("warning", {"event": "console_dropped", "lines": dropped})
                    _sink.write_file(record)
                    self._show(record)

    def _show(self, item: Item) -> None:
        try:
            text = self.view.show(item)
        except Exception as exc:  # a view's bug must not end the thread: lines would stop
            text = f"(console view failed: {exc!r}) {item!r}"
        if text is not None:
            self._write_fd(text + "\n")

    def _write_fd(self, text: str) -> None:
        data = text.encode(errors="replace")
        try:
            while data:
                data = data[os.write(self.fd, data) :]
        except OSError:
            pass  # the console is gone (closed pipe): the file still has every event

    def stop(self) -> None:
        """Let the writer thread end once its backlog is out (this console is replaced)."""
        try:
            self.lines.put_nowait(None)
        except queue.Full:
            pass  # a console nobody reads: its thread stays blocked, as it would anyway

    def close(self) -> None:
        """Let the backlog drain for up to :data:`CONSOLE_CLOSE_S` and book what is left;
        then let the view finish (a live panel draws its last state) — in the process
        that made it only, not in a forked child that inherited it."""
        if self.fd is not None and self.pid == os.getpid():
            deadline = time.monotonic() + CONSOLE_CLOSE_S
            while not self.lines.empty() and time.monotonic() < deadline:
                time.sleep(0.01)
            with self.lock:
                dropped, self.dropped = self.dropped + self.lines.qsize(), 0
            if dropped:
                event = {"event": "console_dropped", "lines": dropped, "at": "close"}
                _sink.write_file(_sink.record("warning", event))
        if os.getpid() == self.owner:
            self.view.close()


class _Sink:
    """structlog's last processor: writes the JSON line, returns the console line."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.path: Path | None = None
        self.static: dict[str, Any] = {}
        self.console_level = LEVELS["info"]
        self.file_level = LEVELS["info"]
        self.console: _Console | None = None
        self.lost = 0
        """Lines the events file refused since the last one it took."""
        self.error: OSError | None = None
        """The last error writing the events file (``file_error``)."""
        self.fd_lock = threading.Lock()
        """Held while the file descriptor is written or closed: the console's thread
        writes ``console_dropped`` too, and must never write to a reused descriptor."""
        self.forward: Callable[[dict[str, Any]], None] | None = None
        """Also hands every record the file would get to this (:func:`forward_to`): an
        attached actor's events on their way to the head. Called in the logging thread."""

    def __call__(self, logger: Any, method: str, event: dict[str, Any]) -> str:
        level = LEVELS.get(method, 20)
        if method == "exception":
            level = LEVELS["error"]
        record = self.record(method if method != "exception" else "error", event)
        if level >= self.file_level:
            self.write_file(record)
        if self.console is not None and level >= self.console_level:
            self.console.write(record)
        raise structlog.DropEvent  # written above; structlog's own printer never blocks us

    def record(self, level: str, event: dict[str, Any]) -> dict[str, Any]:
        record = {"ts": _now(), "level": level}
        for key, value in self.static.items():
            record.setdefault(key, value)
        record.update(event)
        return record

    def write_file(self, record: dict[str, Any]) -> None:
        """Append one record to the events file. Never raises: a write that fails (a
        full disk above all) must not turn the event that reports a failure into a new
        one. Lines that could not be written are counted; the first line that can be
        written again is preceded by an ``events_lost`` record with the count."""
        if self.forward is not None:
            self.forward(record)
        if self.fd is not None:
            self.write_lines([json.dumps(record, default=_json_default, separators=(",", ":"))])

    def write_lines(self, lines: list[str]) -> bool:
        """Append JSON lines (without their newlines) in one ``write``, so no other
        process's line lands among them; the rules of :meth:`write_file` (never raises;
        lines refused are counted, then reported by ``events_lost``). False when they
        did not go in (or there is no file)."""
        data = "".join(line + "\n" for line in lines)
        with self.fd_lock:
            if self.fd is None:
                return False
            if self.lost:
                self._mend()
                lost = {"ts": _now(), "level": "warning"}
                lost |= {"event": "events_lost", "lines": self.lost, "error": str(self.error)}
                if not self._write(json.dumps(lost, separators=(",", ":")) + "\n"):
                    self.lost += len(lines)
                    return False
                self.lost = 0
            if not self._write(data):
                self.lost += len(lines)
                return False
            return True

    def _mend(self) -> None:
        """End a line torn by a full disk (this process's or another's: every actor
        appends to one file), so the next record starts a line of its own."""
        try:
            size = os.fstat(self.fd).st_size  # type: ignore[arg-type]
            if size and os.pread(self.fd, 1, size - 1) != b"\n":  # type: ignore[arg-type]
                os.write(self.fd, b"\n")  # type: ignore[arg-type]
        except OSError:
            pass

    def _write(self, line: str) -> bool:
        data = line.encode()
        try:
            written = os.write(self.fd, data)  # type: ignore[arg-type]
        except OSError as exc:
            self.error = exc
            return False
        if written < len(data):  # a short write: the disk filled mid-line
            self.error = OSError(errno.ENOSPC, "short write to the events file")
            try:  # take the fragment back (nobody appends to a full disk meanwhile)
                size = os.fstat(self.fd).st_size  # type: ignore[arg-type]
                if size >= written:
                    os.ftruncate(self.fd, size - written)  # type: ignore[arg-type]
            except OSError:
                pass  # mended later: the next line starts on a line of its own
            return False
        return True


_sink = _Sink()


@atexit.register
def _drain_console_at_exit() -> None:
    # The writer is a daemon thread: without this, lines still queued when a process
    # exits without close() (an actor, a config error) would never be shown.
    if _sink.console is not None:
        _sink.console.close()


def _now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def configure(
    *,
    events_file: Path | None = None,
    console: TextIO | None = sys.stderr,
    console_level: str = "info",
    file_level: str = "info",
    view: View | None = None,
    **static: Any,
) -> None:
    """Set where events go for this process. ``static`` fields (run, actor, role) are
    added to every event that does not set them itself. ``view`` decides what the
    console shows (default: a :class:`LineView`, coloured on a terminal)."""
    _close_file()
    if events_file is not None:
        events_file.parent.mkdir(parents=True, exist_ok=True)
        _sink.fd = os.open(events_file, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        _sink.path = events_file
    _sink.static = {k: v for k, v in static.items() if v is not None}
    _sink.console_level = LEVELS[console_level] if console is not None else 1000
    if _sink.console is not None and (_sink.console.stream is not console or view is not None):
        _sink.console.stop()
        _sink.console = None
    if console is not None and _sink.console is None:
        color = console.isatty() and "NO_COLOR" not in os.environ
        _sink.console = _Console(console, view if view is not None else LineView(color=color))
    _sink.file_level = LEVELS[file_level]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.format_exc_info,
            _sink,
        ],
        logger_factory=structlog.PrintLoggerFactory(console or sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=False,
    )


def bind(**fields: Any) -> None:
    """Add fields to every event from the current task (and tasks it starts)."""
    structlog.contextvars.bind_contextvars(**fields)


def forward_to(put: Callable[[dict[str, Any]], None] | None) -> None:
    """Hand every record this process's events file would get (same level) also to
    ``put`` (None: stop): an attached actor's events on their way to the head
    (:class:`runtime.forward.EventForwarder`). ``put`` runs in the thread that logs."""
    _sink.forward = put


def append_lines(lines: list[str]) -> bool:
    """Append ready JSON lines to this process's events file in one write (the head
    writing an attached actor's batch); never raises. False when they did not go in."""
    return _sink.write_lines(lines)


def relay(item: dict[str, Any] | Output) -> None:
    """Show on this process's console what another process logged (an event record it
    already wrote to the events file, or a plain line of its output). Never blocks."""
    if _sink.console is not None:
        _sink.console.write(item)


def status(item: Status) -> None:
    """Hand the broker's state to a view that shows it; nothing otherwise."""
    if _sink.console is not None and _sink.console.view.wants_status:
        _sink.console.write(item)


def close() -> None:
    if _sink.console is not None:
        _sink.console.close()
    _close_file()


def file_error() -> OSError | None:
    """The last error writing this process's events file, or None if every line went in
    (or the file took lines again after it)."""
    with _sink.fd_lock:
        return _sink.error if _sink.lost else None


def mend_file() -> None:
    """End a torn last line of the events file, if there is one (after a full disk)."""
    with _sink.fd_lock:
        if _sink.fd is not None:
            _sink._mend()


def _close_file() -> None:
    with _sink.fd_lock:
        if _sink.fd is not None:
            os.close(_sink.fd)
            _sink.fd = None


_COLORS = {"debug": "\033[2m", "info": "", "warning": "\033[33m", "error": "\033[31m"}


def render(record: dict[str, Any], *, color: bool = False) -> str:
    """One event as a readable line: ``12:00:01.123 learner-0  job_started  key=value``."""
    ts = str(record.get("ts", ""))
    clock = ts[11:23] if len(ts) >= 23 else ts
    who = str(record.get("actor") or record.get("role") or "-")
    skip = _HEAD_KEYS
    if record.get("remote") is True:
        # An attached actor's event, forwarded by the head (runtime/forward.py): named
        # with the host it ran on.
        who += f"@{record.get('host', '?')}"
        skip = _REMOTE_HEAD_KEYS
    name = str(record.get("event", "?"))
    fields = " ".join(
        f"{k}={_short(v)}" for k, v in record.items() if k not in skip and k != "exception"
    )
    line = f"{clock} {who:<14} {name:<22} {fields}".rstrip()
    if "exception" in record:
        line += "\n" + str(record["exception"]).rstrip()
    level = str(record.get("level", "info"))
    if color and _COLORS.get(level):
        line = f"{_COLORS[level]}{line}\033[0m"
    return line


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=_json_default)
    if isinstance(value, str) and (" " in text or not text):
        text = json.dumps(text)
    return text if len(text) <= 160 else text[:157] + "..."
