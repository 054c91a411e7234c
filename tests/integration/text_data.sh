#!/usr/bin/env bash
# The text2text data layers (parallel_text, synthetic_text) through the real
# binary: every bad input is refused before anything runs, with exit 2 and one
# line naming the file. Data layers are built before the model, so an `mlp`
# (which cannot read text) is enough to reach them: good inputs get past the
# data layer and are refused by the model.
# Usage: text_data.sh RIG WORKDIR
set -euo pipefail
export LC_ALL=C RIG_PROGRESS=0
rig="$(realpath "$1")"; work="$2"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"

"$rig" plugins > plugins.txt
if ! grep -Eq "^data_layer +parallel_text " plugins.txt; then
  echo "(no parallel_text plugin built: libsentencepiece missing; only synthetic_text is checked)"
fi

specials=$'<pad>\t0\n</s>\t0\n<s>\t0\n<unk>\t0'
printf '%s\n▁hallo\t-1\n▁welt\t-2\n.\t-3\n' "$specials" > de.vocab
printf '%s\n▁hello\t-1\n▁world\t-2\n.\t-3\n' "$specials" > en.vocab
printf '▁hallo ▁welt .\n▁welt\n▁hallo ▁hallo ▁welt ▁welt .\n' > train.de
printf '▁hello ▁world .\n▁world\n▁hello ▁hello ▁world ▁world .\n' > train.en
printf '▁hello\n▁world\n' > two-lines.en
printf '<pad>\n<s>\n</s>\n<unk>\n▁hallo\n' > swapped.vocab
printf '%s\n▁hallo\n▁welt\n▁hallo\n' "$specials" > duplicate.vocab
printf '▁hallo\n▁w\xe9lt\n▁hallo\n' > latin1.de
: > empty.de

cat > text.yaml <<EOF2
base_params:
  random_seed: 1
  batch_size_per_gpu: 2
  max_steps: 3
  logdir: runs/text
  model: mlp
  data_layer: parallel_text
  data_layer_params:
    src_vocab_file: $work/de.vocab
    tgt_vocab_file: $work/en.vocab
    source_file: $work/train.de
    target_file: $work/train.en
    max_length: 4
  optimizer: sgd
  lr_policy: fixed_lr
  lr_policy_params:
    learning_rate: 0.05
  communicator: local
EOF2
sed -e '/data_layer_params:/,/max_length:/d' -e 's/data_layer: parallel_text/data_layer: synthetic_text/' \
    -e 's|runs/text|runs/synthetic|' text.yaml > synthetic.yaml

echo "== synthetic_text reaches the model"
check "$rig" validate synthetic.yaml --skip-data > validate.txt
grep -q "train mode: OK" validate.txt || fail "synthetic.yaml does not validate"
expect_error "train mode: model 'mlp' failed to start: .*num_features" validate synthetic.yaml
expect_error "model 'mlp' failed to start: .*num_features" run synthetic.yaml --logdir runs/bad
expect_error "data_layer_params\.vocab_size: expected integer >= 5" \
  validate synthetic.yaml --data_layer_params/vocab_size=2

if grep -Eq "^data_layer +parallel_text " plugins.txt; then
  echo "== parallel_text: valid config; schema mistakes are caught by validate"
  check "$rig" validate text.yaml --skip-data > validate.txt
  grep -q "train mode: OK" validate.txt || fail "text.yaml does not validate"
  # Built, the data layer accepts the files (noting a truncated line); the mlp then refuses text.
  expect_code 2 "$rig" validate text.yaml
  grep -q "^rig: error: train mode: model 'mlp' failed to start: .*num_features" err.txt ||
    fail "validate did not build the model"
  expect_error "data_layer_params\.long_line: unknown key for data_layer 'parallel_text'.*did you mean 'long_lines'" \
    validate text.yaml --set data_layer_params.long_line=skip
  expect_error "data_layer_params\.empty_lines: .*auto.*skip.*keep" \
    validate text.yaml --data_layer_params/empty_lines=drop

  echo "== parallel_text: bad files (exit 2, one line naming the file)"
  expect_error "data_layer 'parallel_text' failed to start: .*source_file $work/train.de has 3 lines but target_file $work/two-lines.en has 2" \
    run text.yaml --logdir runs/bad --data_layer_params/target_file="$work/two-lines.en"
  expect_error "src_vocab_file $work/swapped.vocab: line 2 must be '</s>' .*found '<s>'" \
    run text.yaml --logdir runs/bad --data_layer_params/src_vocab_file="$work/swapped.vocab"
  expect_error "tgt_vocab_file $work/duplicate.vocab: piece '▁hallo' on line 7 repeats line 5" \
    run text.yaml --logdir runs/bad --data_layer_params/tgt_vocab_file="$work/duplicate.vocab"
  expect_error "source_file $work/latin1.de: line 2: byte 0xE9 is not UTF-8" \
    run text.yaml --logdir runs/bad --data_layer_params/source_file="$work/latin1.de"
  expect_error "source_file $work/none.de: file not found" \
    run text.yaml --logdir runs/bad --data_layer_params/source_file="$work/none.de"
  expect_error "source_file $work/empty.de: the file is empty" \
    run text.yaml --logdir runs/bad --data_layer_params/source_file="$work/empty.de"
  expect_error "batch_tokens 3 cannot hold line 1 .*which takes 4 padded tokens" \
    run text.yaml --logdir runs/bad --data_layer_params/batch_tokens=3
  # eval reads its own files and needs the references.
  expect_error "eval mode needs target_file" \
    run text.yaml --logdir runs/bad --mode eval --data_layer_params/target_file="''"
  if command -v spm_train > /dev/null; then
    for i in $(seq 50); do printf 'hallo welt guten tag\nwelt hallo tag der welt\n'; done > corpus.txt
    spm_train --input=corpus.txt --model_prefix=m --vocab_size=30 --model_type=bpe --pad_id=0 \
      --eos_id=1 --bos_id=2 --unk_id=3 --hard_vocab_limit=false --minloglevel=2 > spm.log 2>&1
    expect_error "src_vocab_file $work/de.vocab does not match sentencepiece_model $work/m.model: id 4 \(line 5\)" \
      run text.yaml --logdir runs/bad --data_layer_params/sentencepiece_model="$work/m.model"
    expect_error "sentencepiece_model $work/de.vocab: not a SentencePiece model" \
      run text.yaml --logdir runs/bad --data_layer_params/sentencepiece_model="$work/de.vocab"
  fi

  echo "== parallel_text: good files reach the model; the counts line comes once"
  expect_code 2 "$rig" run text.yaml --logdir runs/bad
  grep -q "model 'mlp' failed to start: .*num_features" err.txt || fail "the model was not reached"
  [ "$(grep -c '^parallel_text: train: truncated 1 lines over max_length 4' err.txt)" -eq 1 ] ||
    fail "no counts line for the truncated pair"
fi
echo "text_data: all checks passed"
