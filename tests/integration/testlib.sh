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
# two_hosts_up TOOL PREFIX RATE: skips (77) where tools/two-hosts cannot run,
# else brings up a pair named PREFIX-<pid> (unique: ctest runs tests side by
# side) at RATE, taken down when the script exits; sets `name`.
two_hosts_up() {
  local why
  why=$("$1" preflight) || { echo "SKIP: $why"; exit 77; }
  name="$2-$$"
  # shellcheck disable=SC2064 # the tool and the name are fixed now
  trap "\"$1\" --name \"$name\" down >/dev/null 2>&1" EXIT
  trap 'exit 1' TERM INT HUP
  check "$1" --name "$name" up --rate "$3" > /dev/null
}
# expect_error PATTERN RIG-ARGS...: `$rig RIG-ARGS` exits 2 with one line on
# stderr matching the extended regex PATTERN.
expect_error() {
  local pattern="$1"; shift
  echo "+ rig $* (expect exit 2: $pattern)"
  expect_code 2 "$rig" "$@"
  [ "$(wc -l < err.txt)" -eq 1 ] || fail "stderr is not one line"
  grep -Eq -- "$pattern" err.txt || fail "stderr does not match /$pattern/"
}
# rank_pid PATTERN RANK: the pid of MPI rank RANK of the job whose command line
# holds PATTERN, or nothing. ctest runs the scripts side by side: make PATTERN
# unique (an absolute logdir and the space after it), or another test's job
# matches ("--logdir killed" matched "--logdir killed1").
rank_pid() {
  local p
  for p in $(pgrep -f -- "$1" || true); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$p"; return
    fi
  done
}
# await_rank PATTERN RANK LOG LINE: waits up to 20 s until rank RANK of that
# job runs and LOG holds LINE, then prints the rank's pid; fails otherwise.
await_rank() {
  local pid=""
  for _ in $(seq 1 100); do
    pid=$(rank_pid "$1" "$2")
    if [ -n "$pid" ] && grep -q -- "$4" "$3"; then echo "$pid"; return 0; fi
    sleep 0.2
  done
  return 1
}
