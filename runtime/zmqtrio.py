"""The ZeroMQ ↔ trio bridge: the only module that waits on a ZeroMQ socket.

A ZeroMQ socket exposes one file descriptor that becomes readable when the socket's
state *may* have changed; it is edge-triggered and says nothing about what changed. So
the rules are: read ``zmq.EVENTS`` before waiting (a message may already be there), and
again after every send or receive (doing either can consume the edge that would have
woken us). A socket is also not safe to use from two tasks waiting at once, so each
socket has exactly one owner task, :meth:`TrioSocket.run`, which does all receiving and
sending. Other tasks hand it frames with :meth:`TrioSocket.send` (never blocks) and get
frames through the ``on_frames`` callback given at construction.

No polling with sleeps: the owner sleeps in ``wait_readable`` until the FD fires or a
sender wakes it by cancelling that wait.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import trio
import zmq

# Receive at most this many messages before letting other tasks run: large enough to
# amortise the wake-up, small enough that a flood cannot starve the actor's other tasks.
RECV_BATCH = 256


class TrioSocket:
    """One ZeroMQ socket driven by one trio task.

    ``on_frames(frames)`` is called synchronously for every received multipart message;
    it must not block (hand work to a channel or a nursery if it is slow).
    """

    def __init__(self, sock: zmq.Socket, on_frames: Callable[[list[bytes]], None]) -> None:
        self.sock = sock
        self._on_frames = on_frames
        self._outbox: deque[list[bytes]] = deque()
        self._wake: trio.CancelScope | None = None
        self._closed = False
        self._drained: trio.Event | None = None
        self.sent = 0
        self.received = 0

    def send(self, frames: list[bytes]) -> None:
        """Queue a multipart message; the owner task sends it. Never blocks."""
        if self._closed:
            raise trio.ClosedResourceError("socket is closed")
        self._outbox.append(frames)
        if self._wake is not None:
            self._wake.cancel()

    @property
    def pending(self) -> int:
        """Messages queued but not yet handed to ZeroMQ."""
        return len(self._outbox)

    async def run(self) -> None:
        """Own the socket until cancelled: receive, send, and sleep on the FD."""
        sock = self.sock
        fd = sock.getsockopt(zmq.FD)
        recv = sock.recv_multipart
        send = sock.send_multipart
        outbox = self._outbox
        on_frames = self._on_frames
        try:
            while True:
                events = sock.getsockopt(zmq.EVENTS)
                progressed = False
                if events & zmq.POLLIN:
                    for _ in range(RECV_BATCH):
                        try:
                            frames = recv(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self.received += 1
                        on_frames(frames)
                    progressed = True
                if outbox and events & zmq.POLLOUT:
                    while outbox:
                        try:
                            send(outbox[0], zmq.NOBLOCK)
                        except zmq.Again:
                            break  # high-water mark: wait for the FD to say POLLOUT again
                        except zmq.ZMQError as exc:
                            if exc.errno != zmq.EHOSTUNREACH:
                                raise
                            # ROUTER_MANDATORY: the peer is gone; the broker learns of
                            # dead peers through heartbeats and the supervisor.
                        outbox.popleft()
                        self.sent += 1
                    if not outbox and self._drained is not None:
                        self._drained.set()
                        self._drained = None
                    progressed = True
                if progressed:
                    # Let the tasks we just fed run before we look again (fairness).
                    await trio.lowlevel.checkpoint()
                    continue
                # Nothing to do until the FD fires (a message arrived, or room to send
                # opened up) or someone queues a message (send() cancels this wait).
                self._wake = trio.CancelScope()
                with self._wake:
                    await trio.lowlevel.wait_readable(fd)
                self._wake = None
        finally:
            self._closed = True
            self._wake = None

    async def flush(self, timeout: float = 1.0) -> bool:
        """Wait until the outbox has been handed to ZeroMQ; False on timeout."""
        with trio.move_on_after(timeout):
            if self._outbox:
                self._drained = self._drained or trio.Event()
                await self._drained.wait()
            return True
        return False
