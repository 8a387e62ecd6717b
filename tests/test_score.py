"""Crafter's score (``method.ledger.crafter_score``) against the published formula.

Hafner 2021 (*Benchmarking the Spectrum of Agent Capabilities*, ICLR 2022) defines the
score as S = exp((1/N) Σ_i ln(1 + s_i)) − 1 over the N = 22 achievements, s_i being the
success rate of achievement i **in percent** (Crafter's ``analysis`` scripts compute the
same from percentages). ``crafter_score`` takes rates as fractions (0…1) and returns %.
"""

from __future__ import annotations

import json
import math

import pytest
from crafter import constants
from hypothesis import given
from hypothesis import strategies as st

from method import ledger
from method.ledger import crafter_score

ACHIEVEMENTS = tuple(constants.achievements)  # the game's own list, not ours


def published_score(percents: list[float]) -> float:
    """The paper's formula, written out: rates in percent, score in percent."""
    return math.exp(sum(math.log(1.0 + s) for s in percents) / len(percents)) - 1.0


def test_the_game_has_22_achievements():
    assert len(ACHIEVEMENTS) == 22


def test_score_of_all_zero_rates_is_zero():
    assert crafter_score({a: 0.0 for a in ACHIEVEMENTS}, ACHIEVEMENTS) == 0.0
    assert crafter_score({}, ACHIEVEMENTS) == 0.0  # a missing achievement counts 0


def test_score_of_all_hundred_percent_is_hundred():
    assert crafter_score({a: 1.0 for a in ACHIEVEMENTS}, ACHIEVEMENTS) == pytest.approx(100.0)


def test_score_of_mixed_rates_by_hand():
    # Half the achievements at 99 %, half at 0 %: exp((ln 100 + ln 1) / 2) - 1 = 10 - 1 = 9.
    half = {a: (0.99 if i % 2 else 0.0) for i, a in enumerate(ACHIEVEMENTS)}
    assert crafter_score(half, ACHIEVEMENTS) == pytest.approx(9.0)
    # Half at 3 %, half at 15 %: exp((ln 4 + ln 16) / 2) - 1 = sqrt(64) - 1 = 7.
    low_high = {a: (0.15 if i % 2 else 0.03) for i, a in enumerate(ACHIEVEMENTS)}
    assert crafter_score(low_high, ACHIEVEMENTS) == pytest.approx(7.0)
    # One achievement at 100 %, the rest 0: exp(ln(101) / 22) - 1; ln 101 = 4.6151,
    # / 22 = 0.20978, exp − 1 = 0.2334.
    one = {"collect_wood": 1.0}
    assert crafter_score(one, ACHIEVEMENTS) == pytest.approx(0.2334, abs=1e-4)
    # A geometric mean: below the arithmetic mean of the rates (100 / 22 = 4.55 %).
    assert crafter_score(one, ACHIEVEMENTS) < 100 / 22


@given(st.lists(st.floats(0.0, 1.0), min_size=22, max_size=22))
def test_score_matches_the_published_formula(fractions):
    rates = dict(zip(ACHIEVEMENTS, fractions, strict=True))
    expected = published_score([100.0 * r for r in fractions])
    assert crafter_score(rates, ACHIEVEMENTS) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_score_reads_only_the_listed_achievements():
    rates = {"collect_wood": 0.5, "not_an_achievement": 1.0}
    assert crafter_score(rates, ACHIEVEMENTS) == pytest.approx(published_score([50.0] + [0.0] * 21))


def test_score_needs_the_achievement_list():
    with pytest.raises(ValueError, match="achievement list"):
        crafter_score({"collect_wood": 1.0}, [])


# ---------------------------------------------------------------------- the run's score


def test_success_rate_is_the_share_of_episodes_with_the_achievement_at_least_once():
    # Four episodes: wood in three (twice in one: still one episode), a table in one.
    episodes = [{"collect_wood": 2}, {"collect_wood": 1, "place_table": 1}, {}, {"collect_wood": 1}]
    rates = ledger.success_rates(episodes, ACHIEVEMENTS)
    assert rates["collect_wood"] == 0.75 and rates["place_table"] == 0.25
    assert rates["collect_diamond"] == 0.0 and len(rates) == 22
    # By hand: exp((ln 76 + ln 26) / 22) - 1 = exp((4.3307 + 3.2581) / 22) - 1 = 0.41191.
    assert crafter_score(rates, ACHIEVEMENTS) == pytest.approx(0.41191, abs=1e-5)


def _rollout(kind: str, steps: int, counts: dict, seed: int = 0) -> dict:
    return {"id": f"{kind}:j:{seed}", "kind": kind, "seed": seed, "steps": steps,
            "achievements": sorted(counts), "counts": counts, "reward": 0.0}  # fmt: skip


def _training(log: list, split: dict) -> dict:
    got: dict[str, int] = {}
    for _, _, counts in log:
        for name in counts:
            got[name] = got.get(name, 0) + 1
    return {"id": "train:j", "kind": "train", "job": "j", "episodes": len(log),
            "steps": sum(split.values()), "split": split, "achievement_episodes": got,
            "episode_log": log}  # fmt: skip


LINES = [
    _rollout("code", 100, {"collect_wood": 1}),
    # A training job: 110 world steps (80 PPO, 20 setup, 10 held-out), two episodes.
    _training(
        [[50, 0.0, {"collect_wood": 1}], [60, 0.0, {}]], {"train": 80, "setup": 20, "held_out": 10}
    ),
    _rollout("play", 100, {"collect_wood": 1, "place_table": 1}, seed=1),
]


def test_scoreboard_counts_episodes_in_order_within_the_budget():
    # Within 210 steps: the code episode (100), both training episodes (50 + 60); the
    # play episode would pass the budget and is left out, as Crafter's read_metrics does.
    board = ledger.scoreboard(LINES, ACHIEVEMENTS, budget=210)
    assert (board["episodes"], board["steps"]) == (3, 210)
    assert board["rates"]["collect_wood"] == pytest.approx(2 / 3)
    # By hand: one achievement at 66.67 %: exp(ln(67.667) / 22) - 1 = exp(0.19157) - 1.
    assert board["score"] == pytest.approx(0.21115, abs=1e-5)
    every = ledger.scoreboard(LINES, ACHIEVEMENTS)
    assert (every["episodes"], every["steps"]) == (4, 310)
    assert every["rates"]["collect_wood"] == 0.75 and every["rates"]["place_table"] == 0.25
    assert every["score"] == pytest.approx(0.41191, abs=1e-5)
    assert ledger.scoreboard([], ACHIEVEMENTS)["score"] == 0.0


def test_steps_are_split_by_kind_and_add_up():
    assert ledger.steps_by_kind(LINES) == {
        "code": 100, "held_out": 10, "play": 100, "setup": 20, "train": 80
    }  # fmt: skip


def test_stats_file_holds_every_booked_episode_in_crafters_format(tmp_path):
    ledger.append(tmp_path, LINES)
    path = ledger.write_stats(tmp_path, ACHIEVEMENTS)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["length"] for r in rows] == [100, 50, 60, 100]
    assert [r["achievement_collect_wood"] for r in rows] == [1, 1, 0, 1]
    assert set(rows[0]) == {"length", "reward"} | {f"achievement_{a}" for a in ACHIEVEMENTS}


def test_a_split_that_does_not_add_up_is_refused(tmp_path):
    bad = dict(LINES[1], steps=111)
    assert "adds up to 110" in ledger.line_problem(bad)


def test_a_training_line_from_before_the_episode_log_scores_as_its_aggregate():
    old = {"id": "train:o", "kind": "train", "job": "o", "episodes": 4, "steps": 400,
           "achievement_episodes": {"collect_wood": 3, "place_table": 1}}  # fmt: skip
    board = ledger.scoreboard([old], ACHIEVEMENTS)
    assert (board["episodes"], board["steps"]) == (4, 400)
    assert board["rates"]["collect_wood"] == 0.75 and board["rates"]["place_table"] == 0.25
    assert board["score"] == pytest.approx(0.41191, abs=1e-5)
