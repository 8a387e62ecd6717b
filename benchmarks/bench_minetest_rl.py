#!/usr/bin/env python3
"""Benchmark: PPO over coded options for the Minetest tree search, against the code.

    python benchmarks/bench_minetest_rl.py --train-steps 1024 --first-seed 3000000 \\
        --seeds 50 --json X.json

Trains PPO (stable-baselines3, ``MlpPolicy``) on :class:`rl.voxel_options.VoxelTreeOptions`
(coded options over the 3-D skills, run through the sandbox; a fresh training seed
from 10,000 on each episode), then runs paired on each evaluation seed, from the same
start (the spawn point, an empty inventory) and within the same budget (the coded tree
search's 3,000 primitive steps):

- ``coded``: the chain's tree step alone (``worlds/minetest/chain.py``'s ``get_trees``, as
  policy source in the sandbox: ``templates.step_code``);
- ``learned``: the trained policy choosing among the options (its distribution sampled,
  torch seeded by the world seed; ``--deterministic`` for its argmax);
- ``random`` (with ``--arms``): the options chosen uniformly at random, a control for
  what learning adds over the options themselves.

Success for every arm: the step's goal carried (4 trunks, the chain's start state for
planks). Reports successes with 95 % Wilson intervals, the paired difference (each arm
minus coded, learned minus random) with the worlds each gained and lost, an exact
McNemar p-value, the exact (Clopper–Pearson, conditional on the discordant worlds)
interval of the difference and Newcombe's paired score interval, the median primitive
steps of successes, training steps and wall time.

``--arms coded`` or ``--arms learned`` runs one arm (``--policy`` loads a trained
policy instead of training with ``--train-steps 0``); ``--combine A.json B.json …``
joins such runs' rows (by seed) into the paired figures. Progress goes to stderr.

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
    RandomOptions,
    VoxelTreeOptions,
    run_learned,
)
from worlds.minetest import MinetestWorld, minetest_missing  # noqa: E402
from worlds.minetest.skills import run_voxel_code  # noqa: E402
from worlds.minetest.templates import step_code  # noqa: E402

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


def evaluate(seeds: list[int], arms: list[str], model, deterministic: bool) -> list[dict]:
    """Each arm on each seed in one reused world (a seed's server serves every arm)."""
    rows = []
    with MinetestWorld(radius=RADIUS) as world:
        env = VoxelTreeOptions(world=world, seeds=())
        for seed in seeds:
            row: dict = {"seed": seed}
            if "coded" in arms:
                started = time.perf_counter()
                result = run_voxel_code(world, step_code("default:tree"), BUDGET, seed=seed)
                row["coded"] = {
                    "success": carried(result["inventory"]) >= WANT,
                    "steps": result["steps"],
                    "trunks": carried(result["inventory"]),
                    "wall_s": time.perf_counter() - started - result["reset_s"],
                }
            if "learned" in arms:
                row["learned"] = run_learned(env, model, seed, deterministic)
            if "random" in arms:
                row["random"] = run_learned(env, RandomOptions(seed), seed)
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


ARMS = ("coded", "learned", "random")


def arm_figures(rows: list[dict], arm: str) -> dict:
    """Successes (95 % Wilson), median primitive steps of successes, wall time."""
    n = len(rows)
    k = sum(r[arm]["success"] for r in rows)
    low, high = wilson_interval(k, n)
    steps = [r[arm]["steps"] for r in rows if r[arm]["success"]]
    return {
        "successes": k,
        "worlds": n,
        "rate": k / n if n else 0.0,
        "wilson95": [low, high],
        "median_steps_successes": statistics.median(steps) if steps else None,
        "wall_s": sum(r[arm]["wall_s"] for r in rows),
    }


def difference(rows: list[dict], arm: str, base: str) -> dict:
    """``arm`` minus ``base`` world for world: the worlds gained and lost, the exact
    McNemar p-value, and the exact interval of the paired difference (Clopper–Pearson
    on the gained share of the discordant worlds, scaled by their share of all)."""
    n = len(rows)
    gained = [r["seed"] for r in rows if r[arm]["success"] and not r[base]["success"]]
    lost = [r["seed"] for r in rows if r[base]["success"] and not r[arm]["success"]]
    b, c = len(gained), len(lost)
    m = b + c
    p_value = min(1.0, 2 * sum(math.comb(m, i) for i in range(min(b, c) + 1)) / 2**m) if m else 1.0
    low, high = clopper_pearson(b, m) if m else (0.5, 0.5)
    return {
        "difference": (b - c) / n if n else 0.0,
        "gained_worlds": gained,
        "lost_worlds": lost,
        "mcnemar_exact_p": p_value,
        # None with no discordant world: the conditional interval says nothing then.
        "exact95": [m / n * (2 * low - 1), m / n * (2 * high - 1)] if m else None,
        "newcombe95": newcombe_paired(rows, arm, base),
    }


def newcombe_paired(rows: list[dict], arm: str, base: str) -> list[float]:
    """Newcombe's (1998, method 10) score interval of a paired difference in shares,
    ``arm`` minus ``base``: defined with no discordant world too."""
    n = len(rows)
    if not n:
        return [-1.0, 1.0]
    both = sum(r[arm]["success"] and r[base]["success"] for r in rows)
    only_arm = sum(r[arm]["success"] and not r[base]["success"] for r in rows)
    only_base = sum(r[base]["success"] and not r[arm]["success"] for r in rows)
    neither = n - both - only_arm - only_base
    p1, p2 = (both + only_arm) / n, (both + only_base) / n
    l1, u1 = wilson_interval(both + only_arm, n)
    l2, u2 = wilson_interval(both + only_base, n)
    margins = (both + only_arm) * (only_base + neither) * (both + only_base) * (only_arm + neither)
    phi = (both * neither - only_arm * only_base) / math.sqrt(margins) if margins else 0.0
    d = p1 - p2
    below = (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2
    above = (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2
    return [max(-1.0, d - math.sqrt(max(below, 0.0))), min(1.0, d + math.sqrt(max(above, 0.0)))]


def paired(rows: list[dict]) -> dict:
    """Each arm's figures over the worlds every arm present ran, and each other arm
    against the code (and the learned policy against the random control)."""
    arms = [a for a in ARMS if rows and all(a in r for r in rows)]
    out: dict = {"worlds": len(rows), "arms": {a: arm_figures(rows, a) for a in arms}}
    pairs = [(a, "coded") for a in arms if a != "coded" and "coded" in arms]
    if "learned" in arms and "random" in arms:
        pairs.append(("learned", "random"))
    out["differences"] = {f"{a}-{b}": difference(rows, a, b) for a, b in pairs}
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
    for arm, f in figures["arms"].items():
        low, high = f["wilson95"]
        print(
            f"{arm}: {f['successes']}/{f['worlds']} = {f['rate']:.0%} [{low:.0%}, {high:.0%}], "
            f"median steps of successes {f['median_steps_successes']}, {f['wall_s']:.0f} s"
        )
    for name, d in figures["differences"].items():
        exact = d["exact95"]
        exact_text = f"[{exact[0]:+.0%}, {exact[1]:+.0%}]" if exact else "(no discordant world)"
        low, high = d["newcombe95"]
        print(
            f"{name}: {d['difference']:+.0%}, exact {exact_text}, Newcombe [{low:+.0%}, "
            f"{high:+.0%}] (gained {d['gained_worlds']}, lost {d['lost_worlds']}; "
            f"exact McNemar p = {d['mcnemar_exact_p']:.3g})"
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
    parser.add_argument(
        "--arms", default="coded,learned", help="of coded, learned, random (comma-separated)"
    )
    parser.add_argument(
        "--deterministic", action="store_true", help="the policy's argmax, not samples"
    )
    parser.add_argument("--policy", type=Path, help="load this policy (no training)")
    parser.add_argument("--save-policy", type=Path, help="save the trained policy here")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--combine", type=Path, nargs="+", help="join runs' rows by seed")
    parser.add_argument("--dev", action="store_true", help="allow the development seeds")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.json is not None and not args.json.parent.is_dir():
        say(f"bench_minetest_rl: --json {args.json}: its folder does not exist")
        return 2
    if args.combine:
        runs = [read(p) for p in args.combine]
        by_seed: dict[int, dict] = {}
        for run in runs:
            for r in run["rows"]:
                by_seed.setdefault(r["seed"], {"seed": r["seed"]}).update(r)
        rows = [by_seed[s] for s in sorted(by_seed)]
        training = next((run["training"] for run in runs if run.get("training")), None)
        data = {**runs[0], "rows": rows, "training": training}
        data["runs"] = [{k: v for k, v in run.items() if k != "rows"} for run in runs]
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
    unknown = set(arms) - set(ARMS)
    if unknown:
        say(f"bench_minetest_rl: unknown arms {sorted(unknown)} (of {', '.join(ARMS)})")
        return 2
    if "learned" in arms:
        from stable_baselines3 import PPO

        if args.policy is not None and args.train_steps == 0:
            model = PPO.load(args.policy, device="cpu")
        else:
            model, training = train(
                args.train_steps, args.train_first_seed, args.ppo_seed, args.save_policy
            )
    rows = evaluate(list(range(first, last + 1)), arms, model, args.deterministic)
    data = {
        "bench": "bench_minetest_rl",
        "argv": sys.argv[1:] if argv is None else argv,
        "eval_seeds": [first, last],
        "budget": BUDGET,
        "want_trunks": WANT,
        "options": list(OPTIONS),
        "window_radius": RADIUS,
        "deterministic": args.deterministic,
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
