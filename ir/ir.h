/* ir.h - the nnc intermediate representation.
 *
 * A model is one Graph: an array of Nodes referred to by index (never by pointer, so the array
 * can grow), in an order where every operand comes before its user.  A node has an op from
 * ops.def, up to NNC_MAX_IN operand ids, small parameter arrays, a shape with at most one
 * symbolic batch axis (DIM_BATCH), a dtype, a device and the file:line:col it came from.
 *
 * Passes (passes/passes.h) add nodes and set the annotation fields (grad, phase, dev, group);
 * they never delete: a pass that replaces a node rewires its users and leaves the old node dead.
 * Liveness is "reachable from the graph's roots" (entry outputs and assignments). */
#ifndef NNC_IR_H
#define NNC_IR_H
#include <stdbool.h>
#include <stdint.h>

#include "util.h"

#define IR_MAX_RANK 4
#define NNC_MAX_IN 3
#define DIM_BATCH (-1)          /* the symbolic batch dimension, bound at run time */

typedef enum {
#define X(e, name, arity, kind, expr) OP_##e,
#include "ops.def"
#undef X
    OP_COUNT
} Op;

typedef enum {
    OK_LEAF,    /* no operands: data, parameters, state, constants */
    OK_EW,      /* elementwise: fusable, one scalar expression */
    OK_REDUCE,  /* reduction over axes */
    OK_ROW,     /* row-wise kernel over the last axis */
    OK_MATMUL,  /* library call (BLAS / cuBLAS) */
    OK_VIEW,    /* reinterpret shape, no data movement */
    OK_COPY,    /* host <-> device */
    OK_ASSIGN,  /* in-place write of a persistent leaf */
} OpKind;

typedef struct {
    const char *name;
    int arity;
    OpKind kind;
    const char *expr;
} OpInfo;
extern const OpInfo op_info[OP_COUNT];

typedef enum { DT_F32, DT_I32 } DType;
typedef enum { DEV_CPU, DEV_CUDA } Device;
typedef enum { PH_FORWARD, PH_BACKWARD, PH_UPDATE } Phase;

/* PyTorch's initializers (torch.nn.init), applied by the generated init function. */
typedef enum {
    INIT_ZEROS,       /* 0 */
    INIT_ONES,        /* 1 */
    INIT_CONSTANT,    /* a */
    INIT_UNIFORM,     /* U(a, b) */
    INIT_NORMAL,      /* N(a, b^2) */
    INIT_KAIMING_U,   /* U(-bound, bound), bound = gain(a) * sqrt(3 / fan) */
    INIT_KAIMING_N,   /* N(0, (gain(a) / sqrt(fan))^2) */
    INIT_XAVIER_U,    /* U(-bound, bound), bound = a * sqrt(6 / (fan_in + fan_out)) */
    INIT_XAVIER_N,    /* N(0, (a * sqrt(2 / (fan_in + fan_out)))^2) */
} InitKind;

typedef struct {
    int rank;
    int64_t d[IR_MAX_RANK];    /* DIM_BATCH marks the batch axis */
} Shape;

typedef struct {
    Op op;
    DType dtype;
    Device dev;
    Phase phase;
    bool dev_fixed;             /* placed by the user (to(x, cuda)); placement keeps it */
    bool user_copy;             /* a COPY the user asked for; --strict-devices allows it */
    int nin;
    int in[NNC_MAX_IN];
    double fparam[4];
    int64_t iparam[4];
    Shape shape;
    SrcLoc loc;
    const char *name;           /* leaves: scoped name ("fc1.weight"); else a let-binding name or NULL */
    InitKind init;              /* PARAM only; fparam holds its arguments */
    int grad;                   /* PARAM: node holding d(loss)/d(param) after autograd, or -1 */
    int origin;                 /* its id before the copies pass (the same on every target), or
                                   -1 for a COPY it inserted: how --check-against pairs values */
} Node;

typedef struct {
    const char *name;
    int node;
} NamedOut;

typedef struct Graph {
    Arena *arena;
    Node *nodes;
    int n, cap;
    int loss;                   /* the scalar minimized, or -1 */
    NamedOut *outs;             /* metrics and outputs, evaluated by eval */
    int nouts;
    int batch_max;              /* value bound to DIM_BATCH when planning memory */
    const char *batch_name;     /* the symbol the user wrote ("B") */
    const char *model_name;
} Graph;

Graph *graph_new(Arena *a);
int graph_add(Graph *g, Op op, int nin, const int *in, Shape shape, DType dt, SrcLoc loc);
int graph_add1(Graph *g, Op op, int a, SrcLoc loc);               /* EW unary, shape of a */
int graph_add2(Graph *g, Op op, int a, int b, SrcLoc loc);        /* EW binary, broadcast; -1 on mismatch */
int graph_const(Graph *g, double v, SrcLoc loc);
void graph_add_out(Graph *g, const char *name, int node);

/* shapes */
Shape shape_scalar(void);
Shape shape_of(int rank, const int64_t *d);
int64_t shape_numel(Shape s, int64_t batch);   /* DIM_BATCH counts as batch */
bool shape_eq(Shape a, Shape b);
bool shape_broadcast(Shape a, Shape b, Shape *out);
int shape_batch_axis(Shape s);                 /* -1 if none */
char *shape_str(Shape s, DType dt, const char *bname, char *buf, size_t n);  /* "f32[B,784]" */

/* printing and checking */
void ir_print(const Graph *g, FILE *f, const bool *live);
bool ir_verify(const Graph *g, const char *after_pass);   /* prints what is wrong */
void ir_users(const Graph *g, int **users, int *nusers);  /* users[i]: array, nusers[i]: count */
const char *dtype_name(DType t);
const char *device_name(Device d);
#endif
