"""PPO over options with per-decision durations in the discount (an SMDP).

A decision of :class:`rl.rl_env.SubtaskEnv` is one primitive step or one coded option
that ran ``k`` world steps (``info["primitive_steps"]``: 1 for a primitive, the option's
steps for an option, 1 for an option that took none and cost an idle step). Plain PPO
discounts what follows every decision by γ, whatever it lasted: a 40-step walk then
looks as close to the goal as one step. Here what follows a decision of ``k`` steps is
discounted by γ^k, as in the options framework (Sutton, Precup & Singh 1999: an option
is one transition of a semi-Markov decision process):

- TD error of decision t: ``δ_t = r_t + γ^{k_t} V(s_{t+1}) (1 - done_t) - V(s_t)``
- GAE: ``A_t = δ_t + γ^{k_t} λ (1 - done_t) A_{t+1}``, returns ``A_t + V(s_t)``
- a decision cut by the step cap (truncated, not terminated) bootstraps with
  ``γ^{k_t} V(s_final)`` (SB3 adds ``γ V(s_final)`` to its reward; the difference is
  added here).

**λ per decision, not λ^k.** λ weighs how many of the *value function's* estimates an
advantage leans on, and there is one estimate per decision; λ^k would cut the trace
almost to nothing after every long option (0.95^40 ≈ 0.13), leaving long-option
decisions with one-step TD targets and the value net's bias. The time a decision took
is the discount's business (γ^k); λ stays the per-decision trade-off it is in PPO.

**What is not discounted inside an option.** The env reports an option's reward as the
plain sum over its steps; γ^i within the option is not applied (the env does not know
γ). With γ = 0.99 and options of ≤ 50 steps the sparse success reward is at most
0.99^49 ≈ 0.61 too high when it lands at an option's last step — an error of the same
kind as plain PPO's, but bounded by one option instead of compounding over the episode.

With ``k = 1`` for every decision the figures are SB3's own, bit for bit (tested).

:class:`SMDPPPO` feeds the buffer the durations from the env's infos; the buffers
(:class:`SMDPRolloutBuffer`, :class:`SMDPDictRolloutBuffer`) do the arithmetic. Only
learners import this module (it imports torch through stable-baselines3).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer

from rl.per_env import PerEnvCollect, durations_of


class _Durations:
    """The SMDP part of a rollout buffer: a duration per stored transition, and returns
    and advantages computed with γ^k. Mixed in before an SB3 rollout buffer."""

    gamma: float
    gae_lambda: float
    buffer_size: int
    n_envs: int
    pos: int
    rewards: np.ndarray
    values: np.ndarray
    episode_starts: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray

    def reset(self) -> None:
        self.durations = np.ones((self.buffer_size, self.n_envs), dtype=np.float64)
        """World steps of each stored decision (1 until told otherwise)."""
        self.pending_durations: np.ndarray | None = None
        """Durations of the transition about to be added (set by :class:`SMDPPPO`)."""
        self.pending_bootstrap: np.ndarray | None = None
        """Reward correction of that transition: (γ^k - γ) V(s_final) where the step cap
        cut an episode (SB3 added γ V(s_final) already), else 0."""
        super().reset()  # type: ignore[misc]

    def add(self, obs: Any, action: Any, reward: np.ndarray, *args: Any, **kwargs: Any) -> None:
        if self.pending_durations is not None:
            self.durations[self.pos] = self.pending_durations
            self.pending_durations = None
        if self.pending_bootstrap is not None:
            reward = reward + self.pending_bootstrap.astype(reward.dtype)
            self.pending_bootstrap = None
        super().add(obs, action, reward, *args, **kwargs)  # type: ignore[misc]

    def compute_returns_and_advantage(self, last_values: th.Tensor, dones: np.ndarray) -> None:
        """GAE(λ) and λ-returns with γ^k per decision (the module docstring's formulas).

        The arithmetic follows SB3's own step for step (float32 arrays, the products of
        Python floats rounded once), so that k = 1 everywhere gives its exact figures."""
        last = last_values.clone().cpu().numpy().flatten()
        last_gae_lam: Any = 0
        for step in reversed(range(self.buffer_size)):
            if step == self.buffer_size - 1:
                next_non_terminal = 1.0 - dones.astype(np.float32)
                next_values = last
            else:
                next_non_terminal = 1.0 - self.episode_starts[step + 1]
                next_values = self.values[step + 1]
            discount = np.power(self.gamma, self.durations[step])  # float64: γ^k
            delta = (
                self.rewards[step]
                + discount.astype(np.float32) * next_values * next_non_terminal
                - self.values[step]
            )
            trace = (discount * self.gae_lambda).astype(np.float32)
            last_gae_lam = delta + trace * next_non_terminal * last_gae_lam
            self.advantages[step] = last_gae_lam
        self.returns = self.advantages + self.values


class SMDPRolloutBuffer(_Durations, RolloutBuffer):
    """SB3's rollout buffer (Box observations) with γ^k per decision."""


class SMDPDictRolloutBuffer(_Durations, DictRolloutBuffer):
    """SB3's rollout buffer for Dict observations with γ^k per decision."""


class SMDPPPO(PerEnvCollect, PPO):
    """SB3 PPO whose returns and advantages discount each decision by γ^k, k the world
    steps it took (``info["primitive_steps"]``). Built like :class:`PPO`; the rollout
    buffer class is chosen by the observation space unless given."""

    def _setup_model(self) -> None:
        if self.rollout_buffer_class is None:
            dict_obs = isinstance(self.observation_space, spaces.Dict)
            self.rollout_buffer_class = SMDPDictRolloutBuffer if dict_obs else SMDPRolloutBuffer
        super()._setup_model()

    def _update_info_buffer(
        self, infos: list[dict[str, Any]], dones: np.ndarray | None = None
    ) -> None:
        # SB3 calls this in collect_rollouts after env.step and before the step's
        # rollout_buffer.add (and its step-cap bootstrap): the one place a step's infos
        # reach the algorithm. The durations ride along to the buffer from here.
        super()._update_info_buffer(infos, dones)
        buffer = self.rollout_buffer
        if not isinstance(buffer, _Durations):
            return
        durations = durations_of(infos)
        buffer.pending_durations = durations
        bootstrap = np.zeros(len(infos), np.float64)
        for idx, info in enumerate(infos):
            done = dones is not None and bool(dones[idx])
            final = info.get("terminal_observation")
            if not (done and final is not None and info.get("TimeLimit.truncated", False)):
                continue
            if durations[idx] == 1:
                continue  # SB3's γ V(s_final) is already γ^1 V(s_final)
            obs = self.policy.obs_to_tensor(final)[0]
            with th.no_grad():
                value = float(self.policy.predict_values(obs)[0].item())  # type: ignore[arg-type]
            bootstrap[idx] = (self.gamma ** durations[idx] - self.gamma) * value
        buffer.pending_bootstrap = bootstrap if bootstrap.any() else None
