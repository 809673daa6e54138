/* ir.c - graph construction, shapes, printing and the verifier (see ir.h).
 *
 * Shape rules live here, in graph_add2 (NumPy broadcasting) and in the front end for the ops
 * whose shapes depend on parameters; the verifier re-derives every elementwise shape so a pass
 * that builds a malformed node is caught at the pass that built it. */
#include "ir.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* The enum and this table come from the same rows, so every op has its entry. */
#define RULE(fn) {NULL, NULL}
#define DX(d) {d, NULL}
#define DX2(d0, d1) {d0, d1}
#define NOGRAD {NULL, NULL}
#define LEAF {NULL, NULL}
const OpInfo op_info[OP_COUNT] = {
#define X(e, name, kind, arity, attr, flags, surface, expr, grad) \
    [OP_##e] = {name, kind, arity, attr, flags, surface, expr, grad},
#include "ops.def"
#undef X
};
#undef RULE
#undef DX
#undef DX2
#undef NOGRAD
#undef LEAF

/* The flags agree with the row's other columns, for what their users assume: autocast's f32
 * list is elementwise, the spatial ops (attr.win) are each a convolution or a pooling, labels
 * are read by row-wise kernels, a failing op's launch is one whose caller tests the status,
 * and an inline scalar is a leaf. */
#define FACT(e, flags, f, cond, what) _Static_assert(!((flags) & (f)) || (cond), "ops.def: " #e ": " what);
#define X(e, name, kind, arity, attr, flags, surface, expr, grad) \
    FACT(e, flags, OPF_F32_AUTOCAST, (kind) == OK_EW, "OPF_F32_AUTOCAST on an op that is not elementwise") \
    FACT(e, flags, OPF_CONV, (kind) == OK_HELPER && !((flags) & (OPF_POOL)), "OPF_CONV: a helper, no pooling") \
    FACT(e, flags, OPF_CONV | OPF_POOL, (attr) == ATTR_WINDOW, "OPF_CONV or OPF_POOL without ATTR_WINDOW") \
    FACT(e, flags, OPF_LABELS | OPF_ROW_TOTAL, (kind) == OK_ROW, "OPF_LABELS or OPF_ROW_TOTAL: row-wise") \
    FACT(e, flags, OPF_LABELS, (arity) >= 2, "OPF_LABELS: the labels are operand 1") \
    FACT(e, flags, OPF_MAY_FAIL, (kind) == OK_ROW || (kind) == OK_HELPER, "OPF_MAY_FAIL: a row or helper op") \
    FACT(e, flags, OPF_INLINE, (kind) == OK_LEAF, "OPF_INLINE: a leaf") \
    FACT(e, flags, OPF_INDEX, (kind) == OK_EW, "OPF_INDEX: elementwise") \
    FACT(e, flags, OPF_PICKS, (kind) == OK_ROW && (arity) >= 2, "OPF_PICKS: row-wise, the places operand 1") \
    _Static_assert((attr) != ATTR_WINDOW || ((flags) & (OPF_CONV | OPF_POOL)), \
                   "ops.def: " #e ": ATTR_WINDOW, no OPF_CONV or OPF_POOL");
#include "ops.def"
#undef X
#undef FACT

Graph *graph_new(Arena *a) {
    Graph *g = arena_alloc(a, sizeof *g);
    g->arena = a;
    g->loss = -1;
    g->loss_seed = -1;
    g->grad_norm = -1;
    g->batch_max = 1;
    return g;
}

void graph_note(Graph *g, SrcLoc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    Str t = {0};
    str_vprintf(&t, fmt, ap);
    va_end(ap);
    GraphNote *n = arena_alloc(g->arena, (size_t)(g->nnotes + 1) * sizeof *n);
    if (g->nnotes) memcpy(n, g->notes, (size_t)g->nnotes * sizeof *n);
    n[g->nnotes].loc = loc;
    n[g->nnotes].text = arena_strdup(g->arena, t.buf ? t.buf : "");
    g->notes = n;
    g->nnotes++;
    str_free(&t);
}

void graph_print_notes(const Graph *g, FILE *f, const char *prefix) {
    for (int i = 0; i < g->nnotes; i++)
        fprintf(f, "%s%s:%d:%d: note: %s\n", prefix, g->notes[i].loc.file ? g->notes[i].loc.file : "",
                g->notes[i].loc.line, g->notes[i].loc.col, g->notes[i].text);
}

int graph_add(Graph *g, Op op, int nin, const int *in, Shape shape, DType dt, SrcLoc loc) {
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 256;
        g->nodes = xrealloc(g->nodes, (size_t)g->cap * sizeof *g->nodes);
    }
    assert(nin <= NNC_MAX_IN);
    Node *n = &g->nodes[g->n];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->nin = nin;
    for (int i = 0; i < nin; i++) {
        assert(in[i] >= 0 && in[i] < g->n);
        n->in[i] = in[i];
    }
    n->shape = shape;
    n->dtype = dt;
    n->loc = loc;
    n->grad = -1;
    n->origin = g->n;
    if (nin > 0) n->dev = g->nodes[in[0]].dev;
    return g->n++;
}

int graph_add1(Graph *g, Op op, int a, SrcLoc loc) {
    DType dt = op == OP_CAST ? DT_F32 : g->nodes[a].dtype;
    return graph_add(g, op, 1, &a, g->nodes[a].shape, dt, loc);
}

int graph_add2(Graph *g, Op op, int a, int b, SrcLoc loc) {
    Shape s;
    if (!shape_broadcast(g->nodes[a].shape, g->nodes[b].shape, &s)) return -1;
    int in[2] = {a, b};
    return graph_add(g, op, 2, in, s, g->nodes[a].dtype, loc);
}

int graph_const(Graph *g, double v, SrcLoc loc) {
    int id = graph_add(g, OP_CONST, 0, NULL, shape_scalar(), DT_F32, loc);
    g->nodes[id].attr.cnst.value = v;
    return id;
}

bool graph_names(const Graph *g, int x) {
    if (g->loss == x || g->loss_seed == x || g->grad_norm == x) return true;
    for (int i = 0; i < g->nouts; i++)
        if (g->outs[i].node == x) return true;
    return false;
}

void graph_add_out(Graph *g, const char *name, int node) {
    g->outs = xrealloc(g->outs, (size_t)(g->nouts + 1) * sizeof *g->outs);
    g->outs[g->nouts].name = name;
    g->outs[g->nouts].node = node;
    g->nouts++;
}

Shape shape_scalar(void) {
    Shape s = {0};
    return s;
}

Shape shape_of(int rank, const int64_t *d) {
    Shape s = {0};
    s.rank = rank;
    for (int i = 0; i < rank; i++) s.d[i] = d[i];
    return s;
}

int64_t shape_numel(Shape s, int64_t batch) {
    int64_t n = 1;
    for (int i = 0; i < s.rank; i++) n *= dim_size(s.d[i], batch);
    return n;
}

int64_t shape_prod(Shape s, uint32_t mask, bool *batch) {
    int64_t n = 1;
    *batch = false;
    for (int i = 0; i < s.rank; i++) {
        if (!(mask >> i & 1)) continue;
        *batch |= dim_is_batch(s.d[i]);
        n *= dim_size(s.d[i], 1);
    }
    return n;
}

bool shape_eq(Shape a, Shape b) {
    if (a.rank != b.rank) return false;
    for (int i = 0; i < a.rank; i++)
        if (a.d[i] != b.d[i]) return false;
    return true;
}

/* NumPy broadcasting: align on the right; a size-1 axis stretches.  The batch axis only matches
 * itself or 1. */
bool shape_broadcast(Shape a, Shape b, Shape *out) {
    Shape r = {0};
    r.rank = a.rank > b.rank ? a.rank : b.rank;
    for (int i = 0; i < r.rank; i++) {
        int ia = a.rank - r.rank + i, ib = b.rank - r.rank + i;
        int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
        if (da == db || db == 1)
            r.d[i] = da;
        else if (da == 1)
            r.d[i] = db;
        else
            return false;
    }
    *out = r;
    return true;
}

bool matmul_shape(Shape a, Shape b, Shape *out) {
    if (a.rank < 2 || b.rank < 2 || a.d[a.rank - 1] != b.d[b.rank - 2]) return false;
    Shape lead = a.rank >= b.rank ? a : b;   /* the operand whose leading axes the result has */
    if (a.rank > 2 && b.rank > 2) {
        if (a.rank != b.rank) return false;
        for (int i = 0; i < a.rank - 2; i++)
            if (a.d[i] != b.d[i]) return false;
    }
    Shape r = lead;
    r.d[r.rank - 2] = a.d[a.rank - 2];
    r.d[r.rank - 1] = b.d[b.rank - 1];
    int batch_axes = 0;
    for (int i = 0; i < r.rank; i++) batch_axes += dim_is_batch(r.d[i]);
    if (batch_axes > 1) return false;
    *out = r;
    return true;
}

bool matmul_is_sum(Shape a, Shape b, Shape c) {
    return c.rank == 2 && a.rank > 2 && a.rank == b.rank;
}

DType dtype_join(const Graph *g, int nin, const int *in, DType dflt) {
    DType t = dflt;
    bool any = false;
    for (int j = 0; j < nin; j++) {
        const Node *x = &g->nodes[in[j]];
        if (x->dtype == DT_I32 || op_has(x->op, OPF_INLINE)) continue;
        if (!any) t = x->dtype;
        else if (t != x->dtype) t = DT_F32;
        any = true;
    }
    return t;
}

void node_perm(const Node *n, int8_t perm[IR_MAX_RANK]) {
    int r = n->shape.rank;
    for (int i = 0; i < IR_MAX_RANK; i++) perm[i] = (int8_t)i;
    if (n->op == OP_PERMUTE) memcpy(perm, n->attr.perm.p, IR_MAX_RANK);
    else if (r >= 2) perm[r - 2] = (int8_t)(r - 1), perm[r - 1] = (int8_t)(r - 2);
}

int shape_batch_axis(Shape s) {
    for (int i = 0; i < s.rank; i++)
        if (dim_is_batch(s.d[i])) return i;
    return -1;
}

const char *node_op_name(const Node *n, char buf[48]) {
    if (n->op != OP_DERIV) return op_info[n->op].name;
    const OpInfo *of = &op_info[n->attr.deriv.of];
    if (of->arity == 1) snprintf(buf, 48, "%s_grad", of->name);
    else snprintf(buf, 48, "%s_grad%d", of->name, n->attr.deriv.wrt);
    return buf;
}

const char *dtype_name(DType t) { return t == DT_I32 ? "i32" : t == DT_BF16 ? "bf16" : t == DT_F16 ? "f16" : "f32"; }
const char *device_name(Device d) {
    static const char *const names[NNC_MAX_DEVICES] = {"cpu", "cuda", "cuda:1", "cuda:2", "cuda:3", "cuda:4",
                                                       "cuda:5", "cuda:6", "cuda:7"};
    return (int)d >= 0 && (int)d < NNC_MAX_DEVICES ? names[d] : "?";
}

const char *device_spelling(Device d) {
    static const char *const names[NNC_MAX_DEVICES] = {"cpu", "cuda", "cuda(1)", "cuda(2)", "cuda(3)", "cuda(4)",
                                                       "cuda(5)", "cuda(6)", "cuda(7)"};
    return (int)d >= 0 && (int)d < NNC_MAX_DEVICES ? names[d] : "?";
}

char *shape_str(Shape s, DType dt, const char *bname, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "%s[", dtype_name(dt));
    for (int i = 0; i < s.rank && k < n; i++) {
        if (s.d[i] == DIM_BATCH)
            k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "," : "", bname ? bname : "B");
        else if (dim_is_batch(s.d[i]))
            k += (size_t)snprintf(buf + k, n - k, "%s%s*%" PRId64, i ? "," : "", bname ? bname : "B", -s.d[i]);
        else
            k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? "," : "", s.d[i]);
    }
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

void ir_users(const Graph *g, int **users, int *nusers) {
    memset(nusers, 0, (size_t)g->n * sizeof *nusers);
    for (int i = 0; i < g->n; i++)
        for (int j = 0; j < g->nodes[i].nin; j++) nusers[g->nodes[i].in[j]]++;
    for (int i = 0; i < g->n; i++) {
        users[i] = nusers[i] ? arena_alloc(g->arena, (size_t)nusers[i] * sizeof(int)) : NULL;
        nusers[i] = 0;
    }
    for (int i = 0; i < g->n; i++)
        for (int j = 0; j < g->nodes[i].nin; j++) {
            int a = g->nodes[i].in[j];
            users[a][nusers[a]++] = i;
        }
}

static void ir_print_scalars(const double *p, int n, FILE *f) {
    for (int i = 0; i < n; i++) fprintf(f, "%s%g", i ? "," : " ", p[i]);
}

/* The node's attribute record, by the kind its op declares. */
static void ir_print_attr(const Node *n, FILE *f) {
    const Attr *a = &n->attr;
    switch (op_info[n->op].attr) {
    case ATTR_NONE: break;
    case ATTR_CONST:
        fprintf(f, " %g%s", a->cnst.value, a->cnst.batch_power == -1 ? "/B" : a->cnst.batch_power == 1 ? "*B" : "");
        break;
    case ATTR_STEP:
        if (a->step.fn == STEP_T) fprintf(f, " t");
        else if (a->step.fn == STEP_ONE_MINUS_POW) fprintf(f, " 1-%g^t", a->step.base);
        else if (a->step.fn == STEP_ACCUMULATED) fprintf(f, " micro>0");
        else fprintf(f, " t==1?1:%g", a->step.base);
        break;
    case ATTR_SCALARS:
        if (n->op == OP_POWC) fprintf(f, " ^%g", a->scalars.p[0]);
        else if (n->op == OP_CROSS_ENTROPY || n->op == OP_CE_GRAD) { /* what differs from torch's defaults */
            if (a->scalars.p[0] != -100) fprintf(f, " ignore_index=%g", a->scalars.p[0]);
            if (a->scalars.p[1] != 0) fprintf(f, " label_smoothing=%g", a->scalars.p[1]);
        } else ir_print_scalars(a->scalars.p, 1, f);
        break;
    case ATTR_AXES: fprintf(f, " axes=0x%x%s", (unsigned)a->axes.mask, a->axes.keepdim ? " keepdim" : ""); break;
    case ATTR_INIT: break;
    case ATTR_DERIV: break;   /* in the name: relu_grad */
    case ATTR_PERM:
        for (int i = 0; i < n->shape.rank; i++) fprintf(f, "%s%d", i ? "," : " perm=", a->perm.p[i]);
        break;
    case ATTR_SLICE:
        fprintf(f, " axis=%d", a->slice.axis);
        if (n->op != OP_CONCAT) fprintf(f, " start=%lld step=%lld", (long long)a->slice.start, (long long)a->slice.step);
        break;
    case ATTR_WINDOW:
        if (op_has(n->op, OPF_POOL)) fprintf(f, " kernel=%dx%d", a->win.k[0], a->win.k[1]);
        fprintf(f, " stride=%d,%d padding=%d,%d", a->win.s[0], a->win.s[1], a->win.p[0], a->win.p[1]);
        if (a->win.d[0] != 1 || a->win.d[1] != 1) fprintf(f, " dilation=%d,%d", a->win.d[0], a->win.d[1]);
        if (a->win.groups > 1) fprintf(f, " groups=%d", a->win.groups);
        break;
    case ATTR_ATTN:
        fprintf(f, " scale=%g%s", a->attn.scale, a->attn.causal ? " causal" : "");
        if (a->attn.dropout > 0) fprintf(f, " dropout=%g key=%d", a->attn.dropout, attention_key(n));
        if (a->attn.heads)
            fprintf(f, " heads=%d%s cols=%d,%d,%d", a->attn.heads, a->attn.packed ? " packed" : "", a->attn.col[0],
                    a->attn.col[1], a->attn.col[2]);
        break;
    }
}

int64_t spatial_out_dim(int64_t in, int k, int s, int p, int d) {
    int64_t span = in + 2 * (int64_t)p - (int64_t)d * (k - 1) - 1;
    return span < 0 ? 0 : span / s + 1;
}

SpatialGeom spatial_geom(const Graph *g, const Node *n) {
    const Attr *a = &n->attr;
    Shape x, y, w = {0};
    if (n->op == OP_CONV2D) { x = g->nodes[n->in[0]].shape; w = g->nodes[n->in[1]].shape; y = n->shape; }
    else if (n->op == OP_CONV2D_DX) { x = n->shape; w = g->nodes[n->in[1]].shape; y = g->nodes[n->in[0]].shape; }
    else if (n->op == OP_CONV2D_DW) { x = g->nodes[n->in[1]].shape; w = n->shape; y = g->nodes[n->in[0]].shape; }
    else if (n->op == OP_MAX_POOL2D || n->op == OP_AVG_POOL2D) { x = g->nodes[n->in[0]].shape; y = n->shape; }
    else { x = n->shape; y = g->nodes[n->in[0]].shape; }   /* the pooling gradients: dy first */
    SpatialGeom s = {x.d[0], x.d[1], x.d[2], x.d[3], y.d[1], y.d[2], y.d[3],
                     w.rank ? w.d[2] : a->win.k[0], w.rank ? w.d[3] : a->win.k[1],
                     a->win.s[0], a->win.s[1], a->win.p[0], a->win.p[1], a->win.d[0], a->win.d[1],
                     a->win.groups > 0 ? a->win.groups : 1};
    return s;
}

void ir_print(const Graph *g, FILE *f, const bool *live) {
    static const char *phase[] = {"fwd", "bwd", "upd"};
    char sb[96];
    for (int i = 0; i < g->n; i++) {
        const Node *n = &g->nodes[i];
        if (live && !live[i]) continue;
        char nb[48];
        fprintf(f, "  %%%-4d = %-14s", i, node_op_name(n, nb));
        for (int j = 0; j < n->nin; j++) fprintf(f, "%s%%%d", j ? ", " : " ", n->in[j]);
        ir_print_attr(n, f);
        fprintf(f, "  : %s", shape_str(n->shape, n->dtype, g->batch_name, sb, sizeof sb));
        fprintf(f, " %s %s", device_name(n->dev), phase[n->phase]);
        if (n->op == OP_COPY) {
            int64_t bytes = shape_numel(n->shape, g->batch_max) * 4;
            fprintf(f, " %s->%s %" PRId64 " bytes", device_name(g->nodes[n->in[0]].dev),
                    device_name(n->dev), bytes);
        }
        if (n->name) fprintf(f, "  \"%s\"", n->name);
        if (n->loc.line) fprintf(f, "  ; %s:%d:%d", n->loc.file ? n->loc.file : "", n->loc.line, n->loc.col);
        fputc('\n', f);
    }
    if (g->loss >= 0) fprintf(f, "  loss = %%%d\n", g->loss);
    for (int i = 0; i < g->nouts; i++) fprintf(f, "  out %s = %%%d\n", g->outs[i].name, g->outs[i].node);
    graph_print_notes(g, f, "  ; ");
}

/* q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with the same leading axes, and the node's
 * shape (and a gradient's dy, lse and delta) what they give. */
static bool attention_rows_ok(const Graph *g, const Node *n);
static bool attention_shapes_ok(const Graph *g, const Node *n) {
    if (n->attr.attn.heads) return attention_rows_ok(g, n);
    const Shape *q = &g->nodes[n->in[0]].shape, *k = &g->nodes[n->in[1]].shape, *v = &g->nodes[n->in[2]].shape;
    int r = q->rank;
    if (r < 2 || k->rank != r || v->rank != r) return false;
    for (int d = 0; d < r - 2; d++)
        if (k->d[d] != q->d[d] || v->d[d] != q->d[d]) return false;
    if (k->d[r - 1] != q->d[r - 1] || v->d[r - 2] != k->d[r - 2]) return false;
    Shape y = *q, row = *q; /* the output [..., Tq, Dv] and a row statistic [..., Tq] */
    y.d[r - 1] = v->d[r - 1];
    row.rank--;
    if (n->op == OP_SDPA) return shape_eq(n->shape, y);
    if (n->op == OP_SDPA_LSE) return shape_eq(n->shape, row);
    if (!shape_eq(g->nodes[n->in[3]].shape, y) || !shape_eq(g->nodes[n->in[4]].shape, row) ||
        !shape_eq(g->nodes[n->in[5]].shape, row))
        return false;
    return shape_eq(n->shape, n->op == OP_SDPA_DQ ? *q : n->op == OP_SDPA_DK ? *k : *v);
}

/* heads H (passes/attn_layout.c): q, k and v [B, T, W] tensors whose columns col + [0, H hd)
 * (v: H hdv) are the heads' rows, all three one tensor they tile where packed; the node [B, Tq,
 * H hdv] (y), [B, Tq, H] (lse) or its operand's shape (a gradient; packed: the one gradient). */
static bool attention_rows_ok(const Graph *g, const Node *n) {
    const int64_t H = n->attr.attn.heads, w[3] = {H * n->attr.attn.hd, H * n->attr.attn.hd, H * n->attr.attn.hdv};
    const Shape *x[3];
    for (int j = 0; j < 3; j++) {
        x[j] = &g->nodes[n->in[j]].shape;
        if (x[j]->rank != 3 || x[j]->d[0] != g->nodes[n->in[0]].shape.d[0] || n->attr.attn.col[j] < 0 ||
            n->attr.attn.col[j] + w[j] > x[j]->d[2] || (!n->attr.attn.packed && x[j]->d[2] != w[j]))
            return false;
    }
    if (n->attr.attn.hd <= 0 || n->attr.attn.hdv <= 0 || x[1]->d[1] != x[2]->d[1]) return false;
    if (n->attr.attn.packed && (n->in[1] != n->in[0] || n->in[2] != n->in[0] || w[0] + w[1] + w[2] != x[0]->d[2]))
        return false;
    Shape y = {3, {x[0]->d[0], x[0]->d[1], w[2]}}, row = {3, {x[0]->d[0], x[0]->d[1], H}};
    if (n->op == OP_SDPA) return shape_eq(n->shape, y);
    if (n->op == OP_SDPA_LSE) return shape_eq(n->shape, row);
    if (!shape_eq(g->nodes[n->in[3]].shape, y) || !shape_eq(g->nodes[n->in[4]].shape, row) ||
        !shape_eq(g->nodes[n->in[5]].shape, row))
        return false;
    if (n->attr.attn.packed && n->op != OP_SDPA_DQ) return false;
    return shape_eq(n->shape, *x[n->op == OP_SDPA_DQ ? 0 : n->op == OP_SDPA_DK ? 1 : 2]);
}

/* layer_norm_rows_grad(dy, x[, w][, r]) (passes/fold_rows.c): dy, x and r of its shape, w [C]. */
static bool ln_grad_ok(const Graph *g, const Node *n) {
    const bool w = n->attr.scalars.p[1] != 0, r = n->attr.scalars.p[2] != 0;
    if (n->nin != 2 + w + r || n->shape.rank < 1) return false;
    const int64_t C = n->shape.d[n->shape.rank - 1];
    for (int j = 0; j < n->nin; j++) {
        const Shape *s = &g->nodes[n->in[j]].shape;
        if (w && j == 2 ? s->rank != 1 || s->d[0] != C : !shape_eq(*s, n->shape)) return false;
    }
    return true;
}

static bool verify_fail(const Graph *g, int i, const char *pass, const char *what) {
    fprintf(stderr, "nnc: internal error: IR invalid after %s: node %%%d (%s): %s\n", pass, i,
            op_info[g->nodes[i].op].name, what);
    return false;
}

/* Checks the invariants every pass relies on: operands precede users, arity matches the table,
 * elementwise shapes are the broadcast of their operands, devices of operands agree except
 * across a COPY, and leaves have names. */
bool ir_verify(const Graph *g, const char *pass) {
    /* devices are assigned by placement and reconciled by copies; before that a user's
     * to(x, cuda) legitimately leaves operands on different devices */
    static const char *const unplaced[] = {"parse", "autograd", "optimizer", "placement"};
    bool placed = true;
    for (size_t k = 0; k < NNC_COUNTOF(unplaced); k++)
        if (!strcmp(pass, unplaced[k])) placed = false;
    for (int i = 0; i < g->n; i++) {
        const Node *n = &g->nodes[i];
        const OpInfo *oi = &op_info[n->op];
        if (oi->arity >= 0 && n->nin != oi->arity) return verify_fail(g, i, pass, "wrong operand count");
        if (n->op == OP_LN_GRAD && !ln_grad_ok(g, n)) return verify_fail(g, i, pass, "layer norm gradient's operands");
        for (int j = 0; j < n->nin; j++) {
            if (n->in[j] < 0 || n->in[j] >= i) return verify_fail(g, i, pass, "operand does not precede its user");
            if (placed && n->op != OP_COPY && n->op != OP_ASSIGN && g->nodes[n->in[j]].dev != n->dev &&
                !op_has(g->nodes[n->in[j]].op, OPF_INLINE))
                return verify_fail(g, i, pass, "operand on another device without a copy");
        }
        if (oi->kind == OK_LEAF && !op_has(n->op, OPF_INLINE) && !n->name)
            return verify_fail(g, i, pass, "unnamed leaf");
        if (op_permutes(n->op)) {
            const Shape *x = &g->nodes[n->in[0]].shape;
            int8_t perm[IR_MAX_RANK];
            node_perm(n, perm);
            unsigned seen = 0;
            bool ok = x->rank == n->shape.rank && x->rank >= 2;
            for (int d = 0; ok && d < x->rank; d++) {
                ok = perm[d] >= 0 && perm[d] < x->rank && !(seen >> perm[d] & 1) && n->shape.d[d] == x->d[perm[d]];
                seen |= 1u << (perm[d] & 31);
            }
            if (!ok) return verify_fail(g, i, pass, "shape is not the operand's axes permuted");
        } else if (oi->kind == OK_EW && n->nin > 0) {
            Shape s = g->nodes[n->in[0]].shape;
            for (int j = 1; j < n->nin; j++)
                if (!shape_broadcast(s, g->nodes[n->in[j]].shape, &s))
                    return verify_fail(g, i, pass, "operand shapes do not broadcast");
            Shape t;
            if (!shape_broadcast(s, n->shape, &t) || !shape_eq(t, n->shape))
                return verify_fail(g, i, pass, "shape is not the broadcast of its operands");
        }
        if (n->op == OP_MATMUL) {
            Shape a = g->nodes[n->in[0]].shape, b = g->nodes[n->in[1]].shape, c;
            bool fits = matmul_shape(a, b, &c) &&
                        (shape_eq(c, n->shape) || (matmul_is_sum(a, b, n->shape) && n->shape.d[0] == c.d[c.rank - 2] &&
                                                   n->shape.d[1] == c.d[c.rank - 1]));
            if (!fits) {
                char sa[64], sb[64], sc[64], what[240];
                snprintf(what, sizeof what, "matmul shapes: %s @ %s -> %s",
                         shape_str(a, g->nodes[n->in[0]].dtype, "B", sa, sizeof sa),
                         shape_str(b, g->nodes[n->in[1]].dtype, "B", sb, sizeof sb),
                         shape_str(n->shape, n->dtype, "B", sc, sizeof sc));
                return verify_fail(g, i, pass, what);
            }
        }
        if (oi->attr == ATTR_WINDOW) {
            SpatialGeom q = spatial_geom(g, n);
            Shape x = n->op == OP_CONV2D || n->op == OP_MAX_POOL2D || n->op == OP_AVG_POOL2D
                          ? g->nodes[n->in[0]].shape : n->op == OP_CONV2D_DW ? g->nodes[n->in[1]].shape : n->shape;
            if (x.rank != 4 || q.SH < 1 || q.SW < 1 || q.DH < 1 || q.DW < 1 || q.PH < 0 || q.PW < 0 ||
                q.OH != spatial_out_dim(q.H, (int)q.KH, (int)q.SH, (int)q.PH, (int)q.DH) ||
                q.OW != spatial_out_dim(q.W, (int)q.KW, (int)q.SW, (int)q.PW, (int)q.DW) ||
                q.C % q.G || q.OC % q.G)
                return verify_fail(g, i, pass, "spatial geometry");
        }
        if (oi->attr == ATTR_SLICE) {
            const Shape *y = &n->shape;
            int ax = n->attr.slice.axis;
            int64_t len = 0;
            bool ok = ax >= 0 && ax < y->rank && !dim_is_batch(y->d[ax]) && n->nin >= 1 && n->nin <= CONCAT_MAX_IN;
            for (int j = 0; ok && j < n->nin; j++) {
                const Shape *x = &g->nodes[n->in[j]].shape;
                ok = x->rank == y->rank;
                for (int d = 0; ok && d < y->rank; d++) ok = d == ax || x->d[d] == y->d[d];
                len += ok ? x->d[ax] : 0;
            }
            if (ok && n->op == OP_CONCAT) ok = len == y->d[ax];
            if (ok && n->op != OP_CONCAT) {
                int64_t big = n->op == OP_SLICE ? len : y->d[ax], small = n->op == OP_SLICE ? y->d[ax] : len;
                int64_t last = n->attr.slice.start + (small - 1) * n->attr.slice.step; /* step -1: flip's */
                ok = (n->attr.slice.step >= 1 || n->attr.slice.step == -1) && n->attr.slice.start >= 0 &&
                    n->attr.slice.start < big && small >= 1 && last >= 0 && last < big;
            }
            if (!ok) return verify_fail(g, i, pass, "concat/slice shapes");
        }
        if (shape_batch_axis(n->shape) >= 0) {
            Shape t = n->shape;
            t.d[shape_batch_axis(t)] = 1;
            if (shape_batch_axis(t) >= 0) return verify_fail(g, i, pass, "two batch axes");
        }
        if (n->op == OP_RESHAPE) { /* a view: the same elements, B a factor of both or neither */
            bool bx, by;
            int64_t kx = shape_prod(g->nodes[n->in[0]].shape, ~0u, &bx), ky = shape_prod(n->shape, ~0u, &by);
            if (kx != ky || bx != by) return verify_fail(g, i, pass, "reshape changes the element count");
        }
        if (oi->kind == OK_ATTENTION && !attention_shapes_ok(g, n)) return verify_fail(g, i, pass, "attention shapes");
        if (n->op == OP_ASSIGN && !shape_eq(g->nodes[n->in[0]].shape, g->nodes[n->in[1]].shape))
            return verify_fail(g, i, pass, "assign shapes differ");
    }
    return true;
}
