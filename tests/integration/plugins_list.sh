#!/usr/bin/env bash
# `rig plugins`: every column starts where its header does, long names
# (piecewise_constant, transformer_policy) and broken rows included.
# Usage: plugins_list.sh RIG [--plugin-path DIR]
set -euo pipefail
rig="$1"; shift
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
out="$("$rig" plugins "$@")"
echo "$out"
grep -q "^lr_policy  *piecewise_constant " <<<"$out" || fail "no piecewise_constant row"
grep -q "^lr_policy  *transformer_policy " <<<"$out" || fail "no transformer_policy row"
awk '
  NR == 1 { for (i = 2; i <= 4; ++i) start[i] = index($0, $i); next }
  {
    # Field i of the row must begin at its header column, after a blank.
    pos = 1
    for (i = 1; i <= 4; ++i) {
      field = substr($0, pos); sub(/^ +/, "", field)
      begin = length($0) - length(field) + 1
      if (i > 1 && begin != start[i]) {
        printf "row %d: column %d starts at %d, its header at %d: %s\n", NR, i, begin, start[i], $0
        bad = 1
      }
      match(field, /^[^ ]+/); pos = begin + RLENGTH
    }
  }
  END { exit bad }' <<<"$out" || fail "rig plugins: columns out of line"
echo "plugins columns ok"
