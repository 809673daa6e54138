/* gpu_vs_cpu.c - the CUDA target computes what the CPU target computes, op by op.
 *
 *   gpu_vs_cpu [--train-first] [MODEL.nn...]
 *                                   --train-first: one train step right after init, before the
 *                                   first comparison (and its synchronizing copies);
 *                                   default models: every .nn file in tests/cuda/ops (or $NNC_CUDA_OPS_DIR);
 *                                   none there is a failure
 *
 * Each model is built for both targets through the library API (include/nnc.h), initialized
 * from the same seed (both run the same Philox initialisation), fed the same inputs, and
 * compared on: the eval entry's outputs (loss and metrics), the grad entry's outputs (loss and
 * "grad.<param>"), and the parameters after six train steps at batch sizes B, B-1, B, ...
 * (optimizer updates, the step counter, graph replay per batch size).  In double precision every value must agree to 1e-5 relative; in single precision
 * to 1e-5 relative to the tensor's largest value (cuBLAS and OpenBLAS sum in different
 * orders).  Prints maxdiff per tensor.  Without a CUDA device: "SKIP: no CUDA device", exit 77. */
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnc.h"

#define TRAIN_STEPS 6

#ifndef NNC_CUDA_OPS_DIR
#define NNC_CUDA_OPS_DIR "tests/cuda/ops"
#endif

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static int64_t numel(const nnc_tensor_info *t, int64_t B) {
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= t->dims[d] < 0 ? -t->dims[d] * B : t->dims[d];
    return n;
}

/* Deterministic inputs: reals in [-1.5, 1.5), labels in [0, classes). */
static void **make_inputs(const nnc_model_abi *a, int64_t B, bool f64, int classes) {
    void **in = calloc((size_t)a->ninputs + 1, sizeof *in);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < a->ninputs; i++) {
        int64_t n = numel(&a->inputs[i], B);
        in[i] = calloc((size_t)n, 8);
        for (int64_t k = 0; k < n; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(s >> 11) * (1.0 / 9007199254740992.0);
            if (a->inputs[i].dtype == NNC_TYPE_I32) ((int32_t *)in[i])[k] = (int32_t)(u * classes);
            else if (f64) ((double *)in[i])[k] = 3 * u - 1.5;
            else ((float *)in[i])[k] = (float)(3 * u - 1.5);
        }
    }
    return in;
}

static double at(const void *p, int64_t k, int dtype) {
    if (dtype == NNC_TYPE_F64) return ((const double *)p)[k];
    if (dtype == NNC_TYPE_I32) return ((const int32_t *)p)[k];
    return ((const float *)p)[k];
}

/* 0 if the tensors agree; prints one line either way. */
static int compare(const char *what, const nnc_tensor_info *t, const void *c, const void *g, int64_t B, bool f64) {
    if (!c || !g) {
        printf("  %-28s %s\n", what, !c && !g ? "(no value on either)" : "FAIL: missing on one target");
        return (c == NULL) != (g == NULL);
    }
    int64_t n = numel(t, B);
    double maxdiff = 0, maxref = 0, worst = 0;
    for (int64_t k = 0; k < n; k++) {
        double x = at(c, k, t->dtype), y = at(g, k, t->dtype), d = fabs(x - y);
        if (isnan(x) != isnan(y)) d = INFINITY;
        if (d > maxdiff) maxdiff = d;
        if (fabs(x) > maxref) maxref = fabs(x);
        double rel = d / (f64 ? fmax(fabs(x), 1e-12) : 1);
        if (rel > worst) worst = rel;
    }
    double tol = f64 ? 1e-5 : 1e-5 * fmax(maxref, 1e-6);
    bool ok = f64 ? worst <= tol : maxdiff <= tol;
    printf("  %-28s n=%-6lld maxdiff %.3g (max |cpu| %.3g) %s\n", what, (long long)n, maxdiff, maxref, ok ? "ok" : "FAIL");
    return !ok;
}

static int compare_entry(nnc_compiled *cc, nnc_compiled *gc, int entry, void **in, int64_t B, bool f64) {
    const nnc_model_abi *ca = nnc_abi(cc), *ga = nnc_abi(gc);
    void *cm = nnc_model(cc), *gm = nnc_model(gc);
    int rc1 = ca->run(cm, entry, (const void *const *)in, B), rc2 = ga->run(gm, entry, (const void *const *)in, B);
    if (rc1 || rc2) {
        printf("  FAIL: run(entry %d): cpu %d (%s), cuda %d (%s)\n", entry, rc1, rc1 ? ca->error(cm) : "",
               rc2, rc2 ? ga->error(gm) : "");
        return 1;
    }
    int fails = 0;
    static const char *names[] = {"train", "grad", "eval"};
    for (int k = 0; k < ca->noutputs[entry]; k++) {
        char what[160];
        snprintf(what, sizeof what, "%s %s", names[entry], ca->outputs[entry][k].name);
        fails += compare(what, &ca->outputs[entry][k], ca->output(cm, entry, k), ga->output(gm, entry, k), B, f64);
    }
    return fails;
}

static bool train_first;

static int check_model(const char *path, bool f64) {
    char *src = slurp(path), err[16384];
    if (!src) {
        printf("FAIL %s: cannot read\n", path);
        return 1;
    }
    nnc_options o = nnc_default_options();
    o.f64 = f64;
    nnc_compiled *cc = nnc_compile(path, src, &o, err, sizeof err);
    if (!cc) {
        printf("FAIL %s (cpu): %s\n", path, err);
        free(src);
        return 1;
    }
    o.target = 1;
    nnc_compiled *gc = nnc_compile(path, src, &o, err, sizeof err);
    if (!gc) {
        nnc_free(cc);
        free(src);
        if (strstr(err, "no CUDA")) {
            printf("SKIP: no CUDA device (%s)\n", err);
            exit(77);
        }
        printf("FAIL %s (cuda): %s\n", path, err);
        return 1;
    }
    printf("%s (%s)\n", path, f64 ? "f64" : "f32");
    const nnc_model_abi *ca = nnc_abi(cc), *ga = nnc_abi(gc);
    void *cm = nnc_model(cc), *gm = nnc_model(gc);
    int64_t B = ca->batch_max;
    void **in = make_inputs(ca, B, f64, 5);
    ca->init(cm, 7);
    ga->init(gm, 7);
    int fails = 0;
    if (train_first) {   /* as `nnc train` does: a step before anything else synchronizes */
        int r1 = ca->run(cm, NNC_ENTRY_TRAIN, (const void *const *)in, B);
        int r2 = ga->run(gm, NNC_ENTRY_TRAIN, (const void *const *)in, B);
        if (r1 || r2) {
            printf("  FAIL: first train step: cpu %d, cuda %d (%s)\n", r1, r2, r2 ? ga->error(gm) : "");
            fails++;
        }
    }
    ga->sync(gm, NNC_SYNC_TO_HOST);
    for (int i = 0; i < ca->nparams; i++)
        fails += compare(ca->params[i].name, &ca->params[i], ca->param(cm, i), ga->param(gm, i), B, f64);
    fails += compare_entry(cc, gc, NNC_ENTRY_EVAL, in, B, f64);
    fails += compare_entry(cc, gc, NNC_ENTRY_GRAD, in, B, f64);
    if (B > 1) fails += compare_entry(cc, gc, NNC_ENTRY_GRAD, in, B - 1, f64);   /* a short batch */
    /* The first run launches directly, later ones capture a CUDA graph per batch size and then
     * replay it; alternating B, B-1, B, ... makes a graph replayed at the wrong size show. */
    for (int s = 0; s < TRAIN_STEPS; s++) {
        int64_t b = B > 1 && s % 2 ? B - 1 : B;
        int r1 = ca->run(cm, NNC_ENTRY_TRAIN, (const void *const *)in, b);
        int r2 = ga->run(gm, NNC_ENTRY_TRAIN, (const void *const *)in, b);
        if (r1 || r2) {
            printf("  FAIL: train step: cpu %d, cuda %d (%s)\n", r1, r2, r2 ? ga->error(gm) : "");
            fails++;
            break;
        }
    }
    ga->sync(gm, NNC_SYNC_TO_HOST);
    for (int i = 0; i < ca->nparams; i++) {
        char what[160];
        snprintf(what, sizeof what, "after %d steps %s", TRAIN_STEPS, ca->params[i].name);
        fails += compare(what, &ca->params[i], ca->param(cm, i), ga->param(gm, i), B, f64);
    }
    if (ca->get_step(cm) != ga->get_step(gm)) {
        printf("  FAIL: step cpu %lld cuda %lld\n", (long long)ca->get_step(cm), (long long)ga->get_step(gm));
        fails++;
    }
    fails += compare_entry(cc, gc, NNC_ENTRY_EVAL, in, B, f64);
    for (int i = 0; i < ca->ninputs; i++) free(in[i]);
    free(in);
    nnc_free(cc);
    nnc_free(gc);
    free(src);
    printf("  %s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    char *files[256];
    int n = 0, fails = 0;
    for (int i = 1; i < argc && n < 256; i++) {
        if (!strcmp(argv[i], "--train-first")) train_first = true;
        else files[n++] = argv[i];
    }
    const char *dir = getenv("NNC_CUDA_OPS_DIR") ? getenv("NNC_CUDA_OPS_DIR") : NNC_CUDA_OPS_DIR;
    if (n == 0) {
        DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d)) && n < 256) {
            size_t l = strlen(de->d_name);
            if (l > 3 && !strcmp(de->d_name + l - 3, ".nn")) {
                files[n] = malloc(strlen(dir) + l + 2);
                sprintf(files[n++], "%s/%s", dir, de->d_name);
            }
        }
        if (d) closedir(d);
        qsort(files, (size_t)n, sizeof *files, by_name);
    }
    if (n == 0) {   /* a test that compared nothing must not pass */
        printf("FAIL: no models to compare (no .nn file in %s)\n", dir);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        fails += check_model(files[i], true);
        fails += check_model(files[i], false);
    }
    printf("%d model%s x {f64, f32}, %d failed\n", n, n == 1 ? "" : "s", fails);
    return fails ? 1 : 0;
}
