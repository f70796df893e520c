// The caching CPU allocator, and gradient accumulation in place (the engine's buffers, never one a
// caller can see).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "core/autograd.h"
#include "ops/ops.h"
#include "tests/check_values.h"

using namespace seqgrad;

namespace {
constexpr TensorOptions kF64 = {.dtype = DType::f64};

using testing::check_values;
}  // namespace

TEST_CASE("allocator: 64-byte aligned blocks, reused by size class") {
  for (size_t bytes : {size_t{1}, size_t{64}, size_t{100}, size_t{4096}, size_t{5000}, size_t{1} << 20}) {
    void* p = cpu_memory::allocate(bytes);
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    std::vector<char> pattern(bytes, 'x');
    std::copy(pattern.begin(), pattern.end(), static_cast<char*>(p));  // the whole block is writable
    cpu_memory::deallocate(p, bytes);
    void* q = cpu_memory::allocate(bytes);  // the freed block of this class comes back
    if (cpu_memory::caching()) CHECK(q == p);
    cpu_memory::deallocate(q, bytes);
  }
  void* a = cpu_memory::allocate(3 << 20);
  cpu_memory::Stats s = cpu_memory::stats();
  if (cpu_memory::caching()) {
    CHECK(s.in_use >= size_t{3} << 20);
    CHECK(s.peak_in_use >= s.in_use);
  }
  cpu_memory::deallocate(a, 3 << 20);
  cpu_memory::empty_cache();
  CHECK(cpu_memory::stats().cached == 0);
}

TEST_CASE("tensors of one shape reuse storage without stale values leaking into factories") {
  Tensor a = full({1000}, 7.0);
  const void* p = a.raw_data();
  a = Tensor();
  Tensor b = zeros({1000});
  if (cpu_memory::caching()) CHECK(b.raw_data() == p);
  check_values(b.sum(), {0.0});
}

TEST_CASE("gradients accumulate in place only in buffers nobody else holds") {
  Tensor x = tensor({1, 2, 3}, kF64).requires_grad_();
  sum(mul(x, x)).backward();  // 2x
  Tensor held = x.grad();     // the caller keeps the first gradient
  std::vector<double> before = held.to_vector<double>();
  sum(mul(x, x)).backward();  // accumulates: must not write into `held`
  check_values(held, before);
  check_values(x.grad(), {4, 8, 12});
  held = Tensor();
  const void* storage = x.grad().raw_data();
  sum(mul(x, 3.0)).backward();  // now the engine owns x.grad alone: updated in place
  check_values(x.grad(), {7, 11, 15});
  CHECK(x.grad().raw_data() == storage);
}

TEST_CASE("a weight used at every step gets the summed gradient through its accumulator") {
  // y = Σ_t x_t · W: linear and matmul add each step's dW into one buffer (GEMM, beta = 1)
  Tensor w = tensor({1, 2, 3, 4, 5, 6}, {3, 2}, kF64).requires_grad_();  // (out 3, in 2)
  Tensor x1 = tensor({1, -1}, {1, 2}, kF64), x2 = tensor({0.5, 2}, {1, 2}, kF64);
  Tensor loss = sum(linear(x1, w)) + sum(linear(x2, w)) + sum(matmul(x1, w.t()));
  loss.backward();
  // dW[o] = x1 + x2 + x1 for every output row o
  check_values(w.grad(), {2.5, 0, 2.5, 0, 2.5, 0});
  // second order still composes (create_graph takes the out-of-place path)
  Tensor v = tensor({0.3, -0.7}, {1, 2}, kF64).requires_grad_();
  Tensor y = sum(mul(linear(v, w), linear(v, w)));
  Tensor gv = autograd::grad({y}, {v}, {}, {.create_graph = true})[0];
  sum(gv).backward();
  CHECK(v.grad().defined());
}
