/* gpu_vs_cpu.c - the CUDA target computes what the CPU target computes, op by op.
 *
 *   gpu_vs_cpu [--train-first] [MODEL.nn...]
 *   gpu_vs_cpu --self-test          the comparison's tests on made-up values
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
 * orders), or else be no further from the exact value than twice the CPU's own distance from
 * it: a third model, the CPU's in double precision, runs beside the two from the f32 model's
 * inputs and initial parameters, as the reference.  The second test is for values that cancel
 * (a loss of 0.017 that is a sum of terms near 10 carries rounding of a few 1e-7 in float, on
 * either target: the relative test alone failed layer_norm.nn's on an H200, its CUDA value
 * 1.8e-7 from the CPU's, when the CPU's own was 9e-7 from the double one).  Prints maxdiff per
 * tensor, and both distances where the second test decides.  Without a CUDA device: "SKIP: no
 * CUDA device", exit 77.
 *
 * The models are compiled through the kernel cache ($XDG_CACHE_HOME/nnc), as the command does:
 * the f32 run's f64 reference is the f64 run's CPU model, and the tests that run this on the
 * emulator in other orders or with the other convolutions (tests/cuda/emu/emu.cmake) compile
 * nothing the first has not: they load its objects and cubins (each compiled once, by the
 * real NVRTC) and run them. */
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

/* The f32 run's reference: the CPU's model in double precision, fed the same values. */
typedef struct {
    nnc_compiled *c;
    const nnc_model_abi *a;
    void *m;
    void **in;
} Ref;

/* 0 if the tensors agree; prints one line either way.  r: the reference's tensor (f64), or NULL. */
static int compare(const char *what, const nnc_tensor_info *t, const void *c, const void *g, const double *r, int64_t B,
                   bool f64) {
    if (!c || !g) {
        printf("  %-28s %s\n", what, !c && !g ? "(no value on either)" : "FAIL: missing on one target");
        return (c == NULL) != (g == NULL);
    }
    int64_t n = numel(t, B);
    double maxdiff = 0, maxref = 0, worst = 0, ecpu = 0, egpu = 0;
    for (int64_t k = 0; k < n; k++) {
        double x = at(c, k, t->dtype), y = at(g, k, t->dtype), d = fabs(x - y);
        if (isnan(x) != isnan(y)) d = INFINITY;
        if (d > maxdiff) maxdiff = d;
        if (fabs(x) > maxref) maxref = fabs(x);
        double rel = d / (f64 ? fmax(fabs(x), 1e-12) : 1);
        if (rel > worst) worst = rel;
        if (r) {
            const double ex = isnan(x) != isnan(r[k]) ? INFINITY : fabs(x - r[k]);
            const double ey = isnan(y) != isnan(r[k]) ? INFINITY : fabs(y - r[k]);
            ecpu = fmax(ecpu, ex), egpu = fmax(egpu, ey);
        }
    }
    double tol = f64 ? 1e-5 : 1e-5 * fmax(maxref, 1e-6);
    bool ok = f64 ? worst <= tol : maxdiff <= tol;
    printf("  %-28s n=%-6lld maxdiff %.3g (max |cpu| %.3g)", what, (long long)n, maxdiff, maxref);
    if (!ok && r && t->dtype != NNC_TYPE_I32) { /* values that cancel: against the exact one */
        ok = egpu <= 2 * ecpu;
        printf(" from f64: cpu %.3g, cuda %.3g (at most twice the cpu's)", ecpu, egpu);
    }
    printf(" %s\n", ok ? "ok" : "FAIL");
    return !ok;
}

/* The reference's output k of `entry` (run by compare_entry), or NULL. */
static const double *ref_output(const Ref *r, int entry, int k) {
    return r && r->a ? r->a->output(r->m, entry, k) : NULL;
}

static int compare_entry(nnc_compiled *cc, nnc_compiled *gc, const Ref *r, int entry, void **in, int64_t B, bool f64) {
    const nnc_model_abi *ca = nnc_abi(cc), *ga = nnc_abi(gc);
    void *cm = nnc_model(cc), *gm = nnc_model(gc);
    int rc1 = ca->run(cm, entry, (const void *const *)in, B), rc2 = ga->run(gm, entry, (const void *const *)in, B);
    if (r && r->a && r->a->run(r->m, entry, (const void *const *)r->in, B) != 0) {
        printf("  FAIL: run(entry %d) of the f64 reference: %s\n", entry, r->a->error(r->m));
        return 1;
    }
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
        fails += compare(what, &ca->outputs[entry][k], ca->output(cm, entry, k), ga->output(gm, entry, k),
                         ref_output(r, entry, k), B, f64);
    }
    return fails;
}

static bool train_first;

/* The f64 reference of the f32 CPU model (ca, cm): compiled, its parameters set to cm's, its
 * inputs the f32 ones widened.  Without it (a compile that fails) the relative test alone. */
static Ref make_ref(const char *path, const char *src, const nnc_model_abi *ca, void *cm, void **in, int64_t B) {
    Ref r = {0};
    char err[4096];
    nnc_options o = nnc_default_options();
    o.use_cache = 1; /* the f64 model of the f64 run: its object from the cache */
    o.f64 = true;
    if (!(r.c = nnc_compile(path, src, &o, err, sizeof err))) {
        printf("  note: no f64 reference (%s)\n", err);
        return r;
    }
    r.a = nnc_abi(r.c), r.m = nnc_model(r.c);
    r.a->init(r.m, 7);
    for (int i = 0; i < ca->nparams; i++) {
        const float *p = ca->param(cm, i);
        double *q = r.a->param(r.m, i);
        for (int64_t k = 0; k < numel(&ca->params[i], 1); k++) q[k] = p[k];
    }
    r.in = calloc((size_t)ca->ninputs + 1, sizeof *r.in);
    for (int i = 0; i < ca->ninputs; i++) {
        const int64_t n = numel(&ca->inputs[i], B);
        r.in[i] = calloc((size_t)n, 8);
        for (int64_t k = 0; k < n; k++)
            if (ca->inputs[i].dtype == NNC_TYPE_I32) ((int32_t *)r.in[i])[k] = ((const int32_t *)in[i])[k];
            else ((double *)r.in[i])[k] = ((const float *)in[i])[k];
    }
    return r;
}

static void free_ref(Ref *r, int ninputs) {
    if (!r->c) return;
    for (int i = 0; i < ninputs; i++) free(r->in[i]);
    free(r->in);
    nnc_free(r->c);
}

static bool ref_train(const Ref *r, int64_t b) {
    return !r->a || r->a->run(r->m, NNC_ENTRY_TRAIN, (const void *const *)r->in, b) == 0;
}

static const double *ref_param(const Ref *r, int i) { return r->a ? r->a->param(r->m, i) : NULL; }

static int check_model(const char *path, bool f64) {
    char *src = slurp(path), err[16384];
    if (!src) {
        printf("FAIL %s: cannot read\n", path);
        return 1;
    }
    nnc_options o = nnc_default_options();
    o.use_cache = 1; /* the kernel cache, as the command uses it: see the top */
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
    Ref ref = f64 ? (Ref){0} : make_ref(path, src, ca, cm, in, B);
    int fails = 0;
    if (train_first) {   /* as `nnc train` does: a step before anything else synchronizes */
        int r1 = ca->run(cm, NNC_ENTRY_TRAIN, (const void *const *)in, B);
        int r2 = ga->run(gm, NNC_ENTRY_TRAIN, (const void *const *)in, B);
        if (!ref_train(&ref, B)) r1 = -1;
        if (r1 || r2) {
            printf("  FAIL: first train step: cpu %d, cuda %d (%s)\n", r1, r2, r2 ? ga->error(gm) : "");
            fails++;
        }
    }
    ga->sync(gm, NNC_SYNC_TO_HOST);
    for (int i = 0; i < ca->nparams; i++)
        fails +=
            compare(ca->params[i].name, &ca->params[i], ca->param(cm, i), ga->param(gm, i), ref_param(&ref, i), B, f64);
    fails += compare_entry(cc, gc, &ref, NNC_ENTRY_EVAL, in, B, f64);
    fails += compare_entry(cc, gc, &ref, NNC_ENTRY_GRAD, in, B, f64);
    if (B > 1) fails += compare_entry(cc, gc, &ref, NNC_ENTRY_GRAD, in, B - 1, f64); /* a short batch */
    /* The first run launches directly, later ones capture a CUDA graph per batch size and then
     * replay it; alternating B, B-1, B, ... makes a graph replayed at the wrong size show. */
    for (int s = 0; s < TRAIN_STEPS; s++) {
        int64_t b = B > 1 && s % 2 ? B - 1 : B;
        int r1 = ca->run(cm, NNC_ENTRY_TRAIN, (const void *const *)in, b);
        int r2 = ga->run(gm, NNC_ENTRY_TRAIN, (const void *const *)in, b);
        if (!ref_train(&ref, b)) r1 = -1;
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
        fails += compare(what, &ca->params[i], ca->param(cm, i), ga->param(gm, i), ref_param(&ref, i), B, f64);
    }
    if (ca->get_step(cm) != ga->get_step(gm)) {
        printf("  FAIL: step cpu %lld cuda %lld\n", (long long)ca->get_step(cm), (long long)ga->get_step(gm));
        fails++;
    }
    fails += compare_entry(cc, gc, &ref, NNC_ENTRY_EVAL, in, B, f64);
    free_ref(&ref, ca->ninputs);
    for (int i = 0; i < ca->ninputs; i++) free(in[i]);
    free(in);
    nnc_free(cc);
    nnc_free(gc);
    free(src);
    printf("  %s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* --self-test: compare's two tests on made-up values, so that neither can pass everything. */
static int self_test(void) {
    const nnc_tensor_info t = {.name = "x", .dtype = NNC_TYPE_F32, .rank = 1, .dims = {2}};
    struct {
        float cpu[2], cuda[2];
        double ref[2];
        int fails; /* what compare must say */
        const char *what;
    } cases[] = {
        {{0.0168f, 1.0f}, {0.01680018f, 1.0f}, {0.0168004, 1.0}, 0, "cancelling: cuda nearer the f64 value"},
        {{0.0168f, 0.0f}, {0.01680018f, 0.0f}, {0.0168004, 0.0}, 0, "cancelling: cuda 1.8e-7 off, cpu 4e-7"},
        {{0.0168f, 0.0f}, {0.0168020f, 0.0f}, {0.0168001, 0.0}, 1, "cuda 1.9e-6 off, cpu 1e-7: a real difference"},
        {{0.0168f, 0.0f}, {NAN, 0.0f}, {0.0168, 0.0}, 1, "NaN on one side"},
        {{1.0f, 2.0f}, {1.0f, 2.00001f}, {1.0, 2.0}, 0, "within 1e-5 of the largest: the first test"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int got = compare(cases[i].what, &t, cases[i].cpu, cases[i].cuda, cases[i].ref, 1, false);
        if (got != cases[i].fails) {
            printf("SELF-TEST FAIL: %s: compare said %d, expected %d\n", cases[i].what, got, cases[i].fails);
            bad++;
        }
    }
    /* without a reference, the cancelling case fails as it did */
    if (!compare("no reference: relative only", &t, cases[1].cpu, cases[1].cuda, NULL, 1, false)) {
        printf("SELF-TEST FAIL: without a reference the cancelling case passed\n");
        bad++;
    }
    printf("self-test: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

int main(int argc, char **argv) {
    char *files[256];
    int n = 0, fails = 0;
    bool f64 = true; /* --f32-only: the fibers' other orders look for missing barriers, which the
                      * f64 kernels share with the f32 ones */
    for (int i = 1; i < argc && n < 256; i++) {
        if (!strcmp(argv[i], "--train-first")) train_first = true;
        else if (!strcmp(argv[i], "--f32-only")) f64 = false;
        else if (!strcmp(argv[i], "--self-test")) return self_test();
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
        if (f64) fails += check_model(files[i], true);
        fails += check_model(files[i], false);
    }
    printf("%d model%s x {%s}, %d failed\n", n, n == 1 ? "" : "s", f64 ? "f64, f32" : "f32", fails);
    return fails ? 1 : 0;
}
