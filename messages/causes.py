"""Why an episode or a stage ended: the causes rollouts report and the critic reads.

Causes travel as plain strings (``EpisodeReport.cause``, ``StageRun.cause``); the
Literal types say which strings mean something, and the constants spell the ones code
branches on, so a typo is a NameError instead of a silent mismatch.
"""

from __future__ import annotations

from typing import Final, Literal

SandboxCause = Literal[
    "syntax",  # the source does not parse
    "forbidden",  # a construct, name, import or attribute outside the sandbox's rules
    "exception",  # the agent's code raised (detail + trimmed traceback)
    "timeout",  # the wall-clock budget ran out
    "memory",  # an allocation over the limits, or memory growth over the budget
    "recursion",  # RecursionError escaped the agent's code
    "invalid_action",  # yielded a non-string or a name outside the allowed actions
    "step_budget",  # still yielding actions after max_steps
    "output_limit",  # printed more than the output budget
]
"""Why sandboxed agent code failed (``sandbox.Failure.cause``)."""

EpisodeCause = Literal[
    "success",  # the subtask's (or the stage's) test held
    "policy_finished",  # the policy returned before its test held
    "episode_done",  # the world ended the episode (the player died)
    "setup_failed",  # the setup code died before a learned policy's turn
    "policy_unusable",  # the trained policy is missing, corrupt or fails its hash
    "interrupted",  # a stage run cut short by a survival need (not a failure)
    "policy_error",  # a coded policy raised, outside the sandbox (skills.skills.run_unsandboxed)
    "rollout_failed",  # no environment could run the rollout (the fast agent's stand-in)
    "crashed",  # the process running the policy died (a signal, an exit) in or before it
    "stalled",  # the process running the policy overran its batch's budget and was killed
    SandboxCause,
]
"""Why an episode or a stage run ended. The critic also reports
``not_reached:<cause>`` (see :func:`not_reached`) for a sub-action that never ran."""

# The causes code branches on or reports, each spelled once.
SUCCESS: Final = "success"
POLICY_FINISHED: Final = "policy_finished"
STEP_BUDGET: Final = "step_budget"
EPISODE_DONE: Final = "episode_done"
SETUP_FAILED: Final = "setup_failed"
POLICY_UNUSABLE: Final = "policy_unusable"
INTERRUPTED: Final = "interrupted"
POLICY_ERROR: Final = "policy_error"
TIMEOUT: Final = "timeout"
CRASHED: Final = "crashed"
STALLED: Final = "stalled"
INVALID_ACTION: Final = "invalid_action"
ROLLOUT_FAILED: Final = "rollout_failed"

SEARCH_CAUSES: Final[tuple[EpisodeCause, ...]] = (POLICY_FINISHED, STEP_BUDGET)
"""Causes of a search that stopped short (it gave up, or ran into its cap): going on
helps, and so does a stronger search (prerequisites, tunnelling, patience). In the order
the offline backend tries their revisions."""

FAULT_CAUSES: Final[tuple[EpisodeCause, ...]] = (CRASHED, STALLED)
"""Causes of a version that took down the process running it (an environment actor's
runner): every episode of its batch fails, the version counts as failed, and a split
rollout stops its other parts (:func:`method.split.rollout_split`)."""

CODE_FAULTS: Final = frozenset(
    {
        "syntax", "forbidden", "exception", "timeout", "memory", "recursion",
        "invalid_action", "output_limit", "policy_error", "policy_unusable",
        CRASHED, STALLED,
    }
)  # fmt: skip
"""Causes that say the code itself is broken, whatever the world: the sandbox stopped
it, it raised, it could not be loaded, or it took down its process. A version whose
every reached episode ended in one of these is no behaviour to keep over one that ran
(:func:`method.paired.faulted`)."""

NOT_REACHED: Final = "not_reached"
"""Prefix of the cause the critic gives a sub-action that never got its turn."""


def not_reached(cause: str) -> str:
    """The cause of a sub-action that never ran because ``cause`` ended the episode first."""
    return f"{NOT_REACHED}:{cause}"


def cause_kind(cause: str) -> str:
    """A cause without what follows its colon: ``not_reached:episode_done`` → ``not_reached``."""
    return cause.split(":", 1)[0]
