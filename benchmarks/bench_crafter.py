#!/usr/bin/env python3
"""Benchmark: RL-GPT on Crafter's 22 achievements, beside two baselines measured alike.

    python benchmarks/bench_crafter.py                    full run: 1M env steps per variant
    python benchmarks/bench_crafter.py --quick            small budgets (minutes)
    python benchmarks/bench_crafter.py --variants code,ppo --budget 200000 --final 50
    python benchmarks/bench_crafter.py --out BENCHMARKS.md --seed 0

Writes ``BENCHMARKS.md`` (``--out``) and the raw figures as JSON in
``benchmarks/results/crafter/<date>-<variants>.json``. Three variants, each given the
same budget of env steps (``--budget``, Crafter's 1M by default) and the same
observation (the local 9×7 view one-hot, inventory and vitals: what the system's
learners see, ``envs.rl_env``):

``rlgpt``  the full system: ``run.py --config configs/crafter.toml`` in a subprocess,
           with ``[task] env_steps`` set to the budget and runs written under a folder of
           this benchmark. The run writes ``episodes.jsonl`` (one line per episode it
           stepped: kind code/train/final, seed, steps, achievements unlocked) and
           ``summary.json`` (env_steps, wall_s, final_success, target); both are read here.
``code``   code only, no RL: the skill library's composed curriculum policy — one coded
           stage per achievement in ``knowledge.recipes.curriculum()`` order (each with
           the library's best template, prerequisites secured recursively) and the
           survival needs — played by ``envs.composite.run_composed`` on fresh worlds
           until the budget is spent, episodes as long as Crafter's (10,000 steps).
``ppo``    plain stable-baselines3 PPO with Crafter's 17 primitive actions and Crafter's
           own reward (+1 for the first unlock of an achievement in an episode, ±0.1 per
           health point), on ``SubtaskEnv`` with no coded actions and a subtask that never
           succeeds early (so an episode is Crafter's: until death or 10,000 steps); the
           same PPO builder and settings as the system's learners.

The **Crafter score** is ``exp(mean_i ln(1 + s_i)) - 1`` over the 22 achievements, with
``s_i`` the percentage of episodes in which achievement ``i`` was unlocked at least once
(Hafner 2021). It is given two ways:

- **scoreboard**: over every episode completed within the budget (training and
  evaluation episodes alike: the protocol of Crafter's scoreboard);
- **final agent**: over the final policy's episodes on ``--final`` unseen world seeds
  (100 by default).

Published scores are listed in a separate table and never mixed with measured ones.
Not a test: it prints figures, writes files and exits 0 (1 if a variant failed).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import importlib.metadata
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ACHIEVEMENTS: tuple[str, ...] = (
    "collect_coal",
    "collect_diamond",
    "collect_drink",
    "collect_iron",
    "collect_sapling",
    "collect_stone",
    "collect_wood",
    "defeat_skeleton",
    "defeat_zombie",
    "eat_cow",
    "eat_plant",
    "make_iron_pickaxe",
    "make_iron_sword",
    "make_stone_pickaxe",
    "make_stone_sword",
    "make_wood_pickaxe",
    "make_wood_sword",
    "place_furnace",
    "place_plant",
    "place_stone",
    "place_table",
    "wake_up",
)
"""Crafter's 22 achievements (``crafter.constants.achievements``, checked in the tests)."""

VARIANTS = ("rlgpt", "code", "ppo")
EPISODE_STEPS = 10_000
"""Crafter's episode length."""
DEFAULT_BUDGET = 1_000_000
QUICK_BUDGET = 20_000
DEFAULT_FINAL = 100
QUICK_FINAL = 10
FINAL_SEED_BASE = 10_000_000
"""First world seed of the final-agent evaluation (code and ppo): far from the seeds the
scoreboard episodes use (code: ``seed * SEED_STRIDE + k``; ppo: drawn at random and
checked for overlap)."""
SEED_STRIDE = 1_000_000
PROCESSES = 2
"""Worker processes for the code variant's episodes and the ppo variant's evaluation."""
EPISODE_WALL_S = 3600.0
"""Wall budget of one coded episode (10,000 steps take ~1–3 minutes)."""

# The system's learners' settings (actors/fast.py, llm/offline.py): the same
# observation, envs per job and PPO hyperparameters.
OBSERVATION = ("view", "inventory", "status")
PPO_ENVS = 2

CRAFTER_REWARD = '''
def reward(before, after):
    """Crafter's own reward: health change / 10, +1 on a step that unlocks an
    achievement for the first time this episode."""
    r = (after["status"]["health"] - before["status"]["health"]) / 10
    now, then = after["achievements"], before["achievements"]
    for name in now:
        if now[name] > 0 and then.get(name, 0) == 0:
            return r + 1.0
    return r
'''

PUBLISHED: tuple[dict[str, Any], ...] = (
    {
        "method": "PPO",
        "score": 4.6,
        "source": "Hafner 2021, *Benchmarking the Spectrum of Agent Capabilities* "
        "(ICLR 2022, arXiv:2109.06780)",
    },
    {
        "method": "DreamerV3",
        "score": 14.5,
        "source": "Hafner et al. 2023, *Mastering Diverse Domains through World Models* "
        "(arXiv:2301.04104)",
    },
    {
        "method": "Achievement Distillation",
        "score": 21.8,
        "source": "Moon et al. 2023, *Discovering Hierarchical Achievements in Reinforcement "
        "Learning via Contrastive Learning* (NeurIPS 2023, arXiv:2307.03486)",
    },
    {
        "method": "SPRING (GPT-4)",
        "score": 27.3,
        "source": "Wu et al. 2023, *SPRING: Studying the Paper and Reasoning to Play Games* "
        "(NeurIPS 2023, arXiv:2305.15486)",
    },
    {
        "method": "Human experts",
        "score": 50.5,
        "source": "Hafner 2021, *Benchmarking the Spectrum of Agent Capabilities* "
        "(ICLR 2022, arXiv:2109.06780)",
    },
)
"""Published Crafter scores (%): anchors, never measured here."""


# ---------------------------------------------------------------------- scores


def tally(lines: Iterable[Mapping[str, Any]]) -> tuple[int, int, collections.Counter]:
    """Episodes, env steps and achievement → episodes that unlocked it, over ledger lines:
    one episode each (``achievements``: the names unlocked), or an aggregate of a
    training job (``episodes``, ``achievement_episodes``: name → episodes)."""
    episodes, steps, counts = 0, 0, collections.Counter()
    for line in lines:
        steps += int(line.get("steps", 0))
        if "achievement_episodes" in line:
            episodes += int(line.get("episodes", 0))
            counts.update({k: int(v) for k, v in line["achievement_episodes"].items()})
        else:
            episodes += 1
            counts.update(set(line.get("achievements", ())))
    return episodes, steps, counts


def success_rates(episodes: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Per achievement, the percentage of ``episodes`` that unlocked it at least once."""
    n, _, counts = tally(episodes)
    return {name: (100.0 * counts[name] / n if n else 0.0) for name in ACHIEVEMENTS}


def crafter_score(rates: Mapping[str, float] | Sequence[float]) -> float:
    """Crafter score (%): ``exp(mean ln(1 + s_i)) - 1`` over the success rates ``s_i`` in %
    (all 22 achievements when given a mapping; a missing one counts 0)."""
    values = [rates.get(a, 0.0) for a in ACHIEVEMENTS] if isinstance(rates, Mapping) else rates
    values = list(values)
    if not values:
        return 0.0
    return math.exp(sum(math.log1p(v) for v in values) / len(values)) - 1.0


def summarize(episodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Episodes (or ledger lines) → count, steps, success rates, score, diamond success."""
    n, steps, _ = tally(episodes)
    rates = success_rates(episodes)
    return {
        "episodes": n,
        "steps": steps,
        "rates": rates,
        "score": crafter_score(rates),
        "diamond": rates["collect_diamond"],
    }


# ---------------------------------------------------------------------- the run's ledger

EPISODE_KINDS = ("code", "train", "final", "video", "play")
"""Kinds of ledger lines (``method/ledger.py``); all count for the scoreboard, ``final``
lines alone make the final-agent figure."""


class LedgerError(ValueError):
    """A run's episodes.jsonl or summary.json does not follow the contract."""


def _line_problems(line: Any) -> list[str]:
    if not isinstance(line, dict):
        return ["not a JSON object"]
    problems = []
    if line.get("kind") not in EPISODE_KINDS:
        problems.append(f"kind {line.get('kind')!r} is not one of {EPISODE_KINDS}")
    if type(line.get("steps")) is not int:
        problems.append(f"steps must be an integer, not {line.get('steps')!r}")
    if line.get("kind") == "train" and "achievement_episodes" in line:
        counts = line["achievement_episodes"]
        if type(line.get("episodes")) is not int:
            problems.append(f"episodes must be an integer, not {line.get('episodes')!r}")
        if not isinstance(counts, dict) or not all(type(v) is int for v in counts.values()):
            problems.append("achievement_episodes must map names to integers")
        return problems
    if type(line.get("seed")) is not int:
        problems.append(f"seed must be an integer, not {line.get('seed')!r}")
    achieved = line.get("achievements")
    if not isinstance(achieved, list) or not all(isinstance(a, str) for a in achieved):
        problems.append("achievements must be a list of names")
    return problems


def read_ledger(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A run's ``episodes.jsonl`` and ``summary.json`` (env_steps, wall_s, final_success,
    target). Ledger lines: one per episode (kind, seed, steps, achievements), or one per
    training job (kind "train", episodes, steps, achievement_episodes)."""
    run_dir = Path(run_dir)
    path = run_dir / "episodes.jsonl"
    if not path.is_file():
        raise LedgerError(f"{path}: missing (the run must write one line per episode)")
    lines = []
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except ValueError as exc:
            raise LedgerError(f"{path}:{number}: not JSON ({exc})") from None
        problems = _line_problems(line)
        if problems:
            raise LedgerError(f"{path}:{number}: " + "; ".join(problems))
        lines.append(line)
    spath = run_dir / "summary.json"
    if not spath.is_file():
        raise LedgerError(f"{spath}: missing")
    try:
        summary = json.loads(spath.read_text())
    except ValueError as exc:
        raise LedgerError(f"{spath}: not JSON ({exc})") from None
    missing = [k for k in ("env_steps", "wall_s", "final_success", "target") if k not in summary]
    if missing:
        raise LedgerError(f"{spath}: missing keys {missing}")
    return lines, summary


def ledger_result(
    lines: Sequence[Mapping[str, Any]], summary: Mapping[str, Any], budget: int
) -> dict[str, Any]:
    """A variant result from a run's ledger: scoreboard over every episode, final agent
    over the ``final`` ones."""
    final = [line for line in lines if line["kind"] == "final"]
    kinds: collections.Counter = collections.Counter()
    for line in lines:
        kinds[line["kind"]] += int(line.get("episodes", 1)) if "achievement_episodes" in line else 1
    result = {
        "budget": budget,
        "scoreboard": summarize(lines),
        "final": summarize(final),
        "env_steps": int(summary["env_steps"]),
        "wall_s": float(summary["wall_s"]),
        "episode_kinds": dict(kinds),
        "final_success": float(summary["final_success"]),
        "target": str(summary["target"]),
        "seeds": {"final": sorted({int(line["seed"]) for line in final})},
    }
    # The run's own figures, kept beside ours as a cross-check.
    own = ("score_all_episodes", "score_final", "episodes", "stop_reason", "backend")
    result["run_summary"] = {k: summary[k] for k in own if k in summary}
    return result


# ---------------------------------------------------------------------- variant: code


_WORKER: dict[str, Any] = {}


def _prepare_code() -> dict[str, Any]:
    """The world and the compiled stages, once per process (``run_code`` prepares them
    before forking its workers, which inherit them)."""
    from envs.composite import prepare_stages
    from envs.crafter_world import CrafterWorld
    from knowledge import library, recipes, survival

    if "world" not in _WORKER:
        world = CrafterWorld()
        needs = survival.survival_needs()
        _WORKER.update(
            world=world,
            stages=prepare_stages(
                library.coded_stages(recipes.curriculum(), by_achievement=True), world
            ),
            needs=needs,
            need_stages=prepare_stages([n.stage for n in needs], world),
        )
    return _WORKER


def code_episode(seed: int, max_steps: int = EPISODE_STEPS, wall_s: float = EPISODE_WALL_S) -> dict:
    """One episode of the composed curriculum policy on world ``seed``."""
    from envs.composite import run_composed
    from messages.task import Subtask

    w = _prepare_code()
    # The episode's own test never holds: it runs until death, the step cap or the
    # planner stops (every stage done or given up on: a stage that gives up is dropped
    # and the next one runs, as in the system's curriculum episodes).
    episode = Subtask("crafter", "unlock as many achievements as possible", max_steps=max_steps)
    started = time.monotonic()
    ep = run_composed(
        w["world"], w["stages"], w["needs"], episode, seed,
        wall_s=wall_s, need_stages=w["need_stages"], skip_failed=True,
    )  # fmt: skip
    return {
        "seed": int(seed),
        "steps": int(ep.steps),
        "achievements": sorted(set(ep.achievements)),
        "cause": ep.cause,
        "wall_s": round(time.monotonic() - started, 3),
    }


def _code_episode_args(args: tuple[int, int]) -> dict:
    return code_episode(*args)


def run_episodes_within(
    play: Any, seeds: Iterable[int], budget: int, processes: int = PROCESSES
) -> tuple[list[dict], int]:
    """Play episodes on ``seeds`` in order (``processes`` at once) until the budget of
    env steps is spent. Returns the episodes completed within it — the longest prefix,
    in seed order, whose steps sum to at most ``budget`` (independent of timing) — and
    the env steps stepped in all (those of episodes past the budget included)."""
    import multiprocessing

    seeds = iter(seeds)
    kept: list[dict] = []
    used = 0
    stepped = 0
    ready: dict[int, dict] = {}
    order: list[int] = []
    ctx = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
    with ctx.Pool(processes) as pool:
        pending: dict[int, Any] = {}
        done = False
        while not done:
            while len(pending) < 2 * processes:
                seed = next(seeds, None)
                if seed is None:
                    break
                order.append(seed)
                pending[seed] = pool.apply_async(play, (seed,))
            if not pending:
                break
            finished = [s for s, r in pending.items() if r.ready()]
            if not finished:
                time.sleep(0.02)
                continue
            for s in finished:
                ready[s] = pending.pop(s).get()
                stepped += ready[s]["steps"]
            while order and order[0] in ready:
                ep = ready.pop(order.pop(0))
                if used + ep["steps"] > budget:
                    done = True
                    break
                used += ep["steps"]
                kept.append(ep)
                if used >= budget:
                    done = True
                    break
        pool.terminate()
    return kept, stepped


def _play_code(seed: int) -> dict:
    return code_episode(seed, _WORKER.get("max_steps", EPISODE_STEPS))


def run_code(
    budget: int,
    final_episodes: int,
    seed: int = 0,
    *,
    max_steps: int = EPISODE_STEPS,
    processes: int = PROCESSES,
) -> dict[str, Any]:
    """The code-only variant: scoreboard episodes within the budget, then the final agent
    (the same fixed policy: code does not learn) on unseen seeds."""
    import multiprocessing

    started = time.monotonic()
    _WORKER["max_steps"] = max_steps  # inherited by the forked workers...
    _prepare_code()  # ...and so are the compiled stages
    first = seed * SEED_STRIDE
    board, stepped = run_episodes_within(
        _play_code, range(first, first + SEED_STRIDE), budget, processes
    )
    board_s = time.monotonic() - started
    final_seeds = list(range(FINAL_SEED_BASE, FINAL_SEED_BASE + final_episodes))
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        final = pool.map(_code_episode_args, [(s, max_steps) for s in final_seeds], chunksize=1)
    wall = time.monotonic() - started
    return {
        "budget": budget,
        "scoreboard": summarize(board),
        "final": summarize(final),
        "env_steps": int(stepped + sum(ep["steps"] for ep in final)),
        "env_steps_scoreboard": int(stepped),
        "wall_s": round(wall, 1),
        "wall_s_scoreboard": round(board_s, 1),
        "episode_steps": max_steps,
        "causes": {
            "scoreboard": dict(collections.Counter(ep["cause"] for ep in board)),
            "final": dict(collections.Counter(ep["cause"] for ep in final)),
        },
        "seeds": {
            "scoreboard": [first, first + len(board) - 1] if board else [],
            "final": [final_seeds[0], final_seeds[-1]] if final_seeds else [],
        },
        "episodes": {"scoreboard": board, "final": final},
    }


# ---------------------------------------------------------------------- variant: ppo


def ppo_config(max_steps: int = EPISODE_STEPS) -> Any:
    """Plain PPO's RL config: all 17 primitives, no coded actions, Crafter's reward, a
    subtask that never succeeds (an episode is Crafter's: until death or the cap)."""
    from messages.task import RLConfig, Subtask

    return RLConfig(
        subtask=Subtask("crafter", "unlock as many achievements as possible", max_steps=max_steps),
        observation=list(OBSERVATION),
        primitives=[],
        coded_actions=[],
        reward_code=CRAFTER_REWARD,
        success_reward=0.0,
    )


def ppo_settings() -> Any:
    """The system's learners' PPO settings (actors/fast.py)."""
    from messages.train import PPOSettings

    return PPOSettings(n_steps=256, batch_size=64)


def _ledger_callback() -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class Ledger(BaseCallback):
        """Every training episode's achievements, steps and world seed."""

        def __init__(self) -> None:
            super().__init__()
            self.episodes: list[dict] = []
            self.current: list[dict] = []

        def _fresh(self, i: int) -> dict:
            seed = self.training_env.get_attr("world_seed", [i])[0]
            return {"seed": int(seed), "steps": 0, "achievements": set()}

        def _on_training_start(self) -> None:
            self.current = [self._fresh(i) for i in range(self.training_env.num_envs)]

        def _on_step(self) -> bool:
            infos, dones = self.locals["infos"], self.locals["dones"]
            for i, (info, done) in enumerate(zip(infos, dones, strict=True)):
                ep = self.current[i]
                ep["steps"] += int(info.get("primitive_steps", 1))
                ep["achievements"].update(info.get("achievements", ()))
                if done:
                    ep["achievements"] = sorted(ep["achievements"])
                    self.episodes.append(ep)
                    self.current[i] = self._fresh(i)  # the env has reset already
            return True

    return Ledger()


def _ppo_eval_episode(args: tuple[str, int, int]) -> dict:
    """One episode of the saved PPO policy on world ``seed`` (actions sampled, seeded)."""
    path, seed, max_steps = args
    import torch
    from stable_baselines3 import PPO

    from envs.rl_env import make_env

    torch.set_num_threads(1)
    if _WORKER.get("ppo_path") != path:
        _WORKER.update(ppo_path=path, ppo=PPO.load(path, device="cpu"))
        _WORKER["ppo_env"] = make_env(ppo_config(max_steps))
    model, env = _WORKER["ppo"], _WORKER["ppo_env"]
    torch.manual_seed(seed)
    obs, _ = env.reset(seed=seed)
    steps, unlocked = 0, set()
    while True:
        action = model.predict(obs, deterministic=False)[0]
        obs, _, terminated, truncated, info = env.step(int(action))
        steps += int(info.get("primitive_steps", 1))
        unlocked.update(info.get("achievements", ()))
        if terminated or truncated:
            break
    return {"seed": seed, "steps": steps, "achievements": sorted(unlocked)}


def run_ppo(
    budget: int,
    final_episodes: int,
    seed: int = 0,
    *,
    max_steps: int = EPISODE_STEPS,
    processes: int = PROCESSES,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Plain PPO: train for ``budget`` env steps counting every training episode, then
    evaluate the final policy on unseen seeds."""
    import multiprocessing

    from stable_baselines3.common.vec_env import DummyVecEnv

    from actors.learner import make_ppo, set_torch_threads
    from envs.rl_env import env_factory

    set_torch_threads()
    started = time.monotonic()
    # No seed of the env's own: PPO seeds the first reset of env i with seed + i, later
    # episodes draw fresh world seeds from the env's generator (seeded by that reset).
    # (make_vec_env's seed would be replayed once more by the first seedless reset.)
    blob = ppo_config(max_steps)
    vec = DummyVecEnv([env_factory(blob, seed=None, monitor=True) for _ in range(PPO_ENVS)])
    try:
        model = make_ppo(ppo_settings(), vec, seed=seed, device="cpu")
        ledger = _ledger_callback()
        model.learn(budget, callback=ledger)
        train_s = time.monotonic() - started
        trained = int(model.num_timesteps)
        in_progress = sum(ep["steps"] for ep in ledger.current)
        workdir = Path(workdir or tempfile.mkdtemp(prefix="bench-ppo-"))
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / "ppo_crafter.zip"
        model.save(path)
    finally:
        vec.close()
    board = ledger.episodes
    used = {ep["seed"] for ep in board} | {ep["seed"] for ep in ledger.current}
    final_seeds, candidate = [], FINAL_SEED_BASE
    while len(final_seeds) < final_episodes:
        if candidate not in used:  # unseen: never a training world
            final_seeds.append(candidate)
        candidate += 1
    eval_started = time.monotonic()
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        final = pool.map(
            _ppo_eval_episode, [(str(path), s, max_steps) for s in final_seeds], chunksize=1
        )
    wall = time.monotonic() - started
    return {
        "budget": budget,
        "scoreboard": summarize(board),
        "final": summarize(final),
        "env_steps": trained + sum(ep["steps"] for ep in final),
        "env_steps_scoreboard": trained,
        "env_steps_unfinished_episodes": in_progress,
        "wall_s": round(wall, 1),
        "wall_s_scoreboard": round(train_s, 1),
        "wall_s_final": round(time.monotonic() - eval_started, 1),
        "episode_steps": max_steps,
        "ppo": dataclasses.asdict(ppo_settings()) | {"n_envs": PPO_ENVS, "policy_seed": seed},
        "seeds": {
            "scoreboard": f"{len(used)} training worlds (random world seeds from "
            f"PPO seed {seed}; none among the final seeds)",
            "final": [final_seeds[0], final_seeds[-1]] if final_seeds else [],
        },
        "policy_path": str(path),
        "episodes": {"scoreboard": board, "final": final},
    }


# ---------------------------------------------------------------------- variant: rlgpt

QUICK_TASK = {
    "iterations": 1,
    "revisions": 0,
    "code_episodes": 2,
    "train_steps": 2048,
    "train_envs": 2,
    "wall_s": 300,
}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def dump_toml(table: Mapping[str, Any]) -> str:
    """A TOML document for ``table`` (scalars, lists and nested tables: what configs use)."""
    lines: list[str] = []

    def section(prefix: str, body: Mapping[str, Any]) -> None:
        scalars = {k: v for k, v in body.items() if not isinstance(v, Mapping)}
        tables = {k: v for k, v in body.items() if isinstance(v, Mapping)}
        if prefix and (scalars or not tables):
            lines.append(f"[{prefix}]")
        for key, value in scalars.items():
            lines.append(f"{key} = {_toml_value(value)}")
        if scalars:
            lines.append("")
        for key, value in tables.items():
            section(f"{prefix}.{key}" if prefix else key, value)

    section("", table)
    return "\n".join(lines).rstrip() + "\n"


def rlgpt_config(
    base: Path,
    runs_dir: Path,
    budget: int,
    final_episodes: int,
    quick: bool,
    seed: int,
    episode_steps: int = EPISODE_STEPS,
) -> str:
    """The benchmark's config: ``base`` with the run written under ``runs_dir``, the
    env-step budget, the final evaluation's episodes and the episode length set (and,
    quick, small budgets). Only keys the config loader knows are set."""

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
) -> dict[str, Any]:
    """The full system as a subprocess of ``run.py``; figures from its ledger."""
    runs_dir = Path(workdir) / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    path = Path(workdir) / "bench_crafter.toml"
    path.write_text(
        rlgpt_config(config, runs_dir, budget, final_episodes, quick, seed, episode_steps)
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


# ---------------------------------------------------------------------- the record


def machine() -> dict[str, Any]:
    """CPU model, cores and RAM (from /proc where there is one)."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "ram_gib": None,
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["ram_gib"] = round(int(line.split()[1]) / 2**20, 1)
                break
    except OSError:
        pass
    return info


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("crafter", "torch", "stable-baselines3", "gymnasium", "numpy"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    try:
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        out[project["name"]] = project["version"]
    except (OSError, KeyError, ValueError):
        pass
    commit = _commit()
    if commit:
        out["commit"] = commit
    return out


def _commit() -> str:
    """The checked-out commit, read from .git (no git process)."""
    git = ROOT / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:12]
        ref = head[5:]
        path = git / ref
        if path.is_file():
            return path.read_text().strip()[:12]
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0][:12]
    except OSError:
        pass
    return ""


BAR_WIDTH = 20
_EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(percent: float, width: int = BAR_WIDTH) -> str:
    """A text bar: ``width`` full blocks for 100 %, eighth blocks for the remainder."""
    cells = max(0.0, min(100.0, percent)) / 100.0 * width
    full = int(cells)
    rest = int(round((cells - full) * 8))
    if rest == 8:
        full, rest = full + 1, 0
    text = "█" * full + (_EIGHTHS[rest] if rest and full < width else "")
    return text or "·"


LABELS = {
    "rlgpt": "RL-GPT (this system)",
    "code": "Code only (skill library, no RL)",
    "ppo": "PPO (SB3, primitive actions)",
}


def _pct(value: float) -> str:
    return f"{value:.1f} %"


def _steps(n: int) -> str:
    return f"{n:,}"


def _duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _seeds_text(seeds: Mapping[str, Any]) -> str:
    parts = []
    for key, value in seeds.items():
        if isinstance(value, list) and len(value) == 2 and key != "final":
            parts.append(f"{key}: {value[0]}–{value[1]}")
        elif isinstance(value, list) and key == "final" and value:
            lo, hi = min(value), max(value)
            parts.append(f"final: {lo}–{hi}" + (f" ({len(value)})" if len(value) > 2 else ""))
        else:
            parts.append(f"{key}: {value}")
    return "; ".join(parts)


def render_markdown(report: Mapping[str, Any]) -> str:
    """BENCHMARKS.md: the measured figures, then the published anchors, apart."""
    meta, results = report["meta"], report["results"]
    mach, vers = meta["machine"], meta["versions"]
    lines = [
        "# Crafter benchmarks",
        "",
        f"Written by `{meta['command']}` on {meta['date']}"
        + (
            " (**quick**: small budgets, not comparable with published figures)"
            if meta["quick"]
            else ""
        )
        + ".",
        "",
        f"- **Machine**: {mach['cpu']}, {mach['cores']} cores, {mach['ram_gib']} GiB RAM "
        f"({mach['platform']})",
        "- **Versions**: " + ", ".join(f"{k} {v}" for k, v in vers.items()),
        f"- **Budget**: {meta['budget']:,} env steps per variant for the scoreboard; the final "
        f"agent is then evaluated on {meta['final_episodes']} unseen world seeds. Episodes are "
        f"Crafter's (until death or {meta['episode_steps']:,} steps). Base seed {meta['seed']}.",
        "- **Observation** (all variants' learners): the 9×7 local view one-hot, inventory and "
        "vitals (`envs.rl_env`, parts " + ", ".join(OBSERVATION) + ").",
        "- **Crafter score** = exp(mean over the 22 achievements of ln(1 + success %)) − 1. "
        "*Scoreboard*: over every episode completed within the budget (training and "
        "evaluation alike); *final agent*: over the final policy's episodes on unseen seeds.",
        "",
        "## Measured here",
        "",
        "All rows below were measured by this command, on this machine, with the same "
        "observation and env-step budget.",
        "",
        "| variant | score (scoreboard) | score (final agent) | diamond (final agent) "
        "| episodes (scoreboard / final) | env steps | wall time | seeds |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name in VARIANTS:
        if name not in results:
            continue
        r = results[name]
        if "error" in r:
            lines.append(f"| {LABELS[name]} | failed: {r['error'][:80]} | | | | | | |")
            continue
        lines.append(
            f"| {LABELS[name]} | {_pct(r['scoreboard']['score'])} | {_pct(r['final']['score'])} "
            f"| {_pct(r['final']['diamond'])} | {r['scoreboard']['episodes']} / "
            f"{r['final']['episodes']} | {_steps(r['env_steps'])} | {_duration(r['wall_s'])} "
            f"| {_seeds_text(r.get('seeds', {}))} |"
        )
    lines.append("")
    for name in VARIANTS:
        r = results.get(name)
        if r is None or "error" in r:
            continue
        lines += _variant_section(name, r)
    lines += [
        "## Published (not measured here)",
        "",
        "Crafter scores reported in the papers below, for orientation only: other code, "
        "machines and protocols (1M env steps for the learning agents; SPRING uses no "
        "training), **not** produced by this benchmark and not comparable figure for figure.",
        "",
        "| method (published) | Crafter score | source |",
        "|---|---:|---|",
    ]
    for anchor in PUBLISHED:
        lines.append(f"| {anchor['method']} | {anchor['score']:.1f} % | {anchor['source']} |")
    lines.append("")
    return "\n".join(lines)


def _variant_section(name: str, r: Mapping[str, Any]) -> list[str]:
    board, final = r["scoreboard"], r["final"]
    lines = [
        f"### {LABELS[name]}",
        "",
        _DESCRIPTIONS[name],
        "",
        f"Crafter score: **{_pct(board['score'])}** scoreboard ({board['episodes']} episodes, "
        f"{_steps(board['steps'])} steps), **{_pct(final['score'])}** final agent "
        f"({final['episodes']} episodes). Diamond (final agent): {_pct(final['diamond'])}. "
        f"Env steps in all: {_steps(r['env_steps'])}; wall time {_duration(r['wall_s'])}. "
        f"Seeds: {_seeds_text(r.get('seeds', {}))}.",
        "",
    ]
    extra = []
    if "causes" in r:
        causes = ", ".join(f"{k} {v}" for k, v in sorted(r["causes"]["scoreboard"].items()))
        extra.append(f"How scoreboard episodes ended: {causes}.")
    if "episode_kinds" in r:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r["episode_kinds"].items()))
        extra.append(
            f"Episodes by kind: {kinds}. The run's own final success on "
            f"`{r['target']}`: {100 * r['final_success']:.1f} %. Run folder `{r['run_dir']}`."
        )
    if "ppo" in r:
        extra.append("PPO settings: " + ", ".join(f"{k}={v}" for k, v in r["ppo"].items()) + ".")
    if extra:
        lines += [" ".join(extra), ""]
    lines += [
        "| achievement | scoreboard | | final agent | |",
        "|---|---:|---|---:|---|",
    ]
    for a in ACHIEVEMENTS:
        s, f = board["rates"][a], final["rates"][a]
        lines.append(f"| {a} | {s:.1f} % | `{bar(s)}` | {f:.1f} % | `{bar(f)}` |")
    lines.append("")
    return lines


_DESCRIPTIONS = {
    "rlgpt": "The full system (`run.py`, offline backend unless the config says otherwise): "
    "slow agent, fast agent and critic over code and PPO stages. Scoreboard over every "
    "episode the run stepped (`episodes.jsonl`: code evaluations, training, final).",
    "code": "The skill library's composed curriculum policy, no RL: one coded stage per "
    "achievement in `knowledge.recipes.curriculum()` order, the library's best template "
    "for each, survival needs served by the task planner (`envs.composite.run_composed`). "
    "Code does not learn, so the final agent is the same policy on unseen seeds.",
    "ppo": "Plain stable-baselines3 PPO, Crafter's 17 primitive actions, no coded actions, "
    "Crafter's own reward (first unlock of an achievement in an episode +1, health "
    "change ±0.1), the system's learner settings; every training episode counts for the "
    "scoreboard; the final policy samples its actions.",
}


# ---------------------------------------------------------------------- main


def _strip_episodes(result: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "episodes"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small budgets (minutes)")
    parser.add_argument("--budget", type=int, default=0, help="env steps per variant")
    parser.add_argument("--final", type=int, default=0, help="final-agent episodes")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "crafter"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default=str(ROOT / "configs" / "crafter.toml"))
    parser.add_argument("--episode-steps", type=int, default=EPISODE_STEPS)
    parser.add_argument("--rlgpt-timeout", type=float, default=0.0, help="seconds (0: none)")
    parser.add_argument("--workdir", default="", help="where runs and policies go (default: temp)")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    budget = args.budget or (QUICK_BUDGET if args.quick else DEFAULT_BUDGET)
    final_n = args.final or (QUICK_FINAL if args.quick else DEFAULT_FINAL)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench-crafter-"))
    workdir.mkdir(parents=True, exist_ok=True)
    date = datetime.datetime.now().astimezone()
    given = sys.argv[1:] if argv is None else argv
    meta = {
        "command": shlex.join(["python", "benchmarks/bench_crafter.py", *given]),
        "date": date.isoformat(timespec="seconds"),
        "quick": args.quick,
        "budget": budget,
        "final_episodes": final_n,
        "episode_steps": args.episode_steps,
        "seed": args.seed,
        "variants": variants,
        "machine": machine(),
        "versions": versions(),
        "processes": PROCESSES,
    }
    print(f"bench_crafter: {variants}, budget {budget:,} env steps, {final_n} final episodes")
    results: dict[str, Any] = {}
    for name in variants:
        started = time.monotonic()
        print(f"[{name}] running…", flush=True)
        try:
            if name == "code":
                r = run_code(budget, final_n, args.seed, max_steps=args.episode_steps)
            elif name == "ppo":
                r = run_ppo(
                    budget, final_n, args.seed, max_steps=args.episode_steps,
                    workdir=workdir / "ppo",
                )  # fmt: skip
            else:
                r = run_rlgpt(
                    budget, final_n, args.seed, quick=args.quick, config=Path(args.config),
                    workdir=workdir / "rlgpt", timeout_s=args.rlgpt_timeout or None,
                    episode_steps=args.episode_steps,
                )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a failed variant is reported, not fatal
            r = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"[{name}] failed: {r['error']}", flush=True)
        else:
            print(
                f"[{name}] score scoreboard {r['scoreboard']['score']:.2f} % "
                f"({r['scoreboard']['episodes']} episodes), final {r['final']['score']:.2f} % "
                f"({r['final']['episodes']}), diamond {r['final']['diamond']:.1f} %, "
                f"{r['env_steps']:,} env steps, {time.monotonic() - started:.0f} s",
                flush=True,
            )
        results[name] = r
    report = {"meta": meta, "results": {k: _strip_episodes(v) for k, v in results.items()}}
    out = Path(args.out)
    out.write_text(render_markdown(report))
    raw_dir = Path(args.results)
    raw_dir.mkdir(parents=True, exist_ok=True)
    stamp = date.strftime("%Y%m%d-%H%M%S") + ("-quick" if args.quick else "")
    raw = raw_dir / f"{stamp}-{'-'.join(variants)}.json"
    full = {"meta": meta, "results": results, "published": list(PUBLISHED)}
    raw.write_text(json.dumps(full, indent=1, default=_json_default) + "\n")
    print(f"wrote {out} and {raw}")
    return 1 if any("error" in r for r in results.values()) else 0


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value)
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
