/* render_cuda.c - renders a planned Program as one CUDA C source file for NVRTC.
 *
 * One `extern "C" __global__` kernel per kernel launch of every entry, all with the parameter
 * list CUDA_KERNEL_PARAMS, each headed by the .nn lines it computes.  The scalar expression of
 * every elementwise op comes from the same table as the C backend (codegen/expr.c), and the
 * index arithmetic mirrors render_c.c, so both targets compute the same values from the same
 * Program:
 *   - elementwise: a grid-stride loop over the flat index space, split into per-axis indices
 *     only when some operand is broadcast or transposed;
 *   - reduction: one block per output element (grid-stride over outputs), threads striding
 *     over the reduced elements, double accumulation, then a warp-shuffle block reduction;
 *   - row-wise: one warp per row, max-subtracted exp-sums in double as in render_c_row.inc.
 *     cross_entropy and accuracy produce one scalar, so they run as a single block whose warps
 *     share the rows and combine deterministically (no atomics on the value).
 * A label outside [0, C) sets the device error flag, which the runtime reads after the step. */
#include <string.h>

#include "cuda_backend.h"

#define EW_THREADS 256
#define ROW_THREADS 256
#define MAX_GRID 65535

typedef struct {
    const Program *p;
    const Graph *g;
    const Entry *e;
    const BuildOpts *o;
    Str *s;
} R;

int cuda_resolve(const Entry *e, int x) {
    while (e->buf[x].kind == BUF_ALIAS) x = e->buf[x].alias;
    return x;
}

bool cuda_launch_is_kernel(const Launch *L) {
    return L->kind == L_EW || L->kind == L_REDUCE || L->kind == L_ROW;
}

void cuda_kernel_name(char *buf, size_t n, const Program *p, const Entry *e, int k) {
    snprintf(buf, n, "%s_%s_%d", model_c_name(p), e->name, k);
}

static void ptr(const R *r, Str *s, int x) {
    x = cuda_resolve(r->e, x);
    const Buffer *b = &r->e->buf[x];
    const char *t = r->g->nodes[x].dtype == DT_I32 ? "int32_t" : "real";
    if (b->dev != DEV_CUDA && b->kind != BUF_PARAM && b->kind != BUF_STATE) {
        str_printf(s, "((%s *)0) /* host value: the backend refuses to launch this */", t);
        return;
    }
    switch (b->kind) {
    case BUF_PARAM: str_printf(s, "(P + %lld)", (long long)b->offset); break;
    case BUF_STATE: str_printf(s, "(S + %lld)", (long long)b->offset); break;
    case BUF_ACT: str_printf(s, "((%s *)(A + %lld))", t, (long long)b->offset); break;
    default: str_printf(s, "((%s *)0) /* internal: node %d has no buffer */", t, x); break;
    }
}


static int64_t numel_at(Shape sh, int64_t B) { return shape_numel(sh, B); }



static void operand_name(const R *r, const Launch *L, int x, char *buf, size_t n) {
    if (launch_has(L, x)) snprintf(buf, n, "t%d", x);
    else if (node_is_inline(&r->g->nodes[x])) {
        Str tmp = {0};
        render_inline_value(&tmp, r->g, x, "(*stepp)", "B");
        snprintf(buf, n, "%s", tmp.buf);
        str_free(&tmp);
    } else snprintf(buf, n, "l%d", x);
}

/* The statements computing every group member at one point of the space. */
static void body(const R *r, const Launch *L, const char *ind, int skip) {
    char names[NNC_MAX_IN][256];
    const char *ops[NNC_MAX_IN];
    for (int i = 0; i < L->nnodes; i++) {
        int id = L->nodes[i];
        const Node *n = &r->g->nodes[id];
        if (id == skip) continue;
        for (int j = 0; j < n->nin; j++) {
            operand_name(r, L, n->in[j], names[j], sizeof names[j]);
            ops[j] = names[j];
        }
        str_printf(r->s, "%sconst real t%d = ", ind, id);
        render_ew_expr(r->s, r->g, id, ops);
        str_puts(r->s, ";\n");
    }
}

static void loads(const R *r, const Launch *L, Shape space, bool flat, bool transposed, const char *ind) {
    for (int j = 0; j < L->nins; j++) {
        int x = L->ins[j];
        Shape xs = r->g->nodes[x].shape;
        str_printf(r->s, "%sconst real l%d = (real)i%d[", ind, x, j);
        if (flat) str_puts(r->s, shape_numel(xs, 2) == 1 && !shape_eq(xs, space) ? "0" : "i");
        else render_load_offset(r->s, r->g, x, space, transposed);
        str_puts(r->s, "];\n");
    }
}

static void decl_ptrs(const R *r, const Launch *L, bool outs) {
    for (int j = 0; j < L->nins; j++) {
        int x = L->ins[j];
        str_printf(r->s, "    const %s *i%d = ", r->g->nodes[x].dtype == DT_I32 ? "int32_t" : "real", j);
        ptr(r, r->s, x);
        str_puts(r->s, ";\n");
    }
    for (int j = 0; outs && j < L->nouts; j++) {
        str_printf(r->s, "    real *o%d = ", j);
        ptr(r, r->s, L->outs[j]);
        str_puts(r->s, ";\n");
    }
}

/* Splits the flat index `var` into the axis indices a<l> for the axes in `mask` (row-major). */
static void split_index(const R *r, Shape sp, int64_t mask, const char *var, const char *ind) {
    str_printf(r->s, "%s{\n%s    int64_t q = %s;\n", ind, ind, var);
    for (int l = sp.rank - 1; l >= 0; l--) {
        if (!(mask >> l & 1)) continue;
        str_printf(r->s, "%s    a%d = q %% (", ind, l);
        render_dim(r->s, sp.d[l], "B");
        str_printf(r->s, ");\n%s    q /= (", ind);
        render_dim(r->s, sp.d[l], "B");
        str_puts(r->s, ");\n");
    }
    str_printf(r->s, "%s}\n", ind);
}

static void decl_axes(const R *r, int rank, const char *ind) {
    if (!rank) return;
    str_printf(r->s, "%sint64_t", ind);
    for (int l = 0; l < rank; l++) str_printf(r->s, "%s a%d = 0", l ? "," : "", l);
    str_puts(r->s, ";\n");
}

static void render_ew(const R *r, const Launch *L) {
    Shape sp = L->space;
    bool transposed = r->g->nodes[L->root].op == OP_TRANSPOSE;
    bool flat = !transposed;
    for (int j = 0; j < L->nins; j++) {
        Shape xs = r->g->nodes[L->ins[j]].shape;
        flat &= shape_eq(xs, sp) || shape_numel(xs, 2) == 1;
    }
    flat |= sp.rank == 0;
    decl_ptrs(r, L, true);
    str_puts(r->s, "    const int64_t n = ");
    render_numel(r->s, sp);
    str_puts(r->s, ";\n    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;"
                   " i += (int64_t)blockDim.x * gridDim.x) {\n");
    const char *ind = "        ";
    if (!flat) {
        decl_axes(r, sp.rank, ind);
        split_index(r, sp, ((int64_t)1 << sp.rank) - 1, "i", ind);
    }
    loads(r, L, sp, flat, transposed, ind);
    body(r, L, ind, -1);
    for (int j = 0; j < L->nouts; j++) {
        str_printf(r->s, "%so%d[", ind, j);
        if (flat) str_puts(r->s, "i");
        else render_load_offset(r->s, r->g, L->outs[j], sp, false);
        str_printf(r->s, "] = t%d;\n", L->outs[j]);
    }
    str_puts(r->s, "    }\n");
}

/* The product of the space's extents over the axes in (or not in) mask. */
static Shape axes_shape(Shape sp, int64_t mask, bool in_mask) {
    Shape k = {0};
    for (int l = 0; l < sp.rank; l++)
        if (((mask >> l & 1) != 0) == in_mask) k.d[k.rank++] = sp.d[l];
    return k;
}

static void render_reduce(const R *r, const Launch *L) {
    const Node *n = &r->g->nodes[L->root];
    Shape sp = L->space;
    int64_t mask = launch_reduce_mask(r->g, L), all = ((int64_t)1 << sp.rank) - 1;
    bool is_max = n->op == OP_MAX;
    decl_ptrs(r, L, false);
    str_puts(r->s, "    real *o0 = ");
    ptr(r, r->s, L->root);
    str_puts(r->s, ";\n    const int64_t nout = ");
    render_numel(r->s, axes_shape(sp, mask, false));
    str_puts(r->s, ", nred = ");
    render_numel(r->s, axes_shape(sp, mask, true));
    str_puts(r->s, ";\n    const double scale = ");
    if (n->op == OP_MEAN) {
        str_puts(r->s, "1.0 / (double)");
        render_numel(r->s, axes_shape(sp, mask, true));
    } else str_puts(r->s, "1.0");
    str_printf(r->s, ";\n    for (int64_t o = blockIdx.x; o < nout; o += gridDim.x) {\n"
                     "        double acc = %s;\n"
                     "        for (int64_t j = threadIdx.x; j < nred; j += blockDim.x) {\n",
               is_max ? "-NNC_INF" : "0.0");
    const char *ind = "            ";
    decl_axes(r, sp.rank, ind);
    split_index(r, sp, all & ~mask, "o", ind);
    split_index(r, sp, mask, "j", ind);
    loads(r, L, sp, false, false, ind);
    body(r, L, ind, L->root);
    char val[256];
    operand_name(r, L, n->in[0], val, sizeof val);
    if (is_max) str_printf(r->s, "%sif (%s > acc || %s != %s) acc = %s;\n", ind, val, val, val, val);
    else str_printf(r->s, "%sacc += %s;\n", ind, val);
    str_printf(r->s, "        }\n        acc = %s(acc);\n"
                     "        if (threadIdx.x == 0) o0[o] = (real)(acc * scale);\n    }\n",
               is_max ? "nnc_block_max" : "nnc_block_sum");
}

#include "render_cuda_row.inc"

static const char *launch_kind_name(LaunchKind k) {
    static const char *n[] = {"elementwise", "reduction", "row-wise", "gemm", "copy", "assign"};
    return n[k];
}

static void render_kernel(const R *r, const Launch *L, int k) {
    char name[256];
    cuda_kernel_name(name, sizeof name, r->p, r->e, k);
    str_printf(r->s, "\n/* %s launch %d: %s", r->e->name, k, launch_kind_name(L->kind));
    for (int i = 0; i < L->nnodes; i++) str_printf(r->s, "%s%s", i ? ", " : " (", op_info[r->g->nodes[L->nodes[i]].op].name);
    str_puts(r->s, ")\n");
    render_source_lines(r->s, r->p, L, " *   ");
    /* the bound lets the compiler budget registers for the largest block it is launched with
     * (a 1024-thread block needs at most 64 registers a thread) */
    str_printf(r->s, " */\nextern \"C\" __global__ void __launch_bounds__(%u) %s(" CUDA_KERNEL_PARAMS ") {\n",
               cuda_launch_max_block(r->g, L), name);
    str_puts(r->s, "    (void)P; (void)S; (void)A; (void)B; (void)stepp; (void)err;\n");
    switch (L->kind) {
    case L_EW: render_ew(r, L); break;
    case L_REDUCE: render_reduce(r, L); break;
    case L_ROW: render_row(r, L); break;
    default: break;
    }
    str_puts(r->s, "}\n");
}

static const char prelude[] =
    "typedef long long int64_t;\n"
    "typedef int int32_t;\n"
    "#define NNC_INF (__longlong_as_double(0x7ff0000000000000LL))\n"
    "\n"
    "/* Sums and maxima across a warp (every lane gets the result) and across a block (blockDim.x\n"
    " * a multiple of 32; every thread must call, every thread gets the result). */\n"
    "__device__ __forceinline__ double nnc_warp_sum(double v) {\n"
    "    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "    return v;\n"
    "}\n"
    "__device__ __forceinline__ real nnc_warp_max(real v) {\n"
    "    for (int o = 16; o > 0; o >>= 1) {\n"
    "        real u = __shfl_xor_sync(0xffffffffu, v, o);\n"
    "        v = u > v || u != u ? u : v;   /* NaN wins, as torch.amax */\n"
    "    }\n"
    "    return v;\n"
    "}\n"
    "__device__ double nnc_block_reduce(double v, bool is_max) {\n"
    "    __shared__ double sh[33];\n"
    "    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;\n"
    "    for (int o = 16; o > 0; o >>= 1) {\n"
    "        double u = __shfl_xor_sync(0xffffffffu, v, o);\n"
    "        v = is_max ? (u > v || u != u ? u : v) : v + u;\n"
    "    }\n"
    "    __syncthreads();   /* the previous call's readers are done with sh */\n"
    "    if (lane == 0) sh[w] = v;\n"
    "    __syncthreads();\n"
    "    if (w == 0) {\n"
    "        v = lane < nw ? sh[lane] : (is_max ? -NNC_INF : 0.0);\n"
    "        for (int o = 16; o > 0; o >>= 1) {\n"
    "            double u = __shfl_xor_sync(0xffffffffu, v, o);\n"
    "            v = is_max ? (u > v || u != u ? u : v) : v + u;\n"
    "        }\n"
    "        if (lane == 0) sh[32] = v;\n"
    "    }\n"
    "    __syncthreads();\n"
    "    return sh[32];\n"
    "}\n"
    "__device__ __forceinline__ double nnc_block_sum(double v) { return nnc_block_reduce(v, false); }\n"
    "__device__ __forceinline__ double nnc_block_max(double v) { return nnc_block_reduce(v, true); }\n"
    "\n"
    "/* The train step's first launch: the optimizer step counter lives on the device. */\n"
    "extern \"C\" __global__ void nnc_step_inc(int64_t *stepp) {\n"
    "    if (threadIdx.x == 0 && blockIdx.x == 0) stepp[0] += 1;\n"
    "}\n";

/* --check-numerics: the lowest index of a NaN or Inf in q[0, n), by exponent bits (immune to
 * fast-math); *first starts at ~0ull, so "none" reads back as the largest value. */
#define CHECK_FINITE(T, BITS, MASK)                                                                 \
    "\n/* --check-numerics: after each launch, the first non-finite element of each output. */\n"  \
    "extern \"C\" __global__ void __launch_bounds__(256) nnc_check_finite(const " T " *q, int64_t n,"  \
    " unsigned long long *first) {\n"                                                              \
    "    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x)\n" \
    "        if ((" BITS "(q[i]) & " MASK ") == " MASK ") atomicMin(first, (unsigned long long)i);\n" \
    "}\n"
static const char check_finite_f32[] = CHECK_FINITE("float", "__float_as_int", "0x7f800000");
static const char check_finite_f64[] = CHECK_FINITE("double", "__double_as_longlong", "0x7ff0000000000000LL");

void cuda_render(const Program *p, const BuildOpts *o, Str *s) {
    R r = {.p = p, .g = p->g, .o = o, .s = s};
    str_puts(s, "/* Generated by nnc from ");
    render_comment_text(s, p->diag && p->diag->file ? p->diag->file : "a model");
    str_puts(s,
        " for the CUDA target (NVRTC). Do not edit: edit the model.\n"
        " * One kernel per launch of each entry point, each headed by the model lines it computes;\n"
        " * GEMMs run as cuBLAS calls and copies as memcpys, in the order of the schedule\n"
        " * (nnc MODEL --target cuda --emit ir shows it). */\n");
    if (o->f64)
        str_puts(s, "typedef double real;\n#define EXP exp\n#define LOG log\n#define SQRT sqrt\n#define TANH tanh\n#define POW pow\n#define FABS fabs\n#define ERF erf\n#define LOG1P log1p\n");
    else
        str_puts(s, "typedef float real;\n#define EXP expf\n#define LOG logf\n#define SQRT sqrtf\n#define TANH tanhf\n#define POW powf\n#define FABS fabsf\n#define ERF erff\n#define LOG1P log1pf\n");
    str_puts(s, prelude);
    if (o->check_numerics) str_puts(s, o->f64 ? check_finite_f64 : check_finite_f32);
    for (int k = 0; k < ENTRY_COUNT; k++) {
        r.e = &p->entry[k];
        for (int i = 0; i < r.e->nlaunch; i++)
            if (cuda_launch_is_kernel(&r.e->launches[i])) render_kernel(&r, &r.e->launches[i], i);
    }
}

/* ---- launch configuration (host side) ------------------------------------------------------ */

static unsigned clamp_grid(int64_t blocks) {
    if (blocks < 1) return 1;
    return blocks > MAX_GRID ? MAX_GRID : (unsigned)blocks;
}

static unsigned pow2_block(int64_t work, unsigned lo, unsigned hi) {
    unsigned b = lo;
    while (b < hi && (int64_t)b < work) b *= 2;
    return b;
}

/* The largest block cuda_launch_dims gives this launch, at any batch size. */
unsigned cuda_launch_max_block(const Graph *g, const Launch *L) {
    if (L->kind == L_ROW) {
        Op op = g->nodes[L->root].op;
        return op == OP_CROSS_ENTROPY || op == OP_ACCURACY ? 1024 : ROW_THREADS;
    }
    return L->kind == L_REDUCE ? 256 : EW_THREADS;
}

CudaDims cuda_launch_dims(const Program *p, const Entry *e, const Launch *L, int64_t B) {
    const Graph *g = p->g;
    CudaDims d = {1, 32};
    (void)e;
    if (L->kind == L_EW) {
        d.block = EW_THREADS;
        d.grid = clamp_grid((numel_at(L->space, B) + EW_THREADS - 1) / EW_THREADS);
    } else if (L->kind == L_REDUCE) {
        int64_t mask = launch_reduce_mask(g, L);
        int64_t nred = numel_at(axes_shape(L->space, mask, true), g->batch_max);
        d.block = pow2_block(nred, 32, 256);
        d.grid = clamp_grid(numel_at(axes_shape(L->space, mask, false), B));
    } else if (L->kind == L_ROW) {
        const Node *n = &g->nodes[L->root];
        Shape xs = g->nodes[n->in[0]].shape;
        int64_t cols = xs.rank ? xs.d[xs.rank - 1] : 1;
        if (cols == DIM_BATCH) cols = B;
        int64_t rows = cols > 0 ? numel_at(xs, B) / cols : 0;
        if (n->op == OP_CROSS_ENTROPY || n->op == OP_ACCURACY) {
            d.grid = 1;
            d.block = pow2_block(32 * rows, 32, 1024);
        } else {
            d.block = ROW_THREADS;
            d.grid = clamp_grid((rows + ROW_THREADS / 32 - 1) / (ROW_THREADS / 32));
        }
    }
    return d;
}
