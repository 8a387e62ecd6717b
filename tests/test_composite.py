"""Composed-policy episodes: the task planner running coded and learned stages and needs
in one real Crafter episode, in-process and through a real environment actor."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from helpers import make_settings, run_head_with
from PIL import Image

from actors.environment import frames_npz
from actors.learner import make_ppo
from episodes.composite import (
    NEED_COOLDOWN_STEPS,
    STAGE_ALLOWANCE,
    STAGE_RETRIES,
    prepare_stages,
    run_composed,
)
from episodes.trace import TracingSkills
from messages.rollout import RolloutRequest, RolloutResult
from messages.task import Need, Stage, Subtask
from messages.train import PPOSettings
from rl.artifacts import sha256_of
from rl.configs import collect_wood_with_coded
from rl.rl_env import SubtaskEnv, make_vec_env
from runtime.actor import RemoteFailure
from runtime.config import ActorSettings
from runtime.head import Head
from skills import policies
from skills.policies import PLACE_TABLE_SOURCE
from skills.skills import Skills
from worlds.crafter_world import CrafterWorld
from worlds.video import frames_from_npz, write_gif

WOOD_CODE = "def run(skills):\n    yield from skills.collect('tree', 1)\n"
WOOD2_CODE = "def run(skills):\n    yield from skills.collect('tree', 2)\n"
# Without skills.make: walk to the table (collecting a wood first if none is left), make.
PICKAXE_CODE = """\
def run(skills):
    while skills.inventory().get('wood', 0) < 1:
        ok = yield from skills.collect('tree', 1)
        if not ok:
            return
    yield from skills.path_to('table')
    yield 'make_wood_pickaxe'
"""
DRINK_CODE = """\
def run(skills):
    while skills.status()['drink'] < 9:
        ok = yield from skills.collect('water', 1)
        if not ok:
            return
"""
BROKEN_CODE = "def run(skills):\n    yield 'noop'\n    raise ValueError('boom')\n"

WOOD = Stage(Subtask("collect_wood", goal={"wood": 1}, max_steps=150), code=WOOD_CODE)
WOOD2 = Stage(Subtask("collect_two_wood", goal={"wood": 2}, max_steps=150), code=WOOD2_CODE)
TABLE = Stage(
    Subtask("place_table", achievement="place_table", max_steps=300), code=PLACE_TABLE_SOURCE
)
PICKAXE = Stage(
    Subtask("make_wood_pickaxe", achievement="make_wood_pickaxe", max_steps=200), code=PICKAXE_CODE
)
DRINK = Stage(Subtask("drink_water", achievement="collect_drink", max_steps=150), code=DRINK_CODE)
# Nine wood takes longer than the 21 steps after which Crafter's drink first drops.
WOOD9 = Stage(
    Subtask("collect_nine_wood", goal={"wood": 9}, max_steps=300),
    code="def run(skills):\n    yield from skills.collect('tree', 9)\n",
)
GOAL = Subtask("make_wood_pickaxe", achievement="make_wood_pickaxe", max_steps=1000)
SEEDS = [0, 1, 2, 3]


def tracing(obs, actions, seed):
    return TracingSkills(obs, actions, seed=seed)


@pytest.fixture(scope="module")
def world() -> CrafterWorld:
    world = CrafterWorld()
    world.reset(0)  # Crafter's world generator compiles once (numba)
    return world


@pytest.fixture(scope="module")
def wood_policy(tmp_path_factory) -> tuple[Path, str]:
    """A tiny PPO on collect_wood with the coded actions (a few seconds of training)."""
    import torch

    torch.set_num_threads(1)
    vec = make_vec_env(collect_wood_with_coded(), 2, 0, world_pool=range(8))
    try:
        settings = PPOSettings(n_steps=128, batch_size=64, n_epochs=2, learning_rate=1e-3)
        model = make_ppo(settings, vec, seed=0, device="cpu")
        model.learn(256)
        path = tmp_path_factory.mktemp("policy") / "wood.zip"
        model.save(path)
    finally:
        vec.close()
    return path, sha256_of(path)


def learned_wood(policy: tuple[Path, str]) -> Stage:
    path, digest = policy
    return Stage(
        Subtask("collect_wood", goal={"wood": 1}, max_steps=50),
        policy_path=str(path),
        policy_sha256=digest,
        config=collect_wood_with_coded(),
    )


def names(episode) -> list[str]:
    return [run.name for run in episode.stages]


def test_coded_stages_run_in_order_and_done_stages_stay_done(world) -> None:
    # collect_wood's test already holds after collect_two_wood: it never runs. The table
    # then spends the wood, yet collect_wood stays done (sticky): it is not run again.
    stages = [WOOD2, WOOD, TABLE, PICKAXE]
    for seed in SEEDS:
        episode = run_composed(world, stages, [], GOAL, seed, wall_s=30, skills_factory=tracing)
        assert episode.success and episode.cause == "success", (seed, episode.stages)
        assert names(episode) == ["collect_two_wood", "place_table", "make_wood_pickaxe"]
        assert all(run.success and run.cause == "success" for run in episode.stages)
        assert sum(run.steps for run in episode.stages) == episode.steps > 0
        assert "make_wood_pickaxe" in episode.achievements
        actions = [segment.action for segment in episode.trace]
        assert actions[0] == "collect('tree', 2)" and "place('table')" in actions
        assert episode.report().stages == episode.stages


def test_a_need_interrupts_a_stage_its_stage_runs_then_the_stage_restarts(world) -> None:
    # Drink drops below 9 after 21 steps, in the middle of collecting nine wood.
    needs = [Need("drink", below=9, stage=DRINK, until=9)]
    goal = Subtask("nine_wood", goal={"wood": 9}, max_steps=400)
    for seed in (0, 2, 7):
        episode = run_composed(world, [WOOD9], needs, goal, seed, wall_s=30)
        assert episode.success, (seed, episode.stages)
        runs = episode.stages
        assert (runs[0].name, runs[0].cause, runs[0].steps) == (
            "collect_nine_wood",
            "interrupted",
            21,
        )
        assert (runs[1].name, runs[1].success) == ("drink_water", True)
        assert (runs[-1].name, runs[-1].cause) == ("collect_nine_wood", "success")


def test_a_need_that_cannot_be_served_cools_down_instead_of_looping(world) -> None:
    nothing = Stage(
        Subtask("eat_nothing", achievement="eat_cow", max_steps=50),
        code="def run(skills):\n    return\n    yield 'noop'\n",
    )
    needs = [Need("food", below=10, stage=nothing)]  # always triggered
    goal = Subtask("nine_wood", goal={"wood": 9}, max_steps=400)
    episode = run_composed(world, [WOOD9], needs, goal, 1, wall_s=30)
    assert episode.success
    tried = [run for run in episode.stages if run.name == "eat_nothing"]
    assert tried and all(run.cause == "policy_finished" for run in tried)
    assert len(tried) <= 1 + episode.steps // NEED_COOLDOWN_STEPS


def test_a_failing_stage_is_retried_then_ends_the_episode_with_its_cause(world) -> None:
    broken = Stage(Subtask("broken", goal={"stone": 1}, max_steps=50), code=BROKEN_CODE)
    episode = run_composed(world, [WOOD, broken], [], GOAL, 0, wall_s=30)
    assert not episode.success
    assert names(episode) == ["collect_wood"] + ["broken"] * (1 + STAGE_RETRIES)
    assert {(r.cause, r.line) for r in episode.stages[1:]} == {("exception", 3)}
    assert (episode.cause, episode.line) == ("exception", 3)
    assert "boom" in episode.detail
    # A stage that keeps running into its own cap fails like one that raises.
    idle = Stage(
        Subtask("idle", goal={"stone": 1}, max_steps=5),
        code="def run(skills):\n    while True:\n        yield 'noop'\n",
    )
    episode = run_composed(world, [WOOD, idle], [], GOAL, 0, wall_s=30)
    assert [(r.name, r.cause, r.steps) for r in episode.stages[1:]] == [
        ("idle", "step_budget", 5)
    ] * (1 + STAGE_RETRIES)
    assert episode.cause == "step_budget" and "failed 4 times" in episode.detail
    # A search that gives up early goes on while its failed runs stay under the stage's
    # step allowance: 3 steps a run, a cap of 20 → 80 steps → runs until 81 steps.
    quitter = Stage(
        Subtask("quitter", goal={"stone": 1}, max_steps=20),
        code="def run(skills):\n    for _ in range(3):\n        yield 'noop'\n",
    )
    episode = run_composed(world, [WOOD, quitter], [], GOAL, 0, wall_s=30)
    runs = [r for r in episode.stages if r.name == "quitter"]
    assert {(r.cause, r.steps) for r in runs} == {("policy_finished", 3)}
    assert len(runs) == -(-STAGE_ALLOWANCE * 20 // 3) > 1 + STAGE_RETRIES
    # In a curriculum (skip_failed) a stage that gives up is dropped and the next runs.
    episode = run_composed(world, [broken, WOOD], [], GOAL, 0, wall_s=30, skip_failed=True)
    assert names(episode) == ["broken"] * (1 + STAGE_RETRIES) + ["collect_wood"]
    assert episode.cause == "policy_finished" and "gave up on broken" in episode.detail
    # Code that does not compile is not retried: the episode ends at once.
    syntax = Stage(Subtask("typo", goal={"stone": 1}), code="def run(skills)\n    yield 1\n")
    episode = run_composed(world, [WOOD, syntax], [], GOAL, 0, wall_s=30)
    assert names(episode) == ["collect_wood", "typo"]
    assert (episode.cause, episode.line) == ("syntax", 1)


def test_the_wall_budget_and_unknown_stats_end_a_composed_episode(world) -> None:
    spin = Stage(
        Subtask("spin", goal={"stone": 1}),
        code="def run(skills):\n    while True:\n        pass\n    yield 'noop'\n",
    )
    episode = run_composed(world, [WOOD, spin], [], GOAL, 0, wall_s=1.0)
    assert names(episode) == ["collect_wood", "spin"]
    assert episode.stages[1].cause == episode.cause == "timeout"
    with pytest.raises(ValueError, match="unknown stats"):
        run_composed(world, [WOOD], [Need("thirst", 5, DRINK)], GOAL, 0, wall_s=5)


def test_attach_takes_over_a_running_episode_without_resetting(world) -> None:
    config = collect_wood_with_coded()
    config = dataclasses.replace(
        config, subtask=Subtask("wood_again", achievement="collect_wood", max_steps=5)
    )
    env = SubtaskEnv(config, world_factory=lambda: world)
    obs = world.reset(4)
    skills = Skills(obs, world.action_names, seed=4)
    counts: dict[str, int] = {}
    for action in policies.collect_wood(skills):  # wood before the attach
        obs, _, _, info = world.step(action)
        skills._observe(obs, info)
        for name in info["achievements"]:
            counts[name] = counts.get(name, 0) + 1
    assert counts == {"collect_wood": 1}
    for action in skills.approach("tree", 20):  # to a tree, facing it
        obs, _, _, info = world.step(action)
        skills._observe(obs, info)
    assert skills.facing_tile() == "tree" and not info["achievements"]
    position, walked = obs.position, skills.steps()
    encoded = env.attach(world, obs, skills, achievements=counts)
    assert env.observation_space.contains(encoded)
    assert env.observation is obs
    noop = env.action_names.index("noop")
    _, reward, terminated, truncated, info = env.step(noop)
    # Same world, same player: nothing was reset; the earlier wood is not this success.
    assert env.observation.position == position and skills.steps() == walked + 1
    assert (reward, terminated, truncated, info["steps"]) == (0.0, False, False, 1)
    # Still facing the tree: the option chops a second log, the first success since the attach.
    _, reward, terminated, _, info = env.step(env.action_names.index("chop_tree"))
    assert info["achievements"] == ("collect_wood",) and terminated and reward == 1.0
    # Attached again (the step cap counts from each attach): noops until the cap, 5 steps.
    env.attach(world, env.observation, skills, achievements=dict(counts, collect_wood=2))
    ends = [env.step(noop)[2:4] for _ in range(5)]  # (terminated, truncated)
    assert ends == [(False, False)] * 4 + [(False, True)]


def test_a_learned_stage_acts_mid_episode_between_coded_stages(world, wood_policy) -> None:
    # The table spends the wood, so the learned collect_wood starts from an empty
    # inventory beside the table, then the pickaxe needs what it gathered.
    stages = prepare_stages([TABLE, learned_wood(wood_policy), PICKAXE], world)
    assert [p.problem for p in stages] == [None, None, None]
    learned_runs = []
    for seed in SEEDS:
        episode = run_composed(world, stages, [], GOAL, seed, wall_s=30, skills_factory=tracing)
        assert names(episode)[:2] == ["place_table", "collect_wood"], episode.stages
        run = episode.stages[1]
        assert run.learned and run.steps > 0 and run.detail  # the actions it chose
        assert any(s.action.startswith("policy('collect_wood')") for s in episode.trace)
        learned_runs.append(run)
    assert any(run.success for run in learned_runs), learned_runs


def test_an_unusable_policy_fails_its_stage_with_policy_unusable(world, wood_policy) -> None:
    stage = learned_wood(wood_policy)
    cases = {  # each with what its detail must say
        "does not match sha256": dataclasses.replace(stage, policy_sha256="0" * 64),
        "no policy at /nonexistent/policy.zip": dataclasses.replace(
            stage, policy_path="/nonexistent/policy.zip"
        ),
        "needs the RL config": dataclasses.replace(stage, config=None),
    }
    for case, bad in cases.items():
        episode = run_composed(world, [TABLE, bad], [], GOAL, 0, wall_s=30)
        assert names(episode) == ["place_table", "collect_wood"], case
        run = episode.stages[1]
        assert (run.cause, run.learned, run.steps) == ("policy_unusable", True, 0), case
        assert episode.cause == "policy_unusable", case
        assert case in run.detail, (case, run.detail)


def test_a_learned_stage_whose_zip_carries_a_pickle_loads_without_running_it(
    world, wood_policy, tmp_path: Path
) -> None:
    from test_safe_load import poisoned, rewrite

    path, _ = wood_policy
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.zip"
    stage = learned_wood((evil, poisoned(path, evil, marker, "observation_space")))
    (prepared,) = prepare_stages([stage], world)
    assert not marker.exists(), "loading the stage unpickled its data"
    assert prepared.problem is None and prepared.model is not None
    # A zip that is not a policy at all: the stage fails with policy_unusable.
    junk = tmp_path / "junk.zip"
    rewrite(path, junk, **{"policy.pth": b"not a torch file"})
    (broken,) = prepare_stages([learned_wood((junk, sha256_of(junk)))], world)
    assert broken.problem is not None and broken.problem.cause == "policy_unusable"
    assert "policy.pth is not a plain state dict" in broken.problem.detail


def test_episode_frames_make_a_gif(world, tmp_path: Path) -> None:
    frames: list = []
    episode = run_composed(world, [WOOD], [], WOOD.subtask, 3, wall_s=30, frames=frames)
    assert len(frames) == episode.steps + 1 > 2
    blob = frames_npz(frames)
    assert frames_from_npz(blob).shape == (len(frames), 64, 64, 3)
    path = write_gif(blob, tmp_path / "episode.gif", max_frames=4)
    with Image.open(path) as gif:
        assert gif.n_frames == min(4, len(frames)) > 1
        assert gif.size == (192, 192)  # 64×64 enlarged ×3, nearest-neighbour


def test_a_composed_rollout_through_an_environment_actor(tmp_path: Path, wood_policy) -> None:
    seen: dict = {}

    async def driver(head: Head) -> dict:
        # Environment actors load policies only from the run's own directory.
        path, digest = wood_policy
        stored = head.run_dir / "policies" / path.name
        stored.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, stored)
        stages = [TABLE, learned_wood((stored, digest)), PICKAXE]
        needs = [Need("drink", below=9, stage=DRINK, until=9)]
        req = RolloutRequest(GOAL, stages=stages, needs=needs, seeds=[0, 1], wall_s=30, frames=True)
        await head.wait_for("environment", 1)
        seen["result"] = await head.client.ask("@environment", req, timeout=120)
        try:
            both = dataclasses.replace(req, code=WOOD_CODE)
            await head.client.ask("@environment", both, timeout=60)
        except RemoteFailure as exc:
            seen["refused"] = str(exc)
        return {}

    settings = make_settings(
        tmp_path, {"environment": ActorSettings(count=1)}, heartbeat_timeout=10.0
    )
    run = run_head_with(settings, driver)
    assert run.code == 0, [e for e in run.events if e["level"] == "error"]
    result: RolloutResult = seen["result"]
    assert [e.seed for e in result.episodes] == [0, 1]
    assert result.steps == sum(e.steps for e in result.episodes) > 0
    for episode in result.episodes:
        assert names(episode)[0] == "place_table", episode.stages
        assert any(r.learned and r.steps > 0 for r in episode.stages)
        assert episode.trace and episode.wall_s > 0
        assert episode.success == (episode.cause == "success")
    assert result.success_rate > 0, [(e.cause, e.stages) for e in result.episodes]
    frames = frames_from_npz(result.frames)
    assert len(frames) == result.episodes[0].steps + 1
    lines = (run.run_dir / "rollouts" / "stats.jsonl").read_text().splitlines()
    assert [json.loads(line)["length"] for line in lines] == [e.steps for e in result.episodes]
    assert "not both" in seen["refused"]
