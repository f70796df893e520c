// `seqgrad serve`: translations over HTTP with continuous batching, and the attention explorer page
// (tools/serve/, docs/serving.md).
#include <algorithm>
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
      .option("http-threads", "n", "connections served at once", "64")
      .option("max-batch-sentences", "n", "sentences decoded together at most", "32")
      .option("max-batch-tokens", "n", "source tokens decoded together at most", "2048")
      .option("max-wait-ms", "ms", "how long an idle decoder waits for others to start with a request", "5")
      .option("queue-size", "n", "sentences waiting at most; a request that does not fit is answered 503", "256")
      .option("max-sentences", "n", "sentences in one request at most", "64")
      .option("max-src-tokens", "n", "source tokens of one sentence at most (default: twice the checkpoint's "
              "truncation, where `translate` truncates)")
      .option("max-body-bytes", "n", "request bodies larger than this are answered 413", "1048576")
      .option("timeout", "seconds", "reading a request or writing an answer takes at most this long", "10")
      .option("allow-missing-checksum", "", "load a checkpoint that has no checksum (written before seqgrad stored "
              "one), unverified");
}

serve::ServerOptions server_options(const Args& a) {
  serve::ServerOptions o;
  o.host = a.get("host");
  o.port = a.get_int32("port", 0, 65535);
  o.http_threads = a.get_int32("http-threads", 1, 1024);
  o.timeout = std::chrono::seconds(a.get_int("timeout", 1, 3600));
  o.max_body_bytes = static_cast<size_t>(a.get_int("max-body-bytes", 64, int64_t{1} << 30));
  o.requests.max_sentences = a.get_int("max-sentences", 1, 4096);
  o.batching.max_sentences = a.get_int("max-batch-sentences", 1, 4096);
  o.batching.max_tokens = a.get_int("max-batch-tokens", 1, int64_t{1} << 20);
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
