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

import math
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


CGROUP = Path("/sys/fs/cgroup")
"""Where the cgroup file system is mounted (v2's unified tree, or v1's controllers)."""


def available_cores() -> int:
    """Cores this process may use: :func:`usable_cores`' count."""
    return usable_cores()[0]


def usable_cores(
    cgroup: Path = CGROUP, self_cgroup: Path = PROC / "self" / "cgroup"
) -> tuple[int, str]:
    """How many cores this process may keep busy, and where that number came from.

    The cores it may run on (``os.sched_getaffinity``; ``os.cpu_count()`` where that does
    not exist), lowered to a cgroup CPU quota rounded up when one is set: cgroup v2's
    ``cpu.max`` (``QUOTA PERIOD``, or ``max`` for none) of this process's cgroup and of
    each cgroup above it, else cgroup v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``.
    A container limited to 1.5 CPUs on a 16-core machine gets 2. Unreadable or odd cgroup
    files count as no quota. The source names what decided: ``affinity``, ``cpu_count``
    or ``cgroup cpu.max``/``cgroup cpu.cfs_quota_us`` (with the quota in cores)."""
    try:
        cores, source = len(os.sched_getaffinity(0)), "affinity"
    except (AttributeError, OSError):
        cores, source = os.cpu_count() or 1, "cpu_count"
    quota = _cgroup_quota(cgroup, self_cgroup)
    if quota is not None and math.ceil(quota[0]) < cores:
        cores = max(1, math.ceil(quota[0]))
        source = f"{quota[1]} ({quota[0]:g} {'core' if quota[0] == 1 else 'cores'})"
    return max(1, cores), source


def _cgroup_quota(cgroup: Path, self_cgroup: Path) -> tuple[float, str] | None:
    """The tightest CPU quota in cores over this process's cgroups (None: no quota)."""
    folders = [cgroup]
    try:
        for line in self_cgroup.read_text().splitlines():
            if line.startswith("0::/"):  # v2: its own cgroup and every one above it
                own = Path(line[4:].strip())
                folders += [cgroup / p for p in (own, *own.parents) if str(p) != "."]
    except OSError:
        pass
    quotas: list[float] = []
    for folder in folders:
        try:
            quota, period = (folder / "cpu.max").read_text().split()[:2]
            share = float(quota) / float(period) if quota != "max" else math.nan
            if math.isfinite(share) and share > 0:
                quotas.append(share)
        except (OSError, ValueError, ZeroDivisionError):
            continue
    if quotas:
        return min(quotas), "cgroup cpu.max"
    try:
        quota = float((cgroup / "cpu" / "cpu.cfs_quota_us").read_text())
        period = float((cgroup / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    if quota > 0 and period > 0 and math.isfinite(quota / period):
        return quota / period, "cgroup cpu.cfs_quota_us"
    return None
