"""``runs/<id>/report.md``: what the run decided, measured and produced, with plots."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from messages.plan import Critique, RunTask, SubActionOutcome, TaskReport
from method.paired import compare, paired_outcomes
from method.plots import report_plots
from method.rates import best_rates, failed_rl, first_rates, versioned
from method.settings import ALL_ACHIEVEMENTS, MethodSettings

KIND_NAMES = {
    "code": "code evaluation",
    "train": "PPO training",
    "setup": "setup code at training resets",
    "held_out": "learners' held-out evaluation",
    "final": "final evaluation",
    "play": "final policy playing on",
    "video": "video",
}


def _interval(bounds: Any) -> str:
    if not bounds:
        return "–"
    low, high = bounds
    return f"{low:.0%}–{high:.0%}"


def _split(by_kind: dict[str, int]) -> str:
    parts = [f"{steps:,} {KIND_NAMES.get(kind, kind)}" for kind, steps in by_kind.items()]
    return ", ".join(parts) or "none"


SCORE_KIND_NAMES = KIND_NAMES | {
    "train": "PPO training jobs (their setup and held-out episodes too)"
}
"""What :func:`_by_kind` calls each kind of ledger line (a training line books its job's
every world episode)."""


def _by_kind(groups: dict[str, dict[str, Any]]) -> str:
    """The scoreboard's episodes by the kind that booked them, each kind's own score: a
    code evaluation ends when its step's test holds and a training episode from a restored
    start books only what came after it, so those kinds score low and pull the
    scoreboard down; the final policy's own episodes show what it scores."""
    if not groups:
        return ""
    parts = [
        f"{SCORE_KIND_NAMES.get(kind, kind)} {g['score']:.1f}% ({g['episodes']:,} episodes)"
        for kind, g in groups.items()
    ]
    return "; by kind, each scored over its own episodes: " + ", ".join(parts)


def _rate(value: float) -> str:
    return "–" if value < 0 else f"{value:.2f}"


def _best_outcome(outs: list[SubActionOutcome], mode: str) -> SubActionOutcome | None:
    """The version of ``mode`` with the best success rate (the first of equals)."""
    of_mode = [o for o in outs if o.mode == mode and versioned(o)]
    return max(of_mode, key=lambda o: o.success_rate) if of_mode else None


def _paired_cell(coded: SubActionOutcome, learned: SubActionOutcome) -> tuple[str, str]:
    """Learned minus coded on the worlds both were evaluated on (:mod:`method.paired`):
    the difference with its 95 % interval and the pairs, and which is measurably better."""
    paired = paired_outcomes(coded, learned)
    if paired is None:
        return "not on the same worlds", "–"
    up = compare(*paired)  # the learned version as the challenger
    down = compare(paired[1], paired[0])  # the coded one as the challenger
    both = [(a, b) for a, b in zip(*paired, strict=True) if min(a, b) >= 0]
    cell = (
        f"{up.difference:+.2f} [{up.lower:+.2f}, {-down.lower:+.2f}] on {up.worlds} pairs "
        f"(successes: coded {sum(a for a, _ in both)}, learned {sum(b for _, b in both)})"
        if up.worlds
        else "no world reached by both"
    )
    better = (
        "learned (measurably)"
        if up.challenger_wins
        else "coded (measurably)"
        if down.challenger_wins
        else "not measurably different"
    )
    return cell, better


OFFLINE_FIRST_LINES = {
    "full": "every step's first version is the skill library's complete, tuned template "
    '(`[agents] offline_first = "full"`): the code loop starts from code a person wrote '
    "and tuned, so what it keeps is not discovered",
    "simplest": "every step's first version is the library's bare template "
    '(`[agents] offline_first = "simplest"`); revisions add the library\'s fixes as the '
    "critiques ask for them — written rules, not a model's discovery",
}
"""What the report's first line says of the offline backend's first versions."""


OFFLINE_LESSONS_LINE = (
    "; a later step's first version also takes the settings the revisions of the steps "
    "it builds on turned on (`[agents] offline_lessons`), the same rules applied sooner"
)
"""What the first line adds when a simplest start passes on what revisions taught."""


MINETEST_OFFLINE_LINE = (
    "every step's code is the Minetest template library's (`worlds/minetest/chain.py`, one "
    "version a step, written and tuned by a person): what it keeps is not discovered"
)
"""The same line in Minetest, whose library has no simplest templates or revisions."""


def _offline_line(first: str, lessons: bool = False, world: str = "crafter") -> str:
    """The backend line's words for the offline backend starting from ``first`` (with
    ``lessons``: later first versions take earlier revisions' settings) in ``world``."""
    if world == "minetest":
        return f" (knowledge-based offline stand-in, not a language model; {MINETEST_OFFLINE_LINE})"
    how = OFFLINE_FIRST_LINES.get(first, f"first versions: {first}")
    if lessons and first == "simplest":
        how += OFFLINE_LESSONS_LINE
    return f" (knowledge-based offline stand-in, not a language model; {how})"


def _final_line(task: RunTask, report: TaskReport, summary: dict[str, Any]) -> str:
    """The final policy's headline: its success on the unseen worlds; for the curriculum
    of every achievement (no single test) its Crafter score there first, with what
    "success" means for it (every stage of the curriculum done in one episode)."""
    if not task.eval_seeds:
        return "- Final policy: not evaluated"
    done = round(report.final_success * report.final_episodes)
    worlds = f"worlds never used before (seeds {task.eval_seeds[0]}–{task.eval_seeds[-1]})"
    interval = f"95 % interval {_interval(summary.get('final_success_interval'))}"
    if task.target_item == ALL_ACHIEVEMENTS:
        return (
            f"- Final policy: Crafter score **{summary.get('score_final', 0):.1f}%** on "
            f"{report.final_episodes} {worlds}; every stage of the curriculum done in "
            f"{done}/{report.final_episodes} of them ({report.final_success:.0%}; {interval})"
        )
    return (
        f"- Final policy: **{report.final_success:.0%}** success "
        f"({done}/{report.final_episodes}; {interval}) on {worlds}"
    )


def write_report(
    run_dir: Path,
    settings: MethodSettings,
    task: RunTask,
    report: TaskReport,
    summary: dict[str, Any],
    critiques: list[Critique],
) -> Path:
    """Write ``report.md`` in ``run_dir``: the headline figures, then one section after
    the other (each its own function below, in the order a reader meets them)."""
    plots = report_plots(run_dir, report, summary)
    by_name: dict[str, list[SubActionOutcome]] = {}
    for o in report.outcomes:
        by_name.setdefault(o.name, []).append(o)
    lines = [
        *_headline(run_dir, settings, task, report, summary),
        *_final_policy(report, by_name),
        *_coded_against_learned(run_dir, report, by_name),
        *_plan_history(report),
        *_rates_by_iteration(report),
        *_critiques(critiques),
        *_achievements(report),
        *_plots_and_video(plots, summary),
        *_replay(run_dir, summary),
    ]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _headline(
    run_dir: Path,
    settings: MethodSettings,
    task: RunTask,
    report: TaskReport,
    summary: dict[str, Any],
) -> list[str]:
    """The title and the run's figures at a glance: backend, final success, why it
    stopped, wall time, env steps, throughput, Crafter score, agent calls."""
    return [
        f"# {task.task}: run {run_dir.name}",
        "",
        f"- Backend: **{summary['backend']}**"
        + (
            _offline_line(
                settings.agents.offline_first, settings.agents.offline_lessons, settings.task.world
            )
            if summary["backend"] == "offline"
            else f" (model {settings.agents.model})"
        ),
        _final_line(task, report, summary),
        f"- Stopped: {report.stop_reason} after {len(report.history)} iterations, "
        f"{len(report.plans)} plan versions",
        f"- Wall time: {summary.get('wall_s', 0):.0f} s"
        + (
            f"; **the wall-clock safety limit ({settings.task.wall_s:g} s) was reached**: "
            "work under way was cancelled, so this result depends on the machine's speed"
            if summary.get("wall_limit_reached")
            else f" (the wall-clock safety limit, {settings.task.wall_s:g} s, was not reached)"
            if settings.task.wall_s > 0
            else " (no wall-clock limit)"
        ),
        f"- Env steps: **{summary.get('env_steps', 0):,}** world steps in all, every one the "
        f"run took: {_split(summary.get('env_steps_by_kind', {}))}"
        + (
            f"; budget {summary['env_step_budget']:,}"
            if summary.get("env_step_budget") is not None
            else ""
        ),
        f"- Throughput: {summary.get('env_steps_per_s', 0):,.0f} counted env steps per wall "
        f"second{' (this session of a resumed run)' if summary.get('session_resumed') else ''};"
        f" {summary.get('core_utilisation', 0):.0%} of {summary.get('cores', 0)} cores busy "
        f"({summary.get('cpu_s', 0):,.0f} CPU-seconds, every process of the run)",
        (
            "- Crafter score: "
            if settings.task.world == "crafter"
            else "- Score (Crafter's "
            "formula over the chain's achievements, obtain_tree ... obtain_diamond): "
        )
        + f"{summary.get('score_all_episodes', 0):.1f}% over the "
        f"{summary.get('scoreboard_episodes', 0):,} episodes the run stepped within its budget "
        f"({summary.get('scoreboard_steps', 0):,} env steps; the scoreboard protocol, as "
        "Crafter's own `read_metrics` computes it from `rollouts/stats.jsonl`), "
        f"{summary.get('score_final', 0):.1f}% for the final policy"
        + _by_kind(summary.get("scoreboard_by_kind") or {}),
        f"- Agent calls: {summary['model_calls']} ({summary['model_calls_replayed']} replayed "
        f"on resume); tokens {summary['tokens_in']:,} in, {summary['tokens_out']:,} out",
        f"- Written {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; "
        f"config {settings.source}, seed {settings.run.seed}",
    ]


def _final_policy(report: TaskReport, by_name: dict[str, list[SubActionOutcome]]) -> list[str]:
    """One row per stage and need of the final policy: its kind, the chosen version's
    rate, and the best rate of each kind."""
    lines = [
        "",
        "## Final policy",
        "",
        "| Stage | Kind | Success (sub-action, chosen version) | Best coded | Best learned |",
        "|---|---|---|---|---|",
    ]
    rates = best_rates(report)

    def kinds(name: str) -> str:
        """The Best coded and Best learned cells ("–" for a kind with no version)."""
        got = rates.get(name, {})
        return f"{_rate(got.get('code', -1.0))} | {_rate(got.get('rl', -1.0))} |"

    for stage in report.stages:
        name = stage.subtask.name
        outs = by_name.get(name, [])
        kind = "learned (PPO)" if stage.policy_path else "coded"
        # The chosen version's own rate (a better-looking one not measurably better
        # was not chosen: method.compare).
        chosen = [o.success_rate for o in outs if o.stage == stage]
        best = chosen[-1] if chosen else max((o.success_rate for o in outs), default=0.0)
        lines.append(f"| {name} | {kind} | {best:.2f} | {kinds(name)}")
    for need in report.needs:
        kind = "learned (PPO)" if need.stage.policy_path else "coded"
        outs = by_name.get(need.stage.subtask.name, [])
        # A need is measured only when it was a sub-action of its own: "–", not 0, else.
        best = max((o.success_rate for o in outs), default=-1.0)
        lines.append(
            f"| need: {need.label()} | {kind} | {_rate(best)} | {kinds(need.stage.subtask.name)}"
        )
    return lines


def _coded_against_learned(
    run_dir: Path, report: TaskReport, by_name: dict[str, list[SubActionOutcome]]
) -> list[str]:
    """The best coded and learned version of every sub-action that has both, with their
    paired difference; and the sub-actions worked on in RL that never got a policy."""
    compared = [
        (name, coded, learned)
        for name, outs in by_name.items()
        if (coded := _best_outcome(outs, "code")) and (learned := _best_outcome(outs, "rl"))
    ]
    lines = ["", "## Coded against learned", ""]
    if compared:
        lines += [
            "The best version of each kind. Coded and Learned: each one's success on the "
            "worlds its own inner loop chose it on. The difference is paired, world for "
            "world, on every world both were evaluated on and both reached (those a "
            "learned version's loop grew its comparison with the code into included; "
            "95 % interval: `method/paired.py`).",
            "",
            "| Sub-action | Coded | Learned (PPO with coded actions) "
            "| Learned − coded [95 %] | Better |",
            "|---|---|---|---|---|",
        ]
        for name, coded, learned in compared:
            cell, better = _paired_cell(coded, learned)
            lines.append(
                f"| {name} | {coded.success_rate:.2f} | {learned.success_rate:.2f} | {cell} "
                f"| {better} |"
            )
        # Learned versions measured: one critique each (an inner loop's outcome holds its
        # best version only, and a loop may have measured several).
        tried = {
            name: sum(c.mode == "rl" for o in by_name[name] for c in o.critiques)
            for name, _, _ in compared
        }
        lines += [
            "",
            "These figures come from the worlds the choice was made on: Learned is the best "
            "of the sub-action's learned versions ("
            + ", ".join(f"{name}: {n}" for name, n in tried.items())
            + "), and a learned version enters the final policy only when its comparison "
            "with the code says it is better. From a source checkout, `python "
            f"benchmarks/bench_confirm.py {run_dir}` plays the final policy's learned stages "
            "against the code they learned over on worlds no run plays; `--job NAME "
            "--through` plays a learned version the policy did not keep (the training job "
            "that `code/NAME.rl.json` names) against the stage it kept, each episode ending "
            "at that stage.",
        ]
    else:
        lines.append("No sub-action was both coded and learned in this run.")
    failed = failed_rl(report)
    unlearned = [name for name in by_name if name in failed]
    if unlearned:
        lines += [
            "",
            "Worked on in RL without a learned version (every training job failed: "
            "`training_failed` in `events.jsonl`): " + ", ".join(unlearned) + ".",
        ]
    return lines


def _plan_history(report: TaskReport) -> list[str]:
    """Every plan version with its sub-actions, modes, dependencies, targets and reasons."""
    lines = ["", "## Plan history", ""]
    for plan in report.plans:
        lines.append(f"### Plan v{plan.version}" + (f": {plan.reason}" if plan.reason else ""))
        lines.append("")
        lines.append("| Sub-action | Mode | Depends | Target | Why |")
        lines.append("|---|---|---|---|---|")
        for s in plan.subactions:
            label = f"{s.name} (need: {s.need})" if s.need else s.name
            lines.append(
                f"| {label} | {s.mode} | {', '.join(s.depends)} | {s.target:.2f} | {s.reason} |"
            )
        lines.append("")
    return lines


def _rates_by_iteration(report: TaskReport) -> list[str]:
    """Each sub-action's rate from its first version to the one chosen after each
    iteration, and the task's."""
    lines = ["## Success per sub-action per iteration", ""]
    names = sorted({k for h in report.history for k in h if k != "task"})
    if report.history:
        first = first_rates(report)
        lines.append(
            "From each sub-action's first version (before any revision) to the version "
            "chosen at the end of each iteration."
        )
        lines.append("")
        lines.append(
            "| Sub-action | first version | "
            + " | ".join(f"it {i + 1}" for i in range(len(report.history)))
            + " |"
        )
        lines.append("|---|---|" + "---|" * len(report.history))
        for name in names + ["task"]:
            cells = [f"{first[name]:.2f}" if name in first else ""]
            cells += [f"{h[name]:.2f}" if name in h else "" for h in report.history]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _critiques(critiques: list[Critique]) -> list[str]:
    """Every critique the critic streamed, in arrival order."""
    lines = [
        "",
        "## Critiques",
        "",
        "| Sub-action | v | Mode | Success | Verdict | Cause | Advice |",
    ]
    lines.append("|---|---|---|---|---|---|---|")
    for c in critiques:
        advice = c.advice.replace("|", "/")[:160]
        lines.append(
            f"| {c.subaction} | {c.version} | {c.mode} | {c.success_rate:.2f} | {c.verdict} | "
            f"{c.cause} | {advice} |"
        )
    return lines


def _achievements(report: TaskReport) -> list[str]:
    """The share of the final evaluation's episodes that unlocked each achievement
    (nothing when none did)."""
    if not report.achievements:
        return []
    lines = [
        "",
        "## Final evaluation: achievements",
        "",
        "| Achievement | Episodes |",
        "|---|---|",
    ]
    for name, frac in sorted(report.achievements.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {name} | {frac:.0%} |")
    return lines


def _plots_and_video(plots: list[tuple[str, str]], summary: dict[str, Any]) -> list[str]:
    """The report's pictures and the episode video (nothing when there are none)."""
    if not (plots or summary.get("video")):
        return []
    lines = ["", "## Plots and video", ""]
    for title, name in plots:
        lines.append(f"![{title}]({name})")
    if summary.get("video"):
        shown = "; ".join(
            f"seed {e['seed']}: {'success' if e['success'] else 'failed'}, {e['steps']} steps"
            for e in summary.get("video_episodes", [])
        )
        lines.append(f"![evaluation episodes ({shown})]({summary['video']})")
    return lines


def _replay(run_dir: Path, summary: dict[str, Any]) -> list[str]:
    """How to replay the bundled final policy and open TensorBoard (nothing without a
    bundle)."""
    if not summary.get("policy"):
        return []
    return [
        "",
        "## Replay and TensorBoard",
        "",
        f"The final policy is bundled in `{summary['policy']}`: "
        f"`python run.py play {run_dir}` replays it on any seed (`--seed N --episodes K"
        " --video out.gif`).",
        "",
        f"TensorBoard (the PPO jobs' curves and the run's figures): "
        f"`tensorboard --logdir {run_dir}/tensorboard`.",
    ]
