"""Held-out evaluation: play a policy through an RL config's env on chosen worlds.

Used by the learner (its result's success rate) and by the environment actor (a learned
policy's rollout); ``act`` is any callable from observation to action index, so the
module needs no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from envs.rl_env import SetupError, make_env


def held_out(
    config: Any, act: Callable[[Any], Any], seeds: Sequence[int]
) -> tuple[float, int, list[dict]]:
    """Play one episode of ``config``'s env per world seed, choosing actions with
    ``act(obs)``: (success rate, world steps, per-episode records). A world whose setup
    fails (the player died on the way to the sub-action's start) is left out of the
    rate and recorded as ``skipped``."""
    env = make_env(config)
    wins = steps = played = 0
    records = []
    try:
        for seed in seeds:
            try:
                obs, _ = env.reset(seed=seed)
            except SetupError as exc:
                records.append({"seed": seed, "skipped": str(exc)[:300]})
                continue
            played += 1
            taken, used, unlocked = 0, [], []
            while True:
                obs, _, terminated, truncated, info = env.step(int(act(obs)))
                taken += int(info.get("primitive_steps", 1))
                used.append(str(info.get("action", "")))
                unlocked.extend(info.get("achievements", ()))
                if terminated or truncated:
                    won = bool(info.get("is_success"))
                    wins += won
                    break
            steps += taken
            records.append(
                {"seed": seed, "success": won, "steps": taken, "actions": used,
                 "achievements": unlocked, "died": bool(info.get("died"))}
            )  # fmt: skip
    finally:
        env.close()
    return (wins / played if played else 0.0), steps, records
