#!/usr/bin/env python3
"""Benchmark: PPO over coded options with and without the stage's own code as a
resumable option, and with and without SMDP discounting, against the coded version.

    python benchmarks/bench_options.py                  make_stone_pickaxe, 8,192 decisions,
                                                        2 envs, 40 held-out worlds
    python benchmarks/bench_options.py --sub collect_iron --steps 16384
    python benchmarks/bench_options.py --quick          1,024 decisions, 10 worlds
    python benchmarks/bench_options.py --sub collect_iron \\
        --variants menu/plain,menu+own/plain,prims --greedy --select 40
                                                        the ablation table's rows

The job is a diamond-plan sub-action as the offline fast agent writes its RL config:
the library's coded options for the step (``knowledge.options.options_for``), moving and
'do' as primitives, the sparse success reward, and as setup code the library's coded
stages of every step before it. The variants: that menu alone, or with the stage's own
coded policy (the library's code for the step, the "coded version") as the resumable
option ``stage_code`` (50 steps a choice); each with SMDP PPO (γ^k) or plain PPO (γ per
decision). Same policy seed, same training worlds, same budget. Each trained policy is
played (actions sampled, seeded, as the learner's own evaluation does) on the same
held-out worlds as the coded version (the stage's code alone through the same env:
setup, success test and step cap). Success with 95 % Wilson intervals, and each
variant against the coded version world for world (``method.paired.compare``).

``+prior`` starts PPO from the stage's code (``[training.ppo] code_prior``: the untrained
policy picks ``stage_code`` with probability ``--prior``). ``prims`` is PPO over the
world's primitive actions alone (all of them, no coded option), stopped at the most world
steps (setup included) any option variant before it took: the same world-step budget.
``--greedy`` also plays each trained policy with its most likely action
(``predict(deterministic=True)``) besides the sampled one. ``--select N`` adds the row
"RL-GPT's pick": the method's rule for keeping a learned version (its paired lower bound
against the code above 0, :func:`method.paired.compare`), applied to the sampled, non-
primitive variants on N *other* worlds (selection worlds, after the held-out ones), and
the picked version (the code when none qualifies) reported on the held-out worlds: chosen
on some worlds, reported on others.

Not a test: it prints a table (``--json`` writes the rows) and exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actors.learner import LearnerActor, set_torch_threads  # noqa: E402
from knowledge import library, options, recipes, revisions  # noqa: E402
from messages.task import CodedAction, RLConfig  # noqa: E402
from messages.train import PPOSettings, TrainRequest  # noqa: E402
from method.paired import compare, wilson_interval  # noqa: E402
from rl.held_out import held_out  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_start_states import OPTION_STEPS, learned_config  # noqa: E402

VITALS = [
    CodedAction(n, options.option(n), max_steps=OPTION_STEPS, description=n)
    for n in ("drink_water", "eat_cow")
]
"""``+vitals``: the library's trips for drink and food offered as options, so that the
policy may top its vitals up before the survival needs' thresholds call a trip."""

EVAL_SEED = 1_000_000
"""First held-out world (the learner's default; training worlds lie far below)."""


def configs(
    name: str, target: str = "diamond", code: str = "best"
) -> tuple[RLConfig, RLConfig, RLConfig]:
    """``name``'s RL config with the library menu (``bench_start_states.learned_config``,
    as the offline fast agent writes it), the same with the stage's own code as the
    resumable option ``stage_code``, and the coded version alone (only that option).
    ``code``: the stage's code is the library's final one (``best``) or its bare first
    template (``simplest``, the offline backend's first version with ``offline_first =
    "simplest"``); the setup before the stage is the library's final code either way."""
    base = learned_config(name, target)
    steps = recipes.chain(target)
    i = [s.name for s in steps].index(name)
    if code == "simplest":
        source = library.code_for(steps[i], revisions.first_params(steps[i]))
    else:
        source = library.coded_stages(steps[: i + 1])[i].code
    n, d, src = options.stage_code_option(source)
    own = CodedAction(n, src, max_steps=options.STAGE_CODE_STEPS, description=d, resumable=True)
    with_own = dataclasses.replace(base, coded_actions=[own, *base.coded_actions])
    code_only = dataclasses.replace(base, primitives=["noop"], coded_actions=[own])
    return base, with_own, code_only


def train_and_play(
    req: TrainRequest, seeds: list[int], greedy: bool = False, select: list[int] = ()
) -> dict:
    """Train ``req`` with the learner's own ``train`` in this process, then play the
    policy on ``seeds``: its row, with the outcome per world (``greedy``: also played
    with its most likely actions, under ``greedy_records``; ``select``: also played,
    sampled, on those selection worlds, under ``select_records``)."""
    import torch
    from stable_baselines3 import PPO

    with tempfile.TemporaryDirectory() as tmp:
        learner = LearnerActor.__new__(LearnerActor)
        learner.workdir = learner.run_dir = Path(tmp)
        learner.run_id, learner.actor_id = "bench", "learner-bench"
        started = time.perf_counter()
        result = learner.train(req, "cpu", threading.Event(), "nobody")
        train_wall = time.perf_counter() - started
        if result.failure:
            raise SystemExit(f"{req.name}: {result.failure}")
        model = PPO.load(result.policy_path, device="cpu")
    torch.manual_seed(req.seed)
    started = time.perf_counter()
    rate, steps, records = held_out(
        req.config, lambda obs: model.predict(obs, deterministic=False)[0], seeds
    )
    eval_s = round(time.perf_counter() - started, 1)
    more = {}
    if greedy:
        more["greedy_records"] = held_out(
            req.config, lambda obs: model.predict(obs, deterministic=True)[0], seeds
        )[2]
    if select:
        torch.manual_seed(req.seed + 1)
        more["select_records"] = held_out(
            req.config, lambda obs: model.predict(obs, deterministic=False)[0], select
        )[2]
    chosen: dict[str, int] = {}
    for r in records:
        for a in r.get("actions", ()):
            chosen[a] = chosen.get(a, 0) + 1
    return {
        "train_s": round(train_wall, 1),
        "eval_s": eval_s,
        "decisions": result.steps,
        "world_steps": result.primitive_steps,
        "train_episodes": result.episodes,
        "records": records,
        "choices": dict(sorted(chosen.items(), key=lambda kv: -kv[1])[:6]),
        **more,
    }


def outcomes(records: list[dict]) -> dict[int, int]:
    """World seed → 1 success, 0 failure (worlds whose setup failed left out)."""
    return {r["seed"]: int(r["success"]) for r in records if "skipped" not in r}


def paired(coded: dict[int, int], mine: dict[int, int]) -> tuple[list[int], list[int]]:
    """The code's and ``mine``'s outcomes on the worlds both played, world for world."""
    common = sorted(set(mine) & set(coded))
    return [coded[s] for s in common], [mine[s] for s in common]


def pick(coded: dict[int, int], rows: list[dict]) -> tuple[str, dict | None]:
    """The method's rule on the selection worlds: the sampled option variant whose paired
    lower bound against the code is highest and above 0 (its name and row), else the
    code (``"coded version"``, None)."""
    best, best_row, best_lower = "coded version", None, 0.0
    for row in rows:
        if "select_records" not in row:
            continue
        verdict = compare(*paired(coded, outcomes(row["select_records"])))
        row["select_verdict"] = dataclasses.asdict(verdict)
        if verdict.lower > best_lower:
            best, best_row, best_lower = row["variant"], row, verdict.lower
    return best, best_row


def table_row(name: str, mine: dict[int, int], coded: dict[int, int], row: dict) -> str:
    """One line of the printed table: ``mine`` against the coded version world for world."""
    wins, n = sum(mine.values()), len(mine)
    low, high = wilson_interval(wins, n)
    cells = [name, f"{wins}/{n} = {wins / max(n, 1):.2f}", f"{low:.2f}–{high:.2f}"]
    if mine is coded:
        cells += ["—", "—", "—", "—"]
    else:
        verdict = compare(*paired(coded, mine))
        differ = verdict.challenger_only + verdict.incumbent_only
        lower = f"{verdict.lower:+.2f}" if differ else "— (no world differs)"
        cells += [f"{verdict.difference:+.2f}", lower,
                  str(row.get("world_steps", "—")), str(row.get("train_s", "—"))]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def load_rows(path: Path) -> list[dict]:
    """One run's rows as ``--json`` wrote them (gzip or not)."""
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def summarise(paths: list[Path]) -> list[str]:
    """The ablation table of several runs of one sub-action (each file one policy seed,
    its variants played on the same held-out worlds as the code): per variant, sampled
    and greedy, success on each run, the mean, the paired difference against the code
    as the mean of the runs with its 95 % t interval, and over every pair of every run
    the difference and its lower bound (runs share their worlds, so the pooled bound
    treats a world played by three policies as three pairs). Markdown lines."""
    from crafter_bench.across import mean_interval

    runs = [load_rows(p) for p in paths]
    coded = outcomes(runs[0][0]["records"])
    for path, rows in zip(paths, runs, strict=True):
        if outcomes(rows[0]["records"]) != coded:
            raise SystemExit(f"{path}: its coded version played other worlds or otherwise")
    found: dict[str, list[tuple[dict, dict]]] = {}
    for rows in runs:
        for row in rows[1:]:
            if row["variant"] == "pick":
                continue
            for played, key in (("", "records"), (", greedy", "greedy_records")):
                if key in row:
                    found.setdefault(row["variant"] + played, []).append((row, row[key]))
    lines = [
        "| variant | success, each run | mean | vs code: mean of runs [95 % t] | "
        "vs code, pooled pairs: difference (lower bound) | world steps trained, mean |",
        "|---|---|---:|---|---|---:|",
    ]
    wins, n = sum(coded.values()), len(coded)
    lines.append(f"| coded version | {wins}/{n} | {wins / n:.2f} | — | — | — |")
    for name, played in found.items():
        wins_each, rates, diffs, a, b = [], [], [], [], []
        for _, records in played:
            mine = outcomes(records)
            ours, theirs = paired(coded, mine)
            a += ours
            b += theirs
            wins_each.append(sum(mine.values()))
            rates.append(wins_each[-1] / max(len(mine), 1))
            diffs.append(compare(ours, theirs).difference)
        each = " / ".join(map(str, wins_each))
        d = mean_interval(diffs)
        spread = f" [{d['low']:+.2f}, {d['high']:+.2f}]" if d["low"] is not None else ""
        pooled = compare(a, b)
        bound = f"{pooled.lower:+.2f}" if a != b else "no world differs"
        steps = sum(row["world_steps"] for row, _ in played) / len(played)
        lines.append(
            f"| {name} | {each} (of {n}) | {sum(rates) / len(rates):.2f} | "
            f"{d['mean']:+.2f}{spread} | {pooled.difference:+.2f} ({bound}) | "
            f"{steps:,.0f} |"
        )
    picks = [rows[-1]["picked"] for rows in runs if rows[-1]["variant"] == "pick"]
    if picks:
        lines.append(f"\nRL-GPT's pick on the selection worlds, each run: {', '.join(picks)}")
    return lines


def worlds(first: int, held_out: int, select: int) -> tuple[list[int], list[int]]:
    """The held-out worlds from ``first`` and the ``select`` selection worlds after them;
    ``first`` below ``EVAL_SEED`` is refused (the learner trains on worlds below)."""
    if first < EVAL_SEED:
        raise SystemExit(
            f"--worlds-from {first}: held-out worlds start at {EVAL_SEED:,} or above (the "
            "learner trains on worlds below); pick a larger first world"
        )
    return list(range(first, first + held_out)), list(
        range(first + held_out, first + held_out + select)
    )


def main() -> None:
    # Checked numbers: a negative --eval or --select put selection worlds among the
    # training worlds below EVAL_SEED.
    from rlgpt.cli import number, output_file

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sub", default="make_stone_pickaxe", help="the learned sub-action")
    parser.add_argument("--target", default="diamond",
                        help="the plan --sub is a step of (e.g. eat_plant)")  # fmt: skip
    parser.add_argument("--steps", type=number(int, 1), default=8192, help="PPO decisions per job")
    parser.add_argument("--envs", type=number(int, 1), default=2, help="vectorised envs")
    parser.add_argument("--eval", type=number(int, 1), default=40, help="held-out worlds")
    parser.add_argument("--seed", type=int, default=0, help="policy seed")
    parser.add_argument("--worlds-from", type=int, default=EVAL_SEED, metavar="SEED",
                        help=f"first held-out world (default {EVAL_SEED:,}; selection "
                        "worlds follow the held-out ones); a fresh range for a run that "
                        "checks an earlier one")  # fmt: skip
    parser.add_argument(
        "--gamma", type=number(float, 0, 1), default=PPOSettings().gamma, help="PPO's γ"
    )
    parser.add_argument(
        "--variants", default="menu,menu+own,menu/plain,menu+own/plain",
        help="comma-separated: menu, +own (the stage's code as an option), +map (the "
        "remembered map in the observation), +prior (the untrained policy picks the "
        "stage's code with --prior's probability), +vitals (trips for drink and food as "
        "options), /plain for plain PPO; e.g. menu+own+map; "
        "prims: PPO over the primitive actions alone, at the world-step budget of the "
        "most expensive option variant before it",
    )  # fmt: skip
    parser.add_argument("--code", choices=("best", "simplest"), default="best",
                        help="the stage's own code (the coded version and the option "
                        "stage_code): the library's final code or its bare first "
                        "template")  # fmt: skip
    parser.add_argument("--prior", type=number(float, 0, 0.99), default=0.9,
                        help="+prior's code_prior (default 0.9)")  # fmt: skip
    parser.add_argument("--greedy", action="store_true",
                        help="also play each policy with its most likely actions")  # fmt: skip
    parser.add_argument("--select", type=number(int, 0), default=0, metavar="N",
                        help="pick a version by the method's rule on N other worlds")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="1,024 decisions, 10 worlds")
    parser.add_argument("--json", type=output_file, help="write the rows here")
    parser.add_argument("--summarise", type=Path, nargs="+", metavar="JSON",
                        help="print the table of these runs (--json files of one "
                        "sub-action, one policy seed each) and exit")  # fmt: skip
    args = parser.parse_args()
    if args.summarise:
        print("\n".join(summarise(args.summarise)))
        return
    if args.quick:
        args.steps, args.eval = 1024, 10
    variants = args.variants.split(",")
    for variant in variants:
        menu, _, plain = variant.partition("/")
        extras = set(menu.split("+")[1:])
        known = {"own", "map", "prior", "vitals"}
        if variant != "prims" and (menu.split("+")[0] != "menu" or extras - known):
            raise SystemExit(
                f"--variants: {variant!r} is not prims or menu[+own][+map][+prior][+vitals][/plain]"
            )
    seeds, select = worlds(args.worlds_from, args.eval, args.select)
    set_torch_threads()
    base, with_own, code_only = configs(args.sub, args.target, args.code)
    print(f"job: {args.sub}, {args.steps} decisions, {args.envs} envs, {args.eval} held-out "
          f"worlds from {args.worlds_from}, {args.select} selection worlds, policy seed "
          f"{args.seed}, the stage's code: {args.code}", flush=True)  # fmt: skip

    started = time.perf_counter()
    _, _, records = held_out(code_only, lambda obs: 1, seeds)  # always the stage's code
    coded = outcomes(records)
    rows = [{"variant": "coded version", "eval_s": round(time.perf_counter() - started, 1),
             "records": records}]  # fmt: skip
    if select:
        rows[0]["select_records"] = held_out(code_only, lambda obs: 1, select)[2]
    print(json.dumps({"variant": "coded version", "success": sum(coded.values()),
                      "worlds": len(coded)}), flush=True)  # fmt: skip
    for variant in variants:
        menu, _, plain = variant.partition("/")
        extras = set(menu.split("+")[1:])
        prior = args.prior if "prior" in extras else 0.0
        steps, ppo = args.steps, PPOSettings(smdp=not plain, gamma=args.gamma, code_prior=prior)
        cap = 0  # world steps: none but prims' (decisions are the option variants' budget)
        if variant == "prims":  # every primitive, no option: one decision per world step
            config = dataclasses.replace(base, primitives=[], coded_actions=[])
            cap = max((r["world_steps"] for r in rows if "world_steps" in r), default=steps)
            ppo = PPOSettings(smdp=False, gamma=args.gamma)
            steps = cap  # at most one decision a world step: the world steps stop it
        else:
            config = with_own if "own" in extras else base
        if "vitals" in extras:  # trips for drink and food the policy may take any time
            config = dataclasses.replace(config, coded_actions=[*config.coded_actions, *VITALS])
        if "map" in extras:  # the remembered map around the player besides the view
            config = dataclasses.replace(config, observation=[*config.observation, "map"])
        req = TrainRequest(
            name=f"bench-{args.sub}-{menu.replace('+', '-')}-{'plain' if plain else 'smdp'}",
            config=config, total_steps=steps, n_envs=args.envs, seed=args.seed,
            ppo=ppo, eval_episodes=1, progress_every_s=3600.0,
            max_world_steps=cap,
        )  # fmt: skip
        chosen_on = select if variant != "prims" else []
        row = {"variant": variant, **train_and_play(req, seeds, args.greedy, chosen_on)}
        rows.append(row)
        mine = outcomes(row["records"])
        shown = {k: v for k, v in row.items() if not k.endswith("records")}
        shown |= {"success": sum(mine.values()), "worlds": len(mine)}
        if args.greedy:
            shown["greedy_success"] = sum(outcomes(row["greedy_records"]).values())
        print(json.dumps(shown), flush=True)

    print(f"\n{args.sub}: {args.steps} decisions per option job, {len(coded)} held-out "
          "worlds\n")  # fmt: skip
    print("| variant | success | 95 % interval | vs coded: difference | lower bound | "
          "world steps trained | train s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    print(table_row("coded version", coded, coded, rows[0]))
    for row in rows[1:]:
        print(table_row(row["variant"], outcomes(row["records"]), coded, row))
        if "greedy_records" in row:
            print(table_row(row["variant"] + ", greedy", outcomes(row["greedy_records"]),
                            coded, row))  # fmt: skip
    if select:
        name, row = pick(outcomes(rows[0]["select_records"]), rows[1:])
        mine = coded if row is None else outcomes(row["records"])
        print(table_row(f"RL-GPT's pick on {len(select)} other worlds: {name}", mine,
                        coded, row or {}))  # fmt: skip
        rows.append({"variant": "pick", "picked": name})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
