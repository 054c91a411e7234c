#!/usr/bin/env bash
# Checkpoints through the real binary: retention, state.yaml digests, a file
# other tools can read, corrupt / truncated / half-written checkpoints,
# bit-exact resume with pruning, best models, --checkpoint, load_model.
# Usage: checkpoints.sh RIG EXPERIMENT WORKDIR   (EXPERIMENT: fixtures/tiny.yaml)
set -euo pipefail
export LC_ALL=C
rig="$(realpath "$1")"; exp="$(realpath "$2")"; work="$3"
py="${PYTHON:-python3}"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "+ rig $*"; "$rig" "$@"; }
expect_code() {
  local want="$1"; shift
  echo "+ rig $* (expect exit $want)"
  set +e; "$rig" "$@" >out.txt 2>err.txt; local got=$?; set -e
  cat out.txt err.txt
  [ "$got" -eq "$want" ] || fail "exit $got, expected $want: $*"
}
folders() { (cd "$1" && ls -A | tr '\n' ' '); }
flip_last_byte() {
  "$py" - "$1" <<'EOF'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 0x10]))
EOF
}

# Retention: saves at 5, 10, 15 and the final 20; the newest two stay.
ok run "$exp" --logdir a --max_steps=20 --set save_checkpoint_steps=5 --set num_checkpoints=2 > a.log
[ "$(folders a/checkpoints)" = "ckpt-15 ckpt-20 " ] || fail "a/checkpoints holds: $(folders a/checkpoints)"
grep -q "Saved checkpoint .*ckpt-5" a.log

# state.yaml: step, RNG, each file's size (its CRC-32C is checked below by corrupting).
state=a/checkpoints/ckpt-20/state.yaml
grep -q "^step: 20$" $state
grep -q "rng: {generator: philox4x32-10, seed: 7, step: 20}" $state
for f in model optimizer; do
  size=$(stat -c %s a/checkpoints/ckpt-20/$f.safetensors)
  grep -q "$f.safetensors: {bytes: $size, crc32c: [0-9]*}" $state || fail "$state: no size $size for $f"
done

# The safetensors files follow the format (an independent reader; the
# `safetensors` package too when it is installed).
"$py" - a/checkpoints/ckpt-20/model.safetensors a/checkpoints/ckpt-20/optimizer.safetensors <<'EOF'
import json, struct, sys
for path in sys.argv[1:]:
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    end = 0
    for name, t in sorted(tensors.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, stop = t["data_offsets"]
        assert begin == end, f"{path}: {name} leaves a gap"
        count = 1
        for d in t["shape"]:
            count *= d
        assert stop - begin == count * {"F32": 4, "F16": 2, "BF16": 2}[t["dtype"]], name
        end = stop
    assert 8 + n + end == len(data), f"{path}: {len(data)} bytes, header covers {8 + n + end}"
    if path.endswith("model.safetensors"):
        assert set(tensors) == {"layers.0.weight", "layers.0.bias", "layers.1.weight",
                                "layers.1.bias"}, sorted(tensors)
        assert tensors["layers.0.weight"]["shape"] == [16, 4]
try:
    from safetensors.numpy import load_file
except ImportError:
    print("safetensors package not installed: checked the format only")
else:
    weights = load_file(sys.argv[1])
    assert weights["layers.0.weight"].shape == (16, 4) and weights["layers.0.weight"].dtype.name == "float32"
    print("safetensors package reads", sorted(weights))
EOF

# One flipped byte in the tensor data: refused, naming the file, never a fresh start.
cp -r a c
flip_last_byte c/checkpoints/ckpt-20/model.safetensors
expect_code 2 run "$exp" --mode eval --logdir c
grep -q "c/checkpoints/ckpt-20/model.safetensors is truncated or corrupt: its CRC-32C is" err.txt
expect_code 2 run "$exp" --logdir c --max_steps=30 --continue_learning
grep -q "c/checkpoints/ckpt-20/model.safetensors is truncated or corrupt" err.txt
[ ! -e c/checkpoints/ckpt-30 ] || fail "training went on from a corrupt checkpoint"
[ "$(wc -l < err.txt)" -le 1 ] || fail "more than one line on stderr"

# A truncated file names both sizes.
cp -r a t
size=$(stat -c %s t/checkpoints/ckpt-20/optimizer.safetensors)
truncate -s 100 t/checkpoints/ckpt-20/optimizer.safetensors
expect_code 2 run "$exp" --logdir t --max_steps=30 --continue_learning
grep -q "optimizer.safetensors is truncated or corrupt: it is 100 bytes, but state.yaml says $size" err.txt

# A save that stopped half-way (a temp folder) is never picked up; resuming
# continues from ckpt-20, keeps two folders, and clears the leftovers. The
# result is byte-identical to 30 straight steps.
cp -r a m
mkdir m/checkpoints/.tmp-ckpt-25
head -c 64 a/checkpoints/ckpt-20/model.safetensors > m/checkpoints/.tmp-ckpt-25/model.safetensors
ok run "$exp" --logdir m --max_steps=30 --continue_learning \
  --set save_checkpoint_steps=5 --set num_checkpoints=2 > m.log
grep -q "Resuming from .*ckpt-20 at step 20" m.log
[ "$(folders m/checkpoints)" = "ckpt-25 ckpt-30 " ] || fail "m/checkpoints holds: $(folders m/checkpoints)"
ok run "$exp" --logdir s --max_steps=30 > s.log
cmp m/checkpoints/ckpt-30/model.safetensors s/checkpoints/ckpt-30/model.safetensors
cmp m/checkpoints/ckpt-30/optimizer.safetensors s/checkpoints/ckpt-30/optimizer.safetensors

# num_checkpoints: 0 keeps every checkpoint.
ok run "$exp" --logdir k --max_steps=15 --set save_checkpoint_steps=5 --set num_checkpoints=0 > k.log
[ "$(folders k/checkpoints)" = "ckpt-10 ckpt-15 ckpt-5 " ] || fail "k/checkpoints holds: $(folders k/checkpoints)"

# Best models by eval accuracy (auto mode: higher is better), two kept.
ok run "$exp" --mode train_eval --logdir e --max_steps=20 --eval_steps=5 \
  --set best_model_metric=accuracy --set num_best_models=2 > e.log
grep -q "^mode: max$" e/best_models/index.yaml
best=$(sed -n 's/^  - {step: \([0-9]*\),.*/\1/p' e/best_models/index.yaml | head -1)
[ -n "$best" ] || fail "e/best_models/index.yaml lists no model"
[ "$(grep -c '^  - {step' e/best_models/index.yaml)" -eq "$(ls -d e/best_models/ckpt-* | wc -l)" ] \
  || fail "best_models folders differ from index.yaml"
ok run "$exp" --mode eval --logdir e --checkpoint best > best.log
grep -q "Restored .*best_models/ckpt-$best (step $best)" best.log
ok run "$exp" --mode eval --logdir e --checkpoint latest > latest.log
grep -q "Restored .*checkpoints/ckpt-20 (step 20)" latest.log
ok run "$exp" --mode infer --logdir e --checkpoint e/checkpoints/ckpt-20 --infer_output_file p.txt > p.log
grep -q "Restored e/checkpoints/ckpt-20 (step 20)" p.log
expect_code 2 run "$exp" --mode eval --logdir a --checkpoint best
grep -q "holds no best model" err.txt

# load_model: every tensor from a logdir's latest checkpoint; with another
# hidden size only the output bias matches.
ok run "$exp" --logdir f --max_steps=5 --set load_model=a > f.log
grep -q "load_model a/checkpoints/ckpt-20/model.safetensors: loaded 4 tensor(s), 0 mismatched, 0 missing, 0 unused" f.log
ok run "$exp" --logdir g --max_steps=5 --set load_model=a/checkpoints/ckpt-15 \
  --set "model_params.hidden_sizes=[8]" > g.log
grep -q "loaded 1 tensor(s), 3 mismatched, 0 missing, 0 unused" g.log
grep -q "layers.0.weight: checkpoint \[16,4\] vs model \[8,4\]" g.log
expect_code 2 run "$exp" --logdir h --max_steps=5 --set load_model=nowhere
grep -q "load_model: nowhere does not exist" err.txt

# Time-based checkpoints (checkpoint_every_s): saves between the step-based
# ones, at whatever step the clock says; resuming from one ends where a run
# straight through does.
big=(--max_steps=300 --model_params/hidden_sizes=[512,512] --batch_size_per_gpu=256)
ok run "$exp" --logdir timed "${big[@]}" --checkpoint_every_s=0.1 --num_checkpoints=0 > timed.log
cat timed.log
[ "$(grep -c 'Saved checkpoint' timed.log)" -ge 3 ] || fail "checkpoint_every_s saved no checkpoint before the end"
first=$(ls timed/checkpoints | sort -t- -k2 -n | head -1)
[ "$first" != ckpt-300 ] || fail "no time-based checkpoint"
mkdir -p timed_resume/checkpoints
cp -r "timed/checkpoints/$first" timed_resume/checkpoints/
ok run "$exp" --logdir timed_resume "${big[@]}" --continue_learning > /dev/null
ok run "$exp" --logdir straight "${big[@]}" > /dev/null
cmp timed_resume/checkpoints/ckpt-300/model.safetensors straight/checkpoints/ckpt-300/model.safetensors ||
  fail "resuming from the time-based $first did not end where a straight run does"
echo "checkpoints ok"
