"""Prompt rendering and reply extraction: pure functions, testable without a network.

Prompts live in ``llm/prompts/`` as text files, one per call: ``{role}_{purpose}.txt``.
A file holds the system message, then a line ``=== user ===``, then the user message. Both
parts are ``string.Template`` text (so JSON braces need no escaping; a literal dollar is
``$$``) rendered with:

- ``$request``    — the call's request dict as pretty JSON;
- ``$schema``     — the reply contract in words (:data:`llm.contracts.SCHEMAS`);
- ``$skills_api`` — the skill API coded policies call: ``skills_api.txt`` (the game's
  facts and the sandbox's rules) around ``$reference``, one line per public method of
  :class:`skills.skills.Skills` — its signature and docstring, generated so that it cannot
  drift from the code (:func:`skill_reference`);
- ``$skills_brief`` — the same methods' signatures only (for the planner, which needs to
  know what code can do, not how);
- ``$example`` — the call's worked example, from ``{role}_{purpose}.example.txt``;
- ``$game`` — the game's name (Crafter, or Minetest for ``world = "minetest"``, whose own
  files in ``llm/prompts/minetest/`` replace the ones that differ: the skill API of
  :class:`worlds.minetest.skills.VoxelSkills` and the worked examples);
- ``$role``, ``$purpose``.

A prompt has a size: :func:`estimate_tokens` is the estimate every context check uses
(characters / :data:`CHARS_PER_TOKEN`, plus a few per message).

``repair.txt`` is the message sent after an invalid reply (``$error``: what was wrong).

:func:`extract_json` pulls the one JSON object out of a reply: the whole text, else a
fenced block (three backticks), else the first object found in the text (trailing prose
ignored). Failures raise :class:`~llm.errors.ContractError`, worded for the model.
"""

from __future__ import annotations

import inspect
import json
import math
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
EXAMPLE_SUFFIX = ".example.txt"
"""``{role}_{purpose}.example.txt``: a call's worked example, rendered as ``$example``."""
REPAIR_FILE = "repair.txt"
# How many '{' positions to try when a reply wraps its object in prose: a handful covers
# "Here is the plan {…}" replies without quadratic work on a long, broken reply.
MAX_OBJECT_STARTS = 20
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n(.*?)```", re.DOTALL)
CHARS_PER_TOKEN = 3.5
"""Characters per token of the estimate: BPE tokenizers (Qwen2.5, Llama 3, GPT-4o) give
3.5–4.5 for English and 3–3.5 for JSON and code; the low end errs towards "too long"."""
MESSAGE_TOKENS = 4
"""Tokens a chat template adds per message (role markers)."""

Messages = list[dict[str, str]]


def text_tokens(text: str) -> int:
    """Estimated tokens of a text."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_tokens(messages: Messages) -> int:
    """Estimated prompt tokens of chat messages (no tokenizer needed: a server that
    sends no ``usage``, and the context check before sending, both use this)."""
    return sum(text_tokens(str(m.get("content", ""))) + MESSAGE_TOKENS for m in messages)


def _doc(text: str | None) -> str:
    """A docstring on one line, reST markup dropped."""
    text = re.sub(r":(?:meth|func|class|attr):`~?([^`]+)`", r"\1", text or "")
    return " ".join(text.replace("``", "").split())


GAMES = {"crafter": "Crafter", "minetest": "Minetest"}
"""The worlds a prompt set is for (``[task] world``) and the game's name the prompts say."""


def _skill_class(world: str = "crafter") -> type:
    """The skill API a world's coded policies call."""
    # Here, not at the top: the skill API brings Crafter and numba's compiled search
    # (~0.6 s), which every process that imports the model layer would pay at start.
    if world == "minetest":
        from worlds.minetest.skills import VoxelSkills

        return VoxelSkills
    from skills.skills import Skills

    return Skills


def _skill_methods(world: str = "crafter") -> list[tuple[str, str, bool, str]]:
    """(name, call signature, is a generator, docstring) of every public method of the
    world's skill API (:class:`skills.skills.Skills` in Crafter), in the order the class
    defines them."""
    out = []
    for name, member in vars(_skill_class(world)).items():
        if name.startswith("_") or not inspect.isfunction(member):
            continue
        sig = inspect.signature(member)
        params = list(sig.parameters.values())[1:]  # drop self
        shown = [p.name if p.default is p.empty else f"{p.name}={p.default!r}" for p in params]
        generator = "Iterator" in str(sig.return_annotation)
        out.append((name, f"skills.{name}({', '.join(shown)})", generator, _doc(member.__doc__)))
    return out


def skill_reference(world: str = "crafter") -> str:
    """The skill API, one line per method: signature and docstring (generated from the
    world's skills class). Generators are marked: call them with ``yield from``."""
    methods = _skill_methods(world)
    plain = [f"- {call}: {doc}" for _, call, gen, doc in methods if not gen]
    moving = [f"- {call}: {doc}" for _, call, gen, doc in methods if gen]
    return "\n".join(
        ["Plain calls (answers are fresh copies):", *plain, "",
         "Generators of actions (use with `yield from`; True when they got there):", *moving]
    )  # fmt: skip


def skill_names(world: str = "crafter") -> list[str]:
    """The skill API's method names (``skills.NAME``), in the order the class defines them."""
    return [name for name, _, _, _ in _skill_methods(world)]


def skill_brief(world: str = "crafter") -> str:
    """The skill API's signatures only, on a few lines (what code can do, for the planner)."""
    methods = _skill_methods(world)
    plain = [call for _, call, gen, _ in methods if not gen]
    moving = [call for _, call, gen, _ in methods if gen]
    return "Queries: " + ", ".join(plain) + "\nActions (yield from): " + ", ".join(moving)


class PromptSet:
    """The prompt files of one directory, read and checked once.

    ``world``: the game the prompts are for. Its own folder inside the directory
    (``minetest/``) holds the files that differ (the skill API's facts, the worked
    examples); every other file is the directory's, with ``$game`` the game's name."""

    def __init__(self, directory: Path = PROMPTS_DIR, world: str = "crafter") -> None:
        if world not in GAMES:
            raise BackendConfigError(f"no prompts for world {world!r}: {', '.join(GAMES)}")
        self.directory = Path(directory)
        self.world = world
        self.skills_api = Template(self._read(SKILLS_API_FILE)).substitute(
            reference=skill_reference(world)
        )
        self.skills_brief = skill_brief(world)
        self.repair = Template(self._read(REPAIR_FILE))
        self.templates: dict[tuple[str, str], tuple[Template, Template]] = {}
        self.examples: dict[tuple[str, str], str] = {}
        """(role, purpose) → its worked example (``$example``), the world's own if it has one."""
        for role, purpose in sorted(PURPOSES):
            text = self._read(f"{role}_{purpose}.txt")
            if USER_MARKER not in text:
                raise BackendConfigError(
                    f"{self.directory / f'{role}_{purpose}.txt'}: no {USER_MARKER!r} line "
                    "separating the system message from the user message"
                )
            system, user = text.split(USER_MARKER, 1)
            self.templates[(role, purpose)] = (Template(system.strip()), Template(user.strip()))
            example = self._path(f"{role}_{purpose}{EXAMPLE_SUFFIX}")
            if example.is_file():
                self.examples[(role, purpose)] = self._read(example.name).strip()
            try:  # a misspelt $name fails here, at start, not in the middle of a run
                self.render(role, purpose, {})
            except (KeyError, ValueError) as exc:
                raise BackendConfigError(
                    f"{self.directory / f'{role}_{purpose}.txt'}: bad template ({exc!r}); "
                    "known names: $request $schema $skills_api $skills_brief $game $example "
                    "$role $purpose, "
                    "'$$' for '$'"
                ) from None

    def _path(self, name: str) -> Path:
        """The file ``name`` of this world: its own folder's, else the directory's."""
        own = self.directory / self.world / name
        return own if self.world != "crafter" and own.is_file() else self.directory / name

    def _read(self, name: str) -> str:
        path = self._path(name)
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
            "skills_brief": self.skills_brief,
            "game": GAMES[self.world],
            "example": self.examples.get((role, purpose), ""),
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
