// Threads for seqgrad's own loops and for splitting large GEMMs (OpenBLAS itself runs single-
// threaded inside each piece). Default: all cores the process may run on.
//
// Why not OpenMP: a fork-join region needs every thread of the team on a core at once. On a
// loaded machine (here: two cores shared by several processes) the second thread is often not
// scheduled, and each of the thousands of small regions in a training step then waits a scheduler
// time slice for it: a step measured 10-15x slower with 2 OpenMP threads than with 1. The pool
// below never waits for a helper that has not started: the calling thread claims chunks of the
// range itself, helpers join in when they get a core, and the caller only waits for chunks a
// helper has already claimed. Idle helpers spin briefly, then sleep on a futex.
#pragma once
#include <cstdint>
#include <type_traits>
#include <utility>

namespace seqgrad {

void set_num_threads(int n);
int get_num_threads();

namespace detail {
// body(ctx, begin, end) over chunks of [0, n); chunk boundaries are multiples of `align`.
using RangeFn = void (*)(void* ctx, int64_t begin, int64_t end);
void parallel_run(int64_t n, int64_t chunks, int64_t align, RangeFn fn, void* ctx);
}  // namespace detail

// Runs body(begin, end) over [0, n), split across threads when n is at least 2 * grain; each
// chunk holds at least `grain` items. Nested calls (from inside a body) run serially.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& body, int64_t align = 1) {
  int threads = get_num_threads();
  if (grain < 1) grain = 1;
  if (n < 2 * grain || threads <= 1) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  // A few chunks per thread: a helper that is descheduled holding one delays the end less.
  int64_t chunks = n / grain;
  if (chunks > 4 * threads) chunks = 4 * threads;
  using Body = std::remove_reference_t<F>;
  detail::parallel_run(
      n, chunks, align,
      [](void* ctx, int64_t begin, int64_t end) { (*static_cast<Body*>(ctx))(begin, end); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace seqgrad
