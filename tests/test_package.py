"""The package as a user gets it: a wheel that holds what the installed ``rlgpt`` command
needs (configs, prompts, the licence, type markers, the console script), and — slow —
that wheel installed into a fresh virtual environment, run from outside the source tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import ROOT

PACKAGES = (
    "messages", "runtime", "sandbox", "worlds", "skills", "rl", "episodes", "knowledge", "llm",
    "method", "actors",
)  # fmt: skip


# What a copy of the source for building leaves out: environments, run output, caches.
NOT_SOURCE = (".git", ".venv*", "runs", "build", "dist", "*.egg-info", "__pycache__", ".*_cache")


def _wheel(out: Path) -> Path:
    """The wheel ``pip wheel`` builds, from a copy of the source (setuptools writes
    ``build/`` and ``*.egg-info`` where it builds; the checkout stays as it is)."""
    source = out.parent / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCE, ".hypothesis"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(source)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (wheel,) = out.glob("rlgpt_actors-*.whl")
    return wheel


def test_the_wheel_holds_configs_prompts_licence_and_the_console_script(tmp_path: Path) -> None:
    names = set(zipfile.ZipFile(_wheel(tmp_path / "dist")).namelist())
    shipped = {p.name for p in (ROOT / "rlgpt" / "configs").glob("*.toml")}
    assert shipped >= {"diamond.toml", "crafter.toml"}
    assert {f"rlgpt/configs/{name}" for name in shipped} <= names
    folder = ROOT / "llm" / "prompts"
    prompts = {f"llm/prompts/{p.relative_to(folder)}" for p in folder.rglob("*.txt")}
    assert "llm/prompts/minetest/skills_api.txt" in prompts  # a world's own prompt files
    assert prompts <= names
    assert {"rlgpt/cli.py", "rlgpt/__main__.py", "rlgpt/view.py"} <= names
    mod = ROOT / "worlds" / "minetest" / "mod" / "rlgpt_agent"
    lua = {f"worlds/minetest/mod/rlgpt_agent/{p.name}" for p in mod.iterdir() if p.is_file()}
    assert {"worlds/minetest/mod/rlgpt_agent/init.lua"} <= lua <= names  # the Minetest mod
    assert {f"{package}/py.typed" for package in (*PACKAGES, "rlgpt")} <= names
    (licence,) = [n for n in names if n.endswith("/licenses/LICENSE")]
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    wheel = zipfile.ZipFile(next((tmp_path / "dist").glob("*.whl")))
    assert "rlgpt = rlgpt.cli:main" in wheel.read(entry_points).decode()
    assert "MIT License" in wheel.read(licence).decode()
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "configs/"))]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_wheel_installed_in_a_fresh_venv_runs_from_outside_the_source_tree(
    tmp_path: Path,
) -> None:
    wheel = _wheel(tmp_path / "dist")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    # The CPU torch build first (from pip's cache): an unpinned one pulls CUDA wheels.
    subprocess.run([*pip, "torch==2.13.0"], check=True, timeout=900)
    subprocess.run([*pip, str(wheel)], check=True, timeout=900)
    rlgpt = str(venv / "bin" / "rlgpt")
    work = tmp_path / "elsewhere"
    work.mkdir()
    shown = subprocess.run([rlgpt, "--help"], cwd=work, capture_output=True, text=True)
    assert shown.returncode == 0 and "attach" in shown.stdout
    (work / "tiny.toml").write_text(
        '[run]\nname = "wheel"\n[task]\ntarget = "wood"\niterations = 1\ncode_episodes = 2\n'
        "eval_episodes = 2\nepisode_steps = 300\n[actors.environment]\ncount = 1\n"
    )
    done = subprocess.run(
        [rlgpt, "--config", "tiny.toml", "--quiet"],
        cwd=work, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (work / "runs").iterdir()
    assert (run_dir / "report.md").exists()
    assert f"report   runs/{run_dir.name}/report.md" in done.stdout
    # The head and its actors ran the installed code, not a checkout's.
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import rlgpt, runtime; print(rlgpt.__file__)"],
        cwd=work, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert str(venv) in site
