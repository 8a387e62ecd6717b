"""The critic: turns measured rollouts into critiques, one per version of a sub-action.

The statistics are computed here, from the episodes themselves: how often the version
failed, with which cause, where (the code line, the high-level action it was in) and
what the player saw before and after that action. The backend (a model, or the offline
rules) reads them and gives the verdict — accept, revise, or switch to RL — and advice.
Every critique is answered to the fast agent that asked and streamed to the slow
agent, so nobody waits on the critic for more than their own review.
"""

from __future__ import annotations

import collections
from typing import Any

from llm.contracts import VERDICTS
from messages import Envelope
from messages.causes import EPISODE_DONE, INTERRUPTED, STEP_BUDGET, SUCCESS, TIMEOUT, not_reached
from messages.plan import Critique, Review
from messages.rollout import EpisodeReport, Glimpse
from method.agents import Agents
from method.paired import below_target
from runtime.actor import Actor, handles
from runtime.events import log

ENDINGS = frozenset({EPISODE_DONE, STEP_BUDGET, TIMEOUT})
"""Episode causes that end whatever is under way: they are the failure of the sub-action
that was running (or waiting its turn after a need), not of a need."""


def failure_of(episode: EpisodeReport, stage: str) -> tuple[str, str, int, str]:
    """(cause, detail, line, where) of a failed episode, seen from sub-action ``stage``.

    When the sub-action ran, the failure is what ended the episode (a death, the step
    cap) if that came while it was under way — even inside a need run that interrupted
    it — else the cause of its own last run. When it never ran, ``not_reached:<cause>``.
    """
    runs = [r for r in episode.stages if r.name == stage]
    if runs:
        last = runs[-1]
        if episode.cause in ENDINGS or last.cause in (INTERRUPTED, SUCCESS):
            return episode.cause, episode.detail, episode.line or last.line, stage
        return last.cause, last.detail, last.line, stage
    if episode.stages:
        # The sub-action never ran: a stage before it failed, or the player died first.
        return not_reached(episode.cause), episode.detail, 0, episode.stages[-1].name
    return episode.cause, episode.detail, episode.line, stage


def glimpse_dict(g: Glimpse | None) -> dict[str, Any] | None:
    if g is None:
        return None
    return {
        "step": g.step,
        "inventory": g.inventory,
        "status": g.status,
        "near": g.near[:8],
        "facing": g.facing,
    }


def statistics(review: Review) -> dict[str, Any]:
    """What the critic measured: the request its backend answers."""
    sub, result = review.subaction, review.result
    # The failures that are this sub-action's: those of episodes that reached it (a
    # stage before it failing is that stage's failure); only when none did, the rest.
    failed = [e for e in result.episodes if not e.success and e.reached(sub.name)]
    failed = failed or [e for e in result.episodes if not e.success]
    rate, got = result.stage_rate(sub.name)
    if review.grown:  # the worlds its comparison grew into count as much as the first ones
        rate = (rate * got + sum(review.grown)) / (got + len(review.grown))
        got += len(review.grown)
    causes = collections.Counter(failure_of(e, sub.name)[0] for e in failed)
    stats: dict[str, Any] = {
        "subaction": {
            "name": sub.name,
            "description": sub.description or sub.subtask.description,
            "goal": sub.subtask.goal,
            "achievement": sub.subtask.achievement,
            "max_steps": sub.subtask.max_steps,
        },
        "mode": review.mode,
        "version": review.version,
        "target": sub.target,
        "success_rate": round(rate, 4),
        "reached": got,
        # Under the target by more than the noise of so few worlds (method.paired).
        "measurably_below": below_target(rate, got, sub.target),
        # Whole composed episodes over every evaluation world (from a start, the episode
        # that made it and those restoring it end as it did).
        "task_success_rate": round(result.success_rate, 4),
        "episodes": len(result.episodes),
        # The episodes' own steps (from a start: from there on; making it is setup).
        "mean_steps": round(
            sum(e.steps for e in result.episodes) / max(1, len(result.episodes)), 1
        ),
        "causes": dict(causes.most_common()),
        "revisions_left": review.revisions_left,
        "example": None,
    }
    if review.train is not None:
        stats["training"] = {
            "decisions": review.train.steps,
            "world_steps": review.train.primitive_steps,
            "held_out_success": round(review.train.eval_success_rate, 4),
        }
    if failed:
        top = causes.most_common(1)[0][0]
        example = next(e for e in failed if failure_of(e, sub.name)[0] == top)
        cause, detail, line, where = failure_of(example, sub.name)
        segment = example.trace[-1] if example.trace else None
        code_line = ""
        if line and review.code:
            lines = review.code.splitlines()
            if 0 < line <= len(lines):
                code_line = lines[line - 1].strip()
        stats["example"] = {
            "seed": example.seed,
            "cause": cause,
            "detail": detail[:400],
            "line": line,
            "code_line": code_line,
            "stage": where,
            "action": segment.action if segment else "",
            "before": glimpse_dict(segment.before) if segment else None,
            "after": glimpse_dict(segment.after) if segment else None,
        }
    return stats


def critique_from(review: Review, stats: dict[str, Any], reply: dict[str, Any]) -> Critique:
    """The critique message: measured facts from ``stats``, judgement from ``reply``."""
    example = stats.get("example") or {}
    segment = None
    for e in review.result.episodes:
        if not e.success and e.seed == example.get("seed") and e.trace:
            segment = e.trace[-1]
            break
    verdict = reply.get("verdict", "revise")
    if verdict not in VERDICTS:
        verdict = "revise"
    causes = stats["causes"]
    cause = example.get("cause", "")
    return Critique(
        subaction=review.subaction.name,
        version=review.version,
        mode=review.mode,
        success_rate=stats["success_rate"],
        target=review.subaction.target,
        episodes=stats["episodes"],
        verdict=verdict,
        cause=cause,
        count=int(causes.get(cause, 0)),
        causes={str(k): int(v) for k, v in causes.items()},
        detail=example.get("detail", ""),
        line=int(example.get("line", 0)),
        action=example.get("action", ""),
        before=segment.before if segment else None,
        after=segment.after if segment else None,
        advice=str(reply.get("advice", ""))[:2000],
    )


class CriticActor(Actor):
    """Role ``critic``: answers :class:`Review` with a :class:`Critique`."""

    role = "critic"

    def __init__(self, *, agents: Agents, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.agents = agents
        """The run's :class:`method.agents.Agents`: backend, journal, budget."""

    @handles(Review)
    async def on_review(self, review: Review, env: Envelope) -> Critique:
        stats = statistics(review)
        reply = await self.agents.call("critic", "review", stats)
        critique = critique_from(review, stats, reply)
        log.info(
            "critique",
            subaction=critique.subaction,
            version=critique.version,
            mode=critique.mode,
            success_rate=critique.success_rate,
            target=critique.target,
            verdict=critique.verdict,
            cause=critique.cause,
            count=critique.count,
            advice=critique.advice[:200],
        )
        # Streamed to the slow agent for its iteration summary; nobody waits on it.
        self.tell("@slow", critique)
        return critique
