"""An attached actor's events, carried to the head's ``events.jsonl``.

The head and the actors it starts append to the run's events file themselves. An actor
attached from another machine (``run.py attach ROLE --connect tcp://...`` without
``--run-dir``: no run folder here) forwards its events instead:

* **Actor side** (:class:`EventForwarder`): the events sink hands it every record the
  process logs (:func:`runtime.events.forward_to`; the local console shows them as
  before). It keeps them as JSON lines in a bounded queue (:data:`QUEUE_EVENTS` events,
  :data:`QUEUE_BYTES` bytes) and sends them as ``events.batch`` asks to the broker (the
  head), one batch in flight, every :data:`FLUSH_S` or as soon as :data:`BATCH_EVENTS`
  (or half the queue) wait; a batch holds at most :data:`BATCH_BYTES` (and a quarter of
  ``max_frame_bytes``). The head's answer is what says it is there: without one within
  :data:`ACK_TIMEOUT_S` the head counts as unreachable; the unanswered batch is kept and
  sent again (the head skips a batch it already wrote, by stream and ``seq``) once an
  empty batch is answered (asked every :data:`RETRY_S`). A head that comes back (a new
  one on the same endpoint) is found the same way, once the actor registers with it.
* **When the queue is full** (the head unreachable, or events logged faster than they
  go), the **oldest** events are dropped and counted. Oldest, because the events still
  queued are then the latest ones, which say what the actor is doing now, and because
  the gap is then one stretch right after what the head already has: the
  ``events_dropped`` record (count, first and last ``ts`` dropped) that opens the next
  batch sits exactly where the missing events would. Nothing is lost on the actor's
  side: its console has every event, and an actor that stops with events dropped or
  unsent says how many there (``events_dropped`` with the total and ``unsent``, or
  ``events_unsent``), even when the head never came back.
* **Head side** (:class:`EventIntake`, called by the broker): each line must be a JSON
  object; it is written to the events file with ``host``, ``remote: true``, and the
  actor's id and role as the broker knows them (a peer cannot speak for another), its
  own ``ts`` and fields kept, one batch in one write (the events file's rules: a full
  disk costs lines, counted, never an exception). The records also go to the head's
  console.

Why an ask to the broker and not a tell: a tell into a connection that is down waits in
ZeroMQ's queue or is lost with it, uncounted; only an answer says a batch is in, so the
actor knows when to keep events back and what it dropped. The broker answers at once
(no job, no queue) and writes in the head's process. The one tell is the last batch of
an actor that stops (no answer can be read then), sent only to a head that answered.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from messages import BROKER, DEFAULT_MAX_FRAME
from messages.events import EventBatch, EventsTaken
from runtime import events
from runtime.events import log
from runtime.failures import RemoteFailure

if TYPE_CHECKING:
    from runtime.actor import Actor

QUEUE_EVENTS = 10_000
"""Events kept for the head while it cannot take them: at a busy actor's few events a
second, minutes of an outage; at ~300 bytes each, about 3 MB."""
QUEUE_BYTES = 8 * 2**20
"""...and at most this many bytes of them, so a few huge events (tracebacks) cannot
hold much memory either."""
FLUSH_S = 0.5
"""How long an event may wait before it is sent: prompt for ``run.py tail``, one small
message a second or two per actor."""
BATCH_EVENTS = 1000
"""Events per batch; a batch goes at once when this many wait (a burst is not held
back by :data:`FLUSH_S`)."""
BATCH_BYTES = 512 * 1024
"""Bytes of events per batch (also never more than a quarter of ``max_frame_bytes``):
the head writes a batch in one go, in its event loop, so a batch stays small."""
ITEM_OVERHEAD = 5
"""msgpack's header on one string in a batch, at most."""
BATCH_OVERHEAD = 512
"""The rest of a batch's frame: its kind, stream, seq and host."""
ACK_TIMEOUT_S = 2.0
"""How long an answer may take before the head counts as unreachable: the broker
answers as it reads the batch, so only a head that is gone (or paused) takes this long;
a late answer costs nothing but a question (the batch is not written twice)."""
RETRY_S = 1.0
"""How often an unreachable head is asked again, with an empty batch (a few bytes: while
the connection is down they wait in ZeroMQ's queue, as the heartbeats do)."""
PROBE_TIMEOUT_S = 1.0
"""How long that question waits for its answer: the head answers at once when it is
there, and a late answer only means one more question."""
STREAMS_KEPT = 4096
"""Senders (keys, or actor ids) whose last batches the head remembers, to skip a repeat."""
STREAMS_PER_SENDER = 64
"""Streams (actor processes) remembered per sender: one key cannot push another's out."""
MAX_LINE_CHARS = 64 * 1024
"""A forwarded event line longer than this is refused (the forwarder sends a stub for
anything near a batch's size)."""
BURST_S = 20.0
"""An attached actor may write this many seconds' worth of its event rate at once."""
LIMITED_REPORT_S = 10.0
"""At most one ``remote_events_limited`` per actor in this many seconds (then counted)."""
FINAL_WAIT_S = 2.0
"""At the end of a run the head waits up to this long (within ``shutdown_grace``) for
every attached actor that forwards its events to send its last batch."""

_muted = threading.local()


class EventForwarder:
    """Actor side: keeps this process's events and sends them to the head (see the
    module's doc). :meth:`put` may be called from any thread; :meth:`run` is a task in
    the actor's nursery."""

    def __init__(
        self,
        host: str,
        *,
        queue_events: int = QUEUE_EVENTS,
        queue_bytes: int = QUEUE_BYTES,
        batch_events: int = BATCH_EVENTS,
        max_frame_bytes: int = DEFAULT_MAX_FRAME,
        flush_s: float = FLUSH_S,
    ) -> None:
        if queue_events < 1:
            raise ValueError(f"the events queue must hold at least 1 event, not {queue_events}")
        self.host = host
        self._pid = os.getpid()
        """A forked child (a vector env's worker) inherits this forwarder but never
        sends: it keeps nothing (and never takes a lock its parent held at the fork)."""
        self.stream = secrets.token_hex(8)
        self.queue_events = queue_events
        self.queue_bytes = queue_bytes
        self.batch_events = batch_events
        self.batch_bytes = max(1024, min(BATCH_BYTES, max_frame_bytes // 4))
        self.flush_s = flush_s
        self._wake_at = min(batch_events, max(1, queue_events // 2))
        """Queued events that send a batch at once: a full batch, or half the queue."""
        self._lock = threading.Lock()
        self._queue: deque[tuple[str, str]] = deque()
        """(ts, JSON line) per event, oldest first."""
        self._bytes = 0
        self.dropped = 0
        """Events dropped from the full queue since the last ``events_dropped`` sent."""
        self._dropped_span = ("", "")
        self.dropped_total = 0
        self.sent = 0
        """Events the head has confirmed."""
        self._seq = 0
        self._pending: EventBatch | None = None
        """The batch sent and not yet answered: sent again until it is."""
        self.reachable = True
        """False from an unanswered batch until the head answers again."""
        self._answered = False
        """The head has answered at least once."""
        self._down_since = 0.0
        self._token: trio.lowlevel.TrioToken | None = None
        self._full: trio.Event | None = None

    # -- filled from any thread -----------------------------------------------------

    def put(self, record: dict[str, Any]) -> None:
        """Keep one record for the head (the events sink calls this)."""
        if getattr(_muted, "on", False) or os.getpid() != self._pid:
            return  # this forwarder's own local-only records, or a forked child's
        try:
            line = json.dumps(record, default=events._json_default, separators=(",", ":"))
        except (TypeError, ValueError):  # (a circular value): logging never raises for it
            line = self._stub(record, -1)
        if len(line) + ITEM_OVERHEAD > self.batch_bytes:
            line = self._stub(record, len(line))
        ts = str(record.get("ts", ""))
        with self._lock:
            self._queue.append((ts, line))
            self._bytes += len(line)
            while len(self._queue) > self.queue_events or self._bytes > self.queue_bytes:
                old_ts, old = self._queue.popleft()
                self._bytes -= len(old)
                if not self.dropped:
                    self._dropped_span = (old_ts, old_ts)
                self._dropped_span = (self._dropped_span[0], old_ts)
                self.dropped += 1
                self.dropped_total += 1
            wake = len(self._queue) == self._wake_at and self._token is not None
        if wake:
            try:
                self._token.run_sync_soon(self._wake)  # type: ignore[union-attr]
            except trio.RunFinishedError:
                pass

    def _stub(self, record: dict[str, Any], size: int) -> str:
        """What goes in place of an event too big for a batch: its name and size (the
        actor's own log has it whole)."""
        stub = {k: str(record[k]) for k in ("ts", "level", "event") if k in record}
        stub |= {"too_large": size, "limit": self.batch_bytes} if size >= 0 else {"unencodable": 1}
        return json.dumps(stub, default=events._json_default, separators=(",", ":"))

    def _wake(self) -> None:
        if self._full is not None:
            self._full.set()

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._queue)

    # -- sent from the actor's trio loop ----------------------------------------------

    async def run(self, actor: Actor) -> None:
        """Send batches until cancelled (the actor stops)."""
        self._token = trio.lowlevel.current_trio_token()
        while True:
            self._full = trio.Event()
            if self.queued < self._wake_at:
                with trio.move_on_after(self.flush_s):
                    await self._full.wait()
            if not self.reachable:
                await self._wait_for_head(actor)
            await self._send_all(actor)

    async def _send_all(self, actor: Actor) -> None:
        while True:
            if self._pending is None:
                self._pending = self._take()
                if self._pending is None:
                    return
            if not await self._ask(actor, self._pending):
                return
            self.sent += len(self._pending.events)
            self._pending = None

    async def _wait_for_head(self, actor: Actor) -> None:
        """Ask with an empty batch every :data:`RETRY_S` until the head answers."""
        question = EventBatch(self.stream, 0, self.host, [])
        while not await self._ask(actor, question, PROBE_TIMEOUT_S):
            await trio.sleep(RETRY_S)

    async def _ask(self, actor: Actor, batch: EventBatch, timeout: float = ACK_TIMEOUT_S) -> bool:
        try:
            await actor.ask(BROKER, batch, timeout=timeout)
        except (trio.TooSlowError, RemoteFailure) as exc:
            if self.reachable:
                self.reachable = False
                self._down_since = time.monotonic()
                reason = "no answer" if isinstance(exc, trio.TooSlowError) else str(exc)
                self._local(
                    "warning",
                    "events_forwarding_paused",
                    reason=reason[:200],
                    queued=self.queued,
                    queue_events=self.queue_events,
                )
            return False
        self._answered = True
        if not self.reachable:
            self.reachable = True
            paused = round(time.monotonic() - self._down_since, 3)
            log.info("events_forwarding_resumed", paused_s=paused, dropped=self.dropped)
        return True

    def _take(self) -> EventBatch | None:
        """The next batch: an ``events_dropped`` record first when events were dropped
        since the last one, then the oldest queued events that fit."""
        with self._lock:
            if not self._queue and not self.dropped:
                return None
            lines: list[str] = []
            size = BATCH_OVERHEAD
            if self.dropped:
                first, last = self._dropped_span
                record = {
                    "ts": events._now(),
                    "level": "warning",
                    "event": "events_dropped",
                    "events": self.dropped,
                    "first_ts": first,
                    "last_ts": last,
                    "reason": "queue_full",
                    "queue_events": self.queue_events,
                }
                lines.append(json.dumps(record, separators=(",", ":")))
                size += len(lines[0]) + ITEM_OVERHEAD
                dropped, self.dropped = self.dropped, 0
            else:
                dropped = 0
            queue = self._queue
            while queue and len(lines) < self.batch_events:
                cost = len(queue[0][1]) + ITEM_OVERHEAD
                if size + cost > self.batch_bytes:
                    if lines:
                        break
                    # (A stub's name alone too long: never a batch that cannot go.)
                    self._bytes -= len(queue.popleft()[1])
                    self.dropped += 1  # (told in the next batch)
                    self.dropped_total += 1
                    continue
                _, line = queue.popleft()
                self._bytes -= len(line)
                lines.append(line)
                size += cost
        if dropped:
            self._local("warning", "events_dropped", events=dropped, first_ts=first, last_ts=last)
        self._seq += 1
        return EventBatch(self.stream, self._seq, self.host, lines)

    def final_batch(self) -> EventBatch | None:
        """What is left, as one last batch (the actor is stopping and the head answered
        lately); None when nothing is, or when the head is unreachable."""
        if self._pending is not None:
            return None  # unanswered: the head is gone or slow; do not reorder
        if not self.reachable or not self._answered:
            return None  # (a refused actor never heard from the head: no linger for it)
        batch = self._take()
        if batch is not None:
            self.sent += len(batch.events)  # (best effort: no answer comes)
        return batch

    def report_unsent(self) -> None:
        """Say in the local log what never reached the head (called last, as the actor
        stops)."""
        unsent = self.queued + (len(self._pending.events) if self._pending else 0)
        if not self.reachable:
            why = "head unreachable"
        elif self._pending is not None:
            why = "head not answering"  # (its last batch got no answer yet)
        else:
            why = "actor stopping"
        if self.dropped_total:
            self._local(
                "warning",
                "events_dropped",
                events=self.dropped_total,
                unsent=unsent,
                sent=self.sent,
                reason=why,
            )
        elif unsent:
            self._local("info", "events_unsent", unsent=unsent, sent=self.sent, reason=why)

    @staticmethod
    def _local(level: str, event: str, **fields: Any) -> None:
        """Log to this process's own console (and file) only: a record about the
        forwarding itself, which the head gets in the batches, or cannot get."""
        _muted.on = True
        try:
            getattr(log, level)(event, **fields)
        finally:
            _muted.on = False


class EventIntake:
    """Head side: writes attached actors' batches to the events file (the broker calls
    :meth:`take` for every ``events.batch`` a registered peer sends).

    Each actor may write ``per_s`` events a second on average, in bursts of up to
    ``BURST_S`` seconds' worth (a token bucket per actor id): a key holder cannot fill the
    head's disk with its log. Past that the rest of a batch is dropped, counted per actor,
    and reported (``remote_events_limited``, at most once per actor every
    ``LIMITED_REPORT_S`` seconds, with the count since the last report)."""

    def __init__(self, per_s: float = 0.0, now: Callable[[], float] = time.monotonic) -> None:
        self.per_s = per_s
        """Events per second allowed per actor; 0: no limit."""
        self._now = now
        self._tokens: dict[str, tuple[float, float]] = {}
        """Actor id → (events it may still write, when that was worked out)."""
        self.limited: dict[str, int] = {}
        """Events dropped per actor by the limit, in all."""
        self._unreported: dict[str, tuple[int, float]] = {}
        """Actor id → (dropped since its last report, when that report was made)."""
        self.senders: set[str] = set()
        """Actors that sent events here (a batch or the empty question)."""
        self.finished: set[str] = set()
        """Actors whose last batch (a tell, sent as they stop) came in."""
        self._last: OrderedDict[str, OrderedDict[str, int]] = OrderedDict()
        """Last batch written per stream, per sender (key or actor id), newest last."""
        self.written = 0
        """Events written (for the benchmark and the curious)."""
        self.batches = 0
        """Batches written."""
        self.rejected = 0

    def take(
        self,
        actor_id: str,
        role: str,
        batch: EventBatch,
        run: str = "",
        *,
        host: str = "",
        key: str = "",
    ) -> EventsTaken:
        """Write ``batch`` from the registered peer ``actor_id`` (of ``role``, host
        ``host`` as it registered, connected with ``key``) into the events file of
        ``run``; the answer to send back. The rate limit and the repeat check go by the
        key (by the actor id for a peer without one): a new name gets no fresh budget."""
        self.senders.add(actor_id)
        who = key or actor_id
        streams = self._last.setdefault(who, OrderedDict())
        self._last.move_to_end(who)
        last = streams.get(batch.stream, 0)
        if batch.seq == 0 or batch.seq <= last:
            return EventsTaken(batch.seq, 0)  # a question, or a batch written already
        streams[batch.stream] = batch.seq
        streams.move_to_end(batch.stream)
        while len(streams) > STREAMS_PER_SENDER:
            streams.popitem(last=False)
        while len(self._last) > STREAMS_KEPT:
            self._last.popitem(last=False)
        lines: list[str] = []
        records: list[dict[str, Any]] = []
        bad = 0
        allowed = self._allow(who, [len(text) for text in batch.events])
        if allowed < len(batch.events):
            self._limited(who, len(batch.events) - allowed, batch.seq)
        for text in batch.events[:allowed]:
            record = None
            if len(text) <= MAX_LINE_CHARS:
                try:
                    record = json.loads(text)
                except (ValueError, RecursionError):  # (nesting deep enough to recurse out)
                    record = None
            if type(record) is not dict:
                bad += 1
                continue
            # Who sent it is the broker's word, not the line's.
            record["actor"], record["role"] = actor_id, role
            record["host"], record["remote"] = host, True
            if run:
                record["run"] = run
            record.setdefault("ts", events._now())
            try:
                lines.append(json.dumps(record, separators=(",", ":")))
            except (ValueError, RecursionError):
                bad += 1
                continue
            records.append(record)
        if lines and events.append_lines(lines):
            self.written += len(lines)
            self.batches += 1
            for record in records:
                events.relay(record)
        if bad:
            self.rejected += bad
            log.warning("remote_events_rejected", actor_id=actor_id, lines=bad, seq=batch.seq)
        return EventsTaken(batch.seq, len(lines))

    def forget(self, actor_id: str) -> None:
        """``actor_id`` left: a later actor of that name is a new sender."""
        self.senders.discard(actor_id)
        self.finished.discard(actor_id)

    def _allow(self, who: str, sizes: list[int]) -> int:
        """How many of the events of ``sizes`` characters ``who`` may write now (and
        spend them): each costs one token per started KiB."""
        if self.per_s <= 0:
            return len(sizes)
        now, burst = self._now(), self.per_s * BURST_S
        tokens, then = self._tokens.get(who, (burst, now))
        tokens = min(burst, tokens + (now - then) * self.per_s)
        allowed = 0
        for size in sizes:
            cost = max(1, -(-size // 1024))
            if cost > tokens:
                break
            tokens -= cost
            allowed += 1
        self._tokens[who] = (tokens, now)
        while len(self._tokens) > STREAMS_KEPT:
            self._tokens.pop(next(iter(self._tokens)))
        return allowed

    def _limited(self, actor_id: str, dropped: int, seq: int) -> None:
        self.limited[actor_id] = self.limited.get(actor_id, 0) + dropped
        count, reported = self._unreported.get(actor_id, (0, -LIMITED_REPORT_S))
        count += dropped
        now = self._now()
        if now - reported < LIMITED_REPORT_S:
            self._unreported[actor_id] = (count, reported)
            return
        self._unreported[actor_id] = (0, now)
        log.warning(
            "remote_events_limited", actor_id=actor_id, dropped=count,
            dropped_total=self.limited[actor_id], per_s=self.per_s, seq=seq,
        )  # fmt: skip

    def flush_limited(self) -> None:
        """Report what the limit dropped since each actor's last report (the run ends)."""
        for actor_id, (count, _) in self._unreported.items():
            if count:
                log.warning(
                    "remote_events_limited", actor_id=actor_id, dropped=count,
                    dropped_total=self.limited[actor_id], per_s=self.per_s,
                )  # fmt: skip
        self._unreported.clear()
