/*
 * All-reduce bandwidth rank program for Open MPI (bench/allreduce.ts).
 * Built by the benchmark with `mpicc -O2`, run with
 * `mpirun --allow-run-as-root --oversubscribe -np N allreduce-mpi <plan>`.
 *
 * The plan is `<bytes>:<warm-up>:<iterations>,...`, the same the cohort entry
 * gets. For each size: a float buffer of bytes / 4 zeros, `warm-up` untimed
 * calls, a barrier, then `iterations` calls of
 * MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
 * each timed alone with MPI_Wtime (in place and a sum, as gloo's and
 * cohort's `sum`; no division). Then one untimed check (rank + 1 everywhere,
 * summed: N (N + 1) / 2). Rank 0 prints one JSON line per size, the same
 * shape as the cohort entry's.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc < 2) {
    if (rank == 0) fprintf(stderr, "usage: allreduce-mpi <bytes>:<warm-up>:<iterations>,...\n");
    MPI_Finalize();
    return 2;
  }
  int all_ok = 1;
  char *plan = strdup(argv[1]);
  for (char *step = strtok(plan, ","); step != NULL; step = strtok(NULL, ",")) {
    long bytes = 0, warm = 0, iterations = 0;
    if (sscanf(step, "%ld:%ld:%ld", &bytes, &warm, &iterations) != 3) {
      fprintf(stderr, "bad plan step %s\n", step);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int count = (int)(bytes / 4);
    float *buf = malloc((size_t)(count > 0 ? count : 1) * sizeof(float));
    double *times = malloc((size_t)(iterations > 0 ? iterations : 1) * sizeof(double));
    for (int i = 0; i < count; i++) buf[i] = 0.0f;
    for (long i = 0; i < warm; i++) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < iterations; i++) {
      double start = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times[i] = (MPI_Wtime() - start) * 1000.0;
    }
    for (int i = 0; i < count; i++) buf[i] = (float)(rank + 1);
    MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    float expected = (float)(n * (n + 1) / 2);
    int ok = 1;
    for (int i = 0; i < count; i++) if (buf[i] != expected) { ok = 0; break; }
    all_ok = all_ok && ok;
    if (rank == 0) {
      printf("{\"allreduce\":{\"n\":%d,\"bytes\":%ld,\"op\":\"sum\",\"ms\":[", n, bytes);
      for (long i = 0; i < iterations; i++) printf("%s%.6f", i == 0 ? "" : ",", times[i]);
      printf("],\"ok\":%s}}\n", ok ? "true" : "false");
      fflush(stdout);
    }
    free(buf);
    free(times);
  }
  free(plan);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
