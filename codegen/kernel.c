/* kernel.c - the kernel renderer: one walker over a Launch for every target.
 *
 * A kernel is the same computation on every target; only its spelling and the way threads
 * share the work differ, and those come from the target's KernelDialect (kernel.h).  So the
 * parts that decide what a kernel computes exist once, here:
 *   - the pointers a launch reads (i0, i1, ...) and writes (o0, o1, ...), the loads of its
 *     inputs at a point (flat, broadcast, or through a transpose's or permute's order) and the fused elementwise body, whose
 *     scalar expressions come from the op table (expr.c);
 *   - the reduction's accumulation (double, NaN winning a max as torch.amax);
 *   - the row-wise kernels' arithmetic: max-subtracted, double-accumulated exp-sums for
 *     softmax, log_softmax and cross-entropy (stable for any logits; cross-entropy's maximum
 *     and sum in one pass where the dialect combines (max, sum) pairs), the gradients, the
 *     label-range check, and accuracy's argmax (the first maximum; NaN above everything).
 * A dialect supplies the loops around these statements (kernel.h says which names they must
 * define); the walker never asks which target it renders for. */
#include <assert.h>
#include <stdlib.h>

#include "kernel.h"

int kernel_resolve(const Entry *e, int x) {
    while (e->buf[x].kind == BUF_ALIAS) x = e->buf[x].alias;
    return x;
}

const char *kernel_type(const Kernel *k, int x) {
    DType t = k->g->nodes[x].dtype;
    return t == DT_I32 ? "int32_t" : DTYPE_IS_HALF(t) ? "unsigned short" : "real";
}

/* The conversions of kernel_half_prelude: a half load widened to real, a value rounded to the
 * node's format, the bits stored. */
static const char *half_fn(DType t, bool to_bits) {
    if (t == DT_BF16) return to_bits ? "nnc_f32_bf16" : "nnc_bf16_f32";
    return to_bits ? "nnc_f32_f16" : "nnc_f16_f32";
}

static bool program_has_half(const Program *p) {
    for (int i = 0; i < p->g->n; i++)
        if (DTYPE_IS_HALF(p->g->nodes[i].dtype)) return true;
    return false;
}

/* The C target's half conversions of whole tensors, split over the model's pool (a product's
 * half operands widened to real and its result rounded, where oneDNN does not take it): each
 * element converted alone, so the same bits on any thread count, and no OpenMP team beside the
 * pool's threads.  kind: 0 bf16 -> real, 1 f16 -> real, 2 real -> bf16, 3 real -> f16. */
void kernel_half_pool_prelude(Str *s, const Program *p) {
    if (!program_has_half(p)) return;
    str_puts(s,
             "typedef struct { const void *src; void *dst; int kind; } nnc_convert_job;\n"
             "static void nnc_convert_part(void *ctx, const void *const *in, int64_t b, int64_t lo, int64_t hi) {\n"
             "    const nnc_convert_job *j = ctx;\n"
             "    const unsigned short *h = j->src;\n"
             "    const real *r = j->src;\n"
             "    real *w = j->dst;\n"
             "    unsigned short *o = j->dst;\n"
             "    (void)in, (void)b;\n"
             "    if (j->kind == 0) for (int64_t z = lo; z < hi; z++) w[z] = nnc_bf16_f32(h[z]);\n"
             "    else if (j->kind == 1) for (int64_t z = lo; z < hi; z++) w[z] = nnc_f16_f32(h[z]);\n"
             "    else if (j->kind == 2) for (int64_t z = lo; z < hi; z++) o[z] = nnc_f32_bf16((float)r[z]);\n"
             "    else for (int64_t z = lo; z < hi; z++) o[z] = nnc_f32_f16((float)r[z]);\n"
             "}\n"
             "static void nnc_convert(void *dst, const void *src, int64_t n, int kind) {\n"
             "    nnc_convert_job j = {src, dst, kind};\n"
             "    nnc_pool_for(nnc_convert_part, &j, NULL, 0, n, n);\n"
             "}\n");
}

/* bf16 and f16 as 16-bit patterns: to float exactly, from float rounded to nearest even (NaN
 * stays NaN, overflow goes to infinity), the same bits on every target (a GPU from sm_80 on
 * rounds to bf16 in one instruction, cvt.rn.bf16.f32, whose NaN alone differs: kept apart).  `hd` qualifies the
 * functions: "static inline" in C, "__device__ __forceinline__" in CUDA. */
void kernel_half_prelude(Str *s, const Program *p, const char *hd) {
    if (!program_has_half(p)) return;
    str_printf(
        s,
        "\n/* bf16 and f16 tensors: 16-bit patterns, computed in float (round to nearest even on store) */\n"
        "%s float nnc_bf16_f32(unsigned short h) {\n"
        "    union { unsigned int u; float f; } v;\n"
        "    v.u = (unsigned int)h << 16;\n"
        "    return v.f;\n"
        "}\n"
        "%s unsigned short nnc_f32_bf16(float f) {\n"
        "    union { float f; unsigned int u; } v;\n"
        "    v.f = f;\n"
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(NNC_EMU_KERNEL_H)\n"
        "    unsigned short h;   /* the same rounding in one instruction, NaN aside, without branches */\n"
        "    asm(\"cvt.rn.bf16.f32 %%0, %%1;\" : \"=h\"(h) : \"f\"(f));\n"
        "    return f != f ? (unsigned short)((v.u >> 16) | 0x40u) : h;\n"
        "#else\n"
        "    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((v.u >> 16) | 0x40u);   /* NaN */\n"
        "    return (unsigned short)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);\n"
        "#endif\n"
        "}\n"
        "%s float nnc_f16_f32(unsigned short h) {\n"
        "    const unsigned int s = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
        "    union { unsigned int u; float f; } v;\n"
        "    if (e == 0) {   /* zero or subnormal: m * 2^-24 */\n"
        "        v.f = (float)m * 5.9604644775390625e-8f;\n"
        "        v.u |= s;\n"
        "        return v.f;\n"
        "    }\n"
        "    v.u = s | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13));\n"
        "    return v.f;\n"
        "}\n"
        "%s unsigned short nnc_f32_f16(float f) {\n"
        "    union { float f; unsigned int u; } v, w;\n"
        "    v.f = f;\n"
        "    const unsigned int s = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;\n"
        "    if (a >= 0x47800000u) return (unsigned short)(s | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));\n"
        "    if (a < 0x38800000u) {   /* below 2^-14: a subnormal half, rounded by the adder (ulp 2^-24 at 0.5) */\n"
        "        w.u = a;\n"
        "        w.f += 0.5f;\n"
        "        return (unsigned short)(s | (w.u - 0x3f000000u));\n"
        "    }\n"
        "    return (unsigned short)(s | ((a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13));   /* rebias, round */\n"
        "}\n",
        hd, hd, hd, hd);
}

void kernel_ptr_line(const Kernel *k, const char *decl, int x) {
    str_printf(k->s, "    %s = ", decl);
    k->d->ptr(k, k->s, x);
    str_puts(k->s, ";\n");
}

/* EXP, LOG, ...: the math the op table's expressions call, in the precision of `real`; `hd`
 * qualifies the two functions of its own (as kernel_half_prelude's).  FLOORDIV and REMAINDER are
 * torch's floor_divide and remainder for floating point (c10's div_floor_floating and aten's
 * remainder kernel), which are Python's // and % too: from fmod, which is exact, so the two
 * targets give the same bits. */
void kernel_math_prelude(Str *s, bool f64, const char *hd) {
    static const char *const fn[][2] = {
        {"EXP", "exp"},   {"LOG", "log"},     {"SQRT", "sqrt"},   {"TANH", "tanh"},   {"POW", "pow"},
        {"FABS", "fabs"}, {"ERF", "erf"},     {"LOG1P", "log1p"}, {"EXPM1", "expm1"}, {"SIN", "sin"},
        {"COS", "cos"},   {"FLOOR", "floor"}, {"CEIL", "ceil"},   {"RINT", "rint"},   {"TRUNC", "trunc"},
        {"FMOD", "fmod"}, {"TAN", "tan"},     {"ASIN", "asin"},   {"ACOS", "acos"},   {"ATAN", "atan"},
        {"SINH", "sinh"}, {"COSH", "cosh"},   {"ASINH", "asinh"}, {"ACOSH", "acosh"}, {"ATANH", "atanh"}};
    str_printf(s, "typedef %s real;\n", f64 ? "double" : "float");
    for (size_t i = 0; i < NNC_COUNTOF(fn); i++) str_printf(s, "#define %s %s%s\n", fn[i][0], fn[i][1], f64 ? "" : "f");
    str_printf(s,
               "%s real FLOORDIV(real a, real b) {\n"
               "    if (b == 0) return a / b;\n"
               "    real m = FMOD(a, b), d = (a - m) / b;\n"
               "    if (m != 0 && (b < 0) != (m < 0)) d -= 1;\n"
               "    if (d == 0) return 0 * (a / b);   /* a zero with the quotient's sign */\n"
               "    real f = FLOOR(d);\n"
               "    return d - f > (real)0.5 ? f + 1 : f;\n"
               "}\n"
               "%s real REMAINDER(real a, real b) {\n"
               "    real m = FMOD(a, b);\n"
               "    return m != 0 && (b < 0) != (m < 0) ? m + b : m;\n"
               "}\n",
               hd, hd);
}

/* ---- pointers, loads and the fused body --------------------------------------------------- */

static bool aliases_input(const Kernel *k, const Launch *L, int out) {
    const Buffer *b = &k->e->buf[kernel_resolve(k->e, out)];
    for (int j = 0; j < L->nins; j++) {
        const Buffer *c = &k->e->buf[kernel_resolve(k->e, L->ins[j])];
        if (c->kind == b->kind && c->offset == b->offset) return true;
    }
    return false;
}

/* i<j> for every input and (with `outs`) o<j> for every output; qual[1] only when no output
 * is written over an input, which in-place updates and reused activations do.  Returns whether
 * one is. */
static bool decl_ptrs(const Kernel *k, const Launch *L, bool outs) {
    bool noalias = true;
    for (int j = 0; j < L->nouts && noalias; j++) noalias = !aliases_input(k, L, L->outs[j]);
    const char *q = k->d->qual[noalias];
    char decl[96];
    for (int j = 0; j < L->nins; j++) {
        snprintf(decl, sizeof decl, "const %s *%si%d", kernel_type(k, L->ins[j]), q, j);
        kernel_ptr_line(k, decl, L->ins[j]);
    }
    for (int j = 0; outs && j < L->nouts; j++) {
        snprintf(decl, sizeof decl, "%s *%so%d", kernel_type(k, L->outs[j]), q, j);
        kernel_ptr_line(k, decl, L->outs[j]);
    }
    /* step-dependent scalars (Adam's 1 - beta^t) once per kernel, not once per element: pow()
     * may set errno, so the C compiler would not hoist it out of the loop */
    for (int i = 0; i < L->nnodes; i++) {
        const Node *n = &k->g->nodes[L->nodes[i]];
        for (int j = 0; j < n->nin; j++) {
            int x = n->in[j];
            bool seen = k->g->nodes[x].op != OP_STEPVAL;   /* declared already by an earlier use? */
            for (int i2 = 0; i2 <= i && !seen; i2++) {
                const Node *m = &k->g->nodes[L->nodes[i2]];
                for (int j2 = 0; j2 < (i2 == i ? j : m->nin) && !seen; j2++) seen = m->in[j2] == x;
            }
            if (seen) continue;
            str_printf(k->s, "    %s s%d = ", k->d->value, x);
            render_inline_value(k->s, k->g, x, k->d->step, k->d->micro, "B");
            str_puts(k->s, ";\n");
        }
    }
    return !noalias;
}

/* The expression a member's operand x is at this point: a value computed earlier in the same
 * kernel (t<x>), an inline scalar, or a load (l<x>). */
static void operand_name(const Kernel *k, const Launch *L, int x, char *buf, size_t n) {
    if (launch_has(L, x)) snprintf(buf, n, "t%d", x);
    else if (k->g->nodes[x].op == OP_STEPVAL) snprintf(buf, n, "s%d", x);   /* decl_ptrs' */
    else if (node_is_inline(&k->g->nodes[x])) {
        Str tmp = {0};
        render_inline_value(&tmp, k->g, x, k->d->step, k->d->micro, "B");
        snprintf(buf, n, "%s", tmp.buf);
        str_free(&tmp);
    } else snprintf(buf, n, "l%d", x);
}

/* Member n's row and column at the point (its last two axes, aligned on the right with the space's
 * axes a0, a1, ...; 0 along an axis it broadcasts over), for an OPF_INDEX op's $r and $c. */
static void index_names(const Node *n, Shape space, char (*names)[256], const char **ops) {
    const Shape *s = &n->shape;
    for (int w = 0; w < 2; w++) { /* w = 0: the row, 1: the column */
        int j = s->rank - 2 + w, l = space.rank - 2 + w;
        if (j < 0 || s->d[j] == 1) snprintf(names[EXPR_ROW + w], 256, "(int64_t)0");
        else snprintf(names[EXPR_ROW + w], 256, "a%d", l);
        ops[EXPR_ROW + w] = names[EXPR_ROW + w];
    }
}

static bool launch_out(const Launch *L, int id) {
    for (int j = 0; j < L->nouts; j++)
        if (L->outs[j] == id) return true;
    return false;
}

/* Whether a member of the group reads node id. */
static bool read_in_group(const Graph *g, const Launch *L, int id) {
    for (int i = 0; i < L->nnodes; i++) {
        const Node *n = &g->nodes[L->nodes[i]];
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] == id) return true;
    }
    return false;
}

/* The statements computing every group member (but `skip`) at one point of the space; a half
 * member that is an output keeps its bits (h<id>) for the store, so they are rounded once. */
static void body(const Kernel *k, const Launch *L, const char *ind, int skip) {
    char names[EXPR_NAMES][256];
    const char *ops[EXPR_NAMES];
    for (int i = 0; i < L->nnodes; i++) {
        int id = L->nodes[i];
        const Node *n = &k->g->nodes[id];
        if (id == skip) continue;
        for (int j = 0; j < n->nin; j++) {
            operand_name(k, L, n->in[j], names[j], sizeof names[j]);
            ops[j] = names[j];
        }
        if (op_has(n->op, OPF_INDEX)) index_names(n, L->space, names, ops);
        bool half = DTYPE_IS_HALF(n->dtype);   /* the value rounded to its format, as stored */
        if (half && launch_out(L, id)) { /* its bits h<id> kept for the store */
            str_printf(k->s, "%sconst unsigned short h%d = %s(", ind, id, half_fn(n->dtype, true));
            render_ew_expr(k->s, k->g, id, ops);
            str_puts(k->s, ");\n");
            if (read_in_group(k->g, L, id))
                str_printf(k->s, "%s%s t%d = %s(h%d);\n", ind, k->d->value, id, half_fn(n->dtype, false), id);
            continue;
        }
        str_printf(k->s, "%s%s t%d = ", ind, k->d->value, id);
        if (half) str_printf(k->s, "%s(%s(", half_fn(n->dtype, false), half_fn(n->dtype, true));
        render_ew_expr(k->s, k->g, id, ops);
        str_puts(k->s, half ? "));\n" : ";\n");
    }
}

/* A half output's store: the bits body() kept (h<id>, a member of the group), or t<id> rounded. */
static void store_value(const Kernel *k, const Launch *L, int id) {
    DType t = k->g->nodes[id].dtype;
    if (!DTYPE_IS_HALF(t)) str_printf(k->s, "t%d", id);
    else if (launch_has(L, id)) str_printf(k->s, "h%d", id);
    else str_printf(k->s, "%s(t%d)", half_fn(t, true), id);
}

Access kernel_access(const Graph *g, int x, Shape sp) {
    Shape xs = g->nodes[x].shape;
    if (shape_eq(xs, sp)) return ACCESS_FULL;
    if (shape_numel(xs, 2) == 1) return ACCESS_SCALAR;
    int lead = 0;
    while (lead < xs.rank && xs.d[lead] == 1) lead++;
    int r = xs.rank - lead;
    if (r > sp.rank) return ACCESS_OTHER;
    for (int l = 0; l < r; l++)
        if (xs.d[lead + l] != sp.d[sp.rank - r + l]) return ACCESS_OTHER;
    return ACCESS_SUFFIX;
}

/* "l<x> = ": an input's value at a point, widened to real. */
static void load_open(const Kernel *k, const char *ind, int x, const char *from) {
    DType t = k->g->nodes[x].dtype;
    if (DTYPE_IS_HALF(t)) str_printf(k->s, "%s%s l%d = %s(%s", ind, k->d->value, x, half_fn(t, false), from);
    else str_printf(k->s, "%s%s l%d = (real)%s", ind, k->d->value, x, from);
}

static void load_close(const Kernel *k, int x) { str_puts(k->s, DTYPE_IS_HALF(k->g->nodes[x].dtype) ? ");\n" : ";\n"); }

/* l<x> for every input: at i (flat: full-size), 0 (a scalar) or i modulo its size (a suffix),
 * else at its broadcast offset (through perm: a transpose's or permute's one input). */
static void loads(const Kernel *k, const Launch *L, Shape space, bool flat, const int8_t *perm, const char *ind) {
    char from[16];
    for (int j = 0; j < L->nins; j++) {
        int x = L->ins[j];
        snprintf(from, sizeof from, "i%d[", j);
        load_open(k, ind, x, from);
        Access a = kernel_access(k->g, x, space);
        if (!flat) render_load_offset(k->s, k->g, x, space, perm);
        else if (a == ACCESS_SCALAR) str_puts(k->s, "0");
        else if (a == ACCESS_SUFFIX) {
            str_puts(k->s, "i % (");
            render_numel(k->s, k->g->nodes[x].shape);
            str_puts(k->s, ")");
        } else str_puts(k->s, "i");
        str_puts(k->s, "]");
        load_close(k, x);
    }
}

/* ---- elementwise ---------------------------------------------------------------------------- */

/* A flat walk when every operand is full-size or a scalar (or a suffix, where the dialect takes
 * them): the C compiler vectorizes it, CUDA needs no index split; else per-axis indices and
 * broadcast strides, which a member that reads its row and column (OPF_INDEX) needs too. */
bool kernel_flat(const Kernel *k, const Launch *L) {
    Shape sp = L->space;
    bool flat = !op_permutes(k->g->nodes[L->root].op);
    for (int i = 0; i < L->nnodes; i++) flat &= !op_has(k->g->nodes[L->nodes[i]].op, OPF_INDEX);
    for (int j = 0; j < L->nins; j++) {
        Access a = kernel_access(k->g, L->ins[j], sp);
        flat &= a == ACCESS_FULL || a == ACCESS_SCALAR || (a == ACCESS_SUFFIX && k->d->flat_suffix);
    }
    return flat || sp.rank == 0;
}

/* A suffix's vector index is v modulo its size / lanes, a constant: none with a batch axis (B or
 * B*k).  A member that reads its row and column (OPF_INDEX) needs the per-axis walk. */
bool kernel_vec_ok(const Graph *g, const Launch *L, int lanes) {
    if (op_permutes(g->nodes[L->root].op) || lanes < 2) return false;
    for (int i = 0; i < L->nnodes; i++)
        if (op_has(g->nodes[L->nodes[i]].op, OPF_INDEX)) return false;
    for (int j = 0; j < L->nins; j++) {
        Shape xs = g->nodes[L->ins[j]].shape;
        Access a = kernel_access(g, L->ins[j], L->space);
        bool fixed = true;
        for (int l = 0; l < xs.rank; l++) fixed &= !dim_is_batch(xs.d[l]);
        if (a == ACCESS_OTHER || (a == ACCESS_SUFFIX && (!fixed || shape_numel(xs, 1) % lanes))) return false;
    }
    for (int j = 0; L->kind == L_EW && j < L->nouts; j++)
        if (!shape_eq(g->nodes[L->outs[j]].shape, L->space)) return false;
    return true;
}

/* The statements computing each lane q of a vector: the inputs' values (a scalar's was loaded
 * once before), the body, then the accumulation or the outputs' lanes. */
static void vec_lane(const Kernel *k, const Launch *L, const char *ind, const char *target) {
    char from[32];
    for (int j = 0; j < L->nins; j++) {
        int x = L->ins[j];
        if (kernel_access(k->g, x, L->space) == ACCESS_SCALAR) continue;
        snprintf(from, sizeof from, "l%d_[q]", x);
        load_open(k, ind, x, from);
        load_close(k, x);
    }
    body(k, L, ind, target ? L->root : -1);
    if (target) {
        char t[64];
        snprintf(t, sizeof t, "%s[q]", target);
        str_puts(k->s, ind);
        kernel_reduce_step(k, L, t);
        str_puts(k->s, "\n");
        return;
    }
    for (int j = 0; j < L->nouts; j++) {
        str_printf(k->s, "%so%d_[q] = ", ind, j);
        store_value(k, L, L->outs[j]);
        str_puts(k->s, ";\n");
    }
}

void kernel_vec_point(const Kernel *k, const Launch *L, int lanes, const char *ind, const char *target) {
    char dst[32], ptr[32], v[64], in2[72];
    for (int j = 0; j < L->nins; j++) {
        int x = L->ins[j];
        Access a = kernel_access(k->g, x, L->space);
        snprintf(ptr, sizeof ptr, "i%d", j);
        if (a == ACCESS_SCALAR) {
            snprintf(dst, sizeof dst, "i%d[0]", j);
            load_open(k, ind, x, dst);
            load_close(k, x);
            continue;
        }
        snprintf(dst, sizeof dst, "l%d_", x);
        if (a == ACCESS_SUFFIX)
            snprintf(v, sizeof v, "v %% %lldLL", (long long)(shape_numel(k->g->nodes[x].shape, 1) / lanes));
        else snprintf(v, sizeof v, "v");
        k->d->vec.load(k, ind, kernel_type(k, x), lanes, dst, ptr, v);
    }
    for (int j = 0; !target && j < L->nouts; j++)
        str_printf(k->s, "%s%s o%d_[%d];\n", ind, kernel_type(k, L->outs[j]), j, lanes);
    str_printf(k->s, "%s%s%sfor (int q = 0; q < %d; q++) {\n", ind, k->d->vec.unroll, ind, lanes);
    snprintf(in2, sizeof in2, "%s    ", ind);
    vec_lane(k, L, in2, target);
    str_printf(k->s, "%s}\n", ind);
    for (int j = 0; !target && j < L->nouts; j++) {
        snprintf(ptr, sizeof ptr, "o%d", j);
        snprintf(dst, sizeof dst, "o%d_", j);
        k->d->vec.store(k, ind, kernel_type(k, L->outs[j]), lanes, ptr, "v", dst);
    }
}

/* Elementwise: one point at a time, or (where the dialect moves 16 bytes at a time) whole
 * vectors, then the last n % lanes elements one at a time. */
static void kernel_ew(const Kernel *k, const Launch *L) {
    Shape sp = L->space;
    int8_t perm[IR_MAX_RANK]; /* a transpose or permute: its one input read through it */
    bool permuted = op_permutes(k->g->nodes[L->root].op);
    if (permuted) node_perm(&k->g->nodes[L->root], perm);
    bool flat = kernel_flat(k, L);
    bool inplace = decl_ptrs(k, L, true);
    int lanes = k->d->vec.lanes ? k->d->vec.lanes(k, L) : 1;
    char ind[64];
    if (lanes > 1) {
        snprintf(ind, sizeof ind, "%*s", k->d->vec.open(k, sp, lanes), "");
        kernel_vec_point(k, L, lanes, ind, NULL);
        k->d->vec.tail(k, sp, lanes);
    } else snprintf(ind, sizeof ind, "%*s", k->d->space_open(k, L, sp, flat, inplace), "");
    loads(k, L, sp, flat, permuted ? perm : NULL, ind);
    body(k, L, ind, -1);
    for (int j = 0; j < L->nouts; j++) {
        str_printf(k->s, "%so%d[", ind, j);
        if (flat) str_puts(k->s, "i");
        else render_load_offset(k->s, k->g, L->outs[j], sp, NULL);
        str_puts(k->s, "] = ");
        store_value(k, L, L->outs[j]);
        str_puts(k->s, ";\n");
    }
    k->d->space_close(k, L, sp, flat);
}

/* ---- reductions ----------------------------------------------------------------------------- */

bool kernel_reduce_is_max(const Kernel *k, const Launch *L) { return k->g->nodes[L->root].op == OP_MAX; }

void kernel_reduce_acc(const Kernel *k, const Launch *L, int indent) {
    if (kernel_reduce_is_max(k, L)) str_printf(k->s, "%*sdouble acc = -%s;\n", indent, "", k->d->inf);
    else str_printf(k->s, "%*sdouble acc = 0.0;\n", indent, "");
}

/* A NaN wins a maximum (torch.amax): `v != v` takes it, and no later value beats it. */
void kernel_reduce_step(const Kernel *k, const Launch *L, const char *target) {
    char v[256];
    operand_name(k, L, k->g->nodes[L->root].in[0], v, sizeof v);
    if (kernel_reduce_is_max(k, L)) str_printf(k->s, "if (%s > %s || %s != %s) %s = %s;", v, target, v, v, target, v);
    else str_printf(k->s, "%s += %s;", target, v);
}

void kernel_reduce_point(const Kernel *k, const Launch *L, const char *ind, const char *target) {
    kernel_reduce_point_at(k, L, ind, target, false);
}

void kernel_reduce_point_at(const Kernel *k, const Launch *L, const char *ind, const char *target, bool flat) {
    loads(k, L, L->space, flat, NULL, ind);
    body(k, L, ind, L->root);
    if (!target) return;
    str_puts(k->s, ind);
    kernel_reduce_step(k, L, target);
    str_puts(k->s, "\n");
}

static void kernel_reduce(const Kernel *k, const Launch *L) {
    decl_ptrs(k, L, false);
    kernel_ptr_line(k, "real *o0", L->root);
    k->d->reduce(k, L);
}

/* ---- row-wise kernels ----------------------------------------------------------------------- */

/* C (the last axis) and rows, for x's shape, then the dialect's own row set-up. */
static void row_header(const Kernel *k, int x) {
    Shape xs = k->g->nodes[x].shape;
    str_puts(k->s, "    const int64_t C = ");
    render_dim(k->s, xs.rank ? xs.d[xs.rank - 1] : 1, "B");
    str_puts(k->s, ", rows = ");
    render_numel(k->s, xs);
    str_puts(k->s, " / C;\n");
    if (k->d->row.setup) str_puts(k->s, k->d->row.setup);
}

/* "VAR = ALL(VAR);": every owner of the row gets the combined value. */
static void row_all(const Kernel *k, const char *ind, const char *var, const char *all) {
    if (all) str_printf(k->s, "%s%s = %s(%s);\n", ind, var, all, var);
}

/* double sums over a row's columns, acc[j] of term[j] (j < n; terms of c, after the statements
 * `pre`, or NULL), each combined over the row's owners.  Where the dialect asks for lanes
 * (row.lanes), lane l sums the columns c = l (mod lanes) and the lanes are added in order, lane 0
 * first: the compiler makes a vector of the lanes, where a sum in one order over the row stays
 * scalar, each add waiting for the one before.  The order is fixed, so every build and thread
 * count gives the same bits. */
static void row_sums(const Kernel *k, int n, const char *const *acc, const char *pre, const char *const *term) {
    const int lanes = k->d->row.lanes;
    for (int j = 0; j < n; j++) str_printf(k->s, "        double %s = 0;\n", acc[j]);
    if (lanes <= 1) {
        str_printf(k->s, "        %s {\n", k->d->row.cols);
        if (pre) str_printf(k->s, "            %s\n", pre);
        for (int j = 0; j < n; j++) str_printf(k->s, "            %s += %s;\n", acc[j], term[j]);
        str_puts(k->s, "        }\n");
    } else {
        str_puts(k->s, "        {\n");
        for (int j = 0; j < n; j++) str_printf(k->s, "            double %s_l[%d] = {0};\n", acc[j], lanes);
        str_printf(k->s, "            const int64_t cl = C / %d * %d;\n", lanes, lanes);
        /* the whole vectors, a loop a sum: gcc vectorises a lane loop that feeds one accumulator,
         * and left one that fed two scalar (layer norm's gradient, 2x slower) */
        for (int j = 0; j < n; j++) {
            str_printf(k->s,
                       "            for (int64_t cb = 0; cb < cl; cb += %d)\n"
                       "                for (int l = 0; l < %d; l++) {\n"
                       "                    const int64_t c = cb + l;\n",
                       lanes, lanes);
            if (pre) str_printf(k->s, "                    %s\n", pre);
            str_printf(k->s, "                    %s_l[l] += %s;\n                }\n", acc[j], term[j]);
        }
        str_puts(k->s,
                 "            for (int64_t c = cl; c < C; c++) {   /* the columns past the last whole vector */\n"
                 "                {\n"
                 "                    const int l = (int)(c - cl);\n");
        if (pre) str_printf(k->s, "                    %s\n", pre);
        for (int j = 0; j < n; j++) str_printf(k->s, "                    %s_l[l] += %s;\n", acc[j], term[j]);
        str_puts(k->s, "                }\n            }\n");
        str_printf(k->s, "            for (int l = 0; l < %d; l++) {\n", lanes);
        for (int j = 0; j < n; j++) str_printf(k->s, "                %s += %s_l[l];\n", acc[j], acc[j]);
        str_puts(k->s, "            }\n        }\n");
    }
    for (int j = 0; j < n; j++) row_all(k, "        ", acc[j], k->d->row.sum_all);
}

/* double s = the sum of `term` over the row. */
static void row_sum(const Kernel *k, const char *term) {
    const char *acc[] = {"s"};
    row_sums(k, 1, acc, NULL, &term);
}

/* mx, the row's maximum (in lanes as row_sums: a maximum is exact, so the bits are those of one
 * order), and s, the double sum of exp(x - mx): every term is at most 1, so the sum cannot
 * overflow whatever the logits. */
static void row_max_sum(const Kernel *k) {
    const int lanes = k->d->row.lanes;
    str_printf(k->s, "        real mx = -%s;\n", k->d->inf);
    if (lanes <= 1) str_printf(k->s, "        %s mx = %s;\n", k->d->row.cols, k->d->row.max_pick);
    else /* lanes are the C dialect's, whose max_pick this is: a NaN is not taken */
        str_printf(
            k->s,
            "        {\n"
            "            real mx_l[%d];\n"
            "            for (int l = 0; l < %d; l++) mx_l[l] = -%s;\n"
            "            const int64_t cl = C / %d * %d;\n"
            "            for (int64_t cb = 0; cb < cl; cb += %d)\n"
            "                for (int l = 0; l < %d; l++) mx_l[l] = XL(cb + l) > mx_l[l] ? XL(cb + l) : mx_l[l];\n"
            "            for (int64_t c = cl; c < C; c++) mx_l[c - cl] = XL(c) > mx_l[c - cl] ? XL(c) : mx_l[c - cl];\n"
            "            for (int l = 0; l < %d; l++) mx = mx_l[l] > mx ? mx_l[l] : mx;\n"
            "        }\n",
            lanes, lanes, k->d->inf, lanes, lanes, lanes, lanes, lanes);
    row_all(k, "        ", "mx", k->d->row.max_all);
    row_sum(k, "EXP(XL(c) - mx)");
}

static int elem_bytes(const Kernel *k, int x) {
    DType t = k->g->nodes[x].dtype;
    return DTYPE_IS_HALF(t) ? 2 : t == DT_I32 || !k->o->f64 ? 4 : 8;
}

/* ---- rows in registers (row.owners) ----------------------------------------------------------
 * A warp's layer-norm row of GPT-2 (768 floats, 3 KB) was read once a pass, four passes, a float
 * at a time: one load in flight a lane, each pass after the previous one's warp sum.  Where the
 * row's length is a compile-time multiple of a 16-byte vector's elements and a thread's share of
 * an array fits ROW_REG_VECS vectors, each of the row's owners reads its vectors of every array
 * once (all of them issued before the first sum), the passes work from registers, and the results
 * go out 16 bytes at a time.  The values are the same expressions of the same operands; a
 * thread's terms are added in the order of the columns it holds (vector by vector, element by
 * element), then combined across the owners as before: a fixed order, so the same bits on every
 * run, but not the scalar walk's (whose sums differ from them in the last bits of a double).
 * softmax, log_softmax and their gradients (a maximum and a sum, or a sum) do the same. */

#define ROW_REG_VECS 8 /* 16-byte vectors a thread holds of each array: 32 registers of float */

typedef struct {
    int lanes; /* elements a vector (1: the row is not held in registers) */
    int nvec; /* vectors a thread holds of each array (j < nvec) */
    int64_t nv; /* vectors a row */
} RowRegs;

static RowRegs row_regs(const Kernel *k, int x) {
    const RowRegs none = {1, 0, 0};
    if (k->g->nodes[x].dtype != DT_F32) return none; /* rows of real only */
    const Shape xs = k->g->nodes[x].shape;
    const int64_t C = xs.rank ? xs.d[xs.rank - 1] : 1;
    const int lanes = 16 / elem_bytes(k, x), own = k->d->row.owners;
    if (!own || !k->d->vec.load || dim_is_batch(C) || C % lanes) return none;
    const int64_t nv = C / lanes, nvec = (nv + own - 1) / own;
    return nvec > ROW_REG_VECS ? none : (RowRegs){lanes, (int)nvec, nv};
}

/* Opens the (unrolled) loop over the thread's vectors j, rv the vector's index in the row (for
 * `use`, or for the guard: where the owners do not divide the row's vectors, the last j skips the
 * threads past its end). */
static void reg_loop(const Kernel *k, RowRegs r, bool use) {
    const bool guard = r.nv % k->d->row.owners != 0;
    str_printf(k->s, "        %s        for (int j = 0; j < %d; j++) {\n", k->d->vec.unroll, r.nvec);
    if (use || guard)
        str_printf(k->s, "            const int64_t rv = %s + %d * j;\n", k->d->row.owner, k->d->row.owners);
    if (guard) str_printf(k->s, "            if (j == %d && rv >= %lldLL) continue;\n", r.nvec - 1, (long long)r.nv);
}

/* An array of a row held in registers: real NAME[nvec][lanes] from the row at `p`, each element
 * times `times`' (a [C] vector, whose vector v holds the same columns in every row) where given. */
typedef struct {
    const char *name, *p, *times;
    DType t; /* the row's type: DT_F32 (0), or a half type widened as it loads */
} RegArray;

static void reg_loads(const Kernel *k, RowRegs r, int n, const RegArray *a) {
    char dst[32];
    for (int i = 0; i < n; i++) str_printf(k->s, "        real %s[%d][%d];\n", a[i].name, r.nvec, r.lanes);
    reg_loop(k, r, true);
    for (int i = 0; i < n; i++) {
        snprintf(dst, sizeof dst, "%s_", a[i].name);
        const bool half = DTYPE_IS_HALF(a[i].t);
        k->d->vec.load(k, "            ", half ? "unsigned short" : "real", r.lanes, dst, a[i].p, "rv");
        if (a[i].times) {
            snprintf(dst, sizeof dst, "%sw_", a[i].name);
            k->d->vec.load(k, "            ", "real", r.lanes, dst, a[i].times, "rv");
        }
        str_printf(k->s, "            %s            for (int q = 0; q < %d; q++) %s[j][q] = %s(%s_[q])%s%s%s;\n",
                   k->d->vec.unroll, r.lanes, a[i].name, half ? half_fn(a[i].t, false) : "", a[i].name,
                   a[i].times ? " * " : "", a[i].times ? a[i].name : "", a[i].times ? "w_[q]" : "");
    }
    str_puts(k->s, "        }\n");
}

/* row_sums over the row in registers: term[j] (of j and q, after `pre`) into acc[j]. */
static void reg_sums(const Kernel *k, RowRegs r, int n, const char *const *acc, const char *pre,
                     const char *const *term) {
    for (int j = 0; j < n; j++) str_printf(k->s, "        double %s = 0;\n", acc[j]);
    reg_loop(k, r, false);
    str_printf(k->s, "            %s            for (int q = 0; q < %d; q++) {\n", k->d->vec.unroll, r.lanes);
    if (pre) str_printf(k->s, "                %s\n", pre);
    for (int j = 0; j < n; j++) str_printf(k->s, "                %s += %s;\n", acc[j], term[j]);
    str_puts(k->s, "            }\n        }\n");
    for (int j = 0; j < n; j++) row_all(k, "        ", acc[j], k->d->row.sum_all);
}

/* mx, the row's maximum from xr (a NaN wins it, as max_all's combine takes one). */
static void reg_max(const Kernel *k, RowRegs r) {
    str_printf(k->s, "        real mx = -%s;\n", k->d->inf);
    reg_loop(k, r, false);
    str_printf(
        k->s,
        "            %s            for (int q = 0; q < %d; q++) mx = xr[j][q] > mx || xr[j][q] != xr[j][q] ? xr[j][q] : mx;\n"
        "        }\n",
        k->d->vec.unroll, r.lanes);
    row_all(k, "        ", "mx", k->d->row.max_all);
}

/* The thread's vectors of the row at `p`, element q of vector j being `value`. */
static void reg_store2(const Kernel *k, RowRegs r, const char *p, const char *value, const char *hp, DType ht);

static void reg_store(const Kernel *k, RowRegs r, const char *p, const char *value) {
    reg_store2(k, r, p, value, NULL, DT_F32);
}

/* ... to `p` (NULL: not stored) and rounded to half type ht at `hp` (NULL: none). */
static void reg_store2(const Kernel *k, RowRegs r, const char *p, const char *value, const char *hp, DType ht) {
    reg_loop(k, r, true);
    str_printf(k->s, "            real o_[%d];\n            %s            for (int q = 0; q < %d; q++) o_[q] = %s;\n",
               r.lanes, k->d->vec.unroll, r.lanes, value);
    if (p) k->d->vec.store(k, "            ", "real", r.lanes, p, "rv", "o_");
    if (hp) {
        str_printf(
            k->s,
            "            unsigned short oh_[%d];\n            %s            for (int q = 0; q < %d; q++) oh_[q] = "
            "%s((float)o_[q]);\n",
            r.lanes, k->d->vec.unroll, r.lanes, half_fn(ht, true));
        k->d->vec.store(k, "            ", "unsigned short", r.lanes, hp, "rv", "oh_");
    }
    str_puts(k->s, "        }\n");
}

static void row_softmax(const Kernel *k, const Launch *L, bool log) {
    int x = k->g->nodes[L->root].in[0];
    row_header(k, x);
    kernel_ptr_line(k, "const real *X", x);
    kernel_ptr_line(k, "real *Y", L->root);
    k->d->row.open(k, L);
    str_puts(k->s, "        const real *x = X + i * C;\n"
                   "        real *y = Y + i * C;\n");
    const RowRegs r = row_regs(k, x);
    if (r.lanes > 1) {
        const RegArray a[] = {{"xr", "x", NULL, DT_F32}};
        const char *acc[] = {"s"}, *term[] = {"EXP(xr[j][q] - mx)"};
        reg_loads(k, r, 1, a);
        reg_max(k, r);
        reg_sums(k, r, 1, acc, NULL, term);
        str_puts(k->s, log ? "        const real ls = (real)log(s);\n" : "        const real inv = (real)(1.0 / s);\n");
        reg_store(k, r, "y", log ? "(xr[j][q] - mx) - ls" : "EXP(xr[j][q] - mx) * inv");
        str_puts(k->s, "    }\n");
        return;
    }
    row_max_sum(k);
    if (log)
        /* (x - mx) - log(s), not x - (mx + log(s)): with |mx| ~ 1e3 the sum would round away
         * log(s)'s low bits (float32 ulp at 1000 is 6e-5) */
        str_printf(k->s,
                   "        const real ls = (real)log(s);\n"
                   "        %s y[c] = (XL(c) - mx) - ls;\n    }\n",
                   k->d->row.cols);
    else
        str_printf(k->s,
                   "        const real inv = (real)(1.0 / s);\n"
                   "        %s y[c] = EXP(XL(c) - mx) * inv;\n    }\n",
                   k->d->row.cols);
}

/* softmax_grad(dy, y) = y * (dy - sum(dy * y));  log_softmax_grad(dy, y) = dy - exp(y) * sum(dy) */
static void row_softmax_grad(const Kernel *k, const Launch *L, bool log) {
    const Node *n = &k->g->nodes[L->root];
    row_header(k, n->in[0]);
    kernel_ptr_line(k, "const real *DY", n->in[0]);
    kernel_ptr_line(k, "const real *Yv", n->in[1]);
    kernel_ptr_line(k, "real *DX", L->root);
    k->d->row.open(k, L);
    str_puts(k->s, "        const real *dy = DY + i * C, *y = Yv + i * C;\n"
                   "        real *dx = DX + i * C;\n");
    const RowRegs r = row_regs(k, n->in[0]);
    if (r.lanes > 1) {
        const RegArray a[] = {{"dr", "dy", NULL, DT_F32}, {"yr", "y", NULL, DT_F32}};
        const char *acc[] = {"s"}, *term[] = {log ? "dr[j][q]" : "(double)dr[j][q] * yr[j][q]"};
        reg_loads(k, r, 2, a);
        reg_sums(k, r, 1, acc, NULL, term);
        reg_store(k, r, "dx", log ? "dr[j][q] - EXP(yr[j][q]) * (real)s" : "yr[j][q] * (dr[j][q] - (real)s)");
        str_puts(k->s, "    }\n");
        return;
    }
    row_sum(k, log ? "dy[c]" : "(double)dy[c] * y[c]");
    str_printf(k->s, "        %s dx[c] = %s;\n    }\n", k->d->row.cols,
               log ? "dy[c] - EXP(y[c]) * (real)s" : "y[c] * (dy[c] - (real)s)");
}

/* dl, the gradient flowing into the loss: an inline scalar or a one-element buffer. */
static void row_dloss(const Kernel *k, int g) {
    str_puts(k->s, "    const double dl = (double)");
    if (node_is_inline(&k->g->nodes[g])) render_inline_value(k->s, k->g, g, k->d->step, k->d->micro, "B");
    else {
        str_puts(k->s, "*");
        k->d->ptr(k, k->s, g);
    }
    str_puts(k->s, ";\n");
}

/* The rows the mean is over, those whose label is not ignore_index, as `kept`: the threads that
 * total_all combines split every row's label between them (a label a row, cheap beside the row
 * pass), so the gradient of the first row already knows the mean's denominator. */
static void row_ce_kept(const Kernel *k, int32_t ignore) {
    str_printf(k->s, "    double kept = 0;\n    %s kept += T[j] != %d;\n", k->d->row.all_rows, (int)ignore);
    row_all(k, "    ", "kept", k->d->row.total_all);
}

/* A cross-entropy row's loss into `total`, after its max and exp-sum: mx + log(s) - x[t], or with
 * label smoothing eps (a compile-time constant: without it the row's code has no smoothing terms)
 * mx + log(s) - (1 - eps) x[t] - eps sx / C, sx the row's sum (taken here unless `have_sx`). */
static void row_ce_loss(const Kernel *k, double eps, bool have_sx) {
    char e[RENDER_NUM_LEN], f[RENDER_NUM_LEN];
    if (eps == 0) {
        str_printf(k->s, "        %stotal += (double)mx + log(s) - (double)xt;\n", k->d->row.leader);
        return;
    }
    if (!have_sx) {
        const char *acc[] = {"sx"}, *term[] = {"(double)XL(c)"};
        row_sums(k, 1, acc, NULL, term);
    }
    str_printf(k->s, "        %stotal += (double)mx + log(s) - %s * (double)xt - %s * sx / (double)C;\n",
               k->d->row.leader, render_num(f, 1 - eps), render_num(e, eps));
}

/* The gradient's scale k = dloss / kept, inv = 1 / s, g (G's row) and, with label smoothing, the
 * smoothed one-hot's values on / off; then `value` is the gradient at column c of the logit `xc`:
 * (softmax - target) * k, the target the label's one-hot, smoothed to (1 - eps) onehot + eps / C.
 * G may be X (the logits die here): x[t] was read into xt before, and the owners sync before
 * overwriting. */
static void row_ce_grad_head(const Kernel *k, double eps, const char *gtype) {
    char e[RENDER_NUM_LEN], f[RENDER_NUM_LEN];
    if (k->d->row.sync) str_puts(k->s, k->d->row.sync);
    str_printf(k->s,
               "        const real k = (real)(dl / kept), inv = (real)(1.0 / s);\n"
               "        %s *g = G + i * C;\n",
               gtype);
    if (eps != 0)
        str_printf(k->s, "        const real on = (real)%s, off = (real)(%s / (double)C);\n", render_num(f, 1 - eps),
                   render_num(e, eps));
}

static void row_ce_grad_value(char *buf, size_t n, double eps, const char *xc) {
    if (eps == 0) snprintf(buf, n, "GS((EXP(%s - mx) * inv - (c == t ? 1 : 0)) * k)", xc);
    else snprintf(buf, n, "GS((EXP(%s - mx) * inv - (c == t ? on : 0) - off) * k)", xc);
}

/* The part of a cross-entropy row after its max and exp-sum (three passes: row_max_sum's two,
 * then the gradient's): the loss and, with `grad`, the gradient over the row. */
static void row_ce_tail(const Kernel *k, bool grad, double eps, const char *gtype) {
    char v[128];
    row_ce_loss(k, eps, false);
    if (!grad) return;
    row_ce_grad_head(k, eps, gtype);
    row_ce_grad_value(v, sizeof v, eps, "XL(c)");
    str_printf(k->s, "        %s g[c] = %s;\n", k->d->row.cols, v);
}

/* ---- cross-entropy in two passes (row.pair_all) --------------------------------------------
 * Three passes over a row of GPT-2's 50304 bf16 logits (100 KB) read it three times: with a
 * thousand rows in flight on a GPU, 100 MB, more than its L2 holds, so from memory each time.
 * Here the first pass takes the maximum and the exp-sum together (each thread's sum against its
 * own running maximum, rescaled when that grows; the owners' (max, sum) pairs combined by
 * row.pair_all), and the gradient's pass reads the row again right after, 16 bytes at a time
 * where the row's length allows.  The sum is of the same terms exp(x - mx), each vector's
 * (at most 8, each at most 1) added in float in pairs and those sums in double, but taken
 * against other maxima and rescaled: within a few units of float's last place of the three
 * passes' sum, so the gradient is within a unit or two of float's last place of theirs (and of
 * the CPU's), which tests/ref/test_ce_torch.py and gpu_vs_cpu hold it to. */

/* Elements per 16-byte access of a row of x and of the gradient g (-1: none): C a multiple of
 * them known at compile time, so every row starts on a vector (the plan starts every buffer on
 * 256 bytes); else 1, one element at a time. */
static int row_ce_lanes(const Kernel *k, int x, int g) {
    Shape xs = k->g->nodes[x].shape;
    int64_t C = xs.rank ? xs.d[xs.rank - 1] : 1;
    int bytes = elem_bytes(k, x);
    if (g >= 0 && elem_bytes(k, g) > bytes) bytes = elem_bytes(k, g);
    int lanes = 16 / bytes;
    return !k->d->vec.load || dim_is_batch(C) || C % lanes ? 1 : lanes;
}

/* A thread's vectors of a cross-entropy row are loaded CE_LOADS at a time, all before the first
 * is used: one block a row, one 16-byte load in flight a thread was 32 KB a round from an SM,
 * each round waiting on the last (GPT-2's [12288, 50304] bf16 logits: 1.07 ms for 2.5 GB, 2.3
 * TB/s).  The vectors are used in the same order, so the sums are the same. */
#define CE_LOADS 2

/* CE_LOADS, or NNC_CE_LOADS=1|2|4 when the model is compiled, to compare on a GPU: GPT-2's kernel
 * takes 32 registers a thread with one or two (an SM holds two blocks of 1024 threads: 64 KB in
 * flight with two), 58 with four (one block: 64 KB too, half the warps) */
static int ce_loads(void) {
    const char *e = getenv("NNC_CE_LOADS");
    return e && (*e == '1' || *e == '2' || *e == '4') && !e[1] ? *e - '0' : CE_LOADS;
}

/* Opens the loop over the thread's vectors of the row: CE_LOADS of them a round from vb (v<u>,
 * loaded into xr<u>_; past nv, vb's again), which row_ce_item then takes in turn. */
static void row_ce_loop(const Kernel *k, int x, int lanes) {
    char dst[16], at[96];
    str_printf(k->s, "        for (int64_t vb = %s; vb < nv; vb += %d * (int64_t)%s) {\n", k->d->row.vfirst, ce_loads(),
               k->d->row.vstep);
    for (int u = 0; u < ce_loads(); u++) {
        str_printf(k->s, "            const int64_t v%d = vb + %d * (int64_t)%s;\n", u, u, k->d->row.vstep);
        snprintf(dst, sizeof dst, "xr%d_", u);
        snprintf(at, sizeof at, u ? "(v%d < nv ? v%d : vb)" : "v0", u, u);
        if (lanes > 1) k->d->vec.load(k, "            ", kernel_type(k, x), lanes, dst, "x", at);
    }
}

/* Vector u of the round, if the row has it: v, and xv[lanes] its logits as real (lanes 1: column
 * v).  Closed by "            }\n". */
static void row_ce_item(const Kernel *k, int x, int lanes, int u) {
    const DType t = k->g->nodes[x].dtype;
    const char *ind = "                ";
    str_printf(k->s, "            if (v%d < nv) {\n%sconst int64_t v = v%d;\n", u, ind, u);
    if (lanes == 1) {
        str_printf(k->s, "%sconst real xv[1] = {XL(v)};\n", ind);
        return;
    }
    str_printf(k->s, "%sreal xv[%d];\n%s%s%sfor (int q = 0; q < %d; q++) xv[q] = ", ind, lanes, ind, k->d->vec.unroll,
               ind, lanes);
    if (DTYPE_IS_HALF(t)) str_printf(k->s, "%s(xr%d_[q]);\n", half_fn(t, false), u);
    else str_printf(k->s, "(real)xr%d_[q];\n", u);
}

/* EXP(xv[q] - mb) over q in [lo, hi), added in pairs: within 3 units of the last place for 8. */
static void exp_tree(Str *s, int lo, int hi) {
    if (hi - lo == 1) {
        str_printf(s, "EXP(xv[%d] - mb)", lo);
        return;
    }
    str_puts(s, "(");
    exp_tree(s, lo, (lo + hi) / 2);
    str_puts(s, " + ");
    exp_tree(s, (lo + hi) / 2, hi);
    str_puts(s, ")");
}

/* mx and s (and, with label smoothing, sx) of the row in one pass.  A NaN never becomes a
 * maximum, but its term makes the sum NaN, so the loss and the gradient are NaN as with three
 * passes; a thread whose logits are all -inf adds terms of 0 (mb), and pair_all gives its zero
 * sum no weight. */
static void row_ce_max_sum(const Kernel *k, int x, int lanes, bool smooth) {
    str_printf(k->s,
               "        real mx = -%s;   /* the thread's maximum so far, then the row's */\n"
               "        double s = 0;   /* exp(x - mx) over the thread's columns so far, then the row's */\n"
               "%s",
               k->d->inf, smooth ? "        double sx = 0;\n" : "");
    row_ce_loop(k, x, lanes);
    for (int u = 0; u < ce_loads(); u++) {
        row_ce_item(k, x, lanes, u);
        str_puts(k->s, "                real vm = xv[0];\n");
        if (lanes > 1)
            str_printf(k->s,
                       "                %s                for (int q = 1; q < %d; q++) vm = xv[q] > vm ? xv[q] : vm;\n",
                       k->d->vec.unroll, lanes);
        str_printf(k->s,
                   "                if (vm > mx) {   /* the sum so far, against the larger maximum */\n"
                   "                    s *= (double)EXP(mx - vm);\n"
                   "                    mx = vm;\n"
                   "                }\n"
                   "                const real mb = mx == -%s ? (real)0 : mx;\n"
                   "                s += (double)",
                   k->d->inf);
        exp_tree(k->s, 0, lanes);
        str_puts(k->s, ";\n");
        if (smooth)
            str_printf(k->s, "                %s                for (int q = 0; q < %d; q++) sx += (double)xv[q];\n",
                       k->d->vec.unroll, lanes);
        str_puts(k->s, "            }\n");
    }
    str_printf(k->s, "        }\n        %s(&mx, &s);\n", k->d->row.pair_all);
    if (smooth) row_all(k, "        ", "sx", k->d->row.sum_all);
}

/* The gradient over the row, a vector at a time (CE_LOADS loaded before the first is stored:
 * G may be X, and each thread writes only the vectors it read). */
static void row_ce_grad_pass(const Kernel *k, int x, int lanes, double eps, const char *gtype) {
    char v[128];
    row_ce_grad_head(k, eps, gtype);
    row_ce_loop(k, x, lanes);
    row_ce_grad_value(v, sizeof v, eps, lanes == 1 ? "xv[0]" : "xv[q]");
    for (int u = 0; u < ce_loads(); u++) {
        row_ce_item(k, x, lanes, u);
        if (lanes == 1) {
            str_printf(k->s, "                const int64_t c = v;\n                g[c] = %s;\n            }\n", v);
            continue;
        }
        str_printf(k->s,
                   "                %s g_[%d];\n"
                   "                %s                for (int q = 0; q < %d; q++) {\n"
                   "                    const int64_t c = v * %d + q;\n"
                   "                    g_[q] = %s;\n"
                   "                }\n",
                   gtype, lanes, k->d->vec.unroll, lanes, lanes, v);
        k->d->vec.store(k, "                ", gtype, lanes, "g", "v", "g_");
        str_puts(k->s, "            }\n");
    }
    str_puts(k->s, "        }\n");
}

/* row.blocks (the C target's pooled totals): whether launch L's rows run in blocks; the loop
 * over a piece's blocks [lo, hi), each starting its total at zero; its end, the block's total
 * kept; and the end of the piece, which opens NAME_post: the launch's rows and labels, the
 * first bad label (reported: the step stops), and `total`, the blocks' totals in order. */
static bool row_blocks(const Kernel *k, const Launch *L) { return k->d->row.blocks && k->d->row.blocks(k, L); }

static void row_blocks_open(const Kernel *k) {
    str_puts(k->s, "    for (int64_t blk_ = lo; blk_ < hi; blk_++) {\n        total = 0;\n");
}

static void row_blocks_close(const Kernel *k) { str_puts(k->s, "        bt_[blk_] = total;\n    }\n"); }

static void row_blocks_post(const Kernel *k, int x, int labels, int32_t ignore) {
    str_printf(k->s,
               "}\n"
               "static void " KERNEL_NAME_MARK
               "_post(struct %s_frame *m, const void *const *in, int64_t B, void *const *o,\n"
               "                    const double *bt_) {\n"
               "    (void)m; (void)in; (void)B; (void)o;\n",
               k->mn);
    row_header(k, x);
    kernel_ptr_line(k, "const int32_t *T", labels);
    if (ignore != INT32_MIN) {
        str_printf(k->s,
                   "    int64_t bad = -1;\n"
                   "    for (int64_t j = 0; j < rows && bad < 0; j++)\n"
                   "        if (T[j] != %d && (T[j] < 0 || T[j] >= C)) bad = j;\n",
                   (int)ignore);
        if (k->d->row.bad_report) k->d->row.bad_report(k);
    }
    str_printf(k->s,
               "    double total = 0;\n"
               "    for (int64_t b_ = 0; b_ < (rows + %d - 1) / %d; b_++) total += bt_[b_];\n",
               KERNEL_ROW_BLOCK, KERNEL_ROW_BLOCK);
}

/* Cross-entropy with mean reduction, and/or its gradient.  A row whose label is ignore_index
 * adds nothing and gets a zero gradient; a label outside [0, C) skips its row and stops the
 * step with a message, as PyTorch raises. */
static void row_ce(const Kernel *k, const Launch *L, int ce, int grad) {
    const Node *n = &k->g->nodes[ce >= 0 ? ce : grad];
    const int32_t ignore = (int32_t)n->attr.scalars.p[0];
    const double eps = n->attr.scalars.p[1];
    char decl[64];
    const char *xtype = kernel_type(k, n->in[0]), *gtype = grad >= 0 ? kernel_type(k, grad) : "real";
    row_header(k, n->in[0]);
    snprintf(decl, sizeof decl, "const %s *X", xtype);
    kernel_ptr_line(k, decl, n->in[0]);
    kernel_ptr_line(k, "const int32_t *T", n->in[1]);
    if (ce >= 0) kernel_ptr_line(k, "real *LOSS", ce);
    if (grad >= 0) {
        snprintf(decl, sizeof decl, "%s *G", gtype);
        kernel_ptr_line(k, decl, grad);
        row_dloss(k, k->g->nodes[grad].in[2]);
    }
    row_ce_kept(k, ignore);
    const bool two = k->d->row.pair_all != NULL;
    const int lanes = two ? row_ce_lanes(k, n->in[0], grad) : 1;
    if (two) str_printf(k->s, "    const int64_t nv = C / %d;   /* the vectors of a row */\n", lanes);
    const bool blocks = row_blocks(k, L);
    str_puts(k->s, "    double total = 0;\n");
    if (k->d->row.bad_decl && !blocks) str_puts(k->s, k->d->row.bad_decl);
    if (blocks) row_blocks_open(k);
    k->d->row.open(k, L);
    str_printf(k->s,
               "        const %s *x = X + i * C;\n"
               "        const int32_t t = T[i];\n"
               "        if (t == %d) {\n",
               xtype, (int)ignore);
    if (grad >= 0) str_printf(k->s, "            %s G[i * C + c] = 0;\n", k->d->row.cols);
    str_printf(k->s,
               "            continue;\n"
               "        }\n"
               "        if (t < 0 || t >= C) {\n"
               "%s"
               "            continue;\n"
               "        }\n"
               "        const real xt = XL(t);   /* read before the row is overwritten (G may be X) */\n",
               k->d->row.bad_record && !blocks ? k->d->row.bad_record : "");
    if (two) {
        row_ce_max_sum(k, n->in[0], lanes, eps != 0);
        row_ce_loss(k, eps, true);
        if (grad >= 0) row_ce_grad_pass(k, n->in[0], lanes, eps, gtype);
    } else {
        row_max_sum(k);
        row_ce_tail(k, grad >= 0, eps, gtype);
    }
    str_puts(k->s, "    }\n");
    if (blocks) {
        row_blocks_close(k);
        str_puts(k->s, ce >= 0 ? "    (void)kept, (void)LOSS;\n" : "    (void)kept;\n");
        row_blocks_post(k, n->in[0], n->in[1], ignore);
        if (ce < 0) {
            str_puts(k->s, "    (void)total;\n");
            return;
        }
        kernel_ptr_line(k, "real *LOSS", ce);
        row_ce_kept(k, ignore);
        str_puts(k->s, "    LOSS[0] = (real)(total / kept);\n");
        return;
    }
    if (k->d->row.bad_report) k->d->row.bad_report(k);
    if (ce < 0) {
        str_puts(k->s, "    (void)total;\n");
        return;
    }
    row_all(k, "    ", "total", k->d->row.total_all);
    str_printf(k->s, "    %sLOSS[0] = (real)(total / kept);\n", k->d->row.writer);
}

/* Inside a row's loop: bi, the index of row i's first maximal x (NaN above everything), and bv
 * its value, in every owner of the row (torch.argmax's choice). */
static void row_first_max(const Kernel *k) {
    str_printf(k->s,
               "        const real *x = X + i * C;\n"
               "        real bv = -%s;\n"
               "        int64_t bi = -1;\n"
               "        %s\n"
               "            if (bi < 0 || x[c] > bv || (x[c] != x[c] && bv == bv)) { bv = x[c]; bi = c; }\n",
               k->d->inf, k->d->row.cols);
    if (k->d->row.argmax_all) str_puts(k->s, k->d->row.argmax_all);
}

/* Number of rows whose first maximal logit is the label (torch.argmax picks the first, and takes
 * NaN as larger than everything: a row holding a NaN "predicts" its first NaN).  Each owner of a
 * row keeps its best (value, index); owners combine by larger value (NaN above all, NaNs equal),
 * then smaller index, which is order-free. */
static void row_accuracy(const Kernel *k, const Launch *L) {
    const Node *n = &k->g->nodes[L->root];
    row_header(k, n->in[0]);
    kernel_ptr_line(k, "const real *X", n->in[0]);
    kernel_ptr_line(k, "const int32_t *T", n->in[1]);
    kernel_ptr_line(k, "real *OUT", L->root);
    const bool blocks = row_blocks(k, L);
    str_puts(k->s, "    double total = 0;   /* the hits */\n");
    if (blocks) row_blocks_open(k);
    k->d->row.open(k, L);
    row_first_max(k);
    str_printf(k->s, "        %stotal += bi == (int64_t)T[i];\n    }\n", k->d->row.leader);
    if (blocks) {
        row_blocks_close(k);
        str_puts(k->s, "    (void)OUT;\n");
        row_blocks_post(k, n->in[0], n->in[1], INT32_MIN);
        str_puts(k->s, "    (void)T;\n");
        kernel_ptr_line(k, "real *OUT", L->root);
        str_puts(k->s, "    OUT[0] = (real)total;\n");
        return;
    }
    row_all(k, "    ", "total", k->d->row.total_all);
    str_printf(k->s, "    %sOUT[0] = (real)total;\n", k->d->row.writer);
}

/* Each row's first maximal element's index (row_first_max), into OUT[i] (i32). */
static void row_argmax(const Kernel *k, const Launch *L) {
    const Node *n = &k->g->nodes[L->root];
    row_header(k, n->in[0]);
    kernel_ptr_line(k, "const real *X", n->in[0]);
    kernel_ptr_line(k, "int32_t *OUT", L->root);
    k->d->row.open(k, L);
    row_first_max(k);
    str_printf(k->s, "        %sOUT[i] = (int32_t)bi;\n    }\n", k->d->row.leader);
}

/* cumsum's rows (from the end where p[0] is set: its gradient): a running double sum rounded at
 * each element, by the row's leader alone, so that every target gives the same bits; each
 * element is read before its own is written, so y may be x's buffer. */
static void row_cumsum(const Kernel *k, const Launch *L) {
    const Node *n = &k->g->nodes[L->root];
    row_header(k, n->in[0]);
    kernel_ptr_line(k, "const real *X", n->in[0]);
    kernel_ptr_line(k, "real *Y", L->root);
    k->d->row.open(k, L);
    str_printf(k->s,
               "        %s{\n"
               "            const real *x = X + i * C;\n"
               "            real *y = Y + i * C;\n"
               "            double s = 0;\n"
               "            %s {\n"
               "                s += (double)x[c];\n"
               "                y[c] = (real)s;\n"
               "            }\n"
               "        }\n"
               "    }\n",
               k->d->row.leader,
               n->attr.scalars.p[0] != 0 ? "for (int64_t c = C - 1; c >= 0; c--)" : "for (int64_t c = 0; c < C; c++)");
}

/* The K above which topk's rows select by a heap rather than by insertion. */
#define TOPK_INSERTION_MAX 16

/* topk's rows: the indices of a row's K first elements in torch.sort's stable order, descending
 * (p[1] set: larger first, NaN above everything) or ascending (smaller first, NaN after
 * everything), equal elements in their order along the row, by the row's leader alone.  That
 * order is total (a tie goes to the smaller index), so any correct selection gives the same
 * indices: up to TOPK_INSERTION_MAX, each element is inserted among the K kept so far (OUT's row,
 * in order: O(C K), the fastest for top-k sampling's and routing's small K); above it, OUT's row
 * is a heap of the K best so far with the last of them at its root, each later element that
 * precedes the root replacing it, then the heap sorted in place (O(C log K): a whole sort
 * O(C log C), no scratch memory). */
static void row_topk(const Kernel *k, const Launch *L) {
    const Node *n = &k->g->nodes[L->root];
    const bool desc = n->attr.scalars.p[1] != 0;
    const int64_t K = (int64_t)n->attr.scalars.p[0];
    row_header(k, n->in[0]);
    str_printf(k->s, "    const int64_t K = %lld;\n", (long long)K);
    kernel_ptr_line(k, "const real *X", n->in[0]);
    kernel_ptr_line(k, "int32_t *OUT", L->root);
    k->d->row.open(k, L);
    if (K <= TOPK_INSERTION_MAX) {
        str_printf(k->s,
                   "        %s{\n"
                   "            const real *x = X + i * C;\n"
                   "            int32_t *o = OUT + i * K;\n"
                   "            int64_t n = 0;   /* kept so far */\n"
                   "            for (int64_t c = 0; c < C; c++) {\n"
                   "                const real v = x[c];\n"
                   "                int64_t p = n;   /* v's place: after every kept element it does not precede */\n"
                   "                while (p > 0) {\n"
                   "                    const real u = x[o[p - 1]];\n"
                   "                    if (!(%s)) break;\n"
                   "                    p--;\n"
                   "                }\n"
                   "                if (p >= K) continue;\n"
                   "                for (int64_t q = n < K ? n : K - 1; q > p; q--) o[q] = o[q - 1];\n"
                   "                o[p] = (int32_t)c;\n"
                   "                if (n < K) n++;\n"
                   "            }\n"
                   "        }\n"
                   "    }\n",
                   k->d->row.leader, desc ? "v > u || (v != v && u == u)" : "v < u || (u != u && v == v)");
        return;
    }
    /* TK_AFTER(a, b): element a comes after element b (a NaN first when descending, last
     * ascending; equal values by index) */
    str_printf(
        k->s,
        "#define TK_NAN(a) (x[a] != x[a])\n"
        "#define TK_AFTER(a, b) (TK_NAN(a) || TK_NAN(b) ? (TK_NAN(a) && TK_NAN(b) ? (a) > (b) : %s) \\\n"
        "                        : x[a] != x[b] ? x[a] %c x[b] : (a) > (b))\n"
        "#define TK_SIFT(s_, n_) { int64_t r_ = (s_); for (;;) { int64_t h_ = 2 * r_ + 1; if (h_ >= (n_)) break; \\\n"
        "    if (h_ + 1 < (n_) && TK_AFTER(o[h_ + 1], o[h_])) h_++; if (!TK_AFTER(o[h_], o[r_])) break; \\\n"
        "    const int32_t t_ = o[r_]; o[r_] = o[h_]; o[h_] = t_; r_ = h_; } }\n"
        "        %s{\n"
        "            const real *x = X + i * C;\n"
        "            int32_t *o = OUT + i * K;\n"
        "            for (int64_t c = 0; c < K; c++) o[c] = (int32_t)c;\n"
        "            for (int64_t s = K / 2 - 1; s >= 0; s--) TK_SIFT(s, K)   /* the last of the K at o[0] */\n"
        "            for (int64_t c = K; c < C; c++)\n"
        "                if (TK_AFTER(o[0], (int32_t)c)) { o[0] = (int32_t)c; TK_SIFT(0, K) }\n"
        "            for (int64_t e = K - 1; e > 0; e--) {   /* the last of those left to the end */\n"
        "                const int32_t t = o[0]; o[0] = o[e]; o[e] = t;\n"
        "                TK_SIFT(0, e)\n"
        "            }\n"
        "        }\n"
        "    }\n"
        "#undef TK_NAN\n#undef TK_AFTER\n#undef TK_SIFT\n",
        desc ? "TK_NAN(b)" : "TK_NAN(a)", desc ? '<' : '>', k->d->row.leader);
}

/* gather's rows: y[k] = x[p[k]], 0 where p[k] is outside [0, C).  The row's owners share its K
 * places as they share a row's columns elsewhere (the walk over "C" below walks K: the inner C
 * shadows the row's, kept as C_). */
static void row_gather(const Kernel *k, const Launch *L) {
    const Node *n = &k->g->nodes[L->root];
    const Shape ys = n->shape;
    row_header(k, n->in[0]);
    str_printf(k->s, "    const int64_t K = %lld;\n", (long long)ys.d[ys.rank - 1]);
    kernel_ptr_line(k, "const real *X", n->in[0]);
    kernel_ptr_line(k, "const int32_t *IX", n->in[1]);
    kernel_ptr_line(k, "real *Y", L->root);
    k->d->row.open(k, L);
    str_printf(k->s,
               "        const real *x = X + i * C;\n"
               "        const int32_t *p = IX + i * K;\n"
               "        real *y = Y + i * K;\n"
               "        {\n"
               "            const int64_t C_ = C, C = K;   /* the columns walked: the K places */\n"
               "            %s {\n"
               "                const int32_t q = p[c];\n"
               "                y[c] = q >= 0 && q < C_ ? x[q] : (real)0;\n"
               "            }\n"
               "        }\n"
               "    }\n",
               k->d->row.cols);
}

/* scatter's rows: y = x, then each src[k] added at (p[1]: written to) its place p[k] in k's order
 * by the row's leader alone (one order on every target: the same sums; the last k naming a place
 * is the one written), a place outside [0, C) skipped. */
static void row_scatter(const Kernel *k, const Launch *L) {
    const Node *n = &k->g->nodes[L->root];
    const Shape ss = k->g->nodes[n->in[2]].shape;
    row_header(k, n->in[0]);
    str_printf(k->s, "    const int64_t K = %lld;\n", (long long)ss.d[ss.rank - 1]);
    kernel_ptr_line(k, "const real *X", n->in[0]);
    kernel_ptr_line(k, "const int32_t *IX", n->in[1]);
    kernel_ptr_line(k, "const real *SV", n->in[2]);
    kernel_ptr_line(k, "real *Y", L->root);
    k->d->row.open(k, L);
    str_printf(k->s,
               "        const real *x = X + i * C;\n"
               "        const int32_t *p = IX + i * K;\n"
               "        const real *s = SV + i * K;\n"
               "        real *y = Y + i * C;\n"
               "        %s y[c] = x[c];\n",
               k->d->row.cols);
    if (k->d->row.sync) str_puts(k->s, k->d->row.sync);
    str_printf(k->s,
               "        %sfor (int64_t j = 0; j < K; j++) {\n"
               "            const int32_t q = p[j];\n"
               "            if (q >= 0 && q < C) y[q] = %s;\n"
               "        }\n"
               "    }\n",
               k->d->row.leader, n->attr.scalars.p[0] != 0 ? "s[j]" : "y[q] + s[j]");
}

static void row_softmax_fwd(const Kernel *k, const Launch *L) { row_softmax(k, L, false); }
static void row_log_softmax(const Kernel *k, const Launch *L) { row_softmax(k, L, true); }
static void row_softmax_bwd(const Kernel *k, const Launch *L) { row_softmax_grad(k, L, false); }
static void row_log_softmax_bwd(const Kernel *k, const Launch *L) { row_softmax_grad(k, L, true); }
/* A layer-norm row's mean mu and deviation sd = sqrt(var + eps), as the composed ops compute them
 * (mean then the mean of squared differences, each summed in double and rounded to real; eps and
 * the square root in real); the CPU's sums run in lanes (row_sums), so they may differ from the
 * composed path's in the last bits of the double sums.  From x[c], or (r.lanes > 1) from the row
 * in registers, xr[j][q]. */
static void row_ln_stats(const Kernel *k, const Node *n, RowRegs r) {
    char eps[RENDER_NUM_LEN];
    const bool regs = r.lanes > 1;
    const char *s[] = {"s"}, *xc[] = {regs ? "xr[j][q]" : "x[c]"}, *v[] = {"v"}, *dd[] = {"d * d"};
    const char *pre = regs ? "const real d = xr[j][q] - mu;" : "const real d = x[c] - mu;";
    if (regs) reg_sums(k, r, 1, s, NULL, xc);
    else row_sums(k, 1, s, NULL, xc);
    str_puts(k->s, "        const real mu = (real)(s * (1.0 / (double)C));\n");
    if (regs) reg_sums(k, r, 1, v, pre, dd);
    else row_sums(k, 1, v, pre, dd);
    str_printf(k->s, "        const real sd = SQRT((real)(v * (1.0 / (double)C)) + (real)%s);\n",
               render_num(eps, n->attr.scalars.p[0]));
}

/* layer_norm's rows: y = (x - mu) / sd.  Each owner reads and writes only its own columns, so
 * y may be x's buffer. */
static void row_ln_norm(const Kernel *k, const Launch *L) {
    const Node *n = &k->g->nodes[L->root];
    const RowRegs r = row_regs(k, n->in[0]);
    row_header(k, n->in[0]);
    kernel_ptr_line(k, "const real *X", n->in[0]);
    kernel_ptr_line(k, "real *Y", L->root);
    k->d->row.open(k, L);
    str_puts(k->s,
             "        const real *x = X + i * C;\n"
             "        real *y = Y + i * C;\n");
    if (r.lanes > 1) {
        const RegArray a[] = {{"xr", "x", NULL, DT_F32}};
        reg_loads(k, r, 1, a);
        row_ln_stats(k, n, r);
        reg_store(k, r, "y", "(xr[j][q] - mu) / sd");
        str_puts(k->s, "    }\n");
        return;
    }
    row_ln_stats(k, n, r);
    str_printf(k->s, "        %s y[c] = (x[c] - mu) / sd;\n    }\n", k->d->row.cols);
}

/* Its gradient from dy and x: dx = (dy - mean(dy) - xhat mean(dy xhat)) / sd, xhat = (x - mu) / sd
 * recomputed; dx may be dy's, x's or r's buffer (own columns only, as above).  With w (fold_rows.c)
 * the row's dy is dy * w, the affine's gradient, and with r, dx + r is written: the products and
 * the sum the two kernels around it computed, in the same order.  In registers, dy (times w), x
 * and r are read together, before the first sum. */
static void row_ln_grad(const Kernel *k, const Launch *L) {
    const Node *n = &k->g->nodes[L->root];
    const bool w = n->attr.scalars.p[1] != 0, r = n->attr.scalars.p[2] != 0;
    const DType dt = k->g->nodes[n->in[0]].dtype; /* dy may be half (fold_rows.c), x is real */
    const RowRegs rg = row_regs(k, n->in[1]);
    const bool regs = rg.lanes > 1;
    char decl[64], dyl[48];
    row_header(k, n->in[1]);
    snprintf(decl, sizeof decl, "const %s *DY", kernel_type(k, n->in[0]));
    kernel_ptr_line(k, decl, n->in[0]);
    kernel_ptr_line(k, "const real *Xv", n->in[1]);
    if (w) kernel_ptr_line(k, "const real *Wv", n->in[2]);
    if (r) kernel_ptr_line(k, "const real *Rv", n->in[2 + w]);
    /* its cast to half, a second output (passes/fuse.c), and whether dx itself is stored */
    int hc = -1;
    bool out = false;
    for (int m = 0; m < L->nnodes; m++)
        if (k->g->nodes[L->nodes[m]].op == OP_CAST) hc = L->nodes[m];
    for (int m = 0; m < L->nouts; m++) out |= L->outs[m] == L->root;
    if (out) kernel_ptr_line(k, "real *DX", L->root);
    if (hc >= 0) kernel_ptr_line(k, "unsigned short *HC", hc);
    k->d->row.open(k, L);
    str_printf(k->s,
               "        const %s *dy = DY + i * C;\n"
               "        const real *x = Xv + i * C%s;\n",
               kernel_type(k, n->in[0]), r ? ", *rr = Rv + i * C" : "");
    if (out) str_puts(k->s, "        real *dx = DX + i * C;\n");
    if (hc >= 0) str_puts(k->s, "        unsigned short *hc = HC + i * C;\n");
    if (regs) {
        const RegArray a[] = {{"dr", "dy", w ? "Wv" : NULL, dt}, {"xr", "x", NULL, DT_F32}, {"rs", "rr", NULL, DT_F32}};
        reg_loads(k, rg, r ? 3 : 2, a);
    }
    row_ln_stats(k, n, rg);
    if (DTYPE_IS_HALF(dt)) snprintf(dyl, sizeof dyl, w ? "(%s(dy[c]) * Wv[c])" : "%s(dy[c])", half_fn(dt, false));
    else snprintf(dyl, sizeof dyl, w ? "(dy[c] * Wv[c])" : "dy[c]");
    const char *dyc = regs ? "dr[j][q]" : dyl, *xc = regs ? "xr[j][q]" : "x[c]";
    char gx[96], dx[160];
    snprintf(gx, sizeof gx, "(double)%s * ((%s - mu) / sd)", dyc, xc);
    const char *acc[] = {"g", "gx"}, *term[] = {dyc, gx};
    if (regs) reg_sums(k, rg, 2, acc, NULL, term);
    else row_sums(k, 2, acc, NULL, term);
    str_puts(k->s, "        const real mg = (real)(g * (1.0 / (double)C)), mgx = (real)(gx * (1.0 / (double)C));\n");
    snprintf(dx, sizeof dx, "%s(%s - mg - (%s - mu) / sd * mgx) / sd", r ? (regs ? "rs[j][q] + " : "rr[c] + ") : "",
             dyc, xc);
    const DType ht = hc >= 0 ? k->g->nodes[hc].dtype : DT_F32;
    if (regs) {
        reg_store2(k, rg, out ? "dx" : NULL, dx, hc >= 0 ? "hc" : NULL, ht);
        str_puts(k->s, "    }\n");
        return;
    }
    str_printf(k->s, "        %s {\n            const real o_ = %s;\n", k->d->row.cols, dx);
    if (out) str_puts(k->s, "            dx[c] = o_;\n");
    if (hc >= 0) str_printf(k->s, "            hc[c] = %s((float)o_);\n", half_fn(ht, true));
    str_puts(k->s, "        }\n    }\n");
}

static void row_cross_entropy(const Kernel *k, const Launch *L) { row_ce(k, L, L->root, L->root2); }
static void row_cross_entropy_bwd(const Kernel *k, const Launch *L) { row_ce(k, L, -1, L->root); }

/* The kernel of each row-wise op (ops.def kind OK_ROW); a new row op adds its line. */
static const struct {
    Op op;
    void (*render)(const Kernel *k, const Launch *L);
} row_kernels[] = {
    {OP_SOFTMAX, row_softmax_fwd},
    {OP_LOG_SOFTMAX, row_log_softmax},
    {OP_SOFTMAX_GRAD, row_softmax_bwd},
    {OP_LSM_GRAD, row_log_softmax_bwd},
    {OP_CROSS_ENTROPY, row_cross_entropy},
    {OP_CE_GRAD, row_cross_entropy_bwd},
    {OP_ACCURACY, row_accuracy},
    {OP_ARGMAX, row_argmax},
    {OP_CUMSUM, row_cumsum},
    {OP_TOPK, row_topk},
    {OP_GATHER_ROWS, row_gather},
    {OP_SCATTER_ROWS, row_scatter},
    {OP_LN_NORM, row_ln_norm},
    {OP_LN_GRAD, row_ln_grad},
};

/* A row kernel's x loads and g stores: XL(c) is x[c] as real and GS(v) v as G's type stores it,
 * widened and rounded where cross_entropy reads half logits and writes a half gradient (fold_rows.c:
 * autocast's casts around it taken in); #undef'd after the kernel. */
static void row_macros(const Kernel *k, const Launch *L) {
    const Node *r = &k->g->nodes[L->root];
    const DType xt = k->g->nodes[r->in[0]].dtype;
    DType gt = DT_F32;
    for (int i = 0; i < L->nnodes; i++)
        if (k->g->nodes[L->nodes[i]].op == OP_CE_GRAD) gt = k->g->nodes[L->nodes[i]].dtype;
    if (DTYPE_IS_HALF(xt)) str_printf(k->s, "#define XL(c) %s(x[c])\n", half_fn(xt, false));
    else str_puts(k->s, "#define XL(c) (x[c])\n");
    if (DTYPE_IS_HALF(gt)) str_printf(k->s, "#define GS(v) %s((float)(v))\n", half_fn(gt, true));
    else str_puts(k->s, "#define GS(v) (v)\n");
}

static void kernel_row(const Kernel *k, const Launch *L) {
    row_macros(k, L);
    for (size_t i = 0; i < NNC_COUNTOF(row_kernels); i++)
        if (row_kernels[i].op == k->g->nodes[L->root].op) {
            row_kernels[i].render(k, L);
            return;
        }
    nnc_fatal("internal error: no row kernel for %s", op_info[k->g->nodes[L->root].op].name);
}

/* ---- the kernel ----------------------------------------------------------------------------- */

/* The kernel's head comment: what it computes and the .nn lines it came from. */
static void kernel_comment(const Kernel *k, const Launch *L, int index) {
    str_printf(k->s, "\n/* %s launch %d: %s", k->e->name, index, launch_kind_label(L->kind));
    char nb[48];
    for (int i = 0; i < L->nnodes; i++) str_printf(k->s, "%s%s", i ? ", " : " (", node_op_name(&k->g->nodes[L->nodes[i]], nb));
    str_puts(k->s, ")\n");
    render_source_lines(k->s, k->p, L, " *   ");
    str_puts(k->s, " */\n");
}

/* GEMMs, copies and assignments reach only a dialect that renders them (the CUDA backend
 * issues them as library calls and never asks for their kernel). */
void kernel_render(const Kernel *k, const Launch *L, int index) {
    const Node *root = &k->g->nodes[L->root];
    assert(L->kind == L_EW || L->kind == L_REDUCE || L->kind == L_ROW || L->kind == L_ATTENTION ||
           (k->d->gemm && k->d->copy && k->d->helper && k->d->collective));
    kernel_comment(k, L, index);
    k->d->open(k, L, index);
    switch (L->kind) {
    case L_EW: kernel_ew(k, L); break;
    case L_REDUCE: kernel_reduce(k, L); break;
    case L_ROW: kernel_row(k, L); break;
    case L_GEMM: k->d->gemm(k, L); break;
    case L_COPY: k->d->copy(k, L->root, root->in[0]); break;
    case L_ASSIGN: k->d->copy(k, root->in[0], root->in[1]); break;
    case L_HELPER: k->d->helper(k, L); break;
    case L_COLLECTIVE: k->d->collective(k, L); break;
    case L_ATTENTION: k->d->attention(k, L); break;
    }
    str_puts(k->s, L->kind == L_ROW ? "}\n#undef XL\n#undef GS\n" : "}\n");
}
