"""The only place that speaks msgpack: records and envelopes to bytes and back.

A message travels as two ZeroMQ frames:

* the **envelope** (routing data, read by the broker): ``[PROTOCOL, mode, id, to, frm,
  re, kind]``, plus ``deadline_s`` as an 8th item on an ASK that has one (a 7-item
  envelope still decodes: its deadline is 0, none);
* the **body** (the record, read only by its addressee): ``[kind, version, {field: value}]``.

Keeping them apart lets the broker route a message without decoding its payload.
Decoding never trusts its input: every failure is a :class:`DecodeError` with a short
machine-readable ``reason``, and no object other than plain msgpack values is ever built
from the wire (no pickle, no ext types).
"""

from __future__ import annotations

from typing import Any

import msgpack

from messages.base import REGISTRY, SchemaError, build
from messages.envelope import MODES, PROTOCOL, Envelope

DEFAULT_MAX_FRAME = 16 * 1024 * 1024
"""Default cap on one frame: 16 MiB holds a trained policy artifact (SB3 PPO zips for
Crafter are ~1-3 MiB) with room to spare, and keeps a hostile peer from making us buffer
gigabytes."""


class DecodeError(ValueError):
    """A frame was refused. ``reason`` is a short tag for the event log."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def _ext_refused(code: int, data: bytes) -> Any:
    raise DecodeError("bad_msgpack", f"extension type {code} is not allowed")


def _unpack(frame: bytes, max_frame: int) -> Any:
    if not isinstance(frame, (bytes, bytearray, memoryview)):
        raise DecodeError("bad_frame", f"expected bytes, found {type(frame).__name__}")
    if len(frame) > max_frame:
        raise DecodeError("oversize", f"{len(frame)} bytes > cap {max_frame}")
    try:
        return msgpack.unpackb(
            frame,
            raw=False,
            strict_map_key=True,
            ext_hook=_ext_refused,
        )
    except DecodeError:
        raise
    except msgpack.ExtraData:
        raise DecodeError("extra_data", "bytes after the end of the message") from None
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        # Truncated frames, invalid UTF-8, non-str map keys, nesting limits.
        raise DecodeError("bad_msgpack", str(exc)[:200]) from None


_packer = msgpack.Packer(use_bin_type=True, autoreset=True)


def encode(msg: Any) -> bytes:
    """A record → its body frame."""
    cls = type(msg)
    return _packer.pack(
        [cls.__message_kind__, cls.__message_version__, cls.__message_to_wire__(msg)]
    )


def decode(frame: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> Any:
    """A body frame → its validated record, or :class:`DecodeError`."""
    data = _unpack(frame, max_frame)
    if type(data) is not list or len(data) != 3:
        raise DecodeError("bad_shape", "a body is [kind, version, fields]")
    kind, version, fields = data
    if type(kind) is not str:
        raise DecodeError("bad_shape", "kind must be a string")
    cls = REGISTRY.get(kind)
    if cls is None:
        raise DecodeError("unknown_kind", kind[:80])
    if type(version) is not int or version != cls.__message_version__:
        raise DecodeError(
            "bad_version", f"{kind} v{version!r}, this build speaks v{cls.__message_version__}"
        )
    if type(fields) is not dict:
        raise DecodeError("bad_shape", "fields must be a map")
    try:
        return build(cls, fields)
    except SchemaError as exc:
        raise DecodeError("bad_field", f"{kind}.{exc}") from None
    except RecursionError:
        raise DecodeError("bad_field", f"{kind}: nesting too deep") from None
    except (TypeError, ValueError) as exc:
        # A record's own checks refusing a value; never let hostile input escape as a crash.
        raise DecodeError("bad_field", f"{kind}: {str(exc)[:160]}") from None


MAX_DEADLINE_S = 7 * 86400.0
"""Longest ``deadline_s`` accepted: a week, past any job; a larger one is a bad frame."""


def encode_envelope(env: Envelope) -> bytes:
    """An envelope → its header frame."""
    if env.deadline_s:
        return _packer.pack(
            [PROTOCOL, env.mode, env.id, env.to, env.frm, env.re, env.kind, env.deadline_s]
        )
    return _packer.pack([PROTOCOL, env.mode, env.id, env.to, env.frm, env.re, env.kind])


def decode_envelope(frame: bytes) -> Envelope:
    """A header frame → its envelope, or :class:`DecodeError`. Headers are small; the
    cap is fixed so the broker never spends much on a bad one. (Every message is read
    here at least twice, so the common case is checked in one expression.)"""
    data = _unpack(frame, 4096)
    if type(data) is not list or not 7 <= len(data) <= 8:
        raise DecodeError("bad_envelope", "an envelope is a 7-item list (8 with a deadline)")
    if len(data) == 7:
        proto, mode, id_, to, frm, re, kind = data
        deadline = 0.0
    else:
        proto, mode, id_, to, frm, re, kind, deadline = data
    if (
        type(proto) is int
        and proto == PROTOCOL
        and type(mode) is int
        and mode in MODES
        and type(id_) is str
        and type(to) is str
        and type(frm) is str
        and type(re) is str
        and type(kind) is str
        and (type(deadline) is float or type(deadline) is int)
        and 0 <= deadline <= MAX_DEADLINE_S
    ):
        return Envelope(mode, id_, to, frm, re, kind, float(deadline))
    # Say what is wrong, types first: a hostile frame may put a map where a number goes.
    if type(proto) is not int or proto != PROTOCOL:
        raise DecodeError("bad_protocol", f"protocol {str(proto)[:40]}, this speaks {PROTOCOL}")
    if type(mode) is not int or mode not in MODES:
        raise DecodeError("bad_envelope", f"mode {mode!r}")
    for name, value in (("id", id_), ("to", to), ("frm", frm), ("re", re), ("kind", kind)):
        if type(value) is not str:
            raise DecodeError("bad_envelope", f"{name} must be a string")
    # (nan fails both comparisons)
    raise DecodeError("bad_envelope", f"deadline_s {str(deadline)[:40]}")
