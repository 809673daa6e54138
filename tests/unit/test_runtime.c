/*
 * test_runtime.c - include/nnc_runtime.h over a hand-written description and fake devices, with
 * no compiler in the loop: the checks and messages every model's ABI shares (batch bound, missing
 * entry, NULL inputs and names, no call before init, non-finite inputs of the typed API, create_in's
 * size), Philox initialisation, outputs "of the call that last
 * succeeded", and a device that keeps activations in its own memory (outputs copied to the host
 * once per call).  The runtime is pasted into generated code, so this file is compiled with
 * -Wpedantic -Wconversion -Wshadow -Werror (tests/unit/CMakeLists.txt).
 *
 * The toy model: input x f32[B, 2]; parameter w f32[2] = uniform(-1, 1); state w.m f32[2];
 * train_step (loss), no grad, eval (loss and out = x * w).  Its "kernels" live in toy_run.
 */
#define _XOPEN_SOURCE 700   /* nftw, for check.h */
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "nnc_abi.h"
#include "nnc_rng.h"
#define NNC_RUNTIME_IMPLEMENTATION
#include "nnc_runtime.h"

static const nnc_tensor_info toy_inputs[] = {{"x", NNC_TYPE_F32, 2, {-1, 2}, NNC_ROLE_NONE}, {0}};
static const nnc_tensor_info toy_params[] = {{"w", NNC_TYPE_F32, 1, {2}, NNC_ROLE_NONE}, {0}};
static const nnc_tensor_info toy_states[] = {{"w.m", NNC_TYPE_F32, 1, {2}, NNC_ROLE_NONE}, {0}};
static const nnc_leaf_desc toy_param_leaves[] = {{0, NNC_INIT_UNIFORM, -1, 1}, {0}};
static const nnc_leaf_desc toy_state_leaves[] = {{0, NNC_INIT_ZEROS, 0, 0}, {0}};
static const nnc_tensor_info toy_train_outputs[] = {{"loss", NNC_TYPE_F32, 0, {0}, NNC_ROLE_LOSS}, {0}};
static const nnc_tensor_info toy_eval_outputs[] = {
    {"loss", NNC_TYPE_F32, 0, {0}, NNC_ROLE_LOSS}, {"out", NNC_TYPE_F32, 2, {-1, 2}, NNC_ROLE_NONE}, {0}};
static const nnc_place toy_train_places[] = {{NNC_BLOCK_ACT, 0}, {0}};
static const nnc_place toy_eval_places[] = {{NNC_BLOCK_ACT, 0}, {NNC_BLOCK_ACT, 64}, {0}};
static const unsigned char toy_reads[] = {1, 0};
static const unsigned char toy_none[] = {0, 0};

static void *toy_create(void *mem);

#define TOY_BATCH 4
static const nnc_model_desc toy_desc = {
    .abi = {.abi_version = NNC_ABI_VERSION, .name = "toy", .real_bytes = 4, .batch_max = TOY_BATCH,
            .ninputs = 1, .nparams = 1, .nstates = 1,
            .inputs = toy_inputs, .params = toy_params, .states = toy_states,
            .noutputs = {1, 0, 2}, .outputs = {toy_train_outputs, NULL, toy_eval_outputs},
            .param_bytes = 8, .state_bytes = 8, .act_bytes = 96,
            NNC_RT_ABI_FUNCTIONS(toy_create)},
    .block_bytes = {8, 8, 96, 0},
    .param = toy_param_leaves, .state = toy_state_leaves,
    .entry = {{"train_step", 1, 1, toy_reads, toy_train_places},
              {"grad", 0, 0, toy_none, NULL},
              {"eval", 1, 0, toy_reads, toy_eval_places}},
};

/* The device's activations: the runtime's host block (CPU-like) or its own (device-like). */
static float *toy_act(nnc_rt *rt) {
    return rt->host[NNC_BLOCK_ACT] ? (float *)(void *)rt->host[NNC_BLOCK_ACT] : (float *)rt->dev;
}

/* loss = sum(x * w) (a negative x[0] fails the "label check"); eval also writes out = x * w. */
static int toy_run(nnc_rt *rt, int entry, const void *const *in, int64_t batch) {
    const float *x = in[0], *w = (const float *)(void *)rt->host[NNC_BLOCK_PARAMS];
    float *act = toy_act(rt);
    if (x[0] < 0) return nnc_rt_fail(rt, NNC_STATUS_CHECK, "toy: x[0] is negative");
    act[0] = 0;
    for (int64_t i = 0; i < batch * 2; i++) {
        act[0] += x[i] * w[i % 2];
        if (entry == NNC_ENTRY_EVAL) act[16 + i] = x[i] * w[i % 2];
    }
    return 0;
}

static const nnc_device_ops toy_cpu = NNC_RT_CPU_DEVICE(toy_run);

static void *toy_create(void *mem) { return nnc_rt_create(&toy_desc, &toy_cpu, mem); }

/* A device that keeps the activation block in its own memory (rt->dev) and counts copies. */
static int toy_copies;

static int toy_copy(nnc_rt *rt, int block, int64_t offset, void *host, size_t bytes, int direction) {
    if (block != NNC_BLOCK_ACT || direction != NNC_SYNC_TO_HOST) return nnc_rt_fail(rt, NNC_STATUS_ARG, "toy: bad copy");
    memcpy(host, (char *)rt->dev + offset, bytes);
    toy_copies++;
    return 0;
}

static const nnc_device_ops toy_device = {.name = "toy", .device_blocks = 1u << NNC_BLOCK_ACT,
                                          .host_alloc = nnc_rt_host_alloc, .host_free = nnc_rt_host_free,
                                          .copy = toy_copy, .run = toy_run};

static void check_calls(void) {
    float x[TOY_BATCH * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
    const void *in[] = {x}, *none[] = {NULL};
    nnc_rt *rt = toy_create(NULL);
    nnc_rt_init(rt, 7);
    const float *w = nnc_rt_param(rt, 0);
    CHECK(w[1] == (float)(-1 + 2 * nnc_rng_uniform(7, nnc_rng_hash("w"), 1)), "init: w from Philox, stream hash(\"w\")");
    CHECK(isnan(nnc_rt_loss(rt)) && !nnc_rt_output_named(rt, "loss") && strstr(nnc_rt_error(rt), "no train_step"),
          "before any call: no loss, no outputs (\"%s\")", nnc_rt_error(rt));
    CHECK(nnc_rt_run(rt, 0, in, 0) == 2 && strstr(nnc_rt_error(rt), "batch of 0 rows is outside [1, 4]"), "batch 0: 2");
    CHECK(nnc_rt_run(rt, 0, in, 5) == 2, "batch 5 > batch_max: 2");
    CHECK(nnc_rt_run(rt, 1, in, 1) == 3 && strstr(nnc_rt_error(rt), "no such entry"), "grad, absent: 3");
    CHECK(nnc_rt_run(rt, 7, in, 1) == 3, "entry 7: 3");
    CHECK(nnc_rt_run(rt, 0, none, 1) == 4 && !strcmp(nnc_rt_error(rt), "toy_train_step: input 'x' is NULL"),
          "NULL input: 4, \"%s\"", nnc_rt_error(rt));
    CHECK(nnc_rt_run(rt, 0, NULL, 1) == 4, "NULL input array: 4");
    CHECK(nnc_rt_run(rt, 0, in, 2) == 0 && nnc_rt_get_step(rt) == 1, "train_step: 0, step 1");
    CHECK(nnc_rt_loss(rt) == (double)(1 * w[0] + 2 * w[1] + 3 * w[0] + 4 * w[1]), "train_step: loss");
    CHECK(!nnc_rt_output_named(rt, "out") && strstr(nnc_rt_error(rt), "not an output of toy_train_step"),
          "train_step: out is eval's (\"%s\")", nnc_rt_error(rt));
    CHECK(nnc_rt_run(rt, 2, in, 4) == 0 && nnc_rt_get_step(rt) == 1, "eval: 0, step still 1");
    const float *out = nnc_rt_output_named(rt, "out");
    CHECK(out && out[7] == 8 * w[1], "eval: out = x * w");
    x[0] = -1;
    CHECK(nnc_rt_run(rt, 2, in, 4) == 1 && isnan(nnc_rt_loss(rt)) && !nnc_rt_output_named(rt, "loss"),
          "a failed call: its status, no loss, no outputs");
    nnc_rt_destroy(rt);
}

static void check_arguments(void) {
    int64_t numel = 9;
    _Alignas(64) static char mem[8 + 8 + 96];
    CHECK(nnc_rt_host_bytes(&toy_desc, &toy_cpu) == sizeof mem, "host bytes: params + state + act");
    CHECK(!toy_create(mem + 1), "create(misaligned): NULL");
    nnc_rt *rt = toy_create(mem);
    CHECK(rt && nnc_rt_param(rt, 0) == (void *)mem && nnc_rt_state(rt, 0) == (void *)(mem + 8), "create(mem) carves it");
    CHECK(!nnc_rt_param(rt, 1) && !nnc_rt_state(rt, -1) && !nnc_rt_output(rt, 1, 0) && !nnc_rt_output(rt, 2, 2),
          "out-of-range indices: NULL");
    CHECK(!nnc_rt_output_named(rt, NULL) && !strcmp(nnc_rt_error(rt), "toy_output: name is NULL"), "output(NULL)");
    CHECK(!nnc_rt_param_named(rt, "v", &numel) && numel == 0 && strstr(nnc_rt_error(rt), "no parameter named 'v'"),
          "param(\"v\"): NULL, numel 0");
    CHECK(nnc_rt_param_named(rt, "w", &numel) == (void *)mem && numel == 2, "param(\"w\"): numel 2");
    nnc_rt_destroy(rt);
    nnc_rt_destroy(NULL);
    nnc_rt_init(NULL, 1);
    nnc_rt_set_step(NULL, 1);
    nnc_rt_sync(NULL, NNC_SYNC_TO_HOST);
    CHECK(nnc_rt_init_model(NULL, 1) == 4 && nnc_rt_run(NULL, 0, NULL, 1) == 4 && !nnc_rt_output(NULL, 0, 0) &&
          !nnc_rt_param(NULL, 0) && nnc_rt_get_step(NULL) == 0 && isnan(nnc_rt_loss(NULL)) && nnc_rt_error(NULL),
          "a NULL model: 4, NULL, 0, NAN, a message");
}

/* No entry before init (5); the typed API refuses a train_step on a NaN or an infinity (6) and
 * takes no step, while the ABI's run leaves that to its caller; create_in checks the size. */
static void check_init_and_values(void) {
    float x[TOY_BATCH * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
    const void *in[] = {x};
    nnc_rt *rt = toy_create(NULL);
    CHECK(nnc_rt_run(rt, 0, in, 2) == 5 && nnc_rt_run(rt, 2, in, 2) == 5 && nnc_rt_get_step(rt) == 0 &&
              strstr(nnc_rt_error(rt), "toy_eval: the parameters are not initialised: call toy_init(m, seed)"),
          "before init: 5, no step (\"%s\")", nnc_rt_error(rt));
    nnc_rt_init(rt, 7);
    x[3] = NAN;
    CHECK(nnc_rt_run_typed(rt, 0, in, 2) == 6 && nnc_rt_get_step(rt) == 0 &&
              !strcmp(nnc_rt_error(rt), "toy_train_step: input 'x' holds a NaN at element 3 (row 1): the step was not "
                                         "taken, the parameters are unchanged"),
          "typed train_step on a NaN: 6, no step (\"%s\")", nnc_rt_error(rt));
    CHECK(nnc_rt_run_typed(rt, 2, in, 2) == 0, "typed eval on a NaN: runs (no weights to poison)");
    x[3] = INFINITY;
    CHECK(nnc_rt_run_typed(rt, 0, in, 2) == 6 && strstr(nnc_rt_error(rt), "holds an infinity at element 3"),
          "typed train_step on an infinity: 6");
    CHECK(nnc_rt_run_typed(rt, 0, in, 1) == 0 && nnc_rt_get_step(rt) == 1, "a batch that ends before it: runs");
    CHECK(nnc_rt_run(rt, 0, in, 2) == 0 && nnc_rt_get_step(rt) == 2, "the ABI's run does not scan its inputs");
    nnc_rt_destroy(rt);
    _Alignas(64) static char mem[8 + 8 + 96];
    CHECK(!nnc_rt_create_in(&toy_desc, &toy_cpu, mem, sizeof mem - 1) &&
              !nnc_rt_create_in(&toy_desc, &toy_cpu, NULL, 999),
          "create_in: too small or NULL: NULL");
    rt = nnc_rt_create_in(&toy_desc, &toy_cpu, mem, sizeof mem);
    CHECK(rt && nnc_rt_param(rt, 0) == (void *)mem, "create_in(mem, host bytes): carves mem");
    nnc_rt_destroy(rt);
}

static void check_device_outputs(void) {
    float x[2] = {1, 2}, act[24] = {0};
    const void *in[] = {x};
    nnc_rt *rt = nnc_rt_new(&toy_desc, &toy_device, act);
    CHECK(rt && nnc_rt_alloc(rt, NULL) == 0 && !rt->host[NNC_BLOCK_ACT] && rt->host[NNC_BLOCK_PARAMS],
          "device activations: no host block for them");
    nnc_rt_init(rt, 1);
    nnc_rt_run(rt, 2, in, 1);
    const float *out = nnc_rt_output_named(rt, "out");
    CHECK(out && out != act + 16 && out[1] == act[17] && nnc_rt_output_named(rt, "out") == out && toy_copies == 1,
          "an output in device memory: copied to the host once per call");
    nnc_rt_run(rt, 2, in, 1);
    CHECK(nnc_rt_output_named(rt, "out") == out && toy_copies == 2, "the next call copies it again");
    nnc_rt_destroy(rt);
}

/* The toy with its rate as state ("lr", after w.m) kept in a device's memory: set_lr writes the
 * host mirror and the device's copy of that one number, and nothing else moves. */
static const nnc_tensor_info lr_states[] = {
    {"w.m", NNC_TYPE_F32, 1, {2}, NNC_ROLE_NONE}, {"lr", NNC_TYPE_F32, 0, {0}, NNC_ROLE_LR}, {0}};
static const nnc_leaf_desc lr_state_leaves[] = {{0, NNC_INIT_ZEROS, 0, 0}, {8, NNC_INIT_CONSTANT, 0.5, 0}, {0}};
static float lr_dev_state[3];
static int lr_copies, lr_copied_at;

static int lr_copy(nnc_rt *rt, int block, int64_t offset, void *host, size_t bytes, int direction) {
    if (block != NNC_BLOCK_STATE) return nnc_rt_fail(rt, NNC_STATUS_ARG, "lr toy: bad copy");
    char *dev = (char *)lr_dev_state + offset;
    if (direction == NNC_SYNC_TO_DEVICE) memcpy(dev, host, bytes);
    else memcpy(host, dev, bytes);
    lr_copies++;
    lr_copied_at = (int)offset;
    return (int)bytes == 4 || bytes == sizeof lr_dev_state
        ? 0
        : nnc_rt_fail(rt, NNC_STATUS_ARG, "lr toy: %zu bytes", bytes);
}

static const nnc_device_ops lr_device = {.name = "lr toy",
                                         .device_blocks = 1u << NNC_BLOCK_STATE,
                                         .host_alloc = nnc_rt_host_alloc,
                                         .host_free = nnc_rt_host_free,
                                         .copy = lr_copy,
                                         .run = toy_run};

static void check_set_lr(void) {
    nnc_model_desc d = toy_desc;
    d.abi.nstates = 2, d.abi.states = lr_states, d.abi.state_bytes = 12;
    d.block_bytes[NNC_BLOCK_STATE] = 12;
    d.state = lr_state_leaves;
    CHECK(d.abi.set_lr == nnc_rt_set_lr, "the ABI's set_lr is the typed API's");
    nnc_rt *rt = nnc_rt_new(&d, &lr_device, NULL);
    CHECK(rt && nnc_rt_alloc(rt, NULL) == 0, "lr toy: created");
    nnc_rt_init(rt, 1);
    CHECK(lr_dev_state[2] == 0.5f && lr_copies == 1, "init: the rate from its initializer, on the device");
    lr_dev_state[0] = 42; /* the device's own moment, which set_lr must not overwrite from a stale mirror */
    CHECK(d.abi.set_lr(rt, 0.25) == 0 && lr_dev_state[2] == 0.25f && *(float *)nnc_rt_state(rt, 1) == 0.25f,
          "set_lr: the rate on the device and in the mirror");
    CHECK(lr_copies == 2 && lr_copied_at == 8 && lr_dev_state[0] == 42, "set_lr: one copy of the rate alone");
    CHECK(d.abi.set_lr(rt, -1) == 6 && lr_copies == 2 && lr_dev_state[2] == 0.25f, "set_lr(-1): 6, nothing copied");
    nnc_rt_destroy(rt);
    rt = toy_create(NULL);
    nnc_rt_init(rt, 1);
    CHECK(toy_desc.abi.set_lr(rt, 0.1) == 3 && strstr(nnc_rt_error(rt), "lr_schedule"),
          "set_lr on a model without the rate as state: 3");
    nnc_rt_destroy(rt);
}

int main(void) {
    check_calls();
    check_set_lr();
    check_arguments();
    check_init_and_values();
    check_device_outputs();
    return check_done();
}
