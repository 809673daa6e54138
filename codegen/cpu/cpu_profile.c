/* cpu_profile.c - the CPU target's side of --profile: a call with every launch timed, and the
 * machine's ceilings.
 *
 * The generated entry calls its launch functions one after another on the calling thread (each
 * one threaded inside with OpenMP), so the monotonic clock read between two launches is that
 * launch's time: a build with BuildOpts.launch_access exports NAME_timed, which makes the call
 * through the runtime as NAME_run would, with this file's clock read around each launch.
 *
 * The ceilings are measured here, as bench/ceilings.c does, on the most threads the model uses:
 * the memory's bandwidth by a copy of 256 MiB split over them (bytes read + written per second,
 * the best of three), and the arithmetic by the BLAS the models call (sgemm and dgemm of
 * 1024 x 1024 matrices on that many threads, the best of five).  They are what this machine
 * reaches on a large copy and a large product, not its peak: a launch can pass them.  Kernels whose data stays in the caches can move
 * bytes faster than the memory, so a launch's share of the bandwidth may pass 100%. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h"

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int cpu_run_timed(LoadedModel *lm, const Program *p, int entry, const void *const *in, int64_t batch, double *t) {
    (void)p;
    typedef int (*timed_fn)(void *, int, const void *const *, int64_t, double (*)(void), double *);
    Str sym = {0};
    str_printf(&sym, "%s_timed", lm->abi->name);
    timed_fn fn;
    *(void **)&fn = lm->handle ? dlsym(lm->handle, sym.buf) : NULL;
    str_free(&sym);
    if (!fn) return 3; /* NNC_STATUS_ENTRY: not built with launch_access */
    return fn(lm->m, entry, in, batch, now_seconds, t);
}

/* ---- ceilings ---------------------------------------------------------------------------------- */

typedef struct {
    char *dst;
    const char *src;
    size_t bytes;
} CopyPart;

static void *copy_part(void *arg) {
    CopyPart *c = arg;
    memcpy(c->dst, c->src, c->bytes);
    return NULL;
}

/* One copy of `bytes` split over `threads` threads (a part that gets no thread is copied here). */
static void copy_split(char *d, const char *s, size_t bytes, int threads) {
    pthread_t th[64];
    CopyPart part[64];
    bool started[64] = {false};
    threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
    size_t per = bytes / (size_t)threads;
    for (int i = 0; i < threads; i++)
        part[i] = (CopyPart){d + (size_t)i * per, s + (size_t)i * per, i + 1 < threads ? per : bytes - (size_t)i * per};
    for (int i = 1; i < threads; i++) started[i] = pthread_create(&th[i], NULL, copy_part, &part[i]) == 0;
    copy_part(&part[0]);
    for (int i = 1; i < threads; i++)
        if (started[i]) pthread_join(th[i], NULL);
        else copy_part(&part[i]);
}

/* GB/s (bytes read + written) of a copy of `bytes` over `threads` threads, the best of three;
 * 0 when the memory cannot be had. */
static double copy_gbs(size_t bytes, int threads) {
    char *s = malloc(bytes), *d = malloc(bytes);
    double best = 0;
    if (s && d) {
        memset(s, 1, bytes), memset(d, 2, bytes); /* mapped before it is timed */
        for (int r = 0; r < 3; r++) {
            double t0 = now_seconds();
            copy_split(d, s, bytes, threads);
            double gbs = 2.0 * (double)bytes / (now_seconds() - t0) / 1e9;
            if (gbs > best) best = gbs;
        }
    }
    free(s), free(d);
    return best;
}

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                         int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int, const double *, int, double,
                         double *, int);

/* GFLOP/s of an n^3 product by the BLAS's sgemm (or dgemm) on `threads` threads, the best of
 * five (a busy core makes the others slow).  A model keeps OpenBLAS on one thread (its products are cut over nnc's own pool,
 * include/nnc_pool.h), so the count is set for the measurement and put back. */
static double gemm_gflops(void *blas, bool f64, int n, int threads) {
    void *fn = dlsym(blas, f64 ? "cblas_dgemm" : "cblas_sgemm");
    void (*set)(int);
    int (*get)(void);
    *(void **)&set = dlsym(blas, "openblas_set_num_threads");
    *(void **)&get = dlsym(blas, "openblas_get_num_threads");
    int was = get ? get() : 0;
    if (set) set(threads);
    size_t el = f64 ? 8 : 4, nn = (size_t)n * (size_t)n;
    char *a = calloc(nn, el), *b = calloc(nn, el), *c = calloc(nn, el);
    double best = 0;
    for (int r = 0; fn && a && b && c && r < 5; r++) {
        double t0 = now_seconds();
        if (f64) ((dgemm_fn)fn)(101, 111, 111, n, n, n, 1, (double *)a, n, (double *)b, n, 0, (double *)c, n);
        else ((sgemm_fn)fn)(101, 111, 111, n, n, n, 1, (float *)a, n, (float *)b, n, 0, (float *)c, n);
        double g = 2.0 * (double)n * (double)n * (double)n / (now_seconds() - t0) / 1e9;
        if (g > best) best = g;
    }
    if (set && was > 0) set(was);
    free(a), free(b), free(c);
    return best;
}

/* The most threads a model computes with (include/nnc_pool.h): --threads (OMP_NUM_THREADS, which
 * main sets), else one per core this process may run on. */
static int model_threads(void) {
    const char *v = getenv("OMP_NUM_THREADS");
    cpu_set_t set;
    long n = v && *v                                  ? strtol(v, NULL, 10)
        : sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                      : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

void cpu_ceilings(LoadedModel *lm, const BuildOpts *o, DeviceCeilings *out) {
    (void)lm;
    (void)o;
    int threads = model_threads();
    *out = (DeviceCeilings){0};
    snprintf(out->device, sizeof out->device, "cpu (%d thread%s)", threads, threads == 1 ? "" : "s");
    out->gbs = copy_gbs((size_t)256 << 20, threads);
    void *blas = dlopen(NNC_BLAS_LIB, RTLD_NOW | RTLD_LOCAL);
    if (blas) {
        out->gflops[FLOP_F32] = gemm_gflops(blas, false, 1024, threads);
        out->gflops[FLOP_F64] = gemm_gflops(blas, true, 1024, threads);
        dlclose(blas);
    }
    out->gflops[FLOP_TF32] = out->gflops[FLOP_F32]; /* the CPU has no TF32: --tf32 products are f32 */
    const char *lib = strrchr(NNC_BLAS_LIB, '/');
    snprintf(out->how, sizeof out->how,
             "memory %.1f GB/s measured (a 256 MiB copy on %d thread%s); f32 %.1f, f64 %.1f GFLOP/s measured "
             "(%s's sgemm and dgemm, 1024^3, on as many threads); bf16/f16 products: no ceiling",
             out->gbs, threads, threads == 1 ? "" : "s", out->gflops[FLOP_F32], out->gflops[FLOP_F64],
             lib ? lib + 1 : NNC_BLAS_LIB);
}
