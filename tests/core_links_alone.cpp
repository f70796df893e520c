// The core library links alone: this program is linked with every object of libsg_core
// (link_whole) and nothing from ops/, so a call from core into ops/ (a wrong-way dependency)
// fails its link. Core reaches ops only through core/ops_hooks.h; without ops linked, asking for
// one of those services is a clear error, which this program checks.
#include <cstdio>
#include <string>

#include "core/autograd.h"
#include "core/ops_hooks.h"

int main() {
  using namespace seqgrad;
  // Core's own work needs no ops: tensors, their values, a recorded node.
  Tensor x = full({3}, 2.0, {.dtype = DType::f64}).requires_grad_();
  if (x.to_vector<double>() != std::vector<double>{2, 2, 2}) {
    std::fprintf(stderr, "core_links_alone: wrong values\n");
    return 1;
  }
  // Two backward passes into one leaf: the second must add to .grad, which takes ops' add; the
  // error names what is missing.
  try {
    for (int pass = 0; pass < 2; ++pass)
      record("identity", x.detach(), {x}, [](const Tensor& dy, Grads& g) { g.add(0, dy); }).backward(x.detach());
  } catch (const Error& e) {
    const std::string want = "core: gradient accumulation needs the ops library";
    if (std::string(e.what()).find(want) != std::string::npos) return 0;
    std::fprintf(stderr, "core_links_alone: unexpected message: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "core_links_alone: accumulating without ops did not throw\n");
  return 1;
}
