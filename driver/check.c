/* check.c - `--check-against cpu`: run every step on the CUDA target, and every launch of it
 * again on the CPU from the same inputs, and name the first value where they part by more than
 * the op's numerics allow.
 *
 * Both programs are compiled unfused (one op per launch) and with every launch's result kept
 * as an entry output (PipelineOpts.keep_values), so after a call every value the step computed
 * can be read; values are paired by Node.origin, their id before the copies pass, which is the
 * same on both targets.  The CPU reference is built with BuildOpts.launch_access, so it can
 * run one launch at a time (Backend.launch_access).  The pair is itself a model
 * (nnc_model_abi) whose run() does, per call:
 *   1. copy the CUDA side's parameters, optimizer state and step into the CPU side;
 *   2. run the entry on CUDA;
 *   3. for each launch of the CPU's schedule: write the CUDA values of the launch's inputs
 *      into the CPU's memory (teacher forcing: the CPU recomputes the launch from what CUDA
 *      had, so a difference never propagates into later launches and grows), run that launch
 *      alone, and compare each value it wrote with CUDA's, element by element, against the
 *      tolerance its op's numerics give (check_bound.c: what two correct targets can differ
 *      by), stopping at the first value beyond it with its op, phase, model line, CUDA launch,
 *      element, both values, the tolerance and how it was made.
 * The training loop runs the pair like any model, so the check follows the user's own data,
 * batches and optimizer; the summary at the end gives how close to its tolerance the largest
 * difference came. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "check_bound.h"

typedef struct {
    nnc_model_abi abi;          /* the CUDA model's tables, with this file's functions */
    LoadedModel self;
    LoadedModel *gpu, *cpu;
    const Backend *gbe, *cbe;
    const Program *pg, *pc;
    BuildOpts gbo, cbo; /* how each side was built (its numerics) */
    LaunchAccess cl; /* the CPU's launches, one at a time */
    int *gpu_of[ENTRY_COUNT]; /* origin -> the CUDA output holding that value, or -1 */
    int norigins;
    double factor; /* --check-tol: every tolerance times this */
    char msg[2048];
    long long steps, values, elements;
    long long own_inputs; /* launch inputs CUDA keeps no value of: the CPU's own were used */
    double worst; /* the largest difference / its tolerance seen */
    char worst_at[512];
    int64_t micro; /* accumulate calls since the last train_step (the runtime's nnc_rt.micro) */
    /* the call in progress */
    int entry, launch;
    int64_t call_micro; /* its micro: the CPU reference runs its launches at it */
    int64_t B;
    const void *const *in;
    int nsnap; /* inputs of the launch in progress that it writes over: */
    int snap_node[64]; /* ... their memory node, */
    void *snap[64]; /* ... and their values before it ran */
} Pair;

static Pair *pair_of(void *m) { return m; }

/* Per entry: origin -> CUDA output index (the first that holds it). */
static void pair_outputs(Pair *P) {
    const Graph *gg = P->pg->g;
    P->norigins = gg->n > P->pc->g->n ? gg->n : P->pc->g->n;
    for (int k = 0; k < ENTRY_COUNT; k++) {
        const Entry *e = &P->pg->entry[k];
        P->gpu_of[k] = xmalloc((size_t)(P->norigins + 1) * sizeof(int));
        for (int i = 0; i < P->norigins; i++) P->gpu_of[k][i] = -1;
        for (int j = 0; j < e->noutputs; j++) {
            int o = gg->nodes[e->outputs[j]].origin;
            if (o >= 0 && o < P->norigins && P->gpu_of[k][o] < 0) P->gpu_of[k][o] = j;
        }
    }
}

/* The node whose memory holds x in entry e (a reshape is a view of its operand). */
static int memory_node(const Entry *e, int x) {
    while (e->buf[x].kind == BUF_ALIAS) x = e->buf[x].alias;
    return x;
}

static size_t elem_bytes(const Pair *P, const Graph *g, int x) {
    DType t = g->nodes[x].dtype;
    return t == DT_I32 ? 4 : DTYPE_IS_HALF(t) ? 2 : (size_t)P->cpu->abi->real_bytes;
}

static int64_t numel_at(Shape s, int64_t B) {
    int64_t n = 1;
    for (int i = 0; i < s.rank; i++) n *= dim_size(s.d[i], B);
    return n;
}

/* The CPU's memory of node x in the call in progress, or NULL (an inline scalar). */
static void *cpu_mem(Pair *P, int x) {
    const Entry *e = &P->pc->entry[P->entry];
    x = memory_node(e, x);
    const Buffer *b = &e->buf[x];
    int64_t at = b->offset * P->cpu->abi->real_bytes;
    switch (b->kind) {
    case BUF_PARAM: return (char *)P->cl.block(P->cpu->m, NNC_BLOCK_PARAMS) + at;
    case BUF_STATE: return (char *)P->cl.block(P->cpu->m, NNC_BLOCK_STATE) + at;
    case BUF_ACT: return (char *)P->cl.block(P->cpu->m, NNC_BLOCK_ACT) + at;
    case BUF_INPUT: return (void *)P->in[b->index];
    case BUF_NONE:
    case BUF_INLINE:
    case BUF_ALIAS: break;
    }
    return NULL;
}

/* What check_bound reads: an input the launch wrote over (an in-place update) as it was. */
static const void *cpu_mem_cb(void *ctx, int x) {
    Pair *P = ctx;
    int r = memory_node(&P->pc->entry[P->entry], x);
    for (int i = 0; i < P->nsnap; i++)
        if (P->snap_node[i] == r) return P->snap[i];
    return cpu_mem(P, x);
}

/* CUDA's value of the CPU's node x in this call (by origin), or NULL when CUDA keeps none.  A
 * copy the model wrote (to(x, cuda(1))) is its operand's value: CUDA keeps no copy's result. */
static const void *gpu_value(Pair *P, int x, int *out_index) {
    const Node *n = &P->pc->g->nodes[x];
    int o = n->origin;
    int j = o >= 0 && o < P->norigins ? P->gpu_of[P->entry][o] : -1;
    if (j < 0 && n->op == OP_COPY) return gpu_value(P, n->in[0], out_index);
    if (out_index) *out_index = j;
    return j < 0 ? NULL : P->gpu->abi->output(P->gpu->m, P->entry, j);
}

/* The nodes launch L reads from memory (a GEMM's operands are its transposes' sources). */
static int launch_reads(const Launch *L, int *reads) {
    if (L->kind == L_GEMM) {
        reads[0] = L->a;
        reads[1] = L->b;
        return 2;
    }
    int n = 0;
    for (int j = 0; j < L->nins && n < 64; j++) reads[n++] = L->ins[j];
    return n;
}

/* x copies (perhaps again and again) a batch input, parameter or state: the same on both. */
static bool copies_a_leaf(const Graph *g, int x) {
    while (g->nodes[x].op == OP_COPY) x = g->nodes[x].in[0];
    return op_info[g->nodes[x].op].kind == OK_LEAF;
}

/* Teacher forcing: each value launch k reads that CUDA computed is written into the CPU's
 * memory from CUDA's.  Parameters, state and batch inputs are the same already. */
static void force_inputs(Pair *P, const Launch *L) {
    const Entry *e = &P->pc->entry[P->entry];
    const Graph *g = P->pc->g;
    int reads[64], n = launch_reads(L, reads);
    for (int r = 0; r < n; r++) {
        int x = memory_node(e, reads[r]);
        if (e->buf[x].kind == BUF_INPUT || node_is_inline(&g->nodes[x])) continue;
        void *dst = cpu_mem(P, x);
        int j;
        const void *src = gpu_value(P, x, &j);
        BufKind k = e->buf[x].kind; /* a value CUDA does not keep: the CPU's own is used */
        if (dst && !src && k != BUF_PARAM && k != BUF_STATE && !copies_a_leaf(g, x)) P->own_inputs++;
        if (!dst || !src) continue;
        const nnc_tensor_info *t = &P->gpu->abi->outputs[P->entry][j];
        int64_t n_el = numel_at(g->nodes[x].shape, P->B);
        int64_t gn = 1;
        for (int d = 0; d < t->rank; d++) gn *= dim_size(t->dims[d], P->B);
        if (gn == n_el) memcpy(dst, src, (size_t)n_el * elem_bytes(P, g, x));
    }
}

static size_t value_bytes(Pair *P, int x) {
    return (size_t)numel_at(P->pc->g->nodes[x].shape, P->B) * elem_bytes(P, P->pc->g, x);
}

static bool overlaps(const void *a, size_t na, const void *b, size_t nb) {
    return (const char *)a < (const char *)b + nb && (const char *)b < (const char *)a + na;
}

static int launch_values(const Launch *L, int *outs);

/* Copies of the inputs launch L will write over (an optimizer's update in place, an output
 * over an input that dies in it), for the bound and the message, which need them as read. */
static void snapshot_inputs(Pair *P, const Launch *L) {
    const Entry *e = &P->pc->entry[P->entry];
    int reads[64], outs[64], n = launch_reads(L, reads), no = launch_values(L, outs);
    P->nsnap = 0;
    for (int r = 0; r < n && P->nsnap < 64; r++) {
        int x = memory_node(e, reads[r]);
        void *m = cpu_mem(P, x);
        bool over = false;
        for (int o = 0; m && o < no && !over; o++) {
            void *om = cpu_mem(P, outs[o]);
            over = om && overlaps(m, value_bytes(P, x), om, value_bytes(P, outs[o]));
        }
        if (!over) continue;
        P->snap_node[P->nsnap] = x;
        P->snap[P->nsnap] = xmalloc(value_bytes(P, x) + 1);
        memcpy(P->snap[P->nsnap++], m, value_bytes(P, x));
    }
}

static void snapshots_free(Pair *P) {
    for (int i = 0; i < P->nsnap; i++) free(P->snap[i]);
    P->nsnap = 0;
}

/* A value's elements replaced by their absolute values, in place. */
static void abs_values(void *m, size_t bytes, DType t, int real_bytes) {
    if (DTYPE_IS_HALF(t))
        for (size_t i = 0; i < bytes / 2; i++) ((uint16_t *)m)[i] &= 0x7fff; /* the sign bit */
    else if (real_bytes == 8)
        for (size_t i = 0; i < bytes / 8; i++) ((double *)m)[i] = fabs(((double *)m)[i]);
    else
        for (size_t i = 0; i < bytes / 4; i++) ((float *)m)[i] = fabsf(((float *)m)[i]);
}

typedef struct {
    void *mem; /* the memory changed */
    void *saved; /* its bytes before, or NULL: mem is a copy of a batch input, to free */
    size_t bytes;
} Saved;

/* Every floating input of launch L but `keep` made absolute, its old bytes kept in sv (a batch
 * input: a copy takes its place in `in`).  False when one shares memory with the output
 * [om, om + ob), which the rerun would overwrite. */
static bool abs_inputs(Pair *P, const Launch *L, int keep, const void *om, size_t ob, Saved *sv, int *nsv,
                       const void **in) {
    const Entry *e = &P->pc->entry[P->entry];
    const Graph *g = P->pc->g;
    int reads[64], n = launch_reads(L, reads);
    bool ok = true;
    for (int r = 0; r < n; r++) {
        int x = memory_node(e, reads[r]);
        void *m = cpu_mem(P, x);
        if (x == keep || reads[r] == keep || g->nodes[x].dtype == DT_I32 || !m) continue;
        size_t b = value_bytes(P, x);
        bool dup = false;
        for (int s = 0; s < *nsv; s++) dup |= sv[s].mem == m;
        if (dup) continue;
        ok &= !overlaps(m, b, om, ob);
        void *copy = xmalloc(b + 1);
        memcpy(copy, m, b);
        if (e->buf[x].kind == BUF_INPUT) { /* the caller's batch stays as it is */
            in[e->buf[x].index] = copy;
            sv[(*nsv)++] = (Saved){copy, NULL, b};
        } else sv[(*nsv)++] = (Saved){m, copy, b};
        abs_values(sv[*nsv - 1].mem, b, g->nodes[x].dtype, P->cpu->abi->real_bytes);
    }
    return ok;
}

/* check_bound's rerun: the launch in progress again on |inputs| (but `keep`), output `out`
 * into S, and every byte it touched put back. */
static bool rerun_abs(void *ctx, int out, int keep, double *S) {
    Pair *P = ctx;
    const Launch *L = &P->pc->entry[P->entry].launches[P->launch];
    int nin = P->cpu->abi->ninputs, nsv = 0;
    const void **in = xmalloc((size_t)(nin + 1) * sizeof *in);
    for (int i = 0; i < nin; i++) in[i] = P->in[i];
    Saved sv[64];
    void *om = cpu_mem(P, out);
    size_t ob = value_bytes(P, out);
    void *before = om ? xmalloc(ob + 1) : NULL;
    bool ok = om && abs_inputs(P, L, keep, om, ob, sv, &nsv, in);
    if (ok) {
        memcpy(before, om, ob);
        ok = P->cl.run(P->cpu->m, P->entry, P->launch, in, P->B) == 0;
        for (int64_t i = 0, n = numel_at(P->pc->g->nodes[out].shape, P->B); ok && i < n; i++)
            S[i] = check_elem(P->pc->g, out, om, i, P->cpu->abi->real_bytes);
        memcpy(om, before, ob);
    }
    for (int s = 0; s < nsv; s++) {
        if (sv[s].saved) memcpy(sv[s].mem, sv[s].saved, sv[s].bytes);
        free(sv[s].saved ? sv[s].saved : sv[s].mem);
    }
    free(before);
    free(in);
    return ok;
}

/* The values a launch writes: its outputs, or its root (a product, a copy). */
static int launch_values(const Launch *L, int *outs) {
    if (L->kind == L_ASSIGN || L->kind == L_COLLECTIVE) return 0; /* no value of their own */
    if (!L->nouts) {
        outs[0] = L->root;
        return 1;
    }
    int n = 0;
    for (int j = 0; j < L->nouts && n < 64; j++) outs[n++] = L->outs[j];
    return n;
}

/* "relu (backward, mlp.nn:18:12, launch 9 of train_step)": the value as CUDA computed it. */
static void describe(Pair *P, int x, Str *s) {
    int j, outs[64];
    gpu_value(P, x, &j);
    const Entry *eg = &P->pg->entry[P->entry];
    int node = eg->outputs[j];
    for (int k = 0; k < eg->nlaunch; k++)
        for (int o = 0, n = launch_values(&eg->launches[k], outs); o < n; o++)
            if (outs[o] == node) {
                launch_describe(s, P->pg, eg, k, node);
                return;
            }
    char nb[48];
    str_printf(s, "%s", node_op_name(&P->pc->g->nodes[x], nb));
}

/* |cuda - cpu| of one element: NaN against NaN and equal infinities agree. */
static double diff_of(double c, double g) {
    if (isnan(c) || isnan(g)) return isnan(c) && isnan(g) ? 0 : INFINITY;
    if (isinf(c) && c == g) return 0;
    return fabs(c - g);
}

/* The message for element `at` of value x, beyond its tolerance. */
static void report(Pair *P, const CheckLaunch *c, int x, int64_t at, const CheckTol *t, const void *cv,
                   const void *gv) {
    int rb = P->cpu->abi->real_bytes;
    const Graph *g = P->pc->g;
    double cc = check_elem(g, x, cv, at, rb), gg = check_elem(g, x, gv, at, rb), v[NNC_MAX_IN];
    char scale[64] = "", ins[160] = "";
    if (t->scale) snprintf(scale, sizeof scale, " = %.3g", fabs(t->scale[at]));
    for (int k = 0, nv = check_ew_inputs(c, x, at, v); k < nv; k++)
        snprintf(ins + strlen(ins), sizeof ins - strlen(ins), "%s%.9g", k ? ", " : " from (", v[k]);
    if (ins[0]) snprintf(ins + strlen(ins), sizeof ins - strlen(ins), ")");
    Str what = {0};
    describe(P, x, &what);
    snprintf(P->msg, sizeof P->msg,
             "--check-against cpu: the targets first differ at %s in step %lld: element %lld%s: "
             "cuda %.9g, cpu %.9g, |cuda - cpu| = %.3g > tolerance %.3g (%s%s%s)",
             what.buf, P->steps, (long long)at, ins, gg, cc, diff_of(cc, gg), t->tol[at] * P->factor, t->why, scale,
             P->factor != 1 ? ", times --check-tol" : "");
    str_free(&what);
}

/* false (and P->msg) when value x, written by the launch in progress, differs beyond its
 * tolerance somewhere.  Tolerances are worked out only where the targets differ. */
static bool compare_value(Pair *P, const CheckLaunch *c, int x) {
    const Graph *g = P->pc->g;
    int j, rb = P->cpu->abi->real_bytes;
    const void *gv = gpu_value(P, x, &j);
    const void *cv = cpu_mem(P, x);
    if (!gv || !cv) return true;
    int64_t n = numel_at(g->nodes[x].shape, P->B), ndiff = 0;
    unsigned char *need = xcalloc((size_t)n + 1, 1);
    for (int64_t i = 0; i < n; i++)
        if (diff_of(check_elem(g, x, cv, i, rb), check_elem(g, x, gv, i, rb)) != 0) need[i] = 1, ndiff++;
    P->values++;
    P->elements += n;
    bool ok = true;
    if (ndiff) {
        CheckTol t;
        check_tol_launch(c, x, n, need, &t);
        double worst = 0;
        int64_t at = 0;
        for (int64_t i = 0; i < n; i++) {
            if (!need[i]) continue;
            double d = diff_of(check_elem(g, x, cv, i, rb), check_elem(g, x, gv, i, rb)), tol = t.tol[i] * P->factor;
            double r = tol > 0 ? d / tol : INFINITY;
            if (isnan(r)) r = 0; /* an infinite tolerance: anything goes */
            if (r > worst) worst = r, at = i;
        }
        if (worst > P->worst) {
            Str what = {0};
            describe(P, x, &what);
            P->worst = worst;
            snprintf(P->worst_at, sizeof P->worst_at, "%s", what.buf);
            str_free(&what);
        }
        ok = worst <= 1;
        if (!ok) report(P, c, x, at, &t, cv, gv);
        check_tol_free(&t);
    }
    free(need);
    return ok;
}

/* The launch in progress, as check_bound sees it. */
static CheckLaunch launch_view(Pair *P, const Launch *L) {
    CheckLaunch c = {.p = P->pc,
                     .e = &P->pc->entry[P->entry],
                     .L = L,
                     .B = P->B,
                     .step = P->cpu->abi->get_step(P->cpu->m),
                     .micro = P->call_micro,
                     .real_bytes = P->cpu->abi->real_bytes,
                     .mem = cpu_mem_cb,
                     .rerun_abs = rerun_abs,
                     .ctx = P};
    /* L is the CPU program's launch: both sides are asked how they compute it, from its own nodes (the
     * CUDA program numbers its nodes otherwise: copies add some) */
    P->gbe->numerics(P->pc, L, &P->gbo, &c.num[0]);
    P->cbe->numerics(P->pc, L, &P->cbo, &c.num[1]);
    return c;
}

/* The CPU side starts each call from the CUDA side's parameters, state and step. */
static void copy_state(Pair *P) {
    const nnc_model_abi *G = P->gpu->abi, *C = P->cpu->abi;
    G->sync(P->gpu->m, NNC_SYNC_TO_HOST);
    for (int i = 0; i < G->nparams; i++)
        memcpy(C->param(P->cpu->m, i), G->param(P->gpu->m, i), nnc_tensor_bytes(&G->params[i]));
    for (int i = 0; i < G->nstates; i++)
        memcpy(C->state(P->cpu->m, i), G->state(P->gpu->m, i), nnc_tensor_bytes(&G->states[i]));
}

static int pair_run(void *m, int entry, const void *const *in, int64_t B) {
    Pair *P = pair_of(m);
    P->msg[0] = 0;
    copy_state(P);
    int rg = P->gpu->abi->run(P->gpu->m, entry, in, B);
    if (rg) {
        snprintf(P->msg, sizeof P->msg, "%s", P->gpu->abi->error(P->gpu->m));
        return rg;
    }
    if (entry == NNC_ENTRY_TRAIN) P->steps++;
    P->cpu->abi->set_step(P->cpu->m, P->gpu->abi->get_step(P->gpu->m)); /* the step this call ran at */
    P->call_micro = P->micro; /* ... and its micro-batch in the group, which the CPU's frame reads */
    ((nnc_rt *)P->cpu->m)->micro = P->micro;
    P->micro = entry == NNC_ENTRY_ACCUM ? P->micro + 1 : entry == NNC_ENTRY_TRAIN ? 0 : P->micro;
    P->entry = entry, P->B = B, P->in = in;
    const Entry *e = &P->pc->entry[entry];
    for (int k = 0; k < e->nlaunch; k++) {
        const Launch *L = &e->launches[k];
        P->launch = k;
        force_inputs(P, L);
        snapshot_inputs(P, L);
        int rc = P->cl.run(P->cpu->m, entry, k, in, B);
        if (rc) {
            snprintf(P->msg, sizeof P->msg, "--check-against cpu: the cpu reference failed where cuda did not: %s",
                     P->cpu->abi->error(P->cpu->m));
            snapshots_free(P);
            return rc;
        }
        CheckLaunch c = launch_view(P, L);
        int outs[64], n = launch_values(L, outs);
        bool ok = true;
        for (int j = 0; j < n && ok; j++) ok = compare_value(P, &c, outs[j]);
        snapshots_free(P);
        if (!ok) return 5;
    }
    return 0;
}

static void pair_init(void *m, uint64_t seed) {
    Pair *P = pair_of(m);
    P->micro = 0;
    P->gpu->abi->init(P->gpu->m, seed);
    P->cpu->abi->init(P->cpu->m, seed);
}

static void *pair_param(void *m, int i) { return pair_of(m)->gpu->abi->param(pair_of(m)->gpu->m, i); }
static void *pair_state(void *m, int i) { return pair_of(m)->gpu->abi->state(pair_of(m)->gpu->m, i); }
static const void *pair_output(void *m, int e, int k) { return pair_of(m)->gpu->abi->output(pair_of(m)->gpu->m, e, k); }
static int64_t pair_get_step(void *m) { return pair_of(m)->gpu->abi->get_step(pair_of(m)->gpu->m); }
static void pair_sync(void *m, int dir) { pair_of(m)->gpu->abi->sync(pair_of(m)->gpu->m, dir); }
static const char *pair_error(void *m) { return pair_of(m)->msg; }

static void pair_set_step(void *m, int64_t s) {
    Pair *P = pair_of(m);
    P->micro = 0;
    P->gpu->abi->set_step(P->gpu->m, s);
    P->cpu->abi->set_step(P->cpu->m, s);
}

/* The CUDA side's rate; the CPU reference takes it with the rest of the state before each call. */
static int pair_set_lr(void *m, double lr) {
    Pair *P = pair_of(m);
    int rc = P->gpu->abi->set_lr(P->gpu->m, lr);
    if (rc) snprintf(P->msg, sizeof P->msg, "%s", P->gpu->abi->error(P->gpu->m));
    return rc;
}

LoadedModel *check_pair(const Backend *gbe, LoadedModel *gpu, const Program *pg, const BuildOpts *gbo,
                        const Backend *cbe, LoadedModel *cpu, const Program *pc, const BuildOpts *cbo, double factor,
                        char *err, size_t n) {
    Pair *P = xcalloc(1, sizeof *P);
    *P = (Pair){
        .gpu = gpu, .cpu = cpu, .gbe = gbe, .cbe = cbe, .pg = pg, .pc = pc, .gbo = *gbo, .cbo = *cbo, .factor = factor};
    if (!cbe->launch_access || !cbe->launch_access(cpu, &P->cl) || !gbe->numerics || !cbe->numerics) {
        snprintf(err, n, "--check-against cpu: the %s reference cannot run one launch at a time", cbe->name);
        free(P);
        return NULL;
    }
    P->abi = *gpu->abi;
    P->abi.init = pair_init;
    P->abi.run = pair_run;
    P->abi.param = pair_param;
    P->abi.state = pair_state;
    P->abi.output = pair_output;
    P->abi.get_step = pair_get_step;
    P->abi.set_step = pair_set_step;
    P->abi.error = pair_error;
    P->abi.sync = pair_sync;
    P->abi.set_lr = pair_set_lr;
    P->abi.input_buffer = NULL; /* every call is compared as it ends: no pipelined calls */
    P->abi.submit = NULL;
    P->abi.finish = NULL;
    pair_outputs(P);
    P->self = *gpu;
    P->self.abi = &P->abi;
    P->self.m = P;
    P->self.handle = P;
    return &P->self;
}

void check_pair_finish(LoadedModel *lm, FILE *report) {
    Pair *P = lm->handle;
    if (report)
        fprintf(report,
                "check-against cpu: %lld step%s, %lld values compared launch by launch (%lld elements); the "
                "largest difference was %.3g of its tolerance%s%s\n",
                P->steps, P->steps == 1 ? "" : "s", P->values, P->elements, P->worst < 0 ? 0 : P->worst,
                P->worst_at[0] ? " at " : "", P->worst_at);
    if (report && P->own_inputs)
        fprintf(report, "check-against cpu: %lld launch inputs were the CPU's own values (CUDA keeps none of them)\n",
                P->own_inputs);
    P->gbe->unload(P->gpu);
    P->cbe->unload(P->cpu);
    for (int k = 0; k < ENTRY_COUNT; k++) free(P->gpu_of[k]);
    free(P);
}
