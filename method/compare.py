"""``python run.py compare RUN_A RUN_B …``: finished runs side by side, from their folders.

Reads each run's ``summary.json`` (what the run computed when it finished: the final
evaluation's success and achievement rates, the Crafter scores, env steps, tokens,
wall time) and nothing else — no run is re-played. Prints one table, a column per run
and a difference column per run after the first (that run minus the first), and writes
one figure (``--plot``, default ``compare.png``).

The final success carries its 95 % interval (Wilson's score interval over the final
evaluation's episodes), and each difference of final success Newcombe's interval for a
difference of two proportions built from the two Wilson intervals: a difference whose
interval holds 0 is not one the evaluations can tell apart.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from method.paired import wilson_interval


class CompareError(Exception):
    """A folder that is not a finished run."""


@dataclass
class Run:
    label: str
    folder: Path
    summary: dict[str, Any]

    @property
    def successes(self) -> int:
        return round(self.summary["final_success"] * self.summary["final_episodes"])

    @property
    def episodes(self) -> int:
        return int(self.summary["final_episodes"])


def wilson(successes: int, n: int) -> tuple[float, float]:
    """Wilson's 95 % score interval for a proportion ((0, 1) with no episode): the one
    the run's report uses (:func:`method.paired.wilson_interval`)."""
    return wilson_interval(successes, n)


def newcombe(a: tuple[int, int], b: tuple[int, int]) -> tuple[float, float, float]:
    """(difference, low, high) of proportion b − a, each given as (successes, n):
    Newcombe's hybrid score interval (his method 10) from the Wilson intervals."""
    pa, pb = a[0] / max(a[1], 1), b[0] / max(b[1], 1)
    la, ua = wilson(*a)
    lb, ub = wilson(*b)
    d = pb - pa
    return d, d - math.hypot(pb - lb, ua - pa), d + math.hypot(ub - pb, pa - la)


REQUIRED = ("final_success", "final_episodes")


def load_run(folder: str | Path) -> Run:
    folder = Path(folder)
    path = folder / "summary.json"
    if not path.is_file():
        raise CompareError(
            f"{folder} is not a finished run: {path} is missing (a run writes it when it"
            " finishes; --resume an unfinished one first)"
        )
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CompareError(f"{path} is not readable JSON ({exc})") from None
    missing = [k for k in REQUIRED if not isinstance(summary.get(k), (int, float))]
    if missing:
        raise CompareError(f"{path} has no number for {', '.join(missing)}")
    return Run(folder.name, folder, summary)


def _labels(runs: list[Run]) -> None:
    """Folder names, or their paths where two runs share a name."""
    names = [r.label for r in runs]
    for r in runs:
        if names.count(r.label) > 1:
            r.label = str(r.folder)


ROWS: tuple[tuple[str, str, str], ...] = (
    ("Crafter score, final policy (%)", "score_final", "{:.2f}"),
    ("Crafter score, all episodes (%)", "score_all_episodes", "{:.2f}"),
    ("env steps, all episodes", "env_steps", "{:,.0f}"),
    ("env steps, training", "env_steps_training", "{:,.0f}"),
    ("env steps, code evaluation", "env_steps_code", "{:,.0f}"),
    ("env steps, final evaluation", "env_steps_final", "{:,.0f}"),
    ("wall time (s)", "wall_s", "{:,.1f}"),
    ("tokens in", "tokens_in", "{:,.0f}"),
    ("tokens out", "tokens_out", "{:,.0f}"),
    ("agent calls", "model_calls", "{:,.0f}"),
    ("stages learned / coded", "", ""),
)


def table(runs: list[Run]) -> list[list[str]]:
    """The comparison as rows of cells: a header, then one row per figure."""
    base = runs[0]
    header = ["", *(r.label for r in runs), *(f"Δ {r.label}" for r in runs[1:])]
    rows = [header]

    success = ["final success (95 % interval)"]
    for r in runs:
        low, high = wilson(r.successes, r.episodes)
        success.append(f"{r.summary['final_success']:.0%} [{low:.0%}, {high:.0%}] of {r.episodes}")
    for r in runs[1:]:
        d, low, high = newcombe((base.successes, base.episodes), (r.successes, r.episodes))
        success.append(f"{d:+.0%} [{low:+.0%}, {high:+.0%}]")
    rows.append(success)

    for title, key, fmt in ROWS:
        if not key:
            cells = [
                f"{r.summary.get('learned_stages', '?')} / {r.summary.get('coded_stages', '?')}"
                for r in runs
            ]
            rows.append([title, *cells, *("" for _ in runs[1:])])
            continue
        values = [r.summary.get(key) for r in runs]
        cells = [fmt.format(v) if isinstance(v, (int, float)) else "–" for v in values]
        diffs = []
        for v in values[1:]:
            ok = isinstance(v, (int, float)) and isinstance(values[0], (int, float))
            diffs.append(
                (
                    "+" + fmt.format(v - values[0])
                    if v - values[0] >= 0
                    else fmt.format(v - values[0])
                )
                if ok
                else "–"
            )
        rows.append([title, *cells, *diffs])

    names = achievement_names(runs)
    for name in names:
        rates = [r.summary.get("final_achievements", {}).get(name, 0.0) for r in runs]
        cells = [f"{v:.0%}" for v in rates]
        diffs = [f"{v - rates[0]:+.0%}" for v in rates[1:]]
        rows.append([f"  {name}", *cells, *diffs])
    return rows


def achievement_names(runs: list[Run]) -> list[str]:
    """Every achievement some run's final policy unlocked, commonest first."""
    best: dict[str, float] = {}
    for r in runs:
        for name, rate in r.summary.get("final_achievements", {}).items():
            best[name] = max(best.get(name, 0.0), float(rate))
    return sorted(best, key=lambda n: (-best[n], n))


def render(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for k, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
        if k == 1 + len(ROWS):
            lines.append("final evaluation, achievement rates:")
    return "\n".join(lines)


def plot(runs: list[Run], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = achievement_names(runs)
    colours = plt.get_cmap("tab10")
    fig = plt.figure(figsize=(11, max(4.0, 1.4 + 0.3 * len(names) * max(1, len(runs) / 2))))
    grid = fig.add_gridspec(2, 2, width_ratios=[1, 1.4])
    ax_success = fig.add_subplot(grid[0, 0])
    ax_score = fig.add_subplot(grid[1, 0])
    ax_ach = fig.add_subplot(grid[:, 1])
    xs = list(range(len(runs)))
    for i, r in enumerate(runs):
        low, high = wilson(r.successes, r.episodes)
        p = r.summary["final_success"]
        ax_success.bar(
            i, p, color=colours(i), yerr=[[max(0.0, p - low)], [max(0.0, high - p)]], capsize=6
        )
        ax_success.text(i, 0.04, f"{p:.0%}", ha="center", fontsize=9, color="white")
    ax_success.set_xticks(xs, [f"run {i + 1}" for i in xs])
    ax_success.set_ylim(0, 1.15)
    ax_success.set_title("final success (95 % interval)", fontsize=10)
    width = 0.8 / max(1, len(runs))
    for i, r in enumerate(runs):
        values = [r.summary.get("score_final", 0.0), r.summary.get("score_all_episodes", 0.0)]
        offsets = [k + (i - (len(runs) - 1) / 2) * width for k in range(2)]
        ax_score.bar(offsets, values, width, color=colours(i))
    ax_score.set_xticks([0, 1], ["final policy", "all episodes"])
    ax_score.set_ylabel("Crafter score (%)")
    ax_score.set_title("Crafter score", fontsize=10)
    height = 0.8 / max(1, len(runs))
    ys = list(range(len(names)))[::-1]
    for i, r in enumerate(runs):
        rates = [100 * r.summary.get("final_achievements", {}).get(n, 0.0) for n in names]
        at = [y + ((len(runs) - 1) / 2 - i) * height for y in ys]
        ax_ach.barh(at, rates, height, color=colours(i), label=f"run {i + 1}: {r.label}")
    ax_ach.set_yticks(ys, names, fontsize=8)
    ax_ach.set_xlim(0, 105)
    ax_ach.set_xlabel("% of final evaluation episodes")
    ax_ach.set_title("achievements of the final policy", fontsize=10)
    ax_ach.legend(fontsize=8, loc="lower right", frameon=False)
    for ax in (ax_success, ax_score, ax_ach):
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


PLOT_SUFFIXES = frozenset((".png", ".pdf", ".svg", ".jpg", ".jpeg", ".webp", ".eps", ".tif"))
"""Figure files ``--plot`` may name (formats matplotlib's default backend writes)."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="run.py compare",
        description="Compare finished runs from their folders (summary.json): final success "
        "with its 95 % interval, Crafter score, achievement rates, env steps, wall time, "
        "tokens, and each run's difference from the first.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="two or more run folders")
    p.add_argument("--plot", default="compare.png", help="figure to write (default: compare.png)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if len(args.runs) < 2:
        print("compare error: give at least two run folders", file=sys.stderr)
        return 2
    if Path(args.plot).suffix.lower() not in PLOT_SUFFIXES:
        print(
            f"compare error: --plot {args.plot}: a figure file ends in one of "
            f"{', '.join(sorted(PLOT_SUFFIXES))}",
            file=sys.stderr,
        )
        return 2
    try:
        runs = [load_run(r) for r in args.runs]
    except CompareError as exc:
        print(f"compare error: {exc}", file=sys.stderr)
        return 2
    _labels(runs)
    for i, r in enumerate(runs, 1):
        s = r.summary
        print(f"run {i}: {r.folder} ({s.get('task', '?')}, backend {s.get('backend', '?')})")
    print()
    print(render(table(runs)))
    print()
    try:
        print(f"plot: {plot(runs, Path(args.plot))}")
    except OSError as exc:  # the table above stands; only the figure is missing
        print(f"compare error: --plot {args.plot}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
