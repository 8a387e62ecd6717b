"""The ZeroMQ ↔ trio bridge: the only module that waits on a ZeroMQ socket.

A ZeroMQ socket exposes one file descriptor that becomes readable when the socket's
state *may* have changed; it is edge-triggered and says nothing about what changed. So
the rule is: before waiting, and after the last send or receive (doing either can
consume the edge that would have woken us), read ``zmq.EVENTS``: a message may already
be there.

Ownership: exactly one task, :meth:`TrioSocket.run`, ever *waits* on the socket, and it
does all receiving. Sending is synchronous and never blocks: :meth:`TrioSocket.send`
hands the frames to ZeroMQ or queues them for the owner, which sends the queue in order.

**Sends go out in bursts.** Each message handed to ZeroMQ when its I/O thread is idle
wakes that thread (a syscall on each side, then a write of its own); messages handed
over back to back go out together in one write. So the socket queues what is sent while
the owner delivers received messages (the broker's and a worker's replies, made inside
``on_frames``) and sends it after every :data:`FLUSH_EVERY` of them and at the end of the
batch. A send from another task (a client's asks) goes out at once when it is the first
since the owner last went to sleep, so a lone request waits for nothing; later ones
queue and wake the owner, which sends them in one burst. After a send made inline the
owner is woken only if input arrived meanwhile, since the send may have consumed the
FD's edge.

**Few syscalls a message.** Reading ``zmq.EVENTS`` costs a syscall (ZeroMQ polls its
command pipe), about 1.4 µs: the owner reads it once before it sleeps, not after every
message, and receives until ZeroMQ says there is nothing more (``zmq.Again``, about
3 µs once a wake-up). Frames are received as :class:`zmq.Frame` so that "more frames
follow" is a field read, not a socket option (the option costs ~0.7 µs in pyzmq's
wrapper). With the bursts, this took ``benchmarks/bench_runtime.py``'s CPU a round trip
(64 B, 256 in flight, three processes) from 54 to 34 µs on the bridge alone and from 111
to 66 µs through the broker.

**Who sent it.** A socket made with ``user_ids`` (the broker's, when the head accepts
CURVE clients) also reads the *user id* ZeroMQ attaches to each message of a connection
that ZAP accepted with one (``runtime.security``: the client key's name and key) and
leaves it in :attr:`TrioSocket.user_id` for ``on_frames``. It costs a metadata lookup on
the envelope frame (about 1 µs a message, more where there is no user id: ZeroMQ raises),
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
# While delivering a batch, send what it queued after this many messages: enough for
# ZeroMQ's I/O thread to write them in one go, few enough that the next process in line
# gets work early (one flush at the end of a 256-message batch left it idle meanwhile).
FLUSH_EVERY = 32
# Plain ints: zmq's flag enums cost ~1 µs per bitwise operation on the hot path.
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)
_NOBLOCK = int(zmq.NOBLOCK)
_EHOSTUNREACH = zmq.EHOSTUNREACH
_SNDMORE = int(zmq.SNDMORE)
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
    """``recv_multipart(NOBLOCK)`` without the wrapper's overhead; raises ``zmq.Again``
    when no message waits (the rest of a multipart message is always there once its
    first frame is)."""
    frame = _raw_recv(sock, _NOBLOCK, False, False)
    frames = [frame.bytes]
    while frame.more:
        frame = _raw_recv(sock, _NOBLOCK, False, False)
        frames.append(frame.bytes)
    return frames


def recv_frames_user_id(sock: zmq.Socket, skip: set[bytes]) -> tuple[list[bytes], str | None]:
    """:func:`recv_frames` for a ROUTER, with the message's ZeroMQ ``User-Id`` (read from
    its second frame: every frame of a message carries it); ``None`` without reading it
    when the routing id is in ``skip``, ``""`` when the connection has none."""
    frame = _raw_recv(sock, _NOBLOCK, False, False)
    first = frame.bytes
    frames = [first]
    user = None
    if frame.more and first not in skip:
        frame = _raw_recv(sock, _NOBLOCK, False, False)
        frames.append(frame.bytes)
        try:
            user = frame.get("User-Id")
        except zmq.ZMQError:  # no metadata (inproc), or none by that name
            user = ""
    while frame.more:
        frame = _raw_recv(sock, _NOBLOCK, False, False)
        frames.append(frame.bytes)
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
        self._delivering = False
        """The owner is handing received messages to ``on_frames``: sends queue."""
        self._sent_inline = False
        """A send went out inline since the owner last went to sleep: the next queue."""
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
        if self._outbox or self._delivering or self._sent_inline:
            # Keep order (the owner sends the queue first) and send in bursts (see the
            # module's doc); an owner asleep is woken to send (no-op when it is not).
            self._outbox.append(frames)
            if not self._delivering:
                self._wake_owner()
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
        if self._wake is not None:
            self._sent_inline = True
            if self.sock.getsockopt(_EVENTS) & _POLLIN:
                self._wake_owner()

    def _wake_owner(self) -> None:
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None  # once is enough

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
                received = 0
                self._delivering = True
                try:
                    while received < RECV_BATCH:
                        try:
                            if skip is None:
                                frames = recv_frames(sock)
                            else:
                                frames, self.user_id = recv_frames_user_id(sock, skip)
                        except zmq.Again:
                            break
                        received += 1
                        on_frames(frames)
                        if outbox and not received % FLUSH_EVERY:
                            self._send_queued()
                finally:
                    self._delivering = False
                self.received += received
                if outbox:
                    self._send_queued()
                # Sending and receiving may have consumed the FD's edge: ask ZeroMQ.
                events = getsockopt(_EVENTS)
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
                self._sent_inline = False
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
