#!/usr/bin/env bash
# `rig run --elastic` (docs/distributed.md, "Recovering from a lost node"):
# a rank SIGKILLed at step 25 of a 4-rank job with deterministic reduction is
# left out, the job goes on from ckpt-20 on 2 ranks x iter_size 2 and ends with
# the bytes of an uninterrupted 4-rank run; the same with the kill from
# outside at whatever step it lands; a kill while writing a checkpoint resumes
# from the one before; --min-nproc above what is left stops with a message;
# a rank that always crashes ends the job after exactly --max-restarts
# restarts; SIGTERM to the supervisor checkpoints and stops, and a later
# --elastic --continue_learning ends where an uninterrupted run does; bad
# flags exit 2 with one line.
# Usage: elastic.sh RIG EXPERIMENT WORKDIR   (EXPERIMENT: fixtures/tiny.yaml)
set -euo pipefail
export LC_ALL=C
rig="$(realpath "$1")"; exp="$(realpath "$2")"; work="$3"
source "$(dirname "$0")/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 RIG_PROGRESS=0
mpi=(mpirun --oversubscribe --bind-to none -x RIG_NUM_THREADS=1 -x RIG_PROGRESS=0)
det=(--communicator_params/deterministic=true --save_checkpoint_steps=10 --eval_steps=1000)
same() { cmp "$1" "$2" || fail "$1 and $2 differ"; }
same_checkpoint() {  # same_checkpoint DIR1 DIR2: model and optimizer byte for byte
  for f in model optimizer; do same "$1/$f.safetensors" "$2/$f.safetensors"; done
}
yaml_value() { sed -n "s/^$1: //p" "$2"; }

echo "== uninterrupted references: 4 ranks to step 40, 2 ranks to step 40"
check "${mpi[@]}" -n 4 "$rig" run "$exp" --logdir ref4 --communicator=mpi --max_steps=40 \
  "${det[@]}" > ref4.log
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir ref2 --communicator=mpi --max_steps=40 \
  "${det[@]}" > ref2.log

echo "== rank 3 SIGKILLed at step 25: resumed from ckpt-20 on 2 ranks x iter_size 2, same bytes"
check env RIG_TEST_FAULT=crash_at_step=25,crash_rank=3 "$rig" run "$exp" --elastic \
  --hosts localhost:4 --logdir killed --max_steps=40 "${det[@]}" > killed.log 2>&1 ||
  { cat killed.log; fail "the elastic job did not finish"; }
cat killed.log
grep -q "rank 3 on localhost" killed.log || fail "the failed rank was not named"
grep -q "restart 1 of 3: 2 process(es) x iter_size 2 on localhost:2, from ckpt-20" killed.log ||
  fail "not restarted on 2 x 2 from ckpt-20"
grep -q "Resuming from .*ckpt-20 at step 20" killed.log || fail "the job did not resume"
same_checkpoint killed/checkpoints/ckpt-40 ref4/checkpoints/ckpt-40
[ "$(yaml_value restarts killed/elastic.yaml)" = 1 ] || fail "elastic.yaml: restarts"
[ "$(yaml_value lost_steps killed/elastic.yaml)" = 5 ] || fail "elastic.yaml: 5 lost steps"
grep -q '"elastic/restarts":1,"elastic/lost_steps":5' killed/metrics.jsonl ||
  fail "no elastic line in metrics.jsonl"
check "$rig" report killed > /dev/null
grep -q "Elastic restarts" killed/report.html || fail "no elastic section in the report"

echo "== rank 3 SIGKILLed from outside, wherever it is: still the uninterrupted bytes"
long=(--max_steps=300 "--model_params/hidden_sizes=[64,64]")
check "${mpi[@]}" -n 4 "$rig" run "$exp" --logdir ref4long --communicator=mpi "${long[@]}" \
  "${det[@]}" > /dev/null
"$rig" run "$exp" --elastic --hosts localhost:4 --logdir "$work/outside" "${long[@]}" "${det[@]}" \
  > outside.log 2>&1 &
supervisor=$!
killed_at=""
for _ in $(seq 1 3000); do
  step=$(tr -d ' ' < outside/.elastic-progress 2>/dev/null || true)
  if [ -n "$step" ] && [ "$step" -ge 25 ]; then
    pid=$(rank_pid "logdir $work/outside " 3)
    if [ -n "$pid" ]; then kill -9 "$pid"; killed_at=$step; break; fi
  fi
  sleep 0.01
done
wait "$supervisor" || { cat outside.log; fail "the elastic job did not finish"; }
[ -n "$killed_at" ] || fail "rank 3 was never killed"
echo "killed rank 3 at about step $killed_at"
grep -q "restart 1 of 3: 2 process(es) x iter_size 2" outside.log || fail "not restarted on 2 x 2"
same_checkpoint outside/checkpoints/ckpt-300 ref4long/checkpoints/ckpt-300

echo "== killed while writing ckpt-20: resumed from ckpt-10, same bytes"
check env RIG_TEST_FAULT=kill_in_checkpoint=20,once="$work/ckpt-fault-fired" "$rig" run "$exp" \
  --elastic --hosts localhost:2 --logdir in_write --max_steps=40 "${det[@]}" > in_write.log 2>&1 ||
  { cat in_write.log; fail "the elastic job did not finish"; }
[ -e ckpt-fault-fired ] || fail "the fault never fired"
grep -q "restart 1 of 3: 1 process(es) x iter_size 2 on localhost:1, from ckpt-10" in_write.log ||
  { cat in_write.log; fail "not resumed from ckpt-10"; }
same_checkpoint in_write/checkpoints/ckpt-40 ref2/checkpoints/ckpt-40
if compgen -G "in_write/checkpoints/.tmp-*" > /dev/null; then
  fail "a half-written checkpoint was left behind"
fi

echo "== --min-nproc above what is left: a clear stop, exit 1"
start=$(date +%s)
expect_code 1 env RIG_TEST_FAULT=crash_at_step=25,crash_rank=3 "$rig" run "$exp" --elastic \
  --hosts localhost:4 --min-nproc 4 --logdir too_few --max_steps=40 "${det[@]}"
[ $(($(date +%s) - start)) -lt 60 ] || fail "the stop took a minute or more"
grep -q "no number of processes between 4 and 4 that divides 4 micro-batches fits the 3 slot" \
  err.txt || fail "no clear message"

echo "== a rank that always crashes at step 5: exactly --max-restarts 2 restarts"
expect_code 1 env RIG_TEST_FAULT=crash_at_step=5,crash_rank=0 "$rig" run "$exp" --elastic \
  --host-discovery "echo localhost:8" --nproc 2 --max-restarts 2 --logdir crashing \
  --max_steps=40 "${det[@]}"
grep -q "gave up after 2 restart(s) (--max-restarts 2)" err.txt || fail "no give-up message"
[ "$(grep -c '^  - hosts:' crashing/elastic.yaml)" = 3 ] || fail "not exactly 3 attempts"
[ "$(grep -c 'exit_code: 137' crashing/elastic.yaml)" = 3 ] || fail "not 3 killed attempts"

echo "== SIGTERM to the supervisor: checkpoint and stop; --continue_learning ends as uninterrupted"
stop=(--max_steps=800 "--model_params/hidden_sizes=[256,256]" --batch_size_per_gpu=64
  --print_loss_steps=500 --save_checkpoint_steps=1000000)
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir ref2stop --communicator=mpi "${stop[@]}" \
  --communicator_params/deterministic=true > /dev/null
# 5 ms a step (RIG_TEST_FAULT): 800 steps last 4 s or more, so the signal
# comes mid-training however busy the machine is (at 0.5 ms a step, a loaded
# machine's poll below saw step 20 only after the last step).
RIG_TEST_FAULT=step_sleep_ms=5 "$rig" run "$exp" --elastic --hosts localhost:2 --logdir stopped \
  "${stop[@]}" --communicator_params/deterministic=true > stopped.log 2>&1 &
supervisor=$!
for _ in $(seq 1 3000); do
  step=$(tr -d ' ' < stopped/.elastic-progress 2>/dev/null || true)
  if [ -n "$step" ] && [ "$step" -ge 20 ]; then break; fi
  sleep 0.01
done
kill -TERM "$supervisor"
set +e; wait "$supervisor"; code=$?; set -e
cat stopped.log
[ "$code" = 143 ] || fail "the supervisor exited $code, expected 143"
grep -q "Stopped by signal 10 at step" stopped.log || fail "the ranks did not stop on SIGUSR1"
grep -q "stopped by signal 15; the newest checkpoint is ckpt-" stopped.log ||
  fail "no stop message"
check "$rig" run "$exp" --elastic --hosts localhost:2 --logdir stopped --continue_learning \
  "${stop[@]}" --communicator_params/deterministic=true > resumed.log 2>&1 ||
  { cat resumed.log; fail "the resumed run failed"; }
grep -q "Resuming from" resumed.log || fail "did not resume"
same_checkpoint stopped/checkpoints/ckpt-800 ref2stop/checkpoints/ckpt-800

echo "== bad flags: exit 2, one line"
expect_error "belong to --elastic" run "$exp" --hosts localhost:2
expect_error "parameter-server job" run "$exp" --elastic --servers 1
expect_error "--mode eval runs once" run "$exp" --elastic --mode eval
expect_error "'localhost:0' should be host or host:N" run "$exp" --elastic --hosts localhost:0
expect_error "--nproc 5 needs 5 slots" run "$exp" --elastic --hosts localhost:4 --nproc 5
expect_error "give one of --hosts" run "$exp" --elastic --hosts localhost:2 --hostfile x
echo "== the supervisor's iter_size holds over the user's --set iter_size"
check env RIG_TEST_FAULT=crash_at_step=25,crash_rank=3 "$rig" run "$exp" --elastic \
  --hosts localhost:4 --logdir set_iter --max_steps=40 "${det[@]}" --set iter_size=1 \
  > set_iter.log 2>&1 || { cat set_iter.log; fail "the elastic job did not finish"; }
grep -q "Deterministic reduction: 2 process(es) x iter_size 2" set_iter.log ||
  fail "the restart did not run with iter_size 2"
same_checkpoint set_iter/checkpoints/ckpt-40 ref4/checkpoints/ckpt-40
echo "== a job that fails on bad input is not restarted"
expect_code 2 "$rig" run "$exp" --elastic --hosts localhost:2 --logdir killed --max_steps=40
grep -q "already holds checkpoints" err.txt out.txt || fail "the job's own message is missing"
grep -q "restart 1" out.txt && fail "bad input was restarted"
echo "PASS"
