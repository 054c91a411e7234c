#!/usr/bin/env bash
# Convergence of parameter-server training on Fashion-MNIST: for 3 seeds, the
# same budget (fixtures/ps-fashion-mnist.yaml: ResNet-8, 300 steps of 2 x 64
# images) on 2 workers + 1 server, synchronous (max_staleness 0) and
# asynchronous (max_staleness -1, MXNet's dist_async); each final checkpoint
# evaluated on the 10 000 test images in one process. Checks: every run ends
# (exit 0) at global step 300 (no push lost), no train or validation loss is
# nan / inf, synchronous accuracy >= 80% (the comparison means something),
# asynchronous accuracy >= synchronous - 1 point. Prints a table and the time.
# About 2 to 3 minutes on 2 cores (this machine's speed varies).
# Usage: ps_convergence.sh RIG WORKDIR [EXPERIMENT]   (default: fixtures/ps-fashion-mnist.yaml)
set -euo pipefail
export LC_ALL=C
here="$(cd "$(dirname "$0")" && pwd)"
rig="$(realpath "$1")"; work="$2"
exp="$(realpath "${3:-$here/fixtures/ps-fashion-mnist.yaml}")"
source "$here/testlib.sh"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || { echo "SKIP: no $data (apt-get install dataset-fashion-mnist)"; exit 77; }
rm -rf "$work"; mkdir -p "$work"; cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 RIG_PROGRESS=0
started=$(date +%s)

seeds=(1 2 3)
steps=300
tolerance=1.0  # accuracy points asynchronous may lose
min_sync=80.0  # synchronous accuracy (%) below which the comparison says nothing

# logged LOG CMD...: echo CMD, run it with its output in LOG; show LOG if it fails.
logged() {
  local log="$1"; shift
  echo "+ $*"
  local code=0
  "$@" > "$log" 2>&1 || code=$?
  if [ "$code" -ne 0 ]; then cat "$log"; fail "exit $code: $*"; fi
}
# The losses of a log ("Train loss: X", "Validation loss: X"): each must be a number.
finite_losses() {
  local log="$1" what="$2" values
  values=$(grep -Eo "$what loss: [^ ]+" "$log" | awk '{ print $NF }')
  [ -n "$values" ] || fail "$log: no $what loss"
  while read -r v; do
    [[ "$v" =~ ^[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?$ ]] || fail "$log: $what loss $v"
  done <<< "$values"
}
# train SEED STALENESS LOGDIR: 2 workers + 1 server.
train() {
  logged "$3.log" "$rig" run --nproc 2 --servers 1 "$exp" --logdir "$3" --random_seed="$1" \
    --max_steps="$steps" --communicator_params/max_staleness="$2"
  finite_losses "$3.log" Train
  grep -q "Parameter server: global step $steps;" "$3.log" ||
    { cat "$3.log"; fail "$3: the servers did not reach global step $steps"; }
}
# evaluate LOGDIR: its last checkpoint on the test set, one process.
evaluate() {
  logged "$1.eval.log" "$rig" run "$exp" --mode eval --logdir "$1" --communicator=local
  finite_losses "$1.eval.log" Validation
  grep -q "Evaluated 10000 samples" "$1.eval.log" || fail "$1: not the 10 000 test images"
}
# accuracy LOGDIR: Acc@1 in percent, from the evaluation's log.
accuracy() {
  sed -n 's/^\*\*\* Validation Acc@1: //p' "$1.eval.log" | awk '{ printf "%.2f", 100 * $1 }'
}
max_staleness_seen() {
  grep -o 'reads served: mean [0-9.]*, max [0-9]*' "$1" | awk '{ print $NF }'
}

rows=()
stale_any=0
for seed in "${seeds[@]}"; do
  echo "== seed $seed"
  train "$seed" 0 "sync$seed"
  grep -q "reads served: mean 0.00, max 0 " "sync$seed.log" || fail "synchronous reads were stale"
  train "$seed" -1 "async$seed"
  evaluate "sync$seed"
  evaluate "async$seed"
  sync=$(accuracy "sync$seed")
  async=$(accuracy "async$seed")
  if [ -z "$sync" ] || [ -z "$async" ]; then fail "no Acc@1 in the evaluations of seed $seed"; fi
  stale=$(max_staleness_seen "async$seed.log")
  if [ "$stale" -gt 0 ]; then stale_any=1; fi
  rows+=("$(printf '%-6s %10s %10s %+8.2f %14s' "$seed" "$sync" "$async" \
    "$(awk -v a="$async" -v s="$sync" 'BEGIN { print a - s }')" "$stale")")
  echo "seed $seed: synchronous $sync%, asynchronous $async% (max staleness $stale)"
done

echo
printf '%-6s %10s %10s %8s %14s\n' seed "sync %" "async %" diff "async max st."
printf '%s\n' "${rows[@]}"
echo "elapsed: $(( $(date +%s) - started )) s"

bad=0
for row in "${rows[@]}"; do
  read -r seed sync async _ <<< "$row"
  if awk -v s="$sync" -v m="$min_sync" 'BEGIN { exit !(s < m) }'; then
    echo "FAIL: seed $seed: synchronous accuracy $sync% < $min_sync%"; bad=1
  fi
  if awk -v a="$async" -v s="$sync" -v t="$tolerance" 'BEGIN { exit !(a < s - t) }'; then
    echo "FAIL: seed $seed: asynchronous $async% is more than $tolerance point below synchronous $sync%"
    bad=1
  fi
done
[ "$stale_any" -eq 1 ] || { echo "FAIL: no asynchronous read was stale: nothing asynchronous tested"; bad=1; }
[ "$bad" -eq 0 ] || exit 1
echo "PASS"
