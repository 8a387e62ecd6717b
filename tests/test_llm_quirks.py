"""Real OpenAI-compatible servers' quirks, each against a loopback FAKE of that server's
behaviour (``tests/fake_openai.py`` on 127.0.0.1, real HTTP, the real ``openai``
client): structured output refused, parameters a model refuses, no ``usage``, reasoning
in the reply, replies cut off by the token limit, a context too small, one request at a
time, slow CPU servers, local JSON repair. Each fake is named for the server whose
answers it reproduces; the messages are those servers' own wording."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from fake_openai import Behaviour, FakeOpenAI
from structlog.testing import capture_logs

from llm import ContractError, ModelReplyError, ModelUnavailable, OpenAIBackend, TokenBudgetSpent
from llm.errors import ContextOverflow
from llm.openai_backend import LOCAL_KEY, split_reasoning
from llm.prompts import estimate_tokens

REVIEW = {"verdict": "accept", "advice": ""}
REVIEW_TEXT = json.dumps(REVIEW)
KEY_ENV = "RLGPT_TEST_QUIRKS_KEY"


def backend(fake: FakeOpenAI, **settings: Any) -> OpenAIBackend:
    fast = {"timeout_s": 5.0, "max_retries": 3, "backoff_s": 0.01, "backoff_max_s": 0.2}
    return OpenAIBackend(fake.base_url, "fake-model", KEY_ENV, **{**fast, **settings})


def ask(b: OpenAIBackend, calls: int = 1, role: str = "critic", purpose: str = "review") -> list:
    async def main() -> list:
        out = []
        async with b:
            for i in range(calls):
                with trio.fail_after(30):
                    out.append(await b.call(role, purpose, {"task": "collect wood", "n": i}))
        return out

    return trio.run(main)


# ---------------------------------------------------------------------- the fakes


def llama_cpp_python_fake(n_ctx: int = 8192, **options: Any) -> FakeOpenAI:
    """FAKE of llama-cpp-python 0.3's server: ``response_format`` type ``json_schema`` is
    refused with HTTP 500 (its request model knows only text and json_object, and its
    route handler turns the validation error into a 500), ``{"type": "json_object",
    "schema": …}`` is taken; a prompt past ``n_ctx`` gets its 400
    ``context_length_exceeded``; one request is served at a time."""

    def refuse(body: dict) -> tuple[int, str] | None:
        fmt = body.get("response_format") or {}
        if fmt.get("type") == "json_schema":
            return 500, (
                "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n"
                "  Input should be 'text' or 'json_object' [type=literal_error, "
                "input_value='json_schema', input_type=str]"
            )
        prompt = sum(len(str(m.get("content", ""))) for m in body["messages"]) // 4
        asked = prompt + (body.get("max_tokens") or 0)
        if asked > n_ctx:
            return 400, (
                f"This model's maximum context length is {n_ctx} tokens. However, you "
                f"requested {asked} tokens ({prompt} in the messages, "
                f"{body.get('max_tokens')} in the completion). Please reduce the length of "
                "the messages or completion."
            )
        return None

    return FakeOpenAI(responder=lambda m: REVIEW_TEXT, refuse=refuse, serial=True, **options)


def llama_cpp_server_fake() -> FakeOpenAI:
    """FAKE of llama.cpp's own llama-server (older builds): any response_format but
    ``json_object`` refused with HTTP 500 'response_format type must be one of "text" or
    "json_object"', and a schema beside json_object refused too."""

    def refuse(body: dict) -> tuple[int, str] | None:
        fmt = body.get("response_format") or {}
        if fmt and (fmt.get("type") != "json_object" or "schema" in fmt):
            got = fmt.get("type") if fmt.get("type") != "json_object" else "schema"
            return (
                500,
                f'response_format type must be one of "text" or "json_object", but got: {got}',
            )
        return None

    return FakeOpenAI(responder=lambda m: REVIEW_TEXT, refuse=refuse)


def openai_reasoning_model_fake() -> FakeOpenAI:
    """FAKE of OpenAI's API serving a reasoning model (o-series): HTTP 400 for any
    ``temperature`` but the default and for ``max_tokens`` (it wants
    ``max_completion_tokens``), with the API's wording."""

    def refuse(body: dict) -> tuple[int, str] | None:
        if "temperature" in body and body["temperature"] != 1:
            return 400, (
                f"Unsupported value: 'temperature' does not support {body['temperature']} "
                "with this model. Only the default (1) value is supported."
            )
        if "max_tokens" in body:
            return 400, (
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead."
            )
        return None

    return FakeOpenAI(responder=lambda m: REVIEW_TEXT, refuse=refuse)


def no_usage_server_fake() -> FakeOpenAI:
    """FAKE of a server that sends no ``usage`` (some Ollama, LM Studio and proxy builds)."""
    fake = FakeOpenAI(responder=lambda m: REVIEW_TEXT)
    return fake


def reasoning_server_fake() -> FakeOpenAI:
    """FAKE of a reasoning model behind vLLM / llama.cpp (DeepSeek-R1, Qwen3): the content
    starts with a ``<think>`` block, and a ``reasoning_content`` field comes beside it."""
    return FakeOpenAI(responder=lambda m: REVIEW_TEXT)


# ---------------------------------------------------------------------- structured output


def test_a_refused_json_schema_falls_back_to_a_schema_in_json_object_and_is_remembered() -> None:
    with llama_cpp_python_fake() as fake, capture_logs() as events:
        results = ask(backend(fake, json_mode="schema"), calls=2)
    assert [r.data for r in results] == [REVIEW, REVIEW]
    formats = [r["body"]["response_format"] for r in fake.chat_requests]
    assert [f["type"] for f in formats] == ["json_schema", "json_object", "json_object"]
    assert formats[1]["schema"]["required"] == ["verdict", "advice"]  # the review's schema
    assert "json_schema" in formats[0] and formats[0]["json_schema"]["name"] == "critic_review"
    (refusal,) = [e for e in events if e["event"] == "llm_format_refused"]
    assert refusal["refused"] == "json_schema" and refusal["status"] == 500


def test_a_server_taking_only_plain_json_object_gets_it_after_two_refusals() -> None:
    with llama_cpp_server_fake() as fake:
        results = ask(backend(fake, json_mode="schema"), calls=2)
    assert results[0].data == REVIEW and results[0].attempts == 3
    formats = [r["body"].get("response_format") for r in fake.chat_requests]
    assert formats[2:] == [{"type": "json_object"}, {"type": "json_object"}]


def test_json_mode_off_sends_no_response_format_and_object_sends_json_object() -> None:
    with llama_cpp_python_fake() as fake:
        ask(backend(fake, json_mode="off"))
        ask(backend(fake, json_mode="object"))
    bodies = [r["body"] for r in fake.chat_requests]
    assert "response_format" not in bodies[0]
    assert bodies[1]["response_format"] == {"type": "json_object"}


def test_json_mode_and_the_other_keys_come_from_the_agents_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from method.settings import AgentSettings

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    settings = AgentSettings(
        backend="openai", base_url="http://127.0.0.1:9/v1", model="m", json_mode="off",
        max_tokens=0, temperature=-1, n_ctx=4096, max_concurrent=2, tokens_per_s=0,
    )  # fmt: skip
    b = OpenAIBackend.from_settings(settings)
    assert (b.json_mode, b.max_tokens, b.temperature) == ("off", None, None)
    assert (b.n_ctx, b.max_concurrent, b.tokens_per_s) == (4096, 2, 10.0)  # 0: loopback speed
    remote = OpenAIBackend.from_settings(settings, base_url="http://192.0.2.1/v1")
    assert remote.tokens_per_s == 0.0


# ---------------------------------------------------------------------- refused parameters


def test_a_model_refusing_temperature_and_max_tokens_is_asked_again_without_them() -> None:
    with openai_reasoning_model_fake() as fake, capture_logs() as events:
        results = ask(backend(fake, temperature=0.2, max_tokens=300), calls=2)
    assert [r.data for r in results] == [REVIEW, REVIEW]
    bodies = [r["body"] for r in fake.chat_requests]
    assert len(bodies) == 4  # two refusals, then each call in one request
    assert "temperature" not in bodies[2] and bodies[2]["max_completion_tokens"] == 300
    assert "temperature" not in bodies[3] and "max_tokens" not in bodies[3]  # remembered
    dropped = [e["parameter"] for e in events if e["event"] == "llm_parameter_dropped"]
    assert dropped == ["temperature", "max_tokens"]


def test_a_call_asked_hotter_sends_that_temperature_and_a_refused_one_stays_unsent() -> None:
    # A code request asked again because its answer repeated a tried version goes out
    # hotter than the configured 0.2; a model configured to get none (-1) gets none.
    async def main(b: OpenAIBackend) -> None:
        async with b:
            for hotter in (None, 0.8):
                with trio.fail_after(30):
                    await b.call("critic", "review", {"n": hotter}, temperature=hotter)

    with FakeOpenAI(responder=lambda messages: REVIEW_TEXT) as fake:
        trio.run(main, backend(fake, temperature=0.2))
        trio.run(main, backend(fake, temperature=None))
    sent = [r["body"].get("temperature") for r in fake.chat_requests]
    assert sent == [0.2, 0.8, None, None]


# ---------------------------------------------------------------------- tokens


def test_no_usage_is_estimated_marked_in_calls_jsonl_and_still_spends_the_budget(
    tmp_path: Path,
) -> None:
    from method.agents import Agents

    with no_usage_server_fake() as fake:
        fake.script(*[Behaviour(text=REVIEW_TEXT, send_usage=False)] * 3)
        b = backend(fake)
        agents = Agents(b, tmp_path, token_budget=100)

        async def main() -> None:
            async with b:
                await agents.call("critic", "review", {"n": 1})
                with pytest.raises(TokenBudgetSpent):
                    await agents.call("critic", "review", {"n": 2})

        trio.run(main)
    (record,) = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert record["tokens_estimated"] is True
    assert record["tokens_in"] > 100 and record["tokens_out"] > 0
    assert fake.count == 1 and agents.spent


def test_usage_sent_is_not_marked_estimated(tmp_path: Path) -> None:
    with FakeOpenAI(responder=lambda m: REVIEW_TEXT) as fake:
        fake.script(Behaviour(text=REVIEW_TEXT, usage=(50, 5)))
        (result,) = ask(backend(fake))
    assert (result.tokens_in, result.tokens_out, result.tokens_estimated) == (50, 5, False)


# ---------------------------------------------------------------------- reasoning


def test_think_blocks_and_reasoning_content_are_kept_apart_from_the_answer(
    tmp_path: Path,
) -> None:
    from method.agents import Agents

    with reasoning_server_fake() as fake:
        fake.script(
            Behaviour(
                text='<think>The rate is 0.95, above {"target"}.</think>\n' + REVIEW_TEXT,
                reasoning_content="Step 1: read the numbers.",
            )
        )
        b = backend(fake)
        agents = Agents(b, tmp_path)

        async def main() -> None:
            async with b:
                assert await agents.call("critic", "review", {}) == REVIEW

        trio.run(main)
    (record,) = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert "Step 1: read the numbers." in record["reasoning"]
    assert "The rate is 0.95" in record["reasoning"]
    assert "<think>" not in record["raw_reply"] and record["raw_reply"] == REVIEW_TEXT


@pytest.mark.parametrize(
    ("text", "answer", "reasoning"),
    [
        ("<think>a</think>{}", "{}", "a"),
        ("a</think>\n{}", "{}", "a"),  # the opening tag was in the chat template
        ("<think>still thinking", "", "still thinking"),
        ("{}", "{}", ""),
    ],
)
def test_split_reasoning(text: str, answer: str, reasoning: str) -> None:
    assert split_reasoning(text) == (answer, reasoning)


# ---------------------------------------------------------------------- cut-off replies


def test_a_cut_off_reply_is_asked_once_more_with_twice_the_room_not_mended() -> None:
    torn = '{"verdict": "accept", "advice": "the rate'
    with llama_cpp_python_fake() as fake, capture_logs() as events:
        fake.script(Behaviour(text=torn, finish_reason="length"), REVIEW_TEXT)
        (result,) = ask(backend(fake, max_tokens=100, n_ctx=8192))
    assert result.data == REVIEW and result.local_repairs == 0 and result.repairs == 0
    assert [r["body"]["max_tokens"] for r in fake.chat_requests] == [100, 200]
    (cut,) = [e for e in events if e["event"] == "llm_reply_cut_off"]
    assert cut["retry"] == "larger"


def test_a_cut_off_reply_with_no_room_left_asks_for_less_then_fails_with_the_cause() -> None:
    torn = '{"verdict": "revise", "advice": "'
    with llama_cpp_python_fake() as fake:
        fake.script(*[Behaviour(text=torn, finish_reason="length")] * 4)
        probe = backend(fake)
        prompt = estimate_tokens(probe.render("critic", "review", {"task": "collect wood", "n": 0}))
        b = backend(fake, max_tokens=100, n_ctx=prompt + 100)  # no room for more
        with pytest.raises(ModelReplyError, match=r"cut off at max_tokens=\d+ twice"):
            ask(b)
    assert fake.count == 2  # no blind retries
    last = fake.chat_requests[1]["body"]["messages"][-1]
    assert last["role"] == "user" and "shorter" in last["content"]


# ---------------------------------------------------------------------- context


def test_a_prompt_past_n_ctx_is_refused_before_sending_naming_prompt_size_limit_and_fix() -> None:
    with llama_cpp_python_fake() as fake:
        with pytest.raises(ContextOverflow) as caught:
            ask(backend(fake, n_ctx=600, max_tokens=200))
    text = str(caught.value)
    assert "critic/review" in text and "llm/prompts/critic_review.txt" in text
    assert "600" in text and "raise n_ctx" in text and "max_tokens" in text
    assert fake.count == 0


def test_the_servers_context_overflow_is_reported_as_such_not_as_a_model_name() -> None:
    with llama_cpp_python_fake(n_ctx=300) as fake:  # the server's context; ours unknown
        with pytest.raises(ContextOverflow) as caught:
            ask(backend(fake, max_tokens=200))
    text = str(caught.value)
    assert "does not fit the model's context" in text and "maximum context length" in text
    assert "--n_ctx" in text and "check the model name" not in text
    assert fake.count == 1


def test_the_first_call_takes_the_context_from_the_model_listing() -> None:
    with FakeOpenAI(responder=lambda m: REVIEW_TEXT, model_extra={"max_model_len": 500}) as fake:
        with pytest.raises(ContextOverflow, match="context of 500 tokens"):
            ask(backend(fake, max_tokens=200))
    assert fake.count == 0 and [r["path"] for r in fake.requests] == ["/v1/models"]


def test_check_takes_the_context_from_the_model_listing() -> None:
    with FakeOpenAI(model_extra={"max_model_len": 4096}) as fake:  # vLLM's field
        b = backend(fake)

        async def main() -> None:
            async with b:
                await b.check()

        trio.run(main)
    assert b.n_ctx == 4096


# ---------------------------------------------------------------------- loopback servers


def test_a_loopback_server_needs_no_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with llama_cpp_python_fake() as fake:
        (result,) = ask(backend(fake))
    assert result.data == REVIEW
    headers = {k.lower(): v for k, v in fake.chat_requests[0]["headers"].items()}
    assert headers["authorization"] == f"Bearer {LOCAL_KEY}"


@pytest.mark.parametrize(("limit", "expected"), [(0, 1), (3, 3)])
def test_at_most_max_concurrent_requests_reach_a_loopback_server(limit: int, expected: int) -> None:
    with FakeOpenAI(responder=lambda m: REVIEW_TEXT) as fake:
        fake.script(*[Behaviour(text=REVIEW_TEXT, delay=0.3)] * 3)
        b = backend(fake, max_concurrent=limit)  # 0: the loopback default, one at a time

        async def main() -> None:
            async with b, trio.open_nursery() as nursery:
                for i in range(3):
                    nursery.start_soon(b.call, "critic", "review", {"n": i})

        trio.run(main)
    assert fake.max_in_flight == expected


def test_a_timeout_is_retried_once_not_max_retries_times() -> None:
    with FakeOpenAI(responder=lambda m: REVIEW_TEXT) as fake:
        fake.script(*[Behaviour(text=REVIEW_TEXT, delay=2.0)] * 5)
        with pytest.raises(ModelUnavailable, match="no answer within 0 s twice") as caught:
            ask(backend(fake, timeout_s=0.2, max_retries=4))
    assert fake.count == 2
    assert "raise [agents] timeout_s" in str(caught.value)


def test_the_timeout_grows_with_the_prompt_at_the_servers_token_rate() -> None:
    with FakeOpenAI(responder=lambda m: REVIEW_TEXT) as fake:
        fake.script(Behaviour(text=REVIEW_TEXT, delay=0.8))
        started = time.monotonic()
        # ~700 prompt tokens + 100 for the reply at 400 tokens/s: 0.2 + ~2 s allowed.
        (result,) = ask(backend(fake, timeout_s=0.2, tokens_per_s=400, max_tokens=100))
    assert result.attempts == 1 and time.monotonic() - started < 3


# ---------------------------------------------------------------------- local JSON repair


def test_broken_json_syntax_is_mended_locally_without_another_request() -> None:
    sloppy = "Here it is:\n{\n  // my verdict\n  'verdict': 'accept',\n  \"advice\": \"fine\",\n}\n"
    with FakeOpenAI(responder=lambda m: sloppy) as fake:
        (result,) = ask(backend(fake))
    assert result.data == {"verdict": "accept", "advice": "fine"}
    assert (result.local_repairs, result.repairs, fake.count) == (1, 0, 1)


def test_code_with_raw_newlines_in_its_json_string_is_mended() -> None:
    raw = '{"code": "def run(skills):\n    yield \\"do\\"\n", "note": "hit"}'
    with FakeOpenAI(responder=lambda m: raw) as fake:
        (result,) = ask(backend(fake), role="fast", purpose="code")
    assert result.data["code"].rstrip() == 'def run(skills):\n    yield "do"'
    assert result.local_repairs == 1 and fake.count == 1


def test_a_mended_reply_still_meets_its_contract_or_goes_back() -> None:
    with FakeOpenAI(responder=lambda m: REVIEW_TEXT) as fake:
        fake.script("{'verdict': 'maybe', 'advice': '',}")
        (result,) = ask(backend(fake))
    assert result.repairs == 1 and fake.count == 2
    assert (
        'verdict: expected one of "accept"'
        in fake.chat_requests[1]["body"]["messages"][-1]["content"]
    )
    assert ContractError  # the validator's message is what went back
