"""One rollout request over several environment actors at once.

A version that crashed or stalled the process running it (cause ``crashed`` or
``stalled``, see :mod:`envs.runner`) is known bad: as soon as one part comes back with
such an episode, the parts still queued or running are cancelled (their asks end, the
broker drops a queued part and tells a running one's actor to stop, which kills that
part's runner) and their seeds are reported as not run, with the same cause. A part
whose job the broker gave up on after its actors died (``job_failed``: an actor killed
from outside while running it, every try) counts the same way, as ``crashed``.
"""

from __future__ import annotations

import dataclasses

import trio

from envs.runner import fault_episode
from messages.causes import CRASHED, FAULT_CAUSES
from messages.rollout import EpisodeReport, RolloutRequest, RolloutResult
from runtime.actor import Actor, RemoteFailure

JOB_FAILED = "job_failed"
"""The broker's failure reason for a job whose actors died on every try."""


async def rollout_split(client: Actor, req: RolloutRequest, parts: int) -> RolloutResult:
    """Run ``req`` as ``parts`` jobs on environment actors in parallel; merge the results
    in seed order. Parts go to whichever environment actors are idle. A part that comes
    back ``crashed`` or ``stalled`` stops the others (see the module docstring)."""
    chunks = [req.seeds[i::parts] for i in range(parts) if req.seeds[i::parts]]
    results: list[RolloutResult] = []
    fault: list[EpisodeReport] = []  # the first episode that crashed or stalled a runner

    async def one(seeds: list[int], nursery: trio.Nursery) -> None:
        part = dataclasses.replace(req, seeds=seeds, frames=False)
        try:
            result = await client.ask("@environment", part)
        except RemoteFailure as exc:
            if exc.failure.reason != JOB_FAILED:
                raise
            # Every actor that took it died: the job is the likeliest cause.
            detail = f"the job's actors died on every try: {exc.failure.detail}"[:1000]
            episodes = [fault_episode(req, s, CRASHED, detail) for s in seeds]
            result = RolloutResult(req.subtask.name, episodes, 0.0, 0, "")
        results.append(result)
        bad = [e for e in result.episodes if e.cause in FAULT_CAUSES]
        if bad and not fault:
            fault.append(bad[0])
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        for seeds in chunks:
            nursery.start_soon(one, seeds, nursery)
    episodes = [e for r in results for e in r.episodes]
    if fault:
        episodes += _not_run(req, {e.seed for e in episodes}, fault[0])
    order = {seed: i for i, seed in enumerate(req.seeds)}
    episodes.sort(key=lambda e: order[e.seed])
    return RolloutResult.of_episodes(
        req.subtask.name,
        episodes,
        actor_id=",".join(sorted({r.actor_id for r in results if r.actor_id})),
        output="\n".join(r.output for r in results if r.output),
    )


def _not_run(req: RolloutRequest, done: set[int], first: EpisodeReport) -> list[EpisodeReport]:
    """The seeds of the parts cancelled after ``first`` crashed or stalled a runner."""
    verb = "crashed" if first.cause == CRASHED else "stalled"
    detail = f"not run: the version {verb} the runner at seed {first.seed}"
    return [fault_episode(req, s, first.cause, detail) for s in req.seeds if s not in done]
