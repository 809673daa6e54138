/* profile.c - `--profile N`: where a training step's time goes, launch by launch.
 *
 * After --bench has timed the step as it normally runs (its median is the report's "step"
 * line), the same batch goes through the step N more times, after a short warm-up, with every
 * launch timed on the device's own clock (Backend.run_timed: CUDA events around each launch,
 * launched directly rather than as a CUDA graph; on the CPU the monotonic clock around each
 * launch function, which the step calls one after another).  Each launch's time is the median
 * of its N times, so one slow step (a page fault, another process) does not move it.  Beside
 * it: what the launch must move and compute (codegen/launch_cost.c) and the rates that makes,
 * as a share of the device's ceilings (Backend.ceilings: measured where they can be, else
 * nominal), the ops it computes and the model line they came from, sorted by time, as
 * tinygrad's DEBUG=2 and torch.profiler's key_averages() tables show them.  The sum of the
 * launches against the measured step says how much of the step is host work and gaps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"

#define PROFILE_WARMUP 3 /* timed calls thrown away: the first direct launches, events made */

struct Profile {
    TrainProfile hook;
    const Backend *be;
    LoadedModel *lm;
    const Program *p;
    BuildOpts bo;
    int steps;
    FILE *out;
};

typedef struct {
    int k; /* the launch's index in the entry (a run's first) */
    int n; /* the launches it covers: a run's (passes/horizontal.c), which a target may issue as one */
    double t; /* its median time, seconds (a run's: its launches' together) */
    LaunchCost c;
} Row;

/* "634.9 kB", "12.85 G": 4 significant digits and an SI prefix; "-" for 0. */
static const char *si(double x, const char *unit, char buf[24]) {
    static const char *const pre[] = {"", "k", "M", "G", "T", "P"};
    int i = 0;
    while (fabs(x) >= 999.95 && i < 5) x /= 1000, i++;
    if (x == 0) snprintf(buf, 24, "-");
    else if (!i && !*unit) snprintf(buf, 24, "%.4g", x);
    else snprintf(buf, 24, "%.4g %s%s", x, pre[i], unit);
    return buf;
}

/* "12.3", or "-" for none. */
static const char *rate(double x, char buf[24]) {
    if (x > 0) snprintf(buf, 24, "%.1f", x);
    else snprintf(buf, 24, "-");
    return buf;
}

/* "52%", or "-" when either side is unknown. */
static const char *pct(double part, double whole, char buf[16]) {
    if (!(whole > 0) || !(part > 0)) snprintf(buf, 16, "-");
    else snprintf(buf, 16, "%.0f%%", 100 * part / whole);
    return buf;
}

/* "add, relu": the ops a launch computes, each once, in order, cut at `width`; a copy says what
 * goes where ("copy x to cuda"). */
static void launch_ops(const Graph *g, const Launch *L, char *buf, size_t width) {
    const Node *r = &g->nodes[L->root], *src = L->kind == L_COPY ? &g->nodes[r->in[0]] : NULL;
    if (src && src->name) {
        snprintf(buf, width + 1, "copy %.*s to %s", (int)width - 16, src->name, device_name(r->dev));
        return;
    }
    Str s = {0};
    char seen[16][48];
    int nseen = 0;
    for (int i = 0; i < L->nnodes && nseen < 16; i++) {
        const char *name = node_op_name(&g->nodes[L->nodes[i]], seen[nseen]);
        bool dup = false;
        for (int j = 0; j < nseen && !dup; j++) dup = !strcmp(seen[j], name);
        if (dup) continue;
        str_printf(&s, "%s%s", nseen ? ", " : "", name);
        snprintf(seen[nseen++], 48, "%s", name);
    }
    if (!nseen) str_puts(&s, node_op_name(&g->nodes[L->root], seen[0]));
    if (strlen(s.buf) > width) snprintf(buf, width + 1, "%.*s...", (int)width - 3, s.buf);
    else snprintf(buf, width + 1, "%s", s.buf);
    str_free(&s);
}

/* The parameter an update launch writes: the first it reads (a folded SGD step's is its C). */
static const char *updated_param(const Graph *g, const Launch *L) {
    if (L->kind == L_GEMM && L->fold >= 0) return g->nodes[g->nodes[L->fold].in[0]].name;
    for (int j = 0; j < L->nins; j++)
        if (g->nodes[L->ins[j]].op == OP_PARAM) return g->nodes[L->ins[j]].name;
    return NULL;
}

/* "models/mlp.nn:18:12 (fc1)": where the launch's last node with a place came from (as
 * launch_describe says it), and the block instance that made it, or for an update the
 * parameter it updates; a run of `runs` launches (L its first) says how many, and for updates
 * of as many parameters "update of N parameters". */
static void launch_at(const Graph *g, const Launch *L, int runs, char *buf, size_t n) {
    const Node *src = &g->nodes[L->root];
    for (int i = 0; i < L->nnodes; i++)
        if (g->nodes[L->nodes[i]].loc.line) src = &g->nodes[L->nodes[i]];
    const char *who = L->phase == PH_UPDATE && updated_param(g, L) ? updated_param(g, L) : src->scope;
    char many[64];
    if (runs > 1) {
        bool all = L->phase == PH_UPDATE;
        for (int j = 0; j < runs && all; j++) all = updated_param(g, &L[j]) != NULL;
        snprintf(many, sizeof many, all ? "update of %d parameters" : "run of %d launches", runs);
        who = many;
    }
    if (!src->loc.line) snprintf(buf, n, "-");
    else
        snprintf(buf, n, "%s:%d:%d%s%s%s", src->loc.file ? src->loc.file : "model", src->loc.line, src->loc.col,
                 who ? " (" : "", who ? who : "", who ? ")" : "");
}

static int by_time(const void *a, const void *b) {
    const Row *x = a, *y = b;
    return x->t < y->t ? 1 : x->t > y->t ? -1 : x->k - y->k;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *const phase_name[] = {"forward", "backward", "update"};

static void print_row(const Profile *pr, const Row *r, double total, const DeviceCeilings *dc) {
    const Launch *L = &pr->p->entry[ENTRY_TRAIN].launches[r->k];
    char b[24], f[24], rb[24], rf[24], pm[16], pf[16], ops[40], at[300];
    double gbs = (double)r->c.bytes / r->t / 1e9, gfs = (double)r->c.flops / r->t / 1e9;
    launch_ops(pr->p->g, L, ops, 34);
    launch_at(pr->p->g, L, r->n, at, sizeof at);
    fprintf(pr->out, "%10.2f %6.1f%% %4d  %-11s %-8s %10s %8s %5s %10s %9s %5s  %-34s  %s\n", 1e6 * r->t,
            100 * r->t / total, r->k, launch_kind_label(L->kind), phase_name[L->phase], si((double)r->c.bytes, "B", b),
            rate(gbs, rb), r->c.bus ? "-" : pct(gbs, dc->gbs, pm), si((double)r->c.flops, "", f), rate(gfs, rf),
            pct(gfs, dc->gflops[r->c.kind], pf), ops, at);
}

static void print_report(const Profile *pr, Row *rows, int n, int64_t B, double step_s, const DeviceCeilings *dc) {
    const char *file = pr->p->diag && pr->p->diag->file ? pr->p->diag->file : "model";
    double total = 0, bytes = 0, flops = 0;
    for (int i = 0; i < n; i++) total += rows[i].t, bytes += (double)rows[i].c.bytes, flops += (double)rows[i].c.flops;
    qsort(rows, (size_t)n, sizeof *rows, by_time);
    int launches = 0, runs = 0;
    for (int i = 0; i < n; i++) launches += rows[i].n, runs += rows[i].n > 1;
    char how[96] = "";
    if (runs) snprintf(how, sizeof how, " (%d run%s of launches, a row each)", runs, runs == 1 ? "" : "s");
    fprintf(pr->out, "profile of train_step: %s on %s, batch %lld: %d launches%s, each the median of %d steps\n", file,
            dc->device, (long long)B, launches, how, pr->steps);
    fprintf(pr->out, "%10s %7s %4s  %-11s %-8s %10s %8s %5s %10s %9s %5s  %-34s  %s\n", "time(us)", "share", "#",
            "kind", "phase", "bytes", "GB/s", "%mem", "FLOPs", "GFLOP/s", "%peak", "ops", "model line");
    for (int i = 0; i < n; i++) print_row(pr, &rows[i], total, dc);
    char b[24], f[24];
    fprintf(pr->out, "%10.2f %6.1f%%       %-20s %10s %8.1f %5s %10s %9.1f\n", 1e6 * total, 100.0, "total",
            si(bytes, "B", b), bytes / total / 1e9, "", si(flops, "", f), flops / total / 1e9);
    fprintf(
        pr->out,
        "step: %.2f us, the median of %d steps as --bench times them (not profiled); the launches add up to %.1f%% of it%s\n",
        1e6 * step_s, pr->steps, 100 * total / step_s,
        total <= step_s ? ": the rest is the host's work and the gaps between launches"
                        : " (timed one by one, they take longer than in the step)");
    fprintf(pr->out, "times: %s\nceilings: %s\n", pr->be->timed_how, dc->how);
}

/* Column k of `steps` rows of n: its median (the upper middle of an even count, as --bench). */
static double median_of(const double *t, int steps, int n, int k, double *scratch) {
    for (int s = 0; s < steps; s++) scratch[s] = t[(size_t)s * (size_t)n + (size_t)k];
    qsort(scratch, (size_t)steps, sizeof *scratch, compare_double);
    return scratch[steps / 2];
}

static bool profile_run(void *ctx, const void *const *in, int64_t B, double step_s) {
    Profile *pr = ctx;
    const Entry *e = &pr->p->entry[ENTRY_TRAIN];
    int n = e->nlaunch;
    double *t = xcalloc((size_t)(PROFILE_WARMUP + pr->steps) * (size_t)n + 1, sizeof *t);
    double *scratch = xcalloc((size_t)pr->steps + 1, sizeof *scratch);
    Row *rows = xcalloc((size_t)n + 1, sizeof *rows);
    bool ok = true;
    for (int s = 0; s < PROFILE_WARMUP + pr->steps && ok; s++) {
        int rc = pr->be->run_timed(pr->lm, pr->p, ENTRY_TRAIN, in, B, t + (size_t)s * (size_t)n);
        if (rc) fprintf(stderr, "nnc: error: --profile: %s\n", pr->lm->abi->error(pr->lm->m));
        ok = rc == 0;
    }
    if (ok) {
        DeviceCeilings dc;
        pr->be->ceilings(pr->lm, &pr->bo, &dc);
        const double *timed = t + (size_t)PROFILE_WARMUP * (size_t)n;
        int nrows = 0;
        for (int k = 0; k < n;) { /* a run is one row: its launches' times and costs added */
            const Launch *L = &e->launches[k];
            int m = L->hcount > 1 ? L->hcount : 1;
            Row *r = &rows[nrows++];
            *r = (Row){k, m, 0, {0}};
            for (int j = k; j < k + m; j++) {
                LaunchCost c = launch_cost(pr->p, e, &e->launches[j], B, pr->bo.f64, pr->bo.tf32);
                r->t += median_of(timed, pr->steps, n, j, scratch);
                r->c.bytes += c.bytes;
                r->c.flops += c.flops;
                r->c.kind = c.kind;
                r->c.bus = c.bus;
            }
            k += m;
        }
        print_report(pr, rows, nrows, B, step_s, &dc);
    }
    free(t);
    free(scratch);
    free(rows);
    return ok;
}

Profile *profile_new(const Backend *be, LoadedModel *lm, const Program *p, const BuildOpts *bo, int steps, FILE *out,
                     char *err, size_t n) {
    if (!be->run_timed || !be->ceilings) {
        snprintf(err, n, "--profile: the %s target cannot time its launches", be->name);
        return NULL;
    }
    if (!p->entry[ENTRY_TRAIN].nlaunch) {
        snprintf(err, n, "--profile: the model has no training step to profile");
        return NULL;
    }
    Profile *pr = xcalloc(1, sizeof *pr);
    *pr = (Profile){{pr, profile_run}, be, lm, p, *bo, steps, out};
    return pr;
}

const TrainProfile *profile_hook(Profile *pr) { return &pr->hook; }

void profile_free(Profile *pr) { free(pr); }
