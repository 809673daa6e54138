/* frontend.h - from .nn text to a checked Graph plus the training configuration.
 *
 * nn_load_model parses (parser.y) and elaborates (elab.c): blocks are instantiated like
 * nn.Modules, names resolved, shapes and dtypes inferred and checked, and the `train` section
 * read into a TrainConfig.  All errors go to the Diag with the model file's locations. */
#ifndef NNC_FRONTEND_H
#define NNC_FRONTEND_H
#include "../ir/ir.h"

typedef enum {
    SRC_NONE,
    SRC_IDX,     /* idx(path, scale=1): IDX file, .gz allowed */
    SRC_NPY,     /* npy(path, scale=1) */
    SRC_CSV,     /* csv(path, first=0, count=all, scale=1, header): columns [first, first+count) */
    SRC_RANDN,   /* randn(n, d...): standard normal from the seed */
    SRC_RAND,    /* rand(n, d...): uniform [0,1) from the seed */
} SourceKind;

typedef struct {
    SourceKind kind;
    const char *path;
    double scale;
    int rank;
    int64_t dims[IR_MAX_RANK];
    int64_t first, count;
    int header;                  /* csv: 1 first line is a header, 0 it is data, -1 detect */
    SrcLoc loc;
} DataSource;

typedef struct {
    const char *input;           /* the input's name */
    int node;                    /* its INPUT node */
    DataSource train, test;
} DataBind;

typedef enum { OPT_SGD, OPT_ADAM, OPT_ADAMW } OptKind;

typedef struct {
    OptKind kind;
    double lr, momentum, dampening, weight_decay, beta1, beta2, eps;
    bool nesterov;
    SrcLoc loc;
} OptConfig;

typedef struct {
    bool present;                /* the model has a train section */
    DataBind *data;
    int ndata;
    int64_t batch;
    int epochs;
    uint64_t seed;
    Device device;
    bool shuffle;
    OptConfig opt;
    SrcLoc loc;
} TrainConfig;

typedef struct {
    Graph *g;
    TrainConfig train;
} Model;

/* "models/mlp.nn" -> "mlp", "int.nn" -> "int_", "2d.nn" -> "m_2d": the prefix of every symbol
 * of the generated code, a C identifier that cannot collide with C, C++, CUDA or the headers
 * (names.c has the rule).  nn_load_model applies it to the name it is given, so any caller's
 * name is safe; applying it again changes nothing. */
const char *nn_model_c_name(Arena *a, const char *path);

Model *nn_load_model(Arena *a, Diag *d, const char *path, const char *src, const char *model_name);
/* Frees what the model holds outside its arena (the node array, outputs, data bindings). */
void model_free(Model *m);
#endif
