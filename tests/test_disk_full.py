"""A full disk ends a run cleanly: ``run_failed`` with reason ``disk_full`` in the events
file and on the console, exit status 1, no traceback on the console, and the run resumes
to the end once there is room again.

The disk is real: a small tmpfs mounted in a private mount namespace (``unshare``), so
nothing outside the test sees it. Where the machine refuses namespaces the test is skipped
and says so."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, missing_here
from test_method import SMALL

# Small enough that the run fills it during its first training job, large enough for the
# run to start (config, journal, the head's reserve).
FULL_SIZE = "600k"
ROOMY_SIZE = "64m"

SCRIPT = """
set -u
mount -t tmpfs -o size={small} tmpfs "$DISK" || exit 90
cd "$WORK"
{python} {run} --config "$WORK/cfg.toml" >"$WORK/first.out" 2>"$WORK/first.err"
echo $? >"$WORK/first.rc"
cp -r "$DISK/runs" "$WORK/after-failure"
mount -o remount,size={roomy} "$DISK" || exit 91
{python} {run} --resume "$DISK/runs/$(ls "$DISK/runs")" >"$WORK/second.out" 2>"$WORK/second.err"
echo $? >"$WORK/second.rc"
cp -r "$DISK/runs" "$WORK/after-resume"
"""


def _namespace_cmd() -> list[str] | None:
    """How this machine lets a test mount a tmpfs of its own, or None."""
    if shutil.which("unshare") is None:
        return None
    for cmd in (["unshare", "-m"], ["unshare", "-rm"]):
        probe = subprocess.run(
            [*cmd, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null || exit 1"],
            capture_output=True,
        )
        if probe.returncode == 0:
            return cmd
    return None


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


@pytest.mark.slow  # two real runs (~50 s)
def test_a_full_disk_fails_the_run_cleanly_and_it_resumes(tmp_path: Path) -> None:
    ns = _namespace_cmd()
    if ns is None:
        missing_here("this machine refuses a private mount namespace (unshare): no tmpfs disk")
    disk = tmp_path / "disk"
    disk.mkdir()
    config = SMALL.replace("iterations = 2", "iterations = 1").replace(
        'name = "small"', f'name = "small"\nruns_dir = "{disk}/runs"'
    )
    (tmp_path / "cfg.toml").write_text(config)
    script = SCRIPT.format(
        small=FULL_SIZE, roomy=ROOMY_SIZE, python=sys.executable, run=ROOT / "run.py"
    )
    done = subprocess.run(
        [*ns, "sh", "-c", script],
        env={**__import__("os").environ, "DISK": str(disk), "WORK": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr

    first_err = (tmp_path / "first.err").read_text()
    assert (tmp_path / "first.rc").read_text().strip() == "1", first_err[-3000:]
    assert "Traceback" not in first_err, first_err[-3000:]
    assert "run_failed" in first_err and "reason=disk_full" in first_err
    # the closing line names the way on
    assert "--resume" in (tmp_path / "first.out").read_text() + first_err
    [failed] = list((tmp_path / "after-failure").iterdir())
    events = _events(failed)  # every line whole: the reserve made room for the last ones
    [stop] = [e for e in events if e["event"] == "run_failed"]
    assert stop["reason"] == "disk_full" and "no space left" in stop["detail"]
    assert not (failed / "report.json").exists()

    second_err = (tmp_path / "second.err").read_text()
    assert (tmp_path / "second.rc").read_text().strip() == "0", second_err[-3000:]
    [resumed] = list((tmp_path / "after-resume").iterdir())
    report = json.loads((resumed / "report.json").read_text())
    assert report["env_steps"] <= 8000
    assert not (resumed / ".space-reserve").exists()
    assert any(e["event"] == "run_resumed" for e in _events(resumed))
