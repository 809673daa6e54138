/* dialect_c.c - how the kernel walker (kernel.c) speaks C, for the CPU target.
 *
 * A kernel is a static function of the model file that walks its index space serially: one
 * loop per axis, or a flat loop the compiler vectorizes.  An elementwise kernel that can be large
 * is cut over its outermost loop for the model's thread pool (include/nnc_pool.h, which also runs
 * the products); large reductions and row-wise kernels carry an OpenMP pragma on the outermost
 * loop instead.  One thread owns each row of a row-wise kernel, so rows need no combining.  This
 * file is the only place that spells the model struct's members in a kernel (m->params,
 * m->state, m->act, m->step, m->status, m->msg) and the batch inputs (in[i]): the C host code
 * around the kernels may change them here alone.
 *
 * Reductions keep two loop structures, both accumulating in double:
 *   - when the kept axes come first (a suffix is reduced, the common case), each output is one
 *     accumulator over a contiguous run: cache-friendly and threaded over the outputs;
 *   - otherwise the input is walked in order and every point added into its output (a scatter),
 *     which reads the input once, in memory order, whatever the axes.
 * GEMMs are nnc_sgemm calls (cblas, cut for the pool), or plain loops when the product is too
 * small to pay for one.  A helper launch (convolution, pooling, ...) is its plan (helper_plan.c)
 * printed as C: calls of the helpers.c routines in the prelude, nnc_?gemm calls, memsets and the
 * loop over chunks of the batch. */
#include <assert.h>
#include <string.h>

#include "../attention.h"
#include "../helpers.h"
#include "../kernel.h"

#define POOL_ROW_ELEMS 32768 /* rows and reductions are cut for the pool past this many elements */
#define POOL_MIN_ELEMS 16384 /* an elementwise kernel may be cut for the pool past this many */
#define SMALL_GEMM_MACS 16384   /* products this small are plain loops, not a BLAS call */
#define SMALL_GEMM_ACC 4096     /* the most C elements such a loop sums on the stack */

/* Threads pay off only past `min_elems`; a kernel that can never get that large (at the
 * compile-time batch bound) is never cut for the pool, whose hand-over costs more than it. */
static bool pool_worth(const Kernel *k, Shape sh, int64_t min_elems) {
    return shape_numel(sh, k->g->batch_max) > min_elems;
}

/* A pointer at `off` (elements of real) into block `base` ('P', 'S', 'A'), as a `type *`, or an
 * integer (base 'I'), written into the text, or (rendered for a KernelSet) the launch's
 * parameter o[j]: a pointer the launch's function computed (render_c.c), so that launches that
 * differ only in these share one function.  Pointers rather than offsets from m->act: gcc
 * 12.2's -O1 rewrote a transpose's loop wrongly when both its pointers were m->act plus an
 * offset it could not see (its induction-variable optimisation; -O2 and -O3 were right). */
static void c_value(const Kernel *k, Str *s, char base, int64_t v, const char *type) {
    int j = kernel_arg(k, base, v);
    if (j >= 0 && base == 'I') str_printf(s, "((int64_t)(intptr_t)o[%d])", j);
    else if (j >= 0) str_printf(s, "((%s *)o[%d])", type, j);
    else if (base == 'I') str_printf(s, "%lld", (long long)v);
    else
        str_printf(s, "((%s *)(%s + %lld))", type,
                   base == 'P'       ? "m->params"
                       : base == 'S' ? "m->state"
                                     : "m->act",
                   (long long)v);
}

static void c_int_arg(const Kernel *k, Str *s, int64_t v) { c_value(k, s, 'I', v, NULL); }

static void c_ptr(const Kernel *k, Str *s, int x) {
    x = kernel_resolve(k->e, x);
    const Buffer *b = &k->e->buf[x];
    switch (b->kind) {
    case BUF_PARAM: c_value(k, s, 'P', b->offset, "real"); break;
    case BUF_STATE: c_value(k, s, 'S', b->offset, "real"); break;
    case BUF_ACT: c_value(k, s, 'A', b->offset, kernel_type(k, x)); break;
    case BUF_INPUT: str_printf(s, "((const %s *)in[%d])", kernel_type(k, x), b->index); break;
    case BUF_NONE: case BUF_INLINE: case BUF_ALIAS: str_printf(s, "NULL /* internal: node %d has no buffer */", x); break;
    }
}

/* EXP, TANH and ERF in float as inline C, branch-free, in place of libm's expf, tanhf and erff: a
 * loop calling those stays scalar, while this one is vectorised by gcc and clang at -O3 (GELU's
 * forward and backward, tanh, sigmoid...).  expf and tanhf are Cephes'; erf is x + x T(x^2) below
 * 0.921875 and 1 - e^P(|x|) above, T and P fitted for it (scripts/fit_erf.py): no division and
 * one exponential, 2.9x faster than Cephes' erff and erfcf.  Adds, multiplies and NNC_FMA
 * (c_prelude), so the bits do not depend on the compiler, the -O level (a tiered start's
 * -O1 and -O3 builds) or on whether a point falls in the vector loop or its scalar tail.  At
 * most 1.33 units of the last place of the exact result over every 7th float (libm's: 0.50 for
 * expf, 0.90 for erff, 2.16 for tanhf); NaN, +-inf, -0, overflow and subnormal results as
 * libm's (tests/numeric/vector_math_test.sh).  double keeps libm. */
static void c_vector_math(Str *s) {
    str_puts(s,
             "/* e^c as 2^n e^r: n = rint(c / ln 2) into *n, e^r for r = c - n ln 2 (Cephes' polynomial) */\n"
             "static inline __attribute__((always_inline)) float nnc_exp_r(float c, float *n) {\n"
             "    *n = NNC_FMA(c, 1.44269504088896341f, 12582912.0f) - 12582912.0f;   /* rint */\n"
             "    float r = NNC_FMA(*n, -0.693359375f, c);\n"
             "    r = NNC_FMA(*n, 2.12194440e-4f, r);\n"
             "    float p = 1.9875691500e-4f;\n"
             "    p = NNC_FMA(p, r, 1.3981999507e-3f);\n"
             "    p = NNC_FMA(p, r, 8.3334519073e-3f);\n"
             "    p = NNC_FMA(p, r, 4.1665795894e-2f);\n"
             "    p = NNC_FMA(p, r, 1.6666665459e-1f);\n"
             "    p = NNC_FMA(p, r, 5.0000001201e-1f);\n"
             "    return NNC_FMA(p, r * r, r) + 1.0f;\n"
             "}\n"
             "static inline __attribute__((always_inline)) float nnc_expf(float x) {\n"
             "    float c = x > -104.0f ? x : -104.0f;     /* e^-104 rounds to 0 (NaN: fixed below) */\n"
             "    c = c < 89.0f ? c : 89.0f;               /* e^89 overflows to inf */\n"
             "    float n, p = nnc_exp_r(c, &n);\n"
             "    int32_t k = (int32_t)n, k1 = k / 2;      /* two steps: 2^k may be out of float's range */\n"
             "    uint32_t b1 = (uint32_t)(k1 + 127) << 23, b2 = (uint32_t)(k - k1 + 127) << 23;\n"
             "    float s1, s2;\n"
             "    memcpy(&s1, &b1, sizeof s1);\n"
             "    memcpy(&s2, &b2, sizeof s2);\n"
             "    return x != x ? x : p * s1 * s2;\n"
             "}\n"
             "static inline __attribute__((always_inline)) float nnc_tanhf(float x) {\n"
             "    float a = fabsf(x);\n"
             "    a = a > 10.0f ? 10.0f : a;               /* tanh(10) rounds to 1; NaN passes */\n"
             "    float z = a * a, p = -5.70498872745e-3f;   /* |x| < 0.625: x + x^3 P(x^2) */\n"
             "    p = NNC_FMA(p, z, 2.06390887954e-2f);\n"
             "    p = NNC_FMA(p, z, -5.37397155531e-2f);\n"
             "    p = NNC_FMA(p, z, 1.33314422036e-1f);\n"
             "    p = NNC_FMA(p, z, -3.33332819422e-1f);\n"
             "    float small = NNC_FMA(p * z, a, a), big = 1.0f - 2.0f / (nnc_expf(a + a) + 1.0f);\n"
             "    return copysignf(a < 0.625f ? small : big, x);\n"
             "}\n"
             "/* e^x for erf's tail, -18 < x < -1 (finite there, NaN included: erff clamps first) */\n"
             "static inline __attribute__((always_inline)) float nnc_erfc_exp(float x) {\n"
             "    float n, p = nnc_exp_r(x, &n);\n"
             "    uint32_t b = (uint32_t)((int32_t)n + 127) << 23;\n"
             "    float s;\n"
             "    memcpy(&s, &b, sizeof s);\n"
             "    return p * s;\n"
             "}\n"
             "static inline __attribute__((always_inline)) float nnc_erff(float x) {\n"
             "    float a = fabsf(x), s = x * x;           /* |x| < 0.921875: x + x T(x^2) */\n"
             "    float t = -5.990873906e-04f;\n"
             "    t = NNC_FMA(t, s, 4.993184935e-03f);\n"
             "    t = NNC_FMA(t, s, -2.676662058e-02f);\n"
             "    t = NNC_FMA(t, s, 1.128181666e-01f);\n"
             "    t = NNC_FMA(t, s, -3.761249483e-01f);\n"
             "    t = NNC_FMA(t, s, 1.283791512e-01f);\n"
             "    float small = NNC_FMA(x, t, x);\n"
             "    float b = a < 3.9375f ? a : 3.9375f;     /* else 1 - e^P(|x|); erf(3.9375) rounds to 1 */\n"
             "    float p = 1.947337150e-04f;\n"
             "    p = NNC_FMA(p, b, -3.031593282e-03f);\n"
             "    p = NNC_FMA(p, b, 2.218137123e-02f);\n"
             "    p = NNC_FMA(p, b, -1.038388535e-01f);\n"
             "    p = NNC_FMA(p, b, -6.372858286e-01f);\n"
             "    p = NNC_FMA(p, b, -1.127615452e+00f);\n"
             "    p = NNC_FMA(p, b, -2.099215344e-04f);\n"
             "    float big = copysignf(1.0f - nnc_erfc_exp(p), x);\n"
             "    return !(a >= 0.921875f) ? small : big;  /* NaN takes the first */\n"
             "}\n"
             "#undef EXP\n#define EXP nnc_expf\n#undef TANH\n#define TANH nnc_tanhf\n"
             "#undef ERF\n#define ERF nnc_erff\n");
}

/* Products call nnc_?gemm (include/nnc_pool.h, pasted before this), which splits them over the
 * pool's threads and declares cblas_?gemm itself, so that no BLAS header is needed. */
static void c_prelude(Str *s, const BuildOpts *o) {
    str_puts(s, "\n");
    kernel_math_prelude(s, o->f64, "static inline");
    /* real's bits, for selects made of masks (helpers.c's max pooling gradient) */
    str_printf(s, "typedef %s nnc_rbits;\n", o->f64 ? "uint64_t" : "uint32_t");
    /* a b + c of reals rounded once where the machine has FMA (-march=native then enables it in
     * gcc and clang alike: the same bits from both), else twice; -ffp-contract=off fuses nothing
     * else */
    str_printf(s,
               "#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)\n"
               "#define NNC_FMA(a, b, c) fma%s(a, b, c)\n"
               "#else\n"
               "#define NNC_FMA(a, b, c) ((a) * (b) + (c))\n"
               "#endif\n",
               o->f64 ? "" : "f");
    /* the widest vectors for a kernel bound by its arithmetic (c_ew_math): gcc picks 256 bits on
     * machines with 512, which move memory as fast and warm less (clang takes no such attribute) */
    str_puts(s,
             "#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)\n"
             "#define NNC_WIDE __attribute__((target(\"prefer-vector-width=512\")))\n"
             "#else\n"
             "#define NNC_WIDE\n"
             "#endif\n");
    /* a line of p[i]'s, asked for ahead of its use, and how far ahead and in what runs a loop
     * asks (c_space_open); the address in integers: p + i may be past p's array */
    str_puts(s,
             "#if defined(__GNUC__)\n"
             "#define NNC_PREFETCH(p, i) \\\n"
             "    __builtin_prefetch((const void *)((uintptr_t)(p) + (uintptr_t)(i) * sizeof *(p)))\n"
             "#else\n"
             "#define NNC_PREFETCH(p, i) ((void)0)\n"
             "#endif\n"
             "#define NNC_PF_RUN 256\n"
             "#define NNC_PF_AHEAD 1024\n");
    /* the next loop's iterations may run as vectors whatever its pointers overlap (c_space_open) */
    str_puts(s,
             "#if defined(__clang__)\n"
             "#define NNC_IVDEP _Pragma(\"clang loop vectorize(assume_safety)\")\n"
             "#elif defined(__GNUC__)\n"
             "#define NNC_IVDEP _Pragma(\"GCC ivdep\")\n"
             "#else\n"
             "#define NNC_IVDEP\n"
             "#endif\n");
    if (!o->f64) c_vector_math(s);
}

/* An elementwise kernel that can be large runs on the pool (include/nnc_pool.h), as the products
 * do: NAME hands nnc_pool_for the outer extent, and NAME_part computes the outer indices [lo, hi)
 * of one piece.  Each point is computed alone, so how the loop is cut never changes a bit. */
static bool c_ew_pooled(const Kernel *k, Shape sp) { return pool_worth(k, sp, POOL_MIN_ELEMS); }

typedef enum { RED_SUFFIX, RED_GATHER, RED_SCATTER } ReduceForm;
static ReduceForm reduce_form(const Graph *g, const Launch *L, int *kept_out);

/* A reduction that keeps its leading axes and sums a contiguous suffix (a layer norm's row
 * mean) runs on the pool too, cut over its first axis; so does one that keeps a middle axis (a
 * convolution's bias gradient), cut over its first kept axis, and one that keeps its last axis
 * (a bias's or a layer norm weight's gradient: the scatter form), cut over that axis's columns:
 * each output is one accumulator over its inputs, in order, whichever thread sums it.  (OpenMP's team between two pool jobs
 * waited for the pool's spinning threads: 5-10x on such kernels.)  The axis cut, or -1. */
static int c_reduce_pooled(const Kernel *k, const Launch *L) {
    int kept;
    if (L->kind != L_REDUCE) return -1;
    ReduceForm form = reduce_form(k->g, L, &kept);
    Shape ks = L->space;
    if (form == RED_SUFFIX) {
        ks.rank = kept;
        return kept && pool_worth(k, ks, POOL_ROW_ELEMS / 64) ? 0 : -1;
    }
    if (form == RED_SCATTER) /* its last axis, which it keeps: each piece owns a range of columns */
        return pool_worth(k, L->space, POOL_ROW_ELEMS) ? L->space.rank - 1 : -1;
    if (form != RED_GATHER || !pool_worth(k, L->space, POOL_ROW_ELEMS)) return -1;
    int64_t mask = launch_reduce_mask(k->g, L);
    for (int l = 0; l < L->space.rank; l++)
        if (!(mask >> l & 1)) return l;
    return -1;
}

/* Rows that are independent (softmax's and layer norm's, forward and gradient: each one thread's,
 * in order) run on the pool too, cut over the rows (row_header's `rows`): the one decision
 * c_open and c_rows_open both ask.  Cross-entropy and accuracy, which total over rows or check
 * labels, stay as they are. */
static bool c_rows_pooled(const Kernel *k, const Launch *L) {
    if (L->kind != L_ROW) return false;
    const Node *r = &k->g->nodes[L->root];
    if (op_has(r->op, OPF_LABELS | OPF_ROW_TOTAL)) return false;
    return pool_worth(k, k->g->nodes[r->in[0]].shape, POOL_ROW_ELEMS);
}

/* Cross-entropy's and accuracy's rows, which total over the rows or check labels, on the pool in
 * blocks (row.blocks, kernel.c) where threads pay off: each block's total apart, summed in block
 * order after the pieces (NAME_post), the first bad label found there. */
static bool c_rows_blocks(const Kernel *k, const Launch *L) {
    if (L->kind != L_ROW) return false;
    const Node *r = &k->g->nodes[L->root];
    if (!op_has(r->op, OPF_LABELS | OPF_ROW_TOTAL)) return false;
    return pool_worth(k, k->g->nodes[r->in[0]].shape, POOL_ROW_ELEMS);
}

/* An elementwise launch whose expressions call EXP, TANH or ERF: bound by their arithmetic, not by
 * memory, so worth the widest vectors (NNC_WIDE) where the compiler would pick narrower ones. */
static bool c_ew_math(const Kernel *k, const Launch *L) {
    if (L->kind != L_EW || k->o->f64) return false;
    for (int i = 0; i < L->nnodes; i++) {
        const char *e = ew_expr_template(&k->g->nodes[L->nodes[i]]);
        if (e && (strstr(e, "EXP(") || strstr(e, "TANH(") || strstr(e, "ERF("))) return true;
    }
    return false;
}

/* A kernel NAME(m, in, B, o) (and NAME_part for the pool), rendered for a KernelSet (kernel_render
 * is only called through kernel_set_add): NAME is KERNEL_NAME_MARK, `o` the values the launch
 * passes (c_value), and a part gets m and o through nnc_launch_ctx.  The prototype's
 * KERNEL_ARGS_MARK becomes NNC_SHARED where launches share the kernel (render_c.c): one body,
 * not copied back into each caller. */
static void c_open(const Kernel *k, const Launch *L, int index) {
    const char *mn = k->mn, *name = KERNEL_NAME_MARK;
    const char *wide = c_ew_math(k, L) ? " NNC_WIDE" : "";
    (void)index;
    int cut = c_reduce_pooled(k, L);
    bool reduce = cut >= 0, rows = c_rows_pooled(k, L), blocks = c_rows_blocks(k, L);
    str_printf(k->s,
               "static void %s(struct %s_frame *m, const void *const *in, int64_t B, void *const *o)" KERNEL_ARGS_MARK
               ";\n",
               name, mn);
    if (blocks) { /* the blocks of rows [lo, hi) in NAME_part, then NAME_post (kernel.c, row.blocks) */
        Shape xs = k->g->nodes[k->g->nodes[L->root].in[0]].shape;
        str_printf(k->s,
                   "static void %s_part(void *, const void *const *, int64_t, int64_t, int64_t);\n"
                   "static void %s_post(struct %s_frame *m, const void *const *in, int64_t B, void *const *o,\n"
                   "                    const double *bt_);\n"
                   "static void %s(struct %s_frame *m, const void *const *in, int64_t B, void *const *o) {\n"
                   "    const int64_t rows_ = (",
                   name, name, mn, name, mn);
        render_numel(k->s, xs);
        str_puts(k->s, ") / ");
        render_dim(k->s, xs.d[xs.rank - 1], "B");
        str_printf(k->s,
                   ", nb_ = (rows_ + %d - 1) / %d;\n"
                   "    double *bt_ = calloc((size_t)(nb_ > 0 ? nb_ : 1), sizeof *bt_);   /* each block's total */\n"
                   "    if (!bt_) {\n"
                   "        fprintf(stderr, \"nnc: out of memory\\n\");\n"
                   "        abort();\n"
                   "    }\n"
                   "    struct nnc_launch_ctx c_ = {m, o, bt_};\n"
                   "    nnc_pool_for(%s_part, &c_, in, B, nb_, ",
                   KERNEL_ROW_BLOCK, KERNEL_ROW_BLOCK, name);
        render_numel(k->s, xs);
        str_printf(k->s,
                   ");\n"
                   "    %s_post(m, in, B, o, bt_);\n"
                   "    free(bt_);\n"
                   "}\n"
                   "static void %s_part(void *mv, const void *const *in, int64_t B, int64_t lo, int64_t hi) {\n"
                   "    struct %s_frame *m = ((const struct nnc_launch_ctx *)mv)->m;\n"
                   "    void *const *o = ((const struct nnc_launch_ctx *)mv)->o;\n"
                   "    double *bt_ = ((const struct nnc_launch_ctx *)mv)->bt;\n"
                   "    (void)m; (void)in; (void)B; (void)o;\n",
                   name, name, mn);
        return;
    }
    if (!reduce && !rows && (L->kind != L_EW || !c_ew_pooled(k, L->space))) {
        str_printf(k->s,
                   "static%s void %s(struct %s_frame *m, const void *const *in, int64_t B, void *const *o) {\n"
                   "    (void)m; (void)in; (void)B; (void)o;\n",
                   wide, name, mn);
        return;
    }
    str_printf(k->s,
               "static void %s_part(void *, const void *const *, int64_t, int64_t, int64_t);\n"
               "static void %s(struct %s_frame *m, const void *const *in, int64_t B, void *const *o) {\n"
               "    struct nnc_launch_ctx c_ = {m, o, NULL};\n"
               "    nnc_pool_for(%s_part, &c_, in, B, ",
               name, name, mn, name);
    if (rows) { /* the rows, and their elements as the work */
        Shape xs = k->g->nodes[k->g->nodes[L->root].in[0]].shape;
        str_puts(k->s, "(");
        render_numel(k->s, xs);
        str_puts(k->s, ") / ");
        render_dim(k->s, xs.d[xs.rank - 1], "B");
        str_puts(k->s, ", ");
        render_numel(k->s, xs);
    } else {
        if (!reduce && kernel_flat(k, L)) render_numel(k->s, L->space);
        else render_dim(k->s, L->space.d[reduce ? cut : 0], "B");
        str_puts(k->s, ", ");
        render_numel(k->s, L->space);
    }
    str_printf(k->s,
               ");\n}\n"
               "static%s void %s_part(void *mv, const void *const *in, int64_t B, int64_t lo, int64_t hi) {\n"
               "    struct %s_frame *m = ((const struct nnc_launch_ctx *)mv)->m;\n"
               "    void *const *o = ((const struct nnc_launch_ctx *)mv)->o;\n"
               "    (void)m; (void)in; (void)B; (void)o;\n",
               wide, name, mn);
}

/* ---- loops ---------------------------------------------------------------------------------- */

/* for a<from> .. a<to - 1>, the first at `indent` (threads come from the pool: c_open). */
static void open_loops(const Kernel *k, Shape sp, int from, int to, int indent) {
    for (int l = from; l < to; l++) {
        str_printf(k->s, "%*sfor (int64_t a%d = 0; a%d < ", indent + 4 * (l - from), "", l, l);
        render_dim(k->s, sp.d[l], "B");
        str_printf(k->s, "; a%d++) {\n", l);
    }
}

static void close_loops(const Kernel *k, int from, int to, int indent) {
    for (int l = to - 1; l >= from; l--) str_printf(k->s, "%*s}\n", indent + 4 * (l - from), "");
}

/* An elementwise kernel's index space: one flat loop or one per axis; a pooled kernel's outer
 * loop runs over its piece, [lo, hi) (c_open).  A flat loop that writes over an input (an
 * optimizer's update, a gradient computed in place) reads and writes every buffer at [i] only,
 * so its vectors are safe: NNC_IVDEP says so, where the compiler's check that the two do not
 * overlap would find that they do and run the loop unvectorised.
 *
 * A pooled flat loop bound by its arithmetic (c_ew_math: GELU's erf, a sigmoid's exponential)
 * runs in runs of NNC_PF_RUN points, each first asking for its full-size inputs' lines
 * NNC_PF_AHEAD points ahead: the hardware's prefetchers did not keep such a loop fed (GELU's
 * gradient over 4 MB operands, one thread: 2.5 ms with cold inputs, 1.0 ms with the
 * prefetches, 0.9 ms warm).  Loops bound by memory keep the plain loop: prefetching every
 * pooled loop made gpt.nn's Adam updates slower (1.84 -> 2.19 ms a step).  The points and their
 * order are the same; only the loads' timing changes. */
static bool c_space_prefetch(const Kernel *k, const Launch *L, Shape sp, bool flat) {
    return flat && c_ew_pooled(k, sp) && c_ew_math(k, L);
}

static int c_space_open(const Kernel *k, const Launch *L, Shape sp, bool flat, bool inplace) {
    bool pooled = c_ew_pooled(k, sp);
    if (c_space_prefetch(k, L, sp, flat)) {
        str_puts(k->s,
                 "    for (int64_t b_ = lo; b_ < hi; b_ += NNC_PF_RUN) {\n"
                 "        const int64_t e_ = hi - b_ < NNC_PF_RUN ? hi : b_ + NNC_PF_RUN;\n"
                 "        for (int64_t p_ = b_ + NNC_PF_AHEAD; p_ < e_ + NNC_PF_AHEAD; p_ += 16) {\n");
        for (int j = 0; j < L->nins; j++)
            if (kernel_access(k->g, L->ins[j], sp) == ACCESS_FULL)
                str_printf(k->s, "            NNC_PREFETCH(i%d, p_);\n", j);
        str_puts(k->s, "        }\n");
        if (inplace) str_puts(k->s, "        NNC_IVDEP\n");
        str_puts(k->s, "        for (int64_t i = b_; i < e_; i++) {\n");
        return 12;
    }
    if (flat) {
        if (!pooled) {
            str_puts(k->s, "    const int64_t n = ");
            render_numel(k->s, sp);
            str_puts(k->s, ";\n");
        }
        if (inplace) str_puts(k->s, "    NNC_IVDEP\n");
        str_printf(k->s, "    for (int64_t i = %s; i < %s; i++) {\n", pooled ? "lo" : "0", pooled ? "hi" : "n");
    } else if (pooled) {
        str_puts(k->s, "    for (int64_t a0 = lo; a0 < hi; a0++) {\n");
        open_loops(k, sp, 1, sp.rank, 8);
    } else open_loops(k, sp, 0, sp.rank, 4);
    return flat ? 8 : 4 + 4 * sp.rank;
}

static void c_space_close(const Kernel *k, const Launch *L, Shape sp, bool flat) {
    if (c_space_prefetch(k, L, sp, flat)) str_puts(k->s, "        }\n    }\n");
    else if (flat) str_puts(k->s, "    }\n");
    else close_loops(k, 0, sp.rank, 4);
}

/* ---- reductions ----------------------------------------------------------------------------- */

/* MEAN's 1 / (number of reduced elements), as a double expression. */
static void reduce_scale(const Kernel *k, const Launch *L, int64_t mask, Str *s) {
    if (k->g->nodes[L->root].op != OP_MEAN) {
        str_puts(s, "1.0");
        return;
    }
    bool b;
    int64_t n = shape_prod(L->space, (uint32_t)mask, &b);
    if (b) str_printf(s, "(1.0 / ((double)B * %lld))", (long long)n);
    else str_printf(s, "(1.0 / %lld.0)", (long long)n);
}

/* The keepdim output offset of a point of the input space. */
static void reduce_out_offset(const Launch *L, int64_t mask, Str *s) {
    Shape k = L->space;
    for (int l = 0; l < k.rank; l++)
        if (mask >> l & 1) k.d[l] = 1;
    bool any = false;
    for (int l = 0; l < k.rank; l++) {
        if (mask >> l & 1) continue;
        bool b;
        int64_t st = shape_prod(k, ~0u << (l + 1), &b);
        str_printf(s, "%sa%d * %s%lld", any ? " + " : "", l, b ? "B * " : "", (long long)st);
        any = true;
    }
    if (!any) str_puts(s, "0");
}

/* The first `kept` axes are kept: one accumulator per output over its contiguous run. */
/* A sum of everything into one value (a loss's mean) when a flat index reaches every operand:
 * eight double accumulators, each over every eighth element, so the sum vectorizes rather than
 * waiting on one chain of additions; then the lanes in order, then the tail in order.  The
 * order is fixed by the size alone, so every run and thread count sums alike. */
static void reduce_lanes(const Kernel *k, const Launch *L, const char *oo, const char *scale) {
    str_puts(k->s, "    const int64_t nflat = ");
    render_numel(k->s, L->space);
    str_puts(k->s, ";\n"
                   "    double acc = 0.0, lane[8] = {0};\n"
                   "    int64_t blk = 0;\n"
                   "    for (; blk + 8 <= nflat; blk += 8)\n"
                   "        for (int64_t i = blk; i < blk + 8; i++) {\n");
    kernel_reduce_point_at(k, L, "            ", "lane[i - blk]", true);
    str_puts(k->s, "        }\n"
                   "    for (int l = 0; l < 8; l++) acc += lane[l];\n"
                   "    for (int64_t i = blk; i < nflat; i++) {\n");
    kernel_reduce_point_at(k, L, "        ", "acc", true);
    str_printf(k->s, "    }\n    o0[%s] = (real)(acc * %s);\n", oo, scale);
}

/* The last axis l of a sum in runs of 8 (lane q_ takes the points at offset q_ of each run):
 * opens the loops at `ind` and defines a<l>; the body's indentation is ind + 8.  One chain of
 * double additions per output waited on itself (a sum cannot be reordered into vectors); eight
 * interleave, and the lanes are added in order after: the order is fixed by the shape alone. */
static int open_lanes(const Kernel *k, Shape sp, int l, int ind) {
    str_printf(k->s, "%*sfor (int64_t b_ = 0; b_ < ", ind, "");
    render_dim(k->s, sp.d[l], "B");
    str_printf(k->s, "; b_ += 8) {\n%*sconst int64_t n_ = ", ind + 4, "");
    render_dim(k->s, sp.d[l], "B");
    str_puts(k->s, " - b_ < 8 ? ");
    render_dim(k->s, sp.d[l], "B");
    str_printf(k->s, " - b_ : 8;\n%*sfor (int64_t q_ = 0; q_ < n_; q_++) {\n%*sconst int64_t a%d = b_ + q_;\n", ind + 4,
               "", ind + 8, "", l);
    return ind + 8;
}

static void close_lanes(const Kernel *k, int ind) { str_printf(k->s, "%*s}\n%*s}\n", ind + 4, "", ind, ""); }

static void reduce_suffix(const Kernel *k, const Launch *L, int kept, const char *oo, const char *scale) {
    if (kept == 0 && !kernel_reduce_is_max(k, L) && kernel_flat(k, L)) {
        reduce_lanes(k, L, oo, scale);
        return;
    }
    Shape sp = L->space;
    if (c_reduce_pooled(k, L) == 0) { /* c_open made this NAME_part: the outer axis over [lo, hi) */
        str_puts(k->s, "    for (int64_t a0 = lo; a0 < hi; a0++) {\n");
        open_loops(k, sp, 1, kept, 8);
    } else open_loops(k, sp, 0, kept, 4);
    int ind = 4 + 4 * kept;
    kernel_reduce_acc(k, L, ind);
    /* a sum over a suffix (a row's: attention's delta over 32) in lanes; none when the suffix
     * is empty (a sum_to that keeps every axis) */
    const bool lanes = !kernel_reduce_is_max(k, L) && kept < sp.rank;
    const int last = sp.rank - 1, body = ind + 4 * (sp.rank - kept) + (lanes ? 4 : 0);
    if (lanes) str_printf(k->s, "%*sdouble lane_[8] = {0};\n", ind, "");
    open_loops(k, sp, kept, lanes ? last : sp.rank, ind);
    if (lanes) open_lanes(k, sp, last, ind + 4 * (last - kept));
    char in[64];
    snprintf(in, sizeof in, "%*s", body, "");
    kernel_reduce_point(k, L, in, lanes ? "lane_[q_]" : "acc");
    if (lanes) close_lanes(k, ind + 4 * (last - kept));
    close_loops(k, kept, lanes ? last : sp.rank, ind);
    if (lanes) str_printf(k->s, "%*sfor (int q_ = 0; q_ < 8; q_++) acc += lane_[q_];\n", ind, "");
    str_printf(k->s, "%*so0[%s] = (real)(acc * %s);\n", ind, "", oo, scale);
    close_loops(k, 0, kept, 4);
}

/* The last axis reduced along with some leading ones, and a middle one kept (a convolution's
 * bias gradient: [N, C, H, W] -> [C]): per output, in parallel, a double accumulator over the
 * reduced axes in memory order. */
static void reduce_gather(const Kernel *k, const Launch *L, int64_t mask, const char *oo, const char *scale) {
    Shape sp = L->space;
    int ind = 4, cut = c_reduce_pooled(k, L); /* >= 0: c_open made this NAME_part, that axis over [lo, hi) */
    /* A sum whose last axis is reduced (contiguous: a convolution's bias gradient over W) adds
     * it in lanes (open_lanes): conv1's over 64 x 28 x 28 points a channel took 538 us on 2
     * threads as one chain, 390-400 us in lanes (conv2's 367 -> 111 us). */
    const int last = sp.rank - 1;
    const bool lanes = !kernel_reduce_is_max(k, L) && (mask >> last & 1);
    for (int pass = 0; pass < 2; pass++) {   /* the kept axes, then the reduced ones */
        if (pass == 1) {
            kernel_reduce_acc(k, L, ind);
            if (lanes) str_printf(k->s, "%*sdouble lane_[8] = {0};\n", ind, "");
        }
        for (int l = 0; l < sp.rank; l++) {
            if (!(mask >> l & 1) != (pass == 0)) continue;
            if (l == cut) str_printf(k->s, "%*sfor (int64_t a%d = lo; a%d < hi; a%d++) {\n", ind, "", l, l, l);
            else if (pass == 1 && lanes && l == last) { /* runs of 8 along the last axis */
                ind = open_lanes(k, sp, l, ind);
                continue;
            } else {
                str_printf(k->s, "%*sfor (int64_t a%d = 0; a%d < ", ind, "", l, l);
                render_dim(k->s, sp.d[l], "B");
                str_printf(k->s, "; a%d++) {\n", l);
            }
            ind += 4;
        }
        if (pass == 0) continue;
        char in[64];
        snprintf(in, sizeof in, "%*s", ind, "");
        kernel_reduce_point(k, L, in, lanes ? "lane_[q_]" : "acc");
        for (int l = sp.rank - 1; l >= 0; l--) {
            if (!(mask >> l & 1)) continue;
            if (lanes && l == last) close_lanes(k, ind -= 8);
            else str_printf(k->s, "%*s}\n", ind -= 4, "");
        }
        if (lanes) str_printf(k->s, "%*sfor (int q_ = 0; q_ < 8; q_++) acc += lane_[q_];\n", ind, "");
    }
    str_printf(k->s, "%*so0[%s] = (real)(acc * %s);\n", ind, "", oo, scale);
    while (ind > 4) str_printf(k->s, "%*s}\n", ind -= 4, "");
}

/* Any other axes: walk the input in memory order, adding every point into its output. */
static void reduce_scatter(const Kernel *k, const Launch *L, const char *oo, const char *scale) {
    Shape sp = L->space;
    bool is_max = kernel_reduce_is_max(k, L);
    /* pooled (c_reduce_pooled): this piece owns the last axis's columns [lo, hi) of every output
     * row, the same sums in the same order as one thread's */
    bool pooled = c_reduce_pooled(k, L) == sp.rank - 1;
    const char *own = pooled ? "for (int64_t r = 0; r < nout / C_; r++) for (int64_t c = lo; c < hi; c++)"
                             : "for (int64_t i = 0; i < nout; i++)",
               *at = pooled ? "r * C_ + c" : "i";
    str_puts(k->s, "    const int64_t nout = ");
    render_numel(k->s, k->g->nodes[L->root].shape);
    if (pooled) {
        str_puts(k->s, ", C_ = ");
        render_dim(k->s, sp.d[sp.rank - 1], "B");
    }
    str_printf(k->s, ";\n    %s o0[%s] = %s%s;\n", own, at, is_max ? "-" : "", is_max ? k->d->inf : "0");
    if (pooled) {
        open_loops(k, sp, 0, sp.rank - 1, 4);
        str_printf(k->s, "%*sfor (int64_t a%d = lo; a%d < hi; a%d++) {\n", 4 + 4 * (sp.rank - 1), "", sp.rank - 1,
                   sp.rank - 1, sp.rank - 1);
    } else open_loops(k, sp, 0, sp.rank, 4);
    char in[64];
    snprintf(in, sizeof in, "%*s", 4 + 4 * sp.rank, "");
    kernel_reduce_point(k, L, in, NULL);
    if (is_max) str_printf(k->s, "%s{ real *q = &o0[%s]; ", in, oo);
    else str_puts(k->s, in);
    Str target = {0};
    str_printf(&target, is_max ? "*q" : "o0[%s]", oo);
    kernel_reduce_step(k, L, target.buf);
    str_puts(k->s, is_max ? " }\n" : "\n");
    close_loops(k, 0, sp.rank, 4);
    if (k->g->nodes[L->root].op == OP_MEAN)
        str_printf(k->s, "    %s o0[%s] = (real)(o0[%s] * %s);\n", own, at, at, scale);
    str_free(&target);
}

/* Which of the loop structures above a reduction gets, and the number of kept leading axes. */
static ReduceForm reduce_form(const Graph *g, const Launch *L, int *kept_out) {
    int64_t mask = launch_reduce_mask(g, L);
    int kept = 0;
    bool suffix = true;
    for (int l = 0; l < L->space.rank; l++)
        if (!(mask >> l & 1)) suffix &= kept++ == l;
    if (kept_out) *kept_out = kept;
    if (suffix) return RED_SUFFIX;
    return L->space.rank && mask >> (L->space.rank - 1) & 1 ? RED_GATHER : RED_SCATTER;
}

bool c_reduce_sums_in_real(const Graph *g, const Launch *L) { return reduce_form(g, L, NULL) == RED_SCATTER; }

static void c_reduce(const Kernel *k, const Launch *L) {
    int64_t mask = launch_reduce_mask(k->g, L);
    int kept;
    ReduceForm form = reduce_form(k->g, L, &kept);
    Str scale = {0}, oo = {0};
    reduce_scale(k, L, mask, &scale);
    reduce_out_offset(L, mask, &oo);
    if (form == RED_SUFFIX) reduce_suffix(k, L, kept, oo.buf, scale.buf);
    else if (form == RED_GATHER) reduce_gather(k, L, mask, oo.buf, scale.buf);
    else reduce_scatter(k, L, oo.buf, scale.buf);
    str_free(&scale);
    str_free(&oo);
}

/* ---- rows ----------------------------------------------------------------------------------- */

static void c_rows_open(const Kernel *k, const Launch *L) {
    if (c_rows_blocks(k, L)) { /* a block's rows: kernel.c opened the loop over the blocks */
        str_printf(k->s, "        for (int64_t i = blk_ * %d; i < rows && i < (blk_ + 1) * %d; i++) {\n",
                   KERNEL_ROW_BLOCK, KERNEL_ROW_BLOCK);
        return;
    }
    if (c_rows_pooled(k, L)) { /* c_open made this NAME_part: the rows [lo, hi) */
        str_puts(k->s, "    (void)rows;\n    for (int64_t i = lo; i < hi; i++) {\n");
        return;
    }
    /* rows worth threads run on the pool (above): these in order */
    str_puts(k->s, "    for (int64_t i = 0; i < rows; i++) {\n");
}

/* The first bad row found is reported, after them all. */
static void c_bad_report(const Kernel *k) {
    str_printf(k->s,
        "    if (bad >= 0) {\n"
        "        %s = 1;\n"
        "        snprintf(%s, sizeof %s, \"cross_entropy: label %%d at row %%lld is outside [0, %%lld)\",\n"
        "                 (int)T[bad], (long long)bad, (long long)C);\n"
        "        return;\n"
        "    }\n", k->d->status, k->d->msg, k->d->msg);
}

/* ---- library launches ----------------------------------------------------------------------- */

static void dims_line(const Kernel *k, const char *decl, int64_t d, const char *end) {
    str_printf(k->s, "%s(int)(", decl);
    render_dim(k->s, d, "B");
    str_printf(k->s, ")%s", end);
}

/* The fold C = p - lr * A@B starts C as p: copied unless the update is in place. */
static void gemm_fold_init(const Kernel *k, const Launch *L) {
    const Entry *e = k->e;
    int leaf = k->g->nodes[L->fold].in[0];
    int rl = kernel_resolve(e, leaf), rf = kernel_resolve(e, L->fold);
    if (rl == rf || e->buf[rf].offset == e->buf[rl].offset) return;
    str_puts(k->s, "    memcpy(C, ");
    c_ptr(k, k->s, leaf);
    str_puts(k->s, ", sizeof(real) * (size_t)(");
    render_numel(k->s, k->g->nodes[L->fold].shape);
    str_puts(k->s, "));\n");
}

/* A half operand widened into the launch's scratch (plan.c): "const real *NAME" over floats. */
static void gemm_widen(const Kernel *k, const Launch *L, int x, const char *name, int64_t *at) {
    const Node *n = &k->g->nodes[x];
    if (!DTYPE_IS_HALF(n->dtype)) {
        char decl[32];
        snprintf(decl, sizeof decl, "const real *%s", name);
        kernel_ptr_line(k, decl, x);
        return;
    }
    str_printf(k->s, "    real *%s_w = ", name);
    c_value(k, k->s, 'A', L->scratch + *at, "real");
    str_puts(k->s, ";\n");
    str_puts(k->s, "    { const unsigned short *h = ");
    c_ptr(k, k->s, x);
    str_puts(k->s, "; nnc_convert(");
    str_printf(k->s, "%s_w, h, ", name);
    render_numel(k->s, n->shape);
    str_printf(k->s, ", %d); }\n", n->dtype == DT_BF16 ? 0 : 1);
    str_printf(k->s, "    const real *%s = %s_w;\n", name, name);
    *at += shape_numel(n->shape, k->g->batch_max);
}

/* A half result: the product went to scratch as floats; rounded into C. */
static void gemm_narrow(const Kernel *k, const Launch *L) {
    const Node *n = &k->g->nodes[L->root];
    if (!DTYPE_IS_HALF(n->dtype)) return;
    str_puts(k->s, "    { unsigned short *h = ");
    c_ptr(k, k->s, L->root);
    str_puts(k->s, "; nnc_convert(h, C, ");
    render_numel(k->s, n->shape);
    str_printf(k->s, ", %d); }\n", n->dtype == DT_BF16 ? 2 : 3);
}

static void c_gemm_body(const Kernel *k, const Launch *L);

/* A bf16 product through oneDNN (helpers.c's nnc_dnnl_matmul), when the build has it: returns
 * from the launch when oneDNN ran it, else falls through to the widening code. */
static void gemm_dnnl_bf16(const Kernel *k, const Launch *L) {
    const Graph *g = k->g;
    if (g->nodes[L->a].dtype != DT_BF16 || g->nodes[L->b].dtype != DT_BF16 || L->fold >= 0 || L->alpha != 1 ||
        !helper_uses_dnnl(k->p, k->o))   /* last: it scans the graph, and this runs per product */
        return;
    GemmGeom q = gemm_geom(g, L);
    if (q.sum && !q.k_merged) return;
    str_puts(k->s, "    {   /* oneDNN's bf16 product */\n        static nnc_dnnl_mm mm;\n        const int64_t G = ");
    render_gemm_count(k->s, &q);
    str_puts(k->s, ", M = ");
    render_dim(k->s, q.m, "B");
    str_puts(k->s, ", N = ");
    render_dim(k->s, q.n, "B");
    str_puts(k->s, ", K = ");
    render_dim(k->s, q.k, "B");
    str_puts(k->s, ", lda = ");
    render_dim(k->s, q.lda, "B");
    str_puts(k->s, ", ldb = ");
    render_dim(k->s, q.ldb, "B");
    str_puts(k->s, ";\n");
    const char *G = q.rows_merged || q.k_merged || q.nlead == 0 ? "1" : "G";
    str_printf(k->s, "        const int64_t d[11] = {%s, %s, N, %s, lda, ldb, %s, %s, %d, %d, %d};\n", G,
               q.rows_merged ? "G * M" : "M", q.k_merged ? "G * K" : "K",
               q.a_shared || q.rows_merged || q.k_merged || q.nlead == 0 ? "0" : "M * K",
               q.b_shared || q.k_merged || q.nlead == 0 ? "0" : "K * N", L->ta, L->tb,
               g->nodes[L->root].dtype == DT_BF16);
    str_puts(k->s, "        if (nnc_dnnl_matmul(&mm, d, ");
    c_ptr(k, k->s, L->a);
    str_puts(k->s, ", ");
    c_ptr(k, k->s, L->b);
    str_puts(k->s, ", ");
    c_ptr(k, k->s, L->root);
    str_puts(k->s, ") == 0) return;\n    }\n");
}

/* bf16 products through oneDNN where the build has it; other bf16/f16 operands run the f32
 * product on widened copies (correct, no faster than f32: the CBLAS has no half GEMM), a half
 * result rounded from the f32 one. */
static void c_gemm(const Kernel *k, const Launch *L) {
    const Graph *g = k->g;
    int64_t at = 0;
    gemm_dnnl_bf16(k, L);
    gemm_widen(k, L, L->a, "A", &at);
    gemm_widen(k, L, L->b, "Bm", &at);
    if (DTYPE_IS_HALF(g->nodes[L->root].dtype)) {
        str_puts(k->s, "    real *C = ");
        c_value(k, k->s, 'A', L->scratch + at, "real");
        str_puts(k->s, ";\n");
    } else kernel_ptr_line(k, "real *C", launch_gemm_c(L));
    assert(L->bias < 0 && "a GEMM epilogue on the CPU: fuse.c folds biases on GPUs only");
    c_gemm_body(k, L);
    gemm_narrow(k, L);
}

/* A small product whose inner loop runs along a contiguous row, so that it vectorizes: i k j
 * when B's rows are contiguous and wide enough, k j i when A is transposed (its columns are
 * then contiguous: X^T @ dY, the weight gradient).  Each C element still sums its products in
 * k order from zero, then takes alpha (and the folded update) as the dot-product loops do, so
 * the result is bit for bit theirs. */
static void small_gemm_vector(const Kernel *k, const Launch *L, int64_t mn, bool ikj, const char *alpha) {
    str_printf(k->s, "    real acc[%lld];\n", (long long)mn);
    str_puts(k->s, "    for (int t = 0; t < M * N; t++) acc[t] = 0;\n");
    if (ikj)
        str_printf(k->s,
            "    for (int i = 0; i < M; i++)\n"
            "        for (int k = 0; k < K; k++) {\n"
            "            const real a = A[%s];\n"
            "            for (int j = 0; j < N; j++) acc[i * N + j] += a * Bm[k * ldb + j];\n"
            "        }\n", L->ta ? "k * lda + i" : "i * lda + k");
    else
        str_printf(k->s,
            "    for (int k = 0; k < K; k++)\n"
            "        for (int j = 0; j < N; j++) {\n"
            "            const real b = Bm[%s];\n"
            "            for (int i = 0; i < M; i++) acc[i * N + j] += A[k * lda + i] * b;\n"
            "        }\n", L->tb ? "j * ldb + k" : "k * ldb + j");
    str_printf(k->s, "    for (int t = 0; t < M * N; t++) C[t] = %s(real)%s * acc[t];\n", L->fold >= 0 ? "C[t] + " : "",
               alpha);
}

/* A matrix-vector product (or a narrow one, N < 4) with A's rows contiguous: eight rows at a
 * time, so that eight chains of additions run side by side rather than one row's chain waiting
 * on itself.  Each element still sums in k order from zero, bit for bit the dot loop's sum. */
static void small_gemm_rows8(const Kernel *k, const Launch *L, const char *ib, const char *alpha) {
    str_printf(k->s,
        "    for (int i = 0; i + 8 <= M; i += 8)\n"
        "        for (int j = 0; j < N; j++) {\n"
        "            real acc[8] = {0};\n"
        "            for (int k = 0; k < K; k++) {\n"
        "                const real b = Bm[%s];\n"
        "                for (int r = 0; r < 8; r++) acc[r] += A[(i + r) * lda + k] * b;\n"
        "            }\n"
        "            for (int r = 0; r < 8; r++) C[(i + r) * N + j] = %s(real)%s * acc[r];\n"
        "        }\n", ib, L->fold >= 0 ? "C[(i + r) * N + j] + " : "", alpha);
}

/* A GEMM launch on f32 operands: one cblas call (a plain product, or a batch that is one
 * product: gemm_geom's rows_merged, k_merged), a loop of calls over the batch's matrices, or
 * plain loops when the whole product is too small for a library call. */
static void c_gemm_body(const Kernel *k, const Launch *L) {
    const Graph *g = k->g;
    GemmGeom q = gemm_geom(g, L);
    dims_line(k, "    const int M = ", q.m, ", ");
    dims_line(k, "N = ", q.n, ", ");
    dims_line(k, "K = ", q.k, ", ");
    dims_line(k, "lda = ", q.lda, ", ");
    dims_line(k, "ldb = ", q.ldb, ";\n");
    bool batched = q.nlead > 0;
    if (batched) {
        str_puts(k->s, "    const int64_t G = ");
        render_gemm_count(k->s, &q);
        str_printf(k->s, ", sa = %s, sb = %s, sc = %s;\n", q.a_shared ? "0" : "(int64_t)M * K",
                   q.b_shared ? "0" : "(int64_t)K * N", q.sum ? "0" : "(int64_t)M * N");
    }
    if (L->fold >= 0) gemm_fold_init(k, L);
    int64_t bm = g->batch_max;
    int64_t dm = dim_size(q.m, bm), dn = dim_size(q.n, bm), dk = dim_size(q.k, bm);
    int64_t macs = gemm_count(&q, bm) * dm * dn * dk;
    char alpha[RENDER_NUM_LEN];
    render_num(alpha, L->alpha);
    const char *ia = L->ta ? "k * lda + i" : "i * lda + k", *ib = L->tb ? "j * ldb + k" : "k * ldb + j";
    char f = k->o->f64 ? 'd' : 's';
    int ta = L->ta ? 112 : 111, tb = L->tb ? 112 : 111;
    if (macs <= SMALL_GEMM_MACS) {   /* a library call costs more than this product */
        if (!batched && dm * dn <= SMALL_GEMM_ACC && ((!L->tb && dn >= 4) || L->ta)) {
            small_gemm_vector(k, L, dm * dn, !L->tb && dn >= 4, alpha);
            return;
        }
        if (!batched) {
            if (!L->ta) small_gemm_rows8(k, L, ib, alpha);   /* rows from 8 on: the rest below */
            str_printf(k->s,
                "    for (int i = %s; i < M; i++)\n"
                "        for (int j = 0; j < N; j++) {\n"
                "            real acc = 0;\n"
                "            for (int k = 0; k < K; k++) acc += A[%s] * Bm[%s];\n"
                "            C[i * N + j] = %s(real)%s * acc;\n"
                "        }\n", L->ta ? "0" : "M / 8 * 8", ia, ib, L->fold >= 0 ? "C[i * N + j] + " : "", alpha);
            return;
        }
        /* a sum's first product overwrites C (unless an update is folded in), the rest add */
        const char *keep = L->fold >= 0 ? "1" : q.sum ? "g > 0" : "0";
        str_printf(k->s,
            "    for (int64_t g = 0; g < G; g++)\n"
            "        for (int i = 0; i < M; i++)\n"
            "            for (int j = 0; j < N; j++) {\n"
            "                real acc = 0;\n"
            "                for (int k = 0; k < K; k++) acc += A[g * sa + %s] * Bm[g * sb + %s];\n"
            "                real *c = &C[g * sc + i * N + j];\n"
            "                *c = (%s ? *c : (real)0) + (real)%s * acc;\n"
            "            }\n", ia, ib, keep, alpha);
        return;
    }
    int beta = L->fold >= 0 ? 1 : 0;
    if (!batched)
        str_printf(k->s, "    nnc_%cgemm(%d, %d, M, N, K, (real)%s, A, lda, Bm, ldb, %d, C, N);\n", f, ta, tb, alpha,
                   beta);
    else if (q.rows_merged)   /* [G*M, K] @ [K, N]: one product */
        str_printf(k->s, "    nnc_%cgemm(%d, %d, (int)(G * M), N, K, (real)%s, A, lda, Bm, ldb, %d, C, N);\n", f, ta,
                   tb, alpha, beta);
    else if (q.k_merged)      /* sum over g of A_g^T B_g = [G*K, M]^T @ [G*K, N] */
        str_printf(k->s, "    nnc_%cgemm(%d, %d, M, N, (int)(G * K), (real)%s, A, lda, Bm, ldb, %d, C, N);\n", f, ta,
                   tb, alpha, beta);
    else {
        const char *keep = beta ? "1" : q.sum ? "g > 0" : "0"; /* a sum's first product overwrites C */
        str_printf(
            k->s,
            "    for (int64_t g = 0; g < G; g++)\n"
            "        nnc_%cgemm(%d, %d, M, N, K, (real)%s, A + g * sa, lda, Bm + g * sb, ldb, %s, C + g * sc, N);\n",
            f, ta, tb, alpha, keep);
    }
}

static void c_copy(const Kernel *k, int dst, int src) {
    str_puts(k->s, "    memcpy(");
    c_ptr(k, k->s, dst);
    str_puts(k->s, ", ");
    c_ptr(k, k->s, src);
    str_puts(k->s, ", (size_t)");
    render_numel(k->s, k->g->nodes[dst].shape);
    str_printf(k->s, " * sizeof(%s));\n", kernel_type(k, dst));
}

/* ---- data parallel: an allreduce's two halves call the host's nnc_comm (nnc_abi.h) ---------- */

/* Start: the gradient (copied first when the planner could not put the result over it) goes
 * into its bucket; wait: the bucket's sum is back in the buffer.  No comm: one process, and the
 * gradient is already the whole batch's. */
static void c_collective(const Kernel *k, const Launch *L) {
    const Node *r = &k->g->nodes[L->root];
    bool start = r->op == OP_ALLREDUCE_START;
    kernel_ptr_line(k, "real *X", r->in[0]);
    kernel_ptr_line(k, "real *Y", L->root);
    str_puts(k->s, "    const int64_t n = ");
    render_numel(k->s, r->shape);
    str_puts(k->s, ";\n    const int type = sizeof(real) == 8 ? NNC_TYPE_F64 : NNC_TYPE_F32;\n");
    if (start) str_puts(k->s, "    if (Y != X) memcpy(Y, X, (size_t)n * sizeof(real));\n");
    str_printf(k->s, "    if (m->comm && m->comm->%s(m->comm->ctx, %d, %s, n, type%s)) {\n", start ? "start" : "wait", L->bucket,
               start ? "Y" : "X", start ? (L->bucket_last ? ", 1" : ", 0") : "");
    str_printf(k->s, "        %s = NNC_STATUS_ARG;\n        snprintf(%s, sizeof %s, \"allreduce (%s) of the gradient of ",
               k->d->status, k->d->msg, k->d->msg, start ? "start" : "wait");
    render_c_string_body(k->s, r->name ? r->name : "a parameter");
    str_puts(k->s, " failed\");\n    }\n");
    if (!start) str_puts(k->s, "    if (Y != X) memcpy(Y, X, (size_t)n * sizeof(real));\n");
}

/* ---- helper launches: their plan (helper_plan.c) as C ---------------------------------------- */

static void helper_ptr(const Kernel *k, HelperPtr p) {
    switch (p.kind) {
    case HPTR_NODE: c_ptr(k, k->s, p.node); break;
    case HPTR_SCRATCH: c_value(k, k->s, 'A', p.off, "real"); break;
    case HPTR_STEP: str_puts(k->s, "(const int64_t[3]){m->step, (int64_t)m->seed, m->micro}"); break;
    case HPTR_ERR: str_puts(k->s, "err"); break; /* helper_error_check's record */
    }
}

static void helper_call(const Kernel *k, const HelperPlan *hp, const HelperStep *st, int ind) {
    const Helper h = st->call.h;
    str_printf(k->s, "%*s%s(", ind, "", helper_info[h].name);
    for (int j = 0; j < st->call.nptr; j++) {
        helper_ptr(k, st->call.ptr[j]);
        str_puts(k->s, ", ");
    }
    affine_render(k->s, st->call.n);
    for (int j = 0; j < st->call.narg; j++) {
        const HelperArg *a = &st->call.arg[j];
        char num[RENDER_NUM_LEN];
        str_puts(k->s, ", ");
        if (a->kind == HARG_F64) str_puts(k->s, render_num(num, a->f));
        else if (a->kind == HARG_PTR) helper_ptr(k, a->p);
        else affine_render(k->s, a->v);
    }
    int64_t geom[SPATIAL_GEOM_ARGS];
    spatial_geom_args(&hp->q, geom);
    for (int j = 0; helper_info[h].geom && j < SPATIAL_GEOM_ARGS; j++) str_printf(k->s, ", %lld", (long long)geom[j]);
    str_puts(k->s, ");\n");
}

/* "P + g * STRIDE": group g's matrix */
static void helper_group_ptr(const Kernel *k, HelperPtr p, Affine stride) {
    helper_ptr(k, p);
    str_puts(k->s, " + g * ");
    affine_render(k->s, stride);
}

static void helper_gemm(const Kernel *k, const HelperStep *st, int ind) {
    static const char *const beta[] = {[HBETA_0] = "0", [HBETA_1] = "1", [HBETA_CHUNKS] = "n0 ? 1 : 0"};
    const Affine *dims[3] = {&st->gemm.M, &st->gemm.N, &st->gemm.K};
    str_printf(k->s, "%*sfor (int64_t g = 0; g < %lld; g++)\n%*snnc_%cgemm(%d, %d", ind, "", (long long)st->gemm.G,
               ind + 4, "", k->o->f64 ? 'd' : 's', st->gemm.ta ? 112 : 111, st->gemm.tb ? 112 : 111);
    for (int j = 0; j < 3; j++) {
        str_puts(k->s, ", (int)(");
        affine_render(k->s, *dims[j]);
        str_puts(k->s, ")");
    }
    str_puts(k->s, ", 1, ");
    helper_group_ptr(k, st->gemm.a, st->gemm.sa);
    str_puts(k->s, ", (int)(");
    affine_render(k->s, st->gemm.lda);
    str_puts(k->s, "), ");
    helper_group_ptr(k, st->gemm.b, st->gemm.sb);
    str_puts(k->s, ", (int)(");
    affine_render(k->s, st->gemm.ldb);
    str_printf(k->s, "), %s, ", beta[st->gemm.beta]);
    helper_group_ptr(k, st->gemm.c, st->gemm.sc);
    str_puts(k->s, ", (int)(");
    affine_render(k->s, st->gemm.ldc);
    str_puts(k->s, "));\n");
}

static void helper_zero(const Kernel *k, const HelperStep *st, int ind) {
    str_printf(k->s, "%*s", ind, "");
    if (st->zero.guarded) {
        str_puts(k->s, "if (");
        affine_render(k->s, st->zero.guard);
        str_puts(k->s, " == 0) ");
    }
    str_puts(k->s, "memset(");
    helper_ptr(k, st->zero.p);
    str_puts(k->s, ", 0, sizeof(real) * ");
    affine_render(k->s, st->zero.count);
    str_puts(k->s, ");\n");
}

/* oneDNN first, where nnc has it and the program is f32; the steps after it if it refuses. */
static void helper_dnnl(const Kernel *k, const HelperPlan *hp, const HelperStep *st) {
    if (!helper_uses_dnnl(k->p, k->o)) return;
    const SpatialGeom *q = &hp->q;
    Str rows = {0};
    affine_render(&rows, st->lib.rows);
    str_printf(
        k->s,
        "    static nnc_dnnl_cache dnnl_cache;\n"
        "    const int64_t dg[16] = {%s, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
        "%lld, %lld, %lld};\n"
        "    if (%s > 0 && nnc_dnnl_conv(&dnnl_cache, %d, dg, ",
        rows.buf, (long long)q->C, (long long)q->H, (long long)q->W, (long long)q->OC, (long long)q->OH,
        (long long)q->OW, (long long)q->KH, (long long)q->KW, (long long)q->SH, (long long)q->SW, (long long)q->PH,
        (long long)q->PW, (long long)q->DH, (long long)q->DW, (long long)q->G, rows.buf, st->lib.kind);
    helper_ptr(k, st->lib.a);
    str_puts(k->s, ", ");
    helper_ptr(k, st->lib.b);
    str_puts(k->s, ", ");
    helper_ptr(k, st->lib.out);
    str_puts(k->s, ") == 0) return;\n");
    str_free(&rows);
}

static void helper_steps(const Kernel *k, const HelperPlan *hp, int from, int to, int ind) {
    for (int i = from; i < to; i++) {
        const HelperStep *st = &hp->step[i];
        switch (st->kind) {
        case HS_CALL: helper_call(k, hp, st, ind); break;
        case HS_GEMM: helper_gemm(k, st, ind); break;
        case HS_ZERO: helper_zero(k, st, ind); break;
        case HS_CONV_LIB: helper_dnnl(k, hp, st); break;
        case HS_CHUNKS: {
            Str rows = {0};
            long long c = (long long)st->chunks.chunk;
            affine_render(&rows, st->chunks.rows);
            str_printf(k->s,
                       "%*sfor (int64_t n0 = 0; n0 < %s; n0 += %lld) {\n"
                       "%*sconst int64_t S = %s - n0 < %lld ? %s - n0 : %lld, SP = S * %lld;\n",
                       ind, "", rows.buf, c, ind + 4, "", rows.buf, c, rows.buf, c, (long long)st->chunks.P);
            helper_steps(k, hp, i + 1, i + 1 + st->chunks.nbody, ind + 4);
            str_printf(k->s, "%*s}\n", ind, "");
            i += st->chunks.nbody;
            str_free(&rows);
            break;
        }
        }
    }
}

/* A call that may find a bad index records it in err: the launch stops the step with it. */
static void c_helper(const Kernel *k, const Launch *L) {
    HelperPlan hp = helper_plan(k->p, k->e, L);
    bool reports = helper_plan_reports(&hp);
    if (reports) str_puts(k->s, "    int err[4] = {0, 0, 0, 0};\n");
    helper_steps(k, &hp, 0, hp.nsteps, 4);
    if (reports)
        str_printf(k->s,
                   "    if (err[0]) {\n"
                   "        %s = NNC_STATUS_CHECK;\n"
                   "        snprintf(%s, sizeof %s, NNC_RT_INDEX_FMT, err[2], (long long)err[1], (long long)err[3]);\n"
                   "    }\n",
                   k->d->status, k->d->msg, k->d->msg);
}

/* a table laid out by hand: clang-format would put every field on a line of its own */
/* clang-format off */
const KernelDialect dialect_c = {
    .name = "c",
    .value = "real",
    .inf = "INFINITY",                  /* math.h's */
    /* the model struct, spelled here alone: the host code around the kernels owns it */
    .step = "m->step", .micro = "m->micro", .status = "m->status", .msg = "m->msg", .ptr = c_ptr, .int_arg = c_int_arg,
    .qual = {" ", " restrict "},        /* restrict lets the compiler vectorize flat loops */
    .prelude = c_prelude,
    .open = c_open,
    /* serial loops, the outermost split by OpenMP where the kernel can be large */
    .space_open = c_space_open, .space_close = c_space_close, .reduce = c_reduce,
    .row = {   /* one thread owns a row: nothing to combine, and every thread writes */
        .open = c_rows_open,
        .cols = "for (int64_t c = 0; c < C; c++)",
        .lanes = 8,   /* doubles: a 512-bit vector */
        .all_rows = "for (int64_t j = 0; j < rows; j++)",
        /* a NaN is not taken, yet it makes s NaN and so every output of its row */
        .max_pick = "XL(c) > mx ? XL(c) : mx",
        .leader = "", .writer = "",
        /* the first bad row is reported (the rows run in order here; on the pool, in blocks,
         * NAME_post finds it) */
        .bad_decl = "    int64_t bad = -1;\n",
        .bad_record = "            if (bad < 0) bad = i;\n",
        .bad_report = c_bad_report,
        .blocks = c_rows_blocks,
    },
    .gemm = c_gemm,   /* cblas, or plain loops for small products */
    .copy = c_copy,
    .helper = c_helper,
    .collective = c_collective,
    .attention = attention_render_c,
};
/* clang-format on */
