"""Reference coded policies, kept as source text the sandbox runs and as functions.

Each ``*_SOURCE`` string is plain Python that defines ``run(skills)``, a generator that
yields primitive action names and uses nothing but the skill API (:class:`skills.skills.
Skills`) — the shape of code the fast agent writes. The functions of the same names
are compiled from exactly that text, so what tests measure is what the sandbox runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

COLLECT_WOOD_SOURCE = '''\
def run(skills):
    """Collect one wood: walk to the nearest tree (exploring if none is known), hit it."""
    yield from skills.collect("tree", 1)
'''

PLACE_TABLE_SOURCE = '''\
def run(skills):
    """Place a crafting table: gather the wood its recipe needs, then place it."""
    need = skills.requirements("table").get("wood", 0)
    while skills.inventory().get("wood", 0) < need:
        missing = need - skills.inventory().get("wood", 0)
        got = yield from skills.collect("tree", missing)
        if not got:
            return
    yield from skills.place("table")
'''


def compile_policy(source: str) -> Callable[[Any], Iterator[str]]:
    """Compile trusted policy text (ours, not a model's) into its ``run`` function."""
    namespace: dict[str, Any] = {}
    exec(compile(source, "<policy>", "exec"), namespace)  # trusted text defined above
    return namespace["run"]


collect_wood = compile_policy(COLLECT_WOOD_SOURCE)
place_table = compile_policy(PLACE_TABLE_SOURCE)

SOURCES: dict[str, str] = {
    "collect_wood": COLLECT_WOOD_SOURCE,
    "place_table": PLACE_TABLE_SOURCE,
}
"""Policy name → source text, for the sandbox and the offline skill library."""


def wood_collected(skills: Any) -> bool:
    """Success test for collect_wood: at least one wood in the inventory."""
    return skills.inventory().get("wood", 0) >= 1


def table_placed(skills: Any) -> bool:
    """Success test for place_table: the place_table achievement happened."""
    return skills.achievements().get("place_table", 0) >= 1
