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
# fixed_lr does not depend on max_steps: no note about the schedule.
if grep -q "max_steps changed" resume.log; then fail "schedule note under fixed_lr"; fi

# A resume with nothing left to train says so, saves nothing, and judges
# target_loss by the loss the checkpoint recorded, never a made-up one.
expect_code 1 "$rig" run "$exp" --logdir a --max_steps=40 --continue_learning --target_loss=0.0001
grep -q "Nothing to train: the checkpoint is at step 40 and max_steps is 40" out.txt
grep -q "FAILED: train loss [0-9.]* recorded by the checkpoint at step 40 (no step ran now) is not below target_loss 0.0001" out.txt
if grep -q "Saved checkpoint\|Finished training" out.txt; then fail "a no-op resume trained or saved"; fi
# train_eval evaluates what it resumed.
check "$rig" run "$exp" --mode train_eval --logdir a --max_steps=40 --continue_learning --target_loss=100 > noop_eval.log
grep -q "Validation loss: [0-9.]" noop_eval.log
grep -q "Train loss [0-9.]* recorded by the checkpoint at step 40 (no step ran now) is below target_loss 100" noop_eval.log
# A checkpoint from before train_loss was kept: the target cannot be checked, and that fails.
cp -r a old
sed -i '/^train_loss:/d' old/checkpoints/ckpt-40/state.yaml
expect_code 1 "$rig" run "$exp" --logdir old --max_steps=40 --continue_learning --target_loss=100
grep -q "FAILED: target_loss 100 cannot be checked: no step ran" out.txt

# A policy that depends on max_steps: raising it on resume prints one line with both rates.
check "$rig" run "$exp" --logdir cos --max_steps=20 --lr_policy=cosine_decay > cos.log
check "$rig" run "$exp" --logdir cos --max_steps=40 --lr_policy=cosine_decay --continue_learning > cos_resume.log
grep -q "max_steps changed from 20 (checkpoint) to 40 and lr policy cosine_decay depends on it: from step 20 on the rates are the 40-step schedule's (0.05 at step 20; the 20-step schedule gives 0 there)" cos_resume.log
test "$(grep -c "max_steps changed" cos_resume.log)" -eq 1

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
# --bench_warmup_steps: the average is over the steps after the warm-up ones.
check "$rig" run "$exp" --benchmark --bench_steps 6 --bench_warmup_steps 4 --print_loss_steps=1 \
  --logdir f > warm.log
grep -q "Timed steps: 2 (after 4 untimed warm-up steps)" warm.log || fail "not 2 timed steps"
awk -F'[:. ]+' '/^time per step = / { n++; if (n > 4) { sum += $7 "." $8; timed++ } }
  /Avg time per step/ { avg = $6 "." $7 }
  END { if (timed != 2 || (sum / 2 - avg) ^ 2 > 1e-10) {
          print "average " avg " is not that of the 2 steps after 4 untimed (" sum / 2 ")"; exit 1 } }' \
  warm.log || fail "--bench_warmup_steps"
expect_code 2 "$rig" run "$exp" --benchmark --bench_steps 3 --bench_warmup_steps 3 --logdir f
grep -q "less than --bench_steps (3) so that a step is timed" err.txt
echo "lifecycle ok"
