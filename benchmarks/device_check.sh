#!/usr/bin/env bash
# The GPU machine's checks, in one short script (throughput issue): run from the repository
# root on a machine with a CUDA GPU and many cores. Three parts, each writing to $OUT:
#   1. a learner trains on cuda: bench_method's quick run with [actors.learner] device set
#      to $LEARNER_DEVICE; the learners' own training events (the device torch used) are kept;
#   2. the scaling curve: bench_scaling.py, bare loops and environment actors at $WORKERS;
#   3. the default diamond run with actor counts from the machine's cores (bench_method.py),
#      stopped at $DIAMOND_S seconds if still going (bench_method --max-s: the figures of
#      what it booked by then, marked as cut).
# Packages the machine lacks travel as wheels in .whl (installed into /tmp/site when present;
# NO_WHEELS=1 skips them, for a try of this script on a machine that has the project installed).
set -u -o pipefail
out="${OUT:-$(mktemp -d)}"
LEARNER_DEVICE="${LEARNER_DEVICE:-cuda}"
WORKERS="${WORKERS:-1,2,4,8,16}"
DIAMOND_S="${DIAMOND_S:-300}"
PY="${PY:-python3}"
PARTS="${PARTS:-123}"  # which of the three parts to run, e.g. PARTS=23
export PYTHONUNBUFFERED=1
if [ -z "${NO_WHEELS:-}" ] && compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
        .whl/*.whl || exit 3
    export PYTHONPATH="/tmp/site:$PWD"
fi
{
    date -u
    nproc
    nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
    "$PY" -c 'import sys, torch, numpy, numba, crafter, stable_baselines3 as sb3, zmq, trio
print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(),
      "numpy", numpy.__version__, "numba", numba.__version__, "sb3", sb3.__version__,
      "pyzmq", zmq.__version__, "libzmq", zmq.zmq_version(), "trio", trio.__version__)'
    git rev-parse HEAD 2>/dev/null
} 2>&1 | tee "$out/versions.txt"

if [[ "$PARTS" == *1* ]]; then
echo "== 1. learner on $LEARNER_DEVICE (bench_method quick config)"
"$PY" - "$LEARNER_DEVICE" >/tmp/quick_device.toml <<'PYCODE'
import sys
sys.path.insert(0, "benchmarks")
from bench_method import QUICK
print(QUICK + f'device = "{sys.argv[1]}"')
PYCODE
"$PY" benchmarks/bench_method.py --config /tmp/quick_device.toml --limit-s 5 \
    --json "$out/quick_device.json" 2>&1 | tee "$out/log.txt"
"$PY" - "$out" <<'PYCODE' 2>&1 | tee -a "$out/log.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
try:
    run = pathlib.Path(json.loads((out / "quick_device.json").read_text())["run_dir"])
except (OSError, KeyError, ValueError) as exc:
    sys.exit(f"no run to read: {exc}")
kept = [line for line in (run / "events.jsonl").read_text().splitlines()
        if '"device"' in line or '"actor_counts"' in line]
(out / "device_events.jsonl").write_text("\n".join(kept) + "\n")
import gzip, shutil
with (run / "events.jsonl").open("rb") as src, gzip.open(out / "events.jsonl.gz", "wb") as dst:
    shutil.copyfileobj(src, dst)  # the whole run's events, to read what the learner did
devices = sorted({json.loads(x).get("device") for x in kept} - {None})
print(f"learner events naming a device: {len(kept)}; devices: {devices}")
PYCODE
fi

if [[ "$PARTS" == *2* ]]; then
echo "== 2. scaling curve ($WORKERS workers)"
"$PY" benchmarks/bench_scaling.py --workers "$WORKERS" --json "$out/scaling.json" 2>&1 \
    | tee -a "$out/log.txt"
fi

if [[ "$PARTS" == *3* ]]; then
echo "== 3. the default diamond run, actor counts from $(nproc) cores (stopped at $DIAMOND_S s)"
"$PY" benchmarks/bench_method.py --limit-s 10 --max-s "$DIAMOND_S" \
    --json "$out/diamond.json" 2>&1 | tee -a "$out/log.txt"
fi
