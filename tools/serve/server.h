// `seqgrad serve`'s HTTP server (cpp-httplib): the routes of docs/serving.md over the served
// checkpoints, a Batcher decoding the requests' sentences together, and a clean stop on SIGTERM or
// SIGINT (no new connections; requests in flight are answered; then run_server returns 0).
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
  int http_threads = 64;
  std::chrono::seconds timeout{10};  // reading a request or writing an answer takes at most this
  size_t max_body_bytes = 1 << 20;   // larger bodies are refused (413)
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
