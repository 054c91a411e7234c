#!/usr/bin/env bash
# slurm.sh RIG WORKDIR
# rig under a real one-machine Slurm (Debian's slurm-wlm and munge): munged,
# slurmctld and slurmd are started here with a private config and ports, and
# stopped at the end. `srun -n 2` runs a 2-rank job (PMIx wires up Open MPI);
# `scancel --signal=TERM` preempts a running one, which checkpoints and exits
# 143, and `srun ... --continue_learning` ends with the bytes of an
# uninterrupted run; an `rig run --elastic` supervisor as an sbatch job gets
# Slurm's SIGTERM (`scancel --batch`), checkpoints through its ranks and
# stops, and a second sbatch job resumes it to the same bytes. Exit 77 (skip)
# without root, the Slurm and munge programs, or where slurmd cannot run.
set -euo pipefail
export LC_ALL=C
rig="$(realpath "$1")"; work="$2"
# shellcheck source=tests/integration/testlib.sh
source "$(dirname "$0")/testlib.sh"
exp="$(realpath "$(dirname "$0")")/fixtures/tiny.yaml"
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (slurmd)"; exit 77; }
for program in munged slurmctld slurmd srun sbatch scancel sinfo squeue; do
  command -v "$program" > /dev/null || { echo "SKIP: no $program (apt install slurmd slurmctld slurm-client munge)"; exit 77; }
done
rm -rf "$work"; mkdir -p "$work"/{state,spool,munge}; cd "$work"
export RIG_PROGRESS=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# A private cluster: its own munge socket and key, ports from the pid.
chmod 700 munge
head -c 1024 /dev/urandom > munge/munge.key
chmod 600 munge/munge.key
munged --force --socket="$work/munge/munge.sock" --key-file="$work/munge/munge.key" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" \
  --seed-file="$work/munge/munged.seed"
port=$((20000 + $$ % 20000))
cat > slurm.conf <<CONF
ClusterName=rigtest$$
SlurmctldHost=$(hostname)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/munge.sock
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
$(slurmd -C | head -1)
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$work/slurm.conf"
stop_cluster() {
  scancel --full --signal=KILL --user=root > /dev/null 2>&1 || true
  for pidfile in slurmd.pid slurmctld.pid munge/munged.pid; do
    if [ -f "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
  done
}
trap stop_cluster EXIT
trap 'exit 1' TERM INT HUP
slurmctld -i
slurmd
up=""
for _ in $(seq 1 60); do
  if [ "$(sinfo -h -o %T 2>/dev/null)" = idle ]; then up=yes; break; fi
  sleep 0.5
done
if [ -z "$up" ]; then
  tail -5 slurmctld.log slurmd.log 2>/dev/null || true
  echo "SKIP: slurmd did not come up on this machine (logs above)"
  exit 77
fi

args=(--max_steps=3000 "--model_params/hidden_sizes=[256,256]" --batch_size_per_gpu=64
  --print_loss_steps=100 --save_checkpoint_steps=1000000 --eval_steps=1000000
  --communicator_params/deterministic=true)
# same_as_reference DIR: its ckpt-3000 holds the uninterrupted run's bytes.
same_as_reference() {
  for f in model optimizer; do
    cmp "$1/checkpoints/ckpt-3000/$f.safetensors" "ref/checkpoints/ckpt-3000/$f.safetensors" ||
      fail "$1: $f differs from the uninterrupted run"
  done
}
# wait_for_step FILE STEP: until FILE holds a loss line at STEP or later (60 s at most).
wait_for_step() {
  for _ in $(seq 1 600); do
    if grep -o "Global step [0-9]*" "$1" 2>/dev/null | awk -v s="$2" '$3 >= s { f = 1 } END { exit !f }'; then
      return 0
    fi
    sleep 0.1
  done
  cat "$1"; fail "never reached step $2"
}
# wait_job JOBID: until Slurm no longer lists it (120 s at most).
wait_job() {
  for _ in $(seq 1 1200); do
    [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  fail "job $1 did not end"
}

echo "== srun -n 2: a 2-rank job, the uninterrupted reference"
check srun -n 2 "$rig" run "$exp" --communicator=mpi --logdir "$work/ref" "${args[@]}" > ref.log 2>&1 ||
  { cat ref.log; fail "srun -n 2 failed"; }
grep -q "(train mode): 131 parameters, 2 process(es)" ref.log ||
  grep -q "2 process(es)" ref.log || { cat ref.log; fail "not 2 processes"; }

echo "== scancel --signal=TERM preempts: a checkpoint, exit 143; srun --continue_learning, same bytes"
set +e
# 2 ms a step (RIG_TEST_FAULT): 3000 steps last 6 s or more, so the signal
# comes mid-training however busy the machine is.
RIG_TEST_FAULT=step_sleep_ms=2 srun -n 2 -J "preempt$$" "$rig" run "$exp" --communicator=mpi \
  --logdir "$work/pre" "${args[@]}" > pre.log 2>&1 &
job=$!
set -e
wait_for_step pre.log 200
check scancel --signal=TERM --name="preempt$$"
set +e; wait "$job"; code=$?; set -e
grep -vE "Global step|time per step" pre.log
[ "$code" = 143 ] || fail "srun exited $code, expected 143"
grep -q "Stopped by signal 15 at step" pre.log || fail "the ranks did not stop on SIGTERM"
step=$(sed -n 's/.*Stopped by signal 15 at step \([0-9]*\).*/\1/p' pre.log)
[ "$step" -lt 3000 ] || fail "the preemption came after the last step"
[ -d "pre/checkpoints/ckpt-$step" ] || fail "no checkpoint at step $step"
check srun -n 2 "$rig" run "$exp" --communicator=mpi --logdir "$work/pre" --continue_learning \
  "${args[@]}" > resumed.log 2>&1 || { cat resumed.log; fail "the resume failed"; }
grep -q "Resuming from .*ckpt-$step" resumed.log || fail "did not resume from ckpt-$step"
same_as_reference pre

echo "== rig run --elastic as an sbatch job: Slurm's SIGTERM stops it with a checkpoint; a second job resumes"
elastic=("$rig" run "$exp" --elastic --nproc 2 --logdir "$work/el" "${args[@]}")
jid=$(RIG_TEST_FAULT=step_sleep_ms=2 sbatch --parsable -n 2 -J "elastic$$" -o "$work/el1.log" \
  --wrap "exec ${elastic[*]}")
wait_for_step el1.log 200
check scancel --batch --signal=TERM "$jid"
wait_job "$jid"
grep -vE "Global step|time per step" el1.log
grep -q "Stopped by signal 10 at step" el1.log || fail "the ranks did not stop on SIGUSR1"
grep -q "Elastic: stopped by signal 15; the newest checkpoint is ckpt-" el1.log ||
  fail "the supervisor did not stop on SIGTERM"
jid=$(sbatch --parsable -n 2 -J "elastic$$" -o "$work/el2.log" \
  --wrap "exec ${elastic[*]} --continue_learning")
wait_job "$jid"
grep -vE "Global step|time per step" el2.log
grep -q "Resuming from" el2.log || fail "the second job did not resume"
grep -q "Elastic: finished" el2.log || fail "the second job did not finish"
same_as_reference el
echo "PASS"
