"""A sub-action's reward code tried on scripted transitions before any training step.

A shaped reward (``RLConfig.reward_code``: ``reward(before, after)``) that never pays
for the sub-action's own progress, or that pays for standing still, wastes a whole PPO
job: the learner only finds out from a flat curve. :func:`check_reward` calls it, in the
sandbox and under the learner's per-call budget, on a handful of transitions built from
the sub-action's recipe step (:class:`knowledge.recipes.Step`), with no world:

| transition         | ``after`` differs from ``before`` by                        |
|--------------------|-------------------------------------------------------------|
| ``idle``           | one step, nothing else                                      |
| ``gain <item>``    | one more of each item in the step's goal, uses and requires |
| ``unlock <name>``  | the step's achievement, once                                |
| ``<vital> +1``     | the vital the step restores (drink, food, energy), by one   |

It passes when every call returns a finite number, the idle step pays nothing (at most
0: a step cost is fine), and at least one of the others pays more than the idle step
(the reward *fires* on the sub-action's progress). What it pays elsewhere (gaining items
the step has no use for) is reported, not judged. Snapshots have the shape
``rl.rl_env.SubtaskEnv`` passes: ``inventory``, ``status``, ``achievements``,
``steps``.

The caller in the run (the fast agent, in the head's process) uses
:func:`check_reward_apart`: the code runs in a child process of its own, so code that
crashes its process (a C stack overflow, memory) fails this check, not the head.
"""

from __future__ import annotations

import copy
import json
import math
import os
import resource
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any, Protocol

from crafter import constants

from sandbox import SandboxError, compile_code, confine_memory, load
from worlds.crafter_world import VITALS


class Step(Protocol):
    """What the check reads of a recipe step (``knowledge.recipes.Step`` has it)."""

    name: str
    goal: dict[str, int]
    uses: dict[str, int]
    requires: dict[str, int]
    achievement: str


IDLE = "idle"

VITAL_OF: dict[str, str] = {
    "collect_drink": "drink",
    "eat_cow": "food",
    "eat_plant": "food",
    "wake_up": "energy",
}
"""The vital a step restores: its progress shows in ``status``, not the inventory."""

ITEMS: tuple[str, ...] = tuple(k for k in constants.items if k not in VITALS)
"""Crafter's inventory items (its own data; the vitals are status)."""

BASE_VITAL = 5.0
"""Every vital's level before a transition: room to rise and to fall."""


@dataclass(frozen=True)
class RewardCheck:
    """What :func:`check_reward` found."""

    ok: bool
    detail: str
    """Why it failed, or what it paid (for the event)."""
    rewards: dict[str, float] = field(default_factory=dict)
    """Transition name → what the reward code returned for it."""


def _base() -> dict[str, Any]:
    return {
        "inventory": dict.fromkeys(ITEMS, 0),
        "status": dict.fromkeys(VITALS, BASE_VITAL),
        "achievements": {},
        "steps": 10,
    }


def transitions(step: Step) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """The scripted ``(before, after)`` pairs for ``step``: ``idle`` first, then the
    step's own progress (see the module's table)."""
    before = _base()

    def after(change: Any) -> dict[str, Any]:
        snap = copy.deepcopy(before)
        snap["steps"] += 1
        change(snap)
        return snap

    out = {IDLE: (before, after(lambda s: None))}
    items = [*step.goal, *step.uses, *step.requires]
    for item in dict.fromkeys(items):

        def gain(s: dict[str, Any], item: str = item) -> None:
            s["inventory"][item] = s["inventory"].get(item, 0) + 1

        out[f"gain {item}"] = (before, after(gain))
    if step.achievement:

        def unlock(s: dict[str, Any]) -> None:
            s["achievements"][step.achievement] = 1

        out[f"unlock {step.achievement}"] = (before, after(unlock))
    vital = VITAL_OF.get(step.achievement)
    if vital:

        def restore(s: dict[str, Any]) -> None:
            s["status"][vital] += 1

        out[f"{vital} +1"] = (before, after(restore))
    return out


def _shown(rewards: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:+.3g}" for name, value in rewards.items())


def check_reward(code: str, step: Step, *, wall_s: float = 0.1) -> RewardCheck:
    """Try ``code``'s ``reward(before, after)`` on :func:`transitions` of ``step``; each
    call gets ``wall_s`` (the learner's budget per call). Empty code passes (the success
    reward alone)."""
    if not code.strip():
        return RewardCheck(True, "no shaped reward")
    try:
        namespace = load(compile_code(code, filename="<reward_code>"))
    except SandboxError as err:
        return RewardCheck(False, f"reward_code does not load: {err.failure.cause}: "
                                  f"{err.failure.detail}"[:300])  # fmt: skip
    rewards: dict[str, float] = {}
    for name, (before, after) in transitions(step).items():
        outcome = namespace.call("reward", before, after, wall_s=wall_s)
        value = outcome.value
        if outcome.failure is not None:
            failure = outcome.failure
            return RewardCheck(
                False, f"reward({name}) failed: {failure.cause}: {failure.detail}"[:300], rewards
            )
        if type(value) not in (int, float) or not math.isfinite(value):
            return RewardCheck(False, f"reward({name}) returned {value!r:.60}, not a finite number",
                               rewards)  # fmt: skip
        rewards[name] = float(value)
    idle = rewards[IDLE]
    progress = {k: v for k, v in rewards.items() if k != IDLE}
    if idle > 0:
        return RewardCheck(
            False,
            f"it pays {idle:+.3g} for a step where nothing changes (a policy is paid to stand "
            f"still): {_shown(rewards)}",
            rewards,
        )
    if not progress or max(progress.values()) <= idle:
        return RewardCheck(
            False,
            f"it never pays more for {step.name}'s own progress than for a step where nothing "
            f"changes: {_shown(rewards)}",
            rewards,
        )
    return RewardCheck(True, _shown(rewards), rewards)


APART_TIMEOUT_S = 120.0
"""How long the child of :func:`check_reward_apart` may take: a fresh interpreter and its
imports (~1-2 s on a loaded 2-core machine) and a few calls of ``wall_s`` each."""

_CHILD = "from rl.reward_check import _child_main; _child_main()"


def check_reward_apart(code: str, step: Step, *, wall_s: float = 0.1) -> RewardCheck:
    """:func:`check_reward` in a child process (blocking: call it from a thread). A child
    that dies or hangs fails the check with the cause (its signal or exit status)."""
    if not code.strip():
        return RewardCheck(True, "no shaped reward")
    fields = ("name", "goal", "uses", "requires", "achievement")
    asked = {
        "code": code,
        "wall_s": wall_s,
        "step": {name: getattr(step, name) for name in fields},
    }
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=json.dumps(asked),
            capture_output=True,
            text=True,
            timeout=APART_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return RewardCheck(False, f"reward_code's check did not end in {APART_TIMEOUT_S:g} s")
    if proc.returncode != 0:
        code_ = proc.returncode
        how = (
            f"was killed by {signal.Signals(-code_).name}"
            if code_ < 0 and -code_ in signal.valid_signals()
            else f"exited with status {code_}"
        )
        tail = proc.stderr.strip().splitlines()[-1:] if code_ > 0 else []
        return RewardCheck(
            False, f"reward_code crashed the process that checked it: it {how}"
            + (f" ({tail[0][:200]})" if tail else "")
        )  # fmt: skip
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return RewardCheck(found["ok"], found["detail"], found["rewards"])


def _child_main() -> None:
    """The child of :func:`check_reward_apart`: the request on stdin, the check on stdout."""

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash leaves no core file
    confine_memory()  # this process runs the reward code and nothing else
    asked = json.load(sys.stdin)
    step = SimpleNamespace(**asked["step"])
    checked = check_reward(asked["code"], step, wall_s=asked["wall_s"])
    sys.stdout.write(json.dumps(asdict(checked)) + "\n")
    sys.stdout.flush()
    os._exit(0)  # nothing of this process is worth an orderly teardown
