"""What each agent call must reply, and the validator that holds replies to it.

A call is ``(role, purpose, request) -> reply``; :data:`PURPOSES` lists the five kinds.
:func:`validate` checks a parsed reply against its purpose's contract and returns a clean
copy: known keys only (extra keys are dropped), optional keys filled with their defaults,
numbers normalised (``target`` is a float). A broken reply raises :class:`ContractError`
whose message names the key (``subactions[1].goal.wood``), what was expected and what was
found — precise enough to send back to the model and ask for a repair.

:data:`SCHEMAS` is the same contract in words; prompts include it as ``$schema`` so the
model reads exactly what the validator enforces.

Code in replies is only *syntax*-checked here (``compile()``, and that it defines the
function the contract asks for); the sandbox's checks run later, in the environment actor.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import json
import re
from collections.abc import Callable, Iterator
from typing import Any, get_args

from llm.errors import ContractError
from messages.plan import Mode, Verdict
from messages.task import DEFAULT_OBSERVATION, NeedStat, ObservationPart

PURPOSES: frozenset[tuple[str, str]] = frozenset(
    {("slow", "plan"), ("slow", "revise"), ("fast", "code"), ("fast", "rl"), ("critic", "review")}
)
"""Every (role, purpose) an agent may call the model for."""

# The allowed values come from the vocabulary's types, so a reply is held to exactly what
# the messages it becomes can carry.
MODES: tuple[str, ...] = get_args(Mode)
NEEDS: tuple[str, ...] = get_args(NeedStat)
CHANGES = ("to_rl", "to_code", "redo", "keep")
OBSERVATIONS: tuple[str, ...] = get_args(ObservationPart)
VERDICTS: tuple[str, ...] = get_args(Verdict)
"""The verdicts a backend may give; the critic reads any other reply as ``revise``."""
DEFAULT_TARGET = 0.9  # SubAction's default success rate
# A sub-action's episode cap: Crafter episodes last 10,000 steps at most.
MAX_STEPS_LIMIT = 10_000
_SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")

SCHEMAS: dict[tuple[str, str], str] = {
    ("slow", "plan"): """\
{
  "subactions": [              // at least one, in the order they run
    {
      "name": str,             // snake_case identifier, unique in the plan (e.g. "collect_wood")
      "description": str,      // what it achieves, in words
      "mode": "code" | "rl",   // written as code, or learned with RL
      "depends": [str],        // optional: names of EARLIER sub-actions that run before it
      "goal": {item: int},     // optional: inventory counts (each >= 1) that mean success
      "achievement": str,      // optional: an achievement that means success
                               //   (every sub-action needs a goal or an achievement)
      "max_steps": int,        // episode step cap, 1..10000
      "target": float,         // optional: success rate to reach, 0..1 (default 0.9)
      "options": [str],        // optional: for rl, coded high-level actions to offer
      "reason": str            // why this mode
    }
  ],
  "needs": [str],              // optional: survival needs to watch: drink, food, energy, health
  "reason": str                // the plan in one or two sentences
}""",
    ("slow", "revise"): """\
{
  "changes": [                 // one entry per sub-action you change (may be empty)
    {
      "subaction": str,        // name of a sub-action of the current plan
      "change": "to_rl" | "to_code" | "redo" | "keep",
      "options": [str],        // optional: for to_rl, coded high-level actions to offer
      "reason": str
    }
  ],
  "stop": bool,                // true: the task is solved well enough, stop iterating
  "reason": str
}""",
    ("fast", "code"): """\
{
  "code": str,                 // Python source defining run(skills), a generator of actions
                               //   (may be "" only when "unchanged" is true)
  "note": str,                 // optional: what the code does / what changed
  "unchanged": bool            // optional (default false): true when no code revision can
                               //   answer the critique; the slow agent may then learn the
                               //   sub-action with RL instead
}""",
    ("fast", "rl"): """\
{
  "options": [str],            // coded high-level actions offered beside the primitives
  "primitives": [str],         // primitive actions offered ([] = all of them)
  "observation": [str],        // optional: subset of view, inventory, status, facing, daylight, map
                               //   (default ["view", "inventory", "status"])
  "reward_code": str,          // optional: "" or Python defining reward(before, after) -> float
  "max_steps": int,            // training episode step cap, 1..10000
  "note": str                  // optional: why this configuration
}""",
    ("critic", "review"): """\
{
  "verdict": "accept" | "revise" | "switch",
  "advice": str                // what to change, in words ("" when accepting)
}""",
}
"""Each contract in words (JSON-like, ``//`` comments), as the prompts show it."""


def validate(role: str, purpose: str, data: Any) -> dict[str, Any]:
    """Check a parsed reply; return its clean copy or raise :class:`ContractError`."""
    check = _VALIDATORS.get((role, purpose))
    if check is None:
        raise ValueError(f"unknown call {role}/{purpose}; known: {sorted(PURPOSES)}")
    if not isinstance(data, dict):
        raise ContractError(f"the reply must be a JSON object, found {_describe(data)}")
    return check(data)


# ---------------------------------------------------------------------- the contracts


def _plan(data: dict[str, Any]) -> dict[str, Any]:
    items = _list(data, "subactions", "", required=True)
    if not items:
        raise ContractError("subactions: expected at least one sub-action, found an empty list")
    subactions: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = f"subactions[{i}]"
        if not isinstance(item, dict):
            raise ContractError(f"{where}: expected an object, found {_describe(item)}")
        name = _str(item, "name", where, required=True)
        if not _SNAKE.match(name):
            raise ContractError(
                f"{where}.name: expected a snake_case identifier (lowercase letters, digits, "
                f"underscores, starting with a letter), found {json.dumps(name)}"
            )
        if name in seen:
            raise ContractError(
                f"{where}.name: {json.dumps(name)} is used twice; names must be unique"
            )
        depends = _str_list(item, "depends", where)
        for j, dep in enumerate(depends):
            if dep not in seen:
                raise ContractError(
                    f"{where}.depends[{j}]: {json.dumps(dep)} is not the name of an earlier "
                    f"sub-action (earlier: {json.dumps(sorted(seen))})"
                )
        goal = _goal(item, where)
        achievement = _achievement(item, where, bool(goal))
        if not goal and not achievement:
            raise ContractError(
                f'{where}: needs a non-empty "goal" (e.g. {{"wood": 1}}) or an '
                f'"achievement" (e.g. "place_table"); found neither'
            )
        subactions.append(
            {
                "name": name,
                "description": _str(item, "description", where, required=True),
                "mode": _choice(item, "mode", where, MODES),
                "depends": depends,
                "goal": goal,
                "achievement": achievement,
                "max_steps": _int(item, "max_steps", where, 1, MAX_STEPS_LIMIT),
                "target": _fraction(item, "target", where, DEFAULT_TARGET),
                "options": _str_list(item, "options", where),
                "reason": _str(item, "reason", where),
            }
        )
        seen.add(name)
    needs = _str_list(data, "needs", "")
    for j, need in enumerate(needs):
        if need not in NEEDS:
            raise ContractError(
                f"needs[{j}]: expected one of {json.dumps(list(NEEDS))}, found {json.dumps(need)}"
            )
    return {"subactions": subactions, "needs": needs, "reason": _str(data, "reason", "")}


def _revise(data: dict[str, Any]) -> dict[str, Any]:
    changes = []
    for i, item in enumerate(_list(data, "changes", "", required=True)):
        where = f"changes[{i}]"
        if not isinstance(item, dict):
            raise ContractError(f"{where}: expected an object, found {_describe(item)}")
        changes.append(
            {
                "subaction": _str(item, "subaction", where, required=True, nonempty=True),
                "change": _choice(item, "change", where, CHANGES),
                "options": _str_list(item, "options", where),
                "reason": _str(item, "reason", where),
            }
        )
    stop = data.get("stop")
    if not isinstance(stop, bool):
        raise ContractError(f"stop: expected true or false, found {_found(data, 'stop')}")
    return {"changes": changes, "stop": stop, "reason": _str(data, "reason", "")}


def _code(data: dict[str, Any]) -> dict[str, Any]:
    unchanged = data.get("unchanged", False)
    if not isinstance(unchanged, bool):
        raise _missing(data, "unchanged", "", "true or false")
    if unchanged and not str(data.get("code") or "").strip():
        # Giving up needs no code: the fast agent keeps its last version.
        return {"code": "", "note": _str(data, "note", ""), "unchanged": True}
    code = _str(data, "code", "", required=True, nonempty=True)
    _check_source(code, "code", "run", "run(skills)")
    clean = {"code": code, "note": _str(data, "note", "")}
    return {**clean, "unchanged": True} if unchanged else clean  # the flag only when set


def _rl(data: dict[str, Any]) -> dict[str, Any]:
    if "observation" in data:
        observation = _str_list(data, "observation", "")
        if not observation:
            raise ContractError(
                f"observation: expected at least one of {json.dumps(list(OBSERVATIONS))}, "
                "found an empty list"
            )
        for j, part in enumerate(observation):
            if part not in OBSERVATIONS:
                raise ContractError(
                    f"observation[{j}]: expected one of {json.dumps(list(OBSERVATIONS))}, "
                    f"found {json.dumps(part)}"
                )
    else:
        observation = list(DEFAULT_OBSERVATION)
    reward_code = _str(data, "reward_code", "")
    if reward_code.strip():
        _check_source(reward_code, "reward_code", "reward", "reward(before, after)")
    return {
        "options": _str_list(data, "options", "", required=True),
        "primitives": _str_list(data, "primitives", "", required=True),
        "observation": observation,
        "reward_code": reward_code,
        "max_steps": _int(data, "max_steps", "", 1, MAX_STEPS_LIMIT),
        "note": _str(data, "note", ""),
    }


def _review(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "verdict": _choice(data, "verdict", "", VERDICTS),
        "advice": _str(data, "advice", "", required=True),
    }


_VALIDATORS: dict[tuple[str, str], Callable[[dict[str, Any]], dict[str, Any]]] = {
    ("slow", "plan"): _plan,
    ("slow", "revise"): _revise,
    ("fast", "code"): _code,
    ("fast", "rl"): _rl,
    ("critic", "review"): _review,
}


# ---------------------------------------------------------------------- field checks


def _key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _describe(value: Any) -> str:
    """A found value in a message: its JSON text (shortened) and its JSON type."""
    kind = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }.get(type(value), type(value).__name__)
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return text if value is None else f"{text} ({kind})"


def _found(data: dict[str, Any], key: str) -> str:
    return "no such key" if key not in data else _describe(data[key])


def _missing(data: dict[str, Any], key: str, where: str, expected: str) -> ContractError:
    return ContractError(f"{_key(where, key)}: expected {expected}, found {_found(data, key)}")


def _str(
    data: dict[str, Any], key: str, where: str, *, required: bool = False, nonempty: bool = False
) -> str:
    if key not in data and not required:
        return ""
    value = data.get(key)
    if not isinstance(value, str) or (nonempty and not value.strip()):
        raise _missing(data, key, where, "a non-empty string" if nonempty else "a string")
    return value


def _choice(data: dict[str, Any], key: str, where: str, choices: tuple[str, ...]) -> str:
    value = data.get(key)
    if value not in choices:
        expected = "one of " + ", ".join(json.dumps(c) for c in choices)
        raise _missing(data, key, where, expected)
    return value


def _list(data: dict[str, Any], key: str, where: str, *, required: bool = False) -> list[Any]:
    if key not in data and not required:
        return []
    value = data.get(key)
    if not isinstance(value, list):
        raise _missing(data, key, where, "a list")
    return value


def _str_list(data: dict[str, Any], key: str, where: str, *, required: bool = False) -> list[str]:
    values = _list(data, key, where, required=required)
    for j, value in enumerate(values):
        if not isinstance(value, str) or not value:
            raise ContractError(
                f"{_key(where, key)}[{j}]: expected a non-empty string, found {_describe(value)}"
            )
    return list(values)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(data: dict[str, Any], key: str, where: str, low: int, high: int) -> int:
    value = data.get(key)
    if not _is_int(value) or not low <= value <= high:
        raise _missing(data, key, where, f"an integer from {low} to {high}")
    return value


def _fraction(data: dict[str, Any], key: str, where: str, default: float) -> float:
    if key not in data:
        return default
    value = data[key]
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1
    if not ok:
        raise _missing(data, key, where, "a number from 0 to 1")
    return float(value)


def _goal(item: dict[str, Any], where: str) -> dict[str, int]:
    if "goal" not in item:
        return {}
    goal = item["goal"]
    if not isinstance(goal, dict):
        raise _missing(item, "goal", where, 'an object of item counts, e.g. {"wood": 1}')
    clean: dict[str, int] = {}
    for name, count in goal.items():
        if not name:
            raise ContractError(f'{where}.goal: item names must be non-empty, found ""')
        item = resolve_item(name)
        if item is None:
            raise ContractError(
                f"{where}.goal.{name}: expected an item of the game "
                f"({', '.join(_items())}), found {json.dumps(name)}"
            )
        if not _is_int(count) or count < 1:
            raise ContractError(
                f"{where}.goal.{name}: expected an integer >= 1, found {_describe(count)}"
            )
        clean[item] = clean.get(item, 0) + count
    return clean


def _achievement(item: dict[str, Any], where: str, has_goal: bool) -> str:
    """The sub-action's achievement, normalised to Crafter's name ("Collect Wood",
    "get wood" → ``collect_wood``). One that names none: dropped when a goal says what
    success is (the goal is the test then), refused otherwise."""
    text = _str(item, "achievement", where)
    if not text.strip():
        return ""
    found = resolve_achievement(text)
    if found is not None or has_goal:
        return found or ""
    raise ContractError(
        f"{where}.achievement: expected one of the game's achievements "
        f"({', '.join(_achievements())}), found {json.dumps(text)}"
    )


def _check_source(source: str, key: str, function: str, signature: str) -> None:
    """Syntax only: ``compile()``, and a top-level ``def`` of the function the contract asks."""
    try:
        tree = compile(source, f"<{key}>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        line = (exc.text or "").strip()
        near = f": {line!r}" if line else ""
        raise ContractError(
            f"{key}: Python syntax error at line {exc.lineno}: {exc.msg}{near}"
        ) from None
    except ValueError as exc:  # e.g. a NUL byte in the source
        raise ContractError(f"{key}: not compilable Python: {exc}") from None
    defined = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function
    ]
    if not defined:
        raise ContractError(
            f"{key}: expected Python source defining a top-level function {signature}, "
            f"found no top-level `def {function}`"
        )
    # compile() proper also catches what the AST pass lets through (e.g. 'return' outside
    # a function is fine in an AST, a SyntaxError when compiled).
    try:
        compile(tree, f"<{key}>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise ContractError(f"{key}: Python syntax error at line {exc.lineno}: {exc.msg}") from None


# ---------------------------------------------------------------------- Crafter's names

# What a model may call a thing, mapped to the game's own word. Small models paraphrase
# ("get logs", "craft a crafting table", "kill zombie"); these are the paraphrases seen
# or likely, not a thesaurus.
_VERBS = {
    "collect": "collect", "get": "collect", "gather": "collect", "chop": "collect",
    "mine": "collect", "harvest": "collect", "obtain": "collect", "pick": "collect",
    "acquire": "collect", "fetch": "collect", "find": "collect", "cut": "collect",
    "dig": "collect", "drink": "collect", "make": "make", "craft": "make",
    "create": "make", "forge": "make", "build": "make", "place": "place", "put": "place",
    "set": "place", "plant": "place", "defeat": "defeat", "kill": "defeat",
    "fight": "defeat", "slay": "defeat", "attack": "defeat", "hunt": "eat", "eat": "eat",
}  # fmt: skip
_NOUNS = {
    "log": "wood", "logs": "wood", "timber": "wood", "tree": "wood", "trees": "wood",
    "wooden": "wood", "rock": "stone", "rocks": "stone", "cobblestone": "stone",
    "stones": "stone", "water": "drink", "crafting_table": "table", "workbench": "table",
    "workbenches": "table", "tables": "table", "kiln": "furnace", "seed": "sapling",
    "seeds": "sapling", "saplings": "sapling", "cows": "cow", "beef": "cow", "meat": "cow",
    "zombies": "zombie", "skeletons": "skeleton", "diamonds": "diamond", "ore": "",
    "iron_ore": "iron", "coal_ore": "coal", "pick": "pickaxe", "crafting": "",
}  # fmt: skip
_VITALS = {"food": "eat_cow", "drink": "collect_drink", "energy": "wake_up"}
"""A vital in a goal, and the achievement that raises it."""
_FILLER = frozenset({"a", "an", "the", "some", "one", "two", "three", "more", "of", "and", "x"})
_WAKE = frozenset({"sleep", "wake", "wake_up", "rest", "sleeping"})


WORLD: contextvars.ContextVar[str] = contextvars.ContextVar("contract_world", default="crafter")
"""The game whose names the contracts check (``[task] world``): set for a call by
:func:`game`; Crafter's unless said."""


@contextlib.contextmanager
def game(world: str) -> Iterator[None]:
    """Check replies against ``world``'s items and achievements inside the block."""
    token = WORLD.set(world)
    try:
        yield
    finally:
        WORLD.reset(token)


def _achievements() -> tuple[str, ...]:
    if WORLD.get() == "minetest":
        from worlds.minetest.world import ACHIEVEMENTS

        return ACHIEVEMENTS
    from crafter import constants

    return tuple(constants.achievements)


def _minetest_items() -> tuple[str, ...]:
    """Minetest's items a plan may name: the chain's and those its actions make or place."""
    from worlds.minetest.world import CHAIN, CRAFT_ITEMS, PLACE_ITEMS, SMELT_ITEMS

    return tuple(dict.fromkeys([*CHAIN, *CRAFT_ITEMS, *PLACE_ITEMS, *SMELT_ITEMS,
                                "default:pine_tree", "default:dirt", "default:stone"]))  # fmt: skip


def _minetest_item(text: str) -> str | None:
    """Minetest's full name of an item a model named (``"default:tree"``, ``"tree"``,
    ``"Pick Wood"``), or of alternatives joined by ``|``; None when one names none."""
    if "|" in text:
        names = [_minetest_item(part) for part in text.split("|")]
        return None if None in names else "|".join(n for n in names if n)
    items = _minetest_items()
    name = "_".join(text.strip().lower().replace("default:", "").split())
    full = f"default:{name}"
    return full if full in items else None


def _minetest_achievement(text: str) -> str | None:
    """``obtain_<item>`` for a model's ``"obtain_tree"``, ``"obtain default:tree"``."""
    words = "_".join(text.strip().lower().replace("default:", "").split())
    name = words if words.startswith("obtain_") else f"obtain_{words}"
    return name if name in _achievements() else None


def _items() -> tuple[str, ...]:
    if WORLD.get() == "minetest":
        return _minetest_items()
    from crafter import constants

    return tuple(constants.items)


def _words(text: str) -> list[str]:
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w and not w.isdigit()]


def resolve_item(text: str) -> str | None:
    """Crafter's name of an item a model named (``"Wood"``, ``"logs"``, ``"wooden
    pickaxe"`` → ``wood``, ``wood``, ``wood_pickaxe``); None when it names none."""
    if WORLD.get() == "minetest":
        return _minetest_item(text)
    words = [_NOUNS.get(w, w) for w in _words(text) if w not in _FILLER]
    joined = "_".join(w for w in words if w)
    items = _items()
    return joined if joined in items else None


def resolve_achievement(text: str) -> str | None:
    """Crafter's achievement a model's name or phrase means — case, spaces, plurals and
    common synonyms normalised (``"Collect Wood"``, ``"get_logs"``, ``"craft a
    crafting table"``, ``"kill zombie"`` → ``collect_wood``, ``collect_wood``,
    ``place_table``, ``defeat_zombie``); None when it names none or several."""
    if WORLD.get() == "minetest":
        return _minetest_achievement(text)
    achievements = _achievements()
    words = [w for w in _words(text) if w not in _FILLER]
    if not words:
        return None
    joined = "_".join(words)
    if joined in achievements:
        return joined
    if set(words) <= _WAKE:
        return "wake_up"
    verb = _VERBS.get(words[0])
    rest = words[1:] if verb else words
    obj = "_".join(n for n in (_NOUNS.get(w, w) for w in rest) if n)
    obj = "drink" if obj == "" and words[0] == "drink" else obj
    if not obj:
        return None
    if verb and f"{verb}_{obj}" in achievements:
        return f"{verb}_{obj}"
    candidates = [a for a in achievements if a.split("_", 1)[1] == obj]
    if verb == "make":  # "build a table": a station is placed, not made
        candidates = [a for a in candidates if not a.startswith("collect_")] or candidates
    return candidates[0] if len(candidates) == 1 else None


def subtask_achievement(name: str, achievement: str, goal: dict[str, int]) -> str | None:
    """The Crafter achievement a planned sub-action stands for: its achievement, else its
    name, else its goal's first item that one achievement produces (``{"wood": 3}`` →
    ``collect_wood``); None when none of them names a step of the game."""
    for text in (achievement, name):
        found = resolve_achievement(text) if text else None
        if found is not None:
            return found
    achievements = _achievements()
    for text in goal:
        item = resolve_item(text)
        if item is None:
            continue
        for found in (_VITALS.get(item), f"collect_{item}", f"make_{item}"):
            if found in achievements:
                return found
    return None


# ---------------------------------------------------------------------- JSON schemas

_STR: dict[str, Any] = {"type": "string"}
_STRS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


def json_schemas(world: str = "crafter") -> dict[tuple[str, str], dict[str, Any]]:
    """Each contract as a JSON Schema, for servers that constrain their output to one
    (structured output). Looser than :func:`validate` where a schema cannot say it (code
    that compiles, names of earlier sub-actions, a goal or an achievement), stricter where
    that helps a constrained model (optional keys required, achievements by name): the
    validator still checks every reply. ``world``: whose achievements are named."""
    with game(world):
        return _json_schemas()


def _json_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    steps = {"type": "integer", "minimum": 1, "maximum": MAX_STEPS_LIMIT}
    subaction = _object(
        {
            "name": _STR,
            "description": _STR,
            "mode": {"type": "string", "enum": list(MODES)},
            "depends": _STRS,
            "goal": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1}},
            "achievement": {"type": "string", "enum": ["", *_achievements()]},
            "max_steps": steps,
            "target": {"type": "number", "minimum": 0, "maximum": 1},
            "options": _STRS,
            "reason": _STR,
        },
        # More required than the validator asks: a model whose output a server holds to
        # the schema writes only what is required, and a plan step without its goal and
        # achievement is refused (the 0.5B model did exactly that on llama-cpp-python).
        ["name", "description", "mode", "depends", "goal", "achievement", "max_steps",
         "target", "reason"],
    )  # fmt: skip
    change = _object(
        {
            "subaction": _STR,
            "change": {"type": "string", "enum": list(CHANGES)},
            "options": _STRS,
            "reason": _STR,
        },
        ["subaction", "change", "reason"],
    )
    return {
        ("slow", "plan"): _object(
            {
                "subactions": {"type": "array", "items": subaction, "minItems": 1},
                "needs": {"type": "array", "items": {"type": "string", "enum": list(NEEDS)}},
                "reason": _STR,
            },
            ["subactions", "needs", "reason"],
        ),
        ("slow", "revise"): _object(
            {
                "changes": {"type": "array", "items": change},
                "stop": {"type": "boolean"},
                "reason": _STR,
            },
            ["changes", "stop"],
        ),  # fmt: skip
        ("fast", "code"): _object(
            {"code": _STR, "note": _STR, "unchanged": {"type": "boolean"}}, ["code"]
        ),
        ("fast", "rl"): _object(
            {
                "options": _STRS,
                "primitives": _STRS,
                "observation": {
                    "type": "array",
                    "items": {"type": "string", "enum": list(OBSERVATIONS)},
                },
                "reward_code": _STR,
                "max_steps": steps,
                "note": _STR,
            },
            ["options", "primitives", "observation", "reward_code", "max_steps"],
        ),
        ("critic", "review"): _object(
            {"verdict": {"type": "string", "enum": list(VERDICTS)}, "advice": _STR},
            ["verdict", "advice"],
        ),
    }
