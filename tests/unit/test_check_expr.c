/* test_check_expr.c - the running error bound --check-against gives elementwise ops
 * (driver/check_expr.c).
 *
 * Every ops.def expression (and every DX gradient) must be readable, or the checker could not
 * judge that op.  Then the bound's promise, on ops where targets really differ: every correct
 * float evaluation -- with or without fused multiply-adds, with a math library off by its
 * documented ulps -- lies within e of the exact value (long double) at the same inputs, and e
 * is not loose where nothing can differ (exact ops, one correctly rounded division). */
#define _XOPEN_SOURCE 700 /* nftw, in check.h */
#include <math.h>

#include "../../driver/check_expr.h"
#include "check.h"

#define U 0x1p-24

static Arena arena;
static Graph *g;
static int in[4];
static const SrcLoc here = {0};

static int node(Op op, int nin) {
    Shape s = shape_of(1, (int64_t[]){4});
    return graph_add(g, op, nin, in, s, DT_F32, here);
}

static int deriv(Op of, int wrt) {
    int id = node(OP_DERIV, 4);
    Node *n = &g->nodes[id];
    n->attr.deriv.of = of;
    n->attr.deriv.wrt = wrt;
    n->attr.deriv.p[0] = 0.5, n->attr.deriv.p[1] = 3;
    for (int s = 0; s < DERIV_NSYM; s++) n->attr.deriv.slot[s] = (int8_t)s; /* $g $0 $1 $y: operands 0..3 */
    return id;
}

static Approx eval_at(int id, double a, double b, double c, double d) {
    CheckExpr x;
    char err[160];
    if (!check_expr_build(&x, g, id, err, sizeof err)) return (Approx){NAN, NAN};
    Approx ops[4] = {{a, 0}, {b, 0}, {c, 0}, {d, 0}};
    Approx r = check_expr_eval(&x, ops, U);
    check_expr_free(&x);
    return r;
}

/* Every elementwise row of ops.def, and every gradient expression, reads. */
static void test_every_op_reads(void) {
    int bad = 0, n = 0;
    char err[160], nb[48];
    for (int op = 0; op < OP_COUNT; op++) {
        if (op_info[op].kind != OK_EW || op == OP_DERIV) continue;
        int id = node((Op)op, op_info[op].arity > 0 ? op_info[op].arity : 1);
        g->nodes[id].attr.scalars.p[0] = 0.5, g->nodes[id].attr.scalars.p[1] = 3;
        for (int w = -1; w < 2; w++) {
            if (w >= 0 && !op_info[op].dx[w]) continue;
            int x = w < 0 ? id : deriv((Op)op, w);
            CheckExpr e;
            n++;
            if (!check_expr_build(&e, g, x, err, sizeof err)) {
                bad++;
                printf("     %s: %s\n", node_op_name(&g->nodes[x], nb), err);
                continue;
            }
            Approx r = check_expr_eval(&e, (Approx[4]){{0.7, 0}, {1.3, 0}, {0.4, 0}, {0.9, 0}}, U);
            bad += !(r.e >= 0) || isnan(r.e);
            check_expr_free(&e);
        }
    }
    static const double pows[] = {1, 2, 3, 0.5, -0.5, -1, -2, 1.7};
    for (size_t i = 0; i < sizeof pows / sizeof pows[0]; i++) {
        int id = node(OP_POWC, 1);
        g->nodes[id].attr.scalars.p[0] = pows[i];
        n++;
        bad += !(eval_at(id, 1.25, 0, 0, 0).e >= 0);
    }
    CHECK(bad == 0 && n > 50, "all %d elementwise expressions and gradients of ops.def read and evaluate (%d failed)",
          n, bad);
}

/* What a math library within `ulps` units in the last place of the exact value may return:
 * the floats around it, j steps from the correctly rounded one (INFINITY: not one of them). */
static float libm_result(long double exact, int ulps, int j) {
    float v = (float)exact;
    for (int i = 0; i < (j < 0 ? -j : j); i++) v = nextafterf(v, j < 0 ? -INFINITY : INFINITY);
    int ex;
    frexpl(exact, &ex);
    long double ulp = ldexpl(1, ex - 24);
    return fabsl(v - exact) <= ulps * ulp ? v : INFINITY;
}

static unsigned rng_state = 12345;
static double rnd(void) { /* uniform [0, 1) */
    rng_state = rng_state * 1103515245u + 12345u;
    return (rng_state >> 8) / 16777216.0;
}

/* tanh's gradient g (1 - y y) near |y| = 1, where 1 - y y cancels: FMA or not, within e. */
static void test_tanh_grad(void) {
    int id = deriv(OP_TANH, 0), miss = 0;
    for (int i = 0; i < 4000; i++) {
        float gg = (float)(rnd() * 4 - 2), y = (float)(1 - rnd() * rnd() * 1e-3) * (i & 1 ? 1 : -1);
        Approx r = eval_at(id, gg, 0, 0, y);
        long double exact = (long double)gg * (1 - (long double)y * y);
        float plain = gg * (1 - y * y), fused = gg * fmaf(-y, y, 1);
        miss += fabsl(plain - exact) > r.e || fabsl(fused - exact) > r.e;
    }
    CHECK(miss == 0, "tanh_grad near saturation: plain and fused evaluations within the bound (%d outside)", miss);
}

/* sigmoid with an exp off by two ulps either way, and its gradient y (1 - y). */
static void test_sigmoid(void) {
    int f = node(OP_SIGMOID, 1), d = deriv(OP_SIGMOID, 0), miss = 0;
    for (int i = 0; i < 4000; i++) {
        float x = (float)(rnd() * 40 - 20), gg = (float)(rnd() * 2 - 1), y = (float)rnd();
        Approx r = eval_at(f, x, 0, 0, 0);
        long double exact = 1 / (1 + expl(-(long double)x));
        for (int j = -3; j <= 3; j++) {
            float ex = libm_result(expl(-(long double)x), 2, j);
            miss += isfinite(ex) && fabsl(1 / (1 + ex) - exact) > r.e;
        }
        r = eval_at(d, gg, 0, 0, y);
        exact = (long double)gg * ((long double)y * (1 - (long double)y));
        miss += fabsl(gg * (y * (1 - y)) - exact) > r.e || fabsl(gg * (y * fmaf(-y, 1, 1)) - exact) > r.e;
    }
    CHECK(miss == 0, "sigmoid (exp within 2 ulps) and its gradient within the bound (%d outside)", miss);
}

/* gelu's tanh form: three products and a sum a compiler may fuse, and tanh off by 2 ulps. */
static void test_gelu_tanh(void) {
    int id = node(OP_GELU_TANH, 1), miss = 0;
    const float c0 = 0.79788456080286535588f, c1 = 0.044715f;
    for (int i = 0; i < 4000; i++) {
        float x = (float)(rnd() * 12 - 6);
        Approx r = eval_at(id, x, 0, 0, 0);
        long double xl = x, exact = 0.5L * xl * (1 + tanhl((long double)c0 * (xl + (long double)c1 * xl * xl * xl)));
        float in_plain = c0 * (x + c1 * x * x * x), in_fused = c0 * fmaf(c1 * x * x, x, x);
        for (int j = -3; j <= 3; j++) {
            float tp = libm_result(tanhl(in_plain), 2, j), tf = libm_result(tanhl(in_fused), 2, j);
            miss += isfinite(tp) && fabsl(0.5f * x * (1 + tp) - exact) > r.e;
            miss += isfinite(tf) && fabsl(0.5f * x * (1 + tf) - exact) > r.e;
        }
    }
    CHECK(miss == 0, "gelu (tanh form), fused or not, tanh within 2 ulps: within the bound (%d outside)", miss);
}

/* Adam's m / (sqrt(v) + eps) on a gradient of 1e-10: ill-conditioned in the gradient, but from
 * the same inputs one correctly rounded division: the bound is a rounding, whatever the size. */
static void test_adam_ratio(void) {
    int id = node(OP_DIV, 2);
    float m = 1e-10f, denom = 1e-10f + 1e-8f;
    Approx r = eval_at(id, m, denom, 0, 0);
    CHECK(r.e <= U * fabs(r.v) * 1.01 + 1e-45 && r.e > 0, "m / denom at m = 1e-10: bound %.3g = %.3g u |z|", r.e,
          r.e / (U * fabs(r.v)));
}

/* Exact results (a relu, a product by 2, a sum of two small integers) allow no difference. */
static void test_exact(void) {
    CHECK(eval_at(node(OP_RELU, 1), 0.3f, 0, 0, 0).e == 0, "relu of an input: exact");
    CHECK(eval_at(node(OP_MUL, 2), 0.3f, 2, 0, 0).e == 0, "a product by 2: exact");
    CHECK(eval_at(node(OP_ADD, 2), 3, 4, 0, 0).e == 0, "3 + 4: exact");
    CHECK(eval_at(node(OP_ADD, 2), 0.1f, 0.2f, 0, 0).e > 0, "0.1 + 0.2 (floats): one rounding");
    Approx n = eval_at(node(OP_RELU, 1), NAN, 0, 0, 0);
    CHECK(isnan(n.v) && n.e == 0, "relu(NaN) is NaN on every target");
    Approx q = check_round((Approx){1.0 / 3, 0}, U, 0x1p-150);
    CHECK(q.e == 0 && q.v == (double)(1.0f / 3), "(real) of an exact value rounds alike everywhere");
}

/* softplus's threshold x beta > threshold, computed with a rounding, can go either way near it:
 * the bound covers both branches. */
static void test_uncertain_branch(void) {
    int id = node(OP_SOFTPLUS, 1);
    g->nodes[id].attr.scalars.p[0] = 0.1, g->nodes[id].attr.scalars.p[1] = 20;
    float x = 200.0f;
    Approx r = eval_at(id, x, 0, 0, 0);
    double other = log1p(exp((double)x * 0.1f)) / 0.1f;
    CHECK(r.e >= fabs(other - x) * 0.99, "softplus at its threshold: both branches allowed (bound %.3g, gap %.3g)", r.e,
          fabs(other - x));
}

int main(void) {
    g = graph_new(&arena);
    for (int i = 0; i < 4; i++) in[i] = graph_add(g, OP_INPUT, 0, NULL, shape_of(1, (int64_t[]){4}), DT_F32, here);
    test_every_op_reads();
    test_tanh_grad();
    test_sigmoid();
    test_gelu_tanh();
    test_adam_ratio();
    test_exact();
    test_uncertain_branch();
    free(g->nodes); /* graph_add grows the node array with realloc, outside the arena */
    arena_free(&arena);
    return check_done();
}
