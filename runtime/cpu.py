"""CPU time of a whole process tree, for a run's core utilisation.

A run is a tree of processes: the head, its actor processes (restarted ones included),
their own children (vector-env workers, a runner for untrusted code, a model server).
:func:`tree_cpu_seconds` adds, for every live process of the tree under ``root``, its own
user and system time and that of its children already reaped (Linux ``/proc/<pid>/stat``
fields ``utime``, ``stime``, ``cutime``, ``cstime``), so a child that ran and exited still
counts through its parent. Time of a process that exited and was never waited for is
lost (a brief window at most). Busy core-seconds over ``cores × wall`` is the share of
the machine a run kept busy.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds incl. reaped children) of ``pid``, or None if it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    # fields[0] is the state (field 3): ppid is field 4, utime..cstime fields 14-17.
    ppid = int(fields[1])
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ppid, ticks / _TICKS


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds used so far by ``root`` (default: this process) and every live
    descendant, with the reaped children of each; 0.0 where ``/proc`` is missing."""
    root = os.getpid() if root is None else root
    if not PROC.is_dir():
        return 0.0
    parents: dict[int, int] = {}
    seconds: dict[int, float] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        got = _stat(int(entry.name))
        if got is not None:
            parents[int(entry.name)], seconds[int(entry.name)] = got
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += seconds.get(pid, 0.0)
        stack.extend(children.get(pid, ()))
    return total


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
