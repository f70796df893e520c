// Loads OpenBLAS with dlopen after choosing OPENBLAS_CORETYPE (see blas.h for why).
#include "core/blas.h"

#include <dlfcn.h>

#include <cblas.h>
#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "core/error.h"

#ifndef SG_OPENBLAS_LIBDIR
#define SG_OPENBLAS_LIBDIR ""
#endif

namespace seqgrad::blas {
namespace {

using SgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint,
                         float, const float*, blasint, const float*, blasint, float, float*, blasint);
using DgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint,
                         double, const double*, blasint, const double*, blasint, double, double*,
                         blasint);
using SgemvFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, blasint, blasint, float, const float*, blasint, const float*,
                         blasint, float, float*, blasint);
using DgemvFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, blasint, blasint, double, const double*, blasint,
                         const double*, blasint, double, double*, blasint);
using SetThreadsFn = void (*)(int);
using CorenameFn = char* (*)();

struct Library {
  void* handle = nullptr;
  std::string path;
  bool coretype_set_by_us = false;
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
  SgemvFn sgemv = nullptr;
  DgemvFn dgemv = nullptr;
  SetThreadsFn set_threads = nullptr;
  CorenameFn corename = nullptr;
};

// OpenBLAS runs single-threaded inside each call: seqgrad splits large products across its own
// pool (core/threads.h), which copes with a loaded machine. The pthread build is safe to call
// from several threads at once (and is the one Debian's PyTorch uses, through libblas.so.3).
const char* const kCandidates[] = {
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    SG_OPENBLAS_LIBDIR "/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
    "libopenblas.so.0",
    "libopenblas.so",
};

bool choose_coretype() {
#if defined(__x86_64__)
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && __builtin_cpu_supports("avx512f")) {
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 0);
    return true;
  }
#endif
  return false;
}

Library load() {
  Library lib;
  lib.coretype_set_by_us = choose_coretype();
  // One thread from the start, not only after openblas_set_num_threads(1) below: at load, OpenBLAS
  // starts a server thread per extra core, and each reserves a 128 MB buffer; under an address-space
  // limit (ulimit -v) that reservation fails and the thread retries forever, so the process hangs at
  // exit joining it.
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  std::string tried;
  for (const char* path : kCandidates) {
    lib.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib.handle) {
      lib.path = path;
      break;
    }
    tried += fmt::format("\n  {}: {}", path, dlerror());
  }
  SG_CHECK(lib.handle, "blas: could not load OpenBLAS (install libopenblas0-pthread); tried:{}", tried);
  lib.sgemm = reinterpret_cast<SgemmFn>(dlsym(lib.handle, "cblas_sgemm"));
  lib.dgemm = reinterpret_cast<DgemmFn>(dlsym(lib.handle, "cblas_dgemm"));
  lib.sgemv = reinterpret_cast<SgemvFn>(dlsym(lib.handle, "cblas_sgemv"));
  lib.dgemv = reinterpret_cast<DgemvFn>(dlsym(lib.handle, "cblas_dgemv"));
  lib.set_threads = reinterpret_cast<SetThreadsFn>(dlsym(lib.handle, "openblas_set_num_threads"));
  lib.corename = reinterpret_cast<CorenameFn>(dlsym(lib.handle, "openblas_get_corename"));
  SG_CHECK(lib.sgemm && lib.dgemm && lib.sgemv && lib.dgemv, "blas: {} lacks cblas_sgemm/dgemm/sgemv/dgemv",
           lib.path);
  if (lib.set_threads) lib.set_threads(1);
  return lib;
}

Library& library() {
  static Library lib = load();
  return lib;
}

CBLAS_TRANSPOSE cblas(Trans t) { return t == Trans::yes ? CblasTrans : CblasNoTrans; }

}  // namespace

void sgemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  library().sgemm(CblasRowMajor, cblas(ta), cblas(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void dgemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
           int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  library().dgemm(CblasRowMajor, cblas(ta), cblas(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// OpenBLAS's gemv scales y by beta first, and 0 · NaN is NaN: y is zeroed here instead.
template <class T, class Fn>
void gemv(Fn fn, Trans ta, int64_t m, int64_t n, T alpha, const T* a, int64_t lda, const T* x, int64_t incx, T beta,
          T* y) {
  if (beta == T(0)) std::fill(y, y + (ta == Trans::no ? m : n), T(0));
  fn(CblasRowMajor, cblas(ta), m, n, alpha, a, lda, x, incx, beta, y, 1);
}

void sgemv(Trans ta, int64_t m, int64_t n, float alpha, const float* a, int64_t lda, const float* x, int64_t incx,
           float beta, float* y) {
  gemv(library().sgemv, ta, m, n, alpha, a, lda, x, incx, beta, y);
}

void dgemv(Trans ta, int64_t m, int64_t n, double alpha, const double* a, int64_t lda, const double* x,
           int64_t incx, double beta, double* y) {
  gemv(library().dgemv, ta, m, n, alpha, a, lda, x, incx, beta, y);
}

void set_num_threads(int n) {
  if (auto f = library().set_threads) f(n);
}

std::string describe() {
  Library& lib = library();
  const char* core = lib.corename ? lib.corename() : "unknown";
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  return fmt::format("{} (kernels: {}{})", lib.path, core,
                     lib.coretype_set_by_us ? ", OPENBLAS_CORETYPE=SkylakeX set by seqgrad"
                     : env                  ? fmt::format(", OPENBLAS_CORETYPE={} from the environment", env)
                                            : "");
}

}  // namespace seqgrad::blas
