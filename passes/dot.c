/* dot.c - `--emit dot`: the planned step as a Graphviz picture (`dot -Tpng`).
 *
 * One entry is drawn: the training step (forward, backward and update), or eval for a model
 * without a loss.  Every value the entry computes is a node labelled as the user wrote it:
 * the layer that made it ("fc1: matmul"), its let-binding name, its type.  Each launch with
 * more than one node is a cluster, so fusion is what the boxes show; a GEMM that runs an SGD
 * update inside it is one cluster too.  Fill colours are devices (host blue, CUDA green),
 * backward and update nodes have dashed and dotted borders, and copies are drawn as arrows
 * with their bytes.  Scalar constants and step values are not drawn. */
#include <inttypes.h>
#include <string.h>

#include "passes.h"

static const char *const dot_fill[NNC_MAX_DEVICES] = {"#dbe9f6", "#d5efc0", "#f9e0b0", "#f4c6c6", "#dcd0f0",
                                                      "#c8ecec", "#f0d8e8", "#e8e8c0", "#d8d8d8"};
static const char *const dot_border[] = {[PH_FORWARD] = "solid", [PH_BACKWARD] = "dashed", [PH_UPDATE] = "dotted"};

/* Text inside a double-quoted DOT string: quotes and backslashes escaped, controls dropped. */
static void dot_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
}

static bool dot_drawn(const Graph *g, const Entry *e, int i) {
    return e->live[i] && !node_is_inline(&g->nodes[i]) && g->nodes[i].op != OP_COPY;
}

static void dot_node(const Graph *g, const Entry *e, int i, FILE *f) {
    const Node *n = &g->nodes[i];
    char nb[48], sb[96];
    OpKind k = op_info[n->op].kind;
    fprintf(f, "    n%d [label=\"", i);
    if (k == OK_LEAF || n->op == OP_ASSIGN) {
        dot_text(f, n->op == OP_ASSIGN ? g->nodes[n->in[0]].name : n->name);
        fprintf(f, "%s\\n", n->op == OP_ASSIGN ? " (updated)" : "");
    } else {
        if (n->scope) {
            dot_text(f, n->scope);
            fputs(": ", f);
        }
        dot_text(f, node_op_name(n, nb));
        if (e->folded[i]) fputs(" (read by the GEMM)", f);
        if (n->name && (!n->scope || strncmp(n->name, n->scope, strlen(n->scope)))) {
            fputs(" ", f);
            dot_text(f, n->name);
        }
        fputs("\\n", f);
    }
    dot_text(f, shape_str(n->shape, n->dtype, g->batch_name, sb, sizeof sb));
    const char *shape = n->op == OP_INPUT ? "box" : n->op == OP_PARAM || n->op == OP_STATE ? "box3d"
                        : n->op == OP_ASSIGN ? "invhouse" : k == OK_MATMUL ? "hexagon" : k == OK_HELPER ? "octagon" : "ellipse";
    fprintf(f, "\", shape=%s, fillcolor=\"%s\", style=\"filled,%s\"];\n", shape, dot_fill[n->dev], dot_border[n->phase]);
}

/* The drawn node a value comes from: through copies (drawn as edges) to their source. */
static int dot_source(const Graph *g, int x) {
    while (g->nodes[x].op == OP_COPY) x = g->nodes[x].in[0];
    return x;
}

static void dot_edges(const Graph *g, const Entry *e, int i, FILE *f) {
    const Node *n = &g->nodes[i];
    for (int j = 0; j < n->nin; j++) {
        int x = n->in[j];
        if (node_is_inline(&g->nodes[x])) continue;
        fprintf(f, "    n%d -> n%d", dot_source(g, x), i);
        if (g->nodes[x].op == OP_COPY)
            fprintf(f, " [label=\"copy %s->%s\\n%" PRId64 " B\", color=\"#c0392b\", fontcolor=\"#c0392b\"]",
                    device_name(g->nodes[dot_source(g, x)].dev), device_name(g->nodes[x].dev),
                    shape_numel(g->nodes[x].shape, g->batch_max) * 4);
        fputs(";\n", f);
    }
    (void)e;
}

const char *launch_kind_label(LaunchKind k) {
    static const char *const kind[] = {"elementwise", "reduction", "row-wise",  "gemm",     "copy",
                                       "assign",      "helper",    "allreduce", "attention"};
    _Static_assert(NNC_COUNTOF(kind) == L_ATTENTION + 1, "a name for every LaunchKind");
    return kind[k];
}

/* Launches of more than one node are clusters: the kernels fusion made. */
static void dot_clusters(const Program *p, const Entry *e, FILE *f) {
    const Graph *g = p->g;
    for (int k = 0; k < e->nlaunch; k++) {
        const Launch *L = &e->launches[k];
        int drawn = 0;
        for (int i = 0; i < L->nnodes; i++) drawn += dot_drawn(g, e, L->nodes[i]);
        if (drawn < 2) continue;
        fprintf(f, "  subgraph cluster_%d {\n    label=\"launch %d: %s\"; style=\"rounded\"; color=\"#7f8c8d\";\n", k,
                k, launch_kind_label(L->kind));
        for (int i = 0; i < L->nnodes; i++)
            if (dot_drawn(g, e, L->nodes[i])) fprintf(f, "    n%d;\n", L->nodes[i]);
        fputs("  }\n", f);
    }
}

void program_print_dot(const Program *p, FILE *f) {
    const Graph *g = p->g;
    const Entry *e = &p->entry[p->entry[ENTRY_TRAIN].nlaunch ? ENTRY_TRAIN : ENTRY_EVAL];
    fputs("digraph \"", f);
    dot_text(f, g->model_name ? g->model_name : "model");
    fprintf(f, "\" {\n  label=\"%s: %d launches (fill: cpu blue, cuda green; border: forward solid, backward "
               "dashed, update dotted)\";\n  labelloc=t; rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
               "  edge [fontname=\"Helvetica\", fontsize=9];\n", e->name, e->nlaunch);
    dot_clusters(p, e, f);
    for (int i = 0; i < g->n; i++)
        if (dot_drawn(g, e, i)) dot_node(g, e, i, f);
    for (int i = 0; i < g->n; i++)
        if (dot_drawn(g, e, i)) dot_edges(g, e, i, f);
    fputs("}\n", f);
}
