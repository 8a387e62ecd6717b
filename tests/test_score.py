"""Crafter's score (``method.ledger.crafter_score``) against the published formula.

Hafner 2021 (*Benchmarking the Spectrum of Agent Capabilities*, ICLR 2022) defines the
score as S = exp((1/N) Σ_i ln(1 + s_i)) − 1 over the N = 22 achievements, s_i being the
success rate of achievement i **in percent** (Crafter's ``analysis`` scripts compute the
same from percentages). ``crafter_score`` takes rates as fractions (0…1) and returns %.
"""

from __future__ import annotations

import math

import pytest
from crafter import constants
from hypothesis import given
from hypothesis import strategies as st

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
