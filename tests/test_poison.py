"""A poisoned code version fails alone: a whole run through ``run.py`` where the first
version of a step crashes the process running it, and the run goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import ROOT

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
    # Test-only fault injection (envs/runner.py): the first episode of the first batch
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
