// Tests for core/safetensors (round trips, golden bytes, every malformation, fuzzing by truncation
// and byte flips) and core/fileio (atomic replace, failure leaves the old file, appends).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "core/fileio.h"
#include "core/safetensors.h"
#include "temp_dir.h"

namespace st = seqgrad::safetensors;
namespace fs = std::filesystem;
using seqgrad::IOError;
using seqgrad::ValueError;

namespace {

// The little-endian bytes of trivially copyable values (the test host is little-endian, as the
// format; checked below).
template <typename T>
std::string le_bytes(std::initializer_list<T> values) {
  static_assert(std::endian::native == std::endian::little);
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

std::string u64_le(std::uint64_t value) { return le_bytes<std::uint64_t>({value}); }

// A file from a header written by hand: length prefix + header + data (no padding needed to parse).
std::string make_file(std::string_view header, std::string_view data = {}) {
  return u64_le(header.size()) + std::string(header) + std::string(data);
}

st::File sample_file() {
  st::File file;
  file.metadata = {{"format", "seqgrad"}, {"step", "42"}, {"note", "quotes \" and ünïcode"}};
  file.tensors["weight"] = {"F32", {2, 3}, le_bytes<float>({1.f, -2.5f, 0.f, 3.25e-3f, 1e30f, -0.f})};
  file.tensors["bias"] = {"F64", {3}, le_bytes<double>({0.1, -1e-300, 7.0})};
  file.tensors["ids"] = {"I64", {2}, le_bytes<std::int64_t>({INT64_MIN, 123456789012345})};
  file.tensors["mask"] = {"BOOL", {4}, std::string("\x01\x00\x00\x01", 4)};
  file.tensors["empty"] = {"F32", {0}, ""};
  file.tensors["scalar"] = {"F64", {}, le_bytes<double>({2.5})};
  return file;
}

// Parses `bytes` and requires the only possible failure to be an IOError; a file that loads must
// survive another serialize/parse round trip unchanged.
bool loads_or_rejects(std::string_view bytes) {
  try {
    st::File file = st::parse(bytes, "fuzz.safetensors");
    CHECK(st::parse(st::serialize(file), "again") == file);
    return true;
  } catch (const IOError&) {
    return false;
  }
}

using seqgrad::testing::TempDir;

}  // namespace

TEST_CASE("safetensors: round trip of every kind of entry, with metadata") {
  st::File file = sample_file();
  std::string bytes = st::serialize(file);
  CHECK(st::parse(bytes, "memory") == file);
  CHECK(st::serialize(st::parse(bytes, "memory")) == bytes);  // writing is deterministic

  TempDir dir;
  st::save(dir.file("model.safetensors"), file);
  CHECK(st::load(dir.file("model.safetensors")) == file);
  CHECK(seqgrad::read_file(dir.file("model.safetensors")) == bytes);
}

TEST_CASE("safetensors: layout follows the reference writer and keeps data aligned") {
  std::string bytes = st::serialize(sample_file());
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  CHECK(header_size % 8 == 0);
  std::string header = bytes.substr(8, header_size);
  // Descending alignment (I64 > F64 > F32 > BOOL), then by name; metadata first.
  std::vector<std::string> order = {"__metadata__", "\"ids\"", "\"bias\"", "\"scalar\"",
                                    "\"empty\"", "\"weight\"", "\"mask\""};
  std::size_t last = 0;
  for (const std::string& key : order) {
    std::size_t at = header.find(key);
    REQUIRE_MESSAGE(at != std::string::npos, key);
    CHECK_MESSAGE(at >= last, key);
    last = at;
  }
}

TEST_CASE("safetensors: golden bytes of hand-built files") {
  SUBCASE("no tensors, no metadata: {} padded with six spaces") {
    std::string expected = std::string("\x08\0\0\0\0\0\0\0", 8) + "{}      ";
    CHECK(st::serialize(st::File{}) == expected);
    CHECK(st::parse(expected, "golden") == st::File{});
  }
  SUBCASE("one F32 tensor whose 64-byte header needs no padding") {
    // {"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}} is 64 bytes (0x40).
    std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    REQUIRE(header.size() == 64);
    std::string data = le_bytes<float>({0.f, 1.f, 2.f, 3.f, 4.f, 5.f});
    std::string expected = std::string("\x40\0\0\0\0\0\0\0", 8) + header + data;
    st::File file;
    file.tensors["attn.0"] = {"F32", {1, 2, 3}, data};
    CHECK(st::serialize(file) == expected);
    CHECK(st::parse(expected, "golden") == file);
  }
  SUBCASE("metadata and two dtypes: padding, order and offsets") {
    // The header is 130 bytes, padded with 6 spaces to 136 (0x88). I32 (align 4) is laid out
    // before U8 (align 1), so both data offsets are aligned.
    std::string header =
        R"({"__metadata__":{"k":"v"},"b":{"dtype":"I32","shape":[],"data_offsets":[0,4]},)"
        R"("a":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})";
    REQUIRE(header.size() == 130);
    header += "      ";
    std::string data = le_bytes<std::int32_t>({-2}) + std::string("\x07\x09", 2);
    std::string expected = std::string("\x88\0\0\0\0\0\0\0", 8) + header + data;
    st::File file;
    file.metadata["k"] = "v";
    file.tensors["a"] = {"U8", {2}, "\x07\x09"};
    file.tensors["b"] = {"I32", {}, le_bytes<std::int32_t>({-2})};
    CHECK(st::serialize(file) == expected);
    CHECK(st::parse(expected, "golden") == file);
  }
  SUBCASE("a reader accepts any tensor order, null metadata and unknown extra fields") {
    std::string header =
        R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[2,3],"extra":[1]},"__metadata__":null,)"
        R"("b":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})";
    st::File file = st::parse(make_file(header, std::string("\x00\x3c\x05", 3)), "golden");
    CHECK(file.metadata.empty());
    CHECK(file.tensors.at("a").data == "\x05");
    CHECK(file.tensors.at("b").data == std::string("\x00\x3c", 2));  // 1.0 in F16
  }
}

TEST_CASE("safetensors: dtype sizes") {
  CHECK(st::dtype_size("BOOL") == 1u);
  CHECK(st::dtype_size("U8") == 1u);
  CHECK(st::dtype_size("I8") == 1u);
  CHECK(st::dtype_size("F16") == 2u);
  CHECK(st::dtype_size("BF16") == 2u);
  CHECK(st::dtype_size("I32") == 4u);
  CHECK(st::dtype_size("F32") == 4u);
  CHECK(st::dtype_size("F64") == 8u);
  CHECK(st::dtype_size("I64") == 8u);
  CHECK_FALSE(st::dtype_size("f32").has_value());
  CHECK_FALSE(st::dtype_size("C64").has_value());
}

TEST_CASE("safetensors: every malformation throws IOError naming the file and the problem") {
  const std::string u8x2 = R"("dtype":"U8","shape":[2])";
  struct Case {
    std::string what;
    std::string bytes;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"shorter than the length field", "\x05\0\0", "too short for the 8-byte header length"},
      {"header length past the end", make_file("{}").substr(0, 9), "runs past the end"},
      {"header length over 100MB", u64_le(100'000'001) + "{}", "exceeds the limit"},
      {"header length 2^64-1", u64_le(UINT64_MAX) + "{}", "exceeds the limit"},
      {"empty header", make_file(""), "starting with '{'"},
      {"header not an object", make_file("[1]"), "starting with '{'"},
      {"leading space", make_file(" {}"), "starting with '{'"},
      {"bad JSON", make_file("{\"a\":"), "not valid JSON"},
      {"NUL then garbage", make_file(std::string("{}\0[", 4)), "NUL byte at offset 2"},
      {"NUL in a string", make_file(std::string("{\"\0\":1}", 6)), "NUL byte at offset 2"},
      {"trailing garbage", make_file("{} x"), "not valid JSON"},
      {"invalid UTF-8", make_file("{\"\xff\":1}"), "not valid JSON"},
      {"comment", make_file("{/*c*/}"), "not valid JSON"},
      {"entry not an object", make_file(R"({"x":[0,1]})"), "tensor 'x': expected an object"},
      {"missing dtype", make_file(R"({"x":{"shape":[],"data_offsets":[0,1]}})", "\1"),
       "tensor 'x': missing \"dtype\""},
      {"missing shape", make_file(R"({"x":{"dtype":"U8","data_offsets":[0,1]}})", "\1"),
       "tensor 'x': missing \"shape\""},
      {"missing offsets", make_file(R"({"x":{"dtype":"U8","shape":[1]}})", "\1"),
       "tensor 'x': missing \"data_offsets\""},
      {"dtype not a string", make_file(R"({"x":{"dtype":4,"shape":[],"data_offsets":[0,4]}})"),
       "\"dtype\" must be a string"},
      {"unknown dtype", make_file(R"({"x":{"dtype":"F128","shape":[],"data_offsets":[0,16]}})"),
       "tensor 'x': unknown dtype \"F128\""},
      {"shape not an array", make_file(R"({"x":{"dtype":"U8","shape":2,"data_offsets":[0,2]}})"),
       "\"shape\" must be an array"},
      {"negative dimension", make_file(R"({"x":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})"),
       "non-negative integers, got -1"},
      {"fractional dimension", make_file(R"({"x":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}})", "\1"),
       "non-negative integers, got 1.0"},
      {"dimension over 2^64", make_file(R"({"x":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,1]}})", "\1"),
       "non-negative integers"},
      {"dimension over int64", make_file(R"({"x":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,1]}})", "\1"),
       "dimension 9223372036854775808 is too large"},
      {"byte count overflows", make_file(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
       "tensor 'x': shape [4294967296, 4294967296] overflows"},
      {"one offset", make_file(R"({"x":{"dtype":"U8","shape":[0],"data_offsets":[0]}})"),
       "must be [begin, end], got 1 numbers"},
      {"offsets reversed", make_file("{\"x\":{" + u8x2 + R"(,"data_offsets":[2,0]}})", "ab"),
       "end before they begin"},
      {"span differs from dtype x shape", make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd"),
       "tensor 'x': dtype F32 with shape [2] is 8 bytes, but data_offsets [0, 4] span 4"},
      {"offsets past the buffer", make_file("{\"x\":{" + u8x2 + R"(,"data_offsets":[0,2]}})", "a"),
       "ends at byte 2 but the data buffer holds only 1 bytes"},
      {"offsets far past the buffer", make_file(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}})", "a"),
       "hole of 18446744073709551614 bytes"},
      {"bytes after the last tensor", make_file("{\"x\":{" + u8x2 + R"(,"data_offsets":[0,2]}})", "abc"),
       "last 1 bytes of the data buffer belong to no tensor"},
      {"hole between tensors", make_file("{\"x\":{" + u8x2 + R"(,"data_offsets":[0,2]},"y":{)" + u8x2 + R"(,"data_offsets":[3,5]}})", "abcde"),
       "tensor 'y': data_offsets [3, 5] leave a hole of 1 bytes"},
      {"overlapping tensors", make_file("{\"x\":{" + u8x2 + R"(,"data_offsets":[0,2]},"y":{)" + u8x2 + R"(,"data_offsets":[1,3]}})", "abc"),
       "tensor 'y': data_offsets [1, 3] overlap tensor 'x' [0, 2]"},
      {"aliased tensors", make_file("{\"x\":{" + u8x2 + R"(,"data_offsets":[0,2]},"y":{)" + u8x2 + R"(,"data_offsets":[0,2]}})", "ab"),
       "overlap tensor 'x'"},
      {"duplicate tensor name", make_file("{\"x\":{" + u8x2 + R"(,"data_offsets":[0,2]},"x":{)" + u8x2 + R"(,"data_offsets":[2,4]}})", "abcd"),
       "tensor 'x' is declared twice"},
      {"duplicate field", make_file(R"({"x":{"dtype":"U8","dtype":"I8","shape":[],"data_offsets":[0,1]}})", "a"),
       "key \"dtype\" appears twice"},
      {"metadata not an object", make_file(R"({"__metadata__":"v"})"), "\"__metadata__\" must be an object"},
      {"metadata value not a string", make_file(R"({"__metadata__":{"k":1}})"),
       "\"__metadata__\" value of 'k' must be a string"},
      {"deep nesting", make_file(std::string(1, '{') + "\"a\":" + std::string(5000, '[') + std::string(5000, ']') + "}"),
       "nests deeper"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    CHECK_THROWS_WITH_AS(st::parse(c.bytes, "bad.safetensors"), doctest::Contains(c.message),
                         IOError);
    CHECK_THROWS_WITH_AS(st::parse(c.bytes, "bad.safetensors"),
                         doctest::Contains("'bad.safetensors'"), IOError);
  }
}

TEST_CASE("safetensors: serialize rejects entries it could not write faithfully") {
  auto file_with = [](std::string name, st::Entry entry) {
    st::File file;
    file.tensors[std::move(name)] = std::move(entry);
    return file;
  };
  CHECK_THROWS_WITH_AS(st::serialize(file_with("w", {"F32", {2}, "abc"})),
                       doctest::Contains("tensor 'w': dtype F32 with shape [2] needs 8 bytes, but data holds 3"),
                       ValueError);
  CHECK_THROWS_WITH_AS(st::serialize(file_with("w", {"Q4", {1}, "a"})),
                       doctest::Contains("tensor 'w': unknown dtype \"Q4\""), ValueError);
  CHECK_THROWS_WITH_AS(st::serialize(file_with("w", {"U8", {-1}, ""})),
                       doctest::Contains("tensor 'w': shape [-1] has a negative dimension"),
                       ValueError);
  CHECK_THROWS_WITH_AS(st::serialize(file_with("__metadata__", {"U8", {}, "a"})),
                       doctest::Contains("reserved for metadata"), ValueError);
  CHECK_THROWS_WITH_AS(st::serialize(file_with("bad\xff", {"U8", {}, "a"})),
                       doctest::Contains("not valid UTF-8"), ValueError);
  st::File bad_metadata;
  bad_metadata.metadata["k"] = "\xc3";
  CHECK_THROWS_AS(st::serialize(bad_metadata), ValueError);
}

TEST_CASE("safetensors fuzz: every truncation of a valid file is rejected") {
  st::File file;
  file.metadata["k"] = "v";
  file.tensors["a"] = {"F32", {2}, le_bytes<float>({1.f, 2.f})};
  file.tensors["b"] = {"U8", {3}, "xyz"};
  file.tensors["c"] = {"I64", {0}, ""};
  const std::string bytes = st::serialize(file);
  REQUIRE(loads_or_rejects(bytes));
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    CAPTURE(length);
    CHECK_FALSE(loads_or_rejects(std::string_view(bytes).substr(0, length)));
  }
}

TEST_CASE("safetensors fuzz: byte flips either load or throw IOError") {
  const std::string bytes = st::serialize(sample_file());
  std::size_t loaded = 0;
  std::size_t rejected = 0;
  auto try_flip = [&](std::size_t position, unsigned char mask) {
    std::string mutated = bytes;
    mutated[position] = static_cast<char>(mutated[position] ^ mask);
    CAPTURE(position);
    CAPTURE(static_cast<int>(mask));
    (loads_or_rejects(mutated) ? loaded : rejected) += 1;
  };
  // Every single-bit flip of the whole file, length field included.
  for (std::size_t position = 0; position < bytes.size(); ++position)
    for (int bit = 0; bit < 8; ++bit) try_flip(position, static_cast<unsigned char>(1u << bit));
  // Random whole-byte changes with a fixed seed.
  std::mt19937 rng(20240521);
  std::uniform_int_distribution<std::size_t> pick_position(0, bytes.size() - 1);
  std::uniform_int_distribution<int> pick_mask(1, 255);
  for (int trial = 0; trial < 4000; ++trial)
    try_flip(pick_position(rng), static_cast<unsigned char>(pick_mask(rng)));
  // Both outcomes occur: flips in the data buffer load, flips in the structure are caught.
  CHECK(loaded > 0);
  CHECK(rejected > 0);
}

TEST_CASE("safetensors: load names the path when the file is missing") {
  TempDir dir;
  CHECK_THROWS_WITH_AS(st::load(dir.file("absent.safetensors")),
                       doctest::Contains("absent.safetensors"), IOError);
}

TEST_CASE("write_file_atomic: writes, replaces, and leaves no temporary files") {
  TempDir dir;
  const std::string path = dir.file("out.bin");
  seqgrad::write_file_atomic(path, std::string("first\0with nul", 14));
  CHECK(seqgrad::read_file(path) == std::string("first\0with nul", 14));
  seqgrad::write_file_atomic(path, "second");
  CHECK(seqgrad::read_file(path) == "second");
  seqgrad::write_file_atomic(path, "");
  CHECK(seqgrad::read_file(path).empty());
  CHECK(dir.entry_count() == 1);
}

TEST_CASE("write_file_atomic: a failure keeps the previous file and names the path") {
  TempDir dir;
  const std::string path = dir.file("keep.bin");
  seqgrad::write_file_atomic(path, "previous");

  SUBCASE("the target is a directory") {
    const std::string sub = dir.file("subdir");
    fs::create_directory(sub);
    CHECK_THROWS_WITH_AS(seqgrad::write_file_atomic(sub, "x"), doctest::Contains(sub.c_str()), IOError);
    CHECK(fs::is_directory(sub));
    CHECK(dir.entry_count() == 2);  // keep.bin and subdir: the temporary file is gone
  }
  SUBCASE("the directory does not exist") {
    const std::string missing = dir.file("no/such/dir/file.bin");
    CHECK_THROWS_WITH_AS(seqgrad::write_file_atomic(missing, "x"),
                         doctest::Contains("no/such/dir/file.bin': No such file or directory"),
                         IOError);
  }
  SUBCASE("the write itself fails midway (file size limit)") {
    // RLIMIT_FSIZE makes write(2) fail with EFBIG even for root; SIGXFSZ must be ignored.
    rlimit old_limit{};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
    auto old_handler = signal(SIGXFSZ, SIG_IGN);
    rlimit small = old_limit;
    small.rlim_cur = 1024;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::string what;
    try {
      seqgrad::write_file_atomic(path, std::string(4096, 'n'));
    } catch (const IOError& e) {
      what = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &old_limit);
    signal(SIGXFSZ, old_handler);
    CHECK(what.find(path) != std::string::npos);
    CHECK(what.find("File too large") != std::string::npos);
    CHECK(dir.entry_count() == 1);
  }
  SUBCASE("the directory is not writable") {
    if (::geteuid() == 0) return;  // root ignores permissions; the cases above cover failure
    fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THROWS_WITH_AS(seqgrad::write_file_atomic(path, "new"), doctest::Contains(path.c_str()),
                         IOError);
    fs::permissions(dir.path, fs::perms::owner_all);
  }
  CHECK(seqgrad::read_file(path) == "previous");
}

TEST_CASE("read_file: missing files and directories throw IOError naming the path") {
  TempDir dir;
  const std::string missing = dir.file("missing.txt");
  CHECK_THROWS_WITH_AS(seqgrad::read_file(missing),
                       doctest::Contains((missing + "': No such file or directory").c_str()), IOError);
  CHECK_THROWS_WITH_AS(seqgrad::read_file(dir.path.string()),
                       doctest::Contains((dir.path.string() + "': Is a directory").c_str()), IOError);
}

TEST_CASE("append_line: one record per line, appended") {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  seqgrad::append_line(path, R"({"step":1,"loss":2.5})");
  seqgrad::append_line(path, R"({"step":2,"loss":2.25})");
  CHECK(seqgrad::read_file(path) == "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"loss\":2.25}\n");
  CHECK_THROWS_WITH_AS(seqgrad::append_line(path, "two\nlines"), doctest::Contains(path.c_str()),
                       ValueError);
  CHECK_THROWS_WITH_AS(seqgrad::append_line(dir.file("no/dir.jsonl"), "x"),
                       doctest::Contains("no/dir.jsonl"), IOError);
}
