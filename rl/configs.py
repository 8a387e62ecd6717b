"""Ready RL configurations for Crafter subtasks, as the fast agent would write them.

The pair for "collect wood" differs only in the action space, so a learner benchmark
run on both measures what coded high-level actions buy RL (the paper's claim):

- :func:`collect_wood_primitive` — noop, the four moves and ``do``;
- :func:`collect_wood_with_coded` — the same primitives plus two coded actions:
  ``walk_to_tree`` (walk to the nearest tree, exploring while none is known, and face it)
  and ``chop_tree`` (attack the tree in front until a log is collected). The learner
  still has to choose them, in order: walking alone collects nothing, and chopping
  with no tree in front does nothing.

Both start from a fresh world per episode and pay only the success reward, so returns
compare directly.
"""

from __future__ import annotations

from messages.task import CodedAction, RLConfig, Subtask

MOVES = ("move_left", "move_right", "move_up", "move_down")
COLLECT_WOOD_PRIMITIVES = ("noop", *MOVES, "do")
"""What a learner needs for wood: moving, and 'do' on the tree it faces."""

# Episode cap for collect_wood: the scripted policy collects wood within 50 steps in
# 28 of 30 seeds (most within 10). A tighter cap keeps the task a test of *finding* a
# tree: uniformly random primitives succeed in ~23% of episodes at 50 steps but ~63% at
# 200, where every learner looks good; random choices with the coded actions: ~90%.
COLLECT_WOOD_MAX_STEPS = 50
COLLECT_WOOD_OBSERVATION = ("view", "inventory", "facing")
"""Where trees are, whether wood was gained, and what 'do' would hit."""

WALK_TO_TREE_SOURCE = '''\
def run(skills):
    """Walk to the nearest tree (exploring while none is known) and face it."""
    yield from skills.approach("tree")
'''

CHOP_TREE_SOURCE = '''\
def run(skills):
    """Attack the tree in front until a log is collected; ends at once with no tree there."""
    start = skills.inventory().get("wood", 0)
    while skills.facing_tile() == "tree" and skills.inventory().get("wood", 0) == start:
        yield "do"
'''

# Crafter's map is 64×64 and a view 9×7: a tree is almost always within 50 steps of
# walking (the scripted policy's worst case over 30 seeds was 55 steps, exploring).
WALK_TO_TREE_MAX_STEPS = 50
# A tree gives its log on the first 'do' (data.yaml has no probability for trees);
# 10 tolerates a creature stepping in front.
CHOP_TREE_MAX_STEPS = 10


def collect_wood_subtask() -> Subtask:
    """Collect one wood from a fresh world."""
    return Subtask(
        name="collect_wood",
        description="collect one piece of wood from a tree",
        goal={"wood": 1},
        max_steps=COLLECT_WOOD_MAX_STEPS,
    )


def collect_wood_primitive() -> RLConfig:
    """Collect wood with primitive actions only (noop, moves, do)."""
    return RLConfig(
        subtask=collect_wood_subtask(),
        observation=list(COLLECT_WOOD_OBSERVATION),
        primitives=list(COLLECT_WOOD_PRIMITIVES),
    )


def collect_wood_coded_actions() -> list[CodedAction]:
    """The coded high-level actions for wood: walk to a tree, chop it."""
    return [
        CodedAction(
            name="walk_to_tree",
            code=WALK_TO_TREE_SOURCE,
            max_steps=WALK_TO_TREE_MAX_STEPS,
            description="walk to the nearest tree and face it",
        ),
        CodedAction(
            name="chop_tree",
            code=CHOP_TREE_SOURCE,
            max_steps=CHOP_TREE_MAX_STEPS,
            description="attack the tree in front until a log is collected",
        ),
    ]


def collect_wood_with_coded() -> RLConfig:
    """Collect wood with the same primitives plus walk_to_tree and chop_tree."""
    return RLConfig(
        subtask=collect_wood_subtask(),
        observation=list(COLLECT_WOOD_OBSERVATION),
        primitives=list(COLLECT_WOOD_PRIMITIVES),
        coded_actions=collect_wood_coded_actions(),
    )
