"""SMDP PPO (rl/smdp.py): γ^k per decision in returns and GAE, on real Crafter envs."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback

from actors.learner import LearnerActor, make_ppo, ppo_class
from messages.task import CodedAction, RLConfig, Subtask
from messages.train import PPOSettings, TrainRequest
from rl.configs import collect_wood_with_coded
from rl.per_env import DURATION_KEY, durations_of
from rl.rl_env import make_vec_env
from rl.smdp import SMDPPPO, SMDPDictRolloutBuffer, SMDPRolloutBuffer

GAMMA, LAMBDA = 0.9, 0.8


def _primitives_only(max_steps: int = 12) -> RLConfig:
    """Every decision one world step; a short cap, so episodes end inside a rollout."""
    subtask = Subtask("collect_wood", goal={"wood": 1}, max_steps=max_steps)
    return RLConfig(subtask=subtask, observation=["view", "inventory"], primitives=["noop", "do"])


def _with_waits(max_steps: int = 14) -> RLConfig:
    """Decisions of 1, 3 and 5 world steps: two coded waits beside the primitives."""
    wait = "def run(skills):\n    for _ in range({n}):\n        yield 'noop'\n"
    subtask = Subtask("collect_wood", goal={"wood": 1}, max_steps=max_steps)
    return RLConfig(
        subtask=subtask,
        observation=["inventory", "status"],
        primitives=["noop"],
        coded_actions=[
            CodedAction("wait3", wait.format(n=3), max_steps=50),
            CodedAction("wait5", wait.format(n=5), max_steps=50),
        ],
    )


class _Record(BaseCallback):
    """Keeps each step's rewards (as the env gave them) and infos."""

    def __init__(self) -> None:
        super().__init__()
        self.rewards: list[np.ndarray] = []
        self.infos: list[list[dict]] = []
        self.envs: list[int] = []
        """The env of each step's first info (collected env by env: its only one)."""

    def _on_step(self) -> bool:
        self.rewards.append(np.array(self.locals["rewards"], copy=True))
        self.infos.append([dict(i) for i in self.locals["infos"]])
        self.envs.append(int(self.locals.get("env_index", 0)))
        return True

    def grid(self, n_envs: int) -> tuple[list[list[float]], list[list[dict]]]:
        """Rewards and infos as [decision][env], however they were collected."""
        if all(len(i) == n_envs for i in self.infos):
            return [list(r) for r in self.rewards], self.infos
        columns: list[list[tuple[float, dict]]] = [[] for _ in range(n_envs)]
        for env, reward, infos in zip(self.envs, self.rewards, self.infos, strict=True):
            columns[env].append((float(reward[0]), infos[0]))
        rows = range(min(len(c) for c in columns))
        return (
            [[columns[e][t][0] for e in range(n_envs)] for t in rows],
            [[columns[e][t][1] for e in range(n_envs)] for t in rows],
        )


def _collect(model, callback: BaseCallback | None = None) -> None:
    """One rollout into ``model.rollout_buffer``, the policy left as it was."""
    _, cb = model._setup_learn(model.n_steps * model.n_envs, callback)
    cb.on_training_start(locals(), globals())
    assert model.collect_rollouts(model.env, cb, model.rollout_buffer, model.n_steps)


def _settings(smdp: bool, collect: str = "lockstep") -> PPOSettings:
    return PPOSettings(
        n_steps=48, batch_size=32, n_epochs=1, gamma=GAMMA, gae_lambda=LAMBDA, smdp=smdp,
        collect=collect,
    )  # fmt: skip


def test_with_one_step_decisions_the_figures_are_sb3s_own_bit_for_bit() -> None:
    buffers = {}
    for smdp in (False, True):
        vec = make_vec_env(_primitives_only(), n_envs=2, seed=11, world_pool=range(3))
        model = make_ppo(_settings(smdp), vec, seed=3, device="cpu")
        assert isinstance(model, SMDPPPO) == smdp
        _collect(model)
        buffers[smdp] = model.rollout_buffer
        vec.close()
    plain, smdp = buffers[False], buffers[True]
    assert isinstance(smdp, SMDPDictRolloutBuffer) and not isinstance(plain, SMDPDictRolloutBuffer)
    # Episodes ended inside the rollout (a cap of 12 in 48 decisions), and were bootstrapped.
    assert plain.episode_starts[1:].sum() >= 4
    assert (smdp.durations == 1).all()
    np.testing.assert_array_equal(smdp.rewards, plain.rewards)
    np.testing.assert_array_equal(smdp.values, plain.values)
    np.testing.assert_array_equal(smdp.advantages, plain.advantages)
    np.testing.assert_array_equal(smdp.returns, plain.returns)


def _hand_advantages(
    rewards: list[float],
    values: list[float],
    steps: list[int],
    ends: list[bool],
    last_value: float,
    lam: float,
) -> list[float]:
    """A_t as the sum of TD errors ahead, each weighted by the product of γ^{k_j} λ over
    the decisions between (not the recursion the buffer uses), stopping at episode ends."""
    n = len(rewards)
    deltas = []
    for t in range(n):
        nxt = 0.0 if ends[t] else (values[t + 1] if t + 1 < n else last_value)
        deltas.append(rewards[t] + GAMMA ** steps[t] * nxt - values[t])
    out = []
    for t in range(n):
        total, weight = 0.0, 1.0
        for j in range(t, n):
            total += weight * deltas[j]
            if ends[j]:
                break
            weight *= GAMMA ** steps[j] * lam
        out.append(total)
    return out


@pytest.mark.parametrize("lam", [0.0, LAMBDA, 1.0])
def test_varying_durations_match_a_hand_computation(lam: float) -> None:
    # One env, 6 decisions of 1, 3, 2, 5, 1, 4 world steps; the episode ends after the
    # third (the fourth starts a new one); the rollout stops mid-episode.
    steps = [1, 3, 2, 5, 1, 4]
    rewards = [0.0, 0.5, 1.0, -0.25, 0.0, 2.0]
    values = [0.3, 0.6, 0.9, 0.1, 0.4, 0.7]
    starts = [1, 0, 0, 1, 0, 0]
    ends = [False, False, True, False, False, False]
    last_value = 0.8
    buffer = SMDPRolloutBuffer(
        len(steps), spaces.Box(0, 1, (1,)), spaces.Discrete(2), gamma=GAMMA, gae_lambda=lam
    )
    for t in range(len(steps)):
        buffer.pending_durations = np.array([steps[t]], np.float64)
        buffer.add(
            np.zeros((1, 1), np.float32),
            np.zeros((1, 1)),
            np.array([rewards[t]], np.float32),
            np.array([starts[t]], np.float32),
            th.tensor([values[t]]),
            th.tensor([0.0]),
        )
    buffer.compute_returns_and_advantage(th.tensor([last_value]), np.array([False]))
    expected = _hand_advantages(rewards, values, steps, ends, last_value, lam)
    np.testing.assert_allclose(buffer.advantages[:, 0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        buffer.returns[:, 0], np.array(expected) + np.array(values), rtol=1e-5, atol=1e-6
    )
    if lam == 1.0:
        # λ = 1: returns are discounted sums over world time, γ to the steps elapsed.
        elapsed, mc = 0, 0.0
        for t in range(3):
            mc += GAMMA**elapsed * rewards[t]
            elapsed += steps[t]
        assert buffer.returns[0, 0] == pytest.approx(mc, rel=1e-5)


@pytest.mark.parametrize("collect", ["lockstep", "per_env"])
def test_real_options_feed_their_durations_and_the_cap_bootstraps_with_gamma_to_the_k(
    collect: str,
) -> None:
    vec = make_vec_env(_with_waits(), n_envs=2, seed=5, flatten=True, world_pool=range(3))
    model = make_ppo(_settings(True, collect), vec, seed=1, device="cpu")
    record = _Record()
    _collect(model, record)
    buffer = model.rollout_buffer
    assert isinstance(buffer, SMDPRolloutBuffer)
    rewards, steps = record.grid(2)
    assert len(steps) == model.n_steps  # every decision of the rollout, env by env
    taken = np.array([[i["primitive_steps"] for i in infos] for infos in steps])
    np.testing.assert_array_equal(buffer.durations, taken)
    assert {1, 3, 5} <= set(taken.flat)
    truncated = 0
    for t, infos in enumerate(steps):
        for e, info in enumerate(infos):
            reward = rewards[t][e]
            if info.get("TimeLimit.truncated") and "terminal_observation" in info:
                obs = model.policy.obs_to_tensor(info["terminal_observation"])[0]
                with th.no_grad():
                    value = float(model.policy.predict_values(obs)[0])
                reward = reward + GAMMA ** info["primitive_steps"] * value
                truncated += info["primitive_steps"] > 1
            assert buffer.rewards[t, e] == pytest.approx(reward, abs=1e-5)
    assert truncated >= 1  # an option cut by the cap, bootstrapped with γ^k
    vec.close()


def test_smdp_is_a_setting_off_by_default() -> None:
    assert PPOSettings().smdp is False
    assert ppo_class(PPOSettings(collect="lockstep")) is PPO
    assert ppo_class(PPOSettings(smdp=True)) is SMDPPPO


def test_a_real_training_job_trains_with_smdp_and_its_policy_loads(tmp_path: Path) -> None:
    learner = LearnerActor.__new__(LearnerActor)
    learner.workdir, learner.run_dir = tmp_path, tmp_path
    learner.run_id, learner.actor_id = "r", "learner-test"
    config = collect_wood_with_coded()
    req = TrainRequest(
        name="smdp", config=dataclasses.replace(config, subtask=Subtask(
            "collect_wood", goal={"wood": 1}, max_steps=30)),
        total_steps=256, n_envs=2, eval_episodes=2, train_worlds=3,
        ppo=PPOSettings(n_steps=64, batch_size=64, n_epochs=2, smdp=True),
        progress_every_s=3600.0,
    )  # fmt: skip
    result = learner.train(req, "cpu", threading.Event(), "nobody")
    assert not result.failure and Path(result.policy_path).is_file()
    assert result.steps >= 256 and result.primitive_steps > result.steps  # options ran
    model = PPO.load(result.policy_path, device="cpu")
    assert model.gamma == req.ppo.gamma
    assert type(model.rollout_buffer).__name__ == "SMDPDictRolloutBuffer"  # trained so


def test_a_decision_lasts_at_least_one_world_step_in_both_collectors() -> None:
    # An option that took no world step (its goal already held) still cost a decision:
    # discounting it by gamma**0 would make it free. Lockstep (SMDPPPO's buffer) and
    # env-by-env collection (rl.per_env) both read durations through this one rule.
    infos = [{DURATION_KEY: 0}, {}, {DURATION_KEY: 7}, {DURATION_KEY: 1}]
    assert durations_of(infos).tolist() == [1.0, 1.0, 7.0, 1.0]
