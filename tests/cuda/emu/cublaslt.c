/* cublaslt.c - the emulator's libcublasLt.so.13: the matrix products nnc runs with an epilogue
 * (a bias along D's rows, then ReLU), computed by OpenBLAS.
 *
 * What nnc calls: a handle, an operation descriptor (compute and scale type, the two
 * transposes, the epilogue, the bias's pointer and type), a layout per operand, a preference
 * (workspace and the operands' alignments), the heuristic and cublasLtMatmul.  Each is checked as
 * the real library would: the types (all FP32 with FP32 or TF32 compute, or all FP64), each
 * layout's rows and columns against m, n, k and the transposes, ld >= rows, the bias and every
 * operand range inside one device allocation, and beyond it, that every pointer has the
 * alignment the algorithm was chosen for (the preference's: a real algorithm may assume it).
 * The product is queued on the call's stream (recorded when the stream is being captured).
 * NNC_EMU_LT_NONE=1: the heuristic finds no algorithm, so that the tests run nnc's fallback. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "emu.h"

#define EXPORT __attribute__((visibility("default")))
#define MAGIC 0x6e6e6c74u

enum { CblasColMajor = 102 };
enum { CblasNoTrans = 111, CblasTrans = 112 };
void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
void cblas_dgemm(int, int, int, int, int, int, double, const double *, int, const double *, int, double, double *, int);

struct cublasLtContext {
    unsigned magic;
};

typedef struct {
    unsigned magic;
    cublasComputeType_t compute;
    cudaDataType_t scale, bias_type;
    cublasOperation_t ta, tb;
    cublasLtEpilogue_t epi;
    const void *bias;
} Desc;

typedef struct {
    unsigned magic;
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
} Layout;

typedef struct {
    unsigned magic;
    uint64_t workspace;
    uint32_t align[4]; /* A, B, C, D */
} Pref;

_Static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t), "Desc fits the opaque descriptor");
_Static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "Layout fits the opaque layout");
_Static_assert(sizeof(Pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "Pref fits the opaque preference");

static void *alloc(size_t n) { return calloc(1, n); }

EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = alloc(sizeof **h);
    if (!*h) return CUBLAS_STATUS_ALLOC_FAILED;
    (*h)->magic = MAGIC;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    if (!h || h->magic != MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                               cudaDataType_t scale) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    Desc *x = alloc(sizeof(cublasLtMatmulDescOpaque_t));
    if (!x) return CUBLAS_STATUS_ALLOC_FAILED;
    *x = (Desc){MAGIC, compute, scale, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, NULL};
    *d = (cublasLtMatmulDesc_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    Desc *x = (Desc *)d;
    if (!x || x->magic != MAGIC) return CUBLAS_STATUS_INVALID_VALUE;
    x->magic = 0;
    free(x);
    return CUBLAS_STATUS_SUCCESS;
}

/* The attributes nnc sets; any other is refused, so a new use is noticed here first. */
EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                     const void *buf, size_t n) {
    Desc *x = (Desc *)d;
    if (!x || x->magic != MAGIC || !buf) return CUBLAS_STATUS_INVALID_VALUE;
#define TAKE(field) \
    do { \
        if (n != sizeof x->field) return CUBLAS_STATUS_INVALID_VALUE; \
        memcpy(&x->field, buf, n); \
        return CUBLAS_STATUS_SUCCESS; \
    } while (0)
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: TAKE(ta);
    case CUBLASLT_MATMUL_DESC_TRANSB: TAKE(tb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: TAKE(epi);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: TAKE(bias);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: TAKE(bias_type);
    default:
        fprintf(stderr, "nnc-emu: cublasLtMatmulDescSetAttribute: attribute %d is not emulated\n", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
#undef TAKE
}

EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    if (ld < (int64_t)(rows ? rows : 1) || rows > INT32_MAX || cols > INT32_MAX) {
        fprintf(stderr, "nnc-emu: cublasLtMatrixLayoutCreate: %llu x %llu with ld %lld\n", (unsigned long long)rows,
                (unsigned long long)cols, (long long)ld);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    Layout *x = alloc(sizeof(cublasLtMatrixLayoutOpaque_t));
    if (!x) return CUBLAS_STATUS_ALLOC_FAILED;
    *x = (Layout){MAGIC, type, rows, cols, ld};
    *l = (cublasLtMatrixLayout_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    Layout *x = (Layout *)l;
    if (!x || x->magic != MAGIC) return CUBLAS_STATUS_INVALID_VALUE;
    x->magic = 0;
    free(x);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    Pref *x = alloc(sizeof(cublasLtMatmulPreferenceOpaque_t));
    if (!x) return CUBLAS_STATUS_ALLOC_FAILED;
    *x = (Pref){MAGIC, 0, {256, 256, 256, 256}}; /* the library's defaults */
    *p = (cublasLtMatmulPreference_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    Pref *x = (Pref *)p;
    if (!x || x->magic != MAGIC) return CUBLAS_STATUS_INVALID_VALUE;
    x->magic = 0;
    free(x);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                           size_t n) {
    Pref *x = (Pref *)p;
    if (!x || x->magic != MAGIC || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    int slot = attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES ? 0
        : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES      ? 1
        : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES      ? 2
        : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES      ? 3
                                                                  : -1;
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && n == sizeof x->workspace) {
        memcpy(&x->workspace, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    }
    if (slot >= 0 && n == sizeof x->align[0]) {
        memcpy(&x->align[slot], buf, n);
        uint32_t a = x->align[slot];
        return a && !(a & (a - 1)) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    }
    fprintf(stderr, "nnc-emu: cublasLtMatmulPreferenceSetAttribute: attribute %d (%zu bytes) is not emulated\n",
            (int)attr, n);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

/* What one product needs, checked: its element size (4 or 8), m, n, k. */
static cublasStatus_t shapes(const char *name, const Desc *d, const Layout *a, const Layout *b, const Layout *c,
                             const Layout *dd, size_t *elem, int *m, int *n, int *k) {
    if (!d || d->magic != MAGIC || !a || a->magic != MAGIC || !b || b->magic != MAGIC || !c || c->magic != MAGIC ||
        !dd || dd->magic != MAGIC)
        return CUBLAS_STATUS_INVALID_VALUE;
    const int f32 =
        d->scale == CUDA_R_32F && (d->compute == CUBLAS_COMPUTE_32F || d->compute == CUBLAS_COMPUTE_32F_FAST_TF32);
    const int f64 = d->scale == CUDA_R_64F && d->compute == CUBLAS_COMPUTE_64F;
    const cudaDataType t = f32 ? CUDA_R_32F : CUDA_R_64F;
    if ((!f32 && !f64) || a->type != t || b->type != t || c->type != t || dd->type != t || d->bias_type != t) {
        fprintf(stderr, "nnc-emu: %s: only all-FP32 (FP32 or TF32 compute) or all-FP64 products are emulated\n", name);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->epi != CUBLASLT_EPILOGUE_DEFAULT && d->epi != CUBLASLT_EPILOGUE_BIAS &&
        d->epi != CUBLASLT_EPILOGUE_RELU_BIAS) {
        fprintf(stderr, "nnc-emu: %s: epilogue %d is not emulated\n", name, (int)d->epi);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const int ta = d->ta != CUBLAS_OP_N, tb = d->tb != CUBLAS_OP_N;
    *m = (int)(ta ? a->cols : a->rows), *k = (int)(ta ? a->rows : a->cols), *n = (int)(tb ? b->rows : b->cols);
    const uint64_t bk = tb ? b->cols : b->rows;
    if (bk != (uint64_t)*k || c->rows != (uint64_t)*m || c->cols != (uint64_t)*n || dd->rows != c->rows ||
        dd->cols != c->cols) {
        fprintf(stderr,
                "nnc-emu: %s: layouts disagree: A %llu x %llu%s, B %llu x %llu%s, C %llu x %llu, D %llu x %llu\n", name,
                (unsigned long long)a->rows, (unsigned long long)a->cols, ta ? " (T)" : "", (unsigned long long)b->rows,
                (unsigned long long)b->cols, tb ? " (T)" : "", (unsigned long long)c->rows, (unsigned long long)c->cols,
                (unsigned long long)dd->rows, (unsigned long long)dd->cols);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (d->epi != CUBLASLT_EPILOGUE_DEFAULT && !d->bias) {
        fprintf(stderr, "nnc-emu: %s: a bias epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER\n", name);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    *elem = f32 ? 4 : 8;
    return CUBLAS_STATUS_SUCCESS;
}

/* The algorithm remembers the alignments it was chosen for (data[0..3]). */
EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                                     cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                                     cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                                     cublasLtMatmulPreference_t pref, int want,
                                                     cublasLtMatmulHeuristicResult_t *res, int *found) {
    const Pref *p = (const Pref *)pref;
    if (!h || h->magic != MAGIC || !p || p->magic != MAGIC || want < 1 || !res || !found)
        return CUBLAS_STATUS_INVALID_VALUE;
    size_t elem;
    int m, n, k;
    cublasStatus_t st = shapes("cublasLtMatmulAlgoGetHeuristic", (const Desc *)op, (const Layout *)A, (const Layout *)B,
                               (const Layout *)C, (const Layout *)D, &elem, &m, &n, &k);
    *found = 0;
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const char *none = getenv("NNC_EMU_LT_NONE");
    if (none && !strcmp(none, "1")) return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&res[0], 0, sizeof res[0]);
    for (int i = 0; i < 4; i++) res[0].algo.data[i] = p->align[i];
    res[0].algo.data[4] = MAGIC;
    res[0].workspaceSize = 0;
    res[0].state = CUBLAS_STATUS_SUCCESS;
    res[0].wavesCount = 1;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

typedef struct {
    int dbl, ta, tb, m, n, k, lda, ldb, ldd, relu;
    double alpha, beta;
    const void *A, *B, *C, *bias;
    void *D;
    int ldc;
} Product;

static void run_product(void *ctx) {
    const Product *p = ctx;
    const int ta = p->ta ? CblasTrans : CblasNoTrans, tb = p->tb ? CblasTrans : CblasNoTrans;
    if (p->C != p->D && p->beta != 0)
        for (int j = 0; j < p->n; j++)
            memcpy((char *)p->D + (size_t)j * (size_t)p->ldd * (p->dbl ? 8 : 4),
                   (const char *)p->C + (size_t)j * (size_t)p->ldc * (p->dbl ? 8 : 4), (size_t)p->m * (p->dbl ? 8 : 4));
    if (p->dbl)
        cblas_dgemm(CblasColMajor, ta, tb, p->m, p->n, p->k, p->alpha, p->A, p->lda, p->B, p->ldb, p->beta, p->D,
                    p->ldd);
    else
        cblas_sgemm(CblasColMajor, ta, tb, p->m, p->n, p->k, (float)p->alpha, p->A, p->lda, p->B, p->ldb,
                    (float)p->beta, p->D, p->ldd);
    if (!p->bias) return;
    for (int j = 0; j < p->n; j++)
        for (int i = 0; i < p->m; i++) {
            const size_t at = (size_t)j * (size_t)p->ldd + (size_t)i;
            if (p->dbl) {
                const double v = ((double *)p->D)[at] + ((const double *)p->bias)[i];
                ((double *)p->D)[at] = p->relu && v <= 0 ? 0 : v;
            } else {
                const float v = ((float *)p->D)[at] + ((const float *)p->bias)[i];
                ((float *)p->D)[at] = p->relu && v <= 0 ? 0 : v;
            }
        }
}

static size_t span(uint64_t rows, uint64_t cols, int64_t ld, size_t elem) {
    return rows && cols ? ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * elem : 0;
}

EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,
                                     cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                                     const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                                     cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *ws,
                                     size_t ws_bytes, cudaStream_t stream) {
    const char *name = "cublasLtMatmul";
    if (!h || h->magic != MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!alpha || !beta || !algo || algo->data[4] != MAGIC) {
        fprintf(stderr, "nnc-emu: %s: no alpha, beta or algorithm from cublasLtMatmulAlgoGetHeuristic\n", name);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const Desc *d = (const Desc *)op;
    const Layout *la = (const Layout *)Adesc, *lb = (const Layout *)Bdesc, *lc = (const Layout *)Cdesc,
                 *ld = (const Layout *)Ddesc;
    size_t elem;
    int m, n, k;
    cublasStatus_t st = shapes(name, d, la, lb, lc, ld, &elem, &m, &n, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const void *ptr[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptr[i] % algo->data[i]) {
            fprintf(stderr,
                    "nnc-emu: %s: operand %c at %p is not aligned to the %llu bytes its algorithm was chosen for\n",
                    name, "ABCD"[i], ptr[i], (unsigned long long)algo -> data[i]);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    if (ws_bytes && nnc_emu_check_range(ws, ws_bytes, "cublasLtMatmul workspace")) return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    const double al = elem == 4 ? *(const float *)alpha : *(const double *)alpha;
    const double be = elem == 4 ? *(const float *)beta : *(const double *)beta;
    char what[64];
    snprintf(what, sizeof what, "%s operand A", name);
    if (k && nnc_emu_check_range(A, span(la->rows, la->cols, la->ld, elem), what)) return CUBLAS_STATUS_INVALID_VALUE;
    snprintf(what, sizeof what, "%s operand B", name);
    if (k && nnc_emu_check_range(B, span(lb->rows, lb->cols, lb->ld, elem), what)) return CUBLAS_STATUS_INVALID_VALUE;
    snprintf(what, sizeof what, "%s operand C", name);
    if (be != 0 && nnc_emu_check_range(C, span(lc->rows, lc->cols, lc->ld, elem), what))
        return CUBLAS_STATUS_INVALID_VALUE;
    snprintf(what, sizeof what, "%s operand D", name);
    if (nnc_emu_check_range(D, span(ld->rows, ld->cols, ld->ld, elem), what)) return CUBLAS_STATUS_INVALID_VALUE;
    const int epi = d->epi != CUBLASLT_EPILOGUE_DEFAULT;
    if (epi && nnc_emu_check_range(d->bias, (size_t)m * elem, "cublasLtMatmul bias"))
        return CUBLAS_STATUS_INVALID_VALUE;
    Product p = {.dbl = elem == 8, .ta = d->ta != CUBLAS_OP_N, .tb = d->tb != CUBLAS_OP_N, .m = m, .n = n, .k = k};
    p.lda = (int)la->ld, p.ldb = (int)lb->ld, p.ldc = (int)lc->ld, p.ldd = (int)ld->ld;
    p.relu = d->epi == CUBLASLT_EPILOGUE_RELU_BIAS;
    p.alpha = al, p.beta = be, p.A = A, p.B = B, p.C = C, p.D = D, p.bias = epi ? d->bias : NULL;
    const char *kind = !epi ? "none" : p.relu ? "relu_bias" : "bias";
    nnc_emu_trace((CUstream)stream, "gemm %s m=%d n=%d k=%d epilogue=%s", name, m, n, k, kind);
    return nnc_emu_enqueue_host((CUstream)stream, run_product, &p, sizeof p) ? CUBLAS_STATUS_EXECUTION_FAILED
                                                                             : CUBLAS_STATUS_SUCCESS;
}
