// Per-op overhead: y = x * 1.0 on a 1-element tensor that requires grad (the mul_scalar op), timed
// as forward without recording, forward with recording, and forward + backward. Median (and min)
// over repeats of blocks of iterations; prints nanoseconds per iteration. Not a test: a record of
// the framework's fixed cost per op, compared side by side with the same loop in
//   op_overhead_libtorch.cpp (PyTorch's C++ API; needs libtorch-dev):
//     g++ -std=c++17 -O2 -I/usr/include/torch/csrc/api/include op_overhead_libtorch.cpp \
//         -ltorch -ltorch_cpu -lc10 -o op_overhead_libtorch
//   op_overhead.py (PyTorch from Python): /usr/bin/python3 op_overhead.py
// Build this one with `ninja -C BUILD tests/parity/overhead/op_overhead`; run all three with
// OMP_NUM_THREADS=1 on an otherwise idle machine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "ops/ops.h"

using namespace seqgrad;

template <class F>
void measure(const char* label, F&& body, int block = 2000, int repeats = 41) {
  std::vector<double> ns;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < block; ++i) body();
    auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / block);
  }
  std::sort(ns.begin(), ns.end());
  std::printf("seqgrad %-28s median %8.0f ns   min %8.0f ns\n", label, ns[ns.size() / 2], ns[0]);
}

int main() {
  Tensor x = ones({1}, {.requires_grad = true});
  measure("forward, no grad", [&] { NoGradGuard g; Tensor y = x * 1.0; });
  measure("forward, recording", [&] { Tensor y = x * 1.0; });
  measure("forward + backward", [&] {
    Tensor y = x * 1.0;
    y.backward();
    x.zero_grad();
  });
  return 0;
}
