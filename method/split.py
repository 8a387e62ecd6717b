"""One rollout request over several environment actors at once."""

from __future__ import annotations

import dataclasses

import trio

from messages.rollout import RolloutRequest, RolloutResult
from runtime.actor import Actor


async def rollout_split(client: Actor, req: RolloutRequest, parts: int) -> RolloutResult:
    """Run ``req`` as ``parts`` jobs on environment actors in parallel; merge the results
    in seed order. Parts go to whichever environment actors are idle."""
    chunks = [req.seeds[i::parts] for i in range(parts) if req.seeds[i::parts]]
    results: list[RolloutResult] = []

    async def one(seeds: list[int]) -> None:
        part = dataclasses.replace(req, seeds=seeds, frames=False)
        results.append(await client.ask("@environment", part))

    async with trio.open_nursery() as nursery:
        for seeds in chunks:
            nursery.start_soon(one, seeds)
    order = {seed: i for i, seed in enumerate(req.seeds)}
    episodes = sorted((e for r in results for e in r.episodes), key=lambda e: order[e.seed])
    return RolloutResult.of_episodes(
        req.subtask.name,
        episodes,
        actor_id=",".join(sorted({r.actor_id for r in results})),
        output="\n".join(r.output for r in results if r.output),
    )
