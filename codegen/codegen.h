/* codegen.h - the backend interface and what the renderers share.
 *
 * A backend turns a planned Program into something that runs, behind a small table of
 * functions (ggml's backend interface, QBE's Target): render the source, and build it into a
 * loaded model exposing nnc_model_abi.  Nothing above this interface asks which target it is
 * building for: the driver looks the backend up by the program's target.  Both backends render
 * their kernels with one walker and a dialect each (kernel.h). */
#ifndef NNC_CODEGEN_H
#define NNC_CODEGEN_H
#include "../passes/passes.h"
#include "../include/nnc_abi.h"
#include "../include/nnc_runtime.h"

typedef struct {
    bool f64;                   /* real = double: for finite-difference gradient checks */
    const char *cc;             /* C compiler ($CC or "cc") */
    const char *cache_dir;      /* NULL: no cache */
    int threads;                /* OpenMP threads (0: default) */
    bool verbose; /* --verbose: say what load chose (CUDA: cuDNN or im2col per convolution) */
    bool tf32;
    bool check_numerics;        /* test every kernel's outputs for NaN/Inf (--check-numerics) */
    int device;                 /* CUDA: the GPU, modulo the GPUs there are (under mpirun, each
                                   process on a machine takes the next: its local rank) */
    bool tiered;                /* CPU, on a cache miss: start on a quick -O1 build while the -O3
                                   one compiles beside it (Backend.upgrade swaps it in); load
                                   returns before the -O1 build is done (abi NULL) */
    bool launch_access; /* CPU: also export each launch alone (Backend.launch_access), for
                                   --check-against's reference */
} BuildOpts;

typedef struct LoadedModel {
    const nnc_model_abi *abi;
    void *handle;               /* dlopen handle or backend state */
    void *m;                    /* the model instance */
    char so_path[1024];
    bool cache_hit;
    double compile_seconds;
    void *tier;                 /* the backend's build in progress of a faster version, or NULL */
} LoadedModel;

/* One launch at a time, for --check-against (driver/check.c): the reference runs each launch of
 * an entry alone, after the checker has written that launch's inputs into its memory. */
typedef struct {
    /* Launch k of an entry (Program.entry[entry].launches[k]) alone, on instance m's memory,
     * with the batch inputs `in`, at the instance's step (set_step: the step the entry runs
     * at).  0, or a status with the message in abi->error(m). */
    int (*run)(void *m, int entry, int k, const void *const *in, int64_t batch);
    void *(*block)(void *m, int block); /* the host memory of block NNC_BLOCK_* */
} LaunchAccess;

/* How a backend's code for one launch rounds, beyond the IEEE operations its kernels' source
 * spells: what --check-against's tolerances need to know of each target (driver/check_bound.c). */
typedef struct {
    double sum_unit; /* the unit roundoff its sums accumulate in: 2^-53 in double,
                                   2^-24 in float, 2^-23 where an accumulator may truncate */
    double input_unit; /* a product's inputs are first rounded by this much (TF32), or 0 */
} LaunchNumerics;

/* What a device can do at most, for --profile's percentages (driver/profile.c): measured where it
 * can be (a copy, a library product), else nominal; 0 where unknown. */
typedef enum {
    FLOP_F32, /* f32 arithmetic: CUDA cores, the CPU's vector units (sgemm) */
    FLOP_F64, /* double: --f64 builds */
    FLOP_TF32, /* f32 products on tensor cores (--tf32) */
    FLOP_HALF, /* bf16/f16 products on tensor cores (precision bf16 | f16) */
    FLOP_KINDS
} FlopKind;
typedef struct {
    char device[160]; /* "cpu (2 threads)", "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)" */
    double gbs; /* memory bandwidth, GB/s (bytes read + written per second) */
    double gflops[FLOP_KINDS]; /* arithmetic, GFLOP/s */
    char how[600]; /* how each was found, one line: "memory 11.2 GB/s measured (...); f32 ..." */
} DeviceCeilings;

typedef struct {
    const char *name;
    /* Render the whole program (--emit c / --emit cuda). */
    void (*render)(const Program *p, const BuildOpts *o, Str *out);
    /* Render, compile (or find in the cache) and load; NULL with `err` filled on failure. */
    LoadedModel *(*load)(const Program *p, const BuildOpts *o, char *err, size_t errlen);
    void (*unload)(LoadedModel *lm);
    /* The target's assembly (--emit ptx): NULL where the target has none. */
    bool (*emit_asm)(const Program *p, const BuildOpts *o, Str *out, char *err, size_t n);
    /* Ahead of time (-o DIR): DIR/NAME.c, NAME.h and libNAME.a; NULL where the target has none. */
    bool (*build_library)(const Program *p, const BuildOpts *o, const char *dir, char *err, size_t n);
    /* With lm->tier set.  lm->abi NULL (load returned with the quick build still compiling):
     * wait for it and load it; false with err filled when it failed.  Else, once the faster
     * build is ready (wait: block until it is), load it, give it lm's parameters, state and step
     * (and `seed`, which keys dropout), and swap it in.  True when lm->abi and lm->m changed;
     * lm->tier is NULL once nothing more will come.  NULL where the target never tiers. */
    bool (*upgrade)(LoadedModel *lm, uint64_t seed, bool wait, char *err, size_t n);
    /* For a model loaded with BuildOpts.launch_access: its launches one at a time (false where
     * the target cannot). */
    bool (*launch_access)(const LoadedModel *lm, LaunchAccess *out);
    /* How the code this backend makes for launch L (its sums and products) rounds. */
    void (*numerics)(const Program *p, const Launch *L, const BuildOpts *o, LaunchNumerics *out);
    /* --profile (driver/profile.c): one call of `entry` as abi->run makes it (checks, step,
     * outputs), with t[k] the seconds launch k of p->entry[entry] took on the device's own clock;
     * 0 or a status (the message in abi->error).  `how` says how it timed them, in a few words.
     * NULL where the target cannot; the CPU needs a model built with BuildOpts.launch_access. */
    int (*run_timed)(LoadedModel *lm, const Program *p, int entry, const void *const *in, int64_t batch, double *t);
    const char *timed_how;
    /* --profile: the ceilings of the device lm runs on (built with o). */
    void (*ceilings)(LoadedModel *lm, const BuildOpts *o, DeviceCeilings *out);
} Backend;

extern const Backend backend_cpu;
const Backend *backend_for(Device target);
/* --target auto, as torch.device("cuda" if torch.cuda.is_available() else "cpu"): DEV_CUDA when a
 * GPU, its driver and the CUDA libraries are there, else DEV_CPU; `note` says which, in one line
 * ("using cuda:0 (NAME)", "no CUDA device (why), using the CPU"). */
Device backend_auto(char *note, size_t n);

/* model_desc.c: the description of a planned program (include/nnc_runtime.h), allocated in `a`.
 * The ABI's function pointers come from `fns` (NULL: none; a printed description names them). */
nnc_model_desc *model_desc_build(const Program *p, bool f64, const nnc_model_abi *fns, Arena *a);

/* launch_cost.c: what launch L of entry e must move and compute at batch B, for --profile.
 * bytes: each distinct buffer it reads, once, and each it writes, once (a convolution's scratch
 * columns not counted; a copy between devices its size, once); flops: a product's 2 m n k, a
 * convolution's 2 per multiply-add, one per element for each arithmetic elementwise op (views,
 * copies and casts none), one per element reduced, pooling one per window element, a row-wise
 * op an estimate of 5 per element (max, subtract, exp, sum, scale; accuracy 1). */
typedef struct {
    int64_t bytes, flops;
    FlopKind kind; /* the arithmetic that does the flops, and so the ceiling they meet */
    bool bus; /* a copy between devices (host and GPU, or two GPUs): its bytes, counted once, cross a
                 bus, and the memory's ceiling does not apply */
} LaunchCost;
LaunchCost launch_cost(const Program *p, const Entry *e, const Launch *L, int64_t B, bool f64, bool tf32);

/* expr.c: the op table's expression for node `id`, with operands[k] naming operand k, and for an
 * OPF_INDEX op operands[EXPR_ROW] and operands[EXPR_COL] its point's row and column. */
enum { EXPR_ROW = NNC_MAX_IN, EXPR_COL, EXPR_NAMES };
void render_ew_expr(Str *s, const Graph *g, int id, const char *const *operands);
const char *ew_expr_template(const Node *n); /* the template render_ew_expr fills ($0, $g, ...) */
void render_inline_value(Str *s, const Graph *g, int id, const char *step_expr, const char *micro_expr,
                         const char *batch_expr);
void render_dim(Str *s, int64_t d, const char *batch_expr);
void render_numel(Str *s, Shape sh);                         /* element count, batch axis as B */
void render_prod(Str *s, Shape sh, uint32_t mask); /* the product of the axes in mask */
bool launch_has(const Launch *L, int node);
/* The axes of a reduction launch's input space that it sums over (SUM_TO's from the shapes). */
int64_t launch_reduce_mask(const Graph *g, const Launch *L);
/* The launch space's axes in `mask` (in_mask) or not in it, in order: a reduction's reduced
 * (or kept) extents. */
Shape launch_space_axes(const Launch *L, int64_t mask, bool in_mask);
/* Offset of node x's element at the space index (a0, a1, ...): right-aligned broadcast strides,
 * or with `perm` (a transpose's or permute's, node_perm) space axis l reading x's axis perm[l]. */
void render_load_offset(Str *s, const Graph *g, int x, Shape space, const int8_t *perm);
/* The matrices of a GEMM launch: for g < G (the product of lead[]), C_g = alpha op(A_g) op(B_g)
 * (+ C_g with a folded update), each [m, n], the inner extent k; A and B stored row-major with
 * row strides lda and ldb (A as [k, m] when ta), C with n.  Dims may be the batch axis (negative: dim_size).  A shared
 * operand (2-d) is the same matrix for every g; with `sum` (matmul_is_sum) the G products add
 * into one C.  Two shapes are one library call: rows_merged (B shared, A not transposed: A and
 * C are [G*m, ...]) and k_merged (a sum with A transposed and B not: the inner extent is G*k). */
typedef struct {
    int nlead;
    int64_t lead[IR_MAX_RANK];
    int64_t m, n, k, lda, ldb;
    bool a_shared, b_shared, sum, rows_merged, k_merged;
} GemmGeom;
GemmGeom gemm_geom(const Graph *g, const Launch *L);
int64_t gemm_count(const GemmGeom *q, int64_t batch);    /* G */
void render_gemm_count(Str *s, const GemmGeom *q);       /* G as a C expression of B */
void render_source_lines(Str *s, const Program *p, const Launch *L, const char *prefix);
void render_comment_text(Str *s, const char *text);     /* user text inside a generated comment */
void render_c_string_body(Str *s, const char *text);    /* ... inside a "string literal" (escaped) */
/* "relu (forward, mlp.nn:18:12, launch 3 of train_step)": --check-numerics' name for an output. */
void launch_describe(Str *s, const Program *p, const Entry *e, int k, int out);
const char *model_c_name(const Program *p);
/* A file name made safe to quote in generated comments and string literals. */
const char *render_file_name(const Program *p, const char *file);
/* A double as a valid C/CUDA literal or constant expression (never "inf" or "nan"). */
#define RENDER_NUM_LEN 32
const char *render_num(char buf[RENDER_NUM_LEN], double x);

/* Text of files embedded at build time (CMake turns them into C strings). */
extern const char nnc_embed_rng_h[];
extern const char nnc_embed_abi_h[];
extern const char nnc_embed_runtime_h[];
extern const char nnc_embed_pool_h[];
#endif
