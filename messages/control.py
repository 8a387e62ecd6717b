"""Control family: joining, liveness, failures, probes and shutdown."""

from __future__ import annotations

from messages.base import message


@message("control.register")
class Register:
    """actor → broker: I have joined; route work for my role to me."""

    role: str
    """Role name (``environment``, ``learner``, ...); ``@role`` addresses reach it."""
    name: str = ""
    """Requested actor id; a restarted actor asks for its old one. Empty: broker picks."""
    capacity: int = 1
    """How many jobs it works on at once."""
    device: str = "cpu"
    """Compute device it uses (``cpu``, ``cuda:1``)."""
    pid: int = 0
    """OS process id, for operators."""
    host: str = ""
    """Host name, for operators."""
    version: str = ""
    """The actor's package version (``runtime.provenance``); empty from older builds."""
    source_hash: str = ""
    """sha256 of the actor's source tree (``runtime.provenance``): the broker refuses an
    actor whose tree differs from the head's unless ``allow_mismatch`` is set."""
    allow_mismatch: bool = False
    """Register even if the source differs (``attach --allow-version-mismatch``): the
    head logs a warning instead of refusing."""
    run_id: str = ""
    """The run this actor means to join (``attach --run-id``); a head of another run
    refuses it. Empty: any run."""


@message("control.registered")
class Registered:
    """broker → actor: welcome; this is your id and how often to heartbeat."""

    actor_id: str
    """The id the actor is known by from now on."""
    heartbeat_interval: float
    """Seconds between heartbeats the broker expects."""
    run_id: str = ""
    """The head's run id, so events can name it."""


@message("control.heartbeat")
class Heartbeat:
    """actor → broker: I am alive."""

    inflight: int = 0
    """Jobs the actor is working on right now."""


@message("control.shutdown")
class Shutdown:
    """broker/supervisor → actor: finish now and exit cleanly."""

    reason: str = ""
    """Why, for the event log."""


@message("control.failure")
class Failure:
    """anyone → requester: the request could not be served; sent in place of its reply."""

    reason: str
    """Short tag: ``handler_error``, ``job_failed``, ``timeout``, ``no_handler``, ..."""
    detail: str = ""
    """Human-readable detail (a trimmed traceback, the cause)."""
    attempts: int = 0
    """How many times the job was tried before giving up (0 where not a job)."""


@message("control.probe")
class Probe:
    """anyone → any actor: echo this back, after holding it ``hold_s`` seconds in a
    worker thread. A liveness check that exercises the blocking-work path; the
    benchmark and tests use it as a job of known cost."""

    seq: int = 0
    """Caller's sequence number, echoed."""
    payload: bytes = b""
    """Opaque bytes, echoed."""
    hold_s: float = 0.0
    """Seconds of blocking work to simulate before answering."""
    crash: bool = False
    """Kill the answering process instead (fault-injection for tests)."""
    log_events: int = 0
    """Log this many ``probe_event`` events (field ``i``: 0, 1, ...) in the worker
    thread, spread over ``hold_s``, before answering: a load of known size for the event
    log's tests and benchmark (test hooks only, as ``crash``)."""


@message("control.probe_reply")
class ProbeReply:
    """actor → prober: the probe's echo."""

    seq: int
    """The probe's sequence number."""
    payload: bytes
    """The probe's payload."""
    actor_id: str
    """Who answered."""


@message("control.status")
class StatusQuery:
    """anyone → broker: what is attached and what is queued."""


@message("control.actor_info")
class ActorInfo:
    """One attached actor, as the broker sees it."""

    actor_id: str
    """Its id."""
    role: str
    """Its role."""
    capacity: int
    """Jobs it may hold at once."""
    inflight: int
    """Jobs it holds now."""
    device: str
    """Its compute device."""
    pid: int = 0
    """Its OS process id (on its own host)."""


@message("control.status_reply")
class StatusReply:
    """broker → asker: attached actors, queued jobs per role, totals."""

    actors: list[ActorInfo]
    """Every live actor."""
    queued: dict[str, int]
    """Waiting jobs per queue: ``@role``, or the actor id for actor-addressed jobs."""
    completed: int
    """Jobs answered since the broker started."""
    failed: int
    """Jobs that failed after their last try."""
    requeued: int
    """Times a job was taken back from a dead actor."""


@message("control.bad_reply")
class BadReply:
    """requester → broker: the reply the broker routed to my job ``job`` broke its
    contract (another kind than asked for, other worlds than asked for...). The broker
    charges the actor that sent it; one that reaches ``[runtime] bad_reply_limit`` is
    dropped (told with ``control.failure`` of reason ``bad_replies``), and the head's own
    process of that name is killed and restarted, which counts against the restart
    budget. Taken from the head's side only (its connections and its ipc actors)."""

    job: str
    """The id of the ASK whose reply was wrong."""
    detail: str = ""
    """What was wrong, for the event log."""


@message("control.cancel")
class Cancel:
    """requester → broker → working actor: stop the job with this id; its reply becomes
    ``control.failure`` with reason ``cancelled``. Sent automatically when an ask is
    abandoned (timeout or cancellation)."""

    job: str
    """The id of the ASK to cancel."""
