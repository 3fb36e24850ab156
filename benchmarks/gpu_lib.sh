# The shared part of the lent-GPU scripts (gpu_checks.sh, gpu_model_checks.sh), sourced by
# them: the output folder and log, `say`, `step` (a named step with a time limit, whose rc and
# time go to the summary; STEPS="a b" runs only the steps named), and this checkout's three
# projects (datasets, partitioners, the engine) installed into a folder of its own on the lent
# machine.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$(mkdir -p "${1:-${OUT:-gpu-out}}" && cd "${1:-${OUT:-gpu-out}}" && pwd)
SITE=/tmp/plexus-site
LOG="$OUT/log.txt"
: > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }
SUMMARY=()
step() {  # step NAME TIMEOUT_S command...: run it, keep its output in the log, note rc and time
    local name=$1 limit=$2; shift 2
    [[ -n ${STEPS:-} && " $STEPS " != *" $name "* ]] && return 0
    local start=$SECONDS
    echo "== $name: $*" >> "$LOG"
    (cd /tmp && timeout "$limit" "$@") >> "$LOG" 2>&1
    local rc=$?
    SUMMARY+=("$(printf '%-22s rc=%-3s %4ss' "$name" "$rc" $((SECONDS - start)))")
    echo "   rc=$rc $((SECONDS - start))s" >> "$LOG"
}

say "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)"
python3 -m pip install -q --no-deps --no-build-isolation --target "$SITE" \
    "$REPO/datasets" "$REPO/partitioners" "$REPO" >> "$LOG" 2>&1 \
    || { tail -20 "$LOG"; exit 1; }
export PYTHONPATH=$SITE PATH="$SITE/bin:$PATH" PYTHONUNBUFFERED=1
