#!/usr/bin/env bash
# tools/pack end to end: pack the build tree, unpack the tarball into a fresh
# folder, move it once more (to a path with a space), delete what pack left,
# and train the smoke experiment from there with an empty environment; every
# library resolves inside the bundle but glibc's, libstdc++'s and Open MPI's;
# rig-bundle-check passes, then names a changed file, a library gone missing
# and one too old; bad input exits 2 with one line. As root, the bundle also
# trains in a chroot that holds nothing but glibc, libgcc_s and libstdc++ (a
# bare node), where rig-bundle-check names the missing Open MPI and nothing else.
# Usage: bundle.sh PACK BUILD_DIR WORKDIR
set -euo pipefail
pack="$1"; build="$2"; work="$3"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testlib.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
name="rig-$("$build/bin/rig" --version | awk '{print $2}')-$(uname -m)"
clean_env=(env -i PATH=/usr/bin:/bin HOME="$work")

# Bad input: exit 2 and one line that names the problem.
expect_one_line() {  # PATTERN PACK-ARGS...
  local pattern="$1"; shift
  echo "+ pack $* (expect exit 2: $pattern)"
  expect_code 2 "$pack" "$@"
  [ "$(wc -l <err.txt)" -eq 1 ] || fail "stderr is not one line"
  grep -Eq -- "$pattern" err.txt || fail "stderr does not match /$pattern/"
}
touch a_file
expect_one_line "^pack: error: cannot create the output folder .*a_file/out$" a_file/out --build "$build"
expect_one_line "^pack: error: $work/no_build is not a built rig tree" out --build "$work/no_build"
mkdir -p "occupied/$name" && touch "occupied/$name/notes.txt"
expect_one_line "occupied/$name exists and is not a rig bundle" occupied --build "$build"
test -f "occupied/$name/notes.txt" || fail "pack touched a folder that is not a bundle"
expect_one_line "^pack: error: unknown option '--frobnicate'" out --frobnicate

# Pack, over an older bundle (which pack replaces: it holds a MANIFEST.tsv).
mkdir -p "out/$name" && touch "out/$name/MANIFEST.tsv" "out/$name/stale.txt"
check "$pack" out --build "$build" >pack.log 2>&1 || { cat pack.log; fail "pack failed"; }
cat pack.log
test ! -e "out/$name/stale.txt" || fail "pack did not replace the older bundle"
test -f "out/$name.tar.gz"
test -x "out/$name/bin/rig"
! compgen -G "out/.pack.*" >/dev/null || fail "pack left its scratch folder behind"
ls "out/$name/lib/rig/plugins/rig-model-mlp.so" "out/$name/share/rig/experiments/smoke.yaml" \
  "out/$name/share/rig/schemas/experiment.yaml" >/dev/null
# The manifest lists every file but itself, and where each copied library came from.
diff <(cd "out/$name" && find . -mindepth 1 \( -type f -o -type l \) ! -name MANIFEST.tsv |
  sed 's|^\./||' | LC_ALL=C sort) <(awk -F'\t' '!/^#/ {print $2}' "out/$name/MANIFEST.tsv") ||
  fail "MANIFEST.tsv does not list exactly the bundle's files"
grep -Pq '^[0-9a-f]{64}\tlib/libyaml-cpp\.so\.[0-9.]+\t/.*, Debian package libyaml-cpp[0-9.]+ ' \
  "out/$name/MANIFEST.tsv" || fail "MANIFEST.tsv does not name libyaml-cpp's Debian package"
test -f "out/$name/share/rig/licenses/libopenblas0-pthread/copyright" ||
  test -f "out/$name/share/rig/licenses/libopenblas0/copyright" || fail "no OpenBLAS licence"
# Nothing the node provides was copied.
if find "out/$name/lib" -maxdepth 1 -printf '%f\n' | grep -E '^(ld-linux|libc\.so|libm\.so|libpthread|libstdc\+\+|libgcc_s|libmpi|libopen-(pal|rte)|libcuda|libcudart|libcublas|libnccl)'; then
  fail "the bundle ships a library the node provides"
fi
readelf -d "out/$name/bin/rig" | grep -q 'RUNPATH.*\[\$ORIGIN/\.\./lib\]' || fail "bin/rig's RUNPATH"
readelf -d "out/$name/lib/rig/plugins/rig-model-mlp.so" | grep -q 'RUNPATH.*\[\$ORIGIN/\.\./\.\.\]' ||
  fail "the mlp plugin's RUNPATH"

# Unpack into a fresh folder, move it once more, and remove the packed folder.
mkdir fresh
tar -C fresh -xzf "out/$name.tar.gz"
mkdir "moved once"
mv "fresh/$name" "moved once/rig"
rm -rf "out/$name" fresh
bundle="$work/moved once/rig"

# ldd from the moved folder: nothing missing, and everything outside the bundle
# is glibc / the GCC runtime (plus, for the mpi, mpi_ps and nccl plugins, Open MPI and what it needs).
system='^(linux-vdso\.so|/?.*ld-linux[^ ]*|libc\.so|libm\.so|libstdc\+\+\.so|libgcc_s\.so)'
while IFS= read -r -d '' elf; do
  rel="${elf#"$bundle/"}"
  libs="$(ldd "$elf")"
  if grep -q "not found" <<<"$libs"; then echo "$libs"; fail "ldd $rel: a library is not found"; fi
  outside="$(grep -v -F "=> $bundle/" <<<"$libs" | awk '{print $1}' | grep -Ev "$system" || true)"
  case "$rel" in
    lib/rig/plugins/rig-communicator-mpi.so | lib/rig/plugins/rig-communicator-mpi_ps.so | \
      lib/rig/plugins/rig-communicator-nccl.so)
      outside="$(grep -Ev '^lib(mpi|open-rte|open-pal|hwloc|event_core|event_pthreads|udev|z)[-.]' <<<"$outside" || true)" ;;
  esac
  [ -z "$outside" ] || { echo "$libs"; fail "ldd $rel: resolved outside the bundle: $outside"; }
done < <(find "$bundle/bin" "$bundle/lib" -type f \( -name '*.so*' -o -perm -u+x \) -print0 |
  while IFS= read -r -d '' f; do
    if [ "$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then printf '%s\0' "$f"; fi
  done)
echo "ldd: every library resolves inside the bundle but glibc's, libstdc++'s and Open MPI's"

# Train from a third folder with an empty environment; plugins come from the bundle.
mkdir elsewhere && cd elsewhere
check "${clean_env[@]}" "$bundle/bin/rig" run "$bundle/share/rig/experiments/smoke.yaml" \
  --logdir runs/smoke >smoke.log
grep -q "Final train loss [0-9.]* is below target_loss" smoke.log || { cat smoke.log; fail "smoke did not train"; }
test -f runs/smoke/checkpoints/ckpt-300/model.safetensors
"${clean_env[@]}" "$bundle/bin/rig" plugins >plugins.txt
rows="$(grep -c '\.so  ' plugins.txt)"
[ "$rows" -eq "$(ls "$bundle/lib/rig/plugins" | wc -l)" ] || { cat plugins.txt; fail "rig plugins lists $rows rows"; }
if grep -v '^KIND' plugins.txt | grep -v -F "  $bundle/lib/rig/plugins/rig-"; then fail "a plugin outside the bundle"; fi
cd "$work"

# rig-bundle-check: OK here; then a changed file and a missing library.
check "${clean_env[@]}" "$bundle/bin/rig-bundle-check" | tee check.txt
grep -q "^rig-bundle-check: OK: $bundle " check.txt
echo "# changed" >>"$bundle/share/rig/experiments/smoke.yaml"
fmt_lib="$(cd "$bundle/lib" && ls libfmt.so.*)"
mv "$bundle/lib/$fmt_lib" "$work/"
expect_code 1 "${clean_env[@]}" "$bundle/bin/rig-bundle-check"
grep -q "changed since packing: share/rig/experiments/smoke.yaml" out.txt || fail "the changed file"
grep -q "missing: lib/$fmt_lib" out.txt || fail "the missing file"
grep -Eq "$fmt_lib (resolves to .* instead of the bundle's copy|is missing from the bundle's lib/).*; needed by bin/rig and [0-9]+ other files" \
  out.txt || fail "the library resolved elsewhere"
mv "$work/$fmt_lib" "$bundle/lib/"
sed -i '$d' "$bundle/share/rig/experiments/smoke.yaml"
# A library older than the files that need it: a libz.so.1 without ZLIB_1.2.3.5.
if command -v cc >/dev/null; then
  mv "$bundle/lib/libz.so.1" "$work/libz.so.1"
  echo 'int rig_old_zlib(void) { return 0; }' >old_zlib.c
  printf 'ZLIB_1.0 { global: rig_old_zlib; local: *; };\n' >old_zlib.map
  cc -shared -fPIC -Wl,-soname,libz.so.1 -Wl,--version-script=old_zlib.map -o "$bundle/lib/libz.so.1" old_zlib.c
  expect_code 1 "${clean_env[@]}" "$bundle/bin/rig-bundle-check"
  grep -Eq "the bundle's lib/libz\.so\.1 is too old: it lacks ZLIB_[0-9.]+; needed by lib/rig/plugins/rig-data_layer-idx_images\.so" \
    out.txt || fail "the library too old"
  mv "$work/libz.so.1" "$bundle/lib/libz.so.1"
fi
check "${clean_env[@]}" "$bundle/bin/rig-bundle-check" >/dev/null

# A bare node: a chroot with only glibc, libgcc_s and libstdc++ (and /proc, where
# rig finds itself, and /dev). Needs root and a private mount namespace.
jail="$work/jail"
mkdir -p "$jail/proc" "$jail/dev"
in_jail() {  # COMMAND...: run in the chroot, with /proc and /dev mounted for it alone
  env -i PATH=/usr/bin:/bin unshare --mount --propagation private -- sh -c \
    'mount -t proc proc "$1/proc" && mount --bind /dev "$1/dev" && exec "$0" "$@"' \
    "$(command -v chroot)" "$jail" "$@"
}
if [ "$(id -u)" -ne 0 ] ||
  ! unshare --mount --propagation private sh -c \
    'mount -t proc proc "$1/proc" && mount --bind /dev "$1/dev"' _ "$jail" 2>/dev/null; then
  echo "bundle ok (the bare-node run needs root, unshare and mount; skipped)"
  exit 0
fi
interpreter="$(readelf -l "$bundle/bin/rig" | sed -n 's/.*interpreter: \(.*\)\]$/\1/p')"
for lib in "$interpreter" $(ldd "$bundle/bin/rig" |
  awk '$1 ~ /^(libc|libm|libstdc\+\+|libgcc_s)\.so/ && $2 == "=>" {print $3}'); do
  mkdir -p "$jail$(dirname "$lib")"
  cp -L "$lib" "$jail$lib"
done
mv "$bundle" "$jail/rig"
echo "+ chroot (glibc, libgcc_s, libstdc++ only) /rig/bin/rig run smoke"
in_jail /rig/bin/rig run /rig/share/rig/experiments/smoke.yaml --logdir /runs/smoke >jail.log 2>&1 ||
  { cat jail.log; fail "the bundle does not train on a bare node"; }
grep -q "Final train loss [0-9.]* is below target_loss" jail.log || { cat jail.log; fail "smoke in the chroot"; }
test -f "$jail/runs/smoke/checkpoints/ckpt-300/model.safetensors"

# rig-bundle-check on that node, given the tools it runs on (bash, coreutils,
# sed, awk, ldd): all holds but the mpi plugin, as the node has no Open MPI.
mkdir -p "$jail/usr/bin"
ln -s usr/bin "$jail/bin"  # ldd starts with #!/bin/bash
for tool in bash env dirname readlink awk sed sort wc sha256sum ldd; do
  binary="$(readlink -f "$(command -v "$tool")")"
  cp "$binary" "$jail/usr/bin/$tool"
  for lib in $(ldd "$binary" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'); do
    mkdir -p "$jail$(dirname "$lib")"
    [ -e "$jail$lib" ] || cp -L "$lib" "$jail$lib"
  done
done
want=0
[ ! -f "$jail/rig/lib/rig/plugins/rig-communicator-mpi.so" ] || want=1
echo "+ chroot (no Open MPI) /rig/bin/rig-bundle-check (expect exit $want)"
expect_code "$want" in_jail /rig/bin/rig-bundle-check
if [ "$want" -eq 1 ]; then
  grep -Eq "this machine lacks libmpi.so.40 \(Open MPI 4.x.*; needed by lib/rig/plugins/rig-communicator-mpi.so( and [0-9]+ other files)?$" out.txt ||
    fail "rig-bundle-check does not name the missing Open MPI"
  [ "$(grep -c '^  ' out.txt)" -eq 1 ] || fail "problems other than the missing Open MPI"
fi
echo "bundle ok (also in a chroot holding only glibc, libgcc_s and libstdc++)"
