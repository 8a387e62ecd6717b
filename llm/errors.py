"""The model layer's failures, each named for what the caller does about it.

- :class:`ContractError` — a reply broke its purpose's contract; the message says which key,
  what was expected and what was found, worded to be sent back to the model for repair.
- :class:`ModelReplyError` — the model kept breaking the contract after the allowed repairs.
- :class:`ModelUnavailable` — the endpoint cannot answer (refused, unauthorised, unknown
  model, still failing after retries); the message names the fix to try.
- :class:`ContextOverflow` — a prompt does not fit the model's context (found before
  sending, from ``[agents] n_ctx``, or said by the server); a kind of
  :class:`ModelUnavailable`, since retrying repeats it.
- :class:`TokenBudgetSpent` — the run's token budget is used up: stop cleanly.
- :class:`BackendConfigError` — the backend cannot be built as configured (missing API key
  variable, missing prompt file).

All but :class:`ContractError` derive from :class:`LLMError`, so a caller that only needs
"the call failed" catches one name; a contract error is caught inside the backend.
"""

from __future__ import annotations


class LLMError(Exception):
    """A model call failed."""


class ContractError(ValueError):
    """A reply does not match its contract (message: where, expected, found)."""


class ModelReplyError(LLMError):
    """The model's reply was still invalid after the allowed repair rounds."""

    def __init__(self, message: str, reply: str = "", attempts: int = 0) -> None:
        super().__init__(message)
        self.reply = reply
        """The last raw reply."""
        self.attempts = attempts
        """HTTP requests made for the call."""


class ModelUnavailable(LLMError):
    """The endpoint did not answer usefully (after retries, or at once for 4xx)."""


class ContextOverflow(ModelUnavailable):
    """A prompt (plus the room asked for the reply) does not fit the model's context."""


class TokenBudgetSpent(LLMError):
    """The token budget was spent before this call started."""


class BackendConfigError(LLMError):
    """The backend is misconfigured (the message names the fix)."""
