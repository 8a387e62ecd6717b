"""Task family: what a sub-action must achieve, and how it is learned with RL."""

from __future__ import annotations

from dataclasses import field

from messages.base import message


@message("task.subtask")
class Subtask:
    """slow agent → fast agent, environment, learner: one sub-action and its success test."""

    name: str
    """Short identifier, e.g. ``collect_wood``."""
    description: str = ""
    """What it is for, in words (prompts and reports show it)."""
    goal: dict[str, int] = field(default_factory=dict)
    """Inventory needed for success, e.g. ``{"wood": 1}``; all must hold."""
    achievement: str = ""
    """An achievement whose unlocking also means success, e.g. ``place_table``."""
    max_steps: int = 500
    """Episode step cap: the episode ends (unsuccessful) after this many primitive steps."""


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


@message("task.rl_config")
class RLConfig:
    """fast agent → learner/environment: learn one sub-action with RL (the paper's RL
    interface: task, observation, action space with coded actions, reward)."""

    subtask: Subtask
    """What success means and the episode cap."""
    observation: list[str] = field(default_factory=lambda: ["view", "inventory", "status"])
    """Parts of the observation the policy sees: view, inventory, status, facing, daylight."""
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


@message("task.stage")
class Stage:
    """fast agent → environment: one sub-policy of a composed policy, coded or learned."""

    subtask: Subtask
    """What the stage must achieve; its ``max_steps`` caps one run of the stage."""
    code: str = ""
    """A coded sub-policy: Python defining ``run(skills)`` (used when no policy is given)."""
    policy_path: str = ""
    """Or a learned sub-policy: an SB3 zip trained on ``config``."""
    policy_sha256: str = ""
    """The zip's expected hash."""
    config: RLConfig | None = None
    """The RL interface the learned sub-policy acts through (observation, coded options)."""


@message("task.need")
class Need:
    """task planner rule: when ``stat`` drops below ``below``, run ``stage`` first."""

    stat: str
    """A vital statistic: drink, food, energy or health."""
    below: float
    """Threshold that triggers the need (Crafter's stats run 0–9)."""
    stage: Stage
    """What restores it (drink water, eat a cow, sleep in a shelter)."""
    until: float = 0.0
    """The stage ends once ``stat`` reaches this (0: when the stage's own test holds)."""
