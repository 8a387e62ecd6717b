"""The learned survival arbiter against the coded one, in the diamond chain's episodes.

The stages are the skill library's coded templates for ``chain('diamond')`` through the
production composer (:func:`episodes.composite.run_composed`), 10,000-step episodes on real
Crafter. Two arbiters decide, at the prelude's survival checks, what the player does:

- **coded**: the thresholds (the prelude's ``vitals``) and the composer's five survival
  needs — what the library ships;
- **learned**: a PPO policy (:class:`rl.smdp.SMDPPPO`) over :data:`episodes.arbiter.OPTIONS`
  (the same survival helpers), trained in these same episodes; no composer needs.

Commands (seeds from ``method.seeds.arbiter_seeds``: part 'train' trains, 'choose'
picks a checkpoint, 'report' is for the reported figures only)::

    python benchmarks/bench_arbiter.py train --decisions 400000 --out runs/arbiter
    python benchmarks/bench_arbiter.py play --policy runs/arbiter/arbiter.zip \\
        --part report --worlds 1000 --out runs/arbiter/report.json
    python benchmarks/bench_arbiter.py compare runs/arbiter/report.json

``play`` plays both arbiters on the same worlds (paired) in ``--jobs`` processes;
``compare`` prints diamonds, deaths by cause and Crafter's score for each, and the paired
difference in diamonds with an exact 95 % interval.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

EPISODE_STEPS = 10_000
"""The diamond episode's cap (as bench_deaths and the final evaluation's)."""
WALL_S = 1e9
"""No wall budget inside training: the episode's thread waits on PPO's updates."""
CODED_PRIOR = 3.0
"""The initial logit of the 'coded' option over the others (~70 % of the first choices
with 9 options): PPO starts near the coded arbiter and explores away from it, instead of
from a uniformly random choice, which dies in most episodes before the chain's middle."""


def _chain() -> tuple[Any, Any]:
    from knowledge import library, recipes
    from messages.task import Subtask

    stages = library.coded_stages(recipes.chain("diamond"))
    goal = Subtask("diamond", "collect a diamond", goal={"diamond": 1}, max_steps=EPISODE_STEPS)
    return stages, goal


def make_play(learned: bool = True) -> Any:
    """``play(seed, hook, on_step)``: one composed diamond episode. ``learned``: the
    arbiter's needs (``knowledge.survival.arbiter_needs``) with ``hook`` deciding, as
    :class:`episodes.arbiter.ArbiterEnv` takes it; else the shipped needs and thresholds
    (``hook`` must be None)."""
    from episodes.composite import prepare_stages, run_composed
    from knowledge.survival import arbiter_needs, survival_needs
    from worlds.crafter_world import CrafterWorld

    world = CrafterWorld()
    stages, goal = _chain()
    prepared = prepare_stages(stages, world)
    needs = arbiter_needs() if learned else survival_needs()
    need_stages = prepare_stages([n.stage for n in needs], world)

    def play(seed: int, hook: Any, on_step: Any) -> Any:
        return run_composed(
            world, prepared, needs, goal, seed, wall_s=WALL_S, arbiter=hook,
            on_step=on_step, need_stages=need_stages,
        )  # fmt: skip

    play.world = world  # type: ignore[attr-defined]  # the bench reads the player's vitals
    return play


# ---------------------------------------------------------------------- train


def train(args: argparse.Namespace) -> None:
    import numpy as np
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    from episodes.arbiter import CODED, FLOOR, ArbiterEnv
    from method.seeds import arbiter_seeds
    from rl.smdp import SMDPPPO

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    seeds = arbiter_seeds("train", args.worlds, args.first_world)
    envs = [
        ArbiterEnv(
            make_play(),
            seeds[i :: args.envs],
            death_penalty=args.death_penalty,
            health_weight=args.health_weight,
            floor=FLOOR if args.floor else (),
        )
        for i in range(args.envs)
    ]  # each env its own worlds, in order
    vec = DummyVecEnv([lambda e=e: e for e in envs])
    model = SMDPPPO(
        "MlpPolicy", vec, n_steps=args.n_steps, batch_size=args.batch, n_epochs=args.epochs,
        learning_rate=args.lr, gamma=args.gamma, gae_lambda=args.gae_lambda, ent_coef=args.ent,
        clip_range=0.2, seed=args.seed, device="cpu", verbose=0,
        policy_kwargs={"net_arch": [64, 64]},
    )  # fmt: skip
    if args.init:  # go on from a saved arbiter (its weights; this run's settings)
        model.set_parameters(args.init, device="cpu")
    else:
        with torch.no_grad():  # start near the coded arbiter (see CODED_PRIOR)
            model.policy.action_net.bias[CODED] += CODED_PRIOR
    started = time.monotonic()
    log = (out / "train.jsonl").open("a")

    class Progress(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_save = args.save_every

        def _on_rollout_end(self) -> None:
            done = [r for e in envs for r in e.finished]
            recent = done[-200:]
            rate = sum(r["success"] for r in recent) / max(1, len(recent))
            steps = sum(r["steps"] for r in done)
            options = collections.Counter()
            for r in recent:
                options.update(r["decisions"])
            line = {
                "decisions": self.num_timesteps, "episodes": len(done), "world_steps": steps,
                "diamond_recent": round(rate, 3), "wall_s": round(time.monotonic() - started),
                "options": dict(options),
            }  # fmt: skip
            log.write(json.dumps(line) + "\n")
            log.flush()
            print(
                f"{self.num_timesteps} decisions, {len(done)} episodes, {steps} world steps, "
                f"diamond {rate:.2f} over the last {len(recent)}, "
                f"{time.monotonic() - started:.0f} s",
                flush=True,
            )
            if self.num_timesteps >= self.next_save:
                self.model.save(out / f"arbiter_{self.num_timesteps}.zip")
                self.next_save += args.save_every

        def _on_step(self) -> bool:
            return True

    model.learn(args.decisions, callback=Progress())
    model.save(out / "arbiter.zip")
    done = [r for e in envs for r in e.finished]
    meta = {
        "decisions": int(model.num_timesteps),
        "episodes": len(done),
        "world_steps": int(sum(r["steps"] for r in done)),
        "wall_s": round(time.monotonic() - started, 1),
        "train_worlds": [seeds[0], seeds[-1]],
        "seed": args.seed,
        "hyper": {k: v for k, v in vars(args).items() if k not in ("func", "out")},
        "numpy": np.__version__,
        "torch": torch.__version__,
    }
    (out / "arbiter.json").write_text(json.dumps(meta, indent=1))
    for e in envs:
        e.close()
    print(json.dumps(meta))


# ---------------------------------------------------------------------- play


_PLAYERS: dict[str, Any] = {}


_HITS: list = []
"""Every loss of the player's health in this worker, with its source (bench_deaths'
patch of Crafter's objects); its first item is the step counter."""


def _episode(job: tuple[str, int, str | None, tuple[str, ...]]) -> dict[str, Any]:
    """One world with one arbiter: 'coded' (thresholds + needs) or a policy file (with
    its floor: the needs whose thresholds overrule it, ``ArbiterHook.floor``)."""
    from bench_deaths import _patch_crafter

    from episodes.arbiter import ArbiterHook, load_policy

    variant, seed, policy_path, floor = job
    key = f"{variant}:{policy_path}"
    if not _HITS:
        _patch_crafter(_HITS)
    if key not in _PLAYERS:
        coded = variant == "coded"
        _PLAYERS[key] = (make_play(learned=not coded), None if coded else load_policy(policy_path))
    play, policy = _PLAYERS[key]
    hook = ArbiterHook(policy, floor) if policy is not None else None
    del _HITS[1:]
    _HITS[0]["step"] = 0
    world = play.world
    ep = play(seed, hook, None)
    player = world._env._player
    died = ep.cause == "episode_done" and player.health <= 0
    return {
        "variant": variant, "seed": seed, "success": ep.success, "steps": ep.steps,
        "cause": ep.cause, "died": died,
        "blow": _HITS[-1][1] if died and len(_HITS) > 1 else "",
        "vitals": {k: int(player.inventory[k]) for k in ("health", "food", "drink", "energy")},
        "achievements": sorted(set(ep.achievements)),
        "decisions": dict(hook.decisions) if hook is not None else {},
    }  # fmt: skip


def play(args: argparse.Namespace) -> None:
    from episodes.arbiter import FLOOR
    from method.seeds import arbiter_seeds

    seeds = arbiter_seeds(args.part, args.worlds, args.first)
    variants = ["coded", "learned"] if not args.only else [args.only]
    if "learned" in variants and not args.policy:
        raise SystemExit("bench_arbiter play: --policy PATH.zip is needed to play 'learned'")
    floor = FLOOR if args.floor else ()
    jobs = [(v, s, args.policy, floor) for s in seeds for v in variants]
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        for result in pool.map(_episode, jobs, chunksize=2):
            results.append(result)
            if len(results) % 100 == 0 or len(results) == len(jobs):
                wins = collections.Counter(r["variant"] for r in results if r["success"])
                print(
                    f"  {len(results)}/{len(jobs)} episodes, diamonds {dict(wins)}, "
                    f"{time.monotonic() - started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    meta = {"part": args.part, "first": args.first, "worlds": args.worlds, "only": args.only,
            "policy": args.policy, "floor": list(floor),
            "wall_s": round(time.monotonic() - started, 1)}  # fmt: skip
    Path(args.out).write_text(json.dumps({"meta": meta, "episodes": results}))
    compare_results(results)


# ---------------------------------------------------------------------- compare


def paired_interval(wins_a: int, wins_b: int, n: int) -> tuple[float, float]:
    """95 % interval of P(b) − P(a) from the discordant pairs (b won, a lost: ``wins_b``;
    a won, b lost: ``wins_a``) of ``n`` paired worlds: Wilson's interval on the share of
    discordant pairs that favour b, times the discordant share (the rule the method's
    version choice uses, :mod:`method.paired`)."""
    from method.paired import wilson_interval

    d = wins_a + wins_b
    if d == 0 or n == 0:
        return 0.0, 0.0
    lo, hi = wilson_interval(wins_b, d)
    share = d / n
    return share * (2 * lo - 1), share * (2 * hi - 1)


def compare_results(results: list[dict[str, Any]]) -> dict[str, Any]:
    from crafter import constants

    from method.ledger import crafter_score, success_rates
    from method.paired import wilson_interval

    by = collections.defaultdict(dict)
    for r in results:
        by[r["variant"]][r["seed"]] = r
    out: dict[str, Any] = {}
    for variant, eps in by.items():
        n = len(eps)
        wins = sum(r["success"] for r in eps.values())
        deaths = collections.Counter(_death_cause(r) for r in eps.values() if r["died"])
        unlocked = [dict.fromkeys(r["achievements"], 1) for r in eps.values()]
        score = crafter_score(success_rates(unlocked, constants.achievements),
                              constants.achievements)  # fmt: skip
        options = collections.Counter()
        for r in eps.values():
            options.update(r["decisions"])
        lo, hi = wilson_interval(wins, n)
        out[variant] = {"worlds": n, "diamonds": wins / n, "interval": [lo, hi],
                        "deaths": sum(deaths.values()), "deaths_by": dict(deaths),
                        "score": score, "options": dict(options)}  # fmt: skip
        print(f"{variant:8} diamonds {wins}/{n} = {wins / n:.1%} [{lo:.1%}, {hi:.1%}]; "
              f"deaths {sum(deaths.values())} {dict(deaths)}; Crafter score "
              f"{score:.1f} %; options {dict(options.most_common())}")  # fmt: skip
    if {"coded", "learned"} <= set(by):
        common = sorted(set(by["coded"]) & set(by["learned"]))
        a_only = sum(by["coded"][s]["success"] and not by["learned"][s]["success"] for s in common)
        b_only = sum(by["learned"][s]["success"] and not by["coded"][s]["success"] for s in common)
        lo, hi = paired_interval(a_only, b_only, len(common))
        diff = (b_only - a_only) / len(common)
        out["paired"] = {"worlds": len(common), "difference": diff, "interval": [lo, hi],
                         "learned_only": b_only, "coded_only": a_only}  # fmt: skip
        print(f"learned − coded, paired on {len(common)} worlds: {diff:+.1%} "
              f"[{lo:+.1%}, {hi:+.1%}] (learned alone {b_only}, coded alone {a_only})")  # fmt: skip
    return out


def _death_cause(r: dict[str, Any]) -> str:
    """The killing blow's source (bench_deaths: zombie, zombie_sleeping, arrow, lava,
    lack_food, ...); for records without it, a vital at 0 when one is, else damage."""
    if r.get("blow"):
        return r["blow"]
    lacking = [k for k in ("food", "drink", "energy") if r["vitals"][k] <= 0]
    return "lack_" + "+".join(lacking) if lacking else "damage"


def compare(args: argparse.Namespace) -> None:
    episodes = [e for f in args.files for e in json.loads(Path(f).read_text())["episodes"]]
    figures = compare_results(episodes)
    metas = [json.loads(Path(f).read_text())["meta"] for f in args.files]
    train = json.loads(Path(args.train_meta).read_text()) if args.train_meta else None
    if args.summary:
        by: dict[str, dict[int, Any]] = collections.defaultdict(dict)
        for e in episodes:
            by[e["variant"]][e["seed"]] = e
        # Per world, in seed order: enough to recompute every figure's pairing.
        outcomes = {
            v: {"first_seed": min(eps), "worlds": len(eps),
                "diamond": "".join(str(int(eps[s]["success"])) for s in sorted(eps)),
                "blow": [eps[s].get("blow", "") for s in sorted(eps)]}
            for v, eps in by.items()
        }  # fmt: skip
        summary = {"figures": figures, "plays": metas, "training": train, "outcomes": outcomes}
        Path(args.summary).parent.mkdir(parents=True, exist_ok=True)
        Path(args.summary).write_text(json.dumps(summary, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(markdown(figures, metas, train, args.files))


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def markdown(
    figures: dict[str, Any], metas: list[dict[str, Any]], train: dict[str, Any] | None,
    files: list[str],
) -> str:  # fmt: skip
    """The benchmark's section of BENCHMARKS.md, from :func:`compare_results`' figures."""
    parts = sorted({(m["part"], m["first"], m["worlds"]) for m in metas})
    where = "; ".join(f"part '{p}' worlds {f}…{f + n - 1}" for p, f, n in parts)
    lines = [
        f"Composed diamond episodes (the chain's coded stages, {EPISODE_STEPS:,}-step cap, real "
        f"Crafter), the same worlds for both arbiters ({where} of `method.seeds.arbiter_seeds`, "
        "never trained or chosen on).",
        "",
        "| arbiter | worlds | diamonds (95 % Wilson) | deaths | Crafter score |",
        "|---|---|---|---|---|",
    ]
    for variant in ("coded", "learned"):
        f = figures.get(variant)
        if f is None:
            continue
        lo, hi = f["interval"]
        lines.append(
            f"| {variant} | {f['worlds']} | {_pct(f['diamonds'])} [{_pct(lo)}, {_pct(hi)}] "
            f"| {f['deaths']} | {f['score']:.1f} % |"
        )
    causes = sorted(
        {c for v in ("coded", "learned") for c in figures.get(v, {}).get("deaths_by", {})}
    )
    if causes:
        lines += ["", "Deaths by killing blow (bench_deaths' sources):", "",
                  "| blow | " + " | ".join(v for v in ("coded", "learned") if v in figures) + " |",
                  "|---|" + "---|" * sum(v in figures for v in ("coded", "learned"))]  # fmt: skip
        for c in causes:
            row = [
                str(figures[v]["deaths_by"].get(c, 0)) for v in ("coded", "learned") if v in figures
            ]
            lines.append(f"| {c} | " + " | ".join(row) + " |")
    paired = figures.get("paired")
    if paired:
        lo, hi = paired["interval"]
        diff = f"{100 * paired['difference']:+.1f}"
        lines += ["", f"Learned − coded, paired on {paired['worlds']} worlds: "
                  f"**{diff} points** [{100 * lo:+.1f}, {100 * hi:+.1f}] "
                  f"(learned alone won {paired['learned_only']}, coded alone "
                  f"{paired['coded_only']}; Wilson on the discordant pairs, "
                  "as the method's version choice)."]  # fmt: skip
    learned = figures.get("learned", {}).get("options")
    if learned:
        total = sum(learned.values())
        used = ", ".join(f"{k} {100 * v / total:.1f} %" for k, v in
                         sorted(learned.items(), key=lambda kv: -kv[1]))  # fmt: skip
        lines += ["", f"The learned arbiter's decisions ({total:,}): {used}."]
    if train:
        h = train.get("hyper", {})
        lines += ["", f"PPO's cost (SMDP PPO, `rl.smdp`): {train['decisions']:,} decisions, "
                  f"{train['episodes']:,} episodes, {train['world_steps']:,} world steps, "
                  f"{train['wall_s'] / 60:.0f} min of wall time in one process "
                  f"(torch {train['torch']}, one thread, on a 2-core machine); "
                  f"training worlds {train['train_worlds'][0]}…, seed {train['seed']}; "
                  f"lr {h.get('lr')}, {h.get('epochs')} epochs, γ {h.get('gamma')} per world "
                  f"step, death penalty {h.get('death_penalty', 0)}, "
                  f"health weight {h.get('health_weight', 0)}."]  # fmt: skip
    lines += ["", "Reproduce:", "", "```bash"]
    if train:
        h = train.get("hyper", {})
        flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in h.items())
        lines.append(f"python benchmarks/bench_arbiter.py train {flags} --out runs/arbiter")
    for m in metas:
        policy = f" --policy runs/arbiter/{Path(m['policy']).name}" if m.get("policy") else ""
        only = f" --only {m['only']}" if m.get("only") else ""
        lines.append(
            f"python benchmarks/bench_arbiter.py play{policy}{only} --part {m['part']} "
            f"--first {m['first']} --worlds {m['worlds']} --out runs/arbiter/{m['part']}.json"
        )
    lines += [
        "python benchmarks/bench_arbiter.py compare runs/arbiter/*.json"
        + (" --train-meta runs/arbiter/arbiter.json" if train else ""),
        "```",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(required=True)
    t = sub.add_parser("train", help="PPO on the arbiter's decisions")
    t.add_argument("--decisions", type=int, default=400_000)
    t.add_argument("--worlds", type=int, default=100_000, help="training worlds, cycled")
    t.add_argument("--envs", type=int, default=4)
    t.add_argument("--n-steps", type=int, default=256)
    t.add_argument("--batch", type=int, default=256)
    t.add_argument("--epochs", type=int, default=4)
    t.add_argument("--lr", type=float, default=3e-4)
    t.add_argument("--gamma", type=float, default=0.999, help="per world step (SMDP)")
    t.add_argument("--ent", type=float, default=0.01)
    t.add_argument("--death-penalty", type=float, default=0.0, help="reward at death")
    t.add_argument("--health-weight", type=float, default=0.0, help="reward per health point")
    t.add_argument("--gae-lambda", type=float, default=0.95)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--floor", action="store_true", help="the vital needs' thresholds overrule")
    t.add_argument("--init", help="an arbiter zip to go on training from")
    t.add_argument("--first-world", type=int, default=0, help="first training world")
    t.add_argument("--save-every", type=int, default=50_000)
    t.add_argument("--out", required=True)
    t.set_defaults(func=train)
    p = sub.add_parser("play", help="both arbiters on the same worlds")
    p.add_argument("--policy", help="the learned arbiter's zip (not for --only coded)")
    p.add_argument("--part", default="choose", choices=["choose", "report"])
    p.add_argument("--worlds", type=int, default=200)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--only", choices=["coded", "learned"])
    p.add_argument("--floor", action="store_true", help="the vital needs' thresholds overrule")
    p.add_argument("--out", required=True)
    p.set_defaults(func=play)
    c = sub.add_parser("compare", help="figures from a play file")
    c.add_argument("files", nargs="+", help="play files (e.g. one per variant)")
    c.add_argument("--summary", help="write the figures as JSON here")
    c.add_argument("--markdown", help="write BENCHMARKS.md's section here")
    c.add_argument("--train-meta", help="the training's arbiter.json (PPO's cost)")
    c.set_defaults(func=compare)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
