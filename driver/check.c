/* check.c - `--check-against cpu`: run every step on the CUDA target and on the CPU target and
 * name the first value where they part.
 *
 * Both programs are compiled unfused and with every launch's result kept as an entry output
 * (PipelineOpts.keep_values), so after a call every value the step computed can be read on both
 * sides.  Values are paired by Node.origin, their id before the copies pass, which is the same
 * on both targets.  The pair is itself a model (nnc_model_abi) whose run() does, per call:
 *   1. copy the CUDA side's parameters, optimizer state and step into the CPU side, so both
 *      start the step from the same inputs and an earlier tiny difference cannot grow into a
 *      false alarm;
 *   2. run the entry on both;
 *   3. compare every value in the CUDA schedule's order and stop at the first whose largest
 *      difference exceeds tol * (the largest |cpu| value of that tensor, at least 1e-6),
 *      naming its op, phase, model line, launch and the worst element.
 * The training loop runs the pair like any model, so the check follows the user's own data,
 * batches and optimizer; the summary at the end gives the largest difference seen. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef struct {
    nnc_model_abi abi;          /* the CUDA model's tables, with this file's functions */
    LoadedModel self;
    LoadedModel *gpu, *cpu;
    const Backend *gbe, *cbe;
    const Program *pg, *pc;
    int *cpu_out[ENTRY_COUNT];  /* CUDA output k -> CPU output index, or -1 */
    double tol;
    char msg[2048];
    long long steps, values;
    double worst;               /* largest difference / scale seen */
    char worst_at[512];
} Pair;

static Pair *pair_of(void *m) { return m; }

/* CUDA output k -> the CPU output holding the same value (same origin), or -1. */
static void pair_outputs(Pair *P) {
    for (int k = 0; k < ENTRY_COUNT; k++) {
        const Entry *eg = &P->pg->entry[k], *ec = &P->pc->entry[k];
        int n = P->pc->g->n;
        int *at = xmalloc((size_t)(n + 1) * sizeof(int));
        for (int i = 0; i < n; i++) at[i] = -1;
        for (int j = 0; j < ec->noutputs; j++) {
            int o = P->pc->g->nodes[ec->outputs[j]].origin;
            if (o >= 0 && o < n && at[o] < 0) at[o] = j;
        }
        P->cpu_out[k] = xmalloc((size_t)(eg->noutputs + 1) * sizeof(int));
        for (int j = 0; j < eg->noutputs; j++) {
            int o = P->pg->g->nodes[eg->outputs[j]].origin;
            P->cpu_out[k][j] = o >= 0 && o < n ? at[o] : -1;
        }
        free(at);
    }
}

static double elem(const void *p, int64_t i, int dtype) {
    if (dtype == NNC_TYPE_F64) return ((const double *)p)[i];
    if (dtype == NNC_TYPE_I32) return ((const int *)p)[i];
    return ((const float *)p)[i];
}

/* The launch of entry e that writes node x, for the message. */
static int launch_of(const Entry *e, int x) {
    for (int k = 0; k < e->nlaunch; k++)
        for (int j = 0; j < e->launches[k].nouts; j++)
            if (e->launches[k].outs[j] == x) return k;
    return -1;
}

/* false (and P->msg) when output j of entry k differs beyond tolerance. */
static bool compare_one(Pair *P, int k, int j, int64_t B) {
    const nnc_tensor_info *t = &P->gpu->abi->outputs[k][j];
    int cj = P->cpu_out[k][j];
    if (cj < 0 || t->dtype == NNC_TYPE_I32) return true;
    const void *g = P->gpu->abi->output(P->gpu->m, k, j), *c = P->cpu->abi->output(P->cpu->m, k, cj);
    if (!g || !c) return true;
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= t->dims[d] < 0 ? B : t->dims[d];
    double scale = 1e-6, maxd = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(elem(c, i, t->dtype)));
    for (int64_t i = 0; i < n; i++) {
        double x = elem(c, i, t->dtype), y = elem(g, i, t->dtype);
        double d = isnan(x) || isnan(y) ? (isnan(x) && isnan(y) ? 0 : INFINITY) : fabs(x - y);
        if (isinf(x) && x == y) d = 0;
        if (d > maxd) { maxd = d; at = i; }
    }
    P->values++;
    const Entry *e = &P->pg->entry[k];
    int node = e->outputs[j], launch = launch_of(e, node);
    Str what = {0};
    if (launch >= 0) launch_describe(&what, P->pg, e, launch, node);
    else str_printf(&what, "%s", op_info[P->pg->g->nodes[node].op].name);
    if (maxd / scale > P->worst) {
        P->worst = maxd / scale;
        snprintf(P->worst_at, sizeof P->worst_at, "%s", what.buf);
    }
    bool ok = maxd <= P->tol * scale;
    if (!ok)
        snprintf(P->msg, sizeof P->msg, "--check-against cpu: the targets first differ at %s in step %lld: "
                 "max |cuda - cpu| = %.3g at element %lld (cuda %.9g, cpu %.9g); tolerance %.3g x max |cpu| = %.3g",
                 what.buf, P->steps, maxd, (long long)at, elem(g, at, t->dtype), elem(c, at, t->dtype), P->tol,
                 P->tol * scale);
    str_free(&what);
    return ok;
}

/* The CPU side starts each call from the CUDA side's parameters, state and step. */
static void copy_state(Pair *P) {
    const nnc_model_abi *G = P->gpu->abi, *C = P->cpu->abi;
    G->sync(P->gpu->m, NNC_SYNC_TO_HOST);
    for (int i = 0; i < G->nparams; i++) memcpy(C->param(P->cpu->m, i), G->param(P->gpu->m, i), nnc_tensor_bytes(&G->params[i]));
    for (int i = 0; i < G->nstates; i++) memcpy(C->state(P->cpu->m, i), G->state(P->gpu->m, i), nnc_tensor_bytes(&G->states[i]));
    C->set_step(P->cpu->m, G->get_step(P->gpu->m));
}

static int pair_run(void *m, int entry, const void *const *in, int64_t B) {
    Pair *P = pair_of(m);
    P->msg[0] = 0;
    copy_state(P);
    int rg = P->gpu->abi->run(P->gpu->m, entry, in, B);
    int rc = P->cpu->abi->run(P->cpu->m, entry, in, B);
    if (rg || rc) {
        snprintf(P->msg, sizeof P->msg, "%s", rg ? P->gpu->abi->error(P->gpu->m) : P->cpu->abi->error(P->cpu->m));
        return rg ? rg : rc;
    }
    if (entry == NNC_ENTRY_TRAIN) P->steps++;
    for (int j = 0; j < P->gpu->abi->noutputs[entry]; j++)
        if (!compare_one(P, entry, j, B)) return 5;
    return 0;
}

static void pair_init(void *m, uint64_t seed) {
    Pair *P = pair_of(m);
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
    P->gpu->abi->set_step(P->gpu->m, s);
    P->cpu->abi->set_step(P->cpu->m, s);
}

LoadedModel *check_pair(const Backend *gbe, LoadedModel *gpu, const Program *pg, const Backend *cbe,
                        LoadedModel *cpu, const Program *pc, double tol) {
    Pair *P = xcalloc(1, sizeof *P);
    *P = (Pair){.gpu = gpu, .cpu = cpu, .gbe = gbe, .cbe = cbe, .pg = pg, .pc = pc, .tol = tol};
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
        fprintf(report, "check-against cpu: %lld step%s, %lld values compared, largest difference %.3g x max |cpu|%s%s\n",
                P->steps, P->steps == 1 ? "" : "s", P->values, P->worst, P->worst_at[0] ? " at " : "", P->worst_at);
    P->gbe->unload(P->gpu);
    P->cbe->unload(P->cpu);
    for (int k = 0; k < ENTRY_COUNT; k++) free(P->cpu_out[k]);
    free(P);
}
