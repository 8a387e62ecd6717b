"""Compile agent source: RestrictedPython's policy, our own checks, and metering hooks.

On top of RestrictedPython (no `_`-names, no dunder attributes, no exec/eval, guarded
attribute/item/iteration/write access), our policy:

- refuses imports outside `ALLOWED_MODULES`, classes, and names that reach the
  interpreter (`open`, `globals`, `type`, ...);
- refuses `getattr(x, "_...")` with a literal name, `.format`/`.format_map`/`.mro`, and
  f-string format specs that are computed or wider than the limit;
- rewrites `*`, `**`, `<<`, `+`, `%` into size-checked guard calls;
- plants `_tick_()` (the wall-clock/memory meter) at the top of every function body, loop
  body and `except` handler, as a condition of every comprehension and in every lambda
  (C consumers such as `functools.reduce` or `map` call lambdas without a loop of ours);
- passes every value about to be hashed (`in`, `d[k] = v`, set/dict displays and
  comprehensions) through `_key_`, which refuses tuples nested deep enough to overflow
  the C stack, and builds `{*xs}` through the guarded `set`.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import hashlib
import re
import threading
import types

from RestrictedPython import compile_restricted_exec
from RestrictedPython.transformer import (
    IOPERATOR_TO_STR,
    RestrictingNodeTransformer,
    copy_locations,
)

from sandbox.failures import SandboxError
from sandbox.guards import ALLOWED_MODULES, FORBIDDEN_ATTRIBUTES
from sandbox.limits import Limits

# LLM replies are a few thousand tokens; 100k characters bounds parser time and memory
# (deeply nested or enormous sources can exhaust the parser before any check runs).
MAX_SOURCE_CHARS = Limits().max_source_chars

# Names refused at compile time (most are also absent from the sandbox's builtins; naming
# them here gives the agent a clear message with a line number instead of a NameError).
FORBIDDEN_NAMES = frozenset(
    {
        "eval", "exec", "compile", "open", "input", "globals", "locals", "vars", "dir",
        "type", "object", "super", "setattr", "delattr", "memoryview", "bytearray",
        "breakpoint", "help", "exit", "quit", "classmethod", "staticmethod", "property",
        "format",
    }
)  # fmt: skip

_GUARDED_OPS: dict[type[ast.operator], str] = {
    ast.Mult: "_mul_",
    ast.Pow: "_pow_",
    ast.LShift: "_lshift_",
    ast.Add: "_add_",
    ast.Mod: "_mod_",
}
_LINE = re.compile(r"^Line (\d+):")
_DIGITS = re.compile(r"\d+")
# A `%` conversion spec: optional (key), flags, width, .precision.
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


@dataclasses.dataclass(frozen=True, slots=True)
class CompiledCode:
    """Agent source that passed the checks, ready for `load`."""

    code: types.CodeType
    """The module's code object (its co_filename is `filename`)."""
    source: str
    filename: str
    """Tracebacks and the meter recognise agent frames by this name."""
    functions: tuple[str, ...]
    """Names of the top-level `def`s, in source order."""

    @property
    def source_lines(self) -> list[str]:
        return self.source.splitlines()


# Compiled code kept per process, by the sha256 of its source (with its filename and
# limits): an environment actor runs the same stage modules request after request (15
# stages of the diamond chain took ~290 ms to compile per rollout). A stage module is a
# few hundred KB compiled; 64 of them (a run's stages and their latest revisions) stay
# well under the actor's memory cap.
COMPILE_CACHE_SIZE = 64
# And at most this much source in all (a composed setup module may be several times a
# stage's size): 4M characters is ~200 diamond-chain stage modules' worth.
COMPILE_CACHE_CHARS = 4_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class CompileStats:
    """How this process's compile cache has done so far."""

    compiled: int
    """Sources checked and compiled (cache misses, refused sources included)."""
    hits: int
    """Requests answered from the cache."""
    cached: int
    """Entries held now (at most COMPILE_CACHE_SIZE)."""


_cache: collections.OrderedDict[tuple[str, str, Limits], CompiledCode] = collections.OrderedDict()
_cache_lock = threading.Lock()  # environment actors compile in worker threads
_compiled = 0
_hits = 0
_cached_chars = 0


def compile_stats() -> CompileStats:
    """This process's compile counts (what tests and the environment actor report)."""
    with _cache_lock:
        return CompileStats(_compiled, _hits, len(_cache))


def compile_code(
    source: str, *, filename: str = "<agent code>", limits: Limits | None = None
) -> CompiledCode:
    """Check and compile agent source, or raise `SandboxError` (cause syntax/forbidden).

    The same source (by sha256), filename and limits compile once per process: the
    result is immutable and every run loads it into a fresh namespace. The cache keeps
    the COMPILE_CACHE_SIZE most recently used, COMPILE_CACHE_CHARS of source at most;
    refused sources are not kept.
    """
    global _compiled, _hits, _cached_chars
    limits = limits or Limits()
    if not isinstance(source, str):
        raise SandboxError("syntax", "source must be a str")
    if len(source) > limits.max_source_chars:
        raise SandboxError("forbidden", f"source longer than {limits.max_source_chars} characters")
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    key = (digest, filename, limits)
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None:
            _cache.move_to_end(key)
            _hits += 1
            return cached
        _compiled += 1
    compiled = _compile(source, filename, limits)
    with _cache_lock:
        if key not in _cache:  # another thread may have compiled it meanwhile
            _cache[key] = compiled
            _cached_chars += len(source)
        _cache.move_to_end(key)
        while len(_cache) > COMPILE_CACHE_SIZE or _cached_chars > COMPILE_CACHE_CHARS:
            _, dropped = _cache.popitem(last=False)
            _cached_chars -= len(dropped.source)
    return compiled


def _compile(source: str, filename: str, limits: Limits) -> CompiledCode:
    try:
        tree = ast.parse(source, filename, "exec")
    except SyntaxError as err:
        raise SandboxError("syntax", f"{err.msg}", err.lineno) from None
    except (RecursionError, MemoryError, ValueError) as err:  # too deeply nested, NUL bytes
        raise SandboxError("syntax", f"cannot parse: {type(err).__name__}") from None

    functions = tuple(n.name for n in tree.body if isinstance(n, ast.FunctionDef))
    policy = _policy_for(limits)
    try:
        result = compile_restricted_exec(tree, filename=filename, policy=policy)
    except (RecursionError, MemoryError) as err:
        raise SandboxError("syntax", f"cannot compile: {type(err).__name__}") from None
    except SyntaxError as err:  # e.g. `return` outside function, found by compile()
        raise SandboxError("syntax", f"{err.msg}", err.lineno) from None
    if result.errors:
        first = result.errors[0]
        match = _LINE.match(first)
        line = int(match.group(1)) if match else None
        detail = _LINE.sub("", first).strip()
        if len(result.errors) > 1:
            detail += f" (and {len(result.errors) - 1} more problems)"
        raise SandboxError("forbidden", detail, line)
    return CompiledCode(result.code, source, filename, functions)


def _policy_for(limits: Limits) -> type[RestrictingNodeTransformer]:
    class Policy(_AgentPolicy):
        max_format_width = limits.max_format_width

    return Policy


def _is_number(value: object) -> bool:
    return type(value) in (int, float, complex)


def _tick_call(node: ast.AST) -> ast.Call:
    call = ast.Call(func=ast.Name("_tick_", ast.Load()), args=[], keywords=[])
    copy_locations(call, node)
    return call


def _key_call(node: ast.expr) -> ast.expr:
    """`_key_(node)`: the depth check before hashing; constants and names of nothing
    but a constant cannot nest, so constants are left as they are."""
    if isinstance(node, (ast.Constant, ast.Starred)):
        return node
    call = ast.Call(func=ast.Name("_key_", ast.Load()), args=[node], keywords=[])
    copy_locations(call, node)
    return call


def _tick_stmt(node: ast.AST) -> ast.Expr:
    stmt = ast.Expr(_tick_call(node))
    copy_locations(stmt, node)
    return stmt


class _AgentPolicy(RestrictingNodeTransformer):
    """RestrictedPython's policy plus the sandbox's rules and rewrites.

    Every rewrite calls the parent visitor first, so our generated `_`-names are added
    after RestrictedPython's name checks have run.
    """

    max_format_width = Limits.max_format_width

    # ---- refusals --------------------------------------------------------------------

    def _check_module(self, node: ast.AST, module: str | None, level: int = 0) -> None:
        if level or module not in ALLOWED_MODULES:
            name = "." * level + (module or "")
            allowed = ", ".join(sorted(ALLOWED_MODULES))
            self.error(node, f"import of {name!r} is not allowed (allowed: {allowed})")

    def visit_Import(self, node: ast.Import) -> ast.AST:
        for alias in node.names:
            self._check_module(node, alias.name)
        return super().visit_Import(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        self._check_module(node, node.module, node.level)
        return super().visit_ImportFrom(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in FORBIDDEN_NAMES:
            self.error(node, f'"{node.id}" is not available in agent code.')
        return super().visit_Name(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.error(node, "classes are not allowed; write functions and generators.")

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if node.attr in FORBIDDEN_ATTRIBUTES:
            self.error(node, f'"{node.attr}" is not available in agent code.')
        return super().visit_Attribute(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.startswith("_")
        ):
            self.error(node, f"attribute {node.args[1].value!r} is not allowed.")
        return super().visit_Call(node)

    def visit_FormattedValue(self, node: ast.FormattedValue) -> ast.AST:
        spec = node.format_spec
        if spec is not None:
            parts = spec.values if isinstance(spec, ast.JoinedStr) else [spec]
            for part in parts:
                if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                    self.error(node, "computed format specs are not allowed in f-strings.")
                    continue
                for digits in _DIGITS.findall(part.value):
                    if int(digits) > self.max_format_width:
                        self.error(node, f"format width {digits} is over the limit.")
        return super().visit_FormattedValue(node)

    # ---- rewrites --------------------------------------------------------------------

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        node = super().visit_BinOp(node)
        guard = _GUARDED_OPS.get(type(node.op))
        if guard is None or self._needs_no_guard(node):
            return node
        call = ast.Call(func=ast.Name(guard, ast.Load()), args=[node.left, node.right], keywords=[])
        copy_locations(call, node)
        return call

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        node = super().visit_Compare(node)
        operands = [node.left, *node.comparators]
        for index, op in enumerate(node.ops):
            if isinstance(op, (ast.In, ast.NotIn)):
                operands[index] = _key_call(operands[index])
        node.left, node.comparators = operands[0], operands[1:]
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        node = super().visit_Subscript(node)
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
            node.slice = _key_call(node.slice)  # a store or del: `_write_(d)[k] = v`
        return node

    def visit_Set(self, node: ast.Set) -> ast.AST:
        node = super().visit_Set(node)
        if any(isinstance(elt, ast.Starred) for elt in node.elts):
            # `{*xs}` builds in C from any iterable: route it through the guarded set().
            items = ast.List(elts=node.elts, ctx=ast.Load())
            call = ast.Call(func=ast.Name("_set_", ast.Load()), args=[items], keywords=[])
            copy_locations(items, node)
            copy_locations(call, node)
            return call
        node.elts = [_key_call(elt) for elt in node.elts]
        return node

    def visit_Dict(self, node: ast.Dict) -> ast.AST:
        node = super().visit_Dict(node)
        node.keys = [None if key is None else _key_call(key) for key in node.keys]
        return node

    def visit_SetComp(self, node: ast.SetComp) -> ast.AST:
        node = super().visit_SetComp(node)
        node.elt = _key_call(node.elt)
        return node

    def visit_DictComp(self, node: ast.DictComp) -> ast.AST:
        node = super().visit_DictComp(node)
        node.key = _key_call(node.key)
        return node

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        node = super().visit_Lambda(node)
        # `_tick_()` returns True, so `_tick_() and body` is the body's value.
        node.body = ast.BoolOp(op=ast.And(), values=[_tick_call(node), node.body])
        copy_locations(node.body, node)
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST | list[ast.stmt]:
        """Allow `counts[key] += 1` (RestrictedPython refuses item targets):

            _tmpA = counts; _tmpB = key
            _write_(_tmpA)[_tmpB] = _inplacevar_("+=", _getitem_(_tmpA, _tmpB), 1)

        Container and key are evaluated once, as in Python; the write goes through the
        write guard and the operation through the operator guards.
        """
        target = node.target
        if not isinstance(target, ast.Subscript) or isinstance(target.slice, ast.Slice):
            return super().visit_AugAssign(node)
        container = self.visit(target.value)
        key = _key_call(self.visit(target.slice))
        value = self.visit(node.value)
        obj_name, key_name = self.gen_tmp_name(), self.gen_tmp_name()

        def load(name: str) -> ast.Name:
            return ast.Name(name, ast.Load())

        def call(func: str, *args: ast.expr) -> ast.Call:
            return ast.Call(func=load(func), args=list(args), keywords=[])

        new_value = call(
            "_inplacevar_",
            ast.Constant(IOPERATOR_TO_STR[type(node.op)]),
            call("_getitem_", load(obj_name), load(key_name)),
            value,
        )
        stmts: list[ast.stmt] = [
            ast.Assign(targets=[ast.Name(obj_name, ast.Store())], value=container),
            ast.Assign(targets=[ast.Name(key_name, ast.Store())], value=key),
            ast.Assign(
                targets=[
                    ast.Subscript(
                        value=call("_write_", load(obj_name)),
                        slice=load(key_name),
                        ctx=ast.Store(),
                    )
                ],
                value=new_value,
            ),
        ]
        for stmt in stmts:
            copy_locations(stmt, node)
        return stmts

    def _needs_no_guard(self, node: ast.BinOp) -> bool:
        """Operations whose result size is known safe from a constant operand."""
        left = node.left.value if isinstance(node.left, ast.Constant) else None
        right = node.right.value if isinstance(node.right, ast.Constant) else None
        if isinstance(left, float) or isinstance(right, float):
            return True  # float arithmetic (or a TypeError)
        if isinstance(node.op, ast.Add):
            return _is_number(left) or _is_number(right)  # `n + 1`: grows linearly at most
        if isinstance(node.op, ast.Mod):
            if isinstance(left, str):  # a literal %-format: check its widths now
                for match in _PERCENT_SPEC.finditer(left):
                    for number in match.groups():
                        if number == "*":
                            return False  # width from the arguments: checked at run time
                        if number is not None and int(number) > self.max_format_width:
                            self.error(node, f"format width {number} is over the limit.")
                return True
            return _is_number(left)
        return False

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node = super().visit_FunctionDef(node)
        node.body.insert(0, _tick_stmt(node))
        return node

    def visit_For(self, node: ast.For) -> ast.AST:
        node = super().visit_For(node)
        node.body.insert(0, _tick_stmt(node))
        return node

    def visit_While(self, node: ast.While) -> ast.AST:
        node = super().visit_While(node)
        node.body.insert(0, _tick_stmt(node))
        return node

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.AST:
        # A handler that swallows the meter's Abort is stopped again on its first line.
        node = super().visit_ExceptHandler(node)
        node.body.insert(0, _tick_stmt(node))
        return node

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        node = super().visit_comprehension(node)
        node.ifs.append(_tick_call(node.iter))
        return node
