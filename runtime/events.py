"""Structured event logs: one JSON object per line in ``runs/<run-id>/events.jsonl``.

Every process of a run (the head and each local actor) appends to the same file. Each
event is written with a single ``write`` on a file opened with ``O_APPEND``, so lines
from different processes never interleave. The same events are shown on the console in
a readable one-line form (:func:`render`), which ``run.py tail`` reuses.

Use it like structlog anywhere::

    from runtime.events import log
    log.info("rollout_finished", episodes=4, success=0.75)
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import structlog

log = structlog.get_logger()

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}

# Keys every event carries, printed first and not repeated among the fields.
_HEAD_KEYS = ("ts", "level", "run", "actor", "role", "event")


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, Path):
        return str(value)
    return repr(value)


class _Sink:
    """structlog's last processor: writes the JSON line, returns the console line."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.path: Path | None = None
        self.static: dict[str, Any] = {}
        self.console_level = LEVELS["info"]
        self.file_level = LEVELS["info"]
        self.color = False

    def __call__(self, logger: Any, method: str, event: dict[str, Any]) -> str:
        level = LEVELS.get(method, 20)
        if method == "exception":
            level = LEVELS["error"]
        record = {"ts": _now(), "level": method if method != "exception" else "error"}
        for key, value in self.static.items():
            record.setdefault(key, value)
        record.update(event)
        if self.fd is not None and level >= self.file_level:
            line = json.dumps(record, default=_json_default, separators=(",", ":")) + "\n"
            os.write(self.fd, line.encode())
        if level < self.console_level:
            raise structlog.DropEvent
        return render(record, color=self.color)


_sink = _Sink()


def _now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def configure(
    *,
    events_file: Path | None = None,
    console: TextIO | None = sys.stderr,
    console_level: str = "info",
    file_level: str = "info",
    **static: Any,
) -> None:
    """Set where events go for this process. ``static`` fields (run, actor, role) are
    added to every event that does not set them itself."""
    if _sink.fd is not None:
        os.close(_sink.fd)
        _sink.fd = None
    if events_file is not None:
        events_file.parent.mkdir(parents=True, exist_ok=True)
        _sink.fd = os.open(events_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _sink.path = events_file
    _sink.static = {k: v for k, v in static.items() if v is not None}
    _sink.console_level = LEVELS[console_level] if console is not None else 1000
    _sink.file_level = LEVELS[file_level]
    _sink.color = bool(console is not None and console.isatty() and "NO_COLOR" not in os.environ)
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


def close() -> None:
    if _sink.fd is not None:
        os.close(_sink.fd)
        _sink.fd = None


_COLORS = {"debug": "\033[2m", "info": "", "warning": "\033[33m", "error": "\033[31m"}


def render(record: dict[str, Any], *, color: bool = False) -> str:
    """One event as a readable line: ``12:00:01.123 learner-0  job_started  key=value``."""
    ts = str(record.get("ts", ""))
    clock = ts[11:23] if len(ts) >= 23 else ts
    who = str(record.get("actor") or record.get("role") or "-")
    name = str(record.get("event", "?"))
    fields = " ".join(
        f"{k}={_short(v)}" for k, v in record.items() if k not in _HEAD_KEYS and k != "exception"
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
