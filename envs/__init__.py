"""Game worlds behind one interface, and the skill API coded policies use.

Public names live here; modules hold one concern each:

- :mod:`envs.world` — :class:`Observation` and the :class:`World` protocol.
- :mod:`envs.crafter_world` — Crafter without per-step rendering (the default backend).
- :mod:`envs.minedojo_world`, :mod:`envs.minedojo_spaces` — the optional MineDojo adapter
  and a stand-in env that reproduces MineDojo's documented spaces.
- :mod:`envs.skills` — :class:`Skills` (what policy code may call) and
  :func:`run_unsandboxed` (trusted policy code in-process: tests, benchmarks).
- :mod:`envs.navigation` — the remembered map and the walks planned over it.
- :mod:`envs.policies` — reference coded policies, as source text and as functions.
- :mod:`envs.stats` — Crafter-format per-episode stats (``stats.jsonl``).
- :mod:`envs.rl_env` — :class:`SubtaskEnv`, the RL interface: a gymnasium env built
  from an ``RLConfig`` (primitives + coded actions as options), and vector-env helpers.
- :mod:`envs.configs` — ready RL configs (collect wood with and without coded actions).
"""

from envs.crafter_world import CrafterWorld
from envs.minedojo_world import MineDojoStandIn, MineDojoWorld
from envs.rl_env import (
    CodeError,
    Layout,
    SetupError,
    SubtaskEnv,
    crafter_layout,
    env_factory,
    make_env,
    make_vec_env,
)
from envs.skills import EpisodeResult, Rules, Skills, crafter_rules, run_unsandboxed
from envs.stats import StatsWriter, episode_stats
from envs.world import Observation, UnknownActionError, World

__all__ = [
    "CodeError",
    "CrafterWorld",
    "EpisodeResult",
    "Layout",
    "MineDojoStandIn",
    "MineDojoWorld",
    "Observation",
    "Rules",
    "SetupError",
    "Skills",
    "StatsWriter",
    "SubtaskEnv",
    "UnknownActionError",
    "World",
    "crafter_layout",
    "crafter_rules",
    "env_factory",
    "episode_stats",
    "make_env",
    "make_vec_env",
    "run_unsandboxed",
]
