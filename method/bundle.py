"""The policy bundle: the final policy of a run, as files that replay it without the run.

At the end of a run the driver writes ``runs/<id>/policy/``:

- ``manifest.json`` — what the policy is and how to play it: the episode's test and cap
  (``episode``), the stages in the order the task planner runs them, each ``coded`` or
  ``learned``, the survival needs (``needs``: the statistic, its thresholds and the stage
  that serves it), the observation spec of every learned stage (its parts and sizes, the
  action names its policy picks from), the final evaluation it got (per seed: success,
  steps, achievements), the sha256 of every file of the bundle (``files``) and the
  package versions it ran with (``versions``);
- ``stages/NN-NAME/`` per stage (``needs/NN-NAME/`` per need): ``code.py`` for a coded
  one; for a learned one ``policy.zip`` (a copy of the learner's PPO zip),
  ``rl_config.json`` (the RL config it was trained on, as the ``task.rl_config`` message's
  fields) with its code moved out to ``options/OPTION.py`` (the coded high-level
  actions), ``setup.py`` and ``reward.py`` (when it has them).

:func:`load_bundle` reads it back into the messages the task planner plays
(:mod:`episodes.composite`), after checking every file against its sha256: a file that was
changed, is missing, or that the manifest does not list is refused with
:class:`BundleError`, which names the file and what to do. The bundle holds code and
zips only, never a path outside itself: it can be copied anywhere and played there.

This module never imports torch (the head writes the bundle); :mod:`method.play` plays it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import re
import shutil
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from messages.base import SchemaError, build, to_wire
from messages.rollout import RolloutRequest, RolloutResult
from messages.task import CodedAction, Need, RLConfig, Stage, Subtask
from rl.artifacts import inside, sha256_of
from rl.rl_env import SubtaskEnv

BUNDLE_DIR = "policy"
MANIFEST = "manifest.json"
FORMAT = "rlgpt-policy/1"
"""The manifest's format tag; :func:`load_bundle` refuses any other."""
VERSIONED = (
    "rlgpt-actors",
    "crafter",
    "numpy",
    "gymnasium",
    "stable-baselines3",
    "torch",
    "RestrictedPython",
)
"""Packages whose versions the manifest records (read from the installed metadata, so
the head imports none of them): Crafter's dynamics, the sandbox and SB3's loading decide
whether an episode replays exactly."""


class BundleError(Exception):
    """A policy bundle that cannot be played: missing, tampered with, or malformed."""


@dataclass
class Bundle:
    """A loaded, hash-checked bundle: what :func:`episodes.composite.run_composed` plays."""

    folder: Path
    manifest: dict[str, Any]
    goal: Subtask
    """The episode's test and cap."""
    stages: list[Stage]
    """In order; learned ones point at the bundle's own ``policy.zip`` files."""
    needs: list[Need]
    wall_s: float
    """Wall-clock budget of one episode."""
    skip_failed: bool
    """A stage that gives up is dropped and the next one runs (the 22-achievement
    curriculum), instead of ending the episode."""
    world: str = "crafter"
    """The game the policy plays (``[task] world``; bundles from before it was recorded
    are Crafter's)."""

    @property
    def recorded(self) -> dict[int, dict[str, Any]]:
        """Seed → what the run's final evaluation recorded for it."""
        episodes = self.manifest.get("final_evaluation", {}).get("episodes", [])
        return {int(e["seed"]): e for e in episodes}


# ---------------------------------------------------------------------- writing


def write_bundle(
    run_dir: Path, request: RolloutRequest, result: RolloutResult, *, run_id: str, task: str
) -> Path:
    """Write ``run_dir/policy/`` for the final evaluation's ``request`` (its stages,
    needs and episode test) and ``result``; returns the folder. Written beside and then
    swapped in, so a folder named ``policy`` is always whole."""
    folder = Path(run_dir) / BUNDLE_DIR
    staging = folder.with_name(BUNDLE_DIR + ".part")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    files: dict[str, str] = {}

    def put(relative: str, data: bytes | str) -> str:
        path = staging / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            path.write_text(data)
        else:
            path.write_bytes(data)
        files[relative] = sha256_of(path)
        return relative

    stages = [
        _write_stage(put, f"stages/{i:02d}-{_safe(st.subtask.name)}", st, run_dir)
        for i, st in enumerate(request.stages, 1)
    ]
    needs = [
        {
            "stat": need.stat,
            "below": need.below,
            "until": need.until,
            "stage": _write_stage(
                put, f"needs/{i:02d}-{_safe(need.stage.subtask.name)}", need.stage, run_dir
            ),
        }
        for i, need in enumerate(request.needs, 1)
    ]
    manifest = {
        "format": FORMAT,
        "run": run_id,
        "task": task,
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "episode": {
            "subtask": to_wire(request.subtask),
            "wall_s": request.wall_s,
            "skip_failed": request.skip_failed,
            "world": request.world,
        },
        "stages": stages,
        "needs": needs,
        "final_evaluation": {
            "seeds": list(request.seeds),
            "success_rate": result.success_rate,
            "episodes": [
                {
                    "seed": e.seed,
                    "success": e.success,
                    "steps": e.steps,
                    "cause": e.cause,
                    "achievements": list(e.achievements),
                }
                for e in result.episodes
            ],
        },
        "versions": versions(),
        "files": dict(sorted(files.items())),
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(staging, folder)
    return folder


def _safe(name: str) -> str:
    """A sub-action name as part of a folder name (names come from a model's reply)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60].lstrip(".") or "stage"


def _write_stage(put: Any, base: str, stage: Stage, run_dir: Path) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": stage.subtask.name,
        "kind": "learned" if stage.policy_path else "coded",
        "subtask": to_wire(stage.subtask),
    }
    if not stage.policy_path:
        entry["code"] = put(f"{base}/code.py", stage.code)
        return entry
    if stage.config is None:
        raise ValueError(f"learned stage {stage.subtask.name!r} has no RL config")
    # As the environment actors read it (a relative path is relative to the working
    # directory, rl.artifacts.inside), and only from inside the run.
    source = inside(run_dir, stage.policy_path)
    data = source.read_bytes()
    if hashlib.sha256(data).hexdigest() != stage.policy_sha256:
        raise ValueError(f"{source} does not match the sha256 its learner reported")
    entry["policy"] = put(f"{base}/policy.zip", data)
    entry["policy_sha256"] = stage.policy_sha256
    config = to_wire(stage.config)
    options = {}
    for coded in config["coded_actions"]:
        rel = put(f"{base}/options/{_safe(coded['name'])}.py", coded.pop("code"))
        coded["code_file"] = options[coded["name"]] = rel
    for key, name in (("setup_code", "setup.py"), ("reward_code", "reward.py")):
        text = config.pop(key)
        if text.strip():
            config[key + "_file"] = put(f"{base}/{name}", text)
    entry["rl_config"] = put(f"{base}/rl_config.json", json.dumps(config, indent=2) + "\n")
    entry["options"] = options
    entry["observation"] = observation_spec(stage.config)
    return entry


def observation_spec(config: RLConfig) -> dict[str, Any]:
    """What a learned stage's policy sees and picks from, as its learner built it (a dict
    observation of float parts in [0, 1], one discrete action per name)."""
    env = SubtaskEnv(config)  # a Minetest env starts no server before its first reset
    layout = env.layout
    view: dict[str, Any] = {
        "rows_cols": list(layout.view_shape),
        "channels": [*layout.tile_names, *layout.creature_kinds, "other creature"],
    }
    if config.world == "minetest":
        from rl.voxel_obs import VIEW_KINDS
        from rl.voxel_options import CATEGORIES, SECTORS

        view = {"kinds": list(VIEW_KINDS), "sectors": SECTORS}
        view["map_kinds"] = [*CATEGORIES, "seen"]
    spec = {
        "parts": {name: int(space.shape[0]) for name, space in env.observation_space.items()},
        "policy_input": "dict of float32 vectors in [0, 1] (SB3 MultiInputPolicy)",
        "view": view,
        "inventory": list(layout.inventory_names),
        "status": list(layout.status_names),
        "actions": list(env.action_names),
    }
    env.close()
    return spec


def versions() -> dict[str, str]:
    """Python and the packages of :data:`VERSIONED`, as installed ('' when absent)."""
    found = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = ""
    return found


# ---------------------------------------------------------------------- reading


def load_bundle(where: str | Path) -> Bundle:
    """The bundle in ``where`` (a run folder or its ``policy/`` folder), every file
    checked against the manifest's sha256; raises :class:`BundleError` otherwise."""
    where = Path(where)
    folder = where if (where / MANIFEST).is_file() else where / BUNDLE_DIR
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise BundleError(
            f"no policy bundle in {where}: {manifest_path} is missing. Runs write it when"
            " they finish; run the method to the end (or --resume the run) first"
        )
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        raise BundleError(f"{manifest_path} is not readable JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise BundleError(
            f"{manifest_path}: format {got!r}, this version plays {FORMAT!r}; play it with"
            " the version of rlgpt-actors in its 'versions'"
        )
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise BundleError(f"{manifest_path}: no 'files' table of sha256 hashes")
    verify_files(folder, files)
    try:
        episode = manifest["episode"]
        goal = build(Subtask, episode["subtask"])
        stages = [_read_stage(folder, files, e) for e in manifest["stages"]]
        needs = [
            Need(
                stat=n["stat"],
                below=float(n["below"]),
                stage=_read_stage(folder, files, n["stage"]),
                until=float(n["until"]),
            )
            for n in manifest["needs"]
        ]
        wall_s, skip_failed = float(episode["wall_s"]), bool(episode["skip_failed"])
        world = str(episode.get("world", "crafter"))
    except (KeyError, TypeError, ValueError, SchemaError) as exc:
        detail = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
        raise BundleError(f"{manifest_path} is malformed: {detail}") from None
    if not stages:
        raise BundleError(f"{manifest_path} names no stage: there is no policy to play")
    return Bundle(folder, manifest, goal, stages, needs, wall_s, skip_failed, world)


def verify_files(folder: Path, files: dict[str, Any]) -> None:
    """Every file of ``files`` (path relative to ``folder`` → sha256) is there, inside
    ``folder`` and unchanged, and no other file sits beside them."""
    root = folder.resolve()
    for relative, digest in files.items():
        path = (folder / relative).resolve()
        if not path.is_relative_to(root) or path == root:
            raise BundleError(f"{folder / MANIFEST} names {relative!r}, outside the bundle")
        if not path.is_file():
            raise BundleError(
                f"{folder / relative} is missing: the bundle is incomplete; copy the whole"
                f" {folder.name}/ folder"
            )
        actual = sha256_of(path)
        if actual != digest:
            raise BundleError(
                f"{folder / relative} was changed after the run wrote it (sha256"
                f" {actual[:12]}…, the manifest says {str(digest)[:12]}…): the bundle is"
                " refused. Restore the file from the run, or play another bundle"
            )
    listed = {(folder / r).resolve() for r in files} | {(folder / MANIFEST).resolve()}
    extra = sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and p.resolve() not in listed
    )
    if extra:
        raise BundleError(
            f"{folder} holds files its manifest does not list: {', '.join(extra[:5])}."
            " Remove them (a bundle holds only what its manifest hashes)"
        )


def _file(folder: Path, files: dict[str, Any], relative: Any) -> Path:
    if not isinstance(relative, str) or relative not in files:
        raise BundleError(
            f"{folder / MANIFEST} refers to {relative!r}, which its 'files' table does not"
            " hash: the manifest was edited"
        )
    return folder / relative


def _read_stage(folder: Path, files: dict[str, Any], entry: dict[str, Any]) -> Stage:
    subtask = build(Subtask, entry["subtask"])
    if entry["kind"] == "coded":
        return Stage(subtask, code=_file(folder, files, entry["code"]).read_text())
    if entry["kind"] != "learned":
        raise ValueError(f"stage {entry.get('name')!r}: kind {entry['kind']!r}")
    config = json.loads(_file(folder, files, entry["rl_config"]).read_text())
    coded = []
    for action in config.pop("coded_actions"):
        action["code"] = _file(folder, files, action.pop("code_file")).read_text()
        coded.append(build(CodedAction, action))
    for key in ("setup_code", "reward_code"):
        rel = config.pop(key + "_file", None)
        config[key] = _file(folder, files, rel).read_text() if rel is not None else ""
    config["coded_actions"] = []
    rl_config = dataclasses.replace(build(RLConfig, config), coded_actions=coded)
    policy = _file(folder, files, entry["policy"])
    if files[entry["policy"]] != entry.get("policy_sha256", files[entry["policy"]]):
        raise BundleError(
            f"{policy}: the manifest's hash of it differs from the one the learner reported"
            " (policy_sha256): the manifest was edited"
        )
    return Stage(
        subtask,
        policy_path=str(policy.resolve()),
        policy_sha256=files[entry["policy"]],
        config=rl_config,
    )
