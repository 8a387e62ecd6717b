"""``attach learner --ray``: a real local Ray cluster (loopback only, no dashboard, no usage
reports) places two learners, each answers a real small PPO job, and nothing the test
started outlives it. Without Ray installed, the error names the extra."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from helpers import (
    ROOT,
    alive,
    free_port,
    make_settings,
    missing_here,
    read_events,
    wait_until_blocking,
)
from test_learner import TINY_PPO, request

from messages.train import TrainResult
from runtime.head import Head, new_run_dir, run_head
from runtime.security import create_keys

RUN = [sys.executable, str(ROOT / "run.py")]
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    # Ray turns 127.0.0.1 into the host's outward address unless it runs as a one-machine
    # cluster; this keeps every Ray socket on loopback.
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory):
    """A one-node Ray cluster of 2 CPUs for this module's tests; stopped at the end, every
    process of it (and only of it: not `ray stop`, which ends every Ray of this user)."""
    tmp_path = tmp_path_factory.mktemp("ray")
    try:
        import ray  # noqa: F401
    except ImportError:
        missing_here("Ray is not installed (the optional extra: pip install -e '.[ray]')")
    temp = Path("/tmp") / f"rt{os.getpid()}"  # Ray's socket paths must stay short
    ray_bin = Path(sys.executable).parent / "ray"
    head = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", "--port=0", "--num-cpus=2",
         "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={temp}", f"--ray-client-server-port={free_port()}"],
        # TMPDIR: what the learners keep (checkpoints under the run id) stays in here.
        env={**os.environ, **RAY_ENV, "TMPDIR": str(tmp_path)}, cwd=ROOT,
        start_new_session=True, stdout=(tmp_path / "ray.log").open("w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        address_file = temp / "ray_current_cluster"
        wait_until_blocking(address_file.exists, timeout=90, what="the Ray head's address")
        yield address_file.read_text().strip()
    finally:
        head.terminate()  # `ray start --block` stops its processes on SIGTERM
        try:
            head.wait(timeout=60)
        finally:
            try:
                os.killpg(head.pid, signal.SIGKILL)  # anything it left in its session
            except ProcessLookupError:
                pass
            subprocess.run(["rm", "-rf", str(temp)], check=False)


@pytest.mark.slow
def test_ray_places_two_learners_that_each_train_a_job_and_leave_nothing_behind(
    tmp_path: Path, ray_cluster: str
) -> None:
    keys = create_keys(tmp_path / "keys")
    connect = f"tcp://127.0.0.1:{free_port()}"
    settings = make_settings(tmp_path, listen=connect, keys_dir=str(keys))
    run_id, run_dir = new_run_dir(settings, f"ray-{os.getpid()}-{time.time_ns()}")
    log = tmp_path / "launcher.log"
    # The launcher starts first: its learners wait for the head of run ray-run.
    started = time.monotonic()
    launcher = subprocess.Popen(
        [*RUN, "attach", "learner", "--ray", ray_cluster, "--count", "2",
         "--cpus-per-learner", "1", "--connect", connect, "--keys", str(keys),
         "--run-id", run_id, "--wait", "300", "--quiet"],
        env={**os.environ, **RAY_ENV}, cwd=ROOT, stdout=log.open("w"),
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    seen: dict = {}
    try:
        placed = wait_until_blocking(
            lambda: re.search(
                r"placed 2 learner actors through Ray in ([\d.]+) s", log.read_text()
            ),
            timeout=180,
            what="Ray placing both learners",
        )
        seen["place_s"] = float(placed.group(1))
        seen["launched_to_placed_s"] = time.monotonic() - started
        # A copy whose attach process dies is started again (while no head exists yet).
        first = int(re.search(r"learner 1/2 placed on .*pid (\d+)", log.read_text()).group(1))
        (attach,) = wait_until_blocking(
            lambda: _children(first), timeout=60, what="the first copy's attach process"
        )
        os.kill(attach, signal.SIGKILL)
        wait_until_blocking(
            lambda: (
                "learner 1/2: its attach exited with status -9; starting it again"
                in log.read_text()
            ),
            timeout=60,
            what="the killed copy started again",
        )

        async def driver(head: Head) -> dict:
            t0 = time.monotonic()
            await head.wait_for("learner", 2, timeout=240)
            seen["registered_s"] = time.monotonic() - t0
            results: list[TrainResult] = []
            async with trio.open_nursery() as nursery:
                for name in ("a", "b"):

                    async def one(name: str = name) -> None:
                        req = request(name, 128, ppo=TINY_PPO, eval_episodes=1, train_worlds=2)
                        results.append(await head.client.ask("@learner", req, timeout=300))

                    nursery.start_soon(one)
            seen["results"] = results
            seen["learners"] = {
                a.actor_id: a.pid for a in head.broker.status().actors if a.role == "learner"
            }
            return {}

        code = trio.run(run_head, settings, run_dir, run_id, driver)
        assert code == 0
        results = seen["results"]
        assert sorted(r.name for r in results) == ["a", "b"]
        assert all(not r.failure and r.policy_bytes for r in results), [r.failure for r in results]
        # One job each: the broker hands a learner of capacity 1 one job at a time.
        assert len({r.actor_id for r in results}) == 2
        # The head finished the run: both learners leave, and so does the launcher.
        assert launcher.wait(timeout=120) == 0, log.read_text()
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
            try:
                launcher.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(launcher.pid, signal.SIGKILL)
    text = log.read_text()
    where = re.findall(r"learner (\d)/2 placed on node (\S+) .*pid (\d+)", text)
    assert sorted({w[0] for w in where}) == ["1", "2"], text
    ray_pids = sorted({int(w[2]) for w in where})
    learner_pids = list(seen["learners"].values())
    # Nothing left: not the Ray actors' processes, not the attach processes they ran.
    wait_until_blocking(
        lambda: not any(alive(p) for p in ray_pids + learner_pids),
        timeout=60,
        what="the Ray actors and their learners gone",
    )
    print(
        f"placed 2 learners in {seen['place_s']:.2f} s (launcher start to placed "
        f"{seen['launched_to_placed_s']:.1f} s); both registered {seen['registered_s']:.1f} s "
        "after the head started"
    )


@pytest.mark.slow
def test_a_real_run_whose_learned_step_is_trained_by_a_learner_ray_placed(
    tmp_path: Path, ray_cluster: str
) -> None:
    """The README's step 3 as a test: ``deploy/cluster-demo.toml`` (on loopback here) run
    by ``run.py`` with no learner of its own, its learners placed by Ray beforehand."""
    keys = create_keys(tmp_path / "keys")
    port = free_port()
    config = (ROOT / "deploy" / "cluster-demo.toml").read_text()
    config = config.replace('"tcp://0.0.0.0:5555"', f'"tcp://127.0.0.1:{port}"')
    config = config.replace('keys_dir = "keys"', f'keys_dir = "{keys}"')
    config = config.replace("train_steps = 2048", "train_steps = 512")
    assert f"127.0.0.1:{port}" in config and str(keys) in config
    (tmp_path / "cluster.toml").write_text(config)
    run_id = f"ray-run-{os.getpid()}"
    log = tmp_path / "launcher.log"
    launcher = subprocess.Popen(
        [*RUN, "attach", "learner", "--ray", ray_cluster, "--count", "2",
         "--cpus-per-learner", "1", "--connect", f"tcp://127.0.0.1:{port}", "--keys",
         str(keys), "--run-id", run_id, "--wait", "300", "--quiet"],
        env={**os.environ, **RAY_ENV}, cwd=tmp_path, stdout=log.open("w"),
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        head = subprocess.run(
            [*RUN, "--config", str(tmp_path / "cluster.toml"), "--run-id", run_id, "--quiet"],
            cwd=tmp_path, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert head.returncode == 0, head.stderr[-3000:]
        # The run is over: the learners leave, and so does the launcher.
        assert launcher.wait(timeout=120) == 0, log.read_text()
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
            try:
                launcher.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(launcher.pid, signal.SIGKILL)
    run_dir = tmp_path / "runs" / run_id
    events = read_events(run_dir)
    registered = [e for e in events if e["event"] == "actor_registered" and e["role"] == "learner"]
    assert len(registered) == 2, registered  # both copies joined this run
    # The learned step was trained by one of them, and the head saw it (forwarded events).
    trained = [e for e in events if e["event"] == "training_started"]
    assert trained and all(e.get("remote") is True for e in trained), trained
    assert {e["actor"] for e in trained} <= {e["actor_id"] for e in registered}
    # Its policy came back and the run used it: measured by the head's agents.
    results = [e for e in events if e["event"] == "training_result"]
    assert results and results[0]["decisions"] >= 512, results
    assert (run_dir / "summary.json").is_file() and (run_dir / "report.md").is_file()


@pytest.mark.slow
def test_ctrl_c_on_the_ray_launcher_stops_every_copy_and_its_process(
    tmp_path: Path, ray_cluster: str
) -> None:
    keys = create_keys(tmp_path / "keys")
    log = tmp_path / "launcher.log"
    launcher = subprocess.Popen(
        [*RUN, "attach", "learner", "--ray", ray_cluster, "--count", "2",
         "--connect", f"tcp://127.0.0.1:{free_port()}", "--keys", str(keys),
         "--run-id", "nobody-runs-this", "--wait", "300"],
        env={**os.environ, **RAY_ENV}, cwd=ROOT, stdout=log.open("w"),
        stderr=subprocess.STDOUT, start_new_session=True,
        # Started with SIGINT ignored, as a background job of a non-interactive shell
        # is (how CI may start it): Ctrl-C must stop it all the same.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    try:
        wait_until_blocking(
            lambda: "placed 2 learner actors through Ray" in log.read_text(),
            timeout=180,
            what="Ray placing both copies",
        )
        hosts = [int(p) for p in re.findall(r"placed on node .*pid (\d+)", log.read_text())]
        attaches = wait_until_blocking(
            lambda: (
                (found := [c for h in hosts for c in _children(h)]) and len(found) == 2 and found
            ),
            timeout=60,
            what="both attach processes",
        )
        launcher.send_signal(signal.SIGINT)
        try:
            status = launcher.wait(timeout=60)
        except subprocess.TimeoutExpired:  # say what the launcher was doing
            pytest.fail("the launcher did not end 60 s after Ctrl-C:\n" + log.read_text())
        assert status == 130, log.read_text()
        assert "stopping every copy" in log.read_text()
        wait_until_blocking(
            lambda: not any(alive(p) for p in hosts + attaches),
            timeout=60,
            what="the Ray actors and their attach processes gone",
        )
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if ppid == pid and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_ray_placement_without_ray_installed_names_the_extra(tmp_path: Path) -> None:
    # A `ray` that cannot be imported, first on the path: as on a machine without it.
    fake = tmp_path / "no-ray"
    (fake / "ray").mkdir(parents=True)
    (fake / "ray" / "__init__.py").write_text("raise ImportError('no ray here (a fake)')\n")
    done = subprocess.run(
        [*RUN, "attach", "learner", "--ray", "auto", "--count", "2",
         "--connect", "tcp://127.0.0.1:5555"],
        env={**os.environ, "PYTHONPATH": str(fake)}, cwd=tmp_path,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--ray needs Ray, which is not installed" in done.stderr
    assert "pip install -e '.[ray]'" in done.stderr


def test_ray_launcher_refuses_what_cannot_work_at_once(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="Ray is the optional extra: pip install -e '.[ray]'")
    keys = create_keys(tmp_path / "keys")
    base = [*RUN, "attach", "learner", "--count", "2", "--connect", "tcp://127.0.0.1:5555"]
    cases = [
        (["--ray", "127.0.0.1:1", "--keys", str(keys)], "no Ray cluster at --ray 127.0.0.1:1"),
        (["--ray", "127.0.0.1:1"], "--ray needs keys to reach tcp://127.0.0.1:5555"),
        (["--ray", "127.0.0.1:1", "--keys", str(keys), "--name", "x"], "--name does not go"),
        (["--ray", "127.0.0.1:1", "--keys", str(tmp_path)], "client.key_secret not found"),
    ]
    for args, expect in cases:
        started = time.monotonic()
        done = subprocess.run(
            [*base, *args], env={**os.environ, **RAY_ENV}, cwd=tmp_path,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2 and expect in done.stderr, (args, done.stderr)
        assert time.monotonic() - started < 20  # not Ray's minutes of retrying


def test_each_copy_runs_the_attach_with_every_flag_it_was_given(tmp_path: Path) -> None:
    from rlgpt.cli import build_parser
    from rlgpt.ray_attach import child_command

    keys = create_keys(tmp_path / "keys")
    args = build_parser().parse_args(
        ["attach", "learner", "--ray", "127.0.0.1:1", "--count", "2", "--connect",
         "tcp://127.0.0.1:5555", "--keys", str(keys), "--allow-version-mismatch",
         "--events-queue", "500", "--run-id", "r1"]
    )  # fmt: skip
    argv, keys_text = child_command(args)
    assert "--allow-version-mismatch" in argv
    assert argv[argv.index("--events-queue") + 1] == "500"
    assert argv[argv.index("--run-id") + 1] == "r1"
    assert "--keys-stdin" in argv and str(keys) not in " ".join(argv)  # keys go by stdin
    assert json.loads(keys_text)["server_public"]


def test_wait_bounds_ray_placement_and_zero_waits_for_ever() -> None:
    # README: --wait's 0 means for ever, for the placement as for each copy's attach.
    from rlgpt.ray_attach import PLACE_TIMEOUT_S, placement_limit

    assert placement_limit(None) == PLACE_TIMEOUT_S == 600
    assert placement_limit(0) == float("inf")
    assert placement_limit(30) == 30 and placement_limit(1200.5) == 1200.5


def test_the_launcher_stops_waiting_for_a_ray_that_does_not_let_go(monkeypatch) -> None:
    """A named fake of Ray whose shutdown hangs (a hang cannot be had from a real cluster
    on demand): the launcher's way out gives up after its limit instead of hanging."""
    import threading
    import time

    from rlgpt import ray_attach

    release = threading.Event()

    class HangingRay:
        killed: list = []

        def kill(self, host, no_restart):
            self.killed.append(host)

        def is_initialized(self):
            return True

        def shutdown(self):
            release.wait(10)

    monkeypatch.setattr(ray_attach, "STOP_TIMEOUT_S", 0.2)
    fake = HangingRay()
    started = time.monotonic()
    assert ray_attach._stop_ray(fake, ["a", "b"]) is False
    assert time.monotonic() - started < 2 and fake.killed == ["a", "b"]
    release.set()
    fake.shutdown = lambda: None
    assert ray_attach._stop_ray(fake, ["c"]) is True
