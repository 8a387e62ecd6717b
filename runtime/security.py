"""CURVE keys, one client key per machine, and the authentication handler.

Every tcp endpoint the head binds (``[runtime] listen``) demands CURVE, loopback
included: a loopback port is open to every local user. The broker holds the server key
pair and accepts only clients whose public key is in the ``authorized/`` folder of the
keys directory. With ``[runtime] keys_dir`` that is the user's folder, made by
``python run.py keys init`` (or plain ``keys``), with one client key per attaching
machine added by ``keys add NAME`` and withdrawn by ``keys revoke NAME``; without it
(loopback only) the head makes keys for the run in ``RUN_DIR/keys`` (:func:`run_keys`:
folder 0700, files 0600), and an actor attached on the same machine by the same user
reads them there (``run.py attach ROLE --connect tcp://127.0.0.1:PORT --keys
RUN_DIR/keys``, or just ``--run-dir RUN_DIR``). Keys never travel on a command line
(``attach --key-name NAME`` names the file). The ipc socket the head's own actors use
needs none: it lives in a folder only its user may enter
(``runtime.head.private_ipc_dir``), the same boundary as the run directory's key files.
The layout::

    keys/server.key             server public key  (copy to every attaching machine)
    keys/server.key_secret      server key pair    (stays on the head)
    keys/client.key_secret      client key pair    (``keys init``'s, named "client")
    keys/NAME.key_secret        client key pair    (``keys add NAME``: copy to that machine)
    keys/authorized/NAME.key    client public keys (what the head accepts)
    keys/revoked/NAME.key       revoked ones       (``keys revoke NAME``; kept for ``keys list``)

The handler answers ZeroMQ's ZAP requests (RFC 27) on a ROUTER socket driven through
the trio bridge, and logs refusals as ``peer_refused`` events (the first few per address
and reason in full, then counted: :mod:`runtime.ratelimit`). It answers an accepted
CURVE client with a *user id*, ``NAME/PUBLICKEY`` (:meth:`KeyRing.user_id`), which
ZeroMQ attaches to every message of that connection: the broker reads it to know which
key a connection holds (a client cannot choose it; it is set after the key's proof). The
handler re-reads ``authorized/`` every ``poll_s`` seconds (a listing with each file's
inode, size and mtime: a few stat calls), so a revoked key is refused at the next
handshake, and it tells the broker (``on_keys_changed``), which disconnects the actors
already attached with it (``runtime.broker``: ``actor_revoked``).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import tempfile
from collections.abc import Callable
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


REVOKED_KEYS = "revoked"
"""The folder of a keys directory holding revoked client keys (``keys revoke``)."""
CLIENT_NAME = "client"
"""The client key ``keys init`` makes, and the one ``attach`` uses without --key-name."""
KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A client key's name: a plain file name (no path characters, no leading dot)."""
RESERVED_KEY_NAMES = frozenset({"server"})
"""Names a client key may not take: ``server.key_secret`` is the head's own pair."""
KEYS_POLL_S = 1.0
"""How often the head re-reads ``authorized/`` by default (the head passes its heartbeat
interval): a revocation takes effect within about one."""


class KeysMissing(Exception):
    """Keys are missing or unreadable; the message says which file and what to run."""


class KeysRefused(KeysMissing):
    """A key command that would do harm (a bad name, a key that exists); says why."""


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
    """``keys init``: write a server key pair, the client key pair ``client`` and the
    authorized folder accepting it."""
    if (keys_dir / "server.key_secret").exists() and not force:
        raise KeysRefused(f"{keys_dir}/server.key_secret exists; pass --force to replace it")
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
        hint = (
            f"create keys with `python run.py keys init --dir {path.parent}`"
            if path.name.startswith(("server.", f"{CLIENT_NAME}."))
            else f"make it on the head with `python run.py keys add {path.name.split('.')[0]}`"
            " and copy it here"
        )
        raise KeysMissing(f"{path} not found; {hint}")
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
    def load(cls, keys_dir: Path, name: str = CLIENT_NAME) -> CurveClient:
        check_key_name(name)
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
    """The head's key pair and the client keys it accepts (re-read when they change)."""

    public: bytes
    secret: bytes
    keys: KeyRing

    @classmethod
    def load(cls, keys_dir: Path) -> CurveServer:
        public, secret = _load(keys_dir / "server.key_secret", secret=True)
        assert secret is not None
        keys = KeyRing(keys_dir / "authorized")
        if not keys.names:
            raise KeysMissing(
                f"{keys.folder} holds no client keys; run `python run.py keys add NAME "
                f"--dir {keys_dir}` (or `keys init --dir {keys_dir}` for a new folder)"
            )
        return cls(public, secret, keys)

    def apply(self, sock: zmq.Socket) -> None:
        sock.curve_server = True
        sock.curve_publickey = self.public
        sock.curve_secretkey = self.secret


class KeyRing:
    """The client keys in an ``authorized/`` folder, by public key (Z85), each with its
    name (the file's name less ``.key``). :meth:`reload` re-reads the folder when its
    listing changed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.names: dict[bytes, str] = {}
        """Z85 public key → key name."""
        self._stamp: tuple | None = None
        self._error = ""
        self.reload()

    def _listing(self) -> tuple:
        """(name, inode, size, mtime) of each ``*.key`` file: what :meth:`reload` compares."""
        found = []
        try:
            with os.scandir(self.folder) as entries:
                for entry in entries:
                    if not entry.name.endswith(".key") or entry.name == ".key":
                        continue
                    try:
                        st = entry.stat()
                    except FileNotFoundError:
                        continue  # removed meanwhile
                    found.append((entry.name, st.st_ino, st.st_size, st.st_mtime_ns))
        except FileNotFoundError:
            pass
        return tuple(sorted(found))

    def reload(self) -> bool:
        """Re-read the folder if its listing changed; True when it did. A file that
        cannot be read (a copy half written) keeps the key its name had, so a slow copy
        never revokes anyone."""
        try:
            stamp = self._listing()
        except OSError as exc:  # (not there is fine: no keys) unreadable: keep what we had
            if str(exc) != self._error:  # once, not every poll
                log.warning("client_keys_unreadable", folder=str(self.folder), detail=str(exc))
            self._error = str(exc)
            return False
        self._error = ""
        if stamp == self._stamp:
            return False
        old = {name: key for key, name in self.names.items()}
        names: dict[bytes, str] = {}
        for file_name, *_ in stamp:
            name = file_name.removesuffix(".key")
            try:
                public = _load(self.folder / file_name, secret=False)[0]
            except KeysMissing as exc:
                log.warning(
                    "client_key_unreadable", file=str(self.folder / file_name), detail=str(exc)
                )
                if name not in old:
                    continue
                public = old[name]
            if public in names:
                log.warning(
                    "client_key_duplicate", key=name, same_as=names[public],
                    detail="two files hold one key: revoking one name leaves it accepted",
                )  # fmt: skip
                continue
            names[public] = name
        self.names, self._stamp = names, stamp
        return True

    def user_id(self, public: bytes) -> str | None:
        """What ZAP answers for an accepted key (Z85): ``NAME/KEY``; None if unknown."""
        name = self.names.get(public)
        return None if name is None else f"{name}/{public.decode()}"

    def allows(self, user_id: str) -> bool:
        """True while the key a connection was accepted with (its user id) is still
        authorized under the same name: a key revoked, or replaced by ``keys add NAME
        --force``, is not."""
        name, _, key = user_id.partition("/")
        return self.names.get(key.encode()) == name


def key_name_of(user_id: str) -> str:
    """The key name in a user id (``NAME/KEY``)."""
    return user_id.partition("/")[0]


# ------------------------------------------------------------------ key commands


def check_key_name(name: str) -> str:
    """``name`` if it can name a client key; :class:`KeysRefused` saying why otherwise."""
    if not KEY_NAME.fullmatch(name):
        raise KeysRefused(
            f"{name!r} is not a key name: use letters, digits, '.', '_' and '-' (64 at most,"
            " not starting with '.' or '-'), e.g. the machine's host name"
        )
    if name in RESERVED_KEY_NAMES:
        raise KeysRefused(f"{name!r} is the head's own key pair; pick another name")
    return name


def add_client_key(keys_dir: Path, name: str, *, force: bool = False) -> Path:
    """Make the key pair of one attaching machine: ``NAME.key_secret`` (to copy there)
    and ``authorized/NAME.key`` (what the head accepts). Refuses a bad name, and a name
    that exists or was revoked unless ``force`` (which replaces it: a running head then
    refuses the old key and disconnects whoever holds it). Returns the secret's path."""
    check_key_name(name)
    if not (keys_dir / "server.key_secret").exists():
        raise KeysMissing(
            f"{keys_dir} holds no server key; run `python run.py keys init --dir {keys_dir}` first"
        )
    secret = keys_dir / f"{name}.key_secret"
    authorized = keys_dir / "authorized"
    revoked = keys_dir / REVOKED_KEYS / f"{name}.key"
    if not force:
        if revoked.exists():
            raise KeysRefused(
                f"the key {name!r} was revoked ({revoked}); pass --force to make a new key"
                " under that name, or pick another name"
            )
        for path in (authorized / f"{name}.key", secret):
            if path.exists():
                raise KeysRefused(
                    f"the key {name!r} exists ({path}); pick another name, or pass --force"
                    " to replace it (the old key is refused from then on)"
                )
    authorized.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=keys_dir, prefix=".new-") as tmp:
        zmq.auth.create_certificates(tmp, name)
        made = Path(tmp)
        (made / f"{name}.key_secret").chmod(KEY_FILE_MODE)
        # The secret first: the head accepts the key only once it can be copied.
        os.replace(made / f"{name}.key_secret", secret)
        os.replace(made / f"{name}.key", authorized / f"{name}.key")
    revoked.unlink(missing_ok=True)
    return secret


def revoke_client_key(keys_dir: Path, name: str) -> Path:
    """Move ``authorized/NAME.key`` to ``revoked/NAME.key``: a running head refuses the
    key from its next poll on and disconnects the actors attached with it. Returns the
    revoked file's path."""
    check_key_name(name)
    source = keys_dir / "authorized" / f"{name}.key"
    target = keys_dir / REVOKED_KEYS / f"{name}.key"
    if not source.exists():
        if target.exists():
            raise KeysRefused(f"the key {name!r} is revoked already ({target})")
        known = ", ".join(e.name for e in list_keys(keys_dir) if e.state == "authorized")
        raise KeysRefused(
            f"no key {name!r} in {keys_dir}/authorized (authorized: {known or 'none'})"
        )
    target.parent.mkdir(mode=KEYS_DIR_MODE, exist_ok=True)
    os.replace(source, target)
    return target


@dataclass(frozen=True)
class KeyEntry:
    """One client key, as ``keys list`` shows it."""

    name: str
    state: str
    """``authorized`` or ``revoked``."""
    public: str
    """Its Z85 public key (what the head checks), or a reason it cannot be read."""
    secret_here: bool
    """``NAME.key_secret`` is in the folder (still to be copied, or this machine's own)."""


def list_keys(keys_dir: Path) -> list[KeyEntry]:
    """Every client key in ``keys_dir``, authorized ones first, by name."""
    entries = []
    for state, folder in (("authorized", "authorized"), ("revoked", REVOKED_KEYS)):
        for path in sorted((keys_dir / folder).glob("*.key")):
            try:
                public = _load(path, secret=False)[0].decode()
            except KeysMissing:
                public = "(unreadable)"
            name = path.name.removesuffix(".key")
            secret = (keys_dir / f"{name}.key_secret").exists()
            entries.append(KeyEntry(name, state, public, secret))
    return entries


class Authenticator:
    """ZAP handler: accepts NULL (loopback/ipc) and CURVE with an authorized key."""

    def __init__(
        self,
        context: zmq.Context,
        server: CurveServer | None,
        *,
        poll_s: float = KEYS_POLL_S,
        on_keys_changed: Callable[[], None] | None = None,
    ) -> None:
        self.server = server
        self.poll_s = poll_s
        self.on_keys_changed = on_keys_changed
        """Called after ``authorized/`` changed (the head: the broker's ``check_keys``)."""
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
                if self.server is not None:
                    nursery.start_soon(self._watch_keys, self.server.keys)
                await self.sock.run()
        finally:
            self._refusals.flush()
            for monitor in self._monitors:
                monitor.sock.close(linger=0)
            self.sock.sock.close(linger=0)

    async def _watch_keys(self, keys: KeyRing) -> None:
        """Re-read ``authorized/`` every ``poll_s``: a new key is accepted and a removed
        one refused from the next handshake, and the broker hears of it at once."""
        while True:
            await trio.sleep(self.poll_s)
            if keys.reload():
                log.info("client_keys_changed", authorized=sorted(keys.names.values()))
                if self.on_keys_changed is not None:
                    self.on_keys_changed()

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
        ok, why, user = self._check(mechanism, credentials)
        if not ok:
            self.refused += 1
            self._refusals(address.decode(errors="replace"), why)
        status, text = (b"200", b"OK") if ok else (b"400", why.encode())
        self.sock.send([route, b"", ZAP_VERSION, request_id, status, text, user, b""])

    def _check(self, mechanism: bytes, credentials: list[bytes]) -> tuple[bool, str, bytes]:
        """(accepted, why not, the user id ZeroMQ attaches to the connection's messages)."""
        if mechanism == b"NULL":
            # NULL only reaches sockets that are not CURVE servers: ipc/loopback binds.
            return True, "", b""
        if mechanism == b"CURVE" and self.server is not None and credentials:
            # ZAP hands over the raw 32-byte key; certificate files hold it Z85-encoded.
            user = self.server.keys.user_id(z85.encode(credentials[0]))
            if user is not None:
                return True, "", user.encode()
            return False, "unknown client key", b""
        return False, f"mechanism {mechanism.decode(errors='replace')} not accepted", b""
