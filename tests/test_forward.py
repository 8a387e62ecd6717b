"""An attached actor's events reach the head's events.jsonl (runtime/forward.py): real
heads, a real ``run.py attach`` process over loopback tcp with CURVE, real sockets."""

from __future__ import annotations

import errno
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import trio
import zmq
from helpers import ROOT, free_port, make_settings, read_events, wait_until, wait_until_blocking

from messages import (
    ASK,
    BROKER,
    REPLY,
    TELL,
    Envelope,
    decode,
    decode_envelope,
    encode,
    encode_envelope,
)
from messages.control import Probe, Register
from messages.events import EventBatch, EventsTaken
from runtime import events, provenance
from runtime.forward import LIMITED_REPORT_S, EventForwarder, EventIntake
from runtime.head import Head, new_run_dir, run_head
from runtime.security import create_keys

HOST = socket.gethostname()


def _attach(head_listen: str, keys: Path, log: Path, *extra: str) -> subprocess.Popen:
    """``run.py attach probe`` as on another machine: keys, no --run-dir."""
    argv = [sys.executable, str(ROOT / "run.py"), "attach", "probe", "--connect", head_listen]
    out = log.open("wb")
    return subprocess.Popen([*argv, "--keys", str(keys), *extra], stdout=out, stderr=out)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
    proc.wait(timeout=30)


def _remote(run_dir: Path, event: str = "") -> list[dict]:
    return [
        e
        for e in read_events(run_dir)
        if e.get("remote") is True and (not event or e.get("event") == event)
    ]


def test_an_attached_actors_events_land_in_the_heads_log_with_its_host(tmp_path: Path) -> None:
    # A small frame cap: the 2,000 events need many batches, each under it.
    cap = 64 * 1024
    keys = create_keys(tmp_path / "keys")
    settings = make_settings(
        tmp_path, listen="tcp://127.0.0.1:0", keys_dir=str(keys), max_frame_bytes=cap
    )
    log = tmp_path / "actor.log"
    seen: dict = {}

    async def driver(head: Head) -> dict:
        proc = _attach(head.listen, keys, log, "--name", "far", "--max-frame-bytes", str(cap))
        try:
            await head.wait_for("probe", 1, timeout=60)
            reply = await head.client.ask("far", Probe(seq=7, log_events=2000), timeout=60)
            seen["reply"] = reply.seq
            await wait_until(
                lambda: len(_remote(head.run_dir, "probe_event")) >= 2000,
                timeout=30,
                what="the 2,000 events in the head's events.jsonl",
            )
            # Stopped while the head goes on: what it logged on its way out comes too.
            proc.terminate()
            await wait_until(
                lambda: _remote(head.run_dir, "actor_stopped"), timeout=30, what="its last events"
            )
        finally:
            _stop(proc)
        return {}

    run_id, run_dir = new_run_dir(settings)
    assert trio.run(run_head, settings, run_dir, run_id, driver) == 0
    assert seen["reply"] == 7
    got = _remote(run_dir, "probe_event")
    assert sorted(e["i"] for e in got) == list(range(2000))  # each once, none lost
    assert {(e["actor"], e["role"], e["host"], e["run"]) for e in got} == {
        ("far", "probe", HOST, run_id)
    }
    # Their own time, from the actor's log (logged before the head wrote them, in order).
    stamps = [e["ts"] for e in got]
    assert stamps == sorted(stamps)
    assert not [e for e in read_events(run_dir) if e.get("event") == "message_rejected"]
    assert _remote(run_dir, "actor_started")  # logged before its first batch went
    # The actor keeps its own log as before: every event there too.
    assert log.read_text().count("probe_event") == 2000
    # ``run.py tail`` shows them, named with their host.
    tail = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "tail", str(run_dir), "--no-follow"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    shown = [line for line in tail.stdout.splitlines() if "probe_event" in line]
    assert len(shown) == 2000
    assert all(f"far@{HOST}" in line for line in shown)


def test_events_logged_while_the_head_is_gone_are_dropped_counted_and_reported_when_it_is_back(
    tmp_path: Path,
) -> None:
    keys = create_keys(tmp_path / "keys")
    listen = f"tcp://127.0.0.1:{free_port()}"
    settings = make_settings(tmp_path, listen=listen, keys_dir=str(keys))
    run_id, run_dir = new_run_dir(settings)
    log = tmp_path / "actor.log"
    count, queue = 300, 100
    procs: list[subprocess.Popen] = []

    async def first(head: Head) -> dict:
        procs.append(_attach(head.listen, keys, log, "--name", "far", "--events-queue", str(queue)))
        await head.wait_for("probe", 1, timeout=60)
        # 300 events over 3 s, most of them after this head is gone.
        head.client.tell("far", Probe(seq=1, hold_s=3.0, log_events=count))
        await wait_until(
            lambda: _remote(head.run_dir, "probe_event"), timeout=30, what="the first events"
        )
        raise RuntimeError("the head dies")  # no shutdown for the actor: it just goes away

    async def second(head: Head) -> dict:
        def last_event_in() -> bool:
            return any(e["i"] == count - 1 for e in _remote(head.run_dir, "probe_event"))

        await wait_until(last_event_in, timeout=60, what="the last event, after the outage")
        return {}

    try:
        assert trio.run(run_head, settings, run_dir, run_id, first) == 1
        # The head stays away until the actor has logged every event (its own log shows).
        wait_until_blocking(
            lambda: f"i={count - 1}" in log.read_text(), timeout=60, what="all events logged"
        )
        assert trio.run(run_head, settings, run_dir, run_id, second) == 0
    finally:
        for proc in procs:
            _stop(proc)
    records = read_events(run_dir)
    remote = [e for e in records if e.get("remote") is True]
    got = {e["i"] for e in remote if e["event"] == "probe_event"}
    notices = [e for e in remote if e["event"] == "events_dropped"]
    assert len(notices) == 1, notices
    dropped = notices[0]["events"]
    assert dropped > 0 and notices[0]["reason"] == "queue_full"
    # Every event is accounted for: at the head, or counted as dropped.
    missing = sorted(set(range(count)) - got)
    assert len(missing) == dropped
    # Oldest first: the dropped ones are one stretch, and the notice stands in their place.
    assert missing == list(range(missing[0], missing[-1] + 1))
    at = records.index(notices[0])
    before = {e["i"] for e in records[:at] if e.get("event") == "probe_event"}
    after = {e["i"] for e in records[at:] if e.get("event") == "probe_event"}
    assert before and max(before) < missing[0] and min(after) > missing[-1]
    # And the actor's own log has them all, and said what it dropped.
    text = log.read_text()
    assert text.count("probe_event") == count
    assert "events_forwarding_paused" in text and f"events={dropped}" in text


def test_an_actor_whose_head_never_comes_back_says_on_its_own_log_what_it_dropped(
    tmp_path: Path,
) -> None:
    keys = create_keys(tmp_path / "keys")
    settings = make_settings(tmp_path, listen="tcp://127.0.0.1:0", keys_dir=str(keys))
    log = tmp_path / "actor.log"
    count = 200
    procs: list[subprocess.Popen] = []

    async def driver(head: Head) -> dict:
        procs.append(_attach(head.listen, keys, log, "--name", "far", "--events-queue", "50"))
        await head.wait_for("probe", 1, timeout=60)
        head.client.tell("far", Probe(seq=1, hold_s=1.0, log_events=count))
        await wait_until(
            lambda: _remote(head.run_dir, "probe_event"), timeout=30, what="the first events"
        )
        raise RuntimeError("the head dies for good")

    run_id, run_dir = new_run_dir(settings)
    try:
        assert trio.run(run_head, settings, run_dir, run_id, driver) == 1
        wait_until_blocking(
            lambda: f"i={count - 1}" in log.read_text(), timeout=60, what="all events logged"
        )
    finally:
        for proc in procs:
            _stop(proc)  # SIGTERM: it stops as it would with no head to tell it
    said = [line for line in log.read_text().splitlines() if " events_dropped " in line]
    assert said, log.read_text()[-2000:]
    fields = dict(re.findall(r"(\w+)=(\S+)", said[-1]))
    assert int(fields["events"]) > 0 and int(fields["unsent"]) > 0
    assert 'reason="head unreachable"' in said[-1] or 'reason="head not answering"' in said[-1]
    delivered = {e["i"] for e in _remote(run_dir, "probe_event")}
    assert len(delivered) + int(fields["events"]) + int(fields["unsent"]) >= count


def test_only_the_head_takes_events_and_it_names_the_sender_itself(tmp_path: Path) -> None:
    ctx = zmq.Context.instance()
    seen: dict = {}

    async def driver(head: Head) -> dict:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(head.endpoint)
        ids = iter(range(100))

        async def ask(to: str, msg: object, mode: int = ASK) -> object:
            msg_id = f"rogue.{next(ids)}"
            env = Envelope(mode, msg_id, to, "", "", type(msg).__message_kind__)
            sock.send_multipart([encode_envelope(env), encode(msg)])
            if mode == TELL:
                return None
            with trio.fail_after(30):
                while True:
                    while not sock.poll(0):
                        await trio.sleep(0.01)
                    header, body = sock.recv_multipart()
                    back = decode_envelope(header)
                    if back.mode == REPLY and back.re == msg_id:
                        return decode(body)

        try:
            mine = provenance.current()  # a rogue with this tree: registration is not the point
            hello = Register(role="probe", name="rogue", source_hash=mine.source_hash)
            await ask(BROKER, hello)
            forged = json.dumps({"event": "run_finished", "actor": "head", "role": "head"})
            batch = EventBatch("s1", 1, "elsewhere", [forged, "not json", "[1, 2]"])
            # To another actor: refused, never delivered.
            await ask("head", batch, mode=TELL)
            await wait_until(
                lambda: [e for e in read_events(head.run_dir) if e["event"] == "message_refused"],
                timeout=10,
                what="the refusal",
            )
            seen["taken"] = await ask(BROKER, batch)
            seen["again"] = await ask(BROKER, batch)  # a repeat (lost answer): skipped
        finally:
            sock.close(linger=0)
        return {}

    settings = make_settings(tmp_path)
    run_id, run_dir = new_run_dir(settings)
    assert trio.run(run_head, settings, run_dir, run_id, driver) == 0
    assert seen["taken"] == EventsTaken(1, 1)
    assert seen["again"] == EventsTaken(1, 0)
    records = read_events(run_dir)
    refused = [e for e in records if e["event"] == "message_refused"]
    assert refused[0]["kind"] == "events.batch" and refused[0]["to"] == "head"
    remote = [e for e in records if e.get("remote") is True]
    assert len(remote) == 1  # written once
    # Its host is the one it registered with (none), not the one its batch claims.
    assert (remote[0]["actor"], remote[0]["role"], remote[0]["host"]) == ("rogue", "probe", "")
    # The forged line did not end the run for ``run.py tail``: it is the rogue's.
    finished = [e for e in records if e["event"] == "run_finished"]
    assert [e["actor"] for e in finished] == ["rogue", "head"]
    rejected = [e for e in records if e["event"] == "remote_events_rejected"]
    assert rejected and rejected[0]["lines"] == 2


def test_a_batch_never_exceeds_the_frame_cap_and_an_oversize_event_becomes_a_stub() -> None:
    cap = 16 * 1024
    forwarder = EventForwarder("here", max_frame_bytes=cap)
    for i in range(500):
        forwarder.put(
            {"ts": f"t{i:04d}", "level": "info", "event": "chatter", "i": i, "pad": "x" * 300}
        )
    forwarder.put({"ts": "t9999", "level": "error", "event": "huge", "blob": "y" * (2 * cap)})
    batches = []
    while (batch := forwarder._take()) is not None:
        batches.append(batch)
    assert len(batches) > 10
    assert all(len(encode(b)) <= forwarder.batch_bytes <= cap // 4 for b in batches)
    lines = [json.loads(line) for b in batches for line in b.events]
    assert [e["i"] for e in lines if e["event"] == "chatter"] == list(range(500))
    assert lines[-1] == {
        "ts": "t9999",
        "level": "error",
        "event": "huge",
        "too_large": lines[-1]["too_large"],
        "limit": forwarder.batch_bytes,
    }
    assert lines[-1]["too_large"] > 2 * cap
    assert [b.seq for b in batches] == list(range(1, len(batches) + 1))


def test_a_full_disk_at_the_head_costs_a_batch_counted_never_an_exception(tmp_path: Path) -> None:
    events.configure(events_file=Path("/dev/full"), console=None)  # every write: ENOSPC
    try:
        intake = EventIntake()
        lines = [json.dumps({"ts": "t", "event": "chatter", "i": i}) for i in range(3)]
        taken = intake.take("far", "probe", EventBatch("s", 1, "there", lines), "run-1")
        assert taken == EventsTaken(1, 3)
        assert intake.written == 0
        error = events.file_error()
        assert error is not None and error.errno == errno.ENOSPC
    finally:
        events.close()


def test_an_actor_flooding_the_heads_log_is_cut_to_its_rate_and_the_rest_counted(
    tmp_path: Path,
) -> None:
    events.configure(events_file=tmp_path / "events.jsonl", console=None)
    clock = [100.0]
    try:
        # 10 events/s, bursts of 20 s worth (200): a flood of 3 batches of 150 at once.
        intake = EventIntake(per_s=10.0, now=lambda: clock[0])

        def batch(seq: int, actor: str = "far", n: int = 150) -> EventsTaken:
            lines = [json.dumps({"ts": "t", "event": "chatter", "i": i}) for i in range(n)]
            return intake.take(actor, "probe", EventBatch(actor, seq, "there", lines), "run-1")

        assert batch(1) == EventsTaken(1, 150)
        assert batch(2) == EventsTaken(2, 50)  # the burst is spent
        assert batch(3) == EventsTaken(3, 0)
        clock[0] += 3.0  # 3 s later: 30 more
        assert batch(4) == EventsTaken(4, 30)
        assert batch(1, actor="near") == EventsTaken(1, 150)  # per actor, not shared
        assert intake.limited == {"far": 100 + 150 + 120}
        clock[0] += LIMITED_REPORT_S
        intake.flush_limited()
    finally:
        events.close()
    logged = read_events(tmp_path)
    limited = [e for e in logged if e["event"] == "remote_events_limited"]
    # The first drop is reported at once, the rest counted into one summary.
    assert [e["dropped"] for e in limited] == [100, 150 + 120]
    assert limited[-1]["dropped_total"] == 370 and limited[0]["actor_id"] == "far"
    assert sum(1 for e in logged if e["event"] == "chatter") == 150 + 50 + 30 + 150
    # No limit: everything goes in.
    assert EventIntake(per_s=0.0)._allow("far", [10**6] * 5) == 5


def test_a_finished_run_keeps_what_its_attached_actors_logged_as_they_left(tmp_path: Path) -> None:
    keys = create_keys(tmp_path / "keys")
    settings = make_settings(tmp_path, listen="tcp://127.0.0.1:0", keys_dir=str(keys))
    log = tmp_path / "actor.log"
    procs: list[subprocess.Popen] = []

    async def driver(head: Head) -> dict:
        procs.append(_attach(head.listen, keys, log, "--name", "far"))
        await head.wait_for("probe", 1, timeout=60)
        await wait_until(
            lambda: _remote(head.run_dir, "actor_started"), timeout=30, what="its first events"
        )
        return {}  # the run ends now: the head tells "far" to leave

    run_id, run_dir = new_run_dir(settings)
    try:
        assert trio.run(run_head, settings, run_dir, run_id, driver) == 0
        assert procs[0].wait(timeout=30) == 0
    finally:
        for proc in procs:
            _stop(proc)
    # What it logged on its way out, after the head said the run was over, is in the file.
    stopped = _remote(run_dir, "actor_stopped")
    assert [e["reason"] for e in stopped] == ["run_finished"], log.read_text()[-2000:]


def test_hostile_lines_are_refused_counted_and_never_end_the_head(tmp_path: Path) -> None:
    events.configure(events_file=tmp_path / "events.jsonl", console=None)
    try:
        intake = EventIntake(per_s=10.0)  # a burst of 200 tokens: 1 per started KiB
        lines = [
            "[" * 100_000,  # nested deep enough to make json recurse out
            json.dumps({"event": "big", "pad": "x" * 70_000}),  # over the line cap
            json.dumps({"event": "fine", "host": "forged"}),
        ]
        batch = EventBatch("s", 1, "h" * 2_000_000, lines)  # its own host: ignored
        taken = intake.take("far", "probe", batch, "run-1", host="gpu1", key="gpu1")
        assert taken == EventsTaken(1, 1)
        assert intake.rejected == 2
        # A new name on the same key gets no fresh budget: 69 KiB + 98 KiB were spent.
        more = [json.dumps({"event": "pad", "p": "y" * 2000})] * 40  # 2 tokens each
        taken = intake.take("far-2", "probe", EventBatch("t", 1, "", more), "run-1", key="gpu1")
        assert taken.written < 20
    finally:
        events.close()
    (fine,) = [e for e in read_events(tmp_path) if e["event"] == "fine"]
    assert fine["host"] == "gpu1" and fine["actor"] == "far"
