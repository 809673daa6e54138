/* expr.c - pieces of source text the kernel walker (kernel.c), both dialects and the model
 * renderers share: the scalar expression of every elementwise op, taken from ops.def so the two
 * targets cannot disagree (and so NaN and Inf come out as PyTorch gives them on both), inline
 * scalars, dimensions and offsets, and the .nn lines that head each kernel. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen.h"

/* x ** c for the exponents torch's pow kernel special-cases (aten pow_tensor_scalar_optimized):
 * the same formula gives the same NaN/Inf at the edges, e.g. (-inf) ** 0.5 is NaN as sqrt, where
 * powf says +inf.  NULL for the generic POW. */
static const char *powc_special(double c) {
    if (c == 1) return "$";
    if (c == 2) return "($ * $)";
    if (c == 3) return "($ * $ * $)";
    if (c == 0.5) return "SQRT($)";
    if (c == -0.5) return "((real)1 / SQRT($))";
    if (c == -1) return "((real)1 / $)";
    if (c == -2) return "((real)1 / ($ * $))";
    return NULL;
}

/* A double as a C/CUDA literal: %.17g round-trips every finite value.  inf and NaN have no
 * literal, and printf would write "inf" or "-nan" (not C): they become constant expressions
 * valid in both languages.  The front end rejects non-finite constants, so these are reached
 * only by arithmetic inside the compiler (a scaled learning rate that overflows). */
const char *render_num(char buf[RENDER_NUM_LEN], double x) {
    if (isnan(x)) snprintf(buf, RENDER_NUM_LEN, "(0.0 / 0.0)");
    else if (isinf(x)) snprintf(buf, RENDER_NUM_LEN, "(%s1.0 / 0.0)", x < 0 ? "-" : "");
    else snprintf(buf, RENDER_NUM_LEN, "%.17g", x);
    return buf;
}

#define NUM(x) render_num((char[RENDER_NUM_LEN]){0}, (x))

/* Writes template t: $0..$2 are operands[0..2], $g $y name operands through slot (DERIV),
 * $p $p1 $p2 the scalars p[], $r $c the point's row and column, operands[EXPR_ROW] and
 * operands[EXPR_COL]. */
static void render_expr_template(Str *s, const char *t, const char *const *operands, const int8_t *slot, const double *p) {
    for (; *t; t++) {
        if (t[0] != '$') {
            str_putc(s, *t);
            continue;
        }
        char c = t[1];
        if (c == 'r' || c == 'c') {
            str_puts(s, operands[c == 'r' ? EXPR_ROW : EXPR_COL]);
            t++;
        } else if (c == 'p') {
            int k = t[2] == '1' || t[2] == '2' ? t[2] - '0' : 0;
            str_printf(s, "(real)%s", NUM(p[k]));
            t += 1 + (k > 0);
        } else if (slot) { /* a DX expression: every symbol through the slot map */
            int sym = c == 'g' ? DERIV_G : c == '0' ? DERIV_X0 : c == '1' ? DERIV_X1 : DERIV_Y;
            str_puts(s, operands[slot[sym]]);
            t++;
        } else {
            str_puts(s, operands[c - '0']);
            t++;
        }
    }
}

const char *ew_expr_template(const Node *n) {
    return n->op == OP_DERIV ? op_info[n->attr.deriv.of].dx[n->attr.deriv.wrt] : op_info[n->op].expr;
}

void render_ew_expr(Str *s, const Graph *g, int id, const char *const *operands) {
    const Node *n = &g->nodes[id];
    if (n->op == OP_DERIV) {
        render_expr_template(s, ew_expr_template(n), operands, n->attr.deriv.slot, n->attr.deriv.p);
        return;
    }
    const char *sp = n->op == OP_POWC ? powc_special(n->attr.scalars.p[0]) : NULL;
    if (sp) {
        for (; *sp; sp++)
            if (*sp == '$') str_puts(s, operands[0]);
            else str_putc(s, *sp);
        return;
    }
    static const double none[3] = {0, 0, 0};
    render_expr_template(s, op_info[n->op].expr, operands, NULL,
                    op_info[n->op].attr == ATTR_SCALARS ? n->attr.scalars.p : none);
}

void render_inline_value(Str *s, const Graph *g, int id, const char *step, const char *micro, const char *batch) {
    const Node *n = &g->nodes[id];
    if (n->op == OP_CONST) {
        double v = n->attr.cnst.value;
        if (n->attr.cnst.batch_power == -1) str_printf(s, "((real)%s / (real)(%s))", NUM(v), batch);
        else if (n->attr.cnst.batch_power == 1) str_printf(s, "((real)%s * (real)(%s))", NUM(v), batch);
        else str_printf(s, "((real)%s)", NUM(v));
        return;
    }
    double base = n->attr.step.base;
    switch (n->attr.step.fn) {
    case STEP_T: str_printf(s, "((real)(%s))", step); break;
    case STEP_ONE_MINUS_POW: str_printf(s, "((real)(1.0 - pow(%s, (double)(%s))))", NUM(base), step); break;
    case STEP_FIRST_ONE: str_printf(s, "((%s) == 1 ? (real)1 : (real)%s)", step, NUM(base)); break;
    case STEP_ACCUMULATED: str_printf(s, "((%s) > 0 ? (real)1 : (real)0)", micro); break;
    }
}

void render_dim(Str *s, int64_t d, const char *batch) {
    if (d == DIM_BATCH) str_puts(s, batch);
    else if (dim_is_batch(d)) str_printf(s, "(%s * %lldLL)", batch, (long long)-d);
    else str_printf(s, "%lld", (long long)d);
}

void render_prod(Str *s, Shape sh, uint32_t mask) {
    bool b;
    int64_t k = shape_prod(sh, mask, &b);
    if (b) str_printf(s, "(B * %lldLL)", (long long)k);
    else str_printf(s, "%lldLL", (long long)k);
}

/* Quote the distinct .nn lines a launch's nodes came from, in order. */
void render_source_lines(Str *s, const Program *p, const Launch *L, const char *prefix) {
    int seen[16], nseen = 0;
    const char *src = p->diag ? p->diag->src : NULL;
    for (int i = 0; i < L->nnodes && nseen < 16; i++) {
        int line = p->g->nodes[L->nodes[i]].loc.line;
        bool dup = line <= 0;
        for (int k = 0; k < nseen && !dup; k++) dup = seen[k] == line;
        if (dup) continue;
        seen[nseen++] = line;
    }
    for (int a = 0; a < nseen; a++)   /* sort */
        for (int b = a + 1; b < nseen; b++)
            if (seen[b] < seen[a]) { int t = seen[a]; seen[a] = seen[b]; seen[b] = t; }
    for (int k = 0; k < nseen; k++) {
        const char *q = src ? diag_source_line(p->diag, seen[k]) : NULL;   /* no rescan per launch */
        int len = 0;
        while (q && q[len] && q[len] != '\n') len++;
        while (q && len > 0 && (*q == ' ' || *q == '\t')) { q++; len--; }
        char line[160];
        snprintf(line, sizeof line, "%.*s", len > 120 ? 120 : len, q ? q : "");
        for (char *c = line; *c; c++)
            if (*c == '*' && c[1] == '/') *c = '+';   /* keep the comment closed */
        str_puts(s, prefix);
        render_comment_text(s, p->diag && p->diag->file ? p->diag->file : "model");
        str_printf(s, ":%d: %s\n", seen[k], line);
    }
}

/* A file name goes into comments and string literals of the generated code (and a NaN check's
 * snprintf format): keep the characters that are harmless in all three and replace the rest
 * (quote, backslash, '%', '*' of a comment end, '?' of a trigraph, controls, non-ASCII) by '_'. */
const char *render_file_name(const Program *p, const char *file) {
    if (!file) return "model";
    char *s = arena_strdup(p->g->arena, file);
    for (char *c = s; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr(" ._/+-,=@:~#()[]{}", *c)) *c = '_';
    return s;
}

const char *model_c_name(const Program *p) { return p->g->model_name ? p->g->model_name : "model"; }

void render_numel(Str *s, Shape sh) { render_prod(s, sh, ~0u); }

GemmGeom gemm_geom(const Graph *g, const Launch *L) {
    Shape a = g->nodes[L->a].shape, b = g->nodes[L->b].shape, c = g->nodes[L->root].shape;
    GemmGeom q = {0};
    q.sum = matmul_is_sum(a, b, c);
    Shape lead = q.sum ? a : c;
    q.nlead = lead.rank - 2;
    for (int i = 0; i < q.nlead; i++) q.lead[i] = lead.d[i];
    q.m = c.d[c.rank - 2];
    q.n = c.d[c.rank - 1];
    q.k = L->ta ? a.d[a.rank - 2] : a.d[a.rank - 1];
    q.lda = a.d[a.rank - 1];
    q.ldb = b.d[b.rank - 1];
    q.a_shared = a.rank == 2 && q.nlead > 0;
    q.b_shared = b.rank == 2 && q.nlead > 0;
    q.rows_merged = q.b_shared && !L->ta && !q.sum;
    q.k_merged = q.sum && L->ta && !L->tb;
    return q;
}

int64_t gemm_count(const GemmGeom *q, int64_t batch) {
    int64_t G = 1;
    for (int i = 0; i < q->nlead; i++) G *= dim_size(q->lead[i], batch);
    return G;
}

void render_gemm_count(Str *s, const GemmGeom *q) {
    bool b;
    int64_t k = shape_prod(shape_of(q->nlead, q->lead), ~0u, &b);
    str_printf(s, "%s%lldLL", b ? "(int64_t)B * " : "", (long long)k);
}

bool launch_has(const Launch *L, int x) {
    for (int i = 0; i < L->nnodes; i++)
        if (L->nodes[i] == x) return true;
    return false;
}

void render_load_offset(Str *s, const Graph *g, int x, Shape space, const int8_t *perm) {
    Shape xs = g->nodes[x].shape;
    bool any = false;
    for (int l = 0; l < space.rank; l++) {
        int a = perm ? perm[l] : l - (space.rank - xs.rank);
        if (a < 0 || xs.d[a] == 1) continue;
        bool b;
        int64_t k = shape_prod(xs, ~0u << (a + 1), &b); /* the stride of axis a */
        str_printf(s, "%sa%d * %s%lldLL", any ? " + " : "", l, b ? "B * " : "", (long long)k);
        any = true;
    }
    if (!any) str_puts(s, "0");
}

Shape launch_space_axes(const Launch *L, int64_t mask, bool in_mask) {
    Shape k = {0};
    for (int l = 0; l < L->space.rank; l++)
        if (((mask >> l & 1) != 0) == in_mask) k.d[k.rank++] = L->space.d[l];
    return k;
}

int64_t launch_reduce_mask(const Graph *g, const Launch *L) {
    const Node *n = &g->nodes[L->root];
    if (n->op != OP_SUM_TO) return n->attr.axes.mask;
    int64_t mask = 0;
    Shape in = L->space, out = n->shape;
    for (int l = 0; l < in.rank; l++) {
        int a = l - (in.rank - out.rank);
        if (in.d[l] != 1 && (a < 0 || out.d[a] == 1)) mask |= (int64_t)1 << l;
    }
    return mask;
}

/* User text (a file name, a model line) inside a generated comment: it must not close the
 * comment, and control characters become spaces, so no name can inject code. */
void render_comment_text(Str *s, const char *t) {
    for (; *t; t++) {
        unsigned char c = (unsigned char)*t;
        if (c == '*' && t[1] == '/') str_puts(s, "* ");   /* the '/' follows on its own */
        else str_putc(s, c < 0x20 || c == 0x7f ? ' ' : (char)c);
    }
}

/* User text inside a generated C/C++ string literal: quotes, backslashes, '?' (trigraphs) and
 * anything not printable ASCII are octal escapes. */
void render_c_string_body(Str *s, const char *t) {
    for (; *t; t++) {
        unsigned char c = (unsigned char)*t;
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '?' || c == '%') str_printf(s, "\\%03o", c);
        else str_putc(s, (char)c);
    }
}

/* What --check-numerics names for a launch output: "relu (forward, mlp.nn:18:12, launch 3 of
 * train_step)".  The op is the launch's last member with a source line (the one the user wrote
 * last), as both targets report it. */
void launch_describe(Str *s, const Program *p, const Entry *e, int k, int out) {
    const Graph *g = p->g;
    const Launch *L = &e->launches[k];
    const Node *n = &g->nodes[out], *src = n;
    for (int i = 0; i < L->nnodes; i++)
        if (g->nodes[L->nodes[i]].loc.line) src = &g->nodes[L->nodes[i]];
    char nb[48];
    str_printf(s, "%s (%s, %s:%d:%d, launch %d of %s)", node_op_name(n, nb),
               n->phase == PH_FORWARD ? "forward" : n->phase == PH_BACKWARD ? "backward" : "update",
               src->loc.file ? src->loc.file : "model", src->loc.line, src->loc.col, k, e->name);
}
