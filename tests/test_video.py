"""The report video's labelled frames (``method/video.py``), on frames of the real game."""

from __future__ import annotations

import numpy as np

from method.video import BANNER_PX, HOLD_FRAMES, SCALE, Clip, label_clip
from worlds.crafter_world import CrafterWorld


def _frames(n: int) -> np.ndarray:
    world = CrafterWorld()
    world.reset(7)
    frames = [world.render()]
    for _ in range(n - 1):
        world.step("move_left")
        frames.append(world.render())
    return np.stack(frames)


def test_labelled_frames_show_the_game_enlarged_and_what_was_unlocked_by_then() -> None:
    frames = _frames(40)
    clip = Clip(frames, seed=7, steps=39, success=False, cause="step_budget",
                achievements=["collect_wood", "place_table"], unlocked_at=[10, 30])  # fmt: skip
    out = label_clip(clip, max_frames=40)
    assert out.shape == (40 + HOLD_FRAMES, BANNER_PX + 64 * SCALE, 64 * SCALE, 3)
    # The game below the label: each pixel drawn SCALE × SCALE (nearest neighbour).
    for k in (0, 17, 39):
        game = out[k, BANNER_PX:]
        assert np.array_equal(game, np.kron(frames[k], np.ones((SCALE, SCALE, 1), np.uint8)))
    assert np.array_equal(out[-1], out[39])  # the last frame held
    banner = out[:40, :BANNER_PX]
    step_line, rest = banner[:, :14], banner[:, 30:]
    # The step line changes every frame; the achievements' lines only when one is
    # unlocked (steps 10 and 30), and are the same between.
    assert all(not np.array_equal(step_line[k], step_line[k + 1]) for k in range(39))
    changes = [k for k in range(1, 40) if not np.array_equal(rest[k], rest[k - 1])]
    assert changes == [10, 30]
