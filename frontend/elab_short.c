/* elab_short.c - torch functions that are a line or two of other builtins, so that model code
 * copied from PyTorch reads as written: x.bool(), x.new_zeros(...), x.unflatten(dim, sizes),
 * clamp_min and clamp_max, addmm and baddbmm, diff, var_mean and std_mean, the shrink functions,
 * movedim, select, all, any and count_nonzero, and torch.tensor of a list of numbers.  Each
 * builds what its torch counterpart computes from ops whose gradients autograd already has. */
#include <math.h>
#include <string.h>

#include "elab_impl.h"

/* The builtin `fn2` called with a's arguments, renamed (clamp_min(x, m) is clamp(x, min = m)):
 * `kw` gives each positional argument of a its name there (NULL: positional). */
static Value call_as(Elab *E, const char *fn2, Args *a, const char *const *kw, int nkw, SrcLoc loc) {
    Args b = *a;
    for (int k = 0; k < b.n && k < nkw; k++)
        if (!b.kw[k]) b.kw[k] = kw[k];
    return call_builtin(E, fn2, &b, loc);
}

/* x.bool(): x != 0 as the f32 mask nnc's comparisons give (torch's bool tensor: 1 where true);
 * an i32 index's .long() and .int() are the index itself. */
Value read_bool(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input"};
    int ix[1];
    if (!bind_args(E, fn, a, names, 1, ix, 1, loc)) return verror;
    if (strcmp(fn, "bool") && a->v[ix[0]].k != V_TENSOR) return read_number(E, "int", a, loc);
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0) return verror;
    if (strcmp(fn, "bool")) {
        if (E->g->nodes[x].dtype == DT_I32) return vtensor(x);
        diag_error(E->d, loc,
                   "%s() of %s: nnc's integer tensors are i32 labels and indices (inputs, argmax's, topk's); "
                   "round() or floor() keep a float whole",
                   fn, tstr(E, x));
        return verror;
    }
    if (!need_f32(E, x, fn, loc)) return verror;
    return vtensor(graph_add2(E->g, OP_NE, x, graph_const(E->g, 0, loc), loc));
}

/* x.new_zeros(size), new_ones, new_full(size, fill_value), new_empty (zeros): a tensor of that
 * size, as zeros() and full() make it (x only says the dtype, f32 here). */
Value read_new(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    if (a->n < 2) {
        diag_error(E->d, loc, "x.%s(size...): give the size", fn);
        return verror;
    }
    Args b = args_without(a, 0); /* the size, without x */
    const char *to = !strcmp(fn, "new_ones") ? "ones" : !strcmp(fn, "new_full") ? "full" : "zeros";
    return call_builtin(E, to, &b, loc);
}

/* The arguments (input, dim, ...) all given: x, and dim as an axis of x that is not the batch
 * axis (unflatten's, select's). */
static bool input_and_dim(Elab *E, const char *fn, Args *a, const char *const *names, int n, int *ix, int *x, int *d,
                          SrcLoc loc) {
    bool ok = true;
    if (!bind_args(E, fn, a, names, n, ix, n, loc) || (*x = tensor_arg(E, a, ix[0])) < 0) return false;
    Shape s = E->g->nodes[*x].shape;
    int64_t bit = axis_bit(E, a->v[ix[1]], a->loc[ix[1]], s.rank, &ok);
    if (!ok) return false;
    *d = __builtin_ctzll((unsigned long long)bit);
    if (dim_is_batch(s.d[*d])) {
        diag_error(E->d, a->loc[ix[1]], "%s(): dim %d is the batch axis of %s", fn, *d, tstr(E, *x));
        return false;
    }
    return true;
}

/* x.unflatten(dim, sizes), as torch's: axis dim split into sizes (one may be -1). */
Value read_unflatten(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "dim", "sizes"};
    int ix[3], x, d;
    if (!input_and_dim(E, fn, a, names, 3, ix, &x, &d, loc)) return verror;
    Shape s = E->g->nodes[x].shape;
    Value sz = a->v[ix[2]];
    if (sz.k != V_TUPLE || sz.nitems < 1 || s.rank - 1 + sz.nitems > IR_MAX_RANK) {
        diag_error(E->d, a->loc[ix[2]], "%s(): sizes is a tuple of at most %d sizes, (2, -1)", fn,
                   IR_MAX_RANK - s.rank + 1);
        return verror;
    }
    double known = 1; /* sizes' product but a -1 */
    int free = -1;
    for (int k = 0; k < sz.nitems; k++) {
        double v = sz.items[k].k == V_NUM ? sz.items[k].num : 0;
        if (v == -1 && free < 0) free = k;
        else if (v < 1 || v != floor(v)) {
            diag_error(E->d, a->loc[ix[2]], "%s(): sizes are positive whole numbers, one of them -1 at most", fn);
            return verror;
        } else known *= v;
    }
    double whole = (double)s.d[d], left = whole / known;
    if ((free < 0 && known != whole) || (free >= 0 && left != floor(left))) {
        diag_error(E->d, a->loc[ix[2]], "%s(): sizes do not make dim %d's %lld elements of %s", fn, d,
                   (long long)s.d[d], tstr(E, x));
        return verror;
    }
    Args r = {.n = 1};
    r.v[0] = a->v[ix[0]], r.loc[0] = a->loc[ix[0]];
    for (int i = 0; i < s.rank; i++) { /* reshape(x, sizes with dim's replaced), -1 for the batch axis */
        if (i != d) {
            r.v[r.n] = dim_is_batch(s.d[i]) ? vnum(-1) : vnum((double)s.d[i]), r.loc[r.n++] = loc;
            continue;
        }
        for (int k = 0; k < sz.nitems; k++)
            r.v[r.n] = k == free ? vnum(left) : sz.items[k], r.loc[r.n++] = a->loc[ix[2]];
    }
    return call_builtin(E, "reshape", &r, loc);
}

/* clamp_min(x, min), clamp_max(x, max): clamp with one bound. */
Value read_clamp_one(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *lo[] = {NULL, "min"}, *hi[] = {NULL, "max"};
    return call_as(E, "clamp", a, strcmp(fn, "clamp_min") ? hi : lo, 2, loc);
}

/* addmm(input, mat1, mat2, beta = 1, alpha = 1), baddbmm(input, batch1, batch2, ...), addbmm is
 * not here: beta input + alpha (mat1 @ mat2), as torch's (mm's and bmm's checks on the product). */
Value read_addmm(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "mat1", "mat2", "beta", "alpha"},
                      *bnames[] = {"input", "batch1", "batch2", "beta", "alpha"};
    bool batched = fn[0] == 'b', ok = true;
    int ix[5];
    if (!bind_args(E, fn, a, batched ? bnames : names, 5, ix, 3, loc)) return verror;
    double beta = num_arg(E, a, ix[3], 1, &ok), alpha = num_arg(E, a, ix[4], 1, &ok);
    int x = tensor_arg(E, a, ix[0]);
    if (!ok || x < 0) return verror;
    Args m = {.n = 2};
    m.v[0] = a->v[ix[1]], m.v[1] = a->v[ix[2]], m.loc[0] = a->loc[ix[1]], m.loc[1] = a->loc[ix[2]];
    Value p = call_builtin(E, batched ? "bmm" : "mm", &m, loc);
    if (p.k == V_ERROR) return verror;
    int y = p.node;
    if (alpha != 1) y = graph_add2(E->g, OP_MUL, y, graph_const(E->g, alpha, loc), loc);
    if (beta == 0) return vtensor(y); /* torch ignores input then (NaN in it too) */
    if (beta != 1) x = graph_add2(E->g, OP_MUL, x, graph_const(E->g, beta, loc), loc);
    int r = graph_add2(E->g, OP_ADD, x, y, loc);
    if (r < 0 || !shape_eq(E->g->nodes[r].shape, E->g->nodes[p.node].shape)) {
        diag_error(E->d, arg_loc(a, ix[0], loc), "%s(): input %s does not broadcast to the product's %s", fn,
                   tstr(E, x), tstr(E, p.node));
        return verror;
    }
    return vtensor(r);
}

/* diff(input, n = 1, dim = -1), as torch.diff: x[1:] - x[:-1] along dim, n times (not the batch
 * axis; prepend and append are not taken). */
Value read_diff(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "n", "dim"};
    int ix[3];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 3, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Shape s = E->g->nodes[x].shape;
    double n = num_arg(E, a, ix[1], 1, &ok);
    int64_t bit = ix[2] < 0 ? (int64_t)1 << (s.rank - 1) : axis_bit(E, a->v[ix[2]], a->loc[ix[2]], s.rank, &ok);
    if (!ok) return verror;
    int d = __builtin_ctzll((unsigned long long)bit);
    if (s.rank == 0 || dim_is_batch(s.d[d])) {
        diag_error(E->d, arg_loc(a, ix[2], loc), "%s(): dim %d is the batch axis of %s", fn, d, tstr(E, x));
        return verror;
    }
    if (n != floor(n) || n < 0 || n >= (double)s.d[d]) {
        diag_error(E->d, arg_loc(a, ix[1], loc), "%s(): n is a whole number below the length %lld of dim %d", fn,
                   (long long)s.d[d], d);
        return verror;
    }
    for (int k = 0; k < (int)n; k++) {
        int64_t L = E->g->nodes[x].shape.d[d];
        x = graph_add2(E->g, OP_SUB, slice_node(E, x, d, 1, L - 1, 1, loc), slice_node(E, x, d, 0, L - 1, 1, loc), loc);
    }
    return vtensor(x);
}

/* var_mean(input, dim, correction = 1, keepdim = false), std_mean: the tuple (var, mean), as
 * var() and mean() compute them. */
Value read_var_mean(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    Value v = call_builtin(E, fn[0] == 'v' ? "var" : "std", a, loc);
    if (v.k == V_ERROR) return verror;
    static const char *names[] = {"x", "dim", "correction", "keepdim"};
    int ix[4];
    if (!bind_args(E, fn, a, names, 4, ix, 1, loc)) return verror;
    Args m = {.n = 0};
    static const char *kw[] = {NULL, "dim", NULL, "keepdim"};
    for (int k = 0; k < 4; k++)
        if (ix[k] >= 0 && k != 2) m.v[m.n] = a->v[ix[k]], m.loc[m.n] = a->loc[ix[k]], m.kw[m.n++] = kw[k];
    Value mu = call_builtin(E, "mean", &m, loc);
    if (mu.k == V_ERROR) return verror;
    Value *items = arena_alloc(E->a, 2 * sizeof *items);
    items[0] = v, items[1] = mu;
    return (Value){.k = V_TUPLE, .items = items, .nitems = 2};
}

/* hardshrink(x, lambd = 0.5): x where |x| > lambd, else 0; softshrink: x -+ lambd there;
 * tanhshrink(x): x - tanh(x); threshold(x, threshold, value): x where x > threshold, else value.
 * A NaN goes as in torch: kept by hardshrink (with no gradient) and threshold, 0 in softshrink. */
Value read_shrink(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *sn[] = {"input", "lambd"}, *tn[] = {"input", "threshold", "value"};
    bool th = !strcmp(fn, "threshold"), tanh_ = !strcmp(fn, "tanhshrink"), ok = true;
    int ix[3];
    if (!bind_args(E, fn, a, th ? tn : sn, th ? 3 : tanh_ ? 1 : 2, ix, th ? 3 : 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Shape s = E->g->nodes[x].shape;
    if (tanh_) return vtensor(graph_add2(E->g, OP_SUB, x, graph_add1(E->g, OP_TANH, x, loc), loc));
    double l = num_arg(E, a, ix[1], 0.5, &ok), v = th ? num_or_inf_arg(E, a, ix[2], 0, &ok) : 0;
    if (!ok) return verror;
    if (!th && l < 0) {
        diag_error(E->d, arg_loc(a, ix[1], loc), "%s(): lambd is at least 0, got %g", fn, l);
        return verror;
    }
    int lc = graph_const(E->g, l, loc), zero = graph_const(E->g, 0, loc);
    if (th) { /* x > threshold ? x : value, NaN kept as torch's (x <= t is false) */
        int in[3] = {graph_add2(E->g, OP_LE, x, lc, loc), graph_const(E->g, v, loc), x};
        return vtensor(graph_add(E->g, OP_SELECT, 3, in, s, E->g->nodes[x].dtype, loc));
    }
    if (!strcmp(fn, "softshrink")) { /* x > l ? x - l : x < -l ? x + l : 0 (NaN: 0, as torch's) */
        int lo[3] = {graph_add2(E->g, OP_LT, x, graph_const(E->g, -l, loc), loc), graph_add2(E->g, OP_ADD, x, lc, loc),
                     zero};
        int in[3] = {graph_add2(E->g, OP_GT, x, lc, loc), graph_add2(E->g, OP_SUB, x, lc, loc),
                     graph_add(E->g, OP_SELECT, 3, lo, s, E->g->nodes[x].dtype, loc)};
        return vtensor(graph_add(E->g, OP_SELECT, 3, in, s, E->g->nodes[x].dtype, loc));
    }
    /* hardshrink: x where |x| > l, 0 where |x| <= l, and a NaN kept with no gradient (torch's) */
    int ax = graph_add1(E->g, OP_ABS, x, loc);
    int nan[3] = {graph_add2(E->g, OP_LE, ax, lc, loc), zero, graph_add1(E->g, OP_DETACH, x, loc)};
    int in[3] = {graph_add2(E->g, OP_GT, ax, lc, loc), x,
                 graph_add(E->g, OP_SELECT, 3, nan, s, E->g->nodes[x].dtype, loc)};
    return vtensor(graph_add(E->g, OP_SELECT, 3, in, s, E->g->nodes[x].dtype, loc));
}

/* movedim(x, source, destination) and moveaxis: one axis moved (ints), the others in order. */
Value read_movedim(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "source", "destination"};
    int ix[3];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 3, ix, 3, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0) return verror;
    int r = E->g->nodes[x].shape.rank;
    int src = __builtin_ctzll((unsigned long long)axis_bit(E, a->v[ix[1]], a->loc[ix[1]], r, &ok));
    int dst = ok ? __builtin_ctzll((unsigned long long)axis_bit(E, a->v[ix[2]], a->loc[ix[2]], r, &ok)) : 0;
    if (!ok) return verror;
    int8_t p[IR_MAX_RANK];
    for (int i = 0, k = 0; i < IR_MAX_RANK; i++) { /* the axes but src, with src put at dst */
        if (i >= r) {
            p[i] = (int8_t)i;
            continue;
        }
        if (i == dst) {
            p[i] = (int8_t)src;
            continue;
        }
        if (k == src) k++;
        p[i] = (int8_t)k++;
    }
    return vtensor(permute_node(E, x, p, loc));
}

/* select(input, dim, index), x.select(dim, index): x[..., index, ...] along dim, the axis dropped
 * (an index as the subscript takes it: a number, negative from the end; not the batch axis). */
Value read_select(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "dim", "index"};
    int ix[3], x, d;
    bool ok = true;
    if (!input_and_dim(E, fn, a, names, 3, ix, &x, &d, loc)) return verror;
    Shape s = E->g->nodes[x].shape;
    double i = num_arg(E, a, ix[2], 0, &ok);
    if (!ok) return verror;
    if (i != floor(i) || i < -(double)s.d[d] || i >= (double)s.d[d]) {
        diag_error(E->d, a->loc[ix[2]], "%s(): index %g is outside dim %d of %s", fn, i, d, tstr(E, x));
        return verror;
    }
    int y = slice_node(E, x, d, (int64_t)(i < 0 ? i + (double)s.d[d] : i), 1, 1, loc);
    Shape r = {0};
    for (int k = 0; k < s.rank; k++)
        if (k != d) r.d[r.rank++] = s.d[k];
    return vtensor(reshape_node(E, y, r, loc));
}

/* all(x, dim, keepdim), any(...), count_nonzero(x, dim): over (x != 0), the smallest, the
 * largest (an f32 mask, 1 or 0, as nnc's comparisons give) or the sum. */
Value read_all_any(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "dim", "keepdim"};
    int ix[3];
    bool count = fn[0] == 'c';
    if (!bind_args(E, fn, a, names, count ? 2 : 3, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !need_f32(E, x, fn, loc)) return verror;
    Args b = {.n = 1};
    b.v[0] = vtensor(graph_add2(E->g, OP_NE, x, graph_const(E->g, 0, loc), loc)), b.loc[0] = a->loc[ix[0]];
    static const char *kw[] = {NULL, "axis", "keepdim"};
    for (int k = 1; k < (count ? 2 : 3); k++)
        if (ix[k] >= 0) b.v[b.n] = a->v[ix[k]], b.loc[b.n] = a->loc[ix[k]], b.kw[b.n++] = kw[k];
    return call_builtin(E, count ? "sum" : fn[1] == 'l' ? "min" : "max", &b, loc);
}

/* torch.tensor(data): a constant of a list of numbers, or a list of such lists of one length
 * (at most 2 axes and 256 numbers: each value is a constant of the model). */
Value read_tensor_of(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"data", "dtype", "requires_grad"};
    int ix[3];
    if (!bind_args(E, fn, a, names, 3, ix, 1, loc)) return verror;
    Value v = a->v[ix[0]];
    if (v.k == V_NUM) return vtensor(graph_const(E->g, v.num, loc));
    int rows = v.k == V_TUPLE ? v.nitems : 0, cols = -1;
    for (int i = 0; i < rows; i++) {
        Value r = v.items[i];
        int c = r.k == V_TUPLE ? r.nitems : r.k == V_NUM ? 0 : -2;
        if (cols == -1) cols = c;
        if (c != cols || c == -2) cols = -3;
        for (int j = 0; c > 0 && j < c; j++)
            if (r.items[j].k != V_NUM) cols = -3;
    }
    if (rows < 1 || cols == -3 || (double)rows * (cols > 0 ? cols : 1) > 256) {
        diag_error(E->d, arg_loc(a, ix[0], loc),
                   "%s(): data is a list of numbers ([1.0, 2.0]) or of such lists of one length, at most 256 "
                   "numbers",
                   fn);
        return verror;
    }
    int nrow = cols > 0 ? rows : 1, ncol = cols > 0 ? cols : rows;
    int *row = arena_alloc(E->a, (size_t)nrow * sizeof *row);
    for (int i = 0; i < nrow; i++) { /* each row: its numbers, one element each, joined */
        Args c = {.n = 2};
        c.loc[0] = c.loc[1] = loc;
        Value *parts = arena_alloc(E->a, (size_t)ncol * sizeof *parts);
        for (int j = 0; j < ncol; j++) {
            int k = graph_const(E->g, cols > 0 ? v.items[i].items[j].num : v.items[j].num, loc);
            parts[j] = vtensor(graph_add(E->g, OP_EXPAND, 1, &k, (Shape){.rank = 1, .d = {1}}, DT_F32, loc));
        }
        if (ncol == 1) {
            row[i] = parts[0].node;
            continue;
        }
        c.v[0] = (Value){.k = V_TUPLE, .items = parts, .nitems = ncol}, c.v[1] = vnum(0);
        Value j = call_builtin(E, "cat", &c, loc);
        if (j.k == V_ERROR) return verror;
        row[i] = j.node;
    }
    if (cols <= 0) return vtensor(row[0]);
    Value *rv = arena_alloc(E->a, (size_t)nrow * sizeof *rv);
    for (int i = 0; i < nrow; i++) rv[i] = vtensor(row[i]);
    Args s = {.n = 2};
    s.v[0] = (Value){.k = V_TUPLE, .items = rv, .nitems = nrow}, s.v[1] = vnum(0), s.loc[0] = s.loc[1] = loc;
    return call_builtin(E, "stack", &s, loc);
}

/* Another name for a builtin, as torch spells it: torch.special.expit(x) is sigmoid(x),
 * torch.absolute(x) abs(x), torch.arcsin(x) asin(x) (numpy's names). */
Value read_alias(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *const names[][2] = {{"expit", "sigmoid"}, {"absolute", "abs"}, {"arcsin", "asin"},
                                           {"arccos", "acos"},   {"arctan", "atan"},  {"arcsinh", "asinh"},
                                           {"arccosh", "acosh"}, {"arctanh", "atanh"}};
    for (size_t k = 0; k < NNC_COUNTOF(names); k++)
        if (!strcmp(fn, names[k][0])) return call_builtin(E, names[k][1], a, loc);
    return verror;
}

/* randn_like(input), rand_like(input), randn(size...), rand(size...) in a model, as torch's: a
 * tensor of standard normal (uniform in [0, 1)) values drawn afresh in every call of every entry
 * (one RANDOM node, keyed by the seed, the step and the node: a run repeats, and resumes, bit
 * for bit); no gradient.  The key being the step, every evaluation call between two steps draws
 * the same values.  bernoulli(p): 1 where a uniform draw is below p, else 0 (f32, as torch's).
 * In the train section, randn() and rand() are its data sources. */
Value read_random(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    Value v;
    if (E->in_train && train_builtin(E, fn, a, loc, &v)) return v;
    bool like = strstr(fn, "_like") != NULL, bern = !strcmp(fn, "bernoulli"), normal = fn[4] == 'n';
    Shape s;
    int x = -1;
    if (like || bern) {
        static const char *names[] = {"input", "dtype"};
        int ix[2];
        if (!bind_args(E, fn, a, names, 2, ix, 1, loc) || (x = tensor_arg(E, a, ix[0])) < 0) return verror;
        if (bern && !need_f32(E, x, fn, loc)) return verror;
        s = E->g->nodes[x].shape;
    } else {
        Value z = call_builtin(E, "zeros", a, loc);
        if (z.k == V_ERROR) return verror;
        s = E->g->nodes[z.node].shape;
    }
    int r = graph_add(E->g, OP_RANDOM, 0, NULL, s, DT_F32, loc);
    E->g->nodes[r].attr.scalars.p[0] = normal && !bern;
    return vtensor(bern ? graph_add2(E->g, OP_LT, r, x, loc) : r);
}
