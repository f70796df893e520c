// Interop driver for tests/parity/test_safetensors_python.py (seqgrad <-> Python safetensors):
//   safetensors_roundtrip --write OUT   writes the known file below to OUT
//   safetensors_roundtrip IN OUT        loads IN, checks it survives serialize/parse, re-saves it
//                                       to OUT and prints its contents as JSON (data as hex)
// Exit status: 0 on success, 1 on a load/save error (message on stderr), 2 on bad usage.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "core/safetensors.h"

namespace st = seqgrad::safetensors;

namespace {

template <typename T>
std::string bytes_of(std::initializer_list<T> values) {
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

// Mirrored by KNOWN in test_safetensors_python.py: edge values (signed zero, inf, NaN, denormals,
// integer extremes) and edge shapes (scalar, empty, a zero-sized 2-D tensor).
st::File known_file() {
  using F = std::numeric_limits<float>;
  using D = std::numeric_limits<double>;
  st::File file;
  file.metadata = {{"format", "np"}, {"note", "ünïcode \"quoted\" \\ and\ttab"}};
  file.tensors["f32"] = {"F32", {2, 3}, bytes_of<float>({0.5f, -1.25f, F::max(), F::denorm_min(), -0.f, F::infinity()})};
  file.tensors["f64"] = {"F64", {4}, bytes_of<double>({0.1, -D::denorm_min(), 1e300, D::quiet_NaN()})};
  file.tensors["i64"] = {"I64", {2, 2}, bytes_of<std::int64_t>({INT64_MIN, INT64_MAX, -1, 0})};
  file.tensors["i32"] = {"I32", {3}, bytes_of<std::int32_t>({INT32_MIN, 7, INT32_MAX})};
  file.tensors["i8"] = {"I8", {2}, bytes_of<std::int8_t>({-128, 127})};
  file.tensors["u8"] = {"U8", {4}, bytes_of<std::uint8_t>({0, 1, 128, 255})};
  file.tensors["bool"] = {"BOOL", {3}, bytes_of<std::uint8_t>({1, 0, 1})};
  file.tensors["f16"] = {"F16", {2}, bytes_of<std::uint16_t>({0x3c00, 0xc000})};  // 1.0, -2.0
  file.tensors["empty"] = {"F32", {0}, ""};
  file.tensors["empty2d"] = {"I32", {2, 0}, ""};
  file.tensors["scalar"] = {"F64", {}, bytes_of<double>({2.5})};
  return file;
}

std::string hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char byte : bytes) {
    out.push_back(kDigits[byte >> 4]);
    out.push_back(kDigits[byte & 0xf]);
  }
  return out;
}

nlohmann::json describe(const st::File& file) {
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [name, entry] : file.tensors)
    tensors[name] = {{"dtype", entry.dtype}, {"shape", entry.shape}, {"hex", hex(entry.data)}};
  return {{"metadata", file.metadata}, {"tensors", tensors}};
}

int round_trip(const std::string& in, const std::string& out) {
  st::File file = st::load(in);
  if (st::parse(st::serialize(file), "re-serialized " + in) != file) {
    std::fprintf(stderr, "safetensors_roundtrip: %s changed in a serialize/parse round trip\n",
                 in.c_str());
    return 1;
  }
  st::save(out, file);
  if (st::load(out) != file) {
    std::fprintf(stderr, "safetensors_roundtrip: %s reloads differently\n", out.c_str());
    return 1;
  }
  std::printf("%s\n", describe(file).dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s --write OUT | %s IN OUT\n", argv[0], argv[0]);
    return 2;
  }
  try {
    if (std::strcmp(argv[1], "--write") == 0) {
      st::save(argv[2], known_file());
      return 0;
    }
    return round_trip(argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "safetensors_roundtrip: %s\n", e.what());
    return 1;
  }
}
