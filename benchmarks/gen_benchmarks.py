#!/usr/bin/env python3
"""Write BENCHMARKS.md from what is under ``benchmarks/results/``.

    python benchmarks/gen_benchmarks.py            rewrite BENCHMARKS.md
    python benchmarks/gen_benchmarks.py --check    exit 1 if BENCHMARKS.md is not what
                                                   this would write (a test runs it)

The page is never edited by hand. Its sources, all under ``benchmarks/results/``:

- ``figures.toml``: the headline figures (each read from a raw result file named there,
  or, where no machine-readable result exists, written in it with its interval), each
  with its config, worlds, commit, date and the command that reproduces it; and the
  tables of the areas' sections (``[tables.NAME]``: which raw files, which rows).
- ``<area>/summary.md``: one per area section (``AREAS``), its text written by hand; a
  line ``{{NAME}}`` stands for the table ``[tables.NAME]`` of ``figures.toml``.
- ``arbiter/section.md`` with ``arbiter/summary.json``: the survival arbiter's section,
  taken verbatim (its body: no heading) when both files are there; otherwise the section
  says it is not measured yet.
- ``history.md``: the experiment record, one ``## YYYY-MM-DD — title`` entry each,
  newest first.

The page may name no "session" by number and no absolute path of a machine: the
generator refuses to write one that does, naming the source.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import statistics
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "BENCHMARKS.md"
TITLE = "# Benchmarks"
FIRST_SECTION = "Current figures of the shipped configs"
ARBITER_SECTION = "Survival arbiter (learned vs coded)"

AREAS: tuple[tuple[str, str], ...] = (
    ("crafter", "Crafter: `crafter.toml` at 1M env steps (`bench_crafter.py`)"),
    (
        "method",
        "The whole method: `diamond.toml` and learned over code (`bench_method.py`, "
        "`bench_confirm.py`)",
    ),
    ("deaths", "Survival code and the skill library (`bench_deaths.py`, `bench_skills.py`)"),
    (
        "learner",
        "Learners and options (`bench_learner.py`, `bench_options.py`, "
        "`bench_start_states.py`, `bench_collect.py`)",
    ),
    ("runtime", "Runtime: the broker against raw pyzmq (`bench_runtime.py`)"),
    ("env", "Environment: Crafter steps per second (`bench_env.py`)"),
    ("device", "GPU machines and scaling (`device_check.sh`, `bench_scaling.py`)"),
    ("models", "Real local models"),
    ("llm_calls", "Local model calls: seconds by role, prompt cache (`bench_llm_calls.py`)"),
    ("minetest", "The 3-D world: Minetest (`bench_minetest.py`)"),
)
"""Each area's section, in order: its folder under ``benchmarks/results/`` (which holds
its ``summary.md``) and its heading."""

ARBITER_AFTER = "deaths"
"""The area section the survival arbiter's section follows."""

SESSION = re.compile(r"\bsession\s+\d", re.IGNORECASE)
ABSOLUTE = re.compile(r"(?<![\w.~-])/(?:work|tmp|root|home|Users|mnt|scratch)/")
PLACEHOLDER = re.compile(r"^\{\{([A-Za-z0-9_]+)\}\}$")
ENTRY = re.compile(r"^## (\d{4}-\d{2}-\d{2}) — (.+)$")
STAMP = re.compile(r"(?:^|/)(\d{4})(\d{2})(\d{2})-")


class SourceError(SystemExit):
    """A source that cannot make the page: names the file and what is wrong."""


# ------------------------------------------------------------------ reading and stats


def load(name: str) -> Any:
    """A raw result under ``benchmarks/results/`` (JSON, gzipped or not)."""
    path = RESULTS / name
    if not path.is_file():
        raise SourceError(f"gen_benchmarks: no such result file benchmarks/results/{name}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def stamp(name: str) -> str | None:
    """The date a result file's name starts with (``20261130-…``), as 2026-11-30."""
    m = STAMP.search(name)
    return f"{m[1]}-{m[2]}-{m[3]}" if m else None


def wilson(k: int, n: int) -> tuple[float, float]:
    """95 % Wilson interval of k successes in n."""
    if n == 0:
        return 0.0, 1.0
    z, p = 1.959963984540054, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    """Exact 95 % interval of a binomial share (bisection on the binomial tails), as
    ``bench_deaths.py --compare`` computes it."""
    if n == 0:
        return 0.0, 1.0

    def tail(p: float, ks: Iterable[int]) -> float:
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in ks)

    def solve(f: Callable[[float], float], increasing: bool) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if (f(mid) < 0.025) == increasing:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    lower = 0.0 if k == 0 else solve(lambda p: tail(p, range(k, n + 1)), True)
    upper = 1.0 if k == n else solve(lambda p: tail(p, range(0, k + 1)), False)
    return lower, upper


def paired(before: str, after: str) -> dict[str, Any]:
    """Two 0/1 strings over the same worlds: gained, lost, the difference in points and
    its exact 95 % interval (Clopper–Pearson on the discordant worlds)."""
    if len(before) != len(after):
        raise SourceError("gen_benchmarks: paired strings of different lengths")
    n = len(before)
    gained = sum(1 for x, y in zip(before, after, strict=True) if (x, y) == ("0", "1"))
    lost = sum(1 for x, y in zip(before, after, strict=True) if (x, y) == ("1", "0"))
    d = gained + lost
    lo, hi = clopper_pearson(gained, d)
    return {
        "n": n,
        "gained": gained,
        "lost": lost,
        "diff": 100 * (gained - lost) / n,
        "low": 100 * d / n * (2 * lo - 1) if d else 0.0,
        "high": 100 * d / n * (2 * hi - 1) if d else 0.0,
    }


def crafter_score(rates: Mapping[str, float]) -> float:
    """Crafter's score in % from success rates in %: exp(mean ln(1 + rate)) − 1."""
    logs = [math.log(1.0 + r) for r in rates.values()]
    return math.exp(sum(logs) / len(logs)) - 1.0


# ------------------------------------------------------------------ formatting


def pct(x: float, digits: int = 1) -> str:
    return f"{x:.{digits}f} %"


def signed(x: float, digits: int) -> str:
    """A number with its sign, a minus sign for a negative one (−0.005, +0.017)."""
    return f"{x:+.{digits}f}".replace("-", "−")


def span(low: float, high: float, digits: int = 1, sign: bool = False) -> str:
    if sign:
        return f"[{signed(low, digits)}, {signed(high, digits)}]"
    return f"[{low:.{digits}f}, {high:.{digits}f}]".replace("-", "−")


def num(x: float) -> str:
    return f"{x:,.0f}"


def table(head: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> list[str]:
    """Markdown table lines; ``align``: one letter a column, ``l`` or ``r`` (default l)."""
    align = align.ljust(len(head), "l")
    rule = ["---:" if a == "r" else "---" for a in align]
    return [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(rule) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


# ------------------------------------------------------------------ headline figures


def _across(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    data = load(entry["file"])
    variant = entry["variant"]
    if variant not in data.get("across", {}):
        raise SourceError(f"gen_benchmarks: {entry['file']} has no variant {variant!r}")
    return data["across"][variant]


def _relative(entry: Mapping[str, Any], mean: float) -> str:
    if "relative_to" not in entry:
        return ""
    other = entry["relative_to"]
    base = _across(other)["final"]["mean"]
    return f" ({mean / base:.3f} of {other['label']})"


def read_method_final(entry: Mapping[str, Any]) -> tuple[str, str]:
    s = load(entry["file"])["summary"]
    n = s["final_episodes"]
    k = round(s["final_success"] * n)
    lo, hi = wilson(k, n)
    return f"**{100 * k / n:.0f} %** ({k}/{n})", f"[{100 * lo:.0f}, {100 * hi:.0f}] %"


def read_crafter(part: str) -> Callable[[Mapping[str, Any]], tuple[str, str]]:
    def read(entry: Mapping[str, Any]) -> tuple[str, str]:
        m = _across(entry)[part]
        value = f"**{pct(m['mean'])}**" + (_relative(entry, m["mean"]) if part == "final" else "")
        return value, span(m["low"], m["high"]) + " %"

    return read


def read_crafter_diamonds(entry: Mapping[str, Any]) -> tuple[str, str]:
    d = _across(entry)["diamond_pooled"]
    share = 100 * d["wins"] / d["episodes"]
    return f"{d['wins']}/{d['episodes']} ({pct(share)})", span(d["low"], d["high"]) + " %"


def read_confirm(entry: Mapping[str, Any]) -> tuple[str, str]:
    rows = [r for r in load(entry["file"])["rows"] if r["stage"] == entry["stage"]]
    if len(rows) != 1:
        raise SourceError(f"gen_benchmarks: {entry['file']}: no one row for {entry['stage']}")
    r = rows[0]
    return (
        f"**{signed(r['difference'], 3)}** on {num(r['pairs'])} pairs",
        span(r["lower"], r["upper"], 3, sign=True),
    )


def read_hand(entry: Mapping[str, Any]) -> tuple[str, str]:
    return entry["value"], entry["interval"]


READERS: dict[str, Callable[[Mapping[str, Any]], tuple[str, str]]] = {
    "method_final": read_method_final,
    "crafter_final": read_crafter("final"),
    "crafter_scoreboard": read_crafter("scoreboard"),
    "crafter_diamonds": read_crafter_diamonds,
    "confirm": read_confirm,
    "hand": read_hand,
}
"""How a headline figure's value and interval are read (``read`` in figures.toml)."""


def headline(figures: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = []
    for entry in figures:
        reader = READERS.get(entry.get("read", ""))
        if reader is None:
            raise SourceError(
                f"gen_benchmarks: figures.toml: {entry.get('figure')!r}: "
                f"read must be one of {', '.join(READERS)}"
            )
        if "file" in entry and stamp(entry["file"]) not in (None, entry["date"]):
            raise SourceError(
                f"gen_benchmarks: figures.toml: {entry['figure']!r}: date "
                f"{entry['date']} but {entry['file']} is of {stamp(entry['file'])}"
            )
        value, interval = reader(entry)
        source = f"`{entry['file']}`" if "file" in entry else entry["source"]
        commands = entry["command"] if isinstance(entry["command"], list) else [entry["command"]]
        command = ", then ".join(
            f"`{c}`" if c.split(" ", 1)[0] in ("python", "bash") else c for c in commands
        )
        rows.append(
            [
                entry["figure"],
                entry["config"],
                value,
                interval,
                entry["worlds"],
                f"{entry['commit']}, {entry['date']}",
                command,
                source,
            ]
        )
    head = [
        "figure",
        "config",
        "value",
        "95 % interval",
        "worlds, seeds",
        "measured at",
        "reproduce",
        "raw result (under `benchmarks/results/`)",
    ]
    return table(head, rows)


# ------------------------------------------------------------------ area tables


def t_crafter_across(spec: Mapping[str, Any]) -> list[str]:
    def mean(m: Mapping[str, float], bold: bool = False) -> str:
        value = f"**{pct(m['mean'])}**" if bold else pct(m["mean"])
        return f"{value} {span(m['low'], m['high'])}"

    rows = []
    for row in spec["rows"]:
        data = load(row["file"])
        a = data["across"][row["variant"]]
        d = a["diamond_pooled"]
        rows.append(
            [
                row["label"],
                str(a["runs"]),
                mean(a["scoreboard"]),
                mean(a["final"], bold=True),
                f"{d['wins']}/{d['episodes']} {span(d['low'], d['high'])} %",
                num(a["env_steps"]["mean"]),
                f"{row['commit']}, {data['meta']['date'][:10]}",
            ]
        )
    head = [
        "variant",
        "runs",
        "scoreboard [95 % t]",
        "final agent [95 % t]",
        "diamonds, final (pooled, Wilson)",
        "env steps a run",
        "measured at",
    ]
    return table(head, rows, "lrrrrrl")


def t_crafter_achievements(spec: Mapping[str, Any]) -> list[str]:
    columns = []
    for col in spec["columns"]:
        runs = load(col["file"])["runs"][col["variant"]]
        rates: dict[str, list[float]] = {}
        for run in runs.values():
            for name, rate in run["final"]["rates"].items():
                rates.setdefault(name, []).append(rate)
        columns.append({name: statistics.fmean(v) for name, v in rates.items()})
    names = sorted(set().union(*columns))
    rows = [[f"`{name}`", *(pct(c.get(name, 0.0), 0) for c in columns)] for name in names]
    head = ["achievement", *(c["label"] for c in spec["columns"])]
    return table(head, rows, "l" + "r" * len(columns))


def t_published(spec: Mapping[str, Any]) -> list[str]:
    rows = [[p["method"], pct(p["score"]), p["source"]] for p in load(spec["file"])["published"]]
    return table(["method (published)", "Crafter score", "source"], rows, "lrl")


def t_method_run(spec: Mapping[str, Any]) -> list[str]:
    data = load(spec["file"])
    s = data["summary"]
    n = s["final_episodes"]
    k = round(s["final_success"] * n)
    lo, hi = wilson(k, n)
    kinds = ", ".join(f"{kind} {num(v)}" for kind, v in sorted(s["env_steps_by_kind"].items()))
    rows = [
        [
            "final diamond success",
            f"**{k}/{n}** ({100 * k / n:.0f} %, Wilson {100 * lo:.0f}–{100 * hi:.0f} %)",
        ],
        [
            "stop reason",
            f"`{s['stop_reason']}` after {s['iterations']} "
            f"iteration{'' if s['iterations'] == 1 else 's'}; "
            f"{s['coded_stages']} coded stages, {s['learned_stages']} learned",
        ],
        ["counted env steps", f"{num(s['env_steps'])} ({kinds})"],
        ["wall time", f"{s['wall_s']:.0f} s"],
        [
            "counted env steps / wall s",
            f"{num(data['run_steps_per_s'])} = **{data['ratio']:.3f}** "
            f"of the bare-loop limit ({num(data['limit_steps_per_s'])} "
            "steps/s, measured in the same command)",
        ],
        ["core utilisation", f"**{data['core_utilisation']:.3f}** of {data['cores']} cores"],
        [
            "Crafter score",
            f"{pct(s['score_all_episodes'])} over every episode, "
            f"{pct(s['score_final'])} for the final policy",
        ],
        ["measured at", f"{spec['commit']}, {stamp(spec['file'])}"],
    ]
    return table(["measure", "value"], rows)


def t_confirm(spec: Mapping[str, Any]) -> list[str]:
    rows = []
    for entry in spec["rows"]:
        data = load(entry["file"])
        first, last = data["seeds"]
        for r in data["rows"]:
            rows.append(
                [
                    str(data["run_seed"]),
                    f"`{r['stage']}`",
                    entry.get("note", ""),
                    f"{num(first)}–{num(last)}",
                    num(r["pairs"]),
                    f"{r['coded']} ({r['coded'] / r['pairs']:.2f})",
                    f"{r['learned']} ({r['learned'] / r['pairs']:.2f})",
                    f"**{signed(r['difference'], 3)}** "
                    f"{span(r['lower'], r['upper'], 3, sign=True)}",
                    f"{r['task_coded']} → {r['task_learned']}, {signed(r['task_difference'], 3)} "
                    f"{span(r['task_lower'], r['task_upper'], 3, sign=True)}",
                    stamp(entry["file"]) or "",
                ]
            )
    head = [
        "run seed",
        "stage",
        "check",
        "confirm worlds",
        "pairs (reached)",
        "code",
        "learned",
        "learned − code [95 %]",
        "diamonds: code → learned [95 %]",
        "date",
    ]
    return table(head, rows, "rllrrrrrll")


def t_screens(spec: Mapping[str, Any]) -> list[str]:
    sets = load(spec["file"])["sets"]
    labels = spec.get("labels", {})
    rows = []
    for pair in spec["pairs"]:
        name, base, other = pair["set"], pair["base"], pair["tree"]
        strings = sets[name]
        p = paired(strings[base], strings[other])
        rows.append(
            [
                pair.get("label", name),
                labels.get(base, base),
                labels.get(other, other),
                str(strings[base].count("1")),
                f"**{strings[other].count('1')}**",
                f"{p['gained']} / {p['lost']}",
                f"**{signed(p['diff'], 1)}** {span(p['low'], p['high'], sign=True)}",
            ]
        )
    head = [
        "worlds",
        "baseline",
        "tried",
        "diamonds, baseline",
        "diamonds, tried",
        "gained / lost",
        "paired difference, points [95 % exact]",
    ]
    return table(head, rows, "lllrrrr")


def t_pooled(spec: Mapping[str, Any]) -> list[str]:
    rows = []
    for group in spec["groups"]:
        sets = load(group["file"])["sets"]
        k = n = 0
        for use in group["use"]:
            name, key = use.split(":")
            k += sets[name][key].count("1")
            n += len(sets[name][key])
        lo, hi = wilson(k, n)
        rows.append(
            [
                group["label"],
                f"{num(k)} / {num(n)}",
                f"**{pct(100 * k / n)}**",
                span(100 * lo, 100 * hi) + " %",
                group["commit"],
            ]
        )
    head = [
        "the skill library's diamond chain",
        "diamonds / worlds",
        "share",
        "Wilson 95 %",
        "code",
    ]
    return table(head, rows, "lrrrl")


def _successes(records: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    played = [r for r in records if "success" in r]
    return sum(1 for r in played if r["success"]), len(played)


def t_ablation(spec: Mapping[str, Any]) -> list[str]:
    order = spec["variants"]
    rows = []
    for sub in spec["subs"]:
        found: dict[str, list[float]] = {}
        picks: list[str] = []
        coded = ""
        for name in sub["files"]:
            for row in load(name):
                if row["variant"] == "pick":
                    picks.append(row["picked"])
                    continue
                wins, n = _successes(row["records"])
                if row["variant"] == "coded version":
                    coded = f"{wins / n:.2f}"
                    worlds = n
                found.setdefault(row["variant"], []).append(wins / n)
        cells = []
        for variant in order:
            rates = found.get(variant)
            cells.append(f"{statistics.fmean(rates):.2f} ({len(rates)})" if rates else "–")
        same = sum(1 for p in picks if p == "coded version")
        rows.append(
            [
                f"`{sub['sub']}` ({worlds} worlds)",
                *cells,
                f"**{coded}**",
                f"the code in all {len(picks)} runs"
                if same == len(picks)
                else f"the code in {same} of {len(picks)} runs",
            ]
        )
    head = ["sub-action", *spec["labels"], "code only", "RL-GPT's pick"]
    return table(head, rows, "l" + "r" * (len(order) + 1) + "l")


def t_sample_efficiency(spec: Mapping[str, Any]) -> list[str]:
    data = load(spec["file"])
    rows = []
    points = None
    for name, runs in data.items():
        curves = list(zip(*runs, strict=True))
        points = [statistics.fmean(step for step, _ in point) for point in curves]
        rows.append([name, *(f"{statistics.fmean(s for _, s in point):.2f}" for point in curves)])
    head = ["actions", *(f"~{p / 1000:.0f}k" if p else "0" for p in points or [])]
    return table(head, rows, "l" + "r" * (len(head) - 1))


def t_runtime(spec: Mapping[str, Any]) -> list[str]:
    def by_size(files: Sequence[str]) -> dict[int, list[Mapping[str, Any]]]:
        found: dict[int, list[Mapping[str, Any]]] = {}
        for name in files:
            for r in load(name)["results"]:
                found.setdefault(r["payload_bytes"], []).append(r)
        return found

    before, after = by_size(spec["before"]), by_size(spec["after"])

    def size(b: int) -> str:
        return f"{b // 1024} KiB" if b >= 1024 else f"{b} B"

    def cpu(r: Mapping[str, Any]) -> str:
        return f"{r['ours']['cpu_us_per_rt']['throughput']['total']:.1f}"

    rows = []
    for b in sorted(after):
        rows.append(
            [
                size(b),
                ", ".join(f"{r['throughput_ratio']:.2f}" for r in before.get(b, [])),
                ", ".join(f"**{r['throughput_ratio']:.2f}**" for r in after[b]),
                ", ".join(f"{r['p50_ratio']:.2f}" for r in after[b]),
                ", ".join(cpu(r) for r in before.get(b, [])),
                ", ".join(cpu(r) for r in after[b]),
            ]
        )
    head = [
        "payload",
        "round trips/s ours/raw, before",
        "after (goal ≥ 0.5)",
        "p50 ours/raw, after (goal ≤ 2)",
        "CPU µs a round trip (ours, 256 in flight), before",
        "after",
    ]
    return table(head, rows, "lrrrrr")


PATHS = {
    "a0": "(a0) stock `crafter.Env` (renders every step)",
    "a": "(a) bare `CrafterWorld` loop",
    "b": "(b) RL-interface env (`SubtaskEnv`)",
    "c": "(c) sandboxed coded policy, in-process",
    "d1": "(d1) 1 environment actor",
    "d2": "(d2) 2 environment actors",
}


def _rates(data: Mapping[str, Any]) -> dict[str, float]:
    return {key.split()[0]: rate for key, rate in data["rate"].items()}


def t_env_side(spec: Mapping[str, Any]) -> list[str]:
    rows = []
    for number, name in enumerate(spec["files"], 1):
        data = load(name)
        rate = _rates(data)
        rounds = data["by_round"]
        rows.append(
            [
                str(number),
                num(rate["a"]),
                f"{rate['d2'] / rate['d1']:.2f}",
                ", ".join(f"{x:.2f}" for x in rounds["d2/d1"])
                + f" (**{statistics.median(rounds['d2/d1']):.2f}**)",
                f"{rate['d1'] / rate['a']:.2f}",
                ", ".join(f"{x:.2f}" for x in rounds["d1/a"])
                + f" (**{statistics.median(rounds['d1/a']):.2f}**)",
            ]
        )
    head = [
        "run",
        "(a) steps/s",
        "(d2)/(d1), fastest rounds",
        "round by round (median)",
        "(d1)/(a), fastest",
        "round by round (median)",
    ]
    return table(head, rows, "rrrlrl")


def t_env_paths(spec: Mapping[str, Any]) -> list[str]:
    rate = _rates(load(spec["file"]))
    rows = [[PATHS[k], num(v), f"{v / rate['a']:.2f}"] for k, v in rate.items()]
    return table(["path", "steps/s", "against the bare loop"], rows, "lrr")


def t_scaling(spec: Mapping[str, Any]) -> list[str]:
    rows = []
    for r in load(spec["file"])["rows"]:
        w = r["workers"]
        rows.append(
            [
                str(w),
                num(r["bare"]),
                f"{r['bare_speedup']:.2f}",
                f"{r['bare_speedup'] / w:.2f}",
                num(r["actors"]),
                f"{r['actor_speedup']:.2f}",
                f"{r['actor_speedup'] / w:.2f}",
                f"{r['actors_over_bare']:.2f}",
            ]
        )
    head = [
        "workers",
        "bare loops steps/s",
        "speed-up",
        "efficiency",
        "env actors steps/s",
        "speed-up",
        "efficiency",
        "actors / bare",
    ]
    return table(head, rows, "rrrrrrrr")


def t_device_cut(spec: Mapping[str, Any]) -> list[str]:
    rows = []
    for entry in spec["rows"]:
        data = load(entry["file"])
        s = data["summary"]
        rows.append(
            [
                entry["label"],
                stamp(entry["file"]) or "",
                str(data["cores"]),
                num(data["limit_steps_per_s"]),
                f"{num(data['run_steps_per_s'])} (**{data['ratio']:.3f}**)",
                f"**{data['core_utilisation']:.3f}**",
                f"{num(s['env_steps'])} by {s.get('cut_at_s', s.get('wall_s', 0)):.0f} s",
            ]
        )
    head = [
        "machine, commit",
        "date",
        "cores",
        "bare-loop limit, steps/s",
        "counted env steps / wall s (of the limit)",
        "core utilisation",
        "counted env steps (run cut)",
    ]
    return table(head, rows, "llrrrrr")


def _share(k: int, n: int) -> str:
    low, high = wilson(k, n)
    return f"{k}/{n} = {pct(100 * k / n if n else 0, 0)} {span(100 * low, 100 * high, 0)}"


def _median(values: Sequence[float], digits: int = 0) -> str:
    return f"{statistics.median(values):,.{digits}f}" if values else "–"


def t_minetest_chain(spec: Mapping[str, Any]) -> list[str]:
    """bench_minetest.py --chain: each step of the diamond chain, in the whole chain
    (reached) and alone from its start state; then the whole chain."""
    data = load(spec["file"])
    rows_in = data["results"]
    n = len(rows_in)
    rows = []
    for item in data["chain_steps"]:
        reached = sum(any(i == item and ok for i, ok, _ in r["chain"]["record"]) for r in rows_in)
        alone = [r["steps"][item] for r in rows_in if item in r["steps"]]
        won = [e for e in alone if e["success"]]
        rows.append(
            [
                f"`{item.split(':', 1)[1]}`",
                _share(reached, n),
                _share(len(won), len(alone)) if alone else "–",
                _median([e["steps"] for e in won]),
                _median([e["wall_s"] for e in won], 1),
                num(data["step_budgets"].get(item, 0)) if alone else "–",
            ]
        )
    head = [
        "step (item obtained)",
        "whole chain: reached",
        "alone, from its start state",
        "steps alone (median of successes)",
        "wall s alone",
        "budget alone",
    ]
    return table(head, rows, "lrrrrr")


def t_minetest_chain_runs(spec: Mapping[str, Any]) -> list[str]:
    """bench_minetest.py --chain: the whole chain's episodes and the world's costs."""
    data = load(spec["file"])
    runs = [r["chain"] for r in data["results"]]
    won = [c for c in runs if c["success"]]
    episodes = runs + [e for r in data["results"] for e in r["steps"].values()]
    won_steps = [c["steps"] for c in won]
    rows = [
        ["whole chain: a diamond", _share(len(won), len(runs))],
        [
            "steps per episode, successes (median; min–max)",
            (f"{_median(won_steps)}; {min(won_steps, default=0):,}–{max(won_steps, default=0):,}"),
        ],
        ["wall s per episode, successes (median)", _median([c["wall_s"] for c in won], 1)],
        ["steps per episode, all (median)", _median([c["steps"] for c in runs])],
        [
            "actions per s, planning included (median over all episodes)",
            _median([e["actions_per_s"] for e in episodes if e["steps"]]),
        ],
        [
            "cold reset s (new server, median over seeds)",
            _median([r["cold_reset_s"] for r in data["results"]], 3),
        ],
        [
            "warm reset s (same server, median over all episodes)",
            _median([e["reset_s"] for e in episodes], 3),
        ],
        [
            "server RSS MB after a seed's episodes (median; max)",
            f"{_median([r['server_rss_mb'] for r in data['results']])}; "
            f"{max(r['server_rss_mb'] for r in data['results']):,.0f}",
        ],
    ]
    causes: dict[str, int] = {}
    for c in runs:
        if c["success"]:
            continue
        spent = 0
        if c["record"]:
            before = c["record"][-2][2] if len(c["record"]) > 1 else 0
            spent = c["record"][-1][2] - before
        budget = data["step_budgets"].get(c["stopped_at"], 0)
        why = (
            "died"
            if c["dead"]
            else "out of the chain's steps"
            if c["out_of_steps"]
            else f"its {budget:,} steps spent"
            if budget and spent >= budget
            else "gave up sooner"
        )
        key = f"stopped at `{str(c['stopped_at']).split(':', 1)[-1]}`: {why}"
        causes[key] = causes.get(key, 0) + 1
    for key, count in sorted(causes.items(), key=lambda kv: (-kv[1], kv[0])):
        rows.append([key, f"{count}/{len(runs)}"])
    return table(["whole chain", "value"], rows, "lr")


TABLES: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "crafter_across": t_crafter_across,
    "crafter_achievements": t_crafter_achievements,
    "published": t_published,
    "method_run": t_method_run,
    "confirm": t_confirm,
    "screens": t_screens,
    "pooled": t_pooled,
    "ablation": t_ablation,
    "sample_efficiency": t_sample_efficiency,
    "runtime": t_runtime,
    "env_side": t_env_side,
    "env_paths": t_env_paths,
    "scaling": t_scaling,
    "device_cut": t_device_cut,
    "minetest_chain": t_minetest_chain,
    "minetest_chain_runs": t_minetest_chain_runs,
}
"""The kinds of table an area's summary can hold (``kind`` of ``[tables.NAME]``)."""


# ------------------------------------------------------------------ sections


def fill(template: str, source: str, tables: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A summary's lines with each ``{{NAME}}`` line replaced by its table."""
    out: list[str] = []
    for line in template.rstrip("\n").splitlines():
        m = PLACEHOLDER.match(line.strip())
        if not m:
            out.append(line)
            continue
        spec = tables.get(m[1])
        if spec is None or spec.get("kind") not in TABLES:
            raise SourceError(
                f"gen_benchmarks: {source}: no table {m[1]!r} of a known kind in "
                "benchmarks/results/figures.toml"
            )
        out += TABLES[spec["kind"]](spec)
    return out


def arbiter_section() -> list[str]:
    """The survival arbiter's section: ``arbiter/section.md`` verbatim when it and
    ``arbiter/summary.json`` are both there (bench_arbiter's output), else one line."""
    folder = RESULTS / "arbiter"
    section, summary = folder / "section.md", folder / "summary.json"
    out = [f"## {ARBITER_SECTION}", ""]
    if section.is_file() and summary.is_file():
        return out + section.read_text(encoding="utf-8").rstrip("\n").splitlines()
    # Not measured yet: bench_arbiter.py writes both files; until then this line stands.
    return out + [
        "Not measured yet: `python benchmarks/bench_arbiter.py` writes "
        "`benchmarks/results/arbiter/summary.json` and `section.md`, and this section then "
        "shows that `section.md`."
    ]


def history(path: Path) -> list[str]:
    """The experiment record: entries ``## YYYY-MM-DD — title``, newest first, each made
    a subsection of the page's History."""
    out: list[str] = []
    last = "9999-99-99"
    entries = 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("## "):
            m = ENTRY.match(line)
            if not m:
                raise SourceError(
                    f"gen_benchmarks: benchmarks/results/{path.name}:{number}: an "
                    "entry's heading is '## YYYY-MM-DD — title'"
                )
            if m[1] > last:
                raise SourceError(
                    f"gen_benchmarks: benchmarks/results/{path.name}:{number}: "
                    f"{m[1]} after {last}: entries go newest first"
                )
            last = m[1]
            entries += 1
            out.append(f"### {m[1]} — {m[2]}")
        elif line.startswith("# "):
            continue  # the source's own title
        elif entries:
            out.append(line)
    return out


def render() -> str:
    spec = tomllib.loads((RESULTS / "figures.toml").read_text(encoding="utf-8"))
    tables = spec.get("tables", {})
    lines = [TITLE, "", f"## {FIRST_SECTION}", ""]
    lines += spec["intro"].strip("\n").splitlines() + [""]
    lines += headline(spec["figure"]) + [""]
    lines += spec["after"].strip("\n").splitlines() + [""]
    for area, heading in AREAS:
        path = RESULTS / area / "summary.md"
        name = f"benchmarks/results/{area}/summary.md"
        lines += [f"## {heading}", "", *fill(path.read_text(encoding="utf-8"), name, tables), ""]
        if area == ARBITER_AFTER:
            lines += arbiter_section() + [""]
    lines += ["## How this page is made", "", *spec["made"].strip("\n").splitlines(), ""]
    lines += ["## History", "", *spec["history"].strip("\n").splitlines(), ""]
    lines += history(RESULTS / "history.md")
    text = "\n".join(lines).rstrip("\n") + "\n"
    check_clean(text)
    return text


def check_clean(text: str) -> None:
    """Refuse a page naming a session by number or an absolute path of a machine; each
    line refused is named with its section (whose source it came from)."""
    bad = []
    section = TITLE
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            section = line
        for pattern, what in ((SESSION, "a session by number"), (ABSOLUTE, "an absolute path")):
            if pattern.search(line):
                bad.append(f"line {number}, in '{section}': {what}: {line[:160]}")
    if bad:
        raise SourceError("gen_benchmarks: refused to write the page:\n  " + "\n  ".join(bad))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if BENCHMARKS.md differs from what would be written",
    )
    parser.add_argument("--out", type=Path, default=OUT, help="where to write (BENCHMARKS.md)")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
        if current != text:
            print(
                f"{args.out.name} is not what benchmarks/gen_benchmarks.py writes: run "
                "python benchmarks/gen_benchmarks.py",
                file=sys.stderr,
            )
            return 1
        return 0
    tmp = args.out.with_name(args.out.name + ".part")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.out)
    print(f"wrote {args.out} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
