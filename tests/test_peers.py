"""Peers get only what their role may do: a rogue local process that reaches the head's
socket may register, but it cannot stop actors, impersonate the head or another actor,
send results its role does not make, write outside the run directory, or make an
environment actor load a policy file from elsewhere."""

from __future__ import annotations

import base64
import functools
import hashlib
import itertools
import json
import os
import pathlib
import pickle
import stat
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
import structlog
import trio
import zmq
import zmq.auth
from helpers import ROOT, make_settings, run_head_with, wait_until

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
from messages.control import (
    BadReply,
    Cancel,
    Failure,
    Heartbeat,
    Probe,
    ProbeReply,
    Register,
    Registered,
    Shutdown,
)
from messages.rollout import RolloutRequest, RolloutResult
from messages.train import TrainRequest, TrainResult
from rl.artifacts import ArtifactRefused, PolicyUnusable, inside, store_artifact
from rl.configs import collect_wood_with_coded
from runtime import deadlines, provenance, ratelimit
from runtime.actor import RemoteFailure
from runtime.broker import Broker, BrokerSettings
from runtime.config import ActorSettings
from runtime.head import Head

_ctx = zmq.Context.instance()
_ids = itertools.count()
ENV_ACTOR = {"environment": ActorSettings(count=1)}


class Rogue:
    """A raw DEALER on the head's ipc socket: it speaks the protocol by hand, so it can
    lie about its role, its kinds and its results."""

    def __init__(self, endpoint: str) -> None:
        self.sock = _ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def send(self, mode: int, to: str, msg: object, *, kind: str = "", msg_id: str = "", re=""):
        msg_id = msg_id or f"rogue.{next(_ids)}"
        env = Envelope(mode, msg_id, to, "", re, kind or type(msg).__message_kind__)
        self.sock.send_multipart([encode_envelope(env), encode(msg)])
        return msg_id

    async def recv(self, timeout: float = 60) -> tuple[Envelope, object]:
        with trio.fail_after(timeout):
            while not self.sock.poll(0):
                await trio.sleep(0.01)
        header, body = self.sock.recv_multipart()
        return decode_envelope(header), decode(body)

    async def ask(self, to: str, msg: object, **kw) -> object:
        msg_id = self.send(ASK, to, msg, **kw)
        while True:
            env, reply = await self.recv()
            if env.mode == REPLY and env.re == msg_id:
                return reply

    async def register(self, role: str, name: str) -> object:
        # It states this tree's source hash, as a real actor does: the head refuses
        # another (tests/test_keys.py), and these rogues test what comes after.
        mine = provenance.current()
        hello = Register(role=role, name=name, version=mine.version, source_hash=mine.source_hash)
        return await self.ask(BROKER, hello)

    def close(self) -> None:
        self.sock.close(linger=0)


def _named(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e.get("event") == name]


def test_a_rogue_peer_cannot_stop_an_environment_actor_or_pose_as_the_head(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, ENV_ACTOR, heartbeat_timeout=10)
    seen: dict = {}

    async def driver(head: Head) -> dict:
        await head.wait_for("environment", 1)
        rogue = Rogue(head.endpoint)
        try:
            seen["as_head"] = await rogue.register("head", "impostor")
            seen["as_broker"] = await rogue.register("probe", "broker")
            assert isinstance(await rogue.register("probe", "rogue"), Registered)
            rogue.send(TELL, "environment-0", Shutdown("rogue"))
            # The envelope says probe, the body is a shutdown: the actor checks the body.
            rogue.send(TELL, "environment-0", Shutdown("rogue-in-disguise"), kind="control.probe")
            seen["asked"] = await rogue.ask("environment-0", Shutdown("rogue-ask"))
            # Frames from one connection arrive in order: once this probe is answered the
            # shutdowns before it have been dealt with.
            seen["echo"] = await rogue.ask("environment-0", Probe(seq=5))
        finally:
            rogue.close()
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    assert isinstance(seen["as_head"], Failure) and seen["as_head"].reason == "role_reserved"
    assert isinstance(seen["as_broker"], Failure) and seen["as_broker"].reason == "name_reserved"
    assert isinstance(seen["asked"], Failure) and seen["asked"].reason == "refused"
    assert isinstance(seen["echo"], ProbeReply) and seen["echo"].actor_id == "environment-0"
    events = run.events
    refused = _named(events, "message_refused")
    assert [(e["sender"], e["role"], e["kind"]) for e in refused] == [
        ("rogue", "probe", "control.shutdown")
    ] * 2
    mismatch = [e for e in _named(events, "message_rejected") if e["reason"] == "kind_mismatch"]
    assert len(mismatch) == 1 and mismatch[0]["frm"] == "rogue"
    # The actor kept running: never stopped by the rogue, never restarted.
    stops = [e for e in _named(events, "actor_stopped") if e.get("reason", "").startswith("rogue")]
    assert not stops
    assert run.report["restarts"] == 0
    assert [e["reason"] for e in _named(events, "registration_refused")] == [
        "role_reserved",
        "name_reserved",
    ]


def _rogue_result(name: str, payload: bytes = b"PK not a policy", path: str = "") -> TrainResult:
    digest = hashlib.sha256(payload).hexdigest()
    return TrainResult(
        name, path, digest, 64, 64, 1.0, 1, 1, 0, 0, "", 0.1, 0.1, "cpu", "rogue",
        policy_bytes=b"" if path else payload,
    )  # fmt: skip


def test_a_false_training_result_writes_nothing_outside_the_run_dir(tmp_path: Path) -> None:
    outside = tmp_path / "outside.zip"
    outside.write_bytes(b"PK a file the run does not own")
    lies = {
        "climb": _rogue_result("../../escaped"),
        "absolute": _rogue_result(str(tmp_path / "absolute")),
        "local_path": _rogue_result("plain", path=str(outside)),
    }
    settings = make_settings(tmp_path)
    seen: dict = {}

    async def driver(head: Head) -> dict:
        learner, environment = Rogue(head.endpoint), Rogue(head.endpoint)
        try:
            assert isinstance(await learner.register("learner", "rogue-learner"), Registered)
            assert isinstance(await environment.register("environment", "rogue-env"), Registered)
            config = collect_wood_with_coded()
            for case, lie in lies.items():
                async with trio.open_nursery() as nursery:

                    async def serve(lie: TrainResult = lie) -> None:
                        env, _ = await learner.recv()
                        learner.send(REPLY, env.frm, lie, re=env.id)

                    nursery.start_soon(serve)
                    result = await head.client.ask("@learner", TrainRequest(case, config, 64))
                try:
                    seen[case] = store_artifact(head.run_dir, result)
                except ArtifactRefused as exc:
                    seen[case] = exc
            # Only learners send training results: an environment's is refused on the way.
            async with trio.open_nursery() as nursery:

                async def serve_env() -> None:
                    env, _ = await environment.recv()
                    environment.send(REPLY, env.frm, _rogue_result("fine"), re=env.id)

                nursery.start_soon(serve_env)
                req = RolloutRequest(config.subtask, code="pass", seeds=[0])
                try:
                    await head.client.ask("@environment", req, timeout=30)
                except RemoteFailure as exc:
                    seen["from_env"] = exc.failure
        finally:
            learner.close()
            environment.close()
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    for case in lies:
        assert isinstance(seen[case], ArtifactRefused), (case, seen[case])
    assert "TrainResult.name" in str(seen["climb"]) and "TrainResult.name" in str(seen["absolute"])
    assert "outside the run directory" in str(seen["local_path"])
    assert seen["from_env"].reason == "refused"
    written = {p for p in tmp_path.rglob("*") if p.is_file()} - {outside}
    assert all(p.is_relative_to(run.run_dir) for p in written), written
    assert not list(tmp_path.rglob("*escaped*")) and not list(tmp_path.rglob("absolute*"))
    refused = _named(run.events, "message_refused")
    assert [(e["sender"], e["role"], e["kind"]) for e in refused] == [
        ("rogue-env", "environment", "train.result")
    ]


class _Touch:
    """Unpickling this creates ``marker``: the stand-in for a command a crafted SB3 zip
    would run when loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def crafted_policy(path: Path, marker: Path) -> str:
    """An SB3-shaped zip whose ``data`` holds a pickle that ``PPO.load`` would run."""
    blob = base64.b64encode(pickle.dumps(_Touch(marker))).decode()
    data = {"policy_class": {":type:": "<class 'type'>", ":serialized:": blob}}
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data", json.dumps(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_policy_path_outside_the_run_dir_is_refused_before_it_is_loaded(
    tmp_path: Path,
) -> None:
    evil, marker = tmp_path / "evil.zip", tmp_path / "pwned"
    digest = crafted_policy(evil, marker)
    settings = make_settings(tmp_path, ENV_ACTOR, heartbeat_timeout=10)
    seen: dict = {}

    async def driver(head: Head) -> dict:
        await head.wait_for("environment", 1)
        rogue = Rogue(head.endpoint)
        try:
            assert isinstance(await rogue.register("probe", "rogue"), Registered)
            config = collect_wood_with_coded()
            req = RolloutRequest(
                config.subtask, policy_path=str(evil), policy_sha256=digest, config=config,
                seeds=[0, 1],
            )  # fmt: skip
            seen["direct"] = await rogue.ask("@environment", req)
            # The same file reached through a link inside the run directory.
            link = head.run_dir / "policies" / "link.zip"
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(evil)
            linked = RolloutRequest(
                config.subtask, policy_path=str(link), policy_sha256=digest, config=config,
                seeds=[0],
            )  # fmt: skip
            seen["linked"] = await rogue.ask("@environment", linked)
        finally:
            rogue.close()
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    for case in ("direct", "linked"):
        result = seen[case]
        assert isinstance(result, RolloutResult), (case, result)
        assert {e.cause for e in result.episodes} == {"policy_unusable"}, case
        assert all("outside the run directory" in e.detail for e in result.episodes), case
    assert not marker.exists(), "the crafted policy was unpickled"


def test_a_live_actors_name_stays_bound_to_its_connection_until_it_is_declared_dead() -> None:
    sock = _ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(f"inproc://peers-{next(_ids)}")
    broker = Broker(BrokerSettings(heartbeat_interval=1.0, heartbeat_timeout=5.0), sock)
    clock = [time.monotonic()]
    broker._now = lambda: clock[0]
    sent: list[tuple[bytes, object]] = []
    broker.sock.send = lambda frames: sent.append((frames[0], decode(frames[2])))

    def register(identity: bytes, name: str) -> object:
        env = Envelope(ASK, f"r{next(_ids)}", BROKER, "", "", Register.__message_kind__)
        broker._on_frames([identity, encode_envelope(env), encode(Register("probe", name))])
        return sent[-1][1]

    assert isinstance(register(b"owner", "w"), Registered)
    clock[0] += 3.0  # quiet for 3 s: past two heartbeats, short of the 5 s timeout
    with structlog.testing.capture_logs() as logs:
        answer = register(b"thief", "w")
    assert isinstance(answer, Failure) and answer.reason == "name_taken"
    assert broker.peers["w"].identity == b"owner"
    assert [e["reason"] for e in logs if e["event"] == "registration_refused"] == ["name_taken"]
    # Once the heartbeat timeout declares the owner dead, the name is free again.
    clock[0] += 3.0
    for peer in [p for p in broker.peers.values() if p.last_seen < clock[0] - 5.0]:
        broker.remove(peer, "heartbeat_missed")
    assert isinstance(register(b"heir", "w"), Registered)
    assert broker.peers["w"].identity == b"heir"


@pytest.mark.parametrize("name", ["../x", "/abs/path", "a/b", "..", ".hidden", "x\0y", "n" * 101])
def test_an_artifact_name_that_is_not_a_plain_file_name_is_refused(tmp_path, name) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(ArtifactRefused, match="TrainResult.name"):
        store_artifact(run_dir, _rogue_result(name))
    assert [p for p in tmp_path.rglob("*") if p != run_dir] == []


def test_inside_follows_links_and_climbs(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "policies").mkdir(parents=True)
    (run_dir / "policies" / "ok.zip").write_bytes(b"x")
    ok = run_dir / "policies" / "ok.zip"
    assert inside(run_dir, ok) == ok.resolve()
    (run_dir / "policies" / "out.zip").symlink_to(tmp_path / "elsewhere.zip")
    for bad in (run_dir / "policies" / "out.zip", run_dir / ".." / "x.zip", Path("/etc/passwd")):
        with pytest.raises(PolicyUnusable, match="outside the run directory"):
            inside(run_dir, bad)


def test_the_ipc_socket_lives_in_a_folder_only_its_user_can_enter(tmp_path: Path) -> None:
    seen: dict = {}

    async def driver(head: Head) -> dict:
        socket_file = Path(head.endpoint.removeprefix("ipc://"))
        seen["exists"] = socket_file.exists()
        seen["folder"] = os.stat(socket_file.parent)
        return {}

    assert run_head_with(make_settings(tmp_path), driver).code == 0
    assert seen["exists"]
    assert stat.S_IMODE(seen["folder"].st_mode) == 0o700
    assert seen["folder"].st_uid == os.getuid()


def test_loopback_tcp_demands_the_runs_own_keys_and_an_attach_with_them_works(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, listen="tcp://127.0.0.1:0")
    seen: dict = {}

    async def driver(head: Head) -> dict:
        keys = head.keys_dir
        seen["keys"] = keys
        seen["modes"] = {
            p.relative_to(keys).as_posix(): stat.S_IMODE(os.stat(p).st_mode)
            for p in [keys, *keys.rglob("*")]
        }
        # A local process without the run's keys: plain (NULL) ...
        plain = Rogue(head.listen)
        # ... or CURVE with the right server key but a client key of its own making.
        stranger = _ctx.socket(zmq.DEALER)
        stranger.setsockopt(zmq.LINGER, 0)
        stranger.curve_publickey, stranger.curve_secretkey = zmq.curve_keypair()
        stranger.curve_serverkey = zmq.auth.load_certificate(keys / "server.key")[0]
        stranger.connect(head.listen)
        try:
            plain.send(ASK, BROKER, Register(role="probe", name="rogue"))
            plain.send(TELL, "head", Shutdown("rogue"))
            env = Envelope(ASK, "x.1", BROKER, "", "", Register.__message_kind__)
            stranger.send_multipart([encode_envelope(env), encode(Register("probe", "rogue2"))])
            await _wait_events(head.run_dir, "unknown client key", 1)
            # The plain one: the mismatch, or a broken-off handshake when the rogue saw
            # the mismatch first and hung up.
            await _wait_events(head.run_dir, "no CURVE keys", 1, alt="handshake broken off")
            with trio.move_on_after(1.0):
                seen["answer"] = await plain.recv()
            seen["stranger_answer"] = stranger.poll(0)
            seen["peers_after_rogues"] = sorted(head.broker.peers)
        finally:
            plain.close()
            stranger.close(linger=0)
        # The same user's actor on the same machine finds the keys by the run folder.
        proc = await trio.lowlevel.open_process(
            [sys.executable, str(ROOT / "run.py"), "attach", "probe", "--connect", head.listen,
             "--run-dir", str(head.run_dir), "--name", "friend", "--quiet"],
        )  # fmt: skip
        try:
            reply = await head.client.ask("@probe", Probe(seq=11), timeout=60)
            seen["friend"] = reply.actor_id
        finally:
            proc.terminate()
            await proc.wait()
        # Without them an attach stops at once, saying where the keys are.
        done = await trio.run_process(
            [sys.executable, str(ROOT / "run.py"), "attach", "probe", "--connect", head.listen],
            capture_stderr=True, check=False,
        )  # fmt: skip
        seen["keyless"] = (done.returncode, done.stderr.decode())
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    assert seen["keys"] == run.run_dir / "keys"
    assert seen["modes"]["."] == 0o700
    assert all(mode == 0o600 for name, mode in seen["modes"].items() if name.endswith("key"))
    assert all(mode == 0o600 for name, mode in seen["modes"].items() if "secret" in name)
    assert "answer" not in seen and not seen["stranger_answer"]
    assert seen["peers_after_rogues"] == ["artifacts", "head"]  # the head's own two
    reasons = {e["reason"] for e in run.named("peer_refused")}
    assert "unknown client key" in reasons
    assert all(r.startswith(("no CURVE keys", "handshake broken off", "unknown")) for r in reasons)
    assert not run.named("message_refused") and not run.named("message_rejected")
    assert seen["friend"] == "friend"
    code, err = seen["keyless"]
    assert code == 2 and "RUN_DIR/keys" in err, err
    endpoint = json.loads((run.run_dir / "endpoint.json").read_text())
    assert endpoint["curve"] and endpoint["keys"] == str(run.run_dir / "keys")


async def _wait_events(
    run_dir: Path, text: str, count: int, *, alt: str = "", timeout: float = 30
) -> None:
    """Wait for ``count`` ``peer_refused`` events whose reason holds ``text`` (or ``alt``)."""

    def enough() -> bool:
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
        refused = [e for e in events if e.get("event") == "peer_refused"]
        texts = [t for t in (text, alt) if t]
        return sum(any(t in e.get("reason", "") for t in texts) for e in refused) >= count

    await wait_until(enough, timeout=timeout, what=f"{count} peer_refused events with {text!r}")


class SilentPeer(Rogue):
    """A rogue that registers as an actor, heartbeats like a live one, takes jobs and
    never answers them (nor the cancels that follow): what request deadlines are for."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint)
        self.jobs: list[Envelope] = []
        self.cancels = 0

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._heartbeat)
            while True:
                try:
                    env, msg = await self.recv(timeout=3600)
                except trio.TooSlowError:
                    continue
                if env.mode == ASK:
                    self.jobs.append(env)
                elif isinstance(msg, Cancel):
                    self.cancels += 1

    async def _heartbeat(self) -> None:
        while True:
            self.send(TELL, BROKER, Heartbeat(0))
            await trio.sleep(0.1)


def _rollout() -> RolloutRequest:
    config = collect_wood_with_coded()
    return RolloutRequest(config.subtask, code="def run(skills):\n    pass\n", seeds=[0], wall_s=10)


def test_a_rollout_a_silent_peer_holds_moves_to_a_real_actor_at_its_deadline(tmp_path) -> None:
    settings = make_settings(tmp_path, ENV_ACTOR, heartbeat_timeout=5)
    seen: dict = {}

    async def driver(head: Head) -> dict:
        await head.wait_for("environment", 1)
        rogue = SilentPeer(head.endpoint)
        try:
            assert isinstance(await rogue.register("environment", "rogue-env"), Registered)
            async with trio.open_nursery() as nursery:
                # Keep the real actor busy for 2 s, so the rollout goes to the rogue first.
                hold = functools.partial(head.client.ask, "environment-0", Probe(hold_s=2.0))
                nursery.start_soon(hold)
                held = await wait_until(
                    lambda: head.broker.peers["environment-0"].inflight, timeout=10, what="busy"
                )
                # An ask that names no deadline gets its request's own (runtime/deadlines.py).
                seen["default_deadline"] = next(iter(held.values())).deadline_s
                nursery.start_soon(rogue.serve)

                async def answer_late() -> None:
                    await wait_until(lambda: rogue.jobs, timeout=10, what="the rogue's job")
                    await wait_until(lambda: head.broker.expired, timeout=10, what="deadline")
                    lie = RolloutResult("collect_wood", [], 1.0, 0, "rogue")
                    rogue.send(REPLY, rogue.jobs[0].frm, lie, re=rogue.jobs[0].id)

                nursery.start_soon(answer_late)
                started = trio.current_time()
                seen["result"] = await head.client.ask(
                    "@environment", _rollout(), deadline_s=1.0, timeout=60
                )
                seen["took_s"] = trio.current_time() - started
                await wait_until(lambda: rogue.cancels, timeout=10, what="the rogue told to stop")
                seen["completed"] = head.broker.completed
                nursery.cancel_scope.cancel()
        finally:
            rogue.close()
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    result = seen["result"]
    assert isinstance(result, RolloutResult) and result.actor_id == "environment-0"
    assert len(result.episodes) == 1  # the real answer, not the rogue's empty lie
    assert 1.0 <= seen["took_s"] < 30
    passed = run.named("job_deadline_passed")
    assert [(e["actor_id"], e["attempts"], e["deadline_s"]) for e in passed] == [
        ("rogue-env", 1, 1.0)
    ]
    assert [e["actor_id"] for e in run.named("late_reply_dropped")] == ["rogue-env"]
    assert seen["completed"] == 2  # the probe and the rollout: the late lie was no answer
    assert seen["default_deadline"] == 2.0 + deadlines.GRACE_S


def test_a_job_no_peer_answers_fails_with_deadline_after_its_tries_and_the_run_goes_on(
    tmp_path,
) -> None:
    settings = make_settings(tmp_path, max_job_tries=2, heartbeat_timeout=2.0)
    seen: dict = {}

    async def driver(head: Head) -> dict:
        rogues = [SilentPeer(head.endpoint) for _ in range(2)]
        try:
            for i, rogue in enumerate(rogues):
                assert isinstance(await rogue.register("environment", f"silent-{i}"), Registered)
            async with trio.open_nursery() as nursery:
                for rogue in rogues:
                    nursery.start_soon(rogue.serve)
                started = trio.current_time()
                try:
                    await head.client.ask("@environment", _rollout(), deadline_s=0.5, timeout=30)
                except RemoteFailure as exc:
                    seen["failure"] = exc.failure
                seen["took_s"] = trio.current_time() - started
                # Silent about the cancel too: declared lost a heartbeat timeout later.
                await wait_until(
                    lambda: not head.broker.roles.get("environment"), timeout=10, what="lost"
                )
                seen["jobs"] = [len(r.jobs) for r in rogues]
                nursery.cancel_scope.cancel()
        finally:
            for rogue in rogues:
                rogue.close()
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    failure = seen["failure"]
    assert failure.reason == "deadline" and failure.attempts == 2, failure
    assert "0.5 s" in failure.detail
    assert seen["took_s"] < 5
    assert seen["jobs"] == [1, 1]  # one try each: a stuck slot takes no second one
    failed = run.named("job_failed")
    assert [(e["reason"], e["attempts"]) for e in failed] == [("deadline", 2)]
    lost = sorted(
        e["actor_id"] for e in run.named("actor_lost") if e["reason"] == "deadline_missed"
    )
    assert lost == ["silent-0", "silent-1"]


def test_a_flood_of_junk_bodies_at_an_actor_writes_a_bounded_number_of_events(tmp_path) -> None:
    settings = make_settings(tmp_path, {"probe": ActorSettings(count=1)})
    flood = 5000

    async def driver(head: Head) -> dict:
        await head.wait_for("probe", 1)
        rogue = Rogue(head.endpoint)
        try:
            assert isinstance(await rogue.register("probe", "rogue"), Registered)
            env = Envelope(TELL, "", "probe-0", "", "", Probe.__message_kind__)
            for i in range(flood):
                env.id = f"junk.{i}"
                rogue.sock.send_multipart([encode_envelope(env), b"\xc1 not msgpack"])
            # Frames from one connection arrive in order: this answer comes after them all.
            assert isinstance(await rogue.ask("probe-0", Probe(seq=1)), ProbeReply)
        finally:
            rogue.close()
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    # (The broker logs its own refusals by routing id, "peer"; the actor by sender.)
    at_actor = [e for e in run.named("message_rejected") if e.get("frm") == "rogue"]
    full = [e for e in at_actor if "suppressed" not in e]
    assert 0 < len(full) <= 2 * ratelimit.PER_KEY and len(at_actor) <= 2 * (ratelimit.PER_KEY + 1)
    assert len(full) + sum(e.get("suppressed", 0) for e in at_actor) == flood
    assert {e["reason"] for e in at_actor} == {"bad_msgpack"}


def test_a_peers_answer_to_another_request_is_its_failure_not_the_asker(tmp_path: Path) -> None:
    # A learner answers a training job with a progress message; an environment answers a
    # rollout part with episodes of worlds it was not asked to play. Each is refused as
    # that peer's bad reply: the training ask fails with ``bad_reply`` (the fast agent
    # books the version failed), the split rollout asks again and books the worlds as not
    # played; the head goes on to its end.
    from messages.rollout import EpisodeReport
    from messages.train import TrainProgress
    from method.split import BAD_REPLY_TRIES, rollout_split

    settings = make_settings(tmp_path)
    seen: dict = {}

    async def driver(head: Head) -> dict:
        learner, environment = Rogue(head.endpoint), Rogue(head.endpoint)
        try:
            assert isinstance(await learner.register("learner", "rogue-learner"), Registered)
            assert isinstance(await environment.register("environment", "rogue-env"), Registered)
            config = collect_wood_with_coded()
            async with trio.open_nursery() as nursery:

                async def serve_learner() -> None:
                    env, _ = await learner.recv()
                    wrong = TrainProgress("job", 1, 1, 1.0, 0, 0.0, 0.0)
                    learner.send(REPLY, env.frm, wrong, re=env.id)

                nursery.start_soon(serve_learner)
                try:
                    await head.client.ask(
                        "@learner", TrainRequest("job", config, 64), expect=TrainResult
                    )
                except RemoteFailure as exc:
                    seen["train"] = exc.failure
            asked: list[list[int]] = []
            async with trio.open_nursery() as nursery:

                async def serve_env() -> None:
                    for _ in range(BAD_REPLY_TRIES):
                        env, req = await environment.recv()
                        asked.append(list(req.seeds))
                        lie = [
                            EpisodeReport(s + 1000, True, 1, 1.0, [], "success") for s in req.seeds
                        ]
                        reply = RolloutResult(req.subtask.name, lie, 1.0, 1, "")
                        environment.send(REPLY, env.frm, reply, re=env.id)

                nursery.start_soon(serve_env)
                req = RolloutRequest(config.subtask, code="pass", seeds=[7, 8])
                seen["rollout"] = await rollout_split(head.client, req, parts=1)
            seen["asked"] = asked
            # The third wrong reply reached the limit: the broker tells it why it is out.
            _, seen["dropped"] = await environment.recv(timeout=10)
            # An accusation for a job no one answered charges no one.
            learner.send(TELL, BROKER, BadReply("never-asked", "made up"))
            await trio.sleep(0.3)
        finally:
            learner.close()
            environment.close()
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    assert seen["train"].reason == "bad_reply"
    assert "train.request answered with train.progress" in seen["train"].detail
    result = seen["rollout"]
    assert [e.seed for e in result.episodes] == [7, 8]
    assert all(e.cause == "rollout_failed" and not e.success for e in result.episodes)
    assert all(e.stages == [] for e in result.episodes)  # not reached, never the version's
    assert seen["asked"] == [[7, 8]] * BAD_REPLY_TRIES
    rejected = _named(run.events, "message_rejected")
    assert any(e.get("reason") == "unexpected_reply" for e in rejected), rejected
    # Each wrong reply is charged to the peer that sent it; at [runtime] bad_reply_limit
    # (3) the environment peer is dropped and told why, the learner (one) is not.
    charged = [(e["actor_id"], e["count"]) for e in _named(run.events, "peer_bad_reply")]
    assert charged == [("rogue-learner", 1), ("rogue-env", 1), ("rogue-env", 2), ("rogue-env", 3)]
    lost = [e for e in _named(run.events, "actor_lost") if e.get("reason") == "bad_replies"]
    assert [e["actor_id"] for e in lost] == ["rogue-env"]
    assert isinstance(seen["dropped"], Failure) and seen["dropped"].reason == "bad_replies"
    assert "3 wrong replies (limit 3" in seen["dropped"].detail
    unmatched = _named(run.events, "bad_reply_unmatched")
    assert [(e["by"], e["job"]) for e in unmatched] == [("rogue-learner", "never-asked")]


def _rollout_asked_of(actor: Any, tmp_path: Path) -> tuple[Any, Any]:
    """A real head with ``actor`` started in it, asked one rollout by a peer: the run
    (exit 0 asserted) and the reply the peer got."""
    seen: dict = {}

    async def driver(head: Head) -> dict:
        await head.start_local(actor)
        rogue = Rogue(head.endpoint)
        try:
            assert isinstance(await rogue.register("critic", "prober"), Registered)
            req = RolloutRequest(collect_wood_with_coded().subtask, code="pass", seeds=[0])
            seen["reply"] = await rogue.ask("@environment", req)
        finally:
            rogue.close()
        return {}

    run = run_head_with(make_settings(tmp_path), driver)
    assert run.code == 0
    return run, seen["reply"]


def test_a_handler_that_raises_answers_the_error_not_its_traceback(tmp_path: Path) -> None:
    # A peer that provokes an error learns what went wrong, not the answering actor's
    # files and code lines; the traceback is in that actor's own events.
    from runtime.actor import Actor, handles

    class Crashing(Actor):
        role = "environment"

        @handles(RolloutRequest)
        async def on_rollout(self, req: RolloutRequest, env: Envelope) -> RolloutResult:
            raise ValueError("no world named 'x'\nsecond line")

    run, reply = _rollout_asked_of(Crashing(name="crashing"), tmp_path)
    assert isinstance(reply, Failure) and reply.reason == "handler_error"
    assert reply.detail.startswith("ValueError: no world named 'x'"), reply.detail
    assert "Traceback" not in reply.detail and 'File "' not in reply.detail
    assert "second line" not in reply.detail
    (failed,) = _named(run.events, "handler_failed")
    assert 'File "' in failed["exception"] and "second line" in failed["exception"]


def test_an_error_inside_a_handlers_nursery_is_answered_by_what_went_wrong(
    tmp_path: Path,
) -> None:
    # A handler whose nursery fails (a checkpoint written on a full disk, say) must answer
    # with the error inside the group: "ExceptionGroup: Exceptions from Trio nursery" told
    # the head nothing, and a full disk then ended the run as an unknown failure.
    import errno

    from runtime.actor import Actor, handles
    from runtime.failures import RemoteFailure
    from runtime.head import _disk_full

    class FullDisk(Actor):
        role = "environment"

        @handles(RolloutRequest)
        async def on_rollout(self, req: RolloutRequest, env: Envelope) -> RolloutResult:
            async def write() -> None:
                raise OSError(errno.ENOSPC, "No space left on device")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(write)
                await trio.sleep_forever()
            raise AssertionError("unreachable")

    _, reply = _rollout_asked_of(FullDisk(name="full"), tmp_path)
    assert isinstance(reply, Failure) and reply.reason == "handler_error"
    assert reply.detail.startswith("OSError: [Errno 28]"), reply.detail
    assert _disk_full(RemoteFailure(reply)) is not None
