/* elab_torch.c - torch functions that are compositions of ops: unsqueeze and squeeze (views),
 * stack, rms_norm, var and std, amax and amin, and the losses l1_loss,
 * binary_cross_entropy_with_logits and nll_loss (of log_softmax), with torch's reduction
 * argument (mse_loss takes it too).  Each builds the graph the way its torch counterpart
 * computes, so autograd's rules for the ops give its gradient. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "elab_impl.h"

static int pick_last(Elab *E, const char *fn, int x, int idx, bool has_ignore, double ignore, SrcLoc loc);

/* dim as torch takes it for a tensor of `rank` axes, `extra` more allowed past the last
 * (unsqueeze: a new axis may go at the end): [-(rank + extra), rank + extra). */
static bool dim_arg(Elab *E, const char *fn, Value v, SrcLoc loc, int rank, int extra, int *out) {
    int n = rank + extra;
    if (v.k != V_NUM || v.num != floor(v.num) || v.num < -n || v.num >= n) {
        diag_error(E->d, loc, "%s(): dim must be an integer in [%d, %d] for a tensor of %d dimensions", fn, -n, n - 1,
                   rank);
        return false;
    }
    *out = v.num < 0 ? (int)v.num + n : (int)v.num;
    return true;
}

/* unsqueeze(x, dim), x.unsqueeze(dim): a new axis of size 1 at dim (a view). */
Value read_unsqueeze(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "dim"};
    int ix[2], d;
    if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0) return verror;
    Shape s = E->g->nodes[x].shape, r = {0};
    if (!dim_arg(E, fn, a->v[ix[1]], a->loc[ix[1]], s.rank, 1, &d)) return verror;
    if (s.rank >= IR_MAX_RANK) {
        diag_error(E->d, loc, "%s(): %s has %d dimensions already, the most a tensor has", fn, tstr(E, x), s.rank);
        return verror;
    }
    for (int i = 0; i <= s.rank; i++) {
        if (i == d) r.d[r.rank++] = 1;
        if (i < s.rank) r.d[r.rank++] = s.d[i];
    }
    return vtensor(reshape_node(E, x, r, loc));
}

/* squeeze(x), squeeze(x, dim), squeeze(x, (d0, d1)): the axes of size 1 removed (those given,
 * where they have size 1, as torch.squeeze).  The batch axis stays, whatever the batch. */
Value read_squeeze(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "dim"};
    int ix[2];
    if (!bind_args(E, fn, a, names, 2, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0) return verror;
    Shape s = E->g->nodes[x].shape, r = {0};
    int64_t which = ix[1] < 0 ? ((int64_t)1 << s.rank) - 1 : 0;
    if (ix[1] >= 0) {
        Value v = a->v[ix[1]];
        int n = v.k == V_TUPLE ? v.nitems : 1;
        for (int k = 0, d; k < n; k++) {
            if (!dim_arg(E, fn, v.k == V_TUPLE ? v.items[k] : v, a->loc[ix[1]], s.rank, 0, &d)) return verror;
            which |= (int64_t)1 << d;
        }
    }
    for (int i = 0; i < s.rank; i++)
        if (!(which >> i & 1) || s.d[i] != 1) r.d[r.rank++] = s.d[i];
    return r.rank == s.rank ? vtensor(x) : vtensor(reshape_node(E, x, r, loc));
}

/* The reduction torch's losses take: "mean" (the default), "sum" or "none". */
static int loss_reduce(Elab *E, const char *fn, Args *a, int i, int x, SrcLoc loc) {
    const char *how = "mean";
    if (i >= 0) {
        if (a->v[i].k != V_STR ||
            (strcmp(a->v[i].str, "mean") && strcmp(a->v[i].str, "sum") && strcmp(a->v[i].str, "none"))) {
            diag_error(E->d, a->loc[i], "%s(): reduction is \"mean\", \"sum\" or \"none\"", fn);
            return -1;
        }
        how = a->v[i].str;
    }
    if (!strcmp(how, "none")) return x;
    return reduce_node(E, strcmp(how, "sum") ? OP_MEAN : OP_SUM, x, ((int64_t)1 << E->g->nodes[x].shape.rank) - 1,
                       false, loc);
}

/* The input and target of an elementwise loss: f32 tensors of one shape. */
static bool loss_pair(Elab *E, const char *fn, Args *a, const int *ix, SrcLoc loc, int *x, int *y) {
    *x = tensor_arg(E, a, ix[0]), *y = tensor_arg(E, a, ix[1]);
    if (*x < 0 || *y < 0 || !need_f32(E, *x, fn, loc) || !need_f32(E, *y, fn, loc)) return false;
    if (!shape_eq(E->g->nodes[*x].shape, E->g->nodes[*y].shape)) {
        diag_error(E->d, loc, "%s(): input %s and target %s must have the same shape", fn, tstr(E, *x), tstr(E, *y));
        return false;
    }
    return true;
}

/* mse_loss(input, target, reduction = "mean"): (input - target) ** 2; l1_loss: |input - target|,
 * as torch.nn.functional's. */
Value read_pointwise_loss(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "target", "reduction"};
    int ix[3], x, y;
    if (!bind_args(E, fn, a, names, 3, ix, 2, loc) || !loss_pair(E, fn, a, ix, loc, &x, &y)) return verror;
    int d = graph_add2(E->g, OP_SUB, x, y, loc), r;
    if (!strcmp(fn, "l1_loss")) r = graph_add1(E->g, OP_ABS, d, loc);
    else {
        r = graph_add1(E->g, OP_POWC, d, loc);
        E->g->nodes[r].attr.scalars.p[0] = 2;
    }
    r = loss_reduce(E, fn, a, ix[2], r, loc);
    return r < 0 ? verror : vtensor(r);
}

/* binary_cross_entropy_with_logits(input, target, reduction = "mean"): -(t log sigmoid(x) +
 * (1 - t) log(1 - sigmoid(x))) per element, in torch's stable form (ops.def's BCE_LOGITS), its
 * gradient sigmoid(x) - t (and -x for the target), as torch's. */
Value read_bce_logits(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "target", "reduction"};
    int ix[3], x, y;
    if (!bind_args(E, fn, a, names, 3, ix, 2, loc) || !loss_pair(E, fn, a, ix, loc, &x, &y)) return verror;
    int r = loss_reduce(E, fn, a, ix[2], graph_add2(E->g, OP_BCE_LOGITS, x, y, loc), loc);
    return r < 0 ? verror : vtensor(r);
}

/* nll_loss(input, target, ignore_index = -100, reduction = "mean"), as F.nll_loss: -input at each
 * target's class (axis 1 of [N, C] or [N, C, d1, ...], target [N] or [N, d1, ...], i32), 0 where
 * the target is ignore_index; "mean" over the rows not ignored (none: NaN), "sum", "none".  Of
 * log_softmax(logits) with "mean" over [N, C], cross_entropy's one row-wise op; else the picked
 * elements (gather's row op). */
Value read_nll_loss(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "target", "ignore_index", "reduction"};
    int ix[4];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 4, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), y = tensor_arg(E, a, ix[1]);
    double ignore = num_arg(E, a, ix[2], -100, &ok);
    if (x < 0 || y < 0 || !ok || !need_f32(E, x, fn, loc)) return verror;
    const char *how = ix[3] >= 0 && a->v[ix[3]].k == V_STR ? a->v[ix[3]].str : "mean";
    if (strcmp(how, "mean") && strcmp(how, "sum") && strcmp(how, "none")) {
        diag_error(E->d, arg_loc(a, ix[3], loc), "%s(): reduction is \"mean\", \"sum\" or \"none\"", fn);
        return verror;
    }
    const Node *n = &E->g->nodes[x];
    Shape xs = n->shape, ys = E->g->nodes[y].shape;
    if (n->op == OP_LOG_SOFTMAX && !strcmp(how, "mean") && xs.rank == 2) {
        Args c = {.n = 3};
        c.v[0] = vtensor(n->in[0]), c.v[1] = vtensor(y), c.v[2] = vnum(ignore);
        c.loc[0] = a->loc[ix[0]], c.loc[1] = a->loc[ix[1]], c.loc[2] = arg_loc(a, ix[2], loc);
        c.kw[2] = "ignore_index";
        return call_builtin(E, "cross_entropy", &c, loc);
    }
    bool same = xs.rank >= 2 && ys.rank == xs.rank - 1 && E->g->nodes[y].dtype == DT_I32;
    for (int i = 0, j = 0; same && i < xs.rank; i++)
        if (i != 1) same = xs.d[i] == ys.d[j++];
    if (!same || dim_is_batch(xs.d[1])) {
        diag_error(E->d, loc, "%s(): input [N, C, ...] and i32 target [N, ...] (the class axis removed), got %s and %s",
                   fn, tstr(E, x), tstr(E, y));
        return verror;
    }
    int8_t there[IR_MAX_RANK], back[IR_MAX_RANK];
    axis_last_perms(1, xs.rank, there, back);
    Shape yk = ys;
    yk.d[yk.rank++] = 1; /* [N, ..., 1]: one pick a row */
    int p = pick_last(E, fn, permute_node(E, x, there, loc), reshape_node(E, y, yk, loc), true, ignore, loc);
    if (p < 0) return verror;
    p = reshape_node(E, p, ys, loc);
    int keep = compare(E, OP_NE, vtensor(y), vnum(ignore), loc).node;
    int in[3] = {keep, graph_add1(E->g, OP_NEG, p, loc), graph_const(E->g, 0, loc)};
    int el = graph_add(E->g, OP_SELECT, 3, in, ys, DT_F32, loc);
    if (!strcmp(how, "none")) return vtensor(el);
    int64_t all = ((int64_t)1 << ys.rank) - 1;
    int total = reduce_node(E, OP_SUM, el, all, false, loc);
    if (!strcmp(how, "sum")) return vtensor(total);
    return vtensor(graph_add2(E->g, OP_DIV, total, reduce_node(E, OP_SUM, keep, all, false, loc), loc));
}

/* rms_norm(x, weight, eps), as torch.nn.functional.rms_norm with normalized_shape = weight's
 * shape: x / sqrt(mean(x^2) + eps) * weight over the last weight-rank axes (the last axis
 * without a weight); eps defaults to f32's machine epsilon, as torch's None. */
Value read_rms_norm(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "weight", "eps"};
    int ix[3], ns;
    bool ok = true;
    if (!take_normalized_shape(E, fn, a, &ns) || !bind_args(E, fn, a, names, 3, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), w = ix[1] >= 0 ? tensor_arg(E, a, ix[1]) : -2;
    double eps = num_arg(E, a, ix[2], 0x1p-23, &ok);
    if (x < 0 || w == -1 || !ok || !need_f32(E, x, fn, loc)) return verror;
    if (ix[2] >= 0 && !check_range(E, fn, "eps", eps, 0, false, INFINITY, false, a->loc[ix[2]])) return verror;
    Shape s = E->g->nodes[x].shape;
    int k = w >= 0 ? E->g->nodes[w].shape.rank : ns ? ns : 1;
    bool fits = k >= 1 && k <= s.rank && (!ns || ns == k);
    for (int j = 0; w >= 0 && fits && j < k; j++) fits = E->g->nodes[w].shape.d[j] == s.d[s.rank - k + j];
    if (!fits) {
        diag_error(E->d, loc, "%s(): weight %s must be the last axes of %s", fn, w >= 0 ? tstr(E, w) : "-", tstr(E, x));
        return verror;
    }
    mark_norm_params(E->g, w, -1);
    int64_t mask = ((int64_t)1 << s.rank) - ((int64_t)1 << (s.rank - k));
    int ms = reduce_node(E, OP_MEAN, graph_add2(E->g, OP_MUL, x, x, loc), mask, true, loc);
    int y = graph_add2(E->g, OP_MUL, x,
                       graph_add1(E->g, OP_RSQRT, graph_add2(E->g, OP_ADD, ms, graph_const(E->g, eps, loc), loc), loc),
                       loc);
    if (w >= 0) y = graph_add2(E->g, OP_MUL, y, w, loc);
    return vtensor(y);
}

/* var(x, dim, correction = 1, keepdim = false) and std, as torch.var and torch.std: the mean of
 * the squared deviations over the axes (all without dim), times n / (n - correction).  Over the
 * batch axis, whose n is known only at run time, correction must be 0. */
Value read_var(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "dim", "correction", "keepdim"};
    int ix[4];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 4, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Shape s = E->g->nodes[x].shape;
    int64_t mask = ix[1] < 0 ? ((int64_t)1 << s.rank) - 1 : axes_arg(E, a, ix[1], s.rank, &ok);
    double corr = num_arg(E, a, ix[2], 1, &ok);
    bool keep = num_arg(E, a, ix[3], 0, &ok) != 0;
    if (!ok) return verror;
    int64_t n = 1;
    bool batch = false;
    for (int i = 0; i < s.rank; i++)
        if (mask >> i & 1) {
            batch |= dim_is_batch(s.d[i]);
            n *= dim_size(s.d[i], 1);
        }
    if (batch && corr != 0) {
        diag_error(E->d, loc,
                   "%s(): over the batch axis the count is known only at run time: give correction = 0 (the "
                   "biased estimate), or reduce other axes",
                   fn);
        return verror;
    }
    if (!batch && corr >= (double)n) {
        diag_error(E->d, loc, "%s(): correction %g leaves no degrees of freedom over %lld elements", fn, corr,
                   (long long)n);
        return verror;
    }
    int m = reduce_node(E, OP_MEAN, x, mask, true, loc);
    int d = graph_add2(E->g, OP_SUB, x, m, loc);
    int v = reduce_node(E, OP_MEAN, graph_add2(E->g, OP_MUL, d, d, loc), mask, keep, loc);
    if (corr != 0) v = graph_add2(E->g, OP_MUL, v, graph_const(E->g, (double)n / ((double)n - corr), loc), loc);
    return vtensor(strcmp(fn, "std") ? v : graph_add1(E->g, OP_SQRT, v, loc));
}

/* amax(x, dim, keepdim) and amin, as torch.amax and torch.amin: max and min by torch's argument
 * names. */
Value read_amax(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "dim", "keepdim"};
    int ix[3];
    if (!bind_args(E, fn, a, names, 3, ix, 1, loc)) return verror;
    Args b = {.n = 0}; /* by nnc's names: max(x, dim = k) would be torch's (values, indices) */
    static const char *kw[] = {NULL, "axis", "keepdim"};
    for (int k = 0; k < 3; k++)
        if (ix[k] >= 0) b.v[b.n] = a->v[ix[k]], b.loc[b.n] = a->loc[ix[k]], b.kw[b.n++] = kw[k];
    return call_builtin(E, strcmp(fn, "amax") ? "min" : "max", &b, loc);
}

/* linear(input, weight, bias), as torch.nn.functional.linear: input @ weight^T + bias, weight
 * [out, in] (the transpose folds into the product). */
Value read_linear(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "weight", "bias"};
    int ix[3];
    if (!bind_args(E, fn, a, names, 3, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), w = tensor_arg(E, a, ix[1]), b = ix[2] >= 0 ? tensor_arg(E, a, ix[2]) : -2;
    if (x < 0 || w < 0 || b == -1) return verror;
    const Shape *ws = &E->g->nodes[w].shape;
    if (ws->rank != 2 || shape_batch_axis(*ws) >= 0) {
        diag_error(E->d, arg_loc(a, ix[1], loc), "%s(): weight is [out_features, in_features], got %s", fn, tstr(E, w));
        return verror;
    }
    if (b >= 0 && (E->g->nodes[b].shape.rank != 1 || E->g->nodes[b].shape.d[0] != ws->d[0])) {
        diag_error(E->d, arg_loc(a, ix[2], loc), "%s(): bias is [out_features] = [%lld], got %s", fn,
                   (long long)ws->d[0], tstr(E, b));
        return verror;
    }
    Args t = {.n = 1};
    t.v[0] = vtensor(w), t.loc[0] = arg_loc(a, ix[1], loc);
    Value y = matmul(E, vtensor(x), transpose(E, "transpose", &t, loc), loc);
    if (y.k == V_ERROR || b < 0) return y;
    return vtensor(graph_add2(E->g, OP_ADD, y.node, b, loc));
}

/* zeros_like(x), ones_like(x), full_like(x, fill_value): a tensor of x's shape (its batch axis
 * too) holding one value, as torch's. */
Value read_like(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "fill_value"};
    bool full = !strcmp(fn, "full_like"), ok = true;
    int ix[2];
    if (!bind_args(E, fn, a, names, full ? 2 : 1, ix, full ? 2 : 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    double v = full ? num_or_inf_arg(E, a, ix[1], 0, &ok) : fn[0] == 'o';
    if (x < 0 || !ok) return verror;
    int c = graph_const(E->g, v, loc);
    Shape s = E->g->nodes[x].shape;
    return vtensor(s.rank ? graph_add(E->g, OP_EXPAND, 1, &c, s, DT_F32, loc) : c);
}

/* clone(x), x.clone(): x (every value here is its own; nothing aliases it). */
Value read_clone(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input"};
    int ix[1];
    if (!bind_args(E, fn, a, names, 1, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    return x < 0 ? verror : vtensor(x);
}

/* t(x), x.t(): torch.t, the transpose of a matrix (a vector as it is); mm(a, b) and bmm(a, b):
 * matmul of two matrices, or of two batches of them ([b, n, m] @ [b, m, p]), with torch's checks;
 * outer(a, b): a[i] b[j]. */
Value read_matrix_fn(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *one[] = {"input"}, *two[] = {"input", "mat2"}, *vecs[] = {"input", "vec2"};
    bool t = !strcmp(fn, "t"), outer = !strcmp(fn, "outer");
    int ix[2];
    if (!bind_args(E, fn, a, t ? one : outer ? vecs : two, t ? 1 : 2, ix, t ? 1 : 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), y = t ? -2 : tensor_arg(E, a, ix[1]);
    if (x < 0 || y == -1) return verror;
    int rx = E->g->nodes[x].shape.rank, ry = y >= 0 ? E->g->nodes[y].shape.rank : 0;
    if (t) {
        if (rx > 2) {
            diag_error(E->d, loc, "%s() transposes a matrix, got %s: transpose(x, d0, d1) swaps two axes", fn,
                       tstr(E, x));
            return verror;
        }
        if (rx < 2) return vtensor(x);
        Args u = {.n = 1};
        u.v[0] = vtensor(x), u.loc[0] = a->loc[ix[0]];
        return transpose(E, "transpose", &u, loc);
    }
    int want = outer ? 1 : !strcmp(fn, "bmm") ? 3 : 2;
    if (rx != want || ry != want) {
        diag_error(E->d, loc, "%s() takes two tensors of %d dimensions, got %s and %s", fn, want, tstr(E, x),
                   tstr(E, y));
        return verror;
    }
    if (!outer) return matmul(E, vtensor(x), vtensor(y), loc);
    Shape sx = {2, {E->g->nodes[x].shape.d[0], 1}}, sy = {2, {1, E->g->nodes[y].shape.d[0]}};
    return vtensor(graph_add2(E->g, OP_MUL, reshape_node(E, x, sx, loc), reshape_node(E, y, sy, loc), loc));
}

/* expand(x, sizes...), x.expand(...): torch.Tensor.expand, x broadcast to sizes (-1 keeps an
 * axis; new axes go in front; an axis of size 1 stretches). */
Value read_expand(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    if (a->n < 2) {
        diag_error(E->d, loc, "%s() takes a tensor and its new sizes: %s(x, B, 4, 8)", fn, fn);
        return verror;
    }
    for (int i = 0; i < a->n; i++)
        if (a->kw[i]) {
            diag_error(E->d, a->loc[i], "%s() takes its sizes by position", fn);
            return verror;
        }
    int x = tensor_arg(E, a, 0);
    if (x < 0) return verror;
    Value *v;
    int n = rest_values(a, &v);
    Shape xs = E->g->nodes[x].shape, s = {0};
    if (n < xs.rank || n > IR_MAX_RANK) {
        diag_error(E->d, loc, "%s(): %d sizes for %s: at least its %d dimensions, at most %d", fn, n, tstr(E, x),
                   xs.rank, IR_MAX_RANK);
        return verror;
    }
    for (int i = 0; i < n; i++) {
        SrcLoc at = a->loc[i + 1 < a->n ? i + 1 : a->n - 1];
        int j = i - (n - xs.rank); /* x's axis under this size, or < 0: a new one */
        int64_t d;
        if (v[i].k == V_NUM && v[i].num == -1 && j >= 0) d = xs.d[j];
        else if (!eval_dim(E, v[i], at, true, &d)) return verror;
        if (j >= 0 && xs.d[j] != d && xs.d[j] != 1) {
            diag_error(E->d, at, "%s(): axis %d of %s has size %s, which cannot stretch (only size 1 does)", fn, j,
                       tstr(E, x), dim_is_batch(xs.d[j]) ? "B" : arena_printf(E->a, "%lld", (long long)xs.d[j]));
            return verror;
        }
        if (j < 0 && dim_is_batch(d)) {
            diag_error(E->d, at, "%s(): the batch axis cannot be made new by broadcasting", fn);
            return verror;
        }
        s.d[s.rank++] = d;
    }
    if (shape_eq(s, xs)) return vtensor(x);
    return vtensor(graph_add(E->g, OP_EXPAND, 1, &x, s, E->g->nodes[x].dtype, loc));
}

/* One dimension as a value: a number, or the batch symbol (B, or B * T for a merged axis). */
static Value dim_value(int64_t d) {
    return dim_is_batch(d) ? (Value){.k = V_BATCH, .num = (double)dim_size(d, 1)} : vnum((double)d);
}

/* size(x), x.size(), x.shape: its dimensions as a tuple (B, T, C = x.size()); x.size(d): one;
 * dim(x), x.dim(), x.ndim: how many, as torch's. */
Value read_size(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "dim"};
    bool size = !strcmp(fn, "size");
    int ix[2], d;
    if (!bind_args(E, fn, a, names, size ? 2 : 1, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0) return verror;
    Shape s = E->g->nodes[x].shape;
    if (!size) return vnum(s.rank);
    if (ix[1] >= 0) return dim_arg(E, fn, a->v[ix[1]], a->loc[ix[1]], s.rank, 0, &d) ? dim_value(s.d[d]) : verror;
    Value t = {.k = V_TUPLE, .nitems = s.rank};
    t.items = arena_alloc(E->a, (size_t)(s.rank ? s.rank : 1) * sizeof(Value));
    for (int i = 0; i < s.rank; i++) t.items[i] = dim_value(s.d[i]);
    return t;
}

/* x's p-norm over mask (p 2 or 1), keeping the reduced axes where keep: torch.norm's. */
static int norm_node(Elab *E, int x, double p, int64_t mask, bool keep, SrcLoc loc) {
    if (p == 1) return reduce_node(E, OP_SUM, graph_add1(E->g, OP_ABS, x, loc), mask, keep, loc);
    return graph_add1(E->g, OP_NORM_SQRT, reduce_node(E, OP_SUM, graph_add2(E->g, OP_MUL, x, x, loc), mask, keep, loc),
                      loc);
}

/* p: 2 (default, or "fro") or 1. */
static bool norm_p(Elab *E, const char *fn, Args *a, int i, double *p) {
    bool ok = true;
    *p = 2;
    if (i < 0) return true;
    if (a->v[i].k == V_STR && !strcmp(a->v[i].str, "fro")) return true;
    *p = num_arg(E, a, i, 2, &ok);
    if (ok && *p != 1 && *p != 2) {
        diag_error(E->d, a->loc[i], "%s(): p is 2 (or \"fro\") or 1, got %g", fn, *p);
        return false;
    }
    return ok;
}

/* norm(x, p = 2, dim, keepdim = false), x.norm(): torch.norm's 2-norm (\"fro\") or 1-norm over
 * the axes (all without dim); its gradient x / norm (sign(x) for p 1), 0 at a zero norm, as
 * torch's.  normalize(x, p = 2, dim = 1, eps = 1e-12): x / max(norm(x, dim, keepdim), eps), as
 * torch.nn.functional.normalize. */
Value read_norm(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *nn[] = {"input", "p", "dim", "keepdim"}, *zn[] = {"input", "p", "dim", "eps"};
    bool normalize = !strcmp(fn, "normalize"), ok = true;
    int ix[4];
    double p;
    if (!bind_args(E, fn, a, normalize ? zn : nn, 4, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc) || !norm_p(E, fn, a, ix[1], &p)) return verror;
    Shape s = E->g->nodes[x].shape;
    if (normalize && s.rank < 2 && ix[2] < 0) {
        diag_error(E->d, loc, "%s(): its default dim is 1, and %s has %d dimension%s: give dim", fn, tstr(E, x), s.rank,
                   s.rank == 1 ? "" : "s");
        return verror;
    }
    int64_t mask = ix[2] < 0 ? (normalize ? 2 : ((int64_t)1 << s.rank) - 1) : axes_arg(E, a, ix[2], s.rank, &ok);
    double eps = normalize ? num_arg(E, a, ix[3], 1e-12, &ok) : 0;
    bool keep = !normalize && num_arg(E, a, ix[3], 0, &ok) != 0;
    if (!ok) return verror;
    if (!normalize) return vtensor(norm_node(E, x, p, mask, keep, loc));
    int n = graph_add1(E->g, OP_CLAMP, norm_node(E, x, p, mask, true, loc), loc);
    E->g->nodes[n].attr.scalars.p[0] = eps, E->g->nodes[n].attr.scalars.p[1] = INFINITY;
    return vtensor(graph_add2(E->g, OP_DIV, x, n, loc));
}

/* group_norm(x, num_groups, weight, bias, eps = 1e-5), as torch.nn.functional.group_norm: x
 * [N, C, ...] normalized over each group of C / num_groups channels and the axes after them
 * (the variance biased), then weight and bias per channel. */
Value read_group_norm(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "num_groups", "weight", "bias", "eps"};
    int ix[5];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 5, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), w = ix[2] >= 0 ? tensor_arg(E, a, ix[2]) : -2;
    int b = ix[3] >= 0 ? tensor_arg(E, a, ix[3]) : -2;
    double g = num_arg(E, a, ix[1], 1, &ok), eps = num_arg(E, a, ix[4], 1e-5, &ok);
    if (x < 0 || w == -1 || b == -1 || !ok || !need_f32(E, x, fn, loc)) return verror;
    Shape s = E->g->nodes[x].shape;
    if (s.rank < 2 || dim_is_batch(s.d[1])) {
        diag_error(E->d, loc, "%s(): input is [N, C, ...], got %s", fn, tstr(E, x));
        return verror;
    }
    int64_t C = s.d[1], G = (int64_t)g;
    if (g != floor(g) || G < 1 || C % G) {
        diag_error(E->d, arg_loc(a, ix[1], loc), "%s(): num_groups must divide the %lld channels, got %g", fn,
                   (long long)C, g);
        return verror;
    }
    if (ix[4] >= 0 && !check_range(E, fn, "eps", eps, 0, true, INFINITY, false, a->loc[ix[4]])) return verror;
    for (int k = 0, t; k < 2; k++)
        if ((t = k ? b : w) >= 0 && (E->g->nodes[t].shape.rank != 1 || E->g->nodes[t].shape.d[0] != C)) {
            diag_error(E->d, loc, "%s(): %s must be [%lld], one a channel, got %s", fn, k ? "bias" : "weight",
                       (long long)C, tstr(E, t));
            return verror;
        }
    int64_t rest = 1;
    for (int i = 2; i < s.rank; i++) rest *= s.d[i];
    Shape gs = {s.rank > 2 ? 4 : 3, {s.d[0], G, C / G, rest}}, cs = {0};
    int xg = reshape_node(E, x, gs, loc), m = reduce_node(E, OP_MEAN, xg, ((int64_t)1 << gs.rank) - 4, true, loc);
    int d = graph_add2(E->g, OP_SUB, xg, m, loc);
    int var = reduce_node(E, OP_MEAN, graph_add2(E->g, OP_MUL, d, d, loc), ((int64_t)1 << gs.rank) - 4, true, loc);
    int y = graph_add2(E->g, OP_DIV, d,
                       graph_add1(E->g, OP_SQRT, graph_add2(E->g, OP_ADD, var, graph_const(E->g, eps, loc), loc), loc),
                       loc);
    y = reshape_node(E, y, s, loc);
    cs.d[cs.rank++] = C; /* a channel's weight and bias, over the axes after it */
    for (int i = 2; i < s.rank; i++) cs.d[cs.rank++] = 1;
    mark_norm_params(E->g, w, b);
    if (w >= 0) y = graph_add2(E->g, OP_MUL, y, reshape_node(E, w, cs, loc), loc);
    if (b >= 0) y = graph_add2(E->g, OP_ADD, y, reshape_node(E, b, cs, loc), loc);
    return vtensor(y);
}

/* torch's normalized_shape, where a call gives it as torch's signature does (F.layer_norm(x, (C,),
 * w, b), F.rms_norm(x, [C], w)): checked against x's last axes and taken out of the arguments, so
 * the rest bind as nnc's layer_norm(x, weight, bias, eps) does; *k its length, 0 where not given. */
bool take_normalized_shape(Elab *E, const char *fn, Args *a, int *k) {
    *k = 0;
    int at = -1;
    for (int i = 0; i < a->n; i++)
        if (a->kw[i] ? !strcmp(a->kw[i], "normalized_shape") : i == 1 && (a->v[i].k == V_TUPLE || a->v[i].k == V_NUM))
            at = i;
    if (at < 0 || a->n < 1 || a->kw[0]) return true;
    int x = tensor_arg(E, a, 0);
    if (x < 0) return false;
    Value v = a->v[at];
    int n = v.k == V_TUPLE ? v.nitems : 1;
    Shape s = E->g->nodes[x].shape;
    bool ok = n >= 1 && n <= s.rank;
    for (int j = 0; ok && j < n; j++) {
        Value d = v.k == V_TUPLE ? v.items[j] : v;
        ok = d.k == V_NUM && !dim_is_batch(s.d[s.rank - n + j]) && d.num == (double)s.d[s.rank - n + j];
    }
    if (!ok) {
        diag_error(E->d, a->loc[at], "%s(): normalized_shape must be the last dimensions of %s", fn, tstr(E, x));
        return false;
    }
    *k = n;
    for (int i = at; i + 1 < a->n; i++) a->v[i] = a->v[i + 1], a->loc[i] = a->loc[i + 1], a->kw[i] = a->kw[i + 1];
    a->n--;
    return true;
}

/* x.float(), x.half(), x.bfloat16(): to(x, f32 | f16 | bf16), as torch's. */
Value read_dtype_method(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input"};
    int ix[1];
    if (!bind_args(E, fn, a, names, 1, ix, 1, loc)) return verror;
    if (!strcmp(fn, "float") && (a->v[ix[0]].k == V_NUM || a->v[ix[0]].k == V_STR))
        return read_number(E, fn, a, loc); /* Python's float("-inf") */
    if (!strcmp(fn, "float") && a->v[ix[0]].k == V_TENSOR && E->g->nodes[a->v[ix[0]].node].dtype == DT_I32)
        return vtensor(graph_add1(E->g, OP_CAST, a->v[ix[0]].node, loc)); /* labels as numbers: exact */
    Args t = {.n = 2};
    t.v[0] = a->v[ix[0]], t.loc[0] = a->loc[ix[0]], t.loc[1] = loc;
    t.v[1] = (Value){.k = V_DTYPE, .num = fn[0] == 'f' ? DT_F32 : fn[0] == 'h' ? DT_F16 : DT_BF16};
    return to_device(E, &t, loc);
}

/* Python's float(v) and int(v) of a number or a string (float("-inf"), nanoGPT's mask value;
 * int(n_embd / n_head)): int truncates toward zero, as Python's. */
Value read_number(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x"};
    int ix[1];
    if (!bind_args(E, fn, a, names, 1, ix, 1, loc)) return verror;
    Value v = a->v[ix[0]];
    double x;
    if (v.k == V_NUM) x = v.num;
    else if (v.k == V_STR) {
        const char *t = v.str;
        while (*t == ' ') t++;
        char *end;
        x = strtod(t, &end);
        while (*end == ' ') end++;
        if (end == t || *end || isnan(x) || (fn[0] == 'i' && (x != floor(x) || strpbrk(t, ".eEiI")))) {
            diag_error(E->d, a->loc[ix[0]], "%s(\"%s\") is not a %s here", fn, v.str,
                       fn[0] == 'i' ? "whole number" : "number (or \"inf\", \"-inf\")");
            return verror;
        }
    } else {
        diag_error(E->d, a->loc[ix[0]], "%s() of a %s: it takes a number or a string%s", fn, kind_name(v.k),
                   fn[0] == 'i' ? "" : " (x.float() converts a tensor)");
        return verror;
    }
    if (fn[0] == 'i') {
        if (isinf(x)) {
            diag_error(E->d, a->loc[ix[0]], "int() of an infinity");
            return verror;
        }
        x = trunc(x);
    }
    return vnum(x);
}

/* Argument i as an axis of x that is not the batch axis (argmax's, cumsum's, gather's dim), or,
 * with last_ok, the batch axis where it is x's last (its rows are whole then). */
static bool sample_dim(Elab *E, const char *fn, int x, Args *a, int i, bool last_ok, int *d) {
    Shape s = E->g->nodes[x].shape;
    if (!dim_arg(E, fn, a->v[i], a->loc[i], s.rank, 0, d)) return false;
    if (dim_is_batch(s.d[*d]) && !(last_ok && *d == s.rank - 1)) {
        diag_error(E->d, a->loc[i], "%s(): dim %d is the batch axis of %s", fn, *d, tstr(E, x));
        return false;
    }
    return true;
}

/* argmax(x, dim, keepdim = false), x.argmax(dim): torch.argmax's index of the first maximum
 * along dim (NaN above everything), i32 (an output, or compared with labels); no gradient.  One
 * row-wise op over the last axis; another axis is moved last first.  dim is required: torch's
 * argmax of the whole tensor would cross the batch axis. */
Value read_argmax(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "dim", "keepdim"};
    int ix[3], d;
    bool ok = true;
    if (!bind_args(E, fn, a, names, 3, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Shape s = E->g->nodes[x].shape;
    if (ix[1] < 0) {
        diag_error(E->d, loc, "%s(): give dim (the whole tensor's would cross the batch axis)", fn);
        return verror;
    }
    if (!sample_dim(E, fn, x, a, ix[1], false, &d)) return verror;
    bool keep = num_arg(E, a, ix[2], 0, &ok) != 0;
    if (!ok) return verror;
    int8_t there[IR_MAX_RANK], back[IR_MAX_RANK];
    axis_last_perms(d, s.rank, there, back);
    x = permute_node(E, x, there, loc);
    Shape r = {0}, k = {0};
    for (int i = 0; i < s.rank; i++) {
        if (i != d) r.d[r.rank++] = s.d[i];
        k.d[k.rank++] = i == d ? 1 : s.d[i];
    }
    int y = graph_add(E->g, op, 1, &x, r, DT_I32, loc);
    return vtensor(keep ? reshape_node(E, y, k, loc) : y);
}

/* cumsum(x, dim), as torch.cumsum: running sums along dim (not the batch axis), in double and
 * rounded at each element; one row-wise op over the last axis (another axis moved last and
 * back); a half x is widened first (autocast's fp32 list has cumsum). */
Value read_cumsum(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "dim"};
    int ix[2], d;
    if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    if (!sample_dim(E, fn, x, a, ix[1], true, &d)) return verror;
    if (DTYPE_IS_HALF(E->g->nodes[x].dtype)) {
        x = graph_add1(E->g, OP_CAST, x, loc);
        E->g->nodes[x].dtype = DT_F32;
    }
    return vtensor(row_op_along(E, OP_CUMSUM, x, d, loc));
}

/* argmin(x, dim, keepdim = false): argmax of -x, which picks the first minimum (and, as
 * torch.argmin, a NaN before any number). */
Value read_argmin(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "dim", "keepdim"};
    int ix[3];
    if (!bind_args(E, fn, a, names, 3, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Args b = *a;
    b.v[ix[0]] = vtensor(graph_add1(E->g, OP_NEG, x, loc));
    return read_argmax(E, OP_ARGMAX, fn, &b, loc);
}

/* 1 where the i32 index idx (reshaped to broadcast) equals a place of `places` (arange(C)), f32:
 * an INDEX_EQ, so that an input read so is checked to lie in [0, C) as it loads. */
static int index_eq(Elab *E, int idx, int places, SrcLoc loc) {
    Shape s;
    if (!shape_broadcast(E->g->nodes[idx].shape, E->g->nodes[places].shape, &s)) return -1;
    int in[2] = {idx, places};
    return graph_add(E->g, OP_INDEX_EQ, 2, in, s, DT_F32, loc);
}

/* one_hot(labels, num_classes): f32 [..., num_classes], 1 at each label's place (torch's is an
 * integer tensor; here one to compute with).  An input's labels are checked to lie in [0,
 * num_classes) as they load; a computed one outside gives a row of zeros where torch fails. */
Value read_one_hot(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"tensor", "num_classes"};
    int ix[2];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
    int y = tensor_arg(E, a, ix[0]);
    double c = num_arg(E, a, ix[1], 0, &ok);
    if (y < 0 || !ok) return verror;
    Shape s = E->g->nodes[y].shape;
    if (E->g->nodes[y].dtype != DT_I32 || s.rank >= IR_MAX_RANK) {
        diag_error(E->d, arg_loc(a, ix[0], loc), "%s() takes i32 labels of at most %d dimensions, got %s", fn,
                   IR_MAX_RANK - 1, tstr(E, y));
        return verror;
    }
    if (c != floor(c) || c < 1 || c > 1e9) {
        diag_error(E->d, arg_loc(a, ix[1], loc), "%s(): num_classes is a positive integer, got %g", fn, c);
        return verror;
    }
    Shape u = s;
    u.d[u.rank++] = 1;
    Args r = {.n = 1};
    r.v[0] = vnum(c), r.loc[0] = loc;
    Value classes = call_builtin(E, "arange", &r, loc);
    if (classes.k == V_ERROR) return verror;
    return vtensor(index_eq(E, reshape_node(E, y, u, loc), classes.node, loc));
}

/* smooth_l1_loss(input, target, reduction = "mean", beta = 1) and huber_loss(..., delta = 1), as
 * torch's: 0.5 d^2 / beta (0.5 d^2) where |d| < beta (delta), else |d| - 0.5 beta
 * (delta (|d| - 0.5 delta)), d = input - target. */
Value read_smooth_l1(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    bool huber = !strcmp(fn, "huber_loss");
    static const char *sn[] = {"input", "target", "reduction", "beta"},
                      *hn[] = {"input", "target", "reduction", "delta"};
    int ix[4], x, y;
    bool ok = true;
    if (!bind_args(E, fn, a, huber ? hn : sn, 4, ix, 2, loc) || !loss_pair(E, fn, a, ix, loc, &x, &y)) return verror;
    double beta = num_arg(E, a, ix[3], 1, &ok);
    if (!ok || !check_range(E, fn, huber ? "delta" : "beta", beta, 0, !huber, INFINITY, false, arg_loc(a, ix[3], loc)))
        return verror;
    int d = graph_add2(E->g, OP_SUB, x, y, loc), ad = graph_add1(E->g, OP_ABS, d, loc);
    int sq = graph_add2(E->g, OP_MUL, graph_add2(E->g, OP_MUL, ad, ad, loc),
                        graph_const(E->g,
                                    huber          ? 0.5
                                        : beta > 0 ? 0.5 / beta
                                                   : 0,
                                    loc),
                        loc);
    int lin = graph_add2(E->g, OP_SUB, ad, graph_const(E->g, 0.5 * beta, loc), loc);
    if (huber) lin = graph_add2(E->g, OP_MUL, lin, graph_const(E->g, beta, loc), loc);
    int in[3] = {graph_add2(E->g, OP_LT, ad, graph_const(E->g, beta, loc), loc), sq, lin};
    Shape s = E->g->nodes[d].shape;
    int r = loss_reduce(E, fn, a, ix[2], graph_add(E->g, OP_SELECT, 3, in, s, DT_F32, loc), loc);
    return r < 0 ? verror : vtensor(r);
}

/* torch.max(x, dim, keepdim = False) and torch.min(...): the named tuple (values, indices), to
 * unpack (`v, i = x.max(dim = 1)`), index (`[0]`) or read (`.values`, `.indices`).  indices is
 * argmax's (argmin's): the first maximum along dim, NaN above everything, i32; values is x
 * gathered there (gather's row op: exact), so its gradient goes to that element alone, as torch's (nnc's max(x, axis = k) shares it among ties, as amax). */
Value read_max_dim(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "dim", "keepdim"};
    int ix[3], d;
    bool ok = true;
    if (!bind_args(E, fn, a, names, 3, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Shape s = E->g->nodes[x].shape;
    if (!dim_arg(E, fn, a->v[ix[1]], a->loc[ix[1]], s.rank, 0, &d)) return verror;
    bool keep = num_arg(E, a, ix[2], 0, &ok) != 0;
    if (!ok) return verror;
    Args b = {.n = 3};
    b.v[0] = vtensor(strcmp(fn, "min") ? x : graph_add1(E->g, OP_NEG, x, loc)), b.v[1] = vnum(d), b.v[2] = vnum(1);
    for (int k = 0; k < 3; k++) b.loc[k] = arg_loc(a, ix[k < 2 ? k : 1], loc);
    Value idx = read_argmax(E, OP_ARGMAX, fn, &b, loc); /* [..., 1, ...]: dim kept */
    if (idx.k == V_ERROR) return verror;
    Args g = {.n = 3}; /* the values: x gathered at those places (exact) */
    g.v[0] = vtensor(x), g.v[1] = vnum(d), g.v[2] = idx;
    for (int k = 0; k < 3; k++) g.loc[k] = b.loc[k];
    Value v = read_gather(E, fn, &g, loc);
    if (v.k == V_ERROR) return verror;
    Shape q = {0};
    for (int i = 0; i < s.rank; i++)
        if (i != d) q.d[q.rank++] = s.d[i];
    Value *items = arena_alloc(E->a, 2 * sizeof *items);
    items[0] = keep ? v : vtensor(reshape_node(E, v.node, q, loc));
    items[1] = keep ? idx : vtensor(reshape_node(E, idx.node, q, loc));
    return (Value){.k = V_TUPLE, .items = items, .nitems = 2, .str = "values,indices"};
}

static int pick_last(Elab *E, const char *fn, int x, int idx, bool has_ignore, double ignore, SrcLoc loc);

/* topk(input, k, dim = -1, largest = True, sorted = True) and sort(input, dim = -1, descending =
 * False, stable = False): the named tuple (values, indices); argsort(input, dim = -1, descending
 * = False, stable = False): the indices.  The indices are one TOPK row op's (torch.sort's stable
 * order: larger or smaller first, NaN above everything, equal elements in their order along the
 * row; topk's are always sorted, as torch's by default), i32; the values are the input gathered
 * there (one GATHER_ROWS), so the gradient goes to the picked elements.  dim is not the batch
 * axis; a half input is widened to f32 first (exact: the same order, the same values). */
Value read_topk(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *tn[] = {"input", "k", "dim", "largest", "sorted"},
                      *sn[] = {"input", "dim", "descending", "stable"};
    bool top = !strcmp(fn, "topk"), arg = !strcmp(fn, "argsort"), ok = true;
    int ix[5], d;
    if (!bind_args(E, fn, a, top ? tn : sn, top ? 5 : 4, ix, top ? 2 : 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Shape s = E->g->nodes[x].shape;
    int di = top ? ix[2] : ix[1];
    if (di >= 0) {
        if (!sample_dim(E, fn, x, a, di, false, &d)) return verror;
    } else if (d = s.rank - 1, s.rank == 0 || dim_is_batch(s.d[d])) {
        diag_error(E->d, loc, "%s(): the last axis of %s is the batch axis: give dim", fn, tstr(E, x));
        return verror;
    }
    int64_t C = s.d[d], k = C;
    bool desc = num_arg(E, a, top ? ix[3] : ix[2], top, &ok) != 0;
    if (top) {
        double kv = num_arg(E, a, ix[1], 0, &ok);
        if (ok && (kv != floor(kv) || kv < 1 || kv > (double)C)) {
            diag_error(E->d, a->loc[ix[1]], "%s(): k is a whole number from 1 to %lld (dim %d of %s), got %g", fn,
                       (long long)C, d, tstr(E, x), kv);
            return verror;
        }
        k = (int64_t)kv;
        (void)num_arg(E, a, ix[4], 1, &ok); /* sorted: always */
    } else (void)num_arg(E, a, ix[3], 0, &ok); /* stable: always */
    if (!ok) return verror;
    int8_t there[IR_MAX_RANK], back[IR_MAX_RANK];
    axis_last_perms(d, s.rank, there, back);
    int xm = permute_node(E, x, there, loc);
    if (DTYPE_IS_HALF(E->g->nodes[xm].dtype)) xm = graph_add1(E->g, OP_CAST, xm, loc); /* f32: exact */
    Shape r = E->g->nodes[xm].shape;
    r.d[r.rank - 1] = k;
    int idx = graph_add(E->g, OP_TOPK, 1, &xm, r, DT_I32, loc);
    E->g->nodes[idx].attr.scalars.p[0] = (double)k, E->g->nodes[idx].attr.scalars.p[1] = desc;
    Value iv = vtensor(permute_node(E, idx, back, loc));
    if (arg) return iv;
    int v = pick_last(E, fn, xm, idx, false, 0, loc);
    if (v < 0) return verror;
    Value *items = arena_alloc(E->a, 2 * sizeof *items);
    items[0] = vtensor(permute_node(E, v, back, loc)), items[1] = iv;
    return (Value){.k = V_TUPLE, .items = items, .nitems = 2, .str = "values,indices"};
}

/* torch's arithmetic by name (x.add(y), torch.mul(a, b)): add(input, other, alpha = 1) is
 * input + alpha other, sub and subtract input - alpha other, rsub other - alpha input; mul and
 * multiply; div, divide and true_divide with rounding_mode None (a / b), "trunc" (trunc(a / b)) or
 * "floor" (a // b); clip is clamp. */
Value read_arith(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    if (!strcmp(fn, "clip")) return call_builtin(E, "clamp", a, loc);
    bool additive = !strcmp(fn, "add") || !strcmp(fn, "sub") || !strcmp(fn, "subtract") || !strcmp(fn, "rsub");
    bool division = fn[0] == 'd' || fn[0] == 't';
    static const char *plus[] = {"input", "other", "alpha"}, *dv[] = {"input", "other", "rounding_mode"},
                      *two[] = {"input", "other"};
    int ix[3] = {-1, -1, -1};
    bool ok = true;
    if (!bind_args(E, fn, a, additive ? plus : division ? dv : two, additive || division ? 3 : 2, ix, 2, loc))
        return verror;
    Value x = a->v[ix[0]], y = a->v[ix[1]];
    SrcLoc yl = a->loc[ix[1]];
    if (x.k != V_TENSOR && y.k != V_TENSOR) {
        diag_error(E->d, loc, "%s() takes a tensor (numbers are added, multiplied and divided by the operators)", fn);
        return verror;
    }
    if (additive) {
        double alpha = num_arg(E, a, ix[2], 1, &ok);
        if (!ok) return verror;
        if (!strcmp(fn, "rsub")) {
            Value t = x;
            x = y, y = t;
        }
        if (alpha != 1) y = arith(E, '*', y, vnum(alpha), yl);
        return arith(E, fn[0] == 'a' ? '+' : '-', x, y, loc);
    }
    if (!division) return arith(E, '*', x, y, loc);
    if (ix[2] < 0 || a->v[ix[2]].k == V_NONE) return arith(E, '/', x, y, loc);
    Value m = a->v[ix[2]];
    if (m.k == V_STR && !strcmp(m.str, "floor")) return arith(E, 'f', x, y, loc);
    if (m.k != V_STR || strcmp(m.str, "trunc")) {
        diag_error(E->d, a->loc[ix[2]], "%s(): rounding_mode is None, \"trunc\" or \"floor\"", fn);
        return verror;
    }
    Value q = arith(E, '/', x, y, loc);
    return q.k == V_TENSOR ? vtensor(graph_add1(E->g, OP_TRUNC, q.node, loc)) : q;
}

/* view_as(input, other) and reshape_as: input in other's shape; expand_as: broadcast to it;
 * type_as: converted to other's type, as torch's. */
Value read_as(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "other"};
    int ix[2];
    if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), o = tensor_arg(E, a, ix[1]);
    if (x < 0 || o < 0) return verror;
    const Node *on = &E->g->nodes[o];
    Args t = {.n = 2};
    t.v[0] = vtensor(x), t.loc[0] = a->loc[ix[0]], t.loc[1] = a->loc[ix[1]];
    if (!strcmp(fn, "type_as")) {
        t.v[1] = (Value){.k = V_DTYPE, .num = on->dtype};
        return on->dtype == E->g->nodes[x].dtype ? vtensor(x) : to_device(E, &t, loc);
    }
    Shape s = on->shape;
    Value *dims = arena_alloc(E->a, (size_t)(s.rank ? s.rank : 1) * sizeof *dims);
    for (int i = 0; i < s.rank; i++)
        dims[i] =
            dim_is_batch(s.d[i]) ? (Value){.k = V_BATCH, .num = (double)dim_size(s.d[i], 1)} : vnum((double)s.d[i]);
    t.v[1] = (Value){.k = V_TUPLE, .items = dims, .nitems = s.rank};
    return call_builtin(E, strcmp(fn, "expand_as") ? "reshape" : "expand", &t, loc);
}

/* softmin(x, dim = -1): softmax(-x), as torch's. */
Value read_softmin(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "dim"};
    int ix[2];
    if (!bind_args(E, fn, a, names, 2, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Args t = *a;
    t.v[ix[0]] = vtensor(graph_add1(E->g, OP_NEG, x, loc));
    return call_builtin(E, "softmax", &t, loc);
}

/* glu(x, dim = -1): a * sigmoid(b), a and b x's halves along dim, as F.glu. */
Value read_glu(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "dim"};
    int ix[2];
    if (!bind_args(E, fn, a, names, 2, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), d;
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Shape s = E->g->nodes[x].shape;
    if (!dim_arg(E, fn, ix[1] < 0 ? vnum(-1) : a->v[ix[1]], arg_loc(a, ix[1], loc), s.rank, 0, &d)) return verror;
    if (dim_is_batch(s.d[d]) || s.d[d] % 2) {
        diag_error(E->d, arg_loc(a, ix[1], loc), "%s(): axis %d of %s must have an even size (not the batch axis)", fn,
                   d, tstr(E, x));
        return verror;
    }
    int h = (int)(s.d[d] / 2);
    int first = slice_node(E, x, d, 0, h, 1, loc), second = slice_node(E, x, d, h, h, 1, loc);
    return vtensor(graph_add2(E->g, OP_MUL, first, graph_add1(E->g, OP_SIGMOID, second, loc), loc));
}

/* prelu(input, weight): input where it is above 0, else weight * input, weight one number or one
 * per channel (axis 1), as F.prelu. */
Value read_prelu(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "weight"};
    int ix[2];
    if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), w = tensor_arg(E, a, ix[1]);
    if (x < 0 || w < 0 || !need_f32(E, x, fn, loc) || !need_f32(E, w, fn, loc)) return verror;
    Shape s = E->g->nodes[x].shape, ws = E->g->nodes[w].shape;
    int64_t n = ws.rank == 0 ? 1 : ws.rank == 1 ? ws.d[0] : -1;
    if (n != 1 && (s.rank < 2 || n != s.d[1])) {
        diag_error(E->d, arg_loc(a, ix[1], loc), "%s(): weight %s is one number or one per channel (axis 1 of %s)", fn,
                   tstr(E, w), tstr(E, x));
        return verror;
    }
    if (n != 1) { /* [C] to [C, 1, ...] against [N, C, ...] */
        Shape r = {.rank = s.rank - 1};
        r.d[0] = n;
        for (int i = 1; i < r.rank; i++) r.d[i] = 1;
        w = reshape_node(E, w, r, loc);
    }
    int in[3] = {graph_add2(E->g, OP_GT, x, graph_const(E->g, 0, loc), loc), x, graph_add2(E->g, OP_MUL, w, x, loc)};
    return vtensor(graph_add(E->g, OP_SELECT, 3, in, s, DT_F32, loc));
}

/* lerp(input, end, weight): input + weight (end - input) where weight < 0.5, else end - (end -
 * input) (1 - weight), as torch.lerp computes it (exact at both ends). */
Value read_lerp(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "end", "weight"};
    int ix[3];
    if (!bind_args(E, fn, a, names, 3, ix, 3, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), e = tensor_arg(E, a, ix[1]);
    if (x < 0 || e < 0 || !need_f32(E, x, fn, loc) || !need_f32(E, e, fn, loc)) return verror;
    Value w = a->v[ix[2]];
    int diff = graph_add2(E->g, OP_SUB, e, x, loc);
    if (w.k == V_NUM)
        return w.num < 0.5 ? arith(E, '+', vtensor(x), arith(E, '*', vnum(w.num), vtensor(diff), loc), loc)
                           : arith(E, '-', vtensor(e), arith(E, '*', vtensor(diff), vnum(1 - w.num), loc), loc);
    int wt = tensor_arg(E, a, ix[2]);
    if (wt < 0 || !need_f32(E, wt, fn, loc)) return verror;
    int lo = graph_add2(E->g, OP_ADD, x, graph_add2(E->g, OP_MUL, wt, diff, loc), loc);
    int hi = graph_add2(
        E->g, OP_SUB, e,
        graph_add2(E->g, OP_MUL, diff, graph_add2(E->g, OP_SUB, graph_const(E->g, 1, loc), wt, loc), loc), loc);
    int in[3] = {graph_add2(E->g, OP_LT, wt, graph_const(E->g, 0.5, loc), loc), lo, hi};
    Shape s = E->g->nodes[lo].shape;
    if (!shape_eq(s, E->g->nodes[hi].shape)) s = E->g->nodes[hi].shape;
    return vtensor(graph_add(E->g, OP_SELECT, 3, in, s, DT_F32, loc));
}

/* addcmul(input, tensor1, tensor2, value = 1): input + value tensor1 tensor2; addcdiv: input +
 * value tensor1 / tensor2, as torch's. */
Value read_addcmul(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "tensor1", "tensor2", "value"};
    int ix[4];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 4, ix, 3, loc)) return verror;
    double v = num_arg(E, a, ix[3], 1, &ok);
    if (!ok) return verror;
    Value p = arith(E, strcmp(fn, "addcmul") ? '/' : '*', a->v[ix[1]], a->v[ix[2]], loc);
    if (v != 1) p = arith(E, '*', vnum(v), p, loc);
    return arith(E, '+', a->v[ix[0]], p, loc);
}

/* kl_div(input, target, reduction = "mean", log_target = false), as F.kl_div: input holds log
 * probabilities; per element target (log target - input), 0 where target is 0 (torch's xlogy),
 * or exp(target) (target - input) with log_target; reduced by "mean", "sum", "none" or
 * "batchmean" (the sum over a sample's elements, averaged over the batch). */
Value read_kl_div(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "target", "reduction", "log_target"};
    int ix[4], x, t;
    bool ok = true;
    if (!bind_args(E, fn, a, names, 4, ix, 2, loc) || !loss_pair(E, fn, a, ix, loc, &x, &t)) return verror;
    bool lt = num_arg(E, a, ix[3], 0, &ok) != 0;
    if (!ok) return verror;
    Shape s = E->g->nodes[x].shape;
    int el;
    if (lt) el = graph_add2(E->g, OP_MUL, graph_add1(E->g, OP_EXP, t, loc), graph_add2(E->g, OP_SUB, t, x, loc), loc);
    else {
        int in[3] = {graph_add2(E->g, OP_EQ, t, graph_const(E->g, 0, loc), loc), graph_const(E->g, 0, loc),
                     graph_add2(E->g, OP_MUL, t, graph_add1(E->g, OP_LOG, t, loc), loc)};
        int xlogy = graph_add(E->g, OP_SELECT, 3, in, s, DT_F32, loc);
        el = graph_add2(E->g, OP_SUB, xlogy, graph_add2(E->g, OP_MUL, t, x, loc), loc);
    }
    if (ix[2] >= 0 && a->v[ix[2]].k == V_STR && !strcmp(a->v[ix[2]].str, "batchmean")) {
        if (s.rank == 0 || !dim_is_batch(s.d[0])) {
            diag_error(E->d, a->loc[ix[2]],
                       "%s(): \"batchmean\" averages over the batch axis, which %s does not lead with", fn, tstr(E, x));
            return verror;
        }
        int64_t rest = ((int64_t)1 << s.rank) - 2;
        int per = rest ? reduce_node(E, OP_SUM, el, rest, false, loc) : el;
        return vtensor(reduce_node(E, OP_MEAN, per, 1, false, loc));
    }
    int r = loss_reduce(E, fn, a, ix[2], el, loc);
    return r < 0 ? verror : vtensor(r);
}

/* binary_cross_entropy(input, target, reduction = "mean"), as F.binary_cross_entropy: input holds
 * probabilities; one elementwise op (its logs clamped at -100, its gradient torch's). */
Value read_bce(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "target", "weight", "reduction"};
    int ix[4], x, y;
    if (!bind_args(E, fn, a, names, 4, ix, 2, loc) || !loss_pair(E, fn, a, ix, loc, &x, &y)) return verror;
    int el = graph_add2(E->g, OP_BCE, x, y, loc);
    if (ix[2] >= 0 && a->v[ix[2]].k != V_NONE) {
        int w = tensor_arg(E, a, ix[2]);
        if (w < 0 || !need_f32(E, w, fn, loc)) return verror;
        el = graph_add2(E->g, OP_MUL, el, w, loc);
        if (el < 0) {
            diag_error(E->d, a->loc[ix[2]], "%s(): weight %s does not broadcast to %s", fn, tstr(E, w), tstr(E, x));
            return verror;
        }
    }
    int r = loss_reduce(E, fn, a, ix[3], el, loc);
    return r < 0 ? verror : vtensor(r);
}

/* ---- einsum ---------------------------------------------------------------------------------- */

typedef struct {
    int node;
    char ix[16]; /* its axes' letters, in order (at most IR_MAX_RANK) */
} EinTerm;

/* t with its axes in the order of the letters `to` (a permutation of t's). */
static EinTerm ein_permute(Elab *E, EinTerm t, const char *to, SrcLoc loc) {
    int8_t perm[IR_MAX_RANK] = IR_PERM_ID;
    int n = (int)strlen(to);
    for (int i = 0; i < n && i < IR_MAX_RANK; i++) perm[i] = (int8_t)(strchr(t.ix, to[i]) - t.ix);
    t.node = permute_node(E, t.node, perm, loc);
    snprintf(t.ix, sizeof t.ix, "%s", to);
    return t;
}

/* t summed over its letters that `keep` does not hold. */
static EinTerm ein_sum_out(Elab *E, EinTerm t, const char *keep, SrcLoc loc) {
    int64_t mask = 0;
    char rest[16] = {0};
    int n = 0;
    for (int i = 0; t.ix[i]; i++) {
        if (strchr(keep, t.ix[i])) rest[n++] = t.ix[i];
        else mask |= (int64_t)1 << i;
    }
    if (!mask) return t;
    t.node = reduce_node(E, OP_SUM, t.node, mask, false, loc);
    snprintf(t.ix, sizeof t.ix, "%s", rest);
    return t;
}

/* The shape of a node whose axes, lettered ix, come in `groups` of neighbours: one axis a group
 * ([.., a, b, ..] to [.., a*b, ..]; an empty group an axis of size 1). */
static int ein_group_shape(Elab *E, int node, const char *ix, const char *const *groups, int ngroups, Shape *out) {
    Shape s = E->g->nodes[node].shape, r = {0};
    for (int g = 0; g < ngroups; g++) {
        int64_t d = 1;
        for (const char *c = groups[g]; *c; c++) d = merge_dim(d, s.d[strchr(ix, *c) - ix]);
        r.d[r.rank++] = d;
    }
    *out = r;
    return r.rank;
}

static void ein_size(Elab *E, EinTerm t, char c, int64_t *d) {
    *d = E->g->nodes[t.node].shape.d[strchr(t.ix, c) - t.ix];
}

static int reshape_if(Elab *E, int x, Shape s, SrcLoc loc) {
    return shape_eq(E->g->nodes[x].shape, s) ? x : reshape_node(E, x, s, loc);
}

/* t as a batch of matrices [bat, p, q], each group of letters one axis: its axes permuted to
 * that order, or, where they come as bat q p already, left so and transposed (a transpose folds
 * into the product; a permute is a copy). */
static int ein_matrix(Elab *E, EinTerm t, const char *bat, const char *p, const char *q, SrcLoc loc) {
    char pq[16], qp[16];
    snprintf(pq, sizeof pq, "%s%s%s", bat, p, q);
    snprintf(qp, sizeof qp, "%s%s%s", bat, q, p);
    bool swap = strcmp(t.ix, pq) && !strcmp(t.ix, qp);
    EinTerm u = ein_permute(E, t, swap ? qp : pq, loc);
    const char *g[3] = {bat, swap ? q : p, swap ? p : q};
    Shape s;
    int r = ein_group_shape(E, u.node, u.ix, g + (*bat == 0), 3 - (*bat == 0), &s);
    int m = reshape_if(E, u.node, s, loc);
    if (!swap) return m;
    int8_t perm[IR_MAX_RANK] = IR_PERM_ID;
    perm[r - 2] = (int8_t)(r - 1), perm[r - 1] = (int8_t)(r - 2);
    return permute_node(E, m, perm, loc);
}

/* Two terms contracted over the letters neither `keep` nor the other terms hold: a batched matrix
 * product [batch, left, k] @ [batch, k, right] (each group merged into one axis), or a broadcast
 * product when they share no letter to sum.  The result's letters: batch, left, right. */
static bool ein_pair(Elab *E, EinTerm *a, EinTerm b, const char *keep, SrcLoc loc) {
    char bat[8] = {0}, lft[8] = {0}, rgt[8] = {0}, con[8] = {0};
    int nb = 0, nl = 0, nr = 0, nc = 0;
    for (const char *c = a->ix; *c; c++) {
        bool inb = strchr(b.ix, *c), kept = strchr(keep, *c);
        if (inb && kept) bat[nb++] = *c;
        else if (inb) con[nc++] = *c;
        else lft[nl++] = *c;
    }
    for (const char *c = b.ix; *c; c++)
        if (!strchr(a->ix, *c)) rgt[nr++] = *c;
    for (int i = 0; i < nb + nc; i++) { /* the same size in both */
        char c = i < nb ? bat[i] : con[i - nb];
        int64_t da, db;
        ein_size(E, *a, c, &da), ein_size(E, b, c, &db);
        if (da != db) {
            diag_error(E->d, loc, "einsum(): '%c' has size %lld in one operand and %lld in the other%s", c,
                       (long long)dim_size(da, 1), (long long)dim_size(db, 1),
                       dim_is_batch(da) != dim_is_batch(db) ? " (one of them the batch axis)" : "");
            return false;
        }
    }
    char res[16];
    snprintf(res, sizeof res, "%s%s%s", bat, lft, rgt);
    if (nb + nl + nr > IR_MAX_RANK) {
        diag_error(E->d, loc, "einsum(): a product of %d axes (%s): a tensor has at most %d", nb + nl + nr, res,
                   IR_MAX_RANK);
        return false;
    }
    Shape out = {0}; /* the result, each letter its own axis */
    for (const char *c = res; *c; c++) {
        int64_t d;
        if (strchr(a->ix, *c)) ein_size(E, *a, *c, &d);
        else ein_size(E, b, *c, &d);
        out.d[out.rank++] = d;
    }
    int r;
    if (nc == 0) { /* nothing to sum: [batch, left, 1] * [batch, 1, right] */
        char order_a[16], order_b[16];
        snprintf(order_a, sizeof order_a, "%s%s", bat, lft);
        snprintf(order_b, sizeof order_b, "%s%s", bat, rgt);
        EinTerm pa = ein_permute(E, *a, order_a, loc), pb = ein_permute(E, b, order_b, loc);
        const char *none = "", *ga[] = {bat, lft, none}, *gb[] = {bat, none, rgt};
        Shape sa, sb;
        ein_group_shape(E, pa.node, pa.ix, ga, 3, &sa);
        ein_group_shape(E, pb.node, pb.ix, gb, 3, &sb);
        r = graph_add2(E->g, OP_MUL, reshape_if(E, pa.node, sa, loc), reshape_if(E, pb.node, sb, loc), loc);
        if (r < 0) return false;
    } else {
        Value m = matmul(E, vtensor(ein_matrix(E, *a, bat, lft, con, loc)),
                         vtensor(ein_matrix(E, b, bat, con, rgt, loc)), loc);
        if (m.k == V_ERROR) return false;
        r = m.node;
    }
    a->node = reshape_if(E, r, out, loc);
    snprintf(a->ix, sizeof a->ix, "%s", res);
    return true;
}

/* An equation with "..." rewritten with a letter of its own for each axis it stands for, as
 * torch.einsum reads it: the axes right-aligned across the operands (an operand's "..." takes the
 * last of them), broadcast where an operand's is 1 and another's is not (that operand expanded),
 * and without "->" put first in the output, before the letters seen once. */
static bool ein_ellipsis(Elab *E, const char *fn, char *eq, size_t cap, Value *ops, int nops, SrcLoc eloc, SrcLoc loc) {
    char fresh[IR_MAX_RANK + 1] = {0}, terms[8][32], outs[64] = {0};
    bool used[128] = {false}, has_out = strstr(eq, "->") != NULL;
    for (const char *c = eq; *c; c++) used[(unsigned char)*c & 127] = true;
    char *arrow = strstr(eq, "->");
    if (arrow) snprintf(outs, sizeof outs, "%s", arrow + 2), *arrow = 0;
    int n = 0, ell[8] = {0}, width = 0; /* each operand's "..." axes, the most of them */
    for (char *p = eq, *q; p && n < 8; p = q, n++) {
        q = strchr(p, ',');
        if (q) *q++ = 0;
        snprintf(terms[n], sizeof terms[n], "%s", p);
    }
    if (n != nops) {
        diag_error(E->d, eloc, "%s(): the equation names %d operands, %d given", fn, n, nops);
        return false;
    }
    for (int k = 0; k < n; k++) {
        int x = as_tensor(E, ops[k], loc), named = 0;
        if (x < 0) return false;
        ops[k] = vtensor(x);
        const char *d = strstr(terms[k], "...");
        for (const char *c = terms[k]; *c; c++) named += *c != '.';
        if (d && strstr(d + 3, "...")) {
            diag_error(E->d, eloc, "%s(): operand %d's subscripts hold \"...\" twice", fn, k);
            return false;
        }
        ell[k] = d ? E->g->nodes[x].shape.rank - named : 0;
        if (ell[k] < 0) {
            diag_error(E->d, eloc, "%s(): operand %d is %s, fewer axes than \"%s\" names", fn, k, tstr(E, ops[k].node),
                       terms[k]);
            return false;
        }
        if (ell[k] > width) width = ell[k];
    }
    for (int c = 'Z', k = 0; k < width && c >= 'A'; c--) /* letters no subscript uses */
        if (!used[c]) fresh[k++] = (char)c;
    if ((int)strlen(fresh) < width) {
        diag_error(E->d, eloc, "%s(): no letters are left for the axes \"...\" stands for", fn);
        return false;
    }
    for (int j = 0; j < width; j++) { /* broadcast: each "..." axis to its largest size */
        int64_t big = 1;
        for (int k = 0; k < n; k++) {
            int i = j - (width - ell[k]);
            if (i < 0) continue;
            const char *d = strstr(terms[k], "...");
            Shape s = E->g->nodes[ops[k].node].shape;
            int64_t v = s.d[(int)(d - terms[k]) + i];
            if (v != 1 && big != 1 && v != big) {
                diag_error(E->d, eloc, "%s(): the axes \"...\" stands for do not broadcast (%lld and %lld)", fn,
                           (long long)dim_size(big, 1), (long long)dim_size(v, 1));
                return false;
            }
            if (v != 1) big = v;
        }
        for (int k = 0; k < n; k++) {
            int i = j - (width - ell[k]);
            if (i < 0) continue;
            int at = (int)(strstr(terms[k], "...") - terms[k]) + i;
            Shape s = E->g->nodes[ops[k].node].shape;
            if (s.d[at] == big) continue;
            s.d[at] = big;
            int x = ops[k].node;
            ops[k] = vtensor(graph_add(E->g, OP_EXPAND, 1, &x, s, E->g->nodes[x].dtype, loc));
        }
    }
    char res[128] = {0};
    int count[128] = {0};
    for (int k = 0; k < n; k++)
        for (const char *c = terms[k]; *c; c++)
            if (*c != '.') count[(unsigned char)*c & 127]++;
    for (int k = 0; k < n; k++) {
        char *d = strstr(terms[k], "...");
        char t[64];
        if (d) *d = 0;
        snprintf(t, sizeof t, "%s%.*s%s", terms[k], ell[k], fresh + (width - ell[k]), d ? d + 3 : "");
        strncat(res, k ? "," : "", sizeof res - strlen(res) - 1);
        strncat(res, t, sizeof res - strlen(res) - 1);
    }
    strncat(res, "->", sizeof res - strlen(res) - 1);
    if (has_out) {
        char *d = strstr(outs, "...");
        char t[64];
        if (d) *d = 0;
        snprintf(t, sizeof t, "%s%s%s", outs, d ? fresh : "", d ? d + 3 : "");
        strncat(res, t, sizeof res - strlen(res) - 1);
    } else { /* implicit: the "..." axes, then the letters seen once, in order */
        size_t at = strlen(res);
        for (int j = 0; j < width && at + 1 < sizeof res; j++) res[at++] = fresh[j];
        for (int c = 'A'; c <= 'z' && at + 1 < sizeof res; c++)
            if (count[c] == 1) res[at++] = (char)c;
        res[at] = 0;
    }
    if (strlen(res) + 1 > cap) {
        diag_error(E->d, eloc, "%s(): the equation is too long", fn);
        return false;
    }
    snprintf(eq, cap, "%s", res);
    return true;
}

/* einsum(equation, a, b, ...), as torch.einsum: "bhqd,bhkd->bhqk" (an output's letters after
 * "->", or without it the letters seen once, in alphabetical order); letters summed where the
 * output lacks them.  Composed of sums, permutes, reshapes and matrix products, two operands at a
 * time from the left: no repeated letter within an operand (a diagonal); "..." as ein_ellipsis
 * spells it out. */
Value read_einsum(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    if (a->n < 2 || a->v[0].k != V_STR) {
        diag_error(E->d, loc, "%s() takes an equation and its operands: einsum(\"ij,jk->ik\", a, b)", fn);
        return verror;
    }
    int nops = a->n - 1;
    Value *ops = a->v + 1;
    if (nops == 1 && a->v[1].k == V_TUPLE) ops = a->v[1].items, nops = a->v[1].nitems; /* einsum(eq, [a, b]) */
    char eq[128], *out = NULL;
    size_t m = 0;
    for (const char *c = a->v[0].str; *c && m + 1 < sizeof eq; c++)
        if (*c != ' ') eq[m++] = *c;
    eq[m] = 0;
    Value opv[8];
    for (int k = 0; k < nops && k < 8; k++) opv[k] = ops[k];
    if (strstr(eq, "...") && !ein_ellipsis(E, fn, eq, sizeof eq, opv, nops, a->loc[0], loc)) return verror;
    ops = opv;
    char *arrow = strstr(eq, "->");
    if (arrow) *arrow = 0, out = arrow + 2;
    EinTerm t[8];
    int n = 0, count[128] = {0};
    for (char *p = eq, *q; p; p = q) {
        q = strchr(p, ',');
        if (q) *q++ = 0;
        if (n == nops || n == 8) {
            diag_error(E->d, a->loc[0], "%s(): the equation names more operands than the %d given", fn, nops);
            return verror;
        }
        int x = as_tensor(E, ops[n], loc);
        if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
        Shape s = E->g->nodes[x].shape;
        if ((int)strlen(p) != s.rank) {
            diag_error(E->d, a->loc[0], "%s(): operand %d is %s, %d axes, but \"%s\" names %d", fn, n, tstr(E, x),
                       s.rank, p, (int)strlen(p));
            return verror;
        }
        for (int i = 0; p[i]; i++) {
            if (!isalpha((unsigned char)p[i]) || strchr(p + i + 1, p[i])) {
                diag_error(E->d, a->loc[0],
                           isalpha((unsigned char)p[i])
                               ? "%s(): '%c' twice in one operand (a diagonal) is not supported"
                               : "%s(): '%c' is not a letter",
                           fn, p[i]);
                return verror;
            }
            count[(unsigned char)p[i]]++;
        }
        t[n].node = x;
        snprintf(t[n].ix, sizeof t[n].ix, "%s", p);
        n++;
    }
    if (n != nops) {
        diag_error(E->d, a->loc[0], "%s(): the equation names %d operands, %d given", fn, n, nops);
        return verror;
    }
    char want[16] = {0};
    if (out) {
        for (int i = 0; out[i]; i++)
            if (!isalpha((unsigned char)out[i]) || !count[(unsigned char)out[i]] || strchr(out + i + 1, out[i]) ||
                i >= IR_MAX_RANK) {
                diag_error(E->d, a->loc[0], "%s(): the output's '%c' %s", fn, out[i],
                           i >= IR_MAX_RANK                      ? "is past the axes a tensor has"
                               : !isalpha((unsigned char)out[i]) ? "is not a letter"
                               : count[(unsigned char)out[i]]    ? "is named twice"
                                                                 : "is in no operand");
                return verror;
            }
        snprintf(want, sizeof want, "%s", out);
    } else {
        int k = 0;
        for (int c = 'A'; c <= 'z'; c++)
            if (count[c] == 1 && k < IR_MAX_RANK) want[k++] = (char)c;
    }
    /* left to right: each term first loses the letters no later term and no output needs */
    for (int i = 0; i < n; i++) {
        char keep[64];
        snprintf(keep, sizeof keep, "%s", want);
        for (int j = i + 1; j < n; j++) strncat(keep, t[j].ix, sizeof keep - strlen(keep) - 1);
        if (i > 0) strncat(keep, t[0].ix, sizeof keep - strlen(keep) - 1);
        t[i] = ein_sum_out(E, t[i], keep, loc);
        if (i == 0) continue;
        char later[64];
        snprintf(later, sizeof later, "%s", want);
        for (int j = i + 1; j < n; j++) strncat(later, t[j].ix, sizeof later - strlen(later) - 1);
        if (!ein_pair(E, &t[0], t[i], later, loc)) return verror;
    }
    t[0] = ein_sum_out(E, t[0], want, loc);
    return vtensor(ein_permute(E, t[0], want, loc).node);
}

/* ---- gather, take_along_dim, index_select ---------------------------------------------------- */

/* x and idx ([..., C] and i32 [..., K]) with their leading axes broadcast to one shape (expanded
 * where they differ, x in f32: a half one widened, exactly), for the row ops that pick and
 * place (GATHER_ROWS, SCATTER_ROWS); false, with an error, where they do not broadcast. */
static bool rows_of_places(Elab *E, const char *fn, int *x, int *idx, Shape *lead, SrcLoc loc) {
    Shape xs = E->g->nodes[*x].shape, is = E->g->nodes[*idx].shape, xl = xs, il = is;
    xl.d[xl.rank - 1] = 1, il.d[il.rank - 1] = 1;
    if (!shape_broadcast(xl, il, lead)) {
        diag_error(E->d, loc, "%s(): the indices %s do not match %s along the other axes", fn, tstr(E, *idx),
                   tstr(E, *x));
        return false;
    }
    if (DTYPE_IS_HALF(E->g->nodes[*x].dtype)) *x = graph_add1(E->g, OP_CAST, *x, loc);
    for (int k = 0; k < 2; k++) {
        int *v = k ? idx : x;
        Shape s = E->g->nodes[*v].shape, w = *lead, pad = {.rank = lead->rank};
        w.d[w.rank - 1] = s.d[s.rank - 1];
        for (int i = 0; i < pad.rank; i++) pad.d[i] = i < pad.rank - s.rank ? 1 : s.d[i - (pad.rank - s.rank)];
        if (shape_eq(s, w)) continue;
        int r = reshape_node(E, *v, pad, loc);
        *v = graph_add(E->g, OP_EXPAND, 1, &r, w, E->g->nodes[*v].dtype, loc);
    }
    return true;
}

/* x [..., C] picked along its last axis by i32 indices idx [..., K] (the leading axes broadcast):
 * out[..., k] = x[..., idx[..., k]], one GATHER_ROWS: exact, and the gradient goes to each picked
 * element (summed where one is picked twice).  An input's indices are checked as they load
 * (codegen/model_desc.c; ignore allowed where has_ignore); a computed one outside [0, C) picks 0
 * where torch fails. */
static int pick_last(Elab *E, const char *fn, int x, int idx, bool has_ignore, double ignore, SrcLoc loc) {
    Shape lead;
    if (!rows_of_places(E, fn, &x, &idx, &lead, loc)) return -1;
    int in[2] = {x, idx};
    int r = graph_add(E->g, OP_GATHER_ROWS, 2, in, E->g->nodes[idx].shape, DT_F32, loc);
    E->g->nodes[r].attr.scalars.p[0] = has_ignore, E->g->nodes[r].attr.scalars.p[1] = ignore;
    return r;
}

static bool index_arg(Elab *E, const char *fn, Args *a, int i, int *idx) {
    *idx = tensor_arg(E, a, i);
    if (*idx < 0) return false;
    if (E->g->nodes[*idx].dtype != DT_I32) {
        diag_error(E->d, a->loc[i], "%s(): the indices are i32 (an input, argmax's), got %s", fn, tstr(E, *idx));
        return false;
    }
    return true;
}

/* gather(input, dim, index) and take_along_dim(input, indices, dim), as torch's: out[..., j, ...]
 * = input[..., index[..., j, ...], ...] along dim, index i32 of input's rank (its other axes
 * input's, or 1 to broadcast); index_select(input, dim, index): the places of a 1-d i32 index
 * along dim.  Moved last, picked (pick_last), moved back; dim not the batch axis. */
Value read_gather(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *gn[] = {"input", "dim", "index"}, *tn[] = {"input", "indices", "dim"};
    bool take = !strcmp(fn, "take_along_dim"), sel = !strcmp(fn, "index_select");
    int ix[3], x, idx, d;
    if (!bind_args(E, fn, a, take ? tn : gn, 3, ix, 3, loc)) return verror;
    int di = take ? ix[2] : ix[1], ii = take ? ix[1] : ix[2];
    x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc) || !index_arg(E, fn, a, ii, &idx)) return verror;
    Shape xs = E->g->nodes[x].shape, is = E->g->nodes[idx].shape;
    if (!sample_dim(E, fn, x, a, di, false, &d)) return verror;
    if (sel ? is.rank != 1 : is.rank != xs.rank) {
        diag_error(E->d, a->loc[ii], sel ? "%s(): the index is 1-d, got %s" : "%s(): the indices %s need %s's rank", fn,
                   tstr(E, idx), tstr(E, x));
        return verror;
    }
    for (int i = 0; !sel && !take && i < xs.rank; i++)
        if (i != d && is.d[i] != xs.d[i]) {
            diag_error(E->d, a->loc[ii], "%s(): the indices %s differ from %s in axis %d (take_along_dim broadcasts)",
                       fn, tstr(E, idx), tstr(E, x), i);
            return verror;
        }
    int8_t there[IR_MAX_RANK], back[IR_MAX_RANK];
    axis_last_perms(d, xs.rank, there, back);
    int xm = permute_node(E, x, there, loc), im = sel ? idx : permute_node(E, idx, there, loc);
    int r = pick_last(E, fn, xm, im, false, 0, loc);
    return r < 0 ? verror : vtensor(permute_node(E, r, back, loc));
}

/* x [..., C] with sources src [..., K] (src < 0: the number `value`) placed along its last axis at
 * i32 indices idx [..., K] (the leading axes broadcast to x's), one SCATTER_ROWS: with `add`,
 * every source that names a place is added to x's element there in k's order (torch.scatter_add);
 * otherwise the place takes the last source naming it (torch's choice where two name one place
 * is unspecified; its CPU kernel's is the last) and keeps x's element where none does.  The
 * gradient is torch's: x's where kept (all of it, adding), each source's at its place.  An
 * input's indices are checked as they load; a computed one outside [0, C) places nothing, where
 * torch fails. */
static int place_last(Elab *E, const char *fn, int x, int idx, int src, double value, bool add, SrcLoc loc) {
    Shape xs = E->g->nodes[x].shape, lead;
    if (!rows_of_places(E, fn, &x, &idx, &lead, loc)) return -1;
    if (!shape_eq(E->g->nodes[x].shape, xs)) {
        diag_error(E->d, loc, "%s(): the indices %s do not match %s along the other axes", fn, tstr(E, idx),
                   tstr(E, x));
        return -1;
    }
    Shape is = E->g->nodes[idx].shape;
    if (src < 0) {
        int c = graph_const(E->g, value, loc);
        src = graph_add(E->g, OP_EXPAND, 1, &c, is, DT_F32, loc);
    } else if (DTYPE_IS_HALF(E->g->nodes[src].dtype)) src = graph_add1(E->g, OP_CAST, src, loc);
    if (!shape_eq(E->g->nodes[src].shape, is)) { /* read_scatter gives the index's shape */
        diag_error(E->d, loc, "%s(): the source %s does not match the indices %s", fn, tstr(E, src), tstr(E, idx));
        return -1;
    }
    int in[3] = {x, idx, src};
    int r = graph_add(E->g, OP_SCATTER_ROWS, 3, in, xs, DT_F32, loc);
    E->g->nodes[r].attr.scalars.p[0] = !add;
    return r;
}

/* scatter(input, dim, index, src or value), scatter_add(input, dim, index, src), as torch's:
 * out[..., index[..., j, ...], ...] = src[..., j, ...] along dim (added, for scatter_add), index
 * i32 of input's shape but along dim, src (a tensor) of index's (or larger: its leading part); index_add(input, dim, index,
 * source, alpha = 1), index_copy(input, dim, index, source) and index_fill(input, dim, index,
 * value): a 1-d index of the places along dim, source input's shape with the index's length
 * along dim.  Moved last, placed (place_last), moved back; dim not the batch axis. */
Value read_scatter(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *sn[] = {"input", "dim", "index", "src", "value", "reduce"},
                      *an[] = {"input", "dim", "index", "source", "alpha"}, *fnm[] = {"input", "dim", "index", "value"};
    bool idx1 = !strncmp(fn, "index_", 6), add = strstr(fn, "add") != NULL, fill = !strcmp(fn, "index_fill");
    bool ok = true;
    int ix[6] = {-1, -1, -1, -1, -1, -1}, x, idx, d;
    /* index_copy's are index_add's but alpha, index_fill's its value */
    const char *const *names = fill ? fnm : idx1 ? an : sn;
    int nn = fill ? 4 : idx1 ? (add ? 5 : 4) : 6;
    if (!bind_args(E, fn, a, names, nn, ix, 4 - (fn[0] == 's' && !add), loc)) return verror;
    x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc) || !index_arg(E, fn, a, ix[2], &idx)) return verror;
    if (!sample_dim(E, fn, x, a, ix[1], false, &d)) return verror;
    Shape xs = E->g->nodes[x].shape, is = E->g->nodes[idx].shape;
    int vi = fill ? ix[3] : fn[0] == 's' && !add && ix[3] < 0 ? ix[4] : ix[3];
    if (!fill && fn[0] == 's' && !add && ix[3] >= 0 && ix[4] >= 0) {
        diag_error(E->d, a->loc[ix[4]], "%s(): give src or value, not both", fn);
        return verror;
    }
    if (!idx1 && ix[5] >= 0 && a->v[ix[5]].k != V_NONE) {
        diag_error(E->d, a->loc[ix[5]], "%s(): reduce is not supported (scatter_add adds; torch deprecates reduce)",
                   fn);
        return verror;
    }
    if (vi < 0) {
        diag_error(E->d, loc, "%s(): give %s", fn, fill ? "value" : "src (a tensor) or value (a number)");
        return verror;
    }
    Value sv = a->v[vi];
    int src = -1;
    double value = 0, alpha = add && idx1 ? num_arg(E, a, ix[4], 1, &ok) : 1;
    if (!ok) return verror;
    if (sv.k == V_NUM && (fill || (fn[0] == 's' && !add))) value = sv.num;
    else if ((src = tensor_arg(E, a, vi)) < 0 || !need_f32(E, src, fn, loc)) return verror;
    Shape want = idx1 ? xs : is;
    if (idx1) want.d[d] = is.d[0];
    if (idx1 ? is.rank != 1 : is.rank != xs.rank) {
        diag_error(E->d, a->loc[ix[2]], idx1 ? "%s(): the index is 1-d, got %s" : "%s(): the index %s needs %s's rank",
                   fn, tstr(E, idx), tstr(E, x));
        return verror;
    }
    for (int i = 0; !idx1 && i < xs.rank; i++)
        if (i != d && is.d[i] != xs.d[i]) {
            diag_error(E->d, a->loc[ix[2]], "%s(): the index %s differs from %s in axis %d", fn, tstr(E, idx),
                       tstr(E, x), i);
            return verror;
        }
    if (src >= 0 && !idx1 && E->g->nodes[src].shape.rank == want.rank) /* torch reads src's leading part */
        for (int i = 0; i < want.rank; i++)
            if (E->g->nodes[src].shape.d[i] > want.d[i] && !dim_is_batch(want.d[i]))
                src = slice_node(E, src, i, 0, want.d[i], 1, loc);
    if (src >= 0 && !shape_eq(E->g->nodes[src].shape, want)) {
        diag_error(E->d, a->loc[vi],
                   idx1 ? "%s(): the source %s needs %s's shape with the index's length along dim %d"
                        : "%s(): the source %s needs the index's shape (%s's, but along dim %d) or a larger one",
                   fn, tstr(E, src), tstr(E, idx1 ? x : idx), d);
        return verror;
    }
    if (src >= 0 && alpha != 1) src = graph_add2(E->g, OP_MUL, src, graph_const(E->g, alpha, loc), loc);
    int8_t there[IR_MAX_RANK], back[IR_MAX_RANK];
    axis_last_perms(d, xs.rank, there, back);
    int xm = permute_node(E, x, there, loc), im = idx1 ? idx : permute_node(E, idx, there, loc);
    int r = place_last(E, fn, xm, im, src >= 0 ? permute_node(E, src, there, loc) : -1, value, add, loc);
    return r < 0 ? verror : vtensor(permute_node(E, r, back, loc));
}

/* ---- repeat_interleave, interpolate ----------------------------------------------------------- */

/* x with each element along axis d repeated r times in place ([a, b] -> [a, a, b, b]): the axes
 * before d merged into one and those after into another, [P, L, 1, S] stretched to [P, L, r, S]
 * (within four axes whatever x's rank), and the shape put back with L r along d. */
static int interleave(Elab *E, int x, int d, int64_t r, SrcLoc loc) {
    Shape s = E->g->nodes[x].shape, m = {.rank = 4, .d = {1, s.d[d], 1, 1}};
    for (int i = 0; i < s.rank; i++)
        if (i != d) m.d[i < d ? 0 : 3] = merge_dim(m.d[i < d ? 0 : 3], s.d[i]);
    int y = reshape_node(E, x, m, loc);
    m.d[2] = r;
    y = graph_add(E->g, OP_EXPAND, 1, &y, m, E->g->nodes[x].dtype, loc);
    s.d[d] *= r;
    return reshape_node(E, y, s, loc);
}

/* repeat_interleave(input, repeats, dim), as torch's with a number of repeats (not a tensor of
 * them) and a dim (not the batch axis); without dim, of the flattened input is refused (it
 * would cross the batch axis). */
Value read_repeat_interleave(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "repeats", "dim"};
    int ix[3], d;
    bool ok = true;
    if (!bind_args(E, fn, a, names, 3, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    double r = num_arg(E, a, ix[1], 1, &ok);
    if (x < 0 || !ok || !need_f32(E, x, fn, loc)) return verror;
    if (r != floor(r) || r < 1 || r > 1 << 20) {
        diag_error(E->d, a->loc[ix[1]],
                   "%s(): repeats is a positive integer here (a tensor of counts is not supported)", fn);
        return verror;
    }
    if (ix[2] < 0) {
        diag_error(E->d, loc, "%s(): give dim (the flattened tensor's would cross the batch axis)", fn);
        return verror;
    }
    if (!sample_dim(E, fn, x, a, ix[2], false, &d)) return verror;
    return r == 1 ? vtensor(x) : vtensor(interleave(E, x, d, (int64_t)r, loc));
}

/* The [out, in] matrix that resamples an axis of `in` places to `out` linearly (torch's
 * upsample_linear weights: source place src(i) = scale (i + 0.5) - 0.5 at least 0, or scale i
 * with align_corners, at most in - 1; weight relu(1 - |src(i) - j|), the two neighbours'
 * lambdas), or by nearest (1 where j = floor(scale i)); scale = in / out, or 1 / scale_factor
 * where it was given. */
static int resample_matrix(Elab *E, int64_t out, int64_t in, double scale, bool nearest, bool corners, SrcLoc loc) {
    Args r = {.n = 1};
    r.loc[0] = loc;
    r.v[0] = vnum((double)out);
    int i = call_builtin(E, "arange", &r, loc).node;
    r.v[0] = vnum((double)in);
    int j = call_builtin(E, "arange", &r, loc).node;
    if (i < 0 || j < 0) return -1;
    i = reshape_node(E, i, (Shape){.rank = 2, .d = {out, 1}}, loc);
    if (nearest) {
        int src = graph_add1(E->g, OP_FLOOR, graph_add2(E->g, OP_MUL, i, graph_const(E->g, scale, loc), loc), loc);
        int lim = graph_add2(E->g, OP_MINIMUM, src, graph_const(E->g, (double)(in - 1), loc), loc);
        return graph_add2(E->g, OP_EQ, lim, j, loc);
    }
    int src = corners
        ? graph_add2(E->g, OP_MUL, i, graph_const(E->g, scale, loc), loc)
        : graph_add2(E->g, OP_SUB,
                     graph_add2(E->g, OP_MUL, graph_add2(E->g, OP_ADD, i, graph_const(E->g, 0.5, loc), loc),
                                graph_const(E->g, scale, loc), loc),
                     graph_const(E->g, 0.5, loc), loc);
    src = graph_add2(E->g, OP_MAXIMUM, src, graph_const(E->g, 0, loc), loc);
    src = graph_add2(E->g, OP_MINIMUM, src, graph_const(E->g, (double)(in - 1), loc), loc);
    int dist = graph_add1(E->g, OP_ABS, graph_add2(E->g, OP_SUB, src, j, loc), loc);
    return graph_add1(E->g, OP_RELU, graph_add2(E->g, OP_SUB, graph_const(E->g, 1, loc), dist, loc), loc);
}

/* interpolate(input, size, scale_factor, mode = "nearest", align_corners), as F.interpolate on
 * [N, C, L] (modes "nearest", "linear") and [N, C, H, W] ("nearest", "bilinear"): nearest by
 * a whole scale repeats each element (exact); otherwise each spatial axis is resampled by a
 * product with its [out, in] weight matrix (resample_matrix), which sums the two neighbours
 * torch weighs and zeros (a NaN or an infinity spreads along its row through them). */
Value read_interpolate(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "size", "scale_factor", "mode", "align_corners"};
    int ix[5];
    if (!bind_args(E, fn, a, names, 5, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Shape s = E->g->nodes[x].shape;
    const char *mode = ix[3] >= 0 && a->v[ix[3]].k == V_STR ? a->v[ix[3]].str : "nearest";
    int sp = s.rank - 2; /* spatial axes */
    bool nearest = !strcmp(mode, "nearest");
    if ((sp != 1 && sp != 2) || (!nearest && strcmp(mode, sp == 1 ? "linear" : "bilinear"))) {
        diag_error(E->d, arg_loc(a, ix[3], loc),
                   "%s(): mode \"%s\" of %s: [N, C, L] takes \"nearest\" or \"linear\", [N, C, H, W] \"nearest\" or "
                   "\"bilinear\"",
                   fn, mode, tstr(E, x));
        return verror;
    }
    bool has_size = ix[1] >= 0 && a->v[ix[1]].k != V_NONE, has_scale = ix[2] >= 0 && a->v[ix[2]].k != V_NONE;
    if (has_size == has_scale) {
        diag_error(E->d, loc, "%s(): give size or scale_factor, one of them", fn);
        return verror;
    }
    bool corners = false, ok = true;
    if (ix[4] >= 0 && a->v[ix[4]].k != V_NONE) {
        corners = num_arg(E, a, ix[4], 0, &ok) != 0;
        if (!ok) return verror;
        if (nearest) {
            diag_error(E->d, a->loc[ix[4]], "%s(): align_corners is for the linear modes, as torch says", fn);
            return verror;
        }
    }
    Value v = a->v[has_size ? ix[1] : ix[2]];
    SrcLoc vl = a->loc[has_size ? ix[1] : ix[2]];
    int y = x;
    for (int k = 0; k < sp; k++) {
        int d = 2 + k;
        int64_t in = s.d[d];
        Value f = v.k == V_TUPLE ? (v.nitems == sp ? v.items[k] : verror) : v;
        if (f.k != V_NUM || !isfinite(f.num) || f.num <= 0 || (has_size && f.num != floor(f.num)) || dim_is_batch(in)) {
            diag_error(E->d, vl, "%s(): %s is a positive %s, or a tuple of one per spatial axis (%d of %s)", fn,
                       has_size ? "size" : "scale_factor", has_size ? "integer" : "number", sp, tstr(E, x));
            return verror;
        }
        int64_t out = has_size ? (int64_t)f.num : (int64_t)floor((double)in * f.num);
        if (out < 1 || out > 1 << 24) {
            diag_error(E->d, vl, "%s(): axis %d of %s would have %lld places", fn, d, tstr(E, x), (long long)out);
            return verror;
        }
        double scale = corners ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0)
            : has_scale        ? 1 / f.num
                               : (double)in / (double)out;
        if (out == in && scale == 1) continue; /* the identity */
        if (nearest && out % in == 0 && scale * (double)(out / in) == 1) {
            y = interleave(E, y, d, out / in, loc); /* a whole scale: each element repeated */
            continue;
        }
        int m = resample_matrix(E, out, in, scale, nearest, corners, loc);
        if (m < 0) return verror;
        /* the axis last, times the matrix's transpose, moved back */
        int8_t there[IR_MAX_RANK], back[IR_MAX_RANK];
        axis_last_perms(d, s.rank, there, back);
        Value p = matmul(E, vtensor(permute_node(E, y, there, loc)),
                         vtensor(permute_node(E, m, (int8_t[IR_MAX_RANK]){1, 0, 2, 3, 4, 5}, loc)), loc);
        if (p.k == V_ERROR) return verror;
        y = permute_node(E, p.node, back, loc);
    }
    return vtensor(y);
}

/* ---- distances and their losses; instance_norm, logaddexp ------------------------------------- */

static int broadcast2(Elab *E, const char *fn, Op op, int a, int b, SrcLoc loc) {
    int r = graph_add2(E->g, op, a, b, loc);
    if (r < 0) diag_error(E->d, loc, "%s(): %s and %s do not broadcast", fn, tstr(E, a), tstr(E, b));
    return r;
}

/* cosine_similarity(x1, x2, dim = 1, eps = 1e-8), as F.cosine_similarity: sum(x1 / n1 * x2 /
 * n2) over dim, each n the vector's 2-norm at least eps (below it the gradient is 0, where
 * torch's passes as if unclamped). */
Value read_cosine_similarity(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x1", "x2", "dim", "eps"};
    int ix[4], d;
    bool ok = true;
    if (!bind_args(E, fn, a, names, 4, ix, 2, loc)) return verror;
    int x1 = tensor_arg(E, a, ix[0]), x2 = tensor_arg(E, a, ix[1]);
    double eps = num_arg(E, a, ix[3], 1e-8, &ok);
    if (x1 < 0 || x2 < 0 || !ok || !need_f32(E, x1, fn, loc) || !need_f32(E, x2, fn, loc)) return verror;
    Shape s;
    if (!shape_broadcast(E->g->nodes[x1].shape, E->g->nodes[x2].shape, &s)) {
        diag_error(E->d, loc, "%s(): %s and %s do not broadcast", fn, tstr(E, x1), tstr(E, x2));
        return verror;
    }
    if (!dim_arg(E, fn, ix[2] < 0 ? vnum(1) : a->v[ix[2]], arg_loc(a, ix[2], loc), s.rank, 0, &d)) return verror;
    int unit[2], xs[2] = {x1, x2};
    for (int k = 0; k < 2; k++) {
        Shape t = E->g->nodes[xs[k]].shape;
        int dk = d - (s.rank - t.rank); /* its axis under dim, broadcast from the right */
        if (dk < 0) {
            diag_error(E->d, loc, "%s(): %s has no axis %d to sum over", fn, tstr(E, xs[k]), d);
            return verror;
        }
        int n = reduce_node(E, OP_SUM, graph_add2(E->g, OP_MUL, xs[k], xs[k], loc), (int64_t)1 << dk, true, loc);
        int c = graph_add1(E->g, OP_CLAMP, n, loc);
        E->g->nodes[c].attr.scalars.p[0] = eps * eps, E->g->nodes[c].attr.scalars.p[1] = INFINITY;
        unit[k] = graph_add2(E->g, OP_DIV, xs[k], graph_add1(E->g, OP_SQRT, c, loc), loc);
    }
    return vtensor(
        reduce_node(E, OP_SUM, graph_add2(E->g, OP_MUL, unit[0], unit[1], loc), (int64_t)1 << d, false, loc));
}

/* ||x1 - x2 + eps||_p over the last axis (p 2 or 1), as F.pairwise_distance. */
static int distance(Elab *E, const char *fn, int x1, int x2, double p, double eps, bool keep, SrcLoc loc) {
    int d = broadcast2(E, fn, OP_SUB, x1, x2, loc);
    if (d < 0) return -1;
    d = graph_add2(E->g, OP_ADD, d, graph_const(E->g, eps, loc), loc);
    int r = E->g->nodes[d].shape.rank;
    return norm_node(E, d, p, (int64_t)1 << (r ? r - 1 : 0), keep, loc);
}

/* pairwise_distance(x1, x2, p = 2, eps = 1e-6, keepdim = false). */
Value read_pairwise_distance(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x1", "x2", "p", "eps", "keepdim"};
    int ix[5];
    double p;
    bool ok = true;
    if (!bind_args(E, fn, a, names, 5, ix, 2, loc)) return verror;
    int x1 = tensor_arg(E, a, ix[0]), x2 = tensor_arg(E, a, ix[1]);
    double eps = num_arg(E, a, ix[3], 1e-6, &ok);
    bool keep = num_arg(E, a, ix[4], 0, &ok) != 0;
    if (x1 < 0 || x2 < 0 || !ok || !norm_p(E, fn, a, ix[2], &p) || !need_f32(E, x1, fn, loc) ||
        !need_f32(E, x2, fn, loc))
        return verror;
    int r = distance(E, fn, x1, x2, p, eps, keep, loc);
    return r < 0 ? verror : vtensor(r);
}

/* triplet_margin_loss(anchor, positive, negative, margin = 1, p = 2, eps = 1e-6, swap = false,
 * reduction = "mean"): relu(margin + d(a, p) - d(a, n)) with F.pairwise_distance's d (swap: d(a, n)
 * the smaller of it and d(p, n)); margin_ranking_loss(input1, input2, target, margin = 0,
 * reduction): relu(-target (input1 - input2) + margin), as torch's. */
Value read_margin_loss(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *tn[] = {"anchor", "positive", "negative", "margin", "p", "eps", "swap", "reduction"},
                      *rn[] = {"input1", "input2", "target", "margin", "reduction"};
    bool triplet = !strcmp(fn, "triplet_margin_loss"), ok = true;
    int ix[8], t[3];
    if (!bind_args(E, fn, a, triplet ? tn : rn, triplet ? 8 : 5, ix, 3, loc)) return verror;
    for (int k = 0; k < 3; k++)
        if ((t[k] = tensor_arg(E, a, ix[k])) < 0 || !need_f32(E, t[k], fn, loc)) return verror;
    double margin = num_arg(E, a, ix[3], triplet ? 1 : 0, &ok);
    if (!ok) return verror;
    int el;
    if (triplet) {
        double p, eps = num_arg(E, a, ix[5], 1e-6, &ok);
        bool swap = num_arg(E, a, ix[6], 0, &ok) != 0;
        if (!ok || !norm_p(E, fn, a, ix[4], &p)) return verror;
        int dp = distance(E, fn, t[0], t[1], p, eps, false, loc), dn = distance(E, fn, t[0], t[2], p, eps, false, loc);
        if (dp < 0 || dn < 0) return verror;
        if (swap) {
            int ds = distance(E, fn, t[1], t[2], p, eps, false, loc);
            if (ds < 0) return verror;
            dn = graph_add2(E->g, OP_MINIMUM, dn, ds, loc);
        }
        el = graph_add2(E->g, OP_SUB, graph_add2(E->g, OP_ADD, dp, graph_const(E->g, margin, loc), loc), dn, loc);
    } else {
        int d = broadcast2(E, fn, OP_SUB, t[0], t[1], loc);
        if (d < 0) return verror;
        int m = broadcast2(E, fn, OP_MUL, graph_add1(E->g, OP_NEG, t[2], loc), d, loc);
        if (m < 0) return verror;
        el = graph_add2(E->g, OP_ADD, m, graph_const(E->g, margin, loc), loc);
    }
    int r = loss_reduce(E, fn, a, ix[triplet ? 7 : 4], graph_add1(E->g, OP_RELU, el, loc), loc);
    return r < 0 ? verror : vtensor(r);
}

/* instance_norm(input, running_mean = None, running_var = None, weight, bias, use_input_stats =
 * true, momentum, eps = 1e-5), as F.instance_norm with the statistics of each sample's channel:
 * group_norm with a group a channel. */
Value read_instance_norm(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "running_mean",    "running_var", "weight",
                                  "bias",  "use_input_stats", "momentum",    "eps"};
    int ix[8];
    if (!bind_args(E, fn, a, names, 8, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0) return verror;
    for (int k = 1; k <= 2; k++)
        if (ix[k] >= 0 && a->v[ix[k]].k != V_NONE) {
            diag_error(E->d, a->loc[ix[k]], "%s(): running statistics are not supported (each sample's own are used)",
                       fn);
            return verror;
        }
    Shape s = E->g->nodes[x].shape;
    if (s.rank < 3 || dim_is_batch(s.d[1])) {
        diag_error(E->d, loc, "%s(): input [N, C, ...] with at least one axis after the channels, got %s", fn,
                   tstr(E, x));
        return verror;
    }
    Args g = {.n = 0};
    g.v[g.n] = vtensor(x), g.loc[g.n++] = a->loc[ix[0]];
    g.v[g.n] = vnum((double)s.d[1]), g.loc[g.n++] = loc;
    static const char *kw[] = {"weight", "bias"};
    for (int k = 0; k < 2; k++)
        if (ix[3 + k] >= 0 && a->v[ix[3 + k]].k != V_NONE)
            g.v[g.n] = a->v[ix[3 + k]], g.loc[g.n] = a->loc[ix[3 + k]], g.kw[g.n++] = kw[k];
    if (ix[7] >= 0) g.v[g.n] = a->v[ix[7]], g.loc[g.n] = a->loc[ix[7]], g.kw[g.n++] = "eps";
    return call_builtin(E, "group_norm", &g, loc);
}

/* logaddexp(a, b): log(exp(a) + exp(b)) as torch computes it, max(a, b) + log1p(exp(-|a - b|)),
 * a where a and b are the same infinity. */
Value read_logaddexp(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "other"};
    int ix[2];
    if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), y = tensor_arg(E, a, ix[1]);
    if (x < 0 || y < 0 || !need_f32(E, x, fn, loc) || !need_f32(E, y, fn, loc)) return verror;
    int m = broadcast2(E, fn, OP_MAXIMUM, x, y, loc);
    if (m < 0) return verror;
    int d = graph_add1(E->g, OP_ABS, graph_add2(E->g, OP_SUB, x, y, loc), loc);
    int r = graph_add2(E->g, OP_ADD, m,
                       graph_add1(E->g, OP_LOG1P, graph_add1(E->g, OP_EXP, graph_add1(E->g, OP_NEG, d, loc), loc), loc),
                       loc);
    int same_inf =
        graph_add2(E->g, OP_MUL, graph_add2(E->g, OP_EQ, x, y, loc), graph_add1(E->g, OP_NONFINITE, x, loc), loc);
    int in[3] = {same_inf, x, r};
    return vtensor(graph_add(E->g, OP_SELECT, 3, in, E->g->nodes[r].shape, DT_F32, loc));
}
