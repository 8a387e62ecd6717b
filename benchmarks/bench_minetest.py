#!/usr/bin/env python3
"""Benchmark: the Minetest world's actions per second, reset time and server memory.

    python benchmarks/bench_minetest.py                 5 seeds × 2,000 actions (~1 min)
    python benchmarks/bench_minetest.py --quick         2 seeds × 300 actions
    python benchmarks/bench_minetest.py --json out.json

For each seed (100, 101, …) one ``MinetestWorld`` with the default voxel window
(9 × 8 × 9 nodes):

- cold reset: a new ``minetestserver`` started for the seed, the world generated around
  the spawn point and the first observation back (what a new seed costs);
- warm reset: ``reset`` on the same seed again, which deletes every generated mapchunk
  and generates them anew in the running server (what another episode in the same world
  costs);
- actions per second: uniformly random actions (every action name, crafting included),
  observations built in Python, episodes reset when they end (within the timing);
- server memory: the server's resident set (VmRSS) after the actions, and its peak (VmHWM).

Not a test: it prints numbers and exits 0 (2 without Minetest installed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from worlds.minetest import MinetestWorld, minetest_missing  # noqa: E402


def memory_mb(pid: int) -> tuple[float, float]:
    """(resident, peak resident) of a process in MB, from /proc."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return int(fields["VmRSS"][0]) / 1024, int(fields["VmHWM"][0]) / 1024


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}, python {platform.python_version()}"


def bench_seed(seed: int, actions: int) -> dict:
    with MinetestWorld() as world:
        started = time.perf_counter()
        world.reset(seed)
        cold = time.perf_counter() - started
        for _ in range(20):
            world.step("forward")
        started = time.perf_counter()
        world.reset(seed)
        warm = time.perf_counter() - started
        rng = random.Random(seed)
        names = list(world.action_names)
        started = time.perf_counter()
        episodes = 1
        for _ in range(actions):
            _, _, done, _ = world.step(rng.choice(names))
            if done:
                world.reset(seed)
                episodes += 1
        elapsed = time.perf_counter() - started
        rss, peak = memory_mb(world.server_pid)
    return {
        "seed": seed,
        "cold_reset_s": cold,
        "warm_reset_s": warm,
        "actions": actions,
        "actions_per_s": actions / elapsed,
        "episodes": episodes,
        "server_rss_mb": rss,
        "server_peak_rss_mb": peak,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="how many world seeds")
    parser.add_argument("--first-seed", type=int, default=100, help="the first seed")
    parser.add_argument("--actions", type=int, default=2000, help="random actions per seed")
    parser.add_argument("--quick", action="store_true", help="2 seeds × 300 actions")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.actions = 2, 300
    if args.seeds < 1 or args.actions < 1 or args.first_seed < 0:
        parser.error("--seeds and --actions must be ≥ 1, --first-seed ≥ 0")
    problem = minetest_missing()
    if problem:
        print(f"bench_minetest: {problem}", file=sys.stderr)
        return 2
    print(f"machine: {machine()}")
    rows = []
    print("seed  cold reset s  warm reset s  actions/s  server RSS MB (peak)")
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        row = bench_seed(seed, args.actions)
        rows.append(row)
        print(
            f"{seed:>4}  {row['cold_reset_s']:>12.3f}  {row['warm_reset_s']:>12.3f}  "
            f"{row['actions_per_s']:>9.0f}  {row['server_rss_mb']:>7.0f} "
            f"({row['server_peak_rss_mb']:.0f})"
        )

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    print(
        f"median: cold reset {median('cold_reset_s'):.3f} s, warm reset "
        f"{median('warm_reset_s'):.3f} s, {median('actions_per_s'):.0f} actions/s, "
        f"server RSS {median('server_rss_mb'):.0f} MB (peak {median('server_peak_rss_mb'):.0f})"
    )
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
