/* compile.h - the one way from .nn text to a planned Program and a loaded model.
 *
 * The command line (main.c) and the library (api.c, include/nnc.h) both call it, so they name
 * the model, bound the batch, pick the target and the cache directory the same way:
 *
 *   Compiled c;
 *   CompileOpts o = {.file = "mlp.nn", .source = text, .diag_out = stderr, .fuse = true};
 *   if (!compile_model(&c, &o, err, sizeof err)) ...    // err, or diagnostics already printed
 *   LoadedModel *lm = compile_load(&c, &build, err, sizeof err);
 *   ...
 *   compile_free(&c);                                    // after unloading lm */
#ifndef NNC_COMPILE_H
#define NNC_COMPILE_H
#include "../codegen/codegen.h"

typedef struct {
    const char *file;           /* shown in diagnostics; names the model ("mlp.nn" -> mlp) */
    const char *source;         /* the whole model text (NUL-terminated) */
    FILE *diag_out;             /* where diagnostics are printed */
    const char *target; /* "cpu", "cuda" or "auto" (cuda if a GPU is there); NULL: the train section's */
    const char *data_dir; /* the folder relative data paths are read from: the model file's; NULL:
                                   the current directory (a model from a pipe or a string) */
    TrainOverrides over;
    bool fuse, strict_devices, keep_values;
    /* Data parallel (under mpirun): `world` processes share every batch of the train section,
     * so each compiles for its share (ceil(batch / world) rows) with allreduce nodes between
     * the gradients and the update, exchanged in buckets of bucket_bytes (0: 25 MiB). */
    bool data_parallel;
    int world;
    int64_t bucket_bytes;
    const char *dump_after;     /* --dump-after PASS (or "all": --emit ir) */
    FILE *dump;
} CompileOpts;

typedef struct {
    Arena arena;
    Diag diag;
    Model *m;                   /* the model and its train section, overrides applied */
    Program p;                  /* after every pass */
    const Backend *be;          /* the target's backend; NULL if this nnc was built without it */
    char device_note[320]; /* --target auto / device = auto: what it chose and why, one line; else "" */
} Compiled;

/* Parses, applies the overrides, runs every pass.  False on failure: `err` holds a message, or
 * is empty when the diagnostics (c->diag.errors of them) were printed to diag_out.  Call
 * compile_free either way. */
bool compile_model(Compiled *c, const CompileOpts *o, char *err, size_t n);
/* Renders, builds (or finds in the cache) and loads the program; NULL with `err` filled. */
LoadedModel *compile_load(Compiled *c, const BuildOpts *bo, char *err, size_t n);
/* The model's ABI tables as a build with `bo` exports them, without its functions: what the
 * trainer reads its data against while the build compiles (ModelRef.info).  In c's arena. */
const nnc_model_abi *compile_tables(Compiled *c, const BuildOpts *bo);
void compile_free(Compiled *c);

/* The compile cache: $XDG_CACHE_HOME/nnc, else ~/.cache/nnc (arena copy), or NULL when the
 * user asked for none or there is no home. */
const char *compile_cache_dir(Arena *a, bool use_cache);
#endif
