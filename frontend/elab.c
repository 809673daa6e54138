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
 * run reports every independent mistake.
 *
 * This file holds values, scopes, expressions, calls, declarations and statements; elab_impl.h
 * lists the elaborator's other files (the op readers, torch.nn's builtins, the train section). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "elab_impl.h"

/* Bounds on elaboration.  Blocks nest up to 32 deep and each level may hold expressions up to
 * NN_MAX_EXPR_DEPTH deep, so the recursion is bounded on its own count; and since a block may
 * instantiate others several times, a 1 KB file could otherwise unfold exponentially, so the
 * work (eval steps) and the graph size are bounded too.  The largest shipped model uses a few
 * hundred nodes and steps; these bounds are far above any real model, and keep the passes
 * (some of which are quadratic in the graph size) within seconds. */
#define ELAB_MAX_DEPTH 2000
#define ELAB_MAX_STEPS 1000000L
#define ELAB_MAX_NODES 20000

static bool exec_stmts(Elab *E, Env *env, Inst *inst, Stmt *s, Value *ret);

/* A number folded from constants (1 / 0, log(0), 1e300 * 1e300) that is not finite has no
 * meaning in a model and no spelling in the generated C: an error where it was written. */
Value vfolded(Elab *E, double x, SrcLoc loc, const char *what) {
    if (isfinite(x)) return vnum(x);
    diag_error(E->d, loc, "%s gives %s: constants must be finite", what, isnan(x) ? "NaN" : x > 0 ? "+inf" : "-inf");
    return verror;
}

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

void env_bind(Elab *E, Env *env, const char *name, Value v, SrcLoc loc) {
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

Binding *env_find(Env *env, const char *name) {
    for (; env; env = env->parent) {
        Binding *b = env_find_local(env, name);
        if (b) return b;
    }
    return NULL;
}

const char *kind_name(VKind k) {
    static const char *n[] = {"error",
                              "number",
                              "string",
                              "tensor",
                              "block",
                              "block instance",
                              "device",
                              "data source",
                              "optimizer",
                              "tuple",
                              "learning-rate schedule",
                              "loss scaler",
                              "dtype",
                              "None value",
                              "batch dimension"};
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
const char *closest(const char *name, const char *cand, const char *best, int *best_d) {
    int d = edit_distance(name, cand);
    if (d > 0 && d <= 2 && d < (int)strlen(name) && d < *best_d) {
        *best_d = d;
        return cand;
    }
    return best;
}

const char *suggest_env(const char *name, Env *env, const char *best, int *best_d) {
    for (; env; env = env->parent)
        for (Binding *b = env->head; b; b = b->next) best = closest(name, b->name, best, best_d);
    return best;
}

const char *suggest_list(const char *name, const char *const *list, size_t n, const char *best, int *best_d) {
    for (size_t i = 0; i < n; i++) best = closest(name, list[i], best, best_d);
    return best;
}

/* " (did you mean 'weight'?)" or "" */
const char *did_you_mean(Elab *E, const char *best) {
    return best ? arena_printf(E->a, " (did you mean '%s'?)", best) : "";
}

static const char *const keyword_names[] = {"true", "false", "cpu", "cuda", "bf16", "f16", "f32"};

const char *tstr(Elab *E, int node) {
    char buf[96];
    Node *n = &E->g->nodes[node];
    return arena_strdup(E->a, shape_str(n->shape, n->dtype, E->g->batch_name, buf, sizeof buf));
}

/* ---- builtin tensor operations ------------------------------------------------------------ */

/* A number used where a tensor is needed becomes a scalar constant. */
int as_tensor(Elab *E, Value v, SrcLoc loc) {
    if (v.k == V_TENSOR) return v.node;
    if (v.k == V_NUM) return graph_const(E->g, v.num, loc);
    if (v.k == V_BATCH)
        diag_error(E->d, loc,
                   "expected a tensor, got the batch dimension %s: it is a size known only when the step "
                   "runs, for shapes (reshape(x, %s, -1))",
                   E->g->batch_name, E->g->batch_name);
    else if (v.k != V_ERROR) diag_error(E->d, loc, "expected a tensor, got a %s", kind_name(v.k));
    return -1;
}

bool is_float_dtype(DType t) { return t == DT_F32 || DTYPE_IS_HALF(t); }

/* A floating-point tensor: f32, or a bf16/f16 value made by to(x, bf16). */
bool need_f32(Elab *E, int node, const char *what, SrcLoc loc) {
    if (is_float_dtype(E->g->nodes[node].dtype)) return true;
    diag_error(E->d, loc,
               "%s expects f32, got %s (i32 labels and indices go to cross_entropy, embedding, "
               "gather, scatter, one_hot; they can be sliced and joined)",
               what, tstr(E, node));
    return false;
}

static const char *binop_name(int op) {
    switch (op) {
    case '+': return "add";
    case '-': return "subtract";
    case '*': return "multiply";
    case '/': return "divide";
    case 'f': return "floor-divide";
    case '%': return "take the remainder of";
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
    Op o = op == '+' ? OP_ADD
        : op == '-'  ? OP_SUB
        : op == '*'  ? OP_MUL
        : op == '/'  ? OP_DIV
        : op == 'f'  ? OP_FLOOR_DIVIDE
                     : OP_REMAINDER;
    int r = graph_add2(E->g, o, x, y, loc);
    if (r < 0) {
        diag_error(E->d, loc, "cannot %s %s and %s: shapes do not broadcast", binop_name(op),
                   tstr(E, x), tstr(E, y));
        return verror;
    }
    return vtensor(r);
}

Value matmul(Elab *E, Value a, Value b, SrcLoc loc) {
    int x = as_tensor(E, a, loc), y = as_tensor(E, b, loc);
    if (x < 0 || y < 0) return verror;
    if (!need_f32(E, x, "matmul", loc) || !need_f32(E, y, "matmul", loc)) return verror;
    Shape sa = E->g->nodes[x].shape, sb = E->g->nodes[y].shape, sc;
    if (!matmul_shape(sa, sb, &sc)) {
        if (sa.rank >= 2 && sb.rank >= 2 && dim_is_batch(sa.d[sa.rank - 2]) && dim_is_batch(sb.d[sb.rank - 1]) &&
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

Value powc(Elab *E, Value a, Value b, SrcLoc loc) {
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

/* B * T and T * B: the dimension of the batch axis merged with an axis of T (reshape(x, B * T, V)).
 * B stands for a size that is only known when the step runs, so nothing else computes with it. */
static Value batch_binop(Elab *E, int op, Value a, Value b, SrcLoc loc) {
    Value k = a.k == V_BATCH ? b : a, bt = a.k == V_BATCH ? a : b;
    if (op == '*' && k.k == V_NUM && k.num == floor(k.num) && k.num >= 1 && k.num * bt.num <= 1e12)
        return (Value){.k = V_BATCH, .num = k.num * bt.num};
    const char *name = E->g->batch_name ? E->g->batch_name : "B";
    if (k.k == V_TENSOR) { /* B used as a value: as_tensor says what it is */
        as_tensor(E, bt, loc);
        return verror;
    }
    diag_error(E->d, loc,
               "the batch size %s is known only when the step runs: it can only be multiplied by a positive "
               "integer (%s * T), the size of the batch axis merged with an axis of T",
               name, name);
    return verror;
}

/* The comparison op of an operator ('l' is <=, 'g' >=, 'e' ==, 'n' !=), or -1. */
static int compare_op(int op) {
    switch (op) {
    case '<': return OP_LT;
    case '>': return OP_GT;
    case 'l': return OP_LE;
    case 'g': return OP_GE;
    case 'e': return OP_EQ;
    case 'n': return OP_NE;
    default: return -1;
    }
}

/* a op b for a comparison op: a number for two numbers (1 or 0, as Python's True and False), else
 * an f32 mask of 1 and 0, broadcast.  Labels and indices (i32) may be compared too. */
Value compare(Elab *E, Op op, Value a, Value b, SrcLoc loc) {
    if (a.k == V_NUM && b.k == V_NUM) {
        double x = a.num, y = b.num;
        bool r = op == OP_LT ? x < y
            : op == OP_GT    ? x > y
            : op == OP_LE    ? x <= y
            : op == OP_GE    ? x >= y
            : op == OP_EQ    ? x == y
                             : x != y;
        return vnum(r);
    }
    int x = as_tensor(E, a, loc), y = as_tensor(E, b, loc);
    if (x < 0 || y < 0) return verror;
    int r = graph_add2(E->g, op, x, y, loc);
    if (r < 0) {
        diag_error(E->d, loc, "cannot compare %s and %s: shapes do not broadcast", tstr(E, x), tstr(E, y));
        return verror;
    }
    E->g->nodes[r].dtype = DT_F32;
    return vtensor(r);
}

/* A number folded from two: not finite only where an operand was (-inf * 2 is -inf; 1 / 0 is an
 * error: constants come out of arithmetic finite). */
static Value fold(Elab *E, double r, Value a, Value b, SrcLoc loc, const char *what) {
    if (!isnan(r) && (isinf(a.num) || isinf(b.num))) return vnum(r);
    return vfolded(E, r, loc, what);
}

static Value binop(Elab *E, int op, Value a, Value b, SrcLoc loc) {
    if (a.k == V_ERROR || b.k == V_ERROR) return verror;
    if (a.k == V_BATCH || b.k == V_BATCH) return batch_binop(E, op, a, b, loc);
    if (op == '^') return powc(E, a, b, loc);
    if (op == '@') return matmul(E, a, b, loc);
    if (compare_op(op) >= 0) return compare(E, (Op)compare_op(op), a, b, loc);
    if (a.k == V_NUM && b.k == V_NUM) {
        switch (op) {
        case '+': return fold(E, a.num + b.num, a, b, loc, "this sum");
        case '-': return fold(E, a.num - b.num, a, b, loc, "this difference");
        case '*': return fold(E, a.num * b.num, a, b, loc, "this product");
        case 'f':
        case '%':
            if (b.num == 0) { /* Python's ZeroDivisionError */
                diag_error(E->d, loc, "%s by zero", op == 'f' ? "floor division" : "modulo");
                return verror;
            }
            return fold(E, op == 'f' ? py_floordiv(a.num, b.num) : py_mod(a.num, b.num), a, b, loc,
                        op == 'f' ? "this floor division" : "this remainder");
        default: return fold(E, a.num / b.num, a, b, loc, "this division");
        }
    }
    return tensor_binop(E, op, a, b, loc);
}

Value arith(Elab *E, int op, Value a, Value b, SrcLoc loc) { return binop(E, op, a, b, loc); }

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
    inst->loc = loc;
    Binding *prev = env_find_local(E->instances, scope);
    inst->prev = prev ? prev->v.inst : NULL;
    env_bind(E, E->instances, scope, (Value){.k = V_INST, .inst = inst}, loc);
    inst->env = arena_alloc(E->a, sizeof *inst->env);
    inst->env->parent = E->globals;
    /* self.fc(x), self.weight: the instance's own members, as a torch module's forward names them */
    env_bind(E, inst->env, "self", (Value){.k = V_INST, .inst = inst}, loc);
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

/* torch.X, F.X, nn.functional.X, torch.nn.functional.X, math.X, torch.linalg.X,
 * torch.special.X: Python's module paths to the
 * builtins, as a model copied from PyTorch writes them (torch.cat, F.relu, math.sqrt), when the
 * path's first name is not bound in the model.  X, or NULL. */
static const char *module_member(Env *env, const Expr *e) {
    if (e->k != E_MEMBER) return NULL;
    const char *path[4];
    int n = 0;
    const Expr *b = e->a;
    for (; b->k == E_MEMBER && n < 3; b = b->a) path[n++] = b->str;
    if (b->k != E_IDENT || env_find(env, b->str)) return NULL;
    path[n++] = b->str; /* innermost last: F; functional, nn, torch */
    static const char *const known[][4] = {
        {"torch"},           {"F"}, {"math"}, {"functional", "nn"}, {"functional", "nn", "torch"}, {"linalg", "torch"},
        {"special", "torch"}};
    for (size_t k = 0; k < NNC_COUNTOF(known); k++) {
        int m = 0;
        while (m < 4 && known[k][m]) m++;
        if (m != n) continue;
        bool same = true;
        for (int i = 0; i < n && same; i++) same = !strcmp(known[k][m - 1 - i], path[n - 1 - i]);
        if (same) return e->str;
    }
    return NULL;
}

/* torch.float32 and the other dtypes, torch.inf, math.pi, math.e, math.inf, math.tau. */
static bool module_constant(Env *env, const Expr *e, Value *out) {
    const char *m = module_member(env, e);
    if (!m) return false;
    static const struct {
        const char *name;
        double v;
    } nums[] = {{"pi", M_PI}, {"e", M_E}, {"tau", 2 * M_PI}, {"inf", INFINITY}};
    for (size_t k = 0; k < NNC_COUNTOF(nums); k++)
        if (!strcmp(m, nums[k].name)) return *out = vnum(nums[k].v), true;
    static const struct {
        const char *name;
        DType t;
    } types[] = {{"float32", DT_F32}, {"float", DT_F32}, {"bfloat16", DT_BF16}, {"float16", DT_F16}, {"half", DT_F16}};
    for (size_t k = 0; k < NNC_COUNTOF(types); k++)
        if (!strcmp(m, types[k].name)) return *out = (Value){.k = V_DTYPE, .num = types[k].t}, true;
    return false;
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
    const char *fn = module_member(env, e->a);
    if (fn) return call_builtin(E, fn, &a, e->loc); /* torch.cat(...), F.relu(x), math.sqrt(2) */
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
static Value tuple(Elab *E, Env *env, Expr *e, const char *bind_as) {
    Value t = {.k = V_TUPLE};
    for (Arg *x = e->args; x; x = x->next) t.nitems++;
    t.items = arena_alloc(E->a, (size_t)t.nitems * sizeof *t.items);
    int k = 0;
    for (Arg *x = e->args; x; x = x->next) {
        /* h = [Linear(4, 8), Linear(8, 2)]: instances h.0 and h.1, as nn.ModuleList([...]) */
        t.items[k] = eval_as(E, env, x->e, bind_as ? arena_printf(E->a, "%s.%d", bind_as, k) : NULL);
        if (t.items[k].k == V_ERROR) return verror;
        if (t.items[k].k != V_NUM && t.items[k].k != V_STR && t.items[k].k != V_TENSOR && t.items[k].k != V_BATCH &&
            t.items[k].k != V_INST && t.items[k].k != V_TUPLE) {
            diag_error(E->d, x->e->loc, "a tuple holds numbers (axes, sizes), tensors or block instances, not a %s",
                       kind_name(t.items[k].k));
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
        return transpose(E, "transpose", &a, e->loc);
    }
    if (self.k == V_TENSOR && (!strcmp(e->str, "shape") || !strcmp(e->str, "ndim"))) {
        Args a = {.v = {self}, .loc = {e->loc}, .n = 1};
        return call_builtin(E, e->str[0] == 's' ? "size" : "dim", &a, e->loc);
    }
    diag_error(E->d, e->loc,
               "'.%s': a tensor has .T, .mT, .shape and .ndim; a builtin is called as a method: x.%s(...)", e->str,
               e->str);
    return verror;
}

static Value ident(Elab *E, Env *env, Expr *e) {
    Binding *b = env_find(env, e->str);
    if (b) return b->v;
    if (!strcmp(e->str, "true") || !strcmp(e->str, "True")) return vnum(1); /* Python's spelling too */
    if (!strcmp(e->str, "None")) return (Value){.k = V_NONE};
    if (!strcmp(e->str, "self")) {
        diag_error(E->d, e->loc, "'self' is a block's own instance: it names members inside a block (self.fc(x))");
        return verror;
    }
    if (!strcmp(e->str, "false") || !strcmp(e->str, "False")) return vnum(0);
    if (!strcmp(e->str, "inf")) return vnum(INFINITY); /* float("inf"), math.inf: -inf masks (masked_fill) */
    if (!strcmp(e->str, "cpu")) return (Value){.k = V_DEVICE, .num = DEV_CPU};
    if (!strcmp(e->str, "cuda")) return (Value){.k = V_DEVICE, .num = DEV_CUDA};
    if (!strcmp(e->str, "bf16")) return (Value){.k = V_DTYPE, .num = DT_BF16};
    if (!strcmp(e->str, "f16")) return (Value){.k = V_DTYPE, .num = DT_F16};
    if (!strcmp(e->str, "f32")) return (Value){.k = V_DTYPE, .num = DT_F32};
    if (E->g->batch_name && !strcmp(e->str, E->g->batch_name))   /* reshape(h, B, 8) */
        return (Value){.k = V_BATCH, .num = 1};
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
    case E_TUPLE: return tuple(E, env, e, bind_as);
    case E_INDEX: return eval_index(E, env, e);
    case E_COMP: return eval_comprehension(E, env, e, bind_as);
    case E_SUBSCRIPT: {
        Value a = eval(E, env, e->a);
        if (a.k == V_ERROR) return verror;
        if (a.k != V_TENSOR) {
            diag_error(E->d, e->loc, "a %s takes one index in []; slices and several indices are a tensor's",
                       kind_name(a.k));
            return verror;
        }
        return tensor_subscript(E, env, a.node, e->args, e->loc);
    }
    case E_SLICE:
    case E_ELLIPSIS: /* the grammar puts them inside [] only */
        diag_error(E->d, e->loc, "a slice (':' or '...') is only an index inside []");
        return verror;
    case E_MEMBER: {
        Value c;
        if (module_constant(env, e, &c)) return c;
        Value a = eval(E, env, e->a);
        if (a.k == V_ERROR) return verror;
        if (a.k == V_TENSOR) return tensor_member(E, a, e);
        if (a.k == V_TUPLE && a.str && !strcmp(a.str, "values,indices") &&
            (!strcmp(e->str, "values") || !strcmp(e->str, "indices"))) /* torch.max(x, dim)'s */
            return a.items[e->str[0] == 'i'];
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

Value eval_as(Elab *E, Env *env, Expr *e, const char *bind_as) {
    if (!within_budget(E, e->loc)) return verror;
    E->eval_depth++;
    Value v = eval_bound(E, env, e, bind_as);
    E->eval_depth--;
    return v;
}

Value eval(Elab *E, Env *env, Expr *e) { return eval_as(E, env, e, NULL); }

/* ---- declarations ------------------------------------------------------------------------- */

/* A dimension: a positive integer, or (where allowed) the batch symbol.  The first unbound
 * identifier used as a dimension of an input becomes the batch symbol. */
bool eval_dim(Elab *E, Value v, SrcLoc loc, bool allow_batch, int64_t *out) {
    if (v.k == V_STR && allow_batch && E->g->batch_name && !strcmp(v.str, E->g->batch_name)) {
        *out = DIM_BATCH;
        return true;
    }
    if (v.k == V_BATCH && allow_batch) {
        *out = dim_batch_times((int64_t)v.num);
        return true;
    }
    if (v.k == V_BATCH) {
        diag_error(E->d, loc, "the batch dimension cannot be a dimension here: only inputs have a batch dimension");
        return false;
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
        if (s->rank == IR_IO_RANK) { /* an input's or a parameter's: the model ABI's */
            diag_error(E->d, d->e->loc, "at most %d dimensions (%d inside the model)", IR_IO_RANK, IR_MAX_RANK);
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
        else if (dim_is_batch(s->d[s->rank]) && s->d[s->rank] != DIM_BATCH) {
            diag_error(E->d, d->e->loc, "an input's batch dimension is %s alone (reshape merges it with others)",
                       E->g->batch_name);
            ok = false;
        } else if (s->d[s->rank] == DIM_BATCH && shape_batch_axis(*s) >= 0) {
            diag_error(E->d, d->e->loc, "a tensor can have only one batch dimension");
            ok = false;
        }
        s->rank++;
    }
    /* A shape that claims more than 2^36 elements (256 GiB of f32) per batch row is an error
     * here, not an allocation attempt (and no later size computation can overflow). */
    double total = 1;
    for (int i = 0; ok && i < s->rank; i++) total *= dim_is_batch(s->d[i]) ? 1.0 : (double)s->d[i];
    if (ok && total > 68719476736.0) {
        diag_error(E->d, t->loc, "this tensor would have %.3g elements per batch row; the limit is 2^36", total);
        return false;
    }
    return ok;
}

static const char *scoped(Elab *E, Inst *inst, const char *name) {
    return inst ? arena_printf(E->a, "%s.%s", inst->scope, name) : name;
}

/* The instance that makes a parameter's name a second time: the outermost on the way to the
 * name that is a second instance under its scope ("l" of l.attn.c_attn.weight when l = Block()
 * ran twice), or NULL. */
static Inst *clashing_instance(Elab *E, const char *name) {
    char *buf = arena_strdup(E->a, name);
    for (char *dot = strchr(buf, '.'); dot; dot = strchr(dot + 1, '.')) {
        *dot = 0;
        Binding *b = env_find_local(E->instances, buf);
        *dot = '.';
        if (b && b->v.inst->prev) return b->v.inst;
    }
    return NULL;
}

/* Inputs, parameters and buffers are named once: a checkpoint, the data and the trainer find
 * them by name.  A second instance under one name (l = Block() run twice, in a loop or written
 * twice) is reported once, at its call. */
static bool decl_unique(Elab *E, const char *name, SrcLoc loc) {
    Binding *b = env_find_local(E->declared, name);
    if (!b) {
        env_bind(E, E->declared, name, vnum(0), loc);
        return true;
    }
    Inst *in = clashing_instance(E, name);
    if (in && in->clash_reported) return false;
    if (in) {
        in->clash_reported = true;
        diag_error(E->d, in->loc,
                   "a second instance named '%s': its parameters would have the names of the "
                   "first's ('%s'); give each instance a name of its own, or make a list of them, "
                   "[%s(...) for _ in range(n)]",
                   in->scope, name, in->def->name);
        if (in->prev->loc.line == in->loc.line && in->prev->loc.col == in->loc.col)
            diag_note(E->d, in->prev->loc,
                      "the first was made by this line too, in an earlier pass of a loop or an "
                      "earlier call of a forward()");
        else diag_note(E->d, in->prev->loc, "the first instance named '%s'", in->scope);
    } else {
        diag_error(E->d, loc, "'%s' is declared twice", name);
        diag_note(E->d, b->loc, "the first '%s'", name);
    }
    return false;
}

static void decl_param(Elab *E, Env *env, Inst *inst, Stmt *s) {
    Shape sh;
    DType dt;
    if (!decl_unique(E, scoped(E, inst, s->name), s->loc)) {
        env_bind(E, env, s->name, verror, s->loc);
        return;
    }
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
    if (!decl_unique(E, s->name, s->loc)) return;
    Shape sh;
    DType dt;
    if (!eval_type(E, env, s->type, true, &sh, &dt)) {
        env_bind(E, env, s->name, verror, s->loc);
        return;
    }
    int n = graph_add(E->g, OP_INPUT, 0, NULL, sh, dt, s->loc);
    E->g->nodes[n].name = s->name;
    env_bind(E, env, s->name, vtensor(n), s->loc);
    env_find_local(E->declared, s->name)->v = vtensor(n); /* data x = ... feeds it (elab_train.c) */
}

static void stmt_let(Elab *E, Env *env, Inst *inst, Stmt *s) {
    Binding *old = env_find(env, s->name);
    if (old && old->v.k == V_BLOCK) {
        diag_error(E->d, s->loc, "'%s' is the name of a block", s->name);
        return;
    }
    Value v = eval_as(E, env, s->e, scoped(E, inst, s->name));
    if (v.k == V_TENSOR && !E->g->nodes[v.node].name && E->g->nodes[v.node].op != OP_PARAM)
        E->g->nodes[v.node].name = s->name;
    env_bind(E, env, s->name, v, s->loc);
}

/* a, b, c = e: e is a tuple of as many values (split, chunk, or written out), bound in order, as
 * Python unpacks one.  After an error every name is bound to the error, which silences its uses. */
/* a, b, ... = v (a statement's, or a for's names for each item): v a tuple of as many items. */
static void unpack_into(Elab *E, Env *env, Name *names, Value v, SrcLoc vloc) {
    int n = 0;
    for (Name *p = names; p; p = p->next) n++;
    if (v.k == V_TUPLE && v.nitems != n) {
        diag_error(E->d, vloc, "cannot unpack %d values into %d names", v.nitems, n);
        v = verror;
    } else if (v.k != V_TUPLE && v.k != V_ERROR) {
        diag_error(E->d, vloc, "cannot unpack a %s into %d names: only a tuple unpacks (split, chunk)", kind_name(v.k),
                   n);
        v = verror;
    }
    int k = 0;
    for (Name *p = names; p; p = p->next, k++) {
        Binding *old = env_find(env, p->s);
        Value item = v.k == V_TUPLE ? v.items[k] : verror;
        if (old && old->v.k == V_BLOCK) {
            diag_error(E->d, p->loc, "'%s' is the name of a block", p->s);
            continue;
        }
        if (item.k == V_TENSOR && !E->g->nodes[item.node].name && E->g->nodes[item.node].op != OP_PARAM)
            E->g->nodes[item.node].name = p->s;
        env_bind(E, env, p->s, item, p->loc);
    }
}

static void stmt_unpack(Elab *E, Env *env, Stmt *s) {
    unpack_into(E, env, s->params, eval_as(E, env, s->e, NULL), s->e->loc);
}

/* Outputs are returned by pointer into the entry's memory.  An f32 input (or a view of one)
 * or an inline scalar (a constant) has no buffer there, so such an output is copied by an
 * identity node. */
int owned_output(Elab *E, int x, SrcLoc loc) {
    int r = x;
    while (E->g->nodes[r].op == OP_RESHAPE) r = E->g->nodes[r].in[0];
    Op op = E->g->nodes[r].op;
    if ((op != OP_INPUT && !op_has(op, OPF_INLINE)) || E->g->nodes[x].dtype != DT_F32) return x;
    int in[1] = {x};
    return graph_add(E->g, OP_EXPAND, 1, in, E->g->nodes[x].shape, DT_F32, loc);
}

/* for name in e { body }: the body once per item of e, name bound to the item in the enclosing
 * scope, as Python's for (it has no scope of its own: what the body binds is seen after it).
 * True when the body returned (in a forward). */
static bool stmt_for(Elab *E, Env *env, Inst *inst, Stmt *s, Value *ret) {
    Value v = eval(E, env, s->e);
    if (!list_walkable(E, v, s->e->loc)) {
        for (Name *p = s->params; p; p = p->next) env_bind(E, env, p->s, verror, p->loc);
        return false;
    }
    int errors = E->d->errors;
    bool returned = false;
    E->loop_depth++;
    for (int k = 0; k < v.nitems && E->d->errors == errors && !returned; k++) { /* an error once, not per item */
        if (s->params->next) unpack_into(E, env, s->params, v.items[k], s->e->loc); /* for i, b in enumerate(h) */
        else env_bind(E, env, s->name, v.items[k], s->params->loc);
        returned = exec_stmts(E, env, inst, s->body, ret);
    }
    E->loop_depth--;
    return returned;
}

/* target = e with target a block instance's member and e a parameter: weight tying, as PyTorch
 * writes `self.transformer.wte.weight = self.lm_head.weight`.  From here on both names are one
 * parameter, which keeps the name made first (the one torch's named_parameters() gives, and
 * the one the checkpoint holds) and the initializer of the value assigned.  The other must not
 * have been used yet; it becomes a view of the one kept, so that no name can reach a parameter
 * of its own again. */
static void stmt_tie(Elab *E, Env *env, Stmt *s) {
    Expr *t = s->target;
    Value base = eval(E, env, t->a), v = eval(E, env, s->e);
    if (base.k == V_ERROR || v.k == V_ERROR) return;
    if (base.k != V_INST) {
        diag_error(E->d, t->loc,
                   "'.%s = ...': a %s has no members to assign; a member of a block instance is tied to "
                   "a parameter (transformer.wte.weight = lm_head.weight)",
                   t->str, kind_name(base.k));
        return;
    }
    Binding *m = env_find_local(base.inst->env, t->str);
    if (!m) {
        diag_error(E->d, t->loc, "block instance '%s' has no member '%s'", base.inst->scope, t->str);
        return;
    }
    Graph *g = E->g;
    if (m->v.k != V_TENSOR || g->nodes[m->v.node].op != OP_PARAM || g->nodes[m->v.node].frozen) {
        diag_error(E->d, t->loc, "'%s.%s' is not a parameter: only a parameter is tied to another", base.inst->scope,
                   t->str);
        return;
    }
    if (v.k != V_TENSOR || g->nodes[v.node].op != OP_PARAM || g->nodes[v.node].frozen) {
        const Node *n = v.k == V_TENSOR ? &g->nodes[v.node] : NULL;
        diag_error(E->d, s->e->loc, "'%s.%s' is tied to a parameter (as lm_head.weight), not to %s", base.inst->scope,
                   t->str,
                   !n                      ? kind_name(v.k)
                       : n->op == OP_PARAM ? "a buffer"
                       : n->op == OP_INPUT ? "an input"
                                           : "a computed tensor");
        return;
    }
    const int a = m->v.node, b = v.node;
    if (a == b) return; /* tied already */
    char sa[128], sb[128];
    if (!shape_eq(g->nodes[a].shape, g->nodes[b].shape) || g->nodes[a].dtype != g->nodes[b].dtype) {
        diag_error(E->d, s->e->loc, "cannot tie '%s' %s to '%s' %s: the shapes differ", g->nodes[a].name,
                   shape_str(g->nodes[a].shape, g->nodes[a].dtype, g->batch_name, sa, sizeof sa), g->nodes[b].name,
                   shape_str(g->nodes[b].shape, g->nodes[b].dtype, g->batch_name, sb, sizeof sb));
        return;
    }
    const int keep = a < b ? a : b, drop = a < b ? b : a;
    for (int i = drop + 1; i < g->n; i++)
        for (int j = 0; j < g->nodes[i].nin; j++)
            if (g->nodes[i].in[j] == drop) {
                diag_error(E->d, s->loc,
                           "'%s' is used before this tie (line %d, column %d): tie parameters before their first use",
                           g->nodes[drop].name, g->nodes[i].loc.line, g->nodes[i].loc.col);
                return;
            }
    g->nodes[keep].attr.init = g->nodes[b].attr.init; /* the value assigned */
    if (drop == b && s->e->k == E_MEMBER) { /* the value's own name reaches the one kept too */
        Value owner = eval(E, env, s->e->a);
        Binding *o = owner.k == V_INST ? env_find_local(owner.inst->env, s->e->str) : NULL;
        if (o && o->v.k == V_TENSOR && o->v.node == drop) o->v = vtensor(keep);
    }
    Node *d = &g->nodes[drop];
    d->op = OP_RESHAPE; /* keeps its name: --emit ir shows `%52 = reshape %0 ... "lm_head.weight"` */
    d->nin = 1;
    d->in[0] = keep;
    m->v = vtensor(keep);
}

/* Runs statements; true when one was a return (ret holds its value). */
static bool exec_stmts(Elab *E, Env *env, Inst *inst, Stmt *s, Value *ret) {
    for (; s && !E->over_budget && !diag_stopped(E->d); s = s->next) {
        switch (s->k) {
        case S_INPUT: decl_input(E, env, inst, s); break;
        case S_PARAM: case S_BUFFER: decl_param(E, env, inst, s); break;
        case S_LET: stmt_let(E, env, inst, s); break;
        case S_UNPACK: stmt_unpack(E, env, s); break;
        case S_TIE:
            if (inst && s->target->a->k == E_IDENT && !strcmp(s->target->a->str, "self")) {
                Stmt let = *s; /* self.fc = Linear(4, 2): a torch module's __init__ naming its member */
                let.k = S_LET, let.name = s->target->str, let.loc = s->target->loc;
                stmt_let(E, env, inst, &let);
            } else stmt_tie(E, env, s);
            break;
        case S_FOR:
            if (stmt_for(E, env, inst, s, ret)) return true;
            break;
        case S_RETURN:
            if (!ret) {
                diag_error(E->d, s->loc, "'return' belongs inside forward()");
                break;
            }
            *ret = eval(E, env, s->e);
            return true;
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
            if (x >= 0 && E->g->nodes[x].shape.rank > IR_IO_RANK) { /* the model ABI's descriptors */
                diag_error(E->d, s->loc, "an output has at most %d dimensions, %s has %d: reshape it first", IR_IO_RANK,
                           tstr(E, x), E->g->nodes[x].shape.rank);
                x = -1;
            }
            if (x >= 0) graph_add_out(E->g, s->name, owned_output(E, x, s->loc));
            if (s->e && v.k != V_ERROR) env_bind(E, env, s->name, v, s->loc);
            break;
        }
        case S_TRAIN: /* read after the model body (read_train), from the top level's statements */
            if (inst || ret || E->loop_depth) diag_error(E->d, s->loc, "the train section is written at the top level");
            break;
        case S_SETTING: break;
        }
    }
    return false;
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
    E.declared = arena_alloc(a, sizeof *E.declared);
    E.instances = arena_alloc(a, sizeof *E.instances);
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
