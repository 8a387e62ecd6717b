"""bench_options' choosing and table on hand-worked outcomes: the method's keep rule is
applied on the selection worlds only, and the pick is reported on the held-out ones."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_options  # noqa: E402


def _records(outcomes: list[int], first: int = 0) -> list[dict]:
    return [{"seed": first + i, "success": bool(o)} for i, o in enumerate(outcomes)]


def test_the_pick_is_chosen_on_the_selection_worlds_and_needs_a_lower_bound_above_0() -> None:
    coded = {i: 0 for i in range(20)}  # the code fails every selection world
    # A wins 15 of 20 selection worlds (clearly better); B wins 2 (not measurably); the
    # primitive variant, with no selection records, is never a candidate.
    a = {"variant": "A", "select_records": _records([1] * 15 + [0] * 5)}
    b = {"variant": "B", "select_records": _records([1] * 2 + [0] * 18)}
    prims = {"variant": "prims", "records": _records([1] * 20)}
    name, row = bench_options.pick(coded, [b, prims, a])
    assert (name, row) == ("A", a)
    assert a["select_verdict"]["lower"] > 0 >= b["select_verdict"]["lower"]
    assert "select_verdict" not in prims
    # Nothing measurably better: the code is kept.
    assert bench_options.pick(coded, [b]) == ("coded version", None)


def test_a_table_row_pairs_world_by_world_and_says_when_no_world_differs() -> None:
    coded = bench_options.outcomes(_records([1, 1, 0, 0]))
    same = bench_options.outcomes(_records([1, 1, 0, 0]))
    better = bench_options.outcomes(_records([1, 1, 1, 1]) + [{"seed": 9, "skipped": "died"}])
    row = {"world_steps": 123, "train_s": 4.5}
    assert bench_options.table_row("c", coded, coded, {}).endswith("| — | — | — | — |")
    assert "— (no world differs)" in bench_options.table_row("s", same, coded, row)
    cells = bench_options.table_row("b", better, coded, row).split(" | ")
    assert cells[1] == "4/4 = 1.00" and cells[3] == "+0.50" and cells[5:] == ["123", "4.5 |"]


def test_the_summary_pools_runs_of_one_sub_action_and_refuses_other_worlds(tmp_path) -> None:
    import gzip
    import json

    coded = {"variant": "coded version", "records": _records([1, 0, 0, 1])}

    def run(name: str, sampled: list[int], greedy: list[int], picked: str) -> Path:
        path = tmp_path / f"{name}.json.gz"
        rows = [coded, {"variant": "own", "world_steps": 100, "records": _records(sampled),
                        "greedy_records": _records(greedy)}, {"variant": "pick",
                        "picked": picked}]  # fmt: skip
        with gzip.open(path, "wt") as f:
            json.dump(rows, f)
        return path

    a = run("a", [1, 1, 0, 1], [1, 0, 0, 1], "coded version")
    b = run("b", [1, 1, 1, 1], [1, 0, 0, 1], "own")
    lines = bench_options.summarise([a, b])
    own = next(line for line in lines if line.startswith("| own |"))
    # +1 world of 4, then +2: mean +0.375; pooled 3 wins, 0 losses on 8 pairs.
    assert "| 3 / 4 (of 4) | 0.88 | +0.38 [" in own and "| +0.38 (" in own
    greedy = next(line for line in lines if line.startswith("| own, greedy |"))
    assert "no world differs" in greedy
    assert lines[-1].endswith("coded version, own")
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"variant": "coded version", "records": _records([1, 1])}]))
    with pytest.raises(SystemExit, match="other worlds"):
        bench_options.summarise([a, other])


def test_the_stage_code_can_be_the_bare_first_template() -> None:
    """``--code simplest``: the coded version and the option ``stage_code`` run the
    library's first template (what the offline backend writes first with ``offline_first
    = "simplest"``), the setup before it stays the library's final code."""
    from knowledge import library, options, recipes, revisions

    step = next(s for s in recipes.chain("diamond") if s.name == "make_iron_pickaxe")
    simplest = library.code_for(step, revisions.first_params(step))
    _, own_best, only_best = bench_options.configs("make_iron_pickaxe")
    base, own, only = bench_options.configs("make_iron_pickaxe", code="simplest")
    assert only.coded_actions[0].code == options.stage_code_option(simplest)[2]
    assert own.coded_actions[0].code == only.coded_actions[0].code
    assert only.coded_actions[0].code != only_best.coded_actions[0].code
    assert own.setup_code == own_best.setup_code and own.coded_actions[1:] == base.coded_actions


def test_a_checking_run_can_play_a_fresh_range_of_worlds_but_never_training_ones() -> None:
    """``--worlds-from``: the held-out worlds start there and the selection worlds follow
    them; a first world below the held-out range is refused with the flag's name."""
    assert bench_options.worlds(1_005_000, 3, 2) == (
        [1_005_000, 1_005_001, 1_005_002],
        [1_005_003, 1_005_004],
    )
    assert bench_options.worlds(bench_options.EVAL_SEED, 2, 0) == ([1_000_000, 1_000_001], [])
    with pytest.raises(SystemExit, match="--worlds-from 999999"):
        bench_options.worlds(999_999, 3, 0)
