/* cudnn.c - the emulator's libcudnn.so.9: cuDNN's legacy convolutions, computed by reference loops.
 *
 * nnc's CUDA target calls cudnnConvolutionForward, ...BackwardData and ...BackwardFilter on NCHW
 * FP32 tensors (codegen/cuda/cuda_dnn.c).  This stand-in honours what nnc passes and refuses,
 * loudly (a line on stderr and the status the real library returns), anything it does not
 * emulate or that the real one would reject:
 *   - descriptors: created and set, NCHW, FLOAT, cross-correlation (CUDNN_CONVOLUTION flips the
 *     filter: not emulated), FLOAT compute, groups that divide the channels, x, w and y that agree
 *     (y's shape must be cudnnGetConvolution2dForwardOutputDim's);
 *   - the algorithm: forward IMPLICIT_GEMM, IMPLICIT_PRECOMP_GEMM and GEMM, backward data ALGO_0 and
 *     ALGO_1, backward filter ALGO_0, ALGO_1 and ALGO_3 are computed; FFT and Winograd, which the
 *     heuristics also offer (as the real ones do), are refused;
 *   - pointers: alpha and beta given, data aligned to the element, every operand and the workspace
 *     inside one device allocation, the output overlapping neither an input nor the workspace;
 *   - the workspace: at least what cudnnGet*WorkspaceSize says the algorithm needs
 *     (CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT otherwise).  The algorithms that ask for one use
 *     it (precomputed offsets, one sample's columns, a sum), after filling it with NaN bytes.
 * Each call is queued on the handle's stream (the legacy stream unless cudnnSetStream says
 * otherwise) with its descriptors copied, as the real library bakes them into its kernels, and
 * runs when the stream does.  Every algorithm sums each output's products in the same order in
 * FP32; with a math type other than CUDNN_FMA_MATH the operands are first rounded to TF32
 * (round to nearest even, 10 bits), as tensor cores take FP32 data.  The heuristics
 * (cudnnGet*Algorithm_v7) rank Winograd, FFT and the atomic (non-deterministic) algorithms first,
 * so that a caller that takes the first answer blindly is caught.
 *
 * Test hooks: NNC_EMU_CUDNN_FAIL=FUNCTION makes that function return CUDNN_STATUS_NOT_SUPPORTED;
 * NNC_EMU_CUDNN_TRACE=FILE appends a line per convolution as it runs on its stream (the function,
 * algorithm, math, shapes and workspace). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "../../../codegen/cuda/cudnn_api.h"

#define EXPORT __attribute__((visibility("default")))
#define MAGIC 0x6e6e646eu
#define VERSION 90000 /* 9.0.0: nnc checks the major version */

struct cudnnContext {
    unsigned magic;
    CUstream stream;
};
struct cudnnTensorStruct {
    unsigned magic;
    int set, format, type, n, c, h, w;
};
struct cudnnFilterStruct {
    unsigned magic;
    int set, type, format, k, c, h, w;
};
struct cudnnConvolutionStruct {
    unsigned magic;
    int set, ph, pw, sh, sw, dh, dw, mode, type, groups, math;
};

/* A convolution's geometry: x [n, c, h, w], w [k, cg, r, s], y [n, k, p, q], groups g. */
typedef struct {
    int n, c, h, w, k, cg, r, s, p, q, ph, pw, sh, sw, dh, dw, g;
} Geo;

static DnnStatus say(DnnStatus st, const char *fn, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nnc-emu: %s: ", fn);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return st;
}

/* NNC_EMU_CUDNN_FAIL=fn: fn refuses, so the tests can show nnc falls back to im2col. */
#define REFUSE() \
    do { \
        const char *f_ = getenv("NNC_EMU_CUDNN_FAIL"); \
        if (f_ && !strcmp(f_, __func__)) \
            return say(DNN_STATUS_NOT_SUPPORTED, __func__, "refused (NNC_EMU_CUDNN_FAIL)"); \
    } while (0)

static void *alloc(size_t bytes) {
    void *p = calloc(1, bytes);
    if (!p) {
        fprintf(stderr, "nnc-emu: out of host memory\n");
        abort();
    }
    return p;
}

/* ---- handles and descriptors ---------------------------------------------------------------- */

EXPORT size_t cudnnGetVersion(void) { return VERSION; }

EXPORT const char *cudnnGetErrorString(DnnStatus s) {
    switch (s) {
    case DNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case DNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case DNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case DNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case DNN_STATUS_BAD_PARAM_MISALIGNED_POINTER: return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
    case DNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT: return "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT";
    case DNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case DNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_UNKNOWN";
    }
}

EXPORT DnnStatus cudnnCreate(DnnHandle *h) {
    REFUSE();
    if (!h) return DNN_STATUS_BAD_PARAM_NULL_POINTER;
    *h = alloc(sizeof **h);
    (*h)->magic = MAGIC;
    return DNN_STATUS_SUCCESS;
}

static int valid(DnnHandle h) { return h && h->magic == MAGIC; }

EXPORT DnnStatus cudnnDestroy(DnnHandle h) {
    if (!valid(h)) return DNN_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    free(h);
    return DNN_STATUS_SUCCESS;
}

EXPORT DnnStatus cudnnSetStream(DnnHandle h, void *stream) {
    REFUSE();
    if (!valid(h)) return DNN_STATUS_NOT_INITIALIZED;
    h->stream = (CUstream)stream;
    return DNN_STATUS_SUCCESS;
}

#define DESC_FUNCS(Type, Create, Destroy) \
    EXPORT DnnStatus Create(Type *d) { \
        REFUSE(); \
        if (!d) return DNN_STATUS_BAD_PARAM_NULL_POINTER; \
        *d = alloc(sizeof **d); \
        (*d)->magic = MAGIC; \
        return DNN_STATUS_SUCCESS; \
    } \
    EXPORT DnnStatus Destroy(Type d) { \
        if (!d || d->magic != MAGIC) return DNN_STATUS_BAD_PARAM; \
        d->magic = 0; \
        free(d); \
        return DNN_STATUS_SUCCESS; \
    }
DESC_FUNCS(DnnTensorDesc, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor)
DESC_FUNCS(DnnFilterDesc, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor)
DESC_FUNCS(DnnConvDesc, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor)

static const char *type_name(int t) {
    return t == DNN_DATA_FLOAT ? "FLOAT" : t == DNN_DATA_DOUBLE ? "DOUBLE" : t == DNN_DATA_HALF ? "HALF" : "another";
}

/* What the emulator computes: NCHW FLOAT data (the real library takes more; nnc passes no more). */
static DnnStatus layout_ok(const char *fn, int format, int type) {
    if (format != DNN_TENSOR_NCHW) return say(DNN_STATUS_NOT_SUPPORTED, fn, "format %d: only NCHW is emulated", format);
    if (type != DNN_DATA_FLOAT)
        return say(DNN_STATUS_NOT_SUPPORTED, fn, "data type %s: only FLOAT is emulated", type_name(type));
    return DNN_STATUS_SUCCESS;
}

EXPORT DnnStatus cudnnSetTensor4dDescriptor(DnnTensorDesc d, int format, int type, int n, int c, int h, int w) {
    REFUSE();
    if (!d || d->magic != MAGIC) return DNN_STATUS_BAD_PARAM;
    if (n < 1 || c < 1 || h < 1 || w < 1)
        return say(DNN_STATUS_BAD_PARAM, __func__, "dimensions %d x %d x %d x %d", n, c, h, w);
    DnnStatus st = layout_ok(__func__, format, type);
    if (st) return st;
    *d = (struct cudnnTensorStruct){MAGIC, 1, format, type, n, c, h, w};
    return DNN_STATUS_SUCCESS;
}

EXPORT DnnStatus cudnnSetFilter4dDescriptor(DnnFilterDesc d, int type, int format, int k, int c, int h, int w) {
    REFUSE();
    if (!d || d->magic != MAGIC) return DNN_STATUS_BAD_PARAM;
    if (k < 1 || c < 1 || h < 1 || w < 1)
        return say(DNN_STATUS_BAD_PARAM, __func__, "dimensions %d x %d x %d x %d", k, c, h, w);
    DnnStatus st = layout_ok(__func__, format, type);
    if (st) return st;
    *d = (struct cudnnFilterStruct){MAGIC, 1, type, format, k, c, h, w};
    return DNN_STATUS_SUCCESS;
}

EXPORT DnnStatus cudnnSetConvolution2dDescriptor(DnnConvDesc d, int ph, int pw, int sh, int sw, int dh, int dw,
                                                 int mode, int type) {
    REFUSE();
    if (!d || d->magic != MAGIC) return DNN_STATUS_BAD_PARAM;
    if (ph < 0 || pw < 0 || sh < 1 || sw < 1 || dh < 1 || dw < 1)
        return say(DNN_STATUS_BAD_PARAM, __func__, "padding %d,%d stride %d,%d dilation %d,%d", ph, pw, sh, sw, dh, dw);
    if (mode != DNN_CROSS_CORRELATION)
        return say(DNN_STATUS_NOT_SUPPORTED, __func__,
                   "mode %d: only CUDNN_CROSS_CORRELATION is emulated (CUDNN_CONVOLUTION flips the filter)", mode);
    if (type != DNN_DATA_FLOAT)
        return say(DNN_STATUS_NOT_SUPPORTED, __func__, "compute type %s: only FLOAT is emulated", type_name(type));
    int groups = d->groups ? d->groups : 1, math = d->math; /* set before or after; a new one: 1, DEFAULT */
    *d = (struct cudnnConvolutionStruct){MAGIC, 1, ph, pw, sh, sw, dh, dw, mode, type, groups, math};
    return DNN_STATUS_SUCCESS;
}

EXPORT DnnStatus cudnnSetConvolutionGroupCount(DnnConvDesc d, int groups) {
    REFUSE();
    if (!d || d->magic != MAGIC || groups < 1) return DNN_STATUS_BAD_PARAM;
    d->groups = groups;
    return DNN_STATUS_SUCCESS;
}

EXPORT DnnStatus cudnnSetConvolutionMathType(DnnConvDesc d, int math) {
    REFUSE();
    if (!d || d->magic != MAGIC || math < DNN_DEFAULT_MATH || math > DNN_FMA_MATH) return DNN_STATUS_BAD_PARAM;
    d->math = math;
    return DNN_STATUS_SUCCESS;
}

/* ---- the geometry, checked as the real library checks it ---------------------------------- */

static int out_dim(int in, int pad, int k, int dil, int stride) {
    return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

static DnnStatus geometry(const char *fn, DnnTensorDesc x, DnnFilterDesc w, DnnConvDesc cv, DnnTensorDesc y, Geo *g) {
    if (!x || x->magic != MAGIC || !x->set || !w || w->magic != MAGIC || !w->set || !cv || cv->magic != MAGIC ||
        !cv->set || (y && (y->magic != MAGIC || !y->set)))
        return say(DNN_STATUS_BAD_PARAM, fn, "a descriptor that was never created or set");
    if (x->c != w->c * cv->groups || w->k % cv->groups)
        return say(DNN_STATUS_BAD_PARAM, fn, "x has %d channels and w is [%d, %d, ...] in %d groups", x->c, w->k, w->c,
                   cv->groups);
    *g = (Geo){x->n,
               x->c,
               x->h,
               x->w,
               w->k,
               w->c,
               w->h,
               w->w,
               out_dim(x->h, cv->ph, w->h, cv->dh, cv->sh),
               out_dim(x->w, cv->pw, w->w, cv->dw, cv->sw),
               cv->ph,
               cv->pw,
               cv->sh,
               cv->sw,
               cv->dh,
               cv->dw,
               cv->groups};
    if (g->p < 1 || g->q < 1) return say(DNN_STATUS_BAD_PARAM, fn, "the filter is larger than the padded input");
    if (y && (y->n != g->n || y->c != g->k || y->h != g->p || y->w != g->q))
        return say(DNN_STATUS_BAD_PARAM, fn,
                   "the output descriptor is [%d, %d, %d, %d], the convolution makes [%d, %d, %d, %d]", y->n, y->c,
                   y->h, y->w, g->n, g->k, g->p, g->q);
    return DNN_STATUS_SUCCESS;
}

EXPORT DnnStatus cudnnGetConvolution2dForwardOutputDim(DnnConvDesc cv, DnnTensorDesc x, DnnFilterDesc w, int *n, int *c,
                                                       int *h, int *wo) {
    REFUSE();
    Geo g = {0};
    DnnStatus st = geometry(__func__, x, w, cv, NULL, &g);
    if (st) return st;
    *n = g.n, *c = g.k, *h = g.p, *wo = g.q;
    return DNN_STATUS_SUCCESS;
}

/* ---- algorithms: what each needs, and the heuristics' ranking ------------------------------- */

enum { FWD, DATA, FILTER };
static const char *const fn_names[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                       "cudnnConvolutionBackwardFilter"};

/* The workspace algo needs, 0 for none; -1 when the emulator does not compute it. */
static long long workspace(int dir, int algo, const Geo *g) {
    long long taps = (long long)g->cg * g->r * g->s;
    if (dir == FWD)
        return algo == DNN_FWD_IMPLICIT_GEMM        ? 0
            : algo == DNN_FWD_IMPLICIT_PRECOMP_GEMM ? taps * (long long)sizeof(long long)
            : algo == DNN_FWD_GEMM                  ? taps * g->p * g->q * (long long)sizeof(float)
                                                    : -1;
    if (dir == DATA)
        return algo == DNN_BWD_DATA_0 ? 0 : algo == DNN_BWD_DATA_1 ? (long long)g->c * g->h * g->w * 4 : -1;
    return algo == DNN_BWD_FILTER_0 || algo == DNN_BWD_FILTER_3 ? 0
        : algo == DNN_BWD_FILTER_1                              ? (long long)g->k * taps * 4
                                                                : -1;
}

/* Heuristics: the first choices are ones a careful caller skips (not emulated, or atomics). */
static const int rank_fwd[] = {DNN_FWD_WINOGRAD_NONFUSED, DNN_FWD_FFT, DNN_FWD_IMPLICIT_PRECOMP_GEMM,
                               DNN_FWD_IMPLICIT_GEMM, DNN_FWD_GEMM};
static const int rank_data[] = {DNN_BWD_DATA_0, DNN_BWD_DATA_WINOGRAD_NONFUSED, DNN_BWD_DATA_1};
static const int rank_filter[] = {DNN_BWD_FILTER_0, DNN_BWD_FILTER_3, DNN_BWD_FILTER_1};

static int deterministic(int dir, int algo) {
    return !(dir == DATA && algo == DNN_BWD_DATA_0) &&
        !(dir == FILTER && (algo == DNN_BWD_FILTER_0 || algo == DNN_BWD_FILTER_3));
}

/* Every ranked algorithm with the descriptor's math type, then (when that allows tensor cores)
 * with FMA math, as the real heuristics list both. */
static DnnStatus heuristics(int dir, const Geo *g, int math, int requested, int *returned, DnnAlgoPerf *out) {
    const int *rank = dir == FWD ? rank_fwd : dir == DATA ? rank_data : rank_filter;
    int n = dir == FWD ? 5 : 3, got = 0;
    if (!returned || !out || requested < 1) return DNN_STATUS_BAD_PARAM;
    for (int pass = 0; pass < (math == DNN_FMA_MATH ? 1 : 2); pass++)
        for (int i = 0; i < n && got < requested; i++, got++) {
            long long ws = workspace(dir, rank[i], g);
            out[got] = (DnnAlgoPerf){rank[i],
                                     DNN_STATUS_SUCCESS,
                                     (float)(got + 1),
                                     (size_t)(ws < 0 ? (long long)g->n * g->c * g->h * g->w * 8 : ws),
                                     deterministic(dir, rank[i]) ? DNN_DETERMINISTIC : DNN_NON_DETERMINISTIC,
                                     pass ? DNN_FMA_MATH : math,
                                     {0, 0, 0}};
        }
    *returned = got;
    return DNN_STATUS_SUCCESS;
}

EXPORT DnnStatus cudnnGetConvolutionForwardAlgorithm_v7(DnnHandle h, DnnTensorDesc x, DnnFilterDesc w, DnnConvDesc cv,
                                                        DnnTensorDesc y, int requested, int *returned,
                                                        DnnAlgoPerf *perf) {
    REFUSE();
    Geo g = {0};
    DnnStatus st = valid(h) ? geometry(__func__, x, w, cv, y, &g) : DNN_STATUS_NOT_INITIALIZED;
    return st ? st : heuristics(FWD, &g, cv->math, requested, returned, perf);
}

EXPORT DnnStatus cudnnGetConvolutionBackwardDataAlgorithm_v7(DnnHandle h, DnnFilterDesc w, DnnTensorDesc dy,
                                                             DnnConvDesc cv, DnnTensorDesc dx, int requested,
                                                             int *returned, DnnAlgoPerf *perf) {
    REFUSE();
    Geo g = {0};
    DnnStatus st = valid(h) ? geometry(__func__, dx, w, cv, dy, &g) : DNN_STATUS_NOT_INITIALIZED;
    return st ? st : heuristics(DATA, &g, cv->math, requested, returned, perf);
}

EXPORT DnnStatus cudnnGetConvolutionBackwardFilterAlgorithm_v7(DnnHandle h, DnnTensorDesc x, DnnTensorDesc dy,
                                                               DnnConvDesc cv, DnnFilterDesc dw, int requested,
                                                               int *returned, DnnAlgoPerf *perf) {
    REFUSE();
    Geo g = {0};
    DnnStatus st = valid(h) ? geometry(__func__, x, dw, cv, dy, &g) : DNN_STATUS_NOT_INITIALIZED;
    return st ? st : heuristics(FILTER, &g, cv->math, requested, returned, perf);
}

static DnnStatus size_of(const char *fn, int dir, DnnHandle h, const Geo *g, DnnStatus st, int algo, size_t *bytes) {
    if (st) return st;
    if (!valid(h)) return DNN_STATUS_NOT_INITIALIZED;
    if (!bytes) return DNN_STATUS_BAD_PARAM_NULL_POINTER;
    long long ws = workspace(dir, algo, g);
    if (ws < 0) return say(DNN_STATUS_NOT_SUPPORTED, fn, "algorithm %d is not emulated", algo);
    *bytes = (size_t)ws;
    return DNN_STATUS_SUCCESS;
}

EXPORT DnnStatus cudnnGetConvolutionForwardWorkspaceSize(DnnHandle h, DnnTensorDesc x, DnnFilterDesc w, DnnConvDesc cv,
                                                         DnnTensorDesc y, int algo, size_t *bytes) {
    REFUSE();
    Geo g = {0};
    return size_of(__func__, FWD, h, &g, geometry(__func__, x, w, cv, y, &g), algo, bytes);
}

EXPORT DnnStatus cudnnGetConvolutionBackwardDataWorkspaceSize(DnnHandle h, DnnFilterDesc w, DnnTensorDesc dy,
                                                              DnnConvDesc cv, DnnTensorDesc dx, int algo,
                                                              size_t *bytes) {
    REFUSE();
    Geo g = {0};
    return size_of(__func__, DATA, h, &g, geometry(__func__, dx, w, cv, dy, &g), algo, bytes);
}

EXPORT DnnStatus cudnnGetConvolutionBackwardFilterWorkspaceSize(DnnHandle h, DnnTensorDesc x, DnnTensorDesc dy,
                                                                DnnConvDesc cv, DnnFilterDesc dw, int algo,
                                                                size_t *bytes) {
    REFUSE();
    Geo g = {0};
    return size_of(__func__, FILTER, h, &g, geometry(__func__, x, dw, cv, dy, &g), algo, bytes);
}

/* ---- the computation, on the stream ----------------------------------------------------------- */

typedef struct {
    int dir, algo, tf32;
    Geo g;
    float alpha, beta;
    const float *a, *b; /* forward x, w; data w, dy; filter x, dy */
    float *out;
    char *ws;
    size_t ws_bytes;
} Conv;

/* FP32 to TF32: 10 bits of mantissa, round to nearest even (infinities and NaN kept). */
static float tf32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
    memcpy(&f, &u, 4);
    return f;
}

static float in(const Conv *c, float v) { return c->tf32 ? tf32(v) : v; }

static void store(const Conv *c, float *y, float acc) { *y = c->alpha * acc + (c->beta != 0 ? c->beta * *y : 0.0f); }

/* x's offset of tap t (channel within the group, row, column) at output (oh, ow); -1 in the padding. */
static long long tap(const Geo *g, long long ci, int kr, int ks, int oh, int ow) {
    int ih = oh * g->sh - g->ph + kr * g->dh, iw = ow * g->sw - g->pw + ks * g->dw;
    if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w) return -1;
    return (ci * g->h + ih) * g->w + iw;
}

/* The loops below keep a running sum for each output of a sample (and filter or channel) and
 * add the taps' products to them tap by tap, the indices stepped rather than divided out of a
 * flat count: each output's products are still summed in the order one loop over the flat count
 * of its taps gives, t = (ci * r + kr) * s + ks for the forward, (k, kr, ks) for the data
 * gradient. */

/* y[n, k, p, q] = sum over the taps (channel of the group, row, column) of x * w.  PRECOMP reads
 * each tap's offset from the workspace, GEMM reads one sample's and group's columns from it.  A
 * tap in the padding adds 0 * w (so a NaN or infinite weight there gives NaN, as a GEMM over
 * zero-padded columns does). */
static void run_forward(const Conv *c) {
    const Geo *g = &c->g;
    const int kg = g->k / g->g, rs = g->r * g->s, taps = g->cg * rs, pts = g->p * g->q;
    long long *off = (long long *)c->ws;
    float *col = (float *)c->ws, *acc = malloc(sizeof(float) * (size_t)pts);
    if (!acc) abort();
    const int precomp = c->algo == DNN_FWD_IMPLICIT_PRECOMP_GEMM, gemm = c->algo == DNN_FWD_GEMM;
    for (int t = 0; precomp && t < taps; t++)
        off[t] = ((long long)(t / rs) * g->h + t / g->s % g->r * g->dh) * g->w + t % g->s * g->dw;
    for (int n = 0; n < g->n; n++)
        for (int gr = 0; gr < g->g; gr++) {
            const float *x = c->a + ((long long)n * g->c + (long long)gr * g->cg) * g->h * g->w;
            for (int t = 0; gemm && t < taps; t++)
                for (int o = 0; o < pts; o++) {
                    long long at = tap(g, t / rs, t / g->s % g->r, t % g->s, o / g->q, o % g->q);
                    col[(long long)t * pts + o] = at < 0 ? 0.0f : x[at];
                }
            for (int k = gr * kg; k < (gr + 1) * kg; k++) {
                const float *wk = c->b + (long long)k * taps;
                for (int o = 0; o < pts; o++) acc[o] = 0;
                for (int ci = 0, t = 0; ci < g->cg; ci++)
                    for (int kr = 0; kr < g->r; kr++)
                        for (int ks = 0; ks < g->s; ks++, t++) {
                            const float wv = in(c, wk[t]), zero = in(c, 0.0f) * wv;
                            if (gemm) {
                                for (int o = 0; o < pts; o++) acc[o] += in(c, col[(long long)t * pts + o]) * wv;
                                continue;
                            }
                            for (int oh = 0; oh < g->p; oh++) {
                                float *a = acc + (long long)oh * g->q;
                                const int ih = oh * g->sh - g->ph + kr * g->dh;
                                if (ih < 0 || ih >= g->h) {
                                    for (int ow = 0; ow < g->q; ow++) a[ow] += zero;
                                    continue;
                                }
                                /* x's offset of (ih, iw) is at + ow * sw, for iw = iw0 + ow * sw */
                                const int iw0 = ks * g->dw - g->pw;
                                const long long at = precomp ? off[t] + (long long)(oh * g->sh - g->ph) * g->w - g->pw
                                                             : ((long long)ci * g->h + ih) * g->w + iw0;
                                for (int ow = 0, iw = iw0; ow < g->q; ow++, iw += g->sw)
                                    a[ow] += iw >= 0 && iw < g->w ? in(c, x[at + (long long)ow * g->sw]) * wv : zero;
                            }
                        }
                float *y = c->out + ((long long)n * g->k + k) * pts;
                for (int o = 0; o < pts; o++) store(c, &y[o], acc[o]);
            }
        }
    free(acc);
}

/* dx[n, ch, ih, iw] = sum over the filters of its group and the taps that reach it of dy * w;
 * ALGO_1 sums a sample in the workspace, then writes it.  The taps that reach (ih, iw): the filter
 * rows kr whose output row (ih + ph - kr * dh) / sh is whole and inside, and likewise columns. */
static void run_data(const Conv *c) {
    const Geo *g = &c->g;
    const int kg = g->k / g->g, pts = g->p * g->q, plane = g->h * g->w;
    float *sum = (float *)c->ws;
    /* rowp[kr * h + ih]: the output row of filter row kr at input row ih, or -1; colq likewise */
    int *rowp = malloc(sizeof(int) * (size_t)(g->r * g->h + g->s * g->w)), *colq = rowp + g->r * g->h;
    float *acc = malloc(sizeof(float) * (size_t)plane);
    if (!rowp || !acc) abort();
    for (int kr = 0; kr < g->r; kr++)
        for (int ih = 0; ih < g->h; ih++) {
            int th = ih + g->ph - kr * g->dh;
            rowp[kr * g->h + ih] = th < 0 || th % g->sh || th / g->sh >= g->p ? -1 : th / g->sh;
        }
    for (int ks = 0; ks < g->s; ks++)
        for (int iw = 0; iw < g->w; iw++) {
            int tw = iw + g->pw - ks * g->dw;
            colq[ks * g->w + iw] = tw < 0 || tw % g->sw || tw / g->sw >= g->q ? -1 : tw / g->sw;
        }
    for (int n = 0; n < g->n; n++) {
        const float *dy = c->b + (long long)n * g->k * pts;
        for (int ch = 0; ch < g->c; ch++) {
            const int gr = ch / g->cg;
            for (int i = 0; i < plane; i++) acc[i] = 0;
            for (int k = gr * kg; k < (gr + 1) * kg; k++) {
                const float *w = c->a + ((long long)k * g->cg + ch % g->cg) * g->r * g->s;
                const float *dyk = dy + (long long)k * pts;
                for (int kr = 0; kr < g->r; kr++)
                    for (int ks = 0; ks < g->s; ks++) {
                        const float wv = in(c, w[kr * g->s + ks]);
                        const int *cq = colq + ks * g->w;
                        for (int ih = 0; ih < g->h; ih++) {
                            const int p = rowp[kr * g->h + ih];
                            if (p < 0) continue;
                            const float *dyr = dyk + (long long)p * g->q;
                            float *a = acc + (long long)ih * g->w;
                            for (int iw = 0; iw < g->w; iw++)
                                if (cq[iw] >= 0) a[iw] += in(c, dyr[cq[iw]]) * wv;
                        }
                    }
            }
            float *dx = c->out + ((long long)n * g->c + ch) * plane;
            for (int i = 0; i < plane; i++) {
                if (c->algo == DNN_BWD_DATA_1) sum[(long long)ch * plane + i] = acc[i];
                else store(c, &dx[i], acc[i]);
            }
        }
        for (long long i = 0; c->algo == DNN_BWD_DATA_1 && i < (long long)g->c * plane; i++)
            store(c, &c->out[(long long)n * g->c * plane + i], sum[i]);
    }
    free(rowp);
    free(acc);
}

/* dw[k, ch, kr, ks] = sum over the samples and outputs of dy * x; ALGO_1 sums in the workspace.
 * The outputs whose input (row or column) is in the padding add nothing. */
static void run_filter(const Conv *c) {
    const Geo *g = &c->g;
    const int taps = g->cg * g->r * g->s, pts = g->p * g->q;
    float *sum = (float *)c->ws;
    for (int k = 0; k < g->k; k++)
        for (int t = 0; t < taps; t++) {
            const long long ci = (long long)(k / (g->k / g->g)) * g->cg + t / (g->r * g->s);
            const int kr = t / g->s % g->r, ks = t % g->s;
            float acc = 0;
            for (int n = 0; n < g->n; n++) {
                const float *x = c->a + (long long)n * g->c * g->h * g->w + ci * g->h * g->w;
                const float *dy = c->b + ((long long)n * g->k + k) * pts;
                for (int oh = 0; oh < g->p; oh++) {
                    const int ih = oh * g->sh - g->ph + kr * g->dh;
                    if (ih < 0 || ih >= g->h) continue;
                    const float *xr = x + (long long)ih * g->w, *dyr = dy + (long long)oh * g->q;
                    for (int ow = 0; ow < g->q; ow++) {
                        const int iw = ow * g->sw - g->pw + ks * g->dw;
                        if (iw >= 0 && iw < g->w) acc += in(c, dyr[ow]) * in(c, xr[iw]);
                    }
                }
            }
            if (c->algo == DNN_BWD_FILTER_1) sum[(long long)k * taps + t] = acc;
            else store(c, &c->out[(long long)k * taps + t], acc);
        }
    for (long long i = 0; c->algo == DNN_BWD_FILTER_1 && i < (long long)g->k * taps; i++) store(c, &c->out[i], sum[i]);
}

static const char *algo_name(int dir, int algo) {
    static const char *const fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
                                      "WINOGRAD",      "WINOGRAD_NONFUSED"};
    static const char *const other[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3/FFT_TILING"};
    return dir == FWD ? (algo >= 0 && algo < 8 ? fwd[algo] : "?") : algo >= 0 && algo < 4 ? other[algo] : "?";
}

static void trace(const Conv *c) {
    const char *path = getenv("NNC_EMU_CUDNN_TRACE");
    FILE *f = path && *path ? fopen(path, "a") : NULL;
    if (!f) return;
    const Geo *g = &c->g;
    fprintf(
        f,
        "%s algo=%s math=%s x=%dx%dx%dx%d w=%dx%dx%dx%d y=%dx%dx%dx%d pad=%d,%d stride=%d,%d dilation=%d,%d groups=%d "
        "workspace=%zu\n",
        fn_names[c->dir], algo_name(c->dir, c->algo), c->tf32 ? "tf32" : "fma", g->n, g->c, g->h, g->w, g->k, g->cg,
        g->r, g->s, g->n, g->k, g->p, g->q, g->ph, g->pw, g->sh, g->sw, g->dh, g->dw, g->g, c->ws_bytes);
    fclose(f);
}

static void run(void *ctx) {
    const Conv *c = ctx;
    if (c->ws_bytes) memset(c->ws, 0xFF, c->ws_bytes); /* nothing may depend on what it held */
    if (c->dir == FWD) run_forward(c);
    else if (c->dir == DATA) run_data(c);
    else run_filter(c);
    trace(c);
}

/* ---- the three calls ------------------------------------------------------------------------ */

static int overlap(const void *p, size_t n, const void *q, size_t m) {
    return n && m && (const char *)p < (const char *)q + m && (const char *)q < (const char *)p + n;
}

/* One operand: given, aligned to a float, inside one device allocation. */
static DnnStatus operand(const char *fn, const char *what, const void *p, size_t bytes) {
    char where[160];
    if (!p) return say(DNN_STATUS_BAD_PARAM_NULL_POINTER, fn, "%s is NULL", what);
    if ((uintptr_t)p % sizeof(float))
        return say(DNN_STATUS_BAD_PARAM_MISALIGNED_POINTER, fn, "%s %p is misaligned", what, p);
    snprintf(where, sizeof where, "%s: %s", fn, what);
    return nnc_emu_check_range(p, bytes, where) ? DNN_STATUS_BAD_PARAM : DNN_STATUS_SUCCESS;
}

/* Checks the call as the real library does (and the ranges, which it cannot), then queues it. */
static DnnStatus enqueue(DnnHandle h, int dir, const Geo *g, int math, int algo, const void *alpha, const void *beta,
                         const void *a, const void *b, void *out, void *ws, size_t ws_bytes) {
    const char *fn = fn_names[dir];
    if (!valid(h)) return DNN_STATUS_NOT_INITIALIZED;
    if (!alpha || !beta) return say(DNN_STATUS_BAD_PARAM_NULL_POINTER, fn, "alpha or beta is NULL");
    long long need = workspace(dir, algo, g);
    if (need < 0)
        return say(DNN_STATUS_NOT_SUPPORTED, fn, "algorithm %s (%d) is not emulated", algo_name(dir, algo), algo);
    if ((size_t)need > ws_bytes)
        return say(DNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT, fn, "algorithm %s needs %lld bytes of workspace, given %zu",
                   algo_name(dir, algo), need, ws_bytes);
    if (ws_bytes && !ws)
        return say(DNN_STATUS_BAD_PARAM_NULL_POINTER, fn, "a workspace of %zu bytes at NULL", ws_bytes);
    size_t xb = (size_t)g->n * g->c * g->h * g->w * 4, wb = (size_t)g->k * g->cg * g->r * g->s * 4;
    size_t yb = (size_t)g->n * g->k * g->p * g->q * 4;
    size_t ab = dir == DATA ? wb : xb, bb = dir == FWD ? wb : yb, ob = dir == FWD ? yb : dir == DATA ? xb : wb;
    DnnStatus st = operand(fn, "the first operand", a, ab);
    if (!st) st = operand(fn, "the second operand", b, bb);
    if (!st) st = operand(fn, "the output", out, ob);
    if (!st && ws_bytes) st = operand(fn, "the workspace", ws, ws_bytes);
    if (st) return st;
    if (overlap(out, ob, a, ab) || overlap(out, ob, b, bb) || overlap(out, ob, ws, ws_bytes))
        return say(DNN_STATUS_BAD_PARAM, fn, "the output overlaps an operand or the workspace");
    Conv c = {dir, algo,    math != DNN_FMA_MATH, *g, *(const float *)alpha, *(const float *)beta, a, b, out,
              ws,  ws_bytes};
    return nnc_emu_enqueue_host(h->stream, run, &c, sizeof c) ? DNN_STATUS_EXECUTION_FAILED : DNN_STATUS_SUCCESS;
}

EXPORT DnnStatus cudnnConvolutionForward(DnnHandle h, const void *alpha, DnnTensorDesc xd, const void *x,
                                         DnnFilterDesc wd, const void *w, DnnConvDesc cv, int algo, void *ws,
                                         size_t ws_bytes, const void *beta, DnnTensorDesc yd, void *y) {
    REFUSE();
    Geo g = {0};
    DnnStatus st = geometry(__func__, xd, wd, cv, yd, &g);
    return st ? st : enqueue(h, FWD, &g, cv->math, algo, alpha, beta, x, w, y, ws, ws_bytes);
}

EXPORT DnnStatus cudnnConvolutionBackwardData(DnnHandle h, const void *alpha, DnnFilterDesc wd, const void *w,
                                              DnnTensorDesc dyd, const void *dy, DnnConvDesc cv, int algo, void *ws,
                                              size_t ws_bytes, const void *beta, DnnTensorDesc dxd, void *dx) {
    REFUSE();
    Geo g = {0};
    DnnStatus st = geometry(__func__, dxd, wd, cv, dyd, &g);
    return st ? st : enqueue(h, DATA, &g, cv->math, algo, alpha, beta, w, dy, dx, ws, ws_bytes);
}

EXPORT DnnStatus cudnnConvolutionBackwardFilter(DnnHandle h, const void *alpha, DnnTensorDesc xd, const void *x,
                                                DnnTensorDesc dyd, const void *dy, DnnConvDesc cv, int algo, void *ws,
                                                size_t ws_bytes, const void *beta, DnnFilterDesc dwd, void *dw) {
    REFUSE();
    Geo g = {0};
    DnnStatus st = geometry(__func__, xd, dwd, cv, dyd, &g);
    return st ? st : enqueue(h, FILTER, &g, cv->math, algo, alpha, beta, x, dy, dw, ws, ws_bytes);
}
