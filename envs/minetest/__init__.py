"""Minetest, the 3-D voxel world, behind :class:`~envs.world.World` (see ``world.py``)."""

from envs.minetest.world import (
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
