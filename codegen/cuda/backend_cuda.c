/* backend_cuda.c - the CUDA backend: NVRTC kernels, cuBLAS GEMMs, explicit copies, graphs.
 *
 * The model's host side (nnc_model_abi: tensor tables, initialisation, checks, outputs, the
 * step) is the shared runtime, include/nnc_runtime.h, over the description model_desc.c builds;
 * this file is the CUDA device under it (nnc_device_ops): pinned host memory, copies between the
 * host mirrors and device blocks, and running an entry.
 *
 * load() opens the driver with dlopen (no CUDA library is linked, so a CUDA-enabled nnc runs
 * on machines without one and says plainly when there is no driver or device), compiles the
 * rendered source for the device's sm_XY with NVRTC (cached on disk by a hash of the source,
 * the architecture, the NVRTC version and the flags), and allocates:
 *   - device memory: parameters, optimizer state, one activation block (the description's
 *     block sizes), the step counter and the error flag;
 *   - pinned host memory: the runtime's host blocks (parameter and state mirrors, host
 *     activations such as the loss copied back) and output copies, through host_alloc, and
 *     this file's staging for the batch inputs, so that every copy is asynchronous on the
 *     compute stream and capturable.
 * run() issues an entry's launches in schedule order on one stream: copies as async memcpys,
 * kernels with cuLaunchKernel, GEMMs with cuBLAS, assignments as device memcpys, and a helper
 * launch's plan (helper_plan.c) step by step: helpers.c's kernels, cuBLAS, memsets.  The first run
 * of an entry at a batch size goes direct; the next one captures the sequence as a CUDA graph
 * (keyed by the batch size, which the cuBLAS calls bake in) and later runs replay it.  If
 * capture fails the entry stays on direct launches.  Every CUDA and cuBLAS call is checked by
 * a macro that reports the call and its site (llm.c's cudaCheck) into the instance's message. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda.h>

#include "../../include/nnc_rng.h"
#include "../../io/cache.h"
#include "cuda_backend.h"
#include "../helpers.h"
#include "../kernel.h"
#define NNC_RUNTIME_IMPLEMENTATION   /* the runtime's functions, static in this file */
#include "../../include/nnc_runtime.h"

#define GRAPH_SLOTS 4
#define BLAS_WORKSPACE (32u << 20)

/* ---- the driver and cuBLAS, by dlopen ------------------------------------------------------ */

static struct {
    bool tried, ok;
    char why[1536];
    char brief[160]; /* why, in a few words: --target auto's "no CUDA device (...)" */
    CUresult (*Init)(unsigned);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*PrimaryCtxRelease)(CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemAllocHost)(void **, size_t);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*MemcpyPeerAsync)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
    CUresult (*DeviceCanAccessPeer)(int *, CUdevice, CUdevice);
    CUresult (*CtxEnablePeerAccess)(CUcontext, unsigned);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
    CUresult (*MemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*StreamBeginCapture)(CUstream, CUstreamCaptureMode);
    CUresult (*StreamEndCapture)(CUstream, CUgraph *);
    CUresult (*GraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*GraphLaunch)(CUgraphExec, CUstream);
    CUresult (*GraphExecDestroy)(CUgraphExec);
    CUresult (*GraphDestroy)(CUgraph);
    /* cuBLAS */
    cublasStatus_t (*BlasCreate)(cublasHandle_t *);
    cublasStatus_t (*BlasDestroy)(cublasHandle_t);
    cublasStatus_t (*BlasSetStream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*BlasSetMathMode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*BlasSetWorkspace)(cublasHandle_t, void *, size_t);
    cublasStatus_t (*Sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                            const float *, int, const float *, int, const float *, float *, int);
    cublasStatus_t (*Dgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const double *,
                            const double *, int, const double *, int, const double *, double *, int);
    cublasStatus_t (*GemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                             const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                             cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    cublasStatus_t (*GemmExB)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, long long, const void *, cudaDataType, int, long long,
                              const void *, void *, cudaDataType, int, long long, int, cublasComputeType_t,
                              cublasGemmAlgo_t);
    cublasStatus_t (*SgemmB)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                             const float *, int, long long, const float *, int, long long, const float *, float *, int,
                             long long, int);
    cublasStatus_t (*DgemmB)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const double *,
                             const double *, int, long long, const double *, int, long long, const double *, double *,
                             int, long long, int);
} cu;

static bool sym(void *h, void **field, const char *name, const char *lib) {
    *field = dlsym(h, name);
    if (!*field) {
        snprintf(cu.why, sizeof cu.why, "%s has no %s: a driver or toolkit too old for this nnc", lib, name);
        snprintf(cu.brief, sizeof cu.brief, "%s is too old: it has no %s", lib, name);
    }
    return *field != NULL;
}

#define SYM(h, field, name, lib) \
    if (!sym(h, (void **)&cu.field, name, lib)) return false

static bool load_driver(void) {
    static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
    char why[600];
    void *h = cuda_libs_open("the CUDA driver", names, NULL, 0, why, sizeof why);
    if (!h) {
        const char *broken = strstr(why, "; the last that exists failed: ");
        snprintf(cu.why, sizeof cu.why,
                 "no CUDA driver found (libcuda.so.1 is not installed or cannot be loaded%s%.300s); the cuda target "
                 "needs an NVIDIA GPU and its driver. Use --target cpu", broken ? ": " : "",
                 broken ? broken + strlen("; the last that exists failed: ") : "");
        snprintf(cu.brief, sizeof cu.brief, "%s",
                 broken ? "libcuda.so.1 does not load" : "no driver: libcuda.so.1 not found");
        return false;
    }
    const char *L = "libcuda.so.1";
    SYM(h, Init, "cuInit", L); SYM(h, DriverGetVersion, "cuDriverGetVersion", L);
    SYM(h, DeviceGetCount, "cuDeviceGetCount", L); SYM(h, DeviceGet, "cuDeviceGet", L);
    SYM(h, DeviceGetAttribute, "cuDeviceGetAttribute", L); SYM(h, DeviceGetName, "cuDeviceGetName", L);
    SYM(h, PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", L);
    SYM(h, PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", L);
    SYM(h, CtxSetCurrent, "cuCtxSetCurrent", L); SYM(h, GetErrorName, "cuGetErrorName", L);
    SYM(h, GetErrorString, "cuGetErrorString", L); SYM(h, ModuleLoadData, "cuModuleLoadData", L);
    SYM(h, ModuleUnload, "cuModuleUnload", L); SYM(h, ModuleGetFunction, "cuModuleGetFunction", L);
    SYM(h, MemAlloc, "cuMemAlloc_v2", L); SYM(h, MemFree, "cuMemFree_v2", L);
    SYM(h, MemAllocHost, "cuMemAllocHost_v2", L); SYM(h, MemFreeHost, "cuMemFreeHost", L);
    SYM(h, MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", L); SYM(h, MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", L);
    SYM(h, MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", L); SYM(h, MemsetD32Async, "cuMemsetD32Async", L);
    SYM(h, MemcpyPeerAsync, "cuMemcpyPeerAsync", L); SYM(h, DeviceCanAccessPeer, "cuDeviceCanAccessPeer", L);
    SYM(h, CtxEnablePeerAccess, "cuCtxEnablePeerAccess", L);
    SYM(h, EventCreate, "cuEventCreate", L); SYM(h, EventDestroy, "cuEventDestroy_v2", L);
    SYM(h, EventRecord, "cuEventRecord", L); SYM(h, StreamWaitEvent, "cuStreamWaitEvent", L);
    SYM(h, StreamCreate, "cuStreamCreate", L); SYM(h, StreamDestroy, "cuStreamDestroy_v2", L);
    SYM(h, StreamSynchronize, "cuStreamSynchronize", L); SYM(h, LaunchKernel, "cuLaunchKernel", L);
    SYM(h, StreamBeginCapture, "cuStreamBeginCapture_v2", L); SYM(h, StreamEndCapture, "cuStreamEndCapture", L);
    SYM(h, GraphInstantiate, "cuGraphInstantiateWithFlags", L); SYM(h, GraphLaunch, "cuGraphLaunch", L);
    SYM(h, GraphExecDestroy, "cuGraphExecDestroy", L); SYM(h, GraphDestroy, "cuGraphDestroy", L);
    return true;
}

static bool load_blas(void) {
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", NULL};
    void *h = cuda_libs_open("cuBLAS", names, NULL, 0, cu.why, sizeof cu.why);
    if (!h) snprintf(cu.brief, sizeof cu.brief, "cuBLAS (libcublas) not found");
    if (!h) return false;
    const char *L = "libcublas";
    SYM(h, BlasCreate, "cublasCreate_v2", L); SYM(h, BlasDestroy, "cublasDestroy_v2", L);
    SYM(h, BlasSetStream, "cublasSetStream_v2", L); SYM(h, BlasSetMathMode, "cublasSetMathMode", L);
    SYM(h, BlasSetWorkspace, "cublasSetWorkspace_v2", L);
    SYM(h, Sgemm, "cublasSgemm_v2", L); SYM(h, Dgemm, "cublasDgemm_v2", L);
    SYM(h, SgemmB, "cublasSgemmStridedBatched", L); SYM(h, DgemmB, "cublasDgemmStridedBatched", L);
    SYM(h, GemmEx, "cublasGemmEx", L); SYM(h, GemmExB, "cublasGemmStridedBatchedEx", L);
    return true;
}

/* The driver, an initialized driver and at least one device, or a plain reason why not. */
static bool cuda_open(void) {
    if (cu.tried) return cu.ok;
    cu.tried = true;
    if (!load_driver()) return false;
    CUresult rc = cu.Init(0);
    int count = 0;
    if (rc == CUDA_SUCCESS) rc = cu.DeviceGetCount(&count);
    if (rc != CUDA_SUCCESS || count == 0) {
        const char *name = "?";
        if (rc != CUDA_SUCCESS) cu.GetErrorName(rc, &name);
        snprintf(cu.why, sizeof cu.why, "no CUDA device found (%s%s); the cuda target needs an NVIDIA GPU. "
                 "Use --target cpu", rc != CUDA_SUCCESS ? "cuInit: " : "the driver reports 0 devices",
                 rc != CUDA_SUCCESS ? name : "");
        snprintf(cu.brief, sizeof cu.brief, "%s%s", rc != CUDA_SUCCESS ? "cuInit: " : "the driver reports 0 devices",
                 rc != CUDA_SUCCESS ? name : "");
        return false;
    }
    if (!load_blas()) return false;
    cu.ok = true;
    return true;
}

/* ---- the device state ------------------------------------------------------------------------ */

typedef struct {
    int64_t B;
    CUgraphExec exec;
} GraphSlot;

/* What the CUDA device keeps for one instance (nnc_rt.dev).  The runtime owns the host blocks
 * (parameter and state mirrors, host activations) and the output copies, in pinned memory from
 * cuda_host_alloc; everything in device memory, and the pinned staging the kernels' copies and
 * captured graphs read, is here. */
/* One GPU's share of an instance: its context, stream, cuBLAS handle, module (the same kernels
 * loaded in every GPU's context) and memory.  A model on one GPU has one; a model split over
 * several (model parallel, placement.c) has one per GPU it uses, each holding its own range of
 * the parameter and state blocks (plan.c lays them out device by device) and its own
 * activation block. */
typedef struct {
    bool used;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUstream st;
    cublasHandle_t blas;
    CUfunction *fn[ENTRY_COUNT], step_inc, check_fn;
    CUfunction helper[HP_COUNT];               /* codegen/helpers.c's helpers, when the model has any */
    CUdeviceptr dFirst;                         /* --check-numerics: the first non-finite index found */
    unsigned long long *hFirst;                 /* ... read back (pinned) */
    CUdeviceptr dBlock[NNC_BLOCK_COUNT];        /* its params, state, act (the host block is the runtime's) */
    int64_t lo[NNC_BLOCK_COUNT];                /* bytes of the whole block where its range starts */
    size_t bytes[NNC_BLOCK_COUNT];              /* ... and its size */
    CUdeviceptr dStep, dErr, dWork;
    long long *hStep;                           /* pinned staging for the step counter and the seed */
    int *hErr;                                  /* pinned error flag readback */
} Gpu;

typedef struct {
    const Program *p;
    nnc_rt *rt;                                 /* the instance: messages, step, host blocks */
    nnc_model_desc *desc;                       /* built from p, in `arena` */
    size_t rb;                                  /* bytes per real */
    bool f64, tf32;
    Gpu gpu[NNC_MAX_GPUS];                      /* by index: cuda:k is gpu[k] */
    Gpu *cur;                                   /* the one work is issued to now (its context is current) */
    int ngpus;                                  /* how many the model uses */
    int base;                                   /* the physical GPU of cuda:0 (cuda:k is base + k) */
    bool check_numerics;                        /* --check-numerics: test every output after its launch */
    void **hIn;                                 /* pinned input staging, sized at batch_max */
    char *hColl;                                /* data parallel: pinned staging of the gradients */
    NcclComm *nccl;                             /* ... or NCCL, which sums them on the GPU, */
    CUstream cst;                               /* ... on its own stream, to overlap the step */
    CUevent *ready, *done;                      /* ... per allreduce_start: its gradient is there,
                                                   and its sum is */
    bool comm_chosen;                           /* ... which of the two, decided at the first */
    size_t *coll_at;                            /* ... per allreduce_start node, its bytes' offset */
    bool has_ce[ENTRY_COUNT], ran[ENTRY_COUNT], no_graph[ENTRY_COUNT];
    GraphSlot graph[ENTRY_COUNT][GRAPH_SLOTS];
    int next_slot[ENTRY_COUNT];
    Arena arena;                                /* the description, kernel tables */
} CudaModel;

static void cu_fail(CudaModel *m, CUresult r, const char *call, const char *file, int line) {
    const char *name = "?", *desc = "?";
    if (cu.GetErrorName) cu.GetErrorName(r, &name);
    if (cu.GetErrorString) cu.GetErrorString(r, &desc);
    nnc_rt_fail(m->rt, NNC_STATUS_ARG, "CUDA error %d (%s: %s) at %s:%d: %s", (int)r, name, desc, file, line, call);
}

#define CU(call)                                                         \
    do {                                                                 \
        CUresult r_ = (call);                                            \
        if (r_ != CUDA_SUCCESS) {                                        \
            cu_fail(m, r_, #call, __FILE__, __LINE__);                   \
            return false;                                                \
        }                                                                \
    } while (0)

#define BLAS(call)                                                                                  \
    do {                                                                                            \
        cublasStatus_t s_ = (call);                                                                 \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                          \
            nnc_rt_fail(m->rt, NNC_STATUS_ARG, "cuBLAS error %d at %s:%d: %s", (int)s_, __FILE__, __LINE__, \
                        #call);                                                                     \
            return false;                                                                           \
        }                                                                                           \
    } while (0)

static size_t elem_bytes(const CudaModel *m, int node) {
    DType t = m->p->g->nodes[node].dtype;
    return t == DT_I32 ? 4 : DTYPE_IS_HALF(t) ? 2 : m->rb;
}

static cudaDataType cuda_type(DType t) { return t == DT_BF16 ? CUDA_R_16BF : t == DT_F16 ? CUDA_R_16F : CUDA_R_32F; }

static int64_t dim_at(int64_t d, int64_t B) { return d == DIM_BATCH ? B : d; }

/* Where node x's value lives: a device address, or a host pointer. */
static bool where(CudaModel *m, const Entry *e, int x, CUdeviceptr *d, char **h) {
    x = cuda_resolve(e, x);
    const Buffer *b = &e->buf[x];
    const int64_t at = b->offset * (int64_t)m->rb;
    *d = 0;
    *h = NULL;
    Gpu *g = DEV_IS_GPU(b->dev) ? &m->gpu[DEV_GPU_INDEX(b->dev)] : NULL;
    switch (b->kind) {   /* a GPU's range of the parameter and state blocks starts at its lo */
    case BUF_PARAM: *d = g->dBlock[NNC_BLOCK_PARAMS] + (CUdeviceptr)(at - g->lo[NNC_BLOCK_PARAMS]); return true;
    case BUF_STATE: *d = g->dBlock[NNC_BLOCK_STATE] + (CUdeviceptr)(at - g->lo[NNC_BLOCK_STATE]); return true;
    case BUF_ACT:
        if (g) *d = g->dBlock[NNC_BLOCK_ACT] + (CUdeviceptr)at;
        else *h = m->rt->host[NNC_BLOCK_HOST] + at;
        return true;
    case BUF_INPUT: *h = m->hIn[b->index]; return true;
    case BUF_NONE: case BUF_INLINE: case BUF_ALIAS: return false;
    }
    return false;
}

static bool on_device(const Entry *e, int x) {
    x = cuda_resolve(e, x);
    const Buffer *b = &e->buf[x];
    return b->kind == BUF_PARAM || b->kind == BUF_STATE || (b->kind == BUF_ACT && DEV_IS_GPU(b->dev)) ||
           b->kind == BUF_INLINE;
}

/* ---- issuing one entry's launches ---------------------------------------------------------- */

static bool issue_copy(CudaModel *m, const Entry *e, int dst, int src, int64_t B) {
    CUdeviceptr dd, ds;
    char *hd, *hs;
    if (!where(m, e, dst, &dd, &hd) || !where(m, e, src, &ds, &hs)) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "internal: copy of node %d into node %d has no buffer", src, dst);
        return false;
    }
    size_t bytes = (size_t)shape_numel(m->p->g->nodes[dst].shape, B) * elem_bytes(m, dst);
    const Buffer *bd = &e->buf[cuda_resolve(e, dst)], *bs = &e->buf[cuda_resolve(e, src)];
    if (hs && !hd) CU(cu.MemcpyHtoDAsync(dd, hs, bytes, m->cur->st));
    else if (!hs && hd) CU(cu.MemcpyDtoHAsync(hd, ds, bytes, m->cur->st));
    else if (!hs && !hd && bd->dev != bs->dev)   /* GPU to GPU: peer access when the GPUs have it */
        CU(cu.MemcpyPeerAsync(dd, m->gpu[DEV_GPU_INDEX(bd->dev)].ctx, ds, m->gpu[DEV_GPU_INDEX(bs->dev)].ctx, bytes,
                              m->cur->st));
    else if (!hs && !hd) CU(cu.MemcpyDtoDAsync(dd, ds, bytes, m->cur->st));
    else {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "internal: a host-to-host copy reached the CUDA backend");
        return false;
    }
    return true;
}

/* How this run sums gradients, the same in every process: NCCL when process 0 has it (and the
 * model is on one GPU), else the host's allreduce through pinned memory.  Process 0's choice
 * goes to the others over the host's broadcast; one that cannot follow fails the step. */
static bool choose_comm(CudaModel *m, const nnc_comm *c) {
    m->comm_chosen = true;
    const char *why = !c->device_sums ? "--dist-backend mpi" : m->ngpus > 1 ? "the model spans several GPUs" :
                      !c->bcast || !c->share ? "the host offers no broadcast" : nccl_unavailable();
    int use = why == NULL;
    if (c->bcast && c->bcast(c->ctx, &use, sizeof use)) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "data parallel: could not agree on NCCL with process 0");
        return false;
    }
    if (use && why) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "data parallel: process 0 sums gradients with NCCL, but process %d cannot: %s",
                    c->rank, why);
        return false;
    }
    char err[900];
    if (use && !(m->nccl = nccl_init(c, err, sizeof err))) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "data parallel: %s", err);
        return false;
    }
    if (use) {   /* NCCL's stream, and a pair of events per gradient to order it with the step's */
        const Graph *g = m->p->g;
        CU(cu.StreamCreate(&m->cst, CU_STREAM_NON_BLOCKING));
        m->ready = arena_alloc(&m->arena, (size_t)g->n * sizeof(CUevent));
        m->done = arena_alloc(&m->arena, (size_t)g->n * sizeof(CUevent));
        for (int i = 0; i < g->n; i++)
            if (g->nodes[i].op == OP_ALLREDUCE_START) {
                CU(cu.EventCreate(&m->ready[i], CU_EVENT_DISABLE_TIMING));
                CU(cu.EventCreate(&m->done[i], CU_EVENT_DISABLE_TIMING));
            }
    }
    if (c->rank == 0)
        fprintf(stderr, "nnc: data parallel over %d process%s: gradients summed %s%s\n", c->size, c->size == 1 ? "" : "es",
                use ? "by NCCL on the GPUs" : "through host memory by MPI (no NCCL: ", use ? "" : why);
    if (c->rank == 0 && !use) fputs(")\n", stderr);
    return true;
}

/* Data parallel (an allreduce's halves, passes/allreduce.c).  With NCCL the start sums the
 * gradient in place on NCCL's own stream once the step's stream has produced it, and the wait
 * makes the step's stream wait for the sum: the backward pass goes on meanwhile.  Else
 * the host's nnc_comm sums host memory, so a gradient goes through pinned staging -- down
 * before its start, up after its wait -- as PyTorch's gloo backend does with CUDA tensors.
 * Without a comm the gradient is already the whole batch's. */
static bool issue_collective(CudaModel *m, const Entry *e, const Launch *L, int64_t B) {
    const Node *r = &m->p->g->nodes[L->root];
    bool start = r->op == OP_ALLREDUCE_START;
    CUdeviceptr dx, dy;
    char *hx, *hy;
    if (!where(m, e, r->in[0], &dx, &hx) || !where(m, e, L->root, &dy, &hy) || hx || hy) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "internal: an allreduce of node %d outside device memory", r->in[0]);
        return false;
    }
    const int64_t count = shape_numel(r->shape, B);
    const size_t bytes = (size_t)count * m->rb;
    const nnc_comm *c = m->rt->comm;
    const char *name = r->name ? r->name : "a parameter";
    if (c && !m->comm_chosen && !choose_comm(m, c)) return false;
    if (!c || m->nccl) {   /* on the GPU: the value moves to the result's buffer, summed there */
        int s0 = start ? L->root : r->in[0];
        if (c && !start) CU(cu.StreamWaitEvent(m->cur->st, m->done[s0], 0));
        if (dy != dx) CU(cu.MemcpyDtoDAsync(dy, dx, bytes, m->cur->st));
        if (!c || !start) return true;
        CU(cu.EventRecord(m->ready[s0], m->cur->st));
        CU(cu.StreamWaitEvent(m->cst, m->ready[s0], 0));
        char err[600];
        if (!nccl_allreduce(m->nccl, (void *)dy, (size_t)count, m->f64 ? NNC_TYPE_F64 : NNC_TYPE_F32, c->share(c->ctx),
                            (void *)m->cst, err, sizeof err)) {
            nnc_rt_fail(m->rt, NNC_STATUS_ARG, "allreduce of the gradient of %s: %s", name, err);
            return false;
        }
        CU(cu.EventRecord(m->done[s0], m->cst));
        return true;
    }
    char *h = m->hColl + m->coll_at[start ? L->root : r->in[0]];
    int type = m->f64 ? NNC_TYPE_F64 : NNC_TYPE_F32, rc;
    if (start) {
        CU(cu.MemcpyDtoHAsync(h, dx, bytes, m->cur->st));
        CU(cu.StreamSynchronize(m->cur->st));
        rc = c->start(c->ctx, L->bucket, h, count, type, L->bucket_last);
    } else {
        rc = c->wait(c->ctx, L->bucket, h, count, type);
        if (!rc) CU(cu.MemcpyHtoDAsync(dy, h, bytes, m->cur->st));
    }
    if (rc) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "allreduce (%s) of the gradient of %s failed", start ? "start" : "wait", name);
        return false;
    }
    return true;
}

/* Row-major C[M,N] = alpha op(A) op(B) + beta C is column-major C^T = alpha op(B)^T op(A)^T +
 * beta C^T: swap the operands. */
static bool gemm_rm(CudaModel *m, bool ta, bool tb, int M, int N, int K, double alpha, CUdeviceptr pa, int lda,
                    CUdeviceptr pb, int ldb, double beta, CUdeviceptr pc, int ldc) {
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (m->f64) {
        BLAS(cu.Dgemm(m->cur->blas, ob, oa, N, M, K, &alpha, (const double *)pb, ldb, (const double *)pa, lda, &beta,
                      (double *)pc, ldc));
    } else {
        const float al = (float)alpha, be = (float)beta;
        BLAS(cu.Sgemm(m->cur->blas, ob, oa, N, M, K, &al, (const float *)pb, ldb, (const float *)pa, lda, &be,
                      (float *)pc, ldc));
    }
    return true;
}

/* A product with bf16/f16 inputs (both of one kind) and FP32 accumulation, C half or f32: what
 * torch.autocast's matmul runs; G > 1: strided batched (strides in elements). */
static bool gemm_rm_half(CudaModel *m, const Launch *L, int M, int N, int K, CUdeviceptr pa, int lda, long long sa,
                         CUdeviceptr pb, int ldb, long long sb, double beta, CUdeviceptr pc, long long sc, int G) {
    const Graph *g = m->p->g;
    cudaDataType tab = cuda_type(g->nodes[L->a].dtype), tc = cuda_type(g->nodes[L->root].dtype);
    if (tab != cuda_type(g->nodes[L->b].dtype)) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "internal error: a product of %s and %s", dtype_name(g->nodes[L->a].dtype),
                    dtype_name(g->nodes[L->b].dtype));
        return false;
    }
    cublasOperation_t oa = L->ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = L->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const float al = (float)L->alpha, be = (float)beta;
    if (G == 1)
        BLAS(cu.GemmEx(m->cur->blas, ob, oa, N, M, K, &al, (const void *)pb, tab, ldb, (const void *)pa, tab, lda, &be,
                       (void *)pc, tc, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
        BLAS(cu.GemmExB(m->cur->blas, ob, oa, N, M, K, &al, (const void *)pb, tab, ldb, sb, (const void *)pa, tab, lda, sa,
                        &be, (void *)pc, tc, N, sc, G, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return true;
}

/* G row-major products at once (strides in elements; 0: one matrix for all), as one strided
 * batched call on the swapped operands. */
static bool gemm_rm_batched(CudaModel *m, bool ta, bool tb, int M, int N, int K, double alpha, CUdeviceptr pa, int lda,
                            long long sa, CUdeviceptr pb, int ldb, long long sb, double beta, CUdeviceptr pc,
                            long long sc, int G) {
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (m->f64) {
        BLAS(cu.DgemmB(m->cur->blas, ob, oa, N, M, K, &alpha, (const double *)pb, ldb, sb, (const double *)pa, lda, sa, &beta,
                       (double *)pc, N, sc, G));
    } else {
        const float al = (float)alpha, be = (float)beta;
        BLAS(cu.SgemmB(m->cur->blas, ob, oa, N, M, K, &al, (const float *)pb, ldb, sb, (const float *)pa, lda, sa, &be,
                       (float *)pc, N, sc, G));
    }
    return true;
}

/* G products of launch L (G = 1: one), with half inputs through GemmEx, else S/Dgemm. */
static bool gemm_call(CudaModel *m, const Launch *L, int M, int N, int K, CUdeviceptr pa, int lda, long long sa,
                      CUdeviceptr pb, int ldb, long long sb, double beta, CUdeviceptr pc, long long sc, int G) {
    const Graph *g = m->p->g;
    if (DTYPE_IS_HALF(g->nodes[L->a].dtype) || DTYPE_IS_HALF(g->nodes[L->b].dtype))
        return gemm_rm_half(m, L, M, N, K, pa, lda, sa, pb, ldb, sb, beta, pc, sc, G);
    if (G == 1) return gemm_rm(m, L->ta, L->tb, M, N, K, L->alpha, pa, lda, pb, ldb, beta, pc, N);
    return gemm_rm_batched(m, L->ta, L->tb, M, N, K, L->alpha, pa, lda, sa, pb, ldb, sb, beta, pc, sc, G);
}

/* With a folded SGD update (fuse.c), C starts as the parameter and the product adds to it.
 * A batched product (gemm_geom) is one call when it is one product, a strided batched call,
 * or -- a sum that is not one product -- a call per matrix adding into C. */
static bool issue_gemm(CudaModel *m, const Entry *e, const Launch *L, int64_t B) {
    const Graph *g = m->p->g;
    GemmGeom q = gemm_geom(g, L);
    int M = (int)dim_at(q.m, B), N = (int)dim_at(q.n, B), K = (int)dim_at(q.k, B);
    int lda = (int)dim_at(q.lda, B), ldb = (int)dim_at(q.ldb, B);
    int64_t G = gemm_count(&q, B);
    CUdeviceptr pa, pb, pc, pleaf;
    char *h;
    int cnode = L->fold >= 0 ? L->fold : L->root;
    where(m, e, L->a, &pa, &h);
    where(m, e, L->b, &pb, &h);
    where(m, e, cnode, &pc, &h);
    if (L->fold >= 0) {
        where(m, e, g->nodes[L->fold].in[0], &pleaf, &h);
        size_t bytes = (size_t)shape_numel(g->nodes[L->fold].shape, B) * m->rb;
        if (pleaf != pc) CU(cu.MemcpyDtoDAsync(pc, pleaf, bytes, m->cur->st));
    }
    double beta = L->fold >= 0 ? 1 : 0;
    long long sa = q.a_shared ? 0 : (long long)M * K, sb = q.b_shared ? 0 : (long long)K * N;
    if (q.nlead == 0) return gemm_call(m, L, M, N, K, pa, lda, 0, pb, ldb, 0, beta, pc, 0, 1);
    if (q.rows_merged) return gemm_call(m, L, (int)(G * M), N, K, pa, lda, 0, pb, ldb, 0, beta, pc, 0, 1);
    if (q.k_merged) return gemm_call(m, L, M, N, (int)(G * K), pa, lda, 0, pb, ldb, 0, beta, pc, 0, 1);
    if (!q.sum) return gemm_call(m, L, M, N, K, pa, lda, sa, pb, ldb, sb, beta, pc, (long long)M * N, (int)G);
    size_t eab = elem_bytes(m, L->a);
    for (int64_t i = 0; i < G; i++)
        if (!gemm_call(m, L, M, N, K, pa + (CUdeviceptr)(i * sa) * eab, lda, 0, pb + (CUdeviceptr)(i * sb) * eab, ldb, 0,
                       i > 0 ? 1 : beta, pc, 0, 1))
            return false;
    return true;
}

/* A helper plan's pointer (helpers.h) on the GPU the launch runs on. */
static bool helper_ptr(CudaModel *m, const Entry *e, HelperPtr p, CUdeviceptr *out) {
    char *h = NULL;
    switch (p.kind) {
    case HPTR_NODE:
        if (where(m, e, p.node, out, &h) && !h) return true;
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "internal: a helper's operand (node %d) is not in device memory", p.node);
        return false;
    case HPTR_SCRATCH: *out = m->cur->dBlock[NNC_BLOCK_ACT] + (CUdeviceptr)(p.off * (int64_t)m->rb); return true;
    case HPTR_STEP: *out = m->cur->dStep; return true;
    case HPTR_ERR: *out = m->cur->dErr; return true;
    }
    return false;
}

/* One of helpers.c's kernels over n elements (a grid-stride loop: the grid is capped), with
 * its pointers, n, the rest and the geometry when it takes it, as helpers.def declares. */
static bool issue_helper_call(CudaModel *m, const Entry *e, const HelperPlan *hp, const HelperStep *st,
                              const int64_t *v) {
    /* each argument's value, typed as the kernel's parameter, at a place args[] points to */
    union {
        CUdeviceptr p;
        int64_t i64;
        int i32;
        double f64;
    } val[NNC_COUNTOF(st->call.ptr) + 1 + NNC_COUNTOF(st->call.arg)];
    int64_t geom[SPATIAL_GEOM_ARGS];
    void *args[NNC_COUNTOF(val) + SPATIAL_GEOM_ARGS];
    int k = 0;
    for (int j = 0; j < st->call.nptr; j++, k++)
        if (!helper_ptr(m, e, st->call.ptr[j], &val[k].p)) return false;
    const int64_t n = val[k++].i64 = affine_eval(st->call.n, v);
    for (int j = 0; j < st->call.narg; j++, k++) {
        const HelperArg *a = &st->call.arg[j];
        if (a->kind == HARG_PTR && !helper_ptr(m, e, a->p, &val[k].p)) return false;
        if (a->kind == HARG_I64) val[k].i64 = affine_eval(a->v, v);
        if (a->kind == HARG_INT) val[k].i32 = (int)affine_eval(a->v, v);
        if (a->kind == HARG_F64) val[k].f64 = a->f;
    }
    for (int j = 0; j < k; j++) args[j] = &val[j];
    spatial_geom_args(&hp->q, geom);
    for (int j = 0; helper_info[st->call.h].geom && j < SPATIAL_GEOM_ARGS; j++) args[k++] = &geom[j];
    int64_t blocks = (n + HELPER_THREADS - 1) / HELPER_THREADS;
    unsigned grid = blocks < 1 ? 1 : blocks > 65535 ? 65535 : (unsigned)blocks;
    CU(cu.LaunchKernel(m->cur->helper[st->call.h], grid, 1, 1, HELPER_THREADS, 1, 1, 0, m->cur->st, args, NULL));
    return true;
}

/* G row-major products, group g's matrices g * s* reals after group 0's. */
static bool issue_helper_gemm(CudaModel *m, const Entry *e, const HelperStep *st, const int64_t *v) {
    CUdeviceptr a, b, c;
    if (!helper_ptr(m, e, st->gemm.a, &a) || !helper_ptr(m, e, st->gemm.b, &b) || !helper_ptr(m, e, st->gemm.c, &c))
        return false;
    const int64_t rb = (int64_t)m->rb;
    const CUdeviceptr sa = (CUdeviceptr)(affine_eval(st->gemm.sa, v) * rb);
    const CUdeviceptr sb = (CUdeviceptr)(affine_eval(st->gemm.sb, v) * rb);
    const CUdeviceptr sc = (CUdeviceptr)(affine_eval(st->gemm.sc, v) * rb);
    const int M = (int)affine_eval(st->gemm.M, v), N = (int)affine_eval(st->gemm.N, v);
    const int K = (int)affine_eval(st->gemm.K, v), lda = (int)affine_eval(st->gemm.lda, v);
    const int ldb = (int)affine_eval(st->gemm.ldb, v), ldc = (int)affine_eval(st->gemm.ldc, v);
    const double beta = st->gemm.beta == HBETA_1 || (st->gemm.beta == HBETA_CHUNKS && v[AFF_N0] > 0) ? 1 : 0;
    for (int64_t g = 0; g < st->gemm.G; g++)
        if (!gemm_rm(m, st->gemm.ta, st->gemm.tb, M, N, K, 1, a + (CUdeviceptr)g * sa, lda, b + (CUdeviceptr)g * sb,
                     ldb, beta, c + (CUdeviceptr)g * sc, ldc))
            return false;
    return true;
}

/* Steps [from, to) of a helper launch's plan at the values v of (1, B, n0, S, SP). */
static bool issue_helper_steps(CudaModel *m, const Entry *e, const HelperPlan *hp, int from, int to, int64_t *v) {
    for (int i = from; i < to; i++) {
        const HelperStep *st = &hp->step[i];
        CUdeviceptr p;
        switch (st->kind) {
        case HS_CALL:
            if (!issue_helper_call(m, e, hp, st, v)) return false;
            break;
        case HS_GEMM:
            if (!issue_helper_gemm(m, e, st, v)) return false;
            break;
        case HS_ZERO:
            if (st->zero.guarded && affine_eval(st->zero.guard, v) != 0) break;
            if (!helper_ptr(m, e, st->zero.p, &p)) return false;
            CU(cu.MemsetD32Async(p, 0, (size_t)affine_eval(st->zero.count, v) * m->rb / 4, m->cur->st));
            break;
        case HS_DNNL: break; /* the CPU's */
        case HS_CHUNKS: {
            const int64_t rows = affine_eval(st->chunks.rows, v), c = st->chunks.chunk;
            for (v[AFF_N0] = 0; v[AFF_N0] < rows; v[AFF_N0] += c) {
                v[AFF_S] = rows - v[AFF_N0] < c ? rows - v[AFF_N0] : c;
                v[AFF_SP] = v[AFF_S] * st->chunks.P;
                if (!issue_helper_steps(m, e, hp, i + 1, i + 1 + st->chunks.nbody, v)) return false;
            }
            i += st->chunks.nbody;
            break;
        }
        }
    }
    return true;
}

/* An L_HELPER launch: its plan (helper_plan.c), issued step by step at batch B. */
static bool issue_helper_launch(CudaModel *m, const Entry *e, const Launch *L, int64_t B) {
    HelperPlan hp = helper_plan(m->p, e, L);
    int64_t v[AFF_NVARS] = {[AFF_1] = 1, [AFF_B] = B};
    return issue_helper_steps(m, e, &hp, 0, hp.nsteps, v);
}

static bool issue_kernel(CudaModel *m, const Entry *e, int k, int64_t B) {
    CudaDims d = cuda_launch_dims(m->p, e, &e->launches[k], B);
    long long Bv = B;
    /* kernels address parameters and state by their offset in the whole block (P + offset); a
     * GPU holds its range of it, from lo */
    Gpu *g = m->cur;
    CUdeviceptr P = g->dBlock[NNC_BLOCK_PARAMS] - (CUdeviceptr)g->lo[NNC_BLOCK_PARAMS];
    CUdeviceptr S = g->dBlock[NNC_BLOCK_STATE] - (CUdeviceptr)g->lo[NNC_BLOCK_STATE];
    void *args[] = {&P, &S, &g->dBlock[NNC_BLOCK_ACT], &Bv, &g->dStep, &g->dErr};
    CU(cu.LaunchKernel(m->cur->fn[e->kind][k], d.grid, 1, 1, d.block, 1, 1, 0, m->cur->st, args, NULL));
    return true;
}

/* --check-numerics: after launch k, the first NaN or Inf in each of its floating outputs stops
 * the step with the op, its model line and the step, as the CPU target reports it. */
static bool check_launch(CudaModel *m, const Entry *e, int k, int64_t B) {
    const Launch *L = &e->launches[k];
    const Graph *g = m->p->g;
    if (L->kind == L_COPY) return true;
    for (int j = 0; j < L->nouts + (L->kind == L_GEMM && L->nouts == 0); j++) {
        int o = L->nouts ? L->outs[j] : L->root;
        CUdeviceptr d;
        char *h;
        if (g->nodes[o].dtype != DT_F32 || !where(m, e, o, &d, &h) || h) continue;
        long long n = shape_numel(g->nodes[o].shape, B);
        void *args[] = {&d, &n, &m->cur->dFirst};
        unsigned grid = (unsigned)((n + 255) / 256 > 4096 ? 4096 : (n + 255) / 256);
        CU(cu.MemsetD32Async(m->cur->dFirst, 0xffffffffu, 2, m->cur->st));
        CU(cu.LaunchKernel(m->cur->check_fn, grid ? grid : 1, 1, 1, 256, 1, 1, 0, m->cur->st, args, NULL));
        CU(cu.MemcpyDtoHAsync(m->cur->hFirst, m->cur->dFirst, sizeof *m->cur->hFirst, m->cur->st));
        CU(cu.StreamSynchronize(m->cur->st));
        unsigned long long i = *m->cur->hFirst;
        if (i == ~0ull) continue;
        double v = 0;
        CU(cu.MemcpyDtoHAsync(m->cur->hFirst, d + i * m->rb, m->rb, m->cur->st));
        CU(cu.StreamSynchronize(m->cur->st));
        v = m->f64 ? *(double *)m->cur->hFirst : *(float *)m->cur->hFirst;
        Str what = {0};
        launch_describe(&what, m->p, e, k, o);
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, NNC_RT_NONFINITE_FMT, v != v ? "NaN" : "Inf", (long long)i, what.buf,
                    (long long)m->rt->step);
        str_free(&what);
        return false;
    }
    return true;
}

/* Makes GPU g the one work is issued to.  Model parallel runs the schedule in order, so what
 * the previous GPU queued is finished first (a stream of one context cannot wait for another's
 * work in a captured graph either, and the GPUs take turns anyway in a model split by layers). */
static bool use_gpu(CudaModel *m, Gpu *g) {
    if (g == m->cur) return true;
    CU(cu.StreamSynchronize(m->cur->st));
    m->cur = g;
    CU(cu.CtxSetCurrent(g->ctx));
    return true;
}

/* The GPU a launch runs on: its result's (a copy to the host: its source's). */
static Gpu *launch_gpu(CudaModel *m, const Launch *L) {
    const Graph *g = m->p->g;
    const Node *r = &g->nodes[L->root];
    Device d = r->dev;
    if (L->kind == L_COPY && !DEV_IS_GPU(d)) d = g->nodes[r->in[0]].dev;
    return DEV_IS_GPU(d) ? &m->gpu[DEV_GPU_INDEX(d)] : m->cur;
}

static bool issue_entry(CudaModel *m, const Entry *e, int64_t B) {
    for (int i = 0; i < NNC_MAX_GPUS; i++) {   /* each GPU's step counter and error flag */
        Gpu *g = &m->gpu[i];
        if (!g->used || !use_gpu(m, g)) continue;
        if (m->has_ce[e->kind]) CU(cu.MemsetD32Async(g->dErr, 0, 4, g->st));
        if (e->kind == ENTRY_TRAIN) {
            void *args[] = {&g->dStep};
            CU(cu.LaunchKernel(g->step_inc, 1, 1, 1, 32, 1, 1, 0, g->st, args, NULL));
        }
    }
    for (int k = 0; k < e->nlaunch; k++) {
        const Launch *L = &e->launches[k];
        const Node *r = &m->p->g->nodes[L->root];
        if (!use_gpu(m, launch_gpu(m, L))) return false;
        bool ok = true;
        switch (L->kind) {
        case L_EW: case L_REDUCE: case L_ROW: ok = issue_kernel(m, e, k, B); break;
        case L_GEMM: ok = issue_gemm(m, e, L, B); break;
        case L_HELPER: ok = issue_helper_launch(m, e, L, B); break;
        case L_COLLECTIVE: ok = issue_collective(m, e, L, B); break;
        case L_COPY: ok = issue_copy(m, e, L->root, r->in[0], B); break;
        case L_ASSIGN: ok = issue_copy(m, e, r->in[0], r->in[1], B); break;
        }
        if (!ok || (m->check_numerics && !check_launch(m, e, k, B))) return false;
    }
    for (int i = 0; m->has_ce[e->kind] && i < NNC_MAX_GPUS; i++) {
        Gpu *g = &m->gpu[i];
        if (!g->used || !use_gpu(m, g)) continue;
        CU(cu.MemcpyDtoHAsync(g->hErr, g->dErr, 4 * sizeof(int), g->st));
    }
    return true;
}

/* Captures the entry's launches as a graph for batch B; false (stream usable) on failure. */
static bool capture(CudaModel *m, const Entry *e, int64_t B, CUgraphExec *exec) {
    CUgraph graph = NULL;
    if (cu.StreamBeginCapture(m->cur->st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) return false;
    bool ok = issue_entry(m, e, B);
    CUresult rc = cu.StreamEndCapture(m->cur->st, &graph);
    ok = ok && rc == CUDA_SUCCESS && graph && cu.GraphInstantiate(exec, graph, 0) == CUDA_SUCCESS;
    if (graph) cu.GraphDestroy(graph);
    if (!ok) {
        m->rt->status = 0;
        m->rt->msg[0] = 0;
    }
    return ok;
}

static bool launch_entry(CudaModel *m, const Entry *e, int64_t B) {
    int k = e->kind;
    for (int s = 0; s < GRAPH_SLOTS; s++)
        if (m->graph[k][s].exec && m->graph[k][s].B == B) {
            CU(cu.GraphLaunch(m->graph[k][s].exec, m->cur->st));
            return true;
        }
    if (!m->ran[k] || m->no_graph[k] || m->check_numerics || getenv("NNC_CUDA_NO_GRAPHS")) {
        m->ran[k] = true;
        return issue_entry(m, e, B);
    }
    CUgraphExec exec = NULL;
    if (!capture(m, e, B, &exec)) {
        m->no_graph[k] = true;
        fprintf(stderr, "nnc: note: CUDA graph capture failed for %s; launching directly\n", e->name);
        return issue_entry(m, e, B);
    }
    GraphSlot *slot = &m->graph[k][m->next_slot[k]];
    m->next_slot[k] = (m->next_slot[k] + 1) % GRAPH_SLOTS;
    if (slot->exec) cu.GraphExecDestroy(slot->exec);
    *slot = (GraphSlot){B, exec};
    CU(cu.GraphLaunch(exec, m->cur->st));
    return true;
}

/* ---- the device operations (nnc_device_ops) -------------------------------------------------- */

/* Every host<->device copy goes on the compute stream, from pinned memory, then the host waits
 * for it.  A synchronous cuMemcpyHtoD would run on the legacy stream, which a
 * CU_STREAM_NON_BLOCKING stream does not wait for: the first kernel could read parameters (or
 * Adam's step) before they landed.  Ordering on one stream makes "copied, then used" hold by
 * construction. */
static bool copy_block(CudaModel *m, int block, int64_t offset, void *host, size_t bytes, int direction) {
    for (int i = 0; i < NNC_MAX_GPUS; i++) {   /* each GPU's part of [offset, offset + bytes) */
        Gpu *g = &m->gpu[i];
        int64_t lo = offset > g->lo[block] ? offset : g->lo[block];
        int64_t hi = (int64_t)(offset + (int64_t)bytes), ghi = g->lo[block] + (int64_t)g->bytes[block];
        if (hi > ghi) hi = ghi;
        if (!g->used || hi <= lo) continue;
        CU(cu.CtxSetCurrent(g->ctx));
        CUdeviceptr d = g->dBlock[block] + (CUdeviceptr)(lo - g->lo[block]);
        char *h = (char *)host + (lo - offset);
        if (direction == NNC_SYNC_TO_HOST) CU(cu.MemcpyDtoHAsync(h, d, (size_t)(hi - lo), g->st));
        else CU(cu.MemcpyHtoDAsync(d, h, (size_t)(hi - lo), g->st));
        CU(cu.StreamSynchronize(g->st));
    }
    CU(cu.CtxSetCurrent(m->cur->ctx));
    return true;
}

static int cuda_copy(nnc_rt *rt, int block, int64_t offset, void *host, size_t bytes, int direction) {
    return copy_block(rt->dev, block, offset, host, bytes, direction) ? 0 : rt->status;
}

/* The step lives in device memory too, so a captured graph replays with the current step. */
static bool upload_step(CudaModel *m) {
    for (int i = 0; i < NNC_MAX_GPUS; i++) {   /* every GPU keeps its own copy */
        Gpu *g = &m->gpu[i];
        if (!g->used) continue;
        CU(cu.CtxSetCurrent(g->ctx));
        g->hStep[0] = m->rt->step;
        g->hStep[1] = (long long)m->rt->seed;   /* dropout masks read it next to the step */
        CU(cu.MemcpyHtoDAsync(g->dStep, g->hStep, 2 * sizeof *g->hStep, g->st));
        CU(cu.StreamSynchronize(g->st));
    }
    CU(cu.CtxSetCurrent(m->cur->ctx));
    return true;
}

static int cuda_set_step(nnc_rt *rt) { return upload_step(rt->dev) ? 0 : rt->status; }

static size_t nonzero(size_t b) { return b ? b : 64; }

/* Pinned: copies from and to it are asynchronous on the stream, and a graph can capture them. */
static void *cuda_host_alloc(nnc_rt *rt, size_t bytes) {
    CudaModel *m = rt->dev;
    void *p = NULL;
    if (!m->cur || cu.CtxSetCurrent(m->cur->ctx) != CUDA_SUCCESS || cu.MemAllocHost(&p, nonzero(bytes)) != CUDA_SUCCESS)
        return NULL;
    memset(p, 0, nonzero(bytes));
    return p;
}

/* Only once every GPU's stream is idle: no copy may still read or write the memory. */
static void cuda_host_free(nnc_rt *rt, void *p) {
    CudaModel *m = rt->dev;
    for (int i = 0; i < NNC_MAX_GPUS; i++)
        if (m->gpu[i].ctx && m->gpu[i].st && cu.CtxSetCurrent(m->gpu[i].ctx) == CUDA_SUCCESS)
            cu.StreamSynchronize(m->gpu[i].st);
    if (m->cur) cu.CtxSetCurrent(m->cur->ctx);
    cu.MemFreeHost(p);
}

/* The batch into the pinned staging the (captured) input copies read. */
static void stage_inputs(CudaModel *m, int entry, const void *const *in, int64_t B) {
    const nnc_model_desc *d = m->desc;
    for (int i = 0; i < d->abi.ninputs; i++)
        if (d->entry[entry].reads[i]) memcpy(m->hIn[i], in[i], nnc_rt_bytes(d, &d->abi.inputs[i], B));
}

/* The runtime has checked the batch and the inputs and advanced the step. */
static int cuda_run(nnc_rt *rt, int entry, const void *const *in, int64_t B) {
    CudaModel *m = rt->dev;
    if (cu.CtxSetCurrent(m->cur->ctx) != CUDA_SUCCESS) return nnc_rt_fail(rt, NNC_STATUS_ARG, "cannot make the CUDA context current");
    stage_inputs(m, entry, in, B);
    bool ok = launch_entry(m, &m->p->entry[entry], B);
    for (int i = 0; i < NNC_MAX_GPUS; i++) {
        Gpu *g = &m->gpu[i];
        if (!g->used) continue;
        CUresult rc = cu.CtxSetCurrent(g->ctx);
        if (rc == CUDA_SUCCESS) rc = cu.StreamSynchronize(g->st);
        if (ok && rc != CUDA_SUCCESS) {
            cu_fail(m, rc, "cuStreamSynchronize(stream) after the step", __FILE__, __LINE__);
            ok = false;
        }
    }
    cu.CtxSetCurrent(m->cur->ctx);
    if (!ok) return rt->status ? rt->status : NNC_STATUS_ARG;
    for (int i = 0; m->has_ce[entry] && i < NNC_MAX_GPUS; i++) {
        const int *err = m->gpu[i].hErr;   /* 1: a cross_entropy label, 2: an embedding index */
        if (m->gpu[i].used && err[0])
            return nnc_rt_fail(rt, NNC_STATUS_CHECK, err[0] == 2 ? NNC_RT_INDEX_FMT : NNC_RT_LABEL_FMT, err[2],
                               (long long)err[1], (long long)err[3]);
    }
    return 0;
}

/* Everything the device allocated, then the description (in the arena) with it. */
static void cuda_close(nnc_rt *rt) {
    CudaModel *m = rt->dev;
    if (!m) return;
    for (int i = 0; i < NNC_MAX_GPUS; i++)   /* no work may still use what is freed below */
        if (m->gpu[i].ctx && m->gpu[i].st && cu.CtxSetCurrent(m->gpu[i].ctx) == CUDA_SUCCESS)
            cu.StreamSynchronize(m->gpu[i].st);
    if (m->cur && m->cur->ctx) cu.CtxSetCurrent(m->cur->ctx);
    for (int k = 0; k < ENTRY_COUNT; k++)
        for (int s = 0; s < GRAPH_SLOTS; s++)
            if (m->graph[k][s].exec) cu.GraphExecDestroy(m->graph[k][s].exec);
    for (int i = 0; m->hIn && i < m->desc->abi.ninputs; i++)
        if (m->hIn[i]) cu.MemFreeHost(m->hIn[i]);
    if (m->hColl) cu.MemFreeHost(m->hColl);
    if (m->cst) cu.StreamSynchronize(m->cst);
    nccl_free(m->nccl);
    for (int i = 0; m->ready && i < m->p->g->n; i++) {
        if (m->ready[i]) cu.EventDestroy(m->ready[i]);
        if (m->done[i]) cu.EventDestroy(m->done[i]);
    }
    if (m->cst) cu.StreamDestroy(m->cst);
    for (int i = 0; i < NNC_MAX_GPUS; i++) {
        Gpu *g = &m->gpu[i];
        if (!g->ctx) continue;
        cu.CtxSetCurrent(g->ctx);
        if (g->blas) cu.BlasDestroy(g->blas);
        CUdeviceptr dev[] = {g->dBlock[0], g->dBlock[1], g->dBlock[2], g->dBlock[3], g->dStep, g->dErr, g->dWork, g->dFirst};
        for (size_t j = 0; j < NNC_COUNTOF(dev); j++)
            if (dev[j]) cu.MemFree(dev[j]);
        void *pinned[] = {g->hErr, g->hStep, g->hFirst};
        for (size_t j = 0; j < NNC_COUNTOF(pinned); j++)
            if (pinned[j]) cu.MemFreeHost(pinned[j]);
        if (g->mod) cu.ModuleUnload(g->mod);
        if (g->st) cu.StreamDestroy(g->st);
        cu.PrimaryCtxRelease(g->dev);
    }
    arena_free(&m->arena);
    free(m);
    rt->dev = NULL;
}

/* Parameters, state and activations are device memory; the host block and the mirrors are the
 * runtime's, in pinned memory. */
static const nnc_device_ops cuda_device = {
    .name = "cuda",
    .device_blocks = 1u << NNC_BLOCK_PARAMS | 1u << NNC_BLOCK_STATE | 1u << NNC_BLOCK_ACT,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .copy = cuda_copy,
    .set_step = cuda_set_step,
    .run = cuda_run,
    .close = cuda_close,
};

/* nnc_model_abi.create: a CUDA model is created by the backend's load(), with its device. */
static void *cuda_create(void *mem) {
    (void)mem;
    return NULL;
}

/* ---- load ----------------------------------------------------------------------------------- */

/* Every kernel, GEMM and assignment must read and write device memory: a value the user kept
 * on the host with to(x, cpu) would need host code, which this backend does not generate. */
static bool check_placement(const Program *p, char *err, size_t n) {
    for (int k = 0; k < ENTRY_COUNT; k++) {
        const Entry *e = &p->entry[k];
        for (int i = 0; i < e->nlaunch; i++) {
            const Launch *L = &e->launches[i];
            if (L->kind == L_COPY) continue;
            int root = L->kind == L_GEMM && L->fold >= 0 ? L->fold : L->root;
            bool ok = on_device(e, root) || L->kind == L_ASSIGN;
            /* a GEMM reads its operands a and b; its ins[] may name a transpose folded into the
             * product (BUF_NONE), which has no memory of its own */
            if (L->kind == L_GEMM) ok &= on_device(e, L->a) && on_device(e, L->b);
            else
                for (int j = 0; j < L->nins; j++) ok &= on_device(e, L->ins[j]);
            for (int j = 0; j < L->nouts; j++) ok &= on_device(e, L->outs[j]);
            if (!ok) {
                const SrcLoc *loc = &p->g->nodes[L->root].loc;
                snprintf(n ? err : NULL, n, "%s:%d: the CUDA target runs every computation on the device, but this %s "
                         "(in %s) reads or writes a value placed on the host; remove its to(..., cpu)",
                         p->diag && p->diag->file ? p->diag->file : "model", loc->line,
                         op_info[p->g->nodes[L->root].op].name, e->name);
                return false;
            }
        }
    }
    return true;
}

/* The cubin for this source and device: a verified cache entry (codegen/cache.c checks the
 * directory, the entry's owner and its checksum before cuModuleLoadData sees it), or
 * compiled and published into the cache. */
static char *get_cubin(const Program *p, const BuildOpts *o, const char *src, const char *arch, LoadedModel *lm,
                       char *err, size_t n) {
    static const char flags[] = "--std=c++17 -default-device cubin v2";
    int ver = cuda_nvrtc_version();
    uint64_t h = hash_fnv1a(src, strlen(src), HASH_FNV_INIT);
    h = hash_fnv1a(arch, strlen(arch), h);
    h = hash_fnv1a(&ver, sizeof ver, h);
    h = hash_fnv1a(flags, sizeof flags, h);
    const char *mn = model_c_name(p);
    Cache cache = {.dirfd = -1};
    Str name = {0}, cu = {0};
    str_printf(&name, "%016llx-%.64s.cubin", (unsigned long long)h, mn);   /* the hash first */
    str_printf(&cu, "%s.cu", name.buf);
    char *bin = NULL;
    size_t len = 0;
    if (o->cache_dir && cache_open(&cache, o->cache_dir, err, n) && !cache.temporary &&
        cache_get(&cache, name.buf, (void **)&bin, &len) && len > 0)
        lm->cache_hit = true;
    else {
        free(bin);
        char label[300];
        snprintf(label, sizeof label, "%s.cu", mn);
        bin = cuda_nvrtc_compile(src, label, arch, o->f64, &len, err, n);
        if (bin && cache.dirfd >= 0 && !cache.temporary) {
            cache_put(&cache, cu.buf, src, strlen(src), 0600);   /* for reading; the cache works without it */
            if (!cache_put(&cache, name.buf, bin, len, 0600))
                fprintf(stderr, "nnc: warning: %s: cannot write to the cache (%s); continuing without it\n", cache.dir,
                        strerror(errno));
        }
    }
    if (bin && cache.dirfd >= 0 && !cache.temporary) {
        char *path = cache_path(&cache, name.buf);
        if (strlen(path) < sizeof lm->so_path) snprintf(lm->so_path, sizeof lm->so_path, "%s", path);
        free(path);
    }
    cache_close(&cache);
    str_free(&name);
    str_free(&cu);
    return bin;
}

static bool load_module(CudaModel *m, const char *cubin) {
    CU(cu.ModuleLoadData(&m->cur->mod, cubin));
    CU(cu.ModuleGetFunction(&m->cur->step_inc, m->cur->mod, "nnc_step_inc"));
    if (m->check_numerics) CU(cu.ModuleGetFunction(&m->cur->check_fn, m->cur->mod, "nnc_check_finite"));
    if (program_has_helpers(m->p))
        for (int h = 0; h < HP_COUNT; h++)
            CU(cu.ModuleGetFunction(&m->cur->helper[h], m->cur->mod, helper_info[h].name));
    for (int k = 0; k < ENTRY_COUNT; k++) {
        const Entry *e = &m->p->entry[k];
        m->cur->fn[k] = arena_alloc(&m->arena, (size_t)(e->nlaunch + 1) * sizeof(CUfunction));
        for (int i = 0; i < e->nlaunch; i++) {
            const Launch *L = &e->launches[i];
            /* cross_entropy's labels and embedding's indices are checked on the device */
            m->has_ce[k] |= op_has(m->p->g->nodes[L->root].op, OPF_MAY_FAIL);
            m->no_graph[k] |= L->kind == L_COLLECTIVE;   /* the host takes part: no CUDA graph */
            if (!cuda_launch_is_kernel(L)) continue;
            char name[256];
            cuda_kernel_name(name, sizeof name, m->p, e, i);
            CU(cu.ModuleGetFunction(&m->cur->fn[k][i], m->cur->mod, name));
        }
    }
    return true;
}

/* GPU k's device memory: its ranges of the parameter and state blocks and its activation block
 * (plan.c), the step, the error flag, cuBLAS's workspace. */
static bool alloc_gpu(CudaModel *m, int k) {
    const Program *p = m->p;
    Gpu *g = &m->gpu[k];
    Device d = DEV_GPU(k);
    int64_t lo[3] = {p->param_lo[d], p->state_lo[d], program_act_base(p, d)};
    int64_t hi[3] = {p->param_hi[d], p->state_hi[d], lo[2] + program_act_peak(p, d)};
    for (int b = 0; b < 3; b++) {
        g->lo[b] = lo[b] * (int64_t)m->rb;
        g->bytes[b] = (size_t)(hi[b] - lo[b]) * m->rb;
        CU(cu.MemAlloc(&g->dBlock[b], nonzero(g->bytes[b])));
    }
    CU(cu.MemAlloc(&g->dStep, 64));
    CU(cu.MemAlloc(&g->dErr, 64));
    CU(cu.MemAlloc(&g->dWork, BLAS_WORKSPACE));
    CU(cu.MemAlloc(&g->dFirst, 64));
    CU(cu.MemAllocHost((void **)&g->hFirst, 64));
    /* a fixed workspace: cuBLAS then allocates nothing while a graph is being captured */
    BLAS(cu.BlasSetWorkspace(g->blas, (void *)g->dWork, BLAS_WORKSPACE));
    CU(cu.MemAllocHost((void **)&g->hStep, 2 * sizeof *g->hStep));
    CU(cu.MemAllocHost((void **)&g->hErr, 64));
    memset(g->hErr, 0, 64);
    return true;
}

/* Pinned staging for the inputs and (data parallel) the gradients (the host blocks come from
 * the runtime, nnc_rt_alloc). */
static bool alloc_staging(CudaModel *m) {
    const nnc_model_desc *d = m->desc;
    size_t coll = 0;   /* every allreduce start's gradient, side by side */
    m->coll_at = arena_alloc(&m->arena, (size_t)m->p->g->n * sizeof(size_t));
    for (int i = 0; i < m->p->g->n; i++)
        if (m->p->g->nodes[i].op == OP_ALLREDUCE_START) {
            m->coll_at[i] = coll;
            coll += (size_t)shape_numel(m->p->g->nodes[i].shape, m->p->g->batch_max) * m->rb;
        }
    if (coll) CU(cu.MemAllocHost((void **)&m->hColl, coll));
    m->hIn = arena_alloc(&m->arena, (size_t)(d->abi.ninputs + 1) * sizeof(void *));
    for (int i = 0; i < d->abi.ninputs; i++)
        CU(cu.MemAllocHost(&m->hIn[i], nonzero(nnc_rt_bytes(d, &d->abi.inputs[i], d->abi.batch_max))));
    return true;
}

/* Copies between the GPUs a model uses go directly where the hardware allows (peer access);
 * elsewhere cuMemcpyPeerAsync goes through the host. */
static bool enable_peers(CudaModel *m) {
    for (int i = 0; i < NNC_MAX_GPUS; i++)
        for (int j = 0; j < NNC_MAX_GPUS; j++) {
            Gpu *a = &m->gpu[i], *b = &m->gpu[j];
            int can = 0;
            if (i == j || !a->used || !b->used || a->dev == b->dev) continue;
            CU(cu.DeviceCanAccessPeer(&can, a->dev, b->dev));
            if (!can) continue;
            CU(cu.CtxSetCurrent(a->ctx));
            CUresult r = cu.CtxEnablePeerAccess(b->ctx, 0);
            if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) CU(r);
        }
    return true;
}

/* m->cur: physical GPU `ordinal` (modulo the GPUs there are), its context, stream and cuBLAS. */
static bool open_device(CudaModel *m, int ordinal, char *arch, size_t archlen) {
    int major = 0, minor = 0, count = 0;
    CU(cu.DeviceGetCount(&count));
    CU(cu.DeviceGet(&m->cur->dev, count > 0 ? ordinal % count : 0));
    CU(cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, m->cur->dev));
    CU(cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, m->cur->dev));
    snprintf(arch, archlen, "sm_%d%d", major, minor);
    CU(cu.PrimaryCtxRetain(&m->cur->ctx, m->cur->dev));
    CU(cu.CtxSetCurrent(m->cur->ctx));
    CU(cu.StreamCreate(&m->cur->st, CU_STREAM_NON_BLOCKING));
    BLAS(cu.BlasCreate(&m->cur->blas));
    BLAS(cu.BlasSetStream(m->cur->blas, (cudaStream_t)m->cur->st));
    BLAS(cu.BlasSetMathMode(m->cur->blas, m->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    return true;
}

/* The instance, before any device work: its description, and the runtime's instance that every
 * later failure reports into. */
static CudaModel *cuda_model_new(const Program *p, const BuildOpts *o) {
    CudaModel *m = xcalloc(1, sizeof *m);
    m->p = p;
    m->f64 = o->f64;
    m->tf32 = o->tf32;
    m->check_numerics = o->check_numerics;
    m->rb = o->f64 ? 8 : 4;
    const nnc_model_abi fns = {NNC_RT_ABI_FUNCTIONS(cuda_create)};
    m->desc = model_desc_build(p, o->f64, &fns, &m->arena);
    if (!(m->rt = nnc_rt_new(m->desc, &cuda_device, m))) {
        arena_free(&m->arena);
        free(m);
        return NULL;
    }
    return m;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* The device, the module (compiled or from the cache), device memory, then the runtime's host
 * memory.  A compile failure's log is in err already; anything else is the instance's message. */
static bool cuda_setup(CudaModel *m, const BuildOpts *o, LoadedModel *lm, char *err, size_t n) {
    char arch[32] = "", first_arch[32] = "";
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < m->p->g->n; i++)   /* the GPUs the model uses: cuda:k is GPU base + k */
        if (DEV_IS_GPU(m->p->g->nodes[i].dev)) m->gpu[DEV_GPU_INDEX(m->p->g->nodes[i].dev)].used = true;
    int any = 0;
    for (int k = 0; k < NNC_MAX_GPUS; k++) any |= m->gpu[k].used;
    if (!any) m->gpu[0].used = true;
    bool ok = true;
    for (int k = 0; k < NNC_MAX_GPUS && ok; k++) {
        if (!m->gpu[k].used) continue;
        m->cur = &m->gpu[k];
        m->ngpus++;
        ok = open_device(m, o->device + k, arch, sizeof arch);
        if (ok && first_arch[0] && strcmp(arch, first_arch)) {
            nnc_rt_fail(m->rt, NNC_STATUS_ARG, "the model's GPUs differ in architecture (%s and %s); nnc compiles one "
                        "set of kernels for all of them", first_arch, arch);
            ok = false;
        }
        snprintf(first_arch, sizeof first_arch, "%s", arch);
    }
    ok = ok && enable_peers(m);
    char *cubin = NULL;
    if (ok) {
        Str src = {0};
        cuda_render(m->p, o, &src);
        cubin = get_cubin(m->p, o, src.buf, arch, lm, err, n);
        str_free(&src);
        if (!cubin) return false;
    }
    lm->compile_seconds = seconds_since(&t0);
    for (int k = NNC_MAX_GPUS - 1; k >= 0 && ok; k--) {   /* ends with the first: m->cur */
        if (!m->gpu[k].used) continue;
        m->cur = &m->gpu[k];
        ok = cu.CtxSetCurrent(m->cur->ctx) == CUDA_SUCCESS && load_module(m, cubin) && alloc_gpu(m, k);
    }
    if (m->ngpus > 1)   /* the GPUs take turns, synchronized by the host: no CUDA graphs */
        for (int k = 0; k < ENTRY_COUNT; k++) m->no_graph[k] = true;
    ok = ok && alloc_staging(m) && nnc_rt_alloc(m->rt, NULL) == 0;
    free(cubin);
    if (!ok) snprintf(err, n, "%s", m->rt->msg);
    return ok;
}

static LoadedModel *cuda_load(const Program *p, const BuildOpts *o, char *err, size_t n) {
    if (!cuda_open()) {
        snprintf(err, n, "%s", cu.why);
        return NULL;
    }
    if (!cuda_nvrtc_available(err, n) || !check_placement(p, err, n)) return NULL;
    CudaModel *m = cuda_model_new(p, o);
    if (!m) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    LoadedModel *lm = xcalloc(1, sizeof *lm);
    if (!cuda_setup(m, o, lm, err, n)) {
        nnc_rt_destroy(m->rt);
        free(lm);
        return NULL;
    }
    lm->abi = &m->desc->abi;
    lm->m = m->rt;
    lm->handle = m;
    return lm;
}

static void cuda_unload(LoadedModel *lm) {
    if (!lm) return;
    nnc_rt_destroy(lm->m);
    free(lm);
}

/* --emit ptx: NVRTC's PTX for the device's architecture (compute_XY), or for compute_90 when
 * there is no device to ask, which the first line says. */
static bool cuda_emit_ptx(const Program *p, const BuildOpts *o, Str *out, char *err, size_t n) {
    char arch[32] = "compute_90";
    const char *why = "no CUDA device found to choose it";
    CUdevice dev;
    int major = 0, minor = 0;
    if (cuda_open() && cu.DeviceGet(&dev, 0) == CUDA_SUCCESS &&
        cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) == CUDA_SUCCESS &&
        cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) == CUDA_SUCCESS) {
        snprintf(arch, sizeof arch, "compute_%d%d", major, minor);
        why = "the architecture of device 0";
    }
    Str src = {0};
    cuda_render(p, o, &src);
    size_t len = 0;
    char *ptx = cuda_nvrtc_compile(src.buf, "model.cu", arch, o->f64, &len, err, n);
    str_free(&src);
    if (!ptx) return false;
    str_printf(out, "// nnc: PTX for %s (%s), compiled by NVRTC from the source --emit cuda prints\n", arch, why);
    str_puts(out, ptx);
    free(ptx);
    return true;
}

/* --target auto: whether the cuda target can run here, as torch.cuda.is_available() asks (a
 * driver that loads and initializes, a device), plus the libraries the target needs (cuBLAS,
 * NVRTC).  `dev` gets device 0's name, or `why` a short reason. */
bool cuda_probe(char *dev, size_t dn, char *why, size_t wn) {
    CUdevice d;
    if (!cuda_open()) snprintf(why, wn, "%s", cu.brief);
    else if (!cuda_nvrtc_available(NULL, 0)) snprintf(why, wn, "NVRTC (libnvrtc) not found");
    else if (cu.DeviceGet(&d, 0) != CUDA_SUCCESS || cu.DeviceGetName(dev, (int)dn, d) != CUDA_SUCCESS)
        snprintf(why, wn, "device 0 does not answer");
    else return true;
    return false;
}

/* Reductions and row sums accumulate in double (kernel.c).  cuBLAS's FP32 products (and the
 * convolutions' im2col GEMMs) use FMA chains; half inputs or TF32 (--tf32) run on tensor cores,
 * whose FP32 accumulation may truncate rather than round (Fasi et al., "Numerical behavior of
 * NVIDIA tensor cores", 2021): twice the unit roundoff, and TF32 inputs keep 10 bits. */
static void cuda_numerics(const Program *p, const Launch *L, const BuildOpts *o, LaunchNumerics *out) {
    const Graph *g = p->g;
    double u = o->f64 ? 0x1p-53 : 0x1p-24;
    bool product = L->kind == L_GEMM || (L->kind == L_HELPER && op_has(g->nodes[L->root].op, OPF_CONV));
    bool half = L->kind == L_GEMM && (DTYPE_IS_HALF(g->nodes[L->a].dtype) || DTYPE_IS_HALF(g->nodes[L->b].dtype));
    bool tensor = product && !o->f64 && (half || o->tf32);
    out->sum_unit = L->kind == L_REDUCE ? 0x1p-53 : tensor ? 2 * u : u;
    out->input_unit = product && o->tf32 && !o->f64 && !half ? 0x1p-10 : 0;
}

const Backend backend_cuda = {"cuda", cuda_render, cuda_load, cuda_unload,  cuda_emit_ptx,
                              NULL,   NULL,        NULL,      cuda_numerics};
