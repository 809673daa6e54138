/* nvrtc_compile.c - every model's CUDA source compiles with NVRTC (no driver or GPU needed).
 *
 *   nvrtc_compile [--no-fuse] [--f64] [--arch ARCH]... [--nvrtc-opt OPTION] [--render-only] MODEL.nn...
 *
 * Runs the passes for the cuda target, renders the program (all entries) as CUDA C, and
 * compiles it for compute_80, sm_80, compute_90 and sm_90, or for the --arch ones given (CTest
 * runs the architectures as separate tests side by side; the sanitizer build compiles for
 * sm_90 only, since what it instruments is nnc's passes and renderer, not NVRTC).  Any NVRTC error fails the test with
 * NVRTC's log and the generated lines it points at.  A model the front end rejects is skipped
 * (tests/ holds models that are meant to fail); one model per line of output.  --render-only
 * stops after the rendering (the sanitizer build's: what it instruments is nnc's passes and
 * renderer; the normal build's sm_90 compile already makes compute_90's PTX of the same source).
 * --nvrtc-opt passes NVRTC one more option (CTest's compute_XX variants: --Ofast-compile=max). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../codegen/cuda/cuda_backend.h"
#include "../../frontend/frontend.h"

static const char *archs[8] = {"compute_80", "sm_80", "compute_90", "sm_90"};
static size_t narchs = 4;
static bool archs_given;
static const char *nvrtc_opt; /* --nvrtc-opt, or NULL */

static int check_model(const char *path, bool fuse, bool f64) {
    size_t len;
    char *src = read_file(path, &len);
    if (!src) {
        printf("FAIL %s: cannot read\n", path);
        return 1;
    }
    Arena arena = {0};
    FILE *quiet = fopen("/dev/null", "w");
    Diag diag = {.file = path, .src = src, .out = quiet};
    Program p = {0};
    Model *m = nn_load_model(&arena, &diag, path, src, "model");
    int rc = 0;
    if (!m) {
        printf("skip %s: not a valid model (%d errors)\n", path, diag.errors);
        goto out;
    }
    char err[256];
    if (!resolve_train_config(m, &(TrainOverrides){.has_batch = !m->train.present, .batch = 8}, 1, NULL, err,
                              sizeof err)) {
        printf("skip %s: %s\n", path, err);
        goto out;
    }
    p = (Program){.m = m, .g = m->g, .diag = &diag};
    PipelineOpts po = {.target = DEV_CUDA, .fuse = fuse, .verify = true};
    if (!pipeline_run(&p, &po)) {
        printf("skip %s: the passes reject it for cuda\n", path);
        goto out;
    }
    Str cu = {0};
    BuildOpts bo = {.f64 = f64};
    cuda_render(&p, &bo, &cu);
    int kernels = 0;
    for (const char *q = cu.buf; (q = strstr(q, "__global__")); q++) kernels++;
    for (size_t a = 0; a < narchs; a++) {
        char err[16384];
        size_t n = 0;
        char *bin = cuda_nvrtc_compile_with(cu.buf, "model.cu", archs[a], nvrtc_opt, &n, err, sizeof err);
        if (!bin) {
            printf("FAIL %s (%s%s) for %s:\n%s\n", path, fuse ? "fused" : "no-fuse", f64 ? ", f64" : "", archs[a], err);
            rc = 1;
            continue;
        }
        free(bin);
    }
    if (!rc) {
        printf("ok   %s (%s%s): %d kernels, %zu bytes of CUDA, %s", path, fuse ? "fused" : "no-fuse",
               f64 ? ", f64" : "", kernels, cu.len, narchs ? "compiled for" : "rendered (--render-only)");
        for (size_t a = 0; a < narchs; a++) printf(" %s", archs[a]);
        printf(narchs && nvrtc_opt ? " (%s)\n" : "\n", nvrtc_opt);
    }
    str_free(&cu);
out:
    program_free(&p);
    model_free(m);
    fclose(quiet);
    arena_free(&arena);
    free(src);
    return rc;
}

int main(int argc, char **argv) {
    bool fuse = true, f64 = false;
    int fails = 0, models = 0;
    char err[1024];
    bool render_only = false;
    for (int i = 1; i < argc; i++) render_only |= !strcmp(argv[i], "--render-only");
    if (!render_only && !cuda_nvrtc_available(err, sizeof err)) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    if (render_only) narchs = 0, archs_given = true;
    else printf("NVRTC %d.%d\n", cuda_nvrtc_version() / 1000, cuda_nvrtc_version() % 1000 / 10);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--render-only")) continue;
        if (!strcmp(argv[i], "--no-fuse")) fuse = false;
        else if (!strcmp(argv[i], "--f64")) f64 = true;
        else if (!strcmp(argv[i], "--nvrtc-opt") && i + 1 < argc) nvrtc_opt = argv[++i];
        else if (!strcmp(argv[i], "--arch") && i + 1 < argc) {
            if (render_only) {
                i++;
                continue;
            }
            if (!archs_given) narchs = 0;
            archs_given = true;
            if (narchs == NNC_COUNTOF(archs)) {
                fprintf(stderr, "nvrtc_compile: at most %zu --arch\n", NNC_COUNTOF(archs));
                return 2;
            }
            archs[narchs++] = argv[++i];
        }
        else {
            fails += check_model(argv[i], fuse, f64);
            models++;
        }
    }
    printf("%d model%s, %d failed\n", models, models == 1 ? "" : "s", fails);
    return fails ? 1 : 0;
}
