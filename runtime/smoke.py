"""The runtime's own driver: wait for every configured actor, then probe each role.

It is what ``python run.py --config ...`` does for roles that have no task-level driver
yet, and a quick end-to-end check of a deployment: every actor registers, answers
jobs routed by role, and the head shuts everything down cleanly.
"""

from __future__ import annotations

import time

import trio

from messages.control import Probe, ProbeReply
from runtime.events import log
from runtime.head import Head

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
