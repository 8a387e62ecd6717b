"""The sandbox runs well-behaved agent code correctly and reports failures as values."""

from __future__ import annotations

import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from sandbox import (
    CAUSES,
    Failure,
    Limits,
    ReadOnlyProxy,
    SandboxError,
    compile_code,
    freeze,
    load,
    run_policy,
)
from sandbox.testing import TINY_ACTIONS, TinySkills


def policy(source: str):
    return compile_code(textwrap.dedent(source))


def drive(source: str, *, max_steps=100, wall_s=2.0, done_after=None, skills=None):
    actions: list[str] = []

    def step(action: str) -> bool:
        actions.append(action)
        return done_after is not None and len(actions) >= done_after

    outcome = run_policy(
        policy(source),
        skills or TinySkills(),
        step,
        max_steps=max_steps,
        wall_s=wall_s,
        allowed_actions=TINY_ACTIONS,
    )
    return outcome, actions


def test_policy_using_every_allowed_module_runs_to_completion():
    outcome, actions = drive("""
        import math, random, itertools, heapq, operator
        from collections import deque, Counter, defaultdict
        from functools import reduce, lru_cache

        @lru_cache(maxsize=None)
        def steps_to(x, y):
            return abs(x) + abs(y)

        def run(skills):
            random.seed(1)
            x, y = skills.nearest("tree")
            heap = []
            for d in (3, 1, 2):
                heapq.heappush(heap, d)
            counts = Counter(["a", "b", "a"])
            grid = defaultdict(int)
            grid[(0, 0)] += 1
            total = reduce(operator.add, range(5)) + math.floor(math.sqrt(16))
            pairs = list(itertools.islice(itertools.count(), 3))
            queue = deque(pairs)
            assert total == 14 and heapq.heappop(heap) == 1 and counts["a"] == 2
            assert queue.popleft() == 0 and steps_to(x, y) == 7
            for _ in range(x):
                yield "move_left"
            yield from skills.collect("tree", 1)
            yield random.choice(["noop", "do"])
        """)
    assert outcome.failure is None
    assert actions[:5] == ["move_left"] * 3 + ["move_left", "do"]
    assert outcome.steps == 6 and not outcome.episode_done


def test_skill_results_are_copies_so_agent_cannot_mutate_world_state():
    skills = TinySkills()
    outcome, _ = drive(
        """
        def run(skills):
            inv = skills.inventory()
            inv["wood"] = 999
            skills.view()[0][0] = "diamond"
            yield "noop"
        """,
        skills=skills,
    )
    assert outcome.failure is None
    assert skills.inventory() == {"wood": 2, "stone": 0}


def test_read_only_proxy_exposes_public_methods_only():
    proxy = ReadOnlyProxy(TinySkills())
    assert sorted(dir(proxy)) == ["collect", "inventory", "nearest", "view"]
    with pytest.raises(AttributeError):
        proxy.world_handle  # noqa: B018
    with pytest.raises(AttributeError):
        proxy.inventory = None


def test_freeze_turns_numpy_into_plain_data():
    np = pytest.importorskip("numpy")
    frozen = freeze({"view": np.zeros((2, 2), dtype=np.int64), "hp": np.float32(9)})
    assert frozen == {"view": [[0, 0], [0, 0]], "hp": 9.0}
    assert type(frozen["hp"]) is float


def test_print_is_collected_not_written_to_stdout(capsys):
    outcome, _ = drive("""
        def run(skills):
            print("hello", 42)
            yield "noop"
        """)
    assert outcome.output == "hello 42\n"
    assert capsys.readouterr().out == ""


def test_policy_that_uses_exactly_its_step_budget_succeeds():
    outcome, actions = drive(
        "def run(skills):\n    for _ in range(5):\n        yield 'noop'\n", max_steps=5
    )
    assert outcome.failure is None and len(actions) == 5


def test_what_a_policy_returns_comes_back_when_it_is_plain_data():
    answer, _ = drive("def run(skills):\n    yield 'noop'\n    return True\n")
    assert answer.failure is None and answer.returned is True
    # Its own objects stay in the namespace; so does an answer cut short by the budget.
    kept, _ = drive("def run(skills):\n    yield 'noop'\n    return [run]\n")
    assert kept.failure is None and kept.returned is None
    cut, _ = drive(
        "def run(skills):\n    yield 'noop'\n    yield 'noop'\n    return 1\n", max_steps=1
    )
    assert cut.failure.cause == "step_budget" and cut.returned is None


def test_episode_end_stops_the_policy_and_its_cleanup_cannot_hang():
    started = time.monotonic()
    outcome, actions = drive(
        """
        def run(skills):
            try:
                while True:
                    yield "noop"
            finally:
                while True:
                    pass
        """,
        done_after=3,
    )
    assert outcome.failure is None and outcome.episode_done and len(actions) == 3
    assert time.monotonic() - started < 1.0


def test_exception_traceback_names_only_agent_lines():
    outcome, _ = drive("""
        def helper(d):
            return d["missing"]

        def run(skills):
            helper({})
            yield "noop"
        """)
    failure = outcome.failure
    assert failure.cause == "exception" and failure.line == 3
    assert "KeyError" in failure.detail
    assert "line 6, in run" in failure.traceback and "line 3, in helper" in failure.traceback
    assert "sandbox" not in failure.traceback and ".py" not in failure.traceback


def test_syntax_error_reports_line():
    with pytest.raises(SandboxError) as err:
        compile_code("def run(skills):\n    yield 'noop'\n    x = = 1\n")
    assert (err.value.cause, err.value.line) == ("syntax", 3)


def test_missing_run_is_a_failure_not_a_crash():
    outcome, _ = drive("def helper():\n    return 1\n")
    assert outcome.failure.cause == "exception" and "run" in outcome.failure.detail


def test_reward_function_gets_snapshots_it_cannot_tamper_with():
    ns = load(
        policy("""
        def reward(before, after):
            before["inventory"]["wood"] = 100
            return float(after["inventory"]["wood"] - 2)
        """)
    )
    before = {"inventory": {"wood": 2}}
    after = {"inventory": {"wood": 3}}
    result = ns.call("reward", before, after, wall_s=0.5)
    assert result.failure is None and result.value == 1.0
    assert before == {"inventory": {"wood": 2}}


def test_timeout_sticks_to_the_namespace():
    ns = load(policy("def spin():\n    while True:\n        pass\n\ndef ok():\n    return 1\n"))
    first = ns.call("spin", wall_s=0.1)
    assert first.failure.cause == "timeout"
    assert ns.call("ok", wall_s=0.1).failure == first.failure


def test_agent_functions_do_not_run_outside_the_meter():
    ns = load(policy("def ok():\n    return 1\n"))
    from sandbox.meter import Abort

    with pytest.raises(Abort, match="not running"):
        ns.functions["ok"]()
    assert ns.call("ok", wall_s=0.1).value == 1


def test_recursion_bomb_leaves_the_recursion_limit_alone():
    limit = sys.getrecursionlimit()
    outcome, _ = drive("def run(skills):\n    yield from run(skills)\n")
    assert outcome.failure.cause == "recursion"
    assert sys.getrecursionlimit() == limit


def test_timeout_works_from_a_worker_thread():
    # Actors run sandboxed code off their event loop, in a worker thread.
    results = []
    thread = threading.Thread(
        target=lambda: results.append(
            drive("def run(skills):\n    while True:\n        pass\n    yield 1", wall_s=0.2)
        )
    )
    thread.start()
    thread.join(timeout=5)
    assert results and results[0][0].failure.cause == "timeout"


def test_slow_environment_steps_count_against_the_wall_budget():
    outcome = run_policy(
        policy("def run(skills):\n    while True:\n        yield 'noop'\n"),
        TinySkills(),
        lambda action: time.sleep(0.05) or False,
        max_steps=1000,
        wall_s=0.2,
        allowed_actions=TINY_ACTIONS,
    )
    assert outcome.failure.cause == "timeout" and 2 <= outcome.steps <= 6


def test_memory_growth_over_the_budget_is_stopped():
    # Many allocations each under the per-operation limit: caught by the RSS check.
    # A 64 MiB budget keeps the test light on a small machine.
    outcome = run_policy(
        policy("""
            def run(skills):
                hoard = []
                while True:
                    hoard.append("x" * 1000000 + str(len(hoard)))
                yield "noop"
            """),
        TinySkills(),
        lambda action: False,
        max_steps=10,
        wall_s=5.0,
        allowed_actions=TINY_ACTIONS,
        limits=Limits(memory_bytes=64 * 2**20),
    )
    assert outcome.failure.cause == "memory"


def test_failure_causes_are_the_documented_set():
    assert CAUSES == {
        "syntax", "forbidden", "exception", "timeout", "memory", "recursion",
        "invalid_action", "step_budget", "output_limit",
    }  # fmt: skip
    assert Failure("timeout", "x").line is None


def test_compiled_code_lists_its_functions():
    compiled = policy("def helper():\n    return 1\n\ndef run(skills):\n    yield 'noop'\n")
    assert compiled.functions == ("helper", "run")


def test_policy_runs_against_the_real_skill_api_and_crafter():
    from skills import skills as skills_module
    from worlds import crafter_world

    world = crafter_world.CrafterWorld()
    skills = skills_module.Skills(world.reset(0), world.action_names, seed=0)

    def step(action: str) -> bool:
        obs, _, done, info = world.step(action)
        skills._observe(obs, info)  # host side: the driver feeds observations back
        return done

    outcome = run_policy(
        policy("""
            def run(skills):
                got = yield from skills.collect("tree", 1)
                print("got", got, skills.inventory()["wood"])
            """),
        skills,
        step,
        max_steps=300,
        wall_s=20.0,
        allowed_actions=world.action_names,
    )
    assert outcome.failure is None, outcome.failure
    assert outcome.output == "got True 1\n"
    assert skills.inventory()["wood"] == 1


def test_guarded_builtins_still_behave_like_the_real_types():
    outcome, actions = drive("""
        import collections, functools
        @functools.lru_cache(maxsize=None)
        def double(pos):
            return (pos[0] * 2, pos[1] * 2)
        def run(skills):
            counts = collections.defaultdict(int)
            for key in ["a", "b", "a"]:
                counts[key] += 1
            positions = [(x, y) for x in range(64) for y in range(64)]
            visited = set(positions) | {*positions[:3]}
            assert isinstance(3, int) and isinstance(True, int) and not isinstance("3", int)
            assert isinstance(visited, set) and issubclass(bool, int)
            assert int("ff", 16) == 255 and int.from_bytes(b"\\x01\\x00", "big") == 256
            assert (5).bit_length() == 3 and pow(3, 5, 7) == 5 and round(1234, -2) == 1200
            assert len(set([0] * 1000000)) == 1  # a big dedupe of equal keys is no flood
            assert dict.fromkeys("ab", 0) == {"a": 0, "b": 0} and dict([(1, 2)]) == {1: 2}
            assert collections.Counter("abca")["a"] == 2 and (1, 2) in {(1, 2): 3}
            assert double((1, 2)) == (2, 4) == double((1, 2))
            assert double.cache_info().hits == 1
            assert list(map(lambda p: p[0], positions[:2])) == [0, 0]
            yield "noop" if counts == {"a": 2, "b": 1} and len(visited) == 4096 else "do"
        """)
    assert outcome.failure is None, outcome.failure
    assert actions == ["noop"]
    # The same builds, hostile: refused with their causes instead of running in C.
    outcome, _ = drive("def run(skills):\n    int('1' * 2000000, 2)\n    yield 'noop'")
    assert outcome.failure.cause == "memory"


# A host method that hashes its argument, as a skill looking a name up in a table does.
HASHING_HOST = """
import sys
sys.path.insert(0, sys.argv[1])
from sandbox import compile_code, run_policy
from sandbox.testing import TINY_ACTIONS

class Host:
    def lookup(self, key):
        return {1: 2}.get(key)

source = '''
def run(skills):
    t = ()
    for i in range(200000):
        t = (t,)
    skills.lookup(t)
    yield 'noop'
'''
outcome = run_policy(compile_code(source), Host(), lambda a: False, max_steps=5, wall_s=5.0,
                     allowed_actions=TINY_ACTIONS)
print(outcome.failure.cause)
"""


def test_a_tuple_too_deep_to_hash_never_reaches_host_code(tmp_path):
    import subprocess  # a segfault in the child fails this test, not pytest

    repo = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-c", HASHING_HOST, repo],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, f"the process died ({done.returncode}): {done.stderr[-2000:]}"
    assert done.stdout.split() == ["recursion"]


def test_trace_labels_of_huge_skill_arguments_cost_the_host_little():
    import tracemalloc

    from episodes.trace import TracingSkills
    from worlds import crafter_world

    world = crafter_world.CrafterWorld()
    skills = TracingSkills(world.reset(0), world.action_names, seed=0)
    huge = [[123456] * 1500] * 1500  # repr: 12 MB
    deep: tuple = ()
    for _ in range(200_000):
        deep = (deep,)  # repr: RecursionError
    # What the labels cost, in memory rather than seconds (a loaded machine changes
    # the one, not the other): a full repr of ``huge`` alone would peak at 12 MB.
    tracing = tracemalloc.is_tracing()  # already on (-X tracemalloc): left on
    if not tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(70):
            skills.attack(huge).close()
        skills.attack(1 << 100_000).close()  # repr: ValueError past 4300 digits
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        if not tracing:
            tracemalloc.stop()
    assert peak < 1_000_000, peak
    for argument in (huge, deep):
        with pytest.raises(TypeError):  # range(argument): the segment is kept all the same
            next(skills.attack(times=argument))
    labels = [segment.action for segment in skills._segments]
    assert labels[0].startswith("attack(times=[[123456, 123456") and len(labels[0]) < 400
    assert labels[1].startswith("attack(times=((((") and len(labels[1]) < 100


def test_the_same_source_compiles_once_and_the_cache_stays_bounded() -> None:
    import sandbox
    from sandbox import compiler

    source = "def run(skills):\n    yield 'noop'  # compile-cache test\n"
    before = sandbox.compile_stats()
    first = sandbox.compile_code(source, filename="<cache>")
    again = sandbox.compile_code(source, filename="<cache>")
    other = sandbox.compile_code(source, filename="<cache-2>")  # tracebacks name it
    after = sandbox.compile_stats()
    assert again is first and other is not first
    assert (after.compiled - before.compiled, after.hits - before.hits) == (2, 1)
    for i in range(compiler.COMPILE_CACHE_SIZE + 5):
        sandbox.compile_code(f"def run(skills):\n    yield 'noop'  # {i}\n", filename="<cache>")
    assert sandbox.compile_stats().cached == compiler.COMPILE_CACHE_SIZE
    # Big sources are bounded by their characters too.
    big = compiler.COMPILE_CACHE_CHARS // 3
    roomy = Limits(max_source_chars=big + 100)  # a composed setup's larger limit
    for i in range(4):
        padding = "# " + "x" * (big - 40) + "\n"
        source = f"{padding}def run(skills):\n    yield 'noop'  # {i}\n"
        sandbox.compile_code(source, filename="<cache>", limits=roomy)
    assert sandbox.compile_stats().cached < compiler.COMPILE_CACHE_SIZE
    assert compiler._cached_chars <= compiler.COMPILE_CACHE_CHARS
    # Refused code is refused every time, and not kept.
    for _ in range(2):
        with pytest.raises(sandbox.SandboxError):
            sandbox.compile_code("import os\n", filename="<cache>")


def test_a_loop_of_slow_c_calls_stops_within_a_call_or_two_of_its_deadline() -> None:
    # Each iteration makes one C call of tens of milliseconds (a 400k-bit `%`, within the
    # big-int limits) between two ticks, and prints a dot. The tick reads the clock only
    # every 256 ticks; the watchdog makes the next tick read it once the deadline passed.
    # Counted in calls, not seconds, so a loaded machine makes it no less certain.
    source = textwrap.dedent(
        """
        def f():
            n = (1 << 400_000) - 12345
            m = (1 << 200_000) - 7
            while True:
                r = n % m
                print('.')
        """
    )
    n, m = (1 << 400_000) - 12345, (1 << 200_000) - 7
    one_call = time.perf_counter()
    _ = n % m
    one_call = time.perf_counter() - one_call
    ns = load(compile_code(source))
    started = time.perf_counter()
    out = ns.call("f", wall_s=0.3)
    took = time.perf_counter() - started
    assert out.failure is not None and out.failure.cause == "timeout"
    calls = out.output.count(".")
    within = 0.3 / one_call  # the calls the budget holds, on this machine now
    # Without the watchdog the loop runs ~128 iterations (256 ticks) past its deadline.
    assert calls <= within + 20, (calls, within, took)
