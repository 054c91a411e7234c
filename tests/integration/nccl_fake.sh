#!/usr/bin/env bash
# The nccl communicator through the real binary, without a GPU: its fake NCCL
# (RIG_NCCL_FAKE=1) on the emulated CUDA device (RIG_CUDA_EMULATOR=1).
# - 2 ranks on --communicator=nccl write the checkpoints of the same job on
#   --communicator=mpi, byte for byte (both on the emulated cuda device), in
#   float32 and in mixed precision, and report bus bandwidth;
# - their step reads nothing from the device at once (each rank's census);
# - a rank that never joins a collective: the job ends (exit 3) within
#   about timeout_s, one line naming the rank;
# - the fake without RIG_CUDA_EMULATOR, a RIG_NCCL_LIBRARY that is not there,
#   and (where the machine has none) no libnccl.so.2: exit 2, one line each.
# Usage: nccl_fake.sh RIG EXPERIMENT WORKDIR   (EXPERIMENT: fixtures/tiny.yaml)
set -euo pipefail
export LC_ALL=C
rig="$(realpath "$1")"; exp="$(realpath "$2")"; work="$3"
source "$(dirname "$0")/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
unset RIG_NCCL_FAKE RIG_NCCL_LIBRARY RIG_CUDA_EMULATOR RIG_NCCL_FAKE_HANG_RANK RIG_NCCL_FAKE_HANG_AT

echo "== refusals: exit 2, one line"
RIG_NCCL_FAKE=1 expect_error "RIG_NCCL_FAKE=1 .*works only with RIG_CUDA_EMULATOR=1" \
  run "$exp" --logdir refused --communicator=nccl
RIG_NCCL_LIBRARY=/nonexistent/libnccl.so.2 expect_error \
  "cannot load RIG_NCCL_LIBRARY=/nonexistent/libnccl.so.2" run "$exp" --logdir refused --communicator=nccl
# The loader's cache read whole first: `ldconfig -p | grep -q` under pipefail
# fails when grep's early exit kills ldconfig with SIGPIPE.
ld_cache="$(/sbin/ldconfig -p 2>/dev/null || true)"
if ! grep -q "libnccl\.so\.2 " <<<"$ld_cache"; then
  expect_error "NCCL \(libnccl\.so\.2\) not found: set RIG_NCCL_LIBRARY=" \
    run "$exp" --logdir refused --communicator=nccl
elif ! grep -q "libcuda\.so\.1 " <<<"$ld_cache"; then
  # NCCL without a GPU driver (a CUDA toolkit on a machine with no GPU).
  expect_error "the CUDA driver \(libcuda\.so\.1\) is not installed: .*needs a GPU" \
    run "$exp" --logdir refused --communicator=nccl
fi

command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --allow-run-as-root --bind-to none -x RIG_NUM_THREADS=1 -x RIG_PROGRESS=0
  -x RIG_CUDA_EMULATOR=1 -x RIG_NCCL_FAKE=1)
export RIG_CUDA_EMULATOR=1 RIG_NCCL_FAKE=1

echo "== 2 ranks on nccl (fake) == 2 ranks on mpi, byte for byte, on the emulated cuda device"
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir mpi --max_steps=20 --device=cuda \
  --communicator=mpi > mpi.log
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir nccl --max_steps=20 --device=cuda \
  --communicator=nccl > nccl.log
cat nccl.log
for f in model optimizer; do
  cmp mpi/checkpoints/ckpt-20/$f.safetensors nccl/checkpoints/ckpt-20/$f.safetensors ||
    fail "$f.safetensors differs between nccl and mpi"
done
grep -q "Data-parallel over 2 processes" nccl.log || fail "no data-parallel line"
grep -q "bus bandwidth" nccl.log || fail "no bus bandwidth in the bottleneck report"
# Mixed precision, a bucket per parameter: each unscaled on the device just
# before it leaves, during backward, the nccl stream ordered after it.
for comm in mpi nccl; do
  check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir "mixed-$comm" --max_steps=10 --device=cuda \
    --communicator=$comm --dtype=mixed --mixed_dtype=bfloat16 --bucket_cap_mb=0.0001 > /dev/null
done
for f in model optimizer; do
  cmp mixed-mpi/checkpoints/ckpt-10/$f.safetensors mixed-nccl/checkpoints/ckpt-10/$f.safetensors ||
    fail "mixed precision: $f.safetensors differs between nccl and mpi"
done

echo "== a data-parallel step reads nothing from the device at once (RIG_CUDA_CENSUS per rank)"
# The ranks' agreement is collected a step late and the gradient statistics
# with the logged loss: 1 and 2 steps make the same synchronous reads, and
# one more read collected later.
for steps in 1 2; do
  check "${mpi[@]}" -n 2 bash -c "RIG_CUDA_CENSUS=census-$steps-\$OMPI_COMM_WORLD_RANK.tsv \
    '$rig' run '$exp' --logdir census-$steps --device=cuda --communicator=nccl --benchmark \
    --bench_steps=$steps --bench_warmup_steps=0" > "census-$steps.log"
done
# reads STEPS RANK WHAT: the launches of WHAT in that run's census
reads() { awk -F'\t' -v what="$3" '$6 == what { print $1 }' "census-$1-$2.tsv"; }
for rank in 0 1; do
  now1="$(reads 1 $rank "copy to host")" now2="$(reads 2 $rank "copy to host")"
  [ "$now1" = "$now2" ] || fail "rank $rank: a step reads the device ($now1 -> $now2 reads)"
  later1="$(reads 1 $rank "copy to host, collected later")"
  [ "$(reads 2 $rank "copy to host, collected later")" = "$((later1 + 1))" ] ||
    fail "rank $rank: not one agreement collected later a step"
done

echo "== rank 1 never joins collective #3: the job ends within timeout_s, naming it"
set +e
start=$(date +%s)
timeout --kill-after=5 120 "${mpi[@]}" -x RIG_NCCL_FAKE_HANG_RANK=1 -x RIG_NCCL_FAKE_HANG_AT=3 \
  -n 2 "$rig" run "$exp" --logdir hang --max_steps=20 --device=cuda --communicator=nccl \
  --communicator_params/timeout_s=2 > hang.log 2>&1
code=$?
set -e
elapsed=$(($(date +%s) - start))
cat hang.log
[ "$code" -eq 3 ] || fail "exit code $code, expected 3"
[ "$elapsed" -le 60 ] || fail "took $elapsed s"
pattern='^rig: nccl: rank 0 \(pid [0-9]+ on host [^)]+\): [a-z]+ #3 .* did not finish within timeout_s = 2 \(waited [0-9.]+ s\); rank 1 \(pid [0-9]+ on host [^)]+\) is alive but has not started it \(its last collective was #2\); ending the job$'
[ "$(grep -Ec "$pattern" hang.log)" -eq 1 ] || fail "no one line naming rank 1"
echo "ok"
