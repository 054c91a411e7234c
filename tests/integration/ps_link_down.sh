#!/usr/bin/env bash
# ps_link_down.sh RIG TWO_HOSTS_TOOL WORKDIR
# A parameter-server job across two "hosts" (tools/two-hosts: network
# namespaces joined by a veth link): worker 0 on host a, the server on host b.
# The link is taken down mid-run: within timeout_s the worker says which
# server (rank, pid and host) stopped answering, and its process ends. (mpirun
# itself may then hang tearing down its daemon on the host it cannot reach:
# Open MPI's, not rig's; the test ends it.) Exit 77 (skip) without root,
# network namespaces or mpirun.
set -euo pipefail
rig="$(realpath "$1")"
two_hosts="$(realpath "$2")"
work="$3"
# shellcheck source=tests/integration/testlib.sh
source "$(dirname "$0")/testlib.sh"
exp="$(realpath "$(dirname "$0")")/fixtures/tiny.yaml"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
two_hosts_up "$two_hosts" rig-psl 100mbit

timeout_s=5
set +e
timeout --kill-after=5 90 "$two_hosts" --name "$name" mpirun -x RIG_NUM_THREADS=1 "$rig" run "$exp" \
  --logdir "$work/run" --communicator=mpi_ps --max_steps=100000000 --print_loss_steps=100000000 \
  --communicator_params/timeout_s=$timeout_s > out.txt 2>&1 &
job=$!
set -e
worker=$(await_rank "--logdir $work/run" 0 out.txt "Parameter server:") ||
  { kill "$job"; cat out.txt; fail "the worker never started"; }
sleep 1
echo "+ link down"
"$two_hosts" --name "$name" exec a ip link set rig0 down
down_at=$(date +%s)
# The worker's message, then the worker process gone.
for _ in $(seq 1 $((4 * (timeout_s + 15)))); do
  grep -q "no weights for step" out.txt && ! kill -0 "$worker" 2>/dev/null && break
  sleep 0.25
done
elapsed=$(( $(date +%s) - down_at ))
cat out.txt
grep -Eq "worker 0: no weights for step [0-9]+ from server 0 \(rank 1, pid [0-9]+ on host $name-b\) within $timeout_s s" out.txt ||
  fail "the worker did not name the server it lost"
! kill -0 "$worker" 2>/dev/null || fail "the worker process still runs ${elapsed}s after the link went down"
echo "the worker named the server and ended ${elapsed}s after the link went down"
kill "$job" 2>/dev/null || true
wait "$job" 2>/dev/null || true
echo "PASS"
