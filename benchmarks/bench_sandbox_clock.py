"""How far past its wall-clock budget agent code runs when its ticks are slow, and what
the meter's clock reads cost: ``python benchmarks/bench_sandbox_clock.py``.

The meter reads the clock every ``sandbox.meter.TICKS_PER_CHECK`` ticks. Between two
ticks agent code can make one C call the guards allow (a 1M-bit big-int ``%``, a sort of
2M items): each is bounded, but a loop of them runs that many calls past the deadline
before the clock is read. For each such loop this prints the time it took to stop over
its budget (the ratio; 1.0 is exact), then the sandbox's cost on its BFS benchmark
against plain ``exec`` (``sandbox.bench``'s workload, best of 5).
"""

from __future__ import annotations

import argparse
import time

from sandbox import compile_code, load, meter
from sandbox.bench import SOURCE as BFS_SOURCE

BUDGET_S = 3.0
"""The wall-clock budget each slow loop runs under (its set-up, ~1 s, included)."""

SLOW_LOOPS = {
    # A 1M-bit number modulo a 500k-bit one: the slowest single `%` the bit limit allows.
    "big-int %": """
def f():
    n = (1 << 999_000) - 12345
    m = (1 << 500_000) - 7
    r = 0
    while True:
        r = n % m
""",
    # Sorting 2M shuffled items: one C call of a few hundred ms.
    "sorted 2M": """
def f():
    xs = [str(i) for i in range(2_000_000)]
    while True:
        ys = sorted(xs, reverse=True)
""",
}


ONE_CALL = {
    "big-int %": "((1 << 999_000) - 12345) % ((1 << 500_000) - 7)",
    "sorted 2M": "sorted([str(i) for i in range(2_000_000)], reverse=True)",
}
"""Each loop's C call alone, timed outside the sandbox (its set-up included for sorted)."""


def overrun(source: str) -> tuple[float, str]:
    ns = load(compile_code(source))
    started = time.monotonic()
    out = ns.call("f", wall_s=BUDGET_S)
    took = time.monotonic() - started
    return took / BUDGET_S, out.failure.cause if out.failure else "none"


def bfs_cost(repeats: int = 5) -> float:
    plain: dict = {}
    exec(compile(BFS_SOURCE, "<plain>", "exec"), plain)
    ns = load(compile_code(BFS_SOURCE))

    def best(func) -> float:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            func()
            times.append(time.perf_counter() - started)
        return min(times)

    return best(lambda: ns.call("work", wall_s=60)) / best(plain["work"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-speed", action="store_true", help="skip the BFS cost")
    args = parser.parse_args()
    print(f"ticks per clock read: {meter.TICKS_PER_CHECK}; budget {BUDGET_S} s")
    for name, source in SLOW_LOOPS.items():
        started = time.perf_counter()
        eval(ONE_CALL[name])  # noqa: S307 - a constant of this file
        call_s = time.perf_counter() - started
        ratio, cause = overrun(source)
        print(
            f"  {name:10s} stopped after {ratio:6.2f}x its budget ({cause}); "
            f"one call alone: {call_s:.2f} s = {call_s / BUDGET_S:.2f}x the budget"
        )
    if not args.no_speed:
        print(f"  BFS benchmark: sandbox {bfs_cost():.2f}x plain exec (best of 5)")


if __name__ == "__main__":
    main()
