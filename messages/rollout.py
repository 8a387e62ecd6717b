"""Rollout family: evaluate a policy in the world and report what happened."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from messages.base import message
from messages.task import Need, RLConfig, Stage, Subtask


@message("rollout.request")
class RolloutRequest:
    """fast agent/head → environment: run a policy on a subtask for some episodes."""

    subtask: Subtask
    """What success means; its ``max_steps`` caps each episode."""
    code: str = ""
    """Policy source defining ``run(skills)`` (code-as-policy); runs in the sandbox."""
    policy_path: str = ""
    """Or: a trained policy artifact (SB3 zip) to run instead of code: its path in the
    head's run directory, used as it is only by an actor whose run directory that is."""
    policy_sha256: str = ""
    """The artifact's hash, which names it: an actor that lacks the file (or is given no
    path) fetches it by this from the head's store; a mismatch fails the rollout."""
    config: RLConfig | None = None
    """With ``policy_path``: the RL config the policy was trained with (its observation
    and action space); its subtask is replaced by this request's."""
    seeds: list[int] = field(default_factory=lambda: [0])
    """One episode per seed; a seed gives the same world every time."""
    wall_s: float = 60.0
    """Wall-clock budget per episode, the policy's own code and the world's steps together."""
    frames: bool = False
    """Also return the first episode's frames (for a video); rendering is slow."""
    world: str = "crafter"
    """World backend: ``crafter`` or ``minetest`` (``[task] world``); a learned policy
    runs in ``crafter`` only."""
    stages: list[Stage] = field(default_factory=list)
    """Or a composed policy: the task planner runs these stages in order (a stage whose
    test already held in this episode is skipped), each until its own test holds or its
    ``max_steps``; ``subtask`` is then the whole episode's test and cap. Leave ``code``
    and ``policy_path`` empty."""
    needs: list[Need] = field(default_factory=list)
    """With ``stages``: survival needs the task planner serves first when they trigger."""
    skip_failed: bool = False
    """With ``stages``: a stage that gives up is dropped for the episode and the next one
    runs (a curriculum of achievements), instead of ending the episode."""
    start_at: int = 0
    """With ``stages`` (not with ``skip_failed``): the first ``start_at`` stages are the
    setup, and each episode is reported from the moment stage ``start_at`` begins — the
    first time the planner finds every stage before it done (:mod:`episodes.composite`).
    That start is made once per world and setup in the runner's process, by playing the
    composed episode up to it (its steps reported once, as ``setup_steps``), and
    restored for every later episode of the same world and setup, so two versions of the
    stage play the very same starts. A world whose setup ends first (death, a stage that
    gave up, the cap) is ``setup_failed`` with no stage run: not reached. 0: from reset."""


@message("rollout.stage_run")
class StageRun:
    """One run of a stage (or a need) inside a composed-policy episode."""

    name: str
    """The stage's subtask name (a need's stage is named after what it restores)."""
    success: bool
    """Whether its test held when it ended."""
    steps: int
    """Primitive steps it took."""
    cause: str
    """Why it ended, an :data:`~messages.causes.EpisodeCause` (as EpisodeReport.cause,
    plus ``interrupted`` by a need)."""
    detail: str = ""
    """The failure's detail."""
    line: int = 0
    """Code line of the failure (0: none)."""
    learned: bool = False
    """Whether a learned (RL) sub-policy ran it."""


@message("rollout.glimpse")
class Glimpse:
    """What the player knew at one moment: enough for a critic, far smaller than a frame."""

    step: int
    """Primitive steps taken so far in the episode."""
    inventory: dict[str, int]
    """Non-zero inventory items."""
    status: dict[str, float]
    """Health, food, drink, energy."""
    near: list[str]
    """Tile and creature kinds in the local view, nearest first."""
    facing: str
    """What the player faces."""


@message("rollout.segment")
class Segment:
    """One high-level action of an episode: what it was and what the player saw around it."""

    action: str
    """Skill call or option name, e.g. ``collect('tree', 1)``."""
    steps: int
    """Primitive steps it took."""
    before: Glimpse
    """The player's view when it started."""
    after: Glimpse
    """The player's view when it ended."""


@message("rollout.episode")
class EpisodeReport:
    """environment → asker: one episode's outcome."""

    seed: int
    """World seed."""
    success: bool
    """Whether the subtask's success test held at the end."""
    steps: int
    """Primitive steps taken."""
    reward: float
    """Sum of the world's own rewards."""
    achievements: list[str]
    """Achievements unlocked, in order."""
    cause: str
    """Why it ended, an :data:`~messages.causes.EpisodeCause`: success, policy_finished,
    step_budget, episode_done (death), setup_failed, policy_unusable, rollout_failed, or a sandbox
    failure cause (syntax, forbidden, exception, timeout, memory, recursion,
    invalid_action, output_limit)."""
    detail: str = ""
    """The failure's detail (a trimmed traceback, the forbidden name, ...)."""
    line: int = 0
    """Line of the policy code the failure points at (0: none)."""
    trace: list[Segment] = field(default_factory=list)
    """High-level actions with what the player saw before and after each."""
    wall_s: float = 0.0
    """Seconds the episode took."""
    stages: list[StageRun] = field(default_factory=list)
    """With a composed policy: every stage run, in order (from a start: those after it)."""
    setup_steps: int = 0
    """From a start (:attr:`RolloutRequest.start_at`): world steps this episode took to
    make it — the composed episode up to the stage — 0 when the start was restored (made
    and counted before). ``steps``, ``reward`` and ``achievements`` are the episode's
    from the start on; the world episode is setup and episode together."""
    setup_reward: float = 0.0
    """The world's reward during ``setup_steps``."""
    setup_achievements: list[str] = field(default_factory=list)
    """Achievements unlocked during ``setup_steps``, in order."""
    restored: bool = False
    """From a start: it was restored, not made (the episode that made it reported the
    setup). One that took no step — its world's setup known to fail, or the test held
    at the start — played nothing: it has no stats row and no ledger line
    (:func:`method.ledger.rollout_lines`), as a training reset that takes no step."""

    @property
    def played(self) -> bool:
        """Whether the episode is a world episode to book: anything but a restored start
        that took no step."""
        return not self.restored or self.steps > 0

    def reached(self, stage: str) -> bool:
        """Whether sub-action ``stage`` got its turn (or the episode succeeded)."""
        return self.success or any(r.name == stage for r in self.stages)


@message("rollout.result")
class RolloutResult:
    """environment → asker: every episode of a rollout request."""

    subtask: str
    """The subtask's name."""
    episodes: list[EpisodeReport]
    """One per seed, in order."""
    success_rate: float
    """Fraction of episodes that succeeded."""
    steps: int
    """Primitive steps taken in all, making starts included (``setup_steps``): counts
    toward the run's step budget."""
    actor_id: str
    """Which environment actor ran it."""
    output: str = ""
    """What the policy printed (bounded)."""
    frames: bytes = b""
    """First episode's RGB frames as an .npz (uint8, T×H×W×3), when asked for."""

    @classmethod
    def of_episodes(
        cls, subtask: str, episodes: list[EpisodeReport], *, actor_id: str, **extra: Any
    ) -> RolloutResult:
        """The result of ``episodes``: success rate and step total derived from them."""
        wins = sum(e.success for e in episodes)
        return cls(
            subtask=subtask,
            episodes=episodes,
            success_rate=wins / len(episodes) if episodes else 0.0,
            steps=sum(e.steps + e.setup_steps for e in episodes),
            actor_id=actor_id,
            **extra,
        )

    def stage_rate(self, name: str) -> tuple[float, int]:
        """Success of sub-action ``name`` among the episodes that reached it (its stage
        ran, or the episode succeeded), and how many did: a stage before it failing is
        not its failure."""
        got = [e for e in self.episodes if e.reached(name)]
        if not got:
            return 0.0, 0
        return sum(e.success for e in got) / len(got), len(got)
