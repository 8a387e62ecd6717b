"""PPO rollouts collected env by env, so that no env waits for another's long decision.

SB3 collects a rollout in lockstep: every env takes one decision, the slowest decides
when the next round starts. A decision of :class:`rl.rl_env.SubtaskEnv` is one world
step or a coded option of up to hundreds, so with the envs in worker processes
(:mod:`rl.env_workers`) each worker spent about half its time waiting for the other:
the default diamond run's training ran at 1.0 of its 2 cores (each worker at 0.5,
sampled from ``/proc`` over the whole training phase).

Here each env goes on to its next decision as soon as its last one is back: the policy
(fixed during a rollout) picks its action on that env's observation alone, and the env's
``n_steps`` decisions are kept in order. PPO's buffer holds the rollout as one column per
env, and returns and advantages are computed along each column apart, so the rollout is
the same kind of sample as SB3's; only the moments the decisions are taken differ. The
workers wait for each other once per rollout, not once per decision.

**Deterministic.** Env ``i`` samples its actions from a generator of its own (seeded
from the model's seed and ``i``), so a rollout does not depend on which env answered
first: a job trains to the same weights in worker processes and in one process
(:class:`_InProcess` steps a ``DummyVecEnv``'s envs one at a time the same way).

**Per step, as SB3 does it.** The callbacks see every env's decision as it comes back
(``infos`` and ``rewards`` of that one env, ``env_index`` naming it); a callback that
stops training stops it there (the decisions under way are waited for, then dropped
with the unfinished rollout, as SB3 drops one). A decision cut by the episode's step
cap bootstraps with γ V(s_final), or γ^k V(s_final) under the SMDP discount
(:mod:`rl.smdp`, whose durations go to the buffer with each decision).

Only :class:`~gymnasium.spaces.Discrete` action spaces and no gSDE: anything else is
collected in lockstep (:class:`PerEnvCollect` falls back to SB3's own). Only learners
import this module (it imports torch through stable-baselines3).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import DummyVecEnv

from rl.env_workers import WorkerVecEnv, _stack, step_and_reset

COLLECT_MODES = ("per_env", "lockstep")
"""``PPOSettings.collect``: env by env (this module), or SB3's lockstep."""
DURATION_KEY = "primitive_steps"
"""The info key with a decision's world steps (:meth:`rl.rl_env.SubtaskEnv.step`)."""


def durations_of(infos: list[dict[str, Any]]) -> np.ndarray:
    """Each env's decision duration in world steps (≥ 1; 1 where the info has none: an
    option that took no step cost an idle one)."""
    return np.array([max(1, int(info.get(DURATION_KEY, 1))) for info in infos], np.float64)


class _InProcess:
    """One env of a ``DummyVecEnv`` stepped at a time, its answers in the order asked."""

    def __init__(self, vec: DummyVecEnv) -> None:
        self.vec = vec
        self.answers: deque[tuple[int, Any]] = deque()

    def send(self, index: int, action: Any) -> None:
        obs, reward, done, info, _ = step_and_reset(self.vec.envs[index], action)
        self.answers.append((index, (obs, reward, done, info)))

    def next(self) -> tuple[int, Any]:
        return self.answers.popleft()

    def pending(self) -> int:
        return len(self.answers)


class _InWorkers:
    """One env of a :class:`~rl.env_workers.WorkerVecEnv` stepped at a time in its
    worker; the answers in the order they come back."""

    def __init__(self, vec: WorkerVecEnv) -> None:
        self.vec = vec
        self.busy: dict[int, int] = {}
        """Env index → steps asked of it and not yet answered (0 or 1)."""

    def send(self, index: int, action: Any) -> None:
        self.vec.step_one(index, action)
        self.busy[index] = 1

    def next(self) -> tuple[int, Any]:
        index, (obs, reward, done, info, _reset_info) = self.vec.next_answer(
            [i for i, n in self.busy.items() if n]
        )
        self.busy[index] = 0
        return index, (obs, reward, done, info)

    def pending(self) -> int:
        return sum(self.busy.values())


class _InSharedWorker:
    """One env of a :class:`~rl.env_workers.WorkerVecEnv` whose envs share a worker
    (the learner's envs kept in one process) stepped at a time; the answers in the order
    asked, as the worker gives them and as :class:`_InProcess` does."""

    def __init__(self, vec: WorkerVecEnv) -> None:
        self.vec = vec
        self.asked: deque[int] = deque()

    def send(self, index: int, action: Any) -> None:
        self.vec.step_one(index, action)
        self.asked.append(index)

    def next(self) -> tuple[int, Any]:
        index = self.asked.popleft()
        obs, reward, done, info, _reset_info = self.vec.answer_of(index)
        return index, (obs, reward, done, info)

    def pending(self) -> int:
        return len(self.asked)


def _stepper(env: Any) -> _InProcess | _InWorkers | _InSharedWorker | None:
    if isinstance(env, WorkerVecEnv):
        return _InSharedWorker(env) if env.shared else _InWorkers(env)
    if isinstance(env, DummyVecEnv):
        return _InProcess(env)
    return None  # wrapped or another kind: SB3's lockstep


def _one(obs: Any, index: int) -> Any:
    """Env ``index``'s part of a stacked observation, as a batch of one."""
    if isinstance(obs, dict):
        return {k: v[index : index + 1] for k, v in obs.items()}
    return obs[index : index + 1]


class PerEnvCollect:
    """Mixed in before an SB3 on-policy algorithm: :meth:`collect_rollouts` env by env
    when ``collect_mode`` is ``per_env`` (see the module's doc)."""

    collect_mode: str = "per_env"
    _generators: list[th.Generator] | None = None

    def _excluded_save_params(self) -> list[str]:
        # The generators are not saved: a loaded or resumed model seeds them afresh.
        return [*super()._excluded_save_params(), "_generators"]  # type: ignore[misc]

    def _generator(self, index: int) -> th.Generator:
        algo: Any = self
        if self._generators is None or len(self._generators) <= index:
            base = int(algo.seed or 0) * 1_000_003
            self._generators = [
                th.Generator().manual_seed(base + i) for i in range(algo.env.num_envs)
            ]
        return self._generators[index]

    def collect_rollouts(
        self, env: Any, callback: Any, rollout_buffer: Any, n_rollout_steps: int
    ) -> bool:
        algo: Any = self
        stepper = _stepper(env) if self.collect_mode == "per_env" else None
        if stepper is None or algo.use_sde or not isinstance(algo.action_space, spaces.Discrete):
            return super().collect_rollouts(  # type: ignore[misc]
                env, callback, rollout_buffer, n_rollout_steps
            )
        return self._per_env(env, stepper, callback, rollout_buffer, n_rollout_steps)

    def _decide(self, obs: Any, index: int) -> tuple[Any, Any, Any]:
        """Env ``index``'s action on ``obs`` (a batch of one), with its value and
        log-probability, sampled from the env's own generator."""
        policy = self.policy  # type: ignore[attr-defined]
        with th.no_grad():
            tensor = obs_as_tensor(obs, self.device)  # type: ignore[attr-defined]
            # SB3's ActorCriticPolicy.forward, but for the sampling: features once.
            features = policy.extract_features(tensor)
            if policy.share_features_extractor:
                latent_pi, latent_vf = policy.mlp_extractor(features)
            else:
                latent_pi = policy.mlp_extractor.forward_actor(features[0])
                latent_vf = policy.mlp_extractor.forward_critic(features[1])
            dist = policy._get_action_dist_from_latent(latent_pi)
            probs = dist.distribution.probs
            action = th.multinomial(probs.cpu(), 1, generator=self._generator(index))
            action = action.squeeze(1).to(probs.device)
            return action, policy.value_net(latent_vf), dist.log_prob(action)

    def _per_env(
        self, env: Any, stepper: Any, callback: Any, rollout_buffer: Any, n_rollout_steps: int
    ) -> bool:
        algo: Any = self
        assert algo._last_obs is not None, "No previous observation was provided"
        algo.policy.set_training_mode(False)
        rollout_buffer.reset()
        callback.on_rollout_start()
        n = env.num_envs
        space = env.observation_space
        obs = [_one(algo._last_obs, i) for i in range(n)]
        starts = [bool(s) for s in algo._last_episode_starts]
        taken: list[list[tuple]] = [[] for _ in range(n)]
        under_way: dict[int, tuple] = {}
        smdp = hasattr(rollout_buffer, "pending_durations")

        def ask(i: int) -> None:
            action, value, log_prob = self._decide(obs[i], i)
            under_way[i] = (obs[i], action, value, log_prob, starts[i])
            stepper.send(i, int(action.item()))

        for i in range(n):
            ask(i)
        stopped = False
        while stepper.pending():
            i, (new_obs, reward, done, info) = stepper.next()
            seen, action, value, log_prob, start = under_way.pop(i)
            algo.num_timesteps += 1
            rewards = np.array([reward], dtype=np.float32)
            dones = np.array([done])
            infos = [info]
            callback.update_locals(
                {"infos": infos, "rewards": rewards, "dones": dones, "env_index": i}
            )
            if stopped or not callback.on_step():
                stopped = True  # the steps under way are waited for, then dropped
                continue
            OnPolicyAlgorithm._update_info_buffer(algo, infos, dones)
            k = int(durations_of(infos)[0]) if smdp else 1
            if done and info.get("terminal_observation") is not None:
                if info.get("TimeLimit.truncated", False):
                    final = algo.policy.obs_to_tensor(info["terminal_observation"])[0]
                    with th.no_grad():
                        rewards[0] += algo.gamma**k * float(algo.policy.predict_values(final)[0])
            taken[i].append((seen, action, float(rewards[0]), start, value, log_prob, k))
            obs[i] = _stack([new_obs], space)
            starts[i] = bool(done)
            if len(taken[i]) < n_rollout_steps:
                ask(i)
        if stopped:
            return False
        for t in range(n_rollout_steps):
            row = [taken[i][t] for i in range(n)]
            if smdp:
                rollout_buffer.pending_durations = np.array([r[6] for r in row], np.float64)
                rollout_buffer.pending_bootstrap = None
            rollout_buffer.add(
                _stack([_unbatch(r[0]) for r in row], space),
                np.array([[int(r[1].item())] for r in row]),
                np.array([r[2] for r in row], dtype=np.float32),
                np.array([r[3] for r in row], dtype=np.float32),
                th.cat([r[4].reshape(1, -1) for r in row]),
                th.cat([r[5].reshape(1) for r in row]),
            )
        algo._last_obs = _stack([_unbatch(o) for o in obs], space)
        algo._last_episode_starts = np.array(starts)
        with th.no_grad():
            values = algo.policy.predict_values(obs_as_tensor(algo._last_obs, algo.device))
        rollout_buffer.compute_returns_and_advantage(
            last_values=values, dones=algo._last_episode_starts
        )
        callback.update_locals({"values": values, "dones": algo._last_episode_starts})
        callback.on_rollout_end()
        return True


def _unbatch(obs: Any) -> Any:
    """A batch-of-one observation as one env's."""
    if isinstance(obs, dict):
        return {k: v[0] for k, v in obs.items()}
    return obs[0]


class PerEnvPPO(PerEnvCollect, PPO):
    """SB3's PPO with rollouts collected env by env (:class:`PerEnvCollect`)."""
