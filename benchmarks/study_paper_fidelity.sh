#!/usr/bin/env bash
# The issue-9 study (docs/study-algorithms.md, "Paper fidelity"): two warm-start regimes side by
# side (--target 0.6, today's warm start, and 0.3, harder), each with every arm x 3 seeds, JOBS
# runs at a time per regime (one torch thread each); needs 2 x JOBS free cores.
# Usage: benchmarks/study_paper_fidelity.sh OUT_DIR [STEPS] [JOBS]
# (The study in the docs ran these same commands by hand, JOBS = 1, the 0.3 regime started once
# its warm start had finished.)
#   STEPS (default 40) training steps per run; held-out evaluation (EVAL_PROMPTS prompts, default
#   100, k = 32) at step 0 and at the end; B = 32 in 4 mini-batches of 8 prompts (4 optimiser
#   steps) for every arm.
# BUDGET_S (default 2400) bounds the runs' wall time: whatever finished by then is summarised.
set -u
OUT=${1:?output directory}
STEPS=${2:-40}
JOBS=${3:-8}
BUDGET_S=${BUDGET_S:-2400}
PY=${PYTHON:-python3}
# The issue's five arms first, then grpo-n8 and ada-est (Est against its budget-matched GRPO):
# a run cut by BUDGET_S loses the optional ones. (With many JOBS, longest first ends sooner.)
ARMS=${ARMS:-grpo,grpo-n16,dapo,ada-pos,ada-balance,grpo-n8,ada-est}
EVAL_PROMPTS=${EVAL_PROMPTS:-100}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
# The warm starts first, both at once (half the cores each); the study builds none itself then.
for T in 0.6 0.3; do
  M=var/models/tiny-target-$T
  [ -f $M/config.json ] || TRAINER_NUM_THREADS=$JOBS nice -n 10 $PY -m trainer warmstart --out $M \
      --target-pass-rate $T --max-seconds ${WARMSTART_S:-150} > "$OUT/warmstart-$T.log" 2>&1 &
done
wait
for T in 0.6 0.3; do cp var/models/tiny-target-$T/warmstart_report.json "$OUT/warmstart-$T.json"; done
common=(--seeds 0,1,2 --steps "$STEPS" --only $ARMS --set ppo_mini_batch_size=8
        --set eval_every="$STEPS" --set eval_k=32 --set eval_num_prompts="$EVAL_PROMPTS")
for T in 0.6 0.3; do
  timeout "$BUDGET_S" nice -n 10 $PY benchmarks/study_algorithms.py "${common[@]}" --target $T \
      --jobs "$JOBS" --runs-dir var/study9/target-$T > /dev/null 2> "$OUT/run-$T.log" &
done
wait
for T in 0.6 0.3; do
  $PY benchmarks/study_algorithms.py "${common[@]}" --target $T --no-run \
      --runs-dir var/study9/target-$T --json "$OUT/study-$T.json" > "$OUT/study-$T.md" 2>> "$OUT/run-$T.log"
done
