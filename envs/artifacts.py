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
    """A policy file is missing or is not the one its hash names."""


def sha256_of(path: Path) -> str:
    """The file's sha256, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def store_artifact(run_dir: Path, result: TrainResult) -> Path:
    """Where a result's policy lives in ``run_dir``: a local learner's path as it is, a
    remote learner's bytes written to ``policies/<job>.zip`` after checking the hash."""
    if not result.policy_bytes:
        return Path(result.policy_path)
    digest = hashlib.sha256(result.policy_bytes).hexdigest()
    if digest != result.sha256:
        raise ValueError(f"policy of {result.name} arrived corrupted: sha256 {digest}")
    path = run_dir / "policies" / f"{result.name}.zip"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_bytes(result.policy_bytes)
    os.replace(tmp, path)
    return path


def load_policy(path: str | Path, sha256: str = "") -> Any:
    """The SB3 PPO model in ``path``, on the CPU, after checking its hash (when given);
    raises :class:`PolicyUnusable` naming what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise PolicyUnusable(f"no policy at {path}")
    if sha256 and sha256_of(path) != sha256:
        raise PolicyUnusable(f"{path} does not match sha256 {sha256[:12]}…")
    from stable_baselines3 import PPO

    return PPO.load(path, device="cpu")
