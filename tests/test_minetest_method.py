"""The method in Minetest: ``[task] world = "minetest"``, the plan from the game's own
rules, the steps' tests, and a whole run of ``minetest-diamond.toml`` through ``run.py``
on real ``minetestserver`` processes (skipped with the install command where Minetest is
missing, failed under CI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import need_minetest

from knowledge import recipes
from messages.task import Subtask
from method import games
from method.settings import load as load_settings
from runtime.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "rlgpt" / "configs" / "minetest-diamond.toml"


def test_a_goal_key_may_name_alternatives_whose_counts_add_up() -> None:
    trunks = Subtask("obtain_tree", goal={"default:tree|default:pine_tree": 4})
    assert trunks.met({"default:tree": 1, "default:pine_tree": 3}, {})
    assert not trunks.met({"default:tree": 3}, {})
    assert not trunks.met({"default:pine_tree": 3, "default:wood": 9}, {})
    # The same test as policy source (setup code runs it over the skill API).
    source = trunks.met_source("s")

    class Skills:
        def __init__(self, inventory: dict[str, int]) -> None:
            self.held = inventory

        def inventory(self) -> dict[str, int]:
            return self.held

    for inventory, want in (({"default:pine_tree": 4}, True), ({"default:tree": 2}, False)):
        assert eval(source, {"s": Skills(inventory)}) is want
    # A plain key reads as before.
    assert Subtask("w", goal={"wood": 2}).met_source("s") == "(s.inventory().get('wood', 0) >= 2)"


def test_crafter_plans_from_its_recipe_data_as_before() -> None:
    assert games.plan_steps("crafter", "diamond") == recipes.chain("diamond")
    assert games.plan_steps("crafter", "achievements") == recipes.curriculum()


def test_the_minetest_plan_is_the_chain_from_the_games_own_recipes() -> None:
    need_minetest()
    steps = games.plan_steps("minetest", "diamond")
    assert [s.name for s in steps] == [
        "obtain_tree", "obtain_wood", "obtain_stick", "obtain_pick_wood", "obtain_cobble",
        "obtain_pick_stone", "obtain_furnace", "obtain_coal_lump", "obtain_iron_lump",
        "obtain_steel_ingot", "obtain_pick_steel", "obtain_diamond",
    ]  # fmt: skip
    by = {s.name: s for s in steps}
    # Tested by the inventory, never by the achievement that holds at the first trunk.
    assert all(not s.achievement and s.goal for s in steps)
    assert by["obtain_tree"].goal == {"default:tree|default:pine_tree": 4}
    assert by["obtain_diamond"].goal == {"default:diamond": 1}
    # Read from the server's recipes: steel is smelted from a lump, a pickaxe crafted
    # from sticks and planks, the diamond dug from its ore at the depths mapgen uses.
    assert by["obtain_steel_ingot"].kind == "smelt"
    assert "default:iron_lump" in by["obtain_steel_ingot"].description
    assert "group:stick" in by["obtain_pick_wood"].description
    assert "default:stone_with_diamond" in by["obtain_diamond"].description
    assert "-255..-128" in by["obtain_diamond"].description
    assert [s.depends for s in steps[1:]] == [(s.name,) for s in steps[:-1]]
    # A shorter target is a prefix of the chain.
    assert [s.name for s in games.plan_steps("minetest", "pick_stone")][-1] == "obtain_pick_stone"


def _config(tmp_path: Path, task: str, extra: str = "") -> Path:
    path = tmp_path / "run.toml"
    path.write_text(f'[run]\nname = "t"\nruns_dir = "{tmp_path}"\n\n[task]\n{task}\n{extra}')
    return path


@pytest.mark.parametrize(
    ("task", "key", "says"),
    [
        ('world = "minecraft"', "task.world", "crafter"),
        ('world = "minetest"\ntarget = "emerald"', "task.target", "pick_steel"),
        ('world = "minetest"\nlearn = ["obtain_wod"]', "task.learn[0]", "obtain_wood"),
        (
            'world = "minetest"\n[agents]\noffline_first = "simplest"',
            "agents.offline_first",
            "one version of each step",
        ),
        (
            'world = "minetest"\n[agents]\noffline_revise = "every"',
            "agents.offline_revise",
            "would do nothing",
        ),
    ],
)
def test_a_bad_minetest_setting_names_its_key_and_the_fix(
    tmp_path: Path, task: str, key: str, says: str
) -> None:
    if "minecraft" not in task:
        need_minetest()
    with pytest.raises(ConfigError) as caught:
        load_settings(_config(tmp_path, task))
    assert caught.value.key == key
    assert says in str(caught.value)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a run with a PPO job, a replay and a paired check: ~5 min
def test_minetest_diamond_toml_runs_the_method_in_the_3d_world(tmp_path: Path) -> None:
    """The shipped config, cut to the chain's first six steps, a few worlds and a tiny
    PPO job: the slow agent plans from the game's recipes, every step's code runs in the
    sandbox over the 3-D skills on real servers, a learner trains the tree search over
    coded 3-D options on servers of its own, the learned version plays composed episodes
    against the code, and the final policy composes the steps kept."""
    need_minetest()
    text = CONFIG.read_text()
    for old, new in (
        ('target = "diamond"', 'target = "pick_stone"'),
        ("code_episodes = 10", "code_episodes = 2"),
        ("eval_episodes = 50", "eval_episodes = 3"),
        ("iterations = 2", "iterations = 1"),
        ("train_steps = 4096", "train_steps = 32"),
        ("decide_episodes = 40", "decide_episodes = 2"),
        ("[actors.learner]", "[training.ppo]\nn_steps = 16\nbatch_size = 16\n\n[actors.learner]"),
        ('name = "minetest-diamond"', f'name = "mt"\nruns_dir = "{tmp_path}"'),
    ):
        assert old in text, old
        text = text.replace(old, new)
    config = tmp_path / "mt.toml"
    config.write_text(text)
    done = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "--config", str(config), "--quiet"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and p.name.startswith("mt-")]
    summary = json.loads((run_dir / "summary.json").read_text())
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    plan = next(e for e in events if e["event"] == "plan_made")
    assert plan["subactions"] == ["obtain_tree:rl"] + [
        f"obtain_{name}:code" for name in ("wood", "stick", "pick_wood", "cobble", "pick_stone")
    ]
    finished = [e for e in events if e["event"] == "evaluation_finished"]
    assert {e["subaction"] for e in finished} >= {"obtain_tree", "obtain_pick_stone"}
    kinds = {(e["subaction"], e["kind"]) for e in finished}
    # The tree search: its code first, then PPO over the 3-D options on the learner,
    # the learned version played in composed episodes and compared with the code.
    assert {("obtain_tree", "coded"), ("obtain_tree", "learned")} <= kinds
    trained = [e for e in events if e["event"] == "training_result"]
    assert [e["job"] for e in trained] == ["obtain_tree-it1-v1"]
    assert trained[0]["decisions"] >= 32 and trained[0]["world_steps"] > 0
    assert any(e["event"] == "incumbent_compared" for e in events)
    assert summary["env_steps"] >= trained[0]["world_steps"]
    # The bundle replays in the 3-D world it was played in: the same final episodes.
    records = tmp_path / "replay.jsonl"
    replay = [sys.executable, str(ROOT / "run.py"), "play", str(run_dir), "--episodes", "2"]
    done = subprocess.run(
        [*replay, "--records", str(records)], cwd=tmp_path, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    replayed = [json.loads(line) for line in records.read_text().splitlines()]
    assert [r["recorded"] for r in replayed] == ["same", "same"], replayed
    # The learned tree search the run trained (and did not keep: its code was as good on
    # the code worlds) checked against the code, paired, on two confirm worlds.
    assert (run_dir / "code" / "obtain_tree-it1-v1.rl.json").is_file()
    out = tmp_path / "confirm.json"
    confirm = [sys.executable, str(ROOT / "benchmarks" / "bench_confirm.py"), str(run_dir)]
    args = ["--job", "obtain_tree-it1-v1", "--through", "--worlds", "2", "--jobs", "1"]
    done = subprocess.run(
        [*confirm, *args, "--json", str(out)], cwd=tmp_path, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["stage"] == "obtain_tree" and row["pairs"] == 2
    assert summary["final_episodes"] == 3
    # Every env step is counted: the steps the ledger booked are the ones the runs took.
    assert summary["env_steps"] > 0
    assert set(summary["final_achievements"]) <= set(games.achievements("minetest"))
    assert summary["final_success"] > 0, summary


def test_a_models_prompts_for_minetest_teach_the_3d_skill_api_and_the_games_actions() -> None:
    """The fast agent's prompt in Minetest: the game's name, every public method of the
    3-D skills with its docstring, every action the world takes, and a worked example
    whose code the sandbox accepts; Crafter's prompts keep their text."""
    import sandbox
    from llm.prompts import PromptSet, skill_names
    from worlds.minetest.world import CRAFT_ITEMS, MOVES, PLACE_ITEMS, SMELT_ITEMS, short

    prompts = PromptSet(world="minetest")
    system = prompts.render("fast", "code", {"subaction": {"name": "obtain_stick"}})[0]["content"]
    assert "the game Minetest" in system and "Crafter" not in system
    for name in skill_names("minetest"):
        assert f"skills.{name}(" in system, name
    assert "skills.mine(item, n=1, level=None, patience=300)" in system
    actions = [*MOVES] + [f"{verb}_{short(i)}" for verb, items in
               (("place", PLACE_ITEMS), ("craft", CRAFT_ITEMS), ("smelt", SMELT_ITEMS))
               for i in items]  # fmt: skip
    text = " ".join(system.split())
    for action in actions:
        assert f" {action}," in text or f" {action}." in text, action
    example = json.loads(system.split("Example reply:", 1)[1].split("=== user", 1)[0])
    sandbox.compile_code(example["code"])
    plan = prompts.render("slow", "plan", {})[0]["content"]
    assert '"default:pick_wood"' in plan and "place_table" not in plan
    crafter = PromptSet().render("fast", "code", {})[0]["content"]
    assert "the game Crafter" in crafter and "skills.mine(" not in crafter


def test_a_models_minetest_plan_is_checked_against_minetests_names() -> None:
    """Under the game's contracts a plan names Minetest's items and achievements (a short
    or spaced name normalised to the full one); Crafter's names are refused there, and
    Minetest's under Crafter's contracts."""
    from llm.contracts import game, json_schemas, validate
    from llm.errors import ContractError

    sub = {"name": "obtain_tree", "description": "", "mode": "code", "depends": [],
           "goal": {"tree|Pine Tree": 2}, "achievement": "obtain default:tree",
           "max_steps": 3000}  # fmt: skip
    with game("minetest"):
        clean = validate("slow", "plan", {"subactions": [sub], "needs": []})
        assert clean["subactions"][0]["goal"] == {"default:tree|default:pine_tree": 2}
        assert clean["subactions"][0]["achievement"] == "obtain_tree"
        with pytest.raises(ContractError, match="expected an item of the game"):
            validate("slow", "plan", {"subactions": [{**sub, "goal": {"wood_pickaxe": 1}}]})
    with pytest.raises(ContractError, match="expected an item of the game"):
        validate("slow", "plan", {"subactions": [sub]})
    enum = json_schemas("minetest")["slow", "plan"]["properties"]["subactions"]["items"]
    assert "obtain_diamond" in enum["properties"]["achievement"]["enum"]


def test_the_shipped_config_caps_an_episode_at_the_chains_budget() -> None:
    """``minetest-diamond.toml``'s final episodes get what the chain's steps may take
    together (the benchmark's chain budget), not Crafter's 10,000."""
    from worlds.minetest import templates

    need_minetest()
    settings = load_settings(str(CONFIG))
    assert settings.task.world == "minetest"
    assert settings.task.episode_steps == templates.CHAIN_BUDGET
    steps = games.plan_steps("minetest", settings.task.target)
    assert sum(s.max_steps for s in steps) == templates.CHAIN_BUDGET
