"""RL-GPT end to end through ``run.py``: the offline backend plans, writes code, trains
PPO and composes a final policy on the real game; a killed head resumes its run."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ACTORS, ROOT

from method import ledger
from worlds.crafter_world import STEP_TALLY_ENV, tallied_steps

RUN = [sys.executable, str(ROOT / "run.py")]

# A short task with everything in it: three steps from the recipe data, one learned
# with PPO from the first plan, code versions critiqued, a final evaluation and video.
SMALL = f"""
[run]
name = "small"
seed = 0

[task]
task = "make a wood pickaxe"
target = "wood_pickaxe"
success_target = 0.5
iterations = 2
revisions = 1
code_episodes = 4
eval_episodes = 4
train_steps = 1024
train_envs = 2
episode_steps = 1500
learn = ["place_table"]
env_steps = 8000
play_to_budget = true

# In the learner's own process, as before auto turned workers on from 2 envs: starting
# them costs this small run seconds, and tests/test_env_workers.py covers them.
[training]
env_workers = "off"
{ACTORS}"""


def _events(run_dir: Path) -> list[dict]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _named(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e.get("event") == name]


def _start(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [*RUN, *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else {**os.environ, **env},
    )


def crafter_read_metrics(path: Path, budget: float) -> float:
    """Crafter's score as its own ``analysis/read_metrics.py`` and ``common.py`` compute
    it from a ``stats.jsonl``, written out again here as an independent check: episodes
    in file order while the summed lengths stay within ``budget``; per achievement key,
    the percentage of those episodes with a count >= 1; exp(mean(ln(1 + %))) - 1."""
    steps, columns = 0, {}
    for text in path.read_text().split("\n"):
        if not text.strip():
            continue
        episode = json.loads(text)
        steps += episode["length"]
        if steps > budget:
            break
        for key, value in episode.items():
            if key.startswith("achievement_"):
                columns.setdefault(key, []).append(value)
    percents = [100 * sum(v >= 1 for v in values) / len(values) for values in columns.values()]
    assert len(percents) == 22
    return math.exp(sum(math.log(1 + p) for p in percents) / len(percents)) - 1


def test_offline_run_plans_codes_learns_and_reports(tmp_path: Path) -> None:
    config = tmp_path / "small.toml"
    config.write_text(SMALL)
    tally = tmp_path / "tally"
    tally.mkdir()
    # Every world, in whatever process, counts its own steps there (the lowest level).
    proc = _start(tmp_path, "--config", str(config), env={STEP_TALLY_ENV: str(tally)})
    _, err = proc.communicate(timeout=540)
    assert proc.returncode == 0, err[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    events = _events(run_dir)
    plan = _named(events, "plan_made")[0]
    assert "place_table:rl" in plan["subactions"] and "collect_wood:code" in plan["subactions"]
    assert _named(events, "code_written") and _named(events, "critique")
    trained = _named(events, "training_result")
    assert trained and all(e["job"].startswith("place_table") for e in trained)
    final = {e["subaction"]: e for e in _named(events, "final_stage")}
    assert final["place_table"]["mode"] == "rl"
    # No empty stage in the final policy: every step of the plan has a version in it.
    assert set(final) == {s.split(":")[0] for s in plan["subactions"]}
    assert not _named(events, "stage_missing")
    report = json.loads((run_dir / "report.json").read_text())
    assert report["learned_stages"] >= 1 and report["final_episodes"] == 4
    assert 0.0 <= report["final_success"] <= 1.0
    text = (run_dir / "report.md").read_text()
    for heading in ("## Final policy", "## Plan history", "## Critiques", "per iteration"):
        assert heading in text
    # Among the first lines: the offline backend is no model, and its first versions are
    # the library's tuned templates (the config does not set offline_first: "full").
    backend = next(line for line in text.splitlines() if line.startswith("- Backend:"))
    assert "not a language model" in backend and 'offline_first = "full"' in backend
    assert "not discovered" in backend
    assert (run_dir / "success.png").exists()
    # The episode ledger: every episode the run stepped, within its env-step budget, the
    # final policy playing on to spend it; the summary's figures come from it.
    ledger = [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
    kinds = {line["kind"] for line in ledger}
    assert {"code", "train", "final", "play"} <= kinds
    assert sum(line["steps"] for line in ledger) <= 8000  # the video's episode included
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == sum(line["steps"] for line in ledger)
    assert 0.0 < summary["score_all_episodes"] <= 100.0 and summary["score_final"] > 0.0
    # Every world step any world took is booked, once, by kind: setup at training
    # resets included; the worlds' own counters add up to the same total.
    assert tallied_steps(tally) == summary["env_steps"]
    by_kind = summary["env_steps_by_kind"]
    assert sum(by_kind.values()) == summary["env_steps"]
    # What the budget counted is what the worlds took (see the learn-over-code run below
    # for evaluations answered from the journal).
    assert summary["env_steps_code"] == by_kind["code"]
    assert summary["env_steps_training"] == sum(by_kind[k] for k in ("train", "setup", "held_out"))
    assert by_kind["setup"] > 0 and by_kind["train"] > 0 and by_kind["held_out"] > 0
    assert f"{summary['env_steps']:,}** world steps in all" in text
    # stats.jsonl holds every episode (training ones too): Crafter's own formula on it
    # gives the run's score.
    stats = run_dir / "rollouts" / "stats.jsonl"
    lengths = [json.loads(line)["length"] for line in stats.read_text().splitlines()]
    assert sum(lengths) == summary["env_steps"] and len(lengths) == summary["episodes"]
    budget = summary["env_step_budget"]
    expected = crafter_read_metrics(stats, budget)
    assert summary["score_all_episodes"] == pytest.approx(expected, abs=0.005)
    assert f"{summary['score_all_episodes']:.1f}% over the" in text
    # The same scoreboard episodes by the kind that booked them, each kind scored alone.
    by_kind_score = summary["scoreboard_by_kind"]
    assert {"code", "train", "play"} <= set(by_kind_score)
    assert sum(g["episodes"] for g in by_kind_score.values()) == summary["scoreboard_episodes"]
    assert sum(g["steps"] for g in by_kind_score.values()) == summary["scoreboard_steps"]
    code_score = by_kind_score["code"]["score"]
    assert (
        f"code evaluation {code_score:.1f}% ({by_kind_score['code']['episodes']:,} episodes)"
        in text
    )
    # Throughput and how busy the run kept the machine (the whole process tree's CPU).
    assert summary["session_env_steps"] == summary["env_steps"]
    assert not summary["session_resumed"]
    assert summary["env_steps_per_s"] == pytest.approx(
        summary["env_steps"] / summary["wall_s"], rel=0.05
    )
    assert summary["cores"] >= 1 and summary["cpu_s"] > 0
    assert summary["actor_counts"] == {"environment": 2, "learner": 1}  # as the config set
    # Actors worked (training alone took CPU seconds), and no more than the cores exist.
    assert 0.05 < summary["core_utilisation"] <= 1.05
    # The wall clock did not decide this run, and the report says so.
    assert summary["wall_limit_reached"] is False and "(no wall-clock limit)" in text
    assert "Crafter score" in text
    calls = [json.loads(line) for line in (run_dir / "calls.jsonl").read_text().splitlines()]
    assert {(c["role"], c["purpose"]) for c in calls} >= {
        ("slow", "plan"),
        ("fast", "code"),
        ("fast", "rl"),
        ("critic", "review"),
    }


def _wait_for(run_root: Path, event: str, proc: subprocess.Popen, timeout: float) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in run_root.glob("*/events.jsonl"):
            if f'"event":"{event}"' in path.read_text():
                return path.parent
        if proc.poll() is not None:
            raise AssertionError(f"run ended ({proc.returncode}) before {event}")
        time.sleep(0.2)
    raise AssertionError(f"no {event} within {timeout} s")


# Slow (a whole run killed and resumed, ~45 s): keeps the default suite under 10 minutes.
@pytest.mark.slow
def test_killed_head_resumes_without_repeating_calls_or_finished_training(
    tmp_path: Path,
) -> None:
    config = tmp_path / "small.toml"
    config.write_text(SMALL.replace("iterations = 2", "iterations = 1"))
    proc = _start(tmp_path, "--config", str(config))
    try:
        run_dir = _wait_for(tmp_path / "runs", "training_result", proc, timeout=400)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143
    before = _events(run_dir)
    finished = {e["job"] for e in _named(before, "training_result")}
    calls_before = len((run_dir / "calls.jsonl").read_text().splitlines())
    assert finished and calls_before >= 3

    resumed = _start(tmp_path, "--resume", str(run_dir))
    _, err = resumed.communicate(timeout=540)
    assert resumed.returncode == 0, err[-3000:]
    after = _events(run_dir)[len(before) :]
    # No recorded call reached the backend again: every call key is in the file once,
    # and the resumed head replayed the ones it needed.
    keys = [json.loads(line)["key"] for line in (run_dir / "calls.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys))
    assert len(_named(after, "agent_call_replayed")) >= calls_before
    # No finished training job ran again.
    started_again = {e["job"] for e in _named(after, "training_started")}
    assert not (started_again & finished), started_again & finished
    assert any(e.get("kind") == "TrainResult" for e in _named(after, "job_replayed"))
    assert (run_dir / "report.md").exists()

    # A resume of the finished run replays it all and renders the video episode again:
    # the ledger books it by the same id, so neither the ledger nor the score changes.
    booked = ledger.read(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    finished = _start(tmp_path, "--resume", str(run_dir))
    _, err = finished.communicate(timeout=300)
    assert finished.returncode == 0, err[-3000:]
    assert ledger.tally(ledger.read(run_dir)) == ledger.tally(booked)
    again = json.loads((run_dir / "summary.json").read_text())
    for key in ("env_steps", "episodes", "score_all_episodes", "score_final"):
        assert again[key] == summary[key], key


def _request_of(messages: list[dict]) -> tuple[str, dict]:
    """(purpose line, request dict) of a chat request rendered from our prompt files."""
    user = next(m["content"] for m in messages if m["role"] == "user")
    head, _, rest = user.partition("The request:")
    body = rest.strip()
    body = body[: body.rfind("}") + 1]
    return head.strip(), json.loads(body)


def scripted_model(messages: list[dict]) -> str:
    """Good replies for every call of a run, computed by the offline rules — except the
    first code version, which imports a module the sandbox refuses."""
    import trio

    from knowledge import library, recipes
    from llm.offline import OfflineBackend

    purpose, request = _request_of(messages)
    offline = OfflineBackend()
    if purpose.startswith("Write the code"):
        sub = request["subaction"]
        if request["version"] == 1:
            return json.dumps({"code": "import os\n\ndef run(skills):\n    yield 'noop'\n"})
        step = recipes.achievement_step(sub["achievement"] or sub["name"])
        return json.dumps({"code": library.code_for(step), "note": "use the library skill"})
    role_purpose = {
        "Plan this task.": ("slow", "plan"),
        "Revise the plan.": ("slow", "revise"),
        "Write the RL configuration for this sub-action.": ("fast", "rl"),
        "Review this version.": ("critic", "review"),
    }[purpose]
    reply = trio.run(offline.call, *role_purpose, request).data
    return "Here you go:\n```json\n" + json.dumps(reply) + "\n```"


def test_openai_backend_drives_a_run_over_http_and_survives_bad_replies(tmp_path: Path) -> None:
    import os

    from fake_openai import Behaviour, FakeOpenAI

    with FakeOpenAI(responder=scripted_model) as fake:
        # The first calls meet a rate limit, a server error and malformed JSON.
        fake.script(
            Behaviour(status=429, retry_after=0),
            Behaviour(status=500),
            Behaviour(text='{"subactions": [oops'),
        )
        config = tmp_path / "model.toml"
        config.write_text(
            SMALL.replace("iterations = 2", "iterations = 1")
            + f'\n[agents]\nbackend = "openai"\nbase_url = "{fake.base_url}"\n'
            'model = "fake-model"\napi_key_env = "RLGPT_FAKE_KEY"\ntimeout_s = 20.0\n'
        )
        proc = subprocess.Popen(
            [*RUN, "--config", str(config)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "RLGPT_FAKE_KEY": "not-a-real-key"},
        )
        _, err = proc.communicate(timeout=540)
        assert proc.returncode == 0, err[-3000:]
        (run_dir,) = (tmp_path / "runs").iterdir()
        events = _events(run_dir)
        calls = [json.loads(line) for line in (run_dir / "calls.jsonl").read_text().splitlines()]
        assert all(c["backend"] == "openai" for c in calls)
        plan_call = next(c for c in calls if c["purpose"] == "plan")
        assert plan_call["attempts"] >= 3 and plan_call["repairs"] == 1
        assert sum(c["tokens_in"] for c in calls) > 0
        # The forbidden import cost its version, the critique named it, a revision fixed it.
        forbidden = [e for e in _named(events, "critique") if e["cause"] == "forbidden"]
        assert forbidden and forbidden[0]["verdict"] == "revise"
        revised = [e for e in _named(events, "code_written") if e["revision_of"] == "forbidden"]
        assert revised
        report = json.loads((run_dir / "report.json").read_text())
        assert report["learned_stages"] >= 1 and report["model_calls"] == len(calls)
        # Every chat request the server saw is an attempt (a try, retry or repair) of a
        # recorded call: none was lost and none made outside the journal.
        assert fake.count == sum(c["attempts"] for c in calls)


LESSONS = f"""
[run]
name = "lessons"
seed = 0

[agents]
offline_first = "simplest"
offline_accept = "at_target"
offline_lessons = true

[task]
task = "make an iron pickaxe"
target = "iron_pickaxe"
success_target = 0.5
iterations = 1
revisions = 1
code_episodes = 8
eval_episodes = 4
episode_steps = 1500
env_steps = 20000
{ACTORS}"""

# The boolean settings a revision may teach, as the fast agent's note names them.
TAUGHT_FLAGS = ("secure", "dig", "fight", "survive", "guarded", "arm")


def test_a_later_step_is_first_written_with_what_revisions_taught(tmp_path: Path) -> None:
    # A real run from the simplest templates with offline_lessons: a revision of an early
    # step turns settings on, and the first version of each step built on it is written
    # with them (the fast agent passes the lessons of the steps in WorkOn.before), its
    # note naming the cause and the step, its code carrying the settings. The iron chain
    # (ten steps) so that an early step's first version fails: which one, and so which
    # settings it teaches, depends on the worlds (the arrow dodge let the stone
    # chain's collect_wood pass, which taught dig and explore before).
    config = tmp_path / "lessons.toml"
    config.write_text(LESSONS)
    proc = _start(tmp_path, "--config", str(config), "--quiet")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    written = _named(_events(run_dir), "code_written")
    revised = [e for e in written if e["version"] > 1]
    assert revised, [e["note"] for e in written]
    first = revised[0]
    order = [e["subaction"] for e in written if e["version"] == 1]
    later = order[order.index(first["subaction"]) + 1 :]
    assert later
    taught = f"after {first['revision_of']} on {first['subaction']}"
    for e in written:
        if e["subaction"] in later and e["version"] == 1:
            assert "with what this run's critiques taught" in e["note"] and taught in e["note"]
    code = (run_dir / "code" / f"{later[0]}-it1-v1.py").read_text()
    note = next(e["note"] for e in written if e["subaction"] == later[0] and e["version"] == 1)
    flags = [f for f in TAUGHT_FLAGS if f"{f} (after " in note]
    assert flags, note
    for flag in flags:
        assert f"{flag.upper()} = True" in code, flag
    assert "PATIENCE = 100" in code  # its own patience bare
    backend = next(
        line for line in (run_dir / "report.md").read_text().splitlines() if "Backend" in line
    )
    assert "offline_lessons" in backend
    # The report's curve starts from each step's first version: the revised step's first
    # cell is its v1's success (the Critiques table's), then the version each iteration kept.
    text = (run_dir / "report.md").read_text()
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")]
    step = first["subaction"]
    v1 = next(r for r in rows if r[0] == f"| {step}" and r[1] == "1" and r[2] == "code")
    curve = next(r for r in rows if r[0] == f"| {step}" and len(r) == 3)  # first, it 1
    assert "| Sub-action | first version | it 1 |" in text
    assert curve[1] == v1[3]  # the first version's success, as its critique says


OVER_CODE = f"""
[run]
name = "over-code"
seed = 0

[task]
task = "place a table"
target = "place_table"
success_target = 0.5
iterations = 1
revisions = 0
code_episodes = 4
decide_episodes = 8
eval_episodes = 4
train_steps = 64
train_envs = 1
episode_steps = 1500
env_steps = 40000
learn = ["place_table"]
learn_over_code = true

[training]
env_workers = "off"

[training.ppo]
n_steps = 64
{ACTORS}"""


def test_a_step_learned_from_the_start_learns_over_its_own_first_code(tmp_path: Path) -> None:
    # learn_over_code: a step on RL from the first plan is first written as code once, and
    # PPO learns over that code (the stage_code option) beside the menu; the learned
    # version is measured against it on the same worlds and the report pairs the two.
    config = tmp_path / "over.toml"
    config.write_text(OVER_CODE)
    proc = _start(tmp_path, "--config", str(config), "--quiet")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    events = _events(run_dir)
    mine = [
        e
        for e in events
        if e.get("subaction") == "place_table" or "place_table" in str(e.get("job", ""))
    ]
    names = [e["event"] for e in mine]
    assert "code_before_learning" in names
    written = [e for e in mine if e["event"] == "code_written"]
    assert [e["version"] for e in written] == [1]  # its first code, no revisions
    assert names.index("code_written") < names.index("training_requested")
    (config_written,) = [e for e in mine if e["event"] == "rl_config_written"]
    assert config_written["options"][0] == "stage_code"
    compared = [e for e in mine if e["event"] == "incumbent_compared"]
    assert compared and all(e["incumbent"] == "code" for e in compared)
    text = (run_dir / "report.md").read_text()
    table = text.split("## Coded against learned", 1)[1].split("\n## ", 1)[0]
    assert "| place_table |" in table and " pairs " in table
    # The table says its worlds chose, and how to check the choice on others.
    assert "worlds the choice was made on" in table and "place_table: " in table
    assert "benchmarks/bench_confirm.py " in table and f"{run_dir.name}` plays" in table
    # The code's evaluation asked again on the same worlds (as the incumbent) is answered
    # from the journal without a world step: the budget counts it as the ledger does, once.
    assert [e for e in events if e["event"] == "job_replayed" and e["kind"] == "RolloutResult"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps_code"] == summary["env_steps_by_kind"]["code"]
