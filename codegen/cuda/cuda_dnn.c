/* cuda_dnn.c - convolutions by cuDNN, opened with dlopen; im2col + cuBLAS where it cannot be used.
 *
 * A convolution launch's plan (helper_plan.c) starts with HS_CONV_LIB, then the im2col + GEMM
 * steps.  On CUDA that first step is cuDNN's legacy API here: one cudnnConvolutionForward,
 * cudnnConvolutionBackwardData or cudnnConvolutionBackwardFilter over the whole batch, on NCHW
 * tensors as nnc lays them out (no reorder), and when it runs the launch is done.  Everything is
 * decided once, when the model loads (cuda_dnn_setup):
 *   - the library: libcudnn.so.9 where cuda_libs.c finds it (the loader path, the toolkit,
 *     NVIDIA's wheels: site-packages/nvidia/cudnn/lib), cuDNN 9 only (cudnn_api.h holds its
 *     declarations, so no cudnn.h is needed to build).  NNC_CUDNN=0 turns it off, NNC_CUDNN=PATH
 *     loads exactly that file, NNC_CUDNN=forward,data,filter (a list of those kinds) gives
 *     cuDNN those kinds only and the rest to im2col + cuBLAS.  By default (NNC_CUDNN unset or 1)
 *     cuDNN runs the forward and data gradients and the weight gradient is im2col + cuBLAS
 *     (DNN_DEFAULT_KINDS);
 *   - one handle per GPU, on the GPU's stream, and per launch its descriptors at the largest batch;
 *   - the algorithm: the first answer of cuDNN's heuristics (cudnnGet*Algorithm_v7: no timing
 *     runs, so the same GPU and cuDNN always give the same choice) that is deterministic, sums
 *     products directly (implicit GEMM, precomputed implicit GEMM, GEMM, direct; backward data
 *     and filter ALGO_1 -- so --check-against's bound for a sum of k products holds, which FFT and
 *     Winograd's transforms do not keep element by element, and ALGO_0 and 3 use atomics), keeps
 *     FP32 arithmetic (FMA math) unless TF32 is allowed, and needs at most 256 MiB of
 *     workspace; when no answer fits, implicit GEMM (forward) or ALGO_1, asked directly.  TF32
 *     is allowed with --tf32, and for a convolution whose operands are all half values widened
 *     (autocast.c rounds a convolution's operands to bf16/f16 and the gradients coming back are
 *     half): TF32 holds a half value exactly, so tensor cores then compute what a half
 *     convolution with FP32 accumulation computes;
 *   - the workspace: one buffer per GPU, allocated at load, the largest any of its convolutions'
 *     algorithms asks for at the largest batch.  A smaller batch that needs more (cuDNN may
 *     choose other kernels) runs that call as im2col + GEMM, whose scratch plan.c planned anyway.
 * A launch cuDNN refuses at setup (a shape or type it does not take, an error) keeps im2col, and
 * so does every launch of an --f64 build (gradient checks run the im2col + DGEMM path).  --verbose
 * says which each convolution runs; a refusal is noted even without it.  An error of a call at run
 * time is an error of the step, as a cuBLAS one is. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_model.h"

#define DNN_WORKSPACE_CAP ((size_t)256 << 20)
#define DNN_ALGOS 16
/* The kinds cuDNN runs unless NNC_CUDNN says: forward and data.  The weight gradient's one
 * deterministic direct-sum algorithm (ALGO_1) was the slowest way on an H200: convnet.nn's
 * conv1 gradient took 225 us for 80 MFLOP; its step, --bench 200, twice: every kind by cuDNN
 * 948 us, none 837, forward and data 695-696, forward only 718-719. */
#define DNN_DEFAULT_KINDS 3u

static struct {
    bool tried, ok, bad; /* bad: NNC_CUDNN is neither 0, 1, a list of kinds nor a path */
    unsigned kinds; /* the kinds cuDNN runs (bit 0 forward, 1 data, 2 filter); the rest im2col */
    char why[1600];
    char dir[600];
    size_t version;
    DnnGetVersionFn *GetVersion;
    DnnGetErrorStringFn *GetErrorString;
    DnnCreateFn *Create;
    DnnDestroyFn *Destroy;
    DnnSetStreamFn *SetStream;
    DnnCreateTensorFn *CreateTensor;
    DnnSetTensor4dFn *SetTensor4d;
    DnnDestroyTensorFn *DestroyTensor;
    DnnCreateFilterFn *CreateFilter;
    DnnSetFilter4dFn *SetFilter4d;
    DnnDestroyFilterFn *DestroyFilter;
    DnnCreateConvFn *CreateConv;
    DnnSetConv2dFn *SetConv2d;
    DnnSetConvIntFn *SetGroupCount, *SetMathType;
    DnnDestroyConvFn *DestroyConv;
    DnnOutputDimFn *OutputDim;
    DnnFwdAlgoFn *FwdAlgo;
    DnnDataAlgoFn *DataAlgo;
    DnnFilterAlgoFn *FilterAlgo;
    DnnFwdSizeFn *FwdSize;
    DnnDataSizeFn *DataSize;
    DnnFilterSizeFn *FilterSize;
    DnnFwdFn *Fwd;
    DnnDataFn *Data;
    DnnFilterFn *Filter;
} dn;

/* One convolution launch: what it computes, its descriptors and its algorithm. */
struct DnnConv {
    int kind; /* 0 forward, 1 input gradient, 2 weight gradient (HS_CONV_LIB's) */
    const char *what; /* "conv2d (forward, model.nn:12:9, launch 3 of train_step)" */
    SpatialGeom q;
    Gpu *gpu;
    DnnTensorDesc x, y; /* x [N, C, H, W] and y [N, OC, OH, OW] (or their gradients) */
    DnnFilterDesc w; /* [OC, C / G, KH, KW] */
    DnnConvDesc conv;
    int algo, math;
    int64_t n; /* the batch the tensor descriptors describe now */
    size_t need, need_max; /* the algorithm's workspace at n, and at the largest batch */
};

static const char *const fwd_names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
                                        "WINOGRAD",      "WINOGRAD_NONFUSED"};
static const char *const data_names[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
static const char *const filter_names[] = {"ALGO_0",    "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                           "FFT_TILING"};
static const char *const kind_names[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                         "cudnnConvolutionBackwardFilter"};

static const char *algo_name(int kind, int algo) {
    const char *const *t = kind == 0 ? fwd_names : kind == 1 ? data_names : filter_names;
    int n = kind == 0 ? DNN_FWD_COUNT : kind == 1 ? DNN_BWD_DATA_COUNT : DNN_BWD_FILTER_COUNT;
    return algo >= 0 && algo < n ? t[algo] : "?";
}

/* ---- the library ------------------------------------------------------------------------------ */

/* NNC_CUDNN's list of kinds ("forward,data"): the mask, or false when a word is none of them. */
static bool parse_kinds(const char *env, unsigned *kinds) {
    static const char *const word[] = {"forward", "data", "filter"};
    *kinds = 0;
    for (const char *p = env; *p;) {
        const size_t len = strcspn(p, ",");
        int k = 0;
        while (k < 3 && (strlen(word[k]) != len || strncmp(p, word[k], len))) k++;
        if (k == 3) return false;
        *kinds |= 1u << k;
        p += len + (p[len] == ',');
    }
    return *kinds != 0;
}

static void *open_lib(void) {
    static const char *const names[] = {"libcudnn.so.9", "libcudnn.so", NULL};
    const char *env = getenv("NNC_CUDNN");
    if (env && !strcmp(env, "0")) {
        snprintf(dn.why, sizeof dn.why, "NNC_CUDNN=0");
        return NULL;
    }
    if (env && strchr(env, '/')) { /* exactly that file */
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!h) snprintf(dn.why, sizeof dn.why, "NNC_CUDNN=%.500s does not load: %.700s", env, dlerror());
        return h;
    }
    dn.kinds = DNN_DEFAULT_KINDS;
    if (env && *env && strcmp(env, "1") && !parse_kinds(env, &dn.kinds)) {
        dn.bad = true;
        snprintf(dn.why, sizeof dn.why,
                 "NNC_CUDNN=%.200s: expected 0 (convolutions by im2col + cuBLAS), 1 (by cuDNN where it is found, "
                 "the default: forward,data), the kinds cuDNN runs (a list of forward, data, filter) or the path of "
                 "a libcudnn.so.9",
                 env);
        return NULL;
    }
    return cuda_libs_open("cuDNN", names, dn.dir, sizeof dn.dir, dn.why, sizeof dn.why);
}

static bool dnn_load(void) {
    if (dn.tried) return dn.ok;
    dn.tried = true;
    void *h = open_lib();
    if (!h) return false;
    struct {
        void **fn;
        const char *name;
    } syms[] = {
        {(void **)&dn.GetVersion, "cudnnGetVersion"},
        {(void **)&dn.GetErrorString, "cudnnGetErrorString"},
        {(void **)&dn.Create, "cudnnCreate"},
        {(void **)&dn.Destroy, "cudnnDestroy"},
        {(void **)&dn.SetStream, "cudnnSetStream"},
        {(void **)&dn.CreateTensor, "cudnnCreateTensorDescriptor"},
        {(void **)&dn.SetTensor4d, "cudnnSetTensor4dDescriptor"},
        {(void **)&dn.DestroyTensor, "cudnnDestroyTensorDescriptor"},
        {(void **)&dn.CreateFilter, "cudnnCreateFilterDescriptor"},
        {(void **)&dn.SetFilter4d, "cudnnSetFilter4dDescriptor"},
        {(void **)&dn.DestroyFilter, "cudnnDestroyFilterDescriptor"},
        {(void **)&dn.CreateConv, "cudnnCreateConvolutionDescriptor"},
        {(void **)&dn.SetConv2d, "cudnnSetConvolution2dDescriptor"},
        {(void **)&dn.SetGroupCount, "cudnnSetConvolutionGroupCount"},
        {(void **)&dn.SetMathType, "cudnnSetConvolutionMathType"},
        {(void **)&dn.DestroyConv, "cudnnDestroyConvolutionDescriptor"},
        {(void **)&dn.OutputDim, "cudnnGetConvolution2dForwardOutputDim"},
        {(void **)&dn.FwdAlgo, "cudnnGetConvolutionForwardAlgorithm_v7"},
        {(void **)&dn.DataAlgo, "cudnnGetConvolutionBackwardDataAlgorithm_v7"},
        {(void **)&dn.FilterAlgo, "cudnnGetConvolutionBackwardFilterAlgorithm_v7"},
        {(void **)&dn.FwdSize, "cudnnGetConvolutionForwardWorkspaceSize"},
        {(void **)&dn.DataSize, "cudnnGetConvolutionBackwardDataWorkspaceSize"},
        {(void **)&dn.FilterSize, "cudnnGetConvolutionBackwardFilterWorkspaceSize"},
        {(void **)&dn.Fwd, "cudnnConvolutionForward"},
        {(void **)&dn.Data, "cudnnConvolutionBackwardData"},
        {(void **)&dn.Filter, "cudnnConvolutionBackwardFilter"},
    };
    for (size_t i = 0; i < NNC_COUNTOF(syms); i++)
        if (!(*syms[i].fn = dlsym(h, syms[i].name))) {
            snprintf(dn.why, sizeof dn.why, "libcudnn has no %s", syms[i].name);
            return false;
        }
    dn.version = dn.GetVersion();
    if (dn.version / 10000 != 9) {
        snprintf(dn.why, sizeof dn.why, "libcudnn is version %zu.%zu.%zu; nnc calls cuDNN 9's API", dn.version / 10000,
                 dn.version / 100 % 100, dn.version % 100);
        return false;
    }
    return dn.ok = true;
}

static const char *status_text(DnnStatus s) {
    const char *t = dn.GetErrorString ? dn.GetErrorString(s) : NULL;
    return t ? t : "?";
}

/* ---- one launch's descriptors and algorithm ------------------------------------------------- */

/* The tensor descriptors at batch n (the filter's does not change with it). */
static DnnStatus set_batch(DnnConv *c, int64_t n) {
    const SpatialGeom *q = &c->q;
    DnnStatus s = dn.SetTensor4d(c->x, DNN_TENSOR_NCHW, DNN_DATA_FLOAT, (int)n, (int)q->C, (int)q->H, (int)q->W);
    if (s == DNN_STATUS_SUCCESS)
        s = dn.SetTensor4d(c->y, DNN_TENSOR_NCHW, DNN_DATA_FLOAT, (int)n, (int)q->OC, (int)q->OH, (int)q->OW);
    c->n = s == DNN_STATUS_SUCCESS ? n : -1;
    return s;
}

static DnnStatus workspace_of(DnnConv *c, int algo, size_t *bytes) {
    DnnHandle h = c->gpu->dnn;
    *bytes = 0;
    if (c->kind == 0) return dn.FwdSize(h, c->x, c->w, c->conv, c->y, algo, bytes);
    if (c->kind == 1) return dn.DataSize(h, c->w, c->y, c->conv, c->x, algo, bytes);
    return dn.FilterSize(h, c->x, c->y, c->conv, c->w, algo, bytes);
}

/* Products summed one by one, as the bound of --check-against assumes, and deterministic. */
static bool direct_sum(int kind, int algo) {
    if (kind == 0)
        return algo == DNN_FWD_IMPLICIT_GEMM || algo == DNN_FWD_IMPLICIT_PRECOMP_GEMM || algo == DNN_FWD_GEMM ||
            algo == DNN_FWD_DIRECT;
    return algo == (kind == 1 ? DNN_BWD_DATA_1 : DNN_BWD_FILTER_1);
}

static bool math_ok(int math, bool tf32) {
    return math == DNN_FMA_MATH || (tf32 && (math == DNN_DEFAULT_MATH || math == DNN_TENSOR_OP_MATH));
}

/* The algorithm: the heuristics' first acceptable answer, else the GEMM-like one asked directly. */
static bool choose_algo(DnnConv *c, bool tf32, char *why, size_t n) {
    DnnAlgoPerf perf[DNN_ALGOS];
    int got = 0;
    DnnHandle h = c->gpu->dnn;
    DnnStatus s = c->kind == 0 ? dn.FwdAlgo(h, c->x, c->w, c->conv, c->y, DNN_ALGOS, &got, perf)
        : c->kind == 1         ? dn.DataAlgo(h, c->w, c->y, c->conv, c->x, DNN_ALGOS, &got, perf)
                               : dn.FilterAlgo(h, c->x, c->y, c->conv, c->w, DNN_ALGOS, &got, perf);
    if (s != DNN_STATUS_SUCCESS) {
        snprintf(why, n, "%s's heuristics failed: %s", kind_names[c->kind], status_text(s));
        return false;
    }
    for (int i = 0; i < got && i < DNN_ALGOS; i++) {
        const DnnAlgoPerf *a = &perf[i];
        if (a->status == DNN_STATUS_SUCCESS && a->determinism == DNN_DETERMINISTIC && direct_sum(c->kind, a->algo) &&
            math_ok(a->mathType, tf32) && a->memory <= DNN_WORKSPACE_CAP) {
            c->algo = a->algo, c->math = a->mathType;
            return true;
        }
    }
    size_t bytes;
    c->algo = c->kind == 0 ? DNN_FWD_IMPLICIT_GEMM : 1;
    c->math = tf32 ? DNN_DEFAULT_MATH : DNN_FMA_MATH;
    s = workspace_of(c, c->algo, &bytes);
    if (s == DNN_STATUS_SUCCESS && bytes <= DNN_WORKSPACE_CAP) return true;
    snprintf(why, n, "none of cuDNN's %d answers is a deterministic direct sum within %zu MiB of workspace, nor is %s",
             got, DNN_WORKSPACE_CAP >> 20, algo_name(c->kind, c->algo));
    return false;
}

bool cuda_half_widened(const Graph *g, int x) {
    const Node *n = &g->nodes[x];
    return n->op == OP_CAST && DTYPE_IS_HALF(g->nodes[n->in[0]].dtype);
}

#define DNN_TRY(call, what) \
    if ((s = (call)) != DNN_STATUS_SUCCESS) { \
        snprintf(why, n, "%s: %s", what, status_text(s)); \
        return false; \
    }

/* c's descriptors at batch rows; false with why when cuDNN refuses them. */
static bool conv_describe(DnnConv *c, int64_t rows, char *why, size_t n) {
    const SpatialGeom *q = &c->q;
    int64_t dims[] = {rows, q->C, q->H, q->W, q->OC, q->OH, q->OW, q->KH, q->KW, q->G};
    for (size_t i = 0; i < NNC_COUNTOF(dims); i++)
        if (dims[i] < 1 || dims[i] > INT_MAX) {
            snprintf(why, n, "a dimension of %lld is outside cuDNN's int", (long long)dims[i]);
            return false;
        }
    DnnStatus s;
    DNN_TRY(dn.CreateTensor(&c->x), "cudnnCreateTensorDescriptor");
    DNN_TRY(dn.CreateTensor(&c->y), "cudnnCreateTensorDescriptor");
    DNN_TRY(dn.CreateFilter(&c->w), "cudnnCreateFilterDescriptor");
    DNN_TRY(dn.CreateConv(&c->conv), "cudnnCreateConvolutionDescriptor");
    DNN_TRY(set_batch(c, rows), "cudnnSetTensor4dDescriptor");
    DNN_TRY(
        dn.SetFilter4d(c->w, DNN_DATA_FLOAT, DNN_TENSOR_NCHW, (int)q->OC, (int)(q->C / q->G), (int)q->KH, (int)q->KW),
        "cudnnSetFilter4dDescriptor");
    DNN_TRY(dn.SetConv2d(c->conv, (int)q->PH, (int)q->PW, (int)q->SH, (int)q->SW, (int)q->DH, (int)q->DW,
                         DNN_CROSS_CORRELATION, DNN_DATA_FLOAT),
            "cudnnSetConvolution2dDescriptor");
    DNN_TRY(dn.SetGroupCount(c->conv, (int)q->G), "cudnnSetConvolutionGroupCount");
    int on, oc, oh, ow;
    DNN_TRY(dn.OutputDim(c->conv, c->x, c->w, &on, &oc, &oh, &ow), "cudnnGetConvolution2dForwardOutputDim");
    if (on != rows || oc != q->OC || oh != q->OH || ow != q->OW) {
        snprintf(why, n, "cuDNN makes the output [%d, %d, %d, %d] of what nnc makes [%lld, %lld, %lld, %lld]", on, oc,
                 oh, ow, (long long)rows, (long long)q->OC, (long long)q->OH, (long long)q->OW);
        return false;
    }
    return true;
}

static bool conv_setup(DnnConv *c, const Graph *g, const Node *r, int64_t rows, bool tf32, char *why, size_t n) {
    DnnStatus s;
    tf32 = tf32 || (cuda_half_widened(g, r->in[0]) && cuda_half_widened(g, r->in[1]));
    if (!conv_describe(c, rows, why, n)) return false;
    DNN_TRY(dn.SetMathType(c->conv, tf32 ? DNN_DEFAULT_MATH : DNN_FMA_MATH), "cudnnSetConvolutionMathType");
    if (!choose_algo(c, tf32, why, n)) return false;
    DNN_TRY(dn.SetMathType(c->conv, c->math), "cudnnSetConvolutionMathType");
    DNN_TRY(workspace_of(c, c->algo, &c->need), "the workspace size");
    c->need_max = c->need;
    return true;
}

static void conv_free(DnnConv *c) {
    if (c->x) dn.DestroyTensor(c->x);
    if (c->y) dn.DestroyTensor(c->y);
    if (c->w) dn.DestroyFilter(c->w);
    if (c->conv) dn.DestroyConv(c->conv);
    c->x = c->y = NULL, c->w = NULL, c->conv = NULL;
}

/* ---- the model's convolutions ------------------------------------------------------------------ */

static bool is_conv(const CudaModel *m, const Launch *L) {
    return L->kind == L_HELPER && op_has(m->p->g->nodes[L->root].op, OPF_CONV);
}

static Gpu *launch_gpu(CudaModel *m, const Launch *L) {
    Device d = m->p->g->nodes[L->root].dev;
    return &m->gpu[DEV_IS_GPU(d) ? DEV_GPU_INDEX(d) : 0];
}

/* GPU g's handle, on its stream; false with why (once it failed, without trying again). */
static bool gpu_handle(Gpu *g, char *why, size_t n) {
    DnnStatus s = DNN_STATUS_SUCCESS;
    if (g->dnn) return true;
    if (g->dnn_failed) {
        snprintf(why, n, "no cuDNN handle on this GPU (cudnnCreate failed for an earlier launch)");
        return false;
    }
    if (cu.CtxSetCurrent(g->ctx) == CUDA_SUCCESS && (s = dn.Create(&g->dnn)) == DNN_STATUS_SUCCESS &&
        (s = dn.SetStream(g->dnn, (void *)g->st)) == DNN_STATUS_SUCCESS)
        return true;
    if (g->dnn) dn.Destroy(g->dnn);
    g->dnn = NULL;
    g->dnn_failed = true;
    snprintf(why, n, "no cuDNN handle on this GPU (%s)",
             s == DNN_STATUS_SUCCESS ? "cuCtxSetCurrent failed" : status_text(s));
    return false;
}

/* A convolution op's kind: 0 forward, 1 input gradient (data), 2 weight gradient (filter). */
static int conv_kind(Op op) { return op == OP_CONV2D ? 0 : op == OP_CONV2D_DX ? 1 : 2; }

/* Launch k of entry e: its DnnConv, or NULL with why. */
static DnnConv *launch_setup(CudaModel *m, const Entry *e, int k, bool tf32, char *why, size_t n) {
    const Launch *L = &e->launches[k];
    const Node *r = &m->p->g->nodes[L->root];
    DnnConv *c = arena_alloc(&m->arena, sizeof *c);
    memset(c, 0, sizeof *c);
    c->kind = conv_kind(r->op);
    c->q = spatial_geom(m->p->g, r);
    c->gpu = launch_gpu(m, L);
    Str what = {0};
    launch_describe(&what, m->p, e, k, L->root);
    c->what = arena_strdup(&m->arena, what.buf);
    str_free(&what);
    int64_t rows = dim_size(c->q.N, m->p->g->batch_max);
    if (!gpu_handle(c->gpu, why, n)) return NULL;
    if (conv_setup(c, m->p->g, r, rows, tf32, why, n)) return c;
    conv_free(c);
    return NULL;
}

/* Each GPU's workspace: the most any of its convolutions needs; without it they run im2col. */
static void alloc_workspaces(CudaModel *m, int *refused, char *first, size_t n) {
    for (int i = 0; i < NNC_MAX_GPUS; i++) {
        Gpu *g = &m->gpu[i];
        size_t need = 0;
        for (int k = 0; k < ENTRY_COUNT; k++)
            for (int j = 0; m->dnn[k] && j < m->p->entry[k].nlaunch; j++)
                if (m->dnn[k][j] && m->dnn[k][j]->gpu == g && m->dnn[k][j]->need_max > need)
                    need = m->dnn[k][j]->need_max;
        if (!need || (cu.CtxSetCurrent(g->ctx) == CUDA_SUCCESS && cu.MemAlloc(&g->dDnnWork, need) == CUDA_SUCCESS)) {
            g->dnn_work = need;
            continue;
        }
        g->dDnnWork = 0;
        for (int k = 0; k < ENTRY_COUNT; k++)
            for (int j = 0; m->dnn[k] && j < m->p->entry[k].nlaunch; j++)
                if (m->dnn[k][j] && m->dnn[k][j]->gpu == g) {
                    if (!(*refused)++) snprintf(first, n, "cannot allocate cuDNN's workspace of %zu bytes", need);
                    conv_free(m->dnn[k][j]);
                    m->dnn[k][j] = NULL;
                }
    }
}

/* --verbose: what launch k of entry e runs. */
static void say_launch(CudaModel *m, const Entry *e, int k, const DnnConv *c, const char *why) {
    Str what = {0};
    launch_describe(&what, m->p, e, k, e->launches[k].root);
    if (c)
        fprintf(stderr, "nnc: cuda:   %s: cuDNN %s, %s math, %zu bytes of workspace\n", what.buf,
                algo_name(c->kind, c->algo), c->math == DNN_FMA_MATH ? "FP32 (FMA)" : "TF32 tensor-core", c->need_max);
    else fprintf(stderr, "nnc: cuda:   %s: im2col + cuBLAS, cuDNN refused it: %s\n", what.buf, why);
    str_free(&what);
}

/* Every convolution launch's DnnConv (NULL: im2col), counting the refused and saying why. */
static void setup_launches(CudaModel *m, const BuildOpts *o, int *refused, char *first, size_t n) {
    char why[600];
    for (int k = 0; k < ENTRY_COUNT; k++) {
        const Entry *e = &m->p->entry[k];
        m->dnn[k] = arena_alloc(&m->arena, (size_t)(e->nlaunch + 1) * sizeof *m->dnn[k]);
        memset(m->dnn[k], 0, (size_t)(e->nlaunch + 1) * sizeof *m->dnn[k]);
        for (int j = 0; j < e->nlaunch; j++) {
            if (!is_conv(m, &e->launches[j])) continue;
            if (!(dn.kinds >> conv_kind(m->p->g->nodes[e->launches[j].root].op) & 1)) {
                if (o->verbose) {
                    Str what = {0};
                    launch_describe(&what, m->p, e, j, e->launches[j].root);
                    const char *env = getenv("NNC_CUDNN");
                    if (env && *env && strcmp(env, "1"))
                        fprintf(stderr, "nnc: cuda:   %s: im2col + cuBLAS (NNC_CUDNN=%s)\n", what.buf, env);
                    else
                        fprintf(stderr,
                                "nnc: cuda:   %s: im2col + cuBLAS, faster than cuDNN's deterministic weight "
                                "gradient (NNC_CUDNN=forward,data,filter gives it to cuDNN)\n",
                                what.buf);
                    str_free(&what);
                }
                continue;
            }
            m->dnn[k][j] = launch_setup(m, e, j, o->tf32, why, sizeof why);
            if (o->verbose) say_launch(m, e, j, m->dnn[k][j], why);
            if (m->dnn[k][j] || (*refused)++) continue;
            Str what = {0};
            launch_describe(&what, m->p, e, j, e->launches[j].root);
            snprintf(first, n, "%s: %s", what.buf, why);
            str_free(&what);
        }
    }
}

bool cuda_dnn_setup(CudaModel *m, const BuildOpts *o, char *err, size_t n) {
    int nconv = 0, refused = 0;
    for (int k = 0; k < ENTRY_COUNT; k++)
        for (int j = 0; j < m->p->entry[k].nlaunch; j++) nconv += is_conv(m, &m->p->entry[k].launches[j]);
    if (!nconv) return true;
    const char *off = m->f64 ? "--f64 (cuDNN is used in f32 only)" : dnn_load() ? NULL : dn.why;
    if (dn.bad) {
        snprintf(err, n, "%s", dn.why);
        return false;
    }
    if (o->verbose && off) fprintf(stderr, "nnc: cuda: convolutions by im2col + cuBLAS: %s\n", off);
    if (o->verbose && !off)
        fprintf(stderr, "nnc: cuda: convolutions by cuDNN %zu.%zu.%zu (%s) where it takes them:\n", dn.version / 10000,
                dn.version / 100 % 100, dn.version % 100, dn.dir[0] ? dn.dir : "found on the loader's path");
    char first[900] = "";
    if (!off) setup_launches(m, o, &refused, first, sizeof first);
    if (!off) alloc_workspaces(m, &refused, first, sizeof first);
    if (cu.CtxSetCurrent(m->cur->ctx) != CUDA_SUCCESS) {
        snprintf(err, n, "cannot make the CUDA context current");
        return false;
    }
    if (refused)
        fprintf(stderr,
                "nnc: note: cuDNN refused %d of the %d convolution launches, which run as im2col + cuBLAS instead; "
                "the first: %s\n",
                refused, nconv, first);
    return true;
}

DnnConv *cuda_dnn_conv(const CudaModel *m, const Entry *e, const Launch *L) {
    return m->dnn[e->kind] ? m->dnn[e->kind][L - e->launches] : NULL;
}

int cuda_dnn_run(DnnConv *c, int64_t rows, CUdeviceptr a, CUdeviceptr b, CUdeviceptr out, char *err, size_t n) {
    if (rows < 1 || rows > INT_MAX) return 0; /* an empty batch: the plan zeroes what it must */
    DnnStatus s = DNN_STATUS_SUCCESS;
    if (rows != c->n && (s = set_batch(c, rows)) == DNN_STATUS_SUCCESS) s = workspace_of(c, c->algo, &c->need);
    if (s == DNN_STATUS_SUCCESS && c->need > c->gpu->dnn_work) return 0; /* more than at load: im2col this time */
    const float one = 1, zero = 0;
    void *ws = (void *)c->gpu->dDnnWork;
    size_t wsb = c->gpu->dnn_work;
    DnnHandle h = c->gpu->dnn;
    if (s == DNN_STATUS_SUCCESS && c->kind == 0)
        s = dn.Fwd(h, &one, c->x, (const void *)a, c->w, (const void *)b, c->conv, c->algo, ws, wsb, &zero, c->y,
                   (void *)out);
    else if (s == DNN_STATUS_SUCCESS && c->kind == 1)
        s = dn.Data(h, &one, c->w, (const void *)b, c->y, (const void *)a, c->conv, c->algo, ws, wsb, &zero, c->x,
                    (void *)out);
    else if (s == DNN_STATUS_SUCCESS)
        s = dn.Filter(h, &one, c->x, (const void *)b, c->y, (const void *)a, c->conv, c->algo, ws, wsb, &zero, c->w,
                      (void *)out);
    if (s == DNN_STATUS_SUCCESS) return 1;
    snprintf(err, n, "%s: cuDNN error %d (%s) in %s (%s) at batch %lld", c->what, (int)s, status_text(s),
             kind_names[c->kind], algo_name(c->kind, c->algo), (long long)rows);
    return -1;
}

void cuda_dnn_close(CudaModel *m) {
    for (int k = 0; k < ENTRY_COUNT; k++)
        for (int j = 0; m->dnn[k] && j < m->p->entry[k].nlaunch; j++)
            if (m->dnn[k][j]) conv_free(m->dnn[k][j]);
    for (int i = 0; i < NNC_MAX_GPUS; i++)
        if (m->gpu[i].dnn && cu.CtxSetCurrent(m->gpu[i].ctx) == CUDA_SUCCESS) {
            dn.Destroy(m->gpu[i].dnn);
            m->gpu[i].dnn = NULL;
        }
}
