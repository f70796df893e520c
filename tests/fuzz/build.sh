#!/usr/bin/env bash
# Builds the libFuzzer targets into build-fuzz/ (or $BUILD) with clang: every library is
# instrumented for coverage (-fsanitize=fuzzer-no-link) and built with ASan + UBSan, at OSS-Fuzz's
# -O1 -gline-tables-only (symbolized stacks, a quicker build than -O2 -g); the main build (g++,
# build/) is not touched. With SentencePiece and without ONNX: the subword target needs the
# SentencePiece plugin, which an ASan build loads without RTLD_DEEPBIND, and that is only safe
# without the ONNX export's protobuf in the process (models/meson.build).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-fuzz}
if [ ! -f "$BUILD/build.ninja" ]; then
  CC=clang CXX=clang++ meson setup "$BUILD" --buildtype=plain -Dcuda=disabled -Dfuzz=enabled \
    -Donednn=disabled -Donnx=disabled -Dmpi=disabled -Dsentencepiece=enabled \
    -Db_sanitize=address,undefined -Db_lundef=false \
    -Dcpp_args="-O1 -gline-tables-only -fsanitize=fuzzer-no-link" >/dev/null
fi
ninja -C "$BUILD" -j "${JOBS:-2}" tests/fuzz/fuzz_safetensors tests/fuzz/fuzz_checkpoint tests/fuzz/fuzz_corpus \
  tests/fuzz/fuzz_tokenizer tests/fuzz/fuzz_subword tests/fuzz/fuzz_request models/libseqgrad_sentencepiece.so
# issue 28's 200,000-deep JSON, per target (400 KB each: generated, not kept in the repository)
/usr/bin/python3 tests/fuzz/make_regressions.py "$BUILD/fuzz-regressions"
