"""Liveness that survives a pause: a head stopped from outside (Ctrl-Z, a VM pause, a
console nobody reads) declares no one dead and runs no job twice when it goes on."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from helpers import ROOT, make_settings, read_events, run_head_with, wait_until, wait_until_blocking
from test_method import SMALL

from messages import BROKER, Envelope
from messages.control import Heartbeat, Probe, ProbeReply
from runtime.actor import Actor, handles
from runtime.head import Head

SCRIPT = ROOT / "tests" / "head_until_signal.py"
HEARTBEAT_TIMEOUT_S = 1.0
"""Small, so a pause of a few seconds is several heartbeat timeouts long."""
RUN_HEARTBEAT_TIMEOUT_S = 6.0
"""A whole run's heartbeat timeout: small, so pausing for two of them stays quick, yet
above what a learner's GIL-holding thread can delay a heartbeat on a loaded 2-core
machine (3 s was passed once with another test suite running beside this one)."""
PAUSE_S = 3.0
"""How long the head stays stopped: three heartbeat timeouts, and well inside the
jobs' hold (``JOB_HOLD_S`` = 6 s) so they still run when it goes on."""


def _config(tmp_path: Path, probes: int) -> Path:
    config = tmp_path / "head.toml"
    actors = f"[actors.probe]\ncount = {probes}\n" if probes else ""
    config.write_text(
        f'[run]\nname = "pause"\nruns_dir = "{tmp_path / "runs"}"\n'
        f"[runtime]\nheartbeat_interval = 0.2\nheartbeat_timeout = {HEARTBEAT_TIMEOUT_S}\n" + actors
    )
    return config


def _run_dir_with(runs: Path, name: str, timeout: float) -> Path:
    def find() -> Path | None:
        for events in runs.glob("*/events.jsonl"):
            if f'"event":"{name}"' in events.read_text():
                return events.parent
        return None

    return wait_until_blocking(find, timeout=timeout, what=f"a {name} event")


def test_a_head_paused_past_the_heartbeat_timeout_declares_no_one_dead_and_runs_jobs_once(
    tmp_path: Path,
) -> None:
    head = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(_config(tmp_path, probes=2)), "jobs"],
        stderr=subprocess.DEVNULL,
    )
    try:
        run_dir = _run_dir_with(tmp_path / "runs", "jobs_running", timeout=90)
        head.send_signal(signal.SIGSTOP)
        time.sleep(PAUSE_S)  # the pause under test: nothing to wait for but the clock
        head.send_signal(signal.SIGCONT)
        assert head.wait(timeout=60) == 0
    finally:
        head.kill()
    events = read_events(run_dir)
    named = lambda name: [e for e in events if e["event"] == name]  # noqa: E731
    finished = events.index(named("run_finished")[0])
    lost = [e for e in events[:finished] if e["event"] == "actor_lost"]
    assert not lost, "an actor was declared dead after the pause"
    assert not named("job_requeued") and not named("actor_process_killed")
    paused = named("head_paused")
    assert paused and paused[0]["paused_s"] >= PAUSE_S - 0.5
    # The in-process agent ran its job once; every job was answered by its first actor.
    assert [e["seq"] for e in named("holder_job_started")] == [0]
    assert named("run_finished")[0]["restarts"] == 0
    answers = json.loads((run_dir / "report.json").read_text())["answers"]
    assert answers["0"] == "holder" and sorted(answers) == ["0", "1", "2"]
    assert len(named("actor_registered")) == 5  # head, artifacts, holder, two probes: each once


@pytest.mark.slow  # 13-29 s each: keeps the default suite under 10 min; CI runs `-m slow` too
def test_a_paused_run_makes_one_plan_trains_each_job_once_and_keeps_its_budget(
    tmp_path: Path,
) -> None:
    # The method end to end (offline backend, real environment and learner processes):
    # the head stopped mid-training for two heartbeat timeouts, then continued.
    config = tmp_path / "small.toml"
    timeout = "heartbeat_timeout = 10.0"
    assert timeout in SMALL
    config.write_text(
        SMALL.replace("iterations = 2", "iterations = 1").replace(
            timeout, f"heartbeat_timeout = {RUN_HEARTBEAT_TIMEOUT_S}"
        )
    )
    run = subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), "--config", str(config)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        run_dir = _run_dir_with(tmp_path / "runs", "training_started", timeout=400)
        run.send_signal(signal.SIGSTOP)
        time.sleep(2 * RUN_HEARTBEAT_TIMEOUT_S)  # the pause under test
        run.send_signal(signal.SIGCONT)
        assert run.wait(timeout=500) == 0
    finally:
        run.kill()
    events = read_events(run_dir)
    named = lambda name: [e for e in events if e["event"] == name]  # noqa: E731
    # Before the fix this run made 2 plans, trained its one job 4 times and booked 13,409
    # env steps against the 8,000 budget.
    assert len(named("plan_made")) == 1
    trained = [e["job"] for e in named("training_started")]
    assert trained and len(trained) == len(set(trained))  # each training job once
    assert len(named("training_result")) == len(set(trained))
    ledger = [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
    assert sum(line["steps"] for line in ledger) <= 8000  # SMALL's env_steps budget
    assert not [e for e in named("actor_lost") if e["reason"] == "heartbeat_missed"]
    assert named("head_paused")


class Counter(Actor):
    """Counts how often its job handler starts."""

    role = "counter"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.starts: list[int] = []
        self.heartbeats = True

    @handles(Probe)
    async def on_probe(self, msg: Probe, env: Envelope) -> ProbeReply:
        self.starts.append(msg.seq)
        await trio.sleep(msg.hold_s)
        return ProbeReply(msg.seq, msg.payload, self.actor_id)

    async def _heartbeat(self) -> None:
        while True:
            await trio.sleep(self.heartbeat_interval)
            if self.heartbeats:
                self.tell(BROKER, Heartbeat(self.inflight))


def test_an_in_process_agent_is_never_reaped_for_silence(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, heartbeat_interval=0.1, heartbeat_timeout=0.5)
    seen: dict = {}

    class Mute(Actor):
        role = "mute"

        async def _heartbeat(self) -> None:
            await trio.sleep_forever()  # as if starved: it never says it is alive

    async def driver(head: Head) -> dict:
        await head.start_local(Mute(name="mute"))
        await trio.sleep(4 * 0.5)  # four heartbeat timeouts of silence
        seen["peers"] = sorted(head.broker.peers)
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    assert seen["peers"] == ["artifacts", "head", "mute"]
    assert not run.named("actor_lost")


def test_a_redelivered_job_is_not_run_twice_by_the_actor_already_running_it(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, heartbeat_interval=0.1, heartbeat_timeout=1.0)
    counter = Counter(name="counter")
    seen: dict = {}

    async def driver(head: Head) -> dict:
        await head.start_local(counter)
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                seen["reply"] = await head.client.ask("counter", Probe(seq=7, hold_s=2.0))

            nursery.start_soon(ask)
            await wait_until(lambda: counter.starts, timeout=10, what="the job running")
            # The broker presumes the actor dead (as after a missed heartbeat): the job is
            # taken back and, once the actor registers again, handed to it a second time.
            head.broker.remove(head.broker.peers["counter"], "heartbeat_missed")
            await wait_until(
                lambda: _named(head.run_dir, "job_redelivered"), timeout=10, what="redelivery"
            )
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    assert counter.starts == [7]  # one handler, not two
    assert seen["reply"].seq == 7
    redelivered = run.named("job_redelivered")
    assert len(redelivered) == 1 and redelivered[0]["running"] is True
    assert not run.named("reply_dropped")


def test_a_job_finished_while_its_actor_was_presumed_dead_is_answered_without_a_rerun(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, heartbeat_interval=0.1, heartbeat_timeout=1.0)
    counter = Counter(name="counter")
    seen: dict = {}

    async def driver(head: Head) -> dict:
        await head.start_local(counter)
        counter.heartbeats = False  # it learns it was forgotten only when it answers
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                seen["reply"] = await head.client.ask("counter", Probe(seq=8, hold_s=1.0))

            nursery.start_soon(ask)
            await wait_until(lambda: counter.starts, timeout=10, what="the job running")
            head.broker.remove(head.broker.peers["counter"], "heartbeat_missed")
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    assert counter.starts == [8]
    assert seen["reply"].seq == 8
    redelivered = run.named("job_redelivered")
    assert len(redelivered) == 1 and redelivered[0]["running"] is False


def test_a_console_nobody_reads_does_not_stop_the_head_from_finishing(tmp_path: Path) -> None:
    head = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(_config(tmp_path, probes=0)), "chatter"],
        stderr=subprocess.PIPE,  # never read: it fills after 64 KiB
    )
    try:
        code = head.wait(timeout=60)
    finally:
        head.kill()
        head.stderr.close()
    assert code == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    events = read_events(run_dir)
    assert len([e for e in events if e["event"] == "chatter"]) == 3000  # the file has all
    dropped = [e for e in events if e["event"] == "console_dropped"]
    assert dropped and sum(e["lines"] for e in dropped) > 0
    assert [e for e in events if e["event"] == "run_finished"]


def _named(run_dir: Path, name: str) -> list[str]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [line for line in lines if f'"event":"{name}"' in line]
