/* aot_two.c - two models compiled ahead of time (models/mlp.nn and models/linreg.nn) in one
 * program, built and run by aot_two_test.sh: each library carries its own copy of the runtime
 * (include/nnc_runtime.h, all static), so they link side by side and each instance runs with
 * its own description.  Prints "ok"/"FAIL" per check and exits non-zero on a failure. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "linreg.h"
#include "linsched.h"
#include "mlp.h"

static int failed, passed;

static void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (ok) passed++;
    else failed++;
}

int main(void) {
    static float x[64 * 784], X[100 * 10], y[100];
    static int32_t labels[64];
    for (int i = 0; i < 64 * 784; i++) x[i] = (float)(i % 7) / 7.0f;
    for (int i = 0; i < 64; i++) labels[i] = i % 10;
    for (int i = 0; i < 100 * 10; i++) X[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < 100; i++) y[i] = (float)(i % 5) - 2.0f;
    mlp_t *a = mlp_create();
    linreg_t *b = linreg_create();
    mlp_init(a, 1);
    linreg_init(b, 1);
    check(!strcmp(mlp_abi()->name, "mlp") && !strcmp(linreg_abi()->name, "linreg") &&
          mlp_abi()->nparams == 4 && linreg_abi()->nparams == 1, "each library's ABI table is its own");
    check(mlp_memory_bytes() != linreg_memory_bytes(), "each library's sizes are its own");
    float la0 = NAN, lb0 = NAN, la = NAN, lb = NAN;
    for (int s = 0; s < 5; s++) {
        check(mlp_train_step(a, x, labels, 64) == 0 && linreg_train_step(b, X, y, 100) == 0, "a train step of each");
        la = mlp_loss(a);
        lb = linreg_loss(b);
        if (s == 0) la0 = la, lb0 = lb;
    }
    check(la < la0 && lb < lb0, "both losses go down");
    check(linreg_eval(b, X, NULL, 100) == 4 && strstr(linreg_error_message(b), "linreg_eval: input 'y' is NULL") &&
          mlp_eval(a, x, labels, 65) == 2 && strstr(mlp_error_message(a), "outside [1, 64]"),
          "each instance reports its own errors with its own name");
    int64_t n = 0;
    check(linreg_param(b, "W", &n) && n == 10 && !mlp_param(a, "W", &n), "parameters by name, per model");
    /* a model built with an lr_schedule keeps its rate as state: set_lr(0) freezes it */
    linsched_t *c = linsched_create();
    linsched_init(c, 1);
    const float *lr = linsched_abi()->state(c, 0);
    check(!strcmp(linsched_abi()->states[0].name, "lr") && lr && *lr == 0.01f, "the scheduled rate is state 'lr', from the optimizer's");
    float *w = linsched_param(c, "W", &n), w0 = w[3];
    check(linsched_set_lr(c, 0) == 0 && *lr == 0 && linsched_train_step(c, X, y, 100) == 0 && w[3] == w0,
          "set_lr(0): a step leaves the weights alone");
    check(linsched_set_lr(c, 0.05) == 0 && *lr == 0.05f && linsched_train_step(c, X, y, 100) == 0 && w[3] != w0,
          "set_lr(0.05): the next step moves them");
    check(linsched_set_lr(c, -1) == 6 && strstr(linsched_error_message(c), "the rate -1 is not a finite number") &&
          linsched_set_lr(c, NAN) == 6 && linsched_set_lr(c, INFINITY) == 6 && *lr == 0.05f,
          "set_lr refuses a negative, NaN or infinite rate: 6 (a value out of range), the rate unchanged");
    check(linsched_set_lr(NULL, 0.1) == 4, "set_lr(NULL, ...): 4 (a NULL argument)");
    check(linsched_abi()->set_lr(c, 0.02) == 0 && *lr == 0.02f && linsched_abi()->set_lr(c, -2) == 6 && *lr == 0.02f &&
              linreg_abi()->set_lr(b, 0.1) == 3,
          "the ABI's set_lr is the typed API's: the rate, 6 for a bad one, 3 for a rate compiled in");
    check(linreg_set_lr(b, 0.1) == 3 && strstr(linreg_error_message(b), "lr_schedule"),
          "set_lr on a model whose rate is compiled in: 3 (no such thing), and says how to make it settable");
    /* nnc checks labels as its data loads; a program feeding the library has the kernels' check */
    labels[3] = 10;
    check(mlp_train_step(a, x, labels, 64) == 1 &&
          strstr(mlp_error_message(a), "cross_entropy: label 10 at row 3 is outside [0, 10)"),
          "a label outside the classes stops the step, naming it and its row");
    labels[3] = 3;
    linsched_free(c);
    mlp_free(a);
    linreg_free(b);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
