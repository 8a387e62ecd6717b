"""``run.py tail``: follow a run's ``events.jsonl`` in readable form."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from runtime.events import LEVELS, render

# How often to look for new lines once the file is drained. This follows a file, as
# `tail -f` does; a quarter second is prompt for a person and costs nothing.
FOLLOW_INTERVAL_S = 0.25
# After the head's last event, keep reading this long for the actors' final lines.
DRAIN_S = 2.0
_END_EVENTS = {"run_finished", "run_stopped"}


class TailError(Exception):
    """No run to follow; the message says where it looked."""


def latest_run(runs_dir: Path) -> Path:
    runs = [p for p in runs_dir.glob("*/") if (p / "events.jsonl").exists()]
    if not runs:
        raise TailError(f"no runs with events.jsonl in {runs_dir}/; start one with run.py --config")
    return max(runs, key=lambda p: (p / "events.jsonl").stat().st_mtime)


def follow(run_dir: str, runs_dir: str, *, keep_following: bool, level: str = "info") -> int:
    folder = Path(run_dir) if run_dir else latest_run(Path(runs_dir))
    path = folder / "events.jsonl"
    if not path.exists():
        raise TailError(f"{path} does not exist")
    print(f"== {path}", file=sys.stderr)
    threshold = LEVELS[level]
    color = sys.stdout.isatty()
    ended_at: float | None = None
    with path.open(encoding="utf-8", errors="replace") as f:  # a bad byte spoils one line
        partial = ""
        while True:
            chunk = f.readline()
            if chunk:
                partial += chunk
                if not partial.endswith("\n"):
                    continue  # a line still being written
                line, partial = partial, ""
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    print(f"(unreadable line) {line.rstrip()}")
                    continue
                if LEVELS.get(record.get("level", "info"), 20) >= threshold:
                    print(render(record, color=color), flush=True)
                if record.get("actor") == "head" and record.get("event") in _END_EVENTS:
                    ended_at = time.monotonic()
                continue
            if not keep_following:
                return 0
            if ended_at is not None and time.monotonic() - ended_at > DRAIN_S:
                return 0
            try:
                time.sleep(FOLLOW_INTERVAL_S)
            except KeyboardInterrupt:
                return 0
