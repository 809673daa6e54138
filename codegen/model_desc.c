/* model_desc.c - the description of a compiled model (nnc_model_desc, include/nnc_runtime.h),
 * built once from a planned Program.
 *
 * Everything the host side of a model needs to know, as data: the ABI's tensor tables (inputs,
 * parameters, state, each entry's outputs with their names and roles; what an i32 input's
 * values must be, from what reads them), where every parameter, state and
 * output lives (block and byte offset), each parameter's initializer, the size of every memory
 * block, which inputs each entry reads, and whether it advances the step.  The runtime
 * (nnc_runtime.h) implements nnc_model_abi over it; the C backend prints it as initializers
 * (codegen/cpu/render_c_model.c) and the CUDA backend uses it as built.  So each of these
 * facts is computed here and nowhere else:
 *   - output names: "loss", "grad.<param>", eval's named outputs by position;
 *   - parameter and state offsets (the plan's, the same in every entry);
 *   - block sizes: the activation block is the largest any entry needs, per device.
 * Everything lives in the caller's arena. */
#include <stdlib.h>
#include <string.h>

#include "codegen.h"

_Static_assert(NNC_INIT_ZEROS == (int)INIT_ZEROS && NNC_INIT_ONES == (int)INIT_ONES &&
               NNC_INIT_CONSTANT == (int)INIT_CONSTANT && NNC_INIT_UNIFORM == (int)INIT_UNIFORM &&
               NNC_INIT_NORMAL == (int)INIT_NORMAL, "the runtime's initializer numbers are the IR's");
_Static_assert(NNC_ENTRY_TRAIN == (int)ENTRY_TRAIN && NNC_ENTRY_GRAD == (int)ENTRY_GRAD &&
                   NNC_ENTRY_EVAL == (int)ENTRY_EVAL && NNC_ENTRY_ACCUM == (int)ENTRY_ACCUM &&
                   NNC_ENTRY_COUNT == (int)ENTRY_COUNT,
               "the ABI's entry numbers are the schedule's");

typedef struct {
    const Program *p;
    size_t rb;                  /* bytes per real */
    Arena *a;
    nnc_model_desc *d;
} Build;

static nnc_tensor_info info_of(const Build *b, const char *name, const Node *n) {
    int type = n->dtype == DT_I32 ? NNC_TYPE_I32
        : n->dtype == DT_BF16     ? NNC_TYPE_BF16
        : n->dtype == DT_F16      ? NNC_TYPE_F16
        : b->rb == 8              ? NNC_TYPE_F64
                                  : NNC_TYPE_F32;
    nnc_tensor_info t = {name, type, n->shape.rank, {0}, NNC_ROLE_NONE};
    _Static_assert(IR_IO_RANK == sizeof t.dims / sizeof t.dims[0], "the ABI's dims hold IR_IO_RANK axes");
    if (n->shape.rank <= IR_IO_RANK) {
        for (int i = 0; i < n->shape.rank; i++) t.dims[i] = n->shape.d[i];
        return t;
    }
    /* a value of more axes (--check-against keeps every launch's): the same elements as the axes
     * before the batch axis merged into one, and those after it into another */
    int ax = -1;
    for (int i = 0; i < n->shape.rank; i++)
        if (dim_is_batch(n->shape.d[i])) ax = i;
    int64_t before = 1, after = 1;
    for (int i = 0; i < n->shape.rank; i++)
        if (i < ax) before *= n->shape.d[i];
        else if (i > ax) after *= n->shape.d[i];
    t.rank = 0;
    if (ax > 0) t.dims[t.rank++] = before;
    if (ax >= 0) t.dims[t.rank++] = n->shape.d[ax];
    t.dims[t.rank++] = after;
    return t;
}

/* The name output k of entry e goes by.  Eval lists the loss, then every named output in order
 * (passes/select.c): by position, so that 'output r = cross_entropy(...)' used as the loss is
 * still found as "r". */
static const char *output_name(const Build *b, const Entry *e, int k) {
    const Graph *g = b->p->g;
    int node = e->outputs[k];
    if (node == g->loss && k == 0) return "loss";
    if (node == g->grad_norm && e->kind == ENTRY_TRAIN) return "grad_norm";
    if (e->kind == ENTRY_EVAL && k - (g->loss >= 0) < g->nouts) return g->outs[k - (g->loss >= 0)].name;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == OP_PARAM && g->nodes[i].grad == node) return arena_printf(b->a, "grad.%s", g->nodes[i].name);
    return "?";
}

/* The role of output k of entry e (include/nnc_abi.h): a metric counts when accuracy makes it. */
static int output_role(const Build *b, const Entry *e, int k) {
    const Graph *g = b->p->g;
    int node = e->outputs[k];
    if (node == g->loss && k == 0) return NNC_ROLE_LOSS;
    if (node == g->grad_norm && e->kind == ENTRY_TRAIN) return NNC_ROLE_GRAD_NORM;
    if (e->kind == ENTRY_GRAD) return NNC_ROLE_GRAD;
    if (e->kind != ENTRY_EVAL || k - (g->loss >= 0) >= g->nouts) return NNC_ROLE_NONE;
    const Node *n = &g->nodes[node];
    while (n->op == OP_COPY) n = &g->nodes[n->in[0]];
    if (n->op == OP_ACCURACY) return NNC_ROLE_COUNT;
    return shape_numel(n->shape, 1) == 1 && shape_batch_axis(n->shape) < 0 ? NNC_ROLE_MEAN : NNC_ROLE_OUTPUT;
}

/* The role of a state: the scheduled rate, a gradient sum (an accumulate entry's write, which
 * accumulate.c puts in the backward phase), or the optimizer's own. */
static int state_role(const Graph *g, int s) {
    if (!strcmp(g->nodes[s].name, "lr")) return NNC_ROLE_LR;
    for (int i = s + 1; i < g->n; i++)
        if (g->nodes[i].op == OP_ASSIGN && g->nodes[i].in[0] == s && g->nodes[i].phase == PH_BACKWARD)
            return NNC_ROLE_GRAD_SUM;
    return NNC_ROLE_NONE;
}

/* Where node x's value is after a call of entry e.  On a device target, an activation the
 * schedule keeps on the host (a value copied back, such as the loss) is in the host block. */
static nnc_place place_of(const Build *b, const Entry *e, int x) {
    while (e->buf[x].kind == BUF_ALIAS) x = e->buf[x].alias;
    const Buffer *u = &e->buf[x];
    int64_t at = u->offset * (int64_t)b->rb;
    switch (u->kind) {
    case BUF_PARAM: return (nnc_place){NNC_BLOCK_PARAMS, at};
    case BUF_STATE: return (nnc_place){NNC_BLOCK_STATE, at};
    case BUF_ACT:   /* several GPUs: their activation blocks one after another */
        if (DEV_IS_GPU(u->dev)) at += program_act_base(b->p, u->dev) * (int64_t)b->rb;
        return (nnc_place){b->p->target != DEV_CPU && u->dev == DEV_CPU ? NNC_BLOCK_HOST : NNC_BLOCK_ACT, at};
    case BUF_NONE: case BUF_INLINE: case BUF_INPUT: case BUF_ALIAS: break;   /* no memory of the model's */
    }
    return (nnc_place){NNC_BLOCK_NONE, 0};
}

static int count_op(const Graph *g, Op op) {
    int n = 0;
    for (int i = 0; i < g->n; i++) n += g->nodes[i].op == op;
    return n;
}

/* Inputs, parameters and state in graph order, which is the order run() takes inputs in. */
static void build_leaves(Build *b) {
    const Graph *g = b->p->g;
    const Entry *ev = &b->p->entry[ENTRY_EVAL];   /* leaves sit at the same offsets in every entry */
    nnc_model_abi *A = &b->d->abi;
    A->ninputs = count_op(g, OP_INPUT);
    A->nparams = count_op(g, OP_PARAM);
    A->nstates = count_op(g, OP_STATE);
    nnc_tensor_info *in = arena_alloc(b->a, (size_t)(A->ninputs + 1) * sizeof *in);
    nnc_tensor_info *pa = arena_alloc(b->a, (size_t)(A->nparams + 1) * sizeof *pa);
    nnc_tensor_info *st = arena_alloc(b->a, (size_t)(A->nstates + 1) * sizeof *st);
    nnc_leaf_desc *pl = arena_alloc(b->a, (size_t)(A->nparams + 1) * sizeof *pl);
    nnc_leaf_desc *sl = arena_alloc(b->a, (size_t)(A->nstates + 1) * sizeof *sl);
    int ni = 0, np = 0, ns = 0;
    for (int i = 0; i < g->n; i++) {
        const Node *n = &g->nodes[i];
        int64_t at = ev->buf[i].offset * (int64_t)b->rb;
        if (n->op == OP_INPUT) in[ni++] = info_of(b, n->name, n);
        if (n->op == OP_PARAM) {
            pl[np] = (nnc_leaf_desc){at, (int)n->attr.init.kind, n->attr.init.a, n->attr.init.b};
            pa[np++] = info_of(b, n->name, n);
        }
        if (n->op == OP_STATE) {
            sl[ns] = (nnc_leaf_desc){at, (int)n->attr.init.kind, n->attr.init.a, n->attr.init.b};
            st[ns] = info_of(b, n->name, n);
            st[ns++].role = state_role(g, i);
        }
    }
    A->inputs = in;
    A->params = pa;
    A->states = st;
    b->d->param = pl;
    b->d->state = sl;
}

/* ---- what an i32 input's values must be (nnc_input_rule) ------------------------------------
 * Under `bound`, the smallest over its readers (cross_entropy's and accuracy's labels index the
 * logits' last axis, embedding's indices the table's rows, an INDEX_EQ's the places it is compared
 * with, gather's and scatter's (OPF_PICKS) their rows' places), or equal to the ignore_index of every cross_entropy (and nll_loss) reading it, when no
 * embedding or other index does.  The values reach a reader through views, copies, moves and
 * casts (carries_values): all of them are checked, where torch checks those a reader uses. */

static void input_rule_add(Build *b, nnc_input_rule *r, bool *mixed, const Node *x, int64_t k) {
    if (k > 0 && (r->bound == 0 || k < r->bound)) {
        r->bound = k;
        r->reader = x->op == OP_EMBEDDING                      ? "embedding"
            : x->op == OP_ACCURACY                             ? "accuracy"
            : x->op == OP_INDEX_EQ || op_has(x->op, OPF_PICKS) ? "index"
                                                               : "cross_entropy";
        r->at = arena_printf(b->a, "%s:%d:%d", x->loc.file ? x->loc.file : "the model", x->loc.line, x->loc.col);
    }
    bool idx_ignore = x->op == OP_GATHER_ROWS && x->attr.scalars.p[0] != 0; /* nll_loss's target */
    if (x->op != OP_CROSS_ENTROPY && x->op != OP_CE_GRAD && !idx_ignore) return;
    int32_t ii = (int32_t)x->attr.scalars.p[idx_ignore ? 1 : 0];
    if (!*mixed && !r->has_ignore) r->has_ignore = 1, r->ignore = ii; /* the first cross_entropy */
    else if (r->ignore != ii) *mixed = true, r->has_ignore = 0;
}

/* Whether x passes an operand's values on unchanged (some of them, in another place): a view, a
 * copy, a move (permute, slice, concat: gather's index moved to the last axis, an index sliced or
 * joined), or a cast (an i32 index passes the helpers that cut and join as a real, exactly). */
static bool carries_values(const Node *x, const bool *carries) {
    static const Op one[] = {OP_RESHAPE, OP_COPY, OP_DETACH, OP_EXPAND, OP_TRANSPOSE, OP_PERMUTE, OP_SLICE, OP_CAST};
    for (size_t k = 0; k < NNC_COUNTOF(one); k++)
        if (x->op == one[k]) return carries[x->in[0]];
    for (int j = 0; x->op == OP_CONCAT && j < x->nin; j++)
        if (carries[x->in[j]]) return true;
    return false;
}

static nnc_input_rule input_rule(Build *b, int input) {
    const Graph *g = b->p->g;
    bool *carries = xcalloc((size_t)g->n + 1, sizeof *carries), mixed = false, embedded = false;
    carries[input] = true;
    for (bool more = true; more;) { /* passes may append a copy after its readers */
        more = false;
        for (int i = 0; i < g->n; i++) {
            const Node *x = &g->nodes[i];
            if (!carries[i] && carries_values(x, carries)) carries[i] = more = true;
        }
    }
    nnc_input_rule r = {0};
    for (int i = 0; i < g->n; i++) {
        const Node *x = &g->nodes[i];
        if (op_has(x->op, OPF_LABELS) && carries[x->in[1]]) {
            Shape l = g->nodes[x->in[0]].shape;
            input_rule_add(b, &r, &mixed, x, l.rank ? l.d[l.rank - 1] : 0);
        } else if (x->op == OP_EMBEDDING && carries[x->in[0]]) {
            embedded = true;
            input_rule_add(b, &r, &mixed, x, g->nodes[x->in[1]].shape.d[0]);
        } else if (x->op == OP_INDEX_EQ && carries[x->in[0]]) { /* one_hot's index, against arange(C) */
            Shape c = g->nodes[x->in[1]].shape;
            embedded = true; /* no value to skip */
            input_rule_add(b, &r, &mixed, x, c.rank ? c.d[c.rank - 1] : 0);
        } else if (op_has(x->op, OPF_PICKS) && carries[x->in[1]]) { /* gather's, scatter's places */
            Shape c = g->nodes[x->in[0]].shape;
            embedded |= x->op != OP_GATHER_ROWS || x->attr.scalars.p[0] == 0;
            input_rule_add(b, &r, &mixed, x, c.rank ? c.d[c.rank - 1] : 0);
        }
    }
    if (embedded) r.has_ignore = 0;
    free(carries);
    return r;
}

static void build_input_rules(Build *b) {
    const Graph *g = b->p->g;
    nnc_model_abi *A = &b->d->abi;
    nnc_input_rule *rules = arena_alloc(b->a, (size_t)(A->ninputs + 1) * sizeof *rules);
    for (int i = 0, k = 0; i < g->n; i++)
        if (g->nodes[i].op == OP_INPUT) rules[k++] = input_rule(b, i);
    A->input_rules = rules;
    A->batch_name = g->batch_name ? g->batch_name : "B";
}

static void build_entry(Build *b, int k) {
    const Entry *e = &b->p->entry[k];
    const Graph *g = b->p->g;
    nnc_entry_desc *E = &b->d->entry[k];
    nnc_tensor_info *out = arena_alloc(b->a, (size_t)(e->noutputs + 1) * sizeof *out);
    nnc_place *at = arena_alloc(b->a, (size_t)(e->noutputs + 1) * sizeof *at);
    unsigned char *reads = arena_alloc(b->a, (size_t)b->d->abi.ninputs + 1);
    for (int j = 0; j < e->noutputs; j++) {
        out[j] = info_of(b, output_name(b, e, j), &g->nodes[e->outputs[j]]);
        out[j].role = output_role(b, e, j);
        at[j] = place_of(b, e, e->outputs[j]);
    }
    for (int i = 0, slot = 0; i < g->n; i++)
        if (g->nodes[i].op == OP_INPUT) reads[slot++] = e->live && e->live[i];
    *E = (nnc_entry_desc){e->name, e->nlaunch > 0 || e->noutputs > 0, k == ENTRY_TRAIN, reads, at};
    b->d->abi.noutputs[k] = e->noutputs;
    b->d->abi.outputs[k] = out;
}

/* Parameters and state have one size; activations the largest any entry needs, on the target
 * and (a device target only) on the host. */
static void build_blocks(Build *b) {
    const Program *p = b->p;
    int64_t act[NNC_MAX_DEVICES] = {0};
    for (int k = 0; k < ENTRY_COUNT; k++)
        for (int dev = 0; dev < NNC_MAX_DEVICES; dev++)
            if (p->entry[k].act_elems[dev] > act[dev]) act[dev] = p->entry[k].act_elems[dev];
    size_t *bytes = b->d->block_bytes;
    bytes[NNC_BLOCK_PARAMS] = (size_t)p->param_elems * b->rb;
    bytes[NNC_BLOCK_STATE] = (size_t)p->state_elems * b->rb;
    int64_t on_target = p->target == DEV_CPU ? act[DEV_CPU] : 0;   /* the GPUs' blocks together */
    for (int dev = DEV_CUDA; p->target != DEV_CPU && dev < NNC_MAX_DEVICES; dev++) on_target += act[dev];
    bytes[NNC_BLOCK_ACT] = (size_t)on_target * b->rb;
    bytes[NNC_BLOCK_HOST] = p->target == DEV_CPU ? 0 : (size_t)act[DEV_CPU] * b->rb;
    nnc_model_abi *A = &b->d->abi;
    A->param_bytes = bytes[NNC_BLOCK_PARAMS];
    A->state_bytes = bytes[NNC_BLOCK_STATE];
    A->act_bytes = bytes[NNC_BLOCK_ACT] + bytes[NNC_BLOCK_HOST];
}

nnc_model_desc *model_desc_build(const Program *p, bool f64, const nnc_model_abi *fns, Arena *a) {
    Build b = {p, f64 ? 8 : 4, a, arena_alloc(a, sizeof(nnc_model_desc))};
    if (fns) b.d->abi = *fns;
    nnc_model_abi *A = &b.d->abi;
    A->abi_version = NNC_ABI_VERSION;
    A->name = model_c_name(p);
    A->real_bytes = (int)b.rb;
    A->batch_max = p->g->batch_max;
    const Entry *t = &p->entry[ENTRY_TRAIN];
    for (int k = 0; k < t->nlaunch; k++)
        A->collectives += t->launches[k].kind == L_COLLECTIVE && p->g->nodes[t->launches[k].root].op == OP_ALLREDUCE_START;
    build_leaves(&b);
    build_input_rules(&b);
    for (int k = 0; k < ENTRY_COUNT; k++) build_entry(&b, k);
    build_blocks(&b);
    return b.d;
}
