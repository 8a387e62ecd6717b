"""Shared test helpers: run a real head (broker, supervisor, actor processes) in-process."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Lets Probe(crash=True) kill an actor: fault injection, for tests only (inherited by
# every actor process the tests start).
os.environ["RLGPT_TEST_HOOKS"] = "1"

from runtime.config import ActorSettings, RunSettings, RuntimeSettings, Settings  # noqa: E402
from runtime.head import Head, new_run_dir, run_head  # noqa: E402


def make_settings(tmp_path: Path, actors: dict[str, ActorSettings] | None = None, **runtime):
    fast = {"heartbeat_interval": 0.2, "heartbeat_timeout": 2.0, "shutdown_grace": 3.0}
    return Settings(
        run=RunSettings(name="test", runs_dir=str(tmp_path / "runs")),
        runtime=RuntimeSettings(**{**fast, **runtime}),
        actors=actors if actors is not None else {},
        source="<test>",
    )


def read_events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class HeadRun:
    def __init__(self, code: int, run_dir: Path, report: dict | None) -> None:
        self.code, self.run_dir, self.report = code, run_dir, report

    @property
    def events(self) -> list[dict]:
        return read_events(self.run_dir)

    def named(self, name: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == name]


def run_head_with(settings: Settings, driver: Callable[[Head], Awaitable[dict]]) -> HeadRun:
    run_id, run_dir = new_run_dir(settings)
    code = trio.run(run_head, settings, run_dir, run_id, driver)
    report_path = run_dir / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return HeadRun(code, run_dir, report)


@pytest.fixture
def python() -> str:
    return sys.executable
