"""The backend-neutral world interface: what a player sees, and how it acts.

A :class:`World` is a game behind a narrow door. Agents, skills and learners see only
:class:`Observation` records — the local view around the player, the creatures in it,
inventory, status — never the full map. Each backend (``crafter_world``,
``minedojo_world``) turns its game's native observation into this record and its
primitive action names into the game's native actions.

Coordinates: ``dx`` grows to the right (east), ``dy`` grows downwards (south), as on
the screen. ``view[row][col]`` holds the tile at ``(dx, dy) = (col - cx, row - cy)``
where ``(cx, cy)`` is the view's centre, the player's own tile.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

VOID = "void"
"""Name of tile id 0: outside the world's edge (Crafter draws it as its 'unknown' texture)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Observation:
    """world → agent: exactly what the player perceives after a reset or a step."""

    view: np.ndarray
    """Tile ids of the local view, shape (rows, cols), player at the centre; read-only."""
    creatures: tuple[tuple[str, int, int], ...]
    """(kind, dx, dy) of every creature/object in the view, the player excluded."""
    inventory: Mapping[str, int]
    """Item name → count, items with count 0 included."""
    status: Mapping[str, float]
    """Vital statistics: Crafter has health, food, drink, energy (0–9)."""
    facing: tuple[int, int]
    """(dx, dy) unit vector the player faces; the target of 'do'/'place' actions."""
    daylight: float
    """0 (night) … 1 (day); the darkness the player sees."""
    position: tuple[int, int]
    """Player's (dx, dy) from where the episode started (derivable from its own moves)."""
    names: tuple[str, ...]
    """Tile id → tile name for :attr:`view`."""
    sleeping: bool = False
    """Whether the player is asleep (it then ignores actions until it wakes up)."""
    ripe: tuple[tuple[int, int], ...] = ()
    """(dx, dy) of every ripe plant in the view: Crafter draws a ripe plant apart from a
    growing one, and only a ripe one can be eaten."""
    missiles: tuple[tuple[int, int, int, int], ...] = ()
    """(dx, dy, fx, fy) of every missile in the view and the way it flies (Crafter draws
    an arrow pointing along its flight): on the next step it enters (dx+fx, dy+fy)
    and hurts whoever stands there."""

    @property
    def center(self) -> tuple[int, int]:
        """(col, row) index of the player's own tile in :attr:`view`."""
        rows, cols = self.view.shape
        return cols // 2, rows // 2

    def tile(self, dx: int, dy: int) -> str | None:
        """Name of the tile at offset (dx, dy) from the player, None outside the view."""
        cx, cy = self.center
        row, col = cy + dy, cx + dx
        rows, cols = self.view.shape
        if 0 <= row < rows and 0 <= col < cols:
            return self.names[int(self.view[row, col])]
        return None

    def creature_at(self, dx: int, dy: int) -> str | None:
        """Kind of the creature at offset (dx, dy), None if there is none in view."""
        for kind, cdx, cdy in self.creatures:
            if cdx == dx and cdy == dy:
                return kind
        return None


def freeze_view(view: np.ndarray) -> np.ndarray:
    """Return ``view`` marked read-only so an Observation cannot be mutated through it."""
    view.flags.writeable = False
    return view


StepResult = tuple[Observation, float, bool, dict[str, Any]]
"""(observation, reward, done, info); info holds only what the player could know."""


@runtime_checkable
class World(Protocol):
    """A game the agent plays through primitive action names.

    ``step``'s info dict carries ``achievements``: a tuple of achievement names whose
    counter went up this step (empty most steps), ``discount`` (0.0 on death) and
    nothing derived from the hidden map.
    """

    @property
    def action_names(self) -> Sequence[str]:
        """Every primitive action name ``step`` accepts."""
        ...

    @property
    def achievement_names(self) -> Sequence[str]:
        """Every achievement the game can report."""
        ...

    def reset(self, seed: int | None = None) -> Observation:
        """Start a new episode; the same seed gives the same world."""
        ...

    def step(self, action: str) -> StepResult:
        """Apply one primitive action; raises ValueError for an unknown name."""
        ...

    def render(self) -> np.ndarray:
        """RGB pixels (H, W, 3) of what the player sees now; slow, only on request."""
        ...


class UnknownActionError(ValueError):
    """``World.step`` got an action name that is not in ``World.action_names``."""

    def __init__(self, action: object, valid: Sequence[str]) -> None:
        shown = ", ".join(list(valid)[:20])
        more = "" if len(valid) <= 20 else f", … ({len(valid)} in all)"
        super().__init__(f"unknown action {action!r}; valid actions: {shown}{more}")
        self.action = action
