/* plan.c - memory planning: every value gets (block, offset) before any code is emitted.
 *
 * Parameters and optimizer state live in persistent blocks at offsets that are the same in
 * every entry point.  Everything a launch writes goes into one activation block per device,
 * placed first-fit by liveness: a buffer is free once the last launch that reads it has run
 * (ggml-alloc's rule), except the entry's outputs, which live until the call returns.  A
 * reshape is a view of its source; an in-place optimizer update writes into its parameter.
 * Offsets and sizes are in elements at the compile-time batch bound.  Every buffer starts on a
 * 256-byte boundary (64 elements: 256 bytes of f32, 512 of f64): the CUDA kernels move
 * contiguous operands 16 bytes at a time (codegen/cuda/dialect_cuda.c), which needs 16-byte
 * aligned bases, and cuMemAlloc's blocks start on 256 bytes, as a GPU's memory transactions
 * prefer; the CPU's loops vectorize the same way. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

#define ALIGN_ELEMS 64

typedef struct {
    int64_t off, size;
    int last;
    int node;
} Alloc;

typedef struct {
    Alloc *a;            /* live blocks, sorted by offset */
    int n, cap;
    int64_t peak;
} Arena1;

static int64_t align_up(int64_t x) { return (x + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS; }

/* Offsets count `real` elements; a bf16/f16 buffer of n elements takes (n + 1) / 2 of them
 * (precision excludes --f64, so real is float wherever there are half tensors). */
static int64_t slots(const Program *p, int x, int64_t elems) {
    return DTYPE_IS_HALF(p->g->nodes[x].dtype) ? (elems + 1) / 2 : elems;
}

static int storage_root(const Program *p, const Entry *e, int x) {
    int v = view_source(p->g, e, x);
    return v >= 0 ? storage_root(p, e, v) : x;
}

/* First fit among the blocks still live at launch k.  A->a is kept sorted by offset (the
 * filter keeps order and the new block is inserted in place), so no sort per allocation: a
 * graph with thousands of live activations plans in O(n^2) cheap steps, not O(n^2 log n). */
static int64_t arena1_alloc(Arena1 *A, int64_t size, int last, int node, int k) {
    int w = 0;
    for (int i = 0; i < A->n; i++)
        if (A->a[i].last >= k) A->a[w++] = A->a[i];
    A->n = w;
    int64_t off = 0;
    for (int i = 0; i < A->n; i++) {
        if (A->a[i].off - off >= size) break;
        if (A->a[i].off + A->a[i].size > off) off = A->a[i].off + A->a[i].size;
    }
    if (A->n == A->cap) A->a = xrealloc(A->a, (size_t)(A->cap = A->cap ? 2 * A->cap : 16) * sizeof *A->a);
    int at = A->n;
    while (at > 0 && A->a[at - 1].off > off) at--;
    memmove(&A->a[at + 1], &A->a[at], (size_t)(A->n - at) * sizeof *A->a);
    A->a[at] = (Alloc){off, size, last, node};
    A->n++;
    if (off + size > A->peak) A->peak = off + size;
    return off;
}

/* Parameters and state device by device, so that each device's share of a block is one range
 * [lo, hi) (a GPU allocates only its own: model parallel); on one device, in node order. */
static void plan_persistent(Program *p, Entry *e) {
    Graph *g = p->g;
    int64_t po = 0, so = 0;
    int inputs = 0;
    for (int i = 0; i < g->n; i++) {
        const Node *n = &g->nodes[i];
        Buffer *b = &e->buf[i];
        b->dev = n->dev;
        b->elems = shape_numel(n->shape, g->batch_max);
        if (n->op == OP_INPUT) { b->kind = BUF_INPUT; b->index = inputs++; }
        else if (node_is_inline(n)) b->kind = BUF_INLINE;
    }
    for (int d = 0; d < NNC_MAX_DEVICES; d++) {
        p->param_lo[d] = po;
        p->state_lo[d] = so;
        for (int i = 0; i < g->n; i++) {
            const Node *n = &g->nodes[i];
            Buffer *b = &e->buf[i];
            if ((int)n->dev != d) continue;
            if (n->op == OP_PARAM) { b->kind = BUF_PARAM; b->offset = po; po += align_up(b->elems); }
            else if (n->op == OP_STATE) { b->kind = BUF_STATE; b->offset = so; so += align_up(b->elems); }
        }
        p->param_hi[d] = po;
        p->state_hi[d] = so;
    }
    p->param_elems = po;
    p->state_elems = so;
}

/* A kernel may write its result over an input that dies in it when every point is read before
 * it is written: elementwise kernels (same index), and row-wise kernels, which read a whole
 * row before writing that row.  An allreduce's halves work in place this way. */
static bool reuse_input(const Program *p, Entry *e, const Launch *L, int k, const int *last, Arena1 *A, int o, int lst) {
    bool ew = L->kind == L_EW && !op_permutes(p->g->nodes[L->root].op);
    if (!ew && L->kind != L_ROW && L->kind != L_COLLECTIVE) return false;
    if (op_has(p->g->nodes[L->root].op, OPF_PICKS)) return false; /* places read or written out of order */
    Buffer *b = &e->buf[o];
    for (int j = 0; j < L->nins; j++) {
        int x = L->ins[j], r = storage_root(p, e, x);
        const Buffer *rb = &e->buf[r];
        /* the same bytes an element: not a half input under a real result, nor an i32 one (an
         * --f64 build's reals are 8 bytes, an i32 4: the result would overwrite inputs not yet read) */
        if (rb->kind != BUF_ACT || last[r] != k || rb->dev != b->dev || rb->elems != b->elems ||
            DTYPE_IS_HALF(p->g->nodes[r].dtype) != DTYPE_IS_HALF(p->g->nodes[o].dtype) ||
            (p->g->nodes[r].dtype == DT_I32) != (p->g->nodes[o].dtype == DT_I32) ||
            !shape_eq(p->g->nodes[x].shape, ew ? L->space : p->g->nodes[o].shape))
            continue;
        Arena1 *a = &A[b->dev];
        for (int i = 0; i < a->n; i++)
            if (a->a[i].node == r && a->a[i].last == k) {
                a->a[i].last = lst;
                a->a[i].node = o;
                b->offset = rb->offset;
                return true;
            }
    }
    return false;
}

/* A convolution's column buffers: im2col's [C KH KW, S OH OW] and the product's [OC, S OH OW]
 * for S samples at a time, S as large as a budget allows, so the memory stays bounded at any
 * batch (darknet and Caffe take one sample at a time; a few at a time makes wider GEMMs). */
#define CONV_SCRATCH_BUDGET ((int64_t)1 << 22)   /* elements: 16 MiB of f32 */

/* The budget; NNC_TEST_CONV_SCRATCH (elements) lowers it so that tests can run several
 * chunks on small tensors (tests/ref/test_conv_torch.py). */
static int64_t conv_scratch_budget(void) {
    const char *v = getenv("NNC_TEST_CONV_SCRATCH");
    long long b = v ? atoll(v) : 0;
    return b > 0 && b < CONV_SCRATCH_BUDGET ? (int64_t)b : CONV_SCRATCH_BUDGET;
}

static void plan_conv_scratch(const Program *p, Launch *L) {
    const Node *r = &p->g->nodes[L->root];
    if (!op_has(r->op, OPF_CONV)) return;
    SpatialGeom q = spatial_geom(p->g, r);
    int64_t n = dim_size(q.N, p->g->batch_max);
    int64_t per = (q.C * q.KH * q.KW + q.OC) * q.OH * q.OW;
    int64_t s = per > 0 ? conv_scratch_budget() / per : n;
    L->chunk = s < 1 ? 1 : s > n ? (n > 0 ? n : 1) : s;
    L->scratch_elems = L->chunk * per;
}

/* A CPU product with bf16/f16 operands or result runs as the f32 GEMM on widened copies (the
 * CBLAS has no half GEMM): A, B and a half C as floats, live during the launch only. */
static void plan_gemm_scratch(const Program *p, Launch *L) {
    const Graph *g = p->g;
    if (p->target != DEV_CPU) return;
    int x[3] = {L->a, L->b, L->root};
    int64_t n = 0;
    for (int j = 0; j < 3; j++)
        if (DTYPE_IS_HALF(g->nodes[x[j]].dtype)) n += shape_numel(g->nodes[x[j]].shape, g->batch_max);
    L->scratch_elems = n;
}

int64_t program_act_peak(const Program *p, Device d) {
    int64_t m = 0;
    for (int k = 0; k < ENTRY_COUNT; k++)
        if (p->entry[k].act_elems[d] > m) m = p->entry[k].act_elems[d];
    return m;
}

int64_t program_act_base(const Program *p, Device d) {
    int64_t at = 0;
    for (int x = DEV_CUDA; x < (int)d; x++) at += program_act_peak(p, (Device)x);
    return at;
}

void pass_plan(Program *p, Entry *e) {
    Graph *g = p->g;
    e->buf = arena_alloc(g->arena, (size_t)g->n * sizeof(Buffer));
    plan_persistent(p, e);
    int *last = xmalloc((size_t)g->n * sizeof(int));
    for (int i = 0; i < g->n; i++) last[i] = -1;
    for (int k = 0; k < e->nlaunch; k++) {
        const Launch *L = &e->launches[k];
        for (int j = 0; j < L->nins; j++) {
            int r = storage_root(p, e, L->ins[j]);
            if (last[r] < k) last[r] = k;
        }
    }
    for (int i = 0; i < e->noutputs; i++) last[storage_root(p, e, e->outputs[i])] = e->nlaunch + 1;
    Arena1 A[NNC_MAX_DEVICES] = {{0}};
    e->naive_elems = 0;
    for (int k = 0; k < e->nlaunch; k++) {
        const Launch *L = &e->launches[k];
        for (int j = 0; j < L->nouts; j++) {
            int o = L->outs[j];
            Buffer *b = &e->buf[o];
            if (e->inplace && e->inplace[o] >= 0) {
                *b = e->buf[e->inplace[o]];
                continue;
            }
            b->kind = BUF_ACT;
            b->elems = shape_numel(g->nodes[o].shape, g->batch_max);
            b->dev = g->nodes[o].dev;
            int64_t size = align_up(slots(p, o, b->elems));
            e->naive_elems += size;
            int lst = last[o] < k ? k : last[o];
            if (!reuse_input(p, e, L, k, last, A, o, lst)) b->offset = arena1_alloc(&A[b->dev], size, lst, o, k);
        }
        if (L->kind == L_HELPER || L->kind == L_GEMM) {
            Launch *W = &e->launches[k];
            if (L->kind == L_GEMM) plan_gemm_scratch(p, W);
            else plan_conv_scratch(p, W);
            if (W->scratch_elems) {
                Device dev = g->nodes[L->root].dev;
                W->scratch = arena1_alloc(&A[dev], align_up(W->scratch_elems), k, -1, k);
                e->naive_elems += align_up(W->scratch_elems);
            }
        }
    }
    for (int i = 0; i < g->n; i++)
        if (e->live[i] && op_info[g->nodes[i].op].kind == OK_VIEW) {
            e->buf[i].kind = BUF_ALIAS;
            e->buf[i].alias = storage_root(p, e, i);
        }
    e->act_total = 0;
    for (int d = 0; d < NNC_MAX_DEVICES; d++) {
        e->act_elems[d] = A[d].peak;
        e->act_total += A[d].peak;
        free(A[d].a);
    }
    free(last);
}
