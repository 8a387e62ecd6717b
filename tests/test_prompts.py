"""The prompts a model reads: built from the agents' real requests, their worked examples
use only keys those requests have, they fit a small model's context, and the skill API
they show is generated from the code; sub-action names a model gives map to the game's
steps or fail with a cause, never a crash."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import trio

from actors.critic import statistics
from actors.fast import code_request, rl_config, rl_request
from actors.slow import needs_table, plan_name, plan_request, revise_request
from knowledge import recipes
from knowledge.options import options_for
from llm import PURPOSES, ContractError, PromptSet, validate
from llm.contracts import game, resolve_achievement, subtask_achievement
from llm.offline import OfflineBackend
from llm.prompts import estimate_tokens, skill_reference
from messages.plan import Critique, Plan, Review, RunTask, SubAction, SubActionOutcome
from messages.rollout import EpisodeReport, Glimpse, RolloutResult, Segment, StageRun
from messages.task import Stage, Subtask
from method.settings import MethodSettings

TASK = RunTask("make a wood pickaxe", "wood_pickaxe", 0.5, 3, 100_000, [1, 2], [3, 4])
CRITIQUE = Critique(
    "place_table", 1, "code", 0.25, 0.9, 4, "revise", cause="policy_finished", count=3,
    detail="place returned False", line=3, action="place('table')", advice="collect wood first",
)  # fmt: skip


def _subaction(name: str = "place_table") -> SubAction:
    step = recipes.achievement_step(name)
    return SubAction(
        name,
        Subtask(name, step.description, goal=dict(step.goal), achievement=step.achievement,
                max_steps=step.max_steps),
        description=step.description,
    )  # fmt: skip


def _result(name: str) -> RolloutResult:
    glimpse = Glimpse(12, {"wood": 1}, {"health": 9}, (("tree", 1, 0),), "grass")
    trace = [Segment("place('table')", 40, glimpse, glimpse)]
    ok = EpisodeReport(
        1, True, 80, 1.0, [], "success", "", 0, stages=[StageRun(name, True, 80, "success")]
    )
    bad = EpisodeReport(
        2, False, 150, 0.0, [], "policy_finished", "place returned False", 3, trace=trace,
        stages=[StageRun(name, False, 150, "policy_finished", "place returned False", 3)],
    )  # fmt: skip
    return RolloutResult(name, [ok, bad], 0.5, 230, "env-0")


def real_requests() -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Every kind of call, as the agents build it (their own request functions, over
    the real recipe data, skill library and critic statistics)."""
    settings = MethodSettings()
    steps = recipes.describe(recipes.chain(TASK.target_item))
    plan_req = plan_request(TASK, settings, steps, needs_table())
    reply = trio.run(OfflineBackend().call, "slow", "plan", plan_req).data
    subs = [_subaction(s["name"]) for s in reply["subactions"]]
    plan = Plan(TASK.task, 1, subs)
    table = subs[1]
    outcome = SubActionOutcome(
        table.name, "code", 0.25, False, Stage(table.subtask, code="def run(skills): ..."),
        versions=2, critiques=[CRITIQUE], exhausted=True,
    )  # fmt: skip
    revise = revise_request(TASK, plan, {table.name: [outcome]}, 0.2, 1, 5000)
    code = "def run(skills):\n    yield from skills.place('table')\n"
    previous = {"code": code, "note": "place the table", "params": None}
    offered = options_for(recipes.achievement_step(table.name))
    from actors.fast import _world_actions

    actions = _world_actions()
    config = validate("fast", "rl", {"options": ["explore"], "primitives": [], "max_steps": 100})
    rl_previous = {"config": config, "held_out_success": 0.1}
    review = Review(table, 2, "code", _result(table.name), revisions_left=1, code=code)
    return {
        ("slow", "plan"): [plan_req],
        ("slow", "revise"): [revise],
        ("fast", "code"): [code_request(table, 1, None, None),
                           code_request(table, 2, previous, CRITIQUE)],
        ("fast", "rl"): [rl_request(table, 1, offered, actions, None, None),
                         rl_request(table, 2, offered, actions, rl_previous, CRITIQUE)],
        ("critic", "review"): [statistics(review)],
    }  # fmt: skip


def _example_request(role: str, purpose: str, world: str = "crafter") -> dict[str, Any]:
    text = PromptSet(world=world).render(role, purpose, {})[0]["content"]
    block = text.split("Example request:", 1)[1].split("Example reply:", 1)[0]
    return json.loads(block)


MAPS = frozenset({"goal", "causes", "inventory", "status", "uses", "achievements"})
"""Keys whose values map data to data (item → count): their keys are values, not fields."""


def _paths(value: Any, prefix: str = "") -> set[str]:
    """Every key path a JSON value uses (list items as ``[]``)."""
    out: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            path = f"{prefix}.{key}" if prefix else key
            out.add(path)
            if key not in MAPS:
                out |= _paths(inner, path)
    elif isinstance(value, list):
        for inner in value:
            out |= _paths(inner, f"{prefix}[]")
    return out


@pytest.mark.parametrize("world", ["crafter", "minetest"])
@pytest.mark.parametrize(("role", "purpose"), sorted(PURPOSES))
def test_each_worked_example_uses_only_keys_the_real_request_has(
    role: str, purpose: str, world: str
) -> None:
    real = set().union(*(_paths(r) for r in real_requests()[role, purpose]))
    example = _paths(_example_request(role, purpose, world))
    assert example, f"{role}_{purpose}.txt: no example request found"
    invented = sorted(example - real)
    assert not invented, f"{role}_{purpose}.txt's example uses keys no real request has: {invented}"


@pytest.mark.parametrize(("role", "purpose"), sorted(PURPOSES))
def test_each_prompt_renders_from_a_real_request_within_a_small_models_context(
    role: str, purpose: str
) -> None:
    prompts = PromptSet()
    for request in real_requests()[role, purpose]:
        messages = prompts.render(role, purpose, request)
        assert "$" not in messages[0]["content"].replace("$$", "")
        # An 8k context (llama.cpp's usual n_ctx here) must hold it and a 2k-token reply.
        assert estimate_tokens(messages) + 2048 <= 8192, (role, purpose)


def test_the_longest_plan_the_game_has_fits_a_small_models_context() -> None:
    for target, steps in [
        ("diamond", recipes.chain("diamond")),
        ("achievements", recipes.curriculum()),  # all 22 achievements
    ]:
        task = RunTask(target, target, 0.3, 3, 10**6, [1], [2])
        request = plan_request(task, MethodSettings(), recipes.describe(steps), needs_table())
        tokens = estimate_tokens(PromptSet().render("slow", "plan", request))
        assert tokens + 2048 <= 8192, (target, tokens)


def test_the_plan_request_carries_no_policy_source() -> None:
    (request,) = real_requests()["slow", "plan"]
    assert all("code" not in need for need in request["needs"])
    assert "def " not in json.dumps(request)
    # The slow agent still serves the needs with their code: it keeps the table.
    assert all(need["code"] for need in needs_table())


def test_the_skill_reference_is_generated_from_every_public_skill() -> None:
    import inspect

    from skills.skills import Skills

    described = PromptSet().skills_api
    for name, method in inspect.getmembers(Skills, inspect.isfunction):
        if not name.startswith("_"):
            assert f"skills.{name}(" in described
            first = " ".join((method.__doc__ or "").split())[:30].replace("``", "")
            assert first.split(" (")[0][:20] in skill_reference(), name


@pytest.mark.parametrize(
    ("text", "achievement"),
    [
        ("collect_wood", "collect_wood"),
        ("Collect Wood", "collect_wood"),
        ("get_logs", "collect_wood"),
        ("chop trees", "collect_wood"),
        ("craft a crafting table", "place_table"),
        ("build furnace", "place_furnace"),
        ("make wooden pickaxe", "make_wood_pickaxe"),
        ("kill zombie", "defeat_zombie"),
        ("drink water", "collect_drink"),
        ("sleep", "wake_up"),
        ("mine_iron_ore", "collect_iron"),
        ("dance", None),
        ("stone", None),  # collect or place: said as ambiguous, not guessed
    ],
)
def test_a_models_sub_action_names_map_to_crafter_achievements(
    text: str, achievement: str | None
) -> None:
    assert resolve_achievement(text) == achievement


def test_a_plan_normalises_achievements_and_goal_items_and_refuses_unknown_ones() -> None:
    sub = {"name": "get_wood", "description": "d", "mode": "code", "max_steps": 100}
    plan = validate("slow", "plan", {"subactions": [{**sub, "achievement": "Collect Wood"}]})
    assert plan["subactions"][0]["achievement"] == "collect_wood"
    plan = validate("slow", "plan", {"subactions": [{**sub, "goal": {"Logs": 2}}]})
    assert plan["subactions"][0]["goal"] == {"wood": 2}
    with pytest.raises(ContractError, match=r"subactions\[0\].achievement: expected one of"):
        validate("slow", "plan", {"subactions": [{**sub, "achievement": "dance"}]})
    with pytest.raises(ContractError, match=r"subactions\[0\].goal.gold: expected an item"):
        validate("slow", "plan", {"subactions": [{**sub, "goal": {"gold": 1}}]})


def test_a_sub_action_stands_for_a_step_by_achievement_name_or_goal() -> None:
    assert subtask_achievement("gather_logs", "", {"wood": 3}) == "collect_wood"
    assert subtask_achievement("stay_fed", "", {"food": 6}) == "eat_cow"
    assert subtask_achievement("x", "", {"stone": 1}) == "collect_stone"
    assert subtask_achievement("dance_party", "", {"health": 9}) is None


def test_a_revision_naming_a_sub_action_loosely_finds_it_in_the_plan() -> None:
    plan = Plan("t", 1, [_subaction("collect_wood"), _subaction("place_table")])
    assert plan_name(plan, "place_table") == "place_table"
    assert plan_name(plan, "Place Table") == "place_table"
    assert plan_name(plan, "get logs") == "collect_wood"
    assert plan_name(plan, "fly") is None


def test_the_code_contract_carries_the_models_give_up_flag() -> None:
    reply = validate("fast", "code", {"code": "", "unchanged": True, "note": "no better code"})
    assert reply["unchanged"] is True and reply["code"] == ""
    assert "unchanged" not in validate(
        "fast", "code", {"code": "def run(skills):\n    yield 'do'\n"}
    )
    with pytest.raises(ContractError, match="code: expected a non-empty string"):
        validate("fast", "code", {"code": "", "unchanged": False})
    with pytest.raises(ContractError, match="unchanged: expected true or false"):
        validate("fast", "code", {"code": "def run(skills):\n    yield 'do'\n", "unchanged": "y"})


def test_every_contract_has_a_json_schema_naming_its_required_keys() -> None:
    from llm.contracts import json_schemas

    schemas = json_schemas()
    assert set(schemas) == set(PURPOSES)
    for (role, purpose), schema in schemas.items():
        assert schema["type"] == "object"
        for world in ("crafter", "minetest"):
            text = PromptSet(world=world).render(role, purpose, {})[0]["content"]
            reply, _ = json.JSONDecoder().raw_decode(text.split("Example reply:")[1].strip())
            with game(world):
                validate(role, purpose, reply)  # the example obeys its own contract
            missing = [key for key in schema["required"] if key not in reply]
            assert not missing, (world, role, purpose, missing)
        assert re.fullmatch(r"[a-z_]+", f"{role}_{purpose}")


# ---------------------------------------------------------------------- routes a model takes


class ScriptedModel:
    """A stand-in for a model inside the process (no server): its replies are given, and
    go through the contracts' validator as a model's would."""

    name = "scripted"

    def __init__(self, replies: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.replies = replies

    async def call(self, role: str, purpose: str, request: dict[str, Any]) -> Any:
        from llm import CallResult

        return CallResult(data=validate(role, purpose, self.replies[role, purpose]))


def _work(sub: SubAction) -> Any:
    from messages.plan import WorkOn

    return WorkOn(subaction=sub, before=[], needs=[], iteration=1, seeds=[1], revisions=1,
                  train_steps=64)  # fmt: skip


def _fast(tmp_path: Any, replies: dict) -> Any:
    from actors.fast import FastAgent
    from method.agents import Agents

    agents = Agents(ScriptedModel(replies), tmp_path)
    return FastAgent(agents=agents, settings=MethodSettings(), environments=1, run_dir=tmp_path)


def test_a_learned_sub_action_named_for_no_game_step_fails_with_its_cause_not_a_crash(
    tmp_path: Any,
) -> None:
    from structlog.testing import capture_logs

    odd = SubAction("dance_party", Subtask("dance_party", goal={"health": 9}), mode="rl")
    agent = _fast(tmp_path, {})
    with capture_logs() as events:
        outcome = trio.run(agent.on_work, _work(odd), None)
    assert outcome.success_rate == 0.0 and outcome.versions == 0 and not outcome.accepted
    (failed,) = [e for e in events if e["event"] == "subaction_failed"]
    assert failed["cause"] == "unknown_subtask" and "dance_party" in failed["detail"]


def test_a_learned_sub_action_with_a_paraphrased_name_finds_its_game_step(
    tmp_path: Any,
) -> None:
    from structlog.testing import capture_logs

    # "gather logs" with a wood goal: the step is collect_wood; the (scripted) model's RL
    # config is asked for with collect_wood's coded options.
    sub = SubAction("gather_logs", Subtask("gather_logs", goal={"wood": 1}), mode="rl")
    seen: list[dict] = []

    class Recording(ScriptedModel):
        async def call(self, role: str, purpose: str, request: dict[str, Any]) -> Any:
            seen.append(request)
            raise RuntimeError("stop here: the request is what this test checks")

    agent = _fast(tmp_path, {})
    agent.agents.backend = Recording({})
    with capture_logs(), pytest.raises(RuntimeError, match="stop here"):
        trio.run(agent.on_work, _work(sub), None)
    assert "walk_to_tree" in [o["name"] for o in seen[0]["options"]]


def test_a_models_unchanged_flag_exhausts_the_code_and_the_slow_agent_moves_it_to_rl(
    tmp_path: Any,
) -> None:
    from actors.slow import SlowAgent
    from method.agents import Agents

    table = _subaction("place_table")
    agent = _fast(tmp_path, {("fast", "code"): {"code": "", "unchanged": True, "note": "stuck"}})
    outcome = trio.run(agent.on_work, _work(table), None)
    assert outcome.exhausted and outcome.versions == 0

    plan = Plan(TASK.task, 1, [_subaction("collect_wood"), table])
    request = revise_request(TASK, plan, {table.name: [outcome]}, 0.0, 1, 0)
    assert request["subactions"][1]["exhausted"] is True  # what the model decides from
    # The model answers with its own spelling of the name; the route still fires.
    change = {"subaction": "Place Table", "change": "to_rl", "reason": "code is exhausted"}
    model = ScriptedModel({("slow", "revise"): {"changes": [change], "stop": False}})
    slow = SlowAgent(agents=Agents(model, tmp_path), settings=MethodSettings(), environments=1)
    revised, redo = trio.run(slow._revise, TASK, plan, {table.name: [outcome]}, 0.0, 1, 0)
    assert [s.mode for s in revised.subactions] == ["code", "rl"] and "place_table" in redo


def test_without_a_learner_a_models_rl_stays_code_instead_of_waiting_forever(
    tmp_path: Any,
) -> None:
    """A model may put a step on RL in its plan or move it there in a revision; with no
    learner configured and no endpoint to attach one, the job would wait in the queue
    until the wall clock ends the run (seen with Qwen2.5-Coder-0.5B): the step stays
    coded, said as ``plan_mode_refused``."""
    from structlog.testing import capture_logs

    from actors.slow import SlowAgent
    from method.agents import Agents

    table = _subaction("place_table")
    plan = Plan(TASK.task, 1, [_subaction("collect_wood"), table])
    change = {"subaction": "place_table", "change": "to_rl", "reason": "try learning"}
    model = ScriptedModel({("slow", "revise"): {"changes": [change], "stop": False}})
    slow = SlowAgent(
        agents=Agents(model, tmp_path), settings=MethodSettings(), environments=1,
        can_learn=False,
    )  # fmt: skip
    coded = Stage(table.subtask, code="def run(skills): ...")
    outs = {table.name: [SubActionOutcome(table.name, "code", 0.0, False, coded, 1, reached=4)]}
    with capture_logs() as logs:
        revised, _ = trio.run(slow._revise, TASK, plan, outs, 0.0, 1, 0)
        planned = slow._plan_from(
            TASK, {"subactions": [{"name": "place_table", "mode": "rl"}]}, [], 1
        )
    assert [s.mode for s in revised.subactions] == ["code", "code"]
    assert [s.mode for s in planned.subactions] == ["code"]
    refused = [e for e in logs if e["event"] == "plan_mode_refused"]
    assert len(refused) == 2 and "learner" in refused[0]["reason"]


def test_a_coded_action_named_like_a_primitive_leaves_one_action_of_that_name() -> None:
    """Qwen2.5-Coder-0.5B chose the library's ``place_table`` option and every primitive,
    Crafter's ``place_table`` among them: the training env refused the duplicate action
    name and the job failed with a traceback. The config keeps one action per name (the
    coded one) and still builds a real training env."""
    from actors.fast import _world_actions
    from rl.rl_env import SubtaskEnv

    table = _subaction("place_table")
    offered = options_for(recipes.achievement_step("place_table"))
    actions = _world_actions()
    reply = {
        "options": ["place_table", "explore"], "primitives": [*actions, "place_table"],
        "observation": ["view", "inventory"], "max_steps": 100,
    }  # fmt: skip
    config = rl_config(table, reply, offered, actions, [])
    names = [*config.primitives, *(a.name for a in config.coded_actions)]
    assert len(names) == len(set(names)) and "place_table" in names
    assert "place_table" not in config.primitives and "move_left" in config.primitives
    env = SubtaskEnv(config, seed=0)
    assert env.action_space.n == len(names)
    env.close()


@pytest.mark.parametrize(("role", "purpose"), sorted(PURPOSES))
def test_every_prompt_starts_with_a_static_part_the_server_can_reuse(
    role: str, purpose: str
) -> None:
    """A call's system message holds nothing of its request, and its user message starts
    with the same words before it: the local server's prompt cache gives a role's calls
    that prefix back computed (`[agents] prompt_cache_mib`), so whatever varies must
    come after it."""
    prompts = PromptSet()
    requests = real_requests()[role, purpose]
    rendered = [prompts.render(role, purpose, r) for r in [*requests, {"other": [1, 2, 3]}]]
    systems = {m[0]["content"] for m in rendered}
    assert len(systems) == 1, f"{role}/{purpose}: the system message varies with the request"
    before = {m[1]["content"].split("{", 1)[0] for m in rendered}
    assert len(before) == 1 and len(before.pop()) > 10, (role, purpose)


class _ShortPlanner:
    """A planner that answers the plan request with ``first``, and a request told what
    its plan left out with ``second`` (what Qwen2.5-Coder-0.5B did: one sub-action,
    collect_wood, for a diamond, copying its example's "the recipe chain" reason)."""

    name = "scripted"

    def __init__(self, first: list[str], second: list[str]) -> None:
        self.plans = (first, second)
        self.requests: list[dict[str, Any]] = []

    async def call(self, role: str, purpose: str, request: dict[str, Any]) -> Any:
        from llm import CallResult

        self.requests.append(request)
        names = self.plans[1 if "short" in request else 0]
        steps = {s["name"]: s for s in request["steps"]}
        subs = [
            {
                "name": n,
                "description": steps[n]["description"],
                "mode": "code",
                "goal": steps[n]["goal"],
                "achievement": n,
                "max_steps": 300,
            }  # fmt: skip
            for n in names
        ]
        return CallResult(data=validate(role, purpose, {"subactions": subs, "needs": []}))


@pytest.mark.parametrize(
    ("second", "asked", "added"),
    [
        (["collect_wood", "place_table", "make_wood_pickaxe"], 2, []),
        (["collect_wood", "place_table"], 2, ["make_wood_pickaxe"]),
    ],
)
def test_a_plan_that_stops_short_of_the_target_is_asked_again_then_completed(
    tmp_path: Any, second: list[str], asked: int, added: list[str]
) -> None:
    from structlog.testing import capture_logs

    from actors.slow import SlowAgent
    from method.agents import Agents

    model = _ShortPlanner(["collect_wood"], second)
    slow = SlowAgent(agents=Agents(model, tmp_path), settings=MethodSettings(), environments=1)
    steps = recipes.describe(recipes.chain(TASK.target_item))
    with capture_logs() as logs:
        plan = trio.run(slow._first_plan, TASK, steps, [], False)
    assert [s.name for s in plan.subactions] == ["collect_wood", "place_table", "make_wood_pickaxe"]
    assert len(model.requests) == asked
    assert "left out place_table, make_wood_pickaxe" in model.requests[1]["short"]
    (short,) = [e for e in logs if e["event"] == "plan_short"]
    assert short["missing"] == ["place_table", "make_wood_pickaxe"]
    completed = [e for e in logs if e["event"] == "plan_completed"]
    assert [e["added"] for e in completed] == ([added] if added else [])
    if added:  # the added step follows the plan's last one and is coded by the backend
        (pickaxe,) = [s for s in plan.subactions if s.name == "make_wood_pickaxe"]
        assert pickaxe.depends == ["place_table"] and pickaxe.mode == "code"
        assert pickaxe.subtask.goal == {"wood_pickaxe": 1}


def test_a_plan_that_reaches_the_target_is_taken_as_it_is(tmp_path: Any) -> None:
    # Steps before the target may be grouped as the planner likes: only the target counts.
    from actors.slow import SlowAgent
    from method.agents import Agents

    model = _ShortPlanner(["collect_wood", "make_wood_pickaxe"], [])
    slow = SlowAgent(agents=Agents(model, tmp_path), settings=MethodSettings(), environments=1)
    steps = recipes.describe(recipes.chain(TASK.target_item))
    plan = trio.run(slow._first_plan, TASK, steps, [], False)
    assert [s.name for s in plan.subactions] == ["collect_wood", "make_wood_pickaxe"]
    assert len(model.requests) == 1
