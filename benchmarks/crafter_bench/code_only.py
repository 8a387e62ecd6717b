"""Variant ``code``: the skill library's composed curriculum policy, no RL.

One coded stage per achievement in ``knowledge.recipes.curriculum()`` order (each with the
library's best template) and the survival needs, played by ``episodes.composite.run_composed``
on fresh worlds until the budget is spent. Code does not learn, so the final agent is the
same policy on unseen seeds.
"""

from __future__ import annotations

import collections
import multiprocessing
import time
from typing import Any

from method import seeds

from .protocol import (
    EPISODE_STEPS,
    PROCESSES,
    final_worlds,
    run_episodes_within,
    summarize,
)

EPISODE_WALL_S = 3600.0
"""Wall budget of one coded episode (10,000 steps take ~1–3 minutes)."""

_WORKER: dict[str, Any] = {}
"""This process's world, compiled stages and episode length: prepared once before the
pool forks, so every worker inherits them instead of compiling its own."""


def _prepare_code() -> dict[str, Any]:
    """The world and the compiled stages, once per process (``run_code`` prepares them
    before forking its workers, which inherit them)."""
    from episodes.composite import prepare_stages
    from knowledge import library, recipes, survival
    from worlds.crafter_world import CrafterWorld

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
    from episodes.composite import run_composed
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
    started = time.monotonic()
    _WORKER["max_steps"] = max_steps  # inherited by the forked workers...
    _prepare_code()  # ...and so are the compiled stages
    worlds = seeds.bench_seeds(seed)
    first = worlds.start
    board, stepped = run_episodes_within(_play_code, worlds, budget, processes)
    board_s = time.monotonic() - started
    final_seeds = final_worlds(seed, final_episodes)  # the same as every variant's
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
