/* nnc.h - compile and run .nn models from C.
 *
 *   #include "nnc.h"
 *   char err[4096];
 *   nnc_options opt = nnc_default_options();
 *   opt.f64 = 1;                                  // double precision, e.g. for gradient checks
 *   nnc_compiled *c = nnc_compile("t.nn", source_text, &opt, err, sizeof err);
 *   if (!c) { fputs(err, stderr); exit(1); }      // err holds file:line:col diagnostics
 *   const nnc_model_abi *abi = nnc_abi(c);
 *   void *m = nnc_model(c);
 *   abi->init(m, 42);
 *   const void *inputs[] = {x, y};                // in the order the model declares them
 *   abi->run(m, NNC_ENTRY_GRAD, inputs, batch);   // or NNC_ENTRY_TRAIN, NNC_ENTRY_EVAL
 *   const double *loss = abi->output(m, NNC_ENTRY_GRAD, 0);   // then "grad.<param>" ...
 *   nnc_free(c);
 *
 * The command-line tool is a thin layer over this plus the training loop (train/train.c); both go through driver/compile.c. */
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
} nnc_options;

typedef struct nnc_compiled nnc_compiled;

nnc_options nnc_default_options(void);
/* Parses, checks, runs every pass and builds the model; NULL with `err` filled on failure
 * (also for a NULL source or options; `file` may be NULL, `err` too).  The functions below
 * return NULL for a NULL `c`, and nnc_free(NULL) does nothing. */
nnc_compiled *nnc_compile(const char *file, const char *source, const nnc_options *o, char *err, size_t errlen);
const nnc_model_abi *nnc_abi(const nnc_compiled *c);
void *nnc_model(const nnc_compiled *c);
/* The generated source (C or CUDA) of a compiled model. */
const char *nnc_source(const nnc_compiled *c);
void nnc_free(nnc_compiled *c);
#endif
