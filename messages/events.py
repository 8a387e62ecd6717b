"""Events family: an attached actor's event log, carried to the head.

An actor the head did not start (``run.py attach`` with no run folder on its machine)
cannot append to the run's ``events.jsonl``; it sends its events to the head in
batches instead (:mod:`runtime.forward`), and the head appends them with the actor's
host. Only the head takes these: the broker refuses them addressed to any actor.
"""

from __future__ import annotations

from messages.base import message


@message("events.batch")
class EventBatch:
    """attached actor → broker (the head): events it logged, oldest first, for the run's
    ``events.jsonl``. An ask: the head answers :class:`EventsTaken` once they are
    written (a tell, sent as the actor stops, is written without an answer)."""

    stream: str
    """A random id per actor process: with ``seq`` it lets the head skip a batch it
    wrote already (sent again after its answer was lost)."""
    seq: int
    """1, 2, ... per stream, one batch at a time; 0 for an empty batch that only asks
    whether the head is there again."""
    host: str
    """The actor's host name. The head writes the one the actor registered with (the
    broker's word), not this one."""
    events: list[str]
    """One JSON object per event, as the actor's own log has it (``ts`` is when it
    happened there)."""


@message("events.taken")
class EventsTaken:
    """broker → forwarding actor: the batch ``seq`` is in the events file (or was
    already: ``written`` is then 0)."""

    seq: int
    """The batch's ``seq``."""
    written: int
    """Events written now (lines that were not JSON objects are left out and logged)."""
