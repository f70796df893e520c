// Dynamic int8 quantization (ops/quantized.h): the int8 GEMM against the reference loops exactly
// (int32 results), PyTorch's weight and activation quantizers on hand-computed cases, and
// quantized_linear against float32 within the bound its scales imply.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/autograd.h"
#include "ops/ops.h"
#include "ops/quantized.h"

using namespace seqgrad;

namespace {

template <class T>
std::vector<T> random_ints(size_t n, int lo, int hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(gen));
  return v;
}

std::vector<int64_t> ints(const Tensor& t) { return t.to(DType::i64).to_vector<int64_t>(); }

Tensor random_tensor(const Shape& shape, double scale, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, static_cast<float>(scale));
  std::vector<float> v(shape.numel());
  for (float& x : v) x = dist(gen);
  return from_vector(v, shape);
}

}  // namespace

TEST_CASE("int8_gemm_reference: hand-computed u8 · s8ᵀ in int32") {
  // a = [[1, 2], [255, 0]], b = [[1, -1], [-128, 127]]:
  //   c00 = 1 - 2 = -1, c01 = -128 + 254 = 126, c10 = 255, c11 = 255 · -128 = -32640
  const std::vector<uint8_t> a = {1, 2, 255, 0};
  const std::vector<int8_t> b = {1, -1, -128, 127};
  std::vector<int32_t> c(4);
  int8_gemm_reference(2, 2, 2, a.data(), b.data(), c.data());
  CHECK(c == std::vector<int32_t>{-1, 126, 255, -32640});
}

// The int8 weight b (n, k) as a QuantizedWeight with unit scales: kept plain (Int8Use::rows) or
// in the GEMM's packed layout when the backend has one (Int8Use::gemm).
QuantizedWeight unit_weight(const std::vector<int8_t>& b, int64_t n, int64_t k, Int8Use use) {
  Tensor values = Tensor::empty({n, k}, {.dtype = DType::i8});
  std::copy(b.begin(), b.end(), values.data<int8_t>());
  return make_quantized_weight(values, ones({n}), "w", use);
}

Tensor codes(const std::vector<uint8_t>& a, int64_t m, int64_t k) {
  Tensor t = Tensor::empty({m, k}, {.dtype = DType::u8});
  std::copy(a.begin(), a.end(), t.data<uint8_t>());
  return t;
}

std::vector<int32_t> int32s(const Tensor& c) { return {c.data<int32_t>(), c.data<int32_t>() + c.numel()}; }

TEST_CASE("int8_gemm equals the reference exactly, plain and packed, extremes and random shapes") {
  const std::string kernels = int8_gemm_backend();
  MESSAGE("int8 GEMM kernels: " << kernels << ", reduce_range: " << int8_needs_reduce_range());
  if (kernels == "reference") {  // int8_gemm IS the reference here: comparing would prove nothing
    MESSAGE("SKIP: int8_gemm runs the reference loops in this build (no oneDNN, or SEQGRAD_INT8_GEMM=reference): "
            "no second implementation to compare with");
    return;
  }
  SUBCASE("saturating pairs: 255 · -128 summed over k = 1000 (vpmaddubsw would saturate)") {
    const int64_t m = 2, n = 3, k = 1000;
    // only VNNI or the reference give the exact sum; elsewhere reduce_range keeps a below 128
    std::vector<uint8_t> a(m * k, int8_needs_reduce_range() ? 127 : 255);
    std::vector<int8_t> b(n * k, -128);
    std::vector<int32_t> ref(m * n);
    int8_gemm_reference(m, n, k, a.data(), b.data(), ref.data());
    for (Int8Use use : {Int8Use::gemm, Int8Use::rows})
      CHECK(int32s(int8_gemm(codes(a, m, k), unit_weight(b, n, k, use))) == ref);
    CHECK(ref[0] == static_cast<int32_t>(a[0]) * -128 * k);
  }
  SUBCASE("random") {
    const int q_max = int8_needs_reduce_range() ? 127 : 255;
    uint32_t seed = 1;
    for (int64_t m : {1, 3, 17, 64})
      for (int64_t n : {1, 33, 300})
        for (int64_t k : {1, 64, 257}) {
          CAPTURE(m);
          CAPTURE(n);
          CAPTURE(k);
          auto a = random_ints<uint8_t>(m * k, 0, q_max, seed++);
          auto b = random_ints<int8_t>(n * k, -128, 127, seed++);
          std::vector<int32_t> ref(m * n, -7);
          int8_gemm_reference(m, n, k, a.data(), b.data(), ref.data());
          QuantizedWeight plain = unit_weight(b, n, k, Int8Use::rows), packed = unit_weight(b, n, k, Int8Use::gemm);
          CHECK(int32s(int8_gemm(codes(a, m, k), plain)) == ref);
          CHECK(int32s(int8_gemm(codes(a, m, k), packed)) == ref);
          // a packed weight holds its values once, and gives them back unchanged
          CHECK(packed.packed.defined() != packed.values.defined());
          const Tensor back = packed.int8_values();
          CHECK(std::vector<int8_t>(back.data<int8_t>(), back.data<int8_t>() + n * k) == b);
        }
  }
}

TEST_CASE("quantize_weight: PyTorch's symmetric int8 (scale = amax / 127.5, round half to even)") {
  // row 0: amax 1 -> s = 1/127.5; 0.5/s = 63.75 -> 64, 0.25/s = 31.875 -> 32, and -1 · (1/s) is
  //        -127.49999 in float32 (1/s rounds below 127.5) -> -127; torch.quantize_per_channel gives
  //        the same [64, -127, 32]
  // row 1: amax 2 -> s = 2/127.5; 2/s ~ 127.5 -> 127 (rounded or clamped); -0.5/s = -31.875 -> -32; 0 -> 0
  Tensor w = tensor({0.5, -1.0, 0.25, 2.0, -0.5, 0.0}, {2, 3});
  QuantizedWeight q = quantize_weight(w, QScheme::per_channel, "layer");
  CHECK(q.int8_values().dtype() == DType::i8);
  CHECK(ints(q.int8_values()) == std::vector<int64_t>{64, -127, 32, 127, -32, 0});
  REQUIRE(q.scales.numel() == 2);
  CHECK(q.scale(0) == doctest::Approx(1.0 / 127.5).epsilon(1e-7));
  CHECK(q.scale(1) == doctest::Approx(2.0 / 127.5).epsilon(1e-7));
  CHECK(ints(q.row_sums) == std::vector<int64_t>{64 - 127 + 32, 127 - 32});
  // per tensor: one scale 2/127.5 for both rows; 0.5/s = 31.875 -> 32, -1/s = -63.75 -> -64, 0.25/s -> 16
  QuantizedWeight t = quantize_weight(w, QScheme::per_tensor, "layer");
  CHECK(ints(t.int8_values()) == std::vector<int64_t>{32, -64, 16, 127, -32, 0});
  CHECK(t.scales.numel() == 1);
  // an all-zero row keeps a tiny positive scale and zero values
  QuantizedWeight z = quantize_weight(zeros({1, 4}), QScheme::per_channel, "zero");
  CHECK(z.scale(0) > 0);
  CHECK(ints(z.int8_values()) == std::vector<int64_t>{0, 0, 0, 0});
  CHECK(dequantize(q).to_vector<float>()[0] == doctest::Approx(64 / 127.5));
}

TEST_CASE("choose_activation_params: PyTorch's ChooseQuantizationParams for uint8") {
  // [-1, 3]: s = 4/255, z = round(0 - (-1)/s) = round(63.75) = 64
  ActivationParams p = choose_activation_params(-1.0f, 3.0f, false);
  CHECK(p.scale == doctest::Approx(4.0 / 255));
  CHECK(p.zero_point == 64);
  CHECK(p.q_max == 255);
  // reduce_range: 7 bits, s = 4/127, z = round(31.75) = 32
  p = choose_activation_params(-1.0f, 3.0f, true);
  CHECK(p.scale == doctest::Approx(4.0 / 127));
  CHECK(p.zero_point == 32);
  CHECK(p.q_max == 127);
  // all positive: the range is stretched to hold 0, so z = 0
  p = choose_activation_params(2.0f, 5.0f, false);
  CHECK(p.scale == doctest::Approx(5.0 / 255));
  CHECK(p.zero_point == 0);
  // all zero: PyTorch's fallback scale 0.1
  p = choose_activation_params(0.0f, 0.0f, false);
  CHECK(p.scale == doctest::Approx(0.1));
  CHECK(p.zero_point == 0);
}

TEST_CASE("quantized_linear: float32 result within the bound its scales imply") {
  // y_q - y = Σ_k (x̂_k - x_k) ŵ_k + x_k (ŵ_k - w_k) with |x̂ - x| <= s_x / 2 and |ŵ - w| <= s_w / 2,
  // so |y_q - y| <= s_x/2 Σ|ŵ_k| + s_w/2 Σ|x_k| (plus float32 rounding).
  const int64_t rows = 5, in = 96, out = 40;
  Tensor x = random_tensor({rows, in}, 1.0, 11) + 0.3;  // asymmetric range: a non-zero zero point
  Tensor w = random_tensor({out, in}, 0.1, 12);
  Tensor b = random_tensor({out}, 0.1, 13);
  for (QScheme scheme : {QScheme::per_channel, QScheme::per_tensor}) {
    const std::string scheme_name = qscheme_name(scheme);
    CAPTURE(scheme_name);
    QuantizedWeight q = quantize_weight(w, scheme, "proj");
    std::vector<float> yq = quantized_linear(x, q, b).to_vector<float>();
    std::vector<float> yf = linear(x, w, b).to_vector<float>();
    std::vector<float> xv = x.to_vector<float>(), wq = dequantize(q).to_vector<float>();
    double worst = 0;
    for (int64_t r = 0; r < rows; ++r) {
      float x_min = 0, x_max = 0;  // row r's range gives its scale
      for (int64_t k = 0; k < in; ++k) x_min = std::min(x_min, xv[r * in + k]), x_max = std::max(x_max, xv[r * in + k]);
      const float s_x = choose_activation_params(x_min, x_max, int8_needs_reduce_range()).scale;
      for (int64_t n = 0; n < out; ++n) {
        double sum_w = 0, sum_x = 0;
        for (int64_t k = 0; k < in; ++k) sum_w += std::abs(wq[n * in + k]), sum_x += std::abs(xv[r * in + k]);
        const double bound = s_x / 2 * sum_w + q.scale(n) / 2 * sum_x + 1e-5;
        const double err = std::abs(yq[r * out + n] - yf[r * out + n]);
        CHECK(err <= bound);
        worst = std::max(worst, err / bound);
      }
    }
    MESSAGE(scheme_name << ": worst error / bound = " << worst);
  }
}

TEST_CASE("quantized_linear: batched input shape, no bias, and an all-zero input") {
  Tensor w = random_tensor({6, 8}, 0.5, 21);
  QuantizedWeight q = quantize_weight(w, QScheme::per_channel, "proj");
  Tensor x = random_tensor({2, 3, 8}, 1.0, 22);
  Tensor y = quantized_linear(x, q, Tensor());
  CHECK(y.shape() == Shape{2, 3, 6});
  // the leading axes are rows: (2, 3, 8) gives what its (6, 8) view gives
  CHECK(quantized_linear(x.reshape({6, 8}), q, Tensor()).to_vector<float>() == y.to_vector<float>());
  // zero input: scale 0.1, zero point 0 -> exactly the bias
  Tensor b = tensor({1, 2, 3, 4, 5, 6});
  CHECK(quantized_linear(zeros({1, 8}), q, b).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("quantized_linear: each row quantized with its own range (hand-computed)") {
  // W = I (2, 2) int8 with unit scales, so y[m] is row m's dequantized codes: s_x[m] (xq - z_x[m]).
  // row 0 [-1, 3]: s = 4/255, z = round(63.75) = 64; -1/s = -63.75 -> -64 + 64 = 0, 3/s = 191.25
  //   -> 191 + 64 = 255; y = s (0 - 64) = -256/255, s (255 - 64) = 764/255
  // row 1 [0.5, 0.2]: its own range [0, 0.5]: s = 0.5/255, z = 0; 0.5/s = 255, 0.2/s = 102;
  //   y = 0.5, 0.2. With row 0's scale (one range for both rows, per tensor) it would be
  //   0.5/s = 31.875 -> 32 + 64 = 96: y = 128/255 = 0.50196, and 0.2/s = 12.75 -> 13: y = 0.20392.
  // With 7-bit codes (reduce_range): row 0 s = 4/127, z = round(31.75) = 32, codes 0 and 95 + 32:
  // y = -128/127, 380/127; row 1 s = 0.5/127, 0.2/s = 50.8 -> 51: y = 0.5, 25.5/127.
  const QuantizedWeight eye = unit_weight({1, 0, 0, 1}, 2, 2, Int8Use::gemm);
  const Tensor x = tensor({-1.0, 3.0, 0.5, 0.2}, {2, 2});
  const std::vector<float> y = quantized_linear(x, eye, Tensor()).to_vector<float>();
  const bool seven = int8_needs_reduce_range();
  CHECK(y[0] == doctest::Approx(seven ? -128.0 / 127 : -256.0 / 255).epsilon(1e-6));
  CHECK(y[1] == doctest::Approx(seven ? 380.0 / 127 : 764.0 / 255).epsilon(1e-6));
  CHECK(y[2] == doctest::Approx(0.5).epsilon(1e-6));
  CHECK(y[3] == doctest::Approx(seven ? 25.5 / 127 : 0.2).epsilon(1e-6));
}

TEST_CASE("quantized_linear: a row's result is the same bit for bit alone and in any batch") {
  // rows of very different ranges (scaled 0.01 to 100): one range for the whole batch would round
  // the small rows to a few codes, so batch and alone would differ
  const int64_t rows = 13, in = 70, out = 33;
  Tensor x = random_tensor({rows, in}, 1.0, 51);
  std::vector<float> xv = x.to_vector<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < in; ++k) xv[r * in + k] = xv[r * in + k] * std::pow(10.0f, static_cast<float>(r % 5 - 2)) + 0.1f * static_cast<float>(r % 3);
  x = from_vector(xv, {rows, in});
  Tensor b = random_tensor({out}, 0.1, 52);
  for (QScheme scheme : {QScheme::per_channel, QScheme::per_tensor}) {
    const QuantizedWeight q = quantize_weight(random_tensor({out, in}, 0.1, 53), scheme, "proj");
    const std::vector<float> batch = quantized_linear(x, q, b).to_vector<float>();
    for (int64_t r = 0; r < rows; ++r) {
      CAPTURE(r);
      const std::vector<float> alone = quantized_linear(x.slice(0, r, r + 1), q, b).to_vector<float>();
      CHECK(alone == std::vector<float>(batch.begin() + r * out, batch.begin() + (r + 1) * out));
    }
    // the same rows in another order and beside other rows: each row unchanged
    std::vector<float> reversed(xv.size());
    for (int64_t r = 0; r < rows; ++r)
      std::copy(xv.begin() + r * in, xv.begin() + (r + 1) * in, reversed.begin() + (rows - 1 - r) * in);
    const Tensor reordered = from_vector(reversed, {rows, in});
    const std::vector<float> again = quantized_linear(reordered, q, b).to_vector<float>();
    for (int64_t r = 0; r < rows; ++r)
      CHECK(std::vector<float>(again.begin() + (rows - 1 - r) * out, again.begin() + (rows - r) * out) ==
            std::vector<float>(batch.begin() + r * out, batch.begin() + (r + 1) * out));
  }
}

TEST_CASE("quantized_linear: inference only, and bad input names the op and the module") {
  QuantizedWeight q = quantize_weight(random_tensor({4, 3}, 1.0, 31), QScheme::per_channel, "decoder.out");
  Tensor x = random_tensor({2, 3}, 1.0, 32).requires_grad_();
  Tensor y = quantized_linear(x, q, Tensor());
  CHECK_THROWS_WITH_AS(y.sum().backward(),
                       doctest::Contains("quantized_linear (decoder.out): backward is not supported"), Error);
  CHECK_THROWS_WITH_AS(quantized_linear(zeros({2, 5}), q, Tensor()),
                       doctest::Contains("quantized_linear (decoder.out): input feature size 5 != in_features 3"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(quantized_linear(zeros({2, 3}, {.dtype = DType::f64}), q, Tensor()),
                       doctest::Contains("expected a float32 input"), DTypeError);
  CHECK_THROWS_WITH_AS(quantized_linear(zeros({2, 3}), q, zeros({3})), doctest::Contains("bias must be float32 (4,)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(quantized_linear(tensor({0.0, 1.0, 2.0, 0.5, INFINITY, 0.0}, {2, 3}), q, Tensor()),
                       doctest::Contains("quantized_linear (decoder.out): input (2, 3) holds a non-finite value (row 1)"),
                       ValueError);
  const Tensor values = zeros({4, 3}, {.dtype = DType::i8});
  CHECK_THROWS_WITH_AS(make_quantized_weight(values, ones({2}), "enc.bridge"),
                       doctest::Contains("quantized weight (enc.bridge): (2,) scales for 4 rows"), ShapeError);
  CHECK_THROWS_WITH_AS(make_quantized_weight(zeros({12}, {.dtype = DType::i8}), ones({1}), "enc.bridge"),
                       doctest::Contains("values must be 2-D (rows, cols) with positive sizes, got (12,)"), ShapeError);
  CHECK_THROWS_WITH_AS(make_quantized_weight(zeros({4, 3}), ones({1}), "enc.bridge"),
                       doctest::Contains("expected int8 values and float32 scales, got float32 (4, 3)"), DTypeError);
  CHECK_THROWS_WITH_AS(make_quantized_weight(zeros({1, 3}, {.dtype = DType::i8}), full({1}, -1.0), "enc.bridge"),
                       doctest::Contains("scale -1 must be finite and positive"), ValueError);
}

TEST_CASE("quantized_embedding: int8 rows gathered and scaled equal the dequantized table's rows") {
  Tensor table = random_tensor({7, 5}, 1.0, 41);
  Tensor ids = tensor({3, 0, 6, 3, 1, 2}, {2, 3}).to(DType::i64);
  for (QScheme scheme : {QScheme::per_channel, QScheme::per_tensor}) {
    const std::string scheme_name = qscheme_name(scheme);
    CAPTURE(scheme_name);
    QuantizedWeight q = quantize_weight(table, scheme, "embedding", Int8Use::rows);
    REQUIRE(q.values.defined());
    Tensor y = quantized_embedding(ids, q);
    CHECK(y.shape() == Shape{2, 3, 5});
    CHECK(y.to_vector<float>() == embedding(dequantize(q), ids).to_vector<float>());
  }
  QuantizedWeight q = quantize_weight(table, QScheme::per_channel, "decoder.embedding", Int8Use::rows);
  CHECK_THROWS_WITH_AS(quantized_embedding(tensor({7}).to(DType::i64), q), doctest::Contains("out of range"), IndexError);
  CHECK_THROWS_WITH_AS(quantized_embedding(tensor({1}), q),
                       doctest::Contains("quantized_embedding (decoder.embedding): ids must be int64"), DTypeError);
}
