"""Skill templates: the policy source for each plan step (the offline fast agent's code).

Every template is policy source text defining ``run(skills)`` — a generator of primitive
action names over the skill API (:class:`skills.skills.Skills`) — that the sandbox
accepts (no imports, classes or ``_`` names). A template is the shared *prelude*
(:mod:`knowledge.skill_prelude`: plain helper generators that obtain an item, stand next
to stations, keep vitals up, …) with its constants written in, followed by the step's own
``main``. The constants are the knobs of :class:`knowledge.revisions.Params` and the
recipe tables the prelude consults, written in from Crafter's data
(:mod:`knowledge.recipes`), never by hand.

- :func:`code_for` — the source for a step and params; :func:`step_code` by
  achievement name.
- :func:`subtask_step` — the step for a plan's sub-action (its goal counts written in);
  :func:`complete_params` / :func:`complete_code` — the step's complete template as a
  stage of a plan plays it (what ``offline_first = "full"`` writes first).
- :func:`policy_source` — the prelude with a given ``main`` (the survival stages use it).
- :func:`coded_stages` — coded stages for a list of steps at the final quality.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import textwrap
from pathlib import Path

from knowledge import skill_prelude
from knowledge.recipes import Step, achievement_step, sources
from knowledge.revisions import Params, best_params
from messages.task import Stage, Subtask

# ---------------------------------------------------------------------- the prelude


@functools.cache
def _tables() -> dict[str, object]:
    """The recipe tables the prelude needs, read from Crafter's data."""
    from crafter import constants

    how: dict[str, str] = {}
    uses: dict[str, dict[str, int]] = {}
    near: dict[str, list[str]] = {}
    for item, rule in constants.place.items():
        how.setdefault(item, "place")
        uses[item] = dict(rule.get("uses", {}))
        near[item] = list(rule.get("nearby", []))
    for item in sources():
        how[item] = "collect"
    for item, rule in constants.make.items():
        how[item] = "make"
        uses[item] = dict(rule.get("uses", {}))
        near[item] = list(rule.get("nearby", []))
    tools = {tile: dict(rule.get("require", {})) for tile, rule in constants.collect.items()}
    src = {item: tile for item, tile in sources().items() if tile != "grass" or item == "sapling"}

    @functools.cache
    def depth(item: str) -> int:
        kind = how.get(item)
        if kind == "collect":
            return 1 + max((depth(t) for t in tools[src[item]]), default=0)
        return 1 + max((depth(m) for m in uses.get(item, {})), default=0)

    order = sorted(how, key=lambda item: (-depth(item), item))
    return {
        "HOW": how,
        "USES": uses,
        "NEAR": near,
        "TOOLS": tools,
        "SOURCES": src,
        "ORDER": order,
        "ACTIONS": list(constants.actions),
        # Station → the other stations some recipe needs next to it (furnace → table):
        # a station is best placed beside its companions.
        "COMPANIONS": {
            item: sorted(
                {
                    s
                    for rule in constants.make.values()
                    if item in rule.get("nearby", [])
                    for s in rule.get("nearby", [])
                    if s != item
                }
            )
            for item in constants.place
        },
        # Gather up to this many while at the source (wood is cheap at the start and a
        # second table far from the first needs it): the inventory's maximum.
        "STOCK": {"wood": int(constants.items["wood"]["max"])},
        # Swords: made items nothing else uses, cheapest first (they add damage).
        "SWORDS": [i for i in constants.make if "sword" in i][:2],
    }


@functools.cache
def _prelude_parts() -> tuple[dict[str, object], str]:
    """The prelude file, read once: its constants (name → the value written there, in
    order) and its code after them, up to the placeholder ``main``."""
    source = Path(skill_prelude.__file__).read_text(encoding="utf-8")
    constants: dict[str, object] = {}
    functions: list[ast.FunctionDef] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            functions.append(node)
        elif isinstance(node, ast.Assign) and not functions:
            (target,) = node.targets
            assert isinstance(target, ast.Name), "the prelude's constants are plain names"
            constants[target.id] = ast.literal_eval(node.value)
    last = functions[-1]
    assert last.name == "main", "skill_prelude.py ends with its placeholder main"
    lines = source.splitlines(keepends=True)
    code = "".join(lines[functions[0].lineno - 1 : last.lineno - 1]).rstrip("\n") + "\n"
    return constants, code


def _prelude(params: Params) -> str:
    """The prelude's text with ``params`` and Crafter's tables written into its constants
    (the others keep the prelude file's values)."""
    constants, code = _prelude_parts()
    written = {f.name.upper(): getattr(params, f.name) for f in dataclasses.fields(params)}
    written.update(_tables())
    missing = sorted(written.keys() - constants.keys())
    assert not missing, f"add a default for {missing} to knowledge/skill_prelude.py's constants"
    values = {**constants, **written}
    header = "\n".join(f"{name} = {value!r}" for name, value in values.items())
    return header + "\n\n\n" + code


def policy_source(title: str, params: Params, main: str) -> str:
    """A policy: docstring ``title``, the prelude for ``params``, then ``main`` (the
    source of ``def main(skills)``, which the prelude's ``run`` drives)."""
    return f'"""{title}"""\n\n' + _prelude(params) + main


# ---------------------------------------------------------------------- the steps


def _main_for(step: Step) -> str:
    """The step's own ``main(skills)`` (the prelude's ``run`` drives it)."""
    if step.kind == "collect":
        n = max(1, step.goal.get(step.item, 1))
        if step.item in ("drink",):
            body = """
                ok = yield from hunt_drink(skills)
                return ok
            """
        else:
            body = f"""
                ok = yield from obtain(skills, {step.item!r}, {n})
                return ok
            """
    elif step.kind == "make":
        n = max(1, step.goal.get(step.item, 1))
        body = f"""
            if not SECURE:
                ok = yield from skills.make({step.item!r}, PATIENCE)
                return ok
            ok = yield from build(skills, {step.item!r}, {n})
            return ok
        """
    elif step.kind == "place":
        body = f"""
            tries = 0
            while skills.achievements().get({step.achievement!r}, 0) == 0 and tries <= ATTEMPTS:
                tries += 1
                if SECURE and NEAR.get({step.item!r}):
                    ok = yield from stations(skills, NEAR[{step.item!r}], USES[{step.item!r}])
                if SECURE:
                    yield from beside(skills, COMPANIONS.get({step.item!r}, []))
                ok = yield from put(skills, {step.item!r})
                if not ok and EXPLORE:
                    yield from skills.explore(EXPLORE, None)
            return skills.achievements().get({step.achievement!r}, 0) > 0
        """
    elif step.item == "sleep":
        body = """
            ok = yield from wait_and_sleep(skills)
            return ok
        """
    elif step.item == "plant":
        body = """
            ok = yield from grow_and_eat(skills)
            return ok
        """
    else:
        tool = ""
        if step.item == "skeleton":
            tool = """
            if SECURE:
                yield from obtain(skills, "wood_pickaxe", 1)
                yield from obtain(skills, "wood_sword", 1)
            """
        elif step.item == "zombie":
            tool = """
            if SECURE:
                yield from obtain(skills, "wood_sword", 1)
            """
        body = (
            tool
            + f"""
            ok = yield from hunt(skills, {step.item!r}, {step.achievement!r})
            return ok
        """
        )
    return "\n\ndef main(skills):\n" + textwrap.indent(textwrap.dedent(body).strip(), "    ") + "\n"


def code_for(step: Step, params: Params | None = None) -> str:
    """Policy source (defines ``run(skills)``) for ``step`` with ``params`` (default:
    :func:`knowledge.revisions.best_params`)."""
    params = params if params is not None else best_params(step)
    return policy_source(f"Skill for {step.name}: {step.description}", params, _main_for(step))


def step_code(name: str, params: Params | None = None) -> str:
    """Source for the achievement step ``name`` (a shortcut for prompts and tests)."""
    return code_for(achievement_step(name), params)


def subtask_step(name: str, achievement: str = "", goal: dict | None = None) -> Step:
    """The library's step for a plan's sub-action ``name`` (or its ``achievement``), with
    the plan's ``goal`` counts in place of the step's own when it gives any."""
    step = achievement_step(achievement or name)
    if goal:
        step = dataclasses.replace(step, goal=dict(goal))
    return step


def complete_params(step: Step) -> Params:
    """The library's final settings for ``step`` as a stage of a plan: no survival code of
    its own (the task planner's needs keep the vitals up around every stage)."""
    return best_params(step, survive=False)


def complete_code(step: Step) -> str:
    """The complete template for ``step`` as a stage of a plan plays it
    (:func:`complete_params`): what the offline fast agent writes first with
    ``offline_first = "full"``."""
    return code_for(step, complete_params(step))


def coded_stages(steps: list[Step], by_achievement: bool = False) -> list:
    """Coded stages for ``steps`` at the library's final quality, with the tests the
    planner gives them: the goal inventory when there is one, else the achievement
    (``by_achievement``: always the achievement). No survival code of their own: the
    task planner's needs keep the vitals up."""
    out = []
    for step in steps:
        goal = {} if by_achievement else {k: int(v) for k, v in step.goal.items()}
        subtask = Subtask(
            step.name,
            step.description,
            goal=goal,
            achievement="" if goal else step.achievement,
            max_steps=int(step.max_steps),
        )
        out.append(Stage(subtask, code=complete_code(step)))
    return out
