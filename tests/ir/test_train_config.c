/* test_train_config.c - the train configuration nn_load_model and resolve_train_config hand on.
 *
 *   resolve_train_config  the one owner of the final values: the command line's overrides win
 *                         (0 included); the loss scaler's default follows the precision after
 *                         --precision; a schedule makes the rate state; the compile-time batch
 *                         (g->batch_max) is the batch, or each process's share of it; an
 *                         override the optimizer has no use for is refused, naming both */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

static int failures, checks;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        checks++;                                                                     \
        if (!(cond)) {                                                                \
            failures++;                                                               \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                    \
            printf(__VA_ARGS__);                                                      \
            printf("\n");                                                             \
        }                                                                             \
    } while (0)

static const char *model_with(Arena *a, const char *settings) {
    return arena_printf(a, "input x: f32[B, 4]\nparam w: f32[4] = zeros()\nloss = mean(x * w)\n"
                           "train {\n    data x = randn(10, 4)\n    minimize loss\n%s}\n", settings);
}

/* The model of `settings` through nn_load_model and resolve_train_config; NULL when either
 * fails (err then holds resolve's message, or is empty after diagnostics). */
static Model *resolve(Arena *a, const char *settings, const TrainOverrides *o, int world, char *err, size_t n) {
    const char *src = model_with(a, settings);
    FILE *quiet = fopen("/dev/null", "w");
    Diag *d = arena_alloc(a, sizeof *d);
    *d = (Diag){.file = "t.nn", .src = src, .out = quiet};
    Model *m = nn_load_model(a, d, "t.nn", src, "t");
    fclose(quiet);
    err[0] = 0;
    CHECK(m != NULL, "the model with\n%s\nshould load (%d errors)", settings, d->errors);
    if (m && !resolve_train_config(m, o, world, err, n)) return NULL;
    return m;
}

static void test_overrides(Arena *a) {
    char err[256];
    Model *m = resolve(a, "    batch = 8\n    epochs = 3\n    optimizer = sgd(lr = 0.5, momentum = 0.9)\n",
                       &(TrainOverrides){0}, 1, err, sizeof err);
    if (m) {
        CHECK(m->train.batch == 8 && m->g->batch_max == 8, "batch 8: found %lld, batch_max %d",
              (long long)m->train.batch, m->g->batch_max);
        CHECK(m->train.opt.lr == 0.5 && m->train.opt.momentum == 0.9, "the section's sgd: lr %g momentum %g",
              m->train.opt.lr, m->train.opt.momentum);
        CHECK(!m->train.scaler.on && !m->train.opt.lr_state, "f32, no schedule: no scaler, a constant rate");
        model_free(m);
    }
    TrainOverrides o = {.has_batch = true, .batch = 5, .has_epochs = true, .epochs = 0, .has_lr = true, .lr = 0,
                        .has_momentum = true, .momentum = 0, .has_seed = true, .seed = 7};
    m = resolve(a, "    batch = 8\n    epochs = 3\n    optimizer = sgd(lr = 0.5, momentum = 0.9)\n", &o, 1, err,
                sizeof err);
    if (m) {
        CHECK(m->train.batch == 5 && m->g->batch_max == 5, "--batch 5: found %lld, batch_max %d",
              (long long)m->train.batch, m->g->batch_max);
        CHECK(m->train.epochs == 0 && m->train.opt.lr == 0 && m->train.opt.momentum == 0 && m->train.seed == 7,
              "0 wins over the file: epochs %d lr %g momentum %g seed %llu", m->train.epochs, m->train.opt.lr,
              m->train.opt.momentum, (unsigned long long)m->train.seed);
        model_free(m);
    }
    m = resolve(a, "    batch = 10\n", &(TrainOverrides){0}, 3, err, sizeof err);
    if (m) {
        CHECK(m->train.batch == 10 && m->g->batch_max == 4, "3 processes share batch 10: 4 each, found %d",
              m->g->batch_max);
        model_free(m);
    }
    m = resolve(a, "    clip_grad_value = 0.5\n", &(TrainOverrides){.has_clip = true, .clip_norm = 2}, 1, err,
                sizeof err);
    if (m) {
        CHECK(m->train.clip_norm == 2 && m->train.clip_value == 0, "--clip-grad-norm replaces clip_grad_value: "
              "norm %g value %g", m->train.clip_norm, m->train.clip_value);
        model_free(m);
    }
}

static void test_derived(Arena *a) {
    char err[256];
    Model *m = resolve(a, "", &(TrainOverrides){.has_precision = true, .precision = PREC_F16}, 1, err, sizeof err);
    if (m) {
        CHECK(m->train.scaler.on && m->train.scaler.init == 65536 && m->train.scaler.interval == 2000,
              "--precision f16 turns GradScaler's defaults on: on %d init %g", m->train.scaler.on,
              m->train.scaler.init);
        model_free(m);
    }
    m = resolve(a, "    precision = f16\n    loss_scale = none\n", &(TrainOverrides){0}, 1, err, sizeof err);
    if (m) {
        CHECK(!m->train.scaler.on, "loss_scale = none wins over f16's default");
        model_free(m);
    }
    m = resolve(a, "    loss_scale = dynamic(init_scale = 8)\n", &(TrainOverrides){0}, 1, err, sizeof err);
    if (m) {
        CHECK(m->train.scaler.on && m->train.scaler.init == 8, "a written scaler stays: on %d init %g",
              m->train.scaler.on, m->train.scaler.init);
        model_free(m);
    }
    m = resolve(a, "    optimizer = adam()\n    lr_schedule = exponential_lr(0.5)\n",
                &(TrainOverrides){.has_lr = true, .lr = 0.25}, 1, err, sizeof err);
    if (m) {
        CHECK(m->train.opt.lr_state && m->train.opt.lr == 0.25, "a schedule: the rate is state, from --lr 0.25: "
              "lr_state %d lr %g", m->train.opt.lr_state, m->train.opt.lr);
        model_free(m);
    }
}

static void test_refused(Arena *a) {
    char err[256];
    static const struct { const char *settings, *want; } cases[] = {
        {"    optimizer = adam()\n", "--momentum: applies to sgd; this model uses adam"},
        {"    optimizer = sgd(lr = 0.1, momentum = 0.9, nesterov = true)\n",
         "--momentum: this model's sgd uses nesterov, which needs a momentum > 0, got 0"},
    };
    for (size_t i = 0; i < NNC_COUNTOF(cases); i++) {
        Model *m = resolve(a, cases[i].settings, &(TrainOverrides){.has_momentum = true}, 1, err, sizeof err);
        CHECK(!m && !strcmp(err, cases[i].want), "--momentum 0 with\n%sshould say '%s', found '%s'",
              cases[i].settings, cases[i].want, err);
    }
}

int main(void) {
    Arena a = {0};
    test_overrides(&a);
    test_derived(&a);
    test_refused(&a);
    arena_free(&a);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
