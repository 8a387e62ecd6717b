"""A poisoned version costs its training job, never the learner, whatever ``env_workers``.

A training job runs the version's code (coded actions, reward, setup) wherever its envs
step. Code that makes one C call overflow the C stack (a million nested ``map`` objects
iterated at once: CPython recurses through them without a depth check) kills that
process with SIGSEGV. With ``env_workers`` off (what ``auto`` picks on one core or for
one env) the envs used to step in the learner itself, so the learner died with them, and
six such jobs ended the run. The learner is real here, in a child process of its own
(the crash, were it not contained, would end that child, not the test run), with real
PPO and real Crafter worlds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The version's coded action: each call builds a chain of a million maps, then hashes a
# tuple made from it, which recurses through the whole chain in C.
POISON = """
def run(skills):
    m = [0]
    for i in range(1_000_000):
        m = map(abs, m)
    hash(tuple(m))
    yield 'noop'
"""

CHILD = """
import dataclasses, json, os, sys, threading
from pathlib import Path
from actors.learner import LearnerActor
from rl.configs import collect_wood_with_coded
from messages.task import CodedAction, Subtask
from messages.train import PPOSettings, TrainRequest

folder, poison, subproc = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "on"
learner = LearnerActor.__new__(LearnerActor)  # the real train(), no actor loop around it
learner.workdir, learner.run_dir = folder, folder
learner.run_id, learner.actor_id = "r", "learner-test"
learner._env_workers = None

base = collect_wood_with_coded()
subtask = Subtask("collect_wood_short", goal={"wood": 1}, max_steps=40)
honest = dataclasses.replace(base, subtask=subtask, primitives=["noop"])
# Its only action is the poisoned one: the first decision runs it.
poisoned = dataclasses.replace(
    honest, coded_actions=[CodedAction(name="poisoned", code=poison, max_steps=5)]
)
ppo = PPOSettings(n_steps=64, batch_size=64, n_epochs=1, learning_rate=1e-3)
results = {}
try:
    for name, config in (("poisoned", poisoned), ("honest", honest)):
        req = TrainRequest(
            name=name, config=config, total_steps=64, n_envs=2, ppo=ppo, eval_episodes=2,
            train_worlds=2, progress_every_s=3600.0, subproc=subproc,
        )
        result = learner.train(req, "cpu", threading.Event(), "nobody")
        results[name] = {"failure": result.failure, "policy": result.policy_path}
    results["pid"] = os.getpid()
finally:
    if learner._env_workers is not None:
        learner._env_workers.close()
print(json.dumps(results))
"""


@pytest.mark.parametrize("env_workers", ["off", "on"])
def test_a_version_that_crashes_its_process_fails_its_job_and_the_learner_trains_on(
    tmp_path: Path, env_workers: str
) -> None:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), POISON, env_workers],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "PYTHONPATH": path},
        cwd=tmp_path,
    )
    # The learner's process lived through it (a segfault would end it with -11).
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    failure = seen["poisoned"]["failure"]
    # One failed version, with its cause: the signal that killed the process it ran in.
    assert "crashed the process that runs it" in failure and "SIGSEGV" in failure, failure
    assert seen["poisoned"]["policy"] == ""
    # The same learner trains the next version as if nothing had happened.
    assert seen["honest"]["failure"] == "" and Path(seen["honest"]["policy"]).is_file()


def _poisoning_model(messages: list[dict]) -> str:
    """The offline rules' replies, except the step's code: the poison above, which the
    run then offers PPO as the step's own coded option (learn_over_code)."""
    from test_method import _request_of, scripted_model

    purpose, _ = _request_of(messages)
    if purpose.startswith("Write the code"):
        return json.dumps({"code": POISON})
    return scripted_model(messages)


@pytest.mark.slow  # a whole run.py (~40 s)
def test_a_run_whose_learned_version_poisons_its_training_finishes_with_its_report(
    tmp_path: Path,
) -> None:
    from fake_openai import run_with_fake_model
    from test_method import OVER_CODE

    assert 'env_workers = "off"' in OVER_CODE  # the mode the poison used to kill learners in
    proc, run_dir = run_with_fake_model(tmp_path, OVER_CODE, _poisoning_model, "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    named = lambda name: [e for e in events if e.get("event") == name]  # noqa: E731
    # The learned version failed with its cause: the signal of the process it ran in...
    (failed,) = named("training_failed")
    assert "SIGSEGV" in failed["detail"], failed
    # ...and no actor process died: the learner lived through it, never restarted.
    assert not [e for e in named("actor_process_exited") if e["level"] != "info"]
    assert named("final_evaluation_finished")
    assert "place_table" in (run_dir / "report.md").read_text()
