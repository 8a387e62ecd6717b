#!/usr/bin/env python3
"""Benchmark: how Crafter stepping scales with workers, bare loops and environment actors.

    python benchmarks/bench_scaling.py                        1, 2, 4, 8, 16 workers
    python benchmarks/bench_scaling.py --workers 1,2 --quick  a small check (< 1 min)
    python benchmarks/bench_scaling.py --json out.json

For each worker count N, side by side in one command:

1. **bare loops**: N processes stepping ``CrafterWorld`` with random actions, a fresh
   world every episode (``bench_method.bare_limit``): the machine's limit at N workers.
2. **environment actors**: a head with N environment actor processes running a coded
   random policy through the broker, the sandbox and the skill API
   (``bench_env.through_actors``), 4 jobs per actor so the broker evens out episodes of
   unequal length; ``--episodes`` episodes per actor (weak scaling: the work grows with N),
   best of ``--rounds`` rounds, actor start-up excluded.

Printed: steps/s at each N, the speed-up over N = 1 for both, the parallel efficiency
(speed-up / N) and the actors' share of the bare limit at the same N. World generation is
paid on every reset in both (the world cache is off), as ``bench_env`` does.

Not a test: it prints numbers and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# bench_env turns the world cache off on import (inherited by every process started here).
from bench_env import through_actors  # noqa: E402
from bench_method import bare_limit  # noqa: E402

from rlgpt.cli import number, output_file  # noqa: E402
from runtime import events  # noqa: E402
from runtime.cpu import available_cores  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4,8,16", help="worker counts, comma-separated")
    parser.add_argument(
        "--seconds", type=number(float, 0.1), default=6.0, help="bare-loop seconds per count"
    )
    parser.add_argument(
        "--episodes", type=number(int, 1), default=16, help="episodes per actor per round"
    )
    parser.add_argument(
        "--cap", type=number(int, 1), default=1000, help="steps per episode at most"
    )
    parser.add_argument(
        "--rounds", type=number(int, 1), default=2, help="actor rounds; the best is kept"
    )
    parser.add_argument("--quick", action="store_true", help="2 s loops, 1 round, cap 300")
    parser.add_argument("--json", type=output_file, help="also write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds, args.cap = 2.0, 1, 300
    try:
        counts = [int(n) for n in args.workers.split(",") if n.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        parser.error(f"--workers {args.workers!r}: expected positive integers, e.g. 1,2,4")
    cores = available_cores()
    events.configure(console=None)
    print(
        f"machine: {cores} cores, {platform.processor() or platform.machine()}, python "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.2f}"
    )
    if max(counts) > cores:
        print(f"note: {max(counts)} workers on {cores} cores: counts above {cores} share cores")
    print(
        f"actors: {args.episodes} episodes per actor per round, cap {args.cap} steps, "
        f"best of {args.rounds} round(s); bare loops: {args.seconds:g} s each\n"
    )
    rows = []
    for n in counts:
        started = time.monotonic()
        bare = bare_limit(n, args.seconds)
        seeds = list(range(100, 100 + args.episodes * n))
        rounds = through_actors(seeds, args.cap, n, args.rounds)
        steps, secs = max(rounds, key=lambda r: r[0] / r[1])
        rows.append({"workers": n, "bare": bare, "actors": steps / secs, "actor_steps": steps,
                     "actor_s": secs, "wall_s": time.monotonic() - started})  # fmt: skip
        print(
            f"  {n:>2} workers: bare {bare:,.0f} steps/s, actors {steps / secs:,.0f} steps/s "
            f"({steps:,} steps in {secs:.2f} s); {time.monotonic() - started:.0f} s",
            flush=True,
        )
    one = rows[0]
    print(
        "\n| workers | bare loops steps/s | speed-up | efficiency | env actors steps/s "
        "| speed-up | efficiency | actors / bare |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        n = r["workers"] / one["workers"]
        sb, sa = r["bare"] / one["bare"], r["actors"] / one["actors"]
        r.update(bare_speedup=sb, actor_speedup=sa, actors_over_bare=r["actors"] / r["bare"])
        print(
            f"| {r['workers']} | {r['bare']:,.0f} | {sb:.2f} | {sb / n:.2f} | {r['actors']:,.0f} "
            f"| {sa:.2f} | {sa / n:.2f} | {r['actors'] / r['bare']:.2f} |"
        )
    print(f"\nspeed-ups and efficiencies are against {one['workers']} worker(s)")
    if args.json:
        figures = {"cores": cores, "machine": platform.processor() or platform.machine(),
                   "python": platform.python_version(), "args": {**vars(args), "json": None},
                   "rows": rows}  # fmt: skip
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
