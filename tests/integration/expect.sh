#!/usr/bin/env bash
# expect.sh EXIT_CODE REGEX [--one-line] [--workdir DIR] -- COMMAND [ARGS...]
# Runs COMMAND (in DIR, emptied first, when given) (killed after 120 s: a hang fails the test), then checks its exit
# code and that its output (stdout + stderr, as one text: . matches newlines)
# matches the extended REGEX.
# --one-line: stderr must be exactly one line (one clear message, no trace).
set -uo pipefail
expected_code="$1"; regex="$2"; shift 2
one_line=0
if [ "${1:-}" = "--one-line" ]; then one_line=1; shift; fi
if [ "${1:-}" = "--workdir" ]; then
  rm -rf "$2" && mkdir -p "$2" && cd "$2" || exit 1
  shift 2
fi
[ "${1:-}" = "--" ] && shift
out="$(mktemp)"; err="$(mktemp)"
trap 'rm -f "$out" "$err"' EXIT
timeout --kill-after=5 120 "$@" >"$out" 2>"$err"
code=$?
fail() {
  echo "FAIL: $*"; echo "command: $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; exit 1
}
if [ "$code" -eq 124 ] || [ "$code" -eq 137 ]; then fail "timed out (a hang)"; fi
[ "$code" -eq "$expected_code" ] || fail "exit code $code, expected $expected_code"
if ! cat "$out" "$err" | grep -Ezq -- "$regex"; then fail "output does not match /$regex/"; fi
if grep -Eq "terminate called|Aborted|Segmentation|stack trace|AddressSanitizer|runtime error:" "$err"; then
  fail "crash or sanitizer report in stderr"
fi
if [ "$one_line" -eq 1 ] && [ "$(wc -l <"$err")" -ne 1 ]; then fail "stderr is not exactly one line"; fi
echo "ok: exit $code, output matches /$regex/"
