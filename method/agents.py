"""What the slow agent, the fast agent and the critic share: the backend that plays
their roles, the journal that records (and on resume replays) every call, and the
token budget.

``Agents.call(role, purpose, request)`` is the one way an agent thinks. The request is a
JSON-able dict of what the agent knows; the reply is a dict in the purpose's contract
(``llm.contracts``). The offline backend answers from the game's data and the skill
library; the openai backend asks a model. Both are recorded alike in ``calls.jsonl``,
and the token budget is kept here, once, for every backend.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm.backend import Backend
from llm.errors import BackendConfigError, ModelReplyError, ModelUnavailable, TokenBudgetSpent
from method.journal import Journal
from method.settings import LOCAL_N_CTX, AgentSettings
from runtime.events import log

if TYPE_CHECKING:
    from llm.local_server import Endpoint


class AgentCallFailed(Exception):
    """A call failed for good (model unreachable, reply unusable after repairs)."""

    def __init__(self, role: str, purpose: str, cause: str, detail: str) -> None:
        super().__init__(f"{role}/{purpose}: {cause}: {detail}")
        self.role, self.purpose, self.cause, self.detail = role, purpose, cause, detail


LOCAL_KEY_ENV = "RLGPT_LOCAL_API_KEY"
"""The key variable the ``local`` backend's client reads: the local server ignores keys,
but the ``openai`` client wants a non-empty one (set to ``local`` unless already set)."""


def make_backend(
    settings: AgentSettings, endpoint: Endpoint | None = None, world: str = "crafter"
) -> Backend:
    """The backend the config names (imported only when chosen: ``openai`` pulls in its
    client, ``offline`` the skill library). ``local`` is ``openai`` pointed at the
    ``endpoint`` of the server the driver started (:mod:`llm.local_server`). ``world``
    (``[task] world``): the game a model's prompts teach, or whose template library the
    offline backend codes from."""
    if settings.backend == "local":
        if endpoint is None:
            raise BackendConfigError("the local backend needs its server's endpoint")
        os.environ.setdefault(LOCAL_KEY_ENV, "local")
        backend = make_backend(
            dataclasses.replace(
                settings, backend="openai", base_url=endpoint.base_url, model=endpoint.alias,
                api_key_env=LOCAL_KEY_ENV, n_ctx=settings.n_ctx or LOCAL_N_CTX,
            ),
            world=world,
        )  # fmt: skip
        backend.name = "local"  # recorded with every call and shown in the report
        # A failed connection waits for the supervised server's restart under way, and
        # a server down for good fails the call with its own cause.
        backend.server_ready = endpoint.ready
        return backend
    if settings.backend == "replay":
        from method.replay import ReplayBackend

        replay = ReplayBackend(settings.replay, world)
        log.info("replay_loaded", path=str(replay.path), calls=replay.calls,
                 recorded_by=replay.recorded_by)  # fmt: skip
        return replay
    if settings.backend == "openai":
        from llm.openai_backend import OpenAIBackend

        return OpenAIBackend.from_settings(settings, world=world)
    from llm.offline import OfflineBackend

    return OfflineBackend(
        first=settings.offline_first,
        accept=settings.offline_accept,
        revise=settings.offline_revise,
        lessons=settings.offline_lessons,
        world=world,
    )


class Agents:
    """The backend and journal of one run, shared by its agent actors."""

    def __init__(self, backend: Backend, run_dir: Path, token_budget: int = 0) -> None:
        self.backend = backend
        self.journal = Journal(run_dir)
        self.token_budget = token_budget
        """Tokens (in + out, replayed calls included) the run may spend; 0: no limit."""
        self.spent = False
        """Set once the token budget ran out; agents then finish what they have."""

    @property
    def tokens(self) -> int:
        t = self.journal.totals
        return t.tokens_in + t.tokens_out

    async def call(
        self,
        role: str,
        purpose: str,
        request: dict[str, Any],
        *,
        temperature: float | None = None,
    ) -> dict[str, Any]:
        """One agent call, replayed from the journal when an earlier attempt made it;
        ``temperature``: sample it hotter than the backend's setting (a question asked
        again because the first answer repeated itself).

        Raises :class:`TokenBudgetSpent` (the budget was spent before the call) or
        :class:`AgentCallFailed` (the backend gave up on it)."""
        if self.token_budget and self.tokens >= self.token_budget:
            self.spent = True
            log.warning(
                "llm_budget_spent", role=role, purpose=purpose, tokens_used=self.tokens,
                token_budget=self.token_budget,
            )  # fmt: skip
            raise TokenBudgetSpent(
                f"token budget spent: {self.tokens} of {self.token_budget} tokens used "
                f"before {role}/{purpose}"
            )
        try:
            result = await self.journal.call(self.backend, role, purpose, request, temperature)
        except (ModelUnavailable, ModelReplyError) as exc:
            name = type(exc).__name__
            log.error("agent_call_failed", role=role, purpose=purpose, cause=name, detail=str(exc))
            raise AgentCallFailed(role, purpose, name, str(exc)) from exc
        return result.data
