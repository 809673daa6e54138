/* render_c.c - renders a planned Program as one standalone C file.
 *
 * This file renders the kernels (one static function per launch, over struct NAME: the
 * kernels' view of the memory blocks) and one function per entry point that calls them in
 * order; render_c_model.c renders everything around them from the model's description (the
 * runtime that implements nnc_model_abi is include/nnc_runtime.h, embedded).  The file depends
 * on libc, libm, OpenMP (optional: without -fopenmp the pragmas are ignored) and a CBLAS sgemm,
 * so the in-process build and the ahead-of-time library are the same code.
 *
 * Elementwise groups become one loop nest: a flat loop when every operand is either full-size
 * or a scalar (the compiler vectorizes it), else one loop per axis with each operand indexed
 * through its broadcast strides.  Reductions loop over their input space, with the fused
 * elementwise prologue evaluated at every point. */
#include <string.h>

#include "cpu.h"

#define OMP_MIN_ELEMS 32768
#define SMALL_GEMM_MACS 16384   /* products this small are plain loops, not a BLAS call */

typedef struct {
    const Program *p;
    const Graph *g;
    const Entry *e;
    const BuildOpts *o;
    const char *mn;
    Str *s;
} R;

/* Threads pay off only past OMP_MIN_ELEMS; a kernel that can never get that large (at the
 * compile-time batch bound) gets no OpenMP pragma, whose team set-up costs more than it. */
static bool worth_threads(const R *r, Shape sh, int64_t min_elems) {
    return shape_numel(sh, r->g->batch_max) > min_elems;
}

static int resolve(const R *r, int x) {
    while (r->e->buf[x].kind == BUF_ALIAS) x = r->e->buf[x].alias;
    return x;
}

static void ptr(const R *r, Str *s, int x) {
    x = resolve(r, x);
    const Buffer *b = &r->e->buf[x];
    const char *t = r->g->nodes[x].dtype == DT_I32 ? "int32_t" : "real";
    switch (b->kind) {
    case BUF_PARAM: str_printf(s, "(m->params + %lld)", (long long)b->offset); break;
    case BUF_STATE: str_printf(s, "(m->state + %lld)", (long long)b->offset); break;
    case BUF_ACT: str_printf(s, "((%s *)(m->act + %lld))", t, (long long)b->offset); break;
    case BUF_INPUT: str_printf(s, "((const %s *)in[%d])", t, b->index); break;
    default: str_printf(s, "NULL /* internal: node %d has no buffer */", x); break;
    }
}




static bool is_full_or_scalar(const R *r, int x, Shape space) {
    Shape xs = r->g->nodes[x].shape;
    return shape_eq(xs, space) || shape_numel(xs, 2) == 1;
}

static void operand_name(const R *r, const Launch *L, int x, char *buf, size_t n, Str *tmp) {
    if (launch_has(L, x)) snprintf(buf, n, "t%d", x);
    else if (node_is_inline(&r->g->nodes[x])) {
        tmp->len = 0;
        if (tmp->buf) tmp->buf[0] = 0;
        render_inline_value(tmp, r->g, x, "m->step", "B");
        snprintf(buf, n, "%s", tmp->buf);
    } else snprintf(buf, n, "l%d", x);
}

/* The statements computing every group member at one point of the space. */
static void body(const R *r, const Launch *L, const char *ind, int skip_root) {
    char names[NNC_MAX_IN][256];
    const char *ops[NNC_MAX_IN];
    Str tmp = {0};
    for (int i = 0; i < L->nnodes; i++) {
        int id = L->nodes[i];
        const Node *n = &r->g->nodes[id];
        if (id == skip_root) continue;
        for (int j = 0; j < n->nin; j++) {
            operand_name(r, L, n->in[j], names[j], sizeof names[j], &tmp);
            ops[j] = names[j];
        }
        str_printf(r->s, "%sreal t%d = ", ind, id);
        render_ew_expr(r->s, r->g, id, ops);
        str_puts(r->s, ";\n");
    }
    str_free(&tmp);
}

static void loads(const R *r, const Launch *L, Shape space, bool flat, bool transposed, const char *ind) {
    for (int j = 0; j < L->nins; j++) {
        int x = L->ins[j];
        str_printf(r->s, "%sreal l%d = (real)i%d[", ind, x, j);
        if (flat) str_puts(r->s, shape_numel(r->g->nodes[x].shape, 2) == 1 && !shape_eq(r->g->nodes[x].shape, space) ? "0" : "i");
        else render_load_offset(r->s, r->g, x, space, transposed);
        str_puts(r->s, "];\n");
    }
}

static bool aliases_input(const R *r, const Launch *L, int out) {
    const Buffer *b = &r->e->buf[resolve(r, out)];
    for (int j = 0; j < L->nins; j++) {
        const Buffer *c = &r->e->buf[resolve(r, L->ins[j])];
        if (c->kind == b->kind && c->offset == b->offset) return true;
    }
    return false;
}

static void decl_ptrs(const R *r, const Launch *L, bool outs) {
    bool restrict_ok = true;
    for (int j = 0; j < L->nouts; j++) restrict_ok &= !aliases_input(r, L, L->outs[j]);
    const char *rq = restrict_ok ? " restrict" : "";
    for (int j = 0; j < L->nins; j++) {
        int x = L->ins[j];
        str_printf(r->s, "    const %s *%s i%d = ", r->g->nodes[x].dtype == DT_I32 ? "int32_t" : "real", rq, j);
        ptr(r, r->s, x);
        str_puts(r->s, ";\n");
    }
    for (int j = 0; outs && j < L->nouts; j++) {
        str_printf(r->s, "    real *%s o%d = ", rq, j);
        ptr(r, r->s, L->outs[j]);
        str_puts(r->s, ";\n");
    }
}

static void open_loops(const R *r, Shape sp, int from, int to, const char *omp_cond) {
    for (int l = from; l < to; l++) {
        if (l == from && omp_cond) str_printf(r->s, "    #pragma omp parallel for if (%s)\n", omp_cond);
        str_printf(r->s, "%*sfor (int64_t a%d = 0; a%d < ", 4 + 4 * (l - from), "", l, l);
        render_dim(r->s, sp.d[l], "B");
        str_printf(r->s, "; a%d++) {\n", l);
    }
}

static void close_loops(const R *r, int n) {
    for (int l = n - 1; l >= 0; l--) str_printf(r->s, "%*s}\n", 4 + 4 * l, "");
}

static void render_ew(const R *r, const Launch *L) {
    Shape sp = L->space;
    bool transposed = r->g->nodes[L->root].op == OP_TRANSPOSE;
    bool flat = !transposed;
    for (int j = 0; j < L->nins; j++) flat &= is_full_or_scalar(r, L->ins[j], sp);
    decl_ptrs(r, L, true);
    Str cond = {0};
    render_numel(&cond, sp);
    str_printf(&cond, " > %d", OMP_MIN_ELEMS);
    if (flat || sp.rank == 0) {
        str_puts(r->s, "    const int64_t n = ");
        render_numel(r->s, sp);
        if (worth_threads(r, sp, OMP_MIN_ELEMS))
            str_printf(r->s, ";\n    #pragma omp parallel for simd if (%s)\n", cond.buf);
        else
            str_puts(r->s, ";\n");
        str_puts(r->s, "    for (int64_t i = 0; i < n; i++) {\n");
        loads(r, L, sp, true, false, "        ");
        body(r, L, "        ", -1);
        for (int j = 0; j < L->nouts; j++) str_printf(r->s, "        o%d[i] = t%d;\n", j, L->outs[j]);
        str_puts(r->s, "    }\n");
    } else {
        open_loops(r, sp, 0, sp.rank, worth_threads(r, sp, OMP_MIN_ELEMS) ? cond.buf : NULL);
        Str ind = {0};
        str_printf(&ind, "%*s", 4 + 4 * sp.rank, "");
        loads(r, L, sp, false, transposed, ind.buf);
        body(r, L, ind.buf, -1);
        for (int j = 0; j < L->nouts; j++) {
            str_printf(r->s, "%so%d[", ind.buf, j);
            render_load_offset(r->s, r->g, L->outs[j], sp, false);
            str_printf(r->s, "] = t%d;\n", L->outs[j]);
        }
        close_loops(r, sp.rank);
        str_free(&ind);
    }
    str_free(&cond);
}

static void reduce_value(const R *r, const Launch *L, char *buf, size_t n) {
    Str tmp = {0};
    operand_name(r, L, r->g->nodes[L->root].in[0], buf, n, &tmp);
    str_free(&tmp);
}

static void reduce_scale(const Launch *L, int64_t mask, Str *s) {
    int64_t k = 1;
    bool b = false;
    for (int l = 0; l < L->space.rank; l++)
        if (mask >> l & 1) {
            if (L->space.d[l] == DIM_BATCH) b = true;
            else k *= L->space.d[l];
        }
    if (b) str_printf(s, "(1.0 / ((double)B * %lld))", (long long)k);
    else str_printf(s, "(1.0 / %lld.0)", (long long)k);
}

/* The keepdim output offset of a point of the input space. */
static void reduce_out_offset(const Launch *L, int64_t mask, Str *s) {
    Shape k = L->space;
    for (int l = 0; l < k.rank; l++)
        if (mask >> l & 1) k.d[l] = 1;
    bool any = false;
    for (int l = 0; l < k.rank; l++) {
        if (mask >> l & 1) continue;
        int64_t st = 1;
        bool b = false;
        for (int j = l + 1; j < k.rank; j++) {
            if (k.d[j] == DIM_BATCH) b = true;
            else st *= k.d[j];
        }
        str_printf(s, "%sa%d * %s%lld", any ? " + " : "", l, b ? "B * " : "", (long long)st);
        any = true;
    }
    if (!any) str_puts(s, "0");
}

static void render_reduce(const R *r, const Launch *L) {
    const Node *n = &r->g->nodes[L->root];
    Shape sp = L->space;
    int64_t mask = launch_reduce_mask(r->g, L);
    bool isMax = n->op == OP_MAX;
    int kept = 0;
    bool suffix = true;
    for (int l = 0; l < sp.rank; l++) {
        if (!(mask >> l & 1)) {
            if (kept != l) suffix = false;
            kept++;
        }
    }
    decl_ptrs(r, L, false);
    str_puts(r->s, "    real *o0 = ");
    ptr(r, r->s, L->root);
    str_puts(r->s, ";\n");
    char val[256];
    reduce_value(r, L, val, sizeof val);
    Str scale = {0}, oo = {0};
    if (n->op == OP_MEAN) reduce_scale(L, mask, &scale);
    else str_puts(&scale, "1.0");
    reduce_out_offset(L, mask, &oo);
    const char *init = isMax ? "-INFINITY" : "0.0";
    if (suffix) {
        Str cond = {0};
        Shape ks = sp;
        ks.rank = kept;
        render_numel(&cond, ks);
        str_printf(&cond, " > %d", OMP_MIN_ELEMS / 64);
        open_loops(r, sp, 0, kept, kept && worth_threads(r, ks, OMP_MIN_ELEMS / 64) ? cond.buf : NULL);
        int ind = 4 + 4 * kept;
        str_printf(r->s, "%*sdouble acc = %s;\n", ind, "", init);
        for (int l = kept; l < sp.rank; l++) {
            str_printf(r->s, "%*sfor (int64_t a%d = 0; a%d < ", ind + 4 * (l - kept), "", l, l);
            render_dim(r->s, sp.d[l], "B");
            str_printf(r->s, "; a%d++) {\n", l);
        }
        Str in = {0};
        str_printf(&in, "%*s", ind + 4 * (sp.rank - kept), "");
        loads(r, L, sp, false, false, in.buf);
        body(r, L, in.buf, L->root);
        if (isMax) str_printf(r->s, "%sif (%s > acc || %s != %s) acc = %s;\n", in.buf, val, val, val, val);
        else str_printf(r->s, "%sacc += %s;\n", in.buf, val);
        for (int l = sp.rank - 1; l >= kept; l--) str_printf(r->s, "%*s}\n", ind + 4 * (l - kept), "");
        str_printf(r->s, "%*so0[%s] = (real)(acc * %s);\n", ind, "", oo.buf, scale.buf);
        close_loops(r, kept);
        str_free(&in);
        str_free(&cond);
    } else {
        str_puts(r->s, "    const int64_t nout = ");
        render_numel(r->s, n->shape);
        str_printf(r->s, ";\n    for (int64_t i = 0; i < nout; i++) o0[i] = %s;\n", isMax ? "-INFINITY" : "0");
        open_loops(r, sp, 0, sp.rank, NULL);
        Str in = {0};
        str_printf(&in, "%*s", 4 + 4 * sp.rank, "");
        loads(r, L, sp, false, false, in.buf);
        body(r, L, in.buf, L->root);
        if (isMax) str_printf(r->s, "%s{ real *q = &o0[%s]; if (%s > *q || %s != %s) *q = %s; }\n", in.buf, oo.buf, val, val, val, val);
        else str_printf(r->s, "%so0[%s] += %s;\n", in.buf, oo.buf, val);
        close_loops(r, sp.rank);
        if (n->op == OP_MEAN) str_printf(r->s, "    for (int64_t i = 0; i < nout; i++) o0[i] = (real)(o0[i] * %s);\n", scale.buf);
        str_free(&in);
    }
    str_free(&scale);
    str_free(&oo);
}

#include "render_c_row.inc"

static void render_gemm(const R *r, const Launch *L) {
    const Graph *g = r->g;
    Shape c = g->nodes[L->root].shape, a = g->nodes[L->a].shape, b = g->nodes[L->b].shape;
    str_puts(r->s, "    const real *A = ");
    ptr(r, r->s, L->a);
    str_puts(r->s, ";\n    const real *Bm = ");
    ptr(r, r->s, L->b);
    str_puts(r->s, ";\n    real *C = ");
    ptr(r, r->s, L->fold >= 0 ? L->fold : L->root);
    str_puts(r->s, ";\n    const int M = (int)(");
    render_dim(r->s, c.d[0], "B");
    str_puts(r->s, "), N = (int)(");
    render_dim(r->s, c.d[1], "B");
    str_puts(r->s, "), K = (int)(");
    render_dim(r->s, L->ta ? a.d[0] : a.d[1], "B");
    str_puts(r->s, "), lda = (int)(");
    render_dim(r->s, a.d[1], "B");
    str_puts(r->s, "), ldb = (int)(");
    render_dim(r->s, b.d[1], "B");
    str_puts(r->s, ");\n");
    if (L->fold >= 0) {   /* C = p - lr * A@B: C starts as p (normally p's own memory) */
        int leaf = g->nodes[L->fold].in[0];
        if (resolve(r, leaf) != resolve(r, L->fold) && r->e->buf[resolve(r, L->fold)].offset != r->e->buf[resolve(r, leaf)].offset) {
            str_puts(r->s, "    memcpy(C, ");
            ptr(r, r->s, leaf);
            str_puts(r->s, ", sizeof(real) * (size_t)M * (size_t)N);\n");
        }
    }
    int64_t bm = g->batch_max;
    int64_t flops = shape_numel(c, bm) * (L->ta ? shape_numel(a, bm) / shape_numel(shape_of(1, &a.d[1]), bm)
                                                  : shape_numel(shape_of(1, &a.d[1]), bm));
    if (flops <= SMALL_GEMM_MACS) {   /* a library call costs more than this product */
        str_printf(r->s,
            "    for (int i = 0; i < M; i++)\n"
            "        for (int j = 0; j < N; j++) {\n"
            "            real acc = 0;\n"
            "            for (int k = 0; k < K; k++) acc += A[%s] * Bm[%s];\n"
            "            C[i * N + j] = %s(real)%s * acc;\n"
            "        }\n",
            L->ta ? "k * lda + i" : "i * lda + k", L->tb ? "j * ldb + k" : "k * ldb + j",
            L->fold >= 0 ? "C[i * N + j] + " : "", render_num((char[RENDER_NUM_LEN]){0}, L->alpha));
        return;
    }
    str_printf(r->s, "    cblas_%cgemm(101, %d, %d, M, N, K, (real)%s, A, lda, Bm, ldb, %d, C, N);\n",
               r->o->f64 ? 'd' : 's', L->ta ? 112 : 111, L->tb ? 112 : 111,
               render_num((char[RENDER_NUM_LEN]){0}, L->alpha), L->fold >= 0 ? 1 : 0);
}

static void render_copy(const R *r, const Launch *L, int dst, int src) {
    str_puts(r->s, "    memcpy(");
    ptr(r, r->s, dst);
    str_puts(r->s, ", ");
    ptr(r, r->s, src);
    str_puts(r->s, ", (size_t)");
    render_numel(r->s, r->g->nodes[dst].shape);
    str_printf(r->s, " * sizeof(%s));\n", r->g->nodes[dst].dtype == DT_I32 ? "int32_t" : "real");
    (void)L;
}

static const char *launch_kind_name(LaunchKind k) {
    static const char *n[] = {"elementwise", "reduction", "row-wise", "gemm", "copy", "assign"};
    return n[k];
}

static void render_launch(const R *r, const Launch *L, int k) {
    str_printf(r->s, "\n/* %s launch %d: %s", r->e->name, k, launch_kind_name(L->kind));
    for (int i = 0; i < L->nnodes; i++) str_printf(r->s, "%s%s", i ? ", " : " (", op_info[r->g->nodes[L->nodes[i]].op].name);
    str_puts(r->s, ")\n");
    render_source_lines(r->s, r->p, L, " *   ");
    str_printf(r->s, " */\nstatic void %s_%s_%d(struct %s *m, const void *const *in, int64_t B) {\n", r->mn, r->e->name, k, r->mn);
    str_puts(r->s, "    (void)m; (void)in; (void)B;\n");
    switch (L->kind) {
    case L_EW: render_ew(r, L); break;
    case L_REDUCE: render_reduce(r, L); break;
    case L_ROW: render_row(r, L); break;
    case L_GEMM: render_gemm(r, L); break;
    case L_COPY: render_copy(r, L, L->root, r->g->nodes[L->root].in[0]); break;
    case L_ASSIGN: render_copy(r, L, r->g->nodes[L->root].in[0], r->g->nodes[L->root].in[1]); break;
    }
    str_puts(r->s, "}\n");
}

/* --check-numerics: after a launch, the first NaN or Inf in what it wrote stops the step with
 * the op, its .nn line and the step, as torch.autograd.detect_anomaly would. */
static void render_numerics_check(const R *r, const Launch *L, int k) {
    for (int j = 0; j < L->nouts + (L->kind == L_GEMM && L->nouts == 0); j++) {
        int o = L->nouts ? L->outs[j] : L->root;
        const Node *n = &r->g->nodes[o];
        if (n->dtype != DT_F32) continue;
        Str what = {0};
        launch_describe(&what, r->p, r->e, k, o);
        str_puts(r->s, "    { const real *q = ");
        ptr(r, r->s, o);
        str_puts(r->s, "; const int64_t nq = ");
        render_numel(r->s, n->shape);
        str_puts(r->s, ";\n      for (int64_t i = 0; i < nq; i++) if (!isfinite(q[i])) {\n"
                       "        m->status = NNC_STATUS_ARG;\n"
                       "        snprintf(m->msg, sizeof m->msg, NNC_RT_NONFINITE_FMT,\n"
                       "                 isnan(q[i]) ? \"NaN\" : \"Inf\", (long long)i, \"");
        render_c_string_body(r->s, what.buf);
        str_puts(r->s, "\", (long long)m->step);\n        return m->status;\n      } }\n");
        str_free(&what);
    }
}

/* An entry's launches in schedule order.  A row-wise kernel's failed check (a label out of
 * range) stops the call; the runtime has already advanced the step of a train_step. */
static void render_entry(const R *r) {
    for (int k = 0; k < r->e->nlaunch; k++) render_launch(r, &r->e->launches[k], k);
    str_printf(r->s, "\nstatic int %s_run_%s(struct %s *m, const void *const *in, int64_t B) {\n", r->mn, r->e->name, r->mn);
    for (int k = 0; k < r->e->nlaunch; k++) {
        str_printf(r->s, "    %s_%s_%d(m, in, B);\n", r->mn, r->e->name, k);
        if (r->e->launches[k].kind == L_ROW) str_puts(r->s, "    if (m->status) return m->status;\n");
        if (r->o->check_numerics) render_numerics_check(r, &r->e->launches[k], k);
    }
    str_puts(r->s, "    return m->status;\n}\n");
}

/* The whole file: prelude, each entry's kernels and entry function, then the model's
 * description, device and typed API (render_c_model.c), from one description. */
void render_program(const Program *p, const BuildOpts *o, Str *s) {
    Arena arena = {0};
    const nnc_model_desc *d = model_desc_build(p, o->f64, NULL, &arena);
    R r = {.p = p, .g = p->g, .o = o, .mn = model_c_name(p), .s = s};
    render_c_prelude(s, p, o);
    for (int k = 0; k < ENTRY_COUNT; k++) {
        r.e = &p->entry[k];
        if (d->entry[k].present) render_entry(&r);
    }
    render_c_model(s, p, d);
    arena_free(&arena);
}
