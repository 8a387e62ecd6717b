"""The probe actor: answers ``control.probe`` and nothing else.

It is the smallest real actor — it registers, heartbeats, and runs each probe's
simulated work in a worker thread — and serves as the runtime's smoke check, the load
for its tests and the far end of its benchmark.
"""

from __future__ import annotations

from runtime.actor import Actor


class ProbeActor(Actor):
    role = "probe"
