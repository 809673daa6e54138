/* nnc_pool.h - the CPU target's threads: one pool that splits a model's matrix products into
 * chunks and runs them on the cores, with the BLAS itself kept on one thread.
 *
 * Why a pool of nnc's own: OpenMP's pool and OpenBLAS's fought over the same cores (each spun
 * while the other worked), and an OpenMP team ends with a barrier that waits for every member,
 * so a member whose core another process holds stalls the whole step (12 ms for a 0.2 ms step
 * was seen on a busy machine).  Here the caller publishes a job of chunks and takes chunks
 * itself; a worker that wakes late finds none left and waits again.  The caller waits only for
 * chunks a worker has started, so a busy core costs parallelism, not a stall.
 *
 * Determinism: how a product is cut into chunks depends on its shape and on the most threads
 * the pool may use (the cores this process may run on, or OMP_NUM_THREADS), never on how many
 * take part in a call.  Each chunk is one BLAS call on a block of C's rows or columns, whose
 * elements the BLAS sums as it sums a whole product's.  So a step gives the same bits on a busy
 * machine as on an idle one, whichever thread ran which chunk.
 *
 * Waiting: after a job a worker spins for 0.3 ms (a training step's gaps), then sleeps on a futex
 * (so that OpenMP's threads, oneDNN's, find the cores free soon after a product); the caller
 * wakes only workers that sleep.  It spins with `pause` for 10 us only, then yields its core at
 * every check: a process that wants the core (the -O3 compiler of a tiered start, reniced) gets
 * it, and the caller then takes the chunks that worker would have taken.  How many take part follows the machine: every 200 ms, nnc_pool_adapt() (called before
 * each entry) reads how busy this process's cores were (/proc/stat) less its own CPU time, and
 * keeps one thread per core the other processes leave free.  With OMP_NUM_THREADS set (nnc's
 * --threads sets it) that many always take part.
 *
 * Like nnc_runtime.h this file is pasted into every generated C file: all static, libc and
 * pthreads (the futex and /proc/stat under Linux; elsewhere workers poll and the count is fixed).
 * It uses nothing a feature-test macro hides (an application may include the system headers
 * first, in strict C11): C11's clocks (timespec_get, clock), sysconf, sched_yield, and under Linux
 * the futex through syscall(2), declared here, and /proc/self/status for the cores it may use. */
#ifndef NNC_POOL_H
#define NNC_POOL_H
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
long syscall(long number, ...); /* unistd.h hides it in strict C11 */
#else
#define FUTEX_WAIT 0
#define FUTEX_WAKE 1
#endif

#if defined(__GNUC__) || defined(__clang__)
#define NNC_POOL_FN static __attribute__((unused))
#else
#define NNC_POOL_FN static
#endif

#define NNC_POOL_MAX 256 /* threads at most, the caller included */
#define NNC_POOL_SPIN_NS 300000 /* a worker's wait for the next job before it sleeps */
#define NNC_POOL_PAUSE_NS 10000 /* of which this long with `pause`, the rest yielding */
#define NNC_POOL_SAMPLE_NS 200000000 /* how often the load is read */
#define NNC_POOL_CHUNK_MACS (1LL << 20) /* the least work worth a chunk: about 10 us of a core */
#define NNC_POOL_HALF_MACS (1LL << 17) /* the least work worth half a product (nnc_pool_gemm) */
#define NNC_POOL_ALIGN 16 /* chunk edges: whole vectors of C's columns */
#define NNC_POOL_ROWS 32 /* the fewest rows of C a chunk along the rows is given (NNC_POOL_SGEMM) */
#define NNC_POOL_FOR_GRAIN 16384 /* the least points worth an elementwise kernel's piece */

void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
void cblas_dgemm(int, int, int, int, int, int, double, const double *, int, const double *, int, double, double *, int);
/* OpenBLAS's, where the BLAS is OpenBLAS: its own threads would be a second pool. */
extern void openblas_set_num_threads(int) __attribute__((weak));

typedef void (*nnc_pool_fn)(void *ctx, int chunk);

typedef struct {
    _Atomic uint32_t seq; /* bumped to wake it: its futex word */
    _Atomic int sleeping; /* 1 while it sleeps (or is about to) */
} nnc_pool_worker;

typedef struct {
    _Atomic(nnc_pool_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int n; /* chunks */
    _Atomic int done; /* chunks finished */
} nnc_pool_job;

static struct {
    _Atomic int state; /* 0 not set up, 1 being set up, 2 ready */
    int max; /* threads the pool may use, the caller included */
    int fixed; /* 1: OMP_NUM_THREADS chose max; no adapting to the load */
    _Atomic int active; /* threads that take part now (1..max) */
    _Atomic int started; /* workers running (0 until the first job that wants them) */
    _Atomic int busy; /* a caller holds the pool; another runs its job alone */
    _Alignas(64) _Atomic uint32_t gen; /* the job number; odd and even jobs use the two slots */
    _Atomic uint64_t claim; /* job number << 32 | the next unclaimed chunk */
    nnc_pool_job job[2];
    nnc_pool_worker worker[NNC_POOL_MAX];
    /* the load: /proc/stat's busy time of our cores, and our CPU time, at the last sample */
    _Atomic int sampling; /* a caller reads the load now; the others go on */
    _Atomic int64_t sampled_at;
    int64_t busy_ticks, own_ns;
    unsigned char cpus[1024]; /* 1: this process may run on cpu N */
    int ncpus;
} nnc_pool_g;

static _Thread_local int nnc_pool_inside; /* a worker, or a caller inside a job: no nesting */

/* Nanoseconds of wall time (C11's only clock: a step of it costs one spin or one sample). */
NNC_POOL_FN int64_t nnc_pool_now(void) {
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Nanoseconds of CPU time this process (all its threads) has used. */
NNC_POOL_FN int64_t nnc_pool_cpu_time(void) { return (int64_t)((double)clock() * (1e9 / (double)CLOCKS_PER_SEC)); }

NNC_POOL_FN void nnc_pool_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

NNC_POOL_FN void nnc_pool_futex(_Atomic uint32_t *word, int op, uint32_t val) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)word, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
#else
    (void)word, (void)val;
    if (op == FUTEX_WAIT) sched_yield(); /* no futex: the sleeper polls */
#endif
}

/* ---- setting up: how many threads, which cores ---------------------------------------------- */

/* The first number of environment variable `name` (at most NNC_POOL_MAX), or 0. */
NNC_POOL_FN int nnc_pool_env(const char *name) {
    const char *e = getenv(name);
    long n = e ? strtol(e, NULL, 10) : 0;
    return n > 0 ? (int)(n < NNC_POOL_MAX ? n : NNC_POOL_MAX) : 0;
}

/* Marks the cpus of a list as /proc/self/status's Cpus_allowed_list gives it ("0-3,8,10-11"). */
NNC_POOL_FN int nnc_pool_cpu_list(const char *s, unsigned char *cpus, int n) {
    int count = 0;
    while (*s >= '0' && *s <= '9') {
        char *end;
        long lo = strtol(s, &end, 10), hi = lo;
        if (*end == '-') hi = strtol(end + 1, &end, 10);
        for (long c = lo; c <= hi && c < n; c++) count += !cpus[c], cpus[c] = 1;
        s = *end == ',' ? end + 1 : end;
    }
    return count;
}

/* The cpus this process may run on (its affinity), or just how many the machine has online. */
NNC_POOL_FN void nnc_pool_find_cpus(void) {
#ifdef __linux__
    FILE *f = fopen("/proc/self/status", "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18)) {
            const char *s = line + 18;
            while (*s == ' ' || *s == '\t') s++;
            nnc_pool_g.ncpus = nnc_pool_cpu_list(s, nnc_pool_g.cpus, (int)sizeof nnc_pool_g.cpus);
        }
    if (f) fclose(f);
#endif
    if (nnc_pool_g.ncpus == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nnc_pool_g.ncpus = n > 0 ? (int)(n < NNC_POOL_MAX ? n : NNC_POOL_MAX) : 1;
    }
}

/* Once per process and model object, before any product: the thread count, and OpenBLAS on one
 * thread (the pool splits the products; OpenBLAS's threads would be a second pool). */
NNC_POOL_FN void nnc_pool_setup(void) {
    int s = 0;
    if (atomic_load(&nnc_pool_g.state) == 2) return;
    if (!atomic_compare_exchange_strong(&nnc_pool_g.state, &s, 1)) {
        while (atomic_load(&nnc_pool_g.state) != 2) sched_yield();
        return;
    }
    nnc_pool_find_cpus();
    /* NNC_TEST_POOL_ACTIVE=N, a test aid: N threads take part whatever the load, while the chunks
     * are cut as ever, so that a test can show that the count does not change a result */
    int env = nnc_pool_env("OMP_NUM_THREADS"), test = nnc_pool_env("NNC_TEST_POOL_ACTIVE");
    nnc_pool_g.max = env > 0 ? env : nnc_pool_g.ncpus < NNC_POOL_MAX ? nnc_pool_g.ncpus : NNC_POOL_MAX;
    nnc_pool_g.fixed = env > 0 || test > 0;
#ifdef NNC_POOL_QUICK_BUILD /* the -O1 build of a tiered start: the other cores compile the -O3 one */
    test = 1, nnc_pool_g.fixed = 1;
#endif
    atomic_store(&nnc_pool_g.active, test > 0 && test < nnc_pool_g.max ? test : nnc_pool_g.max);
    if (openblas_set_num_threads) openblas_set_num_threads(1);
    atomic_store(&nnc_pool_g.state, 2);
}

/* ---- the jobs ------------------------------------------------------------------------------- */

/* Takes chunks of job g until none is left (or a later job replaced it). */
NNC_POOL_FN void nnc_pool_work(uint32_t g) {
    nnc_pool_job *j = &nnc_pool_g.job[g & 1];
    for (;;) {
        uint64_t c = atomic_load(&nnc_pool_g.claim);
        if ((uint32_t)(c >> 32) != g || (int)(uint32_t)c >= atomic_load(&j->n)) return;
        /* A successful exchange means job g was still current, so j's fields are g's: the slot
         * is rewritten only for job g + 2, after job g + 1 was published. */
        if (!atomic_compare_exchange_weak(&nnc_pool_g.claim, &c, c + 1)) continue;
        nnc_pool_fn fn = atomic_load(&j->fn);
        fn(atomic_load(&j->ctx), (int)(uint32_t)c);
        atomic_fetch_add(&j->done, 1);
    }
}

/* Worker w's wait for a job after `seen`: spin, then sleep until woken.  Returns the job. */
NNC_POOL_FN uint32_t nnc_pool_wait(int w, uint32_t seen) {
    nnc_pool_worker *me = &nnc_pool_g.worker[w];
    int64_t t0 = nnc_pool_now(), spin = w < atomic_load(&nnc_pool_g.active) ? NNC_POOL_SPIN_NS : 0;
    for (int i = 1;; i++) {
        uint32_t g = atomic_load(&nnc_pool_g.gen);
        if (g != seen) return g;
        if (i % 64) {
            nnc_pool_relax();
            continue;
        }
        int64_t dt = nnc_pool_now() - t0;
        if (dt < 0) dt = spin; /* the clock was set back: stop spinning */
        if (dt < spin && dt >= NNC_POOL_PAUSE_NS) sched_yield();
        if (dt < spin) continue;
        uint32_t s = atomic_load(&me->seq);
        atomic_store(&me->sleeping, 1);
        if (atomic_load(&nnc_pool_g.gen) == seen) nnc_pool_futex(&me->seq, FUTEX_WAIT, s);
        atomic_store(&me->sleeping, 0);
    }
}

NNC_POOL_FN void *nnc_pool_worker_main(void *arg) {
    int w = (int)(intptr_t)arg;
    nnc_pool_inside = 1;
    uint32_t seen = atomic_load(&nnc_pool_g.gen);
    for (;;) {
        seen = nnc_pool_wait(w, seen);
        if (w < atomic_load(&nnc_pool_g.active)) nnc_pool_work(seen);
    }
    return NULL;
}

/* The workers, at the first job that wants them (a model that never splits a product starts no
 * thread).  Those that cannot be created are simply not there: their chunks go to the others. */
NNC_POOL_FN void nnc_pool_start(void) {
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    for (int w = 1; w < nnc_pool_g.max; w++) {
        pthread_t t;
        if (pthread_create(&t, &a, nnc_pool_worker_main, (void *)(intptr_t)w) != 0) break;
    }
    pthread_attr_destroy(&a);
    atomic_store(&nnc_pool_g.started, 1);
}

/* Runs fn(ctx, 0 .. n-1), the chunks in any order and on any threads; returns when all are done. */
NNC_POOL_FN void nnc_pool_run(nnc_pool_fn fn, void *ctx, int n) {
    int idle = 0, active = atomic_load(&nnc_pool_g.active);
    if (n <= 1 || active <= 1 || nnc_pool_inside || !atomic_compare_exchange_strong(&nnc_pool_g.busy, &idle, 1)) {
        for (int c = 0; c < n; c++) fn(ctx, c);
        return;
    }
    if (!atomic_load(&nnc_pool_g.started)) nnc_pool_start();
    uint32_t g = atomic_load(&nnc_pool_g.gen) + 1;
    nnc_pool_job *j = &nnc_pool_g.job[g & 1];
    atomic_store(&j->fn, fn);
    atomic_store(&j->ctx, ctx);
    atomic_store(&j->n, n);
    atomic_store(&j->done, 0);
    atomic_store(&nnc_pool_g.claim, (uint64_t)g << 32);
    atomic_store(&nnc_pool_g.gen, g);
    for (int w = 1; w < active; w++) /* a sleeper either is woken here or sees the new job itself */
        if (atomic_load(&nnc_pool_g.worker[w].sleeping)) {
            atomic_fetch_add(&nnc_pool_g.worker[w].seq, 1);
            nnc_pool_futex(&nnc_pool_g.worker[w].seq, FUTEX_WAKE, 1);
        }
    nnc_pool_inside = 1;
    nnc_pool_work(g);
    nnc_pool_inside = 0;
    for (int i = 1; atomic_load(&j->done) < n; i++) /* chunks a worker still runs */
        if (i % 256) nnc_pool_relax();
        else sched_yield();
    atomic_store(&nnc_pool_g.busy, 0);
}

/* ---- following the load --------------------------------------------------------------------- */

/* The busy clock ticks of the cpus marked in `cpus` (n of them), summed from /proc/stat's
 * per-cpu lines (user, nice, system, irq, softirq, steal: all but idle and iowait), or -1. */
NNC_POOL_FN int64_t nnc_pool_stat_ticks(FILE *f, const unsigned char *cpus, int n) {
    int64_t ticks = -1;
    char line[512];
    while (f && fgets(line, sizeof line, f) && !strncmp(line, "cpu", 3)) {
        unsigned long long v[8] = {0};
        int cpu = -1;
        if (line[3] < '0' || line[3] > '9') continue; /* "cpu  ...": the total */
        if (sscanf(line + 3, "%d", &cpu) != 1 || cpu >= n || !cpus[cpu]) continue;
        const char *p = strchr(line, ' ');
        if (!p ||
            sscanf(p, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]) != 8)
            continue;
        ticks = (ticks < 0 ? 0 : ticks) + (int64_t)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
    }
    return ticks;
}

/* The threads to use on `ncpus` cores (at most `max`) when other processes kept `others` of
 * them busy on average: one per core they left free, rounded to the nearest, at least one. */
NNC_POOL_FN int nnc_pool_choose(int ncpus, int max, double others) {
    double n = (double)ncpus - others + 0.5;
    return n < 1 ? 1 : n >= (double)max ? max : (int)n;
}

/* Before each entry: every NNC_POOL_SAMPLE_NS, as many threads as cores the other processes
 * left free in that time.  Cheap between samples: one clock read. */
NNC_POOL_FN void nnc_pool_adapt(void) {
    nnc_pool_setup();
    int idle = 0;
    int64_t now = nnc_pool_now(), last = atomic_load(&nnc_pool_g.sampled_at);
    if (nnc_pool_g.fixed || (now - last < NNC_POOL_SAMPLE_NS && now >= last) ||
        !atomic_compare_exchange_strong(&nnc_pool_g.sampling, &idle, 1))
        return;
    int64_t ticks = -1, own = nnc_pool_cpu_time();
#ifdef __linux__
    FILE *f = fopen("/proc/stat", "r");
    ticks = nnc_pool_stat_ticks(f, nnc_pool_g.cpus, (int)sizeof nnc_pool_g.cpus);
    if (f) fclose(f);
#endif
    long hz = sysconf(_SC_CLK_TCK);
    if (ticks >= 0 && nnc_pool_g.busy_ticks >= 0 && hz > 0 && last > 0 && now > last) {
        double busy = (double)(ticks - nnc_pool_g.busy_ticks) * 1e9 / (double)hz;
        double others = (busy - (double)(own - nnc_pool_g.own_ns)) / (double)(now - last);
        atomic_store(&nnc_pool_g.active, nnc_pool_choose(nnc_pool_g.ncpus, nnc_pool_g.max, others));
    }
    nnc_pool_g.busy_ticks = ticks, nnc_pool_g.own_ns = own;
    atomic_store(&nnc_pool_g.sampled_at, now);
    atomic_store(&nnc_pool_g.sampling, 0);
}

/* ---- elementwise kernels, split -------------------------------------------------------------- */

/* A kernel's piece: its frame, inputs and batch, and the outer indices [lo, hi) it computes. */
typedef void (*nnc_pool_part_fn)(void *m, const void *const *in, int64_t batch, int64_t lo, int64_t hi);

typedef struct {
    nnc_pool_part_fn fn;
    void *m;
    const void *const *in;
    int64_t batch, n, parts;
} nnc_pool_for_job;

NNC_POOL_FN void nnc_pool_for_chunk(void *ctx, int c) {
    const nnc_pool_for_job *q = ctx;
    q->fn(q->m, q->in, q->batch, q->n * c / q->parts, q->n * (c + 1) / q->parts);
}

/* fn over outer indices [0, n) of a kernel of `elems` points, in pieces of NNC_POOL_FOR_GRAIN
 * points or more (one piece per thread the pool may have, at most). */
NNC_POOL_FN void nnc_pool_for(nnc_pool_part_fn fn, void *m, const void *const *in, int64_t batch, int64_t n,
                              int64_t elems) {
    nnc_pool_setup();
    int64_t parts = elems / NNC_POOL_FOR_GRAIN;
    parts = parts < nnc_pool_g.max ? parts : nnc_pool_g.max;
    parts = parts < n ? parts : n;
    if (parts <= 1) {
        fn(m, in, batch, 0, n);
        return;
    }
    nnc_pool_for_job q = {fn, m, in, batch, n, parts};
    nnc_pool_run(nnc_pool_for_chunk, &q, (int)parts);
}

/* ---- matrix products, split ----------------------------------------------------------------- */

typedef struct {
    int f64, ta, tb, m, n, k, lda, ldb, ldc, along_n, per;
    double alpha, beta;
    const void *a, *b;
    void *c;
} nnc_pool_gemm_job;

/* Chunk c: C's columns [c * per, ...) (along_n) or its rows, one BLAS call. */
NNC_POOL_FN void nnc_pool_gemm_chunk(void *ctx, int c) {
    const nnc_pool_gemm_job *q = ctx;
    int64_t lo = (int64_t)c * q->per, ext = q->along_n ? q->n : q->m, w = ext - lo < q->per ? ext - lo : q->per;
    int64_t ao = q->along_n ? 0 : q->ta ? lo : lo * q->lda, bo = !q->along_n ? 0 : q->tb ? lo * q->ldb : lo;
    int64_t co = q->along_n ? lo : lo * q->ldc, m = q->along_n ? q->m : w, n = q->along_n ? w : q->n;
    int ta = q->ta ? 112 : 111, tb = q->tb ? 112 : 111;
    if (q->f64)
        cblas_dgemm(101, ta, tb, (int)m, (int)n, q->k, q->alpha, (const double *)q->a + ao, q->lda,
                    (const double *)q->b + bo, q->ldb, q->beta, (double *)q->c + co, q->ldc);
#ifdef NNC_POOL_SGEMM /* a faster single-threaded sgemm the includer declared (0: it ran) */
    else if (NNC_POOL_SGEMM(q->ta, q->tb, (int)m, (int)n, q->k, (float)q->alpha, (const float *)q->a + ao, q->lda,
                            (const float *)q->b + bo, q->ldb, (float)q->beta, (float *)q->c + co, q->ldc) == 0)
        return;
#endif
    else
        cblas_sgemm(101, ta, tb, (int)m, (int)n, q->k, (float)q->alpha, (const float *)q->a + ao, q->lda,
                    (const float *)q->b + bo, q->ldb, (float)q->beta, (float *)q->c + co, q->ldc);
}

/* C = alpha op(A) op(B) + beta C, row-major, as cblas_?gemm: in pool-many chunks along C's longer
 * side when the product is worth it, else one call. */
NNC_POOL_FN void nnc_pool_gemm(nnc_pool_gemm_job *q) {
    nnc_pool_setup();
    int64_t macs = (int64_t)q->m * q->n * q->k, parts = macs / NNC_POOL_CHUNK_MACS;
    /* under two chunks' work, still two halves from NNC_POOL_HALF_MACS each: a thin product runs
     * far below a core's peak (784-128-10's last layer at batch 256, 256x10x128: 10 us on one
     * thread, 7 in two halves; its gradient 256x128x10: 7.4 -> 3.6 us) */
    if (parts < 2 && macs >= 2 * NNC_POOL_HALF_MACS) parts = 2;
    parts = parts < nnc_pool_g.max ? parts : nnc_pool_g.max;
    q->along_n = q->n >= q->m;
#ifdef NNC_POOL_SGEMM
    /* oneDNN runs a chunk of whole rows faster than one of part of the columns, as long as each
     * chunk keeps NNC_POOL_ROWS rows (2 cores of a Zen 4: 64x128x784, x @ W^T, 199 GFLOP/s in
     * rows against 154 in columns; 128x128x2048, dW, 225 against 187; larger ones alike) */
    if (q->f64 == 0 && q->beta == 0 && parts > 1 && q->m >= NNC_POOL_ROWS * parts) q->along_n = 0;
#endif
    int64_t ext = q->along_n ? q->n : q->m, most = (ext + NNC_POOL_ALIGN - 1) / NNC_POOL_ALIGN;
    parts = parts < most ? parts : most;
    q->per = (int)((ext + parts - 1) / (parts > 1 ? parts : 1));
    q->per = (q->per + NNC_POOL_ALIGN - 1) / NNC_POOL_ALIGN * NNC_POOL_ALIGN;
    if (parts <= 1) q->per = (int)ext;
    nnc_pool_run(nnc_pool_gemm_chunk, q, (int)((ext + q->per - 1) / q->per));
}

NNC_POOL_FN void nnc_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                           int ldb, float beta, float *c, int ldc) {
    nnc_pool_gemm_job q = {0, ta == 112, tb == 112, m, n, k, lda, ldb, ldc, 0, 0, alpha, beta, a, b, c};
    nnc_pool_gemm(&q);
}

NNC_POOL_FN void nnc_dgemm(int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda, const double *b,
                           int ldb, double beta, double *c, int ldc) {
    nnc_pool_gemm_job q = {1, ta == 112, tb == 112, m, n, k, lda, ldb, ldc, 0, 0, alpha, beta, a, b, c};
    nnc_pool_gemm(&q);
}
#endif /* NNC_POOL_H */
