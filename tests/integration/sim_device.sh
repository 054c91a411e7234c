#!/usr/bin/env bash
# The sim device end to end: every experiment that runs on the CPU runs on
# device: sim (the CPU kernels over a guarded arena that host code cannot
# read; docs/tensors.md) and writes the same checkpoints, byte for byte, and
# the same evaluation and inference outputs. A tensor the engine or a plugin
# reads on the host without copying it first faults there, so these runs
# prove the host/device discipline a CUDA run needs:
# - an mlp: train, eval, infer, interactive_infer, iter_size 2, a bit-exact
#   resume on sim from a CPU checkpoint and the reverse; clipped by
#   max_grad_norm (the norm queued on the device, never read);
# - the smoke experiment (sgd, novograd's and LARC's paths via overrides);
# - a transformer on synthetic_text, train_eval with beam-search BLEU, in
#   float32 and in mixed precision (loss scaling: the unscale kernel);
# - a ResNet on Fashion-MNIST when Debian's dataset is installed;
# - two mpi ranks on sim against two on the CPU, when mpirun exists (and
#   MPI is with-mpi).
# Usage: sim_device.sh RIG TINY_EXPERIMENT SMOKE_EXPERIMENT FASHION_EXPERIMENT WORKDIR [with-mpi|no-mpi]
set -euo pipefail
export LC_ALL=C RIG_PROGRESS=0
rig="$(realpath "$1")"; tiny="$(realpath "$2")"; smoke="$(realpath "$3")"; fashion="$(realpath "$4")"
transformer="$(dirname "$tiny")/tiny-transformer.yaml"
work="$5"; mpi_part="${6:-with-mpi}"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"

# same_checkpoints A B STEP: the model and optimizer files of ckpt-STEP agree byte for byte.
same_checkpoints() {
  local f
  for f in model.safetensors optimizer.safetensors; do
    cmp "$1/checkpoints/ckpt-$3/$f" "$2/checkpoints/ckpt-$3/$f" ||
      fail "$1 and $2 differ in ckpt-$3/$f"
  done
}
# train_both NAME EXPERIMENT ARGS...: the same run on cpu and on sim (logdirs
# NAME-cpu and NAME-sim, logs NAME-cpu.log and NAME-sim.log).
train_both() {
  local name="$1" exp="$2"; shift 2
  local device
  for device in cpu sim; do
    check "$rig" run "$exp" --logdir "$name-$device" --device="$device" "$@" > "$name-$device.log"
  done
}
# results LOG: the numbers a run printed (losses, metrics, BLEU, sample counts).
results() {
  grep -E 'loss|accuracy|Acc@|BLEU|Evaluated' "$1" | grep -v '^+ ' | sed -e 's/ in [0-9.]*s$//' -e 's/: saved .*//'
}
# same_results A.log B.log: both runs printed the same numbers.
same_results() {
  diff <(results "$1") <(results "$2") || fail "$1 and $2 print different results"
  [ -n "$(results "$1")" ] || fail "$1 printed no results"
}

echo "== mlp: training on sim writes the CPU's checkpoints"
train_both mlp "$tiny"
grep -q "Global step 40:" mlp-sim.log || fail "the sim run did not train"
same_results mlp-cpu.log mlp-sim.log
same_checkpoints mlp-cpu mlp-sim 40

echo "== clipped by the norm queued on the device (no read): the CPU's checkpoints"
train_both clip "$tiny" --max_grad_norm=0.01
same_results clip-cpu.log clip-sim.log
same_checkpoints clip-cpu clip-sim 40
if cmp -s mlp-sim/checkpoints/ckpt-40/model.safetensors clip-sim/checkpoints/ckpt-40/model.safetensors
then fail "max_grad_norm=0.01 clipped nothing"; fi

echo "== a bad RIG_SIM_MEMORY_GB is the user's to fix: exit 2, one line"
RIG_SIM_MEMORY_GB=abc expect_error "^rig: error: RIG_SIM_MEMORY_GB='abc': expected a whole number of GiB" \
  run "$tiny" --logdir bad-size --device=sim

echo "== mlp: eval, infer and interactive_infer on sim print what the CPU prints"
for mode in eval infer; do
  for device in cpu sim; do
    check "$rig" run "$tiny" --logdir "mlp-$device" --device="$device" --mode "$mode" \
      > "$mode-$device.log"
  done
done
same_results eval-cpu.log eval-sim.log
cmp mlp-cpu/infer_output.txt mlp-sim/infer_output.txt || fail "infer on sim writes other lines"
for device in cpu sim; do
  printf '0.5 1 -2 3\n1 1 1 1\n' |
    "$rig" run "$tiny" --logdir "mlp-$device" --device="$device" --mode interactive_infer \
      > "interactive-$device.txt" 2> "interactive-$device.err"
done
diff interactive-cpu.txt interactive-sim.txt || fail "interactive_infer on sim differs"
[ "$(grep -c . interactive-sim.txt)" -ge 2 ] || fail "interactive_infer printed too little"

echo "== mlp: iter_size 2 on sim"
train_both accum "$tiny" --iter_size=2 --max_steps=20
same_checkpoints accum-cpu accum-sim 20

echo "== a CPU checkpoint resumes on sim, and a sim one on the CPU, bit for bit"
check "$rig" run "$tiny" --logdir cross --device=cpu --max_steps=20 > cross-20.log
check "$rig" run "$tiny" --logdir cross --device=sim --continue_learning > cross-40.log
grep -q "Resuming from .*ckpt-20 at step 20" cross-40.log || fail "sim did not resume"
same_checkpoints mlp-cpu cross 40
check "$rig" run "$tiny" --logdir cross --device=cpu --max_steps=60 --continue_learning > cross-60.log
check "$rig" run "$tiny" --logdir mlp-cpu --device=cpu --max_steps=60 --continue_learning > cpu-60.log
same_checkpoints mlp-cpu cross 60

echo "== smoke, and the other optimizers and LARC, on sim"
train_both smoke "$smoke"
same_checkpoints smoke-cpu smoke-sim "$(ls smoke-cpu/checkpoints | sed -n 's/^ckpt-//p' | sort -n | tail -1)"
train_both novograd "$tiny" --optimizer=novograd --set optimizer_params={} --max_steps=20
same_checkpoints novograd-cpu novograd-sim 20
train_both larc "$tiny" --set larc_params.larc_eta=0.01 --max_steps=20
same_checkpoints larc-cpu larc-sim 20
train_both adam "$tiny" --optimizer=adam --set optimizer_params={} --max_steps=20
same_checkpoints adam-cpu adam-sim 20

echo "== a transformer on synthetic_text: train_eval with beam search, float32 and mixed precision"
cp "$transformer" transformer.yaml
for dtype in float32 mixed; do
  train_both "nmt-$dtype" transformer.yaml --mode train_eval --dtype="$dtype"
  grep -Eq "hyp_len = [1-9]" "nmt-$dtype-sim.log" || fail "no BLEU of decoded words on sim ($dtype)"
  same_results "nmt-$dtype-cpu.log" "nmt-$dtype-sim.log"
  same_checkpoints "nmt-$dtype-cpu" "nmt-$dtype-sim" 40
  cmp "nmt-$dtype-cpu/eval_outputs.txt" "nmt-$dtype-sim/eval_outputs.txt" ||
    fail "beam search on sim decodes differently ($dtype)"
done

if [ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "== a ResNet on Fashion-MNIST (batch norm, convolutions, pooling)"
  train_both resnet "$fashion" --mode train_eval --num_epochs=1 --set data_layer_params.limit=96 \
    --batch_size_per_gpu=16 --eval_steps=6 --save_checkpoint_steps=6 --print_loss_steps=2
  grep -q "Validation Acc@1" resnet-sim.log || fail "no accuracy on sim"
  same_results resnet-cpu.log resnet-sim.log
  same_checkpoints resnet-cpu resnet-sim 6
else
  echo "(no Fashion-MNIST: the ResNet part is skipped)"
fi

if [ "$mpi_part" = with-mpi ] && command -v mpirun > /dev/null && "$rig" plugins | grep -Eq '^communicator +mpi '; then
  echo "== two mpi ranks on sim write the checkpoints of two on the CPU"
  mpi=(mpirun --oversubscribe --allow-run-as-root -n 2)
  for device in cpu sim; do
    check "${mpi[@]}" "$rig" run "$tiny" --logdir "mpi-$device" --device="$device" \
      --communicator=mpi --max_steps=20 > "mpi-$device.log" 2>&1
  done
  same_checkpoints mpi-cpu mpi-sim 20
else
  echo "(no-mpi, no mpirun or no mpi communicator: the two-rank part is skipped)"
fi
echo "PASS"
