#!/usr/bin/env bash
# The image_folder data layer through the real binary with the resnet model:
# generated JPEG folders train, evaluate (every eval image exactly once) and
# resume mid-epoch bit-exactly; a corrupt JPEG stops the run naming it (exit
# 2) or, with skip_corrupt, is left out and counted; an empty class folder
# and a missing folder are refused naming them.
# Usage: image_folder.sh RIG MAKE_JPEG_TREE WORKDIR
set -euo pipefail
export LC_ALL=C RIG_PROGRESS=0
rig="$(realpath "$1")"; make_tree="$(realpath "$2")"; work="$3"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"

# 3 classes: 10 training images each (30: 7 full batches of 4 and one of 2),
# 5 validation images each (15).
"$make_tree" data/train 3 10 40 32
"$make_tree" data/val 3 5 40 32

cat > exp.yaml <<EOF2
base_params:
  random_seed: 3
  batch_size_per_gpu: 4
  max_steps: 6
  print_loss_steps: 1
  save_checkpoint_steps: 3
  eval_steps: 6
  logdir: runs/a
  model: resnet
  model_params:
    style: cifar
    depth: 8
  data_layer: image_folder
  data_layer_params:
    train_dir: $work/data/train
    eval_dir: $work/data/val
    image_size: 16
    resize_size: 18
    num_workers: 2
  optimizer: sgd
  optimizer_params:
    momentum: 0.9
  lr_policy: fixed_lr
  lr_policy_params:
    learning_rate: 0.05
  communicator: local
EOF2

echo "== train_eval: trains, reports the data time, evaluates every image once"
check "$rig" run exp.yaml --mode train_eval > a.log
grep -q "Global step 6: \*\*\* Train loss" a.log || fail "no step 6"
grep -Eq "time per step = .* \(data [0-9.]+%\)" a.log || fail "no data share per step"
grep -Eq "Avg data time per step: [0-9.]+s" a.log || fail "no average data time"
grep -q "Evaluated 15 samples" a.log || fail "eval did not see the 15 validation images"
grep -Eq "Validation Acc@1: [0-9.]+" a.log || fail "no Acc@1"

echo "== resume at step 3 (mid-epoch) gives the weights of a straight run"
check "$rig" run exp.yaml --logdir runs/b --max_steps=3 > b3.log
check "$rig" run exp.yaml --logdir runs/b --max_steps=6 --continue_learning > b6.log
grep -q "Resuming from .*ckpt-3 at step 3" b6.log || fail "did not resume at step 3"
cmp runs/a/checkpoints/ckpt-6/model.safetensors runs/b/checkpoints/ckpt-6/model.safetensors ||
  fail "resumed weights differ from the straight run's"

echo "== a corrupt JPEG: an error naming it, or skipped and counted"
cp -r data bad
head -c 300 data/train/class_1/img_4.jpg > bad/train/class_1/img_4.jpg
head -c 300 data/val/class_2/img_0.jpg > bad/val/class_2/img_0.jpg
expect_error "image_folder: corrupt JPEG '$work/bad/train/class_1/img_4.jpg': .*skip_corrupt" \
  run exp.yaml --logdir runs/bad --max_steps=8 --data_layer_params/train_dir="$work/bad/train"
check "$rig" run exp.yaml --mode train_eval --logdir runs/skip --max_steps=8 \
  --data_layer_params/train_dir="$work/bad/train" --data_layer_params/eval_dir="$work/bad/val" \
  --data_layer_params/skip_corrupt=true > skip.log 2> skip.err
grep -q "Global step 8:" skip.log || fail "skip_corrupt: training did not reach step 8"
grep -q "image_folder: skipped 1 corrupt images in epoch 0 of train_dir: first $work/bad/train/class_1/img_4.jpg" \
  skip.err || fail "the skipped training image is not counted"
grep -q "image_folder: skipped 1 corrupt images in epoch 0 of eval_dir: first $work/bad/val/class_2/img_0.jpg" \
  skip.err || fail "the skipped validation image is not counted"
grep -q "Evaluated 14 samples" skip.log || fail "eval did not see the 14 good validation images"

echo "== bad folders"
mkdir -p empty-class && cp -r data/train/class_0 data/train/class_1 empty-class/ && mkdir empty-class/class_9
expect_error "empty-class/class_9" \
  run exp.yaml --logdir runs/bad --data_layer_params/train_dir="$work/empty-class"
expect_error "image_folder: train_dir '$work/none' does not exist" \
  run exp.yaml --logdir runs/bad --data_layer_params/train_dir="$work/none"
echo "image_folder: all checks passed"
