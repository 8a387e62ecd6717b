"""What a critic reads about an episode: glimpses of what the player knew, and the trace
of top-level skill calls (each a :class:`~messages.rollout.Segment`)."""

from __future__ import annotations

import reprlib
from typing import Any

from messages.rollout import Glimpse, Segment
from skills.skills import Skills

# Skill calls that make a trace segment (the high-level actions a critic reads about).
TRACED_SKILLS = ("path_to", "approach", "face", "explore", "attack", "collect", "place", "make")
# Segments kept per episode: a critic needs the story, not every detail of a long one.
MAX_SEGMENTS = 64


# Skill-call arguments come from policy code, so formatting them must cost the host a
# bounded amount whatever they are: `repr` of `[[123456] * 1500] * 1500` is 12 MB, of a
# tuple nested 100k deep a crash. reprlib walks at most a few levels and items and cuts
# long strings; a label stays a line a critic can read.
class _BoundedRepr(reprlib.Repr):
    """reprlib without its two unbounded paths: `repr_int` formats the whole int first
    (a ValueError past 4300 digits) and types it does not know (bytes, Counter, ...) fall
    back to their full `repr`."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > _MAX_SHOWN_INT_BITS:
            return f"<int of {x.bit_length()} bits>"
        return repr(x)

    def repr_instance(self, x: Any, level: int) -> str:
        if type(x) in (float, complex, bool, type(None)):
            return repr(x)
        size = f" of {len(x)} items" if hasattr(x, "__len__") else ""
        return f"<{type(x).__name__}{size}>"


# 2**128 has 39 digits: as many as `maxlong` shows anyway.
_MAX_SHOWN_INT_BITS = 128
_ARGUMENTS = _BoundedRepr()
_ARGUMENTS.maxlevel = 3  # nesting shown: a position (x, y) inside a list still reads
_ARGUMENTS.maxlist = _ARGUMENTS.maxtuple = _ARGUMENTS.maxset = _ARGUMENTS.maxdict = 6
_ARGUMENTS.maxstring = _ARGUMENTS.maxother = 40  # a material name or a short message
_ARGUMENTS.maxlong = 40  # digits of an int before `...`


def glimpse(skills: Skills) -> Glimpse:
    """What the player knows now, compactly: inventory, vitals, nearby kinds, facing."""
    near: dict[str, int] = {}
    view = skills.view()
    cy, cx = len(view) // 2, len(view[0]) // 2
    for row, line in enumerate(view):
        for col, name in enumerate(line):
            dist = abs(row - cy) + abs(col - cx)
            if (row, col) != (cy, cx) and dist < near.get(name, 99):
                near[name] = dist
    for kind, dx, dy in skills.creatures():
        near[kind] = min(near.get(kind, 99), abs(dx) + abs(dy))
    return Glimpse(
        step=skills.steps(),
        inventory={k: v for k, v in skills.inventory().items() if v},
        status=dict(skills.status()),
        near=sorted(near, key=lambda k: (near[k], k)),
        facing=skills.facing_tile(),
    )


class TracingSkills(Skills):
    """The skill API, recording each top-level skill call as a trace segment."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._segments: list[Segment] = []
        self._depth = 0

    def _traced(self, label: str, gen: Any) -> Any:
        if self._depth:
            return (yield from gen)  # a skill inside a skill: part of the outer segment
        before = glimpse(self)
        self._depth += 1
        try:
            result = yield from gen
        finally:
            self._depth -= 1
            if len(self._segments) < MAX_SEGMENTS:
                after = glimpse(self)
                self._segments.append(Segment(label, after.step - before.step, before, after))
        return result

    # Host-side hooks (agent code never reaches ``_`` names) for a segment that no skill
    # call makes: a learned sub-policy's run in a composed episode.

    def _open_segment(self) -> tuple[int, Glimpse]:
        return len(self._segments), glimpse(self)

    def _close_segment(self, opened: tuple[int, Glimpse], label: str) -> None:
        index, before = opened
        if len(self._segments) < MAX_SEGMENTS:
            after = glimpse(self)
            self._segments.insert(index, Segment(label, after.step - before.step, before, after))


def _traced_method(name: str) -> Any:
    base = getattr(Skills, name)

    def method(self: TracingSkills, *args: Any, **kwargs: Any) -> Any:
        shown = ", ".join(
            [_ARGUMENTS.repr(a) for a in args]
            + [f"{k}={_ARGUMENTS.repr(v)}" for k, v in kwargs.items()]
        )
        return self._traced(f"{name}({shown})", base(self, *args, **kwargs))

    method.__name__ = name
    method.__doc__ = base.__doc__
    return method


for _name in TRACED_SKILLS:
    setattr(TracingSkills, _name, _traced_method(_name))
