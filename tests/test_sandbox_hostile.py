"""Hostile agent code: each program must fail with the right cause, touch no file, and leave
the process able to run the next (benign) program correctly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandbox import Limits, SandboxError, compile_code, run_policy
from sandbox.testing import TINY_ACTIONS, TinySkills

# Short budget: hostile loops must be stopped quickly; benign programs need microseconds.
HOSTILE_WALL_S = 0.3

BENIGN = """
def run(skills):
    inv = skills.inventory()
    yield from skills.collect("tree", inv["wood"])
    yield "place_table"
"""
BENIGN_ACTIONS = ["move_left", "do", "move_left", "do", "place_table"]

CANARY_TEXT = "canary: untouched"


def run_source(source: str, *, max_steps: int = 50, wall_s: float = HOSTILE_WALL_S):
    """Compile and run `source` as a policy; returns (outcome-like failure, actions)."""
    actions: list[str] = []
    try:
        compiled = compile_code(textwrap.dedent(source))
    except SandboxError as err:
        return err.failure, actions, ""
    skills = TinySkills()
    outcome = run_policy(
        compiled,
        skills,
        lambda action: actions.append(action) or False,
        max_steps=max_steps,
        wall_s=wall_s,
        allowed_actions=TINY_ACTIONS,
        limits=Limits(memory_bytes=256 * 2**20),
    )
    assert skills._world == {"secret": "world state", "player_health": 9}
    assert skills._inventory == {"wood": 2, "stone": 0}
    return outcome.failure, actions, outcome.output


# (id, source, expected cause). `{canary}` is replaced by the canary file's path.
HOSTILE = [
    # ---- imports
    ("import_os", "import os\ndef run(skills):\n    yield 'noop'", "forbidden"),
    ("import_sys", "import sys\ndef run(skills):\n    yield 'noop'", "forbidden"),
    ("import_subprocess", "def run(skills):\n    import subprocess\n    yield 'noop'", "forbidden"),
    ("import_socket", "import socket\ndef run(skills):\n    yield 'noop'", "forbidden"),
    ("import_ctypes", "import ctypes\ndef run(skills):\n    yield 'noop'", "forbidden"),
    ("import_importlib", "import importlib\ndef run(skills):\n    yield 'noop'", "forbidden"),
    ("from_os_import", "from os import path\ndef run(skills):\n    yield 'noop'", "forbidden"),
    ("relative_import", "from . import x\ndef run(skills):\n    yield 'noop'", "forbidden"),
    ("dunder_import", "def run(skills):\n    __import__('os')\n    yield 'noop'", "forbidden"),
    ("builtins_dict", "def run(skills):\n    __builtins__['open']\n    yield 'noop'", "forbidden"),
    # ---- files, eval, introspection
    (
        "open_canary",
        "def run(skills):\n    open({canary!r}, 'w').write('x')\n    yield 'noop'",
        "forbidden",
    ),
    ("eval", "def run(skills):\n    eval('1')\n    yield 'noop'", "forbidden"),
    ("exec", "def run(skills):\n    exec('x = 1')\n    yield 'noop'", "forbidden"),
    ("compile", "def run(skills):\n    compile('1', 'f', 'eval')\n    yield 'noop'", "forbidden"),
    ("globals", "def run(skills):\n    globals()['x'] = 1\n    yield 'noop'", "forbidden"),
    ("type_builtin", "def run(skills):\n    type(skills)\n    yield 'noop'", "forbidden"),
    (
        "subclasses_walk",
        "def run(skills):\n    ().__class__.__bases__[0].__subclasses__()\n    yield 'noop'",
        "forbidden",
    ),
    ("func_globals", "def run(skills):\n    run.__globals__\n    yield 'noop'", "forbidden"),
    ("func_code", "def run(skills):\n    (lambda: 0).__code__\n    yield 'noop'", "forbidden"),
    (
        "gi_frame_f_globals",
        "def run(skills):\n    g = (x for x in [1])\n    g.gi_frame.f_globals\n    yield 'noop'",
        "forbidden",
    ),
    (
        "bound_method_self",
        "def run(skills):\n    skills.inventory.__self__\n    yield 'noop'",
        "forbidden",
    ),
    (
        "format_string_attr",
        "def run(skills):\n    '{0.__class__}'.format(1)\n    yield 'noop'",
        "forbidden",
    ),
    (
        "getattr_format_dynamic",
        "def run(skills):\n    f = getattr('{0.__class__}', 'for' + 'mat')\n    yield f(1)",
        "forbidden",
    ),
    (
        "getattr_dunder_concat",
        "def run(skills):\n    getattr(skills, '__cl' + 'ass__')\n    yield 'noop'",
        "forbidden",
    ),
    (
        "getattr_private_literal",
        "def run(skills):\n    getattr(skills, '_world')\n    yield 'noop'",
        "forbidden",
    ),
    (
        "getattr_private_dynamic",
        "def run(skills):\n    w = getattr(skills, '_' + 'world')\n    yield 'noop'",
        "forbidden",
    ),
    ("class_definition", "class X:\n    pass\ndef run(skills):\n    yield 'noop'", "forbidden"),
    (
        "computed_format_spec",
        "def run(skills):\n    s = f'{1:>{10 ** 10}}'\n    yield 'noop'",
        "forbidden",
    ),
    # ---- the skill API object
    (
        "set_skill_attribute",
        "def run(skills):\n    skills.inventory = None\n    yield 'noop'",
        "forbidden",
    ),
    (
        "setattr_builtin",
        "def run(skills):\n    setattr(skills, 'x', 1)\n    yield 'noop'",
        "forbidden",
    ),
    ("private_method", "def run(skills):\n    skills._teleport()\n    yield 'noop'", "forbidden"),
    (
        "public_data_attribute",
        "def run(skills):\n    skills.world_handle\n    yield 'noop'",
        "exception",
    ),
    (
        "write_module_attribute",
        "import math\ndef run(skills):\n    math.pi = 3\n    yield 'noop'",
        "forbidden",
    ),
    # ---- time
    (
        "loop_without_yield",
        "def run(skills):\n    while True:\n        pass\n    yield 'noop'",
        "timeout",
    ),
    (
        "loop_swallowing_abort",
        """
        def run(skills):
            while True:
                try:
                    while True:
                        pass
                except:
                    pass
            yield 'noop'
        """,
        "timeout",
    ),
    (
        "finally_return_swallows",
        """
        def spin():
            try:
                while True:
                    pass
            finally:
                return 1
        def run(skills):
            spin()
            yield 'noop'
        """,
        "timeout",
    ),
    ("module_level_loop", "while True:\n    pass\ndef run(skills):\n    yield 'noop'", "timeout"),
    (
        "endless_itertools_in_c",
        "import itertools\ndef run(skills):\n    sum(itertools.repeat(1))\n    yield 'noop'",
        "timeout",
    ),
    (
        "endless_genexp_in_any",
        "import itertools\ndef run(skills):\n    any(x < 0 for x in itertools.count())\n"
        "    yield 'noop'",
        "timeout",
    ),
    (
        "counter_elements",
        "from collections import Counter\ndef run(skills):\n"
        "    len(list(Counter(a=10 ** 12).elements()))\n    yield 'noop'",
        "timeout",
    ),
    ("endless_yield", "def run(skills):\n    while True:\n        yield 'noop'", "step_budget"),
    # ---- recursion
    (
        "recursion_bomb",
        "def f(n):\n    return f(n + 1)\ndef run(skills):\n    f(0)\n    yield 'noop'",
        "recursion",
    ),
    ("generator_recursion", "def run(skills):\n    yield from run(skills)", "recursion"),
    # ---- memory
    ("str_repeat", "def run(skills):\n    s = 'a' * 10 ** 10\n    yield 'noop'", "memory"),
    ("list_repeat", "def run(skills):\n    s = [0] * 10 ** 10\n    yield 'noop'", "memory"),
    ("power_tower", "def run(skills):\n    x = 10 ** 10 ** 10\n    yield 'noop'", "memory"),
    ("big_shift", "def run(skills):\n    x = 1 << 10 ** 10\n    yield 'noop'", "memory"),
    ("pow_builtin", "def run(skills):\n    x = pow(7, 10 ** 9)\n    yield 'noop'", "memory"),
    ("ljust", "def run(skills):\n    'x'.ljust(10 ** 10)\n    yield 'noop'", "memory"),
    ("unbound_ljust", "def run(skills):\n    str.ljust('x', 10 ** 10)\n    yield 'noop'", "memory"),
    ("to_bytes", "def run(skills):\n    (1).to_bytes(10 ** 10, 'big')\n    yield 'noop'", "memory"),
    (
        "percent_width_literal",
        "def run(skills):\n    s = '%10000000000d' % 1\n    yield 'noop'",
        "forbidden",
    ),
    (
        "percent_width_computed",
        "def run(skills):\n    s = ('%' + '10000000000d') % 1\n    yield 'noop'",
        "memory",
    ),
    (
        "percent_star_width",
        "def run(skills):\n    s = '%*d' % (10 ** 10, 1)\n    yield 'noop'",
        "forbidden",
    ),
    (
        "operator_module_mul",
        "import operator\ndef run(skills):\n    operator.mul('a', 10 ** 10)\n    yield 'noop'",
        "memory",
    ),
    (
        "unbound_list_extend",
        "def run(skills):\n    l = [0] * 1000000\n    list.extend(l, l)\n    list.extend(l, l)\n"
        "    yield 'noop'",
        "memory",
    ),
    (
        "string_doubling",
        "def run(skills):\n    s = 'ab'\n    while True:\n        s = s + s\n    yield 'noop'",
        "memory",
    ),
    (
        "inplace_list_doubling",
        "def run(skills):\n    l = [0]\n    while True:\n        l *= 2\n    yield 'noop'",
        "memory",
    ),
    (
        "factorial",
        "import math\ndef run(skills):\n    math.factorial(10 ** 7)\n    yield 'noop'",
        "memory",
    ),
    # ---- actions and output
    ("yield_int", "def run(skills):\n    yield 42", "invalid_action"),
    ("yield_unknown_action", "def run(skills):\n    yield 'fly_to_diamonds'", "invalid_action"),
    ("yield_giant_string", "def run(skills):\n    yield 'do' * 10 ** 6", "invalid_action"),
    (
        "yield_generator_object",
        "def run(skills):\n    yield skills.collect('tree', 1)",
        "invalid_action",
    ),
    ("huge_print", "def run(skills):\n    print('x' * 10 ** 6)\n    yield 'noop'", "output_limit"),
    (
        "print_loop",
        "def run(skills):\n    while True:\n        print('spam')\n    yield 'noop'",
        "output_limit",
    ),
    # ---- generator tricks
    (
        "finally_loop_after_invalid",
        """
        def run(skills):
            try:
                yield 'fly'
            finally:
                while True:
                    pass
        """,
        "invalid_action",
    ),
    (
        "send_into_skill",
        """
        def run(skills):
            g = skills.collect('tree', 3)
            next(g)
            g.send('exec')
            g.throw(ValueError('boom'))
            yield 'noop'
        """,
        "exception",
    ),
    (
        "sum_list_concat",
        "def run(skills):\n    sum([[0] * 1000] * 1000, [])\n    yield 'noop'",
        "exception",
    ),
    (
        "iter_callable_sentinel",
        "def run(skills):\n    list(iter(int, 1))\n    yield 'noop'",
        "exception",
    ),
    ("syntax_error", "def run(skills):\n    yield 'noop'\n  x = (", "syntax"),
    (
        "deep_nesting",
        "x = " + "(" * 500 + ")" * 500 + "\ndef run(skills):\n    yield 'noop'",
        "syntax",
    ),
]

# C calls that crash or stall the process on unguarded code: each runs in its own
# subprocess (see `run_isolated`), so a segfault or a GIL-holding call fails the test
# instead of taking pytest down.
# A tuple nested 200k deep: hashing it overflows the C stack.
DEEP = "    t = ()\n    for i in range(200000):\n        t = (t,)\n"
# 60k unequal ints with one hash: a set of them takes ~30 s in one C call.
FLOOD_INTS = "    P = (1 << 61) - 1\n    l = [k * P + 5 for k in range(1, 60001)]\n"
C_CALLS = [
    # ---- deep nesting: every way agent code hashes (cause recursion, as for a deep repr)
    ("deep_tuple_hash", "def run(skills):\n" + DEEP + "    hash(t)\n    yield 'noop'", "recursion"),
    ("deep_tuple_set_display", "def run(skills):\n" + DEEP + "    s = {t}\n    yield 'noop'",
     "recursion"),
    ("deep_tuple_dict_store", "def run(skills):\n" + DEEP + "    d = {}\n    d[t] = 1\n"
     "    yield 'noop'", "recursion"),
    ("deep_tuple_dict_read", "def run(skills):\n" + DEEP + "    d = {1: 2}\n    d[t]\n"
     "    yield 'noop'", "recursion"),
    ("deep_tuple_in_set", "def run(skills):\n" + DEEP + "    t in {1}\n    yield 'noop'",
     "recursion"),
    ("deep_tuple_set_add", "def run(skills):\n" + DEEP + "    set().add(t)\n    yield 'noop'",
     "recursion"),
    ("deep_tuple_dict_get", "def run(skills):\n" + DEEP + "    {}.get(t)\n    yield 'noop'",
     "recursion"),
    ("deep_tuple_in_set_of_list", "def run(skills):\n" + DEEP + "    set([t])\n"
     "    yield 'noop'", "recursion"),
    ("deep_tuple_built_by_zip", "def run(skills):\n    t = ()\n    for i in range(200000):\n"
     "        t = next(zip([t]))\n    {t: 1}\n    yield 'noop'", "recursion"),
    ("deep_tuple_cached_call", "import functools\n@functools.cache\ndef f(x):\n    return 1\n"
     "def run(skills):\n" + DEEP + "    f(t)\n    yield 'noop'", "recursion"),
    ("deep_tuple_counter", "import collections\ndef run(skills):\n" + DEEP
     + "    collections.Counter([t, t])\n    yield 'noop'", "recursion"),
    # ---- big-int C calls: sizes over the bit limit are `memory`, like 10 ** 10 ** 10;
    # affordable sizes whose one C call would outlast the budget are `timeout`
    ("modular_pow_huge", "def run(skills):\n    m = (1 << 200000) + 7\n    pow(3, m - 1, m)\n"
     "    yield 'noop'", "timeout"),
    ("modular_pow_wide_modulus", "def run(skills):\n    pow(2, 10 ** 300, (1 << 20000) + 1)\n"
     "    yield 'noop'", "timeout"),
    ("from_bytes_then_mod", "def run(skills):\n"
     "    x = int.from_bytes(b'\\xff' * 2000000, 'big') % ((1 << 999999) + 3)\n    yield 'noop'",
     "memory"),
    ("from_bytes_on_instance", "def run(skills):\n"
     "    x = (0).from_bytes(b'\\xff' * 2000000, 'big') % ((1 << 999999) + 3)\n    yield 'noop'",
     "memory"),
    ("int_of_hex_string", "def run(skills):\n"
     "    x = int('f' * 2000000, 16) % ((1 << 999999) + 3)\n    yield 'noop'", "memory"),
    ("int_of_base32_string", "def run(skills):\n"
     "    x = int('v' * 2000000, 32) % ((1 << 999999) + 3)\n    yield 'noop'", "memory"),
    ("round_to_huge_power_of_ten", "def run(skills):\n    round(1, -10 ** 8)\n    yield 'noop'",
     "memory"),
    # ---- hash floods: one bulk build of keys that hash alike (`timeout`: it would outlast
    # the budget in one C call the meter cannot stop)
    ("hash_flood_set", "def run(skills):\n" + FLOOD_INTS + "    set(l)\n    yield 'noop'",
     "timeout"),
    ("hash_flood_fromkeys", "def run(skills):\n" + FLOOD_INTS + "    dict.fromkeys(l)\n"
     "    yield 'noop'", "timeout"),
    ("hash_flood_starred_display", "def run(skills):\n" + FLOOD_INTS + "    {*l}\n"
     "    yield 'noop'", "timeout"),
    ("hash_flood_update", "def run(skills):\n" + FLOOD_INTS + "    s = set()\n    s.update(l)\n"
     "    yield 'noop'", "timeout"),
    ("hash_flood_dict_of_pairs", "def run(skills):\n" + FLOOD_INTS + "    dict(zip(l, l))\n"
     "    yield 'noop'", "timeout"),
    ("hash_flood_counter", "import collections\ndef run(skills):\n" + FLOOD_INTS
     + "    collections.Counter(l)\n    yield 'noop'", "timeout"),
    ("hash_flood_frozenset", "def run(skills):\n" + FLOOD_INTS + "    frozenset(l)\n"
     "    yield 'noop'", "timeout"),
    # ---- lambdas tick: C consumers call them without a loop of ours
    ("lambda_in_map", "def run(skills):\n"
     "    list(map(lambda x: sorted(range(1000)), range(10 ** 6)))\n    yield 'noop'", "timeout"),
]  # fmt: skip
ISOLATED = {name for name, _, _ in C_CALLS}
HOSTILE += C_CALLS


@pytest.fixture
def jail(tmp_path, monkeypatch):
    """A canary file and an empty working directory; both checked after the test."""
    canary = tmp_path / "canary.txt"
    canary.write_text(CANARY_TEXT)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    yield canary
    assert canary.read_text() == CANARY_TEXT
    assert os.listdir(cwd) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canary.txt", "cwd"]


def test_hostile_corpus_is_large_and_covers_every_runtime_cause():
    assert len(HOSTILE) >= 90
    causes = {cause for _, _, cause in HOSTILE}
    assert causes == {
        "syntax", "forbidden", "exception", "timeout", "memory", "recursion",
        "invalid_action", "step_budget", "output_limit",
    }  # fmt: skip


ISOLATED_SCRIPT = """
import json, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/.."]  # this checkout, not an installed copy
from test_sandbox_hostile import BENIGN, BENIGN_ACTIONS, run_source
started = time.monotonic()
failure, _, _ = run_source(sys.argv[2], wall_s=float(sys.argv[3]))
took = time.monotonic() - started
benign_failure, actions, _ = run_source(BENIGN)
print(json.dumps({"cause": failure and failure.cause, "detail": failure and failure.detail,
                  "took": took, "benign": benign_failure is None and actions == BENIGN_ACTIONS}))
"""
# A crash or stall in the child is the failure these programs were added for: 20 s is
# far past the budget (0.3 s) yet far short of what the unguarded calls take.
ISOLATED_TIMEOUT_S = 20
# Building a tuple 200k deep is 200k metered loop steps, about 0.2 s on an idle core: on a
# loaded machine it used up the 0.3 s budget before the hash under test ran (`timeout`
# instead of `recursion`). The deep-nesting programs get a budget the builder cannot use up.
DEEP_WALL_S = 5.0


def run_isolated(source: str, wall_s: float) -> dict:
    """Run `source` like `run_source`, in a fresh Python process."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", ISOLATED_SCRIPT, str(Path(__file__).parent), source,
             str(wall_s)],
            capture_output=True, text=True, timeout=ISOLATED_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"the program stalled its process for over {ISOLATED_TIMEOUT_S} s")
    assert done.returncode == 0, f"the process died ({done.returncode}): {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("name", "source", "cause"), HOSTILE, ids=[i for i, _, _ in HOSTILE])
def test_hostile_program_fails_with_its_cause_and_the_sandbox_keeps_working(
    jail, name, source, cause
):
    if name in ISOLATED:
        wall_s = DEEP_WALL_S if cause == "recursion" else HOSTILE_WALL_S
        result = run_isolated(source, wall_s)
        assert result["cause"] == cause, result
        assert len(result["detail"]) <= 600
        assert result["took"] < wall_s + 1.5
        assert result["benign"]
        return
    started = time.monotonic()
    failure, _, _ = run_source(source.replace("{canary!r}", repr(str(jail))))
    assert failure is not None
    assert failure.cause == cause, failure
    assert len(failure.detail) <= 600
    # Stopped promptly: at most the wall budget plus slack for a slow CI machine.
    assert time.monotonic() - started < HOSTILE_WALL_S + 1.5

    benign_failure, actions, _ = run_source(BENIGN)
    assert benign_failure is None
    assert actions == BENIGN_ACTIONS


def test_failures_point_at_the_offending_line():
    failure, _, _ = run_source("def run(skills):\n    yield 'noop'\n    x = 'a' * 10 ** 10\n")
    assert (failure.cause, failure.line) == ("memory", 3)
    failure, _, _ = run_source("import os\n")
    assert (failure.cause, failure.line) == ("forbidden", 1)
    failure, _, _ = run_source("def run(skills):\n\n    while True:\n        x = 1\n    yield 1")
    assert (failure.cause, failure.line) == ("timeout", 3)
