"""``python -m benchmarks.crafter_bench [--quick] [--budget N] [--final N] ...``."""

import sys

from .cli import main

sys.exit(main())
