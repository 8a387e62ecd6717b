"""Plan family: the slow agent's plan and what the agents tell each other about
sub-actions (stages and needs live in :mod:`messages.task`)."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from messages.base import message
from messages.rollout import Glimpse, RolloutResult
from messages.task import Need, Stage, Subtask
from messages.train import TrainResult

Mode = Literal["code", "rl"]
"""How a sub-action is solved: written as code, or learned with RL."""
Verdict = Literal["accept", "revise", "switch"]
"""The critic's judgement of a version: accept it, revise it, or switch it to RL."""


@message("plan.subaction")
class SubAction:
    """slow agent → fast agent: one sub-action of the plan, coded or learned."""

    name: str
    """Identifier, e.g. ``collect_stone``; also the stage's subtask name."""
    subtask: Subtask
    """Success test and step cap."""
    mode: Mode = "code"
    """Written as code, or learned with RL (with coded high-level actions)."""
    depends: list[str] = field(default_factory=list)
    """Sub-actions whose stages run before this one (in plan order)."""
    target: float = 0.9
    """Success rate the sub-action must reach in evaluation to be accepted."""
    options: list[str] = field(default_factory=list)
    """For RL: coded high-level actions to offer (skill names from the library)."""
    reason: str = ""
    """Why the slow agent chose this mode (shown in events and the report)."""
    need: str = ""
    """For a survival need: the vital it restores (drink, food, energy, health); the task
    planner runs it whenever that vital drops below ``below``. Empty: a step of the task."""
    below: float = 0.0
    """For a need: the threshold that triggers it."""
    until: float = 0.0
    """For a need: the level at which it stops (0: when its own test holds)."""
    description: str = ""
    """What it is for, in words."""


@message("plan.plan")
class Plan:
    """slow agent → everyone: the task decomposed into ordered sub-actions."""

    task: str
    """The task in words."""
    version: int
    """1 for the first plan, +1 for every revision."""
    subactions: list[SubAction]
    """In the order the task planner runs them."""
    needs: list[str] = field(default_factory=list)
    """Survival needs the task planner watches (drink, food, energy, health)."""
    reason: str = ""
    """What the revision changed and why."""


@message("plan.work")
class WorkOn:
    """slow agent → fast agent: make one sub-action work (the inner loop)."""

    subaction: SubAction
    """What to write, run and revise."""
    before: list[Stage] = field(default_factory=list)
    """Accepted stages of the sub-actions it depends on, in order (run first)."""
    needs: list[Need] = field(default_factory=list)
    """Survival needs the task planner applies in its evaluation episodes."""
    iteration: int = 1
    """Outer-loop iteration."""
    seeds: list[int] = field(default_factory=list)
    """Evaluation worlds."""
    revisions: int = 2
    """Inner-loop revisions allowed after the first version."""
    train_steps: int = 20_000
    """For RL: PPO decisions per training job."""
    env_steps_cap: int = 0
    """For RL: world steps this sub-action's training jobs may take in all, setup
    included (its share of what is left of the run's ``[task] env_steps`` when it
    starts); 0: no cap."""
    hint: str = ""
    """The slow agent's note from the critic's summary (why it is redone)."""
    setup: list[Stage] = field(default_factory=list)
    """Coded versions of the stages in ``before`` (the best of each): what a learned
    sub-action's training setup runs, since a learned stage cannot run inside setup
    code. Empty: ``before``'s coded stages."""
    incumbent: Stage | None = None
    """The version of this sub-action the run stands on, of either mode (the code, when
    the sub-action moves to RL; the code an earlier loop kept, when its code is redone),
    None for its first loop: the inner loop plays it on its own worlds and grows that
    paired comparison while its versions lead it undecided
    (:meth:`actors.fast.FastAgent._settle`), so that a new version replaces it only when
    measurably better, on enough worlds to tell."""


@message("plan.review")
class Review:
    """fast agent → critic: judge one version of a sub-action from its measured results."""

    subaction: SubAction
    """What was measured, with its target."""
    version: int
    """Version number of the code or RL config."""
    mode: Mode
    """Coded or learned."""
    result: RolloutResult
    """Its evaluation episodes (composed with the stages before it)."""
    revisions_left: int
    """Inner-loop revisions still allowed after this one."""
    code: str = ""
    """The code reviewed (coded versions), so a failure line can be quoted."""
    train: TrainResult | None = None
    """For a learned version: the training job's result."""
    grown: list[int] = field(default_factory=list)
    """Its outcomes (1 success, 0 failure) on the further worlds its paired comparison grew
    into after ``result`` (:meth:`actors.fast.FastAgent._settle`), one per world that
    reached the sub-action: the critic's success rate is over these and ``result``'s."""


@message("plan.critique")
class Critique:
    """critic → fast agent (reply) and slow agent (streamed): how a version did and why."""

    subaction: str
    """Sub-action name."""
    version: int
    """Code or config version reviewed."""
    mode: Mode
    """What was reviewed: coded or learned."""
    success_rate: float
    """Measured success."""
    target: float
    """The sub-action's target."""
    episodes: int
    """Episodes measured."""
    verdict: Verdict
    """accept: target met; revise: fix the stated cause; switch: move to RL."""
    cause: str = ""
    """The commonest failure cause (step_budget, episode_done, exception, ...)."""
    count: int = 0
    """Episodes that failed with that cause."""
    causes: dict[str, int] = field(default_factory=dict)
    """Every failure cause with the episodes that ended with it, commonest first."""
    detail: str = ""
    """A failure's detail (traceback line, forbidden name, what it was doing)."""
    line: int = 0
    """Code line the failure points at (0: none)."""
    action: str = ""
    """The high-level action the failing episodes were in when they ended."""
    before: Glimpse | None = None
    """What the player saw when that action started (one failing episode)."""
    after: Glimpse | None = None
    """...and when the episode ended."""
    advice: str = ""
    """What to change, in words."""


@message("plan.outcome")
class SubActionOutcome:
    """fast agent → slow agent: where a sub-action stands after its inner loop."""

    name: str
    """Sub-action name."""
    mode: Mode
    """Coded or learned, as finally used."""
    success_rate: float
    """Best measured success, among the evaluation episodes that reached the sub-action
    (from starts, ``[task] eval_from_starts``: the episodes from its starts)."""
    accepted: bool
    """Whether it met its target."""
    stage: Stage
    """The best version, ready to compose."""
    versions: int
    """Versions written (code and configs)."""
    code_steps: int = 0
    """Env steps spent evaluating versions (making their starts included)."""
    train_steps: int = 0
    """Env steps spent training (world steps, evaluation included)."""
    critiques: list[Critique] = field(default_factory=list)
    """Every critique, in order."""
    coded_rate: float = -1.0
    """Best coded success (−1: never coded), to compare with a learned version."""
    learned_rate: float = -1.0
    """Best learned success (−1: never learned)."""
    task_rate: float = 0.0
    """Success of the whole composed episode (every stage up to this one) on the
    ``code_episodes`` choosing worlds: from starts too, an episode from a start ends as
    the composed episode that made it does."""
    exhausted: bool = False
    """The inner loop stopped because no revision answers the last critique (the
    backend returned the version unchanged): more rounds of this mode would not help."""
    seed_outcomes: list[int] = field(default_factory=list)
    """The chosen version's outcome on each evaluation world, in the order of
    ``WorkOn.seeds`` (from starts, ``[task] eval_from_starts``, followed by the further
    choosing worlds drawn until enough reached the sub-action; then the worlds its
    comparisons grew into, :meth:`actors.fast.FastAgent._settle`): 1 success, 0 failure, −1
    the episode never reached the sub-action (:mod:`method.compare`); what versions are
    compared on, world for world."""
    seeds: list[int] = field(default_factory=list)
    """The world seed of each entry of :attr:`seed_outcomes` (empty in outcomes written
    before it was recorded): versions from different inner loops are compared on the
    worlds both were evaluated on, matched by seed."""
    reached: int = -1
    """Evaluation episodes that reached the sub-action (−1: not measured). 0 means it was
    never reached: nothing is known of it, and its predecessors are at fault."""
    incumbent_seeds: list[int] = field(default_factory=list)
    """The worlds this inner loop played ``WorkOn.incumbent`` on (its choosing worlds and
    those its comparisons grew into), in order; empty with no incumbent. The slow agent
    adds them to the incumbent's outcome, so both versions pair on every one."""
    incumbent_outcomes: list[int] = field(default_factory=list)
    """The incumbent's outcome on each of :attr:`incumbent_seeds` (1, 0, −1)."""


@message("plan.task")
class RunTask:
    """head → slow agent: solve this task; the reply is a :class:`TaskReport`."""

    task: str
    """The goal in words, e.g. ``obtain a diamond``."""
    target_item: str
    """The item or achievement that means success (``diamond``)."""
    success_target: float
    """Final-policy success rate at which the run stops early."""
    iterations: int
    """Outer-loop iterations at most."""
    env_steps: int
    """Env-step budget for the whole run."""
    eval_seeds: list[int]
    """Unseen worlds the final policy is evaluated on."""
    code_seeds: list[int]
    """Worlds sub-action versions are evaluated on."""


@message("plan.report")
class TaskReport:
    """slow agent → head: the run's outcome."""

    plans: list[Plan]
    """Every plan version."""
    outcomes: list[SubActionOutcome]
    """Every inner loop's outcome, in the order they finished (several per sub-action
    when it was redone or moved between code and RL)."""
    final_success: float
    """Final policy's success on the unseen evaluation seeds."""
    final_episodes: int
    """Episodes evaluated."""
    history: list[dict[str, float]]
    """Per iteration: sub-action name → success measured in it."""
    stop_reason: str
    """target_met, iterations, env_steps or tokens."""
    code_steps: int = 0
    """Env steps spent on code evaluation."""
    train_steps: int = 0
    """Env steps spent on training."""
    eval_steps: int = 0
    """Env steps of the final evaluation."""
    stages: list[Stage] = field(default_factory=list)
    """The final policy's stages, in order."""
    needs: list[Need] = field(default_factory=list)
    """Its survival needs."""
    achievements: dict[str, float] = field(default_factory=dict)
    """Final evaluation: achievement → fraction of episodes that unlocked it."""
