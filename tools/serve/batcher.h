// Dynamic batching: HTTP threads submit jobs (one request's sentences) and wait on a future; one
// decode thread takes the queued jobs that share a model and decoding options and decodes their
// sentences as one batch, so concurrent requests cost about one decode instead of several.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <string>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tools/serve/metrics.h"
#include "tools/translator.h"

namespace seqgrad::tools::serve {

struct BatchLimits {
  int64_t max_sentences = 32;  // sentences per batch
  int64_t max_tokens = 2048;   // source tokens per batch
  std::chrono::milliseconds max_wait{5};  // how long a job waits for others to join its batch
  int64_t queue_sentences = 256;          // sentences waiting at most; more are refused (503)
};

// One request's sentences for one model, checked (they tokenize, within the length limit).
struct Job {
  size_t model = 0;  // index into the served models
  models::DecodeOptions options;
  bool explain = false;  // translations with their beam trees and attention internals (translate_batch)
  std::vector<std::string> src;
  int64_t tokens = 0;                      // their source tokens, for --max-batch-tokens
  std::vector<Translation> translations;   // one per src, once done
  std::promise<void> done;  // set once translations are there, or with the decoding's exception
  std::chrono::steady_clock::time_point queued;
};

// Translates sentences with one served model (tools::translate_batch), as one batch.
using DecodeBatch = std::function<std::vector<Translation>(size_t model, const std::vector<std::string>& src,
                                                           const models::DecodeOptions& options, bool explain)>;

class Batcher {
 public:
  Batcher(DecodeBatch decode, const BatchLimits& limits, Metrics& metrics);
  ~Batcher();  // stop()
  // Queues the job; false (and nothing queued) when the queue has no room for its sentences.
  bool submit(const std::shared_ptr<Job>& job);
  // Decodes what is queued, then ends the decode thread.
  void stop();

 private:
  void run();
  std::vector<std::shared_ptr<Job>> next_batch(std::unique_lock<std::mutex>& lock);
  void decode(const std::vector<std::shared_ptr<Job>>& batch);

  DecodeBatch decode_batch_;
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
