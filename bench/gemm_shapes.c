// Where a program's float32 GEMM time goes, by shape: an LD_PRELOAD library that times every
// cblas_sgemm call seqgrad makes and, at exit, prints the shapes by total time with their call
// counts, share of all GEMM time and GFLOP/s per calling thread (the pool splits a product into
// pieces, one per thread, so these are the pieces' shapes). seqgrad loads OpenBLAS with dlopen
// and looks cblas_sgemm up with dlsym, so that lookup is the one intercepted.
//
//   gcc -O2 -shared -fPIC -o gemm_shapes.so bench/gemm_shapes.c
//   LD_PRELOAD=./gemm_shapes.so build/tools/seqgrad bench step_seed --threads 2 --repeats 5 --warmup 1
//
// GEMM_SHAPES_TOP (default 20) sets how many shapes are printed. Timing adds about a microsecond a
// call; compare shapes within one run, not against runs without it.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                         int);

enum { kMaxShapes = 8192, kNoTrans = 111 };  // CblasNoTrans

struct shape {
  int trans_a, trans_b, m, n, k;
  long calls;
  double seconds;
};

static sgemm_fn real_sgemm;
static struct shape shapes[kMaxShapes];
static int shape_count;
static long dropped_calls;  // calls of shapes past kMaxShapes
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void record(int trans_a, int trans_b, int m, int n, int k, double seconds) {
  pthread_mutex_lock(&mutex);
  int i = 0;
  while (i < shape_count && !(shapes[i].trans_a == trans_a && shapes[i].trans_b == trans_b && shapes[i].m == m &&
                              shapes[i].n == n && shapes[i].k == k))
    ++i;
  if (i == shape_count && shape_count < kMaxShapes)
    shapes[shape_count++] = (struct shape){trans_a, trans_b, m, n, k, 0, 0.0};
  if (i < shape_count) {
    shapes[i].calls++;
    shapes[i].seconds += seconds;
  } else {
    dropped_calls++;
  }
  pthread_mutex_unlock(&mutex);
}

static void timed_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                        int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  const double start = now();
  real_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  record(trans_a, trans_b, m, n, k, now() - start);
}

void* dlsym(void* handle, const char* name) {
  static void* (*real_dlsym)(void*, const char*);
  if (!real_dlsym) real_dlsym = (void* (*)(void*, const char*))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  void* symbol = real_dlsym(handle, name);
  if (symbol && strcmp(name, "cblas_sgemm") == 0) {
    real_sgemm = (sgemm_fn)symbol;
    return (void*)timed_sgemm;
  }
  return symbol;
}

static double flops(const struct shape* s) { return 2.0 * s->m * s->n * s->k * (double)s->calls; }

static int by_time(const void* a, const void* b) {
  const double ta = ((const struct shape*)a)->seconds, tb = ((const struct shape*)b)->seconds;
  return (ta < tb) - (ta > tb);
}

__attribute__((destructor)) static void report(void) {
  if (shape_count == 0) return;
  qsort(shapes, (size_t)shape_count, sizeof shapes[0], by_time);
  double seconds = 0, total_flops = 0;
  for (int i = 0; i < shape_count; ++i) seconds += shapes[i].seconds, total_flops += flops(&shapes[i]);
  const char* top_env = getenv("GEMM_SHAPES_TOP");
  const int top = top_env ? atoi(top_env) : 20;
  fprintf(stderr, "gemm_shapes: %d shapes, %.2f thread-seconds in sgemm, %.1f GFLOP/s per thread overall\n",
          shape_count, seconds, total_flops / seconds * 1e-9);
  fprintf(stderr, "  op      m      n      k     calls   share  GFLOP/s per thread\n");
  for (int i = 0; i < shape_count && i < top; ++i) {
    const struct shape* s = &shapes[i];
    fprintf(stderr, "  %c%c %6d %6d %6d %9ld  %5.1f%%  %6.1f\n", s->trans_a == kNoTrans ? 'N' : 'T',
            s->trans_b == kNoTrans ? 'N' : 'T', s->m, s->n, s->k, s->calls, 100 * s->seconds / seconds,
            flops(s) / s->seconds * 1e-9);
  }
  if (dropped_calls) fprintf(stderr, "  (%ld calls of further shapes not counted)\n", dropped_calls);
}
