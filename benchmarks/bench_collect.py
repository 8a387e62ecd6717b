#!/usr/bin/env python3
"""Benchmark: PPO rollouts collected in lockstep (SB3's own) against env by env.

    python benchmarks/bench_collect.py              2 rounds of each case (~3 min)
    python benchmarks/bench_collect.py --rounds 3
    python benchmarks/bench_collect.py --quick      1 round of 1,024 decisions (~30 s)

PPO ``learn(--steps)`` decisions per second on ``collect_wood`` (2 envs, n_steps 256,
n_epochs 4), with primitive actions only and with the library's coded options, its envs
in the learner's own process and in worker processes (:mod:`rl.env_workers`); for each
case ``[training.ppo] collect = "lockstep"`` and ``"per_env"`` (:mod:`rl.per_env`) run
one after the other, and the ratio per_env / lockstep is printed. The two modes train
different weights (their actions come from different random streams): this measures
speed only. Not a test: it prints numbers and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from rlgpt.cli import number  # noqa: E402


def decisions_per_s(config, collect: str, workers, steps: int) -> float:
    from actors.learner import make_ppo
    from messages.train import PPOSettings
    from rl.rl_env import make_vec_env

    vec = make_vec_env(
        config, 2, 0, world_pool=range(8), subproc=workers is not None, workers=workers
    )
    try:
        settings = PPOSettings(n_steps=256, batch_size=64, n_epochs=4, collect=collect)
        model = make_ppo(settings, vec, seed=1, device="cpu")
        started = time.perf_counter()
        model.learn(steps)
        return steps / (time.perf_counter() - started)
    finally:
        vec.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=number(int, 1), default=2)
    parser.add_argument("--steps", type=number(int, 1), default=4096, help="PPO decisions per case")
    parser.add_argument("--quick", action="store_true", help="1 round of 1,024 decisions")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps = 1, 1024
    import torch

    from rl.configs import collect_wood_primitive, collect_wood_with_coded
    from rl.env_workers import EnvWorkers

    torch.set_num_threads(1)  # as a learner's worker holds it
    pool = EnvWorkers()
    try:
        for name, config in (
            ("primitives", collect_wood_primitive()),
            ("coded options", collect_wood_with_coded()),
        ):
            for where, workers in (("one process", None), ("workers", pool)):
                for round_ in range(args.rounds):
                    lock = decisions_per_s(config, "lockstep", workers, args.steps)
                    per = decisions_per_s(config, "per_env", workers, args.steps)
                    print(
                        f"{name:13s} {where:11s} round {round_ + 1}: lockstep {lock:,.0f}/s, "
                        f"per_env {per:,.0f}/s, ratio {per / lock:.2f}",
                        flush=True,
                    )
    finally:
        pool.close()


if __name__ == "__main__":
    main()
