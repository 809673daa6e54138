/* profile.h - `--profile N`: every launch of a training step timed on the device's own clock, with
 * what it moves and computes against the device's ceilings, sorted by time (driver/profile.c). */
#ifndef NNC_PROFILE_H
#define NNC_PROFILE_H
#include "../codegen/codegen.h"
#include "../train/train.h"

typedef struct Profile Profile;
/* The profiler of a loaded model (its backend must have run_timed; the CPU's model built with
 * BuildOpts.launch_access): `steps` steps after a warm-up, the report printed to `out`.  The
 * trainer calls hook->run (TrainOpts.profile) with --bench's batch.  NULL (and err) when the
 * target cannot time its launches. */
Profile *profile_new(const Backend *be, LoadedModel *lm, const Program *p, const BuildOpts *bo, int steps, FILE *out,
                     char *err, size_t n);
const TrainProfile *profile_hook(Profile *pr);
void profile_free(Profile *pr);
#endif
