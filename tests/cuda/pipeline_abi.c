/* pipeline_abi.c - the model ABI's pipelined calls (input_buffer, submit, finish) on the CUDA
 * target, against run() on a second instance of the same model.
 *
 *   pipeline_abi
 *
 * Each batch is queued before the previous call is waited for, as nnc's trainer does; every
 * call's loss and gradient norm (an output the copies pass leaves in device memory) must equal
 * run()'s bit for bit, and so must the parameters at the end.  Also: a batch gathered in the
 * caller's own memory is copied at submit (the caller may overwrite it at once); a bad label in
 * the queued call is reported by its finish, after the call before it finished with its own
 * outputs; the ring refuses a third call in flight, finish refuses when none is; run() between
 * a submit and its finish waits for it and leaves its outputs to its finish; the CPU target has
 * no pipelined calls.  Kept inputs (keep, submit_rows): the same steps with the whole data kept
 * on the device and each call's rows given by their starts equal run()'s bit for bit too, rows
 * in another order than the data's give what run() gives on that order, and keep's and
 * submit_rows' refusals (a type the input does not take, no room, an input not kept, a start past
 * the kept values) name their cause.  Prints one ok/FAIL line per check; without a CUDA device: exit 77. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnc.h"

static const char model[] = "input x: f32[B, 6]\n"
                            "input y: i32[B]\n"
                            "param w: f32[6, 5] = normal(0, 1)\n"
                            "param b: f32[5] = zeros()\n"
                            "loss = cross_entropy(tanh(x @ w) * 3 + b, y)\n"
                            "train {\n"
                            "    data x = randn(8, 6)\n"
                            "    data y = randn(8)      # compile-only: the labels are fed below\n"
                            "    batch = 8\n"
                            "    optimizer = sgd(lr = 0.5, momentum = 0.9)\n"
                            "    clip_grad_norm = 0.5\n"
                            "    minimize loss\n"
                            "}\n";

enum { STEPS = 12, B = 8 };
static int failed;

static void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failed += !ok;
}

static nnc_compiled *compile(int target, char *err, size_t n) {
    nnc_options o = nnc_default_options();
    o.target = target;
    return nnc_compile("pipeline_abi.nn", model, &o, err, n);
}

/* Batch k: x and y made from k alone (the last batch short, as an epoch's last). */
static int64_t batch(int k, float *x, int32_t *y) {
    for (int i = 0; i < B * 6; i++) x[i] = (float)sin(0.37 * (k * B * 6 + i));
    for (int i = 0; i < B; i++) y[i] = (k * 3 + i) % 5;
    return k == STEPS - 1 ? 5 : B;
}

static int out_index(const nnc_model_abi *a, const char *name) {
    for (int k = 0; k < a->noutputs[NNC_ENTRY_TRAIN]; k++)
        if (!strcmp(a->outputs[NNC_ENTRY_TRAIN][k].name, name)) return k;
    return -1;
}

/* The loss and grad_norm of the call whose outputs are current. */
static void outputs(const nnc_model_abi *a, void *m, float v[2]) {
    const float *l = a->output(m, NNC_ENTRY_TRAIN, 0), *g = a->output(m, NNC_ENTRY_TRAIN, out_index(a, "grad_norm"));
    v[0] = l ? *l : NAN;
    v[1] = g ? *g : NAN;
}

/* STEPS train steps through run(): each one's loss and grad_norm. */
static void by_run(const nnc_model_abi *a, void *m, float ref[STEPS][2]) {
    static float x[B * 6];
    static int32_t y[B];
    for (int k = 0; k < STEPS; k++) {
        int64_t rows = batch(k, x, y);
        const void *in[] = {x, y};
        if (a->run(m, NNC_ENTRY_TRAIN, in, rows)) printf("run: %s\n", a->error(m));
        outputs(a, m, ref[k]);
    }
}

/* The same steps pipelined: batch k + 1 gathered into the ring and queued before call k is
 * finished (even batches straight into the ring, odd ones in the caller's memory, overwritten
 * once submitted). */
static void by_submit(const nnc_model_abi *a, void *m, float got[STEPS][2]) {
    static float x[B * 6];
    static int32_t y[B];
    int ok = 1;
    for (int k = 0; k <= STEPS; k++) {
        if (k < STEPS) {
            float *rx = a->input_buffer(m, 0);
            int32_t *ry = a->input_buffer(m, 1);
            int mine = k % 2 || !rx || !ry;
            int64_t rows = mine ? batch(k, x, y) : batch(k, rx, ry);
            const void *in[] = {mine ? (void *)x : rx, mine ? (void *)y : ry};
            ok &= a->submit(m, NNC_ENTRY_TRAIN, in, rows) == 0;
            memset(x, 0xff, sizeof x); /* the caller's memory is free once submit returns */
        }
        if (k > 0) {
            ok &= a->finish(m) == 0;
            outputs(a, m, got[k - 1]);
        }
    }
    check(ok, "every submit and finish succeeded");
}

/* The same steps from the whole data kept on the device (STEPS * B rows, the last batch short),
 * each call given its rows' starts (the caller's arrays overwritten once submitted). */
static void by_rows(const nnc_model_abi *a, void *m, float got[STEPS][2]) {
    static float X[STEPS * B * 6];
    static int32_t Y[STEPS * B];
    for (int k = 0; k < STEPS; k++) batch(k, X + k * B * 6, Y + k * B);
    int ok = a->keep(m, 0, X, STEPS * B * 6, NNC_TYPE_F32, 1, 1) == 0 &&
        a->keep(m, 1, Y, STEPS * B, NNC_TYPE_I32, 1, 1) == 0;
    check(ok, "keep() takes the whole data");
    int64_t sx[B], sy[B];
    for (int k = 0; k <= STEPS; k++) {
        if (k < STEPS) {
            int64_t rows = k == STEPS - 1 ? 5 : B;
            for (int r = 0; r < rows; r++) sx[r] = (int64_t)(k * B + r) * 6, sy[r] = k * B + r;
            const int64_t *st[] = {sx, sy};
            ok &= a->submit_rows(m, NNC_ENTRY_TRAIN, st, rows) == 0;
            memset(sx, 0xff, sizeof sx);
        }
        if (k > 0) {
            ok &= a->finish(m) == 0;
            outputs(a, m, got[k - 1]);
        }
    }
    check(ok, "every submit_rows and finish succeeded");
}

/* Rows in another order than the data's: eval's loss as run() gives it on the rows so ordered;
 * then the refusals. */
static void rows_edges(const nnc_model_abi *a, void *m, void *never_kept) {
    static float x[B * 6], X[B * 6];
    static int32_t y[B], Y[B];
    batch(3, X, Y);
    int64_t sx[B], sy[B];
    for (int r = 0; r < B; r++) {
        int from = (r * 3 + 1) % 5; /* rows 0..4, some twice: no reordering of the same rows */
        memcpy(x + r * 6, X + from * 6, 6 * sizeof(float));
        y[r] = Y[from], sx[r] = (int64_t)from * 6, sy[r] = from;
    }
    const void *in[] = {x, y};
    const int64_t *st[] = {sx, sy};
    int rc = a->keep(m, 0, X, B * 6, NNC_TYPE_F32, 1, 0) | a->keep(m, 1, Y, B, NNC_TYPE_I32, 1, 0);
    rc |= a->run(m, NNC_ENTRY_EVAL, in, B);
    const float *l = a->output(m, NNC_ENTRY_EVAL, 0);
    float want = l ? *l : NAN;
    rc |= a->submit_rows(m, NNC_ENTRY_EVAL, st, B) | a->finish(m);
    l = a->output(m, NNC_ENTRY_EVAL, 0);
    check(rc == 0 && l && memcmp(l, &want, sizeof want) == 0, "rows out of the data's order: eval's loss as run()'s");
    static float X2[B * 6];
    for (int e = 0; e < B * 6; e++) X2[e] = X[e], X[e] *= 0.5f; /* the kept values changed: kept again */
    rc = a->keep(m, 0, X, B * 6, NNC_TYPE_F32, 1, 0) | a->submit_rows(m, NNC_ENTRY_EVAL, st, B) | a->finish(m);
    l = a->output(m, NNC_ENTRY_EVAL, 0);
    check(rc == 0 && l && memcmp(l, &want, sizeof want) != 0, "the same pointer kept again: its new values");
    for (int e = 0; e < B * 6; e++) X[e] = X2[e];
    rc = a->keep(m, 0, X, B * 6, NNC_TYPE_F32, 1, 0) | a->submit_rows(m, NNC_ENTRY_EVAL, st, B) | a->finish(m);
    l = a->output(m, NNC_ENTRY_EVAL, 0);
    check(rc == 0 && l && memcmp(l, &want, sizeof want) == 0, "... and its old ones again");
    rc = a->keep(m, 1, Y, B, NNC_TYPE_U8, 1, 0);
    check(rc == 6 && strstr(a->error(m), "input 'y' takes i32: keep i32 values"),
          "keep refuses bytes for an i32 input");
    rc = a->keep(m, 0, X, (int64_t)1 << 50, NNC_TYPE_U8, 1, 1);
    check(rc == 7 && strstr(a->error(m), "more than a quarter of the"),
          "keep(if_room) refuses a copy that does not fit");
    rc = a->submit_rows(m, NNC_ENTRY_EVAL, st, B) | a->finish(m);
    l = a->output(m, NNC_ENTRY_EVAL, 0);
    check(rc == 0 && l && memcmp(l, &want, sizeof want) == 0, "a refused keep leaves the earlier copy kept");
    sx[4] = 42; /* the last row's start: its 6 values are the last kept */
    sx[5] = 43;
    rc = a->submit_rows(m, NNC_ENTRY_EVAL, st, B);
    check(rc == 6 && strstr(a->error(m), "row 5 of input 'x' starts at 43: its 48 values leave starts in [0, 42]"),
          "submit_rows refuses a start past the kept values");
    rc = a->submit_rows(never_kept, NNC_ENTRY_EVAL, st, B);
    check(rc == 4 && strstr(a->error(never_kept), "input 'x' is not kept"), "submit_rows refuses an input not kept");
    rc = a->keep(m, 0, NULL, 0, 0, 0, 0);
    rc |= a->submit_rows(m, NNC_ENTRY_EVAL, st, B);
    check(rc == 4 && strstr(a->error(m), "input 'x' is not kept"), "keep(NULL) lets an input go");
}

static int same_params(const nnc_model_abi *a, void *m1, void *m2) {
    a->sync(m1, NNC_SYNC_TO_HOST);
    a->sync(m2, NNC_SYNC_TO_HOST);
    for (int i = 0; i < a->nparams; i++)
        if (memcmp(a->param(m1, i), a->param(m2, i), nnc_tensor_bytes(&a->params[i]))) return 0;
    return 1;
}

/* The ring's and finish's refusals, a bad label in the queued call, run() in between. */
static void edges(const nnc_model_abi *a, void *m) {
    static float x[B * 6];
    static int32_t y[B];
    batch(0, x, y);
    const void *in[] = {x, y};
    int rc = a->finish(m);
    check(rc != 0 && strstr(a->error(m), "no call is in flight"), "finish with nothing in flight is refused");
    a->submit(m, NNC_ENTRY_TRAIN, in, B);
    y[5] = 7;
    a->submit(m, NNC_ENTRY_TRAIN, in, B);
    y[5] = 0;
    check(a->input_buffer(m, 0) == NULL, "no input buffer while two calls are in flight");
    rc = a->submit(m, NNC_ENTRY_TRAIN, in, B);
    check(rc != 0 && strstr(a->error(m), "2 calls are in flight already"), "a third call in flight is refused");
    float v[2];
    rc = a->finish(m);
    outputs(a, m, v);
    check(rc == 0 && isfinite(v[0]), "the call before a bad label finishes with its own loss");
    rc = a->finish(m);
    check(rc == 1 && strstr(a->error(m), "cross_entropy: label 7 at row 5 is outside [0, 5)"),
          "the queued call's bad label is reported by its finish");
    rc = a->submit(m, NNC_ENTRY_TRAIN, in, B);
    float r[2];
    int rr = a->run(m, NNC_ENTRY_TRAIN, in, B);
    outputs(a, m, r);
    int64_t step = a->get_step(m);
    rc |= a->finish(m);
    outputs(a, m, v);
    check(rc == 0 && rr == 0 && step == a->get_step(m) && v[0] != r[0],
          "run() between a submit and its finish: each call keeps its own loss");
}

int main(void) {
    char err[16384];
    nnc_compiled *c1 = compile(1, err, sizeof err);
    if (!c1 && strstr(err, "no CUDA")) {
        printf("SKIP: no CUDA device (%s)\n", err);
        return 77;
    }
    nnc_compiled *c2 = c1 ? compile(1, err, sizeof err) : NULL, *cpu = c2 ? compile(0, err, sizeof err) : NULL;
    if (!cpu) {
        printf("FAIL compile: %s\n", err);
        return 1;
    }
    const nnc_model_abi *a = nnc_abi(c1);
    check(a->submit && a->finish && a->input_buffer && out_index(a, "grad_norm") > 0, "the CUDA model pipelines");
    check(!nnc_abi(cpu)->submit && !nnc_abi(cpu)->finish && !nnc_abi(cpu)->input_buffer, "the CPU model does not");
    float ref[STEPS][2], got[STEPS][2], kept[STEPS][2];
    nnc_compiled *c3 = compile(1, err, sizeof err);
    if (!c3) {
        printf("FAIL compile: %s\n", err);
        return 1;
    }
    check(!nnc_abi(cpu)->keep && !nnc_abi(cpu)->submit_rows, "the CPU model keeps no inputs");
    by_run(a, nnc_model(c1), ref);
    by_submit(a, nnc_model(c2), got);
    by_rows(a, nnc_model(c3), kept);
    int same = 1;
    for (int k = 0; k < STEPS; k++) {
        same &= memcmp(ref[k], got[k], sizeof ref[k]) == 0;
        if (memcmp(ref[k], got[k], sizeof ref[k]))
            printf("  step %d: run %.9g %.9g, submit %.9g %.9g\n", k + 1, ref[k][0], ref[k][1], got[k][0], got[k][1]);
    }
    check(same, "every step's loss and grad_norm equal run()'s, bit for bit");
    check(!memcmp(ref, kept, sizeof ref), "... and from kept inputs, by their rows' starts");
    check(same_params(a, nnc_model(c1), nnc_model(c3)), "... the parameters too");
    rows_edges(a, nnc_model(c3), nnc_model(c1));
    check(a->get_step(nnc_model(c1)) == STEPS && a->get_step(nnc_model(c2)) == STEPS, "both took every step");
    check(same_params(a, nnc_model(c1), nnc_model(c2)), "the parameters equal run()'s, bit for bit");
    edges(a, nnc_model(c2));
    nnc_free(c1);
    nnc_free(c2);
    nnc_free(c3);
    nnc_free(cpu);
    printf("%s\n", failed ? "FAIL" : "ok");
    return failed != 0;
}
