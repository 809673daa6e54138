/* helpers.h - helper ops as data: the routines (helpers.def, helpers.c) and the plan of a launch.
 *
 * An L_HELPER launch (a convolution or its gradients, pooling, a dropout mask, concat, slices,
 * embedding lookups) is planned once, for both targets, as a short list of steps: call this
 * routine with these arguments, run a group of GEMMs, zero a buffer, repeat the next steps
 * over chunks of the batch, or try one library call first (oneDNN on the CPU, cuDNN on CUDA).
 * Values that depend on the run-time batch B or on the chunk are affine expressions over
 * (1, B, n0, S, SP), which the C printer spells as C (dialect_c.c) and the CUDA backend evaluates (cuda/cuda_issue.c).
 * Pointers are a node's buffer, the launch's scratch in the activation block, the device's
 * {step, seed} slot or the launch's error record.  So a new helper op is written once: a row in
 * helpers.def, its bodies in helpers.c and its case in helper_plan.c. */
#ifndef NNC_HELPERS_H
#define NNC_HELPERS_H
#include "codegen.h"

#define HELPER_THREADS 256 /* a CUDA helper kernel's block (a grid-stride loop) */
#define SPATIAL_GEOM_ARGS 13 /* C H W OH OW KH KW SH SW PH PW DH DW, after a helper's own */

typedef enum {
#define X(id, name, ptrs, after, geom, flat, cpu) HP_##id, /* helpers.def's row `id` */
#include "helpers.def"
#undef X
    HP_COUNT
} Helper;

/* A helper's CPU body (helpers.c): `pre` (statements of the helper alone), then, when `count[0]`
 * is given, a loop over i < count[0] (`work` elements in all, which decides the pieces) whose
 * iterations write disjoint outputs, run on the pool (body[0]); with a `guard`, that loop only
 * where the guard holds, and else the loop of count[1] and body[1].  `common` comes first in
 * the helper and in each piece (locals computed from the parameters). */
typedef struct {
    const char *common, *pre, *guard;
    const char *count[2], *work[2], *body[2];
} CpuBody;

/* helpers.def's row of each helper. */
typedef struct {
    const char *name; /* "nnc_im2col" */
    const char *ptrs; /* the pointer parameters */
    const char *after; /* the parameters after n ("" none) */
    bool geom; /* the geometry parameters follow */
    const char *flat; /* the body over flat index i */
    const CpuBody *cpu; /* the CPU's own body, or NULL (the flat body on the pool) */
} HelperInfo;
extern const HelperInfo helper_info[HP_COUNT];

/* ---- the plan of a helper launch (helper_plan.c) ----------------------------------------- */

/* The variables a step's numbers may depend on: the batch B, and inside a chunk loop the
 * chunk's first sample n0, its size S and SP = S P (P: the output's spatial points). */
typedef enum { AFF_1, AFF_B, AFF_N0, AFF_S, AFF_SP, AFF_NVARS } AffineVar;
typedef struct {
    int64_t c[AFF_NVARS]; /* the value is the sum of c[v] * v, with AFF_1 standing for 1 */
} Affine;
int64_t affine_eval(Affine a, const int64_t v[AFF_NVARS]); /* v[AFF_1] is 1 */
/* As a C expression over B, n0, S, SP: "25 * SP", "(B * 6272LL)" (render_numel's spelling). */
void affine_render(Str *s, Affine a);

typedef enum {
    HPTR_NODE, /* node `node`'s buffer */
    HPTR_SCRATCH, /* the activation block + `off` reals: the launch's scratch (plan.c) */
    HPTR_STEP, /* the device's {step, seed, micro} slot: three int64 */
    HPTR_ERR, /* the launch's error record, int[4]: {flag, position, value, bound} */
} HelperPtrKind;
typedef struct {
    HelperPtrKind kind;
    int node;
    int64_t off;
} HelperPtr;

typedef enum {
    HARG_I64, /* int64_t `v` */
    HARG_INT, /* int `v` */
    HARG_F64, /* double `f` */
    HARG_PTR, /* pointer `p` */
} HelperArgKind;
typedef struct {
    HelperArgKind kind;
    Affine v;
    double f;
    HelperPtr p;
} HelperArg;

typedef enum {
    HS_CALL, /* helper(ptr..., n, arg...[, the plan's geometry]) over n elements */
    HS_GEMM, /* G row-major products, alpha 1: C_g = op(A_g) op(B_g) (+ C_g) */
    HS_ZERO, /* count reals at p set to 0; `guarded`: only when `guard` is 0 */
    HS_CHUNKS, /* the next `nbody` steps once per chunk [n0, n0 + S) of `rows` samples,
                       S = min(rows - n0, chunk), SP = S P */
    HS_CONV_LIB, /* the convolution by a library, oneDNN on the CPU (f32) and cuDNN on CUDA
                       (cuda_dnn.c): a, b -> out, kind 0 forward, 1 input gradient, 2 weight
                       gradient over `rows` samples.  When it runs the launch is done, else
                       the steps after it do the work (im2col + GEMM) */
} HelperStepKind;

typedef enum {
    HBETA_0, /* C_g = A_g B_g */
    HBETA_1, /* C_g += A_g B_g */
    HBETA_CHUNKS, /* 0 in the first chunk, then 1: a sum over the chunks */
} HelperBeta;

typedef struct {
    HelperStepKind kind;
    union {
        struct {
            Helper h;
            int nptr, narg;
            HelperPtr ptr[6]; /* the pointers before n */
            Affine n;
            HelperArg arg[6]; /* the parameters after n */
        } call;
        struct {
            bool ta, tb;
            int64_t G;
            Affine M, N, K, lda, ldb, ldc;
            HelperPtr a, b, c; /* group 0's matrices */
            Affine sa, sb, sc; /* group g's are g * s* reals further */
            HelperBeta beta;
        } gemm;
        struct {
            HelperPtr p;
            Affine count, guard;
            bool guarded;
        } zero;
        struct {
            Affine rows;
            int64_t chunk, P;
            int nbody;
        } chunks;
        struct {
            int kind;
            Affine rows;
            HelperPtr a, b, out;
        } lib;
    };
} HelperStep;

#define HELPER_MAX_STEPS 8
typedef struct {
    SpatialGeom q; /* the geometry calls of a helper that takes it pass */
    int nsteps;
    HelperStep step[HELPER_MAX_STEPS];
} HelperPlan;

/* The steps of helper launch L of entry e (a dropout mask draws in training entries only). */
HelperPlan helper_plan(const Program *p, const Entry *e, const Launch *L);
/* A call records into the error record (ops.def gives such an op OPF_MAY_FAIL: its caller tests
 * the status). */
bool helper_plan_reports(const HelperPlan *hp);

/* ---- the routines (helpers.c) -------------------------------------------------------------- */

bool program_has_helpers(const Program *p);
void helper_prelude(Str *s, bool cuda); /* static C functions, or CUDA kernels */
/* dropout's draw (nnc_dropout_stream, nnc_dropout_keep), which the dropout helper and attention's
 * dropout share; helper_prelude writes it first. */
void dropout_rng_prelude(Str *s, bool cuda);
/* The C target's f32 convolutions call oneDNN (nnc built with libdnnl): its support text. */
bool helper_uses_dnnl(const Program *p, const BuildOpts *o);
void helper_dnnl_prelude(Str *s);
/* f32 products by oneDNN where the C is compiled with -DNNC_DNNL_SGEMM (the in-process build):
 * the declaration goes before nnc_pool.h (which then calls it per chunk), the code after. */
void helper_dnnl_sgemm_decl(Str *s);
void helper_dnnl_sgemm_prelude(Str *s);
/* Whether the program has a product oneDNN would take (so the model links it at all: loading
 * libdnnl costs a start-up that a model of small products gains nothing from). */
bool helper_uses_dnnl_sgemm(const Program *p, const BuildOpts *o);
void spatial_geom_args(const SpatialGeom *q, int64_t out[SPATIAL_GEOM_ARGS]);
#endif
