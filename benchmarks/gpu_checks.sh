#!/usr/bin/env bash
# The GPU checks of a lent CUDA machine, as one prepared run (a few minutes), most important
# first as the lease may end: install this checkout; the fused masks' bits against the CPU
# reference; benchmarks/gpu.py; the engine against the serial model on CUDA (world sizes 1 to 8,
# several ranks sharing the GPU); `plexus-train --device cuda` on 1x1x1 and 2x2x2 (equal to
# 1e-4); two-level collectives and a placed grid, 4 ranks on 2 virtual nodes; the set-up of
# R-MAT 20.
#   bash benchmarks/gpu_checks.sh [OUT_DIR]      (default: $OUT, else gpu-out)
#   STEPS="masks gpu-bench" bash benchmarks/gpu_checks.sh   (only the steps named)
# Everything goes to OUT_DIR/log.txt (and the benchmark's gpu.txt / gpu.json); the tail of the
# log is a summary. The lent machine sends back at most 8 files of $OUT: give it a subfolder and
# pack that into one archive (bash benchmarks/gpu_checks.sh $OUT/r; tar czf $OUT/r.tgz -C $OUT r).
# Each step runs whatever the previous one did: one failure costs one step.
source "$(dirname "$0")/gpu_lib.sh"  # OUT, LOG, say, step; the checkout installed
say "$(python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)')"

step masks 240 python3 -m pytest -q -p no:cacheprovider --rootdir="$REPO" "$REPO/tests/engine/test_masks.py"
step gpu-bench 400 python3 "$REPO/benchmarks/gpu.py" --out "$OUT" ${GPU_BENCH_ARGS:-}
step check-8 300 plexus-bench check --device cuda --world-size 8
T=(plexus-train --device cuda --epochs 30 --seed 3 --hidden 64 --dropout 0.5 --no-cache)
step cora-1x1x1 240 "${T[@]}" --grid 1x1x1 --log-json "$OUT/cora111.jsonl"
step cora-2x2x2 300 "${T[@]}" --grid 2x2x2 --log-json "$OUT/cora222.jsonl"
step cora-gat-1x1x1 240 "${T[@]}" --model gat --heads 4 --hidden 8 --grid 1x1x1
# LABEL EPOCHS A.jsonl B.jsonl: two runs' losses, epoch by epoch, equal to 1e-4 (one GPU)
LOSSES_AGREE="$OUT/losses_agree.py"
cat > "$LOSSES_AGREE" <<'EOF'
import json, sys
label, epochs, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:5]
runs = [[json.loads(l) for l in open(p)] for p in paths]
loss = [[r["loss"] for r in run if "loss" in r and "epoch" in r] for run in runs]
diff = max(abs(a - b) for a, b in zip(*loss))
print(f"{label} on one GPU: {len(loss[0])} epochs, max |loss difference| {diff:.2e}",
      "PASS" if diff <= 1e-4 and len(loss[0]) == len(loss[1]) == epochs else "FAIL")
EOF
step compare 60 python3 "$LOSSES_AGREE" "2x2x2 vs 1x1x1" 30 "$OUT/cora111.jsonl" \
    "$OUT/cora222.jsonl"
# the kinds written as plexus.nn layers since (issue 57): each on 1x1x1 and 2x1x2 of one GPU,
# with dropout, equal to 1e-4
for K in "gatv2 --heads 2 --hidden 16" "appnp --hops 5" "gcnii --layers 4"; do
    k=${K%% *}
    step "$k-1x1x1" 240 "${T[@]}" --model $K --epochs 10 --grid 1x1x1 --log-json "$OUT/$k-1.jsonl"
    step "$k-2x1x2" 240 "${T[@]}" --model $K --epochs 10 --grid 2x1x2 --log-json "$OUT/$k-4.jsonl"
    step "$k-compare" 60 python3 "$LOSSES_AGREE" "$k 2x1x2 vs 1x1x1" 10 "$OUT/$k-1.jsonl" \
        "$OUT/$k-4.jsonl"
done
# issue 55 item 7: collectives in two levels and a node's block of the grid, 4 ranks sharing the
# GPU on 2 virtual nodes: the placed flat run equals the launcher-numbered one bit for bit, the
# two-level one to rounding
H=(plexus-train --device cuda --grid 2x1x2 --gpus-per-node 2 --epochs 10 --seed 3 --no-cache)
step nodes-flat 240 "${H[@]}" --collectives flat --log-json "$OUT/flat.jsonl"
step nodes-placed 240 "${H[@]}" --collectives flat --placement 2x1x1 --log-json "$OUT/placed.jsonl"
step nodes-two-level 240 "${H[@]}" --grid 1x1x4 --collectives hierarchical \
    --log-json "$OUT/two.jsonl"
step nodes-compare 60 python3 - "$OUT/flat.jsonl" "$OUT/placed.jsonl" "$OUT/two.jsonl" <<'EOF'
import json, sys
runs = [[json.loads(l) for l in open(p)] for p in sys.argv[1:]]
loss = [[r["loss"] for r in run if "loss" in r and "epoch" in r] for run in runs]
links = [next(r for r in run if "comm_bytes_per_link" in r)["comm_bytes_per_link"] for run in runs]
same = loss[0] == loss[1] and len(loss[0]) == 10
print(f"placed 2x1x1 vs launcher, flat: losses bit-identical {same}; links {links[0]} -> "
      f"{links[1]}", "PASS" if same else "FAIL")
gap = max(abs(a - b) for a, b in zip(loss[0], loss[2]))
print(f"two levels on 1x1x4 vs flat 2x1x2: max |loss difference| {gap:.2e}; links {links[2]}",
      "PASS" if gap <= 1e-4 else "FAIL")
EOF
R20=(plexus-train --device cuda --grid 1x1x1 --epochs 10 --layers 3 --hidden 256 --order agg
     --dataset "rmat:scale=20,edge_factor=16,features=128,classes=16,seed=0" --quiet)
step setup-rmat20-nocache 300 "${R20[@]}" --no-cache
export PLEXUS_CACHE_DIR=/tmp/plexus-cache  # a fresh cache: the first run builds the store
step setup-rmat20-cache1 300 "${R20[@]}"
step setup-rmat20-cache2 300 "${R20[@]}"

echo >> "$LOG"
for line in "${SUMMARY[@]}"; do say "$line"; done
grep -hE "checks passed|PASS|FAIL|wall time|memory per rank|max \|loss" "$LOG" | tail -40
sed -n '/^device:/,$p' "$OUT/gpu.txt" 2>/dev/null
