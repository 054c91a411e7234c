#!/usr/bin/env bash
# device: cuda end to end without a GPU: RIG_CUDA_EMULATOR=1 runs the CUDA
# back end (core/cuda/backend: every entry point as its kernels, cuBLASLt
# plans and convolutions) with the kernel bodies in the SIMT emulator, so
# the engine, every op and the GPU's kernel sequences train real experiments
# here. The kernels sum in other orders than the CPU's, so results agree
# within tolerances (beam search and argmax outputs exactly), not in bits:
# - an mlp: train, eval, infer, interactive_infer; a checkpoint resumed
#   across devices both ways; iter_size 2; sgd, novograd, LARC and adam;
#   sgd and adam in bfloat16 mixed precision with and without the unscale
#   and the cast folded into their kernels (the same bits);
# - a transformer on synthetic_text, train_eval with beam search, float32
#   (decoded exactly as on the CPU) and float16 mixed precision (loss
#   scaling on the device, f16 products: the losses), and mixed bfloat16;
# - a ResNet on Fashion-MNIST when Debian's dataset is installed (batch
#   norm, convolutions, pooling), at a small learning rate: its first steps
#   amplify rounding differences at the experiment's own; and in bfloat16
#   mixed precision (the device's 16-bit convolutions, batch norm and relu).
# quick (the sanitizer builds, where the emulator is many times slower): the
# mlp's training and a few float32 transformer steps with beam search only.
# Usage: cuda_emulated.sh RIG TINY_EXPERIMENT SMOKE_EXPERIMENT FASHION_EXPERIMENT WORKDIR [full|quick]
set -euo pipefail
export LC_ALL=C RIG_PROGRESS=0 RIG_CUDA_EMULATOR=1
rig="$(realpath "$1")"; tiny="$(realpath "$2")"; smoke="$(realpath "$3")"; fashion="$(realpath "$4")"
work="$5"; extent="${6:-full}"
transformer="$(dirname "$tiny")/tiny-transformer.yaml"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"

# train_both NAME EXPERIMENT ARGS...: the same run on cpu and on cuda.
train_both() {
  local name="$1" exp="$2"; shift 2
  local device
  for device in cpu cuda; do
    check "$rig" run "$exp" --logdir "$name-$device" --device="$device" "$@" > "$name-$device.log"
  done
  grep -q '^\*\*\* Device: cuda:0 (RIG_CUDA_EMULATOR=1' "$name-cuda.log" ||
    fail "$name-cuda.log does not name the emulated device"
}
# close_results A.log B.log [REL [LINES]]: the same result lines (those
# matching the regex LINES, default every loss, accuracy and BLEU), every
# number within REL (relative, default 2e-3) or 2e-4 (absolute).
close_results() {
  local lines="${4:-loss|accuracy|Acc@|BLEU|Evaluated}"
  python3 - "$1" "$2" "${3:-2e-3}" "$lines" <<'PY' || fail "$1 and $2 print different results"
import re, sys
def results(path):
    keep = re.compile(sys.argv[4])
    out = []
    for line in open(path):
        if keep.search(line) and not line.startswith("+ "):
            line = re.sub(r" in [0-9.]*s$", "", line.rstrip("\n"))
            line = re.sub(r": saved .*", "", line)
            out.append(line)
    return out
a, b, rel = results(sys.argv[1]), results(sys.argv[2]), float(sys.argv[3])
if not a or len(a) != len(b):
    sys.exit(f"{len(a)} result lines against {len(b)}")
num = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
for x, y in zip(a, b):
    if num.sub("#", x) != num.sub("#", y):
        sys.exit(f"lines differ:\n  {x}\n  {y}")
    for u, v in zip(num.findall(x), num.findall(y)):
        u, v = float(u), float(v)
        if abs(u - v) > 2e-4 + rel * abs(v):
            sys.exit(f"numbers differ beyond {rel}:\n  {x}\n  {y}")
PY
}

echo "== mlp: training on the emulated cuda device gives the CPU's losses"
train_both mlp "$tiny"
grep -q "Global step 40:" mlp-cuda.log || fail "the cuda run did not train"
close_results mlp-cpu.log mlp-cuda.log

if [ "$extent" = quick ]; then
  echo "== quick: a transformer's float32 steps and beam search"
  cp "$transformer" transformer.yaml
  train_both nmt-quick transformer.yaml --mode train_eval --max_steps=4 --print_loss_steps=2 \
    --eval_steps=4 --save_checkpoint_steps=4
  close_results nmt-quick-cpu.log nmt-quick-cuda.log
  cmp nmt-quick-cpu/eval_outputs.txt nmt-quick-cuda/eval_outputs.txt ||
    fail "beam search on cuda decodes differently"
  echo "PASS (quick)"; exit 0
fi

echo "== mlp: eval, infer and interactive_infer on cuda"
for mode in eval infer; do
  for device in cpu cuda; do
    check "$rig" run "$tiny" --logdir "mlp-$device" --device="$device" --mode "$mode" \
      > "$mode-$device.log"
  done
done
close_results eval-cpu.log eval-cuda.log
cmp mlp-cpu/infer_output.txt mlp-cuda/infer_output.txt || fail "infer on cuda writes other lines"
printf '0.5 1 -2 3\n1 1 1 1\n' |
  "$rig" run "$tiny" --logdir mlp-cuda --device=cuda --mode interactive_infer > interactive.txt
[ "$(grep -c . interactive.txt)" -ge 2 ] || fail "interactive_infer printed too little"

echo "== a checkpoint resumes across devices, both ways"
check "$rig" run "$tiny" --logdir mlp-cpu --device=cuda --max_steps=50 --continue_learning \
  > resume-on-cuda.log
grep -q "Resuming from .*ckpt-40 at step 40" resume-on-cuda.log || fail "no resume on cuda"
grep -q "Global step 50:" resume-on-cuda.log || fail "the resumed run did not train"
check "$rig" run "$tiny" --logdir mlp-cuda --device=cpu --max_steps=50 --continue_learning \
  > resume-on-cpu.log
close_results resume-on-cuda.log resume-on-cpu.log

echo "== iter_size 2 and the optimizers on cuda"
train_both accum "$tiny" --iter_size=2 --max_steps=20
close_results accum-cpu.log accum-cuda.log
train_both novograd "$smoke" --optimizer=novograd --set optimizer_params={} --max_steps=20 \
  --print_loss_steps=5
close_results novograd-cpu.log novograd-cuda.log
train_both larc "$tiny" --set larc_params.larc_eta=0.01 --max_steps=20
close_results larc-cpu.log larc-cuda.log
train_both adam "$tiny" --optimizer=adam --set optimizer_params={} --max_steps=20
close_results adam-cpu.log adam-cuda.log

echo "== mixed precision folded into the update's kernel: the bits of the separate kernels"
# sgd and adam read the bf16 gradients unscaled as they read them and write
# the bf16 weights; with a max_grad_norm never reached the unscale, the
# statistics and the cast run as kernels of their own.
for optimizer in sgd adam; do
  args=()
  [ "$optimizer" = adam ] && args=(--optimizer=adam --set "optimizer_params={amsgrad: true}")
  for fold in folded unfolded; do
    extra=()
    [ "$fold" = unfolded ] && extra=(--max_grad_norm=1e30)
    check "$rig" run "$tiny" --logdir "$fold-$optimizer" --device=cuda --dtype=mixed \
      --mixed_dtype=bfloat16 --max_steps=20 "${args[@]}" "${extra[@]}" > "$fold-$optimizer.log"
  done
  for part in model optimizer; do
    cmp "folded-$optimizer/checkpoints/ckpt-20/$part.safetensors" \
      "unfolded-$optimizer/checkpoints/ckpt-20/$part.safetensors" ||
      fail "$optimizer: the folded update wrote another $part on cuda"
  done
done

echo "== a transformer on synthetic_text: train_eval with beam search, float32 and mixed precision"
# The fixture's 40 steps halved: the emulator is slow.
sed -e 's/^  max_steps: 40$/  max_steps: 20/' -e 's/^  eval_steps: 40$/  eval_steps: 20/' \
  -e 's/^  save_checkpoint_steps: 40$/  save_checkpoint_steps: 20/' "$transformer" > transformer.yaml
train_both nmt-float32 transformer.yaml --mode train_eval --dtype=float32
grep -Eq "hyp_len = [1-9]" nmt-float32-cuda.log || fail "no BLEU of decoded words (float32)"
close_results nmt-float32-cpu.log nmt-float32-cuda.log
cmp nmt-float32-cpu/eval_outputs.txt nmt-float32-cuda/eval_outputs.txt ||
  fail "beam search on cuda decodes differently (float32)"
# float16 mixed precision: on cuda the products read f16 as it is and their
# backward operand dz is rounded to f16 (as autocast's), so an untrained
# model's beams may part from the CPU's: decoding works, the losses agree.
train_both nmt-mixed transformer.yaml --mode train_eval --dtype=mixed
grep -Eq "hyp_len = [1-9]" nmt-mixed-cuda.log || fail "no BLEU of decoded words (mixed)"
close_results nmt-mixed-cpu.log nmt-mixed-cuda.log 2e-3 "Train loss|Validation loss"
# bfloat16 activations: a sum in another order can round to a neighbouring
# bfloat16, so an untrained model's beams may part: the losses only. Those
# differences grow step by step with no direction (60 steps, measured: 0.07%,
# 0.25%, -0.1%, -0.9%, 0.06%, -1.0% every 10), so step 20's may reach 0.25%.
train_both nmt-mixed-bf16 transformer.yaml --mode train --dtype=mixed --mixed_dtype=bfloat16
close_results nmt-mixed-bf16-cpu.log nmt-mixed-bf16-cuda.log 5e-3

if [ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "== a ResNet on Fashion-MNIST (batch norm, convolutions, pooling)"
  train_both resnet "$fashion" --mode train_eval --num_epochs=1 --set data_layer_params.limit=48 \
    --set lr_policy_params.max_lr=0.0001 --batch_size_per_gpu=16 --eval_steps=3 \
    --save_checkpoint_steps=3 --print_loss_steps=1
  grep -q "Validation Acc@1" resnet-cuda.log || fail "no accuracy on cuda"
  close_results resnet-cpu.log resnet-cuda.log
  echo "== the ResNet in bfloat16 mixed precision (16-bit convolutions, batch norm and relu)"
  train_both resnet-bf16 "$fashion" --mode train --num_epochs=1 --set data_layer_params.limit=48 \
    --set lr_policy_params.max_lr=0.0001 --batch_size_per_gpu=16 --print_loss_steps=1 \
    --dtype=mixed --mixed_dtype=bfloat16
  close_results resnet-bf16-cpu.log resnet-bf16-cuda.log 1e-2
  echo "== the same channels last (NHWC convolutions, [N H W, C] batch norms, NHWC pooling)"
  train_both resnet-nhwc "$fashion" --mode train --num_epochs=1 --set data_layer_params.limit=48 \
    --set lr_policy_params.max_lr=0.0001 --batch_size_per_gpu=16 --print_loss_steps=1 \
    --dtype=mixed --mixed_dtype=bfloat16 --set model_params.data_format=channels_last
  close_results resnet-nhwc-cpu.log resnet-nhwc-cuda.log 1e-2
  close_results resnet-bf16-cpu.log resnet-nhwc-cpu.log 1e-2
  echo "== float16 mixed with the Backoff scaler, channels last (imagenet-resnet50's AMP setting)"
  train_both resnet-f16 "$fashion" --mode train --num_epochs=1 --set data_layer_params.limit=48 \
    --set lr_policy_params.max_lr=0.0001 --batch_size_per_gpu=16 --print_loss_steps=1 \
    --dtype=mixed --loss_scaling=Backoff --set model_params.data_format=channels_last
  # the scaler starts at 2^24: the same overflows skip the same steps on both
  overflows=$(grep -c "Overflow at step" resnet-f16-cuda.log || true)
  [ "$overflows" -gt 0 ] || fail "no overflow skipped on cuda: the scaler's path is not tested"
  [ "$overflows" = "$(grep -c "Overflow at step" resnet-f16-cpu.log)" ] ||
    fail "cuda and the CPU skipped different steps"
  close_results resnet-f16-cpu.log resnet-f16-cuda.log 1e-2
else
  echo "(no Fashion-MNIST: the ResNet part is skipped)"
fi

echo "== a bad RIG_CUDA_EMULATOR is the user's to fix: exit 2, one line"
RIG_CUDA_EMULATOR=yes expect_error "^rig: error: .*RIG_CUDA_EMULATOR=yes: expected 1" \
  run "$tiny" --logdir bad-emulator --device=cuda
echo "PASS"
