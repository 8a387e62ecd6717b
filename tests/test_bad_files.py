"""Run files a user, a disk or a crash left in a state the run must refuse or read past:
an events.jsonl that is a folder or a link to a device, bytes that are not UTF-8."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from method.tboard import _iterations
from runtime.config import ConfigError
from runtime.head import check_run_dir
from runtime.tail import follow


def _finished(run_dir: Path) -> None:
    with (run_dir / "events.jsonl").open("wb") as f:
        f.write(json.dumps({"event": "iteration_finished", "iteration": 0, "env_steps": 300,
                            "ts": "2026-01-01T00:00:00Z"}).encode() + b"\n")  # fmt: skip
        f.write(b"cut by a kill \xff\xfe\x80 and more\n")
        f.write(json.dumps({"event": "iteration_finished", "iteration": 1,
                            "env_steps": 600}).encode() + b"\n")  # fmt: skip


def test_bytes_that_are_not_utf8_spoil_their_line_not_the_resume_or_the_tail(
    tmp_path: Path, capsys
) -> None:
    _finished(tmp_path)
    found = _iterations(tmp_path)
    assert found[0]["env_steps"] == 300 and found[1]["env_steps"] == 600
    assert follow(str(tmp_path), "", keep_following=False) == 0
    out = capsys.readouterr().out
    assert "(unreadable line) cut by a kill" in out


@pytest.mark.parametrize("kind", ["folder", "device"])
def test_an_events_file_that_is_not_a_plain_file_is_refused_before_the_run(
    tmp_path: Path, kind: str
) -> None:
    target = tmp_path / "events.jsonl"
    if kind == "folder":
        target.mkdir()
    else:
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full here")
        target.symlink_to("/dev/full")
    with pytest.raises(ConfigError) as caught:
        check_run_dir(tmp_path, "run.toml", "run.runs_dir")
    message = str(caught.value)
    assert str(target) in message and "a plain file" in message
    assert ("a folder" if kind == "folder" else "a device (a link to /dev/full)") in message
    (target.rmdir() if kind == "folder" else target.unlink())
    check_run_dir(tmp_path, "run.toml", "run.runs_dir")  # a plain (or no) file passes
