"""An evaluation over several environment actors (method/split.py): from starts, each
world goes preferably to the actor that holds its start, no actor gets more than its
share, and nothing changes without starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import trio

from actors.fast import FastAgent
from messages import preference
from messages.plan import SubAction, WorkOn
from messages.rollout import EpisodeReport, RolloutRequest, RolloutResult
from messages.task import Stage, Subtask
from method.agents import Agents
from method.settings import MethodSettings
from method.split import Affinity, start_setup_key

WOOD = Stage(Subtask("collect_wood", goal={"wood": 1}, max_steps=60), code="w = 1\n")
TABLE = Stage(Subtask("place_table", achievement="place_table", max_steps=60), code="t = 1\n")
ACTORS = ("environment-0", "environment-1")


class TwoRunners:
    """Two fake environment actors, each with its own start cache. A part addressed to
    an actor as preferred goes there; one addressed to the role goes to the actor that
    holds the fewest of its starts, of those the one that took fewer parts (the broker
    promises no more than "an idle one")."""

    def __init__(self) -> None:
        self.starts: dict[str, set[tuple[str, int]]] = {a: set() for a in ACTORS}
        self.taken = dict.fromkeys(ACTORS, 0)
        self.made = 0

    async def ask(self, to: str, req: object, **_: object) -> RolloutResult:
        assert isinstance(req, RolloutRequest), req
        role, preferred = preference(to)
        assert role == "@environment", to
        key = start_setup_key(req)
        actor = preferred or min(
            ACTORS,
            key=lambda a: (sum((key, s) in self.starts[a] for s in req.seeds), self.taken[a]),
        )
        self.taken[actor] += 1
        episodes = []
        for seed in req.seeds:
            made = (key, seed) not in self.starts[actor]
            self.starts[actor].add((key, seed))
            self.made += made
            episodes.append(
                EpisodeReport(
                    seed,
                    True,
                    5,
                    1.0,
                    [],
                    "success",
                    setup_steps=10 if made else 0,
                    restored=not made,
                )  # fmt: skip
            )
        return RolloutResult.of_episodes(req.subtask.name, episodes, actor_id=actor)


def _fast(tmp_path: Path, env: TwoRunners) -> FastAgent:
    settings = MethodSettings()
    settings.task.eval_from_starts = True
    fast = FastAgent(
        agents=Agents(None, tmp_path), settings=settings, environments=2, run_dir=tmp_path
    )
    fast.ask = env.ask
    return fast


def test_a_later_version_from_starts_plays_each_world_where_its_start_was_made(
    tmp_path: Path,
) -> None:
    env = TwoRunners()
    fast = _fast(tmp_path, env)
    work = WorkOn(SubAction("place_table", TABLE.subtask), before=[WOOD], seeds=list(range(8)))

    async def versions() -> list[RolloutResult]:
        out = []
        for code in ("t = 1\n", "t = 2\n", "t = 3\n"):
            out.append(await fast._evaluate(work, dataclasses.replace(TABLE, code=code)))
        return out

    results = trio.run(versions)
    assert env.made == 8  # each world's start made once, by the first version
    for result in results[1:]:
        assert [e.seed for e in result.episodes] == list(range(8))
        assert all(e.restored and e.setup_steps == 0 for e in result.episodes)
        assert result.steps == 8 * 5  # no setup booked again


def test_parts_keep_to_their_share_and_requests_without_starts_split_as_before() -> None:
    affinity = Affinity()
    req = RolloutRequest(
        TABLE.subtask, seeds=list(range(6)), stages=[WOOD, TABLE], start_at=1, wall_s=30
    )
    # Before any actor is known: seeds[i::parts] to any idle actor.
    assert affinity.parts(req, 2) == [("@environment", [0, 2, 4]), ("@environment", [1, 3, 5])]
    # Every start is on environment-0: it keeps its share (3), the rest go to the other
    # actor, which would otherwise idle.
    first = RolloutResult.of_episodes(
        "place_table",
        [EpisodeReport(s, True, 1, 1.0, [], "success", setup_steps=1) for s in range(6)],
        actor_id="environment-0",
    )
    affinity.played(req, first)
    affinity.actors.append("environment-1")
    assert affinity.parts(req, 2) == [
        ("@environment/environment-0", [0, 1, 2]),
        ("@environment/environment-1", [3, 4, 5]),
    ]
    # Another setup (another stage before): no start held, split evenly.
    other = dataclasses.replace(req, stages=[dataclasses.replace(WOOD, code="w = 2\n"), TABLE])
    assert [s for _, s in affinity.parts(other, 2)] == [[0, 2, 4], [1, 3, 5]]
    # From reset: as before, whatever is known.
    reset = dataclasses.replace(req, start_at=0)
    assert affinity.parts(reset, 2) == [("@environment", [0, 2, 4]), ("@environment", [1, 3, 5])]


def test_whole_episodes_go_in_parts_of_about_three_and_at_least_one_per_actor():
    from method.split import whole_parts

    assert whole_parts(2, 100) == 34  # the final evaluation: parts of 3 (one of 1)
    assert whole_parts(2, 64) == 22
    assert whole_parts(2, 4) == 2  # never fewer parts than actors ...
    assert whole_parts(16, 5) == 5  # ... nor more than episodes
    assert whole_parts(2, 1) == whole_parts(0, 3) == 1
