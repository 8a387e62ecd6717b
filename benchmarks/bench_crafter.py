#!/usr/bin/env python3
"""The Crafter benchmark's script command, kept so BENCHMARKS.md's and the README's
commands still run: ``python benchmarks/bench_crafter.py [--quick] [--budget N] [--final N]
...`` is ``python -m benchmarks.crafter_bench`` with the same flags (the code lives in
``benchmarks/crafter_bench/``)."""

import sys
from pathlib import Path

# Run as a script, Python puts benchmarks/ on the path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.crafter_bench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(invoked_as=("python", "benchmarks/bench_crafter.py")))
