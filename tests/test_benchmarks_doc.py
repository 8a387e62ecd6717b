"""BENCHMARKS.md is generated: it is what ``benchmarks/gen_benchmarks.py`` writes from
``benchmarks/results/``, starts with the current figures, and names no session by number
and no absolute path of a machine. Fast: reads the raw result files, plays no episode."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "BENCHMARKS.md"


def test_the_page_is_what_the_generator_writes() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gen_benchmarks.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_page_starts_with_the_current_figures() -> None:
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# ")
    sections = [line for line in lines if line.startswith("## ")]
    assert sections[0] == "## Current figures of the shipped configs"
    # Nothing but blank lines between the title and that section.
    first = lines.index(sections[0])
    assert not any(line.strip() for line in lines[1:first])
    assert "## Survival arbiter (learned vs coded)" in sections
    assert sections[-1] == "## History"


def test_the_page_names_no_session_and_no_machine_path() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert not re.search(r"[Ss]ession \d", text)
    assert not re.search(r"(?<![\w.~-])/(?:work|tmp|root|home)/", text)
