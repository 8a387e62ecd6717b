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
    config: Any,
    act: Callable[[Any], Any],
    seeds: Sequence[int],
    tally: dict[str, Any] | None = None,
    start_states: Any = None,
) -> tuple[float, int, list[dict]]:
    """Play one episode of ``config``'s env per world seed, choosing actions with
    ``act(obs)``: (success rate, world steps, per-episode records). A world whose setup
    fails (the player died on the way to the sub-action's start) is left out of the
    rate and recorded as ``skipped``. Each record has the ``setup_steps`` its world's
    reset took (failed attempts included; 0 for a start restored or known to fail).

    The world steps returned are the policy's (after setup). ``tally``, when given, gets
    every world step the env took: ``world_steps`` (setup included, failed setups too),
    ``setup_steps`` and ``episodes`` (:meth:`SubtaskEnv.take_world_episodes`).

    ``start_states`` is the env's start-state cache (:mod:`envs.start_states`; True: the
    process's shared one): a world whose start was made before — by an earlier
    evaluation of another version of the sub-action, say — is restored, not set up
    again, and its setup steps are not counted again (they were when it was made)."""
    env = make_env(config, start_states=start_states)
    wins = steps = played = 0
    records = []
    try:
        for seed in seeds:
            before = env.setup_steps_total
            try:
                obs, _ = env.reset(seed=seed)
            except SetupError as exc:
                records.append({"seed": seed, "skipped": str(exc)[:300],
                                "setup_steps": env.setup_steps_total - before})  # fmt: skip
                continue
            setup = env.setup_steps_total - before
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
                 "achievements": unlocked, "died": bool(info.get("died")),
                 "setup_steps": setup}
            )  # fmt: skip
    finally:
        if tally is not None:
            tally["episodes"] = env.take_world_episodes()
            tally["world_steps"] = env.world_steps
            tally["setup_steps"] = env.setup_steps_total
        env.close()
    return (wins / played if played else 0.0), steps, records
