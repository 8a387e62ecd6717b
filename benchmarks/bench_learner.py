#!/usr/bin/env python3
"""Benchmark: learner throughput, learner concurrency, and what coded actions buy PPO.

    python benchmarks/bench_learner.py            full run (~20 min on 2 cores)
    python benchmarks/bench_learner.py --quick    small budgets (~4 min)
    python benchmarks/bench_learner.py --out DIR  where the plot and tables go (default
                                                  benchmarks/results/learner)

Three measurements, each side by side in this one run:

1. **Throughput**: PPO decisions/s of a plain stable-baselines3 script against the same
   training inside a learner actor (same env, settings, seed). Goal: actor ≥ 0.95×.
2. **Concurrency**: one learner training one job against two learner processes training
   two jobs at once. Goal: combined ≥ 1.7× on 2 cores.
3. **Sample efficiency** (the paper's claim): PPO on Crafter's "collect wood" from fresh
   worlds with primitive actions only, against PPO whose action space adds coded
   high-level actions (walk to the nearest tree, chop it). Same budget of *world* steps
   (a coded action's steps all count), same seeds; success rate on held-out worlds is
   measured along the way. Writes ``sample_efficiency.png`` and ``.md``.

Not a test: it prints numbers, writes files, and exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import trio  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402

from actors.learner import make_ppo, set_torch_threads, training_worlds  # noqa: E402
from messages.task import RLConfig  # noqa: E402
from messages.train import TrainRequest  # noqa: E402
from method import seeds  # noqa: E402
from method.settings import TrainingSettings  # noqa: E402
from rl.configs import collect_wood_primitive, collect_wood_with_coded  # noqa: E402
from rl.held_out import held_out  # noqa: E402
from rl.rl_env import make_vec_env  # noqa: E402
from runtime import events  # noqa: E402
from runtime.config import ActorSettings, RunSettings, RuntimeSettings, Settings  # noqa: E402
from runtime.head import Head, new_run_dir, run_head  # noqa: E402

PPO_SETTINGS = TrainingSettings().ppo
"""The learners' PPO settings: the ``[training.ppo]`` defaults."""
EVAL_SEED = seeds.HELD_OUT_BASE
"""Held-out worlds start here; training worlds are drawn from a seeded generator."""


def plain_sb3(config: RLConfig, steps: int, n_envs: int, seed: int) -> float:
    """Decisions/s of PPO.learn in a plain script (model building excluded), on the same
    pool of training worlds a learner uses for the same request."""
    pool = training_worlds(TrainRequest(name="plain", config=config, total_steps=steps, seed=seed))
    vec = make_vec_env(config, n_envs, seed, world_pool=pool)
    tensorboard = tempfile.mkdtemp(prefix="bench-tb-")  # the learner logs there too
    model = make_ppo(PPO_SETTINGS, vec, seed=seed, device="cpu", tensorboard_log=tensorboard)
    started = time.perf_counter()
    model.learn(steps)
    elapsed = time.perf_counter() - started
    vec.close()
    return steps / elapsed


def through_learners(config: RLConfig, steps: int, jobs: int, n_envs: int, seed: int) -> dict:
    """Train ``jobs`` jobs at once on ``jobs`` learner processes; decisions/s each."""
    settings = Settings(
        run=RunSettings(name="bench-learner", runs_dir=tempfile.mkdtemp(prefix="bench-")),
        runtime=RuntimeSettings(heartbeat_timeout=30.0),
        actors={"learner": ActorSettings(count=jobs)},
        source="<bench>",
    )
    out: dict = {}

    async def driver(head: Head) -> dict:
        await head.wait_for("learner", jobs)
        results = []

        async def one(i: int) -> None:
            req = TrainRequest(
                name=f"job{i}", config=config, total_steps=steps, n_envs=n_envs, seed=seed + i,
                ppo=PPO_SETTINGS, eval_episodes=0, checkpoint_every=10**9, progress_every_s=5,
            )  # fmt: skip
            results.append(await head.client.ask("@learner", req))

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(jobs):
                nursery.start_soon(one, i)
        out["wall_s"] = time.perf_counter() - started
        out["rates"] = [r.steps / r.train_s for r in results]
        return {}

    run_id, run_dir = new_run_dir(settings)
    code = trio.run(run_head, settings, run_dir, run_id, driver, "error")
    if code != 0:
        raise SystemExit(f"learner run failed ({code}); see {run_dir}/events.jsonl")
    return out


class Curve(BaseCallback):
    """Evaluates on held-out worlds every ``every`` world steps; x is world steps."""

    def __init__(self, config: RLConfig, every: int, episodes: int) -> None:
        super().__init__()
        self.config, self.every, self.episodes = config, every, episodes
        self.world_steps = 0
        self.next_eval = 0
        self.points: list[tuple[int, float]] = []

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            self.world_steps += int(info.get("primitive_steps", 1))
        return True

    def _on_rollout_end(self) -> None:
        if self.world_steps >= self.next_eval:
            self.points.append(
                (self.world_steps, held_out_success(self.model, self.config, self.episodes))
            )
            self.next_eval = self.world_steps + self.every


def held_out_success(model: PPO, config: RLConfig, episodes: int) -> float:
    """The learners' own held-out evaluation (sampled actions, seeded)."""
    import torch

    torch.manual_seed(0)
    act = lambda obs: model.predict(obs, deterministic=False)[0]  # noqa: E731
    return held_out(config, act, range(EVAL_SEED, EVAL_SEED + episodes))[0]


TRAIN_WORLDS = 500
"""Both action spaces train on the same pool of worlds (generated once, then restored
from the world cache) and are evaluated on the same held-out worlds outside it."""


def sample_efficiency(config: RLConfig, world_steps: int, seed: int, every: int, episodes: int):
    """Train until ``world_steps`` world steps; return the curve."""
    pool = seeds.training_pool(seed, TRAIN_WORLDS)
    vec = make_vec_env(config, 4, seed, world_pool=pool)
    settings = dataclasses.replace(PPO_SETTINGS, n_steps=128)
    model = make_ppo(settings, vec, seed=seed, device="cpu")
    curve = Curve(config, every, episodes)
    curve.points.append((0, held_out_success(model, config, episodes)))
    curve.next_eval = every

    class Budget(BaseCallback):
        def _on_step(self) -> bool:
            return curve.world_steps < world_steps

    model.learn(10**9, callback=[curve, Budget()])
    curve.points.append((curve.world_steps, held_out_success(model, config, episodes)))
    vec.close()
    return curve.points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "learner"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    events.configure(console=None)
    set_torch_threads()  # as a learner process does, so the plain script matches it
    steps = 2048 if args.quick else 8192
    budget = 20_000 if args.quick else 50_000
    seeds = (0,) if args.quick else (0, 1)
    every, episodes = budget // 5, 20
    print(f"machine: {os.cpu_count()} cores, python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.2f}; torch threads {_torch_threads()}")  # fmt: skip
    coded = collect_wood_with_coded()
    # -- 1. throughput ------------------------------------------------------------
    plain = plain_sb3(coded, steps, 2, 0)
    actor = through_learners(coded, steps, 1, 2, 0)["rates"][0]
    print(f"\n1. PPO decisions/s, collect_wood with coded actions, {steps} decisions, 2 envs")
    verdict = "met" if actor / plain >= 0.95 else "MISSED"
    print(f"   plain SB3 script {plain:8.1f}\n   learner actor    {actor:8.1f}   ratio "
          f"{actor / plain:.2f} (goal >= 0.95: {verdict})")  # fmt: skip
    # -- 2. concurrency -----------------------------------------------------------
    one = through_learners(coded, steps, 1, 2, 0)
    two = through_learners(coded, steps, 2, 2, 0)
    single, combined = one["rates"][0], sum(two["rates"])
    print(f"\n2. learners: 1 job {single:.1f}/s; 2 jobs at once {combined:.1f}/s combined "
          f"({', '.join(f'{r:.1f}' for r in two['rates'])}); ratio {combined / single:.2f} "
          f"(goal >= 1.7: {'met' if combined / single >= 1.7 else 'MISSED'})")  # fmt: skip
    # -- 3. sample efficiency -----------------------------------------------------
    print(f"\n3. collect_wood, {budget} world steps per run, seeds {list(seeds)}, "
          f"{episodes} held-out worlds per point")  # fmt: skip
    curves: dict[str, list] = {"primitive actions": [], "with coded actions": []}
    for seed in seeds:
        for name, config in (
            ("primitive actions", collect_wood_primitive()),
            ("with coded actions", coded),
        ):
            started = time.perf_counter()
            points = sample_efficiency(config, budget, seed, every, episodes)
            curves[name].append(points)
            print(f"   {name:<20} seed {seed}: final {points[-1][1]:.2f} "
                  f"({time.perf_counter() - started:.0f} s)")  # fmt: skip
    write_report(out, curves, budget, seeds, episodes, plain, actor, single, combined, steps)
    print(f"\nwrote {out / 'sample_efficiency.png'} and {out / 'sample_efficiency.md'}")
    return 0


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def write_report(out, curves, budget, seeds, episodes, plain, actor, single, combined, steps):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    rows = []
    for name, runs in curves.items():
        xs = np.array([[x for x, _ in run] for run in runs], dtype=float)
        ys = np.array([[y for _, y in run] for run in runs], dtype=float)
        n = min(len(r) for r in xs)
        x, y = xs[:, :n].mean(0), ys[:, :n].mean(0)
        ax.plot(x, y, marker="o", label=name)
        rows.append((name, y[-1], [f"{v:.2f}" for v in y]))
    ax.set_xlabel("world steps (every primitive step, coded actions' included)")
    ax.set_ylabel(f"success on {episodes} held-out worlds")
    ax.set_title("Crafter collect_wood: PPO with and without coded actions")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "sample_efficiency.png", dpi=120)
    lines = [
        "# Learner benchmark",
        "",
        f"Measured by `python benchmarks/bench_learner.py` on {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} cores, python {platform.python_version()}.",
        "",
        f"| throughput ({steps} decisions) | decisions/s |",
        "|---|---|",
        f"| plain SB3 script | {plain:.1f} |",
        f"| learner actor | {actor:.1f} ({actor / plain:.2f}×) |",
        f"| 1 learner, 1 job | {single:.1f} |",
        f"| 2 learners, 2 jobs at once (combined) | {combined:.1f} ({combined / single:.2f}×) |",
        "",
        f"Sample efficiency: {budget} world steps per run, seeds {list(seeds)}, success on "
        f"{episodes} held-out worlds (sampled actions), mean over seeds.",
        "",
        "| action space | final success | curve |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {final:.2f} | {' → '.join(curve)} |" for name, final, curve in rows]
    (out / "sample_efficiency.md").write_text("\n".join(lines) + "\n")
    (out / "sample_efficiency.json").write_text(json.dumps(curves))


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    sys.exit(main())
