"""A learner on a second machine: its own key, trained past its checkpoints, revoked
mid-job, the job resumed from the head's checkpoint by a learner elsewhere.

The "second machine" is a network namespace with its own host name, reached over a veth
pair, all inside a namespace made for this test alone (tests/netns.py); the scenario runs
in a child process (tests/two_machines.py) so this process's network is never changed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import missing_here, read_events
from netns import WORKER_HOST, namespaces_available
from two_machines import EVERY, TOTAL

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_a_remote_learner_with_its_own_key_is_revoked_mid_job_and_the_job_resumes_elsewhere(
    tmp_path: Path,
) -> None:
    why = namespaces_available()
    if why:
        missing_here(f"this machine refuses network namespaces ({why})")
    scenario = [sys.executable, str(HERE / "two_machines.py"), str(tmp_path)]
    done = subprocess.run(
        ["unshare", "-n", "-u", "--fork", *scenario], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads((tmp_path / "scenario.json").read_text())
    print(json.dumps({k: v for k, v in seen.items() if k != "remote_stderr"}, indent=1))
    assert seen["code"] == 0
    assert seen["listen"].startswith("tcp://10.77.0.1:")
    # The revoked learner stopped at once, saying why.
    assert seen["remote_status"] == 2
    assert "key_revoked" in seen["remote_stderr"]
    assert seen["revoked_exit_s"] < 10
    # The job finished on the head's machine, from the checkpoint the remote learner sent.
    result = seen["result"]
    assert result["actor_id"] == "learner-m1"
    assert result["resumed_from"] >= 2 * EVERY
    assert result["resumed_from"] >= seen["stored_at_revoke"]
    assert result["steps"] >= TOTAL
    # At most one checkpoint interval lost (plus the progress reports' lag).
    assert result["resumed_from"] + result["steps_lost"] >= seen["progress_at_revoke"]
    assert result["steps_lost"] <= EVERY + 64
    events = read_events(Path(seen["run_dir"]))
    revoked = [e for e in events if e["event"] == "actor_revoked"]
    assert revoked and revoked[0]["actor_id"] == "learner-m2", revoked
    # The head's log holds what happened on machine2, with its host.
    remote = [e for e in events if e.get("host") == WORKER_HOST and e.get("actor") == "learner-m2"]
    assert any(e["event"] == "training_started" for e in remote), remote[:5]
    # Nothing left behind on machine2: every checkpoint it made is the head's, so none
    # stays; only one the head never acknowledged (in flight at the revoke) may, with the
    # job's attempts.jsonl beside it.
    left = seen["leftover_machine2"]
    kept = [p for p in left if p.rsplit("/", 1)[-1].startswith("ckpt-")]
    assert not left or (len(kept) == 1 and all("/learners/moving/" in p for p in left)), left
    if kept:
        print(f"machine2 kept an unacknowledged checkpoint: {left}")
