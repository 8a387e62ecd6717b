"""Actor roles: one module per role.

``ROLES`` maps the role of a worker process (``[actors.ROLE]`` in a config) to
``module:Class``, so that ``run.py actor ROLE`` imports only what that process needs.
The method's agents (slow, fast, critic) run as trio tasks inside the head; the driver
above them (:mod:`rlgpt.driver`) imports their classes."""

from __future__ import annotations

import importlib

ROLES: dict[str, str] = {
    "probe": "actors.probe:ProbeActor",
    "environment": "actors.environment:EnvironmentActor",
    "learner": "actors.learner:LearnerActor",
}


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
