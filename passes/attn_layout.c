/* attn_layout.c - attention reads its operands where the projection wrote them.
 *
 * A model writes multi-head attention as nanoGPT does:
 *
 *     q, k, v = c_attn(x).split(C, dim = 2)                  # three [B, T, C] slices
 *     q = q.view(B, T, H, D).transpose(1, 2)                 # [B, H, T, D], and k, v alike
 *     y = scaled_dot_product_attention(q, k, v, is_causal = true)
 *     y = y.transpose(1, 2).contiguous().view(B, T, C)
 *
 * Computed as written, every step copies each operand twice (the slice, then the permute), y
 * once more, and the backward permutes dy in, dq, dk and dv out, and concatenates those three
 * into the projection's gradient: gpt.nn spent about 0.8 ms a layer of its CPU step on these.
 * Attention's routines lay each head out in their own tiles anyway, so they can read a head in
 * place from the rows of the projection's output as well as from a [B, H, T, D] tensor.
 *
 * This pass (first: before autocast, whose casts would stand in the pattern, and before autograd,
 * so the gradients follow) finds attention whose q, k and v are each
 * permute(0, 2, 1, 3) of a view [B, T, H, D] of a [B, T, H D] tensor, and whose every user is
 * permute(0, 2, 1, 3), and gives the node the operands' rows instead (Attr.attn.heads, hd, hdv,
 * col): its inputs become the [B, T, H D] tensors, or the projection's [B, T, W] itself when
 * the three are slices of it along its last axis that tile it (packed: the backward is then one
 * node writing the projection's whole gradient, no concatenation), its result the [B, T, H Dv]
 * rows, and the users' permutes views of them.  What the permutes and slices read stays in the
 * graph: a value nothing else reads is not computed.
 *
 * Both targets' routines and kernels (codegen/attention.c) address any such layout (a row stride
 * per operand).  The pass runs only when fusing: --check-against compiles both sides unfused, so
 * their values still pair node for node. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* x [B, H, T, D] = permute(0, 2, 1, 3) of a view [B, T, H, D] of a [B, T, H D] tensor: that
 * tensor, or -1. */
static int rows_of(const Graph *g, int x) {
    const Node *p = &g->nodes[x];
    if (p->op != OP_PERMUTE || p->shape.rank != 4) return -1;
    static const int8_t want[4] = {0, 2, 1, 3};
    for (int d = 0; d < 4; d++)
        if (p->attr.perm.p[d] != want[d]) return -1;
    const Node *r = &g->nodes[p->in[0]];
    if (r->op != OP_RESHAPE || r->shape.rank != 4) return -1;
    const Node *s = &g->nodes[r->in[0]];
    if (s->shape.rank != 3 || s->dtype != p->dtype || !dim_is_batch(s->shape.d[0]) || s->shape.d[0] != r->shape.d[0] ||
        s->shape.d[1] != r->shape.d[1] || dim_is_batch(r->shape.d[2]) || dim_is_batch(r->shape.d[3]) ||
        s->shape.d[2] != r->shape.d[2] * r->shape.d[3])
        return -1;
    return r->in[0];
}

/* The tensor the three slices s[0..2] cut along its last axis with step 1, side by side and
 * covering it (in any order), else -1; col: their first columns.  A slice something else reads
 * too is still computed for it. */
static int packed_source(const Graph *g, const int s[3], int32_t col[3]) {
    int x = -1;
    int64_t width = 0;
    for (int j = 0; j < 3; j++) {
        const Node *n = &g->nodes[s[j]];
        if (n->op != OP_SLICE || n->attr.slice.axis != 2 || n->attr.slice.step != 1) return -1;
        if (j && n->in[0] != x) return -1;
        x = n->in[0];
        col[j] = (int32_t)n->attr.slice.start;
        width += n->shape.d[2];
    }
    const Shape *xs = &g->nodes[x].shape;
    if (xs->rank != 3 || xs->d[2] != width || g->nodes[x].dtype != g->nodes[s[0]].dtype) return -1;
    for (int j = 0; j < 3; j++) /* disjoint: with the widths adding up to W, they tile it */
        for (int i = 0; i < 3; i++)
            if (i != j && col[i] <= col[j] && col[j] < col[i] + g->nodes[s[i]].shape.d[2]) return -1;
    return x;
}

/* One attention node: its operands' rows, if they and its users have the shape above. */
static void place(Graph *g, int id, int **users, const int *nusers) {
    Node *n = &g->nodes[id];
    if (n->op != OP_SDPA || n->nin != 3 || n->attr.attn.heads || graph_names(g, id) || !nusers[id]) return;
    int s[3];
    for (int j = 0; j < 3; j++)
        if ((s[j] = rows_of(g, n->in[j])) < 0) return;
    const Shape *q = &g->nodes[n->in[0]].shape, *k = &g->nodes[n->in[1]].shape, *v = &g->nodes[n->in[2]].shape;
    if (q->d[1] != k->d[1] || k->d[1] != v->d[1]) return; /* the same heads (no grouped keys) */
    for (int u = 0; u < nusers[id]; u++) {
        const Node *p = &g->nodes[users[id][u]];
        if (p->op != OP_PERMUTE || p->attr.perm.p[0] != 0 || p->attr.perm.p[1] != 2 || p->attr.perm.p[2] != 1 ||
            p->attr.perm.p[3] != 3)
            return;
    }
    int32_t col[3] = {0, 0, 0};
    int x = packed_source(g, s, col);
    n->attr.attn.heads = (int32_t)q->d[1];
    n->attr.attn.hd = (int32_t)q->d[3];
    n->attr.attn.hdv = (int32_t)v->d[3];
    n->attr.attn.packed = x >= 0;
    for (int j = 0; j < 3; j++) {
        n->in[j] = x >= 0 ? x : s[j];
        n->attr.attn.col[j] = x >= 0 ? col[j] : 0;
    }
    Shape y = {3, {q->d[0], q->d[2], q->d[1] * v->d[3]}};
    n->shape = y;
    for (int u = 0; u < nusers[id]; u++) { /* y.transpose(1, 2) is now a view of the rows */
        Node *p = &g->nodes[users[id][u]];
        p->op = OP_RESHAPE;
        memset(&p->attr, 0, sizeof p->attr);
    }
}

bool pass_attn_layout(Graph *g) {
    int **users = xcalloc((size_t)g->n, sizeof *users), *nusers = xcalloc((size_t)g->n, sizeof *nusers);
    ir_users(g, users, nusers);
    int before = 0, after = 0;
    for (int i = 0; i < g->n; i++) {
        if (g->nodes[i].op != OP_SDPA) continue;
        before += g->nodes[i].attr.attn.heads == 0;
        place(g, i, users, nusers);
        after += g->nodes[i].attr.attn.heads == 0;
    }
    free(users);
    free(nusers);
    return after < before;
}
