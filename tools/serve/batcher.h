// Continuous batching: HTTP threads submit jobs (one request's sentences) and wait on a future; one
// decode thread keeps a models::ContinuousSearch per served model, adds the queued jobs' sentences
// to it at every step boundary and hands each sentence back as soon as it finishes, so concurrent
// requests share every decoder step and none waits for another's longer sentences. Explained jobs
// (the explorer's) decode step by step too, in a search of their own per model stepped at every
// other turn while plain sentences decode, one at a time; their beam trees are recorded and their
// attention internals computed one step per turn once they finish. So they share the batch budget
// and never hold the others up for a whole search or pass.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "models/seq2seq/continuous_search.h"
#include "tools/serve/metrics.h"
#include "tools/translator.h"

namespace seqgrad::tools::serve {

// What the decoder holds at once. Sentences and source tokens bound what joins a batch (a job above
// them decodes alone); decoder rows and search-state bytes bound everything: a job above either is
// refused when submitted (RequestError 413 naming the limit), so no request can take more.
struct BatchLimits {
  int64_t max_sentences = 32;  // sentences decoded together at most
  int64_t max_tokens = 2048;   // their source tokens at most
  int64_t max_rows = 512;      // their decoder rows (sentences x beam) at most
  int64_t max_cache_bytes = int64_t{512} << 20;  // their search state (models::search_state_bytes) at most
  int64_t max_explaining = 1;  // explained jobs decoding at once (the others wait without holding up the queue)
  // An idle decoder waits this long after a job arrives for others to start with it; a busy one
  // adds arriving jobs at its next step.
  std::chrono::milliseconds max_wait{5};
  int64_t queue_sentences = 256;  // sentences waiting at most; more are refused (503)
};

// One request's sentences for one model, checked (they tokenize, within the length limit).
struct Job {
  size_t model = 0;  // index into the served models
  models::DecodeOptions options;
  // translations with their beam trees and attention internals (the search records the trees; the
  // internals are computed for each finished sentence)
  bool explain = false;
  // not empty (with explain): one output per sentence, replayed through the model instead of
  // searched (models::replay_batch) between two steps of the others, for comparing another model's
  // translation with this one's attention
  std::vector<models::ForcedOutput> forced;
  std::vector<std::string> src;
  std::vector<std::vector<std::string>> src_tokens;  // per sentence, as the source vocabulary tokenizes it
  int64_t tokens = 0;                                // their source tokens, for --max-batch-tokens
  // set by Batcher::submit: decoder rows (sentences x beam) and search-state bytes per sentence,
  // and their sums
  std::vector<int64_t> sentence_bytes;
  int64_t rows = 0, cache_bytes = 0;
  std::vector<Translation> translations;             // one per src, once done
  std::promise<void> done;  // set once translations are there, or with the decoding's exception
  std::chrono::steady_clock::time_point queued;
};

// What the batcher decodes with: a served model and its checkpoint's vocabularies and settings.
struct BatchModel {
  models::TranslationModel* model;
  const models::CheckpointInfo* info;
};

class Batcher {
 public:
  Batcher(std::vector<BatchModel> models, const BatchLimits& limits, Metrics& metrics);
  ~Batcher();  // stop()
  // Queues the job; false (and nothing queued) when the queue has no room for its sentences.
  // Throws RequestError (413, naming the limit and the job's value) for a job whose decoder rows or
  // search state exceed the whole budget (BatchLimits::max_rows, max_cache_bytes).
  bool submit(const std::shared_ptr<Job>& job);
  // Decodes what is queued and running, then ends the decode thread.
  void stop();

 private:
  // A sentence in a search: its job and its place there.
  struct Place {
    std::shared_ptr<Job> job;
    size_t index;
  };
  // What the searches hold, against BatchLimits.
  struct Load {
    int64_t sentences = 0, tokens = 0, rows = 0, bytes = 0, explaining = 0;
  };
  // A search of one model: its plain jobs', or its explained jobs'.
  struct Running {
    size_t model;
    bool explained;
    std::unique_ptr<models::ContinuousSearch> search;
    std::map<int64_t, Place> places;                     // by the search's sentence id
    std::map<std::shared_ptr<Job>, size_t> remaining;  // sentences of each job still decoding
  };

  void run();
  bool decoding() const;  // any search has live sentences
  std::vector<std::shared_ptr<Job>> take_jobs(std::unique_lock<std::mutex>& lock);
  void start(const std::shared_ptr<Job>& job);
  void replay(const std::shared_ptr<Job>& job);
  void step(Running& running);
  void release(const Place& place);
  void answer(Running& running, const std::shared_ptr<Job>& job, std::exception_ptr error);
  void explain_step();
  void done(const std::shared_ptr<Job>& job, std::exception_ptr error);
  void fail(Running& running, std::exception_ptr error);
  void check_budget(const Job& job) const;

  std::vector<BatchModel> models_;
  const BatchLimits limits_;
  Metrics& metrics_;
  std::vector<Running> running_;  // per model, plain then explained; touched by the decode thread only
  int64_t turn_ = 0;              // the decode loop's turns
  // An explained job whose search is done, and the passes computing its translations' internals.
  struct Explaining {
    std::shared_ptr<Job> job;
    std::vector<std::unique_ptr<models::InternalsPass>> passes;
  };
  Load live_;  // in the searches; touched by the decode thread only
  std::vector<Explaining> explaining_;  // likewise
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Job>> queue_;
  int64_t queued_sentences_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace seqgrad::tools::serve
