#!/usr/bin/env bash
# elastic_two_hosts.sh RIG TWO_HOSTS_TOOL WORKDIR
# `rig run --elastic` across two "hosts" (tools/two-hosts: network
# namespaces joined by a veth link), 2 ranks on each, deterministic
# reduction, checkpoints every 10 steps. Host b's link is taken down
# mid-run: the ranks on a name the other host as stuck, the supervisor leaves
# b out, goes on from the newest checkpoint on a's 2 slots with iter_size 2,
# and the final checkpoint is byte-identical to an uninterrupted 4-rank run.
# Exit 77 (skip) without root, network namespaces or mpirun.
set -euo pipefail
rig="$(realpath "$1")"
two_hosts="$(realpath "$2")"
work="$3"
# shellcheck source=tests/integration/testlib.sh
source "$(dirname "$0")/testlib.sh"
exp="$(realpath "$(dirname "$0")")/fixtures/tiny.yaml"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
two_hosts_up "$two_hosts" rig-el 1gbit
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 RIG_PROGRESS=0 RIG_NUM_THREADS=1
args=(--max_steps=300 "--model_params/hidden_sizes=[64,64]" --save_checkpoint_steps=10
  --eval_steps=1000 --communicator_params/deterministic=true)

echo "== the uninterrupted 4-rank reference, on this machine"
check mpirun --oversubscribe --bind-to none -n 4 "$rig" run "$exp" --logdir "$work/ref" \
  --communicator=mpi "${args[@]}" > ref.log

echo "== the elastic job on a:2 + b:2; b's link goes down after step 25"
set +e
timeout --kill-after=5 300 "$two_hosts" --name "$name" exec a env \
  OMPI_MCA_plm_rsh_agent="$two_hosts --name $name launch-agent" OMPI_MCA_btl=tcp,self \
  OMPI_MCA_btl_tcp_if_include=rig0 OMPI_MCA_oob_tcp_if_include=rig0 \
  "$rig" run "$exp" --elastic --hosts 10.77.0.1:2,10.77.0.2:2 --teardown-timeout-s 10 \
  --logdir "$work/run" --communicator_params/timeout_s=5 "${args[@]}" > out.txt 2>&1 &
job=$!
set -e
cut_at=""
for _ in $(seq 1 6000); do
  step=$(tr -d ' ' < run/.elastic-progress 2>/dev/null || true)
  if [ -n "$step" ] && [ "$step" -ge 25 ]; then
    "$two_hosts" --name "$name" exec b ip link set rig0 down
    cut_at=$step
    break
  fi
  kill -0 "$job" 2>/dev/null || break
  sleep 0.01
done
set +e; wait "$job"; code=$?; set -e
cat out.txt
[ -n "$cut_at" ] || fail "the job never reached step 25"
echo "b's link went down at about step $cut_at"
[ "$code" = 0 ] || fail "the elastic job exited $code"
grep -q "host(s) 10.77.0.2" out.txt || fail "host b was not named as the lost host"
grep -q "restart 1 of 3: 2 process(es) x iter_size 2 on 10.77.0.1:2" out.txt ||
  fail "not restarted on host a's 2 slots with iter_size 2"
for f in model optimizer; do
  cmp "run/checkpoints/ckpt-300/$f.safetensors" "ref/checkpoints/ckpt-300/$f.safetensors" ||
    fail "$f differs from the uninterrupted run"
done
echo "PASS"
