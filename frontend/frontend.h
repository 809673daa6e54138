/* frontend.h - from .nn text to a checked Graph plus the training configuration.
 *
 * nn_load_model parses (parser.y) and elaborates (elab.c): blocks are instantiated like
 * nn.Modules, names resolved, shapes and dtypes inferred and checked, and the `train` section
 * read into a TrainConfig.  All errors go to the Diag with the model file's locations. */
#ifndef NNC_FRONTEND_H
#define NNC_FRONTEND_H
#include "../ir/ir.h"

/* "models/mlp.nn" -> "mlp", "int.nn" -> "int_", "2d.nn" -> "m_2d": the prefix of every symbol
 * of the generated code, a C identifier that cannot collide with C, C++, CUDA or the headers
 * (names.c has the rule).  nn_load_model applies it to the name it is given, so any caller's
 * name is safe; applying it again changes nothing. */
const char *nn_model_c_name(Arena *a, const char *path);

Model *nn_load_model(Arena *a, Diag *d, const char *path, const char *src, const char *model_name);
/* The train configuration's one owner: the section as nn_load_model read it (each setting
 * written or its default), then the command line's overrides, then what follows from both (the
 * loss scaler's default by precision, the rate as state under a schedule), the compile-time
 * batch (g->batch_max; with `world` > 1 data-parallel processes, each one's share), and the data
 * files' paths (a relative one joined to data_dir, the model file's folder; NULL: the current
 * directory's).  False with `err` filled when an override does not fit the model (--momentum on
 * adam). */
bool resolve_train_config(Model *m, const TrainOverrides *o, int world, const char *data_dir, char *err, size_t n);
/* Frees what the model holds outside its arena (the node array, outputs, data bindings). */
void model_free(Model *m);
#endif
