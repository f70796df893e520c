// The batch-invariant float32 GEMM (ops/batch_invariant.h, ops/cpu/invariant_gemm.h). Every
// element of C is the same sequence of operations on its row of A and its column of B, whatever
// block of rows or columns it falls in, whichever thread runs it and however B is laid out (a
// product's operands may arrive as views or as copies, depending on the batch): eight partial
// sums, sum l adding the terms p ≡ l (mod 8) in order of p with one rounding each (FMA; a
// product and a sum in the baseline build), the missing terms of a last partial group adding
// 0 · 0, then the eight added as ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)). The blocking
// only decides which elements share their loads. Terms of zero weight appended to a sum (a source
// padded to a longer batch's length, its padding masked to weight 0) leave every partial sum as
// it was. Compiled without contraction (ops/meson.build): the FMAs are the ones written here.
//
// B the transpose of (n, k) rows (linear's weight, the GRU's W_hh, attention's keys) is read as
// dot products, the sums in the lanes of one vector per element (dot_tile); B with dense rows
// (attention's values) a row of B at a time into eight rows of partial sums (column_product).
#include "ops/cpu/invariant_gemm.h"

#include <algorithm>
#include <cstring>

#include "core/threads.h"
#include "ops/cpu/backend.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

// The baseline build passes the eight-lane vectors in two SSE registers; they never cross a call
// (every helper is inlined), so GCC's note about their calling convention does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace seqgrad::cpu::SG_CPU_ISA {
namespace {

using V = float __attribute__((vector_size(32)));  // eight lanes: one AVX register or two SSE ones
constexpr int kLanes = 8;

[[gnu::always_inline]] inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

[[gnu::always_inline]] inline void store(float* p, const V& v) { std::memcpy(p, &v, sizeof v); }

#if defined(__AVX2__) && defined(__FMA__)
// Lane i enabled for i < count (count 0..8).
[[gnu::always_inline]] inline __m256i first_lanes(int count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
// The first `count` floats at p, zeros in the other lanes (nothing read past them).
[[gnu::always_inline]] inline V load_first(const float* p, int count) {
  return _mm256_maskload_ps(p, first_lanes(count));
}
[[gnu::always_inline]] inline void store_first(float* p, const V& v, int count) {
  _mm256_maskstore_ps(p, first_lanes(count), v);
}
// x·y + acc rounded once: VFMADD, lane by lane
[[gnu::always_inline]] inline V madd(V x, V y, V acc) { return _mm256_fmadd_ps(x, y, acc); }
#else
[[gnu::always_inline]] inline V load_first(const float* p, int count) {
  V v{};
  std::memcpy(&v, p, static_cast<size_t>(count) * sizeof(float));
  return v;
}
[[gnu::always_inline]] inline void store_first(float* p, const V& v, int count) {
  std::memcpy(p, &v, static_cast<size_t>(count) * sizeof(float));
}
// The baseline build has no FMA instruction: a product and a sum, rounded each (no contraction here).
[[gnu::always_inline]] inline V madd(const V& x, const V& y, const V& acc) { return x * y + acc; }
#endif

[[gnu::always_inline]] inline V broadcast(float x) { return V{x, x, x, x, x, x, x, x}; }

using V4 = float __attribute__((vector_size(16)));  // four finished sums

// Four dot products' eight partial sums each, added in the one tree every element uses:
// ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7)), as AVX's horizontal adds pair them.
[[gnu::always_inline]] inline V4 hsum4(const V& a, const V& b, const V& c, const V& d) {
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
#else
  auto tree = [](const V& x) { return ((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7])); };
  return V4{tree(a), tree(b), tree(c), tree(d)};
#endif
}

// alpha · sum + beta · c, with beta = 0 ignoring c (it may be garbage)
[[gnu::always_inline]] inline float finish(float sum, float alpha, float beta, const float& c) {
  return beta == 0.0f ? alpha * sum : alpha * sum + beta * c;
}

// ---- B as (n, k) rows: dot products

struct DotArgs {
  int64_t k;
  float alpha, beta;
  const float* a;  // (m, k) rows, lda apart
  int64_t lda;
  const float* w;  // (n, k) rows, ldw apart
  int64_t ldw;
  float* c;  // (m, n) rows, ldc apart
  int64_t ldc;
};

// C's R × C tile at rows i, columns j: R rows of A against C rows of W, each element one 8-lane
// dot product. The loads are shared across the tile; the arithmetic of an element is its own.
template <int R, int C>
[[gnu::always_inline]] inline void dot_tile(const DotArgs& g, int64_t i, int64_t j) {
  const float* a = g.a + i * g.lda;
  const float* w = g.w + j * g.ldw;
  V acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = V{};
  int64_t p = 0;
  for (; p + kLanes <= g.k; p += kLanes) {
    V x[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) x[r] = load(a + r * g.lda + p);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const V y = load(w + c * g.ldw + p);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = madd(x[r], y, acc[r][c]);
    }
  }
  if (p < g.k) {  // the last partial group, its missing terms 0 · 0
    const int rest = static_cast<int>(g.k - p);
    V x[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) x[r] = load_first(a + r * g.lda + p, rest);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const V y = load_first(w + c * g.ldw + p, rest);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = madd(x[r], y, acc[r][c]);
    }
  }
  // alpha · sum + beta · c, four columns at a time (the same two roundings as one at a time)
  const V none{};
  const V4 alpha{g.alpha, g.alpha, g.alpha, g.alpha}, beta{g.beta, g.beta, g.beta, g.beta};
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* out = g.c + (i + r) * g.ldc + j;
#pragma GCC unroll 8
    for (int c = 0; c < C; c += 4) {
      const V4 sums = hsum4(acc[r][c], c + 1 < C ? acc[r][c + 1] : none, c + 2 < C ? acc[r][c + 2] : none,
                            c + 3 < C ? acc[r][c + 3] : none);
      if (c + 4 <= C) {
        V4 v = alpha * sums, old;
        if (g.beta != 0.0f) std::memcpy(&old, out + c, sizeof old), v = v + beta * old;
        std::memcpy(out + c, &v, sizeof v);
      } else {
#pragma GCC unroll 4
        for (int l = 0; c + l < C; ++l) out[c + l] = finish(sums[l], g.alpha, g.beta, out[c + l]);
      }
    }
  }
}

// Rows i..i+R of C over columns [j0, j1): tiles of C columns, then single columns.
template <int R, int C>
void dot_rows(const DotArgs& g, int64_t i, int64_t j0, int64_t j1) {
  int64_t j = j0;
  for (; j + C <= j1; j += C) dot_tile<R, C>(g, i, j);
  for (; j < j1; ++j) dot_tile<R, 1>(g, i, j);
}

// Weight rows per cache block: a block of W (at most ~128 KB) stays in L2 while every row of A
// passes over it, so W is read from memory once however many rows there are.
int64_t dot_block_columns(int64_t k) { return std::max<int64_t>(24, (int64_t{32} << 10) / std::max<int64_t>(k, 1)); }

// C rows [i0, i1) × columns [j0, j1). The tiles are 3 rows × 4 columns (twelve sums in
// registers, seven loads for twelve FMAs); fewer rows take wider tiles.
void dot_product(const DotArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const int64_t block = dot_block_columns(g.k);
  for (int64_t jb = j0; jb < j1; jb += block) {
    const int64_t je = std::min(j1, jb + block);
    int64_t i = i0;
    for (; i + 3 <= i1; i += 3) dot_rows<3, 4>(g, i, jb, je);
    if (i1 - i == 2) dot_rows<2, 4>(g, i, jb, je);
    if (i1 - i == 1) dot_rows<1, 8>(g, i, jb, je);
  }
}

// ---- B as (k, n) rows: the same sums, eight columns per vector

struct ColumnArgs {
  int64_t k;
  float alpha, beta;
  const float* a;  // (m, k) rows, lda apart
  int64_t lda;
  const float* b;  // (k, n) rows, ldb apart
  int64_t ldb;
  float* c;  // (m, n) rows, ldc apart
  int64_t ldc;
};

// Rows [i0, i1) of C at columns [j0, j1), up to 256 columns at a time: the dot products' order
// with the columns in the lanes. Partial sum l of every column is a row of `sums`, adding the terms
// p ≡ l (mod 8): each term streams one row of B (consecutive rows of B are a row stride apart, so
// tiles that read a column block of many rows would meet in a few cache sets). The missing terms
// of a last partial group add 0 · 0, as dot_tile's zero-filled loads do; then hsum4's tree.
void column_product(const ColumnArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  constexpr int64_t kChunk = 256;
  alignas(32) float sums[kLanes][kChunk];
  const V none{}, alpha = broadcast(g.alpha), beta = broadcast(g.beta);
  // the last group's first missing term (8: none missing; 0: k = 0); sums past k (k < 8) are never written
  const int64_t missing = g.k == 0 ? 0 : g.k % kLanes == 0 ? kLanes : g.k % kLanes;
  for (int64_t i = i0; i < i1; ++i) {
    const float* a = g.a + i * g.lda;
    for (int64_t jc = j0; jc < j1; jc += kChunk) {
      const int64_t width = std::min(kChunk, j1 - jc), full = width / kLanes * kLanes;
      const int rest = static_cast<int>(width - full);
      for (int64_t p = 0; p < g.k; ++p) {
        const V x = broadcast(a[p]);
        const float* bp = g.b + p * g.ldb + jc;
        float* sp = sums[p % kLanes];
        auto before = [&](int64_t v) { return p < kLanes ? none : load(sp + v); };  // a sum's first term adds to +0
        for (int64_t v = 0; v < full; v += kLanes) store(sp + v, madd(x, load(bp + v), before(v)));
        if (rest > 0) store(sp + full, madd(x, load_first(bp + full, rest), before(full)));
      }
      float* out = g.c + i * g.ldc + jc;
      for (int64_t v = 0; v < width; v += kLanes) {
        V s[kLanes];
#pragma GCC unroll 8
        for (int64_t l = 0; l < kLanes; ++l)
          s[l] = l < missing ? load(sums[l] + v) : madd(none, none, l < g.k ? load(sums[l] + v) : none);
        const V total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
        const int count = static_cast<int>(std::min<int64_t>(kLanes, width - v));
        V result = alpha * total;
        if (g.beta != 0.0f) result = result + beta * load_first(out + v, count);
        store_first(out + v, result, count);
      }
    }
  }
}

// ---- one product, its pieces on the pool

constexpr int64_t kPieceWork = int64_t{1} << 17;  // multiply-adds per piece, at least

// c = alpha·a·b + beta·c for one (m, n, k) product; `product(i0, i1, j0, j1)` computes a block of
// C. Split along columns (multiples of 24: whole tiles either way) when they are many, else rows.
template <class Block>
void split(int64_t m, int64_t n, int64_t k, bool threaded, Block&& product) {
  const int64_t work = std::max<int64_t>(m * n * k, 1);
  if (!threaded || work < 2 * kPieceWork) {
    product(0, m, 0, n);
  } else if (n >= 4 * m) {
    const int64_t grain = std::max<int64_t>(48, kPieceWork / std::max<int64_t>(m * k, 1));
    parallel_for(n, grain, [&](int64_t j0, int64_t j1) { product(0, m, j0, j1); }, 24);
  } else {
    const int64_t grain = std::max<int64_t>(4, kPieceWork / std::max<int64_t>(n * k, 1));
    parallel_for(m, grain, [&](int64_t i0, int64_t i1) { product(i0, i1, 0, n); }, 4);
  }
}

// A (m, k) matrix's rows with unit column stride: its row stride, or 0 when it has none.
int64_t row_stride(const Tensor& t) {
  const int64_t rows = t.size(1), cols = t.size(2);
  if (t.strides()[2] == 1 || cols == 1) return rows == 1 ? std::max<int64_t>(cols, 1) : t.strides()[1];
  return 0;
}

}  // namespace

void invariant_gemm(const Tensor& a_in, const Tensor& b_in, const Tensor& c, double alpha, double beta) {
  const int64_t batch = c.size(0), m = c.size(1), n = c.size(2), k = a_in.size(2);
  if (batch == 0 || m == 0 || n == 0) return;
  // A's rows dense (activations are; a transposed view is copied). B is read as it is laid out
  // (the order is the same either way): dense columns as dot products, dense rows eight columns
  // at a time; any other layout is copied into dense rows.
  const Tensor a = row_stride(a_in) != 0 ? a_in : dense(a_in);
  const bool b_columns_dense = k > 1 && b_in.strides()[1] == 1;
  const bool b_rows_dense = n == 1 || b_in.strides()[2] == 1;
  const Tensor b = b_rows_dense || b_columns_dense ? b_in : dense(b_in);
  const int64_t lda = row_stride(a), ldc = m == 1 ? std::max<int64_t>(n, 1) : c.strides()[1];
  SG_ASSERT(c.strides()[2] == 1 || n == 1);
  const int64_t a_step = a.size(0) == 1 ? 0 : a.strides()[0], b_step = b.size(0) == 1 ? 0 : b.strides()[0];
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* pc = c.data<float>();
  const auto fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
  auto one = [&](int64_t index, bool threaded) {
    float* ci = pc + index * c.strides()[0];
    if (b_columns_dense) {
      const DotArgs g{k, fa, fb, pa + index * a_step, lda, pb + index * b_step, b.strides()[2], ci, ldc};
      split(m, n, k, threaded, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) { dot_product(g, i0, i1, j0, j1); });
    } else {
      const int64_t ldb = k == 1 ? std::max<int64_t>(n, 1) : b.strides()[1];
      const ColumnArgs g{k, fa, fb, pa + index * a_step, lda, pb + index * b_step, ldb, ci, ldc};
      split(m, n, k, threaded, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) { column_product(g, i0, i1, j0, j1); });
    }
  };
  const int64_t work = std::max<int64_t>(m * n * k, 1);
  if (batch == 1) {
    one(0, true);
    return;
  }
  parallel_for(batch, std::max<int64_t>(1, kPieceWork / work), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) one(i, false);
  });
}

}  // namespace seqgrad::cpu::SG_CPU_ISA
