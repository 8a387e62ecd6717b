"""Actor roles: one module per role. ``ROLES`` maps a role name to ``module:Class`` so
that ``run.py actor ROLE`` imports only what that process needs."""

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
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)
