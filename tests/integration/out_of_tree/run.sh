#!/usr/bin/env bash
# Out-of-tree plugin authoring, end to end, against an *installed* rig:
#
#   run.sh RIG_SOURCE_DIR RIG_BUILD_DIR WORKDIR
#
# 1. installs the already-built rig from RIG_BUILD_DIR into WORKDIR/prefix;
# 2. checks tools/new-plugin's argument handling, and that the install's
#    scaffold (bin/rig-new-plugin, templates in share/rig/plugin-templates)
#    writes what tools/new-plugin writes, its README naming the command run;
# 3. for every plugin kind: scaffolds a plugin (lr_policy and model with the
#    installed rig-new-plugin, as an author with only the install would; the
#    others with tools/new-plugin), configures and builds it out of tree
#    against the install (find_package(rig)), runs its unit test, and checks
#    that `rig plugins` and `rig schema` see it;
# 4. runs every generated example experiment with the installed `rig`: checks
#    that params validation uses the plugin's schema (lr_policy), that the
#    model learns (model, train_eval), and that a run resumed with
#    --continue_learning matches an uninterrupted one (optimizer, data_layer,
#    communicator);
# 5. installs the lr_policy plugin into the prefix, where rig finds it unaided;
# 6. builds the lr_policy scaffold as a subdirectory of a project that already
#    has rig::rig (the in-tree layout).
# Exits non-zero with a message on the first failure.
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 RIG_SOURCE_DIR RIG_BUILD_DIR WORKDIR" >&2
  exit 2
fi
src=$(cd -- "$1" && pwd)
build=$(cd -- "$2" && pwd)
work=$3
rm -rf -- "$work"
mkdir -p -- "$work"
work=$(cd -- "$work" && pwd)
prefix=$work/prefix
logs=$work/logs
new_plugin=$src/tools/new-plugin
# Plugins are found only where this script points rig.
unset RIG_PLUGIN_PATH
jobs=${RIG_TEST_JOBS:-2}

step() { printf '\n=== %s\n' "$*"; }
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# run_logged LOG CMD...: runs CMD with its output in LOG; shows the log on failure.
run_logged() {
  local log=$1
  shift
  if ! "$@" >"$log" 2>&1; then
    echo "--- $* failed; its output ($log):" >&2
    tail -n 60 "$log" >&2
    fail "$*"
  fi
}
# expect_status STATUS LOG CMD...: CMD must exit with STATUS.
expect_status() {
  local want=$1 log=$2
  shift 2
  local got=0
  "$@" >"$log" 2>&1 || got=$?
  if [[ $got -ne $want ]]; then
    cat "$log" >&2
    fail "expected exit status $want, got $got: $*"
  fi
}

# The compiler and generator rig was built with (a plugin must match them).
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -n 1; }
[[ -f $build/CMakeCache.txt ]] || fail "$build is not a CMake build folder"
cxx=$(cache_value CMAKE_CXX_COMPILER)
generator=$(cache_value CMAKE_GENERATOR)
cmake_args=(-G "${generator:-Unix Makefiles}" -DCMAKE_BUILD_TYPE=Release
  "-DCMAKE_PREFIX_PATH=$prefix")
[[ -n $cxx ]] && cmake_args+=("-DCMAKE_CXX_COMPILER=$cxx")
if [[ $(cache_value RIG_SANITIZE) == ON ]]; then
  # librig is instrumented: the plugin's test executable must be too.
  san="-fsanitize=address,undefined -fno-omit-frame-pointer"
  cmake_args+=("-DCMAKE_CXX_FLAGS=$san" "-DCMAKE_EXE_LINKER_FLAGS=$san"
    "-DCMAKE_MODULE_LINKER_FLAGS=$san")
fi

step "install rig into $prefix"
run_logged "$work/install.log" cmake --install "$build" --prefix "$prefix"
rig=$prefix/bin/rig
[[ -x $rig ]] || fail "the install has no bin/rig"
[[ -f $prefix/lib/cmake/rig/rigConfig.cmake ]] || fail "the install has no rigConfig.cmake"
[[ -f $prefix/include/rig/plugin.hpp ]] || fail "the install has no SDK headers"
ls "$prefix"/lib/rig/plugins/rig-*.so >/dev/null 2>&1 || fail "the install has no plugins"

step "tools/new-plugin argument handling"
expect_status 2 "$work/usage.log" "$new_plugin"
expect_status 2 "$work/usage.log" "$new_plugin" scheduler foo
grep -q "lr_policy" "$work/usage.log" ||
  fail "the usage message does not list the kinds"
expect_status 2 "$work/usage.log" "$new_plugin" lr_policy Bad-Name
expect_status 2 "$work/usage.log" "$new_plugin" lr_policy 9lives
expect_status 2 "$work/usage.log" "$new_plugin" lr_policy a b c
mkdir -p "$work/occupied" && touch "$work/occupied/keep"
expect_status 1 "$work/usage.log" "$new_plugin" lr_policy taken "$work/occupied"
[[ $(ls -A "$work/occupied") == keep ]] || fail "new-plugin wrote into a non-empty folder"
(cd "$work" && run_logged "$work/default_dir.log" "$new_plugin" optimizer default_dir)
[[ -f $work/rig-optimizer-default_dir/default_dir.cpp ]] ||
  fail "DIR does not default to ./rig-<kind>-<name>"

kinds=(lr_policy model optimizer data_layer communicator)

step "the installed scaffold: $prefix/bin/rig-new-plugin"
installed_new_plugin=$prefix/bin/rig-new-plugin
[[ -x $installed_new_plugin ]] || fail "the install has no bin/rig-new-plugin"
for kind in "${kinds[@]}"; do
  [[ -f $prefix/share/rig/plugin-templates/$kind/plugin.cpp.in ]] ||
    fail "the install has no share/rig/plugin-templates/$kind"
done
expect_status 2 "$work/usage.log" "$installed_new_plugin" scheduler foo
grep -q "usage: rig-new-plugin KIND NAME" "$work/usage.log" ||
  { cat "$work/usage.log" >&2; fail "rig-new-plugin's usage does not name rig-new-plugin"; }
# Each kind, scaffolded both ways: the same files, but for the README's
# "Written by" line, which names the command that was run.
for kind in "${kinds[@]}"; do
  name=both_$kind
  run_logged "$work/$kind.both-src.log" "$new_plugin" "$kind" "$name" "$work/both/src/$kind"
  (cd "$work" && run_logged "$work/$kind.both-inst.log" env PATH="$prefix/bin:$PATH" \
    rig-new-plugin "$kind" "$name" "$work/both/inst/$kind")
  diff -r -x README.md "$work/both/src/$kind" "$work/both/inst/$kind" >"$work/$kind.both.diff" ||
    { cat "$work/$kind.both.diff" >&2; fail "rig-new-plugin $kind differs from tools/new-plugin"; }
  grep -qF "Written by \`tools/new-plugin $kind $name\`" "$work/both/src/$kind/README.md" ||
    fail "the README from tools/new-plugin does not name tools/new-plugin"
  grep -qF "Written by \`rig-new-plugin $kind $name\`" "$work/both/inst/$kind/README.md" ||
    fail "the README from rig-new-plugin does not name rig-new-plugin"
done
grep -qF -- "-DCMAKE_PREFIX_PATH=$(cd "$prefix" && pwd -P)" "$work/model.both-inst.log" ||
  { cat "$work/model.both-inst.log" >&2; fail "rig-new-plugin does not print its prefix"; }

for kind in "${kinds[@]}"; do
  name=oot_$kind
  dir=$work/$kind
  scaffold=$new_plugin
  case $kind in lr_policy | model) scaffold=$installed_new_plugin ;; esac
  step "$kind '$name': scaffold (${scaffold##*/}), build out of tree, unit test"
  run_logged "$work/$kind.new.log" "$scaffold" "$kind" "$name" "$dir"
  for f in CMakeLists.txt "$name.cpp" "test_$name.cpp" schema.yaml example.yaml README.md; do
    [[ -f $dir/$f ]] || fail "new-plugin $kind wrote no $f"
  done
  run_logged "$work/$kind.configure.log" cmake -S "$dir" -B "$dir/build" "${cmake_args[@]}"
  run_logged "$work/$kind.build.log" cmake --build "$dir/build" -j "$jobs"
  so=$dir/build/rig-$kind-$name.so
  [[ -f $so ]] || fail "the build made no $so"
  run_logged "$work/$kind.ctest.log" ctest --test-dir "$dir/build" --output-on-failure
  grep -q "100% tests passed" "$work/$kind.ctest.log" || fail "$kind: ctest ran no passing test"

  run_logged "$work/$kind.plugins.log" "$rig" plugins --plugin-path "$dir/build"
  grep -E "$kind.*$name" "$work/$kind.plugins.log" | grep -qF "$so" ||
    { cat "$work/$kind.plugins.log" >&2; fail "rig plugins does not list $kind/$name at $so"; }
  run_logged "$work/$kind.schema.log" "$rig" schema "$kind/$name" --plugin-path "$dir/build"
  grep -q "additionalProperties: false" "$work/$kind.schema.log" ||
    fail "rig schema $kind/$name does not print the plugin's schema"
done

# An edited schema is embedded by the next build alone, with no re-configure by hand.
echo "# edited after the first build" >>"$work/lr_policy/schema.yaml"
run_logged "$work/lr_policy.rebuild.log" cmake --build "$work/lr_policy/build" -j "$jobs"
run_logged "$work/lr_policy.schema2.log" "$rig" schema lr_policy/oot_lr_policy \
  --plugin-path "$work/lr_policy/build"
grep -q "edited after the first build" "$work/lr_policy.schema2.log" ||
  fail "a build after editing schema.yaml kept the old schema"

# The installed plugins are found from the install, not from the build tree.
run_logged "$work/plugins.log" "$rig" plugins
grep -E "model.*mlp" "$work/plugins.log" | grep -qF "$prefix/lib/rig/plugins" ||
  { cat "$work/plugins.log" >&2; fail "rig plugins does not find mlp in the install"; }
# ... and an installed rig never searches the tree it was built from: a copy
# of the install without mlp does not find the build tree's mlp.
rm -rf "$work/no-mlp" && cp -r "$prefix" "$work/no-mlp"
rm "$work/no-mlp/lib/rig/plugins/rig-model-mlp.so"
run_logged "$work/plugins-no-mlp.log" env -u RIG_PLUGIN_PATH "$work/no-mlp/bin/rig" plugins
if grep -E "^model +mlp " "$work/plugins-no-mlp.log"; then
  fail "an installed rig found mlp outside its install (the build tree $build?)"
fi

step "run the lr_policy example with the installed rig"
dir=$work/lr_policy
run_logged "$work/lr_policy.config.log" "$rig" config "$dir/example.yaml" --plugin-path "$dir/build"
grep -q "warmup_steps" "$work/lr_policy.config.log" || fail "rig config shows no lr_policy params"
run_logged "$work/lr_policy.run.log" "$rig" run "$dir/example.yaml" --plugin-path "$dir/build" \
  --logdir "$logs/lr_policy" --max_steps=40
grep -q "Global step 40" "$work/lr_policy.run.log" || fail "the lr_policy run did not reach step 40"
[[ -f $logs/lr_policy/config.yaml ]] || fail "the lr_policy run wrote no config.yaml"
# Params are validated against the plugin's embedded schema: bad values and
# unknown keys are the user's errors (exit 2), caught before anything runs.
expect_status 2 "$work/lr_policy.bad.log" "$rig" run "$dir/example.yaml" \
  --plugin-path "$dir/build" --logdir "$logs/bad" --lr_policy_params/learning_rate=-1
grep -q "learning_rate" "$work/lr_policy.bad.log" || fail "the error does not name learning_rate"
expect_status 2 "$work/lr_policy.bad.log" "$rig" run "$dir/example.yaml" \
  --plugin-path "$dir/build" --logdir "$logs/bad" --lr_policy_params/warmup_stepz=3
grep -q "warmup_stepz" "$work/lr_policy.bad.log" || fail "the error does not name the unknown key"
# Without --plugin-path the plugin is unknown; RIG_PLUGIN_PATH finds it too.
expect_status 2 "$work/lr_policy.unknown.log" "$rig" validate "$dir/example.yaml"
RIG_PLUGIN_PATH=$dir/build run_logged "$work/lr_policy.validate.log" \
  "$rig" validate "$dir/example.yaml"

step "run the model example with the installed rig (train_eval)"
dir=$work/model
run_logged "$work/model.run.log" "$rig" run "$dir/example.yaml" --plugin-path "$dir/build" \
  --logdir "$logs/model" --mode train_eval --max_steps=60
grep -q "Global step 60" "$work/model.run.log" || fail "the model run did not reach step 60"
grep -q "Validation accuracy" "$work/model.run.log" || fail "the model run reported no accuracy"
losses=$(sed -n 's/.*Train loss: \([0-9.]*\).*/\1/p' "$work/model.run.log")
first=$(head -n 1 <<<"$losses")
last=$(tail -n 1 <<<"$losses")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
  fail "the model did not learn: train loss $first -> $last"

# The other kinds' examples run too; their state (optimizer momentum, data
# position) must resume exactly: 30 steps + 30 resumed = 60 in one go.
for kind in optimizer data_layer communicator; do
  step "run the $kind example; resume with --continue_learning"
  dir=$work/$kind
  run_logged "$work/$kind.run.log" "$rig" run "$dir/example.yaml" --plugin-path "$dir/build" \
    --logdir "$logs/$kind-whole" --max_steps=60 --print_loss_steps=10
  run_logged "$work/$kind.half.log" "$rig" run "$dir/example.yaml" --plugin-path "$dir/build" \
    --logdir "$logs/$kind-resumed" --max_steps=30 --print_loss_steps=10
  run_logged "$work/$kind.resume.log" "$rig" run "$dir/example.yaml" --plugin-path "$dir/build" \
    --logdir "$logs/$kind-resumed" --max_steps=60 --print_loss_steps=10 --continue_learning
  whole=$(grep "Global step 60:" "$work/$kind.run.log" || true)
  resumed=$(grep "Global step 60:" "$work/$kind.resume.log" || true)
  [[ -n $whole && $whole == "$resumed" ]] ||
    fail "$kind: the resumed run differs: '$whole' vs '$resumed'"
done

step "install the lr_policy plugin next to rig's own: found with no --plugin-path"
run_logged "$work/lr_policy.install.log" cmake --install "$work/lr_policy/build" --prefix "$prefix"
installed=$prefix/lib/rig/plugins/rig-lr_policy-oot_lr_policy.so
[[ -f $installed ]] || fail "cmake --install put no $installed"
run_logged "$work/plugins-installed.log" "$rig" plugins
grep -qF "$installed" "$work/plugins-installed.log" ||
  { cat "$work/plugins-installed.log" >&2; fail "rig plugins does not list $installed"; }
run_logged "$work/lr_policy.validate2.log" "$rig" validate "$work/lr_policy/example.yaml"

step "the scaffold as a subdirectory of a project that has rig::rig (in-tree layout)"
host=$work/host
mkdir -p "$host"
cp -r "$work/lr_policy" "$host/step"
rm -rf "$host/step/build"
cat >"$host/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(host LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(rig REQUIRED)
add_subdirectory(step)
CMAKE
run_logged "$work/host.configure.log" cmake -S "$host" -B "$host/build" "${cmake_args[@]}" \
  -DBUILD_TESTING=OFF
run_logged "$work/host.build.log" cmake --build "$host/build" -j "$jobs"
[[ -f $host/build/step/rig-lr_policy-oot_lr_policy.so ]] || fail "the subdirectory build made no plugin"

step "all good"
