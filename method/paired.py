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

This module is the one home of that choice. Within an inner loop the fast agent keeps
one :class:`KeptVersion` per mode and grows an undecided comparison on further worlds
(:func:`grow_by`; from starts it first draws worlds until enough reach the stage,
:func:`worlds_to_draw`); across inner loops the slow agent takes :func:`chosen_version` of a
sub-action's outcomes, with the incumbent's outcomes on a later loop's worlds joined in
(:func:`join_incumbent`). The actors only run the evaluations these ask for.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from messages.causes import CODE_FAULTS, SETUP_FAILED, cause_kind
from messages.plan import SubActionOutcome
from messages.rollout import EpisodeReport, RolloutResult
from messages.task import Stage
from runtime.events import log

NOT_REACHED = -1
"""A world whose episode never reached the stage."""
Z95 = 1.959963984540054
"""The normal quantile of a two-sided 95 % interval."""
START_DRAW_FACTOR = 8
"""From starts, at most this many choosing worlds are drawn per world wanted that
reaches the stage: 8x ``code_episodes`` for the choosing worlds (:func:`worlds_to_draw`),
8x ``decide_episodes`` in all when a comparison grows (:func:`grow_by`). A
world that does not reach it costs its setup once per runner (then nothing: its
failure is kept); collect_diamond's
setup reached its start in about half the worlds, deep stages of the simplest templates
in a fifth, so 8x finds them all but always and bounds what a stage no setup reaches
costs: 8x ``code_episodes`` composed setups, about what two versions cost from reset."""


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


# ---------------------------------------------------------------------- within an inner loop


@dataclasses.dataclass
class KeptVersion:
    """The version of a sub-action kept so far in one mode (the incumbent): the first
    measured, replaced only by a version measurably better on the same worlds
    (:func:`compare`), never on a tie."""

    rate: float = -1.0
    """Its success rate among the evaluation worlds that reached it (-1: no version)."""
    stage: Stage | None = None
    """The version itself, None until one was measured."""
    mode: str = "code"
    """``code`` or ``rl``: which inner loop it came from."""
    task_rate: float = 0.0
    """The success rate of the whole composed episode it was measured in, over the
    ``code_episodes`` choosing worlds (from starts too: an episode from a start goes on
    exactly as the composed episode that made it, so its end is that episode's end)."""
    seeds: list[int] = dataclasses.field(default_factory=list)
    """The evaluation worlds of :attr:`outcomes`, in order."""
    outcomes: list[int] = dataclasses.field(default_factory=list)
    """Its outcome per evaluation world (1, 0, or -1 not reached); from starts, the
    worlds drawn until ``code_episodes`` reached the stage (:func:`worlds_to_draw`)."""
    faulted: bool = False
    """Whether it failed everywhere it ran by a fault of its code (:func:`faulted`)."""
    more: dict[int, int] = dataclasses.field(default_factory=dict)
    """Its outcomes on further choosing worlds, by seed, where a comparison grew
    (:func:`grow_by`): measured once, reused by every later challenger."""

    def offer(
        self,
        result: RolloutResult,
        name: str,
        stage: Stage,
        seeds: list[int],
        more: dict[int, int] | None = None,
        task_rate: float | None = None,
    ) -> bool:
        """Keep ``stage`` if it is the first version, or measurably better than the kept
        one; a version with no success is kept too when it is the first (an empty stage
        would break every composed episode after it). A kept version that only ever
        faulted (the sandbox stopped it, it crashed its runner) is replaced by the first
        version that does not: it has no behaviour to compare. Returns whether it was
        kept. ``more``: the challenger's outcomes on further worlds, by seed, compared
        with the kept version's on the same ones. ``task_rate``: the whole composed
        episode's success rate (default: ``result``'s, over all its episodes)."""
        more = more or {}
        rate, _ = result.stage_rate(name)
        outcomes = stage_outcomes(result, name, seeds)
        broken = faulted(result, name)
        if self.stage is not None and self.faulted and not broken:
            log.info("version_compared", subaction=name, mode=self.mode, kept=False,
                     reason="the kept version only faulted")  # fmt: skip
        elif self.stage is not None:
            verdict = self.compare(outcomes, more)
            log.info(
                "version_compared",
                subaction=name,
                mode=self.mode,
                kept=not verdict.challenger_wins,
                worlds=verdict.worlds,
                difference=round(verdict.difference, 4),
                lower=round(verdict.lower, 4),
            )
            if not verdict.challenger_wins:
                return False
        task = result.success_rate if task_rate is None else task_rate
        self.rate, self.stage, self.task_rate = rate, stage, task
        self.outcomes, self.faulted, self.more = outcomes, broken, dict(more)
        self.seeds = list(seeds)
        return True

    def meets(self, target: float) -> bool:
        """Whether the kept version answers ``target``: it was measured and is not
        measurably under it (:func:`below_target`, over the worlds that reached it)."""
        return self.stage is not None and not below_target(
            self.rate, reached(self.outcomes), target
        )

    def grown(self) -> list[int]:
        """The worlds of :attr:`more` outside its evaluation worlds, in order."""
        return sorted(set(self.more) - set(self.seeds))

    def compare(self, outcomes: list[int], more: dict[int, int]) -> Comparison:
        """A challenger's outcomes (on the evaluation worlds, and ``more`` further ones
        by seed) against this version's on the same worlds."""
        extra = sorted(s for s in more if s in self.more)  # another comparison's growth: not ours
        return compare(
            self.outcomes + [self.more[s] for s in extra], outcomes + [more[s] for s in extra]
        )


def can_grow(kept: KeptVersion, result: RolloutResult, name: str, seeds: Sequence[int]) -> bool:
    """Whether a challenger's comparison with ``kept`` may grow at all: both have
    behaviour to compare (neither only faulted) and there are worlds to start from."""
    return not (kept.stage is None or kept.faulted or faulted(result, name) or not seeds)


def grow_by(verdict: Comparison, drawn: int, cap: int, starts: bool) -> int | None:
    """How many further choosing worlds an undecided comparison asks for next, or None
    when it stops: it is decided (or the challenger does not lead), or it has ``cap``
    (``[task] decide_episodes``) worlds. ``drawn``: the worlds played so far. Each round
    doubles the worlds; from ``starts`` a comparison grows in worlds that reach the stage
    (the pairs: a world that does not reach it says nothing of either version), so it
    draws as many more as the share reached so far needs, at most
    :data:`START_DRAW_FACTOR` times as many."""
    have = verdict.worlds if starts else drawn
    if not verdict.undecided or have >= cap:
        return None
    count = min(have, cap - have)
    if starts:
        share = max(have, 1) / drawn  # of the worlds drawn so far, those reached
        # At most START_DRAW_FACTOR x decide_episodes worlds in all: pairs that stop
        # coming (later worlds' setups fail) must not draw the whole code range.
        room = max(0, START_DRAW_FACTOR * cap - drawn)
        count = min(-(-count // share), START_DRAW_FACTOR * count, room)
    return int(count)


def worlds_to_draw(
    name: str, want: int, got: int, episodes: Sequence[EpisodeReport], limit: int
) -> int:
    """From starts: how many further choosing worlds a version's first evaluation draws
    next so that ``want`` worlds reach stage ``name`` (``got`` did so far, of
    ``episodes``), at most ``limit`` worlds in all; 0 when drawing stops. Only a world
    whose setup died (``setup_failed``) asks for another: one the stage did not get to
    for any other reason (the environment could not run it, a runner crashed) would fail
    as well elsewhere, so drawing stops there."""
    setups_only = all(e.reached(name) or e.cause == SETUP_FAILED for e in episodes)
    if got >= want or len(episodes) >= limit or not setups_only:
        return 0
    share = max(got, 1) / len(episodes)
    return int(min(-(-(want - got) // share), limit - len(episodes)))


# ---------------------------------------------------------------------- across inner loops


def usable(outcome: SubActionOutcome) -> bool:
    """Whether the outcome's stage can run: it has code or a policy."""
    return bool(outcome.stage.code.strip() or outcome.stage.policy_path)


def chosen_version(outs: Sequence[SubActionOutcome]) -> SubActionOutcome:
    """The version the run stands on and the final policy uses: the first usable one (a
    stage with code or a policy), replaced by a later one only when it is measurably
    better on the same worlds (:func:`compare`: the lower bound of the paired difference
    above 0). A tie keeps the incumbent: no preference for learned or for newer. Only
    when no version is usable is the first outcome returned (its stage empty: the final
    policy leaves such a stage out and says so)."""
    candidates = [o for o in outs if usable(o)]
    if not candidates:
        return outs[0]
    kept = candidates[0]
    for challenger in candidates[1:]:
        paired = paired_outcomes(kept, challenger)
        if paired is not None and compare(*paired).challenger_wins:
            kept = challenger
    return kept


def join_incumbent(
    outs: list[SubActionOutcome], kept: SubActionOutcome, outcome: SubActionOutcome
) -> None:
    """Add to ``kept`` (one of ``outs``, the incumbent an inner loop was asked to
    measure its versions against: ``WorkOn.incumbent``) its outcomes on the worlds that
    loop played it on (``outcome.incumbent_seeds``), so that :func:`chosen_version` pairs the
    two on every one. Measured after the same stages as the challenger, they replace
    what it had for the same worlds."""
    if outcome.incumbent_seeds:
        at = next(i for i, o in enumerate(outs) if o is kept)
        outs[at] = played_on(kept, outcome.incumbent_seeds, outcome.incumbent_outcomes)
