// The thread pool behind parallel_for: every index of every job runs exactly once, also when jobs
// of different sizes follow each other as fast as they can (a helper still holding the previous
// job must never run a chunk of it, or of the next one, twice).
#include <doctest/doctest.h>

#include <atomic>
#include <vector>

#include "core/threads.h"

using namespace seqgrad;

TEST_CASE("parallel_for: back-to-back jobs of changing sizes each run every index exactly once") {
  const int saved = get_num_threads();
  for (int threads : {2, 3, 8}) {
    set_num_threads(threads);
    int64_t wrong = 0, jobs = 0;
    const int64_t sizes[] = {2, 40, 3, 64, 5, 17};  // the chunk count changes from job to job
    for (int round = 0; round < 20000; ++round) {
      for (int64_t n : sizes) {
        std::vector<std::atomic<int>> hits(n);
        parallel_for(n, 1, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
        });
        for (const auto& h : hits) wrong += h.load() != 1;
        ++jobs;
      }
    }
    CHECK_MESSAGE(wrong == 0, threads << " threads: " << wrong << " indices not run exactly once in " << jobs
                                      << " jobs");
  }
  set_num_threads(saved);
}
