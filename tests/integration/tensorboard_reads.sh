#!/usr/bin/env bash
# TensorBoard itself reads rig's event files: the unit test's sample file
# (every CRC, every value), and a real run that was resumed after a crash
# (SessionLog START makes TensorBoard drop the lost steps, so every step
# appears once, with the resumed run's value, as in metrics.jsonl).
# Usage: tensorboard_reads.sh RIG UNIT_TESTS EXPERIMENT WORKDIR
# Needs RIG_TEST_PYTHON, a python with the tensorboard package (tools/run-tests
# makes one); exits 77 (skipped) without it.
set -euo pipefail
rig="$1"; unit_tests="$2"; exp="$3"; work="$4"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${RIG_TEST_PYTHON:-}"
if [ -z "$python" ] || ! "$python" -c "import tensorboard" 2>/dev/null; then
  echo "SKIP: set RIG_TEST_PYTHON to a python with tensorboard (tools/run-tests does)"
  exit 77
fi
rm -rf "$work"; mkdir -p "$work/sample"; cd "$work"
export RIG_PROGRESS=0

RIG_TFEVENTS_OUT="$work/sample" "$unit_tests" --gtest_filter='SummaryWriter.EventFileForExternalReaders'
"$python" "$here/check_tfevents.py" "$work/sample" --unit-sample

# Train 40 steps with checkpoints at 20 and 40, lose ckpt-40 (as if the run
# died after its step-30 and step-40 summaries were written), resume from 20.
"$rig" run "$exp" --logdir run --max_steps=40 --save_checkpoint_steps=20 --save_summaries_steps=10 > first.log
rm -rf run/checkpoints/ckpt-40
"$rig" run "$exp" --logdir run --max_steps=50 --save_summaries_steps=10 --continue_learning \
  --set optimizer_params.momentum=0.9 > resumed.log
test "$(ls run/events.out.tfevents.* | wc -l)" -eq 2
"$python" - run <<'PY'
import json, struct, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
logdir = sys.argv[1]
acc = EventAccumulator(logdir)
acc.Reload()
events = acc.Scalars("train_loss")
steps = [e.step for e in events]
assert steps == [10, 20, 30, 40, 50], steps
latest = {}
for line in open(f"{logdir}/metrics.jsonl"):
    record = json.loads(line)
    if "train_loss" in record:
        latest[record["step"]] = record["train_loss"]
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
for e in events:
    assert e.value == f32(latest[e.step]), (e.step, e.value, latest[e.step])
for tag in ["learning_rate", "global_gradient_norm", "loss_scale", "objects_per_second",
            "time/data", "time/forward", "time/backward", "time/communication",
            "time/optimizer", "time/step", "memory/peak_allocated_MiB", "memory/peak_reserved_MiB",
            "memory/cached_MiB"]:
    assert [e.step for e in acc.Scalars(tag)] == steps, tag
print("tensorboard reads", len(events), "train_loss points once each, equal to metrics.jsonl")
PY
echo "tensorboard reads rig's event files"
