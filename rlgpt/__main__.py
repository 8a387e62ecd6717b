"""``python -m rlgpt ...``: the same as the ``rlgpt`` command and ``python run.py``. The
head starts its actor processes this way (``python -m rlgpt actor ROLE ...``)."""

import sys

from rlgpt.cli import main

if __name__ == "__main__":
    sys.exit(main())
