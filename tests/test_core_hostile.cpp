// Hostile sizes and files at the core level: element counts and byte counts that overflow, and
// files that are not regular files (issue 16); JSON nested too deep to print, and write errors that
// carry the system's reason (issue 28).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "core/fileio.h"
#include "core/json.h"
#include "core/serialize.h"
#include "core/tensor.h"
#include "temp_dir.h"

using namespace seqgrad;

namespace {
using seqgrad::testing::temp_path;
}  // namespace

TEST_CASE("hostile sizes: an element or byte count that overflows is an error, never a wrapped size") {
  // 4287621595510868754 * 16 wraps to 2 in int64: it once sized a 2-element buffer that fill() overran
  CHECK_THROWS_WITH_AS(empty({4287621595510868754, 16}), doctest::Contains("needs more bytes than size_t can count"),
                       ShapeError);
  CHECK_THROWS_AS(zeros({int64_t{1} << 62, 4, 3}), ShapeError);
  CHECK_THROWS_AS(from_vector(std::vector<float>(2), {4287621595510868754, 16}), ShapeError);
  // A zero dimension makes the tensor empty, however large the others are.
  CHECK(empty({int64_t{1} << 62, 0}, {.dtype = DType::f64}).numel() == 0);
}

TEST_CASE("hostile sizes: a byte count beyond size_t or memory is a clear error naming the shape") {
  // 2^62 float64 elements: the element count fits int64, the byte count (2^65) does not fit size_t
  CHECK_THROWS_WITH_AS(empty({int64_t{1} << 62}, {.dtype = DType::f64}),
                       doctest::Contains("needs more bytes than size_t can count"), ShapeError);
  // 2^60 float32 elements = 4 EiB: aligned_alloc fails; the error names shape and dtype, no bad_alloc
  CHECK_THROWS_WITH_AS(empty({int64_t{1} << 60}), doctest::Contains("out of memory allocating"), Error);
  CHECK_THROWS_WITH_AS(empty({int64_t{1} << 60}), doctest::Contains("float32 tensor of shape (1152921504606846976,)"),
                       Error);
}

TEST_CASE("hostile files: checkpoints must be regular files; a FIFO never blocks the reader") {
  const std::string fifo = temp_path("fifo.safetensors");
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(load_tensors(fifo), doctest::Contains("is a FIFO (named pipe), expected a regular file"),
                       IOError);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  std::filesystem::remove(fifo);

  const std::string dir = temp_path("dir.safetensors");
  std::filesystem::create_directories(dir);
  CHECK_THROWS_WITH_AS(load_tensors(dir), doctest::Contains("is a directory, expected a regular file"), IOError);
  std::filesystem::remove(dir);
  CHECK_THROWS_WITH_AS(read_regular_file("/dev/null"), doctest::Contains("'/dev/null' is a character device"),
                       IOError);

  // a symlink loop: the OS's reason and the path, as an IOError (not a std::filesystem error)
  const std::string loop = temp_path("loop.safetensors");
  std::filesystem::remove(loop);
  std::filesystem::create_symlink(loop, loop);
  CHECK_THROWS_WITH_AS(load_tensors(loop), doctest::Contains("Too many levels of symbolic links"), IOError);
  std::filesystem::remove(loop);
}

TEST_CASE("hostile JSON: nesting beyond the limit is an error naming the source; previews never recurse") {
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  CHECK_THROWS_WITH_AS(parse_json(deep, "checkpoint a.safetensors: config"),
                       "checkpoint a.safetensors: config: JSON nested deeper than 64 levels", IOError);
  const std::string at_limit = std::string(64, '[') + std::string(64, ']'), over = "[" + at_limit + "]";
  CHECK(parse_json(at_limit, "x").is_array());
  CHECK_THROWS_AS(parse_json(over, "x"), IOError);
  CHECK_THROWS_WITH_AS(parse_json("{\"a\": ", "metrics.jsonl"), doctest::Contains("metrics.jsonl: not valid JSON"),
                       IOError);
  // a value built without the limit (nlohmann's parser itself does not recurse) still previews in one step
  const nlohmann::json value = nlohmann::json::parse(deep);
  CHECK(json_preview(value) == "an array of 1 item");
  CHECK(json_preview(nlohmann::json::parse(R"({"a": 1, "b": [2]})")) == "an object of 2 keys");
  CHECK(json_preview(nlohmann::json(std::string(100, 'x')), 4) == "\"xxxx\"... (100 bytes)");
  CHECK(json_preview(nlohmann::json(1e300)) == "1e+300");
  // bytes that are not UTF-8, and a two-byte character cut by max_chars, preview as U+FFFD (dump()
  // throws on them; found by tests/fuzz/fuzz_subword)
  CHECK(json_preview(nlohmann::json(std::string("a\xff"))) == "\"a\xef\xbf\xbd\"");
  CHECK(json_preview(nlohmann::json(std::string("ab\xc3\xa4" "c")), 3) == "\"ab\xef\xbf\xbd\"... (5 bytes)");
}

TEST_CASE("hostile files: write errors carry the system's reason") {
  // /dev/full: every write fails with ENOSPC, as on a full disk
  CHECK_THROWS_WITH_AS(append_line("/dev/full", "{}"),
                       "append_line: cannot write to '/dev/full': No space left on device", IOError);
  const std::string missing = temp_path("no_such_folder") + "/out.json";
  CHECK_THROWS_WITH_AS(write_file_atomic(missing, "{}"), doctest::Contains("No such file or directory"), IOError);
  if (::geteuid() == 0) {
    MESSAGE("SKIP: a read-only folder: root writes into it anyway");
    return;
  }
  const std::string read_only = temp_path("read_only");
  std::filesystem::create_directories(read_only);
  std::filesystem::permissions(read_only, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  CHECK_THROWS_WITH_AS(write_file_atomic(read_only + "/out.json", "{}"), doctest::Contains("Permission denied"),
                       IOError);
  std::filesystem::permissions(read_only, std::filesystem::perms::owner_all);
  std::filesystem::remove_all(read_only);
}
