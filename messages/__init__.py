"""The vocabulary: every message the actors exchange, and the codec that carries it.

Import the family modules here so that decoding knows every kind.
"""

from messages import artifact, control, events, plan, rollout, task, train  # noqa: F401  (the families)
from messages.base import REGISTRY, message
from messages.codec import (
    DEFAULT_MAX_FRAME,
    DecodeError,
    decode,
    decode_envelope,
    encode,
    encode_envelope,
)
from messages.envelope import (
    ASK,
    BROKER,
    PREFER,
    REPLY,
    ROLE_PREFIX,
    TELL,
    Envelope,
    preference,
    preferring,
)

__all__ = [
    "ASK",
    "BROKER",
    "DEFAULT_MAX_FRAME",
    "PREFER",
    "REGISTRY",
    "REPLY",
    "ROLE_PREFIX",
    "TELL",
    "DecodeError",
    "Envelope",
    "decode",
    "decode_envelope",
    "encode",
    "encode_envelope",
    "message",
    "preference",
    "preferring",
]
