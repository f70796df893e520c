// Thread count for OpenBLAS and seqgrad's own OpenMP loops (default: all cores).
#pragma once
#include <cstdint>

namespace seqgrad {

void set_num_threads(int n);
int get_num_threads();

// Runs body(begin, end) over [0, n) split across threads when n is at least `grain`.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& body) {
  int threads = get_num_threads();
  if (n < 2 * grain || threads <= 1) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  int64_t chunks = n / grain < threads ? n / grain : threads;
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    body(begin, end);
  }
}

}  // namespace seqgrad
