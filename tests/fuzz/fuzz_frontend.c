/* fuzz_frontend.c - libFuzzer target for the whole front end and every pass: lexer, parser,
 * elaborator (names, shapes, dtypes), autograd, optimizer, placement and copies (for both
 * targets), fusion, scheduling, memory planning, and C rendering.  Any input must end in
 * diagnostics or a rendered program: never a crash, a hang or an unbounded allocation. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../codegen/codegen.h"
#include "../../frontend/frontend.h"

static void run_once(const char *src, Device target) {
    Arena a = {0};
    FILE *devnull = fopen("/dev/null", "w");
    Diag d = {.file = "fuzz.nn", .src = src, .out = devnull};
    Model *m = nn_load_model(&a, &d, "fuzz.nn", src, "fuzz");
    char err[256];
    if (m && resolve_train_config(m, &(TrainOverrides){0}, 1, NULL, err, sizeof err)) {
        Program p = {.m = m, .g = m->g, .diag = &d};
        PipelineOpts po = {.target = target, .fuse = target == DEV_CPU, .verify = true};
        if (pipeline_run(&p, &po) && target == DEV_CPU) {
            BuildOpts bo = {0};
            Str s = {0};
            backend_cpu.render(&p, &bo, &s);
            str_free(&s);
        }
        program_free(&p);
    }
    model_free(m);
    arena_free(&a);
    if (devnull) fclose(devnull);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536) return 0;
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    if (strlen(src) == size) {   /* the CLI refuses text with NUL bytes before parsing */
        run_once(src, DEV_CPU);
        run_once(src, DEV_CUDA);
    }
    free(src);
    return 0;
}
