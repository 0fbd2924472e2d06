#!/usr/bin/env bash
# Distributed GPU check for a machine with torch and transformers but no Ray, no vLLM and no
# network (the lent GPU machine): trainer.distributed.rank.Rank under torchrun on CUDA with NCCL,
# the FSDP2 update in bf16 mixed precision of a random Qwen2 of about 0.5B parameters, on 1 rank
# and, with 2 or more GPUs, on 2. Prints one table: tokens/s, peak memory per rank, the
# bucketed full-gather time. Under 8 minutes on H100-class GPUs.
#
#   bash benchmarks/gpu_distributed_check.sh            # from the repository root
#   GPUS=1 bash benchmarks/gpu_distributed_check.sh     # only the 1-rank run
#
# Uses the machine's python3 and its packages (torchrun comes with torch); the project's pins
# do not apply there. Extra arguments go to benchmarks/gpu_distributed_check.py (--responses,
# --response-len, --micro-batch, --bucket-mb, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=. OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
# torchrun's ranks rendezvous on loopback: no network needed.
export MASTER_ADDR=127.0.0.1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
OUT=${OUT:-var/gpu_distributed_check}
mkdir -p "$OUT"
nvidia-smi -L >&2 || true
available=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
if [ "$available" -lt 1 ]; then
    echo "gpu_distributed_check: no CUDA GPU visible" >&2
    exit 1
fi
gpus=${GPUS:-$(( available >= 2 ? 2 : 1 ))}
if [ ! -f "$OUT/model/config.json" ]; then
    timeout 120 "$PY" benchmarks/gpu_distributed_check.py --make-model "$OUT/model"
fi
rows=()
for n in $(seq 1 "$gpus"); do
    # 1 rank, then 2: each run its own torchrun (its own process group), at most 3 minutes.
    timeout 180 "$PY" -m torch.distributed.run --standalone --nproc_per_node="$n" \
        benchmarks/gpu_distributed_check.py --model "$OUT/model" --out "$OUT/ranks-$n.json" \
        "$@" >&2
    rows+=("$OUT/ranks-$n.json")
done
"$PY" - "${rows[@]}" <<'EOF'
import json, sys
rows = [json.load(open(p)) for p in sys.argv[1:]]
print("| ranks | GPU | parameters | tokens per update | update (s) | trained tokens/s | "
      "tokens/s per rank | peak memory per rank (GiB) | full gather (s, bucket MiB) | "
      "rank start-up (s) | finite |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
for r in rows:
    print(f"| {r['ranks']} | {r['gpu']} | {r['params'] / 1e6:,.0f}M | "
          f"{r['tokens_per_update']:,} | {r['update_s']:.2f} | {r['tokens_per_s']:,.0f} | "
          f"{r['tokens_per_s'] / r['ranks']:,.0f} | {r['peak_gib']:.1f} | "
          f"{r['full_gather_s']:.3f} ({r['bucket_mb']}) | {r['rank_build_s']:.1f} | "
          f"{'ok' if r['finite'] else 'FAIL'} |")
EOF
