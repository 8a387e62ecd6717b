"""A real head process whose driver waits for its actors and then runs until signalled.

Used by the signal-handling tests: ``python tests/head_until_signal.py CONFIG``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime import config  # noqa: E402
from runtime.events import log  # noqa: E402
from runtime.head import Head, new_run_dir, run_head  # noqa: E402


async def wait_then_hold(head: Head) -> dict:
    for role, spec in head.settings.actors.items():
        await head.wait_for(role, spec.count)
    log.info("actors_ready")
    await trio.sleep_forever()
    return {}


if __name__ == "__main__":
    settings = config.load(sys.argv[1])
    run_id, run_dir = new_run_dir(settings)
    sys.exit(trio.run(run_head, settings, run_dir, run_id, wait_then_hold))
