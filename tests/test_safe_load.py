"""Policies loaded without unpickling (issue 12): SB3 zips are read with zipfile, their
tensors with ``torch.load(..., weights_only=True)``, the network rebuilt from the RL
config; a real tiny PPO policy, loaded so, acts exactly as ``PPO.load`` makes it act."""

from __future__ import annotations

import base64
import io
import json
import pathlib
import pickle
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import make_settings, run_head_with

from actors.learner import make_ppo, ppo_class
from messages.rollout import RolloutRequest, RolloutResult
from messages.task import RLConfig
from messages.train import PPOSettings
from rl.artifacts import PolicyUnusable, load_policy, sha256_of
from rl.configs import collect_wood_with_coded
from rl.rl_env import make_env, make_vec_env
from runtime.config import ActorSettings
from runtime.head import Head

SMALL_PPO = PPOSettings(n_steps=128, batch_size=64, n_epochs=2, learning_rate=1e-3)


class Touch:
    """Unpickled, it creates ``marker``: the stand-in for a command a crafted file runs."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def serialized(marker: Path) -> dict:
    """A ``data`` entry as SB3 writes what is not JSON: cloudpickle, base64, here a Touch."""
    blob = base64.b64encode(pickle.dumps(Touch(marker))).decode()
    return {":type:": "<class 'collections.deque'>", ":serialized:": blob}


def rewrite(src: Path, dst: Path, **members: bytes) -> str:
    """``src`` copied to ``dst`` with some members replaced; the copy's sha256."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            zout.writestr(name, members.pop(name, None) or zin.read(name))
        for name, blob in members.items():
            zout.writestr(name, blob)
    return sha256_of(dst)


def poisoned(src: Path, dst: Path, marker: Path, key: str) -> str:
    """``src`` with its ``data[key]`` replaced by a payload that touches ``marker``."""
    with zipfile.ZipFile(src) as zf:
        data = json.loads(zf.read("data"))
    data[key] = serialized(marker)
    return rewrite(src, dst, data=json.dumps(data).encode())


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, RLConfig]:
    """A real PPO policy on collect_wood with the coded actions (256 decisions)."""
    torch.set_num_threads(1)
    config = collect_wood_with_coded()
    vec = make_vec_env(config, 2, 0, world_pool=range(8))
    try:
        model = make_ppo(SMALL_PPO, vec, seed=3, device="cpu")
        model.learn(256)
        path = tmp_path_factory.mktemp("policy") / "wood.zip"
        model.save(path)
    finally:
        vec.close()
    return path, config


def observations(config: RLConfig, count: int) -> list:
    """Observations of random play over a few worlds."""
    env, rng, seen = make_env(config), np.random.default_rng(0), []
    obs, _ = env.reset(seed=11)
    while len(seen) < count:
        seen.append(obs)
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        if terminated or truncated:
            obs, _ = env.reset(seed=11 + len(seen))
    env.close()
    return seen


def test_the_rebuilt_policy_acts_exactly_as_ppo_load_makes_it_act(trained) -> None:
    from stable_baselines3 import PPO

    path, config = trained
    seen = observations(config, 60)
    safe = load_policy(path, sha256_of(path), path.parent, config=config)
    reference = PPO.load(path, device="cpu")
    assert safe.observation_space == reference.observation_space
    assert safe.action_space == reference.action_space
    ours = [int(safe.predict(obs, deterministic=True)[0]) for obs in seen]
    theirs = [int(reference.predict(obs, deterministic=True)[0]) for obs in seen]
    assert ours == theirs
    # The same distribution, not only the same argmax (a briefly trained policy's argmax
    # is often one action everywhere), and one that depends on what the player sees.
    probs = []
    for obs in seen:
        ours_p = safe.get_distribution(safe.obs_to_tensor(obs)[0]).distribution.probs
        ref_p = reference.policy.get_distribution(reference.policy.obs_to_tensor(obs)[0])
        assert torch.equal(ours_p, ref_p.distribution.probs)
        probs.append(ours_p)
    assert not all(torch.equal(p, probs[0]) for p in probs)
    # Loading seeds the RNGs as PPO.load does: sampled actions after a load are the same.
    load_policy(path, config=config)
    sampled = [int(safe.predict(obs, deterministic=False)[0]) for obs in seen]
    PPO.load(path, device="cpu")
    assert sampled == [int(reference.predict(obs, deterministic=False)[0]) for obs in seen]


def test_a_pickle_in_data_is_never_unpickled_and_the_weights_still_load(
    trained, tmp_path: Path
) -> None:
    from stable_baselines3 import PPO

    path, config = trained
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.zip"
    digest = poisoned(path, evil, marker, "policy_class")
    policy = load_policy(evil, digest, tmp_path, config=config)
    assert not marker.exists(), "the safe loader unpickled data"
    obs = observations(config, 5)
    clean = load_policy(path, config=config)
    assert [int(policy.predict(o, deterministic=True)[0]) for o in obs] == [
        int(clean.predict(o, deterministic=True)[0]) for o in obs
    ]
    # The control: the file is a real threat, PPO.load runs its payload.
    with pytest.raises(Exception):  # noqa: B017 - policy_class unpickles to None
        PPO.load(evil, device="cpu")
    assert marker.exists()


def test_a_pth_holding_a_pickled_object_is_refused_without_building_it(
    trained, tmp_path: Path
) -> None:
    path, config = trained
    marker = tmp_path / "pwned"
    with zipfile.ZipFile(path) as zf:
        state = torch.load(io.BytesIO(zf.read("policy.pth")), weights_only=True)
    buffer = io.BytesIO()
    torch.save({**state, "extra": Touch(marker)}, buffer)
    evil = tmp_path / "evil.zip"
    digest = rewrite(path, evil, **{"policy.pth": buffer.getvalue()})
    with pytest.raises(PolicyUnusable, match="not a plain state dict of tensors"):
        load_policy(evil, digest, tmp_path, config=config)
    assert not marker.exists()


def _shrunk(config: RLConfig) -> RLConfig:
    """The config with one primitive fewer: a policy of it has one output fewer."""
    import dataclasses

    primitives = list(config.primitives) or ["noop", "move_left"]
    return dataclasses.replace(config, primitives=primitives[:-1])


def _zip(path: Path, **members: bytes) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, blob in members.items():
            zf.writestr(name, blob)


@pytest.mark.parametrize(
    "case, match",
    [
        ("not_a_zip", "not a readable zip"),
        ("no_policy_pth", "has no policy.pth"),
        ("other_actions", r"action_net.weight is \(\d+, 128\)"),
        ("other_net_arch", r"is \(128, \d+\) .* has \(64, \d+\)"),
        ("pickled_policy_kwargs", "policy_kwargs"),
        ("huge_net_arch", "the file stores"),
        ("huge_net_arch_over_a_tiny_storage", "the file stores"),
        ("no_config", "the RL config it was trained on"),
        ("not_tensors", "is a int, not a tensor"),
    ],
)
def test_a_file_that_is_not_this_configs_policy_is_policy_unusable(
    trained, tmp_path: Path, case: str, match: str
) -> None:
    path, config = trained
    target, kwargs = tmp_path / "p.zip", {"config": config}
    shutil.copy(path, target)
    with zipfile.ZipFile(path) as zf:
        data = json.loads(zf.read("data"))
        state = torch.load(io.BytesIO(zf.read("policy.pth")), weights_only=True)
    if case == "not_a_zip":
        target.write_bytes(b"PK\x03\x04 certainly not a zip")
    elif case == "no_policy_pth":
        _zip(target, data=json.dumps(data).encode())
    elif case == "other_actions":
        kwargs["config"] = _shrunk(config)
    elif case == "other_net_arch":
        kwargs["net_arch"] = [64, 64]
    elif case == "pickled_policy_kwargs":
        data["policy_kwargs"] = serialized(tmp_path / "pwned")
        rewrite(path, target, data=json.dumps(data).encode())
    elif case == "huge_net_arch":
        data["policy_kwargs"] = {"net_arch": [1 << 20] * 8}
        rewrite(path, target, data=json.dumps(data).encode())
    elif case == "huge_net_arch_over_a_tiny_storage":
        # A tensor claiming 2**50 numbers over a storage of one (stride 0).
        data["policy_kwargs"] = {"net_arch": [1 << 20] * 8}
        buffer = io.BytesIO()
        torch.save({**state, "claimed": torch.zeros(1).expand(1 << 50)}, buffer)
        rewrite(path, target, data=json.dumps(data).encode(), **{"policy.pth": buffer.getvalue()})
    elif case == "no_config":
        kwargs["config"] = None
    elif case == "not_tensors":
        buffer = io.BytesIO()
        torch.save({**state, "action_net.bias": 7}, buffer)
        rewrite(path, target, **{"policy.pth": buffer.getvalue()})
    with pytest.raises(PolicyUnusable, match=match):
        load_policy(target, sha256_of(target), tmp_path, **kwargs)
    assert not (tmp_path / "pwned").exists()


def test_a_poisoned_policy_in_the_run_dir_played_by_an_environment_actor_runs_nothing(
    trained, tmp_path: Path
) -> None:
    # The file lies in the run's own store with its right hash: every check on the path
    # passes, and only the loader stands between the payload and the actor.
    path, config = trained
    marker = tmp_path / "pwned"
    settings = make_settings(tmp_path, {"environment": ActorSettings(count=1)})
    seen: dict = {}

    async def driver(head: Head) -> dict:
        await head.wait_for("environment", 1)
        evil = head.run_dir / "policies" / "evil.zip"
        evil.parent.mkdir(parents=True, exist_ok=True)
        digest = poisoned(path, evil, marker, "policy_class")
        req = RolloutRequest(
            config.subtask, policy_path=str(evil), policy_sha256=digest, config=config,
            seeds=[0],
        )  # fmt: skip
        seen["result"] = await head.client.ask("@environment", req, timeout=120)
        return {}

    run = run_head_with(settings, driver)
    assert not marker.exists(), "the environment actor unpickled the policy's data"
    assert run.code == 0
    result = seen["result"]
    assert isinstance(result, RolloutResult)
    # The weights are fine: the policy played its world.
    assert [e.seed for e in result.episodes] == [0]
    assert all(e.cause != "policy_unusable" for e in result.episodes), result.episodes
    assert all(e.steps > 0 for e in result.episodes)


def test_a_resumed_checkpoint_trains_on_exactly_as_ppo_load_resumed_it(tmp_path: Path) -> None:
    # The learner's resume (a fresh PPO of the same settings, the checkpoint's states and
    # counters put in) against PPO.load with the env: the same updates, bit for bit.
    from stable_baselines3 import PPO

    from rl.artifacts import restore_checkpoint
    from rl.configs import collect_wood_primitive

    torch.set_num_threads(1)
    settings = PPOSettings(n_steps=64, batch_size=64, n_epochs=2, learning_rate=1e-3)
    config, checkpoint = collect_wood_primitive(), tmp_path / "ckpt-128.zip"

    def vec():
        return make_vec_env(config, 2, 0, world_pool=range(4))

    def trained_on(load) -> tuple:
        env = vec()
        try:
            model = load(env)
            model.learn(256, reset_num_timesteps=False)
        finally:
            env.close()
        return model.num_timesteps, model._n_updates, model.policy.state_dict()

    def fresh(env):
        return make_ppo(settings, env, seed=1, device="cpu")

    def restored(env):
        model = fresh(env)
        assert restore_checkpoint(model, checkpoint) == 128
        return model

    first = vec()
    try:
        model = fresh(first)
        model.learn(128)
        model.save(checkpoint)
    finally:
        first.close()
    ours = trained_on(restored)
    # The class the settings train with (rollouts env by env: rl.per_env), loaded by SB3.
    cls = ppo_class(settings)
    assert issubclass(cls, PPO)
    theirs = trained_on(lambda env: cls.load(checkpoint, env=env, device="cpu"))
    assert ours[:2] == theirs[:2] == (384, 6)
    assert ours[2].keys() == theirs[2].keys()
    assert all(torch.equal(ours[2][k], theirs[2][k]) for k in ours[2])
