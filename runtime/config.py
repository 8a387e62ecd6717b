"""Run configuration: TOML read with the standard library, checked into typed settings.

Each section is a dataclass; each field's docstring is its documentation. Loading is
strict: an unknown key, a wrong type or a bad value raises :class:`ConfigError`, which
names the file, the key, what was expected, what was found and how to fix it; ``run.py``
turns it into exit status 2.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
import typing
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from messages.codec import DEFAULT_MAX_FRAME

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
"""Where a bare config name (``diamond.toml``) is also looked up."""


S = TypeVar("S", bound="Settings")


class ConfigError(Exception):
    """A config file is unreadable or wrong; the message says where and how to fix it."""

    def __init__(self, file: str, key: str, expected: str, found: str, fix: str = "") -> None:
        where = f"{file}: [{key}]" if key and "." not in key else f"{file}: {key}" if key else file
        text = f"{where}: expected {expected}, found {found}"
        if fix:
            text += f". {fix}"
        super().__init__(text)
        self.file, self.key, self.expected, self.found, self.fix = file, key, expected, found, fix


@dataclass
class RunSettings:
    name: str = "run"
    """Run id prefix; the run directory is ``<runs_dir>/<name>-<timestamp>``."""
    runs_dir: str = "runs"
    """Where run directories are created (relative to the working directory)."""
    seed: int = 0
    """Base seed for everything random in the run."""
    driver: str = "rlgpt"
    """What the run does: ``rlgpt`` (the method: agents, environments, learners) or
    ``checkup`` (probe every configured actor and run small reference jobs)."""


@dataclass
class RuntimeSettings:
    listen: str = ""
    """Extra endpoint for actors attached from other terminals or machines, e.g.
    ``tcp://127.0.0.1:5555`` (``:*`` picks a free port). Empty: local actors only (they
    always use an ipc socket file, removed at exit). A non-loopback host needs keys_dir."""
    keys_dir: str = ""
    """Folder made by ``python run.py keys``; turns on CURVE for the ``listen`` endpoint."""
    heartbeat_interval: float = 1.0
    """Seconds between actor heartbeats."""
    heartbeat_timeout: float = 10.0
    """An actor silent this long is presumed dead and its jobs go elsewhere. Generous:
    a learner's worker thread holding the GIL can delay a heartbeat by seconds."""
    max_job_tries: int = 3
    """A job whose actor dies this many times fails instead of being retried."""
    restart_limit: int = 5
    """Restart intensity: at most this many actor restarts within ``restart_window``..."""
    restart_window: float = 60.0
    """...seconds; one more stops the run with an error (as OTP supervisors do)."""
    shutdown_grace: float = 5.0
    """Seconds an actor gets to exit after SIGTERM before it is killed."""
    max_frame_bytes: int = DEFAULT_MAX_FRAME
    """Largest message accepted; bigger frames are rejected and logged."""


@dataclass
class ActorSettings:
    count: int = 1
    """How many actor processes of this role the head starts."""
    capacity: int = 1
    """Jobs each works on at once."""
    device: str = "cpu"
    """Compute device (``cpu``, ``cuda``, ``cuda:1``)."""


DRIVERS = ("rlgpt", "checkup")


@dataclass
class Settings:
    """The sections every run has; a program adds its own by subclassing (the method's
    are in :mod:`method.settings`)."""

    run: RunSettings = field(default_factory=RunSettings)
    """[run]: naming and seeding."""
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    """[runtime]: broker, heartbeats, restarts."""
    actors: dict[str, ActorSettings] = field(default_factory=dict)
    """[actors.ROLE]: actor processes to start, by role."""
    source: str = "<defaults>"
    """The file these settings came from (not a TOML key)."""


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _describe(value: Any) -> str:
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", dict: "table"}
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return f"{kind.get(type(value), type(value).__name__)} {text}"


def _convert(file: str, key: str, hint: Any, value: Any) -> Any:
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(file, key, "a table", _describe(value), f"write it as [{key}]")
        return _section(file, key, hint, value)
    if typing.get_origin(hint) is dict:
        if not isinstance(value, dict):
            raise ConfigError(file, key, "a table", _describe(value))
        item = typing.get_args(hint)[1]
        return {k: _convert(file, f"{key}.{k}", item, v) for k, v in value.items()}
    if typing.get_origin(hint) is list:
        item = typing.get_args(hint)[0]
        if not isinstance(value, list):
            raise ConfigError(
                file, key, "a list", _describe(value), f'e.g. {key.rsplit(".", 1)[-1]} = ["a", "b"]'
            )
        return [_convert(file, f"{key}[{i}]", item, v) for i, v in enumerate(value)]
    if hint is float and type(value) is int:
        return float(value)
    if type(value) is not hint:
        example = {int: "3", float: "1.5", str: '"text"', bool: "true"}.get(hint, "")
        fix = f"write it as, e.g., {key.rsplit('.', 1)[-1]} = {example}" if example else ""
        raise ConfigError(file, key, _TYPE_NAMES.get(hint, str(hint)), _describe(value), fix)
    return value


def _section(file: str, prefix: str, cls: type, table: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls) if f.name != "source"]
    values = {}
    for key, value in table.items():
        path = f"{prefix}.{key}" if prefix else key
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            fix = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
            raise ConfigError(file, path, "a known key", f"'{key}'", fix)
        values[key] = _convert(file, path, hints[key], value)
    return cls(**values)


def find_config(name: str) -> Path:
    """A path as given, or a bare name looked up in ``configs/``."""
    path = Path(name)
    if path.exists():
        return path
    if not path.is_absolute() and (CONFIG_DIR / path).exists():
        return CONFIG_DIR / path
    raise ConfigError(
        name,
        "",
        "a TOML file",
        "no such file",
        f"files in {CONFIG_DIR}: " + ", ".join(sorted(p.name for p in CONFIG_DIR.glob("*.toml"))),
    )


def load(name: str, cls: type[S] = Settings, roles: Collection[str] | None = None) -> S:
    """The settings of config file ``name`` as ``cls`` (a :class:`Settings` or a subclass),
    checked; raises :class:`ConfigError`."""
    path = find_config(name)
    try:
        table = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), "", "valid TOML", str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), "", "a readable UTF-8 file", str(exc)) from None
    settings = _section(str(path), "", cls, table)
    settings.source = str(path)
    check(settings, roles)
    return settings


def load_resolved(path: Path, cls: type[S] = Settings, roles: Collection[str] | None = None) -> S:
    """The settings a run recorded in its ``config.json`` (for ``--resume``): the run goes
    on with exactly the settings it started with, whatever the TOML file says now."""
    import json

    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            str(path),
            "",
            "a run's config.json",
            str(exc),
            "pass the folder of a run started before",
        ) from None
    source = table.pop("source", str(path))
    settings = _section(str(path), "", cls, table)
    settings.source = source
    check(settings, roles)
    return settings


def check(s: Settings, roles: Collection[str] | None = None) -> None:
    """Cross-field checks that types alone cannot express; ``roles``: the actor roles a
    ``[actors.ROLE]`` section may name (None: any)."""
    f = s.source
    rt = s.runtime
    if rt.listen and not rt.listen.startswith("tcp://"):
        raise ConfigError(
            f,
            "runtime.listen",
            "'tcp://HOST:PORT' or empty",
            repr(rt.listen),
            "local actors need no endpoint; leave listen empty on one machine",
        )
    for name in ("heartbeat_interval", "heartbeat_timeout", "restart_window", "shutdown_grace"):
        if getattr(rt, name) <= 0:
            raise ConfigError(
                f,
                f"runtime.{name}",
                "a positive number of seconds",
                repr(getattr(rt, name)),
                f"the default is {getattr(RuntimeSettings, name)}",
            )
    if rt.heartbeat_timeout < 2 * rt.heartbeat_interval:
        raise ConfigError(
            f,
            "runtime.heartbeat_timeout",
            "at least twice heartbeat_interval",
            repr(rt.heartbeat_timeout),
            "one late heartbeat must not kill an actor",
        )
    for name in ("max_job_tries", "restart_limit", "max_frame_bytes"):
        if getattr(rt, name) < 1:
            raise ConfigError(
                f,
                f"runtime.{name}",
                "an integer ≥ 1",
                repr(getattr(rt, name)),
                f"set {name} to 1 or more (the default is {getattr(RuntimeSettings, name)})",
            )
    from runtime.security import is_loopback

    if rt.listen and not is_loopback(rt.listen) and not rt.keys_dir:
        raise ConfigError(
            f,
            "runtime.keys_dir",
            "a keys folder for a non-loopback endpoint",
            "none",
            'run `python run.py keys --dir keys` and set keys_dir = "keys"',
        )
    if rt.keys_dir:
        keys = Path(rt.keys_dir)
        if not (keys / "server.key_secret").exists() or not list(keys.glob("authorized/*.key")):
            raise ConfigError(
                f,
                "runtime.keys_dir",
                "a folder made by `python run.py keys`",
                f"'{rt.keys_dir}' without server.key_secret and authorized/*.key",
                f"run `python run.py keys --dir {rt.keys_dir}`",
            )
    if s.run.driver not in DRIVERS:
        raise ConfigError(
            f, "run.driver", " or ".join(DRIVERS), repr(s.run.driver), 'the default is "rlgpt"'
        )
    from runtime.devices import DeviceError, check_device

    for role, a in s.actors.items():
        if roles is not None and role not in roles:
            close = difflib.get_close_matches(role, list(roles), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"roles: {', '.join(roles)}"
            raise ConfigError(f, f"actors.{role}", "a known actor role", f"'{role}'", hint)
        try:
            check_device(a.device)
        except DeviceError as exc:
            raise ConfigError(
                f,
                f"actors.{role}.device",
                "a device this machine has",
                repr(a.device),
                f"{exc}; attach actors for other devices with `run.py attach`",
            ) from None
        if a.count < 0 or a.capacity < 1:
            raise ConfigError(
                f,
                f"actors.{role}",
                "count ≥ 0 and capacity ≥ 1",
                f"count={a.count}, capacity={a.capacity}",
            )
