/* select.c - which nodes an entry point computes, and what it returns.
 *
 *   train_step: the loss and every optimizer assignment (forward, backward, update), and
 *               clip_grad_norm's total norm;
 *   grad:       the loss and every parameter's gradient (no update; for gradient checks);
 *   eval:       the loss, metrics and outputs, with no gradient nodes at all (torch.no_grad);
 *   accumulate: with gradient accumulation (accumulate.c), the loss and the backward-phase
 *               ASSIGNs that add a micro-batch's gradients to the group's, and the buffers'
 *               (batch norm's running statistics move on every training forward); train_step
 *               then takes every other ASSIGN.
 * train_step, grad and accumulate run in training mode, eval in evaluation mode: of a MODE node
 * only the operand of the entry's mode is computed. */
#include <stdlib.h>

#include "passes.h"

static void add_output(Entry *e, int node) {
    e->outputs = xrealloc(e->outputs, (size_t)(e->noutputs + 1) * sizeof(int));
    e->outputs[e->noutputs++] = node;
}

int view_source(const Graph *g, const Entry *e, int x) {
    const Node *n = &g->nodes[x];
    if (n->op == OP_RESHAPE || (e->folded && e->folded[x])) return n->in[0];
    if (n->op == OP_MODE) return n->in[e->kind == ENTRY_EVAL];
    return -1;
}

/* Whether entry k writes this ASSIGN: a gradient's accumulation (the backward phase) is the
 * accumulate entry's, the optimizer's writes train_step's, a buffer's (a running statistic) both. */
static bool assigns(const Graph *g, const Node *n, EntryKind k) {
    if (k == ENTRY_TRAIN) return n->phase != PH_BACKWARD;
    return k == ENTRY_ACCUM && (n->phase == PH_BACKWARD || g->nodes[n->in[0]].frozen);
}

static bool accumulates(const Graph *g) {
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == OP_ASSIGN && g->nodes[i].phase == PH_BACKWARD) return true;
    return false;
}

void pass_select(Program *p, Entry *e, EntryKind k) {
    static const char *names[] = {"train_step", "grad", "eval", "accumulate"};
    Graph *g = p->g;
    e->kind = k;
    e->name = names[k];
    e->live = arena_alloc(g->arena, (size_t)g->n);
    if (k == ENTRY_ACCUM && !accumulates(g)) return; /* no such entry */
    if (g->loss >= 0) add_output(e, g->loss);
    if (k == ENTRY_TRAIN && g->grad_norm >= 0) add_output(e, g->grad_norm);
    for (int i = 0; i < g->n; i++) {
        const Node *n = &g->nodes[i];
        if (n->op == OP_ASSIGN && assigns(g, n, k)) e->live[i] = true;
        if (k == ENTRY_GRAD && n->op == OP_PARAM && n->grad >= 0) add_output(e, n->grad);
    }
    if (k == ENTRY_EVAL)
        for (int i = 0; i < g->nouts; i++) add_output(e, g->outs[i].node);
    for (int i = 0; i < e->noutputs; i++) e->live[e->outputs[i]] = true;
    for (int i = g->n - 1; i >= 0; i--) {
        if (!e->live[i]) continue;
        if (g->nodes[i].op == OP_MODE) e->live[view_source(g, e, i)] = true;
        else
            for (int j = 0; j < g->nodes[i].nin; j++) e->live[g->nodes[i].in[j]] = true;
    }
}
