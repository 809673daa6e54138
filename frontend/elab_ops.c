/* elab_ops.c - the op readers: the builtins that ops.def gives a surface (read by their kind, or
 * by a reader of their own), the compositions of ops (min, logsumexp, flatten, concat, slice,
 * ...), and call_builtin, which finds a builtin by name. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "elab_impl.h"

/* ---- reductions, unary and row-wise ops, losses, views, placement -------------------------- */

static bool reduce_args(Elab *E, const char *fn, Args *a, SrcLoc loc, int *x, int64_t *mask, bool *keep) {
    static const char *names[] = {"x", "axis", "keepdim"};
    int ix[3];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 3, ix, 1, loc)) return false;
    *x = tensor_arg(E, a, ix[0]);
    if (*x < 0 || !need_f32(E, *x, fn, loc)) return false;
    *mask = axes_arg(E, a, ix[1], E->g->nodes[*x].shape.rank, &ok);
    *keep = num_arg(E, a, ix[2], 0, &ok) != 0;
    return ok;
}

int reduce_node(Elab *E, Op op, int x, int64_t mask, bool keep, SrcLoc loc) {
    Shape s = E->g->nodes[x].shape, r = {0};
    for (int i = 0; i < s.rank; i++) {
        if (!(mask >> i & 1)) r.d[r.rank++] = s.d[i];
        else if (keep) r.d[r.rank++] = 1;
    }
    int in[1] = {x};
    int n = graph_add(E->g, op, 1, in, r, DT_F32, loc);
    E->g->nodes[n].attr.axes.mask = (uint32_t)mask;
    E->g->nodes[n].attr.axes.keepdim = keep;
    return n;
}

static Value reduce(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    int x;
    int64_t mask;
    bool keep;
    if (!reduce_args(E, fn, a, loc, &x, &mask, &keep)) return verror;
    return vtensor(reduce_node(E, op, x, mask, keep, loc));
}

/* min(x, axis, keepdim) = -max(-x): the same NaN rule and tie-sharing gradient as max. */
static Value read_min(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    int x;
    int64_t mask;
    bool keep;
    if (!reduce_args(E, fn, a, loc, &x, &mask, &keep)) return verror;
    int m = reduce_node(E, OP_MAX, graph_add1(E->g, OP_NEG, x, loc), mask, keep, loc);
    return vtensor(graph_add1(E->g, OP_NEG, m, loc));
}

/* logsumexp(x, axis, keepdim) = m + log(sum(exp(x - m))), m the max (no gradient flows through
 * it: the result's gradient is softmax), 0 where it is infinite, as torch.logsumexp: large
 * values do not overflow, and a row of -inf gives -inf. */
static Value read_logsumexp(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    int x;
    int64_t mask;
    bool keep;
    if (!reduce_args(E, fn, a, loc, &x, &mask, &keep)) return verror;
    int m = reduce_node(E, OP_MAX, x, mask, true, loc);
    m = graph_add1(E->g, OP_FINITE_OR_ZERO, graph_add1(E->g, OP_DETACH, m, loc), loc);
    int s = reduce_node(E, OP_SUM, graph_add1(E->g, OP_EXP, graph_add2(E->g, OP_SUB, x, m, loc), loc), mask, keep, loc);
    if (!keep) {
        int in[1] = {m};
        m = graph_add(E->g, OP_RESHAPE, 1, in, E->g->nodes[s].shape, DT_F32, loc);
    }
    return vtensor(graph_add2(E->g, OP_ADD, graph_add1(E->g, OP_LOG, s, loc), m, loc));
}

static Value unary(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    if (a->n != 1 || a->kw[0]) {
        diag_error(E->d, loc, "%s() takes one tensor argument", fn);
        return verror;
    }
    if (a->v[0].k == V_NUM) { /* constant folding for shapes and initializer bounds */
        double x = a->v[0].num;
        static const struct {
            Op op;
            double (*fn)(double);
        } fold[] = {{OP_SQRT, sqrt},   {OP_EXP, exp},     {OP_LOG, log},     {OP_TANH, tanh},   {OP_SIN, sin},
                    {OP_COS, cos},     {OP_FLOOR, floor}, {OP_CEIL, ceil},   {OP_TRUNC, trunc}, {OP_LOG2, log2},
                    {OP_LOG10, log10}, {OP_LOG1P, log1p}, {OP_EXPM1, expm1}, {OP_EXP2, exp2},   {OP_ERF, erf}};
        for (size_t i = 0; i < NNC_COUNTOF(fold); i++)
            if (fold[i].op == op) return vfolded(E, fold[i].fn(x), loc, arena_printf(E->a, "%s(%g)", fn, x));
    }
    int x = tensor_arg(E, a, 0);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    return vtensor(graph_add1(E->g, op, x, loc));
}

static Value rowwise(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "axis"};
    int ix[2];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 2, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Shape s = E->g->nodes[x].shape;
    /* no axis: the last one, as the op is defined (not axes_arg's "all axes") */
    int64_t mask = ix[1] < 0 ? (s.rank ? (int64_t)1 << (s.rank - 1) : 0) : axes_arg(E, a, ix[1], s.rank, &ok);
    if (!ok) return verror;
    if (s.rank == 0 || !mask || (mask & (mask - 1))) {
        diag_error(E->d, loc, "%s() works over one axis (of %s)", fn, tstr(E, x));
        return verror;
    }
    int d = __builtin_ctzll((unsigned long long)mask);
    if (d != s.rank - 1 && dim_is_batch(s.d[d])) { /* moved last, its rows would be other samples' */
        diag_error(E->d, arg_loc(a, ix[1], loc),
                   "%s() over the batch axis of %s: a row of a step's samples is not supported", fn, tstr(E, x));
        return verror;
    }
    return vtensor(row_op_along(E, op, x, d, loc)); /* softmax(x, dim = 1) of [N, C, H, W] */
}

/* The orders that move axis d of a rank-r tensor last (there) and back. */
void axis_last_perms(int d, int r, int8_t *there, int8_t *back) {
    for (int i = 0; i < IR_MAX_RANK; i++) {
        there[i] = (int8_t)(i >= r ? i : i < d ? i : i == r - 1 ? d : i + 1);
        back[i] = (int8_t)(i >= r ? i : i < d ? i : i == d ? r - 1 : i - 1);
    }
}

/* The row-wise op over axis d of x: d moved last, the rows, moved back. */
int row_op_along(Elab *E, Op op, int x, int d, SrcLoc loc) {
    int r = E->g->nodes[x].shape.rank;
    if (d == r - 1) return graph_add1(E->g, op, x, loc);
    int8_t there[IR_MAX_RANK], back[IR_MAX_RANK];
    axis_last_perms(d, r, there, back);
    int y = graph_add1(E->g, op, permute_node(E, x, there, loc), loc);
    return permute_node(E, y, back, loc);
}

/* The argument list of an op's surface "name(x, p = 0.01)": names, defaults, how many. */
typedef struct {
    char name[8][32];
    const char *names[8];
    double dflt[8];
    bool has_dflt[8];
    int n;
} Surface;

static void surface_parse(const char *surface, Surface *sf) {
    sf->n = 0;
    const char *p = strchr(surface, '(') + 1;
    while (*p && *p != ')' && sf->n < 8) {
        while (*p == ' ' || *p == ',') p++;
        size_t len = strcspn(p, " =,)");
        snprintf(sf->name[sf->n], sizeof sf->name[0], "%.*s", (int)len, p);
        sf->names[sf->n] = sf->name[sf->n];
        p += len;
        while (*p == ' ') p++;
        sf->has_dflt[sf->n] = *p == '=';
        sf->dflt[sf->n] = *p == '=' ? strtod(p + 1, (char **)&p) : 0;
        sf->n++;
    }
}

/* logits [N, C] f32 and labels [N] i32; shared by cross_entropy and accuracy.  A sequence's
 * [B, T, V] logits are refused with the way to write them: torch takes the classes on axis 1
 * ([N, C, d1]), so the last axis as classes would be another op where T == V. */
static bool check_logits_labels(Elab *E, const char *fn, int lg, int lb, SrcLoc loc) {
    Node *L = &E->g->nodes[lg], *Y = &E->g->nodes[lb];
    if (is_float_dtype(L->dtype) && L->shape.rank == 3 && Y->shape.rank == 2) {
        diag_error(E->d, loc,
                   "%s() expects logits f32[N,C] and labels i32[N], got %s and %s; for a sequence, merge its "
                   "axes as nanoGPT does: %s(reshape(logits, -1, C), reshape(labels, -1))",
                   fn, tstr(E, lg), tstr(E, lb), fn);
        return false;
    }
    if (!is_float_dtype(L->dtype) || L->shape.rank != 2) {
        diag_error(E->d, loc, "%s() expects logits f32[N,C], got %s", fn, tstr(E, lg));
        return false;
    }
    if (Y->dtype != DT_I32 || Y->shape.rank != 1) {
        diag_error(E->d, loc, "%s() expects class labels i32[N], got %s", fn, tstr(E, lb));
        return false;
    }
    if (Y->shape.d[0] != L->shape.d[0]) {
        diag_error(E->d, loc, "%s(): logits %s and labels %s disagree on N", fn, tstr(E, lg), tstr(E, lb));
        return false;
    }
    return true;
}

/* cross_entropy's numbers, by its surface in ops.def: ignore_index, an integer a label can be
 * (torch takes any int64; an i32 label can only equal one in i32's range), and label_smoothing
 * in [0, 1] as torch requires. */
static bool ce_scalars(Elab *E, const char *fn, Args *a, const Surface *sf, const int *ix, double *p) {
    bool ok = true;
    for (int k = 2; k < sf->n; k++) p[k - 2] = num_arg(E, a, ix[k], sf->dflt[k], &ok);
    if (!ok) return false;
    if (ix[2] >= 0 && p[0] != floor(p[0])) {
        diag_error(E->d, a->loc[ix[2]], "%s(): ignore_index must be an integer, got %g", fn, p[0]);
        ok = false;
    } else if (ix[2] >= 0 &&
               !check_range(E, fn, "ignore_index", p[0], INT32_MIN, false, INT32_MAX, false, a->loc[ix[2]]))
        ok = false;
    if (ix[3] >= 0 && !check_range(E, fn, "label_smoothing", p[1], 0, false, 1, false, a->loc[ix[3]])) ok = false;
    return ok;
}

/* torch's K-dimensional form, logits [N, C, d1, ...] with labels [N, d1, ...] (the classes on axis
 * 1, as F.cross_entropy(logits.transpose(1, 2), y) writes a sequence's): the classes moved last
 * and every other axis merged, [N d1 ..., C] and [N d1 ...], whose mean over the rows not ignored
 * is torch's mean over the elements.  Other shapes are left to check_logits_labels. */
static void classes_last(Elab *E, int *lg, int *lb, SrcLoc loc) {
    Shape ls = E->g->nodes[*lg].shape, ys = E->g->nodes[*lb].shape;
    if (ls.rank < 3 || ys.rank != ls.rank - 1 || E->g->nodes[*lb].dtype != DT_I32 || dim_is_batch(ls.d[1])) return;
    for (int i = 0; i < ys.rank; i++)
        if (ys.d[i] != ls.d[i ? i + 1 : 0]) return;
    int8_t there[IR_MAX_RANK], back[IR_MAX_RANK];
    axis_last_perms(1, ls.rank, there, back);
    int64_t n = 1;
    for (int i = 0; i < ys.rank; i++) n = merge_dim(n, ys.d[i]);
    *lg = reshape_node(E, permute_node(E, *lg, there, loc), (Shape){.rank = 2, .d = {n, ls.d[1]}}, loc);
    *lb = reshape_node(E, *lb, (Shape){.rank = 1, .d = {n}}, loc);
}

/* cross_entropy(..., reduction = "sum" or "none"): nll_loss of log_softmax over the classes
 * (axis 1, as torch's), that reduction, plus label smoothing's eps mean(-log_softmax) over the
 * classes in each kept element (0 where the label is ignore_index), as torch's. */
static Value ce_reduced(Elab *E, const char *fn, Args *a, int red, SrcLoc loc) {
    static const char *names[] = {"input", "target", "ignore_index", "label_smoothing"};
    int ix[4];
    bool ok = true;
    Args b = args_without(a, red);
    if (!bind_args(E, fn, &b, names, 4, ix, 2, loc)) return verror;
    double ignore = num_arg(E, &b, ix[2], -100, &ok), eps = num_arg(E, &b, ix[3], 0, &ok);
    int x = tensor_arg(E, &b, ix[0]), y = tensor_arg(E, &b, ix[1]);
    if (!ok || x < 0 || y < 0 || !need_f32(E, x, fn, loc) ||
        !check_range(E, fn, "label_smoothing", eps, 0, false, 1, false, arg_loc(&b, ix[3], loc)))
        return verror;
    Args s = {.n = 2};
    s.v[0] = vtensor(x), s.v[1] = vnum(1), s.loc[0] = s.loc[1] = loc, s.kw[1] = "dim";
    Value lp = call_builtin(E, "log_softmax", &s, loc);
    if (lp.k == V_ERROR) return verror;
    Args n = {.n = 4};
    n.v[0] = lp, n.v[1] = vtensor(y), n.v[2] = vnum(ignore), n.v[3] = a->v[red];
    n.loc[0] = n.loc[1] = n.loc[2] = loc, n.loc[3] = a->loc[red];
    n.kw[2] = "ignore_index", n.kw[3] = "reduction";
    Value l = call_builtin(E, "nll_loss", &n, loc);
    if (l.k == V_ERROR || eps == 0) return l;
    /* (1 - eps) nll + eps mean_c(-log p), each element's, 0 where ignored, reduced alike */
    int keep = graph_add2(E->g, OP_NE, y, graph_const(E->g, ignore, loc), loc);
    int sm = reduce_node(E, OP_MEAN, graph_add1(E->g, OP_NEG, lp.node, loc), 2, false, loc);
    int in[3] = {keep, sm, graph_const(E->g, 0, loc)};
    int smooth = graph_add(E->g, OP_SELECT, 3, in, E->g->nodes[y].shape, DT_F32, loc);
    bool none = !strcmp(a->v[red].str, "none");
    if (!none) smooth = reduce_node(E, OP_SUM, smooth, ((int64_t)1 << E->g->nodes[y].shape.rank) - 1, false, loc);
    int scaled = graph_add2(E->g, OP_MUL, l.node, graph_const(E->g, 1 - eps, loc), loc);
    return vtensor(
        graph_add2(E->g, OP_ADD, scaled, graph_add2(E->g, OP_MUL, smooth, graph_const(E->g, eps, loc), loc), loc));
}

/* cross_entropy(logits, labels, ignore_index, label_smoothing) and accuracy(logits, labels);
 * cross_entropy's reduction "mean" is its row op, "sum" and "none" are composed (ce_reduced). */
static Value loss_ce(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    for (int k = 0; op == OP_CROSS_ENTROPY && k < a->n; k++)
        if (a->kw[k] && !strcmp(a->kw[k], "reduction")) {
            Value r = a->v[k];
            if (r.k != V_STR || (strcmp(r.str, "mean") && strcmp(r.str, "sum") && strcmp(r.str, "none"))) {
                diag_error(E->d, a->loc[k], "%s(): reduction is \"mean\", \"sum\" or \"none\"", fn);
                return verror;
            }
            if (strcmp(r.str, "mean")) return ce_reduced(E, fn, a, k, loc);
            Args b = args_without(a, k); /* "mean": the row op */
            return loss_ce(E, op, fn, &b, loc);
        }
    Surface sf;
    surface_parse(op_info[op].surface, &sf);
    int ix[8];
    if (!bind_args(E, fn, a, sf.names, sf.n, ix, 2, loc)) return verror;
    int lg = tensor_arg(E, a, ix[0]), lb = tensor_arg(E, a, ix[1]);
    double p[3] = {0, 0, 0};
    bool nums = op != OP_CROSS_ENTROPY || ce_scalars(E, fn, a, &sf, ix, p);
    if (lg < 0 || lb < 0) return verror;
    classes_last(E, &lg, &lb, loc);
    if (!check_logits_labels(E, fn, lg, lb, loc) || !nums) return verror;
    int in[2] = {lg, lb};
    int r = graph_add(E->g, op, 2, in, shape_scalar(), DT_F32, loc);
    if (op == OP_CROSS_ENTROPY) memcpy(E->g->nodes[r].attr.scalars.p, p, sizeof p);
    return vtensor(r);
}

/* x with its axes in the order perm (output axis i is x's axis perm[i]).  Orders compose, so a
 * permute of a permute or transpose reads their source once; the identity is x itself, a swap of
 * the last two axes a TRANSPOSE (which folds into matrix products), any other order a PERMUTE. */
int permute_node(Elab *E, int x, const int8_t *perm, SrcLoc loc) {
    int8_t p[IR_MAX_RANK];
    memcpy(p, perm, IR_MAX_RANK);
    const Node *n = &E->g->nodes[x];
    if (op_permutes(n->op)) {
        int8_t inner[IR_MAX_RANK];
        node_perm(n, inner);
        for (int i = 0; i < n->shape.rank; i++) p[i] = inner[perm[i]];
        x = n->in[0];
    }
    Shape xs = E->g->nodes[x].shape, s = xs;
    int r = xs.rank, moved = 0;
    for (int i = 0; i < r; i++) {
        s.d[i] = xs.d[p[i]];
        moved += p[i] != i;
    }
    if (!moved) return x;
    bool swap = moved == 2 && p[r - 2] == r - 1;
    int y = graph_add(E->g, swap ? OP_TRANSPOSE : OP_PERMUTE, 1, &x, s, E->g->nodes[x].dtype, loc);
    if (!swap) memcpy(E->g->nodes[y].attr.perm.p, p, IR_MAX_RANK);
    return y;
}

/* x with axes a and b (bits, as axis_bit gives them) swapped. */
static int swap_axes(Elab *E, int x, int64_t a, int64_t b, SrcLoc loc) {
    int8_t p[IR_MAX_RANK] = IR_PERM_ID;
    int i = __builtin_ctzll((unsigned long long)a), j = __builtin_ctzll((unsigned long long)b);
    p[i] = (int8_t)j;
    p[j] = (int8_t)i;
    return permute_node(E, x, p, loc);
}

/* transpose(x): the last two axes swapped (x.mT); transpose(x, dim0, dim1), also
 * swapaxes(x, axis0, axis1) and swapdims(x, dim0, dim1), as torch's: those two. */
Value transpose(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *tn[] = {"x", "dim0", "dim1"}, *an[] = {"x", "axis0", "axis1"};
    int ix[3];
    bool ok = true;
    if (!bind_args(E, fn, a, strcmp(fn, "swapaxes") ? tn : an, 3, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0) return verror;
    Shape s = E->g->nodes[x].shape;
    if (ix[1] < 0 && ix[2] < 0) {
        if (s.rank < 2) {
            diag_error(E->d, loc,
                       "transpose() swaps the last two axes: it needs a tensor of 2 or more dimensions, got %s",
                       tstr(E, x));
            return verror;
        }
        return vtensor(swap_axes(E, x, (int64_t)1 << (s.rank - 2), (int64_t)1 << (s.rank - 1), loc));
    }
    if (ix[1] < 0 || ix[2] < 0) {
        diag_error(E->d, loc, "%s() takes both axes to swap (%s(x, 1, 2)), or none: the last two", fn, fn);
        return verror;
    }
    int64_t b0 = axis_bit(E, a->v[ix[1]], a->loc[ix[1]], s.rank, &ok);
    int64_t b1 = ok ? axis_bit(E, a->v[ix[2]], a->loc[ix[2]], s.rank, &ok) : 0;
    return ok ? vtensor(swap_axes(E, x, b0, b1, loc)) : verror;
}

/* permute(x, dims...) or permute(x, (dims)), as torch.permute: output axis i is x's axis dims[i],
 * each axis once (negatives from the end). */
static Value read_permute(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    (void)op;
    for (int i = 0; i < a->n; i++)
        if (a->kw[i] && strcmp(a->kw[i], "dims")) {
            diag_error(E->d, a->loc[i], "%s() has no argument named '%s'", fn, a->kw[i]);
            return verror;
        }
    if (a->n == 0) {
        diag_error(E->d, loc, "%s() takes a tensor and its new order of axes: %s(x, 0, 2, 1, 3)", fn, fn);
        return verror;
    }
    int x = tensor_arg(E, a, 0);
    if (x < 0) return verror;
    Value *v;
    int n = rest_values(a, &v);
    Shape s = E->g->nodes[x].shape;
    if (n != s.rank) {
        diag_error(E->d, loc, "%s(): %d axes for %s, which has %d (every axis once, in its new place)", fn, n,
                   tstr(E, x), s.rank);
        return verror;
    }
    int8_t p[IR_MAX_RANK] = IR_PERM_ID;
    int64_t seen = 0;
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        SrcLoc at = a->loc[i + 1 < a->n ? i + 1 : a->n - 1];
        int64_t bit = axis_bit(E, v[i], at, s.rank, &ok);
        if (ok && (seen & bit)) {
            diag_error(E->d, at, "%s(): axis %g is given twice", fn, v[i].num);
            ok = false;
        }
        seen |= bit;
        if (ok) p[i] = (int8_t)__builtin_ctzll((unsigned long long)bit);
    }
    return ok ? vtensor(permute_node(E, x, p, loc)) : verror;
}

/* A view of x with shape s; chains of reshapes read the original. */
int reshape_node(Elab *E, int x, Shape s, SrcLoc loc) {
    /* reshape of a reshape reads the original: chains stay one long, so the passes that follow
     * a reshape to its storage (recursively) never meet a long chain */
    while (E->g->nodes[x].op == OP_RESHAPE) x = E->g->nodes[x].in[0];
    int in[1] = {x};
    return graph_add(E->g, OP_RESHAPE, 1, in, s, E->g->nodes[x].dtype, loc);
}

/* A shape with the -1 a reshape was given at axis `infer` (when >= 0): "f32[B,-1,7]". */
static const char *reshape_target(Elab *E, Shape s, DType dt, int infer) {
    char buf[96];
    shape_str(s, dt, E->g->batch_name, buf, sizeof buf);
    if (infer < 0) return arena_strdup(E->a, buf);
    char *p = strchr(buf, '[') + 1;
    for (int i = 0; i < infer; i++) p = strchr(p, ',') + 1;
    size_t len = strcspn(p, ",]");
    return arena_printf(E->a, "%.*s-1%s", (int)(p - buf), buf, p + len);
}

/* "B*2432 elements" or "760 elements" */
static const char *count_str(Elab *E, Shape s) {
    bool b;
    int64_t k = shape_prod(s, ~0u, &b);
    const char *bn = E->g->batch_name ? E->g->batch_name : "B";
    if (!b) return arena_printf(E->a, "%lld elements", (long long)k);
    return k == 1 ? arena_printf(E->a, "%s elements", bn) : arena_printf(E->a, "%s*%lld elements", bn, (long long)k);
}

/* The new dimensions of reshape/view: numbers, the batch symbol (B, or B * T: the batch merged with
 * an axis of T), at most one -1, one by one or as one tuple.  -1 is inferred from the element
 * count as torch.reshape does it; where x has the batch axis and the other dimensions do not, it
 * is B times what is left: [B, T, V] to (-1, V) is [B*T, V]. */
static bool reshape_dims(Elab *E, Args *a, int x, SrcLoc loc, Shape *s, int *infer) {
    Value *v;
    int n = rest_values(a, &v);
    *infer = -1;
    if (n > IR_MAX_RANK) {
        diag_error(E->d, loc, "reshape(): at most %d dimensions", IR_MAX_RANK);
        return false;
    }
    *s = (Shape){0};
    for (int i = 0; i < n; i++) {
        SrcLoc at = a->loc[i + 1 < a->n ? i + 1 : a->n - 1];
        if (v[i].k == V_NUM && v[i].num == -1) {
            if (*infer >= 0) {
                diag_error(E->d, at, "reshape(): only one dimension can be -1");
                return false;
            }
            *infer = s->rank;
            s->d[s->rank++] = 1;
        } else if (!eval_dim(E, v[i], at, true, &s->d[s->rank++])) return false;
        if (shape_batch_axis(*s) >= 0 && shape_batch_axis(*s) < s->rank - 1 && dim_is_batch(s->d[s->rank - 1])) {
            diag_error(E->d, at, "reshape(): the batch dimension appears twice (a tensor has at most one batch axis)");
            return false;
        }
    }
    bool fb, tb;
    int64_t have = shape_prod(E->g->nodes[x].shape, ~0u, &fb), known = shape_prod(*s, ~0u, &tb);
    if (*infer >= 0 && have % known == 0) s->d[*infer] = fb && !tb ? dim_batch_times(have / known) : have / known;
    return true;
}

/* Why reshaping `from` to s fails: the batch axis went missing or came from nowhere, or the counts
 * differ (a -1 that no size fits). */
static const char *reshape_why(Elab *E, int x, Shape s, int infer) {
    Shape from = E->g->nodes[x].shape;
    bool fb, tb;
    shape_prod(from, ~0u, &fb);
    shape_prod(s, ~0u, &tb);
    const char *bn = E->g->batch_name ? E->g->batch_name : "B";
    if (fb && !tb)
        return arena_printf(E->a, "the batch axis must stay, alone or merged with others (%s * 32, or -1 for it)", bn);
    if (!fb && tb) return arena_printf(E->a, "%s has no batch axis", tstr(E, x));
    if (infer >= 0) return arena_printf(E->a, "no size for the -1 gives %s", count_str(E, from));
    return arena_printf(E->a, "that is %s", count_str(E, s));
}

static Value reshape(Elab *E, Args *a, SrcLoc loc) {
    if (a->n < 2) {
        diag_error(E->d, loc, "reshape() takes a tensor and its new dimensions");
        return verror;
    }
    int x = tensor_arg(E, a, 0), infer;
    Shape s;
    if (x < 0 || !reshape_dims(E, a, x, loc, &s, &infer)) return verror;
    bool fb, tb;
    int64_t kf = shape_prod(E->g->nodes[x].shape, ~0u, &fb), kt = shape_prod(s, ~0u, &tb);
    if (fb != tb || kf != kt) {
        diag_error(E->d, loc, "cannot reshape %s (%s) to %s: %s", tstr(E, x), count_str(E, E->g->nodes[x].shape),
                   reshape_target(E, s, E->g->nodes[x].dtype, infer), reshape_why(E, x, s, infer));
        return verror;
    }
    return vtensor(reshape_node(E, x, s, loc));
}

static Value read_view(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    (void)fn;
    return reshape(E, a, loc);
}

/* flatten(x, start_dim = 0, end_dim = -1), as torch.flatten: the axes start..end become one (with
 * the batch axis among them, the batch axis merged with the others: [B, T, V] to [B*T, V]). */
static Value read_flatten(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "start_dim", "end_dim"};
    int ix[3];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 3, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0) return verror;
    Shape s = E->g->nodes[x].shape;
    int64_t lo = ix[1] < 0 ? 1 : axis_bit(E, a->v[ix[1]], a->loc[ix[1]], s.rank, &ok);
    int64_t hi =
        ix[2] < 0 ? (int64_t)1 << (s.rank ? s.rank - 1 : 0) : axis_bit(E, a->v[ix[2]], a->loc[ix[2]], s.rank, &ok);
    if (!ok || s.rank == 0) return ok ? vtensor(x) : verror;
    int from = __builtin_ctzll((unsigned long long)lo), to = __builtin_ctzll((unsigned long long)hi);
    if (from > to) {
        diag_error(E->d, loc, "%s(): start_dim (axis %d) comes after end_dim (axis %d)", fn, from, to);
        return verror;
    }
    Shape r = {0};
    for (int i = 0; i < s.rank; i++) {
        if (i <= from || i > to) r.d[r.rank++] = s.d[i];
        else {
            int64_t *m = &r.d[r.rank - 1], k = dim_size(*m, 1) * dim_size(s.d[i], 1);
            *m = dim_is_batch(*m) || dim_is_batch(s.d[i]) ? dim_batch_times(k) : k;
        }
    }
    return vtensor(reshape_node(E, x, r, loc));
}

/* to(x, cuda | cpu) places x, as x.to(device); to(x, bf16 | f16 | f32) converts it, as
 * x.to(dtype) (rounding to nearest even; the ops after it follow torch's type promotion). */
Value place_instance(Elab *E, Inst *inst, Value dev, SrcLoc loc) {
    if (dev.k != V_DEVICE) {
        diag_error(E->d, loc,
                   "a block instance moves to a device (to(%s, cuda(1))); its parameters stay f32 (for "
                   "half precision: precision = bf16 in the train section)",
                   inst->scope);
        return verror;
    }
    inst->placed = true;
    inst->dev = (Device)dev.num;
    for (int k = inst->first; k < inst->end; k++) /* its parameters, an inner instance's too */
        if (E->g->nodes[k].op == OP_PARAM) {
            E->g->nodes[k].dev = inst->dev;
            E->g->nodes[k].dev_fixed = true;
        }
    return (Value){.k = V_INST, .inst = inst};
}

Value to_device(Elab *E, Args *a, SrcLoc loc) {
    if (a->n == 2 && a->v[0].k == V_INST) return place_instance(E, a->v[0].inst, a->v[1], loc);
    if (a->n != 2 || (a->v[1].k != V_DEVICE && a->v[1].k != V_DTYPE)) {
        diag_error(E->d, loc, "to() takes a tensor and a device or a dtype: to(x, cuda), to(x, bf16)");
        return verror;
    }
    int x = tensor_arg(E, a, 0);
    if (x < 0) return verror;
    if (a->v[1].k == V_DTYPE) {
        DType t = (DType)a->v[1].num;
        if (!need_f32(E, x, "to()", loc)) return verror;
        if (E->g->nodes[x].dtype == t) return vtensor(x);
        return vtensor(graph_add(E->g, OP_CAST, 1, &x, E->g->nodes[x].shape, t, loc));
    }
    int n = graph_add1(E->g, OP_COPY, x, loc);
    E->g->nodes[n].dev = (Device)a->v[1].num;
    E->g->nodes[n].dev_fixed = true;
    E->g->nodes[n].user_copy = true;
    return vtensor(n);
}

/* ---- joining and cutting ------------------------------------------------------------------ */

/* concat((a, b, ...), axis = 0), also cat(...), as torch.cat: the same shape but along axis;
 * not along the batch axis (its length is only known when the step runs). */
static Value read_concat(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"tensors", "axis"};
    int ix[2];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 2, ix, 1, loc)) return verror;
    Value t = a->v[ix[0]];
    if (t.k != V_TUPLE || t.nitems < 1) {
        diag_error(E->d, a->loc[ix[0]], "%s() takes a tuple of tensors: %s((a, b), axis = 1)", fn, fn);
        return verror;
    }
    int x[64], n = t.nitems < 64 ? t.nitems : 64;
    for (int k = 0; k < n; k++)
        if ((x[k] = as_tensor(E, t.items[k], a->loc[ix[0]])) < 0) return verror;
    for (int k = 0; k < n; k++) /* i32 indices join with i32 ones */
        if (E->g->nodes[x[0]].dtype == DT_I32 ? E->g->nodes[x[k]].dtype != DT_I32 : !need_f32(E, x[k], fn, loc)) {
            if (E->g->nodes[x[0]].dtype == DT_I32)
                diag_error(E->d, loc, "%s(): i32 %s joins only with i32 indices, got %s", fn, tstr(E, x[0]),
                           tstr(E, x[k]));
            return verror;
        }
    Shape s0 = E->g->nodes[x[0]].shape;
    if (s0.rank == 0) {
        diag_error(E->d, loc, "%s(): cannot join scalars", fn);
        return verror;
    }
    int64_t bit = ix[1] < 0 ? 1 : axis_bit(E, a->v[ix[1]], a->loc[ix[1]], s0.rank, &ok);
    if (!ok) return verror;
    int ax = __builtin_ctzll((unsigned long long)bit);
    if (dim_is_batch(s0.d[ax])) {
        diag_error(E->d, arg_loc(a, ix[1], loc), "%s(): cannot join along the batch axis of %s", fn, tstr(E, x[0]));
        return verror;
    }
    for (int k = 1; k < n; k++) {
        Shape s = E->g->nodes[x[k]].shape;
        bool same = s.rank == s0.rank && !dim_is_batch(s.d[ax]);
        for (int d = 0; same && d < s.rank; d++) same = d == ax || s.d[d] == s0.d[d];
        if (!same) {
            diag_error(E->d, loc, "%s(): %s and %s differ outside axis %d", fn, tstr(E, x[0]), tstr(E, x[k]), ax);
            return verror;
        }
    }
    int acc = x[0];
    for (int k = 1; k < n;) { /* four at a time, the first being what is joined so far */
        int in[CONCAT_MAX_IN] = {acc}, m = 1;
        Shape s = E->g->nodes[acc].shape;
        while (m < CONCAT_MAX_IN && k < n) {
            s.d[ax] += E->g->nodes[x[k]].shape.d[ax];
            in[m++] = x[k++];
        }
        for (int j = 0; j < m; j++) in[j] = as_real(E, in[j], loc);
        acc = graph_add(E->g, OP_CONCAT, m, in, s, DT_F32, loc);
        E->g->nodes[acc].attr.slice.axis = ax;
        if (E->g->nodes[x[0]].dtype == DT_I32) acc = as_i32(E, acc, loc);
    }
    return vtensor(acc);
}

/* The helpers that join and cut (codegen/helpers.def) move `real`s, so i32 indices pass through
 * them as reals: converted by elementwise casts, exact for the values of any index (|v| < 2^24). */
int as_real(Elab *E, int x, SrcLoc loc) {
    return E->g->nodes[x].dtype == DT_I32 ? graph_add1(E->g, OP_CAST, x, loc) : x;
}

int as_i32(Elab *E, int x, SrcLoc loc) {
    int y = graph_add1(E->g, OP_CAST, x, loc);
    E->g->nodes[y].dtype = DT_I32;
    return y;
}

int slice_node(Elab *E, int x, int ax, int64_t start, int64_t len, int64_t step, SrcLoc loc) {
    Shape s = E->g->nodes[x].shape;
    if (start == 0 && step == 1 && len == s.d[ax]) return x;
    s.d[ax] = len;
    bool idx = E->g->nodes[x].dtype == DT_I32;
    x = as_real(E, x, loc);
    int y = graph_add(E->g, OP_SLICE, 1, &x, s, DT_F32, loc);
    E->g->nodes[y].attr.slice.axis = ax;
    E->g->nodes[y].attr.slice.start = start;
    E->g->nodes[y].attr.slice.step = step;
    return idx ? as_i32(E, y, loc) : y;
}

/* narrow(x, axis, start, length) as torch.narrow, and slice(x, axis, start, stop, step = 1)
 * as x[..., start:stop:step] (negative start/stop count from the end, as in Python). */
static Value read_slice(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    bool narrow = !strcmp(fn, "narrow");
    static const char *sn[] = {"x", "axis", "start", "stop", "step"};
    static const char *nn[] = {"x", "axis", "start", "length"};
    int ix[5];
    bool ok = true;
    if (!bind_args(E, fn, a, narrow ? nn : sn, narrow ? 4 : 5, ix, narrow ? 4 : 3, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Shape s = E->g->nodes[x].shape;
    int64_t bit = axis_bit(E, a->v[ix[1]], a->loc[ix[1]], s.rank, &ok);
    if (!ok) return verror;
    int ax = __builtin_ctzll((unsigned long long)bit);
    if (dim_is_batch(s.d[ax])) {
        diag_error(E->d, a->loc[ix[1]], "%s(): cannot cut the batch axis of %s", fn, tstr(E, x));
        return verror;
    }
    double L = (double)s.d[ax];
    double start = num_arg(E, a, ix[2], 0, &ok);
    double stop = narrow ? start + num_arg(E, a, ix[3], 0, &ok) : num_arg(E, a, ix[3], L, &ok);
    double step = narrow ? 1 : num_arg(E, a, ix[4], 1, &ok);
    if (!ok) return verror;
    if (start != floor(start) || stop != floor(stop) || step != floor(step) || step < 1 || fabs(start) > 1e15 ||
        fabs(stop) > 1e15) {
        diag_error(E->d, loc, "%s(): start, %s and step are integers, step at least 1", fn, narrow ? "length" : "stop");
        return verror;
    }
    if (!narrow) { /* Python's rules: negatives from the end, then clipped to [0, L] */
        if (start < 0) start += L;
        if (stop < 0) stop += L;
        start = start < 0 ? 0 : start > L ? L : start;
        stop = stop < 0 ? 0 : stop > L ? L : stop;
    } else if (start < 0 || stop > L || stop < start) {
        diag_error(E->d, loc, "%s(): [%g, %g) is outside axis %d of %s (length %g)", fn, start, stop, ax, tstr(E, x),
                   L);
        return verror;
    }
    int64_t len = stop > start ? (int64_t)((stop - start + step - 1) / step) : 0;
    if (len < 1) {
        diag_error(E->d, loc, "%s(): the slice of axis %d of %s is empty", fn, ax, tstr(E, x));
        return verror;
    }
    return vtensor(slice_node(E, x, ax, (int64_t)start, len, (int64_t)step, loc));
}

/* The pieces of x along axis ax, of the lengths len[0..n-1] (summing to the axis), as a tuple. */
static Value split_pieces(Elab *E, int x, int ax, const int64_t *len, int n, SrcLoc loc) {
    Value t = {.k = V_TUPLE, .nitems = n};
    t.items = arena_alloc(E->a, (size_t)n * sizeof *t.items);
    int64_t start = 0;
    for (int k = 0; k < n; k++) {
        t.items[k] = vtensor(slice_node(E, x, ax, start, len[k], 1, loc));
        start += len[k];
    }
    return t;
}

/* The tensor and the axis (dim, default 0) of split and chunk: not the batch axis. */
static bool split_axis(Elab *E, const char *fn, Args *a, const int *ix, int *x, int *ax, int64_t *L) {
    bool ok = true;
    *x = tensor_arg(E, a, ix[0]);
    if (*x < 0 || !need_f32(E, *x, fn, a->loc[ix[0]])) return false;
    Shape s = E->g->nodes[*x].shape;
    if (s.rank == 0) {
        diag_error(E->d, a->loc[ix[0]], "%s(): cannot split a scalar", fn);
        return false;
    }
    int64_t bit = ix[2] < 0 ? 1 : axis_bit(E, a->v[ix[2]], a->loc[ix[2]], s.rank, &ok);
    if (!ok) return false;
    *ax = __builtin_ctzll((unsigned long long)bit);
    if (dim_is_batch(s.d[*ax])) {
        diag_error(E->d, arg_loc(a, ix[2], a->loc[ix[0]]), "%s(): cannot split the batch axis of %s", fn, tstr(E, *x));
        return false;
    }
    *L = s.d[*ax];
    return true;
}

/* split(x, split_size_or_sections, dim = 0), as torch.split: pieces of split_size along dim (the
 * last one shorter when it does not divide), or of the lengths in a tuple, which sum to the axis;
 * a tuple of tensors (q, k, v = split(qkv, C, 2)).  Each piece is a copy (a slice). */
static Value read_split(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "split_size_or_sections", "dim"};
    int ix[3], x, ax, n = 0;
    int64_t L, len[64];
    if (!bind_args(E, fn, a, names, 3, ix, 2, loc) || !split_axis(E, fn, a, ix, &x, &ax, &L)) return verror;
    Value v = a->v[ix[1]];
    SrcLoc at = a->loc[ix[1]];
    if (v.k == V_TUPLE) {
        int64_t sum = 0;
        for (int k = 0; k < v.nitems; k++) {
            Value it = v.items[k];
            if (it.k != V_NUM || it.num != floor(it.num) || it.num < 1 || it.num > 1e12 || v.nitems > 64) {
                diag_error(E->d, at, "%s(): the sections are up to 64 positive integers", fn);
                return verror;
            }
            sum += len[n++] = (int64_t)it.num;
        }
        if (sum != L) {
            diag_error(E->d, at, "%s(): the sections sum to %lld, but axis %d of %s has %lld", fn, (long long)sum, ax,
                       tstr(E, x), (long long)L);
            return verror;
        }
        return split_pieces(E, x, ax, len, n, loc);
    }
    if (v.k != V_NUM || v.num != floor(v.num) || v.num < 1) {
        diag_error(E->d, at, "%s(): split_size_or_sections is a positive integer or a tuple of them", fn);
        return verror;
    }
    int64_t size = v.num < (double)L ? (int64_t)v.num : L;
    if ((L + size - 1) / size > 64) {
        diag_error(E->d, at, "%s(): %lld pieces of %lld; at most 64", fn, (long long)((L + size - 1) / size),
                   (long long)size);
        return verror;
    }
    for (int64_t start = 0; start < L; start += size) len[n++] = start + size <= L ? size : L - start;
    return split_pieces(E, x, ax, len, n, loc);
}

/* chunk(x, chunks, dim = 0), as torch.chunk: pieces of ceil(L / chunks) along dim, the last
 * shorter; fewer than `chunks` when that size leaves nothing for the rest. */
static Value read_chunk(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "chunks", "dim"};
    int ix[3], x, ax, n = 0;
    int64_t L, len[64];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 3, ix, 2, loc) || !split_axis(E, fn, a, ix, &x, &ax, &L)) return verror;
    double c = num_arg(E, a, ix[1], 1, &ok);
    if (!ok || !check_count(E, fn, "chunks", c, 64, a->loc[ix[1]])) return verror;
    int64_t size = (L + (int64_t)c - 1) / (int64_t)c;
    for (int64_t start = 0; start < L; start += size) len[n++] = start + size <= L ? size : L - start;
    return split_pieces(E, x, ax, len, n, loc);
}

/* unbind(x, dim = 0), as torch.unbind: a tuple of x's slices along dim, that axis dropped (not
 * the batch axis; at most 64). */
static Value read_unbind(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "dim"};
    int ix[3] = {-1, -1, -1}, x, ax;
    int64_t L;
    if (!bind_args(E, fn, a, names, 2, ix, 1, loc)) return verror;
    ix[2] = ix[1]; /* split_axis reads dim third */
    if (!split_axis(E, fn, a, ix, &x, &ax, &L)) return verror;
    if (L > 64) {
        diag_error(E->d, arg_loc(a, ix[1], loc), "%s(): %lld pieces, more than 64", fn, (long long)L);
        return verror;
    }
    int64_t len[64];
    for (int k = 0; k < L; k++) len[k] = 1;
    Value t = split_pieces(E, x, ax, len, (int)L, loc);
    Shape s = E->g->nodes[x].shape, r = {0};
    for (int i = 0; i < s.rank; i++)
        if (i != ax) r.d[r.rank++] = s.d[i];
    for (int k = 0; k < t.nitems; k++) t.items[k] = vtensor(reshape_node(E, t.items[k].node, r, loc));
    return t;
}

/* ---- masks: comparisons, where, masked_fill, tril, triu; constant tensors -------------------- */

/* eq(input, other), ne, lt, le, gt, ge: the comparison operators as functions (torch.eq, ...). */
static Value read_compare(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "other"};
    int ix[2];
    if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
    return compare(E, op, a->v[ix[0]], a->v[ix[1]], loc);
}

/* where(condition, input, other), as torch.where: input where the condition is not 0 (a mask
 * from a comparison), else other, the three broadcast together; input and other may be numbers
 * (inf too: where(mask, x, -inf)). */
static Value read_where(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"condition", "input", "other"};
    int ix[3], in[3];
    if (!bind_args(E, fn, a, names, 3, ix, 3, loc)) return verror;
    for (int k = 0; k < 3; k++)
        if ((in[k] = tensor_arg(E, a, ix[k])) < 0 || (k > 0 && !need_f32(E, in[k], fn, a->loc[ix[k]]))) return verror;
    Shape s = E->g->nodes[in[0]].shape;
    if (!shape_broadcast(s, E->g->nodes[in[1]].shape, &s) || !shape_broadcast(s, E->g->nodes[in[2]].shape, &s)) {
        diag_error(E->d, loc, "%s(): condition %s, input %s and other %s do not broadcast", fn, tstr(E, in[0]),
                   tstr(E, in[1]), tstr(E, in[2]));
        return verror;
    }
    return vtensor(graph_add(E->g, op, 3, in, s, dtype_join(E->g, 2, in + 1, DT_F32), loc));
}

/* masked_fill(input, mask, value), as torch's: value where the mask is not 0, input elsewhere;
 * the mask broadcasts to input's shape (masked_fill(att, tril(ones(T, T)) == 0, -inf)). */
static Value read_masked_fill(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "mask", "value"};
    int ix[3];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 3, ix, 3, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), m = tensor_arg(E, a, ix[1]);
    if (x < 0 || m < 0 || !need_f32(E, x, fn, a->loc[ix[0]])) return verror;
    int v = a->v[ix[2]].k == V_TENSOR ? a->v[ix[2]].node : graph_const(E->g, num_or_inf_arg(E, a, ix[2], 0, &ok), loc);
    if (!ok || !need_f32(E, v, fn, a->loc[ix[2]])) return verror;
    Shape xs = E->g->nodes[x].shape, s;
    if (shape_numel(E->g->nodes[v].shape, 2) != 1 || E->g->nodes[v].shape.rank > xs.rank) {
        diag_error(E->d, a->loc[ix[2]], "%s(): value is a number or a tensor of one element, got %s", fn, tstr(E, v));
        return verror;
    }
    if (!shape_broadcast(xs, E->g->nodes[m].shape, &s) || !shape_eq(s, xs)) {
        diag_error(E->d, a->loc[ix[1]], "%s(): the mask %s does not broadcast to the input's shape %s", fn, tstr(E, m),
                   tstr(E, x));
        return verror;
    }
    int in[3] = {m, v, x};
    return vtensor(graph_add(E->g, OP_SELECT, 3, in, xs, E->g->nodes[x].dtype, loc));
}

/* tril(x, diagonal = 0) and triu(x, diagonal = 0), as torch's: over the last two axes. */
static Value read_tri(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "diagonal"};
    int ix[2];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 2, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    double d = num_arg(E, a, ix[1], 0, &ok);
    if (x < 0 || !ok || !need_f32(E, x, fn, a->loc[ix[0]])) return verror;
    if (d != floor(d) || fabs(d) > 1e12) {
        diag_error(E->d, a->loc[ix[1]], "%s(): diagonal is an integer, got %g", fn, d);
        return verror;
    }
    if (E->g->nodes[x].shape.rank < 2) {
        diag_error(E->d, loc, "%s(): needs a tensor of 2 or more dimensions (its last two are the matrix), got %s", fn,
                   tstr(E, x));
        return verror;
    }
    int r = graph_add1(E->g, op, x, loc);
    E->g->nodes[r].attr.scalars.p[0] = d;
    return vtensor(r);
}

/* arange(end), arange(start, end, step = 1), as torch.arange: start, start + step, ... up to
 * (not including) end, as f32 (exact for integers up to 2^24). */
static Value read_arange(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"start", "end", "step"};
    int ix[3];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 3, ix, 1, loc)) return verror;
    double start = num_arg(E, a, ix[0], 0, &ok), end = num_arg(E, a, ix[1], 0, &ok),
           step = num_arg(E, a, ix[2], 1, &ok);
    if (!ok) return verror;
    if (ix[1] < 0) end = start, start = 0; /* arange(5): the one number is the end */
    double n = step != 0 ? ceil((end - start) / step) : 0;
    if (step == 0 || n < 1 || n > 1e9) {
        diag_error(E->d, loc, "%s(): from %g to %g by %g gives %s values", fn, start, end, step,
                   n > 1e9 ? "too many" : "no");
        return verror;
    }
    int64_t len = (int64_t)n;
    int r = graph_add(E->g, op, 0, NULL, shape_of(1, &len), DT_F32, loc);
    E->g->nodes[r].attr.scalars.p[0] = start;
    E->g->nodes[r].attr.scalars.p[1] = step;
    return vtensor(r);
}

/* The dimensions of a constructor, one by one or as one tuple: numbers or the batch symbol. */
static bool size_dims(Elab *E, Value *v, int n, const SrcLoc *at, Shape *s) {
    bool tuple = n == 1 && v[0].k == V_TUPLE; /* its items have the tuple's location */
    if (tuple) n = v[0].nitems, v = v[0].items;
    *s = (Shape){0};
    if (n > IR_MAX_RANK) {
        diag_error(E->d, at[0], "at most %d dimensions", IR_MAX_RANK);
        return false;
    }
    for (int i = 0; i < n; i++)
        if (!eval_dim(E, v[i], at[tuple ? 0 : i], true, &s->d[s->rank++])) return false;
    if (shape_batch_axis(*s) >= 0) {
        Shape t = *s;
        t.d[shape_batch_axis(t)] = 1;
        if (shape_batch_axis(t) >= 0) {
            diag_error(E->d, at[0], "the batch dimension appears twice (a tensor has at most one batch axis)");
            return false;
        }
    }
    return true;
}

/* A tensor of shape s holding v everywhere (a scalar broadcast: no memory of its own unless it
 * is used alone). */
static int filled(Elab *E, Shape s, double v, SrcLoc loc) {
    int c = graph_const(E->g, v, loc);
    return s.rank ? graph_add(E->g, OP_EXPAND, 1, &c, s, DT_F32, loc) : c;
}

/* full(size, fill_value), as torch.full: size a tuple ((T, T)) or a number; fill_value may be
 * +-inf.  ones(*size) and zeros(*size): dimensions one by one or as a tuple. */
static Value read_full(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    bool full = !strcmp(fn, "full"), ok = true;
    Shape s;
    for (int i = 0; i < a->n; i++)
        if (a->kw[i] && (!full || (strcmp(a->kw[i], "size") && strcmp(a->kw[i], "fill_value")))) {
            diag_error(E->d, a->loc[i], "%s() has no argument named '%s'", fn, a->kw[i]);
            return verror;
        }
    if (full) {
        static const char *names[] = {"size", "fill_value"};
        int ix[2];
        if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
        double v = num_or_inf_arg(E, a, ix[1], 0, &ok);
        if (!ok || !size_dims(E, &a->v[ix[0]], 1, &a->loc[ix[0]], &s)) return verror;
        return vtensor(filled(E, s, v, loc));
    }
    if (a->n == 0) {
        diag_error(E->d, loc, "%s() takes the dimensions of the tensor: %s(T, T)", fn, fn);
        return verror;
    }
    if (!size_dims(E, a->v, a->n, a->loc, &s)) return verror;
    return vtensor(filled(E, s, fn[0] == 'o', loc));
}

/* adaptive_avg_pool2d(x, 1): global average pooling to [N, C, 1, 1] (other sizes: not yet). */
/* ---- builtins from ops.def ------------------------------------------------------------------ */

/* The op whose surface name is fn, or -1. */
static int surface_op(const char *fn) {
    size_t len = strlen(fn);
    for (int op = 0; op < OP_COUNT; op++) {
        const char *sf = op_info[op].surface;
        if (sf && strcspn(sf, "(") == len && !strncmp(sf, fn, len)) return op;
    }
    return -1;
}

/* An elementwise op with numeric arguments (leaky_relu(x, negative_slope = 0.01)): the tensors
 * first, then the numbers, read into attr.scalars.p by position. */
static Value ew_call(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    const OpInfo *oi = &op_info[op];
    Surface sf;
    surface_parse(oi->surface, &sf);
    if (oi->arity == 1 && sf.n == 1) return unary(E, op, fn, a, loc);
    int ix[8], required = oi->arity;
    while (required < sf.n && !sf.has_dflt[required]) required++;
    if (!bind_args(E, fn, a, sf.names, sf.n, ix, required, loc)) return verror;
    int x[2] = {-1, -1};
    for (int k = 0; k < oi->arity; k++) {
        x[k] = tensor_arg(E, a, ix[k]);
        if (x[k] < 0 || !need_f32(E, x[k], fn, loc)) return verror;
    }
    bool ok = true;
    double p[3] = {0, 0, 0};
    for (int k = oi->arity; k < sf.n && k - oi->arity < 3; k++) {
        /* an argument whose default is +-inf (clamp's bounds) may be given as inf too */
        p[k - oi->arity] =
            isinf(sf.dflt[k]) ? num_or_inf_arg(E, a, ix[k], sf.dflt[k], &ok) : num_arg(E, a, ix[k], sf.dflt[k], &ok);
        ok =
            ok && (ix[k] < 0 || isinf(sf.dflt[k]) || check_finite(E, fn, sf.names[k], p[k - oi->arity], a->loc[ix[k]]));
    }
    if (!ok) return verror;
    int r = oi->arity == 1 ? graph_add1(E->g, op, x[0], loc) : graph_add2(E->g, op, x[0], x[1], loc);
    if (r < 0) {
        diag_error(E->d, loc, "%s(): shapes %s and %s do not broadcast", fn, tstr(E, x[0]), tstr(E, x[1]));
        return verror;
    }
    memcpy(E->g->nodes[r].attr.scalars.p, p, sizeof p);
    return vtensor(r);
}

/* Builtins whose reading is their own (the generic readers go by the op's kind). */
typedef Value Reader(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc);
/* matmul(a, b) and pow(a, b): the operators @ and ** as functions. */
static Value read_binary(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    if (a->n != 2) {
        diag_error(E->d, loc, "%s() takes two arguments", fn);
        return verror;
    }
    return op == OP_MATMUL ? matmul(E, a->v[0], a->v[1], loc) : powc(E, a->v[0], a->v[1], loc);
}
static Value read_transpose(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    (void)op;
    return transpose(E, fn, a, loc);
}
static Value read_swapaxes(Elab *E, const char *fn, Args *a, SrcLoc loc) { return transpose(E, fn, a, loc); }
/* contiguous(x), x.contiguous(): x itself.  Every value nnc stores is laid out in its own axes'
 * order (a transpose or permute writes its result), so a view after it needs no copy; nanoGPT
 * writes y.transpose(1, 2).contiguous().view(B, T, C). */
static Value read_contiguous(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x"};
    int ix[1];
    if (!bind_args(E, fn, a, names, 1, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    return x < 0 ? verror : vtensor(x);
}
static Value read_reshape(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    (void)op, (void)fn;
    return reshape(E, a, loc);
}
static Value read_to(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    (void)op, (void)fn;
    return to_device(E, a, loc);
}

/* gelu(x, approximate = "none" | "tanh"), as torch.nn.functional.gelu */
static Value read_gelu(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "approximate"};
    int ix[2];
    if (!bind_args(E, fn, a, names, 2, ix, 1, loc)) return verror;
    const char *how = ix[1] >= 0 && a->v[ix[1]].k == V_STR ? a->v[ix[1]].str : ix[1] >= 0 ? "" : "none";
    if (strcmp(how, "none") && strcmp(how, "tanh")) {
        diag_error(E->d, a->loc[ix[1]], "gelu(): approximate is \"none\" or \"tanh\"");
        return verror;
    }
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    return vtensor(graph_add1(E->g, !strcmp(how, "tanh") ? OP_GELU_TANH : op, x, loc));
}

static Reader *custom_reader(Op op) {
    static const struct {
        Op op;
        Reader *read;
    } custom[] = {
        {OP_MATMUL, read_binary},     {OP_POWC, read_binary},         {OP_CROSS_ENTROPY, loss_ce},
        {OP_ACCURACY, loss_ce},       {OP_TRANSPOSE, read_transpose}, {OP_RESHAPE, read_reshape},
        {OP_PERMUTE, read_permute},   {OP_EQ, read_compare},          {OP_NE, read_compare},
        {OP_LT, read_compare},        {OP_LE, read_compare},          {OP_GT, read_compare},
        {OP_GE, read_compare},        {OP_SELECT, read_where},        {OP_TRIL, read_tri},
        {OP_TRIU, read_tri},          {OP_ARANGE, read_arange},       {OP_COPY, read_to},
        {OP_GELU, read_gelu},         {OP_CONV2D, read_conv2d},       {OP_MAX_POOL2D, read_pool2d},
        {OP_AVG_POOL2D, read_pool2d}, {OP_EMBEDDING, read_embedding}, {OP_SDPA, read_sdpa},
        {OP_ARGMAX, read_argmax},
    };
    for (size_t i = 0; i < NNC_COUNTOF(custom); i++)
        if (custom[i].op == op) return custom[i].read;
    return NULL;
}

/* An op from ops.def by its surface name: its own reader, or the reader of its kind. */
static Value call_op(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    Reader *read = custom_reader(op);
    if (read) return read(E, op, fn, a, loc);
    switch (op_info[op].kind) {
    case OK_EW: return ew_call(E, op, fn, a, loc);
    case OK_REDUCE: return reduce(E, op, fn, a, loc);
    case OK_ROW: return rowwise(E, op, fn, a, loc);
    case OK_LEAF:
    case OK_MATMUL:
    case OK_VIEW:
    case OK_COPY:
    case OK_ASSIGN:
    case OK_HELPER:
    case OK_ATTENTION:
    case OK_COLLECTIVE: break;
    }
    diag_error(E->d, loc, "internal: ops.def gives '%s' a surface but the front end has no reader for it", fn);
    return verror;
}

/* One number of a subscript (an index, or a slice's bound or step) as an integer. */
static bool sub_int(Elab *E, Env *env, Expr *e, const char *what, int64_t *out) {
    Value v = eval(E, env, e);
    if (v.k == V_ERROR) return false;
    if (v.k == V_TENSOR) {
        diag_error(E->d, e->loc,
                   "indexing by a tensor (%s) is not supported: the %s must be a number known when "
                   "the model compiles",
                   tstr(E, v.node), what);
        return false;
    }
    if (v.k != V_NUM || v.num != floor(v.num) || fabs(v.num) > 1e15) {
        diag_error(E->d, e->loc, "a tensor's %s is an integer, got %s", what,
                   v.k == V_NUM ? arena_printf(E->a, "%g", v.num) : kind_name(v.k));
        return false;
    }
    *out = (int64_t)v.num;
    return true;
}

/* Python's None in [] (numpy.newaxis): a new axis of size 1 there. */
bool is_none_index(const Expr *e) { return e->k == E_IDENT && !strcmp(e->str, "None"); }

Value tensor_subscript(Elab *E, Env *env, int x, Arg *items, SrcLoc loc) {
    Shape s = E->g->nodes[x].shape;
    int n = 0, dots = 0, nones = 0;
    for (Arg *it = items; it; it = it->next) {
        dots += it->e->k == E_ELLIPSIS;
        nones += is_none_index(it->e);
        n += it->e->k != E_ELLIPSIS && !is_none_index(it->e);
    }
    if (dots > 1 || n > s.rank) {
        diag_error(E->d, loc, dots > 1 ? "an index holds one '...'" : "%d indices for %s, which has %d dimensions", n,
                   tstr(E, x), s.rank);
        return verror;
    }
    /* the result's axes, in order: each None's, the axes '...' stands for, each slice's */
    int64_t out[IR_MAX_RANK + 8];
    int nout = 0, ax = 0;
    bool moved = nones > 0;
    for (Arg *it = items; it; it = it->next) {
        Expr *e = it->e;
        if (is_none_index(e)) {
            out[nout++] = 1;
            continue;
        }
        if (e->k == E_ELLIPSIS) {
            for (int k = 0; k < s.rank - n; k++, ax++) out[nout++] = s.d[ax]; /* the axes no index names */
            continue;
        }
        int64_t L = s.d[ax];
        bool batch = dim_is_batch(L);
        if (e->k == E_SLICE) {
            int64_t start = 0, stop = L, step = 1;
            if ((e->a && !sub_int(E, env, e->a, "slice start", &start)) ||
                (e->b && !sub_int(E, env, e->b, "slice stop", &stop)) ||
                (e->args && !sub_int(E, env, e->args->e, "slice step", &step)))
                return verror;
            if (step < 1) {
                diag_error(E->d, e->loc, "a slice's step is at least 1, as torch's (flip() reverses an axis)");
                return verror;
            }
            if (!e->a && !e->b && step == 1) { /* ':' keeps the axis as it is, the batch axis too */
                out[nout++] = L;
                ax++;
                continue;
            }
            if (batch) {
                diag_error(E->d, e->loc, "axis %d of %s is the batch axis: it is indexed only as ':'", ax, tstr(E, x));
                return verror;
            }
            if (start < 0) start += L; /* Python's rules: negatives from the end, then clipped */
            if (stop < 0) stop += L;
            start = start < 0 ? 0 : start > L ? L : start;
            stop = stop < 0 ? 0 : stop > L ? L : stop;
            int64_t len = stop > start ? (stop - start + step - 1) / step : 0;
            if (len < 1) {
                diag_error(E->d, e->loc, "the slice of axis %d of %s is empty", ax, tstr(E, x));
                return verror;
            }
            x = slice_node(E, x, ax, start, len, step, e->loc);
            out[nout++] = len;
        } else {
            int64_t i;
            if (!sub_int(E, env, e, "index", &i)) return verror;
            if (batch) {
                diag_error(E->d, e->loc, "axis %d of %s is the batch axis: it is indexed only as ':'", ax, tstr(E, x));
                return verror;
            }
            if (i < -L || i >= L) {
                diag_error(E->d, e->loc, "index %lld is out of range for axis %d of %s (size %lld)", (long long)i, ax,
                           tstr(E, x), (long long)L);
                return verror;
            }
            x = slice_node(E, x, ax, i < 0 ? i + L : i, 1, 1, e->loc);
            moved = true; /* its axis dropped */
        }
        ax++;
    }
    for (; ax < s.rank; ax++) out[nout++] = s.d[ax];
    if (!moved) return vtensor(x);
    if (nout > IR_MAX_RANK) {
        diag_error(E->d, loc, "the result would have %d dimensions: a tensor has at most %d", nout, IR_MAX_RANK);
        return verror;
    }
    Shape r = {.rank = nout};
    for (int i = 0; i < nout; i++) r.d[i] = out[i];
    return vtensor(reshape_node(E, x, r, loc));
}

/* Parts joined along axis ax, in order (concat's checks and node). */
static Value join_parts(Elab *E, const char *fn, const int *part, int n, int ax, SrcLoc loc) {
    if (n == 1) return vtensor(part[0]);
    Value *items = arena_alloc(E->a, (size_t)n * sizeof(Value));
    for (int k = 0; k < n; k++) items[k] = vtensor(part[k]);
    Args c = {.n = 2};
    c.v[0] = (Value){.k = V_TUPLE, .items = items, .nitems = n}, c.v[1] = vnum(ax), c.loc[0] = c.loc[1] = loc;
    return read_concat(E, fn, &c, loc);
}

/* The integers of a tuple or of one number: n of them into v (at most max). */
static bool int_list(Elab *E, const char *fn, const char *what, Value t, SrcLoc loc, int max, int64_t *v, int *n) {
    *n = t.k == V_TUPLE ? t.nitems : 1;
    bool ok = *n >= 1 && *n <= max;
    for (int i = 0; ok && i < *n; i++) {
        Value x = t.k == V_TUPLE ? t.items[i] : t;
        ok = x.k == V_NUM && x.num == floor(x.num) && fabs(x.num) < 1e15;
        if (ok) v[i] = (int64_t)x.num;
    }
    if (!ok) diag_error(E->d, loc, "%s(): %s is an integer or a tuple of at most %d integers", fn, what, max);
    return ok;
}

/* pad(input, pad, mode = "constant", value = 0), as torch.nn.functional.pad: pad's pairs (before,
 * after) from the last axis backwards, filled with value; joined by concat (not the batch axis). */
static Value read_pad(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "pad", "mode", "value"};
    int ix[4], n;
    int64_t p[2 * IR_MAX_RANK];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 4, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    double value = num_or_inf_arg(E, a, ix[3], 0, &ok);
    if (x < 0 || !ok || !need_f32(E, x, fn, loc) ||
        !int_list(E, fn, "pad", a->v[ix[1]], a->loc[ix[1]], 2 * IR_MAX_RANK, p, &n))
        return verror;
    if (ix[2] >= 0 && (a->v[ix[2]].k != V_STR || strcmp(a->v[ix[2]].str, "constant"))) {
        diag_error(E->d, a->loc[ix[2]], "%s(): only mode \"constant\" is supported", fn);
        return verror;
    }
    Shape s = E->g->nodes[x].shape;
    if (n % 2 || n / 2 > s.rank) {
        diag_error(E->d, a->loc[ix[1]], "%s(): pad holds a (before, after) pair for each of the last axes of %s", fn,
                   tstr(E, x));
        return verror;
    }
    Value y = vtensor(x);
    for (int k = 0; k < n / 2 && y.k != V_ERROR; k++) {
        int ax = s.rank - 1 - k, part[3], m = 0;
        if (p[2 * k] < 0 || p[2 * k + 1] < 0) {
            diag_error(E->d, a->loc[ix[1]], "%s(): padding is at least 0 (cut with slice instead)", fn);
            return verror;
        }
        for (int side = 0; side < 3; side++) {
            int64_t w = side == 1 ? 0 : p[2 * k + (side ? 1 : 0)];
            if (side == 1) part[m++] = y.node;
            else if (w > 0) {
                Shape fs = E->g->nodes[y.node].shape;
                fs.d[ax] = w;
                int c = graph_const(E->g, value, loc);
                part[m++] = graph_add(E->g, OP_EXPAND, 1, &c, fs, DT_F32, loc);
            }
        }
        y = join_parts(E, fn, part, m, ax, loc);
    }
    return y;
}

/* repeat(x, sizes...), x.repeat(...): torch.Tensor.repeat, x copied sizes[i] times along each axis
 * (sizes longer than x's axes add new ones in front); tile(x, dims), torch.tile (dims shorter
 * than x's axes count from the last). */
static Value read_repeat(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    if (a->n < 2) {
        diag_error(E->d, loc, "%s() takes a tensor and how many times each axis repeats: %s(x, 1, 2)", fn, fn);
        return verror;
    }
    int x = tensor_arg(E, a, 0), n;
    int64_t r[IR_MAX_RANK];
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Value v = a->n == 2 ? a->v[1] : (Value){.k = V_TUPLE, .items = a->v + 1, .nitems = a->n - 1};
    if (!int_list(E, fn, "the repeats", v, a->loc[1], IR_MAX_RANK, r, &n)) return verror;
    Shape s = E->g->nodes[x].shape;
    bool tile = !strcmp(fn, "tile");
    if (tile)
        while (n < s.rank) { /* torch.tile: ones in front */
            memmove(r + 1, r, (size_t)n * sizeof *r);
            r[0] = 1, n++;
        }
    if (n < s.rank) {
        diag_error(E->d, loc, "%s(): %d repeats for %s: one for each of its %d axes at least", fn, n, tstr(E, x),
                   s.rank);
        return verror;
    }
    if (n > s.rank) { /* new axes of size 1 in front */
        Shape u = {.rank = n};
        for (int i = 0; i < n; i++) u.d[i] = i < n - s.rank ? 1 : s.d[i - (n - s.rank)];
        x = reshape_node(E, x, u, loc), s = u;
    }
    Value y = vtensor(x);
    for (int ax = 0; ax < n && y.k != V_ERROR; ax++) {
        if (r[ax] < 1 || r[ax] > 64) {
            diag_error(E->d, loc, "%s(): each axis repeats 1 to 64 times, got %lld", fn, (long long)r[ax]);
            return verror;
        }
        int part[64];
        for (int k = 0; k < r[ax]; k++) part[k] = y.node;
        y = join_parts(E, fn, part, (int)r[ax], ax, loc);
    }
    return y;
}

/* flip(x, dims), as torch.flip: the axes of dims reversed (a slice stepping back; not the batch
 * axis). */
static Value read_flip(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "dims"};
    int ix[2], nd;
    int64_t dm[IR_MAX_RANK];
    if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc) || !int_list(E, fn, "dims", a->v[ix[1]], a->loc[ix[1]], IR_MAX_RANK, dm, &nd))
        return verror;
    for (int k = 0; k < nd; k++) {
        Shape s = E->g->nodes[x].shape;
        bool ok = true;
        int ax = __builtin_ctzll((unsigned long long)axis_bit(E, vnum((double)dm[k]), a->loc[ix[1]], s.rank, &ok));
        if (!ok) return verror;
        if (dim_is_batch(s.d[ax])) {
            diag_error(E->d, a->loc[ix[1]], "%s(): cannot flip the batch axis of %s", fn, tstr(E, x));
            return verror;
        }
        if (s.d[ax] > 1) x = slice_node(E, x, ax, s.d[ax] - 1, s.d[ax], -1, loc);
    }
    return vtensor(x);
}

/* roll(x, shifts, dims), as torch.roll: each axis of dims rotated by its shift (the last elements
 * come first for a positive one); dims must be given (torch's flattened roll would cross the
 * batch axis). */
static Value read_roll(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "shifts", "dims"};
    int ix[3], ns, nd;
    int64_t sh[IR_MAX_RANK], dm[IR_MAX_RANK];
    if (!bind_args(E, fn, a, names, 3, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    if (ix[2] < 0) {
        diag_error(E->d, loc, "%s(): give dims (a roll of the flattened tensor would cross the batch axis)", fn);
        return verror;
    }
    if (!int_list(E, fn, "shifts", a->v[ix[1]], a->loc[ix[1]], IR_MAX_RANK, sh, &ns) ||
        !int_list(E, fn, "dims", a->v[ix[2]], a->loc[ix[2]], IR_MAX_RANK, dm, &nd))
        return verror;
    if (ns != nd) {
        diag_error(E->d, loc, "%s(): %d shifts for %d dims", fn, ns, nd);
        return verror;
    }
    Value y = vtensor(x);
    for (int k = 0; k < nd && y.k != V_ERROR; k++) {
        Shape s = E->g->nodes[y.node].shape;
        bool ok = true;
        int ax = __builtin_ctzll((unsigned long long)axis_bit(E, vnum((double)dm[k]), a->loc[ix[2]], s.rank, &ok));
        if (!ok) return verror;
        if (dim_is_batch(s.d[ax])) {
            diag_error(E->d, a->loc[ix[2]], "%s(): cannot roll the batch axis of %s", fn, tstr(E, x));
            return verror;
        }
        int64_t L = s.d[ax], r = ((sh[k] % L) + L) % L;
        if (r == 0) continue;
        int part[2] = {slice_node(E, y.node, ax, L - r, r, 1, loc), slice_node(E, y.node, ax, 0, L - r, 1, loc)};
        y = join_parts(E, fn, part, 2, ax, loc);
    }
    return y;
}

/* stack(tensors, dim = 0), as torch.stack: each with a new axis of size 1 at dim, joined along
 * it. */
static Value read_stack(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"tensors", "dim"};
    int ix[2];
    if (!bind_args(E, fn, a, names, 2, ix, 1, loc)) return verror;
    Value t = a->v[ix[0]];
    if (t.k != V_TUPLE || t.nitems < 1) {
        diag_error(E->d, a->loc[ix[0]], "%s() takes a tuple of tensors: %s((a, b), dim = 0)", fn, fn);
        return verror;
    }
    Value dim = ix[1] >= 0 ? a->v[ix[1]] : vnum(0), *items = arena_alloc(E->a, (size_t)t.nitems * sizeof(Value));
    for (int k = 0; k < t.nitems; k++) {
        Args u = {.n = 2};
        u.v[0] = t.items[k], u.v[1] = dim, u.loc[0] = a->loc[ix[0]], u.loc[1] = arg_loc(a, ix[1], loc);
        items[k] = read_unsqueeze(E, fn, &u, loc);
        if (items[k].k == V_ERROR) return verror;
    }
    Args c = {.n = 2};
    c.v[0] = (Value){.k = V_TUPLE, .items = items, .nitems = t.nitems}, c.v[1] = dim;
    c.loc[0] = a->loc[ix[0]], c.loc[1] = arg_loc(a, ix[1], loc);
    return read_concat(E, fn, &c, loc);
}

/* Builtins that are compositions of ops, not ops (the ops' own come from ops.def). */
typedef Value Composite(Elab *E, const char *fn, Args *a, SrcLoc loc);
static const struct {
    const char *name;
    Composite *read;
} composites[] = {
    {"mse_loss", read_pointwise_loss},
    {"l1_loss", read_pointwise_loss},
    {"binary_cross_entropy_with_logits", read_bce_logits},
    {"nll_loss", read_nll_loss},
    {"unsqueeze", read_unsqueeze},
    {"squeeze", read_squeeze},
    {"stack", read_stack},
    {"pad", read_pad},
    {"repeat", read_repeat},
    {"tile", read_repeat},
    {"roll", read_roll},
    {"flip", read_flip},
    {"rms_norm", read_rms_norm},
    {"var", read_var},
    {"std", read_var},
    {"amax", read_amax},
    {"amin", read_amax},
    {"linear", read_linear},
    {"zeros_like", read_like},
    {"ones_like", read_like},
    {"full_like", read_like},
    {"clone", read_clone},
    {"t", read_matrix_fn},
    {"mm", read_matrix_fn},
    {"bmm", read_matrix_fn},
    {"outer", read_matrix_fn},
    {"expand", read_expand},
    {"size", read_size},
    {"dim", read_size},
    {"norm", read_norm},
    {"normalize", read_norm},
    {"group_norm", read_group_norm},
    {"float", read_dtype_method},
    {"half", read_dtype_method},
    {"bfloat16", read_dtype_method},
    {"argmin", read_argmin},
    {"int", read_bool},
    {"einsum", read_einsum},
    {"cumsum", read_cumsum},
    {"gather", read_gather},
    {"topk", read_topk},
    {"sort", read_topk},
    {"argsort", read_topk},
    {"scatter", read_scatter},
    {"scatter_add", read_scatter},
    {"index_add", read_scatter},
    {"index_copy", read_scatter},
    {"index_fill", read_scatter},
    {"conv1d", read_1d},
    {"repeat_interleave", read_repeat_interleave},
    {"interpolate", read_interpolate},
    {"cosine_similarity", read_cosine_similarity},
    {"pairwise_distance", read_pairwise_distance},
    {"triplet_margin_loss", read_margin_loss},
    {"margin_ranking_loss", read_margin_loss},
    {"instance_norm", read_instance_norm},
    {"logaddexp", read_logaddexp},
    {"max_pool1d", read_1d},
    {"avg_pool1d", read_1d},
    {"take_along_dim", read_gather},
    {"index_select", read_gather},
    {"add", read_arith},
    {"sub", read_arith},
    {"subtract", read_arith},
    {"rsub", read_arith},
    {"mul", read_arith},
    {"multiply", read_arith},
    {"div", read_arith},
    {"divide", read_arith},
    {"true_divide", read_arith},
    {"clip", read_arith},
    {"view_as", read_as},
    {"reshape_as", read_as},
    {"expand_as", read_as},
    {"type_as", read_as},
    {"softmin", read_softmin},
    {"glu", read_glu},
    {"prelu", read_prelu},
    {"lerp", read_lerp},
    {"addcmul", read_addcmul},
    {"addcdiv", read_addcmul},
    {"kl_div", read_kl_div},
    {"binary_cross_entropy", read_bce},
    {"one_hot", read_one_hot},
    {"smooth_l1_loss", read_smooth_l1},
    {"huber_loss", read_smooth_l1},
    {"logsumexp", read_logsumexp},
    {"min", read_min},
    {"flatten", read_flatten},
    {"layer_norm", read_layer_norm},
    {"adaptive_avg_pool2d", read_adaptive_avg_pool2d},
    {"dropout", read_dropout},
    {"batch_norm", read_batch_norm},
    {"concat", read_concat},
    {"cat", read_concat},
    {"narrow", read_slice},
    {"slice", read_slice},
    {"view", read_view},
    {"swapaxes", read_swapaxes},
    {"swapdims", read_swapaxes},
    {"contiguous", read_contiguous},
    {"split", read_split},
    {"chunk", read_chunk},
    {"unbind", read_unbind},
    {"masked_fill", read_masked_fill},
    {"full", read_full},
    {"ones", read_full},
    {"zeros", read_full},
    {"range", read_range},
    {"len", read_len},
    {"enumerate", read_enumerate},
    {"zip", read_zip},
    {"bool", read_bool},
    {"long", read_bool},
    {"new_zeros", read_new},
    {"new_ones", read_new},
    {"new_full", read_new},
    {"new_empty", read_new},
    {"unflatten", read_unflatten},
    {"clamp_min", read_clamp_one},
    {"clamp_max", read_clamp_one},
    {"addmm", read_addmm},
    {"baddbmm", read_addmm},
    {"diff", read_diff},
    {"var_mean", read_var_mean},
    {"std_mean", read_var_mean},
    {"hardshrink", read_shrink},
    {"softshrink", read_shrink},
    {"tanhshrink", read_shrink},
    {"threshold", read_shrink},
    {"movedim", read_movedim},
    {"moveaxis", read_movedim},
    {"select", read_select},
    {"all", read_all_any},
    {"any", read_all_any},
    {"count_nonzero", read_all_any},
    {"tensor", read_tensor_of},
    {"expit", read_alias},
    {"randn_like", read_random},
    {"rand_like", read_random},
    {"randn", read_random},
    {"rand", read_random},
    {"bernoulli", read_random},
    {"absolute", read_alias},
    {"arcsin", read_alias},
    {"arccos", read_alias},
    {"arctan", read_alias},
    {"arcsinh", read_alias},
    {"arccosh", read_alias},
    {"arctanh", read_alias},
};

/* "did you mean": every op's surface name, then the compositions, after `best` at *bd. */
static const char *suggest_builtin(Elab *E, const char *fn, int *bd, const char *best) {
    for (int op = 0; op < OP_COUNT; op++) {
        const char *sf = op_info[op].surface;
        if (sf) best = closest(fn, arena_printf(E->a, "%.*s", (int)strcspn(sf, "("), sf), best, bd);
    }
    for (size_t i = 0; i < NNC_COUNTOF(composites); i++) best = closest(fn, composites[i].name, best, bd);
    return best;
}

/* max and min as torch calls them: of two tensors, torch.maximum's (minimum's); with a dim (by
 * that name, or second), the named tuple (values, indices).  Else nnc's reduction: max(x),
 * max(x, axis = k). */
static Value max_min(Elab *E, const char *fn, Args *a, SrcLoc loc, bool *done) {
    *done = true;
    bool second = a->n >= 2 && !a->kw[0] && !a->kw[1];
    if (second && a->v[1].k == V_TENSOR) {
        if (a->n > 2) {
            diag_error(E->d, a->loc[2], "%s(a, b) of two tensors takes nothing more", fn);
            return verror;
        }
        return call_builtin(E, strcmp(fn, "max") ? "minimum" : "maximum", a, loc);
    }
    for (int i = 0; i < a->n; i++)
        if (a->kw[i] && !strcmp(a->kw[i], "dim")) second = true;
    if (second) return read_max_dim(E, fn, a, loc);
    *done = false;
    return verror;
}

Value call_builtin(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    if (!strcmp(fn, "max") || !strcmp(fn, "min")) {
        bool done;
        Value v = max_min(E, fn, a, loc, &done);
        if (done) return v;
    }
    int op = surface_op(fn);
    if (op >= 0) return call_op(E, (Op)op, fn, a, loc);
    for (size_t i = 0; i < NNC_COUNTOF(composites); i++)
        if (!strcmp(fn, composites[i].name)) return composites[i].read(E, fn, a, loc);
    Value v;
    if (E->in_train && train_builtin(E, fn, a, loc, &v)) return v;
    if (!strcmp(fn, "cuda")) { /* cuda(1): GPU 1, torch.device("cuda:1") */
        if (a->n != 1 || a->v[0].k != V_NUM || a->v[0].num != floor(a->v[0].num) || a->v[0].num < 0 ||
            a->v[0].num >= NNC_MAX_GPUS) {
            diag_error(E->d, loc, "cuda(k) names GPU k, an integer from 0 to %d: cuda(1)", NNC_MAX_GPUS - 1);
            return verror;
        }
        return (Value){.k = V_DEVICE, .num = DEV_GPU((int)a->v[0].num)};
    }
    int bd = 3;
    if (!E->in_train && train_builtin_known(fn)) { /* adam(), csv(): the train section's */
        diag_error(E->d, loc, "%s() is a train section setting: it goes inside train { ... }", fn);
        return verror;
    }
    /* in a train section its own functions first: a tie goes to the optimizer or data source */
    const char *best = E->in_train ? train_builtin_suggest(fn, NULL, &bd) : NULL;
    best = suggest_builtin(E, fn, &bd, best);
    diag_error(E->d, loc, "unknown function '%s'%s", fn, did_you_mean(E, best));
    return verror;
}
