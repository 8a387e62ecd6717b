"""The sandbox's memory budget holds for every allocation policy code can cause.

The RSS check between ticks cannot see inside one C call: `str(big_list)` or
`dict.fromkeys(enumerate(xs))` allocates gigabytes before the next tick. In a process
confined with `sandbox.confine_memory` (the rollout runner, the training env workers)
each call into agent code runs under an address-space cap of its budget. These tests run
real policy code in a real child process, as the runner does, and read the child's peak
resident memory from the kernel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

BUDGET_MIB = 64
# What the child may map past its budget: the cap's slack (16 MiB) and the interpreter's
# own bookkeeping of a failed call (a traceback, the freed partial object's arenas).
MARGIN_MIB = 48

# One policy per way of allocating in one call or a few: each asks for far more than the
# budget. (`bytearray` and `bytes` are not offered to policy code at all.)
ALLOCATORS = {
    "dict.fromkeys": "d = dict.fromkeys(enumerate([0] * 2_000_000))",
    "list repetition": "d = [xs * 1 for i in range(200)]",
    "str.join": "d = ','.join([s] * 2_000)",
    "str of a list": "d = str([s] * 2_000)",
    "big ints": "n = 7 ** 300_000\n    d = [n + i for i in range(20_000)]",
    "zip of lists": "d = list(zip(xs, xs, xs, xs))",
}

POLICY = """
def f():
    xs = [0] * 2_000_000
    s = 'x' * 1_000_000
    {line}
    return len(d)
"""

# The child: confined as the runner is, it runs each policy under a small budget and
# reports its cause and how far its resident memory rose above where the call began.
CHILD = """
import json, sys
from sandbox import Limits, compile_code, confine_memory, load

def peak_rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))

def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))

if sys.argv[1] == "confined":
    confine_memory()
source, budget = sys.argv[2], int(sys.argv[3])
ns = load(compile_code(source), limits=Limits(memory_bytes=budget))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from here
base = rss()
out = ns.call("f", wall_s=30)
failure = out.failure
# The process that ran it goes on: a fresh namespace still runs honest code.
after = load(compile_code("def g():\\n    return sum(range(1000))\\n")).call("g", wall_s=5)
print(json.dumps({
    "cause": failure.cause if failure else None,
    "detail": failure.detail if failure else "",
    "grown_mib": (peak_rss() - base) / 2**20,
    "after": after.value,
}))
"""


def _run(mode: str, line: str) -> dict:
    source = textwrap.dedent(POLICY).format(line=line)
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, mode, source, str(BUDGET_MIB * 2**20)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, (line, proc.returncode, proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", list(ALLOCATORS))
def test_a_confined_policy_that_allocates_past_its_budget_fails_with_memory_and_the_process_goes_on(
    name: str,
) -> None:
    seen = _run("confined", ALLOCATORS[name])
    assert seen["cause"] == "memory", (name, seen)
    assert seen["grown_mib"] <= BUDGET_MIB + MARGIN_MIB, (name, seen)
    assert seen["after"] == 499500


def test_an_allocation_refused_by_the_cap_names_the_budget() -> None:
    seen = _run("confined", ALLOCATORS["str of a list"])
    assert seen["detail"] == (
        f"an allocation was refused: it would pass the memory budget of {BUDGET_MIB} MiB"
    )


def test_honest_code_under_the_cap_runs_as_without_it() -> None:
    # A table of 100k entries (a few MiB) is well inside the budget either way.
    line = "d = {i: i * 2 for i in range(100_000)}"
    assert _run("confined", line)["cause"] is None
    assert _run("plain", line)["cause"] is None
