"""Setup code: one policy that brings a training world to a learned sub-action's start
by running the coded stages before it."""

from __future__ import annotations

import ast

from messages.task import Stage


def compose_setup(stages: list[Stage]) -> str:
    """One policy that runs the coded ``stages`` in order, each until its test holds —
    the setup code that brings a training world to a learned sub-action's start.

    Each stage's module is kept whole, with its top-level names prefixed so that two
    stages' helpers cannot collide; the sandbox sees one plain module."""
    parts, calls = [], []
    for i, stage in enumerate(s for s in stages if s.code):
        prefix = f"stage{i}_"
        tree = ast.parse(stage.code)
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

        parts.append(ast.unparse(_Rename(names, prefix).visit(tree)))
        calls.append((prefix + "run", stage.subtask))
    lines = ["\n\n".join(parts), "", "", "def run(skills):"]
    if not calls:
        lines.append("    return")
        lines.append("    yield 'noop'")
    for fn, subtask in calls:
        test = subtask.met_source("skills")
        # Each stage stops as soon as its test holds: skill code may go on to other
        # work (resting, sheltering) that is no part of the setup.
        lines.append(f"    if not ({test}):")
        lines.append(f"        for action in {fn}(skills):")
        lines.append("            yield action")
        lines.append(f"            if {test}:")
        lines.append("                break")
    return "\n".join(lines) + "\n"


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
