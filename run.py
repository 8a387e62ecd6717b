#!/usr/bin/env python3
"""RL-GPT as an actor system, from a source checkout: the same as the ``rlgpt`` command
(``rlgpt/cli.py``, where every command is defined).

    python run.py --config diamond               run (a bare name is found in rlgpt/configs/)
    python run.py --help                         every command: run, tail, play, compare, ...
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rlgpt.cli import main  # noqa: E402  (after the path is set)

if __name__ == "__main__":
    sys.exit(main())
