"""Actor roles: one module per role.

``ROLES`` maps the role of a worker process (``[actors.ROLE]`` in a config) to
``module:Class``, so that ``run.py actor ROLE`` imports only what that process needs.
``AGENTS`` maps the method's agents, which run as trio tasks inside the head, the same
way; the driver (:mod:`method.driver`) gets their classes from ``run.py``."""

from __future__ import annotations

import importlib

ROLES: dict[str, str] = {
    "probe": "actors.probe:ProbeActor",
    "environment": "actors.environment:EnvironmentActor",
    "learner": "actors.learner:LearnerActor",
}

AGENTS: dict[str, str] = {
    "slow": "actors.slow:SlowAgent",
    "fast": "actors.fast:FastAgent",
    "critic": "actors.critic:CriticActor",
}


def agent_classes() -> dict[str, type]:
    """The in-process agents' classes by role (imports them: no torch among them)."""
    return {role: _load(target) for role, target in AGENTS.items()}


def actor_class(role: str) -> type:
    """The class that plays ``role``; ValueError names the known roles."""
    try:
        target = ROLES[role]
    except KeyError:
        raise ValueError(f"unknown actor role {role!r}; known roles: {', '.join(ROLES)}") from None
    return _load(target)


def _load(target: str) -> type:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)
