"""Wall-clock and memory budgets for agent code: a cheap `tick` the compiler plants in it.

Mechanism (chosen over the alternatives; see sandbox/README.md):
the compiler inserts a call `_tick_()` at the top of every function body, loop body and
`except` handler, and as an always-true condition in every comprehension. Every
`TICKS_PER_CHECK` ticks the meter reads the monotonic clock; every `TICKS_PER_MEMORY_CHECK`
ticks (or sooner when guarded operations report big allocations) it reads the process's
resident set size. In a process that runs policy code and nothing else (:func:`confine_memory`,
called by the rollout runner and the training env workers), every call into agent code
also runs under an address-space cap of what the process maps plus the budget, so one C
call that allocates gigabytes (`str(big_list)`, `dict.fromkeys(enumerate(xs))`) gets a
`MemoryError` at the budget instead of after it. Over budget, it *trips*: it records a
`Failure` and raises `Abort`.
Tripping is sticky: every later tick raises again, so agent code that swallows `Abort` with
a bare `except:` or `finally: return` is stopped at its next loop iteration, call or
handler, and the driver reads the recorded failure whatever the agent did with the
exception.
"""

from __future__ import annotations

import os
import resource
import threading
import time

from sandbox.failures import Cause, Failure, agent_line_of_caller

# A tick is ~60 ns; 256 trivial loop iterations take ~30 µs, so a timeout is seen within
# microseconds of the deadline while the clock read (~50 ns) costs < 1 % of tick time.
# Ticks separated by slow C calls are the watchdog's (see `_Watchdog`): 256 of them could
# each hold a bounded but long call (a 1M-bit `%`: ~1 s).
TICKS_PER_CHECK = 256
# Reading /proc/self/statm costs a few µs: every 16 clock checks (~4k ticks) keeps that
# near 1 % on tight loops. Big allocations force an earlier check (see `note_alloc`).
CLOCK_CHECKS_PER_MEMORY_CHECK = 16
# Estimated bytes allocated by guarded operations after which memory is re-read at once,
# so a loop of large allocations cannot run far past the budget between periodic checks.
ALLOC_BYTES_PER_MEMORY_CHECK = 16 * 2**20


# How often the watchdog looks at the armed meters' deadlines: the most a timeout is seen
# late beyond the C call under way; 100 wake-ups a second cost well under 1 % of a core.
WATCHDOG_POLL_S = 0.01


class _Watchdog:
    """One daemon thread per process that makes an armed meter read its clock at the next
    tick once its deadline has passed (it sets the tick's countdown to zero).

    The tick itself reads the clock only every `TICKS_PER_CHECK` ticks, which is cheap
    while ticks are cheap; but agent code can put one slow C call between two ticks, and
    256 calls of a second each would run minutes past a budget of seconds. The watchdog
    cannot interrupt a C call (it needs the GIL the call holds) and raises nothing into
    agent code: it runs as soon as the call returns (Python hands the GIL over at the next
    bytecode after a 5 ms switch interval) and the agent's own next tick trips, at a
    point the sandbox controls. So a budget is overrun by the C call under way at most,
    plus `WATCHDOG_POLL_S`."""

    def __init__(self) -> None:
        self.armed: dict[int, Meter] = {}
        self._pid = 0
        self._lock = threading.Lock()

    def watch(self, meter: Meter) -> None:
        self.armed[id(meter)] = meter
        if self._pid != os.getpid():  # none yet, or a fork's: threads do not survive it
            self._start()

    def unwatch(self, meter: Meter) -> None:
        self.armed.pop(id(meter), None)

    def _start(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            threading.Thread(target=self._run, name="sandbox-watchdog", daemon=True).start()

    def _run(self) -> None:
        monotonic = time.monotonic
        while True:
            time.sleep(WATCHDOG_POLL_S)
            now = monotonic()
            for meter in list(self.armed.values()):
                if meter._armed and now > meter._deadline:
                    meter._reset_tick()  # its next tick reads the clock and trips


_watchdog = _Watchdog()


class Abort(BaseException):  # noqa: N818 - a control-flow signal, not an error
    """Raised into agent code to stop it; a BaseException so `except Exception` passes it."""


def _resident_bytes_reader():
    """A function returning this process's resident set size in bytes (0 if unknown)."""
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    try:
        fd = os.open("/proc/self/statm", os.O_RDONLY)
    except OSError:  # not Linux: memory growth is then bounded only by the operation guards
        return lambda: 0
    os.set_inheritable(fd, False)

    def resident() -> int:
        return int(os.pread(fd, 64, 0).split()[1]) * page

    return resident


resident_bytes = _resident_bytes_reader()


def _mapped_bytes_reader():
    """A function returning the address space this process maps, in bytes (0 if unknown)."""
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    try:
        fd = os.open("/proc/self/statm", os.O_RDONLY)
    except OSError:
        return lambda: 0
    os.set_inheritable(fd, False)

    def mapped() -> int:
        return int(os.pread(fd, 64, 0).split()[0]) * page

    return mapped


mapped_bytes = _mapped_bytes_reader()

# Address space granted beyond the budget: the RSS check (which names the growth) trips
# first on gradual growth, and the allocator's own reservations (a fresh 1 MiB arena, a
# few spare pages of a dict's resize) do not make an honest call fail at the edge.
ADDRESS_SPACE_SLACK = 16 * 2**20


class _AddressSpaceCap:
    """The per-call RLIMIT_AS of a confined process (:func:`confine_memory`).

    RLIMIT_AS is process-wide: it caps every thread, numpy and torch alike, which is why
    only a process whose one job is running policy code turns it on. Calls nest (a
    namespace's call made while another is armed keeps the outer cap); the soft limit
    before the outermost call comes back after it, unless host code changed it meanwhile
    (the runner lifts it to import torch)."""

    def __init__(self) -> None:
        self.on = False
        self._depth = 0
        self._saved = resource.RLIM_INFINITY
        self._set = resource.RLIM_INFINITY

    def enter(self, budget: int) -> None:
        self._depth += 1
        if self._depth > 1:
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        self._saved = soft
        cap = mapped_bytes() + budget + ADDRESS_SPACE_SLACK
        for bound in (soft, hard):
            if bound != resource.RLIM_INFINITY:
                cap = min(cap, bound)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
        self._set = cap

    def leave(self) -> None:
        if self._depth == 0:
            return
        self._depth -= 1
        if self._depth > 0:
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft == self._set:
            resource.setrlimit(resource.RLIMIT_AS, (self._saved, hard))


_address_space = _AddressSpaceCap()


def confine_memory() -> None:
    """Run every later call into agent code in this process under an address-space cap
    of what the process maps at the call's start plus the namespace's memory budget.

    For a process that runs policy code and nothing beside it (one thread at a time in
    agent code): the cap holds for every allocation, C calls included, where the RSS
    check sees growth only between ticks. A `MemoryError` in agent code is its `memory`
    failure. Not for a process with other busy threads (an actor, a learner training):
    they would get the `MemoryError` instead."""
    _address_space.on = True


def memory_confined() -> bool:
    """Whether :func:`confine_memory` was called in this process."""
    return _address_space.on


class Meter:
    """Budget state of one `Namespace`; used by one thread at a time.

    Disarmed (outside `arm`/`disarm`) every tick raises: agent code that runs when the
    host did not ask it to (e.g. a generator's `finally` run by the garbage collector)
    is stopped at once.
    """

    def __init__(self, filename: str, memory_bytes: int):
        self.filename = filename
        self.memory_bytes = memory_bytes
        self.failure: Failure | None = None
        self._deadline = 0.0
        self._wall_s = 0.0
        self._memory_base = 0
        self._alloc_since_check = 0
        self._armed = False
        self._capped = False
        self.tick = self._make_tick()

    def _make_tick(self):
        countdown = 0
        clock_checks = 0
        monotonic = time.monotonic
        meter = self

        # Kept tiny and closure-based: this runs on every loop iteration of agent code.
        def tick() -> bool:
            nonlocal countdown, clock_checks
            countdown -= 1
            if countdown <= 0:
                countdown = TICKS_PER_CHECK
                if meter.failure is not None or not meter._armed:
                    meter._reraise()
                if monotonic() > meter._deadline:
                    meter.trip("timeout", f"wall-clock budget of {meter._wall_s:g} s exceeded")
                clock_checks += 1
                if clock_checks >= CLOCK_CHECKS_PER_MEMORY_CHECK:
                    clock_checks = 0
                    meter.check_memory()
            return True

        def reset() -> None:
            nonlocal countdown
            countdown = 0  # the next tick checks at once

        self._reset_tick = reset
        return tick

    def arm(self, deadline: float, wall_s: float) -> None:
        """Start metering agent code until the monotonic `deadline`."""
        self._deadline = deadline
        self._wall_s = wall_s
        self._memory_base = resident_bytes()
        self._alloc_since_check = 0
        if _address_space.on and not self._capped:
            _address_space.enter(self.memory_bytes)
            self._capped = True
        self._armed = True
        self._reset_tick()
        _watchdog.watch(self)

    def disarm(self) -> None:
        self._armed = False
        _watchdog.unwatch(self)
        if self._capped:
            self._capped = False
            _address_space.leave()
        self._reset_tick()

    def refuse_allocation(self, line: int | None, traceback: str) -> Failure:
        """The `memory` failure of a `MemoryError` in agent code (an allocation the
        address-space cap or the OS refused), sticky like a trip: a namespace whose
        allocation failed half-way is not trusted to go on."""
        if self.failure is None:
            self.failure = Failure(
                "memory",
                f"an allocation was refused: it would pass the memory budget of "
                f"{self.memory_bytes // 2**20} MiB",
                line,
                traceback,
            )
        return self.failure

    def trip(self, cause: Cause, detail: str) -> None:
        """Record the first failure and raise `Abort` into the agent's code."""
        if self.failure is None:
            self.failure = Failure(cause, detail, agent_line_of_caller(self.filename))
        self._reset_tick()
        raise Abort(self.failure.cause)

    def _reraise(self) -> None:
        self._reset_tick()
        raise Abort(self.failure.cause if self.failure else "not running")

    def note_alloc(self, nbytes: int) -> None:
        """Guarded operations report the estimated size of what they create."""
        self._alloc_since_check += nbytes
        if self._alloc_since_check >= ALLOC_BYTES_PER_MEMORY_CHECK:
            self.check_memory()

    def check_memory(self) -> None:
        self._alloc_since_check = 0
        if not self._armed:
            return
        grown = resident_bytes() - self._memory_base
        if grown > self.memory_bytes:
            self.trip(
                "memory",
                f"memory grew by {grown // 2**20} MiB, over the budget of "
                f"{self.memory_bytes // 2**20} MiB",
            )
