"""The message record: a frozen, slotted dataclass registered under a kind tag.

Every message the system exchanges is declared with :func:`message`::

    @message("control.heartbeat", version=1)
    class Heartbeat:
        \"\"\"actor → broker: I am alive.\"\"\"
        inflight: int
        \"\"\"Jobs the actor is working on right now.\"\"\"

The decorator turns the class into a frozen, slotted dataclass, records its kind and
schema version, and compiles a validator from its type hints that the codec uses to
check every decoded field. Supported field types: ``int``, ``float``, ``str``,
``bytes``, ``bool``, ``None``, ``Any`` (any msgpack-native value), ``X | None``,
``Literal[...]``, ``list[X]``, ``tuple[X, ...]``, ``dict[str, X]`` and nested message
classes (encoded as a map of their fields).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

REGISTRY: dict[str, type] = {}
"""kind tag → message class; filled by :func:`message`, read by the codec."""

# A nested structure deeper than this is refused: it protects the recursive validator
# from a hostile frame built to exhaust the stack.
MAX_DEPTH = 32


class SchemaError(ValueError):
    """A decoded value does not match the declared type of its field."""

    def __init__(self, path: str, expected: str, found: object) -> None:
        found_desc = type(found).__name__
        super().__init__(f"{path}: expected {expected}, found {found_desc}")
        self.path = path
        self.expected = expected
        self.found = found_desc


Validator = Callable[[object, str, int], object]
"""(value, field path, depth) → the value to store (converted where the wire form differs)."""


def _scalar(pytype: type, name: str) -> Validator:
    def check(value: object, path: str, depth: int) -> object:
        # bool is a subclass of int: refuse it where an int is declared, and vice versa.
        if type(value) is not pytype:
            raise SchemaError(path, name, value)
        return value

    return check


def _float(value: object, path: str, depth: int) -> object:
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    raise SchemaError(path, "float", value)


def _none(value: object, path: str, depth: int) -> object:
    if value is not None:
        raise SchemaError(path, "None", value)
    return None


_NATIVE = (type(None), bool, int, float, str, bytes)


def _any(value: object, path: str, depth: int) -> object:
    if depth > MAX_DEPTH:
        raise SchemaError(path, f"nesting of at most {MAX_DEPTH}", value)
    if isinstance(value, _NATIVE):
        return value
    if isinstance(value, list):
        return [_any(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str):
                raise SchemaError(f"{path} key", "str", k)
        return {k: _any(v, f"{path}.{k}", depth + 1) for k, v in value.items()}
    raise SchemaError(path, "a msgpack value", value)


def compile_validator(hint: Any) -> Validator:
    """Build the checker for one type hint; unsupported hints fail at class definition."""
    if hint is Any:
        return _any
    if hint is None or hint is type(None):
        return _none
    if hint is float:
        return _float
    if hint in (int, str, bytes, bool):
        return _scalar(hint, hint.__name__)
    if isinstance(hint, type) and hasattr(hint, "__message_kind__"):
        return _nested(hint)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [compile_validator(a) for a in args]
        expected = " | ".join(getattr(a, "__name__", str(a)) for a in args)

        def check_union(value: object, path: str, depth: int) -> object:
            for option in options:
                try:
                    return option(value, path, depth)
                except SchemaError:
                    continue
            raise SchemaError(path, expected, value)

        return check_union
    if origin is typing.Literal:
        allowed = frozenset(args)

        kinds = {type(a) for a in args}

        def check_literal(value: object, path: str, depth: int) -> object:
            if type(value) not in kinds or value not in allowed:
                raise SchemaError(path, f"one of {sorted(map(repr, allowed))}", value)
            return value

        return check_literal
    if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        item = compile_validator(args[0])
        make = list if origin is list else tuple

        def check_seq(value: object, path: str, depth: int) -> object:
            if not isinstance(value, (list, tuple)):
                raise SchemaError(path, "a list", value)
            if depth > MAX_DEPTH:
                raise SchemaError(path, f"nesting of at most {MAX_DEPTH}", value)
            return make(item(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))

        return check_seq
    if origin is dict:
        key_t, val_t = args
        if key_t is not str:
            raise TypeError(f"message dict keys must be str, not {key_t!r}")
        item = compile_validator(val_t)

        def check_map(value: object, path: str, depth: int) -> object:
            if not isinstance(value, dict):
                raise SchemaError(path, "a map", value)
            if depth > MAX_DEPTH:
                raise SchemaError(path, f"nesting of at most {MAX_DEPTH}", value)
            out = {}
            for k, v in value.items():
                if type(k) is not str:
                    raise SchemaError(f"{path} key", "str", k)
                out[k] = item(v, f"{path}.{k}", depth + 1)
            return out

        return check_map
    raise TypeError(f"unsupported message field type: {hint!r}")


def _nested(cls: type) -> Validator:
    def check_nested(value: object, path: str, depth: int) -> object:
        if not isinstance(value, dict):
            raise SchemaError(path, f"a {cls.__name__} map", value)
        if depth > MAX_DEPTH:
            raise SchemaError(path, f"nesting of at most {MAX_DEPTH}", value)
        return build(cls, value, f"{path}.", depth + 1)

    return check_nested


def build(cls: type, fields: dict, path: str = "", depth: int = 0) -> Any:
    """Validate a decoded field map against ``cls`` and construct the record."""
    return cls.__message_build__(fields, path, depth)


def _build_checked(cls: type, fields: dict, path: str = "", depth: int = 0) -> Any:
    """:func:`build` field by field, in the map's order: says what is wrong first."""
    schema: dict[str, Validator] = cls.__message_schema__
    required: frozenset[str] = cls.__message_required__
    unknown = fields.keys() - schema.keys()
    if unknown:
        name = sorted(str(u) for u in unknown)[0]
        raise SchemaError(f"{path}{name}", "no such field", fields[next(iter(unknown))])
    missing = required - fields.keys()
    if missing:
        raise SchemaError(f"{path}{sorted(missing)[0]}", "a required field", None)
    values = {k: schema[k](v, f"{path}{k}", depth) for k, v in fields.items()}
    return cls(**values)


EXACT_TYPES = (int, float, str, bytes, bool)
"""Field types a value of that very type passes unchanged (no subclass: bool is not an
int here), checked inline by a compiled builder."""


def _compile_build(cls: type, names: tuple[str, ...], hints: dict[str, Any]) -> Callable:
    """``build`` for ``cls``, specialised to the map every sender writes (all fields):
    names looked up directly, scalar fields checked inline, and the other validators
    called in turn. Any doubt (a field missing or unknown, a value of another type, an
    int for a float, a validator refusing) goes to :func:`_build_checked`, which converts
    or refuses exactly as it always did. Generated source, as ``dataclasses`` makes
    ``__init__``: a decode costs about half of the field-by-field loop (measured on
    ``control.probe_reply``)."""
    namespace: dict[str, Any] = {
        "cls": cls,
        "names": frozenset(names),
        "checked": _build_checked,
        "SchemaError": SchemaError,
        **{t.__name__: t for t in EXACT_TYPES},
    }
    loads, exact, checks = [], [], []
    for i, name in enumerate(names):
        loads.append(f"    v{i} = fields[{name!r}]")
        hint = hints[name]
        if hint in EXACT_TYPES:
            exact.append(f"type(v{i}) is {hint.__name__}")
        else:
            namespace[f"check{i}"] = cls.__message_schema__[name]
            checks.append(f"        v{i} = check{i}(v{i}, path + {name!r}, depth)")
    lines = [
        "def build(fields, path, depth):",
        "    if fields.keys() != names:",
        "        return checked(cls, fields, path, depth)",
        *loads,
    ]
    if exact:
        lines += [
            f"    if not ({' and '.join(exact)}):",
            "        return checked(cls, fields, path, depth)",
        ]
    if checks:
        lines += [
            "    try:",
            *checks,
            "    except SchemaError:",
            "        return checked(cls, fields, path, depth)",
        ]
    args = ", ".join(f"{name}=v{i}" for i, name in enumerate(names))
    lines.append(f"    return cls({args})")
    exec("\n".join(lines), namespace)  # noqa: S102 - our own names and reprs only
    return namespace["build"]


def to_wire(obj: Any) -> dict:
    """The field map of a record, nested records turned into maps."""
    return obj.__message_to_wire__(obj)


def _compile_to_wire(cls: type, names: tuple[str, ...], hints: dict[str, Any]) -> Callable:
    def contains_message(hint: Any) -> bool:
        if isinstance(hint, type) and hasattr(hint, "__message_kind__"):
            return True
        return any(contains_message(a) for a in typing.get_args(hint))

    nested = {n for n in names if contains_message(hints[n])}
    if not nested:
        # The common case: plain fields, one dict display and no recursion (generated:
        # about half the cost of a comprehension over getattr).
        items = ", ".join(f"{n!r}: obj.{n}" for n in names)
        namespace: dict[str, Any] = {}
        exec(f"def to_wire(obj):\n    return {{{items}}}", namespace)  # noqa: S102 - field names
        return namespace["to_wire"]

    def convert(value: Any) -> Any:
        if hasattr(value, "__message_kind__"):
            return to_wire(value)
        if isinstance(value, (list, tuple)):
            return [convert(v) for v in value]
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        return value

    return lambda obj: {
        n: (convert(getattr(obj, n)) if n in nested else getattr(obj, n)) for n in names
    }


def message(kind: str, *, version: int = 1) -> Callable[[type], type]:
    """Declare a message record under ``kind`` (``family.name``) at schema ``version``."""

    def wrap(cls: type) -> type:
        if kind in REGISTRY:
            raise TypeError(f"message kind {kind!r} is declared twice")
        dc = dataclasses.dataclass(frozen=True, slots=True)(cls)
        hints = typing.get_type_hints(dc)
        fields = dataclasses.fields(dc)
        names = tuple(f.name for f in fields)
        dc.__message_kind__ = kind
        dc.__message_version__ = version
        dc.__message_schema__ = {f.name: compile_validator(hints[f.name]) for f in fields}
        dc.__message_required__ = frozenset(
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        dc.__message_to_wire__ = staticmethod(_compile_to_wire(dc, names, hints))
        dc.__message_build__ = staticmethod(_compile_build(dc, names, hints))
        REGISTRY[kind] = dc
        return dc

    return wrap
