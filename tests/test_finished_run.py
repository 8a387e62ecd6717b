"""What a finished run leaves a user, from real small runs of the method through
``run.py``: the policy bundle and ``run.py play`` (which replays the final evaluation's
episodes), the labelled report video, the run-level TensorBoard events beside the PPO
job's curves, and ``run.py compare`` over two runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ACTORS, ROOT

from method import ledger
from method.bundle import BundleError, load_bundle
from method.compare import newcombe, wilson
from method.video import BANNER_PX, SCALE, video_episodes

RUN = [sys.executable, str(ROOT / "run.py")]
LABELLED_SIZE = (64 * SCALE, 64 * SCALE + BANNER_PX)
"""A labelled frame: Crafter's 64×64 enlarged, the label strip above it."""

# The smallest run with every part in it: three steps of the recipe chain, one of them
# learned with PPO (a few hundred steps: the coded place_table option makes it quick),
# a final evaluation on 4 unseen worlds, the video, the report.
TINY = f"""
[run]
name = "tiny"
seed = 0

[task]
task = "make a wood pickaxe"
target = "wood_pickaxe"
success_target = 0.5
iterations = 1
revisions = 0
code_episodes = 2
eval_episodes = 4
train_steps = 256
train_envs = 1
episode_steps = 1000
learn = ["place_table"]
env_steps = 5000

[training]
train_worlds = 4
{ACTORS}"""

# A second run to compare with: code only, and episodes capped at 150 steps, so that one
# of the final evaluation's worlds (seed 2000002, 161 steps above) fails: the report's
# video then has a successful and a failed episode to show.
CODED = (
    TINY.replace('name = "tiny"', 'name = "coded"')
    .replace('learn = ["place_table"]', "learn = []")
    .replace("episode_steps = 1000", "episode_steps = 150")
    .replace("[actors.learner]\ncount = 1\n", "")
    .replace("[actors.environment]\ncount = 2", "[actors.environment]\ncount = 1")
)


def _run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RUN, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def _finished_run(folder: Path, config: str) -> Path:
    (folder / "run.toml").write_text(config)
    done = _run(["--config", "run.toml"], cwd=folder, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (folder / "runs").iterdir()
    return run_dir


@pytest.fixture(scope="module")
def learned_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _finished_run(tmp_path_factory.mktemp("learned"), TINY)


@pytest.fixture(scope="module")
def coded_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _finished_run(tmp_path_factory.mktemp("coded"), CODED)


# ---------------------------------------------------------------------- the bundle


def test_the_bundle_names_every_stage_with_its_files_hashes_and_versions(
    learned_run: Path,
) -> None:
    manifest = json.loads((learned_run / "policy" / "manifest.json").read_text())
    kinds = {s["name"]: s["kind"] for s in manifest["stages"]}
    assert kinds == {
        "collect_wood": "coded",
        "place_table": "learned",
        "make_wood_pickaxe": "coded",
    }
    learned = next(s for s in manifest["stages"] if s["kind"] == "learned")
    # The learner's zip, copied: the same bytes, under the sha256 the learner reported.
    assert manifest["files"][learned["policy"]] == learned["policy_sha256"]
    assert learned["options"] and all(p in manifest["files"] for p in learned["options"].values())
    config = json.loads((learned_run / "policy" / learned["rl_config"]).read_text())
    assert [a["name"] for a in config["coded_actions"]] == list(learned["options"])
    spec = learned["observation"]
    assert spec["parts"]["view"] == 7 * 9 * len(spec["view"]["channels"])
    assert spec["actions"][-len(learned["options"]) :] == list(learned["options"])
    assert manifest["needs"] and all(n["stage"]["kind"] == "coded" for n in manifest["needs"])
    assert {"python", "crafter", "stable-baselines3", "torch"} <= set(manifest["versions"])
    assert json.loads((learned_run / "summary.json").read_text())["policy"] == (
        "policy/manifest.json"
    )
    bundle = load_bundle(learned_run)
    assert [s.subtask.name for s in bundle.stages] == list(kinds)
    assert Path(bundle.stages[1].policy_path).is_relative_to(learned_run / "policy")


def test_play_reproduces_the_final_evaluation_on_its_seeds(
    learned_run: Path, tmp_path: Path
) -> None:
    final = {line["seed"]: line for line in ledger.read(learned_run) if line["kind"] == "final"}
    first = min(final)
    assert sorted(final) == list(range(first, first + len(final)))
    video, records = tmp_path / "play.gif", tmp_path / "episodes.jsonl"
    # The final evaluation's seeds, and one more that no evaluation played.
    played = _run(
        ["play", str(learned_run), "--seed", str(first), "--episodes", str(len(final) + 1),
         "--records", str(records), "--video", str(video)],
        cwd=tmp_path,
    )  # fmt: skip
    assert played.returncode == 0, played.stderr[-3000:]
    lines = played.stdout.splitlines()
    assert "place_table (learned)" in lines[0]
    assert lines[1].startswith(f"seed {first}: success in ") and "achievements: " in lines[1]
    assert lines[2] == "  = the final evaluation's record for this seed"
    assert lines[-1] == f"video: {video}"
    *episodes, other = [json.loads(line) for line in records.read_text().splitlines()]
    assert other["seed"] == first + len(final) and other["recorded"] is None
    assert other["steps"] > 0 and other["achievements"]
    assert [e["seed"] for e in episodes] == sorted(final)
    for e in episodes:
        # What the run's ledger booked for that seed's final evaluation episode.
        assert sorted(set(e["achievements"])) == final[e["seed"]]["achievements"], e
        assert e["steps"] == final[e["seed"]]["steps"], e
        assert e["recorded"] == "same", e
    from PIL import Image

    with Image.open(video) as gif:
        assert gif.n_frames > 10 and gif.size == LABELLED_SIZE


def test_a_tampered_bundle_is_refused_with_the_file_named(
    learned_run: Path, tmp_path: Path
) -> None:
    def copy() -> Path:
        target = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
        shutil.copytree(learned_run / "policy", target / "policy")
        return target

    manifest = json.loads((learned_run / "policy" / "manifest.json").read_text())
    learned = next(s for s in manifest["stages"] if s["kind"] == "learned")
    coded = next(s for s in manifest["stages"] if s["kind"] == "coded")

    changed = copy()
    with (changed / "policy" / learned["policy"]).open("ab") as f:
        f.write(b"\0")
    cli = _run(["play", str(changed)], cwd=tmp_path)
    assert cli.returncode == 2
    assert "policy.zip was changed after the run wrote it" in cli.stderr, cli.stderr

    option = copy()
    path = option / "policy" / next(iter(learned["options"].values()))
    path.write_text(path.read_text() + "\n# tampered\n")
    with pytest.raises(BundleError, match="was changed after the run wrote it"):
        load_bundle(option)

    missing = copy()
    (missing / "policy" / coded["code"]).unlink()
    with pytest.raises(BundleError, match="code.py is missing"):
        load_bundle(missing)

    extra = copy()
    (extra / "policy" / "stages" / "extra.py").write_text("x = 1\n")
    with pytest.raises(BundleError, match="does not list: stages/extra.py"):
        load_bundle(extra)

    # A manifest edited to point a stage at a file it does not hash.
    edited = copy()
    (edited / "policy" / "other.py").write_text("def run(skills):\n    yield 'noop'\n")
    text = json.loads((edited / "policy" / "manifest.json").read_text())
    text["stages"][0]["code"] = "other.py"
    text["files"]["other.py"] = text["files"].pop(coded["code"])
    (edited / "policy" / coded["code"]).unlink()
    (edited / "policy" / "manifest.json").write_text(json.dumps(text))
    with pytest.raises(BundleError, match="other.py was changed"):
        load_bundle(edited)

    with pytest.raises(BundleError, match="no policy bundle"):
        load_bundle(tmp_path)


# ---------------------------------------------------------------------- report video


@pytest.mark.parametrize("which", ["learned_run", "coded_run"])
def test_the_report_video_shows_labelled_final_evaluation_episodes(
    which: str, request: pytest.FixtureRequest
) -> None:
    learned_run = request.getfixturevalue(which)
    summary = json.loads((learned_run / "summary.json").read_text())
    bundle = load_bundle(learned_run)
    shown = summary["video_episodes"]
    recorded = bundle.recorded
    assert 1 <= len(shown) <= 2 and summary["video"] == "episode.gif"
    for e in shown:
        r = recorded[e["seed"]]
        assert (e["success"], e["steps"]) == (r["success"], r["steps"])
    if which == "coded_run":  # its final evaluation has both (see CODED)
        assert [e["success"] for e in shown] == [True, False]
        assert shown[1]["cause"] == "step_budget" and shown[1]["steps"] == 150
    from PIL import Image

    with Image.open(learned_run / "episode.gif") as gif:
        assert gif.size == LABELLED_SIZE
        gif.seek(1)
        banner = np.asarray(gif.convert("RGB").crop((0, 0, 256, BANNER_PX))).reshape(-1, 3)
        assert len(np.unique(banner, axis=0)) > 2  # text drawn on the label strip
    text = (learned_run / "report.md").read_text()
    assert f"seed {shown[0]['seed']}: " in text and "run.py play" in text
    for picture in ("success.png", "achievements.png", "coded_vs_learned.png", "episode.gif"):
        assert (learned_run / picture).is_file() and f"]({picture})" in text, picture


def test_video_episodes_are_one_success_and_one_failure_when_there_are_both() -> None:
    from messages.rollout import EpisodeReport

    def ep(seed: int, success: bool) -> EpisodeReport:
        return EpisodeReport(seed, success, 10, 0.0, [], "success" if success else "step_budget")

    mixed = [ep(3, True), ep(1, False), ep(2, True), ep(0, False)]
    assert [(e.seed, e.success) for e in video_episodes(mixed)] == [(2, True), (0, False)]
    assert [e.seed for e in video_episodes([ep(5, True), ep(4, True), ep(6, True)])] == [4, 5]
    assert [e.seed for e in video_episodes([ep(9, False)])] == [9]
    assert video_episodes([]) == []


# ---------------------------------------------------------------------- TensorBoard


def test_tensorboard_holds_the_run_level_figures_beside_the_ppo_curves(learned_run: Path) -> None:
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    events = EventMultiplexer()
    events.AddRunsFromDirectory(str(learned_run / "tensorboard"))
    events.Reload()
    runs = events.Runs()
    ppo = [name for name in runs if name.startswith("place_table")]
    assert ppo and "rollout/ep_rew_mean" in runs[ppo[0]]["scalars"]
    scalars = set(runs["run"]["scalars"])
    expected = {
        "success/collect_wood", "success/place_table", "success/make_wood_pickaxe",
        "success/task", "coded_vs_learned/place_table/learned",
        "coded_vs_learned/collect_wood/coded", "final/success_rate", "final/crafter_score",
        "final/crafter_score_all_episodes", "env_steps/training", "env_steps/code",
        "env_steps/final", "env_steps/all_episodes", "env_steps/after_iteration",
        "tokens/in", "tokens/out", "final/achievement/place_table",
    }  # fmt: skip
    assert expected <= scalars, expected - scalars
    summary = json.loads((learned_run / "summary.json").read_text())
    (final,) = events.Scalars("run", "final/success_rate")
    assert final.value == pytest.approx(summary["final_success"])
    (score,) = events.Scalars("run", "final/crafter_score")
    assert score.value == pytest.approx(summary["score_final"])
    (steps,) = events.Scalars("run", "env_steps/training")
    assert steps.value == summary["env_steps_training"]
    assert [s.step for s in events.Scalars("run", "success/task")] == [1]
    assert {"episode/video", "plots/success", "plots/achievements"} <= set(runs["run"]["images"])
    (video,) = events.Images("run", "episode/video")
    assert video.encoded_image_string == (learned_run / "episode.gif").read_bytes()


# ---------------------------------------------------------------------- compare


def test_compare_prints_both_runs_and_their_difference(
    learned_run: Path, coded_run: Path, tmp_path: Path
) -> None:
    plot = tmp_path / "cmp.png"
    done = _run(["compare", str(learned_run), str(coded_run), "--plot", str(plot)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert str(learned_run) in out and str(coded_run) in out
    a = json.loads((learned_run / "summary.json").read_text())
    b = json.loads((coded_run / "summary.json").read_text())
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines() if "  " in line}
    header = next(line for line in out.splitlines() if f"Δ {coded_run.name}" in line)
    assert learned_run.name in header
    success = rows["final success (95 % interval)"]
    assert f"{a['final_success']:.0%} [" in success and f"{b['final_success']:.0%} [" in success
    na, nb = a["final_episodes"], b["final_episodes"]
    d, low, high = newcombe(
        (round(a["final_success"] * na), na), (round(b["final_success"] * nb), nb)
    )
    assert success.rstrip().endswith(f"{d:+.0%} [{low:+.0%}, {high:+.0%}]")
    steps = rows["env steps, all episodes"].split()
    assert steps[-3:] == [
        f"{a['env_steps']:,}",
        f"{b['env_steps']:,}",
        f"{b['env_steps'] - a['env_steps']:+,}",
    ]
    assert "final evaluation, achievement rates:" in out and "collect_wood" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_play_and_compare_refuse_files_they_cannot_write_before_their_work(
    learned_run: Path, coded_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from method import compare, play

    blocker = tmp_path / "file"  # a file where a folder would have to be
    blocker.write_text("")
    # Was: every episode played, then a traceback at the write.
    assert play.main([str(learned_run), "--records", str(blocker / "e.jsonl")]) == 2
    assert f"--records {blocker / 'e.jsonl'}: cannot write in {blocker}" in capsys.readouterr().err
    assert play.main([str(learned_run), "--video", str(tmp_path / "v.mp4")]) == 2
    assert "the video is a GIF (OUT.gif)" in capsys.readouterr().err
    runs = [str(learned_run), str(coded_run)]
    assert compare.main([*runs, "--plot", str(tmp_path / "c.txt")]) == 2  # was: ValueError
    assert "a figure file ends in one of .eps, .jpeg" in capsys.readouterr().err
    assert compare.main([*runs, "--plot", str(blocker / "c.png")]) == 1  # the table printed
    out, err = capsys.readouterr()
    assert "final success" in out and f"compare error: --plot {blocker / 'c.png'}: " in err


def test_compare_refuses_a_folder_that_is_not_a_finished_run(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    done = _run(["compare", "a", "b"], cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert "a is not a finished run" in done.stderr and "summary.json" in done.stderr


def test_the_intervals_are_wilson_and_newcombe() -> None:
    # Newcombe (1998), Statistics in Medicine 17:873, table II, example (a): 56/70 vs 48/80.
    d, low, high = newcombe((48, 80), (56, 70))
    assert (round(d, 4), round(low, 4), round(high, 4)) == (0.2, 0.0524, 0.3339)
    # Wilson's interval never leaves [0, 1], even at 0 or n successes.
    assert wilson(0, 10)[0] == 0.0 and wilson(0, 10)[1] == pytest.approx(0.2775, abs=1e-4)
    assert wilson(10, 10)[1] == 1.0


# ---------------------------------------------------------------------- bench_confirm.py


def _confirm(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    script = str(ROOT / "benchmarks" / "bench_confirm.py")
    return subprocess.run(
        [sys.executable, script, *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_bench_confirm_plays_the_bundle_and_its_coded_variant_on_confirm_worlds(
    learned_run: Path, tmp_path: Path
) -> None:
    """The learned variant is the bundle as `run.py play` plays it, world for world; the
    coded variant reaches the stage on the same worlds (the stages before it are the same
    code); the worlds are the run seed's confirm worlds, which no run plays."""
    from knowledge import library, recipes
    from method.play import play
    from method.seeds import confirm_seeds

    # place_table was learned from the first plan, with no code: bench_confirm says what to do.
    refused = _confirm([str(learned_run), "--worlds", "2"], tmp_path)
    assert refused.returncode == 2 and "--code FILE" in refused.stderr, refused.stderr
    assert "learned: place_table" in refused.stderr

    steps = recipes.chain("wood_pickaxe")
    code = tmp_path / "place_table.py"
    code.write_text(library.coded_stages(steps[:2])[1].code)
    out = tmp_path / "confirm.json"
    args = ["--stage", "place_table", "--code", str(code), "--worlds", "2", "--jobs", "1"]
    done = _confirm([str(learned_run), *args, "--json", str(out)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| place_table | " in done.stdout
    got = json.loads(out.read_text())
    seeds = list(confirm_seeds(0)[:2])
    assert [r["seed"] for r in got["records"]] == seeds
    (row,) = got["rows"]
    assert row["reached_by_one"] == 0 and row["pairs"] >= 1
    assert got["env_steps"] == sum(
        r[k]["steps"] for r in got["records"] for k in ("learned", "place_table")
    )
    played = [episode for episode, _ in play(load_bundle(learned_run), seeds)]
    assert [(r["learned"]["success"], r["learned"]["steps"]) for r in got["records"]] == [
        (int(e.success), e.steps) for e in played
    ]


def test_bench_confirm_job_plays_a_trained_version_as_the_bundle_plays_the_kept_one(
    learned_run: Path, tmp_path: Path
) -> None:
    """`--job NAME`: the training job's version, built from the run's own record of it
    (`code/NAME.rl.json`, the journal's policy), against the bundle's stage. Here the
    job's version is the one the bundle kept: both variants play alike, world for world.
    `--through` ends each episode at that stage."""
    assert (learned_run / "code" / "place_table-it1-v1.rl.json").is_file()
    out = tmp_path / "job.json"
    args = ["--job", "place_table-it1-v1", "--through", "--worlds", "2", "--jobs", "1"]
    done = _confirm([str(learned_run), *args, "--json", str(out)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["job"] == "place_table-it1-v1" and got["through"]
    for record in got["records"]:
        assert record["learned"] == record["place_table"]
        # Through place_table: make_wood_pickaxe is never played.
        assert record["learned"]["success"] == record["learned"]["stages"]["place_table"]
    for bad, says in (
        (["--job", "place_table-it9-v9"], "no RL config"),
        (["--job", "no_such_stage-it1-v1"], "no stage 'no_such_stage'"),
        (["--through"], "--through needs one --stage"),
    ):
        refused = _confirm([str(learned_run), *bad, "--worlds", "1"], tmp_path)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr


def test_bench_confirm_library_setup_plays_the_stages_before_the_checked_one_as_library_code(
    learned_run: Path, tmp_path: Path
) -> None:
    """`--setup library`: every stage before the checked one (a learned one included) is
    the skill library's complete code in both variants; the checked stage and the ones
    after it stay the bundle's. It needs exactly one --stage."""
    import trio

    from actors.fast import code_request
    from knowledge import library, recipes
    from llm.offline import OfflineBackend
    from messages.plan import SubAction
    from method.play import play
    from method.seeds import confirm_seeds

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_confirm

    bundle = load_bundle(learned_run)
    setup = bench_confirm.with_library_setup(bundle, "make_wood_pickaxe")
    full = OfflineBackend(first="full")
    for stage, kept in zip(setup.stages[:2], bundle.stages[:2], strict=True):
        # What the fast agent writes first with offline_first = "full", asked as a run asks.
        request = code_request(SubAction(kept.subtask.name, kept.subtask), 1, None, None)
        first = trio.run(full.call, "fast", "code", request).data["code"]
        assert stage.subtask == kept.subtask
        assert stage.code == first
        assert not stage.policy_path
    assert bundle.stages[1].policy_path  # place_table was learned: now it is code
    assert setup.stages[2] is bundle.stages[2]
    with pytest.raises(ValueError, match="not a stage"):
        bench_confirm.with_library_setup(bundle, "collect_diamond")

    two = ["--stage", "place_table", "--stage", "collect_wood", "--setup", "library"]
    refused = _confirm([str(learned_run), *two, "--worlds", "2"], tmp_path)
    assert refused.returncode == 2 and "exactly one --stage" in refused.stderr

    code = tmp_path / "place_table.py"
    code.write_text(library.coded_stages(recipes.chain("wood_pickaxe")[:2])[1].code)
    out = tmp_path / "confirm.json"
    args = ["--stage", "place_table", "--code", str(code), "--setup", "library"]
    done = _confirm(
        [str(learned_run), *args, "--worlds", "2", "--jobs", "1", "--json", str(out)], tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "skill library's complete code" in done.stdout
    got = json.loads(out.read_text())
    assert got["setup"] == "library"
    seeds = list(confirm_seeds(0)[:2])
    played = [e for e, _ in play(bench_confirm.with_library_setup(bundle, "place_table"), seeds)]
    assert [(r["learned"]["success"], r["learned"]["steps"]) for r in got["records"]] == [
        (int(e.success), e.steps) for e in played
    ]


def test_bench_confirm_play_worlds_applies_the_library_setup_it_is_asked_for(
    learned_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker plays the library setup when told to, and only then (a recording
    wrapper round the real function: the stages before place_table are already library
    code in this run, so the episodes alone cannot tell)."""
    from method.seeds import confirm_seeds

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_confirm

    calls: list[str] = []
    real = bench_confirm.with_library_setup

    def recording(bundle, name):  # noqa: ANN001, ANN202
        calls.append(name)
        return real(bundle, name)

    monkeypatch.setattr(bench_confirm, "with_library_setup", recording)
    seeds = list(confirm_seeds(0)[:1])
    code = load_bundle(learned_run).stages[0].code  # any code plays as place_table's variant
    plain = bench_confirm.play_worlds(str(learned_run), ["place_table"], seeds, code)
    assert calls == []
    setup = bench_confirm.play_worlds(str(learned_run), ["place_table"], seeds, code, True)
    assert calls == ["place_table"]
    assert [r["seed"] for r in plain] == [r["seed"] for r in setup] == seeds


def test_a_run_folder_moved_elsewhere_resumes_with_its_recorded_jobs(
    learned_run: Path, tmp_path: Path
) -> None:
    # The folder is copied to another place and resumed from another working directory:
    # its recorded training job (a policy inside the folder) is replayed from where the
    # folder is now, not trained again and not refused as a path outside the run.
    moved = tmp_path / "archive" / "moved-run"
    shutil.copytree(learned_run, moved)
    trained_before = (learned_run / "events.jsonl").read_text().count('"training_requested"')
    done = _run(["--resume", str(moved), "--quiet"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    events = (moved / "events.jsonl").read_text()
    assert events.count('"training_requested"') == trained_before  # none more
    assert '"job_replayed"' in events
    summary = json.loads((moved / "summary.json").read_text())
    assert summary["policy"] == json.loads((learned_run / "summary.json").read_text())["policy"]
