/* optimizer.c - the parameter update as part of the graph.
 *
 * For each parameter, adds the nodes of torch.optim's update rule (SGD with momentum, dampening,
 * Nesterov and weight decay; Adam; AdamW) with its param group's weight decay (0 for those the
 * front end put in no_decay's group: Node.no_decay), the state tensors it keeps (named as PyTorch names
 * them: "fc1.weight.momentum_buffer", ".exp_avg", ".exp_avg_sq"), and ASSIGN nodes that write
 * the new values back.  Everything is tagged PH_UPDATE, so the schedule runs it after the
 * backward pass and fusion can turn each parameter's whole update into one kernel.  Step-
 * dependent scalars (Adam's bias corrections) are STEPVAL nodes computed from the step counter. */
#include <math.h>
#include <stdlib.h>

#include "passes.h"

typedef struct {
    Graph *g;
    Node like;
    double wd; /* the parameter's weight decay: its param group's (0 in no_decay's) */
    int lr;          /* the state "lr" when a schedule sets the rate, else -1: the constant */
    int ok;          /* with a loss scaler: 1 when this step's gradients are finite, else -1 */
    int skipped;     /* ... and the state counting the steps it skipped */
} Up;

static int up_node(Up *U, Op op, int nin, const int *in, Shape s) {
    return graph_node_at(U->g, op, nin, in, s, DT_F32, &U->like);
}

static int up2(Up *U, Op op, int a, int b) {
    Shape s;
    shape_broadcast(U->g->nodes[a].shape, U->g->nodes[b].shape, &s);
    int in[2] = {a, b};
    return up_node(U, op, 2, in, s);
}

static int upc(Up *U, double v) {
    int c = up_node(U, OP_CONST, 0, NULL, shape_scalar());
    U->g->nodes[c].attr.cnst.value = v;
    return c;
}

static int stepval(Up *U, StepFn fn, double base) {
    int c = up_node(U, OP_STEPVAL, 0, NULL, shape_scalar());
    U->g->nodes[c].attr.step.fn = fn;
    U->g->nodes[c].attr.step.base = base;
    return c;
}

static int state(Up *U, int p, const char *suffix) {
    int s = up_node(U, OP_STATE, 0, NULL, U->g->nodes[p].shape);
    U->g->nodes[s].name = arena_printf(U->g->arena, "%s.%s", U->g->nodes[p].name, suffix);
    return s;
}

/* The learning rate: the constant o->lr, or the state tensor a schedule writes. */
static int lr_of(Up *U, const OptConfig *o) {
    return U->lr >= 0 ? U->lr : upc(U, o->lr);
}

static void assign_raw(Up *U, int dst, int v) {
    int in[2] = {dst, v};
    up_node(U, OP_ASSIGN, 2, in, U->g->nodes[dst].shape);
}

static int select3(Up *U, int c, int a, int b) {
    int in[3] = {c, a, b};
    return up_node(U, OP_SELECT, 3, in, U->g->nodes[a].shape.rank >= U->g->nodes[b].shape.rank
                                            ? U->g->nodes[a].shape : U->g->nodes[b].shape);
}

/* dst = v; with a loss scaler, dst keeps its value on a step whose gradients overflowed. */
static void assign(Up *U, int dst, int v) {
    assign_raw(U, dst, U->ok >= 0 ? select3(U, U->ok, v, dst) : v);
}

/* The optimizer's step count: t, or under a loss scaler t minus the skipped steps (torch's
 * optimizers count only the steps GradScaler lets through). */
static int opt_step(Up *U) {
    int t = up_node(U, OP_STEPVAL, 0, NULL, shape_scalar());
    U->g->nodes[t].attr.step.fn = STEP_T;
    return U->skipped >= 0 ? up2(U, OP_SUB, t, U->skipped) : t;
}

/* torch.optim.SGD: d = g + wd*p; buf = m*buf + (1-damp)*d (buf = d at the first step);
 * d = nesterov ? d + m*buf : buf; p -= lr*d */
static void sgd(Up *U, const OptConfig *o, int p, int g) {
    int d = g;
    if (U->wd != 0) d = up2(U, OP_ADD, d, up2(U, OP_MUL, upc(U, U->wd), p));
    if (o->momentum != 0) {
        int buf = state(U, p, "momentum_buffer");
        int damp;
        if (o->dampening == 0) damp = upc(U, 1);
        else if (U->skipped >= 0) {   /* one node per statement (below) */
            int t = opt_step(U);
            int first = up2(U, OP_EQ, t, upc(U, 1));
            int one = upc(U, 1);
            damp = select3(U, first, one, upc(U, 1 - o->dampening));
        } else
            damp = stepval(U, STEP_FIRST_ONE, 1 - o->dampening);
        /* one node per statement: C leaves the order of argument evaluation open, and node
         * numbering must not depend on the compiler */
        int mb = up2(U, OP_MUL, upc(U, o->momentum), buf);
        int nb = up2(U, OP_ADD, mb, up2(U, OP_MUL, damp, d));
        assign(U, buf, nb);
        d = o->nesterov ? up2(U, OP_ADD, d, up2(U, OP_MUL, upc(U, o->momentum), nb)) : nb;
    }
    assign(U, p, up2(U, OP_SUB, p, up2(U, OP_MUL, lr_of(U, o), d)));
}

/* torch.optim.Adam / AdamW (amsgrad off):
 * m = b1*m + (1-b1)*d; v = b2*v + (1-b2)*d*d;
 * p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps) */
static void adam(Up *U, const OptConfig *o, int p, int g) {
    int d = g, pp = p;
    if (U->wd != 0 && o->kind == OPT_ADAM) d = up2(U, OP_ADD, d, up2(U, OP_MUL, upc(U, U->wd), p));
    if (U->wd != 0 && o->kind == OPT_ADAMW) {
        int f;
        if (U->lr >= 0) {
            int one = upc(U, 1);
            f = up2(U, OP_SUB, one, up2(U, OP_MUL, U->lr, upc(U, U->wd)));
        } else f = upc(U, 1 - o->lr * U->wd);
        pp = up2(U, OP_MUL, p, f);
    }
    int m = state(U, p, "exp_avg");
    int v = state(U, p, "exp_avg_sq");
    int bm = up2(U, OP_MUL, upc(U, o->beta1), m);
    int nm = up2(U, OP_ADD, bm, up2(U, OP_MUL, upc(U, 1 - o->beta1), d));
    int bv = up2(U, OP_MUL, upc(U, o->beta2), v);
    int c2 = upc(U, 1 - o->beta2);
    int nv = up2(U, OP_ADD, bv, up2(U, OP_MUL, c2, up2(U, OP_MUL, d, d)));
    assign(U, m, nm);
    assign(U, v, nv);
    int bc1, bc2;
    if (U->skipped >= 0) {   /* 1 - beta^t of the steps taken: a tensor, since they are state */
        int t = opt_step(U);
        int one = upc(U, 1);
        bc1 = up2(U, OP_SUB, one, up2(U, OP_POW, upc(U, o->beta1), t));
        bc2 = up2(U, OP_SUB, one, up2(U, OP_POW, upc(U, o->beta2), t));
    } else {
        bc1 = stepval(U, STEP_ONE_MINUS_POW, o->beta1);
        bc2 = stepval(U, STEP_ONE_MINUS_POW, o->beta2);
    }
    int sq = up_node(U, OP_SQRT, 1, &nv, U->g->nodes[nv].shape);
    int bc2s = up_node(U, OP_SQRT, 1, &bc2, shape_scalar());
    int vhat = up2(U, OP_DIV, sq, bc2s);
    int denom = up2(U, OP_ADD, vhat, upc(U, o->eps));
    int step = up2(U, OP_DIV, lr_of(U, o), bc1);
    assign(U, p, up2(U, OP_SUB, pp, up2(U, OP_MUL, step, up2(U, OP_DIV, nm, denom))));
}

/* The state "lr" (saved as optimizer.lr, as torch keeps a param group's lr in the optimizer's
 * state_dict), initialised to the optimizer's rate; the trainer writes each epoch's. */
static int lr_state(Graph *g, const OptConfig *o, const Node *like) {
    int s = graph_node_at(g, OP_STATE, 0, NULL, shape_scalar(), DT_F32, like);
    Node *n = &g->nodes[s];
    n->phase = PH_UPDATE;
    n->name = "lr";
    n->scope = NULL;
    if (o->loc.line) n->loc = o->loc;
    n->attr.init.kind = INIT_CONSTANT;
    n->attr.init.a = o->lr;
    return s;
}

static int scalar_state(Graph *g, const Node *like, const char *name, double init) {
    int s = graph_node_at(g, OP_STATE, 0, NULL, shape_scalar(), DT_F32, like);
    Node *n = &g->nodes[s];
    n->phase = PH_UPDATE;
    n->name = name;
    n->scope = NULL;
    n->attr.init.kind = init != 0 ? INIT_CONSTANT : INIT_ZEROS;
    n->attr.init.a = init;
    return s;
}

/* GradScaler's unscale_ and found_inf (torch/cuda/amp/grad_scaler.py): every gradient times
 * 1/scale (the parameters' grad become these, so the grad entry gives true gradients), and
 * found = 1 when any of them holds an inf or NaN.  Returns ok = 1 - found. */
static int scaler_unscale(Up *U, int scale, int *found_out) {
    Graph *g = U->g;
    int inv = up2(U, OP_DIV, upc(U, 1), scale), found = -1;
    for (int p = 0; p < g->n; p++) {
        if (g->nodes[p].op != OP_PARAM || g->nodes[p].grad < 0) continue;
        int gu = up2(U, OP_MUL, g->nodes[p].grad, inv);
        g->nodes[p].grad = gu;
        Shape sh = g->nodes[gu].shape;
        int nf = up_node(U, OP_NONFINITE, 1, &gu, sh);
        if (sh.rank > 0) {
            int c = up_node(U, OP_SUM, 1, &nf, shape_scalar());
            g->nodes[c].attr.axes.mask = (1u << sh.rank) - 1;
            nf = c;
        }
        found = found < 0 ? nf : up2(U, OP_ADD, found, nf);
    }
    if (found < 0) found = upc(U, 0);   /* nothing to train */
    *found_out = up2(U, OP_MINIMUM, found, upc(U, 1));
    return up2(U, OP_SUB, upc(U, 1), *found_out);
}

/* GradScaler.update: backoff on an overflow (tracker 0); after `interval` clean steps growth
 * (if the grown scale is finite) and tracker 0; else tracker + 1.  The skipped steps count. */
static void scaler_update(Up *U, const ScalerConfig *c, int S, int found, int tracker) {
    int ok = U->ok;
    int t1 = up2(U, OP_ADD, tracker, upc(U, 1));
    int grow = up2(U, OP_EQ, t1, upc(U, c->interval));
    int grown = up2(U, OP_MUL, S, upc(U, c->growth));
    int big = up_node(U, OP_NONFINITE, 1, &grown, shape_scalar());
    int s_ok = select3(U, grow, select3(U, big, S, grown), S);
    assign_raw(U, S, select3(U, ok, s_ok, up2(U, OP_MUL, S, upc(U, c->backoff))));
    int kept = select3(U, grow, upc(U, 0), t1);
    assign_raw(U, tracker, select3(U, ok, kept, upc(U, 0)));
    assign_raw(U, U->skipped, up2(U, OP_ADD, U->skipped, found));
}

static Up clip_up(Graph *g, const OptConfig *o, int p) {
    Up U = {.g = g, .like = g->nodes[p], .lr = -1, .ok = -1, .skipped = -1};
    U.like.phase = PH_UPDATE;
    U.like.loc = o->loc.line ? o->loc : g->nodes[p].loc;
    return U;
}

/* torch.nn.utils.clip_grad_value_ (each element clamped to [-v, v]) or clip_grad_norm_ (norm
 * type 2: every gradient times min(max_norm / (total + 1e-6), 1), total the L2 norm of all of
 * them together; a NaN or inf total makes them NaN, as torch's with error_if_nonfinite off).
 * gr[p] is parameter p's gradient, replaced by the clipped one; the nodes' own grad stays what
 * backward gave (the grad entry's, as loss.backward()'s).  The total norm, which torch's
 * returns, is train_step's output "grad_norm" (--metrics reports it per step). */
static void clip_grads(Graph *g, const TrainConfig *t, int *gr, int n) {
    const OptConfig *o = &t->opt;
    int total = -1;
    Up F;   /* the total, the norm and the scale: on the first parameter's device */
    for (int p = 0; p < n; p++) {
        if (gr[p] < 0) continue;
        Up U = clip_up(g, o, p);   /* a gradient's own work runs where its parameter lives */
        if (t->clip_value > 0) {
            int c = up_node(&U, OP_CLAMP, 1, &gr[p], g->nodes[gr[p]].shape);
            g->nodes[c].attr.scalars.p[0] = -t->clip_value;
            g->nodes[c].attr.scalars.p[1] = t->clip_value;
            gr[p] = c;
            continue;
        }
        Shape sh = g->nodes[gr[p]].shape;
        int sq = up2(&U, OP_MUL, gr[p], gr[p]);
        if (sh.rank > 0) {
            int c = up_node(&U, OP_SUM, 1, &sq, shape_scalar());
            g->nodes[c].attr.axes.mask = (1u << sh.rank) - 1;
            sq = c;
        }
        if (total < 0) {
            F = clip_up(g, o, p);
            total = sq;
        } else
            total = up2(&F, OP_ADD, total, sq);
    }
    if (total < 0) return;
    int norm = g->grad_norm = up_node(&F, OP_SQRT, 1, &total, shape_scalar());
    int den = up2(&F, OP_ADD, norm, upc(&F, 1e-6));
    int coef = up2(&F, OP_DIV, upc(&F, t->clip_norm), den);
    coef = up2(&F, OP_MINIMUM, coef, upc(&F, 1));
    for (int p = 0; p < n; p++)
        if (gr[p] >= 0) {
            Up U = clip_up(g, o, p);
            gr[p] = up2(&U, OP_MUL, gr[p], coef);
        }
}

void pass_optimizer(Graph *g, const TrainConfig *t) {
    const OptConfig *o = &t->opt;
    int scale = t->scaler.on ? g->loss_seed : -1; /* pass_autograd made it */
    int n0 = g->n, lr = -1, ok = -1, skipped = -1, found = -1, tracker = -1;
    if (scale >= 0) {
        Up S = {.g = g, .like = g->nodes[scale], .lr = -1, .ok = -1, .skipped = -1};
        S.like.phase = PH_UPDATE;
        tracker = scalar_state(g, &S.like, "scaler.growth_tracker", 0);
        skipped = scalar_state(g, &S.like, "scaler.skipped_steps", 0);
        ok = scaler_unscale(&S, scale, &found);
    }
    int *gr = xmalloc((size_t)n0 * sizeof *gr);
    for (int p = 0; p < n0; p++) gr[p] = g->nodes[p].op == OP_PARAM ? g->nodes[p].grad : -1;
    if (t->clip_norm > 0 || t->clip_value > 0) clip_grads(g, t, gr, n0);
    for (int p = 0; p < n0; p++) {
        if (gr[p] < 0) continue;
        if (o->lr_state && lr < 0) lr = lr_state(g, o, &g->nodes[p]);
        Up U = {.g = g,
                .like = g->nodes[p],
                .wd = g->nodes[p].no_decay ? 0 : o->weight_decay,
                .lr = lr,
                .ok = ok,
                .skipped = skipped};
        U.like.phase = PH_UPDATE;
        U.like.loc = o->loc.line ? o->loc : g->nodes[p].loc;
        if (o->kind == OPT_SGD) sgd(&U, o, p, gr[p]);
        else adam(&U, o, p, gr[p]);
    }
    free(gr);
    if (scale >= 0) {
        Up U = {.g = g, .like = g->nodes[scale], .lr = -1, .ok = ok, .skipped = skipped};
        U.like.phase = PH_UPDATE;
        scaler_update(&U, &t->scaler, scale, found, tracker);
    }
}
