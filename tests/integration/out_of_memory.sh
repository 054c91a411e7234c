#!/usr/bin/env bash
# Running out of memory exits 2 with one line that says where (the pass and
# step, evaluation, the data layer's start), what did not fit against the
# device's memory, which of the engine's phases made the tensors it held,
# and which keys to change (and a run that fits says what its peak held):
# on an emulated GPU of 64 MiB
# (RIG_CUDA_EMULATOR_MEMORY_MB, host-only: nothing runs, so it is quick) in
# training and in evaluation, and on the host for a data set larger than it.
# Usage: out_of_memory.sh RIG TINY_EXPERIMENT WORKDIR
set -euo pipefail
export LC_ALL=C RIG_PROGRESS=0
rig="$(realpath "$1")"; tiny="$(realpath "$2")"; work="$3"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"

big=(--batch_size_per_gpu=1000000 --data_layer_params/num_samples=1000000
     --data_layer_params/num_eval_samples=1000000)
(
  export RIG_CUDA_EMULATOR=1 RIG_CUDA_EMULATOR_HOST_ONLY=1 RIG_CUDA_EMULATOR_MEMORY_MB=64
  expect_error '^rig: error: out of memory on cuda:0 in the forward pass of step 0: a tensor of [0-9.]+ MiB did not fit\. cuda:0 has 64\.0 MiB: rig.s tensors hold [0-9.]+ [KMG]?i?B \(made by the data layer.s batch [0-9.]+ MiB, the model.s parameters [^)]*\), .*[0-9.]+ MiB is free\. To fit, lower batch_size_per_gpu \(now 1000000\) and raise iter_size \(now 1\) .*batch_size_per_gpu 500000 with iter_size 2 .*dtype: mixed' \
    run "$tiny" --device=cuda --logdir train "${big[@]}"
  # The same size at the experiment's batch trains; its evaluation at a large one does not.
  check "$rig" run "$tiny" --device=cuda --logdir ok --max_steps=2 > ok.log
  # What the peak was made of, after training.
  grep -q "^\*\*\* Tensors at the peak, .*, by what made them:$" ok.log ||
    fail "ok.log does not say what the peak memory was made of"
  grep -Eq "^\*\*\*   the forward pass +[0-9.]+ [KMG]?i?B: " ok.log ||
    fail "ok.log's peak memory has no forward pass line"
  expect_error '^rig: error: out of memory on cuda:0 in evaluation: a tensor of .* did not fit\. .* To fit, lower batch_size_per_gpu in eval_params \(now 1000000\)\.$' \
    run "$tiny" --mode eval --device=cuda --logdir ok "${big[@]}"
  grep -q bad_alloc err.txt && fail "the message names std::bad_alloc"
  export RIG_CUDA_EMULATOR_MEMORY_MB=64GB
  expect_error '^rig: error: RIG_CUDA_EMULATOR_MEMORY_MB=64GB: expected the emulated GPU.s memory as a whole number of MiB' \
    run "$tiny" --device=cuda --logdir bad
)
(
  export RIG_HOST_MEMORY_CHECK=yes
  expect_error '^rig: error: RIG_HOST_MEMORY_CHECK=yes: expected 0 ' run "$tiny" --device=cpu \
    --logdir host-check
)
# The host: a data set of twice its memory. Where Linux overcommits without
# limit (vm.overcommit_memory 1) it would be given and then killed for: skipped.
if [ "$(cat /proc/sys/vm/overcommit_memory 2>/dev/null || echo 0)" = 1 ]; then
  echo "out_of_memory: PASS (the host part skipped: vm.overcommit_memory is 1)"
  exit 0
fi
total_kb=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)
samples=$((total_kb * 1024 * 2 / 16))  # 4 features of 4 bytes a sample
expect_error "^rig: error: out of memory on the host in the data layer's start: data_layer 'synthetic' could not allocate what it needs\. To fit, lower batch_size_per_gpu \(now 16\) or what data_layer_params hold in memory\.$" \
  run "$tiny" --device=cpu --logdir host --data_layer_params/num_samples=$samples
echo "out_of_memory: PASS"
