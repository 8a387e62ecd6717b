"""Shared test helpers: run a real head (broker, supervisor, actor processes) in-process,
read what it logged, and wait for a condition with a deadline instead of a bare sleep.

Test modules import these by name (``from helpers import ...``); ``conftest.py`` keeps
only what pytest itself needs (the import path, the test hooks, fixtures)."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest
import trio

from runtime.config import ActorSettings, RunSettings, RuntimeSettings, Settings
from runtime.head import Head, new_run_dir, run_head

if TYPE_CHECKING:
    from worlds.crafter_world import CrafterWorld

ROOT = Path(__file__).resolve().parent.parent
"""The repository root (``run.py``, ``rlgpt/configs/``)."""

POLL_S = 0.05
"""How often a wait re-checks its condition: short next to the seconds a process takes to
start or a job to run, long enough not to busy the two cores the tests share."""

T = TypeVar("T")


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


async def wait_until(check: Callable[[], T], *, timeout: float, what: str) -> T:
    """Poll ``check`` until it returns something true and return that; fail the test,
    naming ``what`` was awaited, when ``timeout`` seconds pass first."""
    try:
        with trio.fail_after(timeout):
            while not (found := check()):
                await trio.sleep(POLL_S)
    except trio.TooSlowError:
        raise AssertionError(f"{what}: not within {timeout} s") from None
    return found


def wait_until_blocking(check: Callable[[], T], *, timeout: float, what: str) -> T:
    """:func:`wait_until` for a test outside trio (one that drives a head subprocess)."""
    return trio.run(lambda: wait_until(check, timeout=timeout, what=what))


def free_port() -> int:
    """A tcp port on 127.0.0.1 that nothing listens on right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists and is not a zombie (dead, not yet reaped
    by its parent)."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False


def wood_policy(path: Path) -> Path:
    """A real PPO policy over ``collect_wood_with_coded``'s spaces after 64 decisions of
    training (seconds), saved at ``path``: what a learned stage's rollout loads."""
    from actors.learner import make_ppo
    from messages.train import PPOSettings
    from rl.configs import collect_wood_with_coded
    from rl.rl_env import make_vec_env

    vec = make_vec_env(collect_wood_with_coded(), 1, 0, world_pool=range(2))
    try:
        model = make_ppo(PPOSettings(n_steps=64, batch_size=32, n_epochs=1), vec, seed=0,
                         device="cpu")  # fmt: skip
        model.learn(64)
        model.save(path)
    finally:
        vec.close()
    return path


# What every run of the tests shares: quick heartbeats, two environment actors and a learner.
ACTORS = """
[runtime]
heartbeat_interval = 0.5
heartbeat_timeout = 10.0

[actors.environment]
count = 2

[actors.learner]
count = 1
"""


def missing_here(problem: str) -> None:
    """Skip a check this machine cannot run, saying why; under ``CI=true`` fail instead:
    ``.ci/run``'s machine has everything (the extras, the models, namespaces), so there a
    missing piece is a broken install, not a reason to skip."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must be able to run this: {problem}")
    pytest.skip(problem)


def need_minetest() -> None:
    """Skip (under CI: fail) where Minetest is not installed, naming the install command."""
    from worlds.minetest import minetest_missing

    problem = minetest_missing()
    if problem:
        missing_here(problem)


def edited_world(
    seed: int,
    walls: dict,
    creatures: dict,
    inventory: dict,
    radius: int = 4,
    step: int = 0,
    ground: str = "grass",
    world: CrafterWorld | None = None,
) -> CrafterWorld:
    """A real Crafter world (reset by ``seed``) edited around the player: ``walls`` and
    ``creatures`` map offsets to a material / a creature class name, ``inventory`` sets
    items and vitals. The square of ``radius`` around the player (64: the whole map) is
    cleared to ``ground`` first; the clock is set to ``step`` (Crafter's daylight follows it).
    ``world``: edit this one (already reset), else a new one."""
    import crafter.objects

    from worlds.crafter_world import CrafterWorld

    if world is None:
        world = CrafterWorld()
        world.reset(seed)
    env = world._env
    env._step = step
    env._update_time()
    player = env._player
    px, py = int(player.pos[0]), int(player.pos[1])
    width, height = env._world.area
    for dx in range(max(-radius, -px), min(radius, width - 1 - px) + 1):
        for dy in range(max(-radius, -py), min(radius, height - 1 - py) + 1):
            pos = (px + dx, py + dy)
            obj = env._world[pos][1]
            if obj is not None and obj is not player:
                env._world.remove(obj)
            if (dx, dy) != (0, 0):
                env._world[pos] = walls.get((dx, dy), ground)
    for (dx, dy), name in creatures.items():
        cls = getattr(crafter.objects, name)
        args = (player,) if name in ("Zombie", "Skeleton") else ()
        env._world.add(cls(env._world, (px + dx, py + dy), *args))
    player.inventory.update(inventory)
    return world
