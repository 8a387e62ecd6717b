"""The ZeroMQ ↔ trio bridge: the only module that waits on a ZeroMQ socket.

A ZeroMQ socket exposes one file descriptor that becomes readable when the socket's
state *may* have changed; it is edge-triggered and says nothing about what changed. So
the rules are: read ``zmq.EVENTS`` before waiting (a message may already be there), and
again after every send or receive (doing either can consume the edge that would have
woken us).

Ownership: exactly one task, :meth:`TrioSocket.run`, ever *waits* on the socket, and it
does all receiving. Sending is synchronous and never blocks: :meth:`TrioSocket.send`
hands the frames to ZeroMQ at once when nothing is queued ahead of them (a non-blocking
call on the same thread, so it cannot interleave with the owner's calls), and otherwise
queues them for the owner, which sends when ZeroMQ has room. Sending inline matters: it
saves a task wake-up per message, which is most of the cost of a hop (see
``benchmarks/bench_runtime.py``). After an inline send the owner is woken only if input
arrived meanwhile, since the send may have consumed the FD's edge.

**Who sent it.** A socket made with ``user_ids`` (the broker's, when the head accepts
CURVE clients) also reads the *user id* ZeroMQ attaches to each message of a connection
that ZAP accepted with one (``runtime.security``: the client key's name and key) and
leaves it in :attr:`TrioSocket.user_id` for ``on_frames``. It costs a ``Frame`` for the
envelope frame (about 1 µs a message, more where there is no user id: ZeroMQ raises),
so messages whose routing id is in the ``user_ids`` set are received as before and get
``None``: the broker puts there the connections it already knows carry no key.

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
# Plain ints: zmq's flag enums cost ~1 µs per bitwise operation on the hot path.
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)
_NOBLOCK = int(zmq.NOBLOCK)
_EHOSTUNREACH = zmq.EHOSTUNREACH
_SNDMORE = int(zmq.SNDMORE)
_RCVMORE = int(zmq.RCVMORE)
# The Cython methods under pyzmq's Python wrappers: the wrappers' argument handling and
# flag enums cost ~6 µs per message (measured), a sizeable share of a broker hop.
_raw_send = zmq.backend.Socket.send
_raw_recv = zmq.backend.Socket.recv


def send_frames(sock: zmq.Socket, frames: list[bytes]) -> None:
    """``send_multipart(frames, NOBLOCK)`` without the wrapper's overhead."""
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        _raw_send(sock, frame, _NOBLOCK | _SNDMORE if i < last else _NOBLOCK, True, False)


def recv_frames(sock: zmq.Socket) -> list[bytes]:
    """``recv_multipart(NOBLOCK)`` without the wrapper's overhead (call on POLLIN only:
    the rest of a multipart message is always there once its first frame is)."""
    frames = [_raw_recv(sock, _NOBLOCK, True, False)]
    while sock.getsockopt(_RCVMORE):
        frames.append(_raw_recv(sock, _NOBLOCK, True, False))
    return frames


def recv_frames_user_id(sock: zmq.Socket, skip: set[bytes]) -> tuple[list[bytes], str | None]:
    """:func:`recv_frames` for a ROUTER, with the message's ZeroMQ ``User-Id`` (read from
    its second frame: every frame of a message carries it); ``None`` without reading it
    when the routing id is in ``skip``, ``""`` when the connection has none."""
    first = _raw_recv(sock, _NOBLOCK, True, False)
    if first in skip or not sock.getsockopt(_RCVMORE):
        frames = [first]
        user = None
    else:
        frame = _raw_recv(sock, _NOBLOCK, False, False)
        frames = [first, frame.bytes]
        try:
            user = frame.get("User-Id")
        except zmq.ZMQError:  # no metadata (inproc), or none by that name
            user = ""
    while sock.getsockopt(_RCVMORE):
        frames.append(_raw_recv(sock, _NOBLOCK, True, False))
    return frames, user


class TrioSocket:
    """One ZeroMQ socket driven by one trio task.

    ``on_frames(frames)`` is called synchronously for every received multipart message;
    it must not block (start a task if the work is slow). It may call :meth:`send`.
    With ``user_ids`` (a set the caller keeps filling), :attr:`user_id` holds the
    message's user id meanwhile (see the module's doc).
    """

    def __init__(
        self,
        sock: zmq.Socket,
        on_frames: Callable[[list[bytes]], None],
        *,
        user_ids: set[bytes] | None = None,
    ) -> None:
        self.sock = sock
        self._on_frames = on_frames
        self._skip_user_id = user_ids
        self.user_id: str | None = None
        """The user id of the message ``on_frames`` is handling: ``NAME/KEY`` from a
        CURVE client, ``""`` from a connection without one, ``None`` when not read."""
        self._outbox: deque[list[bytes]] = deque()
        self._wake: trio.CancelScope | None = None
        self._closed = False
        self._drained: trio.Event | None = None
        self.sent = 0
        self.received = 0
        self.dropped = 0

    def send(self, frames: list[bytes]) -> None:
        """Send a multipart message now, or queue it behind earlier ones. Never blocks."""
        if self._closed:
            raise trio.ClosedResourceError("socket is closed")
        if self._outbox:
            self._outbox.append(frames)  # keep order: the owner sends the queue first
            return
        try:
            send_frames(self.sock, frames)
        except zmq.Again:
            # High-water mark reached: the owner sends it when ZeroMQ has room.
            self._outbox.append(frames)
            self._wake_owner()
            return
        except zmq.ZMQError as exc:
            if exc.errno != _EHOSTUNREACH:
                raise
            self.dropped += 1  # ROUTER_MANDATORY: that peer is gone
            return
        self.sent += 1
        if self._wake is not None and self.sock.getsockopt(_EVENTS) & _POLLIN:
            self._wake_owner()

    def _wake_owner(self) -> None:
        if self._wake is not None:
            self._wake.cancel()

    @property
    def pending(self) -> int:
        """Messages queued but not yet handed to ZeroMQ."""
        return len(self._outbox)

    async def run(self) -> None:
        """Own the socket until cancelled: receive, send what is queued, sleep on the FD."""
        sock = self.sock
        fd = sock.getsockopt(zmq.FD)
        getsockopt = sock.getsockopt
        outbox = self._outbox
        on_frames = self._on_frames
        skip = self._skip_user_id
        try:
            while True:
                events = getsockopt(_EVENTS)
                received = 0
                while events & _POLLIN and received < RECV_BATCH:
                    if skip is None:
                        frames = recv_frames(sock)
                    else:
                        frames, self.user_id = recv_frames_user_id(sock, skip)
                    received += 1
                    on_frames(frames)
                    events = getsockopt(_EVENTS)
                self.received += received
                if outbox and events & _POLLOUT and self._send_queued():
                    continue
                # (No progress despite POLLOUT: a ROUTER reports it when *any* peer has
                # room, and the head of the queue may be for a full one. Wait for a change.)
                if received >= RECV_BATCH:
                    await trio.lowlevel.checkpoint()  # fairness under a flood
                    continue
                if events & _POLLIN:
                    continue
                # Nothing to do until the FD fires (a message arrived, or room to send
                # opened up) or a sender wakes us (send() cancels this wait).
                self._wake = trio.CancelScope()
                with self._wake:
                    await trio.lowlevel.wait_readable(fd)
                self._wake = None
        finally:
            self._closed = True
            self._wake = None

    def _send_queued(self) -> int:
        """Send what ZeroMQ takes from the queue, in order; how many went."""
        outbox = self._outbox
        before = self.sent + self.dropped
        while outbox:
            try:
                send_frames(self.sock, outbox[0])
                self.sent += 1
            except zmq.Again:
                break  # full again: wait for the FD to report POLLOUT
            except zmq.ZMQError as exc:
                if exc.errno != _EHOSTUNREACH:
                    raise
                self.dropped += 1
            outbox.popleft()
        if not outbox and self._drained is not None:
            self._drained.set()
            self._drained = None
        return self.sent + self.dropped - before

    async def flush(self, timeout: float = 1.0) -> bool:
        """Wait until everything queued has been handed to ZeroMQ; False on timeout."""
        with trio.move_on_after(timeout):
            if self._outbox:
                self._drained = self._drained or trio.Event()
                await self._drained.wait()
            return True
        return False
