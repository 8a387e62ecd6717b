"""A real head process for the tests that signal, pause or starve it from outside.

``python tests/head_until_signal.py CONFIG [MODE]``, MODE being:

- ``hold`` (the default): wait for the configured actors, then run until signalled;
- ``jobs``: start an in-process ``holder`` agent, then ask it and each ``probe`` actor
  for one job that holds a few seconds (event ``jobs_running`` once all run), and finish
  when every job is answered (the report lists who answered what);
- ``chatter``: log :data:`CHATTER_EVENTS` events and finish.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from messages import Envelope  # noqa: E402
from messages.control import Probe, ProbeReply  # noqa: E402
from runtime import config  # noqa: E402
from runtime.actor import Actor, handles  # noqa: E402
from runtime.events import log  # noqa: E402
from runtime.head import Head, new_run_dir, run_head  # noqa: E402

JOB_HOLD_S = 6.0
"""How long each job of ``jobs`` holds: long enough for a test to stop the head for
several heartbeat timeouts while every job still runs."""
CHATTER_EVENTS = 3000
"""Events ``chatter`` logs: ~450 KB of console lines, several times a pipe's 64 KiB."""


class Holder(Actor):
    """An in-process agent like the method's: each job logs ``holder_job_started``."""

    role = "holder"

    @handles(Probe)
    async def on_probe(self, msg: Probe, env: Envelope) -> ProbeReply:
        log.info("holder_job_started", seq=msg.seq)
        await trio.sleep(msg.hold_s)
        return ProbeReply(msg.seq, msg.payload, self.actor_id)


async def wait_then_hold(head: Head) -> dict:
    for role, spec in head.settings.actors.items():
        await head.wait_for(role, spec.count)
    log.info("actors_ready")
    await trio.sleep_forever()
    return {}


async def jobs(head: Head) -> dict:
    await head.start_local(
        Holder(name="holder", max_frame_bytes=head.settings.runtime.max_frame_bytes)
    )
    probes = head.settings.actors["probe"].count
    await head.wait_for("probe", probes)
    answers: dict[str, str] = {}

    async def one(to: str, seq: int) -> None:
        reply = await head.client.ask(to, Probe(seq=seq, hold_s=JOB_HOLD_S))
        answers[str(reply.seq)] = reply.actor_id

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, "@holder", 0)
        for seq in range(1, probes + 1):
            nursery.start_soon(one, "@probe", seq)
        while sum(a.inflight for a in head.broker.status().actors) < probes + 1:
            await trio.sleep(0.05)
        log.info("jobs_running", jobs=probes + 1)
    return {"answers": answers}


async def chatter(head: Head) -> dict:
    for i in range(CHATTER_EVENTS):
        log.info("chatter", i=i, filler="x" * 100)
    return {"events": CHATTER_EVENTS}


if __name__ == "__main__":
    settings = config.load(sys.argv[1])
    driver = {"hold": wait_then_hold, "jobs": jobs, "chatter": chatter}[
        (sys.argv[2:] or ["hold"])[0]
    ]
    run_id, run_dir = new_run_dir(settings)
    sys.exit(trio.run(run_head, settings, run_dir, run_id, driver))
