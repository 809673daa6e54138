/* cuda.c - an emulated CUDA driver (libcuda.so.1) that runs nnc's kernels on the host.
 *
 * Memory: device allocations are mmap'd, filled with 0xFF (NaN for floats), start on 256 bytes
 * as cuMemAlloc's do, and end at a PROT_NONE guard page (a size that is not a multiple of 256
 * leaves up to 255 bytes of padding before it, which every launch must leave as it was), so a
 * kernel writing past the end faults; the fault (SIGSEGV, on a sigaltstack) jumps back to the
 * launcher and becomes a sticky CUDA_ERROR_ILLEGAL_ADDRESS.  A vector access (float4, ...)
 * through a pointer not aligned to its size is CUDA_ERROR_MISALIGNED_ADDRESS, as on a GPU.
 * Device pointers are host addresses (cuBLAS computes on them with OpenBLAS).
 *
 * NNC_EMU_TRACE=FILE appends a line per call that queues or waits for work: each launch (its
 * kernel, grid, block, shared memory, stream), copy (its kind, bytes, whether async, pinned or
 * pageable host memory, stream), memset, GEMM, event record and wait, synchronization and graph
 * launch, so tests can check the shapes that reach the GPU (tests/cuda/launch_shape_test.py).
 *
 * Streams: work is queued and runs only when the host synchronizes with it (stream, event,
 * context synchronization, a synchronous copy), in queue order, after the work it depends on:
 * the legacy stream waits for every blocking stream and a blocking stream for the legacy one
 * (non-blocking streams wait for nothing); cuStreamWaitEvent adds a dependency.  A queued
 * device-to-host copy fills its destination with 0xFF at once.  Synchronous copies follow the
 * driver's "API synchronization behavior": a pageable HtoD is staged and lands later (queued on
 * the legacy stream).  Under stream capture the work is recorded into a graph; what a capture
 * refuses (synchronization, allocation, synchronous copies) fails and invalidates it.
 *
 * Kernels: cuModuleLoadData finds the CUDA source nvrtc.c appended after the cubin's ELF,
 * compiles it for the host with the C++ compiler (emu_kernel.h force-included) and dlopens it.
 * Every GPU thread is a fiber (a hand-written stack switch); fibers run until they exit or
 * wait at a barrier/shuffle, in NNC_EMU_ORDER (forward, reverse or random:SEED); a barrier
 * releases when every live thread of the block waits at the same one, a shuffle when every lane
 * of its mask waits at it.  Anything else is a launch failure naming kernel, block and thread.
 * Blocks run one after another on the synchronizing thread. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "emu.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_THREADS 1024
#define STACK_BYTES (256u << 10)
#define TOTAL_MEM (16ull << 30)

static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("nnc-emu: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void *xcalloc(size_t n, size_t s) {
    void *p = calloc(n ? n : 1, s ? s : 1);
    if (!p) abort();
    return p;
}

/* ---- state ------------------------------------------------------------------------------- */

typedef struct Stream Stream;
typedef struct Op Op;
typedef struct Graph {
    Op *head, *tail;
} Graph;

struct Stream {
    int id; /* for the trace: 0 the legacy stream, then in creation order */
    unsigned flags;
    Op *head, *tail;
    uint64_t last_seq;
    Stream *next;                 /* all streams, for the legacy stream's dependencies */
    Graph *capture;               /* non-NULL while capturing */
    CUstreamCaptureMode mode;
    pthread_t capture_thread;
    int invalidated;
};

typedef struct {
    char *base, *map;
    size_t size, maplen;
    int pinned;
    int dev;                      /* cuMemAlloc: the device of the context current then */
} Alloc;

typedef struct {
    void *so;
    struct {
        void *cur;
        void (*barrier)(int, int, unsigned);
        unsigned long long (*shfl)(int, unsigned, unsigned long long, int);
        void (*misaligned)(const void *, unsigned, int);
    } *rt;
    void (*shared_bounds)(char **, char **);
} Module;

typedef struct {
    Module *mod;
    char name[256];
    void (*entry)(void **);
    int nargs;
    const unsigned *sizes;
    unsigned max_threads;       /* __launch_bounds__, else the device's limit */
} Function;

enum { OP_KERNEL, OP_COPY, OP_MEMSET, OP_HOST, OP_NOP, OP_STAMP };
struct Op {
    int kind;
    uint64_t seq;
    Op *next;
    Stream *dep_s[8];
    uint64_t dep_seq[8];
    int ndeps;
    /* kernel */
    Function *fn;
    unsigned grid[3], block[3];
    char *args;                   /* the argument bytes, copied at launch */
    /* copy / memset */
    void *dst;
    const void *src;
    size_t bytes;
    char *staged;                 /* owned copy of a pageable source */
    int poison_dst;               /* device-to-host: fill dst with 0xFF when queued */
    unsigned value, elem;
    /* host function (cuBLAS) */
    void (*host)(void *);
    char *ctx;
    size_t ctx_bytes;
    /* an event's record (OP_STAMP) */
    void *event;
    uint64_t gen;
};

typedef struct {
    Stream *s;
    uint64_t seq;
    unsigned flags;
    uint64_t gen; /* which record the stamp op in flight belongs to */
    double t; /* when the work before its last record had run (host clock) */
    int stamped, pending, destroyed;
} Event;

static struct {
    int init, ndev;
    CUresult sticky;
    Stream legacy;
    Stream *streams;
    uint64_t seq;
    Alloc *allocs;
    int nallocs, cap;
    size_t used;
    int order;                    /* 0 forward, 1 reverse, 2 random */
    uint64_t rng;
    char cache[1024];
    int own_cache;
    int nstreams; /* streams created so far (their trace ids) */
    FILE *trace; /* NNC_EMU_TRACE */
} G = {.legacy = {.flags = 0}};

static __thread int cur_ctx = -1;

#define CHECK_INIT()                          \
    do {                                      \
        if (!G.init) return CUDA_ERROR_NOT_INITIALIZED; \
        if (G.sticky) return G.sticky;        \
    } while (0)

/* ---- trace -------------------------------------------------------------------------------- */

static Stream *stream_of(CUstream h);

/* One line of NNC_EMU_TRACE: the event, then the stream (" capture" while it records a graph). */
static void trace_v(Stream *s, const char *fmt, va_list ap) {
    if (!G.trace) return;
    vfprintf(G.trace, fmt, ap);
    if (s) fprintf(G.trace, " stream=%d%s", s->id, s->capture ? " capture" : "");
    fputc('\n', G.trace);
    fflush(G.trace);
}

static void trace(Stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void trace(Stream *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    trace_v(s, fmt, ap);
    va_end(ap);
}

EXPORT void nnc_emu_trace(CUstream h, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    trace_v(stream_of(h), fmt, ap);
    va_end(ap);
}

static const char *host_kind(const void *h);

/* ---- capture ------------------------------------------------------------------------------ */

/* A call that a capture forbids (from the capturing thread, global or thread-local mode):
 * invalidates the capture and returns the error. */
static CUresult capture_forbids(const char *what) {
    for (Stream *s = G.streams; s; s = s->next)
        if (s->capture && s->mode != CU_STREAM_CAPTURE_MODE_RELAXED && pthread_equal(s->capture_thread, pthread_self())) {
            say("%s during stream capture: not permitted (the capture is invalidated)", what);
            s->invalidated = 1;
            return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    return CUDA_SUCCESS;
}

#define REFUSE_IN_CAPTURE(what)                         \
    do {                                                \
        CUresult rc_ = capture_forbids(what);           \
        if (rc_) return rc_;                            \
    } while (0)

/* ---- memory ------------------------------------------------------------------------------- */

static Alloc *find_alloc(const void *p) {
    for (int i = 0; i < G.nallocs; i++)
        if ((const char *)p >= G.allocs[i].base && (const char *)p < G.allocs[i].base + G.allocs[i].size)
            return &G.allocs[i];
    return NULL;
}

/* The device allocation whose guard page holds p (for fault reports). */
static Alloc *alloc_near(const void *p, long *past) {
    for (int i = 0; i < G.nallocs; i++) {
        Alloc *a = &G.allocs[i];
        const char *end = a->base + a->size;
        if (!a->pinned && (const char *)p >= a->map && (const char *)p < a->map + a->maplen) {
            *past = (const char *)p >= end ? (long)((const char *)p - end) : -(long)(a->base - (const char *)p);
            return a;
        }
    }
    return NULL;
}

EXPORT int nnc_emu_check_range(const void *p, size_t bytes, const char *what) {
    Alloc *a = find_alloc(p);
    if (a && !a->pinned && bytes <= (size_t)(a->base + a->size - (const char *)p)) return 0;
    if (!a || a->pinned) say("%s: %p is not device memory (no cuMemAlloc allocation holds it)", what, p);
    else
        say("%s: %zu bytes at offset %td of the %zu-byte allocation at %p: %zu bytes past its end", what, bytes,
            (const char *)p - a->base, a->size, (void *)a->base, bytes - (size_t)(a->base + a->size - (const char *)p));
    return -1;
}

static void add_alloc(Alloc a) {
    if (G.nallocs == G.cap) {
        G.cap = G.cap ? 2 * G.cap : 64;
        G.allocs = realloc(G.allocs, (size_t)G.cap * sizeof *G.allocs);
        if (!G.allocs) abort();
    }
    G.allocs[G.nallocs++] = a;
}

static int is_pinned(const void *p) {
    Alloc *a = find_alloc(p);
    return a && a->pinned;
}

static const char *host_kind(const void *h) { return is_pinned(h) ? "pinned" : "pageable"; }

/* The bytes between an allocation's end and its guard page (its size rounded up to 256). */
static size_t alloc_slack(const Alloc *a) { return ((a->size + 255) & ~(size_t)255) - a->size; }

/* A kernel that wrote into an allocation's padding wrote past its end, where a GPU may fault
 * or overwrite its neighbour: a sticky CUDA_ERROR_ILLEGAL_ADDRESS, as a fault is. */
static int check_slack(const char *kernel) {
    for (int i = 0; i < G.nallocs; i++) {
        const Alloc *a = &G.allocs[i];
        for (size_t at = 0; !a->pinned && at < alloc_slack(a); at++)
            if ((unsigned char)a->base[a->size + at] != 0xFF) {
                say("kernel %s: illegal address: a write %zu bytes past the end of the %zu-byte allocation at %p "
                    "(in its padding to 256 bytes; found after the launch)",
                    kernel, at, a->size, (void *)a->base);
                return -1;
            }
    }
    return 0;
}

/* ---- streams and ops ---------------------------------------------------------------------- */

static Stream *stream_of(CUstream h) {
    return !h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD ? &G.legacy : (Stream *)h;
}

static void free_op(Op *o) {
    free(o->args);
    free(o->staged);
    free(o->ctx);
    free(o);
}

static Op *clone_op(const Op *o) {
    Op *c = xcalloc(1, sizeof *c);
    *c = *o;
    c->next = NULL;
    c->ndeps = 0;
    if (o->args) {
        size_t n = 0;
        for (int i = 0; i < o->fn->nargs; i++) n += (o->fn->sizes[i] + 7) & ~7u;
        c->args = xcalloc(1, n);
        memcpy(c->args, o->args, n);
    }
    if (o->staged) {
        c->staged = xcalloc(1, o->bytes);
        memcpy(c->staged, o->staged, o->bytes);
        c->src = c->staged;
    }
    if (o->ctx) {
        c->ctx = xcalloc(1, o->ctx_bytes);
        memcpy(c->ctx, o->ctx, o->ctx_bytes);
    }
    return c;
}

static void append(Op **head, Op **tail, Op *o) {
    if (*tail) (*tail)->next = o;
    else *head = o;
    *tail = o;
}

/* Queues o on s (or records it into s's capture). */
static void enqueue(Stream *s, Op *o) {
    if (s->capture) {
        append(&s->capture->head, &s->capture->tail, o);
        return;
    }
    o->seq = ++G.seq;
    if (s == &G.legacy) {
        for (Stream *b = G.streams; b; b = b->next)
            if (!(b->flags & CU_STREAM_NON_BLOCKING) && b->last_seq && o->ndeps < 8) {
                o->dep_s[o->ndeps] = b;
                o->dep_seq[o->ndeps++] = b->last_seq;
            }
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING) && G.legacy.last_seq && o->ndeps < 8) {
        o->dep_s[o->ndeps] = &G.legacy;
        o->dep_seq[o->ndeps++] = G.legacy.last_seq;
    }
    if (o->poison_dst) memset(o->dst, 0xFF, o->bytes);
    append(&s->head, &s->tail, o);
    s->last_seq = o->seq;
}

static void execute(Op *o);

/* Runs s's queued work up to sequence number seq, each op after its dependencies. */
static void run_until(Stream *s, uint64_t seq) {
    while (s->head && s->head->seq <= seq) {
        Op *o = s->head;
        for (int i = 0; i < o->ndeps; i++) run_until(o->dep_s[i], o->dep_seq[i]);
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        if (!G.sticky) execute(o);
        free_op(o);
    }
}

static void run_all(void) {
    run_until(&G.legacy, UINT64_MAX);
    for (Stream *s = G.streams; s; s = s->next) run_until(s, UINT64_MAX);
}

/* ---- fibers -------------------------------------------------------------------------------- */

/* nnc_emu_switch(save, to): saves the callee-saved registers and the stack pointer in *save,
 * continues on the stack `to` (System V x86-64). */
void nnc_emu_switch(void **save, void *to);
__asm__(".text\n.globl nnc_emu_switch\n.hidden nnc_emu_switch\n.type nnc_emu_switch,@function\n"
        "nnc_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n.size nnc_emu_switch,.-nnc_emu_switch\n");

enum { F_RUN, F_BAR, F_WARP, F_SHFL, F_DONE };
typedef struct {
    struct {
        unsigned tid[3], bid[3], bdim[3], gdim[3], lane;
    } v;                          /* the layout of nnc_emu_vars */
    void *sp;
    int state, line;
    unsigned mask;
    unsigned long long val;
    int src;
} Fiber;

static struct {
    Fiber *f;
    int n, cur;
    void *sched_sp;
    char *stacks;
    size_t stacks_len;
    Function *fn;
    void **argv;
    sigjmp_buf jb;
    volatile int in_kernel;
    void *fault_addr;
    int fault_write;
    unsigned misaligned; /* the size of a misaligned vector access, else 0 */
    char why[512];
} K;

static void fail_launch(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail_launch(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(K.why, sizeof K.why, fmt, ap);
    va_end(ap);
}

static void yield_to_scheduler(void) {
    Fiber *f = &K.f[K.cur];
    nnc_emu_switch(&f->sp, K.sched_sp);
}

static void rt_barrier(int line, int warp_only, unsigned mask) {
    Fiber *f = &K.f[K.cur];
    f->state = warp_only ? F_WARP : F_BAR;
    f->line = line;
    f->mask = mask;
    yield_to_scheduler();
}

static unsigned long long rt_shfl(int line, unsigned mask, unsigned long long v, int src) {
    Fiber *f = &K.f[K.cur];
    f->state = F_SHFL;
    f->line = line;
    f->mask = mask;
    f->val = v;
    f->src = src;
    yield_to_scheduler();
    return f->val;
}

/* A vector access of `bytes` through p, not aligned to them: the launch fails there, as the
 * fault of on_fault does. */
static void rt_misaligned(const void *p, unsigned bytes, int write) {
    K.fault_addr = (void *)p;
    K.fault_write = write;
    K.misaligned = bytes;
    siglongjmp(K.jb, 1);
}

static void fiber_main(void) {
    K.fn->entry(K.argv);
    K.f[K.cur].state = F_DONE;
    yield_to_scheduler();
    abort();   /* a finished fiber is never resumed */
}

static void fiber_reset(int i) {
    uintptr_t hi = (uintptr_t)(K.stacks + (size_t)(i + 1) * STACK_BYTES) & ~(uintptr_t)15;
    void **sp = (void **)hi;
    *--sp = NULL;                 /* fiber_main's return address: never used */
    *--sp = (void *)fiber_main;   /* where nnc_emu_switch's ret goes */
    for (int r = 0; r < 6; r++) *--sp = NULL;
    K.f[i].sp = sp;
    K.f[i].state = F_RUN;
}

static const char *state_name(int s) {
    static const char *n[] = {"running", "at __syncthreads", "at __syncwarp", "at a shuffle", "exited"};
    return n[s];
}

static uint64_t rng_next(void) {
    G.rng ^= G.rng << 13;
    G.rng ^= G.rng >> 7;
    G.rng ^= G.rng << 17;
    return G.rng;
}

/* Releases the lanes of warp w that wait at a complete shuffle or __syncwarp: 1 if some did,
 * -1 on an error (K.why says which), 0 if none can go. */
static int release_warp(int w) {
    int lo = w * 32, hi = lo + 32 < K.n ? lo + 32 : K.n, released = 0;
    for (int i = lo; i < hi; i++) {
        Fiber *f = &K.f[i];
        if (f->state != F_SHFL && f->state != F_WARP) continue;
        int complete = 1;
        if (!(f->mask >> (i - lo) & 1)) {
            fail_launch("thread %d calls a %s whose mask 0x%08x leaves out its own lane (line %d)", i,
                        f->state == F_SHFL ? "shuffle" : "__syncwarp", f->mask, f->line);
            return -1;
        }
        for (int l = 0; l < 32; l++) {
            if (!(f->mask >> l & 1)) continue;
            if (lo + l >= hi || K.f[lo + l].state == F_DONE) {
                fail_launch("thread %d waits %s (line %d) for lane %d of mask 0x%08x, which has exited (or does not exist)",
                            i, state_name(f->state), f->line, l, f->mask);
                return -1;
            }
            Fiber *g = &K.f[lo + l];
            if (g->state != f->state || g->line != f->line || g->mask != f->mask) complete = 0;
        }
        if (!complete) continue;
        unsigned long long vals[32];
        for (int l = 0; l < 32; l++)
            if (f->mask >> l & 1) vals[l] = K.f[lo + l].val;
        for (int l = 0; l < 32; l++) {
            if (!(f->mask >> l & 1)) continue;
            Fiber *g = &K.f[lo + l];
            if (g->state == F_SHFL) {
                int s = g->src;
                if (s < 0 || s >= 32 || !(f->mask >> s & 1)) {
                    fail_launch("thread %d at line %d reads lane %d, which is not in mask 0x%08x", lo + l, g->line, s, f->mask);
                    return -1;
                }
                g->val = vals[s];
            }
            g->state = F_RUN;
        }
        released = 1;
    }
    return released;
}

/* Why nothing can run: a divergent barrier, a partial warp, or a plain deadlock. */
static void explain_stall(void) {
    int first = -1;
    for (int i = 0; i < K.n; i++) {
        Fiber *f = &K.f[i];
        if (f->state == F_DONE) continue;
        if (first < 0) {
            first = i;
            continue;
        }
        Fiber *a = &K.f[first];
        if (f->state != a->state || f->line != a->line) {
            fail_launch("%s: thread %d is %s (line %d) while thread %d is %s (line %d)",
                        a->state == F_BAR && f->state == F_BAR ? "divergent __syncthreads" : "deadlock", first,
                        state_name(a->state), a->line, i, state_name(f->state), f->line);
            return;
        }
    }
    fail_launch("deadlock: thread %d is %s (line %d)", first, state_name(K.f[first].state), K.f[first].line);
}

/* Runs one block; 0, or -1 with K.why set. */
static int run_block(int *order) {
    int live = K.n;
    for (int i = 0; i < K.n; i++) fiber_reset(i);
    for (;;) {
        if (G.order == 2)
            for (int i = K.n - 1; i > 0; i--) {
                int j = (int)(rng_next() % (uint64_t)(i + 1)), t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
        int ran = 0;
        for (int k = 0; k < K.n; k++) {
            int i = order[k];
            if (K.f[i].state != F_RUN) continue;
            K.cur = i;
            K.fn->mod->rt->cur = &K.f[i].v;
            nnc_emu_switch(&K.sched_sp, K.f[i].sp);
            ran = 1;
            live -= K.f[i].state == F_DONE;
        }
        if (!live) return 0;
        int released = 0;
        for (int w = 0; w * 32 < K.n; w++) {
            int r = release_warp(w);
            if (r < 0) return -1;
            released |= r;
        }
        if (released || ran) continue;
        int line = -1, all = 1;
        for (int i = 0; i < K.n && all; i++) {
            if (K.f[i].state == F_DONE) continue;
            if (K.f[i].state != F_BAR || (line >= 0 && K.f[i].line != line)) all = 0;
            line = K.f[i].line;
        }
        if (!all) {
            explain_stall();
            return -1;
        }
        for (int i = 0; i < K.n; i++)
            if (K.f[i].state == F_BAR) K.f[i].state = F_RUN;
    }
}

static void on_fault(int sig, siginfo_t *si, void *ucv) {
    if (!K.in_kernel) {
        signal(sig, SIG_DFL);   /* not ours: the default action on return */
        return;
    }
    ucontext_t *uc = ucv;
    K.fault_addr = si->si_addr;
    K.fault_write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
    siglongjmp(K.jb, 1);
}

static void install_fault_handler(void) {
    static __thread int done;
    if (done) return;
    done = 1;
    stack_t ss = {.ss_sp = malloc(1 << 16), .ss_size = 1 << 16};
    sigaltstack(&ss, NULL);
    struct sigaction sa = {0};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
}

static void run_kernel(Op *o) {
    Function *fn = o->fn;
    int n = (int)(o->block[0] * o->block[1] * o->block[2]);
    size_t need = (size_t)n * STACK_BYTES;
    if (K.stacks_len < need) {
        if (K.stacks) munmap(K.stacks, K.stacks_len);
        K.stacks = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (K.stacks == MAP_FAILED) abort();
        K.stacks_len = need;
        free(K.f);
        K.f = xcalloc((size_t)n, sizeof *K.f);
    }
    K.n = n;
    K.fn = fn;
    static void **argv; /* as many as the kernel has (a fused kernel may read dozens of tensors) */
    static int argv_cap;
    if (fn->nargs > argv_cap) {
        free(argv);
        argv = xcalloc((size_t)fn->nargs, sizeof *argv);
        argv_cap = fn->nargs;
    }
    char *a = o->args;
    for (int i = 0; i < fn->nargs; i++) {
        argv[i] = a;
        a += (fn->sizes[i] + 7) & ~7u;
    }
    K.argv = argv;
    fn->mod->rt->barrier = rt_barrier;
    fn->mod->rt->shfl = rt_shfl;
    fn->mod->rt->misaligned = rt_misaligned;
    char *sh0 = NULL, *sh1 = NULL;
    if (fn->mod->shared_bounds) fn->mod->shared_bounds(&sh0, &sh1);
    int order[MAX_THREADS];
    for (int t = 0; t < n; t++) {
        Fiber *f = &K.f[t];
        f->v.tid[0] = (unsigned)t % o->block[0];
        f->v.tid[1] = (unsigned)t / o->block[0] % o->block[1];
        f->v.tid[2] = (unsigned)t / (o->block[0] * o->block[1]);
        f->v.lane = (unsigned)t % 32;
        for (int d = 0; d < 3; d++) f->v.bdim[d] = o->block[d], f->v.gdim[d] = o->grid[d];
        order[t] = G.order == 1 ? n - 1 - t : t;
    }
    install_fault_handler();
    unsigned b[3] = {0, 0, 0};
    K.why[0] = 0;
    K.misaligned = 0;
    if (sigsetjmp(K.jb, 1)) {
        K.in_kernel = 0;
        long past = 0;
        Alloc *al = alloc_near(K.fault_addr, &past);
        Fiber *f = &K.f[K.cur];
        if (K.misaligned) {
            Alloc *in = find_alloc(K.fault_addr);
            say("kernel %s, block (%u,%u,%u), thread (%u,%u,%u): misaligned address: %u-byte %s at %p, byte %td of "
                "the allocation at %p",
                fn->name, f->v.bid[0], f->v.bid[1], f->v.bid[2], f->v.tid[0], f->v.tid[1], f->v.tid[2], K.misaligned,
                K.fault_write ? "write" : "read", K.fault_addr, in ? (char *)K.fault_addr - in->base : (ptrdiff_t)-1,
                in ? (void *)in->base : NULL);
            G.sticky = CUDA_ERROR_MISALIGNED_ADDRESS;
            return;
        }
        if (al)
            say("kernel %s, block (%u,%u,%u), thread (%u,%u,%u): illegal address: %s at %p, %ld bytes %s the %zu-byte "
                "allocation at %p", fn->name, f->v.bid[0], f->v.bid[1], f->v.bid[2], f->v.tid[0], f->v.tid[1],
                f->v.tid[2], K.fault_write ? "write" : "read", K.fault_addr, past < 0 ? -past : past,
                past < 0 ? "before the start of" : "past the end of", al->size, (void *)al->base);
        else
            say("kernel %s, block (%u,%u,%u), thread (%u,%u,%u): illegal address: %s at %p (no allocation near it)",
                fn->name, f->v.bid[0], f->v.bid[1], f->v.bid[2], f->v.tid[0], f->v.tid[1], f->v.tid[2],
                K.fault_write ? "write" : "read", K.fault_addr);
        G.sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
        return;
    }
    for (b[2] = 0; b[2] < o->grid[2]; b[2]++)
        for (b[1] = 0; b[1] < o->grid[1]; b[1]++)
            for (b[0] = 0; b[0] < o->grid[0]; b[0]++) {
                for (int t = 0; t < n; t++) memcpy(K.f[t].v.bid, b, sizeof b);
                if (sh1 > sh0) memset(sh0, 0xFF, (size_t)(sh1 - sh0));
                K.in_kernel = 1;
                int rc = run_block(order);
                K.in_kernel = 0;
                if (rc) {
                    say("kernel %s, block (%u,%u,%u): launch failed: %s", fn->name, b[0], b[1], b[2], K.why);
                    G.sticky = CUDA_ERROR_LAUNCH_FAILED;
                    return;
                }
            }
    if (check_slack(fn->name)) G.sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
}

/* NNC_EMU_FAULT_KERNEL=N[:E]: the N-th launch (from 1) of a model's kernel (not one of nnc's
 * own nnc_* helpers) comes out with the first 32-bit float it changed in device memory off by
 * E (1 + |value|), E 1e-5 unless given -- a planted wrong result, as NNC_EMU_FAULT_GEMM's, so
 * the tests can show that --check-against names the op that went wrong whatever kind of kernel
 * computed it.  For f32 models: the word is taken as a float.  Says what it planted. */
static char **fault_snapshot(long *count, double *rel) {
    const char *want = getenv("NNC_EMU_FAULT_KERNEL");
    if (!want) return NULL;
    char *end;
    long n = strtol(want, &end, 10);
    *rel = *end == ':' ? strtod(end + 1, NULL) : 1e-5;
    if (++*count != n) return NULL;
    char **copy = xcalloc((size_t)G.nallocs + 1, sizeof *copy);
    for (int i = 0; i < G.nallocs; i++)
        if (!G.allocs[i].pinned) {
            copy[i] = malloc(G.allocs[i].size);
            if (!copy[i]) abort();
            memcpy(copy[i], G.allocs[i].base, G.allocs[i].size);
        }
    return copy;
}

static void fault_plant(const char *kernel, char **before, double rel) {
    for (int i = 0; i < G.nallocs; i++) {
        const Alloc *a = &G.allocs[i];
        for (size_t at = 0; before[i] && at + 4 <= a->size; at += 4) {
            if (!memcmp(before[i] + at, a->base + at, 4)) continue;
            float v, w;
            memcpy(&v, a->base + at, 4);
            w = v + (float)rel * (1 + (v < 0 ? -v : v));
            memcpy(a->base + at, &w, 4);
            say("NNC_EMU_FAULT_KERNEL: kernel %s wrote %.9g at byte %zu of the allocation at %p; planted %.9g", kernel,
                (double)v, at, (void *)a->base, (double)w);
            goto done;
        }
    }
    say("NNC_EMU_FAULT_KERNEL: kernel %s changed no device memory; nothing planted", kernel);
done:
    for (int i = 0; i < G.nallocs; i++) free(before[i]);
    free(before);
}

static void run_model_kernel(Op *o) {
    static long count;
    double rel = 0;
    char **before = strncmp(o->fn->name, "nnc_", 4) ? fault_snapshot(&count, &rel) : NULL;
    run_kernel(o);
    if (before) fault_plant(o->fn->name, before, rel);
}

static double host_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* An event's record has run: the time, unless a later record of the event superseded it.  An
 * event destroyed while records were in flight is freed by the last of them. */
static void stamp_event(Op *o) {
    Event *e = o->event;
    if (o->gen == e->gen) e->t = host_seconds(), e->stamped = 1;
    if (--e->pending == 0 && e->destroyed) free(e);
}

static void execute(Op *o) {
    switch (o->kind) {
    case OP_STAMP: stamp_event(o); break;
    case OP_KERNEL: run_model_kernel(o); break;
    case OP_COPY: memmove(o->dst, o->staged ? o->staged : o->src, o->bytes); break;
    case OP_MEMSET:
        for (size_t i = 0; i < o->bytes / o->elem; i++) memcpy((char *)o->dst + i * o->elem, &o->value, o->elem);
        break;
    case OP_HOST: o->host(o->ctx); break;
    default: break;
    }
}

/* ---- init, devices, contexts -------------------------------------------------------------- */

/* The private cache holds only the flat files this process made. */
static void remove_cache(void) {
    if (!G.own_cache) return;
    DIR *d = opendir(G.cache);
    struct dirent *de;
    char path[1400];
    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", G.cache, de->d_name);
            unlink(path);
        }
    if (d) closedir(d);
    rmdir(G.cache);
}

static int setup_cache(void) {
    const char *env = getenv("NNC_EMU_CACHE");
    if (env && *env) {
        snprintf(G.cache, sizeof G.cache, "%s", env);
        if (mkdir(G.cache, 0700) != 0 && errno != EEXIST) {
            say("cannot create NNC_EMU_CACHE=%s: %s", G.cache, strerror(errno));
            return -1;
        }
        struct stat st;
        if (lstat(G.cache, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 022)) {
            say("refusing NNC_EMU_CACHE=%s: not a directory owned by this user and writable only by it", G.cache);
            return -1;
        }
        return 0;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(G.cache, sizeof G.cache, "%s/nnc-emu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(G.cache)) {
        say("mkdtemp(%s): %s", G.cache, strerror(errno));
        return -1;
    }
    G.own_cache = 1;
    atexit(remove_cache);
    return 0;
}

EXPORT CUresult cuInit(unsigned flags) {
    if (flags) return CUDA_ERROR_INVALID_VALUE;
    if (G.init) return CUDA_SUCCESS;
    const char *d = getenv("NNC_EMU_DEVICES");
    G.ndev = d && *d ? atoi(d) : 1;
    if (G.ndev < 0 || G.ndev > 8) G.ndev = 1;
    const char *o = getenv("NNC_EMU_ORDER");
    G.rng = 0x9E3779B97F4A7C15ull;
    if (!o || !*o || !strcmp(o, "forward")) G.order = 0;
    else if (!strcmp(o, "reverse")) G.order = 1;
    else if (!strncmp(o, "random:", 7)) {
        G.order = 2;
        G.rng ^= strtoull(o + 7, NULL, 10) * 0x2545F4914F6CDD1Dull;
        if (!G.rng) G.rng = 1;
    } else {
        say("NNC_EMU_ORDER=%s: expected forward, reverse or random:SEED", o);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (setup_cache()) return CUDA_ERROR_OPERATING_SYSTEM;
    const char *t = getenv("NNC_EMU_TRACE");
    if (t && *t && !(G.trace = fopen(t, "ae"))) {
        say("NNC_EMU_TRACE=%s: %s", t, strerror(errno));
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    G.init = 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = CUDA_VERSION;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n) {
    CHECK_INIT();
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    *n = G.ndev;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    CHECK_INIT();
    if (!d || ordinal < 0 || ordinal >= G.ndev) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    CHECK_INIT();
    if (!v || d < 0 || d >= G.ndev) return CUDA_ERROR_INVALID_VALUE;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = MAX_THREADS; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 0x7fffffff; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 48 << 10; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 1; break;
    /* an H100 SXM's clocks and bus, so that --profile's nominal ceilings have numbers to show */
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = 5120; break;
    default: *v = 0; break;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    CHECK_INIT();
    if (!name || len <= 0 || d < 0 || d >= G.ndev) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "nnc CUDA emulator");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) {
    CHECK_INIT();
    if (!b || d < 0 || d >= G.ndev) return CUDA_ERROR_INVALID_VALUE;
    *b = TOTAL_MEM;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
    CHECK_INIT();
    if (free_b) *free_b = TOTAL_MEM - G.used;
    if (total) *total = TOTAL_MEM;
    return CUDA_SUCCESS;
}

/* A context is its device's ordinal plus one (the primary context of each device). */
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
    CHECK_INIT();
    if (!c || d < 0 || d >= G.ndev) return CUDA_ERROR_INVALID_VALUE;
    *c = (CUcontext)(uintptr_t)(d + 1);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    CHECK_INIT();
    return d < 0 || d >= G.ndev ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
    CHECK_INIT();
    if ((uintptr_t)c > (uintptr_t)G.ndev) return CUDA_ERROR_INVALID_CONTEXT;
    cur_ctx = (int)(uintptr_t)c - 1;
    return CUDA_SUCCESS;
}

#define NEED_CTX()                                               \
    do {                                                         \
        CHECK_INIT();                                            \
        if (cur_ctx < 0) return CUDA_ERROR_INVALID_CONTEXT;      \
    } while (0)

EXPORT CUresult cuCtxSynchronize(void) {
    NEED_CTX();
    REFUSE_IN_CAPTURE("cuCtxSynchronize");
    trace(NULL, "ctx_sync");
    run_all();
    return G.sticky;
}

/* The name (text = 0) or the description (text = 1) of an error code. */
static CUresult error_text(CUresult rc, const char **s, int text) {
    static const struct {
        CUresult rc;
        const char *name, *text;
    } t[] = {
        {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
        {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
        {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
        {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
        {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
        {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
        {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
        {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
        {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
        {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
        {CUDA_ERROR_MISALIGNED_ADDRESS, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
        {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
        {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
        {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed"},
        {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
         "operation not permitted when stream is capturing"},
        {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
         "operation failed due to a previous error during capture"},
        {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
         "the operation cannot be performed in the present state"},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (t[i].rc == rc) {
            if (s) *s = text ? t[i].text : t[i].name;
            return CUDA_SUCCESS;
        }
    if (s) *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult rc, const char **s) { return error_text(rc, s, 0); }
EXPORT CUresult cuGetErrorString(CUresult rc, const char **s) { return error_text(rc, s, 1); }

/* ---- memory API --------------------------------------------------------------------------- */

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
    NEED_CTX();
    REFUSE_IN_CAPTURE("cuMemAlloc");
    if (!p || !size) return CUDA_ERROR_INVALID_VALUE;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), body = (size + page - 1) / page * page, len = body + 2 * page;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    mprotect(m, page, PROT_NONE);
    mprotect(m + page + body, page, PROT_NONE);
    /* 256-byte aligned as the driver's; the end (rounded up to 256) touches the guard page */
    char *base = m + page + body - ((size + 255) & ~(size_t)255);
    memset(base, 0xFF, (size + 255) & ~(size_t)255);
    add_alloc((Alloc){base, m, size, len, 0, cur_ctx});
    G.used += size;
    *p = (CUdeviceptr)(uintptr_t)base;
    return CUDA_SUCCESS;
}

static CUresult free_alloc(void *p, int pinned) {
    for (int i = 0; i < G.nallocs; i++)
        if (G.allocs[i].base == p && G.allocs[i].pinned == pinned) {
            if (pinned) free(G.allocs[i].base);
            else {
                munmap(G.allocs[i].map, G.allocs[i].maplen);
                G.used -= G.allocs[i].size;
            }
            G.allocs[i] = G.allocs[--G.nallocs];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    NEED_CTX();
    run_all();   /* queued work may still use it */
    return free_alloc((void *)(uintptr_t)p, 0);
}

EXPORT CUresult cuMemAllocHost_v2(void **p, size_t size) {
    NEED_CTX();
    if (!p || !size) return CUDA_ERROR_INVALID_VALUE;
    *p = aligned_alloc(64, (size + 63) & ~(size_t)63);
    if (!*p) return CUDA_ERROR_OUT_OF_MEMORY;
    add_alloc((Alloc){*p, NULL, size, 0, 1, -1});
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFreeHost(void *p) {
    NEED_CTX();
    run_all();
    return free_alloc(p, 1);
}

static Op *copy_op(void *dst, const void *src, size_t n) {
    Op *o = xcalloc(1, sizeof *o);
    o->kind = OP_COPY;
    o->dst = dst;
    o->src = src;
    o->bytes = n;
    return o;
}

#define CHECK_DEV(p, n, what) \
    if (nnc_emu_check_range((const void *)(uintptr_t)(p), (n), (what))) return CUDA_ERROR_INVALID_VALUE

/* Host memory is checked where the emulator knows its size: inside a cuMemAllocHost block. */
static int check_host(const void *h, size_t n, const char *what) {
    Alloc *a = find_alloc(h);
    if (!a || !a->pinned || n <= (size_t)(a->base + a->size - (const char *)h)) return 0;
    say("%s: %zu bytes at offset %td of the %zu-byte cuMemAllocHost block at %p: %zu bytes past its end", what, n,
        (const char *)h - a->base, a->size, (void *)a->base, n - (size_t)(a->base + a->size - (const char *)h));
    return -1;
}
#define CHECK_HOST(h, n, what) \
    if (check_host((h), (n), (what))) return CUDA_ERROR_INVALID_VALUE

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) {
    NEED_CTX();
    REFUSE_IN_CAPTURE("cuMemcpyHtoD");
    if (!n) return CUDA_SUCCESS;
    CHECK_DEV(d, n, "cuMemcpyHtoD destination");
    CHECK_HOST(h, n, "cuMemcpyHtoD source");
    trace(&G.legacy, "copy H2D bytes=%zu sync host=%s", n, host_kind(h));
    run_until(&G.legacy, UINT64_MAX);   /* "a stream sync is performed before the copy is initiated" */
    if (G.sticky) return G.sticky;
    if (is_pinned(h)) {
        memcpy((void *)(uintptr_t)d, h, n);   /* from pinned memory: synchronous */
        return CUDA_SUCCESS;
    }
    /* from pageable memory: returns once staged; the DMA to the device lands later */
    Op *o = copy_op((void *)(uintptr_t)d, NULL, n);
    o->staged = xcalloc(1, n);
    memcpy(o->staged, h, n);
    enqueue(&G.legacy, o);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) {
    NEED_CTX();
    REFUSE_IN_CAPTURE("cuMemcpyDtoH");
    if (!n) return CUDA_SUCCESS;
    CHECK_DEV(d, n, "cuMemcpyDtoH source");
    CHECK_HOST(h, n, "cuMemcpyDtoH destination");
    trace(&G.legacy, "copy D2H bytes=%zu sync host=%s", n, host_kind(h));
    run_until(&G.legacy, UINT64_MAX);
    if (G.sticky) return G.sticky;
    memcpy(h, (const void *)(uintptr_t)d, n);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    NEED_CTX();
    REFUSE_IN_CAPTURE("cuMemcpyDtoD");
    if (!n) return CUDA_SUCCESS;
    CHECK_DEV(dst, n, "cuMemcpyDtoD destination");
    CHECK_DEV(src, n, "cuMemcpyDtoD source");
    trace(&G.legacy, "copy D2D bytes=%zu sync", n);
    enqueue(&G.legacy, copy_op((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n));   /* no host sync */
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, CUstream s) {
    NEED_CTX();
    if (!n) return CUDA_SUCCESS;
    CHECK_DEV(d, n, "cuMemcpyHtoDAsync destination");
    CHECK_HOST(h, n, "cuMemcpyHtoDAsync source");
    trace(stream_of(s), "copy H2D bytes=%zu async host=%s", n, host_kind(h));
    enqueue(stream_of(s), copy_op((void *)(uintptr_t)d, h, n));   /* host memory is read when it runs */
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, CUstream s) {
    NEED_CTX();
    if (!n) return CUDA_SUCCESS;
    CHECK_DEV(d, n, "cuMemcpyDtoHAsync source");
    CHECK_HOST(h, n, "cuMemcpyDtoHAsync destination");
    trace(stream_of(s), "copy D2H bytes=%zu async host=%s", n, host_kind(h));
    Op *o = copy_op(h, (const void *)(uintptr_t)d, n);
    o->poison_dst = 1;
    enqueue(stream_of(s), o);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    NEED_CTX();
    if (!n) return CUDA_SUCCESS;
    CHECK_DEV(dst, n, "cuMemcpyDtoDAsync destination");
    CHECK_DEV(src, n, "cuMemcpyDtoDAsync source");
    trace(stream_of(s), "copy D2D bytes=%zu async", n);
    enqueue(stream_of(s), copy_op((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n));
    return CUDA_SUCCESS;
}

/* Between two devices' memory (several devices share one address space here, so the copy is a
 * queued memcpy); each pointer must be in memory allocated on its context's device. */
EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s) {
    NEED_CTX();
    if ((uintptr_t)dctx == 0 || (uintptr_t)dctx > (uintptr_t)G.ndev || (uintptr_t)sctx == 0 ||
        (uintptr_t)sctx > (uintptr_t)G.ndev)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!n) return CUDA_SUCCESS;
    CHECK_DEV(dst, n, "cuMemcpyPeerAsync destination");
    CHECK_DEV(src, n, "cuMemcpyPeerAsync source");
    const Alloc *ad = find_alloc((const void *)(uintptr_t)dst), *as = find_alloc((const void *)(uintptr_t)src);
    if (ad->dev != (int)(uintptr_t)dctx - 1 || as->dev != (int)(uintptr_t)sctx - 1) {
        say("cuMemcpyPeerAsync: the destination is memory of device %d (its context says %d), the source of device "
            "%d (its context says %d)", ad->dev, (int)(uintptr_t)dctx - 1, as->dev, (int)(uintptr_t)sctx - 1);
        return CUDA_ERROR_INVALID_VALUE;
    }
    trace(stream_of(s), "copy P2P bytes=%zu async from=%d to=%d", n, as->dev, ad->dev);
    enqueue(stream_of(s), copy_op((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n));
    return CUDA_SUCCESS;
}

/* Every emulated device reaches every other's memory (one address space). */
EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer) {
    CHECK_INIT();
    if (!can || d < 0 || d >= G.ndev || peer < 0 || peer >= G.ndev) return CUDA_ERROR_INVALID_DEVICE;
    *can = d != peer;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags) {
    NEED_CTX();
    if (flags || (uintptr_t)peer == 0 || (uintptr_t)peer > (uintptr_t)G.ndev) return CUDA_ERROR_INVALID_VALUE;
    if ((int)(uintptr_t)peer - 1 == cur_ctx) return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

static CUresult memset_async(CUdeviceptr d, unsigned v, unsigned elem, size_t count, CUstream s, const char *what) {
    NEED_CTX();
    if (!count) return CUDA_SUCCESS;
    CHECK_DEV(d, count * elem, what);
    trace(stream_of(s), "memset bytes=%zu", count * elem);
    Op *o = xcalloc(1, sizeof *o);
    o->kind = OP_MEMSET;
    o->dst = (void *)(uintptr_t)d;
    o->bytes = count * elem;
    o->value = v;
    o->elem = elem;
    enqueue(stream_of(s), o);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream s) {
    return memset_async(d, v, 4, n, s, "cuMemsetD32Async");
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
    return memset_async(d, v, 1, n, s, "cuMemsetD8Async");
}

EXPORT CUresult nnc_emu_enqueue_host(CUstream s, void (*fn)(void *), const void *ctx, size_t ctx_bytes) {
    NEED_CTX();
    Op *o = xcalloc(1, sizeof *o);
    o->kind = OP_HOST;
    o->host = fn;
    o->ctx = xcalloc(1, ctx_bytes);
    o->ctx_bytes = ctx_bytes;
    memcpy(o->ctx, ctx, ctx_bytes);
    enqueue(stream_of(s), o);
    return CUDA_SUCCESS;
}

EXPORT int nnc_emu_capturing(CUstream s) { return stream_of(s)->capture != NULL; }

/* ---- streams, events ---------------------------------------------------------------------- */

EXPORT CUresult cuStreamCreate(CUstream *ph, unsigned flags) {
    NEED_CTX();
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    Stream *s = xcalloc(1, sizeof *s);
    s->id = ++G.nstreams;
    s->flags = flags;
    s->next = G.streams;
    G.streams = s;
    *ph = (CUstream)s;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream h) {
    NEED_CTX();
    Stream *s = stream_of(h);
    if (s == &G.legacy) return CUDA_ERROR_INVALID_HANDLE;
    run_until(s, UINT64_MAX);   /* its work still completes */
    for (Stream **p = &G.streams; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            free(s);
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuStreamSynchronize(CUstream h) {
    NEED_CTX();
    REFUSE_IN_CAPTURE("cuStreamSynchronize");
    trace(stream_of(h), "stream_sync");
    run_until(stream_of(h), UINT64_MAX);
    return G.sticky;
}

EXPORT CUresult cuEventCreate(CUevent *e, unsigned flags) {
    NEED_CTX();
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    Event *ev = xcalloc(1, sizeof(Event));
    ev->flags = flags;
    *e = (CUevent)ev;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent ev) {
    NEED_CTX();
    Event *e = (Event *)ev;
    if (e && e->pending) e->destroyed = 1; /* its records in flight free it */
    else free(e);
    return CUDA_SUCCESS;
}

#undef cuEventDestroy   /* cuda.h maps the old name to _v2; export both */
EXPORT CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }

EXPORT CUresult cuEventRecord(CUevent ev, CUstream h) {
    NEED_CTX();
    Event *e = (Event *)ev;
    Stream *s = stream_of(h);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    if (s->capture) return CUDA_ERROR_NOT_SUPPORTED;   /* event nodes in graphs: not emulated */
    trace(s, "event_record event=%p", (void *)e);
    Op *o = xcalloc(1, sizeof *o); /* stamps the time when the work before it has run */
    o->kind = OP_STAMP;
    o->event = e;
    o->gen = ++e->gen;
    e->stamped = 0;
    e->pending++;
    enqueue(s, o);
    e->s = s;
    e->seq = o->seq;
    return CUDA_SUCCESS;
}

/* The host time between the two records' runs: the emulator runs work when the host waits
 * for it, so this is the time the work between them took on the host. */
EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end) {
    NEED_CTX();
    const Event *a = (const Event *)start, *b = (const Event *)end;
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    if (!a || !b || !a->s || !b->s || ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_HANDLE;
    if (G.sticky) return G.sticky;
    if (!a->stamped || !b->stamped) return CUDA_ERROR_NOT_READY;
    *ms = (float)(1e3 * (b->t - a->t));
    return CUDA_SUCCESS;
}

#undef cuEventElapsedTime /* cuda.h maps it to _v2; drivers before CUDA 12.8 have only this name */
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
    return cuEventElapsedTime_v2(ms, start, end);
}

EXPORT CUresult cuEventSynchronize(CUevent ev) {
    NEED_CTX();
    REFUSE_IN_CAPTURE("cuEventSynchronize");
    Event *e = (Event *)ev;
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    trace(e->s, "event_sync event=%p", (void *)e);
    if (e->s) run_until(e->s, e->seq);
    return G.sticky;
}

EXPORT CUresult cuStreamWaitEvent(CUstream h, CUevent ev, unsigned flags) {
    NEED_CTX();
    Event *e = (Event *)ev;
    (void)flags;
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    trace(stream_of(h), "event_wait event=%p", (void *)e);
    Op *o = xcalloc(1, sizeof *o);
    o->kind = OP_NOP;
    if (e->s) {
        o->dep_s[0] = e->s;
        o->dep_seq[0] = e->seq;
        o->ndeps = 1;
    }
    enqueue(stream_of(h), o);
    return CUDA_SUCCESS;
}

/* ---- capture and graphs -------------------------------------------------------------------- */

EXPORT CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) {
    NEED_CTX();
    Stream *s = stream_of(h);
    if (s == &G.legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;   /* the legacy stream cannot be captured */
    if (s->capture) return CUDA_ERROR_ILLEGAL_STATE;
    trace(s, "capture_begin");
    s->capture = xcalloc(1, sizeof(Graph));
    s->mode = mode;
    s->capture_thread = pthread_self();
    s->invalidated = 0;
    return CUDA_SUCCESS;
}

static void free_graph(Graph *g) {
    for (Op *o = g ? g->head : NULL, *n; o; o = n) {
        n = o->next;
        free_op(o);
    }
    free(g);
}

EXPORT CUresult cuStreamEndCapture(CUstream h, CUgraph *out) {
    NEED_CTX();
    Stream *s = stream_of(h);
    if (!s->capture) return CUDA_ERROR_ILLEGAL_STATE;
    Graph *g = s->capture;
    s->capture = NULL;
    trace(s, "capture_end%s", s->invalidated ? " invalidated" : "");
    if (s->invalidated) {
        free_graph(g);
        if (out) *out = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *out = (CUgraph)g;
    return CUDA_SUCCESS;
}

static Graph *copy_graph(const Graph *g) {
    Graph *c = xcalloc(1, sizeof *c);
    for (const Op *o = g->head; o; o = o->next) append(&c->head, &c->tail, clone_op(o));
    return c;
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    NEED_CTX();
    (void)flags;
    if (!exec || !graph) return CUDA_ERROR_INVALID_VALUE;
    *exec = (CUgraphExec)copy_graph((Graph *)graph);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream h) {
    NEED_CTX();
    Stream *s = stream_of(h);
    if (!exec) return CUDA_ERROR_INVALID_VALUE;
    if (s->capture) return CUDA_ERROR_NOT_SUPPORTED;   /* graphs inside a capture: not emulated */
    int nops = 0;
    for (const Op *o = ((Graph *)exec)->head; o; o = o->next) nops++;
    trace(s, "graph_launch ops=%d", nops);
    for (const Op *o = ((Graph *)exec)->head; o; o = o->next) enqueue(s, clone_op(o));
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
    NEED_CTX();
    free_graph((Graph *)exec);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphDestroy(CUgraph g) {
    NEED_CTX();
    free_graph((Graph *)g);
    return CUDA_SUCCESS;
}

/* ---- modules: the CUDA source after the cubin, compiled for the host ------------------------ */

#include "module.inc"

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream h, void **params, void **extra) {
    NEED_CTX();
    Function *fn = (Function *)f;
    if (!fn) return CUDA_ERROR_INVALID_HANDLE;
    if (extra || shmem) {
        say("cuLaunchKernel(%s): `extra` and dynamic shared memory are not emulated", fn->name);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    unsigned long long threads = (unsigned long long)bx * by * bz;
    if (!gx || !gy || !gz || !threads || threads > MAX_THREADS || bz > 64 || gy > 65535 || gz > 65535) {
        say("cuLaunchKernel(%s): grid (%u,%u,%u) block (%u,%u,%u) is invalid", fn->name, gx, gy, gz, bx, by, bz);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (threads > fn->max_threads) {
        say("cuLaunchKernel(%s): block (%u,%u,%u) has %llu threads, more than its __launch_bounds__(%u): "
            "too many resources requested for launch", fn->name, bx, by, bz, threads, fn->max_threads);
        return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    }
    if (fn->nargs && !params) return CUDA_ERROR_INVALID_VALUE;
    trace(stream_of(h), "launch %s grid=%u,%u,%u block=%u,%u,%u shared=%u", fn->name, gx, gy, gz, bx, by, bz, shmem);
    Op *o = xcalloc(1, sizeof *o);
    o->kind = OP_KERNEL;
    o->fn = fn;
    unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
    memcpy(o->grid, g, sizeof g);
    memcpy(o->block, b, sizeof b);
    size_t n = 0;
    for (int i = 0; i < fn->nargs; i++) n += (fn->sizes[i] + 7) & ~7u;
    o->args = xcalloc(1, n);
    n = 0;
    for (int i = 0; i < fn->nargs; i++) {   /* copied now: the caller's variables may change */
        memcpy(o->args + n, params[i], fn->sizes[i]);
        n += (fn->sizes[i] + 7) & ~7u;
    }
    enqueue(stream_of(h), o);
    return CUDA_SUCCESS;
}

/* The real NVRTC dlopens libcuda.so.1 (this one, under LD_LIBRARY_PATH) and asks for the
 * driver's private tables: there are none, which it takes as "no driver". */
EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id) {
    (void)id;
    if (table) *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}
