#!/usr/bin/env python3
"""Benchmark: an attached actor's events forwarded to the head (runtime/forward.py).

    python benchmarks/bench_events.py                  100,000 events (~10-30 s)
    python benchmarks/bench_events.py --quick          20,000 events (a few seconds)
    python benchmarks/bench_events.py --json out.json  also write the results as JSON

Two parts:

* **end to end**: a real head in this process listening on loopback tcp with CURVE (its
  run's own keys), and a real ``run.py attach probe`` process without ``--run-dir`` (so
  it forwards), its console quiet. The head asks it for ``Probe(log_events=N)``: the
  actor logs N events as fast as it can in a worker thread while its forwarder sends
  them. Measured: events per second written at the head (from the ask to the N-th event
  in ``events.jsonl``), and CPU per event in the actor process and in the head process
  (``/proc`` clocks), so the cost shows apart from the wall-clock noise of a shared
  machine. The actor's queue holds all N, so none is dropped (checked).
* **in the sender**: ``log.info`` in this process with no output at all, with the
  forwarder's ``put`` (what an attached actor adds: one JSON encoding and a locked
  append), and writing a local events file (what an actor the head started pays) — the
  cost per event in the logging thread.

Not a test: it asserts nothing about speed and exits 0 when it ran.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from messages.control import Probe  # noqa: E402
from rlgpt.cli import number  # noqa: E402
from runtime import events  # noqa: E402
from runtime.config import RunSettings, RuntimeSettings, Settings  # noqa: E402
from runtime.forward import EventForwarder  # noqa: E402
from runtime.head import Head, new_run_dir, run_head  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Silent:
    """A console view that shows nothing: the head's own console is not what is measured."""

    wants_status = False

    def show(self, item: object) -> None:
        return None

    def close(self) -> None:
        pass


def end_to_end(count: int, folder: Path) -> dict:
    settings = Settings(
        run=RunSettings(name="bench-events", runs_dir=str(folder / "runs")),
        # No per-actor limit: this measures how fast events can go, not the limit.
        runtime=RuntimeSettings(listen="tcp://127.0.0.1:0", remote_events_per_s=0.0),
        actors={},
        source="<bench>",
    )
    result: dict = {}

    async def driver(head: Head) -> dict:
        argv = [sys.executable, str(ROOT / "run.py"), "attach", "probe", "--connect", head.listen]
        argv += ["--keys", str(head.keys_dir), "--name", "far", "--quiet"]
        argv += ["--events-queue", str(count + 1000)]
        env = {**os.environ, "RLGPT_TEST_HOOKS": "1"}  # Probe(log_events=...) is a test hook
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
        try:
            await head.wait_for("probe", 1, timeout=120)
            await trio.sleep(1.0)  # its first batches (start-up events) are in
            intake = head.broker.intake
            written0 = intake.written
            actor0, head0 = cpu_s(proc.pid), time.process_time()
            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    lambda: head.client.ask("far", Probe(seq=1, log_events=count), deadline_s=0)
                )
                with trio.fail_after(600):
                    while intake.written - written0 < count:
                        await trio.sleep(0.005)
            wall = time.perf_counter() - started
            actor_cpu, head_cpu = cpu_s(proc.pid) - actor0, time.process_time() - head0
            result.update(
                events=count,
                wall_s=round(wall, 3),
                events_per_s=round(count / wall),
                actor_cpu_us_per_event=round(actor_cpu / count * 1e6, 2),
                head_cpu_us_per_event=round(head_cpu / count * 1e6, 2),
                batches=intake.batches,
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        return {}

    run_id, run_dir = new_run_dir(settings)
    code = trio.run(run_head, settings, run_dir, run_id, driver, "warning", Silent())
    lines = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    got = {e["i"] for e in lines if e.get("remote") and e.get("event") == "probe_event"}
    result["lost"] = count - len(got)
    result["dropped_notices"] = sum(1 for e in lines if e.get("event") == "events_dropped")
    result["head_exit"] = code
    return result


def in_sender(count: int, folder: Path) -> dict:
    """Seconds per ``log.info`` in this process: nothing, forwarder, events file."""

    def per_event() -> float:
        log = events.log
        start = time.perf_counter()
        for i in range(count):
            log.info("probe_event", seq=1, i=i)
        return (time.perf_counter() - start) / count * 1e6

    out = {}
    events.configure(console=None)
    out["log_only_us"] = round(per_event(), 2)
    forwarder = EventForwarder("here", queue_events=count + 10)
    events.forward_to(forwarder.put)
    out["with_forwarder_us"] = round(per_event(), 2)
    events.forward_to(None)
    events.configure(console=None, events_file=folder / "local.jsonl")
    out["with_events_file_us"] = round(per_event(), 2)
    events.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 events")
    parser.add_argument(
        "--events", type=number(int, 0), default=0, help="events to send (default 100,000)"
    )
    parser.add_argument("--json", default="", help="also write the results here")
    args = parser.parse_args()
    count = args.events or (20_000 if args.quick else 100_000)
    with tempfile.TemporaryDirectory(prefix="bench-events-") as tmp:
        folder = Path(tmp)
        sender = in_sender(min(count, 50_000), folder)
        e2e = end_to_end(count, folder)
    results = {"end_to_end": e2e, "in_sender": sender, "cpus": os.cpu_count()}
    print(f"end to end, {e2e['events']:,} events over loopback tcp + CURVE:")
    print(f"  {e2e['events_per_s']:,} events/s at the head ({e2e['wall_s']} s), lost {e2e['lost']}")
    print(
        f"  CPU per event: actor {e2e['actor_cpu_us_per_event']} µs (logging included),"
        f" head {e2e['head_cpu_us_per_event']} µs"
    )
    print(
        f"per log.info call in the sender's thread: {sender['log_only_us']} µs with no output,"
        f" {sender['with_forwarder_us']} µs with the forwarder,"
        f" {sender['with_events_file_us']} µs writing a local events file"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
