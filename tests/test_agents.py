"""The agents' parts, in-process: journal replay, setup composition, critic statistics,
offline decisions, and the config checks of the [agents] and [task] sections."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from helpers import ROOT

from actors.critic import statistics
from llm.offline import OfflineBackend
from messages.plan import Critique, Review, SubAction
from messages.rollout import EpisodeReport, Glimpse, RolloutResult, Segment, StageRun
from messages.task import Stage, Subtask
from method.journal import CallResult, Journal
from rl.setup_code import compose_setup
from skills.policies import COLLECT_WOOD_SOURCE, PLACE_TABLE_SOURCE
from skills.skills import Skills
from worlds.crafter_world import CrafterWorld

RUN = [sys.executable, str(ROOT / "run.py")]


class CountingBackend:
    """A backend that counts the calls that reach it (replayed ones must not)."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, role: str, purpose: str, request: dict) -> CallResult:
        self.calls += 1
        return CallResult(data={"echo": request["x"]}, tokens_in=3, tokens_out=2)


def test_recorded_calls_and_jobs_are_replayed_by_a_new_journal(tmp_path: Path) -> None:
    backend = CountingBackend()

    async def first() -> None:
        journal = Journal(tmp_path)
        assert (await journal.call(backend, "fast", "code", {"x": 1})).data == {"echo": 1}
        assert (await journal.call(backend, "fast", "code", {"x": 2})).data == {"echo": 2}
        request = Subtask("probe", goal={"wood": 1})
        journal.record_job(request, Subtask("result"), name="probe")

    trio.run(first)
    assert backend.calls == 2

    async def second() -> None:
        journal = Journal(tmp_path)
        assert journal.loaded_calls == 2 and journal.loaded_jobs == 1
        assert (await journal.call(backend, "fast", "code", {"x": 2})).data == {"echo": 2}
        assert (await journal.call(backend, "fast", "code", {"x": 3})).data == {"echo": 3}
        assert journal.job(Subtask("probe", goal={"wood": 1})) == Subtask("result")
        assert journal.job(Subtask("probe", goal={"wood": 2})) is None
        assert journal.totals.replayed == 1 and journal.totals.tokens_in == 9

    trio.run(second)
    assert backend.calls == 3  # only the new call reached the backend
    keys = [json.loads(line)["key"] for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 3


def test_a_call_cut_short_by_a_kill_is_simply_made_again(tmp_path: Path) -> None:
    (tmp_path / "calls.jsonl").write_text('{"key": "abc", "role": "fa')  # torn last line
    journal = Journal(tmp_path)
    assert journal.loaded_calls == 0


def test_composed_setup_runs_each_stage_until_its_test_holds() -> None:
    stages = [
        Stage(Subtask("collect_wood", goal={"wood": 1}), code=COLLECT_WOOD_SOURCE),
        Stage(Subtask("place_table", achievement="place_table"), code=PLACE_TABLE_SOURCE),
    ]
    source = compose_setup(stages)
    import sandbox

    sandbox.compile_code(source)  # the sandbox accepts the composition (raises if not)
    namespace: dict = {}
    exec(compile(source, "<setup>", "exec"), namespace)
    assert "stage0_run" in namespace and "stage1_run" in namespace
    world = CrafterWorld()
    wins = 0
    for seed in (11, 12, 13):
        obs = world.reset(seed)
        skills = Skills(obs, world.action_names, seed=seed)
        steps = 0
        for action in namespace["run"](skills):
            obs, _, done, info = world.step(action)
            skills._observe(obs, info)
            steps += 1
            if done or steps > 2000:
                break
        wins += skills.achievements().get("place_table", 0) > 0
    assert wins == 3


NOOP_FOREVER = "def run(skills):\n    while True:\n        yield 'noop'\n"
LEFT_FOREVER = "def run(skills):\n    while True:\n        yield 'move_left'\n"


def test_composed_setup_serves_needs_as_the_planner_does() -> None:
    # A stage that never reaches its goal, and a need that is always due (health 9 < 10)
    # but never served (until 10): the need runs its 3-step cap, goes on cooldown for
    # NEED_COOLDOWN_STEPS, the stage runs meanwhile, then the need interrupts it again.
    from messages.task import Need
    from rl.setup_code import NEED_COOLDOWN_STEPS

    stage = Stage(Subtask("collect_wood", goal={"wood": 1}), code=NOOP_FOREVER)
    need = Need(
        stat="health", below=10.0, until=10.0,
        stage=Stage(Subtask("retreat", max_steps=3), code=LEFT_FOREVER),
    )  # fmt: skip
    source = compose_setup([stage], [need])
    import sandbox

    sandbox.compile_code(source)
    namespace: dict = {}
    exec(compile(source, "<setup>", "exec"), namespace)
    world = CrafterWorld()
    obs = world.reset(5)
    skills = Skills(obs, world.action_names, seed=5)
    actions = []
    for action in namespace["run"](skills):
        actions.append(action)
        obs, _, done, info = world.step(action)
        skills._observe(obs, info)
        if len(actions) == 3 + NEED_COOLDOWN_STEPS + 3 + 5:
            break
    assert actions == (
        ["move_left"] * 3 + ["noop"] * NEED_COOLDOWN_STEPS + ["move_left"] * 3 + ["noop"] * 5
    )
    # Without needs the composition is as before: the stage alone.
    assert "setup_stage" not in compose_setup([stage])


def _episode(
    seed: int, success: bool, stages: list[StageRun], cause: str = "success"
) -> EpisodeReport:
    glimpse = Glimpse(
        step=5, inventory={"wood": 1}, status={"health": 9.0}, near=["tree"], facing="grass"
    )
    trace = [Segment("collect('stone', 1)", 40, glimpse, glimpse)]
    return EpisodeReport(seed, success, 100, 0.0, [], cause, "", 0, trace=trace, stages=stages)


def test_critic_counts_a_sub_action_only_where_it_was_reached() -> None:
    sub = SubAction("collect_stone", Subtask("collect_stone", goal={"stone": 1}), target=0.9)
    ok = StageRun("collect_stone", True, 30, "success")
    budget = StageRun("collect_stone", False, 300, "step_budget")
    earlier = StageRun("make_wood_pickaxe", False, 200, "policy_finished", "no table")
    result = RolloutResult(
        "collect_stone",
        [
            _episode(1, True, [ok]),
            _episode(2, False, [budget], "step_budget"),
            _episode(3, False, [earlier], "policy_finished"),
            _episode(4, True, [ok]),
        ],
        0.5,
        400,
        "env-0",
    )
    rate, reached = result.stage_rate("collect_stone")
    assert (rate, reached) == (2 / 3, 3)
    stats = statistics(Review(sub, 1, "code", result, revisions_left=1))
    assert stats["success_rate"] == round(2 / 3, 4) and stats["task_success_rate"] == 0.5
    # Episode 3 failed before collect_stone's turn: that is make_wood_pickaxe's failure.
    assert stats["causes"] == {"step_budget": 1}
    assert stats["example"]["action"] == "collect('stone', 1)"


def test_critic_blames_what_ended_the_episode_and_names_unreached_sub_actions() -> None:
    sub = SubAction("collect_iron", Subtask("collect_iron", goal={"iron": 1}), target=0.9)
    cut = StageRun("collect_iron", False, 40, "interrupted", "a need came first")
    died = StageRun("eat_cow", False, 20, "episode_done", "the player died")
    earlier = StageRun("collect_coal", False, 200, "policy_finished", "no coal seen")
    result = RolloutResult(
        "collect_iron",
        [
            # Died inside a need run that interrupted collect_iron: collect_iron's death.
            dataclasses.replace(_episode(1, False, [cut, died], "episode_done"), detail="died"),
            _episode(2, False, [earlier], "policy_finished"),
        ],
        0.0,
        400,
        "env-0",
    )
    stats = statistics(Review(sub, 1, "code", result, revisions_left=1))
    assert stats["causes"] == {"episode_done": 1}
    assert stats["example"]["stage"] == "collect_iron"
    only_earlier = dataclasses.replace(result, episodes=[result.episodes[1]])
    stats = statistics(Review(sub, 1, "code", only_earlier, revisions_left=1))
    assert stats["reached"] == 0
    assert stats["causes"] == {"not_reached:policy_finished": 1}
    assert stats["example"]["stage"] == "collect_coal"
    reply = OfflineBackend()._critic_review(stats)
    assert reply["verdict"] == "revise"  # nothing measured: no switch to RL on this


@pytest.mark.parametrize(
    ("rate", "cause", "left", "verdict"),
    [
        (0.95, "", 1, "accept"),
        (0.5, "step_budget", 1, "revise"),
        (0.5, "step_budget", 0, "switch"),
        (0.5, "policy_unusable", 2, "switch"),
    ],
)
def test_offline_critic_verdict_follows_rate_cause_and_revisions(
    rate: float, cause: str, left: int, verdict: str
) -> None:
    request = {
        "success_rate": rate,
        "target": 0.9,
        "episodes": 10,
        "causes": {cause: 5} if cause else {},
        "revisions_left": left,
        "mode": "code",
        "example": {"cause": cause} if cause else None,
    }
    reply = trio.run(OfflineBackend().call, "critic", "review", request)
    assert reply.data["verdict"] == verdict
    if verdict != "accept":
        assert cause in reply.data["advice"]


@pytest.mark.parametrize(("won", "verdict"), [(3, "accept"), (2, "switch")])
def test_offline_critic_accepts_a_stage_not_measurably_under_its_target(
    won: int, verdict: str
) -> None:
    # 3 of 4 is 0.75 < 0.9, but 4 worlds cannot tell it from a stage at 0.95: no switch
    # to RL on that; 2 of 4 is measurably under (Wilson upper end 0.85).
    sub = SubAction("collect_iron", Subtask("collect_iron", goal={"iron": 1}), target=0.9)
    episodes = [
        _episode(
            s,
            s < won,
            [StageRun("collect_iron", s < won, 50, "success" if s < won else "step_budget")],
            "success" if s < won else "step_budget",
        )
        for s in range(4)
    ]
    result = RolloutResult(sub.subtask, episodes, won / 4, 200, "env-0")
    stats = statistics(Review(sub, 1, "code", result, revisions_left=0))
    assert stats["measurably_below"] is (won == 2)
    reply = trio.run(OfflineBackend().call, "critic", "review", stats)
    assert reply.data["verdict"] == verdict


def test_critic_rates_a_version_on_its_first_and_its_grown_worlds_together() -> None:
    # 4 of 4 on the loop's first worlds, 6 of the 12 its paired comparison grew into:
    # 10 of 16 (0.625), measurably under 0.9, where the first four alone said 1.0.
    sub = SubAction("collect_iron", Subtask("collect_iron", goal={"iron": 1}), target=0.9)
    ok = StageRun("collect_iron", True, 50, "success")
    result = RolloutResult(sub.subtask, [_episode(s, True, [ok]) for s in range(4)], 1, 200, "e")
    alone = statistics(Review(sub, 1, "rl", result, revisions_left=1))
    assert (alone["success_rate"], alone["reached"], alone["measurably_below"]) == (1.0, 4, False)
    grown = [1, 0] * 6
    stats = statistics(Review(sub, 1, "rl", result, revisions_left=1, grown=grown))
    assert (stats["success_rate"], stats["reached"]) == (0.625, 16)
    assert stats["measurably_below"] is True
    assert trio.run(OfflineBackend().call, "critic", "review", alone).data["verdict"] == "accept"
    assert trio.run(OfflineBackend().call, "critic", "review", stats).data["verdict"] != "accept"


@pytest.mark.parametrize(
    ("accept", "mode", "cause", "left", "verdict"),
    [
        ("at_target", "code", "step_budget", 1, "revise"),
        ("at_target", "code", "step_budget", 0, "accept"),  # none left: accepted, not RL
        ("at_target", "rl", "step_budget", 1, "accept"),  # retraining is not a code fix
        ("at_target", "code", "policy_unusable", 1, "accept"),  # no code fix known
        ("not_below", "code", "step_budget", 1, "accept"),  # the default
    ],
)
def test_offline_critic_at_target_revises_a_version_under_target_that_noise_would_pass(
    accept: str, mode: str, cause: str, left: int, verdict: str
) -> None:
    # 7 of 8 is not measurably under 0.9 (Wilson upper end 0.98): ``not_below`` accepts
    # it; ``at_target`` asks for the library's fix while revisions remain.
    sub = SubAction("collect_iron", Subtask("collect_iron", goal={"iron": 1}), target=0.9)
    episodes = [
        _episode(
            s,
            s < 7,
            [StageRun("collect_iron", s < 7, 50, "success" if s < 7 else cause)],
            "success" if s < 7 else cause,
        )
        for s in range(8)
    ]
    result = RolloutResult(sub.subtask, episodes, 7 / 8, 400, "env-0")
    stats = statistics(Review(sub, 1, mode, result, revisions_left=left))
    assert stats["measurably_below"] is False
    reply = trio.run(OfflineBackend(accept=accept).call, "critic", "review", stats)
    assert reply.data["verdict"] == verdict
    assert "not measurably under target 0.90" in reply.data["advice"]


def test_the_offline_accept_rule_comes_from_the_config(tmp_path: Path) -> None:
    from method.agents import make_backend
    from method.settings import AgentSettings

    assert make_backend(AgentSettings(offline_accept="at_target")).accept == "at_target"
    assert make_backend(AgentSettings()).accept == "not_below"
    assert "agents.offline_accept: expected not_below" in _config_error(
        tmp_path, "[agents]\noffline_accept = 'always'\n" + ENVS
    )


def test_offline_slow_agent_moves_a_coded_step_under_target_to_rl() -> None:
    request = {
        "task": "t",
        "iteration": 1,
        "success_target": 0.3,
        "final_success": 0.1,
        "budget": {"iterations_left": 1, "env_steps_left": 10_000},
        "subactions": [
            {"name": "a", "mode": "code", "target": 0.9, "success_rate": 0.95,
             "accepted": True, "verdict": "accept", "cause": "", "advice": "", "versions": 1},
            {"name": "b", "mode": "code", "target": 0.9, "success_rate": 0.4,
             "accepted": False, "verdict": "switch", "cause": "step_budget", "advice": "",
             "versions": 3, "exhausted": True},
            {"name": "c", "mode": "code", "target": 0.9, "success_rate": 0.5,
             "accepted": False, "verdict": "switch", "cause": "episode_done", "advice": "",
             "versions": 3, "exhausted": False},
            {"name": "e", "mode": "code", "target": 0.9, "success_rate": 0.5,
             "accepted": False, "verdict": "switch", "cause": "episode_done", "advice": "",
             "versions": 6, "exhausted": False, "stalled": True},
            {"name": "d", "mode": "rl", "target": 0.9, "success_rate": 0.2,
             "accepted": False, "verdict": "revise", "cause": "step_budget", "advice": "",
             "versions": 2},
        ],
    }  # fmt: skip
    reply = trio.run(OfflineBackend().call, "slow", "revise", request).data
    # b: no code revision answers it any more → RL; c: the code can still be revised →
    # another inner loop; e: a redo did not raise it → RL; d: a learned version under
    # target keeps the best one.
    changes = [(c["subaction"], c["change"]) for c in reply["changes"]]
    assert changes == [("b", "to_rl"), ("c", "redo"), ("e", "to_rl")]
    assert "0.40 < 0.90" in reply["changes"][0]["reason"] and not reply["stop"]
    request["budget"]["iterations_left"] = 0
    reply = trio.run(OfflineBackend().call, "slow", "revise", request).data
    changes = [(c["subaction"], c["change"]) for c in reply["changes"]]
    assert changes == [("b", "to_rl"), ("e", "to_rl")]


def test_offline_code_revision_answers_the_whole_cause_at_once() -> None:
    from knowledge import recipes, revisions
    from llm.offline import revise_for

    step = recipes.achievement_step("collect_iron")
    first = revisions.first_params(step)
    died, reason = revise_for(step, first, "episode_done", "")
    best = revisions.best_params(step, survive=False)
    assert (died.fight, died.arm, died.check) == (True, True, best.check)
    assert reason.startswith("episode_done") and "arm=True" in reason
    missing, _ = revise_for(step, first, "policy_finished", "")
    assert missing.secure and missing.dig and missing.attempts == best.attempts
    assert revise_for(step, best, "exception", "") is None  # nothing left to change
    # Deaths that no more revision answers: the search itself gets stronger instead (a
    # sub-action that succeeds sooner is exposed less), never away from the final values.
    again, reason = revise_for(step, died, "episode_done", "")
    assert reason.startswith("nothing more answers episode_done") and again.secure
    params = again
    for _ in range(5):
        revised = revise_for(step, params, "episode_done", "")
        if revised is None:
            break
        params = revised[0]
    assert revised is None and not params.survive  # the plan's needs keep the vitals up
    assert (params.dig, params.patience, params.chunk) == (True, best.patience, best.chunk)


def _critiqued_first_version(
    backend: OfflineBackend, sub: SubAction, causes: list[str]
) -> tuple[dict, Critique]:
    """The backend's first code for ``sub``, its 8 worlds ended with ``causes``, and the
    critique the backend's critic gives it (through the critic actor's own statistics)."""
    from actors.critic import critique_from
    from actors.fast import code_request

    episodes = [
        _episode(s, c == "success", [StageRun(sub.name, c == "success", 50, c)], c)
        for s, c in enumerate(causes)
    ]
    rate = causes.count("success") / len(causes)
    result = RolloutResult(sub.subtask, episodes, rate, 400, "env-0")
    first = trio.run(backend.call, "fast", "code", code_request(sub, 1, None, None)).data
    review = Review(sub, 1, "code", result, revisions_left=1, code=first["code"])
    stats = statistics(review)
    reply = trio.run(backend.call, "critic", "review", stats).data
    return first, critique_from(review, stats, reply)


@pytest.mark.parametrize("revise", ["top", "every"])
def test_offline_code_revision_answers_every_cause_the_critique_counts(revise: str) -> None:
    # 3 of 8 worlds died in the stage and 2 gave up: ``top`` answers the deaths only,
    # ``every`` both, in one revision; the critique carries every cause to the fast agent.
    from actors.fast import code_request
    from knowledge import recipes, revisions
    from llm.offline import revise_others

    sub = SubAction("collect_iron", Subtask("collect_iron", goal={"iron": 1}), target=0.9)
    causes = ["episode_done"] * 3 + ["policy_finished"] * 2 + ["success"] * 3
    backend = OfflineBackend(first="simplest", revise=revise)
    first, critique = _critiqued_first_version(backend, sub, causes)
    assert (critique.verdict, critique.cause) == ("revise", "episode_done")
    assert critique.causes == {"episode_done": 3, "policy_finished": 2}
    previous = {"code": first["code"], "note": first["note"], "params": first["params"]}
    second = trio.run(backend.call, "fast", "code", code_request(sub, 2, previous, critique))
    params = revisions.Params(**second.data["params"])
    assert params.fight and params.arm  # the deaths: answered either way
    every = revise == "every"
    assert (params.secure, params.attempts == revisions.MAX_ATTEMPTS) == (every, every)
    assert ("2 more ended with policy_finished" in second.data["note"]) is every
    assert second.data["code"] != first["code"]
    # Causes no code revision answers add nothing: an earlier stage failing, a setup.
    step = recipes.achievement_step("collect_iron")
    only = {"cause": "setup_failed", "causes": {"setup_failed": 2, "not_reached:x": 1}}
    assert revise_others(step, revisions.first_params(step), None, only) is None


@pytest.mark.parametrize("lessons", [False, True])
def test_a_later_first_version_takes_what_earlier_revisions_taught(lessons: bool) -> None:
    # collect_iron's revision for deaths turned fighting and swords on; with
    # offline_lessons, the first version of a step built on it (make_iron_pickaxe) starts
    # with them, its note naming where they were learned; without, from the bare template.
    from actors.fast import code_request, lesson_of
    from knowledge import revisions

    iron = SubAction("collect_iron", Subtask("collect_iron", goal={"iron": 1}), target=0.9)
    backend = OfflineBackend(first="simplest", lessons=lessons)
    first, critique = _critiqued_first_version(
        backend, iron, ["episode_done"] * 5 + ["success"] * 3
    )
    previous = {"code": first["code"], "note": first["note"], "params": first["params"]}
    second = trio.run(backend.call, "fast", "code", code_request(iron, 2, previous, critique))
    lesson = lesson_of(iron, critique, first["params"], second.data["params"])
    assert lesson is not None and lesson["cause"] == "episode_done"
    assert lesson["changed"]["fight"] is True and lesson["changed"]["arm"] is True
    assert lesson_of(iron, critique, first["params"], first["params"]) is None
    pickaxe = SubAction(
        "make_iron_pickaxe", Subtask("make_iron_pickaxe", goal={"iron_pickaxe": 1}), target=0.9
    )
    request = code_request(pickaxe, 1, None, None, [lesson])
    assert request["lessons"] == [lesson]
    assert "lessons" not in code_request(pickaxe, 1, None, None, [])
    later = trio.run(backend.call, "fast", "code", request).data
    params = revisions.Params(**later["params"])
    bare = revisions.first_params(None)
    assert (params.fight, params.arm) == (lessons, lessons)
    assert params.patience == bare.patience  # a step's own patience is not passed on
    assert ("fight (after episode_done on collect_iron)" in later["note"]) is lessons


def test_the_offline_revise_rule_comes_from_the_config(tmp_path: Path) -> None:
    from method.agents import make_backend
    from method.settings import AgentSettings

    assert make_backend(AgentSettings(offline_revise="every")).revise == "every"
    assert make_backend(AgentSettings()).revise == "top"
    assert make_backend(AgentSettings(offline_lessons=True)).lessons is True
    assert make_backend(AgentSettings()).lessons is False
    assert "agents.offline_revise: expected top" in _config_error(
        tmp_path, "[agents]\noffline_revise = 'all'\n" + ENVS
    )


def _config_error(tmp_path: Path, text: str, env: dict | None = None) -> str:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    done = subprocess.run(
        [*RUN, "--config", str(config)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert str(config) in done.stderr
    assert not (tmp_path / "runs").exists()
    return done.stderr


ENVS = "[actors.environment]\ncount = 1\n"


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("[agents]\nbackend = 'opneai'\n" + ENVS, "did you mean 'openai'?"),
        ("[agents]\nbackend = 'openai'\n" + ENVS, 'set base_url = "http://localhost:8000/v1"'),
        (
            "[agents]\nbackend = 'openai'\nbase_url = 'http://127.0.0.1:9/v1'\n" + ENVS,
            "set model =",
        ),
        ("[task]\niterations = 'three'\n" + ENVS, "task.iterations: expected an integer"),
        ("[task]\ntarget = 'dimond'\n" + ENVS, "task.target: expected an item or achievement"),
        ("[task]\nsuccess_target = 3.0\n" + ENVS, "task.success_target: expected a rate"),
        ("[task]\nwall_s = -1\n" + ENVS, "task.wall_s: expected seconds ≥ 0"),
        ("[agents]\noffline_first = 'best'\n" + ENVS, "agents.offline_first: expected full"),
        ("[run]\nname = 'x'\n", "add [actors.environment]"),
    ],
)
def test_bad_agents_or_task_config_exits_2_with_the_fix(
    tmp_path: Path, text: str, expect: str
) -> None:
    assert expect in _config_error(tmp_path, text)


def test_openai_backend_without_its_key_variable_exits_2(tmp_path: Path) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != "RLGPT_TEST_KEY"}
    text = (
        "[agents]\nbackend = 'openai'\nbase_url = 'http://192.0.2.1:9/v1'\nmodel = 'm'\n"
        "api_key_env = 'RLGPT_TEST_KEY'\n" + ENVS
    )  # a remote endpoint (TEST-NET-1, never contacted): loopback servers need no key
    assert "export RLGPT_TEST_KEY=" in _config_error(tmp_path, text, env)


def test_openai_endpoint_that_refuses_exits_2(tmp_path: Path) -> None:
    import os
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RLGPT_TEST_KEY": "k"}
    text = (
        f"[agents]\nbackend = 'openai'\nbase_url = 'http://127.0.0.1:{port}/v1'\nmodel = 'm'\n"
        "api_key_env = 'RLGPT_TEST_KEY'\ntimeout_s = 2.0\nmax_retries = 0\n" + ENVS
    )
    assert "check base_url" in _config_error(tmp_path, text, env)


def test_the_report_says_where_the_offline_backend_starts():
    from method import settings as cfg
    from method.report import OFFLINE_FIRST_LINES, _offline_line

    # Every choice of [agents] offline_first has its own words, and none calls the
    # offline backend a model or what it keeps a discovery.
    assert set(OFFLINE_FIRST_LINES) == set(cfg.OFFLINE_FIRST)
    full, simplest = _offline_line("full"), _offline_line("simplest")
    assert "not a language model" in full and "not a language model" in simplest
    assert 'offline_first = "full"' in full and "not discovered" in full
    assert 'offline_first = "simplest"' in simplest and "not a model's discovery" in simplest
    # Lessons passed on are named as the same rules applied sooner (only where they act).
    taught = _offline_line("simplest", lessons=True)
    assert taught.startswith(simplest[:-1]) and "offline_lessons" in taught
    assert "the same rules applied sooner" in taught and "offline_lessons" not in simplest
    assert _offline_line("full", lessons=True) == full
    # In Minetest: the template library named as what it is, with no Crafter switch.
    minetest = _offline_line("full", world="minetest")
    assert "not a language model" in minetest and "Minetest template library" in minetest
    assert "not discovered" in minetest and "offline_first" not in minetest
