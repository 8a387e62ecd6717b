"""Minetest behind the :class:`~worlds.world.World` interface: a 3-D voxel world.

Each :class:`MinetestWorld` owns one headless ``minetestserver`` (Debian's
``minetest-server`` with ``minetest-data``'s minetest_game) on free loopback ports, its
world made from the seed in a temporary folder (mapgen v6, the map kept in memory,
``time_speed = 0``). Our trusted Lua mod (``mod/rlgpt_agent``, copied into the world)
is the agent's body: a position and a facing on the node grid that digs, places, crafts
and smelts by the game's own rules. It connects back to this object over a loopback TCP
socket and serves many requests per server step.

What the agent gets (:class:`VoxelObservation`) is what a player has: the voxel window
around it (node names as ids, never the whole map), a top-down 2-D view of it for code
written against the 2-D interface, what it faces, inventory, health and breath, and the
time of day. Coordinates: Minetest's x grows east and z north; the 2-D ``view`` and
``position`` use the screen's convention of :mod:`worlds.world` (dy grows southwards).

Determinism: nothing moves in the world but the agent. No player is connected, so no
block is active (no leaf decay, no node timers, no falling entities); liquids do not flow
(``liquid_update`` is effectively never); the clock moves with steps only; random drops
are drawn from a generator reseeded from the seed and the step; one emerge thread makes
mapchunks in the order the agent's moves ask for them. An episode therefore replays from
its seed and actions.

Lifecycle: the server shuts itself down when the socket to its owner closes, which the
kernel does when the owner dies, even by SIGKILL; :meth:`MinetestWorld.close` (or garbage
collection, or interpreter exit) stops it and removes its folder.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from worlds.world import Observation, StepResult, UnknownActionError, freeze_view

SERVER = Path("/usr/games/minetestserver")
"""Debian installs the server binary here, outside PATH."""
GAME = Path("/usr/share/games/minetest/games/minetest_game")
INSTALL_COMMAND = "apt-get install -y minetest-server minetest-data lua-socket"
INSTALL_HINT = f"Minetest is not installed: {INSTALL_COMMAND} (as root)"
# lua-socket's C module for LuaJIT (Lua 5.1 ABI), in Debian's multiarch library folder.
LUA_SOCKET_GLOB = "/usr/lib/*/lua/5.1/socket/core.so"
MOD_NAME = "rlgpt_agent"

# Items along the diamond chain, in the order the chain obtains them. The achievement for
# each is ``obtain_<name without "default:">``. "default:tree" is the trunk (Crafter's
# wood), "default:wood" the planks made from it.
CHAIN: tuple[str, ...] = (
    "default:tree",
    "default:wood",
    "default:stick",
    "default:pick_wood",
    "default:cobble",
    "default:pick_stone",
    "default:furnace",
    "default:coal_lump",
    "default:iron_lump",
    "default:steel_ingot",
    "default:pick_steel",
    "default:diamond",
)
MOVES: tuple[str, ...] = (
    "noop",
    "forward",
    "back",
    "turn_left",
    "turn_right",
    "jump",  # up onto the node in front, also out of water (else swim up one node)
    "dig",  # the node in front at foot height
    "dig_high",  # the node in front at head height
    "dig_low",  # the node in front below foot height (to dig stairs down)
    "dig_up",  # the node above the head
    "dig_down",  # the node under the feet (the body then drops into it)
)
STAND_INS: dict[str, tuple[str, ...]] = {
    "default:tree": ("default:pine_tree",),
    "default:wood": ("default:pine_wood",),
}
"""Items that count as a chain item: mapgen v6 grows pines where the land is snowy, and
their planks are group:wood like the others. Obtaining one unlocks the chain item's
achievement, and a step's goal counts either."""
UNCAPPED = 1_000_000
"""A world's own episode limit where a caller's cap ends episodes (a runner's, a learner's
training env, a replay): far above any cap, so that the same episode plays the same."""
PLACE_ITEMS = ("default:cobble", "default:dirt", "default:wood", "default:furnace")
"""Nodes ``place_<name>`` puts in front at foot height: building and the furnace."""
CRAFT_ITEMS = (
    "default:wood",
    "default:pine_wood",  # planks from the pine trees of snowy land (mapgen v6's other tree)
    "default:stick",
    "default:pick_wood",
    "default:pick_stone",
    "default:furnace",
    "default:pick_steel",
    "default:torch",
)
"""Items ``craft_<name>`` makes by any of the game's recipes for them."""
SMELT_ITEMS = ("default:steel_ingot",)
"""Items ``smelt_<name>`` makes in a furnace near the agent, by the game's cooking recipes."""

PLAYER_RADIUS = 8
"""The voxel window a player of the diamond chain gets: 8 nodes around (17 × 17 × 8
nodes). A player sees trees from much further, and with the default 4 the search for
trees alone failed on half the development seeds (the window is the only way the agent
finds anything)."""

DAY_STEPS = 1200
"""Steps in a day: the mod's clock (a Minetest day is 20 minutes; a step is a second)."""
HEALTH_MAX = 20
# How long to wait for the server to connect back (a cold start on a loaded machine).
START_TIMEOUT = 30.0
# How long one request may take: a reset or a step into new land waits for the mapgen.
REPLY_TIMEOUT = 60.0
# How many fresh UDP ports to try: the server's own port is chosen by binding port 0 and
# letting go of it, and another process may take it in between.
START_ATTEMPTS = 3


class MinetestError(RuntimeError):
    """The server is missing, failed to start, or broke off (the message has its log)."""


def minetest_missing() -> str | None:
    """What this machine lacks to run Minetest worlds, with the command that installs it;
    None when everything is there."""
    missing = []
    if not os.access(SERVER, os.X_OK):
        missing.append(str(SERVER))
    if not GAME.is_dir():
        missing.append(str(GAME))
    if not glob.glob(LUA_SOCKET_GLOB):
        missing.append("lua-socket for Lua 5.1")
    if not missing:
        return None
    return f"Minetest is not installed ({', '.join(missing)} missing): {INSTALL_COMMAND}"


def short(item: str) -> str:
    """``default:pick_wood`` → ``pick_wood``: the form used in action and achievement names."""
    return item.split(":", 1)[1] if item.startswith("default:") else item.replace(":", "_")


def achievement(item: str) -> str:
    """The achievement obtaining ``item`` unlocks: ``default:tree`` → ``obtain_tree``."""
    return f"obtain_{short(item)}"


ACHIEVEMENTS: tuple[str, ...] = tuple(achievement(item) for item in CHAIN)
"""Every achievement the world reports, one per :data:`CHAIN` item, in its order."""


def verb_actions(
    place_items: Sequence[str] = PLACE_ITEMS,
    craft_items: Sequence[str] = CRAFT_ITEMS,
    smelt_items: Sequence[str] = SMELT_ITEMS,
) -> dict[str, tuple[str, str]]:
    """The actions beyond :data:`MOVES`: ``place_<item>``, ``craft_<item>``,
    ``smelt_<item>`` → (verb, full item name)."""
    verbs = (("place", place_items), ("craft", craft_items), ("smelt", smelt_items))
    return {f"{verb}_{short(item)}": (verb, item) for verb, items in verbs for item in items}


ACTIONS: tuple[str, ...] = (*MOVES, *verb_actions())
"""A world's actions with the default items (what :class:`MinetestWorld` offers)."""


@dataclasses.dataclass(frozen=True, slots=True)
class VoxelObservation(Observation):
    """world → agent: an :class:`~worlds.world.Observation` plus the 3-D view a player has."""

    voxels: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0, 0), np.int16))
    """Node ids of the window around the agent, shape (levels, rows, cols): levels from
    the lowest up (the feet at level ``below``), rows north to south, columns west to
    east, the agent in the middle row and column; read-only. Names: :attr:`names`."""
    below: int = 0
    """How many levels of :attr:`voxels` lie under the agent's feet."""
    front: tuple[str, str] = ("", "")
    """Names of the nodes in front of the agent at foot and head height."""
    altitude: int = 0
    """Height of the agent's feet (y); a player sees it on the game's position display,
    and ores lie by depth (iron below 0, diamonds below -128 in mapgen v6)."""
    time_of_day: float = 0.0
    """0…1 from midnight to midnight."""

    def voxel(self, dx: int, dy: int, dz: int) -> str | None:
        """Name of the node at (east dx, up dy, north dz) from the feet, None outside."""
        levels, rows, cols = self.voxels.shape
        level, row, col = self.below + dy, rows // 2 - dz, cols // 2 + dx
        if 0 <= level < levels and 0 <= row < rows and 0 <= col < cols:
            return self.names[int(self.voxels[level, row, col])]
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class NodeRules:
    """What the game's node definitions say about moving among them, as the body's
    rules in the mod use it (read from the server at start, not typed in)."""

    walkable: frozenset[str]
    """Solid nodes: the body stands on them and cannot enter them ("ignore" included)."""
    liquid: frozenset[str]
    """Liquids: the body floats in them instead of falling."""
    damaging: frozenset[str]
    """Nodes that hurt the body inside them (lava: damage per second)."""
    drowning: frozenset[str]
    """Nodes that take the breath of a head inside them (water, lava)."""
    diggers: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    """Node → the tools that can dig it ("" is the hand); nodes nothing digs are absent."""

    def diggable(self, node: str, tools: Iterable[str] = ()) -> bool:
        """Whether the hand or one of ``tools`` digs ``node``."""
        can = self.diggers.get(node, frozenset())
        return "" in can or any(tool in can for tool in tools)


@dataclasses.dataclass(frozen=True, slots=True)
class Recipe:
    """One of the game's recipes, as ``minetest.get_all_craft_recipes`` gives it."""

    method: str
    """"normal" (crafting) or "cooking" (a furnace)."""
    width: int
    """Grid width (0: shapeless)."""
    items: tuple[str, ...]
    """The grid row by row: item names, "group:<name>" for any item of a group, "" empty."""
    output: str
    """The item made."""
    count: int
    """How many of it one craft makes."""

    def needs(self) -> dict[str, int]:
        """Ingredient → how many, empty cells left out."""
        counts: dict[str, int] = {}
        for item in self.items:
            if item:
                counts[item] = counts.get(item, 0) + 1
        return counts


@dataclasses.dataclass(frozen=True, slots=True)
class GameRules:
    """What the game's own definitions say about the chain, read from the server at start
    (as Crafter's rules come from its data.yaml), not typed in."""

    recipes: Mapping[str, tuple[Recipe, ...]]
    """Item → every recipe that makes it (for the chain's items and the craft/smelt
    actions' items)."""
    ores: Mapping[str, tuple[tuple[int, int, int], ...]]
    """Ore node → (y_min, y_max, cluster scarcity) of each place mapgen scatters it,
    highest first (mapgen v6: iron from y 0 down, diamonds from -128 down)."""
    hosts: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Ore node → the nodes mapgen scatters it in (``default:stone``; never desert stone)."""
    drops: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Ore node → the item digging it gives (``default:stone_with_iron`` →
    ``default:iron_lump``), from the node's own definition."""


# Facing index (the mod's: 0 north, 1 east, 2 south, 3 west) → screen (dx, dy).
FACINGS = ((0, -1), (1, 0), (0, 1), (-1, 0))


def daylight_at(time_of_day: float) -> float:
    """0 at night, 1 by day, linear through dawn (0.19–0.25) and dusk (0.75–0.81),
    about where Minetest's own sky brightens and darkens."""
    t = time_of_day % 1.0
    if 0.25 <= t <= 0.75:
        return 1.0
    if t < 0.19 or t > 0.81:
        return 0.0
    return (t - 0.19) / 0.06 if t < 0.5 else (0.81 - t) / 0.06


FOLDER_PREFIX = "rlgpt-minetest-"
"""Each server's folder is ``<tmp>/rlgpt-minetest-<owner pid>-<random>``."""


def _sweep_folders() -> None:
    """Remove the folders of owners that died without cleaning up (SIGKILL): their
    servers shut themselves down, but only a living process can delete a folder."""
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*-*"):
        pid = folder.name[len(FOLDER_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass  # another user's living process


def _number(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() else value


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _Server:
    """One running ``minetestserver`` and the socket its mod talks on."""

    def __init__(self, seed: int, server: Path, start_timeout: float) -> None:
        self.seed = seed
        self.folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        self.process: subprocess.Popen | None = None
        self.conn: socket.socket | None = None
        self.reader: Any = None
        try:
            self._start(server, start_timeout)
        except BaseException:
            self.close()
            raise

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no server log)"
        return "\n".join(text[-lines:])

    def _write_world(self, mod_port: int, udp_port: int) -> tuple[Path, Path]:
        world = self.folder / "world"
        mods = world / "worldmods"
        mods.mkdir(parents=True)
        with resources.as_file(resources.files("worlds.minetest") / "mod" / MOD_NAME) as mod:
            shutil.copytree(mod, mods / MOD_NAME)
        # The map lives in memory only (backend dummy): nothing to write, nothing to clean.
        (world / "world.mt").write_text(
            "gameid = minetest_game\nbackend = dummy\ncreative_mode = false\nenable_damage = true\n"
        )
        conf = self.folder / "minetest.conf"
        settings = {
            f"{MOD_NAME}.port": mod_port,
            "secure.trusted_mods": MOD_NAME,  # lets the mod load lua-socket
            "bind_address": "127.0.0.1",
            "ipv6_server": "false",
            "port": udp_port,
            "server_announce": "false",
            "mg_name": "v6",  # iron from y ≤ 0 and diamonds from y ≤ -128 (v7: -1024)
            # v6 places trees with a clock-seeded generator: the mod grows them instead.
            "mgv6_spflags": "jungles, biomeblend, mudflow, snowbiomes, noflat, notrees",
            # Minetest reads a seed of 0 as "pick one at random".
            "fixed_map_seed": self.seed + 1,
            "time_speed": 0,  # the mod moves the clock by steps
            # The mod answers many requests per step, and blocks on its socket for up to
            # 50 ms when idle; a short step lets emerge callbacks in quickly.
            "dedicated_server_step": 0.001,
            "num_emerge_threads": 1,  # mapchunks made in the order asked: reproducible
            "liquid_update": 1e9,  # liquids never flow: a real-time process
            "server_unload_unused_data_timeout": 1_000_000_000,
            "enable_rollback_recording": "false",
        }
        conf.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
        return world, conf

    def _start(self, server: Path, start_timeout: float) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            mod_port = listener.getsockname()[1]
            for attempt in range(START_ATTEMPTS):
                world, conf = self._prepare(mod_port, attempt)
                self._spawn(server, world, conf)
                conn = self._accept(listener, start_timeout)
                if conn is not None:
                    break
            else:
                raise MinetestError(
                    f"minetestserver did not start ({START_ATTEMPTS} attempts); its log:\n"
                    + self.log_tail()
                )
        finally:
            listener.close()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.settimeout(REPLY_TIMEOUT)
        self.conn = conn
        self.reader = conn.makefile("rb")

    def _prepare(self, mod_port: int, attempt: int) -> tuple[Path, Path]:
        if attempt:
            shutil.rmtree(self.folder / "world", ignore_errors=True)
        return self._write_world(mod_port, _free_udp_port())

    def _spawn(self, server: Path, world: Path, conf: Path) -> None:
        # HOME points into the folder: the server keeps a user folder under $HOME.
        env = dict(os.environ, HOME=str(self.folder))
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [str(server), "--world", str(world), "--config", str(conf)]
                + ["--gameid", "minetest_game", "--logfile", str(self.log), "--quiet"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                env=env,
            )

    def _accept(self, listener: socket.socket, timeout: float) -> socket.socket | None:
        """The mod's connection, or None when the server exited first (port taken)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            listener.settimeout(0.1)
            try:
                conn, _ = listener.accept()
                return conn
            except TimeoutError:
                pass
            if self.process is not None and self.process.poll() is not None:
                return None
        raise MinetestError(
            f"minetestserver did not connect back within {timeout:.0f} s; its log:\n"
            + self.log_tail()
        )

    def request(self, message: Mapping[str, Any]) -> tuple[dict[str, Any], bytes]:
        if self.conn is None:
            raise MinetestError("the Minetest world is closed")
        try:
            self.conn.sendall(json.dumps(message).encode() + b"\n")
            line = self.reader.readline()
            if not line:
                raise MinetestError("minetestserver closed the connection")
            # The mod's JSON writer gives every number as a float: whole ones come back
            # as ints here.
            header = json.loads(line, parse_float=_number)
            payload = self.reader.read(header.get("nbytes", 0))
        except (OSError, ValueError) as exc:
            raise MinetestError(
                f"minetestserver broke off ({exc}); its log:\n{self.log_tail()}"
            ) from exc
        if not header.get("ok"):
            raise MinetestError(f"the agent mod refused {message}: {header.get('error')}")
        return header, payload

    def close(self) -> None:
        _stop(self.process, self.conn, self.reader, self.folder)
        self.process = self.conn = self.reader = None


def _stop(process: subprocess.Popen | None, conn: Any, reader: Any, folder: Path) -> None:
    # Closing the socket is the mod's cue to shut the server down; kill it if it lingers.
    for handle in (reader, conn):
        if handle is not None:
            handle.close()
    if process is not None and process.poll() is None:
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    shutil.rmtree(folder, ignore_errors=True)


class MinetestWorld:
    """Minetest as a :class:`~worlds.world.World`.

    Args:
        radius: the voxel window reaches this many nodes east, west, north and south.
        below, above: and this many levels under the feet and over them.
        length: episode length limit in steps.
        server: the ``minetestserver`` binary.
        place_items, craft_items, smelt_items: the items of the ``place_``, ``craft_``
            and ``smelt_`` actions (full names, e.g. ``default:stone``).
    """

    def __init__(
        self,
        *,
        radius: int = 4,
        below: int = 3,
        above: int = 4,
        length: int = 10000,
        server: Path | str = SERVER,
        start_timeout: float = START_TIMEOUT,
        place_items: Sequence[str] = PLACE_ITEMS,
        craft_items: Sequence[str] = CRAFT_ITEMS,
        smelt_items: Sequence[str] = SMELT_ITEMS,
    ) -> None:
        problem = minetest_missing() if Path(server) == SERVER else None
        if problem is None and not os.access(server, os.X_OK):
            problem = f"{server} is not an executable: {INSTALL_COMMAND}"
        if problem:
            raise MinetestError(problem)
        _sweep_folders()
        self._server_path = Path(server)
        self._start_timeout = start_timeout
        self._view = {"radius": radius, "below": below, "above": above}
        self._length = length
        self._server: _Server | None = None
        self._finalizer: weakref.finalize | None = None
        self._names: tuple[str, ...] = ()
        self.node_rules = NodeRules(frozenset(), frozenset(), frozenset(), frozenset())
        self.game_rules = GameRules(recipes={}, ores={})
        """The game's node rules; filled when the first server starts (the first reset)."""
        self._verbs = verb_actions(place_items, craft_items, smelt_items)
        actions = [*MOVES, *self._verbs]
        self._action_names = tuple(actions)
        self._action_set = frozenset(actions)
        self._achievement_names = ACHIEVEMENTS
        self._seed: int | None = None
        self._start = (0, 0, 0)
        self._steps = 0
        self._health = HEALTH_MAX
        self._counts: dict[str, int] = {}
        self._unlocked: set[str] = set()
        self._last: VoxelObservation | None = None
        self.steps_taken = 0
        """Every step this world took, over all its episodes."""

    @property
    def action_names(self) -> Sequence[str]:
        return self._action_names

    @property
    def achievement_names(self) -> Sequence[str]:
        return self._achievement_names

    @property
    def server_pid(self) -> int | None:
        """The process id of this world's ``minetestserver`` (None before the first reset)."""
        if self._server is None or self._server.process is None:
            return None
        return self._server.process.pid

    def reset(
        self, seed: int | None = None, *, inventory: Mapping[str, int] | None = None
    ) -> VoxelObservation:
        """Start an episode in the world made from ``seed`` (None: the seed after the last).

        The same seed on a running server regenerates that world in place; another seed
        starts a new server (the mapgen seed is fixed when a world is created).
        ``inventory``: what the body carries at the start (item → count), to measure one
        step of a chain alone from the state it needs; no action gives items."""
        if seed is None:
            seed = 0 if self._seed is None else self._seed + 1
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"a Minetest seed is an int ≥ 0, got {seed!r}")
        if self._server is not None and self._server.seed != seed:
            self.close()
        if self._server is None:
            self._open(seed)
        self._seed = seed
        assert self._server is not None
        carried = [[item, int(n)] for item, n in (inventory or {}).items() if n > 0]
        message = {"op": "reset", "seed": seed, **self._view, "inventory": carried}
        header, payload = self._server.request(message)
        self._start = tuple(header["pos"])
        self._steps = 0
        self._health = header["hp"]
        self._unlocked = set()
        self._counts = dict.fromkeys(self._achievement_names, 0)
        self._last = self._observe(header, payload)
        return self._last

    def step(self, action: str) -> StepResult:
        if action not in self._action_set:
            raise UnknownActionError(action, self._action_names)
        if self._server is None or self._last is None:
            raise RuntimeError("call reset() before step()")
        if action in self._verbs:
            verb, item = self._verbs[action]
            message = {"op": "step", "verb": verb, "item": item}
        else:
            message = {"op": "step", "action": action}
        before = self._last.inventory
        header, payload = self._server.request(message)
        self._steps += 1
        self.steps_taken += 1
        obs = self._observe(header, payload)
        self._last = obs
        gained = []
        for item in CHAIN:
            names = (item, *STAND_INS.get(item, ()))
            if sum(obs.inventory.get(n, 0) for n in names) > sum(before.get(n, 0) for n in names):
                name = achievement(item)
                gained.append(name)
                self._counts[name] += 1
        unlocked = [name for name in gained if name not in self._unlocked]
        self._unlocked.update(unlocked)
        # Crafter's reward: +1 per achievement unlocked this episode, and the change in
        # health (a tenth per point).
        reward = len(unlocked) + (header["hp"] - self._health) / 10
        self._health = header["hp"]
        dead = header["hp"] <= 0
        over = self._steps >= self._length
        info = {
            "achievements": tuple(gained),
            "discount": 0.0 if dead else 1.0,
            "result": header.get("result", ""),
        }
        return obs, float(reward), bool(dead or over), info

    def render(self) -> np.ndarray:
        """A schematic top-down picture (H, W, 3) of the 2-D view: a colour per node name,
        8 pixels a node, the agent in white. Not the game's own rendering."""
        if self._last is None:
            raise RuntimeError("call reset() before render()")
        view = self._last.view
        palette = np.array([_colour(name) for name in self._names], np.uint8)
        image = palette[view]
        cy, cx = view.shape[0] // 2, view.shape[1] // 2
        image[cy, cx] = 255
        return np.repeat(np.repeat(image, 8, axis=0), 8, axis=1)

    def achievement_counts(self) -> dict[str, int]:
        """How many steps obtained each chain item this episode."""
        return dict(self._counts)

    def progress(self) -> int:
        """How far along :data:`CHAIN` the episode got: the index of the furthest item
        obtained, plus one (0: nothing yet)."""
        reached = [i for i, item in enumerate(CHAIN) if self._counts.get(achievement(item))]
        return max(reached) + 1 if reached else 0

    def close(self) -> None:
        """Stop the server and remove its folder; a later reset starts a new one."""
        if self._finalizer is not None:
            self._finalizer()
        self._server = None
        self._finalizer = None

    def __enter__(self) -> MinetestWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self, seed: int) -> None:
        server = _Server(seed, self._server_path, self._start_timeout)
        self._server = server
        # Runs at close(), when this object is collected, or at interpreter exit.
        self._finalizer = weakref.finalize(
            self, _stop, server.process, server.conn, server.reader, server.folder
        )
        asked = sorted(set(CHAIN) | set(self._verbs_items()))
        header, _ = server.request({"op": "hello", "items": asked})
        size = max(node[0] for node in header["nodes"]) + 1
        names = ["unknown"] * size
        for cid, name, *_ in header["nodes"]:
            names[cid] = name
        self._names = tuple(names)
        tools = header["tools"]
        nodes = header["nodes"]
        self.node_rules = NodeRules(
            walkable=frozenset(n[1] for n in nodes if n[2]) | {"unknown"},
            liquid=frozenset(n[1] for n in nodes if n[3]),
            damaging=frozenset(n[1] for n in nodes if n[4]),
            drowning=frozenset(n[1] for n in nodes if n[5]),
            diggers={n[1]: frozenset(tools[i] for i in n[6] or ()) for n in nodes if n[6]},
        )
        recipes: dict[str, list[Recipe]] = {}
        for item, method, width, items, output in header.get("recipes") or ():
            made, _, count = str(output).partition(" ")
            recipes.setdefault(item, []).append(
                Recipe(method, width, tuple(items or ()), made, int(count or 1))
            )
        ores: dict[str, list[tuple[int, int, int]]] = {}
        drops: dict[str, str] = {}
        hosts: dict[str, set[str]] = {}
        for node, y_min, y_max, scarcity, drop, wherein in header.get("ores") or ():
            ores.setdefault(node, []).append((y_min, y_max, scarcity))
            drops[node] = drop
            hosts.setdefault(node, set()).update(wherein or ())
        self.game_rules = GameRules(
            recipes={k: tuple(v) for k, v in recipes.items()},
            ores={k: tuple(sorted(v, key=lambda r: -r[1])) for k, v in ores.items()},
            drops=drops,
            hosts={k: tuple(sorted(v)) for k, v in hosts.items()},
        )

    def _verbs_items(self) -> list[str]:
        return [item for _, item in self._verbs.values()]

    def _observe(self, header: Mapping[str, Any], payload: bytes) -> VoxelObservation:
        radius, below = self._view["radius"], self._view["below"]
        side = 2 * radius + 1
        levels = below + self._view["above"] + 1
        voxels = np.frombuffer(payload, dtype=">u2").astype(np.int16)
        voxels = voxels.reshape(levels, side, side)
        air = self._names.index("air")
        feet = voxels[below]
        # The 2-D view: what stands at foot height, or the ground under it where that is air.
        view = np.where(feet == air, voxels[below - 1], feet) if below > 0 else feet.copy()
        x, y, z = header["pos"]
        x0, _, z0 = self._start
        facing = FACINGS[header["dir"]]
        fx, fz = facing[0], -facing[1]
        names = self._names
        inventory = dict.fromkeys(CHAIN, 0)
        inventory.update({name: int(count) for name, count in header.get("inventory") or ()})
        return VoxelObservation(
            view=freeze_view(np.ascontiguousarray(view)),
            creatures=(),  # minetest_game has no creatures
            inventory=inventory,
            status={"health": float(header["hp"]), "breath": float(header["breath"])},
            facing=facing,
            daylight=daylight_at(header["time"]),
            position=(x - x0, -(z - z0)),
            names=names,
            voxels=freeze_view(voxels),
            below=below,
            front=(
                names[int(voxels[below, radius - fz, radius + fx])],
                names[int(voxels[below + 1, radius - fz, radius + fx])],
            ),
            altitude=int(y),
            time_of_day=float(header["time"]),
        )


def _colour(name: str) -> tuple[int, int, int]:
    # A stable colour per name (not Python's salted hash), muted so white stands out.
    code = sum((i + 1) * ord(c) for i, c in enumerate(name))
    return (40 + code % 160, 40 + (code // 7) % 160, 40 + (code // 49) % 160)
