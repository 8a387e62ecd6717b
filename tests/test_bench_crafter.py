"""The Crafter benchmark: success rates, the run ledger, BENCHMARKS.md, and a tiny real run."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import benchmarks.crafter_bench as bc  # noqa: E402
from method import ledger, seeds  # noqa: E402

A = bc.ACHIEVEMENTS


def crafter_score(rates_percent: dict) -> float:
    """The one Crafter score (``method.ledger``, rates as fractions) of rates in percent."""
    return ledger.crafter_score({a: r / 100.0 for a, r in rates_percent.items()}, A)


def test_achievements_are_crafters_22():
    from crafter import constants

    assert len(A) == 22
    assert set(A) == set(constants.achievements)


# ---------------------------------------------------------------------- success rates


def test_success_rates_count_episodes_not_unlocks():
    episodes = [
        {"achievements": ["collect_wood", "collect_wood", "place_table"]},
        {"achievements": ["collect_wood"]},
        {"achievements": []},
        {"achievements": ["not_an_achievement"]},
    ]
    rates = bc.success_rates(episodes)
    assert rates["collect_wood"] == 50.0
    assert rates["place_table"] == 25.0
    assert rates["collect_diamond"] == 0.0
    assert set(rates) == set(A)
    assert bc.success_rates([]) == {a: 0.0 for a in A}


def test_bar():
    assert bc.bar(0) == "·"
    assert bc.bar(100) == "█" * bc.BAR_WIDTH
    assert bc.bar(50) == "█" * (bc.BAR_WIDTH // 2)
    assert bc.bar(52.5).startswith("█" * 10) and len(bc.bar(52.5)) == 11


# ---------------------------------------------------------------------- the ledger


def _write_run(run_dir: Path, lines: list, summary: dict | None = None) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    text = "\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines)
    (run_dir / "episodes.jsonl").write_text(text + "\n")
    summary = summary or {
        "env_steps": 1500,
        "wall_s": 12.5,
        "final_success": 0.5,
        "target": "diamond",
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))


TRAIN_EPISODES = [
    {"kind": "train", "seed": 2, "steps": 200, "achievements": []},
    {"kind": "train", "seed": 3, "steps": 500, "achievements": ["collect_wood", "eat_cow"]},
]
TRAIN_JOB = [  # the same two training episodes as one job's aggregate line
    {
        "kind": "train",
        "job": "collect_wood-it1-v1",
        "episodes": 2,
        "steps": 700,
        "achievement_episodes": {"collect_wood": 1, "eat_cow": 1},
    }
]


@pytest.mark.parametrize("train", [TRAIN_EPISODES, TRAIN_JOB], ids=["episodes", "job"])
def test_ledger_reader_on_a_synthetic_run(tmp_path, train):
    lines = [
        {"kind": "code", "seed": 1, "steps": 300, "achievements": ["collect_wood"]},
        *train,
        {"kind": "final", "seed": 100, "steps": 400, "achievements": ["collect_diamond"]},
        {"kind": "final", "seed": 101, "steps": 100, "achievements": ["collect_wood"]},
    ]
    _write_run(tmp_path / "run", lines)
    episodes, summary = bc.read_ledger(tmp_path / "run")
    assert len(episodes) == 3 + len(train) and summary["target"] == "diamond"
    r = bc.ledger_result(episodes, summary, budget=2000)
    board, final = r["scoreboard"], r["final"]
    assert board["episodes"] == 5 and board["steps"] == 1500
    assert board["rates"]["collect_wood"] == 60.0
    assert board["rates"]["eat_cow"] == 20.0
    assert board["rates"]["collect_diamond"] == 20.0
    assert final["episodes"] == 2
    assert final["rates"]["collect_diamond"] == 50.0 and final["diamond"] == 50.0
    assert final["rates"]["collect_wood"] == 50.0 and final["rates"]["eat_cow"] == 0.0
    assert final["score"] == pytest.approx(crafter_score(final["rates"]))
    assert r["env_steps"] == 1500 and r["wall_s"] == 12.5 and r["final_success"] == 0.5
    assert r["episode_kinds"] == {"code": 1, "train": 2, "final": 2}
    assert r["seeds"]["final"] == [100, 101]
    # The same scoreboard episodes by kind, each kind scored over its own episodes.
    by_kind = r["scoreboard_by_kind"]
    assert list(by_kind) == ["code", "train", "final"]
    assert [(g["episodes"], g["steps"]) for g in by_kind.values()] == [(1, 300), (2, 700), (2, 500)]
    assert by_kind["code"]["score"] == pytest.approx(crafter_score({"collect_wood": 100.0}))
    assert by_kind["train"]["score"] == pytest.approx(
        crafter_score({"collect_wood": 50.0, "eat_cow": 50.0})
    )
    assert by_kind["final"]["score"] == pytest.approx(final["score"])
    # Within a smaller budget, only the episodes the scoreboard keeps: it stops at the
    # first final (400 steps would pass 1,100), so the short final after it is out too.
    cut = bc.ledger_result(episodes, summary, budget=1100)
    assert cut["scoreboard"]["episodes"] == 3
    assert {k: g["episodes"] for k, g in cut["scoreboard_by_kind"].items()} == {
        "code": 1,
        "train": 2,
    }
    assert sum(g["steps"] for g in cut["scoreboard_by_kind"].values()) == 1000
    assert cut["scoreboard"]["steps"] == 1000


@pytest.mark.parametrize(
    "bad",
    [
        "{not json",
        {"kind": "eval", "seed": 1, "steps": 3, "achievements": []},
        {"kind": "final", "seed": "1", "steps": 3, "achievements": []},
        {"kind": "final", "seed": 1, "steps": 3, "achievements": "collect_wood"},
        {"kind": "final", "seed": 1, "achievements": []},
        {"kind": "train", "steps": 3, "episodes": "2", "achievement_episodes": {}},
        {"kind": "train", "steps": 3, "episodes": 2, "achievement_episodes": {"eat_cow": 1.5}},
        [1, 2],
    ],
)
def test_ledger_reader_refuses_bad_lines(tmp_path, bad):
    good = {"kind": "final", "seed": 0, "steps": 10, "achievements": []}
    _write_run(tmp_path / "run", [good, bad])
    with pytest.raises(bc.LedgerError, match=":2:"):
        bc.read_ledger(tmp_path / "run")


def test_ledger_reader_needs_the_summary(tmp_path):
    good = {"kind": "final", "seed": 0, "steps": 10, "achievements": []}
    _write_run(tmp_path / "run", [good], summary={"env_steps": 10})
    with pytest.raises(bc.LedgerError, match="missing keys"):
        bc.read_ledger(tmp_path / "run")
    with pytest.raises(bc.LedgerError, match="missing"):
        bc.read_ledger(tmp_path / "nothing")


# ---------------------------------------------------------------------- BENCHMARKS.md


def _fake_report() -> dict:
    def result(score_rate: float) -> dict:
        rates = {a: 0.0 for a in A} | {"collect_wood": score_rate}
        s = {"episodes": 3, "steps": 900, "rates": rates, "score": crafter_score(rates)}
        return {
            "scoreboard": s | {"diamond": 0.0},
            "final": s | {"diamond": 0.0},
            "env_steps": 1234,
            "wall_s": 61.0,
            "seeds": {"scoreboard": [0, 2], "final": [10_000_000, 10_000_001]},
        }

    meta = {
        "command": "python benchmarks/bench_crafter.py --quick",
        "date": "2026-01-01T00:00:00+00:00",
        "quick": True,
        "budget": 20000,
        "final_episodes": 2,
        "episode_steps": 10000,
        "seed": 0,
        "machine": {"cpu": "Test CPU", "cores": 2, "ram_gib": 8.0, "platform": "Linux"},
        "versions": {"python": "3.11", "crafter": "1.8.3"},
    }
    results = {
        "code": result(30.0),
        "ppo": result(10.0),
        "rlgpt": {"error": "RuntimeError: no config"},
    }
    return {"meta": meta, "results": results}


def test_markdown_keeps_published_anchors_apart():
    text = bc.render_markdown(_fake_report())
    assert "## Measured here" in text and "## Published (not measured here)" in text
    measured, published = text.split("## Published (not measured here)")
    assert measured.index("## Measured here") >= 0
    for anchor in bc.PUBLISHED:
        row = f"| {anchor['method']} | {anchor['score']:.1f} % |"
        assert row in published
        assert f"| {anchor['method']} |" not in measured
        assert f"{anchor['score']:.1f} %" not in measured  # no measured figure is one here
    for name in ("DreamerV3", "Achievement Distillation", "SPRING", "Human experts"):
        assert name in published and name not in measured
    for cite in ("Benchmarking the Spectrum of Agent Capabilities", "arXiv:2305.15486"):
        assert cite in published
    # The measured comparison holds the variants measured here, not the anchors.
    assert "Code only (skill library, no RL)" in measured
    assert "PPO (SB3, primitive actions)" in measured
    assert "RL-GPT (this system) | failed" in measured
    assert "Test CPU, 2 cores, 8.0 GiB RAM" in measured
    assert "crafter 1.8.3" in measured
    for a in A:
        assert f"| {a} |" in measured
    assert "`" + bc.bar(30.0) + "`" in measured


def test_markdown_shows_where_a_runs_scoreboard_comes_from():
    report = _fake_report()
    by_kind = {
        "code": {"episodes": 238, "steps": 77_563, "score": 25.3},
        "play": {"episodes": 191, "steps": 401_199, "score": 84.0},
    }
    report["results"]["code"]["scoreboard_by_kind"] = by_kind
    text = bc.render_markdown(report)
    assert (
        "each kind's Crafter score over its own: code 25.3 % (238 episodes, 77,563 steps), "
        "play 84.0 % (191 episodes, 401,199 steps)."
    ) in text
    assert "by kind" not in bc.render_markdown(_fake_report())  # only where a run has kinds


# ---------------------------------------------------------------------- the rlgpt config


def test_rlgpt_config_passes_the_strict_loader(tmp_path):
    from method import settings as config

    base = ROOT / "rlgpt" / "configs" / "crafter.toml"
    if not base.exists():
        base = ROOT / "rlgpt" / "configs" / "diamond.toml"
    text = bc.rlgpt_config(base, tmp_path / "runs", 30000, 7, quick=True, seed=3)
    path = tmp_path / "bench.toml"
    path.write_text(text)
    original = tomllib.loads(base.read_text())
    assert tomllib.loads(text)["actors"] == original["actors"]
    settings = config.load(str(path))
    assert settings.run.runs_dir == str(tmp_path / "runs") and settings.run.seed == 3
    assert settings.task.env_steps == 30000 and settings.task.eval_episodes == 7
    assert settings.task.iterations == 1 and settings.task.revisions == 0
    assert settings.task.episode_steps == bc.EPISODE_STEPS


# ---------------------------------------------------------------------- a real run


def test_tiny_real_run_of_code_and_ppo(tmp_path):
    """The command end to end on real Crafter: a couple of short episodes per variant."""
    out = tmp_path / "BENCHMARKS.md"
    code = bc.main(
        [
            "--variants", "code,ppo", "--budget", "400", "--final", "1",
            "--episode-steps", "200", "--out", str(out), "--results", str(tmp_path / "raw"),
            "--workdir", str(tmp_path / "work"),
        ]
    )  # fmt: skip
    assert code == 0
    raw = json.loads(next((tmp_path / "raw").glob("*.json")).read_text())
    c = raw["results"]["code"]
    episodes = {name: raw["episodes"][name]["0"] for name in ("code", "ppo")}
    board = episodes["code"]["scoreboard"]
    assert len(board) >= 2 and c["scoreboard"]["episodes"] == len(board)
    assert sum(ep["steps"] for ep in board) <= 400
    assert all(0 < ep["steps"] <= 200 for ep in board)
    # The code variant's own worlds are the seed table's benchmark rows, in order.
    assert [ep["seed"] for ep in board] == list(seeds.bench_seeds(0)[: len(board)])
    # Real Crafter: the coded curriculum chops wood in its first episodes.
    assert c["scoreboard"]["rates"]["collect_wood"] > 0
    assert all(set(ep["achievements"]) <= set(A) for ep in board)
    assert c["final"]["episodes"] == 1 and c["seeds"]["final"] == [bc.FINAL_SEED_BASE] * 2
    p = raw["results"]["ppo"]
    assert p["env_steps_scoreboard"] >= 400 and p["final"]["episodes"] == 1
    assert p["scoreboard"]["episodes"] == len(episodes["ppo"]["scoreboard"]) >= 1
    final_seed = episodes["ppo"]["final"][0]["seed"]
    assert final_seed not in {ep["seed"] for ep in episodes["ppo"]["scoreboard"]}
    # Paired: both variants' final agents played the same worlds, the run's final seeds.
    assert [ep["seed"] for ep in episodes["code"]["final"]] == [final_seed]
    assert [final_seed] == seeds.final_seeds(0, 1)
    text = out.read_text()
    assert "Code only (skill library, no RL)" in text and "## Published" in text


# ---------------------------------------------------------------------- across run seeds


def test_t_interval_by_hand():
    # 1, 2, 3: mean 2, standard deviation 1, t(0.975, 2) = 4.303, so 2 ± 4.303 / √3.
    mi = bc.across.mean_interval([1.0, 2.0, 3.0])
    assert mi["n"] == 3 and mi["mean"] == 2.0
    assert mi["low"] == pytest.approx(2 - 4.303 / 3**0.5)
    assert mi["high"] == pytest.approx(2 + 4.303 / 3**0.5)
    assert bc.across.mean_interval([5.0]) == {"n": 1, "mean": 5.0, "low": None, "high": None}
    assert bc.across.mean_interval([])["mean"] is None
    # Between rows of the table, the wider value; far out, the normal quantile.
    assert bc.across.t975(12) == 2.228 and bc.across.t975(10_000) == pytest.approx(1.96, abs=1e-3)
    with pytest.raises(ValueError):
        bc.across.t975(0)


def test_curve_reads_one_run_at_fixed_points():
    # Three episodes of 40k steps: within 50k only the first, within 150k all three.
    eps = [
        {"steps": 40_000, "achievements": ["collect_wood"]},
        {"steps": 40_000, "achievements": []},
        {"steps": 40_000, "achievements": ["collect_wood"]},
    ]
    c = bc.across.curve(eps, budget=150_000)
    assert set(c) == {50_000, 150_000}  # points past the budget are not read
    assert c[50_000] == pytest.approx(crafter_score({"collect_wood": 100.0}))
    assert c[150_000] == pytest.approx(crafter_score({"collect_wood": 200.0 / 3}))


def _run(score: float, worlds: dict[int, list[str]]) -> dict:
    diamond = 100.0 * sum("collect_diamond" in a for a in worlds.values()) / len(worlds)
    return {
        "scoreboard": {"score": score},
        "final": {"score": score, "diamond": diamond},
        "env_steps": 1000,
        "wall_s": 10.0,
        "final_worlds": [{"seed": s, "achievements": a} for s, a in worlds.items()],
    }


def test_paired_comparison_on_shared_worlds():
    d, w = "collect_diamond", "collect_wood"
    a = {
        0: _run(30.0, {1: [w, d], 2: [w, d], 3: [w]}),
        1: _run(20.0, {11: [w, d], 12: [w, d]}),
        2: {"error": "RuntimeError: boom"},
    }
    b = {
        0: _run(25.0, {1: [w], 2: [w, d], 3: []}),
        1: _run(10.0, {11: [w], 12: [], 13: [w]}),  # world 13: A never played it
        2: _run(10.0, {21: [w]}),
    }
    p = bc.across.paired(a, b)
    assert p["worlds"] == 5 and p["run_seeds"] == 2
    # Per world (A − B): +1, 0, +1, +1, +2.
    assert p["achievements"]["mean"] == pytest.approx(1.0)
    got = {k: p["diamond"][k] for k in ("a", "b", "a_only", "b_only")}
    assert got == {"a": 4, "b": 1, "a_only": 3, "b_only": 0}
    assert p["diamond"]["difference"] == pytest.approx(0.6)
    assert p["diamond"]["lower"] < 0  # three won disagreements are not enough to say
    assert p["score"]["mean"] == pytest.approx(7.5)  # (30 − 25 + 20 − 10) / 2
    s = bc.across.summary(a)
    assert s["runs"] == 2 and s["failed"] == 1 and s["seeds"] == [0, 1]
    assert s["diamond_pooled"]["wins"] == 4 and s["diamond_pooled"]["episodes"] == 5
    assert s["final"]["mean"] == 25.0
    assert bc.across.paired({0: a[2]}, b) is None


def test_norl_config_has_no_learner(tmp_path):
    from method import settings as config

    base = ROOT / "rlgpt" / "configs" / "crafter.toml"
    text = bc.rlgpt_config(base, tmp_path / "runs", 30000, 7, quick=False, seed=1, learn=False)
    path = tmp_path / "norl.toml"
    path.write_text(text)
    settings = config.load(str(path))
    assert settings.actors["learner"].count == 0 and settings.task.learn == []
    # Everything else is the full system's config.
    full = config.load(str(_write(tmp_path / "full.toml", bc.rlgpt_config(
        base, tmp_path / "runs", 30000, 7, quick=False, seed=1))))  # fmt: skip
    assert full.actors["learner"].count != 0
    assert settings.task == full.task


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_report_of_several_seeds_keeps_hand_sections(tmp_path):
    from benchmarks.crafter_bench import cli

    w = "collect_wood"
    meta = _fake_report()["meta"] | {"seeds": [0, 1], "quick": False}

    def full_run(score: float, seed: int) -> dict:
        r = _fake_report()["results"]["code"] | {"run_seed": seed}
        r["final"] = r["final"] | {"score": score}
        r["curve"] = {"50000": score / 2}
        r["final_worlds"] = [{"seed": 10 * seed, "achievements": [w]}]
        return r

    runs = {
        "rlgpt": {0: full_run(40.0, 0), 1: full_run(30.0, 1)},
        "code": {0: full_run(35.0, 0), 1: full_run(35.0, 1)},
    }
    report = cli.build_report(meta, runs)
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("old generated text\n\n" + cli.HAND_MARKER + "\n\n## By hand\n\nkept\n")
    cli._write(out, tmp_path / "raw.json", report, {})
    text = out.read_text()
    assert "old generated text" not in text
    assert text.endswith(cli.HAND_MARKER + "\n\n## By hand\n\nkept\n")
    assert "## Across run seeds" in text and "### Paired on the same final worlds" in text
    assert "RL-GPT (this system), run seed 1" in text
    # Mean 35 across the two RL-GPT runs (40, 30: standard deviation 5√2), so 35 ±
    # 12.706 × 5 with one degree of freedom, shown within 0–100 %.
    assert "| RL-GPT (this system) | 2 | 0.2 % [0.2, 0.2] | 35.0 % [0.0, 98.5] |" in text
    assert "| RL-GPT (this system) | 0 | 20.0 % |" in text  # the curve at 50,000 steps
    assert "| RL-GPT (this system) | 1 | 15.0 % |" in text
    assert report["paired"]["rlgpt-code"]["score"]["mean"] == pytest.approx(0.0)


def test_the_commit_is_read_in_a_repository_and_in_a_worktree(tmp_path):
    from benchmarks.crafter_bench.provenance import _commit

    sha = "0123456789abcdef" * 2 + "01234567"
    repo = tmp_path / "repo"
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "refs" / "heads" / "main").write_text(sha + "\n")
    assert _commit(repo) == sha[:12]
    # A worktree: .git is a file naming its folder, whose commondir holds the refs.
    tree = tmp_path / "tree"
    own = repo / ".git" / "worktrees" / "tree"
    own.mkdir(parents=True)
    tree.mkdir()
    (tree / ".git").write_text(f"gitdir: {own}\n")
    (own / "commondir").write_text("../..\n")
    (own / "HEAD").write_text("ref: refs/heads/main\n")
    assert _commit(tree) == sha[:12]
    (own / "HEAD").write_text("fedcba9876543210" * 2 + "\n")  # detached
    assert _commit(tree) == "fedcba987654"
    assert _commit(tmp_path / "nothing") == ""


def test_a_resume_with_every_run_kept_still_writes_the_report(tmp_path):
    # Each run is saved as it ends; a --resume that finds them all runs nothing and
    # writes the page from them.
    done = tmp_path / "work" / "done"
    done.mkdir(parents=True)
    for seed in (0, 1):
        r = _fake_report()["results"]["code"] | {"run_seed": seed, "curve": {"50000": 1.0}}
        r["final_worlds"] = [{"seed": seed, "achievements": ["collect_wood"]}]
        (done / f"code-s{seed}.json").write_text(json.dumps(r))
    out = tmp_path / "BENCHMARKS.md"
    code = bc.main(
        [
            "--variants", "code", "--seeds", "0,1", "--budget", "400", "--final", "1",
            "--out", str(out), "--results", str(tmp_path / "raw"),
            "--workdir", str(tmp_path / "work"), "--resume",
        ]
    )  # fmt: skip
    assert code == 0
    text = out.read_text()
    assert "Code only (skill library, no RL), run seed 1" in text and "## Across run seeds" in text
