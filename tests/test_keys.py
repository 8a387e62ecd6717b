"""One client key per machine, revoked at once, and actors that must run the head's code.

``run.py keys add/revoke/list`` manage the keys; a running head re-reads ``authorized/``
every heartbeat interval, refuses a revoked key's new connections and disconnects the
actors attached with it (their jobs go to others; the revoked process exits with status 2
saying ``key_revoked``). A connection cannot pass for another key's actor. An actor
whose source tree differs from the head's is refused on both sides unless attached with
``--allow-version-mismatch``. Real heads, real attach processes, real CURVE sockets on
127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
import trio
import zmq
from helpers import ROOT, make_settings, run_head_with, wait_until

from messages import ASK, BROKER, Envelope, decode, decode_envelope, encode
from messages.codec import encode_envelope
from messages.control import Failure, Probe, Register, Registered, StatusQuery
from rlgpt.cli import main
from runtime import provenance
from runtime.config import ActorSettings
from runtime.head import Head
from runtime.security import CurveClient, add_client_key, create_keys, revoke_client_key

RUN = [sys.executable, str(ROOT / "run.py")]


def _keys(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(["keys", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


# ---------------------------------------------------------------- the commands


def test_keys_add_revoke_and_list_manage_one_key_per_machine(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    k = tmp_path / "k"
    code, _, err = _keys(["add", "gpu1", "--dir", "k"], capsys)
    assert code == 2 and "keys init --dir k" in err  # no server key yet
    assert _keys(["--dir", "k"], capsys)[0] == 0  # no action: init, as before
    assert (k / "authorized" / "client.key").exists()

    code, out, _ = _keys(["add", "gpu1", "--dir", "k"], capsys)
    assert code == 0 and "--key-name gpu1" in out
    assert stat.S_IMODE(os.stat(k / "gpu1.key_secret").st_mode) == 0o600
    assert (k / "authorized" / "gpu1.key").exists() and not (k / "gpu1.key").exists()
    CurveClient.load(k, "gpu1")  # a usable pair, with the server key beside it
    code, _, err = _keys(["add", "gpu1", "--dir", "k"], capsys)
    assert code == 2 and "exists" in err and "--force" in err
    for bad in ("../evil", "a/b", ".hidden", "", "server"):
        code, _, err = _keys(["add", bad, "--dir", "k"], capsys)
        assert code == 2 and ("not a key name" in err or "head's own" in err), (bad, err)
    assert not list(tmp_path.rglob("evil*"))
    assert sorted(p.name for p in k.glob("*.key_secret")) == [
        "client.key_secret",
        "gpu1.key_secret",
        "server.key_secret",
    ]

    code, out, _ = _keys(["list", "--dir", "k"], capsys)
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["client"][1] == "authorized" and rows["gpu1"][1] == "authorized"

    code, out, _ = _keys(["revoke", "gpu1", "--dir", "k"], capsys)
    assert code == 0 and "disconnects" in out
    assert (k / "revoked" / "gpu1.key").exists() and not (k / "authorized" / "gpu1.key").exists()
    rows = {
        ln.split()[0]: ln.split()
        for ln in _keys(["list", "--dir", "k"], capsys)[1].splitlines()[1:]
    }
    assert rows["gpu1"][1] == "revoked" and rows["client"][1] == "authorized"
    code, _, err = _keys(["revoke", "gpu1", "--dir", "k"], capsys)
    assert code == 2 and "revoked already" in err
    code, _, err = _keys(["revoke", "nosuch", "--dir", "k"], capsys)
    assert code == 2 and "authorized: client" in err

    # A revoked name is not re-added by accident; --force makes a new key under it.
    old = (k / "revoked" / "gpu1.key").read_bytes()
    code, _, err = _keys(["add", "gpu1", "--dir", "k"], capsys)
    assert code == 2 and "revoked" in err and "--force" in err
    assert _keys(["add", "gpu1", "--dir", "k", "--force"], capsys)[0] == 0
    assert (k / "authorized" / "gpu1.key").read_bytes() != old
    assert not (k / "revoked" / "gpu1.key").exists()
    # `keys init` is the plain `keys`; it still refuses to replace a folder's keys.
    code, _, err = _keys(["init", "--dir", "k"], capsys)
    assert code == 2 and "--force" in err


def test_attach_names_a_missing_key_and_refuses_a_path_as_its_name(tmp_path: Path, capsys) -> None:
    create_keys(tmp_path / "k")
    argv = ["attach", "probe", "--connect", "tcp://192.0.2.1:5555", "--keys", str(tmp_path / "k")]
    assert main([*argv, "--key-name", "gpu7"]) == 2
    assert "gpu7.key_secret not found" in capsys.readouterr().err
    assert main([*argv, "--key-name", "../k/client"]) == 2
    assert "not a key name" in capsys.readouterr().err


# ------------------------------------------------------------------ revocation


def _settings(tmp_path: Path, keys: Path, heartbeat_timeout: float = 5.0):
    return make_settings(
        tmp_path, listen="tcp://127.0.0.1:0", keys_dir=str(keys),
        heartbeat_timeout=heartbeat_timeout,
    )  # fmt: skip


def _attach(head: Head, keys: Path, key: str, name: str) -> list[str]:
    return [*RUN, "attach", "probe", "--connect", head.listen, "--keys", str(keys),
            "--key-name", key, "--name", name, "--quiet"]  # fmt: skip


def test_a_revoked_key_is_refused_and_its_actor_is_disconnected_mid_job(tmp_path: Path) -> None:
    keys = create_keys(tmp_path / "keys")
    for name in ("gpu1", "gpu2"):
        add_client_key(keys, name)
    seen: dict = {}

    async def driver(head: Head) -> dict:
        broker = head.broker
        async with trio.open_nursery() as nursery:

            async def revoked_process() -> None:
                done = await trio.run_process(
                    _attach(head, keys, "gpu1", "one"), capture_stderr=True, check=False
                )
                seen["one"] = (done.returncode, done.stderr.decode())

            nursery.start_soon(revoked_process)
            await wait_until(lambda: "one" in broker.peers, timeout=60, what="gpu1 attached")

            async def job() -> None:
                # Held long enough for gpu2's process to start and attach while the job is
                # still on gpu1: with 2 s it ended on gpu1 first on a loaded machine (a CI
                # check beside a diamond run).
                seen["reply"] = await head.client.ask("@probe", Probe(seq=7, hold_s=10.0))

            nursery.start_soon(job)
            await wait_until(
                lambda: broker.peers["one"].inflight, timeout=10, what="the job on gpu1"
            )
            two = await trio.lowlevel.open_process(_attach(head, keys, "gpu2", "two"))
            try:
                await wait_until(lambda: "two" in broker.peers, timeout=60, what="gpu2 attached")
                revoke_client_key(keys, "gpu1")
                revoked_at = time.monotonic()
                await wait_until(
                    lambda: "one" not in broker.peers, timeout=10, what="gpu1's actor gone"
                )
                seen["noticed_s"] = time.monotonic() - revoked_at
                await wait_until(lambda: "reply" in seen, timeout=60, what="the job answered")
                await wait_until(lambda: "one" in seen, timeout=30, what="gpu1's process exit")
                # A new connection with the revoked key is refused at the handshake.
                done = await trio.run_process(
                    _attach(head, keys, "gpu1", "again"), capture_stderr=True, check=False
                )
                seen["again"] = (done.returncode, done.stderr.decode())
            finally:
                two.terminate()
                await two.wait()
        return {}

    run = run_head_with(_settings(tmp_path, keys), driver)
    assert run.code == 0
    assert seen["noticed_s"] < 3.0  # polled every heartbeat interval (0.2 s here)
    assert seen["reply"].actor_id == "two" and seen["reply"].seq == 7
    code, err = seen["one"]
    assert code == 2 and "key_revoked" in err and "'gpu1'" in err, err
    (revoked,) = run.named("actor_revoked")
    assert revoked["key"] == "gpu1" and revoked["actor_id"] == "one" and revoked["jobs"] == 1
    assert [e["reason"] for e in run.named("actor_lost") if e["actor_id"] == "one"] == [
        "key_revoked"
    ]
    assert any(e["queue"] == "@probe" for e in run.named("job_requeued"))
    code, err = seen["again"]
    assert code == 2 and "refused our CURVE key" in err, err
    assert any(e["reason"] == "unknown client key" for e in run.named("peer_refused"))
    assert [e["key"] for e in run.named("actor_registered") if e["actor_id"] == "two"] == ["gpu2"]


class CurvePeer:
    """A raw DEALER with a client key of ``keys``: it speaks the protocol by hand, so it
    can keep talking after its key is revoked, or pick its own routing id."""

    def __init__(self, endpoint: str, keys: Path, key: str, routing_id: bytes = b"") -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if routing_id:
            self.sock.setsockopt(zmq.ROUTING_ID, routing_id)
        CurveClient.load(keys, key).apply(self.sock)
        self.sock.connect(endpoint)
        self.ids = 0

    def send(self, mode: int, msg: object) -> str:
        self.ids += 1
        msg_id = f"raw.{self.ids}"
        env = Envelope(mode, msg_id, BROKER, "", "", type(msg).__message_kind__)
        self.sock.send_multipart([encode_envelope(env), encode(msg)])
        return msg_id

    async def answer(self, timeout: float = 10) -> tuple[Envelope, object] | None:
        with trio.move_on_after(timeout):
            while not self.sock.poll(0):
                await trio.sleep(0.02)
            header, body = self.sock.recv_multipart()
            return decode_envelope(header), decode(body)
        return None

    async def register(self, name: str) -> object:
        mine = provenance.current()
        self.send(ASK, Register("probe", name, version=mine.version, source_hash=mine.source_hash))
        got = await self.answer()
        assert got is not None, "no answer to Register"
        return got[1]

    def close(self) -> None:
        self.sock.close(linger=0)


def test_a_revoked_connection_gets_nothing_more_and_no_client_passes_for_another_key(
    tmp_path: Path,
) -> None:
    keys = create_keys(tmp_path / "keys")
    for name in ("m3", "m4", "m5"):
        add_client_key(keys, name)
    seen: dict = {}

    async def driver(head: Head) -> dict:
        broker = head.broker
        three = CurvePeer(head.listen, keys, "m3")
        four = CurvePeer(head.listen, keys, "m4", routing_id=b"chosen-id")
        try:
            assert isinstance(await three.register("three"), Registered)
            assert isinstance(await four.register("four"), Registered)
            revoke_client_key(keys, "m3")
            await wait_until(lambda: "three" not in broker.peers, timeout=10, what="m3 revoked")
            got = await three.answer()  # what it is told, unasked
            seen["told"] = got[1]
            # Everything it sends from now on is refused: a new registration, a status.
            seen["register_again"] = await three.register("three")
            three.send(ASK, StatusQuery())
            seen["status"] = (await three.answer())[1]
            seen["peers"] = sorted(broker.peers)

            # m4's connection goes; m5 claims its routing id (a client may pick its own)
            # and speaks as the actor "four" still registered under it.
            four.close()
            await trio.sleep(0.5)
            five = CurvePeer(head.listen, keys, "m5", routing_id=b"chosen-id")
            try:
                five.send(ASK, StatusQuery())
                seen["five"] = await five.answer(timeout=2)
            finally:
                five.close()
        finally:
            three.close()
            four.close()
        return {}

    # "four" stays registered (silent) for the whole test: its name is what five wants.
    run = run_head_with(_settings(tmp_path, keys, heartbeat_timeout=60.0), driver)
    assert run.code == 0
    assert isinstance(seen["told"], Failure) and seen["told"].reason == "key_revoked"
    assert isinstance(seen["register_again"], Failure)
    assert seen["register_again"].reason == "key_revoked"
    assert isinstance(seen["status"], Failure) and seen["status"].reason == "key_revoked"
    assert seen["peers"] == ["artifacts", "four", "head"]  # the head's own two, and four
    assert seen["five"] is None  # no status reply to the impostor
    rejected = {e["reason"] for e in run.named("message_rejected")}
    assert {"key_revoked", "key_mismatch"} <= rejected


# -------------------------------------------------------------------- versions


def _other_checkout(tmp_path: Path) -> Path:
    """A copy of this checkout's packages with one edited file: another source tree."""
    copy = tmp_path / "other-checkout"
    ignore = shutil.ignore_patterns("__pycache__")
    for package in provenance.PACKAGES:
        shutil.copytree(ROOT / package, copy / package, ignore=ignore)
    shutil.copy(ROOT / "run.py", copy / "run.py")
    with open(copy / "runtime" / "events.py", "a") as f:
        f.write("\n# a local edit\n")
    return copy


def test_an_actor_running_other_code_is_refused_on_both_sides_unless_it_allows_it(
    tmp_path: Path,
) -> None:
    keys = create_keys(tmp_path / "keys")
    other = _other_checkout(tmp_path)
    seen: dict = {}

    async def driver(head: Head) -> dict:
        argv = [sys.executable, str(other / "run.py"), "attach", "probe", "--connect",
                head.listen, "--keys", str(keys), "--name", "old"]  # fmt: skip
        with trio.fail_after(60):  # refused: it exits by itself
            done = await trio.run_process(argv, capture_stderr=True, check=False, cwd=other)
        seen["refused"] = (done.returncode, done.stderr.decode())
        proc = await trio.lowlevel.open_process([*argv, "--allow-version-mismatch"], cwd=other)
        try:
            seen["reply"] = await head.client.ask("@probe", Probe(seq=3), timeout=60)
        finally:
            proc.terminate()
            await proc.wait()
        return {}

    run = run_head_with(_settings(tmp_path, keys), driver)
    assert run.code == 0
    head = provenance.current()
    theirs = provenance.hash_tree(other)
    assert theirs != head.source_hash
    code, err = seen["refused"]
    assert code == 2 and "version_mismatch" in err, err
    assert head.source_hash[:12] in err and theirs[:12] in err and head.version in err
    assert "--allow-version-mismatch" in err and "checkout" in err
    (refused,) = run.named("registration_refused")
    assert refused["reason"] == "version_mismatch" and refused["actor_id"] == "old"
    assert refused["head_source"] == head.source_hash and refused["actor_source"] == theirs
    assert seen["reply"].actor_id == "old"
    (allowed,) = run.named("version_mismatch_allowed")
    assert allowed["actor_id"] == "old" and allowed["actor_source"] == theirs


def test_the_heads_own_actors_pass_the_check_with_this_trees_hash(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, {"probe": ActorSettings(count=1)})

    async def driver(head: Head) -> dict:
        await head.wait_for("probe", 1)
        return {"seq": (await head.client.ask("@probe", Probe(seq=5), timeout=60)).seq}

    run = run_head_with(settings, driver)
    assert run.code == 0 and run.report["seq"] == 5
    mine = provenance.current()
    registered = {e["actor_id"]: e for e in run.named("actor_registered")}
    assert {"head", "probe-0"} <= set(registered)
    assert all(e["version"] == mine.version for e in registered.values())
    assert not run.named("registration_refused") and not run.named("version_mismatch_allowed")


# ----------------------------------------------------------------- the hash


def test_the_source_hash_covers_code_and_data_and_nothing_else(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for package in provenance.PACKAGES:
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("*.pyc"))
    base = provenance.hash_tree(tree)
    assert base == provenance.hash_tree(ROOT)
    # Caches, notes and run folders beside the code change nothing ...
    (tree / "runtime" / "__pycache__").mkdir(exist_ok=True)
    (tree / "runtime" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    (tree / "llm" / "notes.md").write_text("notes")
    (tree / "rlgpt" / "configs" / "mine.json").write_text("{}")
    assert provenance.hash_tree(tree) == base
    # ... code, a prompt or a shipped config does.
    for rel in ("messages/control.py", "llm/prompts/fast_code.txt", "rlgpt/configs/diamond.toml"):
        path = tree / rel
        kept = path.read_bytes()
        path.write_bytes(kept + b"\n")
        assert provenance.hash_tree(tree) != base, rel
        path.write_bytes(kept)
    # A file moved to another name is another tree, even with the same bytes.
    (tree / "episodes" / "trace.py").rename(tree / "episodes" / "trace2.py")
    assert provenance.hash_tree(tree) != base


def test_a_checkout_and_its_wheel_installed_hash_alike(tmp_path: Path) -> None:
    from test_package import _wheel  # builds from a copy of this checkout (~4 s)

    installed = tmp_path / "site-packages"
    with zipfile.ZipFile(_wheel(tmp_path / "dist")) as wheel:
        wheel.extractall(installed)
    assert provenance.hash_tree(installed) == provenance.hash_tree(ROOT)


def test_the_hashed_packages_and_data_are_the_ones_the_wheel_ships() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["name"] == provenance.DISTRIBUTION
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(p.rstrip("*") for p in include) == sorted(provenance.PACKAGES)
    data = project["tool"]["setuptools"]["package-data"]
    shipped = {f"{pkg.replace('.', '/')}/{pat}" for pkg, pats in data.items() for pat in pats}
    hashed = {f"{folder}/{pattern}" for folder, pattern in provenance.PACKAGE_DATA.items()}
    assert hashed == shipped - {"*/py.typed"}  # py.typed changes no behaviour


@pytest.mark.parametrize("name", ["client", "gpu-1", "node_07.lab"])
def test_plain_host_like_names_are_key_names(name: str) -> None:
    from runtime.security import check_key_name

    assert check_key_name(name) == name
