#!/usr/bin/env bash
# Parameter-server training through the real binary on the mpi_ps communicator:
# max_staleness 0 gives the same bits as one process with iter_size W (sgd,
# adam with parameters split between servers, novograd on whole parameters,
# W = 2 and 4, S = 1 and 2); a checkpoint resumes with another S and on the
# mpi communicator; a slowed worker is held within max_staleness and is not
# with it unbounded; 2-bit compression trains; a stopped worker is dropped as
# a straggler and the run completes; a killed server or worker ends the job; what
# mpi_ps refuses; a server out of memory says so.
# Usage: parameter_server.sh RIG EXPERIMENT WORKDIR   (EXPERIMENT: fixtures/tiny.yaml)
set -euo pipefail
export LC_ALL=C
rig="$(realpath "$1")"; exp="$(realpath "$2")"; work="$3"
# shellcheck source=tests/integration/testlib.sh
source "$(dirname "$0")/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none -x RIG_NUM_THREADS=1 -x RIG_PROGRESS=0)
same() { cmp "$1" "$2" || fail "$1 and $2 differ"; }
same_checkpoint() {
  for f in model optimizer; do same "$1/$f.safetensors" "$2/$f.safetensors"; done
}
# ps PROCESSES SERVERS RIG-ARGS...: an mpi_ps job through mpirun.
ps_job() {
  local n="$1" s="$2"; shift 2
  check "${mpi[@]}" -n "$n" "$rig" run --communicator=mpi_ps --communicator_params/servers="$s" "$@"
}
# The largest staleness in the histogram line of a log.
max_staleness_seen() {
  grep -o 'reads served: mean [0-9.]*, max [0-9]*' "$1" | awk '{ print $NF }'
}

sed -e 's/optimizer: sgd/optimizer: adam/' -e '/momentum: 0.9/d' \
  -e 's/optimizer_params:/optimizer_params: {}/' -e 's/learning_rate: 0.1/learning_rate: 0.01/' \
  "$exp" > adam.yaml
sed -e 's/optimizer: sgd/optimizer: novograd/' -e '/momentum: 0.9/d' \
  -e 's/optimizer_params:/optimizer_params: {}/' -e 's/learning_rate: 0.1/learning_rate: 0.01/' \
  "$exp" > novograd.yaml

echo "== max_staleness 0: 2 workers + 1 server == 1 process x iter_size 2, bit for bit"
check "$rig" run "$exp" --logdir one2 --max_steps=20 --save_checkpoint_steps=10 --iter_size=2 > one2.log
check env RIG_NUM_THREADS=1 "$rig" run --nproc 2 --servers 1 "$exp" --logdir ps21 --max_steps=20 \
  --save_checkpoint_steps=10 > ps21.log
cat ps21.log
same_checkpoint one2/checkpoints/ckpt-10 ps21/checkpoints/ckpt-10
same_checkpoint one2/checkpoints/ckpt-20 ps21/checkpoints/ckpt-20
grep -q "Parameter server: 2 worker(s), 1 server(s), max_staleness 0 (synchronous)" ps21.log ||
  fail "no parameter-server line"
grep -q "reads served: mean 0.00, max 0 (0: 100.0%)" ps21.log || fail "synchronous reads were stale"
grep -q "waiting for the parameter servers .* pushed and pulled by each worker" ps21.log ||
  fail "the bottleneck line does not speak of the parameter servers"
[ "$(grep -c 'Global step 20:' ps21.log)" -eq 1 ] || fail "only worker 0 prints"
grep -q '"ps/staleness_max"' ps21/metrics.jsonl || fail "no staleness in metrics.jsonl"
grep -q "global_step: 20" ps21/parameter_server.yaml || fail "no parameter_server.yaml"
grep -q "parameter_server: {workers: 2, servers: 1, max_staleness: 0, global_step: 20" \
  ps21/checkpoints/ckpt-20/state.yaml || fail "no parameter-server state in state.yaml"
check "$rig" report ps21 > /dev/null
grep -q "<h2>Parameter server</h2>" ps21/report.html || fail "the report has no parameter-server section"

echo "== sgd: 4 workers + 1 server == iter_size 4"
check "$rig" run "$exp" --logdir one4 --max_steps=12 --iter_size=4 > /dev/null
ps_job 5 1 "$exp" --logdir ps41 --max_steps=12 > /dev/null
same_checkpoint one4/checkpoints/ckpt-12 ps41/checkpoints/ckpt-12

echo "== workers on the sim device (device buffers, staged through the host): the same bits"
check "$rig" run "$exp" --logdir sim_one2 --max_steps=20 --iter_size=2 --device=sim > /dev/null
ps_job 3 1 "$exp" --logdir sim_ps21 --max_steps=20 --device=sim > /dev/null
same_checkpoint sim_one2/checkpoints/ckpt-20 sim_ps21/checkpoints/ckpt-20

echo "== adam split between 2 servers: 2 + 2 == iter_size 2, 4 + 2 == iter_size 4"
check "$rig" run adam.yaml --logdir adam_one2 --max_steps=20 --iter_size=2 > /dev/null
ps_job 4 2 adam.yaml --logdir adam_ps22 --max_steps=20 > adam_ps22.log
grep -q "partial" adam_ps22.log || fail "adam's parameters were not split between the servers"
same_checkpoint adam_one2/checkpoints/ckpt-20 adam_ps22/checkpoints/ckpt-20
check "$rig" run adam.yaml --logdir adam_one4 --max_steps=12 --iter_size=4 > /dev/null
ps_job 6 2 adam.yaml --logdir adam_ps42 --max_steps=12 > adam_ps42.log
same_checkpoint adam_one4/checkpoints/ckpt-12 adam_ps42/checkpoints/ckpt-12

echo "== novograd (layer-wise) keeps whole parameters on 2 servers, same bits"
check "$rig" run novograd.yaml --logdir nv_one2 --max_steps=20 --iter_size=2 > /dev/null
ps_job 4 2 novograd.yaml --logdir nv_ps22 --max_steps=20 > nv_ps22.log
grep -q "on whole parameters" nv_ps22.log || fail "novograd's parameters were split"
if grep -q "partial" nv_ps22.log; then fail "a novograd shard holds part of a parameter"; fi
same_checkpoint nv_one2/checkpoints/ckpt-20 nv_ps22/checkpoints/ckpt-20

echo "== a 2 + 2 checkpoint resumes with 1 server, and on the mpi communicator, to the same bits"
ps_job 4 2 "$exp" --logdir resumed_ps --max_steps=10 > /dev/null
cp -r resumed_ps resumed_mpi
ps_job 3 1 "$exp" --logdir resumed_ps --max_steps=20 --continue_learning > resumed_ps.log
grep -q "Resuming from .*ckpt-10" resumed_ps.log || fail "did not resume"
same_checkpoint one2/checkpoints/ckpt-20 resumed_ps/checkpoints/ckpt-20
check "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir resumed_mpi --max_steps=20 --communicator=mpi \
  --continue_learning > /dev/null
same_checkpoint one2/checkpoints/ckpt-20 resumed_mpi/checkpoints/ckpt-20
# Another number of workers (a larger global batch from here on) also resumes.
cp -r resumed_ps/checkpoints/ckpt-10 resumed_w4_ckpt
mkdir -p resumed_w4/checkpoints && mv resumed_w4_ckpt resumed_w4/checkpoints/ckpt-10
ps_job 5 1 "$exp" --logdir resumed_w4 --max_steps=20 --continue_learning > resumed_w4.log
grep -q "Resuming from .*ckpt-10" resumed_w4.log || fail "4 workers did not resume a 2-worker run"
grep -q "Parameter server: 4 worker(s), 1 server(s)" resumed_w4.log || fail "not 4 workers"

echo "== a slowed worker: held within max_staleness 2, not with it unbounded"
check env RIG_PS_TEST_SLOW_WORKER=1:20 "${mpi[@]}" -n 3 "$rig" run "$exp" --logdir ssp \
  --communicator=mpi_ps --communicator_params/max_staleness=2 --max_steps=40 > ssp.log
cat ssp.log
grep -q "max_staleness 2 (stale-synchronous)" ssp.log || fail "no stale-synchronous line"
[ "$(max_staleness_seen ssp.log)" -eq 2 ] || fail "staleness $(max_staleness_seen ssp.log), not 2"
check env RIG_PS_TEST_SLOW_WORKER=1:20 "${mpi[@]}" -n 3 "$rig" run "$exp" --logdir async \
  --communicator=mpi_ps --communicator_params/max_staleness=-1 --max_steps=40 > async.log
cat async.log
[ "$(max_staleness_seen async.log)" -gt 2 ] || fail "unbounded staleness stayed within 2"
grep -q "global step 40" async.log || fail "asynchronous run did not reach global step 40"

echo "== 2-bit compression trains"
ps_job 3 1 "$exp" --logdir twobit --max_steps=40 --communicator_params/gradient_compression=2bit \
  --communicator_params/threshold=0.01 > twobit.log
grep -q "2-bit compressed (threshold 0.01)" twobit.log || fail "2-bit compression not announced"
first=$(grep -o 'Train loss: [0-9.]*' twobit.log | head -1 | cut -d' ' -f3)
last=$(grep -o 'Train loss: [0-9.]*' twobit.log | tail -1 | cut -d' ' -f3)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || fail "2-bit: loss $first -> $last"

echo "== a stopped worker is dropped after straggler_timeout_s, and the run completes"
set +e
env RIG_PS_TEST_SLOW_WORKER=0:10 "${mpi[@]}" -n 3 "$rig" run "$exp" --logdir "$work/straggler" \
  --communicator=mpi_ps --communicator_params/max_staleness=1 \
  --communicator_params/straggler_timeout_s=1 --max_steps=400 --print_loss_steps=100 \
  > straggler.log 2>&1 &
job=$!
victim=$(await_rank "--logdir $work/straggler " 1 straggler.log "Parameter server:") ||
  { kill $job; fail "worker 1 never started"; }
sleep 1
kill -STOP "$victim"
sleep 3
kill -CONT "$victim"
wait $job; code=$?
set -e
cat straggler.log
[ "$code" -eq 0 ] || fail "the run with a straggler exited $code"
grep -q "dropped worker 1 .* as a straggler" straggler.log || fail "the straggler was not dropped"
grep -q "1 worker(s) dropped as stragglers" straggler.log || fail "the drop is not reported"
grep -q "worker 1 .* caught up at step" straggler.log || fail "the straggler did not count again"

# killed RANK WHAT: a job whose RANK is killed with SIGKILL ends within 40 s, naming it.
killed() {
  local rank="$1" what="$2" job victim code start elapsed
  echo "== a killed $what ends the job"
  set +e
  start=$(date +%s)
  "${mpi[@]}" -n 3 "$rig" run "$exp" --logdir "$work/killed$rank" --communicator=mpi_ps \
    --max_steps=1000000 --communicator_params/timeout_s=20 --print_loss_steps=100000 \
    > "killed$rank.log" 2>&1 &
  job=$!
  victim=$(await_rank "--logdir $work/killed$rank " "$rank" "killed$rank.log" "Parameter server:") ||
    { kill $job; fail "rank $rank never started"; }
  sleep 1
  kill -9 "$victim"
  wait $job; code=$?
  set -e
  elapsed=$(( $(date +%s) - start ))
  cat "killed$rank.log"
  [ "$code" -ne 0 ] || fail "the job exited 0 after its $what was killed"
  [ "$elapsed" -lt 40 ] || fail "the job took ${elapsed}s to end after its $what was killed"
  grep -Eiq "rank $rank.*(killed|signal 9)|signal 9.*rank $rank" "killed$rank.log" ||
    fail "the killed $what is not named"
}
killed 2 server
killed 1 worker

echo "== what mpi_ps refuses"
# One worker and one server: the lone worker's error still ends its server.
expect_code 2 timeout 60 "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir refused --communicator=mpi_ps \
  --max_grad_norm=1
grep -q "max_grad_norm clips by the global gradient norm" err.txt out.txt ||
  fail "max_grad_norm not refused"
expect_code 2 "${mpi[@]}" -n 2 "$rig" run "$exp" --logdir refused --communicator=mpi_ps \
  --communicator_params/servers=2
grep -q "start at least servers + 1" err.txt || fail "too many servers not refused"
expect_code 2 "${mpi[@]}" -n 3 "$rig" run "$exp" --logdir ps21 --mode eval --communicator=mpi_ps
grep -q "the mpi_ps communicator trains" err.txt || fail "eval on mpi_ps not refused"
expect_code 2 timeout 60 "${mpi[@]}" -n 3 "$rig" run "$exp" --logdir refused --communicator=mpi_ps \
  --communicator_params/max_staleness=-1 --checkpoint_every_s=60
grep -q "checkpoint_every_s needs the workers to agree" err.txt out.txt ||
  fail "checkpoint_every_s on asynchronous workers not refused"
# A server out of memory (its address space capped at 1.2 GB: a 95 MiB shard's
# messages and tensors do not fit) ends the job with exit 2, naming it by its
# rank in the job and saying how to fit.
ps_args=(run "$exp" --logdir ps-oom --communicator=mpi_ps --data_layer_params/num_features=4000
         --model_params/hidden_sizes=[6250] --max_steps=2)
expect_code 2 timeout 120 "${mpi[@]}" -n 1 "$rig" "${ps_args[@]}" : -n 1 \
  bash -c 'ulimit -v 1200000; exec "$0" "$@"' "$rig" "${ps_args[@]}"
grep -Eq "^rig: mpi: rank 1 \(pid [0-9]+ on host [^)]+\): error: out of memory on (cpu|the host) in parameter server 0: .*To fit, run more servers \(communicator_params/servers, now 1\)" err.txt ||
  fail "the server's running out of memory is not explained"
grep -q "bad_alloc" err.txt && fail "the message names std::bad_alloc"
echo "PASS"
