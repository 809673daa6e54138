/* train_tables.c - the train section's settings and builtins, one row each (train_tables.h says
 * what reads them).  The rules are PyTorch's constructors' (torch.optim, lr_scheduler,
 * GradScaler), plus finiteness: every value is baked into the generated code. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "elab_impl.h"
#include "train_tables.h"

/* ---- data sources ------------------------------------------------------------------------- */

/* An argument: its name, rule, field type and offset, then what else it needs (.dflt, .hi, ...). */
/* clang-format off */
#define ARG(n, r, t, off, ...) {.name = n, .rule = r, .type = t, .at = off, __VA_ARGS__}
/* clang-format on */
#define SRC(f) offsetof(DataSource, f)
#define PATH ARG("path", ARG_PATH, FIELD_STR, SRC(path), .required = true)
#define SCALE ARG("scale", ARG_FINITE, FIELD_DOUBLE, SRC(scale), .dflt = 1)

/* DataSource.scale_loc: where scale= was written, so an i32 input can refuse it there. */
static bool source_scale_at(struct Elab *E, const TrainFn *f, void *cfg, const SrcLoc *at, SrcLoc loc) {
    (void)E, (void)f, (void)loc;
    ((DataSource *)cfg)->scale_loc = at[1];
    return true;
}

/* randn(n, d...) and rand(n, d...): the shape of the samples, not a list of arguments. */
static bool source_random(struct Elab *E, const TrainFn *f, void *cfg, struct Args *a, SrcLoc loc) {
    DataSource *s = cfg;
    if (a->n < 1 || a->n > IR_IO_RANK) {
        diag_error(E->d, loc, "%s() takes 1 to %d dimensions: %s(samples, ...)", f->name, IR_IO_RANK, f->name);
        return false;
    }
    double total = 1;
    for (int i = 0; i < a->n; i++) {
        if (!eval_dim(E, a->v[i], a->loc[i], false, &s->dims[s->rank++])) return false;
        total *= (double)s->dims[i];
    }
    if (total > 2147483648.0) {
        diag_error(E->d, loc, "%s() would generate %.3g numbers; the limit is 2^31", f->name, total);
        return false;
    }
    return true;
}

/* tokens' dtype, in nnc_tokens_format's order (io/data.h): "auto" reads llm.c's header, or raw
 * uint16 where there is none */
static const char *const token_dtypes[] = {"auto", "uint8", "uint16", "uint32", "int32", NULL};

/* a row a builtin, an argument a line */
/* clang-format off */
static const TrainFn source_fns[] = {
    {.name = "idx", .kind = SRC_IDX, .example = "idx(\"file\")", .args = {PATH, SCALE}, .check = source_scale_at},
    {.name = "npy", .kind = SRC_NPY, .example = "npy(\"file\")", .args = {PATH, SCALE}, .check = source_scale_at},
    /* columns are counted in int64 by the loader: integers well inside that range */
    {.name = "csv", .kind = SRC_CSV, .example = "csv(\"file\")", .check = source_scale_at, .args = {PATH, SCALE,
        ARG("first", ARG_INDEX, FIELD_INT64, SRC(first), .hi = 2147483647.0),
        ARG("count", ARG_INDEX, FIELD_INT64, SRC(count), .dflt = -1, .lo = 1, .hi = 2147483647.0),   /* -1: all */
        ARG("header", ARG_BOOL, FIELD_INT, SRC(header), .dflt = -1),   /* -1: detect */
    }},
    {.name = "randn", .kind = SRC_RANDN, .example = "randn(n, d)", .read = source_random},
    {.name = "rand", .kind = SRC_RAND, .example = "rand(n, d)", .read = source_random},
    /* block_size 0: the inputs' row, which elab_train.c checks a written one against */
    {.name = "tokens", .kind = SRC_TOKENS, .example = "tokens(\"file\")", .args = {PATH,
        ARG("block_size", ARG_COUNT, FIELD_INT64, SRC(block), .hi = 2147483647.0),
        ARG("dtype", ARG_WORD, FIELD_INT, SRC(tok_format), .words = token_dtypes),
    }},
};

const TrainFamily train_sources = {
    .value = V_SOURCE, .expect = "a data source such as ", .size = sizeof(DataSource),
    .kind_at = offsetof(DataSource, kind), .loc_at = offsetof(DataSource, loc),
    .init = &(DataSource){.scale = 1, .count = -1, .header = -1}, .fns = source_fns, .n = NNC_COUNTOF(source_fns)};
/* clang-format on */

/* ---- optimizers (torch.optim) ------------------------------------------------------------- */

#define OPT(f) offsetof(OptConfig, f)
#define RATE(name, field, d) ARG(name, ARG_REAL, FIELD_DOUBLE, OPT(field), .dflt = d, .hi = INFINITY)
#define BETA(name, field, d) ARG(name, ARG_REAL, FIELD_DOUBLE, OPT(field), .dflt = d, .hi = 1, .hi_open = true)
/* clang-format off */
/* betas = (b1, b2) as torch.optim.Adam takes them; beta1 and beta2 one at a time as before */
#define BETAS ARG("betas", ARG_PAIR, FIELD_DOUBLE, OPT(beta1), .at2 = OPT(beta2), .hi = 1, .hi_open = true, \
                  .kw_only = true)
/* the second param group, spared weight decay (elab_train.c's check_train resolves the names) */
#define NO_DECAY ARG("no_decay", ARG_NAMES, FIELD_STRS, OPT(no_decay), .kw_only = true)
#define ADAM_ARGS(wd) {RATE("lr", lr, 1e-3), BETA("beta1", beta1, 0.9), BETA("beta2", beta2, 0.999), \
                       RATE("eps", eps, 1e-8), RATE("weight_decay", weight_decay, wd), BETAS, NO_DECAY}
/* clang-format on */

/* Where no_decay was written: check_train names it when one of its names selects nothing. */
static void no_decay_at(const TrainFn *f, void *cfg, const SrcLoc *at) {
    ((OptConfig *)cfg)->no_decay_loc = at[train_fn_arg(f, "no_decay")];
}

/* torch.optim.Adam's betas, written once: as the pair or one by one, not both. */
static bool adam_check(struct Elab *E, const TrainFn *f, void *cfg, const SrcLoc *at, SrcLoc loc) {
    (void)loc;
    no_decay_at(f, cfg, at);
    int pair = train_fn_arg(f, "betas"), one = train_fn_arg(f, "beta1"), two = train_fn_arg(f, "beta2");
    if (!at[pair].line || (!at[one].line && !at[two].line)) return true;
    diag_error(E->d, at[pair], "%s(): give betas = (%s, %s) or beta1 and beta2, not both", f->name, "beta1", "beta2");
    return false;
}

/* torch.optim.SGD: nesterov needs a momentum and zero dampening. */
static bool sgd_check(struct Elab *E, const TrainFn *f, void *cfg, const SrcLoc *at, SrcLoc loc) {
    no_decay_at(f, cfg, at);
    const OptConfig *o = cfg;
    if (!o->nesterov || (o->momentum > 0 && o->dampening == 0)) return true;
    diag_error(E->d, loc, "nesterov momentum requires a momentum and zero dampening");
    return false;
}

/* a row a builtin, an argument a line */
/* clang-format off */
static const TrainFn optimizer_fns[] = {
    {.name = "sgd", .kind = OPT_SGD, .torch = "torch.optim.SGD", .check = sgd_check, .args = {
        ARG("lr", ARG_REAL, FIELD_DOUBLE, OPT(lr), .required = true, .hi = INFINITY),
        RATE("momentum", momentum, 0),
        ARG("dampening", ARG_FINITE, FIELD_DOUBLE, OPT(dampening)),
        RATE("weight_decay", weight_decay, 0),
        ARG("nesterov", ARG_FLAG, FIELD_BOOL, OPT(nesterov)),
        NO_DECAY,
    }},
    {.name = "adam", .kind = OPT_ADAM, .torch = "torch.optim.Adam", .check = adam_check, .args = ADAM_ARGS(0)},
    {.name = "adamw", .kind = OPT_ADAMW, .torch = "torch.optim.AdamW", .check = adam_check, .args = ADAM_ARGS(1e-2)},
};

const TrainFamily train_optimizers = {
    .value = V_OPTIM, .expect = "", .size = sizeof(OptConfig), .kind_at = offsetof(OptConfig, kind),
    .loc_at = offsetof(OptConfig, loc), .fns = optimizer_fns, .n = NNC_COUNTOF(optimizer_fns)};
/* clang-format on */

/* ---- learning-rate schedules (torch.optim.lr_scheduler, per epoch or per optimizer step) ---- */

#define SCH(f) offsetof(SchedConfig, f)
#define SCH_COUNT (1 << 30)
#define GAMMA(d, req) \
    ARG("gamma", ARG_REAL, FIELD_DOUBLE, SCH(gamma), .required = req, .dflt = d, .hi = INFINITY, .hi_open = true)
/* SchedInterval's order: what e counts, as Lightning's {"interval": "step"} */
static const char *const intervals[] = {"epoch", "step", NULL};
#define INTERVAL(d) ARG("interval", ARG_WORD, FIELD_INT, SCH(interval), .dflt = d, .words = intervals, .kw_only = true)

/* nanoGPT's get_lr decays from warmup to max_steps: a decay needs max_steps past the warm-up. */
static bool warmup_check(struct Elab *E, const TrainFn *f, void *cfg, const SrcLoc *at, SrcLoc loc) {
    (void)loc;
    const SchedConfig *s = cfg;
    if (s->max_steps == 0 || s->max_steps > s->warmup) return true;
    int i = train_fn_arg(f, "max_steps");
    diag_error(E->d, at[i], "%s(): max_steps (%.0f) must be larger than warmup (%.0f): the cosine decays between them",
               f->name, s->max_steps, s->warmup);
    return false;
}

/* a row a builtin, an argument a line */
/* clang-format off */
static const TrainFn schedule_fns[] = {
    {.name = "step_lr", .kind = SCHED_STEP, .torch = "StepLR", .args = {
        ARG("step_size", ARG_COUNT, FIELD_DOUBLE, SCH(step_size), .required = true, .dflt = 1, .hi = SCH_COUNT),
        GAMMA(0.1, false),
        INTERVAL(SCHED_PER_EPOCH),
    }},
    {.name = "exponential_lr", .kind = SCHED_EXPONENTIAL, .torch = "ExponentialLR", .args = {GAMMA(0, true),
        INTERVAL(SCHED_PER_EPOCH)}},
    {.name = "cosine_lr", .kind = SCHED_COSINE, .torch = "CosineAnnealingLR", .args = {
        ARG("T_max", ARG_COUNT, FIELD_DOUBLE, SCH(t_max), .hi = SCH_COUNT),   /* 0: the run's epochs (or steps) */
        ARG("eta_min", ARG_REAL, FIELD_DOUBLE, SCH(eta_min), .hi = INFINITY, .hi_open = true),
        INTERVAL(SCHED_PER_EPOCH),
    }},
    {.name = "linear_lr", .kind = SCHED_LINEAR, .torch = "LinearLR", .args = {
        ARG("start_factor", ARG_REAL, FIELD_DOUBLE, SCH(start_factor), .dflt = 1.0 / 3, .hi = 1, .lo_open = true),
        ARG("end_factor", ARG_REAL, FIELD_DOUBLE, SCH(end_factor), .dflt = 1, .hi = 1),
        ARG("total_iters", ARG_COUNT, FIELD_DOUBLE, SCH(total_iters), .dflt = 5, .hi = SCH_COUNT),
        INTERVAL(SCHED_PER_EPOCH),
    }},
    {.name = "warmup_cosine", .kind = SCHED_WARMUP_COSINE, .torch = "nanoGPT's get_lr", .check = warmup_check,
     .args = {
        ARG("warmup", ARG_INDEX, FIELD_DOUBLE, SCH(warmup), .required = true, .hi = SCH_COUNT),
        ARG("max_steps", ARG_COUNT, FIELD_DOUBLE, SCH(max_steps), .hi = SCH_COUNT),   /* 0: the run's steps */
        ARG("min_lr", ARG_REAL, FIELD_DOUBLE, SCH(min_lr), .hi = INFINITY, .hi_open = true),
        INTERVAL(SCHED_PER_STEP),
    }},
};

const TrainFamily train_schedules = {
    .value = V_SCHED, .expect = "", .size = sizeof(SchedConfig), .kind_at = offsetof(SchedConfig, kind),
    .loc_at = offsetof(SchedConfig, loc), .fns = schedule_fns, .n = NNC_COUNTOF(schedule_fns)};
/* clang-format on */

/* ---- the loss scaler (torch.cuda.amp.GradScaler) ------------------------------------------ */

#define SCL(f) offsetof(ScalerConfig, f)

static bool scaler_on(struct Elab *E, const TrainFn *f, void *cfg, const SrcLoc *at, SrcLoc loc) {
    (void)E, (void)f, (void)at, (void)loc;
    ((ScalerConfig *)cfg)->on = true;
    return true;
}

/* a row a builtin, an argument a line */
/* clang-format off */
static const TrainFn scaler_fns[] = {
    {.name = "dynamic", .torch = "torch.cuda.amp.GradScaler", .check = scaler_on, .args = {
        ARG("init_scale", ARG_REAL, FIELD_DOUBLE, SCL(init), .dflt = 65536, .hi = 3e38, .lo_open = true),
        ARG("growth_factor", ARG_REAL, FIELD_DOUBLE, SCL(growth), .dflt = 2, .lo = 1, .hi = 1e6, .lo_open = true),
        ARG("backoff_factor", ARG_REAL, FIELD_DOUBLE, SCL(backoff), .dflt = 0.5, .hi = 1, .lo_open = true,
            .hi_open = true),
        ARG("growth_interval", ARG_COUNT, FIELD_DOUBLE, SCL(interval), .dflt = 2000, .hi = 1 << 24),
    }},
};

const TrainFamily train_scalers = {
    .value = V_SCALER, .expect = "", .size = sizeof(ScalerConfig), .kind_at = SIZE_MAX,
    .loc_at = offsetof(ScalerConfig, loc), .fns = scaler_fns, .n = NNC_COUNTOF(scaler_fns)};
/* clang-format on */

const TrainFamily *const train_families[] = {&train_sources, &train_optimizers, &train_schedules, &train_scalers};
const int train_nfamilies = (int)NNC_COUNTOF(train_families);

/* ---- the settings, in the order "unknown setting" lists them ------------------------------ */

#define TC(f) offsetof(TrainConfig, f)

static const char *const precisions[] = {"f32", "bf16", "f16", NULL}; /* Precision's order */
static const char *const none[] = {"none", NULL};
static const char *const autos[] = {"auto", NULL}; /* device = auto: TrainConfig.device_auto */
static const char *const on_device[] = {"auto", "true", "false", NULL}; /* DataOnDevice's order */

/* a row a setting */
/* clang-format off */
const Setting train_settings[] = {
    {.name = "data", .kind = SET_DATA, .at = offsetof(DataBind, train), .family = &train_sources},
    {.name = "test", .kind = SET_DATA, .at = offsetof(DataBind, test), .family = &train_sources},
    {.name = "batch", .kind = SET_INT, .type = FIELD_INT64, .at = TC(batch), .lo = 1, .hi = INT32_MAX, .dflt = 1},
    {.name = "epochs", .kind = SET_INT, .type = FIELD_INT, .at = TC(epochs), .lo = 0, .hi = INT32_MAX, .dflt = 1},
    {.name = "optimizer", .kind = SET_CALL, .at = TC(opt), .family = &train_optimizers,
     .dflt_cfg = &(OptConfig){.kind = OPT_SGD, .lr = 0.01}},
    {.name = "lr_schedule", .kind = SET_CALL, .at = TC(sched), .family = &train_schedules},
    {.name = "minimize", .kind = SET_LOSS},
    {.name = "metric", .kind = SET_METRIC},
    /* 2^53: the integers a number in the file holds exactly */
    {.name = "seed", .kind = SET_INT, .type = FIELD_UINT64, .at = TC(seed), .lo = 0, .hi = 9007199254740992.0},
    {.name = "shuffle", .kind = SET_BOOL, .type = FIELD_BOOL, .at = TC(shuffle), .dflt = 1},
    {.name = "device", .kind = SET_DEVICE, .type = FIELD_INT, .at = TC(device), .words = autos},
    {.name = "precision", .kind = SET_WORD, .type = FIELD_INT, .at = TC(precision), .words = precisions},
    {.name = "loss_scale", .kind = SET_CALL, .at = TC(scaler), .family = &train_scalers, .words = none},
    {.name = "clip_grad_norm", .kind = SET_POSITIVE, .type = FIELD_DOUBLE, .at = TC(clip_norm),
     .excludes = "clip_grad_value"},
    {.name = "clip_grad_value", .kind = SET_POSITIVE, .type = FIELD_DOUBLE, .at = TC(clip_value),
     .excludes = "clip_grad_norm"},
    {.name = "accumulate", .kind = SET_INT, .type = FIELD_INT, .at = TC(accumulate), .lo = 1, .hi = 1 << 20, .dflt = 1},
    {.name = "data_on_device", .kind = SET_WORD, .type = FIELD_INT, .at = TC(data_on_device), .words = on_device},
};
/* clang-format on */

const int train_nsettings = (int)NNC_COUNTOF(train_settings);

const TrainFn *train_optimizer(OptKind k) {
    for (int i = 0; i < train_optimizers.n; i++)
        if (train_optimizers.fns[i].kind == (int)k) return &train_optimizers.fns[i];
    return NULL;
}

const Setting *train_setting_named(const char *name) {
    for (int i = 0; i < train_nsettings; i++)
        if (!strcmp(train_settings[i].name, name)) return &train_settings[i];
    return NULL;
}

int train_fn_arg(const TrainFn *f, const char *name) {
    for (int i = 0; i < TRAIN_FN_MAX_ARGS && f->args[i].name; i++)
        if (!strcmp(f->args[i].name, name)) return i;
    return -1;
}
