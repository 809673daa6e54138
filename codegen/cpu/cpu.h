/* cpu.h - what the CPU backend shares with the ahead-of-time writer (aot.c). */
#ifndef NNC_CPU_H
#define NNC_CPU_H
#include <fcntl.h>

#include "../codegen.h"

void render_program(const Program *p, const BuildOpts *o, Str *s);
/* render_c_model.c: the generated C around the kernels (its file-top comment has the layout). */
void render_c_prelude(Str *s, const Program *p, const BuildOpts *o);
void render_c_model(Str *s, const Program *p, const nnc_model_desc *d);
/* `text` with every '@' replaced by the model's C name `mn`. */
void render_template(Str *s, const char *text, const char *mn);
const char *cpu_cc(const BuildOpts *o);
/* Shell-like words of CC or NNC_CFLAGS (quotes and backslash; no expansions), NULL-terminated. */
char **cpu_split_words(const char *s, int *count);
void cpu_words_free(char **words);
int cpu_run_tool(char *const *argv, const char *log);
pid_t cpu_spawn_tool(char *const *argv, const char *log);   /* started, or -1 */
int cpu_wait_tool(pid_t pid);                               /* its exit status, or -1 */
bool cpu_write_file(const char *path, const char *text, char *err, size_t n);
/* dialect_c.c: a reduction whose C loops add into the `real` output (a scatter) rather than a
 * double accumulator. */
bool c_reduce_sums_in_real(const Graph *g, const Launch *L);
bool aot_write(const Program *p, const BuildOpts *o, const char *dir, char *err, size_t n);
/* cpu_profile.c: Backend.run_timed (a model built with launch_access) and Backend.ceilings. */
int cpu_run_timed(LoadedModel *lm, const Program *p, int entry, const void *const *in, int64_t batch, double *t);
void cpu_ceilings(LoadedModel *lm, const BuildOpts *o, DeviceCeilings *out);
#endif
