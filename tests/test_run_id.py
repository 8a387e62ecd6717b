"""``--run-id``: a head named by its launcher, and workers that wait for that head (started
before it) and refuse a head of another run. Real head, real attach processes, real
CURVE on loopback tcp."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from helpers import ROOT, free_port, make_settings, read_events, wait_until_blocking

from messages.control import Probe
from runtime.head import Head, new_run_dir, run_head
from runtime.security import create_keys

RUN = [sys.executable, str(ROOT / "run.py")]


def _attach(connect: str, keys: Path, run_id: str, log: Path, *extra: str) -> subprocess.Popen:
    argv = [*RUN, "attach", "probe", "--connect", connect, "--keys", str(keys)]
    with log.open("w") as out:
        return subprocess.Popen(
            [*argv, "--run-id", run_id, "--quiet", *extra], stderr=out, stdout=out, text=True
        )


def test_a_worker_started_before_its_head_waits_joins_it_and_one_for_another_run_is_refused(
    tmp_path: Path,
) -> None:
    keys = create_keys(tmp_path / "keys")
    connect = f"tcp://127.0.0.1:{free_port()}"
    early_log, wrong_log = tmp_path / "early.log", tmp_path / "wrong.log"
    early = _attach(connect, keys, "run-a", early_log, "--wait", "120")
    wrong = None
    try:
        # It waits, saying so, before any head exists.
        wait_until_blocking(
            lambda: "waiting for the head of run run-a" in early_log.read_text(),
            timeout=60,
            what="the early worker's progress line",
        )
        settings = make_settings(tmp_path, listen=connect, keys_dir=str(keys))
        run_id, run_dir = new_run_dir(settings, "run-a")
        assert run_dir == tmp_path / "runs" / "run-a"
        seen: dict = {}

        async def driver(head: Head) -> dict:
            nonlocal wrong
            wrong = _attach(connect, keys, "run-b", wrong_log, "--wait", "60")
            seen["wrong_exit"] = await trio.to_thread.run_sync(wrong.wait, 60)
            await head.wait_for("probe", 1, timeout=60)
            reply = await head.client.ask("@probe", Probe(seq=7), timeout=60)
            seen["seq"] = reply.seq
            seen["probes"] = [a.pid for a in head.broker.status().actors if a.role == "probe"]
            return {}

        code = trio.run(run_head, settings, run_dir, run_id, driver)
        assert code == 0
        assert seen["seq"] == 7 and seen["probes"] == [early.pid]
        # The early worker leaves when its head finishes the run.
        assert early.wait(timeout=30) == 0, early_log.read_text()
        # The worker for another run was refused, clearly, and never registered.
        assert seen["wrong_exit"] == 2
        said = wrong_log.read_text()
        assert "this head serves run 'run-a', not 'run-b'" in said, said
        registered = [e for e in read_events(run_dir) if e["event"] == "actor_registered"]
        assert [e["pid"] for e in registered if e["role"] == "probe"] == [early.pid]
        refused = [e for e in read_events(run_dir) if e["event"] == "registration_refused"]
        assert refused and refused[0]["reason"] == "wrong_run"
    finally:
        for proc in (early, wrong):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_worker_gives_up_after_its_wait_with_a_clear_message(tmp_path: Path) -> None:
    keys = create_keys(tmp_path / "keys")
    connect = f"tcp://127.0.0.1:{free_port()}"  # no head will ever listen here
    started = time.monotonic()
    done = subprocess.run(
        [*RUN, "attach", "probe", "--connect", connect, "--keys", str(keys)]
        + ["--run-id", "never", "--wait", "1", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    assert f"no head answered at {connect} within 1 s (--wait)" in done.stderr
    assert "is the head of run never running" in done.stderr
    assert took < 30


def test_a_head_named_by_run_id_makes_that_folder_and_resumes_it_when_named_again(
    tmp_path: Path,
) -> None:
    config = tmp_path / "checkup.toml"
    config.write_text('[run]\ndriver = "checkup"\n[actors.probe]\ncount = 1\n')

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*RUN, "--config", str(config), "--quiet", *args],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    first = run("--run-id", "named-1")
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "runs" / "named-1"
    assert json.loads((run_dir / "report.json").read_text())["roles"]["probe"]["jobs"] == 20
    again = run("--run-id", "named-1")
    assert again.returncode == 0, again.stderr
    assert "run named-1 resumed" in again.stderr
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["named-1"]


def test_run_id_errors_exit_2_naming_the_fix(tmp_path: Path) -> None:
    config = tmp_path / "checkup.toml"
    config.write_text('[run]\ndriver = "checkup"\n[actors.probe]\ncount = 1\n')
    (tmp_path / "runs" / "not-a-run").mkdir(parents=True)
    cases = {
        ("--run-id", "../up"): "cannot name a run folder (it holds '/')",
        ("--run-id", "not-a-run"): "holds no config.json (it is not a run folder)",
        ("--run-id", "x", "--resume", "runs/x"): "both name the run; pass one",
    }
    for args, expect in cases.items():
        done = subprocess.run(
            [*RUN, "--config", str(config), *args],
            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2 and expect in done.stderr, (args, done.stderr)
    bad = subprocess.run(
        [*RUN, "attach", "probe", "--connect", "tcp://127.0.0.1:9", "--run-id", "a b"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "cannot name a run folder" in bad.stderr


def test_the_deploy_demo_configs_load_and_start_no_learner_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actors import ROLES
    from method import settings

    monkeypatch.chdir(tmp_path)  # keys_dir = "keys" is read from where the head runs
    create_keys(tmp_path / "keys")
    for name in ("attach-demo.toml", "cluster-demo.toml"):
        s = settings.load(str(ROOT / "deploy" / name), ROLES)
        settings.check_runnable(s)
        assert s.actors["learner"].count == 0 and s.task.learn == ["collect_wood"]
        assert s.runtime.listen.endswith(":5555") and s.runtime.keys_dir == "keys"
