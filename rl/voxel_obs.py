"""What a learned sub-action sees in the 3-D world: :class:`~rl.rl_env.SubtaskEnv`'s
observation parts for Minetest.

Crafter's parts are one-hot tiles of a 9×7 view; a Minetest window is 17×17 columns of
8 levels over hundreds of node names, so the parts that describe the land count kinds of
node instead, by direction around the player:

``view``       the voxel window now: for each kind of node (:data:`VIEW_KINDS`) and each
               eighth of the compass around the player, how many of the window's columns
               hold one (÷ :data:`VIEW_COLUMNS_SCALE`, clipped); 9 × 8 = 72 floats.
``map``        the columns the player has seen this episode (every window so far, as
               :class:`~rl.voxel_options.ColumnMap` keeps them): per kind of
               :data:`~rl.voxel_options.CATEGORIES` and for all seen, per eighth of the
               compass (log-scaled), then the height over where the episode (or the
               attached stage) began; 7 × 8 + 1 = 57 floats.
``inventory``  counts of :data:`INVENTORY`, log-scaled to 99 (a stack).
``status``     health ÷ 20, breath ÷ 10.

``facing`` and ``daylight`` are the same as in Crafter. Everything comes from the
observations the player had, never the map it did not see.
"""

from __future__ import annotations

import math

import numpy as np

from rl.voxel_options import CATEGORIES, SECTORS, ColumnMap
from worlds.minetest.world import CHAIN, STAND_INS, VoxelObservation

INVENTORY: tuple[str, ...] = (
    *CHAIN,
    *(alt for alts in STAND_INS.values() for alt in alts),
    "default:dirt",
)
"""Items the ``inventory`` part counts: the chain's, the snowy land's trunk and planks,
and the dirt the body builds with."""
STATUS = ("health", "breath")
STATUS_MAX = {"health": 20.0, "breath": 10.0}
"""minetest_game's maxima (``hp_max``, ``breath_max``)."""
STACK = 99
"""Counts are log-scaled to a full stack."""
VIEW_KINDS: dict[str, tuple[str, ...]] = {
    **CATEGORIES,
    "stone": ("default:stone", "default:cobble", "default:desert_stone", "default:mossycobble"),
    "ore": tuple(
        f"default:stone_with_{ore}" for ore in ("coal", "iron", "copper", "tin", "gold", "diamond")
    ),
    "lava": ("default:lava_source", "default:lava_flowing"),
}
"""Kinds of node the ``view`` part counts: the map's, and stone, ores and lava."""
VIEW_COLUMNS_SCALE = 40.0
"""A window of 17 × 17 columns has about 36 in each eighth of the compass."""
HEIGHT_SCALE = 40.0
"""The height over the start maps ±this many nodes onto [0, 1]."""

SIZES = {
    "view": len(VIEW_KINDS) * SECTORS,
    "map": (len(CATEGORIES) + 1) * SECTORS + 1,
    "inventory": len(INVENTORY),
    "status": len(STATUS),
}
"""The Minetest parts' lengths (``facing``, ``daylight``: as in Crafter)."""


def feet(obs: VoxelObservation) -> tuple[int, int, int]:
    """Where the feet are, as the skills say it: (x east, y altitude, z north)."""
    return (obs.position[0], obs.altitude, -obs.position[1])


def _sector_of(dx: np.ndarray, dz: np.ndarray) -> np.ndarray:
    angle = np.arctan2(dx, dz)  # 0 north, +π/2 east, as ColumnMap's sectors
    return np.round(angle / (2 * math.pi / SECTORS)).astype(int) % SECTORS


class VoxelParts:
    """The Minetest parts of one env: the remembered columns of the episode under way
    (:meth:`begin` at a reset or an attach, :meth:`observe` each step) and the encoding."""

    def __init__(self) -> None:
        self._columns = ColumnMap()
        self._start_y = 0
        self._names: tuple[str, ...] = ()
        self._kind_of = np.zeros(0, np.int8)
        self._sectors: np.ndarray | None = None

    def begin(self, obs: VoxelObservation) -> None:
        self._columns = ColumnMap()
        self._start_y = obs.altitude
        self.observe(obs)

    def observe(self, obs: VoxelObservation) -> None:
        self._columns.add(obs, feet(obs))

    def encode(self, part: str, obs: VoxelObservation) -> np.ndarray:
        if part == "view":
            return self._view(obs)
        if part == "map":
            counts = np.log1p(self._columns.sector_counts(feet(obs))) / 8.0
            height = (np.clip((obs.altitude - self._start_y) / HEIGHT_SCALE, -1, 1) + 1) / 2
            return np.clip(np.append(counts.reshape(-1), height), 0, 1).astype(np.float32)
        if part == "inventory":
            counts = np.array([obs.inventory.get(k, 0) for k in INVENTORY], np.float32)
            return np.clip(np.log1p(counts) / math.log1p(STACK), 0, 1).astype(np.float32)
        if part == "status":
            values = [obs.status.get(k, 0.0) / STATUS_MAX[k] for k in STATUS]
            return np.clip(np.array(values, np.float32), 0, 1)
        raise KeyError(part)

    def _view(self, obs: VoxelObservation) -> np.ndarray:
        if obs.names is not self._names:  # the server's name table grows as nodes appear
            self._names = obs.names
            self._kind_of = np.full(len(obs.names), -1, np.int8)
            for i, names in enumerate(VIEW_KINDS.values()):
                for j, name in enumerate(obs.names):
                    if name in names:
                        self._kind_of[j] = i
        _, rows, cols = obs.voxels.shape
        if self._sectors is None or self._sectors.shape != (rows, cols):
            dz, dx = np.mgrid[rows // 2 : -(rows - rows // 2) : -1, -(cols // 2) : cols - cols // 2]
            self._sectors = np.where((dx == 0) & (dz == 0), -1, _sector_of(dx, dz))
        kinds = self._kind_of[obs.voxels]  # (levels, rows, cols)
        out = np.zeros((len(VIEW_KINDS), SECTORS), np.float32)
        for i in range(len(VIEW_KINDS)):
            column = (kinds == i).any(axis=0) & (self._sectors >= 0)
            out[i] = np.bincount(self._sectors[column], minlength=SECTORS)[:SECTORS]
        return np.clip(out.reshape(-1) / VIEW_COLUMNS_SCALE, 0, 1).astype(np.float32)
