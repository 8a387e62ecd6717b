"""A learner's training envs in long-lived worker processes (``rl/env_workers.py``):
the same episodes as in one process, starts cached across jobs, errors and deaths."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

from actors.learner import LearnerActor, world_tally
from messages.task import RLConfig, Subtask
from messages.train import PPOSettings, TrainRequest
from rl import start_states
from rl.configs import collect_wood_with_coded
from rl.env_workers import EnvWorkers, WorkerDied
from rl.rl_env import SetupError, make_vec_env

TWO_NOOPS = "def run(skills):\n    yield 'noop'\n    yield 'noop'\n"
"""Setup code of 2 world steps: every start it makes is counted as 2 setup steps."""


def wood(setup: str = "") -> RLConfig:
    base = collect_wood_with_coded()
    subtask = Subtask("collect_wood_short", goal={"wood": 1}, max_steps=40)
    return dataclasses.replace(base, subtask=subtask, setup_code=setup)


def play(vec, steps: int, seed: int = 0) -> list:
    """``steps`` vector steps of seeded random actions: every observation, reward, done."""
    rng = np.random.default_rng(seed)
    vec.seed(seed)
    trace = [vec.reset()]
    for _ in range(steps):
        actions = rng.integers(vec.action_space.n, size=vec.num_envs)
        obs, rewards, dones, infos = vec.step(actions)
        trace.append((obs, rewards.tolist(), dones.tolist(), [i.get("seed") for i in infos]))
    return trace


def same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


@pytest.fixture(scope="module")
def pool():
    workers = EnvWorkers()
    yield workers
    workers.close()


@pytest.fixture
def workers(pool):
    """The module's workers (starting one costs seconds), none of them busy."""
    assert not pool._busy
    return pool


def test_workers_step_the_same_episodes_and_count_the_same_steps(workers):
    kwargs = dict(world_pool=range(100, 104), start_states=True)
    start_states.shared().clear()
    here = make_vec_env(wood(TWO_NOOPS), 2, seed=7, **kwargs)
    there = make_vec_env(wood(TWO_NOOPS), 2, seed=7, subproc=True, workers=workers, **kwargs)
    try:
        a, b = play(here, 120), play(there, 120)
        assert same(a, b)
        assert sum(1 for _, _, dones, _ in a[1:] for d in dones if d) >= 4  # episodes ended
        ta, tb = world_tally(here), world_tally(there)
        # The same world steps, setup included: each env draws from its own share of
        # the pool, so no start is made twice however the envs are spread.
        assert ta["world_steps"] == tb["world_steps"] and ta["setup_steps"] == tb["setup_steps"]
        # Worlds 7, 8 (the envs' own first seeds), 0, 1 (seeded by play) and the pool's
        # 4: each started once, 2 setup steps each.
        assert ta["setup_steps"] == 2 * 8
        assert tb["world_steps"] == sum(length for length, _, _ in tb["episodes"])
    finally:
        here.close()
        there.close()
    assert len(workers) >= 2 and all(pid != os.getpid() for pid in workers.pids())


def test_workers_outlive_the_job_and_keep_the_starts_they_made(workers):
    kwargs = dict(world_pool=range(200, 202), start_states=True)
    first = make_vec_env(wood(TWO_NOOPS), 2, seed=3, subproc=True, workers=workers, **kwargs)
    play(first, 60)
    made = world_tally(first)["setup_steps"]
    first.close()
    # (Read after the first job: it may be the module's first, which starts the workers.)
    pids, started = workers.pids(), workers.started
    assert made >= 2 * 2  # each worker made the starts of the worlds it drew
    # A later job on the same setup (another version of the sub-action): same workers,
    # and every start is restored from their caches, no setup step taken.
    second = make_vec_env(wood(TWO_NOOPS), 2, seed=3, subproc=True, workers=workers, **kwargs)
    play(second, 60)
    assert world_tally(second)["setup_steps"] == 0
    second.close()
    assert workers.pids() == pids and workers.started == started


def test_a_setup_error_comes_back_with_its_fields_and_the_counts_survive(workers):
    setup = "def run(skills):\n    yield 'noop'\n    x = 1 // 0\n"
    started = workers.started
    vec = make_vec_env(
        wood(setup), 2, seed=0, subproc=True, workers=workers, setup_retries=1,
        start_states=True,
    )  # fmt: skip
    with pytest.raises(SetupError) as caught:
        vec.reset()
    err = caught.value
    assert err.failure is not None and err.failure.cause == "exception"
    assert "ZeroDivisionError" in err.failure.detail and err.steps == 1
    # Both workers answered and live on: what the failed setups stepped is still read.
    tally = world_tally(vec)
    assert tally["setup_steps"] == 2 * 2 == tally["world_steps"]  # 2 envs × 2 tries × 1 step
    vec.close()
    assert workers.started == started and all(w.alive() for w in workers._workers)


def test_a_killed_worker_is_reported_and_replaced_for_the_next_job(workers):
    started, count = workers.started, len(workers)
    vec = make_vec_env(wood(), 2, seed=0, subproc=True, workers=workers)
    vec.reset()
    os.kill(vec._workers[1].process.pid, signal.SIGKILL)
    with pytest.raises(WorkerDied):
        vec.step(np.zeros(2, dtype=int))
    vec.close()
    again = make_vec_env(wood(), 2, seed=0, subproc=True, workers=workers)
    again.reset()
    again.step(np.zeros(2, dtype=int))
    again.close()
    assert workers.started == started + 1 and len(workers) == count


def test_two_jobs_at_once_never_share_a_worker(workers):
    a = make_vec_env(wood(), 2, seed=0, subproc=True, workers=workers)
    b = make_vec_env(wood(), 1, seed=0, subproc=True, workers=workers)
    pids_a = {w.process.pid for w in a._workers}
    assert len(pids_a | {w.process.pid for w in b._workers}) == 3
    a.close()
    b.close()
    started = workers.started
    c = make_vec_env(wood(), 3, seed=0, subproc=True, workers=workers)
    assert workers.started == started  # freed ones are used again
    c.close()


def _learner_here(tmp_path: Path) -> LearnerActor:
    learner = LearnerActor.__new__(LearnerActor)
    learner.workdir, learner.run_dir = tmp_path, tmp_path
    learner.run_id, learner.actor_id = "r", "learner-test"
    learner._env_workers = None
    return learner


def test_a_job_trained_in_workers_is_the_job_trained_in_one_process(tmp_path: Path):
    """Real PPO: the same job with its envs in one worker process and in a worker
    process each gives the same policy, bit for bit, and the same counted steps."""
    ppo = PPOSettings(n_steps=64, batch_size=64, n_epochs=2, learning_rate=1e-3)
    results = {}
    for subproc in (False, True):
        start_states.shared().clear()
        req = TrainRequest(
            name=f"job-{subproc}", config=wood(TWO_NOOPS), total_steps=192, n_envs=2,
            ppo=ppo, eval_episodes=5, train_worlds=4, progress_every_s=3600.0,
            subproc=subproc,
        )  # fmt: skip
        learner = _learner_here(tmp_path / str(subproc))
        try:
            results[subproc] = learner.train(req, "cpu", threading.Event(), "nobody")
            # One worker process per env when the job asks for them, else one for all
            # (the policy code never runs in the learner's own process).
            workers = learner._env_workers
            assert workers is not None and len(workers) == (2 if subproc else 1)
        finally:
            if learner._env_workers is not None:
                learner._env_workers.close()
    here, there = results[False], results[True]
    assert not here.failure and not there.failure
    assert same_weights(Path(here.policy_path), Path(there.policy_path))
    assert (here.primitive_steps, here.setup_steps) == (there.primitive_steps, there.setup_steps)
    # The held-out check too (5 worlds: 3 in one worker, 2 in the other), its
    # episodes listed in the same order.
    assert here.world_episodes == there.world_episodes
    assert here.eval_success_rate == there.eval_success_rate


def test_the_held_out_check_runs_in_the_workers_and_matches_one_process(
    workers, tmp_path: Path, monkeypatch
):
    """A saved policy's held-out check split over a job's workers gives what one process
    playing every world gives, record for record and step for step, and no world of it
    is played in the learner's process."""
    from actors.learner import make_ppo
    from messages import encode
    from rl import held_out as module
    from rl.held_out import play_learned

    config = wood(TWO_NOOPS)
    path = tmp_path / "policy.zip"
    local = make_vec_env(config, 1)
    make_ppo(PPOSettings(net_arch=[16]), local, seed=3, device="cpu").save(path)
    local.close()
    seeds = list(range(40, 47))
    start_states.shared().clear()
    alone = play_learned(encode(config), str(path), seeds, 5)
    vec = make_vec_env(config, 2, seed=9, subproc=True, workers=workers, start_states=True)
    try:

        def here(*args, **kwargs):
            raise AssertionError("a held-out world was played in the learner's process")

        monkeypatch.setattr(module, "make_env", here)
        split = vec.held_out(str(path), seeds, 5)
    finally:
        vec.close()
    assert [r["seed"] for r in split["records"]] == seeds
    assert split["records"] == alone["records"]
    assert split["tally"] == alone["tally"]
    assert (split["wins"], split["played"], split["steps"]) == (
        alone["wins"], alone["played"], alone["steps"]
    )  # fmt: skip
    assert split["tally"]["setup_steps"] == 2 * len(seeds)  # each start made once
    assert split["steps"] > len(seeds)  # the policy played: not only resets


def same_weights(a: Path, b: Path) -> bool:
    """Whether two saved SB3 policies hold the same parameters (the zips themselves
    differ: they carry the time they were written)."""
    import io
    import zipfile

    import torch

    def params(path: Path) -> dict:
        with zipfile.ZipFile(path) as z:
            return torch.load(io.BytesIO(z.read("policy.pth")), weights_only=True)

    pa, pb = params(a), params(b)
    return pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)


def test_auto_uses_workers_from_two_envs_up_to_two_per_core(monkeypatch):
    from actors import fast
    from runtime import cpu

    monkeypatch.setattr(cpu, "usable_cores", lambda: (2, "test"))
    # 2 envs on 2 cores: a job training alone steps on both (the other learner idle);
    # 4 (the diamond run's): one steps while another waits for its action.
    assert fast.env_workers("auto", 2) and fast.env_workers("auto", 4)
    assert not fast.env_workers("auto", 5)  # past 2 per core
    assert not fast.env_workers("auto", 1)  # one env: nothing to spread
    assert fast.env_workers("on", 1) and not fast.env_workers("off", 8)
    monkeypatch.setattr(cpu, "usable_cores", lambda: (16, "test"))
    assert fast.env_workers("auto", 2) and fast.env_workers("auto", 32)
    assert not fast.env_workers("auto", 33)
    monkeypatch.setattr(cpu, "usable_cores", lambda: (1, "test"))
    assert not fast.env_workers("auto", 2)  # one core: the learner's process steps them


def test_a_held_out_check_that_fails_in_a_worker_raises_and_the_workers_serve_on(
    workers, tmp_path: Path
):
    """A policy that cannot be loaded: the error comes back from the workers, no answer
    is left in a pipe, and the same workers serve the next job."""
    from rl.artifacts import PolicyUnusable

    vec = make_vec_env(wood(), 2, seed=9, subproc=True, workers=workers)
    pids = workers.pids()
    try:
        with pytest.raises(PolicyUnusable, match="no policy at"):
            vec.held_out(str(tmp_path / "missing.zip"), [1, 2, 3], 0)
        assert vec.get_attr("world_steps") == [0, 0]  # both still answer, in order
    finally:
        vec.close()
    after = make_vec_env(wood(), 2, seed=9, subproc=True, workers=workers)
    try:
        assert len(play(after, 5)) == 6
    finally:
        after.close()
    assert workers.pids() == pids
