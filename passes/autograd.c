/* autograd.c - reverse-mode differentiation as a graph pass.
 *
 * Walks the graph from the loss back to the parameters in reverse order and, per op, adds the
 * nodes of its gradient rule (the table below, built from ops.def's grad column: an elementwise
 * op's DX expression, or a hand-written rule), summing where a value has several users.  The
 * new nodes are tagged PH_BACKWARD and keep the forward node's source location, so a backward
 * kernel names the .nn line it differentiates.  Only values that depend on a parameter get a
 * gradient.  Transposes are pushed through matrix products (T(A@B) = T(B)@T(A)) so that weight
 * gradients come out as one GEMM in the parameter's own layout. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* The gradient g of a unit-step slice of x, held until x's gradient is complete (flush_slices). */
typedef struct {
    int slice, g, next; /* the SLICE node, its gradient, the next one of the same x or -1 */
} SliceGrad;

typedef struct {
    Graph *g;
    int *grad;          /* forward node -> accumulated gradient node, or -1 */
    bool *needs;        /* depends on a parameter */
    const Node *at;     /* the forward node whose rule is being applied */
    int *pend; /* forward node -> its first held slice gradient in sg[], or -1 */
    SliceGrad *sg;
    int nsg, capsg;
} Ad;

int graph_node_at(Graph *g, Op op, int nin, const int *in, Shape s, DType dt, const Node *like) {
    SrcLoc loc = like->loc;
    Phase ph = like->phase;
    Device dev = like->dev;
    bool fixed = like->dev_fixed;   /* a gradient runs where its forward op ran (model parallel) */
    const char *scope = like->scope;
    int id = graph_add(g, op, nin, in, s, dt, loc);
    g->nodes[id].phase = ph;
    g->nodes[id].dev = dev;
    g->nodes[id].dev_fixed = fixed;
    g->nodes[id].scope = scope;
    return id;
}

bool node_is_inline(const Node *n) { return op_has(n->op, OPF_INLINE); }

static Node ad_like(Ad *A) {
    Node n = *A->at;
    n.phase = PH_BACKWARD;
    return n;
}

/* A gradient node's type: as passes/autocast.c types the forward (dtype_join); reductions,
 * row-wise kernels and helpers give f32. */
static DType grad_dtype(Ad *A, Op op, int nin, const int *in) {
    if (op_info[op].kind != OK_EW && op_info[op].kind != OK_VIEW && op != OP_MATMUL) return DT_F32;
    return dtype_join(A->g, nin, in, DT_F32);
}

static int mk(Ad *A, Op op, int nin, const int *in, Shape s) {
    Node like = ad_like(A);
    return graph_node_at(A->g, op, nin, in, s, grad_dtype(A, op, nin, in), &like);
}

static int mk1(Ad *A, Op op, int a) { return mk(A, op, 1, &a, A->g->nodes[a].shape); }

static int mk2(Ad *A, Op op, int a, int b) {
    Shape s;
    shape_broadcast(A->g->nodes[a].shape, A->g->nodes[b].shape, &s);
    int in[2] = {a, b};
    return mk(A, op, 2, in, s);
}

static int mkconst(Ad *A, double v, int batch_pow) {
    Node like = ad_like(A);
    int c = graph_node_at(A->g, OP_CONST, 0, NULL, shape_scalar(), DT_F32, &like);
    A->g->nodes[c].attr.cnst.value = v;
    A->g->nodes[c].attr.cnst.batch_power = batch_pow;
    return c;
}

/* Sum a gradient of a broadcast result back to the operand's shape. */
static int sum_to(Ad *A, int g, Shape s) {
    if (shape_eq(A->g->nodes[g].shape, s)) return g;
    return mk(A, OP_SUM_TO, 1, &g, s);
}

static int expand(Ad *A, int g, Shape s) {
    if (shape_eq(A->g->nodes[g].shape, s)) return g;
    return mk(A, OP_EXPAND, 1, &g, s);
}

/* The last two axes swapped. */
static Shape swap_last(Shape s) {
    int64_t t = s.d[s.rank - 1];
    s.d[s.rank - 1] = s.d[s.rank - 2];
    s.d[s.rank - 2] = t;
    return s;
}

/* a @ b, or with `sum` the sum of the products over the leading axes (a 2-d result). */
static int matmul_to(Ad *A, int a, int b, bool sum) {
    int in[2] = {a, b};
    Shape s;
    matmul_shape(A->g->nodes[a].shape, A->g->nodes[b].shape, &s);
    if (sum) s = shape_of(2, &s.d[s.rank - 2]);
    return mk(A, OP_MATMUL, 2, in, s);
}

static int matmul(Ad *A, int a, int b) { return matmul_to(A, a, b, false); }

static int transpose(Ad *A, int x) {
    Node *n = &A->g->nodes[x];
    if (n->op == OP_TRANSPOSE) return n->in[0];
    if (n->op == OP_MATMUL && n->phase == PH_BACKWARD) {   /* built by us, used only here */
        bool sum = matmul_is_sum(A->g->nodes[n->in[0]].shape, A->g->nodes[n->in[1]].shape, n->shape);
        int a = n->in[0], b = n->in[1], in[2];   /* read first: transpose() may move the array */
        in[0] = transpose(A, b);                  /* in order: initializers are not sequenced */
        in[1] = transpose(A, a);
        return matmul_to(A, in[0], in[1], sum);
    }
    return mk(A, OP_TRANSPOSE, 1, &x, swap_last(n->shape));
}

/* x with its axes in the order perm (output axis i is x's axis perm[i], a local array): a
 * transpose when that swaps the last two (it folds into products), else a permute. */
static int permute(Ad *A, int x, const int8_t *perm) {
    Shape xs = A->g->nodes[x].shape, s = xs;
    int r = xs.rank;
    bool swap = r >= 2 && perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
    for (int i = 0; i < r; i++) {
        s.d[i] = xs.d[perm[i]];
        swap &= i >= r - 2 || perm[i] == i;
    }
    if (swap) return transpose(A, x);
    int p = mk(A, OP_PERMUTE, 1, &x, s);
    memcpy(A->g->nodes[p].attr.perm.p, perm, IR_MAX_RANK);
    return p;
}

/* x's gradient has x's type (torch: a half tensor's .grad is half, a parameter's f32). */
static void accumulate(Ad *A, int x, int gx) {
    if (!A->needs[x] || gx < 0) return;
    DType t = A->g->nodes[x].dtype;
    if (A->g->nodes[gx].dtype != t && t != DT_I32) {
        Node like = ad_like(A);
        gx = graph_node_at(A->g, OP_CAST, 1, &gx, A->g->nodes[gx].shape, t, &like);
    }
    A->grad[x] = A->grad[x] < 0 ? gx : mk2(A, OP_ADD, A->grad[x], gx);
}

/* The reduced axes' gradient: reshape to keepdim form, then broadcast to the input shape. */
static int unreduce(Ad *A, const Node *n, int g) {
    Shape in = A->g->nodes[n->in[0]].shape, keep = in;
    for (int i = 0; i < in.rank; i++)
        if (n->attr.axes.mask >> i & 1) keep.d[i] = 1;
    /* Reduced leading axes need no reshape: NumPy broadcasting aligns on the right. */
    bool prefix = true;
    for (int i = 0, seen_kept = 0; i < in.rank; i++) {
        if (!(n->attr.axes.mask >> i & 1)) seen_kept = 1;
        else if (seen_kept) prefix = false;
    }
    int r = g;
    if (!prefix && !shape_eq(A->g->nodes[g].shape, keep)) r = mk(A, OP_RESHAPE, 1, &g, keep);
    return expand(A, r, in);
}

static int reduce_count_const(Ad *A, const Node *n) {
    bool b;
    int64_t k = shape_prod(A->g->nodes[n->in[0]].shape, n->attr.axes.mask, &b);
    return mkconst(A, 1.0 / (double)k, b ? -1 : 0);
}

/* amax semantics: the gradient is shared evenly among the elements equal to the maximum. */
static void grad_max(Ad *A, int id, int g) {
    Node n = A->g->nodes[id];   /* a copy: adding nodes may move the array */
    int x = n.in[0];
    int eq = mk2(A, OP_EQ, x, unreduce(A, &n, id));
    Shape keep = A->g->nodes[x].shape;
    for (int i = 0; i < keep.rank; i++)
        if (n.attr.axes.mask >> i & 1) keep.d[i] = 1;
    int cnt = mk(A, OP_SUM, 1, &eq, keep);
    A->g->nodes[cnt].attr.axes.mask = n.attr.axes.mask;
    A->g->nodes[cnt].attr.axes.keepdim = true;
    accumulate(A, x, mk2(A, OP_DIV, mk2(A, OP_MUL, unreduce(A, &n, g), eq), cnt));
}

/* ---- the rules, one per ops.def row that names one -------------------------------------- */

/* Declared from ops.def's grad column, and the table built from it: a rule a row names and
 * this file does not define fails the build ("used but never defined", then the link). */
typedef void GradRule(Ad *A, int id, int g);
#define RULE(fn) static GradRule fn;
#define DX(d)
#define DX2(d0, d1)
#define NOGRAD
#define LEAF
#define X(e, name, kind, arity, attr, flags, surface, expr, grad) grad
#include "../ir/ops.def"
#undef X
#undef RULE
#undef DX
#undef DX2
#undef NOGRAD
#undef LEAF
static GradRule grad_ew, grad_none;

static GradRule *const grad_rules[OP_COUNT] = {
#define RULE(fn) fn
#define DX(d) grad_ew
#define DX2(d0, d1) grad_ew
#define NOGRAD grad_none
#define LEAF grad_none
#define X(e, name, kind, arity, attr, flags, surface, expr, grad) [OP_##e] = grad,
#include "../ir/ops.def"
#undef X
#undef RULE
#undef DX
#undef DX2
#undef NOGRAD
#undef LEAF
};

/* Operand k of node id and its shape (the node may move as nodes are added: read first). */
static int opnd(Ad *A, int id, int k) { return A->g->nodes[id].in[k]; }
static Shape opshape(Ad *A, int id, int k) { return A->g->nodes[opnd(A, id, k)].shape; }

static void grad_none(Ad *A, int id, int g) { (void)A, (void)id, (void)g; }

/* Which of $g $0 $1 $y a DX expression reads. */
static bool dx_reads(const char *dx, const char *sym) { return strstr(dx, sym) != NULL; }

/* DX/DX2 rows: one DERIV node per operand that needs a gradient, reading only the values its
 * expression names, summed back to the operand's shape when the op broadcast it. */
static void grad_ew(Ad *A, int id, int g) {
    Node n = A->g->nodes[id];
    for (int k = 0; k < n.nin && k < 2; k++) {
        const char *dx = op_info[n.op].dx[k];
        if (!dx || !A->needs[n.in[k]]) continue;
        static const char *const sym[DERIV_NSYM] = {"$g", "$0", "$1", "$y"};
        int val[DERIV_NSYM] = {g, n.in[0], n.nin > 1 ? n.in[1] : -1, id}, in[NNC_MAX_IN], nin = 0;
        Attr at = {.deriv = {.of = n.op, .wrt = k}};
        for (int s = 0; s < DERIV_NSYM; s++) {
            at.deriv.slot[s] = -1;
            if (val[s] >= 0 && (s == DERIV_G || dx_reads(dx, sym[s]))) {
                at.deriv.slot[s] = (int8_t)nin;
                in[nin++] = val[s];
            }
        }
        if (op_info[n.op].attr == ATTR_SCALARS) memcpy(at.deriv.p, n.attr.scalars.p, sizeof at.deriv.p);
        int d = mk(A, OP_DERIV, nin, in, n.shape);
        A->g->nodes[d].attr = at;
        accumulate(A, n.in[k], sum_to(A, d, A->g->nodes[n.in[k]].shape));
    }
}

static void grad_add(Ad *A, int id, int g) {
    int a = opnd(A, id, 0), b = opnd(A, id, 1);
    if (A->needs[a]) accumulate(A, a, sum_to(A, g, opshape(A, id, 0)));
    if (A->needs[b]) accumulate(A, b, sum_to(A, g, opshape(A, id, 1)));
}

static void grad_sub(Ad *A, int id, int g) {
    int a = opnd(A, id, 0), b = opnd(A, id, 1);
    accumulate(A, a, sum_to(A, g, opshape(A, id, 0)));
    if (A->needs[b]) accumulate(A, b, sum_to(A, mk1(A, OP_NEG, g), opshape(A, id, 1)));
}

static void grad_mul(Ad *A, int id, int g) {
    int a = opnd(A, id, 0), b = opnd(A, id, 1);
    if (A->needs[a]) accumulate(A, a, sum_to(A, mk2(A, OP_MUL, g, b), opshape(A, id, 0)));
    if (A->needs[b]) accumulate(A, b, sum_to(A, mk2(A, OP_MUL, g, a), opshape(A, id, 1)));
}

static void grad_div(Ad *A, int id, int g) {
    int a = opnd(A, id, 0), b = opnd(A, id, 1);
    if (A->needs[a]) accumulate(A, a, sum_to(A, mk2(A, OP_DIV, g, b), opshape(A, id, 0)));
    if (A->needs[b])
        accumulate(A, b, sum_to(A, mk1(A, OP_NEG, mk2(A, OP_MUL, g, mk2(A, OP_DIV, id, b))), opshape(A, id, 1)));
}

/* x ** c: c * x^(c-1), with x^1 written as x (torch's pow kernel special-cases the same). */
static void grad_powc(Ad *A, int id, int g) {
    int a = opnd(A, id, 0);
    double c = A->g->nodes[id].attr.scalars.p[0];
    if (c == 0) {   /* x ** 0 is 1 everywhere, NaN included: torch's gradient is 0, not 0 * x^-1 */
        accumulate(A, a, expand(A, mkconst(A, 0, 0), opshape(A, id, 0)));
        return;
    }
    int d = a;
    if (c != 2) {
        d = mk1(A, OP_POWC, a);
        A->g->nodes[d].attr.scalars.p[0] = c - 1;
    }
    accumulate(A, a, mk2(A, OP_MUL, g, mk2(A, OP_MUL, mkconst(A, c, 0), d)));
}

static void grad_expand(Ad *A, int id, int g) { accumulate(A, opnd(A, id, 0), sum_to(A, g, opshape(A, id, 0))); }
static void grad_sum_to(Ad *A, int id, int g) { accumulate(A, opnd(A, id, 0), expand(A, g, opshape(A, id, 0))); }

static void grad_sum(Ad *A, int id, int g) {
    Node n = A->g->nodes[id];
    accumulate(A, n.in[0], unreduce(A, &n, g));
}

static void grad_mean(Ad *A, int id, int g) {
    Node n = A->g->nodes[id];
    int u = unreduce(A, &n, g);   /* one node per statement: node ids must not depend on the
                                     compiler's order of evaluating arguments */
    accumulate(A, n.in[0], mk2(A, OP_MUL, u, reduce_count_const(A, &n)));
}

/* The gradient is a training-mode quantity: it flows to the training operand alone. */
static void grad_mode(Ad *A, int id, int g) { accumulate(A, opnd(A, id, 0), g); }

/* A cast between float types passes the gradient back in the operand's type (accumulate
 * casts it); from i32 there is none. */
static void grad_cast(Ad *A, int id, int g) {
    int x = opnd(A, id, 0);
    if (A->g->nodes[x].dtype != DT_I32) accumulate(A, x, g);
}

static void grad_transpose(Ad *A, int id, int g) { accumulate(A, opnd(A, id, 0), transpose(A, g)); }
/* the gradient goes back through the inverse permutation */
static void grad_permute(Ad *A, int id, int g) {
    int8_t inv[IR_MAX_RANK] = IR_PERM_ID;
    const Node *n = &A->g->nodes[id];
    for (int i = 0; i < n->shape.rank; i++) inv[n->attr.perm.p[i]] = (int8_t)i;
    accumulate(A, opnd(A, id, 0), permute(A, g, inv));
}
/* where(c, a, b): g goes to a where c holds and to b elsewhere (0 on the other side, as torch:
 * no NaN of the unchosen side's gradient leaks through), summed back over broadcast axes. */
static void grad_where(Ad *A, int id, int g) {
    int c = opnd(A, id, 0), a = opnd(A, id, 1), b = opnd(A, id, 2);
    Shape gs = A->g->nodes[g].shape;
    for (int side = 1; side <= 2; side++) {
        int x = side == 1 ? a : b;
        if (!A->needs[x]) continue;
        int zero = mkconst(A, 0, 0), in[3] = {c, side == 1 ? g : zero, side == 1 ? zero : g};
        accumulate(A, x, sum_to(A, mk(A, OP_SELECT, 3, in, gs), A->g->nodes[x].shape));
    }
}

/* tril / triu: the gradient masked as the value was */
static void grad_tri(Ad *A, int id, int g) {
    double p = A->at->attr.scalars.p[0];
    int t = mk(A, A->at->op, 1, &g, A->g->nodes[g].shape);
    A->g->nodes[t].attr.scalars.p[0] = p;
    accumulate(A, opnd(A, id, 0), t);
}

static void grad_reshape(Ad *A, int id, int g) { accumulate(A, opnd(A, id, 0), mk(A, OP_RESHAPE, 1, &g, opshape(A, id, 0))); }

/* dA = G @ B^T, dB = A^T @ G, per matrix of a batched product.  A 2-d operand shared by every
 * matrix of the other gets the sum over the batch: for B (a layer's weight under [B,T,K] @ [K,N])
 * one product whose contraction runs over the leading axes too; for A the batched products
 * summed (SUM_TO). */
static void grad_matmul(Ad *A, int id, int g) {
    int a = opnd(A, id, 0), b = opnd(A, id, 1);
    int r = A->g->nodes[id].shape.rank;
    if (A->needs[a]) {   /* one call per statement: adding nodes may move the array a shape is read from */
        int da = matmul(A, g, transpose(A, b));
        accumulate(A, a, sum_to(A, da, A->g->nodes[a].shape));
    }
    if (A->needs[b]) {
        bool shared = A->g->nodes[b].shape.rank < r;
        accumulate(A, b, matmul_to(A, transpose(A, a), g, shared));
    }
}

/* A spatial op's gradient: its backward form over the same window (attr.win). */
static int spatial(Ad *A, Op op, int nin, int a, int b, Shape s) {
    int in[2] = {a, b};
    int r = mk(A, op, nin, in, s);
    A->g->nodes[r].attr.win = A->at->attr.win;
    return r;
}

/* dx = col2im(W^T @ dy), dW = dy @ im2col(x)^T, as the chunked GEMMs of codegen/helpers.c. */
static void grad_conv2d(Ad *A, int id, int g) {
    int x = opnd(A, id, 0), w = opnd(A, id, 1);
    if (A->needs[x]) accumulate(A, x, spatial(A, OP_CONV2D_DX, 2, g, w, opshape(A, id, 0)));
    if (A->needs[w]) accumulate(A, w, spatial(A, OP_CONV2D_DW, 2, g, x, opshape(A, id, 1)));
}

/* To the first maximum of each window, as torch's saved indices (found again from x). */
static void grad_max_pool2d(Ad *A, int id, int g) {
    int x = opnd(A, id, 0);
    accumulate(A, x, spatial(A, OP_MAX_POOL2D_GRAD, 2, g, x, opshape(A, id, 0)));
}

static void grad_avg_pool2d(Ad *A, int id, int g) {
    accumulate(A, opnd(A, id, 0), spatial(A, OP_AVG_POOL2D_GRAD, 1, g, -1, opshape(A, id, 0)));
}

/* Each operand of a concat gets its slice of the gradient. */
static void grad_concat(Ad *A, int id, int g) {
    (void)id;
    Node n = *A->at;
    int64_t start = 0;
    for (int k = 0; k < n.nin; k++) {
        int x = n.in[k];
        Shape xs = A->g->nodes[x].shape;
        if (A->needs[x]) {
            int s = mk(A, OP_SLICE, 1, &g, xs);
            A->g->nodes[s].attr.slice.axis = n.attr.slice.axis;
            A->g->nodes[s].attr.slice.start = start;
            A->g->nodes[s].attr.slice.step = 1;
            accumulate(A, x, s);
        }
        start += xs.d[n.attr.slice.axis];
    }
}

static void grad_embedding(Ad *A, int id, int g) {
    int w = opnd(A, id, 1), in[2] = {g, opnd(A, id, 0)};
    accumulate(A, w, mk(A, OP_EMBEDDING_GRAD, 2, in, opshape(A, id, 1)));
}

static void slice_grad_alone(Ad *A, int x, int g) {
    int s = mk(A, OP_SLICE_GRAD, 1, &g, A->g->nodes[x].shape);
    A->g->nodes[s].attr.slice = A->at->attr.slice;
    accumulate(A, x, s);
}

/* A unit-step slice's gradient waits for its siblings (flush_slices); others go back alone. */
static void grad_slice(Ad *A, int id, int g) {
    int x = opnd(A, id, 0);
    if (!A->needs[x]) return;
    if (A->at->attr.slice.step != 1) {
        slice_grad_alone(A, x, g);
        return;
    }
    if (A->nsg == A->capsg) A->sg = xrealloc(A->sg, (size_t)(A->capsg = 2 * A->capsg + 8) * sizeof *A->sg);
    A->sg[A->nsg] = (SliceGrad){id, g, A->pend[x]};
    A->pend[x] = A->nsg++;
}

/* x's held slice gradients, once every user of x has given its own: placed back side by side as
 * one CONCAT along their axis, in order, zeros filling the gaps (a split's pieces tile the axis:
 * no zeros), rather than each placed into zeros of x's size and summed -- the gradient of
 * q, k, v = split(qkv, C, 2) is concat((dq, dk, dv), 2).  One slice alone, or slices that overlap
 * or cut different axes, go back one by one (SLICE_GRAD). */
static void flush_slices(Ad *A, int x) {
    int n = 0;
    for (int k = A->pend[x]; k >= 0; k = A->sg[k].next) n++;
    if (!n) return;
    SliceGrad *v = xmalloc((size_t)n * sizeof *v);
    n = 0;
    for (int k = A->pend[x]; k >= 0; k = A->sg[k].next) { /* in order of start */
        int j = n++;
        for (; j > 0 && A->g->nodes[v[j - 1].slice].attr.slice.start > A->g->nodes[A->sg[k].slice].attr.slice.start;
             j--)
            v[j] = v[j - 1];
        v[j] = A->sg[k];
    }
    A->pend[x] = -1;
    int ax = A->g->nodes[v[0].slice].attr.slice.axis;
    bool tile = n > 1;
    for (int k = 0, end = 0; k < n && tile; k++) {
        const Node *s = &A->g->nodes[v[k].slice];
        tile = s->attr.slice.axis == ax && s->attr.slice.start >= end;
        end = (int)(s->attr.slice.start + s->shape.d[ax]);
    }
    Node at = A->g->nodes[v[0].slice];
    A->at = &at;
    if (!tile) {
        for (int k = 0; k < n; k++) {
            at = A->g->nodes[v[k].slice];
            slice_grad_alone(A, x, v[k].g);
        }
        free(v);
        return;
    }
    Shape xs = A->g->nodes[x].shape;
    int *piece = xmalloc((size_t)(2 * n + 1) * sizeof *piece), np = 0;
    int64_t end = 0;
    for (int k = 0; k <= n; k++) {
        int64_t start = k < n ? A->g->nodes[v[k].slice].attr.slice.start : xs.d[ax];
        if (start > end) { /* a gap: zeros */
            Shape z = xs;
            z.d[ax] = start - end;
            int c = mkconst(A, 0, 0);
            piece[np++] = mk(A, OP_EXPAND, 1, &c, z);
        }
        if (k < n) {
            piece[np++] = v[k].g;
            end = start + A->g->nodes[v[k].slice].shape.d[ax];
        }
    }
    int acc = piece[0];
    for (int k = 1; k < np;) { /* four operands a concat, the first what is joined so far */
        int in[CONCAT_MAX_IN] = {acc}, m = 1;
        Shape s = A->g->nodes[acc].shape;
        while (m < CONCAT_MAX_IN && k < np) {
            s.d[ax] += A->g->nodes[piece[k]].shape.d[ax];
            in[m++] = piece[k++];
        }
        acc = mk(A, OP_CONCAT, m, in, s);
        A->g->nodes[acc].attr.slice.axis = ax;
    }
    accumulate(A, x, acc);
    free(piece);
    free(v);
}

/* The backward op of a row-wise op reads the incoming gradient and the op's own result. */
static void grad_row(Ad *A, int id, int g, Op back) {
    int in[2] = {g, id};
    accumulate(A, opnd(A, id, 0), mk(A, back, 2, in, opshape(A, id, 0)));
}

static void grad_softmax(Ad *A, int id, int g) { grad_row(A, id, g, OP_SOFTMAX_GRAD); }
static void grad_log_softmax(Ad *A, int id, int g) { grad_row(A, id, g, OP_LSM_GRAD); }

/* cumsum's gradient: the cumsum of g from the other end. */
static void grad_cumsum(Ad *A, int id, int g) {
    int t = mk(A, OP_CUMSUM, 1, &g, A->g->nodes[g].shape);
    A->g->nodes[t].attr.scalars.p[0] = A->g->nodes[id].attr.scalars.p[0] != 0 ? 0 : 1;
    accumulate(A, opnd(A, id, 0), t);
}

/* gather_rows' gradient: g added at each place of a zero x (scatter_add's rows; a place named
 * twice gets both). */
static void grad_gather_rows(Ad *A, int id, int g) {
    int x = opnd(A, id, 0), c = mkconst(A, 0, 0);
    int in[3] = {mk(A, OP_EXPAND, 1, &c, opshape(A, id, 0)), opnd(A, id, 1), g};
    accumulate(A, x, mk(A, OP_SCATTER_ROWS, 3, in, opshape(A, id, 0)));
}

/* scatter_rows' gradients, torch's: x's is g (zero at the places written, for scatter), each
 * source's g at its place (gather's rows; scatter's every source naming a place gets it, as
 * torch's gather of the gradient gives). */
static void grad_scatter_rows(Ad *A, int id, int g) {
    int x = opnd(A, id, 0), idx = opnd(A, id, 1), src = opnd(A, id, 2);
    bool assign = A->g->nodes[id].attr.scalars.p[0] != 0;
    if (!assign) accumulate(A, x, g);
    else if (A->needs[x]) {
        int c = mkconst(A, 0, 0);
        int in[3] = {g, idx, mk(A, OP_EXPAND, 1, &c, opshape(A, id, 2))};
        int d = mk(A, OP_SCATTER_ROWS, 3, in, opshape(A, id, 0));
        A->g->nodes[d].attr.scalars.p[0] = 1;
        accumulate(A, x, d);
    }
    if (A->needs[src]) {
        int in[2] = {g, idx};
        accumulate(A, src, mk(A, OP_GATHER_ROWS, 2, in, opshape(A, id, 2)));
    }
}

/* layer_norm's rows: the gradient recomputes each row's mean and deviation from x (no
 * statistics kept between the passes), with the forward's eps. */
static void grad_ln_norm(Ad *A, int id, int g) {
    int in[2] = {g, opnd(A, id, 0)};
    int d = mk(A, OP_LN_GRAD, 2, in, opshape(A, id, 0));
    A->g->nodes[d].attr.scalars = A->g->nodes[id].attr.scalars;
    accumulate(A, in[1], d);
}

/* The gradient op carries the loss's ignore_index and label_smoothing. */
static void grad_cross_entropy(Ad *A, int id, int g) {
    int in[3] = {opnd(A, id, 0), opnd(A, id, 1), g};
    int d = mk(A, OP_CE_GRAD, 3, in, opshape(A, id, 0));
    A->g->nodes[d].attr.scalars = A->g->nodes[id].attr.scalars;
    accumulate(A, in[0], d);
}

/* Attention's backward as FlashAttention-2's: the gradients recompute the weights from q, k and
 * each row's logsumexp, which the forward launch writes beside y (attention_lse, a forward node),
 * with delta = sum(dy * y) over each row (an ordinary reduction).  Its dropout mask is drawn
 * again from the forward's key.  With the heads in a projection's rows (passes/attn_layout.c)
 * lse and delta are [B, T, H], delta summing dy and y viewed [B, T, H, Dv], and a packed
 * attention has one gradient, of the projection's whole output. */
static void grad_sdpa(Ad *A, int id, int g) {
    const Node n = A->g->nodes[id]; /* a copy: adding nodes may move the array */
    Shape row = n.shape, heads = n.shape; /* heads: y's rows as [..., H, Dv] (attn_layout.c) */
    row.rank--;
    const int32_t H = n.attr.attn.heads;
    if (H) {
        row.d[row.rank++] = H;
        heads.d[heads.rank - 1] = H, heads.d[heads.rank++] = n.attr.attn.hdv;
    }
    int lse = graph_node_at(A->g, OP_SDPA_LSE, 3, n.in, row, DT_F32, &n);
    A->g->nodes[lse].attr = n.attr;
    Node like = ad_like(A);
    int gy[2] = {g, id};
    if (H) /* the views first: the product then fuses into the sum's launch */
        for (int j = 0; j < 2; j++) gy[j] = mk(A, OP_RESHAPE, 1, &gy[j], heads);
    int prod = graph_node_at(A->g, OP_MUL, 2, gy, A->g->nodes[gy[0]].shape, DT_F32, &like);
    int delta = mk(A, OP_SUM, 1, &prod, row);
    A->g->nodes[delta].attr.axes.mask = 1u << (A->g->nodes[prod].shape.rank - 1);
    int in[6] = {n.in[0], n.in[1], n.in[2], g, lse, delta};
    static const Op back[3] = {OP_SDPA_DQ, OP_SDPA_DK, OP_SDPA_DV};
    for (int j = 0; j < (n.attr.attn.packed ? 1 : 3); j++) { /* packed: one gradient, all three */
        if (!A->needs[n.in[j]]) continue;
        int d = mk(A, back[j], 6, in, A->g->nodes[n.in[j]].shape);
        A->g->nodes[d].attr = n.attr;
        A->g->nodes[d].attr.attn.key = id; /* the forward's origin keys the mask it drew */
        accumulate(A, n.in[j], d);
    }
}

/* The gradient goes back to the operand's device: the copy reversed. */
static void grad_copy(Ad *A, int id, int g) {
    int a = opnd(A, id, 0);
    int c = mk1(A, OP_COPY, g);
    A->g->nodes[c].dev = A->g->nodes[a].dev;   /* back where the operand is (placement decides
                                                   where that is unless the user placed it) */
    A->g->nodes[c].dev_fixed = A->g->nodes[a].dev_fixed;
    accumulate(A, a, c);
}

/* A parameter's gradient must own memory: wrap a constant in an expand. */
static int own_grad(Ad *A, int p, int g) {
    if (!node_is_inline(&A->g->nodes[g])) return g;
    A->at = &A->g->nodes[p];
    return mk(A, OP_EXPAND, 1, &g, A->g->nodes[p].shape);
}

/* GradScaler.scale(loss): with a loss scaler, backward starts from the state "scaler.scale"
 * rather than 1 (pass_optimizer unscales the gradients and updates the scale). */
static void seed_loss_scale(Graph *g, const ScalerConfig *c) {
    if (!c->on) return;
    int s = graph_add(g, OP_STATE, 0, NULL, shape_scalar(), DT_F32, g->nodes[g->loss].loc);
    g->nodes[s].name = "scaler.scale";
    g->nodes[s].phase = PH_BACKWARD;
    g->nodes[s].attr.init.kind = INIT_CONSTANT;
    g->nodes[s].attr.init.a = c->init;
    g->loss_seed = s;
}

void pass_autograd(Graph *g, const ScalerConfig *scaler) {
    if (g->loss < 0) return;
    seed_loss_scale(g, scaler);
    int n0 = g->n;
    Ad A = {.g = g};
    A.grad = xmalloc((size_t)n0 * sizeof(int));
    A.needs = xcalloc((size_t)n0, 1);
    A.pend = xmalloc((size_t)n0 * sizeof(int));
    for (int i = 0; i < n0; i++) {
        A.grad[i] = A.pend[i] = -1;
        A.needs[i] = g->nodes[i].op == OP_PARAM && !g->nodes[i].frozen;
        for (int j = 0; j < g->nodes[i].nin; j++) A.needs[i] |= A.needs[g->nodes[i].in[j]];
    }
    A.at = &g->nodes[g->loss];
    A.grad[g->loss] = g->loss_seed >= 0 ? g->loss_seed : mkconst(&A, 1, 0);   /* a loss scale, or 1 */
    for (int i = g->loss; i >= 0; i--) {
        flush_slices(&A, i); /* every user of i has given its gradient */
        if (A.grad[i] < 0 || !A.needs[i] || g->nodes[i].op == OP_PARAM) continue;
        A.at = &g->nodes[i];   /* pointer may move as nodes are added: grad_rule copies it first */
        Node copy = g->nodes[i];
        A.at = &copy;
        grad_rules[copy.op](&A, i, A.grad[i]);
    }
    for (int i = 0; i < n0; i++)
        if (g->nodes[i].op == OP_PARAM && A.grad[i] >= 0) g->nodes[i].grad = own_grad(&A, i, A.grad[i]);
    free(A.grad);
    free(A.needs);
    free(A.pend);
    free(A.sg);
}
