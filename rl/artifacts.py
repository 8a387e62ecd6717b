"""Policy files by content: hashing, storing what a learner sent, loading one to play.

Shared by the head (it stores the learners' results) and the workers (they load a
learned stage); ``torch`` and ``stable_baselines3`` are imported only by the loaders.

Nothing here unpickles. An SB3 zip holds ``data`` (JSON, in which SB3 keeps what is not
plain JSON — the policy class, the spaces, schedules, buffers — as cloudpickle under
``:serialized:``) and ``policy.pth`` / ``policy.optimizer.pth`` (torch files). The loaders
read only the plain JSON fields of ``data``, never a ``:serialized:`` one, and the torch
files with ``torch.load(..., weights_only=True)``; the network is rebuilt from the RL
config (its spaces) and the PPO settings by :func:`policy_spec`, the function the learner
builds its networks with, and every tensor must fit it exactly.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymnasium.spaces.utils import flatdim

from messages.train import TrainResult
from rl.rl_env import make_env
from runtime.artifacts import STORE_DIR, Store


class PolicyUnusable(Exception):
    """A policy file is missing, outside the run's store, or not the one its hash names."""


class ArtifactRefused(ValueError):
    """A training result names a file outside the run directory (or no file at all)."""


NAME_MAX = 100
"""Longest artifact name: a job name plus a version fits with room to spare, and
``policies/<name>.zip`` stays far below the 255-byte file-name limit."""


def inside(root: Path, path: str | Path) -> Path:
    """``path`` resolved (links followed), when it lies inside ``root``; raises
    :class:`PolicyUnusable` otherwise. Paths in messages come from peers: none becomes
    a file to read or write without this check."""
    resolved = Path(path).resolve()  # a relative path is relative to the cwd, as before
    if not resolved.is_relative_to(Path(root).resolve()):
        raise PolicyUnusable(
            f"{str(path)[:200]!r} is outside the run directory {root}: policies are"
            " stored and loaded only inside it"
        )
    return resolved


def artifact_name(name: str) -> str:
    """``name`` when it can be one file name in ``policies/``; raises
    :class:`ArtifactRefused` naming the field and the fix otherwise."""
    if (
        not name
        or len(name) > NAME_MAX
        or name in (".", "..")
        or any(c in name for c in "/\\\0")
        or name.startswith(".")
    ):
        raise ArtifactRefused(
            f"TrainResult.name {name[:120]!r} is not a plain file name (no '/', '\\',"
            f" NUL or leading '.', at most {NAME_MAX} characters): the learner that sent"
            " it is misbehaving; train requests name their jobs with plain names"
        )
    return name


def sha256_of(path: Path) -> str:
    """The file's sha256, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def store_artifact(run_dir: Path, result: TrainResult) -> Path:
    """Where a result's policy lives in ``run_dir``: a local learner's path as it is
    (it must lie inside ``run_dir``), a remote learner's bytes written to
    ``policies/<job>.zip`` after checking the hash (and kept by content in the run's
    artifact store, ``artifacts/sha256/<hex>``, :mod:`runtime.artifacts`). Raises
    :class:`ArtifactRefused` for a name or path that would leave ``run_dir``."""
    name = artifact_name(result.name)
    if not result.policy_bytes:
        try:
            return inside(run_dir, result.policy_path)
        except PolicyUnusable as exc:
            raise ArtifactRefused(f"TrainResult.policy_path of {name}: {exc}") from None
    digest = hashlib.sha256(result.policy_bytes).hexdigest()
    if digest != result.sha256:
        raise ValueError(f"policy of {name} arrived corrupted: sha256 {digest}")
    path = run_dir / "policies" / f"{name}.zip"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_bytes(result.policy_bytes)
    os.replace(tmp, path)
    # Also by content, for environment actors on other machines to fetch (a hard link).

    Store(run_dir / STORE_DIR).add_file(path, digest)
    return path


# ---------------------------------------------------------------------- loading SB3 zips

POLICY_PTH = "policy.pth"
"""The policy's state dict inside an SB3 zip."""
OPTIMIZER_PTH = "policy.optimizer.pth"
"""The optimizer's state dict (needed only to resume training)."""
DATA = "data"
"""The JSON of the model's other attributes."""

MAX_TENSOR_FILE_BYTES = 256 << 20
"""Largest ``.pth`` member read: a [128, 128] policy on Crafter's observation is ~1.5 MB
and its optimizer twice that, so this leaves room for networks ~100 times larger while a
zip bomb stops here."""
MAX_DATA_BYTES = 16 << 20
"""Largest ``data`` member read (~40 kB for the learner's policies)."""


def policy_spec(observation_space: Any, net_arch: Sequence[int]) -> tuple[str, dict[str, Any]]:
    """SB3's policy name and ``policy_kwargs`` for a network over ``observation_space``
    with hidden layers ``net_arch``: ``MultiInputPolicy`` for the RL interface's dict
    observations, ``MlpPolicy`` for a flat one. The learner's ``make_ppo`` and
    :func:`load_policy` both build from this, so a loaded network is the trained one."""
    dict_obs = type(observation_space).__name__ == "Dict"
    return ("MultiInputPolicy" if dict_obs else "MlpPolicy"), {"net_arch": list(net_arch)}


@dataclass
class SB3Zip:
    """What the safe loaders read from an SB3 zip."""

    policy: dict[str, Any]
    """The policy's state dict: parameter name → tensor."""
    optimizer: dict[str, Any] | None
    """The optimizer's state dict (read only when asked for)."""
    data: dict[str, Any]
    """The plain JSON fields of ``data``; the ``:serialized:`` ones are left out unread."""


def read_sb3_zip(path: Path, *, optimizer: bool = False) -> SB3Zip:
    """The tensors and plain fields of the SB3 zip at ``path``, without unpickling
    anything; raises :class:`PolicyUnusable` naming the file and what is wrong."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            if POLICY_PTH not in names:
                raise PolicyUnusable(
                    f"{path} has no {POLICY_PTH}: it is not a policy saved by SB3"
                    f" (members: {sorted(names)[:10]})"
                )
            policy = _tensors(path, zf, POLICY_PTH)
            state = None
            if optimizer:
                if OPTIMIZER_PTH not in names:
                    raise PolicyUnusable(f"{path} has no {OPTIMIZER_PTH}: training cannot resume")
                state = _tensors(path, zf, OPTIMIZER_PTH)
            data = _plain_data(path, zf) if DATA in names else {}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError) as exc:
        raise PolicyUnusable(f"{path} is not a readable zip: {exc}") from None
    except (NotImplementedError, RuntimeError, ValueError) as exc:  # a compression or
        # encryption zipfile cannot read, a member header that does not parse
        raise PolicyUnusable(f"{path} is not a readable zip: {exc}") from None
    return SB3Zip(policy, state, data)


def _member(path: Path, zf: zipfile.ZipFile, name: str, limit: int) -> bytes:
    with zf.open(name) as f:
        blob = f.read(limit + 1)  # the header's size could lie: count what comes
    if len(blob) > limit:
        raise PolicyUnusable(f"{path}: {name} is larger than {limit >> 20} MiB")
    return blob


def _tensors(path: Path, zf: zipfile.ZipFile, name: str) -> dict[str, Any]:
    import torch

    blob = _member(path, zf, name, MAX_TENSOR_FILE_BYTES)
    try:
        # weights_only: tensors, numbers, strings and plain containers; any other
        # pickled object is refused before it is built.
        state = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - UnpicklingError, a corrupt torch file
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        raise PolicyUnusable(
            f"{path}: {name} is not a plain state dict of tensors ({type(exc).__name__}: {first})"
        ) from None
    if not isinstance(state, dict):
        raise PolicyUnusable(f"{path}: {name} holds a {type(state).__name__}, not a state dict")
    return state


def _plain_data(path: Path, zf: zipfile.ZipFile) -> dict[str, Any]:
    blob = _member(path, zf, DATA, MAX_DATA_BYTES)
    try:
        data = json.loads(blob)
    except (ValueError, RecursionError) as exc:
        raise PolicyUnusable(f"{path}: its {DATA} is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise PolicyUnusable(f"{path}: its {DATA} is not a JSON object")
    return {k: v for k, v in data.items() if not (isinstance(v, dict) and ":serialized:" in v)}


def _net_arch(path: Path, data: dict[str, Any]) -> list[int]:
    """The hidden layers the zip says it has, from the plain ``policy_kwargs`` the
    learner writes (``{"net_arch": [...]}``); anything else is not ours to rebuild."""
    kwargs = data.get("policy_kwargs")
    arch = kwargs.get("net_arch") if isinstance(kwargs, dict) else None
    if (
        set(kwargs or ()) != {"net_arch"}
        or not isinstance(arch, list)
        or not arch
        or not all(type(n) is int and n > 0 for n in arch)
    ):
        raise PolicyUnusable(
            f"{path}: policy_kwargs {str(kwargs)[:200]} is not the learner's plain"
            " {'net_arch': [positive ints]}: the network cannot be rebuilt"
        )
    return arch


def _fits(path: Path, module: Any, state: dict[str, Any], what: str) -> None:
    """Load ``state`` into ``module`` when it has exactly its names, shapes and dtypes."""
    import torch

    expected = module.state_dict()
    missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or extra:
        raise PolicyUnusable(
            f"{path}: {what} does not match the network its config and net_arch make"
            f" (missing {missing[:5]}, unexpected {[str(k)[:60] for k in extra[:5]]})"
        )
    for name, want in expected.items():
        got = state[name]
        if not isinstance(got, torch.Tensor):
            raise PolicyUnusable(f"{path}: {what} {name} is a {type(got).__name__}, not a tensor")
        if got.shape != want.shape or got.dtype != want.dtype:
            raise PolicyUnusable(
                f"{path}: {what} {name} is {tuple(got.shape)} {got.dtype}, the network its"
                f" config and net_arch make has {tuple(want.shape)} {want.dtype}"
            )
    module.load_state_dict(state, strict=True)


def _seed(path: Path, data: dict[str, Any]) -> int | None:
    seed = data.get("seed")
    if seed is not None and not (type(seed) is int and 0 <= seed < 2**32):
        raise PolicyUnusable(f"{path}: seed {str(seed)[:40]} is not an int in [0, 2**32)")
    return seed


def load_policy(
    path: str | Path,
    sha256: str = "",
    root: Path | None = None,
    *,
    config: Any = None,
    net_arch: Sequence[int] | None = None,
) -> Any:
    """The SB3 policy in ``path``, on the CPU, rebuilt without unpickling anything: its
    spaces from the env ``config`` (the RL config it was trained with) makes, its hidden
    layers ``net_arch`` (default: the zip's plain ``policy_kwargs``), its weights loaded
    with ``weights_only``. Checks first the hash (when given) and, with ``root``, that the
    file lies inside ``root``. Raises :class:`PolicyUnusable` naming what is wrong: no
    config, a file that is not an SB3 zip, pickled objects among the tensors, tensors
    that do not fit the network.

    The result offers what callers use of an SB3 model: ``predict(obs,
    deterministic=...)``, ``observation_space``, ``action_space``. As ``PPO.load`` did,
    loading seeds the global RNGs with the seed the policy was trained with, so what a
    rollout samples does not depend on what the process did before."""
    path = inside(root, path) if root is not None else Path(path)
    if not path.is_file():
        raise PolicyUnusable(f"no policy at {path}")
    if sha256 and sha256_of(path) != sha256:
        raise PolicyUnusable(f"{path} does not match sha256 {sha256[:12]}…")
    if config is None:
        raise PolicyUnusable(
            f"{path}: a learned policy is loaded with the RL config it was trained on;"
            " the request or stage carries none"
        )
    saved = read_sb3_zip(path)
    arch = list(net_arch) if net_arch is not None else _net_arch(path, saved.data)
    seed = _seed(path, saved.data)

    from stable_baselines3 import PPO
    from stable_baselines3.common.utils import set_random_seed

    env = make_env(config)  # as the learner's envs: spaces only, no episode
    try:
        observation_space, action_space = env.observation_space, env.action_space
    finally:
        env.close()
    _affordable(path, saved.policy, observation_space, arch)
    name, kwargs = policy_spec(observation_space, arch)
    if seed is not None:
        set_random_seed(seed)
    policy = PPO.policy_aliases[name](
        observation_space, action_space, lambda _: 0.0, use_sde=False, **kwargs
    )
    _fits(path, policy, saved.policy, POLICY_PTH)
    policy.set_training_mode(False)
    return policy


def _affordable(path: Path, state: dict[str, Any], observation_space: Any, arch: list[int]) -> None:
    """Refuses a ``net_arch`` whose policy layers alone outweigh the float32 numbers the
    file's tensors store: building that network would allocate what the file never paid
    for. Storage bytes are counted, not shapes: a tensor can claim a large shape over a
    small storage (stride 0)."""
    import torch

    widths = [flatdim(observation_space), *arch]
    weights = sum(a * b for a, b in zip(widths, widths[1:], strict=False))
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for t in state.values()
        if isinstance(t, torch.Tensor)
    }
    held = sum(storages.values()) // 4
    if weights > held:
        raise PolicyUnusable(
            f"{path}: net_arch {arch[:8]} needs {weights} weights in its policy layers"
            f" alone, the file stores {held} numbers: it is not this config's policy"
        )


def restore_checkpoint(model: Any, path: Path) -> int:
    """Puts the SB3 checkpoint at ``path`` into ``model``, a fresh PPO built with the
    settings and env it was trained with: the policy and optimizer states (loaded with
    ``weights_only``, checked against the model's own shapes) and the counters
    (``num_timesteps``, ``_n_updates``, ``_episode_num``) from the plain JSON. What else
    SB3 keeps in ``data`` is left unread: the settings, spaces and schedules the fresh
    model already has; ``_last_obs`` and the episode-start flags, which ``PPO.load``
    with an env discards too (training resets the envs); and the episode-info buffers,
    which only feed SB3's rolling log means. Returns ``num_timesteps``; raises
    :class:`PolicyUnusable` naming what is wrong."""
    saved = read_sb3_zip(path, optimizer=True)
    counters = {}
    for name in ("num_timesteps", "_n_updates", "_episode_num"):
        value = saved.data.get(name, 0)
        if type(value) is not int or value < 0:
            raise PolicyUnusable(f"{path}: {name} {str(value)[:40]} is not a count")
        counters[name] = value
    _fits(path, model.policy, saved.policy, POLICY_PTH)
    _optimizer_fits(path, model.policy.optimizer, saved.optimizer or {})
    for name, value in counters.items():
        setattr(model, name, value)
    return counters["num_timesteps"]


def _optimizer_fits(path: Path, optimizer: Any, state: dict[str, Any]) -> None:
    """Load an optimizer state whose per-parameter tensors fit the parameters."""
    import torch

    params = [p for group in optimizer.param_groups for p in group["params"]]
    groups, per_param = state.get("param_groups"), state.get("state")
    ok = isinstance(groups, list) and isinstance(per_param, dict)
    ok = ok and len(groups) == len(optimizer.param_groups)
    ok = ok and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups or ())
    if ok:
        indices = [i for g in groups for i in g["params"]]
        ok = indices == list(range(len(params)))
    if not ok:
        raise PolicyUnusable(
            f"{path}: {OPTIMIZER_PTH} is not the state of this model's optimizer"
            f" ({len(params)} parameters in {len(optimizer.param_groups)} group(s))"
        )
    for index, entry in per_param.items():
        if type(index) is not int or not 0 <= index < len(params) or not isinstance(entry, dict):
            raise PolicyUnusable(f"{path}: {OPTIMIZER_PTH} has a state for parameter {index!r}")
        for key, value in entry.items():
            shape = () if key == "step" else params[index].shape
            if not isinstance(value, torch.Tensor) or value.shape != shape:
                raise PolicyUnusable(
                    f"{path}: {OPTIMIZER_PTH} state {key!r} of parameter {index} does not"
                    f" fit it ({getattr(value, 'shape', type(value).__name__)} for {shape})"
                )
    try:
        optimizer.load_state_dict(state)
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise PolicyUnusable(f"{path}: {OPTIMIZER_PTH} does not load: {exc}") from None
