/* elab_impl.h - what the elaborator's files share; nothing outside frontend/ includes it.
 *
 *   elab.c         values, scopes, expressions, calls, declarations, statements; nn_load_model
 *   elab_args.c    how a builtin reads its arguments (binding, numbers, axes, range checks)
 *   elab_ops.c     the op readers (ops.def's surfaces and the compositions) and call_builtin
 *   elab_nn.c      torch.nn's layers (convolution, pooling, normalization, ...) and initializers
 *   elab_train.c   the train section, read by the rows of train_tables.c
 *   elab_list.c    lists: repeated layers ([Block(...) for _ in range(n)]), h[i], range(), len(),
 *                  enumerate(), zip()
 *   elab_short.c   torch functions that are a line or two of other builtins (x.bool(), diff, ...)
 *
 * The sections below are named after the file that defines them. */
#ifndef NNC_ELAB_IMPL_H
#define NNC_ELAB_IMPL_H
#include "ast.h"
#include "frontend.h"

typedef enum {
    V_ERROR,
    V_NUM,
    V_STR,
    V_TENSOR,
    V_BLOCK,
    V_INST,
    V_DEVICE,
    V_SOURCE,
    V_OPTIM,
    V_TUPLE,
    V_SCHED,
    V_SCALER,
    V_DTYPE,
    V_NONE, /* Python's None: an argument left at its default (rounding_mode = None) */
    V_BATCH /* the batch symbol times num: B (num 1), or B * T, a dimension of a merged batch axis */
} VKind;

typedef struct Env Env;
typedef struct Inst {
    Stmt *def;
    const char *scope; /* "fc1", "enc.fc1", "h.0" */
    SrcLoc loc; /* the call that made it */
    struct Inst *prev; /* an earlier instance of the same scope (its parameters' names would clash) */
    bool clash_reported;
    Env *env;
    Stmt *forward;
    int first, end; /* the nodes its instantiation made (its parameters) */
    bool placed; /* .to(device) / to(inst, device): parameters and forward there */
    Device dev;
} Inst;

typedef struct Value {
    VKind k;
    double num;
    const char *str;
    int node;
    Stmt *block;
    Inst *inst;
    union { /* V_SOURCE, V_OPTIM, V_SCHED, V_SCALER: what the call read */
        DataSource *src;
        OptConfig *opt;
        SchedConfig *sched;
        ScalerConfig *scaler;
        void *cfg;
    };
    struct Value *items; /* V_TUPLE: (0, 2) or [0, 2] */
    int nitems;
} Value;

typedef struct Binding {
    const char *name;
    Value v;
    SrcLoc loc;
    struct Binding *next;
    struct Binding *hnext; /* the next binding in the same hash bucket */
} Binding;

/* A scope: its bindings newest first (shadowing: the newest wins), plus a hash index once it
 * holds more than a few, so that a model of N statements elaborates in O(N), not O(N^2). */
struct Env {
    Binding *head;
    Env *parent;
    Binding **bucket; /* NULL while small */
    int nbucket, count;
};

typedef struct Elab {
    Arena *a;
    Diag *d;
    Graph *g;
    Model *m;
    Env *globals;
    Env *declared; /* the full names of inputs (bound to their node), parameters and buffers: each once */
    Env *instances; /* the instances made so far, by scope (a second one under a name clashes) */
    int in_train; /* data sources and optimizers may be called */
    int depth; /* recursion guard for blocks that call themselves */
    int loop_depth; /* for statements being run */
    bool saw_minimize; /* a 'minimize' was written, even if it failed its checks */
    int eval_depth; /* eval() calls in progress (bounded: ELAB_MAX_DEPTH) */
    long steps; /* eval() calls so far (bounded: ELAB_MAX_STEPS) */
    bool over_budget; /* a bound was hit and reported: elaboration winds down */
    bool data_error; /* a data source failed (reported): no "input has no data" */
} Elab;

typedef struct Args {
    Value v[8];
    SrcLoc loc[8];
    const char *kw[8];
    int n;
} Args;

static const Value verror = {.k = V_ERROR};

static inline Value vnum(double x) { return (Value){.k = V_NUM, .num = x}; }
static inline Value vtensor(int node) { return (Value){.k = V_TENSOR, .node = node}; }

/* A list (range(), a comprehension) holds at most this many items: counts are written by hand,
 * and this keeps a typo (range(1e9)) a located error, not an allocation. */
#define NN_MAX_ITEMS 10000

/* ---- elab.c ---- */
Value eval(Elab *E, Env *env, Expr *e);
/* eval, a block call bound to the instance name bind_as (h = Block(...) makes "h") */
Value eval_as(Elab *E, Env *env, Expr *e, const char *bind_as);
Value vfolded(Elab *E, double x, SrcLoc loc, const char *what);
void env_bind(Elab *E, Env *env, const char *name, Value v, SrcLoc loc);
Binding *env_find(Env *env, const char *name);
const char *kind_name(VKind k);
const char *closest(const char *name, const char *cand, const char *best, int *best_d);
const char *suggest_env(const char *name, Env *env, const char *best, int *best_d);
const char *suggest_list(const char *name, const char *const *list, size_t n, const char *best, int *best_d);
const char *did_you_mean(Elab *E, const char *best);
const char *tstr(Elab *E, int node);
int as_tensor(Elab *E, Value v, SrcLoc loc);
bool is_float_dtype(DType t);
bool need_f32(Elab *E, int node, const char *what, SrcLoc loc);
Value matmul(Elab *E, Value a, Value b, SrcLoc loc);
/* a op b as the operators compute it, numbers folded: '+' '-' '*' '/' '@' '^' (**) 'f' (//) '%' */
Value arith(Elab *E, int op, Value a, Value b, SrcLoc loc);
Value powc(Elab *E, Value a, Value b, SrcLoc loc);
Value compare(Elab *E, Op op, Value a, Value b, SrcLoc loc);
bool eval_dim(Elab *E, Value v, SrcLoc loc, bool allow_batch, int64_t *out);
int owned_output(Elab *E, int x, SrcLoc loc);

/* ---- elab_args.c ---- */
bool eval_args(Elab *E, Env *env, Arg *args, Args *out, SrcLoc loc);
Args args_without(const Args *a, int k);
bool bind_args(Elab *E, const char *fn, Args *a, const char *const *names, int nnames, int *idx, int required,
               SrcLoc loc);
double num_arg(Elab *E, Args *a, int i, double dflt, bool *ok); /* finite */
double num_or_inf_arg(Elab *E, Args *a, int i, double dflt, bool *ok); /* +-inf too */
SrcLoc arg_loc(Args *a, int i, SrcLoc call);
bool check_range(Elab *E, const char *fn, const char *name, double x, double lo, bool lo_open, double hi, bool hi_open,
                 SrcLoc loc);
bool check_count(Elab *E, const char *fn, const char *name, double x, double hi, SrcLoc loc);
bool check_finite(Elab *E, const char *fn, const char *name, double x, SrcLoc loc);
int tensor_arg(Elab *E, Args *a, int i);
int64_t axis_bit(Elab *E, Value v, SrcLoc loc, int rank, bool *ok);
int64_t axes_arg(Elab *E, Args *a, int i, int rank, bool *ok);
/* The values after a call's first (its tensor), one by one or as one tuple: view(x, B, 4) or
 * view(x, (B, 4)), permute and expand alike; how many, *v the first. */
int rest_values(Args *a, Value **v);

/* ---- elab_ops.c ---- */
int reduce_node(Elab *E, Op op, int x, int64_t mask, bool keep, SrcLoc loc);
int reshape_node(Elab *E, int x, Shape s, SrcLoc loc);
Value transpose(Elab *E, const char *fn, Args *a, SrcLoc loc);
int permute_node(Elab *E, int x, const int8_t *perm, SrcLoc loc);
int row_op_along(Elab *E, Op op, int x, int d, SrcLoc loc); /* a row op over axis d */
void axis_last_perms(int d, int r, int8_t *there, int8_t *back); /* axis d last, and back */
Value place_instance(Elab *E, Inst *inst, Value dev, SrcLoc loc);
Value to_device(Elab *E, Args *a, SrcLoc loc);
Value call_builtin(Elab *E, const char *fn, Args *a, SrcLoc loc);
/* x[items]: each an index (its axis dropped), an E_SLICE or one E_ELLIPSIS, as Python's and torch's */
bool is_none_index(const Expr *e);
int slice_node(Elab *E, int x, int ax, int64_t start, int64_t len, int64_t step, SrcLoc loc);
int as_real(Elab *E, int x, SrcLoc loc);
/* Sizes a and b as one axis (the batch axis's stays marked: B * k). */
static inline int64_t merge_dim(int64_t a, int64_t b) {
    int64_t k = dim_size(a, 1) * dim_size(b, 1);
    return dim_is_batch(a) || dim_is_batch(b) ? dim_batch_times(k) : k;
}
int as_i32(Elab *E, int x, SrcLoc loc);
Value tensor_subscript(Elab *E, Env *env, int x, Arg *items, SrcLoc loc);

/* ---- elab_nn.c ---- */
Value read_conv2d(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc);
Value read_pool2d(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc);
Value read_embedding(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc);
Value read_dropout(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_sdpa(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc);
Value read_batch_norm(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_layer_norm(Elab *E, const char *fn, Args *a, SrcLoc loc);
void mark_norm_params(Graph *g, int w, int b); /* what no_decay = [norm] spares */
Value read_adaptive_avg_pool2d(Elab *E, const char *fn, Args *a, SrcLoc loc);
bool eval_init(Elab *E, Env *env, Node *p, Expr *e);

/* ---- elab_torch.c ---- */
Value read_unsqueeze(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_squeeze(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_pointwise_loss(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_bce_logits(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_nll_loss(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_rms_norm(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_var(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_amax(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_linear(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_like(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_clone(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_matrix_fn(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_expand(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_size(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_norm(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_group_norm(Elab *E, const char *fn, Args *a, SrcLoc loc);
bool take_normalized_shape(Elab *E, const char *fn, Args *a, int *k); /* torch's argument, taken out */
Value read_dtype_method(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_argmax(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc);
Value read_argmin(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_max_dim(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_topk(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_enumerate(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_zip(Elab *E, const char *fn, Args *a, SrcLoc loc);
/* elab_short.c */
Value read_bool(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_new(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_unflatten(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_clamp_one(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_addmm(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_diff(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_var_mean(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_shrink(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_movedim(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_select(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_all_any(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_tensor_of(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_alias(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_random(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_scatter(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_arith(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_number(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_einsum(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_cumsum(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_gather(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_1d(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_repeat_interleave(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_interpolate(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_cosine_similarity(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_pairwise_distance(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_margin_loss(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_instance_norm(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_logaddexp(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_as(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_softmin(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_glu(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_prelu(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_lerp(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_addcmul(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_kl_div(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_bce(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_one_hot(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_smooth_l1(Elab *E, const char *fn, Args *a, SrcLoc loc);

/* ---- elab_list.c ---- */
bool list_walkable(Elab *E, Value v, SrcLoc loc);
Value eval_comprehension(Elab *E, Env *env, Expr *e, const char *bind_as);
Value eval_index(Elab *E, Env *env, Expr *e);
Value read_range(Elab *E, const char *fn, Args *a, SrcLoc loc);
Value read_len(Elab *E, const char *fn, Args *a, SrcLoc loc);

/* ---- elab_train.c ---- */
/* A builtin only the train section may call (train_tables.c): true when fn is one, with its
 * value (or V_ERROR, reported) in *out; and the closest of their names to fn. */
bool train_builtin(Elab *E, const char *fn, Args *a, SrcLoc loc, Value *out);
bool train_builtin_known(const char *fn); /* a function only the train section takes */
const char *train_builtin_suggest(const char *fn, const char *best, int *best_d);
void read_train(Elab *E, Stmt *prog);
void check_train(Elab *E);
void check_params_used(Elab *E);
#endif
