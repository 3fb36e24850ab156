#!/usr/bin/env bash
# The performance model on a lent CUDA machine, as one prepared run (about 5 minutes), most
# important first as the lease may end: install this checkout; calibrate the GPU
# (plexus-bench calibrate --device cuda: fp32 and bf16 rates with CUDA events, the fused
# dropout-mask pass, NCCL links when the node has several GPUs); calibrate, predict and measure
# 1x1x1 epochs of GCN, SAGE and GAT on R-MAT 17, 19 and 21 in fp32 and bf16
# (benchmarks/gpu_model.py: predicted/measured per case, the target [0.75, 1.33]); price
# papers100M on 64-1024 GPUs with that calibration beside the built-in profile.
#   bash benchmarks/gpu_model_checks.sh [OUT_DIR]      (default: $OUT, else gpu-out)
#   STEPS="calibrate model" bash benchmarks/gpu_model_checks.sh   (only the steps named)
# Everything goes to OUT_DIR/log.txt (and calibration.json, gpu_model.txt / .json); the tail
# of the log is a summary. Commit OUT_DIR/gpu_model.txt as benchmarks/results/gpu_model.txt.
source "$(dirname "$0")/gpu_lib.sh"  # OUT, LOG, say, step; the checkout installed
say "$(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)')"

CAL="$OUT/calibration.json"
step calibrate 240 plexus-bench calibrate --device cuda --out "$CAL"
step model 420 python3 "$REPO/benchmarks/gpu_model.py" --calibration "$CAL" --out "$OUT" \
    ${GPU_MODEL_ARGS:-}
M=(plexus-model --dataset ogbn-papers100M --gpus 64,256,1024 --gpus-per-node 4 --top 3)
step papers-profile 60 "${M[@]}"
step papers-calibrated 60 "${M[@]}" --calibration "$CAL"

echo >> "$LOG"
for line in "${SUMMARY[@]}"; do say "$line"; done
grep -hE "^SpMM|^wrote|calibration:" "$LOG" | head -6
sed -n '/^case/,$p' "$OUT/gpu_model.txt" 2>/dev/null
