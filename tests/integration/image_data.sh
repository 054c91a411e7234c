#!/usr/bin/env bash
# The small-image data layers (idx_images, cifar_binary) through the real
# binary: every bad input is refused before anything runs, with exit 2 and one
# line naming the file. Data layers are built before the model, so an `mlp`
# (which cannot read images) is enough to reach them. With the `resnet` model
# plugin built, a tiny good set also trains and evaluates.
# Usage: image_data.sh RIG WORKDIR
set -euo pipefail
export LC_ALL=C RIG_PROGRESS=0
rig="$(realpath "$1")"; work="$2"
py="${PYTHON:-python3}"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"


# Tiny IDX sets (8 x 8 images), CIFAR-10 batches, and their corrupt versions.
"$py" - <<'EOF'
import gzip, os, struct

def idx_images(n, rows=8, cols=8, magic=0x803):
    return struct.pack(">IIII", magic, n, rows, cols) + bytes((i * 31 + p) % 256 for i in range(n) for p in range(rows * cols))

def idx_labels(n, classes=10):
    return struct.pack(">II", 0x801, n) + bytes(i % classes for i in range(n))

def write(name, data):
    with open(name, "wb") as f:
        f.write(data)

os.makedirs("idx", exist_ok=True)
for split, n in (("train", 64), ("test", 20)):
    write(f"idx/{split}-images.gz", gzip.compress(idx_images(n)))
    write(f"idx/{split}-labels.gz", gzip.compress(idx_labels(n)))
write("idx/wrong-magic", idx_images(64, magic=0x903))
write("idx/labels-60", idx_labels(60))
write("idx/truncated", idx_images(64)[:-10])
write("idx/truncated.gz", gzip.compress(idx_images(64))[:200])
write("idx/label-12", idx_labels(64)[:8 + 5] + bytes([12]) + idx_labels(64)[8 + 6:])

os.makedirs("cifar", exist_ok=True)
record = lambda i: bytes([i % 10]) + bytes((i * 7 + p) % 256 for p in range(3072))
for b in range(1, 6):
    write(f"cifar/data_batch_{b}.bin", b"".join(record(i) for i in range(8 * b - 8, 8 * b)))
write("cifar/test_batch.bin", b"".join(record(i) for i in range(10)))
write("cifar/short.bin", b"".join(record(i) for i in range(3))[:-1])
EOF

cat > idx.yaml <<EOF
base_params:
  random_seed: 1
  batch_size_per_gpu: 8
  max_steps: 3
  print_loss_steps: 1
  logdir: runs/idx
  model: mlp
  data_layer: idx_images
  data_layer_params:
    train_images: $work/idx/train-images.gz
    train_labels: $work/idx/train-labels.gz
    test_images: $work/idx/test-images.gz
    test_labels: $work/idx/test-labels.gz
    pad: 2
    flip: true
  optimizer: sgd
  optimizer_params:
    momentum: 0.9
  lr_policy: fixed_lr
  lr_policy_params:
    learning_rate: 0.05
  communicator: local
EOF
sed -e 's/data_layer: idx_images/data_layer: cifar_binary/' -e '/_images:\|_labels:\|pad:\|flip:/d' \
    -e "s|  data_layer_params:|  data_layer_params:\n    data_dir: $work/cifar\n    pad: 4\n    flip: true|" \
    -e 's|runs/idx|runs/cifar|' idx.yaml > cifar.yaml

echo "== valid data configs; schema mistakes are caught by validate"
# --skip-data: the schemas alone. A full validate builds the data layers (they
# accept these files) and then the model, which an mlp cannot be for images.
check "$rig" validate idx.yaml --skip-data > validate.txt
grep -q "train mode: OK" validate.txt || fail "idx.yaml does not validate"
check "$rig" validate cifar.yaml --skip-data > validate.txt
grep -q "train mode: OK" validate.txt || fail "cifar.yaml does not validate"
expect_error "train mode: model 'mlp' failed to start: .*num_features" validate idx.yaml
expect_error "data_layer_params\.flipp: unknown key for data_layer 'idx_images'.*did you mean 'flip'" \
  validate idx.yaml --set data_layer_params.flipp=true
expect_error "data_layer_params\.dataset: .*cifar10.*cifar100" \
  validate cifar.yaml --data_layer_params/dataset=cifar1000
grep -v "data_dir:" cifar.yaml > no-dir.yaml
expect_error "missing required key 'data_dir'" validate no-dir.yaml

echo "== idx_images: bad files (exit 2, one line naming the file)"
expect_error "data_layer 'idx_images' failed to start: .*train_images $work/idx/wrong-magic: wrong magic number 0x00000903; expected 0x00000803" \
  run idx.yaml --logdir runs/bad --data_layer_params/train_images="$work/idx/wrong-magic"
expect_error "train_images $work/idx/train-images.gz holds 64 images but train_labels $work/idx/labels-60 holds 60 labels" \
  run idx.yaml --logdir runs/bad --data_layer_params/train_labels="$work/idx/labels-60"
expect_error "train_images $work/idx/truncated: truncated: its header says 64 x 64 bytes but only 4086 bytes follow" \
  run idx.yaml --logdir runs/bad --data_layer_params/train_images="$work/idx/truncated"
expect_error "train_images $work/idx/truncated.gz: the gzip stream ends early" \
  run idx.yaml --logdir runs/bad --data_layer_params/train_images="$work/idx/truncated.gz"
expect_error "train_labels $work/idx/label-12: record 5 has label 12, outside the 10 classes" \
  run idx.yaml --logdir runs/bad --data_layer_params/train_labels="$work/idx/label-12"
expect_error "record 3 has label 3, outside the 3 classes" \
  run idx.yaml --logdir runs/bad --data_layer_params/num_classes=3
expect_error "train_images: file $work/idx/none.gz not found; .*apt-get install dataset-fashion-mnist" \
  run idx.yaml --logdir runs/bad --data_layer_params/train_images="$work/idx/none.gz"
# eval reads the test files (the data layer comes before the checkpoint lookup).
expect_error "test_images $work/idx/wrong-magic: wrong magic number" \
  run idx.yaml --logdir runs/bad --mode eval --data_layer_params/test_images="$work/idx/wrong-magic"

echo "== cifar_binary: bad files"
expect_error "data_layer 'cifar_binary' failed to start: .*train_files $work/cifar/short.bin: 9218 bytes is not a whole number of 3073-byte CIFAR-10 records" \
  run cifar.yaml --logdir runs/bad --set "data_layer_params.train_files=[data_batch_1.bin, short.bin]"
expect_error "train_files $work/cifar/data_batch_1.bin: 24584 bytes is not a whole number of 3074-byte CIFAR-100 records" \
  run cifar.yaml --logdir runs/bad --data_layer_params/dataset=cifar100 --set "data_layer_params.train_files=[data_batch_1.bin]"
expect_error "data_dir: folder $work/none not found; CIFAR-10 comes as cifar-10-binary.tar.gz" \
  run cifar.yaml --logdir runs/bad --data_layer_params/data_dir="$work/none"
expect_error "test_files: file $work/cifar/nope.bin not found" \
  run cifar.yaml --logdir runs/bad --mode eval --set "data_layer_params.test_files=[test_batch.bin, nope.bin]"

echo "== good files reach the model"
# An mlp cannot read images, so it is the model that refuses, after the data layer started.
expect_error "model 'mlp' failed to start: .*num_features" run idx.yaml --logdir runs/bad
expect_error "model 'mlp' failed to start: .*num_features" run cifar.yaml --logdir runs/bad
"$rig" plugins > plugins.txt
if grep -Eq "^model +resnet " plugins.txt; then
  echo "== resnet trains on the good sets; eval and infer see each test sample once"
  # 20 test samples in the IDX set, 10 in CIFAR's.
  for case in idx:20 cifar:10; do
    exp=${case%:*}; n=${case#*:}
    check "$rig" run $exp.yaml --logdir runs/good-$exp --model=resnet --set model_params.depth=8 \
      --mode train_eval --eval_steps=3 > good-$exp.log
    grep -q "Global step 3:" good-$exp.log || fail "$exp: no step 3"
    grep -q "Evaluated $n samples" good-$exp.log || fail "$exp: eval did not see $n samples"
    check "$rig" run $exp.yaml --logdir runs/good-$exp --model=resnet --set model_params.depth=8 \
      --mode infer > infer-$exp.log
    [ "$(grep -cE '^[0-9]$' runs/good-$exp/infer_output.txt)" -eq "$n" ] &&
      [ "$(wc -l < runs/good-$exp/infer_output.txt)" -eq "$n" ] ||
      fail "$exp: infer_output.txt does not hold $n class ids"
  done
else
  echo "(no resnet plugin built: the good runs were not trained)"
fi
echo "image_data: all checks passed"
