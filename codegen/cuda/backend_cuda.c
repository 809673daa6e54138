/* backend_cuda.c - the CUDA backend: NVRTC kernels, cuBLAS GEMMs, explicit copies, graphs.
 *
 * load() opens the driver with dlopen (no CUDA library is linked, so a CUDA-enabled nnc runs
 * on machines without one and says plainly when there is no driver or device), compiles the
 * rendered source for the device's sm_XY with NVRTC (cached on disk by a hash of the source,
 * the architecture, the NVRTC version and the flags), allocates the blocks the memory planner
 * sized, and returns a model exposing nnc_model_abi:
 *   - device memory: parameters, optimizer state, one activation block (act_elems[DEV_CUDA]),
 *     the step counter and the error flag;
 *   - host memory: parameter and state mirrors (param()/state() return them; sync() moves
 *     them), the host activation block (values copied back, e.g. the loss) and pinned staging
 *     for the batch inputs, all pinned so the copies are asynchronous and capturable.
 * run() issues an entry's launches in schedule order on one stream: copies as async memcpys,
 * kernels with cuLaunchKernel, GEMMs with cuBLAS, assignments as device memcpys.  The first run
 * of an entry at a batch size goes direct; the next one captures the sequence as a CUDA graph
 * (keyed by the batch size, which the cuBLAS calls bake in) and later runs replay it.  If
 * capture fails the entry stays on direct launches.  Every CUDA and cuBLAS call is checked by
 * a macro that reports the call and its site (llm.c's cudaCheck). */
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

#define GRAPH_SLOTS 4
#define BLAS_WORKSPACE (32u << 20)

/* ---- the driver and cuBLAS, by dlopen ------------------------------------------------------ */

static struct {
    bool tried, ok;
    char why[1536];
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
} cu;

static bool sym(void *h, void **field, const char *name, const char *lib) {
    *field = dlsym(h, name);
    if (!*field) snprintf(cu.why, sizeof cu.why, "%s has no %s: a driver or toolkit too old for this nnc", lib, name);
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
    if (!h) return false;
    const char *L = "libcublas";
    SYM(h, BlasCreate, "cublasCreate_v2", L); SYM(h, BlasDestroy, "cublasDestroy_v2", L);
    SYM(h, BlasSetStream, "cublasSetStream_v2", L); SYM(h, BlasSetMathMode, "cublasSetMathMode", L);
    SYM(h, BlasSetWorkspace, "cublasSetWorkspace_v2", L);
    SYM(h, Sgemm, "cublasSgemm_v2", L); SYM(h, Dgemm, "cublasDgemm_v2", L);
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
        return false;
    }
    if (!load_blas()) return false;
    cu.ok = true;
    return true;
}

/* ---- the model ------------------------------------------------------------------------------ */

typedef struct {
    int64_t B;
    CUgraphExec exec;
} GraphSlot;

typedef struct {
    const Program *p;
    nnc_model_abi abi;
    size_t rb;                                  /* bytes per real */
    bool f64, tf32;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUstream st;
    cublasHandle_t blas;
    CUfunction *fn[ENTRY_COUNT], step_inc, check_fn;
    bool check_numerics;                        /* --check-numerics: test every output after its launch */
    CUdeviceptr dFirst;                         /* ... the first non-finite index found */
    unsigned long long *hFirst;                 /* ... read back (pinned) */
    CUdeviceptr dP, dS, dA, dStep, dErr, dWork;
    void *hP, *hS;                              /* mirrors (pinned) */
    long long *hStep;                           /* pinned staging for the step counter */
    char *hA;                                   /* host activations (pinned) */
    void **hIn;                                 /* pinned input staging */
    int *hErr;                                  /* pinned error flag readback */
    int *in_node;                               /* input i's node */
    int64_t *param_off, *state_off;
    void **out_stage[ENTRY_COUNT];
    bool *out_fresh[ENTRY_COUNT];
    bool has_ce[ENTRY_COUNT], ran[ENTRY_COUNT], no_graph[ENTRY_COUNT];
    GraphSlot graph[ENTRY_COUNT][GRAPH_SLOTS];
    int next_slot[ENTRY_COUNT];
    int64_t lastB[ENTRY_COUNT];
    int64_t step;
    int status;
    char msg[1024];
    Arena arena;                                /* tensor tables */
} CudaModel;

static void cu_fail(CudaModel *m, CUresult r, const char *call, const char *file, int line) {
    const char *name = "?", *desc = "?";
    if (cu.GetErrorName) cu.GetErrorName(r, &name);
    if (cu.GetErrorString) cu.GetErrorString(r, &desc);
    snprintf(m->msg, sizeof m->msg, "CUDA error %d (%s: %s) at %s:%d: %s", (int)r, name, desc, file, line, call);
    m->status = 4;
}

#define CU(call)                                                         \
    do {                                                                 \
        CUresult r_ = (call);                                            \
        if (r_ != CUDA_SUCCESS) {                                        \
            cu_fail(m, r_, #call, __FILE__, __LINE__);                   \
            return false;                                                \
        }                                                                \
    } while (0)

#define BLAS(call)                                                                            \
    do {                                                                                      \
        cublasStatus_t s_ = (call);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            snprintf(m->msg, sizeof m->msg, "cuBLAS error %d at %s:%d: %s", (int)s_, __FILE__, \
                     __LINE__, #call);                                                        \
            m->status = 4;                                                                    \
            return false;                                                                     \
        }                                                                                     \
    } while (0)

static size_t elem_bytes(const CudaModel *m, int node) {
    return m->p->g->nodes[node].dtype == DT_I32 ? 4 : m->rb;
}

static int64_t dim_at(int64_t d, int64_t B) { return d == DIM_BATCH ? B : d; }

/* Where node x's value lives: a device address, or a host pointer. */
static bool where(CudaModel *m, const Entry *e, int x, CUdeviceptr *d, char **h) {
    x = cuda_resolve(e, x);
    const Buffer *b = &e->buf[x];
    *d = 0;
    *h = NULL;
    switch (b->kind) {
    case BUF_PARAM: *d = m->dP + (CUdeviceptr)b->offset * m->rb; return true;
    case BUF_STATE: *d = m->dS + (CUdeviceptr)b->offset * m->rb; return true;
    case BUF_ACT:
        if (b->dev == DEV_CUDA) *d = m->dA + (CUdeviceptr)b->offset * m->rb;
        else *h = m->hA + b->offset * (int64_t)m->rb;
        return true;
    case BUF_INPUT: *h = m->hIn[b->index]; return true;
    default: return false;
    }
}

static bool on_device(const Entry *e, int x) {
    x = cuda_resolve(e, x);
    const Buffer *b = &e->buf[x];
    return b->kind == BUF_PARAM || b->kind == BUF_STATE || (b->kind == BUF_ACT && b->dev == DEV_CUDA) ||
           b->kind == BUF_INLINE;
}

/* ---- issuing one entry's launches ---------------------------------------------------------- */

static bool issue_copy(CudaModel *m, const Entry *e, int dst, int src, int64_t B) {
    CUdeviceptr dd, ds;
    char *hd, *hs;
    if (!where(m, e, dst, &dd, &hd) || !where(m, e, src, &ds, &hs)) {
        snprintf(m->msg, sizeof m->msg, "internal: copy of node %d into node %d has no buffer", src, dst);
        return false;
    }
    size_t bytes = (size_t)shape_numel(m->p->g->nodes[dst].shape, B) * elem_bytes(m, dst);
    if (hs && !hd) CU(cu.MemcpyHtoDAsync(dd, hs, bytes, m->st));
    else if (!hs && hd) CU(cu.MemcpyDtoHAsync(hd, ds, bytes, m->st));
    else if (!hs && !hd) CU(cu.MemcpyDtoDAsync(dd, ds, bytes, m->st));
    else {
        snprintf(m->msg, sizeof m->msg, "internal: a host-to-host copy reached the CUDA backend");
        return false;
    }
    return true;
}

/* Row-major C[M,N] = alpha op(A) op(B) (+ C) is column-major C^T = alpha op(B)^T op(A)^T (+ C^T):
 * swap the operands.  With a folded SGD update (fuse.c), C starts as the parameter. */
static bool issue_gemm(CudaModel *m, const Entry *e, const Launch *L, int64_t B) {
    const Graph *g = m->p->g;
    Shape c = g->nodes[L->root].shape, a = g->nodes[L->a].shape, b = g->nodes[L->b].shape;
    int M = (int)dim_at(c.d[0], B), N = (int)dim_at(c.d[1], B);
    int K = (int)dim_at(L->ta ? a.d[0] : a.d[1], B);
    int lda = (int)dim_at(a.d[1], B), ldb = (int)dim_at(b.d[1], B);
    CUdeviceptr pa, pb, pc, pleaf;
    char *h;
    int cnode = L->fold >= 0 ? L->fold : L->root;
    where(m, e, L->a, &pa, &h);
    where(m, e, L->b, &pb, &h);
    where(m, e, cnode, &pc, &h);
    if (L->fold >= 0) {
        where(m, e, g->nodes[L->fold].in[0], &pleaf, &h);
        if (pleaf != pc) CU(cu.MemcpyDtoDAsync(pc, pleaf, (size_t)M * (size_t)N * m->rb, m->st));
    }
    cublasOperation_t oa = L->ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = L->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (m->f64) {
        const double alpha = L->alpha, beta = L->fold >= 0 ? 1 : 0;
        BLAS(cu.Dgemm(m->blas, ob, oa, N, M, K, &alpha, (const double *)pb, ldb, (const double *)pa, lda, &beta,
                      (double *)pc, N));
    } else {
        const float alpha = (float)L->alpha, beta = L->fold >= 0 ? 1.0f : 0.0f;
        BLAS(cu.Sgemm(m->blas, ob, oa, N, M, K, &alpha, (const float *)pb, ldb, (const float *)pa, lda, &beta,
                      (float *)pc, N));
    }
    return true;
}

static bool issue_kernel(CudaModel *m, const Entry *e, int k, int64_t B) {
    CudaDims d = cuda_launch_dims(m->p, e, &e->launches[k], B);
    long long Bv = B;
    void *args[] = {&m->dP, &m->dS, &m->dA, &Bv, &m->dStep, &m->dErr};
    CU(cu.LaunchKernel(m->fn[e->kind][k], d.grid, 1, 1, d.block, 1, 1, 0, m->st, args, NULL));
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
        void *args[] = {&d, &n, &m->dFirst};
        unsigned grid = (unsigned)((n + 255) / 256 > 4096 ? 4096 : (n + 255) / 256);
        CU(cu.MemsetD32Async(m->dFirst, 0xffffffffu, 2, m->st));
        CU(cu.LaunchKernel(m->check_fn, grid ? grid : 1, 1, 1, 256, 1, 1, 0, m->st, args, NULL));
        CU(cu.MemcpyDtoHAsync(m->hFirst, m->dFirst, sizeof *m->hFirst, m->st));
        CU(cu.StreamSynchronize(m->st));
        unsigned long long i = *m->hFirst;
        if (i == ~0ull) continue;
        double v = 0;
        CU(cu.MemcpyDtoHAsync(m->hFirst, d + i * m->rb, m->rb, m->st));
        CU(cu.StreamSynchronize(m->st));
        v = m->f64 ? *(double *)m->hFirst : *(float *)m->hFirst;
        Str what = {0};
        launch_describe(&what, m->p, e, k, o);
        snprintf(m->msg, sizeof m->msg, "%s at element %llu of %s at step %lld", v != v ? "NaN" : "Inf", i, what.buf,
                 (long long)m->step);
        str_free(&what);
        m->status = 4;
        return false;
    }
    return true;
}

static bool issue_entry(CudaModel *m, const Entry *e, int64_t B) {
    if (m->has_ce[e->kind]) CU(cu.MemsetD32Async(m->dErr, 0, 4, m->st));
    if (e->kind == ENTRY_TRAIN) {
        void *args[] = {&m->dStep};
        CU(cu.LaunchKernel(m->step_inc, 1, 1, 1, 32, 1, 1, 0, m->st, args, NULL));
    }
    for (int k = 0; k < e->nlaunch; k++) {
        const Launch *L = &e->launches[k];
        const Node *r = &m->p->g->nodes[L->root];
        bool ok = true;
        switch (L->kind) {
        case L_EW: case L_REDUCE: case L_ROW: ok = issue_kernel(m, e, k, B); break;
        case L_GEMM: ok = issue_gemm(m, e, L, B); break;
        case L_COPY: ok = issue_copy(m, e, L->root, r->in[0], B); break;
        case L_ASSIGN: ok = issue_copy(m, e, r->in[0], r->in[1], B); break;
        }
        if (!ok || (m->check_numerics && !check_launch(m, e, k, B))) return false;
    }
    if (m->has_ce[e->kind]) CU(cu.MemcpyDtoHAsync(m->hErr, m->dErr, 4 * sizeof(int), m->st));
    return true;
}

/* Captures the entry's launches as a graph for batch B; false (stream usable) on failure. */
static bool capture(CudaModel *m, const Entry *e, int64_t B, CUgraphExec *exec) {
    CUgraph graph = NULL;
    if (cu.StreamBeginCapture(m->st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) return false;
    bool ok = issue_entry(m, e, B);
    CUresult rc = cu.StreamEndCapture(m->st, &graph);
    ok = ok && rc == CUDA_SUCCESS && graph && cu.GraphInstantiate(exec, graph, 0) == CUDA_SUCCESS;
    if (graph) cu.GraphDestroy(graph);
    if (!ok) {
        m->status = 0;
        m->msg[0] = 0;
    }
    return ok;
}

static bool launch_entry(CudaModel *m, const Entry *e, int64_t B) {
    int k = e->kind;
    for (int s = 0; s < GRAPH_SLOTS; s++)
        if (m->graph[k][s].exec && m->graph[k][s].B == B) {
            CU(cu.GraphLaunch(m->graph[k][s].exec, m->st));
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
    CU(cu.GraphLaunch(exec, m->st));
    return true;
}

/* ---- nnc_model_abi --------------------------------------------------------------------------- */

static int cuda_run(void *mv, int entry, const void *const *in, int64_t B) {
    CudaModel *m = mv;
    if (!m) return 4;
    const Program *p = m->p;
    m->status = 0;
    m->msg[0] = 0;
    if (B < 1 || B > p->g->batch_max) {
        snprintf(m->msg, sizeof m->msg, "batch of %lld rows is outside [1, %d]", (long long)B, p->g->batch_max);
        return m->status = 2;
    }
    if (entry < 0 || entry >= ENTRY_COUNT || (!p->entry[entry].nlaunch && !p->entry[entry].noutputs)) {
        snprintf(m->msg, sizeof m->msg, "this model has no such entry point (no loss to train?)");
        return m->status = 3;
    }
    const Entry *e = &p->entry[entry];
    if (cu.CtxSetCurrent(m->ctx) != CUDA_SUCCESS) {
        snprintf(m->msg, sizeof m->msg, "cannot make the CUDA context current");
        return m->status = 4;
    }
    for (int i = 0; i < m->abi.ninputs; i++) {   /* the pinned staging the captured copies read */
        int x = m->in_node[i];
        if (!e->live[x]) continue;
        if (!in || !in[i]) {
            snprintf(m->msg, sizeof m->msg, "input '%s' is NULL, and %s reads it", m->abi.inputs[i].name, e->name);
            return m->status = 4;
        }
        memcpy(m->hIn[i], in[i], (size_t)shape_numel(p->g->nodes[x].shape, B) * elem_bytes(m, x));
    }
    if (entry == ENTRY_TRAIN) m->step++;
    for (int k = 0; k < e->noutputs; k++) m->out_fresh[entry][k] = false;
    m->lastB[entry] = B;
    bool ok = launch_entry(m, e, B);
    CUresult rc = cu.StreamSynchronize(m->st);
    if (ok && rc != CUDA_SUCCESS) {
        cu_fail(m, rc, "cuStreamSynchronize(stream) after the step", __FILE__, __LINE__);
        ok = false;
    }
    if (!ok) return m->status ? m->status : (m->status = 4);
    if (m->has_ce[entry] && m->hErr[0]) {
        snprintf(m->msg, sizeof m->msg, "cross_entropy: label %d at row %lld is outside [0, %lld)", m->hErr[2],
                 (long long)m->hErr[1], (long long)m->hErr[3]);
        return m->status = 1;
    }
    return 0;
}

static void *cuda_create(void *mem) {
    (void)mem;   /* a CUDA model is created by the backend's load(), with its device memory */
    return NULL;
}

static void cuda_destroy(void *mv);

/* The same Philox initialisation as the generated C (render_c_model.inc's render_init), on
 * the host mirrors, then uploaded: CPU and CUDA start from identical parameters. */
static void init_params(CudaModel *m, uint64_t seed) {
    const Graph *g = m->p->g;
    const Entry *e = &m->p->entry[ENTRY_EVAL];
    for (int i = 0; i < g->n; i++) {
        const Node *n = &g->nodes[i];
        if (n->op != OP_PARAM) continue;
        int64_t cnt = shape_numel(n->shape, 1);
        const double a = n->attr.init.a, b = n->attr.init.b;
        const uint64_t h = nnc_rng_hash(n->name);
        for (int64_t k = 0; k < cnt; k++) {
            double v;
            switch (n->attr.init.kind) {
            case INIT_ZEROS: v = 0; break;
            case INIT_ONES: v = 1; break;
            case INIT_CONSTANT: v = a; break;
            case INIT_UNIFORM: v = a + (b - a) * nnc_rng_uniform(seed, h, (uint64_t)k); break;
            default: v = a + b * nnc_rng_normal(seed, h, (uint64_t)k); break;
            }
            if (m->f64) ((double *)m->hP)[e->buf[i].offset + k] = v;
            else ((float *)m->hP)[e->buf[i].offset + k] = (float)v;
        }
    }
}

/* Every copy goes on the compute stream, from pinned memory, then the host waits for it.  A
 * synchronous cuMemcpyHtoD would run on the legacy stream, which a CU_STREAM_NON_BLOCKING
 * stream does not wait for: the first kernel could read parameters (or Adam's step) before
 * they landed.  Ordering on one stream makes "copied, then used" hold by construction. */
static bool sync_dir(CudaModel *m, int direction) {
    if (direction == NNC_SYNC_TO_HOST) {
        if (m->abi.param_bytes) CU(cu.MemcpyDtoHAsync(m->hP, m->dP, m->abi.param_bytes, m->st));
        if (m->abi.state_bytes) CU(cu.MemcpyDtoHAsync(m->hS, m->dS, m->abi.state_bytes, m->st));
    } else {
        if (m->abi.param_bytes) CU(cu.MemcpyHtoDAsync(m->dP, m->hP, m->abi.param_bytes, m->st));
        if (m->abi.state_bytes) CU(cu.MemcpyHtoDAsync(m->dS, m->hS, m->abi.state_bytes, m->st));
    }
    CU(cu.StreamSynchronize(m->st));
    return true;
}

static void cuda_sync(void *mv, int direction) {
    CudaModel *m = mv;
    if (!m) return;
    if (cu.CtxSetCurrent(m->ctx) != CUDA_SUCCESS || !sync_dir(m, direction))
        fprintf(stderr, "nnc: error: %s\n", m->msg[0] ? m->msg : "cannot make the CUDA context current");
}

static bool set_step(CudaModel *m, int64_t s) {
    m->step = s;
    *m->hStep = s;
    CU(cu.MemcpyHtoDAsync(m->dStep, m->hStep, sizeof *m->hStep, m->st));
    CU(cu.StreamSynchronize(m->st));
    return true;
}

static void cuda_set_step(void *mv, int64_t s) {
    CudaModel *m = mv;
    if (!m) return;
    if (cu.CtxSetCurrent(m->ctx) != CUDA_SUCCESS || !set_step(m, s)) fprintf(stderr, "nnc: error: %s\n", m->msg);
}

static int64_t cuda_get_step(void *mv) { return mv ? ((CudaModel *)mv)->step : 0; }
static const char *cuda_error(void *mv) { return mv ? ((CudaModel *)mv)->msg : "no model (NULL)"; }

static void cuda_init(void *mv, uint64_t seed) {
    CudaModel *m = mv;
    if (!m) return;
    init_params(m, seed);
    memset(m->hS, 0, m->abi.state_bytes);
    m->status = 0;
    cuda_sync(m, NNC_SYNC_TO_DEVICE);
    cuda_set_step(m, 0);
}

static void *cuda_param(void *mv, int i) {
    CudaModel *m = mv;
    return m && i >= 0 && i < m->abi.nparams ? (char *)m->hP + m->param_off[i] * (int64_t)m->rb : NULL;
}

static void *cuda_state(void *mv, int i) {
    CudaModel *m = mv;
    return m && i >= 0 && i < m->abi.nstates ? (char *)m->hS + m->state_off[i] * (int64_t)m->rb : NULL;
}

/* Host pointers: values already on the host directly, device values copied into staging. */
static const void *cuda_output(void *mv, int entry, int k) {
    CudaModel *m = mv;
    if (!m || entry < 0 || entry >= ENTRY_COUNT || k < 0 || k >= m->abi.noutputs[entry]) return NULL;
    const Entry *e = &m->p->entry[entry];
    int x = cuda_resolve(e, e->outputs[k]);
    if (e->buf[x].kind == BUF_INLINE || e->buf[x].kind == BUF_INPUT) return NULL;
    CUdeviceptr d;
    char *h;
    if (!where(m, e, x, &d, &h)) return NULL;
    if (h) return h;
    if (!m->out_fresh[entry][k]) {
        size_t bytes = (size_t)shape_numel(m->p->g->nodes[x].shape, m->lastB[entry] ? m->lastB[entry] : 1) * elem_bytes(m, x);
        if (cu.CtxSetCurrent(m->ctx) != CUDA_SUCCESS ||
            cu.MemcpyDtoHAsync(m->out_stage[entry][k], d, bytes, m->st) != CUDA_SUCCESS ||
            cu.StreamSynchronize(m->st) != CUDA_SUCCESS)
            return NULL;
        m->out_fresh[entry][k] = true;
    }
    return m->out_stage[entry][k];
}

/* ---- tensor tables (the same names and order as the generated C) -------------------------- */

static nnc_tensor_info info_of(const CudaModel *m, const char *name, const Node *n) {
    nnc_tensor_info t = {name, n->dtype == DT_I32 ? NNC_TYPE_I32 : m->f64 ? NNC_TYPE_F64 : NNC_TYPE_F32, n->shape.rank, {0}};
    for (int i = 0; i < n->shape.rank; i++) t.dims[i] = n->shape.d[i];
    return t;
}

static const char *output_name(CudaModel *m, const Entry *e, int k) {
    const Graph *g = m->p->g;
    int node = e->outputs[k];
    if (node == g->loss && k == 0) return "loss";
    /* eval lists the loss, then every named output in order (passes/select.c): by position, as
     * the C renderer names them, so an output that is also the loss keeps its own name */
    if (e->kind == ENTRY_EVAL && k - (g->loss >= 0) < g->nouts) return g->outs[k - (g->loss >= 0)].name;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == OP_PARAM && g->nodes[i].grad == node)
            return arena_printf(&m->arena, "grad.%s", g->nodes[i].name);
    return "?";
}

static void build_tables(CudaModel *m) {
    const Program *p = m->p;
    const Graph *g = p->g;
    const Entry *ev = &p->entry[ENTRY_EVAL];
    int np = 0, ns = 0, ni = 0;
    for (int i = 0; i < g->n; i++) {
        np += g->nodes[i].op == OP_PARAM;
        ns += g->nodes[i].op == OP_STATE;
        ni += g->nodes[i].op == OP_INPUT;
    }
    nnc_tensor_info *in = arena_alloc(&m->arena, (size_t)(ni + 1) * sizeof *in);
    nnc_tensor_info *pa = arena_alloc(&m->arena, (size_t)(np + 1) * sizeof *pa);
    nnc_tensor_info *sa = arena_alloc(&m->arena, (size_t)(ns + 1) * sizeof *sa);
    m->in_node = arena_alloc(&m->arena, (size_t)(ni + 1) * sizeof(int));
    m->param_off = arena_alloc(&m->arena, (size_t)(np + 1) * sizeof(int64_t));
    m->state_off = arena_alloc(&m->arena, (size_t)(ns + 1) * sizeof(int64_t));
    int a = 0, b = 0, c = 0;
    for (int i = 0; i < g->n; i++) {
        const Node *n = &g->nodes[i];
        if (n->op == OP_INPUT) { m->in_node[a] = i; in[a++] = info_of(m, n->name, n); }
        if (n->op == OP_PARAM) { m->param_off[b] = ev->buf[i].offset; pa[b++] = info_of(m, n->name, n); }
        if (n->op == OP_STATE) { m->state_off[c] = ev->buf[i].offset; sa[c++] = info_of(m, n->name, n); }
    }
    nnc_model_abi *A = &m->abi;
    memset(A, 0, sizeof *A);
    A->abi_version = NNC_ABI_VERSION;
    A->name = model_c_name(p);
    A->real_bytes = (int)m->rb;
    A->batch_max = g->batch_max;
    A->ninputs = ni;
    A->nparams = np;
    A->nstates = ns;
    A->inputs = in;
    A->params = pa;
    A->states = sa;
    int64_t act[2] = {0, 0};
    for (int k = 0; k < ENTRY_COUNT; k++) {
        const Entry *e = &p->entry[k];
        nnc_tensor_info *o = arena_alloc(&m->arena, (size_t)(e->noutputs + 1) * sizeof *o);
        for (int j = 0; j < e->noutputs; j++) o[j] = info_of(m, output_name(m, e, j), &g->nodes[e->outputs[j]]);
        A->noutputs[k] = e->noutputs;
        A->outputs[k] = o;
        for (int d = 0; d < 2; d++)
            if (e->act_elems[d] > act[d]) act[d] = e->act_elems[d];
    }
    A->param_bytes = (size_t)p->param_elems * m->rb;
    A->state_bytes = (size_t)p->state_elems * m->rb;
    A->act_bytes = (size_t)(act[0] + act[1]) * m->rb;
    A->create = cuda_create;
    A->destroy = cuda_destroy;
    A->init = cuda_init;
    A->run = cuda_run;
    A->param = cuda_param;
    A->state = cuda_state;
    A->output = cuda_output;
    A->get_step = cuda_get_step;
    A->set_step = cuda_set_step;
    A->error = cuda_error;
    A->sync = cuda_sync;
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
    CU(cu.ModuleLoadData(&m->mod, cubin));
    CU(cu.ModuleGetFunction(&m->step_inc, m->mod, "nnc_step_inc"));
    if (m->check_numerics) CU(cu.ModuleGetFunction(&m->check_fn, m->mod, "nnc_check_finite"));
    for (int k = 0; k < ENTRY_COUNT; k++) {
        const Entry *e = &m->p->entry[k];
        m->fn[k] = arena_alloc(&m->arena, (size_t)(e->nlaunch + 1) * sizeof(CUfunction));
        for (int i = 0; i < e->nlaunch; i++) {
            const Launch *L = &e->launches[i];
            if (!cuda_launch_is_kernel(L)) continue;
            char name[256];
            cuda_kernel_name(name, sizeof name, m->p, e, i);
            CU(cu.ModuleGetFunction(&m->fn[k][i], m->mod, name));
            m->has_ce[k] |= m->p->g->nodes[L->root].op == OP_CROSS_ENTROPY || m->p->g->nodes[L->root].op == OP_CE_GRAD;
        }
    }
    return true;
}

static size_t nonzero(size_t b) { return b ? b : 64; }

static bool alloc_memory(CudaModel *m) {
    const nnc_model_abi *A = &m->abi;
    const Program *p = m->p;
    int64_t act[2] = {0, 0};
    for (int k = 0; k < ENTRY_COUNT; k++)
        for (int d = 0; d < 2; d++)
            if (p->entry[k].act_elems[d] > act[d]) act[d] = p->entry[k].act_elems[d];
    CU(cu.MemAlloc(&m->dP, nonzero(A->param_bytes)));
    CU(cu.MemAlloc(&m->dS, nonzero(A->state_bytes)));
    CU(cu.MemAlloc(&m->dA, nonzero((size_t)act[DEV_CUDA] * m->rb)));
    CU(cu.MemAlloc(&m->dStep, 64));
    CU(cu.MemAlloc(&m->dErr, 64));
    CU(cu.MemAlloc(&m->dWork, BLAS_WORKSPACE));
    CU(cu.MemAlloc(&m->dFirst, 64));
    CU(cu.MemAllocHost((void **)&m->hFirst, 64));
    /* a fixed workspace: cuBLAS then allocates nothing while a graph is being captured */
    BLAS(cu.BlasSetWorkspace(m->blas, (void *)m->dWork, BLAS_WORKSPACE));
    CU(cu.MemAllocHost(&m->hP, nonzero(A->param_bytes)));
    CU(cu.MemAllocHost(&m->hS, nonzero(A->state_bytes)));
    CU(cu.MemAllocHost((void **)&m->hStep, sizeof *m->hStep));
    memset(m->hP, 0, nonzero(A->param_bytes));
    memset(m->hS, 0, nonzero(A->state_bytes));
    CU(cu.MemAllocHost((void **)&m->hA, nonzero((size_t)act[DEV_CPU] * m->rb)));
    CU(cu.MemAllocHost((void **)&m->hErr, 64));
    memset(m->hErr, 0, 64);
    m->hIn = arena_alloc(&m->arena, (size_t)(A->ninputs + 1) * sizeof(void *));
    for (int i = 0; i < A->ninputs; i++) {
        int x = m->in_node[i];
        CU(cu.MemAllocHost(&m->hIn[i], nonzero((size_t)shape_numel(p->g->nodes[x].shape, p->g->batch_max) * elem_bytes(m, x))));
    }
    for (int k = 0; k < ENTRY_COUNT; k++) {
        const Entry *e = &p->entry[k];
        m->out_stage[k] = arena_alloc(&m->arena, (size_t)(e->noutputs + 1) * sizeof(void *));
        m->out_fresh[k] = arena_alloc(&m->arena, (size_t)(e->noutputs + 1));
        for (int j = 0; j < e->noutputs; j++) {
            int x = e->outputs[j];
            CU(cu.MemAllocHost(&m->out_stage[k][j], (size_t)shape_numel(p->g->nodes[x].shape, p->g->batch_max) * elem_bytes(m, x) + 8));
        }
    }
    return true;
}

static bool open_device(CudaModel *m, char *arch, size_t archlen) {
    int major = 0, minor = 0;
    CU(cu.DeviceGet(&m->dev, 0));
    CU(cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, m->dev));
    CU(cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, m->dev));
    snprintf(arch, archlen, "sm_%d%d", major, minor);
    CU(cu.PrimaryCtxRetain(&m->ctx, m->dev));
    CU(cu.CtxSetCurrent(m->ctx));
    CU(cu.StreamCreate(&m->st, CU_STREAM_NON_BLOCKING));
    BLAS(cu.BlasCreate(&m->blas));
    BLAS(cu.BlasSetStream(m->blas, (cudaStream_t)m->st));
    BLAS(cu.BlasSetMathMode(m->blas, m->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    return true;
}

static LoadedModel *cuda_load(const Program *p, const BuildOpts *o, char *err, size_t n) {
    if (!cuda_open()) {
        snprintf(err, n, "%s", cu.why);
        return NULL;
    }
    if (!cuda_nvrtc_available(err, n) || !check_placement(p, err, n)) return NULL;
    CudaModel *m = xcalloc(1, sizeof *m);
    m->p = p;
    m->f64 = o->f64;
    m->tf32 = o->tf32;
    m->check_numerics = o->check_numerics;
    m->rb = o->f64 ? 8 : 4;
    build_tables(m);
    LoadedModel *lm = xcalloc(1, sizeof *lm);
    lm->abi = &m->abi;
    lm->m = m;
    lm->handle = m;
    char arch[32];
    Str src = {0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool ok = open_device(m, arch, sizeof arch);
    char *cubin = NULL;
    if (ok) {
        cuda_render(p, o, &src);
        cubin = get_cubin(p, o, src.buf, arch, lm, err, n);
        if (!cubin) {
            str_free(&src);
            cuda_destroy(m);
            free(lm);
            return NULL;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    lm->compile_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    ok = ok && load_module(m, cubin) && alloc_memory(m);
    free(cubin);
    str_free(&src);
    if (!ok) {
        snprintf(err, n, "%s", m->msg);
        cuda_destroy(m);
        free(lm);
        return NULL;
    }
    return lm;
}

static void cuda_destroy(void *mv) {
    CudaModel *m = mv;
    if (!m) return;
    if (m->ctx) cu.CtxSetCurrent(m->ctx);
    if (m->st) cu.StreamSynchronize(m->st);
    for (int k = 0; k < ENTRY_COUNT; k++) {
        for (int s = 0; s < GRAPH_SLOTS; s++)
            if (m->graph[k][s].exec) cu.GraphExecDestroy(m->graph[k][s].exec);
        for (int j = 0; m->out_stage[k] && j < m->p->entry[k].noutputs; j++)
            if (m->out_stage[k][j]) cu.MemFreeHost(m->out_stage[k][j]);
    }
    if (m->blas) cu.BlasDestroy(m->blas);
    CUdeviceptr dev[] = {m->dP, m->dS, m->dA, m->dStep, m->dErr, m->dWork, m->dFirst};
    for (size_t i = 0; i < NNC_COUNTOF(dev); i++)
        if (dev[i]) cu.MemFree(dev[i]);
    for (int i = 0; m->hIn && i < m->abi.ninputs; i++)
        if (m->hIn[i]) cu.MemFreeHost(m->hIn[i]);
    if (m->hA) cu.MemFreeHost(m->hA);
    if (m->hErr) cu.MemFreeHost(m->hErr);
    if (m->mod) cu.ModuleUnload(m->mod);
    if (m->st) cu.StreamDestroy(m->st);
    if (m->ctx) cu.PrimaryCtxRelease(m->dev);
    void *pinned[] = {m->hP, m->hS, m->hStep, m->hFirst};
    for (size_t i = 0; i < NNC_COUNTOF(pinned); i++)
        if (pinned[i]) cu.MemFreeHost(pinned[i]);
    arena_free(&m->arena);
    free(m);
}

static void cuda_unload(LoadedModel *lm) {
    if (!lm) return;
    cuda_destroy(lm->m);
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

const Backend backend_cuda = {"cuda", cuda_render, cuda_load, cuda_unload, cuda_emit_ptx, NULL};
