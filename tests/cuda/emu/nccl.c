/* nccl.c - the emulator's libnccl.so.2: NCCL's allreduce between processes, done with MPI.
 *
 * Device memory is host memory in the emulator, so a sum over the processes of a run is an
 * MPI_Allreduce on it, queued on the stream like any other work (nnc_emu_enqueue_host): it runs
 * after what the stream waits for, and what waits for it runs after it.  The processes are the MPI job nnc itself joined (MPI_COMM_WORLD, already
 * initialized; a communicator of one process needs none); a communicator must name the same
 * size and this process's rank, and its id
 * must be the one ncclGetUniqueId gave process 0 (each process checks it against the
 * broadcast: a wrong id is what the real library would hang on).  Only what nnc calls is here:
 * version, unique id, init, destroy, error strings, pre-multiplied sums, and ncclAllReduce of
 * float32/float64 sums with a bounds check of the buffer. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "emu.h"

#define EXPORT __attribute__((visibility("default")))

typedef struct {
    char internal[128];
} ncclUniqueId;
enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclSystemError = 2 };
enum { ncclSum = 0, ncclFloat32 = 7, ncclFloat64 = 8, ncclScalarHostImmediate = 1 };
#define PREMUL_OPS 64   /* ncclRedOp_t values from 1024: live pre-multiplied sums */

struct ncclComm {
    int rank, size;
    double premul[PREMUL_OPS];
    unsigned char live[PREMUL_OPS];
};

static const char tag[] = "nnc-emu-nccl-id";

EXPORT int ncclGetVersion(int *v) {
    if (!v) return ncclInvalidArgument;
    *v = 22800;
    return ncclSuccess;
}

EXPORT const char *ncclGetErrorString(int r) {
    return r == ncclSuccess ? "no error" : r == ncclInvalidArgument ? "invalid argument" :
           r == ncclInvalidUsage ? "invalid usage" : "system error";
}

EXPORT int ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, tag, sizeof tag);
    int pid = (int)getpid();
    memcpy(id->internal + 32, &pid, sizeof pid);
    return ncclSuccess;
}

EXPORT int ncclCommInitRank(struct ncclComm **out, int nranks, ncclUniqueId id, int rank) {
    int inited = 0, size = 0, me = -1;
    MPI_Initialized(&inited);
    if (out && !inited && nranks == 1 && rank == 0 && !memcmp(id.internal, tag, sizeof tag)) {   /* alone: no MPI */
        struct ncclComm *c = calloc(1, sizeof *c);
        if (!c) return ncclSystemError;
        c->size = 1;
        *out = c;
        return ncclSuccess;
    }
    if (!out || !inited) {
        fprintf(stderr, "nnc-emu: ncclCommInitRank: the emulated NCCL runs over the MPI job, which is not initialized\n");
        return ncclInvalidUsage;
    }
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (nranks != size || rank != me || memcmp(id.internal, tag, sizeof tag)) {
        fprintf(stderr, "nnc-emu: ncclCommInitRank(nranks %d, rank %d): the MPI job has %d processes, this is %d%s\n",
                nranks, rank, size, me, memcmp(id.internal, tag, sizeof tag) ? ", and the id is not ncclGetUniqueId's" : "");
        return ncclInvalidArgument;
    }
    char all[128];   /* every process must hold process 0's id */
    memcpy(all, id.internal, sizeof all);
    MPI_Bcast(all, sizeof all, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (memcmp(all, id.internal, sizeof all)) {
        fprintf(stderr, "nnc-emu: ncclCommInitRank: process %d holds another id than process 0\n", me);
        return ncclInvalidArgument;
    }
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->rank = rank;
    c->size = nranks;
    *out = c;
    return ncclSuccess;
}

EXPORT int ncclCommDestroy(struct ncclComm *c) {
    free(c);
    return ncclSuccess;
}

EXPORT int ncclRedOpCreatePreMulSum(int *op, void *scalar, int type, int residence, struct ncclComm *c) {
    if (!op || !scalar || !c || residence != ncclScalarHostImmediate || (type != ncclFloat32 && type != ncclFloat64))
        return ncclInvalidArgument;
    for (int i = 0; i < PREMUL_OPS; i++)
        if (!c->live[i]) {
            c->live[i] = 1;
            c->premul[i] = type == ncclFloat64 ? *(const double *)scalar : (double)*(const float *)scalar;
            *op = 1024 + i;
            return ncclSuccess;
        }
    return ncclInvalidUsage;
}

EXPORT int ncclRedOpDestroy(int op, struct ncclComm *c) {
    if (!c || op < 1024 || op >= 1024 + PREMUL_OPS || !c->live[op - 1024]) return ncclInvalidArgument;
    c->live[op - 1024] = 0;
    return ncclSuccess;
}

/* The sum itself, run when the stream reaches it (so a stream that does not wait for the
 * gradient sums stale memory, as a GPU would). */
typedef struct {
    const void *send;
    void *recv;
    size_t count;
    int type, size;
    double w;
    int premul;
} Sum;

static void run_sum(void *ctx) {
    const Sum *a = ctx;
    size_t es = a->type == ncclFloat64 ? 8 : 4;
    if (a->send != a->recv) memcpy(a->recv, a->send, a->count * es);
    for (size_t i = 0; a->premul && i < a->count; i++) {
        if (a->type == ncclFloat64) ((double *)a->recv)[i] *= a->w;
        else ((float *)a->recv)[i] *= (float)a->w;
    }
    if (a->size > 1 && MPI_Allreduce(MPI_IN_PLACE, a->recv, (int)a->count, a->type == ncclFloat64 ? MPI_DOUBLE : MPI_FLOAT,
                                     MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
        fprintf(stderr, "nnc-emu: ncclAllReduce: MPI_Allreduce failed\n");
}

EXPORT int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, struct ncclComm *c, CUstream s) {
    size_t es = type == ncclFloat64 ? 8 : 4;
    if (!c || (type != ncclFloat32 && type != ncclFloat64) || count > 0x7fffffff) return ncclInvalidArgument;
    if (op != ncclSum && (op < 1024 || op >= 1024 + PREMUL_OPS || !c->live[op - 1024])) return ncclInvalidArgument;
    if (count && (nnc_emu_check_range(send, count * es, "ncclAllReduce send buffer") ||
                  nnc_emu_check_range(recv, count * es, "ncclAllReduce receive buffer")))
        return ncclInvalidArgument;
    Sum a = {send, recv, count, type, c->size, op != ncclSum ? c->premul[op - 1024] : 1, op != ncclSum};
    return nnc_emu_enqueue_host(s, run_sum, &a, sizeof a) == CUDA_SUCCESS ? ncclSuccess : ncclSystemError;
}
