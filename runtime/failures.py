"""What an ask raises when the other side answered with ``control.failure``: below
:mod:`runtime.actor`, which raises it, so that what the actor runs (the events forwarder
in :mod:`runtime.forward`) can catch it without importing the actor."""

from __future__ import annotations

from messages.control import Failure

BAD_REPLY = "bad_reply"
"""The reason of a reply that does not answer the request asked (undecodable, another
kind than its envelope says, or not what the asker expects): the answering peer's fault."""
BAD_REPLY_TRIES = 3
"""Times a job is asked for when peers answer it wrongly (the later tries of any actor
of the role), before it fails with ``bad_reply``."""


class RemoteFailure(Exception):
    """The other side answered an ask with ``control.failure``."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(
            f"{failure.reason}: {failure.detail}" if failure.detail else failure.reason
        )
        self.failure = failure
