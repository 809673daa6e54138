/* cuda_model.h - the CUDA backend's state, and what its files share.
 *
 * The backend is split along its seams:
 *   cuda_api.c      the driver's and cuBLAS's entry points, found with dlopen (`cu`), and
 *                   whether the target can run here at all (cuda_probe, for --target auto)
 *   cuda_issue.c    an entry's launches issued on the stream of the GPU each runs on: copies,
 *                   kernels, GEMMs, helper plans, collectives, --check-numerics' checks
 *   cuda_dnn.c      convolutions by cuDNN (dlopen'ed), set up at load, where it takes them
 *   backend_cuda.c  the Backend (load: devices, module, memory; --emit ptx; numerics) and the
 *                   device operations the shared runtime calls: run (directly or as a CUDA
 *                   graph), copy, the step, pinned host memory, close
 *   cuda_profile.c  --profile: events around each launch, and the device's ceilings
 * They share the instance (CudaModel, with a Gpu per GPU it uses) and the macros that check
 * every CUDA and cuBLAS call (llm.c's cudaCheck). */
#ifndef NNC_CUDA_MODEL_H
#define NNC_CUDA_MODEL_H
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>

#include "cuda_backend.h"
#include "cudnn_api.h"
#include "../helpers.h"

#define GRAPH_SLOTS 8 /* per entry: a graph per batch size and call slot (run's, each pipelined slot) */

/* ---- cuda_api.c: the driver and cuBLAS, by dlopen ------------------------------------------ */

typedef struct {
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
    CUresult (*MemGetInfo)(size_t *free_bytes, size_t *total);
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
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
    CUresult (*MemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void **, void **);
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
    /* cuBLASLt (epilogues: a bias and ReLU in the product), when libcublasLt loads: lt_ok */
    bool lt_ok;
    cublasStatus_t (*LtCreate)(cublasLtHandle_t *);
    cublasStatus_t (*LtDestroy)(cublasLtHandle_t);
    cublasStatus_t (*LtDescCreate)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
    cublasStatus_t (*LtDescDestroy)(cublasLtMatmulDesc_t);
    cublasStatus_t (*LtDescSet)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t);
    cublasStatus_t (*LtLayoutCreate)(cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t, int64_t);
    cublasStatus_t (*LtLayoutDestroy)(cublasLtMatrixLayout_t);
    cublasStatus_t (*LtPrefCreate)(cublasLtMatmulPreference_t *);
    cublasStatus_t (*LtPrefDestroy)(cublasLtMatmulPreference_t);
    cublasStatus_t (*LtPrefSet)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t);
    cublasStatus_t (*LtHeuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                  cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                  cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *, int *);
    cublasStatus_t (*LtMatmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                               cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *, const void *,
                               cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *,
                               void *, size_t, cudaStream_t);
} CudaApi;
extern CudaApi cu;

/* The driver, an initialized driver and at least one device, or a plain reason why not (cu.why,
 * and in a few words cu.brief). */
bool cuda_open(void);

/* ---- the device state ------------------------------------------------------------------------ */

typedef struct {
    int64_t B;
    int slot; /* the call slot it was captured for (CudaModel.slot): its inputs, host block and copies */
    CUgraphExec exec;
} GraphSlot;

#define BLAS_WORKSPACE (32u << 20) /* cuBLAS's and cuBLASLt's workspace on each GPU (one stream: shared) */

typedef struct DnnConv DnnConv; /* cuda_dnn.c: one convolution launch by cuDNN */

/* cuBLASLt's setup of one product with an epilogue (cuda_issue.c), made at its first call with
 * these rows and operand alignments and kept: the operation, the layouts and the algorithm, or
 * `none` (no algorithm: the cuBLAS product and nnc_bias_rows). */
typedef struct {
    int64_t M; /* 0: not made yet */
    unsigned align; /* the smallest alignment (bytes, up to 256) of A, B, C and the bias it was made for */
    bool none;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} LtPlan;

/* A pipelined call's own memory, one per slot of the runtime's ring (nnc_rt_submit), so that a
 * call can be queued while the one before it runs: its inputs on the device (the copy stream
 * writes them), its image of the host block and its copies of the device outputs (the compute
 * stream writes them at its end, the host reads them when it finishes the call), its events. */
typedef struct {
    bool ready;
    CUdeviceptr dIn; /* every input at batch_max, side by side (CudaModel.in_at) */
    char *hHost[ENTRY_COUNT]; /* per entry, the host block as the call leaves it (the loss copied
                                 back), as far as the entry writes it (cuda_host_extent) */
    char *hOut[ENTRY_COUNT]; /* ... its outputs in device memory, as nnc_rt.stage lays them out */
    CUevent copied, done; /* its inputs are on the device; its work and copies have run */
    int64_t seq; /* the call's number (CudaModel.issued when it was queued) */
    int64_t *hStarts; /* submit_rows: each input's rows' starts, batch_max a input (pinned), */
    CUdeviceptr dStarts; /* ... and on the device (allocated at the slot's first such call) */
} CallSlot;

/* An input's source kept in device memory (the ABI's keep): `elems` values of `type` (NNC_TYPE_F32,
 * NNC_TYPE_I32 or NNC_TYPE_U8, scaled by `scale`), copied from the host's `host`.  Inputs given
 * the same source share one copy (`owner` false in all but the one that frees it). */
typedef struct {
    CUdeviceptr p;
    const void *host;
    int64_t elems;
    int type;
    float scale;
    bool owner;
} KeptSource;

/* Small uploads (the learning rate a schedule sets before each step) go through pinned cells of
 * their own rather than a wait: a cell is written again once the call after its copy finished. */
#define UPLOAD_CELLS 8
#define UPLOAD_CELL_BYTES 64

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
    cublasLtHandle_t lt; /* cuBLASLt, where it loaded (cu.lt_ok) */
    CUfunction *fn[ENTRY_COUNT], step_inc, micro_next, check_fn, rows_fn; /* rows_fn: kept inputs' gather */
    CUfunction bias_fn; /* nnc_bias_rows: an epilogue without cuBLASLt (cuda_issue.c) */
    CUfunction *gfn; /* the grouped kernels' (CudaKernels.groups) */
    CUfunction helper[HP_COUNT]; /* codegen/helpers.c's helpers, when the model has any */
    CUdeviceptr dFirst; /* --check-numerics: the first non-finite index found */
    unsigned long long *hFirst; /* ... read back (pinned) */
    CUdeviceptr dBlock[NNC_BLOCK_COUNT]; /* its params, state, act (the host block is the runtime's) */
    int64_t lo[NNC_BLOCK_COUNT]; /* bytes of the whole block where its range starts */
    size_t bytes[NNC_BLOCK_COUNT]; /* ... and its size */
    CUdeviceptr dStep, dErr, dWork;
    DnnHandle dnn; /* cuDNN, on st (cuda_dnn.c), or NULL */
    bool dnn_failed; /* ... cudnnCreate failed: im2col here */
    CUdeviceptr dDnnWork; /* ... its workspace, allocated once */
    size_t dnn_work; /* ... of this many bytes */
    CUdeviceptr dRed; /* the reductions' workspace (CUDA_KERNEL_PARAMS' ws) */
    long long *hStep; /* pinned staging for the step counter, the seed and micro */
    int *hErr[1 + NNC_PIPELINE_DEPTH]; /* pinned error flag readback, per call slot (+ 1) */
} Gpu;

typedef struct {
    const Program *p;
    nnc_rt *rt; /* the instance: messages, step, host blocks */
    nnc_model_desc *desc; /* built from p, in `arena` */
    size_t rb; /* bytes per real */
    bool f64, tf32;
    Gpu gpu[NNC_MAX_GPUS]; /* by index: cuda:k is gpu[k] */
    CudaKernels kt; /* which kernel each launch runs, with which offsets (render_cuda.c) */
    Gpu *cur; /* the one work is issued to now (its context is current) */
    int ngpus; /* how many the model uses */
    int base; /* the physical GPU of cuda:0 (cuda:k is base + k) */
    bool check_numerics; /* --check-numerics: test every output after its launch */
    bool verbose; /* --verbose: say what ran (a product's epilogue: cuBLASLt's or a kernel) */
    void **hIn; /* pinned input staging of run (slot -1), sized at batch_max */
    int slot; /* the call being issued: -1 a run, else its slot of the runtime's ring */
    CallSlot call[NNC_PIPELINE_DEPTH]; /* ... each slot's memory (allocated at its first call) */
    const void *const *in; /* ... a pipelined call's inputs (the ring's, pinned) */
    bool up; /* ... whose inputs go up on the copy stream (a model on one GPU) */
    CUstream cpy; /* ... that stream */
    size_t *in_at, in_bytes; /* each input's offset in a CallSlot's dIn, and its size */
    KeptSource *kept; /* per input: its source in device memory (keep), p 0 when none */
    int64_t issued, finished; /* calls issued (run or submit) and known to have run, in order */
    char *hCell; /* the upload cells (UPLOAD_CELLS of UPLOAD_CELL_BYTES, pinned) */
    CUevent cell_ev[UPLOAD_CELLS]; /* ... each one's copy */
    int64_t cell_call[UPLOAD_CELLS]; /* ... the call issued after it (0: unused) */
    int next_cell;
    char *hColl; /* data parallel: pinned staging of the gradients */
    NcclComm *nccl; /* ... or NCCL, which sums them on the GPU, */
    CUstream cst; /* ... on its own stream, to overlap the step */
    CUevent *ready, *done; /* ... per allreduce_start: its gradient is there, and its sum is */
    bool comm_chosen; /* ... which of the two, decided at the first */
    size_t *coll_at; /* ... per allreduce_start node, its bytes' offset */
    bool has_ce[ENTRY_COUNT], ran[ENTRY_COUNT], no_graph[ENTRY_COUNT];
    GraphSlot graph[ENTRY_COUNT][GRAPH_SLOTS];
    DnnConv **dnn[ENTRY_COUNT]; /* per launch: its convolution by cuDNN, or NULL (im2col + GEMM) */
    LtPlan *lt[ENTRY_COUNT]; /* per launch: a product with an epilogue's cuBLASLt setup */
    int next_slot[ENTRY_COUNT];
    double *timing; /* --profile: the call in progress is timed, launch k's seconds into timing[k] */
    CUevent *timing_ev[ENTRY_COUNT]; /* ... by events before and after each launch: 2k, 2k + 1 */
    Arena arena; /* the description, kernel tables */
} CudaModel;

/* backend_cuda.c: a failed CUDA call, as the instance's message.  CU and BLAS check a call and
 * return false from the function that made it. */
void cu_fail(CudaModel *m, CUresult r, const char *call, const char *file, int line);

#define CU(call) \
    do { \
        CUresult r_ = (call); \
        if (r_ != CUDA_SUCCESS) { \
            cu_fail(m, r_, #call, __FILE__, __LINE__); \
            return false; \
        } \
    } while (0)

#define BLAS(call) \
    do { \
        cublasStatus_t s_ = (call); \
        if (s_ != CUBLAS_STATUS_SUCCESS) { \
            nnc_rt_fail(m->rt, NNC_STATUS_ARG, "cuBLAS error %d at %s:%d: %s", (int)s_, __FILE__, __LINE__, #call); \
            return false; \
        } \
    } while (0)

/* ---- cuda_issue.c ---------------------------------------------------------------------------- */

/* Where node x's value lives: a device address, or a host pointer (false: it has no memory). */
bool cuda_where(CudaModel *m, const Entry *e, int x, CUdeviceptr *d, char **h);
bool cuda_on_device(const Entry *e, int x); /* in device memory (or an inline scalar) */
/* Bytes of the host block that entry e writes or returns at most (at batch_max). */
size_t cuda_host_extent(const CudaModel *m, const Entry *e);
/* Entry e's launches at batch B, in schedule order, each on its GPU's stream. */
bool cuda_issue_entry(CudaModel *m, const Entry *e, int64_t B);

/* ---- cuda_profile.c: --profile ------------------------------------------------------------- */

/* While m->timing is set: the event before (end false) or after launch k of e, on the stream
 * of the GPU it runs on (made there the first time). */
bool cuda_profile_mark(CudaModel *m, const Entry *e, int k, bool end);
/* After the call's streams are synchronized: each launch's time into m->timing. */
bool cuda_profile_read(CudaModel *m, const Entry *e);
void cuda_profile_free(CudaModel *m);
/* Backend.run_timed and Backend.ceilings. */
int cuda_run_timed(LoadedModel *lm, const Program *p, int entry, const void *const *in, int64_t batch, double *t);
void cuda_ceilings(LoadedModel *lm, const BuildOpts *o, DeviceCeilings *out);

/* ---- cuda_dnn.c ------------------------------------------------------------------------------ */

/* At load, after the GPUs' memory: cuDNN where it can run the model's convolutions (their
 * descriptors, algorithms, each GPU's handle and workspace), with --verbose saying which.  False
 * with err only for a bad NNC_CUDNN or a CUDA error: a missing or refusing cuDNN leaves im2col +
 * cuBLAS. */
bool cuda_dnn_setup(CudaModel *m, const BuildOpts *o, char *err, size_t n);
/* Launch L's convolution by cuDNN, or NULL. */
DnnConv *cuda_dnn_conv(const CudaModel *m, const Entry *e, const Launch *L);
/* Runs it over `rows` samples, a and b the operands (HS_CONV_LIB's) into out, on its GPU's stream:
 * 1 done, 0 not run (an empty batch, or more workspace than was allocated: the im2col steps then
 * do it), -1 a cuDNN error (err). */
int cuda_dnn_run(DnnConv *c, int64_t rows, CUdeviceptr a, CUdeviceptr b, CUdeviceptr out, char *err, size_t n);
void cuda_lt_plan_free(LtPlan *pl); /* cuda_issue.c: its descriptors */
void cuda_dnn_close(CudaModel *m); /* descriptors and handles (the workspaces go with the GPU's memory) */
/* Whether node x holds half values widened to f32: autocast.c's convolution operands, and the
 * gradients that come back to them.  TF32 holds them exactly. */
bool cuda_half_widened(const Graph *g, int x);
#endif
