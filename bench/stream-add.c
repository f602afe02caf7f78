/*
 * The streaming reference of bench/native-kernels.ts: `a[i] += b[i]` over two
 * f32 arrays, the plain C loop a compiler vectorises on its own. The benchmark
 * compiles it with `cc -O3 -march=native -pthread` and runs it as a subprocess.
 *
 *   stream-add THREADS MIB PASSES
 *
 * Both arrays are touched first (page faults are not timed) and one untimed
 * pass warms up. Each timed pass splits the arrays into THREADS contiguous
 * slices, one per thread; the threads are started once and meet at a barrier
 * before and after every pass, and the main thread (one of them) reads
 * CLOCK_MONOTONIC at both barriers. A pass moves 3 x MIB MiB (read a, read b,
 * write a). Prints one line: `median_gbps <x> passes <p> threads <t>`, where
 * GB is 1e9 bytes, then every pass's GB/s.
 *
 * Built with -DSTREAM_ADD_LIBRARY -shared it is instead a library with one
 * call, `stream_add(a, b, n, threads)`: one pass over caller-owned arrays,
 * starting THREADS - 1 threads for the call as cohort's kernels do, so the
 * benchmark can alternate it call by call with the kernel in one process.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static float *a, *b;
static size_t n;
static int threads;

static void add_slice(size_t from, size_t to) {
  float *restrict x = a;
  const float *restrict y = b;
  for (size_t i = from; i < to; i++) x[i] += y[i];
}

static void slice(int part, size_t *from, size_t *to) {
  size_t per = (n + threads - 1) / threads;
  *from = per * part < n ? per * part : n;
  *to = per * (part + 1) < n ? per * (part + 1) : n;
}

#ifdef STREAM_ADD_LIBRARY

static void *one_slice(void *arg) {
  size_t from, to;
  slice((int)(size_t)arg, &from, &to);
  add_slice(from, to);
  return NULL;
}

void stream_add(float *x, const float *y, size_t len, int parts) {
  a = x;
  b = (float *)y;
  n = len;
  threads = parts < 1 ? 1 : parts > 64 ? 64 : parts;
  pthread_t ids[64];
  for (int part = 1; part < threads; part++) pthread_create(&ids[part], NULL, one_slice, (void *)(size_t)part);
  one_slice((void *)0);
  for (int part = 1; part < threads; part++) pthread_join(ids[part], NULL);
}

#else

static int passes;
static pthread_barrier_t start_line, finish_line;

static void *worker(void *arg) {
  int part = (int)(size_t)arg;
  size_t from, to;
  slice(part, &from, &to);
  for (int pass = 0; pass <= passes; pass++) {
    pthread_barrier_wait(&start_line);
    add_slice(from, to);
    pthread_barrier_wait(&finish_line);
  }
  return NULL;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *x, const void *y) {
  double d = *(const double *)x - *(const double *)y;
  return (d > 0) - (d < 0);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: stream-add THREADS MIB PASSES\n");
    return 2;
  }
  threads = atoi(argv[1]);
  size_t mib = (size_t)atol(argv[2]);
  passes = atoi(argv[3]);
  if (threads < 1 || mib < 1 || passes < 1) return 2;
  n = mib * (1 << 20) / sizeof(float);
  a = aligned_alloc(64, n * sizeof(float));
  b = aligned_alloc(64, n * sizeof(float));
  if (a == NULL || b == NULL) return 1;
  /* First touch: fault every page in before the clock runs. */
  for (size_t i = 0; i < n; i++) {
    a[i] = 1.0f;
    b[i] = 0.5f;
  }
  pthread_barrier_init(&start_line, NULL, threads);
  pthread_barrier_init(&finish_line, NULL, threads);
  pthread_t *ids = calloc(threads, sizeof(pthread_t));
  for (int part = 1; part < threads; part++) pthread_create(&ids[part], NULL, worker, (void *)(size_t)part);
  size_t from, to;
  slice(0, &from, &to);
  double *gbps = calloc(passes, sizeof(double));
  /* Pass 0 is the untimed warm-up. */
  for (int pass = 0; pass <= passes; pass++) {
    pthread_barrier_wait(&start_line);
    double started = now();
    add_slice(from, to);
    pthread_barrier_wait(&finish_line);
    double seconds = now() - started;
    if (pass > 0) gbps[pass - 1] = 3.0 * n * sizeof(float) / seconds / 1e9;
  }
  for (int part = 1; part < threads; part++) pthread_join(ids[part], NULL);
  double checksum = 0;
  for (size_t i = 0; i < n; i += 4096) checksum += a[i];
  double *sorted = calloc(passes, sizeof(double));
  memcpy(sorted, gbps, passes * sizeof(double));
  qsort(sorted, passes, sizeof(double), by_value);
  double median = passes % 2 ? sorted[passes / 2] : (sorted[passes / 2 - 1] + sorted[passes / 2]) / 2;
  printf("median_gbps %.3f passes %d threads %d checksum %.1f\n", median, passes, threads, checksum);
  for (int pass = 0; pass < passes; pass++) printf("%.3f\n", gbps[pass]);
  return 0;
}

#endif
