"""Task family: what a sub-action must achieve, and how it is learned with RL."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Final, Literal

from messages.base import message

Vital = Literal["drink", "food", "energy", "health"]
"""A vital statistic the world reports as status (0–9 in Crafter), in the order they run
down: thirst first, health last (it falls when the others are empty)."""
DAYLIGHT: Final = "daylight"
"""The one need statistic that is no vital: the light the player sees (0–1)."""
NeedStat = Literal[Vital, "daylight"]
"""What a survival need may watch: a vital, or the daylight (sheltering at dusk)."""

ObservationPart = Literal["view", "inventory", "status", "facing", "daylight", "map"]
"""A part of the observation a learned policy may see: the local view, the inventory,
the vitals, the tile it faces, the daylight, and the map the player remembers around
itself (a fixed square of what it has seen this episode, unseen tiles marked; never the
hidden world: ``rl.rl_env.MAP_RADIUS``)."""
DEFAULT_OBSERVATION: Final[tuple[ObservationPart, ...]] = ("view", "inventory", "status")
"""What a learned policy sees unless its RL config says otherwise: what a player sees on
screen (the view with the inventory and vitals bar below it)."""


@message("task.subtask")
class Subtask:
    """slow agent → fast agent, environment, learner: one sub-action and its success test."""

    name: str
    """Short identifier, e.g. ``collect_wood``."""
    description: str = ""
    """What it is for, in words (prompts and reports show it)."""
    goal: dict[str, int] = field(default_factory=dict)
    """Inventory needed for success, e.g. ``{"wood": 1}``; all must hold. A key may name
    alternatives joined by ``|`` whose counts add up (Minetest's
    ``{"default:tree|default:pine_tree": 4}``: four trunks of either kind)."""
    achievement: str = ""
    """An achievement whose unlocking also means success, e.g. ``place_table``."""
    max_steps: int = 500
    """Episode step cap: the episode ends (unsuccessful) after this many primitive steps."""

    def met(
        self,
        inventory: Mapping[str, int],
        achievements: Mapping[str, int],
        *,
        since: Mapping[str, int] | None = None,
        achievement_decides: bool = False,
    ) -> bool:
        """The success test: the achievement unlocked (achievement → times it happened;
        with ``since``, more often than then), or every goal count in the inventory.

        With ``achievement_decides``, a named achievement is the whole test, the goal only
        stands in for a missing one: a stage's test, where the items an achievement
        needed may be spent by it (a table's wood). A subtask with neither never holds.
        :meth:`met_source` is the same test as policy source."""
        if self.achievement:
            before = since.get(self.achievement, 0) if since is not None else 0
            if achievements.get(self.achievement, 0) > before:
                return True
            if achievement_decides:
                return False
        return bool(self.goal) and all(carried(inventory, k) >= n for k, n in self.goal.items())

    def met_source(self, skills: str = "skills") -> str:
        """:meth:`met` (counted from the episode's start) as a Python expression over the
        skill API object named ``skills``, for policy source such as setup code."""
        tests = []
        if self.achievement:
            tests.append(f"{skills}.achievements().get({self.achievement!r}, 0) > 0")
        if self.goal:
            goal = " and ".join(
                " + ".join(f"{skills}.inventory().get({item!r}, 0)" for item in k.split("|"))
                + f" >= {n}"
                for k, n in sorted(self.goal.items())
            )
            tests.append(f"({goal})")
        return " or ".join(tests) or "False"


def carried(inventory: Mapping[str, int], key: str) -> int:
    """How many of a goal key's items ``inventory`` holds: one item, or the sum over
    alternatives joined by ``|``."""
    if "|" not in key:
        return inventory.get(key, 0)
    return sum(inventory.get(item, 0) for item in key.split("|"))


@message("task.coded_action")
class CodedAction:
    """fast agent → learner: a high-level action written as code, used as an RL option."""

    name: str
    """Action name shown in the action space, e.g. ``walk_to_tree``."""
    code: str
    """Python defining ``run(skills)``, a generator of primitive action names."""
    max_steps: int = 50
    """K: the option runs until its generator ends or this many primitive steps."""
    description: str = ""
    """What it does, for prompts and reports."""
    resumable: bool = False
    """Keep the code's generator between choices in one episode: the next time this
    action is chosen, it goes on where the last choice stopped (after ``max_steps``)
    instead of starting afresh. Once the code finishes or fails, the next choice starts
    it afresh; every episode starts it afresh. The stage's own coded policy is offered
    this way (:data:`knowledge.options.STAGE_CODE`)."""


@message("task.need_rule")
class NeedRule:
    """A survival need as a training episode serves it (:attr:`RLConfig.needs`): when
    ``stat`` is below ``below``, ``code`` runs until ``stat`` is back at ``until``, its
    code returns, or ``max_steps``."""

    stat: str
    """A :data:`NeedStat`: drink, food, energy, health or daylight."""
    below: float
    """Threshold that triggers it."""
    until: float
    """Level at which its run stops (served)."""
    code: str
    """Python defining ``run(skills)``, as a need's stage."""
    max_steps: int = 300
    """Step cap of one run."""
    name: str = ""
    """The need's stage name (events, reports)."""


@message("task.rl_config")
class RLConfig:
    """fast agent → learner/environment: learn one sub-action with RL (the paper's RL
    interface: task, observation, action space with coded actions, reward)."""

    subtask: Subtask
    """What success means and the episode cap."""
    observation: list[str] = field(default_factory=lambda: list(DEFAULT_OBSERVATION))
    """Parts of the observation the policy sees, each an :data:`ObservationPart`."""
    primitives: list[str] = field(default_factory=list)
    """Primitive actions offered; empty means all of the world's."""
    coded_actions: list[CodedAction] = field(default_factory=list)
    """High-level actions offered beside the primitives."""
    reward_code: str = ""
    """Python defining ``reward(before, after)`` → float, added to the success reward."""
    success_reward: float = 1.0
    """Reward on the step the subtask succeeds."""
    setup_code: str = ""
    """Python defining ``run(skills)`` that brings a fresh world to the subtask's start
    (e.g. gather wood before learning to place a table); empty: start from reset."""
    world: str = "crafter"
    """World backend: crafter or minedojo."""
    needs: list[NeedRule] = field(default_factory=list)
    """Survival needs served inside training episodes as the final policy's task planner
    serves them (:mod:`rl.rl_env`, "needs"), so that a learned sub-action trains where
    it will play. Empty: none. A composed episode drives a learned stage without them:
    its planner serves the needs itself."""


@message("task.stage")
class Stage:
    """fast agent → environment: one sub-policy of a composed policy, coded or learned."""

    subtask: Subtask
    """What the stage must achieve; its ``max_steps`` caps one run of the stage."""
    code: str = ""
    """A coded sub-policy: Python defining ``run(skills)`` (used when no policy is given)."""
    policy_path: str = ""
    """Or a learned sub-policy: an SB3 zip trained on ``config`` (its path in the head's
    run directory; may be empty when ``policy_sha256`` names it)."""
    policy_sha256: str = ""
    """The zip's hash, which names it: an environment actor without the file fetches it
    by this from the head's artifact store."""
    config: RLConfig | None = None
    """The RL interface the learned sub-policy acts through (observation, coded options)."""


@message("task.need")
class Need:
    """task planner rule: when ``stat`` drops below ``below``, run ``stage`` first."""

    stat: str
    """What it watches, a :data:`NeedStat`: drink, food, energy, health or daylight."""
    below: float
    """Threshold that triggers the need (Crafter's stats run 0–9)."""
    stage: Stage
    """What restores it (drink water, eat a cow, sleep in a shelter)."""
    until: float = 0.0
    """The stage ends once ``stat`` reaches this (0: when the stage's own test holds)."""

    def label(self) -> str:
        """``name (stat < below)`` for tables; a need that can never start (``below`` 0 or
        less: no statistic goes under 0) says it is off, e.g. the shipped retreat."""
        name = self.stage.subtask.name
        if self.below <= 0:
            return f"{name} ({self.stat}: off)"
        return f"{name} ({self.stat} < {self.below:g})"
