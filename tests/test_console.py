"""What a person sees: the command line's help, the live status panel on a terminal
(a real pseudo-terminal), plain lines in a pipe, the final summary, and how actor
processes' output reaches the head's console."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
import trio.testing
from helpers import ROOT

from runtime import events
from runtime.supervisor import relay_output

RUN = [sys.executable, str(ROOT / "run.py")]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]")
CLOCK = re.compile(r"\d\d:\d\d:\d\d\.\d{3} ")

# The shortest real run: one coded step (collect wood), one environment actor.
TINY = """
[run]
name = "tiny"
seed = 0

[task]
task = "collect wood"
target = "wood"
success_target = 0.5
iterations = 1
revisions = 1
code_episodes = 2
eval_episodes = 2
episode_steps = 300
env_steps = 50000

[runtime]
heartbeat_interval = 0.5
heartbeat_timeout = 10.0

[actors.environment]
count = 1
"""

# The same step learned with a tiny PPO job: training progress reaches the console.
LEARN = (
    TINY.replace('name = "tiny"', 'name = "learn"').replace(
        "env_steps = 50000",
        'env_steps = 50000\ntrain_steps = 256\ntrain_envs = 1\nlearn = ["collect_wood"]\n\n'
        "[training.ppo]\nn_steps = 64\nbatch_size = 32\nn_epochs = 1",
    )
    + "\n[actors.learner]\ncount = 1\n"
)


def _config(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _run(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RUN, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines() if x]


# ---------------------------------------------------------------------- help


def test_help_lists_every_command_and_each_command_has_its_own() -> None:
    for command in (RUN, [sys.executable, "-m", "rlgpt"]):
        done = subprocess.run(
            [*command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        listed = re.findall(r"^\s{4}(\w+)\s", done.stdout, re.MULTILINE)
        assert listed == ["run", "tail", "attach", "keys", "models", "play", "compare", "actor"], (
            done.stdout
        )
        assert "--config diamond" in done.stdout  # the default command is explained
    tail = subprocess.run(
        [*RUN, "tail", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert tail.returncode == 0 and "--no-follow" in tail.stdout
    run = subprocess.run(
        [*RUN, "--config", "x", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0 and "--resume" in run.stdout and "--quiet" in run.stdout


def test_no_help_text_shows_a_formatting_escape(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse formats %-placeholders in help strings but prints a description as it is
    # written, so a "%%" there reached the user (compare's "95 %%"). Every command's help,
    # and each keys/models action's, is read here as the user sees it.
    from rlgpt import cli

    helps = [[]] + [[c.name] for c in cli.COMMANDS]
    helps += [["keys", a] for a in ("init", "add", "revoke", "list")]
    helps += [["models", a] for a in ("list", "fetch")]
    for argv in helps:
        with pytest.raises(SystemExit) as stop:
            cli.main([*argv, "--help"])
        assert stop.value.code == 0, argv
        text = capsys.readouterr().out
        assert "usage:" in text, argv
        assert "%%" not in text and "%(" not in text, (argv, text)


# ------------------------------------------------------------- a pipe, --quiet


def test_a_piped_run_prints_plain_lines_each_progress_once_and_the_summary(
    tmp_path: Path,
) -> None:
    done = _run(["--config", str(_config(tmp_path, LEARN))], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert "\x1b" not in done.stdout + done.stderr  # no escapes in a pipe
    lines = done.stderr.splitlines()
    # Every event line is one process's: no line holds two events.
    assert all(len(CLOCK.findall(line)) <= 1 for line in lines), done.stderr
    # The events that matter are there; lifecycle noise and the clean stop are not.
    for name in ("plan_made", "iteration_started", "critique", "training_result"):
        assert any(f" {name} " in line for line in lines), (name, done.stderr)
    for name in ("actor_lost", "actor_stopped", "actor_process_exited", "rollout_started"):
        assert not any(f" {name} " in line for line in lines), (name, done.stderr)
    # Each progress report once: the file has it from the learner and from the head.
    progress = [e for e in _events(run_dir) if e["event"] == "training_progress"]
    shown = [line for line in lines if " training_progress " in line]
    assert progress and len(shown) == len(progress) // 2 >= 1, done.stderr
    assert not [e for e in _events(run_dir) if e["event"] == "actor_lost"]
    # The last lines: where the report, figure and video are, and how to replay.
    assert done.stdout.startswith(f"run {run_dir.name} finished"), done.stdout
    assert f"report   runs/{run_dir.name}/report.md" in done.stdout
    assert (run_dir / "report.md").exists()
    assert f"figure   runs/{run_dir.name}/success.png" in done.stdout
    assert f"video    runs/{run_dir.name}/episode.gif" in done.stdout
    assert f"replay   python run.py play runs/{run_dir.name}" in done.stdout


def test_quiet_shows_warnings_only_and_still_the_summary(tmp_path: Path) -> None:
    done = _run(["--config", str(_config(tmp_path, TINY)), "--quiet"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert not CLOCK.search(done.stderr), done.stderr  # no info event lines
    assert "final success 1.00 on 2 unseen worlds" in done.stdout
    assert f"report   runs/{run_dir.name}/report.md" in done.stdout


# ---------------------------------------------------------- a real terminal


def _run_in_terminal(args: list[str], cwd: Path, timeout: float = 240) -> tuple[int, str]:
    """``run.py ARGS`` with a pseudo-terminal (120×40) as stdin, stdout and stderr;
    returns its exit status and everything it wrote."""
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    proc = subprocess.Popen(
        [*RUN, *args], cwd=cwd, stdin=slave, stdout=slave, stderr=slave,
        env={**env, "TERM": "xterm-256color"},
    )  # fmt: skip
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal closed it
                break
            if not chunk:
                break
            out += chunk
        code = proc.wait(timeout=30)
    finally:
        proc.kill()
        os.close(master)
    return code, out.decode(errors="replace")


def test_a_run_on_a_terminal_keeps_a_status_panel_and_ends_with_the_summary(
    tmp_path: Path,
) -> None:
    code, raw = _run_in_terminal(["--config", str(_config(tmp_path, TINY))], cwd=tmp_path)
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert code == 0, raw[-3000:]
    assert "\x1b[" in raw  # drawn in place, with escapes
    text = ANSI.sub("", raw).replace("\r\n", "\n").replace("\r", "\n")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    panel = [line for line in lines if line.startswith("│")]
    assert any("run status" in line for line in lines), text[-3000:]
    assert any("collect wood · iteration 1/1 (plan v1)" in line for line in panel), panel[-12:]
    # The sub-action's line: name, mode, version, success, state.
    assert any(re.search(r"collect_wood\s+code\s+v1\s+1\.00\s+accepted", x) for x in panel)
    assert any(re.search(r"env steps [\d,]+ / 50,000 \(\d+%\)", x) for x in panel), panel[-12:]
    assert any(re.search(r"jobs in flight: environment-0 [01]/1", x) for x in panel)
    assert any(re.search(r"elapsed \d+s · ETA", x) for x in panel)
    # The event lines that matter scroll above the panel, once each.
    assert len([x for x in lines if " critique " in x and x[:2].isdigit()]) == 1, text[-4000:]
    # The last lines name the report, the figure and how to replay.
    tail = lines[-12:]
    assert f"run {run_dir.name} finished (target_met" in "\n".join(tail), tail
    assert f"report   runs/{run_dir.name}/report.md" in tail, tail
    assert f"replay   python run.py play runs/{run_dir.name}" in tail, tail


# ------------------------------------------------- actors' output in the head


def test_an_actors_output_reaches_the_head_console_as_whole_lines() -> None:
    console = io.StringIO()
    events.configure(console=console)
    record = {"ts": "2026-01-01T00:00:00.000000Z", "level": "warning", "actor": "learner-0"}
    record["event"] = "training_failed"

    async def main() -> None:
        send, receive = trio.testing.memory_stream_one_way_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relay_output, receive, "learner-0")
            line = json.dumps(record).encode() + b"\n"
            # An event line split across reads, then a traceback line, unterminated.
            await send.send_all(line[:10])
            await send.send_all(line[10:] + b"Traceback (most recent call last):\n  File")
            await send.send_all(b' "x.py", line 1\n')
            await send.aclose()

    try:
        trio.run(main)
    finally:
        events.configure(console=sys.stderr)
    shown = console.getvalue().splitlines()
    assert shown[0].startswith("00:00:00.000 learner-0") and "training_failed" in shown[0]
    assert shown[1:] == [
        "learner-0      | Traceback (most recent call last):",
        'learner-0      |   File "x.py", line 1',
    ]


def test_the_console_shows_a_failure_in_one_line_and_each_progress_once() -> None:
    from rlgpt.view import PlainView

    view = PlainView()
    failed = {"ts": "2026-01-01T00:00:01.000000Z", "level": "error", "actor": "learner-0"}
    failed |= {"event": "handler_failed", "exception": "Traceback ...\n  ...\nValueError: bad"}
    line = view.show(failed)
    assert line is not None and "\n" not in line and "ValueError: bad" in line
    progress = {"level": "info", "event": "training_progress", "job": "j", "steps": 5}
    assert view.show({**progress, "role": "learner", "actor": "learner-0"}) is None
    assert view.show({**progress, "role": "head", "actor": "head"}) is not None
    stop = {"level": "info", "event": "actor_lost", "reason": "exit status 0"}
    assert view.show(stop) is None
    assert view.show({**stop, "level": "warning"}) is not None  # warnings always show


def test_a_command_that_parses_its_own_arguments_is_one_registry_line(monkeypatch) -> None:
    from rlgpt import cli

    seen: list = []

    def cmd_echo(command: str, argv: list[str]) -> int:
        seen.append((command, argv))
        return 7

    monkeypatch.setattr(cli, "COMMANDS", [*cli.COMMANDS, cli.passthrough("echo", "say", cmd_echo)])
    assert "echo" in cli.build_parser("rlgpt").format_help()
    assert cli.main(["echo", "--help", "x"]) == 7
    assert seen == [("echo", ["--help", "x"])]


def test_the_panel_state_counts_env_steps_and_names_the_budget_its_estimate_follows() -> None:
    from rlgpt.view import RunState

    state = RunState(task="t", iterations=4, env_budget=10_000, wall_s=0.0)
    feed = [
        {"event": "task_started", "task": "t"},
        {"event": "plan_made", "version": 1, "subactions": ["wood:code", "table:rl"]},
        {"event": "iteration_started", "iteration": 1, "plan_version": 1},
        {"event": "evaluation_finished", "subaction": "wood", "success_rate": 0.5, "steps": 400},
        {"event": "training_requested", "job": "table-1", "subaction": "table"},
        {"event": "training_started", "job": "table-1", "steps": 1024, "role": "learner"},
        {"event": "training_progress", "job": "table-1", "steps": 600, "success_rate": 0.25},
    ]
    for event in feed:
        state.feed(event)
    assert list(state.subactions) == ["wood", "table"]
    assert state.subactions["table"].state == "training 600/1,024"
    assert state.env_steps == 1000  # 400 evaluated + 600 trained so far
    assert state.task_started is not None
    # A tenth of the budget spent: nine times as long to go, by the env-step budget.
    eta = state.eta(state.task_started + 10.0)
    assert eta.startswith("≤ 1m30s (env-step budget"), eta
    state.feed({"event": "training_result", "job": "table-1", "world_steps": 1500})
    state.feed({"event": "iteration_finished", "iteration": 1, "env_steps": 1900})
    assert state.env_steps == 1900 and "table-1" not in state.job_steps
    state.feed({"event": "final_evaluation_started"})
    assert state.eta(time.monotonic()) == "—"
