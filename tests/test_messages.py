"""The vocabulary: every kind round-trips; anything malformed is refused, never crashes."""

from __future__ import annotations

import dataclasses
import typing

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import messages
from messages import REGISTRY, DecodeError, Envelope, causes, decode, decode_envelope, encode
from messages.base import MAX_DEPTH, _build_checked, build
from messages.control import ActorInfo, Probe, Register, StatusReply
from messages.task import Subtask


def _strategy(hint: typing.Any) -> st.SearchStrategy:
    """Values of a declared field type (only what message fields may declare)."""
    if hint is int:
        return st.integers(-(2**63), 2**64 - 1)
    if hint is float:
        return st.floats(allow_nan=False)
    if hint is str:
        return st.text(max_size=20)
    if hint is bytes:
        return st.binary(max_size=64)
    if hint is bool:
        return st.booleans()
    if hint is type(None):
        return st.none()
    if hint is typing.Any:
        return st.recursive(
            st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=5),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=10,
        )
    if isinstance(hint, type) and hasattr(hint, "__message_kind__"):
        return _record(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return st.lists(_strategy(args[0]), max_size=3)
    if origin is tuple:
        return st.lists(_strategy(args[0]), max_size=3).map(tuple)
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), _strategy(args[1]), max_size=3)
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, __import__("types").UnionType):
        return st.one_of([_strategy(a) for a in args])
    raise AssertionError(f"no strategy for {hint!r}")


def _record(cls: type) -> st.SearchStrategy:
    hints = typing.get_type_hints(cls)
    fields = {f.name: _strategy(hints[f.name]) for f in dataclasses.fields(cls)}
    return st.builds(cls, **fields)


@pytest.mark.parametrize("kind", sorted(REGISTRY))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_message_kind_round_trips(kind: str, data: st.DataObject) -> None:
    msg = data.draw(_record(REGISTRY[kind]))
    assert decode(encode(msg)) == msg


_WIRE_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=5) | st.binary(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)  # fmt: skip
"""Anything msgpack may decode to: what a hostile sender can put in a field."""
_NEAR_MISSES = st.sampled_from(
    [True, False, 0, 1, -1, 2**64 - 1, 0.0, 1.5, "", "x", b"", b"x", None, [], {}]
)
"""One of each wire type, bool beside int and int beside float: the values a type check
must tell apart."""


def _outcome(fn: typing.Callable[[], object]) -> tuple[str, str]:
    """What ``fn`` built (as its repr: 1 and 1.0 differ there) or what it raised."""
    try:
        return "built", repr(fn())
    except Exception as exc:  # the comparison is of what each raises, whatever it is
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("kind", sorted(REGISTRY))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_compiled_builder_accepts_converts_and_refuses_as_the_field_by_field_one(
    kind: str, data: st.DataObject
) -> None:
    """Each kind's generated builder (the fast path of every decode) against the checked
    loop it falls back to: a valid map, one field replaced by any wire value, one field
    missing, or one too many give the same record or the same error."""
    cls = REGISTRY[kind]
    fields = dict(_fields(data.draw(_record(cls))))
    change = data.draw(st.sampled_from(["none", "replace", "drop", "add"]))
    names = sorted(fields)
    if change == "replace" and names:
        fields[data.draw(st.sampled_from(names))] = data.draw(_NEAR_MISSES | _WIRE_VALUES)
    elif change == "drop" and names:
        del fields[data.draw(st.sampled_from(names))]
    elif change == "add":
        fields[data.draw(st.text(max_size=8))] = data.draw(_WIRE_VALUES)
    fast = _outcome(lambda: build(cls, dict(fields)))
    assert fast == _outcome(lambda: _build_checked(cls, dict(fields)))


def test_every_message_kind_says_what_it_is() -> None:
    for kind, cls in REGISTRY.items():
        assert cls.__doc__ and cls.__doc__.strip(), f"{kind} has no docstring"
        assert kind.count(".") == 1, f"{kind}: kinds are family.name"


def _fields(msg: object) -> dict:
    return msgpack.unpackb(encode(msg))[2]


def _body(kind: str, version: int, fields: object) -> bytes:
    return msgpack.packb([kind, version, fields], use_bin_type=True)


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (_body("control.nonesuch", 1, {}), "unknown_kind"),
        (_body("control.probe", 1, {**_fields(Probe()), "seq": "7"}), "bad_field"),
        (_body("control.probe", 1, {**_fields(Probe()), "seq": True}), "bad_field"),
        (_body("control.probe", 1, {**_fields(Probe()), "crash": 1}), "bad_field"),
        (_body("control.register", 1, {"capacity": 1}), "bad_field"),  # role missing
        (_body("control.probe", 1, {"seq": 1, "sneaky": 2}), "bad_field"),
        (_body("control.probe", 2, {}), "bad_version"),
        (_body("control.probe", "1", {}), "bad_version"),
        (_body("control.probe", 1, [1, 2]), "bad_shape"),
        (msgpack.packb(["control.probe", 1]), "bad_shape"),
        (msgpack.packb({"kind": "control.probe"}), "bad_shape"),
        (encode(Probe(seq=1)) + b"\x00", "extra_data"),
        (encode(Probe(seq=1, payload=b"abc"))[:-3], "bad_msgpack"),
        (b"", "bad_msgpack"),
        (msgpack.ExtType(1, b"x") and msgpack.packb(msgpack.ExtType(1, b"x")), "bad_msgpack"),
        (msgpack.packb({1: 2}), "bad_msgpack"),  # non-string map key
        (b"\xc1", "bad_msgpack"),  # a byte msgpack never uses
    ],
)
def test_malformed_bodies_are_refused_with_a_reason(frame: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(frame)
    assert caught.value.reason == reason


def test_oversize_frames_are_refused_before_parsing() -> None:
    frame = encode(Probe(payload=b"x" * 2000))
    assert decode(frame, max_frame=4096).payload == b"x" * 2000
    with pytest.raises(DecodeError) as caught:
        decode(frame, max_frame=1000)
    assert caught.value.reason == "oversize"


def test_nested_records_are_validated_field_by_field() -> None:
    good = StatusReply([ActorInfo("a", "r", 1, 0, "cpu")], {"r": 1}, 1, 0, 0)
    fields = _fields(good)
    fields["actors"][0]["capacity"] = "one"
    with pytest.raises(DecodeError, match=r"actors\[0\]\.capacity"):
        decode(_body("control.status_reply", 1, fields))


def test_deeply_nested_values_are_refused_not_a_stack_overflow() -> None:
    deep: object = "leaf"
    for _ in range(MAX_DEPTH * 4):
        deep = {"k": deep}
    frame = _body(
        "control.status_reply", 1, {**_fields(StatusReply([], {}, 0, 0, 0)), "queued": deep}
    )
    with pytest.raises(DecodeError):
        decode(frame)


def test_envelopes_round_trip_and_refuse_garbage() -> None:
    env = Envelope(messages.ASK, "a.1", "@learner", "", "", "control.probe")
    assert decode_envelope(messages.encode_envelope(env)) == env
    for bad in (
        msgpack.packb([99, 1, "a", "b", "", "", "k"]),  # wrong protocol
        msgpack.packb([1, 7, "a", "b", "", "", "k"]),  # unknown mode
        msgpack.packb([1, {"x": 1}, "a", "b", "", "", "k"]),  # unhashable mode (fuzz find)
        msgpack.packb([{}, 1, "a", "b", "", "", "k"]),  # unhashable protocol
        msgpack.packb([1, 1, 5, "b", "", "", "k"]),  # id not a string
        msgpack.packb([1, 1, "a"]),
        b"\x00" * 5000,
    ):
        with pytest.raises(DecodeError):
            decode_envelope(bad)


def test_registering_the_same_kind_twice_is_an_error() -> None:
    with pytest.raises(TypeError, match="declared twice"):

        @messages.message("control.register")
        class Again:
            """test → nobody: a clash."""

            role: str


VALID = [encode(Probe(seq=5, payload=b"hello")), encode(Register(role="learner"))]


@settings(max_examples=1500, deadline=None)
@given(frame=st.binary(max_size=300))
def test_decoder_fuzz_random_bytes_never_crash(frame: bytes) -> None:
    try:
        decode(frame, max_frame=200)
    except DecodeError as exc:
        assert exc.reason


@settings(max_examples=1500, deadline=None)
@given(
    base=st.sampled_from(VALID),
    edits=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.integers(0, 200),
)
def test_decoder_fuzz_mutated_frames_never_crash(base: bytes, edits: list, cut: int) -> None:
    frame = bytearray(base)
    for pos, value in edits:
        frame[pos % len(frame)] = value
    frame = bytes(frame[: max(cut, len(frame) // 2)])
    try:
        msg = decode(frame)
    except DecodeError as exc:
        assert exc.reason
    else:
        # Anything accepted is a fully valid record of a registered kind.
        assert type(msg) in REGISTRY.values()
        assert decode(encode(msg)) == msg


# ---------------------------------------------------------------------- the success test


class _Player:
    """What a policy's ``skills`` object offers the rendered success test."""

    def __init__(self, inventory: dict[str, int], achievements: dict[str, int]) -> None:
        self._inventory, self._achievements = inventory, achievements

    def inventory(self) -> dict[str, int]:
        return dict(self._inventory)

    def achievements(self) -> dict[str, int]:
        return dict(self._achievements)


SUBTASKS = [
    Subtask("wood", goal={"wood": 2}),
    Subtask("table", achievement="place_table"),
    Subtask("table_or_wood", goal={"wood": 1, "stone": 1}, achievement="place_table"),
    Subtask("nothing"),
]
STATES = [
    ({}, {}),
    ({"wood": 2}, {}),
    ({"wood": 1, "stone": 1}, {}),
    ({}, {"place_table": 1}),
    ({"wood": 2, "stone": 3}, {"place_table": 0}),
]


@pytest.mark.parametrize("subtask", SUBTASKS, ids=lambda s: s.name)
def test_a_subtasks_rendered_test_agrees_with_its_met(subtask: Subtask) -> None:
    source = subtask.met_source("skills")
    for inventory, achievements in STATES:
        player = _Player(inventory, achievements)
        assert eval(source, {}, {"skills": player}) == subtask.met(inventory, achievements)


def test_a_subtask_is_met_by_its_achievement_or_its_goal() -> None:
    both = Subtask("t", goal={"wood": 1}, achievement="place_table")
    assert both.met({"wood": 1}, {})
    assert both.met({}, {"place_table": 1})
    assert not both.met({}, {"place_table": 0})
    assert not Subtask("none").met({"wood": 5}, {"place_table": 1})


def test_a_named_achievement_decides_a_stage_test() -> None:
    both = Subtask("t", goal={"wood": 1}, achievement="place_table")
    assert not both.met({"wood": 1}, {}, achievement_decides=True)
    assert both.met({}, {"place_table": 1}, achievement_decides=True)
    assert Subtask("t", goal={"wood": 1}).met({"wood": 1}, {}, achievement_decides=True)


def test_a_test_counted_since_a_moment_needs_a_new_unlock() -> None:
    table = Subtask("t", achievement="place_table")
    assert not table.met({}, {"place_table": 1}, since={"place_table": 1})
    assert table.met({}, {"place_table": 2}, since={"place_table": 1})
    assert table.met({}, {"place_table": 1}, since={})


def test_every_named_cause_is_an_episode_cause() -> None:
    allowed = set(typing.get_args(causes.EpisodeCause))
    named = {
        value
        for name, value in vars(causes).items()
        if name.isupper() and isinstance(value, str) and name != "NOT_REACHED"
    }
    assert named and named <= allowed
    assert set(causes.SEARCH_CAUSES) <= allowed
    assert set(typing.get_args(causes.SandboxCause)) <= allowed
    assert causes.cause_kind(causes.not_reached("episode_done")) == causes.NOT_REACHED
