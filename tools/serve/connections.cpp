// `seqgrad serve`'s connections: a reader thread that frames requests under their deadline, and
// the workers that answer them (tools/serve/connections.h).
#include "tools/serve/connections.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/core.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace seqgrad::tools::serve {
namespace {

constexpr std::chrono::milliseconds kLinger{2'000};  // reading what a refused client still sends
constexpr size_t kReadChunk = 64 * 1024;  // read at once
constexpr int kReadsAtOnce = 16;           // from one connection, before the others' turn
constexpr std::chrono::milliseconds kAcceptPause{100};  // after the process ran out of descriptors
constexpr rlim_t kOwnDescriptors = 64;  // the process's own besides its connections: files, pipes, sockets

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// What framing a request needs from its head: its body's length, and where an
// `Expect: 100-continue` line is (the reader answers it, so the worker must not).
struct Head {
  std::string method, path;
  uint64_t content_length = 0;
  bool chunked = false;  // any Transfer-Encoding
  size_t expect_begin = 0, expect_end = 0;  // the Expect line's bytes (begin == end: none)
};

// The request line and headers up to their blank line; nullopt for a malformed head (cpp-httplib
// parses the head again on the worker, but only from the bytes framed here, so the two parsers can
// disagree about nothing beyond this one request).
std::optional<Head> parse_head(std::string_view head) {
  Head h;
  size_t pos = head.find("\r\n");
  const std::string_view line = head.substr(0, pos);
  const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) return std::nullopt;
  h.method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1), version = line.substr(sp2 + 1);
  if (h.method.empty() || target.empty() || (version != "HTTP/1.1" && version != "HTTP/1.0")) return std::nullopt;
  h.path = target.substr(0, target.find('?'));
  bool has_length = false;
  for (pos += 2; pos + 2 < head.size();) {
    const size_t end = head.find("\r\n", pos);
    const std::string_view field = head.substr(pos, end - pos);
    const size_t colon = field.find(':');
    if (colon == 0 || colon == std::string_view::npos || field.front() == ' ' || field.front() == '\t')
      return std::nullopt;  // no name, or an obsolete folded line
    const std::string_view name = field.substr(0, colon), value = trim(field.substr(colon + 1));
    if (name.find_first_of(" \t") != std::string_view::npos) return std::nullopt;
    if (iequals(name, "Content-Length")) {
      if (has_length || value.empty() || value.size() > 18 ||
          value.find_first_not_of("0123456789") != std::string_view::npos)
        return std::nullopt;
      has_length = true;
      h.content_length = std::stoull(std::string(value));
    } else if (iequals(name, "Transfer-Encoding")) {
      h.chunked = true;
    } else if (iequals(name, "Expect") && iequals(value, "100-continue")) {
      h.expect_begin = pos, h.expect_end = end + 2;
    }
    pos = end + 2;
  }
  return h;
}

std::string reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    default: return "Error";
  }
}

// Sends as much of `data` as the socket takes now (a refusal is small: the send buffer holds it).
void send_now(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// Room for every connection's descriptor beside the process's own: raises the soft limit towards
// the hard one where it is lower, and refuses what cannot fit.
void reserve_descriptors(int connections) {
  const rlim_t needed = static_cast<rlim_t>(connections) + kOwnDescriptors;
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < needed) {
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? needed : std::min(needed, limit.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  SG_CHECK_IO(limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= needed,
              "serve: --max-connections {} needs {} file descriptors, more than this process may open ({}: see "
              "ulimit -n)", connections, needed, limit.rlim_cur);
}

}  // namespace

struct Connections::Connection {
  enum class State { idle, reading, lingering };
  Connection(int fd, Clock::time_point idle_until, std::string received = {}, int answered = 0)
      : fd(fd), deadline(idle_until), buffer(std::move(received)), requests(answered) {}
  int fd;
  State state = State::idle;
  Clock::time_point deadline;  // idle: closed then; reading: answered 408 then; lingering: closed then
  std::string buffer;          // received bytes of the request being read
  size_t scanned = 0;          // the head's end is not in buffer[0, scanned)
  bool continued = false;      // 100 Continue sent for this request
  int requests = 0;            // answered on this connection
  std::optional<Head> head;    // once the head has ended
  size_t total = 0;            // then: the request's bytes, head and body
};

Connections::Connections(const ConnectionLimits& limits, Metrics& metrics, Answer answer)
    : limits_(limits), metrics_(metrics), answer_(std::move(answer)), scratch_(kReadChunk) {
  reserve_descriptors(limits_.max_connections);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  SG_CHECK_IO(wake_fd_ >= 0, "serve: eventfd: {}", std::strerror(errno));
  metrics_.set_http_workers(limits_.workers);
  workers_ = std::make_unique<httplib::ThreadPool>(static_cast<size_t>(limits_.workers));
  control_ = std::make_unique<httplib::ThreadPool>(1);
}

Connections::~Connections() {
  workers_->shutdown();
  control_->shutdown();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  ::close(wake_fd_);
}

int Connections::bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int error = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  SG_CHECK_IO(error == 0, "serve: cannot listen on {}:{} ({})", host, port, ::gai_strerror(error));
  for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR only: with SO_REUSEPORT a second server on the same port would silently share
    // this one's connections instead of failing to start
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) listen_fd_ = fd;
    else ::close(fd);
  }
  ::freeaddrinfo(found);
  SG_CHECK_IO(listen_fd_ >= 0, "serve: cannot listen on {}:{} (in use, or not an address of this machine)", host,
              port);
  sockaddr_storage bound{};
  socklen_t size = sizeof bound;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &size);
  return ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

void Connections::stop() {
  stopping_ = true;
  wake();
}

void Connections::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

size_t Connections::run() {
  std::vector<pollfd> polled;
  while (!stopping_) {
    take_returned();
    const bool accepting = (open_ < limits_.max_connections || oldest_idle()) && Clock::now() >= accept_again_;
    polled.assign({{wake_fd_, POLLIN, 0}, {accepting ? listen_fd_ : -1, POLLIN, 0}});
    Clock::time_point next = Clock::now() + std::chrono::seconds(1);
    for (const auto& [fd, c] : reading_) {
      polled.push_back({fd, POLLIN, 0});
      next = std::min(next, c->deadline);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count() + 1;
    if (::poll(polled.data(), polled.size(), static_cast<int>(std::max<int64_t>(wait, 0))) < 0 && errno != EINTR)
      throw IOError(fmt::format("serve: poll: {}", std::strerror(errno)));
    if (polled[0].revents) {
      uint64_t count;
      [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof count);
    }
    if (polled[1].revents) accept_new();
    for (size_t i = 2; i < polled.size(); ++i) {
      auto it = reading_.find(polled[i].fd);
      if (polled[i].revents && it != reading_.end()) read_from(*it->second);
    }
    expire(Clock::now());
  }
  return drain();
}

// At --max-connections, a new connection takes the place of the one that has waited longest for a
// request (as nginx reuses idle keep-alive connections), so idle ones never keep clients out.
void Connections::accept_new() {
  while (open_ < limits_.max_connections || oldest_idle()) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
      // the connection stays in the backlog; polling the listening socket now would spin
      fmt::print(stderr, "seqgrad serve: cannot accept a connection ({}): pausing for {} ms\n", std::strerror(errno),
                 kAcceptPause.count());
      accept_again_ = Clock::now() + kAcceptPause;
      return;
    }
    if (fd < 0) return;  // none left (EAGAIN), or the client gave up before it was accepted
    if (open_ >= limits_.max_connections) {
      metrics_.connection_idle_closed();
      drop(*oldest_idle());
    }
    ++open_;
    metrics_.connection_opened();
    reading_.emplace(fd, std::make_unique<Connection>(fd, Clock::now() + limits_.idle_timeout));
  }
}

// Reads what the socket holds, but never past the request being read (its head's limit, then its
// body), so that a connection holds at most one request's bytes and a few of the next's, and no
// more than it was sent (a slow client holds what it sent, not a buffer of the body's size). At
// most kReadsAtOnce reads, so that a fast sender cannot keep the reader from the other connections.
void Connections::read_from(Connection& c) {
  const int fd = c.fd;
  for (int reads = 0; reads < kReadsAtOnce; ++reads) {
    const bool lingering = c.state == Connection::State::lingering;
    const size_t limit = lingering ? kReadChunk : (c.head ? c.total : kMaxHeadBytes + 1) - c.buffer.size();
    const ssize_t n = ::recv(fd, scratch_.data(), std::min(kReadChunk, limit), 0);  // limit > 0: see frame()
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) return drop(c);  // the client closed (or reset) the connection
    if (lingering) continue;     // what a refused client still sends is dropped
    c.buffer.append(scratch_.data(), static_cast<size_t>(n));
    received(c);
    const auto it = reading_.find(fd);
    if (it == reading_.end() || it->second->state == Connection::State::lingering) return;  // handed out or refused
  }
}

// New bytes: an idle connection's request begins (and its deadline starts) with its first byte.
void Connections::received(Connection& c) {
  if (c.state == Connection::State::idle) {
    c.buffer.erase(0, std::min(c.buffer.find_first_not_of("\r\n"), c.buffer.size()));  // blank lines may precede
    if (c.buffer.empty()) return;
    c.state = Connection::State::reading;
    c.deadline = Clock::now() + limits_.request_timeout;
  }
  frame(c);
}

// Hands the request out once its head and body are there; refuses what cannot become one. Leaves
// a connection that it keeps with fewer bytes than its limit (kMaxHeadBytes + 1 before the head
// has ended, then the request's total).
void Connections::frame(Connection& c) {
  if (!c.head) {
    const size_t found = c.buffer.find("\r\n\r\n", c.scanned);
    if (found == std::string::npos) {
      c.scanned = c.buffer.size() < 3 ? 0 : c.buffer.size() - 3;
      if (c.buffer.size() > kMaxHeadBytes)
        refuse(c, 431, "head_too_large", fmt::format("the request line and headers are larger than {} bytes",
                                                     kMaxHeadBytes));
      return;
    }
    c.head = parse_head(std::string_view(c.buffer).substr(0, found + 4));
    if (!c.head)
      return refuse(c, 400, "malformed", "malformed request head (expected a request line 'METHOD /path HTTP/1.1' "
                                         "and 'Name: value' headers)");
    if (c.head->chunked)
      return refuse(c, 411, "chunked", "Transfer-Encoding is not accepted: send the body with a Content-Length "
                                       "header");
    if (c.head->content_length > limits_.max_body_bytes)
      return refuse(c, 413, "too_large", fmt::format("the request body is larger than the server's limit "
                                                     "(--max-body-bytes {})", limits_.max_body_bytes));
    c.total = found + 4 + c.head->content_length;
  }
  if (c.buffer.size() < c.total) {
    if (c.head->expect_end > c.head->expect_begin && !c.continued) {
      send_now(c.fd, "HTTP/1.1 100 Continue\r\n\r\n");
      c.continued = true;
    }
    return;
  }
  dispatch(c);
}

void Connections::dispatch(Connection& c) {
  const Head& head = *c.head;
  Exchange e{.fd = c.fd, .request = c.buffer.substr(0, c.total), .rest = c.buffer.substr(c.total),
             .requests = c.requests};
  e.request.erase(head.expect_begin, head.expect_end - head.expect_begin);  // answered here, if it was there
  e.close = e.requests + 1 >= limits_.max_requests_per_connection;
  const bool control = head.method == "GET" && (head.path == "/health" || head.path == "/metrics");
  reading_.erase(c.fd);  // c is gone from here on
  {
    std::lock_guard lock(mutex_);
    answering_.insert(e.fd);
  }
  metrics_.exchange_queued();
  (control ? control_ : workers_)->enqueue([this, e = std::move(e)]() mutable { answer_on_worker(std::move(e)); });
}

// Answers with a JSON error and Connection: close, then reads (and drops) what the client still
// sends for a moment before closing, so that the answer is not lost to a reset.
void Connections::refuse(Connection& c, int status, const std::string& reason, const std::string& message) {
  const std::string body = nlohmann::json{{"status", "error"}, {"error", message}}.dump();
  send_now(c.fd, fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
                             "Connection: close\r\n\r\n{}", status, reason_phrase(status), body.size(), body));
  ::shutdown(c.fd, SHUT_WR);
  if (status == 408) metrics_.connection_slow();
  else metrics_.connection_refused(reason);
  c.state = Connection::State::lingering;
  c.deadline = Clock::now() + std::min(kLinger, limits_.request_timeout);
  c.buffer = {};
  c.head.reset();
}

void Connections::expire(Clock::time_point now) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(limits_.request_timeout).count();
  std::vector<Connection*> ended;
  for (auto& [fd, c] : reading_) {
    if (c->deadline > now) continue;
    if (c->state == Connection::State::reading)
      refuse(*c, 408, "", fmt::format("the request did not arrive whole within --timeout {} s", seconds));
    else ended.push_back(c.get());
    if (c->state == Connection::State::idle) metrics_.connection_idle_closed();
  }
  for (Connection* c : ended) drop(*c);
}

void Connections::answer_on_worker(Exchange exchange) {
  metrics_.exchange_started();
  bool keep = false;
  try {
    keep = answer_(exchange) && !exchange.close;
  } catch (const std::exception& e) {  // Answer handles a request's errors itself: this is the socket's
    fmt::print(stderr, "seqgrad serve: answering a request failed: {}\n", e.what());
  }
  metrics_.exchange_finished();
  finished(std::move(exchange), keep);
}

// Back to the reader for the next request, or closed (always when draining).
void Connections::finished(Exchange exchange, bool keep) {
  {
    std::lock_guard lock(mutex_);
    answering_.erase(exchange.fd);
    if (keep && !stopping_) returned_.push_back(std::move(exchange));
    else close(exchange.fd);  // under the lock: drain() never shuts down a number reused since
  }
  answered_.notify_all();
  wake();
}

void Connections::take_returned() {
  std::deque<Exchange> back;
  {
    std::lock_guard lock(mutex_);
    back.swap(returned_);
  }
  for (Exchange& e : back) {
    auto c = std::make_unique<Connection>(e.fd, Clock::now() + limits_.idle_timeout, std::move(e.rest),
                                          e.requests + 1);
    Connection& kept = *c;
    reading_.emplace(e.fd, std::move(c));
    if (!kept.buffer.empty()) received(kept);  // pipelined: the next request has begun
  }
}

// The connection that has waited longest for a request and has none arriving (its first bytes
// not yet read would make it a request), or null.
Connections::Connection* Connections::oldest_idle() const {
  Connection* oldest = nullptr;
  for (const auto& [fd, c] : reading_) {
    char byte;
    if (c->state == Connection::State::idle && (!oldest || c->deadline < oldest->deadline) &&
        ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0)
      oldest = c.get();
  }
  return oldest;
}

void Connections::drop(Connection& c) {
  const int fd = c.fd;
  reading_.erase(fd);
  close(fd);
}

void Connections::close(int fd) {
  ::close(fd);
  --open_;
  metrics_.connection_closed();
  wake();  // the reader may be waiting at --max-connections
}

size_t Connections::drain() {
  ::close(listen_fd_);  // new connections are refused from here on
  listen_fd_ = -1;
  while (!reading_.empty()) drop(*reading_.begin()->second);
  std::unique_lock lock(mutex_);
  for (const Exchange& e : returned_) close(e.fd);
  returned_.clear();
  answered_.wait_for(lock, limits_.drain_timeout, [this] { return answering_.empty(); });
  for (int fd : answering_) ::shutdown(fd, SHUT_RDWR);
  return answering_.size();
}

}  // namespace seqgrad::tools::serve
