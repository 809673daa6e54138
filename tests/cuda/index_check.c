/* index_check.c - the kernels' own check of labels and embedding indices on the CUDA target.
 *
 *   index_check
 *
 * nnc checks labels and indices as its data loads (train/dataset.c), naming the file and the
 * sample, so the command line never reaches the check inside the kernels; a program feeding a
 * compiled model through the library API (include/nnc.h) does.  Here a label outside the
 * classes and an embedding index outside the table must each stop a train step on the device,
 * naming the value and its position, as on the CPU (tests/numeric/aot_two.c).  Prints one
 * ok/FAIL line per check; without a CUDA device: "SKIP: no CUDA device", exit 77. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnc.h"

static const char model[] =
    "input x: f32[B, 2]\n"
    "input y: i32[B]\n"
    "input t: i32[B, 3]\n"
    "param W: f32[2, 4] = normal(0, 1)\n"
    "param E: f32[5, 4] = normal(0, 1)\n"
    "loss = cross_entropy(x @ W + sum(embedding(t, E), axis = 1), y)\n"
    "train {\n"
    "    data x = randn(8, 2)\n"
    "    data y = randn(8)      # compile-only: the labels are fed below\n"
    "    data t = randn(8, 3)\n"
    "    batch = 8\n"
    "    minimize loss\n"
    "}\n";

static int failed;

/* One train step of m on these labels and indices: its status and message against the wanted. */
static void step(const nnc_model_abi *a, void *m, const int32_t *y, const int32_t *t, const char *want,
                 const char *what) {
    static float x[8 * 2];
    const void *in[] = {x, y, t};
    int rc = a->run(m, NNC_ENTRY_TRAIN, in, 8);
    const char *msg = rc ? a->error(m) : "";
    int ok = want ? rc != 0 && strstr(msg, want) != NULL : rc == 0;
    printf("%s %s: status %d \"%s\"\n", ok ? "ok  " : "FAIL", what, rc, msg);
    failed += !ok;
}

int main(void) {
    char err[16384];
    nnc_options o = nnc_default_options();
    o.target = 1;
    nnc_compiled *c = nnc_compile("index_check.nn", model, &o, err, sizeof err);
    if (!c && strstr(err, "no CUDA")) {
        printf("SKIP: no CUDA device (%s)\n", err);
        return 77;
    }
    if (!c) {
        printf("FAIL compile: %s\n", err);
        return 1;
    }
    const nnc_model_abi *a = nnc_abi(c);
    void *m = nnc_model(c);
    a->init(m, 1);
    int32_t y[8] = {0, 1, 2, 3, 0, 1, 2, 3}, t[8 * 3];
    for (int i = 0; i < 8 * 3; i++) t[i] = i % 5;
    step(a, m, y, t, NULL, "labels and indices in range");
    y[5] = 4;
    step(a, m, y, t, "cross_entropy: label 4 at row 5 is outside [0, 4)", "a label outside the classes");
    y[5] = 1;
    t[7] = 7;
    step(a, m, y, t, "embedding: index 7 at position 7 is outside [0, 5)", "an index outside the table");
    t[7] = 2;
    step(a, m, y, t, NULL, "in range again: the model goes on");
    nnc_free(c);
    printf("%s\n", failed ? "FAIL" : "ok");
    return failed != 0;
}
