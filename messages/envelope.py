"""Routing data that travels beside a record (never inside it)."""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOL = 1
"""Wire protocol version carried by every envelope; bumped on any framing change."""

TELL = 0
"""One-way message: no reply expected."""
ASK = 1
"""A request: exactly one REPLY comes back. Addressed to a role, it is a *job*: queued,
handed to an idle actor of that role, re-queued if that actor dies."""
REPLY = 2
"""The answer to an ASK; ``re`` names the request's id."""
MODES = frozenset({TELL, ASK, REPLY})

BROKER = "broker"
"""Address of the broker itself (registration, heartbeats, status)."""
ROLE_PREFIX = "@"
"""``@learner`` addresses any idle actor of the role ``learner``."""
PREFER = "/"
"""``@environment/environment-0`` addresses a job to any actor of the role
``environment``, preferring ``environment-0``: it goes there when that actor has room
(it holds what the job needs: a runner's saved starts), else to another actor of the
role with room, so none idles while the job waits (:func:`preferring`)."""


def preferring(role_address: str, actor_id: str) -> str:
    """``@role`` with a preferred actor: see :data:`PREFER`."""
    return f"{role_address}{PREFER}{actor_id}" if actor_id else role_address


def preference(to: str) -> tuple[str, str]:
    """An ask's address as (where it queues, the actor it prefers or ''): a role address
    may name a preferred actor (:data:`PREFER`); any other address is itself."""
    if to.startswith(ROLE_PREFIX) and PREFER in to:
        queue, _, actor_id = to.partition(PREFER)
        return queue, actor_id
    return to, ""


@dataclass(slots=True)
class Envelope:
    """Who a message is from and for. ``frm`` is stamped by the broker, never trusted
    from the sender."""

    mode: int
    """TELL, ASK or REPLY."""
    id: str
    """Unique id of this message; an ASK's id is also its job id."""
    to: str
    """An actor id, ``@role``, or ``broker``."""
    frm: str = ""
    """Sender's actor id, set by the broker on the way through."""
    re: str = ""
    """For a REPLY, the id of the ASK it answers; otherwise empty."""
    kind: str = ""
    """Kind tag of the body, so routing and logs need not decode it."""
    deadline_s: float = 0.0
    """For an ASK: seconds one actor may hold it before the broker takes it back and
    hands it to another (each try gets the full time); 0: no limit. Travels only when
    set, so envelopes without one are the 7 items older builds read."""
