#!/usr/bin/env bash
# two_hosts.sh TWO_HOSTS_TOOL DRIVER
# The mpi communicator across two "hosts" (network namespaces with their own
# host names, tools/two-hosts), one rank in each: every check passes, and a rank
# that never joins is reported as being on another host. Exit 77 (skip) without
# root, network namespaces or mpirun.
set -uo pipefail
two_hosts="$1"
driver="$2"
skip() {
  echo "SKIP: $*"
  exit 77
}
why=$("$two_hosts" preflight) || skip "$why"
name="rig-mpi-$$"  # unique: ctest -j runs tests side by side
trap '"$two_hosts" --name "$name" down >/dev/null 2>&1' EXIT
"$two_hosts" --name "$name" up || exit 1
here="$(dirname "$0")"

echo "== checks, one rank per host"
timeout --kill-after=5 120 "$two_hosts" --name "$name" mpirun "$driver" checks 2 || {
  echo "FAIL: checks across two hosts"; exit 1; }
echo "== rank 1 (the other host) never joins"
bash "$here/expect_job_end.sh" 20 \
  "allreduce #2 \\(sum\\) of 4\\.0 MB f32 did not finish within timeout_s = 2.*no rank on this host is gone or behind; one of the 1 rank\\(s\\) on other hosts, or the network, is stuck" \
  --code 3 -- "$two_hosts" --name "$name" mpirun "$driver" timeout
