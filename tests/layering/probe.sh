#!/usr/bin/env bash
# Builds one layering probe (tests/layering/CMakeLists.txt) and checks the
# outcome: "ok" must compile; "fail" must stop because HEADER is not found
# (any other failure is a broken probe, not a proof).
# Usage: probe.sh CMAKE BUILD_DIR TARGET ok|fail HEADER
set -uo pipefail
cmake="$1"; build="$2"; target="$3"; expect="$4"; header="$5"
output=$("$cmake" --build "$build" --target "$target" 2>&1); code=$?
if [ "$expect" = ok ]; then
  [ "$code" -eq 0 ] && exit 0
  echo "$output"; echo "FAIL: $target should compile (#include \"$header\")"; exit 1
fi
if [ "$code" -eq 0 ]; then
  echo "FAIL: $target compiled: #include \"$header\" is reachable from this layer"; exit 1
fi
# A here-string, not a pipe: with pipefail, grep -q closing the pipe early can
# kill echo with SIGPIPE and fail the test although the header was not found.
if grep -Fq -e "$header: No such file or directory" -e "'$header' file not found" <<<"$output"; then
  echo "refused as expected: #include \"$header\" not found"; exit 0
fi
echo "$output"; echo "FAIL: $target failed, but not because \"$header\" was not found"; exit 1
