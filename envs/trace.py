"""What a critic reads about an episode: glimpses of what the player knew, and the trace
of top-level skill calls (each a :class:`~messages.rollout.Segment`)."""

from __future__ import annotations

from typing import Any

from envs.skills import Skills
from messages.rollout import Glimpse, Segment

# Skill calls that make a trace segment (the high-level actions a critic reads about).
TRACED_SKILLS = ("path_to", "approach", "face", "explore", "attack", "collect", "place", "make")
# Segments kept per episode: a critic needs the story, not every detail of a long one.
MAX_SEGMENTS = 64


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
        shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        return self._traced(f"{name}({shown})", base(self, *args, **kwargs))

    method.__name__ = name
    method.__doc__ = base.__doc__
    return method


for _name in TRACED_SKILLS:
    setattr(TracingSkills, _name, _traced_method(_name))
