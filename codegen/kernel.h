/* kernel.h - one kernel renderer (kernel.c) and the dialects it speaks (one per target).
 *
 * The walker in kernel.c turns a Launch into the text of one kernel: the pointers it reads and
 * writes, the loads at a point of the index space, the fused elementwise body, the reduction's
 * accumulation and the row-wise kernels' arithmetic.  Everything a target spells its own way
 * comes from its KernelDialect: the signature, how the index space is walked (serial loops under
 * an OpenMP pragma on the CPU, a grid-stride loop on CUDA), how the threads that share a row or
 * a scalar combine their partial results, the pointer spellings and the prelude.  The idea is
 * tinygrad's C-style renderer, one language descriptor per target.
 *
 * Invariants a dialect keeps, so that the walker's text is valid in it:
 *   - a point's loop index is `i` (flat spaces) or `a0`, `a1`, ... (one per axis): space_open
 *     defines them, and the walker indexes the operands with them;
 *   - inside row.open's loop, `i` is the row and `C`/`rows` the row length and count (the walker
 *     declares those two); row.cols visits the columns `c` this thread owns, and after max_all /
 *     sum_all every thread sharing the row holds the row's maximum / sum;
 *   - `real` and EXP/LOG/SQRT/TANH/POW come from the prelude, int32_t/int64_t from it or
 *     the headers before it; the dialect's strings use only what its own prelude defines. */
#ifndef NNC_KERNEL_H
#define NNC_KERNEL_H
#include "codegen.h"

typedef struct KernelDialect KernelDialect;
/* The values a launch gives its kernel as parameters (kernel_set.c): each distinct buffer it
 * addresses, by the block its text names ('P', 'S', 'A') and its offset there, and each integer
 * (base 'I', a dropout stream's key; 'N', a size in a segment of a grouped kernel), in order of
 * first use.  Past KERNEL_ARGS_MAX a value is
 * written into the text (256 are 2 KB of CUDA parameters, under the 4 KB every GPU takes). */
#define KERNEL_ARGS_MAX 256
typedef struct KernelArgs {
    int n;
    char base[KERNEL_ARGS_MAX];
    int64_t val[KERNEL_ARGS_MAX];
} KernelArgs;
/* Markers in a kernel's text while it is rendered for a KernelSet: its name (the dialect writes
 * it where the function's name goes) and what the target adds once it knows the kernel (CUDA:
 * the parameters' declarations, or in a segment of a grouped kernel the lines that read them
 * from its table; C: NNC_SHARED, for a kernel several launches run). */
#define KERNEL_NAME_MARK "@@NAME@@"
#define KERNEL_ROW_BLOCK 256 /* rows a block of a total's (row.blocks): its own partial sum */
#define KERNEL_ARGS_MARK "@@ARGS@@"

/* What one kernel is rendered from: a launch of entry `e` of program `p`, into `s`. */
typedef struct Kernel {
    const KernelDialect *d;
    const Program *p;
    const Graph *g;
    const Entry *e;             /* the entry whose buffers the kernel addresses */
    const BuildOpts *o;
    const char *mn;             /* the model's C name (struct and function names) */
    Str *s;
    KernelArgs *args; /* the values the kernel takes as parameters (kernel_set_add sets it; NULL
                         outside a kernel, as --check-numerics' checks: values in the text) */
    /* One segment of a grouped kernel (CUDA, render_cuda.c: the launches of a run of
     * passes/horizontal.c that render one text): its sizes are parameters too ('N'), and the
     * dialect spells the block index and count, and the reductions' workspace, as the
     * segment's, which the kernel finds in a table. */
    bool segment;
} Kernel;

struct KernelDialect {
    const char *name;                                   /* "c", "cuda" */

    /* ---- spellings ---- */
    const char *value;          /* declares a point's temporaries: "real" | "const real" */
    const char *inf;            /* +infinity as a real or double expression */
    const char *step;           /* the optimizer step, an int64 expression */
    const char *micro; /* accumulate calls since the last step (nnc_rt.micro), likewise */
    const char *status, *msg;   /* the int a failed kernel sets, the char[256] it explains in;
                                   NULL where errors go another way (CUDA's err[]) */
    const char *qual[2];        /* between '*' and a pointer's name: [1] when no output of
                                   the kernel aliases an input (C's restrict), else [0] */
    void (*ptr)(const Kernel *k, Str *s, int x);        /* node x's buffer, a typed pointer */
    /* An integer the launch gives its kernel (a dropout stream's key), as a kernel parameter;
     * NULL: written into the text */
    void (*int_arg)(const Kernel *k, Str *s, int64_t v);
    /* `typedef ... real`, the math macros and the helpers the primitives below call. */
    void (*prelude)(Str *s, const BuildOpts *o);
    /* The kernel's signature and opening line, up to its body. */
    void (*open)(const Kernel *k, const Launch *L, int index);

    /* ---- index spaces ---- */
    /* Opens a walk over every point of `sp`: flat, it defines `i` (the flat index), otherwise
     * a0 .. a<rank-1>.  Returns the indentation of the loop body. */
    int (*space_open)(const Kernel *k, const Launch *L, Shape sp, bool flat,
                      bool inplace); /* inplace: an output is an input */
    void (*space_close)(const Kernel *k, const Launch *L, Shape sp, bool flat);
    /* A reduction's loops after `o0` is declared: they call kernel_reduce_point and write o0. */
    void (*reduce)(const Kernel *k, const Launch *L);
    /* A flat walk also takes ACCESS_SUFFIX operands, at i % their size (CUDA, where splitting i
     * into axes costs 64-bit divisions; C's nested loops vectorize as they are). */
    bool flat_suffix;

    /* ---- 16-byte accesses (NULL: the target's compiler vectorizes its loops itself) ---- */
    struct {
        /* Elements per access for launch L's elementwise kernel: 16 bytes of `real` when
         * kernel_vec_ok, else 1. */
        int (*lanes)(const Kernel *k, const Launch *L);
        /* Opens the loop over the whole vectors (defines v, and nv: how many), returns the
         * indentation; tail closes it and opens the loop over the last n % lanes elements at i. */
        int (*open)(const Kernel *k, Shape sp, int lanes);
        void (*tail)(const Kernel *k, Shape sp, int lanes);
        /* "IND const T DST[lanes] = ...": the `lanes` elements of type t (kernel_type's) at
         * vector index v of pointer p; store writes them there from the array src. */
        void (*load)(const Kernel *k, const char *ind, const char *t, int lanes, const char *dst, const char *p,
                     const char *v);
        void (*store)(const Kernel *k, const char *ind, const char *t, int lanes, const char *p, const char *v,
                      const char *src);
        const char *unroll; /* the line before a loop over a vector's lanes */
    } vec;

    /* ---- row-wise kernels: who owns a row, and how its owners combine ---- */
    struct {
        const char *setup;      /* declarations after C and rows (CUDA: the lane and warp) */
        /* Opens launch L's loop over the rows this thread works on (the C dialect asks L
         * whether they run on the pool: pieces of rows, or blocks of them). */
        void (*open)(const Kernel *k, const Launch *L);
        const char *cols;       /* loop header over the columns c this thread owns */
        /* > 1: a row's sums and maximum run in this many lanes (lane c % lanes takes column c),
         * combined in lane order after the row: one thread owns the row, and the lanes are
         * the vector the compiler makes of them, each add in a fixed place (row_sums in kernel.c) */
        int lanes;
        const char *all_rows; /* loop header over every row j, split among the threads total_all combines */
        const char *max_pick;   /* the new mx given x[c] */
        const char *max_all;    /* function giving all of a row's owners their maximum; NULL */
        const char *sum_all;    /* ... their sum (double); NULL where one thread owns a row */
        const char *argmax_all; /* statements combining the owners' (bv, bi) pairs; NULL */
        const char *sync;       /* before overwriting a row that other owners read; NULL */
        const char *leader;     /* guard: one owner of the row adds to a total ("" for all) */
        const char *total_all;  /* function summing the threads' totals (double); NULL */
        /* guard: the one thread that writes a scalar result from `total` ("" for all); every
         * thread evaluates it (CUDA's combines the blocks' totals there) */
        const char *writer;
        /* A label outside [0, C): declared before the rows, recorded in the row, reported
         * after them (NULL: nothing to do there). */
        const char *bad_decl, *bad_record;
        void (*bad_report)(const Kernel *k);
        /* Rows with a total (a loss, a count) or labels to check, on a pool of threads (NULL or
         * false: as above): the launch's rows run in blocks of KERNEL_ROW_BLOCK, a piece taking
         * the blocks [lo, hi) (row.open then opens a block's rows), each block's total into
         * bt_[block]; the kernel's NAME_post then sums the blocks in order, checks the labels
         * and writes the result, so the bits never depend on the threads (the C target). */
        bool (*blocks)(const Kernel *k, const Launch *L);
        /* cross_entropy's rows in two passes over the logits rather than three (NULL: a pass
         * for the maximum, one for the exp-sum, one for the gradient): pair_all(&mx, &s) gives
         * every owner the row's (maximum, sum) from each owner's own, whose sum is taken
         * against its running maximum; the thread's vectors of the row are v = vfirst + vstep *
         * j (v < nv), moved 16 bytes at a time (vec.load, vec.store) where the row's length
         * allows, CE_LOADS of them loaded before the first is used. */
        const char *pair_all, *vfirst, *vstep;
        /* A row held in registers (0: never): where its length is known at compile time and a
         * multiple of a 16-byte vector's elements, and a thread's share is at most
         * ROW_REG_VECS vectors an array, each of the row's `owners` threads reads the vectors
         * v = owner + owners * j (j = 0, 1, ...) of each array once (vec.load), every pass
         * works from them, and the results go out the same way (vec.store); `owner` is the
         * thread's index among the owners. */
        int owners;
        const char *owner;
    } row;

    /* ---- library launches (NULL where the backend issues them itself) ---- */
    void (*gemm)(const Kernel *k, const Launch *L);
    void (*copy)(const Kernel *k, int dst, int src);
    void (*helper)(const Kernel *k, const Launch *L); /* L_HELPER: its plan (helpers.h) */
    void (*collective)(const Kernel *k, const Launch *L);   /* L_COLLECTIVE: the host's nnc_comm */
    void (*attention)(const Kernel *k, const Launch *L); /* L_ATTENTION: codegen/attention.c */
};

extern const KernelDialect dialect_c;      /* codegen/cpu/dialect_c.c */
extern const KernelDialect dialect_cuda;   /* codegen/cuda/dialect_cuda.c (CUDA builds only) */
extern const KernelDialect dialect_cuda_row_blocks; /* ... with a block per row (long rows) */

/* How a kernel reaches operand x at the flat index i of its (row-major) space. */
typedef enum {
    ACCESS_FULL, /* x has the space's shape: x[i] */
    ACCESS_SCALAR, /* one element: x[0] */
    ACCESS_SUFFIX, /* the space's trailing axes, the same for every leading index: x[i % numel(x)] */
    ACCESS_OTHER, /* any other broadcast: per-axis indices */
} Access;

/* kernel.c: the walker. */
Access kernel_access(const Graph *g, int x, Shape space);
/* Launch L can move its operands `lanes` elements at a time from vector index v = i / lanes:
 * no transpose or permute, no member that reads its indices (OPF_INDEX), every input
 * full-size, a scalar, or a suffix of a size lanes divides (known at compile time: no batch
 * axis), and (elementwise) every output full-size.  Implies kernel_flat where the dialect
 * takes suffixes flat. */
bool kernel_vec_ok(const Graph *g, const Launch *L, int lanes);
/* Inside a loop that defines v: the loads of L's inputs at vector index v, then for each of
 * the `lanes` elements q the fused body and (target) the accumulation of the reduced value
 * into target[q], or (target NULL, elementwise) the outputs, stored as vectors at v. */
void kernel_vec_point(const Kernel *k, const Launch *L, int lanes, const char *ind, const char *target);
void kernel_render(const Kernel *k, const Launch *L, int index);   /* comment, signature, body */

/* kernel_set.c: one kernel per distinct text among launches.  kernel_arg: the parameter index
 * that passes value v (base as KernelArgs says) to the kernel being rendered, added on first
 * use; -1 when it is to be written into the text (no KernelSet, or too many). */
int kernel_arg(const Kernel *k, char base, int64_t v);
typedef struct KernelSet KernelSet;
/* code_start: the text that starts a kernel after its head comment ("\nextern \"C\"", ...). */
KernelSet *kernel_set_new(const Program *p, const char *code_start);
/* Renders launch `index` of k->e (kernel_render, collecting its values) and returns the index of
 * its kernel in the set, a new one or one it shares. */
int kernel_set_add(KernelSet *ks, const Kernel *k, const Launch *L, int index);
int kernel_set_count(const KernelSet *ks);
int kernel_set_uses(const KernelSet *ks, int j); /* how many launches run kernel j */
void kernel_set_first(const KernelSet *ks, int j, int *entry, int *launch); /* the launch it was made for */
/* What launch `launch` of entry `entry` runs: its kernel and the values it passes (n of them,
 * val[i] in block base[i], as KernelArgs), kept until kernel_set_free; NULL if not added. */
typedef struct {
    int kernel, n;
    const int64_t *val;
    const char *base;
} KernelUse;
const KernelUse *kernel_set_use(const KernelSet *ks, int entry, int launch);
/* Kernel j's text: its head comment (with the launches that share it), its name and
 * parameters' declarations in place of the markers. */
void kernel_set_emit(const KernelSet *ks, int j, Str *s, const char *name, const char *args);
void kernel_set_emit_code(const KernelSet *ks, int j, Str *s, const char *name, const char *args); /* no comment */
void kernel_set_free(KernelSet *ks);
void kernel_math_prelude(Str *s, bool f64, const char *hd); /* typedef real, EXP ... POW, FLOORDIV */
/* bf16/f16 conversions (nnc_bf16_f32, nnc_f32_bf16, ...), when the program has half tensors. */
void kernel_half_prelude(Str *s, const Program *p, const char *qualifiers);
/* The C target's whole-tensor half conversions on the pool (nnc_convert), after kernel_half_prelude. */
void kernel_half_pool_prelude(Str *s, const Program *p);
int kernel_resolve(const Entry *e, int x);          /* the node whose buffer holds x (views) */
const char *kernel_type(const Kernel *k, int x);    /* "real" or "int32_t" */
void kernel_ptr_line(const Kernel *k, const char *decl, int x);     /* "    DECL = PTR;\n" */
/* For a dialect's reduce: the loads and the fused prologue at the point a0, a1, ..., then (when
 * `target` is not NULL) the accumulation of the reduced value into the lvalue `target`, each
 * line indented by `ind`.  kernel_reduce_step is that accumulation alone, unindented. */
void kernel_reduce_point(const Kernel *k, const Launch *L, const char *ind, const char *target);
/* the same at flat index i (kernel_flat: every operand full-size or a scalar, or a suffix
 * where the dialect takes them) */
void kernel_reduce_point_at(const Kernel *k, const Launch *L, const char *ind, const char *target, bool flat);
bool kernel_flat(const Kernel *k, const Launch *L);
void kernel_reduce_step(const Kernel *k, const Launch *L, const char *target);   /* no indent */
void kernel_reduce_acc(const Kernel *k, const Launch *L, int indent);   /* double acc = identity */
bool kernel_reduce_is_max(const Kernel *k, const Launch *L);
#endif
