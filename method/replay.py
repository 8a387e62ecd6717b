"""The ``replay`` backend: a recorded run's model answers, played back with no model.

``[agents] backend = "replay"`` with ``replay = "RUN_DIR"`` (or its ``calls.jsonl``)
answers every agent call from what a model answered in that run, so a real model's
plans, code and reviews go through today's code (the reply parser, the contracts, the
sandbox, the critic's loop) in seconds, on any machine, as the test suite does with the
recording in ``tests/data/``.

Each call is matched to a recorded one:

1. **exactly**: the same role, purpose and request (the journal's key); a run of the
   same code on the same seeds matches every call this way;
2. **by its place**: the same role and purpose about the same sub-action and version,
   the recorded calls of that place taken in their order (``replay_inexact`` says so):
   where today's code measures differently, its requests differ (other rates, other
   failure causes), yet the model's answer to "version 2 of collect_coal" still stands.

A call with neither fails as a model call does (``ModelUnavailable``): the recording
holds no answer for it (the model may have failed it then, or the run went further).

The recorded raw reply is parsed and checked again by the contract of today's code
(:func:`llm.openai_backend.parse_reply`, :func:`llm.contracts.validate`): a reply that
today's contract refuses fails the call as the model's would (``ModelReplyError``).
Nothing is computed by a model, so a replayed call costs no tokens and no time."""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from typing import Any

from llm.backend import CallResult
from llm.contracts import game, validate
from llm.errors import ContractError, ModelReplyError, ModelUnavailable
from llm.openai_backend import parse_reply
from method.journal import CALLS_FILE, call_key, call_problem
from runtime.events import log

Place = tuple[str, str, str, int]
"""(role, purpose, sub-action, version) of a call: where in the method it was made."""


class RecordingError(ValueError):
    """A recording that cannot be replayed (missing, unreadable, no calls in it)."""


def place_of(role: str, purpose: str, request: dict[str, Any]) -> Place:
    """Where in the method a call was made: its sub-action and version where the request
    names them ('' and 0 for a plan, and for a revision of the plan, by their order)."""
    sub = request.get("subaction")
    name = sub.get("name", "") if isinstance(sub, dict) else str(sub or "")
    version = request.get("version", 0)
    return role, purpose, name, version if isinstance(version, int) else 0


def recording_path(path: str | Path) -> Path:
    """The ``calls.jsonl`` that ``path`` names: the file itself or a run folder's."""
    p = Path(path).expanduser()
    return p / CALLS_FILE if p.is_dir() else p


class ReplayBackend:
    """Answers calls from a recorded run's ``calls.jsonl`` (see the module)."""

    name = "replay"

    def __init__(self, path: str | Path, world: str = "crafter") -> None:
        self.path = recording_path(path)
        self.world = world
        """The game the recorded replies are checked against (``[task] world``)."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise RecordingError(
                f"cannot read the recording {self.path}: {exc}; [agents] replay names a "
                f"recorded run's folder or its {CALLS_FILE}"
            ) from None
        self._exact: dict[str, collections.deque[dict[str, Any]]] = {}
        self._places: dict[Place, collections.deque[dict[str, Any]]] = {}
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                log.warning("replay_record_skipped", file=str(self.path), line=number,
                            problem=f"not JSON: {exc}")  # fmt: skip
                continue
            problem = call_problem(record)
            if problem:
                log.warning("replay_record_skipped", file=str(self.path), line=number,
                            problem=problem)  # fmt: skip
                continue
            self._exact.setdefault(record["key"], collections.deque()).append(record)
            place = place_of(record["role"], record["purpose"], record["request"])
            self._places.setdefault(place, collections.deque()).append(record)
        self.calls = sum(len(q) for q in self._exact.values())
        """Recorded calls loaded."""
        if not self.calls:
            raise RecordingError(f"the recording {self.path} holds no agent call")
        self.recorded_by = _recorded_by(self.path.parent)
        """The backend and model that answered the recorded run, from its config.json
        (e.g. ``local qwen2.5-coder-0.5b``; '' where the recording has none)."""

    async def call(
        self,
        role: str,
        purpose: str,
        request: dict[str, Any],
        *,
        temperature: float | None = None,
    ) -> CallResult:
        started = time.monotonic()
        record = self._take(role, purpose, request, temperature)
        raw = record.get("raw_reply", "")
        raw = raw if isinstance(raw, str) else ""
        try:
            # A raw reply goes through today's parser; the offline backend records none.
            parsed, mended = parse_reply(raw, role, purpose) if raw else (record["reply"], False)
            with game(self.world):
                data = validate(role, purpose, parsed)
        except ContractError as exc:
            raise ModelReplyError(
                f"the recorded reply breaks today's contract for {role}/{purpose}: {exc}",
                reply=raw,
            ) from None
        return CallResult(
            data=data,
            prompt=record.get("prompt", "") if isinstance(record.get("prompt"), str) else "",
            reply=raw,
            latency_s=time.monotonic() - started,
            local_repairs=int(mended),
        )

    def _take(
        self, role: str, purpose: str, request: dict[str, Any], temperature: float | None
    ) -> dict[str, Any]:
        """The recorded call that answers this one, removed so that each answers once."""
        key = call_key(role, purpose, request, temperature)
        exact = self._exact.get(key)
        if exact:
            record = exact.popleft()
            self._places[place_of(role, purpose, record["request"])].remove(record)
            return record
        place = place_of(role, purpose, request)
        queue = self._places.get(place)
        if queue:
            record = queue.popleft()
            self._exact[record["key"]].remove(record)
            log.info("replay_inexact", role=role, purpose=purpose, subaction=place[2],
                     version=place[3], recorded=record["key"][:12])  # fmt: skip
            return record
        where = f" of {place[2]!r} version {place[3]}" if place[2] else ""
        raise ModelUnavailable(
            f"the recording {self.path} holds no answer for {role}/{purpose}{where}: the "
            "recorded run never asked it, or its model failed that call"
        )


def _recorded_by(run_dir: Path) -> str:
    try:
        agents = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))["agents"]
        return " ".join(str(agents[k]) for k in ("backend", "model") if agents.get(k))
    except (OSError, ValueError, KeyError, TypeError):
        return ""
