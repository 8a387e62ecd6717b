"""Choosing between two versions of a stage by measured confidence, never by a coin flip.

Both versions are evaluated on the same worlds (the run's *code* seeds, composed after
the same stages): each world gives a pair of outcomes, 1 (the stage succeeded), 0 (it
failed) or :data:`NOT_REACHED` (the episode never got to the stage: a predecessor's
fault, which says nothing about the stage). Only worlds where both versions reached the
stage are compared.

The paired difference in success is ``(n10 − n01) / n``: ``n10`` worlds where only the
challenger succeeded, ``n01`` where only the incumbent did, ``n`` compared worlds. The
worlds where both agree carry no information on which is better; the discordant ones
are a binomial sample of "the challenger wins a disagreement" (McNemar's framing). Its
95 % Wilson score interval gives a lower bound ``p_lo`` on that share, and the lower
bound of the paired difference is ``(n10 + n01) / n × (2·p_lo − 1)``. A challenger
replaces the incumbent only when that bound is above 0 — four disagreements, all won,
are the least that can do it; 7 won of 8 do, 6 of 8 do not — and a tie keeps the
incumbent, whatever its mode or age.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from messages.causes import CODE_FAULTS, cause_kind

NOT_REACHED = -1
"""A world whose episode never reached the stage."""
Z95 = 1.959963984540054
"""The normal quantile of a two-sided 95 % interval."""


@dataclasses.dataclass(frozen=True)
class Comparison:
    """What the paired comparison of a challenger with the incumbent measured."""

    worlds: int
    """Worlds where both versions reached the stage (the pairs compared)."""
    challenger_only: int
    """Worlds where only the challenger succeeded."""
    incumbent_only: int
    """Worlds where only the incumbent succeeded."""
    difference: float
    """Paired difference in success rate, challenger minus incumbent (0 with no pairs)."""
    lower: float
    """Lower bound of its 95 % interval (−1 with no disagreement to go on)."""

    @property
    def challenger_wins(self) -> bool:
        """Whether the challenger should replace the incumbent: the bound is above 0."""
        return self.lower > 0.0

    @property
    def undecided(self) -> bool:
        """The challenger did better on these worlds, but not measurably: more paired
        worlds could decide it."""
        return self.difference > 0.0 and not self.challenger_wins


def wilson_lower(successes: int, trials: int, z: float = Z95) -> float:
    """Lower end of the Wilson score interval of a binomial share (0 with no trials)."""
    if trials <= 0:
        return 0.0
    p = successes / trials
    centre = p + z * z / (2 * trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    return max(0.0, (centre - spread) / (1 + z * z / trials))


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """The 95 % Wilson score interval of a binomial share ((0, 1) with no trials)."""
    if trials <= 0:
        return 0.0, 1.0
    upper = 1.0 - wilson_lower(trials - successes, trials, z)
    return wilson_lower(successes, trials, z), upper


def compare(incumbent: Sequence[int], challenger: Sequence[int]) -> Comparison:
    """The paired comparison of two versions' per-world outcomes (1, 0 or
    :data:`NOT_REACHED`, world for world: the same worlds in the same order)."""
    if len(incumbent) != len(challenger):
        raise ValueError(
            f"paired outcomes need the same worlds: {len(incumbent)} against {len(challenger)}"
        )
    pairs = [(a, b) for a, b in zip(incumbent, challenger, strict=True) if min(a, b) >= 0]
    n = len(pairs)
    wins = sum(1 for a, b in pairs if b > a)
    losses = sum(1 for a, b in pairs if a > b)
    disagreements = wins + losses
    if n == 0 or disagreements == 0:
        return Comparison(n, wins, losses, 0.0, -1.0)
    share = wilson_lower(wins, disagreements)
    difference = (wins - losses) / n
    # Never above the estimate (Wilson's bound on 0 wins is 0 only up to rounding).
    lower = min(disagreements / n * (2 * share - 1), difference)
    return Comparison(n, wins, losses, difference, lower)


def paired_outcomes(a: Any, b: Any) -> tuple[list[int], list[int]] | None:
    """Two versions' outcomes (:class:`~messages.plan.SubActionOutcome`) on the worlds
    both were evaluated on, world for world, ready for :func:`compare` (matched by seed:
    inner loops from starts draw worlds of their own), or None when they share none.
    Outcomes with no seeds recorded pair by position, and only when they have the same
    length (what the run did before seeds were recorded)."""
    if not (a.seeds and b.seeds):
        if len(a.seed_outcomes) != len(b.seed_outcomes) or not a.seed_outcomes:
            return None
        return list(a.seed_outcomes), list(b.seed_outcomes)
    theirs = dict(zip(b.seeds, b.seed_outcomes, strict=False))
    common = [(o, theirs[s]) for s, o in zip(a.seeds, a.seed_outcomes, strict=False) if s in theirs]
    if not common:
        return None
    return [x for x, _ in common], [y for _, y in common]


def played_on(outcome: Any, seeds: Sequence[int], outcomes: Sequence[int]) -> Any:
    """``outcome`` (a :class:`~messages.plan.SubActionOutcome`) with its version's
    outcomes on further worlds added, by seed: where it already had one for a world, the
    new one replaces it (measured again, after the stages its challenger ran after)."""
    if len(seeds) != len(outcomes):
        raise ValueError(f"{len(seeds)} worlds against {len(outcomes)} outcomes")
    if not outcome.seeds and outcome.seed_outcomes:
        return outcome  # recorded before seeds were: nothing to match new worlds with
    by_seed = dict(zip(outcome.seeds, outcome.seed_outcomes, strict=True))
    by_seed.update(zip(seeds, outcomes, strict=True))
    order = list(outcome.seeds) + [s for s in dict.fromkeys(seeds) if s not in outcome.seeds]
    return dataclasses.replace(outcome, seeds=order, seed_outcomes=[by_seed[s] for s in order])


def stage_outcomes(result: Any, stage: str, seeds: Sequence[int]) -> list[int]:
    """Per world of ``seeds`` (in that order), how the episode of a
    :class:`~messages.rollout.RolloutResult` went for ``stage``: 1 success, 0 failure,
    :data:`NOT_REACHED` (or no episode for that world)."""
    by_seed = {e.seed: e for e in result.episodes}
    outcomes = []
    for seed in seeds:
        e = by_seed.get(seed)
        outcomes.append(NOT_REACHED if e is None or not e.reached(stage) else int(e.success))
    return outcomes


def faulted(result: Any, stage: str) -> bool:
    """Whether ``stage`` ran in some episode of ``result`` and failed in every one of
    them by a fault of its code (:data:`~messages.causes.CODE_FAULTS`: the sandbox
    stopped it, it raised, it crashed its process): such a version has no behaviour to
    compare, so the first version that runs replaces it without a paired test."""
    causes = []
    for e in result.episodes:
        if not e.reached(stage):
            continue
        if e.success:
            return False
        runs = [r for r in e.stages if r.name == stage]
        causes.append(runs[-1].cause if runs else e.cause)
    return bool(causes) and all(cause_kind(c) in CODE_FAULTS for c in causes)


def reached(outcomes: Sequence[int]) -> int:
    """Worlds whose episode reached the stage."""
    return sum(1 for o in outcomes if o >= 0)


def below_target(rate: float, reached: int, target: float) -> bool:
    """Whether a version's success is *measurably* under ``target``: the upper end of
    the 95 % Wilson interval of ``rate`` over the ``reached`` worlds is below it. With
    no world reached nothing was measured: under its target, as its rate (0) says.

    A stage that truly succeeds 95 % of the time misses a 0.9 target on 4 worlds about
    one time in five (a single failure gives 0.75); what its 4 worlds say is only that
    it is not measurably under it (3 of 4: Wilson 0.30–0.95). Moving such a stage to RL
    or revising it again is a coin flip, so neither is done on so little."""
    if reached <= 0:
        return rate < target
    successes = round(rate * reached)
    return wilson_interval(successes, reached)[1] < target
