/* check.h - `--check-against cpu`: every launch of the CUDA target's step is run again on the CPU
 * from the same inputs, and the first value where they differ by more than the op's numerics
 * allow is named (driver/check.c, driver/check_bound.c). */
#ifndef NNC_CHECK_H
#define NNC_CHECK_H
#include "../codegen/codegen.h"

/* Wraps two loaded models of the same model into one that runs and compares both: gpu, the
 * target checked, and cpu, the reference, both compiled unfused with PipelineOpts.keep_values,
 * the reference loaded with BuildOpts.launch_access (gbo and cbo: how each was built).  Every
 * tolerance is multiplied by `factor` (--check-tol).  Takes ownership of gpu and cpu; NULL
 * (and err) when the reference cannot run launch by launch. */
LoadedModel *check_pair(const Backend *gbe, LoadedModel *gpu, const Program *pg, const BuildOpts *gbo,
                        const Backend *cbe, LoadedModel *cpu, const Program *pc, const BuildOpts *cbo, double factor,
                        char *err, size_t n);
/* Prints the summary (when report is not NULL) and frees both models and the pair. */
void check_pair_finish(LoadedModel *lm, FILE *report);
#endif
