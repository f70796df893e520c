// Continuous batching of the requests' sentences (tools/serve/batcher.h).
#include "tools/serve/batcher.h"

#include <fmt/core.h>

#include "models/seq2seq/data.h"

namespace seqgrad::tools::serve {

using Clock = std::chrono::steady_clock;

Batcher::Batcher(std::vector<BatchModel> models, const BatchLimits& limits, Metrics& metrics)
    : models_(std::move(models)), limits_(limits), metrics_(metrics), running_(models_.size()) {
  metrics_.set_batch_capacity(limits_.max_sentences);
  for (size_t m = 0; m < models_.size(); ++m)
    running_[m].search = std::make_unique<models::ContinuousSearch>(*models_[m].model);
  thread_ = std::thread([this] { run(); });
}

Batcher::~Batcher() { stop(); }

bool Batcher::submit(const std::shared_ptr<Job>& job) {
  const auto sentences = static_cast<int64_t>(job->src.size());
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || queued_sentences_ + sentences > limits_.queue_sentences) return false;
    job->queued = Clock::now();
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

bool Batcher::decoding() const { return live_sentences_ > 0; }

// Between two steps: the queued jobs that join (an idle decoder first waits for company, see
// BatchLimits::max_wait), then one step of every model's search.
void Batcher::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (!decoding()) {
      changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything is decoded
    }
    std::vector<std::shared_ptr<Job>> joining = take_jobs(lock);
    lock.unlock();
    for (const std::shared_ptr<Job>& job : joining) job->explain ? explain(job) : start(job);
    metrics_.set_decoding(live_sentences_);
    for (size_t m = 0; m < running_.size(); ++m)
      if (!running_[m].search->empty()) step(m);
    metrics_.set_decoding(live_sentences_);
    lock.lock();
  }
}

// The queued jobs, oldest first, that fit beside the sentences decoding (within max_sentences and
// max_tokens; a job alone always fits). A later job never passes one that does not fit, so a long
// request is not starved by short ones. An idle decoder waits until the oldest job has waited
// max_wait or the jobs fill the limits (not when stopping: finish quickly).
std::vector<std::shared_ptr<Job>> Batcher::take_jobs(std::unique_lock<std::mutex>& lock) {
  const bool idle = !decoding();
  for (;;) {
    std::vector<std::shared_ptr<Job>> taken;
    int64_t sentences = live_sentences_, tokens = live_tokens_;
    bool full = false;
    for (const std::shared_ptr<Job>& job : queue_) {
      const auto n = static_cast<int64_t>(job->src.size());
      const bool nothing_yet = sentences == 0;
      if (!nothing_yet && (sentences + n > limits_.max_sentences || tokens + job->tokens > limits_.max_tokens)) {
        full = true;
        break;
      }
      taken.push_back(job);
      sentences += n;
      tokens += job->tokens;
    }
    full = full || sentences >= limits_.max_sentences || tokens >= limits_.max_tokens;
    if (queue_.empty() || !idle || full || stopping_ || Clock::now() >= queue_.front()->queued + limits_.max_wait) {
      const auto now = Clock::now();
      for (const std::shared_ptr<Job>& job : taken) {
        queue_.pop_front();  // taken is the queue's front, in order
        queued_sentences_ -= static_cast<int64_t>(job->src.size());
        metrics_.job_started(std::chrono::duration<double>(now - job->queued).count());
      }
      metrics_.set_queue_length(queued_sentences_);
      return taken;
    }
    changed_.wait_until(lock, queue_.front()->queued + limits_.max_wait);
  }
}

// The job's sentences join its model's search (its decoding options validated there); a job the
// search refuses is answered with the search's error.
void Batcher::start(const std::shared_ptr<Job>& job) {
  Running& running = running_[job->model];
  const models::CheckpointInfo& info = *models_[job->model].info;
  std::vector<int64_t> added;
  try {
    std::vector<std::vector<int64_t>> ids;
    for (const std::vector<std::string>& tokens : job->src_tokens)
      ids.push_back(models::encode_sentence(info.src_vocab, tokens, 0));
    added = running.search->add(ids, job->options);
  } catch (...) {
    job->done.set_exception(std::current_exception());
    return;
  }
  job->translations.resize(job->src.size());
  for (size_t i = 0; i < added.size(); ++i) {
    running.places[added[i]] = {job, i};
    job->translations[i].src_tokens = job->src_tokens[i];
  }
  running.remaining[job] = added.size();
  live_sentences_ += static_cast<int64_t>(added.size());
  live_tokens_ += job->tokens;
}

// An explained job is decoded by itself: the beam tree and the attention internals come from the
// batch search (translate_batch), which the continuous search does not record; a forced one is
// replayed (replay_batch) on this thread too, as the model keeps its last attention in its modules.
void Batcher::explain(const std::shared_ptr<Job>& job) {
  const BatchModel& m = models_[job->model];
  try {
    job->translations = job->forced.empty()
                            ? translate_batch(*m.model, *m.info, job->src, job->options, 0, nullptr, true)
                            : models::replay_batch(*m.model, *m.info, job->src, job->forced, job->options, 0);
  } catch (...) {
    job->done.set_exception(std::current_exception());
    return;
  }
  metrics_.sentences_done(static_cast<int64_t>(job->src.size()));
  job->done.set_value();
}

// One step of the model's search; each finished sentence goes to its job, and a job whose
// sentences have all finished is answered.
void Batcher::step(size_t model) {
  Running& running = running_[model];
  metrics_.step_decoded(running.search->sentences());
  std::vector<models::ContinuousSearch::Finished> finished;
  try {
    finished = running.search->step();
  } catch (...) {
    fail(model, std::current_exception());
    return;
  }
  const text::Vocab& tgt_vocab = models_[model].info->tgt_vocab;
  for (models::ContinuousSearch::Finished& f : finished) {
    const Place place = running.places.extract(f.id).mapped();
    Translation& t = place.job->translations[place.index];
    t.hyps = std::move(f.hyps);
    for (const models::Hypothesis& h : t.hyps) t.out_tokens.push_back(tgt_vocab.decode(h.tokens));
    --live_sentences_;
    live_tokens_ -= static_cast<int64_t>(t.src_tokens.size());
    metrics_.sentences_done(1);
    if (--running.remaining[place.job] > 0) continue;
    running.remaining.erase(place.job);
    place.job->done.set_value();
  }
}

// The search failed (an internal error): its jobs get the error, and it starts afresh.
void Batcher::fail(size_t model, std::exception_ptr error) {
  Running& running = running_[model];
  for (const auto& [job, remaining] : running.remaining) {
    job->done.set_exception(error);
    live_sentences_ -= static_cast<int64_t>(remaining);
  }
  for (const auto& [id, place] : running.places)
    live_tokens_ -= static_cast<int64_t>(place.job->src_tokens[place.index].size());
  running = Running{std::make_unique<models::ContinuousSearch>(*models_[model].model), {}, {}};
}

}  // namespace seqgrad::tools::serve
