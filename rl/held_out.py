"""Held-out evaluation: play a policy through an RL config's env on chosen worlds.

Used by the learner (its result's success rate) and by the environment actor (a learned
policy's rollout); ``act`` is any callable from observation to action index, so
:func:`held_out` needs no torch.

:func:`play_learned` is the learner's held-out check of a saved policy: run where the
job's envs ran (:meth:`rl.env_workers.WorkerVecEnv.held_out` splits the worlds over the
job's worker processes, so both cores play them), or in a fresh worker when those died
under it (:meth:`rl.env_workers.EnvWorkers.held_out`), never in the learner. Each
episode samples its actions from a torch seed of its own (:func:`episode_seed`: the job's
seed and the world), so an episode is the same whichever process plays it and whatever
was played before it: the check gives the same figure split or not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rl.artifacts import load_policy
from rl.rl_env import SetupError, make_env


def held_out(
    config: Any,
    act: Callable[[Any], Any],
    seeds: Sequence[int],
    tally: dict[str, Any] | None = None,
    start_states: Any = None,
    begin: Callable[[int], Any] | None = None,
) -> tuple[float, int, list[dict]]:
    """Play one episode of ``config``'s env per world seed, choosing actions with
    ``act(obs)``: (success rate, world steps, per-episode records). A world whose setup
    fails (the player died on the way to the sub-action's start) is left out of the
    rate and recorded as ``skipped``. Each record has the ``setup_steps`` its world's
    reset took (failed attempts included; 0 for a start restored or known to fail) and
    its ``world_episodes`` (:meth:`SubtaskEnv.take_world_episodes`: none for a start
    known to fail).

    The world steps returned are the policy's (after setup). ``tally``, when given, gets
    every world step the env took: ``world_steps`` (setup included, failed setups too),
    ``setup_steps`` and ``episodes`` (:meth:`SubtaskEnv.take_world_episodes`).

    ``start_states`` is the env's start-state cache (:mod:`rl.start_states`; True: the
    process's shared one): a world whose start was made before — by an earlier
    evaluation of another version of the sub-action, say — is restored, not set up
    again, and its setup steps are not counted again (they were when it was made).

    ``begin(seed)``, when given, is called as each played episode starts (after its
    reset, before the first action): to seed what ``act`` samples with."""
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
                                "setup_steps": env.setup_steps_total - before,
                                "world_episodes": env.take_world_episodes()})  # fmt: skip
                continue
            setup = env.setup_steps_total - before
            played += 1
            if begin is not None:
                begin(seed)
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
                 "setup_steps": setup, "world_episodes": env.take_world_episodes()}
            )  # fmt: skip
    finally:
        if tally is not None:
            done = [e for r in records for e in r["world_episodes"]]
            tally["episodes"] = done + env.take_world_episodes()
            tally["world_steps"] = env.world_steps
            tally["setup_steps"] = env.setup_steps_total
        env.close()
    return (wins / played if played else 0.0), steps, records


def episode_seed(sample_seed: int, world_seed: int) -> int:
    """The torch seed of one held-out episode's action sampling: the job's
    ``sample_seed`` and the world's seed, so an episode samples the same actions in any
    process and in any order."""
    return (int(sample_seed) * 1_000_003 + int(world_seed)) % 2**63


def seed_each_episode(sample_seed: int) -> Callable[[int], Any]:
    """A ``begin`` for :func:`held_out`: seeds torch's generator, which a policy's
    ``predict`` samples from, with :func:`episode_seed` as each episode starts."""
    import torch

    return lambda world_seed: torch.manual_seed(episode_seed(sample_seed, world_seed))


def play_learned(
    config: Any, policy_path: str, seeds: Sequence[int], sample_seed: int
) -> dict[str, Any]:
    """The held-out check of the policy saved at ``policy_path`` (trained with the RL
    ``config``, an RLConfig or its wire bytes) on ``seeds``, actions sampled as in
    training from each episode's own seed (:func:`episode_seed`). Starts come from the
    process's shared cache (made once per world and setup, counted where made).

    Returns plain data, to travel back from a worker process: ``wins`` and ``played``
    (worlds whose setup failed are not played), ``steps`` (the policy's world steps),
    ``records`` (per episode, see :func:`held_out`) and ``tally`` (``world_steps``,
    ``setup_steps``, ``episodes``: every world step taken, setup included)."""
    policy = load_policy(policy_path, config=config)
    tally: dict[str, Any] = {}
    _, steps, records = held_out(
        config,
        lambda obs: policy.predict(obs, deterministic=False)[0],
        seeds,
        tally,
        start_states=True,
        begin=seed_each_episode(sample_seed),
    )
    played = [r for r in records if "skipped" not in r]
    return {
        "wins": sum(bool(r["success"]) for r in played),
        "played": len(played),
        "steps": steps,
        "records": records,
        "tally": tally,
    }


def merge_checks(seeds: Sequence[int], parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One held-out check on ``seeds`` from :func:`play_learned`'s results on parts of
    them: wins, plays, steps and world steps added; records, and the world episodes
    with them, in the order of ``seeds`` (as one process playing them all lists them)."""
    order = {seed: i for i, seed in enumerate(seeds)}
    records = sorted((r for p in parts for r in p["records"]), key=lambda r: order[r["seed"]])
    # Episodes a part's env closed after its records' (none when a check ends normally).
    extra = [
        e
        for p in parts
        for e in p["tally"]["episodes"][sum(len(r["world_episodes"]) for r in p["records"]) :]
    ]
    return {
        "wins": sum(p["wins"] for p in parts),
        "played": sum(p["played"] for p in parts),
        "steps": sum(p["steps"] for p in parts),
        "records": records,
        "tally": {
            "world_steps": sum(p["tally"]["world_steps"] for p in parts),
            "setup_steps": sum(p["tally"]["setup_steps"] for p in parts),
            "episodes": [e for r in records for e in r["world_episodes"]] + extra,
        },
    }
