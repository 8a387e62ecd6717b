"""Where and with what the figures were measured: machine, package versions, commit."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: its pyproject.toml and .git name the project's version."""


def machine() -> dict[str, Any]:
    """CPU model, cores and RAM (from /proc where there is one)."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "ram_gib": None,
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["ram_gib"] = round(int(line.split()[1]) / 2**20, 1)
                break
    except OSError:
        pass
    return info


def versions() -> dict[str, str]:
    """Python, the packages the figures depend on, the project and its commit."""
    out = {"python": platform.python_version()}
    for name in ("crafter", "torch", "stable-baselines3", "gymnasium", "numpy"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    try:
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        out[project["name"]] = project["version"]
    except (OSError, KeyError, ValueError):
        pass
    commit = _commit()
    if commit:
        out["commit"] = commit
    return out


def _commit(root: Path = ROOT) -> str:
    """The checked-out commit, read from .git (no git process); in a worktree or a
    submodule, ``.git`` is a file naming the git folder (``gitdir: PATH``), whose
    ``commondir`` holds the shared refs."""
    git = root / ".git"
    try:
        if git.is_file():
            line = git.read_text().strip()
            if not line.startswith("gitdir: "):
                return ""
            git = (root / line[len("gitdir: ") :]).resolve()
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text().strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:12]
        ref = head[5:]
        for folder in (git, common):
            if (folder / ref).is_file():
                return (folder / ref).read_text().strip()[:12]
        for line in (common / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0][:12]
    except OSError:
        pass
    return ""
