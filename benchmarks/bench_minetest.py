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

With ``--chain``, the diamond chain by coded skills (``worlds/minetest/chain.py``, the
project's own template code, no model) instead, on each seed of the range, as the policy
source the method's fast agent hands the environment: the text of
:mod:`worlds.minetest.templates`, run in the sandbox (``run_voxel_code``):

    python benchmarks/bench_minetest.py --chain --first-seed 1000000 --seeds 50 --json X.json

- the whole chain from an empty inventory at the spawn point, within ``CHAIN_BUDGET``
  steps, and where it stopped (the step that gave up, or died, or ran out of steps);
- each step alone, from ``START_STATES`` (what the chain carries on reaching it) at the
  spawn point, within the step's own budget;
- per episode: success, steps, wall time, actions per second (planning included), the
  warm reset time; per seed: the cold reset and the server's memory after the episodes.

Development looked at seeds 0–99 only (``DEV_SEEDS``); report on a range never looked at.

Not a test: it prints numbers and exits 0 (2 without Minetest installed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from worlds.minetest import CHAIN, MinetestWorld, minetest_missing  # noqa: E402
from worlds.minetest.skills import run_voxel_code  # noqa: E402
from worlds.minetest.templates import (  # noqa: E402
    CHAIN_BUDGET,
    CRAFT_BUDGET,
    START_STATES,
    STEP_BUDGETS,
    chain_code,
    record,
    step_budget,
    step_code,
)
from worlds.minetest.world import PLAYER_RADIUS  # noqa: E402

CHAIN_STEPS = tuple(CHAIN)


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


DEV_SEEDS = (0, 99)
"""The seeds the chain was developed on (first, last): a report range must avoid them."""
CHAIN_WALL_S = 1800.0
"""Wall-clock budget of one episode in the sandbox: no limit in practice (the whole chain
takes seconds to a minute), only a guard against a policy that stops acting."""


def run_episode(world, source: str, budget: int, seed: int, inventory=None) -> dict:
    started = time.perf_counter()
    result = run_voxel_code(
        world, source, budget, seed=seed, inventory=inventory, wall_s=CHAIN_WALL_S
    )
    wall = time.perf_counter() - started - result["reset_s"]
    reset_s = result["reset_s"]
    dead = result["status"]["health"] <= 0
    return {
        "success": result["success"],
        "cause": result["cause"],
        "steps": result["steps"],
        "wall_s": wall,
        "actions_per_s": result["steps"] / wall if wall > 0 else 0.0,
        "reset_s": reset_s,
        "dead": dead,
        "out_of_steps": result["steps"] >= budget,
        "health": result["status"]["health"],
        "altitude": result["position"][1],
        "record": [[item, ok, steps] for item, ok, steps in record(result["output"])],
    }


CHAIN_RADIUS = PLAYER_RADIUS


def bench_chain_seed(seed: int, steps: list[str], radius: int = CHAIN_RADIUS) -> dict:
    with MinetestWorld(radius=radius) as world:
        started = time.perf_counter()
        world.reset(seed)
        cold = time.perf_counter() - started
        whole = run_episode(world, chain_code(), CHAIN_BUDGET, seed)
        whole["stopped_at"] = next((item for item, ok, _ in whole["record"] if not ok), None)
        if whole["stopped_at"] is None and not whole["success"]:
            # Ran out of steps inside a step: the one after the last that finished.
            done = [item for item, ok, _ in whole["record"]]
            whole["stopped_at"] = CHAIN_STEPS[len(done)] if len(done) < len(CHAIN_STEPS) else None
        whole["progress"] = world.progress()
        alone = {}
        for item in steps:
            alone[item] = run_episode(
                world,
                step_code(item),
                step_budget(item),
                seed,
                inventory=START_STATES[item],
            )
        rss, peak = memory_mb(world.server_pid)
    return {
        "seed": seed,
        "cold_reset_s": cold,
        "chain": whole,
        "steps": alone,
        "server_rss_mb": rss,
        "server_peak_rss_mb": peak,
    }


def chain_main(args) -> int:
    first, last = args.first_seed, args.first_seed + args.seeds - 1
    if not (last < DEV_SEEDS[0] or first > DEV_SEEDS[1]) and not args.dev:
        print(
            f"bench_minetest: seeds {first}–{last} overlap the development seeds "
            f"{DEV_SEEDS[0]}–{DEV_SEEDS[1]} (pass --dev to look at them anyway)",
            file=sys.stderr,
        )
        return 2
    steps = list(CHAIN_STEPS) if args.steps is None else args.steps.split(",")
    print(f"machine: {machine()}")
    print(f"chain budget {CHAIN_BUDGET} steps; step budgets {STEP_BUDGETS}, crafts {CRAFT_BUDGET}")
    rows = []
    for seed in range(first, last + 1):
        row = bench_chain_seed(seed, steps, args.radius)
        rows.append(row)
        c = row["chain"]
        alone = " ".join(
            f"{item.split(':')[1]}={'Y' if r['success'] else 'n'}"
            for item, r in row["steps"].items()
        )
        print(
            f"{seed}: chain {'OK' if c['success'] else 'stopped at ' + str(c['stopped_at'])}"
            f" ({c['steps']} steps, {c['wall_s']:.1f} s, {c['actions_per_s']:.0f}/s"
            f"{', dead' if c['dead'] else ''}); alone: {alone}; RSS {row['server_rss_mb']:.0f} MB",
            flush=True,
        )
        if args.json:
            write_chain(args.json, rows, first, last, steps, args.radius)
    n = len(rows)
    for item in CHAIN_STEPS:
        got = sum(1 for r in rows if any(i == item and ok for i, ok, _ in r["chain"]["record"]))
        print(f"chain reached {item}: {got}/{n}")
    for item in steps:
        k = sum(r["steps"][item]["success"] for r in rows)
        print(f"alone {item}: {k}/{n}")
    if args.json:
        write_chain(args.json, rows, first, last, steps, args.radius)
    return 0


def commit() -> str:
    """The checkout's commit (with "+changes" when the tree differs from it)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return head + ("+changes" if dirty else "")


def write_chain(
    path: Path, rows: list, first: int, last: int, steps: list[str], radius: int
) -> None:
    path.write_text(
        json.dumps(
            {
                "machine": machine(),
                "policy": "worlds/minetest/chain.py (the project's template code, no model), "
                "run in the sandbox",
                "commit": commit(),
                "dev_seeds": list(DEV_SEEDS),
                "report_seeds": [first, last],
                "chain_budget": CHAIN_BUDGET,
                "window_radius": radius,
                "step_budgets": {item: step_budget(item) for item in steps},
                "chain_steps": list(CHAIN_STEPS),
                "start_states": {item: START_STATES[item] for item in steps},
                "results": rows,
            },
            indent=1,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="how many world seeds")
    parser.add_argument("--first-seed", type=int, default=100, help="the first seed")
    parser.add_argument("--actions", type=int, default=2000, help="random actions per seed")
    parser.add_argument("--quick", action="store_true", help="2 seeds × 300 actions")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--chain", action="store_true", help="the diamond chain by coded skills")
    parser.add_argument("--steps", help="with --chain: only these steps alone (comma-separated)")
    parser.add_argument("--dev", action="store_true", help="allow the development seeds")
    parser.add_argument(
        "--radius", type=int, default=CHAIN_RADIUS, help="with --chain: the window's reach"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.actions = 2, 300
    if args.seeds < 1 or args.actions < 1 or args.first_seed < 0:
        parser.error("--seeds and --actions must be ≥ 1, --first-seed ≥ 0")
    problem = minetest_missing()
    if problem:
        print(f"bench_minetest: {problem}", file=sys.stderr)
        return 2
    if args.chain:
        return chain_main(args)
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
