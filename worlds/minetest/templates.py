"""The Minetest diamond chain's templates: policy source the sandbox runs, per step or whole.

``worlds/minetest/chain.py`` is the chain as policy source (no imports, classes or ``_``
names); this module reads it as text, the way :mod:`knowledge.library` reads the Crafter
prelude, and writes in the constants that make one policy of it: ``CHAIN`` (from
:data:`worlds.minetest.world.CHAIN`) and ``FIRST`` / ``LAST``, the steps it runs. The rest
of the file, comments and docstrings included, is the policy as it is.

- :func:`step_code` — the policy for one step (run it from :data:`START_STATES`);
  :func:`chain_code` — the chain from nothing up to an item.
- :func:`record` — the steps a run of either reported, from what it printed.
- :data:`START_STATES`, :data:`PATIENCE` — the file's own constants, for a caller that
  budgets or starts a step the way the chain does; :func:`step_budget` and
  :data:`CHAIN_BUDGET`, the budgets the benchmark and the method give a step and the chain.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from worlds.minetest.world import CHAIN

SOURCE = Path(__file__).with_name("chain.py")
"""The chain's policy source."""
WRITTEN = ("CHAIN", "FIRST", "LAST")
"""The constants written in per policy (the file's other constants keep their values)."""


@functools.cache
def _parts() -> tuple[str, dict[str, object], dict[str, tuple[int, int]]]:
    """The file's text, its constants (name → value) and where each constant's statement
    lies (first line, last line; 1-based), read once."""
    source = SOURCE.read_text(encoding="utf-8")
    constants: dict[str, object] = {}
    spans: dict[str, tuple[int, int]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            break  # the constants come first, the code after them
        if isinstance(node, ast.Assign):
            (target,) = node.targets
            assert isinstance(target, ast.Name), "chain.py's constants are plain names"
            constants[target.id] = ast.literal_eval(node.value)
            spans[target.id] = (node.lineno, node.end_lineno or node.lineno)
    missing = sorted(set(WRITTEN) - constants.keys())
    assert not missing, f"chain.py lacks the constants {missing} its policies write in"
    return source, constants, spans


def policy_source(first: str, last: str) -> str:
    """chain.py with ``CHAIN`` written in and its steps from the one that obtains
    ``first`` through the one that obtains ``last``."""
    for item in (first, last):
        if item not in CHAIN:
            raise ValueError(f"{item!r} is not an item of the chain {CHAIN}")
    if CHAIN.index(first) > CHAIN.index(last):
        raise ValueError(f"{first!r} comes after {last!r} in the chain")
    source, _, spans = _parts()
    values = {"CHAIN": list(CHAIN), "FIRST": first, "LAST": last}
    lines = source.splitlines(keepends=True)
    # From the bottom up, so that the line numbers of the statements above still hold.
    for name in sorted(WRITTEN, key=lambda n: spans[n][0], reverse=True):
        start, end = spans[name]
        lines[start - 1 : end] = [f"{name} = {values[name]!r}\n"]
    return "".join(lines)


def step_code(item: str) -> str:
    """Policy source defining ``run(skills)`` that obtains ``item`` by its step of the
    chain alone, from what the chain carries on reaching it (:data:`START_STATES`)."""
    return policy_source(item, item)


def chain_code(last: str = "default:diamond") -> str:
    """Policy source defining ``run(skills)`` that runs the chain from an empty inventory
    up to and including the step that obtains ``last``."""
    return policy_source(CHAIN[0], last)


def record(output: str) -> list[tuple[str, bool, int]]:
    """(item, success, the episode's steps so far) for each step a chain policy ran, from
    what it printed (its ``run`` prints ``step ITEM ok|failed STEPS`` per step)."""
    steps = []
    for line in output.splitlines():
        words = line.split()
        if len(words) == 4 and words[0] == "step" and words[2] in ("ok", "failed"):
            steps.append((words[1], words[2] == "ok", int(words[3])))
    return steps


START_STATES: dict[str, dict[str, int]] = _parts()[1]["START_STATES"]  # type: ignore[assignment]
"""What the chain carries on reaching each step: the inventory to run its step alone from."""
PATIENCE: dict[str, int] = _parts()[1]["PATIENCE"]  # type: ignore[assignment]
"""The steps each part of the chain may take before it gives up (its budget's parts)."""

CRAFT_BUDGET = 50
"""Steps a step that only crafts or smelts may take (it takes a few)."""
STEP_BUDGETS: dict[str, int] = {
    "default:tree": PATIENCE["trees"],
    "default:cobble": PATIENCE["stone"],
    "default:coal_lump": PATIENCE["coal"],
    "default:iron_lump": PATIENCE["iron"],
    "default:diamond": PATIENCE["down"] + PATIENCE["diamond"],
}
"""Steps each searching step may take: its skills' own patience (what the chain gives
it); every other step gets :data:`CRAFT_BUDGET`."""
CHAIN_BUDGET = sum(STEP_BUDGETS.get(item, CRAFT_BUDGET) for item in CHAIN)
"""The whole chain's steps, the sum of its steps' budgets (11,250): the scripted probe
with an ore oracle needed 260–463; exploring for trees and strip-mining for ores without
one takes thousands, and 10,000 steps run in under a minute."""


def step_budget(item: str) -> int:
    """The steps the step that obtains ``item`` may take."""
    return STEP_BUDGETS.get(item, CRAFT_BUDGET)
