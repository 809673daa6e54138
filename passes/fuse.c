/* fuse.c - groups elementwise ops into kernels.
 *
 * Walking from the last node back, each node that needs a kernel starts a group; an
 * elementwise group (or a reduction's input side) then absorbs every elementwise producer
 * whose users are all already in the group (or, into an elementwise group, one it can write
 * out: written_out), repeating until nothing changes.  That rule keeps
 * groups convex (no path leaves a group and comes back), so the launches can always be ordered,
 * and it never duplicates work.  Inside a group, a smaller operand is evaluated at its own
 * broadcast index, which depends only on its shape, so every member is computed once per point.
 *
 * A row-wise op takes nothing in, but layer norm's gradient writes its casts to half as a second
 * output (row_casts_out).  Never fused otherwise: across a matrix product, a row-wise op, a
 * device copy, a reshape (a view), a transpose (a strided load; it is folded into the GEMM when
 * a GEMM is its only user) or a permute (a strided load, its own kernel).  With
 * --no-fuse every op is its own kernel. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct {
    Graph *g;
    Entry *e;
    int **users;
    int *nusers;
    bool enable;
} Fuse;

static bool live_users_in(Fuse *F, int x, int grp) {
    for (int k = 0; k < F->nusers[x]; k++) {
        int u = F->users[x][k];
        /* an ASSIGN is not a kernel: the value stays a group output and is written in place,
         * so SGD momentum / Adam m, v and the parameter update share one kernel */
        if (F->e->live[u] && F->e->group[u] != grp && F->g->nodes[u].op != OP_ASSIGN) return false;
    }
    return true;
}

static bool is_entry_output(Fuse *F, int x) {
    for (int i = 0; i < F->e->noutputs; i++)
        if (F->e->outputs[i] == x) return true;
    return false;
}

/* A producer something outside the group reads too: the group computes it and writes it out, so
 * its users outside read it as before and the group does not (gpt.nn's bias add before GELU,
 * whose value GELU's gradient reads: one pass over 4 MB a layer fewer).  Only into an
 * elementwise group of its own shape (each point written once), and only where every user
 * outside comes after the group's root: node ids follow the dependencies (ir_verify), so no such
 * user can lead back into the group, which stays convex. */
static bool written_out(Fuse *F, int x, int root) {
    const Graph *g = F->g;
    if (op_info[g->nodes[root].op].kind != OK_EW || !shape_eq(g->nodes[x].shape, g->nodes[root].shape)) return false;
    for (int k = 0; k < F->nusers[x]; k++) {
        int u = F->users[x][k];
        if (F->e->live[u] && F->e->group[u] != F->e->group[root] && u < root) return false;
    }
    return true;
}

static bool absorbable(Fuse *F, int x, int grp, int root) {
    const Node *n = &F->g->nodes[x];
    return F->enable && F->e->live[x] && F->e->group[x] == -1 && op_info[n->op].kind == OK_EW && !op_permutes(n->op) &&
        !is_entry_output(F, x) && (live_users_in(F, x, grp) || written_out(F, x, root));
}

/* Absorbs producers into the group until nothing changes.  Membership only grows and makes
 * absorbable() more permissive, so the result is the same in any visiting order; walking the
 * members (not every node below the root) keeps a graph of many small groups linear. */
static void grow(Fuse *F, int root, int grp) {
    int *members = xmalloc(sizeof(int)), n = 0, cap = 1;
    members[n++] = root;
    bool changed = true;
    while (changed) {
        changed = false;
        for (int k = 0; k < n; k++) {
            const Node *nd = &F->g->nodes[members[k]];
            for (int j = 0; j < nd->nin; j++)
                if (absorbable(F, nd->in[j], grp, root)) {
                    F->e->group[nd->in[j]] = grp;
                    if (n == cap) members = xrealloc(members, (size_t)(cap *= 2) * sizeof(int));
                    members[n++] = nd->in[j];
                    changed = true;
                }
        }
    }
    free(members);
}

/* A transpose read only by matrix products costs nothing: the GEMM reads it transposed. */
static bool folds_into_gemm(Fuse *F, int x) {
    if (F->g->nodes[x].op != OP_TRANSPOSE) return false;
    for (int k = 0; k < F->nusers[x]; k++) {
        int u = F->users[x][k];
        if (F->e->live[u] && F->g->nodes[u].op != OP_MATMUL) return false;
    }
    return !is_entry_output(F, x);
}

/* Whether the update is better inside the product (beta = 1) than after it.  Inside, the
 * gradient is never written, but the product adds into C: the pool's chunks then go to the CBLAS
 * (oneDNN's are beta = 0 only), 200 GFLOP/s against oneDNN's ~225 on a Zen 4.  Outside, an update
 * pass reads p and the gradient and writes p.  A weight that fits in a core's L2 makes that pass
 * cheap, so a long contraction (K rows of the batch) pays for it: 784-128-10's first layer at
 * batch 256 (128 x 784, K 256) 535-538 -> 517-524 us a step; at batch 64 the fold wins (149 ->
 * 162 us without), and so does a weight from memory (1024 x 784: its pass would move 9.6 MB).
 * On a GPU the fold is kept: cuBLAS adds into C at its full rate, and the pass would be a launch. */
#define SGD_UNFOLD_K 256
#define SGD_UNFOLD_BYTES (1 << 20)
static bool sgd_fold_pays(const Graph *g, int mm) {
    const Node *n = &g->nodes[mm], *a = &g->nodes[n->in[0]];
    const int64_t k = dim_size(a->shape.d[a->shape.rank - 1], g->batch_max);
    const int64_t bytes = shape_numel(n->shape, g->batch_max) * 4;
    return DEV_IS_GPU(n->dev) || !(k >= SGD_UNFOLD_K && bytes <= SGD_UNFOLD_BYTES); /* a GPU: one launch fewer */
}

/* An SGD update p - lr * (A @ B) whose product feeds nothing else runs inside the GEMM
 * (alpha = -lr, beta = 1, C = p): the weight gradient is never written to memory. */
static void fold_sgd_into_gemm(Fuse *F) {
    Graph *g = F->g;
    for (int i = 0; i < g->n; i++) {
        const Node *mm = &g->nodes[i];
        if (!F->e->live[i] || mm->op != OP_MATMUL || F->nusers[i] != 1 || F->e->group[i] < 0) continue;
        int m = F->users[i][0];
        const Node *mul = &g->nodes[m];
        if (!F->e->live[m] || mul->op != OP_MUL || mul->in[1] != i) continue;
        const Node *c = &g->nodes[mul->in[0]];
        if (c->op != OP_CONST || c->attr.cnst.batch_power != 0 || F->nusers[m] != 1) continue;
        int v = F->users[m][0];
        const Node *sub = &g->nodes[v];
        if (sub->op != OP_SUB || sub->in[1] != m || F->e->group[v] != F->e->group[m]) continue;
        int leaf = sub->in[0], grp = F->e->group[v], members = 0;
        for (int k = 0; k < g->n; k++) members += F->e->group[k] == grp;
        bool assigned = F->nusers[v] == 1 && g->nodes[F->users[v][0]].op == OP_ASSIGN &&
                        g->nodes[F->users[v][0]].in[0] == leaf;
        if (members != 2 || !assigned || !shape_eq(sub->shape, mm->shape)) continue;
        if (!sgd_fold_pays(g, i)) continue;
        F->e->group[i] = grp;
        F->e->folds = xrealloc(F->e->folds, (size_t)(F->e->nfolds + 1) * sizeof *F->e->folds);
        F->e->folds[F->e->nfolds++] = (GemmFold){i, v, -c->attr.cnst.value};
    }
}

/* A product whose C is a plain [M, N] matrix in memory: one product, or a batch of them over one
 * shared B that is one product of merged rows (codegen's gemm_geom: rows_merged), not a sum.
 * cuBLASLt's epilogue then adds the bias along C's rows. */
static bool gemm_rows_plain(Fuse *F, int mm) {
    const Graph *g = F->g;
    const Node *n = &g->nodes[mm];
    int a = n->in[0], b = n->in[1];
    bool ta = F->e->folded[a];
    if (ta) a = g->nodes[a].in[0];
    if (F->e->folded[b]) b = g->nodes[b].in[0];
    const Shape *sa = &g->nodes[a].shape, *sb = &g->nodes[b].shape, *sc = &n->shape;
    if (sc->rank < 2 || sa->rank != sc->rank) return false; /* a sum over leading axes */
    return sc->rank == 2 ? sb->rank == 2 : sb->rank == 2 && !ta;
}

/* The one live user of x, or -1. */
static int only_user(Fuse *F, int x) {
    int u = -1;
    for (int k = 0; k < F->nusers[x]; k++)
        if (F->e->live[F->users[x][k]]) {
            if (u >= 0) return -1;
            u = F->users[x][k];
        }
    return u;
}

/* On a GPU, a bias added to a product's rows, and a ReLU after it, run in the GEMM's epilogue
 * (cuBLASLt's BIAS and RELU_BIAS): the add's kernel, its launch and a pass over C are gone
 * (mlp.nn: 2 of 16 launches a step; 784-4096-4096-10 at batch 4096: two passes over 64 MB).
 * Where: the product's only reader is an add of a vector of C's row length, alone in its kernel,
 * or with the ReLU that is the add's only reader; f32 values (computed as the f32 or --f64
 * build's reals), so the epilogue computes what the kernel did, (A @ B) + bias rounded once;
 * half precision keeps the kernel (its add rounds the product first). */
static void fold_bias_into_gemm(Fuse *F, const int *gsize) {
    Graph *g = F->g;
    for (int i = 0; i < g->n; i++) {
        const Node *mm = &g->nodes[i];
        if (!F->e->live[i] || mm->op != OP_MATMUL || mm->dtype != DT_F32 || !DEV_IS_GPU(mm->dev) ||
            F->e->group[i] < 0 || gsize[F->e->group[i]] != 1 || is_entry_output(F, i) || !gemm_rows_plain(F, i))
            continue;
        int add = only_user(F, i);
        if (add < 0 || g->nodes[add].op != OP_ADD || is_entry_output(F, add)) continue;
        const Node *an = &g->nodes[add];
        int bias = an->in[0] == i ? an->in[1] : an->in[0];
        const Node *bn = &g->nodes[bias];
        if (an->in[0] == an->in[1] || bn->dtype != DT_F32 || bn->shape.rank != 1 || dim_is_batch(bn->shape.d[0]) ||
            bn->shape.d[0] != mm->shape.d[mm->shape.rank - 1] || !shape_eq(an->shape, mm->shape) ||
            an->dtype != DT_F32 || node_is_inline(bn) || bn->dev != mm->dev)
            continue;
        int grp = F->e->group[add], relu = -1;
        if (gsize[grp] == 2) {
            relu = only_user(F, add);
            if (relu < 0 || g->nodes[relu].op != OP_RELU || F->e->group[relu] != grp) continue;
        } else if (gsize[grp] != 1) continue;
        F->e->group[add] = F->e->group[i];
        if (relu >= 0) F->e->group[relu] = F->e->group[i];
        F->e->epis = xrealloc(F->e->epis, (size_t)(F->e->nepis + 1) * sizeof *F->e->epis);
        F->e->epis[F->e->nepis++] = (GemmEpi){i, add, bias, relu};
    }
}

/* Under mixed precision layer norm's gradient (the residual stream's, f32) is cast to half for
 * the products below it: its row kernel writes the half copy too (a second output), rather than a
 * kernel reading the f32 rows back (GPT-2 small: 57 MB a layer norm).  The casts it takes: the
 * live casts to half of a live f32 LN_GRAD. */
static bool row_casts_out(Fuse *F, int c) {
    const Node *n = &F->g->nodes[c];
    if (!F->enable || !F->e->live[c] || n->op != OP_CAST || !DTYPE_IS_HALF(n->dtype) || is_entry_output(F, c))
        return false;
    const Node *r = &F->g->nodes[n->in[0]];
    return r->op == OP_LN_GRAD && r->dtype == DT_F32 && F->e->live[n->in[0]];
}

void pass_fuse(Program *p, Entry *e) {
    Graph *g = p->g;
    Fuse F = {.g = g, .e = e, .enable = p->fuse};
    F.users = xmalloc((size_t)g->n * sizeof *F.users);
    F.nusers = xmalloc((size_t)g->n * sizeof *F.nusers);
    ir_users(g, F.users, F.nusers);
    e->group = arena_alloc(g->arena, (size_t)g->n * sizeof(int));
    e->folded = arena_alloc(g->arena, (size_t)g->n * sizeof(bool));
    for (int i = 0; i < g->n; i++) e->group[i] = -1;
    int ngroups = 0;
    for (int i = g->n - 1; i >= 0; i--) {
        const Node *n = &g->nodes[i];
        OpKind k = op_info[n->op].kind;
        if (!e->live[i] || e->group[i] != -1 || e->folded[i]) continue;
        if (k == OK_LEAF || k == OK_VIEW || k == OK_ASSIGN || node_is_inline(n)) continue;
        if (row_casts_out(&F, i)) continue; /* its row kernel's group takes it, below */
        if (folds_into_gemm(&F, i)) {
            e->folded[i] = true;
            continue;
        }
        int grp = ngroups++;
        e->group[i] = grp;
        if (k == OK_EW && !op_permutes(n->op)) grow(&F, i, grp);
        if (k == OK_REDUCE) grow(&F, i, grp);
        if (n->op == OP_LN_GRAD)
            for (int u = 0; u < F.nusers[i]; u++)
                if (row_casts_out(&F, F.users[i][u]) && e->group[F.users[i][u]] == -1) e->group[F.users[i][u]] = grp;
    }
    if (p->fuse) fold_sgd_into_gemm(&F);
    if (p->fuse) {
        int *gsize = xcalloc((size_t)(ngroups > 0 ? ngroups : 1), sizeof(int));
        for (int i = 0; i < g->n; i++)
            if (e->group[i] >= 0) gsize[e->group[i]]++;
        fold_bias_into_gemm(&F, gsize);
        free(gsize);
    }
    free(F.users);
    free(F.nusers);
}
