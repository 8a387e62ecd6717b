"""Deep stages evaluated where they start (issue 13): a composed episode from a *start*
(``RolloutRequest.start_at``) — the world saved when the planner reaches the stage,
made once per world and setup, restored for every later episode — on real Crafter
worlds through the runner's own rollouts, and the fast agent choosing between versions
from those starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import trio
from test_composite import DRINK, TABLE, WOOD, WOOD9, tracing

from actors.fast import FastAgent, _InnerLoop
from episodes.composite import composed_start_key, run_composed
from episodes.runner import Rollouts, RunnerEpisode
from messages.plan import Critique, Review, SubAction, WorkOn
from messages.rollout import RolloutRequest, RolloutResult
from messages.task import Need, Stage, Subtask
from method import ledger
from method.agents import Agents
from method.paired import NOT_REACHED, reached, stage_outcomes
from method.seeds import code_seeds
from method.settings import MethodSettings
from rl.start_states import StartStates
from skills.policies import PLACE_TABLE_SOURCE
from worlds.crafter_world import CrafterWorld

# Collects a wood only in a world with a cow in view at its start (in 10 of the first 32
# code worlds of run seed 0, none of the first 4): a setup that reaches what follows it
# in few worlds, as a deep stage's does, in a few steps.
COW_WOOD = Stage(
    Subtask("collect_wood", goal={"wood": 1}, max_steps=60),
    code=(
        "def run(skills):\n    if not skills.sees('cow'):\n        raise ValueError('no cow')\n"
        "    yield from skills.collect('tree', 1)\n"
    ),
)
# Never done: the player stands until it dies (a zombie or thirst, ~200 steps).
STAND = Stage(
    Subtask("find_diamond", goal={"diamond": 1}, max_steps=5000),
    code="def run(skills):\n    while True:\n        yield 'noop'\n",
)
# A worse table: wanders a little first.
SLOW_TABLE_SOURCE = (
    "def run(skills):\n    for _ in range(6):\n        yield 'move_left'\n"
    + PLACE_TABLE_SOURCE.split("def run(skills):\n", 1)[1]
)
TABLE_GOAL = Subtask("place_table", achievement="place_table", max_steps=400)
FIRST = code_seeds(0, 4)


@pytest.fixture(scope="module")
def world() -> CrafterWorld:
    world = CrafterWorld()
    world.reset(0)  # Crafter's world generator compiles once (numba)
    return world


def test_a_start_made_once_and_restored_plays_the_stage_as_the_composed_episode(world) -> None:
    # Nine wood then a table, drink served as a need: the start carries the planner's
    # state (needs' cooldowns, done stages) and the skills' memory with the world.
    stages = [WOOD9, TABLE]
    needs = [Need("drink", below=9, stage=DRINK, until=9)]
    goal = dataclasses.replace(TABLE_GOAL, max_steps=1500)
    cache = StartStates()
    for seed in (0, 1, 2):
        whole = run_composed(world, stages, needs, goal, seed, wall_s=60, skills_factory=tracing)
        made, again = (
            run_composed(
                world,
                stages,
                needs,
                goal,
                seed,
                wall_s=60,
                skills_factory=tracing,
                start_at=1,
                start_states=cache,
            )  # fmt: skip
            for _ in range(2)
        )
        assert whole.success and made.success == again.success == whole.success
        # The start's steps are the whole episode's up to the table, counted once.
        assert made.setup_steps > 0 and again.setup_steps == 0
        assert made.setup_steps + made.steps == whole.steps
        assert made.steps == again.steps > 0 and made.cause == again.cause == whole.cause
        assert made.achievements == again.achievements == ["place_table"]
        assert "collect_wood" in made.setup_achievements and not again.setup_achievements
        assert made.stages == again.stages == whole.stages[-len(made.stages) :]
        assert [r.name for r in made.stages][-1] == "place_table"
        assert made.reward + made.setup_reward == pytest.approx(whole.reward)
        # The world episode's counts: with the setup's when made, without when restored.
        assert made.counts["collect_wood"] >= 1 and "collect_wood" not in again.counts
    assert cache.stats()["made"] == 3 and cache.stats()["restored"] == 3


def test_the_start_key_changes_with_everything_that_decides_the_start(world) -> None:
    def key(setup, goal=TABLE_GOAL, after=(TABLE.subtask,), wall_s=30.0, needs=()):
        return composed_start_key(world, 0, setup, list(needs), goal, wall_s, after=after)

    base = key([WOOD])
    assert base is not None and base == key([WOOD])
    # Anything that changes the state at the start changes the key.
    other_wood = dataclasses.replace(WOOD, code=WOOD.code + "\n")
    learned = dataclasses.replace(WOOD, code="", policy_path="p.zip", policy_sha256="ab")
    changed = [
        key([other_wood]),
        key([learned]),
        key([dataclasses.replace(learned, policy_sha256="cd")]),
        key([WOOD9]),
        key([WOOD], goal=dataclasses.replace(TABLE_GOAL, max_steps=401)),
        key([WOOD], wall_s=31.0),
        key([WOOD], needs=[Need("drink", below=9, stage=DRINK, until=9)]),
        key([WOOD], after=(TABLE_GOAL,)),
        key([WOOD], after=(TABLE.subtask, WOOD.subtask)),
    ]
    assert len({base, *changed}) == len(changed) + 1


def in_process(rollouts: Rollouts, req: RolloutRequest) -> tuple[RolloutResult, list]:
    """``req`` run by the runner's own rollouts in this process: its result and the
    stats rows it would write."""
    episodes: list[RunnerEpisode] = []
    rollouts.run(req, lambda m: episodes.append(m) if isinstance(m, RunnerEpisode) else None)
    result = RolloutResult.of_episodes(
        req.subtask.name, [e.report for e in episodes], actor_id="in-process"
    )
    return result, [(e.length, e.counts) for e in episodes if e.stats]


@pytest.fixture()
def rollouts() -> Rollouts:
    rollouts = Rollouts()
    rollouts.warm()
    rollouts.starts = StartStates()  # this test's own
    return rollouts


def test_setup_steps_are_reported_once_and_booked_in_ledger_and_stats(rollouts) -> None:
    req = RolloutRequest(TABLE_GOAL, stages=[WOOD, TABLE], seeds=FIRST, wall_s=30, start_at=1)
    first, rows = in_process(rollouts, req)
    second, again = in_process(rollouts, req)
    setup = sum(e.setup_steps for e in first.episodes)
    assert setup > 0 and all(e.setup_steps == 0 for e in second.episodes)
    assert first.steps == setup + sum(e.steps for e in first.episodes)
    assert second.steps == sum(e.steps for e in second.episodes) == first.steps - setup
    # Every world step booked once: the ledger's lines and the stats rows add up to it.
    for result, stats in ((first, rows), (second, again)):
        lines = ledger.rollout_lines("code", result, "job")
        assert sum(line["steps"] for line in lines) == result.steps
        assert sum(length for length, _ in stats) == result.steps
    # What setup unlocked is booked with the episode that made the start, once.
    for line, e in zip(ledger.rollout_lines("code", first, "job"), first.episodes, strict=True):
        assert line["counts"]["collect_wood"] == e.achievements.count("collect_wood") + 1
    for line, e in zip(ledger.rollout_lines("code", second, "job"), second.episodes, strict=True):
        assert (
            line["achievements"] == sorted(set(e.achievements))
            and "place_table" in line["achievements"]
        )


def test_a_world_whose_setup_dies_is_not_reached_for_every_version(rollouts) -> None:
    goal = dataclasses.replace(TABLE_GOAL, max_steps=5000)
    other = dataclasses.replace(TABLE, code=SLOW_TABLE_SOURCE)
    seeds = FIRST[:2]
    outcomes, results, rows = [], [], []
    for stage in (TABLE, other):
        req = RolloutRequest(goal, stages=[STAND, stage], seeds=seeds, wall_s=60, start_at=1)
        result, stats = in_process(rollouts, req)
        results.append(result)
        rows.append(stats)
        outcomes.append(stage_outcomes(result, "place_table", seeds))
    assert outcomes == [[NOT_REACHED] * 2] * 2
    made, restored = results
    for e in made.episodes:
        assert e.cause == "setup_failed" and "died" in e.detail and not e.stages
        assert e.setup_steps > 0 and e.steps == 0
    # Known bad: the second version's episodes take no step at all.
    assert restored.steps == 0 and all(e.cause == "setup_failed" for e in restored.episodes)
    assert all(e.restored for e in restored.episodes)
    # They played nothing: no stats row and no ledger line (a training reset that takes
    # no step books none), so they do not thin the scoreboard; the setups that died are
    # booked once, with the episodes that played them.
    assert [len(r) for r in rows] == [len(seeds), 0]
    assert not ledger.rollout_lines("code", restored, "job")
    lines = ledger.rollout_lines("code", made, "job")
    assert [line["steps"] for line in lines] == [e.setup_steps for e in made.episodes]


class InProcessFast:
    """A fast agent whose environment is the runner's own rollouts in this process (a
    real Crafter world, sandbox and start cache, no broker between) and whose critic is
    a fake that always says ``done`` (the choosing under test does not read it)."""

    def __init__(self, tmp_path: Path, rollouts: Rollouts, from_starts: bool) -> None:
        settings = MethodSettings()
        settings.task.eval_from_starts = from_starts
        settings.task.decide_episodes = 4  # no growth: the worlds drawn are under test
        agents = Agents(None, tmp_path)
        self.agent = FastAgent(agents=agents, settings=settings, environments=1, run_dir=tmp_path)
        self.requests: list[RolloutRequest] = []

        async def ask(to: str, msg: object, **_: object) -> object:
            if isinstance(msg, Review):
                n = len(msg.result.episodes)
                return Critique(msg.subaction.name, msg.version, msg.mode, 0.0, 0.9, n, "done")
            assert isinstance(msg, RolloutRequest), msg
            self.requests.append(msg)
            return in_process(rollouts, msg)[0]

        self.agent.ask = ask

    def measure(self, work: WorkOn, loop: _InnerLoop, *codes: str) -> None:
        async def go() -> None:
            for version, code in enumerate(codes, 1):
                stage = dataclasses.replace(TABLE, code=code)
                await self.agent._measure(work, version, 0, stage, loop, code=code)

        trio.run(go)


def table_work() -> WorkOn:
    sub = SubAction("place_table", TABLE.subtask)
    return WorkOn(sub, before=[COW_WOOD], seeds=list(FIRST), revisions=1)


def test_versions_from_starts_are_paired_on_the_same_saved_worlds(tmp_path, rollouts) -> None:
    fast = InProcessFast(tmp_path, rollouts, from_starts=True)
    loop = _InnerLoop()
    fast.measure(table_work(), loop, PLACE_TABLE_SOURCE, SLOW_TABLE_SOURCE)
    first = [r for r in fast.requests if r.stages[-1].code == PLACE_TABLE_SOURCE]
    second = [r for r in fast.requests if r.stages[-1].code == SLOW_TABLE_SOURCE]
    assert all(r.start_at == 1 for r in fast.requests)
    # The second version plays the worlds the first drew, in one evaluation, all restored.
    assert [s for r in first for s in r.seeds] == loop.worlds
    assert [r.seeds for r in second] == [loop.worlds]
    made = rollouts.starts.made
    assert made == len(loop.worlds) and rollouts.starts.restored == len(loop.worlds)
    ledger_lines = ledger.read(tmp_path)
    booked = sum(line["steps"] for line in ledger_lines)
    assert booked == loop.code_steps > 0  # every step, the starts' included, once
    # A line per world for the first version; the second's restored starts in worlds
    # whose setup failed took no step and book none.
    assert len(ledger_lines) == len(loop.worlds) + reached(loop.coded.outcomes)
    assert reached(loop.coded.outcomes) < len(loop.worlds)
    assert loop.coded.outcomes and len(loop.coded.outcomes) == len(loop.worlds)


def test_a_deep_stage_gets_code_episodes_reached_worlds_from_starts(tmp_path) -> None:
    reached_by = {}
    for from_starts in (False, True):
        rollouts = Rollouts()
        rollouts.starts = StartStates()
        run_dir = tmp_path / ("starts" if from_starts else "reset")
        run_dir.mkdir()
        fast = InProcessFast(run_dir, rollouts, from_starts)
        loop = _InnerLoop()
        fast.measure(table_work(), loop, PLACE_TABLE_SOURCE)
        reached_by[from_starts] = reached(loop.coded.outcomes)
        worlds = loop.worlds or FIRST
        assert worlds == list(range(FIRST[0], FIRST[0] + len(worlds)))  # the next code seeds
    # From reset none of the 4 choosing worlds reaches the table; from starts further
    # choosing worlds are drawn until 4 do.
    assert reached_by[False] < len(FIRST) <= reached_by[True]
