"""The env-step budget decides a run, not the wall clock: shipped configs and the
benchmark keep ``[task] wall_s`` as a safety limit far above what a run takes."""

from __future__ import annotations

import pytest
from helpers import ROOT

from benchmarks.crafter_bench.rlgpt import QUICK_TASK
from method.settings import load

SAFETY_S = 3600
"""Far above any shipped run here (diamond ~10-20 min, the quick benchmark minutes)."""


@pytest.mark.parametrize("name", ["diamond.toml", "crafter.toml"])
def test_shipped_configs_keep_the_wall_clock_as_a_safety_limit_only(name: str) -> None:
    settings = load(str(ROOT / "rlgpt" / "configs" / name))
    assert settings.task.wall_s == 0 or settings.task.wall_s >= SAFETY_S


def test_the_quick_benchmark_is_not_cut_by_the_wall_clock() -> None:
    assert QUICK_TASK["wall_s"] >= SAFETY_S


def _report(
    tmp_path, stop_reason: str, needs: list | None = None, target: str = "diamond", rate=0.5
) -> str:
    from messages.plan import RunTask, TaskReport
    from method.report import write_report

    settings = load(str(ROOT / "rlgpt" / "configs" / "diamond.toml"))
    task = RunTask("t", target, 0.3, 1, 10_000, eval_seeds=[2_000_000, 2_000_001], code_seeds=[])
    report = TaskReport([], [], rate, 2, [], stop_reason, needs=needs or [])
    summary = {
        "backend": "offline", "model_calls": 0, "model_calls_replayed": 0, "tokens_in": 0,
        "tokens_out": 0, "wall_s": 12.0, "wall_limit_reached": stop_reason == "wall_time",
        "env_steps": 300, "env_steps_by_kind": {"code": 200, "setup": 100},
        "final_success_interval": [0.0945, 0.9055], "score_final": 70.2,
    }  # fmt: skip
    return write_report(tmp_path, settings, task, report, summary, []).read_text()


def test_the_report_says_when_the_wall_clock_decided(tmp_path) -> None:
    text = _report(tmp_path, "wall_time")
    assert "**the wall-clock safety limit (14400 s) was reached**" in text
    text = _report(tmp_path, "iterations")
    assert "safety limit, 14400 s, was not reached" in text
    # Every world step, split by kind, and the final success with its interval.
    assert "**300** world steps in all, every one the run took: 200 code evaluation, " in text
    assert "100 setup code at training resets" in text
    assert "(1/2; 95 % interval 9%–91%)" in text


def test_learning_sub_actions_share_what_is_left_of_the_budget() -> None:
    from actors.slow import Shares, _Spent

    spent = _Spent(code=100)
    shares = Shares(1000, spent, {"a", "b", "c"})
    assert shares.take("wood") == 0  # not a learning sub-action of this pass: no cap
    assert shares.take("a") == 300  # (1000 − 100) / 3
    assert shares.take("b") == 300  # (1000 − 100 − 300 given to a) / 2
    spent.train += 250  # a ends, having spent 250 of its 300
    shares.release("a")
    assert shares.take("c") == 350  # 1000 − 350 spent − 300 still given to b
    assert shares.take("c") == 0  # a share is taken once
    # Nothing left: a share of 1 world step, too little for the fast agent to train.
    spent.code += 10_000
    late = Shares(1000, spent, {"d"})
    assert late.take("d") == 1


def test_training_takes_at_most_its_share_of_the_budget() -> None:
    from actors.slow import Shares, _Spent

    spent = _Spent(code=100, train=150)
    capped = Shares(1000, spent, {"a", "b"}, train_cap=400)
    assert capped.take("a") == 125  # (400 − 150) / 2, not (1000 − 250) / 2
    assert capped.take("b") == 125
    spent.train += 300  # past the cap: nothing left to train on
    capped.release("a")
    capped.release("b")
    assert Shares(1000, spent, {"c"}, train_cap=400).take("c") == 1
    # Without a cap, as before: what the whole budget has left.
    assert Shares(1000, _Spent(code=100, train=150), {"a"}).take("a") == 750


def test_a_need_never_measured_as_a_sub_action_shows_no_rate(tmp_path) -> None:
    from messages.task import Need, Stage, Subtask

    drink = Need("drink", 5, Stage(Subtask("drink_water"), code="x"))
    # The shipped retreat's threshold is 0 (knowledge/skill_prelude.py): it never starts,
    # which its row says instead of "health < 0".
    retreat = Need("health", 0, Stage(Subtask("retreat"), code="x"))
    text = _report(tmp_path, "iterations", needs=[drink, retreat])
    assert "| need: drink_water (drink < 5) | coded | – | – | – |" in text
    assert "| need: retreat (health: off) | coded | – | – | – |" in text


def test_the_report_heads_a_curriculum_run_with_its_score_not_a_bare_0_percent(tmp_path) -> None:
    # "achievements" has no single test: success is every stage of the curriculum done in
    # one episode, which a policy scoring 70 % almost never does; "0% success" alone
    # read as a policy that does nothing.
    final = next(
        line
        for line in _report(tmp_path, "iterations", target="achievements", rate=0.0).splitlines()
        if line.startswith("- Final policy:")
    )
    assert "Crafter score **70.2%**" in final
    assert "every stage of the curriculum done in 0/2" in final and "**0%**" not in final
    (tmp_path / "report.md").unlink()
    single = next(
        line
        for line in _report(tmp_path, "iterations").splitlines()
        if line.startswith("- Final policy:")
    )
    assert single.startswith("- Final policy: **50%** success (1/2; 95 % interval")
    assert "Crafter score" not in single
