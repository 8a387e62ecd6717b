"""CPU time of a process tree (:mod:`runtime.cpu`): live children, grandchildren and
reaped children all count; processes outside the tree do not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from runtime.cpu import available_cores, tree_cpu_seconds

# Burns about `s` seconds of CPU, in a grandchild when asked.
BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"
NEST = "import subprocess, sys\nsubprocess.run([sys.executable, '-c', {code!r}])\n"


def test_the_tree_counts_children_grandchildren_and_reaped_ones() -> None:
    before = tree_cpu_seconds()
    nested = subprocess.Popen([sys.executable, "-c", NEST.format(code=BURN.format(s=0.6))])
    direct = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.6)])
    direct.wait()  # reaped: counted in this process's children's times
    time.sleep(0.05)
    # The grandchild still runs (or has been reaped by its parent): its time counts too.
    deadline = time.monotonic() + 30
    while nested.poll() is None and tree_cpu_seconds() - before < 1.1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    nested.wait()
    assert tree_cpu_seconds() - before >= 1.15


def test_a_process_outside_the_tree_does_not_count() -> None:
    # A detached burner: started by a shell that exits at once, so init adopts it.
    outside = subprocess.run(
        ["sh", "-c", f"{sys.executable} -c '{BURN.format(s=1.0)}' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
    )
    pid = int(outside.stdout.strip())
    before = tree_cpu_seconds()
    time.sleep(0.8)
    mine = tree_cpu_seconds() - before
    try:
        assert mine < 0.4  # this test process sleeps; the burner is not ours
    finally:
        subprocess.run(["kill", str(pid)], capture_output=True)


def test_cores() -> None:
    """The cores this process may run on, lowered by a cgroup quota if any: at least one
    and never more than its affinity allows."""
    assert 1 <= available_cores() <= len(os.sched_getaffinity(0))
