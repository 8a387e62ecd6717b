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
import json
import math
import re
import tomllib
import types
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from messages.codec import DEFAULT_MAX_FRAME
from runtime.devices import DeviceError, check_device
from runtime.security import is_loopback

CONFIG_DIR = Path(__file__).resolve().parent.parent / "rlgpt" / "configs"
"""Where a bare config name (``diamond``, ``diamond.toml``) is also looked up: the configs
that ship inside the ``rlgpt`` package. A path, not an import (``rlgpt`` is the top
floor): the top-level packages are siblings both in a checkout and once installed."""


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
    pattern: str = ""
    """A string must match this regular expression whole."""
    words: tuple[str, ...] = ()
    """Strings allowed besides the numbers the bounds allow (``"auto"``)."""
    expected: str = ""
    """What the error says is expected, instead of the generated words."""
    fix: str = ""
    """How the error says to fix it, instead of the generated advice."""

    def passes(self, value: Any) -> bool:
        if isinstance(value, str) and self.words:
            return value in self.words
        if self.choices:
            return value in self.choices
        if self.prefix:
            return not value or value.startswith(self.prefix)
        if self.pattern:
            return re.fullmatch(self.pattern, value) is not None
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
        if self.pattern:
            expected = expected or f"text matching {self.pattern}"
            fix = fix or f'the default is "{default}"'
            return ConfigError(file, key, expected, repr(value), fix)
        noun = "an integer" if type(value) is int or self.words else "a number"
        if isinstance(default, str):
            default = f'"{default}"'
        if not expected:
            if self.positive:
                expected = "a positive number"
            elif self.min is not None and self.max is not None:
                expected = f"{noun} from {_num(self.min)} to {_num(self.max)}"
            elif self.min is not None:
                expected = f"{noun} ≥ {_num(self.min)}"
            else:
                expected = f"{noun} ≤ {_num(self.max)}"
        if self.words:
            expected = " or ".join([*(f'"{w}"' for w in self.words), expected])
        if self.words and type(value) is not int:  # a word, or neither word nor integer
            close = difflib.get_close_matches(str(value), self.words, n=1)
            example = _num(self.min + 1 if self.min is not None else 1)
            fix = f'did you mean "{close[0]}"?' if close else (
                fix or f'write {name} = "{self.words[0]}" or a number, e.g. {name} = {example}'
                f" (the default is {default})"
            )  # fmt: skip
            return ConfigError(file, key, expected, repr(value), fix)
        if not fix and self.min is not None and value < self.min:
            fix = f"set {name} to {_num(self.min)} or more (the default is {default})"
        elif not fix and self.max is not None and value > self.max:
            fix = f"set {name} to {_num(self.max)} or less (the default is {default})"
        return ConfigError(file, key, expected, repr(value), fix or f"the default is {default}")


def _num(x: float) -> str:
    """A bound as people write it: ``4194304``, ``0.05``, ``300`` (not ``4.1943e+06``)."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def check(
    *,
    positive: bool = False,
    min: float | None = None,
    max: float | None = None,
    choices: tuple[str, ...] = (),
    prefix: str = "",
    pattern: str = "",
    words: tuple[str, ...] = (),
    expected: str = "",
    fix: str = "",
) -> dict[str, Check]:
    """Field metadata declaring a check: ``field(default=1.0, metadata=check(positive=True))``."""
    return {CHECK: Check(positive, min, max, choices, prefix, pattern, words, expected, fix)}


def check_fields(**checks: Mapping[str, Check]) -> dict[str, dict[str, Check]]:
    """Metadata for a section whose class is not this config's own (a message type): checks
    for its fields by name, e.g. ``metadata=check_fields(n_steps=check(min=1))``."""
    return {FIELD_CHECKS: {name: meta[CHECK] for name, meta in checks.items()}}


DRIVERS = ("rlgpt", "checkup")
"""The values of ``[run] driver``."""
SECONDS = check(positive=True, expected="a positive number of seconds")
"""The check of a duration setting."""

NAME_MAX = 40
"""Longest ``[run] name``. The run id (``NAME-YYYYmmdd-HHMMSS-xxxx``, 21 characters more)
names the head's ipc socket file, and a socket path holds at most 107 bytes (Linux's
``sun_path`` is 108 with its NUL; macOS's 104). ``/tmp/rlgpt-<uid>/`` + id + ``.ipc`` is
36 characters plus the uid and the name: 40 leaves room for a temporary folder of about 25
characters (the head checks the real path at start)."""
NAME = check(
    pattern=rf"[A-Za-z0-9_][A-Za-z0-9_.-]{{0,{NAME_MAX - 1}}}",
    expected=f"letters, digits, '_', '.' or '-' (1 to {NAME_MAX}, not starting with '.' or '-')",
    fix='the name becomes a folder and a socket file name: e.g. name = "diamond-ppo"',
)
"""The check of ``[run] name``: no path characters, and short enough for the ipc path."""
MAX_ACTORS = 256
"""Most actor processes of one role the head starts: each imports torch and crafter
(~300 MB), so 256 is ~75 GB, past one machine; more attach from other machines."""
MAX_CAPACITY = 256
"""Most jobs one actor works on at once; beyond that they only queue inside it."""
MIN_FRAME = 4 * 1024 * 1024
"""Smallest ``max_frame_bytes``: a trained policy artifact (an SB3 PPO zip for Crafter is
1-3 MiB) must fit in one message, or every training job's result is refused."""
MAX_FRAME = 1024 * 1024 * 1024
"""Largest ``max_frame_bytes``: one message is buffered whole (and twice while decoded),
so a peer may make the head hold this much memory; 1 GiB is already a lot."""


@dataclass
class RunSettings:
    name: str = field(default="run", metadata=NAME)
    """Run id prefix; the run directory is ``<runs_dir>/<name>-<timestamp>``."""
    runs_dir: str = "runs"
    """Where run directories are created (relative to the working directory); checked
    writable when the run starts."""
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
    ``tcp://127.0.0.1:5555`` (a port from 1 to 65535; ``:*`` picks a free one). Empty: local
    actors only (they always use an ipc socket file, removed at exit). It always demands
    CURVE: a non-loopback host needs keys_dir; on loopback without it the head makes keys
    for the run in ``RUN_DIR/keys`` (attach with ``--run-dir RUN_DIR``)."""
    keys_dir: str = ""
    """Folder made by ``python run.py keys``; turns on CURVE for the ``listen`` endpoint."""
    heartbeat_interval: float = field(
        default=1.0,
        # Below 50 ms the heartbeats (one message per actor per interval) become a real
        # share of the broker's traffic; above a minute liveness means little.
        metadata=check(min=0.05, max=60.0, expected="seconds from 0.05 to 60"),
    )
    """Seconds between actor heartbeats."""
    heartbeat_timeout: float = field(
        default=10.0,
        # An hour: past any GIL stall; a dead actor's jobs wait this long to move.
        metadata=check(positive=True, max=3600.0, expected="seconds above 0, at most 3600"),
    )
    """An actor silent this long is presumed dead and its jobs go elsewhere. Generous:
    a learner's worker thread holding the GIL can delay a heartbeat by seconds."""
    max_job_tries: int = field(
        default=3,
        # Each try may cost an actor its life (a poison job): more than 10 only burns
        # the restart budget.
        metadata=check(min=1, max=10),
    )
    """A job whose actor dies (or holds it past its deadline) this many times fails
    instead of being retried."""
    bad_reply_limit: int = field(default=3, metadata=check(min=1, max=1000))
    """Wrong replies (another kind than asked for, other worlds than asked for) an actor
    may send before it is dropped: an attached one is disconnected, one of the head's
    own is killed and restarted (a restart like a crash's, within ``restart_limit``)."""
    restart_limit: int = field(default=5, metadata=check(min=1, max=1000))
    """Restart intensity: at most this many actor restarts within ``restart_window``..."""
    restart_window: float = field(
        default=60.0,
        metadata=check(positive=True, max=86400.0, expected="seconds above 0, at most a day"),
    )
    """...seconds; one more stops the run with an error (as OTP supervisors do)."""
    shutdown_grace: float = field(
        default=5.0,
        # The head waits this long at the end (and per stopped actor): beyond five minutes
        # a finished run or a Ctrl-C looks hung.
        metadata=check(positive=True, max=300.0, expected="seconds above 0, at most 300"),
    )
    """Seconds an actor gets to exit after SIGTERM before it is killed."""
    max_frame_bytes: int = field(
        default=DEFAULT_MAX_FRAME,
        metadata=check(
            min=MIN_FRAME,
            max=MAX_FRAME,
            expected=f"bytes from {MIN_FRAME} (4 MiB) to {MAX_FRAME} (1 GiB)",
        ),
    )
    """Largest message accepted; bigger frames are rejected and logged."""
    remote_events_per_s: float = field(
        default=200.0,
        # A learner logs a few events a second and an environment actor tens: 200 leaves
        # room, and each event costs one per started KiB, so a flooding key holder adds at
        # most ~200 KiB a second (~0.7 GB an hour) to the head's disk.
        metadata=check(min=0.0, max=1e7, expected="events per second from 0 (no limit) up"),
    )
    """Most events per second the head writes from one key (an attached actor's
    forwarded log, :mod:`runtime.forward`; an event of more than 1 KiB counts once per
    started KiB), with bursts of up to 20 s worth; past it the rest of a batch is dropped
    and counted (``remote_events_limited``). 0: no limit."""


AUTO = "auto"
"""The ``count`` that the head works out from the cores (:func:`auto_count`)."""
AUTO_RULES: dict[str, tuple[float, int]] = {"environment": (1.0, 16), "learner": (1.0, 8)}
"""``count = "auto"`` by role: (actors per usable core, most actors); any other role gets 1.
Rounded down, at least 1. Environments step worlds and run policy code, so one per core;
a learner steps its job's envs and trains on them (one busy core, or one per env with
``[training] env_workers``), so one per core lets as many RL sub-actions train at once
as there are cores (environments are idle while they train: the slow agent starts RL
sub-actions of one chain together). Measured on the default diamond run on 2 cores:
1 learner 406 s at 0.55 of core-seconds busy, 2 learners 319 s at 0.93, the same final
success (BENCHMARKS.md). The caps keep a big machine's memory in hand (each actor
~300 MB)."""


def auto_count(role: str, cores: int) -> int:
    """The actors of ``role`` that ``count = "auto"`` starts on ``cores`` usable cores:
    environment = cores (at most 16), learner = cores (at most 8), any other role 1. On
    2 cores: 2 environments and 2 learners."""
    per_core, cap = AUTO_RULES.get(role, (0.0, 1))
    return max(1, min(cap, int(cores * per_core)))


def resolve_counts(
    actors: dict[str, ActorSettings], cores: int
) -> tuple[dict[str, ActorSettings], dict[str, str]]:
    """``actors`` with every ``count = "auto"`` replaced by :func:`auto_count`, and how
    each role's count was chosen (``auto`` or ``explicit``)."""
    how = {role: AUTO if a.count == AUTO else "explicit" for role, a in actors.items()}
    resolved = {
        role: dataclasses.replace(a, count=auto_count(role, cores)) if a.count == AUTO else a
        for role, a in actors.items()
    }
    return resolved, how


COUNT = check(min=0, max=MAX_ACTORS, words=(AUTO,))
"""The check of ``[actors.ROLE] count``."""


@dataclass
class ActorSettings:
    count: int | str = field(default=AUTO, metadata=COUNT)
    """How many actor processes of this role the head starts: an integer (0: none here;
    they may attach from elsewhere), or ``"auto"`` (the default), worked out at the run's
    start from the cores this process may use (CPU affinity, lowered to a cgroup CPU
    quota; :func:`runtime.cpu.usable_cores`): environment = cores (at most 16), learner =
    cores (at most 8), any other role 1 — 2 and 2 on two cores. The run
    logs what it chose (``actor_counts``: cores, where that number came from, count and
    rule per role) and records the numbers in ``config.json``, so ``--resume`` keeps them."""
    capacity: int = field(default=1, metadata=check(min=1, max=MAX_CAPACITY))
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
_EXAMPLES = {int: "3", float: "1.5", str: '"text"', bool: "true"}


def _describe(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return "a table" if isinstance(value, dict) else f"a list of {len(value)}"
    kind = {bool: "boolean", int: "integer", float: "number", str: "string"}
    return f"{kind.get(type(value), type(value).__name__)} {value!r}"


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
    if isinstance(hint, types.UnionType):  # e.g. int | str: "auto" or a number
        kinds = typing.get_args(hint)
        if type(value) in kinds:
            return value
        name = key.rsplit(".", 1)[-1]
        raise ConfigError(
            file, key, " or ".join(_TYPE_NAMES.get(k, str(k)) for k in kinds), _describe(value),
            "write it as, e.g., " + " or ".join(f"{name} = {_EXAMPLES[k]}" for k in kinds),
        )  # fmt: skip
    if hint is float and type(value) is int:
        return float(value)
    if hint is float and type(value) is float and not math.isfinite(value):
        raise ConfigError(
            file, key, "a finite number", repr(value),
            "nan and inf are not settings; write a number (a limit of 0 means none where "
            "the key's doc says so)",
        )  # fmt: skip
    if type(value) is not hint:
        example = _EXAMPLES.get(hint, "")
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
        rule = meta.get(CHECK) or (checks or {}).get(key)
        if rule is not None and rule.words and type(value) not in (int, str):
            raise rule.error(file, path, value, _default(fields[key]))  # says the words too
        values[key] = _convert(file, path, hints[key], value, meta.get(FIELD_CHECKS))
        if rule is not None:
            _hold(file, path, rule, values[key], _default(fields[key]))
        _within_limit(file, path, rule, values[key], _default(fields[key]))
    return cls(**values)


NUMBER_LIMIT = 2**53
"""The range (±) of every numeric key beyond its own check: what a run records travels as
msgpack (64-bit integers) and JSON (doubles, exact to 2^53), so a number past this would
crash a codec mid-run instead of being refused here."""


def _within_limit(file: str, key: str, rule: Check | None, value: Any, default: Any) -> None:
    """Raise :class:`ConfigError` for a number (an item of a list, a value of a table)
    past :data:`NUMBER_LIMIT`, naming the key and the range it has."""
    if isinstance(value, dict):
        items = [(f"{key}.{k}", v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
    else:
        items = [(key, value)]
    for where, item in items:
        if type(item) not in (int, float) or abs(item) <= NUMBER_LIMIT:
            continue
        noun = "an integer" if type(item) is int else "a number"
        low = rule.min if rule is not None and rule.min is not None else -NUMBER_LIMIT
        if rule is not None and rule.positive:
            low = 0
        name = key.rsplit(".", 1)[-1]
        raise ConfigError(
            file, where, f"{noun} from {_num(low)} to {_num(NUMBER_LIMIT)}", repr(item),
            f"set {name} to a value in that range (the default is {default})",
        )  # fmt: skip


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
    """A path as given, or a bare name looked up in :data:`CONFIG_DIR` (``.toml`` may be
    left off: ``diamond``)."""
    path = Path(name)
    if path.is_file():
        return path
    if not path.is_absolute() and path.parent == Path("."):
        for candidate in (CONFIG_DIR / path, CONFIG_DIR / f"{name}.toml"):
            if candidate.is_file():
                return candidate
    if path.exists():
        return path  # not a file: loading it says so, naming it
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
        # utf-8-sig: a byte-order mark (some Windows editors write one) is not TOML.
        table = tomllib.loads(path.read_text(encoding="utf-8-sig"))
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
    if not isinstance(table, dict):
        raise ConfigError(
            str(path), "", "a run's config.json (a JSON object of sections)", _describe(table),
            "the file was replaced or damaged: resume a run folder written by `run.py --config`, "
            "or start a new run from the TOML file",
        )  # fmt: skip
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
    if rt.listen:
        _check_listen(f, rt.listen)

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


def _check_listen(file: str, listen: str) -> None:
    """``tcp://HOST:PORT`` with a port ZeroMQ binds as written: 1 to 65535, or ``*``.
    (ZeroMQ takes a larger number modulo 65536 and binds another port without a word.)"""
    host, colon, port = listen.removeprefix("tcp://").rpartition(":")
    if colon and host and (port == "*" or (port.isdigit() and 1 <= int(port) <= 65535)):
        return
    raise ConfigError(
        file, "runtime.listen", "'tcp://HOST:PORT' with a port from 1 to 65535 or '*'",
        repr(listen),
        'e.g. listen = "tcp://127.0.0.1:5555" ("tcp://127.0.0.1:*" picks a free port)',
    )  # fmt: skip
