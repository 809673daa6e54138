/* placement.c - gives every value a device.
 *
 * Parameters, gradients, optimizer state and activations go on the target device; batch
 * inputs stay on the host, where the data loader fills them (PyTorch's `x.to(device)` is then
 * the copy node that copies.c inserts).  A value the user placed with to(x, dev) keeps its
 * device, and the ops that consume it run there unless they are on the target anyway.  On the
 * CPU target everything runs on the CPU. */
#include "passes.h"

void pass_placement(Graph *g, Device target) {
    for (int i = 0; i < g->n; i++) {
        Node *n = &g->nodes[i];
        /* The CPU target has no GPU: there to(x, cuda) is the identity, as PyTorch code that
         * picks `device = "cuda" if available else "cpu"` runs unchanged on a CPU.  (A CPU
         * model whose values sat on "cuda" would plan two memory blocks and run them in one.) */
        if (n->dev_fixed && target != DEV_CPU) continue;
        n->dev = n->op == OP_INPUT ? DEV_CPU : target;
    }
}
