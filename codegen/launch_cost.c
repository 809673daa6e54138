/* launch_cost.c - what a launch must move and compute: --profile's bytes and FLOPs.
 *
 * The numbers are the launch's own, from the planned program, not from a counter: bytes are the
 * compulsory traffic of a roofline (each distinct buffer read once and each written once; a
 * broadcast operand counts its own size; a convolution's im2col columns, which a better kernel
 * would not need, are not counted), FLOPs the arithmetic the model asks for (a product's 2 m n k,
 * whatever the library does inside).  An elementwise op is one FLOP per element of its result,
 * whatever its expression costs (exp is one, as add is): tinygrad counts the same way.  So the
 * achieved rates --profile prints are comparable across targets and kernel shapes, and the
 * rates a launch can reach are its bytes and FLOPs over the device's ceilings. */
#include "attention.h"
#include "codegen.h"

static size_t elem_bytes(const Graph *g, int x, bool f64) {
    DType t = g->nodes[x].dtype;
    return t == DT_I32 ? 4 : DTYPE_IS_HALF(t) ? 2 : f64 ? 8 : 4;
}

/* The node whose memory holds x (views followed, a transpose folded into a GEMM to its source),
 * or -1 when x has none (an inline scalar). */
static int memory_of(const Graph *g, const Entry *e, int x) {
    for (;;) {
        while (e->buf[x].kind == BUF_ALIAS) x = e->buf[x].alias;
        if (e->buf[x].kind == BUF_NONE && g->nodes[x].op == OP_TRANSPOSE) x = g->nodes[x].in[0];
        else break;
    }
    BufKind k = e->buf[x].kind;
    return k == BUF_NONE || k == BUF_INLINE ? -1 : x;
}

/* Adds x's bytes unless its memory is in seen[] already. */
static int64_t bytes_once(const Graph *g, const Entry *e, int x, int64_t B, bool f64, int *seen, int *nseen) {
    int m = memory_of(g, e, x);
    if (m < 0) return 0;
    for (int i = 0; i < *nseen; i++)
        if (seen[i] == m) return 0;
    if (*nseen < 64) seen[(*nseen)++] = m;
    return shape_numel(g->nodes[m].shape, B) * (int64_t)elem_bytes(g, m, f64);
}

/* The nodes a launch reads and writes (a product's operands are its folded transposes' sources,
 * an assignment reads the value and writes the leaf, a folded SGD update reads and writes the
 * parameter).  A copy between devices counts its bytes once: what crosses the bus. */
static int64_t launch_bytes(const Graph *g, const Entry *e, const Launch *L, int64_t B, bool f64) {
    int rd[64], wr[64], nrd = 0, nwr = 0;
    int64_t bytes = 0;
    const Node *r = &g->nodes[L->root];
    if (L->kind == L_COPY) return bytes_once(g, e, L->root, B, f64, wr, &nwr);
    if (L->kind == L_GEMM) {
        bytes += bytes_once(g, e, L->a, B, f64, rd, &nrd) + bytes_once(g, e, L->b, B, f64, rd, &nrd);
        if (L->fold >= 0) bytes += bytes_once(g, e, g->nodes[L->fold].in[0], B, f64, rd, &nrd);
        if (L->bias >= 0) bytes += bytes_once(g, e, L->bias, B, f64, rd, &nrd); /* the epilogue's */
    } else if (L->kind == L_ASSIGN) bytes += bytes_once(g, e, r->in[1], B, f64, rd, &nrd);
    else
        for (int j = 0; j < L->nins; j++) bytes += bytes_once(g, e, L->ins[j], B, f64, rd, &nrd);
    if (L->kind == L_ASSIGN) return bytes + bytes_once(g, e, r->in[0], B, f64, wr, &nwr);
    if (L->nouts)
        for (int j = 0; j < L->nouts; j++) bytes += bytes_once(g, e, L->outs[j], B, f64, wr, &nwr);
    else bytes += bytes_once(g, e, launch_gemm_c(L), B, f64, wr, &nwr);
    return bytes;
}

/* One per element of its result for an arithmetic elementwise op; views, copies and casts none. */
static int64_t ew_flops(const Graph *g, int x, int64_t B) {
    const Node *n = &g->nodes[x];
    if (op_info[n->op].kind != OK_EW || op_has(n->op, OPF_MOVES) || n->op == OP_CAST) return 0;
    return shape_numel(n->shape, B);
}

static int64_t helper_flops(const Graph *g, const Launch *L, int64_t B) {
    const Node *r = &g->nodes[L->root];
    if (op_has(r->op, OPF_CONV) || op_has(r->op, OPF_POOL)) {
        SpatialGeom q = spatial_geom(g, r);
        int64_t n = dim_size(q.N, B);
        int64_t window = q.KH * q.KW; /* a pooling window's elements */
        if (op_has(r->op, OPF_POOL)) return n * q.C * q.OH * q.OW * window;
        return 2 * n * q.OC * q.OH * q.OW * (q.C / q.G) * window; /* each form: the same products */
    }
    return r->op == OP_DROPOUT_MASK || r->op == OP_RANDOM ? shape_numel(r->shape, B) : 0;
}

static int64_t gemm_flops(const Graph *g, const Launch *L, int64_t B) {
    GemmGeom q = gemm_geom(g, L);
    int64_t m = dim_size(q.m, B), n = dim_size(q.n, B), k = dim_size(q.k, B);
    int64_t rows = m * gemm_count(&q, B), epi = (L->bias >= 0) + L->relu; /* the epilogue's adds and maxima */
    return 2 * rows * n * k + (L->fold >= 0 ? 2 * m * n : 0) + epi * rows * n; /* a fold scales and adds */
}

/* Attention's products (2 a multiply-add) over the (query, key) pairs it visits, the causal mask's
 * (top-left aligned) only: the forward's scores and weighted sum, D + Dv a pair; the backward's
 * recomputed scores and dP, and each gradient's product (D, D or Dv a pair).  The softmax's
 * exp and sums are not counted, as FlashAttention counts. */
static int64_t attention_flops(const Graph *g, const Launch *L, int64_t B) {
    const AttnGeom a = attention_geom(g, L);
    int64_t pairs = a.tq * a.tk;
    if (a.causal) pairs = a.tq <= a.tk ? a.tq * (a.tq + 1) / 2 : a.tk * (a.tk + 1) / 2 + (a.tq - a.tk) * a.tk;
    int64_t per = a.d + a.dv_dim;
    if (a.backward) per += (a.dq >= 0 ? a.d : 0) + (a.dk >= 0 ? a.d : 0) + (a.dv >= 0 ? a.dv_dim : 0);
    return 2 * pairs * per * attention_heads(&a, B);
}

static int64_t launch_flops(const Graph *g, const Launch *L, int64_t B) {
    int64_t f = 0;
    switch (L->kind) {
    case L_GEMM: return gemm_flops(g, L, B);
    case L_HELPER: return helper_flops(g, L, B);
    case L_ATTENTION: return attention_flops(g, L, B);
    case L_COPY:
    case L_ASSIGN:
    case L_COLLECTIVE: return 0;
    case L_EW:
    case L_REDUCE:
    case L_ROW: break;
    }
    for (int i = 0; i < L->nnodes; i++) {
        const Node *n = &g->nodes[L->nodes[i]];
        OpKind k = op_info[n->op].kind;
        int64_t in = k == OK_REDUCE || k == OK_ROW ? shape_numel(g->nodes[n->in[0]].shape, B) : 0;
        if (k == OK_REDUCE) f += in;
        else if (k == OK_ROW) f += n->op == OP_ACCURACY ? in : 5 * in;
        else f += ew_flops(g, L->nodes[i], B);
    }
    return f;
}

/* Products (and convolutions, whose GEMMs they are) run on the units the types and --tf32 pick;
 * everything else is f32 arithmetic (half values are computed in f32), or double with --f64. */
static FlopKind launch_flop_kind(const Graph *g, const Launch *L, bool f64, bool tf32) {
    if (f64) return FLOP_F64;
    bool product = L->kind == L_GEMM || (L->kind == L_HELPER && op_has(g->nodes[L->root].op, OPF_CONV));
    if (L->kind == L_GEMM && (DTYPE_IS_HALF(g->nodes[L->a].dtype) || DTYPE_IS_HALF(g->nodes[L->b].dtype)))
        return FLOP_HALF;
    return product && tf32 ? FLOP_TF32 : FLOP_F32;
}

LaunchCost launch_cost(const Program *p, const Entry *e, const Launch *L, int64_t B, bool f64, bool tf32) {
    const Graph *g = p->g;
    LaunchCost c = {launch_bytes(g, e, L, B, f64), launch_flops(g, L, B), launch_flop_kind(g, L, f64, tf32), false};
    c.bus = L->kind == L_COPY;
    return c;
}
