"""The episode ledger: every episode a run stepped, for Crafter's scoreboard protocol.

Crafter's score (Hafner, 2021) is computed from the success rate of each of its 22
achievements over the episodes an agent played: :func:`crafter_score`. The scoreboard
protocol counts every episode run within the env-step budget — for this system that is
the code and policy evaluations, the PPO training episodes and the final evaluation.
``runs/<id>/episodes.jsonl`` holds them, one JSON object per line:

- a rollout episode: ``{"kind", "seed", "steps", "achievements", "counts", "reward"}``
  (``achievements``: the names unlocked in that episode; ``counts``: how many times
  each happened; ``reward``: the world's own), kind ``code`` (a version's evaluation),
  ``final`` (the final evaluation), ``video`` (the episode rendered for the report) or
  ``play`` (the final policy playing on until the budget is spent,
  ``[task] play_to_budget``); an evaluation from a start (``RolloutRequest.start_at``)
  books the setup with the episode that made the start, and an episode that restored
  it only what it took and unlocked after the start (none when it took no step);
- a training job, aggregated: ``{"kind": "train", "job", "episodes", "steps",
  "achievement_episodes", "split", "episode_log"}``: ``steps`` is every world step the
  job's worlds took, ``split`` divides them by kind — ``train`` (PPO's own steps),
  ``setup`` (setup code, once per world when its start is made — restored resets take
  no setup step —, failed attempts included) and ``held_out`` (the
  learner's held-out evaluation) — and ``episode_log`` itemises every world episode
  (training and held-out alike, setup included) as ``[length, reward, counts]``;
  ``episodes`` and ``achievement_episodes`` (achievement → episodes that unlocked it)
  are counted over that log, so what setup unlocked counts too.

Every world step a run takes is booked here, whoever took it, and only once: the
lengths of the itemised episodes (:func:`episodes`) add up to the booked steps, and
:func:`write_stats` writes them as the run's ``rollouts/stats.jsonl`` in Crafter's own
format. :func:`scoreboard` is the one place the run's Crafter score is computed.

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

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from method import jsonl
from worlds.stats import episode_stats

LEDGER = "episodes.jsonl"
STATS = "rollouts/stats.jsonl"
"""Where :func:`write_stats` writes the ledger's episodes in Crafter's format."""
SPLIT_KINDS = ("train", "setup", "held_out")
"""The kinds a training job's steps are split into."""


def crafter_score(rates: Mapping[str, float], achievements: Sequence[str]) -> float:
    """Crafter's score in %: exp(mean over ``achievements`` of ln(1 + rate in %)) − 1,
    ``rates`` being fractions in 0…1 (a missing achievement counts 0)."""
    if not achievements:
        raise ValueError("the score needs the game's achievement list")
    logs = [math.log(1.0 + 100.0 * float(rates.get(name, 0.0))) for name in achievements]
    return math.exp(sum(logs) / len(logs)) - 1.0


def success_rates(
    counts: Iterable[Mapping[str, int]], achievements: Sequence[str]
) -> dict[str, float]:
    """Achievement → the fraction of episodes in which it happened at least once, over
    episodes given as achievement counts (Crafter's success rate, as a fraction)."""
    episodes = list(counts)
    n = len(episodes)
    return {
        name: (sum(1 for c in episodes if c.get(name, 0) >= 1) / n if n else 0.0)
        for name in achievements
    }


def rollout_lines(kind: str, result: Any, job: str) -> list[dict[str, Any]]:
    """One line per world episode of a :class:`~messages.rollout.RolloutResult`; ``job``
    is the journal's key of its request (the lines' ids). An episode from a restored
    start books only its own steps and what happened after the start (the episode that
    made the start booked the setup), and one that took no step has no line
    (:attr:`~messages.rollout.EpisodeReport.played`), as training resets do
    (:meth:`rl.rl_env.SubtaskEnv.take_world_episodes`)."""
    lines = []
    for e in result.episodes:
        if not e.played:  # a restored start that took no step: no world episode
            continue
        # An episode from a start (``setup_steps``) that made it: the world episode is
        # the setup and the episode together, booked once here; a restored start took
        # no setup step and unlocked nothing before the episode's own.
        counts: dict[str, int] = {}
        for name in [*e.setup_achievements, *e.achievements]:
            counts[name] = counts.get(name, 0) + 1
        lines.append(
            {
                "id": f"{kind}:{job}:{int(e.seed)}",
                "kind": kind,
                "seed": int(e.seed),
                "steps": int(e.steps) + int(e.setup_steps),
                "achievements": sorted(counts),
                "counts": dict(sorted(counts.items())),
                "reward": round(float(e.reward) + float(e.setup_reward), 6),
            }
        )
    return lines


def training_line(result: Any, job: str) -> dict[str, Any]:
    """The aggregate line of a :class:`~messages.train.TrainResult`; ``job`` is the
    journal's key of its request (the line's id)."""
    split = {
        "train": int(result.primitive_steps),
        "setup": int(result.setup_steps),
        "held_out": int(result.eval_primitive_steps),
    }
    return {
        "id": f"train:{job}",
        "kind": "train",
        "job": result.name,
        "episodes": int(result.episodes),
        "steps": sum(split.values()),
        "split": split,
        "achievement_episodes": dict(sorted(result.achievement_episodes.items())),
        "episode_log": [
            [int(e.length), round(float(e.reward), 6), dict(sorted(e.counts.items()))]
            for e in result.world_episodes
        ],
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
    if "split" in line:
        split = line["split"]
        if not isinstance(split, dict) or not all(count(v) for v in split.values()):
            return "'split' must map kinds to step counts"
        if sum(split.values()) != line["steps"]:
            return f"'split' adds up to {sum(split.values())}, not 'steps' {line['steps']}"
    if "episode_log" in line:
        log = line["episode_log"]
        if not isinstance(log, list) or not all(
            isinstance(e, list) and len(e) == 3 and count(e[0]) and isinstance(e[2], dict)
            for e in log
        ):
            return "'episode_log' must list [length, reward, counts] per episode"
    if "counts" in line and not (
        isinstance(line["counts"], dict) and all(count(v) for v in line["counts"].values())
    ):
        return "'counts' must map achievement names to counts"
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


def steps_by_kind(lines: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Booked world steps by kind; a training job's steps by its ``split``."""
    by_kind: dict[str, int] = {}
    for line in lines:
        split = line.get("split") or {line["kind"]: int(line.get("steps", 0))}
        for kind, steps in split.items():
            by_kind[kind] = by_kind.get(kind, 0) + int(steps)
    return dict(sorted(by_kind.items()))


def episodes(lines: Iterable[Mapping[str, Any]]) -> Iterator[tuple[int, float, dict[str, int]]]:
    """Every episode the lines book, in their order, as (length, reward, achievement
    counts): a rollout line is one episode, a training line its ``episode_log`` (a line
    from before the log: its aggregate, spread over ``episodes`` pseudo-episodes that
    give the same success rates, its steps on the first)."""
    for line in lines:
        if "achievement_episodes" not in line:
            counts = line.get("counts") or dict.fromkeys(line.get("achievements", ()), 1)
            yield int(line["steps"]), float(line.get("reward", 0.0)), dict(counts)
        elif "episode_log" in line:
            for length, reward, counts in line["episode_log"]:
                yield int(length), float(reward), dict(counts)
        else:
            n = int(line.get("episodes", 0))
            got = line.get("achievement_episodes", {})
            for k in range(n):
                counts = {name: 1 for name, m in got.items() if k < int(m)}
                yield (int(line["steps"]) if k == 0 else 0), 0.0, counts


def _within(
    lines: Iterable[Mapping[str, Any]], budget: int | None
) -> Iterator[tuple[str, int, dict[str, int]]]:
    """The scoreboard's episodes as (kind of the line that booked it, length, achievement
    counts): booking order, up to the env-step ``budget`` (an episode that would pass it
    and every one after are left out; None: all)."""
    steps = 0
    for line in lines:
        kind = str(line.get("kind", ""))
        for length, _, counts in episodes([line]):
            if budget is not None and steps + length > budget:
                return
            steps += length
            yield kind, length, counts


def scoreboard(
    lines: Iterable[Mapping[str, Any]], achievements: Sequence[str], budget: int | None = None
) -> dict[str, Any]:
    """The run's Crafter score, the scoreboard's way (Crafter's ``read_metrics``): the
    episodes in booking order up to the env-step ``budget`` (an episode that would pass
    it and every one after are left out; None: all), each achievement's success rate
    over them, and :func:`crafter_score` of those rates. ``{"episodes", "steps",
    "rates", "score"}``."""
    kept, steps = [], 0
    for _, length, counts in _within(lines, budget):
        steps += length
        kept.append(counts)
    rates = success_rates(kept, achievements)
    score = crafter_score(rates, achievements) if kept else 0.0
    return {"episodes": len(kept), "steps": steps, "rates": rates, "score": score}


def scoreboard_by_kind(
    lines: Iterable[Mapping[str, Any]], achievements: Sequence[str], budget: int | None = None
) -> dict[str, dict[str, Any]]:
    """The :func:`scoreboard`'s episodes (the same ones: booking order, up to ``budget``)
    grouped by the ``kind`` of the line that booked them, each group with its own episodes,
    steps and Crafter score: where the scoreboard's figure comes from (a run's code
    evaluations and training episodes end early, its final policy plays whole episodes).
    ``{kind: {"episodes", "steps", "score"}}`` in order of first appearance."""
    groups: dict[str, list[Mapping[str, int]]] = {}
    steps_of: dict[str, int] = {}
    for kind, length, counts in _within(lines, budget):
        groups.setdefault(kind, []).append(counts)
        steps_of[kind] = steps_of.get(kind, 0) + length
    return {
        kind: {
            "episodes": len(kept),
            "steps": steps_of[kind],
            "score": crafter_score(success_rates(kept, achievements), achievements),
        }
        for kind, kept in groups.items()
    }


def write_stats(run_dir: Path, achievements: Sequence[str]) -> Path:
    """Write every booked episode to ``run_dir``'s ``rollouts/stats.jsonl`` in Crafter's
    ``Recorder`` format, in booking order (replacing what workers wrote as they went:
    the ledger has each episode once, redone jobs and resumes included)."""

    path = Path(run_dir) / STATS
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    with tmp.open("w") as file:
        for length, reward, counts in episodes(read(run_dir)):
            file.write(json.dumps(episode_stats(length, reward, counts, achievements)) + "\n")
    os.replace(tmp, path)
    return path


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
