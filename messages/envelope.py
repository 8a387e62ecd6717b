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
