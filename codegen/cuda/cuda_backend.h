/* cuda_backend.h - what the CUDA renderer, the NVRTC wrapper and the CUDA backend share.
 *
 * The renderer (render_cuda.c, with the kernel walker speaking dialect_cuda.c) turns every
 * kernel launch (L_EW, L_REDUCE, L_ROW) of every entry into one `extern "C" __global__`
 * function with the same parameter list, so the runtime launches them all the same way;
 * cuda_launch_dims() is the one place that decides their grid and block.
 * Copies, GEMMs and assignments are not kernels: the backend issues them as memcpys and cuBLAS
 * calls. */
#ifndef NNC_CUDA_BACKEND_H
#define NNC_CUDA_BACKEND_H
#include "../codegen.h"

/* Every kernel's parameters, in order:
 *   real *P, real *S, real *A     device bases of the parameter, state and activation blocks
 *   int64_t B                     the run-time batch
 *   const int64_t *stepp          the step counter, kept in device memory so a captured CUDA
 *                                 graph replays with the current step (PyTorch's "capturable"
 *                                 Adam keeps its step on the device for the same reason)
 *   int *err                      error flag: {1, row, label, classes} after a bad label
 *   unsigned *ws                  the reductions' workspace, CUDA_WORKSPACE_BYTES per GPU:
 *                                 CUDA_TICKETS counters (zero when no kernel runs: the backend
 *                                 clears them once, each kernel leaves them so), then
 *                                 CUDA_PARTIALS doubles, the blocks' partial results
 *   int64_t off0, arg1, ...       the offsets of the buffers the kernel reads and writes, in
 *                                 elements of its block (P, S or A, which the kernel's text
 *                                 names), one per distinct buffer, and the integers the launch
 *                                 gives it (a dropout stream's key): launches that differ only
 *                                 in those (a GPT's twelve layers) run one kernel
 *                                 (render_cuda.c), and NVRTC compiles it once */
#define CUDA_KERNEL_PARAMS "real *P, real *S, real *A, int64_t B, const int64_t *stepp, int *err, unsigned *ws"
#define CUDA_TICKETS 1024
#define CUDA_PARTIALS (1 << 17)
#define CUDA_WORKSPACE_BYTES (CUDA_TICKETS * 4 + CUDA_PARTIALS * 8)

typedef struct {
    unsigned grid, grid_y, block;
} CudaDims;

/* How a reduction kernel shares its work (cuda_reduce_shape decides from the shapes; the
 * dialect renders that kernel and cuda_launch_dims launches it). */
typedef enum {
    RED_SPLIT, /* grid (outputs, splits): each output's elements over grid.y blocks, whose
                    partials the last of them sums (a full reduction is one output) */
    RED_COLS, /* the leading axes reduced (a bias gradient): blocks over column strips (grid.x)
                    and row ranges (grid.y), partials [grid.y, C] summed per strip */
    RED_WARP, /* the trailing axes reduced, short rows (no batch axis): a group of `cw` lanes of a
                    warp per output (32, or fewer where the row's loads need fewer) */
} RedKind;
typedef struct {
    RedKind kind;
    int lanes; /* elements per load: 1, or 16 bytes of real (kernel_vec_ok) */
    bool inner; /* RED_SPLIT: the reduced axes are the trailing ones (one run per output) */
    bool tail; /* ... lanes may not divide the run (a full reduction over B): a scalar tail */
    unsigned block; /* threads per block */
    unsigned cw; /* RED_COLS: threads across a strip, each `lanes` columns; block / cw down.
                    RED_WARP: the lanes an output takes (a power of two, 4 to 32) */
    unsigned rows; /* RED_COLS: rows a thread loads before it adds them (a round: rows * down) */
} CudaReduce;

/* Which kernel a launch runs, with which offsets and integers (after CUDA_KERNEL_PARAMS). */
typedef struct {
    int entry, launch; /* the kernel is named after this launch (cuda_kernel_name): the first
                          launch whose kernel text this was */
    int nargs;
    const int64_t *args;
    /* A launch of a run (passes/horizontal.c): its first launch issues the run's grouped kernels
     * CudaKernels.groups[group, group + ngroups), the run's other launches (ngroups -1) nothing;
     * 0 for a launch that runs its own kernel. */
    int group, ngroups;
} CudaLaunchKernel;
/* A grouped kernel (render_cuda.c): launches of a run whose kernels are one text but for their
 * offsets and sizes (a segment each), issued as one kernel on a grid of all their blocks, each
 * block finding its launch in the kernel's table (PyTorch's multi_tensor_apply). */
typedef struct {
    int entry, first, nseg; /* its first launch and segments: its name (cuda_group_name) */
    unsigned grid; /* the segments' blocks, one after another (a block of 256 threads each) */
} CudaGroup;
typedef struct {
    CudaLaunchKernel *l[ENTRY_COUNT]; /* per launch of each entry (kernel launches only) */
    CudaGroup *groups;
    int ngroups;
} CudaKernels;

/* The translation unit: one kernel per distinct kernel text among all entries' kernel launches;
 * kt (arrays allocated in `a`), when not NULL, gets which kernel each launch runs. */
void cuda_render_kernels(const Program *p, const BuildOpts *o, Str *out, Arena *a, CudaKernels *kt);
bool cuda_has_epilogue(const Program *p); /* a product with a bias in its epilogue (passes/fuse.c) */
void cuda_render(const Program *p, const BuildOpts *o, Str *out); /* the same without kt */
bool cuda_launch_is_kernel(const Launch *L);
void cuda_kernel_name(char *buf, size_t n, const Program *p, const Entry *e, int k);
void cuda_group_name(char *buf, size_t n, const Program *p, const Entry *e, const CudaGroup *gr);
/* f64: reals are doubles (attention's tiles are as large as fit the shared memory) */
CudaDims cuda_launch_dims(const Program *p, const Entry *e, const Launch *L, int64_t B, bool f64);
unsigned cuda_launch_max_block(const Graph *g, const Launch *L, bool f64); /* for __launch_bounds__ */
unsigned cuda_launch_min_blocks(const Graph *g, const Launch *L, bool f64); /* ... its second number, or 0 */
int cuda_vec_lanes(const Graph *g, const Launch *L, bool f64); /* an elementwise kernel's: 1 or 16 bytes */
CudaReduce cuda_reduce_shape(const Graph *g, const Launch *L, bool f64);
bool cuda_row_per_block(const Graph *g, const Launch *L); /* rows longer than a warp takes, or of B*k */
/* The node whose buffer holds x's value (follows reshape views). */
int cuda_resolve(const Entry *e, int x);

/* cuda_libs.c: dlopen the first of `names` (NULL-terminated) on the loader path, else in the
 * toolkit and wheel folders; `dir` gets the folder it came from ("" for the loader path).  NULL
 * with `why` listing what was searched.  cuda_libs_preload loads `file` from `dir` so that a
 * library opened by path finds it by name. */
void *cuda_libs_open(const char *what, const char *const *names, char *dir, size_t dirlen, char *why, size_t n);
bool cuda_libs_preload(const char *dir, const char *file);
int cuda_libs_search_dirs(char (*out)[512], int max);   /* the folders searched, in order */
/* nccl.c: NCCL loaded with dlopen.  nccl_unavailable: NULL, or why libnccl cannot be used.
 * nccl_init makes the communicator of c's processes on the current GPU (a collective: every
 * process calls it); nccl_allreduce sums each process's buf times its share in place on
 * `stream` (a CUstream). */
typedef struct NcclComm NcclComm;
const char *nccl_unavailable(void);
NcclComm *nccl_init(const nnc_comm *c, char *err, size_t n);
bool nccl_allreduce(NcclComm *k, void *buf, size_t count, int dtype, double share, void *stream, char *err, size_t n);
void nccl_free(NcclComm *k);
/* nvrtc.c: NVRTC loaded with dlopen; needs no driver and no device. */
bool cuda_nvrtc_available(char *err, size_t n);
int cuda_nvrtc_version(void);                       /* major * 1000 + minor * 10, or 0 */
/* Compiles `src` (named `name` in diagnostics) for `arch` ("sm_90": a cubin, "compute_90":
 * PTX).  Returns malloc'd code, or NULL with the log and the offending source lines in err. */
char *cuda_nvrtc_compile(const char *src, const char *name, const char *arch, bool f64, size_t *len,
                         char *err, size_t n);
/* The same with one more NVRTC option (`extra`, NULL for none): tests/cuda/nvrtc_compile.c's
 * --nvrtc-opt; nnc itself compiles with none. */
char *cuda_nvrtc_compile_with(const char *src, const char *name, const char *arch, const char *extra, size_t *len,
                              char *err, size_t n);
#endif
