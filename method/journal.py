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
Each line is flushed and fsynced before the caller goes on, so a head killed at any
moment loses at most the call or job in flight.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm.backend import Backend, CallResult
from messages import codec
from runtime.events import log

CALLS_FILE = "calls.jsonl"
JOBS_FILE = "jobs.jsonl"


def call_key(role: str, purpose: str, request: dict[str, Any]) -> str:
    """Content hash of one agent call."""
    text = json.dumps([role, purpose, request], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def job_key(request: Any) -> str:
    """Content hash of one job request (its wire encoding)."""
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


class Journal:
    """The run's record of calls and jobs; loads what an earlier attempt left."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._calls: dict[str, dict[str, Any]] = {}
        self._jobs: dict[str, dict[str, Any]] = {}
        self.totals = Totals()
        for name, store in ((CALLS_FILE, self._calls), (JOBS_FILE, self._jobs)):
            path = run_dir / name
            if path.exists():
                for line in path.read_text().splitlines():
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut short by a kill: that call is simply redone
                    store[record["key"]] = record
        self.loaded_calls = len(self._calls)
        self.loaded_jobs = len(self._jobs)
        for record in self._calls.values():
            self._count(record, replayed=False)

    # ------------------------------------------------------------------ calls

    async def call(self, backend: Backend, role: str, purpose: str, request: dict) -> CallResult:
        """``backend.call`` unless this exact call was recorded: then its recorded reply."""
        key = call_key(role, purpose, request)
        record = self._calls.get(key)
        if record is not None:
            self.totals.replayed += 1
            log.info("agent_call_replayed", role=role, purpose=purpose, key=key[:12])
            return CallResult(data=record["reply"], prompt=record.get("prompt", ""))
        started = time.monotonic()
        result = await backend.call(role, purpose, request)
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
        key = job_key(request)
        record = self._jobs.get(key)
        if record is None:
            return None
        result = codec.decode(base64.b64decode(record["result"]), max_frame=1 << 31)
        if check is not None and not check(result):
            return None
        log.info("job_replayed", kind=record["kind"], name=record.get("name", ""), key=key[:12])
        return result

    def record_job(self, request: Any, result: Any, name: str = "") -> None:
        key = job_key(request)
        record = {
            "key": key,
            "kind": type(result).__name__,
            "name": name,
            "result": base64.b64encode(codec.encode(result)).decode(),
            "at": time.time(),
        }
        self._append(JOBS_FILE, record)
        self._jobs[key] = record

    # ------------------------------------------------------------------ disk

    def _append(self, name: str, record: dict[str, Any]) -> None:
        with open(self.run_dir / name, "a") as f:
            f.write(json.dumps(record, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
