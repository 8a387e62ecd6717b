"""The runtime half of the sandbox: the globals agent code runs with.

RestrictedPython's compiler rewrites attribute reads, item reads, iteration, writes, `print`
and augmented assignment into calls of `_getattr_`, `_getitem_`, `_getiter_`, `_write_`,
`_print_` and `_inplacevar_`; our compiler adds `_tick_` and the operator guards
(`_mul_`, `_pow_`, `_lshift_`, `_add_`, `_mod_`). This module supplies all of them, a
curated set of builtins and curated stand-ins for the allow-listed modules.

A guard that refuses something calls `Meter.trip`, which records the failure and raises
`Abort`; the failure sticks even if the agent catches the exception.
"""

from __future__ import annotations

import builtins
import collections
import functools
import heapq
import itertools
import math
import operator
import random
import re
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from RestrictedPython.transformer import INSPECT_ATTRIBUTES

from sandbox.limits import Limits
from sandbox.meter import Meter

# Modules agent code may import. Each maps to a curated stand-in built below, never to the
# real module (whose attributes reach file, process and interpreter internals).
ALLOWED_MODULES = frozenset(
    {"math", "random", "itertools", "collections", "functools", "operator", "heapq"}
)

# Attribute names refused on every object, on top of `_*` and RestrictedPython's
# INSPECT_ATTRIBUTES (frames, code, tracebacks): `format`/`format_map` walk attributes
# inside the format string ("{0.__class__}"), `mro` lists classes up to `object`.
FORBIDDEN_ATTRIBUTES = frozenset({"format", "format_map", "mro"})

_REFUSED_ATTRIBUTES = FORBIDDEN_ATTRIBUTES | INSPECT_ATTRIBUTES
_SIZED_STRING_TYPES = (str, bytes)
_NUMBER_TYPES = frozenset({int, float, bool, complex})
_MISSING = object()
# Attribute names already checked are cached (agent code uses a few dozen); the cap only
# stops a program that generates names from growing the cache without end.
_MAX_CACHED_NAMES = 10_000
# Containers agent code builds and may write items into.
_WRITABLE_TYPES = (dict, list, set, collections.deque)
# Hash floods: distinct values that share one hash (ints k·(2**61 - 1) + c, complex
# numbers, crafted tuples) make every insert into a set or dict compare against all the
# earlier ones, so one `set(values)` of 60k of them holds the GIL for ~30 s in C. A bulk
# build of more than FLOOD_CHECK_ITEMS keys is scanned first (below that the worst case,
# 4096²/2 compares, takes ~0.1 s), and refused when more than MAX_ALIKE_HASHES unequal
# keys share one hash: legitimate data has at most a pair (-1 and -2 hash alike), while
# 8 per hash caps the build's compares at 8 per key.
FLOOD_CHECK_ITEMS = 4096
MAX_ALIKE_HASHES = 8
# Cost units of one step of a modular power beyond the digit products: call overhead of
# CPython's long_pow loop, so a small modulus with a huge exponent is priced too
# (measured: 1M exponent bits with a 61-bit modulus ~0.15 s).
_POW_STEP_OVERHEAD = 256
# Bits per character of `int(text, base)` for base 0 (the prefix decides: hex is the
# densest that is not capped by Python's 4300-digit limit on decimal strings).
_BITS_PER_CHAR_BASE_0 = 4
# `%` conversion specs; their width/precision digits are checked against the limit.
_PERCENT_SPEC = re.compile(rb"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


class Runtime:
    """Guards bound to one namespace's meter and limits."""

    def __init__(self, meter: Meter, limits: Limits):
        self.meter = meter
        self.limits = limits
        self.output: list[str] = []
        self.output_chars = 0
        self._public_names: set[str] = set()
        self.random = random.Random()  # per namespace: agent seeding never touches the host

    # ---- refusing --------------------------------------------------------------------

    def forbid(self, detail: str) -> None:
        self.meter.trip("forbidden", detail)

    def too_big(self, detail: str) -> None:
        self.meter.trip("memory", detail)

    def _items(self, count: int, what: str) -> None:
        if count > self.limits.max_items:
            self.too_big(
                f"{what} would have {count} items, over the limit of {self.limits.max_items}"
            )
        if count > 4096:  # small results are not worth accounting
            self.meter.note_alloc(count * 8)

    def _bits(self, bits: int, what: str) -> None:
        if bits > self.limits.max_int_bits:
            self.too_big(
                f"{what} would be a {bits}-bit integer, over the limit of "
                f"{self.limits.max_int_bits} bits"
            )

    def too_slow(self, detail: str) -> None:
        # One C call cannot be interrupted by the meter: predicted overruns are refused
        # up front and reported as the timeout they would have become.
        self.meter.trip("timeout", detail)

    # ---- hashing: nesting depth and floods --------------------------------------------

    def key(self, value: Any) -> Any:
        """`value`, after checking it can be hashed without overflowing the C stack."""
        if type(value) is tuple and nested_deeper_than(value, self.limits.max_nesting):
            self.meter.trip(
                "recursion",
                f"a tuple nested more than {self.limits.max_nesting} deep cannot be hashed "
                "(hashing it recurses in C); keep nesting shallow or use a list",
            )
        return value

    def hash(self, value: Any) -> int:
        return hash(self.key(value))

    def getitem(self, obj: Any, key: Any) -> Any:
        if type(key) is tuple:
            self.key(key)
        return obj[key]

    def keys(self, items: Any, what: str) -> Any:
        """`items` (materialized if lazy) after checking a set or dict can be built from
        them in one C call: no key nested too deep, no flood of unequal keys that hash
        alike. Returns what the caller should build from."""
        if isinstance(items, (set, frozenset, dict, str, bytes, range)):
            return items  # already distinct hashed keys, or keys that cannot collide
        if not isinstance(items, (list, tuple)):
            items = list(items)  # what the build would hold anyway; lazy sources tick
        if tuple in map(type, items):
            for item in items:
                if type(item) is tuple:
                    self.key(item)
        if len(items) > FLOOD_CHECK_ITEMS:
            self._check_flood(items, what)
        return items

    def _check_flood(self, items: list[Any] | tuple[Any, ...], what: str) -> None:
        hashes = list(map(hash, items))
        counts = collections.Counter(hashes)
        if max(counts.values()) <= MAX_ALIKE_HASHES:
            return
        heavy = {h for h, n in counts.items() if n > MAX_ALIKE_HASHES}
        groups: dict[int, list[Any]] = collections.defaultdict(list)
        for item, h in zip(items, hashes, strict=True):
            if h in heavy:
                groups[h].append(item)
        for group in groups.values():
            if group.count(group[0]) != len(group):  # unequal keys sharing one hash
                self.too_slow(
                    f"{what} from {len(items)} keys of which {len(group)} share one hash "
                    "but are not all equal: building it would take quadratic time; use "
                    "smaller numbers or strings as keys"
                )

    def bulk_pairs(self, pairs: Any, what: str) -> Any:
        """Like `keys` for a dict built from (key, value) pairs; returns the pairs."""
        if isinstance(pairs, dict) or hasattr(pairs, "keys"):
            return pairs  # a mapping: its keys are already distinct
        pairs = pairs if isinstance(pairs, (list, tuple)) else list(pairs)
        keys = [p[0] for p in pairs if type(p) in (tuple, list) and len(p) == 2]
        self.keys(keys, what)
        return pairs

    # ---- operators (planted by our compiler) ----------------------------------------

    def check_mul(self, a: Any, b: Any) -> None:
        if isinstance(a, int) and isinstance(b, int):
            if a and b:
                self._bits(abs(a).bit_length() + abs(b).bit_length(), "a product")
        elif isinstance(b, int) and hasattr(a, "__len__"):
            self._items(len(a) * b, f"repeating a {type(a).__name__}")
        elif isinstance(a, int) and hasattr(b, "__len__"):
            self._items(len(b) * a, f"repeating a {type(b).__name__}")

    def check_pow(self, a: Any, b: Any) -> None:
        if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
            # Estimate from bit_length without computing the power.
            self._bits((abs(a).bit_length() - 1) * b, "a power")

    def check_lshift(self, a: Any, b: Any) -> None:
        if isinstance(a, int) and isinstance(b, int) and a and b > 0:
            self._bits(abs(a).bit_length() + b, "a shift")

    def check_add(self, a: Any, b: Any) -> None:
        if isinstance(a, (int, float)):
            return
        if hasattr(a, "__len__") and hasattr(b, "__len__"):
            self._items(len(a) + len(b), f"concatenating {type(a).__name__}s")

    def check_mod(self, a: Any, b: Any) -> None:
        if isinstance(a, _SIZED_STRING_TYPES):
            pattern = a.encode("utf-8", "replace") if isinstance(a, str) else a
            for match in _PERCENT_SPEC.finditer(pattern):
                for number in match.groups():
                    if number == b"*":
                        self.forbid("'*' widths in %-formatting are not allowed")
                    if number is not None and int(number) > self.limits.max_format_width:
                        self.too_big(f"%-format width {int(number)} is over the limit")

    # Each operator has a fast path for the overwhelmingly common case (small numbers),
    # since these run on every `*`, `+`, `%` ... of agent code.

    def mul(self, a: Any, b: Any) -> Any:
        ta, tb = type(a), type(b)
        if ta is float or tb is float:
            return a * b
        if ta is int and tb is int:
            if a.bit_length() + b.bit_length() > self.limits.max_int_bits:
                self.check_mul(a, b)
            return a * b
        self.check_mul(a, b)
        return a * b

    def pow(self, a: Any, b: Any, mod: Any = None) -> Any:
        if mod is not None:
            self.check_modular_pow(a, b, mod)  # the result is smaller than mod, not cheaper
            return pow(a, b, mod)
        self.check_pow(a, b)
        return a**b

    def check_modular_pow(self, a: Any, b: Any, mod: Any) -> None:
        if not (isinstance(a, int) and isinstance(b, int) and isinstance(mod, int)):
            return  # floats and others raise TypeError in pow itself
        # CPython squares and reduces once per exponent bit; each reduction is a schoolbook
        # division, quadratic in the modulus's 30-bit digits.
        digits = abs(mod).bit_length() // 30 + 1
        work = abs(b).bit_length() * (digits * digits + _POW_STEP_OVERHEAD)
        work += abs(a).bit_length() // 30 * digits  # reducing the base once
        if work > self.limits.max_int_work:
            self.too_slow(
                f"pow(a, b, m) with a {abs(b).bit_length()}-bit exponent and a "
                f"{abs(mod).bit_length()}-bit modulus would run for a long time in one C call "
                f"(cost ~{work:.1e}, over the limit of {self.limits.max_int_work:.1e}); "
                "use smaller numbers"
            )

    def lshift(self, a: Any, b: Any) -> Any:
        self.check_lshift(a, b)
        return a << b

    def add(self, a: Any, b: Any) -> Any:
        if type(a) in _NUMBER_TYPES:
            return a + b
        self.check_add(a, b)
        return a + b

    def mod(self, a: Any, b: Any) -> Any:
        if type(a) in _NUMBER_TYPES:
            return a % b
        self.check_mod(a, b)
        return a % b

    def inplacevar(self, op: str, x: Any, y: Any) -> Any:
        check = self._inplace_checks.get(op)
        if check is not None:
            check(self, x, y)
        return _INPLACE_OPS[op](x, y)

    _inplace_checks: dict[str, Callable[[Runtime, Any, Any], None]] = {
        "+=": check_add,
        "*=": check_mul,
        "**=": check_pow,
        "<<=": check_lshift,
        "%=": check_mod,
    }

    # ---- attribute, item, iteration, writes ------------------------------------------

    def getattr(self, obj: Any, name: Any, default: Any = _MISSING) -> Any:
        if name not in self._public_names:  # hot path: a name already checked
            self._check_attribute_name(name)
        if name in _SIZE_GUARDED_NAMES:
            guarded = self._size_guarded(obj, name)
            if guarded is not None:
                return guarded
        if default is _MISSING:
            return getattr(obj, name)
        return getattr(obj, name, default)

    def _check_attribute_name(self, name: Any) -> None:
        if type(name) is not str:
            raise TypeError("attribute name must be a string")
        if name.startswith("_") or name in _REFUSED_ATTRIBUTES:
            self.forbid(f"access to attribute {name!r} is not allowed")
        if len(self._public_names) < _MAX_CACHED_NAMES:
            self._public_names.add(name)

    def _size_guarded(self, obj: Any, name: str) -> Callable[..., Any] | None:
        sized = _SIZE_GUARDED_METHODS.get(type(obj))
        if sized is not None and name in sized:
            guarded = sized[name]
            # Closures, not functools.partial: a partial's public `.args` would hand the
            # agent this Runtime (and through it the meter).
            bound = type(obj) if name in _CLASS_METHODS else obj  # (0).from_bytes(...)
            return lambda *args, **kwargs: guarded(self, bound, *args, **kwargs)
        if type(obj) is type or type(obj) is _StandInType:  # unbound: str.ljust("a", n)
            cls = getattr(obj, "_base_", obj)
            sized = _SIZE_GUARDED_METHODS.get(cls)
            if sized is not None and name in sized:
                unbound = sized[name]
                if name in _CLASS_METHODS:  # int.from_bytes(...): bound to the class
                    return lambda *args, **kwargs: unbound(self, cls, *args, **kwargs)
                return lambda *args, **kwargs: unbound(self, *args, **kwargs)
        return None

    def hasattr(self, obj: Any, name: Any) -> bool:
        try:
            self.getattr(obj, name)
        except AttributeError:
            return False
        return True

    def write(self, obj: Any) -> Any:
        # Only containers the agent builds may be written to; everything we hand in is
        # either a copy or a read-only proxy, and no object's attributes may be set.
        if type(obj) in _WRITABLE_TYPES or isinstance(obj, _WRITABLE_TYPES):
            return obj
        self.forbid(f"writing to a {type(obj).__name__} object is not allowed")

    def ticking(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Iterate `iterable` from Python code, so C consumers (`list`, `sum`, `join`) of an
        endless iterator still tick and can be stopped."""
        tick = self.meter.tick
        for item in iterable:
            tick()
            yield item

    # ---- printing --------------------------------------------------------------------

    def print_factory(self, _getattr_: Any = None) -> _PrintCollector:
        return _PrintCollector(self)

    def write_output(self, text: str) -> None:
        room = self.limits.max_output_chars - self.output_chars
        if len(text) > room:
            self.output.append(text[: max(room, 0)])
            self.output_chars = self.limits.max_output_chars
            self.meter.trip(
                "output_limit", f"printed more than {self.limits.max_output_chars} characters"
            )
        self.output.append(text)
        self.output_chars += len(text)

    def printed(self) -> str:
        return "".join(self.output)

    # ---- builtins that consume or build big things ------------------------------------

    def range(self, *args: int) -> Any:
        r = range(*args)
        if len(r) > self.limits.max_items:
            return self.ticking(r)  # lazy and interruptible; `list()` of it hits the meter
        return r

    def sum(self, iterable: Iterable[Any], start: Any = 0) -> Any:
        if not isinstance(start, (int, float, complex)):
            # sum([[...]] * n, []) concatenates in C, quadratically and without ticks.
            raise TypeError("sum() start must be a number; use a loop to join sequences")
        return sum(iterable, start)

    def iter(self, *args: Any) -> Iterator[Any]:
        if len(args) != 1:
            # iter(callable, sentinel) over a C callable is an endless C-level iterator.
            raise TypeError("only iter(iterable) is available")
        return iter(args[0])

    def round(self, number: Any, *ndigits: Any) -> Any:
        if ndigits and isinstance(number, int) and isinstance(ndigits[0], int):
            if ndigits[0] < 0:  # CPython computes 10 ** -ndigits first
                self._bits(-ndigits[0] * 10 // 3, "round's power of ten")
        return round(number, *ndigits)

    def prepare_int(self, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        text = args[0] if args else kwargs.get("x")
        base = args[1] if len(args) > 1 else kwargs.get("base")
        if base is not None and isinstance(text, (str, bytes)) and isinstance(base, int):
            # Power-of-two bases escape Python's 4300-digit cap on int(str).
            bits_per_char = math.log2(base) if base >= 2 else _BITS_PER_CHAR_BASE_0
            self._bits(int(len(text) * bits_per_char), f"int() of a {len(text)}-char string")
        return args, kwargs

    def prepare_set(self, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if args:
            args = (self.keys(args[0], "a set"), *args[1:])
        return args, kwargs

    def prepare_dict(self, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if args:
            args = (self.bulk_pairs(args[0], "a dict"), *args[1:])
        return args, kwargs

    def prepare_defaultdict(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) > 1:
            args = (args[0], self.bulk_pairs(args[1], "a defaultdict"), *args[2:])
        return args, kwargs

    def prepare_counter(self, *args: Any, **kwargs: Any) -> Any:
        if args and not hasattr(args[0], "keys"):
            args = (self.keys(args[0], "a Counter"), *args[1:])
        return args, kwargs

    def cached(self, decorate: Callable[..., Any]) -> Callable[..., Any]:
        """functools.cache / lru_cache: the cache hashes the arguments of every call."""

        def checked(wrapped: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                for arg in args:
                    self.key(arg)
                for arg in kwargs.values():
                    self.key(arg)
                return wrapped(*args, **kwargs)

            call.cache_clear = wrapped.cache_clear
            call.cache_info = wrapped.cache_info
            return call

        def decorator(*args: Any, **kwargs: Any) -> Any:
            if len(args) == 1 and callable(args[0]) and not kwargs:
                return checked(decorate(args[0]))  # @lru_cache / @cache
            inner = decorate(*args, **kwargs)  # @lru_cache(maxsize=...)
            return lambda func: checked(inner(func))

        return decorator

    def guarded_import(
        self, name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level=0
    ) -> Any:
        if level != 0 or name not in ALLOWED_MODULES:
            self.forbid(f"import of {name!r} is not allowed")
        return self.modules[name]

    @functools.cached_property
    def modules(self) -> dict[str, types.SimpleNamespace]:
        return _curated_modules(self)


class _PrintCollector:
    """What RestrictedPython's `print` rewrite talks to (`_print._call_print(...)`)."""

    __slots__ = ("_runtime",)

    def __init__(self, runtime: Runtime):
        self._runtime = runtime

    def write(self, text: str) -> None:
        self._runtime.write_output(text)

    def _call_print(self, *objects: Any, sep: str | None = " ", end: str | None = "\n") -> None:
        print(*objects, sep=sep, end=end, file=self)

    def __call__(self) -> str:  # `printed`
        return self._runtime.printed()


_INPLACE_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "<<=": operator.ilshift,
    ">>=": operator.irshift,
    "|=": operator.ior,
    "^=": operator.ixor,
    "&=": operator.iand,
    "@=": operator.imatmul,
}


# ---- size-guarded methods: (runtime, obj, *args) → result ----------------------------


def _width(rt: Runtime, width: Any, what: str) -> None:
    if isinstance(width, int):
        rt._items(width, what)


def _pad(method: str) -> Callable[..., Any]:
    def padded(rt: Runtime, s: Any, width: Any, *rest: Any) -> Any:
        _width(rt, width, f"{type(s).__name__}.{method}")
        return getattr(s, method)(width, *rest)

    return padded


def _expandtabs(rt: Runtime, s: Any, tabsize: Any = 8) -> Any:
    if isinstance(tabsize, int):
        rt._items(len(s) * max(tabsize, 1), "expandtabs")
    return s.expandtabs(tabsize)


def _replace(rt: Runtime, s: Any, old: Any, new: Any, count: int = -1) -> Any:
    if len(new) > len(old):
        hits = s.count(old) if count < 0 else min(count, s.count(old))
        rt._items(len(s) + hits * (len(new) - len(old)), "replace")
    return s.replace(old, new, count)


def _join(rt: Runtime, sep: Any, iterable: Iterable[Any]) -> Any:
    parts = list(iterable)
    total = sum(len(p) for p in parts if isinstance(p, _SIZED_STRING_TYPES))
    rt._items(total + len(sep) * max(len(parts) - 1, 0), "join")
    return sep.join(parts)


def _translate(rt: Runtime, s: Any, table: Any) -> Any:
    if isinstance(table, dict):
        longest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
        rt._items(len(s) * longest, "translate")
    return s.translate(table)


def _extend(rt: Runtime, seq: Any, other: Any) -> Any:
    if hasattr(other, "__len__"):
        rt._items(len(seq) + len(other), "extend")
        return seq.extend(other)
    return seq.extend(rt.ticking(other))


def _to_bytes(rt: Runtime, n: int, length: Any = 1, *rest: Any, **kw: Any) -> bytes:
    _width(rt, length, "int.to_bytes")
    return n.to_bytes(length, *rest, **kw)


def _elements(rt: Runtime, counter: collections.Counter) -> Iterator[Any]:
    return rt.ticking(counter.elements())  # Counter(a=10**12).elements() repeats in C


def _from_bytes(rt: Runtime, cls: type, data: Any, *rest: Any, **kw: Any) -> int:
    if not hasattr(data, "__len__"):
        data = list(rt.ticking(data))
    rt._bits(len(data) * 8, "int.from_bytes")
    return cls.from_bytes(data, *rest, **kw)


def _one_key(method: str) -> Callable[..., Any]:
    """A set/dict method that hashes its first argument."""

    def call(rt: Runtime, obj: Any, *args: Any, **kwargs: Any) -> Any:
        if args and type(args[0]) is tuple:
            rt.key(args[0])
        return getattr(obj, method)(*args, **kwargs)

    return call


def _all_keys(method: str) -> Callable[..., Any]:
    """A set method that builds a set from each of its arguments (union, update, …)."""

    def call(rt: Runtime, obj: Any, *others: Any) -> Any:
        return getattr(obj, method)(*(rt.keys(o, f"set.{method}") for o in others))

    return call


def _update_pairs(rt: Runtime, obj: Any, *args: Any, **kwargs: Any) -> Any:
    if args:
        args = (rt.bulk_pairs(args[0], f"{type(obj).__name__}.update"), *args[1:])
    return obj.update(*args, **kwargs)


def _counter_update(method: str) -> Callable[..., Any]:
    def call(rt: Runtime, obj: Any, *args: Any, **kwargs: Any) -> Any:
        if args and not hasattr(args[0], "keys"):
            args = (rt.keys(args[0], f"Counter.{method}"), *args[1:])
        return getattr(obj, method)(*args, **kwargs)

    return call


def _fromkeys(rt: Runtime, cls: type, keys: Any, *rest: Any) -> Any:
    return cls.fromkeys(rt.keys(keys, "dict.fromkeys"), *rest)


# Methods called on the class (`int.from_bytes`, `dict.fromkeys`) whose guards take it.
_CLASS_METHODS = frozenset({"from_bytes", "fromkeys"})


_SET_METHODS = {
    name: _one_key(name) for name in ("add", "discard", "remove")
} | {
    name: _all_keys(name)
    for name in (
        "update", "union", "symmetric_difference", "symmetric_difference_update", "issubset",
    )
}  # fmt: skip
_DICT_METHODS = {name: _one_key(name) for name in ("get", "setdefault", "pop")} | {
    "update": _update_pairs,
    "fromkeys": _fromkeys,
}
_COUNTER_METHODS = _DICT_METHODS | {
    "update": _counter_update("update"),
    "subtract": _counter_update("subtract"),
}
_STRING_METHODS = {
    "ljust": _pad("ljust"),
    "rjust": _pad("rjust"),
    "center": _pad("center"),
    "zfill": _pad("zfill"),
    "expandtabs": _expandtabs,
    "replace": _replace,
    "join": _join,
    "translate": _translate,
}
_SIZE_GUARDED_METHODS: dict[type, dict[str, Callable[..., Any]]] = {  # see _SIZE_GUARDED_NAMES
    str: _STRING_METHODS,
    bytes: _STRING_METHODS,
    list: {"extend": _extend},
    collections.deque: {"extend": _extend, "extendleft": _extend},
    int: {"to_bytes": _to_bytes, "from_bytes": _from_bytes},
    bool: {"to_bytes": _to_bytes, "from_bytes": _from_bytes},
    set: _SET_METHODS,
    frozenset: {name: _SET_METHODS[name] for name in ("union", "symmetric_difference", "issubset")},
    dict: _DICT_METHODS,
    collections.OrderedDict: _DICT_METHODS,
    collections.defaultdict: _DICT_METHODS,
    collections.Counter: _COUNTER_METHODS | {"elements": _elements},
}


# ---- stand-in types ------------------------------------------------------------------


class _StandInType(type):
    """Metaclass of the stand-ins agent code gets for `int`, `set`, `dict`, `Counter`, …:
    calling one checks the arguments (`_prepare_`) and builds the real type; isinstance,
    issubclass and attributes answer as for the real type, so `isinstance(x, int)`,
    `defaultdict(int)` and `int.bit_length` keep working."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls._base_)

    def __subclasscheck__(cls, sub: Any) -> bool:
        return issubclass(sub, cls._base_)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = cls._prepare_(*args, **kwargs)
        return cls._base_(*args, **kwargs)

    def __repr__(cls) -> str:
        return repr(cls._base_)


def _stand_in(base: type, prepare: Callable[..., Any]) -> type:
    # `_`-names are out of agent code's reach, so `_base_`/`_prepare_` stay host-only.
    namespace = {"_base_": base, "_prepare_": staticmethod(prepare), "__slots__": ()}
    return _StandInType(base.__name__, (base,), namespace)


def nested_deeper_than(value: tuple[Any, ...], limit: int) -> bool:
    """Whether tuples nest more than `limit` levels deep in `value` (iteratively; each
    tuple is walked once per depth it is first reached at). Only tuples matter: lists,
    dicts and sets are unhashable and frozensets hash their items as they are built."""
    stack = [(value, 1)]
    reached: dict[int, int] = {}
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if tuple not in map(type, node):  # C-speed scan of flat tuples
            continue
        for item in node:
            if type(item) is tuple and reached.get(id(item), 0) < depth + 1:
                reached[id(item)] = depth + 1
                stack.append((item, depth + 1))
    return False


# ---- builtins ------------------------------------------------------------------------

# Plain builtins that are safe as they are: they compute on values the agent already holds
# and build results no bigger than their inputs. Absent on purpose: eval, exec, compile,
# open, input, globals, locals, vars, dir, type, object, super, setattr, delattr,
# memoryview, bytearray, bytes (iterates in C, `bytes(10**10)`), format (format specs),
# breakpoint, help, exit, quit, classmethod, staticmethod, property.
_PLAIN_BUILTINS = [
    "abs", "all", "any", "bin", "bool", "callable", "chr", "dict", "divmod", "enumerate",
    "filter", "float", "frozenset", "hash", "hex", "int", "isinstance", "issubclass", "len",
    "list", "map", "max", "min", "next", "oct", "ord", "repr", "reversed", "round", "set",
    "slice", "sorted", "str", "tuple", "zip",
]  # fmt: skip
# Exceptions agent code may raise and catch. BaseException, SystemExit, KeyboardInterrupt
# and GeneratorExit are left out so the agent cannot name the host's control-flow signals.
_EXCEPTIONS = [
    "ArithmeticError", "AssertionError", "AttributeError", "Exception", "IndexError",
    "KeyError", "LookupError", "NameError", "NotImplementedError", "OverflowError",
    "RecursionError", "RuntimeError", "StopIteration", "TypeError", "ValueError",
    "ZeroDivisionError",
]  # fmt: skip


def make_globals(runtime: Runtime) -> dict[str, Any]:
    """Fresh module globals for one namespace."""
    safe = {name: getattr(builtins, name) for name in _PLAIN_BUILTINS + _EXCEPTIONS}
    safe.update(
        int=_stand_in(int, runtime.prepare_int),
        set=_stand_in(set, runtime.prepare_set),
        frozenset=_stand_in(frozenset, runtime.prepare_set),
        dict=_stand_in(dict, runtime.prepare_dict),
        hash=runtime.hash,
        round=runtime.round,
        range=runtime.range,
        sum=runtime.sum,
        iter=runtime.iter,
        pow=runtime.pow,
        getattr=runtime.getattr,
        hasattr=runtime.hasattr,
        __import__=runtime.guarded_import,
    )
    return {
        "__builtins__": safe,
        "__name__": "agent",
        "_getattr_": runtime.getattr,
        "_getitem_": runtime.getitem,
        "_key_": runtime.key,
        "_set_": safe["set"],
        "_getiter_": iter,
        # RestrictedPython's unpack guards exist to run `_getiter_` on nested items; ours is
        # plain `iter`, so Python's own unpacking is equivalent and ~5× cheaper.
        "_iter_unpack_sequence_": _unpack_as_is,
        "_unpack_sequence_": _unpack_as_is,
        "_write_": runtime.write,
        "_apply_": _apply,
        "_print_": runtime.print_factory,
        "_inplacevar_": runtime.inplacevar,
        "_tick_": runtime.meter.tick,
        "_mul_": runtime.mul,
        "_pow_": runtime.pow,
        "_lshift_": runtime.lshift,
        "_add_": runtime.add,
        "_mod_": runtime.mod,
    }


def _unpack_as_is(iterable: Any, spec: Any, _getiter_: Any) -> Any:
    return iterable


def _apply(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return func(*args, **kwargs)


# ---- curated modules -----------------------------------------------------------------


def _curated_modules(rt: Runtime) -> dict[str, types.SimpleNamespace]:
    """The modules policy code may import, each a namespace of the functions allowed from
    it, wrapped where they could loop or allocate without the runtime's count.

    Long because it is the list itself: one reviewable table of what untrusted code can
    reach, which splitting would scatter."""

    def ticking_factory(factory: Callable[..., Any]) -> Callable[..., Any]:
        def make(*args: Any, **kwargs: Any) -> Any:
            return rt.ticking(factory(*args, **kwargs))

        return make

    it = {
        name: ticking_factory(getattr(itertools, name))
        for name in [
            "accumulate", "chain", "combinations", "combinations_with_replacement",
            "compress", "count", "cycle", "dropwhile", "filterfalse", "groupby", "islice",
            "pairwise", "permutations", "product", "repeat", "starmap", "takewhile",
            "zip_longest",
        ]
    }  # fmt: skip
    it["chain"].from_iterable = ticking_factory(itertools.chain.from_iterable)
    it["tee"] = lambda iterable, n=2: tuple(rt.ticking(t) for t in itertools.tee(iterable, n))

    def bounded_n(func: Callable[..., int]) -> Callable[..., int]:
        def call(n: int, *rest: int) -> int:
            if isinstance(n, int) and n > rt.limits.max_math_n:
                rt.too_big(f"math.{func.__name__}({n}) is over the limit")
            return func(n, *rest)

        return call

    # math: everything numeric is bounded by float range, except big-int builders: prod
    # and lcm loop in C over arbitrarily many big ints, so they are left out.
    m = {
        name: getattr(math, name)
        for name in dir(math)
        if not name.startswith("_") and name not in {"factorial", "comb", "perm", "prod", "lcm"}
    }
    m.update(
        factorial=bounded_n(math.factorial),
        comb=bounded_n(math.comb),
        perm=bounded_n(math.perm),
        pow=math.pow,
    )

    r = rt.random

    def bounded_k(func: Callable[..., Any]) -> Callable[..., Any]:
        def call(population: Any, *args: Any, k: int = 1, **kwargs: Any) -> Any:
            rt._items(k, f"random.{func.__name__}")
            return func(population, *args, k=k, **kwargs)

        return call

    rnd = {
        name: getattr(r, name)
        for name in [
            "random", "uniform", "randint", "randrange", "choice", "shuffle", "gauss",
            "triangular", "normalvariate", "expovariate",
        ]
    }  # fmt: skip
    rnd.update(choices=bounded_k(r.choices), sample=bounded_k(r.sample))
    rnd["seed"] = lambda a=None: r.seed(a if isinstance(a, (int, str, float)) else None)

    # operator: arithmetic goes through the same guards as the operators themselves;
    # attrgetter/methodcaller are left out (they read attributes without `_getattr_`).
    op = {
        name: getattr(operator, name)
        for name in [
            "lt", "le", "eq", "ne", "ge", "gt", "not_", "truth", "is_", "is_not", "abs",
            "neg", "pos", "index", "inv", "invert", "and_", "or_", "xor", "floordiv",
            "truediv", "sub", "rshift", "itemgetter", "contains", "countOf", "indexOf",
            "getitem", "length_hint",
        ]
    }  # fmt: skip
    op.update(add=rt.add, concat=rt.add, mul=rt.mul, pow=rt.pow, lshift=rt.lshift, mod=rt.mod)

    return {
        "math": types.SimpleNamespace(**m),
        "random": types.SimpleNamespace(**rnd),
        "itertools": types.SimpleNamespace(**it),
        "collections": types.SimpleNamespace(
            deque=collections.deque,
            Counter=_stand_in(collections.Counter, rt.prepare_counter),
            defaultdict=_stand_in(collections.defaultdict, rt.prepare_defaultdict),
            OrderedDict=_stand_in(collections.OrderedDict, rt.prepare_dict),
        ),
        "functools": types.SimpleNamespace(
            reduce=functools.reduce,
            partial=functools.partial,
            lru_cache=rt.cached(functools.lru_cache),
            cache=rt.cached(functools.cache),
            cmp_to_key=functools.cmp_to_key,
        ),
        "operator": types.SimpleNamespace(**op),
        "heapq": types.SimpleNamespace(
            **{
                name: getattr(heapq, name)
                for name in [
                    "heappush",
                    "heappop",
                    "heapify",
                    "heapreplace",
                    "heappushpop",
                    "nlargest",
                    "nsmallest",
                    "merge",
                ]
            }  # fmt: skip
        ),
    }


_SIZE_GUARDED_NAMES = frozenset(name for table in _SIZE_GUARDED_METHODS.values() for name in table)
