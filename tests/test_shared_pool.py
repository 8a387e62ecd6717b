"""The versions of one learned sub-action share the run's pool of training worlds, and a
version goes to the learner that trained the last one, so setup runs once per world and
later versions restore its starts (issue "both cores busy": setup once, train many)."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest
import trio

from actors.learner import LearnerActor, training_worlds
from messages.control import Failure
from messages.plan import SubAction, WorkOn
from messages.task import RLConfig, Subtask
from messages.train import PPOSettings, TrainRequest, TrainResult
from method import seeds
from method.settings import MethodSettings
from rl.configs import collect_wood_with_coded

WOOD = SubAction("place_table", Subtask("place_table", achievement="place_table"), mode="rl")


def _request(version: int, run_seed: int = 3) -> TrainRequest:
    from actors.fast import train_request

    settings = MethodSettings()
    settings.run.seed = run_seed
    work = WorkOn(WOOD, seeds=[1], train_steps=64)
    return train_request(settings, work, collect_wood_with_coded(), version)


def test_every_version_of_a_sub_action_trains_on_the_runs_one_pool() -> None:
    first, second, third = (_request(v) for v in (1, 2, 3))
    assert len({first.seed, second.seed, third.seed}) == 3  # each its own policy seed
    pools = {training_worlds(r) for r in (first, second, third)}
    assert pools == {seeds.training_pool(3, first.train_worlds)}
    # A request from before the field (pool_seed -1) keeps drawing from its own seed's.
    old = dataclasses.replace(first, pool_seed=-1)
    assert training_worlds(old) == seeds.training_pool(first.seed, first.train_worlds)


def test_a_later_version_is_asked_of_the_learner_that_trained_the_last(tmp_path: Path) -> None:
    from actors.fast import FastAgent
    from method.agents import Agents

    fast = FastAgent(
        agents=Agents(None, tmp_path), settings=MethodSettings(), environments=1,
        run_dir=tmp_path,
    )  # fmt: skip
    policy = tmp_path / "policy.zip"
    policy.write_bytes(b"not a real policy: nothing loads it here")
    asked: list[str] = []

    async def ask(to: str, req: TrainRequest, **kwargs) -> TrainResult:
        asked.append(to)
        return TrainResult(
            name=req.name, policy_path=str(policy), sha256="0" * 64, steps=1,
            primitive_steps=0, eval_success_rate=0.0, eval_episodes=0,
            eval_primitive_steps=0, resumed_from=0, steps_lost=0, tensorboard_dir="",
            wall_s=0.0, train_s=0.0, device="cpu", actor_id=f"learner-{len(asked)}",
        )  # fmt: skip

    fast.ask = ask
    other = SubAction("collect_wood", Subtask("collect_wood", goal={"wood": 1}), mode="rl")

    async def go() -> None:
        config = collect_wood_with_coded()
        await fast._train(WorkOn(WOOD, seeds=[1], train_steps=64), config, 1)
        await fast._train(WorkOn(other, seeds=[1], train_steps=64), config, 1)
        await fast._train(WorkOn(WOOD, seeds=[1], train_steps=64), config, 2)
        await fast._train(WorkOn(other, seeds=[1], train_steps=64), config, 2)

    trio.run(go)
    assert asked == [
        "@learner", "@learner", "@learner/learner-1", "@learner/learner-2",
    ]  # fmt: skip


def test_a_wrong_answer_to_a_training_job_is_asked_again_of_any_learner(tmp_path: Path) -> None:
    # The peer that answered wrongly was charged at the broker (tests/test_peers.py); the
    # job goes to whichever learner has room, and only a third wrong answer fails it.
    from actors.fast import FastAgent
    from method.agents import Agents
    from runtime.actor import RemoteFailure
    from runtime.failures import BAD_REPLY, BAD_REPLY_TRIES

    fast = FastAgent(
        agents=Agents(None, tmp_path), settings=MethodSettings(), environments=1,
        run_dir=tmp_path,
    )  # fmt: skip
    fast.trained_on[WOOD.name] = "learner-1"
    policy = tmp_path / "policy.zip"
    policy.write_bytes(b"not a real policy: nothing loads it here")
    asked: list[str] = []
    wrong = {"answers": 1}

    async def ask(to: str, req: TrainRequest, **kwargs) -> TrainResult:
        asked.append(to)
        if len(asked) <= wrong["answers"]:
            raise RemoteFailure(Failure(BAD_REPLY, "train.request answered with train.progress"))
        return TrainResult(
            name=req.name, policy_path=str(policy), sha256="0" * 64, steps=1,
            primitive_steps=0, eval_success_rate=0.0, eval_episodes=0,
            eval_primitive_steps=0, resumed_from=0, steps_lost=0, tensorboard_dir="",
            wall_s=0.0, train_s=0.0, device="cpu", actor_id="learner-2",
        )  # fmt: skip

    fast.ask = ask
    work = WorkOn(WOOD, seeds=[1], train_steps=64)
    result = trio.run(fast._train, work, collect_wood_with_coded(), 1)
    assert result.actor_id == "learner-2"
    assert asked == ["@learner/learner-1", "@learner"]
    asked.clear()
    wrong["answers"] = BAD_REPLY_TRIES
    with pytest.raises(RemoteFailure) as caught:
        trio.run(fast._train, work, collect_wood_with_coded(), 2)
    assert caught.value.failure.reason == BAD_REPLY
    assert len(asked) == BAD_REPLY_TRIES


def _trained(learner: LearnerActor, req: TrainRequest) -> TrainResult:
    result = learner.train(req, "cpu", threading.Event(), "nobody")
    assert not result.failure, result.failure
    return result


@pytest.mark.parametrize("workers", [False, True])
def test_a_second_version_on_the_same_learner_restores_every_start(
    tmp_path: Path, workers: bool
) -> None:
    from knowledge import library, recipes
    from rl.setup_code import compose_setup

    steps = recipes.chain("wood_pickaxe")
    names = [s.name for s in steps]
    i = names.index("place_table")
    stages = library.coded_stages(steps[: i + 1])
    config = RLConfig(
        subtask=stages[i].subtask,
        observation=["inventory"],
        primitives=["noop", "place_table"],
        setup_code=compose_setup(stages[:i], []),
    )
    learner = LearnerActor.__new__(LearnerActor)
    learner.workdir = learner.run_dir = tmp_path
    learner.run_id, learner.actor_id = "test", "learner-test"
    common = dict(
        config=config, total_steps=32, n_envs=2, subproc=workers, train_worlds=4,
        pool_seed=7, eval_episodes=1, ppo=PPOSettings(n_steps=16, batch_size=16, n_epochs=1),
        progress_every_s=3600.0,
    )  # fmt: skip
    try:
        first = _trained(learner, TrainRequest(name="v1", seed=8, **common))
        second = _trained(learner, TrainRequest(name="v2", seed=9, **common))
    finally:
        if getattr(learner, "_env_workers", None) is not None:
            learner._env_workers.close()
    # The first version set up every world it reset into; the second, on the same pool
    # and the same learner, restored each of them: no setup step again.
    assert first.setup_steps > 0
    assert second.setup_steps == 0
