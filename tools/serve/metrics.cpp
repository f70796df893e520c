// GET /metrics: the server's counters in Prometheus's text format (tools/serve/metrics.h).
#include "tools/serve/metrics.h"

#include <fmt/core.h>

namespace seqgrad::tools::serve {

void Histogram::observe(double value) {
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (value <= bounds_[i]) {
      ++counts_[i];
      break;
    }
  ++count_;
  sum_ += value;
}

std::string Histogram::exposition(const std::string& name) const {
  std::string out;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
  return out;
}

void Metrics::request_done(const std::string& route, int status, double seconds) {
  std::lock_guard lock(mutex_);
  ++requests_[{route, status}];
  latency_.observe(seconds);
}

void Metrics::job_started(double queue_seconds) {
  std::lock_guard lock(mutex_);
  queue_time_.observe(queue_seconds);
}

void Metrics::step_decoded(int64_t sentences) {
  std::lock_guard lock(mutex_);
  step_sentences_.observe(static_cast<double>(sentences));
}

void Metrics::sentences_done(int64_t sentences) {
  std::lock_guard lock(mutex_);
  sentences_ += static_cast<uint64_t>(sentences);
}

void Metrics::set_decoding(int64_t sentences) {
  std::lock_guard lock(mutex_);
  decoding_ = sentences;
}

void Metrics::set_batch_capacity(int64_t sentences) {
  std::lock_guard lock(mutex_);
  batch_capacity_ = sentences;
}

void Metrics::set_queue_length(int64_t sentences) {
  std::lock_guard lock(mutex_);
  queue_length_ = sentences;
}

std::string Metrics::exposition() const {
  std::lock_guard lock(mutex_);
  std::string out = "# HELP seqgrad_requests_total HTTP requests answered, by route and status.\n"
                    "# TYPE seqgrad_requests_total counter\n";
  for (const auto& [key, count] : requests_)
    out += fmt::format("seqgrad_requests_total{{route=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, count);
  out += fmt::format("# HELP seqgrad_sentences_total Sentences translated.\n# TYPE seqgrad_sentences_total counter\n"
                     "seqgrad_sentences_total {}\n", sentences_);
  out += fmt::format("# HELP seqgrad_queue_sentences Sentences waiting to be decoded.\n"
                     "# TYPE seqgrad_queue_sentences gauge\nseqgrad_queue_sentences {}\n", queue_length_);
  out += fmt::format("# HELP seqgrad_decoding_sentences Sentences in the decoder now.\n"
                     "# TYPE seqgrad_decoding_sentences gauge\nseqgrad_decoding_sentences {}\n", decoding_);
  out += "# HELP seqgrad_queue_seconds Time from a request's arrival in the queue to its sentences joining the "
         "decoder.\n# TYPE seqgrad_queue_seconds histogram\n";
  out += queue_time_.exposition("seqgrad_queue_seconds");
  out += "# HELP seqgrad_step_sentences Sentences decoded together at each decoder step (the batch's occupancy).\n"
         "# TYPE seqgrad_step_sentences histogram\n";
  out += step_sentences_.exposition("seqgrad_step_sentences");
  out += fmt::format("# HELP seqgrad_batch_capacity_sentences Sentences a decoder step takes at most "
                     "(--max-batch-sentences).\n# TYPE seqgrad_batch_capacity_sentences gauge\n"
                     "seqgrad_batch_capacity_sentences {}\n", batch_capacity_);
  out += "# HELP seqgrad_request_seconds Time from a request's arrival to its answer.\n"
         "# TYPE seqgrad_request_seconds histogram\n";
  out += latency_.exposition("seqgrad_request_seconds");
  return out;
}

}  // namespace seqgrad::tools::serve
