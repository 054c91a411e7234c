#!/usr/bin/env bash
# two_hosts.sh RIG TWO_HOSTS_TOOL WORKDIR
# Data-parallel training on two "hosts": two network namespaces joined by a
# veth link capped at 200 Mbit/s each way (tools/two-hosts), one rank in each,
# started by mpirun across them with the interface chosen by name. The run must
# finish, rig must call it network-bound, its bus bandwidth must fit under the
# cap, and the link's own byte counters must have carried the gradients.
# Exit 77 (skip) without root, network namespaces or mpirun.
set -euo pipefail
rig="$1"
two_hosts="$2"
work="$3"
# shellcheck source=tests/integration/testlib.sh
source "$(dirname "$0")/testlib.sh"
skip() {
  echo "SKIP: $*"
  exit 77
}

why=$("$two_hosts" preflight) || skip "$why"
# Unique per run: ctest -j runs tests side by side.
name="rig-test-$$"

# Pairs left by runs killed outright (SIGKILL: no trap runs), by any test pid that is gone.
for stale in $(ip netns list | grep -Eo '^rig-test-[0-9]+-a' || true); do
  pid="${stale#rig-test-}"
  pid="${pid%-a}"
  kill -0 "$pid" 2>/dev/null || "$two_hosts" --name "rig-test-$pid" down
done

rm -rf "$work"
mkdir -p "$work"
cd "$work"
trap '"$two_hosts" --name "$name" down' EXIT
trap 'exit 1' TERM INT HUP

cap_mbit=200
check "$two_hosts" --name "$name" up --rate "${cap_mbit}mbit"

# ~1.3 M parameters (5.3 MB of float32 gradients a step) and a few ms of
# compute: at 25 MB/s the reduction takes most of every step.
steps=12
cat >experiment.yaml <<EOF
base_params:
  random_seed: 3
  batch_size_per_gpu: 32
  max_steps: $steps
  print_loss_steps: 4
  logdir: runs/two_hosts
  model: mlp
  model_params:
    hidden_sizes: [1024, 1024]
  data_layer: synthetic
  data_layer_params:
    num_features: 256
    num_classes: 4
    num_samples: 2048
    num_eval_samples: 64
  optimizer: sgd
  optimizer_params:
    momentum: 0.9
  lr_policy: fixed_lr
  lr_policy_params:
    learning_rate: 0.01
  communicator: mpi
  communicator_params:
    timeout_s: 60
EOF

link_bytes() { "$two_hosts" --name "$name" exec "$1" cat "/sys/class/net/rig0/statistics/$2"; }
sent_before=$(link_bytes a tx_bytes)
received_before=$(link_bytes b rx_bytes)

echo "+ two-hosts mpirun rig run experiment.yaml --mode train"
# In the background so that a TERM to this script is handled (and the pair torn
# down) at once rather than when mpirun ends.
set +e
timeout --kill-after=10 120 "$two_hosts" --name "$name" mpirun "$rig" run experiment.yaml --mode train \
  >out.txt 2>&1 &
wait $!
code=$?
set -e
cat out.txt
[ "$code" -eq 0 ] || fail "the two-host run exited with $code"

sent=$(($(link_bytes a tx_bytes) - sent_before))
received=$(($(link_bytes b rx_bytes) - received_before))
echo "rig0: host a sent $sent bytes, host b received $received bytes"

line=$(grep -E '^\*\*\* Bottleneck: ' out.txt | tail -n 1) || fail "no '*** Bottleneck:' line"
[[ "$line" == "*** Bottleneck: network-bound."* ]] || fail "not network-bound: $line"
[[ "$line" =~ over\ 2\ ranks ]] || fail "not 2 ranks: $line"
[[ "$line" =~ Reduction:\ ([0-9.]+)\ MB\ per\ step ]] || fail "no 'Reduction: X MB per step': $line"
mb_per_step="${BASH_REMATCH[1]}"
[[ "$line" =~ bus\ bandwidth\ ([0-9.]+)\ MB/s ]] || fail "no 'bus bandwidth X MB/s': $line"
bus_mb_s="${BASH_REMATCH[1]}"

cap_mb_s=$((cap_mbit / 8))
echo "rig: bus bandwidth $bus_mb_s MB/s under a cap of $cap_mb_s MB/s each way, $mb_per_step MB per step"
# The cap is a hard limit: a higher figure means the traffic bypassed the link
# (or rig measures wrong). Far below it, something other than the link is slow.
awk -v bw="$bus_mb_s" -v cap="$cap_mb_s" 'BEGIN { exit !(bw <= 1.1 * cap) }' ||
  fail "bus bandwidth $bus_mb_s MB/s is above the link's cap of $cap_mb_s MB/s"
awk -v bw="$bus_mb_s" -v cap="$cap_mb_s" 'BEGIN { exit !(bw >= 0.2 * cap) }' ||
  fail "bus bandwidth $bus_mb_s MB/s is under 20% of the link's cap of $cap_mb_s MB/s"
# With two ranks each sends about the whole gradient every step (half in
# reduce-scatter, half in allgather): the link must have carried that.
awk -v sent="$sent" -v got="$received" -v mb="$mb_per_step" -v steps="$steps" \
  'BEGIN { need = 0.9 * mb * 1e6 * steps; exit !(sent >= need && got >= need) }' ||
  fail "rig0 carried $sent / $received bytes, less than $steps steps x $mb_per_step MB"
echo "OK"
