#!/usr/bin/env python3
"""Benchmark: PPO over coded options for the Minetest tree search, against the code.

    python benchmarks/bench_minetest_rl.py --train-steps 1024 --first-seed 3000000 \\
        --seeds 50 --json X.json

Trains PPO (stable-baselines3, ``MlpPolicy``) on :class:`rl.voxel_options.VoxelTreeOptions`
(coded options over the 3-D skills, run through the sandbox; a fresh training seed
from 10,000 on each episode), then runs paired on each evaluation seed, from the same
start (the spawn point, an empty inventory) and within the same budget (the coded tree
search's 3,000 primitive steps):

- ``coded``: ``worlds/minetest/chain.py``'s ``get_trees`` alone;
- ``learned``: the trained policy (deterministic) choosing among the options.

Success for both: the step's goal carried (4 trunks, the chain's start state for
planks). Reports successes with 95 % Wilson intervals, the paired difference (learned
minus coded) with the worlds each gained and lost, an exact McNemar p-value and the
exact (Clopper–Pearson, conditional on the discordant worlds) interval of the
difference, the median primitive steps of successes, training steps and wall time.

``--arms coded`` or ``--arms learned`` runs one arm (``--policy`` loads a trained
policy instead of training with ``--train-steps 0``); ``--combine A.json B.json``
joins two such runs' rows into the paired figures. Progress goes to stderr.

Development looked at seeds 0–999 only (``DEV_SEEDS``); training uses 10,000–10,999.
Exits 2 without Minetest.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from method.paired import wilson_interval  # noqa: E402
from rl.voxel_options import (  # noqa: E402
    BUDGET,
    OPTIONS,
    RADIUS,
    TRAIN_SEEDS,
    TRUNKS,
    WANT,
    VoxelTreeOptions,
    run_learned,
)
from worlds.minetest import MinetestWorld, minetest_missing  # noqa: E402
from worlds.minetest.chain import get_trees  # noqa: E402
from worlds.minetest.skills import run_voxel_policy  # noqa: E402

DEV_SEEDS = (0, 999)
PPO_SETTINGS = {
    "n_steps": 128,
    "batch_size": 64,
    "n_epochs": 4,
    "learning_rate": 3e-4,
    "gamma": 0.98,
    "ent_coef": 0.01,
}
"""PPO's settings (the rest SB3's defaults): small rollouts, since a decision costs an
option's worth of primitive steps (tens) in a real server."""


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def train(steps: int, first_seed: int, seed: int, save: Path | None) -> tuple:
    """PPO for ``steps`` decisions on fresh training seeds; (model, training record)."""
    from stable_baselines3 import PPO

    env = VoxelTreeOptions(seeds=range(first_seed, TRAIN_SEEDS[1]))
    episodes: list[dict] = []
    started = time.perf_counter()

    class Log(__import__("gymnasium").Wrapper):
        def step(self, action):
            out = super().step(action)
            if out[2] or out[3]:
                info = out[4]
                episodes.append({k: info[k] for k in ("seed", "success", "steps", "decisions")})
                done = sum(e["success"] for e in episodes)
                say(
                    f"train episode {len(episodes)} seed {info['seed']}: "
                    f"{'OK' if info['success'] else 'no'} in {info['steps']} steps "
                    f"({done}/{len(episodes)} so far, {time.perf_counter() - started:.0f} s)"
                )
            return out

    model = PPO("MlpPolicy", Log(env), seed=seed, device="cpu", verbose=0, **PPO_SETTINGS)
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - started
    primitive = env.world.steps_taken
    env.close()
    if save is not None:
        model.save(save)
    record = {
        "decisions": model.num_timesteps,
        "primitive_steps": primitive,
        "episodes": len(episodes),
        "episode_successes": sum(e["success"] for e in episodes),
        "wall_s": wall,
        "seeds": [first_seed, first_seed + len(episodes) - 1] if episodes else [],
        "ppo": PPO_SETTINGS,
        "per_episode": episodes,
    }
    return model, record


def carried(inventory: dict) -> int:
    return sum(inventory.get(t, 0) for t in TRUNKS)


def evaluate(seeds: list[int], arms: list[str], model) -> list[dict]:
    """Each arm on each seed in one reused world (a seed's server serves both arms)."""
    rows = []
    with MinetestWorld(radius=RADIUS) as world:
        env = VoxelTreeOptions(world=world, seeds=())
        for seed in seeds:
            row: dict = {"seed": seed}
            if "coded" in arms:
                started = time.perf_counter()
                result = run_voxel_policy(world, get_trees, BUDGET, seed=seed)
                row["coded"] = {
                    "success": carried(result["inventory"]) >= WANT,
                    "steps": result["steps"],
                    "trunks": carried(result["inventory"]),
                    "wall_s": time.perf_counter() - started - result["reset_s"],
                }
            if "learned" in arms:
                row["learned"] = run_learned(env, model, seed)
            rows.append(row)
            say(
                f"eval seed {seed}: "
                + ", ".join(
                    f"{arm} {'OK' if row[arm]['success'] else 'no'} ({row[arm]['steps']} steps)"
                    for arm in arms
                )
            )
    return rows


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The exact (Clopper–Pearson) interval of a binomial share, by bisection."""

    def cdf(x: int, p: float) -> float:
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(x + 1))

    def bisect(below) -> float:  # the p where below(p) turns from True to False
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if below(mid) else (lo, mid)
        return (lo + hi) / 2

    # Lowest p with P(X ≥ k) ≥ alpha/2; highest p with P(X ≤ k) ≥ alpha/2.
    low = 0.0 if k == 0 else bisect(lambda p: 1 - cdf(k - 1, p) < alpha / 2)
    high = 1.0 if k == n else bisect(lambda p: cdf(k, p) > alpha / 2)
    return low, high


def paired(rows: list[dict]) -> dict:
    """The paired figures of learned against coded over the rows holding both arms."""
    both = [r for r in rows if "coded" in r and "learned" in r]
    n = len(both)
    out: dict = {"worlds": n}
    for arm in ("coded", "learned"):
        k = sum(r[arm]["success"] for r in both)
        low, high = wilson_interval(k, n)
        steps = [r[arm]["steps"] for r in both if r[arm]["success"]]
        out[arm] = {
            "successes": k,
            "rate": k / n if n else 0.0,
            "wilson95": [low, high],
            "median_steps_successes": statistics.median(steps) if steps else None,
            "wall_s": sum(r[arm]["wall_s"] for r in both),
        }
    gained = [r["seed"] for r in both if r["learned"]["success"] and not r["coded"]["success"]]
    lost = [r["seed"] for r in both if r["coded"]["success"] and not r["learned"]["success"]]
    b, c = len(gained), len(lost)
    m = b + c
    p_value = min(1.0, 2 * sum(math.comb(m, i) for i in range(min(b, c) + 1)) / 2**m) if m else 1.0
    low, high = clopper_pearson(b, m) if m else (0.5, 0.5)
    out["difference"] = {
        "learned_minus_coded": (b - c) / n if n else 0.0,
        "gained_worlds": gained,
        "lost_worlds": lost,
        "mcnemar_exact_p": p_value,
        "exact95": [m / n * (2 * low - 1), m / n * (2 * high - 1)] if n else [0.0, 0.0],
    }
    return out


def write(path: Path, data: dict) -> Path:
    text = json.dumps(data, indent=1)
    if len(text) > 50_000:
        path = path.with_name(path.name + ".gz") if path.suffix != ".gz" else path
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def read(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def report(data: dict) -> None:
    figures = data["paired"]
    n = figures["worlds"]
    for arm in ("coded", "learned"):
        f = figures[arm]
        low, high = f["wilson95"]
        print(
            f"{arm}: {f['successes']}/{n} = {f['rate']:.0%} [{low:.0%}, {high:.0%}], "
            f"median steps of successes {f['median_steps_successes']}"
        )
    d = figures["difference"]
    print(
        f"learned − coded: {d['learned_minus_coded']:+.0%} "
        f"[{d['exact95'][0]:+.0%}, {d['exact95'][1]:+.0%}] (gained {d['gained_worlds']}, "
        f"lost {d['lost_worlds']}; exact McNemar p = {d['mcnemar_exact_p']:.3g})"
    )
    if data.get("training"):
        t = data["training"]
        print(
            f"training: {t['decisions']} decisions, {t['primitive_steps']} primitive steps, "
            f"{t['episodes']} episodes ({t['episode_successes']} successes), {t['wall_s']:.0f} s"
        )


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=50, help="how many evaluation seeds")
    parser.add_argument("--first-seed", type=int, default=3_000_000, help="the first one")
    parser.add_argument("--train-steps", type=int, default=1024, help="PPO decisions")
    parser.add_argument("--train-first-seed", type=int, default=TRAIN_SEEDS[0])
    parser.add_argument("--ppo-seed", type=int, default=0)
    parser.add_argument("--arms", default="coded,learned", help="coded, learned or both")
    parser.add_argument("--policy", type=Path, help="load this policy (no training)")
    parser.add_argument("--save-policy", type=Path, help="save the trained policy here")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--combine", type=Path, nargs=2, help="join two runs' rows")
    parser.add_argument("--dev", action="store_true", help="allow the development seeds")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.combine:
        a, b = (read(p) for p in args.combine)
        by_seed = {r["seed"]: dict(r) for r in a["rows"]}
        for r in b["rows"]:
            by_seed.setdefault(r["seed"], {"seed": r["seed"]}).update(r)
        rows = [by_seed[s] for s in sorted(by_seed)]
        data = {**a, "rows": rows, "training": a.get("training") or b.get("training")}
        data["combined_from"] = [str(p) for p in args.combine]
        data["paired"] = paired(rows)
        report(data)
        if args.json:
            say(f"wrote {write(args.json, data)}")
        return 0
    problem = minetest_missing()
    if problem:
        say(f"bench_minetest_rl: {problem}")
        return 2
    first, last = args.first_seed, args.first_seed + args.seeds - 1
    overlaps = not (last < DEV_SEEDS[0] or first > DEV_SEEDS[1])
    overlaps = overlaps or not (last < TRAIN_SEEDS[0] or first >= TRAIN_SEEDS[1])
    if overlaps and not args.dev:
        say(f"bench_minetest_rl: seeds {first}–{last} overlap development or training seeds")
        return 2
    arms = args.arms.split(",")
    model, training = None, None
    if "learned" in arms:
        from stable_baselines3 import PPO

        if args.policy is not None and args.train_steps == 0:
            model = PPO.load(args.policy, device="cpu")
        else:
            model, training = train(
                args.train_steps, args.train_first_seed, args.ppo_seed, args.save_policy
            )
    rows = evaluate(list(range(first, last + 1)), arms, model)
    data = {
        "bench": "bench_minetest_rl",
        "argv": sys.argv[1:] if argv is None else argv,
        "eval_seeds": [first, last],
        "budget": BUDGET,
        "want_trunks": WANT,
        "options": list(OPTIONS),
        "window_radius": RADIUS,
        "training": training,
        "rows": rows,
        "paired": paired(rows),
    }
    report(data)
    if args.json:
        say(f"wrote {write(args.json, data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
