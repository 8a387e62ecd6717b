"""What pytest needs before any test module loads: the repository on the import path, the
test-only fault hooks, and fixtures. The shared helpers are in ``helpers.py``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# Lets Probe(crash=True) kill an actor: fault injection, for tests only (inherited by
# every actor process the tests start).
os.environ["RLGPT_TEST_HOOKS"] = "1"


@pytest.fixture
def python() -> str:
    return sys.executable
