// The server's counters for GET /metrics, in Prometheus's text exposition format: requests by
// route and status, sentences, the queue's length and time, the sentences of each decoder step
// (the batch's occupancy, beside its capacity), request latencies, and the connections: open, slow
// (closed with 408), refused and idle-closed, and how many requests wait for or hold a worker.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace seqgrad::tools::serve {

// A Prometheus histogram: cumulative counts of observations at or below each bound, their sum and
// their count (the +Inf bucket).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}
  void observe(double value);
  // "<name>_bucket{le="..."} n" lines, then _sum and _count.
  std::string exposition(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bound, not yet cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

class Metrics {
 public:
  void request_done(const std::string& route, int status, double seconds);
  void set_queue_length(int64_t sentences);
  void job_started(double queue_seconds);  // a request's sentences left the queue for the decoder
  void step_decoded(int64_t sentences);    // a decoder step of this many sentences
  void sentences_done(int64_t sentences);
  void set_batch_capacity(int64_t sentences);  // --max-batch-sentences
  void set_decoding(int64_t sentences);        // in the decoder now
  // connections (tools/serve/connections.h)
  void set_http_workers(int64_t workers);  // --http-threads
  void connection_opened();
  void connection_closed();
  void connection_slow();  // answered 408: its request did not arrive whole within --timeout
  void connection_refused(const std::string& reason);  // closed after its request was refused
  void connection_idle_closed();  // no request within --idle-timeout, or room made at --max-connections
  void exchange_queued();         // a complete request waits for a worker
  void exchange_started();        // a worker answers it
  void exchange_finished();
  std::string exposition() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (route, status) -> count
  uint64_t sentences_ = 0;
  int64_t queue_length_ = 0, batch_capacity_ = 0, decoding_ = 0;
  int64_t http_workers_ = 0, connections_open_ = 0, exchanges_waiting_ = 0, exchanges_answering_ = 0;
  uint64_t connections_ = 0, connections_slow_ = 0, connections_idle_closed_ = 0;
  std::map<std::string, uint64_t> connections_refused_;  // by reason
  Histogram latency_{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};  // seconds
  Histogram queue_time_{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};  // seconds
  Histogram step_sentences_{{1, 2, 4, 8, 16, 32, 64, 128}};
};

}  // namespace seqgrad::tools::serve
