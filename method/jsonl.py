"""JSON-lines files that a kill cannot tear: the run's journal and its episode ledger.

A record is one JSON value on one line, and it is *whole* once its newline is on disk:
:func:`append` writes every record of a call in one ``write`` and fsyncs it, so a kill
leaves at most one fragment — the start of a record, with no newline — at the end of the
file. Readers and writers agree on that fragment:

- :func:`read` leaves it out (logged as ``jsonl_fragment_skipped``);
- :func:`append` cuts it off before writing, so the next record starts on a line of its
  own instead of being glued onto the fragment (and lost with it).

A fragment that happens to be a whole JSON object (cut exactly before its newline) is a
whole record: :func:`read` returns it and :func:`append` gives it its newline. A line
*inside* the file that is not JSON was not left by a kill (an older version appending
onto a fragment, or a hand edit): :func:`read` skips it, naming the file and line
(``jsonl_line_skipped``), or with ``strict`` raises ValueError naming them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from runtime.events import log

TAIL_CHUNK = 1 << 16
"""Bytes read per step when looking back from the end of a file for the last newline:
one step covers most records (calls with their prompts are a few KiB to tens of KiB)."""


def encode(record: Any) -> str:
    """One record as its line (newline included); ``default=str`` like the events."""
    return json.dumps(record, sort_keys=True, default=str) + "\n"


def _whole(fragment: bytes) -> bool:
    """Whether a line with no newline is nonetheless a whole record (a JSON object: a
    cut object never parses, so a number cut short cannot pass for one)."""
    try:
        return isinstance(json.loads(fragment), dict)
    except ValueError:  # UnicodeDecodeError is a ValueError too
        return False


def _last_newline_end(f: Any, size: int) -> int:
    """Offset just past the last newline of the open binary file ``f`` (0 when none)."""
    end = size
    while end > 0:
        start = max(0, end - TAIL_CHUNK)
        f.seek(start)
        chunk = f.read(end - start)
        at = chunk.rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def append(path: Path, records: Iterable[Any]) -> None:
    """Append ``records`` whole, after cutting off a torn fragment at the end of ``path``;
    flushed and fsynced before returning."""
    data = "".join(encode(r) for r in records).encode()
    if not data:
        return
    with open(path, "ab+") as f:
        size = f.seek(0, os.SEEK_END)
        if size:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                start = _last_newline_end(f, size)
                f.seek(start)
                fragment = f.read(size - start)
                if _whole(fragment):
                    data = b"\n" + data
                else:
                    f.truncate(start)
                    log.warning(
                        "jsonl_fragment_dropped", file=str(path), at_byte=start, bytes=size - start
                    )
        f.write(data)  # "a" mode: always at the (new) end
        f.flush()
        os.fsync(f.fileno())


def rewrite(path: Path, records: Iterable[Any]) -> None:
    """Replace ``path`` by ``records`` atomically: a kill leaves the old file or the new."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write("".join(encode(r) for r in records))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a crash
    finally:
        os.close(directory)


def read(path: Path, strict: bool = False) -> list[tuple[int, Any]]:
    """``(line number, value)`` of every whole record of ``path`` (none when it does not
    exist). Blank lines and a torn fragment at the end are left out; so are lines that
    are not JSON, logged with the file and line — or, ``strict``, ValueError naming
    them."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # after the last newline: b"" when the file ends whole
    records: list[tuple[int, Any]] = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            records.append((number, json.loads(raw)))
        except ValueError as exc:
            if strict:
                raise ValueError(f"{path}:{number}: not JSON ({exc})") from None
            log.warning(
                "jsonl_line_skipped", file=str(path), line=number, problem=f"not JSON: {exc}"
            )
    if tail.strip():
        if _whole(tail):
            records.append((len(lines) + 1, json.loads(tail)))
        else:
            log.warning(
                "jsonl_fragment_skipped", file=str(path), line=len(lines) + 1, bytes=len(tail)
            )
    return records
