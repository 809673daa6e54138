/* elab_train.c - the train section: data sources, optimizers, learning-rate schedules and the
 * loss scaler (the functions only the train section may call), each setting, and the checks
 * made once the whole model is read (a loss, data for every input, every parameter used). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "elab_impl.h"

/* ---- data sources and optimizers (train section only) ------------------------------------ */

Value source(Elab *E, SourceKind k, const char *fn, Args *a, SrcLoc loc) {
    DataSource *s = arena_alloc(E->a, sizeof *s);
    s->kind = k;
    s->loc = loc;
    s->scale = 1;
    s->count = -1;
    bool ok = true;
    if (k == SRC_RANDN || k == SRC_RAND) {
        if (a->n < 1 || a->n > IR_MAX_RANK) {
            diag_error(E->d, loc, "%s() takes 1 to %d dimensions: %s(samples, ...)", fn, IR_MAX_RANK, fn);
            return verror;
        }
        double total = 1;
        for (int i = 0; i < a->n; i++) {
            if (!eval_dim(E, a->v[i], a->loc[i], false, &s->dims[s->rank++])) return verror;
            total *= (double)s->dims[i];
        }
        if (total > 2147483648.0) {
            diag_error(E->d, loc, "%s() would generate %.3g numbers; the limit is 2^31", fn, total);
            return verror;
        }
        return (Value){.k = V_SOURCE, .src = s};
    }
    static const char *names[] = {"path", "scale", "first", "count", "header"};
    int ix[5];
    int nn = k == SRC_CSV ? 5 : 2;
    if (!bind_args(E, fn, a, names, nn, ix, 1, loc)) return verror;
    if (a->v[ix[0]].k != V_STR) {
        diag_error(E->d, a->loc[ix[0]], "%s() expects a file path string", fn);
        return verror;
    }
    s->path = a->v[ix[0]].str;
    s->scale = num_arg(E, a, ix[1], 1, &ok);
    ok = ok && check_finite(E, fn, "scale", s->scale, arg_loc(a, ix[1], loc));
    if (ix[1] >= 0) s->scale_loc = a->loc[ix[1]];
    if (k == SRC_CSV && ok) {
        /* columns are counted in int64 by the loader: integers well inside that range */
        double first = num_arg(E, a, ix[2], 0, &ok), count = num_arg(E, a, ix[3], 1, &ok);
        if (ok && (first != floor(first) || !check_range(E, fn, "first", first, 0, false, 2147483647.0, false,
                                                         arg_loc(a, ix[2], loc)))) {
            if (first != floor(first)) diag_error(E->d, arg_loc(a, ix[2], loc), "%s(): first must be an integer", fn);
            ok = false;
        }
        if (ok && (count != floor(count) || !check_range(E, fn, "count", count, 1, false, 2147483647.0, false,
                                                         arg_loc(a, ix[3], loc)))) {
            if (count != floor(count)) diag_error(E->d, arg_loc(a, ix[3], loc), "%s(): count must be an integer", fn);
            ok = false;
        }
        if (ok) {   /* converted only once known to fit */
            s->first = (int64_t)first;
            s->count = ix[3] >= 0 ? (int64_t)count : -1;
        }
        double h = num_arg(E, a, ix[4], -1, &ok);   /* -1: not given, detect */
        if (ok && h != -1 && h != 0 && h != 1) {
            diag_error(E->d, a->loc[ix[4]], "header= takes true or false");
            ok = false;
        }
        s->header = (int)h;
    }
    return ok ? (Value){.k = V_SOURCE, .src = s} : verror;
}

/* The checks torch.optim makes in its constructors (SGD: lr, momentum, weight_decay >= 0,
 * nesterov needs momentum > 0 and dampening 0; Adam/AdamW: lr, eps, weight_decay >= 0 and
 * betas in [0, 1)), plus finiteness: every value is baked into the generated code. */
static bool optimizer_check(Elab *E, const char *fn, OptConfig *o, Args *a, int *ix, SrcLoc loc) {
    const double inf = INFINITY;
    bool ok = check_range(E, fn, "lr", o->lr, 0, false, inf, false, arg_loc(a, ix[0], loc));
    if (o->kind == OPT_SGD) {
        ok &= check_range(E, fn, "momentum", o->momentum, 0, false, inf, false, arg_loc(a, ix[1], loc));
        ok &= check_finite(E, fn, "dampening", o->dampening, arg_loc(a, ix[2], loc));
        ok &= check_range(E, fn, "weight_decay", o->weight_decay, 0, false, inf, false, arg_loc(a, ix[3], loc));
        if (ok && o->nesterov && (o->momentum <= 0 || o->dampening != 0)) {
            diag_error(E->d, loc, "nesterov momentum requires a momentum and zero dampening");
            ok = false;
        }
        return ok;
    }
    ok &= check_range(E, fn, "beta1", o->beta1, 0, false, 1, true, arg_loc(a, ix[1], loc));
    ok &= check_range(E, fn, "beta2", o->beta2, 0, false, 1, true, arg_loc(a, ix[2], loc));
    ok &= check_range(E, fn, "eps", o->eps, 0, false, inf, false, arg_loc(a, ix[3], loc));
    ok &= check_range(E, fn, "weight_decay", o->weight_decay, 0, false, inf, false, arg_loc(a, ix[4], loc));
    return ok;
}

Value optimizer(Elab *E, OptKind k, const char *fn, Args *a, SrcLoc loc) {
    static const char *sgd[] = {"lr", "momentum", "dampening", "weight_decay", "nesterov"};
    static const char *adam[] = {"lr", "beta1", "beta2", "eps", "weight_decay"};
    int ix[5];
    bool ok = true;
    OptConfig *o = arena_alloc(E->a, sizeof *o);
    o->kind = k;
    o->loc = loc;
    if (k == OPT_SGD) {
        if (!bind_args(E, fn, a, sgd, 5, ix, 1, loc)) return verror;
        o->lr = num_arg(E, a, ix[0], 0, &ok);
        o->momentum = num_arg(E, a, ix[1], 0, &ok);
        o->dampening = num_arg(E, a, ix[2], 0, &ok);
        o->weight_decay = num_arg(E, a, ix[3], 0, &ok);
        o->nesterov = num_arg(E, a, ix[4], 0, &ok) != 0;
    } else {
        if (!bind_args(E, fn, a, adam, 5, ix, 0, loc)) return verror;
        o->lr = num_arg(E, a, ix[0], 1e-3, &ok);
        o->beta1 = num_arg(E, a, ix[1], 0.9, &ok);
        o->beta2 = num_arg(E, a, ix[2], 0.999, &ok);
        o->eps = num_arg(E, a, ix[3], 1e-8, &ok);
        o->weight_decay = num_arg(E, a, ix[4], k == OPT_ADAMW ? 1e-2 : 0, &ok);
    }
    ok = ok && optimizer_check(E, fn, o, a, ix, loc);
    return ok ? (Value){.k = V_OPTIM, .opt = o} : verror;
}

/* torch.optim.lr_scheduler's StepLR, ExponentialLR, CosineAnnealingLR and LinearLR, stepped
 * once per epoch, with the checks their constructors make (LinearLR's factors) and the ones a
 * compiled rate needs (finite, and never negative). */
Value schedule(Elab *E, SchedKind k, const char *fn, Args *a, SrcLoc loc) {
    static const char *step[] = {"step_size", "gamma"};
    static const char *expo[] = {"gamma"};
    static const char *cosine[] = {"T_max", "eta_min"};
    static const char *linear[] = {"start_factor", "end_factor", "total_iters"};
    const char *const *names[] = {NULL, step, expo, cosine, linear};
    const int nnames[] = {0, 2, 1, 2, 3}, required[] = {0, 1, 1, 0, 0};
    int ix[3];
    bool ok = true;
    if (!bind_args(E, fn, a, names[k], nnames[k], ix, required[k], loc)) return verror;
    SchedConfig *s = arena_alloc(E->a, sizeof *s);
    s->kind = k;
    s->loc = loc;
    const double inf = INFINITY, imax = 1 << 30;
    if (k == SCHED_STEP) {
        s->step_size = num_arg(E, a, ix[0], 1, &ok);
        s->gamma = num_arg(E, a, ix[1], 0.1, &ok);
        if (ok) {   /* every check reports: &= rather than && */
            ok &= check_count(E, fn, "step_size", s->step_size, imax, arg_loc(a, ix[0], loc));
            ok &= check_range(E, fn, "gamma", s->gamma, 0, false, inf, true, arg_loc(a, ix[1], loc));
        }
    } else if (k == SCHED_EXPONENTIAL) {
        s->gamma = num_arg(E, a, ix[0], 0, &ok);
        ok = ok && check_range(E, fn, "gamma", s->gamma, 0, false, inf, true, arg_loc(a, ix[0], loc));
    } else if (k == SCHED_COSINE) {
        s->t_max = num_arg(E, a, ix[0], 0, &ok);   /* 0: the run's epochs */
        s->eta_min = num_arg(E, a, ix[1], 0, &ok);
        if (ok) {
            if (ix[0] >= 0) ok &= check_count(E, fn, "T_max", s->t_max, imax, arg_loc(a, ix[0], loc));
            ok &= check_range(E, fn, "eta_min", s->eta_min, 0, false, inf, true, arg_loc(a, ix[1], loc));
        }
    } else {
        s->start_factor = num_arg(E, a, ix[0], 1.0 / 3, &ok);
        s->end_factor = num_arg(E, a, ix[1], 1, &ok);
        s->total_iters = num_arg(E, a, ix[2], 5, &ok);
        if (ok) {
            ok &= check_range(E, fn, "start_factor", s->start_factor, 0, true, 1, false, arg_loc(a, ix[0], loc));
            ok &= check_range(E, fn, "end_factor", s->end_factor, 0, false, 1, false, arg_loc(a, ix[1], loc));
            ok &= check_count(E, fn, "total_iters", s->total_iters, imax, arg_loc(a, ix[2], loc));
        }
    }
    return ok ? (Value){.k = V_SCHED, .sched = s} : verror;
}

/* torch.cuda.amp.GradScaler(init_scale=2**16, growth_factor=2, backoff_factor=0.5,
 * growth_interval=2000), with its constructor's checks (growth > 1, backoff < 1). */
Value scaler(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"init_scale", "growth_factor", "backoff_factor", "growth_interval"};
    int ix[4];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 4, ix, 0, loc)) return verror;
    ScalerConfig *c = arena_alloc(E->a, sizeof *c);
    c->on = true;
    c->loc = loc;
    c->init = num_arg(E, a, ix[0], 65536, &ok);
    c->growth = num_arg(E, a, ix[1], 2, &ok);
    c->backoff = num_arg(E, a, ix[2], 0.5, &ok);
    c->interval = num_arg(E, a, ix[3], 2000, &ok);
    if (ok) {   /* every check reports: &= rather than && */
        ok &= check_range(E, fn, "init_scale", c->init, 0, true, 3e38, false, arg_loc(a, ix[0], loc));
        ok &= check_range(E, fn, "growth_factor", c->growth, 1, true, 1e6, false, arg_loc(a, ix[1], loc));
        ok &= check_range(E, fn, "backoff_factor", c->backoff, 0, true, 1, true, arg_loc(a, ix[2], loc));
        ok &= check_count(E, fn, "growth_interval", c->interval, 1 << 24, arg_loc(a, ix[3], loc));
    }
    return ok ? (Value){.k = V_SCALER, .scaler = c} : verror;
}

/* ---- the train section -------------------------------------------------------------------- */

static int named_tensor(Elab *E, const char *name, SrcLoc loc, const char *what) {
    Binding *b = env_find(E->globals, name);
    if (!b) {
        int bd = 3;
        diag_error(E->d, loc, "unknown name '%s'%s", name, did_you_mean(E, suggest_env(name, E->globals, NULL, &bd)));
        return -1;
    }
    if (b->v.k == V_ERROR) return -1;   /* its definition failed and was reported there */
    if (b->v.k != V_TENSOR) {
        diag_error(E->d, loc, "%s '%s' must be a tensor, but it is a %s", what, name, kind_name(b->v.k));
        return -1;
    }
    return b->v.node;
}

static DataBind *bind_for(Elab *E, TrainConfig *t, const char *input, SrcLoc loc) {
    int node = named_tensor(E, input, loc, "data for");
    if (node < 0) return NULL;
    if (E->g->nodes[node].op != OP_INPUT) {
        diag_error(E->d, loc, "'%s' is not an input: data is bound to inputs", input);
        return NULL;
    }
    for (int i = 0; i < t->ndata; i++)
        if (t->data[i].node == node) return &t->data[i];
    t->data = xrealloc(t->data, (size_t)(t->ndata + 1) * sizeof *t->data);
    DataBind *d = &t->data[t->ndata++];
    memset(d, 0, sizeof *d);
    d->input = input;
    d->node = node;
    return d;
}

/* An integer setting within [lo, hi], checked before any conversion (epochs = 1e12 must not
 * wrap to 0, seed = 1e30 must not become 0). */
static bool setting_num(Elab *E, Stmt *s, Value v, double lo, double hi, double *out) {
    if (v.k != V_NUM || !(v.num >= lo && v.num <= hi) || v.num != floor(v.num)) {
        if (v.k != V_ERROR) diag_error(E->d, s->e->loc, "'%s' must be an integer from %.0f to %.0f", s->name, lo, hi);
        return false;
    }
    *out = v.num;
    return true;
}

static void train_setting(Elab *E, TrainConfig *t, Stmt *s) {
    const char *k = s->name;
    double x;
    if (!strcmp(k, "minimize") || (!strcmp(k, "metric") && !s->e)) {
        bool loss = k[1] == 'i';
        if (loss) E->saw_minimize = true;
        if (!s->name2 || s->e) {
            diag_error(E->d, s->loc, "write '%s NAME' with the name of a scalar tensor", k);
            return;
        }
        int n = named_tensor(E, s->name2, s->loc2, loss ? "the loss" : "the metric");
        if (n < 0) return;
        if (E->g->nodes[n].shape.rank != 0) {
            diag_error(E->d, s->loc2, "the %s must be a scalar, but '%s' is %s (reduce it with mean() or sum())",
                       loss ? "loss" : "metric", s->name2, tstr(E, n));
            return;
        }
        if (loss) E->g->loss = n;
        else graph_add_out(E->g, s->name2, n);
        return;
    }
    if (!s->e) {
        diag_error(E->d, s->loc, "'%s %s' needs a value: '%s %s = ...'", k, s->name2, k, s->name2);
        return;
    }
    if (!strcmp(k, "metric")) {
        Value v = eval(E, E->globals, s->e);
        int n = v.k == V_ERROR ? -1 : as_tensor(E, v, s->e->loc);
        if (n < 0) return;
        if (E->g->nodes[n].shape.rank != 0) {
            diag_error(E->d, s->e->loc, "a metric must be a scalar, got %s", tstr(E, n));
            return;
        }
        graph_add_out(E->g, s->name2, owned_output(E, n, s->e->loc));
        return;
    }
    if (s->name2 && strcmp(k, "data") && strcmp(k, "test")) {
        diag_error(E->d, s->loc, "unexpected '%s' after '%s'", s->name2, k);
        return;
    }
    if (!strcmp(k, "loss_scale") && s->e->k == E_IDENT && !strcmp(s->e->str, "none")) {
        t->scaler = (ScalerConfig){.on = false, .written = true, .loc = s->e->loc};
        return;
    }
    if (!strcmp(k, "precision")) {   /* a dtype name, as torch.autocast(dtype=...) */
        static const char *const names[] = {"f32", "bf16", "f16"};
        for (int i = 0; i < 3; i++)
            if (s->e->k == E_IDENT && !strcmp(s->e->str, names[i])) {
                t->precision = (Precision)i;
                return;
            }
        diag_error(E->d, s->e->loc, "precision is f32, bf16 or f16");
        return;
    }
    if (!strcmp(k, "device") && s->e->k == E_IDENT && !strcmp(s->e->str, "auto")) { /* the driver probes */
        t->device_auto = true;
        return;
    }
    E->in_train = 1;
    Value v = eval(E, E->globals, s->e);
    E->in_train = 0;
    if (!strcmp(k, "data") || !strcmp(k, "test")) {
        if (!s->name2) {
            diag_error(E->d, s->loc, "write '%s INPUT = source', naming the input it feeds", k);
            return;
        }
        if (v.k != V_SOURCE) {
            if (v.k != V_ERROR) diag_error(E->d, s->e->loc, "expected a data source such as idx(\"file\"), npy(\"file\"), csv(\"file\") or randn(n, d)");
            E->data_error = true;
            return;
        }
        DataBind *d = bind_for(E, t, s->name2, s->loc2);
        if (d) *(k[0] == 'd' ? &d->train : &d->test) = *v.src;
        if (d && v.src->scale_loc.line && E->g->nodes[d->node].dtype == DT_I32)   /* it would be ignored */
            diag_error(E->d, v.src->scale_loc, "scale applies to float inputs, but '%s' is i32: labels and "
                       "indices are read as the integers they are", s->name2);
    } else if (!strcmp(k, "batch")) {
        if (setting_num(E, s, v, 1, INT_MAX, &x)) t->batch = (int64_t)x;
    } else if (!strcmp(k, "epochs")) {
        if (setting_num(E, s, v, 0, INT_MAX, &x)) t->epochs = (int)x;
    } else if (!strcmp(k, "seed")) {   /* 2^53: the integers a number in the file holds exactly */
        if (setting_num(E, s, v, 0, 9007199254740992.0, &x)) t->seed = (uint64_t)x;
    } else if (!strcmp(k, "shuffle")) {
        if (v.k == V_NUM && v.num != 0 && v.num != 1)
            diag_error(E->d, s->e->loc, "'shuffle' is true or false");
        else if (setting_num(E, s, v, 0, 1, &x)) t->shuffle = x != 0;
    } else if (!strcmp(k, "device")) {
        if (v.k != V_DEVICE) diag_error(E->d, s->e->loc, "device is cpu, cuda, cuda(k) or auto");
        else {
            t->device = (Device)v.num;
            t->device_auto = false;
        }
    } else if (!strcmp(k, "optimizer")) {
        if (v.k != V_OPTIM) {
            if (v.k != V_ERROR) diag_error(E->d, s->e->loc, "expected sgd(...), adam(...) or adamw(...)");
        } else
            t->opt = *v.opt;
    } else if (!strcmp(k, "loss_scale")) {
        if (v.k != V_SCALER) {
            if (v.k != V_ERROR) diag_error(E->d, s->e->loc, "expected dynamic(...) or none");
        } else {
            t->scaler = *v.scaler;
            t->scaler.written = true;
        }
    } else if (!strcmp(k, "clip_grad_norm") || !strcmp(k, "clip_grad_value")) {
        bool norm = !strcmp(k, "clip_grad_norm");
        if (v.k != V_NUM || !(v.num > 0)) {
            if (v.k == V_NUM) diag_error(E->d, s->e->loc, "%s must be a number > 0, got %g", k, v.num);
            else if (v.k != V_ERROR) diag_error(E->d, s->e->loc, "%s must be a number > 0", k);
        } else if (norm ? t->clip_value > 0 : t->clip_norm > 0)
            diag_error(E->d, s->loc, "set clip_grad_norm or clip_grad_value, not both");
        else
            *(norm ? &t->clip_norm : &t->clip_value) = v.num;
    } else if (!strcmp(k, "lr_schedule")) {
        if (v.k != V_SCHED) {
            if (v.k != V_ERROR)
                diag_error(E->d, s->e->loc, "expected step_lr(...), exponential_lr(...), cosine_lr(...) or linear_lr(...)");
        } else
            t->sched = *v.sched;
    } else {
        static const char *const keys[] = {"data",   "test",   "batch",   "epochs",  "optimizer", "lr_schedule",
                                           "minimize", "metric", "seed",  "shuffle", "device",    "precision",
                                           "loss_scale", "clip_grad_norm", "clip_grad_value"};
        int bd = 3;
        const char *best = suggest_list(k, keys, NNC_COUNTOF(keys), NULL, &bd);
        diag_error(E->d, s->loc, "unknown setting '%s'%s (data, test, batch, epochs, optimizer, lr_schedule, "
                   "minimize, metric, seed, shuffle, device, precision, loss_scale, clip_grad_norm, clip_grad_value)",
                   k, did_you_mean(E, best));
    }
}

void read_train(Elab *E, Stmt *prog) {
    TrainConfig *t = &E->m->train;
    t->batch = 1;
    t->epochs = 1;
    t->shuffle = true;
    t->opt.kind = OPT_SGD;
    t->opt.lr = 0.01;
    for (Stmt *s = prog; s; s = s->next) {
        if (s->k != S_TRAIN) continue;
        if (t->present) {
            diag_error(E->d, s->loc, "a model has one train section");
            continue;
        }
        t->present = true;
        t->loc = s->loc;
        for (Stmt *x = s->body; x && !E->over_budget && !diag_stopped(E->d); x = x->next) train_setting(E, t, x);
    }
}

/* A parameter (or buffer) that nothing uses is a mistake.  One used only by an output or a metric is
 * allowed, as in PyTorch: it gets no gradient (grad None), so the optimizer skips it and it
 * keeps its initial value. */
void check_params_used(Elab *E) {
    Graph *g = E->g;
    if (g->loss < 0) return;
    bool *live = xcalloc((size_t)g->n, 1);
    live[g->loss] = true;
    for (int i = 0; i < g->nouts; i++) live[g->outs[i].node] = true;
    for (int i = g->n - 1; i >= 0; i--)
        if (live[i])
            for (int j = 0; j < g->nodes[i].nin; j++) live[g->nodes[i].in[j]] = true;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == OP_PARAM && !live[i])
            diag_error(E->d, g->nodes[i].loc, "%s '%s' is never used (by the loss, an output or a metric)",
                       g->nodes[i].frozen ? "buffer" : "parameter", g->nodes[i].name);
    free(live);
}

void check_train(Elab *E) {
    TrainConfig *t = &E->m->train;
    if (!t->present) return;
    if (!E->saw_minimize) diag_error(E->d, t->loc, "the train section needs 'minimize LOSS'");
    for (int i = 0; i < E->g->n; i++) {
        Node *n = &E->g->nodes[i];
        if (n->op != OP_INPUT) continue;
        DataBind *d = NULL;
        for (int j = 0; j < t->ndata; j++)
            if (t->data[j].node == i) d = &t->data[j];
        if ((!d || d->train.kind == SRC_NONE) && !E->data_error)
            diag_error(E->d, n->loc, "input '%s' has no training data: add 'data %s = ...' to the train section", n->name, n->name);
    }
}


/* ---- the final configuration -------------------------------------------------------------- */

/* --momentum: SGD's momentum, with torch.optim.SGD's rule for Nesterov. */
static bool override_momentum(TrainConfig *t, double momentum, char *err, size_t n) {
    if (t->opt.kind != OPT_SGD) {
        snprintf(err, n, "--momentum: applies to sgd; this model uses adam");
        return false;
    }
    if (t->opt.nesterov && momentum <= 0) {
        snprintf(err, n, "--momentum: this model's sgd uses nesterov, which needs a momentum > 0, got %g", momentum);
        return false;
    }
    t->opt.momentum = momentum;
    return true;
}

bool resolve_train_config(Model *m, const TrainOverrides *o, int world, char *err, size_t n) {
    TrainConfig *t = &m->train;
    if (o->has_epochs) t->epochs = (int)o->epochs;
    if (o->has_batch) t->batch = o->batch;
    if (o->has_seed) t->seed = (uint64_t)o->seed;
    if (o->has_lr) t->opt.lr = o->lr;
    if (o->has_precision) t->precision = o->precision;
    if (o->has_clip) {
        t->clip_norm = o->clip_norm;
        t->clip_value = 0;
    }
    if (o->has_momentum && !override_momentum(t, o->momentum, err, n)) return false;
    /* what follows from the settings, the overrides included */
    if (!t->scaler.written)   /* GradScaler's defaults, on exactly with f16 */
        t->scaler = (ScalerConfig){.on = t->precision == PREC_F16, .init = 65536, .growth = 2, .backoff = 0.5,
                                   .interval = 2000};
    t->opt.lr_state = t->sched.kind != SCHED_NONE;
    /* the compile-time batch bounds every call; under data parallelism each process's share */
    m->g->batch_max = (int)(world > 1 && t->present ? (t->batch + world - 1) / world : t->batch);
    return true;
}
