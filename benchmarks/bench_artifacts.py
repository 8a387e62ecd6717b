#!/usr/bin/env python3
"""Measure: how long the head's artifact store takes to hand a file to a worker, and to
take one from it, over loopback tcp with CURVE (runtime/artifacts.py).

    python benchmarks/bench_artifacts.py            files of 1.5 MB (a policy), 4.4 MB (a
                                                    policy with its optimizer, a checkpoint)
                                                    and 20 MB, 5 fetches and puts each
    python benchmarks/bench_artifacts.py --quick    one 4.4 MB file, 2 of each

A real head (broker, the in-process ``artifacts`` actor) listens on 127.0.0.1 with keys
made for the run; the worker is an actor in this process connected to that tcp endpoint
with those keys, so every chunk crosses the loopback interface encrypted. Each fetch
goes to an empty cache (no hit). Not a test: prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from runtime import artifacts  # noqa: E402
from runtime.actor import Actor  # noqa: E402
from runtime.config import RunSettings, RuntimeSettings, Settings  # noqa: E402
from runtime.head import Head, new_run_dir, run_head  # noqa: E402
from runtime.security import CurveClient  # noqa: E402


class Worker(Actor):
    role = "learner"  # the role that may put


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = [4_400_000] if args.quick else [1_500_000, 4_400_000, 20_000_000]
    repeat = 2 if args.quick else 5
    rows: list[tuple[int, str, list[float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            run=RunSettings(name="bench", runs_dir=str(Path(tmp) / "runs")),
            runtime=RuntimeSettings(listen="tcp://127.0.0.1:0"),
            actors={},
            source="<bench>",
        )

        async def driver(head: Head) -> dict:
            worker = Worker(name="bench-worker")
            curve = CurveClient.load(head.keys_dir)
            async with trio.open_nursery() as nursery:
                await nursery.start(lambda task_status: worker.run(
                    head.listen, curve=curve, task_status=task_status))  # fmt: skip
                for size in sizes:
                    fetch_ms, put_ms = [], []
                    for i in range(repeat):
                        blob = os.urandom(size)
                        started = time.perf_counter()
                        digest = await artifacts.put(worker, blob)
                        put_ms.append((time.perf_counter() - started) * 1000)
                        cache = artifacts.Store(Path(tmp) / f"cache-{size}-{i}")
                        started = time.perf_counter()
                        path = await artifacts.fetch(worker, digest, cache)
                        fetch_ms.append((time.perf_counter() - started) * 1000)
                        assert path.stat().st_size == size
                    rows.append((size, "put", put_ms))
                    rows.append((size, "fetch", fetch_ms))
                worker.stop("done")
            return {}

        run_id, run_dir = new_run_dir(settings)
        trio.run(run_head, settings, run_dir, run_id, driver, "warning")
    chunk = artifacts.CHUNK_BYTES
    print(f"| bytes | what | chunks | median ms | min ms | MB/s (median) |  ({repeat} each)")
    print("|---|---|---|---|---|---|")
    for size, what, ms in rows:
        med = statistics.median(ms)
        print(f"| {size:,} | {what} | {-(-size // chunk)} | {med:.1f} | {min(ms):.1f} |"
              f" {size / 1e6 / (med / 1000):.0f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
