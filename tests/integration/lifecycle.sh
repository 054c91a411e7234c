#!/usr/bin/env bash
# train -> refuse to overwrite -> resume -> eval -> infer -> train_eval -> benchmark,
# through the real binary; and N + resume + N steps give the same weights as 2N.
# Usage: lifecycle.sh RIG EXPERIMENT WORKDIR
set -euo pipefail
rig="$1"; exp="$2"; work="$3"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"

check "$rig" run "$exp" --logdir a --max_steps=20 > train.log
grep -q "Global step 20: \*\*\* Train loss" train.log
test -f a/checkpoints/ckpt-20/model.safetensors
test -f a/checkpoints/ckpt-20/optimizer.safetensors
test -f a/checkpoints/ckpt-20/state.yaml
test -f a/config.yaml

# A second run into the same logdir must not silently overwrite it.
expect_code 2 "$rig" run "$exp" --logdir a --max_steps=40
grep -q -- "--continue_learning" err.txt

# Resume to 40 steps; compare with 40 straight steps.
check "$rig" run "$exp" --logdir a --max_steps=40 --continue_learning > resume.log
grep -q "Resuming from .*ckpt-20 at step 20" resume.log
check "$rig" run "$exp" --logdir b --max_steps=40 > straight.log
cmp a/checkpoints/ckpt-40/model.safetensors b/checkpoints/ckpt-40/model.safetensors
cmp a/checkpoints/ckpt-40/optimizer.safetensors b/checkpoints/ckpt-40/optimizer.safetensors
echo "resume is bit-exact"

# Resuming with a changed model is refused and says what changed.
expect_code 2 "$rig" run "$exp" --logdir a --max_steps=60 --continue_learning --set model_params.hidden_sizes=[8]
grep -q "hidden_sizes" err.txt

# A corrupt checkpoint is refused, naming the file.
cp -r a c
head -c 100 a/checkpoints/ckpt-40/model.safetensors > c/checkpoints/ckpt-40/model.safetensors
expect_code 2 "$rig" run "$exp" --mode eval --logdir c
grep -q "model.safetensors is truncated or corrupt" err.txt

check "$rig" run "$exp" --mode eval --logdir a > eval.log
grep -q "Validation loss: [0-9.]" eval.log
grep -q "Validation accuracy: [0-9.]" eval.log
grep -q "Evaluated 100 samples" eval.log

check "$rig" run "$exp" --mode infer --logdir a --infer_output_file preds.txt > infer.log
test "$(wc -l < preds.txt)" -eq 100

check "$rig" run "$exp" --mode train_eval --logdir d --max_steps=20 --eval_steps=10 > train_eval.log
test "$(grep -c 'Validation loss' train_eval.log)" -eq 2

check "$rig" run "$exp" --benchmark --bench_steps 5 --logdir e > bench.log
grep -q "Avg objects per second" bench.log
test ! -e e/checkpoints
echo "lifecycle ok"
