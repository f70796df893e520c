// Tests for core/serialize: Tensor <-> safetensors round trips (every dtype, views written
// contiguously, metadata), and the errors for dtypes seqgrad has no type for.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "core/serialize.h"
#include "ops/ops.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
namespace st = seqgrad::safetensors;
using namespace seqgrad;

namespace {

using seqgrad::testing::temp_path;

template <class T>
void check_same_values(const Tensor& got, const Tensor& want) {
  CHECK(got.dtype() == want.dtype());
  CHECK(got.shape() == want.shape());
  CHECK(got.to_vector<T>() == want.to_vector<T>());
}

}  // namespace

TEST_CASE("serialize: to_entry writes each dtype's bytes row-major") {
  Tensor f32 = tensor({1.5, -2.0, 0.25}, {.dtype = DType::f32});
  st::Entry e = to_entry(f32);
  CHECK(e.dtype == "F32");
  CHECK(e.shape == std::vector<std::int64_t>{3});
  float values[3];
  REQUIRE(e.data.size() == sizeof(values));
  std::memcpy(values, e.data.data(), sizeof(values));
  CHECK(values[0] == 1.5f);
  CHECK(values[1] == -2.0f);
  CHECK(values[2] == 0.25f);

  CHECK(to_entry(tensor({1.0}, {1}, {.dtype = DType::f64})).dtype == "F64");
  CHECK(to_entry(arange(0, 4)).dtype == "I64");
  st::Entry b = to_entry(from_vector<bool>({true, false, true}, {3}, {.dtype = DType::b8}));
  CHECK(b.dtype == "BOOL");
  CHECK(b.data == std::string("\x01\x00\x01", 3));
}

TEST_CASE("serialize: a round trip through a file keeps every dtype, shape and value") {
  std::map<std::string, Tensor> tensors = {
      {"f32", tensor({0.5, -1.25, 3.0e38, -0.0, 1e-30, 7.0}, {2, 3}, {.dtype = DType::f32})},
      {"f64", tensor({0.1, -1e300, 2.5, 1e-310}, {4}, {.dtype = DType::f64})},
      {"i64", from_vector<int64_t>({INT64_MIN, INT64_MAX, -1, 0}, {2, 2}, {.dtype = DType::i64})},
      {"bool", from_vector<bool>({true, false, false, true}, {2, 1, 2}, {.dtype = DType::b8})},
      {"scalar", scalar_tensor(2.5, {.dtype = DType::f64})},
      {"empty", zeros({0, 3})},
  };
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "120"}};
  std::string path = temp_path("roundtrip.safetensors");
  save_tensors(path, tensors, metadata);
  TensorFile file = load_tensors(path);
  CHECK(file.metadata == metadata);
  REQUIRE(file.tensors.size() == tensors.size());
  check_same_values<float>(file.tensors.at("f32"), tensors.at("f32"));
  check_same_values<double>(file.tensors.at("f64"), tensors.at("f64"));
  check_same_values<int64_t>(file.tensors.at("i64"), tensors.at("i64"));
  check_same_values<bool>(file.tensors.at("bool"), tensors.at("bool"));
  check_same_values<double>(file.tensors.at("scalar"), tensors.at("scalar"));
  CHECK(file.tensors.at("scalar").ndim() == 0);
  CHECK(file.tensors.at("empty").shape() == Shape{0, 3});
  for (const auto& [name, t] : file.tensors) {
    CHECK(t.is_contiguous());
    CHECK_FALSE(t.requires_grad());
  }
  fs::remove(path);
}

TEST_CASE("serialize: non-contiguous tensors are written as their contiguous values") {
  Tensor base = arange(0, 24, 1, {.dtype = DType::f64}).reshape({2, 3, 4});
  std::map<std::string, Tensor> views = {
      {"transposed", base.transpose(0, 2)},             // (4, 3, 2), permuted strides
      {"sliced", base.slice(2, 1, 4, 2)},                // (2, 3, 2), step 2 and an offset
      {"selected", base.select(1, 2)},                   // (2, 4), offset 8
      {"expanded", base.select(0, 1).select(0, 0).expand({3, 4})},  // stride 0
  };
  std::string path = temp_path("views.safetensors");
  save_tensors(path, views);
  TensorFile file = load_tensors(path);
  for (const auto& [name, view] : views) {
    CAPTURE(name);
    bool plain = view.is_contiguous() && view.offset() == 0;
    REQUIRE_FALSE(plain);
    check_same_values<double>(file.tensors.at(name), view);
  }
  // Only the elements the view shows are written.
  CHECK(to_entry(views.at("sliced")).data.size() == 12 * sizeof(double));
  CHECK(file.tensors.at("selected").to_vector<double>() == std::vector<double>{8, 9, 10, 11, 20, 21, 22, 23});
  fs::remove(path);
}

TEST_CASE("serialize: the integer types of int8 inference round-trip as I8, U8 and I32") {
  Tensor i8 = Tensor::empty({2}, {.dtype = DType::i8});
  i8.data<int8_t>()[0] = -128, i8.data<int8_t>()[1] = 127;
  st::Entry e = to_entry(i8);
  CHECK(e.dtype == "I8");
  Tensor back = from_entry(e, "q");
  CHECK(back.dtype() == DType::i8);
  CHECK(back.to(DType::i64).to_vector<int64_t>() == std::vector<int64_t>{-128, 127});
  CHECK(to_entry(zeros({3}, {.dtype = DType::u8})).dtype == "U8");
  CHECK(from_entry(st::Entry{"I32", {1}, std::string(4, '\0')}, "acc").dtype() == DType::i32);
}

TEST_CASE("serialize: from_entry rejects dtypes seqgrad has no type for, naming the tensor and dtype") {
  st::Entry f16{"F16", {2}, std::string("\x00\x3c\x00\xc0", 4)};
  CHECK_THROWS_WITH_AS(from_entry(f16, "encoder.weight"),
                       doctest::Contains("tensor 'encoder.weight' has dtype F16"), IOError);
  CHECK_THROWS_AS(from_entry(st::Entry{"I16", {1}, std::string(2, '\0')}, "ids"), IOError);
  CHECK_THROWS_AS(from_entry(st::Entry{"BF16", {1}, std::string(2, '\0')}, "w"), IOError);

  // Through a file: the message also names the path.
  st::File file;
  file.tensors["half"] = f16;
  file.tensors["ok"] = to_entry(ones({2}));
  std::string path = temp_path("f16.safetensors");
  st::save(path, file);
  try {
    load_tensors(path);
    FAIL("load_tensors accepted an F16 tensor");
  } catch (const IOError& e) {
    std::string message = e.what();
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find("'half'") != std::string::npos);
    CHECK(message.find("F16") != std::string::npos);
  }
  fs::remove(path);
}

TEST_CASE("serialize: bad arguments throw with the tensor's name") {
  CHECK_THROWS_AS(to_entry(Tensor()), ValueError);
  CHECK_THROWS_WITH_AS(save_tensors(temp_path("undefined.safetensors"), {{"missing", Tensor()}}),
                       doctest::Contains("'missing' is undefined"), ValueError);
  CHECK_THROWS_AS(load_tensors(temp_path("does_not_exist.safetensors")), IOError);
  // Non-zero BOOL bytes other than 1 (written by lenient writers) read as true.
  Tensor b = from_entry(st::Entry{"BOOL", {2}, std::string("\x00\x07", 2)}, "mask");
  CHECK(b.to_vector<bool>() == std::vector<bool>{false, true});
}
