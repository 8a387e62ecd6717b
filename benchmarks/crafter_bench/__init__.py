"""Benchmark: RL-GPT on Crafter's 22 achievements, beside two baselines measured alike.

    python -m benchmarks.crafter_bench                    full run: 1M env steps per variant
    python -m benchmarks.crafter_bench --quick            small budgets (minutes)
    python -m benchmarks.crafter_bench --variants code,ppo --budget 200000 --final 50
    python -m benchmarks.crafter_bench --out BENCHMARKS.md --seed 0

(``python benchmarks/bench_crafter.py`` with the same flags runs the same command.)

Writes ``BENCHMARKS.md`` (``--out``) and the raw figures as JSON in
``benchmarks/results/crafter/<date>-<variants>.json``. Three variants, each given the
same budget of env steps (``--budget``, Crafter's 1M by default) and the same
observation (the local 9×7 view one-hot, inventory and vitals: what the system's
learners see, ``rl.rl_env``):

``rlgpt``  the full system: ``run.py --config crafter`` in a subprocess,
           with ``[task] env_steps`` set to the budget and runs written under a folder of
           this benchmark. The run writes ``episodes.jsonl`` (one line per episode it
           stepped: kind code/train/final, seed, steps, achievements unlocked) and
           ``summary.json`` (env_steps, wall_s, final_success, target); both are read here
           (:mod:`.rlgpt`, :mod:`.run_ledger`).
``code``   code only, no RL: the skill library's composed curriculum policy — one coded
           stage per achievement in ``knowledge.recipes.curriculum()`` order (each with
           the library's best template, prerequisites secured recursively) and the
           survival needs — played by ``episodes.composite.run_composed`` on fresh worlds
           until the budget is spent, episodes as long as Crafter's (10,000 steps)
           (:mod:`.code_only`).
``ppo``    plain stable-baselines3 PPO with Crafter's 17 primitive actions and Crafter's
           own reward (+1 for the first unlock of an achievement in an episode, ±0.1 per
           health point), on ``SubtaskEnv`` with no coded actions and a subtask that never
           succeeds early (so an episode is Crafter's: until death or 10,000 steps); the
           same PPO builder and settings as the system's learners (:mod:`.ppo`).

The **Crafter score** is ``exp(mean_i ln(1 + s_i)) - 1`` over the 22 achievements, with
``s_i`` the percentage of episodes in which achievement ``i`` was unlocked at least once
(Hafner 2021); the one implementation is ``method.ledger.crafter_score``. It is given two
ways (:mod:`.protocol`):

- **scoreboard**: over every episode completed within the budget (training and
  evaluation episodes alike: the protocol of Crafter's scoreboard);
- **final agent**: over the final policy's episodes on ``--final`` unseen world seeds
  (100 by default).

Published scores (:mod:`.published`) are listed in a separate table and never mixed with
measured ones (:mod:`.markdown`). Not a test: it prints figures, writes files and exits 0
(1 if a variant failed).
"""

from .cli import main
from .code_only import code_episode, run_code
from .markdown import BAR_WIDTH, LABELS, bar, render_markdown
from .ppo import ppo_config, ppo_settings, run_ppo
from .protocol import (
    ACHIEVEMENTS,
    DEFAULT_BUDGET,
    DEFAULT_FINAL,
    EPISODE_STEPS,
    FINAL_SEED_BASE,
    OBSERVATION,
    PROCESSES,
    QUICK_BUDGET,
    QUICK_FINAL,
    SEED_STRIDE,
    VARIANTS,
    run_episodes_within,
    success_rates,
    summarize,
)
from .provenance import machine, versions
from .published import PUBLISHED
from .rlgpt import rlgpt_config, run_rlgpt
from .run_ledger import EPISODE_KINDS, LedgerError, ledger_result, read_ledger
from .toml_writer import dump_toml

__all__ = [
    "ACHIEVEMENTS",
    "BAR_WIDTH",
    "DEFAULT_BUDGET",
    "DEFAULT_FINAL",
    "EPISODE_KINDS",
    "EPISODE_STEPS",
    "FINAL_SEED_BASE",
    "LABELS",
    "OBSERVATION",
    "PROCESSES",
    "PUBLISHED",
    "QUICK_BUDGET",
    "QUICK_FINAL",
    "SEED_STRIDE",
    "VARIANTS",
    "LedgerError",
    "bar",
    "code_episode",
    "dump_toml",
    "ledger_result",
    "machine",
    "main",
    "ppo_config",
    "ppo_settings",
    "read_ledger",
    "render_markdown",
    "rlgpt_config",
    "run_code",
    "run_episodes_within",
    "run_ppo",
    "run_rlgpt",
    "success_rates",
    "summarize",
    "versions",
]
