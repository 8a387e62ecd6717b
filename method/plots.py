"""The report's pictures (matplotlib, written beside ``report.md``):

- ``success.png`` — success per sub-action per iteration as a grid: one row per
  sub-action in plan order and one for the whole task, a first column with each
  sub-action's first version (before any revision) and one column per iteration, each
  cell coloured by its rate and labelled with it. A grid reads the same with one
  iteration or twenty, and no line hides another.
- ``achievements.png`` — the final policy's rate for every achievement of the game
  (the ones it never unlocked included, so the gaps show), with the Crafter score the
  summary computed.
- ``coded_vs_learned.png`` — per sub-action, its best coded and best learned success
  side by side, the version the final policy uses outlined.

Scores are read from the summary and the report, never computed here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from messages.plan import TaskReport
from method.rates import best_rates, failed_rl, first_rates

CODED_RGB = "#4c72b0"
LEARNED_RGB = "#dd8452"
DPI = 110


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def report_plots(
    run_dir: Path, report: TaskReport, summary: dict[str, Any]
) -> list[tuple[str, str]]:
    """Write the pictures the run has data for; [(title, file name)] in report order."""
    made = []
    if report.history:
        success_grid(report, Path(run_dir) / "success.png")
        made.append(("success per sub-action per iteration", "success.png"))
    if report.stages:
        achievement_bars(report, summary, Path(run_dir) / "achievements.png")
        made.append(("achievements of the final policy", "achievements.png"))
    if report.outcomes:
        coded_vs_learned(report, Path(run_dir) / "coded_vs_learned.png")
        made.append(("coded against learned", "coded_vs_learned.png"))
    return made


def _plan_order(report: TaskReport) -> list[str]:
    """Sub-action names in the last plan's order, then any others the history has."""
    names = [s.name for s in report.plans[-1].subactions] if report.plans else []
    seen = {k for h in report.history for k in h if k != "task"}
    seen |= {o.name for o in report.outcomes}
    return [n for n in names if n in seen] + sorted(seen - set(names))


def success_grid(report: TaskReport, path: Path) -> Path:
    plt = _pyplot()

    rows = _plan_order(report)
    rows = [r for r in rows if any(r in h for h in report.history)] + ["task"]
    # The first column is each sub-action's first version, before any revision; then the
    # version chosen at the end of each iteration.
    first = first_rates(report)
    columns = [first, *report.history]
    cols = len(columns)
    grid = np.full((len(rows), cols), np.nan)
    for j, rates in enumerate(columns):
        for i, name in enumerate(rows):
            if name in rates:
                grid[i, j] = rates[name]
    label_w = 0.09 * max(len(r) for r in rows)  # inches for the row names
    width = min(14.0, label_w + 1.0 + 0.7 * max(cols, 3))
    fig, ax = plt.subplots(figsize=(width, 1.2 + 0.4 * len(rows)))
    cmap = plt.get_cmap("RdYlGn").with_extremes(bad="#eeeeee")
    ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    for i in range(len(rows)):
        for j in range(cols):
            value = grid[i, j]
            text = "–" if np.isnan(value) else f"{value:.2f}"
            # White on the dark ends of the colour map, black on its pale middle.
            dark = not np.isnan(value) and (value < 0.2 or value > 0.8)
            ax.text(
                j, i, text, ha="center", va="center", fontsize=9,
                color="white" if dark else "black",
                weight="bold" if rows[i] == "task" else "normal",
            )  # fmt: skip
    ax.axhline(len(rows) - 1.5, color="black", linewidth=2)  # the task row apart
    ax.axvline(0.5, color="black", linewidth=2)  # the first versions apart
    ax.set_xticks(range(cols), ["v1"] + [str(j) for j in range(1, cols)])
    ax.set_xlabel("first version, then iteration")
    ax.set_yticks(range(len(rows)), rows)
    ax.tick_params(length=0)
    ax.set_title("Success per sub-action per iteration", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def achievement_bars(report: TaskReport, summary: dict[str, Any], path: Path) -> Path:
    plt = _pyplot()
    from crafter import constants

    names = list(constants.achievements)
    names += sorted(set(report.achievements) - set(names))
    rates = [100.0 * report.achievements.get(n, 0.0) for n in names]
    order = sorted(range(len(names)), key=lambda i: (-rates[i], names[i]))
    fig, ax = plt.subplots(figsize=(7.5, 0.8 + 0.24 * len(names)))
    ys = list(range(len(names)))[::-1]
    colours = [CODED_RGB if rates[i] > 0 else "#cccccc" for i in order]
    ax.barh(ys, [rates[i] for i in order], color=colours)
    ax.set_yticks(ys, [names[i] for i in order], fontsize=8)
    for y, i in zip(ys, order, strict=True):
        ax.text(rates[i] + 1, y, f"{rates[i]:.0f}%", va="center", fontsize=7)
    ax.set_xlim(0, 112)
    ax.set_xlabel(f"% of the final evaluation's {report.final_episodes} episodes")
    score = summary.get("score_final")
    extra = f" — Crafter score {score:.1f}%" if isinstance(score, (int, float)) else ""
    ax.set_title(f"Achievements of the final policy{extra}", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def coded_vs_learned(report: TaskReport, path: Path) -> Path:
    plt = _pyplot()
    from matplotlib.patches import Patch

    names = _plan_order(report)
    best = {n: {} for n in names} | best_rates(report)
    failed = failed_rl(report)
    used = {st.subtask.name: ("rl" if st.policy_path else "code") for st in report.stages}
    fig, ax = plt.subplots(figsize=(7.5, 1.3 + 0.55 * len(names)))
    height = 0.38
    ys = list(range(len(names)))[::-1]  # plan order, top to bottom
    for k, (mode, colour) in enumerate((("code", CODED_RGB), ("rl", LEARNED_RGB))):
        for y, name in zip(ys, names, strict=True):
            at = y + (0.5 - k) * height
            rate = best[name].get(mode)
            if rate is None:
                why = "training failed" if mode == "rl" and name in failed else "not tried"
                ax.text(0.01, at, why, va="center", fontsize=7, color="grey")
                continue
            chosen = used.get(name) == mode
            ax.barh(
                at, rate, height, color=colour,
                edgecolor="black" if chosen else colour, linewidth=1.8 if chosen else 0,
            )  # fmt: skip
            ax.text(rate + 0.01, at, f"{rate:.2f}", va="center", fontsize=8)
    ax.set_yticks(ys, names, fontsize=9)
    ax.set_ylim(-0.6, len(names) - 0.4)  # room for the last row's lower bar
    ax.set_xlim(0, 1.12)
    ax.set_xlabel("success of the best version")
    ax.spines[["top", "right"]].set_visible(False)
    handles = [
        Patch(color=CODED_RGB, label="coded"),
        Patch(color=LEARNED_RGB, label="learned (PPO)"),
        Patch(
            facecolor="white", edgecolor="black", linewidth=1.8, label="used by the final policy"
        ),
    ]
    ax.legend(
        handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3,
        frameon=False, fontsize=8,
    )  # fmt: skip
    ax.set_title("Coded against learned, per sub-action", fontsize=10, pad=24)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
