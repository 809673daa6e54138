/* par.c - par_for (par.h): a few persistent threads for the runtime's large copies.
 *
 * A job is published under the mutex (its function, range and part count, a new generation) and
 * every worker woken; the workers and the caller take parts by an atomic counter.  The caller
 * returns once every part is done, and publishes the next job only when no worker is inside the
 * last one (a worker woken late may still be reading its counter), so a job's fields are never
 * written while a worker reads them. */
#include "par.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

static struct {
    pthread_mutex_t call; /* one job at a time */
    pthread_mutex_t mu;
    pthread_cond_t wake, idle;
    unsigned gen; /* the job's number: a worker that saw it waits for the next */
    int workers, active; /* threads started; of them, inside a job */
    ParFn fn;
    void *ctx;
    int64_t n;
    int parts;
    atomic_int next, done;
} P = {.call = PTHREAD_MUTEX_INITIALIZER,
       .mu = PTHREAD_MUTEX_INITIALIZER,
       .wake = PTHREAD_COND_INITIALIZER,
       .idle = PTHREAD_COND_INITIALIZER};

static void run_parts(void) {
    for (;;) {
        const int p = atomic_fetch_add(&P.next, 1);
        if (p >= P.parts) return;
        P.fn(P.ctx, P.n * p / P.parts, P.n * (p + 1) / P.parts);
        if (atomic_fetch_add(&P.done, 1) + 1 == P.parts) {
            pthread_mutex_lock(&P.mu);
            pthread_cond_broadcast(&P.idle);
            pthread_mutex_unlock(&P.mu);
        }
    }
}

static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&P.mu);
    unsigned seen = 0;
    for (;;) {
        while (P.gen == seen) pthread_cond_wait(&P.wake, &P.mu);
        seen = P.gen;
        P.active++;
        pthread_mutex_unlock(&P.mu);
        run_parts();
        pthread_mutex_lock(&P.mu);
        if (--P.active == 0) pthread_cond_broadcast(&P.idle);
    }
    return NULL;
}

int par_parts(int64_t bytes) {
    static int cores;
    if (!cores) {
        const long c = sysconf(_SC_NPROCESSORS_ONLN);
        cores = c < 1 ? 1 : c > PAR_MAX_PARTS ? PAR_MAX_PARTS : (int)c;
    }
    const int64_t by_size = bytes / PAR_MIN_BYTES;
    return by_size < 1 ? 1 : by_size < cores ? (int)by_size : cores;
}

void par_for(ParFn fn, void *ctx, int64_t n, int64_t bytes) {
    int parts = par_parts(bytes);
    if (parts > n) parts = n < 1 ? 1 : (int)n;
    if (parts <= 1) {
        if (n > 0) fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&P.call);
    pthread_mutex_lock(&P.mu);
    while (P.workers < parts - 1) { /* started once, kept: waking one costs microseconds */
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        const int ok = pthread_create(&t, &at, worker, NULL) == 0;
        pthread_attr_destroy(&at);
        if (!ok) break; /* fewer threads: the caller takes their parts */
        P.workers++;
    }
    while (P.active > 0) pthread_cond_wait(&P.idle, &P.mu); /* a late worker of the last job */
    P.fn = fn, P.ctx = ctx, P.n = n, P.parts = parts;
    atomic_store(&P.next, 0);
    atomic_store(&P.done, 0);
    P.gen++;
    pthread_cond_broadcast(&P.wake);
    pthread_mutex_unlock(&P.mu);
    run_parts();
    pthread_mutex_lock(&P.mu);
    while (atomic_load(&P.done) < parts || P.active > 0) pthread_cond_wait(&P.idle, &P.mu);
    pthread_mutex_unlock(&P.mu);
    pthread_mutex_unlock(&P.call);
}

typedef struct {
    void *dst;
    const void *src;
} Copy;

static void copy_part(void *ctx, int64_t lo, int64_t hi) {
    const Copy *c = ctx;
    memcpy((char *)c->dst + lo, (const char *)c->src + lo, (size_t)(hi - lo));
}

void par_memcpy(void *dst, const void *src, size_t n) {
    Copy c = {dst, src};
    par_for(copy_part, &c, (int64_t)n, (int64_t)n);
}
