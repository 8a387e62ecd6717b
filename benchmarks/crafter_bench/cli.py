"""The command: run the chosen variants, write BENCHMARKS.md and the raw figures."""

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
    parser.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "crafter"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default=str(ROOT / "rlgpt" / "configs" / "crafter.toml"))
    parser.add_argument("--episode-steps", type=int, default=EPISODE_STEPS)
    parser.add_argument("--rlgpt-timeout", type=float, default=0.0, help="seconds (0: none)")
    parser.add_argument("--workdir", default="", help="where runs and policies go (default: temp)")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    budget = args.budget or (QUICK_BUDGET if args.quick else DEFAULT_BUDGET)
    final_n = args.final or (QUICK_FINAL if args.quick else DEFAULT_FINAL)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench-crafter-"))
    workdir.mkdir(parents=True, exist_ok=True)
    date = datetime.datetime.now().astimezone()
    given = sys.argv[1:] if argv is None else argv
    meta = {
        "command": shlex.join([*invoked_as, *given]),
        "date": date.isoformat(timespec="seconds"),
        "quick": args.quick,
        "budget": budget,
        "final_episodes": final_n,
        "episode_steps": args.episode_steps,
        "seed": args.seed,
        "variants": variants,
        "machine": machine(),
        "versions": versions(),
        "processes": PROCESSES,
    }
    print(f"bench_crafter: {variants}, budget {budget:,} env steps, {final_n} final episodes")
    results: dict[str, Any] = {}
    for name in variants:
        started = time.monotonic()
        print(f"[{name}] running…", flush=True)
        try:
            if name == "code":
                r = run_code(budget, final_n, args.seed, max_steps=args.episode_steps)
            elif name == "ppo":
                r = run_ppo(
                    budget, final_n, args.seed, max_steps=args.episode_steps,
                    workdir=workdir / "ppo",
                )  # fmt: skip
            else:
                r = run_rlgpt(
                    budget, final_n, args.seed, quick=args.quick, config=Path(args.config),
                    workdir=workdir / "rlgpt", timeout_s=args.rlgpt_timeout or None,
                    episode_steps=args.episode_steps,
                )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a failed variant is reported, not fatal
            r = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"[{name}] failed: {r['error']}", flush=True)
        else:
            print(
                f"[{name}] score scoreboard {r['scoreboard']['score']:.2f} % "
                f"({r['scoreboard']['episodes']} episodes), final {r['final']['score']:.2f} % "
                f"({r['final']['episodes']}), diamond {r['final']['diamond']:.1f} %, "
                f"{r['env_steps']:,} env steps, {time.monotonic() - started:.0f} s",
                flush=True,
            )
        results[name] = r
    report = {"meta": meta, "results": {k: _strip_episodes(v) for k, v in results.items()}}
    out = Path(args.out)
    out.write_text(render_markdown(report))
    raw_dir = Path(args.results)
    raw_dir.mkdir(parents=True, exist_ok=True)
    stamp = date.strftime("%Y%m%d-%H%M%S") + ("-quick" if args.quick else "")
    raw = raw_dir / f"{stamp}-{'-'.join(variants)}.json"
    full = {"meta": meta, "results": results, "published": list(PUBLISHED)}
    raw.write_text(json.dumps(full, indent=1, default=_json_default) + "\n")
    print(f"wrote {out} and {raw}")
    return 1 if any("error" in r for r in results.values()) else 0


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value)
    return str(value)
