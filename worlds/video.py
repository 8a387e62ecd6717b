"""Episode videos: the frames a rollout returns (``RolloutResult.frames``) as an animated GIF.

Frames travel as an ``.npz`` holding one uint8 array ``frames`` of shape T×H×W×3 (see
``actors.environment.frames_npz``). :func:`write_gif` writes them with Pillow (a Crafter
dependency): long episodes keep every k-th frame so that at most ``max_frames`` remain,
large frames are shrunk so that their longer side is at most ``max_side`` pixels, and
small ones (Crafter's 64×64) are enlarged by a whole factor, nearest-neighbour, so that
the pixel art stays sharp in a viewer.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
from PIL import Image

DEFAULT_FPS = 15
DEFAULT_MAX_FRAMES = 600
"""40 s at 15 fps: a GIF of a 64×64 episode stays within a few MB."""
DEFAULT_MAX_SIDE = 512
"""Longest side of a written frame, in pixels."""
DEFAULT_MIN_SIDE = 192
"""Frames smaller than this are enlarged by the largest whole factor that fits."""


def frames_from_npz(blob: bytes) -> np.ndarray:
    """The frames array (T×H×W×3 uint8) of an ``.npz`` a rollout returned."""
    if not blob:
        raise ValueError("no frames: ask for them with RolloutRequest(frames=True)")
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        return _check(data["frames"])


def write_gif(
    frames: bytes | np.ndarray,
    path: str | os.PathLike[str],
    *,
    fps: float = DEFAULT_FPS,
    max_frames: int = DEFAULT_MAX_FRAMES,
    max_side: int = DEFAULT_MAX_SIDE,
    min_side: int = DEFAULT_MIN_SIDE,
) -> Path:
    """Write ``frames`` (``.npz`` bytes or a T×H×W×3 array) as an animated GIF that loops;
    returns the path. Frames beyond ``max_frames`` are thinned evenly (the last frame
    is always kept), so the GIF plays faster than the episode but shows all of it."""
    array = frames_from_npz(frames) if isinstance(frames, bytes) else _check(np.asarray(frames))
    if fps <= 0 or max_frames < 1:
        raise ValueError(f"fps and max_frames must be positive, not {fps}, {max_frames}")
    if len(array) > max_frames:
        keep = np.unique(np.linspace(0, len(array) - 1, max_frames).round().astype(int))
        array = array[keep]
    height, width = array.shape[1:3]
    longest = max(height, width)
    if longest > max_side:
        scale = max_side / longest
    elif longest < min_side:
        scale = float(max(1, min_side // longest))
    else:
        scale = 1.0
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    resample = Image.Resampling.NEAREST if scale >= 1 else Image.Resampling.LANCZOS
    images = []
    for frame in array:
        image = Image.fromarray(np.ascontiguousarray(frame), "RGB")
        if size != (width, height):
            image = image.resize(size, resample)
        images.append(image)
    return save_gif(images, path, fps)


def save_gif(images: list, path: str | Path, fps: float) -> Path:
    """Write PIL images as a looping GIF at ``fps``, atomically (a ``.part`` file renamed
    into place: a reader never sees half a file)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    images[0].save(
        tmp,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=max(20, round(1000 / fps)),  # browsers treat < 20 ms as 100 ms
        loop=0,
        disposal=1,
    )
    os.replace(tmp, out)
    return out


def _check(array: np.ndarray) -> np.ndarray:
    if array.ndim != 4 or array.shape[-1] != 3 or len(array) == 0:
        raise ValueError(f"frames must be a non-empty T×H×W×3 array, not shape {array.shape}")
    if array.dtype != np.uint8:
        array = np.clip(array, 0, 255).astype(np.uint8)
    return array
