"""How long one actor may hold a request: the deadline an ask carries when its asker
names none.

Every ask to another actor carries ``deadline_s`` in its envelope (see
:mod:`runtime.broker` for what the broker does when it passes): the seconds *one try*
may take once an actor holds the job; time spent waiting in a queue does not count, and
a re-queued job gets the full time again. The asker may pass its own
(``Actor.ask(..., deadline_s=...)``; 0 turns it off); otherwise :func:`hold_limit`
derives it from the request's own budget, with :data:`GRACE_S` on top so the working
actor's own limits (the environment's watchdog, the sandbox's budgets) always answer
first and the deadline only catches a peer that has gone silent:

- ``rollout.request``: ``wall_s`` × episodes (the environment's watchdog budget less
  its grace) + :data:`ROLLOUT_START_S` (a runner the environment actor must start or
  replace before the batch: its start limit) + :data:`GRACE_S`;
- ``train.request``: no wall limit of its own, so the budget at a floor of
  :data:`TRAIN_FLOOR_STEPS_PER_S` decisions a second, plus its held-out evaluation at
  :data:`EVAL_EPISODE_S` an episode, + :data:`GRACE_S`;
- ``control.probe``: ``hold_s`` + :data:`GRACE_S`;
- anything else (the in-process agents' requests, whose model calls the backend's own
  timeout and retries bound): none, unless the asker gives one.
"""

from __future__ import annotations

from typing import Any

from messages.control import Probe
from messages.rollout import RolloutRequest
from messages.train import TrainRequest

GRACE_S = 60.0
"""On top of a request's own budget: the environment's watchdog grace (10 s), encoding
and moving a large answer, an actor process slowed by a busy 2-core machine. A deadline
is a last resort against silence, never the limit that normally answers."""
ROLLOUT_START_S = 180.0
"""The environment actor's allowance for starting its runner process before a batch
(``episodes.runner.START_TIMEOUT_S``; a replacement after a crash warms up again): a healthy
rollout that waits for it must not pass its deadline."""
TRAIN_FLOOR_STEPS_PER_S = 2.0
"""Slowest training rate still taken for work, in decisions a second: PPO on Crafter
runs ~280 world steps a second on this project's 2-core machine (BENCHMARKS.md), and a
coded option may take tens of steps a decision; 2 a second is far below any live
learner (20,000 decisions: under 3 hours)."""
EVAL_EPISODE_S = 60.0
"""Seconds allowed per held-out evaluation episode after training (the rollout default
``wall_s``)."""


def hold_limit(msg: Any) -> float:
    """The default ``deadline_s`` for asking ``msg`` of another actor; 0: none."""
    if isinstance(msg, RolloutRequest):
        return msg.wall_s * max(1, len(msg.seeds)) + ROLLOUT_START_S + GRACE_S
    if isinstance(msg, TrainRequest):
        train = max(0, msg.total_steps) / TRAIN_FLOOR_STEPS_PER_S
        return train + max(0, msg.eval_episodes) * EVAL_EPISODE_S + GRACE_S
    if isinstance(msg, Probe):
        return max(0.0, msg.hold_s) + GRACE_S
    return 0.0
