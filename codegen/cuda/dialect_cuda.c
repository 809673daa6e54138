/* dialect_cuda.c - how the kernel walker (kernel.c) speaks CUDA C, for NVRTC.
 *
 * Every kernel is an `extern "C" __global__` function with the parameter list
 * CUDA_KERNEL_PARAMS, launched with the grid and block of cuda_launch_dims (render_cuda.c),
 * whose thread layout this file assumes:
 *   - elementwise: a grid-stride loop over the flat index space, split into per-axis indices
 *     only when some operand is broadcast or transposed;
 *   - reduction: one block per output element (grid-stride over outputs), threads striding over
 *     the reduced elements, double accumulation, then a warp-shuffle block reduction;
 *   - row-wise: one warp per row; its lanes stride over the columns and combine with shuffles.
 *     Every lane of a warp walks the same rows, so the shuffles never diverge.  cross_entropy
 *     and accuracy produce one scalar, so they run as a single block whose warps share the rows
 *     and combine deterministically (no atomics on the value).
 * A label outside [0, C) sets the device error flag err[], which the runtime reads after the
 * step.  The helpers the primitives call (nnc_warp_sum, nnc_block_sum, ...) are defined in the
 * prelude below, next to the strings that call them. */
#include "cuda_backend.h"
#include "../attention.h"
#include "../kernel.h"

static void cuda_ptr(const Kernel *k, Str *s, int x) {
    x = kernel_resolve(k->e, x);
    const Buffer *b = &k->e->buf[x];
    const char *t = kernel_type(k, x);
    if (!DEV_IS_GPU(b->dev) && b->kind != BUF_PARAM && b->kind != BUF_STATE) {
        str_printf(s, "((%s *)0) /* host value: the backend refuses to launch this */", t);
        return;
    }
    switch (b->kind) {
    case BUF_PARAM: str_printf(s, "(P + %lld)", (long long)b->offset); break;
    case BUF_STATE: str_printf(s, "(S + %lld)", (long long)b->offset); break;
    case BUF_ACT: str_printf(s, "((%s *)(A + %lld))", t, (long long)b->offset); break;
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
    "__device__ __forceinline__ double nnc_block_max(double v) { return nnc_block_reduce(v, true); }\n";

/* NVRTC has no libc headers: the integer types and infinity come from here. */
static void cuda_prelude(Str *s, const BuildOpts *o) {
    kernel_math_prelude(s, o->f64);
    str_puts(s, support);
}

static void cuda_open(const Kernel *k, const Launch *L, int index) {
    char name[256];
    cuda_kernel_name(name, sizeof name, k->p, k->e, index);
    /* the bound lets the compiler budget registers for the largest block it is launched with
     * (a 1024-thread block needs at most 64 registers a thread) */
    str_printf(k->s,
               "extern \"C\" __global__ void __launch_bounds__(%u) %s(" CUDA_KERNEL_PARAMS ") {\n"
               "    (void)P; (void)S; (void)A; (void)B; (void)stepp; (void)err;\n",
               cuda_launch_max_block(k->g, L, k->o->f64), name);
}

/* ---- index spaces --------------------------------------------------------------------------- */

/* Splits the flat index `var` into the axis indices a<l> for the axes in `mask` (row-major). */
static void split_index(const Kernel *k, Shape sp, int64_t mask, const char *var, const char *ind) {
    str_printf(k->s, "%s{\n%s    int64_t q = %s;\n", ind, ind, var);
    for (int l = sp.rank - 1; l >= 0; l--) {
        if (!(mask >> l & 1)) continue;
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

static int cuda_space_open(const Kernel *k, Shape sp, bool flat) {
    str_puts(k->s, "    const int64_t n = ");
    render_numel(k->s, sp);
    str_puts(k->s, ";\n    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;"
                   " i += (int64_t)blockDim.x * gridDim.x) {\n");
    if (!flat) {
        decl_axes(k, sp.rank, "        ");
        split_index(k, sp, ((int64_t)1 << sp.rank) - 1, "i", "        ");
    }
    return 8;
}

static void cuda_space_close(const Kernel *k, Shape sp, bool flat) {
    str_puts(k->s, "    }\n");
    (void)sp;
    (void)flat;
}

/* One block per output o (kept axes), its threads striding over the reduced axes j. */
static void cuda_reduce(const Kernel *k, const Launch *L) {
    Shape sp = L->space;
    int64_t mask = launch_reduce_mask(k->g, L), all = ((int64_t)1 << sp.rank) - 1;
    str_puts(k->s, "    const int64_t nout = ");
    render_numel(k->s, launch_space_axes(L, mask, false));
    str_puts(k->s, ", nred = ");
    render_numel(k->s, launch_space_axes(L, mask, true));
    str_puts(k->s, ";\n    const double scale = ");
    if (k->g->nodes[L->root].op == OP_MEAN) {
        str_puts(k->s, "1.0 / (double)");
        render_numel(k->s, launch_space_axes(L, mask, true));
    } else str_puts(k->s, "1.0");
    str_puts(k->s, ";\n    for (int64_t o = blockIdx.x; o < nout; o += gridDim.x) {\n");
    kernel_reduce_acc(k, L, 8);
    str_puts(k->s, "        for (int64_t j = threadIdx.x; j < nred; j += blockDim.x) {\n");
    const char *ind = "            ";
    decl_axes(k, sp.rank, ind);
    split_index(k, sp, all & ~mask, "o", ind);
    split_index(k, sp, mask, "j", ind);
    kernel_reduce_point(k, L, ind, "acc");
    str_printf(k->s, "        }\n        acc = %s(acc);\n"
                     "        if (threadIdx.x == 0) o0[o] = (real)(acc * scale);\n    }\n",
               kernel_reduce_is_max(k, L) ? "nnc_block_max" : "nnc_block_sum");
}

/* ---- rows: a warp each ---------------------------------------------------------------------- */

static void cuda_rows_open(const Kernel *k, int x, const char *omp) {
    str_puts(k->s, "    for (int64_t i = warp0; i < rows; i += nwarps) {\n");
    (void)x;
    (void)omp;
}

/* The lanes' best (value, index) pairs, combined by larger value (NaN above all, NaNs equal),
 * then smaller index. */
static const char argmax_all[] =
    "        for (int o = 16; o > 0; o >>= 1) {\n"
    "            const real v2 = __shfl_xor_sync(0xffffffffu, bv, o);\n"
    "            const int64_t i2 = __shfl_xor_sync(0xffffffffu, bi, o);\n"
    "            const bool n2 = v2 != v2, nb = bv != bv;\n"
    "            if (i2 >= 0 && (bi < 0 || (n2 && !nb) || (!nb && v2 > bv) || ((n2 == nb && (n2 || v2 == bv)) && i2 < bi))) { bv = v2; bi = i2; }\n"
    "        }\n";

/* a table laid out by hand: clang-format would put every field on a line of its own */
/* clang-format off */
const KernelDialect dialect_cuda = {
    .name = "cuda",
    .value = "const real",
    .inf = "NNC_INF",                   /* the prelude's: NVRTC has no math.h */
    .step = "(*stepp)",                 /* on the device, for CUDA graph replays */
    .micro = "stepp[2]",                /* after the seed: backend_cuda.c's step slot */
    .qual = {"", ""},
    .ptr = cuda_ptr,
    .prelude = cuda_prelude, .open = cuda_open,
    /* a grid-stride loop; reductions take a block per output */
    .space_open = cuda_space_open, .space_close = cuda_space_close, .reduce = cuda_reduce,
    .row = {   /* a warp owns a row; cross_entropy and accuracy are one block */
        .setup = "    const int lane = threadIdx.x & 31;\n"
                 "    const int64_t warp0 = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;\n"
                 "    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;\n",
        .open = cuda_rows_open,
        .cols = "for (int64_t c = lane; c < C; c += 32)",
        .all_rows = "for (int64_t j = lane; j < rows; j += 32)",
        /* NaN wins, so that the warp combine (nnc_warp_max) sees it whichever lane holds it */
        .max_pick = "x[c] > mx || x[c] != x[c] ? x[c] : mx",
        .max_all = "nnc_warp_max",
        .sum_all = "nnc_warp_sum",
        .argmax_all = argmax_all,
        /* every lane read the row (x[t] too) before the lane owning a column overwrites it;
         * shuffles do not order memory in the PTX memory model, __syncwarp does */
        .sync = "        __syncwarp();\n",
        .leader = "if (lane == 0) ",
        .total_all = "nnc_block_sum",
        .writer = "if (threadIdx.x == 0) ",
        /* the first bad label wins the flag; the runtime reports it after the step */
        .bad_record = "            if (lane == 0 && atomicCAS(err, 0, 1) == 0) {\n"
                      "                err[1] = (int)i;\n"
                      "                err[2] = t;\n"
                      "                err[3] = (int)C;\n"
                      "            }\n",
    },
    .attention = attention_render_cuda,   /* its own kernel (attention_cuda_threads, _blocks) */
};
/* clang-format on */
