"""benchmarks/bench_idle.py: idle core-seconds from a run's events, by cause."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_idle  # noqa: E402


def _events(rows: list[tuple[float, str, str, dict]]) -> list[dict]:
    return [
        {"ts": datetime.fromtimestamp(1_000_000 + t, UTC).isoformat(), "actor": actor,
         "event": name, **fields}
        for t, actor, name, fields in rows
    ]  # fmt: skip


def _run(tmp_path: Path, rows: list[tuple[float, str, str, dict]]) -> dict:
    text = "\n".join(json.dumps(e) for e in _events(rows))
    (tmp_path / "events.jsonl").write_text(text + "\n")
    return bench_idle.analyse(tmp_path)


def test_idle_core_seconds_are_attributed_to_what_the_run_was_doing(tmp_path: Path) -> None:
    figures = _run(
        tmp_path,
        [
            (0, "head", "actor_counts", {"cores": 2}),
            (2, "head", "task_started", {}),
            (2, "fast", "subaction_started", {"subaction": "a"}),
            (2, "fast", "code_written", {"subaction": "a"}),
            (2, "environment-0", "rollout_started", {"subtask": "a"}),
            (2, "environment-1", "rollout_started", {"subtask": "a"}),
            (3, "environment-1", "rollout_finished", {}),
            (5, "environment-0", "rollout_finished", {}),  # 2 s of one core: unequal parts
            (5, "fast", "evaluation_finished", {"subaction": "a"}),
            (6, "learner-0", "training_started", {"job": "b-it1-v1", "workers": 0}),
            (6, "learner-1", "training_started", {"job": "c-it1-v1", "workers": 0}),
            (10, "learner-1", "training_finished", {"job": "c-it1-v1"}),
            (20, "learner-0", "training_finished", {"job": "b-it1-v1"}),  # 10 s alone
            (20, "learner-0", "training_started", {"job": "b-it1-v2", "workers": 2}),
            (30, "learner-0", "training_finished", {"job": "b-it1-v2"}),  # alone, in workers
            (30, "slow", "final_evaluation_started", {}),
            (31, "slow", "final_evaluation_finished", {}),
            (32, "head", "run_finished", {}),
        ],
    )
    assert figures["idle_core_s"] == {
        "learner alone": 10.0,
        "startup": 4.0,
        "after the final evaluation": 2.0,
        "final evaluation: merging": 2.0,
        "first evaluation: parts unequal": 2.0,
        "between rounds": 2.0,
    }
    assert figures["cores"] == 2 and figures["wall_s"] == 32.0
