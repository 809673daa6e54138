/* accumulate.c - gradient accumulation over micro-batches (accumulate = k > 1 in the train
 * section), as a PyTorch loop writes it:
 *
 *     for x, y in group:  (loss(x, y) / k).backward()     # p.grad += grad / k
 *     opt.step(); opt.zero_grad()
 *
 * For each trainable parameter p with gradient g, a state "p.grad" (torch's p.grad: the group's
 * sum between micro-batches) and
 *
 *     sum = (accumulated ? p.grad : 0) + g * (1 / k)    accumulated: STEPVAL STEP_ACCUMULATED,
 *                                                       1 when this group ran micro-batches before
 *     p.grad <- sum                                     an ASSIGN in the backward phase
 *
 * and sum becomes p's gradient for every pass after this one (allreduce, the loss scaler, the
 * clipping and the update).  select.c gives the backward-phase ASSIGNs to the accumulate entry
 * and the others to train_step, so a micro-batch's accumulate call adds its gradients to the
 * group's and does nothing else (no collective: DDP's no_sync), and train_step takes the group's
 * last micro-batch, sums, averages over the processes when data parallel, and steps.
 *
 * The old sum is read through a select, not multiplied by a flag, so a group starts over
 * whatever the previous one left (a skipped f16 step's infinities too) and nothing has to clear
 * it: train_step writes no state but the optimizer's. */
#include "passes.h"

void pass_accumulate(Graph *g, int k) {
    if (k <= 1) return;
    int n0 = g->n;
    for (int p = 0; p < n0; p++) {
        const Node *pn = &g->nodes[p];
        if (pn->op != OP_PARAM || pn->frozen || pn->grad < 0) continue;
        int gr = pn->grad;
        Node like = g->nodes[gr]; /* where and from which line the gradient came */
        like.phase = PH_BACKWARD;
        Shape s = pn->shape, one = shape_scalar();
        int acc = graph_node_at(g, OP_STATE, 0, NULL, s, DT_F32, &like);
        g->nodes[acc].name = arena_printf(g->arena, "%s.grad", g->nodes[p].name);
        g->nodes[acc].scope = NULL;
        g->nodes[acc].attr.init.kind = INIT_ZEROS;
        int on = graph_node_at(g, OP_STEPVAL, 0, NULL, one, DT_F32, &like);
        g->nodes[on].attr.step.fn = STEP_ACCUMULATED;
        int zero = graph_node_at(g, OP_CONST, 0, NULL, one, DT_F32, &like);
        int kinv = graph_node_at(g, OP_CONST, 0, NULL, one, DT_F32, &like);
        g->nodes[kinv].attr.cnst.value = 1.0 / k;
        int sel[3] = {on, acc, zero};
        int kept = graph_node_at(g, OP_SELECT, 3, sel, s, DT_F32, &like);
        int part[2] = {gr, kinv};
        int scaled = graph_node_at(g, OP_MUL, 2, part, s, DT_F32, &like);
        int terms[2] = {kept, scaled};
        int sum = graph_node_at(g, OP_ADD, 2, terms, s, DT_F32, &like);
        int as[2] = {acc, sum};
        graph_node_at(g, OP_ASSIGN, 2, as, s, DT_F32, &like);
        g->nodes[p].grad = sum;
    }
}
