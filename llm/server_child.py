"""The local model server's process: ``llama_cpp.server``, watched for its parent.

:mod:`llm.local_server` runs this file as a script (stdlib only, nothing of the project
imported)::

    python llm/server_child.py --parent-pid PID -- --model F.gguf --port P ...

It starts a daemon thread that ends the process at once when the head that started it
is gone (its parent pid changes: the head was killed with SIGKILL and could not stop
us), prints llama.cpp's system info (the CPU features its build uses) on one line
starting with :data:`SYSTEM_INFO_MARK`, which the head reads back from the server's log
into ``model_server_ready``, then runs ``python -m llama_cpp.server ARGS`` in this same
process. Started with ``--cache true`` and ``--logits_all false``, its prompt cache keeps
no logits (:func:`_lean_prompt_cache`). The head's actor processes watch their parent the same way
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


def _option(args: list[str], name: str) -> str:
    """The value given to ``--name`` in the server's arguments, '' when none."""
    for flag, value in zip(args, args[1:], strict=False):
        if flag == f"--{name}":
            return value.lower()
    return ""


def _lean_prompt_cache() -> None:
    """Make the server's RAM prompt cache keep each state without its logits.

    llama-cpp-python's ``Llama.save_state`` copies its logits array with every state, and
    without ``logits_all`` that array is n_batch rows of the whole vocabulary (512 ×
    151,936 floats for Qwen2.5: 311 MB), written into every cache entry and not counted
    in ``cache_size``, which counts llama.cpp's state only (12–115 MB a prompt here): a
    1 GiB cache would hold ~10 GB. Without ``logits_all`` they are never read back (the
    sampler reads llama.cpp's own logits, and a restored state is evaluated again from
    its last token), so one row is kept: ``load_state`` broadcasts it where it writes
    them back."""
    try:
        import llama_cpp

        ram_cache = llama_cpp.LlamaRAMCache
    except (ImportError, AttributeError):  # the server's own start says more
        return

    class LeanRAMCache(ram_cache):  # type: ignore[misc,name-defined]
        def __setitem__(self, key, value):  # type: ignore[no-untyped-def]
            value.scores = value.scores[-1:].copy()
            super().__setitem__(key, value)

    llama_cpp.LlamaRAMCache = LeanRAMCache  # the server makes its cache from this name
    print("server_child: the prompt cache keeps no logits", file=sys.stderr, flush=True)


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
    args = argv[3:]
    if _option(args, "cache") == "true" and _option(args, "logits_all") == "false":
        _lean_prompt_cache()
    sys.argv = ["llama_cpp.server", *args]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
