#!/usr/bin/env python3
"""Benchmark: booking episodes in a run's ledger, with the booked-id memory and without.

    python benchmarks/bench_ledger.py           3,000 episodes in 300 bookings (a diamond
                                                run books ~2,700), 3 rounds
    python benchmarks/bench_ledger.py --quick   600 episodes in 60 bookings, 2 rounds

``method.ledger.append`` must know whether an episode's id is booked already (a redo
replaces its lines). "re-read" forgets what it booked before every call, which is what
every booking cost before the ledger remembered its ids: a parse of the whole file, so a
run's bookings cost the square of its length. Same episodes, same fsyncs, side by side;
each round keeps its own fresh ledger. Not a test: it prints numbers and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from method import ledger  # noqa: E402

EPISODES_PER_BOOKING = 10
"""One booking per evaluation of 10 worlds: the diamond config's code evaluations run
20 worlds split over 2 environment actors."""


def book(bookings: int, remember: bool) -> float:
    """Seconds to book ``bookings`` batches of episodes into a fresh ledger."""
    run_dir = Path(tempfile.mkdtemp(prefix="bench-ledger-"))
    started = time.perf_counter()
    for b in range(bookings):
        lines = [
            {"id": f"code:job{b}:{seed}", "kind": "code", "seed": seed, "success": True,
             "steps": 100, "achievements": ["collect_wood"]}
            for seed in range(EPISODES_PER_BOOKING)
        ]  # fmt: skip
        if not remember:
            ledger._ids.clear()
        ledger.append(run_dir, lines)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer bookings, 2 rounds")
    args = parser.parse_args()
    bookings, rounds = (60, 2) if args.quick else (300, 3)
    print(f"{bookings * EPISODES_PER_BOOKING} episodes in {bookings} bookings, {rounds} rounds")
    for r in range(rounds):
        reread, remembered = book(bookings, remember=False), book(bookings, remember=True)
        print(
            f"round {r}: re-read {reread:.3f} s, remembered {remembered:.3f} s, "
            f"ratio {reread / remembered:.1f}x"
        )


if __name__ == "__main__":
    main()
