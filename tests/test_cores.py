"""Actor counts from the core count (issue 18): the ``count = "auto"`` rule, the cores a
process may use (affinity, cgroup quota), the loader's handling of the key, and the
``actor_counts`` event a real head logs when it starts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import ROOT, make_settings, run_head_with

from method import settings as method_settings
from runtime.config import AUTO, ActorSettings, ConfigError, auto_count, load, resolve_counts
from runtime.cpu import usable_cores
from runtime.head import Head

ROLES = ("environment", "learner", "probe")


@pytest.mark.parametrize(
    ("cores", "environment", "learner", "other"),
    [(1, 1, 1, 1), (2, 2, 2, 1), (4, 4, 4, 1), (16, 16, 8, 1), (64, 16, 8, 1)],
)
def test_the_auto_rule_by_core_count(cores: int, environment: int, learner: int, other: int):
    # 2 cores: 2 environments and 2 learners (two RL sub-actions train at once; measured).
    assert auto_count("environment", cores) == environment
    assert auto_count("learner", cores) == learner
    assert auto_count("probe", cores) == other


def test_resolve_replaces_auto_only_and_says_how_each_count_was_chosen() -> None:
    actors = {"environment": ActorSettings(), "learner": ActorSettings(count=3)}
    resolved, how = resolve_counts(actors, 4)
    assert {r: a.count for r, a in resolved.items()} == {"environment": 4, "learner": 3}
    assert how == {"environment": "auto", "learner": "explicit"}
    assert actors["environment"].count == AUTO  # the input is left as it was


def _load(tmp_path: Path, text: str):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return load(str(path), roles=ROLES)


def test_auto_explicit_and_omitted_counts_through_the_loader(tmp_path: Path) -> None:
    s = _load(
        tmp_path,
        '[actors.environment]\ncount = "auto"\n[actors.learner]\n[actors.probe]\ncount = 0\n',
    )
    assert {r: a.count for r, a in s.actors.items()} == {
        "environment": AUTO,
        "learner": AUTO,  # count left out: "auto"
        "probe": 0,  # an integer wins; 0 starts none here (they may attach)
    }
    resolved, _ = resolve_counts(s.actors, 16)
    assert {r: a.count for r, a in resolved.items()} == {
        "environment": 16,
        "learner": 8,
        "probe": 0,
    }


@pytest.mark.parametrize("name", ["diamond.toml", "crafter.toml"])
def test_the_shipped_configs_give_two_and_two_on_two_cores(name: str) -> None:
    s = method_settings.load(str(ROOT / "rlgpt" / "configs" / name))
    assert (s.actors["environment"].count, s.actors["learner"].count) == (AUTO, AUTO)
    resolved, _ = resolve_counts(s.actors, 2)
    assert (resolved["environment"].count, resolved["learner"].count) == (2, 2)


@pytest.mark.parametrize(
    ("value", "expect"),
    [
        (
            '"lots"',
            'actors.environment.count: expected "auto" or an integer from 0 to 256, found '
            "'lots'. write count = \"auto\" or a number",
        ),
        ('"atuo"', "found 'atuo'. did you mean \"auto\"?"),
        ("-1", 'found -1. set count to 0 or more (the default is "auto")'),
        ("257", "found 257. set count to 256 or less"),
        ("1.5", 'expected "auto" or an integer from 0 to 256, found 1.5. write count = "auto"'),
        ("true", 'expected "auto" or an integer from 0 to 256, found True.'),
    ],
)
def test_a_bad_count_names_the_file_the_key_and_the_fix(
    tmp_path: Path, value: str, expect: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, f"[actors.environment]\ncount = {value}\n")
    message = str(caught.value)
    assert str(tmp_path / "run.toml") in message and expect in message, message


def test_a_cgroup_quota_lowers_the_cores(tmp_path: Path) -> None:
    cores, source = usable_cores(tmp_path / "none", tmp_path / "none")
    assert (cores, source) == (len(os.sched_getaffinity(0)), "affinity")  # no cgroup files
    # cgroup v2 at the root: half a CPU is 1 core (rounded up, never 0).
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "cpu.max").write_text("50000 100000\n")
    assert usable_cores(tmp_path / "v2", tmp_path / "none") == (1, "cgroup cpu.max (0.5 cores)")
    # No quota, or a file that makes no sense: the affinity stands.
    for text in ("max 100000\n", "", "lots of cpus\n", "0 100000\n", "100000 0\n", "inf 1\n"):
        (tmp_path / "v2" / "cpu.max").write_text(text)
        assert usable_cores(tmp_path / "v2", tmp_path / "none") == (cores, source), text
    # A quota on a cgroup above this process's own one holds it too.
    nested = tmp_path / "nested"
    (nested / "a" / "b").mkdir(parents=True)
    (nested / "a" / "cpu.max").write_text("100000 100000\n")
    (nested / "a" / "b" / "cpu.max").write_text("max 100000\n")
    (tmp_path / "self_cgroup").write_text("0::/a/b\n")
    assert usable_cores(nested, tmp_path / "self_cgroup") == (1, "cgroup cpu.max (1 core)")
    # cgroup v1's quota, and its -1 for none.
    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert usable_cores(v1.parent, tmp_path / "none") == (cores, source)
    (v1 / "cpu.cfs_quota_us").write_text("80000\n")
    assert usable_cores(v1.parent, tmp_path / "none") == (1, "cgroup cpu.cfs_quota_us (0.8 cores)")


def test_a_head_logs_the_counts_it_chose_and_records_them(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, {"probe": ActorSettings(count=AUTO), "idle": ActorSettings(count=0)}
    )

    async def driver(head: Head) -> dict:
        await head.wait_for("probe", 1)
        return {"probes": head.settings.actors["probe"].count}

    run = run_head_with(settings, driver)
    assert run.code == 0 and run.report["probes"] == 1
    (event,) = run.named("actor_counts")
    cores, source = usable_cores()
    assert (event["cores"], event["cores_source"]) == (cores, source)
    assert event["counts"] == {"probe": 1, "idle": 0}
    assert event["rule"] == {"probe": "auto", "idle": "explicit"}
    # config.json holds the numbers started, so that --resume starts the same.
    config = json.loads((run.run_dir / "config.json").read_text())
    assert config["actors"]["probe"]["count"] == 1
