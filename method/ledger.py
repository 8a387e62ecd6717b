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

Every line has an ``id``, stable across attempts of a run: ``KIND:JOB:SEED`` for a
rollout episode and ``train:JOB`` for a training job, ``JOB`` being the journal's key of
the job's request (``method.journal.job_key``). Lines are booked when a job's result is
first recorded, before the journal records it (a kill between the two redoes the job),
never when a resumed run replays it; a job redone after a resume — its journal record
lost to a kill, or its policy file gone — books the same ids, and :func:`append`
replaces those lines instead of adding new ones. So each episode is counted once, and a
resume of a finished run (which renders the video episode again) changes nothing.

Lines are written whole (:mod:`method.jsonl`): a line torn by a kill is left out when
read and cut off before the next append. A line that is not JSON or of the wrong shape
was not left by a kill: :func:`read` raises ValueError naming the file, the line and the
fix (an error, not a skip: the job that booked it is replayed from the journal, never
booked again, so a skipped line would quietly change the score).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from method import jsonl

LEDGER = "episodes.jsonl"


def crafter_score(rates: Mapping[str, float], achievements: Sequence[str]) -> float:
    """Crafter's score in %: exp(mean over ``achievements`` of ln(1 + rate in %)) − 1,
    ``rates`` being fractions in 0…1 (a missing achievement counts 0)."""
    if not achievements:
        raise ValueError("the score needs the game's achievement list")
    logs = [math.log(1.0 + 100.0 * float(rates.get(name, 0.0))) for name in achievements]
    return math.exp(sum(logs) / len(logs)) - 1.0


def rollout_lines(kind: str, result: Any, job: str) -> list[dict[str, Any]]:
    """One line per episode of a :class:`~messages.rollout.RolloutResult`; ``job`` is
    the journal's key of its request (the lines' ids)."""
    return [
        {
            "id": f"{kind}:{job}:{int(e.seed)}",
            "kind": kind,
            "seed": int(e.seed),
            "steps": int(e.steps),
            "achievements": sorted(set(e.achievements)),
        }
        for e in result.episodes
    ]


def training_line(result: Any, job: str) -> dict[str, Any]:
    """The aggregate line of a :class:`~messages.train.TrainResult`; ``job`` is the
    journal's key of its request (the line's id)."""
    return {
        "id": f"train:{job}",
        "kind": "train",
        "job": result.name,
        "episodes": int(result.episodes),
        "steps": int(result.primitive_steps + result.eval_primitive_steps),
        "achievement_episodes": dict(sorted(result.achievement_episodes.items())),
    }


def append(run_dir: Path | None, lines: Iterable[Mapping[str, Any]]) -> None:
    """Book ``lines`` in the run's ledger (nothing without a run directory): a line whose
    ``id`` is booked already replaces it, the others are appended."""
    if run_dir is None:
        return
    new = {line["id"]: dict(line) for line in lines}
    if not new:
        return
    path = Path(run_dir) / LEDGER
    booked = _booked_ids(path)
    if not booked.intersection(new):
        jsonl.append(path, new.values())
        _ids[path] = (path.stat().st_size, booked | set(new))
        return
    kept = []
    for _, line in _checked(path):
        kept.append(new.pop(line["id"]) if line.get("id") in new else line)
    jsonl.rewrite(path, [*kept, *new.values()])
    _ids.pop(path, None)


_ids: dict[Path, tuple[int, set[Any]]] = {}
"""Ledger file → (its size when last read or written here, the ids booked in it). An
append needs to know only whether an id is booked already; re-reading the whole file
for that made every append cost the length of the run (thousands of episodes)."""


def _booked_ids(path: Path) -> set[Any]:
    """The ids booked in ``path``, re-read only when the file changed size since this
    process last read or wrote it (another writer, a torn tail cut)."""
    size = path.stat().st_size if path.exists() else 0
    cached = _ids.get(path)
    if cached is None or cached[0] != size:
        cached = (size, {line.get("id") for _, line in _checked(path)})
        _ids[path] = cached
    return cached[1]


def read(run_dir: Path) -> list[dict[str, Any]]:
    """The run's ledger lines, each episode once (none without a ledger): a torn last
    line is left out (logged); a line that is not JSON or of the wrong shape raises
    ValueError naming the file and line; of lines with one ``id`` the last is kept
    (``append`` writes none such)."""
    by_id: dict[Any, dict[str, Any]] = {}
    for number, line in _checked(Path(run_dir) / LEDGER):
        by_id[line.get("id", ("line", number))] = line  # a line from before ids: its own
    return list(by_id.values())


FIX = (
    "Runs write this file whole, so it was changed by hand or damaged: restore the line, "
    "or delete it to leave its episodes out of the score"
)


def _checked(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        records = jsonl.read(path, strict=True)
    except ValueError as exc:  # names the file and line
        raise ValueError(f"{exc}. {FIX}") from None
    for number, line in records:
        problem = line_problem(line)
        if problem:
            raise ValueError(f"{path}:{number}: {problem}. {FIX}")
    return records


def line_problem(line: Any) -> str:
    """Why ``line`` is not a ledger line ('' when it is): an object with ``kind`` and
    ``steps``, and either a training aggregate (``episodes``, ``achievement_episodes``)
    or one episode (``seed``, ``achievements``); ``id`` a string where present."""

    def count(value: Any) -> bool:
        return type(value) is int and value >= 0

    if not isinstance(line, dict):
        return f"a {type(line).__name__}, not an object"
    if not isinstance(line.get("kind"), str):
        return "'kind' must be a string"
    if "id" in line and not isinstance(line["id"], str):
        return "'id' must be a string"
    if not count(line.get("steps")):
        return f"'steps' must be a count, not {line.get('steps')!r}"
    if "achievement_episodes" in line:
        counts = line["achievement_episodes"]
        if not count(line.get("episodes")):
            return f"'episodes' must be a count, not {line.get('episodes')!r}"
        if not isinstance(counts, dict) or not all(count(v) for v in counts.values()):
            return "'achievement_episodes' must map achievement names to counts"
        return ""
    if type(line.get("seed")) is not int:
        return f"'seed' must be an integer, not {line.get('seed')!r}"
    achieved = line.get("achievements")
    if not isinstance(achieved, list) or not all(isinstance(a, str) for a in achieved):
        return "'achievements' must be a list of names"
    return ""


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
