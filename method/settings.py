"""The method's settings: the ``[agents]`` and ``[task]`` sections of a run config, their
checks, and :class:`MethodSettings`, the whole config of a run of the method.

The loader is :mod:`runtime.config` (generic over the settings class); this module says
what the method's sections hold and which values make sense.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from method import seeds
from runtime import config
from runtime.config import ConfigError, Settings

BACKENDS = ("offline", "openai")


@dataclass
class AgentSettings:
    backend: str = "offline"
    """Who plays the slow agent, fast agent and critic: ``offline`` (deterministic code
    over the game's recipe data and a skill library; no network) or ``openai`` (any
    OpenAI-compatible endpoint)."""
    base_url: str = ""
    """openai: the endpoint, e.g. ``https://api.openai.com/v1`` or ``http://localhost:8000/v1``."""
    model: str = ""
    """openai: the model name the endpoint serves."""
    api_key_env: str = "OPENAI_API_KEY"
    """openai: the environment variable holding the API key (never the key itself)."""
    timeout_s: float = 60.0
    """openai: seconds one request may take before it is retried."""
    max_retries: int = 4
    """openai: retries on 429, 5xx, timeouts and dropped connections (with backoff)."""
    token_budget: int = 0
    """openai: stop the run cleanly once this many tokens are spent (0: no limit)."""
    check_endpoint: bool = True
    """openai: check at start that the endpoint answers (a refusal exits with status 2)."""
    offline_first: str = "full"
    """offline: the first version of a step's code — ``full`` (the library's complete
    template, as a capable model would write first) or ``simplest`` (the bare template,
    every fix left to critique-driven revisions: shows the inner loop at work)."""


OFFLINE_FIRST = ("full", "simplest")
ALL_ACHIEVEMENTS = "achievements"
"""The [task] target that asks for every achievement of the game."""
FINAL_WALL_S = 600.0
"""Wall-clock budget of one final-evaluation episode: a 10,000-step composed chain takes
a few minutes on one core."""


@dataclass
class TaskSettings:
    task: str = "obtain a diamond"
    """The goal in words (prompts and the report show it)."""
    target: str = "diamond"
    """What success means: an item to hold (``diamond``) or an achievement name
    (``collect_diamond``, ``place_table``); ``achievements`` plans the curriculum of all
    22 achievements (the final episodes then run to Crafter's full length)."""
    success_target: float = 0.3
    """The run stops early once the final policy reaches this success rate."""
    iterations: int = 3
    """Outer-loop iterations at most (the slow agent re-plans between them)."""
    revisions: int = 2
    """Inner-loop revisions of one sub-action's code or RL config per iteration."""
    env_steps: int = 5_000_000
    """Budget of env steps for everything the run steps (training, evaluation)."""
    code_episodes: int = 10
    """Episodes each code version (or trained policy) is evaluated on."""
    eval_episodes: int = 20
    """Episodes the final policy is evaluated on (worlds never used before)."""
    train_steps: int = 20_000
    """PPO decisions per training job of a learned sub-action."""
    train_envs: int = 2
    """Environments each training job steps together."""
    sub_target: float = 0.9
    """Success rate a sub-action must reach for its version to be accepted."""
    episode_steps: int = 10_000
    """Step cap of one final-policy episode (Crafter's own episode length)."""
    learn: list[str] = field(default_factory=list)
    """Sub-actions to learn with RL from the first plan (e.g. ``["collect_wood"]``),
    whatever their code would do; the others start as code."""
    play_to_budget: bool = False
    """After the final evaluation, go on playing the final policy on fresh worlds until
    ``env_steps`` is spent (every episode lands in the run's episode ledger: Crafter's
    scoreboard protocol counts all episodes within the budget)."""
    wall_s: float = 0.0
    """Wall-clock budget in seconds of the outer loop (0: none). When it runs out, work
    under way is cancelled, what finished is kept, and the final policy is evaluated
    (that evaluation comes on top of this budget)."""


@dataclass
class MethodSettings(Settings):
    """A run of the method: the runtime's sections plus the method's own."""

    agents: AgentSettings = field(default_factory=AgentSettings)
    """[agents]: the backend playing the slow agent, fast agent and critic."""
    task: TaskSettings = field(default_factory=TaskSettings)
    """[task]: what the run solves and its budgets."""


def load(name: str, roles: Collection[str] | None = None) -> MethodSettings:
    """A run config by file or bare name, every section checked."""
    settings = config.load(name, MethodSettings, roles)
    check(settings)
    return settings


def load_resolved(path: Path, roles: Collection[str] | None = None) -> MethodSettings:
    """The settings a run recorded in its ``config.json`` (for ``--resume``)."""
    settings = config.load_resolved(path, MethodSettings, roles)
    check(settings)
    return settings


def check(s: MethodSettings) -> None:
    """The method's cross-field checks."""
    if s.run.seed not in seeds.RUN_SEEDS:
        raise ConfigError(
            s.source, "run.seed", f"an integer from 0 to {seeds.RUN_SEEDS.stop - 1}",
            repr(s.run.seed), "beyond that the training worlds would run into the evaluation "
            "worlds (see method/seeds.py)",
        )  # fmt: skip
    _check_agents(s)
    _check_task(s)


def check_runnable(s: MethodSettings) -> None:
    """What a run of the method needs beyond valid keys (checked by ``run.py`` only)."""
    if s.run.driver != "rlgpt":
        return
    env = s.actors.get("environment")
    if env is None or env.count < 1:
        raise ConfigError(
            s.source,
            "actors.environment",
            "at least one environment actor for the rlgpt driver",
            "none",
            "add [actors.environment] with count = 2 (and [actors.learner] count = 1 for RL)",
        )


def _check_agents(s: MethodSettings) -> None:
    f, a = s.source, s.agents
    if a.backend not in BACKENDS:
        close = difflib.get_close_matches(a.backend, BACKENDS, n=1)
        hint = f"did you mean '{close[0]}'?" if close else "use offline (no network) or openai"
        raise ConfigError(f, "agents.backend", "offline or openai", repr(a.backend), hint)
    if a.offline_first not in OFFLINE_FIRST:
        raise ConfigError(
            f,
            "agents.offline_first",
            " or ".join(OFFLINE_FIRST),
            repr(a.offline_first),
            'the default is "full"',
        )
    if a.backend != "openai":
        return
    for key, example in (("base_url", "http://localhost:8000/v1"), ("model", "gpt-4o-mini")):
        if not getattr(a, key):
            raise ConfigError(
                f,
                f"agents.{key}",
                "a value for the openai backend",
                "none",
                f'set {key} = "{example}" under [agents] (or backend = "offline")',
            )
    if not a.base_url.startswith(("http://", "https://")):
        raise ConfigError(
            f,
            "agents.base_url",
            "an http(s) URL",
            repr(a.base_url),
            "e.g. http://localhost:8000/v1",
        )
    if not a.api_key_env or not os.environ.get(a.api_key_env):
        raise ConfigError(
            f,
            "agents.api_key_env",
            "the name of a set environment variable holding the API key",
            f"{a.api_key_env!r} (not set)" if a.api_key_env else "none",
            f"export {a.api_key_env or 'OPENAI_API_KEY'}=... before running, or name another "
            "variable (a local server that ignores keys still needs one: any value)",
        )
    for key in ("timeout_s",):
        if getattr(a, key) <= 0:
            raise ConfigError(f, f"agents.{key}", "a positive number", repr(getattr(a, key)))
    for key in ("max_retries", "token_budget"):
        if getattr(a, key) < 0:
            raise ConfigError(f, f"agents.{key}", "an integer ≥ 0", repr(getattr(a, key)))


def _check_task(s: MethodSettings) -> None:
    f, t = s.source, s.task
    from crafter import constants

    if t.target != ALL_ACHIEVEMENTS and t.target not in (*constants.items, *constants.achievements):
        raise ConfigError(
            f,
            "task.target",
            "an item or achievement of the game",
            repr(t.target),
            f"e.g. diamond, wood_pickaxe, place_table (see crafter's data.yaml) or "
            f"{ALL_ACHIEVEMENTS!r} for the curriculum of all 22",
        )
    for key in ("success_target", "sub_target"):
        value = getattr(t, key)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f, f"task.{key}", "a rate between 0 and 1", repr(value))
    for key in ("iterations", "code_episodes", "eval_episodes", "train_steps", "train_envs"):
        if getattr(t, key) < 1:
            raise ConfigError(f, f"task.{key}", "an integer ≥ 1", repr(getattr(t, key)))
    for key in ("revisions",):
        if getattr(t, key) < 0:
            raise ConfigError(f, f"task.{key}", "an integer ≥ 0", repr(getattr(t, key)))
    if t.wall_s < 0:
        raise ConfigError(
            f, "task.wall_s", "seconds ≥ 0 (0: no limit)", repr(t.wall_s), "e.g. wall_s = 1200"
        )
    if t.env_steps < 1000 or t.episode_steps < 10:
        raise ConfigError(
            f,
            "task.env_steps",
            "≥ 1000 (and episode_steps ≥ 10)",
            f"{t.env_steps}/{t.episode_steps}",
        )
