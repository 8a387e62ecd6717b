"""The broker's inbound path: random and mutated frames never crash it; each refusal is
logged; routing state stays consistent. Plus a real-socket flood of garbage."""

from __future__ import annotations

import dataclasses
import itertools
import time

import pytest
import structlog
import trio
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from messages import (
    ASK,
    BROKER,
    REPLY,
    TELL,
    DecodeError,
    Envelope,
    decode,
    decode_envelope,
    encode,
    encode_envelope,
)
from messages.control import (
    Cancel,
    Failure,
    Heartbeat,
    Probe,
    ProbeReply,
    Register,
    StatusQuery,
)
from runtime import ratelimit
from runtime.actor import Actor
from runtime.broker import Broker, BrokerSettings

_ctx = zmq.Context.instance()
_names = itertools.count()


def _broker() -> Broker:
    sock = _ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(f"inproc://fuzz-{next(_names)}")
    broker = Broker(BrokerSettings(max_frame_bytes=4096), sock)
    broker._now = time.monotonic  # these tests drive it without a trio loop
    broker.trust(b"B")  # VALID's head: a connection the head made itself
    return broker


def _frames(identity: bytes, mode: int, to: str, msg: object, msg_id: str = "1", re: str = ""):
    env = Envelope(mode, msg_id, to, "", re, type(msg).__message_kind__)
    return [identity, encode_envelope(env), encode(msg)]


# A small valid conversation: two actors register, one asks a job, the other answers.
VALID = [
    _frames(b"A", ASK, BROKER, Register(role="probe", name="w", capacity=2)),
    _frames(b"B", ASK, BROKER, Register(role="head", name="h")),
    _frames(b"B", ASK, "@probe", Probe(seq=1), msg_id="j1"),
    _frames(b"A", REPLY, "h", ProbeReply(1, b"", "w"), msg_id="r1", re="j1"),
    _frames(b"A", TELL, BROKER, Heartbeat(0)),
    _frames(b"B", ASK, BROKER, StatusQuery(), msg_id="s1"),
    _frames(b"B", TELL, "w", Probe(seq=2)),
]


def _consistent(broker: Broker) -> None:
    queued = {id(j) for q in broker.queues.values() for j in q}
    for job in broker.jobs.values():
        if job.assigned is None:
            assert id(job) in queued
        else:
            assert broker.peers.get(job.assigned.actor_id) is job.assigned
            assert job.assigned.inflight[job.key] is job
    for peer in broker.peers.values():
        assert broker.by_identity[peer.identity] is peer
        assert len(peer.inflight) <= peer.capacity


def _feed(broker: Broker, messages: list[list[bytes]]) -> None:
    with structlog.testing.capture_logs() as logs:
        before = broker.rejected
        for frames in messages:
            broker._on_frames(frames)
    rejected = [e for e in logs if e["event"] == "message_rejected"]
    assert len(rejected) == broker.rejected - before  # every refusal logged, once
    assert all(e.get("reason") for e in rejected)
    _consistent(broker)


frame_lists = st.lists(st.binary(max_size=64), min_size=0, max_size=5)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(junk=st.lists(frame_lists, max_size=10))
def test_random_frames_never_crash_the_broker(junk: list[list[bytes]]) -> None:
    broker = _broker()
    _feed(broker, VALID[:2] + junk + VALID[2:])
    # Whatever came before, the valid conversation still worked.
    assert broker.completed == 1 and set(broker.peers) == {"w", "h"}


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.lists(st.integers(0, len(VALID) - 1), min_size=1, max_size=12),
    edits=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 300), st.integers(0, 255)), max_size=5
    ),
    cut=st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(0, 60))),
)
def test_mutated_frames_never_crash_the_broker(which, edits, cut) -> None:
    broker = _broker()
    stream = [list(VALID[i]) for i in which]
    for frame_no, pos, value in edits:
        target = stream[pos % len(stream)]
        data = bytearray(target[frame_no])
        if data:
            data[(pos * 7) % len(data)] = value
        target[frame_no] = bytes(data)
    if cut is not None:
        frame_no, length = cut
        stream[0][frame_no] = stream[0][frame_no][:length]
    _feed(broker, stream)


def test_oversize_bodies_are_refused_at_the_broker() -> None:
    broker = _broker()
    big = _frames(b"A", ASK, BROKER, Register(role="probe", name="x" * 5000))
    with structlog.testing.capture_logs() as logs:
        broker._on_frames(big)
    assert [e["reason"] for e in logs if e["event"] == "message_rejected"] == ["oversize"]
    assert not broker.peers


def test_garbage_over_a_real_socket_then_normal_service() -> None:
    trio.run(_garbage_then_service)


async def _garbage_then_service() -> None:
    endpoint = f"inproc://garbage-{next(_names)}"
    sock = _ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.bind(endpoint)
    broker = Broker(BrokerSettings(max_frame_bytes=4096), sock)
    vandal = _ctx.socket(zmq.DEALER)
    vandal.setsockopt(zmq.LINGER, 0)
    vandal.connect(endpoint)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.serve)
            for i in range(500):
                vandal.send_multipart([bytes([i % 256]) * (i % 7), b"\x93\x01" * (i % 3)])
            vandal.send_multipart([b"x" * 10_000, b"y", b"z"])
            worker, client = Actor(capacity=4), Actor(name="client")
            await nursery.start(worker.run, endpoint)
            await nursery.start(client.run, endpoint)
            reply = await client.ask("@actor", Probe(seq=7, payload=b"ok"), timeout=10)
            assert reply.seq == 7 and reply.payload == b"ok"
            while broker.rejected < 501:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    vandal.close()
    assert broker.rejected >= 501


def _recording_broker() -> tuple[Broker, list[tuple[bytes, object]]]:
    """A broker whose outgoing messages are decoded and kept: (identity, record)."""
    broker = _broker()
    sent: list[tuple[bytes, object]] = []
    broker.sock.send = lambda frames: sent.append((frames[0], decode(frames[2])))
    return broker, sent


def test_an_oversize_reply_completes_its_job_with_a_failure() -> None:
    broker, sent = _recording_broker()
    for frames in VALID[:3]:  # w and h register; h asks @probe, which goes to w
        broker._on_frames(frames)
    huge = ProbeReply(1, b"x" * 5000, "w")
    broker._on_frames(_frames(b"A", REPLY, "h", huge, msg_id="r1", re="j1"))
    identity, answer = sent[-1]
    assert identity == b"B" and isinstance(answer, Failure) and answer.reason == "oversize"
    assert not broker.jobs and not broker.peers["w"].inflight  # capacity given back


def test_an_oversize_ask_is_answered_with_a_failure() -> None:
    broker, sent = _recording_broker()
    for frames in VALID[:2]:
        broker._on_frames(frames)
    broker._on_frames(_frames(b"B", ASK, "@probe", Probe(payload=b"x" * 5000), msg_id="big"))
    identity, answer = sent[-1]
    assert identity == b"B" and answer.reason == "oversize" and not broker.jobs


def test_a_live_actors_name_cannot_be_taken() -> None:
    broker, sent = _recording_broker()
    broker._on_frames(VALID[0])
    broker._on_frames(_frames(b"Z", ASK, BROKER, Register(role="probe", name="w")))
    identity, answer = sent[-1]
    assert identity == b"Z" and answer.reason == "name_taken"
    assert broker.peers["w"].identity == b"A"


def test_a_cancelled_job_is_not_rerun_when_its_actor_dies() -> None:
    broker, sent = _recording_broker()
    for frames in VALID[:3]:
        broker._on_frames(frames)
    broker._on_frames(_frames(b"B", TELL, BROKER, Cancel("j1")))
    assert isinstance(sent[-1][1], Cancel)  # forwarded to the working actor
    broker.actor_exited("w", "signal SIGKILL")
    identity, answer = sent[-1]
    assert identity == b"B" and answer.reason == "cancelled"
    assert not broker.jobs and not any(broker.queues.values())


def test_a_reused_job_id_is_refused_not_dropped() -> None:
    broker, sent = _recording_broker()
    for frames in VALID[:3]:
        broker._on_frames(frames)
    broker._on_frames(VALID[2])  # the same id again while the first is running
    identity, answer = sent[-1]
    assert identity == b"B" and answer.reason == "duplicate_job"
    assert len(broker.jobs) == 1


def test_a_flood_of_junk_frames_writes_a_bounded_number_of_events_with_exact_counts() -> None:
    broker = _broker()
    clock = [0.0]
    broker._now = lambda: clock[0]
    flood = 10_000
    with structlog.testing.capture_logs() as logs:
        for _ in range(flood):
            broker._on_frames([b"vandal", b"\xc1 not msgpack", b""])
            clock[0] += 0.002  # 20 s in all: two summary windows
        # A second flood, every frame from a fresh connection (a new routing id each).
        for i in range(flood):
            broker._on_frames([b"v%d" % i, b"\x93\x01", b""])
        broker.flush_limited()
    rejected = [e for e in logs if e["event"] == "message_rejected"]
    full = [e for e in rejected if "suppressed" not in e]
    summaries = [e for e in rejected if "suppressed" in e]
    assert broker.rejected == 2 * flood
    assert len(full) + sum(e["suppressed"] for e in summaries) == 2 * flood
    vandal = b"vandal".hex()
    assert len([e for e in full if e["peer"] == vandal]) == 2 * ratelimit.PER_KEY  # 2 windows
    assert sum(e["suppressed"] for e in summaries if e["peer"] == vandal) == flood - 40
    # Bounded: a few dozen lines for one peer, a few hundred for ten thousand peers.
    assert len(rejected) <= 2 * (ratelimit.PER_KEY + 1) + ratelimit.TOTAL + ratelimit.KEYS + 1
    assert any(e["peer"] == "*" for e in summaries)  # routing ids past KEYS share one count


def _deadline_broker(tries: int = 3) -> tuple[Broker, list[tuple[bytes, object]], list[float]]:
    """A recording broker on a clock the test moves, with two probe actors (one slot
    each: identities A1, A2) and the head (B); B asks one job with a 5 s deadline."""
    broker, sent = _recording_broker()
    broker.settings.max_job_tries = tries
    clock = [100.0]
    broker._now = lambda: clock[0]
    broker._on_frames(_frames(b"A1", ASK, BROKER, Register(role="probe", name="w1")))
    broker._on_frames(_frames(b"A2", ASK, BROKER, Register(role="probe", name="w2")))
    broker._on_frames(_frames(b"B", ASK, BROKER, Register(role="head", name="h")))
    env = Envelope(ASK, "j1", "@probe", "", "", Probe.__message_kind__, 5.0)
    broker._on_frames([b"B", encode_envelope(env), encode(Probe(seq=1))])
    return broker, sent, clock


def test_a_job_past_its_deadline_moves_to_another_actor_and_the_late_answer_is_dropped() -> None:
    broker, sent, clock = _deadline_broker()
    assert broker.jobs[("h", "j1")].assigned.actor_id == "w1"
    clock[0] += 4.9
    broker.expire_jobs(clock[0])
    assert broker.jobs[("h", "j1")].assigned.actor_id == "w1"  # not yet
    clock[0] += 0.2
    with structlog.testing.capture_logs() as logs:
        broker.expire_jobs(clock[0])
        # w1 was told to stop; the job went to w2 with its second try.
        assert (sent[-2][0], type(sent[-2][1])) == (b"A1", Cancel)
        assert (sent[-1][0], type(sent[-1][1])) == (b"A2", Probe)
        job = broker.jobs[("h", "j1")]
        assert job.assigned.actor_id == "w2" and job.attempts == 2
        assert broker.peers["w1"].free == 0  # its slot stays taken until it answers
        # w1's late answer: dropped, never forwarded; its slot is free again.
        before = len(sent)
        broker._on_frames(_frames(b"A1", REPLY, "h", ProbeReply(1, b"late", "w1"), re="j1"))
        assert broker.peers["w1"].free == 1 and len(sent) == before  # nothing sent
        # w2's answer is the one the head gets.
        broker._on_frames(_frames(b"A2", REPLY, "h", ProbeReply(1, b"ok", "w2"), re="j1"))
    assert sent[-1][0] == b"B" and sent[-1][1].payload == b"ok"
    assert not broker.jobs and broker.completed == 1
    assert [e["event"] for e in logs if e["log_level"] != "debug"] == [
        "job_deadline_passed",
        "job_requeued",
        "late_reply_dropped",
    ]


def test_a_job_every_actor_lets_expire_fails_with_deadline_after_its_tries() -> None:
    broker, sent, clock = _deadline_broker(tries=3)
    held_by = []
    for _ in range(3):
        holder = broker.jobs[("h", "j1")].assigned
        held_by.append(holder.actor_id)
        clock[0] += 5.1
        broker.expire_jobs(clock[0])
        # It answers the cancel at once (as a live actor does): its slot is free again.
        stopped = Failure("cancelled", f"{holder.actor_id} stopped it")
        broker._on_frames(_frames(holder.identity, REPLY, "h", stopped, re="j1"))
    # w1, then w2 (it had not let it expire yet), then w1 again: no one is starved of it.
    assert held_by == ["w1", "w2", "w1"]
    identity, failure = sent[-1]
    assert identity == b"B" and failure.reason == "deadline" and failure.attempts == 3
    assert "5 s" in failure.detail
    assert not broker.jobs and broker.failed == 1
    assert all(p.free == 1 for p in broker.peers.values() if p.role == "probe")


def test_a_job_preferring_an_actor_goes_to_it_when_it_has_room_else_to_an_idle_one() -> None:
    broker, sent = _recording_broker()
    broker._on_frames(_frames(b"A1", ASK, BROKER, Register(role="probe", name="w1")))
    broker._on_frames(_frames(b"A2", ASK, BROKER, Register(role="probe", name="w2")))
    broker._on_frames(_frames(b"B", ASK, BROKER, Register(role="head", name="h")))

    def holder(job_id: str) -> str | None:
        job = broker.jobs[("h", job_id)]
        return job.assigned.actor_id if job.assigned else None

    broker._on_frames(_frames(b"B", ASK, "@probe/w2", Probe(seq=1), msg_id="j1"))
    assert holder("j1") == "w2"  # both idle: the preferred one (w1 has as much room)
    broker._on_frames(_frames(b"B", ASK, "@probe/w2", Probe(seq=2), msg_id="j2"))
    assert holder("j2") == "w1"  # w2 busy: an idle actor rather than a wait
    broker._on_frames(_frames(b"B", ASK, "@probe/w2", Probe(seq=3), msg_id="j3"))
    broker._on_frames(_frames(b"B", ASK, "@probe/w1", Probe(seq=4), msg_id="j4"))
    assert holder("j3") is None and holder("j4") is None  # both busy: queued, in the role
    assert [j.key[1] for j in broker.queues["@probe"]] == ["j3", "j4"]
    # w1 frees: it takes the job that prefers it, though another waited longer.
    broker._on_frames(_frames(b"A1", REPLY, "h", ProbeReply(2, b"", "w1"), re="j2"))
    assert holder("j4") == "w1" and holder("j3") is None
    broker._on_frames(_frames(b"A2", REPLY, "h", ProbeReply(1, b"", "w2"), re="j1"))
    assert holder("j3") == "w2"
    assert broker.jobs[("h", "j3")].queue == "@probe"
    _consistent(broker)


def test_envelope_deadlines_travel_and_old_envelopes_still_decode() -> None:
    import msgpack

    env = Envelope(ASK, "j", "@probe", "", "", "control.probe", 12.5)
    assert decode_envelope(encode_envelope(env)).deadline_s == 12.5
    plain = Envelope(ASK, "j", "@probe", "", "", "control.probe")
    assert len(msgpack.unpackb(encode_envelope(plain))) == 7  # as older builds write it
    assert decode_envelope(encode_envelope(plain)).deadline_s == 0.0
    for bad in (-1.0, float("nan"), float("inf"), "5", [1]):
        frame = msgpack.packb([1, ASK, "j", "@probe", "", "", "control.probe", bad])
        with pytest.raises(DecodeError, match="deadline_s"):
            decode_envelope(frame)


def test_default_deadlines_come_from_the_requests_own_budget() -> None:
    from episodes.runner import START_TIMEOUT_S
    from messages.rollout import RolloutRequest
    from messages.train import TrainRequest
    from rl.configs import collect_wood_with_coded
    from runtime.deadlines import GRACE_S, ROLLOUT_START_S, hold_limit

    config = collect_wood_with_coded()
    rollout = RolloutRequest(config.subtask, code="x", seeds=[1, 2, 3], wall_s=20)
    # A rollout's deadline covers the runner's start (a replacement warms up first).
    assert ROLLOUT_START_S >= START_TIMEOUT_S
    assert hold_limit(rollout) == 60 + ROLLOUT_START_S + GRACE_S
    train = TrainRequest("t", config, total_steps=1000, eval_episodes=2)
    assert hold_limit(train) == 500 + 120 + GRACE_S
    assert hold_limit(Probe(hold_s=3)) == 3 + GRACE_S
    assert hold_limit(StatusQuery()) == 0.0


def test_a_head_side_ipc_actor_of_another_tree_is_logged_not_refused_a_keyed_one_is() -> None:
    # The head's own actors reach it over its private ipc socket, without a key: one
    # restarted after the checkout changed mid-run is let in with a warning (refusing it
    # would fail the run); an actor attached with a key (over tcp) is refused.
    from runtime.provenance import Provenance

    sock = _ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(f"inproc://versions-{next(_names)}")
    broker = Broker(BrokerSettings(provenance=Provenance("1.0", "a" * 64)), sock)
    broker._now = time.monotonic
    other = Register(role="probe", name="", version="1.0", source_hash="b" * 64)

    def register(identity: bytes, name: str, key: str) -> None:
        env = Envelope(ASK, "1", BROKER, "", "", Register.__message_kind__)
        broker._register(identity, env, dataclasses.replace(other, name=name), key)

    with structlog.testing.capture_logs() as logged:
        register(b"ipc-child", "restarted", "")
        register(b"tcp-peer", "attached", "gpu1/KEYKEYKEY")
    assert "restarted" in broker.peers and "attached" not in broker.peers
    (allowed,) = [e for e in logged if e["event"] == "version_mismatch_allowed"]
    assert allowed["actor_id"] == "restarted" and "ipc" in allowed["why"]
