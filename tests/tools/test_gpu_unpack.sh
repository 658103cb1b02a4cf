#!/usr/bin/env bash
# tools/gpu_unpack.sh, the first thing a lent GPU machine runs (a broken unpack wastes that
# session's minutes): a pack made as tools/gpu_bundle.sh makes it (tar | xz) unpacks to the same
# files, modes and symbolic links with tar's xz and with Python's tarfile (ADA_UNPACK_WITH=python:
# that machine may lack xz); a second run leaves an unpacked .gpu as it is; no pack, nothing done.
#   test_gpu_unpack.sh SOURCE_DIR WORK_DIR
set -euo pipefail
src=$1 work=$2
rm -rf "$work"
mkdir -p "$work/tools" "$work/files/bin" "$work/files/lib/sub"
cp "$src/tools/gpu_unpack.sh" "$work/tools/"
printf '#!/bin/sh\necho ok\n' > "$work/files/bin/tool"
chmod 755 "$work/files/bin/tool"
head -c 300000 /dev/urandom > "$work/files/lib/libx.so.1"
ln -s libx.so.1 "$work/files/lib/libx.so"
echo data > "$work/files/lib/sub/file.txt"
fail() { echo "test_gpu_unpack: $*" >&2; exit 1; }
for how in xz python; do
  rm -rf "$work/.gpu" && mkdir -p "$work/.gpu"
  tar -C "$work/files" -cf - bin lib | xz -T0 -6 > "$work/.gpu/pack.tar.xz"
  if [[ $how == python ]]; then
    (cd "$work" && ADA_UNPACK_WITH=python bash tools/gpu_unpack.sh)
  else
    (cd "$work" && bash tools/gpu_unpack.sh)
  fi
  diff -r --no-dereference "$work/files/bin" "$work/.gpu/bin" || fail "$how: bin/ differs"
  diff -r --no-dereference "$work/files/lib" "$work/.gpu/lib" || fail "$how: lib/ differs"
  [[ -L "$work/.gpu/lib/libx.so" && $(readlink "$work/.gpu/lib/libx.so") == libx.so.1 ]] ||
    fail "$how: the symbolic link did not survive"
  [[ $("$work/.gpu/bin/tool") == ok ]] || fail "$how: bin/tool lost its execute bit"
  # Unpacked already: a second run changes nothing (the marker stays).
  touch "$work/.gpu/bin/marker"
  (cd "$work" && bash tools/gpu_unpack.sh)
  [[ -e "$work/.gpu/bin/marker" ]] || fail "$how: a second run unpacked again"
  echo "test_gpu_unpack: $how: same files"
done
rm -rf "$work/.gpu" && mkdir -p "$work/.gpu"
(cd "$work" && bash tools/gpu_unpack.sh) || fail "without a pack it failed"
[[ -z $(ls "$work/.gpu") ]] || fail "without a pack it wrote something"
echo "test_gpu_unpack: all checks passed"
