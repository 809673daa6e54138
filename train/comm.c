/* comm.c - the processes of a data-parallel run (see comm.h).
 *
 * The step's gradients arrive bucket by bucket (schedule.c numbers the buckets, in the order
 * the step starts them, the same on every process).  A bucket of one gradient is summed in
 * place; a bucket of several is packed into one contiguous buffer, so that each bucket is one
 * MPI_Iallreduce however many tensors it holds (DDP's buckets), and unpacked at its first wait.
 * The allreduce is non-blocking: the step goes on with the backward pass while it runs, and
 * waits only where an update needs the sum. */
#define _GNU_SOURCE   /* sched_getaffinity: the cores this process may use */
#include "comm.h"

#include <sched.h>
#include <unistd.h>

#include "../ir/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef NNC_HAVE_MPI
#include <mpi.h>
#endif

/* True when a launcher started this process as one of several (Open MPI, MPICH, PMIx,
 * MVAPICH environment variables), whether or not this nnc can join them. */
static bool comm_launched(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return true;
    return false;
}


typedef struct {
    void *buf;
    size_t bytes;
} Piece;

/* A bucket's exchange: with MPI its packed tensors and request (see the top of this file). */
typedef struct {
    char *pack;              /* the bucket's tensors, back to back (several pieces only) */
    size_t cap, used;
    Piece *piece;
    int npieces, cap_pieces;
#ifdef NNC_HAVE_MPI
    MPI_Request req;
#endif
    bool active;             /* an allreduce is in flight */
} Bucket;

/* mpi: joined through MPI_Init; else a process alone (--data-parallel without mpirun), whose
 * sums are its own values. */
struct Comm {
    bool mpi;
    int rank, size, local_size, local_rank;
    bool agreed;
    double weight;
    double seconds;
    nnc_comm abi;
    Bucket *b;
    int nb;
};

static double comm_share(void *ctx) { return ((Comm *)ctx)->weight; }

/* One process: the sum is the value, times its share (1). */
static int solo_start(void *ctx, int bucket, void *buf, int64_t count, int dtype, int last) {
    (void)ctx, (void)bucket, (void)buf, (void)count, (void)dtype, (void)last;
    return 0;
}
static int solo_wait(void *ctx, int bucket, void *buf, int64_t count, int dtype) {
    (void)ctx, (void)bucket, (void)buf, (void)count, (void)dtype;
    return 0;
}
static int solo_bcast(void *ctx, void *buf, size_t bytes) { return (void)ctx, (void)buf, (void)bytes, 0; }

Comm *comm_solo(void) {
    Comm *c = xcalloc(1, sizeof *c);
    c->size = c->local_size = 1;
    c->weight = 1;
    c->abi = (nnc_comm){.ctx = c, .start = solo_start, .wait = solo_wait, .rank = 0, .size = 1, .device_sums = 1,
                        .share = comm_share, .bcast = solo_bcast};
    return c;
}

#ifdef NNC_HAVE_MPI

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static MPI_Datatype mpi_type(int dtype) { return dtype == NNC_TYPE_F64 ? MPI_DOUBLE : MPI_FLOAT; }

static Bucket *bucket_at(Comm *c, int i) {
    if (i < 0) return NULL;
    if (i >= c->nb) {
        Bucket *nb = realloc(c->b, (size_t)(i + 1) * sizeof *nb);
        if (!nb) return NULL;
        memset(nb + c->nb, 0, (size_t)(i + 1 - c->nb) * sizeof *nb);
        c->b = nb;
        c->nb = i + 1;
    }
    return &c->b[i];
}

static void scale(void *buf, int64_t count, int dtype, double w) {
    if (w == 1) return;
    if (dtype == NNC_TYPE_F64)
        for (int64_t i = 0; i < count; i++) ((double *)buf)[i] *= w;
    else {
        float f = (float)w;
        for (int64_t i = 0; i < count; i++) ((float *)buf)[i] *= f;
    }
}

static int comm_start(void *ctx, int bucket, void *buf, int64_t count, int dtype, int last) {
    Comm *c = ctx;
    double t0 = now();
    Bucket *B = bucket_at(c, bucket);
    size_t esize = dtype == NNC_TYPE_F64 ? 8 : 4, bytes = (size_t)count * esize;
    if (!B || B->active || count < 0) return 1;
    scale(buf, count, dtype, c->weight);
    int rc;
    if (B->npieces == 0 && last) {   /* one tensor: summed where it is */
        if (count > 0x7fffffff) return 1;
        rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dtype), MPI_SUM, MPI_COMM_WORLD, &B->req);
    } else {
        if (B->used + bytes > B->cap) {
            size_t cap = (B->used + bytes) * 2;
            char *p = realloc(B->pack, cap);
            if (!p) return 1;
            B->pack = p;
            B->cap = cap;
        }
        if (B->npieces == B->cap_pieces) {
            int cp = B->cap_pieces ? 2 * B->cap_pieces : 8;
            Piece *p = realloc(B->piece, (size_t)cp * sizeof *p);
            if (!p) return 1;
            B->piece = p;
            B->cap_pieces = cp;
        }
        memcpy(B->pack + B->used, buf, bytes);
        B->piece[B->npieces++] = (Piece){buf, bytes};
        B->used += bytes;
        rc = MPI_SUCCESS;
        if (last) {
            if (B->used / esize > 0x7fffffff) return 1;
            rc = MPI_Iallreduce(MPI_IN_PLACE, B->pack, (int)(B->used / esize), mpi_type(dtype), MPI_SUM, MPI_COMM_WORLD,
                                &B->req);
        }
    }
    B->active = last && rc == MPI_SUCCESS;
    c->seconds += now() - t0;
    return rc != MPI_SUCCESS;
}

static int comm_wait(void *ctx, int bucket, void *buf, int64_t count, int dtype) {
    Comm *c = ctx;
    (void)buf, (void)count, (void)dtype;
    double t0 = now();
    Bucket *B = bucket_at(c, bucket);
    if (!B) return 1;
    if (B->active) {   /* the bucket's first wait: the sum, back into every tensor of it */
        if (MPI_Wait(&B->req, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 1;
        B->active = false;
        size_t at = 0;
        for (int i = 0; i < B->npieces; i++) {
            memcpy(B->piece[i].buf, B->pack + at, B->piece[i].bytes);
            at += B->piece[i].bytes;
        }
        B->npieces = 0;
        B->used = 0;
    }
    c->seconds += now() - t0;
    return 0;
}

static int comm_bcast_bytes(void *ctx, void *buf, size_t bytes) {
    (void)ctx;
    return bytes > 0x7fffffff || MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS;
}

Comm *comm_init(int *argc, char ***argv, char *err, size_t n) {
    err[0] = 0;
    if (!comm_launched()) return NULL;
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        snprintf(err, n, "MPI_Init failed: cannot join the job that mpirun started");
        return NULL;
    }
    Comm *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    c->mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    MPI_Comm local;
    c->local_size = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_size(local, &c->local_size);
        MPI_Comm_rank(local, &c->local_rank);
        MPI_Comm_free(&local);
    }
    c->weight = 1;
    c->abi = (nnc_comm){.ctx = c, .start = comm_start, .wait = comm_wait, .rank = c->rank, .size = c->size,
                        .device_sums = 1, .share = comm_share, .bcast = comm_bcast_bytes};
    return c;
}

const char *comm_library(void) {
    static char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(v, &len);
    char *nl = strpbrk(v, ",\n");   /* "Open MPI v4.1.4, package: ..." -> its first part */
    if (nl) *nl = 0;
    return v;
}

bool comm_sum(Comm *c, double *v, int n) {
    if (!c->mpi) return true;
    double t0 = now();
    bool ok = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS;
    c->seconds += now() - t0;
    return ok;
}

bool comm_agree_u64(Comm *c, uint64_t v, uint64_t *lo, uint64_t *hi) {
    if (!c->mpi) return *lo = *hi = v, true;
    return MPI_Allreduce(&v, lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD) == MPI_SUCCESS &&
           MPI_Allreduce(&v, hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD) == MPI_SUCCESS;
}

bool comm_bcast_int(Comm *c, int *v) {
    if (!c->mpi) return true;
    return MPI_Bcast(v, 1, MPI_INT, 0, MPI_COMM_WORLD) == MPI_SUCCESS;
}

void comm_finish(Comm *c, int rc) {
    if (!c) return;
    if (c->mpi && rc != 0 && c->size > 1 && !c->agreed) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    for (int i = 0; i < c->nb; i++) {
        free(c->b[i].pack);
        free(c->b[i].piece);
    }
    free(c->b);
    bool mpi = c->mpi;
    free(c);
    if (mpi) MPI_Finalize();
}

#else /* built without MPI: a launcher's processes cannot join each other */

Comm *comm_init(int *argc, char ***argv, char *err, size_t n) {
    (void)argc, (void)argv;
    err[0] = 0;
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (!size) size = getenv("PMI_SIZE");
    if (comm_launched() && (!size || atoi(size) > 1))
        snprintf(err, n, "started by an MPI launcher, but this nnc was built without MPI (see nnc --version): "
                         "install libopenmpi-dev and rebuild, or run one process");
    return NULL;
}

const char *comm_library(void) { return NULL; }
bool comm_sum(Comm *c, double *v, int n) { return (void)c, (void)v, (void)n, true; }
bool comm_agree_u64(Comm *c, uint64_t v, uint64_t *lo, uint64_t *hi) { return (void)c, *lo = *hi = v, true; }
bool comm_bcast_int(Comm *c, int *v) { return (void)c, (void)v, true; }
void comm_finish(Comm *c, int rc) {
    (void)rc;
    free(c);
}

#endif

int comm_rank(const Comm *c) { return c ? c->rank : 0; }
int comm_size(const Comm *c) { return c ? c->size : 1; }
int comm_local_rank(const Comm *c) { return c ? c->local_rank : 0; }

int comm_threads(const Comm *c) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
    long t = cores / (c ? c->local_size : 1);
    return t > 0 ? (int)t : 1;
}
const nnc_comm *comm_abi(Comm *c) { return c ? &c->abi : NULL; }

void comm_mark_agreed(Comm *c) {
    if (c) c->agreed = true;
}

void comm_allow_device_sums(Comm *c, bool allow) {
    if (c) c->abi.device_sums = allow;
}

void comm_set_weight(Comm *c, double share) {
    if (c) c->weight = share;
}

double comm_take_seconds(Comm *c) {
    if (!c) return 0;
    double s = c->seconds;
    c->seconds = 0;
    return s;
}
