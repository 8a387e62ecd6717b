"""The ``local`` backend with real models: llama-cpp-python's server as a supervised child
(started, answering, restarted after ``kill -9``, gone with its head), the ``openai``
backend's repair and give-up paths on SmolLM2-135M's real broken replies, and (``slow``)
a short real run of ``run.py`` with Qwen2.5-Coder-0.5B.

They need the ``local`` extra and the fetched models (``python run.py models fetch
smollm2-135m qwen2.5-coder-0.5b``); without them they skip, saying so, except in CI
(``CI=true``), where a missing model or server fails the test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
import trio
from helpers import missing_here, read_events, wait_until, wait_until_blocking

from llm import models
from llm.errors import ModelReplyError
from llm.local_server import INSTALL_HINT, Endpoint, LocalServer, LocalServerError, missing_modules

ROOT = Path(__file__).resolve().parent.parent
SMALL = "smollm2-135m"
CODER = "qwen2.5-coder-0.5b"
N_CTX = 4096
"""Context of the SmolLM2 servers here: the review prompt and two repair rounds fit."""
REPLY_TOKENS = 256
"""Tokens a SmolLM2 reply may take here: enough to break the contract, short enough that
three requests stay short (SmolLM2 otherwise rambles for minutes)."""


def require(model: str) -> Path:
    """The fetched model's file, with the server installed; else skip (fail in CI)."""
    problem = ""
    if missing := missing_modules():
        problem = (
            f"the local server is not installed (missing {', '.join(missing)}): {INSTALL_HINT}"
        )
    else:
        try:
            return models.resolve(model)
        except models.ModelError as exc:
            problem = str(exc)
    missing_here(f"the local model server and {model}: {problem}")


def served(endpoint: Endpoint) -> list[str]:
    with urllib.request.urlopen(f"{endpoint.base_url}/models", timeout=10) as response:
        return [m["id"] for m in json.loads(response.read())["data"]]


def gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (a zombie left to a parent that does not reap
    counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def test_the_local_backend_is_the_openai_backend_pointed_at_the_started_server() -> None:
    from llm.errors import BackendConfigError
    from method.agents import make_backend
    from method.settings import AgentSettings

    settings = AgentSettings(backend="local", model=SMALL, api_key_env="UNSET_VARIABLE_X")
    with pytest.raises(BackendConfigError, match="endpoint"):
        make_backend(settings)
    backend = make_backend(settings, Endpoint("http://127.0.0.1:9/v1", SMALL))
    assert (backend.name, backend.base_url, backend.model) == (
        "local", "http://127.0.0.1:9/v1", SMALL,
    )  # fmt: skip
    assert backend.timeout_s == settings.timeout_s  # the openai keys apply


def test_the_server_answers_is_restarted_after_kill_9_and_stops_with_the_run(
    tmp_path: Path,
) -> None:
    path = require(SMALL)
    log_path = tmp_path / "model-server.log"
    server = LocalServer(path, SMALL, log_path, n_ctx=N_CTX, n_threads=1, max_restarts=1)

    async def main() -> tuple[int, int]:
        async with trio.open_nursery() as nursery:
            endpoint = await nursery.start(server.run)
            assert endpoint.base_url.startswith("http://127.0.0.1:")
            assert await trio.to_thread.run_sync(served, endpoint) == [SMALL]
            first = server.process.pid
            os.kill(first, signal.SIGKILL)
            await wait_until(
                lambda: server.restarts == 1 and server.process.pid != first,
                timeout=30, what="a restarted server",
            )  # fmt: skip
            second = server.process.pid
            # Same port: the backend's base_url stays right.
            await wait_until(
                lambda: served_or_none(endpoint) == [SMALL], timeout=60, what="answers again"
            )
            nursery.cancel_scope.cancel()
        return first, second

    first, second = trio.run(main)
    assert gone(first) and gone(second)
    assert server.process.returncode == -signal.SIGTERM  # asked to stop, it stopped
    assert log_path.read_text().count(" start ") == 2


def served_or_none(endpoint: Endpoint) -> list[str] | None:
    try:
        return served(endpoint)
    except OSError:
        return None


# ggml's names for instruction sets → the flags Linux lists for them in /proc/cpuinfo.
# Its other features (LLAMAFILE, OPENMP, REPACK) are code paths, not instructions.
CPUINFO_FLAGS = {
    "SSE3": "pni", "SSSE3": "ssse3", "SSE42": "sse4_2", "AVX": "avx", "AVX2": "avx2",
    "AVX_VNNI": "avx_vnni", "F16C": "f16c", "FMA": "fma", "BMI2": "bmi2",
    "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi", "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8", "AMX_BF16": "amx_bf16",
}  # fmt: skip


def chat(endpoint: Endpoint, content: str, max_tokens: int) -> dict:
    """One chat completion, straight over HTTP (no client library in between)."""
    body = json.dumps(
        {"model": endpoint.alias, "messages": [{"role": "user", "content": content}],
         "max_tokens": max_tokens, "temperature": 0}
    ).encode()  # fmt: skip
    request = urllib.request.Request(
        f"{endpoint.base_url}/chat/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def test_the_servers_build_answers_one_request_and_reports_its_cpu_features(
    tmp_path: Path,
) -> None:
    """A llama.cpp build that chose instructions this CPU cannot execute (ggml's AMX
    path, ``-march=native`` on another machine, a wheel from pip's cache) starts and
    lists its model, then dies with SIGILL at its first request: one real completion is
    the check. ``model_server_ready`` names the CPU features the build uses; each
    instruction set among them is one this CPU has."""
    path = require(SMALL)
    from runtime import events

    events.configure(events_file=tmp_path / "events.jsonl", run="t", console_level="warning")
    server = LocalServer(path, SMALL, tmp_path / "s.log", n_ctx=N_CTX, n_threads=1, max_restarts=0)

    async def main() -> dict:
        async with trio.open_nursery() as nursery:
            endpoint = await nursery.start(server.run)
            with trio.fail_after(300):
                answer = await trio.to_thread.run_sync(chat, endpoint, "Say hello.", 8)
            nursery.cancel_scope.cancel()
        return answer

    try:
        answer = trio.run(main)
    finally:
        events.close()
    assert answer["choices"][0]["message"]["content"].strip()
    assert answer["usage"]["completion_tokens"] >= 1
    (ready,) = [e for e in read_events(tmp_path) if e["event"] == "model_server_ready"]
    assert ready["cpu_features"], ready["system_info"]
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        flags = set(re.search(r"^flags\s*:(.*)$", cpuinfo.read_text(), re.M).group(1).split())
        used = [f for f in ready["cpu_features"] if f in CPUINFO_FLAGS]
        assert used, ready["system_info"]
        lacking = [f for f in used if CPUINFO_FLAGS[f] not in flags]
        assert not lacking, f"built for {lacking}, which this CPU lacks: {ready['system_info']}"


CACHE_BYTES = 256 * 2**20
"""The prompt cache of the test's server: a few SmolLM2 states of ~1k tokens."""


def messages(system: str, user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def ask(endpoint: Endpoint, chat_messages: list[dict[str, str]]) -> dict:
    body = json.dumps(
        {"model": endpoint.alias, "messages": chat_messages, "max_tokens": 4, "temperature": 0}
    ).encode()
    request = urllib.request.Request(
        f"{endpoint.base_url}/chat/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def computed_prompts(log_text: str, prompts: list[int]) -> list[int]:
    """Prompt tokens each request computed, from the server's log: its prompt less the
    prefix it reused ("N prefix-match hit, remaining M prompt tokens to eval")."""
    reused = [int(n) for n in re.findall(r"(\d+) prefix-match hit, remaining", log_text)]
    # The first request reuses nothing and logs no such line.
    assert len(reused) == len(prompts) - 1, log_text[-3000:]
    return [prompts[0]] + [p - r for p, r in zip(prompts[1:], reused, strict=True)]


def test_a_roles_second_call_after_another_roles_computes_only_its_request(
    tmp_path: Path,
) -> None:
    """Two roles' calls interleave (code, review, code): the server's one context holds
    the review's prompt when the second code call comes, so without the prompt cache
    that call computes its whole system message again. With it (``cache_bytes``, as
    ``[agents] prompt_cache_mib`` starts it), the code prompt's state comes back from the
    cache and only the new request is computed."""
    path = require(SMALL)
    log_path = tmp_path / "s.log"
    server = LocalServer(path, SMALL, log_path, n_ctx=N_CTX, n_threads=1, max_restarts=0,
                         cache_bytes=CACHE_BYTES)  # fmt: skip
    argv = server.argv()
    assert argv[argv.index("--cache") + 1] == "true"
    assert argv[argv.index("--cache_size") + 1] == str(CACHE_BYTES)
    assert argv[argv.index("--logits_all") + 1] == "false"
    reference = "\n".join(f"- skills.helper_{i}(x, y): does thing number {i} to x and y."
                          for i in range(60))  # fmt: skip
    code = f"You write code. The skill API:\n{reference}\nReply with JSON."
    review = "You review code. " + " ".join(f"Rule {i}: be fair." for i in range(120))
    calls = [
        messages(code, "Write the code for collect_wood."),
        messages(review, "Review this version: 3 of 10 worlds."),
        messages(code, "Write the code for place_table."),
    ]

    async def main() -> list[dict]:
        async with trio.open_nursery() as nursery:
            endpoint = await nursery.start(server.run)
            answers = []
            for chat_messages in calls:
                with trio.fail_after(300):
                    answers.append(await trio.to_thread.run_sync(ask, endpoint, chat_messages))
            nursery.cancel_scope.cancel()
        return answers

    answers = trio.run(main)
    prompts = [a["usage"]["prompt_tokens"] for a in answers]
    assert prompts[0] > 500 and prompts[1] > 500, prompts  # a long static prefix each
    text = log_path.read_text(errors="replace")
    computed = computed_prompts(text, prompts)
    # The second code call computes its request (and the template's markers), not the
    # system message the review's call overwrote.
    assert computed[2] < 40, (prompts, computed)
    assert computed[2] < prompts[2] / 10, (prompts, computed)
    assert "Llama._create_completion: cache hit" in text


def test_the_system_info_of_the_servers_latest_start_is_read_from_its_log(
    tmp_path: Path,
) -> None:
    from llm.local_server import cpu_features, system_info
    from llm.server_child import SYSTEM_INFO_MARK

    log_path = tmp_path / "s.log"
    first = f"{SYSTEM_INFO_MARK}CPU : SSE3 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |\n"
    log_path.write_text(f"--- start 0\n{first}llama_model_load: ...\n")
    offset = log_path.stat().st_size
    with open(log_path, "a") as f:
        f.write(f"--- start 1\n{SYSTEM_INFO_MARK}CPU : AVX = 1 | AVX2 = 1 | AVX512 = 0 |\n")
    info = system_info(log_path, offset)
    assert info == "CPU : AVX = 1 | AVX2 = 1 | AVX512 = 0 |"
    assert cpu_features(info) == ["AVX", "AVX2"]
    assert cpu_features(system_info(log_path)) == ["AVX", "AVX2"]  # the last start's
    assert system_info(tmp_path / "none.log") == "" and cpu_features("") == []


def test_a_server_dying_more_often_than_allowed_fails_with_its_log(tmp_path: Path) -> None:
    path = require(SMALL)
    server = LocalServer(path, SMALL, tmp_path / "s.log", n_ctx=N_CTX, n_threads=1, max_restarts=0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            os.kill(server.process.pid, signal.SIGKILL)

    with pytest.raises(LocalServerError, match=r"died 1 times \(last: signal SIGKILL\)"):
        try:
            trio.run(main)
        except BaseExceptionGroup as group:
            raise group.exceptions[0] from None


def test_a_file_that_is_no_model_fails_at_start_quoting_the_servers_log(tmp_path: Path) -> None:
    require(SMALL)  # the server must be installed
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"this is no GGUF file")
    server = LocalServer(bad, "broken", tmp_path / "s.log", n_ctx=N_CTX, n_threads=1)

    async def main() -> None:
        await server.run()

    with pytest.raises(LocalServerError, match="exited while starting") as caught:
        trio.run(main)
    assert "s.log ends with:" in str(caught.value) and "broken.gguf" in str(caught.value)
    assert gone(server.process.pid)


HEAD = """
import sys, time, trio
sys.path.insert(0, {root!r})
from pathlib import Path
from llm.local_server import LocalServer

async def main():
    server = LocalServer(Path({model!r}), "m", Path({log!r}), n_ctx=1024, n_threads=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        print("SERVER", server.process.pid, flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


def test_a_head_killed_with_sigkill_leaves_no_server_behind(tmp_path: Path) -> None:
    path = require(SMALL)
    script = HEAD.format(root=str(ROOT), model=str(path), log=str(tmp_path / "s.log"))
    head = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True
    )
    try:
        line = ""
        while not line.startswith("SERVER "):
            line = head.stdout.readline()
            assert line, "the head script ended without starting its server"
        server_pid = int(line.split()[1])
        assert not gone(server_pid)
        head.kill()  # no chance to stop its children
        head.wait(timeout=10)
        wait_until_blocking(lambda: gone(server_pid), timeout=10, what="the orphan server gone")
    finally:
        head.kill()
        head.wait()
    assert "parent" in (tmp_path / "s.log").read_text()


def test_a_local_model_that_was_not_fetched_is_a_config_error_naming_the_fetch_command(
    tmp_path: Path,
) -> None:
    config = tmp_path / "local.toml"
    config.write_text(
        f'[run]\nruns_dir = "{tmp_path / "runs"}"\n[agents]\nbackend = "local"\n'
        f'model = "{SMALL}"\n[actors.environment]\ncount = 1\n'
    )
    done = subprocess.run(
        [sys.executable, "run.py", "--config", str(config)], cwd=ROOT, capture_output=True,
        text=True, timeout=120, env={**os.environ, models.CACHE_ENV: str(tmp_path / "empty")},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "agents.model" in done.stderr
    assert f"python run.py models fetch {SMALL}" in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_smollm2s_broken_replies_are_repaired_then_given_up_with_the_documented_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real small model breaks the reply contract: the backend sends each broken reply
    back for repair (``llm_reply_invalid``), then gives up with :class:`ModelReplyError`
    after ``max_repairs`` — the documented cause — without crashing."""
    path = require(SMALL)
    from llm.openai_backend import OpenAIBackend
    from runtime import events

    events.configure(events_file=tmp_path / "events.jsonl", run="t", console_level="warning")
    monkeypatch.setenv("LOCAL_KEY", "local")
    server = LocalServer(path, SMALL, tmp_path / "s.log", n_ctx=N_CTX, n_threads=1)
    request = {
        "subaction": {"name": "collect_wood", "goal": {"wood": 1}, "max_steps": 200},
        "mode": "code", "version": 1, "success_rate": 0.2, "target": 0.9, "episodes": 10,
        "causes": {"step_budget": 8, "success": 2}, "detail": "",
        "code": 'def run(skills):\n    yield from skills.collect("tree", 1)\n',
    }  # fmt: skip

    async def main() -> tuple[ModelReplyError, float]:
        async with trio.open_nursery() as nursery:
            endpoint = await nursery.start(server.run)
            # JSON mode: the server's grammar makes every reply a closed JSON object (a
            # cut-off reply is never repaired), which SmolLM2 fills against the contract.
            backend = OpenAIBackend(
                endpoint.base_url, endpoint.alias, "LOCAL_KEY", timeout_s=300, max_retries=0,
                temperature=0.0, json_mode="object", max_tokens=REPLY_TOKENS, n_ctx=N_CTX,
            )  # fmt: skip
            started = time.monotonic()
            with pytest.raises(ModelReplyError) as caught:
                await backend.call("critic", "review", request)
            nursery.cancel_scope.cancel()
        return caught.value, time.monotonic() - started

    try:
        error, seconds = trio.run(main)
    finally:
        events.close()
    assert "reply still invalid after 2 repairs" in str(error)
    assert error.attempts == 3 and error.reply  # three real requests, a real reply kept
    recorded = read_events(tmp_path)
    invalid = [e for e in recorded if e["event"] == "llm_reply_invalid"]
    assert [e["repair"] for e in invalid] == [0, 1, 2]
    failed = [e for e in recorded if e["event"] == "llm_call_failed"]
    assert failed and failed[-1]["reason"] == "invalid_reply" and failed[-1]["repairs"] == 2
    print(f"SmolLM2: 3 requests in {seconds:.1f} s")


TINY_RUN = """
[run]
name = "local-0.5b"
runs_dir = "{runs}"

[agents]
backend = "local"
model = "{model}"
n_ctx = 8192
timeout_s = 1200        # CPU calls take a minute; queued ones wait for the one before
max_retries = 1
fast_capacity = 1       # the server answers one request at a time
critic_capacity = 1

[task]
task = "place a crafting table"
target = "place_table"  # two sub-actions: collect_wood, place_table
iterations = 1
revisions = 1
code_episodes = 2
eval_episodes = 2
episode_steps = 300
sub_target = 1.0        # anything short of every episode asks the critic for a revision
env_steps = 50000
wall_s = 1500

[runtime]
heartbeat_interval = 1.0
heartbeat_timeout = 30.0

[actors.environment]
count = 1
"""


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_short_real_run_with_the_0_5b_model_plans_codes_evaluates_and_critiques(
    tmp_path: Path,
) -> None:
    """``run.py`` with Qwen2.5-Coder-0.5B: the head starts the server, the slow agent
    plans, the fast agent codes each sub-action, the environment evaluates it, the critic
    reviews it, a "revise" verdict gets a revision, and the server stops with the run.
    Asserted on what the run recorded, not on the model's quality."""
    require(CODER)
    config = tmp_path / "tiny-local.toml"
    config.write_text(TINY_RUN.format(runs=tmp_path / "runs", model=CODER))
    done = subprocess.run(
        [sys.executable, "run.py", "--config", str(config), "--quiet"], cwd=ROOT,
        capture_output=True, text=True, timeout=1700,
    )  # fmt: skip
    (run_dir,) = (tmp_path / "runs").iterdir()
    recorded = read_events(run_dir)
    names = [e["event"] for e in recorded]
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{names}"
    calls = [json.loads(line) for line in (run_dir / "calls.jsonl").read_text().splitlines()]
    kinds = [(c["role"], c["purpose"]) for c in calls]
    assert kinds[0] == ("slow", "plan")
    assert ("fast", "code") in kinds and ("critic", "review") in kinds
    assert all(c["tokens_in"] > 0 and c["tokens_out"] > 0 and c["latency_s"] > 0 for c in calls)
    for event in ("model_server_ready", "plan_made", "code_written", "evaluation_finished"):
        assert event in names, event
    critiques = [e for e in recorded if e["event"] == "critique"]
    assert critiques
    # A "revise" verdict with a revision left gets a revision: version 2 of that code, or
    # (a small model at temperature 0 may write the same code again) a repeat said so.
    written = {(e["subaction"], e["version"]) for e in recorded if e["event"] == "code_written"}
    written |= {(e["subaction"], e["version"]) for e in recorded if e["event"] == "code_repeated"}
    for c in critiques:
        if c["verdict"] == "revise" and c["version"] == 1:
            assert (c["subaction"], 2) in written, c
    stopped = [e for e in recorded if e["event"] == "model_server_stopped"]
    assert stopped and gone(stopped[-1]["pid"])
    assert (run_dir / "model-server.log").stat().st_size > 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["model_calls"] == len(calls)
    seconds = [c["latency_s"] for c in calls]
    print(
        f"0.5B run: {len(calls)} calls, {sum(seconds) / len(seconds):.1f} s a call, "
        f"tokens in/out {summary['tokens_in']}/{summary['tokens_out']}, "
        f"final success {summary['final_success']}"
    )
