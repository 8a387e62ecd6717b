"""The actor base class: a mailbox, handlers per message type, request/reply.

An actor connects a DEALER socket to the broker, registers its role and capacity, and
then serves its mailbox. A subclass declares handlers::

    class Echo(Actor):
        role = "echo"

        @handles(Probe)
        async def on_probe(self, msg: Probe, env: Envelope) -> ProbeReply:
            return ProbeReply(msg.seq, msg.payload, self.actor_id)

A handler's return value is the reply to an ASK; if it raises, the asker gets a
``control.failure`` naming the error (its type and message; the traceback stays in this
actor's events) instead of silence. An ``async`` handler runs in a task of its own; a
plain handler runs at once, inside the socket's receive loop (it must not block), and may
return an awaitable to finish in a task — this skips a task switch for the many messages
that need no waiting. Blocking work goes through :meth:`Actor.run_blocking` (a worker
thread) so heartbeats and other messages keep flowing while it runs. Lifecycle:
:meth:`setup` → register → serve → :meth:`teardown`.

A job the broker hands out again (it presumed this actor dead, then the actor registered
anew) never runs twice here: while its handler runs, that handler's reply answers both;
once answered, the recorded reply is sent again (event ``job_redelivered``).

Registering states this process's package version and source hash
(:mod:`runtime.provenance`); a head running another tree refuses it (unless
``allow_version_mismatch``), and :meth:`Actor.run` raises :class:`ActorRefused` with the
head's message. So it does when the head revokes the key this actor connected with (a
``control.failure`` of reason ``key_revoked`` from the broker): the actor stops at once
instead of registering again.
"""

from __future__ import annotations

import inspect
import itertools
import os
import secrets
import signal
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import trio
import zmq
import zmq.utils.monitor

from messages import (
    ASK,
    BROKER,
    DEFAULT_MAX_FRAME,
    REPLY,
    TELL,
    DecodeError,
    Envelope,
    decode,
    decode_envelope,
    encode,
    encode_envelope,
)
from messages.codec import MAX_DEADLINE_S
from messages.control import (
    BadReply,
    Cancel,
    Failure,
    Heartbeat,
    Probe,
    ProbeReply,
    Register,
    Registered,
    Shutdown,
)
from runtime import provenance
from runtime.deadlines import hold_limit
from runtime.events import bind, log
from runtime.failures import BAD_REPLY, RemoteFailure
from runtime.forward import EventForwarder
from runtime.ratelimit import EventLimiter
from runtime.security import CurveClient
from runtime.zmqtrio import TrioSocket, send_frames

M = TypeVar("M")
Handler = Callable[[Any, Any, Envelope], Awaitable[Any]]

RUNTIME_KINDS = frozenset({Shutdown, Cancel, Failure})
"""Records the runtime acts on before any handler (:meth:`Actor._runtime_message`)."""
FATAL_FROM_BROKER = frozenset({"key_revoked", "bad_replies"})
"""Failures the broker sends unasked that end the actor (it would be refused again)."""
# How long an actor waits for the broker to answer its registration before trying
# again; ZeroMQ reconnects underneath, so a late broker is simply waited for.
REGISTER_RETRY_S = 2.0
HANDSHAKE_FAILURES = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
MECHANISM_MISMATCH = getattr(zmq, "PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH", 0x11000002)
"""The handshake failure's value when one side speaks CURVE and the other not."""
TEST_HOOKS_ENV = "RLGPT_TEST_HOOKS"
"""Set to 1 (the test suite does) to let ``Probe(crash=True)`` kill the answering actor."""
# Messages that arrive before setup() finishes wait in memory; past this many the actor
# refuses further asks (the broker's capacity accounting normally keeps it far lower).
EARLY_MAIL_LIMIT = 10_000
# Replies kept to answer a job the broker hands out again after it finished here (its
# first reply was lost while the broker had presumed this actor dead). A redelivery
# comes within a heartbeat timeout or two, so a few dozen replies cover any capacity in
# use; the byte cap keeps big rollout results from holding memory (>= 2 largest frames).
ANSWERED_KEEP = 64
ANSWERED_KEEP_BYTES = 128 * 2**20
# How long closing the socket may hold on to an attached actor's last events batch, so
# that what it logged while stopping still reaches the head.
LAST_EVENTS_LINGER_MS = 1000


class ActorRefused(Exception):
    """The broker refused to register this actor (e.g. its name is taken)."""


def handles(msg_type: type) -> Callable[[Handler], Handler]:
    """Mark a method as the handler for one message type."""

    def mark(fn: Handler) -> Handler:
        fn.__handles__ = msg_type  # type: ignore[attr-defined]
        return fn

    return mark


class _Pending:
    __slots__ = ("event", "env", "body")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.env: Envelope | None = None
        self.body = b""


class Actor:
    role: ClassVar[str] = "actor"
    """Role name that ``@role`` addresses reach."""
    _handlers: ClassVar[dict[type, str]] = {}
    forwarder: EventForwarder | None = None
    """Sends this process's events to the head (an actor attached with no run folder
    here: :mod:`runtime.forward`); None when it writes the run's events file itself."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers = dict(cls._handlers)
        for name, fn in vars(cls).items():
            msg_type = getattr(fn, "__handles__", None)
            if msg_type is not None:
                handlers[msg_type] = name
        cls._handlers = handlers

    def __init__(
        self,
        *,
        name: str = "",
        capacity: int = 1,
        device: str = "cpu",
        max_frame_bytes: int = DEFAULT_MAX_FRAME,
        parent_pid: int | None = None,
        run_dir: Path | None = None,
        allow_version_mismatch: bool = False,
    ) -> None:
        self.requested_name = name
        self.allow_version_mismatch = allow_version_mismatch
        """Register even where the head runs another source tree (it logs a warning)."""
        self.run_dir = run_dir
        """Where the actor may write artifacts (None when attached from elsewhere)."""
        self.actor_id = name
        self.capacity = capacity
        self.device = device
        self.max_frame_bytes = max_frame_bytes
        self.parent_pid = parent_pid
        self.run_id = ""
        self.join_run = ""
        """The run this actor means to join (``attach --run-id``): a head of another run
        refuses it, and it refuses one that answers with another. Empty: any run."""
        self.inflight = 0
        self._ids = itertools.count()
        self._nonce = secrets.token_hex(3)
        self._pending: dict[str, _Pending] = {}
        self._sock: TrioSocket | None = None
        self._nursery: trio.Nursery | None = None
        self._ready = False
        self._early: list[tuple[Envelope, bytes]] = []
        self._running: dict[tuple[str, str], trio.CancelScope] = {}
        """Asks whose handler runs now, by (requester, job id): a redelivery of one of
        these starts no second handler."""
        self._answered: OrderedDict[tuple[str, str], tuple[str, bytes]] = OrderedDict()
        """Recent replies (kind, body) by (requester, job id), to answer a redelivery of
        a job already finished here without running it again."""
        self._answered_bytes = 0
        self._refused: ActorRefused | None = None
        self._keyless = True
        # Frames refused here (a peer may send any body under an open kind) are logged
        # whole up to a limit, then counted (runtime/ratelimit.py).
        self._rejections = EventLimiter("message_rejected", ("frm", "reason"))
        self._scope: trio.CancelScope | None = None
        self._registered = trio.Event()
        self.heartbeat_interval = 1.0
        self.stop_reason = ""

    # -- hooks for subclasses --------------------------------------------------------

    async def setup(self) -> None:
        """Runs before the actor registers (so before any work arrives): load models,
        warm caches. The socket is already connected; ``actor_id`` is not yet known."""

    async def teardown(self) -> None:
        """Runs on the way out, even after an error; keep it short."""

    # -- the public API ----------------------------------------------------------------

    def tell(self, to: str, msg: Any) -> None:
        """Send one-way. ``to``: actor id, ``@role`` or ``broker``."""
        self._send(Envelope(TELL, self._next_id(), to), msg)

    async def ask(
        self,
        to: str,
        msg: Any,
        *,
        timeout: float | None = None,
        deadline_s: float | None = None,
        expect: type | None = None,
        check: Callable[[Any], str] | None = None,
    ) -> Any:
        """Send a request and wait for its reply. Raises :class:`RemoteFailure` if the
        other side failed (reason ``deadline`` when no actor answered within
        ``deadline_s`` in any of its tries), or answered with a message other than an
        ``expect`` (reason ``bad_reply``: the answering peer's fault, never the asker's),
        ``trio.TooSlowError`` after ``timeout`` seconds. ``check``: what else a reply
        must satisfy (it returns what is wrong, '' when nothing): a reply that fails it
        is a ``bad_reply`` too. Every bad reply is charged to its sender at the broker
        (:class:`~messages.control.BadReply`), which drops a peer that keeps sending them.
        ``deadline_s``: how long one actor may hold the job before the broker hands it to
        another (None: derived from the request, :mod:`runtime.deadlines`; 0: no limit)."""
        msg_id = self._next_id()
        pending = self._pending[msg_id] = _Pending()
        if to == BROKER:
            deadline_s = 0.0  # the broker answers at once; it makes no job of it
        elif deadline_s is None:
            deadline_s = hold_limit(msg)
        if not deadline_s > 0:  # (nan too)
            deadline_s = 0.0
        try:
            env = Envelope(ASK, msg_id, to, deadline_s=min(deadline_s, MAX_DEADLINE_S))
            self._send(env, msg)
            if timeout is None:
                await pending.event.wait()
            else:
                with trio.fail_after(timeout):
                    await pending.event.wait()
        finally:
            self._pending.pop(msg_id, None)
            if pending.env is None and to != BROKER and not self._sock_closed():
                # Abandoned (timeout or cancellation): don't leave the work running.
                self._send(Envelope(TELL, self._next_id(), BROKER), Cancel(msg_id))
        try:
            reply = decode(pending.body, self.max_frame_bytes)
        except DecodeError as exc:
            log.warning("message_rejected", reason=exc.reason, detail=exc.detail, re=msg_id)
            raise self._bad_reply(to, msg_id, str(exc)) from None
        said = pending.env.kind
        if type(reply).__message_kind__ != said:
            # The broker checked the envelope's kind; the body must be what it said.
            log.warning("message_rejected", reason="kind_mismatch", kind=said, re=msg_id)
            raise self._bad_reply(to, msg_id, f"{said} envelope, other body")
        if isinstance(reply, Failure):
            raise RemoteFailure(reply)
        if expect is not None and not isinstance(reply, expect):
            answered = type(reply).__message_kind__
            asked = getattr(type(msg), "__message_kind__", type(msg).__name__)
            log.warning(
                "message_rejected", reason="unexpected_reply", kind=answered, asked=asked,
                sender=pending.env.frm, re=msg_id,
            )  # fmt: skip
            raise self._bad_reply(to, msg_id, f"{asked} answered with {answered}")
        wrong = check(reply) if check is not None else ""
        if wrong:
            log.warning("message_rejected", reason="failed_check", detail=wrong[:300], re=msg_id)
            raise self._bad_reply(to, msg_id, wrong)
        return reply

    def _bad_reply(self, to: str, msg_id: str, detail: str) -> RemoteFailure:
        """The failure an ask raises for a wrong reply, once the broker is told whose
        it was (a reply from the broker itself is nobody's to charge)."""
        if to != BROKER and not self._sock_closed():
            self.tell(BROKER, BadReply(msg_id, detail[:1000]))
        return RemoteFailure(Failure(BAD_REPLY, detail))

    async def run_blocking(self, fn: Callable[..., M], *args: Any) -> M:
        """Run ``fn(*args)`` in a worker thread; the actor keeps serving meanwhile.
        If the actor is cancelled the thread is abandoned (it cannot be interrupted),
        so long work should check a flag of its own to stop early."""
        return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)

    async def wait_registered(self) -> None:
        """Return once the broker has welcomed this actor (its first registration)."""
        await self._registered.wait()

    def stop(self, reason: str = "") -> None:
        """Leave the serve loop cleanly (teardown runs)."""
        self.stop_reason = reason
        if self._scope is not None:
            self._scope.cancel()

    # -- lifecycle -------------------------------------------------------------------

    async def run(
        self,
        endpoint: str,
        *,
        context: zmq.Context | None = None,
        curve: CurveClient | None = None,
        routing_id: bytes = b"",
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Connect, register, serve until stopped or cancelled, then tear down.
        ``routing_id``: the head-side id the broker minted for this connection
        (:meth:`runtime.broker.Broker.local_identity`); empty for every other actor."""
        ctx = context or zmq.Context.instance()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        # Queue deep rather than drop: messages are jobs and replies, not samples.
        sock.setsockopt(zmq.SNDHWM, 100_000)
        sock.setsockopt(zmq.RCVHWM, 100_000)
        sock.setsockopt(zmq.MAXMSGSIZE, wire_cap(self.max_frame_bytes))
        if routing_id:
            sock.setsockopt(zmq.ROUTING_ID, routing_id)
        monitor = None
        if curve is not None:
            curve.apply(sock)
        if curve is not None or endpoint.startswith("tcp://"):
            # A refused key (or none where the head demands one: every tcp endpoint
            # does) shows only as a failed handshake: watch for it and fail fast instead
            # of waiting for a broker that will never answer.
            monitor = TrioSocket(sock.get_monitor_socket(HANDSHAKE_FAILURES), self._on_monitor)
        self._keyless = curve is None
        sock.connect(endpoint)
        self._sock = TrioSocket(sock, self._on_frames)
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                self._nursery = nursery
                nursery.start_soon(self._sock.run)
                if monitor is not None:
                    nursery.start_soon(self._watch_handshakes, monitor)
                # Set up before registering: the broker hands work only to ready actors.
                await self.setup()
                await self._register()
                self._bind()
                log.info("actor_started", pid=os.getpid(), device=self.device)
                nursery.start_soon(self._heartbeat)
                if self.forwarder is not None:
                    nursery.start_soon(self.forwarder.run, self)
                task_status.started()
                self._ready = True  # from now on, _on_frames dispatches to handlers
                early, self._early = self._early, []
                for env, body in early:
                    self._dispatch(env, body)
            if self._refused is not None:
                raise self._refused
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await self.teardown()
                finally:
                    self._rejections.flush()
                    log.info("actor_stopped", reason=self.stop_reason or "cancelled")
                    sock.close(linger=self._last_events(sock))

    def _last_events(self, sock: zmq.Socket) -> int:
        """Send what the forwarder still holds as one last batch (a tell: no answer can
        be read any more) and say locally what never went; the linger for closing."""
        if self.forwarder is None:
            return 0
        batch = self.forwarder.final_batch()
        linger = 0
        if batch is not None:
            env = Envelope(TELL, self._next_id(), BROKER, kind=type(batch).__message_kind__)
            try:
                send_frames(sock, [encode_envelope(env), encode(batch)])
                linger = LAST_EVENTS_LINGER_MS
            except zmq.ZMQError:
                pass  # a full queue: the head is not reading; the local log has them
        self.forwarder.report_unsent()
        return linger

    async def _watch_handshakes(self, monitor: TrioSocket) -> None:
        try:
            await monitor.run()
        finally:
            monitor.sock.close(linger=0)

    def _on_monitor(self, frames: list[bytes]) -> None:
        event = zmq.utils.monitor.parse_monitor_message(frames)
        reason = {
            zmq.EVENT_HANDSHAKE_FAILED_AUTH: "the head refused our CURVE key",
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "the CURVE handshake failed (wrong server key?)",
        }.get(event["event"], "the connection handshake failed")
        if event.get("value") == MECHANISM_MISMATCH:
            reason = (
                "the head demands CURVE keys and we have none"
                if self._keyless
                else ("the head does not use CURVE at this endpoint")
            )
        log.error("handshake_failed", reason=reason, endpoint=str(event.get("endpoint", "")))
        self._refused = ActorRefused(
            f"{reason} at {event.get('endpoint', b'').decode(errors='replace')}: pass --keys "
            "with the head's server.key and a client key in its authorized/ folder (a head "
            "listening on loopback without keys_dir made them in RUN_DIR/keys: pass --keys "
            "RUN_DIR/keys or --run-dir RUN_DIR)"
        )
        self.stop("handshake_failed")

    async def _register(self) -> None:
        mine = provenance.current()
        hello = Register(
            role=self.role,
            name=self.requested_name,
            capacity=self.capacity,
            device=self.device,
            pid=os.getpid(),
            host=socket.gethostname(),
            version=mine.version,
            source_hash=mine.source_hash,
            allow_mismatch=self.allow_version_mismatch,
            run_id=self.join_run,
        )
        while True:
            try:
                reply = await self.ask(BROKER, hello, timeout=REGISTER_RETRY_S)
            except trio.TooSlowError:
                log.info("broker_unreachable", retry_s=REGISTER_RETRY_S, role=self.role)
                continue
            except RemoteFailure as exc:
                raise ActorRefused(exc.failure.detail or exc.failure.reason) from None
            if isinstance(reply, Registered):
                if self.join_run and reply.run_id != self.join_run:
                    # A head that did not check (it predates Register.run_id).
                    raise ActorRefused(
                        f"the head serves run {reply.run_id!r}, not {self.join_run!r}"
                    )
                self.actor_id = reply.actor_id
                self.run_id = reply.run_id
                self.heartbeat_interval = reply.heartbeat_interval
                self._registered.set()
                return

    async def _heartbeat(self) -> None:
        while True:
            await trio.sleep(self.heartbeat_interval)
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                # Our head died without telling us (kill -9): do not linger as an orphan.
                self.stop("head_gone")
                return
            self.tell(BROKER, Heartbeat(self.inflight))
            self._rejections.tick()  # a flood's summary comes within a window

    async def _reregister(self) -> None:
        if not self._registered.is_set():
            return  # a registration is already under way
        self._registered = trio.Event()
        log.warning("broker_forgot_us")
        await self._register()

    async def _handle(self, work: Awaitable[Any], env: Envelope) -> None:
        self._bind()  # this task was started from the socket's task
        if env.mode != ASK:
            try:
                await work
            except Exception as exc:
                self._failed(env, exc)
            return
        key = (env.frm, env.id)
        self.inflight += 1
        # Registered by _dispatch before this task started, so a redelivery that came
        # in between already saw it.
        scope = self._running.setdefault(key, trio.CancelScope())
        try:
            with scope:
                result = await work
                self._reply(env, result if result is not None else Failure("no_reply"))
            if scope.cancelled_caught:
                log.info("job_cancelled", kind=env.kind, frm=env.frm)
                # Not kept for a redelivery: a job stopped at its deadline may be handed
                # to this actor again, and must then run, not get this answer.
                stopped = Failure("cancelled", f"{self.actor_id} stopped it on request")
                self._reply(env, stopped, keep=False)
        except Exception as exc:
            self._failed(env, exc)
        finally:
            self.inflight -= 1
            self._running.pop(key, None)

    def _failed(self, env: Envelope, exc: Exception) -> None:
        log.error("handler_failed", kind=env.kind, frm=env.frm, exc_info=exc)
        if env.mode == ASK:
            # What went wrong, not where: the traceback (file paths, code lines) stays in
            # this actor's events; a peer that provoked the error learns only its kind.
            self._reply(env, Failure("handler_error", _summary(exc)))

    # -- plumbing --------------------------------------------------------------------

    def _on_frames(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            self._rejections("broker", "bad_frames", detail=str(len(frames)))
            return
        try:
            env = decode_envelope(frames[0])
        except DecodeError as exc:
            self._rejections("broker", exc.reason, detail=exc.detail)
            return
        if env.mode == REPLY:
            pending = self._pending.get(env.re)
            if pending is not None:
                pending.env, pending.body = env, frames[1]
                pending.event.set()
            return
        if not self._ready:
            # Work that arrives while setup() runs waits for it, in order.
            if len(self._early) < EARLY_MAIL_LIMIT:
                self._early.append((env, frames[1]))
            elif env.mode == ASK:
                self._reply(env, Failure("overloaded", f"{self.actor_id} is still starting"))
            return
        self._dispatch(env, frames[1])

    def _dispatch(self, env: Envelope, body: bytes) -> None:
        """Decode one message and start its handler (the mailbox is the nursery)."""
        try:
            msg = decode(body, self.max_frame_bytes)
        except DecodeError as exc:
            self._rejections(env.frm, exc.reason, detail=exc.detail)
            if env.mode == ASK:
                self._reply(env, Failure("bad_message", str(exc)))
            return
        if type(msg).__message_kind__ != env.kind:
            # The broker decides who may send what by the envelope's kind: a body of
            # another kind would slip past that check.
            self._rejections(env.frm, "kind_mismatch", kind=env.kind)
            if env.mode == ASK:
                self._reply(env, Failure("bad_message", f"{env.kind} envelope, other body"))
            return
        if type(msg) in RUNTIME_KINDS and self._runtime_message(msg, env):
            return
        if env.mode == ASK:
            key = (env.frm, env.id)
            if (key in self._running or key in self._answered) and self._redelivered(env):
                return
        name = self._handlers.get(type(msg))
        if name is None:
            log.warning("message_unhandled", kind=env.kind, frm=env.frm)
            if env.mode == ASK:
                self._reply(env, Failure("no_handler", f"{self.role} does not handle {env.kind}"))
            return
        try:
            result = getattr(self, name)(msg, env)
        except Exception as exc:  # a plain (non-async) handler failed
            self._failed(env, exc)
            return
        if result is not None and not hasattr(result, "__message_kind__"):
            # Not a record (the common answer) nor None: an awaitable to finish in a task?
            if inspect.isawaitable(result):
                if env.mode == ASK:
                    self._running[(env.frm, env.id)] = trio.CancelScope()
                self._nursery.start_soon(self._handle, result, env)
                return
        if env.mode == ASK:
            self._reply(env, result if result is not None else Failure("no_reply"))

    def _runtime_message(self, msg: Any, env: Envelope) -> bool:
        """Act on a message the runtime handles itself (:data:`RUNTIME_KINDS`); True when
        it was one of those uses and nothing else is to be done with it."""
        if isinstance(msg, Shutdown):
            self.stop(msg.reason or "shutdown")
            return True
        if isinstance(msg, Cancel):
            scope = self._running.get((env.frm, msg.job))
            if scope is not None:
                scope.cancel()
            return True
        if isinstance(msg, Failure) and env.frm == BROKER:
            if msg.reason == "not_registered":
                self._nursery.start_soon(self._reregister)
                return True
            if msg.reason in FATAL_FROM_BROKER:
                log.error("actor_refused", reason=msg.reason, detail=msg.detail)
                self._refused = ActorRefused(msg.detail or msg.reason)
                self.stop(msg.reason)
                return True
        return False

    def _redelivered(self, env: Envelope) -> bool:
        """True when this ask is a job the broker already gave us (it presumed us dead
        and handed the job out again): a running one is answered by its handler when it
        ends, a finished one gets its recorded reply again; neither runs twice."""
        key = (env.frm, env.id)
        running = key in self._running
        answered = self._answered.get(key)
        if not running and answered is None:
            return False
        log.info("job_redelivered", job=env.id, kind=env.kind, frm=env.frm, running=running)
        if answered is not None and not running:
            kind, body = answered
            back = Envelope(REPLY, self._next_id(), env.frm, "", env.id, kind=kind)
            self._sock.send([encode_envelope(back), body])
        return True

    def _reply(self, env: Envelope, msg: Any, *, keep: bool = True) -> None:
        back = Envelope(REPLY, self._next_id(), env.frm, "", env.id)
        body = self._send(back, msg)
        if not keep:
            return
        key = (env.frm, env.id)
        self._answered[key] = (back.kind, body)
        self._answered_bytes += len(body)
        while len(self._answered) > ANSWERED_KEEP or self._answered_bytes > ANSWERED_KEEP_BYTES:
            _, (_, old) = self._answered.popitem(last=False)
            self._answered_bytes -= len(old)

    def _send(self, env: Envelope, msg: Any) -> bytes:
        assert self._sock is not None, "the actor is not running: call run() first"
        body = encode(msg)
        if len(body) > self.max_frame_bytes:
            detail = f"{type(msg).__message_kind__} of {len(body)} bytes > {self.max_frame_bytes}"
            if env.mode != REPLY:
                raise ValueError(f"message too large: {detail}; raise [runtime] max_frame_bytes")
            log.error("reply_too_large", detail=detail)
            msg = Failure("oversize", detail + "; raise [runtime] max_frame_bytes")
            body = encode(msg)
        env.kind = type(msg).__message_kind__
        self._sock.send([encode_envelope(env), body])
        return body

    def _bind(self) -> None:
        """Name this actor (and its run, once known) in every event of this task."""
        fields = {"actor": self.actor_id, "role": self.role}
        if self.run_id:
            fields["run"] = self.run_id
        bind(**fields)

    def _sock_closed(self) -> bool:
        return self._sock is None or self._sock._closed

    def _next_id(self) -> str:
        # The nonce keeps ids unique across restarts of an actor with the same name.
        return f"{self.actor_id or os.getpid()}.{self._nonce}.{next(self._ids)}"

    # -- handlers every actor has ----------------------------------------------------

    @handles(Probe)
    def on_probe(self, msg: Probe, env: Envelope) -> Any:
        if msg.crash:
            if os.environ.get(TEST_HOOKS_ENV) != "1":
                raise PermissionError(f"crash probes need {TEST_HOOKS_ENV}=1 (tests only)")
            log.warning("probe_crash_requested", frm=env.frm)
            os.kill(os.getpid(), signal.SIGKILL)
        if msg.log_events and os.environ.get(TEST_HOOKS_ENV) != "1":
            raise PermissionError(f"event-logging probes need {TEST_HOOKS_ENV}=1 (tests only)")
        if msg.hold_s > 0 or msg.log_events:
            return self._hold(msg)
        return ProbeReply(msg.seq, msg.payload, self.actor_id)

    async def _hold(self, msg: Probe) -> ProbeReply:
        await self.run_blocking(_hold, msg.hold_s, msg.log_events, msg.seq)
        return ProbeReply(msg.seq, msg.payload, self.actor_id)


def _hold(hold_s: float, count: int, seq: int) -> None:
    """A probe's blocking work: ``count`` events spread over ``hold_s`` seconds."""
    if not count:
        time.sleep(hold_s)
        return
    start = time.monotonic()
    for i in range(count):
        log.info("probe_event", seq=seq, i=i)
        if hold_s > 0:
            time.sleep(max(0.0, start + hold_s * (i + 1) / count - time.monotonic()))


def wire_cap(max_frame_bytes: int) -> int:
    """ZeroMQ's own per-frame limit: twice ours, so a moderately oversize message still
    reaches code that answers it with a failure, while a hostile giant is cut off (the
    peer is disconnected) before it is buffered whole."""
    return 2 * max_frame_bytes + 4096


def _summary(exc: BaseException, limit: int = 300) -> str:
    """An exception as a peer may see it: its type and the first line of its message.
    A group (a nursery's) is told by the error inside it, as "ExceptionGroup: Exceptions
    from Trio nursery" would hide what went wrong (a full disk, say) from the asker."""
    exc = _leaf(exc)
    first = (str(exc).strip().splitlines() or [""])[0]
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return text + "; traceback in the answering actor's events"


def _leaf(exc: BaseException) -> BaseException:
    """The first error inside nested groups that is not a cancellation; the group itself
    when it holds nothing else."""
    stack = [exc]
    while stack:
        e = stack.pop(0)
        if isinstance(e, BaseExceptionGroup):
            stack[:0] = e.exceptions
        elif not isinstance(e, trio.Cancelled):
            return e
    return exc


# The base class's own handlers (``__init_subclass__`` only runs for subclasses).
Actor._handlers = {Probe: "on_probe"}
