/* test_train_config.c - the train configuration nn_load_model and resolve_train_config hand on.
 *
 *   resolve_train_config  the one owner of the final values: the command line's overrides win
 *                         (0 included); the loss scaler's default follows the precision after
 *                         --precision; a schedule makes the rate state; the compile-time batch
 *                         (g->batch_max) is the batch, or each process's share of it; an
 *                         override the optimizer has no use for is refused, naming both; a
 *                         relative data path is read from the model file's folder
 *   the tables            docs/language.md's train section shows every setting and every
 *                         builtin of train_tables.c: each argument, which are required, each
 *                         numeric default, and the PyTorch class it follows */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "frontend/train_tables.h"

static int failures, checks;

#define CHECK(cond, ...) \
    do { \
        checks++; \
        if (!(cond)) { \
            failures++; \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            printf(__VA_ARGS__); \
            printf("\n"); \
        } \
    } while (0)

static const char *model_with(Arena *a, const char *settings) {
    return arena_printf(a,
                        "input x: f32[B, 4]\nparam w: f32[4] = zeros()\nloss = mean(x * w)\n"
                        "train {\n    data x = randn(10, 4)\n    minimize loss\n%s}\n",
                        settings);
}

/* The model of `settings` through nn_load_model and resolve_train_config; NULL when either
 * fails (err then holds resolve's message, or is empty after diagnostics). */
static Model *resolve_in(Arena *a, const char *settings, const TrainOverrides *o, int world, const char *dir, char *err,
                         size_t n) {
    const char *src = model_with(a, settings);
    FILE *quiet = fopen("/dev/null", "w");
    Diag *d = arena_alloc(a, sizeof *d);
    *d = (Diag){.file = "t.nn", .src = src, .out = quiet};
    Model *m = nn_load_model(a, d, "t.nn", src, "t");
    fclose(quiet);
    err[0] = 0;
    CHECK(m != NULL, "the model with\n%s\nshould load (%d errors)", settings, d->errors);
    if (m && !resolve_train_config(m, o, world, dir, err, n)) {
        model_free(m);
        return NULL;
    }
    return m;
}

static Model *resolve(Arena *a, const char *settings, const TrainOverrides *o, int world, char *err, size_t n) {
    return resolve_in(a, settings, o, world, NULL, err, n);
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
    TrainOverrides o = {.has_batch = true,
                        .batch = 5,
                        .has_epochs = true,
                        .epochs = 0,
                        .has_lr = true,
                        .lr = 0,
                        .has_momentum = true,
                        .momentum = 0,
                        .has_seed = true,
                        .seed = 7};
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
        CHECK(m->train.clip_norm == 2 && m->train.clip_value == 0,
              "--clip-grad-norm replaces clip_grad_value: "
              "norm %g value %g",
              m->train.clip_norm, m->train.clip_value);
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
        CHECK(m->train.opt.lr_state && m->train.opt.lr == 0.25,
              "a schedule: the rate is state, from --lr 0.25: "
              "lr_state %d lr %g",
              m->train.opt.lr_state, m->train.opt.lr);
        model_free(m);
    }
}

static void test_refused(Arena *a) {
    char err[256];
    static const struct {
        const char *settings, *want;
    } cases[] = {
        {"    optimizer = adamw()\n", "--momentum: applies to sgd; this model uses adamw"},
        {"    optimizer = adam()\n", "--momentum: applies to sgd; this model uses adam"},
        {"    optimizer = sgd(lr = 0.1, momentum = 0.9, nesterov = true)\n",
         "--momentum: this model's sgd uses nesterov, which needs a momentum > 0, got 0"},
    };
    for (size_t i = 0; i < NNC_COUNTOF(cases); i++) {
        Model *m = resolve(a, cases[i].settings, &(TrainOverrides){.has_momentum = true}, 1, err, sizeof err);
        CHECK(!m && !strcmp(err, cases[i].want), "--momentum 0 with\n%sshould say '%s', found '%s'", cases[i].settings,
              cases[i].want, err);
    }
}

static void test_data_paths(Arena *a) {
    char err[256];
    const char *settings = "    data x = npy(\"d/x.npy\")\n    test x = npy(\"/abs/t.npy\")\n";
    static const struct {
        const char *dir, *path;
        bool from_cwd;
    } cases[] = {{"models", "models/d/x.npy", false},
                 {"models/", "models/d/x.npy", false},
                 {".", "d/x.npy", false},
                 {NULL, "d/x.npy", true}};
    for (size_t i = 0; i < NNC_COUNTOF(cases); i++) {
        Model *m = resolve_in(a, settings, &(TrainOverrides){0}, 1, cases[i].dir, err, sizeof err);
        if (!m) continue;
        const DataSource *tr = &m->train.data[0].train, *te = &m->train.data[0].test;
        CHECK(!strcmp(tr->path, cases[i].path) && !strcmp(tr->written, "d/x.npy") && tr->from_cwd == cases[i].from_cwd,
              "data from folder %s: path %s (want %s), written %s, from_cwd %d", cases[i].dir ? cases[i].dir : "(none)",
              tr->path, cases[i].path, tr->written, tr->from_cwd);
        CHECK(!strcmp(te->path, "/abs/t.npy") && !te->written, "an absolute path stays: %s", te->path);
        model_free(m);
    }
}

/* ---- docs/language.md against the tables --------------------------------------------------- */

/* The train section of docs/language.md: from its heading to the next. */
static char *docs_train_section(void) {
    FILE *f = fopen(NNC_SOURCE_DIR "/docs/language.md", "r");
    CHECK(f != NULL, "cannot read docs/language.md");
    if (!f) return NULL;
    Str s = {0};
    char line[4096];
    bool in = false;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "## ", 3)) in = !strncmp(line, "## The train section", 20);
        if (in) str_puts(&s, line);
    }
    fclose(f);
    CHECK(s.buf != NULL, "docs/language.md has no '## The train section'");
    return s.buf;
}

/* A default as the docs write it: a number, a fraction (1/3), true or false; false if it is a
 * word (epochs, all). */
static bool doc_number(const char *v, size_t len, double *x) {
    char buf[64], *end;
    snprintf(buf, sizeof buf, "%.*s", (int)len, v);
    if (!strcmp(buf, "true") || !strcmp(buf, "false")) {
        *x = buf[0] == 't';
        return true;
    }
    *x = strtod(buf, &end);
    if (end != buf && *end == '/') *x /= strtod(end + 1, &end);
    return end != buf && *end == 0;
}

/* The length of what the docs write up to the ')' (or, with comma, the ',') that ends it at its
 * own level: a default may be a pair or a list itself (betas=(0.9, 0.999), no_decay=[]). */
static size_t arg_len(const char *p, bool comma) {
    size_t k = 0;
    for (int depth = 0; p[k] && p[k] != '\n' && (depth || (p[k] != ')' && !(comma && p[k] == ','))); k++)
        depth += (p[k] == '(' || p[k] == '[') - (p[k] == ')' || p[k] == ']');
    return k;
}

/* A pair's default as the docs show it, "(0.9, 0.999)": the defaults of the arguments that set
 * its two fields one at a time (betas: beta1 and beta2). */
static void check_pair_default(const TrainFn *f, const ArgSpec *s, const char *v, size_t len) {
    double x[2];
    char buf[64];
    snprintf(buf, sizeof buf, "%.*s", (int)len, v);
    CHECK(sscanf(buf, "(%lf, %lf)", &x[0], &x[1]) == 2, "docs: %s(%s=%s) is not a pair", f->name, s->name, buf);
    for (int i = 0; i < TRAIN_FN_MAX_ARGS && f->args[i].name; i++)
        for (int k = 0; k < 2; k++)
            if (&f->args[i] != s && f->args[i].at == (k ? s->at2 : s->at))
                CHECK(x[k] == f->args[i].dflt, "docs: %s(%s=%s): %s's default is %g", f->name, s->name, buf,
                      f->args[i].name, f->args[i].dflt);
}

/* One builtin's signature in the docs, "name(a, b=1, ...)", against its row. */
static void check_signature(const char *docs, const TrainFn *f) {
    char pat[64];
    const char *sig = NULL;
    for (const char *pre = "=`"; *pre && !sig; pre++) { /* `optimizer = sgd(...)` or `idx(...)` */
        snprintf(pat, sizeof pat, "%s%s(", *pre == '`' ? "`" : "= ", f->name);
        sig = strstr(docs, pat);
    }
    CHECK(sig != NULL, "docs/language.md's train section does not show %s(...)", f->name);
    if (!sig) return;
    const char *eol = strchr(sig, '\n'), *bol = sig;
    while (bol > docs && bol[-1] != '\n') bol--;
    if (f->torch) {
        char *line = strndup(bol, (size_t)(eol - bol));
        CHECK(strstr(line, f->torch) != NULL, "docs: the line of %s() does not name %s", f->name, f->torch);
        free(line);
    }
    if (f->read) return; /* randn(n, d...): a shape, not a list of arguments */
    const char *p = strchr(sig, '(') + 1, *end = p + arg_len(p, false);
    bool seen[TRAIN_FN_MAX_ARGS] = {0}, elided = false;
    while (p < end) {
        size_t len = arg_len(p, true);
        size_t nlen = strcspn(p, "=,)");
        if (!strncmp(p, "...", 3)) elided = true;
        else {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)nlen, p);
            int i = train_fn_arg(f, name);
            CHECK(i >= 0, "docs: %s() has no argument '%s'", f->name, name);
            if (i >= 0) {
                const ArgSpec *s = &f->args[i];
                seen[i] = true;
                double x;
                CHECK(!s->required || nlen == len, "docs: %s()'s %s is required, shown with a default", f->name, name);
                if (!s->required && nlen < len && doc_number(p + nlen + 1, len - nlen - 1, &x))
                    CHECK(fabs(x - s->dflt) <= 1e-12 * fabs(s->dflt), "docs: %s(%s=%.*s), the table's default is %g",
                          f->name, name, (int)(len - nlen - 1), p + nlen + 1, s->dflt);
                if (s->rule == ARG_PAIR) check_pair_default(f, s, p + nlen + 1, len - nlen - 1);
            }
        }
        p += len;
        while (p < end && (*p == ',' || *p == ' ')) p++;
    }
    for (int i = 0; i < TRAIN_FN_MAX_ARGS && f->args[i].name; i++)
        CHECK(seen[i] || elided, "docs: %s() does not show its argument '%s'", f->name, f->args[i].name);
}

static void test_docs(void) {
    char *docs = docs_train_section();
    if (!docs) return;
    for (int i = 0; i < train_nsettings; i++) {
        const Setting *st = &train_settings[i];
        char pat[64];
        snprintf(pat, sizeof pat, "\n| `%s ", st->name);
        const char *row = strstr(docs, pat);
        CHECK(row != NULL, "docs/language.md's train section has no row for the setting '%s'", st->name);
        for (int w = 0; row && st->words && st->words[w]; w++) {
            char *line = strndup(row + 1, strcspn(row + 1, "\n"));
            CHECK(strstr(line, st->words[w]) != NULL, "docs: the row of %s does not show '%s'", st->name, st->words[w]);
            free(line);
        }
    }
    for (int k = 0; k < train_nfamilies; k++)
        for (int i = 0; i < train_families[k]->n; i++) check_signature(docs, &train_families[k]->fns[i]);
    free(docs);
}

int main(void) {
    Arena a = {0};
    test_overrides(&a);
    test_derived(&a);
    test_refused(&a);
    test_data_paths(&a);
    test_docs();
    arena_free(&a);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
