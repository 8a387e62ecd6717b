"""The folder tree is layered: a package imports only packages on lower floors, and the
head process (the driver, the agents, the model layer) never loads torch or
stable-baselines3."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FLOORS = {
    "messages": 0,  # the vocabulary
    "runtime": 1,  # transport, supervision, events, the config loader
    "sandbox": 1,  # untrusted code
    "envs": 2,  # worlds, skills, the RL interface, composed episodes
    "knowledge": 2,  # the game's recipes and the skill library
    "llm": 3,  # the model layer (the offline backend reads knowledge)
    "method": 4,  # the method's machinery: driver, settings, journal, ledger, seeds
    "actors": 5,  # the roles
    "rlgpt": 6,  # the command line, the terminal's view, the shipped configs
}
"""Floor of each package: imports go down (or stay inside a package), never up or
sideways."""


def imports_of(path: Path) -> set[str]:
    """Top-level packages a module imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_no_import_runs_up_or_sideways_between_floors() -> None:
    wrong = []
    for package, floor in FLOORS.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for target in imports_of(path) & FLOORS.keys():
                if target != package and FLOORS[target] >= floor:
                    wrong.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_the_layering_check_sees_a_function_level_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from actors.learner import x\n    import envs.rl_env\n")
    assert imports_of(module) == {"actors", "envs"}


HEAD_IMPORTS = """
import json, sys
sys.path.insert(0, sys.argv[1])
import run
from actors import agent_classes
from method import checkup, driver, settings
import llm.offline, llm.openai_backend
agent_classes()
settings.load("diamond.toml")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in
      ("torch", "stable_baselines3", "gymnasium"))))
"""


def test_the_head_process_never_imports_torch_or_stable_baselines3() -> None:
    out = subprocess.run(
        [sys.executable, "-c", HEAD_IMPORTS, str(ROOT)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert not [m for m in loaded if m.split(".")[0] in ("torch", "stable_baselines3")], loaded
