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
 * and the last block to finish adds the partials (no float atomics), so runs are deterministic.
 *
 * A run of launches (passes/horizontal.c: the optimizer's per-parameter updates and sums of
 * squares) becomes grouped kernels: each launch is rendered as a segment (Kernel.segment: its
 * sizes are parameters too), those of one text are one kernel on a grid of all their blocks,
 * and a table in the module gives each segment's first block, blocks and parameters
 * (docs/architecture.md, "Grouped kernels"). */
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "../attention.h"
#include "../helpers.h"
#include "../kernel.h"

#define THREADS 256 /* every kernel's block (a warp per row or output: 8 of them) but: */
#define PER_THREAD 8 /* elements a thread takes, where the work sizes the grid */
#define MAX_GRID 0x7fffffffLL /* gridDim.x's limit (grid.y's is 65535: splits stay far below) */
#define MAX_PARTS 1024 /* blocks whose partials one reduction combines (CUDA_TICKETS) */
#define WARP_ROW_MAX 1024 /* a warp reduces a row up to this long; a block takes longer ones */
#define CE_ROW_THREADS 1024 /* cross_entropy's block, where a block takes a row (row_threads) */
/* RED_COLS (cols_rows, reduce_dims).  A column reduction reads memory at the copy rate when
 * enough bytes are in flight: about 4 TB/s x 0.7 us under load = 2.8 MB on an H200, 21 KB per
 * SM.  Each thread loads COLS_BYTES (rows of a round, all loads issued before the first add),
 * so a block of 256 has 32 KB in flight, and a grid of up to COLS_BLOCKS blocks (two per SM of
 * an H100 or H200; a count fixed by the shapes, not the device) about 6-8 MB: one wave, where
 * the old grid of ~1000 blocks with one 16-byte load a thread took 1.3 waves.  The strip's last
 * block then adds at most COLS_FINISH partial rows a thread, loaded together: one L2 round
 * trip, where 170 row ranges took 21 in a row. */
#define COLS_BYTES 128
#define COLS_BLOCKS 256
#define COLS_RESIDENT 2 /* blocks of 256 an SM holds at once: 128 registers a thread at most */
#define COLS_FINISH 4 /* the prelude's nnc_cols_finish loads this many partial rows at once */

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

/* Kept inputs (the ABI's keep and submit_rows): a batch gathered on the device from a data set
 * kept there.  Row r of dst is the n values of the kept source from element start[r] on, in the
 * input's type: t 0 copies 4-byte values (f32 or i32), 1 makes bytes floats ((float)b * k, as
 * the host's gather), 2 widens f32 to f64, 3 bytes to f64 (the float, widened: --f64's inputs).
 * Rows along y, a row's values along x; 16 bytes a thread where the row's start and length are
 * multiples of 4 values (the destination's rows then lie on 16 bytes, its base on 256). */
/* A product's epilogue where cuBLASLt does not run it (cuda_issue.c's issue_gemm_epi): each of
 * C's rows plus the bias, then ReLU as ops.def spells it. */
static const char bias_rows[] =
    "\n"
    "/* A bias (and ReLU) over a product's rows, when cuBLASLt's epilogue cannot. */\n"
    "extern \"C\" __global__ void __launch_bounds__(256) nnc_bias_rows(real *c, const real *bias, long long rows,\n"
    "                                                            long long n, int relu) {\n"
    "    for (long long i = blockIdx.x * 256LL + threadIdx.x; i < rows * n; i += 256LL * gridDim.x) {\n"
    "        const real v = c[i] + bias[i % n];\n"
    "        c[i] = relu && v <= 0 ? (real)0 : v;\n"
    "    }\n"
    "}\n";

bool cuda_has_epilogue(const Program *p) {
    for (int e = 0; e < ENTRY_COUNT; e++)
        for (int i = 0; i < p->entry[e].nlaunch; i++)
            if (p->entry[e].launches[i].kind == L_GEMM && p->entry[e].launches[i].bias >= 0) return true;
    return false;
}

static const char gather_rows[] =
    "\n"
    "/* Kept inputs: a batch's rows gathered from the data set kept in device memory. */\n"
    "extern \"C\" __global__ void __launch_bounds__(256) nnc_rows(void *dst, const void *src, const int64_t *start,\n"
    "                                                       int64_t rows, int64_t n, int t, float k) {\n"
    "    const int64_t j0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)blockDim.x * gridDim.x;\n"
    "    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {\n"
    "        const int64_t s = start[r];\n"
    "        const bool v = ((s | n) & 3) == 0;\n"
    "        if (t == 0 && v) {\n"
    "            const int4 *a = (const int4 *)((const int *)src + s);\n"
    "            int4 *b = (int4 *)((int *)dst + r * n);\n"
    "            for (int64_t j = j0; j < n / 4; j += step) b[j] = a[j];\n"
    "        } else if (t == 0) {\n"
    "            const int *a = (const int *)src + s;\n"
    "            int *b = (int *)dst + r * n;\n"
    "            for (int64_t j = j0; j < n; j += step) b[j] = a[j];\n"
    "        } else if (t == 1 && v) {\n"
    "            const unsigned int *a = (const unsigned int *)((const unsigned char *)src + s);\n"
    "            float4 *b = (float4 *)((float *)dst + r * n);\n"
    "            for (int64_t j = j0; j < n / 4; j += step) {\n"
    "                const unsigned int w = a[j];\n"
    "                b[j] = make_float4((float)(w & 255u) * k, (float)(w >> 8 & 255u) * k, (float)(w >> 16 & 255u) * k,\n"
    "                                   (float)(w >> 24) * k);\n"
    "            }\n"
    "        } else if (t == 1) {\n"
    "            const unsigned char *a = (const unsigned char *)src + s;\n"
    "            float *b = (float *)dst + r * n;\n"
    "            for (int64_t j = j0; j < n; j += step) b[j] = (float)a[j] * k;\n"
    "        } else if (t == 2) {\n"
    "            const float *a = (const float *)src + s;\n"
    "            double *b = (double *)dst + r * n;\n"
    "            for (int64_t j = j0; j < n; j += step) b[j] = (double)a[j];\n"
    "        } else {\n"
    "            const unsigned char *a = (const unsigned char *)src + s;\n"
    "            double *b = (double *)dst + r * n;\n"
    "            for (int64_t j = j0; j < n; j += step) b[j] = (double)((float)a[j] * k);\n"
    "        }\n"
    "    }\n"
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

/* ---- grouped kernels: a run's launches as few kernels over tables of segments ------------ */

/* A grouped kernel's segments at most: a grouped sum's each take a ticket of the workspace. */
#define GROUP_SEGMENTS CUDA_TICKETS

static const char segment_find[] =
    "\n"
    "/* Grouped kernels (a run of launches, passes/horizontal.c): a table of n segments, a row of w\n"
    " * values each, its launch's first block, its count of blocks, then the offsets, sizes and\n"
    " * integers it would have taken as parameters.  The row of blockIdx.x's segment, by bisection\n"
    " * over the first blocks (the same in every thread of a block, so no thread diverges). */\n"
    "__device__ __forceinline__ int nnc_segment(const int64_t *tab, int n, int w) {\n"
    "    int lo = 0, hi = n - 1;\n"
    "    while (lo < hi) {\n"
    "        const int mid = (lo + hi + 1) >> 1;\n"
    "        if (tab[mid * w] <= (int64_t)blockIdx.x) lo = mid;\n"
    "        else hi = mid - 1;\n"
    "    }\n"
    "    return lo;\n"
    "}\n";

static const char *arg_prefix(char base) { return base == 'I' || base == 'N' ? "arg" : "off"; }

void cuda_group_name(char *buf, size_t n, const Program *p, const Entry *e, const CudaGroup *gr) {
    snprintf(buf, n, "%s_%s_%d_x%d", model_c_name(p), e->name, gr->first, gr->nseg);
}

/* The blocks launch L takes alone, which its segment keeps: an elementwise kernel's grid, a
 * reduction's splits of its one output. */
static unsigned segment_blocks(const Program *p, const Entry *e, const Launch *L, bool f64) {
    CudaDims d = cuda_launch_dims(p, e, L, p->g->batch_max, f64);
    return L->kind == L_REDUCE ? d.grid_y : d.grid;
}

/* The grouped kernel gr (launches mem[0, gr->nseg) of its run, one kernel text j): its table, a
 * row per segment, then the kernel, whose ARGS marker becomes the lines that read its row. */
static void emit_group(const Program *p, const Entry *e, const BuildOpts *o, const KernelSet *ks, int j,
                       const CudaGroup *gr, const int *mem, Str *s) {
    const Graph *g = p->g;
    const Launch *F = &e->launches[mem[0]];
    const KernelUse *u0 = kernel_set_use(ks, e->kind, mem[0]);
    const int w = 2 + u0->n;
    char name[256], nb[48];
    cuda_group_name(name, sizeof name, p, e, gr);
    str_printf(s, "\n/* %s: %d launches of the run #%d..#%d as one kernel: %s", e->name, gr->nseg, F->hfirst,
               F->hfirst + F->hcount - 1, launch_kind_label(F->kind));
    for (int i = 0; i < F->nnodes; i++)
        str_printf(s, "%s%s", i ? ", " : " (", node_op_name(&g->nodes[F->nodes[i]], nb));
    str_puts(s, ")\n *   launches");
    for (int m = 0, col = 13; m < gr->nseg; m++) { /* wrapped at 100 columns */
        char word[16];
        int n = snprintf(word, sizeof word, " %d%s", mem[m], m + 1 < gr->nseg ? "," : "");
        if (col + n > 100) {
            str_puts(s, "\n *    ");
            col = 7;
        }
        str_puts(s, word);
        col += n;
    }
    str_puts(s, "\n");
    render_source_lines(s, p, F, " *   ");
    str_puts(s,
             " * Each block finds its launch (a segment) in the table below, a row per segment: its first\n"
             " * block, its blocks, then its");
    for (int q = 0; q < u0->n; q++) str_printf(s, "%s %s%d", q ? "," : "", arg_prefix(u0->base[q]), q);
    str_printf(s, ". */\n__device__ const int64_t %s_segs[%d] = {\n", name, gr->nseg * w);
    int64_t first = 0;
    for (int m = 0; m < gr->nseg; m++) {
        const Launch *L = &e->launches[mem[m]];
        const KernelUse *u = kernel_set_use(ks, e->kind, mem[m]);
        unsigned blocks = segment_blocks(p, e, L, o->f64);
        str_printf(s, "    %lld, %u", (long long)first, blocks);
        for (int q = 0; q < u->n; q++) str_printf(s, ", %lld", (long long)u->val[q]);
        str_printf(s, ", /* #%d */\n", mem[m]);
        first += blocks;
    }
    str_puts(s, "};\n");
    Str decl = {0};
    str_printf(
        &decl,
        "    const int nnc_s = nnc_segment(%s_segs, %d, %d);\n"
        "    const int64_t *const nnc_row = %s_segs + nnc_s * %d;\n"
        "    const unsigned nnc_b0 = (unsigned)nnc_row[0], nnc_bx = blockIdx.x - nnc_b0, nnc_gx = (unsigned)nnc_row[1];\n"
        "    (void)nnc_b0;\n",
        name, gr->nseg, w, name, w);
    for (int q = 0; q < u0->n; q++)
        str_printf(&decl, "    const int64_t %s%d = nnc_row[%d];\n", arg_prefix(u0->base[q]), q, 2 + q);
    kernel_set_emit_code(ks, j, s, name, decl.buf);
    str_free(&decl);
}

/* The grouped kernels of a model, in order (CudaKernels.groups once rendered). */
typedef struct {
    CudaGroup *v;
    int n, cap;
} GroupList;

/* The run of launches [first, first + n): for each of their kernel texts, in order of its first
 * launch, its launches as grouped kernels of at most GROUP_SEGMENTS segments (and, for
 * reductions, the workspace's partials), each emitted and added to gl. */
static void emit_run(const Program *p, const Entry *e, const BuildOpts *o, const KernelSet *ks, int first, int n,
                     Str *s, GroupList *gl) {
    int *mem = xmalloc((size_t)n * sizeof *mem);
    bool *done = xcalloc((size_t)n, 1);
    const bool red = e->launches[first].kind == L_REDUCE;
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        int j = kernel_set_use(ks, e->kind, first + i)->kernel, nm = 0;
        for (int q = i; q < n; q++)
            if (!done[q] && kernel_set_use(ks, e->kind, first + q)->kernel == j) {
                done[q] = true;
                mem[nm++] = first + q;
            }
        for (int m0 = 0; m0 < nm;) {
            CudaGroup gr = {e->kind, mem[m0], 0, 0};
            int64_t blocks = 0;
            while (m0 + gr.nseg < nm && gr.nseg < GROUP_SEGMENTS) {
                int64_t b = segment_blocks(p, e, &e->launches[mem[m0 + gr.nseg]], o->f64);
                if (gr.nseg && blocks + b > (red ? CUDA_PARTIALS : MAX_GRID)) break;
                blocks += b;
                gr.nseg++;
            }
            gr.grid = (unsigned)blocks;
            emit_group(p, e, o, ks, j, &gr, mem + m0, s);
            if (gl->n == gl->cap)
                gl->v = xrealloc(gl->v, (size_t)(gl->cap = gl->cap ? 2 * gl->cap : 8) * sizeof *gl->v);
            gl->v[gl->n++] = gr;
            m0 += gr.nseg;
        }
    }
    free(mem);
    free(done);
}

/* Launches that render the same text once their buffers (and a dropout stream's key) are
 * parameters (off0, off1, arg2, ...) share one kernel (kernel_set.c): GPT-2's twelve layers
 * compile as one.  A run of launches (passes/horizontal.c) renders each as a segment, whose
 * sizes are parameters too: the run's launches of one text become one grouped kernel. */
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
    str_puts(s, gather_rows);
    if (cuda_has_epilogue(p)) str_puts(s, bias_rows);
    if (o->check_numerics) str_puts(s, o->f64 ? check_finite_f64 : check_finite_f32);

    bool runs = false;
    for (int e = 0; e < ENTRY_COUNT; e++)
        for (int i = 0; i < p->entry[e].nlaunch; i++) runs |= p->entry[e].launches[i].hcount > 1;
    if (runs) str_puts(s, segment_find);

    KernelSet *ks = kernel_set_new(p, "\nextern \"C\" __global__");
    for (int e = 0; e < ENTRY_COUNT; e++) {
        k.e = &p->entry[e];
        for (int i = 0; i < k.e->nlaunch; i++) {
            const Launch *L = &k.e->launches[i];
            if (!cuda_launch_is_kernel(L)) continue;
            k.d = L->kind == L_ROW && cuda_row_per_block(p->g, L) ? &dialect_cuda_row_blocks : &dialect_cuda;
            k.segment = L->hcount > 1; /* horizontal.c's runs are elementwise or whole reductions */
            kernel_set_add(ks, &k, L, i);
        }
    }
    /* a segment's kernel runs only inside its grouped kernels (below) */
    bool *seg = xcalloc((size_t)kernel_set_count(ks) + 1, 1);
    for (int e = 0; e < ENTRY_COUNT; e++)
        for (int i = 0; i < p->entry[e].nlaunch; i++)
            if (p->entry[e].launches[i].hcount > 1) seg[kernel_set_use(ks, e, i)->kernel] = true;
    for (int j = 0; j < kernel_set_count(ks); j++) {
        if (seg[j]) continue;
        int fe, fl;
        kernel_set_first(ks, j, &fe, &fl);
        char name[256];
        cuda_kernel_name(name, sizeof name, p, &p->entry[fe], fl);
        const KernelUse *u = kernel_set_use(ks, fe, fl);
        Str params = {0};
        for (int q = 0; q < u->n; q++) str_printf(&params, ", int64_t %s%d", arg_prefix(u->base[q]), q);
        kernel_set_emit(ks, j, s, name, params.len ? params.buf : "");
        str_free(&params);
    }
    /* the backend's copy of each launch's kernel and values, which outlives the set; a run's
     * first launch issues its grouped kernels, the run's other launches nothing */
    for (int e = 0; kt && e < ENTRY_COUNT; e++)
        kt->l[e] = arena_alloc(a, (size_t)(p->entry[e].nlaunch + 1) * sizeof(CudaLaunchKernel));
    GroupList gl = {0};
    for (int e = 0; e < ENTRY_COUNT; e++)
        for (int i = 0; i < p->entry[e].nlaunch; i++) {
            const Launch *L = &p->entry[e].launches[i];
            if (L->hcount < 2 || L->hfirst != i) continue;
            int g0 = gl.n;
            emit_run(p, &p->entry[e], o, ks, i, L->hcount, s, &gl);
            for (int q = 0; kt && q < L->hcount; q++)
                kt->l[e][i + q] =
                    (CudaLaunchKernel){.entry = e, .launch = i + q, .group = g0, .ngroups = q ? -1 : gl.n - g0};
        }
    if (kt) {
        kt->ngroups = gl.n;
        kt->groups = arena_alloc(a, (size_t)(gl.n + 1) * sizeof *kt->groups);
        if (gl.n) memcpy(kt->groups, gl.v, (size_t)gl.n * sizeof *gl.v);
    }
    for (int e = 0; kt && e < ENTRY_COUNT; e++)
        for (int i = 0; i < p->entry[e].nlaunch; i++) {
            const KernelUse *u = kernel_set_use(ks, e, i);
            if (!u || p->entry[e].launches[i].hcount > 1) continue;
            int64_t *v = arena_alloc(a, (size_t)(u->n + 1) * sizeof *v);
            memcpy(v, u->val, (size_t)u->n * sizeof *v);
            int fe, fl;
            kernel_set_first(ks, u->kernel, &fe, &fl);
            kt->l[e][i] = (CudaLaunchKernel){fe, fl, u->n, v, 0, 0};
        }
    free(gl.v);
    free(seg);
    kernel_set_free(ks);
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

/* RED_COLS: the rows a thread loads in a round, COLS_BYTES over what one row costs it (a vector
 * or an element of each operand but scalars: 16 for a bf16 gradient, 8 for f32, 4 for the
 * two f32 operands of `mul, sum_to`), a power of two in [2, 16] (8 one element at a time), and
 * no more than the nred rows (at the largest batch) need of a block of `down` rows. */
static unsigned cols_rows(const Graph *g, const Launch *L, int lanes, bool f64, int64_t nred, unsigned down) {
    int bytes = 0;
    for (int j = 0; j < L->nins; j++) {
        int x = L->ins[j];
        if (kernel_access(g, x, L->space) == ACCESS_SCALAR) continue;
        DType t = g->nodes[x].dtype;
        bytes += lanes * (DTYPE_IS_HALF(t) ? 2 : f64 && t == DT_F32 ? 8 : 4);
    }
    unsigned rows = 2, most = lanes > 1 ? 16 : 8;
    while (rows < most && (int)rows * 2 * (bytes ? bytes : 4) <= COLS_BYTES && (int64_t)rows * down < nred) rows *= 2;
    return rows;
}

/* An extent that holds the batch (B, B*k) may be anything up to batch_max: no warp per output
 * and no vectors over it, so that a kernel's shape holds at every batch size. */
CudaReduce cuda_reduce_shape(const Graph *g, const Launch *L, bool f64) {
    int64_t mask = launch_reduce_mask(g, L);
    Shape kept = launch_space_axes(L, mask, false), red = launch_space_axes(L, mask, true);
    int64_t nout = shape_numel(kept, g->batch_max), nred = shape_numel(red, g->batch_max);
    int w = f64 ? 2 : 4;
    bool vec = kernel_vec_ok(g, L, w), full = !has_batch(kept) && nout == 1;
    CudaReduce r = {RED_SPLIT, 1, true, false, THREADS, 0, 0};
    if (full) { /* one output: its elements in one run, a tail where B decides their count */
        r.lanes = vec ? w : 1;
        r.tail = r.lanes > 1 && (has_batch(red) || nred % w);
    } else if (reduced_axes_at(g, L, true)) {
        r.kind = RED_COLS;
        r.lanes = vec && !has_batch(kept) && nout % w == 0 ? w : 1;
        r.cw = pow2_at_least(ceil_div(nout, r.lanes), 1, 32);
        r.rows = cols_rows(g, L, r.lanes, f64, nred, THREADS / r.cw);
    } else if (reduced_axes_at(g, L, false) && !has_batch(red) && nred <= WARP_ROW_MAX) {
        r.kind = RED_WARP;
        r.lanes = vec && nred % w == 0 ? w : 1;
        /* as many lanes as the row has loads (attention's delta, 64 bf16 values by 4: 16), so a
         * warp's lanes all load, and fewer shuffle rounds combine them */
        r.cw = pow2_at_least(ceil_div(nred, r.lanes), 4, 32);
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

/* A row kernel's block.  cross_entropy's long rows are read twice (dialect_cuda_row_blocks: the
 * maximum and exp-sum, then the gradient), the second time from L2 where the rows in flight fit
 * there: an SM holds two blocks of 1024 threads at most (2048 threads), so an H200's 132 SMs
 * work on 264 rows at a time, 26 MB of GPT-2's 100 KB bf16 rows against its 50 MB of L2; with
 * blocks of 256 all 1024 blocks of the grid were resident, 103 MB, and each pass read memory. */
static unsigned row_threads(const Graph *g, const Launch *L) {
    Op op = g->nodes[L->root].op;
    return cuda_row_per_block(g, L) && (op == OP_CROSS_ENTROPY || op == OP_CE_GRAD) ? CE_ROW_THREADS : THREADS;
}

/* The largest block cuda_launch_dims gives this launch, at any batch size. */
unsigned cuda_launch_max_block(const Graph *g, const Launch *L, bool f64) {
    return L->kind == L_ATTENTION ? attention_cuda_threads(g, L, f64) : L->kind == L_ROW ? row_threads(g, L) : THREADS;
}

/* The blocks an SM must hold at once, for __launch_bounds__' second number, or 0: none asked.
 * A column reduction's grid is at most COLS_BLOCKS, two blocks per SM: ptxas may then use up
 * to 128 registers a thread, and does, to keep a round's loads in flight together (without it
 * it held them to 32-40 registers and 2-4 loads). */
unsigned cuda_launch_min_blocks(const Graph *g, const Launch *L, bool f64) {
    if (L->kind == L_ATTENTION) return attention_cuda_min_blocks(g, L, f64);
    return L->kind == L_REDUCE && cuda_reduce_shape(g, L, f64).kind == RED_COLS ? COLS_RESIDENT : 0;
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
    if (r.kind == RED_WARP) d.grid = clamp_grid(ceil_div(nout, THREADS / r.cw));
    else if (r.kind == RED_COLS) { /* nout columns, nred rows in rounds of rows * down */
        int64_t strips = ceil_div(nout, (int64_t)r.cw * r.lanes), down = THREADS / r.cw;
        int64_t rounds = ceil_div(nred, down * r.rows), cap = COLS_BLOCKS / strips;
        if (cap > COLS_FINISH * down) cap = COLS_FINISH * down;
        int64_t per = ceil_div(rounds, cap < 1 ? 1 : cap); /* a block's rounds: as even as can be */
        d.grid = clamp_grid(strips);
        d.grid_y = rounds > 1 ? (unsigned)ceil_div(rounds, per) : 1;
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
    CudaDims d = {clamp_grid(capped && blocks > MAX_PARTS ? MAX_PARTS : blocks), 1, row_threads(g, L)};
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
