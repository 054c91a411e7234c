#!/usr/bin/env bash
# The build's optional parts (cmake/RigOptionalPart.cmake): RIG_WITH_CUDA,
# RIG_WITH_MPI and RIG_WITH_NCCL take AUTO, ON or OFF; ON stops the configure
# when what the part needs is missing, saying what; AUTO looks again at every
# configure. Configures only (no build), in WORKDIR; CUDACXX=/bin/false hides
# nvcc (check_language then finds no CUDA compiler).
# Usage: optional_parts.sh SOURCE_DIR WORKDIR
set -euo pipefail
export LC_ALL=C
source_dir="$(realpath "$1")"; work="$2"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
configure() { cmake -S "$source_dir" -B tree -G Ninja -DBUILD_TESTING=OFF "$@"; }
# expect_stop PATTERN ARGS...: the configure fails, its error matching PATTERN.
expect_stop() {
  local pattern="$1"; shift
  rm -rf tree
  expect_code 1 configure "$@"
  tr -s ' \n' ' ' < err.txt | grep -Eq -- "$pattern" || fail "the configure's error does not match /$pattern/"
}

echo "== a value other than AUTO, ON or OFF"
expect_stop "RIG_WITH_MPI=maybe: expected AUTO, ON or OFF" -DRIG_WITH_MPI=maybe

echo "== nccl required without the CUDA back end"
expect_stop "RIG_WITH_NCCL=ON, but the nccl communicator needs the CUDA back end and MPI \(RIG_WITH_CUDA=OFF" \
  -DRIG_WITH_CUDA=OFF -DRIG_WITH_NCCL=ON

if ! command -v nvcc > /dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "PASS (no nvcc here: the CUDA cases need one)"; exit 0
fi
echo "== CUDA required, nvcc hidden"
CUDACXX=/bin/false expect_stop "RIG_WITH_CUDA=ON, but no CUDA compiler was found" -DRIG_WITH_CUDA=ON

echo "== AUTO: off without nvcc, on at the next configure once it is there"
rm -rf tree
CUDACXX=/bin/false check configure > first.log 2>&1 || { cat first.log; fail "the configure failed"; }
grep -q -- "-- rig: CUDA=OFF .* NCCL=OFF" first.log || fail "AUTO without nvcc is not CUDA=OFF"
grep -q "^RIG_WITH_CUDA:STRING=AUTO$" tree/CMakeCache.txt || fail "the cache does not keep AUTO"
check cmake -S "$source_dir" -B tree > second.log 2>&1 || { cat second.log; fail "the reconfigure failed"; }
grep -q -- "-- rig: CUDA=ON " second.log || fail "AUTO did not find nvcc at the next configure"
echo "PASS"
