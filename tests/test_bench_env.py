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
