"""Setup code: one policy that brings a training world to a learned sub-action's start
by running the coded stages before it — with the survival needs the final policy
watches, served as the task planner serves them, so that training starts where play
reaches (:func:`compose_setup`)."""

from __future__ import annotations

import ast
from collections.abc import Sequence

from messages.task import Need, Stage

NEED_COOLDOWN_STEPS = 50
"""As the task planner's (:data:`episodes.composite.NEED_COOLDOWN_STEPS`): world steps a need
waits after a run that did not serve it."""
MAX_STAGE_RUNS = 200
"""Runs of one setup stage (restarts after a need interrupted it) before setup moves on:
a bound on a loop that takes no step."""

# The planner in setup code: the stages in order, each until its test holds; before
# each of their steps, a need whose vital is below its threshold (and not on cooldown)
# interrupts the stage and runs until the vital is back (or its code returns, or its
# step cap); the stage then starts afresh. Needs do not interrupt needs. A need run that
# did not serve it, or took no step, puts it on cooldown.
_PLANNER = """

def setup_stat(skills, stat):
    if stat == "daylight":
        return skills.daylight()
    return skills.status().get(stat, 99)


def setup_due(skills):
    now = skills.steps()
    for i in range(len(SETUP_NEEDS)):
        need = SETUP_NEEDS[i]
        if SETUP_COOL[i] <= now and setup_stat(skills, need[0]) < need[1]:
            return i
    return None


def setup_serve(skills, i):
    stat, below, until, cap, fn = SETUP_NEEDS[i]
    start = skills.steps()
    for action in fn(skills):
        yield action
        if setup_stat(skills, stat) >= until or skills.steps() - start >= cap:
            break
    if setup_stat(skills, stat) < until or skills.steps() == start:
        SETUP_COOL[i] = skills.steps() + {cooldown}


def setup_stage(skills, fn, met):
    for runs in range({runs}):
        if met():
            return
        i = setup_due(skills)
        if i is not None:
            yield from setup_serve(skills, i)
            continue
        interrupted = False
        for action in fn(skills):
            yield action
            if met():
                return
            if setup_due(skills) is not None:
                interrupted = True
                break
        if not interrupted:
            return
"""


def in_training(need: Need) -> bool:
    """Whether setup and training episodes serve ``need``: they serve a need by its level
    only, so it needs code and an ``until`` level (the others are served in play only)."""
    return bool(need.stage.code) and need.until > 0


def compose_setup(stages: list[Stage], needs: Sequence[Need] = ()) -> str:
    """One policy that runs the coded ``stages`` in order, each until its test holds —
    the setup code that brings a training world to a learned sub-action's start. With
    ``needs`` (the run's survival needs), they interrupt the stages as in the final
    policy (:mod:`episodes.composite`): without them the player walks through the nights
    unsheltered and unfed, and a deep stage's setup died in most worlds.

    Each stage's (and need's) module is kept whole, with its top-level names prefixed so
    that two modules' helpers cannot collide; the sandbox sees one plain module."""
    parts, calls = [], []
    served = [n for n in needs if in_training(n)]
    for i, need in enumerate(served):
        parts.append(_prefixed(need.stage.code, f"need{i}_"))
    if served:
        rows = ", ".join(
            f"({n.stat!r}, {float(n.below)!r}, {float(n.until)!r}, "
            f"{int(n.stage.subtask.max_steps)}, need{i}_run)"
            for i, n in enumerate(served)
        )
        parts.append(
            f"SETUP_NEEDS = [{rows}]\nSETUP_COOL = [0] * {len(served)}"
            + _PLANNER.format(cooldown=NEED_COOLDOWN_STEPS, runs=MAX_STAGE_RUNS)
        )
    for i, stage in enumerate(s for s in stages if s.code):
        prefix = f"stage{i}_"
        parts.append(_prefixed(stage.code, prefix))
        calls.append((prefix + "run", stage.subtask))
    lines = ["\n\n".join(parts), "", "", "def run(skills):"]
    if not calls:
        lines.append("    return")
        lines.append("    yield 'noop'")
    for fn, subtask in calls:
        test = subtask.met_source("skills")
        if served:
            lines.append(f"    yield from setup_stage(skills, {fn}, lambda: {test})")
            continue
        # Each stage stops as soon as its test holds: skill code may go on to other
        # work (resting, sheltering) that is no part of the setup.
        lines.append(f"    if not ({test}):")
        lines.append(f"        for action in {fn}(skills):")
        lines.append("            yield action")
        lines.append(f"            if {test}:")
        lines.append("                break")
    return "\n".join(lines) + "\n"


def _prefixed(code: str, prefix: str) -> str:
    """``code`` with its top-level names (functions, assigned names) prefixed."""
    tree = ast.parse(code)
    names = {
        node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        for node in tree.body
    } | {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    names.discard(None)
    return ast.unparse(_Rename(names, prefix).visit(tree))


class _Rename(ast.NodeTransformer):
    """Prefix a module's top-level names, where defined and where used."""

    def __init__(self, names: set, prefix: str) -> None:
        self.names, self.prefix = names, prefix

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id in self.names:
            node.id = self.prefix + node.id
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        if node.name in self.names:
            node.name = self.prefix + node.name
        self.generic_visit(node)
        return node
