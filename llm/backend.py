"""What every backend is and returns: the :class:`Backend` protocol and one
:class:`CallResult`. Light on purpose (no client library): the journal, the agents and
the offline backend import it without pulling in ``openai``."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol


@dataclasses.dataclass(frozen=True, slots=True)
class CallResult:
    """backend → agent: one call's validated reply and what it cost."""

    data: dict[str, Any]
    """The reply, validated and normalised by its contract."""
    prompt: str = ""
    """The messages sent (the last request's conversation, repairs included), as text;
    empty for the offline backend."""
    reply: str = ""
    """The model's raw last reply (empty for the offline backend)."""
    tokens_in: int = 0
    """Prompt tokens over every request of the call (from ``usage``)."""
    tokens_out: int = 0
    """Completion tokens over every request of the call."""
    latency_s: float = 0.0
    """Wall-clock seconds for the whole call, retries and repairs included."""
    attempts: int = 1
    """Requests made (1 when the first one answered well)."""
    repairs: int = 0
    """Replies sent back for repair."""
    tokens_estimated: bool = False
    """The server sent no ``usage`` for some request of the call: its tokens are
    estimated from the text (:func:`llm.prompts.estimate_tokens`)."""
    reasoning: str = ""
    """The model's reasoning, kept apart from the reply: ``<think>`` blocks and the
    ``reasoning_content`` field some servers send."""
    local_repairs: int = 0
    """Replies whose JSON was mended here (comments, trailing commas, quotes) instead of
    being sent back."""


class Backend(Protocol):
    """Plays the agents' roles: offline code or a language model."""

    name: str
    """Recorded with every call and shown in the report."""

    async def call(
        self,
        role: str,
        purpose: str,
        request: dict[str, Any],
        *,
        temperature: float | None = None,
    ) -> CallResult:
        """Answer one call ``(role, purpose, request)`` with a reply in its contract;
        ``temperature``: sample this call hotter than the backend's own setting (a
        backend that does not sample ignores it)."""
        ...
