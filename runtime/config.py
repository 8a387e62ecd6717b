"""Run configuration: TOML read with the standard library, checked into typed settings.

Each section is a dataclass; each field's docstring is its documentation and its
metadata (:func:`check`) the values it accepts. Loading is strict: an unknown key, a wrong
type or a bad value raises :class:`ConfigError`, which names the file, the key, what was
expected, what was found and how to fix it; ``run.py`` turns it into exit status 2. The few
rules that span fields or look outside the file are :func:`check_settings`.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
import typing
from collections.abc import Collection, Mapping
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


CHECK = "check"
"""Key of a field's metadata that holds its :class:`Check` (put there by :func:`check`)."""
FIELD_CHECKS = "field_checks"
"""Key of a section field's metadata that holds checks for the fields of its class, for a
class this module cannot annotate (a message type); put there by :func:`check_fields`."""


@dataclass(frozen=True)
class Check:
    """What a config value must be beyond its type. The loader applies it to each value a
    file gives (to each item of a list) and raises :class:`ConfigError` on a miss; the
    message's words are generated from the bounds unless ``expected``/``fix`` say better."""

    positive: bool = False
    """A number above 0."""
    min: float | None = None
    """Smallest value allowed (inclusive)."""
    max: float | None = None
    """Largest value allowed (inclusive)."""
    choices: tuple[str, ...] = ()
    """The only values allowed."""
    prefix: str = ""
    """A string must start with this; empty (unset) passes."""
    expected: str = ""
    """What the error says is expected, instead of the generated words."""
    fix: str = ""
    """How the error says to fix it, instead of the generated advice."""

    def passes(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        if self.prefix:
            return not value or value.startswith(self.prefix)
        return (
            (not self.positive or value > 0)
            and (self.min is None or value >= self.min)
            and (self.max is None or value <= self.max)
        )

    def error(self, file: str, key: str, value: Any, default: Any) -> ConfigError:
        name = key.rsplit(".", 1)[-1]
        expected, fix = self.expected, self.fix
        if self.choices:
            expected = expected or " or ".join(self.choices)
            close = difflib.get_close_matches(str(value), self.choices, n=1)
            fix = f"did you mean '{close[0]}'?" if close else fix or f'the default is "{default}"'
            return ConfigError(file, key, expected, repr(value), fix)
        if self.prefix:
            expected = expected or f"'{self.prefix}...' or empty"
            return ConfigError(file, key, expected, repr(value), fix)
        noun = "an integer" if type(value) is int else "a number"
        if not expected:
            if self.positive:
                expected = "a positive number"
            elif self.min is not None and self.max is not None:
                expected = f"{noun} from {self.min:g} to {self.max:g}"
            elif self.min is not None:
                expected = f"{noun} ≥ {self.min:g}"
            else:
                expected = f"{noun} ≤ {self.max:g}"
        if not fix and self.min is not None and self.max is None:
            fix = f"set {name} to {self.min:g} or more (the default is {default})"
        return ConfigError(file, key, expected, repr(value), fix or f"the default is {default}")


def check(
    *,
    positive: bool = False,
    min: float | None = None,
    max: float | None = None,
    choices: tuple[str, ...] = (),
    prefix: str = "",
    expected: str = "",
    fix: str = "",
) -> dict[str, Check]:
    """Field metadata declaring a check: ``field(default=1.0, metadata=check(positive=True))``."""
    return {CHECK: Check(positive, min, max, choices, prefix, expected, fix)}


def check_fields(**checks: Mapping[str, Check]) -> dict[str, dict[str, Check]]:
    """Metadata for a section whose class is not this config's own (a message type): checks
    for its fields by name, e.g. ``metadata=check_fields(n_steps=check(min=1))``."""
    return {FIELD_CHECKS: {name: meta[CHECK] for name, meta in checks.items()}}


DRIVERS = ("rlgpt", "checkup")
"""The values of ``[run] driver``."""
SECONDS = check(positive=True, expected="a positive number of seconds")
"""The check of a duration setting."""


@dataclass
class RunSettings:
    name: str = "run"
    """Run id prefix; the run directory is ``<runs_dir>/<name>-<timestamp>``."""
    runs_dir: str = "runs"
    """Where run directories are created (relative to the working directory)."""
    seed: int = 0
    """Base seed for everything random in the run."""
    driver: str = field(default="rlgpt", metadata=check(choices=DRIVERS))
    """What the run does: ``rlgpt`` (the method: agents, environments, learners) or
    ``checkup`` (probe every configured actor and run small reference jobs)."""


@dataclass
class RuntimeSettings:
    listen: str = field(
        default="",
        metadata=check(
            prefix="tcp://",
            expected="'tcp://HOST:PORT' or empty",
            fix="local actors need no endpoint; leave listen empty on one machine",
        ),
    )
    """Extra endpoint for actors attached from other terminals or machines, e.g.
    ``tcp://127.0.0.1:5555`` (``:*`` picks a free port). Empty: local actors only (they
    always use an ipc socket file, removed at exit). A non-loopback host needs keys_dir."""
    keys_dir: str = ""
    """Folder made by ``python run.py keys``; turns on CURVE for the ``listen`` endpoint."""
    heartbeat_interval: float = field(default=1.0, metadata=SECONDS)
    """Seconds between actor heartbeats."""
    heartbeat_timeout: float = field(default=10.0, metadata=SECONDS)
    """An actor silent this long is presumed dead and its jobs go elsewhere. Generous:
    a learner's worker thread holding the GIL can delay a heartbeat by seconds."""
    max_job_tries: int = field(default=3, metadata=check(min=1))
    """A job whose actor dies this many times fails instead of being retried."""
    restart_limit: int = field(default=5, metadata=check(min=1))
    """Restart intensity: at most this many actor restarts within ``restart_window``..."""
    restart_window: float = field(default=60.0, metadata=SECONDS)
    """...seconds; one more stops the run with an error (as OTP supervisors do)."""
    shutdown_grace: float = field(default=5.0, metadata=SECONDS)
    """Seconds an actor gets to exit after SIGTERM before it is killed."""
    max_frame_bytes: int = field(default=DEFAULT_MAX_FRAME, metadata=check(min=1))
    """Largest message accepted; bigger frames are rejected and logged."""


@dataclass
class ActorSettings:
    count: int = field(default=1, metadata=check(min=0))
    """How many actor processes of this role the head starts."""
    capacity: int = field(default=1, metadata=check(min=1))
    """Jobs each works on at once."""
    device: str = "cpu"
    """Compute device (``cpu``, ``cuda``, ``cuda:1``)."""


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


def _convert(
    file: str, key: str, hint: Any, value: Any, checks: Mapping[str, Check] | None = None
) -> Any:
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(file, key, "a table", _describe(value), f"write it as [{key}]")
        return _section(file, key, hint, value, checks)
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


def _section(
    file: str,
    prefix: str,
    cls: type,
    table: dict[str, Any],
    checks: Mapping[str, Check] | None = None,
) -> Any:
    """``table`` as a ``cls``: unknown keys refused, each value converted to its field's
    type and held to its field's :class:`Check` (or the one ``checks`` gives by name)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}
    values = {}
    for key, value in table.items():
        path = f"{prefix}.{key}" if prefix else key
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            fix = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(fields)}"
            raise ConfigError(file, path, "a known key", f"'{key}'", fix)
        meta = fields[key].metadata
        values[key] = _convert(file, path, hints[key], value, meta.get(FIELD_CHECKS))
        rule = meta.get(CHECK) or (checks or {}).get(key)
        if rule is not None:
            _hold(file, path, rule, values[key], _default(fields[key]))
    return cls(**values)


def _hold(file: str, key: str, rule: Check, value: Any, default: Any) -> None:
    """Raise :class:`ConfigError` unless ``value`` (each item of a list) passes ``rule``."""
    items = enumerate(value) if isinstance(value, list) else [(None, value)]
    for i, item in items:
        if not rule.passes(item):
            where = key if i is None else f"{key}[{i}]"
            raise rule.error(file, where, item, default)


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


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
    check_settings(settings, roles)
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
    check_settings(settings, roles)
    return settings


def check_settings(s: Settings, roles: Collection[str] | None = None) -> None:
    """What field checks cannot say: rules across fields, the keys folder on disk and the
    actor sections (``roles``: the roles a ``[actors.ROLE]`` section may name; None: any)."""
    f = s.source
    rt = s.runtime
    if rt.heartbeat_timeout < 2 * rt.heartbeat_interval:
        raise ConfigError(
            f,
            "runtime.heartbeat_timeout",
            "at least twice heartbeat_interval",
            repr(rt.heartbeat_timeout),
            "one late heartbeat must not kill an actor",
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
