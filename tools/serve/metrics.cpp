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

void Metrics::set_http_workers(int64_t workers) {
  std::lock_guard lock(mutex_);
  http_workers_ = workers;
}

void Metrics::connection_opened() {
  std::lock_guard lock(mutex_);
  ++connections_, ++connections_open_;
}

void Metrics::connection_closed() {
  std::lock_guard lock(mutex_);
  --connections_open_;
}

void Metrics::connection_slow() {
  std::lock_guard lock(mutex_);
  ++connections_slow_;
}

void Metrics::connection_refused(const std::string& reason) {
  std::lock_guard lock(mutex_);
  ++connections_refused_[reason];
}

void Metrics::connection_idle_closed() {
  std::lock_guard lock(mutex_);
  ++connections_idle_closed_;
}

void Metrics::exchange_queued() {
  std::lock_guard lock(mutex_);
  ++exchanges_waiting_;
}

void Metrics::exchange_started() {
  std::lock_guard lock(mutex_);
  --exchanges_waiting_, ++exchanges_answering_;
}

void Metrics::exchange_finished() {
  std::lock_guard lock(mutex_);
  --exchanges_answering_;
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
  out += fmt::format("# HELP seqgrad_connections_open Connections open now: being read, waiting for a worker, being "
                     "answered, or idle between requests.\n# TYPE seqgrad_connections_open gauge\n"
                     "seqgrad_connections_open {}\n", connections_open_);
  out += fmt::format("# HELP seqgrad_connections_total Connections accepted.\n"
                     "# TYPE seqgrad_connections_total counter\nseqgrad_connections_total {}\n", connections_);
  out += fmt::format("# HELP seqgrad_connections_slow_total Connections closed with 408: a request did not arrive "
                     "whole within --timeout.\n# TYPE seqgrad_connections_slow_total counter\n"
                     "seqgrad_connections_slow_total {}\n", connections_slow_);
  out += "# HELP seqgrad_connections_refused_total Connections closed after their request was refused, by reason "
         "(malformed, chunked, too_large, head_too_large, host, origin).\n"
         "# TYPE seqgrad_connections_refused_total counter\n";
  for (const auto& [reason, count] : connections_refused_)
    out += fmt::format("seqgrad_connections_refused_total{{reason=\"{}\"}} {}\n", reason, count);
  out += fmt::format("# HELP seqgrad_connections_idle_closed_total Connections closed without a request "
                     "after --idle-timeout, or to make room at --max-connections.\n"
                     "# TYPE seqgrad_connections_idle_closed_total counter\nseqgrad_connections_idle_closed_total {}\n",
                     connections_idle_closed_);
  out += fmt::format("# HELP seqgrad_http_workers Requests answered at once at most (--http-threads).\n"
                     "# TYPE seqgrad_http_workers gauge\nseqgrad_http_workers {}\n", http_workers_);
  out += fmt::format("# HELP seqgrad_http_answering Requests being answered now (GET /health and /metrics have a "
                     "thread of their own).\n# TYPE seqgrad_http_answering gauge\nseqgrad_http_answering {}\n",
                     exchanges_answering_);
  out += fmt::format("# HELP seqgrad_http_waiting Requests read whole and waiting for a worker.\n"
                     "# TYPE seqgrad_http_waiting gauge\nseqgrad_http_waiting {}\n", exchanges_waiting_);
  return out;
}

}  // namespace seqgrad::tools::serve
