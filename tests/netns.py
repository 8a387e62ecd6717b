"""A second machine on this box, for tests: a network namespace (with its own host name)
joined to the test's own namespace by a veth pair.

Used from inside a process that already runs in a namespace of its own (``unshare -n
--fork``), so nothing here touches the host's network: the veth pair, its addresses and
the second namespace all vanish with that process and with :func:`second_machine`'s holder
process. Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and ``ip``, ``unshare`` and
``nsenter``; :func:`namespaces_available` says whether the machine allows it.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

HEAD_ADDRESS = "10.77.0.1"
WORKER_ADDRESS = "10.77.0.2"
WORKER_HOST = "machine2"


def namespaces_available() -> str:
    """'' where this machine lets a process make network and UTS namespaces and veth
    pairs in them; otherwise why not."""
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    probe = subprocess.run(
        ["unshare", "-n", "-u", "ip", "link", "add", "p0", "type", "veth", "peer", "name", "p1"],
        capture_output=True,
        text=True,
    )
    return "" if probe.returncode == 0 else f"namespaces refused: {probe.stderr.strip()[:200]}"


def _sh(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


@dataclass(frozen=True)
class Machine:
    """The second machine: run a command there with :meth:`argv`."""

    pid: int
    """The process holding its namespaces."""
    address: str
    host: str

    def argv(self, argv: list[str]) -> list[str]:
        return ["nsenter", "-t", str(self.pid), "-n", "-u", "--", *argv]


@contextlib.contextmanager
def second_machine() -> Iterator[Machine]:
    """Call from inside a fresh network namespace: brings up its loopback, gives it
    ``HEAD_ADDRESS`` on one end of a veth pair, and yields a second namespace (host name
    ``WORKER_HOST``) holding the other end with ``WORKER_ADDRESS``."""
    _sh("ip", "link", "set", "lo", "up")
    holder = subprocess.Popen(
        ["unshare", "-n", "-u", "sh", "-c", f"hostname {WORKER_HOST} && exec sleep infinity"]
    )
    try:
        machine = Machine(holder.pid, WORKER_ADDRESS, WORKER_HOST)
        _sh("ip", "link", "add", "rlhead", "type", "veth", "peer", "name", "rlworker")
        _sh("ip", "link", "set", "rlworker", "netns", str(holder.pid))
        _sh("ip", "addr", "add", f"{HEAD_ADDRESS}/24", "dev", "rlhead")
        _sh("ip", "link", "set", "rlhead", "up")
        for step in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "addr", "add", f"{WORKER_ADDRESS}/24", "dev", "rlworker"],
            ["ip", "link", "set", "rlworker", "up"],
        ):
            _sh(*machine.argv(step))
        yield machine
    finally:
        holder.kill()
        holder.wait()
