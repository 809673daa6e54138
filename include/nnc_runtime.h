/* nnc_runtime.h - the host side of every compiled model: nnc_model_abi over a description.
 *
 * Codegen produces data, not logic: an nnc_model_desc (tensors with names, shapes and block
 * offsets, parameter initializers, block sizes, each entry's outputs and the inputs it reads)
 * and a device that can run an entry.  This file is everything else, once: creating and
 * destroying an instance, Philox initialisation, the batch bound, NULL checks, status codes and
 * messages, output lookup (host memory directly, device memory through a host copy), the
 * parameter/state mirrors and the step counter.  A device is a small table of operations
 * (nnc_device_ops, after ggml's ggml_backend_i): host memory, copies to and from its own
 * memory, and running an entry.  The CPU device is trivial (host memory is its memory, run
 * calls the generated entry function); the CUDA backend's device keeps NVRTC kernels, cuBLAS,
 * graphs and its error flag (codegen/cuda/backend_cuda.c).
 *
 * Two sections, in the single-file-library style: the types (always), and the functions, only
 * where NNC_RUNTIME_IMPLEMENTATION is defined before the include.  Generated C and each
 * ahead-of-time library paste an exact copy of this file (codegen embeds it, like nnc_rng.h),
 * and the CUDA backend includes it, so it needs libc only.  Every function is static (two models
 * linked into one program never clash) and marked unused where the compiler allows, since a
 * device uses only some of them.  Include nnc_abi.h and nnc_rng.h first: a pasted copy cannot
 * #include its neighbours.
 *
 * Invariants:
 *   - offsets and sizes in a description are bytes; an f32 tensor is `real_bytes` wide, i32 4;
 *   - the host memory of the parameter and state blocks is what param()/state() return: the
 *     blocks themselves on a host device, mirrors moved by sync() on another;
 *   - an instance's outputs are current only for the entry in `last`, the call that last
 *     succeeded; a device-memory output is copied to the host once per call, when first read. */
#ifndef NNC_RUNTIME_H
#define NNC_RUNTIME_H
#include <stddef.h>
#include <stdint.h>

#ifndef NNC_ABI_H
#error "include nnc_abi.h before nnc_runtime.h"
#endif

#define NNC_RT_MSG_LEN 1024   /* room for a CUDA call with its site, or a NaN's op and line */

/* What run() and the typed API return; the message is in error(). */
enum {
    NNC_STATUS_OK = 0, /* the call succeeded */
    NNC_STATUS_CHECK = 1, /* a check inside a kernel failed: a label outside [0, classes), an
                               embedding index outside [0, rows) */
    NNC_STATUS_BATCH = 2, /* the batch is outside [1, batch_max] */
    NNC_STATUS_ENTRY = 3, /* the model has no such entry point (no loss: eval only), or no
                               learning rate to set (set_lr without an lr_schedule) */
    NNC_STATUS_ARG = 4, /* a NULL argument, a non-finite value (--check-numerics), a device error */
    NNC_STATUS_INIT = 5, /* the parameters were never initialised: init() comes before any entry */
    NNC_STATUS_VALUE = 6, /* an argument's value is out of range: a learning rate that is not a finite
                               number >= 0, a NaN or an infinity in a train_step's f32 input */
    NNC_STATUS_ROOM = 7, /* keep(..., if_room): the copy would take more than a quarter of the
                               device's free memory, so nothing was kept */
};

/* The messages of the checks inside a call, the same on every target (kernels and devices
 * format them): a label out of range (NNC_STATUS_CHECK) and, with --check-numerics, the first
 * NaN or Inf a launch wrote (NNC_STATUS_ARG): "NaN", element, what wrote it, step. */
#define NNC_RT_LABEL_FMT "cross_entropy: label %d at row %lld is outside [0, %lld)"
#define NNC_RT_INDEX_FMT "embedding: index %d at position %lld is outside [0, %lld)"
#define NNC_RT_NONFINITE_FMT "%s at element %lld of %s at step %lld"

/* The memory blocks a model uses; sizes per model in nnc_model_desc.block_bytes. */
enum {
    NNC_BLOCK_PARAMS = 0,   /* parameters, by offset */
    NNC_BLOCK_STATE = 1,    /* optimizer state (momentum, Adam's moments) */
    NNC_BLOCK_ACT = 2,      /* activations on the target (reused by liveness within a call) */
    NNC_BLOCK_HOST = 3,     /* activations a device target keeps on the host (the loss copied back) */
    NNC_BLOCK_COUNT = 4,
    NNC_BLOCK_NONE = -1,    /* no memory: an inline constant, or a batch input */
};

/* Parameter initializers (torch.nn.init's; Kaiming and Xavier arrive as uniform or normal). */
enum {
    NNC_INIT_ZEROS = 0,     /* 0 */
    NNC_INIT_ONES = 1,      /* 1 */
    NNC_INIT_CONSTANT = 2,  /* a */
    NNC_INIT_UNIFORM = 3,   /* U(a, b) */
    NNC_INIT_NORMAL = 4,    /* N(a, b^2) */
};

typedef struct {
    int block;              /* NNC_BLOCK_*, or NNC_BLOCK_NONE */
    int64_t offset;         /* bytes from the block's start */
} nnc_place;

typedef struct {
    int64_t offset;         /* bytes into the parameter (or state) block */
    int init;               /* NNC_INIT_*: Philox stream nnc_rng_hash(name), element index */
    double a, b;            /* the initializer's arguments */
} nnc_leaf_desc;

typedef struct {
    const char *name;           /* "train_step", "grad", "eval": as the typed API names it */
    int present;                /* 0: the model has no such entry */
    int advances_step;          /* 1: the step counter goes up by one before the entry runs */
    const unsigned char *reads; /* per input: 1 when the entry reads it (then it must not be NULL) */
    const nnc_place *outputs;   /* per output (abi.outputs[entry]): where it is after a call */
} nnc_entry_desc;

/* A compiled model, as data.  Tensor arrays end with a zeroed element, so none is empty. */
typedef struct nnc_model_desc {
    nnc_model_abi abi;                      /* exported as is: names, shapes, sizes, functions */
    size_t block_bytes[NNC_BLOCK_COUNT];    /* each block's size (0: unused) */
    const nnc_leaf_desc *param, *state;     /* parallel to abi.params, abi.states */
    nnc_entry_desc entry[NNC_ENTRY_COUNT]; /* by NNC_ENTRY_* */
} nnc_model_desc;

typedef struct nnc_rt nnc_rt;

/* What a device does for the runtime.  Operations return 0, or a status with the message left
 * by nnc_rt_fail.  Operations a device does not need are NULL. */
typedef struct nnc_device_ops {
    const char *name;
    unsigned device_blocks;     /* bit b: block b is in the device's own memory (allocated by the
                                   device); params and state then have host mirrors, act none */
    /* Zeroed host memory the runtime hands out or copies through (CUDA: pinned, so that copies
     * are asynchronous on the compute stream and can be captured). */
    void *(*host_alloc)(nnc_rt *rt, size_t bytes);
    void (*host_free)(nnc_rt *rt, void *p);
    /* bytes at `offset` of a device block to or from host memory (NNC_SYNC_TO_*): a copy to the
     * host has landed when it returns, a copy to the device comes before every later call */
    int (*copy)(nnc_rt *rt, int block, int64_t offset, void *host, size_t bytes, int direction);
    int (*set_step)(nnc_rt *rt);    /* the device's copy of rt->step */
    /* Runs an entry that exists on inputs that are checked; rt->step is already advanced. */
    int (*run)(nnc_rt *rt, int entry, const void *const *in, int64_t batch);
    void (*close)(nnc_rt *rt);      /* the device's own memory and state; rt->dev is gone after */
    /* Pipelined calls (NULL: every call runs to its end, and the ABI's submit is NULL too).
     * submit queues an entry that exists on checked inputs in ring slot `slot` (pinned, left
     * unchanged until the call is finished) and returns without waiting; finish waits for the
     * call queued in `slot` and leaves its outputs where run leaves them (nnc_rt_outputs_take).
     * The runtime keeps at most one call per slot in flight and finishes them in order. */
    int (*submit)(nnc_rt *rt, int entry, const void *const *in, int64_t batch, int slot);
    int (*finish)(nnc_rt *rt, int slot, int entry, int64_t batch);
    /* Kept inputs (NULL: none; the ABI's keep and submit_rows refuse).  keep copies a checked
     * source for input i into device memory (data NULL: lets it go); submit_rows is submit with
     * each input gathered on the device from its kept source, row r from starts[i][r] on (the
     * starts checked, read before it returns). */
    int (*keep)(nnc_rt *rt, int i, const void *data, int64_t elems, int type, float scale, int if_room);
    int (*submit_rows)(nnc_rt *rt, int entry, const int64_t *const *starts, int64_t batch, int slot);
} nnc_device_ops;

/* A pipelined call in flight: what finish needs to know of it. */
typedef struct {
    int entry;
    int64_t batch;
    int slot; /* its ring slot */
} nnc_rt_flight;

/* An output in device memory: its host copy, and whether it is this call's. */
typedef struct {
    size_t at;              /* bytes into nnc_rt.stage */
    int fresh;
} nnc_rt_stage;

/* An instance: the void *m of every nnc_model_abi function. */
struct nnc_rt {
    const nnc_model_desc *d;
    const nnc_device_ops *ops;
    void *dev;                      /* the device's own state (NULL on the CPU) */
    char *host[NNC_BLOCK_COUNT];    /* each block's host memory, or NULL (device activations) */
    void *owned;                    /* the host blocks when the runtime allocated them */
    char *stage;                    /* host copies of device-memory outputs */
    nnc_rt_stage *stages[NNC_ENTRY_COUNT]; /* per entry and output */
    int64_t batch[NNC_ENTRY_COUNT]; /* each entry's last batch: sizes its outputs */
    int64_t step;                   /* optimizer steps taken */
    int64_t micro; /* accumulate calls since the last step, before the current call:
                                       whether the group's sum counts (STEP_ACCUMULATED), and with the
                                       step it keys an accumulate call's dropout masks */
    uint64_t seed;                  /* of the last init: with the step, it keys dropout masks */
    int initialized;                /* init() has run: the parameters hold values, not create's zeros */
    int status;
    int last;                       /* the entry whose outputs are current, or -1 */
    const nnc_comm *comm;           /* the host's collectives (data parallel), or NULL */
    size_t stage_lo[NNC_ENTRY_COUNT], stage_hi[NNC_ENTRY_COUNT]; /* each entry's bytes of `stage` */
    void **ring[NNC_PIPELINE_DEPTH]; /* pipelined calls' input buffers, per slot one per input (pinned) */
    nnc_rt_flight flight[NNC_PIPELINE_DEPTH]; /* the calls in flight, oldest at first_flight */
    int nflight, first_flight, next_slot;
    int64_t *kept; /* per input: the values its kept source holds (0: none), or NULL */
    char msg[NNC_RT_MSG_LEN];
};
#endif /* NNC_RUNTIME_H */

#if defined(NNC_RUNTIME_IMPLEMENTATION) && !defined(NNC_RUNTIME_IMPLEMENTED)
#define NNC_RUNTIME_IMPLEMENTED
#ifndef NNC_RNG_H
#error "include nnc_rng.h before the implementation of nnc_runtime.h"
#endif
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__) /* madvise and MADV_HUGEPAGE (14 in Linux's ABI), which strict C11 hides */
#include <sys/mman.h>
int madvise(void *addr, size_t length, int advice);
#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14
#endif
#endif

#if defined(__GNUC__) || defined(__clang__)
#define NNC_RT_FN static __attribute__((unused))
#define NNC_RT_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define NNC_RT_FN static
#define NNC_RT_PRINTF(f, a)
#endif

/* ---- sizes ---------------------------------------------------------------------------------- */

NNC_RT_FN int64_t nnc_rt_numel(const nnc_tensor_info *t, int64_t batch) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->dims[i] < 0 ? -t->dims[i] * batch : t->dims[i];
    return n;
}

NNC_RT_FN size_t nnc_rt_bytes(const nnc_model_desc *d, const nnc_tensor_info *t, int64_t batch) {
    const size_t e = t->dtype == NNC_TYPE_I32                   ? 4u
        : t->dtype == NNC_TYPE_BF16 || t->dtype == NNC_TYPE_F16 ? 2u
                                                                : (size_t)d->abi.real_bytes;
    return (size_t)nnc_rt_numel(t, batch) * e;
}

NNC_RT_FN int nnc_rt_on_device(const nnc_device_ops *ops, int block) {
    return block >= 0 && (ops->device_blocks >> block & 1u);
}

/* Whether the runtime keeps host memory for a block: all but device activations. */
NNC_RT_FN int nnc_rt_has_host(const nnc_device_ops *ops, int block) {
    return block != NNC_BLOCK_ACT || !nnc_rt_on_device(ops, block);
}

/* The host memory an instance needs for its blocks, in block order with no gaps: what
 * create(mem) carves and NAME_memory_bytes() reports. */
NNC_RT_FN size_t nnc_rt_host_bytes(const nnc_model_desc *d, const nnc_device_ops *ops) {
    size_t n = 0;
    for (int b = 0; b < NNC_BLOCK_COUNT; b++)
        if (nnc_rt_has_host(ops, b)) n += d->block_bytes[b];
    return n;
}

static size_t nnc_rt_round64(size_t n) { return (n + 63) / 64 * 64; }

/* ---- status and messages --------------------------------------------------------------------- */

NNC_RT_FN NNC_RT_PRINTF(3, 4) int nnc_rt_fail(nnc_rt *rt, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt->msg, sizeof rt->msg, fmt, ap);
    va_end(ap);
    return rt->status = status;
}

/* Status 4 for a NULL argument of the typed function NAME_fn; the message names it. */
NNC_RT_FN int nnc_rt_null_arg(nnc_rt *rt, const char *fn, const char *what) {
    return nnc_rt_fail(rt, NNC_STATUS_ARG, "%s_%s: %s is NULL", rt->d->abi.name, fn, what);
}

/* ---- create and destroy ---------------------------------------------------------------------- */

/* An instance with no memory yet: a device that sets itself up first (CUDA) reports into it. */
NNC_RT_FN nnc_rt *nnc_rt_new(const nnc_model_desc *d, const nnc_device_ops *ops, void *dev) {
    nnc_rt *rt = calloc(1, sizeof *rt);
    if (!rt) return NULL;
    rt->d = d;
    rt->ops = ops;
    rt->dev = dev;
    rt->last = -1;
    return rt;
}

/* Host copies for the outputs the device keeps in its own memory, sized at batch_max. */
static int nnc_rt_alloc_stages(nnc_rt *rt) {
    const nnc_model_desc *d = rt->d;
    size_t total = 0;
    for (int k = 0; k < NNC_ENTRY_COUNT; k++) {
        rt->stages[k] = calloc((size_t)d->abi.noutputs[k] + 1, sizeof *rt->stages[k]);
        if (!rt->stages[k]) return nnc_rt_fail(rt, NNC_STATUS_ARG, "out of memory");
        rt->stage_lo[k] = total;
        for (int j = 0; j < d->abi.noutputs[k]; j++) {
            if (!nnc_rt_on_device(rt->ops, d->entry[k].outputs[j].block)) continue;
            rt->stages[k][j].at = total;
            total += nnc_rt_round64(nnc_rt_bytes(d, &d->abi.outputs[k][j], d->abi.batch_max));
        }
        rt->stage_hi[k] = total;
    }
    if (total && !(rt->stage = rt->ops->host_alloc(rt, total)))
        return nnc_rt_fail(rt, NNC_STATUS_ARG, "cannot allocate %zu bytes of host memory", total);
    return 0;
}

/* The host blocks, from `mem` (NULL: allocated and zeroed), and the output copies. */
NNC_RT_FN int nnc_rt_alloc(nnc_rt *rt, void *mem) {
    size_t bytes = nnc_rt_host_bytes(rt->d, rt->ops);
    if (!mem && !(mem = rt->owned = rt->ops->host_alloc(rt, bytes)))
        return nnc_rt_fail(rt, NNC_STATUS_ARG, "cannot allocate %zu bytes of host memory", bytes);
    size_t at = 0;
    for (int b = 0; b < NNC_BLOCK_COUNT; b++)
        if (nnc_rt_has_host(rt->ops, b)) {
            rt->host[b] = (char *)mem + at;
            at += rt->d->block_bytes[b];
        }
    return nnc_rt_alloc_stages(rt);
}

NNC_RT_FN void nnc_rt_destroy(void *m) {
    nnc_rt *rt = m;
    if (!rt) return;
    if (rt->stage) rt->ops->host_free(rt, rt->stage);
    if (rt->owned) rt->ops->host_free(rt, rt->owned);
    for (int s = 0; s < NNC_PIPELINE_DEPTH; s++) {
        for (int i = 0; rt->ring[s] && i < rt->d->abi.ninputs; i++)
            if (rt->ring[s][i]) rt->ops->host_free(rt, rt->ring[s][i]);
        free(rt->ring[s]);
    }
    for (int k = 0; k < NNC_ENTRY_COUNT; k++) free(rt->stages[k]);
    free(rt->kept);
    if (rt->ops->close) rt->ops->close(rt);
    free(rt);
}

/* create(mem): mem NULL, or nnc_rt_host_bytes() aligned for the element type (else NULL). */
NNC_RT_FN void *nnc_rt_create(const nnc_model_desc *d, const nnc_device_ops *ops, void *mem) {
    if (mem && (uintptr_t)mem % (uintptr_t)d->abi.real_bytes) return NULL;
    nnc_rt *rt = nnc_rt_new(d, ops, NULL);
    if (rt && nnc_rt_alloc(rt, mem)) {
        nnc_rt_destroy(rt);
        return NULL;
    }
    return rt;
}

/* The typed API's create_in(mem, bytes): NULL unless mem holds at least nnc_rt_host_bytes(),
 * so a buffer sized for another model (or another build of this one) is refused, not overrun. */
NNC_RT_FN void *nnc_rt_create_in(const nnc_model_desc *d, const nnc_device_ops *ops, void *mem, size_t bytes) {
    return mem && bytes >= nnc_rt_host_bytes(d, ops) ? nnc_rt_create(d, ops, mem) : NULL;
}

/* ---- parameters, state, step ------------------------------------------------------------------ */

NNC_RT_FN void *nnc_rt_param(void *m, int i) {
    nnc_rt *rt = m;
    return rt && i >= 0 && i < rt->d->abi.nparams ? rt->host[NNC_BLOCK_PARAMS] + rt->d->param[i].offset : NULL;
}

NNC_RT_FN void *nnc_rt_state(void *m, int i) {
    nnc_rt *rt = m;
    return rt && i >= 0 && i < rt->d->abi.nstates ? rt->host[NNC_BLOCK_STATE] + rt->d->state[i].offset : NULL;
}

/* Parameter and state mirrors to or from a device that keeps its own; nothing on the CPU.
 * sync() has no status to return, so a failure is also printed. */
NNC_RT_FN void nnc_rt_sync(void *m, int direction) {
    nnc_rt *rt = m;
    if (!rt) return;
    for (int b = NNC_BLOCK_PARAMS; b <= NNC_BLOCK_STATE; b++) {
        size_t bytes = rt->d->block_bytes[b];
        if (bytes && nnc_rt_on_device(rt->ops, b) && rt->ops->copy(rt, b, 0, rt->host[b], bytes, direction)) {
            fprintf(stderr, "nnc: error: %s\n", rt->msg);
            return;
        }
    }
}

NNC_RT_FN int64_t nnc_rt_get_step(void *m) { return m ? ((nnc_rt *)m)->step : 0; }

NNC_RT_FN void nnc_rt_set_step(void *m, int64_t step) {
    nnc_rt *rt = m;
    if (!rt) return;
    rt->step = step;
    rt->micro = 0; /* a step boundary: no micro-batch of the next group has run */
    if (rt->ops->set_step && rt->ops->set_step(rt)) fprintf(stderr, "nnc: error: %s\n", rt->msg);
}

/* Element k of parameter i: the same bits on every target and in tests/ref/philox.py. */
static double nnc_rt_init_value(const nnc_leaf_desc *p, uint64_t seed, uint64_t stream, int64_t k) {
    switch (p->init) {
    case NNC_INIT_ZEROS: return 0;
    case NNC_INIT_ONES: return 1;
    case NNC_INIT_CONSTANT: return p->a;
    case NNC_INIT_UNIFORM: return p->a + (p->b - p->a) * nnc_rng_uniform(seed, stream, (uint64_t)k);
    default: return p->a + p->b * nnc_rng_normal(seed, stream, (uint64_t)k);
    }
}

/* A parameter or state tensor from its initializer (state: zeros, or a scheduled lr's rate). */
static void nnc_rt_init_leaf(nnc_rt *rt, int block, const nnc_tensor_info *t, const nnc_leaf_desc *p, uint64_t seed) {
    const uint64_t stream = nnc_rng_hash(t->name);
    char *at = rt->host[block] + p->offset;
    const int64_t n = nnc_rt_numel(t, 1);
    for (int64_t k = 0; k < n; k++) {
        const double v = nnc_rt_init_value(p, seed, stream, k);
        if (rt->d->abi.real_bytes == 8) ((double *)(void *)at)[k] = v;
        else ((float *)(void *)at)[k] = (float)v;
    }
}

/* Parameters from the seed, state zeroed (a scheduled lr: its rate), step 0, no current outputs; then to the device. */
NNC_RT_FN void nnc_rt_init(void *m, uint64_t seed) {
    nnc_rt *rt = m;
    if (!rt) return;
    rt->seed = seed;
    for (int i = 0; i < rt->d->abi.nparams; i++)
        nnc_rt_init_leaf(rt, NNC_BLOCK_PARAMS, &rt->d->abi.params[i], &rt->d->param[i], seed);
    if (rt->d->block_bytes[NNC_BLOCK_STATE]) memset(rt->host[NNC_BLOCK_STATE], 0, rt->d->block_bytes[NNC_BLOCK_STATE]);
    for (int i = 0; i < rt->d->abi.nstates; i++)
        if (rt->d->state[i].init != NNC_INIT_ZEROS)
            nnc_rt_init_leaf(rt, NNC_BLOCK_STATE, &rt->d->abi.states[i], &rt->d->state[i], seed);
    rt->status = 0;
    rt->last = -1;
    rt->initialized = 1;
    nnc_rt_sync(rt, NNC_SYNC_TO_DEVICE);
    nnc_rt_set_step(rt, 0);
}

/* ---- run and outputs ------------------------------------------------------------------------- */

/* The first element of n that is NaN or infinite (by its exponent bits, which no compiler flag
 * can assume away), or -1.  Branch-free within a chunk, so the common all-finite case
 * vectorizes: a few microseconds for a batch of images. */
static int64_t nnc_rt_first_nonfinite(const void *data, int64_t n, int real_bytes) {
    const char *p = (const char *)data;
    for (int64_t at = 0; at < n; at += 4096) {
        const int64_t end = n - at < 4096 ? n : at + 4096;
        int bad = 0;
        if (real_bytes == 8)
            for (int64_t k = at; k < end; k++) {
                uint64_t b;
                memcpy(&b, p + 8 * k, 8);
                bad |= (b & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
            }
        else
            for (int64_t k = at; k < end; k++) {
                uint32_t b;
                memcpy(&b, p + 4 * k, 4);
                bad |= (b & 0x7f800000u) == 0x7f800000u;
            }
        if (!bad) continue;
        for (int64_t k = at; k < end; k++) {
            const double v = real_bytes == 8 ? ((const double *)(const void *)p)[k]
                                             : ((const float *)(const void *)p)[k];
            if (!(v - v == 0)) return k;
        }
    }
    return -1;
}

/* A train_step that reads a NaN or an infinity would write it into every weight it reaches:
 * refuse the step (its status and a message naming the input and the element) before the
 * device runs, so the parameters, the optimizer state and the step count stay as they were. */
static int nnc_rt_check_finite(nnc_rt *rt, int entry, const void *const *in, int64_t batch) {
    const nnc_model_desc *d = rt->d;
    for (int i = 0; i < d->abi.ninputs; i++) {
        const nnc_tensor_info *t = &d->abi.inputs[i];
        if (!d->entry[entry].reads[i] || t->dtype == NNC_TYPE_I32) continue;
        const int64_t k = nnc_rt_first_nonfinite(in[i], nnc_rt_numel(t, batch), d->abi.real_bytes);
        if (k < 0) continue;
        const int64_t row = t->rank && t->dims[0] < 0 ? k / (nnc_rt_numel(t, batch) / batch) : 0;
        const double v = d->abi.real_bytes == 8 ? ((const double *)in[i])[k] : ((const float *)in[i])[k];
        return nnc_rt_fail(rt, NNC_STATUS_VALUE, "%s_%s: input '%s' holds %s at element %lld (row %lld): the step "
                           "was not taken, the parameters are unchanged", d->abi.name, d->entry[entry].name, t->name,
                           v != v ? "a NaN" : "an infinity", (long long)k, (long long)row);
    }
    return 0;
}

/* The batch and the entry, which every call checks first. */
static int nnc_rt_check_entry(nnc_rt *rt, int entry, int64_t batch) {
    const nnc_model_desc *d = rt->d;
    if (batch < 1 || batch > d->abi.batch_max)
        return nnc_rt_fail(rt, NNC_STATUS_BATCH, "batch of %lld rows is outside [1, %lld]", (long long)batch,
                           (long long)d->abi.batch_max);
    if (entry < 0 || entry >= NNC_ENTRY_COUNT || !d->entry[entry].present)
        return nnc_rt_fail(rt, NNC_STATUS_ENTRY, "this model has no such entry point (no loss to train?)");
    return 0;
}

/* ... and whether init() has run, which every call checks after its inputs. */
static int nnc_rt_check_init(nnc_rt *rt, int entry) {
    const nnc_model_desc *d = rt->d;
    if (!rt->initialized) /* create leaves zeros: a step would train from them, silently */
        return nnc_rt_fail(rt, NNC_STATUS_INIT,
                           "%s_%s: the parameters are not initialised: call %s_init(m, seed) "
                           "after %s_create (then write or load any parameters of your own)",
                           d->abi.name, d->entry[entry].name, d->abi.name, d->abi.name);
    return 0;
}

/* What every entry checks before the device sees it: the batch, the entry, its inputs. */
static int nnc_rt_check_call(nnc_rt *rt, int entry, const void *const *in, int64_t batch) {
    const nnc_model_desc *d = rt->d;
    if (nnc_rt_check_entry(rt, entry, batch)) return rt->status;
    /* only the inputs this entry reads must be given (eval of a model whose labels feed only
     * the loss still needs them: the loss is an eval output) */
    for (int i = 0; i < d->abi.ninputs; i++)
        if (d->entry[entry].reads[i] && (!in || !in[i]))
            return nnc_rt_fail(rt, NNC_STATUS_ARG, "%s_%s: input '%s' is NULL", d->abi.name, d->entry[entry].name,
                               d->abi.inputs[i].name);
    return nnc_rt_check_init(rt, entry);
}

/* An entry call; with check_values, a train_step's float inputs must be finite first. */
static int nnc_rt_call(nnc_rt *rt, int entry, const void *const *in, int64_t batch, int check_values) {
    if (!rt) return NNC_STATUS_ARG;
    rt->status = 0;
    rt->last = -1;
    rt->msg[0] = 0;
    if (nnc_rt_check_call(rt, entry, in, batch)) return rt->status;
    if (check_values && rt->d->entry[entry].advances_step && nnc_rt_check_finite(rt, entry, in, batch))
        return rt->status;
    if (rt->d->entry[entry].advances_step) rt->step++;
    rt->batch[entry] = batch;
    for (int j = 0; j < rt->d->abi.noutputs[entry]; j++) rt->stages[entry][j].fresh = 0;
    const int rc = rt->ops->run(rt, entry, in, batch);
    if (rc) return rt->status = rc;
    if (entry == NNC_ENTRY_ACCUM) rt->micro++; /* a device keeps its own count alongside */
    if (entry == NNC_ENTRY_TRAIN) rt->micro = 0;
    rt->last = entry;
    return 0;
}

/* The ABI's run: its callers check their data (nnc's trainer, once, when it loads a data set),
 * so a step does not scan its inputs again; about 2% of models/mlp.nn's step at batch 64. */
NNC_RT_FN int nnc_rt_run(void *m, int entry, const void *const *in, int64_t batch) {
    return nnc_rt_call(m, entry, in, batch, 0);
}

/* A host pointer to output k of an entry: host memory directly, device memory copied over. */
NNC_RT_FN const void *nnc_rt_output(void *m, int entry, int k) {
    nnc_rt *rt = m;
    if (!rt || entry < 0 || entry >= NNC_ENTRY_COUNT || k < 0 || k >= rt->d->abi.noutputs[entry]) return NULL;
    const nnc_place *at = &rt->d->entry[entry].outputs[k];
    if (at->block == NNC_BLOCK_NONE) return NULL;
    if (!nnc_rt_on_device(rt->ops, at->block)) return rt->host[at->block] + at->offset;
    nnc_rt_stage *s = &rt->stages[entry][k];
    if (!s->fresh) {
        const int64_t batch = rt->batch[entry] ? rt->batch[entry] : 1;
        const size_t bytes = nnc_rt_bytes(rt->d, &rt->d->abi.outputs[entry][k], batch);
        if (rt->ops->copy(rt, at->block, at->offset, rt->stage + s->at, bytes, NNC_SYNC_TO_HOST)) return NULL;
        s->fresh = 1;
    }
    return rt->stage + s->at;
}

/* ---- pipelined calls (a device with submit) ----------------------------------------------------
 * The host gathers the next batch into a ring slot while the device runs the call before it, and
 * reads a call's outputs when it finishes it, one call later.  The slots are used in turn, so
 * the slot a new call takes was last used by the call NNC_PIPELINE_DEPTH submits ago, which
 * has been finished: its input copies have run, and the host may write the slot again. */

/* The ring's buffers, allocated at the first pipelined call: one per input and slot, at batch_max. */
static int nnc_rt_ring_alloc(nnc_rt *rt) {
    const nnc_model_desc *d = rt->d;
    for (int s = 0; s < NNC_PIPELINE_DEPTH; s++) {
        if (!rt->ring[s] && !(rt->ring[s] = calloc((size_t)d->abi.ninputs + 1, sizeof(void *))))
            return nnc_rt_fail(rt, NNC_STATUS_ARG, "out of memory");
        for (int i = 0; i < d->abi.ninputs; i++) {
            const size_t bytes = nnc_rt_bytes(d, &d->abi.inputs[i], d->abi.batch_max);
            if (!rt->ring[s][i] && !(rt->ring[s][i] = rt->ops->host_alloc(rt, bytes)))
                return nnc_rt_fail(rt, NNC_STATUS_ARG, "cannot allocate %zu bytes of host memory", bytes);
        }
    }
    return 0;
}

/* The ABI's input_buffer: where input i of the next submit goes; NULL while the ring is full. */
NNC_RT_FN void *nnc_rt_input_buffer(void *m, int i) {
    nnc_rt *rt = m;
    if (!rt || !rt->ops->submit || i < 0 || i >= rt->d->abi.ninputs || rt->nflight == NNC_PIPELINE_DEPTH ||
        nnc_rt_ring_alloc(rt))
        return NULL;
    return rt->ring[rt->next_slot][i];
}

/* What a pipelined call checks first: the device queues calls, and the ring has a free slot. */
static int nnc_rt_may_queue(nnc_rt *rt, int can, const char *fn) {
    rt->status = 0;
    rt->msg[0] = 0;
    if (!can)
        return nnc_rt_fail(rt, NNC_STATUS_ENTRY, "%s_%s: the %s target runs each call to its end: use run",
                           rt->d->abi.name, fn, rt->ops->name);
    if (rt->nflight == NNC_PIPELINE_DEPTH)
        return nnc_rt_fail(rt, NNC_STATUS_ARG, "%s_%s: %d calls are in flight already: finish one first",
                           rt->d->abi.name, fn, NNC_PIPELINE_DEPTH);
    return 0;
}

/* A checked call handed to the device (`rc` what its submit returned): in flight on its slot. */
static int nnc_rt_queued(nnc_rt *rt, int entry, int64_t batch, int slot, int rc) {
    if (rc) return rt->status = rc;
    if (entry == NNC_ENTRY_ACCUM) rt->micro++;
    if (entry == NNC_ENTRY_TRAIN) rt->micro = 0;
    rt->flight[(rt->first_flight + rt->nflight) % NNC_PIPELINE_DEPTH] = (nnc_rt_flight){entry, batch, slot};
    rt->nflight++;
    rt->next_slot = (slot + 1) % NNC_PIPELINE_DEPTH;
    return 0;
}

/* The ABI's submit: run's checks and step, then the call queued on its ring slot. */
NNC_RT_FN int nnc_rt_submit(void *m, int entry, const void *const *in, int64_t batch) {
    nnc_rt *rt = m;
    if (!rt) return NNC_STATUS_ARG;
    const nnc_model_desc *d = rt->d;
    if (nnc_rt_may_queue(rt, rt->ops->submit != NULL, "submit") || nnc_rt_check_call(rt, entry, in, batch) ||
        nnc_rt_ring_alloc(rt))
        return rt->status;
    const int slot = rt->next_slot;
    void **ring = rt->ring[slot];
    for (int i = 0; i < d->abi.ninputs; i++) /* the caller's own memory: copied, so it is free at once */
        if (d->entry[entry].reads[i] && in[i] != ring[i])
            memcpy(ring[i], in[i], nnc_rt_bytes(d, &d->abi.inputs[i], batch));
    if (d->entry[entry].advances_step) rt->step++;
    return nnc_rt_queued(rt, entry, batch, slot, rt->ops->submit(rt, entry, (const void *const *)ring, batch, slot));
}

/* ---- kept inputs (a device with keep) ----------------------------------------------------------
 * A data set that fits in the device's memory is copied there once; each pipelined call then
 * gathers its batch there from the rows' starts, the only thing that goes up per call. */

/* The ABI's keep: input i's source, checked against the input's type and its row. */
NNC_RT_FN int nnc_rt_keep(void *m, int i, const void *data, int64_t elems, int type, float scale, int if_room) {
    nnc_rt *rt = m;
    if (!rt) return NNC_STATUS_ARG;
    const nnc_model_desc *d = rt->d;
    rt->status = 0;
    rt->msg[0] = 0;
    if (!rt->ops->keep)
        return nnc_rt_fail(rt, NNC_STATUS_ENTRY, "%s_keep: the %s target keeps no inputs in its memory", d->abi.name,
                           rt->ops->name);
    if (i < 0 || i >= d->abi.ninputs)
        return nnc_rt_fail(rt, NNC_STATUS_ARG, "%s_keep: no input %d (the model has %d)", d->abi.name, i,
                           d->abi.ninputs);
    if (!rt->kept && !(rt->kept = (int64_t *)calloc((size_t)d->abi.ninputs + 1, sizeof *rt->kept)))
        return nnc_rt_fail(rt, NNC_STATUS_ARG, "out of memory");
    const nnc_tensor_info *t = &d->abi.inputs[i];
    if (data) {
        const int ints = t->dtype == NNC_TYPE_I32;
        if (ints ? type != NNC_TYPE_I32 : type != NNC_TYPE_F32 && type != NNC_TYPE_U8)
            return nnc_rt_fail(rt, NNC_STATUS_VALUE, "%s_keep: input '%s' takes %s: keep %s", d->abi.name, t->name,
                               ints ? "i32" : "floats", ints ? "i32 values" : "f32 values or bytes");
        if (elems < nnc_rt_numel(t, 1))
            return nnc_rt_fail(rt, NNC_STATUS_VALUE, "%s_keep: %lld values for input '%s', whose rows take %lld",
                               d->abi.name, (long long)elems, t->name, (long long)nnc_rt_numel(t, 1));
        if (type == NNC_TYPE_U8 && !(scale - scale == 0))
            return nnc_rt_fail(rt, NNC_STATUS_VALUE, "%s_keep: input '%s': the bytes' scale is not finite", d->abi.name,
                               t->name);
    }
    const int rc = rt->ops->keep(rt, i, data, data ? elems : 0, type, scale, if_room);
    if (rc) return rt->status = rc;
    rt->kept[i] = data ? elems : 0;
    return 0;
}

/* The ABI's submit_rows: submit's checks on kept inputs and their rows' starts. */
NNC_RT_FN int nnc_rt_submit_rows(void *m, int entry, const int64_t *const *starts, int64_t batch) {
    nnc_rt *rt = m;
    if (!rt) return NNC_STATUS_ARG;
    const nnc_model_desc *d = rt->d;
    if (nnc_rt_may_queue(rt, rt->ops->submit_rows != NULL, "submit_rows") || nnc_rt_check_entry(rt, entry, batch))
        return rt->status;
    for (int i = 0; i < d->abi.ninputs; i++) {
        const nnc_tensor_info *t = &d->abi.inputs[i];
        if (!d->entry[entry].reads[i]) continue;
        if (!rt->kept || !rt->kept[i])
            return nnc_rt_fail(rt, NNC_STATUS_ARG, "%s_submit_rows: input '%s' is not kept (keep() it first)",
                               d->abi.name, t->name);
        if (!starts || !starts[i])
            return nnc_rt_fail(rt, NNC_STATUS_ARG, "%s_submit_rows: the starts of input '%s' are NULL", d->abi.name,
                               t->name);
        const int64_t row = nnc_rt_numel(t, 1), last = rt->kept[i] - row;
        for (int64_t r = 0; r < batch; r++)
            if (starts[i][r] < 0 || starts[i][r] > last)
                return nnc_rt_fail(rt, NNC_STATUS_VALUE,
                                   "%s_submit_rows: row %lld of input '%s' starts at %lld: its %lld values leave "
                                   "starts in [0, %lld]",
                                   d->abi.name, (long long)r, t->name, (long long)starts[i][r], (long long)rt->kept[i],
                                   (long long)last);
    }
    if (nnc_rt_check_init(rt, entry)) return rt->status;
    const int slot = rt->next_slot;
    if (d->entry[entry].advances_step) rt->step++;
    return nnc_rt_queued(rt, entry, batch, slot, rt->ops->submit_rows(rt, entry, starts, batch, slot));
}

/* The ABI's finish: the oldest call in flight, waited for; on success its outputs are current. */
NNC_RT_FN int nnc_rt_finish(void *m) {
    nnc_rt *rt = m;
    if (!rt) return NNC_STATUS_ARG;
    rt->status = 0;
    rt->msg[0] = 0;
    if (!rt->nflight) return nnc_rt_fail(rt, NNC_STATUS_ARG, "%s_finish: no call is in flight", rt->d->abi.name);
    const nnc_rt_flight f = rt->flight[rt->first_flight];
    rt->first_flight = (rt->first_flight + 1) % NNC_PIPELINE_DEPTH;
    rt->nflight--;
    rt->last = -1;
    const int rc = rt->ops->finish(rt, f.slot, f.entry, f.batch);
    if (rc) return rt->status = rc;
    rt->batch[f.entry] = f.batch;
    rt->last = f.entry;
    return 0;
}

/* For a device's finish: a pipelined call's outputs from the copies it made of them (`host`: of
 * the host block from its start, `stage`: of the entry's outputs in device memory, laid out as
 * rt->stage from stage_lo[entry]) into the places a run leaves them, where output() reads them. */
NNC_RT_FN void nnc_rt_outputs_take(nnc_rt *rt, int entry, int64_t batch, const char *host, const char *stage) {
    const nnc_model_desc *d = rt->d;
    for (int k = 0; k < d->abi.noutputs[entry]; k++) {
        const nnc_place *at = &d->entry[entry].outputs[k];
        const size_t bytes = nnc_rt_bytes(d, &d->abi.outputs[entry][k], batch);
        nnc_rt_stage *s = &rt->stages[entry][k];
        if (nnc_rt_on_device(rt->ops, at->block)) {
            memcpy(rt->stage + s->at, stage + (s->at - rt->stage_lo[entry]), bytes);
            s->fresh = 1;
        } else if (at->block == NNC_BLOCK_HOST) memcpy(rt->host[NNC_BLOCK_HOST] + at->offset, host + at->offset, bytes);
    }
}

NNC_RT_FN const char *nnc_rt_error(void *m) {
    return m ? ((nnc_rt *)m)->msg
             : "the model is NULL (did create fail? It does when out of memory, and create_in when its memory is NULL, "
               "smaller than memory_bytes() or not aligned)";
}

NNC_RT_FN void nnc_rt_set_comm(void *m, const nnc_comm *comm) {
    if (m) ((nnc_rt *)m)->comm = comm;
}

/* The ABI table's functions, as designated initializers: a description printed as C uses them
 * in its initializer, the CUDA backend in a compound literal. */
#define NNC_RT_ABI_FUNCTIONS(create_fn) \
    .create = (create_fn), .destroy = nnc_rt_destroy, .init = nnc_rt_init, .run = nnc_rt_run, .param = nnc_rt_param, \
    .state = nnc_rt_state, .output = nnc_rt_output, .get_step = nnc_rt_get_step, .set_step = nnc_rt_set_step, \
    .error = nnc_rt_error, .sync = nnc_rt_sync, .set_comm = nnc_rt_set_comm, .set_lr = nnc_rt_set_lr

/* ... and a device target's pipelined calls (the device has submit and finish). */
#define NNC_RT_ABI_PIPELINE \
    .input_buffer = nnc_rt_input_buffer, .submit = nnc_rt_submit, .finish = nnc_rt_finish, .keep = nnc_rt_keep, \
    .submit_rows = nnc_rt_submit_rows

/* ---- the typed API's behaviour (an ahead-of-time header declares NAME_init, NAME_output, ...) */

/* NAME_train_step, NAME_grad, NAME_eval: an application's arrays, which nothing has checked:
 * a train_step refuses a NaN or an infinity in them (nnc_rt_check_finite). */
NNC_RT_FN int nnc_rt_run_typed(void *m, int entry, const void *const *in, int64_t batch) {
    return nnc_rt_call(m, entry, in, batch, 1);
}

static const char *const nnc_rt_entry_fn_names[NNC_ENTRY_COUNT] = {"train_step", "grad", "eval", "accumulate"};

NNC_RT_FN int nnc_rt_init_model(void *m, uint64_t seed) {
    if (!m) return NNC_STATUS_ARG;
    nnc_rt_init(m, seed);
    return 0;
}

/* An output of the call that last succeeded (each entry has its own: the loss, the gradients
 * for grad, the metrics and outputs for eval), never another entry's. */
NNC_RT_FN const void *nnc_rt_output_named(void *m, const char *name) {
    nnc_rt *rt = m;
    if (!rt) return NULL;
    if (!name) {
        nnc_rt_null_arg(rt, "output", "name");
        return NULL;
    }
    const char *mn = rt->d->abi.name;
    if (rt->last < 0) {
        snprintf(rt->msg, sizeof rt->msg, "%s_output(\"%.100s\"): no train_step, grad or eval has succeeded since create/init",
                 mn, name);
        return NULL;
    }
    const nnc_tensor_info *t = rt->d->abi.outputs[rt->last];
    for (int k = 0; k < rt->d->abi.noutputs[rt->last]; k++)
        if (!strcmp(t[k].name, name)) return nnc_rt_output(rt, rt->last, k);
    snprintf(rt->msg, sizeof rt->msg, "%s_output: '%.100s' is not an output of %s_%s, the last call", mn, name, mn,
             nnc_rt_entry_fn_names[rt->last]);
    return NULL;
}

/* The last successful call's loss; NAN when there is none. */
NNC_RT_FN double nnc_rt_loss(void *m) {
    nnc_rt *rt = m;
    if (!rt || rt->last < 0 || rt->d->abi.noutputs[rt->last] < 1 || strcmp(rt->d->abi.outputs[rt->last][0].name, "loss"))
        return NAN;
    const void *l = nnc_rt_output(rt, rt->last, 0);
    if (!l) return NAN;
    return rt->d->abi.real_bytes == 8 ? *(const double *)l : (double)*(const float *)l;
}

NNC_RT_FN void *nnc_rt_param_named(void *m, const char *name, int64_t *numel) {
    nnc_rt *rt = m;
    if (numel) *numel = 0;
    if (!rt) return NULL;
    if (!name) {
        nnc_rt_null_arg(rt, "param", "name");
        return NULL;
    }
    for (int i = 0; i < rt->d->abi.nparams; i++)
        if (!strcmp(rt->d->abi.params[i].name, name)) {
            if (numel) *numel = nnc_rt_numel(&rt->d->abi.params[i], 1);
            return nnc_rt_param(rt, i);
        }
    snprintf(rt->msg, sizeof rt->msg, "%s_param: no parameter named '%.100s'", rt->d->abi.name, name);
    return NULL;
}

/* NAME_set_lr: the learning rate of the next steps, as torch's param_group["lr"] = lr.  Only a
 * model built with an lr_schedule keeps its rate as state ("lr"); another has it compiled in. */
NNC_RT_FN int nnc_rt_set_lr(void *m, double lr) {
    nnc_rt *rt = m;
    if (!rt) return NNC_STATUS_ARG;
    const nnc_model_desc *d = rt->d;
    if (!(lr >= 0 && lr < INFINITY))
        return nnc_rt_fail(rt, NNC_STATUS_VALUE, "%s_set_lr: the rate %g is not a finite number >= 0 (torch.optim "
                           "refuses it too); the rate is unchanged", d->abi.name, lr);
    for (int i = 0; i < d->abi.nstates; i++) {
        if (strcmp(d->abi.states[i].name, "lr")) continue;
        char *at = rt->host[NNC_BLOCK_STATE] + d->state[i].offset;
        if (d->abi.real_bytes == 8) *(double *)(void *)at = lr;
        else *(float *)(void *)at = (float)lr;
        if (nnc_rt_on_device(rt->ops, NNC_BLOCK_STATE))
            return rt->ops->copy(rt, NNC_BLOCK_STATE, d->state[i].offset, at, (size_t)d->abi.real_bytes, NNC_SYNC_TO_DEVICE);
        return 0;
    }
    return nnc_rt_fail(rt, NNC_STATUS_ENTRY, "%s_set_lr: this model's learning rate is a constant compiled into its "
                       "update; build it from a train section with an lr_schedule to set it", d->abi.name);
}

/* ---- the CPU as a device: host memory is its memory; run is the generated entry dispatch ------ */

/* A block of 4 MB or more starts on a 2 MB boundary and asks Linux for huge pages before its
 * first touch (where transparent huge pages are "madvise", as Debian's default is): a step's
 * operands then miss the TLB 512 times less (convnet.nn's Adam update of fc1.weight, 90 MB a
 * step on 2 threads: 5.76-5.87 -> 5.02-5.16 ms).  A refusal only leaves the small pages. */
#define NNC_RT_HUGE ((size_t)2 << 20)
NNC_RT_FN void *nnc_rt_host_alloc(nnc_rt *rt, size_t bytes) {
    (void)rt;
    size_t n = nnc_rt_round64(bytes ? bytes : 1);   /* C11: a multiple of the alignment */
    const int huge = n >= 2 * NNC_RT_HUGE;
    if (huge) n = (n + NNC_RT_HUGE - 1) / NNC_RT_HUGE * NNC_RT_HUGE;
    void *p = aligned_alloc(huge ? NNC_RT_HUGE : 64, n);
#if defined(__linux__)
    if (p && huge) (void)madvise(p, n, MADV_HUGEPAGE);
#endif
    if (p) memset(p, 0, n);
    return p;
}

NNC_RT_FN void nnc_rt_host_free(nnc_rt *rt, void *p) {
    (void)rt;
    free(p);
}

#define NNC_RT_CPU_DEVICE(run_fn) \
    {.name = "cpu", .device_blocks = 0, .host_alloc = nnc_rt_host_alloc, .host_free = nnc_rt_host_free, .run = (run_fn)}
#endif /* NNC_RUNTIME_IMPLEMENTATION */
