"""TensorBoard for the whole run: run-level figures beside every PPO job's curves.

Everything goes under one log dir, ``runs/<id>/tensorboard/``:

- ``<job>/PPO_1/`` — each PPO training job's curves, written by SB3 in the learner
  (``actors/learner.py``);
- ``run/`` — written here when the run finishes: per sub-action success per iteration
  (``success/<sub-action>``, ``success/task``; step = iteration), env steps after each
  iteration (``env_steps/after_iteration``), coded against learned per sub-action
  (``coded_vs_learned/<sub-action>/coded`` and ``/learned``), the final policy
  (``final/success_rate``, ``final/crafter_score``, ``final/crafter_score_all_episodes``,
  ``final/achievement/<name>``), env steps by kind (``env_steps/training``, ``/code``,
  ``/final``, ``/all_episodes``), tokens and calls (``tokens/in``, ``tokens/out``,
  ``agent/calls``), wall time (``run/wall_s``); the report's pictures
  (``plots/<name>``) and its episode video (``episode/video``, an animated GIF) as images;
  the final policy's stages as text (``final/policy``).

``tensorboard --logdir runs/<id>/tensorboard`` shows one run; ``--logdir runs`` every run
side by side. Files are written with the ``tensorboard`` package's own event writer and
protos: the head never imports torch or TensorFlow.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from messages.plan import TaskReport
from method.rates import best_rates

LOG_DIR = "tensorboard"
RUN_LOGS = "run"
"""Sub-folder of :data:`LOG_DIR` for the run-level figures (a 'run' in TensorBoard's list,
next to each PPO job's)."""
PLOTS = ("success.png", "achievements.png", "coded_vs_learned.png")


def log_dir(run_dir: Path) -> Path:
    """The run's TensorBoard log dir (every learner's job writes under it too)."""
    return Path(run_dir) / LOG_DIR


def write_run_events(run_dir: Path, report: TaskReport, summary: dict[str, Any]) -> Path:
    """Write the run-level event file (replacing one an earlier attempt wrote); returns
    its folder."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    folder = log_dir(run_dir) / RUN_LOGS
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("events.out.tfevents.*"):
        old.unlink()  # a resumed run writes the whole story again
    now = time.time()
    writer = EventFileWriter(str(folder))

    def emit(step: int, values: Iterable[Any], wall: float = now) -> None:
        writer.add_event(Event(wall_time=wall, step=step, summary=Summary(value=list(values))))

    def scalar(tag: str, value: float) -> Any:
        return Summary.Value(tag=tag, simple_value=float(value))

    try:
        iterations = _iterations(run_dir)
        for i, rates in enumerate(report.history, 1):
            wall = iterations.get(i, {}).get("wall", now)
            values = [scalar(f"success/{name}", rate) for name, rate in sorted(rates.items())]
            if "env_steps" in iterations.get(i, {}):
                values.append(scalar("env_steps/after_iteration", iterations[i]["env_steps"]))
            emit(i, values, wall)
        for name, rates in best_rates(report).items():
            values = [
                scalar(f"coded_vs_learned/{name}/{label}", rates[mode])
                for mode, label in (("code", "coded"), ("rl", "learned"))
                if mode in rates
            ]
            emit(0, values)
        final = [
            scalar("final/success_rate", report.final_success),
            scalar("final/crafter_score", summary.get("score_final", 0.0)),
            scalar("final/crafter_score_all_episodes", summary.get("score_all_episodes", 0.0)),
            scalar("env_steps/training", report.train_steps),
            scalar("env_steps/code", report.code_steps),
            scalar("env_steps/final", report.eval_steps),
            scalar("env_steps/all_episodes", summary.get("env_steps", 0)),
            scalar("tokens/in", summary.get("tokens_in", 0)),
            scalar("tokens/out", summary.get("tokens_out", 0)),
            scalar("agent/calls", summary.get("model_calls", 0)),
            scalar("run/wall_s", summary.get("wall_s", 0.0)),
        ]
        final += [
            scalar(f"final/achievement/{name}", rate)
            for name, rate in sorted(report.achievements.items())
        ]
        emit(len(report.history), final)
        images = [(f"plots/{Path(p).stem}", run_dir / p) for p in PLOTS]
        if summary.get("video"):
            images.append(("episode/video", run_dir / summary["video"]))
        emit(len(report.history), [_image(tag, path) for tag, path in images if path.is_file()])
        emit(len(report.history), [_text("final/policy", _policy_text(report, summary))])
    finally:
        writer.close()
    return folder


def _iterations(run_dir: Path) -> dict[int, dict[str, float]]:
    """Iteration → its wall time and env steps so far, from ``iteration_finished`` events
    (a resumed run's last attempt wins)."""
    found: dict[int, dict[str, float]] = {}
    path = Path(run_dir) / "events.jsonl"
    if not path.is_file():
        return found
    # errors="replace": a damaged byte spoils its own line, never the whole figure.
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if '"iteration_finished"' not in line:
                continue
            try:
                event = json.loads(line)
                entry = {"env_steps": float(event["env_steps"])}
                stamp = str(event.get("ts", "")).replace("Z", "+00:00")
                if stamp:
                    entry["wall"] = datetime.datetime.fromisoformat(stamp).timestamp()
                found[int(event["iteration"])] = entry
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a kill: the figure is only missing a point
    return found


def _image(tag: str, path: Path) -> Any:
    from PIL import Image
    from tensorboard.compat.proto.summary_pb2 import Summary

    with Image.open(path) as image:
        width, height = image.size
    return Summary.Value(
        tag=tag,
        image=Summary.Image(
            height=height, width=width, colorspace=3, encoded_image_string=path.read_bytes()
        ),
    )


def _text(tag: str, text: str) -> Any:
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.compat.proto.types_pb2 import DT_STRING

    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
    tensor = TensorProto(
        dtype=DT_STRING,
        string_val=[text.encode()],
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
    )
    return Summary.Value(tag=tag, metadata=metadata, tensor=tensor)


def _policy_text(report: TaskReport, summary: dict[str, Any]) -> str:
    rows = ["| stage | kind |", "|---|---|"]
    rows += [
        f"| {st.subtask.name} | {'learned (PPO)' if st.policy_path else 'coded'} |"
        for st in report.stages
    ]
    rows += [
        f"| need: {n.label()} | {'learned (PPO)' if n.stage.policy_path else 'coded'} |"
        for n in report.needs
    ]
    head = (
        f"final success {report.final_success:.0%} on {report.final_episodes} unseen worlds; "
        f"bundle: {summary.get('policy') or 'none'}"
    )
    return head + "\n\n" + "\n".join(rows)
