"""benchmarks/bench_env.py: (a), (d1) and (d2) side by side in one head with two actors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# In a subprocess: importing the benchmark turns the world cache off for its process.
SCRIPT = """
import json, sys
sys.path.insert(0, "benchmarks")
import bench_env
print(json.dumps(bench_env.side_by_side([100, 101, 102], 30, 4)))
"""


def test_the_bare_loop_and_one_and_two_actors_play_every_step_of_every_round() -> None:
    """Every round of the three paths plays all three worlds to the 30-step cap (a random
    player cannot die that soon), (d1) on one actor by name (the benchmark stops if
    another answers), (d2) over both, (a) in the head's process."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rounds = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(rounds) == [
        "a  bare CrafterWorld loop",
        "d1 1 environment actor",
        "d2 2 environment actors",
    ]
    for path, runs in rounds.items():
        assert [steps for steps, _ in runs] == [90] * 4, path
        assert all(seconds > 0 for _, seconds in runs)


def test_bench_scaling_times_bare_loops_and_actors_at_one_worker(tmp_path: Path) -> None:
    """benchmarks/bench_scaling.py end to end at one worker: its actor path (bench_env's
    ``through_actors``) plays every step of its worlds (3 worlds to a 30-step cap) and
    the bare loop runs; the figures land in its JSON."""
    out = tmp_path / "scaling.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/bench_scaling.py", "--workers", "1", "--seconds", "1",
         "--episodes", "3", "--cap", "30", "--rounds", "1", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["workers"] == 1 and row["actor_steps"] == 90
    assert row["bare"] > 0 and row["actors"] > 0
    assert "| 1 |" in done.stdout


def test_every_benchmark_script_imports_and_has_a_main() -> None:
    """Each benchmarks/*.py imports (its own imports of other benchmarks included: a
    helper renamed in one must not break another) and defines ``main``."""
    check = (
        "import importlib, sys, pathlib\n"
        "sys.path.insert(0, 'benchmarks')\n"
        "for path in sorted(pathlib.Path('benchmarks').glob('*.py')):\n"
        "    module = importlib.import_module(path.stem)\n"
        "    assert callable(getattr(module, 'main', None)), path\n"
        "    print('ok', path.name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    names = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
    assert done.stdout.split() == [w for n in names for w in ("ok", n)]
