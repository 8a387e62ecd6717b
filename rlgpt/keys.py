"""The CURVE keys an attached actor connects with: those a head made for its run, found
in its run folder, and the keys as the text ``attach --keys-stdin`` reads (what the Ray
launcher, :mod:`rlgpt.ray_attach`, hands each copy it starts)."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.security import RUN_KEYS, CurveClient


def keys_to_text(curve) -> str:
    """A :class:`runtime.security.CurveClient` as the JSON ``--keys-stdin`` reads."""
    return json.dumps(
        {
            "public": curve.public.decode(),
            "secret": curve.secret.decode(),
            "server_public": curve.server_public.decode(),
        }
    )


def keys_from_text(text: str):
    """The keys ``--keys-stdin`` got (:func:`keys_to_text`); ValueError if malformed."""
    try:
        data = json.loads(text)
        fields = {k: str(data[k]).encode() for k in ("public", "secret", "server_public")}
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--keys-stdin: standard input holds no keys ({exc})") from None
    if any(len(v) != 40 for v in fields.values()):  # a Z85 CURVE key is 40 characters
        raise ValueError("--keys-stdin: a key is not 40 Z85 characters")
    return CurveClient(**fields)


def run_keys(connect: str, run_dir: str, name: str = "client") -> str:
    """The keys a head made for its run (``RUN_DIR/keys``), for an actor attached on the
    same machine to its loopback tcp endpoint with ``--run-dir`` and no ``--keys``; ''
    where there are none (ipc needs none)."""
    if not run_dir or not connect.startswith("tcp://"):
        return ""
    folder = Path(run_dir) / RUN_KEYS
    return str(folder) if (folder / f"{name}.key_secret").is_file() else ""
