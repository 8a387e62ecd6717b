"""The slow agent's pass over the plan (``SlowAgent._work``): what waits for what.

The fast agent here is a stand-in (``FakeFast``) that takes a fixed time per sub-action
on trio's mock clock and answers with a hand-made outcome: what is tested is the slow
agent's scheduling, not the inner loops (the end-to-end runs cover those)."""

from __future__ import annotations

import trio
import trio.testing

from actors.slow import SlowAgent
from messages.plan import Plan, RunTask, SubAction, SubActionOutcome, WorkOn
from messages.task import Stage, Subtask
from method.paired import chosen_version
from method.settings import MethodSettings

SEEDS = list(range(500_000, 500_020))


def outcome(name: str, mode: str, wins: int, tag: str) -> SubActionOutcome:
    outs = [1] * wins + [0] * (20 - wins)
    code, policy = (tag, "") if mode == "code" else ("", f"{tag}.zip")
    st = Stage(subtask=Subtask(name=name), code=code, policy_path=policy)
    return SubActionOutcome(name, mode, wins / 20, wins >= 18, st, 1, seed_outcomes=outs,
                            reached=20)  # fmt: skip


class FakeFast:
    """Stands in for the fast agent: each WorkOn takes ``took[name]`` seconds; the
    answer is a learned version (RL) that wins everywhere, or a coded one."""

    def __init__(self, took: dict[str, float]) -> None:
        self.took = took
        self.log: list[tuple[str, str, float]] = []
        self.work: dict[str, WorkOn] = {}

    async def ask(self, to: str, work: WorkOn, **_: object) -> SubActionOutcome:
        name = work.subaction.name
        self.work[name] = work
        self.log.append(("start", name, trio.current_time()))
        await trio.sleep(self.took[name])
        self.log.append(("end", name, trio.current_time()))
        return outcome(name, work.subaction.mode, 20, f"{name}-new")

    def time(self, what: str, name: str) -> float:
        return next(t for w, n, t in self.log if (w, n) == (what, name))


def run(plan: Plan, outcomes: dict, redo: dict, took: dict[str, float]) -> FakeFast:
    slow = SlowAgent.__new__(SlowAgent)
    slow.settings = MethodSettings()
    slow._need_list = []
    fake = FakeFast(took)
    slow.ask = fake.ask  # type: ignore[method-assign]
    task = RunTask("t", "iron", 0.5, 3, 1_000_000, eval_seeds=[], code_seeds=SEEDS)
    spent = __import__("actors.slow", fromlist=["_Spent"])._Spent()

    async def main() -> None:
        await slow._work(task, plan, outcomes, redo, 2, spent)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return fake


def chain(mode_b: str, mode_c: str) -> Plan:
    a = SubAction("collect_wood", Subtask(name="collect_wood"), "code")
    b = SubAction("make_stone_pickaxe", Subtask(name="make_stone_pickaxe"), mode_b,
                  depends=["collect_wood"])  # fmt: skip
    c = SubAction("collect_iron", Subtask(name="collect_iron"), mode_c,
                  depends=["make_stone_pickaxe"])  # fmt: skip
    return Plan(task="t", version=2, subactions=[a, b, c])


def coded_history() -> dict[str, list[SubActionOutcome]]:
    return {
        "collect_wood": [outcome("collect_wood", "code", 20, "wood-v1")],
        "make_stone_pickaxe": [outcome("make_stone_pickaxe", "code", 10, "pick-v1")],
        "collect_iron": [outcome("collect_iron", "code", 8, "iron-v1")],
    }


def test_an_rl_sub_action_starts_without_waiting_for_an_ancestor_that_relearns_in_rl():
    outcomes = coded_history()
    redo = {"make_stone_pickaxe": "to rl", "collect_iron": "to rl"}
    fake = run(chain("rl", "rl"), outcomes, redo, {"make_stone_pickaxe": 100, "collect_iron": 60})
    # Both start at once: the pickaxe's RL work cannot change the coded version that
    # collect_iron's training setup runs.
    assert fake.time("start", "collect_iron") == 0 == fake.time("start", "make_stone_pickaxe")
    work = fake.work["collect_iron"]
    # Set up and measured after the versions chosen when the pass began (the coded
    # pickaxe), although the learned pickaxe that ends meanwhile wins everywhere.
    assert [s.code for s in work.setup] == ["wood-v1", "pick-v1"]
    assert [s.code for s in work.before] == ["wood-v1", "pick-v1"]
    assert chosen_version(outcomes["make_stone_pickaxe"]).stage.policy_path == (
        "make_stone_pickaxe-new.zip"
    )


def test_the_same_pass_is_scheduled_alike_whichever_ancestor_ends_first():
    # The pickaxe ending first (10 s) or last (100 s) gives collect_iron the same start.
    for pick in (10, 100):
        outcomes = coded_history()
        redo = {"make_stone_pickaxe": "to rl", "collect_iron": "to rl"}
        fake = run(chain("rl", "rl"), outcomes, redo,
                   {"make_stone_pickaxe": pick, "collect_iron": 60})  # fmt: skip
        assert [s.code for s in fake.work["collect_iron"].before] == ["wood-v1", "pick-v1"]


def test_a_sub_action_waits_for_an_ancestor_whose_code_is_redone():
    outcomes = coded_history()
    redo = {"make_stone_pickaxe": "fix", "collect_iron": "to rl"}
    fake = run(chain("code", "rl"), outcomes, redo, {"make_stone_pickaxe": 100, "collect_iron": 60})
    # Its setup runs the pickaxe's coded version, which the redo may change: it waits.
    assert fake.time("start", "collect_iron") == fake.time("end", "make_stone_pickaxe") == 100
    assert [s.code for s in fake.work["collect_iron"].setup] == [
        "wood-v1",
        "make_stone_pickaxe-new",
    ]


def test_a_sub_action_waits_for_an_rl_ancestor_with_no_version_yet():
    outcomes = coded_history()
    del outcomes["make_stone_pickaxe"]
    redo = {"collect_iron": "to rl"}
    fake = run(chain("rl", "rl"), outcomes, redo, {"make_stone_pickaxe": 100, "collect_iron": 60})
    # Nothing to set up from yet: left out, its setup would miss a step of the chain.
    assert fake.time("start", "collect_iron") == 100


def test_every_later_loop_is_told_the_version_the_run_stands_on():
    """A redo of the code and a move to RL alike get the kept version as
    ``WorkOn.incumbent`` (its loop measures its versions against it, on enough worlds);
    a step's first loop gets none."""
    outcomes = coded_history()
    del outcomes["collect_iron"]
    redo = {"make_stone_pickaxe": "fix"}
    fake = run(chain("code", "code"), outcomes, redo,
               {"collect_wood": 1, "make_stone_pickaxe": 10, "collect_iron": 10})  # fmt: skip
    assert fake.work["make_stone_pickaxe"].incumbent.code == "pick-v1"
    assert fake.work["collect_iron"].incumbent is None
    outcomes = coded_history()
    fake = run(chain("code", "rl"), outcomes, {"collect_iron": "to rl"}, {"collect_iron": 10})
    assert fake.work["collect_iron"].incumbent.code == "iron-v1"
