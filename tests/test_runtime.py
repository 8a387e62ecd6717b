"""The runtime end to end: a real head, real actor processes, real ZeroMQ sockets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import trio
from helpers import (
    ROOT,
    alive,
    make_settings,
    read_events,
    run_head_with,
    wait_until,
    wait_until_blocking,
)

from messages.control import Failure, Probe, ProbeReply
from runtime.actor import RemoteFailure
from runtime.config import ActorSettings
from runtime.head import (
    STALE_SOCKET_AGE_S,
    Head,
    claim_ipc_path,
    ipc_path,
    private_ipc_dir,
    socket_state,
)
from runtime.security import create_keys

JOBS = 10_000
WINDOW = 256  # jobs in flight at once: keeps every actor busy without flooding queues


def test_ten_thousand_role_routed_jobs_none_lost_or_duplicated(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, {"probe": ActorSettings(count=3, capacity=8)})
    answers: list[int] = []
    by_actor: Counter[str] = Counter()

    async def driver(head: Head) -> dict:
        await head.wait_for("probe", 3)
        window = trio.Semaphore(WINDOW)

        async def one(seq: int) -> None:
            try:
                reply = await head.client.ask("@probe", Probe(seq=seq, payload=b"%d" % seq))
                assert isinstance(reply, ProbeReply) and reply.payload == b"%d" % seq
                answers.append(reply.seq)
                by_actor[reply.actor_id] += 1
            finally:
                window.release()

        async with trio.open_nursery() as nursery:
            for seq in range(JOBS):
                await window.acquire()
                nursery.start_soon(one, seq)
        status = head.broker.status()
        return {"completed": status.completed, "requeued": status.requeued}

    run = run_head_with(settings, driver)
    assert run.code == 0
    assert len(answers) == JOBS
    assert sorted(answers) == list(range(JOBS))  # none lost, none twice
    assert set(by_actor) == {"probe-0", "probe-1", "probe-2"}  # all three did work
    assert run.report["completed"] == JOBS


def test_kill_9_mid_job_restarts_the_actor_and_the_job_completes(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, {"probe": ActorSettings(count=2, capacity=1)})
    replies: list[ProbeReply] = []
    killed: list[str] = []

    async def driver(head: Head) -> dict:
        await head.wait_for("probe", 2)

        async def one(seq: int) -> None:
            replies.append(await head.client.ask("@probe", Probe(seq=seq, hold_s=1.5)))

        async with trio.open_nursery() as nursery:
            for seq in range(4):
                nursery.start_soon(one, seq)

            def both_holding() -> list:
                busy = [a for a in head.broker.status().actors if a.role == "probe" and a.inflight]
                return busy if len(busy) == 2 else []

            busy = await wait_until(both_holding, timeout=10, what="both actors holding a job")
            assert busy, "no actor was working"
            os.kill(busy[0].pid, signal.SIGKILL)
            killed.append(busy[0].actor_id)
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    assert sorted(r.seq for r in replies) == [0, 1, 2, 3]
    exits = run.named("actor_process_exited")
    assert any(e["actor_id"] == killed[0] and e["cause"] == "signal SIGKILL" for e in exits)
    assert run.named("job_requeued"), "the killed actor's job was not requeued"
    registrations = [e for e in run.named("actor_registered") if e["actor_id"] == killed[0]]
    assert len(registrations) == 2  # the same id came back after the restart


def test_a_job_that_keeps_killing_its_actor_fails_after_max_tries(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, {"probe": ActorSettings(count=1)}, max_job_tries=2, restart_limit=10
    )
    outcome: dict = {}

    async def driver(head: Head) -> dict:
        await head.wait_for("probe", 1)
        try:
            await head.client.ask("@probe", Probe(seq=1, crash=True), timeout=60)
        except RemoteFailure as exc:
            outcome["failure"] = exc.failure
        # The run carries on: the restarted actor serves the next job.
        outcome["after"] = await head.client.ask("@probe", Probe(seq=2), timeout=60)
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    failure = outcome["failure"]
    assert isinstance(failure, Failure)
    assert failure.reason == "job_failed" and failure.attempts == 2
    assert outcome["after"].seq == 2
    failed = run.named("job_failed")
    assert len(failed) == 1 and failed[0]["attempts"] == 2


def test_restart_intensity_exceeded_stops_the_run_with_an_error(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, {"probe": ActorSettings(count=1)}, max_job_tries=5, restart_limit=1
    )

    async def driver(head: Head) -> dict:
        await head.wait_for("probe", 1)
        await head.client.ask("@probe", Probe(crash=True), timeout=60)
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 1
    failed = run.named("run_failed")
    assert failed and failed[0]["reason"] == "restart_intensity"
    assert "restart_limit" in failed[0]["detail"]
    assert not (run.run_dir / "report.json").exists()
    # Whatever ended the run, the head's space reserve (runtime/head.py) is not left.
    assert not (run.run_dir / ".space-reserve").exists()


def test_blocking_work_does_not_stop_heartbeats(tmp_path: Path) -> None:
    # A 2.5 s job on an actor whose heartbeat timeout is 1 s: it must not be presumed dead.
    settings = make_settings(
        tmp_path, {"probe": ActorSettings(count=1)}, heartbeat_interval=0.1, heartbeat_timeout=1.0
    )

    async def driver(head: Head) -> dict:
        await head.wait_for("probe", 1)
        reply = await head.client.ask("@probe", Probe(seq=9, hold_s=2.5), timeout=30)
        return {"seq": reply.seq}

    run = run_head_with(settings, driver)
    assert run.code == 0 and run.report["seq"] == 9
    assert not [e for e in run.named("actor_lost") if e["reason"] == "heartbeat_missed"]


def test_queued_job_goes_to_an_actor_attached_over_curve_and_a_wrong_key_is_refused(
    tmp_path: Path,
) -> None:
    keys = create_keys(tmp_path / "keys")
    wrong = create_keys(tmp_path / "wrong-keys")
    # The impostor knows the head's public key but holds a client key the head never saw.
    (wrong / "server.key").write_bytes((keys / "server.key").read_bytes())
    settings = make_settings(tmp_path, listen="tcp://127.0.0.1:0", keys_dir=str(keys))
    seen: dict = {}

    async def attach(head: Head, keys_dir: Path) -> trio.Process:
        argv = [sys.executable, str(ROOT / "run.py"), "attach", "probe", "--connect", head.listen]
        return await trio.lowlevel.open_process([*argv, "--keys", str(keys_dir), "--quiet"])

    async def driver(head: Head) -> dict:
        assert head.listen.startswith("tcp://127.0.0.1:")
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                seen["reply"] = await head.client.ask("@probe", Probe(seq=42), timeout=60)

            nursery.start_soon(ask)
            queued = await wait_until(
                lambda: head.broker.status().queued, timeout=10, what="the ask queued"
            )
            assert queued == {"@probe": 1}  # waiting, not lost
            impostor = await attach(head, wrong)
            await wait_until(
                lambda: _events_named(head.run_dir, "peer_refused"),
                timeout=30,
                what="the impostor refused",
            )
            seen["registered_while_impostor"] = len(head.broker.peers)
            with trio.fail_after(30):
                seen["impostor_exit"] = await impostor.wait()  # it gives up by itself
            friend = await attach(head, keys)
            try:
                await wait_until(lambda: "reply" in seen, timeout=60, what="the queued reply")
            finally:
                friend.terminate()
                await friend.wait()
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    assert seen["reply"].seq == 42
    assert seen["registered_while_impostor"] == 2  # only the head's own client and store
    assert seen["impostor_exit"] == 2  # a clear error, not an endless retry
    refused = run.named("peer_refused")
    assert refused and refused[0]["reason"] == "unknown client key"


def _events_named(run_dir: Path, name: str) -> list[str]:
    path = run_dir / "events.jsonl"
    return [line for line in path.read_text().splitlines() if f'"event":"{name}"' in line]


def _start_head(tmp_path: Path, count: int) -> tuple[subprocess.Popen, Path]:
    config = tmp_path / "hold.toml"
    config.write_text(
        f'[run]\nname = "hold"\nruns_dir = "{tmp_path / "runs"}"\n[actors.probe]\ncount = {count}\n'
    )
    head = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "head_until_signal.py"), str(config)],
        stderr=subprocess.DEVNULL,
    )
    return head, tmp_path / "runs"


def _wait_for_event(runs: Path, name: str, timeout: float = 60) -> Path:
    def run_dir() -> Path | None:
        for events in runs.glob("*/events.jsonl"):
            if f'"event":"{name}"' in events.read_text():
                return events.parent
        return None

    return wait_until_blocking(run_dir, timeout=timeout, what=f"a {name} event")


def test_sigterm_to_the_head_leaves_no_child_process_and_no_ipc_file(tmp_path: Path) -> None:
    for signum, expected in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        case = tmp_path / signum.name
        case.mkdir()
        head, runs = _start_head(case, count=3)
        try:
            run_dir = _wait_for_event(runs, "actors_ready")
            pids = [e["pid"] for e in read_events(run_dir) if e["event"] == "actor_process_started"]
            ipc = next(e["endpoint"] for e in read_events(run_dir) if e["event"] == "run_started")
            assert len(pids) == 3 and all(alive(p) for p in pids)
            head.send_signal(signum)
            assert head.wait(timeout=30) == expected
        finally:
            head.kill()
        assert not [p for p in pids if alive(p)], "an actor process outlived the head"
        assert not Path(ipc.removeprefix("ipc://")).exists()
        stopped = [e for e in read_events(run_dir) if e["event"] == "run_stopped"]
        assert stopped and stopped[0]["status"] == expected


def test_an_abandoned_ask_cancels_its_job_queued_or_running(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, {"probe": ActorSettings(count=1)})
    seen: dict = {}

    async def driver(head: Head) -> dict:
        await head.wait_for("probe", 1)
        async with trio.open_nursery() as nursery:
            # The first holds the only actor for 30 s; the second waits in the queue.
            nursery.start_soon(_expect_timeout, head, 1, seen, 1.0)
            await wait_until(
                lambda: head.broker.status().actors[-1].inflight, timeout=5, what="job 1 running"
            )
            nursery.start_soon(_expect_timeout, head, 2, seen, 0.3)
        started = trio.current_time()
        reply = await head.client.ask("@probe", Probe(seq=3), timeout=10)
        seen["free_after_s"] = trio.current_time() - started
        seen["reply"] = reply.seq
        seen["status"] = head.broker.status()
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    assert seen[1] == seen[2] == "timed out"
    # The actor was freed at once (its 30 s sleep thread is abandoned, not waited for).
    assert seen["reply"] == 3 and seen["free_after_s"] < 5
    assert seen["status"].queued == {} and seen["status"].actors[-1].inflight == 0
    broker_side = [e for e in run.named("job_cancelled") if e["actor"] == "head"]
    assert sorted(e["running"] for e in broker_side) == [False, True]
    assert [e for e in run.named("job_cancelled") if e["actor"] == "probe-0"]


async def _expect_timeout(head: Head, seq: int, seen: dict, timeout: float) -> None:
    try:
        await head.client.ask("@probe", Probe(seq=seq, hold_s=30), timeout=timeout)
    except trio.TooSlowError:
        seen[seq] = "timed out"


def test_a_socket_file_left_by_a_killed_head_goes_at_the_next_start_a_live_heads_stays(
    tmp_path: Path,
) -> None:
    for case in "ab":
        (tmp_path / case).mkdir()
    live, runs_live = _start_head(tmp_path / "a", count=0)
    killed = None
    try:
        serving = _ipc_file(_wait_for_event(runs_live, "actors_ready"))
        killed, runs_killed = _start_head(tmp_path / "b", count=0)
        stale = _ipc_file(_wait_for_event(runs_killed, "actors_ready"))
        killed.kill()  # SIGKILL: no finally runs, the socket file stays
        killed.wait(timeout=30)
        assert stale.exists() and socket_state(stale) == "stale"
        # (A file younger than STALE_SOCKET_AGE_S may be a head between bind and listen.)
        wait_until_blocking(
            lambda: time.time() - stale.stat().st_mtime > STALE_SOCKET_AGE_S,
            timeout=10,
            what="the socket file old enough to be a leftover",
        )
        settings = make_settings(tmp_path / "c", {"probe": ActorSettings(count=1)})

        async def driver(head: Head) -> dict:
            await head.wait_for("probe", 1)
            reply = await head.client.ask("@probe", Probe(seq=3), timeout=60)
            return {"seq": reply.seq}

        run = run_head_with(settings, driver)
        assert run.code == 0 and run.report["seq"] == 3
        assert not stale.exists()
        assert [e["path"] for e in run.named("stale_socket_removed")] == [str(stale)]
        # The live head was not disturbed: its socket is there and answers, and it stops
        # as usual.
        assert socket_state(serving) == "live"
        live.send_signal(signal.SIGTERM)
        assert live.wait(timeout=30) == 143
        assert not serving.exists()
    finally:
        live.kill()
        if killed is not None:
            killed.kill()


def _ipc_file(run_dir: Path) -> Path:
    started = next(e for e in read_events(run_dir) if e["event"] == "run_started")
    return Path(started["endpoint"].removeprefix("ipc://"))


def test_a_resume_whose_socket_a_live_head_serves_is_refused_and_leaves_it(tmp_path: Path) -> None:
    import zmq

    path = ipc_path("live-claim-test")
    private_ipc_dir(path)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    try:
        sock.bind(f"ipc://{path}")
        with pytest.raises(RuntimeError, match="another head serves this run"):
            claim_ipc_path(path)
        assert socket_state(path) == "live"
    finally:
        ctx.destroy(linger=0)
        path.unlink(missing_ok=True)
