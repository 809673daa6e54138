/* check_expr.c - what --check-against allows an elementwise op: a running error bound.
 *
 * Both targets compute an elementwise op from ops.def's C expression (codegen/expr.c pastes it
 * into their kernels), in `real` arithmetic, with the checker having given both the same
 * inputs.  They may still differ: NVRTC contracts a * b + c into a fused multiply-add, and the
 * math libraries' EXP, TANH, POW... are not correctly rounded.  This file reads the expression
 * back into a tree and evaluates it in double together with a bound e on the distance between
 * the exact value and ANY correct evaluation (Higham, "Accuracy and Stability of Numerical
 * Algorithms", ch. 3, running error analysis): each operation adds its own rounding (u |z|, or
 * nothing when its exact result is representable: then every target has those bits) to the
 * errors of its operands as they propagate (|x| e_y + |y| e_x for a product; for a function
 * the change of f over [x - e, x + e], as it is monotonic).  A fused multiply-add drops a
 * rounding, which the bound already allowed.  A condition that the operands' errors could flip
 * takes both branches.  Two correct targets are then within 2e of each other, whatever the
 * value's conditioning: Adam's m / (sqrt(v) + eps) on a gradient of 1e-10 is judged by the
 * roundings of the division at the inputs both were given, not by its sensitivity to them. */
#include "check_expr.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    X_NUM, /* a literal: num */
    X_OPND, /* operand `opnd` of the node */
    X_NEG,
    X_NOT,
    X_CAST, /* unary: a */
    X_ADD,
    X_SUB,
    X_MUL,
    X_DIV, /* a op b */
    X_LT,
    X_GT,
    X_LE,
    X_GE,
    X_EQ,
    X_NE,
    X_AND,
    X_OR, /* conditions: a op b */
    X_TERN, /* a ? b : c */
    X_CALL, /* fn(a) or fn(a, b) */
} XOp;

/* The math macros of kernel_math_prelude, with the largest error in units in the last place
 * that either target's library documents: CUDA's Programming Guide (single precision: expf 2,
 * logf 1, tanhf 2, powf 4, erff 2, log1pf 1; sqrtf correctly rounded with NVRTC's default
 * -prec-sqrt=true; double: 1-2), and glibc's libm-test-ulps (at most 2 for these).  Both
 * targets are held to the larger. */
typedef enum {
    F_EXP,
    F_LOG,
    F_SQRT,
    F_TANH,
    F_POW,
    F_FABS,
    F_ERF,
    F_LOG1P,
    F_EXPM1,
    F_SIN,
    F_COS,
    F_FLOOR,
    F_CEIL,
    F_RINT,
    F_TRUNC,
    F_TAN,
    F_ASIN,
    F_ACOS,
    F_ATAN,
    F_SINH,
    F_COSH,
    F_ASINH,
    F_ACOSH,
    F_ATANH,
    F_FMOD, /* the two-argument ones from here on, POW aside */
    F_FLOORDIV,
    F_REMAINDER,
    F_COUNT
} XFn;
/* expm1f 1 ulp, sinf and cosf 2 (CUDA, over the whole range; glibc 1); tanf 4, asinf, acosf, atanf
 * and coshf 2, sinhf, asinhf and atanhf 3, acoshf 4 (CUDA's table; glibc's within them); floor, ceil, rint, trunc and
 * fmod are exact on both; FLOORDIV and REMAINDER (kernel_math_prelude) round once, in real */
static const struct {
    const char *name;
    double ulps;
} fns[F_COUNT] = {{"EXP", 2},   {"LOG", 2},   {"SQRT", 0},  {"TANH", 2}, {"POW", 4},      {"FABS", 0},     {"ERF", 2},
                  {"LOG1P", 2}, {"EXPM1", 2}, {"SIN", 2},   {"COS", 2},  {"FLOOR", 0},    {"CEIL", 0},     {"RINT", 0},
                  {"TRUNC", 0}, {"TAN", 4},   {"ASIN", 2},  {"ACOS", 2}, {"ATAN", 2},     {"SINH", 3},     {"COSH", 2},
                  {"ASINH", 3}, {"ACOSH", 4}, {"ATANH", 3}, {"FMOD", 0}, {"FLOORDIV", 1}, {"REMAINDER", 1}};

struct ExprNode {
    XOp op;
    XFn fn;
    int a, b, c;
    int opnd;
    double num;
};

typedef struct {
    const char *s;
    CheckExpr *x;
    const Node *node;
    bool lone_dollar; /* pow's special forms: `$` is operand 0 */
    char *err;
    size_t errlen;
    bool failed;
} Parser;

static int add_node(Parser *P, ExprNode n) {
    CheckExpr *x = P->x;
    if (x->n == x->cap) x->nodes = xrealloc(x->nodes, (size_t)(x->cap = x->cap ? 2 * x->cap : 16) * sizeof *x->nodes);
    x->nodes[x->n] = n;
    return x->n++;
}

static int fail(Parser *P, const char *what) {
    if (!P->failed) snprintf(P->err, P->errlen, "%s at '%.20s'", what, P->s);
    P->failed = true;
    return add_node(P, (ExprNode){.op = X_NUM});
}

static void skip(Parser *P) {
    while (*P->s == ' ') P->s++;
}

static bool eat(Parser *P, const char *t) {
    skip(P);
    size_t n = strlen(t);
    if (strncmp(P->s, t, n)) return false;
    P->s += n;
    return true;
}

static int node2(Parser *P, XOp op, int a, int b) { return add_node(P, (ExprNode){.op = op, .a = a, .b = b}); }

/* $0 $1 $2 (operands), $g $y (a DERIV's incoming gradient and result), $p $p1 $p2 (scalars,
 * rendered as (real) literals), $r $c (an OPF_INDEX op's row and column: the values after its
 * operands), and `$` alone in pow's special forms. */
static int symbol(Parser *P) {
    const Node *n = P->node;
    char c = P->s[0];
    if ((c == 'r' || c == 'c') && n->op != OP_DERIV) {
        P->s++;
        return add_node(P, (ExprNode){.op = X_OPND, .opnd = n->nin + (c == 'c')});
    }
    if (c == 'p') {
        int k = P->s[1] == '1' || P->s[1] == '2' ? P->s[1] - '0' : 0;
        P->s += 1 + (k > 0);
        double v = n->op == OP_DERIV              ? n->attr.deriv.p[k]
            : op_info[n->op].attr == ATTR_SCALARS ? n->attr.scalars.p[k]
                                                  : 0;
        int lit = add_node(P, (ExprNode){.op = X_NUM, .num = v});
        return add_node(P, (ExprNode){.op = X_CAST, .a = lit});
    }
    if (P->lone_dollar) return add_node(P, (ExprNode){.op = X_OPND, .opnd = 0});
    int k;
    if (n->op == OP_DERIV) {
        int sym = c == 'g' ? DERIV_G : c == '0' ? DERIV_X0 : c == '1' ? DERIV_X1 : c == 'y' ? DERIV_Y : -1;
        k = sym >= 0 ? n->attr.deriv.slot[sym] : -1;
    } else k = c >= '0' && c <= '2' ? c - '0' : -1;
    P->s++;
    if (k < 0 || k >= n->nin) return fail(P, "an operand the node does not have");
    return add_node(P, (ExprNode){.op = X_OPND, .opnd = k});
}

static int cond(Parser *P);

static int call(Parser *P, XFn f) {
    if (!eat(P, "(")) return fail(P, "expected '('");
    ExprNode n = {.op = X_CALL, .fn = f, .a = cond(P), .b = -1};
    if (f == F_POW || f >= F_FMOD) {
        if (!eat(P, ",")) return fail(P, "expected ','");
        n.b = cond(P);
    }
    if (!eat(P, ")")) return fail(P, "expected ')'");
    return add_node(P, n);
}

static int unary(Parser *P);

static int primary(Parser *P) {
    skip(P);
    if (eat(P, "$")) return symbol(P);
    if (isdigit((unsigned char)*P->s) || *P->s == '.') {
        char *end;
        double v = strtod(P->s, &end);
        P->s = end;
        return add_node(P, (ExprNode){.op = X_NUM, .num = v});
    }
    for (int f = 0; f < F_COUNT; f++) {
        size_t len = strlen(fns[f].name);
        if (!strncmp(P->s, fns[f].name, len) && !isalnum((unsigned char)P->s[len])) {
            P->s += len;
            return call(P, (XFn)f);
        }
    }
    if (eat(P, "(")) {
        if (eat(P, "real")) { /* (real)x: a conversion to the target's real type */
            if (!eat(P, ")")) return fail(P, "expected ')' after (real");
            return add_node(P, (ExprNode){.op = X_CAST, .a = unary(P)});
        }
        int e = cond(P);
        if (!eat(P, ")")) return fail(P, "expected ')'");
        return e;
    }
    return fail(P, "an unknown token");
}

static int unary(Parser *P) {
    if (eat(P, "-")) return add_node(P, (ExprNode){.op = X_NEG, .a = unary(P)});
    if (eat(P, "!")) {
        if (*P->s == '=') return fail(P, "a stray '!='");
        return add_node(P, (ExprNode){.op = X_NOT, .a = unary(P)});
    }
    return primary(P);
}

static int mul(Parser *P) {
    int a = unary(P);
    for (;;) {
        if (eat(P, "*")) a = node2(P, X_MUL, a, unary(P));
        else if (eat(P, "/")) a = node2(P, X_DIV, a, unary(P));
        else return a;
    }
}

static int add(Parser *P) {
    int a = mul(P);
    for (;;) {
        if (eat(P, "+")) a = node2(P, X_ADD, a, mul(P));
        else if (eat(P, "-")) a = node2(P, X_SUB, a, mul(P));
        else return a;
    }
}

static int rel(Parser *P) {
    int a = add(P);
    for (;;) {
        if (eat(P, "<=")) a = node2(P, X_LE, a, add(P));
        else if (eat(P, ">=")) a = node2(P, X_GE, a, add(P));
        else if (eat(P, "<")) a = node2(P, X_LT, a, add(P));
        else if (eat(P, ">")) a = node2(P, X_GT, a, add(P));
        else return a;
    }
}

static int equality(Parser *P) {
    int a = rel(P);
    for (;;) {
        if (eat(P, "==")) a = node2(P, X_EQ, a, rel(P));
        else if (eat(P, "!=")) a = node2(P, X_NE, a, rel(P));
        else return a;
    }
}

static int and_(Parser *P) {
    int a = equality(P);
    while (eat(P, "&&")) a = node2(P, X_AND, a, equality(P));
    return a;
}

static int or_(Parser *P) {
    int a = and_(P);
    while (eat(P, "||")) a = node2(P, X_OR, a, and_(P));
    return a;
}

static int cond(Parser *P) {
    int c = or_(P);
    if (!eat(P, "?")) return c;
    int a = cond(P);
    if (!eat(P, ":")) return fail(P, "expected ':'");
    int b = cond(P);
    return add_node(P, (ExprNode){.op = X_TERN, .a = c, .b = a, .c = b});
}

/* pow's exponents that codegen/expr.c writes as special forms (the same text here). */
static const char *powc_form(double c) {
    if (c == 1) return "$";
    if (c == 2) return "($ * $)";
    if (c == 3) return "($ * $ * $)";
    if (c == 0.5) return "SQRT($)";
    if (c == -0.5) return "((real)1 / SQRT($))";
    if (c == -1) return "((real)1 / $)";
    if (c == -2) return "((real)1 / ($ * $))";
    return NULL;
}

bool check_expr_build(CheckExpr *x, const Graph *g, int id, char *err, size_t n) {
    const Node *node = &g->nodes[id];
    memset(x, 0, sizeof *x);
    const char *text = op_info[node->op].expr;
    bool lone = false;
    if (node->op == OP_DERIV) text = op_info[node->attr.deriv.of].dx[node->attr.deriv.wrt];
    else if (node->op == OP_POWC && powc_form(node->attr.scalars.p[0])) {
        text = powc_form(node->attr.scalars.p[0]);
        lone = true;
    }
    if (!text || !*text || op_info[node->op].kind != OK_EW) {
        snprintf(err, n, "%s has no elementwise expression", op_info[node->op].name);
        return false;
    }
    Parser P = {.s = text, .x = x, .node = node, .lone_dollar = lone, .err = err, .errlen = n};
    x->root = cond(&P);
    skip(&P);
    if (*P.s) fail(&P, "text after the expression");
    if (P.failed) check_expr_free(x);
    return !P.failed;
}

void check_expr_free(CheckExpr *x) {
    free(x->nodes);
    memset(x, 0, sizeof *x);
}

/* ---- evaluation ------------------------------------------------------------------------------ */

typedef struct {
    const CheckExpr *x;
    const Approx *ops;
    double u, tiny, max; /* the real type's unit roundoff, half its least subnormal, its largest */
} Eval;

static double to_real(const Eval *E, double v) { return E->u > 0x1p-30 ? (double)(float)v : v; }

/* One unit in the last place of a real of magnitude a (callers nudge a up, so that a result a
 * few ulps above a power of two, in the next binade, is measured in its larger ulps). */
static double ulp_real(const Eval *E, double a) {
    int ex;
    frexp(a, &ex);
    double ulp = ldexp(1, ex - (E->u > 0x1p-30 ? 24 : 53));
    return fmax(ulp, 2 * E->tiny);
}

/* The rounding of an operation whose exact result is z (exact_in_double: the double value
 * below is that result): none when z is representable, else u |z|, and past the largest real
 * anything (one target may overflow where the other does not). */
static double round_err(const Eval *E, double z, bool exact_in_double) {
    if (!isfinite(z)) return 0;
    if (fabs(z) * (1 + 4 * E->u) >= E->max) return INFINITY;
    if (exact_in_double && to_real(E, z) == z) return 0;
    return E->u * fabs(z) + E->tiny + 0x1p-52 * fabs(z); /* the last term: this evaluation's own */
}

static Approx eval(const Eval *E, int i);

typedef struct {
    bool val, sure;
} Cond;

/* Whether comparing x and y could go the other way within their errors. */
static bool cmp_sure(Approx x, Approx y) {
    if (x.e == 0 && y.e == 0) return true;
    if (isnan(x.v) || isnan(y.v)) return false;
    return fabs(x.v - y.v) > x.e + y.e;
}

static Cond eval_cond(const Eval *E, int i) {
    const ExprNode *n = &E->x->nodes[i];
    Approx a, b;
    switch (n->op) {
    case X_LT:
    case X_GT:
    case X_LE:
    case X_GE:
    case X_EQ:
    case X_NE: {
        a = eval(E, n->a);
        b = eval(E, n->b);
        bool v = n->op == X_LT ? a.v < b.v
            : n->op == X_GT    ? a.v > b.v
            : n->op == X_LE    ? a.v <= b.v
            : n->op == X_GE    ? a.v >= b.v
            : n->op == X_EQ    ? a.v == b.v
                               : a.v != b.v;
        return (Cond){v, cmp_sure(a, b)};
    }
    case X_NOT: {
        Cond c = eval_cond(E, n->a);
        return (Cond){!c.val, c.sure};
    }
    case X_AND:
    case X_OR: {
        bool is_and = n->op == X_AND;
        Cond l = eval_cond(E, n->a);
        if (l.sure && l.val != is_and) return l; /* decided by the left side */
        Cond r = eval_cond(E, n->b);
        if (r.sure && r.val != is_and) return r;
        return (Cond){is_and ? l.val && r.val : l.val || r.val, l.sure && r.sure};
    }
    case X_NUM:
    case X_OPND:
    case X_NEG:
    case X_CAST:
    case X_ADD:
    case X_SUB:
    case X_MUL:
    case X_DIV:
    case X_TERN:
    case X_CALL: break;
    }
    a = eval(E, i); /* a number as a condition: nonzero */
    return (Cond){a.v != 0, a.e == 0 || fabs(a.v) > a.e};
}

/* f over [x - e, x + e] (monotonic on its domain): the most it moves from f(x); INFINITY when
 * the interval leaves the domain. */
static double fn1(XFn f, double x) {
    switch (f) {
    case F_EXP: return exp(x);
    case F_LOG: return log(x);
    case F_SQRT: return sqrt(x);
    case F_TANH: return tanh(x);
    case F_FABS: return fabs(x);
    case F_ERF: return erf(x);
    case F_LOG1P: return log1p(x);
    case F_EXPM1: return expm1(x);
    case F_SIN: return sin(x);
    case F_COS: return cos(x);
    case F_FLOOR: return floor(x);
    case F_CEIL: return ceil(x);
    case F_RINT: return rint(x);
    case F_TRUNC: return trunc(x);
    case F_TAN: return tan(x);
    case F_ASIN: return asin(x);
    case F_ACOS: return acos(x);
    case F_ATAN: return atan(x);
    case F_SINH: return sinh(x);
    case F_COSH: return cosh(x);
    case F_ASINH: return asinh(x);
    case F_ACOSH: return acosh(x);
    case F_ATANH: return atanh(x);
    case F_POW:
    case F_FMOD:
    case F_FLOORDIV:
    case F_REMAINDER:
    case F_COUNT: break;
    }
    return NAN;
}

static double spread1(XFn f, Approx x, double z) {
    if (x.e == 0) return 0;
    if (f == F_FABS) return x.e;
    if (f == F_SIN || f == F_COS) return isnan(x.e) ? INFINITY : fmin(x.e, 2); /* not monotonic; slopes within 1 */
    double lo = x.v - x.e, hi = x.v + x.e;
    if ((f == F_LOG && lo <= 0) || (f == F_SQRT && lo < 0) || (f == F_LOG1P && lo <= -1)) return INFINITY;
    if (((f == F_ASIN || f == F_ACOS || f == F_ATANH) && (lo <= -1 || hi >= 1)) || (f == F_ACOSH && lo <= 1))
        return INFINITY; /* the domain's edge, where the slope is unbounded */
    if (f == F_TAN && floor(lo / M_PI + 0.5) != floor(hi / M_PI + 0.5)) return INFINITY; /* a pole between */
    double s = fmax(fabs(fn1(f, hi) - z), fabs(fn1(f, lo) - z));
    if (f == F_COSH && lo < 0 && hi > 0) s = fmax(s, fabs(1 - z)); /* its least value, at 0 */
    return isnan(s) ? INFINITY : s;
}

/* pow is monotonic in each argument for a positive base: the corners bound it. */
static double spread_pow(Approx x, Approx y, double z) {
    if (x.e == 0 && y.e == 0) return 0;
    if (x.v - x.e <= 0) return INFINITY;
    double s = 0;
    for (int i = 0; i < 4; i++) s = fmax(s, fabs(pow(x.v + (i & 1 ? x.e : -x.e), y.v + (i & 2 ? y.e : -y.e)) - z));
    return isnan(s) ? INFINITY : s;
}

static double fn2(XFn f, double x, double y) {
    if (f == F_POW) return pow(x, y);
    if (f == F_FMOD) return fmod(x, y);
    return f == F_FLOORDIV ? py_floordiv(x, y) : py_mod(x, y); /* the prelude's FLOORDIV, REMAINDER */
}

/* floor(x / y) and trunc(x / y) are monotonic in each argument while y keeps its sign: the
 * corners bound the quotient.  A remainder moves with its operands while the quotient stays
 * (x - q y), and stays within the divisor's size when it does not. */
static double spread_div(XFn f, Approx x, Approx y, double z) {
    if (x.e == 0 && y.e == 0) return 0;
    if (fabs(y.v) <= y.e || isnan(x.e) || isnan(y.e)) return INFINITY;
    double q[4], s = 0;
    for (int i = 0; i < 4; i++) {
        double a = x.v + (i & 1 ? x.e : -x.e), b = y.v + (i & 2 ? y.e : -y.e);
        q[i] = f == F_FMOD ? trunc(a / b) : py_floordiv(a, b);
        s = fmax(s, fabs(q[i] - z));
    }
    if (f == F_FLOORDIV) return isnan(s) ? INFINITY : s;
    bool same = q[0] == q[1] && q[0] == q[2] && q[0] == q[3];
    s = same ? x.e + fabs(q[0]) * y.e : 2 * (fabs(y.v) + y.e);
    return isnan(s) ? INFINITY : s;
}

static Approx eval_call(const Eval *E, const ExprNode *n) {
    Approx x = eval(E, n->a), y = n->b >= 0 ? eval(E, n->b) : (Approx){0, 0};
    double z = n->b >= 0 ? fn2(n->fn, x.v, y.v) : fn1(n->fn, x.v);
    double spread = n->fn == F_POW ? spread_pow(x, y, z)
        : n->b >= 0                ? spread_div(n->fn, x, y, z)
                                   : spread1(n->fn, x, z);
    if (!isfinite(z)) return (Approx){z, x.e == 0 && y.e == 0 ? 0 : INFINITY};
    double own;
    if (n->fn == F_FABS) own = 0;
    else if (n->fn == F_SQRT) own = round_err(E, z, fma(z, z, -x.v) == 0); /* correctly rounded */
    else
        own = fabs(z) * (1 + 4 * E->u) >= E->max
            ? INFINITY
            : fns[n->fn].ulps * ulp_real(E, (fabs(z) + spread) * (1 + 8 * E->u)) + 0x1p-51 * fabs(z) + E->tiny;
    return (Approx){z, spread + own};
}

/* x op y for + - * /: the propagated errors, then the operation's own rounding. */
static Approx eval_arith(const Eval *E, XOp op, Approx x, Approx y) {
    double z, prop;
    bool exact;
    if (op == X_ADD || op == X_SUB) {
        double b = op == X_ADD ? y.v : -y.v, bb;
        z = x.v + b;
        bb = z - x.v;
        exact = (x.v - (z - bb)) + (b - bb) == 0; /* Knuth's TwoSum: the error of the addition */
        prop = x.e + y.e;
    } else if (op == X_MUL) {
        z = x.v * y.v;
        exact = fma(x.v, y.v, -z) == 0;
        prop = fabs(x.v) * y.e + fabs(y.v) * x.e + x.e * y.e;
    } else {
        z = x.v / y.v;
        exact = y.v != 0 && fma(z, y.v, -x.v) == 0;
        prop = x.e == 0 && y.e == 0 ? 0 : y.e >= fabs(y.v) ? INFINITY : (x.e + fabs(z) * y.e) / (fabs(y.v) - y.e);
    }
    if (!isfinite(z) || isnan(prop)) return (Approx){z, x.e == 0 && y.e == 0 ? 0 : INFINITY};
    return (Approx){z, prop + round_err(E, z, exact)};
}

static Approx eval(const Eval *E, int i) {
    const ExprNode *n = &E->x->nodes[i];
    switch (n->op) {
    case X_NUM: return (Approx){n->num, 0};
    case X_OPND: return E->ops[n->opnd];
    case X_NEG: {
        Approx a = eval(E, n->a);
        return (Approx){-a.v, a.e};
    }
    case X_CAST: return check_round(eval(E, n->a), E->u, E->tiny);
    case X_ADD:
    case X_SUB:
    case X_MUL:
    case X_DIV: return eval_arith(E, n->op, eval(E, n->a), eval(E, n->b));
    case X_TERN: {
        Cond c = eval_cond(E, n->a);
        Approx t = eval(E, c.val ? n->b : n->c);
        if (c.sure) return t;
        Approx o = eval(E, c.val ? n->c : n->b); /* the branch another target may take */
        double gap = fabs(o.v - t.v) + o.e;
        return (Approx){t.v, isnan(gap) ? (isnan(o.v) && isnan(t.v) ? t.e : INFINITY) : fmax(t.e, gap)};
    }
    case X_CALL: return eval_call(E, n);
    case X_NOT:
    case X_LT:
    case X_GT:
    case X_LE:
    case X_GE:
    case X_EQ:
    case X_NE:
    case X_AND:
    case X_OR: break;
    }
    Cond c = eval_cond(E, i); /* a condition as a number: 0 or 1 */
    return (Approx){c.val, c.sure ? 0 : 1};
}

Approx check_round(Approx a, double u, double tiny) {
    if (!isfinite(a.v)) return a;
    if (a.e == 0) return (Approx){u > 0x1p-30 ? (double)(float)a.v : a.v, 0}; /* every target rounds it alike */
    return (Approx){a.v, a.e + u * (fabs(a.v) + a.e) + tiny};
}

Approx check_expr_eval(const CheckExpr *x, const Approx *ops, double u) {
    bool f = u > 0x1p-30;
    Eval E = {x, ops, u, f ? 0x1p-150 : 0x1p-1074, f ? 3.4028234663852886e38 : 1.7976931348623157e308};
    return eval(&E, x->root);
}
