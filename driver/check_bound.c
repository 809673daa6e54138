/* check_bound.c - the tolerance --check-against gives each value: what two correct targets can
 * differ by, from the numerics of the op that computed it.
 *
 * The checker (check.c) runs every launch of the reference from the checked target's inputs to
 * that launch, so a difference never comes from an earlier one: only from how each target
 * rounds this op.  Each kind of op gets the bound its arithmetic allows; both targets are held
 * to it, so the tolerance is the sum of the two (LaunchNumerics: how each target's code for
 * the launch rounds).  u is the unit roundoff of `real` (2^-24), d that of double (2^-53),
 * gamma_k(w) = k w / (1 - k w) (Higham, "Accuracy and Stability of Numerical Algorithms", 3.1):
 *   - exact ops (copies, max, pooling's max, slices, embedding lookups, dropout masks, accuracy,
 *     and any elementwise op whose exact result is representable): 0, the same bits;
 *   - an elementwise op: its ops.def expression evaluated with a running error bound
 *     (check_expr.c), so cancellation and conditioning are judged at the inputs both had;
 *   - a sum (reduction, matrix product, convolution, pooling's average, scatter-adds) of k
 *     terms t_i: gamma_k(w) sum |t_i| per target, w its accumulator's unit roundoff, plus the
 *     result's rounding.  sum |t_i| is what the reference's own launch gives when run again on
 *     the absolute values of its inputs (a product of |A| and |B|, a sum of |x|), so every op
 *     multilinear in its inputs gets its exact condition without code of its own here;
 *   - the row-wise ops (softmax and its family, cross-entropy): their kernel's arithmetic
 *     (kernel.c: exp of x - max, double sums) bounded term by term below.
 * A value whose bound is infinite (a division by a number within its own error of zero) cannot
 * be judged and passes. */
#include "check_bound.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../codegen/attention.h"
#include "../io/half.h"
#include "check_expr.h"

#define D_UNIT 0x1p-53
#define EXP_ULPS 2 /* expf in both math libraries (check_expr.c's table) */

double check_elem(const Graph *g, int x, const void *mem, int64_t i, int real_bytes) {
    switch (g->nodes[x].dtype) {
    case DT_I32: return ((const int32_t *)mem)[i];
    case DT_BF16: return nnc_bf16_to_f32(((const uint16_t *)mem)[i]);
    case DT_F16: return nnc_f16_to_f32(((const uint16_t *)mem)[i]);
    case DT_F32: break;
    }
    return real_bytes == 8 ? ((const double *)mem)[i] : ((const float *)mem)[i];
}

static double unit_of(const CheckLaunch *c) { return c->real_bytes == 8 ? D_UNIT : 0x1p-24; }

/* Half the least subnormal of a node's format: the absolute rounding error near zero. */
static double tiny_of(const CheckLaunch *c, int x) {
    DType t = c->p->g->nodes[x].dtype;
    return t == DT_F16 ? 0x1p-25 : t == DT_BF16 ? 0x1p-134 : c->real_bytes == 8 ? 0x1p-1074 : 0x1p-150;
}

/* The unit roundoff a value is stored with. */
static double store_unit(const CheckLaunch *c, int x) {
    DType t = c->p->g->nodes[x].dtype;
    return t == DT_F16 ? 0x1p-11 : t == DT_BF16 ? 0x1p-8 : unit_of(c);
}

static double gamma_k(double k, double w) { return k * w < 0.5 ? k * w / (1 - k * w) : INFINITY; }

static int64_t dim_at(int64_t d, int64_t B) { return dim_size(d, B); }

static int64_t numel_at(Shape s, int64_t B) {
    int64_t n = 1;
    for (int i = 0; i < s.rank; i++) n *= dim_at(s.d[i], B);
    return n;
}

static void tol_fill(CheckTol *t, double v) {
    for (int64_t i = 0; i < t->n; i++) t->tol[i] = v;
}

static const Node *node_of(const CheckLaunch *c, int x) { return &c->p->g->nodes[x]; }

static double ref_at(const CheckLaunch *c, int out, int64_t i) {
    return check_elem(c->p->g, out, c->mem(c->ctx, out), i, c->real_bytes);
}

/* ---- elementwise: the expression's running error bound ------------------------------------- */

/* An inline scalar as the kernels compute it (codegen/expr.c's render_inline_value). */
static Approx inline_value(const CheckLaunch *c, int x) {
    const Node *n = node_of(c, x);
    bool f = c->real_bytes == 4;
    double u = unit_of(c);
    if (n->op == OP_CONST) {
        double v = n->attr.cnst.value, b = (double)c->B;
        if (f) {
            float fv = (float)v, fb = (float)b;
            return (Approx){n->attr.cnst.batch_power == -1 ? fv / fb : n->attr.cnst.batch_power == 1 ? fv * fb : fv, 0};
        }
        return (Approx){n->attr.cnst.batch_power == -1 ? v / b : n->attr.cnst.batch_power == 1 ? v * b : v, 0};
    }
    double t = (double)c->step, base = n->attr.step.base;
    switch (n->attr.step.fn) {
    case STEP_T: return (Approx){f ? (double)(float)t : t, 0};
    case STEP_FIRST_ONE: return (Approx){c->step == 1 ? 1 : f ? (double)(float)base : base, 0};
    case STEP_ACCUMULATED: return (Approx){c->micro > 0 ? 1 : 0, 0};
    case STEP_ONE_MINUS_POW: { /* pow in double may differ by an ulp between libraries */
        double v = 1.0 - pow(base, t);
        return (Approx){f ? (double)(float)v : v, 2 * u * fabs(v)};
    }
    }
    return (Approx){0, INFINITY};
}

/* Element offsets of operand x at the flat index of a point of `space` (broadcast, right-aligned). */
typedef struct {
    const void *mem;
    int x;
    bool flat, scalar;
    int64_t stride[IR_MAX_RANK];
    Approx fixed; /* an inline scalar */
} Operand;

static void operand_init(const CheckLaunch *c, Operand *o, int x, Shape sp) {
    const Node *n = node_of(c, x);
    memset(o, 0, sizeof *o);
    o->x = x;
    if (node_is_inline(n)) {
        o->fixed = inline_value(c, x);
        o->scalar = true;
        o->mem = NULL;
        return;
    }
    o->mem = c->mem(c->ctx, x);
    Shape xs = n->shape;
    o->flat = shape_eq(xs, sp);
    for (int l = 0; l < sp.rank; l++) {
        int a = l - (sp.rank - xs.rank);
        int64_t st = 0;
        if (a >= 0 && dim_at(xs.d[a], c->B) != 1) {
            st = 1;
            for (int j = a + 1; j < xs.rank; j++) st *= dim_at(xs.d[j], c->B);
        }
        o->stride[l] = st;
    }
}

static Approx operand_at(const CheckLaunch *c, const Operand *o, Shape sp, int64_t i) {
    if (!o->mem) return o->fixed;
    int64_t off = 0;
    if (o->flat) off = i;
    else
        for (int l = sp.rank - 1; l >= 0; l--) {
            int64_t d = dim_at(sp.d[l], c->B);
            off += (i % d) * o->stride[l];
            i /= d;
        }
    return (Approx){check_elem(c->p->g, o->x, o->mem, off, c->real_bytes), 0};
}

int check_ew_inputs(const CheckLaunch *c, int out, int64_t i, double *vals) {
    const Node *n = node_of(c, out);
    if (c->L->kind != L_EW || op_permutes(n->op)) return 0;
    for (int k = 0; k < n->nin; k++) {
        Operand o;
        operand_init(c, &o, n->in[k], n->shape);
        vals[k] = operand_at(c, &o, n->shape, i).v;
    }
    return n->nin;
}

static void tol_ew(const CheckLaunch *c, int out, CheckTol *t) {
    const Node *n = node_of(c, out);
    char nb[48], err[160];
    if (op_has(n->op, OPF_MOVES)) {
        tol_fill(t, 0);
        snprintf(t->why, sizeof t->why, "%s moves values: the same bits", node_op_name(n, nb));
        return;
    }
    CheckExpr x;
    if (!check_expr_build(&x, c->p->g, out, err, sizeof err))
        nnc_fatal("internal error: --check-against cannot read %s's expression: %s", node_op_name(n, nb), err);
    Operand ops[NNC_MAX_IN];
    Approx vals[NNC_MAX_IN + 2];
    for (int k = 0; k < n->nin; k++) operand_init(c, &ops[k], n->in[k], n->shape);
    double u = unit_of(c), uh = store_unit(c, out), tiny = tiny_of(c, out);
    const Shape *s = &n->shape; /* an OPF_INDEX op's row and column at i follow its operands */
    int64_t cols = s->rank ? dim_at(s->d[s->rank - 1], c->B) : 1,
            rows = s->rank > 1 ? dim_at(s->d[s->rank - 2], c->B) : 1;
    for (int64_t i = 0; i < t->n; i++) {
        if (t->need && !t->need[i]) continue;
        for (int k = 0; k < n->nin; k++) vals[k] = operand_at(c, &ops[k], n->shape, i);
        vals[n->nin] = (Approx){(double)(i / cols % rows), 0};
        vals[n->nin + 1] = (Approx){(double)(i % cols), 0};
        Approx a = check_expr_eval(&x, vals, u);
        double e = a.e;
        if (uh != u && e != 0) e += uh * (fabs(a.v) + e) + tiny; /* then rounded to its half format */
        t->tol[i] = 2 * e;
    }
    check_expr_free(&x);
    snprintf(t->why, sizeof t->why,
             "twice the rounding-error bound of %s's expression at these inputs: each "
             "rounding (u |z|, u = 2^%d) carried through, math functions within their documented ulps",
             node_op_name(n, nb), c->real_bytes == 8 ? -53 : -24);
}

/* ---- sums: gamma_k per target times sum |terms| --------------------------------------------- */

/* The crude sum |terms| when the launch cannot run again: k times the largest term. */
static double crude_scale(const CheckLaunch *c, int keep, double k) {
    double s = k;
    const Launch *L = c->L;
    int reads[2] = {L->kind == L_GEMM ? L->a
                        : L->nins > 0 ? L->ins[0]
                                      : -1,
                    L->kind == L_GEMM ? L->b
                        : L->nins > 1 ? L->ins[1]
                                      : -1};
    for (int r = 0; r < 2; r++) {
        int x = reads[r];
        if (x < 0 || x == keep || node_of(c, x)->dtype == DT_I32) continue;
        const void *m = c->mem(c->ctx, x);
        double mx = 0;
        int64_t n = numel_at(node_of(c, x)->shape, c->B);
        for (int64_t i = 0; m && i < n; i++) mx = fmax(mx, fabs(check_elem(c->p->g, x, m, i, c->real_bytes)));
        s *= mx;
    }
    return s;
}

/* "2^-24" for a unit roundoff. */
static const char *unit_text(double u, char buf[24]) {
    int ex;
    double m = frexp(u, &ex);
    if (m == 0.5) snprintf(buf, 24, "2^%d", ex - 1);
    else snprintf(buf, 24, "%.3g", u);
    return buf;
}

/* A sum of k terms, what each target's accumulator and inputs allow, plus the result's
 * rounding to its format; S (sum |terms|, from the reference) inflated by its own rounding. */
static void tol_sum(const CheckLaunch *c, int out, CheckTol *t, double k, int keep, const char *what) {
    t->scale = xmalloc((size_t)(t->n + 1) * sizeof *t->scale);
    bool rerun = c->rerun_abs(c->ctx, out, keep, t->scale);
    if (!rerun) {
        double s = crude_scale(c, keep, k);
        for (int64_t i = 0; i < t->n; i++) t->scale[i] = s;
    }
    double g[2], uo = store_unit(c, out), tiny = tiny_of(c, out);
    for (int s = 0; s < 2; s++)
        g[s] = gamma_k(k, c->num[s].sum_unit) + 2 * c->num[s].input_unit + c->num[s].input_unit * c->num[s].input_unit;
    double inflate = (1 + uo) / (1 - fmin(0.5, gamma_k(k, c->num[1].sum_unit)));
    for (int64_t i = 0; i < t->n; i++) {
        double S = fabs(t->scale[i]) * inflate, r = fabs(ref_at(c, out, i)), tol = 0;
        for (int s = 0; s < 2; s++) tol += g[s] * S + uo * (r + g[s] * S) + tiny + D_UNIT * (r + S);
        t->tol[i] = isnan(tol) ? INFINITY : tol;
    }
    char u0[24], u1[24];
    snprintf(t->why, sizeof t->why,
             "%s, each a sum of %.0f terms: on each target within gamma_%.0f = %.0f u / "
             "(1 - %.0f u) of sum |terms| (u = %s on cuda, %s on cpu%s), plus the rounding of the result; "
             "sum |terms|%s",
             what, k, k, k, k, unit_text(c->num[0].sum_unit, u0), unit_text(c->num[1].sum_unit, u1),
             c->num[0].input_unit ? ", its inputs rounded to TF32" : "", rerun ? "" : " <= terms x the largest inputs");
}

static void tol_reduce(const CheckLaunch *c, int out, CheckTol *t) {
    const Node *n = node_of(c, out);
    if (n->op == OP_MAX) {
        tol_fill(t, 0);
        snprintf(t->why, sizeof t->why, "a maximum is exact: the same bits");
        return;
    }
    int64_t nin = numel_at(c->L->space, c->B), nout = numel_at(n->shape, c->B);
    tol_sum(c, out, t, (double)(nout ? nin / nout : nin), -1, "a reduction");
}

static void tol_gemm(const CheckLaunch *c, int out, CheckTol *t) {
    GemmGeom q = gemm_geom(c->p->g, c->L);
    double k = (double)dim_at(q.k, c->B) * (double)(q.sum ? gemm_count(&q, c->B) : 1);
    tol_sum(c, out, t, k, -1, "a matrix product");
}

/* Convolution, pooling and embedding helpers: each output a sum of `k` terms (a GEMM's inner
 * extent, plus col2im's windows), or an exact copy. */
static void tol_helper(const CheckLaunch *c, int out, CheckTol *t) {
    const Node *n = node_of(c, out);
    const Graph *g = c->p->g;
    SpatialGeom q = {0};
    if (op_info[n->op].attr == ATTR_WINDOW) q = spatial_geom(g, n);
    double win = (double)q.KH * (double)q.KW, G = q.G > 0 ? (double)q.G : 1;
    Op op = n->op;
    if (op == OP_CONV2D) tol_sum(c, out, t, (double)q.C / G * win, -1, "a convolution");
    else if (op == OP_CONV2D_DX) tol_sum(c, out, t, (double)q.OC / G + win, -1, "a convolution's input gradient");
    else if (op == OP_CONV2D_DW)
        tol_sum(c, out, t, (double)dim_at(q.N, c->B) * (double)q.OH * (double)q.OW, -1,
                "a convolution's weight gradient");
    else if (op == OP_AVG_POOL2D || op == OP_AVG_POOL2D_GRAD)
        tol_sum(c, out, t, win + 1, -1, "an average over a window");
    else if (op == OP_MAX_POOL2D_GRAD) tol_sum(c, out, t, win, n->in[1], "max pooling's gradient");
    else if (op == OP_EMBEDDING_GRAD)
        tol_sum(c, out, t, (double)numel_at(g->nodes[n->in[1]].shape, c->B), -1, "an embedding's gradient");
    else if (op == OP_RANDOM && n->attr.scalars.p[0] != 0) { /* randn: a double log, sqrt and cos, rounded */
        double u = unit_of(c), tiny = 16 * tiny_of(c, out);
        for (int64_t i = 0; i < t->n; i++) t->tol[i] = 4 * u * fabs(ref_at(c, out, i)) + tiny;
        snprintf(t->why, sizeof t->why, "randn: Box-Muller in double (libm's or CUDA's), rounded once: 4 ulps");
    } else { /* max pooling, concat, slices, embedding lookups, dropout masks, rand */
        tol_fill(t, 0);
        snprintf(t->why, sizeof t->why, "%s moves or draws values: the same bits", op_info[op].name);
    }
}

/* ---- row-wise ops ------------------------------------------------------------------------------
 * kernel.c's arithmetic per row of C columns: mx the maximum, t_c = x_c - mx (the same bits on
 * both targets), E_c = EXP(t_c) within re = 2 EXP_ULPS u of exp(t_c), s = the double sum of
 * E_c within (re + C d) s (terms positive).  Per target, then doubled. */

typedef struct {
    const void *x; /* the row-wise op's first input */
    int xn;
    int64_t C, rows;
    double u, re;
} Rows;

static Rows rows_of(const CheckLaunch *c, int x) {
    Shape s = node_of(c, x)->shape;
    Rows R = {c->mem(c->ctx, x), x, s.rank ? dim_at(s.d[s.rank - 1], c->B) : 1, 0, unit_of(c), 0};
    R.rows = R.C ? numel_at(s, c->B) / R.C : 0;
    R.re = 2 * EXP_ULPS * R.u;
    return R;
}

static double row_x(const CheckLaunch *c, const Rows *R, int64_t i, int64_t col) {
    return check_elem(c->p->g, R->xn, R->x, i * R->C + col, c->real_bytes);
}

/* The row's maximum and the exact-ish sum of exp(x - max), as the kernels take them. */
static void row_max_sum(const CheckLaunch *c, const Rows *R, int64_t i, double *mx, double *s) {
    double m = -INFINITY, sum = 0;
    for (int64_t col = 0; col < R->C; col++) {
        double v = row_x(c, R, i, col);
        if (v > m || v != v) m = v;
    }
    for (int64_t col = 0; col < R->C; col++) {
        double tc = R->u > 0x1p-30 ? (double)((float)row_x(c, R, i, col) - (float)m) : row_x(c, R, i, col) - m;
        sum += exp(tc);
    }
    *mx = m;
    *s = sum;
}

static void tol_softmax(const CheckLaunch *c, int out, CheckTol *t, bool is_log) {
    Rows R = rows_of(c, node_of(c, out)->in[0]);
    double rs = (R.re + (double)R.C * D_UNIT) * 1.01, tiny = 16 * tiny_of(c, out);
    for (int64_t i = 0; i < t->n; i++) {
        double y = fabs(ref_at(c, out, i));
        double e = is_log ? rs + (R.u + D_UNIT) * log((double)R.C + 1) + R.u * y
                          : y * (2 * R.re + (double)R.C * D_UNIT + 2 * R.u + D_UNIT) * 1.01;
        t->tol[i] = 2 * (e + tiny);
    }
    snprintf(t->why, sizeof t->why,
             "%s: exp within %d ulps, its row sum in double, then the %s: u per rounding, "
             "twice",
             is_log ? "log_softmax" : "softmax", EXP_ULPS, is_log ? "log of the sum and a subtraction" : "division");
}

/* softmax_grad: dx = y (dy - s), s = sum dy y in double; log_softmax_grad: dx = dy - EXP(y) s,
 * s = sum dy. */
static void tol_softmax_grad(const CheckLaunch *c, int out, CheckTol *t, bool is_log) {
    const Node *n = node_of(c, out);
    Rows R = rows_of(c, n->in[0]);
    const void *yv = c->mem(c->ctx, n->in[1]);
    double u = R.u, tiny = 16 * tiny_of(c, out);
    for (int64_t i = 0; i < R.rows; i++) {
        double s = 0, a = 0;
        for (int64_t col = 0; col < R.C; col++) {
            double dy = row_x(c, &R, i, col), y = check_elem(c->p->g, n->in[1], yv, i * R.C + col, c->real_bytes);
            s += is_log ? dy : dy * y;
            a += fabs(is_log ? dy : dy * y);
        }
        double es = (double)(R.C + 1) * D_UNIT * a + u * fabs(s) * 1.01; /* s as the kernels have it, in real */
        for (int64_t col = 0; col < R.C; col++) {
            int64_t at = i * R.C + col;
            double dy = row_x(c, &R, i, col), y = check_elem(c->p->g, n->in[1], yv, at, c->real_bytes);
            double dx = fabs(ref_at(c, out, at)), e;
            if (is_log) {
                double ey = exp(y);
                e = ey * (R.re * fabs(s) + es) * 1.01 + u * ey * fabs(s) + u * dx;
            } else {
                double ed = es + u * (fabs(dy - s) + es);
                e = fabs(y) * ed + u * (dx + fabs(y) * ed);
            }
            t->tol[at] = 2 * (e + tiny);
        }
    }
    snprintf(t->why, sizeof t->why, "%s: its row sum in double, u per rounding%s, twice",
             is_log ? "log_softmax_grad" : "softmax_grad", is_log ? ", exp within 2 ulps" : "");
}

/* ---- layer norm's rows (kernel.c's row_ln_*) --------------------------------------------------
 * Per row of C from x (exact here, in double): mu = the mean, d_c = x_c - mu, var = mean(d_c^2),
 * sd = sqrt(var + eps).  The kernels sum in double (any order: within (C + 1) D_UNIT of the sum
 * of magnitudes) and round each of mu, d_c, d_c^2, var, var + eps, sd, the quotient and the
 * gradient's terms to real (u each), so, to first order:
 *   e_mu = u |mu| + (C + 1) D_UNIT mean|x|,  e_d = e_mu + u (|d| + e_mu),
 *   e_var = mean(2 |d| e_d + e_d^2 + u (|d| + e_d)^2) + (C + 1) D_UNIT var + u var,
 *   e_sd = (e_var + u (var + eps)) / (2 sd) + u sd,
 * y = d / sd within (e_d + |y| e_sd) / sd + u |y|; the gradient's xhat likewise, its two row
 * means within u of theirs plus the sums' and xhat's errors, and dx = t / sd with t's three
 * roundings.  Both targets err so: twice, with 1% for the second-order terms. */
typedef struct {
    double mu, var, sd, emu, esd;
} LnRow;

static LnRow ln_row(const CheckLaunch *c, int xn, const void *xv, int64_t i, int64_t C, double eps) {
    double u = unit_of(c), s = 0, sa = 0, v = 0, ev = 0;
    for (int64_t col = 0; col < C; col++) {
        double x = check_elem(c->p->g, xn, xv, i * C + col, c->real_bytes);
        s += x;
        sa += fabs(x);
    }
    LnRow r = {.mu = s / (double)C};
    r.emu = u * fabs(r.mu) + (double)(C + 1) * D_UNIT * sa / (double)C;
    for (int64_t col = 0; col < C; col++) {
        double d = check_elem(c->p->g, xn, xv, i * C + col, c->real_bytes) - r.mu, ad = fabs(d);
        double ed = r.emu + u * (ad + r.emu);
        v += d * d;
        ev += 2 * ad * ed + ed * ed + u * (ad + ed) * (ad + ed);
    }
    r.var = v / (double)C;
    ev = ev / (double)C + (double)(C + 1) * D_UNIT * r.var + u * r.var;
    r.sd = sqrt(r.var + eps);
    r.esd = (ev + u * (r.var + eps)) / (2 * r.sd) + u * r.sd;
    return r;
}

static void tol_layer_norm(const CheckLaunch *c, int out, CheckTol *t) {
    const Node *n = node_of(c, out);
    Rows R = rows_of(c, n->in[0]);
    double u = R.u, tiny = 16 * tiny_of(c, out), eps = n->attr.scalars.p[0];
    for (int64_t i = 0; i < R.rows; i++) {
        LnRow r = ln_row(c, n->in[0], R.x, i, R.C, eps);
        for (int64_t col = 0; col < R.C; col++) {
            double d = row_x(c, &R, i, col) - r.mu, y = fabs(d) / r.sd;
            double ed = r.emu + u * (fabs(d) + r.emu);
            t->tol[i * R.C + col] = 2 * (((ed + y * r.esd) / r.sd + u * y) * 1.01 + tiny);
        }
    }
    snprintf(t->why, sizeof t->why,
             "layer_norm_rows: the row's mean and variance summed in double, u per "
             "rounding to real (mean, difference, square, variance, sqrt, quotient), twice");
}

static void tol_layer_norm_grad(const CheckLaunch *c, int out, CheckTol *t) {
    const Node *n = node_of(c, out);
    Rows R = rows_of(c, n->in[0]); /* dy */
    const void *xv = c->mem(c->ctx, n->in[1]);
    double u = R.u, tiny = 16 * tiny_of(c, out), eps = n->attr.scalars.p[0];
    for (int64_t i = 0; i < R.rows; i++) {
        LnRow r = ln_row(c, n->in[1], xv, i, R.C, eps);
        double g = 0, ga = 0, gx = 0, gxa = 0, egx = 0;
        for (int64_t col = 0; col < R.C; col++) {
            double dy = row_x(c, &R, i, col),
                   d = check_elem(c->p->g, n->in[1], xv, i * R.C + col, c->real_bytes) - r.mu;
            double xh = d / r.sd, exh = (r.emu + u * (fabs(d) + r.emu) + fabs(xh) * r.esd) / r.sd + u * fabs(xh);
            g += dy, ga += fabs(dy), gx += dy * xh, gxa += fabs(dy * xh), egx += fabs(dy) * exh;
        }
        double mg = g / (double)R.C, mgx = gx / (double)R.C;
        double emg = u * fabs(mg) + (double)(R.C + 1) * D_UNIT * ga / (double)R.C;
        double emgx =
            egx / (double)R.C + (double)(R.C + 1) * D_UNIT * gxa / (double)R.C + u * (fabs(mgx) + egx / (double)R.C);
        for (int64_t col = 0; col < R.C; col++) {
            double dy = row_x(c, &R, i, col),
                   d = check_elem(c->p->g, n->in[1], xv, i * R.C + col, c->real_bytes) - r.mu;
            double xh = d / r.sd, exh = (r.emu + u * (fabs(d) + r.emu) + fabs(xh) * r.esd) / r.sd + u * fabs(xh);
            double tt = fabs(dy - mg - xh * mgx), dx = tt / r.sd;
            double et = emg + exh * fabs(mgx) + fabs(xh) * emgx + 3 * u * (fabs(dy) + fabs(mg) + fabs(xh * mgx) + tt);
            t->tol[i * R.C + col] = 2 * (((et + dx * r.esd) / r.sd + u * dx) * 1.01 + tiny);
        }
    }
    snprintf(t->why, sizeof t->why,
             "layer_norm_rows_grad: the row's statistics as layer_norm_rows, its two sums in "
             "double, u per rounding to real, twice");
}

/* dl, the gradient flowing into the loss (cross_entropy_grad's third operand). */
static double dloss(const CheckLaunch *c, int x) {
    if (node_is_inline(node_of(c, x))) return inline_value(c, x).v;
    return check_elem(c->p->g, x, c->mem(c->ctx, x), 0, c->real_bytes);
}

static int32_t label_at(const CheckLaunch *c, int x, int64_t i) { return ((const int32_t *)c->mem(c->ctx, x))[i]; }

/* A cross-entropy node's ignore_index and label smoothing, and the rows it keeps. */
typedef struct {
    int32_t ignore;
    double eps, kept;
} CeRule;

static CeRule ce_rule(const CheckLaunch *c, const Node *n, const Rows *R) {
    CeRule r = {(int32_t)n->attr.scalars.p[0], n->attr.scalars.p[1], 0};
    for (int64_t i = 0; i < R->rows; i++) r.kept += label_at(c, n->in[1], i) != r.ignore;
    return r;
}

/* cross_entropy: the mean over the kept rows of mx + log(s) - (1 - eps) x_label - eps sum(x) / C,
 * the row sums and the total in double. */
static void tol_cross_entropy(const CheckLaunch *c, int out, CheckTol *t) {
    const Node *n = node_of(c, out);
    Rows R = rows_of(c, n->in[0]);
    CeRule r = ce_rule(c, n, &R);
    double sum_abs = 0;
    for (int64_t i = 0; i < R.rows; i++) {
        double mx, s, ax = 0;
        int32_t lb = label_at(c, n->in[1], i);
        if (lb == r.ignore || lb < 0 || lb >= R.C) continue;
        row_max_sum(c, &R, i, &mx, &s);
        for (int64_t col = 0; r.eps > 0 && col < R.C; col++) ax += fabs(row_x(c, &R, i, col));
        sum_abs += fabs(mx) + fabs(log(s)) + (1 - r.eps) * fabs(row_x(c, &R, i, lb)) + r.eps * ax / (double)R.C;
    }
    double rows = r.kept ? r.kept : 1, L = fabs(ref_at(c, out, 0));
    double e = (R.re + (double)R.C * D_UNIT) * 1.01 + 4 * (rows + (double)R.C + 1) * D_UNIT * sum_abs / rows + R.u * L +
        tiny_of(c, out);
    t->tol[0] = 2 * e;
    snprintf(t->why, sizeof t->why,
             "cross_entropy: log of a double sum of exp within 2 ulps, summed over rows in "
             "double, rounded once; twice");
}

/* cross_entropy_grad: (EXP(x - mx) / s - target) dl / kept, the target (1 - eps) onehot + eps / C;
 * an ignored row's zeros are exact. */
static void tol_ce_grad(const CheckLaunch *c, int out, CheckTol *t) {
    const Node *n = node_of(c, out);
    Rows R = rows_of(c, n->in[0]);
    CeRule r = ce_rule(c, n, &R);
    double k = fabs(dloss(c, n->in[2]) / (r.kept ? r.kept : 1)), u = R.u, tiny = 16 * tiny_of(c, out);
    double rel = (2 * R.re + (double)R.C * D_UNIT + 2 * u + D_UNIT) * 1.01;
    for (int64_t i = 0; i < R.rows; i++) {
        double mx, s;
        int32_t lb = label_at(c, n->in[1], i);
        if (lb == r.ignore) {
            for (int64_t col = 0; col < R.C; col++) t->tol[i * R.C + col] = 0;
            continue;
        }
        row_max_sum(c, &R, i, &mx, &s);
        for (int64_t col = 0; col < R.C; col++) {
            double p = exp(row_x(c, &R, i, col) - mx) / s, oh = (col == lb ? 1 - r.eps : 0) + r.eps / (double)R.C;
            double g = fabs(ref_at(c, out, i * R.C + col));
            t->tol[i * R.C + col] = 2 * (k * (p * rel + u * (fabs(p - oh) + 2 * oh)) * 1.01 + u * g + tiny);
        }
    }
    snprintf(t->why, sizeof t->why,
             "cross_entropy_grad: softmax (exp within 2 ulps, a double row sum) minus the "
             "label, times dloss / rows; u per rounding, twice");
}

static void tol_row(const CheckLaunch *c, int out, CheckTol *t) {
    Op op = node_of(c, out)->op;
    if (op == OP_SOFTMAX || op == OP_LOG_SOFTMAX) tol_softmax(c, out, t, op == OP_LOG_SOFTMAX);
    else if (op == OP_SOFTMAX_GRAD || op == OP_LSM_GRAD) tol_softmax_grad(c, out, t, op == OP_LSM_GRAD);
    else if (op == OP_CROSS_ENTROPY) tol_cross_entropy(c, out, t);
    else if (op == OP_CE_GRAD) tol_ce_grad(c, out, t);
    else if (op == OP_LN_NORM) tol_layer_norm(c, out, t);
    else if (op == OP_LN_GRAD) tol_layer_norm_grad(c, out, t);
    else if (op == OP_CUMSUM) { /* codegen/kernel.c's row_cumsum: one order, in double */ tol_fill(t, 0);
        snprintf(t->why, sizeof t->why, "cumsum: a running double sum in one order, rounded once: the same bits");
    } else { /* accuracy, argmax, topk, gather and scatter: exact comparisons and moves (scatter_add's
                sums in one order, k's, on every target) */
        tol_fill(t, 0);
        snprintf(t->why, sizeof t->why, "%s picks by exact comparisons: the same bits", op_info[op].name);
    }
}

/* ---- attention -------------------------------------------------------------------------------
 * codegen/attention.c's arithmetic, per row i of a head, in `real` of unit w on each target:
 *   - a score s_ij = (q_i . k_j) scale, D products summed and scaled: within
 *     es_ij = gamma_{D+1}(w) |scale| sum_d |q_id k_jd|;
 *   - forward: e_ij = EXP(s_ij - m) within 2 ulps of exp of an argument off by at most
 *     es_ij + E (E = max_j es_ij, the maximum's own error); the rescalings exp(m - m') multiply
 *     acc and l alike, so only their roundings count (a key tile of at least 8 keys each); l and
 *     acc_c sums of Tk terms; y = acc / l, lse = m + log(l);
 *   - backward: P_ij = EXP(s_ij - lse_i) from the lse both targets read; dP_ij a sum of Dv
 *     products; dS_ij = P_ij (dP_ij M_ij - delta_i) scale; dv, dq and dk sums of Tq or Tk terms.
 * The dropout factors M are bounded by the largest, 1 / (1 - p), where the weights are drawn.
 * Per target with its unit, summed; 1% over for the second-order terms. */

typedef struct {
    const CheckLaunch *c;
    AttnGeom a;
    const void *m[6]; /* q, k, v, dy, lse, delta */
    double mmax; /* the largest dropout factor */
} AttnCheck;

static double attn_in(const AttnCheck *A, int which, int64_t i) {
    const int x[6] = {A->a.q, A->a.k, A->a.v, A->a.dy, A->a.lse, A->a.delta};
    return check_elem(A->c->p->g, x[which], A->m[which], i, A->c->real_bytes);
}

/* Head h's scores at row i: s[j], and a[j] = |scale| sum |q k| (-1 where the mask hides j). */
static void attn_scores(const AttnCheck *A, int64_t h, int64_t i, double *s, double *a) {
    const AttnGeom *g = &A->a;
    for (int64_t j = 0; j < g->tk; j++) {
        a[j] = -1;
        if (g->causal && j > i) continue;
        double dot = 0, mag = 0;
        for (int64_t d = 0; d < g->d; d++) {
            double x = attn_in(A, 0, (h * g->tq + i) * g->d + d), y = attn_in(A, 1, (h * g->tk + j) * g->d + d);
            dot += x * y;
            mag += fabs(x * y);
        }
        s[j] = dot * g->scale;
        a[j] = mag * fabs(g->scale);
    }
}

/* The forward's y (lse_out false) or lse tolerances of head h, per target unit w, added to t. */
static void attn_tol_forward(const AttnCheck *A, int out, int64_t h, double w, double *s, double *a, double *tol) {
    const AttnGeom *g = &A->a;
    const double re = 2 * EXP_ULPS * w, nt = (double)((g->tk + 7) / 8);
    for (int64_t i = 0; i < g->tq; i++) {
        attn_scores(A, h, i, s, a);
        double m = -INFINITY, E = 0, l = 0;
        for (int64_t j = 0; j < g->tk; j++)
            if (a[j] >= 0) {
                m = fmax(m, s[j]);
                E = fmax(E, gamma_k((double)g->d + 1, w) * a[j]);
            }
        for (int64_t j = 0; j < g->tk; j++) l += a[j] >= 0 ? exp(s[j] - m) : 0;
        if (out == g->lse_out) {
            double v = fabs(ref_at(A->c, out, h * g->tq + i));
            tol[h * g->tq + i] += 1.01 * (2 * E + re + gamma_k((double)g->tk + nt + 2, w) + w * v);
            continue;
        }
        const double rel = 4 * E + 2 * re + gamma_k((double)g->tk + nt + 3, w);
        for (int64_t c = 0; c < g->dv_dim; c++) {
            double mag = 0;
            for (int64_t j = 0; j < g->tk; j++)
                if (a[j] >= 0)
                    mag += exp(s[j] - m) / l * A->mmax * fabs(attn_in(A, 2, (h * g->tk + j) * g->dv_dim + c));
            int64_t at = (h * g->tq + i) * g->dv_dim + c;
            tol[at] += 1.01 * (rel * mag + w * fabs(ref_at(A->c, out, at)));
        }
    }
}

/* The backward's dq, dk or dv (whichever `out` is) tolerances of head h, per target unit w:
 * err[] gathers the terms' errors and mag[] their magnitudes. */
static void attn_tol_backward(const AttnCheck *A, int out, int64_t h, double w, double *s, double *a, double *err,
                              double *mag, double *tol) {
    const AttnGeom *g = &A->a;
    const double re = 2 * EXP_ULPS * w, sc = fabs(g->scale), M = A->mmax;
    const int64_t W = out == g->dv ? g->dv_dim : g->d, rows = out == g->dq ? g->tq : g->tk;
    memset(err, 0, (size_t)(rows * W) * sizeof *err);
    memset(mag, 0, (size_t)(rows * W) * sizeof *mag);
    for (int64_t i = 0; i < g->tq; i++) {
        attn_scores(A, h, i, s, a);
        const double L = attn_in(A, 4, h * g->tq + i), Dl = attn_in(A, 5, h * g->tq + i);
        for (int64_t j = 0; j < g->tk; j++) {
            if (a[j] < 0) continue;
            const double P = exp(s[j] - L), eP = P * (gamma_k((double)g->d + 1, w) * a[j] + re + w);
            if (out == g->dv) {
                for (int64_t c = 0; c < W; c++) {
                    const double dy = fabs(attn_in(A, 3, (h * g->tq + i) * g->dv_dim + c));
                    err[j * W + c] += (eP + P * w) * M * dy;
                    mag[j * W + c] += P * M * dy;
                }
                continue;
            }
            double dP = 0, adP = 0;
            for (int64_t c = 0; c < g->dv_dim; c++) {
                const double x =
                    attn_in(A, 3, (h * g->tq + i) * g->dv_dim + c) * attn_in(A, 2, (h * g->tk + j) * g->dv_dim + c);
                dP += x;
                adP += fabs(x);
            }
            const double inner = fabs(dP) * M + fabs(Dl), dS = P * inner * sc;
            const double edS =
                eP * inner * sc + P * sc * (M * gamma_k((double)g->dv_dim, w) * adP + 2 * w * inner) + w * dS;
            for (int64_t d = 0; d < W; d++) { /* dq_i += dS_ij k_j, dk_j += dS_ij q_i */
                const int64_t row = out == g->dq ? i : j;
                const double other = fabs(out == g->dq ? attn_in(A, 1, (h * g->tk + j) * g->d + d)
                                                       : attn_in(A, 0, (h * g->tq + i) * g->d + d));
                err[row * W + d] += edS * other;
                mag[row * W + d] += dS * other;
            }
        }
    }
    const double k = (double)(out == g->dq ? g->tk : g->tq);
    for (int64_t e = 0; e < rows * W; e++) {
        const int64_t at = h * rows * W + e;
        tol[at] += 1.01 * (err[e] + gamma_k(k, w) * mag[e] + w * fabs(ref_at(A->c, out, at)));
    }
}

static void tol_attention(const CheckLaunch *c, int out, CheckTol *t) {
    AttnCheck A = {c, attention_geom(c->p->g, c->L), {0}, 1};
    const int x[6] = {A.a.q, A.a.k, A.a.v, A.a.dy, A.a.lse, A.a.delta};
    for (int i = 0; i < 6; i++) A.m[i] = x[i] >= 0 ? c->mem(c->ctx, x[i]) : NULL;
    if (A.a.dropout > 0 && c->e->kind != ENTRY_EVAL) A.mmax = A.a.dropout < 1 ? 1 / (1 - A.a.dropout) : 0;
    const int64_t heads = attention_heads(&A.a, c->B), width = A.a.d > A.a.dv_dim ? A.a.d : A.a.dv_dim;
    const int64_t rows = A.a.tq > A.a.tk ? A.a.tq : A.a.tk;
    double *s = xmalloc((size_t)(2 * A.a.tk + 1) * sizeof *s), *a = s + A.a.tk;
    double *err = xmalloc((size_t)(2 * rows * width + 1) * sizeof *err), *mag = err + rows * width;
    for (int tg = 0; tg < 2; tg++) {
        const double w = fmax(c->num[tg].sum_unit, unit_of(c));
        for (int64_t h = 0; h < heads; h++) {
            if (A.a.backward) attn_tol_backward(&A, out, h, w, s, a, err, mag, t->tol);
            else attn_tol_forward(&A, out, h, w, s, a, t->tol);
        }
    }
    for (int64_t i = 0; i < t->n; i++) {
        t->tol[i] += 2 * 16 * tiny_of(c, out);
        if (isnan(t->tol[i])) t->tol[i] = INFINITY;
    }
    free(s);
    free(err);
    snprintf(t->why, sizeof t->why,
             "%s: scores within gamma_%lld of |q| |k|, exp within %d ulps, sums of %lld or %lld terms in real, "
             "bounded term by term on each target, summed",
             op_info[node_of(c, out)->op].name, (long long)A.a.d + 1, EXP_ULPS, (long long)A.a.tk, (long long)A.a.tq);
}

void check_tol_launch(const CheckLaunch *c, int out, int64_t n, const unsigned char *need, CheckTol *t) {
    memset(t, 0, sizeof *t);
    t->n = n;
    t->need = need;
    t->tol = xcalloc((size_t)(n + 1), sizeof *t->tol);
    switch (c->L->kind) {
    case L_EW: tol_ew(c, out, t); break;
    case L_REDUCE: tol_reduce(c, out, t); break;
    case L_GEMM: tol_gemm(c, out, t); break;
    case L_ROW: tol_row(c, out, t); break;
    case L_HELPER: tol_helper(c, out, t); break;
    case L_ATTENTION: tol_attention(c, out, t); break;
    case L_COPY:
    case L_ASSIGN:
    case L_COLLECTIVE:
        tol_fill(t, 0);
        snprintf(t->why, sizeof t->why, "a copy: the same bits");
        break;
    }
}

void check_tol_free(CheckTol *t) {
    free(t->tol);
    free(t->scale);
    memset(t, 0, sizeof *t);
}
