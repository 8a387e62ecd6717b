"""Test doubles for code that uses the sandbox (in the spirit of `trio.testing`)."""

from __future__ import annotations

from collections.abc import Iterator

# A few of Crafter's action names: enough for policies in tests.
TINY_ACTIONS = frozenset(
    {"noop", "move_left", "move_right", "move_up", "move_down", "do", "place_table"}
)


class TinySkills:
    """A stand-in for the skill API: public query methods, a generator skill, and the
    private world state and public data attribute a real one may carry (which agent code
    must not reach)."""

    def __init__(self) -> None:
        self._world = {"secret": "world state", "player_health": 9}
        self.world_handle = self._world  # public data attribute: must stay hidden
        self._inventory = {"wood": 2, "stone": 0}

    def inventory(self) -> dict[str, int]:
        return self._inventory  # the live dict: the sandbox must hand out a copy

    def nearest(self, kind: str) -> tuple[int, int] | None:
        return (3, 4) if kind == "tree" else None

    def view(self) -> list[list[str]]:
        return [["grass"] * 9 for _ in range(7)]

    def collect(self, kind: str, count: int) -> Iterator[str]:
        for _ in range(count):
            yield "move_left"
            yield "do"

    def _teleport(self) -> None:  # private: must not be reachable
        self._world["player_health"] = 0
