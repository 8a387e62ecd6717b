"""Policy files by content: hashing, storing what a learner sent, loading one to play.

Shared by the head (it stores the learners' results) and the workers (they load a
learned stage); ``stable_baselines3`` is imported only by :func:`load_policy`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from messages.train import TrainResult


class PolicyUnusable(Exception):
    """A policy file is missing, outside the run's store, or not the one its hash names."""


class ArtifactRefused(ValueError):
    """A training result names a file outside the run directory (or no file at all)."""


NAME_MAX = 100
"""Longest artifact name: a job name plus a version fits with room to spare, and
``policies/<name>.zip`` stays far below the 255-byte file-name limit."""


def inside(root: Path, path: str | Path) -> Path:
    """``path`` resolved (links followed), when it lies inside ``root``; raises
    :class:`PolicyUnusable` otherwise. Paths in messages come from peers: none becomes
    a file to read or write without this check."""
    resolved = Path(path).resolve()  # a relative path is relative to the cwd, as before
    if not resolved.is_relative_to(Path(root).resolve()):
        raise PolicyUnusable(
            f"{str(path)[:200]!r} is outside the run directory {root}: policies are"
            " stored and loaded only inside it"
        )
    return resolved


def artifact_name(name: str) -> str:
    """``name`` when it can be one file name in ``policies/``; raises
    :class:`ArtifactRefused` naming the field and the fix otherwise."""
    if (
        not name
        or len(name) > NAME_MAX
        or name in (".", "..")
        or any(c in name for c in "/\\\0")
        or name.startswith(".")
    ):
        raise ArtifactRefused(
            f"TrainResult.name {name[:120]!r} is not a plain file name (no '/', '\\',"
            f" NUL or leading '.', at most {NAME_MAX} characters): the learner that sent"
            " it is misbehaving; train requests name their jobs with plain names"
        )
    return name


def sha256_of(path: Path) -> str:
    """The file's sha256, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def store_artifact(run_dir: Path, result: TrainResult) -> Path:
    """Where a result's policy lives in ``run_dir``: a local learner's path as it is
    (it must lie inside ``run_dir``), a remote learner's bytes written to
    ``policies/<job>.zip`` after checking the hash. Raises :class:`ArtifactRefused`
    for a name or path that would leave ``run_dir``."""
    name = artifact_name(result.name)
    if not result.policy_bytes:
        try:
            return inside(run_dir, result.policy_path)
        except PolicyUnusable as exc:
            raise ArtifactRefused(f"TrainResult.policy_path of {name}: {exc}") from None
    digest = hashlib.sha256(result.policy_bytes).hexdigest()
    if digest != result.sha256:
        raise ValueError(f"policy of {name} arrived corrupted: sha256 {digest}")
    path = run_dir / "policies" / f"{name}.zip"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_bytes(result.policy_bytes)
    os.replace(tmp, path)
    return path


def load_policy(path: str | Path, sha256: str = "", root: Path | None = None) -> Any:
    """The SB3 PPO model in ``path``, on the CPU, after checking its hash (when given)
    and, with ``root``, that it lies inside ``root``; raises :class:`PolicyUnusable`
    naming what is wrong. SB3 zips still unpickle parts of themselves when loaded: the
    checks are what keeps a file a peer named from being loaded."""
    path = inside(root, path) if root is not None else Path(path)
    if not path.is_file():
        raise PolicyUnusable(f"no policy at {path}")
    if sha256 and sha256_of(path) != sha256:
        raise PolicyUnusable(f"{path} does not match sha256 {sha256[:12]}…")
    from stable_baselines3 import PPO

    return PPO.load(path, device="cpu")
