"""A poisoned code version fails alone: a whole run through ``run.py`` where the first
version of a step crashes the process running it, and the run goes on; a split rollout
whose part lost its actor stops its other part."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from helpers import ROOT, make_settings, run_head_with

from messages.rollout import RolloutRequest
from messages.task import Subtask
from method.split import rollout_split
from runtime.config import ActorSettings
from runtime.head import Head
from skills.policies import COLLECT_WOOD_SOURCE

WOOD = Subtask("collect_wood", goal={"wood": 1}, max_steps=500)

# One coded step, evaluated on four worlds split over two environment actors.
POISONED = """
[run]
name = "poisoned"
seed = 0

[task]
task = "collect wood"
target = "wood"
success_target = 0.5
iterations = 1
revisions = 1
code_episodes = 4
eval_episodes = 2
episode_steps = 300
env_steps = 50000

[runtime]
heartbeat_interval = 0.5
heartbeat_timeout = 10.0

[actors.environment]
count = 2
"""


def _events(run_dir: Path) -> list[dict]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_a_first_code_version_that_segfaults_its_runner_fails_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    config = tmp_path / "poisoned.toml"
    config.write_text(POISONED)
    # Test-only fault injection (episodes/runner.py): the first episode of the first batch
    # of collect_wood crashes its runner with SIGSEGV, once in the whole run.
    fault = f"segv stage=collect_wood once={tmp_path / 'fired'}"
    env = {**os.environ, "RLGPT_FAULT_INJECT": fault}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "--config", str(config)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "fired").exists()  # the fault did fire
    (run_dir,) = (tmp_path / "runs").iterdir()
    events = _events(run_dir)
    named = lambda name: [e for e in events if e.get("event") == name]  # noqa: E731
    # The poisoned version's evaluation failed with the cause, on every world...
    first = named("evaluation_finished")[0]
    assert first["subaction"] == "collect_wood" and first["success_rate"] == 0.0
    critique = named("critique")[0]
    assert critique["cause"] == "crashed", critique
    # ...no actor process died, and the run went on to its final evaluation.
    assert not [e for e in named("actor_process_exited") if e["level"] != "info"]
    assert named("rollout_crashed")
    assert named("final_evaluation_finished")
    report = (run_dir / "report.md").read_text()
    assert "crashed" in report


def test_a_split_part_whose_actor_was_killed_comes_back_crashed_and_stops_the_other_part(
    tmp_path: Path, monkeypatch
) -> None:
    # Both parts' runners hang in one C call (test-only fault injection) with a long
    # grace, so both are running when the test kills one actor process from outside.
    monkeypatch.setenv("RLGPT_FAULT_INJECT", "stall")
    monkeypatch.setenv("RLGPT_WATCHDOG_GRACE_S", "600")
    settings = make_settings(
        tmp_path,
        {"environment": ActorSettings(count=2)},
        heartbeat_timeout=10.0,
        max_job_tries=1,
    )
    seen: dict = {}

    async def driver(head: Head) -> dict:
        await head.wait_for("environment", 2)
        req = RolloutRequest(WOOD, code=COLLECT_WOOD_SOURCE, seeds=[1, 2, 3, 4], wall_s=30)

        async def split() -> None:
            seen["result"] = await rollout_split(head.client, req, parts=2)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(split)
            events = head.run_dir / "events.jsonl"
            with trio.fail_after(60):
                while events.read_text().count('"rollout_started"') < 2:
                    await trio.sleep(0.05)
            victim = next(a for a in head.broker.status().actors if a.role == "environment")
            os.kill(victim.pid, signal.SIGKILL)
            seen["took"] = trio.current_time()
        seen["took"] = trio.current_time() - seen["took"]
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0, [e for e in run.events if e["level"] == "error"]
    result = seen["result"]
    assert [e.seed for e in result.episodes] == [1, 2, 3, 4]
    assert {e.cause for e in result.episodes} == {"crashed"}
    details = [e.detail for e in result.episodes]
    # The killed actor's part failed after its one try; the other part, still running
    # its stalled batch, was cancelled and its seeds reported as not run.
    assert sum("the job's actors died on every try" in d for d in details) == 2, details
    assert sum(d.startswith("not run: the version crashed the runner") for d in details) == 2
    assert seen["took"] < 30, seen["took"]  # not the 600 s grace
    assert run.named("job_cancelled")


# The issue's three C-call attacks, each the first code version of one step of a real
# run driven over HTTP by a scripted model (the offline rules for every other reply):
# the guards stop each with its cause, the critic sees it, a revision fixes the step.
HOSTILE_FIRST = {
    "collect_wood": (
        "def run(skills):\n    t = ()\n    for i in range(1000000):\n        t = (t,)\n"
        "    hash(t)\n    yield 'noop'\n",
        "recursion",
    ),
    "place_table": (
        "def run(skills):\n    m = (1 << 200000) + 7\n    pow(3, m - 1, m)\n    yield 'noop'\n",
        "timeout",
    ),
    "make_wood_pickaxe": (
        "def run(skills):\n    x = int.from_bytes(b'\\xff' * 2000000, 'big') % 7\n"
        "    yield 'noop'\n",
        "memory",
    ),
}


def _hostile_model(messages: list[dict]) -> str:
    from test_method import _request_of, scripted_model

    purpose, request = _request_of(messages)
    if purpose.startswith("Write the code") and request["version"] == 1:
        return json.dumps({"code": HOSTILE_FIRST[request["subaction"]["name"]][0]})
    return scripted_model(messages)


@pytest.mark.slow  # a whole run (~30 s)
def test_the_issues_c_call_attacks_as_first_versions_fail_alone_and_the_run_finishes(
    tmp_path: Path,
) -> None:
    from fake_openai import run_with_fake_model

    config = (
        POISONED.replace('task = "collect wood"', 'task = "make a wood pickaxe"')
        .replace('target = "wood"', 'target = "wood_pickaxe"')
        .replace("episode_steps = 300", "episode_steps = 1500")
    )
    proc, run_dir = run_with_fake_model(tmp_path, config, _hostile_model)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = _events(run_dir)
    critiques = [e for e in events if e.get("event") == "critique"]
    for step, (_, cause) in HOSTILE_FIRST.items():
        first = next(c for c in critiques if c["subaction"] == step and c["version"] == 1)
        assert first["cause"] == cause, first
    # No actor process died on the way, and the fixed versions made a final policy.
    assert not [
        e for e in events if e.get("event") == "actor_process_exited" and e["level"] != "info"
    ]
    final = [e for e in events if e.get("event") == "final_evaluation_finished"]
    assert final and final[0]["success_rate"] > 0
