/* check_expr.h - an elementwise op's expression, read back from ops.def for --check-against, and
 * evaluated with a bound on the rounding error of any correct evaluation (check_expr.c). */
#ifndef NNC_CHECK_EXPR_H
#define NNC_CHECK_EXPR_H
#include "../ir/ir.h"

/* A value at one point, and how far a correct evaluation in the target's arithmetic can be from
 * it: e = 0 when every target computes exactly these bits; INFINITY when nothing can be said. */
typedef struct {
    double v, e;
} Approx;

typedef struct ExprNode ExprNode;
typedef struct {
    ExprNode *nodes;
    int n, cap, root;
} CheckExpr;

/* The expression of elementwise node `id` (its op's, or for a DERIV the DX expression it
 * evaluates), as a tree over the node's operands.  False (with a reason in err) for text the
 * reader does not know; the checker then cannot judge that op. */
bool check_expr_build(CheckExpr *x, const Graph *g, int id, char *err, size_t n);
void check_expr_free(CheckExpr *x);
/* The value at the node's operands' values (operand k: ops[k]; an OPF_INDEX op's row and column
 * after them, exact), computed in double, with a
 * bound on its error in arithmetic of unit roundoff u (2^-24: float, 2^-53: double) whatever
 * the order of roundings, fused multiply-adds and the math library (check_expr.c's table). */
Approx check_expr_eval(const CheckExpr *x, const Approx *ops, double u);
/* (real)a, for real = float (u = 2^-24) or double (2^-53), tiny half the least subnormal: an
 * exact value is rounded as every target rounds it; an inexact one's error grows by the
 * rounding. */
Approx check_round(Approx a, double u, double tiny);
#endif
