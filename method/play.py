"""``python run.py play RUN_DIR``: play a run's final policy from its bundle, on any seed.

Only the bundle is read (``RUN_DIR/policy/``, :mod:`method.bundle`), every file checked
against its sha256 first. Each episode is the one the run's environment actors would
play on that seed: the same task planner (:func:`episodes.composite.run_composed`), the same
stages, needs, episode test, cap and wall budget, the same skills object; so on a seed
of the final evaluation it reproduces what the evaluation recorded, and says so.

This runs in its own process, not the head: a learned stage loads torch and SB3.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from episodes.composite import prepare_stages, run_composed
from episodes.trace import TracingSkills
from method.bundle import Bundle, BundleError, load_bundle, versions
from method.video import Clip, write_labelled_gif
from worlds.crafter_world import CrafterWorld


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="run.py play",
        description="Play a run's final policy from its bundle (RUN_DIR/policy/) on chosen "
        "seeds: prints each episode's achievements, optionally writes a labelled video.",
    )
    p.add_argument("run_dir", help="a finished run's folder (or its policy/ folder)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="world seed of the first episode (default: the final evaluation's first)",
    )
    p.add_argument("--episodes", type=int, default=1, help="episodes, on seeds SEED, SEED+1, ...")
    p.add_argument("--video", default="", metavar="OUT.gif", help="write the episodes as a GIF")
    p.add_argument(
        "--records",
        default="",
        metavar="OUT.jsonl",
        help="also write each episode as one JSON object (seed, success, steps, cause, "
        "achievements, and whether it is the final evaluation's record) to this file",
    )
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.episodes < 1:
        print("play error: --episodes must be at least 1", file=sys.stderr)
        return 2
    if args.video and Path(args.video).suffix.lower() != ".gif":
        print(f"play error: --video {args.video}: the video is a GIF (OUT.gif)", file=sys.stderr)
        return 2
    for flag, name in (("--records", args.records), ("--video", args.video)):
        folder = Path(name).resolve().parent if name else None
        if folder is not None and not _writable(folder):
            # Checked before the episodes are played, not after.
            print(f"play error: {flag} {name}: cannot write in {folder}", file=sys.stderr)
            return 2
    try:
        bundle = load_bundle(args.run_dir)
    except BundleError as exc:
        print(f"play error: {exc}", file=sys.stderr)
        return 2
    first = args.seed
    if first is None:
        seeds = bundle.manifest.get("final_evaluation", {}).get("seeds") or [0]
        first = int(seeds[0])
    for line in _version_warnings(bundle):
        print(f"play warning: {line}", file=sys.stderr)
    kinds = ", ".join(
        f"{s.subtask.name} ({'learned' if s.policy_path else 'coded'})" for s in bundle.stages
    )
    print(f"policy of run {bundle.manifest.get('run', '?')}: {kinds}", flush=True)
    records, clips = [], []
    for episode, clip in play(bundle, range(first, first + args.episodes), video=bool(args.video)):
        records.append(describe(bundle, episode))
        print(_line(records[-1]), flush=True)
        if clip is not None:
            clips.append(clip)
    if args.records:
        out = Path(args.records)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in records))
    if args.video:
        print(f"video: {write_labelled_gif(clips, args.video)}")
    return 0


def _writable(folder: Path) -> bool:
    """The folder exists and this user may write in it, or it can be made."""
    while not folder.exists():
        folder = folder.parent
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


def play_world(bundle: Bundle) -> tuple[Any, Any]:
    """The world ``bundle`` plays and the skills factory of its episodes: Crafter's, or a
    Minetest server of this process's own (as an environment actor's runner starts)."""
    if bundle.world == "minetest":
        from worlds.minetest.skills import VoxelSkills
        from worlds.minetest.world import PLAYER_RADIUS, UNCAPPED, MinetestWorld

        # As the run's runners play it: the bundle's episode cap ends an episode.
        world = MinetestWorld(radius=PLAYER_RADIUS, length=UNCAPPED)
        return world, lambda obs, actions, s: VoxelSkills(obs, world.node_rules, world.game_rules)
    return CrafterWorld(), lambda obs, actions, s: TracingSkills(obs, actions, seed=s)


def play(bundle: Bundle, seeds: Any, *, video: bool = False) -> Iterator[tuple[Any, Any]]:
    """Play one episode per seed, yielding (ComposedEpisode, Clip or None) as each ends."""
    world, skills_factory = play_world(bundle)
    try:
        yield from _play(bundle, seeds, world, skills_factory, video)
    finally:
        if bundle.world == "minetest":
            world.close()


def _play(
    bundle: Bundle, seeds: Any, world: Any, skills_factory: Any, video: bool
) -> Iterator[tuple[Any, Any]]:
    stages = prepare_stages(bundle.stages, world)
    need_stages = prepare_stages([n.stage for n in bundle.needs], world)
    for seed in seeds:
        frames: list | None = [] if video else None
        unlocked = _Unlocked()
        episode = run_composed(
            world,
            stages,
            bundle.needs,
            bundle.goal,
            int(seed),
            wall_s=bundle.wall_s,
            skills_factory=skills_factory,
            on_step=unlocked,
            frames=frames,
            need_stages=need_stages,
            skip_failed=bundle.skip_failed,
        )
        clip = None
        if frames:
            clip = Clip(
                np.stack(frames),
                seed=episode.seed,
                steps=episode.steps,
                success=episode.success,
                cause=episode.cause,
                detail=episode.detail,
                achievements=list(episode.achievements),
                unlocked_at=unlocked.at,
            )
        yield episode, clip


class _Unlocked:
    """An ``on_step`` hook: the step at which each achievement of the episode happened."""

    def __init__(self) -> None:
        self.steps = 0
        self.at: list[int] = []

    def __call__(self, obs: Any, reward: float, done: bool, info: Any) -> None:
        self.steps += 1
        self.at.extend([self.steps] * len(info.get("achievements", ())))


def describe(bundle: Bundle, episode: Any) -> dict[str, Any]:
    """One episode as a record, compared with the final evaluation's for its seed."""
    record: dict[str, Any] = {
        "seed": episode.seed,
        "success": episode.success,
        "steps": episode.steps,
        "cause": episode.cause,
        "detail": episode.detail,
        "achievements": list(episode.achievements),
    }
    recorded = bundle.recorded.get(episode.seed)
    if recorded is None:
        record["recorded"] = None
    else:
        same = all(recorded[k] == record[k] for k in ("success", "steps", "achievements"))
        record["recorded"] = "same" if same else "differs"
        if not same:
            record["recorded_episode"] = recorded
    return record


def _line(record: dict[str, Any]) -> str:
    counts = Counter(record["achievements"])
    names = ", ".join(f"{a}×{n}" if n > 1 else a for a, n in counts.items()) or "none"
    outcome = "success" if record["success"] else f"failed ({record['cause']}: {record['detail']})"
    text = f"seed {record['seed']}: {outcome} in {record['steps']} steps; achievements: {names}"
    if record["recorded"] == "same":
        text += "\n  = the final evaluation's record for this seed"
    elif record["recorded"] == "differs":
        r = record["recorded_episode"]
        text += (
            f"\n  ≠ the final evaluation recorded {'success' if r['success'] else 'failure'} in"
            f" {r['steps']} steps with {', '.join(dict.fromkeys(r['achievements'])) or 'none'}"
        )
    return text


def _version_warnings(bundle: Bundle) -> list[str]:
    """Packages whose installed version differs from the run's (episodes may differ)."""
    wanted = bundle.manifest.get("versions", {})
    have = versions()
    return [
        f"{name} {have.get(name) or 'absent'} here, the run had {version}: episodes may differ"
        for name, version in wanted.items()
        if name != "python" and version and have.get(name) != version
    ]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
