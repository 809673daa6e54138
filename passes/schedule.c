/* schedule.c - turns fusion groups into an ordered list of launches.
 *
 * Launches are ordered topologically (Kahn's algorithm) with forward work first, then
 * backward, then updates, ties broken by source order.  Each launch records the buffers it
 * reads and the values it must write (those read outside it, or returned to the caller).
 * Cross-entropy and its gradient share one row-wise launch when the incoming gradient is a
 * constant.  An optimizer's ASSIGN becomes an in-place write of the kernel that computes the
 * new value whenever every other reader of the old value has run by then; otherwise a copy
 * launch at the end of the step does it. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct {
    Program *p;
    Graph *g;
    Entry *e;
    int **users;
    int *nusers;
    int ngroups;
    int *order;          /* group -> launch index */
} Sched;

static int producer(Sched *S, int x) {
    if (S->e->group[x] >= 0) return S->e->group[x];
    int v = view_source(S->g, S->e, x);
    return v >= 0 ? producer(S, v) : -1;
}

static void push(int **arr, int *n, int v) {
    for (int i = 0; i < *n; i++)
        if ((*arr)[i] == v) return;
    *arr = xrealloc(*arr, (size_t)(*n + 1) * sizeof(int));
    (*arr)[(*n)++] = v;
}

/* cross_entropy and its gradient over the same logits and labels (and the same ignore_index and
 * label_smoothing): one row-wise pass. */
static void merge_ce(Sched *S) {
    Graph *g = S->g;
    for (int i = 0; i < g->n; i++) {
        const Node *n = &g->nodes[i];
        if (!S->e->live[i] || n->op != OP_CE_GRAD || !S->p->fuse || !node_is_inline(&g->nodes[n->in[2]])) continue;
        for (int j = 0; j < g->n; j++) {
            const Node *c = &g->nodes[j];
            if (S->e->live[j] && c->op == OP_CROSS_ENTROPY && c->in[0] == n->in[0] && c->in[1] == n->in[1] &&
                !memcmp(&c->attr.scalars, &n->attr.scalars, sizeof c->attr.scalars)) {
                S->e->group[i] = S->e->group[j];
                break;
            }
        }
    }
}

/* Attention's forward and its row logsumexp, and its three gradients, over the same operands:
 * one launch each, whose kernel computes all of them from one pass over the scores (the backward
 * from two on CUDA: the key tiles' and the query tiles', in one launch).  Their operands are the
 * same values, none reads another, so the merged group stays convex. */
static bool attention_same(const Node *a, const Node *b) {
    bool fwd_a = a->op == OP_SDPA || a->op == OP_SDPA_LSE, fwd_b = b->op == OP_SDPA || b->op == OP_SDPA_LSE;
    if (fwd_a != fwd_b || a->nin != b->nin) return false;
    for (int j = 0; j < a->nin; j++)
        if (a->in[j] != b->in[j]) return false;
    const Attr *x = &a->attr, *y = &b->attr;
    return x->attn.scale == y->attn.scale && x->attn.dropout == y->attn.dropout && x->attn.causal == y->attn.causal &&
        x->attn.heads == y->attn.heads && x->attn.hd == y->attn.hd && x->attn.hdv == y->attn.hdv &&
        x->attn.packed == y->attn.packed && !memcmp(x->attn.col, y->attn.col, sizeof x->attn.col);
}

/* Whether a node before `end` in group grp is an `op` (a launch computes one of each). */
static bool group_has_op(Sched *S, int grp, Op op, int end) {
    for (int k = 0; k < end; k++)
        if (S->e->group[k] == grp && S->g->nodes[k].op == op) return true;
    return false;
}

static void merge_attention(Sched *S) {
    Graph *g = S->g;
    for (int i = 0; S->p->fuse && i < g->n; i++) {
        if (!S->e->live[i] || op_info[g->nodes[i].op].kind != OK_ATTENTION) continue;
        for (int j = 0; j < i; j++) /* the same call written twice stays two launches */
            if (S->e->live[j] && op_info[g->nodes[j].op].kind == OK_ATTENTION &&
                attention_same(&g->nodes[i], &g->nodes[j]) && !group_has_op(S, S->e->group[j], g->nodes[i].op, i)) {
                S->e->group[i] = S->e->group[j];
                break;
            }
    }
}

static bool group_is_output(Sched *S, int m, int grp) {
    for (int i = 0; i < S->e->noutputs; i++)
        if (S->e->outputs[i] == m) return true;
    for (int k = 0; k < S->nusers[m]; k++) {
        int u = S->users[m][k];
        if (S->e->live[u] && S->e->group[u] != grp) return true;
    }
    return false;
}

/* members[first[grp] .. first[grp + 1]) are the nodes of group grp, in node order, so that
 * filling every launch costs O(n) in all rather than O(n) per launch. */
static void fill_launch(Sched *S, Launch *L, int grp, const int *members, const int *first) {
    Graph *g = S->g;
    L->root = L->root2 = -1;
    for (int m = first[grp]; m < first[grp + 1]; m++) {
        int i = members[m];
        push(&L->nodes, &L->nnodes, i);
        const Node *n = &g->nodes[i];
        if (n->op == OP_CE_GRAD && L->root >= 0 && g->nodes[L->root].op == OP_CROSS_ENTROPY) L->root2 = i;
        else if (n->op == OP_CROSS_ENTROPY && L->root >= 0 && g->nodes[L->root].op == OP_CE_GRAD) {
            L->root2 = L->root;
            L->root = i;
        } else if (!(L->root >= 0 && g->nodes[L->root].op == OP_LN_GRAD && n->op == OP_CAST)) L->root = i;
        /* (layer norm's gradient stays the root of its launch, its cast to half a second output) */
        if ((int)n->phase > L->phase) L->phase = (int)n->phase;
        if (group_is_output(S, i, grp)) push(&L->outs, &L->nouts, i);
        for (int j = 0; j < n->nin; j++) {
            int x = n->in[j];
            if (S->e->group[x] != grp && !node_is_inline(&g->nodes[x])) push(&L->ins, &L->nins, x);
        }
    }
    L->fold = -1;
    L->alpha = 1;
    for (int f = 0; f < S->e->nfolds; f++)   /* a GEMM with its SGD update (fuse.c) */
        if (S->e->group[S->e->folds[f].gemm] == grp) {
            L->root = S->e->folds[f].gemm;
            L->fold = S->e->folds[f].dst;
            L->alpha = S->e->folds[f].alpha;
        }
    L->bias = L->epi = -1;
    L->relu = false;
    for (int f = 0; f < S->e->nepis; f++) /* a GEMM with a bias (and ReLU) in its epilogue (fuse.c) */
        if (S->e->group[S->e->epis[f].gemm] == grp) {
            const GemmEpi *x = &S->e->epis[f];
            L->root = x->gemm;
            L->bias = x->bias;
            L->relu = x->relu >= 0;
            L->epi = L->relu ? x->relu : x->add;
        }
    const Node *r = &g->nodes[L->root];
    switch (op_info[r->op].kind) {
    case OK_EW: L->kind = L_EW; L->space = r->shape; break;
    case OK_REDUCE: L->kind = L_REDUCE; L->space = g->nodes[r->in[0]].shape; break;
    case OK_ROW: L->kind = L_ROW; break;
    case OK_MATMUL:
        L->kind = L_GEMM;
        L->a = r->in[0];
        L->b = r->in[1];
        if (S->e->folded[L->a]) { L->a = g->nodes[L->a].in[0]; L->ta = true; }
        if (S->e->folded[L->b]) { L->b = g->nodes[L->b].in[0]; L->tb = true; }
        break;
    case OK_COPY: L->kind = L_COPY; break;
    case OK_HELPER: L->kind = L_HELPER; L->space = r->shape; break;
    case OK_COLLECTIVE: L->kind = L_COLLECTIVE; L->space = r->shape; break;
    case OK_ATTENTION:
        L->kind = L_ATTENTION;
        L->space = r->shape;
        break;
    case OK_LEAF: case OK_VIEW: case OK_ASSIGN: break;   /* never a group's root */
    }
}

/* Among ready launches of a phase, an allreduce's start goes first (the exchange begins as
 * soon as its gradient exists) and its wait last (the update that needs it comes as late as it
 * can), so communication overlaps the rest of the step. */
static int launch_rank(const Graph *g, const Launch *L) {
    if (L->kind != L_COLLECTIVE) return 1;
    return g->nodes[L->root].op == OP_ALLREDUCE_START ? 0 : 2;
}

/* Launch a runs before launch b when both are ready: the lower (phase, rank, root). */
static bool launch_first(const Launch *tmp, int a, int b) {
    if (tmp[a].phase != tmp[b].phase) return tmp[a].phase < tmp[b].phase;
    return tmp[a].rank != tmp[b].rank ? tmp[a].rank < tmp[b].rank : tmp[a].root < tmp[b].root;
}

/* A binary min-heap of ready launches, so ordering costs O(n log n), not O(n^2): a graph of
 * tens of thousands of launches must not take minutes to schedule. */
static void heap_push(int *h, int *n, int l, const Launch *tmp) {
    int i = (*n)++;
    for (; i > 0 && launch_first(tmp, l, h[(i - 1) / 2]); i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = l;
}

static int heap_pop(int *h, int *n, const Launch *tmp) {
    int top = h[0], last = h[--*n], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && launch_first(tmp, h[c + 1], h[c])) c++;
        if (!launch_first(tmp, h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* Kahn's algorithm, picking the ready launch with the lowest (phase, root) each time. */
static void order_launches(Sched *S, Launch *tmp) {
    int n = S->ngroups;
    int *indeg = xcalloc((size_t)n, sizeof(int));
    int **succ = xcalloc((size_t)n, sizeof(int *));
    int *nsucc = xcalloc((size_t)n, sizeof(int));
    int *ready = xcalloc((size_t)n + 1, sizeof(int)), nready = 0;
    for (int l = 0; l < n; l++)
        for (int k = 0; k < tmp[l].nins; k++) {
            int pl = producer(S, tmp[l].ins[k]);
            if (pl < 0 || pl == l) continue;
            int before = nsucc[pl];
            push(&succ[pl], &nsucc[pl], l);
            if (nsucc[pl] > before) indeg[l]++;
        }
    S->e->launches = arena_alloc(S->g->arena, (size_t)(n + S->g->n) * sizeof(Launch));
    for (int l = 0; l < n; l++) tmp[l].rank = launch_rank(S->g, &tmp[l]);
    for (int l = 0; l < n; l++)
        if (!indeg[l]) heap_push(ready, &nready, l, tmp);
    for (int step = 0; step < n; step++) {
        if (!nready) nnc_fatal("internal error: fusion produced a cycle in %s", S->e->name);
        int best = heap_pop(ready, &nready, tmp);
        S->order[best] = step;
        S->e->launches[step] = tmp[best];
        for (int k = 0; k < nsucc[best]; k++)
            if (--indeg[succ[best][k]] == 0) heap_push(ready, &nready, succ[best][k], tmp);
    }
    S->e->nlaunch = n;
    for (int l = 0; l < n; l++) free(succ[l]);
    free(succ);
    free(nsucc);
    free(indeg);
    free(ready);
}

/* Every launch that reads `leaf` (directly, or through a view or folded transpose) runs no
 * later than launch `at`, and any reader inside `at` reads it at the same index it writes. */
static bool readers_done_by(Sched *S, int leaf, int at, int except) {
    for (int k = 0; k < S->nusers[leaf]; k++) {
        int u = S->users[leaf][k];
        if (!S->e->live[u] || u == except) continue;
        const Node *un = &S->g->nodes[u];
        if (un->op == OP_ASSIGN) continue;
        int v = view_source(S->g, S->e, u);
        if (v >= 0) {   /* a view reads leaf when it is its source in this entry */
            if (v == leaf && !readers_done_by(S, u, at, except)) return false;
            continue;
        }
        int pl = producer(S, u);
        if (pl < 0) return false;
        int pos = S->order[pl];
        if (pos > at) return false;
        const Launch *L = &S->e->launches[at];
        if (pos == at && L->kind == L_GEMM && L->fold == u) continue;   /* C += ... reads it once */
        if (pos == at && (L->kind != L_EW || !shape_eq(un->shape, S->g->nodes[leaf].shape) ||
                          !shape_eq(L->space, un->shape)))
            return false;
    }
    return true;
}

static void place_assigns(Sched *S) {
    Graph *g = S->g;
    S->e->inplace = arena_alloc(g->arena, (size_t)g->n * sizeof(int));
    for (int i = 0; i < g->n; i++) S->e->inplace[i] = -1;
    for (int i = 0; i < g->n; i++) {
        const Node *n = &g->nodes[i];
        if (!S->e->live[i] || n->op != OP_ASSIGN) continue;
        int leaf = n->in[0], v = n->in[1];
        int pl = producer(S, v);
        bool ok = pl >= 0 && S->e->group[v] == pl && S->e->inplace[v] < 0 &&
                  op_info[g->nodes[v].op].kind != OK_VIEW &&
                  (S->e->launches[S->order[pl]].kind != L_GEMM || S->e->launches[S->order[pl]].fold == v) &&
                  readers_done_by(S, leaf, S->order[pl], i);
        for (int k = 0; ok && k < S->e->noutputs; k++) ok = S->e->outputs[k] != v;
        if (ok) {
            S->e->inplace[v] = leaf;
            continue;
        }
        Launch *L = &S->e->launches[S->e->nlaunch++];
        memset(L, 0, sizeof *L);
        L->kind = L_ASSIGN;
        L->root = i;
        L->root2 = -1;
        L->phase = PH_UPDATE;
        push(&L->ins, &L->nins, v);
        push(&L->nodes, &L->nnodes, i);
    }
}

/* Buckets, in the order the starts run (the same on every process, which runs the same
 * schedule): a bucket closes when it holds bucket_bytes or at the last start.  A wait has its
 * start's bucket. */
static void number_buckets(Program *p, Entry *e) {
    const Graph *g = p->g;
    int last = -1, b = 0;
    int64_t fill = 0;
    for (int k = 0; k < e->nlaunch; k++)
        if (e->launches[k].kind == L_COLLECTIVE && g->nodes[e->launches[k].root].op == OP_ALLREDUCE_START) last = k;
    for (int k = 0; k <= last; k++) {
        Launch *L = &e->launches[k];
        if (L->kind != L_COLLECTIVE || g->nodes[L->root].op != OP_ALLREDUCE_START) continue;
        const Node *r = &g->nodes[L->root];
        fill += shape_numel(r->shape, g->batch_max) * 4;
        L->bucket = b;
        L->bucket_last = fill >= p->bucket_bytes || k == last;
        if (L->bucket_last) {
            b++;
            fill = 0;
        }
    }
    for (int k = 0; k < e->nlaunch; k++) {
        Launch *L = &e->launches[k];
        if (L->kind != L_COLLECTIVE || g->nodes[L->root].op != OP_ALLREDUCE_WAIT) continue;
        L->bucket = e->launches[e->group[g->nodes[L->root].in[0]]].bucket;
    }
    if (e->kind == ENTRY_TRAIN) p->nbuckets = b;
}

void pass_schedule(Program *p, Entry *e) {
    Graph *g = p->g;
    Sched S = {.p = p, .g = g, .e = e};
    S.users = xmalloc((size_t)g->n * sizeof *S.users);
    S.nusers = xmalloc((size_t)g->n * sizeof *S.nusers);
    ir_users(g, S.users, S.nusers);
    merge_ce(&S);
    merge_attention(&S);
    /* renumber groups densely */
    int *remap = xmalloc((size_t)g->n * sizeof(int));
    for (int i = 0; i < g->n; i++) remap[i] = -1;
    for (int i = 0; i < g->n; i++)
        if (e->group[i] >= 0) {
            if (remap[e->group[i]] < 0) remap[e->group[i]] = S.ngroups++;
            e->group[i] = remap[e->group[i]];
        }
    free(remap);
    Launch *tmp = xcalloc((size_t)S.ngroups + 1, sizeof(Launch));
    int *first = xcalloc((size_t)S.ngroups + 2, sizeof(int)), *members = xmalloc(((size_t)g->n + 1) * sizeof(int));
    for (int i = 0; i < g->n; i++)   /* counting sort of the nodes by group */
        if (e->group[i] >= 0) first[e->group[i] + 2]++;
    for (int l = 0; l < S.ngroups; l++) first[l + 2] += first[l + 1];
    for (int i = 0; i < g->n; i++)
        if (e->group[i] >= 0) members[first[e->group[i] + 1]++] = i;
    for (int l = 0; l < S.ngroups; l++) fill_launch(&S, &tmp[l], l, members, first);
    free(first);
    free(members);
    S.order = xmalloc(((size_t)S.ngroups + 1) * sizeof(int));
    order_launches(&S, tmp);
    /* group ids now name launches in execution order */
    for (int i = 0; i < g->n; i++)
        if (e->group[i] >= 0) e->group[i] = S.order[e->group[i]];
    for (int l = 0; l < S.ngroups; l++) S.order[l] = l;
    number_buckets(p, e);
    place_assigns(&S);
    free(tmp);
    free(S.order);
    free(S.users);
    free(S.nusers);
}
