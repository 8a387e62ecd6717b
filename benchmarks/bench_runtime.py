#!/usr/bin/env python3
"""Benchmark: typed messages through our broker against raw pyzmq, same topology.

    python benchmarks/bench_runtime.py                  full run (~1-2 min)
    python benchmarks/bench_runtime.py --quick          a few seconds per case (< 30 s)
    python benchmarks/bench_runtime.py --json out.json  also write the results as JSON
    python benchmarks/bench_runtime.py --profile DIR    cProfile our three processes
    (also --transport ipc|tcp, --sizes 64,1024,65536)

Three systems run the same shape in three OS processes each: a client DEALER → a broker's ROUTER
→ a worker DEALER that echoes → back through the broker → the client.

* **raw**: plain blocking pyzmq. The broker swaps the routing identity and forwards the
  frames untouched; the worker echoes the payload frame.
* **ours**: the client is an :class:`~runtime.actor.Actor` that asks ``@probe`` with
  ``Probe(seq, payload)`` (a role-addressed ask, so a broker *job*); the broker is
  :class:`~runtime.broker.Broker` under trio with the head's socket options; the worker is
  :class:`~actors.probe.ProbeActor`, which answers with ``ProbeReply``.
* **bridge**: raw's routing under trio through :class:`~runtime.zmqtrio.TrioSocket` (the
  layer under every actor and the broker), the client with one trio task per request in
  flight waiting on its own event as ``ask`` does; no envelopes, records, jobs or checks.
  Ours against bridge is what the message layer costs; bridge against raw, trio's.

Last, it times the message layer alone in-process with no sockets (the broker routing an
ask and its reply, the worker answering a probe, the client's ``ask``): microseconds of
Python per round trip.

For each payload size it measures round-trip latency with one message in flight (p50, p99)
and throughput with a window of requests in flight, then prints ours/raw ratios against
the goals. It also reads each process's CPU clock (``/proc``) around every phase and
prints CPU microseconds per round trip per process: on a shared 2-core machine wall-clock
numbers swing with other load, CPU cost per message much less, and it says which process
the time goes to; and each process's voluntary context switches (all its threads, ZeroMQ's
I/O thread included), as wake-ups per round trip: fewer messages handled per wake-up
shows there. Not a test: it asserts nothing about speed and exits 0 when it ran.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import itertools
import json
import multiprocessing
import os
import platform
import pstats
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import msgpack  # noqa: E402
import trio  # noqa: E402
import zmq  # noqa: E402

from messages import decode_envelope  # noqa: E402
from messages.control import Probe, ProbeReply  # noqa: E402
from runtime import events  # noqa: E402
from runtime.actor import Actor  # noqa: E402
from runtime.broker import Broker, BrokerSettings  # noqa: E402
from runtime.zmqtrio import TrioSocket  # noqa: E402

SIZES = (64, 1024, 64 * 1024)
"""Payload bytes: a control message, a typical job, a small observation batch."""
WINDOW = 256
"""Requests in flight for the throughput phase: deep enough to keep every process busy."""
HWM = 100_000
"""High-water marks on every socket, as the runtime sets them (queue deep, never drop)."""
THROUGHPUT_GOAL = 0.5
"""Ours must keep at least half of raw pyzmq's round trips per second."""
LATENCY_GOAL = 2.0
"""Ours may take at most twice raw pyzmq's median round trip."""
WORKER_ROLE = "probe"
STARTUP_TIMEOUT_S = 30.0
"""How long to wait for a child to bind or register: a cold spawn imports trio and zmq."""
PHASE_TIMEOUT_S = 120.0
"""Longest one measured phase may take before the run is called stuck (a full latency
phase at 5 ms a round trip takes 25 s)."""


@dataclass(frozen=True)
class Plan:
    """How much each case runs."""

    sizes: tuple[int, ...]
    """Payload sizes in bytes."""
    warmup: int
    """Round trips before measuring latency (connections up, caches warm)."""
    latency_rts: int
    """Round trips measured one at a time."""
    window: int
    """Requests in flight during the throughput phase."""
    warmup_s: float
    """Seconds at full window before the throughput measurement."""
    throughput_s: float
    """Seconds of throughput measurement."""
    capacity: int
    """Our worker's capacity: jobs the broker hands it at once."""


FULL = Plan(SIZES, 500, 5000, WINDOW, 1.0, 4.0, WINDOW)
QUICK = Plan(SIZES, 100, 600, WINDOW, 0.3, 1.0, WINDOW)


def _mark(conn: Any, size: int, phase: str, count: int | None = None) -> None:
    """Tell the parent a phase starts (``count`` None) or ends after ``count`` round trips,
    and wait until it has read the three processes' CPU clocks."""
    conn.send(("mark", size, phase, count))
    conn.recv()


# -- raw pyzmq ------------------------------------------------------------------------

RAW_WORKER_ID = b"worker"
RAW_READY = b"READY"


def _raw_socket(ctx: zmq.Context, kind: int) -> zmq.Socket:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    return sock


def raw_broker(bind: str, conn: Any) -> None:
    """ROUTER: a frame set from the worker goes to the client it names; anything else goes
    to the worker with the sender's identity in front."""
    sock = _raw_socket(zmq.Context(), zmq.ROUTER)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.bind(bind)
    conn.send(sock.getsockopt_string(zmq.LAST_ENDPOINT))
    while sock.recv_multipart() != [RAW_WORKER_ID, RAW_READY]:
        pass
    conn.send("ready")
    recv, send = sock.recv_multipart, sock.send_multipart
    while True:
        frames = recv()
        if frames[0] == RAW_WORKER_ID:
            send(frames[1:])
        else:
            send([RAW_WORKER_ID, *frames])


def raw_worker(endpoint: str, capacity: int) -> None:
    """DEALER: echo every ``[client, payload]`` back as it came."""
    sock = _raw_socket(zmq.Context(), zmq.DEALER)
    sock.setsockopt(zmq.ROUTING_ID, RAW_WORKER_ID)
    sock.connect(endpoint)
    sock.send(RAW_READY)
    recv, send = sock.recv_multipart, sock.send_multipart
    while True:
        send(recv())


def raw_client(endpoint: str, plan: Plan, conn: Any) -> None:
    sock = _raw_socket(zmq.Context(), zmq.DEALER)
    sock.connect(endpoint)
    results = {}
    for size in plan.sizes:
        payload = os.urandom(size)
        for _ in range(plan.warmup):
            sock.send(payload)
            sock.recv()
        samples = []
        _mark(conn, size, "latency")
        for _ in range(plan.latency_rts):
            started = time.perf_counter_ns()
            sock.send(payload)
            echo = sock.recv()
            samples.append(time.perf_counter_ns() - started)
            if echo != payload:
                raise RuntimeError(f"raw echo of {size} B came back as {len(echo)} B")
        _mark(conn, size, "latency", plan.latency_rts)
        _raw_window(sock, payload, plan.window, plan.warmup_s)
        _mark(conn, size, "throughput")
        done, total = _raw_window(sock, payload, plan.window, plan.throughput_s)
        _mark(conn, size, "throughput", total)
        results[size] = _summary(samples, done / plan.throughput_s)
    conn.send(("results", results))


def _raw_window(sock: zmq.Socket, payload: bytes, window: int, seconds: float) -> tuple[int, int]:
    """Keep ``window`` requests in flight for ``seconds``: (round trips completed by then,
    round trips completed in all once the window has drained)."""
    deadline = time.perf_counter() + seconds
    for _ in range(window):
        sock.send(payload)
    outstanding, done = window, 0
    while outstanding:
        sock.recv()
        outstanding -= 1
        if time.perf_counter() < deadline:
            done += 1
            sock.send(payload)
            outstanding += 1
    return done, done + window


# -- ours -----------------------------------------------------------------------------


class BenchClient(Actor):
    """The benchmark's client: asks ``@probe`` and times the answers."""

    role = "bench"


def _quiet_events(role: str) -> None:
    # Registration events at info level would interleave with the table.
    events.configure(console_level="warning", role=role)


async def _until_sigterm(fn: Callable[[], Any]) -> None:
    """Run ``fn`` until it returns or SIGTERM arrives, so finally-blocks (and the
    profiler's dump) run when the parent stops us."""
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        await fn()
        nursery.cancel_scope.cancel()


def ours_broker(bind: str, conn: Any) -> None:
    """The head's broker, alone: the same ROUTER options as ``runtime/head.py``."""
    _quiet_events("head")

    async def serve() -> None:
        sock = zmq.Context().socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, HWM)
        sock.setsockopt(zmq.RCVHWM, HWM)
        sock.bind(bind)
        conn.send(sock.getsockopt_string(zmq.LAST_ENDPOINT))
        broker = Broker(BrokerSettings(), sock)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.serve)
            await broker.wait_for_actors(WORKER_ROLE, 1)
            conn.send("ready")

    trio.run(_until_sigterm, serve)


def ours_worker(endpoint: str, capacity: int) -> None:
    from actors.probe import ProbeActor

    _quiet_events(WORKER_ROLE)
    worker = ProbeActor(name=f"{WORKER_ROLE}-0", capacity=capacity)
    trio.run(_until_sigterm, lambda: worker.run(endpoint))


def ours_client(endpoint: str, plan: Plan, conn: Any) -> None:
    _quiet_events(BenchClient.role)

    async def measure() -> dict:
        client = BenchClient(name="bench-client")
        async with trio.open_nursery() as nursery:
            await nursery.start(client.run, endpoint)
            seqs = itertools.count()

            def probe(payload: bytes) -> Any:
                return client.ask("@probe", Probe(next(seqs), payload))

            def echoed(reply: Any, payload: bytes) -> bool:
                return isinstance(reply, ProbeReply) and reply.payload == payload

            results = await _measure_sizes(probe, echoed, plan, conn)
            client.stop("benchmark_done")
        return results

    conn.send(("results", trio.run(measure)))


# -- the bridge alone: our trio/ZeroMQ layer, none of the message layer -------------------


def bridge_broker(bind: str, conn: Any) -> None:
    """:func:`raw_broker` under trio through :class:`~runtime.zmqtrio.TrioSocket`: the
    same routing in a callback, no envelope, no jobs, no checks."""

    async def serve() -> None:
        sock = _raw_socket(zmq.Context(), zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.bind(bind)
        conn.send(sock.getsockopt_string(zmq.LAST_ENDPOINT))

        def on_frames(frames: list[bytes]) -> None:
            if frames[0] == RAW_WORKER_ID:
                if frames[1:] == [RAW_READY]:
                    conn.send("ready")
                else:
                    bridge.send(frames[1:])
            else:
                bridge.send([RAW_WORKER_ID, *frames])

        bridge = TrioSocket(sock, on_frames)
        await bridge.run()

    trio.run(_until_sigterm, serve)


def bridge_worker(endpoint: str, capacity: int) -> None:
    """:func:`raw_worker` under trio: echo in the socket's callback."""

    async def serve() -> None:
        sock = _raw_socket(zmq.Context(), zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, RAW_WORKER_ID)
        sock.connect(endpoint)
        bridge = TrioSocket(sock, lambda frames: bridge.send(frames))
        bridge.send([RAW_READY])
        await bridge.run()

    trio.run(_until_sigterm, serve)


def bridge_client(endpoint: str, plan: Plan, conn: Any) -> None:
    """Like :func:`ours_client`, one trio task per request in flight waiting on its own
    event, but each request is ``[seq, payload]`` on the bare bridge."""

    async def measure() -> dict:
        sock = _raw_socket(zmq.Context(), zmq.DEALER)
        sock.connect(endpoint)
        waiting: dict[bytes, trio.Event] = {}
        echoes: dict[bytes, bytes] = {}

        def on_frames(frames: list[bytes]) -> None:
            echoes[frames[0]] = frames[1]
            waiting.pop(frames[0]).set()

        bridge = TrioSocket(sock, on_frames)
        ids = itertools.count()

        async def ask(payload: bytes) -> bytes:
            seq = b"%d" % next(ids)
            done = waiting[seq] = trio.Event()
            bridge.send([seq, payload])
            await done.wait()
            return echoes.pop(seq)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(bridge.run)
            results = await _measure_sizes(ask, lambda echo, payload: echo == payload, plan, conn)
            nursery.cancel_scope.cancel()
        return results

    conn.send(("results", trio.run(measure)))


async def _measure_sizes(
    ask: Callable[[bytes], Any], echoed: Callable[[Any, bytes], bool], plan: Plan, conn: Any
) -> dict:
    """For each payload size of ``plan``: warm up, time ``ask(payload)`` one at a time
    (each answer checked with ``echoed(answer, payload)``), then keep a window in flight;
    the parent reads the processes' CPU clocks at every phase mark."""
    results = {}
    for size in plan.sizes:
        payload = os.urandom(size)
        for _ in range(plan.warmup):
            await ask(payload)
        samples = []
        _mark(conn, size, "latency")
        for _ in range(plan.latency_rts):
            started = time.perf_counter_ns()
            answer = await ask(payload)
            samples.append(time.perf_counter_ns() - started)
            if not echoed(answer, payload):
                raise RuntimeError(f"a {size} B request came back as {answer!r:.80}")
        _mark(conn, size, "latency", plan.latency_rts)
        await _lanes(ask, payload, plan.window, plan.warmup_s)
        _mark(conn, size, "throughput")
        done, total = await _lanes(ask, payload, plan.window, plan.throughput_s)
        _mark(conn, size, "throughput", total)
        results[size] = _summary(samples, done / plan.throughput_s)
    return results


async def _lanes(
    ask: Callable[[bytes], Any], payload: bytes, window: int, seconds: float
) -> tuple[int, int]:
    """``window`` tasks each keep one ``ask(payload)`` in flight for ``seconds``: (answered
    by then, answered in all once every task has its last answer)."""
    deadline = time.perf_counter() + seconds
    done = total = 0

    async def lane() -> None:
        nonlocal done, total
        while time.perf_counter() < deadline:
            await ask(payload)
            total += 1
            if time.perf_counter() < deadline:
                done += 1

    async with trio.open_nursery() as nursery:
        for _ in range(window):
            nursery.start_soon(lane)
    return done, total


# -- the message layer alone, in-process ----------------------------------------------------


class _Outbox:
    """Stands in for a :class:`~runtime.zmqtrio.TrioSocket`: keeps what is sent."""

    def __init__(self) -> None:
        self.sent: list[list[bytes]] = []
        self.user_id = None
        self._closed = False

    def send(self, frames: list[bytes]) -> None:
        self.sent.append(frames)


def layer_costs(count: int = 20_000, size: int = 64) -> dict[str, float]:
    """Microseconds of Python per round trip that each process's message layer spends
    with no socket at all: the broker routing one ask and its reply, the worker decoding,
    answering and encoding one probe, the client's ``ask`` with its event and decode (256
    asks in flight; its fake peer's share is included: decoding the ask's envelope and
    building and encoding the reply's). Payloads of ``size`` bytes (64, whatever
    ``--sizes`` says)."""
    from actors.probe import ProbeActor
    from messages import ASK, REPLY, Envelope, encode, encode_envelope
    from runtime.broker import Peer

    payload = os.urandom(size)
    ask_body, reply_body = encode(Probe(1, payload)), encode(ProbeReply(1, payload, "probe-0"))

    def header(mode: int, msg_id: str, to: str, kind: str, frm: str = "", re: str = "") -> bytes:
        env = Envelope(mode, msg_id, to, frm, re, deadline_s=30.0 if mode == ASK else 0.0)
        env.kind = kind
        return encode_envelope(env)

    async def measure() -> dict[str, float]:
        costs = {}
        unused = zmq.Context.instance().socket(zmq.ROUTER)  # never bound: the outbox sends
        broker = Broker(BrokerSettings(), unused)
        broker.sock = _Outbox()
        unused.close(linger=0)
        now = trio.current_time()
        for peer in (
            Peer(b"C", "bench-client", "bench", 1, "", 1, now),
            Peer(b"W", "probe-0", WORKER_ROLE, 256, "", 2, now),
        ):
            broker.peers[peer.actor_id] = peer
            broker.by_identity[peer.identity] = peer
            broker.roles.setdefault(peer.role, []).append(peer)
        frames = []
        for i in range(count):
            msg_id = f"bench-client.abcdef.{i}"
            frames.append([b"C", header(ASK, msg_id, "@probe", "control.probe"), ask_body])
            reply = header(
                REPLY, f"probe-0.x.{i}", "bench-client", "control.probe_reply", re=msg_id
            )
            frames.append([b"W", reply, reply_body])
        started = time.perf_counter()
        for message in frames:
            broker._on_frames(message)
        costs["broker"] = (time.perf_counter() - started) / count * 1e6

        worker = ProbeActor(name="probe-0", capacity=256)
        worker._sock, worker._ready, worker.actor_id = _Outbox(), True, "probe-0"
        asks = [
            [
                header(ASK, f"bench-client.abcdef.{i}", "probe-0", "control.probe", "bench-client"),
                ask_body,
            ]
            for i in range(count)
        ]
        started = time.perf_counter()
        for message in asks:
            worker._on_frames(message)
        costs["worker"] = (time.perf_counter() - started) / count * 1e6

        client = BenchClient(name="bench-client")
        outbox = client._sock = _Outbox()
        client._ready, client.actor_id = True, "bench-client"
        answered = 0

        async def lane(seq: int) -> None:
            nonlocal answered
            while answered < count:
                await client.ask("@probe", Probe(seq, payload))
                answered += 1

        async with trio.open_nursery() as nursery:
            for seq in range(WINDOW):
                nursery.start_soon(lane, seq)
            await trio.lowlevel.checkpoint()
            started = time.perf_counter()
            while answered < count:
                sent, outbox.sent = outbox.sent, []
                for head, _ in sent:
                    msg_id = decode_envelope(head).id
                    reply = header(
                        REPLY, "probe-0.x", "bench-client", "control.probe_reply", re=msg_id
                    )
                    client._on_frames([reply, reply_body])
                await trio.lowlevel.checkpoint()
            costs["client"] = (time.perf_counter() - started) / answered * 1e6
            nursery.cancel_scope.cancel()
        costs["total"] = sum(costs.values())
        return {role: round(us, 1) for role, us in costs.items()}

    return trio.run(measure)


# -- running the processes ------------------------------------------------------------

SYSTEMS = {
    "raw": (raw_broker, raw_worker, raw_client),
    "bridge": (bridge_broker, bridge_worker, bridge_client),
    "ours": (ours_broker, ours_worker, ours_client),
}


def _child(profile: str, fn: Callable[..., None], *args: Any) -> None:
    """A process's entry point: ``fn(*args)``, under cProfile when ``profile`` names a file."""
    if not profile:
        return fn(*args)
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        fn(*args)
    finally:
        profiler.disable()
        profiler.dump_stats(profile)


def _recv(conn: Any, proc: multiprocessing.Process, what: str, timeout: float) -> Any:
    """The next thing ``proc`` sends, or a clear error if it dies or takes too long."""
    deadline = time.monotonic() + timeout
    while not conn.poll(0.2):
        if not proc.is_alive():
            raise RuntimeError(f"{proc.name} exited ({proc.exitcode}) before {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc.name}: no {what} within {timeout:g} s")
    return conn.recv()


def run_system(name: str, plan: Plan, bind: str, profile_dir: Path | None) -> dict:
    """Start broker, worker and client for ``name``; the client's results per size."""
    broker_fn, worker_fn, client_fn = SYSTEMS[name]
    mp = multiprocessing.get_context("spawn")  # no zmq context survives a fork safely

    def profile(role: str) -> str:
        return str(profile_dir / f"{name}-{role}.pstats") if profile_dir else ""

    procs: list[multiprocessing.Process] = []

    def start(role: str, fn: Callable[..., None], *args: Any) -> multiprocessing.Process:
        proc = mp.Process(
            target=_child, args=(profile(role), fn, *args), name=f"{name}-{role}", daemon=True
        )
        proc.start()
        procs.append(proc)
        return proc

    broker_conn, child_conn = mp.Pipe()
    client_conn, client_child_conn = mp.Pipe()
    try:
        broker = start("broker", broker_fn, bind, child_conn)
        endpoint = _recv(broker_conn, broker, "its endpoint", STARTUP_TIMEOUT_S)
        start("worker", worker_fn, endpoint, plan.capacity)
        _recv(broker_conn, broker, "a registered worker", STARTUP_TIMEOUT_S)
        client = start("client", client_fn, endpoint, plan, client_child_conn)
        pids = {"client": client.pid, "broker": broker.pid, "worker": procs[1].pid}
        started: dict[tuple[int, str], dict] = {}
        slept: dict[tuple[int, str], dict] = {}
        cpu: dict[int, dict] = {}
        waits: dict[int, dict] = {}
        while True:
            msg = _recv(client_conn, client, "its next phase", PHASE_TIMEOUT_S)
            if msg[0] == "results":
                results = msg[1]
                break
            _, size, phase, count = msg
            clocks = {role: _cpu_s(pid) for role, pid in pids.items()}
            sleeps = {role: _sleeps(pid) for role, pid in pids.items()}
            if count is None:
                started[size, phase] = clocks
                slept[size, phase] = sleeps
            else:
                us = _per_rt(started[size, phase], clocks, count, scale=1e6, digits=1)
                cpu.setdefault(size, {})[phase] = us
                waits.setdefault(size, {})[phase] = _per_rt(slept[size, phase], sleeps, count)
            client_conn.send("ack")
        client.join(STARTUP_TIMEOUT_S)
        for size, phases in cpu.items():
            results[size]["cpu_us_per_rt"] = phases
        for size, phases in waits.items():
            results[size]["sleeps_per_rt"] = phases
        return results
    finally:
        for proc in reversed(procs):
            if proc.is_alive():
                proc.terminate()  # SIGTERM: ours leave trio cleanly and dump profiles
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system, all threads) ``pid`` has used, where /proc tells."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sleeps(pid: int) -> int | None:
    """Times ``pid``'s threads have gone to sleep waiting (voluntary context switches, all
    threads: its own and ZeroMQ's I/O thread), where /proc tells: each is a wake-up paid."""
    total = 0
    try:
        for status in Path(f"/proc/{pid}/task").glob("*/status"):
            for line in status.read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    except (OSError, ValueError):
        return None
    return total


def _per_rt(
    before: dict, after: dict, count: int, scale: float = 1.0, digits: int = 2
) -> dict | None:
    """A counter's growth per round trip (× ``scale``), per process and in all: wake-ups
    as they are, CPU seconds as microseconds (``scale=1e6``)."""
    if None in before.values() or None in after.values() or not count:
        return None
    per = {role: round((after[role] - before[role]) / count * scale, digits) for role in before}
    per["total"] = round(sum(per.values()), digits)
    return per


# -- numbers and the table --------------------------------------------------------------


def _summary(samples_ns: list[int], rt_per_s: float) -> dict:
    samples_ns = sorted(samples_ns)

    def pct(q: float) -> float:
        return samples_ns[min(len(samples_ns) - 1, int(q * len(samples_ns)))] / 1000

    return {
        "p50_us": round(pct(0.50), 1),
        "p99_us": round(pct(0.99), 1),
        "mean_us": round(sum(samples_ns) / len(samples_ns) / 1000, 1),
        "rt_per_s": round(rt_per_s, 1),
    }


def compare(raw: dict, ours: dict, sizes: tuple[int, ...], bridge: dict) -> list[dict]:
    """One row a payload size: ours against raw (the goals), and the bridge alone against
    raw (how much of the gap is the trio/ZeroMQ layer rather than the message layer)."""
    rows = []
    for size in sizes:
        r, o, b = raw[size], ours[size], bridge[size]
        throughput_ratio = o["rt_per_s"] / r["rt_per_s"]
        p50_ratio = o["p50_us"] / r["p50_us"]
        rows.append(
            {
                "payload_bytes": size,
                "raw": r,
                "ours": o,
                "bridge": b,
                "throughput_ratio": round(throughput_ratio, 3),
                "bridge_throughput_ratio": round(b["rt_per_s"] / r["rt_per_s"], 3),
                "p50_ratio": round(p50_ratio, 2),
                "p99_ratio": round(o["p99_us"] / r["p99_us"], 2),
                "throughput_goal_met": throughput_ratio >= THROUGHPUT_GOAL,
                "p50_goal_met": p50_ratio <= LATENCY_GOAL,
            }
        )
    return rows


def machine() -> dict:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    cpu = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "cpu": cpu,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyzmq": zmq.pyzmq_version(),
        "libzmq": zmq.zmq_version(),
        "trio": trio.__version__,
        "msgpack": ".".join(map(str, msgpack.version)),
    }


def _size(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


def _cpu_cell(per: dict, fmt: str = "6.1f") -> str:
    """client + broker + worker = total, each as ``fmt``."""
    parts = [format(per[role], fmt) for role in ("client", "broker", "worker", "total")]
    return " + ".join(parts[:3]) + " = " + parts[3]


def render(info: dict, plan: Plan, transport: str, rows: list[dict]) -> str:
    out = io.StringIO()
    p = out.write
    p(
        f"machine: {info['cores']} cores ({info['usable_cores']} usable), {info['cpu']}; "
        f"{info['platform']}; load average {info['load_average']} at start\n"
        f"python {info['python']}, pyzmq {info['pyzmq']} / libzmq {info['libzmq']}, "
        f"trio {info['trio']}, msgpack {info['msgpack']}\n"
        f"topology: client DEALER -> broker ROUTER -> worker DEALER (echo) and back; "
        f"3 processes each, {transport}\n"
        f"latency: {plan.latency_rts} round trips one at a time after {plan.warmup} warm-up; "
        f"throughput: {plan.throughput_s:g} s at {plan.window} in flight after "
        f"{plan.warmup_s:g} s warm-up; our worker's capacity {plan.capacity}\n\n"
    )
    head = (
        f"{'payload':>8} | {'p50 us':>17} {'ours/raw':>9} | {'p99 us':>17} {'ours/raw':>8} | "
        f"{'round trips/s':>17} {'ours/raw':>9}\n"
        f"{'':>8} | {'raw':>8} {'ours':>8} {'<=2.0':>9} | {'raw':>8} {'ours':>8} {'':>8} | "
        f"{'raw':>8} {'ours':>8} {'>=0.5':>9}\n"
    )
    p(head + "-" * (len(head.splitlines()[0])) + "\n")
    for row in rows:
        r, o = row["raw"], row["ours"]
        p50_mark = "ok" if row["p50_goal_met"] else "MISS"
        thr_mark = "ok" if row["throughput_goal_met"] else "MISS"
        p(
            f"{_size(row['payload_bytes']):>8} | {r['p50_us']:8.1f} {o['p50_us']:8.1f} "
            f"{row['p50_ratio']:5.2f} {p50_mark:>3} | {r['p99_us']:8.1f} {o['p99_us']:8.1f} "
            f"{row['p99_ratio']:8.2f} | {r['rt_per_s']:8.0f} {o['rt_per_s']:8.0f} "
            f"{row['throughput_ratio']:5.2f} {thr_mark:>3}\n"
        )
    p(
        "\nthe bridge alone (runtime/zmqtrio.py under trio, one task a request in flight, "
        "no envelopes, jobs or checks):\n"
    )
    for row in rows:
        b = row["bridge"]
        p(
            f"{_size(row['payload_bytes']):>8} | p50 {b['p50_us']:8.1f} us "
            f"({b['p50_us'] / row['raw']['p50_us']:4.2f} of raw) | "
            f"{b['rt_per_s']:8.0f} round trips/s ({row['bridge_throughput_ratio']:4.2f} of raw)\n"
        )
    systems = ("raw", "bridge", "ours")
    if all(row[name].get("cpu_us_per_rt") for row in rows for name in systems):
        p(
            "\nCPU per round trip, us (user + system, all threads): "
            "client + broker + worker = total\n"
        )
        for row in rows:
            for phase, label in (("latency", "1 in flight"), ("throughput", "window")):
                r = row["raw"]["cpu_us_per_rt"][phase]
                b = row["bridge"]["cpu_us_per_rt"][phase]
                o = row["ours"]["cpu_us_per_rt"][phase]
                p(
                    f"{_size(row['payload_bytes']):>8} {label:<11} | raw {_cpu_cell(r)} | "
                    f"bridge {_cpu_cell(b)} | ours {_cpu_cell(o)} | "
                    f"ours/raw {o['total'] / r['total']:5.1f}\n"
                )
    if all(row[name].get("sleeps_per_rt") for row in rows for name in systems):
        p(
            "\nwake-ups per round trip (voluntary context switches, all threads): "
            "client + broker + worker = total\n"
        )
        for row in rows:
            for phase, label in (("latency", "1 in flight"), ("throughput", "window")):
                cells = " | ".join(
                    f"{name} {_cpu_cell(row[name]['sleeps_per_rt'][phase], '5.2f')}"
                    for name in systems
                )
                p(f"{_size(row['payload_bytes']):>8} {label:<11} | {cells}\n")
    met = sum(row["p50_goal_met"] + row["throughput_goal_met"] for row in rows)
    p(f"\ngoals met: {met} of {2 * len(rows)} (p50 ours/raw <= {LATENCY_GOAL:g}, ")
    p(f"throughput ours/raw >= {THROUGHPUT_GOAL:g})\n")
    return out.getvalue()


def _profile_summary(profile_dir: Path, top: int = 12) -> str:
    out = io.StringIO()
    for path in sorted(profile_dir.glob("ours-*.pstats")):
        out.write(f"\n== {path.name}: top {top} by own time ==\n")
        stats = pstats.Stats(str(path), stream=out)
        stats.strip_dirs().sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (< 30 s)")
    parser.add_argument("--json", default="", help="also write the results to this file")
    parser.add_argument("--transport", choices=["ipc", "tcp"], default="ipc")
    parser.add_argument(
        "--sizes",
        default="",
        help="payload sizes in bytes, comma-separated (default 64,1024,65536)",
    )
    parser.add_argument(
        "--profile", default="", help="folder for cProfile stats of the processes (slows them)"
    )
    args = parser.parse_args(argv)

    plan = QUICK if args.quick else FULL
    if args.sizes:
        plan = Plan(**{**asdict(plan), "sizes": tuple(int(s) for s in args.sizes.split(","))})
    profile_dir = Path(args.profile).resolve() if args.profile else None
    if profile_dir:
        profile_dir.mkdir(parents=True, exist_ok=True)
    info = machine()
    tmp = Path(tempfile.mkdtemp(prefix="bench-runtime-"))
    started = time.monotonic()
    try:
        results = {}
        for name in SYSTEMS:
            bind = f"ipc://{tmp}/{name}.ipc" if args.transport == "ipc" else "tcp://127.0.0.1:*"
            results[name] = run_system(name, plan, bind, profile_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = compare(results["raw"], results["ours"], plan.sizes, results["bridge"])
    layer = layer_costs()
    print(render(info, plan, args.transport, rows), end="")
    print(
        "\nthe message layer alone, in-process with no sockets, us of Python per round trip "
        "at 64 B: client + broker + worker = "
        f"{layer['client']} + {layer['broker']} + {layer['worker']} = {layer['total']}"
    )
    if profile_dir:
        print("(profiled under cProfile: the timings above are inflated)")
        print(_profile_summary(profile_dir), end="")
    wall_s = round(time.monotonic() - started, 1)
    print(f"wall time {wall_s} s")
    if args.json:
        report = {
            "machine": info,
            "transport": args.transport,
            "plan": asdict(plan),
            "goals": {"throughput_ratio_min": THROUGHPUT_GOAL, "p50_ratio_max": LATENCY_GOAL},
            "profiled": profile_dir is not None,
            "results": rows,
            "message_layer_us_per_rt": layer,
            "wall_s": wall_s,
        }
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
