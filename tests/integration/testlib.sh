# Helpers the integration scripts source.
# check CMD...: echo and run a command that must succeed.
check() { echo "+ $*"; "$@"; }
# expect_code CODE CMD...: run CMD (stdout -> out.txt, stderr -> err.txt) and
# fail unless it exits with CODE.
expect_code() {
  local want="$1"; shift
  set +e; "$@" >out.txt 2>err.txt; local got=$?; set -e
  cat out.txt err.txt
  if [ "$got" -ne "$want" ]; then echo "FAIL: exit $got, expected $want: $*"; exit 1; fi
}
fail() { echo "FAIL: $*"; exit 1; }
