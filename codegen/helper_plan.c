/* helper_plan.c - an L_HELPER launch as a list of steps, planned once for both targets.
 *
 * Each helper op is one function here, which says what its launch does in terms of
 * helpers.def's routines: which routine over how many elements with which pointers and
 * numbers, which GEMMs between them, what to zero, and for a convolution the loop over chunks
 * of the batch (Launch.chunk samples through Launch.scratch, plan.c) with a library tried first
 * (HS_CONV_LIB: oneDNN on the CPU, cuDNN on CUDA).  The C dialect prints the steps (dialect_c.c) and the CUDA backend issues them
 * (cuda/cuda_issue.c); neither knows any helper op.  A number that depends on the batch or the chunk
 * is an Affine over (1, B, n0, S, SP): the C printer spells it, CUDA evaluates it. */
#include <assert.h>
#include <string.h>

#include "helpers.h"

/* ---- affine expressions ------------------------------------------------------------------- */

static Affine aff(AffineVar v, int64_t k) {
    Affine a = {{0}};
    a.c[v] = k;
    return a;
}

static Affine aff_k(int64_t k) { return aff(AFF_1, k); }
static Affine aff_dim(int64_t d) { return dim_is_batch(d) ? aff(AFF_B, dim_size(d, 1)) : aff_k(d); }

/* A shape's element count: k, or k B with the batch axis (B*m counting m). */
static Affine aff_numel(Shape s) {
    bool b;
    int64_t k = shape_prod(s, ~0u, &b);
    return b ? aff(AFF_B, k) : aff_k(k);
}

int64_t affine_eval(Affine a, const int64_t v[AFF_NVARS]) {
    int64_t r = 0;
    for (int i = 0; i < AFF_NVARS; i++) r += a.c[i] * (i == AFF_1 ? 1 : v[i]);
    return r;
}

void affine_render(Str *s, Affine a) {
    static const char *const name[AFF_NVARS] = {"", "B", "n0", "S", "SP"};
    int terms = 0;
    for (int i = 0; i < AFF_NVARS; i++) terms += a.c[i] != 0;
    if (terms == 0) {
        str_puts(s, "0");
        return;
    }
    if (terms == 1 && a.c[AFF_B] != 0 && a.c[AFF_B] != 1) { /* an element count, as render_numel */
        str_printf(s, "(B * %lldLL)", (long long)a.c[AFF_B]);
        return;
    }
    if (terms > 1) str_puts(s, "(");
    bool first = true;
    for (int k = 1; k <= AFF_NVARS; k++) { /* the variables in order, the constant last */
        int i = k % AFF_NVARS;
        if (!a.c[i]) continue;
        str_puts(s, first ? "" : " + ");
        first = false;
        if (i == AFF_1) str_printf(s, "%lld", (long long)a.c[i]);
        else if (a.c[i] == 1) str_puts(s, name[i]);
        else str_printf(s, "%lld * %s", (long long)a.c[i], name[i]);
    }
    if (terms > 1) str_puts(s, ")");
}

/* ---- building steps ----------------------------------------------------------------------- */

/* What a planner works from: launch L of entry e, whose root r is the op, and the plan it fills. */
typedef struct {
    HelperPlan *hp;
    const Graph *g;
    const Entry *e;
    const Launch *L;
    const Node *r;
} Planner;

static HelperPtr node_ptr(int x) { return (HelperPtr){HPTR_NODE, x, 0}; }
static HelperPtr scratch_ptr(int64_t off) { return (HelperPtr){HPTR_SCRATCH, -1, off}; }

static HelperStep *step_add(HelperPlan *hp, HelperStepKind kind) {
    assert(hp->nsteps < HELPER_MAX_STEPS);
    HelperStep *s = &hp->step[hp->nsteps++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    return s;
}

/* A call of h over n elements with these pointers; the parameters after n follow (call_arg). */
static HelperStep *call(HelperPlan *hp, Helper h, Affine n, int nptr, const HelperPtr *ptr) {
    HelperStep *s = step_add(hp, HS_CALL);
    assert(nptr <= (int)NNC_COUNTOF(s->call.ptr));
    s->call.h = h;
    s->call.n = n;
    s->call.nptr = nptr;
    memcpy(s->call.ptr, ptr, (size_t)nptr * sizeof *ptr);
    return s;
}

static void call_arg(HelperStep *s, HelperArg a) {
    assert(s->call.narg < (int)NNC_COUNTOF(s->call.arg));
    s->call.arg[s->call.narg++] = a;
}

static void call_i64(HelperStep *s, Affine v) { call_arg(s, (HelperArg){.kind = HARG_I64, .v = v}); }

/* count reals at p zeroed (with a guard: only when it is 0) */
static void zero(HelperPlan *hp, HelperPtr p, Affine count, const Affine *guard) {
    HelperStep *s = step_add(hp, HS_ZERO);
    s->zero.p = p;
    s->zero.count = count;
    s->zero.guarded = guard != NULL;
    if (guard) s->zero.guard = *guard;
}

/* ---- the ops -------------------------------------------------------------------------------- */

/* A training entry draws the mask; evaluation writes 1 (dropout passes x through). */
static void plan_dropout(Planner *P) {
    HelperStep *s = call(P->hp, HP_DROPOUT_MASK, aff_numel(P->r->shape), 1, (HelperPtr[]){node_ptr(P->L->root)});
    call_arg(s, (HelperArg){.kind = HARG_PTR, .p = {HPTR_STEP, -1, 0}});
    call_i64(s, aff_k(P->r->origin));
    call_arg(s, (HelperArg){.kind = HARG_F64, .f = P->r->attr.scalars.p[0]});
    call_arg(s, (HelperArg){.kind = HARG_INT, .v = aff_k(P->e->kind != ENTRY_EVAL)});
    call_arg(s, (HelperArg){.kind = HARG_INT, .v = aff_k(P->e->kind == ENTRY_ACCUM)});
}

/* The lookup records a bad index in the error record; the gradient adds into a zeroed dw. */
static void plan_embedding(Planner *P) {
    const Node *r = P->r;
    bool fwd = r->op == OP_EMBEDDING;
    const Shape *ws = &P->g->nodes[fwd ? r->in[1] : P->L->root].shape; /* [V, D] */
    if (!fwd) zero(P->hp, node_ptr(P->L->root), aff_k(ws->d[0] * ws->d[1]), NULL);
    HelperPtr ptr[3] = {node_ptr(r->in[0]), node_ptr(r->in[1]), node_ptr(P->L->root)};
    Affine n = aff_numel(fwd ? r->shape : P->g->nodes[r->in[0]].shape);
    HelperStep *s = call(P->hp, fwd ? HP_EMBEDDING : HP_EMBEDDING_GRAD, n, 3, ptr);
    call_i64(s, aff_k(ws->d[1]));
    call_i64(s, aff_k(ws->d[0]));
    if (fwd) call_arg(s, (HelperArg){.kind = HARG_PTR, .p = {HPTR_ERR, -1, 0}});
}

/* Along axis ax of [outer, L, inner]: concat's operands (up to four; unused pointers repeat
 * the first), or a slice's x and y, with the extents and (slices) start and step. */
static void plan_slices(Planner *P) {
    const Node *r = P->r;
    const Shape *y = &r->shape, *x = &P->g->nodes[r->in[0]].shape;
    int ax = r->attr.slice.axis, np = 0;
    bool concat = r->op == OP_CONCAT;
    Shape after = {0};
    for (int d = ax + 1; d < y->rank; d++) after.d[after.rank++] = y->d[d];
    HelperPtr ptr[5];
    for (int j = 0; j < (concat ? 4 : 1); j++) ptr[np++] = node_ptr(r->in[j < r->nin ? j : 0]);
    ptr[np++] = node_ptr(P->L->root);
    Helper h = concat ? HP_CONCAT : r->op == OP_SLICE ? HP_SLICE : HP_SLICE_GRAD;
    HelperStep *s = call(P->hp, h, aff_numel(r->shape), np, ptr);
    call_i64(s, aff_numel(after)); /* inner */
    if (concat) {
        call_i64(s, aff_dim(y->d[ax]));
        for (int j = 0; j < 4; j++) call_i64(s, aff_k(j < r->nin ? P->g->nodes[r->in[j]].shape.d[ax] : 0));
        return;
    }
    call_i64(s, aff_dim(r->op == OP_SLICE ? y->d[ax] : x->d[ax])); /* Ly: the sliced extent */
    call_i64(s, aff_dim(r->op == OP_SLICE ? x->d[ax] : y->d[ax])); /* Lx: the whole */
    call_i64(s, aff_k(r->attr.slice.start));
    call_i64(s, aff_k(r->attr.slice.step));
}

/* rand and randn draw in every entry, keyed as dropout's mask. */
static void plan_random(Planner *P) {
    HelperStep *s = call(P->hp, HP_RANDOM, aff_numel(P->r->shape), 1, (HelperPtr[]){node_ptr(P->L->root)});
    call_arg(s, (HelperArg){.kind = HARG_PTR, .p = {HPTR_STEP, -1, 0}});
    call_i64(s, aff_k(P->r->origin));
    call_arg(s, (HelperArg){.kind = HARG_INT, .v = aff_k(P->r->attr.scalars.p[0] != 0)});
    call_arg(s, (HelperArg){.kind = HARG_INT, .v = aff_k(P->e->kind == ENTRY_ACCUM)});
}

/* One call: the operands, then the result, and the geometry. */
static void plan_pool(Planner *P) {
    const Node *r = P->r;
    HelperPtr ptr[3];
    int np = 0;
    for (int j = 0; j < r->nin; j++) ptr[np++] = node_ptr(r->in[j]);
    ptr[np++] = node_ptr(P->L->root);
    Helper h = r->op == OP_MAX_POOL2D ? HP_MAX_POOL
        : r->op == OP_MAX_POOL2D_GRAD ? HP_MAX_POOL_GRAD
        : r->op == OP_AVG_POOL2D      ? HP_AVG_POOL
                                      : HP_AVG_POOL_GRAD;
    P->hp->q = spatial_geom(P->g, r);
    call(P->hp, h, aff_numel(r->shape), np, ptr);
}

/* A call of a convolution's chunk helper over n elements from src into dst: n0, S, and for
 * the permutes OC and P. */
static void conv_call(HelperPlan *hp, Helper h, Affine n, HelperPtr src, HelperPtr dst) {
    HelperStep *s = call(hp, h, n, 2, (HelperPtr[]){src, dst});
    call_i64(s, aff(AFF_N0, 1));
    call_i64(s, aff(AFF_S, 1));
    if (h == HP_TO_NCHW || h == HP_FROM_NCHW) {
        call_i64(s, aff_k(hp->q.OC));
        call_i64(s, aff_k(hp->q.OH * hp->q.OW));
    }
}

/* A GEMM operand: group 0's matrix, the reals to group g's (times g), the leading dimension. */
typedef struct {
    HelperPtr p;
    Affine step, ld;
} GemmOperand;

/* One GEMM per group, alpha 1: C_g = op(A_g) op(B_g) (+ C_g per beta), C_g [M, N]. */
static void conv_gemm(HelperPlan *hp, bool ta, bool tb, Affine M, Affine N, Affine K, GemmOperand a, GemmOperand b,
                      GemmOperand c, HelperBeta beta) {
    HelperStep *s = step_add(hp, HS_GEMM);
    s->gemm.ta = ta, s->gemm.tb = tb, s->gemm.G = hp->q.G;
    s->gemm.M = M, s->gemm.N = N, s->gemm.K = K;
    s->gemm.a = a.p, s->gemm.sa = a.step, s->gemm.lda = a.ld;
    s->gemm.b = b.p, s->gemm.sb = b.step, s->gemm.ldb = b.ld;
    s->gemm.c = c.p, s->gemm.sc = c.step, s->gemm.ldc = c.ld;
    s->gemm.beta = beta;
}

/* helpers.c's top comment: per chunk of S samples, the column buffer col [C KH KW, S P] and the
 * permuted output yt [OC, S P], both in the scratch, between the helpers and the GEMMs.  Group
 * g's rows of the weight W [OC, C/G KH KW], of col and of yt are one GEMM's. */
static void plan_conv(Planner *P) {
    HelperPlan *hp = P->hp;
    const Node *r = P->r;
    const SpatialGeom q = hp->q = spatial_geom(P->g, r);
    const int64_t pts = q.OH * q.OW, cr = q.C * q.KH * q.KW, ckk = cr / q.G, ocg = q.OC / q.G;
    const HelperPtr x0 = node_ptr(r->in[0]), x1 = node_ptr(r->in[1]), out = node_ptr(P->L->root);
    const HelperPtr colp = scratch_ptr(P->L->scratch), ytp = scratch_ptr(P->L->scratch + cr * P->L->chunk * pts);
    const Affine SP = aff(AFF_SP, 1), rows = aff_dim(q.N);
    const GemmOperand w = {r->op == OP_CONV2D_DW ? out : x1, aff_k(ocg * ckk), aff_k(ckk)};
    const GemmOperand col = {colp, aff(AFF_SP, ckk), SP}, yt = {ytp, aff(AFF_SP, ocg), SP};
    HelperStep *d = step_add(hp, HS_CONV_LIB);
    d->lib.kind = r->op == OP_CONV2D ? 0 : r->op == OP_CONV2D_DX ? 1 : 2;
    d->lib.rows = rows;
    d->lib.a = x0, d->lib.b = x1, d->lib.out = out;
    HelperStep *ch = step_add(hp, HS_CHUNKS);
    ch->chunks.rows = rows;
    ch->chunks.chunk = P->L->chunk;
    ch->chunks.P = pts;
    int first = hp->nsteps;
    if (r->op == OP_CONV2D) {
        conv_call(hp, HP_IM2COL, aff(AFF_SP, cr), x0, colp);
        conv_gemm(hp, false, false, aff_k(ocg), SP, aff_k(ckk), w, col, yt, HBETA_0);
        conv_call(hp, HP_TO_NCHW, aff(AFF_SP, q.OC), ytp, out);
    } else if (r->op == OP_CONV2D_DX) {
        conv_call(hp, HP_FROM_NCHW, aff(AFF_SP, q.OC), x0, ytp);
        conv_gemm(hp, true, false, aff_k(ckk), SP, aff_k(ocg), w, yt, col, HBETA_0);
        conv_call(hp, HP_COL2IM, aff(AFF_S, q.C * q.H * q.W), colp, out);
    } else { /* the weight gradient sums over the chunks */
        conv_call(hp, HP_IM2COL, aff(AFF_SP, cr), x1, colp);
        conv_call(hp, HP_FROM_NCHW, aff(AFF_SP, q.OC), x0, ytp);
        conv_gemm(hp, false, true, aff_k(ocg), aff_k(ckk), SP, yt, col, w, HBETA_CHUNKS);
    }
    ch->chunks.nbody = hp->nsteps - first;
    if (r->op == OP_CONV2D_DW) zero(hp, out, aff_k(q.OC * ckk), &rows); /* an empty batch */
}

/* Each helper op's planner. */
typedef void PlanFn(Planner *P);
static PlanFn *planner(Op op) {
    if (op_has(op, OPF_CONV)) return plan_conv;
    if (op_has(op, OPF_POOL)) return plan_pool;
    if (op_info[op].attr == ATTR_SLICE) return plan_slices;
    if (op == OP_EMBEDDING || op == OP_EMBEDDING_GRAD) return plan_embedding;
    if (op == OP_DROPOUT_MASK) return plan_dropout;
    if (op == OP_RANDOM) return plan_random;
    return NULL;
}

HelperPlan helper_plan(const Program *p, const Entry *e, const Launch *L) {
    HelperPlan hp;
    memset(&hp, 0, sizeof hp);
    Planner P = {&hp, p->g, e, L, &p->g->nodes[L->root]};
    PlanFn *plan = planner(P.r->op);
    assert(plan); /* every OK_HELPER row of ops.def has one (tests/ir/test_passes.c) */
    plan(&P);
    return hp;
}

bool helper_plan_reports(const HelperPlan *hp) {
    for (int i = 0; i < hp->nsteps; i++)
        for (int j = 0; hp->step[i].kind == HS_CALL && j < hp->step[i].call.narg; j++)
            if (hp->step[i].call.arg[j].kind == HARG_PTR && hp->step[i].call.arg[j].p.kind == HPTR_ERR) return true;
    return false;
}
