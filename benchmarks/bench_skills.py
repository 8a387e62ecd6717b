"""Measure the skill library on real Crafter: per-step and full-chain success.

What it runs (all on fresh seeds, never used while writing the skills; the world is
:class:`worlds.crafter_world.CrafterWorld`, policies run in-process via
:func:`skills.skills.run_unsandboxed`, i.e. trusted, no sandbox overhead):

1. ``steps``: every stage of ``chain(target)`` from the state the final versions of
   the steps before it leave (:func:`staged`), capped at the stage's ``max_steps``, with
   its FIRST version (:func:`knowledge.revisions.first_params`) and its final version
   (:func:`knowledge.revisions.best_params`): success rate and the first version's
   failure causes — what the offline loop has to revise.
2. ``revise``: the offline loop in miniature for each step: start at the first version,
   run it on a few seeds, apply :func:`knowledge.revisions.revise` for the most common
   failure cause, repeat; prints the revisions taken and the success at the end.
3. ``chain``: the final-version steps composed in order by a simple trusted composer
   (:func:`compose`: run each step not yet achieved until its achievement, retry the
   whole chain while steps remain), up to the episode length (10000 steps), in three
   modes: ``none`` (no survival at all), ``composer`` (survival stages interleaved by
   the composer: before each step and every ``CHECK_EVERY`` steps, a stage whose vital
   is below its threshold runs its :func:`knowledge.survival.survival_stages` code) and
   ``templates`` (the templates' own survival, ``Params.survive``: every ``check``
   steps they drink, eat, shelter at night, sleep, recover). Reports each step's
   success (achievement reached) and the full-chain success rate, with mean steps and
   seconds per episode.

4. ``speed`` (not in ``all``): this tree's code against an older commit's
   (``--baseline``, default the last commit before the skill library's fast paths), side
   by side in one command: one warm worker process per side, each running the same
   fixed-seed coded episodes (the diamond chain through the production composer, all
   survival needs) on request; requests alternate between the sides (ABBA order), so
   whatever load the machine's other users add falls on both. Prints per repeat the
   seconds of each side and their ratio, the ratio's mean, spread and range, the time
   to prepare (compile) the stages per request, and whether both sides played the very
   same episodes (steps, achievements, a digest of the player's path).

Run::

    .venv/bin/python benchmarks/bench_skills.py                 # all parts, 20 seeds
    .venv/bin/python benchmarks/bench_skills.py --part chain --seeds 30 --target diamond
    .venv/bin/python benchmarks/bench_skills.py --part steps --seeds 10
    .venv/bin/python benchmarks/bench_skills.py --part speed --seeds 4 --repeats 6

``--jobs`` runs episodes in parallel processes (default: the CPU count).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from knowledge import library, recipes  # noqa: E402
from knowledge.revisions import Params, best_params, first_params, revise  # noqa: E402
from knowledge.survival import survival_needs, survival_stages  # noqa: E402
from messages.causes import POLICY_FINISHED, STEP_BUDGET, SUCCESS  # noqa: E402
from rlgpt.cli import number  # noqa: E402
from skills.policies import compile_policy  # noqa: E402
from skills.skills import Skills, run_unsandboxed  # noqa: E402
from worlds.crafter_world import CrafterWorld  # noqa: E402

SEED_BASE = 50_000
"""Seeds SEED_BASE … SEED_BASE+N-1: never used while developing the skills."""
CHECK_EVERY = 20
"""Steps between survival checks inside a step."""
EPISODE_STEPS = 10_000


def _compiled(source: str) -> Callable[[Any], Iterator[str]]:
    return compile_policy(source)


def compose(
    steps: list[recipes.Step],
    params: Callable[[recipes.Step], Params],
    survival: bool,
    rounds: int = 50,
) -> Callable[[Skills], Iterator[str]]:
    """A trusted sequential composer: the steps in order, skipping achieved ones, the
    whole chain retried while steps remain; with ``survival``, a survival stage runs
    whenever its vital is below its threshold (checked before each step and every
    CHECK_EVERY steps inside one)."""
    codes = {s.name: _compiled(library.code_for(s, params(s))) for s in steps}
    stages = [(st, _compiled(st.source)) for st in survival_stages()]

    def reached(skills: Skills, step: recipes.Step) -> bool:
        # The achievement, and for a gathering step its goal (5 wood for what follows).
        if not skills.achievements().get(step.achievement):
            return False
        inventory = skills.inventory()
        return all(inventory.get(item, 0) >= n for item, n in step.goal.items())

    def value(skills: Skills, stat: str) -> float:
        return skills.daylight() if stat == "daylight" else skills.status().get(stat, 9)

    def needs(skills: Skills) -> Iterator[str]:
        for stage, code in stages:
            if value(skills, stage.stat) < stage.below:
                yield from code(skills)

    def policy(skills: Skills) -> Iterator[str]:
        for _ in range(rounds):
            todo = [s for s in steps if not skills.achievements().get(s.achievement)]
            if not todo:
                return
            for step in todo:
                if skills.achievements().get(step.achievement):
                    continue
                if survival:
                    yield from needs(skills)
                start = skills.steps()
                last_check = start
                for action in codes[step.name](skills):
                    yield action
                    if reached(skills, step):
                        break
                    if survival and skills.steps() - last_check >= CHECK_EVERY:
                        last_check = skills.steps()
                        yield from needs(skills)
                    if skills.steps() - start > 4 * step.max_steps:
                        break

    return policy


def staged(
    before: list[recipes.Step],
    step: recipes.Step,
    params: Params,
    record: dict[str, Any],
) -> Callable[[Skills], Iterator[str]]:
    """The steps ``before`` by their final versions (with their own survival), then
    ``step``'s code with ``params`` for at most ``step.max_steps`` steps: the state a
    stage starts from in a chain. ``record['cause']`` says how the stage ended."""
    prefix = compose(before, best_params, False)
    code = _compiled(library.code_for(step, params))

    def done(skills: Skills, s: recipes.Step) -> bool:
        return bool(skills.achievements().get(s.achievement))

    def policy(skills: Skills) -> Iterator[str]:
        yield from prefix(skills)
        if not all(done(skills, s) for s in before):
            record["prefix"] = False
            return
        start = skills.steps()
        record["started"] = start
        for action in code(skills):
            yield action
            if done(skills, step):
                record["cause"] = "success"
                return
            if skills.steps() - start >= step.max_steps:
                record["cause"] = STEP_BUDGET
                return
        record["cause"] = SUCCESS if done(skills, step) else POLICY_FINISHED

    return policy


def _episode(args: tuple) -> dict[str, Any]:
    kind, payload, seed, max_steps, success_name = args
    world = CrafterWorld()
    if kind == "chain":
        target, mode = payload
        steps = recipes.chain(target)
        if mode == "templates":  # the templates' own survival (Params.survive)
            policy = compose(steps, best_params, False)
        else:
            policy = compose(steps, library.complete_params, mode == "composer")
    else:
        step_name, which, params = payload
        chain = recipes.chain(which)
        index = [s.name for s in chain].index(step_name)
        record: dict[str, Any] = {}
        policy = staged(chain[:index], chain[index], params, record)
    started = time.perf_counter()
    result = run_unsandboxed(
        world,
        policy,
        max_steps,
        seed=seed,
        # A stage's own bookkeeping (``staged``) decides its success and cause.
        success=(lambda s: bool(s.achievements().get(success_name))) if kind == "chain" else None,
    )
    first = {}
    for step, name in result.events:
        first.setdefault(name, step)
    success, cause = result.success, result.cause
    if kind != "chain":
        success = record.get("cause") == "success"
        cause = record.get("cause") or result.cause
        if "started" not in record:  # the steps before never all succeeded (or died)
            cause = "prefix_failed"
    return {
        "seed": seed,
        "success": success,
        "cause": cause,
        "steps": result.steps,
        "seconds": time.perf_counter() - started,
        "achieved": first,
        "error": result.error,
        "status": result.status,
    }


def _map(jobs: int, tasks: list[tuple]) -> list[dict[str, Any]]:
    if jobs <= 1:
        return [_episode(t) for t in tasks]
    with concurrent.futures.ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(_episode, tasks))


def part_steps(target: str, seeds: list[int], jobs: int) -> None:
    print(
        f"\n## Stages of chain({target!r}): first version vs final, each from the state the "
        "final versions of the steps before it leave (stage cap: max_steps; episodes whose "
        "earlier steps failed are left out)"
    )
    print(f"{'step':22} {'max':>5} {'first':>6} {'best':>6}  first-version failures")
    chain = recipes.chain(target)
    for step in chain:
        rows = {}
        for which, params in (
            ("first", first_params(step)),
            ("best", best_params(step)),
        ):
            tasks = [
                ("step", (step.name, target, params), s, EPISODE_STEPS, step.achievement)
                for s in seeds
            ]
            rows[which] = _map(jobs, tasks)
        first, best = rows["first"], rows["best"]
        causes = collections.Counter(
            r["cause"] for r in first if not r["success"] and r["cause"] != "prefix_failed"
        )

        def rate(rs: list[dict[str, Any]]) -> str:
            ran = [r for r in rs if r["cause"] != "prefix_failed"]
            wins = sum(r["success"] for r in ran)
            return f"{wins}/{len(ran)}" if ran else "-"

        print(
            f"{step.name:22} {step.max_steps:5d} {rate(first):>6} {rate(best):>6}  "
            + ", ".join(f"{c}×{n}" for c, n in causes.most_common())
        )
        sys.stdout.flush()


def part_revise(target: str, seeds: list[int], jobs: int, rounds: int = 6) -> None:
    print(f"\n## The offline revision loop on chain({target!r}) steps ({len(seeds)} seeds)")
    for step in recipes.chain(target):
        params = first_params(step)
        log = []
        rate = 0.0
        for _ in range(rounds):
            tasks = [
                ("step", (step.name, target, params), s, EPISODE_STEPS, step.achievement)
                for s in seeds
            ]
            results = _map(jobs, tasks)
            ran = [r for r in results if r["cause"] != "prefix_failed"] or results
            rate = sum(r["success"] for r in ran) / len(ran)
            causes = collections.Counter(
                r["cause"] for r in ran if not r["success"] and r["cause"] != "prefix_failed"
            )
            if rate >= 0.9 or not causes:
                break
            cause = causes.most_common(1)[0][0]
            revised = revise(step, params, cause, "")
            if revised is None:
                log.append(f"{cause}: no revision (→ RL)")
                break
            params, reason = revised
            log.append(f"{rate:.0%} {reason.split(' — ')[0]}")
        print(f"{step.name:22} final {rate:4.0%}  " + " | ".join(log))
        sys.stdout.flush()


def part_chain(
    target: str,
    seeds: list[int],
    jobs: int,
    modes: tuple[str, ...] = ("none", "composer", "templates"),
) -> None:
    chain = recipes.chain(target)
    final = chain[-1].achievement
    for mode in modes:
        tasks = [("chain", (target, mode), s, EPISODE_STEPS, final) for s in seeds]
        started = time.perf_counter()
        results = _map(jobs, tasks)
        wall = time.perf_counter() - started
        label = CHAIN_MODES[mode]
        wins = sum(r["success"] for r in results)
        print(
            f"\n## chain({target!r}) composed, {label}: {wins}/{len(results)} = "
            f"{wins / len(results):.0%} (wall {wall:.0f} s, {jobs} jobs)"
        )
        print(f"{'step':22} {'success':>8} {'mean step reached':>18}")
        for step in chain:
            reached = [
                r["achieved"][step.achievement]
                for r in results
                if step.achievement in r["achieved"]
            ]
            mean = sum(reached) / len(reached) if reached else float("nan")
            print(f"{step.name:22} {len(reached) / len(results):8.0%} {mean:18.0f}")
        causes = collections.Counter(r["cause"] for r in results if not r["success"])
        steps = sum(r["steps"] for r in results) / len(results)
        secs = sum(r["seconds"] for r in results) / len(results)
        print(f"failures: {dict(causes)}; mean {steps:.0f} steps, {secs:.1f} s per episode")
        sys.stdout.flush()


# ---------------------------------------------------------------------- the production composer

COMPOSED_SEED_BASE = 94_000
"""Development seeds of the composed measurements (never ≥ 500,000: those are the
system's code and evaluation seeds)."""


def _composed_episode(args: tuple) -> dict[str, Any]:
    from episodes.composite import run_composed
    from messages.task import Subtask

    part, seed = args
    world = CrafterWorld()
    if part == "composite":
        stages = library.coded_stages(recipes.chain("diamond"))
        goal = Subtask("diamond", "collect a diamond", goal={"diamond": 1}, max_steps=EPISODE_STEPS)
    else:  # curriculum: every achievement in order; the episode's own test never holds
        stages = library.coded_stages(recipes.curriculum(), by_achievement=True)
        goal = Subtask("curriculum", "all 22 achievements", max_steps=EPISODE_STEPS)
    started = time.perf_counter()
    # A curriculum drops a stage that gives up and goes on (as the system's final
    # curriculum episodes do); the diamond chain ends the episode instead.
    curriculum = part != "composite"
    needs = survival_needs()
    ep = run_composed(world, stages, needs, goal, seed, wall_s=900, skip_failed=curriculum)
    failed = collections.Counter((r.name, r.cause) for r in ep.stages if not r.success)
    return {
        "seed": seed,
        "success": ep.success,
        "steps": ep.steps,
        "cause": ep.cause,
        "detail": ep.detail[:120],
        "counts": dict(ep.counts),
        "seconds": time.perf_counter() - started,
        "failed_runs": failed.most_common(4),
    }


def _composed_map(jobs: int, tasks: list[tuple]) -> list[dict[str, Any]]:
    if jobs <= 1:
        return [_composed_episode(t) for t in tasks]
    with concurrent.futures.ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(_composed_episode, tasks))


def crafter_score(rates: list[float]) -> float:
    """Crafter's score (%): exp(mean ln(1 + rate%)) − 1 over the achievements."""
    import math

    return math.exp(sum(math.log(1 + 100 * r) for r in rates) / len(rates)) - 1


def part_composite(seeds: list[int], jobs: int, verbose: bool = False) -> None:
    """chain('diamond') through the production composer (episodes.composite.run_composed):
    best templates, all five survival needs."""
    started = time.perf_counter()
    results = _composed_map(jobs, [("composite", s) for s in seeds])
    wall = time.perf_counter() - started
    wins = sum(r["success"] for r in results)
    if verbose:
        for r in results:
            print(r["seed"], r["success"], r["steps"], r["cause"], r["detail"], r["failed_runs"])
    causes = collections.Counter(r["cause"] for r in results if not r["success"])
    steps = sum(r["steps"] for r in results) / len(results)
    print(
        f"\n## diamond via run_composed (best params, all needs), seeds {seeds[0]}…{seeds[-1]}: "
        f"{wins}/{len(results)} = {wins / len(results):.0%}; failures {dict(causes)}; "
        f"mean {steps:.0f} steps (wall {wall:.0f} s, {jobs} jobs)"
    )
    sys.stdout.flush()


def part_curriculum(seeds: list[int], jobs: int, verbose: bool = False) -> None:
    """All 22 achievements: recipes.curriculum() in order through run_composed (best
    templates, all needs), Crafter's 10,000-step episodes; per-achievement success and
    the Crafter score."""
    from crafter import constants

    started = time.perf_counter()
    results = _composed_map(jobs, [("curriculum", s) for s in seeds])
    wall = time.perf_counter() - started
    if verbose:
        for r in results:
            got = sum(1 for a in constants.achievements if r["counts"].get(a))
            print(r["seed"], got, r["steps"], r["cause"], r["detail"], r["failed_runs"])
    print(f"\n## curriculum via run_composed, seeds {seeds[0]}…{seeds[-1]} (wall {wall:.0f} s)")
    rates = []
    for name in constants.achievements:
        rate = sum(1 for r in results if r["counts"].get(name)) / len(results)
        rates.append(rate)
        print(f"{name:20} {rate:6.0%}")
    causes = collections.Counter(r["cause"] for r in results)
    steps = sum(r["steps"] for r in results) / len(results)
    print(f"episode ends: {dict(causes)}; mean {steps:.0f} steps")
    print(f"Crafter score: {crafter_score(rates):.1f}%")
    sys.stdout.flush()


# ---------------------------------------------------------------------- old code against new

SPEED_BASELINE = "e95a8c0"
"""The last commit before the skill library's fast paths (array search, compile once)."""
SPEED_WARMUP_SEED = 93_999
"""Played once by each worker before timing: numba compiles, caches fill."""

# The worker runs in the tree it measures (its own cwd comes first on sys.path), so it
# uses only what both trees have. One request: a line of JSON {"seeds": [...]}; one
# answer: a line with the seconds to prepare the stages, to play the episodes, and each
# episode's outcome.
SPEED_WORKER = r"""
import hashlib, json, sys, time
from episodes.composite import prepare_stages, run_composed
from worlds.crafter_world import CrafterWorld
from knowledge import library, recipes
from knowledge.survival import survival_needs
from messages.task import Subtask

world = CrafterWorld()
stages = library.coded_stages(recipes.chain("diamond"))
needs = survival_needs()
goal = Subtask("diamond", "collect a diamond", goal={"diamond": 1}, max_steps=10_000)

def play(seeds):
    started = time.perf_counter()
    prepared = prepare_stages(stages, world)
    need_stages = prepare_stages([n.stage for n in needs], world)
    ready = time.perf_counter()
    out = []
    for seed in seeds:
        path = hashlib.sha256()
        def on_step(obs, reward, done, info):
            path.update(repr((obs.position, obs.facing)).encode())
        ep = run_composed(world, prepared, needs, goal, seed, wall_s=900, on_step=on_step,
                          need_stages=need_stages)
        counts = {k: v for k, v in sorted(ep.counts.items()) if v}
        out.append([seed, ep.steps, ep.cause, counts, path.hexdigest()[:16]])
    done = time.perf_counter()
    return {"prepare_s": ready - started, "episodes_s": done - ready, "episodes": out}

play([int(sys.argv[1])])
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    print(json.dumps(play(json.loads(line)["seeds"])), flush=True)
"""


def _speed_worker(root: Path) -> Any:
    import subprocess

    return subprocess.Popen(
        [sys.executable, "-c", SPEED_WORKER, str(SPEED_WARMUP_SEED)],
        cwd=root,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _ask(worker: Any, seeds: list[int]) -> dict[str, Any]:
    import json

    worker.stdin.write(json.dumps({"seeds": seeds}) + "\n")
    worker.stdin.flush()
    line = worker.stdout.readline()
    if not line:
        raise RuntimeError(f"a speed worker died (exit {worker.wait()})")
    return json.loads(line)


def part_speed(seeds: list[int], repeats: int, baseline: str) -> None:
    """This tree's coded episodes against ``baseline``'s, interleaved (see the module
    docstring, part 4)."""
    import json
    import statistics
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="bench-speed-") as old_root:
        archive = subprocess.run(
            ["git", "archive", baseline], cwd=root, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", old_root], input=archive, check=True)
        workers = {"old": _speed_worker(Path(old_root)), "new": _speed_worker(root)}
        try:
            for worker in workers.values():  # both warm before any timing
                assert json.loads(worker.stdout.readline() or "{}").get("ready")
            runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
            print(
                f"\n## coded diamond episodes, seeds {seeds[0]}…{seeds[-1]}: "
                f"old = {baseline}, new = this tree; {repeats} repeats, old and new "
                "interleaved (ABBA) so the machine's other load hits both"
            )
            print(f"{'repeat':>6} {'old s':>8} {'new s':>8} {'old/new':>8}")
            for r in range(repeats):
                order = ("old", "new") if r % 2 == 0 else ("new", "old")
                for side in order:
                    runs[side].append(_ask(workers[side], seeds))
                old, new = runs["old"][-1]["episodes_s"], runs["new"][-1]["episodes_s"]
                print(f"{r + 1:6d} {old:8.2f} {new:8.2f} {old / new:8.2f}")
                sys.stdout.flush()
        finally:
            for worker in workers.values():
                worker.stdin.close()
                worker.wait(timeout=60)
    ratios = [
        o["episodes_s"] / n["episodes_s"] for o, n in zip(runs["old"], runs["new"], strict=True)
    ]
    spread = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
    steps = sum(e[1] for e in runs["new"][0]["episodes"])
    per_step = {
        side: statistics.median(r["episodes_s"] for r in rs) / steps * 1e3
        for side, rs in runs.items()
    }
    print(
        f"episodes: old/new = {statistics.mean(ratios):.2f} ± {spread:.2f} (sd), "
        f"range {min(ratios):.2f}–{max(ratios):.2f}, over {repeats} repeats; "
        f"{steps} steps a repeat: old {per_step['old']:.2f} ms/step, "
        f"new {per_step['new']:.2f} ms/step (medians)"
    )
    prep = {side: statistics.median(r["prepare_s"] for r in rs) for side, rs in runs.items()}
    print(
        f"preparing the stages per request (15 chain stages + 5 needs): old "
        f"{prep['old'] * 1e3:.0f} ms, new {prep['new'] * 1e3:.0f} ms (medians)"
    )
    same = all(
        o["episodes"] == n["episodes"] for o, n in zip(runs["old"], runs["new"], strict=True)
    )
    print(
        "outcomes: identical (steps, causes, achievements, paths)"
        if same
        else "outcomes DIFFER: "
        + json.dumps([runs["old"][0]["episodes"], runs["new"][0]["episodes"]])
    )


CHAIN_MODES = {
    "none": "without survival",
    "composer": "with survival stages interleaved by the composer",
    "templates": "with the templates' own survival (Params.survive)",
}
"""The chain part's survival modes (``--modes``) and their table labels."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--part",
        choices=("steps", "revise", "chain", "composite", "curriculum", "speed", "all"),
        default="all",
    )
    parser.add_argument("--target", default="diamond")
    parser.add_argument("--seeds", type=number(int, 1), default=20)
    parser.add_argument(
        "--seed-base",
        type=int,
        help=f"default {SEED_BASE}; composite and curriculum: {COMPOSED_SEED_BASE}",
    )
    parser.add_argument("--verbose", action="store_true", help="one line per episode")
    parser.add_argument("--repeats", type=number(int, 1), default=6, help="speed: old/new pairs")
    parser.add_argument(
        "--baseline", default=SPEED_BASELINE, help="speed: the commit to compare against"
    )
    parser.add_argument("--quick", action="store_true", help="speed: 2 seeds, 2 repeats")
    parser.add_argument("--jobs", type=number(int, 1), default=os.cpu_count() or 1)
    parser.add_argument(
        "--modes",
        default="none,composer,templates",
        help="chain survival modes: none, composer, templates (comma-separated)",
    )
    args = parser.parse_args(argv)
    modes = tuple(m.strip() for m in args.modes.split(","))
    unknown = sorted(set(modes) - set(CHAIN_MODES))
    if unknown:  # was: played as "none", then a KeyError at the table
        parser.error(f"--modes: {', '.join(unknown)} unknown; choose from {', '.join(CHAIN_MODES)}")
    base = args.seed_base
    if base is None:
        composed = ("composite", "curriculum", "speed")
        base = COMPOSED_SEED_BASE if args.part in composed else SEED_BASE
    seeds = list(range(base, base + args.seeds))
    if args.part in ("steps", "all"):
        part_steps(args.target, seeds, args.jobs)
    if args.part in ("revise", "all"):
        part_revise(args.target, seeds[: max(4, args.seeds // 2)], args.jobs)
    if args.part in ("chain", "all"):
        part_chain(args.target, seeds, args.jobs, modes)
    if args.part == "composite":
        part_composite(seeds, args.jobs, args.verbose)
    if args.part == "curriculum":
        part_curriculum(seeds, args.jobs, args.verbose)
    if args.part == "speed":
        if args.quick:
            seeds, args.repeats = seeds[:2], 2
        part_speed(seeds, args.repeats, args.baseline)


if __name__ == "__main__":
    main()
