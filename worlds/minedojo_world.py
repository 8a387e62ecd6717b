"""MineDojo behind the :class:`~worlds.world.World` interface (optional backend).

:class:`MineDojoWorld` maps MineDojo's observation dict onto an
:class:`~worlds.world.Observation` and our primitive action names onto its MultiDiscrete
action vectors (see :mod:`worlds.minedojo_spaces`):

- local view: a top-down 3×3 picture from the 3×3×3 voxels — for each column around the
  agent, the block at foot level, or the ground block under it when that is air;
- inventory: quantities summed by item name (names use underscores: crafting_table);
- status: health (``life``), food, oxygen, armor from ``life_stats``;
- facing: the compass direction nearest the camera yaw; position: blocks walked in x
  (east) and z (south) since the reset; daylight: ``sun_brightness``.

``minedojo`` itself is imported only when a real environment is made, and a clear error
names the extra to install. :class:`MineDojoStandIn` is a *fake*: a tiny flat block
world that emits observations in MineDojo's documented spaces, so the adapter can be
tested here. It reproduces the interfaces, not the game.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from worlds import minedojo_spaces as mds
from worlds.world import Observation, StepResult, UnknownActionError, freeze_view

INSTALL_HINT = "MineDojo is not installed: pip install .[minedojo] (it also needs a JDK 8)"

# Primitive action → (dimension, value) changes from the no-op vector.
BASIC_ACTIONS: dict[str, tuple[tuple[int, int], ...]] = {
    "noop": (),
    "forward": ((0, 1),),
    "back": ((0, 2),),
    "left": ((1, 1),),
    "right": ((1, 2),),
    "jump": ((2, 1),),
    "jump_forward": ((0, 1), (2, 1)),
    "sneak": ((2, 2),),
    "sprint": ((2, 3),),
    # Quarter turns keep the agent on the grid directions the local view is drawn in.
    "turn_left": ((4, mds.camera_bin(-90)),),
    "turn_right": ((4, mds.camera_bin(90)),),
    "look_up": ((3, mds.camera_bin(-mds.CAMERA_INTERVAL)),),
    "look_down": ((3, mds.camera_bin(mds.CAMERA_INTERVAL)),),
    "use": ((5, 1),),
    "drop": ((5, 2),),
    "attack": ((5, 3),),
}
SLOT_ACTIONS = {"equip": 5, "place": 6, "destroy": 7}
"""Functional codes of the actions whose argument is an inventory slot."""
CRAFT_CODE = 4
AIR = "air"


def make_minedojo_env(**kwargs: Any) -> Any:
    """``minedojo.make(**kwargs)``, with an install hint when MineDojo is missing."""
    try:
        import minedojo
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return minedojo.make(**kwargs)


def minedojo_craft_items() -> tuple[str, ...]:
    """MineDojo's own table of craftable/smeltable item names (the craft argument)."""
    try:
        from minedojo.sim.mc_meta import mc
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return tuple(mc.ALL_CRAFT_SMELT_ITEMS)


def _item_key(name: str) -> str:
    # MineDojo reports inventory names with spaces ("crafting table") but takes
    # underscores in actions; we use the underscore form everywhere.
    return str(name).replace(" ", "_")


class MineDojoWorld:
    """A MineDojo env (or :class:`MineDojoStandIn`) as a :class:`~worlds.world.World`.

    Args:
        env: an env with MineDojo's ``reset()/step(vector)`` API; None makes a real one
            with ``make_kwargs`` (needs MineDojo installed).
        craft_items: the craft argument table; defaults to ``env.craft_items`` or
            MineDojo's own list.
    """

    def __init__(
        self, env: Any = None, craft_items: Sequence[str] | None = None, **make_kwargs: Any
    ) -> None:
        self._env = env if env is not None else make_minedojo_env(**make_kwargs)
        if craft_items is None:
            craft_items = getattr(self._env, "craft_items", None) or minedojo_craft_items()
        self._craft_items = tuple(craft_items)
        if len(self._craft_items) != mds.N_CRAFT_SMELT_ITEMS:
            raise ValueError(
                f"craft table has {len(self._craft_items)} items, "
                f"MineDojo's action space expects {mds.N_CRAFT_SMELT_ITEMS}"
            )
        self._craft_index = {_item_key(n): i for i, n in enumerate(self._craft_items)}
        names = list(BASIC_ACTIONS)
        names += [f"craft_{_item_key(n)}" for n in self._craft_items]
        for verb in SLOT_ACTIONS:
            names += [f"{verb}_{_item_key(n)}" for n in self._craft_items]
        self._action_names = tuple(dict.fromkeys(names))
        self._action_set = frozenset(self._action_names)
        self._names: list[str] = ["void"]
        self._ids: dict[str, int] = {"void": 0}
        self._start = (0, 0)
        self._last: Mapping[str, Any] | None = None

    @property
    def action_names(self) -> Sequence[str]:
        return self._action_names

    @property
    def achievement_names(self) -> Sequence[str]:
        return ()

    def reset(self, seed: int | None = None) -> Observation:
        if seed is not None and hasattr(self._env, "seed"):
            self._env.seed(seed)
        raw = self._env.reset()
        pos = raw["location_stats"]["pos"]
        self._start = (math.floor(pos[0]), math.floor(pos[2]))
        self._last = raw
        return self._observe(raw)

    def step(self, action: str) -> StepResult:
        if action not in self._action_set:
            raise UnknownActionError(action, self._action_names)
        raw, reward, done, native_info = self._env.step(self.to_vector(action))
        self._last = raw
        info = {
            "achievements": (),
            "discount": 0.0 if float(raw["life_stats"]["life"][0]) <= 0 else 1.0,
        }
        return self._observe(raw), float(reward), bool(done), info

    def render(self) -> np.ndarray:
        """The last RGB frame as (H, W, 3); MineDojo sends it channels-first."""
        if self._last is None:
            raise RuntimeError("call reset() before render()")
        return np.transpose(np.asarray(self._last["rgb"]), (1, 2, 0)).copy()

    def to_vector(self, action: str) -> np.ndarray:
        """The MultiDiscrete vector for a primitive action name."""
        vector = np.array(mds.NOOP_ACTION, dtype=np.int64)
        if action in BASIC_ACTIONS:
            for dim, value in BASIC_ACTIONS[action]:
                vector[dim] = value
            return vector
        verb, _, item = action.partition("_")
        if verb == "craft":
            vector[5], vector[6] = CRAFT_CODE, self._craft_index[item]
            return vector
        if verb in SLOT_ACTIONS:
            slot = self._slot_of(item)
            if slot is None:
                # Like Crafter placing what one lacks: nothing happens.
                return vector
            vector[5], vector[7] = SLOT_ACTIONS[verb], slot
            return vector
        raise UnknownActionError(action, self._action_names)

    def _slot_of(self, item: str) -> int | None:
        if self._last is None:
            return None
        inventory = self._last["inventory"]
        for slot, (name, qty) in enumerate(
            zip(inventory["name"], inventory["quantity"], strict=True)
        ):
            if _item_key(name) == item and qty > 0:
                return slot
        return None

    def _tile_id(self, name: str) -> int:
        if name not in self._ids:
            self._ids[name] = len(self._names)
            self._names.append(name)
        return self._ids[name]

    def _observe(self, raw: Mapping[str, Any]) -> Observation:
        blocks = np.asarray(raw["voxels"]["block_name"], dtype=object)  # [x, y, z]
        size_x, size_y, size_z = blocks.shape
        feet, ground = size_y // 2, size_y // 2 - 1
        view = np.zeros((size_z, size_x), np.int16)
        for x in range(size_x):
            for z in range(size_z):
                name = _item_key(blocks[x, feet, z])
                if name == AIR and ground >= 0:
                    name = _item_key(blocks[x, ground, z])
                view[z, x] = self._tile_id(name)
        inventory: dict[str, int] = {}
        for name, qty in zip(raw["inventory"]["name"], raw["inventory"]["quantity"], strict=True):
            key = _item_key(name)
            if key != AIR:
                inventory[key] = inventory.get(key, 0) + int(qty)
        life = raw["life_stats"]
        loc = raw["location_stats"]
        yaw = math.radians(float(loc["yaw"][0]))
        # Minecraft yaw: 0 faces south (+z), 90 west (−x); dx = −sin, dz = cos.
        facing = (int(round(-math.sin(yaw))), int(round(math.cos(yaw))))
        pos = loc["pos"]
        return Observation(
            view=freeze_view(view),
            creatures=(),  # MineDojo's default observation lists no entities
            inventory=inventory,
            status={
                "health": float(life["life"][0]),
                "food": float(life["food"][0]),
                "oxygen": float(life["oxygen"][0]),
                "armor": float(life["armor"][0]),
            },
            facing=facing,
            daylight=float(loc["sun_brightness"][0]),
            position=(math.floor(pos[0]) - self._start[0], math.floor(pos[2]) - self._start[1]),
            names=tuple(self._names),
            sleeping=bool(life["is_sleeping"]),
        )


class MineDojoStandIn:
    """A FAKE MineDojo env for tests: documented spaces, toy dynamics, no Minecraft.

    A flat grass field with a few logs (tree trunks) on a grid; ``forward`` moves one
    block the way the camera yaw points unless a log is in the way, quarter camera turns
    change the yaw, ``attack`` on a log in front takes it into the inventory, and
    crafting ``planks`` turns a log into four planks. Nothing else of Minecraft is here.
    """

    def __init__(self, logs: Sequence[tuple[int, int]] = ((0, 2), (3, 0)), size: int = 16):
        # A fake craft table of the documented length: a few real names, then fillers.
        real = ("crafting_table", "planks", "stick", "wooden_pickaxe", "furnace")
        self.craft_items = real + tuple(
            f"standin_item_{i}" for i in range(mds.N_CRAFT_SMELT_ITEMS - len(real))
        )
        self.observation_space = mds.observation_space((8, 8))
        self.action_space = mds.action_space()
        self._initial_logs = tuple(logs)
        self._size = size
        self.reset()

    def seed(self, seed: int) -> None:
        """Accepted for API parity; the stand-in world is fixed."""

    def reset(self) -> dict[str, Any]:
        self._logs = set(self._initial_logs)
        self._pos = [0, 0]  # x, z
        self._yaw = 0.0
        self._inventory: list[tuple[str, int]] = [(AIR, 0)] * mds.N_INVENTORY_SLOTS
        return self._obs()

    def step(self, action: Sequence[int]) -> tuple[dict[str, Any], float, bool, dict]:
        action = np.asarray(action, dtype=np.int64)
        if not self.action_space.contains(action):
            raise ValueError(f"action {action.tolist()} is outside {self.action_space}")
        self._yaw = _wrap(self._yaw + (int(action[4]) * mds.CAMERA_INTERVAL - 180))
        dx, dz = self._facing()
        reward = 0.0
        if action[0] in (1, 2):
            sign = 1 if action[0] == 1 else -1
            target = (self._pos[0] + sign * dx, self._pos[1] + sign * dz)
            if target not in self._logs and all(abs(c) < self._size for c in target):
                self._pos = list(target)
        fn = int(action[5])
        front = (self._pos[0] + dx, self._pos[1] + dz)
        if fn == 3 and front in self._logs:
            self._logs.discard(front)
            self._add("log", 1)
            reward = 1.0
        elif fn == CRAFT_CODE and self.craft_items[int(action[6])] == "planks":
            if self._take("log", 1):
                self._add("planks", 4)
        return self._obs(), reward, False, {}

    def _facing(self) -> tuple[int, int]:
        yaw = math.radians(self._yaw)
        return int(round(-math.sin(yaw))), int(round(math.cos(yaw)))

    def _add(self, name: str, qty: int) -> None:
        for i, (slot_name, slot_qty) in enumerate(self._inventory):
            if slot_name == name:
                self._inventory[i] = (name, slot_qty + qty)
                return
        i = next(i for i, (n, _) in enumerate(self._inventory) if n == AIR)
        self._inventory[i] = (name, qty)

    def _take(self, name: str, qty: int) -> bool:
        for i, (slot_name, slot_qty) in enumerate(self._inventory):
            if slot_name == name and slot_qty >= qty:
                left = slot_qty - qty
                self._inventory[i] = (name, left) if left else (AIR, 0)
                return True
        return False

    def _obs(self) -> dict[str, Any]:
        shape = mds.VOXEL_SHAPE
        names = np.full(shape, AIR, dtype=object)
        for i in range(shape[0]):
            for k in range(shape[2]):
                cell = (self._pos[0] + i - 1, self._pos[1] + k - 1)
                names[i, 0, k] = "grass"  # the ground under the feet
                if cell in self._logs:
                    names[i, 1, k] = names[i, 2, k] = "log"
        solid = names != AIR
        zeros = np.zeros(shape, np.int8)

        def slots(entries: Sequence[tuple[str, int]]) -> dict[str, np.ndarray]:
            n = len(entries)
            return {
                "name": np.array([name.replace("_", " ") for name, _ in entries], dtype=object),
                "variant": np.zeros(n, np.int64),
                "quantity": np.array([q for _, q in entries], np.float32),
                "max_durability": np.full(n, -1, np.float32),
                "cur_durability": np.full(n, -1, np.float32),
            }

        one = lambda v: np.array([v], np.float32)  # noqa: E731 - MineDojo's (1,) stats
        return {
            "rgb": np.zeros((3, 8, 8), np.uint8),
            "inventory": slots(self._inventory),
            "equipment": slots([(AIR, 0)] * mds.N_EQUIPMENT_SLOTS),
            "voxels": {
                "block_name": names,
                "block_meta": np.zeros(shape, np.int64),
                "cos_look_vec_angle": np.zeros(shape, np.float32),
                "is_collidable": solid.astype(np.int8),
                "is_tool_not_required": solid.astype(np.int8),
                "blocks_movement": solid.astype(np.int8),
                "is_liquid": zeros,
                "is_solid": solid.astype(np.int8),
                "can_burn": zeros,
                "blocks_light": solid.astype(np.int8),
            },
            "life_stats": {
                "life": one(20),
                "armor": one(0),
                "food": one(20),
                "saturation": one(5),
                "xp": one(0),
                "oxygen": one(300),
                "is_sleeping": 0,
            },
            "location_stats": {
                "pos": np.array([self._pos[0] + 0.5, 64.0, self._pos[1] + 0.5], np.float32),
                "pitch": one(0),
                "yaw": one(self._yaw),
                "biome_id": np.array(1, np.int64),
                "rainfall": one(0.4),
                "temperature": one(0.8),
                "is_raining": np.array(0, np.int64),
                "can_see_sky": np.array(1, np.int64),
                "light_level": one(15),
                "sky_light_level": one(1),
                "sun_brightness": one(0.94),
                "sea_level": one(63),
            },
            "nearby_tools": {"table": 0, "furnace": 0},
        }


def _wrap(degrees: float) -> float:
    """An angle in (−180, 180]."""
    wrapped = (degrees + 180.0) % 360.0 - 180.0
    return 180.0 if wrapped == -180.0 else wrapped
