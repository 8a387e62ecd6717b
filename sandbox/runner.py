"""Loading agent code and calling into it under budgets; every failure comes back as a value.

Typical use by the environment actor (in its worker thread, not its event loop):

    compiled = compile_code(source)                  # SandboxError: syntax / forbidden
    outcome = run_policy(compiled, skills, env_step, max_steps=500, wall_s=10.0,
                         allowed_actions=ACTION_NAMES)
    outcome.failure  # None, or Failure(cause=..., detail=..., line=...)

For finer control (coded high-level actions as RL options, reward functions):
`load()` → `Namespace.start(...)` → `PolicyStepper.next_action()`, or `Namespace.call(...)`.
"""

from __future__ import annotations

import dataclasses
import inspect
import keyword
import time
import types
from collections.abc import Callable, Collection, Mapping
from typing import Any

from messages.causes import STEP_BUDGET
from sandbox.compiler import CompiledCode
from sandbox.failures import Failure, SandboxError, clip, describe, format_agent_traceback
from sandbox.guards import Runtime, make_globals
from sandbox.limits import Limits
from sandbox.meter import Abort, Meter
from sandbox.proxy import ReadOnlyProxy, freeze

# A module body only defines functions and constants: 1 s is ~1000× what that takes.
DEFAULT_LOAD_WALL_S = 1.0
# How much of a yielded non-action is quoted back in a failure detail.
ACTION_QUOTE_CHARS = 60
# The longest str a policy's return value may be for the host to keep it.
RETURNED_CHARS = 1000

_OK, _STOP, _FAIL = "ok", "stop", "fail"


@dataclasses.dataclass(frozen=True, slots=True)
class CallOutcome:
    """Result of `Namespace.call`: a value, or the failure that replaced it."""

    value: Any
    """What the function returned (None on failure)."""
    failure: Failure | None
    output: str
    """Everything printed in the namespace so far (bounded)."""


@dataclasses.dataclass(frozen=True, slots=True)
class PolicyOutcome:
    """Result of `run_policy`: what happened to one policy rollout."""

    steps: int
    """Actions passed to `step_fn`."""
    failure: Failure | None
    """None when the policy returned or the episode ended; otherwise why it stopped."""
    output: str
    """What the policy printed (bounded by `Limits.max_output_chars`)."""
    episode_done: bool
    """Whether `step_fn` reported the end of the episode."""
    wall_s: float
    """Wall-clock seconds spent, loading and env steps included."""
    returned: Any = None
    """What the policy returned when it finished by itself, if that is plain data (None,
    a bool, an int, a float or a str of at most `RETURNED_CHARS`); None otherwise. Hosts
    that judge a policy by its own answer (a coded skill's True or False) read it."""


class Namespace:
    """A loaded agent module: its functions, its budgets and its printed output.

    Not thread-safe: drive one namespace from one thread at a time. Agent functions in
    `functions` only run through `call`/`start`; called directly they stop at once
    (their meter is disarmed).
    """

    def __init__(self, compiled: CompiledCode, runtime: Runtime, module_globals: dict):
        self.compiled = compiled
        self._runtime = runtime
        self._meter = runtime.meter
        self._globals = module_globals

    @property
    def functions(self) -> Mapping[str, types.FunctionType]:
        """The agent's top-level functions (live view of the module globals)."""
        return types.MappingProxyType(
            {
                name: value
                for name, value in self._globals.items()
                if isinstance(value, types.FunctionType)
                and value.__code__.co_filename == self.compiled.filename
            }
        )

    @property
    def failure(self) -> Failure | None:
        """The budget or rule violation that stopped this namespace for good, if any."""
        return self._meter.failure

    def output(self) -> str:
        return self._runtime.printed()

    def call(self, name: str, *args: Any, wall_s: float) -> CallOutcome:
        """Call agent function `name` with frozen copies of `args` under `wall_s`."""
        func = self.functions.get(name)
        if func is None:
            failure = Failure("exception", f"the code defines no function {name!r}")
            return CallOutcome(None, failure, self.output())
        frozen = [freeze(a) for a in args]
        status, value = self._invoke(lambda: func(*frozen), time.monotonic() + wall_s, wall_s)
        if status == _FAIL:
            return CallOutcome(None, value, self.output())
        return CallOutcome(value, None, self.output())

    def start(
        self,
        name: str,
        *args: Any,
        allowed_actions: Collection[str] | None,
        deadline: float,
        wall_s: float,
    ) -> PolicyStepper:
        """Begin generator function `name` (e.g. `run(skills)`); args are frozen.

        `deadline` is on `time.monotonic()`'s clock; `wall_s` only names it in messages.
        """
        func = self.functions.get(name)
        if func is None or not inspect.isgeneratorfunction(func):
            what = "no function" if func is None else "a function that never yields, not"
            failure = Failure("exception", f"the code defines {what} a generator {name!r}", None)
            return PolicyStepper(self, None, allowed_actions, deadline, wall_s, failure)
        frozen = [a if isinstance(a, ReadOnlyProxy) else freeze(a) for a in args]
        status, value = self._invoke(lambda: func(*frozen), deadline, wall_s)
        failure = value if status == _FAIL else None
        gen = value if status == _OK else None
        return PolicyStepper(self, gen, allowed_actions, deadline, wall_s, failure)

    # ---- the one place agent code is entered -----------------------------------------

    def _invoke(self, thunk: Callable[[], Any], deadline: float, wall_s: float):
        """Run `thunk` with the meter armed: (_OK, value) | (_STOP, value) | (_FAIL, f)."""
        if self._meter.failure is not None:
            return _FAIL, self._meter.failure
        self._meter.arm(deadline, wall_s)
        try:
            value = thunk()
            status = _OK
        except StopIteration as stop:
            value, status = stop.value, _STOP
        except Abort as exc:
            return _FAIL, self._meter.failure or Failure("timeout", str(exc))
        except RecursionError as exc:
            return _FAIL, self._failure("recursion", exc)
        except MemoryError as exc:
            tb, line = format_agent_traceback(
                exc, self.compiled.filename, self.compiled.source_lines
            )
            return _FAIL, self._meter.refuse_allocation(line, tb)
        except Exception as exc:  # noqa: BLE001 - the agent's own exceptions are results
            return _FAIL, self._failure("exception", exc)
        finally:
            self._meter.disarm()
        if self._meter.failure is not None:  # the agent swallowed an Abort and carried on
            return _FAIL, self._meter.failure
        return status, value

    def _failure(self, cause: Any, exc: BaseException) -> Failure:
        if self._meter.failure is not None:  # a trip came first; the rest is fallout
            return self._meter.failure
        tb, line = format_agent_traceback(exc, self.compiled.filename, self.compiled.source_lines)
        return Failure(cause, describe(exc), line, tb)


class PolicyStepper:
    """One running agent generator, advanced one action at a time by the host.

    `next_action()` returns the next valid action name, or None once the generator has
    finished (`failure` None) or failed (`failure` set). Always `close()` it (run_policy
    does): that runs the generator's cleanup with the meter disarmed, so a `finally:` that
    loops is stopped at once.
    """

    def __init__(
        self,
        namespace: Namespace,
        gen: Any,
        allowed_actions: Collection[str] | None,
        deadline: float,
        wall_s: float,
        failure: Failure | None = None,
    ):
        self._ns = namespace
        self._gen = gen
        self._allowed = None if allowed_actions is None else frozenset(allowed_actions)
        self.deadline = deadline
        self.wall_s = wall_s
        self.failure = failure
        self.finished = gen is None
        self.returned: Any = None
        """What the generator returned (`PolicyOutcome.returned`), once it has."""

    def next_action(self) -> str | None:
        if self.finished:
            return None
        status, value = self._ns._invoke(lambda: next(self._gen), self.deadline, self.wall_s)
        if status == _OK:
            failure = self._check_action(value)
            if failure is None:
                return value
        else:
            failure = value if status == _FAIL else None
            if status == _STOP:
                self.returned = _plain(value)
        self.failure = failure
        self.finished = True
        self.close()
        return None

    def _check_action(self, action: Any) -> Failure | None:
        line = _suspended_line(self._gen)
        if type(action) is not str:
            return Failure(
                "invalid_action",
                f"yielded a {type(action).__name__}, not an action name (a str)",
                line,
            )
        if self._allowed is not None and action not in self._allowed:
            quoted = clip(repr(action[:ACTION_QUOTE_CHARS]), ACTION_QUOTE_CHARS + 2)
            return Failure("invalid_action", f"yielded {quoted}, not an allowed action", line)
        return None

    def close(self) -> None:
        gen, self._gen = self._gen, None
        self.finished = True
        if gen is None:
            return
        try:
            gen.close()  # meter disarmed: any loop in a finally/except stops at its tick
        except (Exception, Abort):  # noqa: BLE001 - cleanup of failed agent code
            pass


def _plain(value: Any) -> Any:
    """``value`` if it is plain data a host may keep, else None: agent objects (its
    functions, generators, containers of any size) stay in the namespace."""
    if value is None or type(value) in (bool, int, float):
        return value
    if type(value) is str and len(value) <= RETURNED_CHARS:
        return value
    return None


def _suspended_line(gen: Any) -> int | None:
    # Host-side read of the generator's frame (agent code cannot reach gi_frame).
    frame = getattr(gen, "gi_frame", None)
    return frame.f_lineno if frame is not None else None


def load(
    compiled: CompiledCode,
    *,
    api_names: Mapping[str, Any] | None = None,
    wall_s: float = DEFAULT_LOAD_WALL_S,
    limits: Limits | None = None,
) -> Namespace:
    """Run the module body of `compiled` in a fresh sandboxed namespace.

    `api_names` are extra globals for the agent (e.g. constants or the skill API); each is
    frozen (copies / read-only proxies). Raises `SandboxError` if the module body fails.
    """
    limits = limits or Limits()
    meter = Meter(compiled.filename, limits.memory_bytes)
    runtime = Runtime(meter, limits)
    module_globals = make_globals(runtime)
    for name, value in (api_names or {}).items():
        if not name.isidentifier() or name.startswith("_") or keyword.iskeyword(name):
            raise ValueError(f"api name {name!r} must be a public identifier")
        module_globals[name] = value if isinstance(value, ReadOnlyProxy) else freeze(value)
    ns = Namespace(compiled, runtime, module_globals)
    status, value = ns._invoke(
        lambda: exec(compiled.code, module_globals), time.monotonic() + wall_s, wall_s
    )
    if status == _FAIL:
        raise SandboxError(value.cause, value.detail, value.line, value.traceback)
    return ns


def run_policy(
    compiled: CompiledCode,
    skills: Any,
    step_fn: Callable[[str], bool],
    *,
    max_steps: int,
    wall_s: float,
    allowed_actions: Collection[str],
    entry: str = "run",
    api_names: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
) -> PolicyOutcome:
    """Load `compiled` and drive `entry(skills)` against `step_fn` until it returns, the
    episode ends, or a budget or rule stops it.

    `skills` is wrapped in a `ReadOnlyProxy` (public methods only). `step_fn(action)` is
    the caller's environment step and returns whether the episode is done; exceptions
    from it propagate (they are host bugs, not agent failures). `wall_s` covers loading,
    the agent's code and the env steps.
    """
    start = time.monotonic()
    deadline = start + wall_s
    try:
        ns = load(compiled, api_names=api_names, wall_s=wall_s, limits=limits)
    except SandboxError as err:
        return PolicyOutcome(0, err.failure, "", False, time.monotonic() - start)

    api = skills if isinstance(skills, ReadOnlyProxy) else ReadOnlyProxy(skills)
    stepper = ns.start(
        entry, api, allowed_actions=allowed_actions, deadline=deadline, wall_s=wall_s
    )
    steps, done, failure = 0, False, None
    try:
        # ALGO LOGIC: one agent resumption, one check, one env step.
        while True:
            action = stepper.next_action()
            if action is None:
                failure = stepper.failure
                break
            if steps >= max_steps:
                failure = Failure(
                    STEP_BUDGET,
                    f"still acting after the budget of {max_steps} steps",
                    _suspended_line(stepper._gen),
                )
                break
            steps += 1
            done = bool(step_fn(action))
            if done:
                break
            if time.monotonic() > deadline:  # slow env steps count against the budget too
                failure = Failure("timeout", f"wall-clock budget of {wall_s:g} s exceeded")
                break
    finally:
        stepper.close()
    return PolicyOutcome(
        steps, failure, ns.output(), done, time.monotonic() - start, stepper.returned
    )
