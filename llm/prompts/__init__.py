"""Prompt rendering and reply extraction: pure functions, testable without a network.

Prompts live in ``llm/prompts/`` as text files, one per call: ``{role}_{purpose}.txt``.
A file holds the system message, then a line ``=== user ===``, then the user message. Both
parts are ``string.Template`` text (so JSON braces need no escaping; a literal dollar is
``$$``) rendered with:

- ``$request``    — the call's request dict as pretty JSON;
- ``$schema``     — the reply contract in words (:data:`llm.contracts.SCHEMAS`);
- ``$skills_api`` — the skill API coded policies call (``skills_api.txt``);
- ``$role``, ``$purpose``.

``repair.txt`` is the message sent after an invalid reply (``$error``: what was wrong).

:func:`extract_json` pulls the one JSON object out of a reply: the whole text, else a
fenced block (three backticks), else the first object found in the text (trailing prose
ignored). Failures raise :class:`~llm.errors.ContractError`, worded for the model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from string import Template
from typing import Any

from llm.contracts import PURPOSES, SCHEMAS
from llm.errors import BackendConfigError, ContractError

PROMPTS_DIR = Path(__file__).resolve().parent
"""The repository's prompt files (``llm/prompts``)."""
USER_MARKER = "=== user ==="
SKILLS_API_FILE = "skills_api.txt"
REPAIR_FILE = "repair.txt"
# How many '{' positions to try when a reply wraps its object in prose: a handful covers
# "Here is the plan {…}" replies without quadratic work on a long, broken reply.
MAX_OBJECT_STARTS = 20
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n(.*?)```", re.DOTALL)

Messages = list[dict[str, str]]


class PromptSet:
    """The prompt files of one directory, read and checked once."""

    def __init__(self, directory: Path = PROMPTS_DIR) -> None:
        self.directory = Path(directory)
        self.skills_api = self._read(SKILLS_API_FILE)
        self.repair = Template(self._read(REPAIR_FILE))
        self.templates: dict[tuple[str, str], tuple[Template, Template]] = {}
        for role, purpose in sorted(PURPOSES):
            text = self._read(f"{role}_{purpose}.txt")
            if USER_MARKER not in text:
                raise BackendConfigError(
                    f"{self.directory / f'{role}_{purpose}.txt'}: no {USER_MARKER!r} line "
                    "separating the system message from the user message"
                )
            system, user = text.split(USER_MARKER, 1)
            self.templates[(role, purpose)] = (Template(system.strip()), Template(user.strip()))
            try:  # a misspelt $name fails here, at start, not in the middle of a run
                self.render(role, purpose, {})
            except (KeyError, ValueError) as exc:
                raise BackendConfigError(
                    f"{self.directory / f'{role}_{purpose}.txt'}: bad template ({exc!r}); "
                    "known names: $request $schema $skills_api $role $purpose, '$$' for '$'"
                ) from None

    def _read(self, name: str) -> str:
        path = self.directory / name
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise BackendConfigError(
                f"prompt file {path} is missing: prompts_dir must point at the prompt folder "
                f"(the repository's is {PROMPTS_DIR})"
            ) from None

    def render(self, role: str, purpose: str, request: dict[str, Any]) -> Messages:
        """The chat messages for one call: system (role, contract, example), then user."""
        system, user = self.templates[(role, purpose)]
        names = {
            "request": json.dumps(request, indent=2, sort_keys=True, default=str),
            "schema": SCHEMAS[(role, purpose)],
            "skills_api": self.skills_api.strip(),
            "role": role,
            "purpose": purpose,
        }
        return [
            {"role": "system", "content": system.substitute(names)},
            {"role": "user", "content": user.substitute(names)},
        ]

    def render_repair(self, error: str) -> dict[str, str]:
        """The user message that asks for a corrected reply."""
        return {"role": "user", "content": self.repair.substitute(error=error).strip()}


def messages_text(messages: Messages) -> str:
    """Messages as one readable text (what ``CallResult.prompt`` records)."""
    return "\n\n".join(f"### {m['role']}\n{m['content']}" for m in messages)


def extract_json(text: str) -> Any:
    """The JSON object a reply holds; :class:`ContractError` saying why when there is none."""
    stripped = text.strip()
    if not stripped:
        raise ContractError("the reply was empty; expected one JSON object")
    candidates = [stripped] + [block.strip() for block in _FENCE.findall(text)]
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    # An object wrapped in prose, or followed by trailing text: decode from each '{'.
    decoder = json.JSONDecoder()
    first_error: json.JSONDecodeError | None = None
    start = stripped.find("{")
    tries = 0
    while start >= 0 and tries < MAX_OBJECT_STARTS:
        try:
            value, _ = decoder.raw_decode(stripped, start)
            return value
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
        start = stripped.find("{", start + 1)
        tries += 1
    if first_error is None:
        raise ContractError("the reply holds no JSON object (no '{' found); reply with JSON only")
    near = first_error.doc[max(0, first_error.pos - 30) : first_error.pos + 30]
    raise ContractError(
        f"the reply is not valid JSON: {first_error.msg} at line {first_error.lineno} "
        f"column {first_error.colno} (near {near!r})"
    )
