"""A whole run holds the sandbox's memory budget against a policy's one big C call.

The model's first code for collect_wood asks, in one call, for far more memory than the
policy budget (512 MiB): ``dict.fromkeys`` over two million tuples of four pairs each.
The environment actor's runner reports its resident memory at the start of each batch and
its peak in it (``rollout_finished``: ``runner_rss_mib``, ``runner_peak_mib``, from the
kernel), so the run itself says how far the call got: within the budget's cap and its
slack, as the runner confines each call into agent code; unconfined, the call grows past a
gigabyte before anything between ticks can see it, and here stalls its batch until the
runner is killed. The version fails with the ``memory`` cause and the run goes on to its
report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

BUDGET_MIB = 512
"""The policy budget of a run (``sandbox.Limits.memory_bytes``)."""
SLACK_MIB = 160
"""What the runner may hold past the budget in the batch: the world's reset before the
call (about 40 MiB), the cap's own slack and the interpreter's bookkeeping of the failed
call. Unconfined, the same call stalls the batch past its wall-clock budget."""

HOG = """
def run(skills):
    xs = [0] * 2_000_000
    d = dict.fromkeys(zip(enumerate(xs), enumerate(xs), enumerate(xs), enumerate(xs)))
    yield 'noop'
"""

CONFIG = """
[run]
name = "hog"
seed = 0

[task]
task = "place a table"
target = "place_table"
iterations = 1
revisions = 1
code_episodes = 2
eval_episodes = 2
episode_steps = 300
env_steps = 20000

[actors.environment]
count = 1
"""


def _hogging_model(messages: list[dict]) -> str:
    """The offline rules' replies, except collect_wood's first code: the hog above."""
    from test_method import _request_of, scripted_model

    purpose, request = _request_of(messages)
    if purpose.startswith("Write the code") and request["subaction"]["name"] == "collect_wood":
        if request["version"] == 1:
            return json.dumps({"code": HOG})
    return scripted_model(messages)


@pytest.mark.slow  # a whole run.py (~30 s)
def test_a_policys_one_big_allocation_stays_within_the_budget_in_a_real_run(
    tmp_path: Path,
) -> None:
    from fake_openai import run_with_fake_model

    proc, run_dir = run_with_fake_model(tmp_path, CONFIG, _hogging_model, "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    hogged = [
        e
        for e in events
        if e["event"] == "rollout_finished"
        and e["subtask"] == "collect_wood"
        and "memory" in e["causes"]
    ]
    # Unconfined, the call ran until the batch's wall clock killed the runner.
    assert not [e for e in events if e["event"] == "rollout_stalled"]
    assert hogged, [e for e in events if e["event"] == "rollout_finished"]
    grown = max(e["runner_peak_mib"] - e["runner_rss_mib"] for e in hogged)
    assert grown <= BUDGET_MIB + SLACK_MIB, (grown, hogged)
    # The version failed with its cause and the run went on: a revision, then the report.
    written = [
        e for e in events if e["event"] == "code_written" and e["subaction"] == "collect_wood"
    ]
    assert len(written) == 2
    assert any(e["event"] == "final_evaluation_finished" for e in events)
