/* dialect_cuda.c - how the kernel walker (kernel.c) speaks CUDA C, for NVRTC.
 *
 * Every kernel is an `extern "C" __global__` function with the parameter list
 * CUDA_KERNEL_PARAMS, launched with the grid and block of cuda_launch_dims (render_cuda.c),
 * whose thread layout this file assumes (docs/architecture.md, "GPU kernels", says why):
 *   - elementwise: a grid-stride loop over the flat index space.  Where every operand is
 *     contiguous (full-size, a scalar, or a suffix such as a bias), 16 bytes at a time (float4,
 *     double2; the plan starts every buffer on 256 bytes), then the last n % lanes elements one
 *     by one; else per-axis indices, split only when some operand is broadcast or transposed;
 *   - reductions, by cuda_reduce_shape: RED_SPLIT, grid (outputs, splits), each block striding
 *     over its share of an output's elements; RED_COLS, blocks over column strips and row ranges
 *     (a bias gradient: a warp reads 128 contiguous floats); RED_WARP, a warp per short row.
 *     Double accumulation, several accumulators a thread (one per lane of a vector), shuffles
 *     and shared memory in a fixed tree.  Where one output's elements span several blocks, each
 *     writes its partial into the workspace `ws` and the last block to take a ticket (an integer
 *     atomic) adds them in block order: no float atomics, no second launch, the same bits
 *     whichever block finishes last;
 *   - row-wise: one warp per row, its lanes striding over the columns and combining with
 *     shuffles (dialect_cuda), or one block per row for rows longer than WARP_ROW_MAX
 *     (dialect_cuda_row_blocks).  A warp's layer-norm or softmax row of a length that is a
 *     multiple of 4 floats (row.owners) is read once into registers, float4 by float4
 *     (lane + 32 j), and written the same way.  Every owner of a row walks the same rows, so the shuffles and
 *     barriers never diverge.  cross_entropy's loss and accuracy's hits add one number over all
 *     rows: each block's total, then the last block sums the blocks' totals in order.  A block's
 *     cross_entropy row is read twice (row.pair_all: the maximum and exp-sum in one pass), 16
 *     bytes at a time where its length allows;
 * A label outside [0, C) sets the device error flag err[], which the runtime reads after the
 * step.  The helpers the primitives call (nnc_warp_sum, nnc_block_sum, nnc_grid_reduce, ...)
 * are defined in the prelude below, next to the strings that call them. */
#include <assert.h>
#include <string.h>

#include "cuda_backend.h"
#include "../attention.h"
#include "../kernel.h"

static void cuda_int_arg(const Kernel *k, Str *s, int64_t v) {
    int j = kernel_arg(k, 'I', v);
    if (j >= 0) str_printf(s, "arg%d", j);
    else str_printf(s, "%lldLL", (long long)v);
}

static void cuda_ptr(const Kernel *k, Str *s, int x) {
    x = kernel_resolve(k->e, x);
    const Buffer *b = &k->e->buf[x];
    const char *t = kernel_type(k, x);
    if (!DEV_IS_GPU(b->dev) && b->kind != BUF_PARAM && b->kind != BUF_STATE) {
        str_printf(s, "((%s *)0) /* host value: the backend refuses to launch this */", t);
        return;
    }
    char base = b->kind == BUF_PARAM ? 'P' : b->kind == BUF_STATE ? 'S' : 'A';
    char off[32];
    switch (b->kind) {
    case BUF_PARAM:
    case BUF_STATE:
    case BUF_ACT: {
        int j = kernel_arg(k, base, b->offset);
        if (j >= 0) snprintf(off, sizeof off, "off%d", j);
        else snprintf(off, sizeof off, "%lld", (long long)b->offset);
        if (b->kind == BUF_ACT) str_printf(s, "((%s *)(A + %s))", t, off);
        else str_printf(s, "(%c + %s)", base, off);
        break;
    }
    case BUF_NONE: case BUF_INLINE: case BUF_INPUT: case BUF_ALIAS:
        str_printf(s, "((%s *)0) /* internal: node %d has no buffer */", t, x);
        break;
    }
}

static const char support[] =
    "typedef long long int64_t;\n"
    "typedef int int32_t;\n"
    "#define NNC_INF (__longlong_as_double(0x7ff0000000000000LL))\n"
    "\n"
    "/* One step of a sum or a maximum; NaN wins a maximum, as torch.amax, whichever side holds it. */\n"
    "__device__ __forceinline__ double nnc_pick(double v, double u, bool is_max) {\n"
    "    return is_max ? (u > v || u != u ? u : v) : v + u;\n"
    "}\n"
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
    "__device__ __forceinline__ double nnc_warp_reduce(double v, bool is_max) {\n"
    "    for (int o = 16; o > 0; o >>= 1) v = nnc_pick(v, __shfl_xor_sync(0xffffffffu, v, o), is_max);\n"
    "    return v;\n"
    "}\n"
    "__device__ double nnc_block_reduce(double v, bool is_max) {\n"
    "    __shared__ double sh[33];\n"
    "    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;\n"
    "    v = nnc_warp_reduce(v, is_max);\n"
    "    __syncthreads();   /* the previous call's readers are done with sh */\n"
    "    if (lane == 0) sh[w] = v;\n"
    "    __syncthreads();\n"
    "    if (w == 0) {\n"
    "        v = nnc_warp_reduce(lane < nw ? sh[lane] : (is_max ? -NNC_INF : 0.0), is_max);\n"
    "        if (lane == 0) sh[32] = v;\n"
    "    }\n"
    "    __syncthreads();\n"
    "    return sh[32];\n"
    "}\n"
    "__device__ __forceinline__ double nnc_block_sum(double v) { return nnc_block_reduce(v, false); }\n"
    "__device__ __forceinline__ double nnc_block_max(double v) { return nnc_block_reduce(v, true); }\n"
    "/* A row's (maximum, exp-sum) from each thread's (*mx, *s), *s taken against *mx: the block's\n"
    " * maximum (NaN wins), and the sum of each *s rescaled to it (a zero sum, from a thread with no\n"
    " * columns or only -inf ones, adds nothing, whatever its maximum). */\n"
    "__device__ void nnc_block_max_sum(real *mx, double *s) {\n"
    "    const real m = (real)nnc_block_max(*mx);\n"
    "    *s = nnc_block_sum(*s == 0 ? 0.0 : *s * exp((double)*mx - (double)m));\n"
    "    *mx = m;\n"
    "}\n"
    "\n"
    "/* The workspace ws (CUDA_KERNEL_PARAMS): tickets, then the partials. */\n"
    "#define NNC_PARTS(ws) ((double *)((ws) + %d))\n"
    "\n"
    "/* Block b of n that work on one result: its value *v (every thread holds it) goes to part[b];\n"
    " * the last block to take a ticket adds part[0, n) in a fixed order, so the result does not\n"
    " * depend on which block that is.  Every thread of every block calls; true in the last block,\n"
    " * whose threads all get the result in *v.  The ticket is left at 0 for the next launch. */\n"
    "__device__ bool nnc_grid_reduce(double *v, double *part, unsigned b, unsigned n, unsigned *ticket, bool is_max) {\n"
    "    __shared__ bool last;\n"
    "    if (n == 1) return true;\n"
    "    __syncthreads();   /* every thread has read the previous call's `last` */\n"
    "    if (threadIdx.x == 0) {\n"
    "        part[b] = *v;\n"
    "        __threadfence();   /* the partial is visible before the ticket is */\n"
    "        last = atomicAdd(ticket, 1u) == n - 1;\n"
    "    }\n"
    "    __syncthreads();\n"
    "    if (!last) return false;\n"
    "    __threadfence();\n"
    "    double a = is_max ? -NNC_INF : 0.0;\n"
    "    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) a = nnc_pick(a, ((volatile double *)part)[i], is_max);\n"
    "    *v = nnc_block_reduce(a, is_max);\n"
    "    if (threadIdx.x == 0) *ticket = 0;\n"
    "    return true;\n"
    "}\n"
    "/* A row kernel's scalar (cross_entropy's loss, accuracy's hits), *v its block's total: true\n"
    " * in the one thread that writes the grid's total. */\n"
    "__device__ __forceinline__ bool nnc_grid_done(double *v, unsigned *ws) {\n"
    "    return nnc_grid_reduce(v, NNC_PARTS(ws), blockIdx.x, gridDim.x, ws, false) && threadIdx.x == 0;\n"
    "}\n"
    "\n"
    "/* RED_COLS blocks: thread t owns the w columns of a[] at strip position t %% cw, for the rows\n"
    " * t / cw (mod blockDim.x / cw).  nnc_cols_fold leaves each column's sum over the block's rows\n"
    " * in threads t < cw, added in row order. */\n"
    "__device__ __forceinline__ void nnc_cols_fold(double *a, int w, int cw, bool is_max) {\n"
    "    __shared__ double sh[1024];   /* 256 threads, 4 lanes */\n"
    "    __syncthreads();\n"
    "    for (int q = 0; q < w; q++) sh[threadIdx.x * w + q] = a[q];\n"
    "    __syncthreads();\n"
    "    if ((int)threadIdx.x < cw)\n"
    "        for (int r = 1; r < (int)blockDim.x / cw; r++)\n"
    "            for (int q = 0; q < w; q++) a[q] = nnc_pick(a[q], sh[(r * cw + threadIdx.x) * w + q], is_max);\n"
    "}\n"
    "/* ... then, with gridDim.y row ranges, the column sums go to part[blockIdx.y * C + c] and the\n"
    " * strip's last block adds them in row-range order: true where threads t < cw hold the\n"
    " * strip's totals (c0 is the thread's first column).  Thread t adds the ranges t / cw, then every\n"
    " * blockDim.x / cw, loading 4 of them before adding them (render_cuda.c keeps gridDim.y within\n"
    " * 4 x blockDim.x / cw: one round trip to L2); __ldcg reads L2, where the other blocks' partials\n"
    " * are, past this SM's L1. */\n"
    "__device__ __forceinline__ bool nnc_cols_finish(double *a, int w, int cw, bool is_max, double *part, int64_t C,\n"
    "                                                int64_t c0, unsigned *ticket) {\n"
    "    __shared__ bool last;\n"
    "    if (gridDim.y == 1) return true;\n"
    "    if ((int)threadIdx.x < cw && c0 < C)\n"
    "        for (int q = 0; q < w; q++) part[blockIdx.y * C + c0 + q] = a[q];\n"
    "    __threadfence();\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.y - 1;\n"
    "    __syncthreads();\n"
    "    if (!last) return false;\n"
    "    __threadfence();\n"
    "    const unsigned down = blockDim.x / cw;\n"
    "    for (int q = 0; q < w; q++) a[q] = is_max ? -NNC_INF : 0.0;\n"
    "    if (c0 < C)\n"
    "        for (unsigned s = threadIdx.x / cw; s < gridDim.y; s += 4 * down) {\n"
    "            double x[4][4];\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < 4; j++)\n"
    "                for (int q = 0; q < w; q++)\n"
    "                    x[j][q] = s + j * down < gridDim.y ? __ldcg(part + (s + j * down) * C + c0 + q) : 0.0;\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < 4; j++)\n"
    "                for (int q = 0; q < w; q++)\n"
    "                    if (s + j * down < gridDim.y) a[q] = nnc_pick(a[q], x[j][q], is_max);\n"
    "        }\n"
    "    nnc_cols_fold(a, w, cw, is_max);\n"
    "    if (threadIdx.x == 0) *ticket = 0;\n"
    "    return true;\n"
    "}\n"
    "\n"
    "/* accuracy: whether (v2, i2) beats (bv, bi): larger value (NaN above all, NaNs equal), then\n"
    " * smaller index; i < 0 is no candidate. */\n"
    "__device__ __forceinline__ bool nnc_argmax_takes(real v2, int64_t i2, real bv, int64_t bi) {\n"
    "    const bool n2 = v2 != v2, nb = bv != bv;\n"
    "    return i2 >= 0 && (bi < 0 || (n2 && !nb) || (!nb && v2 > bv) || ((n2 == nb && (n2 || v2 == bv)) && i2 < bi));\n"
    "}\n"
    "/* ... and a block's warps' best pairs, combined in warp order for thread 0. */\n"
    "__device__ void nnc_argmax_block(real *bv, int64_t *bi) {\n"
    "    __shared__ real wv[32];\n"
    "    __shared__ int64_t wi[32];\n"
    "    __syncthreads();   /* thread 0 has read the previous row's */\n"
    "    if ((threadIdx.x & 31) == 0) {\n"
    "        wv[threadIdx.x >> 5] = *bv;\n"
    "        wi[threadIdx.x >> 5] = *bi;\n"
    "    }\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x == 0)\n"
    "        for (int w = 1; w < (int)(blockDim.x >> 5); w++)\n"
    "            if (nnc_argmax_takes(wv[w], wi[w], *bv, *bi)) {\n"
    "                *bv = wv[w];\n"
    "                *bi = wi[w];\n"
    "            }\n"
    "}\n";

/* NVRTC has no libc headers: the integer types and infinity come from here. */
static void cuda_prelude(Str *s, const BuildOpts *o) {
    kernel_math_prelude(s, o->f64, "__device__ __forceinline__");
    str_printf(s, support, CUDA_TICKETS);
}

/* The name and the offset parameters are markers until render_cuda.c knows which kernel this
 * text is (KERNEL_NAME_MARK, KERNEL_ARGS_MARK). */
static void cuda_open(const Kernel *k, const Launch *L, int index) {
    (void)index;
    /* the bound lets the compiler budget registers for the largest block it is launched with */
    unsigned resident = cuda_launch_min_blocks(k->g, L, k->o->f64);
    str_printf(k->s, "extern \"C\" __global__ void __launch_bounds__(%u", cuda_launch_max_block(k->g, L, k->o->f64));
    if (resident) str_printf(k->s, ", %u", resident);
    if (k->segment) /* its offsets, sizes and integers come from its segment's row of the table */
        str_puts(k->s,
                 ") " KERNEL_NAME_MARK "(" CUDA_KERNEL_PARAMS ") {\n"
                 "    (void)P; (void)S; (void)A; (void)B; (void)stepp; (void)err; (void)ws;\n" KERNEL_ARGS_MARK);
    else
        str_puts(k->s,
                 ") " KERNEL_NAME_MARK "(" CUDA_KERNEL_PARAMS KERNEL_ARGS_MARK ") {\n"
                 "    (void)P; (void)S; (void)A; (void)B; (void)stepp; (void)err; (void)ws;\n");
}

/* ---- index spaces --------------------------------------------------------------------------- */

/* Splits the flat index `var` into the axis indices a<l> for the axes in `mask` (row-major).
 * Every caller's `var` is below the product of those axes' sizes, so what is left for the
 * outermost one is its index: no remainder, no division (that one is by the batch size in most
 * kernels, a 64-bit division by a value known only at run time: about 70 instructions a
 * thread, which held GPT-2's permutes to 0.8-1.7 TB/s on an H200). */
static void split_index(const Kernel *k, Shape sp, int64_t mask, const char *var, const char *ind) {
    str_printf(k->s, "%s{\n%s    int64_t q = %s;\n", ind, ind, var);
    int outer = 0;
    while (outer < sp.rank && !(mask >> outer & 1)) outer++;
    for (int l = sp.rank - 1; l >= 0; l--) {
        if (!(mask >> l & 1)) continue;
        if (l == outer) {
            str_printf(k->s, "%s    a%d = q;\n", ind, l);
            break;
        }
        str_printf(k->s, "%s    a%d = q %% (", ind, l);
        render_dim(k->s, sp.d[l], "B");
        str_printf(k->s, ");\n%s    q /= (", ind);
        render_dim(k->s, sp.d[l], "B");
        str_puts(k->s, ");\n");
    }
    str_printf(k->s, "%s}\n", ind);
}

static void decl_axes(const Kernel *k, int rank, const char *ind) {
    if (!rank) return;
    str_printf(k->s, "%sint64_t", ind);
    for (int l = 0; l < rank; l++) str_printf(k->s, "%s a%d = 0", l ? "," : "", l);
    str_puts(k->s, ";\n");
}

#define GRID_STRIDE "blockIdx.x * (int64_t)blockDim.x + threadIdx.x"
#define GRID_THREADS "(int64_t)blockDim.x * gridDim.x"
/* ... in a segment of a grouped kernel (Kernel.segment): the segment's blocks, nnc_bx of nnc_gx
 * (render_cuda.c's emit_group declares them from the segment's row of the table) */
#define SEG_STRIDE "nnc_bx * (int64_t)blockDim.x + threadIdx.x"
#define SEG_THREADS "(int64_t)blockDim.x * nnc_gx"

static const char *grid_stride(const Kernel *k) { return k->segment ? SEG_STRIDE : GRID_STRIDE; }
static const char *grid_threads(const Kernel *k) { return k->segment ? SEG_THREADS : GRID_THREADS; }

/* The elements of a space: its size in the text, or in a segment a parameter (its launch's size,
 * from the table), so that launches of one body but other sizes render the same text. */
static void space_numel(const Kernel *k, Shape sp) {
    int j = k->segment ? kernel_arg(k, 'N', shape_numel(sp, 1)) : -1;
    if (j >= 0) str_printf(k->s, "arg%d", j);
    else render_numel(k->s, sp);
}

static int cuda_space_open(const Kernel *k, const Launch *L, Shape sp, bool flat, bool inplace) {
    (void)L;
    (void)inplace;
    str_puts(k->s, "    const int64_t n = ");
    space_numel(k, sp);
    str_printf(k->s, ";\n    for (int64_t i = %s; i < n; i += %s) {\n", grid_stride(k), grid_threads(k));
    if (!flat) {
        decl_axes(k, sp.rank, "        ");
        split_index(k, sp, ((int64_t)1 << sp.rank) - 1, "i", "        ");
    }
    return 8;
}

static void cuda_space_close(const Kernel *k, const Launch *L, Shape sp, bool flat) {
    (void)L;
    str_puts(k->s, "    }\n");
    (void)sp;
    (void)flat;
}

/* ---- 16-byte accesses ----------------------------------------------------------------------- */

static int cuda_ew_lanes(const Kernel *k, const Launch *L) { return cuda_vec_lanes(k->g, L, k->o->f64); }

static int cuda_vec_open(const Kernel *k, Shape sp, int lanes) {
    str_puts(k->s, "    const int64_t n = ");
    space_numel(k, sp);
    str_printf(k->s, ", nv = n / %d;\n    for (int64_t v = %s; v < nv; v += %s) {\n", lanes, grid_stride(k),
               grid_threads(k));
    return 8;
}

static void cuda_vec_tail(const Kernel *k, Shape sp, int lanes) {
    str_printf(k->s, "    }\n    for (int64_t i = nv * %d + %s; i < n; i += %s) {\n", lanes, grid_stride(k),
               grid_threads(k));
    (void)sp;
}

/* float4, double2, int4, ushort4 ...: `lanes` elements of kernel_type t; eight 16-bit words
 * (a row kernel's bf16 logits) travel as a uint4, two to a component, the first in the low half
 * (little-endian, as memory holds them). */
static bool vec_pairs(const char *t, int lanes) { return lanes == 8 && !strcmp(t, "unsigned short"); }

static void vec_type(const Kernel *k, const char *t, int lanes, char *buf, size_t n) {
    const char *e = !strcmp(t, "int32_t") ? "int"
        : !strcmp(t, "unsigned short")    ? "ushort"
        : k->o->f64                       ? "double"
                                          : "float";
    if (vec_pairs(t, lanes)) snprintf(buf, n, "uint4");
    else snprintf(buf, n, "%s%d", e, lanes);
}

/* "IND const VT DSTv = SRC; const T DST[lanes] = {...}": a vector from SRC, and its elements. */
static void vec_unpack(const Kernel *k, const char *ind, const char *t, int lanes, const char *dst, const char *src) {
    char vt[16];
    vec_type(k, t, lanes, vt, sizeof vt);
    str_printf(k->s, "%sconst %s %sv = %s;\n%sconst %s %s[%d] = {", ind, vt, dst, src, ind, t, dst, lanes);
    for (int q = 0; q < lanes; q++)
        if (vec_pairs(t, lanes))
            str_printf(k->s, "%s(%s)(%sv.%c%s)", q ? ", " : "", t, dst, "xyzw"[q / 2], q % 2 ? " >> 16" : "");
        else str_printf(k->s, "%s%sv.%c", q ? ", " : "", dst, "xyzw"[q]);
    str_puts(k->s, "};\n");
}

static void cuda_vec_load(const Kernel *k, const char *ind, const char *t, int lanes, const char *dst, const char *p,
                          const char *v) {
    char vt[16], src[96];
    vec_type(k, t, lanes, vt, sizeof vt);
    snprintf(src, sizeof src, "((const %s *)%s)[%s]", vt, p, v);
    vec_unpack(k, ind, t, lanes, dst, src);
}

/* RED_COLS: the vector row rk of the round, which cols_loads put in P_r[rk]. */
static void cols_vec_load(const Kernel *k, const char *ind, const char *t, int lanes, const char *dst, const char *p,
                          const char *v) {
    char src[48];
    (void)v;
    snprintf(src, sizeof src, "%s_r[rk]", p);
    vec_unpack(k, ind, t, lanes, dst, src);
}

static void cuda_vec_store(const Kernel *k, const char *ind, const char *t, int lanes, const char *p, const char *v,
                           const char *src) {
    char vt[16];
    vec_type(k, t, lanes, vt, sizeof vt);
    str_printf(k->s, "%s((%s *)%s)[%s] = make_%s(", ind, vt, p, v, vt);
    for (int q = 0; q < lanes; q++)
        if (vec_pairs(t, lanes)) {
            if (q % 2 == 0) str_printf(k->s, "%s%s[%d] | (unsigned)%s[%d] << 16", q ? ", " : "", src, q, src, q + 1);
        } else str_printf(k->s, "%s%s[%d]", q ? ", " : "", src, q);
    str_puts(k->s, ");\n");
}

/* ---- reductions ----------------------------------------------------------------------------- */

static const char *is_max(const Kernel *k, const Launch *L) { return kernel_reduce_is_max(k, L) ? "true" : "false"; }

/* nout and nred, the kept and reduced extents, and scale (mean's 1 / nred). */
static void reduce_head(const Kernel *k, const Launch *L, int64_t mask) {
    str_puts(k->s, "    const int64_t nout = ");
    render_numel(k->s, launch_space_axes(L, mask, false));
    str_puts(k->s, ", nred = ");
    space_numel(k, launch_space_axes(L, mask, true));
    str_printf(k->s, ";\n    const double scale = %s;\n",
               k->g->nodes[L->root].op == OP_MEAN ? "1.0 / (double)nred" : "1.0");
}

/* acc[lanes]: independent accumulators, one per lane of a vector. */
static void acc_decl(const Kernel *k, const Launch *L, int lanes, const char *ind) {
    str_printf(k->s, "%sdouble acc[%d];\n%sfor (int q = 0; q < %d; q++) acc[q] = %s;\n", ind, lanes, ind, lanes,
               kernel_reduce_is_max(k, L) ? "-NNC_INF" : "0.0");
}

/* a: the accumulators combined, in lane order. */
static void acc_fold(const Kernel *k, const Launch *L, int lanes, const char *ind) {
    str_printf(k->s, "%sdouble a = acc[0];\n", ind);
    if (lanes > 1)
        str_printf(k->s, "%sfor (int q = 1; q < %d; q++) a = nnc_pick(a, acc[q], %s);\n", ind, lanes, is_max(k, L));
}

/* The point at the flat index i (declared before): flat loads, or i split into every axis. */
static void point_at_i(const Kernel *k, const Launch *L, const char *ind, const char *target) {
    if (kernel_flat(k, L)) {
        kernel_reduce_point_at(k, L, ind, target, true);
        return;
    }
    decl_axes(k, L->space.rank, ind);
    split_index(k, L->space, ((int64_t)1 << L->space.rank) - 1, "i", ind);
    kernel_reduce_point(k, L, ind, target);
}

/* The elements j of output o that this thread takes, `first` and then every `stride`: whole
 * vectors first where r.lanes > 1 (their index within the run: u), then single elements. */
static void reduce_run(const Kernel *k, const Launch *L, CudaReduce r, const char *first, const char *stride) {
    int64_t mask = launch_reduce_mask(k->g, L), all = ((int64_t)1 << L->space.rank) - 1;
    const char *ind = "            ";
    if (r.lanes > 1) {
        str_printf(k->s,
                   "        const int64_t nv = nred / %d;\n"
                   "        for (int64_t u = %s; u < nv; u += %s) {\n"
                   "            const int64_t v = o * nv + u;\n",
                   r.lanes, first, stride);
        kernel_vec_point(k, L, r.lanes, ind, "acc");
        str_puts(k->s, "        }\n");
        if (!r.tail) return;
    }
    if (r.lanes > 1) /* the last nred % lanes elements of a full reduction */
        str_printf(k->s, "        for (int64_t j = nv * %d + %s; j < nred; j += %s) {\n", r.lanes, first, stride);
    else str_printf(k->s, "        for (int64_t j = %s; j < nred; j += %s) {\n", first, stride);
    if (r.inner) {
        str_puts(k->s, "            const int64_t i = o * nred + j;\n");
        point_at_i(k, L, ind, "acc[0]");
    } else {
        decl_axes(k, L->space.rank, ind);
        split_index(k, L->space, all & ~mask, "o", ind);
        split_index(k, L->space, mask, "j", ind);
        kernel_reduce_point(k, L, ind, "acc[0]");
    }
    str_puts(k->s, "        }\n");
}

/* RED_SPLIT: block (o, s) takes output o's elements s * blockDim.x + t, then every
 * gridDim.y * blockDim.x; the partials of o's gridDim.y blocks are combined by the last one.  In
 * a segment of a grouped kernel (one output: horizontal.c's runs reduce whole tensors) the
 * segment's blocks nnc_bx of nnc_gx are the splits, their partials start at the segment's first
 * block nnc_b0 and its ticket is its index nnc_s (render_cuda.c keeps both in the workspace). */
static void reduce_split(const Kernel *k, const Launch *L, CudaReduce r) {
    reduce_head(k, L, launch_reduce_mask(k->g, L));
    const char *o0 = k->segment ? "0" : "blockIdx.x", *step = k->segment ? "1" : "gridDim.x";
    const char *split = k->segment ? "nnc_bx" : "blockIdx.y", *splits = k->segment ? "nnc_gx" : "gridDim.y";
    str_printf(k->s,
               "    double *const part = NNC_PARTS(ws);\n"
               "    for (int64_t o = %s; o < nout; o += %s) {\n",
               o0, step);
    acc_decl(k, L, r.lanes, "        ");
    char first[64], stride[64];
    snprintf(first, sizeof first, "%s * (int64_t)blockDim.x + threadIdx.x", split);
    snprintf(stride, sizeof stride, "(int64_t)%s * blockDim.x", splits);
    reduce_run(k, L, r, first, stride);
    acc_fold(k, L, r.lanes, "        ");
    str_printf(k->s, "        a = nnc_block_reduce(a, %s);\n", is_max(k, L));
    if (k->segment)
        str_printf(
            k->s,
            "        if (nnc_grid_reduce(&a, part + nnc_b0, nnc_bx, nnc_gx, ws + nnc_s, %s) && threadIdx.x == 0)\n",
            is_max(k, L));
    else
        str_printf(k->s,
                   "        if (nnc_grid_reduce(&a, part + o * gridDim.y, blockIdx.y, gridDim.y, ws + o, %s) && "
                   "threadIdx.x == 0)\n",
                   is_max(k, L));
    str_puts(k->s,
             "            o0[o] = (real)(a * scale);\n"
             "    }\n");
}

/* RED_COLS, vectors: a round's loads, r.rows rows (row rk at ROW(g); where `clamp`, rows past
 * nred - 1 read at nred - 1), into arrays i<j>_r (cols_decl), all issued before the first add:
 * in a full round they are made at the end of the loop's body, for the next turn's adds, and
 * the kernel's __launch_bounds__ (cuda_launch_min_blocks) lets ptxas keep them in registers,
 * where it otherwise moved them down to their adds (2 to 4 of 8 in flight).  Vector v of row
 * rw is rw * (nout / lanes) + c0 / lanes: rows a constant apart, addresses a constant apart. */
static void cols_decl(const Kernel *k, const Launch *L, CudaReduce r) {
    char vt[32];
    for (int j = 0; j < L->nins; j++) {
        if (kernel_access(k->g, L->ins[j], L->space) == ACCESS_SCALAR) continue;
        vec_type(k, kernel_type(k, L->ins[j]), r.lanes, vt, sizeof vt);
        str_printf(k->s, "        %s i%d_r[%u];\n", vt, j, r.rows);
    }
}

static void cols_loads(const Kernel *k, const Launch *L, CudaReduce r, const char *ind, const char *g, bool clamp) {
    char vt[32];
    str_printf(k->s, "%s#pragma unroll\n%sfor (int rk = 0; rk < %u; rk++) {\n", ind, ind, r.rows);
    if (clamp)
        str_printf(k->s, "%s    const int64_t v = (ROW(%s) < nred ? ROW(%s) : nred - 1) * (nout / %d) + c0 / %d;\n",
                   ind, g, g, r.lanes, r.lanes);
    else str_printf(k->s, "%s    const int64_t v = ROW(%s) * (nout / %d) + c0 / %d;\n", ind, g, r.lanes, r.lanes);
    for (int j = 0; j < L->nins; j++) {
        int x = L->ins[j];
        Access a = kernel_access(k->g, x, L->space);
        if (a == ACCESS_SCALAR) continue;
        vec_type(k, kernel_type(k, x), r.lanes, vt, sizeof vt);
        str_printf(k->s, "%s    i%d_r[rk] = ((const %s *)i%d)[v", ind, j, vt, j);
        if (a == ACCESS_SUFFIX)
            str_printf(k->s, " %% %lldLL", (long long)(shape_numel(k->g->nodes[x].shape, 1) / r.lanes));
        str_puts(k->s, "];\n");
    }
    str_printf(k->s, "%s}\n", ind);
}

/* acc[q] takes x[q] where row ROW(g) is below nred: a select, not a branch, which would let the
 * compiler move the row's loads into it, one after another.  x = 0 + y (or the maximum of -inf
 * and y) adds to acc what y would: acc, from +0, is never -0. */
static void cols_take(const Kernel *k, const Launch *L, int lanes, const char *ind, const char *g) {
    str_printf(k->s, "%sfor (int q = 0; q < %d; q++) acc[q] = ROW(%s) < nred ? nnc_pick(acc[q], x[q], %s) : acc[q];\n",
               ind, lanes, g, is_max(k, L));
}

/* ... and its adds, in row order; with `g` (the last round), only the rows below nred. */
static void cols_adds(const Kernel *k, const Launch *L, CudaReduce r, const char *ind, const char *g) {
    KernelDialect d = *k->d;
    d.vec.load = cols_vec_load;
    Kernel kc = *k;
    kc.d = &d;
    char in2[64];
    snprintf(in2, sizeof in2, "%s    ", ind);
    str_printf(k->s, "%s#pragma unroll\n%sfor (int rk = 0; rk < %u; rk++) {\n", ind, ind, r.rows);
    if (g) {
        str_printf(k->s, "%s    double x[%d];\n", ind, r.lanes);
        str_printf(k->s, "%s    for (int q = 0; q < %d; q++) x[q] = %s;\n", ind, r.lanes,
                   kernel_reduce_is_max(k, L) ? "-NNC_INF" : "0.0");
    }
    kernel_vec_point(&kc, L, r.lanes, in2, g ? "x" : "acc");
    if (g) cols_take(k, L, r.lanes, in2, g);
    str_printf(k->s, "%s}\n", ind);
}

/* RED_COLS, one element at a time (nout not a multiple of 4, or operands read through per-axis
 * indices): the round's rows unrolled, for ptxas to schedule; with `g` (the last round), each
 * read at a row clamped to nred - 1 and taken where below it. */
static void cols_scalars(const Kernel *k, const Launch *L, CudaReduce r, const char *ind, const char *g) {
    char in2[64];
    snprintf(in2, sizeof in2, "%s    ", ind);
    str_printf(k->s, "%s#pragma unroll\n%sfor (int rk = 0; rk < %u; rk++) {\n", ind, ind, r.rows);
    if (!g) {
        str_printf(k->s, "%s    const int64_t i = ROW(rg) * nout + c0;\n", ind);
        point_at_i(k, L, in2, "acc[0]");
    } else {
        str_printf(k->s,
                   "%s    const int64_t i = (ROW(%s) < nred ? ROW(%s) : nred - 1) * nout + c0;\n"
                   "%s    double x[1] = {%s};\n",
                   ind, g, g, ind, kernel_reduce_is_max(k, L) ? "-NNC_INF" : "0.0");
        point_at_i(k, L, in2, "x[0]");
        cols_take(k, L, 1, in2, g);
    }
    str_printf(k->s, "%s}\n", ind);
}

/* "if (rg < full) {plain} else {last}": a round's loads or adds, the last round's in `last`. */
static void cols_either(const Kernel *k, const Launch *L, CudaReduce r, const char *ind, bool loads) {
    char in2[64];
    snprintf(in2, sizeof in2, "%s    ", ind);
    str_printf(k->s, "%sif (rg < full) {\n", ind);
    if (loads) cols_loads(k, L, r, in2, "rg", false);
    else cols_adds(k, L, r, in2, NULL);
    str_printf(k->s, "%s} else {\n", ind);
    if (loads) cols_loads(k, L, r, in2, "rg", true);
    else cols_adds(k, L, r, in2, "rg");
    str_printf(k->s, "%s}\n", ind);
}

/* RED_COLS: the elements are [nred rows, nout columns]; thread t of block (x, y) owns columns
 * c0 .. c0 + lanes - 1 of strip x.  The rows go in rounds of r.rows * down (down = block / cw):
 * block y takes rounds y, y + gridDim.y, ..., and thread t of round g the rows ROW(g) = g *
 * round + rk * down + t / cw, rk < r.rows, which it adds in rk order; the last round, where
 * nred % round rows are left, only those below nred.  Then the block's rows are folded, and the
 * strip's blocks' partials added. */
static void reduce_cols(const Kernel *k, const Launch *L, CudaReduce r) {
    unsigned down = r.block / r.cw, round = down * r.rows;
    const char *ind = "            ";
    bool vec = r.lanes > 1;
    reduce_head(k, L, launch_reduce_mask(k->g, L));
    str_printf(k->s,
               "    double *const part = NNC_PARTS(ws);\n"
               "    const int64_t c0 = ((int64_t)blockIdx.x * %u + threadIdx.x %% %u) * %d;\n",
               r.cw, r.cw, r.lanes);
    acc_decl(k, L, r.lanes, "    ");
    str_printf(k->s,
               "    const int64_t full = nred / %uLL, rounds = (nred + %uLL) / %uLL, r0 = threadIdx.x / %u;\n"
               "#define ROW(g) ((g) * %uLL + rk * %u + r0)\n"
               "    if (c0 < nout) {\n"
               "        int64_t rg = blockIdx.y;\n",
               round, round - 1, round, r.cw, round, down);
    if (vec) { /* each turn adds the round loaded before it */
        cols_decl(k, L, r);
        str_puts(k->s, "        if (rg < rounds) {\n");
        cols_either(k, L, r, ind, true);
        str_puts(k->s,
                 "        }\n"
                 "        while (rg < rounds) {\n");
        cols_either(k, L, r, ind, false);
        str_puts(k->s,
                 "            rg += gridDim.y;\n"
                 "            if (rg >= rounds) break;\n");
        cols_either(k, L, r, ind, true);
        str_puts(k->s, "        }\n");
    } else {
        str_puts(k->s, "        for (; rg < full; rg += gridDim.y) {\n");
        cols_scalars(k, L, r, ind, NULL);
        str_puts(k->s, "        }\n        if (rg < rounds) { /* rg == full: the last nred % round rows */\n");
        cols_scalars(k, L, r, ind, "rg");
        str_puts(k->s, "        }\n");
    }
    str_printf(
        k->s,
        "    }\n"
        "#undef ROW\n"
        "    nnc_cols_fold(acc, %d, %u, %s);\n"
        "    if (nnc_cols_finish(acc, %d, %u, %s, part, nout, c0, ws + blockIdx.x) && threadIdx.x < %uu && c0 < nout)\n"
        "        for (int q = 0; q < %d; q++) o0[c0 + q] = (real)(acc[q] * scale);\n",
        r.lanes, r.cw, is_max(k, L), r.lanes, r.cw, is_max(k, L), r.cw, r.lanes);
}

/* RED_WARP: a group of r.cw lanes an output (a warp holds 32 / cw groups): group q of the grid
 * takes outputs q, q + groups, ..., its lanes striding over the run; the warp's groups move
 * together (every lane takes part in the shuffles, those past nout with nothing to add). */
static void reduce_warp(const Kernel *k, const Launch *L, CudaReduce r) {
    reduce_head(k, L, launch_reduce_mask(k->g, L));
    str_printf(
        k->s,
        "    const int lane = threadIdx.x & %uu, per = 32 / %u;\n"
        "    for (int64_t ow = ((" GRID_STRIDE ") >> 5) * per; ow < nout; ow += ((" GRID_THREADS ") >> 5) * per) {\n"
        "        const int64_t o = ow + (threadIdx.x & 31) / %u, j0 = o < nout ? lane : nred;   /* past nout: none */\n",
        r.cw - 1, r.cw, r.cw);
    acc_decl(k, L, r.lanes, "        ");
    char stride[16];
    snprintf(stride, sizeof stride, "%u", r.cw);
    reduce_run(k, L, r, "j0", stride);
    acc_fold(k, L, r.lanes, "        ");
    str_printf(k->s,
               "        for (int x = %u; x > 0; x >>= 1) a = nnc_pick(a, __shfl_xor_sync(0xffffffffu, a, x), %s);\n"
               "        if (lane == 0 && o < nout) o0[o] = (real)(a * scale);\n"
               "    }\n",
               r.cw / 2, is_max(k, L));
}

static void cuda_reduce(const Kernel *k, const Launch *L) {
    CudaReduce r = cuda_reduce_shape(k->g, L, k->o->f64);
    /* a segment's size is a parameter: the tail loop is there whatever it is */
    if (k->segment) r.tail = r.lanes > 1;
    assert(!k->segment || r.kind == RED_SPLIT);
    switch (r.kind) {
    case RED_SPLIT: reduce_split(k, L, r); break;
    case RED_COLS: reduce_cols(k, L, r); break;
    case RED_WARP: reduce_warp(k, L, r); break;
    }
}

/* ---- rows: a warp each, or a block each ----------------------------------------------------- */

static void cuda_rows_open(const Kernel *k, const Launch *L) {
    str_puts(k->s, "    for (int64_t i = warp0; i < rows; i += nwarps) {\n");
    (void)L;
}

static void cuda_row_blocks_open(const Kernel *k, const Launch *L) {
    str_puts(k->s, "    for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {\n");
    (void)L;
}

/* The lanes' best (value, index) pairs, combined by nnc_argmax_takes. */
#define ARGMAX_WARP \
    "        for (int o = 16; o > 0; o >>= 1) {\n" \
    "            const real v2 = __shfl_xor_sync(0xffffffffu, bv, o);\n" \
    "            const int64_t i2 = __shfl_xor_sync(0xffffffffu, bi, o);\n" \
    "            if (nnc_argmax_takes(v2, i2, bv, bi)) { bv = v2; bi = i2; }\n" \
    "        }\n"
/* ... then the warps' pairs, for thread 0 (the row's leader). */
static const char argmax_block[] = ARGMAX_WARP "        nnc_argmax_block(&bv, &bi);\n";

/* the first bad label wins the flag; the runtime reports it after the step */
#define BAD_RECORD(LEADER) \
    "            if (" LEADER " && atomicCAS(err, 0, 1) == 0) {\n" \
    "                err[1] = (int)i;\n" \
    "                err[2] = t;\n" \
    "                err[3] = (int)C;\n" \
    "            }\n"

/* Everything but the rows.  NNC_INF is the prelude's (NVRTC has no math.h); the step counter
 * lives on the device, for CUDA graph replays.  Tables laid out by hand: clang-format would put
 * every field on a line of its own. */
/* clang-format off */
#define CUDA_DIALECT_COMMON                                                                     \
    .name = "cuda", .value = "const real", .inf = "NNC_INF", .step = "(*stepp)",             \
    .micro = "stepp[2]", /* after the seed: backend_cuda.c's step slot */                     \
    .qual = {"", "__restrict__ "}, .ptr = cuda_ptr, .int_arg = cuda_int_arg, .prelude = cuda_prelude, .open = cuda_open, \
    .space_open = cuda_space_open, .space_close = cuda_space_close, .reduce = cuda_reduce,   \
    .flat_suffix = true,                                                                     \
    .vec = {.lanes = cuda_ew_lanes, .open = cuda_vec_open, .tail = cuda_vec_tail,             \
            .load = cuda_vec_load, .store = cuda_vec_store, .unroll = "#pragma unroll\n"},        \
    .attention = attention_render_cuda /* its own kernel (attention_cuda_threads, _blocks) */

const KernelDialect dialect_cuda = {
    CUDA_DIALECT_COMMON,
    .row = {   /* a warp owns a row */
        .setup = "    const int lane = threadIdx.x & 31;\n"
                 "    const int64_t warp0 = (" GRID_STRIDE ") >> 5;\n"
                 "    const int64_t nwarps = (" GRID_THREADS ") >> 5;\n",
        .open = cuda_rows_open,
        .cols = "for (int64_t c = lane; c < C; c += 32)",
        /* every block counts cross_entropy's kept rows over all labels (total_all) */
        .all_rows = "for (int64_t j = threadIdx.x; j < rows; j += blockDim.x)",
        /* NaN wins, so that the warp combine (nnc_warp_max) sees it whichever lane holds it */
        .max_pick = "XL(c) > mx || XL(c) != XL(c) ? XL(c) : mx",
        .max_all = "nnc_warp_max",
        .sum_all = "nnc_warp_sum",
        .argmax_all = ARGMAX_WARP,
        /* every lane read the row (x[t] too) before the lane owning a column overwrites it;
         * shuffles do not order memory in the PTX memory model, __syncwarp does */
        .sync = "        __syncwarp();\n",
        .leader = "if (lane == 0) ",
        .total_all = "nnc_block_sum",
        .writer = "if (nnc_grid_done(&total, ws)) ",
        .bad_record = BAD_RECORD("lane == 0"),
        /* layer norm's and softmax's rows of up to 1024 floats, 8 float4 a lane an array, in
         * registers */
        .owners = 32, .owner = "lane",
    },
};

const KernelDialect dialect_cuda_row_blocks = {
    CUDA_DIALECT_COMMON,
    .row = {   /* a block owns a row */
        .open = cuda_row_blocks_open,
        .cols = "for (int64_t c = threadIdx.x; c < C; c += blockDim.x)",
        .all_rows = "for (int64_t j = threadIdx.x; j < rows; j += blockDim.x)",
        .max_pick = "XL(c) > mx || XL(c) != XL(c) ? XL(c) : mx",
        .max_all = "nnc_block_max",
        .sum_all = "nnc_block_sum",
        .argmax_all = argmax_block,
        .sync = "        __syncthreads();\n",
        .leader = "if (threadIdx.x == 0) ",
        .total_all = "nnc_block_sum",
        .writer = "if (nnc_grid_done(&total, ws)) ",
        .bad_record = BAD_RECORD("threadIdx.x == 0"),
        /* cross_entropy: two passes over a row, which stays in L2 between them (render_cuda.c) */
        .pair_all = "nnc_block_max_sum",
        .vfirst = "threadIdx.x", .vstep = "blockDim.x",
    },
};
/* clang-format on */
