#!/usr/bin/env python3
"""Benchmark: the whole method against this machine's limit, in one command.

    python benchmarks/bench_method.py                       the default diamond run
    python benchmarks/bench_method.py --quick               a small run (~2 min)
    python benchmarks/bench_method.py --config X.toml       any run config
    python benchmarks/bench_method.py --json out.json
    python benchmarks/bench_method.py --max-s 300           stop the run at 300 s: the
                                                            figures of what it did so far

1. **The bare-loop limit**: one process per core, each stepping ``CrafterWorld`` with
   uniformly random actions and resetting at every episode's end (the world cache as a
   run has it), for ``--limit-s`` seconds; the sum of their steps per second.
2. **The run**: ``python run.py --config …`` in a fresh folder; from its ``summary.json``
   the counted env steps per wall second (every world step any process took, by kind:
   code evaluation, training, setup at training resets, held-out checks, final
   evaluation, play, video) and the core utilisation (busy CPU-seconds of the run's whole
   process tree over cores × wall, :mod:`runtime.cpu`).
3. The ratios, side by side: run steps/s ÷ limit, and utilisation. Targets (the
   throughput issue): ≥ 0.5 of the limit, ≥ 90 % of core-seconds busy.

Steps by phase are the run's counted steps by kind grouped as code evaluation (``code``),
training (``train``, ``setup``, ``held_out``) and the final policy (``final``, ``play``,
``video``), each as a share of the steps and per wall second of the whole run (phases
overlap in time, so per-phase wall time is not measured).

**Where the idle core-seconds are**: while the run goes, the CPU-seconds of its whole
process tree are read every second (:func:`runtime.cpu.tree_cpu_seconds`, Linux
``/proc``), and the run's own events cut its time into stretches (start, each PPO job,
the evaluations between them, the final evaluation, what follows it: :data:`MARKS`); the
table gives each stretch's wall seconds, cores busy on average and idle core-seconds.
``--json`` keeps the samples and the table.

Not a test: it prints numbers and exits 0 (1 if the run failed).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUICK = """
[run]
name = "bench-quick"
seed = 0

[task]
task = "make a stone pickaxe"
target = "stone_pickaxe"
success_target = 0.9
iterations = 2
revisions = 1
code_episodes = 8
eval_episodes = 8
train_steps = 2048
learn = ["place_table"]
env_steps = 40000

[actors.environment]
count = 2

[actors.learner]
count = 1
"""

PHASES = {
    "code evaluation": ("code",),
    "training": ("train", "setup", "held_out"),
    "final policy": ("final", "play", "video"),
}


MARKS = (
    "run_started",
    "plan_made",
    "training_started",
    "training_worker_ended",
    "incumbent_compared",
    "final_evaluation_started",
    "final_evaluation_finished",
    "run_finished",
)
"""Events that start a stretch of the busy-by-phase table (a PPO job runs from
``training_started`` to ``training_worker_ended``; the evaluations of its version follow
until ``incumbent_compared``)."""
SAMPLE_EVERY_S = 1.0


def sample_cpu(root: int, samples: list, stop: threading.Event) -> None:
    """Append ``(unix time, CPU-seconds of root's process tree)`` every
    :data:`SAMPLE_EVERY_S` until ``stop`` is set."""
    from runtime.cpu import tree_cpu_seconds

    while True:
        samples.append((time.time(), tree_cpu_seconds(root)))
        if stop.wait(SAMPLE_EVERY_S):
            samples.append((time.time(), tree_cpu_seconds(root)))
            return


def busy_by_phase(samples: list, events: list[dict], cores: int) -> list[dict]:
    """The run's time cut at its :data:`MARKS` events: per stretch its wall seconds, the
    CPU-seconds its process tree used then (samples apportioned by overlap) and the idle
    core-seconds, ``cores`` × wall − busy. Stretches are named by the events that open
    and close them, repeated events numbered (``training_started 2``)."""
    from bench_idle import event_time

    seen: dict[str, int] = {}
    marks = []
    # In time order: actors' events reach the log in the order they arrive.
    for e in sorted((e for e in events if e.get("event") in MARKS), key=event_time):
        name = e["event"]
        seen[name] = seen.get(name, 0) + 1
        marks.append((event_time(e), name if seen[name] == 1 else f"{name} {seen[name]}"))
    rates = [
        (t0, t1, (c1 - c0) / (t1 - t0))
        for (t0, c0), (t1, c1) in zip(samples, samples[1:], strict=False)
        if t1 > t0
    ]
    rows = []
    for (a, first), (b, last) in zip(marks, marks[1:], strict=False):
        busy = sum(rate * max(0.0, min(t1, b) - max(t0, a)) for t0, t1, rate in rates)
        rows.append({"from": first, "to": last, "wall_s": round(b - a, 1),
                     "busy_cores": round(busy / (b - a), 2) if b > a else 0.0,
                     "idle_core_s": round(cores * (b - a) - busy, 1)})  # fmt: skip
    return rows


def _bare_loop(seconds: float, seed: int, pool: int, out: multiprocessing.Queue) -> None:
    import numpy as np

    from worlds.crafter_world import CrafterWorld

    world, rng = CrafterWorld(), np.random.default_rng(seed)
    names = list(world.action_names)
    world.reset(seed)  # the world generator's JIT compile is not part of the limit
    steps, episode = 0, seed * 1_000_000
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        # A fresh world every episode, or worlds again from a pool (the world cache's
        # restores, as training on a pool of worlds gets them).
        world.reset(episode if pool <= 0 else seed * 1_000_000 + episode % pool)
        episode += 1
        for _ in range(10_000):
            steps += 1
            if world.step(names[rng.integers(len(names))])[2]:
                break
    out.put(steps / (time.perf_counter() - start))


def bare_limit(cores: int, seconds: float, pool: int = 0) -> float:
    """Steps per second of ``cores`` bare loops at once."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_bare_loop, args=(seconds, i + 1, pool, out)) for i in range(cores)]
    for p in procs:
        p.start()
    rates = [out.get(timeout=seconds + 300) for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


def run_method(
    config: Path, workdir: Path, max_s: float = 0.0, samples: list | None = None
) -> tuple[int, dict, str]:
    """Run ``run.py --config config`` in ``workdir``; its status, ``summary.json`` and folder.
    With ``max_s`` > 0 a run still going then is stopped with SIGTERM (the head stops every
    actor and keeps what was booked) and the summary is the partial one of
    :func:`partial_summary`, marked ``cut_at_s``. ``samples``, when given, gets the run's
    CPU samples (:func:`sample_cpu`)."""
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    log = (workdir / "run.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), "--config", str(config)],
        cwd=workdir,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    stop = threading.Event()
    sampler = threading.Thread(
        target=sample_cpu, args=(proc.pid, samples if samples is not None else [], stop)
    )
    sampler.start()
    cut = False
    try:
        proc.wait(timeout=max_s if max_s > 0 else None)
    except subprocess.TimeoutExpired:
        cut = True
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    finally:
        stop.set()
        sampler.join()
    wall = time.monotonic() - started
    log.close()
    print(f"run {'cut' if cut else 'finished'} after {wall:.0f} s (status {proc.returncode})")
    runs = sorted((workdir / "runs").glob("*/"))
    if cut and runs:
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return 0, partial_summary(runs[-1], wall, cpu), str(runs[-1])
    done = [r for r in runs if (r / "summary.json").exists()]
    if proc.returncode != 0 or not done:
        print((workdir / "run.log").read_text()[-3000:])
        return proc.returncode or 1, {}, ""
    return 0, json.loads((done[-1] / "summary.json").read_text()), str(done[-1])


def partial_summary(run_dir: Path, wall_s: float, cpu_s: float) -> dict:
    """The figures of a run stopped at ``wall_s``, from what its ledger booked by then
    (every counted world step) and the CPU-seconds of its whole process tree."""
    from method import ledger
    from runtime.cpu import available_cores

    lines = ledger.read(run_dir)
    steps = ledger.tally(lines)["steps"]
    cores = available_cores()
    return {
        "cut_at_s": wall_s,
        "wall_s": wall_s,
        "env_steps": steps,
        "session_env_steps": steps,
        "env_steps_by_kind": ledger.steps_by_kind(lines),
        "env_steps_per_s": round(steps / wall_s, 1),
        "cpu_s": round(cpu_s, 1),
        "cores": cores,
        "core_utilisation": round(cpu_s / (cores * wall_s), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    from rlgpt.cli import number, output_file

    parser.add_argument("--config", type=Path, default=ROOT / "rlgpt/configs/diamond.toml")
    parser.add_argument("--quick", action="store_true", help="a small run instead (~2 min)")
    parser.add_argument(
        "--limit-s", type=number(float, 0.1), default=20.0, help="bare-loop seconds"
    )
    parser.add_argument(
        "--pool",
        type=number(int, 0),
        default=0,
        help="bare loop: reset into a pool of this many worlds (cache restores) instead of "
        "a fresh world every episode (0, the default)",
    )
    parser.add_argument("--limit-only", action="store_true", help="measure the limit, no run")
    parser.add_argument(
        "--max-s",
        type=number(float, 0),
        default=0.0,
        help="stop the run after this many seconds and report what it booked by then "
        "(0, the default: let it finish)",
    )
    parser.add_argument("--json", type=output_file, help="also write the figures here")
    args = parser.parse_args()

    from runtime.cpu import available_cores

    cores = available_cores()
    print(
        f"machine: {cores} cores, {platform.processor() or platform.machine()}, python "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.2f} (other load "
        "lowers both the limit and the run)"
    )
    limit = bare_limit(cores, args.limit_s, args.pool)
    worlds = f"a pool of {args.pool} worlds" if args.pool > 0 else "a fresh world each episode"
    print(
        f"bare-loop limit: {limit:,.0f} steps/s ({cores} processes, random actions, resets "
        f"into {worlds})"
    )
    if args.limit_only:
        return 0

    # The run's folder is kept (its report, events and ledger back the figures).
    workdir = Path(tempfile.mkdtemp(prefix="bench-method-"))
    config = args.config
    if args.quick:
        config = workdir / "quick.toml"
        config.write_text(QUICK)
    print(f"run: python run.py --config {config} (in {workdir})")
    samples: list = []
    status, summary, run_dir = run_method(config, workdir, args.max_s, samples)
    if status:
        return 1
    rate = summary["env_steps_per_s"]
    by_kind = summary["env_steps_by_kind"]
    total = max(1, summary["session_env_steps"])
    wall = summary["wall_s"]
    print()
    print("| Measure | Value | Ratio |")
    print("|---|---:|---:|")
    print(f"| bare-loop limit ({cores} cores) | {limit:,.0f} steps/s | 1.00 |")
    print(f"| the run: counted env steps / wall s | {rate:,.0f} steps/s | {rate / limit:.3f} |")
    for phase, kinds in PHASES.items():
        steps = sum(by_kind.get(k, 0) for k in kinds)
        print(
            f"| — {phase} ({', '.join(kinds)}) | {steps / wall:,.0f} steps/s, "
            f"{steps:,} steps | {steps / total:.0%} of steps |"
        )
    print(
        f"| core utilisation | {summary['cpu_s']:,.0f} CPU-s / ({cores} × {wall:,.0f} s) |"
        f" {summary['core_utilisation']:.3f} |"
    )
    if "cut_at_s" in summary:
        print(
            f"\nrun CUT at {wall:,.0f} s (--max-s): {summary['env_steps']:,} env steps booked by "
            "then; no final policy; the figures above cover the part that ran"
        )
    else:
        print(
            f"\nrun: {summary['env_steps']:,} env steps in {wall:,.0f} s; final success "
            f"{summary['final_success']:.2f} on {summary['final_episodes']} episodes; "
            f"targets: ratio ≥ 0.5, utilisation ≥ 0.9"
        )
    events_path = Path(run_dir) / "events.jsonl"
    phases = []
    if events_path.is_file() and len(samples) > 1:
        events = [json.loads(line) for line in events_path.read_text().splitlines() if line]
        phases = busy_by_phase(samples, events, cores)
    if phases:
        print("\n| stretch of the run | wall s | cores busy | idle core-s |")
        print("|---|---:|---:|---:|")
        for row in phases:
            print(
                f"| {row['from']} → {row['to']} | {row['wall_s']:.1f} | "
                f"{row['busy_cores']:.2f} | {row['idle_core_s']:.1f} |"
            )
    if args.json:
        figures = {
            "cores": cores,
            "limit_steps_per_s": round(limit, 1),
            "run_steps_per_s": rate,
            "ratio": round(rate / limit, 4),
            "core_utilisation": summary["core_utilisation"],
            "summary": summary,
            "run_dir": run_dir,
            "phases": phases,
            "cpu_samples": [[round(t, 3), round(c, 2)] for t, c in samples],
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
