#!/usr/bin/env bash
# `rig bleu` end to end.
# Usage: bleu.sh RIG FIXTURES WORKDIR            the command's behaviour and errors
#        bleu.sh RIG FIXTURES WORKDIR --sacrebleu  live cross-check: rig's score line
#   equals the sacrebleu command's on every fixture and on random corpora, for
#   each option set (the sacrebleu command has no --effective-order for corpus
#   BLEU; the unit test's golden values cover it). Needs RIG_TEST_PYTHON, a python with the sacrebleu package
#   (tools/run-tests makes one); exits 77 (skipped) without it.
# FIXTURES is tests/unit/fixtures/bleu (NAME.hyp / NAME.ref, golden.json).
set -euo pipefail
rig="$1"; fix="$2"; work="$3"; mode="${4:-}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"

if [ "$mode" != "--sacrebleu" ]; then
  # The score line and signature, from a file and from standard input alike.
  "$rig" bleu "$fix/news.ref" "$fix/news.hyp" > file.txt
  "$rig" bleu "$fix/news.ref" < "$fix/news.hyp" > stdin.txt
  cat file.txt
  cmp file.txt stdin.txt || fail "stdin and file hypotheses give different output"
  grep -qx "BLEU = 73.79 89.5/77.8/69.1/63.3 (BP = 0.993 ratio = 0.993 hyp_len = 152 ref_len = 153)" \
    file.txt || fail "news score line differs from sacrebleu 2.6.0's (golden.json)"
  grep -qx "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:rig-sacrebleu-2" file.txt ||
    fail "unexpected signature"
  "$rig" bleu "$fix/no_4gram.ref" "$fix/no_4gram.hyp" --smooth-method floor --smooth-value 0.5 \
    --lowercase --tokenize none > floor.txt
  grep -q "smooth:floor\[0.50\]" floor.txt || fail "floor smoothing value missing from the signature"
  grep -q "^BLEU = " floor.txt || fail "no score line"

  # Bad input: exit 2, one line naming what is wrong.
  head -n 3 "$fix/news.hyp" > three.hyp
  expect_error "news\.ref has 8 lines but .*three\.hyp has 3 lines" bleu "$fix/news.ref" three.hyp
  printf 'good line\nbad \xff line\n' > latin1.hyp
  printf 'a\nb\n' > two.ref
  expect_error "latin1\.hyp:2: not valid UTF-8" bleu two.ref latin1.hyp
  expect_error "<stdin>:2: not valid UTF-8" bleu two.ref < latin1.hyp
  expect_error "no_such\.ref" bleu no_such.ref three.hyp
  # Unknown option values are usage errors (CLI11's message plus rig's usage hint).
  expect_code 2 "$rig" bleu two.ref two.ref --smooth-method add_k
  grep -q -- "--smooth-method: add_k not in" err.txt || fail "no message naming --smooth-method"
  expect_code 2 "$rig" bleu two.ref two.ref --tokenize intl
  grep -q -- "--tokenize: intl not in" err.txt || fail "no message naming --tokenize"
  echo "rig bleu: OK"
  exit 0
fi

python="${RIG_TEST_PYTHON:-}"
if [ -z "$python" ] || ! "$python" -c "import sacrebleu" 2>/dev/null; then
  echo "SKIP: set RIG_TEST_PYTHON to a python with sacrebleu (tools/run-tests does)"
  exit 77
fi
# Random corpora mixing words, digits, punctuation, entities and UTF-8.
"$python" - <<'PY'
import random
rng = random.Random(7)
pieces = ["the", "The", "cat", "Straße", "ÄRZTE", "ΣΑΣ", "東京", "🎉", "1,000.5", "3-4", "e-mail",
          "&amp;", "&quot;", "<skipped>", ",", ".", "!", "?", "\"", "'", "(", ")", "-", "--", "2024",
          "U.S.", "a.b", "x,y", "ok", "\u00a0", "…", "don't", "$5", "50%", "", "İ"]
for k in range(3):
    with open(f"random{k}.ref", "w", encoding="utf-8") as r, \
         open(f"random{k}.hyp", "w", encoding="utf-8") as h:
        for _ in range(200):
            ref = [rng.choice(pieces) for _ in range(rng.randint(0, 25))]
            hyp = [w if rng.random() < 0.6 else rng.choice(pieces) for w in ref]
            hyp = hyp[: rng.randint(0, len(hyp) + 3)] + [rng.choice(pieces) for _ in range(rng.randint(0, 3))]
            glue = lambda ws: "".join(w + rng.choice([" ", " ", " ", ""]) for w in ws)
            r.write(glue(ref) + "\n")
            h.write(glue(hyp) + "\n")
PY
corpora=("$fix"/*.hyp random0.hyp random1.hyp random2.hyp)
option_sets=("" "--smooth-method none" "--smooth-method floor" "--smooth-method add-k --smooth-value 0.5"
             "--lowercase" "--tokenize none" "--lowercase --smooth-method floor --smooth-value 0.3")
compared=0
for hyp in "${corpora[@]}"; do
  ref="${hyp%.hyp}.ref"
  for opts in "${option_sets[@]}"; do
    # shellcheck disable=SC2086  # word splitting of the option set is intended
    ours="$("$rig" bleu "$ref" "$hyp" $opts | head -n 1)"
    # shellcheck disable=SC2086
    theirs="$("$python" -m sacrebleu "$ref" -i "$hyp" -f text -w 2 $opts |
              sed -E 's/^BLEU\|[^ ]* = /BLEU = /')"
    [ "$ours" = "$theirs" ] || fail "$(basename "$hyp") $opts: rig '$ours' vs sacrebleu '$theirs'"
    compared=$((compared + 1))
  done
done
echo "rig bleu equals sacrebleu $("$python" -c 'import sacrebleu; print(sacrebleu.__version__)') on $compared corpus/option pairs"
