// The CPU backend's oneDNN GEMMs: bf16 products and few-row float32 ones (ops/cpu/onednn_gemm.h).
#include "ops/cpu/onednn_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/threads.h"
#include "ops/bf16_gemm.h"
#ifdef SG_ONEDNN
#include "ops/cpu/onednn.h"
#endif

namespace seqgrad::cpu {
namespace {

std::atomic<bool> native_enabled{[] {
  const char* v = std::getenv("SEQGRAD_BF16_GEMM");
  return v == nullptr || std::strcmp(v, "emulate") != 0;
}()};

// SEQGRAD_BF16_GEMM, checked: "auto" when unset.
std::string bf16_gemm_setting() {
  const char* v = std::getenv("SEQGRAD_BF16_GEMM");
  std::string setting = v == nullptr || *v == '\0' ? "auto" : v;
  SG_CHECK_VALUE(setting == "auto" || setting == "native" || setting == "emulate",
                 "SEQGRAD_BF16_GEMM={}: expected auto, native or emulate", setting);
  return setting;
}

#ifdef SG_ONEDNN
// One (rows, cols) operand of a batch entry in bfloat16, with the element strides oneDNN reads it
// by. A dense operand, row- or column-major (a transposed weight), keeps its layout and is rounded
// in one linear pass; any other is gathered row-major.
struct Bf16Matrix {
  std::shared_ptr<const uint16_t[]> values;
  int64_t row_stride, col_stride;
};

// The strides a dense (rows, cols) operand keeps in bf16: its own when it is row- or column-major,
// else none (it is gathered row-major).
std::optional<std::pair<int64_t, int64_t>> dense_layout(int64_t rows, int64_t cols, int64_t row_stride,
                                                        int64_t col_stride) {
  if (col_stride == 1 && (row_stride == cols || rows == 1)) return std::pair{cols, int64_t{1}};
  if (row_stride == 1 && (col_stride == rows || cols == 1)) return std::pair{int64_t{1}, rows};
  return std::nullopt;
}

Bf16Matrix to_bf16(const float* p, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  const int64_t size = rows * cols;
  std::shared_ptr<uint16_t[]> values(new uint16_t[static_cast<size_t>(size)]);  // no zeroing: every value is written
  uint16_t* q = values.get();
  if (auto layout = dense_layout(rows, cols, row_stride, col_stride)) {
    parallel_for(size, 1 << 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) q[i] = half::bf16_from_float(p[i]);
    });
    return {std::move(values), layout->first, layout->second};
  }
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < cols; ++j) q[r * cols + j] = half::bf16_from_float(p[r * row_stride + j * col_stride]);
  });
  return {std::move(values), cols, 1};
}

// Weights rounded to bf16 once per optimizer step, not once per product. A decoder multiplies by
// the same weights at every time step, forward and backward, and rounding them on each call took
// 15% of the seed preset's bf16 training step (perf, on AMX). A dense operand is kept from the
// third product that reads its storage region (an activation is read twice, forward and backward,
// so activations are not kept), whatever the layout it is read in (a weight and its transpose round
// to the same values), for as long as its storage lives and its version is unchanged (an optimizer
// step or any in-place write bumps it). A strided operand (a block of a weight's columns, as the
// decoder's GRU reads its context share of W_ih) is kept gathered, keyed by its strides too.
// Past kBudgetBytes the least recently read are dropped.
class Bf16OperandCache {
 public:
  Bf16Matrix get(const Tensor& t, const float* p, int64_t rows, int64_t cols, int64_t row_stride,
                 int64_t col_stride) {
    const auto dense = dense_layout(rows, cols, row_stride, col_stride);
    const std::pair<int64_t, int64_t> layout = dense ? *dense : std::pair{cols, int64_t{1}};  // gathered row-major
    const std::shared_ptr<Storage>& storage = t.impl()->storage;
    const Key key = dense ? Key{storage.get(), p, rows * cols} : Key{storage.get(), p, rows * cols, rows, row_stride,
                                                                     col_stride};
    const uint32_t version = storage->version;
    bool keep = false;
    {
      std::lock_guard lock(mutex_);
      Entry& entry = entries_[key];
      if (entry.storage.lock() != storage) {  // a new entry, or a dead storage's address reused
        drop_values(entry);
        entry = Entry();
        entry.storage = storage;
      }
      entry.last_read = ++clock_;
      ++entry.reads;
      if (entry.values && entry.version == version) {
        ++stats_.hits;
        return {entry.values, layout.first, layout.second};
      }
      ++stats_.misses;
      keep = entry.reads >= kReadsBeforeKeeping;
      if (entries_.size() >= sweep_at_) sweep_dead();
    }
    Bf16Matrix rounded = to_bf16(p, rows, cols, row_stride, col_stride);
    if (keep) {
      std::lock_guard lock(mutex_);
      Entry& entry = entries_[key];  // still this storage's: the caller's tensor keeps it alive
      drop_values(entry);
      entry.values = rounded.values, entry.version = version, entry.bytes = static_cast<size_t>(rows * cols) * 2;
      stats_.bytes += entry.bytes;
      sweep_dead();
      evict_over_budget();
    }
    return rounded;
  }

  Bf16CacheStats stats() const {
    std::lock_guard lock(mutex_);
    Bf16CacheStats s = stats_;
    s.entries = static_cast<int64_t>(std::count_if(entries_.begin(), entries_.end(),
                                                   [](const auto& e) { return e.second.values != nullptr; }));
    return s;
  }

 private:
  struct Key {
    const Storage* storage;
    const float* data;
    int64_t size;
    int64_t rows = 0, row_stride = 0, col_stride = 0;  // a gathered operand's; 0 for dense ones, any layout
    auto operator<=>(const Key&) const = default;
  };
  struct Entry {
    std::weak_ptr<Storage> storage;
    uint32_t version = 0;
    int reads = 0;
    uint64_t last_read = 0;
    std::shared_ptr<const uint16_t[]> values;  // shared: a product still reading them outlives eviction
    size_t bytes = 0;
  };
  static constexpr int kReadsBeforeKeeping = 3;
  static constexpr size_t kBudgetBytes = size_t{256} << 20;

  void drop_values(Entry& entry) {
    stats_.bytes -= entry.bytes;
    entry.values.reset(), entry.bytes = 0;
  }
  void sweep_dead() {
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (!it->second.storage.expired()) {
        ++it;
        continue;
      }
      drop_values(it->second);
      it = entries_.erase(it);
    }
    sweep_at_ = std::max<size_t>(1024, 2 * entries_.size());
  }
  void evict_over_budget() {
    while (stats_.bytes > kBudgetBytes) {
      auto oldest = entries_.end();
      for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->second.values && (oldest == entries_.end() || it->second.last_read < oldest->second.last_read))
          oldest = it;
      drop_values(oldest->second);
    }
  }

  mutable std::mutex mutex_;
  std::map<Key, Entry> entries_;
  uint64_t clock_ = 0;
  size_t sweep_at_ = 1024;
  Bf16CacheStats stats_;
};

Bf16OperandCache& operand_cache() {
  static Bf16OperandCache cache;
  return cache;
}

// c (m, n, leading dimension ldc) = alpha · a·b + beta · c for one product of operands in element
// type E (bf16 bits or float), given by element strides. The product is split across seqgrad's
// pool (along n, or along m when it is larger), and oneDNN runs each piece on its calling thread:
// its own OpenMP team spin-waits between products on the cores the pool needs (a fifth of a bf16
// training step's time went to libgomp's spinning, by perf).
template <class E, class Product>
void gemm_pieces(int64_t m, int64_t n, int64_t k, const E* a, int64_t a_row, int64_t a_col, const E* b, int64_t b_row,
                 int64_t b_col, float* c, int64_t ldc, float alpha, float beta, Product product) {
  auto piece = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const int64_t rows = i1 - i0, cols = j1 - j0;
    const E* ap = a + i0 * a_row;
    const E* bp = b + j0 * b_col;
    float* cp = c + i0 * ldc + j0;
    if (beta == 0.0f) {  // beta = 0 ignores c, as BLAS: the product goes straight into it
      product(rows, cols, k, ap, a_row, a_col, bp, b_row, b_col, cp, ldc);
      if (alpha != 1.0f)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < cols; ++j) cp[r * ldc + j] *= alpha;
      return;
    }
    std::vector<float> result(static_cast<size_t>(rows * cols));
    product(rows, cols, k, ap, a_row, a_col, bp, b_row, b_col, result.data(), cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) cp[r * ldc + j] = alpha * result[r * cols + j] + beta * cp[r * ldc + j];
  };
  constexpr int64_t kPieceWork = int64_t{1} << 16;  // multiply-adds below which a split costs more than it gains
  if (n >= m) {
    parallel_for(n, std::max<int64_t>(16, kPieceWork / std::max<int64_t>(m * k, 1)),
                 [&](int64_t j0, int64_t j1) { piece(0, m, j0, j1); }, 16);
  } else {
    parallel_for(m, std::max<int64_t>(16, kPieceWork / std::max<int64_t>(n * k, 1)),
                 [&](int64_t i0, int64_t i1) { piece(i0, i1, 0, n); });
  }
}
#endif

}  // namespace

bool native_bf16_gemm_available() {
#ifdef SG_ONEDNN
  return native_enabled.load(std::memory_order_relaxed) && onednn::cpu_has_bf16();
#else
  return false;
#endif
}

bool few_rows_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                   int64_t b_row, int64_t b_col, float beta, float* c, int64_t ldc) {
#ifdef SG_ONEDNN
  SG_ASSERT(m >= 2 && m <= kFewRows);
  gemm_pieces(m, n, k, a, lda, int64_t{1}, b, b_row, b_col, c, ldc, alpha, beta, onednn::f32_gemm);
  return true;
#else
  (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)b_row, (void)b_col, (void)beta, (void)c,
      (void)ldc;
  return false;
#endif
}

void set_native_bf16_gemm(bool enabled) { native_enabled.store(enabled, std::memory_order_relaxed); }

Bf16CacheStats bf16_operand_cache_stats() {
#ifdef SG_ONEDNN
  return operand_cache().stats();
#else
  return {};
#endif
}

bool native_bf16_gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta) {
#ifdef SG_ONEDNN
  if (!native_bf16_gemm_available() || c.dtype() != DType::f32) return false;
  const int64_t batch = c.shape()[0], m = c.shape()[1], n = c.shape()[2], k = a.shape()[2];
  if (m == 0 || n == 0 || k == 0) return false;  // the emulation's edge cases (k = 0 zeroes c)
  const float *pa = a.data<float>(), *pb = b.data<float>();
  float* pc = c.data<float>();
  const int64_t ldc = m == 1 ? n : c.strides()[1];
  auto operand = [](const Tensor& t, const float* p, int64_t i, int64_t rows, int64_t cols) {
    return to_bf16(p + i * t.strides()[0], rows, cols, t.strides()[1], t.strides()[2]);
  };
  // an operand shared by the whole batch (a weight) is rounded once, or taken from the cache
  std::optional<Bf16Matrix> a_shared, b_shared;
  if (a.shape()[0] == 1) a_shared = operand_cache().get(a, pa, m, k, a.strides()[1], a.strides()[2]);
  if (b.shape()[0] == 1) b_shared = operand_cache().get(b, pb, k, n, b.strides()[1], b.strides()[2]);
  for (int64_t i = 0; i < batch; ++i) {
    std::optional<Bf16Matrix> a_i, b_i;
    if (!a_shared) a_i = operand(a, pa, i, m, k);
    if (!b_shared) b_i = operand(b, pb, i, k, n);
    const Bf16Matrix& ai = a_shared ? *a_shared : *a_i;
    const Bf16Matrix& bi = b_shared ? *b_shared : *b_i;
    gemm_pieces(m, n, k, ai.values.get(), ai.row_stride, ai.col_stride, bi.values.get(), bi.row_stride,
                bi.col_stride, pc + i * c.strides()[0], ldc, static_cast<float>(alpha), static_cast<float>(beta),
                onednn::bf16_gemm);
  }
  return true;
#else
  (void)a, (void)b, (void)c, (void)alpha, (void)beta;
  return false;
#endif
}

}  // namespace seqgrad::cpu

namespace seqgrad {

Bf16GemmInfo bf16_gemm_info(Device device) {
  if (device.is_cuda()) return {"cuda", true, "native bf16 products (cuBLAS)"};
  const std::string setting = cpu::bf16_gemm_setting();
  Bf16GemmInfo info;
#ifdef SG_ONEDNN
  const bool amx = onednn::cpu_has_amx();
#else
  const bool amx = false;
#endif
  if (!cpu::native_bf16_gemm_available())
    info = {"emulated (float32 GEMMs of bf16-rounded operands)", false,
            "no native bf16 products here (AVX-512 BF16 and oneDNN), and the emulation is slower than float32"};
  else if (amx)
    info = {"onednn avx512_core_amx", true, "AMX bf16 tiles beat float32 GEMMs"};
  else
    info = {"onednn avx512_core_bf16", true, "AVX-512 BF16 dot products beat float32 GEMMs"};
  if (setting != "auto" && !info.preferred) {
    info.preferred = true;
    info.why = "SEQGRAD_BF16_GEMM=" + setting + " forces bf16 products (" + info.why + ")";
  }
  return info;
}

}  // namespace seqgrad
