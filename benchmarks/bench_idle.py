#!/usr/bin/env python3
"""Where a run's core-seconds go idle, from its ``events.jsonl`` (and ``jobs.jsonl``).

    python benchmarks/bench_idle.py RUN_DIR                 the idle table
    python benchmarks/bench_idle.py RUN_DIR --timeline      and every stretch with idle cores
    python benchmarks/bench_idle.py RUN_DIR --json out.json also write the figures

The run's busy processes at each moment, from its events: an environment actor is busy
from ``rollout_started`` to ``rollout_finished`` (or its next ``rollout_started``, when a
runner failure ended a rollout without one), a learner from ``training_started`` to
``training_finished`` (a job whose envs step in its worker processes, ``workers`` in
``training_started``, as one busy process per worker). A core is idle while fewer of
them are busy than the run has cores (``actor_counts``); each idle core-second is
attributed to what the run was doing then:

* ``startup``: before the task started (actors and runners starting);
* ``after the final evaluation``: video, bundle and shutdown;
* ``final evaluation: parts unequal``: the final evaluation's environment actors, one
  done and waiting for the other's part;
* ``final evaluation: merging``: none busy between its parts' answers and its end;
* ``<round>: parts unequal``: one environment actor still running its part of a
  sub-action's evaluation and nothing else busy, by round: ``first evaluation`` of a
  version, ``draw round`` (further worlds from starts, :meth:`FastAgent._draw`),
  ``comparison round`` (:meth:`FastAgent._settle`);
* ``learner alone``: one learner training and nothing else to run (the other learners
  idle: no other sub-action has a job to train);
* ``learner alone beside evaluation``: one learner training, one environment actor busy
  but fewer than the cores (an evaluation's parts unequal while the other trains);
* ``between rounds``: nothing busy inside the fast agent's inner loop (writing code or
  a config, the critic, a round's results merged before the next is asked);
* ``slow agent``: nothing busy between iterations (the slow agent revising its plan).

Busy is counted from events, not CPU clocks: a process counts as one busy core while its
job runs (the head's own trio tasks and a learner's short waits inside a job are not
seen). On a shared machine the stretches are longer; their structure is what to read.

Starts remade (``jobs.jsonl``): an evaluation from starts (``RolloutRequest.start_at``)
makes a world's start in the runner that plays it and restores it there after; an
episode that made its start (``setup_steps`` > 0 or its setup failed, not ``restored``)
for a (sub-action, world) whose start some runner already made is a start made again —
by the other environment actor, or for a changed setup.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rlgpt.cli import output_file  # noqa: E402

ROUNDS = ("first evaluation", "draw round", "comparison round")


def event_time(event: dict) -> float:
    """An event's ``ts`` as a unix time."""
    return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()


@dataclass
class _State:
    """What the run is doing at one moment, as the events so far say."""

    cores: int = 2
    started: bool = False
    final: str = ""  # "", "running", "done"
    busy: dict[str, str] = field(default_factory=dict)  # actor → what it runs
    round: dict[str, str] = field(default_factory=dict)  # sub-action → its next round
    between_iterations: bool = False

    def cause(self) -> str:
        """The attribution of the cores idle now (see the module docstring)."""
        if not self.started:
            return "startup"
        if self.final == "done":
            return "after the final evaluation"
        envs = [a for a in self.busy if a.startswith("environment")]
        learners = [a for a in self.busy if a.startswith("learner") and "+" not in a]
        if self.final == "running":
            return "final evaluation: parts unequal" if envs else "final evaluation: merging"
        if learners and envs:
            return "learner alone beside evaluation"
        if learners:
            return "learner alone"
        if envs:
            return f"{self.busy[envs[0]]}: parts unequal"
        if self.between_iterations:
            return "slow agent"
        return "between rounds"


def timeline(events: list[dict]) -> tuple[list[dict], int]:
    """Stretches of ``events``' run, each ``{t0, t1, busy, idle_core_s, cause}``, and
    the run's cores."""
    state = _State()
    stretches: list[dict] = []
    if not events:
        return stretches, state.cores
    t0 = event_time(events[0])
    last = t0
    for e in events:
        t = event_time(e)
        if t > last:
            idle = max(0, state.cores - len(state.busy)) * (t - last)
            stretches.append(
                {
                    "t0": round(last - t0, 3),
                    "t1": round(t - t0, 3),
                    "busy": sorted(state.busy),
                    "idle_core_s": idle,
                    "cause": state.cause(),
                }
            )
            last = t
        _apply(state, e)
    return stretches, state.cores


def _apply(state: _State, e: dict) -> None:
    name, actor = e.get("event"), e.get("actor", "")
    if name == "actor_counts":
        state.cores = int(e.get("cores") or state.cores)
    elif name == "task_started":
        state.started = True
    elif name == "final_evaluation_started":
        state.final = "running"
    elif name == "final_evaluation_finished":
        state.final = "done"
    elif name == "iteration_finished":
        state.between_iterations = True
    elif name == "subaction_started":
        state.between_iterations = False
        state.round[e["subaction"]] = ROUNDS[0]
    elif name in ("code_written", "training_result"):
        state.round[e.get("subaction") or _job_subaction(e.get("job", ""))] = ROUNDS[0]
    elif name == "evaluation_finished":
        sub = e["subaction"]
        if state.round.get(sub) == ROUNDS[0]:
            state.round[sub] = ROUNDS[1]  # what follows at once: drawing further worlds
    elif name == "comparison_extended":
        state.round[e["subaction"]] = ROUNDS[2]
    elif name == "rollout_started":
        sub = e.get("subtask", "")
        state.busy[actor] = "final evaluation" if state.final else state.round.get(sub, ROUNDS[0])
    elif name == "rollout_finished":
        state.busy.pop(actor, None)
    elif name == "training_started":
        state.busy[actor] = "training"
        # A job whose envs step in the learner's worker processes keeps one busy each.
        for i in range(1, int(e.get("workers") or 0)):
            state.busy[f"{actor}+{i}"] = "training"
    elif name == "training_finished":
        for key in [k for k in state.busy if k == actor or k.startswith(actor + "+")]:
            state.busy.pop(key)
    elif name == "actor_stopped" and actor in state.busy:
        state.busy.pop(actor, None)


def _job_subaction(job: str) -> str:
    """``collect_iron-it2-v3`` → ``collect_iron``."""
    return job.rsplit("-it", 1)[0]


def idle_by_cause(stretches: list[dict]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for s in stretches:
        if s["idle_core_s"] > 0:
            out[s["cause"]] += s["idle_core_s"]
    # Causes under 0.05 core-s in all are rounding (events a few microseconds apart).
    return dict(sorted(((k, v) for k, v in out.items() if v >= 0.05), key=lambda kv: -kv[1]))


def merged(stretches: list[dict], min_idle_s: float = 0.5) -> list[dict]:
    """Consecutive stretches of the same cause and busy set as one; those with at least
    ``min_idle_s`` idle core-seconds."""
    out: list[dict] = []
    for s in stretches:
        if out and out[-1]["cause"] == s["cause"] and out[-1]["busy"] == s["busy"]:
            out[-1]["t1"] = s["t1"]
            out[-1]["idle_core_s"] += s["idle_core_s"]
        else:
            out.append(dict(s))
    return [s for s in out if s["idle_core_s"] >= min_idle_s]


def starts_made(run_dir: Path) -> dict[str, int]:
    """From ``jobs.jsonl``: episodes from starts, starts made, distinct (sub-action,
    world) starts, and starts made again (made minus distinct)."""
    from messages import codec
    from messages.causes import SETUP_FAILED
    from messages.rollout import RolloutResult

    made: dict[tuple[str, int], int] = defaultdict(int)
    from_starts = 0
    path = run_dir / "jobs.jsonl"
    if not path.exists():
        return {}
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
            result = codec.decode(base64.b64decode(record["result"]), max_frame=1 << 30)
        except Exception:  # a torn or foreign line: what the journal skips too
            continue
        if not isinstance(result, RolloutResult):
            continue
        for ep in result.episodes:
            if ep.restored or ep.setup_steps > 0 or ep.cause == SETUP_FAILED:
                from_starts += 1
            if not ep.restored and (ep.setup_steps > 0 or ep.cause == SETUP_FAILED):
                made[(result.subtask, ep.seed)] += 1
    total = sum(made.values())
    return {
        "episodes_from_starts": from_starts,
        "starts_made": total,
        "distinct_starts": len(made),
        "starts_made_again": total - len(made),
    }


def analyse(run_dir: Path) -> dict:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    events = [e for e in events if "ts" in e and e.get("event") != "training_progress"]
    events.sort(key=event_time)
    stretches, cores = timeline(events)
    wall = stretches[-1]["t1"] if stretches else 0.0
    idle = idle_by_cause(stretches)
    return {
        "run_dir": str(run_dir),
        "cores": cores,
        "wall_s": wall,
        "busy_share": round(1 - sum(idle.values()) / (cores * wall), 3) if wall else 0.0,
        "idle_core_s": {k: round(v, 1) for k, v in idle.items()},
        "starts": starts_made(run_dir),
        "stretches": merged(stretches),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--timeline", action="store_true", help="print the idle stretches")
    parser.add_argument("--json", type=output_file, help="also write the figures here")
    args = parser.parse_args()
    events = args.run_dir / "events.jsonl"
    if not events.is_file():
        parser.error(
            f"{events}: no such file: RUN_DIR must be a run's folder (runs/<id>, the one "
            "holding its events.jsonl)"
        )
    try:
        figures = analyse(args.run_dir)
    except (OSError, ValueError, KeyError) as exc:
        # A log cut off mid-line (a killed run) or another program's file.
        print(f"bench_idle: {events}: cannot be read as a run's event log: {exc}", file=sys.stderr)
        return 1
    if args.timeline:
        for s in figures["stretches"]:
            print(
                f"{s['t0']:8.1f}–{s['t1']:8.1f} s  idle {s['idle_core_s']:6.1f} core-s  "
                f"{s['cause']:34} busy: {', '.join(s['busy']) or '-'}"
            )
        print()
    cores, wall = figures["cores"], figures["wall_s"]
    print(f"run: {figures['run_dir']}: {wall:.0f} s on {cores} cores")
    print(f"busy by events: {figures['busy_share']:.3f} of {cores * wall:.0f} core-s\n")
    print("| Cause | Idle core-s | Share of core-s |")
    print("|---|---:|---:|")
    for cause, secs in figures["idle_core_s"].items():
        print(f"| {cause} | {secs:,.1f} | {secs / (cores * wall):.1%} |")
    starts = figures["starts"]
    if starts:
        print(
            f"\nstarts: {starts['starts_made']} made for {starts['distinct_starts']} distinct"
            f" (sub-action, world): {starts['starts_made_again']} made again;"
            f" {starts['episodes_from_starts']} episodes from starts"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
