"""The model backend: agent calls answered by an OpenAI-compatible chat completions API.

``await backend.call(role, purpose, request)`` renders the prompt file for the call
(:mod:`llm.prompts`), asks the model, extracts the JSON reply and validates it against
the purpose's contract (:mod:`llm.contracts`). Two bounded loops, one inside the other:

- **repair** — an invalid reply (no JSON, broken contract, code with a syntax error) is
  first mended here when only its JSON syntax is wrong (comments, trailing commas,
  quotes, raw newlines in strings: the ``json-repair`` package; never a reply cut off by
  the token limit), else sent back with the validator's message and a request for a
  corrected reply, at most ``max_repairs`` times; then :class:`ModelReplyError`.
- **retry** — each request is retried on 429, 408, 5xx and dropped connections with
  exponential backoff (``Retry-After`` honoured), at most ``max_retries`` times; a
  timeout at most once (a prompt too long for the server in time is as long the second
  time); then :class:`ModelUnavailable`. Other 4xx (401, 404, 400…) raise
  :class:`ModelUnavailable` at once, naming the fix. The client's own retries are off,
  so every attempt is ours and counted.

**Real servers' quirks** (each tested against a loopback fake of that server's
behaviour in ``tests/test_llm_quirks.py``):

- *structured output*: with ``json_mode="schema"`` each request carries its contract as
  a JSON Schema (``response_format`` ``json_schema``); a server that refuses it (HTTP
  400/422/500 naming ``response_format`` or the schema — llama.cpp's servers answer 500)
  gets ``{"type": "json_object", "schema": …}`` (llama-cpp-python's form), then plain
  ``json_object``, then nothing; what worked is remembered for the endpoint.
- *parameters a model refuses*: a 400 naming ``temperature`` or ``max_tokens`` drops it
  (``max_tokens`` becomes ``max_completion_tokens`` where the server says so) and asks
  again at once; remembered for the endpoint.
- *no ``usage``*: tokens are estimated from the text (:func:`llm.prompts.estimate_tokens`)
  and the call is marked ``tokens_estimated``; the run's token budget counts them.
- *reasoning*: ``<think>…</think>`` blocks in the content and a ``reasoning_content`` (or
  ``reasoning``) field are kept apart (:attr:`CallResult.reasoning`), never parsed as
  the answer.
- *cut-off replies* (``finish_reason="length"``): no blind retry and no repair of the
  torn JSON. Once per call: a larger ``max_tokens`` where the context has room, else the
  same request asking for a shorter reply; cut off again → :class:`ModelReplyError`
  naming the limit.
- *context*: a prompt whose estimate plus ``max_tokens`` passes ``n_ctx`` is refused
  before it is sent, and a server's "context length exceeded" is reported as such
  (:class:`ContextOverflow`), never as a wrong model name.
- *loopback servers*: no API key variable needed; at most ``max_concurrent`` requests
  at once (default 1: llama.cpp and Ollama serve one at a time, the rest queue and time
  out); each request's timeout grows with its tokens at ``tokens_per_s`` (CPU servers
  read tens of tokens a second).

Every successful call emits an ``llm_call`` event with tokens, latency, attempts and
repairs, and adds its tokens to :attr:`OpenAIBackend.tokens_used`. The run's token budget
is not kept here: :class:`method.agents.Agents` keeps it for every backend alike.

**trio.** ``openai.AsyncOpenAI`` works under trio as it is: the client (openai 3.x) sits on
httpx2, which does its I/O through anyio, and anyio runs on trio. Verified by
``tests/test_llm.py`` over real HTTP on 127.0.0.1: requests, timeouts, and trio
cancellation (a cancelled scope abandons the request cleanly). So no worker thread is
needed; each request also runs under ``trio.move_on_after(timeout)``, which bounds the
whole request (the client's own timeout bounds each connect/read separately).
"""

from __future__ import annotations

import dataclasses
import email.utils
import os
import random
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import json_repair
import openai
import trio

from llm.backend import CallResult
from llm.contracts import PURPOSES, game, json_schemas, validate
from llm.errors import (
    BackendConfigError,
    ContextOverflow,
    ContractError,
    ModelReplyError,
    ModelUnavailable,
)
from llm.prompts import (
    PROMPTS_DIR,
    Messages,
    PromptSet,
    estimate_tokens,
    extract_json,
    messages_text,
    text_tokens,
)
from runtime.events import log
from runtime.security import is_loopback

# Statuses worth another try: rate limited, request timeout, and the server's own errors.
# Other 4xx say the request itself is wrong (key, model name, URL), which retrying repeats.
RETRY_STATUSES = frozenset({408, 429})
JSON_MODES = ("schema", "object", "off")
"""``json_mode`` values: ``schema`` (the contract as a JSON Schema, falling back as the
server allows), ``object`` (``json_object`` only), ``off`` (no ``response_format``)."""
# The response_format forms tried in order under json_mode="schema" ("" = none).
_FORMATS = {"schema": ("json_schema", "object_schema", "json_object", ""),
            "object": ("json_object", ""), "off": ("",)}  # fmt: skip
LOCAL_KEY = "not-needed-on-loopback"
"""What is sent as the API key to a loopback server when no key variable is set (the
client wants one; llama.cpp, Ollama and vLLM ignore it unless started with a key)."""
LOCAL_TOKENS_PER_S = 10.0
"""Loopback default of ``tokens_per_s``: below what a 1.5B model reads and writes on one
CPU thread (35–80 and 12–27 tokens/s measured), so a slow call is not cut short."""
LOCAL_CONCURRENT = 1
"""Loopback default of ``max_concurrent``: llama.cpp servers answer one request at a time."""
REMOTE_CONCURRENT = 16
"""Remote default of ``max_concurrent``: the fast agent's default capacity."""
REPLY_RESERVE = 1024
"""Tokens assumed for the reply in the context check when ``max_tokens`` is not sent."""
MIN_REPLY_TOKENS = 32
"""Fewest tokens worth asking a reply in: less holds no contract's JSON."""
# A server's words for "the prompt does not fit" (llama-cpp-python, llama.cpp, vLLM,
# Ollama, OpenAI).
_OVERFLOW = re.compile(
    r"context.length|context.window|maximum context|context_length_exceeded|n_ctx|"
    r"prompt is too long|too many tokens|exceeds? the (?:available )?context|"
    r"input is too long|longer than the model",
    re.IGNORECASE,
)
_FORMAT_WORDS = re.compile(r"response_format|json_schema|\bschema\b|json_object", re.IGNORECASE)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)


@dataclasses.dataclass(slots=True)
class _Completion:
    text: str
    """The answer, reasoning removed."""
    reasoning: str
    tokens_in: int
    tokens_out: int
    attempts: int
    estimated: bool
    finish_reason: str


@dataclasses.dataclass
class _Endpoint:
    """What this endpoint accepts, learnt from its refusals (kept for the backend's life)."""

    format_level: int = 0
    """Index into the json_mode's response_format forms."""
    dropped: set[str] = dataclasses.field(default_factory=set)
    """Request parameters the model refused (``temperature``, ``max_tokens``)."""
    max_tokens_name: str = "max_tokens"
    """``max_completion_tokens`` where the server asks for that name instead."""


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
        temperature: float | None = 0.2,
        prompts_dir: Path = PROMPTS_DIR,
        *,
        world: str = "crafter",
        max_repairs: int = 2,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        json_mode: bool | str = False,
        max_tokens: int | None = None,
        n_ctx: int = 0,
        max_concurrent: int = 0,
        tokens_per_s: float = 0.0,
    ) -> None:
        """
        :param base_url: the API root, e.g. ``https://api.openai.com/v1``.
        :param model: model name as the endpoint knows it.
        :param api_key_env: name of the environment variable holding the API key (may be
            unset for a loopback server).
        :param timeout_s: limit for one HTTP request, connect to last byte (plus the
            token allowance, see ``tokens_per_s``).
        :param max_retries: further tries of one request on 429/408/5xx/connection errors
            (a timeout is tried again once at most).
        :param temperature: sampling temperature (low: replies follow the contract);
            None: not sent (the server's default).
        :param prompts_dir: folder of the prompt files (default: ``llm/prompts``).
        :param world: the game the prompts teach (``[task] world``: its skill API, facts
            and worked examples; :class:`~llm.prompts.PromptSet`).
        :param max_repairs: invalid replies sent back for correction before giving up.
        :param backoff_s: first retry delay; doubles per retry (with jitter).
        :param backoff_max_s: longest wait between tries, ``Retry-After`` included.
        :param json_mode: ``schema``, ``object`` or ``off`` (see :data:`JSON_MODES`);
            True means ``object``, False ``off``. The reply is validated either way.
        :param max_tokens: the most tokens a reply may have (None or 0: not sent).
        :param n_ctx: the model's context in tokens; a prompt that would not fit is
            refused before it is sent (0: unknown, learnt from ``/models`` where the
            server says it, else not checked here).
        :param max_concurrent: requests in flight at once (0: 1 on loopback, 16 else).
        :param tokens_per_s: each request's timeout grows by (prompt + reply tokens) /
            this rate (0: no growth; :meth:`from_settings` makes ``[agents]``'s 0 mean 10
            on loopback).
        """
        mode = {True: "object", False: "off"}.get(json_mode, json_mode)  # type: ignore[arg-type]
        if mode not in JSON_MODES:
            raise BackendConfigError(
                f"json_mode must be one of {', '.join(JSON_MODES)}, not {json_mode!r}"
            )
        self.server_ready: Callable[[], Awaitable[bool]] | None = None
        """For a supervised server (the ``local`` backend's): waits through a restart under
        way (True when it did), raises the server's cause when it is down for good."""
        self.loopback = is_loopback(base_url)
        """Whether the endpoint is on this machine (no key needed, one request at a time)."""
        key = os.environ.get(api_key_env, "") if api_key_env else ""
        if not key and self.loopback:
            key = LOCAL_KEY
        if not key:
            raise BackendConfigError(
                f"environment variable {api_key_env} is not set (or empty): export "
                f"{api_key_env}=<your API key> before starting the run, or name another "
                "variable in the backend's api_key_env setting (a loopback server needs none)"
            )
        if max_retries < 0 or max_repairs < 0 or timeout_s <= 0:
            raise BackendConfigError("max_retries and max_repairs must be >= 0 and timeout_s > 0")
        if n_ctx < 0 or max_concurrent < 0 or tokens_per_s < 0 or (max_tokens or 0) < 0:
            raise BackendConfigError("n_ctx, max_concurrent, tokens_per_s, max_tokens must be >= 0")
        self.base_url = base_url
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.temperature = temperature
        self.max_repairs = max_repairs
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.json_mode = mode
        self.max_tokens = max_tokens or None
        self.n_ctx = n_ctx
        self.max_concurrent = max_concurrent or (
            LOCAL_CONCURRENT if self.loopback else REMOTE_CONCURRENT
        )
        self.tokens_per_s = tokens_per_s
        self.prompts = PromptSet(prompts_dir, world)
        self.world = world
        """The game the prompts teach and the replies are checked against."""
        self.schemas = json_schemas(world)
        self._endpoint = _Endpoint()
        self._listed = False  # whether the model listing was read for the context
        self._limiter = trio.CapacityLimiter(self.max_concurrent)
        # max_retries=0: the client's own retries would hide attempts from our count and
        # ignore our backoff settings.
        self._client = openai.AsyncOpenAI(
            api_key=key, base_url=base_url, timeout=timeout_s, max_retries=0
        )
        self._tokens_used = 0

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> OpenAIBackend:
        """The backend ``[agents]`` describes (``method.settings.AgentSettings``, read by
        attribute so this floor needs no import from above); ``overrides`` win (e.g. the
        ``base_url`` of a server the run started itself)."""
        temperature = float(settings.temperature)
        base_url = overrides.get("base_url", settings.base_url)
        options: dict[str, Any] = {
            "base_url": settings.base_url,
            "model": settings.model,
            "api_key_env": settings.api_key_env,
            "timeout_s": settings.timeout_s,
            "max_retries": settings.max_retries,
            "temperature": temperature if temperature >= 0 else None,
            "json_mode": settings.json_mode,
            "max_tokens": settings.max_tokens or None,
            "n_ctx": settings.n_ctx,
            "max_concurrent": settings.max_concurrent,
            # 0: CPU-server speed on loopback (where local models run), none elsewhere.
            "tokens_per_s": settings.tokens_per_s
            or (LOCAL_TOKENS_PER_S if is_loopback(base_url) else 0.0),
        }
        return cls(**{**options, **overrides})

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

    async def call(
        self,
        role: str,
        purpose: str,
        request: dict[str, Any],
        *,
        temperature: float | None = None,
    ) -> CallResult:
        """Ask the model; return the validated reply. ``temperature``: this call's
        sampling temperature where it is above the configured one (never sent to a
        model configured to get none, ``temperature = -1``).

        Raises :class:`ModelUnavailable` (endpoint failing; :class:`ContextOverflow` when
        the prompt does not fit) or :class:`ModelReplyError` (still invalid after
        ``max_repairs`` repairs, or cut off twice).
        """
        messages = self.render(role, purpose, request)
        if not self.n_ctx and not self._listed:
            await self._learn_context()
        start = time.monotonic()
        tokens_in = tokens_out = attempts = repairs = local = 0
        estimated, reasoning = False, []
        max_tokens = self.max_tokens
        cut_retried = False
        reply = error = ""
        repair = 0
        while repair <= self.max_repairs:
            completion = await self._complete(messages, role, purpose, max_tokens, temperature)
            reply = completion.text
            tokens_in += completion.tokens_in
            tokens_out += completion.tokens_out
            attempts += completion.attempts
            estimated = estimated or completion.estimated
            if completion.reasoning:
                reasoning.append(completion.reasoning)
            if completion.finish_reason == "length":
                # Cut off by the token limit: its JSON is torn, and mending it would
                # invent the end. One more try, with room or asking for less.
                if cut_retried:
                    raise self._cut_off(role, purpose, max_tokens, reply, attempts)
                cut_retried = True
                max_tokens, messages = self._after_cut(messages, role, purpose, max_tokens)
                continue
            try:
                parsed, mended = self._parse(reply, role, purpose)
                local += mended
                with game(self.world):
                    data = validate(role, purpose, parsed)
            except ContractError as exc:
                error = str(exc)
            else:
                return self._result(
                    role, purpose, messages, reply, data, start, tokens_in, tokens_out,
                    attempts, repairs, estimated, reasoning, local,
                )  # fmt: skip
            log.info("llm_reply_invalid", role=role, purpose=purpose, repair=repair, error=error)
            if repair < self.max_repairs:
                messages = [
                    *messages,
                    {"role": "assistant", "content": reply},
                    self.prompts.render_repair(error),
                ]
                repairs += 1
            repair += 1
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

    def _result(
        self, role: str, purpose: str, messages: Messages, reply: str, data: dict[str, Any],
        start: float, tokens_in: int, tokens_out: int, attempts: int, repairs: int,
        estimated: bool, reasoning: list[str], local: int,
    ) -> CallResult:  # fmt: skip
        latency = round(time.monotonic() - start, 3)
        log.info(
            "llm_call",
            role=role,
            purpose=purpose,
            model=self.model,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            tokens_estimated=estimated,
            latency_s=latency,
            attempts=attempts,
            repairs=repairs,
            local_repairs=local,
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
            tokens_estimated=estimated,
            reasoning="\n\n".join(reasoning),
            local_repairs=local,
        )

    def _parse(self, reply: str, role: str, purpose: str) -> tuple[Any, bool]:
        return parse_reply(reply, role, purpose)

    def _after_cut(
        self, messages: Messages, role: str, purpose: str, max_tokens: int | None
    ) -> tuple[int | None, Messages]:
        """The one retry of a cut-off reply: twice the room where the context has it,
        else the same prompt asking for a shorter reply."""
        room = self._room(messages)
        if max_tokens and (room is None or room > max_tokens):
            bigger = max_tokens * 2 if room is None else min(max_tokens * 2, room)
            log.warning(
                "llm_reply_cut_off", role=role, purpose=purpose, max_tokens=max_tokens,
                retry="larger", next_max_tokens=bigger,
            )  # fmt: skip
            return bigger, messages
        log.warning(
            "llm_reply_cut_off", role=role, purpose=purpose, max_tokens=max_tokens,
            retry="shorter",
        )  # fmt: skip
        ask = {
            "role": "user",
            "content": "Your reply was cut off by the length limit"
            + (f" ({max_tokens} tokens)" if max_tokens else "")
            + ". Reply again with the complete JSON object, much shorter: short notes "
            "and reasons, compact code.",
        }
        messages = [*messages, ask]
        left = self._room(messages)
        if max_tokens and left is not None:
            if left < MIN_REPLY_TOKENS:
                raise self._cut_off(role, purpose, max_tokens, "", 0)
            max_tokens = min(max_tokens, left)  # the request itself grew by the ask
        return max_tokens, messages

    def _cut_off(
        self, role: str, purpose: str, max_tokens: int | None, reply: str, attempts: int
    ) -> ModelReplyError:
        log.warning("llm_call_failed", role=role, purpose=purpose, reason="cut_off")
        limit = f"max_tokens={max_tokens}" if max_tokens else "the server's own limit"
        return ModelReplyError(
            f"{role}/{purpose}: the reply was cut off at {limit} twice (finish_reason="
            '"length"), the second time with more room or asked to be shorter: raise '
            "[agents] max_tokens (and n_ctx with the server's context) or use a model "
            "that answers more briefly",
            reply=reply,
            attempts=attempts,
        )

    def _room(self, messages: Messages) -> int | None:
        """Tokens the context leaves for the reply (None: context unknown)."""
        if not self.n_ctx:
            return None
        return self.n_ctx - estimate_tokens(messages)

    def _check_fits(
        self, messages: Messages, role: str, purpose: str, max_tokens: int | None
    ) -> None:
        if not self.n_ctx:
            return
        prompt = estimate_tokens(messages)
        reply = max_tokens or REPLY_RESERVE
        if prompt + reply <= self.n_ctx:
            return
        log.error(
            "llm_prompt_too_long", role=role, purpose=purpose, prompt_tokens=prompt,
            reply_tokens=reply, n_ctx=self.n_ctx,
        )  # fmt: skip
        raise ContextOverflow(
            f"{role}/{purpose}: the prompt (llm/prompts/{role}_{purpose}.txt with its "
            f"request) is ~{prompt} tokens and {reply} are kept for the reply: "
            f"{prompt + reply} > the model's context of {self.n_ctx} tokens ([agents] "
            "n_ctx). Fix: raise n_ctx (and the server's context with it, e.g. llama.cpp's "
            "--n_ctx), lower [agents] max_tokens, or shorten the task (fewer steps)"
        )

    async def check(self) -> None:
        """Cheap reachability check for config validation: list the endpoint's models.

        Raises :class:`ModelUnavailable` with the fix when the endpoint refuses (connection
        refused, 401, …). An endpoint without ``/models`` (404) gets one tiny completion.
        Where the listing tells the model's context (vLLM's ``max_model_len``, llama.cpp's
        ``meta.n_ctx_train``) and ``n_ctx`` is unset, it is taken from there.
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
            await self._complete(
                [{"role": "user", "content": "Reply with {}."}], "check", "check", 16
            )
            return
        except openai.APIStatusError as exc:
            raise ModelUnavailable(self._status_message(exc)) from exc
        except openai.APIConnectionError as exc:
            raise ModelUnavailable(self._connection_message(exc)) from exc
        served = [m.id for m in page.data]
        if served and self.model not in served:
            log.warning("llm_model_not_listed", model=self.model, served=served[:20])
        self._take_context(page.data)

    async def _learn_context(self) -> None:
        """Once per backend, before its first call: the model's context from the server's
        listing where it states one (no listing, no context: left to the server)."""
        self._listed = True
        try:
            with trio.move_on_after(min(self.timeout_s, 10.0)):
                async with self._limiter:
                    page = await self._client.models.list()
                self._take_context(page.data)
        except openai.OpenAIError:
            pass  # the call itself will say what is wrong with the endpoint

    def _take_context(self, entries: list[Any]) -> None:
        self._listed = True
        for entry in entries:
            if entry.id == self.model or len(entries) == 1:
                context = _listed_context(entry)
                if context and not self.n_ctx:
                    self.n_ctx = context
                    log.info("llm_context_learnt", model=self.model, n_ctx=context)

    # ------------------------------------------------------------------ one request

    def _params(
        self, role: str, purpose: str, max_tokens: int | None, hotter: float | None = None
    ) -> dict[str, Any]:
        """The request's optional parameters, as far as this endpoint accepts them."""
        ep = self._endpoint
        params: dict[str, Any] = {}
        if self.temperature is not None and "temperature" not in ep.dropped:
            params["temperature"] = max(self.temperature, hotter or 0.0)
        if max_tokens and "max_tokens" not in ep.dropped:
            params[ep.max_tokens_name] = max_tokens
        form = _FORMATS[self.json_mode][ep.format_level]
        schema = self.schemas.get((role, purpose))
        if form == "json_schema" and schema is not None:
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": f"{role}_{purpose}", "schema": schema, "strict": False},
            }
        elif form == "object_schema" and schema is not None:
            params["response_format"] = {"type": "json_object", "schema": schema}
        elif form:  # json_object, or a schema form without a schema (the check)
            params["response_format"] = {"type": "json_object"}
        return params

    def _timeout(self, messages: Messages, max_tokens: int | None) -> float:
        """``timeout_s``, plus the time a slow server takes to read the prompt and write
        the reply at ``tokens_per_s``."""
        if not self.tokens_per_s:
            return self.timeout_s
        tokens = estimate_tokens(messages) + (max_tokens or REPLY_RESERVE)
        return self.timeout_s + tokens / self.tokens_per_s

    async def _complete(
        self,
        messages: Messages,
        role: str,
        purpose: str,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> _Completion:
        """One chat completion, retried on transient failures."""
        self._check_fits(messages, role, purpose, max_tokens)
        timeout = self._timeout(messages, max_tokens)
        problem = said = ""
        attempt = retries = timeouts = 0
        while True:
            attempt += 1
            wait = self._backoff(retries)
            response = None
            params = self._params(role, purpose, max_tokens, temperature)
            try:
                async with self._limiter:
                    with trio.move_on_after(timeout):
                        response = await self._client.chat.completions.create(
                            model=self.model,
                            messages=messages,  # type: ignore[arg-type]
                            timeout=timeout,
                            **params,
                        )
                if response is None:
                    problem = f"no answer within {timeout:.0f} s"
                    timeouts += 1
            except openai.APIStatusError as exc:
                if self._adapt(exc, params, role, purpose):
                    continue  # asked again at once, without what the server refused
                if exc.status_code not in RETRY_STATUSES and exc.status_code < 500:
                    raise self._refused(exc, messages, role, purpose, max_tokens) from exc
                problem = f"HTTP {exc.status_code}"
                said = _error_text(exc)[:160]
                wait = _retry_after(exc.response.headers, wait, self.backoff_max_s)
            except openai.APITimeoutError:
                problem = f"no answer within {timeout:.0f} s"
                timeouts += 1
            except openai.APIConnectionError as exc:
                problem = f"connection failed ({_cause(exc)})"
                if self.server_ready is not None:
                    try:
                        restarted = await self.server_ready()
                    except Exception as down:  # noqa: BLE001 - the server's own cause
                        raise ModelUnavailable(str(down)) from down
                    if restarted:
                        continue  # it was down and is back: not a try of this request
            if response is not None:
                return self._completion(response, messages, attempt)
            if retries >= self.max_retries or timeouts >= 2:
                break
            retries += 1
            log.warning(
                "llm_retry",
                role=role,
                purpose=purpose,
                attempt=attempt,
                problem=problem,
                wait_s=round(wait, 3),
            )
            await trio.sleep(wait)
        log.warning("llm_call_failed", role=role, purpose=purpose, problem=problem)
        if timeouts >= 2:
            raise ModelUnavailable(
                f"{self.base_url} gave no answer within {timeout:.0f} s twice for "
                f"{role}/{purpose} (prompt ~{estimate_tokens(messages)} tokens): a server on "
                "a CPU needs longer; raise [agents] timeout_s or lower tokens_per_s (the "
                "token rate the timeout allows for), or lower max_tokens"
            )
        last = problem + (": " + said if said and problem.startswith("HTTP") else "")
        raise ModelUnavailable(
            f"{self.base_url} failed {attempt} times for {role}/{purpose} (last: {last}): "
            "check that the server is up and not overloaded, or raise max_retries/timeout_s"
        )

    def _refused(
        self,
        exc: openai.APIStatusError,
        messages: Messages,
        role: str,
        purpose: str,
        max_tokens: int | None,
    ) -> Exception:
        """What a request the server refused for good (a 4xx other than a retryable one)
        raises: the context overflow, or the server's own refusal."""
        log.warning("llm_call_failed", role=role, purpose=purpose, status=exc.status_code)
        if _OVERFLOW.search(_error_text(exc)):
            return ContextOverflow(self._overflow_message(exc, messages, role, purpose, max_tokens))
        return ModelUnavailable(self._status_message(exc))

    def _completion(self, response: Any, messages: Messages, attempt: int) -> _Completion:
        raw, field, finish = _content(response)
        text, thought = split_reasoning(raw)
        reasoning = "\n\n".join(r for r in (field, thought) if r)
        tokens_in = _usage(response, "prompt_tokens")
        tokens_out = _usage(response, "completion_tokens")
        estimated = not (tokens_in or tokens_out)
        if estimated:  # no usage sent: estimate, so that the token budget still holds
            tokens_in = estimate_tokens(messages)
            tokens_out = text_tokens(raw) + text_tokens(field)
        self._tokens_used += tokens_in + tokens_out
        return _Completion(
            text=text,
            reasoning=reasoning,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            attempts=attempt,
            estimated=estimated,
            finish_reason=finish,
        )

    def _adapt(
        self, exc: openai.APIStatusError, sent: dict[str, Any], role: str, purpose: str
    ) -> bool:
        """Whether the refusal names something we may leave out (a response_format form,
        temperature, max_tokens): then it is left out for this endpoint from now on."""
        if exc.status_code not in (400, 422, 500):
            return False
        text = _error_text(exc)
        ep = self._endpoint
        if "response_format" in sent and _FORMAT_WORDS.search(text):
            forms = _FORMATS[self.json_mode]
            if ep.format_level + 1 < len(forms):
                ep.format_level += 1
                log.warning(
                    "llm_format_refused", role=role, purpose=purpose,
                    refused=sent["response_format"]["type"], next=forms[ep.format_level] or "none",
                    status=exc.status_code, detail=text[:200],
                )  # fmt: skip
                return True
        if exc.status_code == 500:
            return False
        lowered = text.lower()
        if "temperature" in sent and "temperature" in lowered:
            ep.dropped.add("temperature")
            log.warning("llm_parameter_dropped", parameter="temperature", detail=text[:200])
            return True
        name = ep.max_tokens_name
        if name in sent and name in lowered:
            if name == "max_tokens" and "max_completion_tokens" in lowered:
                ep.max_tokens_name = "max_completion_tokens"
            else:
                ep.dropped.add("max_tokens")
            log.warning(
                "llm_parameter_dropped", parameter=name, renamed_to=ep.max_tokens_name
                if "max_tokens" not in ep.dropped else "", detail=text[:200],
            )  # fmt: skip
            return True
        return False

    def _backoff(self, attempt: int) -> float:
        # Full-ish jitter: agents that hit a rate limit together do not retry together.
        delay = min(self.backoff_max_s, self.backoff_s * 2**attempt)
        return delay * random.uniform(0.5, 1.0)

    def _overflow_message(
        self, exc: openai.APIStatusError, messages: Messages, role: str, purpose: str,
        max_tokens: int | None,
    ) -> str:  # fmt: skip
        return (
            f"{self.base_url} says the prompt for {role}/{purpose} does not fit the model's "
            f"context (HTTP {exc.status_code}: {_error_text(exc)}); the prompt is "
            f"~{estimate_tokens(messages)} tokens by our estimate, max_tokens "
            f"{max_tokens or 'not sent'}. Fix: start the server with a larger context "
            "(llama.cpp: --n_ctx / --ctx-size; Ollama: num_ctx) and set [agents] n_ctx to "
            "it, or lower [agents] max_tokens"
        )

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
            fix = (
                f"the server refused the request as sent; its message above says why "
                f"(model {self.model!r}; the [agents] settings temperature, max_tokens and "
                "json_mode shape the request)"
            )
        return f"{self.base_url} refused the request ({detail}): {fix}"

    def _connection_message(self, exc: openai.APIConnectionError) -> str:
        return (
            f"cannot reach {self.base_url} ({_cause(exc)}): check base_url and that the "
            "server is running and reachable from this machine"
        )


def parse_reply(reply: str, role: str, purpose: str) -> tuple[Any, bool]:
    """(a model reply's JSON, whether it was mended here): where only its syntax is broken
    the value is mended locally; else :class:`ContractError` saying why."""
    try:
        return extract_json(reply), False
    except ContractError:
        mended = _mend(reply)
        if mended is None:
            raise
        log.info("llm_reply_mended", role=role, purpose=purpose)
        return mended, True


def _mend(text: str) -> dict[str, Any] | None:
    """The object a reply with broken JSON syntax meant (comments, trailing commas,
    single quotes, raw newlines in strings), by ``json-repair``; None when nothing
    object-like is there, or when the object is not closed: a torn reply is never
    completed here (its end would be invented), it goes back to the model."""

    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start or not _balanced(text[start : end + 1]):
        return None
    try:
        value = json_repair.loads(text[start : end + 1])
    except Exception:  # the mender's own failure: the reply goes back to the model
        return None
    if isinstance(value, list):  # several objects glued together: the first one
        value = next((v for v in value if isinstance(v, dict)), None)
    return value if isinstance(value, dict) and value else None


def _balanced(text: str) -> bool:
    """Whether every brace and bracket opened outside a string is closed."""
    depth, quote, escaped = 0, "", False
    for char in text:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
    return depth == 0 and not quote


def split_reasoning(text: str) -> tuple[str, str]:
    """(answer, reasoning) of a reply: ``<think>…</think>`` blocks taken out (also a
    block whose opening tag the chat template already sent, and an unclosed one at the
    start: all reasoning, no answer). A reply without them comes back as it is."""
    if "think>" not in text.lower():
        return text, ""
    thoughts = [m.strip() for m in _THINK.findall(text)]
    answer = _THINK.sub("", text)
    lowered = answer.lower()
    if "</think>" in lowered:  # the opening tag was in the prompt's template
        cut = lowered.rindex("</think>")
        thoughts.insert(0, answer[:cut].strip())
        answer = answer[cut + len("</think>") :]
    elif lowered.lstrip().startswith("<think>"):  # never closed: no answer given
        thoughts.append(answer.strip()[len("<think>") :].strip())
        answer = ""
    return answer.strip(), "\n\n".join(t for t in thoughts if t)


# ---------------------------------------------------------------------- response helpers


def _content(response: Any) -> tuple[str, str, str]:
    """(content, reasoning field, finish_reason) of the first choice."""
    if not response.choices:
        return "", "", ""
    choice = response.choices[0]
    message = choice.message
    extra = getattr(message, "model_extra", None) or {}
    reasoning = (
        getattr(message, "reasoning_content", None)
        or extra.get("reasoning_content")
        or extra.get("reasoning")
        or ""
    )
    return message.content or "", str(reasoning), str(choice.finish_reason or "")


def _usage(response: Any, field: str) -> int:
    usage = getattr(response, "usage", None)
    return int(getattr(usage, field, 0) or 0) if usage is not None else 0


def _listed_context(entry: Any) -> int:
    """The context a ``/models`` entry states (vLLM, llama.cpp), 0 when none."""
    extra = getattr(entry, "model_extra", None) or {}
    meta = extra.get("meta") or {}
    for value in (extra.get("max_model_len"), extra.get("context_length"),
                  meta.get("n_ctx"), meta.get("n_ctx_train")):  # fmt: skip
        if isinstance(value, int) and value > 0:
            return value
    return 0


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
