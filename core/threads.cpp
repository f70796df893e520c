// The thread pool behind parallel_for (see threads.h for why it is not OpenMP).
#include "core/threads.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "core/blas.h"
#include "core/error.h"

namespace seqgrad {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

thread_local bool inside_parallel = false;

// One job at a time. `state_` packs the job's generation (high 32 bits), its number of chunks
// (16 bits) and the next unclaimed chunk (low 16 bits): a helper claims chunk i of generation g
// with one compare-exchange, which fails once the caller has moved on, so a late helper never
// touches a finished job. The chunk count lives in the same word because a count read apart from
// it could be the next job's, published before its generation: a helper holding the old word would
// then claim a chunk past the old job's end and run it with the next job's half-written fields.
class Pool {
 public:
  // Starts up to `helpers` threads. When the system refuses one, the thread limit or the address
  // space (`ulimit -v`: 8 MiB of stack each) is exhausted; the pool works with any number of
  // helpers, so it keeps half of those that started and leaves the rest of the room to the program.
  explicit Pool(int helpers) {
    try {
      for (int i = 0; i < helpers; ++i) threads_.emplace_back([this, i] { work(i); });
    } catch (const std::system_error& e) {
      const int started = static_cast<int>(threads_.size());
      retire_from(started / 2);
      fmt::print(stderr, "warning: threads: could only start {} of {} threads ({}); using {}\n", started + 1,
                 helpers + 1, e.what(), size());
    }
  }
  int size() const { return static_cast<int>(threads_.size()) + 1; }  // helpers and the caller

  ~Pool() {
    stop_.store(true);
    state_.fetch_add(uint64_t{1} << 32);
    state_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void run(int64_t n, int64_t chunks, int64_t align, detail::RangeFn fn, void* ctx) {
    chunks = std::min<int64_t>(chunks, kMaxChunks);
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    n_.store(n, std::memory_order_relaxed);
    chunks_.store(chunks, std::memory_order_relaxed);
    align_.store(align, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    uint64_t gen = (state_.load(std::memory_order_relaxed) >> 32) + 1;
    state_.store(gen << 32 | static_cast<uint64_t>(chunks) << 16);  // publish (seq_cst: pairs with sleepers_ below)
    if (sleepers_.load() > 0) state_.notify_all();
    int64_t mine = 0;
    for (;;) {  // the caller works through the chunks like any helper
      int64_t c = claim(gen);
      if (c < 0) break;
      guarded(c);
      ++mine;
    }
    // Wait only for chunks a helper has claimed and is running.
    int64_t spins = 0;
    while (done_.load(std::memory_order_acquire) + mine < chunks) {
      if (++spins < 4000) cpu_relax();
      else std::this_thread::yield();
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  // Stops and joins helpers [keep, end). Only before the first job: no chunk is left to claim.
  void retire_from(int keep) {
    keep_.store(keep);
    state_.fetch_add(uint64_t{1} << 32);  // wakes sleepers; no job has chunks yet, so nothing gets claimed
    state_.notify_all();
    for (size_t i = keep; i < threads_.size(); ++i) threads_[i].join();
    threads_.resize(keep);
  }

  // Claims the next chunk of generation `gen`; -1 when none is left or the job is over.
  int64_t claim(uint64_t gen) {
    uint64_t s = state_.load(std::memory_order_acquire);
    for (;;) {
      if ((s >> 32) != gen) return -1;
      const int64_t next = static_cast<int64_t>(s & 0xffff), chunks = static_cast<int64_t>((s >> 16) & 0xffff);
      if (next >= chunks) return -1;
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) return next;
    }
  }

  void execute(int64_t c) {
    const int64_t n = n_.load(std::memory_order_relaxed), chunks = chunks_.load(std::memory_order_relaxed);
    const int64_t align = align_.load(std::memory_order_relaxed);
    auto bound = [&](int64_t i) {
      if (i >= chunks) return n;
      int64_t b = static_cast<int64_t>(static_cast<__int128>(n) * i / chunks);
      return b / align * align;
    };
    int64_t begin = bound(c), end = bound(c + 1);
    if (begin < end) fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), begin, end);
  }

  // Runs a chunk; the first exception is kept for the caller to rethrow once every chunk is done
  // (kernels validate before they split, so this is a safety net, not a code path).
  void guarded(int64_t c) {
    try {
      execute(c);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }

  void work(int index) {
    inside_parallel = true;
    uint64_t seen = 0;  // the last generation this helper looked at
    while (!stop_.load(std::memory_order_relaxed) && index < keep_.load(std::memory_order_relaxed)) {
      uint64_t s = state_.load(std::memory_order_acquire);
      if ((s >> 32) == seen) {  // no new job: spin a little, then sleep until one is published
        bool fresh = false;
        for (int i = 0; i < 20000 && !fresh; ++i) {
          cpu_relax();
          fresh = (state_.load(std::memory_order_acquire) >> 32) != seen;
        }
        if (!fresh) {
          sleepers_.fetch_add(1);
          s = state_.load();
          while ((s >> 32) == seen && !stop_.load()) {
            state_.wait(s);
            s = state_.load();
          }
          sleepers_.fetch_sub(1);
        }
        continue;
      }
      seen = s >> 32;
      for (;;) {
        int64_t c = claim(seen);
        if (c < 0) break;
        guarded(c);
        done_.fetch_add(1, std::memory_order_release);
      }
    }
  }

  static constexpr int64_t kMaxChunks = 0xffff;  // parallel_for asks for at most 4 per thread
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> state_{0};
  std::atomic<detail::RangeFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int64_t> n_{0}, chunks_{0}, align_{1}, done_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> keep_{std::numeric_limits<int>::max()};  // helpers with a higher index exit
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

int num_threads = 0;  // 0: not chosen yet, use all cores
std::unique_ptr<Pool> pool;
std::mutex pool_mutex;  // one job at a time; a second caller runs its loop serially

}  // namespace

void set_num_threads(int n) {
  SG_CHECK_VALUE(n >= 1, "set_num_threads: n = {} must be at least 1", n);
  std::lock_guard<std::mutex> lock(pool_mutex);
  if (n != num_threads) pool.reset();
  num_threads = n;
  blas::set_num_threads(1);  // GEMMs are split across this pool (ops/cpu/gemm.cpp)
}

int get_num_threads() {
  if (num_threads == 0) num_threads = available_cores();
  return num_threads;
}

namespace detail {

void parallel_run(int64_t n, int64_t chunks, int64_t align, RangeFn fn, void* ctx) {
  std::unique_lock<std::mutex> lock(pool_mutex, std::try_to_lock);
  if (inside_parallel || !lock.owns_lock() || chunks < 2) {
    fn(ctx, 0, n);
    return;
  }
  if (!pool) {
    pool = std::make_unique<Pool>(get_num_threads() - 1);
    num_threads = pool->size();  // fewer when thread creation failed
  }
  inside_parallel = true;
  try {
    pool->run(n, chunks, std::max<int64_t>(align, 1), fn, ctx);
  } catch (...) {
    inside_parallel = false;
    throw;
  }
  inside_parallel = false;
}

}  // namespace detail
}  // namespace seqgrad
