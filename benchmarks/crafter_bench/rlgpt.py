"""Variant ``rlgpt``: the full system, ``run.py`` in a subprocess on a derived config;
its figures come from the run's episode ledger (:mod:`.run_ledger`)."""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from .protocol import EPISODE_STEPS
from .run_ledger import ledger_result, read_ledger
from .toml_writer import dump_toml

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: where ``run.py`` is and the run is started from."""

QUICK_TASK = {
    "iterations": 1,
    "revisions": 0,
    "code_episodes": 2,
    "train_steps": 2048,
    "train_envs": 2,
    "wall_s": 3600,  # a safety limit a quick run never reaches: env steps decide
}
"""``[task]`` keys set by ``--quick``: one pass of the outer loop with small training jobs,
so the full system runs in minutes."""


def rlgpt_config(
    base: Path,
    runs_dir: Path,
    budget: int,
    final_episodes: int,
    quick: bool,
    seed: int,
    episode_steps: int = EPISODE_STEPS,
    learn: bool = True,
) -> str:
    """The benchmark's config: ``base`` with the run written under ``runs_dir``, the
    env-step budget, the final evaluation's episodes and the episode length set (and,
    quick, small budgets). Only keys the config loader knows are set. ``learn=False``:
    the same loop with RL disabled — no learner actor (``[actors.learner] count = 0``)
    and no sub-action learned from the first plan, so every sub-action stays code (the
    slow agent keeps a step as code when no learner can train it)."""

    from method.settings import TaskSettings

    table = tomllib.loads(Path(base).read_text())
    run = table.setdefault("run", {})
    run["runs_dir"] = str(runs_dir)
    run["seed"] = seed
    task = table.setdefault("task", {})
    known = {f.name for f in dataclasses.fields(TaskSettings)}
    changes: dict[str, Any] = {
        "env_steps": max(budget, 1000),
        "eval_episodes": final_episodes,
        "episode_steps": episode_steps,
    }
    if quick:
        changes |= QUICK_TASK
    if not learn:
        changes["learn"] = []
        table.setdefault("actors", {}).setdefault("learner", {})["count"] = 0
    task.update({k: v for k, v in changes.items() if k in known})
    return dump_toml(table)


def run_rlgpt(
    budget: int,
    final_episodes: int,
    seed: int = 0,
    *,
    quick: bool,
    config: Path,
    workdir: Path,
    timeout_s: float | None = None,
    episode_steps: int = EPISODE_STEPS,
    learn: bool = True,
) -> dict[str, Any]:
    """The full system as a subprocess of ``run.py``; figures from its ledger
    (``learn=False``: RL disabled, see :func:`rlgpt_config`)."""
    runs_dir = Path(workdir) / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    path = Path(workdir) / "bench_crafter.toml"
    path.write_text(
        rlgpt_config(config, runs_dir, budget, final_episodes, quick, seed, episode_steps, learn)
    )
    command = [sys.executable, str(ROOT / "run.py"), "--config", str(path), "--quiet"]
    before = set(runs_dir.iterdir())
    started = time.monotonic()
    log = Path(workdir) / "run.log"
    with log.open("w") as out:
        proc = subprocess.run(
            command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s
        )
    wall = time.monotonic() - started
    made = sorted(set(runs_dir.iterdir()) - before)
    if proc.returncode != 0 or not made:
        tail = log.read_text()[-2000:]
        raise RuntimeError(f"run.py exited {proc.returncode}; last output:\n{tail}")
    run_dir = made[-1]
    episodes, summary = read_ledger(run_dir)
    result = ledger_result(episodes, summary, budget)
    result |= {
        "run_dir": str(run_dir),
        "config": str(config),
        "command": shlex.join(command),
        "wall_s_subprocess": round(wall, 1),
        "episodes": {
            "scoreboard": episodes,
            "final": [ep for ep in episodes if ep["kind"] == "final"],
        },
    }
    return result
