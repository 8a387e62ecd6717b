#!/usr/bin/env python3
"""Benchmark: seconds per agent call of a real local model, cold and warm, by role.

    python benchmarks/bench_llm_calls.py                           0.5B, cache off and on
    python benchmarks/bench_llm_calls.py --model qwen2.5-coder-1.5b --modes before,cache
    python benchmarks/bench_llm_calls.py --codes 2 --json out.json

Starts the ``local`` backend's server (:class:`llm.local_server.LocalServer`) with a
fetched model (``python run.py models fetch NAME``) once per mode, and sends it the calls
of a run's first iteration in the order a run interleaves them, each through the backend
a run uses (:func:`method.agents.make_backend`: the prompt files, the JSON schema, the
repairs): ``slow/plan`` of the diamond chain, then for each of the plan's first
``--codes`` steps ``fast/code`` and the ``critic/review`` of that code, then a revision
(``fast/code`` version 2 of the last of them, with its own first code and a critique),
its review, and ``slow/revise``. Every request is built by the agents' own request
functions (:mod:`actors.slow`, :mod:`actors.fast`, :mod:`actors.critic`) over the
recipe data; the code a review judges and a revision starts from is the model's own reply.

Modes:

- ``before``: the server's command line as it was before the prompt cache (the server's
  defaults for ``logits_all`` and ``n_threads_batch``, no cache);
- ``nocache``: today's command line without the cache (the server still reuses the prefix
  its one context shares with the next prompt);
- ``cache``: today's command line with the prompt cache (``--cache-mib``).

Per call: seconds (the backend's own wall clock, as a run's ``llm_call`` event has it),
prompt and reply tokens (the server's ``usage``), the prompt tokens the server actually
computed (read from its log: its "prefix-match hit, remaining N" lines), whether the
prompt cache gave a state back, and the load average before and after. Per role and
purpose: the first call (cold) and the later ones (warm), means. ``--json FILE`` writes
it all; the table is printed either way. Not a test: it exits 0 (1 when the model or the
server is missing). Temperature 0 by default, so every mode gets the same replies and
only the prompt's cost differs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from llm import models  # noqa: E402
from llm.local_server import LocalServer, LocalServerError  # noqa: E402
from rlgpt.cli import number  # noqa: E402

MODES = ("before", "nocache", "cache")
CACHE_MIB = 1024
"""Default ``--cache-mib``: the ``[agents] prompt_cache_mib`` default."""
TARGET = "diamond"
_PREFIX = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
_CACHE = re.compile(r"Llama\._create_completion: cache (hit|miss)")


class BeforeServer(LocalServer):
    """The server as started before the prompt cache: none of the flags added with it."""

    def argv(self) -> list[str]:
        out, skip = [], 0
        for arg in super().argv():
            if skip:
                skip -= 1
            elif arg in ("--n_threads_batch", "--logits_all", "--cache", "--cache_type",
                         "--cache_size"):  # fmt: skip
                skip = 1
            else:
                out.append(arg)
        return out


@dataclasses.dataclass
class Call:
    role: str
    purpose: str
    label: str
    seconds: float
    tokens_in: int
    tokens_out: int
    computed: int
    """Prompt tokens the server computed (the rest came from its context or cache)."""
    cache: str
    """``hit``, ``miss`` or '' (no cache)."""
    repairs: int
    load_before: float
    load_after: float
    ok: bool
    error: str = ""


def peak_rss_mib(pid: int) -> int:
    """The server process's peak resident memory (Linux; 0 elsewhere)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    return 0


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def server_lines(log: Path, offset: int) -> tuple[str, int]:
    with open(log, "rb") as f:
        f.seek(offset)
        data = f.read()
    return data.decode("utf-8", "replace"), offset + len(data)


class Sequence:
    """The calls of a run's first iteration, each built when its turn comes (a review
    judges the code the model just wrote)."""

    def __init__(self, codes: int) -> None:
        from actors.slow import needs_table, plan_request
        from knowledge import recipes
        from messages.plan import RunTask
        from method.settings import MethodSettings

        self.settings = MethodSettings()
        self.task = RunTask(f"obtain a {TARGET}", TARGET, 0.3, 3, 5_000_000, [1], [2])
        steps = recipes.describe(recipes.chain(TARGET))
        self.plan_request = plan_request(self.task, self.settings, steps, needs_table())
        self.all_subs = self._subactions()
        self.subs = self.all_subs[:codes]

    def _subactions(self) -> list[Any]:
        """The chain's steps as a plan has them (the offline planner's plan: the same
        for every mode and model, whatever the model's plan said)."""
        from llm.offline import OfflineBackend
        from messages.plan import SubAction
        from messages.task import Subtask

        reply = trio.run(OfflineBackend().call, "slow", "plan", self.plan_request).data
        out = []
        for s in reply["subactions"]:
            sub = Subtask(s["name"], s["description"], goal=s["goal"],
                          achievement=s["achievement"], max_steps=s["max_steps"])  # fmt: skip
            out.append(SubAction(s["name"], sub, description=s["description"]))
        return out

    def review_request(self, sub: Any, version: int, code: str, successes: int) -> dict:
        from actors.critic import statistics as review_statistics
        from messages.plan import Review
        from messages.rollout import EpisodeReport, Glimpse, RolloutResult, Segment, StageRun

        glimpse = Glimpse(40, {"wood": 1}, {"health": 9, "food": 7}, (("tree", 2, 1),), "grass")
        episodes = []
        for seed in range(10):
            ok = seed < successes
            cause = "success" if ok else "step_budget"
            trace = [] if ok else [Segment("explore(20)", 60, glimpse, glimpse)]
            episodes.append(
                EpisodeReport(
                    seed, ok, 180 if ok else sub.subtask.max_steps, 1.0 if ok else 0.0, [],
                    cause, "", 0 if ok else 3, trace=trace,
                    stages=[StageRun(sub.name, ok, 180, cause)],
                )
            )  # fmt: skip
        result = RolloutResult(sub.name, episodes, successes / 10, 3000, "env-0")
        return review_statistics(Review(sub, version, "code", result, 1, code))

    def critique(self, sub: Any) -> Any:
        from messages.plan import Critique

        return Critique(
            sub.name, 1, "code", 0.3, 0.9, 10, "revise", cause="step_budget", count=7,
            detail="", line=3, action="explore(20)",
            advice="the step cap ran out while exploring: look for the target nearer first",
        )  # fmt: skip

    def revise_request(self, codes: dict[str, str]) -> dict:
        from actors.slow import revise_request
        from messages.plan import Plan, SubActionOutcome
        from messages.task import Stage

        plan = Plan(self.task.task, 1, self.all_subs)
        outcomes = {
            sub.name: [
                SubActionOutcome(
                    sub.name,
                    "code",
                    1.0 if i else 0.3,
                    bool(i),
                    Stage(sub.subtask, code=codes[sub.name]),
                    versions=1,
                    critiques=[self.critique(sub)],
                )  # fmt: skip
            ]
            for i, sub in enumerate(self.subs)
        }
        return revise_request(self.task, plan, outcomes, 0.0, 1, 100_000)


async def run_mode(
    mode: str, model: str, threads: int, n_ctx: int, cache_mib: int, seq: Sequence,
    temperature: float, log_dir: Path, skip_plan: bool = False,
) -> dict[str, Any]:  # fmt: skip
    from actors.fast import code_request
    from method.agents import make_backend
    from method.settings import AgentSettings

    log = log_dir / f"{mode}-model-server.log"
    cls = BeforeServer if mode == "before" else LocalServer
    cache_bytes = cache_mib * 2**20 if mode == "cache" else 0
    server = cls(models.resolve(model), model, log, n_ctx=n_ctx, n_threads=threads,
                 cache_bytes=cache_bytes)  # fmt: skip
    calls: list[Call] = []
    started_at = time.monotonic()
    load_start = [round(x, 2) for x in os.getloadavg()]
    async with trio.open_nursery() as nursery:
        endpoint = await nursery.start(server.run)
        settings = AgentSettings(
            backend="local", model=model, temperature=temperature, timeout_s=3600,
            max_retries=0, n_ctx=n_ctx,
        )  # fmt: skip
        backend = make_backend(settings, endpoint)
        offset = log.stat().st_size

        async def ask(role: str, purpose: str, request: dict, label: str) -> dict | None:
            nonlocal offset
            before = load1()
            begun = time.monotonic()
            try:
                result = await backend.call(role, purpose, request)
            except Exception as exc:  # a benchmark reports every outcome and goes on
                text, offset = server_lines(log, offset)
                calls.append(Call(role, purpose, label, round(time.monotonic() - begun, 2),
                                  0, 0, 0, "", 0, before, load1(), False,
                                  f"{type(exc).__name__}: {str(exc)[:300]}"))  # fmt: skip
                print(f"  {mode} {role}/{purpose} {label}: failed: {calls[-1].error}", flush=True)
                return None
            text, offset = server_lines(log, offset)
            # Each request (attempt, repair) computes its prompt less the prefix it reused.
            computed = result.tokens_in - sum(int(m[1]) for m in _PREFIX.finditer(text))
            cache = ",".join(m[1] for m in _CACHE.finditer(text))
            call = Call(role, purpose, label, result.latency_s, result.tokens_in,
                        result.tokens_out, computed, cache, result.repairs, before, load1(),
                        True)  # fmt: skip
            calls.append(call)
            print(f"  {mode:8} {role}/{purpose:7} {label:28} {call.seconds:7.1f} s  in "
                  f"{call.tokens_in:5} (computed {call.computed:5}) out {call.tokens_out:4}  "
                  f"cache {cache or '-':9} load {before:.2f}->{call.load_after:.2f}",
                  flush=True)  # fmt: skip
            return result.data

        if not skip_plan:
            await ask("slow", "plan", seq.plan_request, TARGET)
        written: dict[str, str] = {}
        fallback = "def run(skills):\n    yield from skills.explore(20)\n"
        for i, sub in enumerate(seq.subs):
            reply = await ask("fast", "code", code_request(sub, 1, None, None), sub.name)
            written[sub.name] = (reply or {}).get("code") or fallback
            review = seq.review_request(sub, 1, written[sub.name], 10 if i else 3)
            await ask("critic", "review", review, sub.name)
        first = seq.subs[0]
        previous = {"code": written[first.name], "note": "", "params": None}
        request = code_request(first, 2, previous, seq.critique(first))
        reply = await ask("fast", "code", request, f"{first.name} v2")
        code = (reply or {}).get("code") or written[first.name]
        await ask("critic", "review", seq.review_request(first, 2, code, 6), f"{first.name} v2")
        await ask("slow", "revise", seq.revise_request(written), "iteration 1")
        peak_mib = peak_rss_mib(server.process.pid)
        await backend.aclose()
        nursery.cancel_scope.cancel()
    return {
        "mode": mode,
        "argv": [a for a in server.argv()[4:] if not a.startswith("/")],
        "cache_bytes": cache_bytes,
        "server_peak_rss_mib": peak_mib,
        "wall_s": round(time.monotonic() - started_at, 1),
        "load_average_start": load_start,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "calls": [dataclasses.asdict(c) for c in calls],
        "by_call": by_call(calls),
    }


def by_call(calls: list[Call]) -> dict[str, dict[str, Any]]:
    """Per role/purpose: the first call (cold), the later ones (warm), and all."""
    out: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys(f"{c.role}/{c.purpose}" for c in calls):
        mine = [c for c in calls if f"{c.role}/{c.purpose}" == key and c.ok]
        if not mine:
            continue
        warm = mine[1:]

        def mean(values: list[float]) -> float | None:
            return round(statistics.fmean(values), 1) if values else None

        out[key] = {
            "calls": len(mine),
            "cold_s": mine[0].seconds,
            "warm_mean_s": mean([c.seconds for c in warm]),
            "mean_s": mean([c.seconds for c in mine]),
            "tokens_in_mean": mean([c.tokens_in for c in mine]),
            "computed_cold": mine[0].computed,
            "computed_warm_mean": mean([c.computed for c in warm]),
            "tokens_out_mean": mean([c.tokens_out for c in mine]),
            "load_mean": mean([(c.load_before + c.load_after) / 2 for c in mine]),
        }
    return out


def machine() -> dict[str, Any]:
    """The runtime benchmark's record of the machine, with the llama-cpp-python build."""
    import importlib.metadata

    from bench_runtime import machine as runtime_machine  # this script's own folder

    gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    version = importlib.metadata.version("llama_cpp_python")
    return {**runtime_machine(), "memory_gib": gib, "llama_cpp_python": version}


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, check=True)  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()  # fmt: skip
        return out.stdout.strip() + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return ""


def print_table(results: list[dict[str, Any]]) -> None:
    print(
        "\n| mode | call | calls | cold s | warm s (mean) | mean s | prompt tokens | computed "
        "cold / warm | reply tokens | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        for key, row in r["by_call"].items():
            print(f"| {r['mode']} | {key} | {row['calls']} | {row['cold_s']} | "
                  f"{row['warm_mean_s'] if row['warm_mean_s'] is not None else '–'} | "
                  f"{row['mean_s']} | {row['tokens_in_mean']} | {row['computed_cold']} / "
                  f"{row['computed_warm_mean'] if row['computed_warm_mean'] is not None else '–'}"
                  f" | {row['tokens_out_mean']} | {row['load_mean']} |")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="a fetched model's name")
    parser.add_argument(
        "--threads", type=number(int, 0), default=0, help="server threads (0: every core)"
    )
    parser.add_argument("--n-ctx", type=number(int, 512), default=8192)
    parser.add_argument("--codes", type=number(int, 1), default=4,
                        help="steps of the plan whose first code is written")  # fmt: skip
    parser.add_argument("--modes", default="nocache,cache",
                        help=f"comma-separated, run in this order: {', '.join(MODES)}")  # fmt: skip
    parser.add_argument("--cache-mib", type=number(int, 1), default=CACHE_MIB)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument(
        "--skip-plan", action="store_true", help="no slow/plan call (the longest, once a run)"
    )
    parser.add_argument("--json", default="", help="also write the results to this file")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: each of {', '.join(MODES)}, not {args.modes!r}")
    log_dir = Path(tempfile.mkdtemp(prefix="bench-llm-calls-"))
    print(f"{args.model}: server logs in {log_dir}", flush=True)
    results = []
    seq = Sequence(args.codes)
    try:
        for mode in modes:
            results.append(
                trio.run(
                    run_mode,
                    mode,
                    args.model,
                    args.threads,
                    args.n_ctx,
                    args.cache_mib,
                    seq,
                    args.temperature,
                    log_dir,
                    args.skip_plan,
                )  # fmt: skip
            )
    except (models.ModelError, LocalServerError) as exc:
        print(f"bench_llm_calls: {exc}", file=sys.stderr)
        return 1
    print_table(results)
    for r in results:
        print(
            f"{r['mode']}: {r['wall_s']} s in all, server peak RSS {r['server_peak_rss_mib']} "
            f"MiB, load {r['load_average_start']} -> {r['load_average_end']}"
        )
    if args.json:
        out = {
            "model": args.model,
            "threads": args.threads or len(os.sched_getaffinity(0)),
            "n_ctx": args.n_ctx,
            "codes": args.codes,
            "temperature": args.temperature,
            "skip_plan": args.skip_plan,
            "cache_mib": args.cache_mib,
            "date": datetime.date.today().isoformat(),
            "commit": commit(),
            "command": "python benchmarks/bench_llm_calls.py " + " ".join(sys.argv[1:]),
            "machine": machine(),
            "modes": results,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
        print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
