"""What a run has already done, kept on disk so that a resumed run does not redo it.

Two append-only JSON-lines files in the run directory:

- ``calls.jsonl``: every agent call (model or offline): role, purpose, the request, the
  reply, the rendered prompt, tokens and latency. A call is keyed by the hash of
  (role, purpose, request); a resumed run that makes the same call again gets the
  recorded reply back instead of asking the model.
- ``jobs.jsonl``: every finished rollout and training job, keyed by the hash of its
  encoded request, with its encoded result. A resumed run replays them.

Replay works because everything an agent decides is a function of what it was told:
the same replies and results in the same order of dependency give the same requests.
Each line is written whole, flushed and fsynced before the caller goes on
(:mod:`method.jsonl`), so a head killed at any moment loses at most the call or job in
flight, and the record written next is not glued onto what the kill cut.

Every record is checked when loaded (its keys and their types; a job's result is
base64 that decodes to the kind it names). A record that fails is **skipped and
logged** (``journal_record_skipped``, with the file, line and problem), not an error:
each record only saves work that can be done again — a skipped call is asked again, a
skipped job is run again, and the ledger books a redone job's episodes by a stable id so
they are not counted twice. An error would leave the user to delete the line by hand to
get exactly that.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm.backend import Backend, CallResult
from messages import codec
from method import jsonl
from runtime.events import log

CALLS_FILE = "calls.jsonl"
JOBS_FILE = "jobs.jsonl"


def call_key(
    role: str, purpose: str, request: dict[str, Any], temperature: float | None = None
) -> str:
    """Content hash of one agent call (a temperature asked for is part of it)."""
    what: list[Any] = [role, purpose, request]
    if temperature is not None:
        what.append({"temperature": temperature})
    text = json.dumps(what, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


EXECUTION_ONLY = {"TrainRequest": ("subproc", "max_world_steps")}
"""Fields of a job request that say how or how far it runs, not what it is: left out of
its key, so ``--resume`` replays a recorded job although the machine's cores (``subproc``)
or the order in which other work finished (a share of the budget) came out otherwise."""


def job_key(request: Any) -> str:
    """Content hash of one job request (its wire encoding, with its
    :data:`EXECUTION_ONLY` fields at their defaults)."""
    names = EXECUTION_ONLY.get(type(request).__name__, ())
    if names and dataclasses.is_dataclass(request):
        defaults = {f.name: f.default for f in dataclasses.fields(request) if f.name in names}
        request = dataclasses.replace(request, **defaults)
    return hashlib.sha256(codec.encode(request)).hexdigest()


@dataclass
class Totals:
    """Running totals of the calls made (replayed ones counted apart)."""

    calls: int = 0
    replayed: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    by_role: dict[str, int] = field(default_factory=dict)


RUN_MARK = "@run"
"""What a path inside the run folder is recorded as, in place of the folder: a run moved
or copied elsewhere resumes with its recorded jobs (their policies, their requests' keys)
found where the folder is now."""


def _rewrite(value: Any, change: Callable[[str], str]) -> Any:
    """``value`` with ``change`` applied to every string in it (message dataclasses,
    lists, tuples and dicts, nested)."""
    if isinstance(value, str):
        return change(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        updates = {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            old = getattr(value, f.name)
            new = _rewrite(old, change)
            if new is not old:
                updates[f.name] = new
        return dataclasses.replace(value, **updates) if updates else value
    if isinstance(value, list):
        new = [_rewrite(v, change) for v in value]
        return new if any(a is not b for a, b in zip(new, value, strict=True)) else value
    if isinstance(value, tuple):
        new = tuple(_rewrite(v, change) for v in value)
        return new if any(a is not b for a, b in zip(new, value, strict=True)) else value
    if isinstance(value, dict):
        new = {k: _rewrite(v, change) for k, v in value.items()}
        return new if any(new[k] is not value[k] for k in value) else value
    return value


def portable(value: Any, run_dir: Path) -> Any:
    """``value`` with every path inside ``run_dir`` written from :data:`RUN_MARK`."""
    prefixes = sorted({str(run_dir), os.path.abspath(run_dir), str(Path(run_dir).resolve())},
                      key=len, reverse=True)  # fmt: skip

    def change(s: str) -> str:
        for p in prefixes:
            if s == p or s.startswith(p + os.sep):
                return RUN_MARK + s[len(p) :]
        return s

    return _rewrite(value, change)


def local(value: Any, run_dir: Path) -> Any:
    """:func:`portable`'s inverse, for the folder the run is in now."""

    def change(s: str) -> str:
        if s == RUN_MARK or s.startswith(RUN_MARK + os.sep):
            return str(run_dir) + s[len(RUN_MARK) :]
        return s

    return _rewrite(value, change)


class Journal:
    """The run's record of calls and jobs; loads what an earlier attempt left. Paths
    inside the run folder are recorded from :data:`RUN_MARK` (:func:`portable`): the
    folder may move between attempts."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._calls: dict[str, dict[str, Any]] = {}
        self._jobs: dict[str, dict[str, Any]] = {}
        self._lines: dict[str, int] = {}  # job key → its line in jobs.jsonl, for logs
        self.totals = Totals()
        self.skipped = 0
        """Records loaded that failed their check (each logged; their work is redone)."""
        for name, store, problem_of in (
            (CALLS_FILE, self._calls, call_problem),
            (JOBS_FILE, self._jobs, job_problem),
        ):
            path = run_dir / name
            for number, record in jsonl.read(path):
                problem = problem_of(record)
                if problem:
                    self._skip(path, number, problem)
                    continue
                store[record["key"]] = record
                if store is self._jobs:
                    self._lines[record["key"]] = number
        self.loaded_calls = len(self._calls)
        self.loaded_jobs = len(self._jobs)
        for record in self._calls.values():
            self._count(record, replayed=False)

    # ------------------------------------------------------------------ calls

    async def call(
        self,
        backend: Backend,
        role: str,
        purpose: str,
        request: dict,
        temperature: float | None = None,
    ) -> CallResult:
        """``backend.call`` unless this exact call was recorded: then its recorded reply."""
        key = call_key(role, purpose, request, temperature)
        record = self._calls.get(key)
        if record is not None:
            self.totals.replayed += 1
            log.info("agent_call_replayed", role=role, purpose=purpose, key=key[:12])
            return CallResult(data=record["reply"], prompt=record.get("prompt", ""))
        started = time.monotonic()
        # Passed only when asked for: a backend that never samples (a stand-in for a
        # model's answers) need not take the keyword.
        hotter = {} if temperature is None else {"temperature": temperature}
        result = await backend.call(role, purpose, request, **hotter)
        record = {
            "key": key,
            "role": role,
            "purpose": purpose,
            "backend": backend.name,
            "request": request,
            "reply": result.data,
            "prompt": result.prompt,
            "raw_reply": result.reply,
            "tokens_in": result.tokens_in,
            "tokens_out": result.tokens_out,
            "latency_s": round(result.latency_s or time.monotonic() - started, 4),
            "attempts": result.attempts,
            "repairs": result.repairs,
            "tokens_estimated": result.tokens_estimated,
            "local_repairs": result.local_repairs,
            "reasoning": result.reasoning,
            **hotter,
            "at": time.time(),
        }
        self._append(CALLS_FILE, record)
        self._calls[key] = record
        self._count(record, replayed=False)
        log.info(
            "agent_call",
            role=role,
            purpose=purpose,
            backend=backend.name,
            tokens_in=result.tokens_in,
            tokens_out=result.tokens_out,
            latency_s=record["latency_s"],
        )
        return CallResult(
            data=result.data,
            prompt=result.prompt,
            reply=result.reply,
            tokens_in=result.tokens_in,
            tokens_out=result.tokens_out,
            latency_s=record["latency_s"],
            attempts=result.attempts,
            repairs=result.repairs,
            tokens_estimated=result.tokens_estimated,
            reasoning=result.reasoning,
            local_repairs=result.local_repairs,
        )

    def _count(self, record: dict[str, Any], replayed: bool) -> None:
        t = self.totals
        t.calls += 1
        t.tokens_in += int(record.get("tokens_in", 0))
        t.tokens_out += int(record.get("tokens_out", 0))
        t.latency_s += float(record.get("latency_s", 0.0))
        role = record.get("role", "?")
        t.by_role[role] = t.by_role.get(role, 0) + 1

    # ------------------------------------------------------------------ jobs

    def job(self, request: Any, check: Any = None) -> Any | None:
        """The recorded result of ``request``, or None. ``check(result)`` may refuse a
        record whose artifacts are gone (the job is then redone)."""
        key = job_key(portable(request, self.run_dir))
        record = self._jobs.get(key)
        if record is None:
            key = job_key(request)  # recorded before paths were portable
            record = self._jobs.get(key)
        if record is None:
            return None
        try:
            result = codec.decode(base64.b64decode(record["result"]), max_frame=MAX_RESULT_BYTES)
            result = local(result, self.run_dir)
        except codec.DecodeError as exc:
            del self._jobs[key]
            self._skip(self.run_dir / JOBS_FILE, self._lines.get(key, 0), f"result: {exc}")
            return None
        if type(result).__name__ != record["kind"]:
            del self._jobs[key]
            problem = f"result is a {type(result).__name__}, the record says {record['kind']}"
            self._skip(self.run_dir / JOBS_FILE, self._lines.get(key, 0), problem)
            return None
        if check is not None and not check(result):
            return None
        log.info("job_replayed", kind=record["kind"], name=record.get("name", ""), key=key[:12])
        return result

    def record_job(self, request: Any, result: Any, name: str = "") -> None:
        key = job_key(portable(request, self.run_dir))
        record = {
            "key": key,
            "kind": type(result).__name__,
            "name": name,
            "result": base64.b64encode(codec.encode(portable(result, self.run_dir))).decode(),
            "at": time.time(),
        }
        self._append(JOBS_FILE, record)
        self._jobs[key] = record

    # ------------------------------------------------------------------ disk

    def _append(self, name: str, record: dict[str, Any]) -> None:
        jsonl.append(self.run_dir / name, [record])

    def _skip(self, path: Path, line: int, problem: str) -> None:
        self.skipped += 1
        log.warning(
            "journal_record_skipped",
            file=str(path),
            line=line,
            problem=problem,
            fix="none needed: that call or job is done again",
        )


# ---------------------------------------------------------------------- record checks

MAX_RESULT_BYTES = 1 << 31
"""Largest recorded job result decoded: far above any real one (rollout results are
trimmed, training results carry no policy bytes), only a guard against a corrupt line."""


def named_result(run_dir: Path, name: str, kind: str) -> Any | None:
    """The last result of kind ``kind`` (``TrainResult``, ``RolloutResult``) the run
    recorded under ``name`` (a training job's: ``collect_stone-it1-v2``), its paths this
    machine's; None when there is none or it does not decode."""
    found = None
    for _, record in jsonl.read(Path(run_dir) / JOBS_FILE):
        if isinstance(record, dict) and record.get("name") == name and record.get("kind") == kind:
            found = record
    if found is None:
        return None
    try:
        result = codec.decode(base64.b64decode(found["result"]), max_frame=MAX_RESULT_BYTES)
    except (codec.DecodeError, binascii.Error, TypeError):
        return None
    return local(result, Path(run_dir)) if type(result).__name__ == kind else None


def _typed(record: dict[str, Any], types: dict[str, type | tuple[type, ...]]) -> str:
    """The first key of ``types`` that ``record`` lacks or holds with another type."""
    for key, kind in types.items():
        if key not in record:
            return f"no {key!r}"
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, kind):  # bool is an int
            return f"{key!r} is {type(value).__name__}, not {getattr(kind, '__name__', kind)}"
    return ""


def call_problem(record: Any) -> str:
    """Why ``record`` is not a well-formed line of calls.jsonl ('' when it is)."""
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not an object"
    problem = _typed(
        record,
        {"key": str, "role": str, "purpose": str, "request": dict, "reply": dict},
    )
    problem = problem or _typed(
        {k: record.get(k, 0) for k in ("tokens_in", "tokens_out", "latency_s")},
        {"tokens_in": int, "tokens_out": int, "latency_s": (int, float)},
    )
    if not problem and not isinstance(record.get("prompt", ""), str):
        problem = "'prompt' is not a string"
    # The key is not re-hashed: a request whose dict keys were not strings hashes
    # differently once read back from JSON, and its record is still the right one.
    return problem


def job_problem(record: Any) -> str:
    """Why ``record`` is not a well-formed line of jobs.jsonl ('' when it is; whether its
    result decodes is checked when it is replayed)."""
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not an object"
    problem = _typed(record, {"key": str, "kind": str, "name": str, "result": str})
    if problem:
        return problem
    try:
        base64.b64decode(record["result"], validate=True)
    except binascii.Error as exc:
        return f"'result' is not base64 ({exc})"
    return ""
