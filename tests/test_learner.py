"""Learner actors as real processes training real SB3 PPO on Crafter (small budgets)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import sys
import threading
from pathlib import Path

import pytest
import trio
from helpers import ROOT, make_settings, run_head_with

from actors.learner import LearnerActor, random_success
from messages.rollout import RolloutRequest
from messages.task import RLConfig, Subtask
from messages.train import PPOSettings, TrainRequest, TrainResult
from method import seeds
from rl import start_states
from rl.artifacts import sha256_of, store_artifact
from rl.configs import collect_wood_primitive, collect_wood_with_coded
from runtime.config import ActorSettings
from runtime.head import Head
from runtime.security import create_keys

# A tight cap and every primitive on offer make wood hard to get by luck: the coded
# actions must be chosen, in order (walk to a tree, then chop it), among 19 actions,
# without wasting the few steps there are. A random policy succeeds ~35% of the time.
TIGHT_STEPS = 30
SMALL_PPO = PPOSettings(n_steps=128, batch_size=64, n_epochs=4, learning_rate=1e-3)
TINY_PPO = PPOSettings(n_steps=64, batch_size=64, n_epochs=2, learning_rate=1e-3)
"""One update per 128 decisions (2 envs): for tests of mechanics, not of learning."""


def tight_wood() -> RLConfig:
    base = collect_wood_with_coded()
    subtask = Subtask("collect_wood_tight", goal={"wood": 1}, max_steps=TIGHT_STEPS)
    fields = {name: getattr(base, name) for name in base.__dataclass_fields__}
    return RLConfig(**{**fields, "subtask": subtask, "primitives": []})


def request(name: str, steps: int, **kw) -> TrainRequest:
    # Mechanics tests need little evaluation and few distinct worlds (each is generated
    # once, ~0.1 s); the learning test asks for more.
    defaults = dict(n_envs=2, ppo=SMALL_PPO, eval_episodes=4, train_worlds=20, progress_every_s=0.5)
    return TrainRequest(name=name, config=tight_wood(), total_steps=steps, **{**defaults, **kw})


# Slow (a learning check, 3,072 decisions of PPO, ~30 s): keeps the default suite under 10 min.
@pytest.mark.slow
def test_a_job_trains_reports_progress_and_beats_random(tmp_path: Path) -> None:
    actors = {"learner": ActorSettings(count=1), "environment": ActorSettings(count=1)}
    settings = make_settings(tmp_path, actors)
    seen: dict = {}
    req = request("wood", 3072, eval_episodes=30, train_worlds=200)

    async def driver(head: Head) -> dict:
        await head.wait_for("learner", 1)
        result = seen["result"] = await head.client.ask("@learner", req, timeout=400)
        seen["progress"] = head.client.progress.get("wood")
        # The trained policy, by reference, played by an environment actor.
        rollout = RolloutRequest(
            req.config.subtask, policy_path=result.policy_path, policy_sha256=result.sha256,
            config=req.config, seeds=list(range(7000, 7010)),
        )  # fmt: skip
        seen["rollout"] = await head.client.ask("@environment", rollout, timeout=120)
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    result: TrainResult = seen["result"]
    baseline = random_success(req, episodes=req.eval_episodes)
    print(f"learned {result.eval_success_rate:.2f} vs random {baseline:.2f} on held-out seeds")
    assert result.steps >= 3072 and result.primitive_steps > result.steps  # options: >1 step
    assert result.eval_success_rate >= baseline + 0.2
    assert result.eval_success_rate >= 0.6
    # The artifact is a loadable SB3 policy and its hash is the file's.
    policy = Path(result.policy_path)
    assert policy.is_file() and sha256_of(policy) == result.sha256
    from stable_baselines3 import PPO

    PPO.load(policy, device="cpu")
    assert Path(result.tensorboard_dir).is_dir()
    progress = seen["progress"]
    assert progress is not None and progress.steps > 0 and progress.steps_per_s > 0
    assert len(run.named("training_progress")) >= 2
    played = seen["rollout"]
    assert [e.seed for e in played.episodes] == list(range(7000, 7010))
    assert played.success_rate >= 0.5, [(e.cause, e.detail) for e in played.episodes]
    assert all("walk_to_tree" in e.detail or "chop_tree" in e.detail for e in played.episodes)


def test_two_jobs_train_at_once_in_two_learner_processes(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, {"learner": ActorSettings(count=2)})
    results: list[TrainResult] = []

    async def driver(head: Head) -> dict:
        await head.wait_for("learner", 2)
        async with trio.open_nursery() as nursery:
            for name in ("a", "b"):

                async def one(name: str = name) -> None:
                    results.append(await head.client.ask("@learner", request(name, 1024)))

                nursery.start_soon(one)
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    assert sorted(r.name for r in results) == ["a", "b"]
    assert len({r.actor_id for r in results}) == 2  # one job per learner process
    # Concurrent: both jobs started before either finished.
    marks = ("training_started", "training_finished")
    order = [e["event"] for e in run.events if e["event"] in marks]
    assert order[:2] == ["training_started", "training_started"]


def test_a_learner_attached_over_curve_gets_queued_work_and_its_artifact_arrives(
    tmp_path: Path,
) -> None:
    keys = create_keys(tmp_path / "keys")
    settings = make_settings(tmp_path, listen="tcp://127.0.0.1:0", keys_dir=str(keys))
    seen: dict = {}

    async def driver(head: Head) -> dict:
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                seen["result"] = await head.client.ask("@learner", request("remote", 512))

            nursery.start_soon(ask)
            await trio.sleep(0.2)
            assert head.broker.status().queued == {"@learner": 1}
            argv = [sys.executable, str(ROOT / "run.py"), "attach", "learner"]
            learner = await trio.lowlevel.open_process(
                [*argv, "--connect", head.listen, "--keys", str(keys), "--quiet"]
            )
            try:
                with trio.fail_after(300):
                    while "result" not in seen:
                        await trio.sleep(0.1)
            finally:
                learner.terminate()
                await learner.wait()
        seen["stored"] = store_artifact(head.run_dir, seen["result"])
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    result: TrainResult = seen["result"]
    assert result.policy_bytes, "a remote learner sends the policy itself"
    stored = seen["stored"]
    assert stored == run.run_dir / "policies" / "remote.zip"
    assert sha256_of(stored) == result.sha256


@pytest.mark.slow  # 13-29 s each: keeps the default suite under 10 min; CI runs `-m slow` too
def test_a_learner_killed_mid_job_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, {"learner": ActorSettings(count=1)}, heartbeat_timeout=5)
    every = 256
    seen: dict = {}

    async def driver(head: Head) -> dict:
        await head.wait_for("learner", 1)
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                req = request("resume", 1536, checkpoint_every=every, progress_every_s=0.2)
                seen["result"] = await head.client.ask("@learner", req)

            nursery.start_soon(ask)
            with trio.fail_after(300):
                while (p := head.client.progress.get("resume")) is None or p.steps < 2 * every:
                    await trio.sleep(0.05)
            (learner,) = [a for a in head.broker.status().actors if a.role == "learner"]
            seen["killed_at"] = head.client.progress["resume"].steps
            os.kill(learner.pid, signal.SIGKILL)
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    result: TrainResult = seen["result"]
    assert result.resumed_from >= every  # it did not start over
    assert result.resumed_from <= seen["killed_at"]
    assert result.steps >= 1536
    # What the crash cost: at least what we saw it reach past its checkpoint, at most one
    # checkpoint interval (plus the reporting lag).
    assert result.resumed_from + result.steps_lost >= seen["killed_at"]
    assert result.steps_lost <= every + 64
    assert run.named("training_resumed")
    assert [e for e in run.named("actor_process_exited") if e["cause"] == "signal SIGKILL"]


def _learner_here(tmp_path: Path) -> LearnerActor:
    """The real learner's ``train`` run in this process (no actor loop around it)."""
    learner = LearnerActor.__new__(LearnerActor)
    learner.workdir, learner.run_dir = tmp_path, tmp_path
    learner.run_id, learner.actor_id = "r", "learner-test"
    return learner


def test_every_world_step_of_a_job_is_reported_setup_included(tmp_path: Path) -> None:
    # Setup takes 2 steps in each world: they are world steps of the job, with PPO's.
    start_states.shared().clear()  # this process's starts: none made yet
    setup = "def run(skills):\n    yield 'noop'\n    yield 'noop'\n"
    config = dataclasses.replace(tight_wood(), setup_code=setup)
    req = request("counted", 256, eval_episodes=3, train_worlds=2)
    req = dataclasses.replace(req, config=config, progress_every_s=3600.0)  # no asker here
    result = _learner_here(tmp_path).train(req, "cpu", threading.Event(), "nobody")
    assert not result.failure and result.policy_path
    lengths = [e.length for e in result.world_episodes]
    total = result.primitive_steps + result.setup_steps + result.eval_primitive_steps
    assert sum(lengths) == total and result.episodes == len(lengths)
    # Setup runs (and counts) once per world — 2 training worlds, 3 held-out ones — and
    # every other reset restores the start it left.
    assert result.setup_steps == 2 * (2 + 3) < 2 * len(lengths)
    assert result.primitive_steps >= 256 and result.eval_primitive_steps > 0


def test_a_job_whose_setup_keeps_failing_still_reports_its_steps(tmp_path: Path) -> None:
    # Setup walks 3 steps, then dies in every world: each reset tries SETUP_RETRIES more.
    start_states.shared().clear()
    setup = "def run(skills):\n    yield 'noop'\n    yield 'noop'\n    yield 'noop'\n"
    setup += "    raise ValueError('never')\n"
    config = dataclasses.replace(tight_wood(), setup_code=setup)
    req = dataclasses.replace(request("doomed", 256), config=config, progress_every_s=3600.0)
    result = _learner_here(tmp_path).train(req, "cpu", threading.Event(), "nobody")
    assert "never" in result.failure and result.policy_path == ""
    # The first reset of each env (both step in one worker process, which answers both
    # before the error is raised) fails on 1 + SETUP_RETRIES worlds of 3 steps.
    tries = 1 + seeds.SETUP_RETRIES
    assert result.setup_steps == 3 * tries * req.n_envs and result.primitive_steps == 0
    assert [e.length for e in result.world_episodes] == [3] * tries * req.n_envs


def _checkpoint(folder: Path, req: TrainRequest) -> Path:
    """A real checkpoint of ``req``'s job after one PPO update, where the learner keeps it."""
    from actors.learner import make_ppo
    from rl.rl_env import make_vec_env

    vec = make_vec_env(req.config, req.n_envs, req.seed)
    try:
        model = make_ppo(req.ppo, vec, seed=req.seed, device="cpu")
        model.learn(req.ppo.n_steps)  # one rollout of n_steps per env, one update
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"ckpt-{model.num_timesteps}.zip"
        model.save(path)
    finally:
        vec.close()
    return path


def test_a_checkpoint_is_resumed_without_unpickling_what_its_data_holds(tmp_path: Path) -> None:
    # A checkpoint whose data carries a pickle PPO.load would run (it unpickles
    # ep_info_buffer, gets None and goes on): the learner resumes from its weights, the
    # optimizer state and the counters, and nothing in it runs.
    import base64
    import json
    import pickle
    import zipfile

    from test_safe_load import Touch

    req = dataclasses.replace(
        request("poisoned", 256, eval_episodes=1, ppo=TINY_PPO),
        config=collect_wood_primitive(),  # one world step a decision: fast
        progress_every_s=3600.0,
    )
    clean = _checkpoint(tmp_path / "learners" / "poisoned", req)
    marker = tmp_path / "pwned"
    with zipfile.ZipFile(clean) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    data = json.loads(members["data"])
    blob = base64.b64encode(pickle.dumps(Touch(marker))).decode()
    data["ep_info_buffer"] = {":type:": "<class 'collections.deque'>", ":serialized:": blob}
    members["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(clean, "w") as zf:
        for name, content in members.items():
            zf.writestr(name, content)

    result = _learner_here(tmp_path).train(req, "cpu", threading.Event(), "nobody")
    assert not marker.exists(), "the learner unpickled its checkpoint's data"
    assert result.resumed_from == 128 and not result.failure
    assert result.steps >= 256 and result.policy_path


def test_a_checkpoint_that_cannot_be_used_is_left_and_the_job_starts_over(
    tmp_path: Path,
) -> None:
    import structlog

    req = dataclasses.replace(
        request("torn", 128, eval_episodes=1, ppo=TINY_PPO),
        config=collect_wood_primitive(),
        progress_every_s=3600.0,
    )
    folder = tmp_path / "learners" / "torn"
    folder.mkdir(parents=True)
    (folder / "ckpt-64.zip").write_bytes(b"PK\x03\x04 torn by a full disk")
    with structlog.testing.capture_logs() as logs:
        result = _learner_here(tmp_path).train(req, "cpu", threading.Event(), "nobody")
    assert result.resumed_from == 0 and result.steps >= 128 and result.policy_path
    (refused,) = [e for e in logs if e["event"] == "checkpoint_unusable"]
    assert "not a readable zip" in refused["detail"] and refused["job"] == "torn"


def test_a_model_without_curves_leaves_no_logger_folder(tmp_path: Path, monkeypatch) -> None:
    # SB3 makes an empty $TMPDIR/SB3-<time> folder per learn() when it writes no curves.
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    req = dataclasses.replace(
        request("quiet", 128, eval_episodes=1, ppo=TINY_PPO), config=collect_wood_primitive()
    )
    _checkpoint(tmp_path / "ckpt", req)
    assert (tmp_path / "ckpt").is_dir()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("SB3-")]


def test_a_job_sent_back_after_its_deadline_waits_for_its_first_attempt_to_end(
    tmp_path: Path, monkeypatch
) -> None:
    # One learner, a deadline shorter than the job: the broker takes the job back and,
    # with no other learner, sends it to the same one. The cancelled attempt answers at
    # once but its worker thread runs on to its next PPO step (or through its
    # evaluation): the next attempt must not start training before that thread ends.
    from runtime.actor import RemoteFailure

    # A stopped attempt's thread lingers 1 s (test hook), as in a long evaluation: the
    # job sent back always finds it still running. (Without it the thread usually stops
    # at its next step before the job comes back, and nothing needs waiting for: the
    # check below was a race.) Each attempt has 5 s: the first thread's wind-down took
    # 2.1 s on a loaded machine, and with 2 s the second attempt's own deadline passed
    # while it waited, so it never trained and the check below could not be made. The
    # job (65,536 decisions) never ends inside 5 s.
    monkeypatch.setenv("RLGPT_TEST_HOOKS", "1")
    monkeypatch.setenv("RLGPT_TEST_LINGER_S", "1")

    settings = make_settings(
        tmp_path, {"learner": ActorSettings(count=1)}, max_job_tries=2, heartbeat_timeout=30
    )
    req = dataclasses.replace(
        request("again", 65_536, eval_episodes=8, ppo=TINY_PPO), progress_every_s=3600.0
    )
    seen: dict = {}

    async def driver(head: Head) -> dict:
        await head.wait_for("learner", 1)
        try:
            await head.client.ask("@learner", req, deadline_s=5.0)
        except RemoteFailure as exc:
            seen["failure"] = exc.failure.reason
        # Let every attempt's thread end, so its events are in the file.
        with trio.fail_after(120):
            while len(marked(head.run_dir, "training_worker_ended")) < len(
                marked(head.run_dir, "training_started")
            ):
                await trio.sleep(0.5)
        return {}

    def marked(run_dir: Path, event: str) -> list[dict]:
        from helpers import read_events

        return [e for e in read_events(run_dir) if e["event"] == event]

    run = run_head_with(settings, driver)
    assert run.code == 0 and seen["failure"] == "deadline"
    marks = [
        (e["event"], e["ts"])
        for e in run.events
        if e.get("actor") == "learner-0"
        and e["event"] in ("training_started", "training_worker_ended")
    ]
    events = [m[0] for m in marks]
    assert events[:4] == ["training_started", "training_worker_ended"] * 2, events
    assert any(e["event"] == "training_waits_for_previous_attempt" for e in run.events)


def test_a_remote_learner_leaves_nothing_behind_and_trusts_no_other_runs_checkpoint(
    tmp_path: Path,
) -> None:
    # A learner attached over tcp without a run directory, on its own "disk" (TMPDIR and
    # artifact cache). Before it starts, an earlier run that used the same run id left a
    # checkpoint and an attempts.jsonl for the job there: the head has no record of the
    # job, so they are not this run's and the job starts afresh, losing nothing.
    keys = create_keys(tmp_path / "keys")
    settings = make_settings(tmp_path, listen="tcp://127.0.0.1:0", keys_dir=str(keys))
    disk = tmp_path / "machine2"
    req = dataclasses.replace(
        request("cleaned", 256, eval_episodes=1, ppo=TINY_PPO, checkpoint_every=128),
        config=collect_wood_primitive(),  # one world step a decision: fast
        progress_every_s=3600.0,
    )
    seen: dict = {}

    async def driver(head: Head) -> dict:
        base = disk / "rlgpt-learner" / head.run_id
        stale = base / "learners" / "cleaned"
        stale.mkdir(parents=True)
        (stale / "ckpt-1024.zip").write_bytes(b"PK\x03\x04 another run's checkpoint")
        (stale / "attempts.jsonl").write_text('{"actor": "learner-old", "reached": 1100}\n')
        env = {**os.environ, "TMPDIR": str(disk), "RLGPT_ARTIFACTS": str(disk / "cache")}
        argv = [sys.executable, str(ROOT / "run.py"), "attach", "learner", "--connect",
                head.listen, "--keys", str(keys), "--quiet"]  # fmt: skip
        learner = await trio.lowlevel.open_process(argv, env=env)
        try:
            await head.wait_for("learner", 1)
            seen["result"] = await head.client.ask("@learner", req, timeout=300)
            # The job finished: its folders are gone while the learner still runs.
            seen["after_job"] = sorted(str(p.relative_to(disk)) for p in base.rglob("*"))
        finally:
            learner.terminate()  # SIGTERM: it stops and cleans up
            seen["status"] = await learner.wait()
        seen["after_stop"] = sorted(str(p.relative_to(disk)) for p in disk.rglob("*"))
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    result: TrainResult = seen["result"]
    assert result.policy_bytes and not result.failure
    assert result.resumed_from == 0 and result.steps_lost == 0, result
    assert "learners/cleaned" not in " ".join(seen["after_job"]), seen["after_job"]
    assert "tensorboard/cleaned" not in " ".join(seen["after_job"]), seen["after_job"]
    assert seen["status"] == 0
    # Nothing of the run is left on the learner's disk (the cache's empty folders are
    # the machine's, not the run's).
    left = [p for p in seen["after_stop"] if (disk / p).is_file() or "rlgpt-learner" in p]
    assert left == [], left
    # The head's copies: every checkpoint and the TensorBoard files.
    stored = [e for e in run.named("artifact_stored") if e["kind"] == "checkpoint"]
    assert [e["job"] for e in stored] == ["cleaned", "cleaned"]
    assert list((run.run_dir / "tensorboard" / "cleaned").rglob("events.out.tfevents*"))
    removed = run.named("learner_files_removed")
    assert any(e.get("why") == "job_finished" for e in removed), removed


def test_a_stopping_remote_learner_keeps_only_a_checkpoint_the_head_never_acknowledged(
    tmp_path: Path,
) -> None:
    import structlog

    def stopping(acked: set[int]) -> LearnerActor:
        """A remote learner (no run directory) that trained job ``j``, whose newest
        checkpoint is ckpt-256, and the head acknowledged the checkpoints ``acked``."""
        learner = LearnerActor.__new__(LearnerActor)
        learner.workdir, learner.run_dir, learner.run_id = tmp_path / "rlgpt-learner", None, "r"
        learner._jobs, learner._acked = {"j"}, {"j": acked}
        learner._workers, learner._fetched, learner._curves_kept = {}, {}, set()
        job = tmp_path / "rlgpt-learner" / "r" / "learners" / "j"
        job.mkdir(parents=True)
        (job / "ckpt-256.zip").write_bytes(b"x" * 100)
        (job / "attempts.jsonl").write_text('{"reached": 300}\n')
        curves = tmp_path / "rlgpt-learner" / "r" / "tensorboard" / "j" / "PPO_1"
        curves.mkdir(parents=True)
        (curves / "events.out.tfevents.1").write_bytes(b"y" * 10)
        return learner

    with structlog.testing.capture_logs() as logs:
        stopping({128})._clean_up()
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["rlgpt-learner/r/learners/j/attempts.jsonl",
                    "rlgpt-learner/r/learners/j/ckpt-256.zip"]  # fmt: skip
    (kept,) = [e for e in logs if e["event"] == "learner_files_kept"]
    assert kept["paths"] == [str(tmp_path / "rlgpt-learner/r/learners/j/ckpt-256.zip")]
    assert "never acknowledged" in kept["why"]
    shutil.rmtree(tmp_path / "rlgpt-learner")

    with structlog.testing.capture_logs() as logs:
        stopping({128, 256})._clean_up()
    assert list(tmp_path.iterdir()) == []  # rlgpt-learner itself went
    (removed,) = [e for e in logs if e["event"] == "learner_files_removed"]
    assert (removed["files"], removed["bytes"]) == (3, 100 + 17 + 10)
    assert not [e for e in logs if e["event"] == "learner_files_kept"]


def test_a_job_named_with_path_characters_is_refused_and_writes_nothing_outside(
    tmp_path: Path,
) -> None:
    # The job name names the learner's folders: "../../victim" must not reach beside them.
    from runtime.actor import RemoteFailure

    settings = make_settings(tmp_path, {"learner": ActorSettings(count=1)}, max_job_tries=1)
    req = dataclasses.replace(
        request("../../victim", 128, eval_episodes=1, ppo=TINY_PPO),
        config=collect_wood_primitive(),
        progress_every_s=3600.0,
    )
    seen: dict = {}

    async def driver(head: Head) -> dict:
        victim = (head.run_dir / "learners" / req.name).resolve()
        victim.mkdir(parents=True)
        (victim / "keep.txt").write_text("mine")
        seen["victim"] = victim
        await head.wait_for("learner", 1)
        try:
            seen["result"] = await head.client.ask("@learner", req, timeout=120)
        except RemoteFailure as exc:
            seen["failure"] = str(exc)
        return {}

    run = run_head_with(settings, driver)
    assert run.code == 0
    assert "not a plain file name" in seen.get("failure", ""), seen
    assert [p.name for p in seen["victim"].iterdir()] == ["keep.txt"]


def test_a_remote_learner_removes_nothing_outside_its_folder(tmp_path: Path) -> None:
    from actors.learner import _Tally

    base = tmp_path / "rlgpt-learner" / "r"
    (base / "learners").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    tally = _Tally(base)
    tally.remove(base / "learners" / ".." / ".." / ".." / "victim")
    tally.remove(victim / "keep.txt")
    assert (victim / "keep.txt").read_text() == "mine" and tally.files == 0


def test_a_remote_learner_counts_no_steps_lost_from_an_untrusted_folder(tmp_path: Path) -> None:
    # A local checkpoint further than the head ever heard of is an earlier run's: so is
    # the attempts.jsonl beside it, whose "reached" must not count as decisions lost.
    from actors.learner import HeadCheckpoint

    learner = _learner_here(tmp_path)
    learner.run_dir = None
    req = dataclasses.replace(
        request("stale", 128, eval_episodes=1, ppo=TINY_PPO, checkpoint_every=128),
        config=collect_wood_primitive(),
        progress_every_s=3600.0,
    )
    folder = tmp_path / "r" / "learners" / "stale"
    folder.mkdir(parents=True)
    (folder / "ckpt-1024.zip").write_bytes(b"PK\x03\x04 another run's checkpoint")
    (folder / "attempts.jsonl").write_text('{"actor": "learner-old", "reached": 1100}\n')
    head = HeadCheckpoint(None, 0, 64)
    result = learner.train(req, "cpu", threading.Event(), "nobody", head)
    assert result.resumed_from == 0 and result.steps_lost == 64, result
    assert "learner-old" not in (folder / "attempts.jsonl").read_text()


def test_a_remote_learner_fetches_checkpoints_into_a_folder_of_its_own(tmp_path: Path) -> None:
    # Not the machine's shared cache: another learner there may be resuming from a file
    # this one removes when its job ends.
    learner = _learner_here(tmp_path)
    learner.run_dir = None
    root = learner._fetch_store().root
    assert root.is_relative_to(learner._base()) and str(os.getpid()) in root.parts


def test_a_job_stops_at_its_world_step_cap_after_the_rollout_under_way(tmp_path: Path) -> None:
    # 2,048 decisions asked; a cap of 300 world steps stops it after the first rollout
    # that passes it (one rollout is 128 decisions of 1+ world steps each here).
    start_states.shared().clear()
    req = request("capped", 2048, ppo=TINY_PPO, eval_episodes=2, progress_every_s=3600.0)
    req = dataclasses.replace(req, max_world_steps=300)
    result = _learner_here(tmp_path).train(req, "cpu", threading.Event(), "nobody")
    assert not result.failure and result.policy_path
    taken = result.primitive_steps + result.setup_steps
    assert taken >= 300
    # Stopped within one rollout past the cap: far below what 2,048 decisions take.
    assert result.steps < 2048 and result.steps <= 2 * 128 + 2


def test_pruning_tolerates_a_folder_another_learner_removes_meanwhile(
    tmp_path: Path, monkeypatch
) -> None:
    # Two remote learners of one run on one machine stop together and prune the same
    # folder: one's walk must not die on a folder the other removed (a slow Ray test saw
    # a learner exit with status 1 from it, and its launcher wait for a head long gone).
    from actors.learner import _Tally

    base = tmp_path / "base"
    (base / "run" / "tensorboard" / "a").mkdir(parents=True)
    (base / "run" / "learners").mkdir()
    real = os.scandir

    def racing(path=".", *args):
        named = isinstance(path, (str, os.PathLike))
        if named and Path(path).name == "tensorboard" and Path(path).exists():
            shutil.rmtree(path)  # the other learner got there first
        return real(path, *args)

    monkeypatch.setattr(os, "scandir", racing)
    _Tally(base.resolve()).prune(base / "run")
    monkeypatch.undo()
    assert not (base / "run").exists()
