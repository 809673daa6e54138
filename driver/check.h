/* check.h - `--check-against cpu`: the CUDA and CPU targets run every step side by side, and the
 * first value where they differ beyond tolerance is named (runtime/check.c). */
#ifndef NNC_CHECK_H
#define NNC_CHECK_H
#include "../codegen/codegen.h"

/* Wraps two loaded models of the same model (both compiled with PipelineOpts.keep_values) into
 * one that runs and compares both.  Takes ownership of gpu and cpu. */
LoadedModel *check_pair(const Backend *gbe, LoadedModel *gpu, const Program *pg, const Backend *cbe,
                        LoadedModel *cpu, const Program *pc, double tol);
/* Prints the summary (when report is not NULL) and frees both models and the pair. */
void check_pair_finish(LoadedModel *lm, FILE *report);
#endif
