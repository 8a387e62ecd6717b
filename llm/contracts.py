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
import json
import re
from collections.abc import Callable
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
  "note": str                  // optional: what the code does / what changed
}""",
    ("fast", "rl"): """\
{
  "options": [str],            // coded high-level actions offered beside the primitives
  "primitives": [str],         // primitive actions offered ([] = all of them)
  "observation": [str],        // optional: subset of view, inventory, status, facing, daylight
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
        achievement = _str(item, "achievement", where)
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
    code = _str(data, "code", "", required=True, nonempty=True)
    _check_source(code, "code", "run", "run(skills)")
    return {"code": code, "note": _str(data, "note", "")}


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
    for name, count in goal.items():
        if not name:
            raise ContractError(f'{where}.goal: item names must be non-empty, found ""')
        if not _is_int(count) or count < 1:
            raise ContractError(
                f"{where}.goal.{name}: expected an integer >= 1, found {_describe(count)}"
            )
    return dict(goal)


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
