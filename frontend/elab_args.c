/* elab_args.c - how a builtin reads its arguments: evaluated, bound to its parameter list by
 * position or keyword, read as numbers, tensors or axes, and range-checked with the message
 * that names the function, the argument and PyTorch's rule. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "elab_impl.h"

/* ---- argument handling for builtins ------------------------------------------------------- */

bool eval_args(Elab *E, Env *env, Arg *args, Args *out, SrcLoc loc) {
    out->n = 0;
    bool ok = true;
    for (Arg *a = args; a; a = a->next) {
        if (out->n == 8) {
            diag_error(E->d, loc, "too many arguments");
            return false;
        }
        out->v[out->n] = eval(E, env, a->e);
        out->loc[out->n] = a->e->loc;
        out->kw[out->n] = a->kw;
        if (out->v[out->n].k == V_ERROR) ok = false;
        out->n++;
    }
    return ok;
}

/* a without its argument k (an argument a builtin reads itself, before it binds the others). */
Args args_without(const Args *a, int k) {
    Args b = *a;
    b.n--;
    for (int j = k; j < b.n; j++) b.v[j] = b.v[j + 1], b.loc[j] = b.loc[j + 1], b.kw[j] = b.kw[j + 1];
    return b;
}

/* Binds positional and keyword arguments to a builtin's parameter list; each name in `names`
 * gets the index of its argument or -1.  Unknown keywords and excess arguments are errors. */
bool bind_args(Elab *E, const char *fn, Args *a, const char *const *names, int nnames, int *idx, int required,
               SrcLoc loc) {
    for (int i = 0; i < nnames; i++) idx[i] = -1;
    int pos = 0;
    for (int i = 0; i < a->n; i++) {
        int slot = -1;
        if (a->kw[i]) {
            for (int j = 0; j < nnames; j++)
                if (strcmp(names[j], a->kw[i]) == 0) slot = j;
            /* torch's `dim` where a builtin names its axis `axis` (NumPy's), and the other way round */
            for (int j = 0; j < nnames && slot < 0; j++)
                if ((!strcmp(a->kw[i], "dim") && !strcmp(names[j], "axis")) ||
                    (!strcmp(a->kw[i], "axis") && !strcmp(names[j], "dim")))
                    slot = j;
            if (slot < 0) {
                diag_error(E->d, a->loc[i], "%s() has no argument named '%s'", fn, a->kw[i]);
                return false;
            }
        } else {
            slot = pos++;
            if (slot >= nnames) {
                diag_error(E->d, a->loc[i], "%s() takes at most %d argument%s", fn, nnames, nnames == 1 ? "" : "s");
                return false;
            }
        }
        if (idx[slot] >= 0) {
            diag_error(E->d, a->loc[i], "%s(): argument '%s' given twice", fn, names[slot]);
            return false;
        }
        idx[slot] = i;
    }
    for (int j = 0; j < required; j++)
        if (idx[j] < 0) {
            diag_error(E->d, loc, "%s() needs the argument '%s'", fn, names[j]);
            return false;
        }
    return true;
}

double num_arg(Elab *E, Args *a, int i, double dflt, bool *ok) {
    if (i >= 0 && a->v[i].k == V_NUM && isinf(a->v[i].num)) {
        diag_error(E->d, a->loc[i], "expected a finite number, got %s (inf is for values: masked_fill, full, where)",
                   a->v[i].num > 0 ? "inf" : "-inf");
        *ok = false;
        return dflt;
    }
    return num_or_inf_arg(E, a, i, dflt, ok);
}

double num_or_inf_arg(Elab *E, Args *a, int i, double dflt, bool *ok) {
    if (i < 0 || a->v[i].k == V_NONE) return dflt; /* eps = None: the default, as torch's */
    if (a->v[i].k != V_NUM) {
        diag_error(E->d, a->loc[i], "expected a number, got a %s", kind_name(a->v[i].k));
        *ok = false;
        return dflt;
    }
    return a->v[i].num;
}

/* The location to blame for argument i: the argument itself, or the call if it was left out. */
SrcLoc arg_loc(Args *a, int i, SrcLoc call) { return i >= 0 ? a->loc[i] : call; }

/* A numeric argument within [lo, hi] (an open end where lo_open/hi_open), finite; the message
 * names the function and argument, with PyTorch's rule. */
bool check_range(Elab *E, const char *fn, const char *name, double x, double lo, bool lo_open, double hi, bool hi_open,
                 SrcLoc loc) {
    bool ok = isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
    if (ok) return true;
    if (isinf(hi)) diag_error(E->d, loc, "%s(): %s must be %s %.10g, got %.10g", fn, name, lo_open ? ">" : ">=", lo, x);
    else
        diag_error(E->d, loc, "%s(): %s must be in %c%.10g, %.10g%c, got %.10g", fn, name, lo_open ? '(' : '[', lo, hi,
                   hi_open ? ')' : ']', x);
    return false;
}

/* A whole number in [1, hi]: a count of epochs. */
bool check_count(Elab *E, const char *fn, const char *name, double x, double hi, SrcLoc loc) {
    if (!check_range(E, fn, name, x, 1, false, hi, false, loc)) return false;
    if (x == floor(x)) return true;
    diag_error(E->d, loc, "%s(): %s must be an integer, got %.10g", fn, name, x);
    return false;
}

bool check_finite(Elab *E, const char *fn, const char *name, double x, SrcLoc loc) {
    if (isfinite(x)) return true;
    diag_error(E->d, loc, "%s(): %s must be a finite number, got %g", fn, name, x);
    return false;
}

int tensor_arg(Elab *E, Args *a, int i) {
    if (i < 0) return -1;
    return as_tensor(E, a->v[i], a->loc[i]);
}

/* One axis: k (negative counts from the end), as a bit. */
int64_t axis_bit(Elab *E, Value v, SrcLoc loc, int rank, bool *ok) {
    if (v.k != V_NUM) {
        diag_error(E->d, loc, "expected a number, got a %s", kind_name(v.k));
        *ok = false;
        return 0;
    }
    double x = v.num;
    int ax = fabs(x) <= IR_MAX_RANK ? (int)x : IR_MAX_RANK; /* cast only what fits */
    if (ax < 0) ax += rank;
    if (ax < 0 || ax >= rank || x != floor(x)) {
        diag_error(E->d, loc, "axis %g is out of range for a tensor of rank %d", x, rank);
        *ok = false;
        return 0;
    }
    return (int64_t)1 << ax;
}

/* axis=k, axis=(j, k) or none: all axes.  Returns a bitmask. */
int64_t axes_arg(Elab *E, Args *a, int i, int rank, bool *ok) {
    if (i < 0) return rank ? (1 << rank) - 1 : 0;
    if (a->v[i].k == V_TUPLE) {
        int64_t mask = 0;
        for (int k = 0; k < a->v[i].nitems && *ok; k++) {
            int64_t bit = axis_bit(E, a->v[i].items[k], a->loc[i], rank, ok);
            if (*ok && (mask & bit)) {
                diag_error(E->d, a->loc[i], "axis %g is given twice", a->v[i].items[k].num);
                *ok = false;
            }
            mask |= bit;
        }
        return mask;
    }
    return axis_bit(E, a->v[i], a->loc[i], rank, ok);
}

/* The arguments of a reduction: reduce(x, axis = all | k | (j, k), keepdim = 0). */

int rest_values(Args *a, Value **v) {
    *v = a->v + 1;
    int n = a->n - 1;
    if (n == 1 && (*v)[0].k == V_TUPLE) n = (*v)[0].nitems, *v = (*v)[0].items;
    return n;
}
