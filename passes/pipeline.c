/* pipeline.c - the whole compiler as one readable list of passes (QBE's main.c is the model).
 *
 *   [attn_layout] -> [autocast] -> autograd -> [accumulate] -> [allreduce] -> optimizer ->
 *   placement -> copies                                                        (graph-wide)
 *   select -> fuse -> schedule -> plan -> horizontal    (per entry: train_step, grad, eval,
 *                                                        accumulate)
 *
 * With --dump-after=PASS (or --emit ir, which dumps after every pass) the graph is printed
 * after that pass; in test and debug builds the verifier runs after every graph-wide pass. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* The names --dump-after accepts, in pipeline order. */
const char *const pipeline_pass_names =
    "parse autocast autograd accumulate allreduce optimizer placement copies fuse schedule plan horizontal all";

bool pipeline_has_pass(const char *name) {
    size_t n = strlen(name);
    for (const char *p = pipeline_pass_names; n && (p = strstr(p, name)); p += n)
        if ((p == pipeline_pass_names || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return true;
    return false;
}

static bool want_dump(const PipelineOpts *o, const char *pass) {
    return o->dump && o->dump_after && (!strcmp(o->dump_after, "all") || !strcmp(o->dump_after, pass));
}

/* The per-entry passes print only when named: "all" (--emit ir) shows the final schedule once. */
static bool want_entry_dump(Program *p, const PipelineOpts *o, const char *pass) {
    bool want = o->dump && o->dump_after && !strcmp(o->dump_after, pass);
    p->dumped |= want;
    return want;
}

/* Why a graph-wide pass that did not run printed nothing: what makes it run. */
static const char *skipped_why(const char *pass) {
    if (!strcmp(pass, "autocast"))
        return "it runs only in mixed precision: precision = bf16 or f16 in the train section, --precision bf16 "
               "or f16, or a to(x, bf16) in the model";
    if (!strcmp(pass, "accumulate"))
        return "it runs only with gradient accumulation: accumulate = N (N > 1) in the train section";
    if (!strcmp(pass, "allreduce"))
        return "it runs only in data-parallel training: under mpirun -np N, or with --data-parallel";
    if (!strcmp(pass, "autograd") || !strcmp(pass, "optimizer"))
        return "it runs only for a model with a loss to minimize (a train section with 'minimize LOSS')";
    return "this model has nothing for it to do";
}

static bool after(Program *p, const PipelineOpts *o, const char *pass) {
    if (o->verify && !ir_verify(p->g, pass)) return false;
    if (want_dump(o, pass)) {
        p->dumped = true;
        fprintf(o->dump, "; ---- after %s ----\n", pass);
        ir_print(p->g, o->dump, NULL);
    }
    return true;
}

static void groups_print(const Program *p, const Entry *e, FILE *f);
static void order_print(const Program *p, const Entry *e, FILE *f);

/* --check-against: each launch's results become outputs too (after the real ones, in schedule
 * order), so the planner keeps them to the end of the call and a caller can read them all;
 * half values as the ABI's 16-bit types. */
static void keep_every_value(Program *p, Entry *e) {
    bool *is_out = xcalloc((size_t)p->g->n, 1);
    for (int i = 0; i < e->noutputs; i++) is_out[e->outputs[i]] = true;
    for (int k = 0; k < e->nlaunch; k++) {
        const Launch *L = &e->launches[k];
        if (L->kind == L_COPY || L->kind == L_ASSIGN) continue;
        for (int j = 0; j < L->nouts; j++) {
            int x = L->outs[j];
            if (is_out[x]) continue;
            is_out[x] = true;
            e->outputs = xrealloc(e->outputs, (size_t)(e->noutputs + 1) * sizeof(int));
            e->outputs[e->noutputs++] = x;
        }
    }
    free(is_out);
}

bool pipeline_run(Program *p, const PipelineOpts *o) {
    Graph *g = p->g;
    const TrainConfig *t = &p->m->train; /* final: resolve_train_config made it */
    p->target = o->target;
    p->fuse = o->fuse;
    p->strict_devices = o->strict_devices;
    p->data_parallel = o->data_parallel && g->loss >= 0;
    p->bucket_bytes = o->bucket_bytes > 0 ? o->bucket_bytes : (int64_t)25 << 20;
    if (!after(p, o, "parse")) return false;
    /* attention reading its operands in place (not in --check-against's unfused builds): before
     * autograd, so its gradients do too, and before autocast, whose casts (one per value) would
     * stand between the permutes and attention.  Its effect shows in the next dump */
    if (o->fuse) pass_attn_layout(g);
    /* nothing to do (and nothing printed) without precision or a to(x, bf16) */
    if (pass_autocast(p->m, t->precision) && !after(p, o, "autocast")) return false;
    if (g->loss >= 0) {
        pass_autograd(g, &t->scaler);
        if (!after(p, o, "autograd")) return false;
        if (t->accumulate > 1) { /* micro-batches: each adds its gradients, the last one steps */
            pass_accumulate(g, t->accumulate);
            if (!after(p, o, "accumulate")) return false;
        }
        if (o->data_parallel) {   /* under MPI: gradients averaged over the processes */
            pass_allreduce(g);
            if (!after(p, o, "allreduce")) return false;
        }
        pass_optimizer(g, t);
        /* layer norm's gradient takes in dy * w and the residual add (shows after optimizer) */
        if (o->fuse) pass_fold_rows(g);
        if (!after(p, o, "optimizer")) return false;
    }
    pass_placement(g, o->target);
    /* values and their users may sit on different devices until copies has run: verify after it */
    PipelineOpts no_verify = *o;
    no_verify.verify = false;
    if (!after(p, &no_verify, "placement")) return false;
    if (!pass_copies(g, p->diag, o->strict_devices)) return false;
    if (!after(p, o, "copies")) return false;
    for (int k = 0; k < ENTRY_COUNT; k++) {
        Entry *e = &p->entry[k];
        pass_select(p, e, (EntryKind)k);
        if (g->loss < 0 && k != ENTRY_EVAL) {
            e->noutputs = 0;
            memset(e->live, 0, (size_t)g->n);
        }
        pass_fuse(p, e);
        if (want_entry_dump(p, o, "fuse")) groups_print(p, e, o->dump);
        pass_schedule(p, e);
        if (o->keep_values) keep_every_value(p, e);
        if (want_entry_dump(p, o, "schedule")) order_print(p, e, o->dump);
        pass_plan(p, e);
    }
    /* "all" (--emit ir) prints the planned schedules once, after horizontal */
    if (want_dump(o, "plan") && strcmp(o->dump_after, "all")) {
        p->dumped = true;
        program_print(p, o->dump);
    }
    for (int k = 0; k < ENTRY_COUNT; k++) pass_horizontal(p, &p->entry[k]);
    if (want_dump(o, "horizontal")) {
        p->dumped = true;
        program_print(p, o->dump);
    }
    if (o->dump && o->dump_after && !p->dumped) p->dump_skipped = skipped_why(o->dump_after);
    return true;
}

static const char *kind_name(LaunchKind k) {
    static const char *n[] = {"kernel", "reduce", "rowwise", "gemm", "copy", "assign", "helper", "collect", "attn"};
    return n[k];
}

static void launch_print(const Program *p, const Entry *e, const Launch *L, int k, FILE *f) {
    const Graph *g = p->g;
    char sb[96];
    fprintf(f, "    #%-3d %-7s", k, kind_name(L->kind));
    if (L->kind == L_GEMM && L->epi >= 0) /* the epilogue's node, and what it computes */
        fprintf(f, " %%%d = %s%s%%%d%s @ %s%%%d%s + %%%d%s", L->epi, L->relu ? "relu(" : "", L->ta ? "T(" : "", L->a,
                L->ta ? ")" : "", L->tb ? "T(" : "", L->b, L->tb ? ")" : "", L->bias, L->relu ? ")" : "");
    else if (L->kind == L_GEMM)
        fprintf(f, " %%%d = %s%%%d%s @ %s%%%d%s", L->root, L->ta ? "T(" : "", L->a, L->ta ? ")" : "",
                L->tb ? "T(" : "", L->b, L->tb ? ")" : "");
    else {
        fprintf(f, " {");
        for (int i = 0; i < L->nnodes; i++)
            fprintf(f, "%s%s %%%d", i ? ", " : "", node_op_name(&g->nodes[L->nodes[i]], (char[48]){0}), L->nodes[i]);
        fprintf(f, "}");
    }
    fprintf(f, "  writes");
    for (int i = 0; i < L->nouts; i++) {
        const Buffer *b = &e->buf[L->outs[i]];
        static const char *bk[] = {"-", "inline", "input", "param", "state", "act", "alias"};
        fprintf(f, " %%%d[%s+%" PRId64 "]", L->outs[i], bk[b->kind], b->offset * 4);
    }
    if (L->kind != L_GEMM && L->kind != L_COPY && L->kind != L_ASSIGN && L->kind != L_ROW && L->kind != L_ATTENTION)
        fprintf(f, "  over %s", shape_str(L->space, DT_F32, g->batch_name, sb, sizeof sb));
    const SrcLoc *loc = &g->nodes[L->root].loc;
    if (loc->line) fprintf(f, "  ; line %d", loc->line);
    if (L->hcount) fprintf(f, "  ; one of #%d..#%d", L->hfirst, L->hfirst + L->hcount - 1);
    fputc('\n', f);
}

static void ops_print(const Graph *g, const int *nodes, int n, FILE *f) {
    fprintf(f, " {");
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%s %%%d", i ? ", " : "", node_op_name(&g->nodes[nodes[i]], (char[48]){0}), nodes[i]);
    fprintf(f, "}");
}

/* --dump-after=fuse: each entry's kernel groups, before the schedule orders them and the plan
 * gives them memory; a group is listed where its first node is, then what fuse folded away. */
static void groups_print(const Program *p, const Entry *e, FILE *f) {
    const Graph *g = p->g;
    int ngroups = 0, nfolded = 0;
    for (int i = 0; i < g->n; i++) {
        if (e->group[i] >= ngroups) ngroups = e->group[i] + 1;
        nfolded += e->folded[i];
    }
    fprintf(f,
            "; ---- entry %s after fuse: %d groups (schedule orders them), %d transposes folded into "
            "products, %d updates folded into their GEMMs ----\n",
            e->name, ngroups, nfolded, e->nfolds);
    int *members = xmalloc((size_t)g->n * sizeof *members);
    bool *shown = xcalloc((size_t)ngroups + 1, 1);
    for (int i = 0; i < g->n; i++) {
        int grp = e->group[i];
        if (grp < 0 || shown[grp]) continue;
        shown[grp] = true;
        int n = 0, last = i;
        for (int j = i; j < g->n; j++)
            if (e->group[j] == grp) members[n++] = last = j;
        fprintf(f, "    group ");
        ops_print(g, members, n, f);
        if (g->nodes[last].loc.line) fprintf(f, "  ; line %d", g->nodes[last].loc.line);
        fputc('\n', f);
    }
    for (int i = 0; i < g->n; i++)
        if (e->folded[i]) fprintf(f, "    folded  transpose %%%d (its products read it transposed)\n", i);
    for (int k = 0; k < e->nfolds; k++)
        fprintf(f, "    folded  update %%%d into the GEMM of %%%d (alpha %g, beta 1)\n", e->folds[k].dst,
                e->folds[k].gemm, e->folds[k].alpha);
    for (int k = 0; k < e->nepis; k++) {
        const GemmEpi *x = &e->epis[k];
        fprintf(f, "    folded  bias add %%%d", x->add);
        if (x->relu >= 0) fprintf(f, " and relu %%%d", x->relu);
        fprintf(f, " into the epilogue of the GEMM of %%%d\n", x->gemm);
    }
    free(members);
    free(shown);
}

/* --dump-after=schedule: each entry's launches in order, with the values each reads and writes,
 * before the plan gives them memory. */
static void order_print(const Program *p, const Entry *e, FILE *f) {
    const Graph *g = p->g;
    fprintf(f, "; ---- entry %s after schedule: %d launches in order ----\n", e->name, e->nlaunch);
    for (int k = 0; k < e->nlaunch; k++) {
        const Launch *L = &e->launches[k];
        fprintf(f, "    #%-3d %-7s", k, kind_name(L->kind));
        ops_print(g, L->nodes, L->nnodes, f);
        fprintf(f, "  reads");
        for (int j = 0; j < L->nins; j++) fprintf(f, " %%%d", L->ins[j]);
        fprintf(f, "  writes");
        for (int j = 0; j < L->nouts; j++) fprintf(f, " %%%d", L->outs[j]);
        if (g->nodes[L->root].loc.line) fprintf(f, "  ; line %d", g->nodes[L->root].loc.line);
        fputc('\n', f);
    }
}

void program_print(const Program *p, FILE *f) {
    for (int k = 0; k < ENTRY_COUNT; k++) {
        const Entry *e = &p->entry[k];
        if (!e->nlaunch) continue;
        fprintf(f, "; ---- entry %s: %d launches, activations %" PRId64 " bytes planned (%" PRId64
                   " unplanned) ----\n", e->name, e->nlaunch, e->act_total * 4,
                e->naive_elems * 4);
        for (int i = 0; i < e->nlaunch; i++) launch_print(p, e, &e->launches[i], i, f);
    }
}

void program_free(Program *p) {
    for (int k = 0; k < ENTRY_COUNT; k++) {
        Entry *e = &p->entry[k];
        for (int i = 0; i < e->nlaunch; i++) {
            free(e->launches[i].nodes);
            free(e->launches[i].outs);
            free(e->launches[i].ins);
        }
        free(e->outputs);
        free(e->folds);
        free(e->epis);
        e->outputs = NULL;
        e->folds = NULL;
        e->epis = NULL;
        e->nfolds = e->nepis = 0;
        e->nlaunch = e->noutputs = 0;
    }
}
