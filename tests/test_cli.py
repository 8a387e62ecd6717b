"""run.py as a person uses it: a whole run, tail, config errors, attach errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import ROOT

RUN = [sys.executable, str(ROOT / "run.py")]


def _run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RUN, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_a_run_from_a_config_finishes_and_tail_shows_it(tmp_path: Path) -> None:
    config = tmp_path / "smoke.toml"
    config.write_text(
        '[run]\nname = "smoke"\ndriver = "checkup"\n[actors.probe]\ncount = 2\ncapacity = 2\n'
    )
    done = _run(["--config", str(config)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    report = json.loads((run_dir / "report.json").read_text())
    assert report["roles"]["probe"]["jobs"] == 40
    assert set(report["roles"]["probe"]["actors"]) == {"probe-0", "probe-1"}
    assert json.loads((run_dir / "config.json").read_text())["source"] == str(config)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert {"ts", "level", "run", "actor", "role", "event"} <= set(events[0])
    assert {e["actor"] for e in events} >= {"head", "probe-0", "probe-1"}
    tail = _run(["tail", "--no-follow"], cwd=tmp_path)
    assert tail.returncode == 0
    lines = tail.stdout.splitlines()
    assert any("run_finished" in line and line.split()[1] == "head" for line in lines)
    assert any("actor_started" in line and "probe-1" in line for line in lines)
    # The follower stops by itself once the head's last event is in.
    follow = _run(["tail", str(run_dir)], cwd=tmp_path, timeout=30)
    assert follow.returncode == 0 and "run_finished" in follow.stdout


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (
            "[runtime]\nheartbeat_interval = 'fast'\n",
            "runtime.heartbeat_interval: expected a number",
        ),
        ("[runtime]\nheartbeat_intervall = 1.0\n", "did you mean 'heartbeat_interval'?"),
        ("[actors.prob]\ncount = 1\n", "did you mean 'probe'?"),
        ("[actors.probe]\ncount = 'two'\n", 'actors.probe.count: expected "auto" or an integer'),
        ("[runtime]\nlisten = 'tcp://0.0.0.0:5555'\n", "python run.py keys"),
        ("[run\nname = 1\n", "expected valid TOML"),
        ("runtime = 3\n", "expected a table"),
        ("[actors.probe]\ndevice = 'gpu'\n", "actors.probe.device: expected a device"),
        ("[actors.probe]\ndevice = 'cuda:999'\n", "actors.probe.device"),
        ("[runtime]\nkeys_dir = 'nokeys'\n", "run `python run.py keys --dir nokeys`"),
        ("[runtime]\nmax_job_tries = 0\n", "set max_job_tries to 1 or more"),
        # Issue 12: tracebacks (exit 1) or accepted before.
        ("[runtime]\nmax_frame_bytes = 4611686018427387904\n", "runtime.max_frame_bytes"),
        ("[runtime]\nheartbeat_interval = nan\n", "expected a finite number, found nan"),
        ("[runtime]\nheartbeat_timeout = inf\n", "expected a finite number, found inf"),
        ("[run]\nname = 'a/b'\n", "run.name: expected letters, digits"),
        (f"[run]\nname = '{'x' * 120}'\n", "run.name: expected letters, digits"),
        ("[runtime]\nlisten = 'tcp://127.0.0.1:99999'\n", "a port from 1 to 65535 or '*'"),
        ("[actors.probe]\ncount = 100000\n", "set count to 256 or less"),
        ("[task]\nlearn = ['no_such_step']\n", "task.learn[0]: expected a step of the plan"),
    ],
)
def test_bad_config_exits_2_naming_file_key_and_fix(tmp_path: Path, text: str, expect: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    done = _run(["--config", str(config)], cwd=tmp_path)
    assert done.returncode == 2
    assert str(config) in done.stderr and expect in done.stderr, done.stderr
    assert not (tmp_path / "runs").exists()  # nothing started


def _checkup_config(tmp_path: Path, run: str = "") -> Path:
    config = tmp_path / "checkup.toml"
    config.write_text(f'[run]\ndriver = "checkup"\n{run}[actors.probe]\ncount = 1\n')
    return config


def _no_root_override() -> None:
    """In the child: drop CAP_DAC_OVERRIDE from the bounding set, so that root (these tests
    may run as root) meets permission bits as any user does from its exec on. Any other
    user already does (and may not drop capabilities: EPERM)."""
    import ctypes

    if os.geteuid() != 0:
        return
    pr_capbset_drop, cap_dac_override = 24, 1  # <linux/prctl.h>, <linux/capability.h>
    if ctypes.CDLL(None, use_errno=True).prctl(pr_capbset_drop, cap_dac_override, 0, 0, 0):
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _run_unprivileged(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RUN, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
        preexec_fn=_no_root_override,
    )  # fmt: skip


def _refused_with_2(done: subprocess.CompletedProcess, *expect: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    for text in expect:
        assert text in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("runs_dir", "why"),
    [("a-file", "Not a directory"), ("/proc/rlgpt-runs", ""), ("read-only/runs", "Permission")],
)
def test_a_runs_dir_the_run_cannot_write_exits_2_naming_the_key(
    tmp_path: Path, runs_dir: str, why: str
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "read-only").mkdir(mode=0o555)
    config = _checkup_config(tmp_path, f"runs_dir = '{runs_dir}'\n")
    done = _run_unprivileged(["--config", str(config)], cwd=tmp_path)
    expect = f"{config}: run.runs_dir: expected a folder this user can create run folders in"
    _refused_with_2(done, expect, why, "set runs_dir to a writable folder")


def test_a_name_whose_socket_path_is_too_long_for_the_temp_folder_exits_2(tmp_path: Path) -> None:
    # A 40-character name passes its own check; a temporary folder over 35 characters
    # makes the ipc socket path longer than the 107 bytes a socket address holds.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    assert len(str(tmp)) > 35
    config = _checkup_config(tmp_path, f"name = '{'n' * 40}'\n")
    done = subprocess.run(
        [*RUN, "--config", str(config)], cwd=tmp_path, capture_output=True, text=True,
        timeout=120, check=False, env={**os.environ, "TMPDIR": str(tmp)},
    )  # fmt: skip
    _refused_with_2(
        done,
        "run.name: expected a socket path of at most 107 bytes",
        "shorten [run] name, or set TMPDIR to a shorter folder",
    )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def _recorded_run(tmp_path: Path) -> Path:
    """A run folder as `run.py --config` leaves it before the run starts: config.json."""
    import dataclasses

    from method import settings

    s = settings.load(str(_checkup_config(tmp_path)))
    run_dir = tmp_path / "runs" / "checkup-20250101-000000-abcd"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"source": s.source, **dataclasses.asdict(s)}))
    return run_dir


def test_resume_of_a_read_only_run_dir_exits_2_naming_the_folder(tmp_path: Path) -> None:
    run_dir = _recorded_run(tmp_path)
    run_dir.chmod(0o555)
    try:
        done = _run_unprivileged(["--resume", str(run_dir)], cwd=tmp_path)
    finally:
        run_dir.chmod(0o755)
    _refused_with_2(done, f"{run_dir}: expected a run folder this user can write", "chmod u+w")
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json"]


@pytest.mark.parametrize("text", ["[]", "17"])
def test_resume_of_a_config_json_that_is_not_a_table_exits_2(tmp_path: Path, text: str) -> None:
    run_dir = _recorded_run(tmp_path)
    (run_dir / "config.json").write_text(text)
    done = _run(["--resume", str(run_dir)], cwd=tmp_path)
    _refused_with_2(done, f"{run_dir / 'config.json'}: expected a run's config.json")


def test_missing_config_lists_the_configs_that_exist(tmp_path: Path) -> None:
    done = _run(["--config", "nonesuch.toml"], cwd=tmp_path)
    assert done.returncode == 2 and "diamond.toml" in done.stderr


def test_bare_config_name_resolves_in_the_package_configs(tmp_path: Path) -> None:
    from runtime.config import find_config

    assert find_config("diamond.toml") == ROOT / "rlgpt" / "configs" / "diamond.toml"
    assert find_config("diamond") == ROOT / "rlgpt" / "configs" / "diamond.toml"


def test_attach_refuses_a_device_this_machine_lacks(tmp_path: Path) -> None:
    done = _run(
        ["attach", "probe", "--connect", "tcp://127.0.0.1:1", "--device", "cuda:999"], cwd=tmp_path
    )
    assert done.returncode == 2
    assert "cuda:999" in done.stderr and (
        "no usable CUDA" in done.stderr or "cuda:0.." in done.stderr
    )
    bad = _run(
        ["attach", "probe", "--connect", "tcp://127.0.0.1:1", "--device", "gpu"], cwd=tmp_path
    )
    assert bad.returncode == 2 and "expected cpu, cuda or cuda:N" in bad.stderr


@pytest.mark.parametrize(
    ("flag", "value", "expect"),
    [
        ("--wait", "nan", "expected seconds, 0 or more (0: for ever), found 'nan'"),
        ("--wait", "-3", "expected seconds, 0 or more"),  # was: "no head answered within -3 s"
        ("--capacity", "0", "expected 1 to 256, found '0'"),  # was: a learner taking no job
        ("--max-frame-bytes", "0", "expected 4,096 to 1,073,741,824"),
        ("--count", "0", "expected at least 1"),
        ("--gpus-per-learner", "-1", "expected at least 0"),
        ("--max-restarts", "two", "expected at least 0, found 'two'"),
    ],
)
def test_attach_refuses_a_number_out_of_range_naming_the_flag(
    capsys: pytest.CaptureFixture, flag: str, value: str, expect: str
) -> None:
    from rlgpt.cli import build_parser

    with pytest.raises(SystemExit) as stopped:
        build_parser("run.py").parse_args(
            ["attach", "learner", "--connect", "tcp://127.0.0.1:1", flag, value]
        )
    assert stopped.value.code == 2
    assert f"argument {flag}: {expect}" in capsys.readouterr().err


def test_attach_with_a_run_dir_that_does_not_exist_is_refused_and_makes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from rlgpt.cli import main

    typo = tmp_path / "runs" / "demo-l"  # the run is demo-1: events would be kept apart
    code = main(["attach", "probe", "--connect", "tcp://127.0.0.1:1", "--run-dir", str(typo)])
    assert code == 2 and not typo.exists()
    assert f"--run-dir {typo} is not a folder; name the head's run" in capsys.readouterr().err


def test_keys_in_a_folder_that_cannot_be_made_exit_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from rlgpt.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["keys", "--dir", str(blocker / "keys")]) == 2  # was: a traceback
    assert f"keys error: {blocker / 'keys'}: Not a directory" in capsys.readouterr().err


def test_attach_to_a_remote_host_without_keys_is_refused(tmp_path: Path) -> None:
    done = _run(["attach", "probe", "--connect", "tcp://192.0.2.1:5555"], cwd=tmp_path)
    assert done.returncode == 2 and "--keys" in done.stderr


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


def test_an_actor_waiting_for_an_absent_broker_sleeps_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    # Nothing listens on this port: the actor's registration can only wait.
    proc = subprocess.Popen(
        [*RUN, "attach", "probe", "--connect", "tcp://127.0.0.1:9"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RLGPT_CONSOLE_LEVEL": "info"},  # the mark is an info event
    )
    waiting, ended, said = threading.Event(), threading.Event(), []

    def read() -> None:  # drains stderr; the first unanswered registration is the mark
        for line in proc.stderr:
            said.append(line)
            if "broker_unreachable" in line:
                waiting.set()
        ended.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        # Imports done and the first registration unanswered, however loaded the machine.
        deadline = time.monotonic() + 120
        while not waiting.wait(timeout=0.5):
            assert not ended.is_set() and time.monotonic() < deadline, "".join(said)[-3000:]
        before = _cpu_seconds(proc.pid)
        time.sleep(2.0)
        assert _cpu_seconds(proc.pid) - before < 0.3, "waiting actor burns CPU"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_keys_command_writes_a_usable_layout(tmp_path: Path) -> None:
    done = _run(["keys", "--dir", "k"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for name in ("server.key", "server.key_secret", "client.key_secret", "authorized/client.key"):
        assert (tmp_path / "k" / name).exists(), name
    again = _run(["keys", "--dir", "k"], cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr
