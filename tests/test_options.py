"""The stage's own coded policy as a resumable option: in the real env, in the fast
agent's RL config, on the wire and in the bundle, and in a real training job."""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from pathlib import Path

from actors.fast import OPTION_STEPS, rl_config
from actors.learner import LearnerActor
from knowledge import library
from knowledge.options import STAGE_CODE, STAGE_CODE_STEPS, options_for, stage_code_option
from knowledge.recipes import achievement_step
from llm.offline import OfflineBackend
from messages import decode, encode
from messages.plan import SubAction
from messages.task import CodedAction, RLConfig, Stage, Subtask
from messages.train import PPOSettings, TrainRequest
from method import bundle
from rl.rl_env import SubtaskEnv

# A coded policy that counts its own resumptions and shows the count in the way it
# faces: its n-th action turns the player left, up, right, down, left, ... (Crafter
# turns the player even when the move is blocked).
COUNTER = """\
TURNS = ["move_left", "move_up", "move_right", "move_down"]

def run(skills):
    n = 0
    while True:
        yield TURNS[n % 4]
        n += 1
"""
# Three turns, then it is done.
THREE = """\
def run(skills):
    yield "move_left"
    yield "move_up"
    yield "move_right"
"""
LEFT, RIGHT, UP, DOWN = (-1, 0), (1, 0), (0, -1), (0, 1)


def _env(code: str, *, resumable: bool = True, steps: int = 1) -> SubtaskEnv:
    subtask = Subtask("collect_diamond", goal={"diamond": 1}, max_steps=200)
    config = RLConfig(
        subtask=subtask,
        observation=["facing"],
        primitives=["noop"],
        coded_actions=[CodedAction("own", code, max_steps=steps, resumable=resumable)],
    )
    return SubtaskEnv(config, seed=3)


def _choose(env: SubtaskEnv) -> tuple[int, int]:
    """Choose the option once; where the player faces after it."""
    _, _, terminated, truncated, info = env.step(1)
    assert not (terminated or truncated) and info["option_failure"] is None
    return env.observation.facing


def test_a_resumable_option_goes_on_counting_across_choices_and_restarts_each_episode() -> None:
    env = _env(COUNTER)
    env.reset(seed=3)
    assert [_choose(env) for _ in range(5)] == [LEFT, UP, RIGHT, DOWN, LEFT]
    env.step(0)  # a primitive in between: the option stays where it was
    assert _choose(env) == UP
    env.reset(seed=4)  # a new episode starts the code afresh
    assert [_choose(env) for _ in range(2)] == [LEFT, UP]


def test_each_choice_runs_up_to_k_steps_of_it() -> None:
    env = _env(COUNTER, steps=3)
    env.reset(seed=3)
    _, _, _, _, info = env.step(1)
    assert info["primitive_steps"] == 3 and env.observation.facing == RIGHT  # turns 1-3
    assert _choose(env) == UP  # turns 4-6: down, left, up


def test_an_option_that_is_not_resumable_starts_afresh_every_time() -> None:
    env = _env(COUNTER, resumable=False)
    env.reset(seed=3)
    assert [_choose(env) for _ in range(3)] == [LEFT, LEFT, LEFT]


def test_finished_code_starts_afresh_at_its_next_choice() -> None:
    env = _env(THREE, steps=2)
    env.reset(seed=3)
    _, _, _, _, info = env.step(1)
    assert info["primitive_steps"] == 2 and env.observation.facing == UP
    _, _, _, _, info = env.step(1)  # the third turn, then the code is done
    assert info["primitive_steps"] == 1 and env.observation.facing == RIGHT
    _, _, _, _, info = env.step(1)  # done: this choice runs it from its start
    assert info["primitive_steps"] == 2 and env.observation.facing == UP
    # Stopped exactly at its end: the next choice finds it finished and starts afresh
    # in the same call (never an idle step for a choice of the stage's code).
    env = _env(THREE, steps=3)
    env.reset(seed=3)
    assert _choose(env) == RIGHT
    _, _, _, _, info = env.step(1)
    assert info["primitive_steps"] == 3 and env.observation.facing == RIGHT


def test_failed_code_starts_afresh_at_its_next_choice() -> None:
    failing = COUNTER.replace("        n += 1\n", "        n += 1\n        if n == 2:\n"
                              "            raise ValueError('two')\n")  # fmt: skip
    env = _env(failing, steps=5)
    env.reset(seed=3)
    _, _, _, _, info = env.step(1)
    assert "two" in info["option_failure"]["detail"] and info["primitive_steps"] == 2
    _, _, _, _, info = env.step(1)  # afresh: left, up, and the same failure
    assert "two" in info["option_failure"]["detail"] and info["primitive_steps"] == 2
    assert env.observation.facing == UP and info["option_failures"] == 2


def _wood_sub() -> SubAction:
    return SubAction(
        "collect_wood", Subtask("collect_wood", goal={"wood": 1}, max_steps=100), mode="rl"
    )


def test_the_rl_config_offers_the_stage_code_resumable_and_the_offline_agent_takes_it() -> None:
    code = library.step_code("collect_wood")
    offered = [stage_code_option(code), *options_for(achievement_step("collect_wood"))]
    request = {
        "subaction": {"name": "collect_wood", "goal": {"wood": 1}, "max_steps": 100},
        "options": [{"name": n, "description": d} for n, d, _ in offered],
        "primitives": ["noop", "move_left", "do"],
    }
    reply = OfflineBackend()._fast_rl(request)
    assert STAGE_CODE in reply["options"]
    config = rl_config(_wood_sub(), reply, offered, ["noop", "move_left", "do"], [])
    by_name = {a.name: a for a in config.coded_actions}
    own = by_name[STAGE_CODE]
    assert own.resumable and own.max_steps == STAGE_CODE_STEPS and own.code == code
    assert not any(a.resumable for n, a in by_name.items() if n != STAGE_CODE)
    assert {a.max_steps for n, a in by_name.items() if n != STAGE_CODE} == {OPTION_STEPS}
    # The code travels with the config (the journal, the learner) ...
    assert decode(encode(config)) == config
    # ... and a config from before the field decodes as not resumable.
    old = dataclasses.replace(by_name[STAGE_CODE], resumable=False)
    assert decode(encode(old)).resumable is False


def test_the_bundle_keeps_the_stage_code_option_and_its_resumability(tmp_path: Path) -> None:
    code = library.step_code("collect_wood")
    config = RLConfig(
        subtask=Subtask("collect_wood", goal={"wood": 1}, max_steps=100),
        primitives=["noop", "do"],
        coded_actions=[
            CodedAction(STAGE_CODE, code, max_steps=STAGE_CODE_STEPS, resumable=True),
            CodedAction("explore", options_for(achievement_step("collect_wood"))[1][2]),
        ],
    )
    policy = tmp_path / "policy.zip"
    policy.write_bytes(b"a policy")
    stage = Stage(
        config.subtask,
        policy_path=str(policy),
        policy_sha256=hashlib.sha256(b"a policy").hexdigest(),
        config=config,
    )
    out, files = tmp_path / "bundle", {}

    def put(relative: str, data: bytes | str) -> str:
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        files[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
        return relative

    entry = bundle._write_stage(put, "stages/01-collect_wood", stage, tmp_path)
    assert (out / entry["options"][STAGE_CODE]).read_text() == code
    back = bundle._read_stage(out, files, entry)
    assert back.config == config


def test_a_real_training_job_with_the_stage_code_option(tmp_path: Path) -> None:
    learner = LearnerActor.__new__(LearnerActor)
    learner.workdir, learner.run_dir = tmp_path, tmp_path
    learner.run_id, learner.actor_id = "r", "learner-test"
    offered = [
        stage_code_option(library.step_code("collect_wood")),
        *options_for(achievement_step("collect_wood")),
    ]
    reply = {
        "options": [n for n, _, _ in offered],
        "primitives": ["noop", "move_left", "move_right", "move_up", "move_down", "do"],
        "observation": ["view", "inventory"],
        "max_steps": 60,
    }
    config = rl_config(_wood_sub(), reply, offered, reply["primitives"], [])
    assert config.coded_actions[0].resumable
    req = TrainRequest(
        name="own", config=config, total_steps=128, n_envs=2, eval_episodes=2,
        train_worlds=3, ppo=PPOSettings(n_steps=64, batch_size=64, n_epochs=1),
        progress_every_s=3600.0,
    )  # fmt: skip
    result = learner.train(req, "cpu", threading.Event(), "nobody")
    assert not result.failure and Path(result.policy_path).is_file()
    assert result.steps >= 128 and result.primitive_steps > result.steps


def test_the_fast_agent_offers_the_best_coded_version_when_the_step_moves_to_rl(
    tmp_path: Path,
) -> None:
    import pytest
    import trio
    from structlog.testing import capture_logs

    from actors.fast import FastAgent
    from method.agents import Agents
    from method.settings import MethodSettings

    requests: list[dict] = []

    class Recording:
        """Stands in for the model: records the fast/rl request, then stops the loop."""

        name = "recording"

        async def call(self, role: str, purpose: str, request: dict) -> object:
            requests.append(request)
            raise RuntimeError("stop here: the request is what this test checks")

    agent = FastAgent(
        agents=Agents(Recording(), tmp_path), settings=MethodSettings(), environments=1,
        run_dir=tmp_path,
    )  # fmt: skip
    code_sub = dataclasses.replace(_wood_sub(), mode="code")
    rates = iter([0.6, 0.4])

    async def code_loop(work, loop) -> None:  # a fake of the evaluated code loop
        loop.coded.rate = next(rates)
        loop.coded.stage = Stage(code_sub.subtask, code=f"# rate {loop.coded.rate}\n{THREE}")

    agent._code_loop = code_loop  # type: ignore[method-assign]
    from messages.plan import WorkOn

    for _ in range(2):  # two code loops: the better one's code is kept
        trio.run(agent.on_work, WorkOn(subaction=code_sub, seeds=[1]), None)
    assert agent.best_code["collect_wood"][0] == 0.6
    with capture_logs(), pytest.raises(RuntimeError, match="stop here"):
        trio.run(agent.on_work, WorkOn(subaction=_wood_sub(), seeds=[1]), None)
    names = [o["name"] for o in requests[0]["options"]]
    assert names[0] == STAGE_CODE and "walk_to_tree" in names


def _policy_probs(config: RLConfig, prior: float) -> tuple[list[float], int | None]:
    """A fresh model's action probabilities on a real first observation of ``config``,
    after the job's warm start (``code_prior``), and the index the warm start chose."""
    import torch
    from stable_baselines3.common.vec_env import DummyVecEnv

    from actors.learner import code_prior, make_ppo

    vec = DummyVecEnv([lambda: SubtaskEnv(config, seed=5)])
    try:
        req = TrainRequest(name="prior", config=config, total_steps=64,
                           ppo=PPOSettings(code_prior=prior))  # fmt: skip
        model = make_ppo(req.ppo, vec, seed=0, device="cpu")
        index = code_prior(model, req)
        obs, _ = model.policy.obs_to_tensor(vec.reset())
        with torch.no_grad():
            probs = model.policy.get_distribution(obs).distribution.probs[0]
        return [float(p) for p in probs], index
    finally:
        vec.close()


def test_a_code_prior_starts_the_policy_on_the_stages_own_code() -> None:
    offered = [stage_code_option(library.step_code("collect_wood")),
               *options_for(achievement_step("collect_wood"))]  # fmt: skip
    reply = {"options": [n for n, _, _ in offered], "primitives": ["noop", "move_left", "do"],
             "observation": ["view", "inventory"], "max_steps": 60}  # fmt: skip
    config = rl_config(_wood_sub(), reply, offered, reply["primitives"], [])
    probs, index = _policy_probs(config, 0.9)
    assert index is not None and SubtaskEnv(config).action_names[index] == STAGE_CODE
    assert abs(probs[index] - 0.9) < 0.02
    others = [p for i, p in enumerate(probs) if i != index]
    assert max(others) - min(others) < 0.01 and abs(sum(others) - 0.1) < 0.02
    # Without a prior SB3's start is near uniform; without the stage's code, no prior.
    uniform, none = _policy_probs(config, 0.0)
    assert none is None and max(uniform) < 2.0 / len(uniform)
    menu = dataclasses.replace(config, coded_actions=config.coded_actions[1:])
    assert _policy_probs(menu, 0.9)[1] is None


def test_a_job_says_whether_its_code_prior_was_set(tmp_path: Path) -> None:
    from stable_baselines3.common.vec_env import DummyVecEnv
    from structlog.testing import capture_logs

    from actors.learner import resume

    offered = [stage_code_option(library.step_code("collect_wood")),
               *options_for(achievement_step("collect_wood"))]  # fmt: skip
    reply = {"options": [n for n, _, _ in offered], "primitives": ["noop", "do"],
             "observation": ["inventory"], "max_steps": 60}  # fmt: skip
    config = rl_config(_wood_sub(), reply, offered, reply["primitives"], [])
    menu = dataclasses.replace(config, coded_actions=config.coded_actions[1:])
    seen = {}
    for name, cfg in (("own", config), ("menu", menu)):
        vec = DummyVecEnv([lambda cfg=cfg: SubtaskEnv(cfg, seed=5)])
        req = TrainRequest(name=name, config=cfg, total_steps=64,
                           ppo=PPOSettings(code_prior=0.8))  # fmt: skip
        with capture_logs() as logs:
            resume(req, vec, "cpu", None, tmp_path / name)
        vec.close()
        seen[name] = [e for e in logs if e["event"].startswith("code_prior")]
    assert [(e["event"], e["action"]) for e in seen["own"]] == [("code_prior_set", 2)]
    assert [e["event"] for e in seen["menu"]] == ["code_prior_unused"]


def test_a_code_prior_outside_zero_to_099_is_refused_naming_the_key(tmp_path: Path) -> None:
    import pytest

    from method.settings import load
    from runtime.config import ConfigError

    bad = tmp_path / "bad.toml"
    bad.write_text("[training.ppo]\ncode_prior = 1.0\n")
    with pytest.raises(ConfigError, match="code_prior"):
        load(str(bad))
