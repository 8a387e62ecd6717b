"""Minetest, the 3-D voxel world, behind :class:`~worlds.world.World` (see ``world.py``)."""

from worlds.minetest.world import (
    CHAIN,
    INSTALL_COMMAND,
    GameRules,
    MinetestError,
    MinetestWorld,
    NodeRules,
    Recipe,
    VoxelObservation,
    minetest_missing,
)

__all__ = [
    "CHAIN",
    "INSTALL_COMMAND",
    "GameRules",
    "MinetestError",
    "MinetestWorld",
    "NodeRules",
    "Recipe",
    "VoxelObservation",
    "minetest_missing",
]
