"""The run's driver: RL-GPT end to end.

It sits above the roles it drives (it imports the agents' classes; nothing hands them
over). It starts the three agents inside the head process (they are I/O-bound: model calls
and waiting on workers), waits for the environment and learner actors, gives the slow
agent the task from the config, records a video of one evaluation episode of the final
policy and writes ``report.md`` (with plots) beside ``report.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import trio

from actors.critic import CriticActor
from actors.fast import FastAgent
from actors.slow import SlowAgent
from llm import models
from llm.local_server import LocalServer
from messages.plan import RunTask, TaskReport
from method import games, ledger, seeds
from method.agents import Agents, make_backend
from method.bundle import MANIFEST, write_bundle
from method.paired import wilson_interval
from method.report import write_report
from method.settings import LOCAL_N_CTX, MethodSettings
from method.tboard import write_run_events
from method.video import render_report_video
from rl.artifacts import PolicyUnusable
from runtime.cpu import available_cores, tree_cpu_seconds
from runtime.events import log
from runtime.head import Head

SLOW_CAPACITY = 1
"""The slow agent runs the one task a run asks of it: a second would be a second run."""


def task_of(settings: MethodSettings) -> RunTask:
    t, seed = settings.task, settings.run.seed
    return RunTask(
        task=t.task,
        target_item=games.minetest_item(t.target) if t.world == "minetest" else t.target,
        success_target=t.success_target,
        iterations=t.iterations,
        env_steps=t.env_steps,
        eval_seeds=seeds.final_seeds(seed, t.eval_episodes),
        code_seeds=seeds.code_seeds(seed, t.code_episodes),
    )


async def run_method(head: Head) -> dict:
    """The method end to end. With ``[agents] backend = "local"`` the model server runs
    beside it, started first, stopped last."""
    if head.settings.agents.backend != "local":
        return await _run_method(head, None)
    async with trio.open_nursery() as nursery:
        endpoint = await nursery.start(local_server(head).run)
        try:
            return await _run_method(head, endpoint)
        finally:
            nursery.cancel_scope.cancel()  # the server stops with the run


def local_server(head: Head) -> LocalServer:
    """The ``local`` backend's server for this run, its output in ``model-server.log``."""
    a = head.settings.agents
    path = models.resolve(a.model)
    alias = path.stem if models.is_path(a.model) else a.model
    return LocalServer(
        path,
        alias,
        head.run_dir / "model-server.log",
        n_ctx=a.n_ctx or LOCAL_N_CTX,
        n_threads=a.n_threads,
        cache_bytes=a.prompt_cache_mib * 2**20,
    )


async def _run_method(head: Head, endpoint: Any) -> dict:
    s = head.settings
    started = time.monotonic()
    cpu_started = tree_cpu_seconds()
    steps_before = _ledger_steps(head.run_dir)  # a resumed run's earlier sessions
    # 1. The agents, in this process, sharing one model backend and its journal.
    backend = make_backend(s.agents, endpoint, world=s.task.world)
    agents = Agents(backend, head.run_dir, s.agents.token_budget)
    if agents.journal.loaded_calls or agents.journal.loaded_jobs:
        log.info(
            "run_resumed",
            recorded_calls=agents.journal.loaded_calls,
            recorded_jobs=agents.journal.loaded_jobs,
        )
    slow = await _start_agents(head, agents)
    # 2. The task, asked of the slow agent: it plans, has the fast agent code and train,
    # the critic review, and answers when the target is met or the budget is spent.
    task = task_of(s)
    log.info("task_started", task=task.task, target=task.target_item, backend=agents.backend.name)
    report: TaskReport = await head.client.ask("@slow", task, expect=TaskReport)
    if report.stop_reason == "planning_failed":
        raise RuntimeError("the slow agent could not plan: see agent_call_failed in events.jsonl")
    # 3. What the run writes: the video, the policy bundle, summary.json, report.md.
    shown = await _video(head, slow.final)
    summary = _summary(task, report, agents, shown, _bundle(head, slow.final, task))
    summary.update(
        scores(head.run_dir, task.target_item, report, budget=task.env_steps, world=s.task.world)
    )
    wins = round(report.final_success * report.final_episodes)
    low, high = wilson_interval(wins, report.final_episodes)
    summary["final_success_interval"] = [round(low, 4), round(high, 4)]
    summary["wall_limit_reached"] = report.stop_reason == "wall_time"
    summary["wall_s"] = round(time.monotonic() - started, 1)
    summary.update(
        throughput(
            summary["env_steps"] - steps_before,
            time.monotonic() - started,
            tree_cpu_seconds() - cpu_started,
            resumed=steps_before > 0,
        )
    )
    # The actor processes started (after `count = "auto"` was worked out: see actor_counts).
    summary["actor_counts"] = {role: a.count for role, a in s.actors.items()}
    if head.run_dir is not None:
        (head.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    write_report(head.run_dir, s, task, report, summary, slow.critiques)
    if head.run_dir is not None:
        write_run_events(head.run_dir, report, summary)
    return summary


async def _start_agents(head: Head, agents: Agents) -> SlowAgent:
    """The critic, fast and slow agents started in the head; returns the slow agent once
    the configured environment and learner actors have registered."""
    s = head.settings
    environments = s.actors["environment"].count if "environment" in s.actors else 0
    learners = s.actors["learner"].count if "learner" in s.actors else 0
    common = {"max_frame_bytes": s.runtime.max_frame_bytes, "run_dir": head.run_dir}
    await head.start_local(
        CriticActor(agents=agents, name="critic", capacity=s.agents.critic_capacity, **common)
    )
    await head.start_local(
        FastAgent(
            agents=agents,
            settings=s,
            environments=environments,
            name="fast",
            capacity=s.agents.fast_capacity,
            **common,
        )
    )
    slow = SlowAgent(
        agents=agents,
        settings=s,
        environments=environments,
        can_learn=bool(learners or s.runtime.listen),
        name="slow",
        capacity=SLOW_CAPACITY,
        **common,
    )
    await head.start_local(slow)
    if environments:
        await head.wait_for("environment", environments)
    if learners:
        await head.wait_for("learner", learners)
    return slow


def _summary(
    task: RunTask, report: TaskReport, agents: Agents, shown: list[dict], policy: str
) -> dict:
    """The run's figures from the slow agent's report and the model journal."""
    totals = agents.journal.totals
    return {
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
        "video": "episode.gif" if shown else "",
        "video_episodes": shown,
        "policy": policy,
    }


def scores(
    run_dir: Path | None,
    target: str,
    report: TaskReport,
    budget: int | None = None,
    world: str = "crafter",
) -> dict[str, Any]:
    """Env steps and Crafter scores from the run's episode ledger: every world step the
    run took, by kind; the score over every episode the run stepped within ``budget``
    env steps (the scoreboard protocol, :func:`method.ledger.scoreboard`), the same
    episodes grouped by the kind of line that booked them, each group scored over its own
    (:func:`method.ledger.scoreboard_by_kind`), and over the final evaluation alone.
    Writes the ledger's episodes as ``rollouts/stats.jsonl``, from which Crafter's own
    ``read_metrics`` gets the same score. In Minetest the score is the same formula over
    the chain's achievements (``obtain_tree`` ... ``obtain_diamond``)."""
    names = list(games.achievements(world))
    lines = ledger.read(run_dir) if run_dir is not None else []
    every = ledger.tally(lines)
    final = ledger.tally(lines, kinds=["final"])
    board = ledger.scoreboard(lines, names, budget)
    if run_dir is not None:
        ledger.write_stats(run_dir, names)
    return {
        "target": target,
        "world": world,
        "env_steps": every["steps"],
        "env_steps_by_kind": ledger.steps_by_kind(lines),
        "env_step_budget": budget,
        "episodes": every["episodes"],
        "scoreboard_episodes": board["episodes"],
        "scoreboard_steps": board["steps"],
        "score_all_episodes": round(board["score"], 2),
        "scoreboard_by_kind": {
            kind: group | {"score": round(group["score"], 2)}
            for kind, group in ledger.scoreboard_by_kind(lines, names, budget).items()
        },
        "score_final": round(ledger.crafter_score(report.achievements, names), 2),
        "final_achievements": dict(report.achievements),
        "final_ledger_episodes": final["episodes"],
    }


def _ledger_steps(run_dir: Path | None) -> int:
    return ledger.tally(ledger.read(run_dir))["steps"] if run_dir is not None else 0


def throughput(steps: int, wall_s: float, cpu_s: float, *, resumed: bool) -> dict[str, Any]:
    """What this session of the run did per wall second and how busy it kept the
    machine: counted env steps per second, busy core-seconds (the whole process tree:
    head, actors, their workers, a model server) over ``cores × wall``."""
    cores = available_cores()
    return {
        "session_env_steps": steps,
        "session_resumed": resumed,
        "env_steps_per_s": round(steps / wall_s, 1) if wall_s > 0 else 0.0,
        "cpu_s": round(cpu_s, 1),
        "cores": cores,
        "core_utilisation": round(cpu_s / (cores * wall_s), 3) if wall_s > 0 else 0.0,
    }


async def _video(head: Head, final: tuple | None) -> list[dict]:
    """One successful and one failed episode of the final evaluation, rendered again and
    written labelled to ``episode.gif`` (:mod:`method.video`); what each shows."""
    if head.run_dir is None:
        return []

    return await render_report_video(head, final, head.run_dir / "episode.gif")


def _bundle(head: Head, final: tuple | None, task: RunTask) -> str:
    """The final policy as a bundle (:mod:`method.bundle`): its manifest's path in the
    run folder ('' with no final policy)."""
    if head.run_dir is None or final is None:
        return ""

    try:
        folder = write_bundle(head.run_dir, *final, run_id=head.run_dir.name, task=task.task)
    except (OSError, ValueError, PolicyUnusable) as exc:
        # The run's results stand without it: report it, write the report anyway.
        log.error("policy_bundle_failed", detail=f"{type(exc).__name__}: {exc}"[:500])
        return ""
    log.info("policy_bundled", path=str(folder), stages=len(final[0].stages))
    return f"{folder.name}/{MANIFEST}"
