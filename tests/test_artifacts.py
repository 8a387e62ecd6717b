"""Artifacts by sha256 through the head (runtime/artifacts.py): an environment actor on
"another machine" (its own run directory, attached over tcp with keys) runs a learned
stage it fetched by hash; a chunk that is corrupted or short is refused; a job whose
learner dies after a checkpoint resumes on a second learner elsewhere from the head's
copy of that checkpoint, and its TensorBoard files come back to the run."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import stat
import sys
import zipfile
from pathlib import Path

import pytest
import trio
from helpers import ROOT, make_settings, read_events, run_head_with, wait_until, wood_policy

from messages import Envelope
from messages.artifact import ArtifactChunk, ArtifactGet, ArtifactPut
from messages.rollout import RolloutRequest, RolloutResult
from messages.task import Stage, Subtask
from messages.train import PPOSettings, TrainRequest, TrainResult
from rl.configs import collect_wood_with_coded
from runtime import artifacts
from runtime.actor import Actor, ActorRefused
from runtime.artifacts import ArtifactError, ArtifactServer, Store, unpack_tensorboard
from runtime.config import ActorSettings
from runtime.head import Head
from runtime.security import create_keys

TINY_PPO = PPOSettings(n_steps=64, batch_size=64, n_epochs=2, learning_rate=1e-3)


def _policy(path: Path) -> tuple[object, str]:
    """A small SB3 policy for the wood config (:func:`helpers.wood_policy`) and its sha256."""
    wood_policy(path)
    return collect_wood_with_coded(), hashlib.sha256(path.read_bytes()).hexdigest()


def _attach(role: str, head: Head, keys: Path, name: str, *extra: str, env=None):
    argv = [sys.executable, str(ROOT / "run.py"), "attach", role, "--connect", head.listen,
            "--keys", str(keys), "--name", name, "--quiet", *extra]  # fmt: skip
    return trio.lowlevel.open_process(argv, env=env)


def _composed(config, path: str, sha256: str) -> RolloutRequest:
    stage = Stage(config.subtask, policy_path=path, policy_sha256=sha256, config=config)
    whole = Subtask("wood_episode", goal={"wood": 1}, max_steps=60)
    return RolloutRequest(whole, stages=[stage], seeds=[5000, 5001], wall_s=30)


def _outcome(result: RolloutResult) -> list:
    return [
        (e.seed, e.success, e.steps, e.cause, e.achievements, [(r.name, r.steps) for r in e.stages])
        for e in result.episodes
    ]


def test_an_environment_actor_on_another_machine_runs_a_learned_stage_fetched_by_sha256(
    tmp_path: Path,
) -> None:
    config, digest = _policy(tmp_path / "wood.zip")
    keys = create_keys(tmp_path / "keys")
    settings = make_settings(
        tmp_path, {"environment": ActorSettings(count=1)}, listen="tcp://127.0.0.1:0",
        keys_dir=str(keys), heartbeat_timeout=10,
    )  # fmt: skip
    elsewhere = tmp_path / "other-machine"  # the remote actor's run directory
    elsewhere.mkdir()
    seen: dict = {}

    async def driver(head: Head) -> dict:
        stored = head.run_dir / "policies" / "wood.zip"  # where the head keeps a result
        stored.parent.mkdir(parents=True)
        shutil.copy(tmp_path / "wood.zip", stored)
        remote = await _attach("environment", head, keys, "remote-env", "--run-dir",
                               str(elsewhere))  # fmt: skip
        try:
            await head.wait_for("environment", 2)
            seen["local"] = await head.client.ask(
                "environment-0", _composed(config, str(stored), digest), timeout=120
            )
            # The head's path means nothing there: the file comes by its hash ...
            seen["remote"] = await head.client.ask(
                "remote-env", _composed(config, str(stored), digest), timeout=120
            )
            # ... and a request naming the policy by its hash alone runs the same.
            seen["by_hash"] = await head.client.ask(
                "remote-env", _composed(config, "", digest), timeout=120
            )
        finally:
            remote.terminate()
            await remote.wait()
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    local, remote, by_hash = seen["local"], seen["remote"], seen["by_hash"]
    assert {e.cause for e in remote.episodes} != {"policy_unusable"}, remote.episodes[0].detail
    assert all(r.learned for e in remote.episodes for r in e.stages[:1])
    assert _outcome(remote) == _outcome(local) == _outcome(by_hash)
    cached = elsewhere / "artifacts" / "sha256" / digest
    assert cached.is_file() and hashlib.sha256(cached.read_bytes()).hexdigest() == digest
    assert not list((elsewhere / "artifacts" / "tmp").iterdir())  # no partial file left
    fetched = [e for e in read_events(elsewhere) if e["event"] == "artifact_fetched"]
    assert len(fetched) == 1  # the second request found it in the cache
    assert fetched[0]["bytes"] == cached.stat().st_size and fetched[0]["ms"] > 0
    print(f"policy fetch: {fetched[0]['bytes']} bytes in {fetched[0]['ms']} ms over loopback tcp")


class Worker(Actor):
    """An in-process worker that fetches through the real broker."""

    role = "probe"


class Tampering(ArtifactServer):
    """A fake head store that mangles the second chunk it sends (a test double: the real
    store never does)."""

    mangle = "corrupt"

    async def on_get(self, msg: ArtifactGet, env: Envelope) -> ArtifactChunk:
        chunk = await super().on_get(msg, env)
        if chunk.offset == 0:
            return chunk
        data = chunk.data
        if self.mangle == "corrupt":
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        elif self.mangle == "short":
            data = data[:-1]
        elif self.mangle == "shifted":
            return ArtifactChunk(chunk.sha256, chunk.offset + 1, data, chunk.size)
        return ArtifactChunk(chunk.sha256, chunk.offset, data, chunk.size)


@pytest.mark.parametrize("mangle", ["corrupt", "short", "shifted", "none"])
def test_a_corrupted_or_short_chunk_is_refused_and_nothing_is_kept(
    tmp_path: Path, monkeypatch, mangle: str
) -> None:
    # The head starts its store from runtime.head's name: swap in the tampering one.
    monkeypatch.setattr("runtime.head.ArtifactServer", Tampering)
    monkeypatch.setattr(Tampering, "mangle", mangle)
    blob = os.urandom(5000)  # three chunks under a 4 kB frame cap (2 kB each)
    digest = hashlib.sha256(blob).hexdigest()
    cache = Store(tmp_path / "cache")
    seen: dict = {}

    async def driver(head: Head) -> dict:
        Store(head.run_dir / "artifacts").add_bytes(blob, digest)
        worker = Worker(name="worker", max_frame_bytes=4096)
        await head.start_local(worker)
        try:
            seen["path"] = await artifacts.fetch(worker, digest, cache)
        except ArtifactError as exc:
            seen["error"] = str(exc)
        return {}

    assert run_head_with(make_settings(tmp_path), driver).code == 0
    if mangle == "none":
        assert seen["path"].read_bytes() == blob
        return
    assert "refused" in seen["error"], seen
    assert cache.get(digest) is None
    assert not list((cache.root / "tmp").iterdir())


def test_a_cached_file_that_no_longer_matches_its_hash_is_fetched_again(tmp_path: Path) -> None:
    blob = os.urandom(3000)
    digest = hashlib.sha256(blob).hexdigest()
    cache = Store(tmp_path / "cache")
    cache.add_bytes(blob, digest)
    cache.path(digest).write_bytes(b"rotten" + blob[6:])  # the disk changed it since
    seen: dict = {}

    async def driver(head: Head) -> dict:
        Store(head.run_dir / "artifacts").add_bytes(blob, digest)
        worker = Worker(name="worker")
        await head.start_local(worker)
        seen["path"] = await artifacts.fetch(worker, digest, cache)
        return {}

    run = run_head_with(make_settings(tmp_path), driver)
    assert run.code == 0
    assert seen["path"].read_bytes() == blob
    assert run.named("artifact_cache_corrupt") and run.named("artifact_fetched")


def test_a_put_whose_bytes_do_not_match_its_sha256_is_refused(tmp_path: Path) -> None:
    class FakeLearner(Actor):
        """Speaks the learner's put (the broker lets only learners put)."""

        role = "learner"

    seen: dict = {}

    async def driver(head: Head) -> dict:
        worker = FakeLearner(name="putter")
        await head.start_local(worker)
        seen["good"] = await artifacts.put(worker, b"x" * 3000, kind="checkpoint", job="j",
                                           decisions=5)  # fmt: skip
        lying = ArtifactPut("0" * 64, 0, b"y" * 10, 10)
        try:
            await worker.ask("@artifacts", lying, timeout=10)
        except Exception as exc:  # noqa: BLE001
            seen["lying"] = str(exc)
        seen["latest"] = await artifacts.latest_checkpoint(worker, "j")
        return {}

    run = run_head_with(make_settings(tmp_path), driver)
    assert run.code == 0
    assert "sha256" in seen["lying"]
    assert not (run.run_dir / "artifacts" / "sha256" / ("0" * 64)).exists()
    assert seen["latest"].sha256 == seen["good"] and seen["latest"].decisions == 5


def _zip(members: dict[str, bytes], link: str = "") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")
    return buf.getvalue()


@pytest.mark.parametrize(
    "members,link",
    [({"../escape": b"x"}, ""), ({"/abs/x": b"x"}, ""), ({"a/../../x": b"x"}, ""),
     ({"a\\..\\x": b"x"}, ""), ({"PPO_1/ok": b"x"}, "PPO_1/link")],
)  # fmt: skip
def test_a_tensorboard_pack_that_would_leave_its_folder_is_refused(
    tmp_path: Path, members: dict, link: str
) -> None:
    pack = tmp_path / "pack.zip"
    pack.write_bytes(_zip(members, link))
    dest = tmp_path / "run" / "tensorboard" / "job"
    with pytest.raises(ArtifactError):
        unpack_tensorboard(pack, dest)
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != pack]
    assert written == []


def test_a_tensorboard_pack_unpacks_into_its_jobs_folder(tmp_path: Path) -> None:
    pack = tmp_path / "pack.zip"
    pack.write_bytes(_zip({"PPO_1/events.out.tfevents.1": b"e1", "PPO_2/events.x": b"e2"}))
    dest = tmp_path / "tensorboard" / "job"
    assert unpack_tensorboard(pack, dest) == 2
    assert (dest / "PPO_1" / "events.out.tfevents.1").read_bytes() == b"e1"


@pytest.mark.slow  # 13-29 s each: keeps the default suite under 10 min; CI runs `-m slow` too
def test_a_job_whose_learner_dies_after_a_checkpoint_resumes_on_another_learner_elsewhere(
    tmp_path: Path,
) -> None:
    keys = create_keys(tmp_path / "keys")
    settings = make_settings(
        tmp_path, listen="tcp://127.0.0.1:0", keys_dir=str(keys), heartbeat_timeout=3
    )
    every = 256
    req = TrainRequest(
        name="moving", config=collect_wood_with_coded(), total_steps=1024, n_envs=2,
        ppo=TINY_PPO, eval_episodes=2, train_worlds=10, checkpoint_every=every,
        progress_every_s=0.2,
    )  # fmt: skip
    seen: dict = {}

    def machine(name: str) -> dict:
        # Each learner keeps its files in its own TMPDIR: two machines' disks. Both are
        # there from the start: the one that gets the job is killed, the other takes it.
        folder = tmp_path / name
        folder.mkdir()
        return {**os.environ, "TMPDIR": str(folder), "RLGPT_ARTIFACTS": str(folder / "cache")}

    async def driver(head: Head) -> dict:
        job_file = head.run_dir / "artifacts" / "jobs" / "moving.json"
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                seen["result"] = await head.client.ask("@learner", req)

            learners = {
                name: await _attach("learner", head, keys, name, env=machine(name))
                for name in ("learner-a", "learner-b")
            }
            await head.wait_for("learner", 2)
            nursery.start_soon(ask)

            def checkpointed() -> bool:
                if not job_file.is_file():
                    return False
                progress = head.client.progress.get("moving")
                return (
                    progress is not None
                    and json.loads(job_file.read_text()).get("decisions", 0) >= every
                )

            await wait_until(checkpointed, timeout=300, what="a checkpoint in the head's store")
            seen["killed_at"] = head.client.progress["moving"].steps
            seen["stored"] = json.loads(job_file.read_text())
            # The learner holding the job (the artifacts actor may hold a store at this moment).
            actors = head.broker.status().actors
            (holder,) = [a.actor_id for a in actors if a.role == "learner" and a.inflight]
            seen["killed"] = holder
            os.kill(learners[holder].pid, signal.SIGKILL)
            try:
                await wait_until(lambda: "result" in seen, timeout=300, what="the job's result")
                # The job is over: the checkpoint b fetched from the head is gone from b's
                # cache, and b's folders of the job with it (b still runs).
                disk = tmp_path / seen["result"].actor_id
                seen["b_files"] = sorted(str(p.relative_to(disk)) for p in disk.rglob("*")
                                         if p.is_file())  # fmt: skip
            finally:
                for proc in learners.values():
                    proc.terminate()
                    await proc.wait()
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    result: TrainResult = seen["result"]
    assert result.actor_id != seen["killed"]
    assert result.resumed_from >= every  # from the head's copy: its own disk had none
    assert result.resumed_from >= seen["stored"]["decisions"]
    assert result.steps >= 1024
    assert result.resumed_from + result.steps_lost >= seen["killed_at"]
    assert result.steps_lost <= every + 64
    stored = [e for e in run.named("artifact_stored") if e["kind"] == "checkpoint"]
    assert stored and all(e["bytes"] > 0 for e in stored)
    # b's TensorBoard files came back into the run's TensorBoard folder.
    events = list((run.run_dir / "tensorboard" / "moving").rglob("events.out.tfevents*"))
    assert events, sorted(p.name for p in (run.run_dir / "tensorboard").rglob("*"))
    packs = [e for e in run.named("artifact_stored") if e["kind"] == "tensorboard"]
    fetched = [e for e in run.named("artifact_fetched") if e.get("what") == "checkpoint"]
    assert fetched, "b resumed from the head's copy, fetched into its cache"
    assert seen["b_files"] == [], seen["b_files"]
    print(
        f"checkpoint {stored[-1]['bytes']} bytes, TensorBoard pack {packs[-1]['bytes']} bytes,"
        f" policy {len(result.policy_bytes)} bytes"
    )


def test_only_the_head_serves_artifacts_and_only_learners_put(tmp_path: Path) -> None:
    class Impostor(Actor):
        """A peer on the head's socket that would answer every worker's fetch."""

        role = "artifacts"

    seen: dict = {}

    async def driver(head: Head) -> dict:
        try:
            with trio.fail_after(30):
                await Impostor(name="store-2").run(head.endpoint)  # not a head-side connection
        except* ActorRefused as group:  # out of the actor's nursery
            seen["impostor"] = str(group.exceptions[0])
        worker = Worker(name="not-a-learner")
        await head.start_local(worker)
        try:
            await artifacts.put(worker, b"z" * 100, kind="checkpoint", job="j", decisions=1)
        except ArtifactError as exc:
            seen["put"] = str(exc)
        return {}

    run = run_head_with(make_settings(tmp_path), driver)
    assert run.code == 0
    assert "artifacts role is the head's own" in seen["impostor"]
    assert "only learner actors send artifact.put" in seen["put"]
    assert not (run.run_dir / "artifacts" / "jobs").exists()


class Learner(Actor):
    """Speaks the learner's side of the store (the broker lets only learners put)."""

    role = "learner"


async def _put_ask(actor: Actor, msg: ArtifactPut):
    """One put chunk's answer: the ack, or the store's refusal as text."""
    try:
        return await actor.ask("@artifacts", msg, timeout=10)
    except Exception as exc:  # noqa: BLE001
        return str(exc)


def test_a_get_reads_at_most_one_chunk_and_refuses_a_negative_offset(tmp_path: Path) -> None:
    blob = os.urandom(artifacts.CHUNK_BYTES * 3 + 5)  # over three chunks
    digest = hashlib.sha256(blob).hexdigest()
    seen: dict = {}

    async def driver(head: Head) -> dict:
        Store(head.run_dir / "artifacts").add_bytes(blob, digest)
        worker = Worker(name="worker")
        await head.start_local(worker)
        for length in (0, -1, -(1 << 40), 10, artifacts.CHUNK_BYTES * 4):
            seen[length] = await worker.ask("@artifacts", ArtifactGet(digest, 7, length))
        try:
            await worker.ask("@artifacts", ArtifactGet(digest, -5, 10), timeout=10)
        except Exception as exc:  # noqa: BLE001
            seen["negative"] = str(exc)
        return {}

    assert run_head_with(make_settings(tmp_path), driver).code == 0
    for length in (0, -1, -(1 << 40), artifacts.CHUNK_BYTES * 4):
        assert seen[length].data == blob[7 : 7 + artifacts.CHUNK_BYTES], length
    assert seen[10].data == blob[7:17]
    assert "offset -5 is negative" in seen["negative"]


def test_a_put_cannot_claim_a_checkpoint_it_does_not_send_nor_remove_what_others_name(
    tmp_path: Path,
) -> None:
    files = {name: os.urandom(3000) for name in "XYZWP"}
    sha = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    seen: dict = {}

    async def driver(head: Head) -> dict:
        store = Store(head.run_dir / "artifacts")
        # P is a policy of the run (stored as store_artifact does: linked into the store).
        policy = head.run_dir / "policies" / "p.zip"
        policy.parent.mkdir(parents=True)
        policy.write_bytes(files["P"])
        store.add_file(policy, sha["P"])
        honest, thief = Learner(name="honest"), Learner(name="thief")
        await head.start_local(honest)
        await head.start_local(thief)
        await artifacts.put(honest, files["X"], kind="checkpoint", job="a", decisions=1)
        # The thief names X without sending it, far ahead, for its own job and for a's.
        for job in ("b", "a"):
            claim = ArtifactPut(sha["X"], 0, b"", 3000, "checkpoint", job, 10**9)
            seen[f"claim_{job}"] = await _put_ask(thief, claim)
        seen["b_after_claim"] = await artifacts.latest_checkpoint(honest, "b")
        # Job b really holds X (sent whole), job c holds the policy's bytes.
        await artifacts.put(thief, files["X"], kind="checkpoint", job="b", decisions=1)
        await artifacts.put(thief, files["P"], kind="checkpoint", job="c", decisions=1)
        for decisions, name in ((2, "Y"), (3, "Z")):  # a and c move on twice each
            await artifacts.put(honest, files[name], kind="checkpoint", job="a",
                                decisions=decisions)  # fmt: skip
            await artifacts.put(honest, files[name], kind="checkpoint", job="c",
                                decisions=decisions)  # fmt: skip
        seen["kept"] = {name: store.get(sha[name]) is not None for name in sha}
        # A late checkpoint below a's record is not acknowledged, nor kept.
        try:
            await artifacts.put(honest, files["W"], kind="checkpoint", job="a", decisions=2)
        except ArtifactError as exc:
            seen["late"] = str(exc)
        seen["W_kept"] = store.get(sha["W"]) is not None
        seen["huge"] = await _put_ask(
            thief, ArtifactPut(sha["W"], 0, files["W"], 3000, "checkpoint", "a", 10**13)
        )
        seen["a"] = await artifacts.latest_checkpoint(honest, "a")
        return {}

    assert run_head_with(make_settings(tmp_path), driver).code == 0
    for job in ("a", "b"):
        ack = seen[f"claim_{job}"]
        assert not ack.complete and ack.received == 0, ack
    assert seen["b_after_claim"].sha256 == ""
    assert seen["kept"] == {"X": True, "Y": True, "Z": True, "W": False, "P": True}
    assert "holds a newer one" in seen["late"] and not seen["W_kept"]
    assert "decisions 10000000000000 is not in 0..1000000000000" in seen["huge"]
    assert (seen["a"].sha256, seen["a"].decisions) == (sha["Z"], 3)


def test_a_peer_has_at_most_two_puts_under_way_and_an_idle_one_expires(
    tmp_path: Path, monkeypatch
) -> None:
    blobs = [os.urandom(5000) for _ in range(4)]
    shas = [hashlib.sha256(b).hexdigest() for b in blobs]
    seen: dict = {}

    async def driver(head: Head) -> dict:
        tmp = head.run_dir / "artifacts" / "tmp"
        peer = Learner(name="peer")
        await head.start_local(peer)
        started = [ArtifactPut(s, 0, b[:1000], 5000, "checkpoint", f"j{i}", 1)
                   for i, (s, b) in enumerate(zip(shas, blobs, strict=True))]  # fmt: skip
        seen["first"] = [await _put_ask(peer, started[i]) for i in (0, 1)]
        seen["third"] = await _put_ask(peer, started[2])
        seen["parts"] = len(list(tmp.glob("*.part")))
        monkeypatch.setattr(artifacts, "PARTIAL_IDLE_S", 0.2, raising=False)
        await trio.sleep(0.5)  # both puts under way go idle
        seen["after_idle"] = await _put_ask(peer, started[3])
        seen["parts_after"] = len(list(tmp.glob("*.part")))
        return {}

    assert run_head_with(make_settings(tmp_path), driver).code == 0
    assert [ack.received for ack in seen["first"]] == [1000, 1000]
    assert isinstance(seen["third"], str), seen["third"]
    assert "peer already has 2 puts under way (at most 2)" in seen["third"]
    assert seen["parts"] == 2
    assert seen["after_idle"].received == 1000
    assert seen["parts_after"] == 1  # the two idle ones' temp files are gone


def test_a_jobs_previous_checkpoint_stays_one_generation_longer(tmp_path: Path) -> None:
    files = [os.urandom(3000) for _ in range(3)]
    shas = [hashlib.sha256(data).hexdigest() for data in files]
    seen: list = []

    async def driver(head: Head) -> dict:
        store = Store(head.run_dir / "artifacts")
        learner = Learner(name="learner")
        await head.start_local(learner)
        for decisions, data in enumerate(files, 1):
            await artifacts.put(learner, data, kind="checkpoint", job="j", decisions=decisions)
            seen.append([store.get(s) is not None for s in shas])
        return {}

    assert run_head_with(make_settings(tmp_path), driver).code == 0
    # A learner fetching the first when the second arrives still finds it; the third
    # removes the first, never the second.
    assert seen == [[True, False, False], [True, True, False], [False, True, True]]
