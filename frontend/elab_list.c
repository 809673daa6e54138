/* elab_list.c - lists: repeated layers, as PyTorch's nn.ModuleList.
 *
 *     h = [Block(n_embd, n_head) for _ in range(n_layer)]
 *     for block in h { x = block(x) }          # or x = h[i](x)
 *
 * A list is the V_TUPLE that (a, b) and [a, b] make.  A comprehension evaluates its item once per
 * element of what it walks, with the loop variable bound in a scope of its own (Python 3's), and
 * a block call in it is bound to the name "h.0", "h.1", ...: so the instances' parameters come
 * out as PyTorch's state_dict names them (h.0.attn.c_attn.weight), and a checkpoint loads into
 * the torch module by name.  Everything here is known when the model compiles: a count or an
 * index is a number, never a tensor, and a list holds at most NN_MAX_ITEMS items.  The `for`
 * statement is elab.c's (stmt_for): it runs statements. */
#include <math.h>
#include <string.h>

#include "elab_impl.h"

/* The items of a value a comprehension or a for statement walks: a list or tuple (range() makes
 * one).  False, with an error at loc, for anything else. */
bool list_walkable(Elab *E, Value v, SrcLoc loc) {
    if (v.k == V_TUPLE) return true;
    if (v.k == V_TENSOR)
        diag_error(E->d, loc,
                   "cannot walk a tensor (%s) with 'for': 'for' walks a list, such as range(n) or "
                   "[Block(...) for _ in range(n)]",
                   tstr(E, v.node));
    else if (v.k == V_NUM) diag_error(E->d, loc, "cannot walk the number %g with 'for': write range(%g)", v.num, v.num);
    else if (v.k != V_ERROR)
        diag_error(E->d, loc,
                   "cannot walk a %s with 'for': 'for' walks a list, such as range(n) or "
                   "[Block(...) for _ in range(n)]",
                   kind_name(v.k));
    return false;
}

/* [item for name in iter]: item once per element, name bound to it in a scope of the
 * comprehension's own; bound to a name (h = [...]), a block call in item makes the instance
 * "h.k".  After the first element whose item fails, the rest are not tried (they would repeat
 * its errors). */
Value eval_comprehension(Elab *E, Env *env, Expr *e, const char *bind_as) {
    Value it = eval(E, env, e->b);
    if (!list_walkable(E, it, e->b->loc)) return verror;
    Value t = {.k = V_TUPLE, .nitems = it.nitems};
    t.items = arena_alloc(E->a, (size_t)(t.nitems ? t.nitems : 1) * sizeof *t.items);
    for (int k = 0; k < it.nitems; k++) {
        Env *scope = arena_alloc(E->a, sizeof *scope);
        scope->parent = env;
        env_bind(E, scope, e->str, it.items[k], e->loc);
        t.items[k] = eval_as(E, scope, e->a, bind_as ? arena_printf(E->a, "%s.%d", bind_as, k) : NULL);
        if (t.items[k].k == V_ERROR) return verror;
    }
    return t;
}

/* A list index: an integer, negative from the end as Python's. */
static bool list_index(Elab *E, Value v, int n, SrcLoc loc, int *out) {
    if (v.k != V_NUM) {
        if (v.k == V_TENSOR)
            diag_error(E->d, loc, "a list index is a number known when the model compiles, not a tensor (%s)",
                       tstr(E, v.node));
        else if (v.k != V_ERROR) diag_error(E->d, loc, "a list index is an integer, got a %s", kind_name(v.k));
        return false;
    }
    if (v.num != floor(v.num)) {
        diag_error(E->d, loc, "a list index is an integer, got %g", v.num);
        return false;
    }
    if (v.num < -n || v.num >= n) {
        if (n == 0) diag_error(E->d, loc, "index %g is out of range: the list is empty", v.num);
        else
            diag_error(E->d, loc, "index %g is out of range: the list has %d item%s (0 to %d, or -%d to -1)", v.num, n,
                       n == 1 ? "" : "s", n - 1, n);
        return false;
    }
    *out = (int)(v.num < 0 ? v.num + n : v.num);
    return true;
}

/* a[i]: an item of a list or tuple (h[0], split(x, C, 2)[1]), or a tensor's (x[0]). */
Value eval_index(Elab *E, Env *env, Expr *e) {
    bool none = is_none_index(e->b); /* x[None]: a new axis, for a tensor */
    Value a = eval(E, env, e->a), i = none ? vnum(0) : eval(E, env, e->b);
    if (a.k == V_ERROR || i.k == V_ERROR) return verror;
    if (none && a.k != V_TENSOR) {
        diag_error(E->d, e->b->loc, "None in [] is a tensor's new axis; a %s has none", kind_name(a.k));
        return verror;
    }
    if (a.k == V_TENSOR) {
        Arg one = {.e = e->b};
        return tensor_subscript(E, env, a.node, &one, e->loc);
    }
    if (a.k != V_TUPLE) {
        diag_error(E->d, e->loc, "a %s cannot be indexed: [] picks an item of a list", kind_name(a.k));
        return verror;
    }
    int k;
    if (!list_index(E, i, a.nitems, e->b->loc, &k)) return verror;
    return a.items[k];
}

/* One of range()'s integers (enumerate()'s start). */
static bool range_int(Elab *E, const char *fn, Args *a, int i, double dflt, const char *name, double *out) {
    if (i < 0) {
        *out = dflt;
        return true;
    }
    Value v = a->v[i];
    if (v.k != V_NUM) {
        if (v.k == V_TENSOR)
            diag_error(E->d, a->loc[i], "%s(): %s is a number known when the model compiles, not a tensor (%s)", fn,
                       name, tstr(E, v.node));
        else diag_error(E->d, a->loc[i], "%s(): %s must be an integer, got a %s", fn, name, kind_name(v.k));
        return false;
    }
    if (v.num != floor(v.num) || fabs(v.num) > 1e15) {
        diag_error(E->d, a->loc[i], "%s(): %s must be an integer, got %g", fn, name, v.num);
        return false;
    }
    *out = v.num;
    return true;
}

/* range(stop) and range(start, stop, step = 1), as Python's: a list of integers. */
Value read_range(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"start", "stop", "step"};
    int ix[3];
    if (!bind_args(E, fn, a, names, 3, ix, 1, loc)) return verror;
    if (ix[1] < 0) ix[1] = ix[0], ix[0] = -1; /* range(stop) */
    double start, stop, step;
    if (!range_int(E, fn, a, ix[0], 0, "start", &start) || !range_int(E, fn, a, ix[1], 0, "stop", &stop) ||
        !range_int(E, fn, a, ix[2], 1, "step", &step))
        return verror;
    if (step == 0) {
        diag_error(E->d, arg_loc(a, ix[2], loc), "range(): step must not be zero");
        return verror;
    }
    double n = ceil((stop - start) / step);
    if (n < 0) n = 0;
    if (n > NN_MAX_ITEMS) {
        diag_error(E->d, loc,
                   "range() of %.0f items: a list holds at most %d (a model repeats a layer a few dozen "
                   "times)",
                   n, NN_MAX_ITEMS);
        return verror;
    }
    Value t = {.k = V_TUPLE, .nitems = (int)n};
    t.items = arena_alloc(E->a, (size_t)(t.nitems ? t.nitems : 1) * sizeof *t.items);
    for (int k = 0; k < t.nitems; k++) t.items[k] = vnum(start + k * step);
    return t;
}

/* len(list), as Python's: for i in range(len(h)). */
Value read_len(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"obj"};
    int ix[1];
    if (!bind_args(E, fn, a, names, 1, ix, 1, loc)) return verror;
    Value v = a->v[ix[0]];
    if (v.k == V_TUPLE) return vnum(v.nitems);
    if (v.k == V_TENSOR)
        diag_error(E->d, a->loc[ix[0]], "len() counts the items of a list; a tensor's sizes are in its shape (%s)",
                   tstr(E, v.node));
    else diag_error(E->d, a->loc[ix[0]], "len() counts the items of a list, got a %s", kind_name(v.k));
    return verror;
}

/* enumerate(iterable, start = 0), as Python's: the list of (start + k, item k) pairs, to walk with
 * `for i, expert in enumerate(experts)`. */
Value read_enumerate(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"iterable", "start"};
    int ix[2];
    double start;
    if (!bind_args(E, fn, a, names, 2, ix, 1, loc) || !list_walkable(E, a->v[ix[0]], a->loc[ix[0]]) ||
        !range_int(E, fn, a, ix[1], 0, "start", &start))
        return verror;
    Value v = a->v[ix[0]], t = {.k = V_TUPLE, .nitems = v.nitems};
    t.items = arena_alloc(E->a, (size_t)(t.nitems ? t.nitems : 1) * sizeof *t.items);
    for (int k = 0; k < t.nitems; k++) {
        Value *pair = arena_alloc(E->a, 2 * sizeof *pair);
        pair[0] = vnum(start + k), pair[1] = v.items[k];
        t.items[k] = (Value){.k = V_TUPLE, .items = pair, .nitems = 2};
    }
    return t;
}

/* zip(a, b, ...), as Python's: the list of tuples of the lists' k-th items, as long as the
 * shortest. */
Value read_zip(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    int n = NN_MAX_ITEMS;
    for (int j = 0; j < a->n; j++) {
        if (a->kw[j]) {
            diag_error(E->d, a->loc[j], "%s() takes lists only, no '%s ='", fn, a->kw[j]);
            return verror;
        }
        if (a->v[j].k != V_TUPLE) {
            if (a->v[j].k != V_ERROR)
                diag_error(E->d, a->loc[j], "%s() takes lists (range(n), [Block(...) for ...], x.unbind(0)), got a %s",
                           fn, kind_name(a->v[j].k));
            return verror;
        }
        if (a->v[j].nitems < n) n = a->v[j].nitems;
    }
    if (a->n == 0) n = 0;
    Value t = {.k = V_TUPLE, .nitems = n};
    t.items = arena_alloc(E->a, (size_t)(n ? n : 1) * sizeof *t.items);
    for (int k = 0; k < n; k++) {
        Value *row = arena_alloc(E->a, (size_t)(a->n ? a->n : 1) * sizeof *row);
        for (int j = 0; j < a->n; j++) row[j] = a->v[j].items[k];
        t.items[k] = (Value){.k = V_TUPLE, .items = row, .nitems = a->n};
    }
    (void)loc;
    return t;
}
