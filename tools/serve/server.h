// `seqgrad serve`'s HTTP server: the routes of docs/serving.md over the served checkpoints, a
// Batcher decoding the requests' sentences together, connections read whole under a deadline before
// a worker sees them (tools/serve/connections.h), requests refused for a Host or Origin the server
// does not answer to, and a bounded stop on SIGTERM or SIGINT (no new connections; requests in
// flight are answered for --drain-timeout at most; then the process exits 0).
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tools/serve/batcher.h"
#include "tools/serve/request.h"
#include "tools/translator.h"

namespace seqgrad::tools::serve {

struct ServedModel {
  std::string name;  // the checkpoint's path, as given
  models::LoadedCheckpoint checkpoint;  // its vocabularies and config (the weights are in `model`)
  std::unique_ptr<models::TranslationModel> model;
  models::DecodeOptions defaults;  // the command line's decoding, for what a request leaves out
  int64_t max_src_tokens = 0;      // a longer source sentence is refused (422)
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (printed)
  int http_threads = 64;              // requests answered at once
  int max_connections = 256;         // open at once; more wait in the listen backlog
  std::chrono::seconds timeout{10};  // a request's head and body arrive within this in total (else 408);
                                     // an answer is written within it
  std::chrono::seconds idle_timeout{5};   // a keep-alive connection without a request is closed after this
  std::chrono::seconds drain_timeout{5};  // after SIGTERM, for the requests in flight
  size_t max_body_bytes = 1 << 20;   // larger bodies are refused (413)
  std::vector<std::string> allow_hosts;    // Host names answered beside the loopback ones ("*": any)
  std::vector<std::string> allow_origins;  // origins that may POST from a browser ("*": any)
  std::string fail_on;  // a test hook: a request with this source sentence fails (500)
  RequestLimits requests;
  BatchLimits batching;
};

// Throws when this build has no HTTP server (built without cpp-httplib), before anything loads.
void check_server_built();
// Serves until SIGTERM or SIGINT. The caller blocks both signals in every thread first
// (block_stop_signals, before any thread starts), so that only the server's watcher receives them.
int run_server(std::vector<ServedModel>& models, const ServerOptions& options);
void block_stop_signals();

}  // namespace seqgrad::tools::serve
