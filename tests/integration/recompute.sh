#!/usr/bin/env bash
# The transformer's recompute_activations trains to the same bits as without:
# the same loss lines and byte-identical checkpoints on the CPU, in two
# processes (gradient buckets leave as the layers' second runs finish them),
# and on the emulated GPU with fused attention (whose dropout is cuDNN's
# contract's, drawn again from the key); and a ResNet's blocks on the
# emulated GPU (batch norm's running statistics in the checkpoint).
# Usage: recompute.sh RIG TINY_TRANSFORMER WORKDIR [with-mpi|no-mpi]
set -euo pipefail
export LC_ALL=C RIG_PROGRESS=0
rig="$(realpath "$1")"; tiny="$(realpath "$2")"; work="$3"; mpi="${4:-with-mpi}"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
# Two layers each side, so that a recomputed layer feeds another.
layers=(--model_params/encoder_params/encoder_layers=2 --model_params/decoder_params/num_hidden_layers=2)

# same_runs NAME: NAME-off and NAME-on printed the same losses and saved the same weights.
same_runs() {
  losses() { grep -E 'loss' "$1" | grep -v '^+ ' | sed 's/ in [0-9.]*s$//'; }
  diff <(losses "$1-off.log") <(losses "$1-on.log") || fail "$1: the losses differ"
  [ -n "$(losses "$1-on.log")" ] || fail "$1: no loss lines"
  local off on
  off="$(ls -d "$1-off"/checkpoints/ckpt-* | tail -n 1)"
  on="$(ls -d "$1-on"/checkpoints/ckpt-* | tail -n 1)"
  cmp "$off/model.safetensors" "$on/model.safetensors" || fail "$1: the weights differ"
}

for r in off on; do
  flag=$([ "$r" = on ] && echo true || echo false)
  check "$rig" run "$tiny" --max_steps=12 --save_checkpoint_steps=12 --logdir "cpu-$r" \
    --model_params/recompute_activations="$flag" "${layers[@]}" > "cpu-$r.log"
done
same_runs cpu
peak() { sed -n 's/^\*\*\* Peak memory on [^:]*: \([0-9.]*\) \([KMG]i\)\{0,1\}B allocated.*/\1 \2/p' "$1"; }
echo "peak allocated: off $(peak cpu-off.log), on $(peak cpu-on.log)"

if [ "$mpi" = with-mpi ] && command -v mpirun > /dev/null; then
  for r in off on; do
    flag=$([ "$r" = on ] && echo true || echo false)
    check mpirun --allow-run-as-root --oversubscribe -n 2 "$rig" run "$tiny" --communicator=mpi \
      --bucket_cap_mb=0.001 --max_steps=12 --save_checkpoint_steps=12 --logdir "mpi-$r" \
      --model_params/recompute_activations="$flag" "${layers[@]}" > "mpi-$r.log" 2>&1
  done
  same_runs mpi
fi

export RIG_CUDA_EMULATOR=1 RIG_CUDA_EMULATOR_FUSED_ATTENTION=1
for r in off on; do
  flag=$([ "$r" = on ] && echo true || echo false)
  check "$rig" run "$tiny" --device=cuda --dtype=mixed --mixed_dtype=bfloat16 --max_steps=4 \
    --save_checkpoint_steps=4 --logdir "cuda-$r" --model_params/recompute_activations="$flag" \
    "${layers[@]}" > "cuda-$r.log"
done
same_runs cuda
# A ResNet-20 with projection shortcuts, channels last, bf16 mixed, on the
# emulated GPU: its blocks recomputed, batch norm's running statistics moved once.
resnet="$(realpath "$(dirname "$tiny")/../../../experiments/resnet50-synthetic.yaml")"
for r in off on; do
  flag=$([ "$r" = on ] && echo true || echo false)
  check "$rig" run "$resnet" --device=cuda --model_params/style=cifar --model_params/depth=20 \
    --data_layer_params/image_size=8 --data_layer_params/num_classes=10 --batch_size_per_gpu=4 \
    --max_steps=2 --print_loss_steps=1 --save_checkpoint_steps=2 --logdir "resnet-$r" \
    --model_params/recompute_activations="$flag" > "resnet-$r.log"
done
same_runs resnet
echo "recompute: PASS"
