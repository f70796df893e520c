// Dynamic batching of the requests' sentences (tools/serve/batcher.h).
#include "tools/serve/batcher.h"

#include <fmt/core.h>

namespace seqgrad::tools::serve {
namespace {

// Jobs that may share a batch: the decoding runs once with one DecodeOptions for all its rows.
// (Every field of DecodeOptions; a request never samples, so `sampling` is unset in both.)
bool same_decoding(const Job& a, const Job& b) {
  const models::DecodeOptions &x = a.options, &y = b.options;
  return a.model == b.model && a.explain == b.explain && x.max_len == y.max_len && x.beam_size == y.beam_size &&
         x.length_penalty == y.length_penalty && x.length_penalty_kind == y.length_penalty_kind &&
         x.coverage_penalty == y.coverage_penalty && x.min_len == y.min_len && x.nbest == y.nbest &&
         x.sampling.has_value() == y.sampling.has_value() && !x.sampling && x.top_alternatives == y.top_alternatives &&
         x.bos_id == y.bos_id && x.eos_id == y.eos_id;
}

}  // namespace

Batcher::Batcher(DecodeBatch decode, const BatchLimits& limits, Metrics& metrics)
    : decode_batch_(std::move(decode)), limits_(limits), metrics_(metrics), thread_([this] { run(); }) {}

Batcher::~Batcher() { stop(); }

bool Batcher::submit(const std::shared_ptr<Job>& job) {
  const auto sentences = static_cast<int64_t>(job->src.size());
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || queued_sentences_ + sentences > limits_.queue_sentences) return false;
    job->queued = std::chrono::steady_clock::now();
    queue_.push_back(job);
    queued_sentences_ += sentences;
    metrics_.set_queue_length(queued_sentences_);
  }
  changed_.notify_all();
  return true;
}

void Batcher::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Batcher::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued is decoded
    std::vector<std::shared_ptr<Job>> batch = next_batch(lock);
    lock.unlock();
    decode(batch);
    lock.lock();
  }
}

// The oldest job and the queued jobs that may join it, within the limits. While there is room it
// waits for more until the oldest job has waited max_wait (not when stopping: finish quickly).
std::vector<std::shared_ptr<Job>> Batcher::next_batch(std::unique_lock<std::mutex>& lock) {
  const std::shared_ptr<Job> head = queue_.front();
  const auto deadline = head->queued + limits_.max_wait;
  for (;;) {
    std::vector<std::shared_ptr<Job>> batch;
    int64_t sentences = 0, tokens = 0;
    bool full = false;
    for (const std::shared_ptr<Job>& job : queue_) {
      if (!same_decoding(*head, *job)) continue;
      const auto n = static_cast<int64_t>(job->src.size());
      const int64_t t = job->tokens;
      if (!batch.empty() && (sentences + n > limits_.max_sentences || tokens + t > limits_.max_tokens)) {
        full = true;
        break;
      }
      batch.push_back(job);
      sentences += n;
      tokens += t;
    }
    full = full || sentences >= limits_.max_sentences || tokens >= limits_.max_tokens;
    if (full || stopping_ || std::chrono::steady_clock::now() >= deadline) {
      for (const std::shared_ptr<Job>& job : batch) std::erase(queue_, job);
      queued_sentences_ -= sentences;
      metrics_.set_queue_length(queued_sentences_);
      return batch;
    }
    changed_.wait_until(lock, deadline);
  }
}

// The batch's sentences decoded together, each job's translations handed back in its order.
void Batcher::decode(const std::vector<std::shared_ptr<Job>>& batch) {
  std::vector<std::string> src;
  for (const std::shared_ptr<Job>& job : batch) src.insert(src.end(), job->src.begin(), job->src.end());
  std::vector<Translation> done;
  try {
    done = decode_batch_(batch.front()->model, src, batch.front()->options, batch.front()->explain);
  } catch (...) {
    for (const std::shared_ptr<Job>& job : batch) job->done.set_exception(std::current_exception());
    return;
  }
  metrics_.batch_decoded(static_cast<int64_t>(src.size()));
  auto next = done.begin();
  for (const std::shared_ptr<Job>& job : batch) {
    job->translations.assign(std::make_move_iterator(next), std::make_move_iterator(next + job->src.size()));
    next += static_cast<std::ptrdiff_t>(job->src.size());
    job->done.set_value();
  }
}

}  // namespace seqgrad::tools::serve
