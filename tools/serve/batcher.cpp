// Continuous batching of the requests' sentences (tools/serve/batcher.h).
#include "tools/serve/batcher.h"

#include <malloc.h>

#include <algorithm>

#include <fmt/core.h>

#include "core/allocator.h"
#include "models/seq2seq/data.h"
#include "tools/serve/request.h"

namespace seqgrad::tools::serve {

using Clock = std::chrono::steady_clock;

namespace {

constexpr double kMiB = 1 << 20;
// An idle decoder returns cached memory after this long without work, and at most this often
// while work comes and goes.
constexpr std::chrono::milliseconds kReleaseAfter{200};

// What the last requests left cached goes back to the system: the tensors' size-class cache
// (every batch shape a burst decoded keeps its blocks) and the free pages of the C allocator's
// per-thread arenas (the HTTP threads' bodies and answers: an explain answer's JSON is megabytes),
// which glibc otherwise keeps at each arena's high-water mark. Else resident memory climbs to the
// peak of the busiest moment and stays there.
void return_cached_memory() {
  cpu_memory::empty_cache();
  malloc_trim(0);
}

// A request's large buffers (its body, up to --max-body-bytes, the parsed copy, an answer's text)
// each get a mapping of their own, unmapped when freed. glibc's threshold otherwise rises to the
// largest block freed so far, after which such buffers come from the HTTP threads' arenas, which
// keep their pages: 80 bodies of 400 KB grew the server by 50 MB.
constexpr int kMapFrom = 128 << 10;
// At most two malloc arenas: glibc gives each of the many HTTP and compute threads an arena of its
// own (up to 8 per core), and what a request leaves in one stays there, fragmented. In the soak
// (bench/serve_load.py --soak 1000, the int8 Transformer with a SentencePiece vocabulary) resident
// memory grew 21% after warm-up with glibc's default and 4.8% with two arenas.
constexpr int kArenas = 2;

}  // namespace

Batcher::Batcher(std::vector<BatchModel> models, const BatchLimits& limits, Metrics& metrics)
    : models_(std::move(models)), limits_(limits), metrics_(metrics) {
  mallopt(M_MMAP_THRESHOLD, kMapFrom);
  mallopt(M_ARENA_MAX, kArenas);
  metrics_.set_batch_capacity(limits_.max_sentences);
  for (size_t m = 0; m < models_.size(); ++m)
    for (bool explained : {false, true})
      running_.push_back({m, explained, std::make_unique<models::ContinuousSearch>(*models_[m].model), {}, {}});
  thread_ = std::thread([this] { run(); });
}

Batcher::~Batcher() { stop(); }

// The job's rows and search state (a sentence's <eos> is one more source token) against the whole
// budget: what does not fit an empty decoder is refused, whatever else is decoding.
void Batcher::check_budget(const Job& job) const {
  const std::string field = job.options.beam_size > 1 ? "beam" : "src";
  const std::string shape = fmt::format("{} sentence{} x beam {}", job.src.size(), job.src.size() == 1 ? "" : "s",
                                        job.options.beam_size);
  if (job.rows > limits_.max_rows)
    throw RequestError(413, field, fmt::format("the request needs {} decoder rows ({}), more than the server decodes "
                                               "at once (--max-batch-rows {}): send fewer sentences or a smaller beam",
                                               job.rows, shape, limits_.max_rows));
  if (job.cache_bytes > limits_.max_cache_bytes)
    throw RequestError(413, field, fmt::format("the request's search state takes up to {:.1f} MiB ({}, {} output "
                                               "tokens at most), more than the server holds at once "
                                               "(--max-batch-cache-mb {:.0f}): send fewer or shorter sentences, a "
                                               "smaller beam or max_len", job.cache_bytes / kMiB, shape,
                                               job.options.max_len, limits_.max_cache_bytes / kMiB));
}

bool Batcher::submit(const std::shared_ptr<Job>& job) {
  const auto sentences = static_cast<int64_t>(job->src.size());
  const models::Seq2SeqConfig& config = models_[job->model].info->config.model;
  const int64_t beam = job->forced.empty() ? job->options.beam_size : 1;
  job->rows = sentences * beam;
  job->sentence_bytes.clear();
  job->cache_bytes = 0;
  for (const std::vector<std::string>& tokens : job->src_tokens) {
    const int64_t positions = job->forced.empty() ? job->options.max_len : job->options.max_len + 1;
    job->sentence_bytes.push_back(
        models::search_state_bytes(config, beam, static_cast<int64_t>(tokens.size()) + 1, positions));
    job->cache_bytes += job->sentence_bytes.back();
  }
  check_budget(*job);
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

bool Batcher::decoding() const { return live_.sentences > 0 || !explaining_.empty(); }

// Between two steps: the queued jobs that join (an idle decoder first waits for company, see
// BatchLimits::max_wait), then one step of every model's search.
void Batcher::run() {
  std::unique_lock lock(mutex_);
  auto released = Clock::now();
  bool busy_since_release = false;
  for (;;) {
    if (!decoding()) {
      const auto arrived = [this] { return stopping_ || !queue_.empty(); };
      if (busy_since_release && (Clock::now() - released >= kReleaseAfter ||
                                 !changed_.wait_for(lock, kReleaseAfter, arrived))) {
        lock.unlock();
        return_cached_memory();
        lock.lock();
        released = Clock::now(), busy_since_release = false;
      }
      changed_.wait(lock, arrived);
      if (queue_.empty()) return;  // stopping, and everything is decoded
      busy_since_release = true;
    }
    std::vector<std::shared_ptr<Job>> joining = take_jobs(lock);
    lock.unlock();
    for (const std::shared_ptr<Job>& job : joining) job->forced.empty() ? start(job) : replay(job);
    metrics_.set_decoding(live_.sentences);
    // explained jobs decode in searches of their own, stepped at every other turn while plain
    // sentences decode: an explain request's rows (up to --max-explain-beam at every step, many
    // times a plain request's work) then slow the others' steps by half as much
    const bool plain = std::any_of(running_.begin(), running_.end(),
                                   [](const Running& r) { return !r.explained && !r.search->empty(); });
    ++turn_;
    for (Running& running : running_)
      if (!running.search->empty() && (!running.explained || !plain || turn_ % 2 == 0)) step(running);
    explain_step();
    metrics_.set_decoding(live_.sentences);
    lock.lock();
  }
}

// The queued jobs, oldest first, that fit beside what is decoding: within max_rows and
// max_cache_bytes (every job fits those alone: submit refused the others), and max_sentences and
// max_tokens (a job above those decodes alone). A later job never passes one that does not fit, so
// a long request is not starved by short ones; but explained jobs have a lane of their own, at
// most max_explaining decoding at once, and the others pass those that wait for it (an explain
// request is many times a plain one's work: a flood of them must not hold the others up). An idle
// decoder waits until the oldest job has waited max_wait or the jobs fill the limits (not when
// stopping: finish quickly).
std::vector<std::shared_ptr<Job>> Batcher::take_jobs(std::unique_lock<std::mutex>& lock) {
  const bool idle = !decoding();
  for (;;) {
    std::vector<std::shared_ptr<Job>> taken;
    Load load = live_;
    bool full = false;
    for (const std::shared_ptr<Job>& job : queue_) {
      if (job->explain && load.explaining >= limits_.max_explaining) continue;  // waits in its lane
      const auto n = static_cast<int64_t>(job->src.size());
      const bool nothing_yet = load.sentences == 0;
      const bool fits = load.rows + job->rows <= limits_.max_rows &&
                        load.bytes + job->cache_bytes <= limits_.max_cache_bytes &&
                        (nothing_yet || (load.sentences + n <= limits_.max_sentences &&
                                         load.tokens + job->tokens <= limits_.max_tokens));
      if (!fits) {
        full = true;
        break;
      }
      taken.push_back(job);
      load.sentences += n, load.tokens += job->tokens, load.rows += job->rows, load.bytes += job->cache_bytes;
      load.explaining += job->explain ? 1 : 0;
    }
    full = full || load.sentences >= limits_.max_sentences || load.tokens >= limits_.max_tokens ||
           load.rows >= limits_.max_rows;
    if (queue_.empty() || !idle || full || stopping_ || Clock::now() >= queue_.front()->queued + limits_.max_wait) {
      const auto now = Clock::now();
      for (const std::shared_ptr<Job>& job : taken) {
        queue_.erase(std::find(queue_.begin(), queue_.end(), job));
        queued_sentences_ -= static_cast<int64_t>(job->src.size());
        metrics_.job_started(std::chrono::duration<double>(now - job->queued).count());
      }
      metrics_.set_queue_length(queued_sentences_);
      return taken;
    }
    changed_.wait_until(lock, queue_.front()->queued + limits_.max_wait);
  }
}

// The job's sentences join its model's search (its decoding options validated there; an explained
// job's beam trees recorded); a job the search refuses is answered with the search's error.
void Batcher::start(const std::shared_ptr<Job>& job) {
  Running& running = running_[2 * job->model + (job->explain ? 1 : 0)];
  const models::CheckpointInfo& info = *models_[job->model].info;
  std::vector<int64_t> added;
  try {
    std::vector<std::vector<int64_t>> ids;
    for (const std::vector<std::string>& tokens : job->src_tokens)
      ids.push_back(models::encode_sentence(info.src_vocab, tokens, 0));
    added = running.search->add(ids, job->options, job->explain);
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
  live_.sentences += static_cast<int64_t>(added.size());
  live_.tokens += job->tokens;
  live_.rows += job->rows;
  live_.bytes += job->cache_bytes;
  live_.explaining += job->explain ? 1 : 0;
}

// A forced job (one sentence per side-by-side request, the explain limits keep it small) is
// replayed (replay_batch) on this thread between two steps: the model keeps its last attention in
// its modules, which the search's steps would overwrite from another thread.
void Batcher::replay(const std::shared_ptr<Job>& job) {
  const BatchModel& m = models_[job->model];
  try {
    job->translations = models::replay_batch(*m.model, *m.info, job->src, job->forced, job->options, 0);
  } catch (...) {
    job->done.set_exception(std::current_exception());
    return;
  }
  metrics_.sentences_done(static_cast<int64_t>(job->src.size()));
  job->done.set_value();
}

// One step of the model's search; each finished sentence goes to its job, and a job whose
// sentences have all finished is answered. A sentence whose step failed fails its job alone.
void Batcher::step(Running& running) {
  metrics_.step_decoded(running.search->sentences());
  std::vector<models::ContinuousSearch::Finished> finished;
  try {
    finished = running.search->step();
  } catch (...) {
    fail(running, std::current_exception());
    return;
  }
  const text::Vocab& tgt_vocab = models_[running.model].info->tgt_vocab;
  for (models::ContinuousSearch::Finished& f : finished) {
    const Place place = running.places.extract(f.id).mapped();
    release(place);
    if (!running.remaining.contains(place.job)) continue;  // its job failed already
    if (f.error) {
      answer(running, place.job, f.error);
      continue;
    }
    Translation& t = place.job->translations[place.index];
    t.hyps = std::move(f.hyps);
    t.beam_tree = std::move(f.beam_tree);
    for (const models::Hypothesis& h : t.hyps) t.out_tokens.push_back(tgt_vocab.decode(h.tokens));
    metrics_.sentences_done(1);
    if (--running.remaining[place.job] == 0) answer(running, place.job, nullptr);
  }
}

// A sentence has left the search: what it held leaves the load.
void Batcher::release(const Place& place) {
  const Job& job = *place.job;
  --live_.sentences;
  live_.tokens -= static_cast<int64_t>(job.src_tokens[place.index].size());
  live_.rows -= job.options.beam_size;
  live_.bytes -= job.sentence_bytes[place.index];
}

// The job's search is done: it is answered, with its translations or with `error` (its sentences
// still in the search finish unanswered), or an explained job's attention internals start.
void Batcher::answer(Running& running, const std::shared_ptr<Job>& job, std::exception_ptr error) {
  running.remaining.erase(job);
  if (!error && job->explain) {
    try {
      Explaining e{job, {}};
      const BatchModel& m = models_[job->model];
      for (Translation& t : job->translations)
        e.passes.push_back(std::make_unique<models::InternalsPass>(*m.model, *m.info, t, job->options));
      explaining_.push_back(std::move(e));
      return;
    } catch (...) {
      error = std::current_exception();
    }
  }
  done(job, error);
}

// One decoder step of every explained job's internals (a teacher-forced pass of its translation):
// interleaved with the searches' steps, so that explaining a long translation never holds them up
// for the whole pass. A job whose internals are all there is answered.
void Batcher::explain_step() {
  for (auto e = explaining_.begin(); e != explaining_.end();) {
    bool more = false;
    std::exception_ptr error;
    try {
      for (const std::unique_ptr<models::InternalsPass>& pass : e->passes) more = pass->step() || more;
    } catch (...) {
      error = std::current_exception();
    }
    if (more && !error) {
      ++e;
      continue;
    }
    done(e->job, error);
    e = explaining_.erase(e);
  }
}

void Batcher::done(const std::shared_ptr<Job>& job, std::exception_ptr error) {
  live_.explaining -= job->explain ? 1 : 0;
  if (error) job->done.set_exception(error);
  else job->done.set_value();
}

// The search failed outside any one cohort's step (an internal error): its jobs get the error, and
// it starts afresh.
void Batcher::fail(Running& running, std::exception_ptr error) {
  for (const auto& [id, place] : running.places) release(place);
  for (const auto& [job, remaining] : running.remaining) done(job, error);
  running.search = std::make_unique<models::ContinuousSearch>(*models_[running.model].model);
  running.places.clear(), running.remaining.clear();
}

}  // namespace seqgrad::tools::serve
