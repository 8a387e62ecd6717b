"""The system check (``[run] driver = "checkup"``): every actor, end to end, on small
budgets.

It waits for every configured actor and probes each role (every actor registers and
answers jobs routed by role), has the environment actors run the reference coded
policies (collect wood, place a table) on fresh worlds, and has a learner train PPO
briefly on "collect wood" with coded high-level actions. Everything it does is in
``events.jsonl`` and its figures are in ``report.json``. It checks a deployment, not the
RL-GPT method (that is :mod:`rlgpt.driver`).
"""

from __future__ import annotations

import time

import trio

from messages.control import Probe, ProbeReply
from messages.rollout import RolloutRequest
from messages.task import Subtask
from messages.train import PPOSettings, TrainRequest
from method.split import rollout_split
from rl.artifacts import store_artifact
from rl.configs import collect_wood_with_coded
from runtime.events import log
from runtime.head import Head
from skills.policies import COLLECT_WOOD_SOURCE, PLACE_TABLE_SOURCE

PROBES_PER_ACTOR = 20
"""Enough jobs that every actor of a role gets some, few enough to finish in a blink."""


async def probe_roles(head: Head) -> dict:
    roles = {role: spec.count for role, spec in head.settings.actors.items() if spec.count}
    for role, count in roles.items():
        await head.wait_for(role, count)
    log.info("actors_ready", roles=roles)
    report: dict = {"roles": {}}
    for role, count in roles.items():
        summary = await _probe_role(head, role, PROBES_PER_ACTOR * count)
        log.info("role_probed", role=role, **summary)
        report["roles"][role] = summary
    return report


async def _probe_role(head: Head, role: str, jobs: int) -> dict:
    answered: dict[str, int] = {}
    latencies: list[float] = []

    async def probe(seq: int) -> None:
        started = time.perf_counter()
        reply = await head.client.ask(f"@{role}", Probe(seq=seq), timeout=60)
        if not isinstance(reply, ProbeReply):
            raise RuntimeError(f"{role} answered a probe with {type(reply).__name__}")
        latencies.append(time.perf_counter() - started)
        answered[reply.actor_id] = answered.get(reply.actor_id, 0) + 1

    async with trio.open_nursery() as nursery:
        for seq in range(jobs):
            nursery.start_soon(probe, seq)
    latencies.sort()
    return {
        "jobs": len(latencies),
        "actors": answered,
        "p50_ms": round(1000 * latencies[len(latencies) // 2], 3),
    }


ROLLOUT_SEEDS = list(range(900, 908))
"""Fresh worlds for the reference policies: 8 episodes, a few seconds per actor."""
TRAIN_STEPS = 2048
"""A short PPO job: long enough to show progress and a checkpoint, ~30 s on 2 cores."""


async def checkup(head: Head) -> dict:
    report = await probe_roles(head)
    actors = head.settings.actors
    if actors.get("environment") and actors["environment"].count:
        report["rollouts"] = await _rollouts(head, actors["environment"].count)
    if actors.get("learner") and actors["learner"].count:
        report["training"] = await _training(head)
    return report


async def _rollouts(head: Head, parts: int) -> dict:
    out = {}
    for name, code, subtask in (
        ("collect_wood", COLLECT_WOOD_SOURCE, Subtask("collect_wood", goal={"wood": 1})),
        ("place_table", PLACE_TABLE_SOURCE, Subtask("place_table", achievement="place_table")),
    ):
        req = RolloutRequest(subtask, code=code, seeds=ROLLOUT_SEEDS, wall_s=60)
        result = await rollout_split(head.client, req, parts)
        out[name] = {"success_rate": result.success_rate, "steps": result.steps}
        log.info("checkup_rollouts", subtask=name, **out[name], actors=result.actor_id)
    return out


async def _training(head: Head) -> dict:
    req = TrainRequest(
        name="checkup-collect-wood",
        config=collect_wood_with_coded(),
        total_steps=TRAIN_STEPS,
        n_envs=2,
        seed=head.settings.run.seed,
        ppo=PPOSettings(n_steps=128),
        eval_episodes=10,
        train_worlds=50,
        checkpoint_every=1024,
    )
    with trio.fail_after(900):
        result = await head.client.ask("@learner", req)
    policy = store_artifact(head.run_dir, result)
    summary = {
        "eval_success_rate": result.eval_success_rate,
        "steps": result.steps,
        "world_steps": result.primitive_steps,
        "policy": str(policy),
        "sha256": result.sha256,
        "train_s": result.train_s,
    }
    log.info("checkup_training", **{k: v for k, v in summary.items() if k != "sha256"})
    return summary
