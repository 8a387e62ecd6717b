"""A TOML writer for the configs this benchmark derives (the standard library reads TOML,
it does not write it)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def dump_toml(table: Mapping[str, Any]) -> str:
    """A TOML document for ``table`` (scalars, lists and nested tables: what configs use)."""
    lines: list[str] = []

    def section(prefix: str, body: Mapping[str, Any]) -> None:
        scalars = {k: v for k, v in body.items() if not isinstance(v, Mapping)}
        tables = {k: v for k, v in body.items() if isinstance(v, Mapping)}
        if prefix and (scalars or not tables):
            lines.append(f"[{prefix}]")
        for key, value in scalars.items():
            lines.append(f"{key} = {_toml_value(value)}")
        if scalars:
            lines.append("")
        for key, value in tables.items():
            section(f"{prefix}.{key}" if prefix else key, value)

    section("", table)
    return "\n".join(lines).rstrip() + "\n"
