#!/usr/bin/env bash
# Builds seqgrad in its own build folder configured for PREFIX and installs it there: the library,
# the headers under PREFIX/include/seqgrad, the `seqgrad` program, seqgrad.pc for pkg-config and
# seqgradConfig.cmake for CMake's find_package(seqgrad).
#
#   scripts/install.sh PREFIX [meson options...]      e.g. scripts/install.sh ~/.local/seqgrad
#
# The folder is build-install/ (SEQGRAD_INSTALL_BUILD overrides it), never build/: the quick start's
# build/ is configured for /usr/local, and `meson setup build --prefix=...` on an existing folder
# would keep that prefix. Packages come from scripts/setup.sh (the quick start's set).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ -z "$1" ] || [[ "$1" == -* ]]; then
  echo "usage: scripts/install.sh PREFIX [meson options...]" >&2
  exit 2
fi
prefix=$(realpath -m "$1")
shift
build=${SEQGRAD_INSTALL_BUILD:-build-install}
scripts/setup.sh "$build" --prefix="$prefix" --libdir=lib "$@"
echo "install: meson install -C $build (prefix $prefix)"
meson install -C "$build" --no-rebuild
cat <<MSG
install: done. Build a program against it with pkg-config:
  export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
  c++ -std=c++20 -O2 app.cpp -o app \$(pkg-config --cflags --libs seqgrad)
The installed $prefix/bin/seqgrad and such programs run without LD_LIBRARY_PATH.
or with CMake: find_package(seqgrad) and target_link_libraries(app seqgrad::seqgrad), configured
with -DCMAKE_PREFIX_PATH="$prefix".
MSG
