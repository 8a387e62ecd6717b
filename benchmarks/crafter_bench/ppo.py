"""Variant ``ppo``: plain stable-baselines3 PPO on Crafter's 17 primitive actions.

Crafter's own reward, no coded actions, a subtask that never succeeds early (an episode
is Crafter's: until death or the step cap), the system's PPO builder and settings. Every
training episode counts for the scoreboard; the final policy, sampling its actions, is
evaluated on world seeds it never trained on.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Any

from method.settings import TaskSettings, TrainingSettings

from .protocol import EPISODE_STEPS, OBSERVATION, PROCESSES, final_worlds, summarize

# Plain PPO trains as the system's learners do: the same settings a run config that
# leaves [task] train_envs and [training.ppo] alone gives them (method/settings.py).
PPO_ENVS = TaskSettings().train_envs
"""Envs stepped together: the system's ``[task] train_envs`` default."""

CRAFTER_REWARD = '''
def reward(before, after):
    """Crafter's own reward: health change / 10, +1 on a step that unlocks an
    achievement for the first time this episode."""
    r = (after["status"]["health"] - before["status"]["health"]) / 10
    now, then = after["achievements"], before["achievements"]
    for name in now:
        if now[name] > 0 and then.get(name, 0) == 0:
            return r + 1.0
    return r
'''
"""Crafter's reward as a subtask reward function (the RL env's ``reward_code``)."""

_WORKER: dict[str, Any] = {}
"""This evaluation worker's loaded policy and env, kept across its episodes."""


def ppo_config(max_steps: int = EPISODE_STEPS) -> Any:
    """Plain PPO's RL config: all 17 primitives, no coded actions, Crafter's reward, a
    subtask that never succeeds (an episode is Crafter's: until death or the cap)."""
    from messages.task import RLConfig, Subtask

    return RLConfig(
        subtask=Subtask("crafter", "unlock as many achievements as possible", max_steps=max_steps),
        observation=list(OBSERVATION),
        primitives=[],
        coded_actions=[],
        reward_code=CRAFTER_REWARD,
        success_reward=0.0,
    )


def ppo_settings() -> Any:
    """The system's learners' PPO settings: the ``[training.ppo]`` defaults."""
    return TrainingSettings().ppo


def _ledger_callback() -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class Ledger(BaseCallback):
        """Every training episode's achievements, steps and world seed."""

        def __init__(self) -> None:
            super().__init__()
            self.episodes: list[dict] = []
            self.current: list[dict] = []

        def _fresh(self, i: int) -> dict:
            seed = self.training_env.get_attr("world_seed", [i])[0]
            return {"seed": int(seed), "steps": 0, "achievements": set()}

        def _on_training_start(self) -> None:
            self.current = [self._fresh(i) for i in range(self.training_env.num_envs)]

        def _on_step(self) -> bool:
            infos, dones = self.locals["infos"], self.locals["dones"]
            for i, (info, done) in enumerate(zip(infos, dones, strict=True)):
                ep = self.current[i]
                ep["steps"] += int(info.get("primitive_steps", 1))
                ep["achievements"].update(info.get("achievements", ()))
                if done:
                    ep["achievements"] = sorted(ep["achievements"])
                    self.episodes.append(ep)
                    self.current[i] = self._fresh(i)  # the env has reset already
            return True

    return Ledger()


def _ppo_eval_episode(args: tuple[str, int, int]) -> dict:
    """One episode of the saved PPO policy on world ``seed`` (actions sampled, seeded)."""
    path, seed, max_steps = args
    import torch
    from stable_baselines3 import PPO

    from rl.rl_env import make_env

    torch.set_num_threads(1)
    if _WORKER.get("ppo_path") != path:
        _WORKER.update(ppo_path=path, ppo=PPO.load(path, device="cpu"))
        _WORKER["ppo_env"] = make_env(ppo_config(max_steps))
    model, env = _WORKER["ppo"], _WORKER["ppo_env"]
    torch.manual_seed(seed)
    obs, _ = env.reset(seed=seed)
    steps, unlocked = 0, set()
    while True:
        action = model.predict(obs, deterministic=False)[0]
        obs, _, terminated, truncated, info = env.step(int(action))
        steps += int(info.get("primitive_steps", 1))
        unlocked.update(info.get("achievements", ()))
        if terminated or truncated:
            break
    return {"seed": seed, "steps": steps, "achievements": sorted(unlocked)}


def run_ppo(
    budget: int,
    final_episodes: int,
    seed: int = 0,
    *,
    max_steps: int = EPISODE_STEPS,
    processes: int = PROCESSES,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Plain PPO: train for ``budget`` env steps counting every training episode, then
    evaluate the final policy on unseen seeds."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    from actors.learner import make_ppo, set_torch_threads
    from rl.rl_env import env_factory

    set_torch_threads()
    started = time.monotonic()
    # No seed of the env's own: PPO seeds the first reset of env i with seed + i, later
    # episodes draw fresh world seeds from the env's generator (seeded by that reset).
    # (make_vec_env's seed would be replayed once more by the first seedless reset.)
    blob = ppo_config(max_steps)
    vec = DummyVecEnv([env_factory(blob, seed=None, monitor=True) for _ in range(PPO_ENVS)])
    try:
        model = make_ppo(ppo_settings(), vec, seed=seed, device="cpu")
        ledger = _ledger_callback()
        model.learn(budget, callback=ledger)
        train_s = time.monotonic() - started
        trained = int(model.num_timesteps)
        in_progress = sum(ep["steps"] for ep in ledger.current)
        workdir = Path(workdir or tempfile.mkdtemp(prefix="bench-ppo-"))
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / "ppo_crafter.zip"
        model.save(path)
    finally:
        vec.close()
    board = ledger.episodes
    used = {ep["seed"] for ep in board} | {ep["seed"] for ep in ledger.current}
    final_seeds = final_worlds(seed, final_episodes)  # the same as every variant's
    trained_on = sorted(used.intersection(final_seeds))
    if trained_on:  # random training worlds: ~1 chance in 10⁴ per run of 1M steps
        raise RuntimeError(f"PPO trained on final worlds {trained_on[:5]}: pick another --seed")
    eval_started = time.monotonic()
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        final = pool.map(
            _ppo_eval_episode, [(str(path), s, max_steps) for s in final_seeds], chunksize=1
        )
    wall = time.monotonic() - started
    return {
        "budget": budget,
        "scoreboard": summarize(board),
        "final": summarize(final),
        "env_steps": trained + sum(ep["steps"] for ep in final),
        "env_steps_scoreboard": trained,
        "env_steps_unfinished_episodes": in_progress,
        "wall_s": round(wall, 1),
        "wall_s_scoreboard": round(train_s, 1),
        "wall_s_final": round(time.monotonic() - eval_started, 1),
        "episode_steps": max_steps,
        "ppo": dataclasses.asdict(ppo_settings()) | {"n_envs": PPO_ENVS, "policy_seed": seed},
        "seeds": {
            "scoreboard": f"{len(used)} training worlds (random world seeds from "
            f"PPO seed {seed}; none among the final seeds)",
            "final": [final_seeds[0], final_seeds[-1]] if final_seeds else [],
        },
        "policy_path": str(path),
        "episodes": {"scoreboard": board, "final": final},
    }
