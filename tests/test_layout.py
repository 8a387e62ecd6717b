"""The folder tree is layered: a package imports only packages on lower floors, and the
head process (the driver, the agents, the model layer) never loads torch or
stable-baselines3."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from runtime import provenance

ROOT = Path(__file__).resolve().parent.parent

FLOORS = {
    "messages": 0,  # the vocabulary
    "runtime": 1,  # transport, supervision, events, the config loader
    "sandbox": 1,  # untrusted code
    "worlds": 2,  # the game worlds behind one interface
    "knowledge": 2,  # the game's recipes and the skill library
    "skills": 3,  # the skill API coded policies call, navigation
    "rl": 4,  # the RL interface, PPO, policy files
    "episodes": 5,  # composed episodes, the runner process
    "llm": 5,  # the model layer (the offline backend reads knowledge)
    "method": 6,  # the method's machinery: settings, journal, ledger, seeds, the report
    "actors": 7,  # the roles
    "rlgpt": 8,  # the driver, the command line, the terminal's view, the shipped configs
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


def test_every_package_has_a_floor() -> None:
    assert FLOORS.keys() == set(provenance.PACKAGES)


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
    module.write_text("def f():\n    from actors.learner import x\n    import rl.rl_env\n")
    assert imports_of(module) == {"actors", "rl"}


HEAD_IMPORTS = """
import json, sys
sys.path.insert(0, sys.argv[1])
import run
from method import checkup, settings
from rlgpt import driver
import llm.offline, llm.openai_backend
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


def stray_docstrings(path: Path, root: Path = ROOT) -> list[str]:
    """Module- and class-level strings that document nothing: an attribute's docstring
    belongs right under its assignment, and one anywhere else (left behind when its
    constant moved, or written above the wrong one) is read as documenting whatever is
    next to it."""
    found = []

    def walk(body: list[ast.stmt]) -> None:
        for i, node in enumerate(body):
            if isinstance(node, ast.ClassDef):
                walk(node.body)
            elif (
                i > 0  # the first string of a body is its own docstring
                and isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
                and not isinstance(body[i - 1], (ast.Assign, ast.AnnAssign))
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}")

    walk(ast.parse(path.read_text(), str(path)).body)
    return found


def test_every_attribute_docstring_sits_under_its_assignment() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    stray = [hit for name in tracked for hit in stray_docstrings(ROOT / name)]
    assert not stray, "strings that document nothing (move them under their constant):\n" + (
        "\n".join(stray)
    )


def test_the_docstring_check_sees_a_stray_one(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        '"""Module."""\n\nimport os\n\n"""Stray."""\n\nA = 1\n"""A\'s."""\n'
        'class C:\n    """C."""\n\n    x = 1\n    """x\'s."""\n    """Stray in C."""\n'
    )
    assert stray_docstrings(module, tmp_path) == ["probe.py:5", "probe.py:14"]


LONG = 80
"""Lines of a function's code (its docstring not counted) above which its docstring must
say why it is long ("Long because ...")."""


def long_functions(path: Path, root: Path = ROOT) -> list[str]:
    """Functions in ``path`` over ``LONG`` lines of code whose docstring gives no reason."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        lines = node.end_lineno - node.lineno + 1
        doc = ast.get_docstring(node) or ""
        first = node.body[0]
        if doc and isinstance(first, ast.Expr):
            lines -= first.end_lineno - first.lineno + 1
        if lines > LONG and "Long because" not in doc:
            found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_product_function_is_long_without_a_reason() -> None:
    long = [hit for package in FLOORS for p in sorted((ROOT / package).rglob("*.py"))
            for hit in long_functions(p)]  # fmt: skip
    assert not long, f"functions over {LONG} lines, no reason given:\n" + "\n".join(long)


def test_the_length_check_counts_code_not_the_docstring(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(LONG - 1))
    doc = '    """Doc.\n\n    More.\n    """\n'
    module = tmp_path / "m.py"
    module.write_text(
        f"def fits():\n{doc}{body}\n"
        f"def over():\n{body}    return 1\n\n"
        f'def kept():\n    """Long because a reason."""\n{body}    return 1\n'
    )
    # fits: its def and 79 lines of code, 80 in all; over: 81
    assert long_functions(module, tmp_path) == ["m.py:86 over (81 lines)"]


def test_the_command_line_loads_no_agent_and_no_world_before_it_knows_its_command() -> None:
    # Every actor process starts through rlgpt.cli: the agents, the skill API and the
    # game (numba's compiled search included) cost each of them ~0.6 s if imported here.
    probe = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import rlgpt.cli; print(json.dumps("
        "[m for m in ('actors.slow', 'actors.fast', 'actors.critic', 'rlgpt.driver', "
        "'skills.skills', 'crafter', 'numba', 'torch') if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(ROOT)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
