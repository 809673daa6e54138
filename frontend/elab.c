/* elab.c - the elaborator: walks the syntax tree and builds the IR graph.
 *
 * It is a small interpreter.  Values are numbers, strings, tensors (an IR node id), block
 * definitions and block instances.  A block call `fc1 = Linear(784, 128)` runs the block's body
 * once, in a fresh scope whose parameters are named "fc1.weight" and so on; calling the
 * instance `fc1(x)` runs its `forward` with x bound.  So a block used twice owns two parameter
 * sets, the way two nn.Linear objects do.
 *
 * Every check that can fail points at the user's text and elaboration continues where it
 * safely can (a failed expression yields V_ERROR, which silences follow-on errors), so one
 * run reports every independent mistake. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"
#include "frontend.h"

typedef enum { V_ERROR, V_NUM, V_STR, V_TENSOR, V_BLOCK, V_INST, V_DEVICE, V_SOURCE, V_OPTIM, V_TUPLE, V_SCHED, V_SCALER,
               V_DTYPE } VKind;

typedef struct Env Env;
typedef struct Inst {
    Stmt *def;
    const char *scope;           /* "fc1", "enc.fc1" */
    Env *env;
    Stmt *forward;
    int first, end;              /* the nodes its instantiation made (its parameters) */
    bool placed;                 /* .to(device) / to(inst, device): parameters and forward there */
    Device dev;
} Inst;

typedef struct Value {
    VKind k;
    double num;
    const char *str;
    int node;
    Stmt *block;
    Inst *inst;
    DataSource *src;
    OptConfig *opt;
    SchedConfig *sched;
    ScalerConfig *scaler;
    struct Value *items;         /* V_TUPLE: (0, 2) or [0, 2] */
    int nitems;
} Value;

typedef struct Binding {
    const char *name;
    Value v;
    SrcLoc loc;
    struct Binding *next;
    struct Binding *hnext;       /* the next binding in the same hash bucket */
} Binding;

/* A scope: its bindings newest first (shadowing: the newest wins), plus a hash index once it
 * holds more than a few, so that a model of N statements elaborates in O(N), not O(N^2). */
struct Env {
    Binding *head;
    Env *parent;
    Binding **bucket;            /* NULL while small */
    int nbucket, count;
};

typedef struct {
    Arena *a;
    Diag *d;
    Graph *g;
    Model *m;
    Env *globals;
    int in_train;                /* data sources and optimizers may be called */
    int depth;                   /* recursion guard for blocks that call themselves */
    bool saw_minimize;           /* a 'minimize' was written, even if it failed its checks */
    int eval_depth;              /* eval() calls in progress (bounded: ELAB_MAX_DEPTH) */
    long steps;                  /* eval() calls so far (bounded: ELAB_MAX_STEPS) */
    bool over_budget;            /* a bound was hit and reported: elaboration winds down */
    bool data_error;             /* a data source failed (reported): no "input has no data" */
} Elab;

/* Bounds on elaboration.  Blocks nest up to 32 deep and each level may hold expressions up to
 * NN_MAX_EXPR_DEPTH deep, so the recursion is bounded on its own count; and since a block may
 * instantiate others several times, a 1 KB file could otherwise unfold exponentially, so the
 * work (eval steps) and the graph size are bounded too.  The largest shipped model uses a few
 * hundred nodes and steps; these bounds are far above any real model, and keep the passes
 * (some of which are quadratic in the graph size) within seconds. */
#define ELAB_MAX_DEPTH 2000
#define ELAB_MAX_STEPS 1000000L
#define ELAB_MAX_NODES 20000

static Value eval(Elab *E, Env *env, Expr *e);
static Value eval_counted(Elab *E, Env *env, Expr *e, const char *bind_as);
static void exec_stmts(Elab *E, Env *env, Inst *inst, Stmt *s, Value *ret);

static const Value verror = {.k = V_ERROR};

static Value vnum(double x) { return (Value){.k = V_NUM, .num = x}; }

/* A number folded from constants (1 / 0, log(0), 1e300 * 1e300) that is not finite has no
 * meaning in a model and no spelling in the generated C: an error where it was written. */
static Value vfolded(Elab *E, double x, SrcLoc loc, const char *what) {
    if (isfinite(x)) return vnum(x);
    diag_error(E->d, loc, "%s gives %s: constants must be finite", what, isnan(x) ? "NaN" : x > 0 ? "+inf" : "-inf");
    return verror;
}
static Value vtensor(int node) { return (Value){.k = V_TENSOR, .node = node}; }

enum { ENV_HASH_FROM = 16 };

static unsigned env_hash(const char *s) { return (unsigned)hash_fnv1a(s, strlen(s), HASH_FNV_INIT); }

/* Rebuilds the index with twice the buckets; inserting oldest first keeps newest first. */
static void env_rehash(Elab *E, Env *env) {
    int n = env->nbucket ? 2 * env->nbucket : 64;
    Binding **bk = arena_alloc(E->a, (size_t)n * sizeof *bk);
    Binding **all = xmalloc((size_t)env->count * sizeof *all);
    int k = 0;
    for (Binding *b = env->head; b; b = b->next) all[k++] = b;
    while (k-- > 0) {
        Binding *b = all[k];
        unsigned h = env_hash(b->name) & (unsigned)(n - 1);
        b->hnext = bk[h];
        bk[h] = b;
    }
    free(all);
    env->bucket = bk;
    env->nbucket = n;
}

static void env_bind(Elab *E, Env *env, const char *name, Value v, SrcLoc loc) {
    Binding *b = arena_alloc(E->a, sizeof *b);
    b->name = name;
    b->v = v;
    b->loc = loc;
    b->next = env->head;
    env->head = b;
    env->count++;
    if (env->bucket && env->count <= 2 * env->nbucket) {
        unsigned h = env_hash(name) & (unsigned)(env->nbucket - 1);
        b->hnext = env->bucket[h];
        env->bucket[h] = b;
    } else if (env->count > ENV_HASH_FROM) {
        env_rehash(E, env);
    }
}

/* The newest binding of name in this scope only. */
static Binding *env_find_local(const Env *env, const char *name) {
    if (env->bucket) {
        for (Binding *b = env->bucket[env_hash(name) & (unsigned)(env->nbucket - 1)]; b; b = b->hnext)
            if (strcmp(b->name, name) == 0) return b;
        return NULL;
    }
    for (Binding *b = env->head; b; b = b->next)
        if (strcmp(b->name, name) == 0) return b;
    return NULL;
}

static Binding *env_find(Env *env, const char *name) {
    for (; env; env = env->parent) {
        Binding *b = env_find_local(env, name);
        if (b) return b;
    }
    return NULL;
}

static const char *kind_name(VKind k) {
    static const char *n[] = {"error", "number", "string", "tensor", "block", "block instance",
                              "device", "data source", "optimizer", "tuple", "learning-rate schedule",
                              "loss scaler", "dtype"};
    return n[k];
}

/* ---- "did you mean" for unknown names ------------------------------------------------------ */

/* Levenshtein distance, capped: names longer than 63 characters are never suggested. */
static int edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63) return 99;
    int row[64];
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[m];
}

/* The closest candidate within distance 2 (and less than the name's length, so "x" does not
 * suggest "y"); *best_d carries the best distance across calls so several lists can be searched. */
static const char *closest(const char *name, const char *cand, const char *best, int *best_d) {
    int d = edit_distance(name, cand);
    if (d > 0 && d <= 2 && d < (int)strlen(name) && d < *best_d) {
        *best_d = d;
        return cand;
    }
    return best;
}

static const char *suggest_env(const char *name, Env *env, const char *best, int *best_d) {
    for (; env; env = env->parent)
        for (Binding *b = env->head; b; b = b->next) best = closest(name, b->name, best, best_d);
    return best;
}

static const char *suggest_list(const char *name, const char *const *list, size_t n, const char *best, int *best_d) {
    for (size_t i = 0; i < n; i++) best = closest(name, list[i], best, best_d);
    return best;
}

/* " (did you mean 'weight'?)" or "" */
static const char *did_you_mean(Elab *E, const char *best) {
    return best ? arena_printf(E->a, " (did you mean '%s'?)", best) : "";
}

static const char *const train_fn_names[] = {"idx",   "npy",     "csv",            "randn",     "rand",
                                             "sgd",   "adam",    "adamw",          "step_lr",   "exponential_lr",
                                             "cosine_lr", "linear_lr", "dynamic"};
static const char *const keyword_names[] = {"true", "false", "cpu", "cuda", "bf16", "f16", "f32"};

static const char *tstr(Elab *E, int node) {
    char buf[96];
    Node *n = &E->g->nodes[node];
    return arena_strdup(E->a, shape_str(n->shape, n->dtype, E->g->batch_name, buf, sizeof buf));
}

/* ---- builtin tensor operations ------------------------------------------------------------ */

/* A number used where a tensor is needed becomes a scalar constant. */
static int as_tensor(Elab *E, Value v, SrcLoc loc) {
    if (v.k == V_TENSOR) return v.node;
    if (v.k == V_NUM) return graph_const(E->g, v.num, loc);
    if (v.k != V_ERROR) diag_error(E->d, loc, "expected a tensor, got a %s", kind_name(v.k));
    return -1;
}

static bool is_float_dtype(DType t) { return t == DT_F32 || DTYPE_IS_HALF(t); }

/* A floating-point tensor: f32, or a bf16/f16 value made by to(x, bf16). */
static bool need_f32(Elab *E, int node, const char *what, SrcLoc loc) {
    if (is_float_dtype(E->g->nodes[node].dtype)) return true;
    diag_error(E->d, loc, "%s expects f32, got %s (labels and indices are i32: use them only in "
               "cross_entropy, accuracy or embedding)", what, tstr(E, node));
    return false;
}

static const char *binop_name(int op) {
    switch (op) {
    case '+': return "add";
    case '-': return "subtract";
    case '*': return "multiply";
    case '/': return "divide";
    default: return "combine";
    }
}

static Value tensor_binop(Elab *E, int op, Value a, Value b, SrcLoc loc) {
    int x = as_tensor(E, a, loc), y = as_tensor(E, b, loc);
    if (x < 0 || y < 0) return verror;
    if (!is_float_dtype(E->g->nodes[x].dtype) || !is_float_dtype(E->g->nodes[y].dtype)) {
        diag_error(E->d, loc, "cannot %s %s and %s: arithmetic needs f32 (labels and indices are i32: use them "
                   "only in cross_entropy, accuracy or embedding)", binop_name(op), tstr(E, x), tstr(E, y));
        return verror;
    }
    Op o = op == '+' ? OP_ADD : op == '-' ? OP_SUB : op == '*' ? OP_MUL : OP_DIV;
    int r = graph_add2(E->g, o, x, y, loc);
    if (r < 0) {
        diag_error(E->d, loc, "cannot %s %s and %s: shapes do not broadcast", binop_name(op),
                   tstr(E, x), tstr(E, y));
        return verror;
    }
    return vtensor(r);
}

static Value matmul(Elab *E, Value a, Value b, SrcLoc loc) {
    int x = as_tensor(E, a, loc), y = as_tensor(E, b, loc);
    if (x < 0 || y < 0) return verror;
    if (!need_f32(E, x, "matmul", loc) || !need_f32(E, y, "matmul", loc)) return verror;
    Shape sa = E->g->nodes[x].shape, sb = E->g->nodes[y].shape, sc;
    if (!matmul_shape(sa, sb, &sc)) {
        if (sa.rank >= 2 && sb.rank >= 2 && sa.d[sa.rank - 2] == DIM_BATCH && sb.d[sb.rank - 1] == DIM_BATCH &&
            sa.d[sa.rank - 1] == sb.d[sb.rank - 2])
            diag_error(E->d, loc, "cannot multiply %s by %s: the result would have the batch dimension twice "
                       "(a tensor has at most one); transpose(a) @ b contracts the batch instead", tstr(E, x), tstr(E, y));
        else
            diag_error(E->d, loc, "cannot multiply %s by %s: matmul needs [M,K] @ [K,N], batched as [...,M,K] @ [...,K,N] "
                       "with the same leading axes or one 2-d operand", tstr(E, x), tstr(E, y));
        return verror;
    }
    int in[2] = {x, y};
    return vtensor(graph_add(E->g, OP_MATMUL, 2, in, sc, DT_F32, loc));
}

static Value powc(Elab *E, Value a, Value b, SrcLoc loc) {
    if (a.k == V_NUM && b.k == V_NUM) return vfolded(E, pow(a.num, b.num), loc, "this power");
    if (b.k == V_TENSOR) {   /* a tensor exponent: elementwise pow, broadcast */
        int x = as_tensor(E, a, loc), y = b.node;
        if (x < 0 || !need_f32(E, x, "**", loc) || !need_f32(E, y, "**", loc)) return verror;
        int r = graph_add2(E->g, OP_POW, x, y, loc);
        if (r < 0) diag_error(E->d, loc, "cannot raise %s to %s: shapes do not broadcast", tstr(E, x), tstr(E, y));
        return r < 0 ? verror : vtensor(r);
    }
    if (b.k != V_NUM) {
        if (b.k != V_ERROR) diag_error(E->d, loc, "the exponent of ** must be a number or a tensor, got a %s", kind_name(b.k));
        return verror;
    }
    int x = as_tensor(E, a, loc);
    if (x < 0 || !need_f32(E, x, "**", loc)) return verror;
    int r = graph_add1(E->g, OP_POWC, x, loc);
    E->g->nodes[r].attr.scalars.p[0] = b.num;
    return vtensor(r);
}

static Value binop(Elab *E, int op, Value a, Value b, SrcLoc loc) {
    if (a.k == V_ERROR || b.k == V_ERROR) return verror;
    if (op == '^') return powc(E, a, b, loc);
    if (op == '@') return matmul(E, a, b, loc);
    if (a.k == V_NUM && b.k == V_NUM) {
        switch (op) {
        case '+': return vfolded(E, a.num + b.num, loc, "this sum");
        case '-': return vfolded(E, a.num - b.num, loc, "this difference");
        case '*': return vfolded(E, a.num * b.num, loc, "this product");
        default: return vfolded(E, a.num / b.num, loc, "this division");
        }
    }
    return tensor_binop(E, op, a, b, loc);
}

/* ---- argument handling for builtins ------------------------------------------------------- */

typedef struct {
    Value v[8];
    SrcLoc loc[8];
    const char *kw[8];
    int n;
} Args;

static bool eval_args(Elab *E, Env *env, Arg *args, Args *out, SrcLoc loc) {
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

/* Binds positional and keyword arguments to a builtin's parameter list; each name in `names`
 * gets the index of its argument or -1.  Unknown keywords and excess arguments are errors. */
static bool bind_args(Elab *E, const char *fn, Args *a, const char *const *names, int nnames, int *idx,
                      int required, SrcLoc loc) {
    for (int i = 0; i < nnames; i++) idx[i] = -1;
    int pos = 0;
    for (int i = 0; i < a->n; i++) {
        int slot = -1;
        if (a->kw[i]) {
            for (int j = 0; j < nnames; j++)
                if (strcmp(names[j], a->kw[i]) == 0) slot = j;
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

static double num_arg(Elab *E, Args *a, int i, double dflt, bool *ok) {
    if (i < 0) return dflt;
    if (a->v[i].k != V_NUM) {
        diag_error(E->d, a->loc[i], "expected a number, got a %s", kind_name(a->v[i].k));
        *ok = false;
        return dflt;
    }
    return a->v[i].num;
}

/* The location to blame for argument i: the argument itself, or the call if it was left out. */
static SrcLoc arg_loc(Args *a, int i, SrcLoc call) { return i >= 0 ? a->loc[i] : call; }

/* A numeric argument within [lo, hi] (an open end where lo_open/hi_open), finite; the message
 * names the function and argument, with PyTorch's rule. */
static bool check_range(Elab *E, const char *fn, const char *name, double x, double lo, bool lo_open, double hi,
                        bool hi_open, SrcLoc loc) {
    bool ok = isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
    if (ok) return true;
    if (isinf(hi))
        diag_error(E->d, loc, "%s(): %s must be %s %.10g, got %.10g", fn, name, lo_open ? ">" : ">=", lo, x);
    else
        diag_error(E->d, loc, "%s(): %s must be in %c%.10g, %.10g%c, got %.10g", fn, name, lo_open ? '(' : '[', lo, hi,
                   hi_open ? ')' : ']', x);
    return false;
}

/* A whole number in [1, hi]: a count of epochs. */
static bool check_count(Elab *E, const char *fn, const char *name, double x, double hi, SrcLoc loc) {
    if (!check_range(E, fn, name, x, 1, false, hi, false, loc)) return false;
    if (x == floor(x)) return true;
    diag_error(E->d, loc, "%s(): %s must be an integer, got %.10g", fn, name, x);
    return false;
}

static bool check_finite(Elab *E, const char *fn, const char *name, double x, SrcLoc loc) {
    if (isfinite(x)) return true;
    diag_error(E->d, loc, "%s(): %s must be a finite number, got %g", fn, name, x);
    return false;
}

static int tensor_arg(Elab *E, Args *a, int i) {
    if (i < 0) return -1;
    return as_tensor(E, a->v[i], a->loc[i]);
}

/* One axis: k (negative counts from the end), as a bit. */
static int64_t axis_bit(Elab *E, Value v, SrcLoc loc, int rank, bool *ok) {
    if (v.k != V_NUM) {
        diag_error(E->d, loc, "expected a number, got a %s", kind_name(v.k));
        *ok = false;
        return 0;
    }
    double x = v.num;
    int ax = fabs(x) <= IR_MAX_RANK ? (int)x : IR_MAX_RANK;   /* cast only what fits */
    if (ax < 0) ax += rank;
    if (ax < 0 || ax >= rank || x != floor(x)) {
        diag_error(E->d, loc, "axis %g is out of range for a tensor of rank %d", x, rank);
        *ok = false;
        return 0;
    }
    return (int64_t)1 << ax;
}

/* axis=k, axis=(j, k) or none: all axes.  Returns a bitmask. */
static int64_t axes_arg(Elab *E, Args *a, int i, int rank, bool *ok) {
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

static int reduce_node(Elab *E, Op op, int x, int64_t mask, bool keep, SrcLoc loc) {
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

/* layer_norm(x, weight, bias, eps = 1e-5), as torch.nn.functional.layer_norm with
 * normalized_shape = weight's shape: (x - mean) / sqrt(var + eps) * weight + bias over the last
 * weight-rank axes (the last axis without a weight), the variance biased as torch's. */
static Value read_layer_norm(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "weight", "bias", "eps"};
    int ix[4];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 4, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), w = ix[1] >= 0 ? tensor_arg(E, a, ix[1]) : -2;
    int b = ix[2] >= 0 ? tensor_arg(E, a, ix[2]) : -2;
    double eps = num_arg(E, a, ix[3], 1e-5, &ok);
    if (x < 0 || w == -1 || b == -1 || !ok || !need_f32(E, x, fn, loc)) return verror;
    if (ix[3] >= 0 && !check_range(E, fn, "eps", eps, 0, true, INFINITY, false, a->loc[ix[3]])) return verror;
    Shape s = E->g->nodes[x].shape;
    int k = w >= 0 ? E->g->nodes[w].shape.rank : 1;
    for (int j = 0; w >= 0 && j < k; j++)
        if (k > s.rank || E->g->nodes[w].shape.d[j] != s.d[s.rank - k + j]) {
            diag_error(E->d, loc, "%s(): weight %s must be the last axes of %s", fn, tstr(E, w), tstr(E, x));
            return verror;
        }
    if (s.rank < k || k < 1 || (b >= 0 && !shape_eq(E->g->nodes[b].shape, E->g->nodes[w >= 0 ? w : x].shape))) {
        diag_error(E->d, loc, "%s(): bias must have weight's shape, and x at least its rank", fn);
        return verror;
    }
    int64_t mask = ((int64_t)1 << s.rank) - ((int64_t)1 << (s.rank - k));
    int mean = reduce_node(E, OP_MEAN, x, mask, true, loc);
    int d = graph_add2(E->g, OP_SUB, x, mean, loc);
    int var = reduce_node(E, OP_MEAN, graph_add2(E->g, OP_MUL, d, d, loc), mask, true, loc);
    int y = graph_add2(E->g, OP_DIV, d, graph_add1(E->g, OP_SQRT, graph_add2(E->g, OP_ADD, var, graph_const(E->g, eps, loc), loc), loc), loc);
    if (w >= 0) y = graph_add2(E->g, OP_MUL, y, w, loc);
    if (b >= 0) y = graph_add2(E->g, OP_ADD, y, b, loc);
    return vtensor(y);
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
    if (a->v[0].k == V_NUM) {  /* constant folding for shapes and initializer bounds */
        double x = a->v[0].num;
        static const struct { Op op; double (*fn)(double); } fold[] = {
            {OP_SQRT, sqrt}, {OP_EXP, exp}, {OP_LOG, log}, {OP_TANH, tanh}};
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
    if (s.rank == 0 || mask != (int64_t)1 << (s.rank - 1)) {
        diag_error(E->d, loc, "%s() works over the last axis only (of %s)", fn, tstr(E, x));
        return verror;
    }
    return vtensor(graph_add1(E->g, op, x, loc));
}

/* logits [N, C] f32 and labels [N] i32; shared by cross_entropy and accuracy. */
static bool check_logits_labels(Elab *E, const char *fn, int lg, int lb, SrcLoc loc) {
    Node *L = &E->g->nodes[lg], *Y = &E->g->nodes[lb];
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

static Value loss_ce(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"logits", "labels"};
    int ix[2];
    if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
    int lg = tensor_arg(E, a, ix[0]), lb = tensor_arg(E, a, ix[1]);
    if (lg < 0 || lb < 0 || !check_logits_labels(E, fn, lg, lb, loc)) return verror;
    int in[2] = {lg, lb};
    return vtensor(graph_add(E->g, op, 2, in, shape_scalar(), DT_F32, loc));
}

/* mse_loss(a, b) = mean((a - b)^2) over every element, as torch.nn.functional.mse_loss. */
static Value loss_mse(Elab *E, Args *a, SrcLoc loc) {
    static const char *names[] = {"input", "target"};
    int ix[2];
    if (!bind_args(E, "mse_loss", a, names, 2, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), y = tensor_arg(E, a, ix[1]);
    if (x < 0 || y < 0 || !need_f32(E, x, "mse_loss", loc) || !need_f32(E, y, "mse_loss", loc)) return verror;
    if (!shape_eq(E->g->nodes[x].shape, E->g->nodes[y].shape)) {
        diag_error(E->d, loc, "mse_loss(): input %s and target %s must have the same shape", tstr(E, x), tstr(E, y));
        return verror;
    }
    int d = graph_add2(E->g, OP_SUB, x, y, loc);
    int sq = graph_add1(E->g, OP_POWC, d, loc);
    E->g->nodes[sq].attr.scalars.p[0] = 2;
    int in[1] = {sq};
    int m = graph_add(E->g, OP_MEAN, 1, in, shape_scalar(), DT_F32, loc);
    E->g->nodes[m].attr.axes.mask = (1u << E->g->nodes[sq].shape.rank) - 1;
    return vtensor(m);
}

static Value transpose(Elab *E, Args *a, SrcLoc loc) {
    if (a->n != 1) {
        diag_error(E->d, loc, "transpose() takes one tensor argument");
        return verror;
    }
    int x = tensor_arg(E, a, 0);
    if (x < 0) return verror;
    Shape s = E->g->nodes[x].shape;
    if (s.rank < 2) {
        diag_error(E->d, loc, "transpose() swaps the last two axes: it needs a tensor of 2 or more dimensions, got %s",
                   tstr(E, x));
        return verror;
    }
    /* transpose(transpose(a)) is a: no chains of views for the passes to walk */
    if (E->g->nodes[x].op == OP_TRANSPOSE) return vtensor(E->g->nodes[x].in[0]);
    int64_t t = s.d[s.rank - 1];
    s.d[s.rank - 1] = s.d[s.rank - 2];
    s.d[s.rank - 2] = t;
    int in[1] = {x};
    return vtensor(graph_add(E->g, OP_TRANSPOSE, 1, in, s, E->g->nodes[x].dtype, loc));
}

static bool eval_dim(Elab *E, Value v, SrcLoc loc, bool allow_batch, int64_t *out);

/* A view of x with shape s; chains of reshapes read the original. */
static int reshape_node(Elab *E, int x, Shape s, SrcLoc loc) {
    /* reshape of a reshape reads the original: chains stay one long, so the passes that follow
     * a reshape to its storage (recursively) never meet a long chain */
    while (E->g->nodes[x].op == OP_RESHAPE) x = E->g->nodes[x].in[0];
    int in[1] = {x};
    return graph_add(E->g, OP_RESHAPE, 1, in, s, E->g->nodes[x].dtype, loc);
}

/* The new dimensions of reshape/view: numbers, the batch symbol, at most one -1 (inferred from
 * the element count, as torch.reshape), one by one or as one tuple. */
static bool reshape_dims(Elab *E, Args *a, int x, SrcLoc loc, Shape *s) {
    Value *v = a->v + 1;
    int n = a->n - 1, infer = -1;
    if (n == 1 && v[0].k == V_TUPLE) n = v[0].nitems, v = v[0].items;
    if (n > IR_MAX_RANK) {
        diag_error(E->d, loc, "reshape(): at most %d dimensions", IR_MAX_RANK);
        return false;
    }
    *s = (Shape){0};
    for (int i = 0; i < n; i++) {
        SrcLoc at = a->loc[i + 1 < a->n ? i + 1 : a->n - 1];
        if (v[i].k == V_NUM && v[i].num == -1 && infer < 0) {
            infer = s->rank;
            s->d[s->rank++] = 1;
        } else if (!eval_dim(E, v[i], at, true, &s->d[s->rank++]))
            return false;
    }
    Shape from = E->g->nodes[x].shape;
    int64_t have = shape_numel(from, 1), known = shape_numel(*s, 1);
    if (infer >= 0 && known > 0 && have % known == 0) s->d[infer] = have / known;
    return true;
}

static Value reshape(Elab *E, Args *a, SrcLoc loc) {
    if (a->n < 2) {
        diag_error(E->d, loc, "reshape() takes a tensor and its new dimensions");
        return verror;
    }
    int x = tensor_arg(E, a, 0);
    Shape s;
    if (x < 0 || !reshape_dims(E, a, x, loc, &s)) return verror;
    Shape from = E->g->nodes[x].shape;
    bool fb = shape_batch_axis(from) >= 0, tb = shape_batch_axis(s) >= 0;
    if (fb != tb || shape_numel(from, 1) != shape_numel(s, 1)) {
        diag_error(E->d, loc, "cannot reshape %s to %s", tstr(E, x),
                   shape_str(s, E->g->nodes[x].dtype, E->g->batch_name, (char[96]){0}, 96));
        return verror;
    }
    return vtensor(reshape_node(E, x, s, loc));
}

static Value read_view(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    (void)fn;
    return reshape(E, a, loc);
}

/* flatten(x, start_dim = 0, end_dim = -1), as torch.flatten: the axes start..end become one.
 * The batch axis cannot merge with others (its size is only known when the step runs). */
static Value read_flatten(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "start_dim", "end_dim"};
    int ix[3];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 3, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0) return verror;
    Shape s = E->g->nodes[x].shape;
    int64_t lo = ix[1] < 0 ? 1 : axis_bit(E, a->v[ix[1]], a->loc[ix[1]], s.rank, &ok);
    int64_t hi = ix[2] < 0 ? (int64_t)1 << (s.rank ? s.rank - 1 : 0) : axis_bit(E, a->v[ix[2]], a->loc[ix[2]], s.rank, &ok);
    if (!ok || s.rank == 0) return ok ? vtensor(x) : verror;
    int from = __builtin_ctzll((unsigned long long)lo), to = __builtin_ctzll((unsigned long long)hi);
    if (from > to) {
        diag_error(E->d, loc, "%s(): start_dim (axis %d) comes after end_dim (axis %d)", fn, from, to);
        return verror;
    }
    Shape r = {0};
    for (int i = 0; i < s.rank; i++) {
        if (i <= from || i > to) r.d[r.rank++] = s.d[i];
        else if (s.d[i] == DIM_BATCH || r.d[r.rank - 1] == DIM_BATCH) {
            diag_error(E->d, loc, "%s(): cannot merge the batch axis of %s with others (start at the axis after it: "
                       "flatten(x, 1))", fn, tstr(E, x));
            return verror;
        } else
            r.d[r.rank - 1] *= s.d[i];
    }
    return vtensor(reshape_node(E, x, r, loc));
}

/* to(x, cuda | cpu) places x, as x.to(device); to(x, bf16 | f16 | f32) converts it, as
 * x.to(dtype) (rounding to nearest even; the ops after it follow torch's type promotion). */
static Value place_instance(Elab *E, Inst *inst, Value dev, SrcLoc loc) {
    if (dev.k != V_DEVICE) {
        diag_error(E->d, loc, "a block instance moves to a device (to(%s, cuda(1))); its parameters stay f32 (for "
                   "half precision: precision = bf16 in the train section)", inst->scope);
        return verror;
    }
    inst->placed = true;
    inst->dev = (Device)dev.num;
    for (int k = inst->first; k < inst->end; k++)   /* its parameters, an inner instance's too */
        if (E->g->nodes[k].op == OP_PARAM) {
            E->g->nodes[k].dev = inst->dev;
            E->g->nodes[k].dev_fixed = true;
        }
    return (Value){.k = V_INST, .inst = inst};
}

static Value to_device(Elab *E, Args *a, SrcLoc loc) {
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

/* ---- data sources and optimizers (train section only) ------------------------------------ */

static Value source(Elab *E, SourceKind k, const char *fn, Args *a, SrcLoc loc) {
    DataSource *s = arena_alloc(E->a, sizeof *s);
    s->kind = k;
    s->loc = loc;
    s->scale = 1;
    s->count = -1;
    bool ok = true;
    if (k == SRC_RANDN || k == SRC_RAND) {
        if (a->n < 1 || a->n > IR_MAX_RANK) {
            diag_error(E->d, loc, "%s() takes 1 to %d dimensions: %s(samples, ...)", fn, IR_MAX_RANK, fn);
            return verror;
        }
        double total = 1;
        for (int i = 0; i < a->n; i++) {
            if (!eval_dim(E, a->v[i], a->loc[i], false, &s->dims[s->rank++])) return verror;
            total *= (double)s->dims[i];
        }
        if (total > 2147483648.0) {
            diag_error(E->d, loc, "%s() would generate %.3g numbers; the limit is 2^31", fn, total);
            return verror;
        }
        return (Value){.k = V_SOURCE, .src = s};
    }
    static const char *names[] = {"path", "scale", "first", "count", "header"};
    int ix[5];
    int nn = k == SRC_CSV ? 5 : 2;
    if (!bind_args(E, fn, a, names, nn, ix, 1, loc)) return verror;
    if (a->v[ix[0]].k != V_STR) {
        diag_error(E->d, a->loc[ix[0]], "%s() expects a file path string", fn);
        return verror;
    }
    s->path = a->v[ix[0]].str;
    s->scale = num_arg(E, a, ix[1], 1, &ok);
    ok = ok && check_finite(E, fn, "scale", s->scale, arg_loc(a, ix[1], loc));
    if (ix[1] >= 0) s->scale_loc = a->loc[ix[1]];
    if (k == SRC_CSV && ok) {
        /* columns are counted in int64 by the loader: integers well inside that range */
        double first = num_arg(E, a, ix[2], 0, &ok), count = num_arg(E, a, ix[3], 1, &ok);
        if (ok && (first != floor(first) || !check_range(E, fn, "first", first, 0, false, 2147483647.0, false,
                                                         arg_loc(a, ix[2], loc)))) {
            if (first != floor(first)) diag_error(E->d, arg_loc(a, ix[2], loc), "%s(): first must be an integer", fn);
            ok = false;
        }
        if (ok && (count != floor(count) || !check_range(E, fn, "count", count, 1, false, 2147483647.0, false,
                                                         arg_loc(a, ix[3], loc)))) {
            if (count != floor(count)) diag_error(E->d, arg_loc(a, ix[3], loc), "%s(): count must be an integer", fn);
            ok = false;
        }
        if (ok) {   /* converted only once known to fit */
            s->first = (int64_t)first;
            s->count = ix[3] >= 0 ? (int64_t)count : -1;
        }
        double h = num_arg(E, a, ix[4], -1, &ok);   /* -1: not given, detect */
        if (ok && h != -1 && h != 0 && h != 1) {
            diag_error(E->d, a->loc[ix[4]], "header= takes true or false");
            ok = false;
        }
        s->header = (int)h;
    }
    return ok ? (Value){.k = V_SOURCE, .src = s} : verror;
}

/* The checks torch.optim makes in its constructors (SGD: lr, momentum, weight_decay >= 0,
 * nesterov needs momentum > 0 and dampening 0; Adam/AdamW: lr, eps, weight_decay >= 0 and
 * betas in [0, 1)), plus finiteness: every value is baked into the generated code. */
static bool optimizer_check(Elab *E, const char *fn, OptConfig *o, Args *a, int *ix, SrcLoc loc) {
    const double inf = INFINITY;
    bool ok = check_range(E, fn, "lr", o->lr, 0, false, inf, false, arg_loc(a, ix[0], loc));
    if (o->kind == OPT_SGD) {
        ok &= check_range(E, fn, "momentum", o->momentum, 0, false, inf, false, arg_loc(a, ix[1], loc));
        ok &= check_finite(E, fn, "dampening", o->dampening, arg_loc(a, ix[2], loc));
        ok &= check_range(E, fn, "weight_decay", o->weight_decay, 0, false, inf, false, arg_loc(a, ix[3], loc));
        if (ok && o->nesterov && (o->momentum <= 0 || o->dampening != 0)) {
            diag_error(E->d, loc, "nesterov momentum requires a momentum and zero dampening");
            ok = false;
        }
        return ok;
    }
    ok &= check_range(E, fn, "beta1", o->beta1, 0, false, 1, true, arg_loc(a, ix[1], loc));
    ok &= check_range(E, fn, "beta2", o->beta2, 0, false, 1, true, arg_loc(a, ix[2], loc));
    ok &= check_range(E, fn, "eps", o->eps, 0, false, inf, false, arg_loc(a, ix[3], loc));
    ok &= check_range(E, fn, "weight_decay", o->weight_decay, 0, false, inf, false, arg_loc(a, ix[4], loc));
    return ok;
}

static Value optimizer(Elab *E, OptKind k, const char *fn, Args *a, SrcLoc loc) {
    static const char *sgd[] = {"lr", "momentum", "dampening", "weight_decay", "nesterov"};
    static const char *adam[] = {"lr", "beta1", "beta2", "eps", "weight_decay"};
    int ix[5];
    bool ok = true;
    OptConfig *o = arena_alloc(E->a, sizeof *o);
    o->kind = k;
    o->loc = loc;
    if (k == OPT_SGD) {
        if (!bind_args(E, fn, a, sgd, 5, ix, 1, loc)) return verror;
        o->lr = num_arg(E, a, ix[0], 0, &ok);
        o->momentum = num_arg(E, a, ix[1], 0, &ok);
        o->dampening = num_arg(E, a, ix[2], 0, &ok);
        o->weight_decay = num_arg(E, a, ix[3], 0, &ok);
        o->nesterov = num_arg(E, a, ix[4], 0, &ok) != 0;
    } else {
        if (!bind_args(E, fn, a, adam, 5, ix, 0, loc)) return verror;
        o->lr = num_arg(E, a, ix[0], 1e-3, &ok);
        o->beta1 = num_arg(E, a, ix[1], 0.9, &ok);
        o->beta2 = num_arg(E, a, ix[2], 0.999, &ok);
        o->eps = num_arg(E, a, ix[3], 1e-8, &ok);
        o->weight_decay = num_arg(E, a, ix[4], k == OPT_ADAMW ? 1e-2 : 0, &ok);
    }
    ok = ok && optimizer_check(E, fn, o, a, ix, loc);
    return ok ? (Value){.k = V_OPTIM, .opt = o} : verror;
}

/* torch.optim.lr_scheduler's StepLR, ExponentialLR, CosineAnnealingLR and LinearLR, stepped
 * once per epoch, with the checks their constructors make (LinearLR's factors) and the ones a
 * compiled rate needs (finite, and never negative). */
static Value schedule(Elab *E, SchedKind k, const char *fn, Args *a, SrcLoc loc) {
    static const char *step[] = {"step_size", "gamma"};
    static const char *expo[] = {"gamma"};
    static const char *cosine[] = {"T_max", "eta_min"};
    static const char *linear[] = {"start_factor", "end_factor", "total_iters"};
    const char *const *names[] = {NULL, step, expo, cosine, linear};
    const int nnames[] = {0, 2, 1, 2, 3}, required[] = {0, 1, 1, 0, 0};
    int ix[3];
    bool ok = true;
    if (!bind_args(E, fn, a, names[k], nnames[k], ix, required[k], loc)) return verror;
    SchedConfig *s = arena_alloc(E->a, sizeof *s);
    s->kind = k;
    s->loc = loc;
    const double inf = INFINITY, imax = 1 << 30;
    if (k == SCHED_STEP) {
        s->step_size = num_arg(E, a, ix[0], 1, &ok);
        s->gamma = num_arg(E, a, ix[1], 0.1, &ok);
        if (ok) {   /* every check reports: &= rather than && */
            ok &= check_count(E, fn, "step_size", s->step_size, imax, arg_loc(a, ix[0], loc));
            ok &= check_range(E, fn, "gamma", s->gamma, 0, false, inf, true, arg_loc(a, ix[1], loc));
        }
    } else if (k == SCHED_EXPONENTIAL) {
        s->gamma = num_arg(E, a, ix[0], 0, &ok);
        ok = ok && check_range(E, fn, "gamma", s->gamma, 0, false, inf, true, arg_loc(a, ix[0], loc));
    } else if (k == SCHED_COSINE) {
        s->t_max = num_arg(E, a, ix[0], 0, &ok);   /* 0: the run's epochs */
        s->eta_min = num_arg(E, a, ix[1], 0, &ok);
        if (ok) {
            if (ix[0] >= 0) ok &= check_count(E, fn, "T_max", s->t_max, imax, arg_loc(a, ix[0], loc));
            ok &= check_range(E, fn, "eta_min", s->eta_min, 0, false, inf, true, arg_loc(a, ix[1], loc));
        }
    } else {
        s->start_factor = num_arg(E, a, ix[0], 1.0 / 3, &ok);
        s->end_factor = num_arg(E, a, ix[1], 1, &ok);
        s->total_iters = num_arg(E, a, ix[2], 5, &ok);
        if (ok) {
            ok &= check_range(E, fn, "start_factor", s->start_factor, 0, true, 1, false, arg_loc(a, ix[0], loc));
            ok &= check_range(E, fn, "end_factor", s->end_factor, 0, false, 1, false, arg_loc(a, ix[1], loc));
            ok &= check_count(E, fn, "total_iters", s->total_iters, imax, arg_loc(a, ix[2], loc));
        }
    }
    return ok ? (Value){.k = V_SCHED, .sched = s} : verror;
}

/* torch.cuda.amp.GradScaler(init_scale=2**16, growth_factor=2, backoff_factor=0.5,
 * growth_interval=2000), with its constructor's checks (growth > 1, backoff < 1). */
static Value scaler(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"init_scale", "growth_factor", "backoff_factor", "growth_interval"};
    int ix[4];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 4, ix, 0, loc)) return verror;
    ScalerConfig *c = arena_alloc(E->a, sizeof *c);
    c->on = true;
    c->loc = loc;
    c->init = num_arg(E, a, ix[0], 65536, &ok);
    c->growth = num_arg(E, a, ix[1], 2, &ok);
    c->backoff = num_arg(E, a, ix[2], 0.5, &ok);
    c->interval = num_arg(E, a, ix[3], 2000, &ok);
    if (ok) {   /* every check reports: &= rather than && */
        ok &= check_range(E, fn, "init_scale", c->init, 0, true, 3e38, false, arg_loc(a, ix[0], loc));
        ok &= check_range(E, fn, "growth_factor", c->growth, 1, true, 1e6, false, arg_loc(a, ix[1], loc));
        ok &= check_range(E, fn, "backoff_factor", c->backoff, 0, true, 1, true, arg_loc(a, ix[2], loc));
        ok &= check_count(E, fn, "growth_interval", c->interval, 1 << 24, arg_loc(a, ix[3], loc));
    }
    return ok ? (Value){.k = V_SCALER, .scaler = c} : verror;
}

/* ---- calls -------------------------------------------------------------------------------- */


/* ---- convolution and pooling (NCHW, as torch.nn.functional) -------------------------------- */

/* An int argument or a pair of them ("stride = 2", "padding = (1, 2)"): out[0] height, out[1]
 * width; at least `lo`. */
static bool pair_arg(Elab *E, const char *fn, const char *name, Args *a, int i, int dflt, int lo, int32_t out[2]) {
    out[0] = out[1] = dflt;
    if (i < 0) return true;
    const Value *v = &a->v[i];
    int n = v->k == V_TUPLE ? v->nitems : 1;
    if (n != 1 && n != 2) {
        diag_error(E->d, a->loc[i], "%s(): %s is a number or a pair (height, width), got %d values", fn, name, n);
        return false;
    }
    for (int k = 0; k < 2; k++) {
        const Value *x = v->k == V_TUPLE ? &v->items[n == 1 ? 0 : k] : v;
        if (x->k != V_NUM || x->num != floor(x->num) || x->num < lo || x->num > 1 << 20) {
            if (x->k != V_NUM) diag_error(E->d, a->loc[i], "%s(): %s must be an integer, got a %s", fn, name, kind_name(x->k));
            else diag_error(E->d, a->loc[i], "%s(): %s must be an integer >= %d, got %g", fn, name, lo, x->num);
            return false;
        }
        out[k] = (int32_t)x->num;
    }
    return true;
}

/* An NCHW input: rank 4, f32, and only the batch axis (the first) may be symbolic. */
static bool nchw_arg(Elab *E, const char *fn, int x, SrcLoc loc) {
    if (!need_f32(E, x, fn, loc)) return false;
    Shape s = E->g->nodes[x].shape;
    if (s.rank != 4 || s.d[1] == DIM_BATCH || s.d[2] == DIM_BATCH || s.d[3] == DIM_BATCH) {
        diag_error(E->d, loc, "%s(): expected an NCHW tensor [batch, channels, height, width], got %s%s", fn, tstr(E, x),
                   s.rank == 2 ? " (reshape it first: reshape(x, B, 1, 28, 28))" : "");
        return false;
    }
    return true;
}

/* The output size of the window over x; an empty output is an error, as in torch. */
static bool window_out(Elab *E, const char *fn, int x, const Attr *at, int64_t kh, int64_t kw, Shape *out, SrcLoc loc) {
    Shape s = E->g->nodes[x].shape;
    int64_t oh = spatial_out_dim(s.d[2], (int)kh, at->win.s[0], at->win.p[0], at->win.d[0]);
    int64_t ow = spatial_out_dim(s.d[3], (int)kw, at->win.s[1], at->win.p[1], at->win.d[1]);
    if (oh < 1 || ow < 1) {
        diag_error(E->d, loc, "%s(): the %lldx%lld window (dilation %d,%d) does not fit in the %lldx%lld input padded by %d,%d: "
                   "the output would be empty", fn, (long long)kh, (long long)kw, at->win.d[0], at->win.d[1],
                   (long long)s.d[2], (long long)s.d[3], at->win.p[0], at->win.p[1]);
        return false;
    }
    *out = s;
    out->d[2] = oh;
    out->d[3] = ow;
    return true;
}

/* conv2d(x, weight, bias, stride = 1, padding = 0, dilation = 1, groups = 1), as
 * torch.nn.functional.conv2d: x [N, C, H, W], weight [OC, C / groups, KH, KW], bias [OC];
 * padding may also be "valid" (0) or "same" (stride 1, an output as large as the input). */
static Value read_conv2d(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "weight", "bias", "stride", "padding", "dilation", "groups"};
    int ix[7];
    if (!bind_args(E, fn, a, names, 7, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), w = tensor_arg(E, a, ix[1]);
    int b = ix[2] >= 0 ? tensor_arg(E, a, ix[2]) : -2;
    if (x < 0 || w < 0 || b == -1 || !nchw_arg(E, fn, x, loc) || !need_f32(E, w, fn, loc)) return verror;
    Attr at = {0};
    bool ok = pair_arg(E, fn, "stride", a, ix[3], 1, 1, at.win.s) && pair_arg(E, fn, "dilation", a, ix[5], 1, 1, at.win.d);
    const char *same = ix[4] >= 0 && a->v[ix[4]].k == V_STR ? a->v[ix[4]].str : NULL;
    if (same && strcmp(same, "same") && strcmp(same, "valid")) {
        diag_error(E->d, a->loc[ix[4]], "%s(): padding is a number, a pair, \"same\" or \"valid\", got \"%s\"", fn, same);
        return verror;
    }
    ok = ok && (same || pair_arg(E, fn, "padding", a, ix[4], 0, 0, at.win.p));
    double groups = 1;
    if (ok && ix[6] >= 0) {
        groups = num_arg(E, a, ix[6], 1, &ok);
        if (ok && (groups != floor(groups) || groups < 1 || groups > 1 << 20)) {
            diag_error(E->d, a->loc[ix[6]], "%s(): groups must be a positive integer, got %g", fn, groups);
            ok = false;
        }
    }
    if (!ok) return verror;
    at.win.groups = (int32_t)groups;
    Shape xs = E->g->nodes[x].shape, ws = E->g->nodes[w].shape;
    if (ws.rank != 4 || shape_batch_axis(ws) >= 0 || ws.d[0] % at.win.groups || xs.d[1] != ws.d[1] * at.win.groups) {
        diag_error(E->d, loc, "%s(): weight %s does not fit input %s: expected [out_channels, %lld, kh, kw] with out_channels "
                   "a multiple of groups = %d", fn, tstr(E, w), tstr(E, x), (long long)(xs.d[1] / at.win.groups), at.win.groups);
        return verror;
    }
    if (xs.d[1] % at.win.groups) {
        diag_error(E->d, loc, "%s(): the input's %lld channels do not split into groups = %d", fn, (long long)xs.d[1], at.win.groups);
        return verror;
    }
    if (same && !strcmp(same, "same")) {
        for (int k = 0; k < 2; k++) {
            int64_t span = (int64_t)at.win.d[k] * (ws.d[2 + k] - 1);
            if (at.win.s[k] != 1) {
                diag_error(E->d, a->loc[ix[4]], "%s(): padding=\"same\" needs stride 1, as in torch", fn);
                return verror;
            }
            if (span % 2) {
                diag_error(E->d, a->loc[ix[4]], "%s(): padding=\"same\" with an even kernel needs more padding on one side "
                           "than the other, which nnc does not do; pad explicitly", fn);
                return verror;
            }
            at.win.p[k] = (int32_t)(span / 2);
        }
    }
    Shape ys;
    if (!window_out(E, fn, x, &at, ws.d[2], ws.d[3], &ys, loc)) return verror;
    ys.d[1] = ws.d[0];
    int in[2] = {x, w};
    int y = graph_add(E->g, op, 2, in, ys, DT_F32, loc);
    E->g->nodes[y].attr = at;
    if (b < 0) return vtensor(y);
    Shape bs = E->g->nodes[b].shape;
    if (bs.rank != 1 || bs.d[0] != ws.d[0] || !need_f32(E, b, fn, loc)) {
        diag_error(E->d, loc, "%s(): bias %s should be [%lld], one per output channel", fn, tstr(E, b), (long long)ws.d[0]);
        return verror;
    }
    int64_t bd[3] = {ws.d[0], 1, 1};
    return vtensor(graph_add2(E->g, OP_ADD, y, reshape_node(E, b, shape_of(3, bd), loc), loc));
}

/* max_pool2d(x, kernel_size, stride = kernel_size, padding = 0, dilation = 1) and
 * avg_pool2d(x, kernel_size, stride = kernel_size, padding = 0), as torch (floor mode; the
 * average counts the zero padding, torch's count_include_pad default). */
static Value read_pool2d(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "kernel_size", "stride", "padding", "dilation"};
    int ix[5] = {-1, -1, -1, -1, -1};   /* avg_pool2d has no dilation: ix[4] stays -1 */
    if (!bind_args(E, fn, a, names, op == OP_MAX_POOL2D ? 5 : 4, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !nchw_arg(E, fn, x, loc)) return verror;
    Attr at = {0};
    if (!pair_arg(E, fn, "kernel_size", a, ix[1], 1, 1, at.win.k) ||
        !pair_arg(E, fn, "padding", a, ix[3], 0, 0, at.win.p) || !pair_arg(E, fn, "dilation", a, ix[4], 1, 1, at.win.d))
        return verror;
    if (ix[2] < 0) memcpy(at.win.s, at.win.k, sizeof at.win.s);
    else if (!pair_arg(E, fn, "stride", a, ix[2], 1, 1, at.win.s)) return verror;
    for (int k = 0; k < 2; k++)
        if (at.win.p[k] * 2 > at.win.k[k]) {
            diag_error(E->d, arg_loc(a, ix[3], loc), "%s(): padding %d is more than half the kernel size %d, as torch refuses",
                       fn, at.win.p[k], at.win.k[k]);
            return verror;
        }
    at.win.groups = 1;
    Shape ys;
    if (!window_out(E, fn, x, &at, at.win.k[0], at.win.k[1], &ys, loc)) return verror;
    int y = graph_add(E->g, op, 1, &x, ys, DT_F32, loc);
    E->g->nodes[y].attr = at;
    return vtensor(y);
}


/* dropout(x, p = 0.5), as torch.nn.functional.dropout: x times a mask that training entries
 * draw per step and evaluation makes 1 (passes' DROPOUT_MASK). */
static Value read_dropout(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "p"};
    int ix[2];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 2, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    double p = num_arg(E, a, ix[1], 0.5, &ok);
    if (x < 0 || !ok || !need_f32(E, x, fn, loc) || !check_range(E, fn, "p", p, 0, false, 1, false, arg_loc(a, ix[1], loc)))
        return verror;
    if (p == 0) return vtensor(x);
    int mask = graph_add(E->g, OP_DROPOUT_MASK, 0, NULL, E->g->nodes[x].shape, DT_F32, loc);
    E->g->nodes[mask].attr.scalars.p[0] = p;
    return vtensor(graph_add2(E->g, OP_MUL, x, mask, loc));
}


/* batch_norm(x, running_mean, running_var, weight, bias, momentum = 0.1, eps = 1e-5), as
 * torch.nn.functional.batch_norm over axis 1 of [N, C] or [N, C, H, W]: in training entries the
 * batch's statistics normalize x, and the train step moves the running buffers toward them
 * (running_var with the unbiased variance, as torch); in evaluation the running statistics
 * normalize x.  running_mean and running_var are `buffer`s of [C]; weight and bias optional. */
static Value read_batch_norm(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "running_mean", "running_var", "weight", "bias", "momentum", "eps"};
    int ix[7];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 7, ix, 3, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), rm = tensor_arg(E, a, ix[1]), rv = tensor_arg(E, a, ix[2]);
    int w = ix[3] >= 0 ? tensor_arg(E, a, ix[3]) : -2, b = ix[4] >= 0 ? tensor_arg(E, a, ix[4]) : -2;
    double mom = num_arg(E, a, ix[5], 0.1, &ok), eps = num_arg(E, a, ix[6], 1e-5, &ok);
    if (x < 0 || rm < 0 || rv < 0 || w == -1 || b == -1 || !ok || !need_f32(E, x, fn, loc)) return verror;
    if (!check_range(E, fn, "momentum", mom, 0, false, 1, false, arg_loc(a, ix[5], loc)) ||
        !check_range(E, fn, "eps", eps, 0, true, INFINITY, false, arg_loc(a, ix[6], loc)))
        return verror;
    Graph *g = E->g;
    Shape xs = g->nodes[x].shape;
    if ((xs.rank != 2 && xs.rank != 4) || xs.d[1] == DIM_BATCH) {
        diag_error(E->d, loc, "%s(): expected [N, C] or [N, C, H, W], got %s", fn, tstr(E, x));
        return verror;
    }
    int64_t C = xs.d[1];
    const int stats[4] = {rm, rv, w, b};
    for (int k = 0; k < 4; k++) {
        int t = stats[k];
        if (t < 0) continue;
        const Node *tn = &g->nodes[t];
        if (tn->shape.rank != 1 || tn->shape.d[0] != C || tn->dtype != DT_F32) {
            diag_error(E->d, arg_loc(a, ix[1 + k], loc), "%s(): %s %s should be f32[%lld], one per channel", fn,
                       names[1 + k], tstr(E, t), (long long)C);
            return verror;
        }
        if (k < 2 && (tn->op != OP_PARAM || !tn->frozen)) {
            diag_error(E->d, arg_loc(a, ix[1 + k], loc), "%s(): %s must be a buffer (declared 'buffer %s: f32[%lld] = %s'), "
                       "which the train step updates", fn, names[1 + k], names[1 + k], (long long)C,
                       k ? "ones()" : "zeros()");
            return verror;
        }
    }
    /* statistics over every axis but the channels, kept as [1, C(, 1, 1)] to broadcast */
    int64_t mask = xs.rank == 4 ? 0xd : 0x1;
    double per = xs.rank == 4 ? (double)(xs.d[2] * xs.d[3]) : 1;   /* reduced elements per sample */
    Shape ks = {0};
    ks.rank = xs.rank - 1;   /* [C] or [C, 1, 1]: aligned on the right against x */
    ks.d[0] = C;
    for (int i = 1; i < ks.rank; i++) ks.d[i] = 1;
    int mean = reduce_node(E, OP_MEAN, x, mask, true, loc);
    int d = graph_add2(g, OP_SUB, x, mean, loc);
    int var = reduce_node(E, OP_MEAN, graph_add2(g, OP_MUL, d, d, loc), mask, true, loc);
    int epsc = graph_const(g, eps, loc);
    int train = graph_add2(g, OP_DIV, d, graph_add1(g, OP_SQRT, graph_add2(g, OP_ADD, var, epsc, loc), loc), loc);
    int rmk = reshape_node(E, rm, ks, loc), rvk = reshape_node(E, rv, ks, loc);
    int centered = graph_add2(g, OP_SUB, x, rmk, loc);   /* one node per statement: ids must not
                                                           depend on argument evaluation order */
    int eval = graph_add2(g, OP_DIV, centered, graph_add1(g, OP_SQRT, graph_add2(g, OP_ADD, rvk, epsc, loc), loc), loc);
    int in[2] = {train, eval};
    int y = graph_add(g, OP_MODE, 2, in, xs, DT_F32, loc);
    if (w >= 0) y = graph_add2(g, OP_MUL, y, reshape_node(E, w, ks, loc), loc);
    if (b >= 0) y = graph_add2(g, OP_ADD, y, reshape_node(E, b, ks, loc), loc);
    /* the running statistics' update, in the train step only: r = (1 - m) r + m s, with the
     * unbiased variance var * n / (n - 1), n = B * per: var / (1 - 1 / n) */
    Shape cs = shape_of(1, &C);
    int keep = graph_const(g, 1 - mom, loc), mc = graph_const(g, mom, loc);
    int inv_n = graph_const(g, 1 / per, loc);
    g->nodes[inv_n].attr.cnst.batch_power = -1;
    int unbiased = graph_add2(g, OP_DIV, var, graph_add2(g, OP_SUB, graph_const(g, 1, loc), inv_n, loc), loc);
    const int src[2] = {mean, unbiased}, dst[2] = {rm, rv};
    for (int k = 0; k < 2; k++) {
        int s = reshape_node(E, graph_add1(g, OP_DETACH, src[k], loc), cs, loc);
        int old = graph_add2(g, OP_MUL, dst[k], keep, loc);
        int upd = graph_add2(g, OP_ADD, old, graph_add2(g, OP_MUL, s, mc, loc), loc);
        int as[2] = {dst[k], upd};
        int an = graph_add(g, OP_ASSIGN, 2, as, cs, DT_F32, loc);
        g->nodes[an].phase = PH_UPDATE;
    }
    return vtensor(y);
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
        if ((x[k] = as_tensor(E, t.items[k], a->loc[ix[0]])) < 0 || !need_f32(E, x[k], fn, loc)) return verror;
    Shape s0 = E->g->nodes[x[0]].shape;
    if (s0.rank == 0) {
        diag_error(E->d, loc, "%s(): cannot join scalars", fn);
        return verror;
    }
    int64_t bit = ix[1] < 0 ? 1 : axis_bit(E, a->v[ix[1]], a->loc[ix[1]], s0.rank, &ok);
    if (!ok) return verror;
    int ax = __builtin_ctzll((unsigned long long)bit);
    if (s0.d[ax] == DIM_BATCH) {
        diag_error(E->d, arg_loc(a, ix[1], loc), "%s(): cannot join along the batch axis of %s", fn, tstr(E, x[0]));
        return verror;
    }
    for (int k = 1; k < n; k++) {
        Shape s = E->g->nodes[x[k]].shape;
        bool same = s.rank == s0.rank && s.d[ax] != DIM_BATCH;
        for (int d = 0; same && d < s.rank; d++) same = d == ax || s.d[d] == s0.d[d];
        if (!same) {
            diag_error(E->d, loc, "%s(): %s and %s differ outside axis %d", fn, tstr(E, x[0]), tstr(E, x[k]), ax);
            return verror;
        }
    }
    int acc = x[0];
    for (int k = 1; k < n;) {   /* four at a time, the first being what is joined so far */
        int in[NNC_MAX_IN] = {acc}, m = 1;
        Shape s = E->g->nodes[acc].shape;
        while (m < NNC_MAX_IN && k < n) {
            s.d[ax] += E->g->nodes[x[k]].shape.d[ax];
            in[m++] = x[k++];
        }
        acc = graph_add(E->g, OP_CONCAT, m, in, s, DT_F32, loc);
        E->g->nodes[acc].attr.slice.axis = ax;
    }
    return vtensor(acc);
}

static int slice_node(Elab *E, int x, int ax, int64_t start, int64_t len, int64_t step, SrcLoc loc) {
    Shape s = E->g->nodes[x].shape;
    if (start == 0 && step == 1 && len == s.d[ax]) return x;
    s.d[ax] = len;
    int y = graph_add(E->g, OP_SLICE, 1, &x, s, DT_F32, loc);
    E->g->nodes[y].attr.slice.axis = ax;
    E->g->nodes[y].attr.slice.start = start;
    E->g->nodes[y].attr.slice.step = step;
    return y;
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
    if (s.d[ax] == DIM_BATCH) {
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
    if (!narrow) {   /* Python's rules: negatives from the end, then clipped to [0, L] */
        if (start < 0) start += L;
        if (stop < 0) stop += L;
        start = start < 0 ? 0 : start > L ? L : start;
        stop = stop < 0 ? 0 : stop > L ? L : stop;
    } else if (start < 0 || stop > L || stop < start) {
        diag_error(E->d, loc, "%s(): [%g, %g) is outside axis %d of %s (length %g)", fn, start, stop, ax, tstr(E, x), L);
        return verror;
    }
    int64_t len = stop > start ? (int64_t)((stop - start + step - 1) / step) : 0;
    if (len < 1) {
        diag_error(E->d, loc, "%s(): the slice of axis %d of %s is empty", fn, ax, tstr(E, x));
        return verror;
    }
    return vtensor(slice_node(E, x, ax, (int64_t)start, len, (int64_t)step, loc));
}

/* adaptive_avg_pool2d(x, 1): global average pooling to [N, C, 1, 1] (other sizes: not yet). */
static Value read_adaptive_avg_pool2d(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "output_size"};
    int ix[2];
    int32_t size[2];
    if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !nchw_arg(E, fn, x, loc) || !pair_arg(E, fn, "output_size", a, ix[1], 1, 1, size)) return verror;
    if (size[0] != 1 || size[1] != 1) {
        diag_error(E->d, a->loc[ix[1]], "%s(): only output_size 1 (global average pooling) is supported", fn);
        return verror;
    }
    return vtensor(reduce_node(E, OP_MEAN, x, 0xc, true, loc));
}

/* ---- builtins from ops.def ------------------------------------------------------------------ */

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
        p[k - oi->arity] = num_arg(E, a, ix[k], sf.dflt[k], &ok);   /* defaults may be +-inf (clamp) */
        ok = ok && (ix[k] < 0 || check_finite(E, fn, sf.names[k], p[k - oi->arity], a->loc[ix[k]]));
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
static Value read_matmul(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    (void)op;
    if (a->n != 2) {
        diag_error(E->d, loc, "%s() takes two arguments", fn);
        return verror;
    }
    return matmul(E, a->v[0], a->v[1], loc);
}
static Value read_pow(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    (void)op;
    if (a->n != 2) {
        diag_error(E->d, loc, "%s() takes two arguments", fn);
        return verror;
    }
    return powc(E, a->v[0], a->v[1], loc);
}
static Value read_transpose(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) { (void)op, (void)fn; return transpose(E, a, loc); }
static Value read_reshape(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) { (void)op, (void)fn; return reshape(E, a, loc); }
static Value read_to(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) { (void)op, (void)fn; return to_device(E, a, loc); }

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


/* embedding(indices, weight), as torch.nn.functional.embedding: indices i32 of any shape (up to
 * 3 axes), weight [V, D]; the result is indices' shape with D appended. */
static Value read_embedding(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"indices", "weight"};
    int ix[2];
    if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
    int idx = tensor_arg(E, a, ix[0]), w = tensor_arg(E, a, ix[1]);
    if (idx < 0 || w < 0) return verror;
    const Node *in = &E->g->nodes[idx], *wn = &E->g->nodes[w];
    if (in->dtype != DT_I32) {
        diag_error(E->d, a->loc[ix[0]], "%s(): indices are i32, got %s", fn, tstr(E, idx));
        return verror;
    }
    if (wn->dtype != DT_F32 || wn->shape.rank != 2 || shape_batch_axis(wn->shape) >= 0) {
        diag_error(E->d, a->loc[ix[1]], "%s(): weight is f32[num_embeddings, embedding_dim], got %s", fn, tstr(E, w));
        return verror;
    }
    if (in->shape.rank >= IR_MAX_RANK) {
        diag_error(E->d, a->loc[ix[0]], "%s(): indices %s have too many axes: the result would have %d, at most %d", fn,
                   tstr(E, idx), in->shape.rank + 1, IR_MAX_RANK);
        return verror;
    }
    Shape s = in->shape;
    s.d[s.rank++] = wn->shape.d[1];
    int io[2] = {idx, w};
    return vtensor(graph_add(E->g, op, 2, io, s, DT_F32, loc));
}

static Reader *custom_reader(Op op) {
    static const struct { Op op; Reader *read; } custom[] = {
        {OP_MATMUL, read_matmul}, {OP_POWC, read_pow}, {OP_CROSS_ENTROPY, loss_ce}, {OP_ACCURACY, loss_ce},
        {OP_TRANSPOSE, read_transpose}, {OP_RESHAPE, read_reshape}, {OP_COPY, read_to}, {OP_GELU, read_gelu},
        {OP_CONV2D, read_conv2d}, {OP_MAX_POOL2D, read_pool2d}, {OP_AVG_POOL2D, read_pool2d},
        {OP_EMBEDDING, read_embedding},
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
    case OK_LEAF: case OK_MATMUL: case OK_VIEW: case OK_COPY: case OK_ASSIGN: case OK_HELPER: case OK_COLLECTIVE: break;
    }
    diag_error(E->d, loc, "internal: ops.def gives '%s' a surface but the front end has no reader for it", fn);
    return verror;
}

static Value read_mse(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    (void)fn;
    return loss_mse(E, a, loc);
}

/* Builtins that are compositions of ops, not ops (the ops' own come from ops.def). */
typedef Value Composite(Elab *E, const char *fn, Args *a, SrcLoc loc);
static const struct { const char *name; Composite *read; } composites[] = {
    {"mse_loss", read_mse}, {"logsumexp", read_logsumexp}, {"min", read_min}, {"flatten", read_flatten},
    {"layer_norm", read_layer_norm}, {"adaptive_avg_pool2d", read_adaptive_avg_pool2d},
    {"dropout", read_dropout}, {"batch_norm", read_batch_norm},
    {"concat", read_concat}, {"cat", read_concat}, {"narrow", read_slice}, {"slice", read_slice},
    {"view", read_view},
};

/* "did you mean": every op's surface name, then the compositions. */
static const char *suggest_builtin(Elab *E, const char *fn, int *bd) {
    const char *best = NULL;
    for (int op = 0; op < OP_COUNT; op++) {
        const char *sf = op_info[op].surface;
        if (sf) best = closest(fn, arena_printf(E->a, "%.*s", (int)strcspn(sf, "("), sf), best, bd);
    }
    for (size_t i = 0; i < NNC_COUNTOF(composites); i++) best = closest(fn, composites[i].name, best, bd);
    return best;
}

static Value call_builtin(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    int op = surface_op(fn);
    if (op >= 0) return call_op(E, (Op)op, fn, a, loc);
    for (size_t i = 0; i < NNC_COUNTOF(composites); i++)
        if (!strcmp(fn, composites[i].name)) return composites[i].read(E, fn, a, loc);
    if (E->in_train) {
        static const struct { const char *name; SourceKind k; } src[] = {
            {"idx", SRC_IDX}, {"npy", SRC_NPY}, {"csv", SRC_CSV}, {"randn", SRC_RANDN}, {"rand", SRC_RAND}};
        for (size_t i = 0; i < NNC_COUNTOF(src); i++)
            if (!strcmp(fn, src[i].name)) return source(E, src[i].k, fn, a, loc);
        if (!strcmp(fn, "sgd")) return optimizer(E, OPT_SGD, fn, a, loc);
        if (!strcmp(fn, "adam")) return optimizer(E, OPT_ADAM, fn, a, loc);
        if (!strcmp(fn, "adamw")) return optimizer(E, OPT_ADAMW, fn, a, loc);
        static const struct { const char *name; SchedKind k; } sch[] = {
            {"step_lr", SCHED_STEP}, {"exponential_lr", SCHED_EXPONENTIAL}, {"cosine_lr", SCHED_COSINE},
            {"linear_lr", SCHED_LINEAR}};
        for (size_t i = 0; i < NNC_COUNTOF(sch); i++)
            if (!strcmp(fn, sch[i].name)) return schedule(E, sch[i].k, fn, a, loc);
        if (!strcmp(fn, "dynamic")) return scaler(E, fn, a, loc);
    }
    if (!strcmp(fn, "cuda")) {   /* cuda(1): GPU 1, torch.device("cuda:1") */
        if (a->n != 1 || a->v[0].k != V_NUM || a->v[0].num != floor(a->v[0].num) || a->v[0].num < 0 ||
            a->v[0].num >= NNC_MAX_GPUS) {
            diag_error(E->d, loc, "cuda(k) names GPU k, an integer from 0 to %d: cuda(1)", NNC_MAX_GPUS - 1);
            return verror;
        }
        return (Value){.k = V_DEVICE, .num = DEV_GPU((int)a->v[0].num)};
    }
    int bd = 3;
    const char *best = suggest_builtin(E, fn, &bd);
    if (E->in_train) best = suggest_list(fn, train_fn_names, NNC_COUNTOF(train_fn_names), best, &bd);
    diag_error(E->d, loc, "unknown function '%s'%s", fn, did_you_mean(E, best));
    return verror;
}

static Value instantiate(Elab *E, Stmt *def, Args *a, const char *scope, SrcLoc loc) {
    int np = 0;
    for (Name *p = def->params; p; p = p->next) np++;
    if (np != a->n) {
        diag_error(E->d, loc, "block '%s' takes %d argument%s, got %d", def->name, np, np == 1 ? "" : "s", a->n);
        return verror;
    }
    if (E->depth > 32) {
        diag_error(E->d, loc, "blocks nested more than 32 deep (does '%s' contain itself?)", def->name);
        return verror;
    }
    /* keyword arguments (Linear(n_in = 784, n_out = 128)) bind by name, the rest by position */
    const char *names[8];
    int ix[8], i = 0;
    for (Name *p = def->params; p; p = p->next) names[i++] = p->s;
    if (!bind_args(E, def->name, a, names, np, ix, np, loc)) return verror;
    Inst *inst = arena_alloc(E->a, sizeof *inst);
    inst->def = def;
    inst->scope = scope;
    inst->env = arena_alloc(E->a, sizeof *inst->env);
    inst->env->parent = E->globals;
    i = 0;
    for (Name *p = def->params; p; p = p->next, i++) {
        Value v = a->v[ix[i]];
        if (v.k != V_NUM) {
            diag_error(E->d, a->loc[ix[i]], "block arguments are numbers (sizes, rates), got a %s", kind_name(v.k));
            return verror;
        }
        env_bind(E, inst->env, p->s, v, p->loc);
    }
    inst->first = E->g->n;
    E->depth++;
    exec_stmts(E, inst->env, inst, def->body, NULL);
    E->depth--;
    inst->end = E->g->n;
    return (Value){.k = V_INST, .inst = inst};
}

static Value call_instance(Elab *E, Inst *inst, Args *a, SrcLoc loc) {
    if (!inst->forward) {
        diag_error(E->d, loc, "block '%s' has no forward()", inst->def->name);
        return verror;
    }
    Env *env = arena_alloc(E->a, sizeof *env);
    env->parent = inst->env;
    int np = 0;
    for (Name *p = inst->forward->params; p; p = p->next) np++;
    if (np != a->n) {
        diag_error(E->d, loc, "%s.forward takes %d argument%s, got %d", inst->scope, np, np == 1 ? "" : "s", a->n);
        return verror;
    }
    int i = 0;
    for (Name *p = inst->forward->params; p; p = p->next, i++) env_bind(E, env, p->s, a->v[i], p->loc);
    Value ret = {.k = V_ERROR, .num = -1};
    int first = E->g->n;
    E->depth++;
    exec_stmts(E, env, inst, inst->forward->body, &ret);
    E->depth--;
    for (int k = first; k < E->g->n; k++) {   /* inner instances have named theirs already */
        Node *n = &E->g->nodes[k];
        if (!n->scope) n->scope = inst->scope;
        if (inst->placed && !n->dev_fixed) {   /* its computation on its device (an inner placed
                                                  instance, or a to() inside, keeps its own) */
            n->dev = inst->dev;
            n->dev_fixed = true;
        }
    }
    if (ret.k == V_ERROR && ret.num == -1) {
        diag_error(E->d, inst->forward->loc, "forward() of block '%s' does not return a value", inst->def->name);
        return verror;
    }
    return ret;
}

/* A tensor's method: the builtin of that name with the tensor as its first argument. */
static Value call_method(Elab *E, Value self, const char *fn, Args *a, SrcLoc loc) {
    if (a->n == (int)NNC_COUNTOF(a->v)) {
        diag_error(E->d, loc, "too many arguments");
        return verror;
    }
    memmove(a->v + 1, a->v, (size_t)a->n * sizeof a->v[0]);
    memmove(a->loc + 1, a->loc, (size_t)a->n * sizeof a->loc[0]);
    memmove(a->kw + 1, a->kw, (size_t)a->n * sizeof a->kw[0]);
    a->v[0] = self;
    a->loc[0] = loc;
    a->kw[0] = NULL;
    a->n++;
    return call_builtin(E, fn, a, loc);
}

static Value call(Elab *E, Env *env, Expr *e, const char *bind_as) {
    Args a;
    if (!eval_args(E, env, e->args, &a, e->loc)) return verror;
    if (e->a->k == E_IDENT) {
        Binding *b = env_find(env, e->a->str);
        if (!b) return call_builtin(E, e->a->str, &a, e->loc);
        if (b->v.k == V_BLOCK) {
            if (!bind_as) {
                diag_error(E->d, e->loc, "bind the block instance to a name first: 'name = %s(...)', then call name(x)", e->a->str);
                return verror;
            }
            return instantiate(E, b->v.block, &a, bind_as, e->loc);
        }
        if (b->v.k == V_INST) return call_instance(E, b->v.inst, &a, e->loc);
        if (b->v.k == V_ERROR) return verror;   /* its definition's error is reported */
        diag_error(E->d, e->loc, "'%s' is a %s, not something that can be called", e->a->str, kind_name(b->v.k));
        return verror;
    }
    if (e->a->k == E_MEMBER) {   /* x.relu(), x.sum(axis = 1), x.view(B, -1): the builtin on x */
        /* fc2 = Linear(128, 10).to(cuda(1)): the instance is fc2, then it moves (torch's
         * nn.Linear(...).to("cuda:1")) */
        bool inst_to = bind_as && !strcmp(e->a->str, "to") && e->a->a->k == E_CALL;
        Value self = inst_to ? call(E, env, e->a->a, bind_as) : eval(E, env, e->a->a);
        if (self.k == V_INST && inst_to) return a.n == 1 ? place_instance(E, self.inst, a.v[0], e->loc) : to_device(E, &a, e->loc);
        if (self.k == V_ERROR) return verror;
        if (self.k == V_TENSOR) return call_method(E, self, e->a->str, &a, e->loc);
    }
    Value f = eval(E, env, e->a);
    if (f.k == V_INST) return call_instance(E, f.inst, &a, e->loc);
    if (f.k != V_ERROR) diag_error(E->d, e->loc, "a %s cannot be called", kind_name(f.k));
    return verror;
}

/* (a, b) and [a, b]: numbers, strings and the batch symbol, for axes and shapes; tensors, for
 * concat((a, b)). */
static Value tuple(Elab *E, Env *env, Expr *e) {
    Value t = {.k = V_TUPLE};
    for (Arg *x = e->args; x; x = x->next) t.nitems++;
    t.items = arena_alloc(E->a, (size_t)t.nitems * sizeof *t.items);
    int k = 0;
    for (Arg *x = e->args; x; x = x->next) {
        t.items[k] = eval(E, env, x->e);
        if (t.items[k].k == V_ERROR) return verror;
        if (t.items[k].k != V_NUM && t.items[k].k != V_STR && t.items[k].k != V_TENSOR) {
            diag_error(E->d, x->e->loc, "a tuple holds numbers (axes, sizes) or tensors, not a %s", kind_name(t.items[k].k));
            return verror;
        }
        k++;
    }
    return t;
}

/* x.T (a 2-d transpose, as torch's .T) and x.mT (the last two axes, as torch's .mT); methods
 * are calls: x.relu(). */
static Value tensor_member(Elab *E, Value self, Expr *e) {
    if (!strcmp(e->str, "T") && self.k == V_TENSOR && E->g->nodes[self.node].shape.rank > 2) {
        diag_error(E->d, e->loc, "'.T' is for 2-d tensors (torch's reverses every axis of %s); .mT or transpose() "
                   "swaps the last two", tstr(E, self.node));
        return verror;
    }
    if (!strcmp(e->str, "T") || !strcmp(e->str, "mT")) {
        Args a = {.v = {self}, .loc = {e->loc}, .n = 1};
        return transpose(E, &a, e->loc);
    }
    diag_error(E->d, e->loc, "'.%s': a tensor has .T; a builtin is called as a method: x.%s(...)", e->str, e->str);
    return verror;
}

static Value ident(Elab *E, Env *env, Expr *e) {
    Binding *b = env_find(env, e->str);
    if (b) return b->v;
    if (!strcmp(e->str, "true")) return vnum(1);
    if (!strcmp(e->str, "false")) return vnum(0);
    if (!strcmp(e->str, "cpu")) return (Value){.k = V_DEVICE, .num = DEV_CPU};
    if (!strcmp(e->str, "cuda")) return (Value){.k = V_DEVICE, .num = DEV_CUDA};
    if (!strcmp(e->str, "bf16")) return (Value){.k = V_DTYPE, .num = DT_BF16};
    if (!strcmp(e->str, "f16")) return (Value){.k = V_DTYPE, .num = DT_F16};
    if (!strcmp(e->str, "f32")) return (Value){.k = V_DTYPE, .num = DT_F32};
    if (E->g->batch_name && !strcmp(e->str, E->g->batch_name))   /* reshape(h, B, 8) */
        return (Value){.k = V_STR, .str = e->str};
    int bd = 3;
    const char *best = suggest_env(e->str, env, NULL, &bd);
    best = suggest_list(e->str, keyword_names, NNC_COUNTOF(keyword_names), best, &bd);
    diag_error(E->d, e->loc, "unknown name '%s'%s", e->str, did_you_mean(E, best));
    return verror;
}

static Value eval_bound(Elab *E, Env *env, Expr *e, const char *bind_as) {
    switch (e->k) {
    case E_NUM: return vnum(e->num);
    case E_STR: return (Value){.k = V_STR, .str = e->str};
    case E_IDENT: return ident(E, env, e);
    case E_BIN: {
        Value a = eval(E, env, e->a), b = eval(E, env, e->b);
        return binop(E, e->op, a, b, e->loc);
    }
    case E_NEG: {
        Value a = eval(E, env, e->a);
        if (a.k == V_NUM) return vnum(-a.num);
        int x = as_tensor(E, a, e->loc);
        if (x < 0 || !need_f32(E, x, "negation", e->loc)) return verror;
        return vtensor(graph_add1(E->g, OP_NEG, x, e->loc));
    }
    case E_CALL: return call(E, env, e, bind_as);
    case E_TUPLE: return tuple(E, env, e);
    case E_MEMBER: {
        Value a = eval(E, env, e->a);
        if (a.k == V_ERROR) return verror;
        if (a.k == V_TENSOR) return tensor_member(E, a, e);
        if (a.k != V_INST) {
            diag_error(E->d, e->loc, "'.%s': a %s has no members", e->str, kind_name(a.k));
            return verror;
        }
        Binding *m = env_find_local(a.inst->env, e->str);
        if (m) return m->v;
        int bd = 3;
        const char *best = suggest_env(e->str, &(Env){.head = a.inst->env->head}, NULL, &bd);
        diag_error(E->d, e->loc, "block instance '%s' has no member '%s'%s", a.inst->scope, e->str, did_you_mean(E, best));
        return verror;
    }
    }
    return verror;
}

/* False (with one located error) once a bound is passed; the caller then yields V_ERROR. */
static bool within_budget(Elab *E, SrcLoc loc) {
    if (E->over_budget || diag_stopped(E->d)) return false;
    const char *why = NULL;
    if (E->eval_depth > ELAB_MAX_DEPTH)
        why = arena_printf(E->a, "the model nests more than %d deep here (blocks calling blocks with long expressions)",
                           ELAB_MAX_DEPTH);
    else if (++E->steps > ELAB_MAX_STEPS)
        why = arena_printf(E->a, "elaborating the model takes more than %ld steps (blocks that instantiate blocks "
                           "several times grow exponentially)", ELAB_MAX_STEPS);
    else if (E->g->n > ELAB_MAX_NODES)
        why = arena_printf(E->a, "the model has more than %d operations, the limit (blocks that instantiate "
                           "blocks several times grow exponentially)", ELAB_MAX_NODES);
    if (!why) return true;
    diag_error(E->d, loc, "%s", why);
    E->over_budget = true;
    return false;
}

static Value eval_counted(Elab *E, Env *env, Expr *e, const char *bind_as) {
    if (!within_budget(E, e->loc)) return verror;
    E->eval_depth++;
    Value v = eval_bound(E, env, e, bind_as);
    E->eval_depth--;
    return v;
}

static Value eval(Elab *E, Env *env, Expr *e) { return eval_counted(E, env, e, NULL); }

/* ---- declarations ------------------------------------------------------------------------- */

/* A dimension: a positive integer, or (where allowed) the batch symbol.  The first unbound
 * identifier used as a dimension of an input becomes the batch symbol. */
static bool eval_dim(Elab *E, Value v, SrcLoc loc, bool allow_batch, int64_t *out) {
    if (v.k == V_STR && allow_batch && E->g->batch_name && !strcmp(v.str, E->g->batch_name)) {
        *out = DIM_BATCH;
        return true;
    }
    if (v.k != V_NUM || v.num != floor(v.num) || v.num < 1 || v.num > 1e12) {
        if (v.k == V_NUM)
            diag_error(E->d, loc, "a dimension must be a positive integer, got %g", v.num);
        else if (v.k == V_STR)
            diag_error(E->d, loc, "'%s' cannot be a dimension here%s", v.str,
                       allow_batch ? " (the batch dimension is named by the first input)" : ": only inputs have a batch dimension");
        else if (v.k != V_ERROR)
            diag_error(E->d, loc, "a dimension must be a number, got a %s", kind_name(v.k));
        return false;
    }
    *out = (int64_t)v.num;
    return true;
}

static bool eval_type(Elab *E, Env *env, TypeAst *t, bool is_input, Shape *s, DType *dt) {
    if (!strcmp(t->dtype, "f32")) *dt = DT_F32;
    else if (!strcmp(t->dtype, "i32")) *dt = DT_I32;
    else {
        if (!strcmp(t->dtype, "bf16") || !strcmp(t->dtype, "f16"))
            diag_error(E->d, t->loc, "inputs, parameters and buffers are f32 or i32 (parameters are the f32 master "
                       "weights); a %s value comes from to(x, %s), or from precision = %s in the train section",
                       t->dtype, t->dtype, t->dtype);
        else
            diag_error(E->d, t->loc, "unknown type '%s' (expected f32 or i32)", t->dtype);
        return false;
    }
    memset(s, 0, sizeof *s);
    bool ok = true;
    for (Arg *d = t->dims; d; d = d->next) {
        if (s->rank == IR_MAX_RANK) {
            diag_error(E->d, d->e->loc, "at most %d dimensions", IR_MAX_RANK);
            return false;
        }
        Value v;
        if (d->e->k == E_IDENT && !env_find(env, d->e->str) && is_input) {
            if (!E->g->batch_name) E->g->batch_name = d->e->str;
            v = (Value){.k = V_STR, .str = d->e->str};
        } else if (d->e->k == E_IDENT && !env_find(env, d->e->str)) {
            v = (Value){.k = V_STR, .str = d->e->str};
        } else {
            v = eval(E, env, d->e);
        }
        if (!eval_dim(E, v, d->e->loc, is_input, &s->d[s->rank])) ok = false;
        else if (s->d[s->rank] == DIM_BATCH && shape_batch_axis(*s) >= 0) {
            diag_error(E->d, d->e->loc, "a tensor can have only one batch dimension");
            ok = false;
        }
        s->rank++;
    }
    /* A shape that claims more than 2^36 elements (256 GiB of f32) per batch row is an error
     * here, not an allocation attempt (and no later size computation can overflow). */
    double total = 1;
    for (int i = 0; ok && i < s->rank; i++) total *= s->d[i] == DIM_BATCH ? 1.0 : (double)s->d[i];
    if (ok && total > 68719476736.0) {
        diag_error(E->d, t->loc, "this tensor would have %.3g elements per batch row; the limit is 2^36", total);
        return false;
    }
    return ok;
}

static double gain_of(const char *nl, double a) {
    if (!strcmp(nl, "relu")) return sqrt(2.0);
    if (!strcmp(nl, "leaky_relu")) return sqrt(2.0 / (1 + a * a));
    if (!strcmp(nl, "tanh")) return 5.0 / 3;
    if (!strcmp(nl, "linear") || !strcmp(nl, "sigmoid")) return 1;
    return -1;
}

/* torch.nn.init: kaiming and xavier reduce to uniform/normal with bounds from the fans. */
static bool init_kaiming_xavier(Elab *E, Node *p, const char *fn, Args *a, SrcLoc loc) {
    static const char *kn[] = {"a", "mode", "nonlinearity"};
    static const char *xn[] = {"gain"};
    int ix[3];
    bool ok = true, kaiming = !strncmp(fn, "kaiming", 7), unif = strstr(fn, "uniform") != NULL;
    if (!bind_args(E, fn, a, kaiming ? kn : xn, kaiming ? 3 : 1, ix, 0, loc)) return false;
    if (p->shape.rank < 2) {
        diag_error(E->d, loc, "%s() needs a tensor with at least 2 dimensions to compute fan_in and fan_out", fn);
        return false;
    }
    double rf = 1;
    for (int i = 2; i < p->shape.rank; i++) rf *= (double)p->shape.d[i];
    double fan_in = (double)p->shape.d[1] * rf, fan_out = (double)p->shape.d[0] * rf;
    double std;
    if (kaiming) {
        double sl = num_arg(E, a, ix[0], 0, &ok);
        if (!ok || !check_finite(E, fn, "a", sl, arg_loc(a, ix[0], loc))) return false;
        for (int j = 1; j < 3; j++)
            if (ix[j] >= 0 && a->v[ix[j]].k != V_STR) {
                diag_error(E->d, a->loc[ix[j]], "%s(): %s is a string such as \"%s\", got a %s", fn, kn[j],
                           j == 1 ? "fan_in" : "relu", kind_name(a->v[ix[j]].k));
                return false;
            }
        const char *mode = ix[1] >= 0 ? a->v[ix[1]].str : "fan_in";
        const char *nl = ix[2] >= 0 ? a->v[ix[2]].str : "leaky_relu";
        double gain = gain_of(nl, sl);
        if (gain < 0 || (strcmp(mode, "fan_in") && strcmp(mode, "fan_out"))) {
            diag_error(E->d, loc, "%s(): mode is \"fan_in\" or \"fan_out\"; nonlinearity is relu, leaky_relu, tanh, sigmoid or linear", fn);
            return false;
        }
        std = gain / sqrt(!strcmp(mode, "fan_in") ? fan_in : fan_out);
    } else {
        double gain = num_arg(E, a, ix[0], 1, &ok);
        if (!ok || !check_finite(E, fn, "gain", gain, arg_loc(a, ix[0], loc))) return false;
        std = gain * sqrt(2.0 / (fan_in + fan_out));
    }
    p->attr.init.kind = unif ? INIT_UNIFORM : INIT_NORMAL;
    p->attr.init.a = unif ? -sqrt(3.0) * std : 0;
    p->attr.init.b = unif ? sqrt(3.0) * std : std;
    return ok;
}

/* torch.nn.init's rules: uniform_(a, b) needs a <= b (and b - a finite), normal_ needs std >= 0. */
static bool init_bounds_check(Elab *E, const char *fn, Node *p, Args *a, int *ix, SrcLoc loc) {
    bool u = fn[0] == 'u';
    double lo = p->attr.init.a, hi = p->attr.init.b;
    if (!check_finite(E, fn, u ? "low" : "mean", lo, arg_loc(a, ix[0], loc))) return false;
    if (!u) return check_range(E, fn, "std", hi, 0, false, INFINITY, false, arg_loc(a, ix[1], loc));
    if (!check_finite(E, fn, "high", hi, arg_loc(a, ix[1], loc))) return false;
    if (lo > hi || !isfinite(hi - lo)) {
        diag_error(E->d, loc, "uniform(): needs low <= high (a finite range), got low = %g, high = %g", lo, hi);
        return false;
    }
    return true;
}

static bool eval_init(Elab *E, Env *env, Node *p, Expr *e) {
    if (!e) {
        diag_error(E->d, p->loc, "parameter '%s' needs an initializer, e.g. '= normal(0, 0.01)' or '= zeros()'", p->name);
        return false;
    }
    if (e->k != E_CALL || e->a->k != E_IDENT) {
        diag_error(E->d, e->loc, "an initializer is a call such as zeros(), normal(mean, std) or kaiming_uniform()");
        return false;
    }
    Args a;
    if (!eval_args(E, env, e->args, &a, e->loc)) return false;
    const char *fn = e->a->str;
    static const char *un[] = {"low", "high"}, *nn[] = {"mean", "std"}, *cn[] = {"value"};
    int ix[2];
    bool ok = true;
    if (!strcmp(fn, "zeros") || !strcmp(fn, "ones")) {
        if (!bind_args(E, fn, &a, NULL, 0, ix, 0, e->loc)) return false;
        p->attr.init.kind = fn[0] == 'z' ? INIT_ZEROS : INIT_ONES;
    } else if (!strcmp(fn, "constant")) {
        if (!bind_args(E, fn, &a, cn, 1, ix, 1, e->loc)) return false;
        p->attr.init.kind = INIT_CONSTANT;
        p->attr.init.a = num_arg(E, &a, ix[0], 0, &ok);
        ok = ok && check_finite(E, fn, "value", p->attr.init.a, arg_loc(&a, ix[0], e->loc));
    } else if (!strcmp(fn, "uniform") || !strcmp(fn, "normal")) {
        bool u = fn[0] == 'u';
        if (!bind_args(E, fn, &a, u ? un : nn, 2, ix, 0, e->loc)) return false;
        p->attr.init.kind = u ? INIT_UNIFORM : INIT_NORMAL;
        p->attr.init.a = num_arg(E, &a, ix[0], 0, &ok);
        p->attr.init.b = num_arg(E, &a, ix[1], 1, &ok);
        ok = ok && init_bounds_check(E, fn, p, &a, ix, e->loc);
    } else if (!strcmp(fn, "kaiming_uniform") || !strcmp(fn, "kaiming_normal") ||
               !strcmp(fn, "xavier_uniform") || !strcmp(fn, "xavier_normal")) {
        return init_kaiming_xavier(E, p, fn, &a, e->loc);
    } else {
        static const char *const inits[] = {"zeros", "ones", "constant", "uniform", "normal", "kaiming_uniform",
                                            "kaiming_normal", "xavier_uniform", "xavier_normal"};
        int bd = 3;
        const char *best = suggest_list(fn, inits, NNC_COUNTOF(inits), NULL, &bd);
        diag_error(E->d, e->loc, "unknown initializer '%s'%s (zeros, ones, constant, uniform, normal, "
                   "kaiming_uniform, kaiming_normal, xavier_uniform, xavier_normal)", fn, did_you_mean(E, best));
        return false;
    }
    return ok;
}

static const char *scoped(Elab *E, Inst *inst, const char *name) {
    return inst ? arena_printf(E->a, "%s.%s", inst->scope, name) : name;
}

static void decl_param(Elab *E, Env *env, Inst *inst, Stmt *s) {
    Shape sh;
    DType dt;
    if (!eval_type(E, env, s->type, false, &sh, &dt)) {
        env_bind(E, env, s->name, verror, s->loc);
        return;
    }
    if (dt != DT_F32) {
        diag_error(E->d, s->type->loc, "%s are f32", s->k == S_BUFFER ? "buffers" : "parameters");
        env_bind(E, env, s->name, verror, s->loc);
        return;
    }
    int n = graph_add(E->g, OP_PARAM, 0, NULL, sh, dt, s->loc);
    E->g->nodes[n].frozen = s->k == S_BUFFER;
    E->g->nodes[n].name = scoped(E, inst, s->name);
    E->g->nodes[n].scope = inst ? inst->scope : NULL;
    /* a failed initializer was reported: the name is bound to an error, which silences its uses */
    env_bind(E, env, s->name, eval_init(E, env, &E->g->nodes[n], s->e) ? vtensor(n) : verror, s->loc);
}

static void decl_input(Elab *E, Env *env, Inst *inst, Stmt *s) {
    if (inst) {
        diag_error(E->d, s->loc, "inputs are declared at the top level, not inside a block");
        return;
    }
    Shape sh;
    DType dt;
    if (!eval_type(E, env, s->type, true, &sh, &dt)) {
        env_bind(E, env, s->name, verror, s->loc);
        return;
    }
    int n = graph_add(E->g, OP_INPUT, 0, NULL, sh, dt, s->loc);
    E->g->nodes[n].name = s->name;
    env_bind(E, env, s->name, vtensor(n), s->loc);
}

static void stmt_let(Elab *E, Env *env, Inst *inst, Stmt *s) {
    Binding *old = env_find(env, s->name);
    if (old && old->v.k == V_BLOCK) {
        diag_error(E->d, s->loc, "'%s' is the name of a block", s->name);
        return;
    }
    Value v = eval_counted(E, env, s->e, scoped(E, inst, s->name));
    if (v.k == V_TENSOR && !E->g->nodes[v.node].name && E->g->nodes[v.node].op != OP_PARAM)
        E->g->nodes[v.node].name = s->name;
    env_bind(E, env, s->name, v, s->loc);
}

/* Outputs are returned by pointer into the entry's memory.  An f32 input (or a view of one)
 * or a constant has no buffer there, so such an output is copied by an identity node. */
static int owned_output(Elab *E, int x, SrcLoc loc) {
    int r = x;
    while (E->g->nodes[r].op == OP_RESHAPE) r = E->g->nodes[r].in[0];
    if ((E->g->nodes[r].op != OP_INPUT && E->g->nodes[r].op != OP_CONST) || E->g->nodes[x].dtype != DT_F32) return x;
    int in[1] = {x};
    return graph_add(E->g, OP_EXPAND, 1, in, E->g->nodes[x].shape, DT_F32, loc);
}

static void exec_stmts(Elab *E, Env *env, Inst *inst, Stmt *s, Value *ret) {
    for (; s && !E->over_budget && !diag_stopped(E->d); s = s->next) {
        switch (s->k) {
        case S_INPUT: decl_input(E, env, inst, s); break;
        case S_PARAM: case S_BUFFER: decl_param(E, env, inst, s); break;
        case S_LET: stmt_let(E, env, inst, s); break;
        case S_RETURN:
            if (!ret) {
                diag_error(E->d, s->loc, "'return' belongs inside forward()");
                break;
            }
            *ret = eval(E, env, s->e);
            return;
        case S_FORWARD:
            if (!inst || ret) diag_error(E->d, s->loc, "forward() is defined inside a block");
            else inst->forward = s;
            break;
        case S_BLOCK:   /* top-level blocks were registered before the walk */
            if (inst || ret) diag_error(E->d, s->loc, "blocks are defined at the top level");
            break;
        case S_OUTPUT: {
            if (inst) {
                diag_error(E->d, s->loc, "outputs are declared at the top level");
                break;
            }
            Value v = s->e ? eval(E, env, s->e) : ident(E, env, &(Expr){.k = E_IDENT, .loc = s->loc, .str = s->name});
            int x = v.k == V_ERROR ? -1 : as_tensor(E, v, s->loc);
            if (x >= 0) graph_add_out(E->g, s->name, owned_output(E, x, s->loc));
            if (s->e && v.k != V_ERROR) env_bind(E, env, s->name, v, s->loc);
            break;
        }
        case S_TRAIN:
        case S_SETTING: break;   /* read after the model body */
        }
    }
}

/* ---- the train section -------------------------------------------------------------------- */

static int named_tensor(Elab *E, const char *name, SrcLoc loc, const char *what) {
    Binding *b = env_find(E->globals, name);
    if (!b) {
        int bd = 3;
        diag_error(E->d, loc, "unknown name '%s'%s", name, did_you_mean(E, suggest_env(name, E->globals, NULL, &bd)));
        return -1;
    }
    if (b->v.k == V_ERROR) return -1;   /* its definition failed and was reported there */
    if (b->v.k != V_TENSOR) {
        diag_error(E->d, loc, "%s '%s' must be a tensor, but it is a %s", what, name, kind_name(b->v.k));
        return -1;
    }
    return b->v.node;
}

static DataBind *bind_for(Elab *E, TrainConfig *t, const char *input, SrcLoc loc) {
    int node = named_tensor(E, input, loc, "data for");
    if (node < 0) return NULL;
    if (E->g->nodes[node].op != OP_INPUT) {
        diag_error(E->d, loc, "'%s' is not an input: data is bound to inputs", input);
        return NULL;
    }
    for (int i = 0; i < t->ndata; i++)
        if (t->data[i].node == node) return &t->data[i];
    t->data = xrealloc(t->data, (size_t)(t->ndata + 1) * sizeof *t->data);
    DataBind *d = &t->data[t->ndata++];
    memset(d, 0, sizeof *d);
    d->input = input;
    d->node = node;
    return d;
}

/* An integer setting within [lo, hi], checked before any conversion (epochs = 1e12 must not
 * wrap to 0, seed = 1e30 must not become 0). */
static bool setting_num(Elab *E, Stmt *s, Value v, double lo, double hi, double *out) {
    if (v.k != V_NUM || !(v.num >= lo && v.num <= hi) || v.num != floor(v.num)) {
        if (v.k != V_ERROR) diag_error(E->d, s->e->loc, "'%s' must be an integer from %.0f to %.0f", s->name, lo, hi);
        return false;
    }
    *out = v.num;
    return true;
}

static void train_setting(Elab *E, TrainConfig *t, Stmt *s) {
    const char *k = s->name;
    double x;
    if (!strcmp(k, "minimize") || (!strcmp(k, "metric") && !s->e)) {
        bool loss = k[1] == 'i';
        if (loss) E->saw_minimize = true;
        if (!s->name2 || s->e) {
            diag_error(E->d, s->loc, "write '%s NAME' with the name of a scalar tensor", k);
            return;
        }
        int n = named_tensor(E, s->name2, s->loc2, loss ? "the loss" : "the metric");
        if (n < 0) return;
        if (E->g->nodes[n].shape.rank != 0) {
            diag_error(E->d, s->loc2, "the %s must be a scalar, but '%s' is %s (reduce it with mean() or sum())",
                       loss ? "loss" : "metric", s->name2, tstr(E, n));
            return;
        }
        if (loss) E->g->loss = n;
        else graph_add_out(E->g, s->name2, n);
        return;
    }
    if (!s->e) {
        diag_error(E->d, s->loc, "'%s %s' needs a value: '%s %s = ...'", k, s->name2, k, s->name2);
        return;
    }
    if (!strcmp(k, "metric")) {
        Value v = eval(E, E->globals, s->e);
        int n = v.k == V_ERROR ? -1 : as_tensor(E, v, s->e->loc);
        if (n < 0) return;
        if (E->g->nodes[n].shape.rank != 0) {
            diag_error(E->d, s->e->loc, "a metric must be a scalar, got %s", tstr(E, n));
            return;
        }
        graph_add_out(E->g, s->name2, owned_output(E, n, s->e->loc));
        return;
    }
    if (s->name2 && strcmp(k, "data") && strcmp(k, "test")) {
        diag_error(E->d, s->loc, "unexpected '%s' after '%s'", s->name2, k);
        return;
    }
    if (!strcmp(k, "loss_scale") && s->e->k == E_IDENT && !strcmp(s->e->str, "none")) {
        t->scaler = (ScalerConfig){.on = false, .loc = s->e->loc};
        t->scaler_set = true;
        return;
    }
    if (!strcmp(k, "precision")) {   /* a dtype name, as torch.autocast(dtype=...) */
        static const char *const names[] = {"f32", "bf16", "f16"};
        for (int i = 0; i < 3; i++)
            if (s->e->k == E_IDENT && !strcmp(s->e->str, names[i])) {
                t->precision = (Precision)i;
                return;
            }
        diag_error(E->d, s->e->loc, "precision is f32, bf16 or f16");
        return;
    }
    if (!strcmp(k, "device") && s->e->k == E_IDENT && !strcmp(s->e->str, "auto")) { /* the driver probes */
        t->device_auto = true;
        return;
    }
    E->in_train = 1;
    Value v = eval(E, E->globals, s->e);
    E->in_train = 0;
    if (!strcmp(k, "data") || !strcmp(k, "test")) {
        if (!s->name2) {
            diag_error(E->d, s->loc, "write '%s INPUT = source', naming the input it feeds", k);
            return;
        }
        if (v.k != V_SOURCE) {
            if (v.k != V_ERROR) diag_error(E->d, s->e->loc, "expected a data source such as idx(\"file\"), npy(\"file\"), csv(\"file\") or randn(n, d)");
            E->data_error = true;
            return;
        }
        DataBind *d = bind_for(E, t, s->name2, s->loc2);
        if (d) *(k[0] == 'd' ? &d->train : &d->test) = *v.src;
        if (d && v.src->scale_loc.line && E->g->nodes[d->node].dtype == DT_I32)   /* it would be ignored */
            diag_error(E->d, v.src->scale_loc, "scale applies to float inputs, but '%s' is i32: labels and "
                       "indices are read as the integers they are", s->name2);
    } else if (!strcmp(k, "batch")) {
        if (setting_num(E, s, v, 1, INT_MAX, &x)) t->batch = (int64_t)x;
    } else if (!strcmp(k, "epochs")) {
        if (setting_num(E, s, v, 0, INT_MAX, &x)) t->epochs = (int)x;
    } else if (!strcmp(k, "seed")) {   /* 2^53: the integers a number in the file holds exactly */
        if (setting_num(E, s, v, 0, 9007199254740992.0, &x)) t->seed = (uint64_t)x;
    } else if (!strcmp(k, "shuffle")) {
        if (v.k == V_NUM && v.num != 0 && v.num != 1)
            diag_error(E->d, s->e->loc, "'shuffle' is true or false");
        else if (setting_num(E, s, v, 0, 1, &x)) t->shuffle = x != 0;
    } else if (!strcmp(k, "device")) {
        if (v.k != V_DEVICE) diag_error(E->d, s->e->loc, "device is cpu, cuda, cuda(k) or auto");
        else {
            t->device = (Device)v.num;
            t->device_auto = false;
        }
    } else if (!strcmp(k, "optimizer")) {
        if (v.k != V_OPTIM) {
            if (v.k != V_ERROR) diag_error(E->d, s->e->loc, "expected sgd(...), adam(...) or adamw(...)");
        } else
            t->opt = *v.opt;
    } else if (!strcmp(k, "loss_scale")) {
        if (v.k != V_SCALER) {
            if (v.k != V_ERROR) diag_error(E->d, s->e->loc, "expected dynamic(...) or none");
        } else {
            t->scaler = *v.scaler;
            t->scaler_set = true;
        }
    } else if (!strcmp(k, "clip_grad_norm") || !strcmp(k, "clip_grad_value")) {
        bool norm = !strcmp(k, "clip_grad_norm");
        if (v.k != V_NUM || !(v.num > 0)) {
            if (v.k == V_NUM) diag_error(E->d, s->e->loc, "%s must be a number > 0, got %g", k, v.num);
            else if (v.k != V_ERROR) diag_error(E->d, s->e->loc, "%s must be a number > 0", k);
        } else if (norm ? t->clip_value > 0 : t->clip_norm > 0)
            diag_error(E->d, s->loc, "set clip_grad_norm or clip_grad_value, not both");
        else
            *(norm ? &t->clip_norm : &t->clip_value) = v.num;
    } else if (!strcmp(k, "lr_schedule")) {
        if (v.k != V_SCHED) {
            if (v.k != V_ERROR)
                diag_error(E->d, s->e->loc, "expected step_lr(...), exponential_lr(...), cosine_lr(...) or linear_lr(...)");
        } else
            t->sched = *v.sched;
    } else {
        static const char *const keys[] = {"data",   "test",   "batch",   "epochs",  "optimizer", "lr_schedule",
                                           "minimize", "metric", "seed",  "shuffle", "device",    "precision",
                                           "loss_scale", "clip_grad_norm", "clip_grad_value"};
        int bd = 3;
        const char *best = suggest_list(k, keys, NNC_COUNTOF(keys), NULL, &bd);
        diag_error(E->d, s->loc, "unknown setting '%s'%s (data, test, batch, epochs, optimizer, lr_schedule, "
                   "minimize, metric, seed, shuffle, device, precision, loss_scale, clip_grad_norm, clip_grad_value)",
                   k, did_you_mean(E, best));
    }
}

static void read_train(Elab *E, Stmt *prog) {
    TrainConfig *t = &E->m->train;
    t->batch = 1;
    t->epochs = 1;
    t->shuffle = true;
    t->opt.kind = OPT_SGD;
    t->opt.lr = 0.01;
    for (Stmt *s = prog; s; s = s->next) {
        if (s->k != S_TRAIN) continue;
        if (t->present) {
            diag_error(E->d, s->loc, "a model has one train section");
            continue;
        }
        t->present = true;
        t->loc = s->loc;
        for (Stmt *x = s->body; x && !E->over_budget && !diag_stopped(E->d); x = x->next) train_setting(E, t, x);
    }
    t->opt.lr_state = t->sched.kind != SCHED_NONE;
}

/* A parameter (or buffer) that nothing uses is a mistake.  One used only by an output or a metric is
 * allowed, as in PyTorch: it gets no gradient (grad None), so the optimizer skips it and it
 * keeps its initial value. */
static void check_params_used(Elab *E) {
    Graph *g = E->g;
    if (g->loss < 0) return;
    bool *live = xcalloc((size_t)g->n, 1);
    live[g->loss] = true;
    for (int i = 0; i < g->nouts; i++) live[g->outs[i].node] = true;
    for (int i = g->n - 1; i >= 0; i--)
        if (live[i])
            for (int j = 0; j < g->nodes[i].nin; j++) live[g->nodes[i].in[j]] = true;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == OP_PARAM && !live[i])
            diag_error(E->d, g->nodes[i].loc, "%s '%s' is never used (by the loss, an output or a metric)",
                       g->nodes[i].frozen ? "buffer" : "parameter", g->nodes[i].name);
    free(live);
}

static void check_train(Elab *E) {
    TrainConfig *t = &E->m->train;
    if (!t->present) return;
    if (!E->saw_minimize) diag_error(E->d, t->loc, "the train section needs 'minimize LOSS'");
    for (int i = 0; i < E->g->n; i++) {
        Node *n = &E->g->nodes[i];
        if (n->op != OP_INPUT) continue;
        DataBind *d = NULL;
        for (int j = 0; j < t->ndata; j++)
            if (t->data[j].node == i) d = &t->data[j];
        if ((!d || d->train.kind == SRC_NONE) && !E->data_error)
            diag_error(E->d, n->loc, "input '%s' has no training data: add 'data %s = ...' to the train section", n->name, n->name);
    }
}

/* A UTF-8 byte-order mark (some Windows editors write one) marks the encoding and is not part
 * of the text: skip it, as Python and C compilers do.  Messages then quote and count columns
 * from after it. */
static const char *skip_byte_order_mark(Diag *d, const char *src) {
    if (strncmp(src, "\xEF\xBB\xBF", 3)) return src;
    if (d->src == src) d->src = src + 3;
    return src + 3;
}

Model *nn_load_model(Arena *a, Diag *d, const char *path, const char *src, const char *model_name) {
    src = skip_byte_order_mark(d, src);
    Stmt *prog = nn_parse(a, d, path, src);
    if (!prog && d->errors) return NULL;
    Elab E = {.a = a, .d = d};
    E.m = arena_alloc(a, sizeof *E.m);
    E.g = E.m->g = graph_new(a);
    E.g->model_name = model_name ? nn_model_c_name(a, model_name) : NULL;
    E.globals = arena_alloc(a, sizeof *E.globals);
    for (Stmt *s = prog; s; s = s->next)
        if (s->k == S_BLOCK) {
            if (env_find(E.globals, s->name)) diag_error(d, s->loc, "block '%s' is defined twice", s->name);
            env_bind(&E, E.globals, s->name, (Value){.k = V_BLOCK, .block = s}, s->loc);
        }
    exec_stmts(&E, E.globals, NULL, prog, NULL);
    /* past a bound every later expression is an error value, so the train section would only
     * add errors that are not the user's ("needs 'minimize LOSS'", "has no training data") */
    if (!E.over_budget) {
        read_train(&E, prog);
        check_train(&E);
    }
    if (!d->errors) check_params_used(&E);
    if (E.m->train.present) E.g->batch_max = (int)E.m->train.batch;
    if (d->errors) {
        model_free(E.m);
        return NULL;
    }
    return E.m;
}

void model_free(Model *m) {
    if (!m) return;
    free(m->g->nodes);
    free(m->g->outs);
    free(m->train.data);
    m->g->nodes = NULL;
    m->g->outs = NULL;
    m->train.data = NULL;
}
