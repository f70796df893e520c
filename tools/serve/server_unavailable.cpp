// `seqgrad serve` in a build without cpp-httplib: the command parses its options (so --help and
// usage errors behave as in a full build) and then says what the build lacks.
#include "core/error.h"
#include "tools/serve/server.h"

namespace seqgrad::tools::serve {

void check_server_built() {
  SG_CHECK_IO(false, "serve: this seqgrad was built without an HTTP server: install cpp-httplib "
              "(Debian: apt-get install libcpp-httplib-dev), then reconfigure and rebuild (meson setup --reconfigure "
              "BUILD_DIR; ninja -C BUILD_DIR)");
}

void block_stop_signals() {}

int run_server(std::vector<ServedModel>&, const ServerOptions&) {
  check_server_built();
  return 1;
}

}  // namespace seqgrad::tools::serve
