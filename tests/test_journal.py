"""The run's journal (calls.jsonl, jobs.jsonl) and episode ledger (episodes.jsonl) on real
files: a line torn by a kill, records of the wrong shape, corrupt results, and episodes
booked again by a redone job."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers import read_events

from llm.backend import CallResult
from messages.rollout import EpisodeReport, RolloutRequest, RolloutResult
from messages.task import Subtask
from method import ledger
from method.journal import CALLS_FILE, JOBS_FILE, Journal, job_key
from runtime import events


class Echo:
    """A real backend that answers each call with its request, counting the calls."""

    name = "echo"

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, role: str, purpose: str, request: dict[str, Any]) -> CallResult:
        self.calls += 1
        return CallResult(data={"echo": request}, tokens_in=3, tokens_out=5)


@pytest.fixture
def run_dir(tmp_path: Path):
    """A run directory whose events go to its events.jsonl (as in a run)."""
    events.configure(events_file=tmp_path / "events.jsonl", console=None)
    yield tmp_path
    events.close()


def _ask(journal: Journal, backend: Echo, n: int) -> CallResult:
    return trio.run(journal.call, backend, "fast", "code", {"n": n})


def _request(seed: int) -> RolloutRequest:
    return RolloutRequest(subtask=Subtask(name="collect_wood"), seeds=[seed, seed + 1])


def _result(seed: int, steps: int = 40) -> RolloutResult:
    episodes = [
        EpisodeReport(s, True, steps, 1.0, ["collect_wood"], "success") for s in (seed, seed + 1)
    ]
    return RolloutResult("collect_wood", episodes, 1.0, 2 * steps, "environment-1")


def _tear(path: Path, cut: str) -> None:
    """What a kill mid-write leaves: the start of a record, no newline."""
    with open(path, "a") as f:
        f.write(cut)


def _skipped(run_dir: Path) -> list[dict]:
    return [e for e in read_events(run_dir) if e["event"] == "journal_record_skipped"]


def test_a_call_recorded_after_a_torn_line_is_kept_whole(run_dir: Path) -> None:
    backend = Echo()
    journal = Journal(run_dir)
    for n in range(2):
        _ask(journal, backend, n)
    _tear(run_dir / CALLS_FILE, '{"key": "0f3a", "role": "fast", "purp')

    resumed = Journal(run_dir)
    assert resumed.loaded_calls == 2
    _ask(resumed, backend, 2)  # a new call, appended after the fragment
    assert backend.calls == 3

    again = Journal(run_dir)
    assert again.loaded_calls == 3 and again.skipped == 0
    lines = (run_dir / CALLS_FILE).read_text().splitlines()
    assert [json.loads(line)["request"] for line in lines] == [{"n": n} for n in range(3)]
    for n in range(3):
        assert _ask(again, backend, n).data == {"echo": {"n": n}}
    assert backend.calls == 3  # every one replayed, none asked again


def test_a_job_recorded_after_a_torn_line_is_replayed(run_dir: Path) -> None:
    journal = Journal(run_dir)
    journal.record_job(_request(0), _result(0), name="collect_wood")
    _tear(run_dir / JOBS_FILE, '{"key": "9b1c", "kind": "RolloutResult", "result": "gqRr')

    Journal(run_dir).record_job(_request(10), _result(10), name="collect_wood")

    again = Journal(run_dir)
    assert again.loaded_jobs == 2
    assert again.job(_request(0)) == _result(0)
    assert again.job(_request(10)) == _result(10)


def test_a_call_record_of_the_wrong_shape_is_skipped_and_the_call_asked_again(
    run_dir: Path,
) -> None:
    backend = Echo()
    _ask(Journal(run_dir), backend, 0)
    good = json.loads((run_dir / CALLS_FILE).read_text())
    # Valid JSON, wrong shape: a reply that is not an object, a record that is not one.
    (run_dir / "elsewhere").mkdir()
    _ask(Journal(run_dir / "elsewhere"), backend, 1)
    reshaped = json.loads((run_dir / "elsewhere" / CALLS_FILE).read_text())
    reshaped["reply"] = ["not", "an", "object"]
    with open(run_dir / CALLS_FILE, "a") as f:
        f.write(json.dumps(reshaped) + "\n")
        f.write(json.dumps(["a", "list"]) + "\n")
        f.write(json.dumps({**good, "tokens_in": "many"}) + "\n")

    journal = Journal(run_dir)
    assert journal.loaded_calls == 1 and journal.skipped == 3
    asked = backend.calls
    assert _ask(journal, backend, 1).data == {"echo": {"n": 1}}
    assert backend.calls == asked + 1  # asked again, not replayed from the bad record
    assert _ask(journal, backend, 0).data == {"echo": {"n": 0}}
    assert backend.calls == asked + 1  # the good record still replays
    skipped = _skipped(run_dir)
    assert [(e["line"], e["file"]) for e in skipped] == [
        (n, str(run_dir / CALLS_FILE)) for n in (2, 3, 4)
    ]
    assert "'reply' is list" in skipped[0]["problem"]
    assert "'tokens_in' is str" in skipped[2]["problem"]


def test_a_job_record_whose_result_is_not_base64_or_does_not_decode_is_run_again(
    run_dir: Path,
) -> None:
    journal = Journal(run_dir)
    journal.record_job(_request(0), _result(0))
    record = json.loads((run_dir / JOBS_FILE).read_text())
    with open(run_dir / JOBS_FILE, "a") as f:
        bad_base64 = {**record, "key": job_key(_request(10)), "result": "!!not base64!!"}
        f.write(json.dumps(bad_base64) + "\n")
        junk = base64.b64encode(b"\xc1 not msgpack").decode()
        f.write(json.dumps({**record, "key": job_key(_request(20)), "result": junk}) + "\n")
        wrong_kind = {**record, "key": job_key(_request(30)), "kind": "TrainResult"}
        f.write(json.dumps(wrong_kind) + "\n")

    resumed = Journal(run_dir)
    assert resumed.job(_request(0)) == _result(0)
    for seed in (10, 20, 30):
        assert resumed.job(_request(seed)) is None  # redone by the caller
    assert resumed.skipped == 3
    skipped = _skipped(run_dir)
    assert [e["line"] for e in skipped] == [2, 3, 4]
    assert "not base64" in skipped[0]["problem"]
    assert "TrainResult" in skipped[2]["problem"]
    # The redo's record replaces the bad one on the next resume.
    resumed.record_job(_request(20), _result(20))
    assert Journal(run_dir).job(_request(20)) == _result(20)


def test_a_ledger_line_after_a_torn_line_is_read_whole(run_dir: Path) -> None:
    def line(job: str, seed: int) -> dict:
        episode = {"kind": "code", "seed": seed, "steps": 7, "achievements": []}
        return {"id": f"code:{job}:{seed}", **episode}

    first, later = [line("a", 1), line("a", 2)], [line("b", 1)]
    ledger.append(run_dir, first)
    _tear(run_dir / ledger.LEDGER, '{"achievements": ["collect_wood"], "id": "code:c:')
    assert ledger.read(run_dir) == first  # the fragment is left out
    ledger.append(run_dir, later)
    assert ledger.read(run_dir) == first + later
    assert len((run_dir / ledger.LEDGER).read_text().splitlines()) == 3
    logged = {(e["event"], e["file"]) for e in read_events(run_dir)}
    path = str(run_dir / ledger.LEDGER)
    assert logged == {("jsonl_fragment_skipped", path), ("jsonl_fragment_dropped", path)}


def test_episodes_booked_twice_count_once(run_dir: Path) -> None:
    key, train = job_key(_request(0)), "ab" * 32
    trained = {
        "id": f"train:{train}",
        "kind": "train",
        "job": "place_table-1",
        "episodes": 3,
        "steps": 900,
        "achievement_episodes": {"place_table": 2},
    }
    once = ledger.tally([*ledger.rollout_lines("code", _result(0), key), trained])
    # A job redone after a resume books the same ids again: they replace, never add.
    for _ in range(2):
        ledger.append(run_dir, ledger.rollout_lines("code", _result(0), key))
        ledger.append(run_dir, [trained])
    assert ledger.tally(ledger.read(run_dir)) == once
    assert len((run_dir / ledger.LEDGER).read_text().splitlines()) == 3
    # A redo that came out otherwise replaces the lines it books, in place.
    ledger.append(run_dir, ledger.rollout_lines("code", _result(0, steps=50), key))
    assert ledger.tally(ledger.read(run_dir))["steps"] == 900 + 2 * 50
    # Another job's episodes (another request key) are other episodes.
    ledger.append(run_dir, ledger.rollout_lines("code", _result(0), job_key(_request(5))))
    assert ledger.tally(ledger.read(run_dir))["episodes"] == 3 + 2 + 2


def test_a_line_booked_by_another_writer_is_still_replaced_by_its_id(run_dir: Path) -> None:
    # append() remembers the ids it booked instead of re-reading the ledger each time;
    # a line written behind its back (another process, a hand edit) must not be missed.
    key, other = job_key(_request(0)), job_key(_request(5))
    ledger.append(run_dir, ledger.rollout_lines("code", _result(0), key))
    behind = ledger.rollout_lines("code", _result(0), other)
    with (run_dir / ledger.LEDGER).open("a") as f:
        f.writelines(json.dumps(line) + "\n" for line in behind)
    ledger.append(run_dir, ledger.rollout_lines("code", _result(0), other))
    assert len((run_dir / ledger.LEDGER).read_text().splitlines()) == 4
    assert ledger.tally(ledger.read(run_dir))["episodes"] == 4


def test_a_ledger_line_of_the_wrong_shape_names_the_file_line_and_fix(run_dir: Path) -> None:
    good = {"id": "final:k:1", "kind": "final", "seed": 1, "steps": 7, "achievements": []}
    bad = {**good, "id": "final:k:2", "steps": "many"}
    (run_dir / ledger.LEDGER).write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError) as raised:
        ledger.read(run_dir)
    message = str(raised.value)
    assert f"{run_dir / ledger.LEDGER}:2: 'steps'" in message and "delete it" in message
    # A line inside the file that is not JSON was not left by a kill either.
    (run_dir / ledger.LEDGER).write_text(json.dumps(good) + '\n{"kind": "fin\n')
    with pytest.raises(ValueError, match=r"episodes.jsonl:2: not JSON .*delete it"):
        ledger.read(run_dir)


def test_a_whole_record_cut_before_its_newline_is_kept(run_dir: Path) -> None:
    from method import jsonl

    path = run_dir / "some.jsonl"
    path.write_text('{"a": 1}\n{"b": 2}')  # whole, only its newline missing
    assert [r for _, r in jsonl.read(path)] == [{"a": 1}, {"b": 2}]
    jsonl.append(path, [{"c": 3}])
    assert path.read_text() == '{"a": 1}\n{"b": 2}\n{"c": 3}\n'


def test_a_training_job_is_the_same_job_on_another_machine_or_budget_share() -> None:
    import dataclasses

    from messages.train import TrainRequest
    from method.journal import job_key
    from rl.configs import collect_wood_with_coded

    req = TrainRequest(name="j", config=collect_wood_with_coded(), total_steps=64)
    moved = dataclasses.replace(req, subproc=True, max_world_steps=12_345)
    assert job_key(moved) == job_key(req)  # how it runs and how far: not what it is
    assert job_key(dataclasses.replace(req, total_steps=65)) != job_key(req)
