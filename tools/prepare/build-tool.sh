# Sourced by tools/prepare-de-en and tools/text-baselines.
# rig_build_tool TARGET [BINARY]: builds TARGET in $RIG_BUILD_DIR (default
# $root/build; configured first when it is not a build directory yet) and
# prints the path of build/bin/BINARY (BINARY defaults to TARGET). The build's
# output goes to stderr only when it fails.
rig_build_tool() {
  local target="$1" binary="${2:-$1}"
  local build="${RIG_BUILD_DIR:-$root/build}" log
  log="$(mktemp)"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    mkdir -p "$build"
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release > "$log" 2>&1 ||
      { cat "$log" >&2; rm -f "$log"; echo "could not configure $build" >&2; return 1; }
  fi
  cmake --build "$build" --target "$target" > "$log" 2>&1 ||
    { cat "$log" >&2; rm -f "$log"; echo "could not build $target in $build" >&2; return 1; }
  rm -f "$log"
  echo "$build/bin/$binary"
}
