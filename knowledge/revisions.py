"""Revisions of a skill template: the knobs a critique's cause turns.

- :class:`Params` — what a revision changes in a template (:mod:`knowledge.library`
  writes them into the policy's constants).
- :func:`first_params` — the FIRST, deliberately simple version (short patience, no
  prerequisites, no danger handling); :func:`best_params` the fully revised one.
- :func:`revise` — the rule-based revision for a critique's cause (or None: hand the
  step to RL).
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace

from knowledge.recipes import Step
from messages.causes import EPISODE_DONE, POLICY_FINISHED, STEP_BUDGET


@dataclasses.dataclass(frozen=True, slots=True)
class Params:
    """What a revision of a template can change."""

    patience: int = 100
    """Steps one attempt at a sub-goal may take before it counts as failed."""
    attempts: int = 0
    """Further attempts after a failed one (exploring ``explore`` steps in between)."""
    explore: int = 0
    """Steps to explore between attempts (towards where the target lives)."""
    secure: bool = False
    """Obtain missing tools, materials and stations first (recursively)."""
    dig: bool = False
    """Tunnel through stone (and coal, iron…) once holding a pickaxe; never into lava."""
    fight: bool = False
    """Fight a zombie or skeleton that comes next to the player."""
    survive: bool = False
    """Drink, eat, sleep in a shelter and recover when vitals run low."""
    chunk: int = 40
    """Steps per skill call before the code re-decides (explore, retry)."""
    check: int = 10
    """With ``survive``: steps between checks of vitals and nightfall."""
    guarded: bool = False
    """Catch the code's own exceptions, explore a little and carry on."""
    validate: bool = False
    """Replace action names the world does not know by 'noop'."""
    far: int = 24
    """A station further than this (steps) is replaced by a new one if materials allow."""
    arm: bool = False
    """Make a sword at a table when spare materials allow (zombies die in fewer hits)."""


# Bounds on what revisions grow, so that a step's revisions end (and RL takes over).
# Patience doubles up to the step's own cap, never past this: above the longest cap a
# step gets (knowledge.recipes.TIER_STEPS tops out at 5000).
MAX_PATIENCE = 6000
# Attempts go 3, 6, 12, … up to this (the fully revised value, best_params).
MAX_ATTEMPTS = 40


def first_params(step: Step) -> Params:
    """The FIRST version: the simplest template (short patience, nothing secured, no
    danger handling) — where the offline fast agent starts before any critique."""
    return Params()


def best_params(step: Step, **changes: object) -> Params:
    """The final quality: every revision applied, patience sized to the step
    (``changes`` override fields, e.g. ``survive=False`` under a composer that keeps
    the vitals up itself)."""
    best = Params(
        patience=max(300, step.max_steps),
        attempts=MAX_ATTEMPTS,
        explore=30,
        secure=True,
        dig=True,
        fight=True,
        chunk=40,
        check=5,
        guarded=True,
        validate=False,
        arm=True,
        survive=True,
    )
    return dataclasses.replace(best, **changes)


def revise(step: Step, params: Params, cause: str, detail: str = "") -> tuple[Params, str] | None:
    """The template revision a critique's ``cause`` calls for, with a one-line reason
    naming the cause; None when no change of the code applies (switch to RL).

    Causes: step_budget (ran out of steps), policy_finished (returned before success:
    a helper gave up, a requirement was missing), episode_done (the player died),
    exception / policy_error, timeout, invalid_action (code errors).
    """
    if cause in ("exception", "policy_error"):
        return _raised(params, cause, detail)
    by_cause = _BY_CAUSE.get(cause)
    return by_cause(step, params) if by_cause is not None else None


_Revision = tuple[Params, str] | None


def _gave_up(step: Step, p: Params) -> _Revision:
    if not p.secure:
        return replace(p, secure=True), (
            "policy_finished: a requirement was missing — now obtains the tools, "
            "materials and stations the step needs first"
        )
    if p.attempts < MAX_ATTEMPTS:
        attempts = min(MAX_ATTEMPTS, max(3, 2 * p.attempts))
        explore = max(p.explore, 30)
        return replace(p, attempts=attempts, explore=explore), (
            f"policy_finished: a helper gave up — now explores {explore} steps and "
            f"tries again, up to {attempts} times"
        )
    if not p.dig:
        return replace(p, dig=True), (
            "policy_finished: still no target in reach — now tunnels through stone"
        )
    return None


def _ran_out(step: Step, p: Params) -> _Revision:
    if not p.dig:
        return replace(p, dig=True), (
            "step_budget: walking around mountains took too long — now tunnels "
            "through stone with a pickaxe (never into lava)"
        )
    if p.patience < min(MAX_PATIENCE, step.max_steps):
        patience = min(step.max_steps, MAX_PATIENCE, 2 * p.patience)
        return replace(p, patience=patience, explore=max(p.explore, 30)), (
            f"step_budget: attempts were cut short — patience {p.patience} → {patience}"
        )
    if p.chunk > 10:
        return replace(p, chunk=p.chunk // 2), (
            "step_budget: long skill calls kept going the wrong way — re-decides twice as often"
        )
    return None


def _died(step: Step, p: Params) -> _Revision:
    if not p.fight:
        return replace(p, fight=True), (
            "episode_done: the player died — now fights zombies and skeletons that come next to it"
        )
    if not p.arm:
        return replace(p, arm=True), (
            "episode_done: the player died fighting — now makes a sword at a table "
            "when spare wood/stone allow"
        )
    if not p.survive:
        return replace(p, survive=True), (
            "episode_done: the player died — now drinks, eats, sleeps in a shelter "
            "and recovers when vitals run low"
        )
    if p.check > 2:
        return replace(p, check=p.check // 2), (
            "episode_done: danger came between checks — checks vitals twice as often"
        )
    return None


def _raised(p: Params, cause: str, detail: str) -> _Revision:
    if not p.guarded:
        return replace(p, guarded=True), (
            f"{cause}: the code raised ({detail[:60]}) — now catches its own errors, "
            "explores a little and carries on"
        )
    return None


def _too_slow(step: Step, p: Params) -> _Revision:
    if p.chunk < 200:
        return replace(p, chunk=p.chunk * 2), (
            "timeout: too much planning per step — calls each skill for twice as many "
            "steps between checks"
        )
    return None


def _invalid(step: Step, p: Params) -> _Revision:
    if not p.validate:
        return replace(p, validate=True), (
            "invalid_action: an unknown action name was yielded — now checks every "
            "action against the world's names and sends noop instead"
        )
    return None


_BY_CAUSE = {
    POLICY_FINISHED: _gave_up,
    STEP_BUDGET: _ran_out,
    EPISODE_DONE: _died,
    "timeout": _too_slow,
    "invalid_action": _invalid,
}
"""The revision for each cause of a failed coded version (exceptions aside: theirs
needs the detail)."""
