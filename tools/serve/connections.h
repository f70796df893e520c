// `seqgrad serve`'s connections: one thread accepts them and reads each request whole (its head and
// body within --timeout in total) before a worker sees it, so a client that sends slowly holds a
// buffer, never a worker. Complete requests go to the worker pool (GET /health and GET /metrics to a
// thread of their own, so they are answered while every worker is taken); a keep-alive connection
// comes back to the reader between requests and is closed after --idle-timeout. At
// --max-connections, a new connection takes an idle one's place, else waits in the kernel's listen
// backlog. Malformed heads (400),
// chunked bodies (411), bodies over the limit (413), heads over kMaxHeadBytes (431) and requests
// late past their deadline (408) are answered here, and their connection closed.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tools/serve/metrics.h"

namespace httplib {
class ThreadPool;
}

namespace seqgrad::tools::serve {

using Clock = std::chrono::steady_clock;

struct ConnectionLimits {
  std::chrono::milliseconds request_timeout{10'000};  // one request's head and body; one answer's writing
  std::chrono::milliseconds idle_timeout{5'000};      // a keep-alive connection between requests
  std::chrono::milliseconds drain_timeout{5'000};     // after stop(), for the requests being answered
  size_t max_body_bytes = 1 << 20;
  int max_connections = 256;  // open at once (reading, waiting, answered or idle)
  int workers = 64;           // requests answered at once
  int max_requests_per_connection = 100;
};

constexpr size_t kMaxHeadBytes = 16 * 1024;  // request line and headers (cpp-httplib's: 8 KiB a line)

// One complete request, handed to a worker: `request` holds its head and body and nothing else; the
// answer is written to `fd` (non-blocking; Answer's stream waits for it, within request_timeout).
struct Exchange {
  int fd = -1;
  std::string request;
  bool close = false;  // the answer says Connection: close (the last request allowed, or draining)
  std::string rest;    // bytes the client sent after this request (pipelined), read next
  int requests = 0;    // answered on this connection before this one
};

class Connections {
 public:
  // Answers an exchange on a worker thread; false when its connection must not carry another request.
  using Answer = std::function<bool(Exchange&)>;

  Connections(const ConnectionLimits& limits, Metrics& metrics, Answer answer);
  ~Connections();
  // Listens on host:port (0: a free port) and returns the port; throws IOError when it cannot.
  int bind(const std::string& host, int port);
  // Accepts and reads until stop(); then stops listening, closes the connections not being
  // answered, and waits up to drain_timeout for those being answered. Returns how many were still
  // being answered then (their sockets are shut down, their workers may still be decoding).
  size_t run();
  void stop();  // from any thread

 private:
  struct Connection;
  void accept_new();
  void read_from(Connection& c);
  void received(Connection& c);
  void frame(Connection& c);
  void dispatch(Connection& c);
  void refuse(Connection& c, int status, const std::string& reason, const std::string& message);
  void expire(Clock::time_point now);
  void answer_on_worker(Exchange exchange);
  void finished(Exchange exchange, bool keep);
  void take_returned();
  Connection* oldest_idle() const;  // of those waiting for a request with none arriving; null if none
  void drop(Connection& c);         // the reader's: closes it
  void close(int fd);         // any thread: and counts it closed
  size_t drain();
  void wake();

  const ConnectionLimits limits_;
  Metrics& metrics_;
  Answer answer_;
  std::vector<char> scratch_;  // the reader's: what a recv gives, before it joins a connection's buffer
  int listen_fd_ = -1, wake_fd_ = -1;
  std::map<int, std::unique_ptr<Connection>> reading_;  // by fd: the connections the reader holds
  Clock::time_point accept_again_;  // the reader's: no accepting before (out of descriptors)
  std::atomic<int> open_ = 0;  // all open connections, the reader's and the workers'
  std::atomic<bool> stopping_ = false;
  std::mutex mutex_;  // guards what follows
  std::condition_variable answered_;
  std::set<int> answering_;         // fds of the exchanges handed to a worker
  std::deque<Exchange> returned_;   // keep-alive connections back from a worker
  std::unique_ptr<httplib::ThreadPool> workers_, control_;
};

}  // namespace seqgrad::tools::serve
