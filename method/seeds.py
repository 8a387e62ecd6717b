"""Every world seed a run uses, in one table: which worlds train, which choose between
versions, which report. Ranges never overlap for any run seed in ``RUN_SEEDS``
(``tests/test_seeds.py`` checks it), so no world is both trained on and reported.

| range       | worlds                                      | used for                          |
|-------------|---------------------------------------------|-----------------------------------|
| training    | ``seed·10,000 + [0, 10,000)``               | a learner's training resets       |
| code        | ``500,000 + seed·1,000 + [0, 1,000)``       | evaluating code versions/policies |
| held-out    | ``1,000,000 + [0, 10,000)``                 | a learner's held-out success rate |
| final       | ``2,000,000 + seed·1,000 + [0, 1,000)``     | the final policy's evaluation     |
| play        | ``3,000,000 + seed·100,000 + [0, 100,000)`` | playing on to the env-step budget |
| retry k     | training + ``k·RETRY_STRIDE``, k = 1…9      | a training reset whose setup died |
| bench board | ``100,000,000 + seed·1,000,000 + [0, 1M)``  | a benchmark variant's own episodes|
| confirm     | ``200,000,000 + seed·1,000,000 + [0, 1M)``  | a kept choice checked after a run |
| arbiter     | ``300,000,000 + part·1,000,000 + [0, 1M)``  | the survival arbiter's benchmark: |
|             |                                             | part 0 trains, 1 chooses, 2 reports |

Choosing and reporting never share a world: versions are chosen on the *code* worlds
(and a learner's *held-out* worlds), the final policy is reported on the *final* worlds,
which nothing else touches. Every benchmark variant (RL-GPT, code-only, PPO) reports its
final agent on the same ``final_seeds(seed, n)``: paired, world for world.

A training reset whose setup dies retries the world ``RETRY_STRIDE`` further on
(:mod:`rl.rl_env`, ``setup_retry_stride``), up to ``SETUP_RETRIES`` times: those
worlds have rows of their own above, past every other range.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

RUN_SEEDS = range(50)
"""Run seeds (``[run] seed``) for which the ranges below stay apart: 50 training pools of
10,000 worlds end where the code seeds start."""
POOL_STRIDE = 10_000
"""Training pools start at ``seed × POOL_STRIDE``; a job trains on at most this many."""
CODE_BASE = 500_000
CODE_STRIDE = 1_000
"""Code seeds of run seed ``s``: ``CODE_BASE + s·CODE_STRIDE + k``, at most a stride."""
HELD_OUT_BASE = 1_000_000
"""A learner's held-out worlds (:attr:`messages.train.TrainRequest.eval_seed`)."""
HELD_OUT_SIZE = 10_000
FINAL_BASE = 2_000_000
FINAL_STRIDE = 1_000
"""Final-evaluation seeds of run seed ``s``: ``FINAL_BASE + s·FINAL_STRIDE + k``."""
PLAY_BASE = 3_000_000
PLAY_STRIDE = 100_000
"""Worlds played after the final evaluation, until the env-step budget is spent."""
SETUP_RETRIES = 9
"""Further worlds a training reset tries when setup code fails on one (the player can die
on the way to a sub-action's start); a config whose setup keeps failing still fails.
Deep stages need the room: collect_diamond's setup (the coded chain to an iron pickaxe)
died in 18 of 40 worlds (17 of 40 with the survival needs served), so with 3 retries a
job of a few hundred worlds all but surely met a world whose 4 tries all died and failed
whole (a diamond run); with 9 that is ~0.03 % per world at that rate. The retry
rows stay below the bench rows."""
SETUP_REDRAWS = 10
"""Further pool worlds a training reset draws when a world and all its retries died in
setup, once that env's setup has made a start (so the code works): a deep chain from the
bare templates died in setup on its way to collect_diamond often enough that a world met
10 deaths in a row, and the job ended after 961 of its 8,192 decisions. The
redraws stay in the training pool and its retry rows: no new range."""
RETRY_STRIDE = 10_000_000
"""Retry ``k`` of a training world ``w`` plays world ``w + k·RETRY_STRIDE``."""
BENCH_BASE = 100_000_000
BENCH_STRIDE = 1_000_000
"""A benchmark variant's own episodes (code-only's scoreboard) for base seed ``s``:
``BENCH_BASE + s·BENCH_STRIDE + k``."""
CONFIRM_BASE = 200_000_000
CONFIRM_STRIDE = 1_000_000
"""Worlds on which a finished run's kept choice (a learned version over its code) is
checked again (``benchmarks/bench_confirm.py``) for run seed ``s``:
``CONFIRM_BASE + s·CONFIRM_STRIDE + k``; the run never played them, so a choice made on
the code worlds is reported on others."""


@dataclasses.dataclass(frozen=True)
class SeedRange:
    name: str
    """What the worlds are for."""
    worlds: range
    """The seeds, at the range's widest."""


def code_seeds(seed: int, episodes: int) -> list[int]:
    """Worlds code versions and trained policies are evaluated on (choosing)."""
    return _take(CODE_BASE + seed * CODE_STRIDE, episodes, CODE_STRIDE, "code_episodes")


def more_code_seeds(seeds: Sequence[int], have: int, count: int) -> list[int]:
    """The ``count`` choosing worlds after the first ``have`` of a run's code seeds
    (``seeds``: its first ones, :func:`code_seeds`): where a comparison of two versions
    grows when the first worlds did not decide it. They stay inside the code range."""
    if not seeds:
        return []
    start = seeds[0]
    if code_seeds_within(seeds, have, count) < count:
        raise ValueError(f"code seeds from {start}: {have} + {count} leave the run's code range")
    return list(range(start + have, start + have + count))


def code_seeds_within(seeds: Sequence[int], have: int, count: int) -> int:
    """``count``, less what would pass the end of the run's code range after the first
    ``have`` of ``seeds`` (a run's first code seeds): how many :func:`more_code_seeds`
    can give. Seeds outside every run's code range are not bounded."""
    if not seeds:
        return 0
    offset = seeds[0] - CODE_BASE
    if not 0 <= offset < len(RUN_SEEDS) * CODE_STRIDE:
        return count
    return max(0, min(count, CODE_STRIDE - offset % CODE_STRIDE - have))


def final_seeds(seed: int, episodes: int) -> list[int]:
    """Worlds the final policy is evaluated on (reporting): used by nothing else."""
    return _take(FINAL_BASE + seed * FINAL_STRIDE, episodes, FINAL_STRIDE, "eval_episodes")


def play_seeds(seed: int) -> range:
    """Worlds the final policy plays on after its evaluation (the scoreboard protocol)."""
    start = PLAY_BASE + seed * PLAY_STRIDE
    return range(start, start + PLAY_STRIDE)


def bench_seeds(seed: int) -> range:
    """Worlds a benchmark variant plays for its own scoreboard (not its final agent)."""
    return _stride(BENCH_BASE, seed, BENCH_STRIDE)


def confirm_seeds(seed: int) -> range:
    """Worlds a finished run's kept choice is checked on again (never played by a run)."""
    return _stride(CONFIRM_BASE, seed, CONFIRM_STRIDE)


def training_pool(seed: int, worlds: int) -> range:
    """The worlds a training job of run seed ``seed`` resets into."""
    if not 0 <= worlds <= POOL_STRIDE:
        raise ValueError(f"train_worlds is at most {POOL_STRIDE}, not {worlds}")
    return range(seed * POOL_STRIDE, seed * POOL_STRIDE + worlds)


ARBITER_BASE = 300_000_000
ARBITER_STRIDE = 1_000_000
ARBITER_PARTS = {"train": 0, "choose": 1, "report": 2}
"""The survival arbiter's benchmark (``benchmarks/bench_arbiter.py``): it trains on part
``train``, picks among its checkpoints on part ``choose`` and reports learned against
coded, paired, on part ``report`` (``ARBITER_BASE + part·ARBITER_STRIDE + k``)."""


def arbiter_seeds(part: str, n: int, first: int = 0) -> list[int]:
    """``n`` worlds of the arbiter benchmark's ``part`` ('train', 'choose', 'report')."""
    if part not in ARBITER_PARTS:
        raise ValueError(f"part must be one of {sorted(ARBITER_PARTS)}, not {part!r}")
    if not (0 <= first and n >= 0 and first + n <= ARBITER_STRIDE):
        raise ValueError(f"worlds {first}…{first + n} lie outside one part's {ARBITER_STRIDE}")
    base = ARBITER_BASE + ARBITER_PARTS[part] * ARBITER_STRIDE + first
    return list(range(base, base + n))


def table(seed: int) -> list[SeedRange]:
    """Every range of run seed ``seed`` at its widest."""
    return [
        SeedRange("training", training_pool(seed, POOL_STRIDE)),
        SeedRange("code", _stride(CODE_BASE, seed, CODE_STRIDE)),
        SeedRange("held_out", range(HELD_OUT_BASE, HELD_OUT_BASE + HELD_OUT_SIZE)),
        SeedRange("final", _stride(FINAL_BASE, seed, FINAL_STRIDE)),
        SeedRange("play", play_seeds(seed)),
        *(
            SeedRange(f"retry {k}", _shifted(training_pool(seed, POOL_STRIDE), k * RETRY_STRIDE))
            for k in range(1, SETUP_RETRIES + 1)
        ),
        SeedRange("bench board", bench_seeds(seed)),
        SeedRange("confirm", confirm_seeds(seed)),
        *(
            SeedRange(f"arbiter {part}", _stride(ARBITER_BASE, k, ARBITER_STRIDE))
            for part, k in ARBITER_PARTS.items()
        ),
    ]


SHARED = frozenset({"held_out", *(f"arbiter {part}" for part in ARBITER_PARTS)})
"""Rows that are the same for every run seed: held-out worlds only report, and the
arbiter benchmark's worlds are its own."""


def _shifted(worlds: range, by: int) -> range:
    return range(worlds.start + by, worlds.stop + by)


def _stride(base: int, seed: int, stride: int) -> range:
    return range(base + seed * stride, base + (seed + 1) * stride)


def _take(start: int, n: int, stride: int, key: str) -> list[int]:
    if not 0 <= n <= stride:
        raise ValueError(f"{key} is at most {stride} (one seed range), not {n}")
    return list(range(start, start + n))
