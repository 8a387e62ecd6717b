"""BENCHMARKS.md: the measured comparison and per-achievement tables, then the published
anchors in a table of their own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .protocol import ACHIEVEMENTS, OBSERVATION, VARIANTS
from .published import PUBLISHED

BAR_WIDTH = 20
"""Cells of a 100 % bar: one per 5 %, eighth blocks in between, narrow enough for a
table cell."""
_EIGHTHS = " ▏▎▍▌▋▊▉"
"""Partial blocks, 0/8 to 7/8 of a cell."""


def bar(percent: float, width: int = BAR_WIDTH) -> str:
    """A text bar: ``width`` full blocks for 100 %, eighth blocks for the remainder."""
    cells = max(0.0, min(100.0, percent)) / 100.0 * width
    full = int(cells)
    rest = int(round((cells - full) * 8))
    if rest == 8:
        full, rest = full + 1, 0
    text = "█" * full + (_EIGHTHS[rest] if rest and full < width else "")
    return text or "·"


LABELS = {
    "rlgpt": "RL-GPT (this system)",
    "norl": "RL-GPT, RL disabled (same loop, no learner)",
    "code": "Code only (skill library, no RL)",
    "ppo": "PPO (SB3, primitive actions)",
}
"""Each variant's name in the tables."""


def _pct(value: float) -> str:
    return f"{value:.1f} %"


def _steps(n: int) -> str:
    return f"{n:,}"


def _duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _seeds_text(seeds: Mapping[str, Any]) -> str:
    parts = []
    for key, value in seeds.items():
        if isinstance(value, list) and len(value) == 2 and key != "final":
            parts.append(f"{key}: {value[0]}–{value[1]}")
        elif isinstance(value, list) and key == "final" and value:
            lo, hi = min(value), max(value)
            parts.append(f"final: {lo}–{hi}" + (f" ({len(value)})" if len(value) > 2 else ""))
        else:
            parts.append(f"{key}: {value}")
    return "; ".join(parts)


def render_markdown(report: Mapping[str, Any]) -> str:
    """BENCHMARKS.md: the measured figures, then the published anchors, apart."""
    meta, results = report["meta"], report["results"]
    mach, vers = meta["machine"], meta["versions"]
    lines = [
        "# Crafter benchmarks",
        "",
        f"Written by `{meta['command']}` on {meta['date']}"
        + (
            " (**quick**: small budgets, not comparable with published figures)"
            if meta["quick"]
            else ""
        )
        + ".",
        "",
        f"- **Machine**: {mach['cpu']}, {mach['cores']} cores, {mach['ram_gib']} GiB RAM "
        f"({mach['platform']})",
        "- **Versions**: " + ", ".join(f"{k} {v}" for k, v in vers.items()),
        f"- **Budget**: {meta['budget']:,} env steps per variant for the scoreboard; the final "
        f"agent is then evaluated on {meta['final_episodes']} unseen world seeds. Episodes are "
        f"Crafter's (until death or {meta['episode_steps']:,} steps). Base seed {meta['seed']}.",
        "- **Observation** (all variants' learners): the 9×7 local view one-hot, inventory and "
        "vitals (`rl.rl_env`, parts " + ", ".join(OBSERVATION) + ").",
        "- **Crafter score** = exp(mean over the 22 achievements of ln(1 + success %)) − 1. "
        "*Scoreboard*: over every episode completed within the budget (training and "
        "evaluation alike); *final agent*: over the final policy's episodes on unseen seeds.",
        "",
        "## Measured here",
        "",
        "All rows below were measured by this command, on this machine, with the same "
        "observation and env-step budget.",
        "",
        "| variant | score (scoreboard) | score (final agent) | diamond (final agent) "
        "| episodes (scoreboard / final) | env steps | wall time | seeds |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    runs = report.get("runs") or {name: {str(meta["seed"]): r} for name, r in results.items()}
    for name in VARIANTS:
        for seed, r in sorted(runs.get(name, {}).items(), key=lambda kv: int(kv[0])):
            label = LABELS[name] + (f", run seed {seed}" if len(meta.get("seeds", [0])) > 1 else "")
            if "error" in r:
                lines.append(f"| {label} | failed: {r['error'][:80]} | | | | | | |")
                continue
            lines.append(
                f"| {label} | {_pct(r['scoreboard']['score'])} | {_pct(r['final']['score'])} "
                f"| {_pct(r['final']['diamond'])} | {r['scoreboard']['episodes']} / "
                f"{r['final']['episodes']} | {_steps(r['env_steps'])} | "
                f"{_duration(r['wall_s'])} | {_seeds_text(r.get('seeds', {}))} |"
            )
    lines.append("")
    lines += _across_sections(report)
    for name in VARIANTS:
        r = results.get(name)
        if r is None or "error" in r:
            continue
        lines += _variant_section(name, r, len(meta.get("seeds", [0])) > 1)
    lines += [
        "## Published (not measured here)",
        "",
        "Crafter scores reported in the papers below, for orientation only: other code, "
        "machines and protocols (1M env steps for the learning agents; SPRING uses no "
        "training), **not** produced by this benchmark and not comparable figure for figure.",
        "",
        "| method (published) | Crafter score | source |",
        "|---|---:|---|",
    ]
    for anchor in PUBLISHED:
        lines.append(f"| {anchor['method']} | {anchor['score']:.1f} % | {anchor['source']} |")
    lines.append("")
    return "\n".join(lines)


def _variant_section(name: str, r: Mapping[str, Any], several: bool = False) -> list[str]:
    board, final = r["scoreboard"], r["final"]
    lines = [
        f"### {LABELS[name]}" + (f" (run seed {r.get('run_seed', 0)})" if several else ""),
        "",
        _DESCRIPTIONS[name],
        "",
        f"Crafter score: **{_pct(board['score'])}** scoreboard ({board['episodes']} episodes, "
        f"{_steps(board['steps'])} steps), **{_pct(final['score'])}** final agent "
        f"({final['episodes']} episodes). Diamond (final agent): {_pct(final['diamond'])}. "
        f"Env steps in all: {_steps(r['env_steps'])}; wall time {_duration(r['wall_s'])}. "
        f"Seeds: {_seeds_text(r.get('seeds', {}))}.",
        "",
    ]
    extra = []
    if "causes" in r:
        causes = ", ".join(f"{k} {v}" for k, v in sorted(r["causes"]["scoreboard"].items()))
        extra.append(f"How scoreboard episodes ended: {causes}.")
    if "episode_kinds" in r:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r["episode_kinds"].items()))
        extra.append(
            f"Episodes by kind: {kinds}. The run's own final success on "
            f"`{r['target']}`: {100 * r['final_success']:.1f} %. Run folder `{r['run_dir']}`."
        )
    if r.get("scoreboard_by_kind"):
        parts = ", ".join(
            f"{kind} {_pct(g['score'])} ({g['episodes']} episodes, {_steps(g['steps'])} steps)"
            for kind, g in sorted(r["scoreboard_by_kind"].items())
        )
        extra.append(
            f"The scoreboard's episodes by kind, each kind's Crafter score over its own: {parts}."
        )
    if "ppo" in r:
        extra.append("PPO settings: " + ", ".join(f"{k}={v}" for k, v in r["ppo"].items()) + ".")
    if extra:
        lines += [" ".join(extra), ""]
    lines += [
        "| achievement | scoreboard | | final agent | |",
        "|---|---:|---|---:|---|",
    ]
    for a in ACHIEVEMENTS:
        s, f = board["rates"][a], final["rates"][a]
        lines.append(f"| {a} | {s:.1f} % | `{bar(s)}` | {f:.1f} % | `{bar(f)}` |")
    lines.append("")
    return lines


_DESCRIPTIONS = {
    "rlgpt": "The full system (`run.py`, offline backend unless the config says otherwise): "
    "slow agent, fast agent and critic over code and PPO stages. Scoreboard over every "
    "episode the run stepped (`episodes.jsonl`: code evaluations, training, final).",
    "norl": "The same system and loop as RL-GPT (`run.py`, the same config), with RL "
    "disabled: no learner actor (`[actors.learner] count = 0`), so the slow agent keeps "
    "every sub-action as code and only the code loop (critique, revisions) runs.",
    "code": "The skill library's composed curriculum policy, no RL: one coded stage per "
    "achievement in `knowledge.recipes.curriculum()` order, the library's best template "
    "for each, survival needs served by the task planner (`episodes.composite.run_composed`). "
    "Code does not learn, so the final agent is the same policy on unseen seeds.",
    "ppo": "Plain stable-baselines3 PPO, Crafter's 17 primitive actions, no coded actions, "
    "Crafter's own reward (first unlock of an achievement in an episode +1, health "
    "change ±0.1), the system's learner settings; every training episode counts for the "
    "scoreboard; the final policy samples its actions.",
}


def _interval(mi: Mapping[str, Any], unit: str = " %") -> str:
    if mi.get("mean") is None:
        return "—"
    if mi.get("low") is None:
        return f"{_one(mi['mean'])}{unit} (1 run)"
    low, high = mi["low"], mi["high"]
    if unit == " %":  # a rate's interval within 0–100 %
        low, high = max(0.0, low), min(100.0, high)
    return f"{_one(mi['mean'])}{unit} [{_one(low)}, {_one(high)}]"


def _one(value: float) -> str:
    """One decimal, never "-0.0"."""
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


def _across_sections(report: Mapping[str, Any]) -> list[str]:
    """Each variant across its run seeds, the paired comparisons, the score curves."""
    meta = report["meta"]
    summaries = report.get("across") or {}
    if not summaries:
        return []
    lines = [
        "## Across run seeds",
        "",
        f"Run seeds {', '.join(str(s) for s in meta.get('seeds', [meta['seed']]))}: one run "
        "per variant and seed, every run of seed *s* reporting its final agent on the same "
        f"{meta['final_episodes']} worlds. Mean over runs with its 95 % Student t interval "
        "[low, high] (n − 1 degrees of freedom: with 3 runs, ± 4.3 standard errors). "
        "Diamond, pooled: every final episode of every run, with its 95 % Wilson interval.",
        "",
        "| variant | runs | score (scoreboard) | score (final agent) | diamond (final, "
        "mean of runs) | diamond (final, pooled) | env steps | wall time |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in VARIANTS:
        s = summaries.get(name)
        if not s:
            continue
        pooled = s["diamond_pooled"]
        dia = (
            f"{pooled['wins']}/{pooled['episodes']} [{pooled['low']:.1f}, {pooled['high']:.1f}] %"
            if pooled["episodes"]
            else "—"
        )
        steps = s["env_steps"]["mean"]
        wall = s["wall_s"]["mean"]
        lines.append(
            f"| {LABELS[name]} | {s['runs']}"
            + (f" ({s['failed']} failed)" if s["failed"] else "")
            + f" | {_interval(s['scoreboard'])} | {_interval(s['final'])} "
            f"| {_interval(s['diamond_runs'])} | {dia} "
            f"| {_steps(round(steps)) if steps is not None else '—'} "
            f"| {_duration(wall) if wall is not None else '—'} |"
        )
    lines.append("")
    pairs = report.get("paired") or {}
    if pairs:
        lines += [
            "### Paired on the same final worlds",
            "",
            "A against B on every final world both played (all shared run seeds): the mean "
            "per-world difference in achievements unlocked (A − B, of 22) with its 95 % t "
            "interval; diamonds (worlds where only A, only B got one, and the lower bound of "
            "the paired difference, McNemar-style: above 0 means A is measurably better); the "
            "per-run difference in the final agent's Crafter score.",
            "",
            "| A − B | worlds | achievements per world | diamond: A / B (only A, only B) "
            "| diamond difference (lower bound) | final score difference |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for key, p in pairs.items():
            a, b = key.split("-")
            d = p["diamond"]
            lines.append(
                f"| {LABELS[a]} − {LABELS[b]} | {p['worlds']} "
                f"| {_interval(p['achievements'], '')} "
                f"| {d['a']} / {d['b']} ({d['a_only']}, {d['b_only']}) "
                + (
                    f"| {100 * d['difference']:+.1f} % ({100 * d['lower']:+.1f} %) "
                    if d["a_only"] + d["b_only"]
                    else "| 0 (no world differs) "
                )
                + f"| {_interval(p['score'], ' pt')} |"
            )
        lines.append("")
    points = sorted(
        {int(k) for by_seed in (report.get("runs") or {}).values() for r in by_seed.values()
         for k in r.get("curve", {})}
    )  # fmt: skip
    if points:
        lines += [
            "### Score curves (scoreboard, counted env steps)",
            "",
            "Each run's scoreboard score over the episodes booked within the first *N* "
            "counted env steps (read from the one run at those points).",
            "",
            "| variant | run seed | " + " | ".join(f"{p:,}" for p in points) + " |",
            "|---|---:|" + "---:|" * len(points),
        ]
        for name in VARIANTS:
            for seed, r in sorted(
                (report.get("runs") or {}).get(name, {}).items(), key=lambda kv: int(kv[0])
            ):
                if "curve" not in r:
                    continue
                cells = [_pct(r["curve"][str(p)]) if str(p) in r["curve"] else "—" for p in points]
                lines.append(f"| {LABELS[name]} | {seed} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines
