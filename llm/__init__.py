"""The model layer: agent calls ``(role, purpose, request) -> reply`` and their contracts.

Public names live here; modules hold one concern each:

- :mod:`llm.contracts` — :data:`PURPOSES`, each purpose's reply contract (:data:`SCHEMAS`)
  and :func:`validate`.
- :mod:`llm.prompts` — prompt files (``actors/prompts``) rendered with ``string.Template``;
  JSON extraction from a reply.
- :mod:`llm.openai_backend` — :class:`OpenAIBackend`, calls answered by an
  OpenAI-compatible endpoint (repair-and-retry, backoff, token budget).
- :mod:`llm.errors` — the failures, each named for what the caller does about it.
"""

from llm.contracts import PURPOSES, SCHEMAS, validate
from llm.errors import (
    BackendConfigError,
    ContractError,
    LLMError,
    ModelReplyError,
    ModelUnavailable,
    TokenBudgetSpent,
)
from llm.openai_backend import CallResult, OpenAIBackend
from llm.prompts import PROMPTS_DIR, PromptSet, extract_json, messages_text

__all__ = [
    "PROMPTS_DIR",
    "PURPOSES",
    "SCHEMAS",
    "BackendConfigError",
    "CallResult",
    "ContractError",
    "LLMError",
    "ModelReplyError",
    "ModelUnavailable",
    "OpenAIBackend",
    "PromptSet",
    "TokenBudgetSpent",
    "extract_json",
    "messages_text",
    "validate",
]
