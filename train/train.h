/* train.h - the training loop and evaluation, over any loaded model (nnc_model_abi). */
#ifndef NNC_TRAIN_H
#define NNC_TRAIN_H
#include "../include/nnc_abi.h"
#include "comm.h"
#include "dataset.h"

/* A loaded model as the trainer sees it, on any backend: the ABI table and the instance.
 * upgrade, when set, is a build of the model on its way (the CPU's tiered start).  With abi
 * NULL the first build is still compiling: upgrade(wait) waits for it (false, err filled, when
 * it failed).  Else a faster build is coming: the trainer calls upgrade between steps; once
 * that build is ready (wait: block until it is) it takes over the training so far.  True when
 * abi and m changed; upgrade clears itself when no more will come. */
typedef struct ModelRef {
    const nnc_model_abi *abi;
    void *m;
    bool (*upgrade)(struct ModelRef *ref, bool wait, char *err, size_t n);
    void *upgrade_ctx;
    /* The model's tables as its build will export them (no functions), there before the build is
     * loaded: what the data loads against while it compiles.  NULL: abi's. */
    const nnc_model_abi *info;
} ModelRef;

/* --profile: what --bench's loop hands its batch to once it has timed its steps.  run() profiles
 * the step on that batch (`in`, `batch` rows; step_s: the median step --bench measured) and
 * prints its report; false with the error printed. */
typedef struct TrainProfile {
    void *ctx;
    bool (*run)(void *ctx, const void *const *in, int64_t batch, double step_s);
} TrainProfile;

typedef struct {
    int epochs;
    uint64_t seed;
    bool shuffle;
    bool quiet;
    bool verbose; /* --verbose: say where the training set's batches are gathered (data_on_device) */
    bool progress;              /* a live progress bar (stderr is a terminal) */
    long log_every; /* > 0: a plain progress line every N steps, and only the epoch lines of
                                   epochs in which such a step fell (and the last) */
    const char *metrics_path;   /* JSON lines */
    const char *tensorboard; /* a directory for TensorBoard event files (tensorboard.h), or NULL */
    const char *save_path;
    const char *load_path;
    bool eval_only;
    const char *eval_out;       /* with eval_only: non-scalar outputs over the set (safetensors) */
    int bench_steps;            /* > 0: time this many steps and print JSON */
    const TrainProfile *profile; /* with bench_steps: profile the step after timing it (no JSON) */
    const char *source_file;
    double t_process;           /* CLOCK_MONOTONIC seconds when the process started */
    long save_every;            /* > 0: checkpoint to save_path every N steps */
    bool resume;                /* continue from save_path if it exists */
    bool fresh_optimizer;       /* with resume: parameters and position only; the optimizer starts at step 0 */
    const char *cache_dir;      /* decompressed data files are cached here (NULL: no cache) */
    int save_half;              /* --save-dtype: 0, or NNC_DT_BF16 / NNC_DT_F16 (parameters only) */
    /* Data parallel (comm non-NULL): every global batch of `global_batch` rows is split over the
     * processes, each running the step on its share; process 0 alone prints, writes metrics and
     * checkpoints (the others have quiet, no metrics, and no_write). */
    Comm *comm;
    int64_t global_batch;
    bool no_write;              /* never write --save (another process does) */
    bool keep_params; /* train the model as it stands: no initialisation from the seed (the library) */
    struct TrainPos *end; /* if set: where training stood at the end (the library's next save) */
    int64_t *run_steps; /* if set: the run's optimizer steps, once its data is loaded (ditto) */
} TrainOpts;

double train_now(void);

/* Trains, evaluates or benchmarks the model over the ABI as the train section `t` (overrides
 * applied) says; returns the process exit status. */
int train_run(const TrainConfig *t, ModelRef *lm, const TrainOpts *o);
/* A schedule's learning rate after e of its intervals (epochs, or optimizer steps with interval
 * = "step"; 0 for the first) in a run of `length` of them, from the base rate lr
 * (torch.optim.lr_scheduler's closed forms, nanoGPT's get_lr; SCHED_NONE: lr). */
double sched_lr(const SchedConfig *s, double lr, int64_t e, int64_t length);
/* Where training stands, saved in a checkpoint's metadata so a resumed run continues exactly. */
typedef struct TrainPos {
    int epoch;                  /* 1-based epoch in progress (or just finished, with samples = n) */
    long long samples;          /* samples of that epoch already done: in samples, not batches, so
                                   a run resumed with another --batch continues at the same place */
    unsigned long long seed;
    bool has_loss_sum; /* loss_sum is known (older checkpoints did not keep it) */
    double loss_sum; /* the epoch's sum of loss * rows so far: its mean loss, resumed */
} TrainPos;

/* The run's hyperparameters as a checkpoint records them: metadata "nnc_<key>" = value, as the
 * train section would write it ("lr" = "0.001", "lr_schedule" = "step_lr(step_size=1, gamma=0.5)";
 * "batch" is the global batch of every process together).  hparams.c. */
#define HPARAM_MAX 16
typedef struct {
    int n;
    struct {
        const char *key;        /* "lr" */
        char value[128];
    } p[HPARAM_MAX];
} Hparams;
struct nnc_st_file;
/* This run's, from its train section (overrides applied), its global batch and its length in
 * epochs and optimizer steps (0: not known; a schedule's length defaults to one of them). */
void hparams_of(Hparams *h, const TrainConfig *t, int64_t global_batch, int epochs, int64_t steps);
/* A file's; false when it records none (a file from PyTorch or from an older nnc). */
bool hparams_read(Hparams *h, const struct nnc_st_file *f);
/* The value of key, or NULL. */
const char *hparams_get(const Hparams *h, const char *key);

/* Writes parameters, optimizer state, tp and the hyperparameters hp (NULL: none).
 * half: 0, or NNC_DT_BF16 / NNC_DT_F16 for a parameters-only export in that type (--save-dtype). */
bool checkpoint_save(const ModelRef *lm, const char *path, const TrainPos *tp, int half, const Hparams *hp, char *err,
                     size_t n);
/* False with err naming the first parameter and element that is NaN or Inf. */
bool checkpoint_params_finite(const ModelRef *lm, char *err, size_t n);
/* What checkpoint_load found besides the tensors it loaded. */
typedef struct {
    int states; /* the model's optimizer state tensors (not the rate, which the trainer sets, nor gradient sums) */
    int states_missing;         /* how many of them the file lacks (a parameters-only export, another program's file) */
    char first_missing[512];    /* the first of those, as the file would name it: "optimizer.w1.exp_avg" */
    bool has_hparams;           /* the file records hyperparameters: */
    Hparams hparams;            /* those */
} CkptInfo;
/* Reads them back: the parameters (all present, of the model's shapes, finite), with_state the
 * optimizer state and the step too (state tensors the file lacks are left as they are), and tp.
 * Every metadata field is parsed strictly and range-checked (the error names the file, the
 * field, its value and the valid range); tp->samples is checked against the data set by the
 * caller, which knows its size.  info may be NULL. */
bool checkpoint_load(ModelRef *lm, const char *path, bool with_state, TrainPos *tp, CkptInfo *info, char *err,
                     size_t n);
#endif
