/* nnc_abi.h - the interface every compiled nnc model exports, on any backend.
 *
 * A model is an opaque handle plus this table of functions and tensor descriptions.  The
 * trainer (training loop, checkpoints, metrics) talks to models only through it, so it never
 * knows whether the step runs as generated C, from an ahead-of-time library, or as CUDA
 * kernels.  The generated C and each AOT header carry a copy of this text (codegen embeds this
 * file), guarded so the two copies never clash. */
#ifndef NNC_ABI_H
#define NNC_ABI_H
#include <stddef.h>
#include <stdint.h>

#define NNC_ABI_VERSION 5

/* The entry points.  ACCUM exists in a model built for gradient accumulation (accumulate > 1):
 * forward and backward of a micro-batch, its gradients (of loss / accumulate) added to the
 * group's, no update and no collective (DDP's no_sync); TRAIN then takes the group's last
 * micro-batch and makes the optimizer step with the group's sum, as a torch loop of
 * (loss / accumulate).backward() per micro-batch and one opt.step(). */
enum { NNC_ENTRY_TRAIN = 0, NNC_ENTRY_GRAD = 1, NNC_ENTRY_EVAL = 2, NNC_ENTRY_ACCUM = 3, NNC_ENTRY_COUNT = 4 };
/* BF16 and F16 (16-bit patterns) appear only among the values a model built for --check-against
 * keeps as outputs; parameters, state, inputs and the named outputs are never half. */
enum { NNC_TYPE_F32 = 0, NNC_TYPE_I32 = 1, NNC_TYPE_F64 = 2, NNC_TYPE_BF16 = 3, NNC_TYPE_F16 = 4, NNC_TYPE_U8 = 5 };
/* U8 (bytes, each scaled to a float) appears only as the type of an input's kept source (keep). */
enum { NNC_SYNC_TO_DEVICE = 0, NNC_SYNC_TO_HOST = 1 };

/* What a tensor is to a trainer (nnc_tensor_info.role): what to save, how to average, what to show. */
enum {
    NNC_ROLE_NONE = 0, /* an input, a parameter, optimizer state; an output of none of the kinds below */
    NNC_ROLE_LOSS = 1, /* output: the loss minimized (a mean over the batch's rows) */
    NNC_ROLE_MEAN = 2, /* output: a scalar metric; over a set, the mean weighted by each batch's rows */
    NNC_ROLE_COUNT = 3, /* output: a scalar metric that counts rows (accuracy); over a set, the sum of
                                the counts over the set's samples */
    NNC_ROLE_GRAD_NORM = 4, /* output of train_step: clip_grad_norm's total norm, before clipping */
    NNC_ROLE_GRAD = 5, /* output of grad: a parameter's gradient ("grad.fc1.weight") */
    NNC_ROLE_LR = 6, /* state: the learning rate, which set_lr writes */
    NNC_ROLE_GRAD_SUM = 7, /* state: a parameter's gradients summed over a group's micro-batches
                                (accumulate); meaningless between optimizer steps, so not saved */
    NNC_ROLE_OUTPUT = 8, /* output of eval: a named output that is not one number (logits,
                            predictions): per sample along a leading batch axis, or not */
};

typedef struct {
    const char *name;     /* "x", "fc1.weight", "fc1.weight.exp_avg", "loss", "grad.fc1.weight" */
    int dtype;            /* NNC_TYPE_*; f32 tensors are f64 in a model built with real = double */
    int rank;
    int64_t dims[4]; /* a negative d is the batch axis times -d: -1 is the batch, -32 the batch times 32 */
    int role; /* NNC_ROLE_* */
} nnc_tensor_info;

/* What an i32 input's values must be, from what reads them (nnc_model_abi.input_rules, one per
 * input): a trainer checks its data as it loads, so that a bad label names its file and sample
 * (cross_entropy's and embedding's kernels check again, naming a row of the batch; gather's
 * masks do not: a program feeding a compiled model checks its indices by this rule). */
typedef struct {
    int64_t bound; /* the values index this many classes or rows: each in [0, bound); 0: any */
    int has_ignore; /* 1: `ignore` is allowed too (cross_entropy's ignore_index: skipped) */
    int32_t ignore;
    const char *reader; /* what sets the bound: "cross_entropy", "accuracy", "embedding" or "index" (gather,
                           index_select, one_hot, nll_loss; NULL: none) */
    const char *at; /* its place in the model, "m.nn:6:8" */
} nnc_input_rule;

/* Bytes of a parameter's or a state's data (these have no batch axis). */
static inline size_t nnc_tensor_bytes(const nnc_tensor_info *t) {
    size_t n = t->dtype == NNC_TYPE_F64 ? 8 : t->dtype == NNC_TYPE_BF16 || t->dtype == NNC_TYPE_F16 ? 2 : 4;
    for (int i = 0; i < t->rank; i++) n *= (size_t)t->dims[i];
    return n;
}

/* Collectives for data-parallel training, supplied by the host: nnc's trainer under mpirun, or
 * an application that embeds a model and has its own communicator.  A model compiled for data-
 * parallel training (`collectives` > 0) calls them from its train step, for each trainable
 * parameter's gradient (buf: count elements of dtype NNC_TYPE_*, in host memory on the CPU):
 *   start(ctx, bucket, buf, count, dtype, last)   this process's gradient is ready: scale it by
 *       the process's share of the global batch (its rows / all rows) and add it to `bucket`;
 *       when `last` is 1 the bucket is complete and its sum over the processes may begin;
 *   wait(ctx, bucket, buf, count, dtype)          on return buf holds the bucket's sum for it.
 * Every process calls them in the same order; buf stays untouched between its start and wait.
 * They return 0, or non-zero to fail the step.  Without set_comm (or with NULL) a model with
 * collectives trains alone: the calls are skipped.  A GPU target may sum in device memory with
 * its own library (NCCL) instead, when device_sums is 1; it needs only the process's place, its
 * share, and a way to give every process the library's id:
 *   share(ctx)                   this process's rows / all rows of the current batch;
 *   bcast(ctx, buf, bytes)       process 0's bytes at buf to every process (0 or an error). */
typedef struct nnc_comm {
    void *ctx;
    int (*start)(void *ctx, int bucket, void *buf, int64_t count, int dtype, int last);
    int (*wait)(void *ctx, int bucket, void *buf, int64_t count, int dtype);
    int rank, size;
    int device_sums;
    double (*share)(void *ctx);
    int (*bcast)(void *ctx, void *buf, size_t bytes);
} nnc_comm;

typedef struct nnc_model_abi {
    uint32_t abi_version;
    const char *name;             /* model name */
    int real_bytes;               /* 4 (float) or 8 (double, for gradient checks) */
    int64_t batch_max;            /* largest batch a call may pass */
    int ninputs, nparams, nstates;
    const nnc_tensor_info *inputs, *params, *states;
    int noutputs[NNC_ENTRY_COUNT]; /* per entry */
    const nnc_tensor_info *outputs[NNC_ENTRY_COUNT];
    size_t param_bytes, state_bytes, act_bytes;   /* memory blocks the model uses */
    void *(*create)(void *mem);   /* mem: NULL, or param_bytes+state_bytes+act_bytes, 64-aligned */
    void (*destroy)(void *m);
    void (*init)(void *m, uint64_t seed);          /* parameters from the seed, state zeroed, step 0;
                                                      run refuses to start before it (5) */
    /* 0 or an error status; inputs are not scanned for NaN (an AOT train_step does that) */
    int (*run)(void *m, int entry, const void *const *inputs, int64_t batch);
    void *(*param)(void *m, int i);
    void *(*state)(void *m, int i);
    const void *(*output)(void *m, int entry, int k);
    int64_t (*get_step)(void *m);
    void (*set_step)(void *m, int64_t step);
    const char *(*error)(void *m);                 /* message for the last non-zero run */
    /* Backends whose memory is not host memory keep host mirrors of parameters and state:
     * NNC_SYNC_TO_HOST before reading param()/state(), NNC_SYNC_TO_DEVICE after writing them.
     * A no-op on the CPU. */
    void (*sync)(void *m, int direction);
    int collectives;              /* allreduces per train step (0: not built for data parallel) */
    void (*set_comm)(void *m, const nnc_comm *comm);   /* the host's collectives (above), or NULL */
    /* The learning rate of the steps from now on, as torch's param_group["lr"] = lr: what a
     * schedule sets (nnc's trainer per epoch or per step, an application as it likes).  A model
     * built with an lr_schedule keeps its rate as state ("lr"); another has it compiled into its
     * update and returns 3.  A device target writes its own copy of the rate only (no sync of the
     * other parameters and state).  0, or a status (error() says why; 6: not a finite rate >= 0). */
    int (*set_lr)(void *m, double lr);
    const char *batch_name; /* the batch dimension as the model names it ("B") */
    const nnc_input_rule *input_rules; /* per input (above) */
    /* Pipelined calls, where the target computes beside the host (CUDA; NULL on the CPU, whose
     * calls run to their end): the host prepares the next batch while a call runs, and reads a
     * call's outputs one call later.  At most NNC_PIPELINE_DEPTH calls are in flight.
     *   input_buffer(m, i)   where to put input i of the next submit (pinned host memory, one
     *                        of a ring, sized at batch_max); NULL when the ring is full (finish
     *                        one first).  Inputs written there are not copied again.
     *   submit(m, entry, inputs, batch)   checks the call as run() does, advances the step and
     *                        queues it without waiting: its inputs' copies go to the device
     *                        while earlier calls run.  Inputs elsewhere are copied into the
     *                        ring first, so the caller may reuse them at once.  0 or a status.
     *   finish(m)            waits for the oldest call in flight; its status (error() says
     *                        why), and on 0 output() gives its outputs, as after run().
     * run() stays synchronous (it may be called between them); sync(), param() and state() see
     * the parameters after every call submitted. */
    void *(*input_buffer)(void *m, int i);
    int (*submit)(void *m, int entry, const void *const *inputs, int64_t batch);
    int (*finish)(void *m);
    /* Inputs kept in the device's memory (CUDA on one GPU; NULL elsewhere): a data set copied to
     * the device once, each batch then gathered there inside its pipelined call, so that only the
     * rows' positions go up per call.
     *   keep(m, i, data, elems, type, scale, if_room)   copies `elems` values of `type` from
     *                        `data` for input i: NNC_TYPE_F32 for a float input (f32 or f64),
     *                        NNC_TYPE_U8 bytes for one (each becomes (float)byte * scale, then
     *                        the input's type), NNC_TYPE_I32 for an i32 input.  The same data,
     *                        elems, type and scale as another input kept before share its copy
     *                        (so a source changed since must be let go and kept again); input
     *                        i kept again is copied again.  With
     *                        if_room, nothing is kept (status 7) unless the copy takes at most
     *                        a quarter of the device's free memory.  data NULL: input i's copy
     *                        is let go.  0 or a status; a kept input is kept until destroy().
     *   submit_rows(m, entry, starts, batch)   submit() on kept inputs: row r of input i is
     *                        the row's elements of its kept source from element starts[i][r]
     *                        on (starts[i] NULL for an input the entry does not read).  The
     *                        starts are copied: the caller may reuse them at once. */
    int (*keep)(void *m, int i, const void *data, int64_t elems, int type, float scale, int if_room);
    int (*submit_rows)(void *m, int entry, const int64_t *const *starts, int64_t batch);
} nnc_model_abi;

#define NNC_PIPELINE_DEPTH 2 /* calls in flight at most: one running, the next one queued */
#endif
