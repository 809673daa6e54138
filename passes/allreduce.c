/* allreduce.c - data-parallel training: every trainable parameter's gradient averaged over the
 * processes of the run before the optimizer reads it (torch's DistributedDataParallel).
 *
 * Each process runs the same compiled step on its share of every global batch; its gradients
 * are the mean over its rows.  For the update to be the one a single process would make on the
 * whole batch, the processes exchange sum_r (rows_r / rows) * grad_r: the host's nnc_comm scales
 * this process's gradient by its part of the batch and sums across processes.
 *
 * A gradient g becomes  w = allreduce_wait(allreduce_start(g))  and the parameter's grad is w,
 * so the optimizer, the loss scaler's checks and the grad entry all see the averaged value.  The
 * two halves let the exchange overlap the backward pass: the schedule runs each start as soon as
 * its gradient exists and each wait only when an update needs it, and numbers the buckets in
 * the order the starts run (schedule.c).  Both halves write in place when the planner can (the
 * gradient dies in its start), so the exchange costs no memory.  Gradients come out of backward
 * from the last layer to the first, so the nodes are added in reverse parameter order, as DDP
 * fills its buckets. */
#include <stdlib.h>

#include "passes.h"

void pass_allreduce(Graph *g) {
    int n = g->n;
    int *done = xmalloc((size_t)n * sizeof(int));   /* gradient node -> its wait (shared grads) */
    for (int i = 0; i < n; i++) done[i] = -1;
    for (int p = n - 1; p >= 0; p--) {
        Node *pn = &g->nodes[p];
        if (pn->op != OP_PARAM || pn->frozen || pn->grad < 0) continue;
        int gr = pn->grad;
        if (done[gr] < 0) {
            Node like = g->nodes[gr];
            like.loc = pn->loc;
            like.phase = PH_BACKWARD;
            int s = graph_node_at(g, OP_ALLREDUCE_START, 1, &gr, like.shape, like.dtype, &like);
            g->nodes[s].name = g->nodes[p].name;
            like.phase = PH_UPDATE;
            int w = graph_node_at(g, OP_ALLREDUCE_WAIT, 1, &s, like.shape, like.dtype, &like);
            g->nodes[w].name = g->nodes[p].name;
            done[gr] = w;
        }
        g->nodes[p].grad = done[gr];
    }
    free(done);
}
