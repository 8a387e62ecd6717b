"""The offline backend: the agents' roles played by deterministic code, no network.

This is a knowledge-based stand-in for a language model, not a model. It answers the
same calls with the same reply contracts:

- slow/plan: the task's steps come from a search over the game's own recipe data
  (``knowledge.recipes``: what each item needs and where); every step starts as code,
  since the skill library has a template for it.
- slow/revise: a step whose coded version stayed under its target after the inner
  loop's revisions moves to RL, with the library's coded skills as high-level actions;
  a step still failing for a fixable cause is redone; accepted steps are kept.
- fast/code: the library's template for the step (``knowledge.library``), first in
  its complete version (``[agents] offline_first = "simplest"``: the bare one), then
  revised by the rules that answer the critique's cause (``[agents] offline_revise =
  "every"``: every cause it counts).
- fast/rl: the RL interface for the step: the library's coded options for it, the
  movement and interaction primitives, the local view, inventory and vitals; a second
  version adds a shaped reward for progress.
- critic/review: the verdict from the measured success rate, the target (a version not
  measurably under it is accepted; with ``[agents] offline_accept = "at_target"`` a
  fixable one under it is revised while revisions remain), the failure
  cause and the revisions left.

Its decisions therefore follow measured results, exactly as a model's are meant to.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from knowledge import library, revisions
from llm.backend import CallResult
from messages.causes import (
    EPISODE_DONE,
    NOT_REACHED,
    POLICY_ERROR,
    POLICY_FINISHED,
    POLICY_UNUSABLE,
    SEARCH_CAUSES,
    STEP_BUDGET,
    cause_kind,
)
from rl.reward_check import VITAL_OF

CODE_FIXABLE = frozenset(
    {
        STEP_BUDGET,
        POLICY_FINISHED,
        EPISODE_DONE,
        "exception",
        "timeout",
        "invalid_action",
        "syntax",
        "forbidden",
        "memory",
        "recursion",
        "output_limit",
    }
)
"""Failure causes a code revision can answer; any other leaves only a switch to RL."""

ADVICE = {
    STEP_BUDGET: "ran out of steps before success: search longer or more widely, and "
    "stop wasting steps on detours",
    POLICY_FINISHED: "the code gave up before success (a helper returned False, often a "
    "missing tool or material): secure the prerequisites first, then retry instead of "
    "returning",
    EPISODE_DONE: "the player died: keep vitals up, avoid lava, fight or flee zombies "
    "and skeletons before they wear health down",
    "exception": "the code raised: fix the line the traceback points at",
    "timeout": "the code used too much wall-clock time per step: avoid heavy loops",
    "invalid_action": "the code yielded something that is not an action name",
    "syntax": "the code does not parse: fix the syntax error",
    "forbidden": "the code uses something the sandbox refuses: use only the skill API",
    POLICY_UNUSABLE: "the trained policy file is missing or does not match its hash",
}

RL_PRIMITIVES = ["noop", "move_left", "move_right", "move_up", "move_down", "do"]
"""Primitives a learned sub-action gets besides its coded options: moving and interacting
are what its options cannot decide for it (crafting and placing come as options)."""


def _step(sub: dict[str, Any]) -> Any:
    """The library's step for a sub-action, with the plan's goal counts."""
    return library.subtask_step(sub["name"], sub["achievement"], sub.get("goal"))


def _minetest_code(sub: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """The Minetest template for a chain step (the sub-action ``obtain_<item>``); a
    revision has nothing else to offer, so it is the same code, marked unchanged."""
    from worlds.minetest.templates import step_code
    from worlds.minetest.world import CHAIN, achievement, short

    item = {achievement(item): item for item in CHAIN}.get(sub["name"])
    if item is None:
        raise ValueError(f"no Minetest chain step is named {sub['name']!r}")
    if previous:
        return {
            "code": previous["code"],
            "note": "the Minetest template library has one version of each step",
            "params": previous.get("params", {}),
            "unchanged": True,
        }
    return {
        "code": step_code(item),
        "note": f"first version: the Minetest template for {short(item)}",
        "params": {},
    }


class OfflineBackend:
    """Deterministic answers to every agent call (see the module docstring)."""

    name = "offline"

    def __init__(
        self,
        first: str = "full",
        accept: str = "not_below",
        revise: str = "top",
        lessons: bool = False,
        world: str = "crafter",
    ) -> None:
        self.world = world
        """The game it codes for: ``crafter`` (:mod:`knowledge.library`'s templates and
        their revisions) or ``minetest`` (:mod:`worlds.minetest.templates`: one template
        a step, no revision of it)."""
        self.first = first
        """``full``: a step's first code is the library's complete template; ``simplest``:
        the bare one, every fix left to revisions."""
        self.accept = accept
        """``not_below``: the critic accepts a version not measurably under its target;
        ``at_target``: under it, a coded version with a fixable fault is revised while
        revisions remain (``[agents] offline_accept``)."""
        self.revise = revise
        """``top``: a code revision answers the critique's commonest failure cause;
        ``every``: each cause it counts, in one revision (``[agents] offline_revise``)."""
        self.lessons = lessons
        """A simplest first version also takes the settings that this run's earlier
        revisions of other steps turned on (the request's ``lessons``; ``[agents]
        offline_lessons``)."""

    async def call(
        self,
        role: str,
        purpose: str,
        request: dict[str, Any],
        *,
        temperature: float | None = None,  # rules do not sample
    ) -> CallResult:
        started = time.monotonic()
        data = getattr(self, f"_{role}_{purpose}")(request)
        return CallResult(data=data, latency_s=time.monotonic() - started)

    async def check(self) -> None:
        """Nothing to reach."""

    # ------------------------------------------------------------------ slow agent

    def _slow_plan(self, req: dict[str, Any]) -> dict[str, Any]:
        subactions = []
        previous: list[str] = []
        learn = set(req.get("learn", []))
        curriculum = bool(req.get("curriculum"))
        for step in req["steps"]:
            learned = step["name"] in learn
            # A chain: each step after the one before it (its state carries the chain's
            # materials). A curriculum: each after its own prerequisites only, so that
            # independent achievements are worked on at once, from a fresh world.
            depends = [d for d in step.get("depends", []) if d in previous]
            if not curriculum:
                depends = previous[-1:]
            subactions.append(
                {
                    "name": step["name"],
                    "description": step["description"],
                    "mode": "rl" if learned else "code",
                    "depends": depends,
                    "goal": step["goal"],
                    "achievement": step["achievement"],
                    "max_steps": step["max_steps"],
                    "target": req["sub_target"],
                    "reason": "the config asks for it to be learned with RL"
                    if learned
                    else f"the Minetest template library has code for {step['kind']} {step['item']}"
                    if self.world == "minetest"
                    else f"the skill library has a template for {step['kind']} "
                    f"{step['item']}: code first, RL if it stays under its target",
                }
            )
            previous.append(step["name"])
        watched = [need["stat"] for need in req["needs"]]
        return {
            "subactions": subactions,
            "needs": watched,
            "reason": f"{len(subactions)} steps found by searching the recipe data backwards "
            f"from {req['target']}; "
            + (f"survival needs watched: {', '.join(watched)}" if watched else "no survival need"),
        }

    def _slow_revise(self, req: dict[str, Any]) -> dict[str, Any]:
        changes = []
        left = req["budget"]["iterations_left"] > 0
        for sub in req["subactions"]:
            name, verdict, mode = sub["name"], sub["verdict"], sub["mode"]
            rate, target = sub["success_rate"], sub["target"]
            cause = sub["cause"] or "none"
            if verdict == "accept" or sub.get("accepted"):
                continue
            # Nothing measured (never reached) or no failure recorded: code can go on.
            fixable = cause_kind(cause) in CODE_FIXABLE | {NOT_REACHED, "none"}
            if mode == "code" and (sub.get("exhausted") or sub.get("stalled") or not fixable):
                why = (
                    "another round of revisions did not raise it"
                    if sub.get("stalled") and fixable and not sub.get("exhausted")
                    else "no code revision answers its last cause"
                )
                changes.append(
                    {
                        "subaction": name,
                        "change": "to_rl",
                        "reason": f"coded version stayed at {rate:.2f} < {target:.2f} after "
                        f"{sub['versions']} versions and {why} ({cause}): learn it with PPO, "
                        "the coded skills as high-level actions",
                    }
                )
            elif mode == "code" and left:
                changes.append(
                    {
                        "subaction": name,
                        "change": "redo",
                        "reason": f"coded version at {rate:.2f} < {target:.2f}, cause {cause}, "
                        "and the code still has revisions that answer it: another inner "
                        "loop from the last critique",
                    }
                )
            # A learned sub-action under target keeps its best version (coded or learned,
            # whichever measured higher): another PPO run costs more than it promises.
        met = req["final_success"] >= req["success_target"]
        # Meeting the task's target does not end the work while budget is left: the
        # steps still under their own target get their next round (RL for most).
        stop = not changes
        why = (
            "no sub-action left to change"
            if not changes
            else f"{len(changes)} sub-actions to change"
            + (
                f" (task success {req['final_success']:.2f} ≥ target "
                f"{req['success_target']:.2f}; improving the steps under target)"
                if met
                else ""
            )
        )
        return {"changes": changes, "stop": stop, "reason": why}

    # ------------------------------------------------------------------ fast agent

    def _fast_code(self, req: dict[str, Any]) -> dict[str, Any]:
        sub = req["subaction"]
        if self.world == "minetest":
            return _minetest_code(sub, req.get("previous"))
        step = _step(sub)
        previous = req.get("previous")
        if not previous:
            if self.first == "simplest":
                params, note = revisions.first_params(step), "the library's simplest template"
                if self.lessons:
                    params, note = learned_params(params, note, req.get("lessons") or [])
            else:  # the planner's needs keep the vitals up: no survival code of its own
                params = library.complete_params(step)
                note = "the library's complete template for the step"
            code = library.code_for(step, params)
            return {
                "code": code,
                "note": f"first version: {note}",
                "params": dataclasses.asdict(params),
            }
        critique = req.get("critique") or {}
        params = revisions.Params(**previous["params"])
        revised = revise_for(step, params, critique.get("cause", ""), critique.get("detail", ""))
        if self.revise == "every":
            revised = revise_others(step, params, revised, critique)
        if revised is None:
            return {
                "code": previous["code"],
                "note": f"no code revision answers {critique.get('cause') or 'this'}",
                "params": previous["params"],
                "unchanged": True,
            }
        params, reason = revised
        return {
            "code": library.code_for(step, params),
            "note": reason,
            "params": dataclasses.asdict(params),
        }

    def _fast_rl(self, req: dict[str, Any]) -> dict[str, Any]:
        sub = req["subaction"]
        if self.world == "minetest":
            return _minetest_rl(req)
        options = [o["name"] for o in req["options"]]
        primitives = [p for p in RL_PRIMITIVES if p in req["primitives"]]
        previous = req.get("previous")
        reward_code = ""
        note = "coded options for the step, moving and 'do' as primitives, sparse reward"
        if previous:
            # Second version: a dense signal for progress towards this step's goal.
            reward_code = _progress_reward(_step(sub))
            cause = (req.get("critique") or {}).get("cause", "")
            note = f"add a shaped reward for progress ({cause or 'under target'})"
            if not reward_code:
                note = "no progress short of success shows for this step: sparse reward kept"
        return {
            "options": options,
            "primitives": primitives,
            "observation": ["view", "inventory", "status"],
            "reward_code": reward_code,
            "max_steps": int(sub["max_steps"]),
            "note": note,
        }

    # ------------------------------------------------------------------ critic

    def _critic_review(self, req: dict[str, Any]) -> dict[str, Any]:
        rate, target = req["success_rate"], req["target"]
        example = req.get("example") or {}
        cause = example.get("cause", "")
        base = cause_kind(cause)
        if rate >= target:
            return {"verdict": "accept", "advice": f"{rate:.2f} ≥ target {target:.2f}"}
        advice = ADVICE.get(base, f"failed with {cause or 'no recorded cause'}")
        if not req.get("measurably_below", True):
            noise = f"{rate:.2f} on {req.get('reached', 0)} worlds: not measurably under target "
            noise += f"{target:.2f}"
            fixable = req["mode"] == "code" and base in CODE_FIXABLE  # never NOT_REACHED
            if self.accept == "at_target" and req["revisions_left"] > 0 and fixable:
                return {"verdict": "revise", "advice": f"{noise}, but under it: {advice}"}
            return {"verdict": "accept", "advice": noise}
        if base == NOT_REACHED:
            # Nothing of this sub-action was measured: no revision or switch is due.
            advice = f"it never got its turn: {cause.split(':', 1)[1]} came first"
            return {"verdict": "revise", "advice": f"{rate:.2f}; {advice}"}
        where = ""
        if example.get("line"):
            where = f" (line {example['line']}: {example.get('code_line', '')})"
        if example.get("action"):
            where += f" during {example['action']}"
        text = f"{rate:.2f} < target {target:.2f}; {req['causes'].get(cause, 0)} of " + (
            f"{req['episodes']} episodes ended with {cause}{where}: {advice}"
        )
        if req["revisions_left"] <= 0 or (req["mode"] == "code" and base not in CODE_FIXABLE):
            return {"verdict": "switch", "advice": text + "; no revision left for code"}
        return {"verdict": "revise", "advice": text}


CAUSE_FIELDS = {
    POLICY_FINISHED: ("secure", "attempts", "explore", "dig"),
    STEP_BUDGET: ("dig", "patience", "explore"),
    EPISODE_DONE: ("fight", "arm", "check"),
    "exception": ("guarded",),
    POLICY_ERROR: ("guarded",),
    "invalid_action": ("validate",),
}
"""What a revision for each failure cause changes: every template setting that answers
the cause, at once (a model asked to fix "the player died" fixes fighting and arming
together, not one per round)."""


def revise_for(step: Any, params: Any, cause: str, detail: str) -> tuple[Any, str] | None:
    """The revision a critique's ``cause`` calls for: the library's rule for the cause
    (its reason is the note), with every other setting that answers the same cause
    brought to the library's final value in the same revision. When nothing more answers
    the cause, the search itself is made stronger (what answers a search that gave up or
    ran out of steps), since a sub-action that succeeds sooner is exposed less. None when
    nothing changes."""
    best = library.complete_params(step)
    for other in (cause, *(c for c in SEARCH_CAUSES if c != cause)):
        revised = _revise_one(step, params, other, detail)
        if revised is None:
            continue
        if other == cause:
            return revised
        if _towards(params, revised[0], best):
            return revised[0], f"nothing more answers {cause}; {revised[1]}"
    return None


LESSON_FIELDS = ("secure", "dig", "fight", "arm", "guarded", "attempts", "explore")
"""The settings a revision of one step may pass on to a later step's first version:
what a step needs whatever the step is (a step's own patience is not among them)."""


def learned_params(params: Any, note: str, lessons: list[dict[str, Any]]) -> tuple[Any, str]:
    """``params`` with each setting an earlier revision turned on or raised (``lessons``:
    ``{"subaction", "cause", "changed": {field: value}}``, oldest first), and the note
    naming where each was learned."""
    taught: dict[str, tuple[Any, str]] = {}
    for lesson in lessons:
        for name, value in (lesson.get("changed") or {}).items():
            if name not in LESSON_FIELDS or isinstance(value, str):
                continue
            if value > getattr(params, name) and (name not in taught or value > taught[name][0]):
                where = f"{lesson.get('cause', '')} on {lesson.get('subaction', '')}"
                taught[name] = (value, where)
    if not taught:
        return params, note
    changes = {name: value for name, (value, _) in taught.items()}
    learned = "; ".join(f"{name} (after {where})" for name, (_, where) in taught.items())
    note = f"{note}, with what this run's critiques taught: {learned}"
    return dataclasses.replace(params, **changes), note


def revise_others(
    step: Any, params: Any, revised: tuple[Any, str] | None, critique: dict[str, Any]
) -> tuple[Any, str] | None:
    """``revised`` (the answer to the critique's commonest cause, or None) with each other
    cause the critique counts answered too, commonest first, by the library's rule for it
    (:func:`_revise_one`); None when nothing changes. Causes no code revision answers
    (a stage before this one failing, a setup that failed) are left out."""
    top = cause_kind(critique.get("cause", ""))
    now, reasons = revised if revised is not None else (params, "")
    notes = [reasons] if reasons else []
    for other, n in (critique.get("causes") or {}).items():
        kind = cause_kind(other)
        if kind == top or kind not in CODE_FIXABLE:
            continue
        more = _revise_one(step, now, kind, "")
        if more is None:
            continue
        now = more[0]
        notes.append(f"{n} more ended with {more[1]}")
    if now == params:
        return None
    return now, "; ".join(notes)


def _towards(old: Any, new: Any, best: Any) -> bool:
    """Whether every setting ``new`` changes moves from ``old`` towards ``best``."""
    for field in dataclasses.fields(old):
        a, b, goal = (getattr(x, field.name) for x in (old, new, best))
        if a == b:
            continue
        if isinstance(goal, bool) or not isinstance(goal, (int, float)):
            if b != goal:
                return False
        elif abs(goal - b) >= abs(goal - a):
            return False
    return True


def _revise_one(step: Any, params: Any, cause: str, detail: str) -> tuple[Any, str] | None:
    first = revisions.revise(step, params, cause, detail)
    if first is None:
        return None
    revised, reason = first
    best = library.complete_params(step)  # the composer keeps the vitals up
    if revised.survive and not params.survive:
        # The task planner's survival needs keep the vitals up around every stage: a
        # stage's own survival code would only fight them for the player's time.
        revised = dataclasses.replace(revised, survive=False)
        if revised == params:
            return None
        reason = f"{cause}: the player died between checks — checks twice as often"
    more = {}
    for name in CAUSE_FIELDS.get(cause, ()):
        now, final = getattr(revised, name), getattr(best, name)
        if now != final and (not isinstance(final, bool) or final):
            more[name] = final
    if more:
        revised = dataclasses.replace(revised, **more)
        reason += "; also " + ", ".join(f"{k}={v}" for k, v in sorted(more.items()))
    return revised, reason


MINETEST_STEP_COST = 0.0005
"""What a Minetest step's reward charges per primitive step: the tree step's whole budget
(3,000 steps) costs 1.5, against the 1 its goal pays and the 1 of success."""


def _minetest_rl(req: dict[str, Any]) -> dict[str, Any]:
    """The Minetest RL config: every offered option (the step's code and the 3-D options),
    ``dig`` as the one primitive, the parts that count kinds of node around the player,
    and from the first version a reward for progress towards the step's goal (a share of
    1 per goal item, up to the goal) less a cost per step: a 3-D step runs thousands of
    steps, where success alone is too rare a signal. The library has one such config:
    a revision keeps it."""
    sub = req["subaction"]
    goal = dict(sorted(sub["goal"].items()))
    reward = (
        f"GOAL = {goal!r}\n\n\n"
        "def reward(before, after):\n"
        "    gained = 0.0\n"
        "    for key, want in GOAL.items():\n"
        "        names = key.split('|')\n"
        "        b = min(sum(before['inventory'].get(n, 0) for n in names), want)\n"
        "        a = min(sum(after['inventory'].get(n, 0) for n in names), want)\n"
        "        gained += (a - b) / want\n"
        f"    return gained - {MINETEST_STEP_COST!r}\n"
    )
    note = "the 3-D options, dig, progress towards the goal less a cost per step"
    if req.get("previous"):
        note = "the Minetest library has one RL config for a step: kept"
    return {
        "options": [o["name"] for o in req["options"]],
        "primitives": [p for p in ("dig",) if p in req["primitives"]],
        "observation": ["view", "map", "inventory", "status"],
        "reward_code": reward,
        "max_steps": int(sub["max_steps"]),
        "note": note,
    }


def _progress_reward(step: Any) -> str:
    """A reward written for ``step``: 0.1 per item of its goal or its ingredients gained
    (up to the count the step needs), or per point of the vital it restores (drink,
    food, energy); "" where no progress short of success shows in what the reward sees
    (defeating a creature). Each passes :func:`rl.reward_check.check_reward`."""

    vital = VITAL_OF.get(step.achievement)
    if vital:
        return (
            "def reward(before, after):\n"
            f"    gained = after['status'].get({vital!r}, 0) - before['status'].get({vital!r}, 0)\n"
            "    return 0.1 * max(0, gained)\n"
        )
    # Up to what the step needs of each: gathering more than the recipe uses pays nothing.
    caps = {**{k: max(1, v) for k, v in step.uses.items()}, **step.goal}
    if not caps:
        return ""
    return (
        "def reward(before, after):\n"
        f"    caps = {dict(sorted(caps.items()))!r}\n"
        "    gained = 0\n"
        "    for name, cap in caps.items():\n"
        "        b = min(before['inventory'].get(name, 0), cap)\n"
        "        a = min(after['inventory'].get(name, 0), cap)\n"
        "        if a > b:\n"
        "            gained += a - b\n"
        "    return 0.1 * gained\n"
    )
