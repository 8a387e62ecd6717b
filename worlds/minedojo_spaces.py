"""MineDojo's documented observation and action spaces, as gymnasium spaces.

MineDojo (docs.minedojo.org, "Observation Space" / "Action Space") cannot run here: it
needs a JDK and a Minecraft download. These spaces let the adapter and its tests check
shapes and bounds against what MineDojo documents, and :class:`MineDojoStandIn` produces
observations in them.

Action space: ``MultiDiscrete([3, 3, 4, 25, 25, 8, 244, 36])``

====  =============================================================================
dim   meaning
====  =============================================================================
0     0 noop, 1 forward, 2 back
1     0 noop, 1 strafe left, 2 strafe right
2     0 noop, 1 jump, 2 sneak, 3 sprint
3     camera pitch delta, bin i → i·15° − 180° (12 = no change)
4     camera yaw delta, same bins
5     functional: 0 noop, 1 use, 2 drop, 3 attack, 4 craft, 5 equip, 6 place, 7 destroy
6     argument of craft: index into MineDojo's 244 craftable/smeltable items
7     argument of equip/place/destroy: inventory slot 0–35
====  =============================================================================

Observation keys used here (others MineDojo offers — masks, delta_inv, damage_source —
are omitted): ``rgb``, ``inventory``, ``equipment``, ``voxels``, ``life_stats``,
``location_stats``, ``nearby_tools``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

N_INVENTORY_SLOTS = 36
"""Main inventory slots (hotbar + storage); armour and off-hand are 'equipment'."""
N_EQUIPMENT_SLOTS = 6
"""main hand, feet, legs, chest, head, off hand."""
N_CRAFT_SMELT_ITEMS = 244
"""Items the craft action can name (hand, table and furnace recipes together)."""
CAMERA_INTERVAL = 15
"""Degrees per camera bin: MineDojo's default discretisation."""
CAMERA_BINS = 360 // CAMERA_INTERVAL + 1
"""25 bins from −180° to +180°; the middle bin is no movement."""
CAMERA_NOOP = CAMERA_BINS // 2
ACTION_NVEC = (3, 3, 4, CAMERA_BINS, CAMERA_BINS, 8, N_CRAFT_SMELT_ITEMS, N_INVENTORY_SLOTS)
NOOP_ACTION = (0, 0, 0, CAMERA_NOOP, CAMERA_NOOP, 0, 0, 0)
FUNCTIONAL_ACTIONS = ("no_op", "use", "drop", "attack", "craft", "equip", "place", "destroy")
VOXEL_SHAPE = (3, 3, 3)
"""The default voxel window: the 3×3×3 blocks around the agent, indexed [x, y, z]."""
MAX_LIFE = 20.0  # ten hearts
MAX_FOOD = 20.0  # ten drumsticks; saturation is capped by it
MAX_ARMOR = 20.0  # ten armour points
MAX_OXYGEN = 300.0  # ticks of breath under water


class TextArray(spaces.Space):
    """An array of strings of a fixed shape (MineDojo returns block/item names so)."""

    def __init__(self, shape: Sequence[int]) -> None:
        super().__init__(shape=tuple(shape), dtype=object)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        return np.full(self.shape, "air", dtype=object)

    def contains(self, x: Any) -> bool:
        arr = np.asarray(x)
        if arr.shape != self.shape:
            return False
        return all(isinstance(v, str) for v in arr.ravel().tolist())

    def __repr__(self) -> str:
        return f"TextArray({self.shape})"


def _box(low: float, high: float, shape: tuple[int, ...] = (1,), dtype: Any = np.float32):
    return spaces.Box(low=low, high=high, shape=shape, dtype=dtype)


def _slots(n: int) -> spaces.Dict:
    return spaces.Dict(
        {
            "name": TextArray((n,)),
            # Variant (damage value) indices go up to 120 (spawn eggs).
            "variant": spaces.MultiDiscrete([121] * n),
            "quantity": _box(0, 64, (n,)),  # a stack holds at most 64
            "max_durability": _box(-1, np.inf, (n,)),  # -1: the item has none
            "cur_durability": _box(-1, np.inf, (n,)),
        }
    )


def action_space() -> spaces.MultiDiscrete:
    """MineDojo's 8-dimension MultiDiscrete action space."""
    return spaces.MultiDiscrete(np.array(ACTION_NVEC, dtype=np.int64))


def observation_space(
    image_size: tuple[int, int] = (160, 256), voxel_shape: tuple[int, int, int] = VOXEL_SHAPE
) -> spaces.Dict:
    """MineDojo's observation dict for ``image_size`` = (height, width)."""
    height, width = image_size
    voxel_bool = {
        key: spaces.MultiBinary(list(voxel_shape))
        for key in (
            "is_collidable",
            "is_tool_not_required",
            "blocks_movement",
            "is_liquid",
            "is_solid",
            "can_burn",
            "blocks_light",
        )
    }
    return spaces.Dict(
        {
            "rgb": _box(0, 255, (3, height, width), np.uint8),
            "inventory": _slots(N_INVENTORY_SLOTS),
            "equipment": _slots(N_EQUIPMENT_SLOTS),
            "voxels": spaces.Dict(
                {
                    "block_name": TextArray(voxel_shape),
                    "block_meta": _box(0, 120, voxel_shape, np.int64),
                    "cos_look_vec_angle": _box(-1, 1, voxel_shape),
                    **voxel_bool,
                }
            ),
            "life_stats": spaces.Dict(
                {
                    "life": _box(0, MAX_LIFE),
                    "armor": _box(0, MAX_ARMOR),
                    "food": _box(0, MAX_FOOD),
                    "saturation": _box(0, MAX_FOOD),
                    "xp": _box(0, np.inf),
                    "oxygen": _box(0, MAX_OXYGEN),
                    "is_sleeping": spaces.Discrete(2),
                }
            ),
            "location_stats": spaces.Dict(
                {
                    "pos": _box(-640000.0, 640000.0, (3,)),  # x, y (up), z
                    "pitch": _box(-180.0, 180.0),
                    "yaw": _box(-180.0, 180.0),  # 0 south (+z), 90 west, ±180 north
                    "biome_id": _box(0, 167, (), np.int64),
                    "rainfall": _box(0.0, 1.0),
                    "temperature": _box(0.0, 1.0),
                    "is_raining": _box(0, 1, (), np.int64),
                    "can_see_sky": _box(0, 1, (), np.int64),
                    "light_level": _box(0.0, 15.0),
                    "sky_light_level": _box(0.0, 1.0),
                    "sun_brightness": _box(0.0, 1.0),
                    "sea_level": _box(0.0, 255.0),
                }
            ),
            "nearby_tools": spaces.Dict(
                {"table": spaces.Discrete(2), "furnace": spaces.Discrete(2)}
            ),
        }
    )


def camera_bin(delta_degrees: float) -> int:
    """The camera bin for a pitch/yaw change, e.g. 0° → 12, −90° → 6, +90° → 18."""
    index = round((delta_degrees + 180) / CAMERA_INTERVAL)
    return int(min(max(index, 0), CAMERA_BINS - 1))
