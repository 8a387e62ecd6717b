"""Artifact family: files by content (sha256) between the head's store and the workers.

The head's ``artifacts`` actor (:mod:`runtime.artifacts`) keeps the run's files by sha256
and answers these; workers fetch what they lack (a learned stage's policy, a job's latest
checkpoint) and put what they make (checkpoints, TensorBoard packs). A file travels in
chunks that each fit a frame; whoever receives one checks the sha256 of the whole file
before using it.
"""

from __future__ import annotations

from messages.base import message


@message("artifact.get")
class ArtifactGet:
    """worker → artifacts: send ``length`` bytes of the file with this sha256 from ``offset``."""

    sha256: str
    """The file's sha256 (64 lowercase hex digits)."""
    offset: int = 0
    """First byte wanted (not negative)."""
    length: int = 0
    """Bytes wanted (the store sends at most its own chunk size; 0 or less: one chunk)."""


@message("artifact.chunk")
class ArtifactChunk:
    """artifacts → worker: part of a stored file (``found`` false when the store has none)."""

    sha256: str
    """The file's sha256, as asked."""
    offset: int
    """Where ``data`` starts in the file."""
    data: bytes
    """The bytes from ``offset``: as many as asked unless the file ends first."""
    size: int
    """The whole file's size in bytes."""
    found: bool = True
    """False: the store has no file with this sha256 (``data`` empty)."""


@message("artifact.put")
class ArtifactPut:
    """learner → artifacts: one chunk of a file for the store, in order from offset 0;
    the chunk that completes it makes the store check the sha256 and keep the file."""

    sha256: str
    """The whole file's sha256."""
    offset: int
    """Where ``data`` starts in the file (the store accepts only the next byte it lacks)."""
    data: bytes
    """The chunk."""
    size: int
    """The whole file's size in bytes."""
    kind: str = ""
    """What the file is: ``checkpoint`` (of ``job``, at ``decisions``), ``tensorboard`` (a
    zip of ``job``'s event files, unpacked into the run's TensorBoard folder), or ''."""
    job: str = ""
    """The training job it belongs to (a plain file name), for those kinds."""
    decisions: int = 0
    """With ``checkpoint``: the agent decisions it holds (at most 10**12)."""


@message("artifact.ack")
class ArtifactAck:
    """artifacts → learner: how much of a put file the store holds."""

    sha256: str
    """The file's sha256."""
    received: int
    """Bytes held so far (the next put's offset)."""
    complete: bool = False
    """True once the whole file arrived, matched its sha256 and was kept."""
    recorded: bool = False
    """With a ``checkpoint``: True when it became its job's newest checkpoint (False: the
    store holds a newer one, and did not keep this one)."""


@message("artifact.latest")
class LatestCheckpoint:
    """learner → artifacts: the newest checkpoint the store holds of job ``job``."""

    job: str
    """The training job's name."""


@message("artifact.latest_reply")
class LatestCheckpointReply:
    """artifacts → learner: the newest checkpoint of a job (``sha256`` '' when none)."""

    job: str
    """The training job's name."""
    sha256: str = ""
    """The checkpoint file's sha256 ('' when the store has none for the job)."""
    decisions: int = 0
    """Agent decisions the checkpoint holds."""
    size: int = 0
    """The checkpoint file's size in bytes."""
    reached: int = 0
    """The most decisions any attempt of the job reported reaching (for ``steps_lost``)."""


@message("artifact.reached")
class JobReached:
    """learner → artifacts: an attempt of ``job`` got this far (told, not asked)."""

    job: str
    """The training job's name."""
    decisions: int
    """Agent decisions it reached."""
