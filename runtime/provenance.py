"""What code a process runs: the project's package version and a hash of its source tree.

An actor states both when it registers (``control.register``) and the head's broker
compares the hash with its own: a worker on another machine running another checkout
(an older commit, a local edit) is refused with a message naming both versions, unless
it was attached with ``--allow-version-mismatch``. The hash decides; the version is
what a person reads (an editable install's version is the one it had when installed,
so two different trees can share it).

The hash is sha256 over the files a wheel of the project ships: every ``.py`` file of
its top-level packages and their data files (prompts, shipped configs, the Minetest
mod), sorted by path
relative to the folder that holds the packages, each as its path, its length and its
bytes. So a source checkout and the same commit installed from a wheel hash alike, and
``__pycache__``, editor files or run folders beside the code change nothing. It is
computed once per process and cached (about 5 ms: see :func:`source_hash`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

DISTRIBUTION = "rlgpt-actors"
"""The project's name in ``pyproject.toml`` (``[project] name``)."""
PACKAGES = (
    "messages",
    "runtime",
    "sandbox",
    "worlds",
    "skills",
    "rl",
    "episodes",
    "knowledge",
    "llm",
    "method",
    "actors",
    "rlgpt",
)
"""The top-level packages a wheel holds (``[tool.setuptools.packages.find]``)."""
PACKAGE_DATA = {
    "llm/prompts": "*.txt",
    "llm/prompts/minetest": "*.txt",  # a world's own prompt files
    "rlgpt/configs": "*.toml",
    "worlds/minetest/mod/rlgpt_agent": "*",  # the Lua mod: the Minetest agent's body
}
"""The data files beside the code that change behaviour (``[tool.setuptools.package-data]``,
less ``py.typed``): folder → pattern."""
ROOT = Path(__file__).resolve().parent.parent
"""The folder holding the packages: a checkout's root, or site-packages."""
UNKNOWN_VERSION = "unknown"
"""The version of a checkout that was never installed (``pip install -e .``)."""


@dataclass(frozen=True)
class Provenance:
    version: str
    """The installed distribution's version, or ``unknown``."""
    source_hash: str
    """sha256 (hex) over the source tree, as :func:`tree_files` lists it."""

    def short(self) -> str:
        """How a person reads it: ``0.1.0 (source 1a2b3c4d5e6f)``."""
        return f"{self.version} (source {self.source_hash[:12] or 'not stated'})"


def tree_files(root: Path = ROOT) -> list[tuple[str, Path]]:
    """(relative posix path, path) of every file the hash covers, sorted by the former."""
    found = []
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            if "__pycache__" not in path.parts:
                found.append(path)
    for folder, pattern in PACKAGE_DATA.items():
        found.extend((root / folder).glob(pattern))
    return sorted((p.relative_to(root).as_posix(), p) for p in found)


def hash_tree(root: Path = ROOT) -> str:
    """sha256 over ``root``'s source tree (not cached: :func:`source_hash` is)."""
    digest = hashlib.sha256()
    for rel, path in tree_files(root):
        data = path.read_bytes()
        # Path and length first, so no two trees can feed the hash the same bytes.
        digest.update(f"{rel}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


@functools.cache
def source_hash() -> str:
    """This process's source hash, computed on first use: 5-6 ms for the 112 files
    (measured on the 2-core test machine with ``python -m runtime.provenance``)."""
    return hash_tree(ROOT)


@functools.cache
def package_version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN_VERSION


def current() -> Provenance:
    """This process's version and source hash (cached)."""
    return Provenance(package_version(), source_hash())


if __name__ == "__main__":
    import time

    started = time.perf_counter()
    digest = hash_tree(ROOT)
    took = time.perf_counter() - started
    print(f"{package_version()} {digest} ({len(tree_files())} files, {took * 1000:.1f} ms)")
