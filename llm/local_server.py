"""The ``local`` backend's server: llama-cpp-python's OpenAI-compatible server as a
supervised child of the head.

:class:`LocalServer` starts ``python -m llama_cpp.server --model F --model_alias NAME
--host 127.0.0.1 --port P --n_ctx N --n_threads T ...`` (:meth:`LocalServer.argv`: the
prompt cache and why each flag is there; through :mod:`llm.server_child`,
which ends it if the head is killed) on a free loopback port, waits until ``GET
/v1/models`` answers, and hands back its :class:`Endpoint`; the ``openai`` backend then
talks to it like to any server. While the run goes on, a server that dies is started
again on the same port (at most ``max_restarts`` times); when the run ends (its task is
cancelled) the server gets SIGTERM, then SIGKILL after ``grace_s``. Everything the server
prints goes to ``runs/<id>/model-server.log``.

Events: ``model_server_started`` (pid, port, attempt), ``model_server_ready`` (seconds;
``cpu_features``, the instruction sets its llama.cpp build uses, and ``system_info``,
llama.cpp's own line, read from the server's log),
``model_server_exited`` (cause; a warning while the run needs it), ``model_server_failed``
(down for good: the cause, the end of its log, the fix), ``model_server_stopped``.

While a restart is under way, requests wait for it (:meth:`LocalServer.wait_serving`,
which the ``openai`` backend of a ``local`` run calls on a failed connection) instead of
spending their retries on a port nobody listens on; a server down for good makes them
fail with its own cause. One that dies the same way :data:`SAME_DEATHS` times in a row
(SIGILL at its first request, every time) is not started again: the run ends at once
with the cause, the end of its log and the fix.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio

from llm.server_child import SYSTEM_INFO_MARK
from runtime.events import log

CHILD = Path(__file__).resolve().parent / "server_child.py"
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "pydantic_settings")
"""What ``python -m llama_cpp.server`` needs: the ``local`` extra
(``llama-cpp-python[server]``)."""
INSTALL_HINT = (
    "pip install --no-cache-dir -e '.[local]' with the CMAKE_ARGS docs/models.md gives "
    "(llama-cpp-python[server], built from source for any x86-64 CPU with AVX2)"
)
STARTUP_TIMEOUT_S = 300.0
"""Longest wait for a started server to answer: loading a 1.5B model from a cold disk on
a busy 2-core machine takes tens of seconds; minutes mean something is wrong."""
POLL_S = 0.25
"""Between readiness probes."""
PROBE_TIMEOUT_S = 5.0
"""One readiness probe; a loading server answers nothing or refuses at once."""
LOG_TAIL_LINES = 20
"""Lines of the server's log quoted in an error."""
SAME_DEATHS = 2
"""Deaths in a row with the same cause after which the server is not started again: a
server that dies the same way at every start (an instruction this CPU lacks) would only
die again, and the run should end with that cause now, not after every restart."""
SIGILL_HINT = (
    "SIGILL: llama.cpp was built for CPU instructions this machine lacks (a build made on "
    "another machine, a wheel from pip's cache, or one that uses AMX or AVX-512). Rebuild it "
    'here without them: CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --force-reinstall '
    "--no-cache-dir --no-binary llama-cpp-python 'llama-cpp-python[server]'"
)
"""The fix named when the server dies by SIGILL."""


class LocalServerError(Exception):
    """The local model server could not be started or kept running (the message quotes
    the end of its log and names the fix)."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the ``openai`` backend finds the local server."""

    base_url: str
    """``http://127.0.0.1:PORT/v1``."""
    alias: str
    """The model name the server answers to (``--model_alias``)."""
    ready: Callable[[], Awaitable[bool]] | None = field(default=None, compare=False)
    """Waits through a restart under way (:meth:`LocalServer.wait_serving`)."""


def missing_modules() -> list[str]:
    """The server's modules that are not installed (none: the ``local`` extra is in).
    Looked up without importing them: the head never loads llama.cpp itself."""
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


def free_port() -> int:
    """A loopback port nobody listens on now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_threads() -> int:
    """Every core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.strip().splitlines()[-lines:]) or "(empty log)"


def system_info(path: Path, offset: int = 0) -> str:
    """llama.cpp's system info as the server printed it in its log after byte ``offset``
    (the last such line: this start's), '' when it printed none."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.startswith(SYSTEM_INFO_MARK)]
    return lines[-1][len(SYSTEM_INFO_MARK) :].strip() if lines else ""


def cpu_features(info: str) -> list[str]:
    """The features a system info line says are on (``AVX2 = 1``), in its order."""
    return [
        name for name, value in re.findall(r"\b([A-Z][A-Z0-9_]*) = (\d+)", info) if value != "0"
    ]


class _DiedStarting(Exception):
    """The server process exited before it answered (its message says how)."""


class LocalServer:
    """One llama.cpp server process for the run, kept alive until cancelled."""

    def __init__(
        self,
        model_path: Path,
        alias: str,
        log_path: Path,
        *,
        n_ctx: int = 8192,
        n_threads: int = 0,
        cache_bytes: int = 0,
        port: int = 0,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        max_restarts: int = 3,
        grace_s: float = 5.0,
    ) -> None:
        """
        :param model_path: the GGUF file (:func:`llm.models.resolve`).
        :param alias: the model name requests use.
        :param log_path: file the server's output is appended to.
        :param n_ctx: context window in tokens (prompt and reply together).
        :param n_threads: CPU threads for inference, prompt and reply alike; 0: every core
            (:func:`default_threads`).
        :param cache_bytes: the server's prompt cache in RAM (0: none), see
            :meth:`argv`.
        :param port: loopback port; 0: a free one.
        :param startup_timeout_s: longest wait for a (re)started server to answer.
        :param max_restarts: restarts after a crash before the run is failed.
        :param grace_s: between SIGTERM and SIGKILL when stopping.
        """
        self.model_path = Path(model_path)
        self.alias = alias
        self.log_path = Path(log_path)
        self.n_ctx = n_ctx
        self.n_threads = n_threads or default_threads()
        self.cache_bytes = cache_bytes
        self.port = port or free_port()
        self.startup_timeout_s = startup_timeout_s
        self.max_restarts = max_restarts
        self.grace_s = grace_s
        self.restarts = 0
        """Restarts so far."""
        self.process: trio.Process | None = None
        """The running server process (None between runs)."""
        self.endpoint = Endpoint(f"http://127.0.0.1:{self.port}/v1", alias, self.wait_serving)
        self.failure: LocalServerError | None = None
        """Why the server is down for good (set as :meth:`run` raises it)."""
        self._serving = trio.Event()
        """Set while the server answers; a fresh, unset one while it is being restarted."""

    def check_installed(self) -> None:
        """Raise :class:`LocalServerError` naming the install command when the server's
        modules are missing."""
        missing = missing_modules()
        if missing:
            raise LocalServerError(
                f"the local model server is not installed (missing {', '.join(missing)}): "
                f"{INSTALL_HINT}"
            )

    async def wait_serving(self) -> bool:
        """Return once the server answers: False at once when it does, True after a
        restart that was under way. Raises the server's :class:`LocalServerError` when it
        is down for good (the backend's retries then end with its cause, not theirs)."""
        waited = False
        while True:
            if self.failure is not None:
                raise self.failure
            serving = self._serving
            if serving.is_set():
                if self.process is None or self.process.returncode is None:
                    return waited
                # Dead, and the supervisor has not seen it yet: a request sent now would
                # reach the restarted server before it answers (and count as its death).
                waited = True
                await trio.sleep(POLL_S)
                continue
            waited = True
            await serving.wait()

    def argv(self) -> list[str]:
        """The server's command line.

        ``--n_threads_batch``: the prompt is read with the threads the reply is written
        with (the server's own default is every CPU the OS reports, whatever
        ``n_threads`` says). ``--logits_all false``: the server's default keeps the
        logits of every prompt token, n_ctx × vocabulary floats (5 GB for Qwen2.5 at
        8,192), and copies them into each prompt-cache entry; nothing here reads them
        (sampling uses the last token's; no call asks for logprobs). With
        ``cache_bytes``: ``--cache true --cache_type ram --cache_size B``. The server
        always reuses the longest prefix its one context shares with the next prompt;
        the cache keeps the states of earlier prompts, so a call whose role's static
        prefix (:mod:`llm.prompts`) was overwritten by another role's call since gets
        it back instead of reading it again.
        """
        cache = (
            ["--cache", "true", "--cache_type", "ram", "--cache_size", str(self.cache_bytes)]
            if self.cache_bytes
            else []
        )
        return [
            sys.executable, str(CHILD), "--parent-pid", str(os.getpid()), "--",
            "--model", str(self.model_path), "--model_alias", self.alias,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads),
            "--n_threads_batch", str(self.n_threads), "--logits_all", "false", *cache,
        ]  # fmt: skip

    async def run(self, task_status: trio.TaskStatus[Endpoint] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the server, report :attr:`endpoint` once it answers, then keep it alive
        until cancelled. Raises :class:`LocalServerError` when it cannot start or dies
        more than ``max_restarts`` times, or :data:`SAME_DEATHS` times in a row the same
        way (then at once, naming the cause, the end of its log and the fix)."""
        try:
            await self._supervise(task_status)
        except LocalServerError as exc:
            self.failure = exc
            self._serving.set()  # wakes whoever waits for a restart: it raises the cause
            log.error("model_server_failed", detail=str(exc)[:2000])
            raise

    async def _supervise(self, task_status: trio.TaskStatus[Endpoint]) -> None:
        self.check_installed()
        causes: list[str] = []
        for attempt in range(self.max_restarts + 1):
            self.restarts = attempt
            try:
                try:
                    await self._start(attempt)
                except _DiedStarting as died:
                    if attempt == 0:  # never served: a broken install or model, not a crash
                        raise LocalServerError(str(died)) from None
                    code = self.process.returncode  # a restart's death counts as any other
                else:
                    self._serving.set()
                    if attempt == 0:
                        task_status.started(self.endpoint)
                    code = await self.process.wait()
                    self._serving = trio.Event()  # a restart is under way: callers wait
                causes.append(_describe_exit(code))
                log.warning(
                    "model_server_exited", pid=self.process.pid, cause=causes[-1],
                    attempt=attempt, restarts_left=self.max_restarts - attempt,
                    log=str(self.log_path),
                )  # fmt: skip
            finally:
                with trio.CancelScope(shield=True):
                    await self._stop()
            same = causes[-SAME_DEATHS:]
            if len(same) == SAME_DEATHS and len(set(same)) == 1 and attempt < self.max_restarts:
                raise LocalServerError(
                    f"the local model server died the same way ({same[0]}) after each of its "
                    f"last {SAME_DEATHS} starts: not started again. Its log {self.log_path} "
                    f"ends with:\n{log_tail(self.log_path)}\n{_fix(same[0])}"
                )
        raise LocalServerError(
            f"the local model server died {self.max_restarts + 1} times (last: {causes[-1]}); "
            f"its log {self.log_path} ends with:\n{log_tail(self.log_path)}\n{_fix(causes[-1])}"
        )

    async def _start(self, attempt: int) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            offset = out.tell()  # this start's lines follow
            out.write(f"--- {time.strftime('%H:%M:%S')} start {attempt}: ".encode())
            out.write((" ".join(self.argv()) + "\n").encode())
            out.flush()
            # Own session: a Ctrl-C at the terminal reaches the head only, which stops us.
            self.process = await trio.lowlevel.open_process(
                self.argv(), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True,
            )  # fmt: skip
        log.info(
            "model_server_started", pid=self.process.pid, port=self.port, model=self.alias,
            file=str(self.model_path), n_ctx=self.n_ctx, n_threads=self.n_threads,
            cache_bytes=self.cache_bytes, attempt=attempt,
        )  # fmt: skip
        begun = time.monotonic()
        with trio.move_on_after(self.startup_timeout_s):
            while not await self._answers():
                if self.process.returncode is not None:
                    raise _DiedStarting(
                        f"the local model server exited while starting "
                        f"({_describe_exit(self.process.returncode)}); {self.log_path} ends "
                        f"with:\n{log_tail(self.log_path)}"
                    )
                await trio.sleep(POLL_S)
            info = system_info(self.log_path, offset)
            log.info(
                "model_server_ready", pid=self.process.pid, port=self.port,
                seconds=round(time.monotonic() - begun, 2), attempt=attempt,
                cpu_features=cpu_features(info), system_info=info,
            )  # fmt: skip
            return
        raise LocalServerError(
            f"the local model server did not answer on port {self.port} within "
            f"{self.startup_timeout_s:g} s; {self.log_path} ends with:\n{log_tail(self.log_path)}"
        )

    async def _answers(self) -> bool:
        """Whether ``GET /v1/models`` answers with this alias (in a worker thread: the
        standard library's client blocks)."""
        url = f"{self.endpoint.base_url}/models"

        def probe() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as response:
                    body = json.loads(response.read() or b"{}")
            except (OSError, ValueError, urllib.error.URLError):
                return False
            return any(m.get("id") == self.alias for m in body.get("data", []))

        return await trio.to_thread.run_sync(probe, abandon_on_cancel=True)

    async def _stop(self) -> None:
        """SIGTERM, up to ``grace_s`` to go, then SIGKILL; always reaps."""
        proc = self.process
        if proc is None:
            return
        running = proc.returncode is None
        if running:
            _signal_group(proc, signal.SIGTERM)
            with trio.move_on_after(self.grace_s):
                await proc.wait()
            if proc.returncode is None:
                log.warning("model_server_killed", pid=proc.pid, grace_s=self.grace_s)
        _signal_group(proc, signal.SIGKILL)  # whatever of its group is left
        await proc.wait()
        if running:
            log.info("model_server_stopped", pid=proc.pid, cause=_describe_exit(proc.returncode))


def _signal_group(proc: trio.Process, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _fix(cause: str) -> str:
    """What to do about a server that died of ``cause``."""
    if cause == "signal SIGILL":
        return SIGILL_HINT
    return "Fix what its log names, or use another backend ([agents] backend)."


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "running"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"
