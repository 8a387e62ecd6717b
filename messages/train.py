"""Train family: PPO jobs on subtasks, their progress and their results."""

from __future__ import annotations

from dataclasses import field

from messages.base import message
from messages.task import RLConfig


@message("train.world_episode")
class WorldEpisode:
    """One episode of a world, from its reset to the next, as Crafter's stats count it."""

    length: int
    """World steps (setup included)."""
    reward: float
    """The world's own reward, summed."""
    counts: dict[str, int] = field(default_factory=dict)
    """Achievement → times it happened in the episode."""


@message("train.ppo")
class PPOSettings:
    """PPO hyperparameters (names as in stable-baselines3 and the PPO paper). A run sets
    them in its config's ``[training.ppo]``, whose defaults these are."""

    n_steps: int = 256
    """Env steps per env between updates (rollout length)."""
    batch_size: int = 64
    """Minibatch size for each gradient step."""
    n_epochs: int = 4
    """Passes over each rollout."""
    learning_rate: float = 3e-4
    """Adam step size."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE λ: bias/variance trade-off of advantage estimates."""
    clip_range: float = 0.2
    """PPO's clip coefficient ε."""
    ent_coef: float = 0.01
    """Entropy bonus: keeps exploring in a sparse-reward world."""
    net_arch: list[int] = field(default_factory=lambda: [128, 128])
    """Hidden layer sizes of the policy and value networks."""
    smdp: bool = False
    """Discount what follows a decision by γ^k, k the world steps it took (a coded option
    runs several), in returns and GAE (:mod:`rl.smdp`); false (the default): γ per
    decision, as plain PPO. Off by default because it did not measure better: on
    collect_iron at 8,192 decisions plain PPO did as well or better on 3 seeds of 3
    (``benchmarks/bench_options.py``, BENCHMARKS.md)."""
    code_prior: float = 0.0
    """Warm start: the probability the untrained policy gives the stage's own code (the
    option ``stage_code``, :data:`knowledge.options.STAGE_CODE`) when the config offers
    it, the rest shared evenly by the other actions; 0 (the default): SB3's near-uniform
    start. Training begins where the code is, and PPO learns where to leave it (a prior
    on the output layer's bias, not behaviour cloning: no steps are spent on it)."""
    collect: str = "per_env"
    """How a rollout is collected: ``per_env`` (the default) — each env goes on to its
    next decision as soon as its last one is back, its actions sampled from a generator
    of its own (:mod:`rl.per_env`: envs in worker processes no longer wait for one
    another's long options); ``lockstep`` — SB3's own, every env one decision at a
    time. Either way a job trains to the same weights in worker processes and in one
    process."""


@message("train.request")
class TrainRequest:
    """fast agent/head → learner: train PPO on one subtask's RL config."""

    name: str
    """Job name, unique in the run; names the checkpoint folder, so a re-delivered job
    resumes from its last checkpoint."""
    config: RLConfig
    """The subtask's RL interface: observation, actions (with coded options), reward."""
    total_steps: int
    """Training budget in agent decisions (SB3 timesteps, all envs together)."""
    n_envs: int = 2
    """Environments stepped together (vectorized)."""
    subproc: bool = False
    """Step the envs in the learner's env worker processes, one env each
    (:mod:`rl.env_workers`; ``[training] env_workers``), not all in its own process."""
    seed: int = 0
    """Seed for the policy's initialisation (and the training worlds unless
    ``pool_seed`` names them)."""
    pool_seed: int = -1
    """The run seed whose training worlds the job resets into
    (:func:`method.seeds.training_pool`); -1: ``seed``. The versions of one sub-action
    share their run's pool, so a learner that holds the starts an earlier version made
    restores them instead of running setup again (:mod:`rl.start_states`)."""
    device: str = ""
    """cpu, cuda or cuda:N; empty: the learner's own device."""
    ppo: PPOSettings = field(default_factory=PPOSettings)
    """PPO hyperparameters."""
    train_worlds: int = 200
    """Size of the pool of worlds training episodes are drawn from (0: a fresh world every
    episode). Worlds are kept once generated, so a pool saves ~0.1 s per episode; the
    held-out evaluation always uses worlds outside it."""
    eval_episodes: int = 10
    """Episodes of the held-out evaluation after training."""
    max_world_steps: int = 0
    """Stop training once the job's envs took this many world steps (training and
    setup, this attempt), checked after each PPO rollout: the run's env-step budget
    reaches into the job (0: none; ``total_steps`` decisions stay the other limit)."""
    eval_seed: int = 1_000_000
    """First held-out world seed (training worlds are drawn far below it)."""
    checkpoint_every: int = 4096
    """Save a checkpoint every this many decisions: the most a crash can cost."""
    progress_every_s: float = 2.0
    """Seconds between progress messages."""


@message("train.progress")
class TrainProgress:
    """learner → requester: how a training job is going (sent every few seconds)."""

    name: str
    """Job name."""
    steps: int
    """Agent decisions so far (including those before a resume)."""
    primitive_steps: int
    """World steps so far (a coded option takes several per decision)."""
    steps_per_s: float
    """Decisions per second since the last progress message."""
    episodes: int
    """Episodes finished so far in this attempt."""
    success_rate: float
    """Success rate of the last ≤100 finished episodes."""
    mean_reward: float
    """Mean return of the last ≤100 finished episodes."""
    losses: dict[str, float] = field(default_factory=dict)
    """Latest PPO losses (policy_gradient_loss, value_loss, entropy_loss, ...)."""


@message("train.result")
class TrainResult:
    """learner → requester: the trained policy and how well it does on unseen worlds."""

    name: str
    """Job name."""
    policy_path: str
    """Where the SB3 zip is (on the learner's machine when it is remote)."""
    sha256: str
    """Hash of the SB3 zip."""
    steps: int
    """Agent decisions trained in all."""
    primitive_steps: int
    """World steps taken by this attempt's training."""
    eval_success_rate: float
    """Success rate on held-out seeds."""
    eval_episodes: int
    """Held-out episodes evaluated."""
    eval_primitive_steps: int
    """World steps the evaluation took."""
    resumed_from: int
    """Decisions already done by the checkpoint this attempt resumed from (0: fresh)."""
    steps_lost: int
    """Decisions a crash cost: trained by an earlier attempt but after its last checkpoint."""
    tensorboard_dir: str
    """TensorBoard logs (on the learner's machine)."""
    wall_s: float
    """Seconds this attempt took."""
    train_s: float
    """Seconds of those spent in PPO's learning loop (no env building, no evaluation)."""
    device: str
    """Device it trained on."""
    actor_id: str
    """Which learner."""
    policy_bytes: bytes = b""
    """The SB3 zip itself, when the learner is remote (no shared run directory)."""
    episodes: int = 0
    """Training episodes this attempt finished."""
    achievement_episodes: dict[str, int] = field(default_factory=dict)
    """Achievement → training episodes (of ``episodes``) that unlocked it."""
    setup_steps: int = 0
    """World steps of setup code, counted when a world's start is made (once per world
    per learner process: later resets restore it, :mod:`rl.start_states`), failed
    attempts included (training and held-out evaluation alike); ``primitive_steps``
    and ``eval_primitive_steps`` are the other world steps, so the three add up to every
    step the job's worlds took."""
    world_episodes: list[WorldEpisode] = field(default_factory=list)
    """Every world episode the job played (training, then held-out evaluation), setup
    included: what the run's ``stats.jsonl`` holds for the job."""
    failure: str = ""
    """Why training stopped short ('' when it did not): the config's setup code kept
    failing at a reset. There is then no policy (``policy_path`` empty), but the steps
    the job took are reported all the same, so that they are counted."""
