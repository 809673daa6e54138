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

#define NNC_ABI_VERSION 1

enum { NNC_ENTRY_TRAIN = 0, NNC_ENTRY_GRAD = 1, NNC_ENTRY_EVAL = 2 };
enum { NNC_TYPE_F32 = 0, NNC_TYPE_I32 = 1, NNC_TYPE_F64 = 2 };
enum { NNC_SYNC_TO_DEVICE = 0, NNC_SYNC_TO_HOST = 1 };

typedef struct {
    const char *name;     /* "x", "fc1.weight", "fc1.weight.exp_avg", "loss", "grad.fc1.weight" */
    int dtype;            /* NNC_TYPE_*; f32 tensors are f64 in a model built with real = double */
    int rank;
    int64_t dims[4];      /* -1 marks the batch dimension */
} nnc_tensor_info;

typedef struct nnc_model_abi {
    uint32_t abi_version;
    const char *name;             /* model name */
    int real_bytes;               /* 4 (float) or 8 (double, for gradient checks) */
    int64_t batch_max;            /* largest batch a call may pass */
    int ninputs, nparams, nstates;
    const nnc_tensor_info *inputs, *params, *states;
    int noutputs[3];              /* per entry */
    const nnc_tensor_info *outputs[3];
    size_t param_bytes, state_bytes, act_bytes;   /* memory blocks the model uses */
    void *(*create)(void *mem);   /* mem: NULL, or param_bytes+state_bytes+act_bytes, 64-aligned */
    void (*destroy)(void *m);
    void (*init)(void *m, uint64_t seed);          /* parameters from the seed, state zeroed, step 0 */
    int (*run)(void *m, int entry, const void *const *inputs, int64_t batch);   /* 0 or an error */
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
} nnc_model_abi;
#endif
