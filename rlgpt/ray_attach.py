"""``attach ROLE --ray ADDRESS --count N``: place N attach processes through Ray.

Ray chooses the nodes (each copy asks for ``--gpus-per-learner`` GPUs and
``--cpus-per-learner`` CPUs) and restarts a copy whose process or node died; ZeroMQ stays
the transport. Each copy is a small Ray actor, :class:`AttachHost`, that runs the same
``python -m rlgpt attach ROLE --connect ...`` as a person would, as its child process,
and returns that process's exit status. A subprocess rather than the attach code inside
the Ray worker, because the attach installs signal handlers (main thread only), sets
process limits and may start processes of its own; as a child it is stopped whole: it
gets SIGTERM the moment its Ray worker dies (``PR_SET_PDEATHSIG``), and ``--parent-pid``
makes it leave on its own if it ever outlives that worker.

The keys: the launcher reads the CURVE client keys here (``--keys DIR``, or the run's
own with ``--run-dir``) and hands them to each Ray actor as a method argument, in memory;
the actor writes them to its child's standard input (``--keys-stdin``). They are never
on a command line or in an environment variable (which ``ps`` shows to every local
user), and no key file has to exist on the Ray nodes. They do travel inside Ray's own
task messages, and a Ray cluster without authentication runs code for anyone who
reaches its ports: on a network you do not trust, turn on Ray's token authentication
and TLS (``RAY_USE_TLS``), or attach without Ray, with key files on each machine.

Stopping: Ctrl-C or SIGTERM kills every Ray actor this launcher made (their children
follow through the death signal); the actors are owned by this launcher's Ray job, so
even a launcher killed with SIGKILL leaves none behind (Ray ends a job's actors with
its driver). A copy whose attach exits 0 (the head finished the run) or 2 (refused:
wrong run, wrong keys, bad arguments) is not started again.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from rlgpt.keys import keys_to_text, run_keys
from runtime.security import CurveClient, KeysMissing, is_loopback

RAY_EXTRA = "pip install -e '.[ray]' (from a checkout) or pip install 'rlgpt-actors[ray]'"
"""How to get Ray: the project's optional extra."""
PLACE_PROGRESS_S = 5.0
"""How often the launcher says which copies Ray has not placed yet."""
PLACE_TIMEOUT_S = 600.0
"""How long Ray may take to find room for every copy when ``--wait`` does not say (a
cluster short of GPUs never does): then the launcher stops, naming what it asked for."""
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
SERVE_POLL_S = 1.0
"""How long one wait for a copy to end may block before the launcher looks again (and
a pending Ctrl-C is raised)."""
STOP_TIMEOUT_S = 30.0
"""How long the launcher waits for Ray to kill the copies and let it go, on the way out."""


class LaunchError(Exception):
    """What went wrong, for an ``attach error:`` line (status 2 before any copy started,
    1 after)."""


def launch(args: argparse.Namespace) -> int:
    """Place ``args.count`` copies of this attach through Ray; returns the exit status."""
    try:
        import ray
    except ImportError:
        print(
            f"attach error: --ray needs Ray, which is not installed: {RAY_EXTRA}",
            file=sys.stderr,
        )
        return 2
    try:
        argv, keys_text = child_command(args)
    except LaunchError as exc:
        print(f"attach error: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no reports to Ray's servers
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    # Ctrl-C stops every copy, also when this process was started with SIGINT ignored
    # (a background job of a non-interactive shell inherits that, and Python then
    # leaves SIGINT ignored: the launcher could not be stopped by it).
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    hosts: list = []
    interrupted = False
    try:
        started = time.monotonic()
        try:
            # ray.init retries an address where nothing listens for minutes: ask first.
            _check_reachable(args.ray)
            ray.init(address=args.ray, logging_level="WARNING", log_to_driver=True)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise LaunchError(
                f"no Ray cluster at --ray {args.ray} ({exc}); start one with `ray start "
                "--head` and pass the address it prints (HOST:PORT)"
            ) from None
        print(
            f"attach: connected to Ray at {args.ray} in {time.monotonic() - started:.1f} s; "
            f"placing {args.count} {args.role} (each {args.gpus_per_learner:g} GPU, "
            f"{args.cpus_per_learner:g} CPU)",
            file=sys.stderr,
            flush=True,
        )
        host_class = ray.remote(
            num_cpus=args.cpus_per_learner,
            num_gpus=args.gpus_per_learner,
            max_restarts=args.max_restarts,
        )(AttachHost)
        hosts = [host_class.remote() for _ in range(args.count)]
        _place(ray, hosts, args)
        code_root = str(Path(__file__).resolve().parent.parent)
        return _serve(ray, hosts, argv, keys_text, code_root, args)
    except KeyboardInterrupt:
        interrupted = True
        print("attach: stopping every copy", file=sys.stderr, flush=True)
        return 130
    except LaunchError as exc:
        print(f"attach error: {exc}", file=sys.stderr)
        return 2 if not hosts else 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        if not _stop_ray(ray, hosts):
            # Ray did not let go in time: the copies' actors die with this driver (they
            # are not detached) and each attach process with its actor (PDEATHSIG).
            print(
                f"attach: Ray did not shut down within {STOP_TIMEOUT_S:g} s; leaving it",
                file=sys.stderr,
                flush=True,
            )
            sys.stdout.flush()
            os._exit(130 if interrupted else 1)


def child_command(args: argparse.Namespace) -> tuple[list[str], str]:
    """The attach each copy runs (after ``python``), and the keys text for its standard
    input ('' without keys). Raises :class:`LaunchError` for what cannot work."""
    if args.count < 1:
        raise LaunchError(f"--count {args.count}: start at least 1")
    if args.gpus_per_learner < 0 or args.cpus_per_learner < 0:
        raise LaunchError("--gpus-per-learner and --cpus-per-learner cannot be negative")
    if args.keys_stdin:
        raise LaunchError("--keys-stdin is for the copies themselves; pass --keys DIR")
    if args.name:
        # A copy started again would ask for its name while the broker still holds it
        # for the dead one (until the heartbeat timeout), and be refused.
        raise LaunchError("--name does not go with --ray: the head names each copy")
    keys = args.keys or run_keys(args.connect, args.run_dir, _key_name(args))
    try:
        curve = CurveClient.load(Path(keys), _key_name(args)) if keys else None
    except KeysMissing as exc:
        raise LaunchError(str(exc)) from None
    if curve is None and args.connect.startswith("tcp://"):
        raise LaunchError(
            f"--ray needs keys to reach {args.connect} (every tcp endpoint demands CURVE):"
            " pass --keys DIR with the head's server.key and a client key it accepts"
        )
    if not args.connect.startswith("tcp://"):
        raise LaunchError(f"--connect {args.connect}: Ray places copies on other nodes; use tcp")
    if is_loopback(args.connect):
        print(
            f"attach: note: {args.connect} is a loopback address: only copies Ray places "
            "on the head's own machine can reach it",
            file=sys.stderr,
        )
    device = args.device
    if args.gpus_per_learner > 0 and device == "cpu":
        device = "cuda"  # Ray sets CUDA_VISIBLE_DEVICES to the GPUs it gave the copy
    argv = ["-m", "rlgpt", "attach", args.role, "--connect", args.connect]
    argv += ["--device", device, "--capacity", str(args.capacity)]
    argv += ["--max-frame-bytes", str(args.max_frame_bytes)]
    if args.run_id:
        argv += ["--run-id", args.run_id]
    if args.wait is not None:
        argv += ["--wait", f"{args.wait:g}"]
    if args.quiet:
        argv.append("--quiet")
    if getattr(args, "allow_version_mismatch", False):
        argv.append("--allow-version-mismatch")
    if getattr(args, "events_queue", None) is not None:
        argv += ["--events-queue", str(args.events_queue)]
    if curve is not None:
        argv.append("--keys-stdin")
    return argv, keys_to_text(curve) if curve is not None else ""


RAY_CONNECT_TIMEOUT_S = 10.0
"""How long a TCP connection to a Ray head's port may take before it counts as absent."""


def _check_reachable(address: str) -> None:
    """ConnectionError when ``HOST:PORT`` does not accept a TCP connection; other
    forms (``auto``, ``ray://...``) are left to Ray."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), RAY_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ConnectionError(f"{host}:{port} does not answer: {exc.strerror or exc}") from None


def _key_name(args: argparse.Namespace) -> str:
    # --key-name comes with per-machine keys (`run.py keys add NAME`); "client" before.
    return getattr(args, "key_name", "") or "client"


def placement_limit(wait: float | None) -> float:
    """Seconds Ray may take to place every copy, from ``--wait``: not given,
    PLACE_TIMEOUT_S; 0, for ever (as ``attach`` itself reads 0)."""
    if wait is None:
        return PLACE_TIMEOUT_S
    return wait if wait > 0 else float("inf")


def _place(ray, hosts: list, args: argparse.Namespace) -> None:
    """Wait until Ray has started every copy; print where each went and how long the
    whole placement took."""
    started = time.monotonic()
    limit = placement_limit(args.wait)
    pending = {host.where.remote(): i for i, host in enumerate(hosts)}
    while pending:
        left = limit - (time.monotonic() - started)
        timeout = max(0.0, min(PLACE_PROGRESS_S, left))
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
        waited = time.monotonic() - started
        for ref in ready:
            i = pending.pop(ref)
            print(f"attach: {_where_line(args, i, ray.get(ref))} after {waited:.1f} s", flush=True)
        if not ready and waited >= limit:
            raise LaunchError(
                f"Ray placed {args.count - len(pending)} of {args.count} within {limit:g} s "
                f"(--wait): the cluster lacks free room for {args.gpus_per_learner:g} GPU and "
                f"{args.cpus_per_learner:g} CPU each (`ray status` shows what is free)"
            )
        if not ready:
            print(
                f"attach: waiting for Ray to place {len(pending)} of {args.count} "
                f"({waited:.0f} s; `ray status` shows free resources)",
                file=sys.stderr,
                flush=True,
            )
    took = time.monotonic() - started
    print(f"attach: placed {args.count} {args.role} actors through Ray in {took:.2f} s", flush=True)


def _where_line(args: argparse.Namespace, i: int, where: dict) -> str:
    gpus = ",".join(str(g) for g in where["gpus"]) or "none"
    return (
        f"{args.role} {i + 1}/{args.count} placed on node {where['ip']} (host {where['host']},"
        f" Ray node {where['node']}), GPUs {gpus}, pid {where['pid']}"
    )


def _serve(ray, hosts: list, argv: list[str], keys: str, code_root: str, args) -> int:
    """Run every copy's attach until it ends; start again one that crashed, up to
    ``--max-restarts`` times. Returns 0 when all ended 0, else the worst status."""
    running = {host.run.remote(argv, keys, code_root): i for i, host in enumerate(hosts)}
    restarts = [0] * len(hosts)
    worst = 0
    while running:
        # A short timeout: the loop comes back to Python every second, so a Ctrl-C (or
        # SIGTERM) is raised here at once, whatever Ray's wait does with signals.
        ready, _ = ray.wait(list(running), num_returns=1, timeout=SERVE_POLL_S)
        for ref in ready:
            i = running.pop(ref)
            name = f"{args.role} {i + 1}/{args.count}"
            try:
                code = ray.get(ref)
                why = f"its attach exited with status {code}"
            except ray.exceptions.RayActorError as exc:
                code, why = None, f"its Ray actor died ({type(exc).__name__})"
            if code in (0, 2):
                print(f"attach: {name} ended: {why}", file=sys.stderr, flush=True)
                worst = max(worst, code)
                continue
            if restarts[i] >= args.max_restarts:
                print(
                    f"attach: {name} ended: {why}; not started again (--max-restarts "
                    f"{args.max_restarts})",
                    file=sys.stderr,
                    flush=True,
                )
                worst = max(worst, 1)
                continue
            restarts[i] += 1
            print(
                f"attach: {name}: {why}; starting it again ({restarts[i]} of {args.max_restarts})",
                file=sys.stderr,
                flush=True,
            )
            try:
                where = ray.get(hosts[i].where.remote(), timeout=PLACE_TIMEOUT_S)
            except ray.exceptions.RayError as exc:
                print(f"attach: {name} cannot be placed again ({exc})", file=sys.stderr)
                worst = max(worst, 1)
                continue
            print(f"attach: {_where_line(args, i, where)} (again)", flush=True)
            running[hosts[i].run.remote(argv, keys, code_root)] = i
    return worst


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop_ray(ray, hosts: list) -> bool:
    """Kill the copies' actors and leave the cluster, in a thread given
    :data:`STOP_TIMEOUT_S`: a Ctrl-C must end the launcher even when Ray is slow to answer.
    True when it finished in time."""

    def stop() -> None:
        for host in hosts:
            with contextlib.suppress(Exception):
                ray.kill(host, no_restart=True)
        if ray.is_initialized():
            ray.shutdown()

    worker = threading.Thread(target=stop, name="ray-stop", daemon=True)
    worker.start()
    worker.join(STOP_TIMEOUT_S)
    return not worker.is_alive()


class AttachHost:
    """One copy, as a Ray actor: says where Ray put it and runs the attach process."""

    def where(self) -> dict:
        import ray

        return {
            "host": socket.gethostname(),
            "ip": ray.util.get_node_ip_address(),
            "node": ray.get_runtime_context().get_node_id()[:8],
            "gpus": [str(g) for g in ray.get_gpu_ids()],
            "pid": os.getpid(),
        }

    def run(self, argv: list[str], keys: str, code_root: str) -> int:
        """Run ``python ARGV`` to its end and return its status (negative: killed by
        that signal). ``code_root``: the launcher's source tree, used when the same path
        holds it here (one machine, or a shared filesystem); else the installed rlgpt."""
        here = Path(code_root) / "rlgpt" / "cli.py"
        proc = subprocess.Popen(
            [sys.executable, *argv, "--parent-pid", str(os.getpid())],
            stdin=subprocess.PIPE if keys else subprocess.DEVNULL,
            cwd=code_root if here.is_file() else None,
            preexec_fn=_die_with_parent,
        )
        try:
            if keys:
                assert proc.stdin is not None
                proc.stdin.write(keys.encode())
                proc.stdin.close()
            return proc.wait()
        finally:
            if proc.poll() is None:  # this method was interrupted: leave nothing behind
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


_LIBC = ctypes.CDLL(None, use_errno=True)
"""Loaded here, not in the forked child: a Ray worker runs threads, and between fork and
exec the child should do no more than one system call."""


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the Ray worker that started it dies."""
    _LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
