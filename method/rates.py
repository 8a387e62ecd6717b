"""The success rates a run's :class:`~messages.plan.TaskReport` gives per sub-action: read
alike by the report (:mod:`method.report`), its pictures (:mod:`method.plots`) and
TensorBoard (:mod:`method.tboard`)."""

from __future__ import annotations

from messages.plan import SubActionOutcome, TaskReport


def versioned(o: SubActionOutcome) -> bool:
    """Whether the outcome has a version (code or a policy): an inner loop whose every
    training job failed reports an empty stage, which is no learned version at 0."""
    return bool(o.stage.code or o.stage.policy_path)


def first_rates(report: TaskReport) -> dict[str, float]:
    """Sub-action → the success of its first version (the first critique of its first
    inner loop): where the loop started from, before any revision of an iteration. A
    sub-action whose first inner loop has no critique (its first training job or model
    call failed) has none: a later loop's version is not its first."""
    first_loop: dict[str, SubActionOutcome] = {}
    for o in report.outcomes:
        first_loop.setdefault(o.name, o)
    return {n: o.critiques[0].success_rate for n, o in first_loop.items() if o.critiques}


def best_rates(report: TaskReport) -> dict[str, dict[str, float]]:
    """Sub-action → mode ("code", "rl") → its best version's success rate, for every
    sub-action the outcomes name; a mode with no version (never tried, or every training
    job failed) is absent: it is no version at 0. The report's table, its picture and
    TensorBoard all read this."""
    best: dict[str, dict[str, float]] = {}
    for o in report.outcomes:
        got = best.setdefault(o.name, {})
        if versioned(o):
            got[o.mode] = max(got.get(o.mode, -1.0), o.success_rate)
    return best


def failed_rl(report: TaskReport) -> set[str]:
    """Sub-actions worked on in RL whose every training job failed (no learned version)."""
    tried = {o.name for o in report.outcomes if o.mode == "rl"}
    return {n for n, rates in best_rates(report).items() if n in tried and "rl" not in rates}
