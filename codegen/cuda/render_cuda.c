/* render_cuda.c - the CUDA target's translation unit, and the host's view of its kernels.
 *
 * cuda_render writes one CUDA C source file for NVRTC: the prelude, the kernels the runtime
 * launches itself (the step counter, --check-numerics' finite check), then one kernel per
 * kernel launch (L_EW, L_REDUCE, L_ROW, L_ATTENTION) of every entry, rendered by the walker
 * (kernel.c) in the CUDA dialect (dialect_cuda.c), where launches that render the same text
 * but for their buffers and node numbers share one kernel.  Copies, GEMMs and assignments are no kernels: the backend
 * issues them as memcpys and cuBLAS calls.  The rest of the file is what the backend launches
 * them with: their names, and the one place that decides grid and block, which the dialect's
 * thread layout (a warp per row, blocks per reduced output, column strips) relies on.
 *
 * The shapes (docs/architecture.md, "GPU kernels"): elementwise kernels take 8 elements a
 * thread (two 16-byte vectors), so the grid follows the work, up to 2^31-1 blocks.  A reduction
 * splits each output's elements over as many blocks as the work needs, up to MAX_PARTS partials
 * in all, a count fixed by the shapes alone: every GPU adds the same numbers in the same order,
 * and the last block to finish adds the partials (no float atomics), so runs are deterministic. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "../attention.h"
#include "../helpers.h"
#include "../kernel.h"

#define THREADS 256 /* every kernel's block (a warp per row or output: 8 of them) */
#define PER_THREAD 8 /* elements a thread takes, where the work sizes the grid */
#define MAX_GRID 0x7fffffffLL /* gridDim.x's limit (grid.y's is 65535: splits stay far below) */
#define MAX_PARTS 1024 /* blocks whose partials one reduction combines (CUDA_TICKETS) */
#define WARP_ROW_MAX 1024 /* a warp reduces a row up to this long; a block takes longer ones */

int cuda_resolve(const Entry *e, int x) { return kernel_resolve(e, x); }

bool cuda_launch_is_kernel(const Launch *L) {
    return L->kind == L_EW || L->kind == L_REDUCE || L->kind == L_ROW || L->kind == L_ATTENTION;
}

void cuda_kernel_name(char *buf, size_t n, const Program *p, const Entry *e, int k) {
    snprintf(buf, n, "%s_%s_%d", model_c_name(p), e->name, k);
}

static const char step_inc[] =
    "\n"
    "/* The train step's first launch: the optimizer step counter lives on the device. */\n"
    "extern \"C\" __global__ void nnc_step_inc(int64_t *stepp) {\n"
    "    if (threadIdx.x == 0 && blockIdx.x == 0) stepp[0] += 1;\n"
    "}\n"
    "\n"
    "/* With gradient accumulation, the last launch of an accumulate call (one more micro-batch in\n"
    " * the group) and of a train_step (a new group): stepp[2] is nnc_rt.micro on the device. */\n"
    "extern \"C\" __global__ void nnc_micro_next(int64_t *stepp, int reset) {\n"
    "    if (threadIdx.x == 0 && blockIdx.x == 0) stepp[2] = reset ? 0 : stepp[2] + 1;\n"
    "}\n";

/* --check-numerics: the lowest index of a NaN or Inf in q[0, n), by exponent bits (immune to
 * fast-math); *first starts at ~0ull, so "none" reads back as the largest value. */
#define CHECK_FINITE(T, BITS, MASK)                                                                 \
    "\n/* --check-numerics: after each launch, the first non-finite element of each output. */\n"  \
    "extern \"C\" __global__ void __launch_bounds__(256) nnc_check_finite(const " T " *q, int64_t n,"  \
    " unsigned long long *first) {\n"                                                              \
    "    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x)\n" \
    "        if ((" BITS "(q[i]) & " MASK ") == " MASK ") atomicMin(first, (unsigned long long)i);\n" \
    "}\n"
static const char check_finite_f32[] = CHECK_FINITE("float", "__float_as_int", "0x7f800000");
static const char check_finite_f64[] = CHECK_FINITE("double", "__double_as_longlong", "0x7ff0000000000000LL");

/* ---- one kernel per distinct text ------------------------------------------------------------ */

/* Launches that differ only in their buffers and their nodes' numbers (the same layer repeated,
 * the same optimizer update on parameters of the same shape) render the same text once the
 * buffers (and a dropout stream's key) are parameters (off0, off1, arg2, ...) and the locals named after nodes (t<node>, l<node>...,
 * s<node>) are numbered in order of first appearance: they share one kernel.  GPT-2's twelve
 * layers compile as one. */
typedef struct {
    Str comment; /* the first launch's head comment (kernel_render's) */
    Str text; /* from `extern "C"` on, with the markers */
    Str also; /* the other launches that run it */
    int entry, launch, nargs;
    char *bases; /* its parameters' KernelArgs.base */
    int also_entry; /* the entry of the last launch in `also` */
    uint64_t hash;
} UniqueKernel;

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static bool is_ident_char(char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* in's identifiers t<N>, l<N>, s<N> (N a node, optionally followed by `_...`) renamed to
 * t<j>, l<j>, s<j>, j counting each letter's names in order of first appearance: a bijection,
 * so the text means what it meant.  map[3 * nnodes] holds -1 and is left so; touched has as
 * many places.  False (out
 * unfinished) where some N is not a node. */
static bool canon_locals(const char *in, size_t len, int nnodes, int *map, int *touched, Str *out) {
    static const char letters[] = "tls";
    int next[3] = {0, 0, 0}, nt = 0;
    bool ok = true;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        if (!is_ident_char(in[i])) {
            while (j < len && !is_ident_char(in[j])) j++;
            str_printf(out, "%.*s", (int)(j - i), in + i);
            i = j;
            continue;
        }
        while (j < len && is_ident_char(in[j])) j++; /* [i, j): an identifier or a number */
        const char *l = strchr(letters, in[i]);
        size_t d = i + 1;
        while (d < j && in[d] >= '0' && in[d] <= '9') d++;
        if (!l || d == i + 1 || (d < j && in[d] != '_')) {
            str_printf(out, "%.*s", (int)(j - i), in + i);
            i = j;
            continue;
        }
        long node = strtol(in + i + 1, NULL, 10);
        int w = (int)(l - letters);
        if (node < 0 || node >= nnodes || d - i > 10) {
            ok = false;
            break;
        }
        int *slot = &map[w * nnodes + node];
        if (*slot < 0) {
            *slot = next[w]++;
            touched[nt++] = w * nnodes + (int)node;
        }
        str_printf(out, "%c%d%.*s", in[i], *slot, (int)(j - d), in + d);
        i = j;
    }
    for (int t = 0; t < nt; t++) map[touched[t]] = -1;
    return ok;
}

/* s with the first `mark` replaced by `with`, appended to out. */
static void put_replacing(Str *out, const char *s, const char *mark, const char *with) {
    const char *at = strstr(s, mark);
    if (!at) {
        str_puts(out, s);
        return;
    }
    str_printf(out, "%.*s%s%s", (int)(at - s), s, with, at + strlen(mark));
}

void cuda_render_kernels(const Program *p, const BuildOpts *o, Str *s, Arena *a, CudaKernels *kt) {
    Kernel k = {.d = &dialect_cuda, .p = p, .g = p->g, .o = o, .mn = model_c_name(p), .s = s};
    str_puts(s, "/* Generated by nnc from ");
    render_comment_text(s, p->diag && p->diag->file ? p->diag->file : "a model");
    str_puts(s,
             " for the CUDA target (NVRTC). Do not edit: edit the model.\n"
             " * One kernel per launch of each entry point, each headed by the model lines it computes\n"
             " * (launches that differ only in their buffers share one, which lists them); GEMMs run as\n"
             " * cuBLAS calls and copies as memcpys, in the order of the schedule\n"
             " * (nnc MODEL --target cuda --emit ir shows it). */\n");
    dialect_cuda.prelude(s, o);
    kernel_half_prelude(s, p, "__device__ __forceinline__");
    if (program_has_helpers(p)) helper_prelude(s, true);
    attention_prelude(s, p, true, o->f64);
    str_puts(s, step_inc);
    if (o->check_numerics) str_puts(s, o->f64 ? check_finite_f64 : check_finite_f32);

    int total = 0, nu = 0;
    for (int e = 0; e < ENTRY_COUNT; e++) total += p->entry[e].nlaunch;
    UniqueKernel *u = xcalloc((size_t)total + 1, sizeof *u);
    size_t cap = 16;
    while (cap < (size_t)total * 2) cap *= 2;
    int *table = xcalloc(cap, sizeof *table); /* 1 + index into u, 0: empty */
    int *map = xcalloc((size_t)p->g->n * 3 + 1, sizeof *map),
        *touched = xcalloc((size_t)p->g->n * 3 + 1, sizeof *touched);
    for (size_t i = 0; i < (size_t)p->g->n * 3; i++) map[i] = -1;
    if (kt) *kt = (CudaKernels){0};
    KernelArgs args;
    k.args = &args;
    for (int e = 0; e < ENTRY_COUNT; e++) {
        k.e = &p->entry[e];
        if (kt) kt->l[e] = arena_alloc(a, (size_t)(k.e->nlaunch + 1) * sizeof(CudaLaunchKernel));
        for (int i = 0; i < k.e->nlaunch; i++) {
            const Launch *L = &k.e->launches[i];
            if (!cuda_launch_is_kernel(L)) continue;
            k.d = L->kind == L_ROW && cuda_row_per_block(p->g, L) ? &dialect_cuda_row_blocks : &dialect_cuda;
            Str one = {0}, canon = {0};
            args.n = 0;
            k.s = &one;
            kernel_render(&k, L, i);
            const char *code = strstr(one.buf, "\nextern \"C\" __global__");
            code = code ? code + 1 : one.buf;
            size_t clen = one.len - (size_t)(code - one.buf);
            if (!canon_locals(code, clen, p->g->n, map, touched, &canon)) {
                canon.len = 0;
                str_printf(&canon, "%.*s", (int)clen, code);
            }
            uint64_t h = fnv1a(canon.buf, canon.len);
            size_t slot = h & (cap - 1);
            int found = -1;
            for (; table[slot]; slot = (slot + 1) & (cap - 1)) {
                UniqueKernel *v = &u[table[slot] - 1];
                if (v->hash == h && v->text.len == canon.len && !memcmp(v->text.buf, canon.buf, canon.len)) {
                    found = table[slot] - 1;
                    break;
                }
            }
            if (found < 0) {
                found = nu++;
                table[slot] = found + 1;
                u[found] = (UniqueKernel){.text = canon,
                                          .entry = e,
                                          .launch = i,
                                          .nargs = args.n,
                                          .hash = h,
                                          .also_entry = -1,
                                          .bases = xcalloc((size_t)args.n + 1, 1)};
                memcpy(u[found].bases, args.base, (size_t)args.n);
                str_printf(&u[found].comment, "%.*s", (int)(code - one.buf), one.buf);
            } else {
                UniqueKernel *v = &u[found]; /* "train_step 18, 25; grad 3" */
                if (v->also_entry == e) str_printf(&v->also, ", %d", i);
                else str_printf(&v->also, "%s%s %d", v->also.len ? "; " : "", k.e->name, i);
                v->also_entry = e;
                str_free(&canon);
            }
            str_free(&one);
            if (kt) {
                int64_t *v = arena_alloc(a, (size_t)(args.n + 1) * sizeof *v);
                memcpy(v, args.off, (size_t)args.n * sizeof *v);
                kt->l[e][i] = (CudaLaunchKernel){u[found].entry, u[found].launch, args.n, v};
                kt->launches++;
            }
        }
    }
    for (int j = 0; j < nu; j++) {
        UniqueKernel *v = &u[j];
        /* the head comment, with the launches that share the kernel before its end */
        const char *end = v->also.len ? strstr(v->comment.buf, " */\n") : NULL;
        if (end) {
            str_printf(s, "%.*s *   also runs as launch%s", (int)(end - v->comment.buf), v->comment.buf,
                       strpbrk(v->also.buf, ",;") ? "es" : "");
            size_t col = 28; /* the list, wrapped at 100 columns */
            for (const char *w = v->also.buf; *w;) {
                size_t n = strcspn(w, " ");
                if (col + 1 + n > 100) {
                    str_puts(s, "\n *     ");
                    col = 8;
                } else str_putc(s, ' ');
                str_printf(s, "%.*s", (int)n, w);
                col += 1 + n;
                w += n + (w[n] == ' ');
            }
            str_printf(s, "\n%s", end);
        } else str_puts(s, v->comment.buf);
        char name[256];
        cuda_kernel_name(name, sizeof name, p, &p->entry[v->entry], v->launch);
        Str params = {0}, named = {0};
        for (int q = 0; q < v->nargs; q++) str_printf(&params, ", int64_t %s%d", v->bases[q] == 'I' ? "arg" : "off", q);
        put_replacing(&named, v->text.buf, CUDA_NAME_MARK, name);
        put_replacing(s, named.buf, CUDA_ARGS_MARK, params.len ? params.buf : "");
        str_free(&params);
        str_free(&named);
        str_free(&v->comment);
        str_free(&v->text);
        str_free(&v->also);
        free(v->bases);
    }
    if (kt) kt->kernels = nu;
    free(u);
    free(table);
    free(map);
    free(touched);
}

void cuda_render(const Program *p, const BuildOpts *o, Str *s) { cuda_render_kernels(p, o, s, NULL, NULL); }

/* ---- kernel shapes and launch configuration (host side) ----------------------------------- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static unsigned clamp_grid(int64_t blocks) {
    if (blocks < 1) return 1;
    return blocks > MAX_GRID ? (unsigned)MAX_GRID : (unsigned)blocks;
}

static unsigned pow2_at_least(int64_t work, unsigned lo, unsigned hi) {
    unsigned b = lo;
    while (b < hi && (int64_t)b < work) b *= 2;
    return b;
}

/* Whether s has the batch axis, alone (B) or merged with others (B*k). */
static bool has_batch(Shape s) {
    for (int l = 0; l < s.rank; l++)
        if (dim_is_batch(s.d[l])) return true;
    return false;
}

int cuda_vec_lanes(const Graph *g, const Launch *L, bool f64) {
    int lanes = f64 ? 2 : 4;
    return kernel_vec_ok(g, L, lanes) ? lanes : 1;
}

/* Whether every reduced axis (of extent other than 1) comes before every kept one (lead) or
 * after it: then each output's elements are a column of a row-major [R, C] (lead) or one
 * contiguous run of its [nout, R] (trail). */
static bool reduced_axes_at(const Graph *g, const Launch *L, bool lead) {
    int64_t mask = launch_reduce_mask(g, L);
    bool seen_second = false;
    for (int l = 0; l < L->space.rank; l++) {
        if (L->space.d[l] == 1) continue;
        bool red = (mask >> l & 1) != 0;
        if (red != lead) seen_second = true;
        else if (seen_second) return false;
    }
    return true;
}

/* An extent that holds the batch (B, B*k) may be anything up to batch_max: no warp per output
 * and no vectors over it, so that a kernel's shape holds at every batch size. */
CudaReduce cuda_reduce_shape(const Graph *g, const Launch *L, bool f64) {
    int64_t mask = launch_reduce_mask(g, L);
    Shape kept = launch_space_axes(L, mask, false), red = launch_space_axes(L, mask, true);
    int64_t nout = shape_numel(kept, g->batch_max), nred = shape_numel(red, g->batch_max);
    int w = f64 ? 2 : 4;
    bool vec = kernel_vec_ok(g, L, w), full = !has_batch(kept) && nout == 1;
    CudaReduce r = {RED_SPLIT, 1, true, false, THREADS, 0};
    if (full) { /* one output: its elements in one run, a tail where B decides their count */
        r.lanes = vec ? w : 1;
        r.tail = r.lanes > 1 && (has_batch(red) || nred % w);
    } else if (reduced_axes_at(g, L, true)) {
        r.kind = RED_COLS;
        r.lanes = vec && !has_batch(kept) && nout % w == 0 ? w : 1;
        r.cw = pow2_at_least(ceil_div(nout, r.lanes), 1, 32);
    } else if (reduced_axes_at(g, L, false) && !has_batch(red) && nred <= WARP_ROW_MAX) {
        r.kind = RED_WARP;
        r.lanes = vec && nred % w == 0 ? w : 1;
    } else {
        r.inner = reduced_axes_at(g, L, false);
        r.lanes = r.inner && vec && !has_batch(red) && nred % w == 0 ? w : 1;
        r.block = has_batch(red) ? THREADS : pow2_at_least(nred, 32, THREADS);
    }
    return r;
}

bool cuda_row_per_block(const Graph *g, const Launch *L) {
    Shape xs = g->nodes[g->nodes[L->root].in[0]].shape;
    int64_t cols = xs.rank ? xs.d[xs.rank - 1] : 1;
    return dim_is_batch(cols) || cols > WARP_ROW_MAX;
}

/* The largest block cuda_launch_dims gives this launch, at any batch size. */
unsigned cuda_launch_max_block(const Graph *g, const Launch *L, bool f64) {
    return L->kind == L_ATTENTION ? attention_cuda_threads(g, L, f64) : THREADS;
}

/* Splits of `per` elements each (per thread: PER_THREAD), at most `cap`. */
static unsigned splits(int64_t n, int64_t per, int64_t cap) {
    int64_t s = ceil_div(n, per);
    return (unsigned)(s < 1 ? 1 : s > cap ? cap : s);
}

static CudaDims reduce_dims(const Graph *g, const Launch *L, int64_t B, bool f64) {
    CudaReduce r = cuda_reduce_shape(g, L, f64);
    int64_t mask = launch_reduce_mask(g, L);
    int64_t nout = shape_numel(launch_space_axes(L, mask, false), B);
    int64_t nred = shape_numel(launch_space_axes(L, mask, true), B);
    CudaDims d = {1, 1, r.block};
    if (r.kind == RED_WARP) d.grid = clamp_grid(ceil_div(nout, THREADS / 32));
    else if (r.kind == RED_COLS) { /* nout columns, nred rows */
        int64_t strips = ceil_div(nout, (int64_t)r.cw * r.lanes), down = THREADS / r.cw;
        d.grid = clamp_grid(strips);
        d.grid_y = strips > MAX_PARTS / 2 ? 1 : splits(nred, down * PER_THREAD, MAX_PARTS / strips);
    } else {
        d.grid = clamp_grid(nout);
        d.grid_y =
            nout > MAX_PARTS / 2 ? 1 : splits(nred, (int64_t)r.block * PER_THREAD, MAX_PARTS / (nout ? nout : 1));
    }
    return d;
}

/* cross_entropy (its loss) and accuracy add one number over every row: their blocks' partials,
 * at most MAX_PARTS of them.  cross_entropy and its gradient also divide by the rows whose label
 * is not ignore_index, which each block counts over every label. */
static CudaDims row_dims(const Graph *g, const Launch *L, int64_t B) {
    const Node *n = &g->nodes[L->root];
    Shape xs = g->nodes[n->in[0]].shape;
    int64_t cols = xs.rank ? xs.d[xs.rank - 1] : 1;
    cols = dim_size(cols, B);
    int64_t rows = cols > 0 ? shape_numel(xs, B) / cols : 0;
    int64_t blocks = cuda_row_per_block(g, L) ? rows : ceil_div(rows, THREADS / 32);
    /* a total, or (cross_entropy) the rows the mean is over, which every block counts */
    bool capped = op_has(n->op, OPF_ROW_TOTAL) || op_has(n->op, OPF_LABELS);
    CudaDims d = {clamp_grid(capped && blocks > MAX_PARTS ? MAX_PARTS : blocks), 1, THREADS};
    return d;
}

CudaDims cuda_launch_dims(const Program *p, const Entry *e, const Launch *L, int64_t B, bool f64) {
    const Graph *g = p->g;
    CudaDims d = {1, 1, 32};
    (void)e;
    if (L->kind == L_ATTENTION) { /* a block per tile (codegen/attention.c), grid-stride beyond the cap */
        d.block = attention_cuda_threads(g, L, f64);
        d.grid = clamp_grid(attention_cuda_blocks(g, L, B, f64));
    } else if (L->kind == L_EW) {
        d.block = THREADS;
        d.grid = clamp_grid(ceil_div(shape_numel(L->space, B), THREADS * PER_THREAD));
    } else if (L->kind == L_REDUCE) d = reduce_dims(g, L, B, f64);
    else if (L->kind == L_ROW) d = row_dims(g, L, B);
    return d;
}
