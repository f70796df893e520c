// `seqgrad serve`'s HTTP server (tools/serve/server.h): tools/serve/connections reads each request
// whole, cpp-httplib parses and routes it.
#include "tools/serve/server.h"

#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include <fmt/core.h>
#include <httplib.h>

#include "core/error.h"
#include "tools/serve/connections.h"
#include "tools/serve/explorer.h"
#include "tools/serve/metrics.h"
#include "tools/serve/response.h"

namespace seqgrad::tools::serve {
namespace {

constexpr int kRetryAfterSeconds = 1;  // an overloaded queue drains within about a batch's time

// When the request this worker thread is answering arrived (set before routing), for its latency.
thread_local Clock::time_point request_started;
// Its Host or Origin was refused: its connection ends with the answer.
thread_local bool refused_connection = false;

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  // replace: a message quoting a client's bytes must not make the answer itself fail
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& field, const std::string& message) {
  nlohmann::json body{{"status", "error"}, {"error", message}};
  if (!field.empty()) body["field"] = field;
  send_json(res, status, body);
  if (status == 503) res.set_header("Retry-After", std::to_string(kRetryAfterSeconds));
}

// A refused header: the error names it and what was expected.
void send_header_error(httplib::Response& res, int status, const std::string& header, const std::string& message) {
  send_json(res, status, {{"status", "error"}, {"error", message}, {"header", header}});
}

std::string status_message(int status) {
  switch (status) {
    case 404: return "no such route (see GET / and docs/serving.md)";
    case 405: return "method not allowed on this route";
    case 413: return "the request body is larger than the server's limit (--max-body-bytes)";
    default: return fmt::format("HTTP status {}", status);
  }
}

// The metrics label of a path: one of the routes, else "other" (so clients cannot add labels).
std::string route_label(const std::string& path) {
  for (const char* route : {"/", "/health", "/metrics", "/v1/models", "/v1/translate", "/v1/side_by_side",
                             "/translator/translate"})
    if (path == route) return path;
  return "other";
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A client's value in an error message: at most 100 bytes (send_json replaces invalid UTF-8).
std::string quoted(const std::string& value) {
  return value.size() <= 100 ? "'" + value + "'" : "'" + value.substr(0, 100) + "...'";
}

// The host (lowercase, an IPv6 address in brackets) and port of a Host header; port 80 when it has
// none; nullopt when it is not of that form.
std::optional<std::pair<std::string, int>> host_and_port(const std::string& value) {
  const size_t bracket = value.rfind(']'), colon = value.rfind(':');
  const bool has_port = colon != std::string::npos && (bracket == std::string::npos || colon > bracket);
  const std::string host = lower(value.substr(0, has_port ? colon : value.size()));
  const std::string port = has_port ? value.substr(colon + 1) : "80";
  if (host.empty() || port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      (host.front() != '[' && host.find(':') != std::string::npos))
    return std::nullopt;
  return std::pair{host, std::stoi(port)};
}

// An address as a Host header spells it: IPv6 in brackets, an IPv4 client of an IPv6 socket as IPv4.
std::string host_form(std::string address) {
  if (address.starts_with("::ffff:") && address.find('.') != std::string::npos) return address.substr(7);
  return address.find(':') == std::string::npos ? address : "[" + address + "]";
}

void socket_address(int fd, bool local, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  const int got = local ? ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size)
                        : ::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &size);
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (got != 0 || ::getnameinfo(reinterpret_cast<sockaddr*>(&address), size, host, sizeof host, service,
                                sizeof service, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return;
  ip = host;
  port = std::atoi(service);
}

// cpp-httplib's view of an exchange: it reads the request from memory (the reader framed it whole)
// and its answer is gathered here, to be written in one go within --timeout.
class ExchangeStream : public httplib::Stream {
 public:
  explicit ExchangeStream(const Exchange& exchange) : exchange_(exchange) {}
  bool is_readable() const override { return read_ < exchange_.request.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    size = std::min(size, exchange_.request.size() - read_);
    std::memcpy(ptr, exchange_.request.data() + read_, size);
    read_ += size;
    return static_cast<ssize_t>(size);
  }
  ssize_t write(const char* ptr, size_t size) override {
    answer.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    socket_address(exchange_.fd, false, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    socket_address(exchange_.fd, true, ip, port);
  }
  // none that cpp-httplib should select() on (it answers 500 for a socket past FD_SETSIZE)
  socket_t socket() const override { return INVALID_SOCKET; }

  std::string answer;

 private:
  const Exchange& exchange_;
  size_t read_ = 0;
};

// Writes all of `data` to the non-blocking socket by `deadline`; false when the client does not
// take it in time or has gone.
bool write_all(int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLOUT, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) < 0) return false;
  }
  return true;
}

// cpp-httplib's parsing, routing and answers, for the requests tools/serve/connections reads.
class HttpServer : public httplib::Server {
 public:
  // Answers the exchange; false when its connection must end (the client asked, it was refused, or
  // the answer could not be written within `timeout`).
  bool answer(Exchange& exchange, std::chrono::milliseconds timeout) {
    ExchangeStream stream(exchange);
    bool client_closes = false;
    refused_connection = false;
    const bool ok = process_request(stream, exchange.close, client_closes, nullptr);
    return write_all(exchange.fd, stream.answer, Clock::now() + timeout) && ok && !client_closes &&
           !refused_connection;
  }
};

// An id for a 500 answer, found again in the server's log: this run's random prefix and a count.
std::string error_id() {
  static const uint32_t run = std::random_device{}();
  static std::atomic<uint32_t> count = 0;
  return fmt::format("{:08x}{:08x}", run, ++count);
}

class Server {
 public:
  Server(std::vector<ServedModel>& models, const ServerOptions& options)
      : models_(models),
        options_(options),
        batcher_(batch_models(models), options.batching, metrics_),
        connections_(connection_limits(options), metrics_,
                     [this](Exchange& e) { return http_.answer(e, options_.timeout); }) {
    for (const ServedModel& m : models) {
      defaults_.push_back(m.defaults);
      vocab_sizes_.push_back(static_cast<int64_t>(m.checkpoint.info.tgt_vocab.size()));
    }
    limits_ = options.requests;
    limits_.models = models.size();
    configure();
  }

  int run() {
    port_ = connections_.bind(options_.host, options_.port);
    fmt::print("seqgrad serve: listening on http://{}:{}/ ({} checkpoint{}; SIGTERM or Ctrl-C stops)\n",
               host_form(options_.host), port_, models_.size(), models_.size() == 1 ? "" : "s");
    std::fflush(stdout);
    std::atomic<bool> finished = false;
    std::thread watcher([&] { stop_on_signal(finished); });
    size_t left = 0;
    try {
      left = connections_.run();  // returns after stop(), once drained
    } catch (...) {
      finished = true;
      watcher.join();
      throw;
    }
    finished = true;
    watcher.join();
    if (left > 0) {
      // their workers wait on the decoder, which would finish them first: end the process instead
      fmt::print(stderr, "seqgrad serve: {} request{} still being answered after --drain-timeout {} s: closed\n",
                 left, left == 1 ? "" : "s", options_.drain_timeout.count());
      fmt::print("seqgrad serve: stopped\n");
      std::fflush(stdout);
      std::_Exit(0);
    }
    batcher_.stop();
    fmt::print("seqgrad serve: stopped\n");
    return 0;
  }

 private:
  static ConnectionLimits connection_limits(const ServerOptions& o) {
    return {.request_timeout = o.timeout, .idle_timeout = o.idle_timeout, .drain_timeout = o.drain_timeout,
            .max_body_bytes = o.max_body_bytes, .max_connections = o.max_connections, .workers = o.http_threads};
  }

  static std::vector<BatchModel> batch_models(std::vector<ServedModel>& models) {
    std::vector<BatchModel> out;
    for (ServedModel& m : models) out.push_back({m.model.get(), &m.checkpoint.info});
    return out;
  }

  void stop_on_signal(const std::atomic<bool>& finished) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    const timespec poll{.tv_sec = 0, .tv_nsec = 200'000'000};
    while (!finished) {
      const int sig = sigtimedwait(&stop, nullptr, &poll);
      if (sig != SIGINT && sig != SIGTERM) continue;
      fmt::print(stderr, "seqgrad serve: {}: finishing the requests in flight (for --drain-timeout {} s at most), "
                 "then stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM", options_.drain_timeout.count());
      connections_.stop();
      return;
    }
  }

  // Empty when the server answers to the request's Host: a loopback name or the address the
  // connection came in on (or the one it listens on), with its port; or an --allow-host name, with
  // any port (behind a proxy). Else why not (answered 403, or 400 without a Host, as HTTP/1.1 says).
  // A page that a DNS name rebound to this machine serves sends its own name, which none of these is.
  std::string refused_host(const httplib::Request& req) const {
    const std::vector<std::string>& allowed = options_.allow_hosts;
    if (std::find(allowed.begin(), allowed.end(), "*") != allowed.end()) return {};
    // an HTTP/1.0 client (an old load balancer's health check) may send none; a browser always does
    if (!req.has_header("Host") && req.version == "HTTP/1.0") return {};
    const std::string value = req.get_header_value("Host");
    std::vector<std::string> local = {"127.0.0.1", "localhost", "[::1]"};
    for (const std::string& address : {host_form(req.local_addr), lower(host_form(options_.host))})
      if (std::find(local.begin(), local.end(), address) == local.end()) local.push_back(address);
    if (const auto hp = host_and_port(value)) {
      const auto& [host, port] = *hp;
      if (std::any_of(allowed.begin(), allowed.end(), [&](const std::string& a) { return lower(a) == host; }) ||
          (port == port_ && std::find(local.begin(), local.end(), host) != local.end()))
        return {};
    }
    std::string expected;
    for (const std::string& name : local) expected += fmt::format("{}:{}, ", name, port_);
    expected += "or a name given with --allow-host";
    if (!req.has_header("Host")) return fmt::format("the request has no Host header (expected {})", expected);
    return fmt::format("Host {} is not a name this server answers to (expected {})", quoted(value), expected);
  }

  // Empty for a request from the server's own pages or from outside a browser (no Origin), a GET or
  // HEAD, or one from an --allow-origin origin; else why not: a page elsewhere must not make the
  // user's browser post here (cross-site request forgery).
  std::string refused_origin(const httplib::Request& req) const {
    if (req.method == "GET" || req.method == "HEAD" || !req.has_header("Origin")) return {};
    const std::string origin = req.get_header_value("Origin"), host = lower(req.get_header_value("Host"));
    // https too: behind a TLS proxy that passes the Host on, the page's origin is https://Host
    if (lower(origin) == "http://" + host || lower(origin) == "https://" + host || allowed_origin(origin)) return {};
    return fmt::format("Origin {} may not send {} requests here (expected this server's own origin http://{} or an "
                       "origin given with --allow-origin)", quoted(origin), req.method,
                       req.get_header_value("Host"));
  }

  bool allowed_origin(const std::string& origin) const {
    const std::vector<std::string>& allowed = options_.allow_origins;
    return std::find_if(allowed.begin(), allowed.end(), [&](const std::string& a) {
             return a == "*" || lower(a) == lower(origin);
           }) != allowed.end();
  }

  // Empty when a POST's body says it is JSON, else why not: a page elsewhere cannot send that
  // Content-Type without asking first (CORS's preflight), which a server that does not answer it refuses.
  static std::string refused_content_type(const httplib::Request& req) {
    const std::string type = req.get_header_value("Content-Type");
    if (req.method != "POST" || lower(trim(std::string_view(type).substr(0, type.find(';')))) == "application/json")
      return {};
    if (!req.has_header("Content-Type")) return "the request has no Content-Type header (expected application/json)";
    return fmt::format("Content-Type {} is not accepted (expected application/json)", quoted(type));
  }

  void configure() {
    http_.set_keep_alive_timeout(std::chrono::duration_cast<std::chrono::seconds>(options_.idle_timeout).count());
    http_.set_keep_alive_max_count(static_cast<size_t>(ConnectionLimits{}.max_requests_per_connection));
    http_.set_payload_max_length(options_.max_body_bytes);
    // before cpp-httplib reads the body (it would parse a multipart one)
    http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      request_started = Clock::now();
      for (const auto& [header, why] : {std::pair{"Host", refused_host(req)}, std::pair{"Origin", refused_origin(req)}})
        if (!why.empty()) {  // a stranger's page: no further requests on this connection
          send_header_error(res, req.has_header(header) ? 403 : 400, header, why);
          metrics_.connection_refused(lower(header));
          refused_connection = true;
          return httplib::Server::HandlerResponse::Handled;
        }
      if (const std::string why = refused_content_type(req); !why.empty()) {
        send_header_error(res, 415, "Content-Type", why);
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http_.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (refused_connection) {
        res.headers.erase("Keep-Alive");
        res.set_header("Connection", "close");
      }
      // an --allow-origin page may read the answers (and send JSON: the preflight's answer below)
      if (req.has_header("Origin") && allowed_origin(req.get_header_value("Origin"))) {
        res.set_header("Access-Control-Allow-Origin", req.get_header_value("Origin"));
        res.set_header("Vary", "Origin");
      }
    });
    http_.Options(".*", [](const httplib::Request&, httplib::Response& res) {  // CORS preflight
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST");
      res.set_header("Access-Control-Allow-Headers", "Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
    });
    http_.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // a route's own error
      send_error(res, res.status, "", status_message(res.status));
      return httplib::Server::HandlerResponse::Handled;
    }));
    // the client learns an id, the log the details (an exception's text may tell what a client
    // should not learn: paths, sizes, the server's state)
    http_.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr e) {
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
      }
      const std::string id = error_id();
      fmt::print(stderr, "seqgrad serve: internal error {} answering {} {}: {}\n", id, req.method, req.path, what);
      send_json(res, 500, {{"status", "error"}, {"error", "internal error"}, {"id", id}});
    });
    http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      const double seconds = std::chrono::duration<double>(Clock::now() - request_started).count();
      metrics_.request_done(route_label(req.path), res.status, seconds);
    });
    http_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(kExplorerHtml, "text/html; charset=utf-8");
    });
    http_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"status", "ok"}});
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.exposition(), "text/plain; version=0.0.4");
    });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { send_json(res, 200, models_json()); });
    http_.Post("/v1/translate", [this](const httplib::Request& req, httplib::Response& res) {
      answer(res, [&] {
        TranslateRequest r = read_translate_request(parse_body(req.body), defaults_, vocab_sizes_, limits_);
        std::vector<Translation> done = translate(r);
        nlohmann::json out = nlohmann::json::array();
        const text::Vocab& tgt_vocab = models_[r.model].checkpoint.info.tgt_vocab;
        for (size_t i = 0; i < done.size(); ++i) out.push_back(sentence_json(done[i], r.src[i], tgt_vocab, r.response));
        return nlohmann::json{{"model", models_[r.model].name}, {"translations", std::move(out)}};
      });
    });
    http_.Post("/v1/side_by_side", [this](const httplib::Request& req, httplib::Response& res) {
      answer(res, [&] {
        return side_by_side(read_side_by_side_request(parse_body(req.body), served_names(), defaults_, vocab_sizes_,
                                                      limits_));
      });
    });
    http_.Post("/translator/translate", [this](const httplib::Request& req, httplib::Response& res) {
      answer(res, [&] {
        TranslateRequest r = read_opennmt_request(parse_body(req.body), defaults_, limits_);
        return opennmt_json(translate(r), r.src, models_[r.model].checkpoint.info.tgt_vocab);
      });
    });
  }

  // Runs a route's body: its JSON with 200, a RequestError as its 4xx/503 JSON error.
  template <class Body>
  void answer(httplib::Response& res, Body&& body) {
    try {
      send_json(res, 200, body());
    } catch (const RequestError& e) {
      send_error(res, e.status, e.field, e.what());
    }
  }

  // Checks that the request's sentences tokenize within the length limit, queues them, and waits
  // for their translations (with `forced`, one output per sentence: replays them instead).
  std::vector<Translation> translate(const TranslateRequest& r, std::vector<models::ForcedOutput> forced = {}) {
    const ServedModel& m = models_[r.model];
    if (!options_.fail_on.empty() && std::find(r.src.begin(), r.src.end(), options_.fail_on) != r.src.end())
      throw std::runtime_error(fmt::format("--fail-on: the test's failure, translating {}", options_.fail_on));
    auto job = std::make_shared<Job>();
    job->model = r.model;
    job->options = r.decoding;
    job->explain = r.response.explain || !forced.empty();
    job->forced = std::move(forced);
    job->src = r.src;
    for (size_t i = 0; i < r.src.size(); ++i) {
      job->src_tokens.push_back(checked_tokens(m, r.src[i], fmt::format("src[{}]", i)));
      job->tokens += static_cast<int64_t>(job->src_tokens.back().size());
    }
    std::future<void> done = job->done.get_future();
    if (!batcher_.submit(job))
      throw RequestError(503, "", fmt::format("the server is busy ({} sentences queued at most): retry in {} s",
                                              options_.batching.queue_sentences, kRetryAfterSeconds));
    done.get();  // rethrows what decoding threw: answered 500 by the exception handler
    return std::move(job->translations);
  }

  // The sentence's source tokens; a sentence that does not tokenize (invalid text), has no tokens
  // or more than the limit is refused (422) before it is queued.
  static std::vector<std::string> checked_tokens(const ServedModel& m, const std::string& sentence,
                                                 const std::string& field) {
    std::vector<std::string> tokens;
    try {
      tokens = m.checkpoint.info.src_vocab.tokenize(sentence);
    } catch (const Error& e) {
      throw RequestError(422, field, fmt::format("{}: {}", field, e.what()));
    }
    if (tokens.empty()) throw RequestError(422, field, fmt::format("{}: empty (nothing to translate)", field));
    if (static_cast<int64_t>(tokens.size()) > m.max_src_tokens)
      throw RequestError(422, field, fmt::format("{} has {} tokens, more than the server's limit of {} "
                                                 "(--max-src-tokens)", field, tokens.size(), m.max_src_tokens));
    return tokens;
  }

  std::vector<ServedName> served_names() const {
    std::vector<ServedName> out;
    for (const ServedModel& m : models_)
      out.push_back({m.name, models::architecture_name(m.checkpoint.info.config.model.architecture)});
    return out;
  }

  // One sentence through the GRU and the Transformer (each its own search), and the Transformer
  // replayed along the GRU's output: the same rows as the GRU's attention, so each head's
  // cross-attention can be compared with it (agreement_json), docs/serving.md.
  nlohmann::json side_by_side(const SideBySideRequest& r) {
    const Translation gru = translate(r.gru).front(), transformer = translate(r.transformer).front();
    const ServedModel &g = models_[r.gru.model], &t = models_[r.transformer.model];
    if (gru.src_tokens != transformer.src_tokens)
      throw RequestError(422, "models", fmt::format("'{}' and '{}' read the sentence as other tokens ({} and {}): their "
                                                    "attention can be compared only over the same source tokens",
                                                    g.name, t.name, gru.src_tokens.size(), transformer.src_tokens.size()));
    const Translation replayed = translate(r.transformer, {forced_output(gru, t)}).front();
    const models::AttentionMatrix reference = models::attention_matrix(gru.src_tokens, gru.out_tokens[0], gru.hyps[0]);
    const auto part = [&](const Translation& x, const ServedModel& m, size_t index) {
      nlohmann::json j = sentence_json(x, r.src, m.checkpoint.info.tgt_vocab, r.gru.response);
      j["model"] = index, j["name"] = m.name;
      return j;
    };
    return {{"src", r.src}, {"gru", part(gru, g, r.gru.model)},
            {"transformer", part(transformer, t, r.transformer.model)},
            {"transformer_on_gru_output", part(replayed, t, r.transformer.model)},
            {"same_output", gru.out_tokens[0] == transformer.out_tokens[0]},
            {"agreement", agreement_json(*replayed.heads, reference)}};
  }

  // The GRU's best output as the Transformer's target ids: 422 when the Transformer's vocabulary
  // lacks one of its tokens (then no replay could give the same rows).
  static models::ForcedOutput forced_output(const Translation& gru, const ServedModel& transformer) {
    const text::Vocab& vocab = transformer.checkpoint.info.tgt_vocab;
    for (const std::string& token : gru.out_tokens[0])
      if (!vocab.contains(token))
        throw RequestError(422, "models", fmt::format("the GRU's output token '{}' is not in the target vocabulary of "
                                                      "'{}': the Transformer cannot be replayed along the GRU's output",
                                                      token, transformer.name));
    return {vocab.encode(gru.out_tokens[0]), gru.hyps[0].finished};
  }

  nlohmann::json models_json() const {
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < models_.size(); ++i) {
      const models::CheckpointInfo& info = models_[i].checkpoint.info;
      const bool transformer = info.config.model.architecture == models::Architecture::transformer;
      out.push_back({{"model", i}, {"name", models_[i].name}, {"src_lang", info.config.src_lang},
                     {"tgt_lang", info.config.tgt_lang},
                     {"architecture", models::architecture_name(info.config.model.architecture)},
                     {"attention", transformer ? "multihead" : models::attention_kind_name(info.config.model.attention)},
                     {"src_vocab", info.src_vocab.size()}, {"tgt_vocab", info.tgt_vocab.size()},
                     {"beam", models_[i].defaults.beam_size}, {"max_len", models_[i].defaults.max_len},
                     {"max_src_tokens", models_[i].max_src_tokens}});
    }
    return {{"models", std::move(out)}};
  }

  std::vector<ServedModel>& models_;
  const ServerOptions options_;
  Metrics metrics_;
  Batcher batcher_;
  std::vector<models::DecodeOptions> defaults_;
  std::vector<int64_t> vocab_sizes_;
  RequestLimits limits_;
  HttpServer http_;
  Connections connections_;
  int port_ = 0;
};

}  // namespace

void check_server_built() {}

void block_stop_signals() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
}

int run_server(std::vector<ServedModel>& models, const ServerOptions& options) {
  Server server(models, options);
  return server.run();
}

}  // namespace seqgrad::tools::serve
