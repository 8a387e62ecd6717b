"""CURVE keys and the authentication handler that refuses unknown peers.

Every tcp endpoint the head binds (``[runtime] listen``) demands CURVE, loopback
included: a loopback port is open to every local user. The broker holds the server key
pair and accepts only clients whose public key is in the ``authorized/`` folder of the
keys directory. With ``[runtime] keys_dir`` that is the user's folder, made by
``python run.py keys``; without it (loopback only) the head makes keys for the run in
``RUN_DIR/keys`` (:func:`run_keys`: folder 0700, files 0600), and an actor attached on
the same machine by the same user reads them there (``run.py attach ROLE --connect
tcp://127.0.0.1:PORT --keys RUN_DIR/keys``, or just ``--run-dir RUN_DIR``). Keys never
travel on a command line. The ipc socket the head's own actors use needs none: it lives
in a folder only its user may enter (``runtime.head.private_ipc_dir``), the same
boundary as the run directory's key files. The layout::

    keys/server.key            server public key  (copy to every attaching machine)
    keys/server.key_secret     server key pair    (stays on the head)
    keys/client.key_secret     client key pair    (copy to attaching machines)
    keys/authorized/client.key client public key  (what the head accepts)

The handler answers ZeroMQ's ZAP requests (RFC 27) on a ROUTER socket driven through
the trio bridge, and logs refusals as ``peer_refused`` events (the first few per address
and reason in full, then counted: :mod:`runtime.ratelimit`).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import trio
import zmq
import zmq.auth
import zmq.utils.monitor
from zmq.utils import z85

from runtime.events import log
from runtime.ratelimit import EventLimiter
from runtime.zmqtrio import TrioSocket

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # fixed by the ZAP specification
ZAP_VERSION = b"1.0"
HANDSHAKE_REASONS = {
    zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH: "no CURVE keys (mechanism mismatch)",
    zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC: "CURVE handshake failed (wrong server key?)",
}
"""What a failed handshake's value means, for ``peer_refused`` (ZeroMQ reports the
endpoint it happened on, not the peer's address)."""


RUN_KEYS = "keys"
"""The folder of a run directory holding the keys the head made for that run."""
KEYS_DIR_MODE = 0o700
KEY_FILE_MODE = 0o600


class KeysMissing(Exception):
    """Keys are missing or unreadable; the message says which file and what to run."""


def is_loopback(endpoint: str) -> bool:
    """True for ipc://, inproc:// and tcp:// on a loopback address."""
    scheme = endpoint.split("://", 1)[0]
    if scheme in ("ipc", "inproc"):
        return True
    host = urlsplit(endpoint).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def create_keys(keys_dir: Path, *, force: bool = False) -> Path:
    """Write a server key pair, a client key pair and the authorized folder."""
    if (keys_dir / "server.key_secret").exists() and not force:
        raise KeysMissing(f"{keys_dir}/server.key_secret exists; pass --force to replace it")
    keys_dir.mkdir(parents=True, exist_ok=True)
    zmq.auth.create_certificates(keys_dir, "server")
    zmq.auth.create_certificates(keys_dir, "client")
    authorized = keys_dir / "authorized"
    authorized.mkdir(exist_ok=True)
    shutil.copy(keys_dir / "client.key", authorized / "client.key")
    for secret in keys_dir.glob("*.key_secret"):
        secret.chmod(0o600)
    return keys_dir


def run_keys(keys_dir: Path) -> Path:
    """The keys of one run (``RUN_DIR/keys``), made on first use and kept for a resume:
    the folder is the owner's only (0700) and every file in it 0600, so another local
    user can neither read the client secret nor learn the server key."""
    if not (keys_dir / "server.key_secret").exists():
        keys_dir.mkdir(mode=KEYS_DIR_MODE, exist_ok=True)
        keys_dir.chmod(KEYS_DIR_MODE)  # mkdir's mode is cut by the umask
        create_keys(keys_dir, force=True)
    keys_dir.chmod(KEYS_DIR_MODE)
    for path in keys_dir.rglob("*"):
        if path.is_dir():
            path.chmod(KEYS_DIR_MODE)
        else:
            path.chmod(KEY_FILE_MODE)
    return keys_dir


def _load(path: Path, *, secret: bool) -> tuple[bytes, bytes | None]:
    if not path.exists():
        raise KeysMissing(
            f"{path} not found; create keys with `python run.py keys --dir {path.parent}`"
        )
    try:
        public, private = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise KeysMissing(f"{path}: not a ZeroMQ certificate ({exc})") from None
    if secret and private is None:
        raise KeysMissing(f"{path} holds no secret key; use the .key_secret file")
    return public, private


@dataclass(frozen=True)
class CurveClient:
    """What an attaching actor needs: its own key pair and the server's public key."""

    public: bytes
    secret: bytes
    server_public: bytes

    @classmethod
    def load(cls, keys_dir: Path, name: str = "client") -> CurveClient:
        public, secret = _load(keys_dir / f"{name}.key_secret", secret=True)
        server_public, _ = _load(keys_dir / "server.key", secret=False)
        assert secret is not None
        return cls(public, secret, server_public)

    def apply(self, sock: zmq.Socket) -> None:
        sock.curve_publickey = self.public
        sock.curve_secretkey = self.secret
        sock.curve_serverkey = self.server_public


@dataclass(frozen=True)
class CurveServer:
    """The head's key pair and the set of client keys it accepts."""

    public: bytes
    secret: bytes
    authorized: frozenset[bytes]

    @classmethod
    def load(cls, keys_dir: Path) -> CurveServer:
        public, secret = _load(keys_dir / "server.key_secret", secret=True)
        assert secret is not None
        folder = keys_dir / "authorized"
        keys = frozenset(_load(p, secret=False)[0] for p in sorted(folder.glob("*.key")))
        if not keys:
            raise KeysMissing(
                f"{folder} holds no client keys; run `python run.py keys --dir {keys_dir}`"
            )
        return cls(public, secret, keys)

    def apply(self, sock: zmq.Socket) -> None:
        sock.curve_server = True
        sock.curve_publickey = self.public
        sock.curve_secretkey = self.secret


class Authenticator:
    """ZAP handler: accepts NULL (loopback/ipc) and CURVE with an authorized key."""

    def __init__(self, context: zmq.Context, server: CurveServer | None) -> None:
        self.server = server
        self.refused = 0
        self._refusals = EventLimiter("peer_refused", ("address", "reason"))
        self._monitors: list[TrioSocket] = []
        sock = context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(ZAP_ENDPOINT)
        self.sock = TrioSocket(sock, self._on_request)

    def watch(self, sock: zmq.Socket) -> None:
        """Also log the handshakes that fail on ``sock`` before ZAP is asked: a peer
        without CURVE keys (mechanism mismatch) or with the wrong server key. Call
        before :meth:`run`."""
        # NO_DETAIL too: a keyless peer that sees the mismatch first hangs up, and this
        # side then sees only a broken connection.
        monitor = sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_FAILED_AUTH
            | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        )
        self._monitors.append(TrioSocket(monitor, self._on_handshake))

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                for monitor in self._monitors:
                    nursery.start_soon(monitor.run)
                await self.sock.run()
        finally:
            self._refusals.flush()
            for monitor in self._monitors:
                monitor.sock.close(linger=0)
            self.sock.sock.close(linger=0)

    def _on_handshake(self, frames: list[bytes]) -> None:
        event = zmq.utils.monitor.parse_monitor_message(frames)
        endpoint = str(event.get("endpoint", b""), errors="replace")
        if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            return  # ZAP refused it: _on_request logged that already, with the reason
        if not endpoint.startswith("tcp://"):
            # The ipc socket: nothing there demands keys; a broken-off handshake is
            # another head checking whether this one is alive (runtime.head.socket_state).
            return
        if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            why = f"handshake broken off ({os.strerror(int(event['value']))})"
        else:
            value = int(event["value"])
            why = HANDSHAKE_REASONS.get(value, f"handshake failed ({value:#x})")
        self.refused += 1
        self._refusals(endpoint, why)

    def _on_request(self, frames: list[bytes]) -> None:
        # [routing id, empty, version, request id, domain, address, identity, mechanism, creds...]
        if len(frames) < 8 or frames[2] != ZAP_VERSION:
            log.warning("zap_request_malformed", frames=len(frames))
            return
        route, request_id, address, mechanism = frames[0], frames[3], frames[5], frames[7]
        credentials = frames[8:]
        ok, why = self._check(mechanism, credentials)
        if not ok:
            self.refused += 1
            self._refusals(address.decode(errors="replace"), why)
        status, text = (b"200", b"OK") if ok else (b"400", why.encode())
        self.sock.send([route, b"", ZAP_VERSION, request_id, status, text, b"", b""])

    def _check(self, mechanism: bytes, credentials: list[bytes]) -> tuple[bool, str]:
        if mechanism == b"NULL":
            # NULL only reaches sockets that are not CURVE servers: ipc/loopback binds.
            return True, ""
        if mechanism == b"CURVE" and self.server is not None and credentials:
            # ZAP hands over the raw 32-byte key; certificate files hold it Z85-encoded.
            if z85.encode(credentials[0]) in self.server.authorized:
                return True, ""
            return False, "unknown client key"
        return False, f"mechanism {mechanism.decode(errors='replace')} not accepted"
