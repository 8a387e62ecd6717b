"""A local model server that dies is reported as what it is: its signal, the end of its
log and the fix, not as an agent that "could not plan".

The stand-in server is a tiny Python HTTP server (no llama.cpp needed), a real process
started and supervised by the real :class:`llm.local_server.LocalServer`, asked by the
real ``openai`` backend over loopback. It answers ``GET /v1/models`` as llama.cpp's
server does, then dies by SIGILL at its first chat request, every time it is started, as
a llama.cpp built for AMX does on a CPU without it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import trio

from llm.errors import ModelUnavailable
from llm.local_server import SAME_DEATHS, LocalServer, LocalServerError
from llm.openai_backend import OpenAIBackend

# The stand-in for llama.cpp's server: argv is the port and the model alias.
STAND_IN_SERVER = """
import http.server, json, os, resource, signal, sys

port, alias = int(sys.argv[1]), sys.argv[2]
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGILL would dump core otherwise


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": alias, "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        print("stand-in: first request: illegal instruction in ggml_compute_forward", flush=True)
        os.kill(os.getpid(), signal.SIGILL)

    def log_message(self, *args):
        pass


print("stand-in: model loaded, listening", flush=True)
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


class StandInServer(LocalServer):
    """The real supervisor, running the stand-in instead of llama.cpp's server."""

    def check_installed(self) -> None:
        pass  # the stand-in needs no llama.cpp

    def argv(self) -> list[str]:
        script = self.log_path.parent / "stand_in_server.py"
        return [sys.executable, str(script), str(self.port), self.alias]


def _ask_a_supervised_stand_in(tmp_path: Path, script: str) -> tuple[BaseExceptionGroup, Path]:
    """Start ``script`` as the supervised server, ask it for a plan through the real
    backend (which waits for restarts, as method.agents.make_backend sets it up), and
    return what the two tasks raised and the server's log."""
    log_path = tmp_path / "model-server.log"
    (tmp_path / "stand_in_server.py").write_text(script)
    server = StandInServer(
        tmp_path / "model.gguf", "stand-in", log_path, max_restarts=3, startup_timeout_s=60
    )
    backend = OpenAIBackend(
        server.endpoint.base_url, "stand-in", "", max_retries=4, backoff_s=0.05, n_ctx=4096
    )
    backend.server_ready = server.endpoint.ready
    messages = [{"role": "user", "content": "plan the diamond"}]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            await backend._complete(messages, "slow", "plan")

    with pytest.raises(BaseExceptionGroup) as caught:
        trio.run(main)
    return caught.value, log_path


def test_a_server_that_dies_by_sigill_at_every_first_request_ends_the_run_with_its_cause(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    group, log_path = _ask_a_supervised_stand_in(tmp_path, STAND_IN_SERVER)
    took = time.monotonic() - started
    errors = list(group.exceptions)
    # What the user is told, whichever task ended first: the server's own death.
    assert errors and all(isinstance(e, LocalServerError | ModelUnavailable) for e in errors)
    for error in errors:
        text = str(error)
        assert f"died the same way (signal SIGILL) after each of its last {SAME_DEATHS}" in text
        assert "illegal instruction in ggml_compute_forward" in text  # its log's last lines
        assert "-DGGML_NATIVE=OFF" in text  # the fix
    # The request waited for the restart and was sent again (the second death), and the
    # server was not started a third time.
    log = log_path.read_text()
    assert log.count(" start ") == SAME_DEATHS, log
    assert log.count("first request") == SAME_DEATHS, log
    assert took < 60, took


# A server that served once, then dies by SIGILL at every later start before it answers:
# the restart's death counts as a death like the first one (two alike end the run with
# their cause), not as "exited while starting", which is for a server that never served.
DIES_ON_RESTART = (
    """
import os, pathlib, signal, sys
served = pathlib.Path(__file__).with_name("served")
if served.exists():
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    print("stand-in: restart: illegal instruction in ggml_init", flush=True)
    os.kill(os.getpid(), signal.SIGILL)
served.write_text("yes")
"""
    + STAND_IN_SERVER
)


def test_a_restart_that_dies_before_it_answers_counts_as_the_same_death(tmp_path: Path) -> None:
    group, log_path = _ask_a_supervised_stand_in(tmp_path, DIES_ON_RESTART)
    for error in group.exceptions:
        assert isinstance(error, LocalServerError | ModelUnavailable), error
        text = str(error)
        assert f"died the same way (signal SIGILL) after each of its last {SAME_DEATHS}" in text
        assert "restart: illegal instruction in ggml_init" in text
    assert log_path.read_text().count(" start ") == SAME_DEATHS


# A llama_cpp package that stands in for the real one in the server's process only (put
# first on its PYTHONPATH): its server is STAND_IN_SERVER. The real failure (a build for
# AMX on a CPU without it) cannot be made on a machine whose build runs.
STAND_IN_MAIN = """
import runpy, sys
args = sys.argv[1:]
port, alias = args[args.index("--port") + 1], args[args.index("--model_alias") + 1]
sys.argv = ["stand_in_server", port, alias]
runpy.run_path({script!r}, run_name="__main__")
"""

RUN_CONFIG = """
[run]
name = "sigill"
[agents]
backend = "local"
model = {model!r}
max_retries = 4
[task]
target = "wood"
iterations = 1
code_episodes = 2
eval_episodes = 2
episode_steps = 300
[actors.environment]
count = 1
"""


@pytest.mark.slow  # a whole run.py (~15 s)
def test_a_run_whose_model_server_dies_at_every_first_request_ends_with_its_cause(
    tmp_path: Path,
) -> None:
    import json
    import os
    import subprocess

    fake = tmp_path / "stand_in" / "llama_cpp"
    (fake / "server").mkdir(parents=True)
    (tmp_path / "stand_in_server.py").write_text(STAND_IN_SERVER)
    (fake / "__init__.py").write_text(
        "def llama_print_system_info():\n    return b'AMX_INT8 = 1'\n"
    )
    (fake / "server" / "__init__.py").write_text("")
    main = STAND_IN_MAIN.format(script=str(tmp_path / "stand_in_server.py"))
    (fake / "server" / "__main__.py").write_text(main)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF stand-in")
    config = tmp_path / "sigill.toml"
    config.write_text(RUN_CONFIG.format(model=str(model)))
    root = Path(__file__).resolve().parent.parent
    path = os.pathsep.join([str(fake.parent), str(root), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, str(root / "run.py"), "--config", str(config), "--quiet"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    # The run ends with the server's own death, its log's last lines and the fix; not
    # with an agent that "could not plan", and not with a traceback.
    assert proc.returncode != 0
    said = proc.stdout + proc.stderr
    assert f"died the same way (signal SIGILL) after each of its last {SAME_DEATHS}" in said
    assert "illegal instruction in ggml_compute_forward" in said and "-DGGML_NATIVE=OFF" in said
    assert "could not plan" not in said and "Traceback" not in said, said[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    named = [e["event"] for e in events]
    assert named.count("model_server_started") == SAME_DEATHS
    assert "model_server_failed" in named
    ready = next(e for e in events if e["event"] == "model_server_ready")
    assert ready["cpu_features"] == ["AMX_INT8"]  # what the build said it uses
