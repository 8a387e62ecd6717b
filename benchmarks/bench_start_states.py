#!/usr/bin/env python3
"""Benchmark: real training jobs with and without the start-state cache (issue 18,
"setup once, train many").

    python benchmarks/bench_start_states.py                     make_stone_pickaxe, 4,096
                                                                decisions, 2 envs, 2 versions,
                                                                2 pairs of runs
    python benchmarks/bench_start_states.py --sub collect_iron --repeats 3
    python benchmarks/bench_start_states.py --quick             1,024 decisions, 1 pair

The job is the diamond plan's learned sub-action as the offline fast agent writes it: the
sub-action's coded options, moving and 'do' as primitives, and as setup code the
library's coded stages of every step before it with the survival needs served, as in the
run (``rl.setup_code.compose_setup``; training episodes serve them too). The
learner's own ``train`` runs it (PPO, held-out evaluation, counting) in this process.
A run trains ``--versions`` versions of the sub-action one after another, as one learner
does in a run (the second adds a shaped reward; the setup is the same), starting from
cold caches; each pair of runs has one with the cache off (setup through the sandbox at
every reset, as before) and one with it on, in alternating order since the machine is
shared. Per job and per run: wall seconds; seconds in resets, and of those in setup code, in
world generation (or restoring a generated world) and in the start-state cache's copying;
the setup steps counted; the starts made and restored.

Not a test: it prints a table (and ``--json`` writes it) and exits 0.
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

from actors.fast import need_rules  # noqa: E402
from actors.learner import LearnerActor, set_torch_threads  # noqa: E402
from knowledge import library, options, recipes  # noqa: E402
from knowledge.survival import survival_needs  # noqa: E402
from messages.task import CodedAction, RLConfig  # noqa: E402
from messages.train import TrainRequest  # noqa: E402
from rl import rl_env, start_states  # noqa: E402
from rl.setup_code import compose_setup  # noqa: E402
from rlgpt.cli import number  # noqa: E402
from worlds import crafter_world  # noqa: E402

RL_PRIMITIVES = ["noop", "move_left", "move_right", "move_up", "move_down", "do"]
"""The offline fast agent's primitives for a learned sub-action (llm/offline.py)."""
OPTION_STEPS = 50
"""A coded action's step cap, as the fast agent sets it (actors/fast.py)."""


def learned_config(name: str, target: str = "diamond") -> RLConfig:
    """``name``'s RL config in ``target``'s plan, as the offline fast agent writes it:
    its coded ancestors as setup, the survival needs served in setup and in training."""
    steps = recipes.chain(target)
    names = [s.name for s in steps]
    if name not in names:
        raise SystemExit(f"--sub {name!r} is not a step of the {target} plan: one of {names}")
    i = names.index(name)
    stages = library.coded_stages(steps[: i + 1])
    coded = [
        CodedAction(n, src, max_steps=OPTION_STEPS, description=d)
        for n, d, src in options.options_for(steps[i])
    ]
    names_coded = {c.name for c in coded}
    needs = survival_needs()
    return RLConfig(
        subtask=stages[i].subtask,
        observation=["view", "inventory", "status"],
        primitives=[p for p in RL_PRIMITIVES if p not in names_coded],
        coded_actions=coded,
        setup_code=compose_setup(stages[:i], needs),
        needs=need_rules(needs),
    )


class Timed:
    """Wall seconds spent in some functions of this process, by name: resets, their
    setup code, world generation (or a generated world's restore), and the start-state
    cache's own copying (saving a start, restoring one)."""

    PATCHED = {
        "reset": (rl_env.SubtaskEnv, "reset"),
        "setup": (rl_env.SubtaskEnv, "_run_setup"),
        "world_reset": (crafter_world.CrafterWorld, "reset"),
        "save_start": (rl_env, "save_start"),
        "restore_start": (rl_env, "restore_start"),
    }

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(self.PATCHED, 0.0)
        self._originals = {name: getattr(*where) for name, where in self.PATCHED.items()}

    def __enter__(self) -> Timed:
        for name, (owner, attr) in self.PATCHED.items():
            setattr(owner, attr, self._timed(name, self._originals[name]))
        return self

    def _timed(self, name: str, func):
        seconds = self.seconds

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                seconds[name] += time.perf_counter() - started

        return timed

    def __exit__(self, *exc: object) -> None:
        for name, (owner, attr) in self.PATCHED.items():
            setattr(owner, attr, self._originals[name])


def one_run(reqs: list[TrainRequest], cached: bool) -> list[dict]:
    """Train ``reqs`` one after another in this process, as one learner would, with the
    start-state cache on or off; every run starts from cold caches (the generated worlds
    too, so that neither mode inherits the other's worlds)."""
    crafter_world._WORLDS.clear()
    # The learner asks for the process's shared cache: a fresh one, or one that keeps
    # nothing (every reset runs setup, as before the cache).
    start_states._shared = start_states.StartStates(start_states.DEFAULT_ENTRIES if cached else 0)
    rows = []
    for req in reqs:
        before = start_states._shared.stats()
        with tempfile.TemporaryDirectory() as tmp:
            learner = LearnerActor.__new__(LearnerActor)
            learner.workdir = learner.run_dir = Path(tmp)
            learner.run_id, learner.actor_id = "bench", "learner-bench"
            with Timed() as timed:
                started = time.perf_counter()
                result = learner.train(req, "cpu", threading.Event(), "nobody")
                wall = time.perf_counter() - started
        after = start_states._shared.stats()
        rows.append(
            {
                "cache": "on" if cached else "off",
                "job": req.name,
                "wall_s": round(wall, 2),
                "train_s": result.train_s,
                "reset_s": round(timed.seconds["reset"], 2),
                "setup_s": round(timed.seconds["setup"], 2),
                "world_reset_s": round(timed.seconds["world_reset"], 2),
                "cache_s": round(
                    sum(timed.seconds[k] for k in ("save_start", "restore_start")),
                    2,
                ),
                "reset_share": round(timed.seconds["reset"] / wall, 3),
                "setup_share": round(timed.seconds["setup"] / wall, 3),
                "setup_steps": result.setup_steps,
                "train_steps": result.primitive_steps,
                "held_out_steps": result.eval_primitive_steps,
                "episodes": result.episodes,
                "eval_success": result.eval_success_rate,
                "starts_made": after["made"] - before["made"],
                "starts_restored": after["restored"] - before["restored"],
                "failure": result.failure[:80],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


TOTALS = (
    "wall_s", "reset_s", "setup_s", "world_reset_s", "cache_s", "setup_steps", "starts_made",
    "starts_restored",
)  # fmt: skip

SHAPED_REWARD = """\
def reward(before, after):
    gained = 0
    for item, count in after["inventory"].items():
        gained += max(0, count - before["inventory"].get(item, 0))
    return 0.01 * gained
"""
"""A second version's reward (what the offline fast agent's revision adds: a little for
every item gained); its setup is the first version's, so it shares the starts."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sub", default="make_stone_pickaxe", help="the learned sub-action")
    parser.add_argument("--steps", type=number(int, 1), default=4096, help="PPO decisions per job")
    parser.add_argument("--envs", type=number(int, 1), default=2, help="vectorised envs")
    parser.add_argument("--repeats", type=number(int, 1), default=2, help="pairs (off, on) to run")
    parser.add_argument(
        "--versions", type=number(int, 1), default=2, help="jobs per run (versions)"
    )
    parser.add_argument("--quick", action="store_true", help="1,024 decisions, one pair")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = 1024, 1
    set_torch_threads()
    req = TrainRequest(
        name=f"bench-{args.sub}",
        config=learned_config(args.sub),
        total_steps=args.steps,
        n_envs=args.envs,
        progress_every_s=3600.0,  # no asker to tell
    )
    print(f"job: {args.sub}, {args.steps} decisions, {args.envs} envs, "
          f"{req.train_worlds} training worlds, {req.eval_episodes} held-out")  # fmt: skip
    version = dataclasses.replace(req.config, reward_code=SHAPED_REWARD)
    rows = []
    for pair in range(args.repeats):
        reqs = [
            dataclasses.replace(req, name=f"{req.name}-{pair}-v{v + 1}",
                                config=req.config if v == 0 else version)
            for v in range(args.versions)
        ]  # fmt: skip
        for cached in (False, True) if pair % 2 == 0 else (True, False):
            run_rows = one_run(reqs, cached)
            total = {k: round(sum(r[k] for r in run_rows), 2) for k in TOTALS}
            rows += run_rows + [{"cache": run_rows[0]["cache"], "job": "all", **total}]
    keys = TOTALS
    print("\n| cache | job | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 2) + "|")
    for row in rows:
        cells = " | ".join(str(row.get(k, "")) for k in keys)
        print(f"| {row['cache']} | {row['job']} | {cells} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
