#!/usr/bin/env bash
# Translation end to end through the real binary: a tiny transformer learns a
# generated "language" (each source word mapped through a fixed 10-word
# dictionary, 2 to 6 words a sentence) from parallel_text files tokenized by a
# tiny SentencePiece word model, then
# - train_eval prints BLEU with its signature, the score line and samples (and
#   the teacher-forced BLEU under its own label), and
#   writes eval_outputs.txt / eval_references.txt (one line per dev pair, in
#   file order) that `rig bleu` scores the same; the model really translates;
# - "Evaluated N samples" counts sentence pairs;
# - infer writes one line per source line, an empty source line included;
# - interactive_infer translates raw lines piped to stdin, one line each;
# - best_model_metric BLEU keeps the best checkpoint, and eval of it
#   reproduces its BLEU;
# - resuming mid-epoch gives the same weights as a straight run, bit for bit;
# - device: sim (memory the host cannot touch) writes the CPU's checkpoint,
#   BLEU and interactive translations;
# - bad files exit 2 with one line naming the file.
# Needs spm_train / spm_encode (Debian package sentencepiece); exits 77
# (skipped) without them.
# Usage: translation.sh RIG WORKDIR
set -euo pipefail
export LC_ALL=C RIG_PROGRESS=0
rig="$(realpath "$1")"; work="$2"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
if ! command -v spm_train > /dev/null || ! command -v spm_encode > /dev/null; then
  echo "SKIP: spm_train / spm_encode not found (apt-get install sentencepiece)"
  exit 77
fi
rm -rf "$work"; mkdir -p "$work"; cd "$work"

# The BLEU the trained model must beat on the dev set. After 300 steps, runs
# with random_seed 1-10 score 89.8 to 100 (35.5 after 100 steps), and five
# other generated corpora 93.7 to 97.5 (the task is a word-by-word lookup);
# 80 leaves room for an unlucky seed, while a model that has not learned the
# dictionary or the word order scores far below it.
min_bleu=80

echo "== corpus: a word-by-word dictionary language, tokenized by a SentencePiece word model"
# gen.awk -v seed=S -v n=N -v out=NAME: N random source sentences of 2 to 6
# words (NAME.src) and their translations (NAME.tgt).
cat > gen.awk <<'EOF'
BEGIN {
  n_words = split("ka lo mi su te ra no fi pe du", src, " ")
  split("red blue green gold dark cold warm fast slow tall", tgt, " ")
  srand(seed)
  for (i = 0; i < n; ++i) {
    len = 2 + int(rand() * 5); s = ""; t = ""
    for (k = 0; k < len; ++k) {
      w = 1 + int(rand() * n_words)
      s = s (k ? " " : "") src[w]; t = t (k ? " " : "") tgt[w]
    }
    print s > (out ".src"); print t > (out ".tgt")
  }
}
EOF
awk -v seed=1 -v n=2000 -v out=train -f gen.awk
awk -v seed=2 -v n=40 -v out=dev -f gen.awk
cat train.src train.tgt > spm_input.txt
# One shared model (the transformer shares its embedding): 4 specials + 20 words.
spm_train --input=spm_input.txt --model_prefix=m --vocab_size=24 --model_type=word --pad_id=0 \
  --eos_id=1 --bos_id=2 --unk_id=3 --hard_vocab_limit=false --minloglevel=2 > spm.log 2>&1 ||
  { cat spm.log; fail "spm_train failed"; }
for split in train dev; do
  for side in src tgt; do spm_encode --model=m.model < $split.$side > $split.tok.$side; done
done
# Infer input: the dev sources with an empty line after the second.
awk 'NR == 3 { print "" } { print }' dev.tok.src > infer.tok.src
[ "$(wc -l < infer.tok.src)" -eq 41 ] || fail "infer.tok.src should have 41 lines"

cat > translation.yaml <<EOF
base_params:
  random_seed: 1
  batch_size_per_gpu: 32
  max_steps: 300
  print_loss_steps: 50
  eval_steps: 100
  save_checkpoint_steps: 50
  save_summaries_steps: 0
  num_checkpoints: 10
  best_model_metric: BLEU
  logdir: runs/a
  model: transformer
  model_params:
    encoder_params:
      encoder_layers: 1
      hidden_size: 32
      num_heads: 2
      filter_size: 64
      attention_dropout: 0.0
      relu_dropout: 0.0
      layer_postprocess_dropout: 0.1
    decoder_params:
      num_hidden_layers: 1
      hidden_size: 32
      num_heads: 2
      filter_size: 64
      attention_dropout: 0.0
      relu_dropout: 0.0
      layer_postprocess_dropout: 0.1
      beam_size: 2
      alpha: 0.6
      extra_decode_length: 4
    loss_params:
      label_smoothing: 0.1
  data_layer: parallel_text
  data_layer_params:
    src_vocab_file: $work/m.vocab
    tgt_vocab_file: $work/m.vocab
    sentencepiece_model: $work/m.model
    source_file: $work/train.tok.src
    target_file: $work/train.tok.tgt
    max_length: 16
  optimizer: adam
  lr_policy: fixed_lr
  lr_policy_params:
    learning_rate: 0.003
  communicator: local
eval_params:
  data_layer_params:
    source_file: $work/dev.tok.src
    target_file: $work/dev.tok.tgt
    shuffle: false
infer_params:
  data_layer_params:
    source_file: $work/infer.tok.src
    target_file: ""
    shuffle: false
EOF

echo "== train_eval: BLEU, its files, and a model that translates"
check "$rig" run translation.yaml --mode train_eval > train.log
sig='nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:rig-sacrebleu-2'
[ "$(grep -Ec "^\*\*\* Eval BLEU score: [0-9]+\.[0-9]{2} \($sig\)$" train.log)" -eq 3 ] ||
  fail "expected 3 'Eval BLEU score' lines with the signature (evals at steps 100, 200, 300)"
[ "$(grep -c '^\*\*\* BLEU = ' train.log)" -eq 3 ] || fail "expected 3 '*** BLEU = ' lines"
[ "$(grep -c '^\*\*\* Evaluated 40 samples' train.log)" -eq 3 ] ||
  fail "'Evaluated N samples' should count the 40 dev pairs, not tokens"
# OpenSeq2Seq's teacher-forced BLEU, once per eval, only under its own label.
[ "$(grep -Ec '^\*\*\* Eval teacher-forced BLEU \(reference prefix fed in; not a translation score\): [0-9]+\.[0-9]{2}$' train.log)" -eq 3 ] ||
  fail "expected 3 teacher-forced BLEU lines, labelled as not a translation score"
# eval_bleu_samples (default 3) samples an eval.
[ "$(grep -Ec '^\*\*\* Eval sample [0-2]: prediction: ' train.log)" -eq 9 ] ||
  fail "expected 3 eval sample predictions at each of the 3 evals"
grep -Fxq "*** Eval sample 0: reference:  $(head -n 1 dev.tgt)" train.log ||
  fail "eval sample 0's reference is not dev line 1"
# The references are the dev targets detokenized, line for line in file order;
# the outputs have one line per pair too.
cmp runs/a/eval_references.txt dev.tgt || fail "eval_references.txt differs from dev.tgt"
[ "$(wc -l < runs/a/eval_outputs.txt)" -eq 40 ] || fail "eval_outputs.txt should have 40 lines"
# The last eval's score line is what `rig bleu` says of those files.
check "$rig" bleu runs/a/eval_references.txt runs/a/eval_outputs.txt > bleu.txt
last_bleu_line="$(grep '^\*\*\* BLEU = ' train.log | tail -n 1)"
rig_bleu_line="$(grep '^BLEU = ' bleu.txt)"
[ "$last_bleu_line" = "*** $rig_bleu_line" ] ||
  fail "train_eval's '$last_bleu_line' differs from rig bleu's '$rig_bleu_line'"
last_score="$(grep '^\*\*\* Eval BLEU score: ' train.log | tail -n 1 | awk '{print $5}')"
[ "$last_score" = "$(awk '/^BLEU = / {print $3}' bleu.txt)" ] ||
  fail "Eval BLEU score $last_score differs from rig bleu's"
echo "final dev BLEU $last_score (must be > $min_bleu)"
awk -v s="$last_score" -v m="$min_bleu" 'BEGIN { exit !(s > m) }' ||
  fail "the model did not learn to translate: BLEU $last_score <= $min_bleu"

echo "== best_models: the best BLEU (max) checkpoint, reproduced by eval --checkpoint best"
grep -q '^mode: max$' runs/a/best_models/index.yaml || fail "BLEU should rank by max"
grep -q '^metric: BLEU$' runs/a/best_models/index.yaml || fail "index.yaml should rank by BLEU"
# step and BLEU of each eval, and the best (earliest on a tie, as best_models keeps).
awk '/^\*\*\* Running evaluation on a validation set \(step / { step = $NF; sub(/\):$/, "", step) }
     /^\*\*\* Eval BLEU score: / { print step, $5 }' train.log > evals.txt
cat evals.txt
best_step="$(sort -k2,2gr -k1,1n evals.txt | awk 'NR == 1 {print $1}')"
test -f "runs/a/best_models/ckpt-$best_step/model.safetensors" ||
  fail "best_models does not hold ckpt-$best_step, the best BLEU of $(tr '\n' ' ' < evals.txt)"
best_line="$(awk -v s="$best_step" '/^\*\*\* Running evaluation on a validation set \(step / {
               step = $NF; sub(/\):$/, "", step) }
             /^\*\*\* BLEU = / && step == s { print }' train.log)"
check "$rig" run translation.yaml --mode eval --checkpoint best > eval_best.log
grep -q "Restored .*best_models/ckpt-$best_step" eval_best.log || fail "eval did not load the best"
[ "$(grep '^\*\*\* BLEU = ' eval_best.log)" = "$best_line" ] ||
  fail "eval --checkpoint best does not reproduce step $best_step's '$best_line'"
grep -q '^\*\*\* Evaluated 40 samples' eval_best.log || fail "eval should count 40 pairs"

echo "== infer: one line per source line, the empty one included"
check "$rig" run translation.yaml --mode infer --infer_output_file infer.txt > infer.log
[ "$(wc -l < infer.txt)" -eq 41 ] || fail "infer.txt should have 41 lines, one per source line"
# Apart from the empty line, the translations are the last eval's (the same checkpoint).
check "$rig" run translation.yaml --mode eval > eval_latest.log
awk 'NR != 3' infer.txt | cmp - runs/a/eval_outputs.txt ||
  fail "infer's lines differ from eval's outputs of the same checkpoint"
# Other batches and padded widths give the same translations.
check "$rig" run translation.yaml --mode infer --infer_output_file infer_b7.txt \
  --batch_size_per_gpu=7 --data_layer_params/pad_lengths_to_eight=true > infer_b7.log
cmp infer.txt infer_b7.txt || fail "batch size 7 with widths padded to 8 translates differently"

echo "== interactive_infer: raw text typed on stdin, one translation per line on stdout"
head -n 5 dev.src > typed.txt
"$rig" run translation.yaml --mode interactive_infer < typed.txt > typed.out 2> typed.err ||
  { cat typed.err; fail "interactive_infer failed"; }
cat typed.out
head -n 5 runs/a/eval_outputs.txt | cmp - typed.out ||
  fail "typed lines are not translated as eval translates the same sentences"

echo "== resume mid-epoch: 150 steps + 150 resumed steps = 300 straight steps, bit for bit"
# 2000 pairs / 32 = 62 steps an epoch: step 150 is inside the third epoch.
check "$rig" run translation.yaml --mode train_eval --logdir runs/b --max_steps=150 > b1.log
check "$rig" run translation.yaml --mode train_eval --logdir runs/b --continue_learning > b2.log
grep -q "Resuming from .*ckpt-150 at step 150" b2.log || fail "did not resume at step 150"
grep -q "^  offset: [1-9]" runs/b/checkpoints/ckpt-150/state.yaml || fail "step 150 is not mid-epoch"
cmp runs/a/checkpoints/ckpt-300/model.safetensors runs/b/checkpoints/ckpt-300/model.safetensors
cmp runs/a/checkpoints/ckpt-300/optimizer.safetensors runs/b/checkpoints/ckpt-300/optimizer.safetensors
# The same with batches of at most 256 tokens in length buckets (its own sampler).
tokens=(--data_layer_params/batch_tokens=256 --save_checkpoint_steps=100)
check "$rig" run translation.yaml --logdir runs/tokens_straight "${tokens[@]}" > t_straight.log
check "$rig" run translation.yaml --logdir runs/tokens --max_steps=150 "${tokens[@]}" > t1.log
check "$rig" run translation.yaml --logdir runs/tokens --continue_learning "${tokens[@]}" > t2.log
grep -q "Resuming from .*ckpt-150 at step 150" t2.log || fail "did not resume at step 150"
grep -q "^  offset: [1-9]" runs/tokens/checkpoints/ckpt-150/state.yaml ||
  fail "step 150 of token batches should be mid-epoch"
cmp runs/tokens_straight/checkpoints/ckpt-300/model.safetensors \
  runs/tokens/checkpoints/ckpt-300/model.safetensors

echo "== device: sim: parallel_text, train_eval with beam-search BLEU and interactive_infer give the CPU's bytes"
check "$rig" run translation.yaml --mode train_eval --logdir runs/sim --max_steps=150 --device=sim > sim.log
for f in model.safetensors optimizer.safetensors; do
  cmp runs/b/checkpoints/ckpt-150/$f runs/sim/checkpoints/ckpt-150/$f
done
grep -q "Eval BLEU score" sim.log || fail "no BLEU on sim"
diff <(grep -E "BLEU|loss" b1.log | grep -v "saved") <(grep -E "BLEU|loss" sim.log | grep -v "saved") ||
  fail "losses or BLEU on sim differ from the CPU's"
"$rig" run translation.yaml --device=sim --mode interactive_infer < typed.txt > typed_sim.out 2> typed_sim.err ||
  { cat typed_sim.err; fail "interactive_infer on sim failed"; }
cmp typed.out typed_sim.out || fail "interactive_infer on sim translates differently"

echo "== bad files: exit 2, one line naming the file"
head -n 1999 train.tok.tgt > short.tok.tgt
expect_error "source_file $work/train.tok.src has 2000 lines but target_file $work/short.tok.tgt has 1999" \
  run translation.yaml --logdir runs/bad --data_layer_params/target_file="$work/short.tok.tgt"
{ printf '<unk>\t0\n<pad>\t0\n</s>\t0\n<s>\t0\n'; tail -n +5 m.vocab; } > specials_last.vocab
expect_error "src_vocab_file $work/specials_last.vocab: line 1 must be '<pad>'" \
  run translation.yaml --logdir runs/bad --data_layer_params/src_vocab_file="$work/specials_last.vocab"
# A model of the same size trained on other words does not match m.vocab.
awk -v seed=3 -v n=500 -v out=other -f gen.awk
tr 'aeiou' 'uoiea' < other.src > other.txt
spm_train --input=other.txt --model_prefix=other --vocab_size=14 --model_type=word --pad_id=0 \
  --eos_id=1 --bos_id=2 --unk_id=3 --hard_vocab_limit=false --minloglevel=2 > spm_other.log 2>&1 ||
  { cat spm_other.log; fail "spm_train failed"; }
expect_error "src_vocab_file $work/m.vocab does not match sentencepiece_model $work/other.model" \
  run translation.yaml --mode interactive_infer \
  --data_layer_params/sentencepiece_model="$work/other.model" < typed.txt
echo "translation: all checks passed"
