"""Figures across run seeds: each variant's mean and 95 % interval over its runs, the
paired comparison of two variants on the same final worlds, and score curves read from
one run at fixed points of counted env steps.

A variant run with run seeds 0, 1, 2 gives three results. Across them, a figure's mean
comes with Student's t interval (n − 1 degrees of freedom: with 3 runs the interval is
the mean ± 4.30 standard errors, wide on purpose). Every variant's final agent of run
seed ``s`` plays the same worlds (``protocol.final_worlds(s, n)``), so two variants are
also compared world for world: per world, the number of achievements unlocked, and
diamond or not (:func:`method.paired.compare`, McNemar's framing).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from method import ledger
from method.paired import compare, wilson_interval

from .protocol import ACHIEVEMENTS

CURVE_POINTS = (50_000, 150_000, 500_000, 1_000_000)
"""Counted env steps at which a run's scoreboard score is read (those within its budget)."""

T975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    15: 2.131,
    20: 2.086,
    30: 2.042,
    60: 2.000,
    120: 1.980,
}
"""Student's t, two-sided 95 % (the 0.975 quantile), by degrees of freedom; between rows
the next smaller row's value (wider), past the last the normal 1.96."""


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (≥ 1)."""
    if df < 1:
        raise ValueError(f"t interval needs at least 2 values (df {df})")
    if df > max(T975):
        return 1.959963984540054
    return T975[max(k for k in T975 if k <= df)]


def mean_interval(values: Sequence[float]) -> dict[str, Any]:
    """Mean of ``values`` with its 95 % t interval (None for fewer than 2 values)."""
    values = [float(v) for v in values]
    if not values:
        return {"n": 0, "mean": None, "low": None, "high": None}
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"n": 1, "mean": mean, "low": None, "high": None}
    half = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return {"n": len(values), "mean": mean, "low": mean - half, "high": mean + half}


def curve(episodes: Iterable[Mapping[str, Any]], budget: int) -> dict[int, float | None]:
    """The scoreboard score (%) over the episodes booked within the first ``point``
    counted env steps, for each of :data:`CURVE_POINTS` up to ``budget`` (episodes in
    booking order, as ``method.ledger.scoreboard`` reads them)."""
    lines = list(episodes)
    return {
        point: ledger.scoreboard(lines, ACHIEVEMENTS, point)["score"]
        for point in CURVE_POINTS
        if point <= budget
    }


def _final_by_world(result: Mapping[str, Any]) -> dict[int, set[str]]:
    return {
        int(ep["seed"]): set(ep.get("achievements", ())) for ep in result.get("final_worlds", ())
    }


def final_worlds(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What a result keeps of its final episodes for pairing: seed and achievements."""
    episodes = result.get("episodes", {}).get("final", [])
    return [
        {"seed": int(ep["seed"]), "achievements": sorted(set(ep.get("achievements", ())))}
        for ep in episodes
    ]


def paired(
    runs_a: Mapping[int, Mapping[str, Any]], runs_b: Mapping[int, Mapping[str, Any]]
) -> dict[str, Any] | None:
    """Variant A against variant B on the final worlds both played (every run seed they
    share): the mean per-world difference in achievements unlocked (A − B) with its
    95 % t interval, the diamond comparison (B the incumbent, A the challenger), and the
    per-run-seed differences of the final Crafter score."""
    shared = sorted(set(runs_a) & set(runs_b))
    diffs: list[float] = []
    dia_a: list[int] = []
    dia_b: list[int] = []
    score_diffs: list[float] = []
    for seed in shared:
        a, b = runs_a[seed], runs_b[seed]
        if "error" in a or "error" in b:
            continue
        wa, wb = _final_by_world(a), _final_by_world(b)
        for world in sorted(set(wa) & set(wb)):
            diffs.append(len(wa[world] & set(ACHIEVEMENTS)) - len(wb[world] & set(ACHIEVEMENTS)))
            dia_a.append(int("collect_diamond" in wa[world]))
            dia_b.append(int("collect_diamond" in wb[world]))
        score_diffs.append(a["final"]["score"] - b["final"]["score"])
    if not diffs:
        return None
    diamond = compare(dia_b, dia_a)
    return {
        "run_seeds": len(score_diffs),
        "worlds": len(diffs),
        "achievements": mean_interval(diffs),
        "diamond": {
            "a": sum(dia_a),
            "b": sum(dia_b),
            "a_only": diamond.challenger_only,
            "b_only": diamond.incumbent_only,
            "difference": diamond.difference,
            "lower": diamond.lower,
        },
        "score": mean_interval(score_diffs),
    }


def summary(runs: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """A variant's figures across its runs (failed runs left out and counted)."""
    ok = [r for _, r in sorted(runs.items()) if "error" not in r]
    finals = [ep for r in ok for ep in r.get("final_worlds", ())]
    diamonds = sum(1 for ep in finals if "collect_diamond" in ep["achievements"])
    low, high = wilson_interval(diamonds, len(finals))
    return {
        "runs": len(ok),
        "failed": len(runs) - len(ok),
        "seeds": [s for s, r in sorted(runs.items()) if "error" not in r],
        "scoreboard": mean_interval([r["scoreboard"]["score"] for r in ok]),
        "final": mean_interval([r["final"]["score"] for r in ok]),
        "diamond_runs": mean_interval([r["final"]["diamond"] for r in ok]),
        "diamond_pooled": {
            "wins": diamonds,
            "episodes": len(finals),
            "low": 100.0 * low,
            "high": 100.0 * high,
        },
        "env_steps": mean_interval([r["env_steps"] for r in ok]),
        "wall_s": mean_interval([r["wall_s"] for r in ok]),
    }
