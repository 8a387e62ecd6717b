"""Measure what the sandbox costs on agent-style code: `python -m sandbox.bench`.

Workload: a breadth-first search over a 64×64 grid (what a path-finding helper in agent
code does), run as
  plain     - ordinary `exec`, no checks (the floor);
  rp        - RestrictedPython's rewrite with pass-through guards (attribute/item/iter calls);
  sandbox   - this package (RestrictedPython + ticks + operator guards + curated builtins);
  settrace  - plain code under a `sys.settrace` line tracer limited to agent frames, the
              usual alternative for interrupting loops (for comparison only).
"""

from __future__ import annotations

import sys
import time

from RestrictedPython import compile_restricted_exec
from RestrictedPython.Guards import guarded_iter_unpack_sequence, guarded_unpack_sequence

from sandbox import compile_code, load

SOURCE = """
from collections import deque

def bfs(size):
    grid = [[(x * 7 + y * 13) % 5 == 0 for x in range(size)] for y in range(size)]
    start = (0, 0)
    dist = {start: 0}
    queue = deque([start])
    while queue:
        x, y = queue.popleft()
        for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nx, ny = x + dx, y + dy
            if 0 <= nx < size and 0 <= ny < size and not grid[ny][nx] and (nx, ny) not in dist:
                dist[(nx, ny)] = dist[(x, y)] + 1
                queue.append((nx, ny))
    return len(dist)

def work():
    total = 0
    for _ in range(20):
        total += bfs(64)
    return total
"""
REPEATS = 5


def _best(func) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        started = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    plain_globals: dict = {}
    exec(compile(SOURCE, "<plain>", "exec"), plain_globals)

    rp_globals = {
        "__builtins__": __builtins__,
        "_getattr_": getattr,
        "_getitem_": lambda ob, i: ob[i],
        "_getiter_": iter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_write_": lambda ob: ob,
        "_inplacevar_": lambda op, x, y: x + y,
    }
    exec(compile_restricted_exec(SOURCE, "<rp>").code, rp_globals)

    ns = load(compile_code(SOURCE, filename="<agent>"))

    def traced() -> None:
        def local(frame, event, arg):
            return local  # the per-line callback a deadline check would live in

        def global_(frame, event, arg):
            return local if frame.f_code.co_filename == "<plain>" else None

        sys.settrace(global_)
        try:
            plain_globals["work"]()
        finally:
            sys.settrace(None)

    results = {
        "plain": _best(plain_globals["work"]),
        "rp": _best(rp_globals["work"]),
        "sandbox": _best(lambda: ns.call("work", wall_s=60.0)),
        "settrace": _best(traced),
    }
    base = results["plain"]
    for name, seconds in results.items():
        print(f"{name:9} {seconds * 1000:8.1f} ms  {seconds / base:5.2f}×")


if __name__ == "__main__":
    main()
