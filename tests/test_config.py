"""The run config: checks declared on the fields, the [training] section, and what reaches
the training jobs the fast agent asks for."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from actors.fast import train_request
from messages.plan import SubAction, WorkOn
from messages.task import RLConfig, Subtask
from messages.train import PPOSettings
from method import settings
from method.settings import MethodSettings
from runtime.config import CHECK, FIELD_CHECKS, ConfigError


def _load(tmp_path: Path, text: str) -> MethodSettings:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return settings.load(str(path))


def _refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    message = str(caught.value)
    assert str(tmp_path / "run.toml") in message
    return message


def _work(name: str = "collect_wood") -> WorkOn:
    subtask = Subtask(name=name, goal={"wood": 1})
    return WorkOn(subaction=SubAction(name=name, subtask=subtask, mode="rl"), train_steps=4096)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (
            "[training]\ncheckpoint_every = 0\n",
            "training.checkpoint_every: expected an integer ≥ 1, found 0. "
            "set checkpoint_every to 1 or more (the default is 4096)",
        ),
        ("[training]\ntrain_worlds = 10001\n", "training.train_worlds: expected an integer from"),
        ("[training.ppo]\ngamma = 1.5\n", "training.ppo.gamma: expected a rate between 0 and 1"),
        ("[training.ppo]\nlearning_rate = 0\n", "training.ppo.learning_rate: expected a positive"),
        ("[training.ppo]\nnet_arch = [64, 0]\n", "training.ppo.net_arch[1]: expected an integer"),
        ("[agents]\nfast_capacity = 0\n", "agents.fast_capacity: expected an integer ≥ 1"),
        ("[task]\neval_episodes = 1001\n", "task.eval_episodes: expected an integer from 1 to"),
        ("[runtime]\nheartbeat_interval = -1.0\n", "the default is 1.0"),
        ("[run]\ndriver = 'checkp'\n", "run.driver: expected rlgpt or checkup"),
    ],
)
def test_a_field_check_names_the_file_the_key_and_the_fix(
    tmp_path: Path, text: str, expect: str
) -> None:
    assert expect in _refused(tmp_path, text)


def test_offline_lessons_without_the_simplest_templates_is_refused_naming_the_fix(
    tmp_path: Path,
) -> None:
    # The full template holds every lesson: the switch alone would silently do nothing.
    message = _refused(tmp_path, "[agents]\noffline_lessons = true\n")
    assert 'agents.offline_lessons: expected offline_first = "simplest" beside it' in message
    assert "found offline_first = 'full'" in message and "remove offline_lessons" in message
    both = '[agents]\noffline_first = "simplest"\noffline_lessons = true\n'
    assert _load(tmp_path, both).agents.offline_lessons is True


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        # Every job failed in SB3 (n_steps * n_envs must be above 1), the run went on.
        (
            "[task]\ntrain_envs = 1\n[training.ppo]\nn_steps = 1\n",
            "training.ppo.n_steps: expected n_steps × [task] train_envs of 2 or more, found 1 × 1",
        ),
        # Every model call was refused before it was sent (no room for a prompt).
        (
            '[agents]\nbackend = "local"\nmodel = "m.gguf"\nmax_tokens = 8192\n',
            "agents.max_tokens: expected fewer tokens than the context (n_ctx 8192), found 8192",
        ),
        (
            '[agents]\nbackend = "local"\nmodel = "m.gguf"\nn_ctx = 2048\n',
            "set max_tokens to 512 or less, or raise n_ctx",
        ),
    ],
)
def test_settings_that_fail_every_job_or_call_are_refused_at_start(
    tmp_path: Path, text: str, expect: str
) -> None:
    assert expect in _refused(tmp_path, text)


def test_a_choice_check_suggests_the_closest_choice(tmp_path: Path) -> None:
    assert "did you mean 'checkup'?" in _refused(tmp_path, "[run]\ndriver = 'checkp'\n")


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("[training.ppo]\nn_step = 128\n", "training.ppo.n_step: expected a known key"),
        ("[training.ppo]\nn_step = 128\n", "did you mean 'n_steps'?"),
        ("[training]\ntrain_world = 50\n", "did you mean 'train_worlds'?"),
    ],
)
def test_an_unknown_key_in_the_training_section_is_refused_with_a_suggestion(
    tmp_path: Path, text: str, expect: str
) -> None:
    assert expect in _refused(tmp_path, text)


def test_the_training_section_reaches_the_request_the_fast_agent_builds(tmp_path: Path) -> None:
    s = _load(
        tmp_path,
        "[run]\nseed = 3\n[task]\ntrain_envs = 4\ncode_episodes = 7\n"
        "[training]\ntrain_worlds = 50\ncheckpoint_every = 1024\n"
        "[training.ppo]\nn_steps = 512\nlearning_rate = 1e-3\nnet_arch = [64, 64]\n",
    )
    config = RLConfig(subtask=Subtask(name="collect_wood"))
    req = train_request(s, _work(), config, version=2)
    assert req.ppo == PPOSettings(n_steps=512, learning_rate=1e-3, net_arch=[64, 64])
    assert (req.train_worlds, req.checkpoint_every) == (50, 1024)
    assert (req.n_envs, req.eval_episodes, req.seed, req.total_steps) == (4, 7, 5, 4096)
    assert req.name == "collect_wood-it1-v2" and req.config == config


def test_the_default_training_section_asks_for_the_jobs_runs_asked_for_before_it() -> None:
    config = RLConfig(subtask=Subtask(name="collect_wood"))
    req = train_request(MethodSettings(), _work(), config, version=1)
    # The values actors/fast.py wrote literally before [training] existed: results stay.
    assert req.ppo == PPOSettings(n_steps=256, batch_size=64)
    assert (req.train_worlds, req.checkpoint_every) == (200, 4096)
    assert settings.load("crafter.toml").training == MethodSettings().training
    # The diamond run's jobs step 4 envs (2 per core), each 128 decisions a rollout: the
    # same 512 decisions an update; the rest as the default.
    diamond = settings.load("diamond.toml")
    assert diamond.task.train_envs == 4
    assert diamond.training == dataclasses.replace(
        MethodSettings().training, ppo=PPOSettings(n_steps=128, batch_size=64)
    )


def test_every_default_passes_its_own_check() -> None:
    def walk(cls: type, instance: object, checks: dict) -> None:
        for f in dataclasses.fields(cls):
            value = getattr(instance, f.name)
            rule = f.metadata.get(CHECK) or checks.get(f.name)
            for item in value if isinstance(value, list) else [value]:
                assert rule is None or rule.passes(item), f"{cls.__name__}.{f.name} = {item!r}"
            if dataclasses.is_dataclass(value):
                walk(type(value), value, f.metadata.get(FIELD_CHECKS, {}))

    defaults = MethodSettings()
    walk(MethodSettings, defaults, {})
    settings.check_settings(defaults)


def test_a_resumed_run_reads_back_the_training_section_it_recorded(tmp_path: Path) -> None:
    s = _load(tmp_path, "[training.ppo]\nn_epochs = 2\nnet_arch = [32]\n")
    recorded = tmp_path / "config.json"
    recorded.write_text(json.dumps({"source": s.source, **dataclasses.asdict(s)}))
    again = settings.load_resolved(recorded)
    assert again.training == s.training and again.training.ppo.n_epochs == 2


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        # From issue 12: values that crashed later with a traceback, or were accepted.
        (
            "[runtime]\nmax_frame_bytes = 4611686018427387904\n",
            "runtime.max_frame_bytes: expected bytes from 4194304 (4 MiB) to 1073741824 (1 GiB), "
            "found 4611686018427387904. set max_frame_bytes to 1073741824 or less",
        ),
        ("[runtime]\nmax_frame_bytes = 1\n", "set max_frame_bytes to 4194304 or more"),
        (
            "[runtime]\nheartbeat_interval = nan\n",
            "runtime.heartbeat_interval: expected a finite number, found nan. nan and inf",
        ),
        ("[runtime]\nheartbeat_interval = 1e-9\n", "expected seconds from 0.05 to 60, found 1e-09"),
        ("[runtime]\nheartbeat_timeout = inf\n", "runtime.heartbeat_timeout: expected a finite"),
        ("[runtime]\nshutdown_grace = 1e12\n", "set shutdown_grace to 300 or less"),
        ("[runtime]\nmax_job_tries = 1000\n", "set max_job_tries to 10 or less"),
        ("[task]\nwall_s = nan\n", "task.wall_s: expected a finite number"),
        ("[training.ppo]\nlearning_rate = inf\n", "training.ppo.learning_rate: expected a finite"),
        (
            "[actors.environment]\ncount = 100000\n",
            'actors.environment.count: expected "auto" or an integer from 0 to 256, '
            "found 100000. set count to 256 or less",
        ),
        ("[actors.environment]\ncapacity = 100000\n", "set capacity to 256 or less"),
        ("[run]\nname = 'a/b'\n", "run.name: expected letters, digits, '_', '.' or '-'"),
        ("[run]\nname = '..'\n", "run.name: expected letters"),
        ("[run]\nname = ''\n", "run.name: expected letters"),
        (f"[run]\nname = '{'a' * 120}'\n", "(1 to 40, not starting with '.' or '-')"),
        (
            "[runtime]\nlisten = 'tcp://127.0.0.1:99999'\n",
            "runtime.listen: expected 'tcp://HOST:PORT' with a port from 1 to 65535 or '*'",
        ),
        ("[runtime]\nlisten = 'tcp://127.0.0.1:0'\n", "picks a free port"),
        ("[runtime]\nlisten = 'tcp://127.0.0.1'\n", "runtime.listen: expected"),
        ("[runtime]\nlisten = 'tcp://:5555'\n", "runtime.listen: expected"),
        (
            "[task]\nlearn = ['no_such_step']\n",
            "task.learn[0]: expected a step of the plan for 'diamond', found 'no_such_step'. "
            "the plan's steps: collect_wood, place_table,",
        ),
        ("[task]\nlearn = ['collect_wood', 'colect_coal']\n", "did you mean 'collect_coal'?"),
        # An achievement of the game, but no step of a diamond's plan: it would be ignored.
        ("[task]\nlearn = ['collect_sapling']\n", "task.learn[0]: expected a step of the plan"),
    ],
)
def test_a_setting_out_of_its_range_is_refused_naming_the_key_and_the_fix(
    tmp_path: Path, text: str, expect: str
) -> None:
    assert expect in _refused(tmp_path, text)


@pytest.mark.parametrize(
    ("section", "edge", "past"),
    [
        ("[run]\nname = ", f"'{'n' * 40}'", f"'{'n' * 41}'"),
        ("[runtime]\nlisten = ", "'tcp://127.0.0.1:*'", "'tcp://127.0.0.1:65536'"),
        ("[runtime]\nlisten = ", "'tcp://[::1]:65535'", "'tcp://[::1]:0'"),
        ("[runtime]\nheartbeat_interval = ", "0.05", "0.049"),
        ("[runtime]\nheartbeat_timeout = ", "3600.0", "3600.5"),
        ("[runtime]\nmax_frame_bytes = ", "1073741824", "1073741825"),
        ("[runtime]\nshutdown_grace = ", "300", "301"),
        ("[actors.environment]\ncount = ", "256", "257"),
        # The learn check is per target: every achievement is a step of the curriculum.
        ("[task]\ntarget = 'achievements'\nlearn = ", "['collect_sapling']", "['sapling']"),
    ],
)
def test_a_range_accepts_its_edge_and_refuses_just_past_it(
    tmp_path: Path, section: str, edge: str, past: str
) -> None:
    _load(tmp_path, section + edge + "\n")
    _refused(tmp_path, section + past + "\n")


def test_every_float_setting_refuses_nan_and_inf(tmp_path: Path) -> None:
    def floats(cls: type, prefix: str):
        for f in dataclasses.fields(cls):
            if f.type in ("float", float):
                yield prefix, f.name
            default = getattr(cls(), f.name)
            if dataclasses.is_dataclass(default):
                yield from floats(type(default), f"{prefix}.{f.name}" if prefix else f.name)

    found = list(floats(MethodSettings, ""))
    assert len(found) >= 10, found
    for section, key in found:
        for bad in ("nan", "inf", "-inf"):
            message = _refused(tmp_path, f"[{section}]\n{key} = {bad}\n")
            assert f"{section}.{key}: expected a finite number" in message


def test_a_resumed_config_that_is_not_a_table_is_refused_naming_the_file(tmp_path: Path) -> None:
    recorded = tmp_path / "config.json"
    for text in ("[]", "3", '"diamond"'):
        recorded.write_text(text)
        with pytest.raises(ConfigError) as caught:
            settings.load_resolved(recorded)
        assert str(recorded) in str(caught.value)
        assert "expected a run's config.json (a JSON object of sections), found " in str(
            caught.value
        )
    assert "found string 'diamond'" in str(caught.value)


HUGE = 123456789012345678901234567890


def _numeric_keys(cls: type, prefix: str = ""):
    """(section, key, is_list) of every numeric setting, nested sections included."""
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name == "source":
            continue
        hint = hints[f.name]
        default = getattr(cls(), f.name)
        if dataclasses.is_dataclass(default):
            yield from _numeric_keys(type(default), f"{prefix}.{f.name}" if prefix else f.name)
        elif hint in (int, float) or (
            isinstance(hint, __import__("types").UnionType) and int in typing.get_args(hint)
        ):
            yield prefix, f.name, False
        elif typing.get_origin(hint) is list and typing.get_args(hint)[0] in (int, float):
            yield prefix, f.name, True


def test_every_numeric_setting_refuses_a_number_past_64_bits_naming_its_range(
    tmp_path: Path,
) -> None:
    found = list(_numeric_keys(MethodSettings))
    names = {f"{s}.{k}" for s, k, _ in found}
    assert {"task.iterations", "task.wall_s", "training.ppo.n_steps"} <= names, names
    for section, key, is_list in found:
        for bad in (HUGE, -HUGE):
            value = f"[{bad}]" if is_list else str(bad)
            message = _refused(tmp_path, f"[{section}]\n{key} = {value}\n")
            where = f"{section}.{key}" + ("[0]" if is_list else "")
            assert f"{where}: expected " in message, message
            # The range it has: its own check's, or the codecs' limit.
            assert re.search(rf"{re.escape(where)}: expected [^.]*\d", message), message


def test_a_config_that_starts_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_bytes(b"\xef\xbb\xbf" + b'[run]\nname = "bom"\n')
    assert settings.load(str(path)).run.name == "bom"
