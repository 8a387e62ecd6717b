"""The fast tier's list of long tests names tests that exist (a renamed or removed test
would otherwise drop out of the list silently and slow the fast tier down)."""

from __future__ import annotations

import ast

from conftest import integration_tests
from helpers import ROOT


def test_every_listed_integration_test_exists() -> None:
    listed = integration_tests()
    assert len(listed) > 20
    missing = []
    for entry in sorted(listed):
        path, _, name = entry.partition("::")
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        if name not in names:
            missing.append(entry)
    assert not missing, f"tests/integration_tests.txt names tests that do not exist: {missing}"
