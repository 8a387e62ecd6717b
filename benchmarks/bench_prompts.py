#!/usr/bin/env python3
"""Measure: the size of every prompt a model reads, in estimated tokens.

    python benchmarks/bench_prompts.py                      the diamond task's calls, built
                                                            by the agents' own request code
    python benchmarks/bench_prompts.py --target wood_pickaxe
    python benchmarks/bench_prompts.py --calls runs/<id>/calls.jsonl
                                                            every request a run recorded,
                                                            rendered with today's prompts

Tokens are :func:`llm.prompts.estimate_tokens` (characters / 3.5 plus 4 a message): the
estimate the backend's context check uses, no tokenizer needed. ``--n-ctx`` marks the
prompts that would not fit a context of that size with ``--max-tokens`` kept for the
reply. Not a test: it prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from knowledge import recipes  # noqa: E402
from llm.prompts import PromptSet, estimate_tokens  # noqa: E402
from rlgpt.cli import number  # noqa: E402


def built_requests(target: str) -> list[tuple[str, str, dict[str, Any]]]:
    """One request of each kind for ``target``, as the agents build them."""
    from actors.critic import statistics
    from actors.fast import _world_actions, code_request, rl_request
    from actors.slow import needs_table, plan_request, revise_request
    from knowledge.options import options_for
    from llm.offline import OfflineBackend
    from messages.plan import Critique, Plan, Review, RunTask, SubAction, SubActionOutcome
    from messages.rollout import EpisodeReport, RolloutResult, StageRun
    from messages.task import Stage, Subtask
    from method.settings import MethodSettings

    task = RunTask(f"obtain {target}", target, 0.3, 3, 5_000_000, [1], [2])
    steps = recipes.describe(recipes.chain(target))
    plan_req = plan_request(task, MethodSettings(), steps, needs_table())
    reply = trio.run(OfflineBackend().call, "slow", "plan", plan_req).data
    subs = []
    for s in reply["subactions"]:
        sub = Subtask(s["name"], s["description"], goal=s["goal"], achievement=s["achievement"],
                      max_steps=s["max_steps"])  # fmt: skip
        subs.append(SubAction(s["name"], sub, description=s["description"]))
    last = subs[-1]
    critique = Critique(last.name, 1, "code", 0.3, 0.9, 10, "revise", cause="step_budget",
                        count=7, detail="", line=12, action="explore(20)",
                        advice="explore toward stone")  # fmt: skip
    # The previous version is a model's own code: the worked example's, about 10 lines.
    example = (ROOT / "llm/prompts/fast_code.txt").read_text().split("Example reply:")[1]
    code = json.JSONDecoder().raw_decode(example.strip())[0]["code"]
    previous = {"code": code, "note": "first version", "params": None}
    outcome = SubActionOutcome(last.name, "code", 0.3, False, Stage(last.subtask, code=code),
                               versions=3, critiques=[critique])  # fmt: skip
    plan = Plan(task.task, 1, subs)
    offered = options_for(recipes.achievement_step(last.name))
    causes = ["success"] * 3 + ["step_budget"] * 7
    episodes = [
        EpisodeReport(i, i < 3, 300, 0.0, [], cause, "", 0,
                      stages=[StageRun(last.name, i < 3, 300, cause)])
        for i, cause in enumerate(causes)
    ]  # fmt: skip
    review = Review(last, 2, "code", RolloutResult(last.name, episodes, 0.3, 3000, "env"), 1, code)
    return [
        ("slow", "plan", plan_req),
        ("slow", "revise", revise_request(task, plan, {last.name: [outcome]}, 0.1, 1, 10**5)),
        ("fast", "code", code_request(last, 1, None, None)),
        ("fast", "code", code_request(last, 2, previous, critique)),
        ("fast", "rl", rl_request(last, 1, offered, _world_actions(), None, None)),
        ("critic", "review", statistics(review)),
    ]


def recorded_requests(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """Every request of a run's ``calls.jsonl``; ValueError naming the line that is not
    one (a log cut off mid-line, another program's file)."""
    out = []
    for number_, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
                out.append((record["role"], record["purpose"], record["request"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(
                    f"{path} line {number_}: not a recorded call ({type(exc).__name__}: {exc})"
                ) from None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="diamond")
    parser.add_argument("--calls", type=Path, help="a run's calls.jsonl")
    parser.add_argument("--n-ctx", type=number(int, 512), default=8192)
    parser.add_argument("--max-tokens", type=number(int, 1), default=2048)
    args = parser.parse_args()
    if args.calls is None:
        try:
            recipes.chain(args.target)
        except KeyError as exc:
            parser.error(f"--target {args.target}: {exc.args[0]} (name an item, e.g. diamond)")
        requests = built_requests(args.target)
    else:
        if not args.calls.is_file():
            parser.error(f"--calls {args.calls}: no such file (a run's calls.jsonl, runs/<id>/)")
        try:
            requests = recorded_requests(args.calls)
        except ValueError as exc:
            parser.exit(1, f"bench_prompts: {exc}\n")
    prompts = PromptSet()
    print(f"| call | version | system | user | total | fits {args.n_ctx} with {args.max_tokens} |")
    print("|---|---|---|---|---|---|")
    for role, purpose, request in requests:
        system, user = prompts.render(role, purpose, request)
        total = estimate_tokens([system, user])
        fits = "yes" if total + args.max_tokens <= args.n_ctx else "**no**"
        version = request.get("version", "")
        print(
            f"| {role}/{purpose} | {version} | {estimate_tokens([system])} | "
            f"{estimate_tokens([user])} | {total} | {fits} |"
        )


if __name__ == "__main__":
    main()
