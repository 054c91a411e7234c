#!/usr/bin/env bash
# Device selection through the real binary, on whatever machine runs it (CI
# has no GPU): device: auto runs on the CPU with one line saying why, device:
# cpu never looks, device: cuda without a usable GPU stops with exit 2 and one
# line naming the key; CUDA_VISIBLE_DEVICES; a missing or foreign CUDA back end;
# librig and rig never link a CUDA library, and librig_cuda links none but
# what every machine has.
# Usage: device.sh RIG EXPERIMENT WORKDIR LIBRIG
set -euo pipefail
rig="$1"; exp="$2"; work="$3"; librig="$4"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
export RIG_PROGRESS=0
libdir="$(dirname "$librig")"

# What this machine and build should report.
if "$rig" --version | grep -q "CUDA on"; then cuda_built=1; else cuda_built=0; fi
if python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null; then driver=1; else driver=0; fi
if [ "$cuda_built" -eq 0 ]; then
  why="this rig was built without CUDA \(RIG_WITH_CUDA=OFF\)"
elif [ "$driver" -eq 0 ]; then
  why="no CUDA driver is installed \(libcuda\.so\.1 not found\)"
else
  # A GPU machine without a visible device; either way a reason.
  why=".+"
fi
echo "CUDA built: $cuda_built, driver: $driver, expected reason: /$why/"

# one_device_line LOG PATTERN: exactly one "*** Device:" line, matching PATTERN.
one_device_line() {
  local n
  n=$(grep -c '^\*\*\* Device: ' "$1" || true)
  [ "$n" -eq 1 ] || fail "$n device lines in $1, expected 1"
  grep -Eq -- "^\*\*\* Device: $2\$" "$1" || fail "device line of $1 does not match /$2/"
}

echo "== device: auto (the default) runs on the CPU and says why, once"
check "$rig" run "$exp" --logdir auto > auto.log
cat auto.log
one_device_line auto.log "cpu \(auto: $why\)"
grep -q "Global step 40:" auto.log || fail "auto run did not train"

echo "== device: auto in eval mode says it too"
check "$rig" run "$exp" --logdir auto --mode eval > eval.log
one_device_line eval.log "cpu \(auto: $why\)"

echo "== device: cpu does not look for a GPU and prints nothing about it"
check "$rig" run "$exp" --logdir cpu --device=cpu > cpu.log
grep -q '^\*\*\* Device:' cpu.log && fail "device: cpu printed a device line"
grep -q "Global step 40:" cpu.log || fail "cpu run did not train"
# The checkpoint's identity leaves the device out: a run resumes on another one.
check "$rig" run "$exp" --logdir cpu --device=auto --max_steps=50 --continue_learning > resume.log
grep -q "Resuming from .*ckpt-40 at step 40" resume.log || fail "no resume across devices"

if [ "$driver" -eq 0 ] || [ "$cuda_built" -eq 0 ]; then
  echo "== device: cuda without a GPU: exit 2, one line naming the key and what was found"
  expect_error "^rig: error: command line \(--device=cuda\): device: cuda requested, but no GPU can be used: $why; set device: cpu or auto to run on the CPU\$" \
    run "$exp" --logdir cuda --device=cuda
  sed 's/^  communicator: local$/  communicator: local\n  device: cuda/' "$exp" > cuda.yaml
  expect_error "^rig: error: cuda\.yaml:[0-9]+:[0-9]+: base_params\.device: cuda requested, but no GPU can be used: $why; set device: cpu or auto" \
    run cuda.yaml --logdir cuda
  test ! -e cuda || fail "a refused run wrote its logdir"
else
  echo "== device: cuda on a GPU machine: trains there, or stops naming why (no visible device)"
  set +e; "$rig" run "$exp" --logdir cuda --device=cuda > cuda.log 2>&1; code=$?; set -e
  cat cuda.log
  if [ "$code" -eq 0 ]; then
    one_device_line cuda.log "cuda:[0-9]+ .*"
    grep -q "Global step 40:" cuda.log || fail "the cuda run did not train"
  else
    [ "$code" -eq 2 ] || fail "device: cuda exit $code"
  fi
fi

echo "== a device rig does not know is a config error"
expect_error "command line \(--device=gpu\): device: expected one of \[auto, cpu, cuda, sim\], found 'gpu'" \
  run "$exp" --logdir bad --device=gpu

echo "== CUDA_VISIBLE_DEVICES hiding every GPU: auto still runs, on the CPU"
CUDA_VISIBLE_DEVICES="" check "$rig" run "$exp" --logdir hidden > hidden.log
if [ "$cuda_built" -eq 1 ] && [ "$driver" -eq 1 ]; then
  one_device_line hidden.log "cpu \(auto: the CUDA driver \([0-9.]+\) found no GPU \(CUDA_VISIBLE_DEVICES=''\)\)"
else
  one_device_line hidden.log "cpu \(auto: $why\)"
fi

echo "== no CUDA library is linked into rig or librig"
for f in "$rig" "$librig"; do
  if readelf -d "$f" | grep NEEDED | grep -Ei 'libcuda|libcudart|libcublas|libcudnn'; then
    fail "$f links a CUDA library"
  fi
done

if [ "$cuda_built" -eq 1 ]; then
  backend="$libdir/librig_cuda.so"
  echo "== librig_cuda sits next to librig and needs no CUDA library (the runtime is static)"
  test -f "$backend" || fail "no $backend"
  readelf -d "$backend" | grep NEEDED
  if readelf -d "$backend" | grep NEEDED | grep -Ei 'cuda|cublas|cudnn'; then
    fail "$backend links a CUDA library dynamically"
  fi
  # grep reads all of nm's output: -q's early exit could SIGPIPE nm under pipefail.
  nm -D --defined-only "$backend" | grep ' T rig_cuda_backend$' >/dev/null || fail "no rig_cuda_backend in $backend"

  echo "== a librig without its back end beside it still runs, on the CPU"
  mkdir -p alone/lib
  # A librig copied away finds the plugins of its own folder only: point it at the build's.
  plugins="$(cd "$libdir/../plugins" && pwd)"
  cp -P "$libdir"/librig.so* alone/lib/
  LD_LIBRARY_PATH="$PWD/alone/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RIG_PLUGIN_PATH="$plugins" \
    check "$rig" run "$exp" --logdir alone/run > alone.log
  one_device_line alone.log "cpu \(auto: the CUDA back end could not be loaded: .*alone/lib/librig_cuda\.so: cannot open shared object file.*\)"
  LD_LIBRARY_PATH="$PWD/alone/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RIG_PLUGIN_PATH="$plugins" \
    expect_error "device: cuda requested, but no GPU can be used: the CUDA back end could not be loaded" \
    run "$exp" --logdir alone/cuda --device=cuda

  echo "== a file that is not the back end is refused, and the run goes on on the CPU"
  echo 'int not_rig_cuda(void) { return 1; }' > foreign.c
  cc -shared -fPIC -o alone/lib/librig_cuda.so foreign.c
  LD_LIBRARY_PATH="$PWD/alone/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RIG_PLUGIN_PATH="$plugins" \
    check "$rig" run "$exp" --logdir alone/foreign > foreign.log
  one_device_line foreign.log "cpu \(auto: .*alone/lib/librig_cuda\.so is not rig's CUDA back end \(it has no rig_cuda_backend function\)\)"
fi
echo "device selection: all checks passed"
