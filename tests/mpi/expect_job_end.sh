#!/usr/bin/env bash
# expect_job_end.sh MAX_SECONDS REGEX [--code N] -- COMMAND [ARGS...]
# An MPI job that must fail: COMMAND (mpirun ...) must exit with a non-zero
# code (N when given) within MAX_SECONDS (it is killed at MAX_SECONDS + 30: a hang fails the
# test rather than hanging it), and its output (stdout + stderr, . matches
# newlines) must match the extended REGEX.
set -uo pipefail
max_seconds="$1"; regex="$2"; shift 2
code_wanted=""
if [ "${1:-}" = "--code" ]; then code_wanted="$2"; shift 2; fi
[ "${1:-}" = "--" ] && shift
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
start_ms=$(($(date +%s%N) / 1000000))
timeout --kill-after=5 $((max_seconds + 30)) "$@" >"$out" 2>&1
code=$?
elapsed_ms=$(($(date +%s%N) / 1000000 - start_ms))
elapsed="$((elapsed_ms / 1000)).$(printf '%03d' $((elapsed_ms % 1000))) s"
fail() { echo "FAIL: $*"; echo "--- output"; cat "$out"; exit 1; }
[ "$elapsed_ms" -le $((max_seconds * 1000)) ] || fail "exit code $code after $elapsed: more than $max_seconds s"
[ "$code" -ne 0 ] || fail "exit code 0 after $elapsed, expected a failure"
if [ -n "$code_wanted" ] && [ "$code" -ne "$code_wanted" ]; then
  fail "exit code $code after $elapsed, expected $code_wanted"
fi
grep -Ezq -- "$regex" "$out" || fail "exit code $code after $elapsed; output does not match /$regex/"
echo "ok: exit code $code after $elapsed, output matches /$regex/"
