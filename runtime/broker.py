"""The broker: one ROUTER socket in the head process that routes every message.

Actors connect with DEALER sockets and register a role. An ASK addressed to ``@role`` is
a *job*: it goes to an actor of that role with spare capacity, waits in the role's queue
when none has any (including before any such actor exists), and is taken back and
handed to another actor when its actor dies or stops heartbeating. A job that has been
handed out ``max_job_tries`` times without an answer fails with a ``control.failure``
reply to its requester. Only the first reply to a job is forwarded, so a requester
never sees a job answered twice. A job addressed ``@role/actor-id``
(:data:`messages.envelope.PREFER`) waits in the role's queue like any other but goes to
that actor whenever it has room: a freed actor takes the queued jobs that prefer it
first, and one that prefers a busy actor goes to an idle one rather than wait.

**Deadlines.** An ask may carry ``deadline_s`` in its envelope (:class:`Actor.ask
<runtime.actor.Actor.ask>` sets one derived from the request, :mod:`runtime.deadlines`):
how long one actor may hold the job. The clock starts when the job is handed out (queue
time does not count) and each try gets the full time. When it passes, the broker treats
it as that actor's death *for that job only*: the actor is told to stop it
(``control.cancel``), the job goes back to the front of its queue with its try counted
(event ``job_deadline_passed``), and after ``max_job_tries`` it fails with a
``control.failure`` of reason ``deadline``. The actor's slot stays taken until it
answers (a live one answers the cancel at once), so the job goes to another actor if
there is one, and is never handed back to an actor still holding an earlier try of it;
an actor that has not answered ``heartbeat_timeout`` seconds after its deadline is
declared lost (``deadline_missed``: its other jobs move too, and the head kills it if it
started it). A late answer is dropped and logged (``late_reply_dropped``), never
forwarded: the requester sees one answer per job. Deadlines are checked every heartbeat
interval, so they fire up to one interval late.

Silence counts only while the broker itself listens: after a pause of the head (a clock
jump between its own ticks: SIGSTOP, a VM pause) every actor gets a fresh heartbeat
window, and the head's in-process actors are never reaped for silence.

The broker reads envelopes only; bodies pass through untouched (their addressee
validates them), except for messages addressed to the broker itself (an attached actor's
events among them: :mod:`runtime.forward`). It does check who may send what
(:data:`SENDER_ROLES`, :data:`HEAD_ONLY_PREFIX`, :data:`HEAD_ONLY_KINDS`): a peer's role is
the one it registered, its name is bound to its connection until that connection is
declared dead, and a message its role may not send is refused (``message_refused``),
never delivered.

**Keys.** With CURVE clients (``BrokerSettings.key_allowed``), every message of an
attached connection carries the user id ZAP gave it (``NAME/KEY``, ``runtime.security``),
read by the socket (``runtime.zmqtrio``) except from connections known to have none (the
head's own and its ipc actors). A peer is bound to the key it registered with: a message
under its routing id with another key is refused (``key_mismatch``), so no client can
pass for another key's actor. When the head's authenticator sees ``authorized/`` change,
:meth:`Broker.check_keys` disconnects every actor whose key is no longer there (or was
replaced): event ``actor_revoked`` with the key's name, its jobs re-queued as for a dead
actor, a ``control.failure`` of reason ``key_revoked`` sent to it (the attach process
exits with status 2 saying so), and every later frame from a connection with that key
refused (``key_revoked`` again) until the key is authorized anew.

**Versions.** With ``BrokerSettings.provenance`` (the head sets its own), a Register
must state the same source hash (``runtime.provenance``): another is refused
(``registration_refused`` with reason ``version_mismatch`` and both versions and hashes),
and the actor is told both and what to do; one registered with ``allow_mismatch`` is
accepted with a ``version_mismatch_allowed`` warning.
"""

from __future__ import annotations

import itertools
import secrets
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import trio
import zmq

from messages import (
    ASK,
    BROKER,
    DEFAULT_MAX_FRAME,
    REPLY,
    ROLE_PREFIX,
    TELL,
    DecodeError,
    Envelope,
    decode,
    decode_envelope,
    encode,
    encode_envelope,
    preference,
)
from messages.control import (
    ActorInfo,
    BadReply,
    Cancel,
    Failure,
    Heartbeat,
    Register,
    Registered,
    Shutdown,
    StatusQuery,
    StatusReply,
)
from messages.events import EventBatch
from runtime.events import log
from runtime.forward import EventIntake
from runtime.provenance import Provenance
from runtime.ratelimit import EventLimiter
from runtime.security import key_name_of
from runtime.zmqtrio import TrioSocket

HEAD_ROLE = "head"
"""The head's own client; only a connection the head made itself may register it."""
HEAD_SIDE_ROLES = frozenset({HEAD_ROLE, "artifacts"})
"""Roles only a head-side connection may register: the head's client, and its artifact
store (a peer serving ``@artifacts`` would answer every worker's fetch)."""
RESERVED_NAMES = frozenset({BROKER, ""})
"""Names no actor may take: the broker's own address would let it forge ``frm``."""
SENDER_ROLES: dict[str, frozenset[str]] = {
    "train.result": frozenset({"learner"}),
    "train.progress": frozenset({"learner"}),
    "rollout.result": frozenset({"environment"}),
    # The head's artifact store answers; learners put checkpoints and TensorBoard packs.
    "artifact.chunk": frozenset({"artifacts"}),
    "artifact.ack": frozenset({"artifacts"}),
    "artifact.latest_reply": frozenset({"artifacts"}),
    "artifact.put": frozenset({"learner"}),
    "artifact.reached": frozenset({"learner"}),
}
"""Kinds only some roles may send (in any mode, replies included): a result is believed
by whoever receives it, so it must come from the role that makes it."""
OPEN_CONTROL = frozenset({"control.probe"})
"""The one control kind any peer may send to another actor unasked: a liveness probe.
Replies (a probe's echo, a failure) pass too, as answers to jobs the peer holds."""
HEAD_ONLY_PREFIX = "control."
"""Every other control kind (``control.shutdown``, a ``control.failure`` that makes an
actor register again, ``control.cancel`` sent directly...) reaches an actor only from
the head's side: the broker itself or a connection the head made
(:meth:`Broker.local_identity`)."""
HEAD_ONLY_KINDS = frozenset({EventBatch.__message_kind__})
"""Kinds only the head takes (addressed to ``broker``, which answers for it): sent to any
actor they are refused. An attached actor's events go into the run's log, nowhere else."""
LOCAL_IDENTITY_BYTES = 16
"""Random bytes in a head-side routing id: unguessable by another process (ZeroMQ keeps
the first connection that claims an id, and these are claimed before any actor starts)."""


HOST_CHARS = 255
"""The longest host name kept for a peer (a DNS name's limit)."""
BAD_REPLIES = "bad_replies"
"""Why a peer that sent ``bad_reply_limit`` wrong replies was dropped."""
LOST_REASONS = frozenset({"heartbeat_missed", "deadline_missed", BAD_REPLIES})
"""Why a peer may be declared lost while its process still runs: the head kills a
process of its own then (:attr:`BrokerSettings.on_lost`), so its work cannot finish twice
(and, for wrong replies, so a restart is charged to it)."""
ANSWERED_KEPT = 4096
"""Recent replies remembered by job, so a requester's :class:`BadReply` is charged to
the actor that really sent the reply (and to no other)."""
CLEAN_EXIT = "exit status 0"
"""How the supervisor describes a child that exited by itself with status 0."""


@dataclass
class BrokerSettings:
    heartbeat_interval: float = 1.0
    heartbeat_timeout: float = 5.0
    max_job_tries: int = 3
    bad_reply_limit: int = 3
    """Wrong replies that drop an actor (:class:`BadReply`)."""
    max_frame_bytes: int = DEFAULT_MAX_FRAME
    run_id: str = ""
    on_lost: Callable[[str, str], None] | None = None
    """Called with (actor id, reason) when an actor is presumed dead; the head uses it
    to kill a local process that stopped heartbeating, so its work cannot run twice."""
    key_allowed: Callable[[str], bool] | None = None
    """Whether a connection's user id (``NAME/KEY``) is still authorized; None: no CURVE
    clients, and user ids are not read at all."""
    provenance: Provenance | None = None
    """The head's version and source hash, which registering actors must match; None:
    no check (a broker outside a head: tests, benchmarks)."""
    remote_events_per_s: float = 0.0
    """Most events per second written from one attached actor's forwarded log
    (``[runtime] remote_events_per_s``); 0: no limit."""


@dataclass(eq=False)
class Peer:
    identity: bytes
    actor_id: str
    role: str
    capacity: int
    device: str
    pid: int
    last_seen: float
    inflight: dict[tuple[str, str], Job] = field(default_factory=dict)
    key: str = ""
    """The user id of the CURVE key it connected with (``NAME/KEY``); '' for ipc/inproc."""
    host: str = ""
    """Its host name, as it registered (cut to ``HOST_CHARS``): written with its
    forwarded events."""
    local: bool = False
    """Runs inside the head process (as trio tasks): it cannot stall while the broker
    runs, so it is never reaped for silence."""
    stuck: dict[tuple[str, str], float] = field(default_factory=dict)
    """Jobs whose deadline passed while it held them, by key, with when: each keeps a
    slot taken until the actor answers (its answer is then dropped)."""

    @property
    def free(self) -> int:
        return self.capacity - len(self.inflight) - len(self.stuck)


@dataclass(eq=False, slots=True)
class Job:
    key: tuple[str, str]
    """(requester id, message id): unique even if two requesters pick the same id."""
    queue: str
    """Where it waits: ``@role`` or an actor id."""
    header: bytes
    body: bytes
    attempts: int = 0
    assigned: Peer | None = None
    cancelled: bool = False
    """Its requester cancelled it while it ran: never hand it out again."""
    deadline_s: float = 0.0
    """Seconds one actor may hold it (0: no limit); from its envelope."""
    expires: float = 0.0
    """When the try now running passes its deadline (broker clock); 0: never."""
    expired_on: set[str] = field(default_factory=set)
    """Actors that held it past its deadline: while its role has others, it goes to
    those."""
    prefer: str = ""
    """The actor of its role it goes to when that one has room (``@role/actor-id``,
    :data:`messages.envelope.PREFER`); '' for none."""


class Broker:
    def __init__(self, settings: BrokerSettings, sock: zmq.Socket) -> None:
        self.settings = settings
        self.plain: set[bytes] = set()
        """Routing ids whose messages carry no user id to read: the head's own
        connections and actors registered without a key (ipc). Any other connection's
        user id is read with every message (when there are CURVE clients)."""
        user_ids = self.plain if settings.key_allowed is not None else None
        self.sock = TrioSocket(sock, self._on_frames, user_ids=user_ids)
        self.peers: dict[str, Peer] = {}
        self.by_identity: dict[bytes, Peer] = {}
        self.roles: dict[str, list[Peer]] = {}
        self.queues: dict[str, deque[Job]] = {}
        self.jobs: dict[tuple[str, str], Job] = {}
        self.completed = 0
        self.failed = 0
        self.requeued = 0
        self.rejected = 0
        self.refused = 0
        self.trusted: set[bytes] = set()
        """Routing ids of the head's own connections (:meth:`local_identity`)."""
        self._names = itertools.count()
        self.answered: OrderedDict[tuple[str, str], str] = OrderedDict()
        """(requester, job id) → the actor whose reply was delivered, latest last."""
        self.bad_replies: dict[str, int] = {}
        """Wrong replies charged per actor id since it registered."""
        self.expired = 0
        """Tries taken back at their deadline."""
        # Refusals are logged whole up to a limit, then counted (runtime/ratelimit.py):
        # a flood of junk frames must not fill the disk with events.
        self._rejections = EventLimiter("message_rejected", now=lambda: self._now())
        self._refusals = EventLimiter(
            "message_refused", ("sender", "kind"), now=lambda: self._now()
        )
        self._registrations = EventLimiter(
            "registration_refused", ("actor_id", "reason"), now=lambda: self._now()
        )
        self._watchers: list[tuple[str, int, trio.Event]] = []
        self._now = trio.current_time
        self.intake = EventIntake(settings.remote_events_per_s)
        """Writes attached actors' events (``events.batch``) to the run's events file."""

    # -- running -------------------------------------------------------------------

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.sock.run)
                nursery.start_soon(self._reap_silent_peers)
                task_status.started()
        finally:
            self.flush_limited()

    def flush_limited(self) -> None:
        """Write the summaries of refusals counted but not logged whole (at every window's
        end, and once more when the broker stops, so the counts are complete)."""
        for limiter in (self._rejections, self._refusals, self._registrations):
            limiter.flush()
        self.intake.flush_limited()

    async def wait_for_last_events(self, timeout: float) -> None:
        """Return once every attached actor that forwards its events and is still
        registered has sent its last batch (it does as it stops), or ``timeout`` seconds
        passed: the run's events file then holds what they logged up to their end."""
        with trio.move_on_after(timeout):
            while any(
                name in self.peers and name not in self.intake.finished
                for name in self.intake.senders
            ):
                await trio.sleep(0.02)

    async def _reap_silent_peers(self) -> None:
        interval, timeout = self.settings.heartbeat_interval, self.settings.heartbeat_timeout
        last_tick = self._now()
        while True:
            await trio.sleep(interval)
            now = self._now()
            for limiter in (self._rejections, self._refusals, self._registrations):
                limiter.tick()
            late, last_tick = now - last_tick - interval, now
            if late > timeout:
                # The head itself was stopped (SIGSTOP, a VM pause, a blocked write): no
                # peer could be heard meanwhile, and their heartbeats still wait unread in
                # the socket. Give every peer a fresh window instead of declaring deaths.
                log.warning("head_paused", paused_s=round(late, 3), actors=len(self.peers))
                for peer in self.peers.values():
                    peer.last_seen = now
                    peer.stuck = dict.fromkeys(peer.stuck, now)
                self._shift_deadlines(late)
                continue
            if late > interval:
                # A shorter stall (a tick or more missed): the broker could not listen
                # meanwhile either, so that time counts against no one.
                for peer in self.peers.values():
                    peer.last_seen = min(now, peer.last_seen + late)
                    peer.stuck = {k: min(now, t + late) for k, t in peer.stuck.items()}
                self._shift_deadlines(late)
            self.expire_jobs(now)
            deadline = now - timeout
            for peer in [p for p in self.peers.values() if p.last_seen < deadline]:
                if not peer.local:
                    self.remove(peer, "heartbeat_missed")
            for peer in [p for p in self.peers.values() if p.stuck and not p.local]:
                if min(peer.stuck.values()) < deadline:
                    # Told to stop a job a heartbeat timeout ago and still silent about
                    # it: a live actor answers a cancel at once.
                    self.remove(peer, "deadline_missed")

    def _shift_deadlines(self, late: float) -> None:
        """Move every running try's deadline ``late`` seconds on: time the broker could
        not listen counts against no one."""
        for peer in self.peers.values():
            for job in peer.inflight.values():
                if job.expires:
                    job.expires += late

    def expire_jobs(self, now: float) -> None:
        """Take back every job whose try has outlived its deadline (called each tick;
        a scan of the jobs in flight, which the actors' capacities keep few)."""
        for peer in list(self.peers.values()):
            late = [j for j in peer.inflight.values() if j.expires and j.expires <= now]
            for job in late:
                if job.assigned is peer:  # (an earlier expiry's dispatch may have moved it)
                    self._expire(job, peer, now)

    async def wait_for_actors(self, role: str, count: int) -> None:
        """Return once ``count`` actors of ``role`` are registered."""
        while len(self.roles.get(role, ())) < count:
            event = trio.Event()
            self._watchers.append((role, count, event))
            await event.wait()

    def shutdown_all(self, reason: str, *, keep: frozenset[str] = frozenset({"head"})) -> None:
        """Tell every actor to exit, except the ids in ``keep`` (the head's own client)."""
        for peer in list(self.peers.values()):
            if peer.actor_id in keep:
                continue
            self._send(peer.identity, Envelope(TELL, "", peer.actor_id, BROKER), Shutdown(reason))

    # -- inbound -------------------------------------------------------------------

    def _on_frames(self, frames: list[bytes]) -> None:
        if len(frames) != 3:
            return self._reject(frames[0] if frames else b"", "bad_frames", f"{len(frames)}")
        identity, header, body = frames
        try:
            env = decode_envelope(header)
        except DecodeError as exc:
            return self._reject(identity, exc.reason, exc.detail)
        peer = self.by_identity.get(identity)
        cap = self.settings.max_frame_bytes
        if len(body) > cap:
            self._reject(identity, "oversize", f"{env.kind}: {len(body)} bytes > {cap}")
            if peer is None or env.mode == TELL:
                return
            # Answer instead of dropping, so no one waits forever: an oversize reply
            # completes its job with a failure, an oversize ask is refused.
            failure = Failure(
                "oversize", f"{env.kind} of {len(body)} bytes > max_frame_bytes {cap}"
            )
            if env.mode == ASK:
                back = Envelope(REPLY, "", peer.actor_id, BROKER, env.id)
                return self._send(identity, back, failure)
            body, env.kind = encode(failure), type(failure).__message_kind__
        if peer is None:
            return self._from_stranger(identity, env, body)
        if self.sock.user_id is not None and self.sock.user_id != peer.key:
            # Another connection under this one's routing id (a client may pick its
            # own): it holds another key, or none, and may not act as this peer.
            return self._reject(identity, "key_mismatch", f"{env.kind} as {peer.actor_id}")
        peer.last_seen = self._now()
        env.frm = peer.actor_id
        if env.to == BROKER:
            return self._to_broker(peer, env, body)
        refusal = self._refusal(peer, env)
        if refusal:
            return self._refuse(peer, env, refusal)
        if env.mode == REPLY:
            return self._reply(peer, env, body)
        if env.mode == ASK:
            return self._job(env, body)
        self._tell(env, body)

    def _reject(self, identity: bytes, reason: str, detail: str = "") -> None:
        self.rejected += 1
        self._rejections(identity.hex(), reason, detail=detail[:200])

    def _from_stranger(self, identity: bytes, env: Envelope, body: bytes) -> None:
        key = self.sock.user_id or ""
        if key and not self.settings.key_allowed(key):
            # Its key was revoked after its handshake: nothing from it counts.
            self._reject(identity, "key_revoked", f"{env.kind} with key {key_name_of(key)!r}")
            failure = Failure("key_revoked", _revoked_detail(key))
            if env.mode == ASK:
                back = Envelope(REPLY, "", "", BROKER, env.id)
            else:
                back = Envelope(TELL, "", "", BROKER)
            return self._send(identity, back, failure)
        if env.to == BROKER and env.kind == Register.__message_kind__ and env.mode == ASK:
            try:
                msg = decode(body, self.settings.max_frame_bytes)
            except DecodeError as exc:
                return self._reject(identity, exc.reason, exc.detail)
            if isinstance(msg, Register):
                return self._register(identity, env, msg, key)
        # Someone we forgot (heartbeats missed) or never knew: tell it to register again.
        self._reject(identity, "not_registered", env.kind)
        self._send(identity, Envelope(TELL, "", "", BROKER), Failure("not_registered"))

    def _to_broker(self, peer: Peer, env: Envelope, body: bytes) -> None:
        if env.kind == Heartbeat.__message_kind__:
            return  # last_seen is already updated; no need to decode
        try:
            msg = decode(body, self.settings.max_frame_bytes)
        except DecodeError as exc:
            return self._reject(peer.identity, exc.reason, exc.detail)
        if isinstance(msg, StatusQuery) and env.mode == ASK:
            reply = Envelope(REPLY, "", env.frm, BROKER, env.id)
            return self._send(peer.identity, reply, self.status())
        if isinstance(msg, Register):
            return self._register(peer.identity, env, msg, peer.key)
        if isinstance(msg, Cancel):
            return self._cancel(peer, msg.job)
        if isinstance(msg, BadReply):
            return self._charge(peer, msg)
        if isinstance(msg, EventBatch):
            try:
                taken = self.intake.take(
                    peer.actor_id, peer.role, msg, self.settings.run_id, host=peer.host,
                    key=key_name_of(peer.key) if peer.key else "",
                )  # fmt: skip
            except Exception as exc:  # a peer's batch must never end the broker
                return self._reject(peer.identity, "bad_events", f"{type(exc).__name__}: {exc}")
            if env.mode == ASK:
                self._send(peer.identity, Envelope(REPLY, "", env.frm, BROKER, env.id), taken)
            else:
                self.intake.finished.add(peer.actor_id)  # the tell an actor sends last
            return
        self._reject(peer.identity, "not_for_broker", env.kind)

    # -- who may do what --------------------------------------------------------------

    def local_identity(self) -> bytes:
        """A routing id for a connection the head makes itself (its client, its
        in-process agents): set it as the DEALER's ``ROUTING_ID`` before connecting.
        Only such a connection may register the ``head`` role or send control messages
        to actors."""
        identity = b"head-side-" + secrets.token_bytes(LOCAL_IDENTITY_BYTES)
        self.trust(identity)
        return identity

    def trust(self, identity: bytes) -> None:
        """Treat an existing routing id as head-side (tests that script raw frames)."""
        self.trusted.add(identity)
        self.plain.add(identity)

    def _refusal(self, peer: Peer, env: Envelope) -> str:
        """Why ``peer`` may not send ``env`` to another actor; empty when it may."""
        allowed = SENDER_ROLES.get(env.kind)
        if allowed is not None and peer.role not in allowed:
            return f"only {'/'.join(sorted(allowed))} actors send {env.kind}"
        if env.kind in HEAD_ONLY_KINDS:
            return f"{env.kind} goes to the head ({BROKER}) only"
        if (
            env.kind.startswith(HEAD_ONLY_PREFIX)
            and env.kind not in OPEN_CONTROL
            and env.mode != REPLY
            and peer.identity not in self.trusted
        ):
            return f"only the head sends {env.kind} to actors"
        return ""

    def _refuse(self, peer: Peer, env: Envelope, detail: str) -> None:
        """Log a refused message and answer where someone waits: an ask gets the
        failure back, a reply completes its job with the failure (never delivered)."""
        self.refused += 1
        self._refusals(peer.actor_id, env.kind, role=peer.role, to=env.to, detail=detail)
        failure = Failure("refused", detail)
        if env.mode == ASK:
            back = Envelope(REPLY, "", peer.actor_id, BROKER, env.id)
            self._send(peer.identity, back, failure)
        elif env.mode == REPLY:
            env.kind = type(failure).__message_kind__
            self._reply(peer, env, encode(failure))

    def _name_refusal(self, identity: bytes, name: str, role: str) -> Failure | None:
        """Why ``identity`` may not register ``name`` as ``role``; None when it may. A
        name stays bound to the connection that registered it until that one exits or
        is declared dead by the heartbeat timeout: a quiet actor is not a dead one."""
        if name in RESERVED_NAMES or name.startswith(ROLE_PREFIX):
            return Failure("name_reserved", f"{name!r} is not an actor name; pick another --name")
        if role in HEAD_SIDE_ROLES and identity not in self.trusted:
            return Failure("role_reserved", f"the {role} role is the head's own; pick another role")
        old = self.peers.get(name)
        if old is not None and old.identity != identity:
            detail = (
                f"an actor named {name!r} is attached (its connection holds the name until"
                f" it exits or misses heartbeats for {self.settings.heartbeat_timeout:g} s);"
                " pick another --name"
            )
            return Failure("name_taken", detail)
        return None

    def _run_refusal(self, msg: Register) -> Failure | None:
        """Why an actor that asked for run ``msg.run_id`` may not join this one (a
        worker started for another run found this head on its port); None when it may."""
        if not msg.run_id or msg.run_id == self.settings.run_id:
            return None
        return Failure(
            "wrong_run",
            f"this head serves run {self.settings.run_id!r}, not {msg.run_id!r}: connect to"
            f" the head of run {msg.run_id!r}, or attach with --run-id {self.settings.run_id}",
        )

    # -- registration and death ----------------------------------------------------

    def _version_refusal(self, name: str, msg: Register, key: str = "") -> Failure | None:
        """A Failure when ``msg`` states another source tree than the head's (and did not
        allow it); a warning when it did. None when it may register.

        Only actors attached with a key (over tcp) are refused: a connection without one
        came through the head's private ipc socket, so it is one of the head's own actors
        (restarted after the checkout was edited mid-run, say), which is logged, not
        refused, rather than failing the run."""
        head = self.settings.provenance
        if head is None or msg.source_hash == head.source_hash:
            return None
        actor = Provenance(msg.version or "not stated", msg.source_hash)
        fields = {
            "role": msg.role, "host": msg.host,
            "actor_version": actor.version, "actor_source": msg.source_hash,
            "head_version": head.version, "head_source": head.source_hash,
        }  # fmt: skip
        if msg.allow_mismatch or not key:
            why = "allowed by the actor" if msg.allow_mismatch else "the head's own (ipc) actor"
            log.warning("version_mismatch_allowed", actor_id=name, why=why, **fields)
            return None
        self._registrations(name, "version_mismatch", **fields)
        detail = (
            f"version_mismatch: this actor runs {actor.short()}, the head runs {head.short()}."
            " Update this machine's checkout (or reinstall the package) to the head's"
            " commit, or pass --allow-version-mismatch to attach anyway, knowingly"
        )
        return Failure("version_mismatch", detail)

    def _register(self, identity: bytes, env: Envelope, msg: Register, key: str = "") -> None:
        known = self.by_identity.get(identity)
        if known is not None and known.role == msg.role and msg.name in ("", known.actor_id):
            # The same connection asking again: an actor that waited for a broker sent a
            # Register every few seconds, and ZeroMQ delivers every one it queued once
            # the broker is up. Answer with the same id rather than renaming it each time.
            reply = Envelope(REPLY, "", known.actor_id, BROKER, env.id)
            welcome = Registered(
                known.actor_id, self.settings.heartbeat_interval, self.settings.run_id
            )
            return self._send(identity, reply, welcome)
        name = msg.name or f"{msg.role}-{next(self._names)}"
        refused = self._name_refusal(identity, name, msg.role) or self._run_refusal(msg)
        if refused is not None:
            # Refuse rather than have two connections evict each other (and their jobs).
            self._registrations(name, refused.reason, role=msg.role)
        else:
            refused = self._version_refusal(name, msg, key)
        if refused is not None:
            back = Envelope(REPLY, "", name, BROKER, env.id)
            return self._send(identity, back, refused)
        if identity in self.by_identity:
            self.remove(self.by_identity[identity], "reregistered")
        peer = Peer(
            identity, name, msg.role, max(1, msg.capacity), msg.device, msg.pid, self._now()
        )
        peer.key = key
        peer.host = msg.host[:HOST_CHARS]
        if not key:
            self.plain.add(identity)  # nothing to check in its messages from now on
        # A connection the head made itself (its routing id minted here) runs inside the
        # head: it is never reaped for silence, since a pause of the head silences it and
        # the broker alike.
        peer.local = identity in self.trusted
        self.peers[name] = peer
        self.by_identity[identity] = peer
        self.roles.setdefault(msg.role, []).append(peer)
        log.info(
            "actor_registered",
            actor_id=name,
            role=msg.role,
            capacity=peer.capacity,
            device=msg.device,
            pid=msg.pid,
            host=msg.host,
            key=key_name_of(key),
            version=msg.version,
        )
        reply = Envelope(REPLY, "", name, BROKER, env.id)
        welcome = Registered(name, self.settings.heartbeat_interval, self.settings.run_id)
        self._send(identity, reply, welcome)
        for watcher in [w for w in self._watchers if w[0] == msg.role]:
            if len(self.roles[msg.role]) >= watcher[1]:
                watcher[2].set()
                self._watchers.remove(watcher)
        self._dispatch(peer)

    def actor_exited(self, actor_id: str, reason: str) -> None:
        """The supervisor saw the process exit: take its jobs back now."""
        peer = self.peers.get(actor_id)
        if peer is not None:
            self.remove(peer, reason)

    def _expire(self, job: Job, peer: Peer, now: float) -> None:
        """``job``'s deadline passed while ``peer`` held it: as if ``peer`` had died for
        this job alone (see the module's doc)."""
        self.expired += 1
        del peer.inflight[job.key]
        peer.stuck[job.key] = now
        job.assigned = None
        job.expired_on.add(peer.actor_id)
        requester, job_id = job.key
        log.warning(
            "job_deadline_passed",
            job=job_id,
            actor_id=peer.actor_id,
            queue=job.queue,
            attempts=job.attempts,
            deadline_s=job.deadline_s,
        )
        # Stop the work there; a live actor answers with a `cancelled` failure, which
        # frees its slot (and is dropped: the job is no longer its).
        self._send(peer.identity, Envelope(TELL, "", peer.actor_id, requester), Cancel(job_id))
        if job.cancelled:
            self._fail(job, "cancelled while running; its deadline passed", "cancelled")
        elif job.attempts >= self.settings.max_job_tries:
            detail = (
                f"no answer within {job.deadline_s:g} s in {job.attempts} tries"
                f" (last held by {peer.actor_id})"
            )
            self._fail(job, detail, "deadline", event="job_failed")
        else:
            self.requeued += 1
            log.info("job_requeued", job=job_id, queue=job.queue, attempts=job.attempts)
            self.queues.setdefault(job.queue, deque()).appendleft(job)
            self._dispatch_role(job.queue)

    def _charge(self, requester: Peer, msg: BadReply) -> None:
        """Charge a wrong reply to the actor that sent it (looked up by the requester's
        job, never taken from the accuser's word); drop it at the limit. A remote peer
        may not accuse: with a key of its own it could have honest actors dropped."""
        if requester.key and requester.identity not in self.trusted:
            return self._reject(requester.identity, "not_for_broker", "control.bad_reply")
        sender = self.answered.pop((requester.actor_id, msg.job), None)
        if sender is None:
            log.info("bad_reply_unmatched", by=requester.actor_id, job=msg.job)
            return
        count = self.bad_replies[sender] = self.bad_replies.get(sender, 0) + 1
        limit = self.settings.bad_reply_limit
        log.warning(
            "peer_bad_reply", actor_id=sender, by=requester.actor_id, job=msg.job,
            detail=msg.detail[:300], count=count, limit=limit,
        )  # fmt: skip
        peer = self.peers.get(sender)
        if peer is None or count < limit:
            return
        detail = (
            f"{count} wrong replies (limit {limit}, [runtime] bad_reply_limit); last: "
            f"{msg.detail[:300]}"
        )
        self._send(
            peer.identity, Envelope(TELL, "", peer.actor_id, BROKER), Failure(BAD_REPLIES, detail)
        )
        self.remove(peer, BAD_REPLIES)

    def remove(self, peer: Peer, reason: str) -> None:
        if self.peers.get(peer.actor_id) is not peer:
            return
        del self.peers[peer.actor_id]
        self.bad_replies.pop(peer.actor_id, None)
        self.by_identity.pop(peer.identity, None)
        self.intake.forget(peer.actor_id)
        if peer.identity not in self.trusted:
            self.plain.discard(peer.identity)
        self.roles[peer.role].remove(peer)
        # A clean exit with nothing in hand (a stopped run) loses nothing: the supervisor's
        # actor_process_exited says it already, so this stays out of the way.
        quiet = reason == CLEAN_EXIT and not peer.inflight
        (log.debug if quiet else log.info)(
            "actor_lost", actor_id=peer.actor_id, reason=reason, jobs=len(peer.inflight)
        )
        if reason in LOST_REASONS and self.settings.on_lost is not None:
            self.settings.on_lost(peer.actor_id, reason)
        peer.stuck.clear()  # those jobs moved on already
        for job in peer.inflight.values():
            job.assigned = None
            if job.cancelled:
                self._fail(job, "cancelled while running; its actor was lost", "cancelled")
            elif job.attempts >= self.settings.max_job_tries:
                self._fail(job, f"its actor died {job.attempts} times (last: {reason})")
            else:
                self.requeued += 1
                log.info("job_requeued", job=job.key[1], queue=job.queue, attempts=job.attempts)
                self.queues.setdefault(job.queue, deque()).appendleft(job)
        peer.inflight.clear()
        for role_peer in list(self.roles.get(peer.role, ())):
            self._dispatch(role_peer)

    def check_keys(self) -> None:
        """The authorized keys changed: disconnect every actor whose key is gone."""
        allowed = self.settings.key_allowed
        if allowed is None:
            return
        for peer in [p for p in self.peers.values() if p.key and not allowed(p.key)]:
            self.revoke(peer)

    def revoke(self, peer: Peer) -> None:
        """Disconnect ``peer``, whose key was revoked: tell it why, take its jobs back."""
        log.warning(
            "actor_revoked", actor_id=peer.actor_id, key=key_name_of(peer.key),
            role=peer.role, jobs=len(peer.inflight),
        )  # fmt: skip
        failure = Failure("key_revoked", _revoked_detail(peer.key))
        self._send(peer.identity, Envelope(TELL, "", peer.actor_id, BROKER), failure)
        self.remove(peer, "key_revoked")

    # -- jobs ----------------------------------------------------------------------

    def _job(self, env: Envelope, body: bytes) -> None:
        key = (env.frm, env.id)
        if key in self.jobs:
            self._reject(b"", "duplicate_job", f"{env.frm}: {env.id}")
            requester = self.peers[env.frm]
            back = Envelope(REPLY, "", env.frm, BROKER, env.id)
            return self._send(requester.identity, back, Failure("duplicate_job", env.id))
        queue, prefer = preference(env.to)
        job = self.jobs[key] = Job(key, queue, encode_envelope(env), body, prefer=prefer)
        job.deadline_s = env.deadline_s
        target = (prefer and self._preferred(job)) or self._target(queue)
        if target is not None and target.free > 0 and not self.queues.get(job.queue):
            self._hand(target, job)
        else:
            self.queues.setdefault(job.queue, deque()).append(job)

    def _target(self, to: str) -> Peer | None:
        """The actor ``to`` names, or for ``@role`` the one of that role with most room."""
        if to.startswith(ROLE_PREFIX):
            peers = self.roles.get(to[1:])
            if not peers:
                return None
            return peers[0] if len(peers) == 1 else max(peers, key=_spare)
        return self.peers.get(to)

    def _preferred(self, job: Job) -> Peer | None:
        """The actor ``job`` prefers, when it is of the job's role and has room."""
        peer = self.peers.get(job.prefer) if job.prefer else None
        if peer is None or peer.free <= 0 or ROLE_PREFIX + peer.role != job.queue:
            return None
        return peer

    def _hand(self, peer: Peer, job: Job) -> None:
        job.attempts += 1
        job.assigned = peer
        peer.inflight[job.key] = job
        if job.deadline_s:
            job.expires = self._now() + job.deadline_s
        self.sock.send([peer.identity, job.header, job.body])

    def _dispatch(self, peer: Peer) -> None:
        """Give ``peer`` queued work up to its capacity: its own queue first."""
        for name in (peer.actor_id, ROLE_PREFIX + peer.role):
            queue = self.queues.get(name)
            if self.expired and queue:
                self._dispatch_around(peer, queue, name != peer.actor_id)
                continue
            while queue and peer.free > 0:
                self._hand(peer, self._take(peer, queue))

    @staticmethod
    def _take(peer: Peer, queue: deque[Job]) -> Job:
        """The next job of ``queue`` for ``peer``: the first that prefers it, else the
        first (a job preferring a busy actor goes to an idle one rather than wait)."""
        for i, job in enumerate(queue):
            if job.prefer == peer.actor_id:
                del queue[i]
                return job
        return queue.popleft()

    def _dispatch_around(self, peer: Peer, queue: deque[Job], by_role: bool) -> None:
        """:meth:`_dispatch` once some deadline has passed: ``peer`` gets no job it still
        holds an expired try of (its late answer would complete the new try), and no
        role job it let expire before while another actor of its role has not."""
        kept: list[Job] = []
        while queue and peer.free > 0:
            job = queue.popleft()
            if job.key in peer.stuck or (by_role and self._elsewhere(job, peer)):
                kept.append(job)
            else:
                self._hand(peer, job)
        queue.extendleft(reversed(kept))

    def _elsewhere(self, job: Job, peer: Peer) -> bool:
        """True when ``job`` expired on ``peer`` before and another actor of its role
        has not let it expire yet: that one gets it (when it has room)."""
        if peer.actor_id not in job.expired_on:
            return False
        return any(p.actor_id not in job.expired_on for p in self.roles.get(peer.role, ()))

    def _dispatch_role(self, queue: str) -> None:
        """Offer the jobs of ``queue`` (``@role`` or an actor id) to whoever may take them."""
        if queue.startswith(ROLE_PREFIX):
            for peer in list(self.roles.get(queue[1:], ())):
                self._dispatch(peer)
        elif (peer := self.peers.get(queue)) is not None:
            self._dispatch(peer)

    def _reply(self, peer: Peer, env: Envelope, body: bytes) -> None:
        job = peer.inflight.pop((env.to, env.re), None)
        if job is None:
            if peer.stuck.pop((env.to, env.re), None) is not None:
                # An answer after the deadline: the job moved on (to another actor, or
                # failed); this one is never forwarded, and the actor's slot is free.
                log.warning("late_reply_dropped", job=env.re, actor_id=peer.actor_id, kind=env.kind)
                self._dispatch(peer)
                return
            # An answer to a job we took back (the actor was presumed dead) or never
            # gave: the job's live copy answers instead.
            log.info("reply_dropped", job=env.re, actor_id=peer.actor_id)
            return
        del self.jobs[job.key]
        self.completed += 1
        self.answered[job.key] = peer.actor_id
        if len(self.answered) > ANSWERED_KEPT:
            self.answered.popitem(last=False)
        requester = self.peers.get(env.to)
        if requester is not None:
            self.sock.send([requester.identity, encode_envelope(env), body])
        else:
            log.warning("reply_undeliverable", job=env.re, requester=env.to)
        self._dispatch(peer)

    def _fail(self, job: Job, detail: str, reason: str = "job_failed", event: str = "") -> None:
        """Answer ``job``'s requester with a failure of ``reason``; the event is named
        ``event`` (with the reason as a field), or after the reason."""
        self.jobs.pop(job.key, None)
        self.failed += 1
        requester, job_id = job.key
        fields = {"reason": reason} if event else {}
        log.error(
            event or reason,
            job=job_id,
            queue=job.queue,
            attempts=job.attempts,
            detail=detail,
            **fields,
        )
        peer = self.peers.get(requester)
        if peer is not None:
            reply = Envelope(REPLY, "", requester, BROKER, job_id)
            self._send(peer.identity, reply, Failure(reason, detail, job.attempts))

    def _cancel(self, requester: Peer, job_id: str) -> None:
        """A queued job is dropped here; a running one is told to stop (its actor then
        answers with a ``cancelled`` failure, which completes the job as usual)."""
        job = self.jobs.get((requester.actor_id, job_id))
        if job is None:
            return  # already answered: nothing to cancel
        log.info("job_cancelled", job=job_id, queue=job.queue, running=job.assigned is not None)
        if job.assigned is None:
            self.queues[job.queue].remove(job)
            del self.jobs[job.key]
            reply = Envelope(REPLY, "", requester.actor_id, BROKER, job_id)
            return self._send(requester.identity, reply, Failure("cancelled", "while queued"))
        job.cancelled = True
        env = Envelope(TELL, "", job.assigned.actor_id, requester.actor_id)
        self._send(job.assigned.identity, env, Cancel(job_id))

    def _tell(self, env: Envelope, body: bytes) -> None:
        target = self._target(env.to)
        if target is None:
            log.info("message_undeliverable", to=env.to, kind=env.kind, frm=env.frm)
            return
        self.sock.send([target.identity, encode_envelope(env), body])

    def _send(self, identity: bytes, env: Envelope, msg: object) -> None:
        env.kind = type(msg).__message_kind__
        self.sock.send([identity, encode_envelope(env), encode(msg)])

    # -- introspection ---------------------------------------------------------------

    def status(self) -> StatusReply:
        return StatusReply(
            actors=[
                ActorInfo(
                    p.actor_id, p.role, p.capacity, len(p.inflight) + len(p.stuck), p.device, p.pid
                )
                for p in self.peers.values()
            ],
            queued={k: len(q) for k, q in self.queues.items() if q},
            completed=self.completed,
            failed=self.failed,
            requeued=self.requeued,
        )


def _revoked_detail(key: str) -> str:
    return (
        f"key_revoked: the head revoked the key {key_name_of(key)!r} this actor connected"
        " with; ask the head's operator for a new one (`python run.py keys add NAME` there,"
        " then attach with --key-name NAME)"
    )


def _spare(peer: Peer) -> float:
    return peer.free / peer.capacity
