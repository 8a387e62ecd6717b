"""A run's record, checked against its contract: ``episodes.jsonl`` (read by
``method.ledger``) and ``summary.json``, turned into a variant result."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from method import ledger

from .protocol import ACHIEVEMENTS, percent, summarize

EPISODE_KINDS = ("code", "train", "final", "video", "play")
"""Kinds of ledger lines (``method/ledger.py``); all count for the scoreboard, ``final``
lines alone make the final-agent figure. (A training line's steps are split further into
train, setup and held_out.)"""

SUMMARY_KEYS = ("env_steps", "wall_s", "final_success", "target")
"""What a run's ``summary.json`` must hold for a variant result."""


class LedgerError(ValueError):
    """A run's episodes.jsonl or summary.json does not follow the contract."""


def _line_problems(line: Any) -> list[str]:
    if not isinstance(line, dict):
        return ["not a JSON object"]
    problems = []
    if line.get("kind") not in EPISODE_KINDS:
        problems.append(f"kind {line.get('kind')!r} is not one of {EPISODE_KINDS}")
    if type(line.get("steps")) is not int:
        problems.append(f"steps must be an integer, not {line.get('steps')!r}")
    if line.get("kind") == "train" and "achievement_episodes" in line:
        counts = line["achievement_episodes"]
        if type(line.get("episodes")) is not int:
            problems.append(f"episodes must be an integer, not {line.get('episodes')!r}")
        if not isinstance(counts, dict) or not all(type(v) is int for v in counts.values()):
            problems.append("achievement_episodes must map names to integers")
        return problems
    if type(line.get("seed")) is not int:
        problems.append(f"seed must be an integer, not {line.get('seed')!r}")
    achieved = line.get("achievements")
    if not isinstance(achieved, list) or not all(isinstance(a, str) for a in achieved):
        problems.append("achievements must be a list of names")
    return problems


def read_ledger(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A run's ``episodes.jsonl`` and ``summary.json`` (env_steps, wall_s, final_success,
    target). Ledger lines: one per episode (kind, seed, steps, achievements), or one per
    training job (kind "train", episodes, steps, achievement_episodes)."""
    run_dir = Path(run_dir)
    path = run_dir / ledger.LEDGER
    if not path.is_file():
        raise LedgerError(f"{path}: missing (the run must write one line per episode)")
    try:
        lines = ledger.read(run_dir)
    except ValueError as exc:  # a line that is not JSON, named by ledger.read
        raise LedgerError(str(exc)) from None
    # ledger.append writes no blank lines, so the n-th line read is line n of the file.
    for number, line in enumerate(lines, 1):
        problems = _line_problems(line)
        if problems:
            raise LedgerError(f"{path}:{number}: " + "; ".join(problems))
    spath = run_dir / "summary.json"
    if not spath.is_file():
        raise LedgerError(f"{spath}: missing")
    try:
        summary = json.loads(spath.read_text())
    except ValueError as exc:
        raise LedgerError(f"{spath}: not JSON ({exc})") from None
    missing = [k for k in SUMMARY_KEYS if k not in summary]
    if missing:
        raise LedgerError(f"{spath}: missing keys {missing}")
    return lines, summary


def ledger_result(
    lines: Sequence[Mapping[str, Any]], summary: Mapping[str, Any], budget: int
) -> dict[str, Any]:
    """A variant result from a run's ledger: scoreboard over every episode within the
    budget (``method.ledger.scoreboard``, the run's own figure), the same episodes split by
    kind with each kind's own score (``scoreboard_by_kind``), final agent over the
    ``final`` ones."""
    final = [line for line in lines if line["kind"] == "final"]
    kinds = dict.fromkeys(line["kind"] for line in lines)  # in order of first appearance
    board = ledger.scoreboard(lines, ACHIEVEMENTS, budget)
    rates = percent(board["rates"])
    result = {
        "budget": budget,
        "scoreboard": {
            "episodes": board["episodes"],
            "steps": board["steps"],
            "rates": rates,
            "score": board["score"],
            "diamond": rates["collect_diamond"],
        },
        "final": summarize(final),
        "env_steps": int(summary["env_steps"]),
        "wall_s": float(summary["wall_s"]),
        "episode_kinds": {k: ledger.tally(lines, kinds=[k])["episodes"] for k in kinds},
        "scoreboard_by_kind": ledger.scoreboard_by_kind(lines, ACHIEVEMENTS, budget),
        "final_success": float(summary["final_success"]),
        "target": str(summary["target"]),
        "seeds": {"final": sorted({int(line["seed"]) for line in final})},
    }
    # The run's own figures, kept beside ours as a cross-check.
    own = (
        "score_all_episodes",
        "score_final",
        "episodes",
        "stop_reason",
        "backend",
        "env_steps_by_kind",
        "wall_limit_reached",
        "learned_stages",
        "coded_stages",
        "plan_versions",
    )
    result["run_summary"] = {k: summary[k] for k in own if k in summary}
    return result
