#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds a user's program against it with
# pkg-config, as someone writing their own training program would.
set -euo pipefail
build=$(realpath "${1:-build}")
src=$(dirname "$(realpath "$0")")
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
meson install -C "$build" --destdir "$prefix" --quiet >/dev/null
root="$prefix$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c \
  'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')"
pc_dir=$(dirname "$(find "$root" -name seqgrad.pc | head -n 1)")
export PKG_CONFIG_PATH="$pc_dir" PKG_CONFIG_SYSROOT_DIR="$prefix"
# shellcheck disable=SC2046
c++ -std=c++20 -O1 "$src/train_xor.cpp" -o "$prefix/train_xor" $(pkg-config --cflags --libs seqgrad) \
  -Wl,-rpath,"$(dirname "$(find "$root" -name 'libseqgrad.so' | head -n 1)")"
"$prefix/train_xor"
echo "install: 1 passed, 0 failed"
