#!/usr/bin/env bash
# tools/kernel-census on the emulated CUDA device (RIG_CUDA_EMULATOR=1): one
# step of the tiny mlp in float32 and in bfloat16 mixed precision, counted
# kernel by kernel; a bad call is refused with exit 2.
# Usage: kernel_census.sh TOOL RIG TINY_EXPERIMENT WORKDIR
set -euo pipefail
export LC_ALL=C RIG_PROGRESS=0 RIG_CUDA_EMULATOR=1
tool="$(realpath "$1")"; rig="$(realpath "$2")"; tiny="$(realpath "$3")"; work="$4"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"

echo "== float32: the mlp's two linear layers forward and backward, sgd, no casts"
check "$tool" "$rig" f32.txt -- "$tiny"
grep -q "^One training step" f32.txt || fail "no heading"
# forward 2 products (the logits' adds its bias in its epilogue; the hidden
# layer's tanh is a pass of its own), backward 3 (the first layer's input
# needs no gradient), the backward's dW added into the weights' .grad by the
# products (beta 1); the biases' gradients are added in passes of their own
grep -Eq "^ +2 .* cuBLASLt matmul f32 x f32 -> f32$" f32.txt || fail "not 2 f32 products a step"
grep -Eq "^ +1 .* cuBLASLt matmul f32 x f32 -> f32, BIAS$" f32.txt ||
  fail "not 1 f32 product adding its bias"
grep -Eq "^ +1 .* BiasActivation f32$" f32.txt || fail "not 1 bias + activation pass"
grep -Eq "^ +2 .* cuBLASLt matmul f32 x f32 \+= f32$" f32.txt ||
  fail "not 2 f32 products adding into .grad"
grep -Eq "^ +2 .* AddStrided f32 \+= f32$" f32.txt || fail "not 2 adds of the biases' gradients"
grep -Eq "^ +1 .* SgdUpdateKernel f32, packed$" f32.txt || fail "not one sgd update a step"
grep -q "^casts between dtypes .*: 0.0 kB, 0.0%" f32.txt || fail "a float32 step casts"
grep -Eq "^ +[0-9]+ .* in all" f32.txt || fail "no total"
# no decision of the step needs its gradient statistics: they are queued on
# the device and read with the logged loss, so the step never reads the device
if grep -q "copy to host$" f32.txt; then fail "a float32 step reads the device"; fi

echo "== clipping by the norm on the device: no read either"
check "$tool" "$rig" clip.txt -- "$tiny" --max_grad_norm=1
grep -Eq "^ +1 .* ClipByNorm" clip.txt || fail "not one clip kernel a step"
if grep -q "copy to host$" clip.txt; then fail "a clipped step reads the device"; fi

echo "== automatic loss scaling: the step reads its statistics, once"
check "$tool" "$rig" backoff.txt -- "$tiny" --dtype=mixed --mixed_dtype=bfloat16 \
  --loss_scaling=Backoff
grep -Eq "^ +1 .* copy to host$" backoff.txt || fail "not one read of the device a Backoff step"

echo "== bfloat16 mixed: the update reads the bf16 gradients and writes the bf16 weights"
check "$tool" "$rig" bf16.txt -- "$tiny" --dtype=mixed --mixed_dtype=bfloat16
grep -Eq "^ +1 .* SgdUpdateKernel bf16 -> f32 -> bf16, packed$" bf16.txt ||
  fail "the update does not fold the unscale and the weights' cast"
grep -Eq "^ +1 .* GradStatsPartials bf16, packed$" bf16.txt ||
  fail "the statistics do not read the bf16 gradients"
if grep -q "UnscalePartials" bf16.txt; then fail "the gradients unscaled in a pass of their own"; fi
grep -Eq "cuBLASLt matmul bf16 x bf16" bf16.txt || fail "no bf16 products"
# clipping rescales the f32 master gradients: they are unscaled first, and
# the update still writes the bf16 weights
check "$tool" "$rig" bf16-clip.txt -- "$tiny" --dtype=mixed --mixed_dtype=bfloat16 \
  --max_grad_norm=1
grep -Eq "^ +1 .* UnscalePartials bf16 -> f32, packed$" bf16-clip.txt ||
  fail "clipped bf16 gradients not unscaled into f32"
# (the statistics give the largest gradient: the unscale computes none)
if grep -q "UnscaleFinish" bf16-clip.txt; then fail "the unscale reduced a statistic nobody reads"; fi
grep -Eq "^ +1 .* SgdUpdateKernel f32 -> bf16, packed$" bf16-clip.txt ||
  fail "the clipped run's update does not write the bf16 weights"

echo "== a bfloat16 transformer with the emulated device's fused attention (as cuDNN's on a GPU)"
transformer="$(dirname "$tiny")/tiny-transformer.yaml"
RIG_CUDA_EMULATOR_FUSED_ATTENTION=1 check "$tool" "$rig" nmt.txt -- "$transformer" \
  --dtype=mixed --mixed_dtype=bfloat16 --model_params.encoder_params.relu_dropout=0.1 \
  --model_params.decoder_params.relu_dropout=0.1
# 1 encoder self, 1 decoder self and 1 encoder-decoder attention, forward and backward
grep -Eq "^ +3 .* fused attention forward bf16$" nmt.txt || fail "not 3 fused attention forwards"
grep -Eq "^ +3 .* fused attention backward bf16$" nmt.txt || fail "not 3 fused attention backwards"
if grep -q "SoftmaxForward" nmt.txt; then fail "attention composed from softmax kernels"; fi
# the logits reach the loss in bf16, and their gradient leaves it in bf16
grep -Eq "^ +1 .* CrossEntropyForward bf16, packed$" nmt.txt || fail "the loss does not read bf16 logits"
grep -Eq "^ +1 .* CrossEntropyBackward bf16, packed$" nmt.txt || fail "the loss's gradient is not bf16"
# each feed-forward layer's first linear: bias and relu in the product's
# epilogue, which writes bf16, then its dropout's mask in one pass over that
# (unscaled: exact after the rounding; the second linear's products apply
# 1 / (1 - p)); its second adds the bias in its epilogue too
grep -Eq "^ +2 .* cuBLASLt matmul bf16 x bf16 -> bf16, RELU_BIAS$" nmt.txt ||
  fail "not 2 products adding their bias and relu"
if grep -q "BiasReluDropoutStore" nmt.txt; then fail "an f32 product read back for bias and relu"; fi
grep -Eq "^ +2 .* cuBLASLt matmul bf16 x bf16 -> bf16, BIAS$" nmt.txt ||
  fail "not 2 products adding their bias"
# the encoder's feed-forward output: its padding mask, dropout and residual
# add in one pass each way (no mul by the mask)
grep -Eq "^ +1 .* DropoutForward bf16, \+ residual, rows scaled, packed$" nmt.txt ||
  fail "the encoder's padding mask not applied in the dropout-add"
grep -Eq "^ +1 .* DropoutBackward bf16, rows scaled, packed$" nmt.txt ||
  fail "the padding mask's backward not in the dropout's"
# the second's backward: its bf16 g is dz as it is, the pass only sums the bias's gradient
grep -Eq "^ +2 .* ActivationBackward g bf16 saved none dz none, packed$" nmt.txt ||
  fail "not 2 bias gradients summed from g without writing dz"
if grep -Eq "BiasActivation|DropoutForward f32" nmt.txt; then fail "an f32 bias or dropout pass"; fi
# the shared embedding's two lookups add their rows straight into its bf16 gradient
grep -Eq "^ +2 .* IndexAddSegments bf16 -> bf16$" nmt.txt || fail "not 2 row adds into bf16"
if grep -q "IndexAddSegments f32" nmt.txt; then fail "a dense f32 embedding gradient"; fi
# layer norms and biases read their bf16 parameters as they are and write their
# gradients in bf16: no f32 copies of them, no casts of their gradients; the
# step's casts are the two position encodings (Adam writes the bf16 weights)
if grep -q "CopyStrided bf16 -> f32" nmt.txt; then fail "a bf16 parameter copied to f32"; fi
grep -Eq "^ +2 .* CopyStrided f32 -> bf16, packed$" nmt.txt || fail "not 2 casts to bf16 a step"
grep -Eq "^ +1 .* AdamUpdateKernel bf16 -> f32 -> bf16, packed$" nmt.txt ||
  fail "Adam does not read the bf16 gradients and write the bf16 weights"
# every gradient is added where it is made, into the one already there (the
# residual stream's, x's other uses', the parameters' .grad): the linear
# layers' dx and dW by their products (beta 1), the layer norms' dx (5 of 7
# pass the residual stream's) and parameters and the biases by their kernels;
# only the feed-forward blocks' b1 (32 elements each), whose gradient
# cuBLASLt's epilogue writes beside dW1, is added by a (tiny) pass
if grep "AddStrided" nmt.txt | grep -Evq "^ +2 +64 .* AddStrided bf16 \+= bf16$"; then
  fail "a gradient added in a pass of its own"
fi
grep -Eq "^ +5 .* LayerNormBackwardDx bf16, added into dx, packed$" nmt.txt || fail "not 5 dx added into"
grep -Eq "cuBLASLt matmul bf16 x bf16 \+= bf16$" nmt.txt || fail "no product adds into a gradient"
# each residual connection's add and its branch's dropout in one pass (2 in the
# encoder layer, the feed-forward's with its padding mask, 3 in the decoder
# layer); the embeddings' dropouts stand alone
grep -Eq "^ +4 .* DropoutForward bf16, \+ residual, packed$" nmt.txt || fail "not 4 dropout adds"
# the embeddings' 2 dropouts, and the feed-forward blocks' 2, which also
# write the relu mask (a bit per hidden element, ops::relu_feed_forward)
grep -Eq "^ +2 .* DropoutForward bf16, packed$" nmt.txt || fail "not 2 dropouts of their own"
grep -Eq "^ +2 .* DropoutForward bf16, relu mask, packed$" nmt.txt ||
  fail "not 2 feed-forward dropouts writing the relu mask"
# relu's backward in the output layers' dx products (DRELU), b1's gradient in
# the dW1 products (BGRADB in cuBLASLt's operand order): no pass reads the
# hidden layer's gradient and output
grep -Eq "^ +2 .* cuBLASLt matmul bf16 x bf16 -> bf16, DRELU$" nmt.txt || fail "not 2 DRELU products"
grep -Eq "^ +2 .* cuBLASLt matmul bf16 x bf16 \+= bf16, BGRADB$" nmt.txt ||
  fail "not 2 dW1 products writing b1's gradient"
if grep -q "ActivationBackward g bf16 saved bf16" nmt.txt; then fail "a relu backward pass"; fi
# no read of the device in mixed precision either (unscaling reads nothing;
# the index checks' results and the statistics wait for the logged loss)
if grep -q "copy to host$" nmt.txt; then fail "a bfloat16 step reads the device"; fi

echo "== self-attention's q, k and v projections are one product (RIG_CUDA_CENSUS_SHAPES)"
RIG_CUDA_EMULATOR_FUSED_ATTENTION=1 RIG_CUDA_CENSUS_SHAPES=1 check "$tool" "$rig" nmt-shapes.txt -- \
  "$transformer" --dtype=mixed --mixed_dtype=bfloat16
# the encoder's and the decoder's: d 16 in, 3 x 16 out, over 48 tokens; their
# joined weights' gradient added into .grad by one product each
grep -Eq "^ +2 .* cuBLASLt matmul bf16 x bf16 -> bf16 \[m 48 n 48 k 16\]$" nmt-shapes.txt ||
  fail "not 2 joined q, k, v products"
grep -Eq "^ +2 .* cuBLASLt matmul bf16 x bf16 \+= bf16 \[m 16 n 48 k 48\]$" nmt-shapes.txt ||
  fail "not 2 joined q, k, v weight gradients added into .grad"
# (the feed-forward blocks' b1 gradients are the only adds, as above)
if grep "AddStrided" nmt-shapes.txt | grep -Evq "^ +2 +64 .* AddStrided bf16 \+= bf16$"; then
  fail "a joined weight's gradient added in a pass of its own"
fi

echo "== a float16 transformer: its products on the f16 tensor cores, none in f32"
RIG_CUDA_EMULATOR_FUSED_ATTENTION=1 check "$tool" "$rig" nmt16.txt -- "$transformer" \
  --dtype=mixed --mixed_dtype=float16
grep -Eq "cuBLASLt matmul f16 x f16 -> f16$" nmt16.txt || fail "no f16 products"
if grep -q "cuBLASLt matmul f32 x f32" nmt16.txt; then fail "an f32 product in a float16 step"; fi

echo "== a bfloat16 ResNet-50, channels last, host-only (at 32 x 32, batch 2)"
resnet="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/experiments/resnet50-synthetic.yaml"
RIG_CUDA_EMULATOR_HOST_ONLY=1 check "$tool" "$rig" r50.txt -- "$resnet" --batch_size_per_gpu=2 \
  --data_layer_params.image_size=32
# each residual block's input gradient: its first convolution's dx added by the
# convolution into the shortcut's (16 blocks); the adds left are parameter-sized
grep -Eq "^ +16 .* convolution data gradient bf16 nhwc, added into dx$" r50.txt ||
  fail "not 16 convolutions adding their dx"
grep -Eq "^ +36 .* convolution data gradient bf16 nhwc$" r50.txt || fail "not 36 other dx"
# the parameters' gradients added into their .grad where they are made: the
# 1 x 1 convolutions' dW by cuDNN (beta 1), the batch norms' dgamma and dbeta
# by their kernels; only the 17 larger kernels' dW (of a permuted copy of the
# weight, channels last) are added in a pass of their own
grep -Eq "^ +36 .* convolution filter gradient bf16 nhwc, added into dw$" r50.txt ||
  fail "not 36 convolutions adding their dW"
grep -Eq "^ +17 .* AddStrided bf16 \+= bf16$" r50.txt || fail "not 17 adds of parameter gradients"
# a training batch norm's coefficients come from the kernel that finishes its
# statistics (batch_norm_stats_prepare), not from a launch of their own
grep -Eq "^ +53 .* BatchNormStatsFinish$" r50.txt || fail "not 53 batch norms' statistics"
if grep -q "BatchNormPrepareChannels" r50.txt; then fail "a training step prepares in a launch of its own"; fi
# every batch norm's passes move packs of 8 (kernels/packed.hpp): the
# tensors of a run are aligned for them, and the channels (64 to 2048) come in
# multiples of 8
if grep -E "BatchNorm(Apply|BackwardDx) " r50.txt | grep -vq ", packed"; then
  fail "a batch norm pass element by element"
fi
if grep -Eq "BatchNorm(Stats|Grad)Partial " r50.txt; then
  fail "a batch norm's partial sums a channel a thread"
fi
# each residual block's end (relu(batch norm + shortcut)) stores its relu's
# mask as bits, which its backward reads instead of the block's output; the
# 4 with a projection shortcut normalise it in the same pass (its batch norm's
# output never written), and both their batch norms' backwards read dy
# through the bits (no masked dy stored for the shortcut)
grep -Eq "^ +12 .* BatchNormApply bf16, \+ residual, relu bits, packed$" r50.txt ||
  fail "not 12 identity-shortcut block ends storing their relu bits"
grep -Eq "^ +4 .* BatchNormApply bf16, \+ batch norm, relu bits, packed$" r50.txt ||
  fail "not 4 projection-shortcut block ends normalising the shortcut in their pass"
grep -Eq "^ +33 .* BatchNormApply bf16, packed$" r50.txt || fail "not 33 plain batch norm applies"
grep -Eq "^ +12 .* BatchNormGradPartialPacked bf16, relu bits, masked dy stored$" r50.txt ||
  fail "not 12 identity-shortcut block ends' backward reading the relu bits"
grep -Eq "^ +8 .* BatchNormGradPartialPacked bf16, relu bits$" r50.txt ||
  fail "not 8 projection-shortcut batch norms' backward reading the relu bits"
if grep -Eq "BatchNorm.*bf16, relu(,|$)" r50.txt; then fail "a batch norm reading the relu's output"; fi
# and so does the stem's max pooling (64 channels)
grep -Eq "^ +1 .* MaxPool2dForward bf16, packed$" r50.txt || fail "max pooling element by element"
grep -Eq "^ +1 .* MaxPool2dBackward bf16, packed$" r50.txt ||
  fail "max pooling's gradient element by element"

echo "== a float32 ResNet-50, channels first, host-only (at 32 x 32, batch 2)"
RIG_CUDA_EMULATOR_HOST_ONLY=1 check "$tool" "$rig" r50-f32.txt -- "$resnet" --batch_size_per_gpu=2 \
  --data_layer_params.image_size=32 --dtype=float32 --model_params.data_format=channels_first
# batch norm adds f32 dgamma and dbeta into .grad too, and the f32
# convolutions their dW (cuDNN's beta 1; NCHW: every weight is the
# parameter) and the residual blocks' dx, the classifier's product its dW:
# only the classifier's bias gradient is added in a pass of its own
grep -Eq "^ +53 .* convolution filter gradient f32, added into dw$" r50-f32.txt ||
  fail "not 53 f32 convolutions adding their dW"
grep -Eq "^ +16 .* convolution data gradient f32, added into dx$" r50-f32.txt ||
  fail "not 16 f32 convolutions adding their dx"
grep -Eq "^ +1 .* AddStrided f32 \+= f32$" r50-f32.txt || fail "not 1 add in a float32 step"
if grep -q "(tf32)" r50-f32.txt; then fail "TF32 at matmul_precision float32"; fi

echo "== the same at matmul_precision tensorfloat32: every convolution and product TF32"
RIG_CUDA_EMULATOR_HOST_ONLY=1 check "$tool" "$rig" r50-tf32.txt -- "$resnet" \
  --batch_size_per_gpu=2 --data_layer_params.image_size=32 --dtype=float32 \
  --model_params.data_format=channels_first --matmul_precision=tensorfloat32
grep -Eq "^ +53 .* convolution filter gradient f32 \(tf32\), added into dw$" r50-tf32.txt ||
  fail "not 53 TF32 convolutions adding their dW"
if grep -E "convolution|cuBLASLt matmul" r50-tf32.txt | grep -vq "(tf32)"; then
  fail "a float32 convolution or product without TF32"
fi

echo "== host-only (RIG_CUDA_EMULATOR_HOST_ONLY=1): the same step queued, nothing run"
RIG_CUDA_EMULATOR_FUSED_ATTENTION=1 RIG_CUDA_EMULATOR_HOST_ONLY=1 check "$tool" "$rig" \
  nmt-host.txt -- "$transformer" --dtype=mixed --mixed_dtype=bfloat16 \
  --model_params.encoder_params.relu_dropout=0.1 --model_params.decoder_params.relu_dropout=0.1
cmp -s nmt.txt nmt-host.txt || { diff nmt.txt nmt-host.txt || true; fail "host-only queued another step"; }
# zeros come back: the index checks and the gradient statistics must not stop training
RIG_CUDA_EMULATOR_HOST_ONLY=1 check "$rig" run "$transformer" --device=cuda --benchmark \
  --bench_steps=3 --dtype=mixed --mixed_dtype=bfloat16 --logdir=host-only > host-only.log 2>&1
grep -q "Avg time per step" host-only.log || fail "no time per step in host-only mode"
RIG_CUDA_EMULATOR_HOST_ONLY=yes expect_code 2 "$rig" run "$tiny" --device=cuda --max_steps=1 \
  --logdir=bad-host-only
grep -q "RIG_CUDA_EMULATOR_HOST_ONLY=yes: expected 1" err.txt || fail "no message for a bad value"

echo "== on a GPU the census times each line: the step's times, rates, and the lines by time"
# A stand-in for rig on a GPU: its census of STEPS steps (--bench_steps=STEPS)
# has each line's launches and device time STEPS times one step's.
cat > timed-rig <<'SH'
#!/usr/bin/env bash
steps=1
for a in "$@"; do case "$a" in --bench_steps=*) steps="${a#*=}" ;; esac; done
{
  echo "# rig kernel census (RIG_CUDA_CENSUS): launches elements bytes flops ms what"
  printf '%s\t0\t%s\t0\t%s\t%s\n' $((2 * steps)) $((3000000000 * steps)) \
    "$(awk -v s="$steps" 'BEGIN { printf "%.4f", 1.5 * s }')" "LayerNormForward bf16, packed"
  printf '%s\t0\t0\t%s\t%s\t%s\n' $((4 * steps)) $((2000000000000 * steps)) \
    "$(awk -v s="$steps" 'BEGIN { printf "%.4f", 4 * s }')" "cuBLASLt matmul bf16 x bf16 -> bf16"
  printf '%s\t0\t0\t0\t%s\t%s\n' "$steps" "$(awk -v s="$steps" 'BEGIN { printf "%.4f", 0.25 * s }')" \
    "GradStatsFinish"
  printf '%s\t0\t4000\t0\t-\t%s\n' "$steps" "copy from host"
} > "$RIG_CUDA_CENSUS"
SH
chmod +x timed-rig
check "$tool" ./timed-rig timed.txt -- "$tiny"
# sorted by time: the products (4 ms a step), the layer norm (1.5 ms), the rest
first="$(sed -n 3p timed.txt)"
[[ "$first" == *"4.000"*"500.0 TFLOP/s"*"cuBLASLt matmul bf16 x bf16 -> bf16" ]] ||
  fail "the products' line is not first, at 2 TFLOP in 4 ms: $first"
grep -Eq "^ +2 .* 1\.500 +2000\.0 GB/s  LayerNormForward bf16, packed$" timed.txt ||
  fail "the layer norm's 3 GB in 1.5 ms are not 2000 GB/s"
grep -Eq "^ +1 .* - +copy from host$" timed.txt || fail "an untimed line shows a time"
grep -q "^device time by kind, ms a step: convolutions 0.000, products 4.000, attention 0.000, batch norm 0.000, optimizer 0.250, element-wise and other 1.500, copies 0.000; all 5.750$" timed.txt ||
  fail "no split of the step's device time by kind"
grep -q "^the element-wise kernels and copies with estimated bytes: 1.500 ms, 2000 GB/s$" timed.txt ||
  fail "no bandwidth of the element-wise kernels"
grep -q "^census kind=products ms=4.000$" timed.txt || fail "no machine-readable kind line"
# the emulator's census has no times, so its table has no time column
if grep -q "device time" nmt.txt; then fail "the emulator's census shows times"; fi

echo "== RIG_CUDA_CENSUS_SHAPES=1: a line for each product shape"
RIG_CUDA_CENSUS_SHAPES=1 check "$tool" "$rig" shapes.txt -- "$tiny"
grep -Eq "^ +[0-9]+ .* cuBLASLt matmul f32 x f32 -> f32 \[m [0-9]+ n [0-9]+ k [0-9]+\]$" shapes.txt ||
  fail "no product line with its shape"
RIG_CUDA_CENSUS_SHAPES=yes expect_code 2 "$rig" run "$tiny" --device=cuda --max_steps=1 \
  --logdir=bad-shapes
grep -q "RIG_CUDA_CENSUS_SHAPES=yes: expected 1" err.txt || fail "no message for a bad value"

echo "== a bad call: exit 2 and the usage"
if "$tool" "$rig" out.txt "$tiny" > bad.log 2>&1; then fail "a call without -- was accepted"; else
  code=$?; fi
[ "$code" = 2 ] || fail "exit $code, expected 2"
grep -q "usage: tools/kernel-census" bad.log || fail "no usage"
echo "PASS"
