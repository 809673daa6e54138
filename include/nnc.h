/* nnc.h - compile and run .nn models from C.
 *
 *   #include "nnc.h"
 *   char err[4096];
 *   nnc_options opt = nnc_default_options();
 *   opt.f64 = 1;                                  // double precision, e.g. for gradient checks
 *   nnc_compiled *c = nnc_compile("t.nn", source_text, &opt, err, sizeof err);
 *   if (!c) { fputs(err, stderr); exit(1); }      // err holds file:line:col diagnostics
 *   const nnc_model_abi *abi = nnc_abi(c);
 *   void *m = nnc_model(c);                       // initialised from the train section's seed
 *   abi->init(m, 42);                             // or from another one
 *   const void *inputs[] = {x, y};                // in the order the model declares them
 *   abi->run(m, NNC_ENTRY_GRAD, inputs, batch);   // or NNC_ENTRY_TRAIN, NNC_ENTRY_EVAL
 *   const double *loss = abi->output(m, NNC_ENTRY_GRAD, 0);   // then "grad.<param>" ...
 *   nnc_free(c);
 *
 * Training as the command line does it, on the train section's data:
 *
 *   nnc_fit_options f = nnc_default_fit_options();
 *   f.metrics = "run.jsonl";                      // --metrics; also tensorboard, save, log_every
 *   if (nnc_fit(c, &f) != 0) exit(1);             // the reason is on stderr, as the CLI prints it
 *   nnc_save(c, "ckpt.safetensors", err, sizeof err);   // what --save writes: --resume takes it
 *
 * The command-line tool is a thin layer over this plus the training loop (train/train.c); both go
 * through driver/compile.c, so a model compiled here and fitted trains bit for bit as `nnc
 * model.nn` does.  libnnc.so (cmake target nnc_shared) exports these functions only; the Python
 * module (python/nnc) loads it. */
#ifndef NNC_H
#define NNC_H
#include <stddef.h>

#include "nnc_abi.h"

typedef struct {
    int target;             /* 0 cpu, 1 cuda */
    int fuse;               /* 1: fuse elementwise ops (default) */
    int f64;                /* compute in double */
    int batch;              /* > 0: overrides the train section's batch (the largest batch a call takes) */
    int strict_devices;
    int use_cache;          /* reuse compiled code from the kernel cache */
    const char *cc;         /* C compiler, default $CC or cc */
    int precision;          /* 0: the train section's; 1 f32, 2 bf16, 3 f16 (as --precision) */
    int epochs; /* > 0: replaces the train section's epochs (as --epochs) */
    int has_lr; /* 1: `lr` replaces the optimizer's learning rate (as --lr) */
    double lr;
    int has_seed; /* 1: `seed` replaces the train section's (as --seed) */
    unsigned long long seed;
} nnc_options;

typedef struct nnc_compiled nnc_compiled;

nnc_options nnc_default_options(void);
/* Parses, checks, runs every pass, builds the model and initialises it from the train section's
 * seed (0 without one); NULL with `err` filled on failure (also for a NULL source or options;
 * `file` may be NULL, `err` too).  The functions below return NULL for a NULL `c`, and
 * nnc_free(NULL) does nothing. */
nnc_compiled *nnc_compile(const char *file, const char *source, const nnc_options *o, char *err, size_t errlen);
const nnc_model_abi *nnc_abi(const nnc_compiled *c);
void *nnc_model(const nnc_compiled *c);
/* The generated source (C or CUDA) of a compiled model. */
const char *nnc_source(const nnc_compiled *c);
void nnc_free(nnc_compiled *c);
/* The train section's seed after the options (what nnc_compile initialised the model with). */
unsigned long long nnc_seed(const nnc_compiled *c);
/* "0.1.0" */
const char *nnc_version(void);

/* What `nnc model.nn [flags]` does after compiling: the train section's data, epochs, shuffling,
 * test set, schedule, messages and files.  One difference: it trains the model as it stands
 * (nnc_compile's initialisation, or what the caller did since: train steps, loaded parameters),
 * where the CLI starts from its seed or --load. */
typedef struct {
    int epochs; /* > 0: this many epochs (as --epochs); 0: the train section's */
    int quiet; /* no epoch lines (as --quiet) */
    int progress; /* -1: the progress line when stderr is a terminal (the CLI's); 0 never; 1 always */
    long log_every; /* > 0: as --log-every N */
    const char *metrics; /* as --metrics FILE, or NULL */
    const char *tensorboard; /* as --tensorboard DIR, or NULL */
    const char *save; /* as --save FILE (at the end; on SIGINT/SIGTERM too), or NULL */
} nnc_fit_options;

nnc_fit_options nnc_default_fit_options(void);
/* 0, or the exit status the CLI would have (1: an error, 130/143: interrupted), with the reason
 * printed to stderr; -1 for a NULL argument or a model without a train section. */
int nnc_fit(nnc_compiled *c, const nnc_fit_options *o);
/* Writes the parameters, optimizer state, step and position as --save does (safetensors; the
 * CLI's --load and --resume read it).  0, or -1 with `err` filled. */
int nnc_save(nnc_compiled *c, const char *path, char *err, size_t errlen);
#endif
