"""Per-episode achievement statistics in the format of Crafter's own ``stats.jsonl``.

``crafter.Recorder`` appends one JSON object per finished episode::

    {"length": 171, "reward": 0.1, "achievement_collect_coal": 0, ...}

``length`` counts steps, ``reward`` is the episode's summed reward rounded to one decimal,
and ``achievement_<name>`` is how many times that achievement happened in the episode
(a count, not a flag). Crafter's scoring scripts read this file, so we keep it exact.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any


def episode_stats(
    length: int, reward: float, counts: Mapping[str, int], achievement_names: Sequence[str]
) -> dict[str, Any]:
    """One stats line as a dict, keys in Crafter's order."""
    stats: dict[str, Any] = {"length": int(length), "reward": round(float(reward), 1)}
    for name in achievement_names:
        stats[f"achievement_{name}"] = int(counts.get(name, 0))
    return stats


class StatsWriter:
    """Accumulates one episode from ``World.step`` results and appends its stats line.

    Usage::

        writer = StatsWriter(run_dir / "stats.jsonl", world.achievement_names)
        obs = world.reset(seed)
        writer.begin()
        while not done:
            obs, reward, done, info = world.step(action)
            writer.record(reward, info, done)   # writes the line when done
    """

    def __init__(self, path: str | pathlib.Path, achievement_names: Sequence[str]) -> None:
        self._path = pathlib.Path(path)
        self._names = tuple(achievement_names)
        self._length = 0
        self._reward = 0.0
        self._counts: dict[str, int] = {}

    @property
    def path(self) -> pathlib.Path:
        return self._path

    def begin(self) -> None:
        """Forget the previous episode's totals (call after ``World.reset``)."""
        self._length = 0
        self._reward = 0.0
        self._counts = {}

    def record(self, reward: float, info: Mapping[str, Any], done: bool) -> dict | None:
        """Add one step; when ``done``, append the episode's line and return it."""
        self._length += 1
        self._reward += reward
        for name in info.get("achievements", ()):
            self._counts[name] = self._counts.get(name, 0) + 1
        if not done:
            return None
        return self.write(self._length, self._reward, self._counts)

    def write(self, length: int, reward: float, counts: Mapping[str, int]) -> dict:
        """Append one finished episode's line (for callers that keep their own totals)."""
        stats = episode_stats(length, reward, counts, self._names)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        with self._path.open("a") as file:
            file.write(json.dumps(stats) + "\n")
        return stats
