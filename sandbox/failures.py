"""Failures of sandboxed code, as values.

Everything that can go wrong with agent code ends as a `Failure`: the driver never lets an
agent's exception, hang or violation escape into the actor.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import get_args

# Rollouts carry these causes to the critic, so the vocabulary (messages/) owns them.
from messages.causes import SandboxCause as Cause

CAUSES: frozenset[str] = frozenset(get_args(Cause))

# Details are shipped in rollout messages and read by an LLM critic: a few lines is plenty,
# and an agent must not be able to blow up a message with `raise ValueError("x" * 10**6)`.
MAX_DETAIL_CHARS = 500
# Frames kept from a traceback (innermost ones): enough to see a helper call chain.
MAX_TRACEBACK_FRAMES = 8


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    """Why a piece of agent code failed."""

    cause: Cause
    """One of `CAUSES`."""
    detail: str
    """Human/LLM-readable explanation, at most `MAX_DETAIL_CHARS`."""
    line: int | None = None
    """Line in the agent's source where it happened, when known."""
    traceback: str = ""
    """For `exception`: the traceback restricted to the agent's own frames."""


class SandboxError(Exception):
    """Agent code refused before or while loading (`compile_code`, `load`)."""

    def __init__(self, cause: Cause, detail: str, line: int | None = None, tb: str = ""):
        super().__init__(f"{cause}: {detail}" + (f" (line {line})" if line else ""))
        self.cause = cause
        self.detail = clip(detail)
        self.line = line
        self.traceback = tb

    @property
    def failure(self) -> Failure:
        return Failure(self.cause, self.detail, self.line, self.traceback)


def clip(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """`text` cut to `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more chars]"


def describe(exc: BaseException) -> str:
    """`ValueError: message`, clipped; never calls more than `str()` on the exception."""
    try:
        message = str(exc)
    except Exception:  # an exception whose __str__ fails is still an exception
        message = "<unprintable>"
    name = type(exc).__name__
    return clip(f"{name}: {message}" if message else name)


def agent_frames(tb: types.TracebackType | None, filename: str) -> list[tuple[int, str]]:
    """(line, function) of each traceback frame that runs the agent's code, outermost first."""
    frames = []
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == filename:
            frames.append((tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    return frames


def agent_line_of_caller(filename: str) -> int | None:
    """Line of the innermost agent frame on the current stack (used by guards)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == filename:
            return frame.f_lineno
        frame = frame.f_back
    return None


def format_agent_traceback(
    exc: BaseException, filename: str, source_lines: list[str]
) -> tuple[str, int | None]:
    """A traceback naming only the agent's lines (no host paths), and the innermost line."""
    frames = agent_frames(exc.__traceback__, filename)[-MAX_TRACEBACK_FRAMES:]
    out = ["Traceback (agent code, most recent call last):"]
    for lineno, func in frames:
        text = source_lines[lineno - 1].strip() if 0 < lineno <= len(source_lines) else ""
        out.append(f"  line {lineno}, in {func}\n    {clip(text, 120)}")
    out.append(describe(exc))
    line = frames[-1][0] if frames else None
    return "\n".join(out), line
