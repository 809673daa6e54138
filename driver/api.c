/* api.c - the library interface of include/nnc.h: the CLI's compile entry (compile.c),
 * returning a loaded model instead of training it, and the CLI's trainer (train_run) over that
 * model.  Diagnostics are captured into the caller's buffer; the trainer prints as the CLI does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../include/nnc.h"
#include "../train/train.h"
#include "compile.h"

#ifndef NNC_VERSION
#define NNC_VERSION "0.1.0"
#endif

struct nnc_compiled {
    Compiled c;
    LoadedModel *lm;
    Str source;
    const char *file; /* the name diagnostics use */
    bool use_cache;
    int epochs; /* of the last fit (the hyperparameters a save records) */
    int64_t steps; /* ... and its optimizer steps (0: none yet) */
    TrainPos pos; /* where the last fit stopped: a save lets --resume go on from there */
};

nnc_options nnc_default_options(void) {
    nnc_options o = {0};
    o.fuse = 1;
    return o;
}

const char *nnc_version(void) { return NNC_VERSION; }

/* Compiles into c, with diagnostics captured in err; false on failure. */
static bool compile_captured(nnc_compiled *c, const char *file, const char *source, const nnc_options *o, char *err,
                             size_t errlen) {
    if (o->precision < 0 || o->precision > 3 || (o->f64 && o->precision > 1)) {
        snprintf(err, errlen, "nnc_compile: precision %d is not 0..3, or is half precision with f64\n", o->precision);
        return false;
    }
    if (o->epochs < 0 || (o->has_lr && !(isfinite(o->lr) && o->lr >= 0))) { /* what the CLI's flags accept */
        snprintf(err, errlen, "nnc_compile: %s\n",
                 o->epochs < 0 ? "epochs is negative" : "lr is not a finite number >= 0");
        return false;
    }
    char *dbuf = NULL;   /* open_memstream publishes it at fclose, so read it only after */
    size_t dlen = 0;
    FILE *df = open_memstream(&dbuf, &dlen);
    CompileOpts co = {.file = file,
                      .source = source,
                      .diag_out = df,
                      .target = o->target ? "cuda" : "cpu",
                      .over = {.has_batch = o->batch > 0,
                               .batch = o->batch,
                               .has_precision = o->precision > 0,
                               .precision = o->precision > 0 ? (Precision)(o->precision - 1) : PREC_F32,
                               .has_epochs = o->epochs > 0,
                               .epochs = o->epochs,
                               .has_lr = o->has_lr != 0,
                               .lr = o->lr,
                               .has_seed = o->has_seed != 0,
                               .seed = o->seed},
                      .fuse = o->fuse != 0,
                      .strict_devices = o->strict_devices != 0};
    char msg[1024];
    bool ok = compile_model(&c->c, &co, msg, sizeof msg);
    if (df) fclose(df);
    if (!ok) snprintf(err, errlen, "%s", msg[0] ? msg : dbuf && *dbuf ? dbuf : "compilation failed\n");
    free(dbuf);
    return ok;
}

nnc_compiled *nnc_compile(const char *file, const char *source, const nnc_options *o, char *err, size_t errlen) {
    if (!source || !o) {
        if (err && errlen) snprintf(err, errlen, "nnc_compile: %s is NULL", source ? "the options" : "the source text");
        return NULL;
    }
    char dummy[1];
    if (!err || !errlen) {   /* diagnostics have nowhere to go, but the NULL result still says it failed */
        err = dummy;
        errlen = sizeof dummy;
    }
    nnc_compiled *c = xcalloc(1, sizeof *c);
    if (!compile_captured(c, file, source, o, err, errlen)) {
        nnc_free(c);
        return NULL;
    }
    BuildOpts bo = {.f64 = o->f64 != 0, .cc = o->cc, .cache_dir = compile_cache_dir(&c->c.arena, o->use_cache != 0)};
    if (c->c.be) c->c.be->render(&c->c.p, &bo, &c->source);
    c->lm = compile_load(&c->c, &bo, err, errlen);
    if (!c->lm) {
        nnc_free(c);
        return NULL;
    }
    c->file = arena_strdup(&c->c.arena, file ? file : "model.nn");
    c->use_cache = o->use_cache != 0;
    c->epochs = c->c.m->train.epochs;
    c->pos = (TrainPos){0, 0, c->c.m->train.seed, false, 0}; /* epoch 0: --resume starts at epoch 1 */
    c->lm->abi->init(c->lm->m, c->c.m->train.seed); /* as the CLI starts; syncs to a device */
    return c;
}

unsigned long long nnc_seed(const nnc_compiled *c) { return c ? (unsigned long long)c->c.m->train.seed : 0; }

nnc_fit_options nnc_default_fit_options(void) { return (nnc_fit_options){.progress = -1}; }

/* The TrainOpts main.c's act() builds for `nnc FILE [flags]`, from the same train section. */
int nnc_fit(nnc_compiled *c, const nnc_fit_options *o) {
    if (!c || !o) return -1;
    const Model *m = c->c.m;
    if (!m->train.present) {
        fprintf(stderr, "nnc: error: %s has no train section: nothing to fit\n", c->file);
        return -1;
    }
    bool quiet = o->quiet != 0;
    TrainOpts to = {.epochs = o->epochs > 0 ? o->epochs : m->train.epochs,
                    .seed = m->train.seed,
                    .shuffle = m->train.shuffle,
                    .quiet = quiet,
                    .progress = !quiet && (o->progress < 0 ? isatty(2) : o->progress != 0),
                    .log_every = o->log_every > 0 ? o->log_every : 0,
                    .metrics_path = o->metrics,
                    .tensorboard = o->tensorboard,
                    .save_path = o->save,
                    .source_file = c->file,
                    .t_process = train_now(),
                    .cache_dir = compile_cache_dir(&c->c.arena, c->use_cache),
                    .global_batch = m->train.batch,
                    .keep_params = true,
                    .end = &c->pos,
                    .run_steps = &c->steps};
    ModelRef ref = {c->lm->abi, c->lm->m, NULL, NULL, NULL};
    c->epochs = to.epochs;
    return train_run(&m->train, &ref, &to);
}

int nnc_save(nnc_compiled *c, const char *path, char *err, size_t errlen) {
    if (!c || !path) {
        if (err && errlen) snprintf(err, errlen, "nnc_save: %s is NULL", c ? "the path" : "the model");
        return -1;
    }
    char dummy[1];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    Hparams hp;
    hparams_of(&hp, &c->c.m->train, c->c.m->train.batch, c->epochs, c->steps);
    ModelRef ref = {c->lm->abi, c->lm->m, NULL, NULL, NULL};
    return checkpoint_save(&ref, path, &c->pos, 0, &hp, err, errlen) ? 0 : -1;
}

const nnc_model_abi *nnc_abi(const nnc_compiled *c) { return c ? c->lm->abi : NULL; }
void *nnc_model(const nnc_compiled *c) { return c ? c->lm->m : NULL; }
const char *nnc_source(const nnc_compiled *c) { return c ? c->source.buf : NULL; }

void nnc_free(nnc_compiled *c) {
    if (!c) return;
    if (c->lm) c->c.be->unload(c->lm);
    compile_free(&c->c);
    str_free(&c->source);
    free(c);
}
