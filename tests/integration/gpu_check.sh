#!/usr/bin/env bash
# tools/gpu-check on a machine without a GPU: `pack` makes the bundle from
# this build, `run` checks it, reports that no GPU is there in its summary
# (every GPU check skipped, saying why) and exits 3; bad input exits 2.
# Usage: gpu_check.sh GPU_CHECK BUILD_DIR WORKDIR
set -euo pipefail
export LC_ALL=C
gpu_check="$(realpath "$1")"; build="$(realpath "$2")"; work="$3"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"

if ! "$build/bin/rig" --version | grep -q 'CUDA on'; then
  echo "== a build without CUDA cannot be packed for a GPU: exit 2"
  expect_code 2 "$gpu_check" pack bundle --build "$build"
  grep -q "is not a CUDA build" err.txt || fail "pack does not say the build lacks CUDA"
  echo "PASS (no CUDA build: the rest needs one)"; exit 0
fi
if command -v nvidia-smi > /dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIP: this machine has a GPU; the test is of a machine without one"; exit 0
fi

echo "== pack: one tarball from this build"
check "$gpu_check" pack bundle --build "$build" > pack.log
test -f bundle/rig-gpu-check.tar.gz || fail "no bundle/rig-gpu-check.tar.gz"
tar -tzf bundle/rig-gpu-check.tar.gz > contents.txt
grep -q '/share/rig/gpu-check/gpu_transformer.py$' contents.txt ||
  fail "the bundle lacks the PyTorch benchmark"
# every module of tools/bench that a bundled script imports travels with it
missing="$(python3 - "$(dirname "$gpu_check")/bench" contents.txt <<'PY'
import ast, os, sys
bench, contents = sys.argv[1], open(sys.argv[2]).read().split()
bundled = {os.path.basename(p) for p in contents if "/share/rig/gpu-check/" in p}
for script in sorted(b for b in bundled if b.endswith(".py")):
    for node in ast.walk(ast.parse(open(os.path.join(bench, script)).read())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
        for name in names:
            if os.path.exists(os.path.join(bench, name + ".py")) and name + ".py" not in bundled:
                print(f"{script} imports {name}")
PY
)"
[ -z "$missing" ] || fail "the bundle lacks modules its scripts import: $missing"

echo "== run without a GPU: the bundle is checked, the rest skipped, exit 3"
set +e; "$gpu_check" run bundle logs > run.log 2>&1; code=$?; set -e
cat run.log
[ "$code" -eq 3 ] || fail "gpu-check run exited $code without a GPU, expected 3"
grep -Eq '^bundle check +PASS' logs/summary.txt || fail "the bundle check did not pass"
grep -Eq '^GPU +SKIP .*no GPU check ran' logs/summary.txt || fail "the summary does not say why"
[ "$(ls logs | wc -l)" -le 8 ] || fail "more than eight files in the output folder"
tail -n 3 run.log | grep -q "no GPU on this machine" || fail "the summary is not printed last"

echo "== bad input: exit 2 with the usage"
expect_code 2 "$gpu_check" run nowhere logs2
grep -q "holds no rig-gpu-check.tar.gz" err.txt || fail "no message for a missing bundle"
expect_code 2 "$gpu_check" frobnicate
GPU_CHECK_PARTS=bench,speed expect_code 2 "$gpu_check" run bundle logs3
grep -q "GPU_CHECK_PARTS: unknown part 'speed' (the parts: tests, training" err.txt ||
  fail "no message naming the unknown part and the known ones"
echo "== a chosen part list still checks the bundle and says there is no GPU"
set +e; GPU_CHECK_PARTS=bench,census "$gpu_check" run bundle logs4 > run4.log 2>&1; code=$?; set -e
[ "$code" -eq 3 ] || { cat run4.log; fail "gpu-check run with GPU_CHECK_PARTS exited $code, expected 3"; }
echo "PASS"
