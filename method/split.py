"""One rollout request over several environment actors at once.

From starts (``RolloutRequest.start_at``) a world's start is made by the runner that
first plays it and restored there after: another actor would make it again (its setup
played and booked once more). An :class:`Affinity` remembers which actor played each
world after each setup, and the request's parts go to those actors as preferred ones
(:data:`messages.envelope.PREFER`): a part still goes to an idle actor when its own is
busy, and no actor gets more than its share of the worlds (``ceil(seeds / parts)``), so
the actors stay as evenly fed as before. Which worlds are played, and what they report,
does not change: a restored start is the state the made one was.

A version that crashed or stalled the process running it (cause ``crashed`` or
``stalled``, see :mod:`episodes.runner`) is known bad: as soon as one part comes back with
such an episode, the parts still queued or running are cancelled (their asks end, the
broker drops a queued part and tells a running one's actor to stop, which kills that
part's runner) and their seeds are reported as not run, with the same cause. A part
whose job the broker gave up on after its actors died (``job_failed``: an actor killed
from outside while running it, every try) counts the same way, as ``crashed``.

A peer's answer is checked against the part it answers: a message of another kind, or
episodes for other worlds than the part's, is that peer's fault (``bad_reply``, charged
to it at the broker, which drops a peer that keeps answering wrongly): the part is asked
again, and after :data:`BAD_REPLY_TRIES` wrong answers its worlds are booked
``rollout_failed`` with no stage run (not reached, to the version's books).
"""

from __future__ import annotations

import dataclasses
import hashlib

import trio

from episodes.composite import setup_parts
from episodes.runner import fault_episode
from messages import preferring
from messages.causes import CRASHED, FAULT_CAUSES, ROLLOUT_FAILED
from messages.rollout import EpisodeReport, RolloutRequest, RolloutResult
from runtime.actor import Actor, RemoteFailure
from runtime.failures import BAD_REPLY, BAD_REPLY_TRIES

JOB_FAILED = "job_failed"
"""The broker's failure reason for a job whose actors died on every try."""


ROLE = "@environment"

PART_EPISODES = 3
"""Episodes per part of a request of whole episodes (:func:`whole_parts`)."""


def whole_parts(actors: int, episodes: int) -> int:
    """How many parts a request of ``episodes`` whole episodes (no ``start_at``) is split
    into over ``actors`` environment actors: parts of about :data:`PART_EPISODES`, at
    least one per actor (and at most one per episode). An actor that finishes its part
    takes the next from the queue, so the request ends at most about one short part
    after its last actor got busy (episodes differ in length by thousands of steps: two
    halves of 100 diamond episodes ended 4 s apart, parts of 12 still 4 s). Each world
    plays the same episode whichever part holds it, so the result does not change."""
    return max(1, min(episodes, max(actors, -(-episodes // PART_EPISODES))))


def start_setup_key(req: RolloutRequest) -> str:
    """What decides the starts of ``req``'s worlds (see
    :func:`episodes.composite.composed_start_key`): the stages before ``start_at``, the
    needs, the episode's test and cap, the tests of the stages from it on, the wall
    budget. Versions of one stage after the same setup share it."""
    after = [s.subtask for s in req.stages[req.start_at :]]
    parts = setup_parts(req.stages[: req.start_at], req.needs, req.subtask, after)
    parts.append(repr(req.wall_s).encode())
    return hashlib.sha256(b"\n".join(parts)).hexdigest()


@dataclasses.dataclass
class Affinity:
    """Which environment actor played each world from a start, per setup: where its
    start is saved (see the module docstring)."""

    actors: list[str] = dataclasses.field(default_factory=list)
    """Environment actors that answered a part, in the order first seen."""
    holders: dict[str, dict[int, str]] = dataclasses.field(default_factory=dict)
    """:func:`start_setup_key` → world seed → the actor that last played it."""

    def parts(self, req: RolloutRequest, parts: int) -> list[tuple[str, list[int]]]:
        """``req``'s seeds as at most ``parts`` parts, each with its address. Without
        starts or before any actor is known: ``seeds[i::parts]`` to any idle actor.
        Otherwise each known actor's part holds the worlds it played (up to
        ``ceil(seeds / parts)``), the other worlds go one at a time to the part with
        the fewest (known actors first), and a part goes to its actor as preferred.

        Not cut finer: a piece of one actor's share that an idle actor took would have
        its starts made again there (measured on the default diamond run: 10,847 setup
        steps taken twice for about 1 s of wall time)."""
        seeds = list(req.seeds)
        if not req.start_at or not self.actors:
            return [(ROLE, seeds[i::parts]) for i in range(parts) if seeds[i::parts]]
        held = self.holders.get(start_setup_key(req), {})
        cap = -(-len(seeds) // parts)
        named: dict[str, list[int]] = {a: [] for a in self.actors[:parts]}
        loose: list[int] = []
        for seed in seeds:
            part = named.get(held.get(seed, ""))
            if part is not None and len(part) < cap:
                part.append(seed)
            else:
                loose.append(seed)
        chunks = [*named.values(), *([] for _ in range(parts - len(named)))]
        for seed in loose:
            min(chunks, key=len).append(seed)
        addresses = [preferring(ROLE, a) for a in named] + [ROLE] * (parts - len(named))
        order = {seed: i for i, seed in enumerate(seeds)}
        return [
            (to, sorted(c, key=order.__getitem__))
            for to, c in zip(addresses, chunks, strict=True)
            if c
        ]

    def played(self, req: RolloutRequest, result: RolloutResult) -> None:
        """One part's ``result`` came back from one actor: its worlds' starts are there."""
        actor = result.actor_id
        if not actor or "," in actor:
            return
        if actor not in self.actors:
            self.actors.append(actor)
        if req.start_at:
            held = self.holders.setdefault(start_setup_key(req), {})
            held.update(dict.fromkeys((e.seed for e in result.episodes), actor))


async def rollout_split(
    client: Actor, req: RolloutRequest, parts: int, affinity: Affinity | None = None
) -> RolloutResult:
    """Run ``req`` as ``parts`` jobs on environment actors in parallel; merge the results
    in seed order. Parts go to whichever environment actors are idle; with ``affinity``,
    a world played from a start before goes preferably to the actor that holds its start
    (:meth:`Affinity.parts`). A part that comes back ``crashed`` or ``stalled`` stops
    the others (see the module docstring)."""
    affinity = affinity if affinity is not None else Affinity()
    chunks = affinity.parts(req, parts)
    results: list[RolloutResult] = []
    fault: list[EpisodeReport] = []  # the first episode that crashed or stalled a runner

    async def one(to: str, seeds: list[int], nursery: trio.Nursery) -> None:
        part = dataclasses.replace(req, seeds=seeds, frames=False)
        for attempt in range(BAD_REPLY_TRIES):
            try:
                result = await client.ask(
                    to if attempt == 0 else "@environment", part, expect=RolloutResult,
                    check=lambda result: _seeds_problem(result, seeds),
                )  # fmt: skip
                affinity.played(part, result)
                break
            except RemoteFailure as exc:
                if exc.failure.reason == JOB_FAILED:
                    # Every actor that took it died: the job is the likeliest cause.
                    detail = f"the job's actors died on every try: {exc.failure.detail}"
                    episodes = [fault_episode(req, s, CRASHED, detail[:1000]) for s in seeds]
                    result = RolloutResult(req.subtask.name, episodes, 0.0, 0, "")
                    break
                if exc.failure.reason != BAD_REPLY:
                    raise
                # The answering peer's fault, not the version's: asked again (the broker
                # hands it to any environment actor); after the last try, not played.
                detail = f"environment peers answered wrongly: {exc.failure.detail}"
                # No stage run in them: to the version's books, these worlds were not
                # reached (method.paired leaves them out of a comparison).
                episodes = [
                    EpisodeReport(s, False, 0, 0.0, [], ROLLOUT_FAILED, detail[:1000])
                    for s in seeds
                ]
                result = RolloutResult(req.subtask.name, episodes, 0.0, 0, "")
        results.append(result)
        bad = [e for e in result.episodes if e.cause in FAULT_CAUSES]
        if bad and not fault:
            fault.append(bad[0])
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        for to, seeds in chunks:
            nursery.start_soon(one, to, seeds, nursery)
    episodes = [e for r in results for e in r.episodes]
    if fault:
        episodes += _not_run(req, {e.seed for e in episodes}, fault[0])
    order = {seed: i for i, seed in enumerate(req.seeds)}
    episodes.sort(key=lambda e: order[e.seed])
    # The parts' printed output in seed order too, not in the order they finished.
    results.sort(key=lambda r: min((order[e.seed] for e in r.episodes), default=len(order)))
    return RolloutResult.of_episodes(
        req.subtask.name,
        episodes,
        actor_id=",".join(sorted({r.actor_id for r in results if r.actor_id})),
        output="\n".join(r.output for r in results if r.output),
    )


def _seeds_problem(result: RolloutResult, seeds: list[int]) -> str:
    """What is wrong with ``result`` unless it holds one episode for each of ``seeds``
    and no other ('' when nothing): a peer may not answer for worlds it was not asked to
    play (the ask then fails with ``bad_reply``, charged to that peer)."""
    got = sorted(e.seed for e in result.episodes)
    if got == sorted(seeds):
        return ""
    extra = sorted(set(got) - set(seeds))[:5]
    missing = sorted(set(seeds) - set(got))[:5]
    return (
        f"episodes for seeds {got[:5]}… (extra {extra}, missing {missing})"
        f", asked for {len(seeds)} seeds"
    )


def _not_run(req: RolloutRequest, done: set[int], first: EpisodeReport) -> list[EpisodeReport]:
    """The seeds of the parts cancelled after ``first`` crashed or stalled a runner."""
    verb = "crashed" if first.cause == CRASHED else "stalled"
    detail = f"not run: the version {verb} the runner at seed {first.seed}"
    return [fault_episode(req, s, first.cause, detail) for s in req.seeds if s not in done]
