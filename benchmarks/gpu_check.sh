#!/usr/bin/env bash
# GPU check for a machine with torch and transformers but no vLLM and no network (the lent
# GPU machine): the hf backend on CUDA. Under 8 minutes on one large GPU. Prints one table.
#
#   bash benchmarks/gpu_check.sh            # from the repository root
#
# Needs the warm-started tiny model at var/models/tiny (carry it along: 3 MB), or warm-starts
# one first (CPU, a few minutes). Uses the machine's python3 and its packages; the project's
# pins do not apply there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=. OMP_WAIT_POLICY=PASSIVE
if [ ! -f var/models/tiny/config.json ]; then
    echo "gpu_check: warm-starting the tiny model (no var/models/tiny)" >&2
    "$PY" -m trainer warmstart --max-seconds 240 >&2
fi
nvidia-smi -L >&2 || true
exec timeout 450 "$PY" benchmarks/gpu_check.py "$@"
