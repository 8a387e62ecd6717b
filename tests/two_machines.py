"""The two-machine scenario of ``test_two_machines.py``, run inside a network namespace of
its own (``unshare -n -u --fork python tests/two_machines.py TMP``) so that nothing it does
touches this box's network.

The head listens on a veth address (not loopback, so CURVE with a keys folder is required);
a learner on the second "machine" (tests/netns.py: another network namespace with host
name ``machine2`` and its own TMPDIR and artifact cache) attaches with its own key
``machine2``, trains a job past two checkpoints, and is revoked mid-job with ``python
run.py keys revoke machine2``. The revoked process must exit at once with ``key_revoked``;
a learner on the head's machine, attached with key ``machine1``, then takes the job and
resumes it from the last checkpoint the head holds. What happened is written as JSON to
``TMP/scenario.json`` for the test to check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import trio

# This checkout's code (not whatever is installed) and the tests' helpers.
sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
from helpers import ROOT, make_settings, run_head_with, wait_until  # noqa: E402
from netns import HEAD_ADDRESS, Machine, second_machine  # noqa: E402

from messages.train import PPOSettings, TrainRequest  # noqa: E402
from rl.configs import collect_wood_with_coded  # noqa: E402
from runtime.head import Head  # noqa: E402

RUN = [sys.executable, str(ROOT / "run.py")]
EVERY = 256
TOTAL = 1536
PPO = PPOSettings(n_steps=64, batch_size=64, n_epochs=2, learning_rate=1e-3)


def keys(tmp: Path, *args: str) -> None:
    subprocess.run(
        [*RUN, "keys", *args, "--dir", str(tmp / "keys")], check=True, capture_output=True
    )


def scenario(tmp: Path, machine: Machine) -> dict:
    keys(tmp, "init")
    keys(tmp, "add", "machine1")
    keys(tmp, "add", "machine2")
    settings = make_settings(
        tmp, listen=f"tcp://{HEAD_ADDRESS}:0", keys_dir=str(tmp / "keys"), heartbeat_timeout=3
    )
    req = TrainRequest(
        name="moving", config=collect_wood_with_coded(), total_steps=TOTAL, n_envs=2, ppo=PPO,
        eval_episodes=2, train_worlds=10, checkpoint_every=EVERY, progress_every_s=0.2,
    )  # fmt: skip
    seen: dict = {}

    def disk(name: str) -> dict:
        # Each machine's learner keeps its files on its own "disk".
        folder = tmp / name
        folder.mkdir()
        return {**os.environ, "TMPDIR": str(folder), "RLGPT_ARTIFACTS": str(folder / "cache")}

    def attach(head: Head, key: str, name: str) -> list[str]:
        return [
            *RUN, "attach", "learner", "--connect", head.listen, "--keys", str(tmp / "keys"),
            "--key-name", key, "--name", name, "--quiet",
        ]  # fmt: skip

    async def driver(head: Head) -> dict:
        seen["listen"] = head.listen
        job_file = head.run_dir / "artifacts" / "jobs" / "moving.json"

        def stored() -> int:
            """Decisions of the newest checkpoint the head holds for the job."""
            return json.loads(job_file.read_text()).get("decisions", 0) if job_file.is_file() else 0

        processes: list[trio.Process] = []
        try:
            async with trio.open_nursery() as nursery:

                async def ask() -> None:
                    seen["result"] = await head.client.ask("@learner", req)

                remote = await trio.lowlevel.open_process(
                    machine.argv(attach(head, "machine2", "learner-m2")),
                    env=disk("machine2"),
                    stderr=subprocess.PIPE,
                )
                processes.append(remote)
                await head.wait_for("learner", 1)
                nursery.start_soon(ask)
                await wait_until(
                    lambda: stored() >= 2 * EVERY, timeout=300,
                    what="two checkpoints in the head's store",
                )  # fmt: skip
                seen["stored_before_revoke"] = stored()
                seen["progress_at_revoke"] = head.client.progress["moving"].steps
                t0 = time.monotonic()
                await trio.to_thread.run_sync(keys, tmp, "revoke", "machine2")
                with trio.fail_after(30):
                    seen["remote_status"] = await remote.wait()
                seen["revoked_exit_s"] = round(time.monotonic() - t0, 2)
                seen["remote_stderr"] = (await remote.stderr.receive_some(65536) or b"").decode()
                seen["stored_at_revoke"] = stored()
                local = await trio.lowlevel.open_process(
                    attach(head, "machine1", "learner-m1"), env=disk("machine1")
                )
                processes.append(local)
                await wait_until(lambda: "result" in seen, timeout=300, what="the job's result")
        finally:
            # Nothing outlives the scenario, whatever happened (a process left in the
            # second namespace would keep it alive).
            for process in processes:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        return {}

    run = run_head_with(settings, driver)
    result = seen.pop("result", None)
    out = {
        **seen,
        "code": run.code,
        "run_dir": str(run.run_dir),
        "result": None
        if result is None
        else {
            "actor_id": result.actor_id,
            "resumed_from": result.resumed_from,
            "steps_lost": result.steps_lost,
            "steps": result.steps,
            "failure": getattr(result, "failure", ""),
        },
        "leftover_machine2": sorted(
            str(p.relative_to(tmp / "machine2"))
            for p in (tmp / "machine2").rglob("*")
            if p.is_file()
        ),
    }
    return out


def main() -> int:
    tmp = Path(sys.argv[1])
    with second_machine() as machine:
        out = scenario(tmp, machine)
    (tmp / "scenario.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
