/* hparams.c - the hyperparameters a checkpoint records, as text.
 *
 * A checkpoint keeps the run's optimizer, learning rate, batch and the rest in its metadata
 * ("nnc_lr" = "0.001"), as PyTorch keeps param_groups in an optimizer's state_dict, so that a
 * resumed run can name what changed instead of silently becoming another run.  Values are the
 * text the train section would say (the shortest decimal that reads back as the same double,
 * "step_lr(step_size=1, gamma=0.5)"), compared as text.  The seed and the epochs are not here:
 * the seed has its own warning, and more epochs is how a run is extended. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../frontend/train_tables.h"
#include "../io/safetensors.h"
#include "train.h"

/* The shortest %g that reads back as x (0.1, not 0.10000000000000001). */
static const char *num(char *b, size_t n, double x) {
    for (int p = 1; p <= 17; p++) {
        snprintf(b, n, "%.*g", p, x);
        if (strtod(b, NULL) == x) break;
    }
    return b;
}

static void put(Hparams *h, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void put(Hparams *h, const char *key, const char *fmt, ...) {
    if (h->n >= HPARAM_MAX) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->p[h->n].value, sizeof h->p[h->n].value, fmt, ap);
    va_end(ap);
    h->p[h->n++].key = key;
}

static void put_optimizer(Hparams *h, const OptConfig *o) {
    char a[32], b[32];
    put(h, "optimizer", "%s", train_optimizer(o->kind)->name);
    put(h, "lr", "%s", num(a, sizeof a, o->lr));
    if (o->kind == OPT_SGD) {
        put(h, "momentum", "%s", num(a, sizeof a, o->momentum));
        put(h, "dampening", "%s", num(a, sizeof a, o->dampening));
        put(h, "nesterov", "%s", o->nesterov ? "true" : "false");
    } else {
        put(h, "betas", "(%s, %s)", num(a, sizeof a, o->beta1), num(b, sizeof b, o->beta2));
        put(h, "eps", "%s", num(a, sizeof a, o->eps));
    }
    put(h, "weight_decay", "%s", num(a, sizeof a, o->weight_decay));
    char list[128] = "none"; /* ["bias", "norm"]: the second group, as the train section writes it */
    for (int i = 0, k = 0; o->no_decay && o->no_decay[i] && k < (int)sizeof list; i++)
        k += snprintf(list + k, sizeof list - (size_t)k, "%s\"%s\"%s", i ? ", " : "[", o->no_decay[i],
                      o->no_decay[i + 1] ? "" : "]");
    put(h, "no_decay", "%s", list);
}

/* ", interval=\"step\"" where the schedule is stepped otherwise than its row's default says. */
static const char *interval_text(const SchedConfig *s) {
    bool dflt = s->interval == (s->kind == SCHED_WARMUP_COSINE ? SCHED_PER_STEP : SCHED_PER_EPOCH);
    return dflt ? "" : s->interval == SCHED_PER_STEP ? ", interval=\"step\"" : ", interval=\"epoch\"";
}

/* The schedule as the train section writes it, with a length that defaults to the run's (cosine_lr's
 * T_max, warmup_cosine's max_steps) as it applies: in epochs or in steps (0: not known). */
static void put_schedule(Hparams *h, const SchedConfig *s, int epochs, int64_t steps) {
    char a[32], b[32], c[32];
    double len = s->interval == SCHED_PER_STEP ? (double)steps : epochs;
    const char *iv = interval_text(s);
    switch (s->kind) {
    case SCHED_NONE: put(h, "lr_schedule", "none"); break;
    case SCHED_STEP:
        put(h, "lr_schedule", "step_lr(step_size=%s, gamma=%s%s)", num(a, sizeof a, s->step_size),
            num(b, sizeof b, s->gamma), iv);
        break;
    case SCHED_EXPONENTIAL: put(h, "lr_schedule", "exponential_lr(gamma=%s%s)", num(a, sizeof a, s->gamma), iv); break;
    case SCHED_COSINE:
        put(h, "lr_schedule", "cosine_lr(T_max=%s, eta_min=%s%s)",
            num(a, sizeof a,
                s->t_max > 0  ? s->t_max
                    : len > 0 ? len
                              : 1),
            num(b, sizeof b, s->eta_min), iv);
        break;
    case SCHED_LINEAR:
        put(h, "lr_schedule", "linear_lr(start_factor=%s, end_factor=%s, total_iters=%s%s)",
            num(a, sizeof a, s->start_factor), num(b, sizeof b, s->end_factor), num(c, sizeof c, s->total_iters), iv);
        break;
    case SCHED_WARMUP_COSINE:
        put(h, "lr_schedule", "warmup_cosine(warmup=%s, max_steps=%s, min_lr=%s%s)", num(a, sizeof a, s->warmup),
            num(b, sizeof b, s->max_steps > 0 ? s->max_steps : len), num(c, sizeof c, s->min_lr), iv);
        break;
    }
}

void hparams_of(Hparams *h, const TrainConfig *t, int64_t global_batch, int epochs, int64_t steps) {
    char a[32], b[32], c[32], d[32];
    memset(h, 0, sizeof *h);
    put_optimizer(h, &t->opt);
    put(h, "batch", "%lld", (long long)global_batch);
    put(h, "accumulate", "%d", t->accumulate > 1 ? t->accumulate : 1);
    put_schedule(h, &t->sched, epochs, steps);
    put(h, "clip_grad_norm", "%s", t->clip_norm > 0 ? num(a, sizeof a, t->clip_norm) : "none");
    put(h, "clip_grad_value", "%s", t->clip_value > 0 ? num(a, sizeof a, t->clip_value) : "none");
    put(h, "precision", "%s", t->precision == PREC_BF16 ? "bf16" : t->precision == PREC_F16 ? "f16" : "f32");
    const ScalerConfig *s = &t->scaler;
    if (s->on)
        put(h, "loss_scale", "dynamic(init_scale=%s, growth_factor=%s, backoff_factor=%s, growth_interval=%s)",
            num(a, sizeof a, s->init), num(b, sizeof b, s->growth), num(c, sizeof c, s->backoff),
            num(d, sizeof d, s->interval));
    else
        put(h, "loss_scale", "none");
}

/* Every key hparams_of may write, for reading a file back. */
static const char *const hparam_keys[] = {
    "optimizer", "lr",    "momentum",    "dampening",      "nesterov",        "betas",     "eps",        "weight_decay",
    "no_decay",  "batch", "lr_schedule", "clip_grad_norm", "clip_grad_value", "precision", "loss_scale",
};

bool hparams_read(Hparams *h, const nnc_st_file *f) {
    memset(h, 0, sizeof *h);
    for (size_t i = 0; i < sizeof hparam_keys / sizeof *hparam_keys; i++) {
        char key[64];
        snprintf(key, sizeof key, "nnc_%s", hparam_keys[i]);
        const char *v = nnc_st_meta_get(f, key);
        if (v) put(h, hparam_keys[i], "%s", v);
    }
    return hparams_get(h, "optimizer") != NULL;   /* batch alone: an nnc from before they were kept */
}

const char *hparams_get(const Hparams *h, const char *key) {
    for (int i = 0; i < h->n; i++)
        if (!strcmp(h->p[i].key, key)) return h->p[i].value;
    return NULL;
}
