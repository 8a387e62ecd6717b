"""The run's driver: RL-GPT end to end.

It starts the three agents inside the head process (they are I/O-bound: model calls
and waiting on workers), waits for the environment and learner actors, gives the slow
agent the task from the config, records a video of one evaluation episode of the final
policy and writes ``report.md`` (with plots) beside ``report.json``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from messages.plan import RunTask, TaskReport
from messages.rollout import RolloutRequest
from messages.task import Subtask
from method import ledger, seeds
from method.agents import Agents, make_backend
from method.journal import job_key
from method.settings import ALL_ACHIEVEMENTS, FINAL_WALL_S, MethodSettings
from runtime.actor import RemoteFailure
from runtime.events import log
from runtime.head import Head

if TYPE_CHECKING:  # imported when a run uses it
    from llm.local_server import LocalServer

SLOW_CAPACITY = 1
"""The slow agent runs the one task a run asks of it: a second would be a second run."""


def task_of(settings: MethodSettings) -> RunTask:
    t, seed = settings.task, settings.run.seed
    return RunTask(
        task=t.task,
        target_item=t.target,
        success_target=t.success_target,
        iterations=t.iterations,
        env_steps=t.env_steps,
        eval_seeds=seeds.final_seeds(seed, t.eval_episodes),
        code_seeds=seeds.code_seeds(seed, t.code_episodes),
    )


async def run_method(head: Head, agent_classes: Mapping[str, type]) -> dict:
    """The method end to end; ``agent_classes`` are the slow, fast and critic actors by
    role (``actors.agent_classes()``, handed over by ``run.py``). With ``[agents]
    backend = "local"`` the model server runs beside it, started first, stopped last."""
    if head.settings.agents.backend != "local":
        return await _run_method(head, agent_classes, None)
    async with trio.open_nursery() as nursery:
        endpoint = await nursery.start(local_server(head).run)
        try:
            return await _run_method(head, agent_classes, endpoint)
        finally:
            nursery.cancel_scope.cancel()  # the server stops with the run


def local_server(head: Head) -> LocalServer:
    """The ``local`` backend's server for this run, its output in ``model-server.log``."""
    from llm import models
    from llm.local_server import LocalServer

    a = head.settings.agents
    path = models.resolve(a.model)
    alias = path.stem if models.is_path(a.model) else a.model
    return LocalServer(
        path, alias, head.run_dir / "model-server.log", n_ctx=a.n_ctx, n_threads=a.n_threads
    )


async def _run_method(head: Head, agent_classes: Mapping[str, type], endpoint: Any) -> dict:
    s = head.settings
    started = time.monotonic()
    agents = Agents(make_backend(s.agents, endpoint), head.run_dir, s.agents.token_budget)
    if agents.journal.loaded_calls or agents.journal.loaded_jobs:
        log.info(
            "run_resumed",
            recorded_calls=agents.journal.loaded_calls,
            recorded_jobs=agents.journal.loaded_jobs,
        )
    environments = s.actors["environment"].count if "environment" in s.actors else 0
    learners = s.actors["learner"].count if "learner" in s.actors else 0
    common = {"max_frame_bytes": s.runtime.max_frame_bytes, "run_dir": head.run_dir}
    critic, fast, slow_agent = (agent_classes[r] for r in ("critic", "fast", "slow"))
    await head.start_local(
        critic(agents=agents, name="critic", capacity=s.agents.critic_capacity, **common)
    )
    await head.start_local(
        fast(
            agents=agents,
            settings=s,
            environments=environments,
            name="fast",
            capacity=s.agents.fast_capacity,
            **common,
        )
    )
    slow = slow_agent(
        agents=agents,
        settings=s,
        environments=environments,
        name="slow",
        capacity=SLOW_CAPACITY,
        **common,
    )
    await head.start_local(slow)
    if environments:
        await head.wait_for("environment", environments)
    if learners:
        await head.wait_for("learner", learners)
    task = task_of(s)
    log.info("task_started", task=task.task, target=task.target_item, backend=agents.backend.name)
    report: TaskReport = await head.client.ask("@slow", task)
    if report.stop_reason == "planning_failed":
        raise RuntimeError("the slow agent could not plan: see agent_call_failed in events.jsonl")
    video = await _video(head, task, report)
    totals = agents.journal.totals
    summary = {
        "task": task.task,
        "backend": agents.backend.name,
        "final_success": report.final_success,
        "final_episodes": report.final_episodes,
        "stop_reason": report.stop_reason,
        "iterations": len(report.history),
        "plan_versions": len(report.plans),
        "env_steps_training": report.train_steps,
        "env_steps_code": report.code_steps,
        "env_steps_final": report.eval_steps,
        "model_calls": totals.calls,
        "model_calls_replayed": totals.replayed,
        "tokens_in": totals.tokens_in,
        "tokens_out": totals.tokens_out,
        "learned_stages": sum(1 for st in report.stages if st.policy_path),
        "coded_stages": sum(1 for st in report.stages if not st.policy_path),
        "video": video,
    }
    summary.update(scores(head.run_dir, task.target_item, report))
    summary["wall_s"] = round(time.monotonic() - started, 1)
    if head.run_dir is not None:
        (head.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    from method.report import write_report

    write_report(head.run_dir, s, task, report, summary, slow.critiques)
    return summary


def scores(run_dir: Path | None, target: str, report: TaskReport) -> dict[str, Any]:
    """Env steps and Crafter scores from the run's episode ledger: over every episode the
    run stepped (the scoreboard protocol) and over the final evaluation alone."""
    from crafter import constants

    names = list(constants.achievements)
    lines = ledger.read(run_dir) if run_dir is not None else []
    every = ledger.tally(lines)
    final = ledger.tally(lines, kinds=["final"])
    return {
        "target": target,
        "env_steps": every["steps"],
        "episodes": every["episodes"],
        "score_all_episodes": round(ledger.crafter_score(ledger.rates(every), names), 2),
        "score_final": round(ledger.crafter_score(report.achievements, names), 2),
        "final_achievements": dict(report.achievements),
        "final_ledger_episodes": final["episodes"],
    }


async def _video(head: Head, task: RunTask, report: TaskReport) -> str:
    """One evaluation episode of the final policy, rendered as a GIF ('' when none)."""
    if not report.stages or not task.eval_seeds:
        return ""
    req = RolloutRequest(
        subtask=Subtask(name="video", max_steps=head.settings.task.episode_steps),
        seeds=[task.eval_seeds[0]],
        wall_s=FINAL_WALL_S,
        frames=True,
        stages=list(report.stages),
        needs=list(report.needs),
        skip_failed=task.target_item == ALL_ACHIEVEMENTS,
    )
    goal = report.stages[-1].subtask
    req = dataclasses.replace(
        req, subtask=dataclasses.replace(goal, max_steps=head.settings.task.episode_steps)
    )
    try:
        with trio.fail_after(FINAL_WALL_S + 60):
            result = await head.client.ask("@environment", req)
    except (RemoteFailure, trio.TooSlowError) as exc:
        log.warning("video_failed", detail=str(exc))
        return ""
    if not result.frames:
        return ""
    from envs.video import write_gif

    # Booked by the request's key: a resume of a finished run renders the same episode
    # again, and its line replaces this one instead of being counted twice.
    ledger.append(head.run_dir, ledger.rollout_lines("video", result, job_key(req)))
    path = write_gif(result.frames, head.run_dir / "episode.gif")
    log.info("video_written", path=str(path), seed=req.seeds[0])
    return path.name
