/* cublas.c - the emulator's libcublas.so.13: column-major GEMMs computed by OpenBLAS.
 *
 * Each call checks what the real library checks (the handle, the operations, m, n, k >= 0,
 * the leading dimensions against the rows of each operand as stored, a workspace set with
 * cublasSetWorkspace_v2 when called under stream capture) and, beyond it, that every operand
 * range lies inside one device allocation; then it is queued on the handle's stream (the
 * legacy stream unless cublasSetStream_v2 says otherwise) and runs when that stream does.
 * alpha and beta are read at the call (host pointer mode). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublas_v2.h>

#include "emu.h"
#include "../../../io/half.h"

#define EXPORT __attribute__((visibility("default")))
#define MAGIC 0x6e6e6362u

/* OpenBLAS's CBLAS, declared here so no cblas.h is needed */
enum { CblasColMajor = 102 };
enum { CblasNoTrans = 111, CblasTrans = 112 };
void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
void cblas_dgemm(int, int, int, int, int, int, double, const double *, int, const double *, int, double, double *, int);

struct cublasContext {
    unsigned magic;
    CUstream stream;
    void *workspace;
    size_t workspace_bytes;
};

static int valid(cublasHandle_t h) { return h && h->magic == MAGIC; }

EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = calloc(1, sizeof **h);
    if (!*h) return CUBLAS_STATUS_ALLOC_FAILED;
    (*h)->magic = MAGIC;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = (CUstream)s;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t *s) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    *s = (cudaStream_t)h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    (void)mode;   /* TF32 is computed in full FP32 here */
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && (!ws || nnc_emu_check_range(ws, bytes, "cublasSetWorkspace_v2"))) return CUBLAS_STATUS_INVALID_VALUE;
    h->workspace = ws;
    h->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

typedef struct {
    int dbl, ta, tb, m, n, k, lda, ldb, ldc;
    double alpha, beta;
    const void *A, *B;
    void *C;
    int half_ab, half_c;     /* GemmEx: A and B (and C) are bf16 (1) or f16 (2): computed in FP32 */
} Gemm;

/* bf16 and f16 to and from float, round to nearest even: io/half.h, the host side of the
 * generated kernels' conversions. */
static float half_to_f32(uint16_t h, int kind) { return kind == 1 ? nnc_bf16_to_f32(h) : nnc_f16_to_f32(h); }
static uint16_t f32_to_half(float f, int kind) { return kind == 1 ? nnc_f32_to_bf16(f) : nnc_f32_to_f16(f); }

/* A column-major half operand (rows x cols, leading dimension ld) widened into floats. */
static float *widen(const void *p, int rows, int cols, int ld, int kind) {
    size_t n = rows && cols ? (size_t)(cols - 1) * (size_t)ld + (size_t)rows : 0;
    float *w = malloc((n ? n : 1) * sizeof *w);
    if (!w) {
        fprintf(stderr, "nnc-emu: out of host memory\n");
        abort();
    }
    for (size_t i = 0; i < n; i++) w[i] = half_to_f32(((const uint16_t *)p)[i], kind);
    return w;
}

static void run_gemm_half(const Gemm *g) {
    int ta = g->ta ? CblasTrans : CblasNoTrans, tb = g->tb ? CblasTrans : CblasNoTrans;
    float *A = widen(g->A, g->ta ? g->k : g->m, g->ta ? g->m : g->k, g->lda, g->half_ab);
    float *B = widen(g->B, g->tb ? g->n : g->k, g->tb ? g->k : g->n, g->ldb, g->half_ab);
    float *C = g->half_c ? widen(g->C, g->m, g->n, g->ldc, g->half_c) : g->C;
    cblas_sgemm(CblasColMajor, ta, tb, g->m, g->n, g->k, (float)g->alpha, A, g->lda, B, g->ldb, (float)g->beta, C, g->ldc);
    if (g->half_c)
        for (int j = 0; j < g->n; j++)
            for (int i = 0; i < g->m; i++) {
                size_t at = (size_t)j * (size_t)g->ldc + (size_t)i;
                ((uint16_t *)g->C)[at] = f32_to_half(C[at], g->half_c);
            }
    free(A);
    free(B);
    if (g->half_c) free(C);
}

/* NNC_EMU_FAULT_GEMM=N: the N-th GEMM this process runs (from 1) comes out with C[0] off by
 * 1e-3 relative -- a planted wrong result, so the tests can show that nnc's --check-against
 * names the product that went wrong. */
static void plant_fault(const Gemm *g) {
    static long count;
    const char *want = getenv("NNC_EMU_FAULT_GEMM");
    if (!want || ++count != atol(want) || !g->m || !g->n) return;
    if (g->dbl) ((double *)g->C)[0] += 1e-3 * (1 + fabs(((double *)g->C)[0]));
    else ((float *)g->C)[0] += 1e-3f * (1 + fabsf(((float *)g->C)[0]));
}

static void run_gemm(void *ctx) {
    const Gemm *g = ctx;
    if (g->half_ab) {
        run_gemm_half(g);
        return;
    }
    int ta = g->ta ? CblasTrans : CblasNoTrans, tb = g->tb ? CblasTrans : CblasNoTrans;
    if (g->dbl)
        cblas_dgemm(CblasColMajor, ta, tb, g->m, g->n, g->k, g->alpha, g->A, g->lda, g->B, g->ldb, g->beta, g->C, g->ldc);
    else
        cblas_sgemm(CblasColMajor, ta, tb, g->m, g->n, g->k, (float)g->alpha, g->A, g->lda, g->B, g->ldb, (float)g->beta,
                    g->C, g->ldc);
    plant_fault(g);
}

static int op_ok(cublasOperation_t o) { return o == CUBLAS_OP_N || o == CUBLAS_OP_T || o == CUBLAS_OP_C; }
static int imax(int a, int b) { return a > b ? a : b; }

/* The bytes of a column-major rows x cols operand with leading dimension ld. */
static size_t span(int rows, int cols, int ld, size_t elem) {
    return rows && cols ? ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * elem : 0;
}

static cublasStatus_t gemm_types(const char *name, cublasHandle_t h, cublasOperation_t oa, cublasOperation_t ob, int m,
                                 int n, int k, double alpha, const void *A, int lda, const void *B, int ldb, double beta,
                                 void *C, int ldc, size_t elem, int half_ab, int half_c);

static cublasStatus_t gemm(const char *name, cublasHandle_t h, cublasOperation_t oa, cublasOperation_t ob, int m, int n,
                           int k, double alpha, const void *A, int lda, const void *B, int ldb, double beta, void *C,
                           int ldc, size_t elem) {
    return gemm_types(name, h, oa, ob, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, elem, 0, 0);
}

/* elem: FP32/FP64 operands' size; with half_ab (and half_c) A and B (and C) are 2 bytes. */
static cublasStatus_t gemm_types(const char *name, cublasHandle_t h, cublasOperation_t oa, cublasOperation_t ob, int m,
                                 int n, int k, double alpha, const void *A, int lda, const void *B, int ldb, double beta,
                                 void *C, int ldc, size_t elem, int half_ab, int half_c) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    int ra = oa == CUBLAS_OP_N ? m : k, ca = oa == CUBLAS_OP_N ? k : m;   /* A as stored */
    int rb = ob == CUBLAS_OP_N ? k : n, cb = ob == CUBLAS_OP_N ? n : k;
    if (!op_ok(oa) || !op_ok(ob) || m < 0 || n < 0 || k < 0 || lda < imax(1, ra) || ldb < imax(1, rb) ||
        ldc < imax(1, m)) {
        fprintf(stderr, "nnc-emu: %s: invalid value: m=%d n=%d k=%d lda=%d (needs >= %d) ldb=%d (needs >= %d) ldc=%d "
                "(needs >= %d)\n", name, m, n, k, lda, imax(1, ra), ldb, imax(1, rb), ldc, imax(1, m));
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (nnc_emu_capturing(h->stream) && !h->workspace) {
        fprintf(stderr, "nnc-emu: %s under stream capture without cublasSetWorkspace_v2\n", name);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    char what[64];
    size_t eab = half_ab ? 2 : elem, ec = half_c ? 2 : elem;
    snprintf(what, sizeof what, "%s operand A", name);
    if (k && nnc_emu_check_range(A, span(ra, ca, lda, eab), what)) return CUBLAS_STATUS_INVALID_VALUE;
    snprintf(what, sizeof what, "%s operand B", name);
    if (k && nnc_emu_check_range(B, span(rb, cb, ldb, eab), what)) return CUBLAS_STATUS_INVALID_VALUE;
    snprintf(what, sizeof what, "%s operand C", name);
    if (nnc_emu_check_range(C, span(m, n, ldc, ec), what)) return CUBLAS_STATUS_INVALID_VALUE;
    Gemm g = {elem == 8, oa != CUBLAS_OP_N, ob != CUBLAS_OP_N, m, n, k, lda, ldb, ldc, alpha, beta, A, B, C,
              half_ab, half_c};
    nnc_emu_trace(h->stream, "gemm %s m=%d n=%d k=%d", name, m, n, k);
    return nnc_emu_enqueue_host(h->stream, run_gemm, &g, sizeof g) ? CUBLAS_STATUS_EXECUTION_FAILED
                                                                    : CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t oa, cublasOperation_t ob, int m, int n, int k,
                                     const float *alpha, const float *A, int lda, const float *B, int ldb,
                                     const float *beta, float *C, int ldc) {
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    return gemm("cublasSgemm", h, oa, ob, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc, sizeof(float));
}

EXPORT cublasStatus_t cublasDgemm_v2(cublasHandle_t h, cublasOperation_t oa, cublasOperation_t ob, int m, int n, int k,
                                     const double *alpha, const double *A, int lda, const double *B, int ldb,
                                     const double *beta, double *C, int ldc) {
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    return gemm("cublasDgemm", h, oa, ob, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc, sizeof(double));
}

/* The strided batched forms: `count` products at element strides sa, sb, sc (0: one matrix
 * shared by every product), each checked and queued as one gemm. */
static cublasStatus_t gemm_batched(const char *name, cublasHandle_t h, cublasOperation_t oa, cublasOperation_t ob, int m,
                                   int n, int k, double alpha, const char *A, int lda, long long sa, const char *B,
                                   int ldb, long long sb, double beta, char *C, int ldc, long long sc, int count,
                                   size_t elem) {
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (count < 0 || sa < 0 || sb < 0 || sc < 0) {
        fprintf(stderr, "nnc-emu: %s: invalid value: batchCount=%d strides %lld %lld %lld\n", name, count, sa, sb, sc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    for (int i = 0; i < count; i++) {
        cublasStatus_t st = gemm(name, h, oa, ob, m, n, k, alpha, A + (size_t)(i * sa) * elem, lda,
                                 B + (size_t)(i * sb) * elem, ldb, beta, C + (size_t)(i * sc) * elem, ldc, elem);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t oa, cublasOperation_t ob, int m,
                                                int n, int k, const float *alpha, const float *A, int lda,
                                                long long sa, const float *B, int ldb, long long sb,
                                                const float *beta, float *C, int ldc, long long sc, int count) {
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    return gemm_batched("cublasSgemmStridedBatched", h, oa, ob, m, n, k, *alpha, (const char *)A, lda, sa,
                        (const char *)B, ldb, sb, *beta, (char *)C, ldc, sc, count, sizeof(float));
}

EXPORT cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t oa, cublasOperation_t ob, int m,
                                                int n, int k, const double *alpha, const double *A, int lda,
                                                long long sa, const double *B, int ldb, long long sb,
                                                const double *beta, double *C, int ldc, long long sc, int count) {
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    return gemm_batched("cublasDgemmStridedBatched", h, oa, ob, m, n, k, *alpha, (const char *)A, lda, sa,
                        (const char *)B, ldb, sb, *beta, (char *)C, ldc, sc, count, sizeof(double));
}

static int half_kind(cudaDataType t) { return t == CUDA_R_16BF ? 1 : t == CUDA_R_16F ? 2 : 0; }

/* The strided batched GemmEx, for BF16/F16 inputs with FP32 compute (FP32 or half C). */
EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t oa, cublasOperation_t ob, int m,
                                                 int n, int k, const void *alpha, const void *A, cudaDataType ta,
                                                 int lda, long long sa, const void *B, cudaDataType tb, int ldb,
                                                 long long sb, const void *beta, void *C, cudaDataType tc, int ldc,
                                                 long long sc, int count, cublasComputeType_t compute,
                                                 cublasGemmAlgo_t algo) {
    (void)algo;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    int hab = half_kind(ta), hc = half_kind(tc);
    if (!hab || tb != ta || !(tc == ta || tc == CUDA_R_32F) || compute != CUBLAS_COMPUTE_32F) {
        fprintf(stderr, "nnc-emu: cublasGemmStridedBatchedEx: only BF16/F16 inputs with FP32 compute are emulated\n");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (count < 0 || sa < 0 || sb < 0 || sc < 0) return CUBLAS_STATUS_INVALID_VALUE;
    size_t ec = hc ? 2 : 4;
    for (int i = 0; i < count; i++) {
        cublasStatus_t st = gemm_types("cublasGemmStridedBatchedEx", h, oa, ob, m, n, k, *(const float *)alpha,
                                       (const char *)A + (size_t)(i * sa) * 2, lda, (const char *)B + (size_t)(i * sb) * 2,
                                       ldb, *(const float *)beta, (char *)C + (size_t)(i * sc) * ec, ldc, 4, hab, hc);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* GemmEx for the types nnc could use: all FP32 (FP32 or TF32 compute) or all FP64. */
EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t oa, cublasOperation_t ob, int m, int n, int k,
                                   const void *alpha, const void *A, cudaDataType ta, int lda, const void *B,
                                   cudaDataType tb, int ldb, const void *beta, void *C, cudaDataType tc, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    int f32 = ta == CUDA_R_32F && tb == CUDA_R_32F && tc == CUDA_R_32F &&
              (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_FAST_TF32);
    int f64 = ta == CUDA_R_64F && tb == CUDA_R_64F && tc == CUDA_R_64F && compute == CUBLAS_COMPUTE_64F;
    int hab = half_kind(ta), hc = half_kind(tc);
    if (hab && tb == ta && (tc == ta || tc == CUDA_R_32F) && compute == CUBLAS_COMPUTE_32F) {
        double al = *(const float *)alpha, be = *(const float *)beta;
        return gemm_types("cublasGemmEx", h, oa, ob, m, n, k, al, A, lda, B, ldb, be, C, ldc, 4, hab, hc);
    }
    if (!f32 && !f64) {
        fprintf(stderr, "nnc-emu: cublasGemmEx: only all-FP32, all-FP64, or BF16/F16 inputs with FP32 compute are "
                        "emulated\n");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    double al = f32 ? *(const float *)alpha : *(const double *)alpha, be = f32 ? *(const float *)beta : *(const double *)beta;
    return gemm("cublasGemmEx", h, oa, ob, m, n, k, al, A, lda, B, ldb, be, C, ldc, f32 ? 4 : 8);
}
