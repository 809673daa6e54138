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

/* train/ works over the model ABI and the train section alone (docs/architecture.md): its files
 * are built with NNC_NO_GRAPH, so that reading the Graph there fails the build. */
#ifdef NNC_NO_GRAPH
#error "train/ may not include ir/ir.h: it reads the model ABI (include/nnc_abi.h) and the train section (ir/config.h)"
#endif

#include "base.h"
#include "config.h"
#include "util.h"

#define NNC_MAX_IN 6 /* operands of a node: attention's gradients take six */
#define CONCAT_MAX_IN 4 /* operands of one CONCAT node (its helper's four pointers) */
/* The largest head size (q's and v's last axis) the fused attention kernel takes: its CUDA tiles
 * fit a block's 48 KB of static shared memory up to it, in f64 too (codegen/attention.c).  The
 * front end composes attention of other ops beyond it, on every target alike. */
#define ATTENTION_MAX_HEAD 128
#define DIM_BATCH (-1) /* the symbolic batch dimension B, bound at run time */
/* A dimension d < 0 is the batch axis times -d: DIM_BATCH (-1) is B, -32 is B*32, the batch merged
 * with an axis of 32 (reshape([B, 32, V]) to [B*32, V], as torch's reshape(-1, V)).  A shape has at
 * most one; reshape splits it back.  Every size a pass or backend computes goes through dim_size. */
static inline bool dim_is_batch(int64_t d) { return d < 0; }
static inline int64_t dim_size(int64_t d, int64_t batch) { return d < 0 ? -d * batch : d; }
static inline int64_t dim_batch_times(int64_t k) { return -k; } /* B*k, k >= 1 */

typedef enum {
#define X(e, name, kind, arity, attr, flags, surface, expr, grad) OP_##e,
#include "ops.def"
#undef X
    OP_COUNT
} Op;

typedef enum {
    OK_LEAF, /* no operands: data, parameters, state, constants */
    OK_EW, /* elementwise: fusable, one scalar expression */
    OK_REDUCE, /* reduction over axes */
    OK_ROW, /* row-wise kernel over the last axis */
    OK_MATMUL, /* library call (BLAS / cuBLAS) */
    OK_HELPER, /* one of codegen/helpers.c's routines, its own launch (L_HELPER): convolution,
                  pooling, dropout masks */
    OK_VIEW, /* reinterpret shape, no data movement */
    OK_COPY, /* host <-> device */
    OK_ASSIGN, /* in-place write of a persistent leaf */
    OK_COLLECTIVE, /* a collective over the processes of a data-parallel run (L_COLLECTIVE) */
    OK_ATTENTION, /* fused scaled dot-product attention or one of its gradients (L_ATTENTION): a
                     kernel of its own on each target (codegen/attention.c) */
} OpKind;

/* Which record of Node.attr an op uses (ops.def's attr column). */
typedef enum {
    ATTR_NONE,
    ATTR_CONST, /* cnst: value * B^batch_power */
    ATTR_STEP, /* step: a value of the optimizer step counter t */
    ATTR_SCALARS, /* scalars: the op's numeric arguments, $p $p1 $p2 in its expression */
    ATTR_AXES, /* axes: the reduced axes and keepdim */
    ATTR_INIT, /* init: a parameter's initializer and its arguments */
    ATTR_DERIV, /* deriv: which op's gradient, for which operand, read from where */
    ATTR_WINDOW, /* win: a convolution's or pooling's window geometry */
    ATTR_SLICE, /* slice: the axis of a concat or slice, and the slice's start and step */
    ATTR_PERM, /* perm: output axis i is the operand's axis perm.p[i] */
    ATTR_ATTN, /* attn: attention's scale, dropout, causal mask and dropout key */
} AttrKind;

/* Facts about an op that passes and backends ask by name (ops.def's flags column), so that one
 * that holds for several ops is written once, on their rows, not as a list of ops at each use.
 * ir.c checks at compile time that they agree with the other columns. */
enum {
    OPF_F32_AUTOCAST = 1 << 0, /* computed in f32 under autocast (torch's fp32 list): exp, log, pow, softplus */
    OPF_MAY_FAIL = 1 << 1, /* checks its i32 labels or indices; a bad one stops the step (a status, a message) */
    OPF_LABELS = 1 << 2, /* operand 1 holds i32 class labels that index operand 0's last axis */
    OPF_ROW_TOTAL = 1 << 3, /* row-wise, its result one number over all the rows (a mean loss, a count) */
    OPF_CONV = 1 << 4, /* a convolution or its gradient: im2col + GEMM over batch chunks in planned scratch */
    OPF_POOL = 1 << 5, /* pooling or its gradient over attr.win's window */
    OPF_MOVES = 1 << 6, /* places operand values (a view, a transpose, a slice), computes none: the same bits */
    OPF_INLINE = 1 << 7, /* a scalar written into its users' expressions, with no buffer of its own */
    OPF_INDEX = 1 << 8, /* elementwise, its expression reads the point's row and column ($r, $c: its
                            own last two axes), so its kernel walks the axes, not a flat index */
    OPF_PICKS = 1 << 9, /* row-wise, reads or writes a row's elements at i32 places its operand 1 holds
                           (gather, scatter): its result never takes over an operand's buffer */
};

typedef struct {
    const char *name;
    OpKind kind;
    int arity;
    AttrKind attr;
    unsigned flags; /* OPF_ bits */
    const char *surface;        /* "relu(x)", or NULL: not callable from a model */
    const char *expr;
    const char *dx[2];          /* DX/DX2 gradient expressions, or NULL */
} OpInfo;
extern const OpInfo op_info[OP_COUNT];
/* Whether op has any of the OPF_ facts in f. */
static inline bool op_has(Op op, unsigned f) { return (op_info[op].flags & f) != 0; }

/* f32 tensors are `real` (float, or double under --f64); bf16 and f16 are stored as 16-bit
 * patterns and computed in f32 (every kernel widens on load and rounds on store), as CUDA and
 * PyTorch's CPU kernels do.  Only passes/autocast.c makes half tensors (precision = bf16|f16). */
typedef enum { DT_F32, DT_I32, DT_BF16, DT_F16 } DType;
#define DTYPE_IS_HALF(t) ((t) == DT_BF16 || (t) == DT_F16)
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

/* The step-dependent scalars of the optimizers (STEPVAL). */
typedef enum {
    STEP_T, /* t */
    STEP_ONE_MINUS_POW, /* 1 - base^t: Adam's bias corrections */
    STEP_FIRST_ONE, /* 1 at the first step, else base: SGD's dampening skips step 1 */
    STEP_ACCUMULATED, /* 1 when micro-batches of this group ran before this call (the runtime's
                             micro > 0), else 0: whether the accumulated gradients count */
} StepFn;

/* DERIV's operands, by the symbol of the DX expression they stand for. */
enum { DERIV_G, DERIV_X0, DERIV_X1, DERIV_Y, DERIV_NSYM };

/* The typed attributes of a node; ops.def's attr column says which member is in use. */
typedef union {
    struct { double value; int batch_power; } cnst;         /* value * B^batch_power, power in -1..1 */
    struct { StepFn fn; double base; } step;
    struct { double p[3]; } scalars;
    struct { uint32_t mask; bool keepdim; } axes;            /* bit i: axis i is reduced */
    struct { InitKind kind; double a, b; } init;             /* the arguments, resolved (InitKind) */
    struct {
        int of;                                              /* the Op differentiated */
        int wrt;                                             /* its operand: 0 or 1 */
        double p[3];                                         /* its scalars */
        int8_t slot[DERIV_NSYM];                             /* operand index of $g $0 $1 $y, or -1 */
    } deriv;
    struct {
        int32_t k[2];        /* pooling window (height, width); a convolution's is its weight's */
        int32_t s[2], p[2], d[2];                            /* stride, zero padding, dilation */
        int32_t groups;      /* convolution: channel groups */
    } win;
    struct { int32_t axis; int64_t start, step; } slice;
    struct {
        int8_t p[IR_MAX_RANK];
    } perm;
    struct {
        double scale; /* of the scores q k^T: torch's 1 / sqrt(D) unless given */
        double dropout; /* the probability of dropping a weight in training entries */
        bool causal; /* query i attends keys j <= i (torch's is_causal: top-left aligned) */
        int32_t key; /* the forward node whose origin keys the dropout mask, or -1 for this
                        node's own (the forward's): its gradients draw the same mask */
        /* Where the operands lie (passes/attn_layout.c).  heads 0: q, k, v, y and their
         * gradients are [..., T, D] tensors of their own.  heads H > 0: each is H heads side by
         * side in the rows of a [B, T, W] tensor, as a projection writes them before a model's
         * view(B, T, H, D).transpose(1, 2): q at columns col[0] + h hd, k at col[1] + h hd, v
         * at col[2] + h hdv; y, dy and the node are [B, T, H hdv]; lse and delta [B, T, H].
         * packed: q, k and v are one tensor (in[0..2] alike) whose columns they tile, and the
         * backward is one node, its gradient (SDPA_DQ, of that tensor's shape). */
        int32_t heads, hd, hdv;
        int32_t col[3];
        bool packed;
    } attn;
} Attr;

typedef struct {
    int rank;
    int64_t d[IR_MAX_RANK]; /* a negative d marks the batch axis (B * -d) */
} Shape;

/* Node.layer of a parameter, what the optimizer's no_decay = ["norm", "embedding"] selects: */
enum {
    PARAM_NORM = 1, /* the weight or bias of a layer_norm or batch_norm */
    PARAM_EMBEDDING = 2, /* the table of an embedding */
};

typedef struct {
    Op op;
    DType dtype;
    Device dev;
    Phase phase;
    bool dev_fixed;             /* placed by the user (to(x, cuda)); placement keeps it */
    bool user_copy;             /* a COPY the user asked for; --strict-devices allows it */
    bool frozen;                /* PARAM declared `buffer`: persistent and saved, never trained
                                   (batch norm's running statistics, torch's register_buffer) */
    uint8_t layer; /* PARAM: the layer that reads it, PARAM_NORM or PARAM_EMBEDDING, or 0 */
    bool no_decay; /* PARAM: in the optimizer's no_decay group, updated with weight_decay 0 */
    int nin;
    int in[NNC_MAX_IN];
    Attr attr;                  /* typed by op_info[op].attr */
    Shape shape;
    SrcLoc loc;
    const char *name;           /* leaves: scoped name ("fc1.weight"); else a let-binding name or NULL */
    const char *scope;          /* the block instance that made it ("fc1", "enc.fc1"), or NULL */
    int grad;                   /* PARAM: node holding d(loss)/d(param) after autograd, or -1 */
    int origin;                 /* its id before the copies pass (the same on every target), or
                                   -1 for a COPY it inserted: how --check-against pairs values */
} Node;

typedef struct {
    const char *name;
    int node;
} NamedOut;

/* A lowering choice the front end made that the user may want to know of (--stats and --emit ir
 * print them): "attention composed of matmul, softmax and matmul: head size 256 is above ...". */
typedef struct {
    SrcLoc loc;
    const char *text;
} GraphNote;

typedef struct Graph {
    Arena *arena;
    Node *nodes;
    int n, cap;
    int loss;                   /* the scalar minimized, or -1 */
    int loss_seed;              /* the loss's gradient: a scalar node (a loss scale), or -1 for 1 */
    int grad_norm;              /* clip_grad_norm's total norm, train_step's output "grad_norm", or -1 */
    NamedOut *outs;             /* metrics and outputs, evaluated by eval */
    int nouts;
    int batch_max;              /* value bound to DIM_BATCH when planning memory */
    const char *batch_name;     /* the symbol the user wrote ("B") */
    const char *model_name;
    GraphNote *notes; /* in the order they were made (graph_note) */
    int nnotes;
} Graph;

/* A model as the front end hands it on: the Graph and its train section (config.h). */
typedef struct {
    Graph *g;
    TrainConfig train;
} Model;

Graph *graph_new(Arena *a);
int graph_add(Graph *g, Op op, int nin, const int *in, Shape shape, DType dt, SrcLoc loc);
int graph_add1(Graph *g, Op op, int a, SrcLoc loc);               /* EW unary, shape of a */
int graph_add2(Graph *g, Op op, int a, int b, SrcLoc loc);        /* EW binary, broadcast; -1 on mismatch */
int graph_const(Graph *g, double v, SrcLoc loc);
void graph_add_out(Graph *g, const char *name, int node);
/* Whether the graph names x other than as an operand: the loss, its seed, the gradient norm or
 * an output (a rewrite that drops or replaces x must keep these). */
bool graph_names(const Graph *g, int x);
void graph_note(Graph *g, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void graph_print_notes(const Graph *g, FILE *f, const char *prefix); /* "PREFIXfile:line:col: note: text" */

/* shapes */
Shape shape_scalar(void);
Shape shape_of(int rank, const int64_t *d);
int64_t shape_numel(Shape s, int64_t batch); /* the batch axis B*k counts as batch*k */
/* The product of the axes in `mask` (bit i: axis i) with the batch axis counted as its multiplier
 * k; *batch says whether B is a factor (so the true product is B times the result). */
int64_t shape_prod(Shape s, uint32_t mask, bool *batch);
bool shape_eq(Shape a, Shape b);
bool shape_broadcast(Shape a, Shape b, Shape *out);
int shape_batch_axis(Shape s);                 /* -1 if none */
/* a @ b as torch.matmul for ranks 2 to 4: [..., M, K] @ [..., K, N] -> [..., M, N], where a
 * and b have the same leading axes or one of them is 2-d (one matrix for every matrix of the
 * other).  False when they do not fit.  (Besides that shape, a MATMUL node may be 2-d [M, N]
 * over operands with the same leading axes: the sum of their products, matmul_is_sum -- the
 * gradient of a shared 2-d operand, as autograd builds it.) */
bool matmul_shape(Shape a, Shape b, Shape *out);
bool matmul_is_sum(Shape a, Shape b, Shape c);
/* torch's type promotion for an elementwise op over these operands: the half kind when every
 * float tensor operand has it (inline scalars do not count, as Python numbers do not promote),
 * f32 when they differ, `dflt` when there is no float tensor operand. */
DType dtype_join(const Graph *g, int nin, const int *in, DType dflt);
char *shape_str(Shape s, DType dt, const char *bname, char *buf, size_t n);  /* "f32[B,784]" */

/* The geometry of a convolution or pooling op, whichever of its forms n is: input x [N, C, H, W],
 * output [N, OC, OH, OW], window KH x KW (a convolution's weight is [OC, C / G, KH, KW]; pooling
 * has OC = C), stride, padding, dilation, groups.  N is DIM_BATCH when x has the batch axis. */
typedef struct {
    int64_t N, C, H, W, OC, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW, G;
} SpatialGeom;
SpatialGeom spatial_geom(const Graph *g, const Node *n);
/* Output size along one axis, as torch: floor((in + 2p - d (k - 1) - 1) / s) + 1 (< 1: empty). */
int64_t spatial_out_dim(int64_t in, int k, int s, int p, int d);

/* A transpose or permute: a kernel whose loads follow a permutation of the axes (never fused). */
static inline bool op_permutes(Op op) { return op == OP_TRANSPOSE || op == OP_PERMUTE; }
/* The permutation node n applies (output axis i reads operand axis perm[i]): a permute's own, or
 * a transpose's swap of the last two axes. */
void node_perm(const Node *n, int8_t perm[IR_MAX_RANK]);

/* The node id that keys an attention op's dropout mask: its forward's origin (the id before the
 * copies pass, the same on every target). */
static inline int attention_key(const Node *n) { return n->attr.attn.key >= 0 ? n->attr.attn.key : n->origin; }

/* printing and checking */
void ir_print(const Graph *g, FILE *f, const bool *live);
bool ir_verify(const Graph *g, const char *after_pass);   /* prints what is wrong */
void ir_users(const Graph *g, int **users, int *nusers);  /* users[i]: array, nusers[i]: count */
const char *dtype_name(DType t);
/* The op's name, or for a DERIV the op it differentiates: "relu_grad", "maximum_grad1". */
const char *node_op_name(const Node *n, char buf[48]);
const char *device_name(Device d);        /* "cpu", "cuda", "cuda:1" (torch's names) */
const char *device_spelling(Device d);    /* as a model writes it: "cpu", "cuda", "cuda(1)" */
#endif
