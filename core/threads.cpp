#include "core/threads.h"

#include <omp.h>

#include "core/blas.h"
#include "core/error.h"

namespace seqgrad {
namespace {
int num_threads = 0;  // 0: not chosen yet, use all cores
}

void set_num_threads(int n) {
  SG_CHECK_VALUE(n >= 1, "set_num_threads: n = {} must be at least 1", n);
  num_threads = n;
  omp_set_num_threads(n);
  blas::set_num_threads(n);
}

int get_num_threads() {
  if (num_threads == 0) num_threads = omp_get_num_procs();
  return num_threads;
}

}  // namespace seqgrad
