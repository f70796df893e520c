// `seqgrad serve`'s HTTP server over cpp-httplib (tools/serve/server.h).
#include "tools/serve/server.h"

#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include <fmt/core.h>
#include <httplib.h>

#include "core/error.h"
#include "tools/serve/explorer.h"
#include "tools/serve/metrics.h"
#include "tools/serve/response.h"

namespace seqgrad::tools::serve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRetryAfterSeconds = 1;  // an overloaded queue drains within about a batch's time

// When the request this worker thread is answering arrived (set before routing), for its latency.
thread_local Clock::time_point request_started;

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

// httplib::Server listening with a queue of pending connections as long as the system allows:
// cpp-httplib 0.11 (Debian 12) listens with a backlog of 5, so under a burst of new connections
// the kernel drops the others' SYNs and their clients retry a second later. Listening again on the
// bound socket changes the backlog (Linux).
class HttpServer : public httplib::Server {
 public:
  void widen_backlog() { ::listen(svr_sock_, SOMAXCONN); }
};

class Server {
 public:
  Server(std::vector<ServedModel>& models, const ServerOptions& options)
      : models_(models), options_(options), batcher_(batch_models(models), options.batching, metrics_) {
    for (const ServedModel& m : models) {
      defaults_.push_back(m.defaults);
      vocab_sizes_.push_back(static_cast<int64_t>(m.checkpoint.info.tgt_vocab.size()));
    }
    limits_ = options.requests;
    limits_.models = models.size();
    configure();
  }

  int run() {
    const int port = options_.port == 0 ? http_.bind_to_any_port(options_.host)
                                        : (http_.bind_to_port(options_.host, options_.port) ? options_.port : -1);
    SG_CHECK_IO(port > 0, "serve: cannot listen on {}:{} (in use, or not an address of this machine)", options_.host,
                options_.port);
    http_.widen_backlog();
    fmt::print("seqgrad serve: listening on http://{}:{}/ ({} checkpoint{}; SIGTERM or Ctrl-C stops)\n", options_.host,
               port, models_.size(), models_.size() == 1 ? "" : "s");
    std::fflush(stdout);
    std::atomic<bool> finished = false;
    std::thread watcher([&] { stop_on_signal(finished); });
    http_.listen_after_bind();  // returns after stop(), once the requests in flight are answered
    finished = true;
    watcher.join();
    batcher_.stop();
    fmt::print("seqgrad serve: stopped\n");
    return 0;
  }

 private:
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
      fmt::print(stderr, "seqgrad serve: {}: finishing the requests in flight, then stopping\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
      // stop() does nothing before listen_after_bind() has started: a signal right after the start
      // would be lost, so wait until it runs
      while (!http_.is_running() && !finished) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      http_.stop();
      return;
    }
  }

  void configure() {
    const int threads = options_.http_threads;
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, with which a second server started on
    // the same port would silently share its connections instead of failing to start
    http_.set_socket_options([](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    http_.set_read_timeout(options_.timeout.count());
    http_.set_write_timeout(options_.timeout.count());
    http_.set_keep_alive_timeout(std::min<time_t>(options_.timeout.count(), 5));
    http_.set_payload_max_length(options_.max_body_bytes);
    http_.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
      request_started = Clock::now();
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http_.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // a route's own error
      send_error(res, res.status, "", status_message(res.status));
      return httplib::Server::HandlerResponse::Handled;
    }));
    http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr e) {
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
      }
      send_error(res, 500, "", "internal error: " + what);
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
