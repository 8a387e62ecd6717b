"""Survival needs: drink, eat, recover, shelter at night and sleep, as coded stages.

- :func:`survival_stages` — when each need applies (a vital below its threshold), until
  when, why, and its code (the skill prelude's own survival helpers, see
  :mod:`knowledge.skill_prelude`, whose thresholds these are).
- :func:`survival_needs` — the same as the task planner takes them
  (``messages.task.Need``).
"""

from __future__ import annotations

import dataclasses

from knowledge.library import policy_source
from knowledge.revisions import Params
from knowledge.skill_prelude import (
    DAWN,
    DRINK_BELOW,
    DRINK_UNTIL,
    DUSK,
    ENERGY_BELOW,
    ENERGY_UNTIL,
    FOOD_BELOW,
    FOOD_UNTIL,
    HEALTH_BELOW,
    HEALTH_UNTIL,
)
from messages.task import Need, Stage, Subtask

NEED_MAX_STEPS = 300
"""Step cap of one run of a survival need: room for two survival trips (the prelude's
TRIP, 150 steps each); past it the plan resumes and the need may come back."""


@dataclasses.dataclass(frozen=True, slots=True)
class SurvivalStage:
    """A need that interrupts the plan when a vital falls below ``below``."""

    name: str
    """The stage's name (a subtask name in the plan)."""
    stat: str
    """The vital it watches ('daylight': the world's light, 0–1)."""
    below: float
    """It applies when ``stat`` is below this."""
    until: float
    """It has done its job when ``stat`` is back at this."""
    reason: str
    """Why these numbers, in a sentence (the planner shows it)."""
    source: str
    """Its policy source (defines ``run(skills)``)."""


def _stage_source(call: str, params: Params) -> str:
    """The policy whose ``main`` is one call of a prelude survival helper."""
    main = f"\n\ndef main(skills):\n    ok = yield from {call}\n    return ok\n"
    return policy_source("Survival stage.", params, main)


def survival_params() -> Params:
    """Params of the survival code: patient, fighting, tunnelling; securing (a shelter
    without a pickaxe yet makes one first)."""
    return Params(patience=300, attempts=3, explore=20, secure=True, dig=True, fight=True)


def survival_stages() -> list[SurvivalStage]:
    """Drink, eat, recover, shelter at night, sleep: when each applies (``stat`` below
    ``below``; 'daylight' is the world's light, 0–1), until when, and its code. In the
    order a composer should check them: most urgent first."""
    p = survival_params()
    return [
        SurvivalStage(
            "drink_water",
            "drink",
            DRINK_BELOW,
            DRINK_UNTIL,
            "drink falls 1 per ~20 steps; at 4 there are ~80 steps to reach water before "
            "health starts to drop; fill up to 9 (one 'do' each)",
            _stage_source("drink(skills, DRINK_UNTIL)", p),
        ),
        SurvivalStage(
            "eat_cow",
            "food",
            FOOD_BELOW,
            FOOD_UNTIL,
            "food falls 1 per ~25 steps; at 4 there are ~100 steps to find a cow, which gives 6",
            _stage_source("eat(skills, FOOD_UNTIL)", p),
        ),
        SurvivalStage(
            "retreat",
            "health",
            HEALTH_BELOW,
            HEALTH_UNTIL,
            "two zombie hits (2 each, 7 on a sleeper) from death: fight off what is "
            "adjacent, wall in, rest until health is back",
            _stage_source("recover(skills, HEALTH_UNTIL)", p),
        ),
        SurvivalStage(
            "shelter",
            "daylight",
            DUSK,
            DAWN,
            "at night zombies swarm the grassland (up to 3 per chunk) and hit sleepers "
            "for 7: top up drink and food, wall in a nook of stone and sleep until dawn",
            _stage_source("night(skills)", p),
        ),
        SurvivalStage(
            "sleep",
            "energy",
            ENERGY_BELOW,
            ENERGY_UNTIL,
            "energy falls 1 per ~30 steps; at 3 there are ~90 steps to dig a nook, wall "
            "it with a stone and sleep until energy is full",
            _stage_source("sleep(skills, ENERGY_UNTIL)", p),
        ),
    ]


def survival_needs() -> list:
    """:func:`survival_stages` as the task planner takes them (``messages.task.Need``)."""
    return [
        Need(
            stat=s.stat,
            below=float(s.below),
            stage=Stage(Subtask(s.name, s.reason, max_steps=NEED_MAX_STEPS), code=s.source),
            until=float(s.until),
        )
        for s in survival_stages()
    ]


ARBITER_ONLY = (
    ("defend", "skills.defend(30)", "fight what comes adjacent until none is near (30 steps)"),
    ("evade", "skills.evade(8)", "step away from the nearest hostiles for 8 steps"),
)
"""Survival options only a learned arbiter chooses (episodes.arbiter): their thresholds never
trigger (``below`` 0), and a run lasts until the code returns."""


def arbiter_needs() -> list:
    """:func:`survival_needs` and the :data:`ARBITER_ONLY` options, as needs: what the
    survival arbiter chooses among (its options name these stages)."""
    p = survival_params()
    extra = [
        Need(
            stat="health",
            below=0.0,
            stage=Stage(
                Subtask(name, reason, max_steps=NEED_MAX_STEPS), code=_stage_source(call, p)
            ),  # fmt: skip
            until=0.0,
        )
        for name, call, reason in ARBITER_ONLY
    ]
    return survival_needs() + extra
