/*
 * test_pool.c - include/nnc_pool.h, the threads every CPU model's products run on: a product
 * split into chunks gives the same bits whether one thread or four take part (a busy machine
 * must not change a result); the chunks of a job really run side by side; a job nested in a
 * chunk, two callers at once, and a process forked after the workers started (where no worker
 * exists) all finish; OpenBLAS is left on one thread; the thread count chosen from the load;
 * the parse of /proc/stat.  The pool is pasted into generated code, so this file is compiled
 * with -Wpedantic -Wconversion -Wshadow -Werror (tests/unit/CMakeLists.txt).
 */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "check.h"

/* Where the includer has a faster sgemm (NNC_POOL_SGEMM: oneDNN's, in the in-process build), the
 * pool may cut a product along its rows where it would cut the columns.  This one records each
 * chunk's shape and declines (nonzero), so the CBLAS still computes every chunk. */
static _Atomic int sg_calls, sg_m, sg_n;
static int record_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                        int ldb, float beta, float *c, int ldc) {
    (void)ta, (void)tb, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
    atomic_fetch_add(&sg_calls, 1);
    atomic_store(&sg_m, m);
    atomic_store(&sg_n, n);
    return 1;
}
#define NNC_POOL_SGEMM record_sgemm
#include "nnc_pool.h"

extern int openblas_get_num_threads(void) __attribute__((weak));

#define THREADS 4

static float *filled(int64_t n, uint32_t seed) {
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

/* C = alpha op(A) op(B) + beta C with `active` threads taking part, into a fresh copy of c0. */
static float *product(int active, int ta, int tb, int m, int n, int k, float beta, const float *a, const float *b,
                      const float *c0) {
    float *c = malloc((size_t)m * (size_t)n * sizeof *c);
    memcpy(c, c0, (size_t)m * (size_t)n * sizeof *c);
    atomic_store(&nnc_pool_g.active, active);
    nnc_sgemm(ta ? 112 : 111, tb ? 112 : 111, m, n, k, -0.5f, a, ta ? m : k, b, tb ? k : n, beta, c, n);
    return c;
}

/* One product, split (or not) by its shape: one thread and four give the same bits, and both
 * are within rounding of a double-precision reference. */
static void check_product(int ta, int tb, int m, int n, int k, float beta) {
    float *a = filled((int64_t)m * k, 1), *b = filled((int64_t)k * n, 2), *c0 = filled((int64_t)m * n, 3);
    float *one = product(1, ta, tb, m, n, k, beta, a, b, c0), *all = product(THREADS, ta, tb, m, n, k, beta, a, b, c0);
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++)
                s += (double)a[ta ? l * m + i : i * k + l] * (double)b[tb ? j * k + l : l * n + j];
            double want = -0.5 * s + (double)beta * (double)c0[i * n + j];
            double d = fabs((double)all[i * n + j] - want);
            worst = d > worst ? d : worst;
        }
    CHECK(!memcmp(one, all, (size_t)m * (size_t)n * sizeof *one),
          "%dx%dx%d ta=%d tb=%d beta=%g: 1 and %d threads agree bit for bit", m, n, k, ta, tb, (double)beta, THREADS);
    CHECK(worst < 1e-5 * k, "%dx%dx%d ta=%d tb=%d: within rounding of double (worst %.3g)", m, n, k, ta, tb, worst);
    free(a), free(b), free(c0), free(one), free(all);
}

/* The chunks a product of m rows and n columns is cut into: `calls` of m_each x n_each (even
 * cuts).  1 of m x n: not cut. */
static void check_cut(int ta, int tb, int m, int n, int k, float beta, int calls, int m_each, int n_each) {
    float *a = filled((int64_t)m * k, 1), *b = filled((int64_t)k * n, 2), *c0 = filled((int64_t)m * n, 3);
    atomic_store(&sg_calls, 0);
    float *c = product(THREADS, ta, tb, m, n, k, beta, a, b, c0);
    int got = atomic_load(&sg_calls), gm = atomic_load(&sg_m), gn = atomic_load(&sg_n);
    CHECK(got == calls && gm == m_each && gn == n_each, "%dx%dx%d beta=%g: %d chunks of %dx%d (got %d of %dx%d)", m, n,
          k, (double)beta, calls, m_each, n_each, got, gm, gn);
    free(a), free(b), free(c0), free(c);
}

/* ---- jobs ---- */

static _Atomic int entered;
static _Atomic(pthread_t) first_thread;
static _Atomic int distinct;

/* Each chunk waits (up to 20 s) until chunks run on two different threads. */
static void meet(void *ctx, int chunk) {
    (void)ctx, (void)chunk;
    pthread_t me = pthread_self(), none = 0;
    if (!atomic_compare_exchange_strong(&first_thread, &none, me) && !pthread_equal(none, me))
        atomic_store(&distinct, 1);
    atomic_fetch_add(&entered, 1);
    int64_t t0 = nnc_pool_now();
    while (!atomic_load(&distinct) && nnc_pool_now() - t0 < 20000000000LL) sched_yield();
}

static void count(void *ctx, int chunk) {
    _Atomic int *hits = ctx;
    atomic_fetch_add(&hits[chunk], 1);
}

static void nested(void *ctx, int chunk) {
    _Atomic int *hits = ctx;
    nnc_pool_run(count, hits + 16 + 4 * chunk, 4); /* inside a chunk: serial, never waits on the pool */
    atomic_fetch_add(&hits[chunk], 1);
}

static int all_once(_Atomic int *hits, int n) {
    for (int i = 0; i < n; i++)
        if (atomic_load(&hits[i]) != 1) return 0;
    return 1;
}

static void *other_caller(void *arg) {
    _Atomic int *hits = arg;
    for (int r = 0; r < 200; r++) nnc_pool_run(count, hits + 64 * r, 64);
    return NULL;
}

static void check_jobs(void) {
    atomic_store(&nnc_pool_g.active, THREADS);
    nnc_pool_run(meet, NULL, 8);
    CHECK(atomic_load(&distinct) && atomic_load(&entered) == 8,
          "a job's chunks run on more than one thread, each once");

    static _Atomic int hits[16 + 4 * 16];
    nnc_pool_run(nested, hits, 16);
    CHECK(all_once(hits, 16 + 4 * 16), "a job started inside a chunk runs there, every chunk once");

    static _Atomic int mine[200 * 64], theirs[200 * 64];
    pthread_t t;
    pthread_create(&t, NULL, other_caller, theirs);
    other_caller(mine);
    pthread_join(t, NULL);
    CHECK(all_once(mine, 200 * 64) && all_once(theirs, 200 * 64), "two callers at once: every chunk of both, once");

    pid_t pid = fork();
    if (pid == 0) { /* the workers are not copied: the caller must do every chunk itself */
        alarm(20);
        static _Atomic int child[64];
        nnc_pool_run(count, child, 64);
        _exit(all_once(child, 64) ? 0 : 1);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "after fork (no workers): the caller runs the job alone");
}

/* ---- the load ---- */

static void check_load(void) {
    CHECK(nnc_pool_choose(2, 2, 0.0) == 2, "2 cores, nothing else running: 2 threads");
    CHECK(nnc_pool_choose(2, 2, 0.4) == 2, "2 cores, others 0.4 of a core: 2 threads");
    CHECK(nnc_pool_choose(2, 2, 0.6) == 1, "2 cores, others 0.6 of a core: 1 thread");
    CHECK(nnc_pool_choose(2, 2, 1.9) == 1 && nnc_pool_choose(2, 2, 7.0) == 1, "2 cores, both taken: 1 thread");
    CHECK(nnc_pool_choose(16, 8, 2.0) == 8, "16 cores, 8 allowed, 2 taken: 8 threads");
    CHECK(nnc_pool_choose(2, 2, -0.3) == 2, "measurement noise below zero: still 2 threads");

    const char *path = check_path("stat");
    static const char text[] = "cpu  900 0 90 5000 1 2 3 4 0 0\n"
                               "cpu0 100 10 20 900 50 1 2 3 0 0\n"
                               "cpu1 200 0 40 800 60 4 5 6 0 0\n"
                               "cpu2 1000 0 0 0 0 0 0 0 0 0\n"
                               "intr 12345 1 2 3\n"
                               "cpu3 999 0 0 0 0 0 0 0 0 0\n";
    check_write(path, text, sizeof text - 1);
    unsigned char cpus[4] = {1, 1, 0, 1};
    FILE *f = fopen(path, "r");
    CHECK(nnc_pool_stat_ticks(f, cpus, 4) == 136 + 255,
          "/proc/stat: busy ticks of our cpus (not idle, iowait, cpu2, "
          "or lines after the cpu lines)");
    fclose(f);
    CHECK(nnc_pool_stat_ticks(NULL, cpus, 4) == -1, "/proc/stat missing: -1");

    unsigned char allowed[16] = {0};
    CHECK(nnc_pool_cpu_list("0-3,8,10-11\n", allowed, 16) == 7 && allowed[3] && !allowed[4] && allowed[8] &&
              allowed[11] && !allowed[12],
          "Cpus_allowed_list 0-3,8,10-11: 7 cpus, those");
    unsigned char few[4] = {0};
    CHECK(nnc_pool_cpu_list("2-9", few, 4) == 2 && few[2] && few[3], "a list past the table: the cpus that fit");
}

int main(void) {
    setenv("OMP_NUM_THREADS", "4", 1); /* as nnc's --threads 4: four chunks, whatever the cores */
    nnc_pool_adapt();
    CHECK(nnc_pool_g.max == THREADS && nnc_pool_g.fixed, "OMP_NUM_THREADS=4: at most 4 threads, whatever the load");
    CHECK(!openblas_get_num_threads || openblas_get_num_threads() == 1, "OpenBLAS left on one thread");
    check_product(0, 1, 64, 128, 784, 0.0f); /* x @ W^T, mlp.nn's first layer at batch 64 */
    check_product(1, 0, 128, 784, 64, 1.0f); /* dY^T @ x with the SGD update folded in */
    check_product(0, 0, 256, 1024, 1024, 0.0f); /* a large one, along M (NNC_POOL_SGEMM) */
    check_product(1, 0, 1024, 300, 256, 1.0f); /* along M, an edge chunk */
    check_product(0, 0, 8, 8, 8, 0.0f); /* too small to split */
    /* where each of the 4 chunks keeps 32 rows or more, the rows are cut; else the longer side */
    check_cut(0, 0, 256, 1024, 1024, 0.0f, 4, 64, 1024);
    check_cut(1, 0, 128, 512, 2048, 0.0f, 4, 32, 512);
    check_cut(0, 1, 64, 128, 784, 0.0f, 4, 64, 32); /* 16 rows a chunk: the columns */
    check_cut(0, 0, 256, 1024, 1024, 1.0f, 4, 256, 256); /* an update (beta): the CBLAS's, by columns */
    check_cut(0, 0, 8, 8, 8, 0.0f, 1, 8, 8);
    /* under two chunks' work (2^20 multiply-adds each) but at least two halves' (2^17): halves */
    check_cut(0, 1, 256, 10, 128, 0.0f, 2, 128, 10);
    check_cut(0, 1, 64, 10, 128, 0.0f, 1, 64, 10); /* 82K: one */
    check_jobs();
    check_load();
    return check_done();
}
