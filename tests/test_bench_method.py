"""The whole-method benchmark's busy-by-phase table (``benchmarks/bench_method.py``): CPU
samples of a real process tree, cut at the run's events."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_method  # noqa: E402

T0 = 1_800_000_000.0


def _event(name: str, at: float) -> dict:
    from datetime import UTC, datetime

    return {"event": name, "ts": datetime.fromtimestamp(T0 + at, UTC).isoformat()}


def test_stretches_get_the_cpu_of_their_samples_and_the_rest_is_idle() -> None:
    # Busy 2 cores for 10 s, then 1 core for 10 s, then none for 4 s.
    samples = [(T0, 0.0), (T0 + 10, 20.0), (T0 + 20, 30.0), (T0 + 24, 30.0)]
    events = [
        _event("run_started", 0),
        _event("rollout_started", 1),  # not a mark
        _event("training_started", 5),
        _event("training_worker_ended", 15),
        _event("training_started", 20),
        _event("run_finished", 24),
    ]
    rows = bench_method.busy_by_phase(samples, events, cores=2)
    assert [(r["from"], r["to"]) for r in rows] == [
        ("run_started", "training_started"),
        ("training_started", "training_worker_ended"),
        ("training_worker_ended", "training_started 2"),
        ("training_started 2", "run_finished"),
    ]
    assert [r["wall_s"] for r in rows] == [5.0, 10.0, 5.0, 4.0]
    # 5 s at 2 cores; 5 s at 2 + 5 s at 1; 5 s at 1; nothing.
    assert [r["busy_cores"] for r in rows] == [2.0, 1.5, 1.0, 0.0]
    assert [r["idle_core_s"] for r in rows] == [0.0, 5.0, 5.0, 8.0]
    # Actors' events reach the log in the order they arrive: cut in time order all the same.
    assert bench_method.busy_by_phase(samples, events[::-1], cores=2) == rows


def test_the_sampler_reads_the_cpu_of_a_process_tree_as_it_runs() -> None:
    # A child that spins for about a second in a grandchild: the tree's CPU grows.
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n"
    code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {spin!r}])"
    proc = subprocess.Popen([sys.executable, "-c", code])
    samples: list = []
    stop = threading.Event()
    sampler = threading.Thread(target=bench_method.sample_cpu, args=(proc.pid, samples, stop))
    sampler.start()
    proc.wait(timeout=60)
    time.sleep(0.1)
    stop.set()
    sampler.join()
    assert len(samples) >= 2
    times = [t for t, _ in samples]
    assert times == sorted(times)
    assert max(c for _, c in samples) >= 0.5  # the grandchild's spin, reaped into the tree
