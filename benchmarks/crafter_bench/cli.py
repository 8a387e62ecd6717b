"""The command: run the chosen variants, write their report (markdown) and the raw figures."""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import __doc__ as PACKAGE_DOC
from . import across
from .code_only import run_code
from .markdown import render_markdown
from .ppo import run_ppo
from .protocol import (
    DEFAULT_BUDGET,
    DEFAULT_FINAL,
    EPISODE_STEPS,
    PROCESSES,
    QUICK_BUDGET,
    QUICK_FINAL,
    VARIANTS,
)
from .provenance import machine, versions
from .published import PUBLISHED
from .rlgpt import run_rlgpt

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: default places of BENCHMARKS.md, the raw results and the config."""

COMMAND = ("python", "-m", "benchmarks.crafter_bench")
"""How the command is recorded in BENCHMARKS.md when run as a module."""


def _strip_episodes(result: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "episodes"}


def _seed_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--seeds {text!r}: expected run seeds separated by commas, e.g. 0,1,2"
        ) from None
    if not values or len(set(values)) != len(values) or min(values) < 0:
        raise argparse.ArgumentTypeError(
            f"--seeds {text!r}: expected distinct run seeds ≥ 0, e.g. 0,1,2"
        )
    return values


def run_variant(name: str, seed: int, budget: int, final_n: int, args: Any, workdir: Path) -> dict:
    """One variant with run seed ``seed``: its full result (episodes included)."""
    if name == "code":
        return run_code(budget, final_n, seed, max_steps=args.episode_steps)
    if name == "ppo":
        return run_ppo(budget, final_n, seed, max_steps=args.episode_steps, workdir=workdir / "ppo")
    return run_rlgpt(
        budget, final_n, seed, quick=args.quick, config=Path(args.config),
        workdir=workdir / name, timeout_s=args.rlgpt_timeout or None,
        episode_steps=args.episode_steps, learn=name != "norl",
    )  # fmt: skip


def build_report(
    meta: Mapping[str, Any], runs: Mapping[str, Mapping[int, Mapping[str, Any]]]
) -> dict[str, Any]:
    """The report BENCHMARKS.md is written from: every run (variant × run seed), each
    variant's figures across its seeds, and the paired comparisons on shared worlds."""
    first = {name: by_seed[min(by_seed)] for name, by_seed in runs.items() if by_seed}
    pairs = {}
    for a, b in (("rlgpt", "code"), ("rlgpt", "norl"), ("norl", "code"), ("rlgpt", "ppo")):
        if a in runs and b in runs:
            found = across.paired(runs[a], runs[b])
            if found is not None:
                pairs[f"{a}-{b}"] = found
    return {
        "meta": dict(meta),
        "results": first,
        "runs": {name: {str(s): r for s, r in by_seed.items()} for name, by_seed in runs.items()},
        "across": {name: across.summary(by_seed) for name, by_seed in runs.items()},
        "paired": pairs,
    }


def _kept(result: Mapping[str, Any], budget: int) -> dict[str, Any]:
    """What is kept of a run: its figures, its score curve and its final worlds (not
    every scoreboard episode)."""
    kept = _strip_episodes(result)
    if "error" not in result:
        kept["curve"] = {
            str(k): v for k, v in across.curve(result["episodes"]["scoreboard"], budget).items()
        }
        kept["final_worlds"] = across.final_worlds(result)
    return kept


def main(argv: list[str] | None = None, *, invoked_as: Sequence[str] = COMMAND) -> int:
    """Run the benchmark with the command-line flags ``argv`` (default: ``sys.argv``);
    ``invoked_as`` is the command BENCHMARKS.md records before the flags."""
    parser = argparse.ArgumentParser(
        prog=" ".join(invoked_as), description=PACKAGE_DOC.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="small budgets (minutes)")
    parser.add_argument("--budget", type=int, default=0, help="env steps per variant")
    parser.add_argument("--final", type=int, default=0, help="final-agent episodes")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    # BENCHMARKS.md itself is generated (benchmarks/gen_benchmarks.py): this report is a
    # result file beside the raw figures.
    parser.add_argument(
        "--out", default=str(ROOT / "benchmarks" / "results" / "crafter" / "report.md")
    )
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "crafter"))
    parser.add_argument("--seed", type=int, default=0, help="run seed (one run per variant)")
    parser.add_argument(
        "--seeds", type=_seed_list, default=None,
        help="run seeds, e.g. 0,1,2: one run per variant and seed, seed by seed "
        "(every variant of seed s reports on the same final worlds)",
    )  # fmt: skip
    parser.add_argument("--config", default=str(ROOT / "rlgpt" / "configs" / "crafter.toml"))
    parser.add_argument("--episode-steps", type=int, default=EPISODE_STEPS)
    parser.add_argument("--rlgpt-timeout", type=float, default=0.0, help="seconds (0: none)")
    parser.add_argument("--workdir", default="", help="where runs and policies go (default: temp)")
    parser.add_argument(
        "--resume", action="store_true",
        help="with --workdir: keep the runs a stopped benchmark finished there (each run "
        "is saved as it ends, in WORKDIR/done/) and run only the others",
    )  # fmt: skip
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    if args.resume and not args.workdir:
        parser.error("--resume needs the --workdir of the benchmark to go on with")
    run_seeds = args.seeds if args.seeds is not None else [args.seed]
    budget = args.budget or (QUICK_BUDGET if args.quick else DEFAULT_BUDGET)
    final_n = args.final or (QUICK_FINAL if args.quick else DEFAULT_FINAL)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench-crafter-"))
    workdir.mkdir(parents=True, exist_ok=True)
    done_dir = workdir / "done"
    done_dir.mkdir(exist_ok=True)
    date = datetime.datetime.now().astimezone()
    given = sys.argv[1:] if argv is None else argv
    meta = {
        "command": shlex.join([*invoked_as, *given]),
        "date": date.isoformat(timespec="seconds"),
        "quick": args.quick,
        "budget": budget,
        "final_episodes": final_n,
        "episode_steps": args.episode_steps,
        "seed": run_seeds[0],
        "seeds": run_seeds,
        "variants": variants,
        "machine": machine(),
        "versions": versions(),
        "processes": PROCESSES,
    }
    total = len(variants) * len(run_seeds)
    print(
        f"bench_crafter: {variants} × run seeds {run_seeds} ({total} runs), budget "
        f"{budget:,} env steps, {final_n} final episodes; work in {workdir}",
        flush=True,
    )
    out = Path(args.out)
    raw_dir = Path(args.results)
    raw_dir.mkdir(parents=True, exist_ok=True)
    stamp = date.strftime("%Y%m%d-%H%M%S") + ("-quick" if args.quick else "")
    raw = raw_dir / f"{stamp}-{'-'.join(variants)}.json"
    runs: dict[str, dict[int, dict[str, Any]]] = {name: {} for name in variants}
    full: dict[str, dict[int, dict[str, Any]]] = {name: {} for name in variants}
    number = 0
    for seed in run_seeds:
        for name in variants:
            number += 1
            saved = done_dir / f"{name}-s{seed}.json"
            if args.resume and saved.is_file():
                runs[name][seed] = json.loads(saved.read_text())
                print(f"[{number}/{total} {name} seed {seed}] kept from {saved}", flush=True)
                continue
            started = time.monotonic()
            print(f"[{number}/{total} {name} seed {seed}] running…", flush=True)
            try:
                r = run_variant(name, seed, budget, final_n, args, workdir / f"s{seed}")
            except Exception as exc:  # noqa: BLE001 - a failed run is reported, not fatal
                r = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"[{name} seed {seed}] failed: {r['error']}", flush=True)
            else:
                print(
                    f"[{name} seed {seed}] score scoreboard {r['scoreboard']['score']:.2f} % "
                    f"({r['scoreboard']['episodes']} episodes), final "
                    f"{r['final']['score']:.2f} % ({r['final']['episodes']}), diamond "
                    f"{r['final']['diamond']:.1f} %, {r['env_steps']:,} env steps, "
                    f"{time.monotonic() - started:.0f} s",
                    flush=True,
                )
            full[name][seed] = r
            runs[name][seed] = _kept(r, budget) | {"run_seed": seed}
            saved.write_text(json.dumps(runs[name][seed], indent=1, default=_json_default) + "\n")
            # Every finished run is on disk and in the report at once: a benchmark
            # stopped midway leaves its finished runs behind (--resume goes on).
            _write(out, raw, build_report(meta, runs), full)
    _write(out, raw, build_report(meta, runs), full)  # (also when every run was kept)
    print(f"wrote {out} and {raw}")
    failed = any("error" in r for by_seed in runs.values() for r in by_seed.values())
    return 1 if failed else 0


HAND_MARKER = "<!-- Measured by hand below this line: bench_crafter.py keeps what follows. -->"
"""A line of BENCHMARKS.md after which the sections written by hand begin; the command
rewrites what comes before it and keeps the rest."""


def _write(
    out: Path, raw: Path, report: Mapping[str, Any], full: Mapping[str, Mapping[int, Any]]
) -> None:
    text = render_markdown(report)
    if out.is_file():
        old = out.read_text()
        if HAND_MARKER in old:
            text = text.rstrip("\n") + "\n\n" + old[old.index(HAND_MARKER) :]
    tmp = out.with_name(out.name + ".part")
    tmp.write_text(text)
    tmp.replace(out)
    everything = dict(report) | {
        "published": list(PUBLISHED),
        "episodes": {
            name: {str(s): r.get("episodes") for s, r in by_seed.items()}
            for name, by_seed in full.items()
        },
    }
    raw.write_text(json.dumps(everything, indent=1, default=_json_default) + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value)
    return str(value)
