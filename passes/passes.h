/* passes.h - the compiler's passes and the schedule they hand to the backends.
 *
 * Graph-wide passes (run once, in pipeline.c's order):
 *   autocast (precision bf16/f16) -> autograd -> accumulate (accumulate > 1) -> allreduce (under
 *   MPI) -> optimizer -> placement -> copies
 * Per-entry passes (run for each entry point: train step, grad, eval, accumulate):
 *   fuse -> schedule -> plan -> horizontal
 * Each pass lives in its own file and has one entry point.  After the per-entry passes an
 * Entry holds a flat list of Launches in execution order and a buffer for every value: the
 * contract both backends consume (docs/architecture.md). */
#ifndef NNC_PASSES_H
#define NNC_PASSES_H
#include "../ir/ir.h"

typedef enum { ENTRY_TRAIN, ENTRY_GRAD, ENTRY_EVAL, ENTRY_ACCUM, ENTRY_COUNT } EntryKind;

typedef enum {
    L_EW, /* fused elementwise kernel over `space`; nodes[] in order, outs[] written */
    L_REDUCE, /* reduction (root) over `space` (its input's shape) with fused elementwise prologue */
    L_ROW, /* row-wise kernel (root), optionally also root2 (cross_entropy + its gradient) */
    L_GEMM, /* C[root] = op(A) @ op(B) with A = a (transposed if ta), B = b (if tb) */
    L_COPY, /* host <-> device copy of root's operand into root */
    L_ASSIGN, /* copy value into the persistent leaf it updates (when it could not be in place) */
    L_HELPER, /* root computed by codegen/helpers.c's routines: convolution (helpers and GEMMs
                   over chunks of `chunk` samples in `scratch`), pooling, a dropout mask */
    L_COLLECTIVE, /* root is an ALLREDUCE_START (its bucket's part, `bucket_last` when the bucket
                       is complete) or an ALLREDUCE_WAIT: a call of the host's nnc_comm */
    L_ATTENTION, /* attention (codegen/attention.c): nodes[] its forward and row logsumexp, or its
                       gradients for q, k and v, over the same operands */
} LaunchKind;

typedef struct {
    LaunchKind kind;
    int root, root2;
    int *nodes, nnodes;
    int *outs, nouts;
    int *ins, nins;
    Shape space;
    int a, b;
    bool ta, tb;
    double alpha;       /* GEMM: C = alpha * op(A) op(B) (+ C when fold) */
    int fold;           /* GEMM: the SGD update p - lr * (A @ B) computed in the product: the
                           node whose buffer is C (the new p, normally p's own memory), else -1 */
    int bias, epi; /* GEMM: a bias added to each row of the product in its epilogue (fuse.c's
                           GemmEpi), then ReLU where `relu`; epi is the last such node, whose
                           buffer is C; else both -1 */
    bool relu;
    int phase;
    int rank;           /* schedule.c's tie-break within a phase: 0 an allreduce start, 2 a wait, 1 else */
    int64_t chunk;      /* L_HELPER convolutions: samples per im2col + GEMM round */
    int64_t scratch;    /* ... and the column buffers' offset in the activation block, */
    int64_t scratch_elems;  /* their size (plan.c; live during this launch only) */
    int bucket;         /* L_COLLECTIVE: the bucket (schedule.c numbers them in start order) */
    bool bucket_last;   /* ... this start completes its bucket: the exchange begins */
    int hfirst, hcount; /* horizontal.c: one of the hcount launches [hfirst, hfirst + hcount) that a
                           backend may run as one (independent and alike); hcount 0: none such */
} Launch;

typedef enum {
    BUF_NONE,    /* not materialized: computed inside a kernel, or a transpose folded into a GEMM */
    BUF_INLINE,  /* scalar constant or step value, rendered as an expression */
    BUF_INPUT,   /* the runtime's batch pointer number `index` */
    BUF_PARAM,   /* parameter block + offset */
    BUF_STATE,   /* optimizer-state block + offset */
    BUF_ACT,     /* activation block + offset (reused by liveness) */
    BUF_ALIAS,   /* a view of node `alias` (reshape) */
} BufKind;

typedef struct {
    BufKind kind;
    int64_t offset;     /* in elements */
    int64_t elems;      /* at batch_max */
    int index;          /* BUF_INPUT: position in the inputs array */
    int alias;          /* BUF_ALIAS: the node whose memory this is */
    Device dev;
} Buffer;

/* An SGD step p - lr * (A @ B) computed by the GEMM itself: C = dst's buffer (p's own memory
 * when the update is in place), alpha = -lr, beta = 1; the gradient is never stored. */
typedef struct {
    int gemm;           /* the MATMUL node */
    int dst;            /* the SUB node p - lr * (A @ B) */
    double alpha;       /* -lr */
} GemmFold;

/* A GEMM's epilogue (fuse.c, GPUs): add = A @ B + bias with bias a vector along the rows, then
 * relu = max(add, 0) when relu >= 0; the product and the add are never stored, C is the last
 * node's buffer.  cuBLASLt's BIAS and RELU_BIAS epilogues, the C routine's loop after its GEMM. */
typedef struct {
    int gemm, add, bias, relu;
} GemmEpi;

/* The node whose buffer a GEMM launch writes: the folded update, the epilogue's last node or
 * the product. */
static inline int launch_gemm_c(const Launch *L) { return L->fold >= 0 ? L->fold : L->epi >= 0 ? L->epi : L->root; }

typedef struct {
    EntryKind kind;
    const char *name; /* "train_step", "grad", "eval", "accumulate" */
    bool *live;                 /* nodes this entry computes */
    int *group;                 /* node -> launch, or -1 */
    bool *folded;               /* a transpose its GEMMs read transposed: no launch, no memory */
    GemmFold *folds;            /* SGD updates fused into their weight-gradient GEMM (fuse.c) */
    int nfolds;
    GemmEpi *epis; /* biases (and ReLUs) in their GEMM's epilogue (fuse.c) */
    int nepis;
    Launch *launches;
    int nlaunch;
    Buffer *buf;                /* per node */
    int *outputs;               /* nodes the caller reads after the call */
    int noutputs;
    int64_t act_elems[NNC_MAX_DEVICES];   /* planned size of the activation block, per device */
    int64_t act_total;          /* ... over every device */
    int64_t naive_elems;        /* sum of every intermediate, for --stats */
    int *inplace;               /* value node -> the leaf it is written into (an in-place update), or -1 */
} Entry;

typedef struct {
    Model *m;
    Graph *g;
    Diag *diag;
    Device target;
    bool fuse;
    bool strict_devices;
    bool data_parallel;         /* gradients averaged over processes (passes/allreduce.c) */
    int64_t bucket_bytes;       /* ... exchanged in buckets of about this size */
    int nbuckets;               /* ... the train step's buckets */
    int64_t param_elems, state_elems;
    /* device d's parameters are [param_lo[d], param_hi[d]) of the block, its state likewise */
    int64_t param_lo[NNC_MAX_DEVICES], param_hi[NNC_MAX_DEVICES], state_lo[NNC_MAX_DEVICES], state_hi[NNC_MAX_DEVICES];
    Entry entry[ENTRY_COUNT];
    bool dumped; /* --dump-after printed its pass */
    const char *dump_skipped; /* ... or why that pass did not run (nothing to print) */
} Program;

typedef struct {
    Device target;
    bool fuse;
    bool strict_devices;
    bool data_parallel;         /* under MPI: allreduce nodes between gradients and the update */
    int64_t bucket_bytes;       /* their bucket size (0: 25 MiB, DDP's bucket_cap_mb) */
    bool verify;                /* ir_verify after every pass (on in tests and debug builds) */
    bool keep_values;           /* every launch's result is also an entry output, kept to the end
                                   of the call (--check-against: compare every value) */
    const char *dump_after;     /* pass name or "all" */
    FILE *dump;
} PipelineOpts;

/* pipeline.c: runs every pass in order; returns false (diagnostics printed) on error. */
/* --dump-after's pass names, space-separated ("parse autograd ... plan all"), and a check. */
extern const char *const pipeline_pass_names;
bool pipeline_has_pass(const char *name);
bool pipeline_run(Program *p, const PipelineOpts *o);
void program_print(const Program *p, FILE *f);
void program_print_dot(const Program *p, FILE *f);   /* dot.c: --emit dot */
const char *launch_kind_label(LaunchKind k); /* dot.c: "elementwise", "gemm", ... */
void program_free(Program *p);   /* what the passes allocated outside the graph's arena */
/* plan.c: the largest activation block any entry needs on device d (elements), and where GPU
 * d's begins when the GPUs' blocks are counted one after another (cuda:0 first). */
int64_t program_act_peak(const Program *p, Device d);
int64_t program_act_base(const Program *p, Device d);

/* graph-wide passes */
bool pass_autocast(Model *m, Precision prec);   /* rebuilds m->g (ids change); false: nothing to do */
/* attention whose operands are heads side by side in a projection's rows reads them there
 * (CPU); true when it moved any */
bool pass_attn_layout(Graph *g);
void pass_autograd(Graph *g, const ScalerConfig *scaler);
/* layer norm's gradient reads dy and w, and adds the residual's gradient, itself; true when it
 * changed any */
bool pass_fold_rows(Graph *g); /* seeded with the loss scale, if on */
void pass_accumulate(Graph *g, int k); /* accumulate = k > 1: gradients summed over micro-batches */
void pass_allreduce(Graph *g);                  /* data-parallel runs only */
void pass_optimizer(Graph *g, const TrainConfig *t);
void pass_placement(Graph *g, Device target);
bool pass_copies(Graph *g, Diag *d, bool strict);

/* per-entry passes */
void pass_select(Program *p, Entry *e, EntryKind k);   /* which nodes the entry computes */
void pass_fuse(Program *p, Entry *e);
void pass_schedule(Program *p, Entry *e);
void pass_plan(Program *p, Entry *e);
/* runs of consecutive independent launches, alike enough to run as one kernel (Launch.hfirst) */
void pass_horizontal(Program *p, Entry *e);

/* helpers shared by passes */
int graph_node_at(Graph *g, Op op, int nin, const int *in, Shape s, DType dt, const Node *like);
bool node_is_inline(const Node *n);        /* CONST or STEPVAL */
/* The node whose memory x shares in entry e (a reshape's operand, a folded transpose's, the
 * operand a MODE picks for the entry's mode), or -1 when x has its own. */
int view_source(const Graph *g, const Entry *e, int x);
#endif
