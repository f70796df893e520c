// Dynamic batching: HTTP threads submit jobs (one request's sentences) and wait on a future; one
// decode thread takes the queued jobs that share a model and decoding options and decodes their
// sentences as one batch, so concurrent requests cost about one decode instead of several.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tools/serve/metrics.h"
#include "tools/translation.h"

namespace seqgrad::tools::serve {

struct BatchLimits {
  int64_t max_sentences = 32;  // sentences per batch
  int64_t max_tokens = 2048;   // source tokens per batch
  std::chrono::milliseconds max_wait{5};  // how long a job waits for others to join its batch
  int64_t queue_sentences = 256;          // sentences waiting at most; more are refused (503)
};

// One request's sentences for one model, tokenized and checked; decoded in place.
struct Job {
  size_t model = 0;  // index into the served models
  models::DecodeOptions options;
  std::vector<Translation> translations;
  std::promise<void> done;  // set once translations hold hypotheses, or with the decoding's exception
  std::chrono::steady_clock::time_point queued;
  int64_t tokens() const;
};

class Batcher {
 public:
  Batcher(std::vector<LoadedModel*> models, const BatchLimits& limits, Metrics& metrics);
  ~Batcher();  // stop()
  // Queues the job; false (and nothing queued) when the queue has no room for its sentences.
  bool submit(const std::shared_ptr<Job>& job);
  // Decodes what is queued, then ends the decode thread.
  void stop();

 private:
  void run();
  std::vector<std::shared_ptr<Job>> next_batch(std::unique_lock<std::mutex>& lock);
  void decode(const std::vector<std::shared_ptr<Job>>& batch);

  std::vector<LoadedModel*> models_;
  const BatchLimits limits_;
  Metrics& metrics_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Job>> queue_;
  int64_t queued_sentences_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace seqgrad::tools::serve
