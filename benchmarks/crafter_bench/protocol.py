"""The scoreboard protocol: budgets, world seeds, and the figures an episode list gives.

Every variant is held to the same protocol: episodes completed within a budget of env
steps make the *scoreboard*; the final policy's episodes on unseen world seeds make the
*final agent*. Success rates are shown in percent, as Crafter's papers give them;
``method.ledger`` counts in fractions, so :func:`percent` converts where they meet.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from method import ledger, seeds

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

VARIANTS = ("rlgpt", "norl", "code", "ppo")
"""The variants compared, in the order the tables list them: the full system, the same
loop with RL disabled (no learner actor: every sub-action stays code), the skill
library's code alone, and plain PPO."""

OBSERVATION = ("view", "inventory", "status")
"""What every variant's learners see: the parts the system's learners use
(``llm/offline.py``), so the comparison is on the same input."""

EPISODE_STEPS = 10_000
"""Crafter's episode length."""
DEFAULT_BUDGET = 1_000_000
"""Env steps per variant: Crafter's scoreboard budget (1M)."""
QUICK_BUDGET = 20_000
"""``--quick``: a budget a 2-core machine spends in minutes."""
DEFAULT_FINAL = 100
"""Final-agent episodes: enough unseen worlds that one lucky world moves a rate by 1 %."""
QUICK_FINAL = 10
"""``--quick``: final-agent episodes."""
FINAL_SEED_BASE = seeds.FINAL_BASE
"""First world seed of the final-agent evaluation, the run's own seed table's: every
variant (rlgpt, code, ppo) reports its final agent on ``final_worlds(seed, n)``, the same
worlds the RL-GPT run's final evaluation uses (paired)."""
SEED_STRIDE = seeds.BENCH_STRIDE
"""Scoreboard world seeds per base seed (code: ``seeds.bench_seeds(seed)``): no budget
plays a million episodes, so two base seeds never share a world."""


def final_worlds(seed: int, episodes: int) -> list[int]:
    """The final agent's worlds for base seed ``seed``: the same for every variant."""
    return seeds.final_seeds(seed, episodes)


PROCESSES = 2
"""Worker processes for the code variant's episodes and the ppo variant's evaluation."""


def percent(fractions: Mapping[str, float]) -> dict[str, float]:
    """Success rates in % over the 22 achievements, from ``method.ledger.rates``'
    fractions (an achievement never unlocked: 0)."""
    return {name: 100.0 * fractions.get(name, 0.0) for name in ACHIEVEMENTS}


def success_rates(episodes: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Per achievement, the percentage of ``episodes`` that unlocked it at least once."""
    return percent(ledger.rates(ledger.tally(episodes)))


def summarize(episodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Episodes (or ledger lines) → count, steps, success rates (%), score (%), diamond
    success (%)."""
    tallied = ledger.tally(episodes)
    fractions = ledger.rates(tallied)
    rates = percent(fractions)
    return {
        "episodes": tallied["episodes"],
        "steps": tallied["steps"],
        "rates": rates,
        "score": ledger.crafter_score(fractions, ACHIEVEMENTS),
        "diamond": rates["collect_diamond"],
    }


def run_episodes_within(
    play: Callable[[int], dict], seeds: Iterable[int], budget: int, processes: int = PROCESSES
) -> tuple[list[dict], int]:
    """Play episodes on ``seeds`` in order (``processes`` at once) until the budget of
    env steps is spent. Returns the episodes completed within it — the longest prefix,
    in seed order, whose steps sum to at most ``budget`` (independent of timing) — and
    the env steps stepped in all (those of episodes past the budget included)."""
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
