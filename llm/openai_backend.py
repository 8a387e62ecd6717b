"""The model backend: agent calls answered by an OpenAI-compatible chat completions API.

``await backend.call(role, purpose, request)`` renders the prompt file for the call
(:mod:`llm.prompts`), asks the model, extracts the JSON reply and validates it against
the purpose's contract (:mod:`llm.contracts`). Two bounded loops, one inside the other:

- **repair** — an invalid reply (no JSON, broken contract, code with a syntax error) is
  sent back with the validator's message and a request for a corrected reply, at most
  ``max_repairs`` times; then :class:`ModelReplyError`.
- **retry** — each request is retried on 429, 408, 5xx, connection errors and timeouts
  with exponential backoff (``Retry-After`` honoured), at most ``max_retries`` times; then
  :class:`ModelUnavailable`. Other 4xx (401, 404, 400…) raise :class:`ModelUnavailable` at
  once, naming the fix. The client's own retries are off, so every attempt is ours and
  counted.

Every successful call emits an ``llm_call`` event with tokens, latency, attempts and
repairs, and adds its tokens to :attr:`OpenAIBackend.tokens_used`. The run's token budget
is not kept here: :class:`method.agents.Agents` keeps it for every backend alike.

**trio.** ``openai.AsyncOpenAI`` works under trio as it is: the client (openai 3.x) sits on
httpx2, which does its I/O through anyio, and anyio runs on trio. Verified by
``tests/test_llm.py`` over real HTTP on 127.0.0.1: requests, timeouts, and trio
cancellation (a cancelled scope abandons the request cleanly). So no worker thread is
needed; each request also runs under ``trio.move_on_after(timeout_s)``, which bounds the
whole request (the client's own timeout bounds each connect/read separately).
"""

from __future__ import annotations

import dataclasses
import email.utils
import os
import random
import time
from pathlib import Path
from typing import Any

import openai
import trio

from llm.backend import CallResult
from llm.contracts import PURPOSES, validate
from llm.errors import (
    BackendConfigError,
    ContractError,
    ModelReplyError,
    ModelUnavailable,
)
from llm.prompts import PROMPTS_DIR, Messages, PromptSet, extract_json, messages_text
from runtime.events import log

# Statuses worth another try: rate limited, request timeout, and the server's own errors.
# Other 4xx say the request itself is wrong (key, model name, URL), which retrying repeats.
RETRY_STATUSES = frozenset({408, 429})


@dataclasses.dataclass(slots=True)
class _Completion:
    text: str
    tokens_in: int
    tokens_out: int
    attempts: int


class OpenAIBackend:
    """Agent calls answered by a chat model behind an OpenAI-compatible endpoint."""

    name = "openai"
    """Backend name recorded with every call."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str,
        timeout_s: float = 60,
        max_retries: int = 4,
        temperature: float = 0.2,
        prompts_dir: Path = PROMPTS_DIR,
        *,
        max_repairs: int = 2,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        json_mode: bool = False,
    ) -> None:
        """
        :param base_url: the API root, e.g. ``https://api.openai.com/v1``.
        :param model: model name as the endpoint knows it.
        :param api_key_env: name of the environment variable holding the API key.
        :param timeout_s: limit for one HTTP request, connect to last byte.
        :param max_retries: further tries of one request on 429/408/5xx/connection errors.
        :param temperature: sampling temperature (low: replies follow the contract).
        :param prompts_dir: folder of the prompt files (default: ``llm/prompts``).
        :param max_repairs: invalid replies sent back for correction before giving up.
        :param backoff_s: first retry delay; doubles per retry (with jitter).
        :param backoff_max_s: longest wait between tries, ``Retry-After`` included.
        :param json_mode: ask for ``response_format={"type": "json_object"}`` (for endpoints
            that support it; the reply is validated either way).
        """
        key = os.environ.get(api_key_env, "")
        if not key:
            raise BackendConfigError(
                f"environment variable {api_key_env} is not set (or empty): export "
                f"{api_key_env}=<your API key> before starting the run, or name another "
                "variable in the backend's api_key_env setting"
            )
        if max_retries < 0 or max_repairs < 0 or timeout_s <= 0:
            raise BackendConfigError("max_retries and max_repairs must be >= 0 and timeout_s > 0")
        self.base_url = base_url
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.temperature = temperature
        self.max_repairs = max_repairs
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.json_mode = json_mode
        self.prompts = PromptSet(prompts_dir)
        # max_retries=0: the client's own retries would hide attempts from our count and
        # ignore our backoff settings.
        self._client = openai.AsyncOpenAI(
            api_key=key, base_url=base_url, timeout=timeout_s, max_retries=0
        )
        self._tokens_used = 0

    @property
    def tokens_used(self) -> int:
        """Tokens (prompt + completion) spent by every request so far."""
        return self._tokens_used

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    async def __aenter__(self) -> OpenAIBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ calls

    def render(self, role: str, purpose: str, request: dict[str, Any]) -> Messages:
        """The messages a call starts with (pure: reads only the loaded prompt files)."""
        if (role, purpose) not in PURPOSES:
            raise ValueError(f"unknown call {role}/{purpose}; known: {sorted(PURPOSES)}")
        return self.prompts.render(role, purpose, request)

    async def call(self, role: str, purpose: str, request: dict[str, Any]) -> CallResult:
        """Ask the model; return the validated reply.

        Raises :class:`ModelUnavailable` (endpoint failing) or :class:`ModelReplyError`
        (still invalid after ``max_repairs`` repairs).
        """
        messages = self.render(role, purpose, request)
        start = time.monotonic()
        tokens_in = tokens_out = attempts = repairs = 0
        reply = error = ""
        for repair in range(self.max_repairs + 1):
            completion = await self._complete(messages, role, purpose)
            reply = completion.text
            tokens_in += completion.tokens_in
            tokens_out += completion.tokens_out
            attempts += completion.attempts
            try:
                data = validate(role, purpose, extract_json(reply))
            except ContractError as exc:
                error = str(exc)
                log.info(
                    "llm_reply_invalid", role=role, purpose=purpose, repair=repair, error=error
                )
                if repair < self.max_repairs:
                    messages = [
                        *messages,
                        {"role": "assistant", "content": reply},
                        self.prompts.render_repair(error),
                    ]
                    repairs += 1
                continue
            latency = round(time.monotonic() - start, 3)
            log.info(
                "llm_call",
                role=role,
                purpose=purpose,
                model=self.model,
                tokens_in=tokens_in,
                tokens_out=tokens_out,
                latency_s=latency,
                attempts=attempts,
                repairs=repairs,
            )
            return CallResult(
                data=data,
                prompt=messages_text(messages),
                reply=reply,
                tokens_in=tokens_in,
                tokens_out=tokens_out,
                latency_s=latency,
                attempts=attempts,
                repairs=repairs,
            )
        log.warning(
            "llm_call_failed",
            role=role,
            purpose=purpose,
            reason="invalid_reply",
            error=error,
            attempts=attempts,
            repairs=repairs,
        )
        raise ModelReplyError(
            f"{role}/{purpose}: reply still invalid after {repairs} repairs: {error}",
            reply=reply,
            attempts=attempts,
        )

    async def check(self) -> None:
        """Cheap reachability check for config validation: list the endpoint's models.

        Raises :class:`ModelUnavailable` with the fix when the endpoint refuses (connection
        refused, 401, …). An endpoint without ``/models`` (404) gets one tiny completion.
        """
        try:
            with trio.move_on_after(self.timeout_s) as scope:
                page = await self._client.models.list()
            if scope.cancelled_caught:
                raise ModelUnavailable(
                    f"{self.base_url} did not answer within {self.timeout_s} s: check base_url "
                    "and that the server is up"
                )
        except openai.NotFoundError:
            await self._complete([{"role": "user", "content": "Reply with {}."}], "check", "check")
            return
        except openai.APIStatusError as exc:
            raise ModelUnavailable(self._status_message(exc)) from exc
        except openai.APIConnectionError as exc:
            raise ModelUnavailable(self._connection_message(exc)) from exc
        served = [m.id for m in page.data]
        if served and self.model not in served:
            log.warning("llm_model_not_listed", model=self.model, served=served[:20])

    # ------------------------------------------------------------------ one request

    async def _complete(self, messages: Messages, role: str, purpose: str) -> _Completion:
        """One chat completion, retried on transient failures."""
        extra: dict[str, Any] = {}
        if self.json_mode:
            extra["response_format"] = {"type": "json_object"}
        problem = ""
        for attempt in range(self.max_retries + 1):
            wait = self._backoff(attempt)
            response = None
            try:
                with trio.move_on_after(self.timeout_s):
                    response = await self._client.chat.completions.create(
                        model=self.model,
                        messages=messages,  # type: ignore[arg-type]
                        temperature=self.temperature,
                        **extra,
                    )
                if response is None:
                    problem = f"no answer within {self.timeout_s} s"
            except openai.APIStatusError as exc:
                if exc.status_code not in RETRY_STATUSES and exc.status_code < 500:
                    log.warning(
                        "llm_call_failed", role=role, purpose=purpose, status=exc.status_code
                    )
                    raise ModelUnavailable(self._status_message(exc)) from exc
                problem = f"HTTP {exc.status_code}"
                wait = _retry_after(exc.response.headers, wait, self.backoff_max_s)
            except openai.APITimeoutError:
                problem = f"no answer within {self.timeout_s} s"
            except openai.APIConnectionError as exc:
                problem = f"connection failed ({_cause(exc)})"
            if response is not None:
                self._tokens_used += _tokens(response)
                return _Completion(
                    text=_content(response),
                    tokens_in=_usage(response, "prompt_tokens"),
                    tokens_out=_usage(response, "completion_tokens"),
                    attempts=attempt + 1,
                )
            if attempt == self.max_retries:
                break
            log.warning(
                "llm_retry",
                role=role,
                purpose=purpose,
                attempt=attempt + 1,
                problem=problem,
                wait_s=round(wait, 3),
            )
            await trio.sleep(wait)
        log.warning("llm_call_failed", role=role, purpose=purpose, problem=problem)
        raise ModelUnavailable(
            f"{self.base_url} failed {self.max_retries + 1} times for {role}/{purpose} "
            f"(last: {problem}): check that the server is up and not overloaded, or raise "
            "max_retries/timeout_s"
        )

    def _backoff(self, attempt: int) -> float:
        # Full-ish jitter: agents that hit a rate limit together do not retry together.
        delay = min(self.backoff_max_s, self.backoff_s * 2**attempt)
        return delay * random.uniform(0.5, 1.0)

    def _status_message(self, exc: openai.APIStatusError) -> str:
        status = exc.status_code
        detail = f"HTTP {status}: {_error_text(exc)}"
        if status in (401, 403):
            fix = (
                f"check that ${self.api_key_env} holds a valid API key for {self.base_url} "
                "(and that the key may use this model)"
            )
        elif status == 404:
            fix = (
                f"check the model name ({self.model!r}) and base_url ({self.base_url}; "
                "OpenAI-compatible servers usually end in /v1)"
            )
        else:
            fix = f"check the model name ({self.model!r}) and the backend settings"
        return f"{self.base_url} refused the request ({detail}): {fix}"

    def _connection_message(self, exc: openai.APIConnectionError) -> str:
        return (
            f"cannot reach {self.base_url} ({_cause(exc)}): check base_url and that the "
            "server is running and reachable from this machine"
        )


# ---------------------------------------------------------------------- response helpers


def _content(response: Any) -> str:
    if not response.choices:
        return ""
    message = response.choices[0].message
    return message.content or ""


def _usage(response: Any, field: str) -> int:
    usage = getattr(response, "usage", None)
    return int(getattr(usage, field, 0) or 0) if usage is not None else 0


def _tokens(response: Any) -> int:
    return _usage(response, "prompt_tokens") + _usage(response, "completion_tokens")


def _cause(exc: BaseException) -> str:
    """The root cause of a connection error, in one line (e.g. 'Connection refused')."""
    root: BaseException = exc
    while root.__cause__ is not None:
        root = root.__cause__
    text = str(root) or type(root).__name__
    return text.splitlines()[0][:200]


def _error_text(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message") or (body.get("error") or {}).get("message")
        if message:
            return str(message)[:300]
    return str(exc)[:300]


def _retry_after(headers: Any, default: float, cap: float) -> float:
    """The server's ``Retry-After`` (or ``retry-after-ms``) in seconds, capped; else default."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return min(cap, max(0.0, float(ms) / 1000))
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return default
    try:
        return min(cap, max(0.0, float(value)))
    except ValueError:
        pass
    try:  # the other form: an HTTP date
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return default
    return min(cap, max(0.0, when.timestamp() - time.time()))
