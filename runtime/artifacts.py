"""Files by content (sha256): the head's artifact store, its actor, and the workers' side.

The head keeps the run's files under ``RUN_DIR/artifacts/sha256/<hex>`` (:class:`Store`)
and serves them over the broker through an in-process actor of role ``artifacts``
(:class:`ArtifactServer`, started by :func:`runtime.head.run_head`; only a head-side
connection may register that role). A worker keeps what it fetched in a store of its own
(:func:`worker_store`: its run directory's ``artifacts/``, or a cache folder shared by
its runs), so a second run on the same machine fetches nothing it already has.

Files travel in chunks that fit a frame (:data:`CHUNK_BYTES`, less under a small
``max_frame_bytes``). The receiver checks every chunk (its hash, offset and length: a
short one is refused) and the whole file's sha256 before it keeps it; files are written
to a temporary name and renamed, so a store holds only whole files that match their
names. Nothing here reads a path a peer named: a file is found by its hash.

What learners put: each checkpoint (``kind="checkpoint"``, always sent whole; the store
remembers the newest per job, so a job re-delivered to another learner resumes from it,
and keeps the one before one generation longer for a fetch under way; a file another job
names or a policy of the run is never removed) and, at the
end of a remote job, a zip of its TensorBoard event files (``kind="tensorboard"``),
unpacked into ``RUN_DIR/tensorboard/<job>/`` with every member's path checked.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import stat
import time
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

import trio

from messages import Envelope
from messages.artifact import (
    ArtifactAck,
    ArtifactChunk,
    ArtifactGet,
    ArtifactPut,
    JobReached,
    LatestCheckpoint,
    LatestCheckpointReply,
)
from runtime.actor import Actor, RemoteFailure, handles
from runtime.events import log

ROLE = "artifacts"
"""The head's artifact actor's role (and name): workers ask ``@artifacts``."""
STORE_DIR = "artifacts"
"""A store's folder inside a run directory (the head's and a worker's alike)."""
CACHE_ENV = "RLGPT_ARTIFACTS"
"""Where a worker without a run directory keeps fetched files (default
``~/.cache/rlgpt/artifacts``, beside the models' cache)."""
CHUNK_BYTES = 1 << 20
"""Bytes per chunk: a policy (~0.1-1.5 MB) goes in one or two, a checkpoint (policy and
optimizer, ~3x that) in a few, and each frame stays far below the 16 MiB default cap."""
MAX_ARTIFACT_BYTES = 1 << 30
"""Largest file the store accepts: 300 times a [128, 128] checkpoint, while a peer cannot
fill the head's disk with one endless put."""
ASK_TIMEOUT_S = 30.0
"""How long one chunk's ask may wait: a loopback chunk takes milliseconds, a slow link a
few seconds; past this the head is taken to be unreachable (or serves no store)."""
PUT_RESTARTS = 3
"""Times a put starts again from what the store says it holds before giving up."""
TB_MAX_MEMBERS = 1000
"""Most files in one TensorBoard pack (a job writes one event file per learn() call)."""
TB_MAX_BYTES = 64 << 20
"""Most bytes a TensorBoard pack unpacks to (a job's curves are a few hundred kB)."""
STALE_PART_S = 600.0
"""A half-written file in a store's ``tmp/`` this old belongs to no transfer under way (a
chunk's ask times out after :data:`ASK_TIMEOUT_S`)."""
JOBS_DIR = "jobs"
"""Inside the store: ``<job>.json``, the newest checkpoint of each job (and the one before
it, kept one generation longer for a fetch or read under way) and how far it got."""
MAX_DECISIONS = 10**12
"""Most agent decisions a put checkpoint or a reached report may claim (a real job makes
millions): a larger one is refused, so no peer pins a job's record out of reach."""
PARTIAL_PER_PEER = 2
"""Puts one peer may have under way at once (a learner sends one at a time)."""
PARTIAL_IDLE_S = 300.0
"""A put under way that got no chunk for this long is dropped with its temp file (its
peer is gone, or gave up: a chunk's ask times out after :data:`ASK_TIMEOUT_S`)."""
NAME_MAX = 100


class ArtifactError(Exception):
    """A file could not be fetched or put: missing, refused, or not what its hash says."""


class ArtifactMissing(ArtifactError):
    """The store has no file with this sha256."""


def is_sha256(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def plain_name(name: str) -> bool:
    """Whether ``name`` can be one file name (a job's)."""
    return bool(
        name
        and len(name) <= NAME_MAX
        and name not in (".", "..")
        and not name.startswith(".")
        and not any(c in name for c in "/\\\0")
    )


def chunk_size(max_frame_bytes: int) -> int:
    """Bytes per chunk under a frame cap: half the cap leaves room for the rest of the
    message, and never more than :data:`CHUNK_BYTES`."""
    return max(1024, min(CHUNK_BYTES, max_frame_bytes // 2))


class Store:
    """A folder of files named by their sha256 (``<root>/sha256/<hex>``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, sha256: str) -> Path:
        if not is_sha256(sha256):
            raise ArtifactError(f"{sha256[:80]!r} is not a sha256 (64 lowercase hex digits)")
        return self.root / "sha256" / sha256

    def get(self, sha256: str) -> Path | None:
        """The stored file, or None."""
        path = self.path(sha256)
        return path if path.is_file() else None

    def _tmp(self, sha256: str) -> Path:
        folder = self.root / "tmp"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{sha256}.{os.getpid()}.{secrets.token_hex(4)}.part"

    def add_bytes(self, data: bytes, sha256: str) -> Path:
        """Keep ``data`` under ``sha256`` after checking it (temp file, then rename)."""
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256:
            raise ArtifactError(
                f"content does not match sha256 {sha256[:12]}… (it is {digest[:12]}…)"
            )
        tmp = self._tmp(sha256)
        tmp.write_bytes(data)
        return self._keep(tmp, sha256)

    def add_file(self, source: Path, sha256: str) -> Path:
        """Keep a copy of ``source`` (a hard link where it can) once its hash is checked."""
        tmp = self._tmp(sha256)
        try:
            os.link(source, tmp)
        except OSError:
            tmp.write_bytes(Path(source).read_bytes())
        if sha256_file(tmp) != sha256:
            tmp.unlink(missing_ok=True)
            raise ArtifactError(f"{source} does not match sha256 {sha256[:12]}…")
        return self._keep(tmp, sha256)

    def _keep(self, tmp: Path, sha256: str) -> Path:
        path = self.path(sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, path)
        return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def worker_store(run_dir: Path | None) -> Store:
    """A worker's store: ``RUN_DIR/artifacts`` when it has a run directory (the head's
    own store when that is the head's), else ``$RLGPT_ARTIFACTS`` or
    ``~/.cache/rlgpt/artifacts``, which every run on this machine shares."""
    if run_dir is not None:
        return Store(Path(run_dir) / STORE_DIR)
    folder = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "rlgpt" / STORE_DIR
    return Store(Path(folder))


# ------------------------------------------------------------------------- head side


class ArtifactServer(Actor):
    """The head's artifact store as an actor: serves chunks by sha256, takes learners'
    files, remembers each job's newest checkpoint, unpacks TensorBoard packs."""

    role = ROLE

    def __init__(self, *, run_dir: Path, **kwargs: Any) -> None:
        # Many workers fetch at once; every handler is short.
        super().__init__(**{"capacity": 64, "name": ROLE, **kwargs, "run_dir": run_dir})
        self.store = Store(Path(run_dir) / STORE_DIR)
        self.chunk = chunk_size(self.max_frame_bytes)
        self._partial: dict[tuple[str, str], tuple[Path, int, float]] = {}
        """(sender, sha256) → the temp file of a put under way, the bytes it holds and
        when its last chunk came (``time.monotonic``)."""
        self._scanned: dict[tuple[str, int, int], str] = {}
        """(path, size, mtime) → sha256 of the run's policy files hashed so far."""

    async def setup(self) -> None:
        # Puts a head that stopped left half done (none of this head's is under way yet;
        # a young file may be a fetch by a worker that shares this run directory).
        old = time.time() - STALE_PART_S
        for part in (self.store.root / "tmp").glob("*.part"):
            try:
                if part.stat().st_mtime < old:
                    part.unlink()
            except OSError:
                continue

    # -- get -------------------------------------------------------------------------

    @handles(ArtifactGet)
    async def on_get(self, msg: ArtifactGet, env: Envelope) -> ArtifactChunk:
        if msg.offset < 0:
            raise ValueError(f"artifact.get: offset {msg.offset} is negative")
        path = self.store.get(msg.sha256) if is_sha256(msg.sha256) else None
        if path is None and is_sha256(msg.sha256):
            path = await self.run_blocking(self._find_policy, msg.sha256)
        length = self.chunk if msg.length <= 0 else min(self.chunk, msg.length)
        read = (
            None if path is None else await self.run_blocking(_read_chunk, path, msg.offset, length)
        )
        if read is None:
            log.warning("artifact_missing", sha256=msg.sha256[:64], frm=env.frm)
            return ArtifactChunk(msg.sha256[:64], msg.offset, b"", 0, found=False)
        size, offset, data = read
        if offset + len(data) >= size:
            log.info("artifact_served", sha256=msg.sha256, bytes=size, to=env.frm)
        return ArtifactChunk(msg.sha256, offset, data, size)

    def _run_policies(self, size: int | None = None):
        """(path, sha256) of each regular-file policy of this run (``policies/*.zip``,
        ``learners/*/policy.zip``; of ``size`` bytes when given), each hashed once per
        (path, size, mtime) and then remembered. A link could point anywhere: skipped."""
        run_dir = self.run_dir
        for path in [*run_dir.glob("policies/*.zip"), *run_dir.glob("learners/*/policy.zip")]:
            try:
                st = path.lstat()
                if not stat.S_ISREG(st.st_mode) or size not in (None, st.st_size):
                    continue
                key = (str(path), st.st_size, st.st_mtime_ns)
                digest = self._scanned.get(key)
                if digest is None:
                    digest = self._scanned[key] = sha256_file(path)
            except OSError:
                continue
            yield path, digest

    def _find_policy(self, sha256: str) -> Path | None:
        """A policy of this run stored before the content store existed, or by a learner
        that shares the run directory, hashed once and then kept in the store by its hash."""
        for path, digest in self._run_policies():
            if digest == sha256:
                return self.store.add_file(path, sha256)
        return None

    def _is_policy(self, sha256: str) -> bool:
        """Whether the stored file ``sha256`` is also a policy of this run: linked from
        ``policies/`` (or a learner's ``policy.zip``), or a copy of one (worker thread)."""
        try:
            st = self.store.path(sha256).stat()
        except OSError:
            return False
        if st.st_nlink > 1:
            return True  # store_artifact links a result's policy into the store
        return any(digest == sha256 for _, digest in self._run_policies(st.st_size))

    # -- put -------------------------------------------------------------------------

    def _expire_partial(self, now: float) -> None:
        """Drop puts under way that got no chunk for :data:`PARTIAL_IDLE_S`."""
        for key, (tmp, held, last) in list(self._partial.items()):
            if now - last > PARTIAL_IDLE_S:
                del self._partial[key]
                tmp.unlink(missing_ok=True)
                log.info("artifact_put_expired", sha256=key[1], frm=key[0], held=held)

    @handles(ArtifactPut)
    async def on_put(self, msg: ArtifactPut, env: Envelope) -> ArtifactAck:
        if not is_sha256(msg.sha256):
            raise ValueError(f"artifact.put: {msg.sha256[:80]!r} is not a sha256")
        if not 0 < msg.size <= MAX_ARTIFACT_BYTES:
            raise ValueError(f"artifact.put: size {msg.size} is not in 1..{MAX_ARTIFACT_BYTES}")
        if msg.kind not in ("", "checkpoint", "tensorboard"):
            raise ValueError(f"artifact.put: kind {msg.kind[:40]!r} is not checkpoint/tensorboard")
        if msg.kind and not plain_name(msg.job):
            raise ValueError(f"artifact.put: job {msg.job[:120]!r} is not a plain file name")
        if not 0 <= msg.decisions <= MAX_DECISIONS:
            raise ValueError(
                f"artifact.put: decisions {msg.decisions} is not in 0..{MAX_DECISIONS}"
            )
        now = time.monotonic()
        self._expire_partial(now)
        key = (env.frm, msg.sha256)
        if not msg.kind and msg.offset == 0 and self.store.get(msg.sha256) is not None:
            # Already here, and a plain put records nothing: no need to send it again. A
            # checkpoint or a TensorBoard pack always comes whole, so that no peer names
            # a file it does not have as its job's.
            self._drop_partial(key)
            return ArtifactAck(msg.sha256, msg.size, complete=True)
        tmp, held, _ = self._partial.get(key, (None, 0, now))
        if msg.offset == 0:
            under_way = sum(1 for frm, sha in self._partial if frm == env.frm and sha != msg.sha256)
            if len(msg.data) < msg.size and under_way >= PARTIAL_PER_PEER:
                raise ValueError(
                    f"artifact.put: {env.frm} already has {under_way} puts under way (at most"
                    f" {PARTIAL_PER_PEER}); finish one first (one idle for {PARTIAL_IDLE_S:g} s"
                    " is dropped)"
                )
            if tmp is not None:
                tmp.unlink(missing_ok=True)
            tmp, held = self.store._tmp(msg.sha256), 0
            tmp.write_bytes(b"")
        if tmp is None or msg.offset != held:
            return ArtifactAck(msg.sha256, held)  # out of order: say where to go on
        if held + len(msg.data) > msg.size:
            tmp.unlink(missing_ok=True)
            self._partial.pop(key, None)
            raise ValueError(f"artifact.put: more than its size {msg.size} bytes")
        with open(tmp, "ab") as f:
            f.write(msg.data)
        held += len(msg.data)
        if held < msg.size:
            self._partial[key] = (tmp, held, now)
            return ArtifactAck(msg.sha256, held)
        self._partial.pop(key, None)
        digest = await self.run_blocking(sha256_file, tmp)
        if digest != msg.sha256:
            tmp.unlink(missing_ok=True)
            log.warning("artifact_refused", sha256=msg.sha256, got=digest, frm=env.frm)
            raise ValueError(f"artifact.put: the file's sha256 is {digest}, not {msg.sha256}")
        path = self.store._keep(tmp, msg.sha256)
        log.info("artifact_stored", sha256=msg.sha256, bytes=msg.size, kind=msg.kind,
                 job=msg.job, frm=env.frm)  # fmt: skip
        recorded = await self._file_kind(msg, path)
        return ArtifactAck(msg.sha256, held, complete=True, recorded=recorded)

    def _drop_partial(self, key: tuple[str, str]) -> None:
        tmp, _, _ = self._partial.pop(key, (None, 0, 0.0))
        if tmp is not None:
            tmp.unlink(missing_ok=True)

    async def _file_kind(self, msg: ArtifactPut, path: Path) -> bool:
        """File a kept put by its kind; True when a checkpoint became its job's record."""
        if msg.kind == "checkpoint":
            recorded, drop = self._record_checkpoint(msg.job, msg.sha256, msg.decisions, msg.size)
            if not recorded:
                log.info("checkpoint_not_recorded", job=msg.job, decisions=msg.decisions,
                         sha256=msg.sha256)  # fmt: skip
            await self._drop_unused(drop)
            return recorded
        if msg.kind == "tensorboard":
            dest = Path(self.run_dir) / TENSORBOARD_DIR / msg.job
            files = await self.run_blocking(unpack_tensorboard, path, dest)
            log.info("tensorboard_unpacked", job=msg.job, files=files, folder=str(dest))
        return False

    async def _drop_unused(self, shas: list[str]) -> None:
        """Remove stored files no job record names and that are no policy of the run."""
        for sha in shas:
            if self.store.get(sha) is None or await self.run_blocking(self._is_policy, sha):
                continue
            # Checked again after the thread, with no await before the unlink: a put that
            # kept this file meanwhile has recorded it by now.
            path = self.store.get(sha)
            if path is None or self._named_by_a_job(sha) or path.stat().st_nlink > 1:
                continue
            path.unlink(missing_ok=True)
            log.info("artifact_dropped", sha256=sha)

    # -- jobs ------------------------------------------------------------------------

    def _job_file(self, job: str) -> Path:
        return self.store.root / JOBS_DIR / f"{job}.json"

    def _job(self, job: str) -> dict[str, Any]:
        try:
            record = json.loads(self._job_file(job).read_text())
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def _write_job(self, job: str, record: dict[str, Any]) -> None:
        path = self._job_file(job)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, path)

    def _record_checkpoint(
        self, job: str, sha256: str, decisions: int, size: int
    ) -> tuple[bool, list[str]]:
        """Make a kept checkpoint its job's record unless the job has a newer one.
        Returns whether it did, and the stored files that may go now: the checkpoint
        before the previous one (the previous stays one generation longer, for a fetch
        or a read under way), or this one when it was not recorded."""
        record = self._job(job)
        if decisions < _count(record.get("decisions")):
            return False, [sha256]  # an older checkpoint arriving late replaces no newer one
        current, previous = record.get("sha256"), record.get("previous")
        drop = []
        if current != sha256:
            if isinstance(previous, str) and is_sha256(previous) and previous != sha256:
                drop.append(previous)
            record["previous"] = current if isinstance(current, str) and is_sha256(current) else ""
        record.update(sha256=sha256, decisions=decisions, size=size)
        record["reached"] = max(_count(record.get("reached")), decisions)
        self._write_job(job, record)
        return True, drop

    def _named_by_a_job(self, sha256: str) -> bool:
        """Whether a job's record names ``sha256`` (as its checkpoint or the previous)."""
        for path in (self.store.root / JOBS_DIR).glob("*.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and sha256 in (
                record.get("sha256"),
                record.get("previous"),
            ):
                return True
        return False

    @handles(LatestCheckpoint)
    def on_latest(self, msg: LatestCheckpoint, env: Envelope) -> LatestCheckpointReply:
        if not plain_name(msg.job):
            raise ValueError(f"artifact.latest: job {msg.job[:120]!r} is not a plain file name")
        record = self._job(msg.job)
        sha = record.get("sha256", "")
        if not (isinstance(sha, str) and is_sha256(sha) and self.store.get(sha)):
            return LatestCheckpointReply(msg.job, reached=_count(record.get("reached")))
        return LatestCheckpointReply(
            msg.job, sha, _count(record.get("decisions")), _count(record.get("size")),
            _count(record.get("reached")),
        )  # fmt: skip

    @handles(JobReached)
    def on_reached(self, msg: JobReached, env: Envelope) -> None:
        if not (plain_name(msg.job) and 0 <= msg.decisions <= MAX_DECISIONS):
            return
        record = self._job(msg.job)
        if msg.decisions > _count(record.get("reached")):
            record["reached"] = msg.decisions
            self._write_job(msg.job, record)


def _read_chunk(path: Path, offset: int, length: int) -> tuple[int, int, bytes] | None:
    """The file's size, where the chunk starts (``offset``, at most the size) and up to
    ``length`` bytes from there; None when the file is gone (worker thread)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = min(offset, size)
            f.seek(offset)
            return size, offset, f.read(length)
    except FileNotFoundError:
        return None


def _count(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


TENSORBOARD_DIR = "tensorboard"
"""The run's TensorBoard log dir (``method.tboard.LOG_DIR``; runtime sits below method)."""


def pack_tensorboard(folder: Path) -> bytes:
    """A zip of the event files under ``folder`` (paths relative to it); b'' when none."""
    buf = io.BytesIO()
    count = 0
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file() and not path.is_symlink():
                zf.write(path, path.relative_to(folder).as_posix())
                count += 1
    return buf.getvalue() if count else b""


def _member_path(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if (
        not name
        or "\\" in name
        or "\0" in name
        or path.is_absolute()
        or any(part in ("", ".", "..") for part in name.split("/"))
    ):
        raise ArtifactError(f"TensorBoard pack member {name[:200]!r} is not a plain relative path")
    return path


def unpack_tensorboard(pack: Path, dest: Path) -> int:
    """Unpack a TensorBoard pack into ``dest``: plain files only, every path relative and
    inside ``dest`` (no ``..``, no absolute path, no link), bounded in count and size.
    Checks every member before writing any; returns the files written."""
    dest = Path(dest)
    with zipfile.ZipFile(pack) as zf:
        members = [m for m in zf.infolist() if not m.is_dir()]
        if len(members) > TB_MAX_MEMBERS:
            raise ArtifactError(f"TensorBoard pack of {len(members)} files > {TB_MAX_MEMBERS}")
        if sum(m.file_size for m in members) > TB_MAX_BYTES:
            raise ArtifactError(f"TensorBoard pack larger than {TB_MAX_BYTES >> 20} MiB")
        for m in members:
            _member_path(m.filename)
            if stat.S_ISLNK(m.external_attr >> 16):
                raise ArtifactError(f"TensorBoard pack member {m.filename[:200]!r} is a link")
        dest.mkdir(parents=True, exist_ok=True)
        root = dest.resolve()
        written = 0
        for m in members:
            target = dest / _member_path(m.filename)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.parent.resolve().is_relative_to(root) or target.is_symlink():
                raise ArtifactError(f"{m.filename[:200]!r} would land outside {dest}")
            with zf.open(m) as f:
                data = f.read(TB_MAX_BYTES + 1)
            if len(data) > TB_MAX_BYTES:
                raise ArtifactError(f"TensorBoard pack member {m.filename[:200]!r} too large")
            tmp = target.with_name(target.name + ".part")
            tmp.write_bytes(data)
            os.replace(tmp, target)
            written += 1
    return written


# ----------------------------------------------------------------------- worker side


async def fetch(actor: Actor, sha256: str, store: Store, *, what: str = "") -> Path:
    """The file with ``sha256`` in ``store`` (checked again), fetched from the head's
    store first when it is not there or no longer matches: chunk by chunk (each checked:
    its hash, offset and length, a short one refused), into a temp file, the whole
    checked before it is renamed into ``store``.
    Raises :class:`ArtifactMissing` when the head has none, :class:`ArtifactError`
    when what came is not that file or the head does not answer."""
    have = store.get(sha256)
    if have is not None:
        if await trio.to_thread.run_sync(sha256_file, have) == sha256:
            return have
        # A cache file changed under us (a bad disk, a hand edit): fetch it again.
        log.warning("artifact_cache_corrupt", sha256=sha256, path=str(have))
        have.unlink(missing_ok=True)
    started = time.monotonic()
    want = chunk_size(actor.max_frame_bytes)
    tmp = store._tmp(sha256)
    digest = hashlib.sha256()
    size, offset, chunks = -1, 0, 0
    try:
        with open(tmp, "wb") as f:
            while size < 0 or offset < size:
                chunk = await _ask(actor, ArtifactGet(sha256, offset, want))
                if not isinstance(chunk, ArtifactChunk):
                    raise ArtifactError(f"the head answered a get with {type(chunk).__name__}")
                if not chunk.found:
                    raise ArtifactMissing(f"the head's artifact store has no sha256 {sha256}")
                if size < 0:
                    if not 0 < chunk.size <= MAX_ARTIFACT_BYTES:
                        raise ArtifactError(f"artifact {sha256[:12]}… of size {chunk.size}")
                    size = chunk.size
                expected = min(want, size - offset)
                if (
                    chunk.sha256 != sha256
                    or chunk.offset != offset
                    or chunk.size != size
                    or len(chunk.data) != expected
                ):
                    raise ArtifactError(
                        f"chunk of {sha256[:12]}… refused: asked {expected} bytes at {offset}"
                        f" of {size}, got {len(chunk.data)} at {chunk.offset} of {chunk.size}"
                        f" for {chunk.sha256[:12]}…"
                    )
                f.write(chunk.data)
                digest.update(chunk.data)
                offset += len(chunk.data)
                chunks += 1
        if digest.hexdigest() != sha256:
            raise ArtifactError(
                f"artifact {sha256[:12]}… arrived corrupted: its sha256 is"
                f" {digest.hexdigest()[:12]}…; refused"
            )
        path = store._keep(tmp, sha256)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    ms = round((time.monotonic() - started) * 1000, 1)
    log.info("artifact_fetched", sha256=sha256, bytes=size, ms=ms, chunks=chunks, what=what)
    return path


async def put(
    actor: Actor, data: bytes, *, kind: str = "", job: str = "", decisions: int = 0
) -> str:
    """Put ``data`` into the head's store in chunks; returns its sha256. Raises
    :class:`ArtifactError` when the store does not take it."""
    sha256 = hashlib.sha256(data).hexdigest()
    started = time.monotonic()
    step = chunk_size(actor.max_frame_bytes)
    offset, restarts, chunks = 0, 0, 0
    while True:
        part = data[offset : offset + step]
        ack = await _ask(actor, ArtifactPut(sha256, offset, part, len(data), kind, job, decisions))
        chunks += 1
        if not isinstance(ack, ArtifactAck) or ack.sha256 != sha256:
            raise ArtifactError(f"the head answered a put with {type(ack).__name__}")
        if ack.complete:
            if kind == "checkpoint" and not ack.recorded:
                raise ArtifactError(
                    f"the head's store did not keep checkpoint {sha256[:12]}… of job {job!r}"
                    f" ({decisions} decisions): it holds a newer one"
                )
            break
        if ack.received != offset + len(part):
            restarts += 1
            if restarts > PUT_RESTARTS or not 0 <= ack.received < len(data):
                raise ArtifactError(f"the head's store lost track of put {sha256[:12]}…")
        offset = ack.received
    ms = round((time.monotonic() - started) * 1000, 1)
    log.info("artifact_sent", sha256=sha256, bytes=len(data), ms=ms, chunks=chunks, kind=kind,
             job=job)  # fmt: skip
    return sha256


async def latest_checkpoint(actor: Actor, job: str) -> LatestCheckpointReply:
    """What the head's store holds of job ``job``: its newest checkpoint (``sha256`` ''
    when none) and how far its attempts got."""
    reply = await _ask(actor, LatestCheckpoint(job))
    if not isinstance(reply, LatestCheckpointReply) or reply.job != job:
        raise ArtifactError(f"the head answered a checkpoint query with {type(reply).__name__}")
    return reply


async def _ask(actor: Actor, msg: Any) -> Any:
    try:
        return await actor.ask("@" + ROLE, msg, timeout=ASK_TIMEOUT_S)
    except trio.TooSlowError:
        raise ArtifactError(
            f"the head's artifact store did not answer within {ASK_TIMEOUT_S:g} s"
        ) from None
    except RemoteFailure as exc:
        raise ArtifactError(f"the head's artifact store refused: {exc}") from None
