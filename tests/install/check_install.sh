#!/usr/bin/env bash
# Installs the build into a private prefix and builds users' programs against it with pkg-config,
# as someone writing their own program would: custom_op.cpp (a differentiable function of their
# own, gradchecked), float_api.cpp (a program written against the float modules: the attention
# projections read as `attention.w_q.weight`, though they are Quantizable) and every
# examples/*.cpp (train_xor, the smallest training program, and the attention examples, each
# asserting what it shows; run in a scratch folder, where
# 06_visual_attention writes its SVG). Also checks seqgrad.pc: one -I (<prefix>/include, so
# includes read <seqgrad/nn/nn.h>) and no repeated flags; then builds examples/train_xor.cpp with
# CMake through find_package(seqgrad) (tests/install/cmake/CMakeLists.txt) and runs it; last, runs
# the commands of docs/adding-an-op.md, docs/learn.md and docs/attention.md as written. The
# installed `seqgrad` and every program run with a clean environment (no LD_LIBRARY_PATH).
set -euo pipefail
build=$(realpath "${1:-build}")
src=$(dirname "$(realpath "$0")")
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
meson install -C "$build" --destdir "$prefix" --quiet >/dev/null
root="$prefix$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c \
  'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')"
pc_dir=$(dirname "$(find "$root" -name seqgrad.pc | head -n 1)")
# The install is staged (--destdir): prefix= in seqgrad.pc names the build's prefix, so point it at
# the staged one, as a user does for a moved install. The documented line is then used as is: its
# -Wl,-rpath lets the programs run with no LD_LIBRARY_PATH.
pkg_config() { pkg-config --define-variable=prefix="$root" "$@"; }
export PKG_CONFIG_PATH="$pc_dir"
cflags=$(pkg_config --cflags seqgrad)
libs=$(pkg_config --libs seqgrad)
fail() { echo "install: $*" >&2; exit 1; }
[[ "$cflags" != *"/include/seqgrad"* ]] || fail "seqgrad.pc puts include/seqgrad on the include path: $cflags"
[[ $(tr ' ' '\n' <<<"$(pkg_config --libs --static seqgrad)" | grep -c -- '-fopenmp') -le 1 ]] ||
  fail "seqgrad.pc repeats -fopenmp: $(pkg_config --libs --static seqgrad)"
! grep -rEn '#\s*include\s+"(core|ops|dist|nn|optim|models|tools)/' "$root/include/seqgrad" ||
  fail "installed headers still include by folder (\"core/...\"): they need <seqgrad/...>"
# The installed program starts with an empty environment: it finds libseqgrad.so through its
# $ORIGIN-relative run path, wherever the prefix lies.
env -i "$root/bin/seqgrad" info >"$prefix/info.log" 2>&1 ||
  { cat "$prefix/info.log" >&2; fail "the installed seqgrad does not start in a clean environment"; }
examples=$(realpath "$src/../../examples")
programs=("$src/custom_op.cpp" "$src/float_api.cpp" "$examples"/*.cpp)
# Compile two at a time (the compiles take longer than the programs run), then run them in order.
compile() {
  # shellcheck disable=SC2086
  c++ -std=c++20 -O1 "$1" -o "$prefix/bin_$(basename "$1" .cpp)" $cflags $libs ||
    { echo "install: $1 does not compile against the installed headers" >&2; return 1; }
}
export -f compile
export prefix cflags libs
printf '%s\0' "${programs[@]}" | xargs -0 -n 1 -P 2 bash -c 'compile "$0"' || fail "a program failed to compile"
mkdir "$prefix/run"
export SEQGRAD_DATA=$(realpath "$src/../../data")  # 10_fit_translator trains on the bundled Multi30k
passed=0
for program in "${programs[@]}"; do
  name=$(basename "$program" .cpp)
  echo "== $name"
  # a clean environment but for the data folder: the program needs no LD_LIBRARY_PATH
  (cd "$prefix/run" && env -i SEQGRAD_DATA="$SEQGRAD_DATA" "$prefix/bin_$name") ||
    fail "$name failed (its FAIL lines above say which claim)"
  passed=$((passed + 1))
done

# The installed program loads its SentencePiece plugin only from its own prefix: with the installed
# plugin removed from a copy of the prefix, it must not fall back on the build folder's (which is
# right there, at the path the build wrote it), nor on any other absolute path of the build.
build_plugin="$build/models/libseqgrad_sentencepiece.so"
if [ -f "$build_plugin" ]; then
  info=$(env -i "$root/bin/seqgrad" info --json)
  grep -q "\"plugin\":\"$root/" <<<"$info" || fail "the installed seqgrad loads its plugin from outside its prefix: $info"
  cp -a "$root" "$prefix/bare"
  rm -f "$(find "$prefix/bare" -name libseqgrad_sentencepiece.so)"
  bare=$(env -i "$prefix/bare/bin/seqgrad" info --json)
  ! grep -q '"available":true' <<<"$bare" ||
    fail "an installed seqgrad without its plugin loaded another (the build folder's, $build_plugin): $bare"
  rm -rf "$prefix/bare"
  echo "== the installed seqgrad loads the plugin of its own prefix only"
  passed=$((passed + 1))
fi
echo "== CMake: find_package(seqgrad), target_link_libraries(program seqgrad::seqgrad)"
command -v cmake >/dev/null || fail "cmake is not installed (scripts/setup.sh --tests installs it)"
[ -f "$(dirname "$pc_dir")/cmake/seqgrad/seqgradConfig.cmake" ] ||
  fail "no seqgradConfig.cmake beside seqgrad.pc (expected $(dirname "$pc_dir")/cmake/seqgrad/)"
cmake -S "$src/cmake" -B "$prefix/cmake-build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$root" \
  -DSEQGRAD_PROGRAM="$examples/train_xor.cpp" >"$prefix/cmake.log" 2>&1 ||
  { cat "$prefix/cmake.log" >&2; fail "cmake could not configure a find_package(seqgrad) project"; }
cmake --build "$prefix/cmake-build" || fail "the find_package(seqgrad) project does not build"
(cd "$prefix/run" && env -i "$prefix/cmake-build/program") || fail "train_xor built with CMake failed"
passed=$((passed + 1))

# The documents whose commands a user types against an installed seqgrad, run exactly as written
# (tests/install/check_doc_commands.py: every ```sh run block, its ```text sample compared with the
# output), each in an empty folder: docs/adding-an-op.md (an op's plugin built with pkg-config,
# then `seqgrad gradcheck --plugin`), docs/learn.md and docs/attention.md (the attention demo, the
# examples built with pkg-config and run, the tiny preset trained and its attention drawn and
# served, a small Transformer). The staged seqgrad is first on PATH; pkg-config reads a copy of
# seqgrad.pc whose prefix= names the staged install, as a user relocates one, so the programs get
# its -I, -L and run path and start without LD_LIBRARY_PATH.
mkdir "$prefix/pkgconfig"
sed "s|^prefix=.*|prefix=$root|" "$pc_dir/seqgrad.pc" >"$prefix/pkgconfig/seqgrad.pc"
failed=()
for doc in adding-an-op learn attention; do
  echo "== docs/$doc.md"
  if env -u LD_LIBRARY_PATH PATH="$root/bin:$PATH" PKG_CONFIG_PATH="$prefix/pkgconfig" \
    /usr/bin/python3 "$src/check_doc_commands.py" "$(realpath "$src/../../docs/$doc.md")"; then
    passed=$((passed + 1))
  else
    failed+=("docs/$doc.md")
  fi
done
[ ${#failed[@]} -eq 0 ] || fail "${failed[*]}: not runnable as written (the FAIL lines above say where)"
echo "install: $passed passed, 0 failed"
