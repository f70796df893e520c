// libtorch (C++) side of op_overhead.cpp: the same loops, same statistics, no Python.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

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
  std::printf("libtorch %-27s median %8.0f ns   min %8.0f ns\n", label, ns[ns.size() / 2], ns[0]);
}

int main() {
  at::set_num_threads(1);
  torch::Tensor x = torch::ones({1}, torch::requires_grad());
  measure("forward, no grad", [&] { torch::NoGradGuard g; torch::Tensor y = x * 1.0; });
  measure("forward, recording", [&] { torch::Tensor y = x * 1.0; });
  measure("forward + backward", [&] {
    torch::Tensor y = x * 1.0;
    y.backward();
    x.mutable_grad().reset();
  });
  return 0;
}
