#!/usr/bin/env bash
# tools/largest-batch on an emulated GPU of 64 MiB: the batch it reports fits
# (with what its peak held) and the next one runs out of memory when rig is
# run by hand; --max reached
# exits 1; bad usage and a try that fails for another reason exit 2.
# Usage: largest_batch.sh TOOL RIG TINY_EXPERIMENT WORKDIR
set -euo pipefail
export LC_ALL=C RIG_PROGRESS=0
tool="$(realpath "$1")"; rig="$(realpath "$2")"; tiny="$(realpath "$3")"; work="$4"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
data=(--data_layer_params/num_samples=4000000)

check "$tool" "$rig" "$tiny" --memory-mb 64 --start 100000 -- "${data[@]}" > search.log
cat search.log
answer="$(sed -n 's/.* of 64 MiB is \([0-9]*\) (.*); \([0-9]*\) runs out of memory$/\1 \2/p' search.log)"
read -r good bad <<<"$answer" || true
[ -n "${good:-}" ] && [ "$bad" -eq $((good + 1)) ] || fail "no answer of neighbours in search.log"
grep -q '^  Tensors at the peak, .*, by what made them:$' search.log &&
  grep -Eq '^    the forward pass +[0-9.]+ [KMG]?i?B: ' search.log ||
  fail "search.log does not say what the answer's peak held"
# Checked by hand, as the tool's tries are made.
export RIG_CUDA_EMULATOR=1 RIG_CUDA_EMULATOR_HOST_ONLY=1 RIG_CUDA_EMULATOR_MEMORY_MB=64 \
  RIG_CUDA_EMULATOR_FUSED_ATTENTION=1
check "$rig" run "$tiny" --device=cuda --benchmark --bench_steps=3 --logdir fits \
  --batch_size_per_gpu="$good" "${data[@]}" > fits.log
expect_error '^rig: error: out of memory on cuda:0 in ' run "$tiny" --device=cuda --benchmark \
  --bench_steps=3 --logdir fails --batch_size_per_gpu="$bad" "${data[@]}"
unset RIG_CUDA_EMULATOR RIG_CUDA_EMULATOR_HOST_ONLY RIG_CUDA_EMULATOR_MEMORY_MB

# Every try up to --max fits: exit 1, saying so.
expect_code 1 "$tool" "$rig" "$tiny" --memory-mb 64 --max 64
grep -q 'every try fit, up to --max 64' out.txt || fail "--max reached is not reported"
# Bad usage, and a try that fails for another reason than memory (a batch
# larger than the data set), exit 2 with the reason.
expect_code 2 "$tool" "$rig" "$tiny"
grep -q 'give the GPU.s memory (--memory-mb) or try on one (--gpu)' err.txt || fail "no usage message"
expect_code 2 "$tool" "$rig" "$tiny" --gpu --memory-mb 64
expect_code 2 "$tool" "$rig" "$tiny" --memory-mb 64 --steps 0
expect_code 2 "$tool" "$rig" "$tiny" --memory-mb 64 --start 1000
grep -q 'failed (exit 2) for another reason than memory' err.txt || fail "the other failure is not named"
grep -q 'smaller than one global batch' err.txt || fail "the try's own message is not shown"
echo "largest_batch: PASS"
