"""What a person sees of a run in the terminal.

On a terminal, :class:`LiveView` keeps one status panel in place at the bottom — the
iteration, each sub-action's mode, version and current success, jobs in flight per
actor, env steps against the budget, tokens, elapsed time and an estimate of what is
left — and scrolls the event lines that matter above it (decisions, critiques, results,
warnings). Elsewhere (CI, a pipe, ``--plain``) :class:`PlainView` prints the same lines
and the training progress, without escapes. ``--quiet`` shows warnings only. Either way
:func:`print_summary` ends the run with where its report, figures and video are and how
to replay its policy.

Both are fed from the console queue of :mod:`runtime.events` (the head's own events,
its actors' relayed by the supervisor, and the broker's state once a second) and run in
the console's thread: the run never waits for the terminal. The events file keeps
every event, whatever the view leaves out.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from runtime import events
from runtime.events import Item, Output, Status

HIDDEN = frozenset(
    {
        # Lifecycle: starting and stopping actors is not news (warnings still show).
        "run_started", "run_finished", "actor_registered", "actor_started",
        "actor_stopped", "actor_process_started", "actor_process_exited", "actor_lost",
        "process_limits",
        # Bookkeeping the panel or a later line sums up.
        "agent_call", "agent_call_replayed", "job_replayed", "job_cancelled",
        "rollout_started", "rollout_finished", "training_requested", "training_started",
        "training_finished",
    }
)  # fmt: skip
"""Info events the console leaves out (the events file has them all)."""
PROGRESS = frozenset({"training_progress", "play_progress"})
"""Progress events: in the panel when there is one, else one line each."""

_CLEAN = {"warning": 30, "error": 40, "critical": 50}


def _level(record: dict[str, Any]) -> int:
    return _CLEAN.get(str(record.get("level", "info")), 20)


def line_of(record: dict[str, Any], *, progress: bool) -> str | None:
    """The console line of one event, or None when it is not shown. A traceback is cut
    to its last line (the events file has it whole): an expected failure reads as one."""
    name = record.get("event")
    if _level(record) < 30:
        if name in HIDDEN:
            return None
        if name in PROGRESS and not progress:
            return None
    if name == "training_progress" and record.get("role") == "learner":
        return None  # the head logs each progress report too, naming the learner
    exception = record.get("exception")
    # Empty fields (revision_of="", hint="") say nothing on a console; the file keeps them.
    record = {k: v for k, v in record.items() if k != "exception" and v not in ("", None)}
    text = events.render(record)
    if exception:
        last = str(exception).strip().splitlines()[-1:] or [""]
        text += f"  ({last[0]}; traceback in events.jsonl)"
    return text


# ----------------------------------------------------------------- run state


@dataclass
class SubAction:
    name: str
    mode: str = ""
    version: int = 0
    success: float | None = None
    state: str = "planned"


@dataclass
class RunState:
    """What the panel shows, kept up to date from the events (:meth:`feed`)."""

    task: str = ""
    iterations: int = 0
    env_budget: int = 0
    wall_s: float = 0.0
    token_budget: int = 0
    started: float = field(default_factory=time.monotonic)
    task_started: float | None = None
    iteration: int = 0
    iterations_done: int = 0
    plan_version: int = 0
    phase: str = "starting actors"
    subactions: dict[str, SubAction] = field(default_factory=dict)
    job_subaction: dict[str, str] = field(default_factory=dict)
    job_total: dict[str, int] = field(default_factory=dict)
    job_steps: dict[str, int] = field(default_factory=dict)
    """Training jobs under way: decisions so far (from their progress reports)."""
    steps_code: int = 0
    steps_training: int = 0
    steps_final: int = 0
    steps_play: int = 0
    steps_outer: int = 0
    """The slow agent's own count at the end of each iteration."""
    tokens_in: int = 0
    tokens_out: int = 0
    final_success: float | None = None
    actors: tuple[tuple[str, str, int, int], ...] = ()
    queued: int = 0

    def sub(self, name: Any) -> SubAction:
        key = str(name)
        if key not in self.subactions:
            self.subactions[key] = SubAction(key)
        return self.subactions[key]

    @property
    def env_steps(self) -> int:
        live = sum(self.job_steps.values())
        outer = max(self.steps_outer, self.steps_code + self.steps_training + live)
        return outer + self.steps_final + self.steps_play

    def feed(self, item: Item) -> None:
        if isinstance(item, Status):
            self.actors, self.queued = item.actors, item.queued
            return
        if not isinstance(item, dict):
            return
        handler = getattr(self, "_on_" + str(item.get("event", "")), None)
        if handler is not None:
            try:
                handler(item)
            except (TypeError, ValueError, KeyError):
                pass  # an event with fields of another shape: the panel skips it

    def _on_task_started(self, e: dict) -> None:
        self.task = str(e.get("task", self.task))
        self.task_started = time.monotonic()
        self.phase = "planning"

    def _on_plan_made(self, e: dict) -> None:
        self.plan_version = int(e.get("version", 1))
        for entry in e.get("subactions", []):
            name, _, mode = str(entry).partition(":")
            self.sub(name).mode = mode
        planned = [str(x).partition(":")[0] for x in e.get("subactions", [])]
        # Keep the plan's order; a step dropped by a revision goes.
        self.subactions = {n: self.subactions[n] for n in planned if n in self.subactions}

    _on_plan_revised = _on_plan_made

    def _on_iteration_started(self, e: dict) -> None:
        self.iteration = int(e["iteration"])
        self.plan_version = int(e.get("plan_version", self.plan_version))
        self.phase = "working"

    def _on_iteration_finished(self, e: dict) -> None:
        self.iterations_done = int(e["iteration"])
        self.steps_outer = int(e.get("env_steps", self.steps_outer))
        self.phase = "revising the plan"

    def _on_subaction_started(self, e: dict) -> None:
        sub = self.sub(e["subaction"])
        sub.mode, sub.state = str(e.get("mode", sub.mode)), "writing"

    def _on_code_written(self, e: dict) -> None:
        sub = self.sub(e["subaction"])
        sub.version, sub.state = int(e.get("version", sub.version)), "evaluating"

    def _on_rl_config_written(self, e: dict) -> None:
        sub = self.sub(e["subaction"])
        sub.version, sub.state = int(e.get("version", sub.version)), "training"

    def _on_training_requested(self, e: dict) -> None:
        self.job_subaction[str(e["job"])] = str(e["subaction"])

    def _on_training_started(self, e: dict) -> None:
        self.job_total[str(e["job"])] = int(e.get("steps", 0))

    def _on_training_progress(self, e: dict) -> None:
        job = str(e["job"])
        self.job_steps[job] = int(e.get("steps", 0))
        name = self.job_subaction.get(job)
        if name is not None:
            sub = self.sub(name)
            sub.success = float(e.get("success_rate", 0.0))
            total = self.job_total.get(job)
            sub.state = f"training {self.job_steps[job]:,}" + (f"/{total:,}" if total else "")

    def _on_training_result(self, e: dict) -> None:
        job = str(e["job"])
        self.job_steps.pop(job, None)
        self.steps_training += int(e.get("world_steps", 0))
        name = self.job_subaction.get(job)
        if name is not None:
            self.sub(name).state = "evaluating policy"

    def _on_evaluation_finished(self, e: dict) -> None:
        sub = self.sub(e["subaction"])
        sub.success = float(e.get("success_rate", 0.0))
        sub.state = "critic reviewing"
        self.steps_code += int(e.get("steps", 0))

    def _on_critique(self, e: dict) -> None:
        verdict = str(e.get("verdict", ""))
        self.sub(e["subaction"]).state = f"critic: {verdict}" if verdict else "critiqued"

    def _on_subaction_finished(self, e: dict) -> None:
        sub = self.sub(e["subaction"])
        sub.mode = str(e.get("mode", sub.mode))
        sub.success = float(e.get("success_rate", sub.success or 0.0))
        sub.state = "accepted" if e.get("accepted") else "under target"

    def _on_plan_decision(self, e: dict) -> None:
        self.sub(e["subaction"]).state = f"next: {e.get('change', '')}"

    def _on_final_evaluation_started(self, e: dict) -> None:
        self.phase = "final evaluation"

    def _on_final_evaluation_finished(self, e: dict) -> None:
        self.final_success = float(e.get("success_rate", 0.0))
        self.steps_final += int(e.get("steps", 0))
        self.phase = "final policy evaluated"

    def _on_play_started(self, e: dict) -> None:
        self.phase = "playing the final policy to the env-step budget"

    def _on_play_progress(self, e: dict) -> None:
        self.steps_play = int(e.get("env_steps", self.steps_play))

    def _on_video_written(self, e: dict) -> None:
        self.phase = "writing the report"

    def _on_agent_call(self, e: dict) -> None:
        self.tokens_in += int(e.get("tokens_in", 0) or 0)
        self.tokens_out += int(e.get("tokens_out", 0) or 0)

    def _on_run_finished(self, e: dict) -> None:
        self.phase = "finished"

    def _on_run_stopped(self, e: dict) -> None:
        self.phase = f"stopped: {e.get('why', '')}"

    def eta(self, now: float) -> str:
        """Time to the first budget that ends the outer loop, with which one, or '—'."""
        if self.task_started is None or self.phase not in ("working", "revising the plan"):
            return "—"
        spent = now - self.task_started
        guesses: list[tuple[float, str]] = []
        if self.wall_s > 0:
            guesses.append((self.wall_s - spent, "wall-clock budget"))
        used = self.env_steps
        if self.env_budget and used > 0:
            guesses.append((spent * (self.env_budget - used) / used, "env-step budget"))
        if self.iterations and self.iterations_done:
            left = self.iterations - self.iterations_done
            guesses.append((spent / self.iterations_done * left, "iterations"))
        if not guesses:
            return "—"
        seconds, why = min(guesses)
        return f"≤ {_clock(max(0.0, seconds))} ({why}; then the final evaluation)"


def _clock(seconds: float) -> str:
    seconds = round(seconds)  # (89.99999… from float noise is 1m30s, not 1m29s)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


# --------------------------------------------------------------------- views


class PlainView:
    """Plain lines (CI, pipes, ``--plain``, ``--quiet``): the events that matter, each
    training progress report once; colour only on a terminal."""

    wants_status = False

    def __init__(self, *, color: bool = False) -> None:
        self.color = color

    def show(self, item: Item) -> str | None:
        if isinstance(item, Output):
            return f"{item.actor:<14} | {item.text}"
        if not isinstance(item, dict):
            return None
        text = line_of(item, progress=True)
        if text is not None and self.color:
            colour = {30: "\033[33m", 40: "\033[31m", 50: "\033[31m"}.get(_level(item))
            if colour:
                text = f"{colour}{text}\033[0m"
        return text

    def close(self) -> None:
        pass


class LiveView:
    """A status panel that stays in place (rich's ``Live``), event lines above it."""

    wants_status = True
    REFRESH_PER_S = 4
    """Redraws per second: the clock ticks visibly, the terminal is not flooded."""

    def __init__(self, state: RunState, stream: TextIO) -> None:
        self.state = state
        self.console = Console(file=stream, highlight=False, markup=False)
        self.lock = threading.Lock()
        """Held while the state changes and lines print; always taken before rich's
        own lock (the refresh thread only redraws the last panel handed over)."""
        self.live = Live(
            self._panel(),
            console=self.console,
            refresh_per_second=self.REFRESH_PER_S,
            transient=False,
            redirect_stdout=True,
            redirect_stderr=True,
        )
        self.live.start()
        self.closed = False

    def show(self, item: Item) -> str | None:
        with self.lock:
            if self.closed:
                return self._after_close(item)
            self.state.feed(item)
            if isinstance(item, Output):
                self.console.print(Text(f"{item.actor:<14} | {item.text}", style="dim"))
            elif isinstance(item, dict):
                text = line_of(item, progress=False)
                if text is not None:
                    style = {30: "yellow", 40: "red", 50: "bold red"}.get(_level(item), "")
                    self.console.print(Text(text, style=style), soft_wrap=True)
            self.live.update(self._panel())  # drawn by the refresh thread, at most 4 times a second
        return None

    def _after_close(self, item: Item) -> str | None:
        if isinstance(item, dict):
            return line_of(item, progress=False)
        return PlainView().show(item)

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.live.update(self._panel())
            self.live.stop()

    def _panel(self):
        s, now = self.state, time.monotonic()
        head = Text()
        head.append("RL-GPT", style="bold")
        if s.task:
            head.append(f" · {s.task}")
        if s.iteration:
            of = f"/{s.iterations}" if s.iterations else ""
            head.append(f" · iteration {s.iteration}{of} (plan v{s.plan_version})", style="bold")
        head.append(f" · {s.phase}")
        rows: list[Any] = [head]
        if s.subactions:
            table = Table(box=None, pad_edge=False, show_edge=False, header_style="dim")
            for column in ("sub-action", "mode", "version", "success", "now"):
                table.add_column(column, no_wrap=True)
            for sub in s.subactions.values():
                success = "—" if sub.success is None else f"{sub.success:.2f}"
                mode = {"code": "code", "rl": "RL"}.get(sub.mode, sub.mode or "—")
                version = f"v{sub.version}" if sub.version else "—"
                table.add_row(sub.name, mode, version, success, sub.state)
            rows.append(table)
        workers = sorted(a for a in s.actors if a[1] not in ("slow", "fast", "critic"))
        if workers or s.queued:
            jobs = " · ".join(f"{name} {busy}/{cap}" for name, _, busy, cap in workers)
            rows.append(Text(f"jobs in flight: {jobs or 'no workers'} · queued {s.queued}"))
        budget = f" / {s.env_budget:,}" if s.env_budget else ""
        share = f" ({s.env_steps / s.env_budget:.0%})" if s.env_budget else ""
        tokens = f"tokens {s.tokens_in:,} in / {s.tokens_out:,} out"
        if s.token_budget:
            tokens += f" of {s.token_budget:,}"
        rows.append(Text(f"env steps {s.env_steps:,}{budget}{share} · {tokens}"))
        final = "" if s.final_success is None else f" · final success {s.final_success:.2f}"
        rows.append(
            Text(f"elapsed {_clock(now - s.started)} · ETA {s.eta(now)}{final}", style="dim")
        )
        return Panel(Group(*rows), title="run status", title_align="left")


def use_live(
    *, quiet: bool, plain: bool, stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr
) -> bool:
    """The live panel needs a terminal on both streams and a person watching: not with
    ``--quiet``/``--plain``, in a pipe, on a dumb terminal."""
    if quiet or plain or os.environ.get("TERM") == "dumb":
        return False
    return _isatty(stdout) and _isatty(stderr)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def make_view(settings: Any, *, quiet: bool, plain: bool) -> events.View:
    """The console view for a run of ``settings``: the live panel on a terminal, plain
    lines otherwise (see :func:`use_live`)."""
    if use_live(quiet=quiet, plain=plain):
        task = getattr(settings, "task", None)
        state = RunState(
            task=str(getattr(task, "task", "")),
            iterations=int(getattr(task, "iterations", 0)),
            env_budget=int(getattr(task, "env_steps", 0)),
            wall_s=float(getattr(task, "wall_s", 0.0)),
            token_budget=int(getattr(getattr(settings, "agents", None), "token_budget", 0)),
        )
        return LiveView(state, sys.stderr)
    return PlainView(color=_isatty(sys.stderr) and "NO_COLOR" not in os.environ)


# ------------------------------------------------------------------- summary

FIGURES = ("success.png", "achievements.png")
"""Figures named first, in this order; any other ``*.png`` of the run follows."""


def print_summary(
    run_dir: Path, code: int, *, command: str = "python run.py", out: TextIO | None = None
) -> None:
    """The run's last lines (stdout, also with ``--quiet``): how it ended, and where
    ``report.md``, the figures and the video are and how to replay the final policy;
    ``command`` is how the user calls us (``python run.py``, ``rlgpt``)."""
    out = out or sys.stdout
    report = _read_json(run_dir / "report.json") if code == 0 else {}
    lines: list[str] = []
    if code == 0:
        wall = report.get("wall_s")
        stop = report.get("stop_reason")
        how = ", ".join(str(x) for x in (stop, f"{wall} s" if wall is not None else None) if x)
        lines.append(f"run {run_dir.name} finished" + (f" ({how})" if how else ""))
        if "final_success" in report:
            # Minetest's score is Crafter's formula over the chain's achievements.
            lines.append(
                f"  final success {report['final_success']:.2f} on "
                f"{report.get('final_episodes', '?')} unseen worlds · "
                + ("Crafter score " if report.get("world", "crafter") == "crafter" else "score ")
                + f"{report.get('score_final', '?')} (final policy), "
                f"{report.get('score_all_episodes', '?')} (every episode)"
            )
            lines.append(
                f"  env steps {report.get('env_steps', 0):,} · tokens "
                f"{report.get('tokens_in', 0):,} in / {report.get('tokens_out', 0):,} out"
            )
        if (run_dir / "report.md").exists():
            lines.append(f"  report   {run_dir / 'report.md'}")
        figures = [run_dir / n for n in FIGURES if (run_dir / n).exists()]
        figures += sorted(p for p in run_dir.glob("*.png") if p not in figures)
        if figures:
            lines.append(f"  figure   {figures[0]}")
            for more in figures[1:]:
                lines.append(f"           {more}")
        video = report.get("video")
        if video and (run_dir / str(video)).exists():
            lines.append(f"  video    {run_dir / str(video)}")
        if "final_success" in report:
            lines.append(f"  replay   {command} play {run_dir}")
    else:
        why = _last_stop(run_dir)
        if code in (130, 143):
            lines.append(f"run {run_dir.name} stopped ({why or f'status {code}'})")
            lines.append(f"  resume   {command} --resume {run_dir}")
        else:
            lines.append(f"run {run_dir.name} failed: {why or f'status {code}'}")
        lines.append(f"  events   {run_dir / 'events.jsonl'} ({command} tail {run_dir})")
    out.write("\n".join(lines) + "\n")
    out.flush()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _last_stop(run_dir: Path) -> str:
    """Why the run stopped, from its last ``run_stopped`` event ('' if none)."""
    path = run_dir / "events.jsonl"
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            tail = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(tail):
        if '"run_stopped"' in line:
            try:
                return str(json.loads(line).get("why", ""))
            except ValueError:
                return ""
    return ""
