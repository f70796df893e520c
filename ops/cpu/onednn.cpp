// oneDNN matmuls (ops/cpu/onednn.h): one cached primitive per shape, executed on a CPU stream.
#include "ops/cpu/onednn.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <dnnl.hpp>
#include <omp.h>

#include "core/error.h"
#include "core/threads.h"
#include "ops/cpu/int8.h"

namespace seqgrad::onednn {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// The engine is shared; each thread executes on its own stream.
dnnl::engine& engine() {
  static dnnl::engine e{dnnl::engine::kind::cpu, 0};
  return e;
}
dnnl::stream& thread_stream() {
  thread_local dnnl::stream s{engine()};
  return s;
}

// A primitive and the scratchpad it needs. Scratchpads are ours (scratchpad_mode::user), one per
// thread: the library's own is shared by all primitives, so a primitive would have to run on the
// thread that created it, and the bf16 products run on every thread of seqgrad's pool at once
// (ops/cpu/onednn_gemm.cpp).
struct Matmul {
  dnnl::matmul primitive;
  dnnl::memory::desc scratchpad;
};

// Primitives by shape and strides. Creating one takes ~0.1 ms, more than a decoder step's product;
// a translator uses a few dozen shapes. The mutex guards the map only: a primitive may execute
// concurrently (oneDNN primitives are immutable once created).
using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
std::mutex cache_mutex;
std::map<Key, Matmul> cache;

Matmul cached(const Key& key, const dnnl::memory::desc& a, const dnnl::memory::desc& b, const dnnl::memory::desc& c) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine());
  return cache.emplace(key, Matmul{dnnl::matmul(pd), pd.scratchpad_desc()}).first->second;
}

// Threads for one product. oneDNN runs on OpenMP, whose fork-join waits for every thread of the
// team: on a loaded machine a decoder step's small product then waits a scheduler slice for a
// helper (core/threads.h), so products below kThreadedWork multiply-adds run on the caller alone.
constexpr int64_t kThreadedWork = int64_t{1} << 24;

void set_threads_for(int64_t m, int64_t n, int64_t k) {
  omp_set_num_threads(m * n * k < kThreadedWork ? 1 : get_num_threads());  // this thread's ICV only
}

void run(const Matmul& product, const dnnl::memory::desc& a_md, const void* a, const dnnl::memory::desc& b_md,
         const void* b, const dnnl::memory::desc& c_md, void* c) {
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(std::max<size_t>(scratch.size(), product.scratchpad.get_size()));
  dnnl::memory a_mem(a_md, engine(), const_cast<void*>(a));
  dnnl::memory b_mem(b_md, engine(), const_cast<void*>(b));
  dnnl::memory c_mem(c_md, engine(), c);
  dnnl::memory scratch_mem(product.scratchpad, engine(), scratch.data());
  dnnl::stream& stream = thread_stream();
  product.primitive.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem},
                                     {DNNL_ARG_SCRATCHPAD, scratch_mem}});
  stream.wait();
}

// b (n, k) row-major is bᵀ (k, n) with strides (1, k)
dnnl::memory::desc plain_weights_md(int64_t n, int64_t k) { return {dims{k, n}, dt::s8, dims{1, k}}; }

// oneDNN reports failures as dnnl::error; ours name the product and the shape.
template <class F>
void checked(const char* what, int64_t m, int64_t n, int64_t k, F&& body) {
  try {
    body();
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("{}: oneDNN matmul ({}, {}) x ({}, {}) failed: {} (status {})", what, m, k, k, n,
                            e.what(), static_cast<int>(e.status)));
  }
}

}  // namespace

void int8_gemm(int64_t m, int64_t n, int64_t k, const uint8_t* a, const int8_t* b, int32_t* c) {
  checked("int8_gemm", m, n, k, [&] {
    dnnl::memory::desc a_md(dims{m, k}, dt::u8, dims{k, 1});
    dnnl::memory::desc b_md = plain_weights_md(n, k);
    dnnl::memory::desc c_md(dims{m, n}, dt::s32, dims{n, 1});
    Matmul product = cached(Key{0, m, n, k, 0, 0, 0, 0, 0}, a_md, b_md, c_md);
    set_threads_for(m, n, k);
    run(product, a_md, a, b_md, b, c_md, c);
  });
}

namespace {

// The blocked layout oneDNN's int8 matmul picks for weights (k, n) when it may choose (format
// any). It depends on (n, k) only; creating the primitive descriptor that tells it costs ~0.1 ms,
// so it is looked up once per shape.
dnnl::memory::desc preferred_weights_md(int64_t n, int64_t k) {
  static std::mutex mutex;
  static std::map<std::pair<int64_t, int64_t>, dnnl::memory::desc> layouts;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = layouts.find({n, k});
  if (it != layouts.end()) return it->second;
  dnnl::memory::desc a_md(dims{1, k}, dt::u8, dims{k, 1});
  dnnl::memory::desc b_any(dims{k, n}, dt::s8, dnnl::memory::format_tag::any);
  dnnl::memory::desc c_md(dims{1, n}, dt::s32, dims{n, 1});
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), engine());
  return layouts.emplace(std::make_pair(n, k), pd.weights_desc()).first->second;
}

// Copies between two layouts of the same weight.
void reorder(const dnnl::memory::desc& from_md, const int8_t* from, const dnnl::memory::desc& to_md, int8_t* to) {
  dnnl::memory src(from_md, engine(), const_cast<int8_t*>(from));
  dnnl::memory dst(to_md, engine(), to);
  dnnl::reorder(src, dst).execute(thread_stream(), src, dst);
  thread_stream().wait();
}

}  // namespace

int64_t int8_packed_bytes(int64_t n, int64_t k) {
  int64_t bytes = 0;
  checked("int8_gemm (packing weights)", 1, n, k,
          [&] { bytes = static_cast<int64_t>(preferred_weights_md(n, k).get_size()); });
  return bytes;
}

void pack_int8_weights(int64_t n, int64_t k, const int8_t* b, int8_t* packed) {
  checked("int8_gemm (packing weights)", 1, n, k,
          [&] { reorder(plain_weights_md(n, k), b, preferred_weights_md(n, k), packed); });
}

void unpack_int8_weights(int64_t n, int64_t k, const int8_t* packed, int8_t* b) {
  checked("int8_gemm (unpacking weights)", 1, n, k,
          [&] { reorder(preferred_weights_md(n, k), packed, plain_weights_md(n, k), b); });
}

void int8_gemm_packed(int64_t m, int64_t n, int64_t k, const uint8_t* a, const int8_t* packed_b, int32_t* c) {
  checked("int8_gemm", m, n, k, [&] {
    dnnl::memory::desc a_md(dims{m, k}, dt::u8, dims{k, 1});
    dnnl::memory::desc b_md = preferred_weights_md(n, k);
    dnnl::memory::desc c_md(dims{m, n}, dt::s32, dims{n, 1});
    // the blocked layout depends on (n, k) only, so one key per shape holds
    Matmul product = cached(Key{2, m, n, k, 0, 0, 0, 0, 0}, a_md, b_md, c_md);
    set_threads_for(m, n, k);
    run(product, a_md, a, b_md, packed_b, c_md, c);
  });
}

// oneDNN's ISA values are bit sets, each one containing those it extends; the effective ISA
// honours DNNL_MAX_CPU_ISA, so a user can force the non-VNNI kernels (and our reduce_range).
bool effective_isa_has(dnnl::cpu_isa isa) {
  const auto bits = static_cast<unsigned>(isa);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & bits) == bits;
}

bool cpu_has_vnni() {
  static const bool has =
      effective_isa_has(dnnl::cpu_isa::avx512_core_vnni) || effective_isa_has(dnnl::cpu_isa::avx2_vnni);
  return has;
}

bool cpu_has_bf16() {
  static const bool has = effective_isa_has(dnnl::cpu_isa::avx512_core_bf16);
  return has;
}

bool cpu_has_amx() {
  static const bool has = effective_isa_has(dnnl::cpu_isa::avx512_core_amx);
  return has;
}

namespace {
// float32 c (m, n) = a · b with a and b of element type `type` given by element strides, on the
// calling thread alone (its caller splits the product across seqgrad's pool).
void strided_gemm(const char* what, int kind, dt type, int64_t m, int64_t n, int64_t k, const void* a, int64_t a_row,
                  int64_t a_col, const void* b, int64_t b_row, int64_t b_col, float* c, int64_t ldc) {
  checked(what, m, n, k, [&] {
    dnnl::memory::desc a_md(dims{m, k}, type, dims{a_row, a_col});
    dnnl::memory::desc b_md(dims{k, n}, type, dims{b_row, b_col});
    dnnl::memory::desc c_md(dims{m, n}, dt::f32, dims{ldc, 1});
    Matmul product = cached(Key{kind, m, n, k, a_row, a_col, b_row, b_col, ldc}, a_md, b_md, c_md);
    omp_set_num_threads(1);
    run(product, a_md, a, b_md, b, c_md, c);
  });
}
}  // namespace

void bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_row, int64_t a_col, const uint16_t* b,
               int64_t b_row, int64_t b_col, float* c, int64_t ldc) {
  strided_gemm("matmul (bf16)", 1, dt::bf16, m, n, k, a, a_row, a_col, b, b_row, b_col, c, ldc);
}

void f32_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b,
              int64_t b_row, int64_t b_col, float* c, int64_t ldc) {
  strided_gemm("matmul (few rows)", 3, dt::f32, m, n, k, a, a_row, a_col, b, b_row, b_col, c, ldc);
}

}  // namespace seqgrad::onednn

namespace seqgrad::cpu {

const Int8Kernels& int8_onednn_kernels() {
  static const Int8Kernels kernels{.name = "onednn",
                                   .saturates = [] { return !onednn::cpu_has_vnni(); },
                                   .gemm = onednn::int8_gemm,
                                   .packed_bytes = onednn::int8_packed_bytes,
                                   .pack = onednn::pack_int8_weights,
                                   .unpack = onednn::unpack_int8_weights,
                                   .gemm_packed = onednn::int8_gemm_packed};
  return kernels;
}

}  // namespace seqgrad::cpu
