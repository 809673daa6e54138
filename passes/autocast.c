/* autocast.c - precision = bf16 | f16: the forward graph lowered as torch.autocast lowers it,
 * before autograd, so that the backward pass and the update follow from it.
 *
 * The rules, torch's autocast op lists applied to nnc's ops:
 *   - a matrix product takes its operands in half precision (a CAST of an f32 operand) and
 *     gives half; so does a bias added to a product's result (torch's linear and addmm, whose
 *     bias is part of the autocast op): the parameter is cast, the sum is half;
 *   - scaled_dot_product_attention likewise: half q, k and v, a half result (its kernel computes
 *     in f32, as torch's math path over half inputs);
 *   - a convolution too, as cuDNN's half convolutions compute: its operands rounded to half,
 *     the product accumulated in f32 (the helper reads them cast back to f32, exactly) and its
 *     result rounded to half -- the numbers of a half convolution, at the f32 one's speed;
 *   - an elementwise op is half when every tensor operand is half of the one kind (an inline
 *     scalar does not count, as a Python number does not promote), else f32: half + f32 is f32,
 *     torch's type promotion; views and copies keep their operand's type;
 *   - exp, log, pow and softplus (autocast's fp32 list, OPF_F32_AUTOCAST), and every op that is not
 *     elementwise -- reductions, softmax, log_softmax, the losses, convolutions, pooling, the
 *     helpers, assignments -- take f32 operands (a CAST of a half one) and give f32;
 *   - the loss and the outputs are f32 (cast at the end), so the ABI never holds a half tensor.
 * Parameters and optimizer state stay f32, the master weights: their half copies are CASTs
 * inside the step, and the gradients autograd sends back through a CAST are f32 again.
 *
 * Without precision, the same pass types a model that converts values itself (to(x, bf16)):
 * products of two half operands of one kind are half, mixed ones f32, and every other rule
 * as above, so that kernels only ever see the types they handle.
 *
 * New casts must come before their users, so the graph is rebuilt in order; node ids change,
 * and the loss, the outputs and the data bindings are renumbered.  Kernels compute half values
 * in f32 and round each half node's value to its format (codegen/kernel.c). */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct {
    Graph *g;
    bool autocast;              /* precision bf16/f16; else only the types to(x, bf16) made */
    DType half;
    int *to_half, *to_f32;      /* new id -> its cast, or -1 (one cast per value and type) */
    int cap;
} Ac;

static int append(Ac *A, const Node *n) {
    Graph *g = A->g;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 256;
        g->nodes = xrealloc(g->nodes, (size_t)g->cap * sizeof *g->nodes);
    }
    if (g->n >= A->cap) {
        int c = 2 * g->n + 64;
        A->to_half = xrealloc(A->to_half, (size_t)c * sizeof(int));
        A->to_f32 = xrealloc(A->to_f32, (size_t)c * sizeof(int));
        for (int i = A->cap; i < c; i++) A->to_half[i] = A->to_f32[i] = -1;
        A->cap = c;
    }
    int id = g->n++;
    g->nodes[id] = *n;
    g->nodes[id].origin = id;
    return id;
}

static bool is_float(DType t) { return t == DT_F32 || DTYPE_IS_HALF(t); }

/* x as type `to`: itself, or a (shared) CAST made at the user `like`'s place. */
static int cast_to(Ac *A, int x, DType to, const Node *like) {
    const Node *xn = &A->g->nodes[x];
    if (xn->dtype == to || !is_float(xn->dtype) || node_is_inline(xn)) return x;
    int memo = to == DT_F32 ? A->to_f32[x] : A->to_half[x];
    if (memo >= 0) return memo;
    if (xn->op == OP_TRANSPOSE) {   /* cast, then transpose: the product still reads it transposed */
        Node t = *xn;
        t.in[0] = cast_to(A, xn->in[0], to, like);
        t.dtype = to;
        int id = append(A, &t);
        *(to == DT_F32 ? &A->to_f32[x] : &A->to_half[x]) = id;
        return id;
    }
    Node c = {0};
    c.op = OP_CAST;
    c.dtype = to;
    c.dev = xn->dev;
    c.phase = like->phase;
    c.nin = 1;
    c.in[0] = x;
    c.shape = xn->shape;
    c.loc = like->loc;
    c.scope = like->scope;
    c.grad = -1;
    int id = append(A, &c);
    *(to == DT_F32 ? &A->to_f32[x] : &A->to_half[x]) = id;   /* after append: it may grow them */
    return id;
}

/* A half product: a matmul, or a convolution's rounded result (a cast of an f32 CONV2D). */
static bool half_product(const Ac *A, const Node *p) {
    if (p->dtype != A->half) return false;
    return p->op == OP_MATMUL || (p->op == OP_CAST && A->g->nodes[p->in[0]].op == OP_CONV2D);
}

/* A bias on a product, as torch's linear and conv2d: half product +/- an f32 parameter. */
static bool linear_bias(const Ac *A, const Node *n) {
    if ((n->op != OP_ADD && n->op != OP_SUB) || n->nin != 2) return false;
    for (int j = 0; j < 2; j++) {
        const Node *p = &A->g->nodes[n->in[j]], *q = &A->g->nodes[n->in[1 - j]];
        if (q->op == OP_RESHAPE) q = &A->g->nodes[q->in[0]];   /* a conv bias, shaped [C, 1, 1] */
        if (half_product(A, p) && q->op == OP_PARAM) return true;
    }
    return false;
}

static void lower(Ac *A, Node *n) {
    OpKind kind = op_info[n->op].kind;
    if (!A->autocast && n->op == OP_MATMUL) {   /* half @ half of one kind is half; else f32 */
        DType a = A->g->nodes[n->in[0]].dtype, b = A->g->nodes[n->in[1]].dtype;
        n->dtype = a == b && DTYPE_IS_HALF(a) ? a : DT_F32;
        for (int j = 0; j < n->nin; j++) n->in[j] = cast_to(A, n->in[j], n->dtype, n);
        return;
    }
    if (!A->autocast && n->op == OP_CAST) return;   /* the user's to(x, dtype) */
    if (n->op == OP_SDPA) { /* autocast's list has it with the products: half in, half out */
        DType t = A->autocast ? A->half : dtype_join(A->g, n->nin, n->in, DT_F32);
        for (int j = 0; j < n->nin; j++) n->in[j] = cast_to(A, n->in[j], t, n);
        n->dtype = t;
        return;
    }
    if (A->autocast && n->op == OP_CONV2D) {   /* half operands, f32 accumulation: the helper reads them widened */
        for (int j = 0; j < n->nin; j++) n->in[j] = cast_to(A, cast_to(A, n->in[j], A->half, n), DT_F32, n);
        return;
    }
    if (A->autocast && (n->op == OP_MATMUL || linear_bias(A, n))) {
        for (int j = 0; j < n->nin; j++) n->in[j] = cast_to(A, n->in[j], A->half, n);
        n->dtype = A->half;
    } else if ((kind == OK_EW && !op_has(n->op, OPF_F32_AUTOCAST)) || kind == OK_VIEW || kind == OK_COPY) {
        if (!is_float(n->dtype)) return;   /* i32 results (none yet) keep their type */
        n->dtype = dtype_join(A->g, n->nin, n->in, DT_F32);
        if (n->dtype == DT_F32)           /* mixed: the half operands promote */
            for (int j = 0; j < n->nin; j++) n->in[j] = cast_to(A, n->in[j], DT_F32, n);
    } else
        for (int j = 0; j < n->nin; j++) n->in[j] = cast_to(A, n->in[j], DT_F32, n);
}

bool pass_autocast(Model *m, Precision prec) {
    Graph *g = m->g;
    bool any_half = false;
    for (int i = 0; i < g->n; i++) any_half |= DTYPE_IS_HALF(g->nodes[i].dtype);
    if (prec == PREC_F32 && !any_half) return false;
    Ac A = {.g = g, .autocast = prec != PREC_F32, .half = prec == PREC_BF16 ? DT_BF16 : DT_F16};
    Node *old = g->nodes;
    int n0 = g->n;
    g->nodes = NULL;
    g->n = g->cap = 0;
    int *map = xmalloc((size_t)(n0 ? n0 : 1) * sizeof(int));
    for (int i = 0; i < n0; i++) {
        Node n = old[i];
        for (int j = 0; j < n.nin; j++) n.in[j] = map[n.in[j]];
        lower(&A, &n);
        map[i] = append(&A, &n);
        if (A.autocast && n.op == OP_CONV2D) map[i] = cast_to(&A, map[i], A.half, &n);   /* its result rounded to half */
    }
    for (int k = 0; k < g->nouts; k++) {
        int x = map[g->outs[k].node];
        g->outs[k].node = cast_to(&A, x, DT_F32, &g->nodes[x]);
    }
    if (g->loss >= 0) {
        int x = map[g->loss];
        g->loss = cast_to(&A, x, DT_F32, &g->nodes[x]);
    }
    for (int j = 0; j < m->train.ndata; j++) m->train.data[j].node = map[m->train.data[j].node];
    free(old);
    free(map);
    free(A.to_half);
    free(A.to_f32);
    return true;
}
