"""Why the diamond policy dies: the final policy's play, each death with its cause.

Plays ``chain('diamond')`` exactly as the final policy does — the skill library's coded
templates through the production composer (:func:`episodes.composite.run_composed`), all
five survival needs — on real Crafter, in-process, and for every death records:

- the stage running (the composer's last stage run) and the skill call running (the
  outermost skill call of the stage's code, as the critic's trace names it, and the
  innermost one);
- health, food, drink, energy and daylight a few steps before, and whether asleep;
- what did the damage, read from Crafter's own objects: a zombie's hit (awake or
  asleep), a skeleton's arrow, lava, or a vital at 0 (starvation, thirst, fatigue) —
  the killing blow and every hit of the last 100 steps.

Run (two processes; ``--root`` plays another tree's code, e.g. an older commit
unpacked with ``git archive``)::

    .venv/bin/python benchmarks/bench_deaths.py --seed-base 9000000 --seeds 300
    .venv/bin/python benchmarks/bench_deaths.py --seed-base 2000000 --seeds 200 \\
        --out after.json
    .venv/bin/python benchmarks/bench_deaths.py --compare before.json after.json

Seeds 9,000,000 + k are development worlds (no run range uses them, method/seeds.py);
the final range (2,000,000 + k) is for reporting only.
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
EPISODE_STEPS = 10_000
RECENT = 100
"""Steps before death whose hits are listed."""
PROGRESS = 50
"""Worlds between two progress lines (standard error)."""
PLAYED = ("episodes/composite.py", "knowledge/skill_prelude.py", "knowledge/library.py")
"""Files a --root tree must hold: the code the workers import from it."""
BEFORE = 3
"""The vitals shown are those this many steps before death."""

# Skill calls that name what the stage was doing (the critic's trace names the same).
WATCHED = (
    "path_to", "approach", "walk_to", "face", "explore", "attack", "defend", "evade",
    "collect", "place", "make", "shelter", "rest",
)  # fmt: skip


def _patch_crafter(log: list) -> None:
    """Record every change of the player's health with its source: (step, source, hp)."""
    import crafter.objects as o

    state = {"step": 0}

    def noted(source: str, player: Any, before: float) -> None:
        if player.health < before:
            log.append((state["step"], source, before - player.health))

    zombie_update = o.Zombie.update

    def zombie(self: Any) -> None:
        before, asleep = self.player.health, self.player.sleeping
        zombie_update(self)
        noted("zombie_sleeping" if asleep else "zombie", self.player, before)

    arrow_update = o.Arrow.update

    def arrow(self: Any) -> None:
        target = self.pos + self.facing
        obj = self.world[target][1]
        if isinstance(obj, o.Player):
            before = obj.health
            arrow_update(self)
            noted("arrow", obj, before)
        else:
            arrow_update(self)

    degen = o.Player._degen_or_regen_health

    def vitals(self: Any) -> None:
        before = self.health
        inv = self.inventory
        lack = [k for k in ("food", "drink") if inv[k] <= 0]
        if inv["energy"] <= 0 and not self.sleeping:
            lack.append("energy")
        degen(self)
        noted("lack_" + "+".join(lack) if lack else "vitals", self, before)

    move = o.Player._move

    def walk(self: Any, direction: str) -> None:
        before = self.health
        move(self, direction)
        noted("lava", self, before)

    player_update = o.Player.update

    def update(self: Any) -> None:
        state["step"] += 1
        player_update(self)

    o.Zombie.update, o.Arrow.update = zombie, arrow
    o.Player._degen_or_regen_health, o.Player._move, o.Player.update = vitals, walk, update
    log.append(state)  # the first item: the step counter, reset per episode


def _watching_skills() -> type:
    from skills.skills import Skills

    class Watching(Skills):
        """Skills that keep the stack of skill calls running now."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._calls: list[str] = []

    def wrap(name: str) -> Any:
        base = getattr(Skills, name)

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
            gen = base(self, *args, **kwargs)
            if not hasattr(gen, "send"):
                return gen
            return _stacked(self, f"{name}({shown})", gen)

        method.__name__ = name
        method.__doc__ = base.__doc__
        return method

    for name in WATCHED:
        setattr(Watching, name, wrap(name))
    return Watching


def _stacked(skills: Any, label: str, gen: Any) -> Any:
    # An entry of its own, stamped with the step of each action it passes on: a stage
    # the composer stopped leaves its generators open until they are collected, so the
    # calls running now are those that passed on this step's action.
    entry = [label, -1]
    skills._calls.append(entry)
    try:
        try:
            action = next(gen)
        except StopIteration as stop:
            return stop.value
        while True:
            entry[1] = skills._steps
            sent = yield action
            try:
                action = gen.send(sent)
            except StopIteration as stop:
                return stop.value
    finally:
        gen.close()
        skills._calls[:] = [e for e in skills._calls if e is not entry]


def _running(skills: Any) -> list[str]:
    """The skill calls that passed on the action being taken now, outermost first."""
    return [e[0] for e in skills._calls if e[1] == skills._steps]


def episode(seed: int) -> dict[str, Any]:
    from episodes.composite import run_composed
    from knowledge import library, recipes
    from knowledge.survival import survival_needs
    from messages.task import Subtask
    from worlds.crafter_world import CrafterWorld

    global _LOG, _WATCHING
    if "_LOG" not in globals():
        _LOG = []
        _patch_crafter(_LOG)
        _WATCHING = _watching_skills()
    log = _LOG
    counter = log[0]
    del log[1:]
    counter["step"] = 0
    holder: dict[str, Any] = {}
    history: collections.deque = collections.deque(maxlen=BEFORE + 1)

    def factory(obs: Any, actions: Any, s: int) -> Any:
        holder["skills"] = _WATCHING(obs, actions, seed=s)
        return holder["skills"]

    def on_step(obs: Any, reward: float, done: bool, info: Any) -> None:
        skills = holder["skills"]
        near = [c for c in obs.creatures if abs(c[1]) + abs(c[2]) <= 4]
        calls = _running(skills)
        history.append((dict(obs.status), round(obs.daylight, 2), obs.sleeping, calls, near))

    world = CrafterWorld()
    stages = library.coded_stages(recipes.chain("diamond"))
    goal = Subtask("diamond", "collect a diamond", goal={"diamond": 1}, max_steps=EPISODE_STEPS)
    ep = run_composed(
        world, stages, survival_needs(), goal, seed, wall_s=1800,
        skills_factory=factory, on_step=on_step,
    )  # fmt: skip
    out: dict[str, Any] = {
        "seed": seed,
        "success": ep.success,
        "steps": ep.steps,
        "cause": ep.cause,
        "counts": {k: v for k, v in ep.counts.items() if v},
    }
    if ep.cause == "episode_done" and world._env._player.health <= 0:
        hits = [(s, src, hp) for s, src, hp in log[1:] if s > ep.steps - RECENT]
        status, light, asleep, calls, near = history[0]
        out["death"] = {
            "stage": ep.stages[-1].name if ep.stages else "",
            "skill": calls[0] if calls else "",
            "inner": calls[-1] if calls else "",
            "status": status,
            "daylight": light,
            "asleep": asleep,
            "near": near,
            "blow": hits[-1][1] if hits else "?",
            "hits": collections.Counter(src for _, src, _ in hits),
            "hp_by": {src: sum(hp for _, s2, hp in hits if s2 == src) for _, src, _ in hits},
        }
    return out


def kind(death: dict[str, Any]) -> str:
    """One cause per death: the killing blow's source (zombies on a sleeper apart)."""
    return death["blow"]


def summary(results: list[dict[str, Any]], label: str) -> None:
    n = len(results)
    wins = sum(r["success"] for r in results)
    deaths = [r["death"] for r in results if "death" in r]
    print(f"\n## {label}: diamond {wins}/{n} = {wins / n:.1%}; deaths {len(deaths)}")
    for ach in ("collect_iron", "make_iron_pickaxe", "collect_diamond"):
        got = sum(1 for r in results if r["counts"].get(ach))
        print(f"  {ach:18} {got}/{n} = {got / n:.1%}")
    ends = collections.Counter(r["cause"] for r in results if not r["success"])
    print(f"  failures by cause: {dict(ends)}")
    print("  deaths by killing blow:", dict(collections.Counter(map(kind, deaths)).most_common()))
    print("  deaths by stage:", dict(collections.Counter(d["stage"] for d in deaths).most_common()))
    skills = collections.Counter(d["skill"] for d in deaths)
    print("  deaths by skill call:", dict(skills.most_common(8)))
    pairs = collections.Counter((d["stage"], kind(d)) for d in deaths)
    print("  (stage, blow):", dict(pairs.most_common(12)))
    night = sum(1 for d in deaths if d["daylight"] < 0.45)
    print(f"  at night (light < 0.45): {night}; asleep: {sum(d['asleep'] for d in deaths)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed-base", type=int, default=9_000_000)
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--first", type=int, default=0, help="first seed offset")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--root", default=str(HERE), help="the tree whose code plays")
    parser.add_argument("--out", help="write every episode as JSON here")
    parser.add_argument("--verbose", action="store_true", help="one line per death")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.compare:
        compare(*args.compare)
        return
    # Checked here, not by importing the project's argument types: this process forks
    # the workers, which must import --root's code, not modules this one imported.
    if args.seeds < 1 or args.first < 0 or args.jobs < 1:
        parser.error("--seeds and --jobs must be at least 1, --first at least 0")
    missing = [f for f in PLAYED if not (Path(args.root) / f).is_file()]
    if missing:  # the workers would import this tree's code instead, under --root's name
        parser.error(f"--root {args.root}: not a tree of this project (no {missing[0]})")
    if args.out and not Path(args.out).resolve().parent.is_dir():
        parser.error(f"--out {args.out}: its folder does not exist (checked before playing)")
    seeds = [args.seed_base + k for k in range(args.first, args.first + args.seeds)]
    pool = concurrent.futures.ProcessPoolExecutor(
        args.jobs, initializer=_init, initargs=[args.root]
    )
    started = time.perf_counter()
    results = []
    with pool:  # in seed order; progress every PROGRESS worlds (1,000 take ~10 minutes)
        for result in pool.map(episode, seeds, chunksize=1):
            results.append(result)
            if len(results) % PROGRESS == 0 or len(results) == len(seeds):
                done = sum(bool(r["success"]) for r in results)
                print(
                    f"  {len(results)}/{len(seeds)} worlds, {done} diamonds, "
                    f"{time.perf_counter() - started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    if args.verbose:
        for r in results:
            if "death" in r:
                d = r["death"]
                print(r["seed"], r["steps"], d["stage"], d["skill"], "|", d["inner"], d["status"],
                      d["daylight"], d["asleep"], dict(d["hp_by"]), d["near"])  # fmt: skip
    summary(results, f"seeds {seeds[0]}…{seeds[-1]} ({args.root})")
    if args.out:
        Path(args.out).write_text(json.dumps(results))


def _init(root: str) -> None:
    sys.path.insert(0, root)


def compare(before_path: str, after_path: str) -> None:
    """Paired, world for world: success both, the difference with a 95 % interval
    (exact McNemar-style interval: Clopper–Pearson on the discordant worlds, and a
    paired bootstrap), and deaths by cause before and after."""
    import random

    sys.path.insert(0, str(HERE))
    before = {r["seed"]: r for r in json.loads(Path(before_path).read_text())}
    after = {r["seed"]: r for r in json.loads(Path(after_path).read_text())}
    seeds = sorted(set(before) & set(after))
    n = len(seeds)
    if not n:
        raise SystemExit(f"bench_deaths: {before_path} and {after_path} share no world")
    for label, runs in (("before", before), ("after", after)):
        summary([runs[s] for s in seeds], label)
    a = [int(before[s]["success"]) for s in seeds]
    b = [int(after[s]["success"]) for s in seeds]
    wins = sum(1 for x, y in zip(a, b, strict=True) if y > x)
    losses = sum(1 for x, y in zip(a, b, strict=True) if x > y)
    diff = (wins - losses) / n
    lo, hi = _clopper_pearson(wins, wins + losses)
    d = wins + losses
    print(f"\n## paired on {n} worlds: before {sum(a)}/{n}, after {sum(b)}/{n}")
    print(f"  after only {wins}, before only {losses}: difference {diff:+.1%}")
    if d:
        print(
            f"  95 % interval (exact, conditional on {d} discordant worlds): "
            f"[{d / n * (2 * lo - 1):+.1%}, {d / n * (2 * hi - 1):+.1%}]"
        )
    rng = random.Random(0)
    boots = []
    for _ in range(10_000):
        idx = [rng.randrange(n) for _ in range(n)]
        boots.append(sum(b[i] - a[i] for i in idx) / n)
    boots.sort()
    print(f"  95 % paired bootstrap: [{boots[250]:+.1%}, {boots[9749]:+.1%}]")
    for ach in ("collect_iron", "make_iron_pickaxe"):
        x = sum(1 for s in seeds if before[s]["counts"].get(ach))
        y = sum(1 for s in seeds if after[s]["counts"].get(ach))
        print(f"  {ach}: before {x}/{n}, after {y}/{n}")


def _clopper_pearson(k: int, n: int) -> tuple[float, float]:
    """Exact 95 % interval of a binomial share (by bisection on the binomial tail)."""
    import math

    if n == 0:
        return 0.0, 1.0

    def tail_ge(p: float) -> float:  # P(X >= k)
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))

    def tail_le(p: float) -> float:  # P(X <= k)
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(0, k + 1))

    def solve(f: Any, target: float, increasing: bool) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if (f(mid) < target) == increasing:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    lower = 0.0 if k == 0 else solve(tail_ge, 0.025, True)
    upper = 1.0 if k == n else solve(tail_le, 0.025, False)
    return lower, upper


if __name__ == "__main__":
    main()
