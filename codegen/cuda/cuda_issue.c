/* cuda_issue.c - an entry's launches, issued in schedule order on the GPUs' streams.
 *
 * Each launch goes to its result's GPU (model parallel: the previous GPU's work is finished
 * first), on that GPU's one CU_STREAM_NON_BLOCKING stream, so the whole sequence can be captured
 * as a CUDA graph (backend_cuda.c): copies as async memcpys (peer copies between GPUs),
 * assignments as device memcpys, kernels with cuLaunchKernel (grids from cuda_launch_dims),
 * GEMMs as cuBLAS calls on the swapped row-major operands, a helper launch's plan
 * (helper_plan.c) step by step (a convolution by cuDNN where cuda_dnn.c set it up), and an
 * allreduce's halves through NCCL or the host's nnc_comm.
 * With --check-numerics every output is tested for NaN and Inf after its launch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/nnc_rng.h"
#include "cuda_model.h"
#include "../kernel.h"
#define NNC_RUNTIME_IMPLEMENTATION /* the runtime's functions, static in this file */
#include "../../include/nnc_runtime.h"

static size_t elem_bytes(const CudaModel *m, int node) {
    DType t = m->p->g->nodes[node].dtype;
    return t == DT_I32 ? 4 : DTYPE_IS_HALF(t) ? 2 : m->rb;
}

static cudaDataType cuda_type(DType t) { return t == DT_BF16 ? CUDA_R_16BF : t == DT_F16 ? CUDA_R_16F : CUDA_R_32F; }

static int64_t dim_at(int64_t d, int64_t B) { return dim_size(d, B); }

bool cuda_where(CudaModel *m, const Entry *e, int x, CUdeviceptr *d, char **h) {
    x = cuda_resolve(e, x);
    const Buffer *b = &e->buf[x];
    const int64_t at = b->offset * (int64_t)m->rb;
    *d = 0;
    *h = NULL;
    Gpu *g = DEV_IS_GPU(b->dev) ? &m->gpu[DEV_GPU_INDEX(b->dev)] : NULL;
    switch (b->kind) { /* a GPU's range of the parameter and state blocks starts at its lo */
    case BUF_PARAM: *d = g->dBlock[NNC_BLOCK_PARAMS] + (CUdeviceptr)(at - g->lo[NNC_BLOCK_PARAMS]); return true;
    case BUF_STATE: *d = g->dBlock[NNC_BLOCK_STATE] + (CUdeviceptr)(at - g->lo[NNC_BLOCK_STATE]); return true;
    case BUF_ACT: /* a pipelined call writes the host block's image of its own slot */
        if (g) *d = g->dBlock[NNC_BLOCK_ACT] + (CUdeviceptr)at;
        else *h = (m->slot < 0 ? m->rt->host[NNC_BLOCK_HOST] : m->call[m->slot].hHost[e->kind]) + at;
        return true;
    case BUF_INPUT: /* run's staging, a pipelined call's inputs on the device, or its ring slot */
        if (m->slot < 0) *h = m->hIn[b->index];
        else if (m->up) *d = m->call[m->slot].dIn + (CUdeviceptr)m->in_at[b->index];
        else *h = (char *)(uintptr_t)m->in[b->index];
        return true;
    case BUF_NONE:
    case BUF_INLINE:
    case BUF_ALIAS: return false;
    }
    return false;
}

bool cuda_on_device(const Entry *e, int x) {
    x = cuda_resolve(e, x);
    const Buffer *b = &e->buf[x];
    return b->kind == BUF_PARAM || b->kind == BUF_STATE || (b->kind == BUF_ACT && DEV_IS_GPU(b->dev)) ||
        b->kind == BUF_INLINE;
}

size_t cuda_host_extent(const CudaModel *m, const Entry *e) {
    size_t end = 0;
    for (int i = 0; i < e->nlaunch; i++) {
        const Launch *L = &e->launches[i];
        int dst = L->kind == L_COPY ? L->root : L->kind == L_ASSIGN ? m->p->g->nodes[L->root].in[0] : -1;
        const Buffer *b = dst >= 0 ? &e->buf[cuda_resolve(e, dst)] : NULL;
        if (!b || b->kind != BUF_ACT || DEV_IS_GPU(b->dev)) continue;
        size_t hi = (size_t)b->offset * m->rb +
            (size_t)shape_numel(m->p->g->nodes[dst].shape, m->p->g->batch_max) * elem_bytes(m, dst);
        if (hi > end) end = hi;
    }
    const nnc_model_desc *d = m->desc; /* and its outputs there, which finish reads */
    for (int k = 0; k < d->abi.noutputs[e->kind]; k++) {
        const nnc_place *at = &d->entry[e->kind].outputs[k];
        size_t hi = (size_t)at->offset + nnc_rt_bytes(d, &d->abi.outputs[e->kind][k], d->abi.batch_max);
        if (at->block == NNC_BLOCK_HOST && hi > end) end = hi;
    }
    return end;
}

/* ---- issuing one entry's launches ---------------------------------------------------------- */

static bool issue_copy(CudaModel *m, const Entry *e, int dst, int src, int64_t B) {
    CUdeviceptr dd, ds;
    char *hd, *hs;
    if (!cuda_where(m, e, dst, &dd, &hd) || !cuda_where(m, e, src, &ds, &hs)) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "internal: copy of node %d into node %d has no buffer", src, dst);
        return false;
    }
    size_t bytes = (size_t)shape_numel(m->p->g->nodes[dst].shape, B) * elem_bytes(m, dst);
    const Buffer *bd = &e->buf[cuda_resolve(e, dst)], *bs = &e->buf[cuda_resolve(e, src)];
    if (hs && !hd) CU(cu.MemcpyHtoDAsync(dd, hs, bytes, m->cur->st));
    else if (!hs && hd) CU(cu.MemcpyDtoHAsync(hd, ds, bytes, m->cur->st));
    else if (!hs && !hd && bs->kind != BUF_INPUT && bd->dev != bs->dev) /* GPU to GPU: peer access if there is */
        CU(cu.MemcpyPeerAsync(dd, m->gpu[DEV_GPU_INDEX(bd->dev)].ctx, ds, m->gpu[DEV_GPU_INDEX(bs->dev)].ctx, bytes,
                              m->cur->st));
    else if (!hs && !hd) /* on one GPU, or a pipelined call's input from its slot (inputs_up) */
        CU(cu.MemcpyDtoDAsync(dd, ds, bytes, m->cur->st));
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
    const char *why = !c->device_sums ? "--dist-backend mpi"
        : m->ngpus > 1                ? "the model spans several GPUs"
        : !c->bcast || !c->share      ? "the host offers no broadcast"
                                      : nccl_unavailable();
    int use = why == NULL;
    if (c->bcast && c->bcast(c->ctx, &use, sizeof use)) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "data parallel: could not agree on NCCL with process 0");
        return false;
    }
    if (use && why) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG,
                    "data parallel: process 0 sums gradients with NCCL, but process %d cannot: %s", c->rank, why);
        return false;
    }
    char err[900];
    if (use && !(m->nccl = nccl_init(c, err, sizeof err))) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "data parallel: %s", err);
        return false;
    }
    if (use) { /* NCCL's stream, and a pair of events per gradient to order it with the step's */
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
        fprintf(stderr, "nnc: data parallel over %d process%s: gradients summed %s%s\n", c->size,
                c->size == 1 ? "" : "es",
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
    if (!cuda_where(m, e, r->in[0], &dx, &hx) || !cuda_where(m, e, L->root, &dy, &hy) || hx || hy) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "internal: an allreduce of node %d outside device memory", r->in[0]);
        return false;
    }
    const int64_t count = shape_numel(r->shape, B);
    const size_t bytes = (size_t)count * m->rb;
    const nnc_comm *c = m->rt->comm;
    const char *name = r->name ? r->name : "a parameter";
    if (c && !m->comm_chosen && !choose_comm(m, c)) return false;
    if (!c || m->nccl) { /* on the GPU: the value moves to the result's buffer, summed there */
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
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "allreduce (%s) of the gradient of %s failed", start ? "start" : "wait",
                    name);
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
        BLAS(cu.GemmExB(m->cur->blas, ob, oa, N, M, K, &al, (const void *)pb, tab, ldb, sb, (const void *)pa, tab, lda,
                        sa, &be, (void *)pc, tc, N, sc, G, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return true;
}

/* G row-major products at once (strides in elements; 0: one matrix for all), as one strided
 * batched call on the swapped operands. */
static bool gemm_rm_batched(CudaModel *m, bool ta, bool tb, int M, int N, int K, double alpha, CUdeviceptr pa, int lda,
                            long long sa, CUdeviceptr pb, int ldb, long long sb, double beta, CUdeviceptr pc,
                            long long sc, int G) {
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (m->f64) {
        BLAS(cu.DgemmB(m->cur->blas, ob, oa, N, M, K, &alpha, (const double *)pb, ldb, sb, (const double *)pa, lda, sa,
                       &beta, (double *)pc, N, sc, G));
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

/* ---- a product with a bias (and ReLU) in its epilogue (passes/fuse.c) ------------------------ */

/* The largest power of two, up to 256, that divides p: what cuBLASLt's heuristic is told of each
 * pointer's alignment, so that it never picks an algorithm that assumes more. */
static unsigned ptr_align(CUdeviceptr p) {
    unsigned a = 256;
    while (a > 1 && p % a) a /= 2;
    return a;
}

void cuda_lt_plan_free(LtPlan *pl) {
    if (pl->op) cu.LtDescDestroy(pl->op);
    cublasLtMatrixLayout_t l[] = {pl->la, pl->lb, pl->lc};
    for (size_t i = 0; i < NNC_COUNTOF(l); i++)
        if (l[i]) cu.LtLayoutDestroy(l[i]);
    memset(pl, 0, sizeof *pl);
}

#define LT(call) \
    do { \
        if ((call) != CUBLAS_STATUS_SUCCESS) return; \
    } while (0)

/* pl made for C's M rows (row-major C = op(A) op(B) + bias, as cuBLASLt's column-major
 * D^T = op(B)^T op(A)^T with the bias along D^T's rows): the operation, layouts and the
 * heuristic's first algorithm within BLAS_WORKSPACE bytes; `none` when any step fails or
 * nothing fits (the fallback then runs). */
static void lt_make(CudaModel *m, const Launch *L, LtPlan *pl, int M, int N, int K, int lda, int ldb, CUdeviceptr bias,
                    unsigned align) {
    cuda_lt_plan_free(pl);
    pl->M = M, pl->align = align, pl->none = true;
    const cudaDataType t = m->f64 ? CUDA_R_64F : CUDA_R_32F;
    const cublasComputeType_t ct = m->f64 ? CUBLAS_COMPUTE_64F
        : m->tf32                         ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
    const cublasOperation_t oa = L->ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = L->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasLtEpilogue_t epi = L->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    LT(cu.LtDescCreate(&pl->op, ct, t));
    LT(cu.LtDescSet(pl->op, CUBLASLT_MATMUL_DESC_TRANSA, &ob, sizeof ob));
    LT(cu.LtDescSet(pl->op, CUBLASLT_MATMUL_DESC_TRANSB, &oa, sizeof oa));
    LT(cu.LtDescSet(pl->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    LT(cu.LtDescSet(pl->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t));
    LT(cu.LtDescSet(pl->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    /* the row-major B is cuBLAS's A, stored N x K (or K x N transposed); the row-major A its B */
    LT(cu.LtLayoutCreate(&pl->la, t, (uint64_t)(L->tb ? K : N), (uint64_t)(L->tb ? N : K), ldb));
    LT(cu.LtLayoutCreate(&pl->lb, t, (uint64_t)(L->ta ? M : K), (uint64_t)(L->ta ? K : M), lda));
    LT(cu.LtLayoutCreate(&pl->lc, t, (uint64_t)N, (uint64_t)M, N));
    cublasLtMatmulPreference_t pref = NULL;
    if (cu.LtPrefCreate(&pref) != CUBLAS_STATUS_SUCCESS) return;
    const uint64_t ws = BLAS_WORKSPACE;
    const uint32_t al = align;
    bool ok = cu.LtPrefSet(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) == CUBLAS_STATUS_SUCCESS;
    const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (size_t i = 0; ok && i < NNC_COUNTOF(aligns); i++)
        ok = cu.LtPrefSet(pref, aligns[i], &al, sizeof al) == CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    memset(&r, 0, sizeof r);
    if (ok &&
        cu.LtHeuristic(m->cur->lt, pl->op, pl->la, pl->lb, pl->lc, pl->lc, pref, 1, &r, &found) ==
            CUBLAS_STATUS_SUCCESS &&
        found > 0 && r.state == CUBLAS_STATUS_SUCCESS) {
        pl->algo = r.algo;
        pl->none = false;
    }
    cu.LtPrefDestroy(pref);
}
#undef LT

/* C = relu?(op(A) op(B) + bias) for M rows: one cuBLASLt call with the BIAS or RELU_BIAS
 * epilogue, else (no cuBLASLt, no algorithm for these operands, or NNC_NO_CUBLASLT=1 when the
 * model loads, to compare) the cuBLAS product then nnc_bias_rows over C.  Either way every C
 * element is the product's sum plus the bias, rounded once, then ReLU: what the kernel after the
 * product computed before the fold. */
static bool issue_gemm_epi(CudaModel *m, const Entry *e, const Launch *L, int M, int N, int K, CUdeviceptr pa, int lda,
                           CUdeviceptr pb, int ldb, CUdeviceptr pc) {
    CUdeviceptr bias;
    char *h;
    if (!cuda_where(m, e, L->bias, &bias, &h) || h) {
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "internal: a GEMM epilogue's bias is not in device memory");
        return false;
    }
    unsigned align = ptr_align(pa);
    CUdeviceptr more[] = {pb, pc, bias};
    for (size_t i = 0; i < NNC_COUNTOF(more); i++)
        if (ptr_align(more[i]) < align) align = ptr_align(more[i]);
    LtPlan *pl = m->lt[e->kind] ? &m->lt[e->kind][L - e->launches] : NULL;
    if (pl && (pl->M != M || pl->align != align)) {
        if (m->cur->lt) lt_make(m, L, pl, M, N, K, lda, ldb, bias, align);
        else pl->M = M, pl->align = align, pl->none = true;
        if (m->verbose) { /* once for each rows and alignment it meets */
            Str what = {0};
            launch_describe(&what, m->p, e, (int)(L - e->launches), L->epi);
            const char *why = !cu.lt_ok ? "cuBLASLt did not load"
                : !m->cur->lt           ? "NNC_NO_CUBLASLT=1"
                                        : "cuBLASLt has no algorithm for these operands";
            fprintf(stderr, "nnc: cuda: %s: %d x %d x %d product, its bias%s %s%s%s\n", what.buf, M, N, K,
                    L->relu ? " and ReLU" : "", pl->none ? "by a kernel after it (" : "in cuBLASLt's epilogue",
                    pl->none ? why : "", pl->none ? ")" : "");
            str_free(&what);
        }
    }
    if (pl && m->cur->lt && !pl->none) {
        const double a64 = L->alpha, b64 = 0;
        const float a32 = (float)L->alpha, b32 = 0;
        const void *al = m->f64 ? (const void *)&a64 : (const void *)&a32,
                   *be = m->f64 ? (const void *)&b64 : (const void *)&b32;
        BLAS(cu.LtDescSet(pl->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        BLAS(cu.LtMatmul(m->cur->lt, pl->op, al, (const void *)pb, pl->la, (const void *)pa, pl->lb, be,
                         (const void *)pc, pl->lc, (void *)pc, pl->lc, &pl->algo, (void *)m->cur->dWork, BLAS_WORKSPACE,
                         (cudaStream_t)m->cur->st));
        return true;
    }
    if (!gemm_rm(m, L->ta, L->tb, M, N, K, L->alpha, pa, lda, pb, ldb, 0, pc, N)) return false;
    long long rows = M, n = N;
    int relu = L->relu;
    void *args[] = {&pc, &bias, &rows, &n, &relu};
    long long blocks = (rows * n + 255) / 256;
    unsigned grid = (unsigned)(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks);
    CU(cu.LaunchKernel(m->cur->bias_fn, grid, 1, 1, 256, 1, 1, 0, m->cur->st, args, NULL));
    return true;
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
    int cnode = launch_gemm_c(L);
    cuda_where(m, e, L->a, &pa, &h);
    cuda_where(m, e, L->b, &pb, &h);
    cuda_where(m, e, cnode, &pc, &h);
    if (L->bias >= 0) /* one product of plain rows (fuse.c's gemm_rows_plain) */
        return issue_gemm_epi(m, e, L, q.rows_merged ? (int)(G * M) : M, N, K, pa, lda, pb, ldb, pc);
    if (L->fold >= 0) {
        cuda_where(m, e, g->nodes[L->fold].in[0], &pleaf, &h);
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
        if (!gemm_call(m, L, M, N, K, pa + (CUdeviceptr)(i * sa) * eab, lda, 0, pb + (CUdeviceptr)(i * sb) * eab, ldb,
                       0, i > 0 ? 1 : beta, pc, 0, 1))
            return false;
    return true;
}

/* A helper plan's pointer (helpers.h) on the GPU the launch runs on. */
static bool helper_ptr(CudaModel *m, const Entry *e, HelperPtr p, CUdeviceptr *out) {
    char *h = NULL;
    switch (p.kind) {
    case HPTR_NODE:
        if (cuda_where(m, e, p.node, out, &h) && !h) return true;
        nnc_rt_fail(m->rt, NNC_STATUS_ARG, "internal: a helper's operand (node %d) is not in device memory", p.node);
        return false;
    case HPTR_SCRATCH: *out = m->cur->dBlock[NNC_BLOCK_ACT] + (CUdeviceptr)(p.off * (int64_t)m->rb); return true;
    case HPTR_STEP: *out = m->cur->dStep; return true;
    case HPTR_ERR: *out = m->cur->dErr; return true;
    }
    return false;
}

/* Whether a helper call's every index fits an int, so its kernel may run its 32-bit loop
 * (helpers.c's cuda_flat_helper): the loop's index below n plus the grid's stride, and every
 * element an operand's pointer reaches: a node's buffer at batch B, or the scratch, within the
 * activation block.  A body's indices are sums of non-negative products that end at an element
 * of one of these, so none of their partial sums is larger. */
static bool helper_fits_int(const CudaModel *m, const HelperStep *st, int64_t n, int64_t stride, int64_t B) {
    const int64_t lim = INT32_MAX;
    bool ok = n <= lim - stride;
    for (int j = 0; j < st->call.nptr + st->call.narg && ok; j++) {
        const HelperPtr *p = j < st->call.nptr ? &st->call.ptr[j] : NULL;
        if (!p) {
            const HelperArg *a = &st->call.arg[j - st->call.nptr];
            if (a->kind != HARG_PTR) continue;
            p = &a->p;
        }
        if (p->kind == HPTR_NODE) ok = shape_numel(m->p->g->nodes[p->node].shape, B) <= lim;
        if (p->kind == HPTR_SCRATCH) ok = (int64_t)(m->cur->bytes[NNC_BLOCK_ACT] / m->rb) <= lim;
    }
    return ok;
}

/* One of helpers.c's kernels over n elements (a grid-stride loop: the grid is capped), with
 * its pointers, n, the rest and the geometry when it takes it, as helpers.def declares, and
 * whether its indices fit an int. */
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
    void *args[NNC_COUNTOF(val) + SPATIAL_GEOM_ARGS + 1];
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
    int narrow = helper_fits_int(m, st, n, (int64_t)grid * HELPER_THREADS, v[AFF_B]);
    args[k++] = &narrow;
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

/* HS_CONV_LIB: the convolution by cuDNN when it was set up for this launch (cuda_dnn.c).  1: it
 * ran, and the launch is done; 0: the im2col steps after it do the work; -1: an error. */
static int issue_conv_lib(CudaModel *m, const Entry *e, DnnConv *c, const HelperStep *st, const int64_t *v) {
    CUdeviceptr a, b, out;
    if (!c) return 0;
    if (!helper_ptr(m, e, st->lib.a, &a) || !helper_ptr(m, e, st->lib.b, &b) || !helper_ptr(m, e, st->lib.out, &out))
        return -1;
    char err[600];
    int ran = cuda_dnn_run(c, affine_eval(st->lib.rows, v), a, b, out, err, sizeof err);
    if (ran < 0) nnc_rt_fail(m->rt, NNC_STATUS_ARG, "%s", err);
    return ran;
}

/* Steps [from, to) of a helper launch's plan at the values v of (1, B, n0, S, SP); lib: the
 * launch's convolution by cuDNN, or NULL. */
static bool issue_helper_steps(CudaModel *m, const Entry *e, const HelperPlan *hp, DnnConv *lib, int from, int to,
                               int64_t *v) {
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
        case HS_CONV_LIB: {
            int ran = issue_conv_lib(m, e, lib, st, v);
            if (ran) return ran > 0;
            break;
        }
        case HS_CHUNKS: {
            const int64_t rows = affine_eval(st->chunks.rows, v), c = st->chunks.chunk;
            for (v[AFF_N0] = 0; v[AFF_N0] < rows; v[AFF_N0] += c) {
                v[AFF_S] = rows - v[AFF_N0] < c ? rows - v[AFF_N0] : c;
                v[AFF_SP] = v[AFF_S] * st->chunks.P;
                if (!issue_helper_steps(m, e, hp, lib, i + 1, i + 1 + st->chunks.nbody, v)) return false;
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
    return issue_helper_steps(m, e, &hp, cuda_dnn_conv(m, e, L), 0, hp.nsteps, v);
}

/* A kernel launch; the first launch of a run (passes/horizontal.c) issues the run's grouped
 * kernels (render_cuda.c), which take only CUDA_KERNEL_PARAMS, and its other launches nothing. */
static bool issue_kernel(CudaModel *m, const Entry *e, int k, int64_t B) {
    CudaDims d = cuda_launch_dims(m->p, e, &e->launches[k], B, m->f64);
    long long Bv = B;
    /* kernels address parameters and state by their offset in the whole block (P + offset); a
     * GPU holds its range of it, from lo */
    Gpu *g = m->cur;
    CUdeviceptr P = g->dBlock[NNC_BLOCK_PARAMS] - (CUdeviceptr)g->lo[NNC_BLOCK_PARAMS];
    CUdeviceptr S = g->dBlock[NNC_BLOCK_STATE] - (CUdeviceptr)g->lo[NNC_BLOCK_STATE];
    /* then the offsets of the buffers it addresses (render_cuda.c: launches share kernels) */
    const CudaLaunchKernel *lk = &m->kt.l[e->kind][k];
    void *args[7 + KERNEL_ARGS_MAX] = {&P, &S, &g->dBlock[NNC_BLOCK_ACT], &Bv, &g->dStep, &g->dErr, &g->dRed};
    for (int j = 0; j < lk->ngroups; j++)
        CU(cu.LaunchKernel(g->gfn[lk->group + j], m->kt.groups[lk->group + j].grid, 1, 1, d.block, 1, 1, 0, g->st, args,
                           NULL));
    if (lk->ngroups) return true;
    for (int j = 0; j < lk->nargs; j++) args[7 + j] = (void *)&lk->args[j];
    CU(cu.LaunchKernel(m->cur->fn[e->kind][k], d.grid, d.grid_y, 1, d.block, 1, 1, 0, m->cur->st, args, NULL));
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
        if (g->nodes[o].dtype != DT_F32 || !cuda_where(m, e, o, &d, &h) || h) continue;
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

/* Where byte `offset` of a block (the runtime's numbering, as output places give it) is on the
 * device: the GPU whose range holds it, and the address there. */
static bool block_at(CudaModel *m, int block, int64_t offset, Gpu **g, CUdeviceptr *d) {
    for (int i = 0; i < NNC_MAX_GPUS; i++) {
        Gpu *x = &m->gpu[i];
        if (!x->used || offset < x->lo[block] || offset >= x->lo[block] + (int64_t)x->bytes[block]) continue;
        *g = x;
        *d = x->dBlock[block] + (CUdeviceptr)(offset - x->lo[block]);
        return true;
    }
    nnc_rt_fail(m->rt, NNC_STATUS_ARG, "internal: byte %lld of block %d is on no GPU", (long long)offset, block);
    return false;
}

static bool use_gpu(CudaModel *m, Gpu *g);

/* A pipelined call's outputs in device memory, copied into its slot as the call leaves them (the
 * next call reuses the activations before the host reads them). */
static bool issue_output_copies(CudaModel *m, const Entry *e, int64_t B) {
    const nnc_model_desc *d = m->desc;
    for (int k = 0; k < d->abi.noutputs[e->kind]; k++) {
        const nnc_place *at = &d->entry[e->kind].outputs[k];
        Gpu *g;
        CUdeviceptr p;
        if (!nnc_rt_on_device(m->rt->ops, at->block)) continue;
        if (!block_at(m, at->block, at->offset, &g, &p) || !use_gpu(m, g)) return false;
        CU(cu.MemcpyDtoHAsync(m->call[m->slot].hOut[e->kind] +
                                  (m->rt->stages[e->kind][k].at - m->rt->stage_lo[e->kind]),
                              p, nnc_rt_bytes(d, &d->abi.outputs[e->kind][k], B), g->st));
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

bool cuda_issue_entry(CudaModel *m, const Entry *e, int64_t B) {
    for (int i = 0; i < NNC_MAX_GPUS; i++) { /* each GPU's step counter and error flag */
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
        if (cuda_launch_is_kernel(L) && m->kt.l[e->kind][k].ngroups < 0) continue; /* issued with its run */
        if (!use_gpu(m, launch_gpu(m, L)) || (m->timing && !cuda_profile_mark(m, e, k, false))) return false;
        bool ok = true;
        switch (L->kind) {
        case L_EW:
        case L_REDUCE:
        case L_ROW:
        case L_ATTENTION: ok = issue_kernel(m, e, k, B); break;
        case L_GEMM: ok = issue_gemm(m, e, L, B); break;
        case L_HELPER: ok = issue_helper_launch(m, e, L, B); break;
        case L_COLLECTIVE: ok = issue_collective(m, e, L, B); break;
        case L_COPY: ok = issue_copy(m, e, L->root, r->in[0], B); break;
        case L_ASSIGN: ok = issue_copy(m, e, r->in[0], r->in[1], B); break;
        }
        ok = ok && (!m->timing || cuda_profile_mark(m, e, k, true));
        for (int j = k; ok && m->check_numerics && j < k + (L->hcount > 1 ? L->hcount : 1); j++)
            ok = check_launch(m, e, j, B); /* a run's launches, after its grouped kernels */
        if (!ok) return false;
    }
    /* gradient accumulation: the device's micro (nnc_rt_call keeps the host's) */
    bool micro = m->p->entry[ENTRY_ACCUM].nlaunch > 0 && (e->kind == ENTRY_TRAIN || e->kind == ENTRY_ACCUM);
    for (int i = 0; micro && i < NNC_MAX_GPUS; i++) {
        Gpu *g = &m->gpu[i];
        if (!g->used || !use_gpu(m, g)) continue;
        int reset = e->kind == ENTRY_TRAIN;
        void *args[] = {&g->dStep, &reset};
        CU(cu.LaunchKernel(g->micro_next, 1, 1, 1, 32, 1, 1, 0, g->st, args, NULL));
    }
    for (int i = 0; m->has_ce[e->kind] && i < NNC_MAX_GPUS; i++) {
        Gpu *g = &m->gpu[i];
        if (!g->used || !use_gpu(m, g)) continue;
        CU(cu.MemcpyDtoHAsync(g->hErr[m->slot + 1], g->dErr, 4 * sizeof(int), g->st));
    }
    return m->slot < 0 || issue_output_copies(m, e, B);
}
