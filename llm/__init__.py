"""The model layer: agent calls ``(role, purpose, request) -> reply`` and their contracts.

Public names live here; modules hold one concern each:

- :mod:`llm.contracts` — :data:`PURPOSES`, each purpose's reply contract (:data:`SCHEMAS`,
  and as JSON Schemas for structured output), :func:`validate`, and Crafter's names for
  what a model calls a sub-action (:func:`~llm.contracts.resolve_achievement`).
- :mod:`llm.backend` — the :class:`Backend` protocol and the one :class:`CallResult`.
- :mod:`llm.prompts` — the prompt files (beside the module) rendered with
  ``string.Template``; JSON extraction from a reply.
- :mod:`llm.openai_backend` — :class:`OpenAIBackend`, calls answered by an
  OpenAI-compatible endpoint (repair-and-retry, backoff, real servers' quirks).
- :mod:`llm.offline` — :class:`OfflineBackend`, the same calls answered by deterministic
  code over the game's data and the skill library: no model.
- :mod:`llm.errors` — the failures, each named for what the caller does about it.
"""

from llm.backend import Backend, CallResult
from llm.contracts import PURPOSES, SCHEMAS, validate
from llm.errors import (
    BackendConfigError,
    ContextOverflow,
    ContractError,
    LLMError,
    ModelReplyError,
    ModelUnavailable,
    TokenBudgetSpent,
)
from llm.prompts import PROMPTS_DIR, PromptSet, extract_json, messages_text

__all__ = [
    "Backend",
    "PROMPTS_DIR",
    "PURPOSES",
    "SCHEMAS",
    "BackendConfigError",
    "CallResult",
    "ContextOverflow",
    "ContractError",
    "LLMError",
    "ModelReplyError",
    "ModelUnavailable",
    "OfflineBackend",
    "OpenAIBackend",
    "PromptSet",
    "TokenBudgetSpent",
    "extract_json",
    "messages_text",
    "validate",
]


def __getattr__(name: str) -> object:
    # The backends load on first use: importing ``llm`` (for its errors and contracts)
    # must not import the ``openai`` client or the skill library.
    if name == "OpenAIBackend":
        from llm.openai_backend import OpenAIBackend

        return OpenAIBackend
    if name == "OfflineBackend":
        from llm.offline import OfflineBackend

        return OfflineBackend
    raise AttributeError(f"module 'llm' has no attribute {name!r}")
