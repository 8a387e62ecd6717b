"""Game worlds behind one interface, and the skill API coded policies use.

Public names live here; modules hold one concern each:

- :mod:`envs.world` — :class:`Observation` and the :class:`World` protocol.
- :mod:`envs.crafter_world` — Crafter without per-step rendering (the default backend).
- :mod:`envs.minedojo_world`, :mod:`envs.minedojo_spaces` — the optional MineDojo adapter
  and a stand-in env that reproduces MineDojo's documented spaces.
- :mod:`envs.skills` — :class:`Skills` (what policy code may call) and :func:`run_policy`.
- :mod:`envs.policies` — reference coded policies, as source text and as functions.
- :mod:`envs.stats` — Crafter-format per-episode stats (``stats.jsonl``).
"""

from envs.crafter_world import CrafterWorld
from envs.minedojo_world import MineDojoStandIn, MineDojoWorld
from envs.skills import EpisodeResult, Rules, Skills, crafter_rules, run_policy
from envs.stats import StatsWriter, episode_stats
from envs.world import Observation, UnknownActionError, World

__all__ = [
    "CrafterWorld",
    "EpisodeResult",
    "MineDojoStandIn",
    "MineDojoWorld",
    "Observation",
    "Rules",
    "Skills",
    "StatsWriter",
    "UnknownActionError",
    "World",
    "crafter_rules",
    "episode_stats",
    "run_policy",
]
