"""A sub-action's shaped reward is tried on scripted transitions before training
(``rl/reward_check.py``), and the fast agent drops one that fails and tells the next
version why (``actors/fast.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog
import trio

from knowledge import recipes
from messages.plan import Critique, SubAction, WorkOn
from messages.task import Subtask
from messages.train import TrainResult
from rl.reward_check import IDLE, check_reward, check_reward_apart, transitions

WOOD = recipes.achievement_step("collect_wood")
DRINK = recipes.achievement_step("collect_drink")

# What the offline backend wrote for every step's second RL version before the check:
# items watched in the inventory, where drink and food are not (they are vitals).
INVENTORY_ONLY = (
    "def reward(before, after):\n"
    "    watched = ['wood', 'stone', 'coal', 'iron', 'diamond', 'drink', 'food']\n"
    "    gained = 0\n"
    "    for name in watched:\n"
    "        b = before['inventory'].get(name, 0)\n"
    "        a = after['inventory'].get(name, 0)\n"
    "        if a > b:\n"
    "            gained += a - b\n"
    "    return 0.1 * gained\n"
)


def test_the_transitions_are_idle_then_the_steps_own_progress() -> None:
    wood = transitions(WOOD)
    assert list(wood) == [IDLE, "gain wood", "unlock collect_wood"]
    before, after = wood["gain wood"]
    assert after["inventory"]["wood"] == before["inventory"]["wood"] + 1
    assert after["steps"] == before["steps"] + 1 and after["status"] == before["status"]
    idle_before, idle_after = wood[IDLE]
    assert {k: v for k, v in idle_after.items() if k != "steps"} == {
        k: v for k, v in idle_before.items() if k != "steps"
    }
    drink = transitions(DRINK)
    assert list(drink) == [IDLE, "unlock collect_drink", "drink +1"]
    assert drink["drink +1"][1]["status"]["drink"] == drink["drink +1"][0]["status"]["drink"] + 1
    iron_pickaxe = transitions(recipes.achievement_step("make_iron_pickaxe"))
    assert {"gain iron_pickaxe", "gain wood", "gain coal", "gain iron"} <= set(iron_pickaxe)


def test_a_reward_for_the_steps_progress_with_a_step_cost_passes() -> None:
    code = (
        "def reward(before, after):\n"
        "    got = after['inventory']['wood'] - before['inventory']['wood']\n"
        "    return 0.1 * max(0, got) - 0.001\n"
    )
    checked = check_reward(code, WOOD)
    assert checked.ok, checked.detail
    assert checked.rewards == {IDLE: -0.001, "gain wood": 0.099, "unlock collect_wood": -0.001}
    assert check_reward("", WOOD).ok  # no shaped reward: the success reward alone


def test_a_reward_that_never_fires_on_the_steps_progress_fails_naming_what_it_paid() -> None:
    checked = check_reward(INVENTORY_ONLY, DRINK)
    assert not checked.ok
    assert "never pays more for collect_drink's own progress" in checked.detail
    assert "drink +1 +0" in checked.detail
    assert check_reward(INVENTORY_ONLY, WOOD).ok  # the same code fires for wood


def test_a_reward_that_pays_for_standing_still_fails() -> None:
    code = "def reward(before, after):\n    return 0.01 + (after['steps'] - before['steps'])\n"
    checked = check_reward(code, WOOD)
    assert not checked.ok and "paid to stand still" in checked.detail
    assert checked.rewards[IDLE] == pytest.approx(1.01)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("def reward(before, after):\n    return after['no']\n", "reward(idle) failed: exception"),
        ("def reward(before, after):\n    return float('nan')\n", "not a finite number"),
        ("def reward(before, after):\n    return 'more'\n", "not a finite number"),
        ("def reward(before, after):\n    while True:\n        pass\n", "(idle) failed: timeout"),
        ("import os\ndef reward(before, after):\n    return 0\n", "does not load: forbidden"),
        ("def bonus(before, after):\n    return 1\n", "no function 'reward'"),
    ],
)
def test_a_reward_that_breaks_fails_with_its_cause(code: str, expected: str) -> None:
    checked = check_reward(code, WOOD, wall_s=0.05)
    assert not checked.ok
    assert expected in checked.detail


def test_every_reward_the_offline_backend_writes_passes() -> None:
    from llm.offline import _progress_reward

    for name in recipes.achievements():
        step = recipes.achievement_step(name)
        code = _progress_reward(step)
        checked = check_reward(code, step)
        assert checked.ok, (name, checked.detail)
        if code:  # when it writes one, it fires on the step's own progress
            assert max(v for k, v in checked.rewards.items() if k != IDLE) > 0, name
    # Creatures to defeat show no progress short of success: no shaped reward, said so.
    assert _progress_reward(recipes.achievement_step("defeat_zombie")) == ""


def test_gathering_more_than_the_recipe_uses_pays_nothing() -> None:
    from sandbox import compile_code, load

    code = _offline_reward("place_table")  # uses 2 wood
    ns = load(compile_code(code))

    def paid(before: int, after: int) -> float:
        snap = {"inventory": {"wood": before}, "status": {}, "achievements": {}, "steps": 0}
        return ns.call("reward", snap, {**snap, "inventory": {"wood": after}}, wall_s=1).value

    assert paid(0, 1) == pytest.approx(0.1) and paid(1, 2) == pytest.approx(0.1)
    assert paid(2, 3) == 0 and paid(5, 9) == 0
    assert paid(2, 0) == 0  # placing the table uses the wood: no penalty for progress


def _offline_reward(name: str) -> str:
    from llm.offline import _progress_reward

    return _progress_reward(recipes.achievement_step(name))


# ------------------------------------------------------------------ the fast agent's use
#
# A named fake around the real FastAgent's RL loop: the backend's RL replies, the learner
# (TrainResult without training) and the critic's verdict are scripted; what is under test
# is what the fast agent sends to training and tells the next version.

STILL = "def reward(before, after):\n    return 0.05\n"


class ScriptedRL:
    def __init__(self, tmp_path: Path, reward_code: str = STILL) -> None:
        from actors.fast import FastAgent
        from method.agents import Agents
        from method.settings import MethodSettings

        self.agent = FastAgent(
            agents=Agents(None, tmp_path), settings=MethodSettings(), environments=1,
            run_dir=tmp_path,
        )  # fmt: skip
        self.requests: list[dict] = []
        self.trained: list[str] = []
        policy = tmp_path / "policy.zip"
        policy.write_bytes(b"not a real policy: nothing loads it here")

        async def call(role: str, kind: str, request: dict) -> dict:
            self.requests.append(request)
            return {"options": [], "primitives": ["noop", "do"], "observation": ["inventory"],
                    "reward_code": reward_code, "max_steps": 50}  # fmt: skip

        async def train(work, config, version, cap=0) -> TrainResult:
            self.trained.append(config.reward_code)
            return TrainResult(
                name=f"job-v{version}", policy_path=str(policy), sha256="0" * 64, steps=1,
                primitive_steps=0, eval_success_rate=0.0, eval_episodes=0,
                eval_primitive_steps=0, resumed_from=0, steps_lost=0, tensorboard_dir="",
                wall_s=0.0, train_s=0.0, device="cpu", actor_id="learner-1",
            )  # fmt: skip

        async def measure(work, version, left, stage, loop, **kw) -> Critique:
            verdict = "revise" if left > 0 else "switch"
            return Critique(work.subaction.name, version, "rl", 0.0, 0.9, 4, verdict)

        self.agent.agents.call = call
        self.agent._train = train
        self.agent._measure = measure


def test_a_failing_reward_is_not_trained_on_and_the_next_version_is_told_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actors import fast

    monkeypatch.setattr(fast, "store_artifact", lambda run_dir, result: Path(result.policy_path))
    scripted = ScriptedRL(tmp_path)
    sub = SubAction("collect_wood", Subtask("collect_wood", goal={"wood": 1}), mode="rl")
    work = WorkOn(sub, seeds=[1, 2], revisions=1, train_steps=64)
    with structlog.testing.capture_logs() as logs:
        trio.run(scripted.agent._rl_loop, work, fast._InnerLoop())
    assert scripted.trained == ["", ""]  # both versions trained on the success reward only
    first, second = scripted.requests
    assert first["previous"] is None
    assert "paid to stand still" in second["previous"]["reward_check"]
    failed = [e for e in logs if e["event"] == "reward_check_failed"]
    assert [e["version"] for e in failed] == [1, 2]
    written = [e for e in logs if e["event"] == "rl_config_written"]
    assert all(not e["shaped_reward"] and "stand still" in e["reward_check"] for e in written)


def test_a_passing_reward_is_trained_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from actors import fast

    monkeypatch.setattr(fast, "store_artifact", lambda run_dir, result: Path(result.policy_path))
    good = _offline_reward("collect_wood")
    scripted = ScriptedRL(tmp_path, good)
    sub = SubAction("collect_wood", Subtask("collect_wood", goal={"wood": 1}), mode="rl")
    work = WorkOn(sub, seeds=[1], revisions=0, train_steps=64)
    with structlog.testing.capture_logs() as logs:
        trio.run(scripted.agent._rl_loop, work, fast._InnerLoop())
    assert scripted.trained == [good]
    assert not [e for e in logs if e["event"] == "reward_check_failed"]


# Reward code that kills the process it runs in: iterating 150k nested maps recurses
# through them in C, past the C stack (SIGSEGV); the chain is built at load (1 s budget).
CRASHING_REWARD = """
CHAIN = [0]
for i in range(150_000):
    CHAIN = map(abs, CHAIN)

def reward(before, after):
    return len(tuple(CHAIN))
"""


def test_reward_code_that_crashes_its_process_fails_the_check_and_the_asker_goes_on() -> None:
    # The fast agent runs in the head: the check runs in a child, so the crash is the
    # check's failure with its cause, and this process (the head's stand-in) carries on.
    checked = check_reward_apart(CRASHING_REWARD, WOOD)
    assert not checked.ok
    assert checked.detail == (
        "reward_code crashed the process that checked it: it was killed by SIGSEGV"
    )
    honest = (
        "def reward(before, after):\n"
        "    return after['inventory']['wood'] - before['inventory']['wood']\n"
    )
    assert check_reward_apart(honest, WOOD) == check_reward(honest, WOOD)
    assert check_reward_apart(INVENTORY_ONLY, DRINK) == check_reward(INVENTORY_ONLY, DRINK)
