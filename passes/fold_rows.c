/* fold_rows.c - layer norm's gradient row kernel takes in the ops on either side of it.
 *
 * layer_norm(x, w, b) is the row kernel xhat = (x - mu) / sd, then xhat * w + b; autograd gives
 * its backward as dxhat = dy * w (a kernel), layer_norm_rows_grad(dxhat, x) (the row kernel),
 * and, where x is a residual stream, that added to the gradient coming down the stream (a
 * kernel).  Each of the two kernels writes a tensor of x's size for the next to read back: in
 * gpt.nn's step about 100 us a layer norm, nine of them.  This pass (after the optimizer's, so
 * that every use is an operand; fused builds only: --check-against pairs nodes one op to a
 * launch) gives LN_GRAD those operands instead: (dy, x, w) computes dy * w where it read dxhat,
 * and (..., r) adds r to what it writes (Attr.scalars p[1], p[2] say which it has).  The same
 * float operations in the same order: on the CPU, the same bits.  Under mixed precision it also
 * takes in autocast's casts where the kernels on either side can do their work: around
 * cross_entropy, after attention's gradients, and widening casts whose readers widen anyway. */
#include <stdlib.h>

#include "passes.h"

static bool is_f32(const Graph *g, int x) { return g->nodes[x].dtype == DT_F32; }

/* g = a * w or w * a with w a [C] vector (x's last axis) and a of g's shape: a's slot (0, 1), or -1. */
static int scaled_by_vector(const Graph *g, int m, int64_t C) {
    const Node *n = &g->nodes[m];
    if (n->op != OP_MUL || n->nin != 2 || !is_f32(g, m)) return -1;
    for (int j = 0; j < 2; j++) {
        const Node *a = &g->nodes[n->in[j]], *w = &g->nodes[n->in[1 - j]];
        if (shape_eq(a->shape, n->shape) && w->shape.rank == 1 && w->shape.d[0] == C && is_f32(g, n->in[0]) &&
            is_f32(g, n->in[1]))
            return j;
    }
    return -1;
}

/* dst becomes the op src was (operands, attributes, source line and scope), keeping its own id,
 * dtype and shape: whatever read dst reads the folded op. */
static void take_op(Node *dst, const Node *src) {
    dst->op = src->op;
    dst->nin = src->nin;
    for (int k = 0; k < src->nin; k++) dst->in[k] = src->in[k];
    dst->attr = src->attr;
    dst->loc = src->loc, dst->scope = src->scope;
}

static bool is_ce(const Node *n) { return n->op == OP_CROSS_ENTROPY || n->op == OP_CE_GRAD; }

/* Under mixed precision autocast gives cross_entropy f32 logits, a cast of the half product's,
 * and casts its f32 gradient back to half for the products below: two kernels and a tensor of
 * f32 logits (GPT-2 small's [12288, 50304]: 2.5 GB) that exist only for the row kernel.  It reads
 * the half logits (widened as it loads them) and writes the half gradient (rounded as it stores
 * it) instead: the same float operations, the same bits. */
static bool fold_ce_casts(Graph *g, int **users, const int *nusers) {
    bool any = false;
    for (int i = 0; i < g->n; i++) {
        Node *c = &g->nodes[i];
        if (c->op != OP_CAST || c->dtype != DT_F32 || !DTYPE_IS_HALF(g->nodes[c->in[0]].dtype) || graph_names(g, i) ||
            nusers[i] == 0)
            continue;
        bool only_ce = true;
        for (int u = 0; u < nusers[i]; u++) {
            const Node *r = &g->nodes[users[i][u]];
            only_ce &= is_ce(r) && r->in[0] == i && r->in[1] != i && (r->nin < 3 || r->in[2] != i);
        }
        if (!only_ce) continue;
        for (int u = 0; u < nusers[i]; u++) g->nodes[users[i][u]].in[0] = c->in[0];
        any = true;
    }
    for (int i = 0; i < g->n; i++) { /* the gradient's cast back to half becomes the row op */
        const Node *n = &g->nodes[i];
        if (n->op != OP_CE_GRAD || n->dtype != DT_F32 || nusers[i] != 1 || graph_names(g, i)) continue;
        Node *c = &g->nodes[users[i][0]];
        if (c->op != OP_CAST || !DTYPE_IS_HALF(c->dtype)) continue;
        take_op(c, n);
        any = true;
    }
    return any;
}

static bool is_attn_grad(const Node *n) {
    return (n->op == OP_SDPA_DQ || n->op == OP_SDPA_DK || n->op == OP_SDPA_DV) && n->nin == 6;
}

/* attention's gradients a with b's six operands: one launch computes them (codegen/attention.c) */
static bool same_attention(const Node *a, const Node *b) {
    if (!is_attn_grad(a) || !is_attn_grad(b)) return false;
    for (int j = 0; j < 6; j++)
        if (a->in[j] != b->in[j]) return false;
    return true;
}

/* Under mixed precision attention's gradients are f32, and autocast casts each to q's half type
 * for the products below: a kernel that reads them back (GPT-2 small's packed dq, dk and dv: 170
 * MB a layer) and f32 tensors that exist only for it.  The attention kernels store them in the
 * half type instead, rounded as the cast rounded them: the same bits.  All of a launch's
 * gradients or none (the kernels take one type for the three). */
static bool fold_attention_casts(Graph *g, int **users, const int *nusers) {
    bool any = false;
    for (int i = 0; i < g->n; i++) {
        const Node *n = &g->nodes[i];
        if (!is_attn_grad(n) || n->dtype != DT_F32 || !DTYPE_IS_HALF(g->nodes[n->in[0]].dtype)) continue;
        const DType st = g->nodes[n->in[0]].dtype;
        bool first = true, all = true;
        for (int j = 0; j < g->n && first && all; j++) {
            if (!same_attention(n, &g->nodes[j])) continue;
            first = j >= i; /* the group's first node decides for it */
            all = g->nodes[j].dtype == DT_F32 && nusers[j] == 1 && !graph_names(g, j) &&
                g->nodes[users[j][0]].op == OP_CAST && g->nodes[users[j][0]].dtype == st;
        }
        if (!first || !all) continue;
        for (int j = i; j < g->n; j++) {
            if (!same_attention(n, &g->nodes[j]) || g->nodes[j].dtype != DT_F32) continue;
            take_op(&g->nodes[users[j][0]], &g->nodes[j]);
            any = true;
        }
    }
    return any;
}

/* Under mixed precision a half product's value goes back to f32 for what follows it in the
 * backward (layer norm's gradient, its weight's and bias's sums, an add into the residual
 * stream's gradient): a kernel that writes the f32 copy and readers that read twice the bytes
 * (GPT-2 small's [12288, 768] a layer norm: 57 MB written and read three times).  Elementwise
 * ops, sums and layer norm's gradient widen every operand to real as they load it, so they read
 * the half value instead: widening is exact, so the same bits; the cast, read by nothing else,
 * is left to no launch. */
static bool fold_widening_casts(Graph *g) {
    int **users = xcalloc((size_t)g->n, sizeof *users), *nusers = xcalloc((size_t)g->n, sizeof *nusers);
    ir_users(g, users, nusers);
    bool any = false;
    for (int i = 0; i < g->n; i++) {
        const Node *c = &g->nodes[i];
        if (c->op != OP_CAST || c->dtype != DT_F32 || !DTYPE_IS_HALF(g->nodes[c->in[0]].dtype) || graph_names(g, i))
            continue;
        for (int k = 0; k < nusers[i]; k++) {
            Node *u = &g->nodes[users[i][k]];
            const OpKind kind = op_info[u->op].kind;
            for (int j = 0; j < u->nin; j++) {
                /* layer norm's gradient widens its dy (operand 0) alone */
                const bool widens = kind == OK_EW || kind == OK_REDUCE || (u->op == OP_LN_GRAD && j == 0);
                if (u->in[j] == i && widens && u->dtype == DT_F32 && !op_permutes(u->op)) {
                    u->in[j] = c->in[0];
                    any = true;
                }
            }
        }
    }
    free(users);
    free(nusers);
    return any;
}

bool pass_fold_rows(Graph *g) {
    int **users = xcalloc((size_t)g->n, sizeof *users), *nusers = xcalloc((size_t)g->n, sizeof *nusers);
    ir_users(g, users, nusers);
    bool any = fold_ce_casts(g, users, nusers);
    any |= fold_attention_casts(g, users, nusers);
    for (int i = 0; i < g->n; i++) {
        Node *n = &g->nodes[i];
        if (n->op != OP_LN_GRAD || n->nin != 2 || !is_f32(g, i)) continue;
        const Shape *xs = &g->nodes[n->in[1]].shape;
        const int64_t C = xs->d[xs->rank - 1];
        int m = n->in[0], j = nusers[m] == 1 ? scaled_by_vector(g, m, C) : -1;
        if (j >= 0 && !graph_names(g, m)) { /* dxhat = dy * w: read dy and w instead */
            const Node *mul = &g->nodes[m];
            n->in[0] = mul->in[j];
            n->in[2] = mul->in[1 - j];
            n->nin = 3;
            n->attr.scalars.p[1] = 1;
            any = true;
        }
        if (nusers[i] != 1 || graph_names(g, i)) continue;
        Node *add = &g->nodes[users[i][0]];
        if (add->op != OP_ADD || add->nin != 2 || !is_f32(g, users[i][0]) || !shape_eq(add->shape, n->shape)) continue;
        int r = add->in[0] == i ? add->in[1] : add->in[0];
        if (r == i || !shape_eq(g->nodes[r].shape, n->shape) || !is_f32(g, r)) continue;
        /* the add becomes the row kernel, r its last operand; this node is then read by nothing */
        Node ln = *n;
        ln.in[ln.nin++] = r;
        ln.attr.scalars.p[2] = 1;
        take_op(add, &ln); /* --profile names the layer norm */
        any = true;
    }
    free(users);
    free(nusers);
    return fold_widening_casts(g) || any; /* after the folds above, which ask for f32 operands */
}
