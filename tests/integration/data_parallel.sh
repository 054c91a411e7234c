#!/usr/bin/env bash
# Data-parallel training through the real binary on the mpi communicator:
# 2 ranks x batch B == 1 rank x iter_size 2 x batch B (bit for bit), mixed
# precision reduces each bucket unscaled (any bucket size, the same bits), a 2-rank
# resume continues bit-exactly, eval and infer over 2 ranks cover every
# sample once (infer in input order), ranks that run different configs are
# caught, deterministic reduction makes 4 ranks == 2 x iter_size 2 == 1 x
# iter_size 4 bit for bit, an error on one rank ends the job, a rank killed with SIGKILL ends
# the job, and launching `local` under mpirun is refused.
# Usage: data_parallel.sh RIG EXPERIMENT WORKDIR   (EXPERIMENT: fixtures/tiny.yaml)
set -euo pipefail
export LC_ALL=C
rig="$(realpath "$1")"; exp="$(realpath "$2")"; work="$3"
source "$(dirname "$0")/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Each rank one compute thread, the two ranks free to share the CI's 2 cores.
mpi=(mpirun --oversubscribe --bind-to none -x RIG_NUM_THREADS=1 -x RIG_PROGRESS=0)
same() { cmp "$1" "$2" || fail "$1 and $2 differ"; }

echo "== 2 ranks x 16 == 1 rank x iter_size 2 x 16, bit for bit (and with 1-MB buckets)"
check "$rig" run "$exp" --logdir one --max_steps=20 --iter_size=2 > one.log
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir two --max_steps=20 --communicator=mpi > two.log
cat two.log
for f in model optimizer; do
  same one/checkpoints/ckpt-20/$f.safetensors two/checkpoints/ckpt-20/$f.safetensors
done
grep -q "Data-parallel over 2 processes" two.log || fail "no data-parallel line"
grep -Eq "^\*\*\* Bottleneck: (compute|data|network)-bound" two.log || fail "no bottleneck verdict"
grep -q "bus bandwidth" two.log || fail "no bus bandwidth"
[ "$(grep -c 'Global step 20:' two.log)" -eq 1 ] || fail "only rank 0 prints"
grep -q '"comm/bus_bandwidth_MBps"' two/metrics.jsonl || fail "no communication metrics"
check "$rig" report two > /dev/null
grep -q "Bottleneck" two/report.html || fail "the report has no bottleneck section"
# rig run --nproc does the same launch; the tiny model fits one bucket, a
# 0.0001-MB cap gives one per parameter: same numbers.
check env RIG_NUM_THREADS=1 "$rig" run --nproc 2 "$exp" --logdir nproc --max_steps=20 \
  --bucket_cap_mb=0.0001 > nproc.log
grep -Eq "in [4-9] bucket" nproc.log || fail "--bucket_cap_mb did not split the gradients"
same one/checkpoints/ckpt-20/model.safetensors nproc/checkpoints/ckpt-20/model.safetensors
# fp16 compression: not bit-identical, but it trains.
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir fp16 --max_steps=20 --communicator=mpi \
  --gradient_compression=fp16 > fp16.log
grep -q "reduced as float16" fp16.log || fail "fp16 compression not announced"

echo "== mixed precision over 2 ranks: each bucket unscaled as it leaves, during backward"
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir mixed --max_steps=20 --communicator=mpi \
  --dtype=mixed > mixed.log
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir mixed_small --max_steps=20 --communicator=mpi \
  --dtype=mixed --bucket_cap_mb=0.0001 > /dev/null
for f in model optimizer; do  # unscaled by bucket or by parameter: the same bits
  same mixed/checkpoints/ckpt-20/$f.safetensors mixed_small/checkpoints/ckpt-20/$f.safetensors
done
# and it trains as float32 does (a bucket reduced before it was unscaled would not)
loss_at_20() { sed -n 's/.*Global step 20: \*\*\* Train loss: \([0-9.]*\).*/\1/p' "$1"; }
awk -v a="$(loss_at_20 two.log)" -v b="$(loss_at_20 mixed.log)" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 0.02 * a + 0.01) }' ||
  fail "mixed precision over 2 ranks ends at loss $(loss_at_20 mixed.log), float32 at $(loss_at_20 two.log)"

echo "== communicator_params/deterministic: 4 ranks == 2 x iter_size 2 == 1 x iter_size 4, bit for bit"
det=(--communicator_params/deterministic=true --max_steps=10 --save_checkpoint_steps=10
  --eval_steps=1000)
for e in "$exp" "$(dirname "$exp")/tiny-transformer.yaml"; do
  tag=$(basename "$e" .yaml)
  check "$rig" run "$e" --logdir "det1-$tag" --iter_size=4 "${det[@]}" > "det1-$tag.log"
  grep -q "Deterministic reduction: 1 process(es) x iter_size 4" "det1-$tag.log" ||
    fail "no deterministic-reduction line"
  check "${mpi[@]}" -n 2 "$rig" run "$e" --logdir "det2-$tag" --iter_size=2 --communicator=mpi \
    "${det[@]}" > /dev/null
  check "${mpi[@]}" -n 4 "$rig" run "$e" --logdir "det4-$tag" --communicator=mpi "${det[@]}" \
    > /dev/null
  for f in model optimizer; do
    same "det1-$tag/checkpoints/ckpt-10/$f.safetensors" "det2-$tag/checkpoints/ckpt-10/$f.safetensors"
    same "det1-$tag/checkpoints/ckpt-10/$f.safetensors" "det4-$tag/checkpoints/ckpt-10/$f.safetensors"
  done
done
# 232 samples = 3 steps of 64 and a tail of 40: 2 x 2 and 1 x 4 could start a
# step in the tail and end it in the next epoch; a step begins again in the
# new epoch instead, dropping the tail as 4 ranks do.
tail=(--data_layer_params/num_samples=232 --max_steps=10 --save_checkpoint_steps=10
  --communicator_params/deterministic=true --eval_steps=1000)
check "$rig" run "$exp" --logdir tail1 --iter_size=4 "${tail[@]}" > /dev/null
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir tail2 --iter_size=2 --communicator=mpi \
  "${tail[@]}" > /dev/null
check "${mpi[@]}" -n 4 "$rig" run "$exp" --logdir tail4 --communicator=mpi "${tail[@]}" > /dev/null
for f in model optimizer; do
  same "tail1/checkpoints/ckpt-10/$f.safetensors" "tail4/checkpoints/ckpt-10/$f.safetensors"
  same "tail2/checkpoints/ckpt-10/$f.safetensors" "tail4/checkpoints/ckpt-10/$f.safetensors"
done
grep -q "epoch: 3" tail4/checkpoints/ckpt-10/state.yaml || fail "10 steps of 3 per epoch end in epoch 3"
expect_error "one epoch of the training data holds fewer than the 4 micro-batches" run "$exp" \
  --logdir too_small --iter_size=4 --data_layer_params/num_samples=60 --max_steps=3
expect_code 2 "$rig" run "$exp" --logdir det_mixed --communicator_params/deterministic=true \
  --dtype=mixed
grep -q "communicator_params/deterministic sums float32 gradients" err.txt ||
  fail "deterministic reduction under mixed precision not refused"

echo "== checkpoint_every_s: rank 0's clock picks the steps, both ranks save there"
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir timed --communicator=mpi --max_steps=200 \
  --model_params/hidden_sizes=[512,512] --batch_size_per_gpu=128 --checkpoint_every_s=0.1 \
  --num_checkpoints=0 > timed.log
[ "$(grep -c 'Saved checkpoint' timed.log)" -ge 2 ] || fail "no time-based checkpoint on 2 ranks"

echo "== a 2-rank run resumed at step 10 ends where a straight one does"
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir resumed --max_steps=10 --communicator=mpi > /dev/null
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir resumed --max_steps=20 --communicator=mpi \
  --continue_learning > resumed.log
grep -q "Resuming from .*ckpt-10" resumed.log || fail "did not resume"
for f in model optimizer; do
  same two/checkpoints/ckpt-20/$f.safetensors resumed/checkpoints/ckpt-20/$f.safetensors
done

echo "== eval and infer over 2 ranks: every sample once, infer in input order"
check "$rig" run "$exp" --logdir two --mode eval > eval1.log
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir two --mode eval --communicator=mpi > eval2.log
grep -q "Evaluated 100 samples" eval2.log || fail "eval over 2 ranks did not count 100 samples"
[ "$(grep 'Validation loss' eval1.log)" = "$(grep 'Validation loss' eval2.log)" ] ||
  fail "eval loss differs between 1 and 2 ranks"
check "$rig" run "$exp" --logdir two --mode infer --infer_output_file infer1.txt > /dev/null
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir two --mode infer --communicator=mpi \
  --infer_output_file infer2.txt > /dev/null
same infer1.txt infer2.txt

echo "== ranks that disagree"
expect_code 2 mpirun --oversubscribe -x RIG_NUM_THREADS=1 \
  -n 1 "$rig" run "$exp" --logdir diff --communicator=mpi : \
  -n 1 "$rig" run "$exp" --logdir diff --communicator=mpi --lr_policy_params/learning_rate=0.2
grep -q "rank 1 resolved a different config" err.txt || fail "the differing rank is not named"
[ "$(grep -c 'do not run the same experiment' err.txt)" -eq 1 ] || fail "printed more than once"
# An error on one rank only (nothing to resume from): that rank says so, the job ends with 2.
expect_code 2 timeout 60 mpirun --oversubscribe -x RIG_NUM_THREADS=1 \
  -n 1 "$rig" run "$exp" --logdir bad --communicator=mpi : \
  -n 1 "$rig" run "$exp" --logdir bad --communicator=mpi --continue_learning
grep -Eq "rank 1 .*: error: --continue_learning" err.txt || fail "rank 1's error is not named"
# `local` under a launcher of 2 would train twice into one logdir.
expect_code 2 "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir local_under_mpi
[ "$(grep -c "one of 2 started by an MPI launcher" err.txt)" -eq 1 ] ||
  fail "local under mpirun not refused, or refused once per rank"
# Bad input every rank meets alike is reported once, not once per rank.
expect_code 2 "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir typo --communicator=mpi --max_stepz=3
[ "$(grep -c "rig: error: .*max_stepz: unknown key" err.txt)" -eq 1 ] ||
  fail "a bad override was not reported exactly once"

echo "== no progress bar in a log written through mpirun"
# Open MPI gives each rank a pseudo-terminal as stdout even when mpirun's own
# output goes to a file: rank 0 must not take it for the user's terminal.
quiet_mpi=(mpirun --oversubscribe --bind-to none -x RIG_NUM_THREADS=1)
if ! (unset RIG_PROGRESS; mpirun --oversubscribe -n 1 sh -c 'test -t 1'); then
  echo "note: this mpirun gives ranks no terminal; the check below cannot fail here"
fi
(unset RIG_PROGRESS; check "${quiet_mpi[@]}" -n 2 "$rig" run "$exp" --logdir nobar \
  --max_steps=40 --communicator=mpi > nobar.log 2>&1)
if grep -q $'\r\|\x1b' nobar.log; then fail "the log written through mpirun holds a progress bar"; fi
# Asked for, the bar is drawn (and erased) through mpirun all the same.
(unset RIG_PROGRESS; check "${quiet_mpi[@]}" -n 2 "$rig" run "$exp" --logdir bar \
  --max_steps=40 --communicator=mpi --progress on > bar.log 2>&1)
grep -q $'\r' bar.log || fail "--progress on drew no bar"

echo "== a rank killed with SIGKILL ends the job"
set +e
start=$(date +%s)
"${mpi[@]}" -n 2 "$rig" run "$exp" --logdir "$work/killed" --max_steps=1000000 --communicator=mpi \
  --communicator_params/timeout_s=20 --print_loss_steps=1000 > killed.log 2>&1 &
job=$!
victim=$(await_rank "--logdir $work/killed " 1 killed.log "Data-parallel over 2") ||
  { kill $job; fail "rank 1 never started"; }
sleep 1
kill -9 "$victim"
wait $job; code=$?
set -e
elapsed=$(( $(date +%s) - start ))
cat killed.log
[ "$code" -ne 0 ] || fail "the job exited 0 after a rank was killed"
[ "$elapsed" -lt 40 ] || fail "the job took ${elapsed}s to end after a rank was killed"
grep -Eiq "rank 1.*(killed|signal 9)|signal 9.*rank 1|rank 1 .*gone" killed.log ||
  fail "the killed rank is not named"
echo "PASS"
