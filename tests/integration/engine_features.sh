#!/usr/bin/env bash
# The training engine's features through the real binary: signals, progress
# bar, samples, interactive_infer, precision and loss scaling, LARC, NaN
# refusal, summaries, timeline, report, best models and load_model.
# Usage: engine_features.sh RIG EXPERIMENT WORKDIR
set -euo pipefail
rig="$1"; exp="$2"; work="$3"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
export RIG_PROGRESS=0  # deterministic output unless a test asks for the bar

echo "== SIGINT finishes the step, writes a checkpoint, exits 130; resume continues"
"$rig" run "$exp" --logdir sig --max_steps=100000000 --save_checkpoint_steps=0 > sig.log 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "Global step" sig.log 2>/dev/null && break; sleep 0.1; done
kill -INT "$pid"
set +e; wait "$pid"; code=$?; set -e
cat sig.log | tail -5
[ "$code" -eq 130 ] || fail "SIGINT exit $code, expected 130"
grep -q "Stopped by signal 2 at step" sig.log || fail "no stop line"
step=$(sed -n 's/.*Stopped by signal 2 at step \([0-9]*\).*/\1/p' sig.log)
test -f "sig/checkpoints/ckpt-$step/state.yaml" || fail "no checkpoint at step $step"
check "$rig" run "$exp" --logdir sig --max_steps=$((step + 5)) --continue_learning > resume.log
grep -q "Resuming from .*ckpt-$step at step $step" resume.log

echo "== SIGTERM exits 143"
"$rig" run "$exp" --logdir term --max_steps=100000000 > term.log 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "Global step" term.log 2>/dev/null && break; sleep 0.1; done
kill -TERM "$pid"
set +e; wait "$pid"; code=$?; set -e
[ "$code" -eq 143 ] || fail "SIGTERM exit $code, expected 143"
ls term/checkpoints | grep -q ckpt- || fail "no checkpoint after SIGTERM"

echo "== a second signal exits at once, without a checkpoint"
# A wide MLP (steps of ~40 ms, a checkpoint of ~70 MB): the second signal,
# 50 ms after the first, lands before the first one's step and checkpoint
# are done (0.2 s was not always soon enough on an idle machine).
"$rig" run "$exp" --logdir twice --max_steps=100000000 --batch_size_per_gpu=256 \
  --set 'model_params.hidden_sizes=[2048,2048,2048]' --print_loss_steps=1 > twice.log 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q "Global step 1:" twice.log 2>/dev/null && break; sleep 0.1; done
kill -INT "$pid"; sleep 0.05; kill -INT "$pid"
set +e; wait "$pid"; code=$?; set -e
cat twice.log | tail -3
[ "$code" -eq 130 ] || fail "second SIGINT exit $code, expected 130"
grep -q "second signal, exiting now" twice.log || fail "no second-signal message"

echo "== progress bar on a terminal, none otherwise"
unset RIG_PROGRESS
script -qec "$rig run $exp --logdir bar --max_steps=40" /dev/null > tty.log
grep -q "ETA" tty.log || fail "no progress bar on a terminal"
"$rig" run "$exp" --logdir nobar --max_steps=40 > notty.log
if grep -q "ETA" notty.log; then fail "progress bar written to a pipe"; fi
export RIG_PROGRESS=0

echo "== samples every print_samples_steps; a bad interval is refused"
check "$rig" run "$exp" --logdir samples --max_steps=20 --print_samples_steps=10 > samples.log
test "$(grep -c 'Train sample [0-9]*: prediction: [0-9]' samples.log)" -eq 2
grep -q "Train sample [0-9]*: target: *[0-9]" samples.log
expect_code 2 "$rig" run "$exp" --logdir bad_samples --print_samples_steps=15
grep -q "print_samples_steps: 15 is not a multiple of print_loss_steps (10)" err.txt

echo "== interactive_infer answers each line on stdout"
printf '0.1 0.2 0.3 0.4\n\n1,2,3,4\nnot numbers\n-1 -1 -1 -1\n' |
  "$rig" run "$exp" --mode interactive_infer --logdir sig > answers.txt 2> interactive.err
cat answers.txt interactive.err
test "$(wc -l < answers.txt)" -eq 3 || fail "expected 3 answers"
grep -qv '^[0-2]$' answers.txt && fail "answers are not class ids"
grep -q "error: synthetic: 'not' is not a number" interactive.err

echo "== NaN loss without automatic loss scaling stops with the step number"
# One step at this rate sends the weights to infinity. The statistics are read
# with the loss printed at step 10: the message names the step that diverged.
expect_code 2 "$rig" run "$exp" --logdir nan --lr_policy_params/learning_rate=1e38
grep -Eq "train loss is (nan|inf|-nan) at step 1: training diverged" err.txt
test ! -e nan/checkpoints

echo "== mixed precision with Backoff: overflows skip the step and lower the scale"
check "$rig" run "$exp" --logdir mixed --dtype=mixed --loss_scaling=Backoff > mixed.log
grep -q "Overflow at step 0: loss scale 16777216 -> 8388608, update skipped" mixed.log
grep -q "Global step 40: \*\*\* Train loss" mixed.log
grep -q "Skipped [0-9]* step(s) on loss-scale overflow" mixed.log
check "$rig" run "$exp" --logdir mixed --dtype=mixed --loss_scaling=Backoff --max_steps=50 \
  --continue_learning > mixed_resume.log
if grep -q "Overflow at step 40: loss scale 16777216" mixed_resume.log; then
  fail "the resumed run forgot the loss scale"
fi
check "$rig" run "$exp" --logdir bf16 --dtype=bfloat16 > bf16.log
grep -q "Global step 40" bf16.log
check "$rig" run "$exp" --logdir f16 --dtype=float16 --loss_scaling=128 > f16.log
grep -q "Global step 40" f16.log
expect_code 2 "$rig" run "$exp" --logdir f16_overflow --dtype=float16 --loss_scaling=1e9
grep -q "gradients are not finite (inf or NaN) at step 0" err.txt

echo "== mixed precision folded into the optimizer's pass has the bits of the separate passes"
# One process without clipping: sgd and adam read the 16-bit gradients
# unscaled as they read them and write the 16-bit weights themselves. A
# max_grad_norm that is never reached makes the trainer unscale into the f32
# masters first; the weights and optimizer state must not differ by a byte.
sed 's/optimizer: sgd/optimizer: adam/; s/    momentum: 0.9/    amsgrad: true/; s/learning_rate: 0.1/learning_rate: 0.01/' \
  "$exp" > adam.yaml
for config in "$exp" adam.yaml; do
  for precision in "--mixed_dtype=bfloat16" "--loss_scaling=Backoff"; do
    check "$rig" run "$config" --logdir folded --dtype=mixed $precision --max_steps=20 > folded.log
    check "$rig" run "$config" --logdir unfolded --dtype=mixed $precision --max_steps=20 \
      --max_grad_norm=1e30 > unfolded.log
    for part in model optimizer; do
      cmp folded/checkpoints/ckpt-20/$part.safetensors unfolded/checkpoints/ckpt-20/$part.safetensors ||
        fail "$config $precision: the folded update wrote another $part"
    done
    rm -rf folded unfolded
  done
done

echo "== matmul_precision bfloat16: the same training, GEMM operands rounded to bfloat16"
check "$rig" run "$exp" --logdir mm_f32 > mm_f32.log
check "$rig" run "$exp" --logdir mm_bf16 --matmul_precision=bfloat16 > mm_bf16.log
grep -q "^\*\*\* Matrix products round their operands to bfloat16 and accumulate in float32" \
  mm_bf16.log || fail "no line saying the products are rounded"
grep -q "Matrix products round" mm_f32.log && fail "the float32 run claims bfloat16 products"
python3 - mm_f32.log mm_bf16.log <<'EOF'
import re, sys
f32, bf16 = ([float(x) for x in re.findall(r"Train loss: ([0-9.]+)", open(p).read())]
             for p in sys.argv[1:])
assert len(f32) == len(bf16) == 4, (f32, bf16)
assert f32 != bf16, "bfloat16 products gave float32's losses to the last digit: not rounded?"
assert all(abs(a - b) <= 0.01 * a for a, b in zip(f32, bf16)), (f32, bf16)
EOF
# The precision is not part of the checkpoint's identity: a float32 run resumes at bfloat16.
check "$rig" run "$exp" --logdir mm_f32 --matmul_precision=bfloat16 --max_steps=50 \
  --continue_learning > mm_resume.log
grep -q "Resuming from .*ckpt-40 at step 40" mm_resume.log || fail "no resume across precisions"
expect_error "^rig: error: command line \(--matmul_precision=float8\): matmul_precision: expected one of \[float32, tensorfloat32, bfloat16\], found 'float8'\$" \
  run "$exp" --logdir mm_bad --matmul_precision=float8

echo "== matmul_precision tensorfloat32: said to do nothing on the CPU, float32's training"
check "$rig" run "$exp" --logdir mm_tf32 --matmul_precision=tensorfloat32 > mm_tf32.log
grep -q "^\*\*\* matmul_precision tensorfloat32: no effect on cpu" mm_tf32.log ||
  fail "tensorfloat32 on the CPU not noted"
grep -q "tensorfloat32" mm_f32.log && fail "a float32 run mentions tensorfloat32"
cmp mm_f32/checkpoints/ckpt-40/model.safetensors mm_tf32/checkpoints/ckpt-40/model.safetensors ||
  fail "tensorfloat32 changed the CPU's training"

echo "== cudnn_benchmark: said to do nothing where there is no cuDNN; a run resumes across it"
check "$rig" run "$exp" --logdir mm_f32 --cudnn_benchmark=true --max_steps=60 \
  --continue_learning > cb.log
grep -q "^\*\*\* cudnn_benchmark: no effect on cpu" cb.log || fail "cudnn_benchmark on the CPU not noted"
grep -q "Resuming from .*ckpt-50 at step 50" cb.log || fail "no resume across cudnn_benchmark"
grep -q "cudnn_benchmark" mm_f32.log && fail "a run without cudnn_benchmark mentions it"
expect_error "cudnn_benchmark: expected boolean" run "$exp" --logdir cb_bad --cudnn_benchmark=maybe

echo "== LARC"
check "$rig" run "$exp" --logdir larc --set larc_params.larc_eta=0.002 > larc.log
grep -q "Global step 40" larc.log

echo "== summaries, timeline and report"
check "$rig" run "$exp" --mode train_eval --logdir tb --max_steps=40 --eval_steps=20 \
  --save_summaries_steps=10 --timeline tb/timeline.json > tb.log
ls tb/events.out.tfevents.* > /dev/null
test "$(grep -c '"train_loss"' tb/metrics.jsonl)" -eq 4
grep -q '"eval_accuracy"' tb/metrics.jsonl
grep -q '"time/backward"' tb/metrics.jsonl
python3 - tb/timeline.json <<'EOF'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["name"] for e in events}
assert {"data", "forward", "backward", "communication", "optimizer", "eval"} <= names, names
assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
EOF
# On a device the trainer fetches the next batch once a step's forward is
# queued: a "data" phase right after each step's forward (the CPU has none).
check "$rig" run "$exp" --device=sim --logdir simtl --max_steps=6 --timeline simtl/timeline.json \
  > simtl.log
python3 - simtl/timeline.json <<'EOF'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
forward = {e["args"]["step"]: e for e in events if e["name"] == "forward"}
after = {e["args"]["step"] for e in events if e["name"] == "data"
         and e["args"]["step"] in forward
         and e["ts"] >= forward[e["args"]["step"]]["ts"] + forward[e["args"]["step"]]["dur"] - 1}
assert len(forward) >= 6 and after == set(forward), (sorted(after), sorted(forward))
EOF
check "$rig" report tb > report.log
grep -q "<svg" tb/report.html
test -d tb/best_models
check "$rig" run "$exp" --mode eval --logdir tb --checkpoint best > best.log
grep -q "Restored .*best_models/ckpt-" best.log

echo "== load_model copies matching weights into a new run"
check "$rig" run "$exp" --logdir transfer --max_steps=5 --load_model=sig \
  --set 'model_params.hidden_sizes=[16]' > transfer.log
grep -q "load_model .*: loaded 4 tensor(s), 0 mismatched" transfer.log
check "$rig" run "$exp" --logdir transfer2 --max_steps=5 --load_model=sig \
  --set 'model_params.hidden_sizes=[8]' > transfer2.log
grep -q "loaded 1 tensor(s), 3 mismatched" transfer2.log
grep -q "shape differs, kept initial: layers.0.weight: checkpoint \[16,4\] vs model \[8,4\]" transfer2.log
echo "engine features ok"
