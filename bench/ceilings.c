/* ceilings.c - the machine's own limits, so every benchmark figure can be read as a fraction
 * of them: sgemm GFLOP/s (OpenBLAS, 1024^3 and 2048^3) and a large copy's GB/s (bytes read +
 * written).  Prints one JSON line.  Threads: OPENBLAS_NUM_THREADS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double best_gemm(int n, int reps) {
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    for (long i = 0; i < (long)n * n; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.2f;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = now();
        cblas_sgemm(101, 111, 111, n, n, n, 1, a, n, b, n, 0, c, n);
        t = now() - t;
        if (t < best) best = t;
    }
    free(a), free(b), free(c);
    return 2.0 * n * n * (double)n / best / 1e9;
}

int main(void) {
    size_t bytes = (size_t)256 << 20;
    char *s = malloc(bytes), *d = malloc(bytes);
    memset(s, 1, bytes), memset(d, 2, bytes);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t = now();
        memcpy(d, s, bytes);
        t = now() - t;
        if (t < best) best = t;
    }
    printf("{\"sgemm1024_gflops\":%.1f,\"sgemm2048_gflops\":%.1f,\"copy_gbs\":%.2f}\n", best_gemm(1024, 5),
           best_gemm(2048, 3), 2.0 * (double)bytes / best / 1e9);
    int rc = d[0] == 3;   /* uses the copy, so it is not optimized away */
    free(s), free(d);
    return rc;
}
