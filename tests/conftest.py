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


INTEGRATION_LIST = Path(__file__).resolve().parent / "integration_tests.txt"
"""The default suite's long tests (``file::function``), marked ``integration``."""


def integration_tests() -> set[str]:
    lines = INTEGRATION_LIST.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    listed = integration_tests()
    for item in items:
        if item.nodeid.split("[")[0] in listed:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session", autouse=True)
def sb3_logs_in_a_test_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A PPO trained without a logger of its own makes an (empty) ``SB3-<time>`` folder in
    the system's temp dir unless ``SB3_LOGDIR`` names one: the tests' go under pytest's."""
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3"))


@pytest.fixture
def python() -> str:
    return sys.executable
