/* copies.c - inserts an explicit COPY on every edge whose ends live on different devices.
 *
 * The graph is rebuilt in one sweep so that each copy sits right before its first user and
 * operands still precede users; a value needed on another device is copied once and shared.
 * The loss and metrics the runtime prints are copied back to the host at the end.  With
 * --strict-devices, a crossing the user did not ask for with to() is an error naming both
 * devices and the fix, as PyTorch refuses to add a CPU tensor to a CUDA one. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct {
    Graph *g;
    Node *nodes;
    int n, cap;
    int *map;           /* old id -> new id */
    int *copy_of;       /* new id * NNC_MAX_DEVICES + device -> its copy there, or -1 */
} Rebuild;

static int rb_push(Rebuild *R, Node n) {
    if (R->n == R->cap) {
        R->cap = R->cap ? R->cap * 2 : 256;
        R->nodes = xrealloc(R->nodes, (size_t)R->cap * sizeof *R->nodes);
        R->copy_of = xrealloc(R->copy_of, (size_t)R->cap * NNC_MAX_DEVICES * sizeof *R->copy_of);
    }
    R->nodes[R->n] = n;
    for (int d = 0; d < NNC_MAX_DEVICES; d++) R->copy_of[R->n * NNC_MAX_DEVICES + d] = -1;
    return R->n++;
}

static int rb_copy(Rebuild *R, int src, Device to, const Node *user) {
    if (R->copy_of[src * NNC_MAX_DEVICES + to] >= 0) return R->copy_of[src * NNC_MAX_DEVICES + to];
    Node c = {0};
    c.op = OP_COPY;
    c.nin = 1;
    c.in[0] = src;
    c.shape = R->nodes[src].shape;
    c.dtype = R->nodes[src].dtype;
    c.dev = to;
    c.phase = user->phase;
    c.loc = user->loc;
    c.grad = -1;
    c.origin = -1;
    c.name = R->nodes[src].name;
    int id = rb_push(R, c);
    R->copy_of[src * NNC_MAX_DEVICES + to] = id;
    return id;
}

static bool crossing_error(Rebuild *R, Diag *d, const Node *user, int src) {
    const Node *s = &R->nodes[src];
    char nb[48];
    if (s->name)
        diag_error(d, user->loc, "'%s' is on %s but this %s runs on %s; move it explicitly with to(%s, %s)",
                   s->name, device_name(s->dev), op_info[user->op].name, device_name(user->dev), s->name,
                   device_spelling(user->dev));
    else
        diag_error(d, user->loc, "the result of %s (line %d) is on %s but this %s runs on %s; move it explicitly "
                   "with to(..., %s)", node_op_name(s, nb), s->loc.line, device_name(s->dev), op_info[user->op].name,
                   device_name(user->dev), device_spelling(user->dev));
    return false;
}

bool pass_copies(Graph *g, Diag *d, bool strict) {
    Rebuild R = {.g = g};
    R.map = xmalloc((size_t)g->n * sizeof(int));
    bool ok = true;
    for (int i = 0; i < g->n; i++) {
        Node n = g->nodes[i];
        for (int j = 0; j < n.nin; j++) {
            int src = R.map[n.in[j]];
            const Node *s = &R.nodes[src];
            bool crosses = s->dev != n.dev && !node_is_inline(s) && n.op != OP_COPY;
            /* once per value and device; the backward pass follows the forward (autograd moves
             * a gradient back across the copies the user wrote, as torch's does) */
            if (crosses && strict && n.phase == PH_FORWARD && R.copy_of[src * NNC_MAX_DEVICES + n.dev] < 0)
                ok = crossing_error(&R, d, &n, src);
            n.in[j] = crosses ? rb_copy(&R, src, n.dev, &n) : src;
        }
        R.map[i] = rb_push(&R, n);
    }
    for (int i = 0; i < R.n; i++)
        if (R.nodes[i].op == OP_PARAM && R.nodes[i].grad >= 0) R.nodes[i].grad = R.map[R.nodes[i].grad];
    if (g->loss >= 0) {
        g->loss = R.map[g->loss];
        if (R.nodes[g->loss].dev != DEV_CPU) g->loss = rb_copy(&R, g->loss, DEV_CPU, &R.nodes[g->loss]);
    }
    if (g->grad_norm >= 0) g->grad_norm = R.map[g->grad_norm];   /* read where it is, on demand */
    for (int i = 0; i < g->nouts; i++) {
        int o = R.map[g->outs[i].node];
        g->outs[i].node = R.nodes[o].dev != DEV_CPU ? rb_copy(&R, o, DEV_CPU, &R.nodes[o]) : o;
    }
    free(g->nodes);
    g->nodes = R.nodes;
    g->n = R.n;
    g->cap = R.cap;
    free(R.map);
    free(R.copy_of);
    return ok;
}
