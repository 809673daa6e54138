/* horizontal.c - runs of launches that may run as one (horizontal fusion).
 *
 * The optimizer's pass gives every parameter its own update and, under clip_grad_norm, its own
 * sum of squares: GPT-2 small's step ends in about 300 launches, two per parameter, each alike
 * but for its buffers and sizes, most of them a few thousand elements (a launch's floor of a few
 * microseconds each, where the whole update's bytes take under a millisecond).  This pass finds
 * runs of consecutive launches of an entry that are independent -- no launch of a run writes
 * memory another one reads or writes, as the plan laid them out -- and alike: elementwise
 * kernels, or reductions of a whole tensor to one value, of one phase and device, over spaces
 * without the batch axis (so their sizes are known when the kernels are made).  It marks each
 * run of two or more (Launch.hfirst, hcount); a backend may issue a run as few kernels, each
 * over a table of its launches (PyTorch's multi_tensor_apply, llm.c's fused AdamW): the CUDA
 * target does (codegen/cuda/render_cuda.c), the CPU calls them one after another as before.
 * Nothing is moved and no launch changes: a run's launches leave the same values in any order,
 * or at once.  It runs after plan, whose reuse of memory it must see: a launch may be planned
 * over what an earlier one read last, which ends a run there. */
#include <stdlib.h>

#include "passes.h"

/* Where a buffer's elements are: its block (kind and device) and [lo, hi) in real slots. */
typedef struct {
    int block;
    int64_t lo, hi;
} Extent;

static bool extent_of(const Program *p, const Entry *e, int x, Extent *out) {
    while (e->buf[x].kind == BUF_ALIAS) x = e->buf[x].alias;
    const Buffer *b = &e->buf[x];
    if (b->kind != BUF_PARAM && b->kind != BUF_STATE && b->kind != BUF_ACT) return false;
    int64_t n = DTYPE_IS_HALF(p->g->nodes[x].dtype) ? (b->elems + 1) / 2 : b->elems;
    out->block = (int)b->kind * NNC_MAX_DEVICES + (b->kind == BUF_ACT ? (int)b->dev : 0);
    out->lo = b->offset;
    out->hi = b->offset + n;
    return true;
}

static bool overlap(Extent a, Extent b) { return a.block == b.block && a.lo < b.hi && b.lo < a.hi; }

/* Whether launch L can be one of a run: an elementwise kernel or a sum (or maximum) of a whole
 * tensor, whose space has no batch axis. */
static bool runnable(const Graph *g, const Launch *L) {
    if (L->kind != L_EW && !(L->kind == L_REDUCE && shape_numel(g->nodes[L->root].shape, 1) == 1)) return false;
    for (int l = 0; l < L->space.rank; l++)
        if (dim_is_batch(L->space.d[l])) return false;
    return true;
}

static bool alike(const Graph *g, const Launch *a, const Launch *b) {
    return a->kind == b->kind && a->phase == b->phase && g->nodes[a->root].dev == g->nodes[b->root].dev;
}

/* The extents launch L reads (reads[0, *nr)) and writes (writes[0, *nw)); capacity for all. */
static void extents(const Program *p, const Entry *e, const Launch *L, Extent *reads, int *nr, Extent *writes,
                    int *nw) {
    *nr = *nw = 0;
    for (int j = 0; j < L->nins; j++)
        if (extent_of(p, e, L->ins[j], &reads[*nr])) ++*nr;
    for (int j = 0; j < L->nouts; j++)
        if (extent_of(p, e, L->outs[j], &writes[*nw])) ++*nw;
    if (!L->nouts && extent_of(p, e, L->root, &writes[*nw])) ++*nw; /* a reduction's one output */
}

/* Whether no extent of `a` overlaps one of `b` (n of them). */
static bool apart(const Extent *a, int na, const Extent *b, int nb) {
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (overlap(a[i], b[j])) return false;
    return true;
}

void pass_horizontal(Program *p, Entry *e) {
    const Graph *g = p->g;
    int cap = 0;
    for (int k = 0; k < e->nlaunch; k++) {
        const Launch *L = &e->launches[k];
        cap += L->nins + L->nouts + 1;
    }
    /* the extents the run so far reads and writes, and the next launch's */
    Extent *rr = xmalloc((size_t)(cap + 1) * sizeof *rr), *rw = xmalloc((size_t)(cap + 1) * sizeof *rw);
    Extent *lr = xmalloc((size_t)(cap + 1) * sizeof *lr), *lw = xmalloc((size_t)(cap + 1) * sizeof *lw);
    for (int k = 0; k < e->nlaunch;) {
        Launch *F = &e->launches[k];
        int n = 1, nrr, nrw;
        if (runnable(g, F)) {
            extents(p, e, F, rr, &nrr, rw, &nrw);
            for (; k + n < e->nlaunch; n++) {
                const Launch *L = &e->launches[k + n];
                int nlr, nlw;
                if (!runnable(g, L) || !alike(g, F, L)) break;
                extents(p, e, L, lr, &nlr, lw, &nlw);
                if (!apart(lw, nlw, rr, nrr) || !apart(lw, nlw, rw, nrw) || !apart(lr, nlr, rw, nrw)) break;
                for (int j = 0; j < nlr; j++) rr[nrr++] = lr[j];
                for (int j = 0; j < nlw; j++) rw[nrw++] = lw[j];
            }
        }
        for (int j = 0; n > 1 && j < n; j++) {
            e->launches[k + j].hfirst = k;
            e->launches[k + j].hcount = n;
        }
        k += n;
    }
    free(rr);
    free(rw);
    free(lr);
    free(lw);
}
