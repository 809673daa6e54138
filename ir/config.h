/* config.h - the train section as plain data (data sources, optimizer, batch, epochs, seed),
 * each setting held once; with the Graph, it is the Model the front end hands on (ir.h).  The
 * front end fills it from the section and the command line's overrides (resolve_train_config,
 * the one owner of its final values); the passes and the trainer only read it.  Nothing here
 * depends on how it was parsed, nor on the Graph: the trainer includes it without ir.h. */
#ifndef NNC_CONFIG_H
#define NNC_CONFIG_H
#include "base.h"
#include "util.h"

typedef enum {
    SRC_NONE,
    SRC_IDX, /* idx(path, scale=1): IDX file, .gz allowed */
    SRC_NPY, /* npy(path, scale=1) */
    SRC_CSV, /* csv(path, first=0, count=all, scale=1, header): columns [first, first+count) */
    SRC_RANDN, /* randn(n, d...): standard normal from the seed */
    SRC_RAND, /* rand(n, d...): uniform [0,1) from the seed */
    SRC_TOKENS, /* tokens(path, block_size, dtype): windows of a token stream, for two inputs (shift) */
} SourceKind;

typedef struct {
    SourceKind kind;
    const char *path;
    double scale;
    int rank;
    int64_t dims[IR_IO_RANK];
    int64_t first, count;
    int header;                  /* csv: 1 first line is a header, 0 it is data, -1 detect */
    /* tokens: the window length as written (0: not written, the inputs' row), the file's format
     * (io/data.h's nnc_tokens_format: 0 llm.c's header or raw uint16), and what this input reads
     * of each window: shift 0 its first `block` tokens, 1 the `block` tokens after the first
     * (nanoGPT's x and y); `pair` names the other input the same call feeds */
    int64_t block;
    int tok_format;
    int shift;
    const char *pair;
    SrcLoc loc;
    SrcLoc scale_loc;            /* where scale= was written (line 0: it was not) */
    /* A relative path as the model wrote it (NULL: absolute, or no file).  The driver joins it to
     * the model file's folder in `path`; from_cwd: the model came from a pipe, so the current
     * directory is the only folder there is.  For the message when the file cannot be read. */
    const char *written;
    bool from_cwd;
} DataSource;

typedef struct {
    const char *input; /* the input's name (the trainer binds by it: nnc_model_abi.inputs) */
    int node; /* its INPUT node (the front end's and the passes') */
    DataSource train, test;
} DataBind;

typedef enum { OPT_SGD, OPT_ADAM, OPT_ADAMW } OptKind;

/* torch.cuda.amp.GradScaler's dynamic loss scaling: the loss's gradient seeded with `scale`,
 * gradients unscaled before the update; a step whose gradients hold an inf or NaN is skipped
 * and the scale multiplied by backoff, and after `interval` clean steps by growth.  On by
 * default with precision = f16 (loss_scale = dynamic(...) or none in the train section). */
typedef struct {
    bool on;
    double init, growth, backoff;
    double interval;
    SrcLoc loc; /* where loss_scale was written; line 0: it was not, so resolve_train_config
                                    gives GradScaler's defaults, on exactly with f16 */
} ScalerConfig;

/* The optimizer as torch.optim's constructor takes it; passes/optimizer.c builds its update. */
typedef struct {
    OptKind kind;
    double lr, momentum, dampening, weight_decay, beta1, beta2, eps;
    bool nesterov;
    bool lr_state; /* the rate is the state tensor "lr" (a schedule sets it), not a constant */
    /* no_decay = ["bias", "norm", ...]: the parameters of a second param group, updated with
     * weight_decay 0 (NULL-terminated; NULL: one group).  The front end marks them
     * (Node.no_decay): "bias" names ending in bias, "norm" a norm layer's weight and bias,
     * "embedding" an embedding's table, any other text names containing it. */
    const char **no_decay;
    SrcLoc no_decay_loc;
    SrcLoc loc;
} OptConfig;

/* torch.optim.lr_scheduler's schedules in their closed forms (sched_lr): the learning rate after
 * e scheduler.step() calls from the optimizer's lr, where e counts epochs (interval = "epoch",
 * the default: stepped after each epoch) or optimizer steps (interval = "step", as Lightning's
 * scheduler interval; warmup_cosine's default).  With one, the rate is optimizer state ("lr",
 * saved as optimizer.lr) that the trainer sets through the ABI's set_lr before each epoch or
 * step. */
typedef enum {
    SCHED_NONE,
    SCHED_STEP, /* step_lr(step_size, gamma=0.1): lr * gamma^floor(e / step_size) */
    SCHED_EXPONENTIAL, /* exponential_lr(gamma): lr * gamma^e */
    SCHED_COSINE, /* cosine_lr(T_max=epochs, eta_min=0): eta_min + (lr - eta_min)(1 + cos(pi e / T_max)) / 2 */
    SCHED_LINEAR, /* linear_lr(start_factor=1/3, end_factor=1, total_iters=5):
                            lr * (start + (end - start) min(e, total) / total) */
    SCHED_WARMUP_COSINE, /* warmup_cosine(warmup, max_steps=steps, min_lr=0): nanoGPT's get_lr, e < warmup:
                            lr (e + 1) / (warmup + 1); e > max_steps: min_lr; else min_lr + (lr - min_lr)
                            (1 + cos(pi (e - warmup) / (max_steps - warmup))) / 2 */
} SchedKind;

typedef enum { SCHED_PER_EPOCH, SCHED_PER_STEP } SchedInterval;

typedef struct {
    SchedKind kind;
    double step_size, gamma, t_max, eta_min, start_factor, end_factor, total_iters; /* t_max 0: the run's length */
    double warmup, max_steps, min_lr; /* warmup_cosine; max_steps 0: the run's optimizer steps */
    int interval; /* SchedInterval: what e counts */
    SrcLoc loc;
} SchedConfig;

/* data_on_device = auto/true/false (the words' order): keep the training set in the GPU's memory
 * and gather each batch there (auto: when it takes at most a quarter of the GPU's free memory). */
typedef enum { DATA_DEV_AUTO, DATA_DEV_ON, DATA_DEV_OFF } DataOnDevice;

/* What products compute in (torch.autocast's lower precision; passes/autocast.c). */
typedef enum { PREC_F32, PREC_BF16, PREC_F16 } Precision;

typedef struct {
    bool present;                /* the model has a train section */
    DataBind *data;
    int ndata;
    int64_t batch;
    int epochs;
    uint64_t seed;
    Device device;
    bool device_auto; /* device = auto: cuda when a GPU is there, else cpu (the driver decides) */
    bool shuffle;
    OptConfig opt;
    SchedConfig sched;
    Precision precision;
    ScalerConfig scaler; /* loss_scale */
    double clip_norm; /* > 0: torch.nn.utils.clip_grad_norm_(max_norm) before the update */
    double clip_value; /* > 0: torch.nn.utils.clip_grad_value_(clip_value) before the update */
    int accumulate; /* micro-batches per optimizer step (1: none): passes/accumulate.c, the trainer's groups */
    int data_on_device; /* DataOnDevice: the training set kept in the GPU's memory (train.c) */
    SrcLoc loc;
} TrainConfig;

/* Values the command line puts in place of the train section's: an explicit value wins over
 * the file's, 0 included (resolve_train_config). */
typedef struct {
    bool has_epochs, has_batch, has_seed, has_lr, has_momentum, has_precision, has_clip, has_data_dev;
    long epochs, batch;
    unsigned long long seed;
    double lr, momentum;
    double clip_norm; /* --clip-grad-norm: replaces the file's clipping; 0 turns it off */
    Precision precision;
    DataOnDevice data_dev; /* --data-on-device */
} TrainOverrides;
#endif
