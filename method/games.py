"""The worlds a run may play (``[task] world``) and the plan's steps in each.

The slow agent plans from a game's own rules: Crafter's from its ``data.yaml``
(:mod:`knowledge.recipes`), Minetest's from minetest_game's definitions as a running
server reports them (:class:`worlds.minetest.world.GameRules`). A step here is a
:class:`knowledge.recipes.Step` either way, so the plan, the prompts and the agents'
loops are the same code for both.

Minetest's steps are the diamond chain (:data:`worlds.minetest.world.CHAIN`), each tested
by what the inventory carries when the chain moves on (``templates.START_STATES``), not by an
achievement: the game's achievement for a trunk holds at the first of the four the
planks need. Where either of two items does (a pine trunk for an apple-tree trunk, pine
planks for planks), the goal's key names both (``"default:tree|default:pine_tree"``,
:meth:`messages.task.Subtask.met`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from knowledge import recipes
from knowledge.recipes import Step

if TYPE_CHECKING:
    from worlds.minetest.world import GameRules, Recipe

# The Minetest modules are imported where they are used: they bring numpy (~0.14 s of
# the command line's start, which every actor process pays) into a run that is Crafter's.

WORLDS = ("crafter", "minetest")
"""What ``[task] world`` may name."""
MINETEST_PREFIX = "default:"
"""minetest_game's item names: ``default:diamond``; a config may leave the prefix out."""
EITHER = {
    "default:tree": "default:tree|default:pine_tree",
    "default:wood": "default:wood|default:pine_wood",
}
"""The goal key of a chain item that another item stands in for
(:data:`worlds.minetest.world.STAND_INS`, which a test holds this to)."""
MINED = ("default:tree", "default:cobble", "default:coal_lump", "default:iron_lump")


def minetest_item(target: str) -> str:
    """``diamond`` → ``default:diamond``; a full name is kept."""
    return target if ":" in target else MINETEST_PREFIX + target


def targets(world: str) -> tuple[str, ...]:
    """The items a run in ``world`` may target (Crafter: its achievements too)."""
    if world == "minetest":
        from worlds.minetest.world import CHAIN

        return CHAIN
    from crafter import constants

    return (*constants.items, *constants.achievements)


def achievements(world: str) -> tuple[str, ...]:
    """The achievements ``world`` reports (Minetest: ``obtain_<item>`` along the chain)."""
    if world == "minetest":
        from worlds.minetest.world import ACHIEVEMENTS

        return ACHIEVEMENTS
    from crafter import constants

    return tuple(constants.achievements)


def plan_steps(world: str, target: str) -> list[Step]:
    """The recipe chain's steps for ``target`` in ``world``, in order."""
    if world == "minetest":
        return minetest_steps(minetest_item(target))
    if target == "achievements":
        return recipes.curriculum()
    return recipes.chain(target)


def minetest_steps(target: str) -> list[Step]:
    """The Minetest diamond chain up to ``target``, described from the game's recipes."""
    from worlds.minetest import templates
    from worlds.minetest.world import CHAIN, achievement

    rules = minetest_rules()
    steps: list[Step] = []
    for i, item in enumerate(CHAIN[: CHAIN.index(target) + 1]):
        after = CHAIN[i + 1] if i + 1 < len(CHAIN) else None
        count = templates.START_STATES.get(after, {}).get(item, 0) if after else 0
        key = EITHER.get(item, item)
        kind = _kind(item, rules)
        steps.append(
            Step(
                name=achievement(item),
                kind=kind,
                item=item,
                goal={key: max(1, count)},
                achievement="",
                depends=(steps[-1].name,) if steps else (),
                description=_describe(item, kind, max(1, count), rules),
                max_steps=templates.step_budget(item),
            )
        )
    return steps


def _kind(item: str, rules: GameRules) -> str:
    if item in MINED or item == "default:diamond":
        return "collect"
    recipe = _recipe(item, rules)
    return "smelt" if recipe is not None and recipe.method == "cooking" else "craft"


def _recipe(item: str, rules: GameRules) -> Recipe | None:
    """The game's recipe for ``item`` that the chain can use: every ingredient an earlier
    chain item (or a group one of them belongs to); the first such, None if none."""
    from worlds.minetest.world import CHAIN

    earlier = CHAIN[: CHAIN.index(item)] if item in CHAIN else CHAIN
    known = set(earlier) | {alt for key in EITHER.values() for alt in key.split("|")}
    groups = {"group:tree", "group:wood", "group:stick", "group:stone"}
    for recipe in rules.recipes.get(item, ()):
        if all(k in known or k in groups for k in recipe.needs()):
            return recipe
    return None


def _describe(item: str, kind: str, count: int, rules: GameRules) -> str:
    """One sentence from the game's definitions: a recipe's ingredients, an ore's depths."""
    name = item.removeprefix(MINETEST_PREFIX)
    if kind in ("craft", "smelt"):
        recipe = _recipe(item, rules)
        if recipe is None:
            return f"have {count} {name}"
        needs = ", ".join(f"{n} {k}" for k, n in sorted(recipe.needs().items()))
        how = "in a furnace from" if kind == "smelt" else "from"
        return f"have {count} {name}: {kind} it {how} {needs} ({recipe.count} a time)"
    ores = [(node, places) for node, places in rules.ores.items() if rules.drops.get(node) == item]
    if ores:
        node, places = ores[0]
        where = ", ".join(f"y {lo}..{hi}" for lo, hi, _ in places)
        return f"have {count} {name}: dig {node} (the map has it at {where}), right tool held"
    return f"have {count} {name}: find and dig it"


@functools.cache
def minetest_rules() -> GameRules:
    """minetest_game's rules as a server reports them (one short-lived server, cached)."""
    from worlds.minetest.world import MinetestWorld

    with MinetestWorld() as world:
        world.reset(0)
        return world.game_rules
