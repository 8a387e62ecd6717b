"""What the agents do with a backend's answers to revisions: measured rates under
target overrule a "stop", "keep" or "no change" while budget remains, for every
backend; a code revision identical to a version already tried is asked again, not
evaluated again."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import trio
from structlog.testing import capture_logs

from actors.slow import SlowAgent
from knowledge import recipes
from llm import CallResult, validate
from llm.offline import OfflineBackend
from messages.plan import Critique, Plan, RunTask, SubAction, SubActionOutcome, WorkOn
from messages.rollout import EpisodeReport, Glimpse, RolloutResult, Segment, StageRun
from messages.task import Stage, Subtask
from method.agents import Agents
from method.settings import MethodSettings

TASK = RunTask("make a wood pickaxe", "wood_pickaxe", 0.5, 3, 100_000, [1, 2], [3, 4])


class ModelAnswerDouble:
    """Stands in for a model's *answer* to one call (no server, no model): the reply is
    given and goes through the contract's validator as a model's would."""

    name = "model-answer-double"

    def __init__(self, replies: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.replies = replies

    async def call(self, role: str, purpose: str, request: dict[str, Any]) -> CallResult:
        return CallResult(data=validate(role, purpose, self.replies[role, purpose]))


def _subaction(name: str, mode: str = "code") -> SubAction:
    step = recipes.achievement_step(name)
    return SubAction(
        name,
        Subtask(name, step.description, goal=dict(step.goal), achievement=step.achievement,
                max_steps=step.max_steps),
        mode=mode,  # type: ignore[arg-type]
        description=step.description,
    )  # fmt: skip


def _outcome(sub: SubAction, rate: float, mode: str = "code", **kw: Any) -> SubActionOutcome:
    stage = Stage(sub.subtask, code="def run(skills):\n    yield 'noop'\n")
    accepted = rate >= sub.target
    return SubActionOutcome(sub.name, mode, rate, accepted, stage, 2, reached=10, **kw)  # type: ignore[arg-type]


def _slow(tmp_path: Path, backend: Any, can_learn: bool = True) -> SlowAgent:
    return SlowAgent(
        agents=Agents(backend, tmp_path), settings=MethodSettings(), environments=1,
        can_learn=can_learn,
    )  # fmt: skip


def _chain() -> tuple[Plan, dict[str, list[SubActionOutcome]]]:
    """Wood at 10/10; the table, reached, at 0/10 against 0.9; the pickaxe never reached
    (the measured picture the issue's model answered with "no change")."""
    wood, table, pickaxe = (
        _subaction("collect_wood"), _subaction("place_table"), _subaction("make_wood_pickaxe")
    )  # fmt: skip
    plan = Plan(TASK.task, 1, [wood, table, pickaxe])
    unreached = SubActionOutcome(
        pickaxe.name, "code", 0.0, False, Stage(pickaxe.subtask, code="x"), 1, reached=0
    )
    outcomes = {
        wood.name: [_outcome(wood, 1.0)],
        table.name: [_outcome(table, 0.0)],
        pickaxe.name: [unreached],
    }
    return plan, outcomes


NO_CHANGE = {"changes": [], "stop": True, "reason": "no sub-action under target"}
KEEP = {
    "changes": [{"subaction": "place_table", "change": "keep", "reason": "fine as it is"}],
    "stop": False,
    "reason": "keep the plan",
}


def test_a_models_stop_against_rates_under_target_is_logged_and_overruled(
    tmp_path: Path,
) -> None:
    plan, outcomes = _chain()
    for i, reply in enumerate((NO_CHANGE, KEEP)):
        # A run folder each: the journal would replay the first answer to the second.
        run_dir = tmp_path / str(i)
        run_dir.mkdir()
        slow = _slow(run_dir, ModelAnswerDouble({("slow", "revise"): reply}))
        with capture_logs() as logs:
            revised = trio.run(slow._revise, TASK, plan, outcomes, 0.0, 1, 0)
        # The run goes on: a revised plan, not None (which ends it with ``no_changes``).
        assert revised is not None
        new, redo = revised
        # The first step reached and under target goes to RL; the unreached one stays.
        assert [s.mode for s in new.subactions] == ["code", "rl", "code"]
        assert list(redo) == ["place_table"]
        (event,) = [e for e in logs if e["event"] == "plan_stop_overruled"]
        assert event["subaction"] == "place_table" and event["change"] == "to_rl"
        assert event["success_rate"] == 0.0 and event["target"] == 0.9
        assert event["reply_stop"] is reply["stop"]
        assert not [e for e in logs if e["event"] == "plan_kept"]


def test_without_a_learner_the_overruled_step_is_coded_again(tmp_path: Path) -> None:
    plan, outcomes = _chain()
    slow = _slow(tmp_path, ModelAnswerDouble({("slow", "revise"): NO_CHANGE}), can_learn=False)
    with capture_logs() as logs:
        new, redo = trio.run(slow._revise, TASK, plan, outcomes, 0.0, 1, 0)
    assert [s.mode for s in new.subactions] == ["code", "code", "code"]
    assert "place_table" in redo
    (event,) = [e for e in logs if e["event"] == "plan_stop_overruled"]
    assert event["change"] == "redo"


def test_a_stop_stands_when_every_reached_step_meets_its_target(tmp_path: Path) -> None:
    plan, outcomes = _chain()
    outcomes["place_table"] = [_outcome(plan.subactions[1], 1.0)]
    slow = _slow(tmp_path, ModelAnswerDouble({("slow", "revise"): NO_CHANGE}))
    with capture_logs() as logs:
        assert trio.run(slow._revise, TASK, plan, outcomes, 0.0, 1, 0) is None
    assert [e["event"] for e in logs if e["event"].startswith("plan_")] == ["plan_kept"]


def test_a_learned_step_whose_last_round_raised_nothing_lets_the_stop_stand(
    tmp_path: Path,
) -> None:
    plan, outcomes = _chain()
    table = dataclasses.replace(plan.subactions[1], mode="rl")
    plan = Plan(plan.task, 1, [plan.subactions[0], table, plan.subactions[2]])
    outcomes["place_table"] = [_outcome(table, 0.3, "rl"), _outcome(table, 0.2, "rl")]
    slow = _slow(tmp_path, ModelAnswerDouble({("slow", "revise"): NO_CHANGE}))
    with capture_logs() as logs:
        assert trio.run(slow._revise, TASK, plan, outcomes, 0.0, 1, 0) is None
    assert not [e for e in logs if e["event"] == "plan_stop_overruled"]


def test_the_offline_backends_keep_of_a_learned_step_under_target_is_overruled_too(
    tmp_path: Path,
) -> None:
    # The same rule for every backend: the offline one keeps a learned step under its
    # target ("another PPO run costs more than it promises"); measured under target
    # after one round of learning that raised it, it trains again.
    plan, outcomes = _chain()
    table = dataclasses.replace(plan.subactions[1], mode="rl")
    plan = Plan(plan.task, 1, [plan.subactions[0], table, plan.subactions[2]])
    outcomes["place_table"] = [_outcome(table, 0.1, "code"), _outcome(table, 0.3, "rl")]
    slow = _slow(tmp_path, OfflineBackend())
    with capture_logs() as logs:
        revised = trio.run(slow._revise, TASK, plan, outcomes, 0.0, 1, 0)
    assert revised is not None
    new, redo = revised
    assert [s.mode for s in new.subactions] == ["code", "rl", "code"] and "place_table" in redo
    (event,) = [e for e in logs if e["event"] == "plan_stop_overruled"]
    assert event["change"] == "redo"


# ------------------------------------------------------------ revisions that change something

FIRST = "def run(skills):\n    yield from skills.place('table')\n"
SECOND = (
    "def run(skills):\n    yield from skills.collect('tree', 2)\n"
    "    yield from skills.place('table')\n"
)


class SequencedAnswers:
    """Stands in for a model's *answers* to fast/code calls, given in order (no server,
    no model); keeps each request and the temperature it was asked at."""

    name = "model-answer-double"

    def __init__(self, codes: list[str]) -> None:
        self.codes = list(codes)
        self.asked: list[tuple[dict[str, Any], float | None]] = []

    async def call(
        self, role: str, purpose: str, request: dict[str, Any], *, temperature: float | None = None
    ) -> CallResult:
        assert (role, purpose) == ("fast", "code"), (role, purpose)
        self.asked.append((request, temperature))
        return CallResult(data=validate(role, purpose, {"code": self.codes.pop(0)}))


def _failing(name: str, seeds: list[int]) -> RolloutResult:
    """Every world fails the table: the policy ends with a place that found no wood."""
    seen = Glimpse(40, {"sapling": 1}, {"health": 9}, ["grass", "tree"], "grass")
    trace = [Segment("place('table')", 3, seen, seen)]
    episodes = [
        EpisodeReport(
            seed, False, 40, 0.0, [], "policy_finished", "place returned False", 2, trace,
            stages=[StageRun(name, False, 40, "policy_finished")],
        )
        for seed in seeds
    ]  # fmt: skip
    return RolloutResult.of_episodes(name, episodes, actor_id="t")


def test_a_revision_repeating_a_tried_version_is_asked_again_hotter_not_evaluated(
    tmp_path: Path,
) -> None:
    from actors.fast import FastAgent

    table = _subaction("place_table")
    # v1 FIRST; v2 repeats FIRST, asked again: SECOND; v3 repeats SECOND, asked again:
    # FIRST once more, so the code has run out of answers.
    model = SequencedAnswers([FIRST, FIRST, SECOND, SECOND, FIRST])
    agent = FastAgent(
        agents=Agents(model, tmp_path), settings=MethodSettings(), environments=1,
        run_dir=tmp_path,
    )  # fmt: skip
    played: list[str] = []

    async def evaluate(work: WorkOn, stage: Stage) -> RolloutResult:
        # The environment stands in here: the part under test is what gets evaluated.
        played.append(stage.code)
        return _failing(table.name, list(work.seeds))

    async def critic(to: str, review: Any, expect: Any = None) -> Critique:
        assert to == "@critic"
        return Critique(
            table.name, review.version, "code", 0.0, 0.9, 4, "revise",
            cause="policy_finished", count=4, causes={"policy_finished": 4},
            detail="place returned False", advice="collect the wood first",
        )  # fmt: skip

    agent._evaluate = evaluate  # type: ignore[method-assign]
    agent.ask = critic  # type: ignore[method-assign]
    work = WorkOn(subaction=table, before=[], needs=[], iteration=1, seeds=[1, 2, 3, 4],
                  revisions=2, train_steps=64)  # fmt: skip
    with capture_logs() as logs:
        outcome = trio.run(agent.on_work, work, None)
    # Each distinct code was evaluated; neither repeat was.
    assert sorted(set(played)) == sorted({FIRST, SECOND})
    assert played.count(FIRST) == 1 and played.count(SECOND) == 1
    written = [e for e in logs if e["event"] == "code_written"]
    assert [e["version"] for e in written] == [1, 2]
    repeats = [
        (e["version"], e["same_as"], e["then"]) for e in logs if e["event"] == "code_repeated"
    ]
    assert repeats == [(2, 1, "asked_again"), (3, 2, "asked_again"), (3, 1, "exhausted")]
    assert outcome.exhausted and outcome.versions == 2
    # Asked again hotter, with what was wrong: causes, a failed episode, the skill API.
    from actors.fast import REASK_TEMPERATURE

    temperatures = [t for _, t in model.asked]
    assert temperatures == [None, None, REASK_TEMPERATURE, None, REASK_TEMPERATURE]
    again = model.asked[2][0]["repeated"]
    assert again["same_as_version"] == 1 and again["causes"] == {"policy_finished": 4}
    assert again["failed_episode"][0]["action"] == "place('table')"
    assert again["failed_episode"][0]["after"]["inventory"] == {"sapling": 1}
    assert "collect" in again["skill_api"] and "place" in again["skill_api"]
