#!/usr/bin/env python3
"""Benchmark: check a finished run's learned stages against their own code on worlds the
run never played.

    python benchmarks/bench_confirm.py RUN_DIR                 every learned stage that
                                                               learned over its code,
                                                               400 worlds, 2 processes
    python benchmarks/bench_confirm.py RUN_DIR --stage make_iron_pickaxe --worlds 800
    python benchmarks/bench_confirm.py RUN_DIR --stage collect_diamond --setup library
                                                               the stages before it as the
                                                               library's complete code
    python benchmarks/bench_confirm.py RUN_DIR --job obtain_tree-it1-v1 --through
                                                               a learned version the run
                                                               trained but did not keep,
                                                               against the code it kept,
                                                               each episode ending at the
                                                               stage

A run keeps a learned version over its code when their paired comparison, on the run's
*code* worlds, says the learned one is better (``method.paired.compare``); report.md
shows that comparison. It is the comparison the choice was made on, among every version
the run trained: a figure chosen and reported on the same worlds. This plays the run's
final policy from its bundle (``RUN_DIR/policy/``, every file checked against its
sha256) twice per world, on the run seed's *confirm* worlds (``method.seeds``: no run
plays them): once as it is, once with the learned stage replaced by the code it learned
over (its ``stage_code`` option: with ``[task] learn_over_code``, the step's first code,
the version report.md compares it with). The stages before it are the same code in both,
so both reach the stage on the same worlds in the same state; the stage's outcome there
is paired world for world (the method's own bound, and the upper end the other way),
and the whole task's success beside it.

``--job NAME`` checks a learned version a training job of the run made, kept or not
(its RL config from ``RUN_DIR/code/NAME.rl.json``, its policy as the journal recorded
it), against the stage the bundle plays (the code the run kept). ``--through`` plays the
stages up to the checked one only, each episode ending when its test holds or the
stages' caps are spent: the stage's own comparison, without the rest of the task (whose
columns then say the same). The bundle's world is played (Crafter or Minetest).

Not a test: it prints a table (``--json`` writes the per-world outcomes) and exits 0;
2 if the run has no bundle or no stage to check.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from method.bundle import Bundle, BundleError, load_bundle  # noqa: E402
from method.paired import NOT_REACHED, compare, wilson_interval  # noqa: E402
from method.seeds import RUN_SEEDS, confirm_seeds  # noqa: E402
from rlgpt.cli import number, output_file  # noqa: E402

OPTION = "stage_code"
"""The option a learned stage's own code is offered as (:mod:`knowledge.options`)."""


def own_code(bundle: Bundle, name: str) -> str | None:
    """The code learned stage ``name`` learned over (its ``stage_code`` option), or None."""
    for stage in bundle.stages:
        if stage.subtask.name == name and stage.policy_path and stage.config is not None:
            for action in stage.config.coded_actions:
                if action.name == OPTION:
                    return action.code
    return None


def learned_version(run_dir: str, job: str, bundle: Bundle) -> tuple[str, Any]:
    """(sub-action, learned Stage) of training job ``job`` of the run: its RL config, the
    policy the journal recorded for it, the bundle's test and cap of that sub-action."""
    from messages.base import build
    from messages.plan import Stage
    from messages.task import RLConfig
    from method.journal import named_result

    name = job.rsplit("-it", 1)[0]
    stage = next((s for s in bundle.stages if s.subtask.name == name), None)
    if stage is None:
        raise ValueError(f"{job}: the bundle has no stage {name!r}")
    path = Path(run_dir) / "code" / f"{job}.rl.json"
    try:
        config = build(RLConfig, json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{job}: no RL config readable at {path} ({exc})") from None
    result = named_result(Path(run_dir), job, "TrainResult")
    if result is None or not result.policy_path:
        raise ValueError(f"{job}: the run's journal records no policy for it")
    learned = Stage(
        stage.subtask,
        policy_path=result.policy_path,
        policy_sha256=result.sha256,
        config=config,
    )
    return name, learned


def through(bundle: Bundle, name: str) -> Bundle:
    """``bundle`` cut after stage ``name``: its episodes end when that stage's test holds
    (or the kept stages' caps are spent)."""
    names = [s.subtask.name for s in bundle.stages]
    kept = bundle.stages[: names.index(name) + 1]
    cap = sum(s.subtask.max_steps for s in kept)
    goal = dataclasses.replace(kept[-1].subtask, max_steps=cap)
    return dataclasses.replace(bundle, stages=kept, goal=goal)


def checkable(bundle: Bundle) -> list[str]:
    """The bundle's learned stages that have their own code to be checked against."""
    return [s.subtask.name for s in bundle.stages if own_code(bundle, s.subtask.name)]


def with_code(bundle: Bundle, name: str, code: str | None = None) -> Bundle:
    """``bundle`` with learned stage ``name`` played as ``code`` (by default the code it
    learned over)."""
    from messages.plan import Stage

    code = code or own_code(bundle, name)
    if code is None:
        raise ValueError(f"{name}: not a learned stage with a {OPTION!r} option")
    stages = [Stage(s.subtask, code=code) if s.subtask.name == name else s for s in bundle.stages]
    return dataclasses.replace(bundle, stages=stages)


def with_library_setup(bundle: Bundle, name: str) -> Bundle:
    """``bundle`` with every stage before ``name`` played as the skill library's complete
    code for that step (what ``offline_first = "full"`` writes first, as the shipped
    ``diamond.toml`` plays it), learned ones included; ``name`` and the stages after it as
    they are. For a deep stage that few worlds reach behind a run's weak earlier code."""
    from knowledge import library
    from messages.plan import Stage

    names = [s.subtask.name for s in bundle.stages]
    if name not in names:
        raise ValueError(f"{name}: not a stage of this bundle ({', '.join(names)})")
    stages = []
    for stage in bundle.stages[: names.index(name)]:
        sub = stage.subtask
        step = library.subtask_step(sub.name, sub.achievement, sub.goal)
        stages.append(Stage(sub, code=library.complete_code(step)))
    stages += bundle.stages[names.index(name) :]
    return dataclasses.replace(bundle, stages=stages)


def stage_outcome(episode: Any, name: str) -> int:
    """1 if stage ``name`` ran and its test held in one of its runs, 0 if it ran and never
    did, NOT_REACHED if the episode never got to it."""
    runs = [r for r in episode.stages if r.name == name]
    if not runs:
        return NOT_REACHED
    return int(any(r.success for r in runs))


def play_worlds(
    run_dir: str,
    names: list[str],
    seeds: list[int],
    code: str | None = None,
    library_setup: bool = False,
    job: str = "",
    cut: bool = False,
) -> list[dict[str, Any]]:
    """In a worker process: every world of ``seeds`` played by the bundle as it is and by
    each ``names`` stage's code variant (``code``: the one stage's code to play instead
    of its own; ``library_setup``: the stages before the one stage, in both variants, as
    :func:`with_library_setup` plays them; ``job``: the learned variant is that training
    job's version and the coded one the bundle as it is; ``cut``: both end at the one
    stage, :func:`through`). One record per world."""
    import torch

    from method.play import play

    torch.set_num_threads(1)
    bundle = load_bundle(run_dir)
    if library_setup:
        (name,) = names
        bundle = with_library_setup(bundle, name)
    if job:
        (name,) = names
        _, learned = learned_version(run_dir, job, bundle)
        stages = [learned if s.subtask.name == name else s for s in bundle.stages]
        variants = {"learned": dataclasses.replace(bundle, stages=stages), name: bundle}
    else:
        variants = {"learned": bundle, **{name: with_code(bundle, name, code) for name in names}}
    if cut:
        (name,) = names
        variants = {label: through(variant, name) for label, variant in variants.items()}
    records: list[dict[str, Any]] = [{"seed": seed} for seed in seeds]
    for label, variant in variants.items():
        # One play() per variant: it loads the stages (a learned one's policy) once.
        for record, (episode, _) in zip(records, play(variant, seeds), strict=True):
            stages = {n: stage_outcome(episode, n) for n in names}
            if cut and episode.success:
                # The episode's test is the stage's: it may end the episode before the
                # stage's own run reports its success.
                stages = dict.fromkeys(names, 1)
            record[label] = {
                "success": int(episode.success),
                "steps": episode.steps,
                "stages": stages,
            }
    return records


def rate(successes: int, n: int) -> str:
    if not n:
        return "–"
    low, high = wilson_interval(successes, n)
    return f"{successes}/{n} = {successes / n:.2f} [{low:.2f}, {high:.2f}]"


def summary(records: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """Stage ``name``'s paired comparison (coded → learned) and the task's, on records."""
    coded = [r[name]["stages"][name] for r in records]
    learned = [r["learned"]["stages"][name] for r in records]
    up, down = compare(coded, learned), compare(learned, coded)
    pairs = [(a, b) for a, b in zip(coded, learned, strict=True) if min(a, b) >= 0]
    task_coded = [r[name]["success"] for r in records]
    task_learned = [r["learned"]["success"] for r in records]
    task_up, task_down = compare(task_coded, task_learned), compare(task_learned, task_coded)
    return {
        "stage": name,
        "worlds": len(records),
        "pairs": up.worlds,
        "coded": sum(a for a, _ in pairs),
        "learned": sum(b for _, b in pairs),
        "reached_by_one": sum((a < 0) != (b < 0) for a, b in zip(coded, learned, strict=True)),
        "only_learned": up.challenger_only,
        "only_coded": up.incumbent_only,
        "difference": up.difference,
        "lower": up.lower,
        "upper": -down.lower if down.worlds else 0.0,
        "task_coded": sum(task_coded),
        "task_learned": sum(task_learned),
        "task_difference": task_up.difference,
        "task_lower": task_up.lower,
        "task_upper": -task_down.lower if task_down.worlds else 0.0,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", help="a finished run's folder (its policy/ bundle is played)")
    p.add_argument(
        "--stage",
        action="append",
        default=[],
        help="a learned stage to check (repeatable; default: every learned stage "
        f"with a {OPTION!r} option)",
    )
    p.add_argument(
        "--code",
        default="",
        metavar="FILE",
        help="with one --stage: play this code file as the stage's coded variant instead "
        f"of its {OPTION!r} option (e.g. a later revision from RUN_DIR/code/)",
    )
    p.add_argument(
        "--setup",
        choices=("run", "library"),
        default="run",
        help="with one --stage: 'library' plays every stage before it as the skill "
        "library's complete code, in both variants, so that more worlds reach a deep "
        "stage (the check is then of the stage from those starts, not of the run's "
        "whole policy); default 'run', the bundle's own stages",
    )
    p.add_argument(
        "--job",
        default="",
        metavar="NAME",
        help="check the learned version training job NAME made (e.g. obtain_tree-it1-v1), "
        "kept or not, against the bundle's stage of its sub-action",
    )
    p.add_argument(
        "--through",
        action="store_true",
        help="with one stage: play the stages up to it only, each episode ending at its test",
    )
    p.add_argument("--worlds", type=number(int, 1), default=400, help="confirm worlds to play")
    p.add_argument("--quick", action="store_true", help="20 worlds (a look, not a figure)")
    p.add_argument(
        "--first",
        type=number(int, 0),
        default=0,
        help="skip this many confirm worlds (a second check on other worlds)",
    )
    p.add_argument(
        "--run-seed",
        # Outside the run seeds' table the confirm worlds would overlap other ranges.
        type=number(int, RUN_SEEDS.start, RUN_SEEDS.stop - 1),
        default=None,
        help="whose confirm worlds (default: the run's [run] seed, config.json)",
    )
    p.add_argument("--jobs", type=number(int, 1, 64), default=2, help="worker processes")
    p.add_argument(
        "--json", type=output_file, default=None, help="write the rows and per-world outcomes here"
    )
    args = p.parse_args()
    if args.quick:
        args.worlds = 20
    try:
        bundle = load_bundle(args.run_dir)
    except BundleError as exc:
        print(f"bench_confirm: {exc}", file=sys.stderr)
        return 2
    if args.job:
        try:
            name, _ = learned_version(args.run_dir, args.job, bundle)
        except ValueError as exc:
            print(f"bench_confirm: --job {exc}", file=sys.stderr)
            return 2
        if args.code or args.setup != "run" or args.stage not in ([], [name]):
            print(
                "bench_confirm: --job plays the job's version against the bundle's stage: "
                "no --code, --setup library or other --stage beside it",
                file=sys.stderr,
            )
            return 2
        args.stage = [name]
    if args.through and len(args.stage) != 1:
        print("bench_confirm: --through needs one --stage (or --job)", file=sys.stderr)
        return 2
    names = args.stage or checkable(bundle)
    code = None
    if args.code:
        if len(args.stage) != 1:
            print("bench_confirm: --code needs exactly one --stage", file=sys.stderr)
            return 2
        try:
            code = Path(args.code).read_text()
        except OSError as exc:
            print(f"bench_confirm: --code {args.code}: {exc}", file=sys.stderr)
            return 2
    if args.setup == "library" and len(args.stage) != 1:
        print(
            "bench_confirm: --setup library needs exactly one --stage (the stages before "
            "it are the ones replaced)",
            file=sys.stderr,
        )
        return 2
    learned = [s.subtask.name for s in bundle.stages if s.policy_path]
    missing = [n for n in names if n not in learned or (code is None and not own_code(bundle, n))]
    if args.job:
        missing = []
    if not names or missing:
        print(
            f"bench_confirm: {args.run_dir}: no learned stage with a {OPTION!r} option to "
            f"check{' named ' + ', '.join(missing) if missing else ''} (learned: "
            f"{', '.join(learned) or 'none'}). A stage learned over its code has one "
            "([task] learn_over_code); for another learned stage, name it with --stage "
            "and give the code to check it against with --code FILE",
            file=sys.stderr,
        )
        return 2
    run_seed = args.run_seed
    if run_seed is None:
        config = Path(args.run_dir) / "config.json"
        try:
            run_seed = int(json.loads(config.read_text())["run"]["seed"])
        except (OSError, ValueError, KeyError, TypeError):
            print(
                f"bench_confirm: no [run] seed readable in {config}; pass --run-seed",
                file=sys.stderr,
            )
            return 2
    worlds = confirm_seeds(run_seed)
    if not 0 <= args.first < args.first + args.worlds <= len(worlds):
        print(
            f"bench_confirm: --first + --worlds must stay within {len(worlds):,} worlds",
            file=sys.stderr,
        )
        return 2
    seeds = list(worlds[args.first : args.first + args.worlds])
    print(
        f"run {bundle.manifest.get('run', '?')}: checking {', '.join(names)} on "
        f"{len(seeds)} confirm worlds {seeds[0]:,}–{seeds[-1]:,}, {args.jobs} processes",
        flush=True,
    )
    library_setup = args.setup == "library"
    if library_setup:
        print(
            f"setup: every stage before {names[0]} played as the skill library's complete "
            "code in both variants (not the run's own policy before it)",
            flush=True,
        )
    started = time.perf_counter()
    chunks = [seeds[i :: args.jobs] for i in range(args.jobs) if seeds[i :: args.jobs]]
    # Small pieces, so progress shows and both processes stay busy to the end.
    pieces = [chunk[i : i + 10] for chunk in chunks for i in range(0, len(chunk), 10)]
    records: list[dict[str, Any]] = []
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=spawn) as pool:
        futures = [
            pool.submit(
                play_worlds,
                args.run_dir,
                names,
                piece,
                code,
                library_setup,
                args.job,
                args.through,
            )  # fmt: skip
            for piece in pieces
        ]
        for future in concurrent.futures.as_completed(futures):
            records.extend(future.result())
            print(
                f"  {len(records)}/{len(seeds)} worlds, {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    records.sort(key=lambda r: r["seed"])
    wall = time.perf_counter() - started
    steps = sum(v["steps"] for r in records for k, v in r.items() if k != "seed")
    rows = [summary(records, name) for name in names]
    for row in rows:
        if row["reached_by_one"]:
            print(
                f"note: {row['stage']} was reached by one variant only on "
                f"{row['reached_by_one']} worlds (left out of the pairs)"
            )
    print(
        f"\n{len(seeds)} worlds, {steps:,} env steps (every episode of every variant), "
        f"{wall:.0f} s\n"
    )
    print(
        "| stage | pairs (reached) | its code | learned | only learned / only code | "
        "learned − code [95 %] | task: code | task: learned | task: learned − code [95 %] |"
    )
    print("|---|---:|---|---|---:|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['stage']} | {row['pairs']} | {rate(row['coded'], row['pairs'])} | "
            f"{rate(row['learned'], row['pairs'])} | {row['only_learned']} / "
            f"{row['only_coded']} | {row['difference']:+.3f} [{row['lower']:+.3f}, "
            f"{row['upper']:+.3f}] | {rate(row['task_coded'], row['worlds'])} | "
            f"{rate(row['task_learned'], row['worlds'])} | {row['task_difference']:+.3f} "
            f"[{row['task_lower']:+.3f}, {row['task_upper']:+.3f}] |"
        )
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            json.dumps(
                {
                    "run": bundle.manifest.get("run"),
                    "run_dir": str(args.run_dir),
                    "run_seed": run_seed,
                    "seeds": [seeds[0], seeds[-1]],
                    "setup": args.setup,
                    "job": args.job,
                    "through": args.through,
                    "env_steps": steps,
                    "wall_s": round(wall, 1),
                    "rows": rows,
                    "records": records,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
