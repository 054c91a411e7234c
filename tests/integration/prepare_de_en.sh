#!/usr/bin/env bash
# tools/prepare's rig-prepare-text on a small generated trans-de-en style
# dictionary: the corpus files line up, no German phrase is in two splits, the
# special pieces lead the vocab, a second run is identical, both directions
# work; a missing dictionary and a non-empty output directory are refused
# (exit 2, one line); the baselines write their hypotheses and `rig bleu`
# scores them.
# Usage: prepare_de_en.sh RIG_PREPARE_TEXT RIG WORKDIR
set -euo pipefail
export LC_ALL=C.UTF-8
prepare="$(realpath "$1")"; rig="$(realpath "$2")"; work="$3"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"

# 60 entries with 3-word phrases and 2 sub-entries, 40 single words with two
# English alternatives, and lines the tool must skip or clean.
{
  echo "# Version :: test"
  nouns=(Haus Baum Hund Katze Garten Fluss Stadt Wald Berg Schiff Vogel Tisch)
  english=(house tree dog cat garden river town forest mountain ship bird table)
  adjectives=(alte kleine grosse rote neue)
  adjectives_en=(old small big red new)
  for a in 0 1 2 3 4; do
    for n in "${!nouns[@]}"; do
      echo "${nouns[$n]} {n} [geh.] | das ${adjectives[$a]} ${nouns[$n]} (am Ufer) :: ${english[$n]} [Br.] | the ${adjectives_en[$a]} ${english[$n]} near it"
    done
  done
  for i in $(seq 1 40); do
    echo "Wort$i {n}; Begriff$i {m} /W$i/ :: word$i; term$i [coll.]"
  done
  echo "Satz {m} | Saetze {pl} :: sentence"
  echo "Klammer (offen {f} :: bracket"
  echo "ohne Trenner"
  echo "… {adj} :: …"
  echo "Abkuerzung {f} :: a very long explanation of an abbreviation that is no translation"
} > dict.txt

echo "== missing dictionary: exit 2, one line naming the package"
expect_code 2 "$prepare" de-en out --dictionary "$work/nope.txt"
[ "$(wc -l < err.txt)" -eq 1 ] || fail "stderr is not one line"
grep -q "nope.txt not found: apt-get install trans-de-en" err.txt || fail "no install hint"
[ ! -e out ] || fail "the output directory was created"

echo "== de-en: counts, files, vocab"
check "$prepare" de-en out --dictionary dict.txt --vocab-size 120 --dev-size 10 --test-size 10 > a.log
cat a.log
grep -Eq "^ +1 skipped: comment or empty line" a.log || fail "comment not counted"
grep -Eq "^ +1 skipped: not exactly one ' :: '" a.log || fail "missing separator not counted"
grep -Eq "^ +1 skipped: unbalanced brackets" a.log || fail "unbalanced brackets not counted"
grep -Eq "^ +1 skipped: German and English ' \| ' sub-entry counts differ" a.log ||
  fail "sub-entry mismatch not counted"
grep -Eq "^ +1 aligned sub-entries left out" a.log || fail "empty sub-entry not counted"
grep -Eq "^ +1 pairs dropped: lengths too unbalanced" a.log || fail "unbalanced pair not counted"
# 60 x 2 sub-entry pairs, minus the 12 nouns' first sub-entry repeated 4 times
# (48 duplicates); 40 x 3 word pairs.
grep -Eq "^ +192 distinct pairs kept" a.log || fail "wrong number of distinct pairs"
grep -Eq "^  dev +10 pairs" a.log || fail "dev is not 10 pairs"
grep -Eq "^  test +10 pairs" a.log || fail "test is not 10 pairs"
grep -Eq "^  train +172 pairs  .*/train.de -> train.en" a.log || fail "train is not 172 pairs"
grep -q "every tokenized line detokenizes to its raw line" a.log || fail "no round trip check"
for split in train dev test; do
  n=$(wc -l < out/$split.de)
  for f in $split.en $split.tok.de $split.tok.en; do
    [ "$(wc -l < out/$f)" -eq "$n" ] || fail "$f has not $n lines"
  done
done
[ "$(cut -f1 out/m_common.vocab | head -4 | tr '\n' ' ')" = "<pad> </s> <s> <unk> " ] ||
  fail "vocab does not start with <pad> </s> <s> <unk>"
[ "$(wc -l < out/m_common.vocab)" -eq 120 ] || fail "vocab is not 120 pieces"
grep -q "(" out/train.de && fail "a parenthetical survived"
grep -Eq "\[|\{|/W[0-9]+/|…" out/train.de out/train.en && fail "an annotation survived"
grep -qx "das alte Haus" out/*.de || fail "no cleaned phrase"
# Dev and test: phrases of 3+ words on both sides, none of their German in another split.
awk 'NF < 3 { exit 1 }' out/dev.de out/dev.en out/test.de out/test.en || fail "a short held-out pair"
sort -u out/train.de > train_de; sort -u out/dev.de > dev_de; sort -u out/test.de > test_de
[ -z "$(comm -12 train_de dev_de)$(comm -12 train_de test_de)$(comm -12 dev_de test_de)" ] ||
  fail "a German phrase is in two splits"
grep -q "▁" out/train.tok.en || fail "no word-boundary pieces"

echo "== a non-empty output directory is refused without --force"
expect_code 2 "$prepare" de-en out --dictionary dict.txt --vocab-size 120
[ "$(wc -l < err.txt)" -eq 1 ] || fail "stderr is not one line"
grep -q "out: directory exists and is not empty; pass --force" err.txt || fail "no --force hint"

echo "== en-de with --force: the same files, byte for byte"
mkdir keep; cp out/* keep/
check "$prepare" de-en out --dictionary dict.txt --vocab-size 120 --dev-size 10 --test-size 10 \
  --direction en-de --force > b.log
grep -q "splits (en -> de; the German side decides the split)" b.log || fail "en-de not shown"
grep -Eq "^  train +172 pairs  .*/train.en -> train.de" b.log || fail "en-de train line"
for f in keep/*; do cmp "$f" "out/$(basename "$f")" || fail "$(basename "$f") differs"; done

echo "== bad --direction and a vocabulary too large for the corpus: exit 2"
expect_code 2 "$prepare" de-en other --dictionary dict.txt --direction fr-en
grep -q "expected de-en or en-de, found 'fr-en'" err.txt || fail "bad direction not named"
expect_code 2 "$prepare" de-en other --dictionary dict.txt --vocab-size 100000
grep -q "training the BPE model with --vocab-size 100000 failed" err.txt || fail "vocab error"

echo "== baselines: hypotheses line up with the test split, rig bleu scores them"
check "$prepare" baselines out > c.log
cat c.log
cmp out/baselines/test.copy.en out/test.de || fail "copy baseline is not the source"
[ "$(wc -l < out/baselines/test.dict.en)" -eq 10 ] || fail "dictionary baseline is not 10 lines"
# Every test phrase is "das <adjective> <noun>": the noun is a single-word train pair.
grep -Eq "(house|tree|dog|cat|garden|river|town|forest|mountain|ship|bird|table)$" \
  out/baselines/test.dict.en || fail "no noun translated"
check "$rig" bleu out/test.en out/baselines/test.copy.en | tee copy.bleu
check "$rig" bleu out/test.en out/baselines/test.dict.en | tee dict.bleu
grep -Eq "^BLEU = [0-9.]+" copy.bleu || fail "no BLEU for the copy baseline"
# Too few 4-gram matches for a BLEU above 0 here: compare unigram precisions.
copy=$(sed -nE 's/^BLEU = [0-9.]+ ([0-9.]+)\/.*/\1/p' copy.bleu)
dict=$(sed -nE 's/^BLEU = [0-9.]+ ([0-9.]+)\/.*/\1/p' dict.bleu)
awk -v c="$copy" -v d="$dict" 'BEGIN { exit !(d > c) }' ||
  fail "dictionary baseline's unigram precision ($dict) is not above copying's ($copy)"
check "$prepare" baselines out --direction en-de > d.log
cmp out/baselines/test.copy.de out/test.en || fail "en-de copy baseline is not the English side"
expect_code 2 "$prepare" baselines nowhere
grep -q "nowhere/train.de: not found; prepare the corpus first" err.txt || fail "missing corpus"
echo "OK"
