"""Compute devices: check at start-up that the one asked for exists."""

from __future__ import annotations

import re

_DEVICE = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


class DeviceError(ValueError):
    """The device string is malformed or names hardware this machine lacks."""


def check_device(device: str) -> str:
    """Return ``device`` if usable here, else raise :class:`DeviceError` saying why.
    torch is imported only for cuda devices (it costs seconds to import)."""
    match = _DEVICE.match(device)
    if match is None:
        raise DeviceError(f"device {device!r}: expected cpu, cuda or cuda:N")
    if match.group(1) == "cpu":
        if match.group(2) is not None:
            raise DeviceError(f"device {device!r}: write plain 'cpu'")
        return device
    import torch

    if not torch.cuda.is_available():
        raise DeviceError(f"device {device!r}: this machine has no usable CUDA GPU; use cpu")
    index = int(match.group(2) or 0)
    count = torch.cuda.device_count()
    if index >= count:
        raise DeviceError(
            f"device {device!r}: this machine has {count} CUDA device(s): cuda:0..cuda:{count - 1}"
        )
    return device
