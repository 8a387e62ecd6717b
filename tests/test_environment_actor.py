"""Environment actors as real processes: coded policies, hostile code, traces, stats."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import trio
from helpers import make_settings, run_head_with, wood_policy

from episodes.runner import Runner, RunnerFailed
from messages.rollout import RolloutRequest, RolloutResult
from messages.task import Stage, Subtask
from method.split import rollout_split, whole_parts
from runtime.config import ActorSettings
from runtime.head import Head
from skills.policies import COLLECT_WOOD_SOURCE, PLACE_TABLE_SOURCE

WOOD = Subtask("collect_wood", goal={"wood": 1}, max_steps=500)
TABLE = Subtask("place_table", achievement="place_table", max_steps=500)
FRESH_SEEDS = list(range(5000, 5010))  # never used by the policies' own tests


def _run(tmp_path: Path, driver, count: int = 1, heartbeat_timeout: float = 10.0):
    settings = make_settings(
        tmp_path, {"environment": ActorSettings(count=count)}, heartbeat_timeout=heartbeat_timeout
    )

    async def wrapped(head: Head) -> dict:
        await head.wait_for("environment", count)
        return await driver(head)

    run = run_head_with(settings, wrapped)
    assert run.code == 0, [e for e in run.events if e["level"] == "error"]
    return run


def test_coded_wood_and_table_policies_succeed_on_fresh_seeds(tmp_path: Path) -> None:
    results: dict[str, RolloutResult] = {}

    async def driver(head: Head) -> dict:
        for subtask, code in ((WOOD, COLLECT_WOOD_SOURCE), (TABLE, PLACE_TABLE_SOURCE)):
            req = RolloutRequest(subtask, code=code, seeds=FRESH_SEEDS, wall_s=30)
            results[subtask.name] = await head.client.ask("@environment", req, timeout=300)
        return {name: r.success_rate for name, r in results.items()}

    run = _run(tmp_path, driver)
    print("success rates on fresh seeds:", run.report)
    for name in ("collect_wood", "place_table"):
        result = results[name]
        assert len(result.episodes) == len(FRESH_SEEDS)
        assert result.success_rate >= 0.7, (name, [e.cause for e in result.episodes])
        assert result.steps == sum(e.steps for e in result.episodes) > 0
    wood = results["collect_wood"].episodes[0]
    if wood.success:
        assert wood.cause == "success"
        assert "collect_wood" in wood.achievements
        # The trace tells the critic what happened around the high-level action.
        (segment,) = wood.trace
        assert segment.action == "collect('tree', 1)"
        assert segment.before.inventory.get("wood", 0) == 0
        assert segment.after.inventory.get("wood", 0) >= 1
        assert segment.steps == segment.after.step - segment.before.step
    # Per-episode stats in Crafter's Recorder format, one line per episode.
    lines = (run.run_dir / "rollouts" / "stats.jsonl").read_text().splitlines()
    assert len(lines) == 2 * len(FRESH_SEEDS)
    first = json.loads(lines[0])
    assert {"length", "reward", "achievement_collect_wood"} <= set(first)


HOSTILE = {
    "import_os": ("import os\ndef run(skills):\n    yield 'noop'\n", "forbidden"),
    "open_file": ("def run(skills):\n    open('/tmp/x', 'w')\n    yield 'noop'\n", "forbidden"),
    "dunder_walk": (
        "def run(skills):\n    x = ().__class__.__base__.__subclasses__()\n    yield 'noop'\n",
        "forbidden",
    ),
    "syntax": ("def run(skills)\n    yield 'noop'\n", "syntax"),
    "spin_no_yield": (
        "def run(skills):\n    while True:\n        pass\n    yield 'noop'\n",
        "timeout",
    ),
    "huge_alloc": ("def run(skills):\n    x = 'a' * (10 ** 11)\n    yield 'noop'\n", "memory"),
    "recursion": (
        "def f(n):\n    return f(n + 1)\ndef run(skills):\n    f(0)\n    yield 1\n",
        "recursion",
    ),
    "invalid_action": ("def run(skills):\n    yield 'teleport'\n", "invalid_action"),
    "reach_world": ("def run(skills):\n    w = skills._world\n    yield 'noop'\n", "forbidden"),
    "raises": ("def run(skills):\n    yield 'noop'\n    raise ValueError('boom')\n", "exception"),
    "idle_forever": ("def run(skills):\n    while True:\n        yield 'noop'\n", "step_budget"),
}


def test_hostile_code_fails_with_its_cause_and_the_actor_keeps_serving(tmp_path: Path) -> None:
    canary = tmp_path / "canary.txt"
    canary.write_text("untouched")
    outcomes: dict[str, RolloutResult] = {}
    short = Subtask("hostile", goal={"diamond": 1}, max_steps=50)

    async def driver(head: Head) -> dict:
        for name, (code, _) in HOSTILE.items():
            req = RolloutRequest(short, code=code, seeds=[1], wall_s=3)
            outcomes[name] = await head.client.ask("@environment", req, timeout=120)
        (env_actor,) = [a for a in head.broker.status().actors if a.role == "environment"]
        outcomes["limits"] = Path(f"/proc/{env_actor.pid}/limits").read_text()
        (runner,) = _runner_pids(env_actor.pid)
        outcomes["runner_limits"] = Path(f"/proc/{runner}/limits").read_text()
        # ...and the same actor still does honest work.
        req = RolloutRequest(WOOD, code=COLLECT_WOOD_SOURCE, seeds=[7], wall_s=30)
        outcomes["after"] = await head.client.ask("@environment", req, timeout=120)
        return {}

    run = _run(tmp_path, driver)
    for name, (_, cause) in HOSTILE.items():
        (episode,) = outcomes[name].episodes
        assert not episode.success
        assert episode.cause == cause, (name, episode.cause, episode.detail)
    assert outcomes["syntax"].episodes[0].line == 1
    assert outcomes["after"].success_rate == 1.0
    assert canary.read_text() == "untouched"
    # The OS-level backstop under the sandbox: the actor's address space is capped.
    (line,) = [x for x in outcomes["limits"].splitlines() if x.startswith("Max address space")]
    assert line.split()[3] == str(2 * 1024**3), line
    # ...and the runner's, where the policy code ran, has its own cap and no core dumps.
    runner_limits = outcomes["runner_limits"].splitlines()
    (line,) = [x for x in runner_limits if x.startswith("Max address space")]
    assert line.split()[3] == str(2 * 1024**3), line
    (line,) = [x for x in runner_limits if x.startswith("Max core file size")]
    assert line.split()[4] == "0", line
    assert not Path("/tmp/x").exists()
    crashed = [e for e in run.named("actor_process_exited") if e["level"] != "info"]
    assert not crashed  # nothing hostile cost a process (info: the clean exit at the end)


def test_two_actors_split_a_rollout_and_frames_come_back(tmp_path: Path) -> None:
    actors = 2
    seen: dict = {}

    async def driver(head: Head) -> dict:
        req = RolloutRequest(WOOD, code=COLLECT_WOOD_SOURCE, seeds=list(range(20, 26)), wall_s=30)
        seen["split"] = await rollout_split(head.client, req, parts=actors)
        # Whole episodes in parts of about 3: the same episodes as in one part.
        nine = RolloutRequest(WOOD, code=COLLECT_WOOD_SOURCE, seeds=list(range(30, 39)), wall_s=30)
        seen["fine"] = await rollout_split(head.client, nine, whole_parts(actors, 9))
        seen["one"] = await rollout_split(head.client, nine, 1)
        framed = RolloutRequest(WOOD, code=COLLECT_WOOD_SOURCE, seeds=[3], frames=True)
        seen["framed"] = await head.client.ask("@environment", framed, timeout=120)
        return {}

    _run(tmp_path, driver, count=actors)
    split = seen["split"]
    assert [e.seed for e in split.episodes] == list(range(20, 26))
    assert len(split.actor_id.split(",")) == 2  # both actors took a share
    assert whole_parts(actors, 9) == 3
    fine, one = seen["fine"], seen["one"]
    assert [e.seed for e in fine.episodes] == list(range(30, 39))
    assert [(e.seed, e.steps, e.success, e.achievements) for e in fine.episodes] == [
        (e.seed, e.steps, e.success, e.achievements) for e in one.episodes
    ]
    framed = seen["framed"]
    frames = np.load(io.BytesIO(framed.frames))["frames"]
    assert frames.dtype == np.uint8 and frames.shape[1:] == (64, 64, 3)
    assert len(frames) == framed.episodes[0].steps + 1  # the reset frame, then one per step


def _runner_pids(actor_pid: int) -> list[int]:
    """The environment actor's runner: its child processes (started from any thread)."""
    tasks = Path(f"/proc/{actor_pid}/task").iterdir()
    return sorted(int(pid) for task in tasks for pid in (task / "children").read_text().split())


def _env_pid(head: Head) -> int:
    (env_actor,) = [a for a in head.broker.status().actors if a.role == "environment"]
    return env_actor.pid


def _no_actor_lost(run) -> None:
    """The actor process lived through it all: no death, no missed heartbeat."""
    assert not [e for e in run.named("actor_process_exited") if e["level"] != "info"]
    assert not run.named("actor_lost") or all(
        e["reason"] == "exit status 0" for e in run.named("actor_lost")
    )


def test_a_runner_that_segfaults_fails_its_batch_as_crashed_and_the_same_actor_serves_on(
    tmp_path: Path, monkeypatch
) -> None:
    # Test-only fault injection (episodes/runner.py): the runner sends itself SIGSEGV at the
    # start of seed 81_002's episode, as a C stack overflow in policy code would.
    monkeypatch.setenv("RLGPT_FAULT_INJECT", "segv seed=81002")
    seen: dict = {}

    async def driver(head: Head) -> dict:
        seen["pid"] = _env_pid(head)
        seen["runner"] = _runner_pids(seen["pid"])
        poisoned = RolloutRequest(
            WOOD, code=COLLECT_WOOD_SOURCE, seeds=[81_001, 81_002, 81_003], wall_s=30
        )
        seen["crashed"] = await head.client.ask("@environment", poisoned, timeout=120)
        honest = RolloutRequest(WOOD, code=COLLECT_WOOD_SOURCE, seeds=[7], wall_s=30)
        seen["after"] = await head.client.ask("@environment", honest, timeout=120)
        seen["pid_after"] = _env_pid(head)
        seen["runner_after"] = _runner_pids(seen["pid_after"])
        return {}

    run = _run(tmp_path, driver)
    first, crashed, not_run = seen["crashed"].episodes
    # The episode finished before the crash keeps its report...
    assert first.seed == 81_001 and first.cause == "success", (first.cause, first.detail)
    # ...the one running gets the signal, the rest of the batch is not run.
    assert crashed.cause == "crashed" and "SIGSEGV" in crashed.detail, crashed.detail
    assert not_run.cause == "crashed"
    assert "not run: the version crashed the runner at seed 81002" in not_run.detail
    assert seen["crashed"].steps == first.steps
    # The same actor process answered the next request, through a fresh runner.
    assert seen["pid_after"] == seen["pid"]
    assert seen["runner_after"] != seen["runner"]
    assert seen["after"].success_rate == 1.0
    assert run.named("rollout_crashed")
    _no_actor_lost(run)
    # One stats row per finished episode: the first request's first, then the next one.
    lines = (run.run_dir / "rollouts" / "stats.jsonl").read_text().splitlines()
    assert len(lines) == 2


def test_a_runner_stuck_in_one_c_call_is_killed_as_stalled_and_the_actor_keeps_heartbeating(
    tmp_path: Path, monkeypatch
) -> None:
    # Test-only fault injection: one regular-expression match that backtracks without
    # end, a C call that holds the GIL. A 2 s heartbeat timeout: an actor running it in
    # its own process would be declared dead long before the watch answers.
    monkeypatch.setenv("RLGPT_FAULT_INJECT", "stall seed=81001")
    monkeypatch.setenv("RLGPT_WATCHDOG_GRACE_S", "1")
    seen: dict = {}
    wall_s, seeds = 1.0, [81_001, 81_002]

    async def driver(head: Head) -> dict:
        seen["pid"] = _env_pid(head)
        stuck = RolloutRequest(WOOD, code=COLLECT_WOOD_SOURCE, seeds=seeds, wall_s=wall_s)
        started = trio.current_time()
        seen["stalled"] = await head.client.ask("@environment", stuck, timeout=120)
        seen["took"] = trio.current_time() - started
        honest = RolloutRequest(WOOD, code=COLLECT_WOOD_SOURCE, seeds=[7], wall_s=30)
        seen["after"] = await head.client.ask("@environment", honest, timeout=120)
        seen["pid_after"] = _env_pid(head)
        return {}

    run = _run(tmp_path, driver, heartbeat_timeout=2.0)
    stuck, not_run = seen["stalled"].episodes
    assert stuck.cause == "stalled", stuck.detail
    assert "the episode's budget of 1 s + 1 s grace" in stuck.detail, stuck.detail
    assert not_run.cause == "stalled" and "not run: the version stalled" in not_run.detail
    # Answered at the episode's budget plus grace (2 s), not at a heartbeat timeout.
    assert 2.0 <= seen["took"] < 2.0 + 5.0, seen["took"]
    assert seen["pid_after"] == seen["pid"]
    assert seen["after"].success_rate == 1.0
    assert run.named("rollout_stalled")
    _no_actor_lost(run)


def test_a_runner_killed_while_idle_is_replaced_before_the_next_request_runs(
    tmp_path: Path,
) -> None:
    seen: dict = {}

    async def driver(head: Head) -> dict:
        seen["pid"] = _env_pid(head)
        (runner,) = _runner_pids(seen["pid"])
        os.kill(runner, signal.SIGKILL)  # from outside, between requests
        stat = Path(f"/proc/{runner}/stat")
        with trio.fail_after(10):  # dead (a zombie until the actor reaps it)
            while stat.exists() and stat.read_text().split(") ")[-1][0] != "Z":
                await trio.sleep(0.01)
        honest = RolloutRequest(WOOD, code=COLLECT_WOOD_SOURCE, seeds=[7], wall_s=30)
        seen["after"] = await head.client.ask("@environment", honest, timeout=120)
        seen["pid_after"] = _env_pid(head)
        return {}

    run = _run(tmp_path, driver)
    # Not the request's fault: it runs in a fresh runner and succeeds.
    assert seen["after"].episodes[0].cause == "success", seen["after"].episodes[0].detail
    assert seen["pid_after"] == seen["pid"]
    _no_actor_lost(run)


def test_a_batch_past_its_budget_says_stalled_and_the_same_actor_serves_on(
    tmp_path: Path, monkeypatch
) -> None:
    # No grace and a 1 ms budget per episode: building a fresh world (~0.1 s) alone
    # outlasts it, as a policy stuck in one long C call would. No fault injected.
    monkeypatch.setenv("RLGPT_WATCHDOG_GRACE_S", "0")
    seen: dict = {}

    async def driver(head: Head) -> dict:
        seen["pid"] = _env_pid(head)
        stuck = RolloutRequest(WOOD, code=COLLECT_WOOD_SOURCE, seeds=[81_001, 81_002], wall_s=0.001)
        seen["stuck"] = await head.client.ask("@environment", stuck, timeout=120)
        honest = RolloutRequest(WOOD, code=COLLECT_WOOD_SOURCE, seeds=[7], wall_s=30)
        seen["after"] = await head.client.ask("@environment", honest, timeout=120)
        seen["pid_after"] = _env_pid(head)
        return {}

    run = _run(tmp_path, driver)
    assert [e.cause for e in seen["stuck"].episodes] == ["stalled", "stalled"]
    assert run.named("rollout_stalled")
    assert seen["pid_after"] == seen["pid"]  # no process replaced: the runner was
    assert seen["after"].success_rate == 1.0
    _no_actor_lost(run)


def test_a_second_request_with_the_same_code_does_not_compile_again(tmp_path: Path) -> None:
    """Stage code is compiled once per actor process (by sha256): the same code or the
    same stages again come from the cache, a different code is compiled."""
    short = Subtask("collect_wood", goal={"wood": 1}, max_steps=30)
    stages = [
        Stage(short, code=COLLECT_WOOD_SOURCE),
        Stage(TABLE, code=PLACE_TABLE_SOURCE),
    ]

    async def driver(head: Head) -> dict:
        requests = [
            RolloutRequest(short, code=COLLECT_WOOD_SOURCE, seeds=[5000], wall_s=30),
            RolloutRequest(short, code=COLLECT_WOOD_SOURCE, seeds=[5001], wall_s=30),
            RolloutRequest(short, code=PLACE_TABLE_SOURCE, seeds=[5000], wall_s=30),
            RolloutRequest(TABLE, stages=stages, seeds=[5000], wall_s=30),
            RolloutRequest(TABLE, stages=stages, seeds=[5001], wall_s=30),
        ]
        for req in requests:
            await head.client.ask("@environment", req, timeout=120)
        return {}

    run = _run(tmp_path, driver)
    counts = [(e["compiled"], e["compile_hits"]) for e in run.named("rollout_finished")]
    # The stages' filenames name their subtasks: "<collect_wood>" was compiled for the
    # first request, "<place_table>" is new (the same source under another name).
    assert counts == [(1, 0), (0, 1), (1, 0), (1, 1), (0, 2)]


def test_an_environment_actor_runs_learned_policies_on_one_torch_thread(tmp_path: Path) -> None:
    """The thread limit is set at the actor process's start; the actor measures
    torch.get_num_threads() once a learned policy brought torch in."""
    from rl.artifacts import sha256_of
    from rl.configs import collect_wood_with_coded

    config = collect_wood_with_coded()
    policy = wood_policy(tmp_path / "wood.zip")
    seen: dict = {}

    async def driver(head: Head) -> dict:
        stored = head.run_dir / "policies" / policy.name
        stored.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(policy, stored)
        req = RolloutRequest(
            WOOD,
            policy_path=str(stored),
            policy_sha256=sha256_of(stored),
            config=config,
            seeds=[5000],
            wall_s=30,
        )
        seen["result"] = await head.client.ask("@environment", req, timeout=120)
        return {}

    run = _run(tmp_path, driver)
    assert seen["result"].episodes[0].steps > 0
    (limits,) = [e for e in run.named("process_limits") if e["role"] == "environment"]
    assert limits["torch_threads"] == 1
    (finished,) = run.named("rollout_finished")
    assert finished["torch_threads"] == 1  # measured in the actor, with torch loaded


def test_a_runner_cancelled_while_it_warms_up_does_not_outlive_it(tmp_path: Path) -> None:
    # The warm-up compiles the world generator (seconds): cancelled meanwhile (the actor
    # stopping during setup), the runner process is killed, not left behind.
    seen: dict = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            runner = Runner(tmp_path, nursery)
            with trio.move_on_after(0.3) as scope:
                await runner.start()
            seen["cancelled"] = scope.cancelled_caught
            seen["proc"] = runner.proc

    trio.run(main)
    assert seen["cancelled"], "the warm-up finished within 0.3 s: nothing was tested"
    proc = seen["proc"]
    assert proc is not None and proc.returncode is not None  # killed and reaped
    assert not Path(f"/proc/{proc.pid}").exists()


def test_a_runner_that_cannot_be_started_fails_its_batch_with_the_reason(
    tmp_path: Path, monkeypatch
) -> None:
    # No interpreter where the runner's command names one (a broken venv, a full process
    # table): a runner failure the actor reports, not an OSError that kills the actor.
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python-here"))
    failures: list[str] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            runner = Runner(tmp_path, nursery)
            for _ in range(2):  # the start, then a batch's wait_ready trying again
                try:
                    await (runner.start() if not failures else runner.wait_ready())
                except RunnerFailed as exc:
                    failures.append(str(exc))

    trio.run(main)
    assert len(failures) == 2
    assert all("could not be started" in f and "no-python-here" in f for f in failures)


def test_a_runner_exits_as_its_pipe_closes_without_the_interpreters_teardown(
    tmp_path: Path, monkeypatch
) -> None:
    # A teardown of 5 s (an atexit hook from a sitecustomize the runner imports), as torch
    # and a full start cache made it: the runner must skip it, so that the actor's close
    # neither waits for it nor ends by killing the runner.
    (tmp_path / "sitecustomize.py").write_text(
        "import atexit, time\natexit.register(time.sleep, 5)\n"
    )
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), path) if p))
    seen: dict = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            runner = Runner(tmp_path, nursery)
            await runner.start()
            started = trio.current_time()
            await runner.close()
            seen["close_s"] = trio.current_time() - started
            seen["code"] = runner.proc.returncode

    trio.run(main)
    assert seen["code"] == 0  # it exited: not killed at the end of close's wait
    assert seen["close_s"] < 1.5


# What a runner under its address-space cap does, run in a fresh interpreter (no torch in
# yet): the cap leaves 256 MiB above what the warmed runner maps, less than torch's own
# libraries take (~480 MiB of address space for the CPU build here, gigabytes for a CUDA
# build), then a learned policy is evaluated.
_CAPPED_RUNNER = """
import json, resource, sys
from pathlib import Path
from rl.configs import collect_wood_with_coded
from episodes.runner import Rollouts, mapped_bytes
from messages.rollout import RolloutRequest
from messages.task import Subtask

run_dir, policy, sha = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
rollouts = Rollouts(run_dir)
rollouts.warm()
assert "torch" not in sys.modules, "the runner imported torch before a learned policy"
_, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (mapped_bytes() + 256 * 1024**2, hard))
req = RolloutRequest(
    Subtask("collect_wood", goal={"wood": 1}, max_steps=200),
    policy_path=policy, policy_sha256=sha, config=collect_wood_with_coded(),
    seeds=[5000, 5001], wall_s=60,
)
episodes = []
rollouts.run(req, episodes.append)
print(json.dumps([[e.report.cause, e.report.steps, e.report.detail[:300]] for e in episodes]))
"""


def test_a_learned_policy_loads_in_a_runner_whose_cap_leaves_less_room_than_torch_maps(
    tmp_path: Path,
) -> None:
    """On a GPU machine every learned stage was ``policy_unusable`` in evaluation: torch
    (a CUDA build maps gigabytes) was first imported under the runner's 2 GiB cap. The
    same failure with the CPU build: a cap with less room than torch's libraries take."""
    import subprocess

    from rl.artifacts import sha256_of

    policy = wood_policy(tmp_path / "wood.zip")
    done = subprocess.run(
        [sys.executable, "-c", _CAPPED_RUNNER, str(tmp_path), str(policy), sha256_of(policy)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    episodes = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(episodes) == 2
    for cause, steps, detail in episodes:
        assert cause != "policy_unusable", detail
        assert steps > 0, (cause, detail)


def test_a_learned_policy_plays_a_world_alike_whatever_part_holds_it(tmp_path: Path) -> None:
    """A request split into parts (over environment actors, or differently the next
    time) plays each world's episode the same: its actions are sampled from a seed of
    the world's own, not from where the world falls in the part."""
    from episodes.runner import Rollouts
    from rl.artifacts import sha256_of
    from rl.configs import collect_wood_with_coded

    policy = wood_policy(tmp_path / "wood.zip")
    rollouts = Rollouts(tmp_path)

    def play(seeds: list[int]) -> dict[int, tuple]:
        req = RolloutRequest(
            Subtask("collect_wood", goal={"wood": 1}, max_steps=60),
            policy_path=str(policy), policy_sha256=sha256_of(policy),
            config=collect_wood_with_coded(), seeds=seeds, wall_s=60,
        )  # fmt: skip
        episodes: list = []
        rollouts.run(req, episodes.append)
        return {
            e.report.seed: (e.report.steps, e.report.success, e.report.detail) for e in episodes
        }

    whole = play([5000, 5001, 5002, 5003])
    parts = {**play([5003, 5001]), **play([5002]), **play([5000])}
    assert whole == parts
    assert len({detail for _, _, detail in whole.values()}) > 1  # the episodes differ
