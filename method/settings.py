"""The method's settings: the ``[agents]``, ``[task]`` and ``[training]`` sections of a run
config, the values each key accepts, and :class:`MethodSettings`, the whole config of a run
of the method.

The loader is :mod:`runtime.config` (generic over the settings class); this module says
what the method's sections hold and which values make sense (per key in field metadata,
across keys in :func:`check_settings`).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from messages.train import PPOSettings
from method import games, seeds
from runtime import config
from runtime.config import ConfigError, Settings, check, check_fields
from runtime.security import is_loopback

BACKENDS = ("offline", "openai", "local", "replay")
"""The values of ``[agents] backend``."""
OFFLINE_FIRST = ("full", "simplest")
"""The values of ``[agents] offline_first``."""
OFFLINE_ACCEPT = ("not_below", "at_target")
"""The values of ``[agents] offline_accept``."""
OFFLINE_REVISE = ("top", "every")
"""The values of ``[agents] offline_revise``."""
ENV_WORKERS = ("auto", "on", "off")
"""The values of ``[training] env_workers``."""
RATE = check(min=0.0, max=1.0, expected="a rate between 0 and 1")
"""The check of a success rate."""


@dataclass
class AgentSettings:
    backend: str = field(
        default="offline",
        metadata=check(choices=BACKENDS, fix="use offline (no network), openai, local or replay"),
    )
    """Who plays the slow agent, fast agent and critic: ``offline`` (deterministic code
    over the game's recipe data and a skill library; no network), ``openai`` (any
    OpenAI-compatible endpoint) or ``local`` (a GGUF model on this machine: the head
    starts llama-cpp-python's server for the run and talks to it as ``openai``: the
    ``openai`` keys ``timeout_s``, ``max_retries`` and ``token_budget`` apply) or
    ``replay`` (a recorded run's model answers played back: ``replay``)."""
    replay: str = ""
    """replay: the folder of a recorded run (or its ``calls.jsonl``) whose model answers
    this run plays back, each call matched to the recorded call of the same request, else
    of the same sub-action and version (:mod:`method.replay`); relative to the working
    directory. A call the recording has no answer for fails as a model call does."""
    base_url: str = ""
    """openai: the endpoint, e.g. ``https://api.openai.com/v1`` or ``http://localhost:8000/v1``."""
    model: str = ""
    """openai: the model name the endpoint serves. local: a verified model's name
    (``python run.py models list``; fetched beforehand with ``python run.py models fetch
    NAME``) or the path of a ``.gguf`` file."""
    api_key_env: str = "OPENAI_API_KEY"
    """openai: the environment variable holding the API key (never the key itself); may
    be unset when ``base_url`` is a loopback server (localhost, 127.x, ::1)."""
    timeout_s: float = field(
        default=60.0,
        # An hour: past any model's answer; a hung endpoint must not hold the run longer.
        metadata=check(positive=True, max=3600.0, expected="seconds above 0, at most 3600"),
    )
    """openai: seconds one request may take before it is retried (once at most after a
    timeout), plus the prompt's and reply's tokens at ``tokens_per_s``."""
    tokens_per_s: float = field(
        default=0.0,
        metadata=check(min=0.0, max=100_000.0, expected="tokens a second ≥ 0 (0: auto)"),
    )
    """openai: the slowest token rate the server is expected to read and write at: each
    request's timeout grows by (prompt + max_tokens) / this (0: 10 on loopback, where a
    model on a CPU reads 35–80 and writes 12–27 tokens/s; no growth for remote servers)."""
    max_tokens: int = field(default=2048, metadata=check(min=0, max=1_000_000))
    """openai: the most tokens one reply may have (0: not sent; the server's default).
    A reply cut off there is retried once with more room or asked to be shorter."""
    temperature: float = field(
        default=0.2,
        metadata=check(min=-1.0, max=2.0, expected="0 to 2, or -1 to not send it"),
    )
    """openai: sampling temperature (low: replies follow the contract); -1: not sent (a
    model that refuses it is asked again without it anyway)."""
    n_ctx: int = field(
        default=0,
        # 131072: the longest context these models know.
        metadata=check(min=0, max=131072, expected="tokens from 512 to 131072, or 0"),
    )
    """The model's context in tokens (prompt and reply together). openai: a prompt whose
    estimate plus max_tokens does not fit is refused before it is sent, naming the prompt
    (0: unknown — taken from the server's model listing where it says, else left to the
    server). local: the context the server is started with (0: 8192)."""
    json_mode: str = field(
        default="schema",
        metadata=check(choices=("schema", "object", "off"), fix="use schema, object or off"),
    )
    """openai: structured output: ``schema`` (each reply's contract as a JSON Schema,
    falling back to ``json_object`` with the schema, then plain ``json_object``, then none,
    as the server refuses), ``object`` (``json_object`` only), ``off`` (nothing: replies
    are validated either way; constrained decoding can be slower on llama.cpp)."""
    max_concurrent: int = field(default=0, metadata=check(min=0, max=1024))
    """openai: requests in flight at once to the endpoint (0: 1 for a loopback server,
    which answers one at a time; 16 else)."""
    max_retries: int = field(
        default=4,
        # With backoff, 20 retries already span many minutes of a failing endpoint.
        metadata=check(min=0, max=20),
    )
    """openai: retries on 429, 5xx, timeouts and dropped connections (with backoff)."""
    token_budget: int = field(default=0, metadata=check(min=0))
    """openai: stop the run cleanly once this many tokens are spent (0: no limit)."""
    check_endpoint: bool = True
    """openai: check at start that the endpoint answers (a refusal exits with status 2)."""
    offline_first: str = field(default="full", metadata=check(choices=OFFLINE_FIRST))
    """offline: the first version of a step's code — ``full`` (the library's complete
    template, as a capable model would write first) or ``simplest`` (the bare template,
    every fix left to critique-driven revisions: shows the inner loop at work)."""
    offline_accept: str = field(default="not_below", metadata=check(choices=OFFLINE_ACCEPT))
    """offline: when the critic accepts a coded version under its ``[task] sub_target`` —
    ``not_below`` (as soon as its success is not measurably under the target on the
    worlds it reached: 7 of 8 is accepted against 0.9) or ``at_target`` (only at the
    target: under it, a code fault the library knows a fix for is revised while
    revisions remain, and the version is accepted only once none remain). Either way a
    revision replaces the kept version only when measurably better, and a version not
    measurably under target is never moved to RL."""
    offline_revise: str = field(default="top", metadata=check(choices=OFFLINE_REVISE))
    """offline: which failures a code revision answers — ``top`` (the commonest cause
    in the critique) or ``every`` (each cause the critique counts, commonest first, in one
    revision: a version whose worlds died in some and gave up in others gets both
    fixes at once, as a model shown the whole table would write them)."""
    offline_lessons: bool = False
    """offline: a later step's first code starts from the simplest template plus what
    this run's critiques taught the fast agent on the steps written before it (the
    settings their revisions turned on: securing, tunnelling, fighting, retries, …),
    as a model with the run's critiques in its context would write it. Only with
    ``offline_first = "simplest"`` (the full template has them all)."""
    n_threads: int = field(
        default=0,
        metadata=check(min=0, max=1024, expected="threads ≥ 0 (0: every core)"),
    )
    """local: CPU threads the server computes with, reading the prompt and writing the
    reply (0: every core this process may use)."""
    prompt_cache_mib: int = field(
        default=1024,
        # 64 GiB: past any machine this runs on; the states of one 8k context are ~0.1 GB.
        metadata=check(min=0, max=65536, expected="MiB from 0 (off) to 65536"),
    )
    """local: the server's prompt cache in RAM, in MiB (0: off). Each call leaves the state
    of its prompt there (12–115 MB for the 0.5B/1.5B models at 1–4k tokens); a later call
    whose prompt starts the same way — every call of one role and purpose shares its
    system message — gets it back and computes only the rest, even when other roles'
    calls came in between. The oldest states go first when it is full."""
    critic_capacity: int = field(default=16, metadata=check(min=1))
    """Reviews the critic works on at once (each version the fast agent measures asks one)."""
    fast_capacity: int = field(default=16, metadata=check(min=1))
    """Sub-actions the fast agent works on at once; more wait in the broker's queue."""


ALL_ACHIEVEMENTS = "achievements"
"""The [task] target that asks for every achievement of the game."""
LOCAL_N_CTX = 8192
"""``[agents] n_ctx = 0`` with the local backend: the server's context window."""
FINAL_WALL_S = 600.0
"""Wall-clock budget of one final-evaluation episode: a 10,000-step composed chain takes
a few minutes on one core."""


@dataclass
class TaskSettings:
    task: str = "obtain a diamond"
    """The goal in words (prompts and the report show it)."""
    world: str = field(default="crafter", metadata=check(choices=games.WORLDS))
    """The game: ``crafter`` (2-D, the default) or ``minetest`` (3-D, a headless
    ``minetestserver`` per environment actor: ``apt-get install -y minetest-server
    minetest-data lua-socket``). In Minetest a step's code runs over the 3-D skill API
    (:class:`worlds.minetest.skills.VoxelSkills`): the offline backend's from the
    Minetest template library, a model's from prompts that teach that API and the
    game's facts (``llm/prompts/minetest/``); a learned step trains PPO over coded 3-D
    options (:mod:`rl.voxel_options`) on a learner's own servers."""
    target: str = "diamond"
    """What success means: an item to hold (``diamond``) or an achievement name
    (``collect_diamond``, ``place_table``); ``achievements`` plans the curriculum of all
    22 achievements (the final episodes then run to Crafter's full length). In Minetest
    an item of the diamond chain (``diamond``, ``pick_steel``, ``default:cobble``...)."""
    success_target: float = field(default=0.3, metadata=RATE)
    """The run stops early once the final policy reaches this success rate."""
    iterations: int = field(default=3, metadata=check(min=1))
    """Outer-loop iterations at most (the slow agent re-plans between them)."""
    revisions: int = field(default=2, metadata=check(min=0))
    """Inner-loop revisions of one sub-action's code or RL config per iteration."""
    env_steps: int = field(default=5_000_000, metadata=check(min=1000))
    """Budget of env steps of the outer loop (code evaluation, training: each learning
    sub-action gets an equal share of what is left when it starts, and its jobs stop at
    it). The final evaluation always runs after the loop, on top of the budget when the
    loop spent it; ``play_to_budget`` spends what is left."""
    code_episodes: int = field(default=10, metadata=check(min=1, max=seeds.CODE_STRIDE))
    """Episodes each code version (or trained policy) is evaluated on."""
    decide_episodes: int = field(default=16, metadata=check(min=1, max=seeds.CODE_STRIDE))
    """Most worlds a comparison of two versions may grow to. A challenger that did better
    than the kept version on the ``code_episodes`` worlds without the paired bound
    deciding it (on 4 worlds, 4 of 4 against 2 of 4 does not) is played, with the kept
    version, on as many further choosing worlds again, doubling, until the bound decides
    or this many worlds are reached; those steps count in the budget like any other. At
    or below ``code_episodes``: never extended."""
    eval_from_starts: bool = True
    """Evaluate the versions of a sub-action that has stages before it from *starts*: the
    world saved when the composed episode reaches the sub-action, made once per world
    and kept for every version (``RolloutRequest.start_at``), so two versions play the
    very same starts; further choosing worlds are drawn until ``code_episodes`` of them
    reach it (at most 8× as many), so a deep stage is judged on as many worlds as the
    first. Off: every version plays whole composed episodes on the ``code_episodes``
    worlds, and a deep stage is compared on the few that reach it."""
    eval_episodes: int = field(default=20, metadata=check(min=1, max=seeds.FINAL_STRIDE))
    """Episodes the final policy is evaluated on (worlds never used before)."""
    train_steps: int = field(default=20_000, metadata=check(min=1))
    """PPO decisions per training job of a learned sub-action."""
    train_envs: int = field(default=2, metadata=check(min=1))
    """Environments each training job steps together."""
    sub_target: float = field(default=0.9, metadata=RATE)
    """Success rate a sub-action must reach for its version to be accepted."""
    episode_steps: int = field(default=10_000, metadata=check(min=10))
    """Step cap of one final-policy episode (Crafter's own episode length)."""
    learn: list[str] = field(default_factory=list)
    """Sub-actions to learn with RL from the first plan (e.g. ``["collect_wood"]``),
    whatever their code would do; the others start as code. Each must be a step of the
    target's plan (checked)."""
    learn_over_code: bool = False
    """A sub-action that is to be learned with no coded version yet (one in ``learn``, or
    one a model's plan puts on RL from the start) is first written as code once: its
    first version, measured, no revisions. PPO then learns over that code (the stage's
    own option) beside the option menu, and each learned version is measured against it
    on the same worlds, the comparison growing up to ``decide_episodes``. The final
    policy keeps the code unless a learned version is measurably better. Off (the
    default): such a sub-action learns over the menu alone."""
    train_share: float = field(default=1.0, metadata=RATE)
    """About the most of ``env_steps`` PPO training may take in all (its setup and
    held-out checks included): each learning sub-action's share is cut from what is left
    of it (a job stops after the rollout that passes its share and then runs its
    held-out check, so training may go past it by about that much per sub-action).
    1 (the default): training may take all the loop has left. Below 1, with
    ``play_to_budget``, the rest goes to the final policy's play (without it, the rest is
    not spent): for a run scored over every episode (Crafter's scoreboard), whose
    training episodes start mid-game and book only what they unlock there, so training
    that does not pay lowers the score."""
    play_to_budget: bool = False
    """After the final evaluation, go on playing the final policy on fresh worlds until
    ``env_steps`` is spent (every episode lands in the run's episode ledger: Crafter's
    scoreboard protocol counts all episodes within the budget)."""
    wall_s: float = field(
        default=0.0,
        metadata=check(min=0, expected="seconds ≥ 0 (0: no limit)", fix="e.g. wall_s = 1200"),
    )
    """Wall-clock budget in seconds of the outer loop (0: none). When it runs out, work
    under way is cancelled, what finished is kept, and the final policy is evaluated
    (that evaluation comes on top of this budget)."""


@dataclass
class TrainingSettings:
    """How each PPO training job of a learned sub-action runs (its budget, ``train_steps``
    and ``train_envs``, is the task's: ``[task]``)."""

    train_worlds: int = field(default=200, metadata=check(min=0, max=seeds.POOL_STRIDE))
    """Worlds in a job's training pool (0: a fresh world every episode); see
    :attr:`messages.train.TrainRequest.train_worlds`."""
    checkpoint_every: int = field(default=4096, metadata=check(min=1))
    """Decisions between a job's checkpoints: the most a learner's crash can cost."""
    env_workers: str = field(default="auto", metadata=check(choices=ENV_WORKERS))
    """Where a training job's envs step: ``on`` — each in a worker process of the
    learner's, kept for the learner's life (:mod:`rl.env_workers`: a job's envs use
    as many cores as it has envs, and the worlds' starts stay cached for later jobs);
    ``off`` — all in one worker process (one core; either way the version's code never
    runs in the learner itself, so a crash costs the job); ``auto`` (the default) —
    ``on`` when the job has 2 or more envs (``[task] train_envs``), the head's
    machine 2 or more usable cores and at most 2 envs per core
    (:func:`actors.fast.env_workers`), else ``off`` (a job training alone then steps on
    as many cores as it has envs: :data:`actors.fast.AUTO_WORKERS_MIN_ENVS`).
    Either way a job's episodes, counted steps and trained weights are the same."""
    ppo: PPOSettings = field(
        default_factory=PPOSettings,
        metadata=check_fields(
            n_steps=check(min=1),
            batch_size=check(min=2),  # SB3 normalises advantages over the minibatch
            n_epochs=check(min=1),
            learning_rate=check(positive=True),
            gamma=RATE,
            gae_lambda=RATE,
            clip_range=check(positive=True),
            ent_coef=check(min=0.0),
            code_prior=check(min=0.0, max=0.99, expected="a probability from 0 to 0.99"),
            net_arch=check(min=1),
            collect=check(choices=("per_env", "lockstep")),
        ),
    )
    """[training.ppo]: PPO's hyperparameters, keys and defaults as in
    :class:`messages.train.PPOSettings` (n_steps, batch_size, n_epochs, learning_rate,
    gamma, gae_lambda, clip_range, ent_coef, code_prior, net_arch, smdp: true or false,
    collect: "per_env" or "lockstep")."""


@dataclass
class MethodSettings(Settings):
    """A run of the method: the runtime's sections plus the method's own."""

    agents: AgentSettings = field(default_factory=AgentSettings)
    """[agents]: the backend playing the slow agent, fast agent and critic."""
    task: TaskSettings = field(default_factory=TaskSettings)
    """[task]: what the run solves and its budgets."""
    training: TrainingSettings = field(default_factory=TrainingSettings)
    """[training]: how each PPO training job runs."""


def load(name: str, roles: Collection[str] | None = None) -> MethodSettings:
    """A run config by file or bare name, every section checked."""
    settings = config.load(name, MethodSettings, roles)
    check_settings(settings)
    return settings


def load_resolved(path: Path, roles: Collection[str] | None = None) -> MethodSettings:
    """The settings a run recorded in its ``config.json`` (for ``--resume``)."""
    settings = config.load_resolved(path, MethodSettings, roles)
    check_settings(settings)
    return settings


def check_settings(s: MethodSettings) -> None:
    """What the method's field checks cannot say: the seed table's range, the game's
    targets and what the openai backend needs."""
    if s.run.seed not in seeds.RUN_SEEDS:
        raise ConfigError(
            s.source, "run.seed", f"an integer from 0 to {seeds.RUN_SEEDS.stop - 1}",
            repr(s.run.seed), "beyond that the training worlds would run into the evaluation "
            "worlds (see method/seeds.py)",
        )  # fmt: skip
    _check_target(s)
    _check_learn(s)
    if s.agents.offline_lessons and s.agents.offline_first != "simplest":
        raise ConfigError(
            s.source, "agents.offline_lessons", 'offline_first = "simplest" beside it',
            f"offline_first = {s.agents.offline_first!r}", "the full template already holds "
            'every lesson, so this switch would do nothing: add offline_first = "simplest" '
            "or remove offline_lessons",
        )  # fmt: skip
    if s.agents.backend == "openai":
        _check_openai(s)
    if s.agents.backend in ("local", "openai") and 0 < s.agents.n_ctx < 512:
        raise ConfigError(
            s.source, "agents.n_ctx", "tokens from 512 to 131072, or 0 (8192)",
            str(s.agents.n_ctx), "no prompt of ours fits in less than 512: set n_ctx = 8192",
        )  # fmt: skip
    n_ctx = s.agents.n_ctx or (LOCAL_N_CTX if s.agents.backend == "local" else 0)
    if s.agents.backend in ("local", "openai") and 0 < n_ctx <= s.agents.max_tokens:
        # Every call would be refused before it is sent: no room left for the prompt.
        raise ConfigError(
            s.source, "agents.max_tokens", f"fewer tokens than the context (n_ctx {n_ctx})",
            str(s.agents.max_tokens), f"a reply of max_tokens must leave room for the prompt: "
            f"set max_tokens to {n_ctx // 4} or less, or raise n_ctx",
        )  # fmt: skip
    if s.training.ppo.n_steps * s.task.train_envs < 2:
        raise ConfigError(
            s.source, "training.ppo.n_steps", "n_steps × [task] train_envs of 2 or more",
            f"{s.training.ppo.n_steps} × {s.task.train_envs}", "PPO needs at least two "
            "steps per rollout: raise n_steps (the default is 256)",
        )  # fmt: skip
    if s.agents.backend == "replay" and not s.agents.replay:
        raise ConfigError(
            s.source, "agents.replay", "a recorded run's folder or its calls.jsonl", "none",
            'e.g. replay = "runs/diamond-local-20261206-101500-ab12" beside backend = "replay"',
        )  # fmt: skip
    if s.agents.backend == "local" and not s.agents.model:
        raise ConfigError(
            s.source, "agents.model", "a verified model's name or a .gguf path", "none",
            'e.g. model = "qwen2.5-coder-0.5b" (python run.py models list shows the names)',
        )  # fmt: skip


def check_runnable(s: MethodSettings) -> None:
    """What a run of the method needs beyond valid keys (checked by ``run.py`` only)."""
    if s.run.driver != "rlgpt":
        return
    env = s.actors.get("environment")
    if env is None or env.count == 0:  # "auto" starts at least one
        raise ConfigError(
            s.source,
            "actors.environment",
            "at least one environment actor for the rlgpt driver",
            "none",
            'add [actors.environment] with count = "auto" (and [actors.learner] for RL)',
        )
    if s.agents.backend == "replay":
        from method.replay import RecordingError, ReplayBackend

        try:
            ReplayBackend(s.agents.replay)
        except RecordingError as exc:
            raise ConfigError(
                s.source, "agents.replay", "a recorded run's folder or its calls.jsonl",
                repr(s.agents.replay), str(exc),
            ) from None  # fmt: skip


def _check_target(s: MethodSettings) -> None:
    target = s.task.target
    if s.task.world == "minetest":
        from worlds.minetest.world import minetest_missing

        chain = games.targets("minetest")
        if games.minetest_item(target) not in chain:
            raise ConfigError(
                s.source, "task.target", "an item of Minetest's diamond chain", repr(target),
                "one of " + ", ".join(item.removeprefix("default:") for item in chain),
            )  # fmt: skip
        problem = minetest_missing()
        if problem:
            raise ConfigError(
                s.source, "task.world", "a world this machine can run", '"minetest"', problem
            )
        # The Minetest template library has one version of each step: the Crafter
        # library's switches would do nothing there, without a word.
        for key, default in (("offline_first", "full"), ("offline_revise", "top")):
            if getattr(s.agents, key) != default:
                raise ConfigError(
                    s.source, f"agents.{key}", f"{default!r} (the default) in Minetest",
                    repr(getattr(s.agents, key)), f"remove {key}: the Minetest template "
                    "library has one version of each step, so this would do nothing",
                )  # fmt: skip
        return
    if target != ALL_ACHIEVEMENTS and target not in games.targets("crafter"):
        raise ConfigError(
            s.source,
            "task.target",
            "an item or achievement of the game",
            repr(target),
            f"e.g. diamond, wood_pickaxe, place_table (see crafter's data.yaml) or "
            f"{ALL_ACHIEVEMENTS!r} for the curriculum of all 22",
        )


def _check_learn(s: MethodSettings) -> None:
    """Every ``[task] learn`` entry names a step of the target's plan. The plan's steps are
    :mod:`knowledge.recipes`'s chain for the target (the curriculum for ``achievements``):
    they are the steps the slow agent is given, whichever backend plans, and ``learn`` is
    matched against their names; any other name would be ignored without a word. (The
    chain, not all 22 achievements: ``collect_sapling`` is no step of a diamond's plan.)"""
    if not s.task.learn:
        return

    target = s.task.target
    names = [step.name for step in games.plan_steps(s.task.world, target)]
    for i, name in enumerate(s.task.learn):
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ConfigError(
                s.source, f"task.learn[{i}]", f"a step of the plan for {target!r}", repr(name),
                f"{hint}the plan's steps: {', '.join(names)}",
            )  # fmt: skip


def _check_openai(s: MethodSettings) -> None:
    f, a = s.source, s.agents
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

    if is_loopback(a.base_url):
        return  # a local server needs no key (one is sent if the variable is set)
    if not a.api_key_env or not os.environ.get(a.api_key_env):
        raise ConfigError(
            f,
            "agents.api_key_env",
            "the name of a set environment variable holding the API key",
            f"{a.api_key_env!r} (not set)" if a.api_key_env else "none",
            f"export {a.api_key_env or 'OPENAI_API_KEY'}=... before running, or name another "
            "variable (a loopback server needs none)",
        )
