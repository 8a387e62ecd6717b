"""The episode ledger: every episode a run stepped, for Crafter's scoreboard protocol.

Crafter's score (Hafner, 2021) is computed from the success rate of each of its 22
achievements over the episodes an agent played: :func:`crafter_score`. The scoreboard
protocol counts every episode run within the env-step budget — for this system that is
the code and policy evaluations, the PPO training episodes and the final evaluation.
``runs/<id>/episodes.jsonl`` holds them, one JSON object per line:

- a rollout episode: ``{"kind", "seed", "steps", "achievements"}`` (``achievements``:
  the names unlocked in that episode), kind ``code`` (a version's evaluation),
  ``final`` (the final evaluation), ``video`` (the episode rendered for the report) or
  ``play`` (the final policy playing on until the budget is spent,
  ``[task] play_to_budget``);
- a training job, aggregated: ``{"kind": "train", "job", "episodes", "steps",
  "achievement_episodes"}`` (achievement → training episodes that unlocked it; the
  steps include the job's held-out evaluation, whose episodes are not itemised).

Lines are written when a job's result is first recorded, never when a resumed run
replays it, so each episode is counted once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

LEDGER = "episodes.jsonl"


def crafter_score(rates: Mapping[str, float], achievements: Sequence[str]) -> float:
    """Crafter's score in %: exp(mean over ``achievements`` of ln(1 + rate in %)) − 1,
    ``rates`` being fractions in 0…1 (a missing achievement counts 0)."""
    if not achievements:
        raise ValueError("the score needs the game's achievement list")
    logs = [math.log(1.0 + 100.0 * float(rates.get(name, 0.0))) for name in achievements]
    return math.exp(sum(logs) / len(logs)) - 1.0


def rollout_lines(kind: str, result: Any) -> list[dict[str, Any]]:
    """One line per episode of a :class:`~messages.rollout.RolloutResult`."""
    return [
        {
            "kind": kind,
            "seed": int(e.seed),
            "steps": int(e.steps),
            "achievements": sorted(set(e.achievements)),
        }
        for e in result.episodes
    ]


def training_line(result: Any) -> dict[str, Any]:
    """The aggregate line of a :class:`~messages.train.TrainResult`."""
    return {
        "kind": "train",
        "job": result.name,
        "episodes": int(result.episodes),
        "steps": int(result.primitive_steps + result.eval_primitive_steps),
        "achievement_episodes": dict(sorted(result.achievement_episodes.items())),
    }


def append(run_dir: Path | None, lines: Iterable[Mapping[str, Any]]) -> None:
    """Add ``lines`` to the run's ledger (nothing without a run directory)."""
    if run_dir is None:
        return
    with open(Path(run_dir) / LEDGER, "a") as f:
        for line in lines:
            f.write(json.dumps(line, sort_keys=True) + "\n")


def read(run_dir: Path) -> list[dict[str, Any]]:
    """The run's ledger lines (none without a ledger); a line that is not JSON raises
    ValueError naming the file and line."""
    path = Path(run_dir) / LEDGER
    if not path.is_file():
        return []
    lines = []
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if not text.strip():
            continue
        try:
            lines.append(json.loads(text))
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc})") from None
    return lines


def tally(lines: Iterable[Mapping[str, Any]], kinds: Iterable[str] | None = None) -> dict:
    """Episodes, env steps and per-achievement episode counts over ``lines`` (of the
    given ``kinds``, default all): ``{"episodes", "steps", "counts"}``. A line with
    ``achievement_episodes`` is a training job's aggregate; any other is one episode."""
    wanted = set(kinds) if kinds is not None else None
    episodes, steps, counts = 0, 0, {}
    for line in lines:
        if wanted is not None and line["kind"] not in wanted:
            continue
        steps += int(line.get("steps", 0))
        if "achievement_episodes" in line:
            episodes += int(line.get("episodes", 0))
            for name, n in line.get("achievement_episodes", {}).items():
                counts[name] = counts.get(name, 0) + int(n)
        else:
            episodes += 1
            for name in set(line.get("achievements", ())):
                counts[name] = counts.get(name, 0) + 1
    return {"episodes": episodes, "steps": steps, "counts": counts}


def rates(tallied: Mapping[str, Any]) -> dict[str, float]:
    """Achievement → success rate (0…1) from a :func:`tally`."""
    n = max(1, int(tallied["episodes"]))
    return {name: count / n for name, count in sorted(tallied["counts"].items())}
