"""The local model server's process: ``llama_cpp.server``, watched for its parent.

:mod:`llm.local_server` runs this file as a script (stdlib only, nothing of the project
imported)::

    python llm/server_child.py --parent-pid PID -- --model F.gguf --port P ...

It starts a daemon thread that ends the process at once when the head that started it
is gone (its parent pid changes: the head was killed with SIGKILL and could not stop
us), prints llama.cpp's system info (the CPU features its build uses) on one line
starting with :data:`SYSTEM_INFO_MARK`, which the head reads back from the server's log
into ``model_server_ready``, then runs ``python -m llama_cpp.server ARGS`` in this same
process. The head's actor processes watch their parent the same way
(``runtime.actor``). ``prctl(PR_SET_PDEATHSIG)`` would not do: it fires when the
*thread* that forked us exits, and trio starts
processes from worker threads that come and go.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time

WATCH_S = 0.5
"""How often the parent is looked for: a killed head's server is gone within this."""
SYSTEM_INFO_MARK = "server_child: system_info: "
"""Starts the log line with llama.cpp's system info (``llm.local_server`` reads it)."""


def _print_system_info() -> None:
    """The CPU features the installed llama.cpp build uses, on one line of the log: a
    build that chose instructions this CPU lacks dies at its first request (SIGILL), and
    this line says what it was built for."""
    try:
        import llama_cpp

        info = llama_cpp.llama_print_system_info()
    except (ImportError, AttributeError, OSError) as exc:  # the server's own start says more
        info = f"unknown ({type(exc).__name__}: {exc})"
    if isinstance(info, bytes):
        info = info.decode("utf-8", "replace")
    print(SYSTEM_INFO_MARK + " ".join(str(info).split()), file=sys.stderr, flush=True)


def _watch(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            print(f"server_child: parent {parent} is gone; exiting", file=sys.stderr, flush=True)
            os._exit(1)  # no clean-up worth waiting for: the model is read-only
        time.sleep(WATCH_S)


def main(argv: list[str]) -> None:
    # Run as a script, this file's folder (llm/) is first on sys.path: its modules
    # (errors, models, backend...) must not shadow anything the server imports.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if len(argv) < 3 or argv[0] != "--parent-pid" or argv[2] != "--":
        sys.exit("usage: server_child.py --parent-pid PID -- LLAMA_CPP_SERVER_ARGS...")
    parent = int(argv[1])
    if os.getppid() != parent:
        sys.exit(f"server_child: parent {parent} is already gone")
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="parent-watch").start()
    _print_system_info()
    sys.argv = ["llama_cpp.server", *argv[3:]]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
