/* config.h - a model as the front end hands it on: the Graph plus the train section as plain
 * data (data sources, optimizer, batch, epochs, seed).  The optimizer pass reads OptConfig;
 * the trainer reads the rest.  Nothing here depends on how it was parsed. */
#ifndef NNC_CONFIG_H
#define NNC_CONFIG_H
#include "ir.h"

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
#endif
