"""What agent code may hold of host objects: copies of plain data and read-only proxies.

`freeze(value)` turns anything the host hands to agent code (the skill API, snapshots for
reward functions, values skills return) into something that cannot reach back:

- plain data (None, bool, int, float, str, bytes, enums) passes as is;
- containers are copied (list, dict, set stay mutable: mutating a copy is harmless);
- numpy arrays become nested lists and numpy scalars Python numbers (an ndarray has
  `tofile`, `dump` and `ctypes`, which reach files and raw memory);
- generators are relayed through a fresh generator (no `send`/`throw` into host code);
- any other object becomes a `ReadOnlyProxy` exposing only the public methods of its class
  (plus the fields of a dataclass, frozen), never data attributes such as `.world`.
"""

from __future__ import annotations

import dataclasses
import enum
import types
from collections.abc import Callable, Generator
from typing import Any

from sandbox.guards import nested_deeper_than
from sandbox.limits import Limits

_PLAIN = (type(None), bool, int, float, complex, str, bytes, range)
# Exception types a skill may raise that are re-raised as themselves; any other type is
# re-raised as RuntimeError. Either way only the message crosses (not args or .obj, which
# may reference host objects).
_PASSING_EXCEPTIONS = (
    ValueError, TypeError, KeyError, IndexError, LookupError, AttributeError,
    RuntimeError, ZeroDivisionError, ArithmeticError, StopIteration, NotImplementedError,
)  # fmt: skip
# Host data is shallow: deeper nesting is refused rather than walked without end.
MAX_FREEZE_DEPTH = 32
# Tuples agent code passes to host methods may be hashed there (`kind in TABLE`): the same
# bound as hashing inside agent code (`Limits.max_nesting`).
MAX_ARGUMENT_NESTING = Limits().max_nesting


def freeze(value: Any, _depth: int = 0) -> Any:
    """A copy of `value` agent code can hold without reaching back into the host."""
    if type(value) in _PLAIN or isinstance(value, enum.Enum):
        return value
    if _depth > MAX_FREEZE_DEPTH:
        raise ValueError("host value nested too deeply to hand to agent code")
    d = _depth + 1
    if isinstance(value, ReadOnlyProxy):
        return value
    if isinstance(value, tuple):
        items = [freeze(v, d) for v in value]
        if hasattr(value, "_fields"):  # namedtuple: keep field access
            return type(value)(*items)
        return tuple(items)
    if isinstance(value, list):
        return [freeze(v, d) for v in value]
    if isinstance(value, dict):
        return {freeze(k, d): freeze(v, d) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        items = (freeze(v, d) for v in value)
        return set(items) if isinstance(value, set) else frozenset(items)
    if isinstance(value, (bool, int, float, complex, str, bytes)):  # subclasses, np.float64
        return _base_plain(value)
    module = type(value).__module__
    if module == "numpy" or module.startswith("numpy."):
        return freeze(value.tolist(), _depth)  # ndarray → lists, numpy scalar → number
    if isinstance(value, Generator):
        return _relay(value)
    if callable(value) and not isinstance(value, type):
        return _wrap_callable(value)
    return ReadOnlyProxy(value)


def _base_plain(value: Any) -> Any:
    for base in (bool, int, float, complex, str, bytes):
        if isinstance(value, base):
            return base(value)
    return value


def _relay(gen: Generator[Any, Any, Any]) -> Generator[Any, None, Any]:
    """Yield what `gen` yields; values sent in are dropped, so host code sees none."""
    result = None
    try:
        while True:
            try:
                item = next(gen)
            except StopIteration as stop:
                result = stop.value
                break
            except Exception as exc:  # noqa: BLE001 - re-raised, stripped of host objects
                raise _sanitized(exc) from None
            yield freeze(item)
    finally:
        gen.close()
    return freeze(result)


def _sanitized(exc: Exception) -> Exception:
    kind = type(exc) if type(exc) in _PASSING_EXCEPTIONS else RuntimeError
    try:
        message = str(exc)[:500]
    except Exception:  # noqa: BLE001 - unprintable host exception
        message = "<unprintable>"
    return kind(message)


def _wrap_callable(func: Callable[..., Any]) -> Callable[..., Any]:
    # A plain closure: the agent cannot read its cell (dunders are refused), unlike a bound
    # method's `__self__` or a partial's `.func`.
    def call(*args: Any, **kwargs: Any) -> Any:
        for arg in (*args, *kwargs.values()):
            if type(arg) is tuple and nested_deeper_than(arg, MAX_ARGUMENT_NESTING):
                raise RecursionError(
                    f"an argument nested more than {MAX_ARGUMENT_NESTING} deep cannot be "
                    "passed to the host (hashing it would overflow the C stack)"
                )
        try:
            result = func(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - re-raised, stripped of host objects
            raise _sanitized(exc) from None
        return freeze(result)

    call.__name__ = getattr(func, "__name__", "skill")
    return call


def _public_methods(cls: type) -> frozenset[str]:
    names = set()
    for klass in cls.__mro__:
        if klass is object:
            continue
        for name, attr in vars(klass).items():
            if not name.startswith("_") and isinstance(
                attr, (types.FunctionType, staticmethod, classmethod)
            ):
                names.add(name)
    return frozenset(names)


class ReadOnlyProxy:
    """Agent-side view of a host object: its public methods (results frozen), nothing else.

    Attribute writes and deletes raise; `_`-names are refused both here and by the
    sandbox's attribute guard, so the wrapped object stays out of reach.
    """

    __slots__ = ("_target", "_names", "_fields", "_cache")

    def __init__(self, target: Any):
        cls = type(target)
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_names", _public_methods(cls))
        fields = ()
        if dataclasses.is_dataclass(target):
            fields = tuple(f.name for f in dataclasses.fields(target) if f.name[:1] != "_")
        object.__setattr__(self, "_fields", frozenset(fields))
        object.__setattr__(self, "_cache", {})

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not in __slots__ (the slots start with "_" and are
        # refused by the sandbox before Python ever looks them up).
        if name.startswith("_"):
            raise AttributeError(name)
        cache = object.__getattribute__(self, "_cache")
        if name in cache:
            return cache[name]
        target = object.__getattribute__(self, "_target")
        if name in object.__getattribute__(self, "_names"):
            value = _wrap_callable(getattr(target, name))
            cache[name] = value
            return value
        if name in object.__getattribute__(self, "_fields"):
            return freeze(getattr(target, name))
        raise AttributeError(f"{type(target).__name__!r} offers no public method {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("read-only")

    def __dir__(self) -> list[str]:
        return sorted(object.__getattribute__(self, "_names"))

    def __repr__(self) -> str:
        return f"<read-only {type(object.__getattribute__(self, '_target')).__name__}>"
