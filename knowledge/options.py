"""Coded options: small coded actions (≤ ~50 steps each) for a step's RL action space.

- :func:`options_for` — (name, description, source) of the options for a step: walking
  to what it hits, hitting, exploring, placing and making what it needs.
- :func:`option` / :data:`OPTION_NAMES` — any option's source, every option's name.
- :func:`stage_code_option` — the stage's own coded policy as an option
  (:data:`STAGE_CODE`): offered beside the menu when a coded sub-action moves to RL, and
  run *resumable* (``messages.task.CodedAction.resumable``) for up to
  :data:`STAGE_CODE_STEPS` steps a choice.

Each source defines ``run(skills)`` over the skill API, like a template
(:mod:`knowledge.library`), but without the prelude: one skill call or two.
"""

from __future__ import annotations

import functools

from crafter import constants

from knowledge.recipes import Step, sources

# Options that do not depend on Crafter's tables: name → (description, body of run).
_OPTION_BODIES: dict[str, tuple[str, str]] = {
    "explore": ("walk ~10 steps towards unseen ground", "yield from skills.explore(10)"),
    "explore_mountain": (
        "walk ~10 steps towards unseen ground among stone (tunnels with a pickaxe)",
        'skills.tunnel(True)\n    yield from skills.explore(10, "stone")',
    ),
    "attack": ("'do' on what is in front, 3 times", "yield from skills.attack(3)"),
    "defend": (
        "fight a zombie or skeleton next to the player",
        "yield from skills.defend(20)",
    ),
    "noop": ("wait one step", 'yield "noop"'),
    "sleep": (
        "wall in if possible and sleep until energy is full",
        "skills.tunnel(True)\n    yield from skills.shelter(30)\n    yield from skills.rest(9, 50)",
    ),
    "drink_water": (
        "walk to water and drink up to 5 times",
        'yield from skills.collect("water", 5, 50)',
    ),
    "eat_cow": ("walk to a cow and hit it until eaten", 'yield from skills.collect("cow", 1, 50)'),
}


def _walk_option(kind: str) -> tuple[str, str]:
    return (
        f"walk to the nearest {kind} and face it (exploring while none is known)",
        f"yield from skills.approach({kind!r}, 50)",
    )


def _collect_option(tile: str, item: str) -> tuple[str, str]:
    return (
        f"walk to a {tile} and hit it until it gives one {item}",
        f"yield from skills.collect({tile!r}, 1, 50)",
    )


@functools.cache
def _all_options() -> dict[str, tuple[str, str]]:
    """Every option, name → (description, body of ``run``): the fixed ones and one per
    tile to walk to, item to collect, station to place and tool to make."""
    out = dict(_OPTION_BODIES)
    for tile in list(constants.collect) + ["cow", "zombie", "skeleton", "table", "furnace"]:
        out[f"walk_to_{tile}"] = _walk_option(tile)
    for item, tile in sources().items():
        if item in constants.items and item not in ("health", "food", "drink", "energy"):
            out[f"collect_{item}"] = _collect_option(tile, item)
    for item in constants.place:
        out[f"place_{item}"] = (
            f"place a {item} on a free tile in front (walking to one)",
            f"yield from skills.place({item!r}, 30)",
        )
    for item in constants.make:
        out[f"make_{item}"] = (
            f"walk next to the stations and make a {item}",
            f"yield from skills.make({item!r}, 40)",
        )
    return out


OPTION_NAMES: tuple[str, ...] = tuple(sorted(_all_options()))
"""Every coded action's name, from Crafter's data."""


def option(name: str) -> str:
    """Source of the coded action ``name`` (a ``run(skills)`` of ≤ ~50 steps)."""
    description, body = _all_options()[name]
    return f'def run(skills):\n    """{description}"""\n    {body}\n'


def options_for(step: Step) -> list[tuple[str, str, str]]:
    """(name, description, source) of the coded actions for ``step``'s RL action space:
    walking to what the step hits, hitting, exploring, placing and making what it needs."""
    names = ["explore", "attack", "defend"]
    if step.kind == "collect":
        names.insert(0, f"walk_to_{step.source}")
        if step.requires:
            names.append("explore_mountain")
    if step.kind in ("place", "make"):
        for item in step.uses:
            tile = sources().get(item)
            if tile is not None:
                names.append(f"walk_to_{tile}")
                names.append(f"collect_{item}")
        for station in step.near:
            names.append(f"walk_to_{station}")
            names.append(f"place_{station}")
        names.append(f"{step.kind}_{step.item}")
    if step.kind == "achieve":
        if step.item == "sleep":
            names.append("sleep")
        elif step.item == "plant":
            names += ["collect_sapling", "place_plant", "walk_to_plant", "noop"]
        elif step.item in ("cow", "zombie", "skeleton"):
            names.insert(0, f"walk_to_{step.item}")
    if step.item in ("stone", "coal", "iron", "diamond") and "explore_mountain" not in names:
        names.append("explore_mountain")
    known = _all_options()
    seen = [n for n in dict.fromkeys(names) if n in known]
    return [(n, known[n][0], option(n)) for n in seen]


STAGE_CODE = "stage_code"
"""The option name of a sub-action's own coded policy (no library option has it)."""
STAGE_CODE_STEPS = 50
"""K of the stage's own code: steps it runs per choice before the learner decides again
(the next choice of it goes on where it stopped)."""


def stage_code_option(code: str) -> tuple[str, str, str]:
    """(name, description, source) of the stage's own coded policy as an option: the code
    the fast agent wrote for the sub-action, run as it is (``run(skills)``)."""
    description = (
        f"run this sub-action's own coded policy for up to {STAGE_CODE_STEPS} steps,"
        " going on where it stopped the last time it was chosen in the episode"
    )
    return STAGE_CODE, description, code
