/* nccl.c - NCCL, loaded with dlopen like cuBLAS, for data-parallel training on GPUs: the
 * gradients are summed in device memory, on the step's stream, instead of going through the
 * host to MPI.
 *
 * nnc needs no NCCL at build or link time: libnccl.so.2 is looked for on the loader path, in the
 * CUDA toolkit and in NVIDIA's wheels (cuda_libs.c); without it the CUDA target stages the
 * gradients through host memory.  The handful of declarations below are NCCL's stable C API
 * (nccl.h, 2.11 and later for ncclRedOpCreatePreMulSum), written out so that a toolkit without
 * nccl.h still builds nnc.  The communicator's id comes from process 0 through the host's
 * nnc_comm (MPI), as NCCL's own examples pass it. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

typedef struct ncclComm *ncclComm_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef int ncclResult_t;   /* ncclSuccess = 0 */
enum { NCCL_FLOAT32 = 7, NCCL_FLOAT64 = 8, NCCL_SCALAR_HOST_IMMEDIATE = 1 };

static struct {
    bool tried, ok;
    char why[700];
    ncclResult_t (*GetVersion)(int *);
    ncclResult_t (*GetUniqueId)(ncclUniqueId *);
    ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*CommDestroy)(ncclComm_t);
    ncclResult_t (*AllReduce)(const void *, void *, size_t, int, int, ncclComm_t, void *);
    ncclResult_t (*RedOpCreatePreMulSum)(int *, void *, int, int, ncclComm_t);
    ncclResult_t (*RedOpDestroy)(int, ncclComm_t);
    const char *(*GetErrorString)(ncclResult_t);
} nc;

struct NcclComm {
    ncclComm_t comm;
};

static bool load(void) {
    if (nc.tried) return nc.ok;
    nc.tried = true;
    static const char *const names[] = {"libnccl.so.2", "libnccl.so", NULL};
    void *h = cuda_libs_open("NCCL", names, NULL, 0, nc.why, sizeof nc.why);
    if (!h) return false;
    struct {
        void **fn;
        const char *name;
    } syms[] = {
        {(void **)&nc.GetVersion, "ncclGetVersion"},
        {(void **)&nc.GetUniqueId, "ncclGetUniqueId"},
        {(void **)&nc.CommInitRank, "ncclCommInitRank"},
        {(void **)&nc.CommDestroy, "ncclCommDestroy"},
        {(void **)&nc.AllReduce, "ncclAllReduce"},
        {(void **)&nc.RedOpCreatePreMulSum, "ncclRedOpCreatePreMulSum"},
        {(void **)&nc.RedOpDestroy, "ncclRedOpDestroy"},
        {(void **)&nc.GetErrorString, "ncclGetErrorString"},
    };
    for (size_t i = 0; i < NNC_COUNTOF(syms); i++)
        if (!(*syms[i].fn = dlsym(h, syms[i].name))) {
            snprintf(nc.why, sizeof nc.why, "libnccl has no %s (NCCL 2.11 or later is needed)", syms[i].name);
            return false;
        }
    return nc.ok = true;
}

const char *nccl_unavailable(void) { return load() ? NULL : nc.why; }

static bool nccl_check(ncclResult_t r, const char *call, char *err, size_t n) {
    if (r == 0) return true;
    snprintf(err, n, "%s failed: %s (NCCL error %d)", call, nc.GetErrorString ? nc.GetErrorString(r) : "?", r);
    return false;
}

NcclComm *nccl_init(const nnc_comm *c, char *err, size_t n) {
    if (!load()) {
        snprintf(err, n, "%s", nc.why);
        return NULL;
    }
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (c->rank == 0 && !nccl_check(nc.GetUniqueId(&id), "ncclGetUniqueId", err, n)) return NULL;
    /* every process takes part in the broadcast, even when process 0 failed above: the
     * failure then shows as an error in every process rather than a wait */
    if (c->bcast(c->ctx, &id, sizeof id)) {
        snprintf(err, n, "could not pass NCCL's id to every process");
        return NULL;
    }
    NcclComm *k = calloc(1, sizeof *k);
    if (!k) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    if (!nccl_check(nc.CommInitRank(&k->comm, c->size, id, c->rank), "ncclCommInitRank", err, n)) {
        free(k);
        return NULL;
    }
    return k;
}

/* buf (count reals of dtype NNC_TYPE_F32/F64, device memory) becomes the sum over the processes
 * of each one's buf times its share, on `stream`: NCCL's pre-multiplied sum. */
bool nccl_allreduce(NcclComm *k, void *buf, size_t count, int dtype, double share, void *stream, char *err, size_t n) {
    int type = dtype == NNC_TYPE_F64 ? NCCL_FLOAT64 : NCCL_FLOAT32, op;
    float f = (float)share;
    void *scalar = dtype == NNC_TYPE_F64 ? (void *)&share : (void *)&f;
    if (!nccl_check(nc.RedOpCreatePreMulSum(&op, scalar, type, NCCL_SCALAR_HOST_IMMEDIATE, k->comm),
                    "ncclRedOpCreatePreMulSum", err, n))
        return false;
    bool ok = nccl_check(nc.AllReduce(buf, buf, count, type, op, k->comm, stream), "ncclAllReduce", err, n);
    nc.RedOpDestroy(op, k->comm);   /* allowed once the call using it is enqueued */
    return ok;
}

void nccl_free(NcclComm *k) {
    if (!k) return;
    nc.CommDestroy(k->comm);
    free(k);
}
