"""A FAKE OpenAI-compatible HTTP server for tests: no model behind it, scripted replies.

It listens on 127.0.0.1 on a random port, in a background thread (stdlib
``ThreadingHTTPServer``), and speaks just enough of the OpenAI REST API for the real
``openai`` client to talk to it over real HTTP:

- ``POST /v1/chat/completions`` → a ``chat.completion`` object with one choice and ``usage``;
- ``GET /v1/models`` → a ``list`` with one model.

What a chat request gets back is scripted: :meth:`FakeOpenAI.script` queues behaviours
(:class:`Behaviour`: reply text, an HTTP error status with optional ``Retry-After``, a
delay before answering), consumed one per chat request; once the queue is empty the
default ``responder(messages) -> str`` answers. Every request is recorded
(:attr:`FakeOpenAI.requests`), so tests can count attempts and read what was sent::

    with FakeOpenAI(responder=lambda messages: '{"verdict": "accept", "advice": ""}') as fake:
        fake.script(Behaviour(status=429, retry_after=0), Behaviour(text="{...}"))
        backend = OpenAIBackend(fake.base_url, "fake-model", "FAKE_KEY")
        ...
        assert fake.count == 2

``models=False`` answers 404 to ``/v1/models``. ``api_key`` (optional) makes the server
answer 401 to any other bearer token, as the real service does. Tokens in ``usage`` are
counted crudely (words), enough to test budgets. Real servers' quirks are scripted with
``refuse`` (refuse a request by its body: a parameter, a response_format), ``serial``
(one request at a time), ``model_extra`` (what ``/v1/models`` says of the model) and the
Behaviour fields ``send_usage``, ``finish_reason``, ``reasoning_content``, ``error``;
``tests/test_llm_quirks.py`` builds each named server fake from them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Responder = Callable[[list[dict[str, Any]]], str]


@dataclasses.dataclass(frozen=True, slots=True)
class Behaviour:
    """One scripted answer to one chat request."""

    text: str | None = None
    """Assistant message content (None: ask the default responder)."""
    status: int = 200
    """HTTP status; anything but 200 sends an OpenAI-style error body."""
    retry_after: float | None = None
    """``Retry-After`` header (seconds) sent with an error status."""
    delay: float = 0.0
    """Seconds to wait before answering (longer than the client's timeout: a timeout)."""
    usage: tuple[int, int] | None = None
    """(prompt_tokens, completion_tokens) to report instead of the word counts."""
    send_usage: bool = True
    """False: the answer has no ``usage`` at all (as some servers send)."""
    finish_reason: str = "stop"
    """The choice's ``finish_reason`` (``length``: cut off by the token limit)."""
    reasoning_content: str | None = None
    """A ``reasoning_content`` field beside the content (reasoning models' servers)."""
    error: str | None = None
    """The error message sent with an error status (default: "scripted status N")."""


def _words(text: str) -> int:
    return len(text.split())


def echo_last(messages: list[dict[str, Any]]) -> str:
    """Default responder: the last user message back (rarely what a test wants)."""
    return str(messages[-1].get("content", "")) if messages else ""


class FakeOpenAI:
    """The fake server; a context manager (start on enter, stop on exit)."""

    def __init__(
        self,
        responder: Responder = echo_last,
        api_key: str | None = None,
        models: bool = True,
        refuse: Callable[[dict[str, Any]], tuple[int, str] | None] | None = None,
        serial: bool = False,
        model_extra: dict[str, Any] | None = None,
    ) -> None:
        self.responder = responder
        self.api_key = api_key
        self.models = models
        """Serve ``GET /v1/models`` (False: 404, as some OpenAI-compatible servers do)."""
        self.refuse = refuse
        """Looks at each chat request's body first: (status, message) refuses it (as a
        server refuses a parameter it does not take), None lets it through."""
        self.serial = serial
        """Answer one chat request at a time (as llama.cpp servers do), the rest wait."""
        self.model_extra = model_extra or {}
        """Extra fields of the model's ``/v1/models`` entry (e.g. vLLM's max_model_len)."""
        self.in_flight = 0
        self.max_in_flight = 0
        """The most chat requests the server held at once."""
        self._serve_one = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        """Every request received: {"method", "path", "headers", "body"} (body parsed JSON)."""
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ control

    def script(self, *behaviours: Behaviour | str) -> None:
        """Queue behaviours for the next chat requests (a str is a plain reply)."""
        with self._lock:
            for b in behaviours:
                self._queue.append(Behaviour(text=b) if isinstance(b, str) else b)

    @property
    def count(self) -> int:
        """Chat completion requests received so far."""
        return len(self.chat_requests)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    @property
    def pending(self) -> int:
        """Scripted behaviours not consumed yet."""
        with self._lock:
            return len(self._queue)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not started: use it as a context manager")
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAI:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        # Daemon handler threads: a scripted delay outliving the test never blocks exit.
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()  # wakes handlers sleeping in a scripted delay
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ serving

    def _record(self, method: str, path: str, headers: dict[str, str], body: Any) -> None:
        with self._lock:
            self.requests.append({"method": method, "path": path, "headers": headers, "body": body})

    def _next(self) -> Behaviour | None:
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def _sleep(self, seconds: float) -> None:
        self._closing.wait(seconds)


def run_with_fake_model(
    tmp_path: Path,
    config: str,
    responder: Callable[[list[dict[str, Any]]], str],
    *args: str,
    timeout: float = 400,
) -> tuple[subprocess.CompletedProcess, Path | None]:
    """``run.py --config`` on ``config`` with the ``openai`` backend pointed at a fake
    server that ``responder`` answers: the finished process and the run's folder (under
    ``tmp_path / "runs"``, None where none was made). ``args`` go to ``run.py``."""
    root = Path(__file__).resolve().parent.parent
    with FakeOpenAI(responder=responder) as fake:
        path = tmp_path / "scripted.toml"
        path.write_text(
            config + f'\n[agents]\nbackend = "openai"\nbase_url = "{fake.base_url}"\n'
            'model = "fake-model"\napi_key_env = "RLGPT_FAKE_KEY"\ntimeout_s = 20.0\n'
        )
        proc = subprocess.run(
            [sys.executable, str(root / "run.py"), "--config", str(path), *args],
            cwd=tmp_path, capture_output=True, text=True, timeout=timeout, check=False,
            env={**os.environ, "RLGPT_FAKE_KEY": "not-a-real-key"},
        )  # fmt: skip
    runs = sorted((tmp_path / "runs").iterdir()) if (tmp_path / "runs").is_dir() else []
    return proc, runs[-1] if runs else None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"  # keep-alive, as the real service
    # One buffered write per response, sent at once: headers and body written separately
    # meet Nagle's algorithm and delayed ACKs, ~40 ms a request on loopback.
    wbufsize = -1
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        pass  # quiet: tests read fake.requests instead

    def do_GET(self) -> None:  # noqa: N802 - stdlib's name
        self.fake._record("GET", self.path, dict(self.headers), None)
        if not self._authorised():
            return
        if self.fake.models and self.path.rstrip("/").endswith("/models"):
            model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}
            model.update(self.fake.model_extra)
            self._send(200, {"object": "list", "data": [model]})
        else:
            self._error(404, f"unknown path {self.path}", "not_found_error")

    def do_POST(self) -> None:  # noqa: N802 - stdlib's name
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"null")
        except json.JSONDecodeError:
            body = None
        self.fake._record("POST", self.path, dict(self.headers), body)
        if not self._authorised():
            return
        if not self.path.rstrip("/").endswith("/chat/completions") or not isinstance(body, dict):
            self._error(404, f"unknown path {self.path}", "not_found_error")
            return
        refused = self.fake.refuse(body) if self.fake.refuse is not None else None
        if refused is not None:
            self._error(refused[0], refused[1])
            return
        fake = self.fake
        with fake._lock:
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
        try:
            if fake.serial:
                with fake._serve_one:
                    self._answer(body)
            else:
                self._answer(body)
        finally:
            with fake._lock:
                fake.in_flight -= 1

    def _answer(self, body: dict[str, Any]) -> None:
        behaviour = self.fake._next() or Behaviour()
        if behaviour.delay:
            self.fake._sleep(behaviour.delay)
        if behaviour.status != 200:
            headers = {}
            if behaviour.retry_after is not None:
                headers["Retry-After"] = f"{behaviour.retry_after:g}"
            message = behaviour.error or f"scripted status {behaviour.status}"
            self._error(behaviour.status, message, headers=headers)
            return
        messages = body.get("messages") or []
        text = behaviour.text if behaviour.text is not None else self.fake.responder(messages)
        if behaviour.usage is not None:
            tokens_in, tokens_out = behaviour.usage
        else:
            tokens_in = sum(_words(str(m.get("content", ""))) for m in messages)
            tokens_out = _words(text)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if behaviour.reasoning_content is not None:
            message["reasoning_content"] = behaviour.reasoning_content
        answer: dict[str, Any] = {
            "id": f"chatcmpl-fake-{self.fake.count}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake-model"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": behaviour.finish_reason,
                    "logprobs": None,
                }
            ],
        }
        if behaviour.send_usage:
            answer["usage"] = {
                "prompt_tokens": tokens_in,
                "completion_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            }
        self._send(200, answer)

    def _authorised(self) -> bool:
        expected = self.fake.api_key
        if expected is None or self.headers.get("Authorization") == f"Bearer {expected}":
            return True
        self._error(401, "Incorrect API key provided.", "invalid_api_key")
        return False

    def _error(
        self,
        status: int,
        message: str,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        error = {"message": message, "type": "fake_error", "param": None, "code": code}
        self._send(status, {"error": error}, headers)

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): nothing to answer
