#!/usr/bin/env python3
"""Benchmark: seconds per agent call with a local model, through our own backend.

    python benchmarks/bench_local.py                         fast/code and critic/review
    python benchmarks/bench_local.py --quick                 critic/review only
    python benchmarks/bench_local.py --model qwen2.5-coder-1.5b --threads 2

Starts the ``local`` backend's server (:class:`llm.local_server.LocalServer`) with a
fetched model (``python run.py models fetch NAME``), makes each call once through
:class:`llm.openai_backend.OpenAIBackend` with a request shaped like the agents' own, and
prints seconds, tokens in and out, repairs and the reply. Not a test: it prints numbers
and exits 0 (1 when the model or the server is missing).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from llm import models  # noqa: E402
from llm.local_server import LocalServer, LocalServerError  # noqa: E402
from rlgpt.cli import number  # noqa: E402

SUBACTION = {
    "name": "collect_wood", "description": "collect one wood from a tree", "goal": {"wood": 1},
    "achievement": "collect_wood", "max_steps": 200, "need": "",
}  # fmt: skip
CALLS = [
    ("fast", "code", {"subaction": SUBACTION, "version": 1, "previous": None, "critique": None}),
    (
        "critic", "review",
        {
            "subaction": {"name": "collect_wood", "goal": {"wood": 1}, "max_steps": 200},
            "mode": "code", "version": 1, "success_rate": 0.5, "target": 0.9, "episodes": 10,
            "causes": {"step_budget": 5, "success": 5}, "detail": "",
            "code": 'def run(skills):\n    yield from skills.collect("tree", 1)\n',
        },
    ),
]  # fmt: skip
"""The calls timed: a first version of code, and a review of a half-successful version."""


async def bench(model: str, threads: int, n_ctx: int, calls: list, modes: list[str]) -> None:
    from llm.openai_backend import OpenAIBackend

    os.environ.setdefault("RLGPT_LOCAL_API_KEY", "local")
    log = Path(tempfile.mkdtemp(prefix="bench-local-")) / "model-server.log"
    server = LocalServer(models.resolve(model), model, log, n_ctx=n_ctx, n_threads=threads)
    async with trio.open_nursery() as nursery:
        started = time.monotonic()
        endpoint = await nursery.start(server.run)
        print(f"{model}, {server.n_threads} threads: server up in "
              f"{time.monotonic() - started:.1f} s (log {log})")  # fmt: skip
        # Each call once per JSON mode, the modes taking turns on the same server, so a
        # busy machine slows them alike; a fresh backend per mode (it remembers refusals).
        for role, purpose, request in calls:
            for mode in modes:
                backend = OpenAIBackend(
                    endpoint.base_url, endpoint.alias, "RLGPT_LOCAL_API_KEY", timeout_s=3600,
                    max_retries=0, json_mode=mode, max_tokens=2048, n_ctx=n_ctx,
                )  # fmt: skip
                started = time.monotonic()
                try:
                    result = await backend.call(role, purpose, request)
                except Exception as exc:  # a benchmark reports every outcome and goes on
                    print(f"{role}/{purpose} json_mode={mode}: failed after "
                          f"{time.monotonic() - started:.1f} s: "
                          f"{type(exc).__name__}: {str(exc)[:300]}")  # fmt: skip
                    continue
                print(f"{role}/{purpose} json_mode={mode}: valid in "
                      f"{time.monotonic() - started:.1f} s, tokens in {result.tokens_in} out "
                      f"{result.tokens_out}, repairs {result.repairs}\n"
                      f"    {str(result.data)[:300]}")  # fmt: skip
        nursery.cancel_scope.cancel()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="a fetched model's name")
    parser.add_argument(
        "--threads", type=number(int, 0), default=1, help="server threads (0: every core)"
    )
    parser.add_argument(
        "--n-ctx", type=number(int, 512), default=8192, help="server context in tokens"
    )
    parser.add_argument("--quick", action="store_true", help="critic/review only")
    parser.add_argument(
        "--json-mode", default="schema", choices=["schema", "object", "off", "all"],
        help="[agents] json_mode to time (all: the three, taking turns)",
    )  # fmt: skip
    args = parser.parse_args()
    calls = CALLS[1:] if args.quick else CALLS
    try:
        modes = ["off", "object", "schema"] if args.json_mode == "all" else [args.json_mode]
        trio.run(bench, args.model, args.threads, args.n_ctx, calls, modes)
    except (models.ModelError, LocalServerError) as exc:
        print(f"bench_local: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
