// `seqgrad serve`: translations over HTTP with continuous batching, and the attention explorer page
// (tools/serve/, docs/serving.md).
#include <algorithm>
#include <regex>
#include <string_view>
#include <tuple>

#include <fmt/core.h>

#include "core/threads.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/serve/server.h"
#include "tools/translator.h"

namespace seqgrad::tools {
namespace {

void declare_options(Args& a) {
  a.list_option("checkpoint", "file", "checkpoint to serve (float32 or int8); several (each ending in .safetensors) are "
                "served side by side, a request's \"model\" picking one by its index", "runs/default/best.safetensors",
                [](std::string_view arg) { return arg.ends_with(".safetensors"); });
  add_decode_options(a);
  a.option("host", "address", "address to listen on (only this machine by default)", "127.0.0.1")
      .option("port", "n", "port to listen on (0: any free port, printed on stdout)", "8080")
      .option("threads", "n", fmt::format("compute threads, at most {} (default: all cores)", max_threads()))
      .option("http-threads", "n", "requests answered at once (GET /health and /metrics have a thread of their own)",
              "64")
      .option("max-connections", "n", "connections open at once (being read, answered, or idle); at the limit a new "
              "one takes an idle one's place, else waits in the kernel's listen backlog", "256")
      .option("max-batch-sentences", "n", "sentences decoded together at most", "32")
      .option("max-batch-tokens", "n", "source tokens decoded together at most", "2048")
      .option("max-batch-rows", "n", "decoder rows (sentences x beam) decoded together at most; a larger request is "
              "answered 413", "512")
      .option("max-batch-cache-mb", "MiB", "search state (encoded sources, key/value caches) held at once at most; a "
              "larger request is answered 413", "512")
      .option("max-wait-ms", "ms", "how long an idle decoder waits for others to start with a request", "5")
      .option("queue-size", "n", "sentences waiting at most; a request that does not fit is answered 503", "256")
      .option("max-sentences", "n", "sentences in one request at most", "64")
      .option("max-src-tokens", "n", "source tokens of one sentence at most (default: twice the checkpoint's "
              "truncation, where `translate` truncates)")
      .option("max-src-bytes", "n", "bytes of one source sentence at most, refused (413) before it is tokenized", "4096")
      .option("max-explain-sentences", "n", "sentences in one explain request (the explorer's) at most", "1")
      .option("max-explain-beam", "n", "beam of an explain request at most", "5")
      .option("max-body-bytes", "n", "request bodies larger than this are answered 413", "1048576")
      .option("timeout", "seconds", "a request's head and body arrive within this in total, else 408 and the "
              "connection is closed; an answer is written within it", "10")
      .option("idle-timeout", "seconds", "a keep-alive connection without a request is closed after this", "5")
      .option("drain-timeout", "seconds", "after SIGTERM or Ctrl-C, the requests in flight are answered for this "
              "long at most, then the rest are closed", "5")
      .list_option("allow-host", "name", "a Host name to answer to (any port) beside 127.0.0.1, localhost, [::1] "
                   "and the listening address with the port; '*' any (behind a proxy that checks it)", "",
                   [](std::string_view arg) { return !arg.starts_with("-"); })
      .list_option("allow-origin", "origin", "an origin (https://app.example.com) whose pages may POST here and "
                   "read the answers (CORS); '*' any", "", [](std::string_view arg) { return !arg.starts_with("-"); })
      .hidden_option("fail-on", "sentence", "a test hook: a request holding this source sentence fails with 500")
      .option("allow-missing-checksum", "", "load a checkpoint that has no checksum (written before seqgrad stored "
              "one), unverified");
}

// --allow-host's names or --allow-origin's origins, each checked (a Host name has no port, an origin
// no path: neither would ever match).
std::vector<std::string> allow_list(const Args& a, const std::string& option) {
  if (!a.has(option)) return {};
  const bool origin = option == "allow-origin";
  const std::regex form(origin ? R"(https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?|https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?)"
                               : R"([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\])");
  std::vector<std::string> out = a.get_list(option);
  for (const std::string& value : out)
    SG_CHECK_USAGE(value == "*" || std::regex_match(value, form), "--{} '{}': expected {}, or '*'", option, value,
                   origin ? "an origin, scheme://host[:port] without a path (https://app.example.com)"
                          : "a host name or address without a port (app.example.com)");
  return out;
}

serve::ServerOptions server_options(const Args& a) {
  serve::ServerOptions o;
  o.host = a.get("host");
  o.port = a.get_int32("port", 0, 65535);
  o.http_threads = a.get_int32("http-threads", 1, 1024);
  o.max_connections = a.get_int32("max-connections", 1, 65536);
  SG_CHECK_USAGE(o.max_connections >= o.http_threads, "--max-connections {} is smaller than --http-threads {}: "
                 "some workers could never have a request", o.max_connections, o.http_threads);
  o.timeout = std::chrono::seconds(a.get_int("timeout", 1, 3600));
  o.idle_timeout = std::chrono::seconds(a.get_int("idle-timeout", 1, 3600));
  o.drain_timeout = std::chrono::seconds(a.get_int("drain-timeout", 0, 3600));
  o.allow_hosts = allow_list(a, "allow-host");
  o.allow_origins = allow_list(a, "allow-origin");
  if (a.has("fail-on")) o.fail_on = a.get("fail-on");
  o.max_body_bytes = static_cast<size_t>(a.get_int("max-body-bytes", 64, int64_t{1} << 30));
  o.requests.max_sentences = a.get_int("max-sentences", 1, 4096);
  o.batching.max_sentences = a.get_int("max-batch-sentences", 1, 4096);
  o.batching.max_tokens = a.get_int("max-batch-tokens", 1, int64_t{1} << 20);
  o.batching.max_rows = a.get_int("max-batch-rows", 1, int64_t{1} << 20);
  o.batching.max_cache_bytes = a.get_int("max-batch-cache-mb", 1, int64_t{1} << 20) << 20;
  o.requests.max_src_bytes = a.get_int("max-src-bytes", 1, int64_t{1} << 30);
  o.requests.max_explain_sentences = a.get_int("max-explain-sentences", 1, 4096);
  o.requests.max_explain_beam = a.get_int("max-explain-beam", 1, 4096);
  o.batching.max_wait = std::chrono::milliseconds(a.get_int("max-wait-ms", 0, 10'000));
  o.batching.queue_sentences = a.get_int("queue-size", 1, int64_t{1} << 20);
  SG_CHECK_USAGE(o.batching.queue_sentences >= o.requests.max_sentences, "--queue-size {} is smaller than "
                 "--max-sentences {}: a full request could never be queued", o.batching.queue_sentences,
                 o.requests.max_sentences);
  return o;
}

}  // namespace

int serve_main(int argc, char** argv) {
  Args a("serve", "Serve translations over HTTP (JSON; OpenNMT-py's /translator/translate too) and the attention\n"
                  "explorer page at /. Concurrent requests share every decoder step (continuous batching). Listens\n"
                  "on 127.0.0.1 unless --host says otherwise; SIGTERM or Ctrl-C stops it after answering the\n"
                  "requests in flight. The API: docs/serving.md.");
  declare_options(a);
  if (!a.parse(argc, argv)) return 0;
  check_decode_flags(a);
  serve::ServerOptions options = server_options(a);
  if (a.has("max-src-tokens")) a.get_int("max-src-tokens", 1, 100'000);  // refused before anything loads
  serve::check_server_built();
  serve::block_stop_signals();  // before any thread starts, so that every thread inherits the mask
  if (a.has("threads")) set_num_threads(a.get_threads());
  std::vector<serve::ServedModel> models;
  for (const std::string& path : a.get_list("checkpoint")) {
    serve::ServedModel m;
    m.name = path;
    std::tie(m.checkpoint, m.model) = load_checkpoint_model(path, a);
    const models::TrainConfig& config = m.checkpoint.info.config;
    m.defaults = decode_options(a, config);
    m.max_src_tokens = a.has("max-src-tokens") ? a.get_int("max-src-tokens", 1) : 2 * config.max_tokens;
    options.requests.max_len = std::max(options.requests.max_len, m.defaults.max_len);
    models.push_back(std::move(m));
  }
  return serve::run_server(models, options);
}

}  // namespace seqgrad::tools
