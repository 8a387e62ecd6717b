#!/usr/bin/env python3
"""Benchmark: Crafter steps/s along each path a step can take, side by side in one run.

    python benchmarks/bench_env.py           full run (~2-3 min on 2 cores)
    python benchmarks/bench_env.py --quick   fewer steps (< 1 min)
    python benchmarks/bench_env.py --json out.json

Paths, all stepping the same worlds (same seeds, same episode cap) with uniformly random
primitive actions, world resets included:

  (a0) stock ``crafter.Env`` (renders a frame every step; reference only)
  (a)  bare loop: ``CrafterWorld.step`` with random actions
  (b)  the RL-interface env (``envs.rl_env``) with random actions from its action space
  (c)  a coded random policy through the sandbox, skill API and trace, in-process
       (the environment actor's own rollout code, without messaging)
  (d1) the same rollouts through 1 environment actor process (head + broker + actor)
  (d2) the same through 2 environment actor processes, seeds split between them

(d1) and (d2) send the seeds as 4 jobs per actor, so the broker evens out episodes of
unequal length. World generation is timed in every path (the world cache is off).

Each path runs several rounds interleaved with the others and keeps its fastest: other
load on a shared machine only slows a path down. Goals (from the project's issue):
(d2) ≥ 1.7 × (d1), and the actor path per process (d1) ≥ 0.9 × the bare loop (a).
Not a test: it prints numbers and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Every path pays world generation on every reset, as a fresh world per episode costs;
# set before crafter_world is imported here and inherited by the actor processes.
os.environ["RLGPT_WORLD_CACHE"] = "0"

import numpy as np  # noqa: E402
import trio  # noqa: E402

from envs.crafter_world import CrafterWorld  # noqa: E402
from envs.runner import Rollouts  # noqa: E402
from messages.rollout import RolloutRequest  # noqa: E402
from messages.task import Subtask  # noqa: E402
from method.split import rollout_split  # noqa: E402
from runtime import events  # noqa: E402
from runtime.config import ActorSettings, RunSettings, RuntimeSettings, Settings  # noqa: E402
from runtime.head import Head, new_run_dir, run_head  # noqa: E402

RANDOM_POLICY = """\
import random
def run(skills):
    actions = {actions!r}
    while True:
        yield random.choice(actions)
"""
# An impossible goal: every episode runs to its cap (or the player's death).
ENDLESS = {"diamond": 99}


def bare(seeds: list[int], cap: int) -> int:
    world, rng, steps = CrafterWorld(), np.random.default_rng(0), 0
    names = list(world.action_names)
    for seed in seeds:
        world.reset(seed)
        for _ in range(cap):
            steps += 1
            if world.step(names[rng.integers(len(names))])[2]:
                break
    return steps


def stock(seeds: list[int], cap: int) -> int:
    import crafter

    rng, steps = np.random.default_rng(0), 0
    for seed in seeds:
        env = crafter.Env(seed=seed, length=cap)
        env.reset()
        done = False
        while not done:
            steps += 1
            done = env.step(int(rng.integers(env.action_space.n)))[2]
    return steps


def rl_env(seeds: list[int], cap: int) -> int | None:
    try:
        from envs.configs import collect_wood_primitive
        from envs.rl_env import SubtaskEnv
    except ImportError:
        return None
    base = collect_wood_primitive()
    subtask = Subtask("endless", goal=ENDLESS, max_steps=cap)
    config = type(base)(**{**{f: getattr(base, f) for f in base.__dataclass_fields__},
                           "subtask": subtask, "primitives": []})  # fmt: skip
    env, steps = SubtaskEnv(config), 0
    env.action_space.seed(0)
    for seed in seeds:
        env.reset(seed=seed)
        while True:
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            steps += int(info.get("primitive_steps", 1))
            if terminated or truncated:
                break
    return steps


def request(seeds: list[int], cap: int) -> RolloutRequest:
    actions = list(CrafterWorld().action_names)
    return RolloutRequest(
        Subtask("endless", goal=ENDLESS, max_steps=cap),
        code=RANDOM_POLICY.format(actions=actions),
        seeds=seeds,
        wall_s=600,
    )


def sandboxed(seeds: list[int], cap: int) -> int:
    rollouts = Rollouts()  # what an environment actor's runner runs, in this process
    rollouts.warm()  # as the runner's start does
    return rollouts.run(request(seeds, cap), lambda episode: None).steps


def through_actors(seeds: list[int], cap: int, count: int, rounds: int) -> list[tuple[int, float]]:
    """(steps, seconds) per round for the rollouts through ``count`` actor processes,
    timed from the request to the merged result (actor start-up excluded)."""
    runs = Path(tempfile.mkdtemp(prefix="bench-env-"))
    settings = Settings(
        run=RunSettings(name="bench", runs_dir=str(runs)),
        runtime=RuntimeSettings(),
        actors={"environment": ActorSettings(count=count)},
        source="<bench>",
    )
    out: list[tuple[int, float]] = []

    async def driver(head: Head) -> dict:
        await head.wait_for("environment", count)
        for _ in range(rounds):
            started = time.perf_counter()
            # Several small jobs per actor, so the broker evens out unequal episodes.
            result = await rollout_split(head.client, request(seeds, cap), parts=4 * count)
            out.append((result.steps, time.perf_counter() - started))
        return {}

    run_id, run_dir = new_run_dir(settings)
    code = trio.run(run_head, settings, run_dir, run_id, driver, "error")
    if code != 0:
        raise SystemExit(f"actor run failed ({code}); see {run_dir}/events.jsonl")
    return out


def timed(fn, *args) -> tuple[int | None, float]:
    started = time.perf_counter()
    steps = fn(*args)
    return steps, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer episodes (< 1 min)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    episodes, cap = (12, 1000) if args.quick else (40, 1000)
    seeds = list(range(100, 100 + episodes))
    events.configure(console=None)
    print(f"machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
          f"python {platform.python_version()}; load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"{episodes} episodes (seeds {seeds[0]}..{seeds[-1]}), cap {cap} steps, random actions\n")
    CrafterWorld().reset(0)  # compile Crafter's world generator once, outside every timing
    # Other load on a shared machine only ever slows a path down, so each path runs
    # ``rounds`` times, interleaved with the others, and keeps its fastest round.
    rounds = 2 if args.quick else 3
    local = {
        "a0 stock crafter.Env": stock,
        "a  bare CrafterWorld loop": bare,
        "b  RL-interface env": rl_env,
        "c  sandboxed coded policy": sandboxed,
    }
    trials: dict[str, list[tuple[int | None, float]]] = {name: [] for name in local}
    for _ in range(rounds):
        for name, fn in local.items():
            trials[name].append(timed(fn, seeds, cap))
    trials["d1 1 environment actor"] = through_actors(seeds, cap, 1, rounds)
    trials["d2 2 environment actors"] = through_actors(seeds, cap, 2, rounds)
    rows = {name: max(runs, key=lambda r: (r[0] or 0) / r[1]) for name, runs in trials.items()}
    rate = {k: (s / t if s else None) for k, (s, t) in rows.items()}
    base = rate["a  bare CrafterWorld loop"]
    print(f"{'path':<28} {'steps':>8} {'seconds':>8} {'steps/s':>9} {'vs (a)':>7}")
    for name, (steps, secs) in rows.items():
        if steps is None:
            print(f"{name:<28} {'n/a (envs.rl_env missing)':>34}")
            continue
        print(f"{name:<28} {steps:>8} {secs:>8.2f} {rate[name]:>9.0f} {rate[name] / base:>7.2f}")
    scale = rate["d2 2 environment actors"] / rate["d1 1 environment actor"]
    per_proc = rate["d1 1 environment actor"] / base
    print(f"\n(d2)/(d1) = {scale:.2f}  (goal >= 1.7: {'met' if scale >= 1.7 else 'MISSED'})")
    print(f"(d1)/(a)  = {per_proc:.2f}  (goal >= 0.9: {'met' if per_proc >= 0.9 else 'MISSED'})")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "rate": rate}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
