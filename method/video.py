"""Labelled episode videos: which evaluation episodes the report shows, and their frames
with the seed, the step, the outcome and the achievements drawn above the game.

The report's video (``runs/<id>/episode.gif``) shows one successful and one failed
episode of the final evaluation when it has both (else the first one or two of what it
has): :func:`video_episodes` picks them, the environment actors render them again (the
same seed plays the same episode), and :func:`write_labelled_gif` writes them one after
the other. ``run.py play --video`` labels the episodes it plays the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import trio

from method import ledger
from method.journal import job_key
from method.settings import FINAL_WALL_S
from runtime.actor import RemoteFailure
from runtime.events import log
from worlds import video as world_video
from worlds.video import frames_from_npz

SCALE = 4
"""Crafter's 64×64 frames drawn 4× (256×256, nearest-neighbour): big enough for the
label's text to sit above the game without covering it."""
BANNER_PX = 90
"""Height of the label strip above the frame: six lines of 12-pixel text."""
ACHIEVEMENT_LINES = 4
"""Lines of the label the achievements may fill (a diamond episode's dozen fit)."""
FONT_PX = 12
FPS = 15
MAX_FRAMES_PER_EPISODE = 300
"""Frames kept per episode (evenly thinned, the last always kept): 20 s at 15 fps, so
two long episodes make a GIF of a few MB."""
HOLD_FRAMES = 15
"""The last frame of each episode is held this long (1 s) so its outcome can be read."""
SUCCESS_RGB = (90, 200, 90)
FAILURE_RGB = (230, 90, 80)
TEXT_RGB = (235, 235, 235)
BANNER_RGB = (25, 25, 30)


def video_episodes(episodes: Sequence) -> list:
    """The episodes the report's video shows: the first successful and the first failed
    (in seed order) when there are both, else the first two (or the one there is).
    ``episodes`` are :class:`~messages.rollout.EpisodeReport` (anything with ``seed``,
    ``success``)."""
    ordered = sorted(episodes, key=lambda e: e.seed)
    won = [e for e in ordered if e.success]
    lost = [e for e in ordered if not e.success]
    if won and lost:
        return [won[0], lost[0]]
    return ordered[:2]


@dataclass
class Clip:
    """One episode's frames and what to write above them."""

    frames: np.ndarray
    """T×H×W×3 uint8: the reset frame, then one per step (possibly cut short)."""
    seed: int
    steps: int
    """The episode's length in steps (the frames may stop earlier: a capped recording)."""
    success: bool
    cause: str = ""
    """Why it ended (``success``, ``episode_done``, ...)."""
    detail: str = ""
    """The failure's detail (``the player died``, ...)."""
    achievements: list[str] = field(default_factory=list)
    """Unlocked in the episode, in order (repeats allowed)."""
    unlocked_at: list[int] | None = None
    """The step at which each of ``achievements`` happened, when known: the label then
    lists only what was unlocked up to the frame shown."""


READABLE_CAUSES = {
    "step_budget": "out of steps",
    "timeout": "out of wall time",
    "policy_finished": "the policy gave up",
    "policy_unusable": "a stage cannot run",
}
"""Short words for the commonest failure causes (the label has one line for it)."""


def _why(clip: Clip) -> str:
    if clip.cause == "episode_done":
        return "the player died" if "died" in clip.detail else "the world ended it"
    return READABLE_CAUSES.get(clip.cause, clip.cause or "no success")


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has one bitmap font
        return ImageFont.load_default()


def _unique(names: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _wrap(heading: str, names: list[str], font, width: int, lines: int) -> list[str]:
    """``heading`` and then ``names``, comma-separated, in at most ``lines`` lines of at
    most ``width`` pixels; names that do not fit are counted (``+3 more``) at the end."""
    out = [heading.rstrip()]
    for k, name in enumerate(names):
        last = k == len(names) - 1
        piece = name if last else name + ","
        if font.getlength(f"{out[-1]} {piece}") <= width:
            out[-1] = f"{out[-1]} {piece}"
        elif len(out) < lines:
            out.append(piece)
        else:
            more = len(names) - k
            while out[-1] and font.getlength(f"{out[-1]} +{more} more") > width:
                more += 1
                out[-1] = out[-1].rsplit(" ", 1)[0] if " " in out[-1] else ""
            out[-1] = f"{out[-1]} +{more} more".strip()
            break
    return out


def label_clip(clip: Clip, max_frames: int = MAX_FRAMES_PER_EPISODE) -> np.ndarray:
    """``clip``'s frames enlarged and labelled (T'×(H·SCALE+BANNER)×(W·SCALE)×3), thinned
    to at most ``max_frames`` (the step shown is each kept frame's own) plus the held last
    frame.

    A label's lines below the first change only when an achievement is unlocked, so they
    are drawn once per distinct list and the step line alone per frame; the game is
    enlarged by repeating pixels (nearest neighbour at a whole factor)."""
    from PIL import Image, ImageDraw

    frames = np.asarray(clip.frames)
    if frames.ndim != 4 or len(frames) == 0:
        raise ValueError(f"a clip needs T×H×W×3 frames, not shape {frames.shape}")
    keep = np.unique(np.linspace(0, len(frames) - 1, min(len(frames), max_frames)).round())
    width = frames.shape[2] * SCALE
    font = _font(FONT_PX)
    colour = SUCCESS_RGB if clip.success else FAILURE_RGB
    outcome = "episode: success" if clip.success else f"episode: failed, {_why(clip)}"
    heading = "unlocked so far:" if clip.unlocked_at is not None else "unlocked in the episode:"
    banners: dict[tuple[str, ...], Image.Image] = {}
    out = []
    for index in keep.astype(int):
        step = int(index)  # frame 0 is the reset, frame k follows step k
        if clip.unlocked_at is not None:
            pairs = zip(clip.achievements, clip.unlocked_at, strict=True)
            got = [a for a, at in pairs if at <= step]
        else:
            got = list(clip.achievements)
        names = tuple(_unique(got) or ["none"])
        base = banners.get(names)
        if base is None:
            base = Image.new("RGB", (width, BANNER_PX), BANNER_RGB)
            draw = ImageDraw.Draw(base)
            draw.text((4, 16), outcome, colour, font=font)
            for i, line in enumerate(
                _wrap(heading, list(names), font, width - 8, ACHIEVEMENT_LINES)
            ):
                draw.text((4, 30 + 14 * i), line, TEXT_RGB, font=font)
            banners[names] = base
        banner = base.copy()
        ImageDraw.Draw(banner).text(
            (4, 2), f"seed {clip.seed}   step {step} of {clip.steps}", TEXT_RGB, font=font
        )
        game = np.ascontiguousarray(frames[index]).astype(np.uint8)
        game = game.repeat(SCALE, axis=0).repeat(SCALE, axis=1)
        out.append(np.concatenate([np.asarray(banner), game]))
    out.extend([out[-1]] * HOLD_FRAMES)
    return np.stack(out)


def write_labelled_gif(clips: Sequence[Clip], path: str | Path) -> Path:
    """Write ``clips`` one after the other as one labelled GIF that loops; returns the
    path."""
    if not clips:
        raise ValueError("no clip to write")
    labelled = [label_clip(c) for c in clips]
    size = {c.shape[1:] for c in labelled}
    if len(size) > 1:
        raise ValueError(f"clips of different frame sizes: {sorted(size)}")
    return save_gif(np.concatenate(labelled), path)


PALETTE_SAMPLES = 24
"""Frames the shared palette is drawn from, evenly spread (day, night, every clip)."""


def save_gif(frames: np.ndarray, path: str | Path, fps: float = FPS) -> Path:
    """Write T×H×W×3 frames as they are, with one 256-colour palette for all of them.

    One palette, drawn from frames spread over the video, then each frame mapped to it
    without dithering: ~6× faster than a palette per frame and a third of the size, and
    the game's flat pixel art loses nothing visible."""
    from PIL import Image

    images = [Image.fromarray(np.ascontiguousarray(f), "RGB") for f in frames]
    picks = np.unique(np.linspace(0, len(images) - 1, PALETTE_SAMPLES).round().astype(int))
    sample = np.concatenate([frames[i] for i in picks], axis=0)
    palette = Image.fromarray(np.ascontiguousarray(sample), "RGB").quantize(
        colors=256, method=Image.Quantize.FASTOCTREE
    )
    indexed = [im.quantize(palette=palette, dither=Image.Dither.NONE) for im in images]
    return world_video.save_gif(indexed, path, fps)


async def render_report_video(head, final: tuple | None, path: Path) -> list[dict]:
    """Render the report's video episodes of the final evaluation (``final``: its
    request and result, see :func:`video_episodes`) on the environment actors, book
    their steps in the ledger (kind ``video``) and write them labelled to ``path``.
    Returns what each shows (seed, steps, success, cause, achievements); [] when there
    is nothing to show or rendering failed (logged)."""

    if final is None:
        return []
    request, result = final
    chosen = video_episodes(result.episodes)
    if not chosen:
        return []
    rendered: dict[int, object] = {}

    async def render(seed: int) -> None:
        req = dataclasses.replace(request, seeds=[seed], frames=True)
        got = await head.client.ask("@environment", req)
        # Booked by the request's key: a resume of a finished run renders the same
        # episodes again, and their lines replace these instead of being counted twice.
        ledger.append(head.run_dir, ledger.rollout_lines("video", got, job_key(req)))
        rendered[seed] = got

    try:
        with trio.fail_after(FINAL_WALL_S + 60):
            async with trio.open_nursery() as nursery:
                for episode in chosen:
                    nursery.start_soon(render, episode.seed)
    except (RemoteFailure, trio.TooSlowError) as exc:
        log.warning("video_failed", detail=str(exc))
        return []
    clips, shown = [], []
    for recorded in chosen:
        got = rendered[recorded.seed]
        episode = got.episodes[0]
        if not got.frames:
            log.warning("video_failed", detail=f"no frames for seed {recorded.seed}")
            return []
        if (episode.success, episode.steps, episode.achievements) != (
            recorded.success,
            recorded.steps,
            recorded.achievements,
        ):
            # The same seed should play the same episode; the label shows what was played.
            log.warning(
                "video_episode_differs",
                seed=recorded.seed,
                recorded_steps=recorded.steps,
                played_steps=episode.steps,
            )
        clips.append(
            Clip(
                frames_from_npz(got.frames),
                seed=episode.seed,
                steps=episode.steps,
                success=episode.success,
                cause=episode.cause,
                detail=episode.detail,
                achievements=list(episode.achievements),
            )
        )
        shown.append(
            {
                "seed": episode.seed,
                "steps": episode.steps,
                "success": episode.success,
                "cause": episode.cause,
                "achievements": _unique(episode.achievements),
            }
        )
    written = write_labelled_gif(clips, path)
    log.info("video_written", path=str(written), seeds=[s["seed"] for s in shown])
    return shown
