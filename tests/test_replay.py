"""The ``replay`` backend plays a real model's recorded answers through today's code.

``tests/data/replay-0.5b/`` is a run of Qwen2.5-Coder-0.5B (``local`` backend, the
config in its ``config.json``: "place a crafting table", two sub-actions, one revision):
its ``calls.jsonl`` holds the model's raw replies. Replayed, they are parsed and checked
by today's contracts and their code runs in today's sandbox and worlds."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from helpers import ROOT

from llm.errors import ModelReplyError, ModelUnavailable
from method.journal import call_key
from method.replay import RecordingError, ReplayBackend, place_of

RECORDING = ROOT / "tests" / "data" / "replay-0.5b"

CONFIG = """
[run]
name = "replayed"
runs_dir = "{runs}"

[agents]
backend = "replay"
replay = "{recording}"

[task]
task = "place a crafting table"
target = "place_table"
iterations = 1
revisions = 1
code_episodes = 2
eval_episodes = 2
episode_steps = 300
sub_target = 1.0
env_steps = 50000

[actors.environment]
count = 1
"""


def _records(path: Path = RECORDING) -> list[dict]:
    return [json.loads(line) for line in (path / "calls.jsonl").read_text().splitlines()]


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def _run(tmp_path: Path, recording: Path, extra: str = "") -> tuple[int, Path | None, str]:
    config = tmp_path / "replayed.toml"
    config.write_text(CONFIG.format(runs=tmp_path / "runs", recording=recording) + extra)
    done = subprocess.run(
        [sys.executable, "run.py", "--config", str(config), "--quiet"], cwd=ROOT,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    runs = list((tmp_path / "runs").iterdir()) if (tmp_path / "runs").exists() else []
    return done.returncode, (runs[0] if runs else None), done.stderr


def test_the_shipped_recording_is_a_real_models_answers() -> None:
    records = _records()
    config = json.loads((RECORDING / "config.json").read_text())
    assert config["agents"]["backend"] == "local"
    assert config["agents"]["model"] == "qwen2.5-coder-0.5b"
    assert [(r["role"], r["purpose"]) for r in records][0] == ("slow", "plan")
    assert all(r["backend"] == "local" and r["raw_reply"] and r["tokens_out"] > 0 for r in records)


def test_a_recorded_run_replays_its_models_code_through_todays_run(tmp_path: Path) -> None:
    code, run_dir, err = _run(tmp_path, RECORDING)
    assert code == 0, err[-3000:]
    events = _events(run_dir)
    names = [e["event"] for e in events]
    assert "agent_call_failed" not in names, [e for e in events if "failed" in e["event"]]
    (loaded,) = [e for e in events if e["event"] == "replay_loaded"]
    assert loaded["recorded_by"] == "local qwen2.5-coder-0.5b"
    assert loaded["calls"] == len(_records())
    # The model's own code was what ran: each version's sha is the sha of a recorded reply.
    recorded = {
        hashlib.sha256(r["reply"]["code"].encode()).hexdigest()[:12]
        for r in _records()
        if r["purpose"] == "code"
    }
    written = [e for e in events if e["event"] == "code_written"]
    assert written and {e["sha"] for e in written} <= recorded, (written, recorded)
    calls = [json.loads(line) for line in (run_dir / "calls.jsonl").read_text().splitlines()]
    assert calls and all(c["backend"] == "replay" for c in calls)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["backend"] == "replay" and summary["tokens_in"] == 0


def test_a_call_whose_request_changed_gets_the_answer_for_its_place(tmp_path: Path) -> None:
    backend = ReplayBackend(RECORDING)
    first_code = next(r for r in _records() if r["purpose"] == "code")
    changed = {**first_code["request"], "critique": {"cause": "something today's code says"}}
    assert call_key("fast", "code", changed) != first_code["key"]
    result = trio.run(backend.call, "fast", "code", changed)
    assert result.data["code"] == first_code["reply"]["code"]
    # Each recorded answer is given once: the place has no second version-1 answer left.
    with pytest.raises(ModelUnavailable, match="holds no answer for fast/code"):
        trio.run(backend.call, "fast", "code", changed)


def test_a_recorded_reply_that_todays_contract_refuses_fails_that_call(tmp_path: Path) -> None:
    records = _records()
    plan = records[0]
    plan["raw_reply"] = '{"subactions": "not a list"}'
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "calls.jsonl").write_text(json.dumps(plan) + "\n")
    backend = ReplayBackend(folder)
    with pytest.raises(ModelReplyError, match="breaks today's contract for slow/plan"):
        trio.run(backend.call, "slow", "plan", plan["request"])


def test_places_name_the_sub_action_and_version() -> None:
    assert place_of("fast", "code", {"subaction": {"name": "collect_wood"}, "version": 2}) == (
        "fast", "code", "collect_wood", 2,
    )  # fmt: skip
    assert place_of("slow", "plan", {"task": "x"}) == ("slow", "plan", "", 0)


def test_a_recording_that_is_missing_or_empty_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match="cannot read the recording"):
        ReplayBackend(tmp_path / "nowhere")
    (tmp_path / "calls.jsonl").write_text("not json\n")
    with pytest.raises(RecordingError, match="holds no agent call"):
        ReplayBackend(tmp_path)


@pytest.mark.parametrize(
    ("value", "says"),
    [("", "agents.replay: expected a recorded run's folder"), ("missing", "cannot read")],
)
def test_a_replay_config_without_a_recording_is_refused_before_any_folder(
    tmp_path: Path, value: str, says: str
) -> None:
    code, run_dir, err = _run(tmp_path, tmp_path / value if value else Path(""))
    assert code == 2, err[-2000:]
    assert says in err and run_dir is None


def test_a_recorded_run_folder_copied_elsewhere_still_replays(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(RECORDING, copy)
    assert ReplayBackend(copy).recorded_by == "local qwen2.5-coder-0.5b"
    assert ReplayBackend(copy / "calls.jsonl").calls == len(_records())
