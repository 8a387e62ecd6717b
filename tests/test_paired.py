"""Selection by measured confidence: the paired comparison (``method.paired``) on
hand-made outcomes, and the rules the fast and slow agents follow with it."""

from __future__ import annotations

import dataclasses
import math

import pytest
import trio

from actors.slow import SlowAgent, _unreached
from messages.plan import Plan, RunTask, SubAction, SubActionOutcome, WorkOn
from messages.rollout import EpisodeReport, RolloutResult, StageRun
from messages.task import Stage, Subtask
from method.paired import (
    NOT_REACHED,
    START_DRAW_FACTOR,
    KeptVersion,
    below_target,
    can_grow,
    chosen_version,
    compare,
    faulted,
    grow_by,
    join_incumbent,
    stage_outcomes,
    wilson_interval,
    wilson_lower,
    worlds_to_draw,
)

X = NOT_REACHED


def test_wilson_lower_bound_by_hand():
    # All of n won: the bound is n / (n + z²); z² = 3.8415. 4 → 0.51010, 3 → 0.43850.
    assert wilson_lower(4, 4) == pytest.approx(4 / (4 + 1.959964**2), abs=1e-6)
    assert wilson_lower(3, 3) == pytest.approx(0.43850, abs=1e-5)
    assert wilson_lower(0, 0) == 0.0
    # 7 of 8: p = 0.875, (0.875 + 0.24009 - 1.95996·sqrt(0.013672 + 0.015006)) / 1.48019
    assert wilson_lower(7, 8) == pytest.approx(
        (0.875 + 3.8415 / 16 - 1.959964 * math.sqrt(0.875 * 0.125 / 8 + 3.8415 / 256))
        / (1 + 3.8415 / 8),
        abs=1e-4,
    )


def test_a_target_is_missed_only_when_measurably():
    # 3 of 4: Wilson 95 % upper end 1 − lower(1 of 4) = 0.9544 ≥ 0.9: not measurably under.
    assert 1 - wilson_lower(1, 4) == pytest.approx(0.9544, abs=1e-4)
    assert not below_target(0.75, 4, 0.9)
    assert below_target(0.5, 4, 0.9)  # 2 of 4: upper 0.85
    assert not below_target(0.8, 20, 0.9)  # 16 of 20: upper 0.919
    assert below_target(0.7, 20, 0.9)  # 14 of 20: upper 0.855
    assert below_target(0.6, 22, 0.9)
    assert not below_target(0.95, 20, 0.9)
    assert below_target(0.0, 0, 0.9)  # nothing measured: its rate, 0, is under
    assert not below_target(0.0, 0, 0.0)


def test_a_tie_keeps_the_incumbent():
    same = [1, 0, 1, 1, 0] * 4
    verdict = compare(same, same)
    assert (verdict.difference, verdict.worlds, verdict.challenger_wins) == (0.0, 20, False)


def test_four_disagreements_all_won_are_the_least_that_replace():
    incumbent = [0] * 4 + [1] * 16
    four = [1] * 4 + [1] * 16
    verdict = compare(incumbent, four)
    # 4 of 4 won: 4/20 × (2 × 0.5101 − 1) = 0.00404 > 0.
    assert verdict.difference == pytest.approx(0.2)
    assert verdict.lower == pytest.approx(0.2 * (2 * wilson_lower(4, 4) - 1))
    assert verdict.challenger_wins
    three = [1] * 3 + [0] + [1] * 16
    assert not compare(incumbent, three).challenger_wins  # 3 of 3: bound below 0


def test_a_better_rate_on_few_worlds_does_not_replace():
    # 7 against 6 successes on 8 worlds (one disagreement): not a measured difference.
    incumbent = [1, 1, 1, 1, 1, 1, 0, 0]
    challenger = [1, 1, 1, 1, 1, 1, 1, 0]
    verdict = compare(incumbent, challenger)
    assert verdict.difference == pytest.approx(1 / 8) and not verdict.challenger_wins
    # 7 of 8 disagreements won passes; 6 of 8 does not.
    a = [0] * 7 + [1] + [1] * 12
    assert compare(a, [1] * 7 + [0] + [1] * 12).challenger_wins
    b = [0] * 6 + [1] * 2 + [1] * 12
    assert not compare(b, [1] * 6 + [0] * 2 + [1] * 12).challenger_wins


def test_worlds_one_version_never_reached_are_not_compared():
    # The challenger succeeds on worlds the incumbent never reached: no evidence.
    incumbent = [X] * 6 + [1, 0]
    challenger = [1] * 6 + [1, 0]
    verdict = compare(incumbent, challenger)
    assert verdict.worlds == 2 and verdict.difference == 0.0 and not verdict.challenger_wins


def test_outcomes_must_be_on_the_same_worlds():
    with pytest.raises(ValueError, match="same worlds"):
        compare([1, 0], [1])


# ---------------------------------------------------------------------- the agents' rules

NAME = "collect_stone"
SEEDS = list(range(500_000, 500_020))


def result(outcomes: list[int]) -> RolloutResult:
    """A composed evaluation with the given per-world outcomes for stage NAME."""
    episodes = []
    for seed, o in zip(SEEDS, outcomes, strict=True):
        runs = [] if o == X else [StageRun(NAME, bool(o), 10, "success" if o else "step_budget")]
        episodes.append(EpisodeReport(seed, o == 1, 10, 0.0, [], "x", stages=runs))
    return RolloutResult.of_episodes(NAME, episodes, actor_id="t")


def stage(code: str) -> Stage:
    return Stage(subtask=Subtask(name=NAME), code=code)


def test_the_first_version_is_kept_even_with_no_success():
    best = KeptVersion()
    assert best.offer(result([0] * 20), NAME, stage("v1"), SEEDS)
    assert best.stage is not None and best.stage.code == "v1" and best.rate == 0.0


def test_the_kept_version_meets_its_target_unless_measurably_under_it():
    best = KeptVersion()
    assert not best.meets(0.9)  # nothing measured
    best.offer(result([1] * 16 + [0] * 4), NAME, stage("v1"), SEEDS)
    assert best.rate == 0.8 and best.meets(0.9)  # 16 of 20: Wilson upper end 0.919
    worse = KeptVersion()
    worse.offer(result([1] * 14 + [0] * 6), NAME, stage("v1"), SEEDS)
    assert not worse.meets(0.9)  # 14 of 20: upper end 0.855
    # Only the worlds that reached the stage count: 8 of 10 (upper end 0.943), not 8 of 20.
    unreached = KeptVersion()
    unreached.offer(result([1] * 8 + [0] * 2 + [X] * 10), NAME, stage("v1"), SEEDS)
    assert unreached.rate == 0.8 and unreached.meets(0.9)


def test_a_later_version_replaces_only_when_measurably_better():
    best = KeptVersion()
    best.offer(result([1] * 10 + [0] * 10), NAME, stage("v1"), SEEDS)
    # Same rate on other worlds (5 disagreements each way): kept.
    assert not best.offer(result([0] * 5 + [1] * 10 + [0] * 5), NAME, stage("v2"), SEEDS)
    # One more success: kept (a coin flip would have taken it).
    assert not best.offer(result([1] * 11 + [0] * 9), NAME, stage("v3"), SEEDS)
    assert best.stage.code == "v1"
    assert best.offer(result([1] * 18 + [0] * 2), NAME, stage("v4"), SEEDS)
    assert best.stage.code == "v4" and best.rate == 0.9


def faulting(causes: list[str]) -> RolloutResult:
    """A composed evaluation whose stage NAME failed on every world with these causes."""
    episodes = [
        EpisodeReport(seed, False, 1, 0.0, [], cause, stages=[StageRun(NAME, False, 1, cause)])
        for seed, cause in zip(SEEDS, causes, strict=True)
    ]
    return RolloutResult.of_episodes(NAME, episodes, actor_id="t")


def test_a_version_that_only_faulted_is_replaced_by_the_first_that_runs():
    best = KeptVersion()
    assert best.offer(faulting(["memory"] * 20), NAME, stage("v1"), SEEDS)
    assert best.faulted
    # Another faulting version does not replace it (a tie, as before)...
    assert not best.offer(faulting(["crashed"] * 20), NAME, stage("v2"), SEEDS)
    # ...one that ran does, even with 3 successes of 20 (paired, that would not be enough).
    assert best.offer(result([1] * 3 + [0] * 17), NAME, stage("v3"), SEEDS)
    assert best.stage.code == "v3" and not best.faulted
    # From then on, the paired rule again: a faulting version never replaces it.
    assert not best.offer(faulting(["recursion"] * 20), NAME, stage("v4"), SEEDS)


def test_faulted_needs_every_reached_episode_to_fault():
    assert faulted(faulting(["timeout"] * 19 + ["crashed"]), NAME)
    # One episode that failed by the world (not the code) is behaviour: not faulted.
    assert not faulted(faulting(["memory"] * 19 + ["step_budget"]), NAME)
    assert not faulted(result([X] * 20), NAME)  # never reached: nothing to say
    assert not faulted(result([0] * 20), NAME)


def outcome(mode: str, outcomes: list[int], code: str = "x", policy: str = "") -> SubActionOutcome:
    rate = sum(o == 1 for o in outcomes) / max(1, sum(o >= 0 for o in outcomes))
    st = Stage(subtask=Subtask(name=NAME), code=code, policy_path=policy)
    return SubActionOutcome(
        NAME, mode, rate, rate >= 0.9, st, 1, seed_outcomes=outcomes,
        reached=sum(o >= 0 for o in outcomes),
    )  # fmt: skip


def test_a_learned_version_does_not_win_a_tie():
    coded = outcome("code", [1] * 12 + [0] * 8)
    learned = outcome("rl", [1] * 12 + [0] * 8, code="", policy="p.zip")
    assert chosen_version([coded, learned]) is coded
    better = outcome("rl", [1] * 19 + [0], code="", policy="p.zip")
    assert chosen_version([coded, learned, better]) is better


def test_versions_of_different_inner_loops_are_paired_by_world_seed():
    """Inner loops from starts draw worlds of their own: outcomes of equal length need
    not be of the same worlds, and outcomes of unequal length can share many."""
    coded = outcome("code", [0] * 20)
    coded.seeds.extend(range(100, 120))
    # The same count of outcomes, on other worlds: nothing to pair, the first stays.
    elsewhere = outcome("rl", [1] * 20, code="", policy="p.zip")
    elsewhere.seeds.extend(range(200, 220))
    assert chosen_version([coded, elsewhere]) is coded
    # More worlds drawn, 12 of them the coded version's: paired on those, it wins.
    overlapping = outcome("rl", [1] * 24, code="", policy="p.zip")
    overlapping.seeds.extend([*range(108, 120), *range(300, 312)])
    assert chosen_version([coded, overlapping]) is overlapping
    # Outcomes from before seeds were recorded still pair by position.
    assert (
        chosen_version(
            [outcome("code", [0] * 20), outcome("rl", [1] * 20, code="", policy="p.zip")]
        ).mode
        == "rl"
    )


def test_an_empty_stage_is_never_chosen():
    empty = outcome("rl", [1] * 20, code="")  # training failed: nothing to compose
    coded = outcome("code", [0] * 20)
    assert chosen_version([coded, empty]) is coded
    assert chosen_version([empty, coded]) is coded


def test_an_undecided_comparison_doubles_its_worlds_up_to_the_cap():
    undecided = compare([1, 1, 0, 0], [1, 1, 1, 1])  # 2 of 2 disagreements: not enough
    assert undecided.undecided
    assert grow_by(undecided, drawn=4, cap=16, starts=False) == 4
    assert grow_by(undecided, drawn=12, cap=16, starts=False) == 4  # only what the cap leaves
    assert grow_by(undecided, drawn=16, cap=16, starts=False) is None
    # Decided either way, or the challenger not ahead: nothing more to play.
    assert grow_by(compare([0] * 8, [1] * 8), drawn=8, cap=16, starts=False) is None
    assert grow_by(compare([1] * 4, [0] * 4), drawn=4, cap=16, starts=False) is None


def test_from_starts_a_comparison_grows_in_pairs_and_draws_at_most_its_factor():
    undecided = compare([1, 1, 0, 0], [1, 1, 1, 1])
    # 4 pairs of 8 worlds drawn: half reach, so 8 more worlds for 4 more pairs.
    assert grow_by(undecided, drawn=8, cap=16, starts=True) == 8
    # Nothing left under START_DRAW_FACTOR x cap worlds drawn: 0 asked for.
    assert grow_by(undecided, drawn=START_DRAW_FACTOR * 16, cap=16, starts=True) == 0


def test_worlds_are_drawn_until_enough_reach_and_only_for_setups_that_died():
    def episode(seed: int, reached: bool, cause: str = "setup_failed") -> EpisodeReport:
        runs = [StageRun(NAME, True, 10, "success")] if reached else []
        return EpisodeReport(seed, reached, 10, 0.0, [], cause, stages=runs)

    two = [episode(0, True), episode(1, True), episode(2, False), episode(3, False)]
    # 2 of 4 reached: 2 more wanted at that share asks for 4 worlds.
    assert worlds_to_draw(NAME, 4, 2, two, limit=32) == 4
    assert worlds_to_draw(NAME, 4, 2, two, limit=6) == 2  # not past the limit
    assert worlds_to_draw(NAME, 4, 4, two, limit=32) == 0  # enough reached
    failing = [*two[:3], episode(3, False, "rollout_failed")]
    assert worlds_to_draw(NAME, 4, 2, failing, limit=32) == 0  # would fail elsewhere too


def test_a_comparison_grows_only_between_versions_that_ran():
    kept = KeptVersion()
    assert not can_grow(kept, result([1] * 20), NAME, SEEDS)  # nothing kept yet
    kept.offer(result([1] * 10 + [0] * 10), NAME, stage("v1"), SEEDS)
    assert can_grow(kept, result([1] * 20), NAME, SEEDS)
    assert not can_grow(kept, faulting(["memory"] * 20), NAME, SEEDS)
    assert not can_grow(kept, result([1] * 20), NAME, [])


def test_stage_outcomes_follow_the_worlds_order():
    got = stage_outcomes(result([1, 0, X] + [0] * 17), NAME, SEEDS[:3] + [7])
    assert got == [1, 0, X, X]  # a world with no episode is not reached


class FakeAgents:
    """A stand-in for the run's agents: the slow agent's model answers with a fixed
    revision (moving every sub-action to RL), so the slow agent's own rule is tested."""

    async def call(self, role: str, purpose: str, request: dict) -> dict:
        self.request = request
        changes = [{"subaction": s["name"], "change": "to_rl"} for s in request["subactions"]]
        return {"changes": changes, "reason": "fake"}


def test_a_stage_never_reached_is_not_sent_to_rl_for_its_predecessors():
    wood = SubAction("collect_wood", Subtask(name="collect_wood"), "code")
    stone = SubAction("collect_stone", Subtask(name=NAME), "code", depends=["collect_wood"])
    plan = Plan(task="t", version=1, subactions=[wood, stone])
    outcomes = {
        "collect_wood": [outcome("code", [1] * 2 + [0] * 18)],
        "collect_stone": [outcome("code", [1] * 2 + [X] * 18)],
    }
    outcomes["collect_stone"][0] = outcome("code", [X] * 20)
    assert _unreached(outcomes["collect_stone"]) and not _unreached(outcomes["collect_wood"])
    slow = SlowAgent.__new__(SlowAgent)
    slow.agents = FakeAgents()
    task = RunTask("t", "stone", 0.5, 3, 10_000, eval_seeds=[], code_seeds=SEEDS)
    revised = trio.run(slow._revise, task, plan, outcomes, 0.0, 1, 0)
    assert revised is not None
    new, redo = revised
    modes = {s.name: s.mode for s in new.subactions}
    assert modes == {"collect_wood": "rl", "collect_stone": "code"}
    assert list(redo) == ["collect_wood"]
    stone_summary = slow.agents.request["subactions"][1]
    assert stone_summary["reached"] is False and stone_summary["exhausted"] is False


def test_wilson_interval_by_hand():
    # 16 of 50: p = 0.32; Wilson: (0.32 + 0.038415 ± 1.96·sqrt(0.004352 + 0.000384)) / 1.07683
    low, high = wilson_interval(16, 50)
    assert low == pytest.approx(0.2076, abs=1e-3) and high == pytest.approx(0.4581, abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(5, 5)[1] == pytest.approx(1.0)


# ------------------------------------------------- growing a comparison the worlds did not decide


def worlds(seeds: list[int], wins: object) -> RolloutResult:
    """A composed evaluation on ``seeds`` where stage NAME succeeds where ``wins(seed)``."""
    episodes = []
    for seed in seeds:
        ok = bool(wins(seed))
        runs = [StageRun(NAME, ok, 10, "success" if ok else "step_budget")]
        episodes.append(EpisodeReport(seed, ok, 10, 0.0, [], "x", stages=runs))
    return RolloutResult.of_episodes(NAME, episodes, actor_id="t")


# How two code versions play, world by world: v1 succeeds on every second world, v2 on
# seven of every eight (so on 4 worlds, 4 of 4 against 2 of 4: better, not decided).
PLAYS = {"v1": lambda seed: seed % 2 == 0, "v2": lambda seed: seed % 8 != 7, "v3": lambda s: 1}


class EvaluatingFast:
    """A fast agent whose evaluation is a fake (``PLAYS``, no environment): the part under
    test is what it asks to be played and what it keeps."""

    def __init__(self, tmp_path: object, decide: int) -> None:
        from actors.fast import FastAgent
        from method.agents import Agents
        from method.settings import MethodSettings

        settings = MethodSettings()
        settings.task.decide_episodes = decide
        agents = Agents(None, tmp_path)
        self.agent = FastAgent(agents=agents, settings=settings, environments=1, run_dir=tmp_path)
        self.played: list[tuple[str, list[int]]] = []

        async def evaluate(work: WorkOn, stage: Stage) -> RolloutResult:
            self.played.append((stage.code, list(work.seeds)))
            return worlds(list(work.seeds), PLAYS[stage.code])

        self.agent._evaluate = evaluate


def settle(fast: EvaluatingFast, best: KeptVersion, code: str, seeds: list[int]) -> bool:
    from actors.fast import _InnerLoop

    work = WorkOn(SubAction(NAME, Subtask(name=NAME)), seeds=seeds)
    loop = _InnerLoop()

    async def go() -> bool:
        result = await fast.agent._evaluate(work, stage(code))
        more = await fast.agent._settle(work, best, result, stage(code), loop)
        return best.offer(result, NAME, stage(code), seeds, more)

    return trio.run(go)


FOUR = list(range(500_000, 500_004))


def test_a_better_challenger_gets_more_worlds_until_the_bound_decides(tmp_path) -> None:
    fast = EvaluatingFast(tmp_path, decide=16)
    best = KeptVersion()
    best.offer(worlds(FOUR, PLAYS["v1"]), NAME, stage("v1"), FOUR)
    assert settle(fast, best, "v2", FOUR)  # 4 of 4 against 2 of 4 alone would not replace
    assert best.stage.code == "v2"
    # Played on 4 more worlds, then 8 more: the next choosing worlds, both versions each.
    assert fast.played[1:] == [
        ("v1", list(range(500_004, 500_008))),
        ("v2", list(range(500_004, 500_008))),
        ("v1", list(range(500_008, 500_016))),
        ("v2", list(range(500_008, 500_016))),
    ]
    # The new incumbent keeps its outcomes there: a later challenger is compared on them.
    assert sorted(best.more) == list(range(500_004, 500_016))


def test_without_room_to_grow_the_four_worlds_keep_the_incumbent(tmp_path) -> None:
    fast = EvaluatingFast(tmp_path, decide=4)
    best = KeptVersion()
    best.offer(worlds(FOUR, PLAYS["v1"]), NAME, stage("v1"), FOUR)
    assert not settle(fast, best, "v2", FOUR)
    assert best.stage.code == "v1" and fast.played == [("v2", FOUR)]


def test_a_challenger_no_better_is_not_played_again(tmp_path) -> None:
    fast = EvaluatingFast(tmp_path, decide=16)
    best = KeptVersion()
    best.offer(worlds(FOUR, PLAYS["v2"]), NAME, stage("v2"), FOUR)
    assert not settle(fast, best, "v1", FOUR)
    assert fast.played == [("v1", FOUR)]


def test_the_incumbents_further_worlds_are_played_once(tmp_path) -> None:
    fast = EvaluatingFast(tmp_path, decide=8)
    best = KeptVersion()
    best.offer(worlds(FOUR, PLAYS["v1"]), NAME, stage("v1"), FOUR)
    settle(fast, best, "v2", FOUR)  # grows to 8 worlds; 7 of 8 against 4 of 8 is not enough
    assert best.stage.code == "v1"
    fast.played.clear()
    assert settle(fast, best, "v3", FOUR)  # v1's outcomes on worlds 4-7 are reused
    assert fast.played == [("v3", FOUR), ("v3", list(range(500_004, 500_008)))]


def test_a_comparison_from_starts_stops_drawing_when_pairs_stop_coming(tmp_path) -> None:
    from actors.fast import _InnerLoop

    fast = EvaluatingFast(tmp_path, decide=16)
    evaluate = fast.agent._evaluate

    async def from_starts(work: WorkOn, stage: Stage) -> RolloutResult:
        # Only the first four worlds' setups reach the stage: no pair comes after.
        got = await evaluate(work, stage)
        episodes = [
            e if e.seed in FOUR else dataclasses.replace(e, success=False, stages=[])
            for e in got.episodes
        ]
        return RolloutResult.of_episodes(NAME, episodes, actor_id="t")

    fast.agent._evaluate = from_starts
    best = KeptVersion()
    best.offer(worlds(FOUR, PLAYS["v1"]), NAME, stage("v1"), FOUR)
    before = Stage(Subtask(name="collect_wood"), code="x")
    work = WorkOn(SubAction(NAME, Subtask(name=NAME)), before=[before], seeds=FOUR)
    assert fast.agent._from_starts(work)

    async def go() -> dict[int, int]:
        result = await fast.agent._evaluate(work, stage("v2"))
        return await fast.agent._settle(work, best, result, stage("v2"), _InnerLoop())

    more = trio.run(go)
    # Undecided on the four pairs, it draws further worlds, but never past 8x
    # decide_episodes in all (not the whole code range).
    assert more and len(FOUR) + len(more) <= START_DRAW_FACTOR * 16
    assert max(more) < FOUR[0] + START_DRAW_FACTOR * 16


def _draw_from_starts(tmp_path, cause: str) -> list[tuple[str, list[int]]]:
    """What ``_draw`` asks to be played when only two of the first four worlds reach the stage
    and every other one ends, not reached, with ``cause``."""
    from actors.fast import _InnerLoop

    fast = EvaluatingFast(tmp_path, decide=16)
    evaluate = fast.agent._evaluate

    async def from_starts(work: WorkOn, stage: Stage) -> RolloutResult:
        got = await evaluate(work, stage)
        episodes = [
            e if e.seed in FOUR[:2] else dataclasses.replace(e, success=False, stages=[],
                                                             cause=cause)
            for e in got.episodes
        ]  # fmt: skip
        return RolloutResult.of_episodes(NAME, episodes, actor_id="t")

    fast.agent._evaluate = from_starts
    before = Stage(Subtask(name="collect_wood"), code="x")
    work = WorkOn(SubAction(NAME, Subtask(name=NAME)), before=[before], seeds=FOUR)

    async def go() -> None:
        result = await fast.agent._evaluate(work, stage("v1"))
        await fast.agent._draw(work, stage("v1"), result, _InnerLoop())

    trio.run(go)
    return fast.played


def test_worlds_are_drawn_for_setups_that_died_and_not_for_a_failing_environment(tmp_path):

    # Setups that died: further worlds are drawn (none of them reaches: up to the cap).
    played = _draw_from_starts(tmp_path, "setup_failed")
    assert len(played) > 1
    assert sum(len(seeds) for _, seeds in played) == START_DRAW_FACTOR * len(FOUR)
    # The environment could not run the stage's episodes: more worlds would fail alike.
    assert len(_draw_from_starts(tmp_path / "b", "rollout_failed")) == 1


def test_more_code_seeds_stay_in_the_run_code_range() -> None:
    from method.seeds import (
        CODE_BASE,
        CODE_STRIDE,
        code_seeds,
        code_seeds_within,
        more_code_seeds,
    )

    first = code_seeds(3, 4)
    assert more_code_seeds(first, 4, 4) == list(range(first[0] + 4, first[0] + 8))
    with pytest.raises(ValueError, match="code range"):
        more_code_seeds(first, CODE_STRIDE - 2, 4)
    assert first[0] == CODE_BASE + 3 * CODE_STRIDE
    # How many further code seeds there is room for, as more_code_seeds checks it.
    assert code_seeds_within(first, 4, 10) == 10
    assert code_seeds_within(first, CODE_STRIDE - 2, 4) == 2
    assert code_seeds_within(first, CODE_STRIDE, 4) == 0
    assert code_seeds_within([7], 0, 4) == 4  # not a run's code seeds: not bounded


def test_the_reports_coded_against_learned_cell_is_paired_by_seed():
    """report.md's table: learned minus coded on the worlds both played, its 95 % interval
    worked by hand (10 disagreements, all the learned version's, on 20 pairs: Wilson's
    lower bound on 10/10 is 0.7225, so the difference's is 0.5 × (2 × 0.7225 − 1) = 0.22)."""
    from method.report import _paired_cell

    coded = outcome("code", [0] * 20)
    coded.seeds.extend(range(100, 120))
    learned = outcome("rl", [X] * 4 + [1] * 10 + [0] * 10, code="", policy="p.zip")
    learned.seeds.extend([*range(500, 504), *range(100, 120)])
    assert _paired_cell(coded, learned) == (
        "+0.50 [+0.22, +0.50] on 20 pairs (successes: coded 0, learned 10)",
        "learned (measurably)",
    )
    assert _paired_cell(learned, coded)[1] == "coded (measurably)"
    elsewhere = outcome("rl", [1] * 20, code="", policy="p.zip")
    elsewhere.seeds.extend(range(900, 920))
    assert _paired_cell(coded, elsewhere) == ("not on the same worlds", "–")
    tie = outcome("rl", [1] + [0] * 19, code="", policy="p.zip")
    tie.seeds.extend(range(100, 120))
    assert _paired_cell(coded, tie)[1] == "not measurably different"


def report_md(tmp_path, outcomes: list[SubActionOutcome], stage: Stage) -> str:
    """report.md of a run with these outcomes and one final stage (diamond.toml's settings,
    a bare summary)."""
    from helpers import ROOT

    from messages.plan import TaskReport
    from method.report import write_report
    from method.settings import load

    settings = load(str(ROOT / "rlgpt" / "configs" / "diamond.toml"))
    task = RunTask("t", "diamond", 0.3, 1, 10_000, eval_seeds=[2_000_000], code_seeds=[])
    report = TaskReport([], outcomes, 0.0, 1, [], "iterations", stages=[stage])
    summary = {
        "backend": "offline", "model_calls": 0, "model_calls_replayed": 0, "tokens_in": 0,
        "tokens_out": 0, "wall_s": 1.0, "wall_limit_reached": False, "env_steps": 10,
        "env_steps_by_kind": {"code": 10}, "final_success_interval": [0.0, 0.8],
    }  # fmt: skip
    return write_report(tmp_path, settings, task, report, summary, []).read_text()


def test_a_sub_action_whose_training_failed_has_no_learned_version_in_the_report(tmp_path):
    """An RL inner loop whose every training job failed reports an empty stage: report.md
    lists no learned version at 0 for it (nor a comparison), and says training failed."""
    coded = outcome("code", [1] * 8 + [0] * 12)
    coded.seeds.extend(range(100, 120))
    failed = outcome("rl", [], code="")
    text = report_md(tmp_path, [coded, failed], coded.stage)
    assert f"| {NAME} | coded | 0.40 | 0.40 | – |" in text
    table = text.split("## Coded against learned", 1)[1].split("\n## ", 1)[0]
    assert "No sub-action was both coded and learned in this run." in table
    assert "without a learned version (every training job failed" in table and NAME in table


def test_a_sub_action_whose_training_failed_has_no_learned_figure(tmp_path):
    """The picture and TensorBoard read the same best versions as report.md: a step whose
    every training job failed has no learned figure (before, both plotted it at 0)."""
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    from messages.plan import TaskReport
    from method.plots import coded_vs_learned
    from method.report import best_rates, failed_rl
    from method.tboard import write_run_events

    coded = outcome("code", [1] * 8 + [0] * 12)
    report = TaskReport([], [coded, outcome("rl", [], code="")], 0.0, 1, [], "iterations")
    assert best_rates(report) == {NAME: {"code": 0.4}}
    assert failed_rl(report) == {NAME}
    assert coded_vs_learned(report, tmp_path / "c.png").stat().st_size > 0
    write_run_events(tmp_path, report, {})
    events = EventMultiplexer()
    events.AddRunsFromDirectory(str(tmp_path / "tensorboard"))
    events.Reload()
    scalars = set(events.Runs()["run"]["scalars"])
    assert f"coded_vs_learned/{NAME}/coded" in scalars
    assert f"coded_vs_learned/{NAME}/learned" not in scalars


# ------------------------------------- a learned version against the code it would replace


def learned(code: str) -> Stage:
    """A learned version that plays as ``PLAYS[code]`` (EvaluatingFast's fake)."""
    return Stage(subtask=Subtask(name=NAME), code=code, policy_path=f"{code}.zip")


def test_played_on_adds_worlds_by_seed_and_a_new_measure_replaces_the_old():
    from method.paired import played_on

    kept = outcome("code", [1, 0, X])
    kept.seeds.extend([10, 11, 12])
    got = played_on(kept, [12, 11, 20, 21], [1, 1, 0, X])
    assert got.seeds == [10, 11, 12, 20, 21]
    assert got.seed_outcomes == [1, 1, 1, 0, X]
    assert kept.seed_outcomes == [1, 0, X]  # a new record: the old one is unchanged
    with pytest.raises(ValueError, match="2 worlds against 1"):
        played_on(kept, [1, 2], [1])


def measured_against(tmp_path, incumbent: str, version: Stage, sub: SubAction) -> tuple:
    """One version measured by the fast agent's ``_measure`` in a loop whose work names
    ``stage(incumbent)`` as the incumbent, the critic's answer a fake: (fast, loop)."""
    from actors.fast import _InnerLoop
    from messages.plan import Critique

    fast = EvaluatingFast(tmp_path, decide=16)

    async def critic(to: str, review: object, **_: object) -> Critique:  # a fake critic
        fast.reviews.append(review)
        return Critique(NAME, review.version, review.mode, 0.0, 0.9, 4, "accept")

    fast.reviews = []

    fast.agent.ask = critic
    loop = _InnerLoop()
    work = WorkOn(sub, seeds=FOUR, incumbent=stage(incumbent))
    trio.run(fast.agent._measure, work, 1, 0, version, loop)
    return fast, loop


@pytest.mark.parametrize("mode", ["rl", "code"])
def test_a_new_version_is_measured_against_the_version_kept_until_decided(tmp_path, mode):
    """The kept coded v1 succeeds on every second world; the new v2 (learned, or a
    redo's code) on seven of eight. On the 4 worlds both loops drew (4 of 4 against 2 of
    4) the slow agent cannot tell them apart and keeps v1. The new loop plays the kept
    version on its worlds and grows the pair to 16, where v2 is measurably better: with
    the kept version's outcomes joined to its record, the slow agent keeps v2. (Within
    one mode this was missing: a 1M run from the simplest templates kept collect_diamond
    at 0.10 over a redo's 0.67.)"""
    from actors.fast import outcome_of

    sub = SubAction(NAME, Subtask(name=NAME), mode=mode)
    version = learned("v2") if mode == "rl" else stage("v2")
    fast, loop = measured_against(tmp_path, "v1", version, sub)
    grown = [list(range(500_004, 500_008)), list(range(500_008, 500_016))]
    assert fast.played == [
        ("v2", FOUR),
        ("v1", FOUR),  # the kept version on the loop's own worlds, once
        ("v1", grown[0]),
        ("v2", grown[0]),
        ("v1", grown[1]),
        ("v2", grown[1]),
    ]
    got = outcome_of(sub, loop)
    assert got.mode == mode and got.seeds == FOUR + grown[0] + grown[1]
    assert got.incumbent_seeds == got.seeds
    assert got.incumbent_outcomes == [int(PLAYS["v1"](s)) for s in got.seeds]
    assert got.seed_outcomes == [int(PLAYS["v2"](s)) for s in got.seeds]

    coded = outcome("code", [1, 0, 1, 0], code="v1")  # what the earlier loop measured
    coded.seeds.extend(FOUR)
    outs = [coded]
    assert chosen_version([coded, got]) is coded  # 4 pairs: undecided, v1 stays
    join_incumbent(outs, coded, got)
    assert outs[0] is not coded and outs[0].seeds == got.seeds
    assert chosen_version([*outs, got]) is got


def test_a_learned_version_no_better_than_the_code_is_not_played_again(tmp_path):
    from actors.fast import outcome_of

    sub = SubAction(NAME, Subtask(name=NAME), mode="rl")
    fast, loop = measured_against(tmp_path, "v2", learned("v1"), sub)
    assert fast.played == [("v1", FOUR), ("v2", FOUR)]  # behind: nothing to grow
    assert outcome_of(sub, loop).incumbent_seeds == FOUR
    assert fast.reviews[0].grown == []  # judged on its four worlds: there were no others


def test_the_critic_reviews_a_version_on_every_world_its_comparison_grew_into(tmp_path):
    """A learned v2 grown against the code from its 4 worlds to 16: the critic gets its
    outcomes on the 12 further worlds too, not only on the loop's first 4 (a
    learned make_stone_pickaxe accepted at 0.97 on its 37 first worlds, 0.85 on all 512)."""
    sub = SubAction(NAME, Subtask(name=NAME), mode="rl")
    fast, _ = measured_against(tmp_path, "v1", learned("v2"), sub)
    (review,) = fast.reviews
    further = range(500_004, 500_016)
    assert sorted(review.grown) == sorted(int(PLAYS["v2"](s)) for s in further)
    assert len(review.result.episodes) == len(FOUR)


def test_a_bound_is_never_on_the_wrong_side_of_its_estimate():
    """3 disagreements on 8 pairs, all lost: the lower bound is the difference itself,
    -0.375, not a rounding error above it (report.md printed -0.38 [-0.37, …])."""
    lost = compare([1, 1, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0])
    assert lost.difference == -0.375 and lost.lower == -0.375
    assert f"{lost.lower:+.2f}" == f"{lost.difference:+.2f}"


def test_the_report_counts_every_learned_version_its_best_was_taken_from(tmp_path):
    """report.md's coded-against-learned table says how many learned versions the best
    was taken from: every version the RL loops measured (one critique each), not the
    number of loops (runs once said 1 for a loop that measured 4)."""
    from messages.plan import Critique

    coded = outcome("code", [1] * 8 + [0] * 12)
    learned = outcome("rl", [1] * 10 + [0] * 10)
    for o in (coded, learned):
        o.seeds.extend(range(100, 120))
    coded.critiques.append(Critique(NAME, 1, "code", 0.4, 0.9, 20, "switch"))
    learned.critiques.extend(
        Critique(NAME, v, "rl", rate, 0.9, 20, "revise")
        for v, rate in ((1, 0.3), (2, 0.5), (3, 0.45))
    )
    text = report_md(tmp_path, [coded, learned], learned.stage)
    table = text.split("## Coded against learned", 1)[1].split("\n## ", 1)[0]
    assert f"| {NAME} | 0.40 | 0.50 |" in table
    assert f"learned versions ({NAME}: 3)" in table


def test_the_curve_starts_from_each_sub_actions_first_version(tmp_path):
    """report.md's per-iteration table and success.png begin with each sub-action's first
    version (the first critique of its first inner loop), not a later loop's or the kept
    one's; a sub-action whose first loop has no critique has no first-version figure."""
    from messages.plan import Critique, TaskReport
    from method.plots import success_grid
    from method.report import first_rates

    def critiqued(name: str, mode: str, rates: list[float]) -> SubActionOutcome:
        o = outcome(mode, [1] * 4, policy="p.zip" if mode == "rl" else "")
        return dataclasses.replace(
            o,
            name=name,
            critiques=[
                Critique(name, v, mode, r, 0.9, 8, "revise" if r < 0.9 else "accept")
                for v, r in enumerate(rates, 1)
            ],
        )

    first_loop = critiqued("a", "code", [0.25, 0.5, 0.75])  # revised twice in its loop
    later_loop = critiqued("a", "rl", [0.9])  # redone, as RL, later
    failed = critiqued("b", "rl", [])  # its first training job failed: no critique
    b_later = critiqued("b", "code", [0.6])
    rl_first = critiqued("c", "rl", [0.1, 0.3])
    report = TaskReport(
        [], [first_loop, later_loop, failed, b_later, rl_first], 0.0, 1,
        [{"a": 0.9, "b": 0.6, "c": 0.3, "task": 0.2}], "iterations",
    )  # fmt: skip
    assert first_rates(report) == {"a": 0.25, "c": 0.1}
    assert success_grid(report, tmp_path / "success.png").stat().st_size > 0
