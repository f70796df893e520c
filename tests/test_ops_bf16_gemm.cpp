// Native bf16 GEMMs under Autocast(bf16) on the CPU (ops/cpu/onednn_gemm.h) against the emulation
// (a float32 GEMM of the bf16-rounded operands, core/autocast.h): equal where the accumulation
// cannot round (small integers), within 2·k·ε·Σ|a||b| elsewhere, in forward and backward. Where the
// native path cannot run (no oneDNN, no AVX-512 BF16, SEQGRAD_BF16_GEMM=emulate) "native" would be
// the emulation again: those subcases report "SKIP: <subcase>" instead of comparing it with itself.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "ops/bf16_gemm.h"
#include "ops/cpu/onednn_gemm.h"
#include "ops/ops.h"

using namespace seqgrad;

namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(shape.numel());
  for (float& x : v) x = dist(gen);
  return from_vector(v, shape);
}

// Whether native bf16 GEMMs run here, decided at the first call (before any helper switches the path):
// set_native_bf16_gemm(true) would turn it back on under SEQGRAD_BF16_GEMM=emulate, so the helpers
// restore this, not "on".
bool native_here() {
  static const bool native = cpu::native_bf16_gemm_available();
  return native;
}

// matmul(a, b) under Autocast(bf16), on the native path (where it runs) or the emulation.
std::vector<float> bf16_matmul(const Tensor& a, const Tensor& b, bool native) {
  cpu::set_native_bf16_gemm(native && native_here());
  Autocast amp(GemmPrecision::bf16);
  std::vector<float> y = matmul(a, b).to_vector<float>();
  cpu::set_native_bf16_gemm(native_here());
  return y;
}

// |got - want| <= 2·k·ε·Σ_p |a[i, p]| |b[p, j]| for every element of c = a (m, k) · b (k, n), where
// want is the emulation: float32 sums of exact bf16 products, in another order.
void check_accumulation_bound(const Tensor& a, const Tensor& b, const std::vector<float>& got,
                              const std::vector<float>& want) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const double eps = std::ldexp(1.0, -24);
  std::vector<float> av = a.abs().contiguous().to_vector<float>(), bv = b.abs().contiguous().to_vector<float>();
  int64_t outside = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double mass = 0;
      for (int64_t p = 0; p < k; ++p) mass += av[i * k + p] * bv[p * n + j];
      outside += std::abs(got[i * n + j] - want[i * n + j]) > 2 * k * eps * mass;
    }
  CHECK(outside == 0);
}

// Whether oneDNN runs bf16 products as AMX tiles here, by the CPU's own feature bits.
bool amx_here() { return native_here() && __builtin_cpu_supports("amx-bf16"); }

// Whether a subcase comparing the native path with the emulation can run; where it cannot, a visible
// "SKIP: <subcase>" instead of a pass. (The subcase skips its body rather than returning: a return
// would end the test case before doctest discovers the subcases after it.)
bool runs_natively(const std::string& subcase) {
  if (native_here()) return true;
  MESSAGE("SKIP: " << subcase << ": the native bf16 GEMM cannot run here (no oneDNN, no AVX-512 BF16, or "
          "SEQGRAD_BF16_GEMM=emulate), so it would be the emulation compared with itself");
  return false;
}

}  // namespace

TEST_CASE("bf16 GEMM: native (oneDNN, AVX-512 BF16) vs the emulation") {
  MESSAGE("native bf16 GEMM on this machine: " << std::string(native_here() ? "yes (oneDNN)" : "no (emulation only)"));
  SUBCASE("small integers: every sum is exact, so the two are equal") {
    Tensor a = from_vector(std::vector<float>{1, -2, 3, 4, 5, -6}, {2, 3});
    Tensor b = from_vector(std::vector<float>{7, 8, -9, 10, 11, 12}, {3, 2});
    const std::vector<float> exact = {7 + 18 + 33, 8 - 20 + 36, 28 - 45 - 66, 32 + 50 - 72};
    CHECK(bf16_matmul(a, b, false) == exact);  // the emulation, against hand-computed sums
    if (runs_natively("small integers, native")) {
      CHECK(bf16_matmul(a, b, true) == exact);
    }
  }
  SUBCASE("random shapes, transposed and batched operands: within the accumulation-order bound") {
    if (runs_natively("random shapes")) {
      for (auto [m, k, n] : {std::array<int64_t, 3>{1, 512, 1536}, {64, 256, 384}, {33, 17, 5}}) {
        CAPTURE(m);
        CAPTURE(k);
        Tensor a = random_tensor({m, k}, 1), bt = random_tensor({n, k}, 2);
        Tensor b = bt.t();  // a transposed view: strides (1, k)
        std::vector<float> got = bf16_matmul(a, b, true), want = bf16_matmul(a, b, false);
        if (k >= 256) CHECK(got != want);  // it really ran elsewhere: another summation order
        check_accumulation_bound(a, b, got, want);
      }
      Tensor a3 = random_tensor({3, 4, 8}, 3), b3 = random_tensor({3, 8, 5}, 4);
      std::vector<float> got = bf16_matmul(a3, b3, true), want = bf16_matmul(a3, b3, false);
      for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-5 * (1 + std::abs(want[i])));
    }
  }
  SUBCASE("products split across threads (along n and along m), strided operands, a shared operand") {
    if (runs_natively("products split across threads")) {
      // Large enough that the pieces run on several threads at once (each on its own oneDNN
      // scratchpad), row- and column-major operands converted in place, a strided one gathered.
      for (auto [m, k, n] : {std::array<int64_t, 3>{64, 512, 1536}, {1280, 256, 96}}) {
        CAPTURE(m);
        Tensor a = random_tensor({m, k}, 7), bt = random_tensor({n, k}, 8);
        check_accumulation_bound(a, bt.t(), bf16_matmul(a, bt.t(), true), bf16_matmul(a, bt.t(), false));
        Tensor wide = random_tensor({m, 2 * k}, 9);
        Tensor strided = wide.narrow(1, 0, k);  // rows of stride 2k: neither row- nor column-major dense
        check_accumulation_bound(strided, bt.t(), bf16_matmul(strided, bt.t(), true),
                                 bf16_matmul(strided, bt.t(), false));
      }
      Tensor a3 = random_tensor({4, 300, 64}, 10), w = random_tensor({64, 700}, 11);  // w shared by the batch
      std::vector<float> got = bf16_matmul(a3, w, true), want = bf16_matmul(a3, w, false);
      for (int64_t i = 0; i < 4; ++i) {
        auto slice = [&](const std::vector<float>& v) {
          return std::vector<float>(v.begin() + i * 300 * 700, v.begin() + (i + 1) * 300 * 700);
        };
        check_accumulation_bound(a3.select(0, i), w, slice(got), slice(want));
      }
    }
  }
  SUBCASE("alpha and beta: c = alpha · a·b + beta · c, and beta = 0 ignores c (even NaN)") {
    if (runs_natively("alpha and beta")) {
      Tensor a = from_vector(std::vector<float>{1, 2, 3, 4}, {1, 2, 2});
      Tensor b = from_vector(std::vector<float>{5, 6, 7, 8}, {1, 2, 2});
      Tensor c = from_vector(std::vector<float>{1, -1, 2, -2}, {1, 2, 2});
      REQUIRE(cpu::native_bf16_gemm(a, b, c, 0.5, 2.0));
      CHECK(c.to_vector<float>() == std::vector<float>{0.5f * 19 + 2, 0.5f * 22 - 2, 0.5f * 43 + 4, 0.5f * 50 - 4});
      Tensor nan = from_vector(std::vector<float>(4, std::nanf("")), {1, 2, 2});
      REQUIRE(cpu::native_bf16_gemm(a, b, nan, 2.0, 0.0));
      CHECK(nan.to_vector<float>() == std::vector<float>{38, 44, 86, 100});
    }
  }
  SUBCASE("a weight read again is rounded once per version: cache hits, and an in-place write is seen") {
    if (runs_natively("the operand cache")) {
      Tensor w = random_tensor({256, 96}, 12), w0 = random_tensor({256, 96}, 15);
      auto product = [&](const Tensor& b) { return bf16_matmul(random_tensor({8, 256}, 13), b, true); };
      // w0 is kept at its third read, which sweeps the entries of earlier tests' dead tensors: the
      // bytes counted below are then this subcase's own
      for (int i = 0; i < 3; ++i) product(w0);
      const cpu::Bf16CacheStats before = cpu::bf16_operand_cache_stats();
      const std::vector<float> first = product(w);
      for (int i = 0; i < 4; ++i) CHECK(product(w) == first);  // kept from the third read on: 2 hits
      const cpu::Bf16CacheStats after = cpu::bf16_operand_cache_stats();
      CHECK(after.hits - before.hits == 2);
      CHECK(after.bytes - before.bytes == 256 * 96 * 2);  // w in bf16; the fresh activations are not kept
      // w.t(), read column-major, is the same region in bf16: a hit, within the bound of the emulation
      Tensor x = random_tensor({8, 96}, 14);
      check_accumulation_bound(x, w.t(), bf16_matmul(x, w.t(), true), bf16_matmul(x, w.t(), false));
      CHECK(cpu::bf16_operand_cache_stats().hits - after.hits == 1);
      w.mul_(2.0);  // bumps the version: the cached values are stale
      const std::vector<float> doubled = product(w);
      CHECK(cpu::bf16_operand_cache_stats().hits - after.hits == 1);  // the doubled w was rounded afresh
      for (size_t i = 0; i < first.size(); ++i) CHECK(doubled[i] == 2 * first[i]);  // exact: scaling by 2

      // A block of a weight's columns (strided, gathered) is kept too; each view of it is its own entry
      Tensor block = w0.narrow(1, 32, 48), other = w0.narrow(1, 0, 48);  // (256, 48), rows of stride 96
      const std::vector<float> block_first = product(block);
      for (int i = 0; i < 3; ++i) CHECK(product(block) == block_first);  // kept at the third read: 1 hit
      const cpu::Bf16CacheStats strided = cpu::bf16_operand_cache_stats();
      CHECK(strided.hits - after.hits == 2);
      CHECK(strided.bytes - after.bytes == 256 * 48 * 2);
      for (int i = 0; i < 3; ++i) check_accumulation_bound(random_tensor({8, 256}, 13), other, product(other),
                                                           bf16_matmul(random_tensor({8, 256}, 13), other, false));
      CHECK(cpu::bf16_operand_cache_stats().hits == strided.hits);  // other columns: not block's values
      Tensor xb = random_tensor({8, 48}, 16);  // block.t(), (48, 256) with columns of stride 96: a view of its own
      check_accumulation_bound(xb, block.t(), bf16_matmul(xb, block.t(), true), bf16_matmul(xb, block.t(), false));
      CHECK(cpu::bf16_operand_cache_stats().hits == strided.hits);
    }
  }
  SUBCASE("linear forward and backward (the training step's GEMMs)") {
    if (runs_natively("linear forward and backward")) {
      Tensor x = random_tensor({16, 32}, 5).requires_grad_(), w = random_tensor({24, 32}, 6).requires_grad_();
      std::vector<std::vector<float>> results[2];
      for (bool on : {true, false}) {
        cpu::set_native_bf16_gemm(on && native_here());
        x.zero_grad(), w.zero_grad();
        {
          Autocast amp(GemmPrecision::bf16);
          Tensor y = linear(x, w, Tensor());
          (y * y).sum().backward();
          results[on].push_back(y.to_vector<float>());
        }
        results[on].push_back(x.grad().to_vector<float>());
        results[on].push_back(w.grad().to_vector<float>());
        cpu::set_native_bf16_gemm(native_here());
      }
      for (size_t r = 0; r < 3; ++r)
        for (size_t i = 0; i < results[0][r].size(); ++i)
          CHECK(std::abs(results[1][r][i] - results[0][r][i]) <= 1e-4 * (1 + std::abs(results[0][r][i])));
    }
  }
}

// SEQGRAD_BF16_GEMM set (or unset: nullptr) for a scope, restoring the previous value.
class ScopedBf16Setting {
 public:
  explicit ScopedBf16Setting(const char* value) {
    if (const char* v = std::getenv(kName)) previous_ = v;
    value ? setenv(kName, value, 1) : unsetenv(kName);
  }
  ~ScopedBf16Setting() { previous_ ? setenv(kName, previous_->c_str(), 1) : unsetenv(kName); }

 private:
  static constexpr const char* kName = "SEQGRAD_BF16_GEMM";
  std::optional<std::string> previous_;
};

// The rule that keeps --amp bf16 from slowing training down: bf16 products are preferred only where
// they run natively, as AMX tiles or AVX-512 BF16 dot products, never as the emulation unless
// forced. The CPU's own feature bits check oneDNN's answer, which the rule itself reads.
TEST_CASE("bf16 GEMM: a training run prefers bf16 products only where they run natively, unless forced") {
  if (native_here()) CHECK((__builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16")));
  {
    ScopedBf16Setting unset(nullptr);
    const Bf16GemmInfo info = bf16_gemm_info(Device::cpu());
    CHECK(info.preferred == native_here());
    CHECK(!info.why.empty());
    CHECK(info.kernels == (!native_here()  ? "emulated (float32 GEMMs of bf16-rounded operands)"
                           : amx_here()    ? "onednn avx512_core_amx"
                                           : "onednn avx512_core_bf16"));
  }
  for (const char* forced : {"native", "emulate"}) {
    CAPTURE(forced);
    ScopedBf16Setting set(forced);
    const Bf16GemmInfo info = bf16_gemm_info(Device::cpu());
    CHECK(info.preferred);
    if (!native_here()) CHECK(info.why.starts_with(std::string("SEQGRAD_BF16_GEMM=") + forced + " forces"));
  }
  ScopedBf16Setting bad("emulated");
  CHECK_THROWS_WITH_AS(bf16_gemm_info(Device::cpu()), "SEQGRAD_BF16_GEMM=emulated: expected auto, native or emulate",
                       ValueError);
}
