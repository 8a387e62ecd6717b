"""Sandbox for untrusted code-as-policy written by the fast agent.

Public API (see README.md in this package for the mechanisms and what they cover):

- `compile_code(source, *, filename=...) -> CompiledCode` (raises `SandboxError`; compiled
  once per process per source sha256, `compile_stats()` counts)
- `load(compiled, *, api_names=..., wall_s=..., limits=...) -> Namespace`
- `Namespace.call(name, *args, wall_s) -> CallOutcome`, `Namespace.start(...) -> PolicyStepper`
- `run_policy(compiled, skills, step_fn, *, max_steps, wall_s, allowed_actions) -> PolicyOutcome`
- `confine_memory()`: in a process that runs policy code only, an address-space cap per call
- `Failure(cause, detail, line, traceback)`, `CAUSES`, `Limits`, `ReadOnlyProxy`, `freeze`
"""

from sandbox.compiler import (
    ALLOWED_MODULES,
    CompiledCode,
    CompileStats,
    compile_code,
    compile_stats,
)
from sandbox.failures import CAUSES, Cause, Failure, SandboxError
from sandbox.limits import Limits
from sandbox.meter import confine_memory, memory_confined
from sandbox.proxy import ReadOnlyProxy, freeze
from sandbox.runner import (
    CallOutcome,
    Namespace,
    PolicyOutcome,
    PolicyStepper,
    load,
    run_policy,
)

__all__ = [
    "ALLOWED_MODULES",
    "CAUSES",
    "CallOutcome",
    "Cause",
    "CompileStats",
    "CompiledCode",
    "Failure",
    "Limits",
    "Namespace",
    "PolicyOutcome",
    "PolicyStepper",
    "ReadOnlyProxy",
    "SandboxError",
    "compile_code",
    "compile_stats",
    "confine_memory",
    "freeze",
    "load",
    "memory_confined",
    "run_policy",
]
