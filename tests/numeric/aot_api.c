/* aot_api.c - the ahead-of-time API of models/mlp.nn (mlp.h, libmlp.a) used the way a held-out
 * application uses it, built and run by aot_test.sh:
 *   - mlp_output(m, name) and mlp_loss(m) belong to the call that last succeeded, for each of
 *     the three entries (train_step, grad, eval), whatever ran before it;
 *   - every public function (and the ABI table's) takes NULL arguments without crashing and
 *     says which one;
 *   - no entry runs before mlp_init (5); a NaN or an infinity in train_step's input is refused
 *     (6) and leaves the parameters and the step count alone; create_in checks its size.
 * Prints "ok"/"FAIL" per check and exits non-zero on a failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

#define N 64

static int failed, passed;

static void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (ok) passed++;
    else failed++;
}

/* Ten class prototypes plus noise (as aot_app.c); `shift` makes a second, different set. */
static void make_data(float *x, int32_t *y, uint64_t s, int shift) {
    for (int i = 0; i < N; i++) {
        y[i] = (i + shift) % 10;
        for (int j = 0; j < 784; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            float u = (float)(s >> 40) / (float)(1 << 24);
            x[i * 784 + j] = 0.5f * u + ((j % 10) == (i % 10) ? 0.5f : 0.0f);
        }
    }
}

static float out_loss(mlp_t *m) {
    const float *p = mlp_output(m, "loss");
    return p ? *p : NAN;
}

static void check_entries(void) {
    static float x[N * 784], x2[N * 784];
    static int32_t y[N], y2[N];
    make_data(x, y, 12345, 0);
    make_data(x2, y2, 777, 3);
    mlp_t *m = mlp_create();
    mlp_init(m, 42);
    check(isnan(mlp_loss(m)) && mlp_output(m, "loss") == NULL, "before any call: no loss, no outputs");
    /* L(theta0) on both sets: eval is forward only, so the train step's loss must equal it */
    mlp_eval(m, x, y, N);
    float l0 = mlp_loss(m);
    check(l0 == out_loss(m) && mlp_output(m, "accuracy") != NULL, "eval: loss() == output(\"loss\"), accuracy is an output");
    mlp_eval(m, x2, y2, N);
    float l0b = mlp_loss(m);
    check(l0b != l0, "eval on the second set gives another loss");
    if (mlp_train_step(m, x, y, N) != 0) check(0, mlp_error_message(m));
    check(mlp_loss(m) == l0, "train_step after eval: loss() is the step's loss, not eval's");
    check(out_loss(m) == l0, "train_step after eval: output(\"loss\") is the step's loss");
    check(mlp_output(m, "accuracy") == NULL && strstr(mlp_error_message(m), "not an output of mlp_train_step"),
          "train_step: accuracy is not its output (NULL, and the message says so)");
    mlp_eval(m, x, y, N);
    float l1 = mlp_loss(m);
    check(l1 < l0 && out_loss(m) == l1, "eval after train_step: loss() and output(\"loss\") are eval's");
    mlp_eval(m, x2, y2, N);
    float l1b = mlp_loss(m);
    mlp_eval(m, x, y, N);
    if (mlp_grad(m, x2, y2, N) != 0) check(0, mlp_error_message(m));
    check(mlp_loss(m) == l1b && out_loss(m) == l1b, "grad after eval: loss() and output(\"loss\") are grad's");
    check(mlp_output(m, "grad.fc1.weight") != NULL && mlp_output(m, "accuracy") == NULL,
          "grad: grad.fc1.weight is an output, accuracy is not");
    if (mlp_train_step(m, x2, y2, N) != 0) check(0, mlp_error_message(m));
    check(mlp_loss(m) == l1b, "train_step after grad: the step's loss (grad does not update)");
    y[5] = 99;   /* a failed call leaves no current outputs */
    check(mlp_eval(m, x, y, N) == 1 && isnan(mlp_loss(m)) && mlp_output(m, "loss") == NULL,
          "a failed eval (label 99): return 1, no loss, no outputs");
    mlp_free(m);
}

static void check_nulls(void) {
    static float x[N * 784];
    static int32_t y[N];
    make_data(x, y, 12345, 0);
    int64_t numel = 7;
    mlp_free(NULL);
    check(mlp_init(NULL, 1) == 4, "init(NULL) returns 4");
    check(mlp_train_step(NULL, x, y, N) == 4 && mlp_grad(NULL, x, y, N) == 4 && mlp_eval(NULL, x, y, N) == 4,
          "train_step/grad/eval(NULL model) return 4");
    check(isnan(mlp_loss(NULL)) && mlp_output(NULL, "loss") == NULL && mlp_param(NULL, "fc1.bias", &numel) == NULL &&
          numel == 0, "loss/output/param of a NULL model: NAN, NULL, numel 0");
    check(mlp_error_message(NULL) != NULL, "error_message(NULL) is a message");
    const nnc_model_abi *abi = mlp_abi();
    abi->init(NULL, 1);
    abi->set_step(NULL, 3);
    abi->destroy(NULL);
    check(abi->run(NULL, 0, NULL, N) == 4 && abi->output(NULL, 0, 0) == NULL && abi->param(NULL, 0) == NULL &&
          abi->state(NULL, 0) == NULL && abi->get_step(NULL) == 0 && abi->error(NULL) != NULL,
          "the ABI table's functions take a NULL model");
    mlp_t *m = mlp_create();
    mlp_init(m, 1);
    check(abi->run(m, 2, NULL, N) == 4 && strstr(mlp_error_message(m), "input 'x' is NULL"),
          "abi->run(m, eval, NULL inputs): 4");
    check(mlp_train_step(m, NULL, y, N) == 4 && strstr(mlp_error_message(m), "input 'x' is NULL"),
          "train_step(m, NULL, y): 4, 'input 'x' is NULL'");
    check(mlp_eval(m, x, NULL, N) == 4 && strstr(mlp_error_message(m), "input 'y' is NULL"),
          "eval(m, x, NULL): 4, 'input 'y' is NULL'");
    check(mlp_grad(m, NULL, NULL, N) == 4, "grad(m, NULL, NULL): 4");
    check(mlp_output(m, NULL) == NULL && strstr(mlp_error_message(m), "name is NULL"), "output(m, NULL): NULL");
    check(mlp_param(m, NULL, NULL) == NULL && strstr(mlp_error_message(m), "name is NULL"), "param(m, NULL): NULL");
    check(mlp_param(m, "nope", &numel) == NULL && numel == 0 && strstr(mlp_error_message(m), "no parameter named 'nope'"),
          "param(m, \"nope\"): NULL, numel 0, named in the message");
    check(mlp_param(m, "fc1.bias", NULL) != NULL && mlp_param(m, "fc2.bias", &numel) != NULL && numel == 10,
          "param with and without numel");
    mlp_free(m);
}

/* Every parameter's bytes, to see that a refused call changed none of them. */
static size_t params_copy(mlp_t *m, unsigned char *to) {
    size_t at = 0;
    for (int i = 0; i < mlp_abi()->nparams; i++) {
        int64_t numel = 0;
        const float *p = mlp_param(m, mlp_abi()->params[i].name, &numel);
        if (to) memcpy(to + at, p, (size_t)numel * sizeof *p);
        at += (size_t)numel * sizeof *p;
    }
    return at;
}

/* Before init there is nothing to train: every entry refuses (5), and the weights stay zeros. */
static void check_before_init(void) {
    static float x[N * 784];
    static int32_t y[N];
    make_data(x, y, 12345, 0);
    mlp_t *m = mlp_create();
    check(mlp_train_step(m, x, y, N) == 5 && strstr(mlp_error_message(m), "mlp_train_step: the parameters are not "
                                                                            "initialised: call mlp_init(m, seed)"),
          "train_step before init: 5, and the message says to call mlp_init");
    check(mlp_eval(m, x, y, N) == 5 && mlp_grad(m, x, y, N) == 5 && mlp_abi()->get_step(m) == 0,
          "eval and grad before init: 5, no step taken");
    int64_t numel = 0;
    const float *w = mlp_param(m, "fc1.weight", &numel);
    check(w && w[0] == 0 && w[numel - 1] == 0, "before init the weights are untouched zeros");
    check(mlp_init(m, 3) == 0 && mlp_train_step(m, x, y, N) == 0 && w[0] != 0, "after init the step runs");
    mlp_free(m);
}

/* A NaN or an infinity in an input: train_step refuses (6), names the input and the element,
 * and leaves the weights, the optimizer state and the step count as they were. */
static void check_nonfinite_inputs(void) {
    static float x[N * 784];
    static int32_t y[N];
    static unsigned char before[1 << 20], after[1 << 20];
    make_data(x, y, 12345, 0);
    mlp_t *m = mlp_create();
    mlp_init(m, 1);
    if (mlp_train_step(m, x, y, N) != 0) check(0, mlp_error_message(m));
    size_t bytes = params_copy(m, NULL);
    check(bytes <= sizeof before, "the parameters fit the test's buffer");
    params_copy(m, before);
    x[2 * 784 + 5] = NAN;
    check(mlp_train_step(m, x, y, N) == 6 && strstr(mlp_error_message(m), "mlp_train_step: input 'x' holds a NaN at "
                                                                            "element 1573 (row 2)"),
          "a NaN in x: 6, naming the input, the element and the row");
    params_copy(m, after);
    check(!memcmp(before, after, bytes) && mlp_abi()->get_step(m) == 1 && isnan(mlp_loss(m)),
          "after the refused step: the same parameters, the same step count, no loss");
    x[2 * 784 + 5] = 0.5f;
    x[N * 784 - 1] = -INFINITY;
    check(mlp_train_step(m, x, y, N) == 6 &&
              strstr(mlp_error_message(m), "holds an infinity at element 50175 (row 63)"),
          "an infinity in the last element: 6");
    x[N * 784 - 1] = 0.5f;
    check(mlp_train_step(m, x, y, N) == 0 && mlp_abi()->get_step(m) == 2, "finite inputs again: the step runs");
    mlp_free(m);
}

/* create_in(mem, bytes): the caller's memory, checked against what the model needs. */
static void check_create_in(void) {
    size_t need = mlp_memory_bytes();
    unsigned char *mem = aligned_alloc(64, (need + 64 + 63) / 64 * 64);
    check(mlp_create_in(NULL, need) == NULL, "create_in(NULL, bytes): NULL");
    check(mlp_create_in(mem, need - 1) == NULL, "create_in(mem, memory_bytes() - 1): NULL, too small");
    check(mlp_create_in(mem + 1, need) == NULL, "create_in(misaligned): NULL");
    check(strstr(mlp_error_message(NULL), "smaller than memory_bytes()") != NULL, "error_message(NULL) says why");
    mlp_t *m = mlp_create_in(mem, need);
    int64_t numel = 0;
    check(m && mlp_init(m, 1) == 0 && (unsigned char *)mlp_param(m, "fc1.weight", &numel) >= mem &&
              (unsigned char *)mlp_param(m, "fc1.weight", &numel) < mem + need,
          "create_in(mem, memory_bytes()): the parameters live in mem");
    mlp_free(m);
    free(mem);
}

/* What mlp.h says about n and accuracy: "accuracy" after eval counts the batch's right rows (a
 * whole number from 0 to n, not a fraction), and n above the compiled batch returns 2. */
static void check_header_promises(void) {
    static float x[(N + 1) * 784];
    static int32_t y[N + 1];
    make_data(x, y, 4242, 0);
    mlp_t *m = mlp_create();
    mlp_init(m, 42);
    for (int s = 0; s < 50; s++) mlp_train_step(m, x, y, N); /* the prototypes are easy to learn */
    mlp_eval(m, x, y, N);
    float all = *mlp_output(m, "accuracy");
    mlp_eval(m, x, y, 10);
    float ten = *mlp_output(m, "accuracy");
    check(all == floorf(all) && all > 1 && all <= N && ten == floorf(ten) && ten <= 10,
          "eval: accuracy is a count of the batch's rows, 0 to n (not a fraction)");
    check(mlp_eval(m, x, y, N + 1) == 2 && mlp_train_step(m, x, y, N + 1) == 2,
          "a batch above the compiled one returns 2 (the header says at most N)");
    mlp_free(m);
}

int main(void) {
    check_entries();
    check_nulls();
    check_before_init();
    check_nonfinite_inputs();
    check_create_in();
    check_header_promises();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
