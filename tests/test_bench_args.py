"""Benchmarks refuse bad arguments before their long work, naming the flag: a mistyped
--root played this tree's code under the other tree's name, --out and --json in a missing
folder failed only after every episode, a --run-seed outside the table confirmed on worlds
of other ranges, and --limit-s 0 divided by zero after the whole run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT


def _bench(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_bench_deaths_refuses_a_root_that_is_not_a_tree_and_an_out_in_no_folder(
    tmp_path: Path,
) -> None:
    done = _bench("bench_deaths.py", "--root", str(tmp_path), "--seeds", "1")
    assert done.returncode == 2
    assert (
        f"--root {tmp_path}: not a tree of this project (no episodes/composite.py)" in done.stderr
    )
    done = _bench("bench_deaths.py", "--seeds", "1", "--out", str(tmp_path / "no" / "x.json"))
    assert done.returncode == 2 and "its folder does not exist" in done.stderr
    done = _bench("bench_deaths.py", "--seeds", "0")
    assert done.returncode == 2 and "--seeds and --jobs must be at least 1" in done.stderr


def test_bench_deaths_plays_worlds_alike_in_one_or_two_processes_and_compares_them(
    tmp_path: Path,
) -> None:
    # Its paired screens rest on this: the same world plays the same, whichever process.
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    for out, jobs in ((one, "1"), (two, "2")):
        done = _bench("bench_deaths.py", "--seed-base", "9000000", "--seeds", "3",
                      "--jobs", jobs, "--out", str(out))  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert "  3/3 worlds, " in done.stderr  # the progress line
    first, second = json.loads(one.read_text()), json.loads(two.read_text())
    assert [r["seed"] for r in first] == [9_000_000, 9_000_001, 9_000_002]
    assert first == second and all(r["steps"] > 0 for r in first)
    done = _bench("bench_deaths.py", "--compare", str(one), str(two))
    wins = sum(bool(r["success"]) for r in first)
    assert f"## paired on 3 worlds: before {wins}/3, after {wins}/3" in done.stdout


def test_bench_confirm_and_bench_method_refuse_out_of_range_numbers_and_missing_folders(
    tmp_path: Path,
) -> None:
    done = _bench("bench_confirm.py", str(tmp_path), "--run-seed", "50")
    assert done.returncode == 2
    assert "argument --run-seed: expected 0 to 49, found '50'" in done.stderr
    done = _bench("bench_method.py", "--limit-s", "0", "--json", str(tmp_path / "m.json"))
    assert done.returncode == 2 and "argument --limit-s: expected at least 0.1" in done.stderr


@pytest.mark.parametrize(
    ("script", "args", "expect"),
    [
        # Was: selection worlds below the held-out range, where the learner trains.
        ("bench_options.py", ("--eval", "-5", "--select", "3"), "argument --eval: expected at"),
        # Was: every episode played as "none", then a KeyError at the table.
        ("bench_skills.py", ("--part", "chain", "--modes", "composr"), "--modes: composr unknown"),
        ("bench_scaling.py", ("--workers", "2,x"), "--workers '2,x': expected positive integers"),
        ("bench_scaling.py", ("--rounds", "0"), "argument --rounds: expected at least 1"),
        # Was: learn(0), then a division by zero (bench_collect); a 120 s wait (bench_events).
        ("bench_collect.py", ("--steps", "0"), "argument --steps: expected at least 1"),
        ("bench_events.py", ("--events", "-5"), "argument --events: expected at least 0"),
        ("bench_start_states.py", ("--versions", "0"), "argument --versions: expected at"),
    ],
)
def test_more_benchmarks_refuse_bad_numbers_and_names_before_their_work(
    script: str, args: tuple, expect: str
) -> None:
    done = _bench(script, *args)
    assert done.returncode == 2 and expect in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("name", "expect"),
    [("missing/x.json", "in a folder that does not exist"), (".", "is a folder")],
)
def test_an_output_file_must_be_a_file_in_an_existing_folder(
    tmp_path: Path, name: str, expect: str
) -> None:
    import argparse

    from rlgpt.cli import output_file

    assert output_file(str(tmp_path / "x.json")) == tmp_path / "x.json"
    with pytest.raises(argparse.ArgumentTypeError, match=expect):
        output_file(str(tmp_path / name))


def test_bench_idle_and_bench_prompts_name_a_missing_or_unreadable_input(tmp_path: Path) -> None:
    # Was: a traceback each (FileNotFoundError, JSONDecodeError, KeyError).
    done = _bench("bench_idle.py", str(tmp_path / "no-run"))
    assert done.returncode == 2
    assert "no-run/events.jsonl: no such file: RUN_DIR must be a run's folder" in done.stderr
    (tmp_path / "events.jsonl").write_text('{"ts": "2026-11-29T21:00:00Z", "event": "x"}\n{"ts')
    done = _bench("bench_idle.py", str(tmp_path))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "events.jsonl: cannot be read as a run's event log" in done.stderr
    done = _bench("bench_prompts.py", "--calls", str(tmp_path / "calls.jsonl"))
    assert done.returncode == 2 and "calls.jsonl: no such file" in done.stderr
    (tmp_path / "calls.jsonl").write_text('\n{"role": "fast", "purpose": "code"}\n')
    done = _bench("bench_prompts.py", "--calls", str(tmp_path / "calls.jsonl"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "calls.jsonl line 2: not a recorded call (KeyError: 'request')" in done.stderr
    done = _bench("bench_prompts.py", "--target", "nope")
    assert done.returncode == 2 and "--target nope: nothing in Crafter's data gives" in done.stderr
