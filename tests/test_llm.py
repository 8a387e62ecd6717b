"""The model layer: contracts, prompts, and the OpenAI backend over real HTTP.

Backend tests use the real ``openai`` client against ``tests/fake_openai.py`` (a FAKE
OpenAI-compatible server on 127.0.0.1, random port), under ``trio.run``. Backoff is set to
~10 ms so retry tests cost little.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from fake_openai import Behaviour, FakeOpenAI
from structlog.testing import capture_logs

from llm import (
    PURPOSES,
    BackendConfigError,
    CallResult,
    ContractError,
    ModelReplyError,
    ModelUnavailable,
    OpenAIBackend,
    PromptSet,
    TokenBudgetSpent,
    extract_json,
    validate,
)

KEY_ENV = "RLGPT_TEST_FAKE_OPENAI_KEY"
KEY = "sk-fake-test-key"

REVIEW = {"verdict": "accept", "advice": ""}
REVIEW_TEXT = json.dumps(REVIEW)
PLAN = {
    "subactions": [
        {
            "name": "collect_wood",
            "description": "collect two wood",
            "mode": "code",
            "depends": [],
            "goal": {"wood": 2},
            "achievement": "",
            "max_steps": 200,
            "reason": "codeable",
            "extra_key": "dropped",
        },
        {
            "name": "place_table",
            "description": "place a table",
            "mode": "rl",
            "depends": ["collect_wood"],
            "achievement": "place_table",
            "max_steps": 100,
            "target": 1,
            "options": ["walk_to_tree"],
            "reason": "try RL",
        },
    ],
    "needs": ["food"],
    "reason": "wood then table",
}
GOOD_CODE = 'def run(skills):\n    yield from skills.collect("tree", 1)\n'


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture
def fake():
    with FakeOpenAI(responder=lambda messages: REVIEW_TEXT, api_key=KEY) as server:
        yield server


def make_backend(base_url: str, **settings: Any) -> OpenAIBackend:
    fast = {"timeout_s": 5.0, "max_retries": 3, "backoff_s": 0.01, "backoff_max_s": 0.5}
    return OpenAIBackend(base_url, "fake-model", KEY_ENV, **{**fast, **settings})


def call(backend: OpenAIBackend, role: str = "critic", purpose: str = "review") -> CallResult:
    async def main() -> CallResult:
        async with backend:
            with trio.fail_after(20):
                return await backend.call(role, purpose, {"task": "collect wood"})

    return trio.run(main)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------- contracts


def example_replies() -> list[tuple[str, str, str]]:
    """Each call's worked example reply, as its prompt renders it (Crafter's)."""
    out = []
    prompts = PromptSet()
    for role, purpose in sorted(PURPOSES):
        text = prompts.render(role, purpose, {})[0]["content"]
        out.append((role, purpose, text.split("Example reply:", 1)[1]))
    return out


@pytest.mark.parametrize(("role", "purpose", "text"), example_replies())
def test_every_prompts_worked_example_reply_meets_its_contract(
    role: str, purpose: str, text: str
) -> None:
    value, _ = json.JSONDecoder().raw_decode(text.strip())
    validate(role, purpose, value)


def test_a_valid_plan_comes_back_with_defaults_filled_and_extra_keys_dropped() -> None:
    data = validate("slow", "plan", PLAN)
    first, second = data["subactions"]
    assert "extra_key" not in first
    assert first["target"] == 0.9 and first["options"] == []
    assert second["goal"] == {} and second["target"] == 1.0
    assert isinstance(second["target"], float)
    assert data["needs"] == ["food"]


def _plan_with(path: tuple, value: Any) -> dict:
    plan = copy.deepcopy(PLAN)
    node = plan
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return plan


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("subactions",), [], "subactions: expected at least one"),
        (("subactions", 0, "name"), "Collect Wood", "subactions[0].name: expected a snake_case"),
        (("subactions", 1, "name"), "collect_wood", "used twice"),
        (("subactions", 1, "depends"), ["make_pickaxe"], "subactions[1].depends[0]"),
        (("subactions", 0, "depends"), ["place_table"], "not the name of an earlier"),
        (("subactions", 0, "mode"), "learn", 'subactions[0].mode: expected one of "code", "rl"'),
        (("subactions", 0, "goal"), {"wood": 0}, "subactions[0].goal.wood: expected an integer"),
        (("subactions", 0, "goal"), {}, 'needs a non-empty "goal"'),
        (("subactions", 0, "max_steps"), 0, "max_steps: expected an integer from 1 to 10000"),
        (("subactions", 0, "max_steps"), "200", '"200" (a string)'),
        (("subactions", 0, "max_steps"), KeyError, "found no such key"),
        (("subactions", 0, "target"), 1.5, "target: expected a number from 0 to 1"),
        (("subactions", 0, "description"), KeyError, "subactions[0].description"),
        (("needs",), ["fun"], 'needs[0]: expected one of ["drink"'),
    ],
)
def test_a_broken_plan_is_refused_naming_the_key_the_expectation_and_the_value(
    path: tuple, value: Any, message: str
) -> None:
    with pytest.raises(ContractError) as caught:
        validate("slow", "plan", _plan_with(path, value))
    assert message in str(caught.value)


def test_revise_review_and_rl_replies_are_checked() -> None:
    change = {"subaction": "collect_wood", "change": "to_rl", "reason": "r"}
    ok = validate("slow", "revise", {"changes": [change], "stop": False, "reason": ""})
    assert ok["changes"][0]["options"] == []
    with pytest.raises(ContractError, match="stop: expected true or false"):
        validate("slow", "revise", {"changes": [], "stop": "no"})
    with pytest.raises(ContractError, match=r"changes\[0\].change"):
        validate("slow", "revise", {"changes": [{**change, "change": "delete"}], "stop": True})
    with pytest.raises(ContractError, match='verdict: expected one of "accept"'):
        validate("critic", "review", {"verdict": "maybe", "advice": ""})
    rl = {"options": ["walk_to_tree"], "primitives": [], "max_steps": 50}
    assert validate("fast", "rl", rl)["observation"] == ["view", "inventory", "status"]
    with pytest.raises(ContractError, match=r"observation\[1\]: expected one of"):
        validate("fast", "rl", {**rl, "observation": ["view", "world_map"]})
    assert validate("fast", "rl", {**rl, "observation": ["view", "map"]})["observation"] == [
        "view",
        "map",
    ]  # the remembered map around the player: a part a policy may see
    with pytest.raises(ContractError, match=r"top-level function reward\(before, after\)"):
        validate("fast", "rl", {**rl, "reward_code": "def bonus(a, b):\n    return 0\n"})
    with pytest.raises(ContractError, match="the reply must be a JSON object"):
        validate("critic", "review", ["accept"])


def test_each_schema_in_words_names_every_value_its_validator_allows() -> None:
    from llm import contracts

    for (role, purpose), allowed in [
        (("slow", "plan"), contracts.MODES),
        (("critic", "review"), contracts.VERDICTS),
        (("fast", "rl"), contracts.OBSERVATIONS),
    ]:
        for value in allowed:
            assert value in contracts.SCHEMAS[role, purpose], (role, purpose, value)


def test_code_is_syntax_checked_and_must_define_run() -> None:
    assert validate("fast", "code", {"code": GOOD_CODE})["note"] == ""
    with pytest.raises(ContractError, match="code: Python syntax error at line 2"):
        validate("fast", "code", {"code": "def run(skills):\n    yield from (\n"})
    with pytest.raises(ContractError, match=r"top-level function run\(skills\)"):
        validate("fast", "code", {"code": "def main(skills):\n    yield 'noop'\n"})
    with pytest.raises(ContractError, match="syntax error"):
        validate("fast", "code", {"code": "return 1\ndef run(skills):\n    yield 'do'\n"})


@pytest.mark.parametrize(
    "text",
    [
        REVIEW_TEXT,
        f"```json\n{REVIEW_TEXT}\n```",
        f"Here is my review:\n```\n{REVIEW_TEXT}\n```\nHope it helps.",
        f"{REVIEW_TEXT}\n\nI accepted because the target {{0.9}} was met.",
        f"Sure {{thinking}}: {REVIEW_TEXT} -- done",
    ],
)
def test_the_json_object_is_extracted_from_fences_and_surrounding_text(text: str) -> None:
    assert extract_json(text) == REVIEW


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("   ", "the reply was empty"),
        ("I accept.", "no '{' found"),
        ('{"verdict": "accept" "advice": ""}', "not valid JSON: Expecting ',' delimiter"),
    ],
)
def test_a_reply_without_json_says_why(text: str, message: str) -> None:
    with pytest.raises(ContractError, match=re.escape(message)):
        extract_json(text)


def test_the_skill_api_prompt_describes_every_public_skill_with_its_signature() -> None:
    from skills.skills import Skills

    described = PromptSet().skills_api  # skills_api.txt with its generated reference
    calls = []
    for name, method in inspect.getmembers(Skills, inspect.isfunction):
        if name.startswith("_"):
            continue
        params = list(inspect.signature(method).parameters.values())[1:]  # drop self
        shown = [p.name if p.default is p.empty else f"{p.name}={p.default!r}" for p in params]
        calls.append(f"skills.{name}({', '.join(shown)})")
    assert calls, "Skills has no public methods?"
    missing = [c for c in calls if c not in described]
    assert not missing, f"the skill API prompt lacks: {missing}"


def test_prompts_render_the_role_contract_and_request() -> None:
    prompts = PromptSet()
    system, user = prompts.render("fast", "code", {"subaction": {"name": "dig_$tone"}})
    assert system["role"] == "system" and user["role"] == "user"
    assert "fast agent" in system["content"] and '"code": str' in system["content"]
    assert "skills.collect(kind" in system["content"]
    assert '"name": "dig_$tone"' in user["content"]
    assert "$" not in system["content"].replace("$tone", "")


def test_a_missing_prompt_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(BackendConfigError, match="prompt file .* is missing"):
        make_backend("http://127.0.0.1:1/v1", prompts_dir=tmp_path)


# ---------------------------------------------------------------------- backend over HTTP


def test_a_good_reply_parses_and_the_call_is_logged_with_its_cost(fake: FakeOpenAI) -> None:
    fake.script(Behaviour(text=REVIEW_TEXT, usage=(120, 7)))
    backend = make_backend(fake.base_url)
    with capture_logs() as events:
        result = call(backend)
    assert result.data == REVIEW and result.reply == REVIEW_TEXT
    assert (result.attempts, result.repairs) == (1, 0)
    assert (result.tokens_in, result.tokens_out) == (120, 7)
    assert backend.tokens_used == 127
    assert "### system" in result.prompt and "critic" in result.prompt
    sent = fake.chat_requests[0]["body"]
    assert sent["model"] == "fake-model" and sent["temperature"] == 0.2
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert '"task": "collect wood"' in sent["messages"][1]["content"]
    (event,) = [e for e in events if e["event"] == "llm_call"]
    assert event["role"] == "critic" and event["purpose"] == "review"
    assert event["tokens_in"] == 120 and event["tokens_out"] == 7 and event["attempts"] == 1
    assert event["latency_s"] >= 0


def test_a_fenced_reply_with_trailing_text_is_extracted(fake: FakeOpenAI) -> None:
    fake.script(f"Review:\n```json\n{REVIEW_TEXT}\n```\nThat is all.")
    assert call(make_backend(fake.base_url)).data == REVIEW


def test_malformed_json_is_repaired_on_the_second_try(fake: FakeOpenAI) -> None:
    fake.script('{"verdict": "accept", "advice": ', REVIEW_TEXT)
    result = call(make_backend(fake.base_url))
    assert result.data == REVIEW
    assert fake.count == 2 and (result.attempts, result.repairs) == (2, 1)
    repair = fake.chat_requests[1]["body"]["messages"]
    assert [m["role"] for m in repair] == ["system", "user", "assistant", "user"]
    assert repair[2]["content"] == '{"verdict": "accept", "advice": '
    assert "not valid JSON" in repair[3]["content"]
    assert "### assistant" in result.prompt


def test_a_reply_breaking_the_contract_gets_the_validators_message(fake: FakeOpenAI) -> None:
    fake.script('{"verdict": "maybe", "advice": "x"}', REVIEW_TEXT)
    call(make_backend(fake.base_url))
    feedback = fake.chat_requests[1]["body"]["messages"][-1]["content"]
    assert 'verdict: expected one of "accept", "revise", "switch", found "maybe"' in feedback


def test_a_reply_still_malformed_after_two_repairs_raises_model_reply_error(
    fake: FakeOpenAI,
) -> None:
    fake.script("no json", "still none", "{broken")
    with pytest.raises(ModelReplyError, match="after 2 repairs") as caught:
        call(make_backend(fake.base_url))
    assert fake.count == 3 and caught.value.reply == "{broken" and caught.value.attempts == 3


def test_code_with_a_syntax_error_is_sent_back_and_repaired(fake: FakeOpenAI) -> None:
    bad = json.dumps({"code": "def run(skills)\n    yield 'do'\n", "note": ""})
    good = json.dumps({"code": GOOD_CODE, "note": "fixed"})
    fake.script(bad, good)
    result = call(make_backend(fake.base_url), "fast", "code")
    assert result.data == {"code": GOOD_CODE, "note": "fixed"} and result.repairs == 1
    assert "syntax error at line 1" in fake.chat_requests[1]["body"]["messages"][-1]["content"]


def test_a_429_is_retried_after_the_servers_retry_after(fake: FakeOpenAI) -> None:
    fake.script(Behaviour(status=429, retry_after=0.3), REVIEW_TEXT)
    started = time.monotonic()
    with capture_logs() as events:
        result = call(make_backend(fake.base_url, backoff_s=0.001))
    assert result.data == REVIEW and result.attempts == 2 and fake.count == 2
    assert time.monotonic() - started >= 0.3
    (retry,) = [e for e in events if e["event"] == "llm_retry"]
    assert retry["problem"] == "HTTP 429" and retry["wait_s"] == 0.3


def test_two_500s_then_success_counts_three_attempts(fake: FakeOpenAI) -> None:
    fake.script(Behaviour(status=500), Behaviour(status=503), REVIEW_TEXT)
    result = call(make_backend(fake.base_url))
    assert result.data == REVIEW and result.attempts == 3 and result.repairs == 0


def test_persistent_500s_raise_model_unavailable_after_max_retries(fake: FakeOpenAI) -> None:
    fake.script(*[Behaviour(status=500)] * 10)
    with pytest.raises(ModelUnavailable, match="failed 3 times .* HTTP 500"):
        call(make_backend(fake.base_url, max_retries=2))
    assert fake.count == 3


def test_a_timeout_is_retried_then_succeeds(fake: FakeOpenAI) -> None:
    fake.script(Behaviour(delay=3.0, text=REVIEW_TEXT), REVIEW_TEXT)
    started = time.monotonic()
    result = call(make_backend(fake.base_url, timeout_s=0.3))
    assert result.data == REVIEW and result.attempts == 2 and fake.count == 2
    assert time.monotonic() - started < 2.5


def test_a_401_raises_model_unavailable_at_once_naming_the_key_variable(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-wrong")
    with pytest.raises(ModelUnavailable, match=f"HTTP 401.*check that \\${KEY_ENV}"):
        call(make_backend(fake.base_url))
    assert fake.count == 1


def test_a_404_raises_model_unavailable_at_once_naming_model_and_base_url(
    fake: FakeOpenAI,
) -> None:
    fake.script(Behaviour(status=404))
    with pytest.raises(ModelUnavailable, match="check the model name \\('fake-model'\\)"):
        call(make_backend(fake.base_url))
    assert fake.count == 1


def test_a_refused_connection_is_retried_then_model_unavailable() -> None:
    backend = make_backend(f"http://127.0.0.1:{closed_port()}/v1", max_retries=1)
    with pytest.raises(ModelUnavailable, match="failed 2 times .*connection failed"):
        call(backend)


def test_a_missing_key_variable_is_a_config_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(KEY_ENV)
    # A remote endpoint (TEST-NET-1, never contacted here); loopback needs no key.
    with pytest.raises(BackendConfigError, match=f"{KEY_ENV} is not set.*export {KEY_ENV}="):
        make_backend("http://192.0.2.1/v1")


def test_a_spent_token_budget_stops_the_next_call_before_any_request(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    from method.agents import Agents

    fake.script(Behaviour(text=REVIEW_TEXT, usage=(8, 4)), Behaviour(text=REVIEW_TEXT))
    backend = make_backend(fake.base_url)
    agents = Agents(backend, tmp_path, token_budget=10)

    async def main() -> None:
        async with backend:
            await agents.call("critic", "review", {})  # 12 tokens: over budget now
            with pytest.raises(TokenBudgetSpent, match="12 of 10 tokens"):
                await agents.call("critic", "review", {"again": 1})

    trio.run(main)
    assert backend.tokens_used == 12 and fake.count == 1 and agents.spent


def test_check_passes_against_a_live_endpoint(fake: FakeOpenAI) -> None:
    async def main() -> None:
        async with make_backend(fake.base_url) as backend:
            await backend.check()

    trio.run(main)
    assert fake.requests[-1]["path"].endswith("/models")


def test_check_falls_back_to_a_tiny_completion_where_models_is_not_served() -> None:
    with FakeOpenAI(responder=lambda messages: "{}", models=False) as fake:

        async def main() -> None:
            async with make_backend(fake.base_url) as backend:
                await backend.check()

        trio.run(main)
        assert [r["path"].rsplit("/", 1)[-1] for r in fake.requests] == ["models", "completions"]


def test_json_mode_asks_for_a_json_object(fake: FakeOpenAI) -> None:
    call(make_backend(fake.base_url, json_mode=True))
    assert fake.chat_requests[0]["body"]["response_format"] == {"type": "json_object"}
    call(make_backend(fake.base_url))
    assert "response_format" not in fake.chat_requests[1]["body"]


@pytest.mark.parametrize("wrong", ["port", "key"])
def test_check_raises_model_unavailable_with_a_fix(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, wrong: str
) -> None:
    url = fake.base_url
    if wrong == "port":
        url = f"http://127.0.0.1:{closed_port()}/v1"
        fix = "cannot reach .* check base_url"
    else:
        monkeypatch.setenv(KEY_ENV, "sk-wrong")
        fix = f"HTTP 401.*{KEY_ENV}"

    async def main() -> None:
        async with make_backend(url) as backend:
            await backend.check()

    with pytest.raises(ModelUnavailable, match=fix):
        trio.run(main)


def test_trio_cancellation_abandons_a_request_in_flight(fake: FakeOpenAI) -> None:
    fake.script(Behaviour(delay=3.0, text=REVIEW_TEXT))

    async def main() -> bool:
        async with make_backend(fake.base_url) as backend:
            with trio.move_on_after(0.2) as scope:
                await backend.call("critic", "review", {})
            return scope.cancelled_caught

    started = time.monotonic()
    assert trio.run(main)
    assert time.monotonic() - started < 2
