// Why seqgrad's sgemm row trails torch.mm on the same OpenBLAS: one 1024x1024x1024 product as one
// OpenBLAS call on OpenBLAS's own 2 threads (what torch.mm runs), against the same product cut in
// two halves computed at once on two threads, each a single-threaded OpenBLAS call (what seqgrad's
// pool runs, ops/cpu/gemm.cpp: split along M, or along N). Prints the best of 10 of each, 5 rounds.
//
//   gcc -O2 -o sgemm_split bench/sgemm_split.c -I/usr/include/x86_64-linux-gnu/openblas-pthread
//       -L/usr/lib/x86_64-linux-gnu/openblas-pthread -lopenblas -lpthread      (one command)
//   OPENBLAS_CORETYPE=SkylakeX ./sgemm_split
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

extern void openblas_set_num_threads(int);

enum { n = 1024, kRuns = 10, kRounds = 5 };
static float *A, *B, *C;
static int split_columns;  // 0: halves of M (rows of A and C); 1: halves of N (columns of B and C)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void* half(void* arg) {
  const long h = (long)arg;
  if (split_columns)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n / 2, n, 1, A, n, B + h * n / 2, n, 0,
                C + h * n / 2, n);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n / 2, n, n, 1, A + h * n / 2 * n, n, B, n, 0,
                C + h * n / 2 * n, n);
  return NULL;
}

static double whole(void) {
  const double t = now();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, A, n, B, n, 0, C, n);
  return now() - t;
}

static double halves(void) {
  pthread_t other;
  const double t = now();
  pthread_create(&other, NULL, half, (void*)1L);
  half((void*)0L);
  pthread_join(other, NULL);
  return now() - t;
}

static double best_gflops(double (*run)(void)) {
  double best = 1e9;
  for (int r = 0; r < kRuns; ++r) {
    const double t = run();
    if (t < best) best = t;
  }
  return 2.0 * n * n * n / best / 1e9;
}

int main(void) {
  A = malloc(sizeof(float) * n * n), B = malloc(sizeof(float) * n * n), C = malloc(sizeof(float) * n * n);
  for (long i = 0; i < (long)n * n; ++i) A[i] = (float)(i % 7) * 0.1f, B[i] = (float)(i % 5) * 0.1f;
  for (int round = 0; round < kRounds; ++round) {
    openblas_set_num_threads(2);
    const double one_call = best_gflops(whole);
    openblas_set_num_threads(1);
    split_columns = 0;
    const double rows = best_gflops(halves);
    split_columns = 1;
    const double columns = best_gflops(halves);
    printf("one call on OpenBLAS's 2 threads %.1f GFLOP/s; two row halves %.1f; two column halves %.1f\n", one_call,
           rows, columns);
  }
  free(A), free(B), free(C);
  return 0;
}
