/* launch_dims.c - the grid and block of every CUDA kernel launch, at batch sizes from 1 to
 * far beyond what the emulator can hold (no device, no NVRTC: codegen/cuda/render_cuda.c alone).
 *
 *   launch_dims MODEL.nn...
 *
 * For each model, entry, kernel launch, batch B in {1, 2, the train batch, 2^22} and precision
 * (f32, f64), cuda_launch_dims must give a launch a GPU accepts (grid.x in [1, 2^31-1], grid.y
 * in [1, 65535], the block within the kernel's __launch_bounds__), and:
 *   - an elementwise kernel over n elements takes ceil(n / 2048) blocks: the grid follows the
 *     work, with no cap at 65535;
 *   - a reduction or row-wise kernel over more than 64K elements is never one block;
 *   - a reduction's partials and tickets fit the workspace (CUDA_PARTIALS, CUDA_TICKETS), and a
 *     reduction to one value over n elements takes min(1024, ceil(n / 2048)) blocks;
 *   - a column reduction split over row ranges takes at most 256 blocks, at most 4 ranges per
 *     256 / cw rows of a block (one load of partials a thread in the finish), each a round or more;
 *   - cross_entropy's loss and accuracy's hits, added over blocks, take at most 1024 of them.
 * At B = 2^22 at least one launch of the models given must exceed 65535 blocks (the cap this
 * replaced). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../codegen/cuda/cuda_backend.h"
#include "../../frontend/frontend.h"

#define HUGE_B ((int64_t)1 << 22)

static int fails;
static bool over_old_cap;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void fail(const char *path, const Entry *e, int k, int64_t B, bool f64, const char *what, CudaDims d) {
    printf("FAIL %s %s launch %d at B=%lld%s: %s (grid %u,%u block %u)\n", path, e->name, k, (long long)B,
           f64 ? " (f64)" : "", what, d.grid, d.grid_y, d.block);
    fails++;
}

/* The elements a launch reads its main operand over. */
static int64_t launch_elems(const Graph *g, const Launch *L, int64_t B) {
    if (L->kind != L_ROW) return shape_numel(L->space, B);
    return shape_numel(g->nodes[g->nodes[L->root].in[0]].shape, B);
}

static void check_reduce(const char *path, const Program *p, const Entry *e, int k, int64_t B, bool f64, CudaDims d) {
    const Launch *L = &e->launches[k];
    CudaReduce r = cuda_reduce_shape(p->g, L, f64);
    int64_t mask = launch_reduce_mask(p->g, L);
    int64_t nout = shape_numel(launch_space_axes(L, mask, false), B);
    int64_t nred = shape_numel(launch_space_axes(L, mask, true), B);
    if (r.kind == RED_SPLIT && d.grid_y > 1 && (nout * d.grid_y > CUDA_PARTIALS || nout > CUDA_TICKETS))
        fail(path, e, k, B, f64, "more partials or tickets than the workspace holds", d);
    if (r.kind == RED_COLS && d.grid_y > 1 && (nout * d.grid_y > CUDA_PARTIALS || d.grid > CUDA_TICKETS))
        fail(path, e, k, B, f64, "more column partials or strips than the workspace holds", d);
    /* render_cuda.c's COLS_BLOCKS and COLS_FINISH: one wave, one load of partials a thread */
    int64_t rounds = r.kind == RED_COLS ? ceil_div(nred, (int64_t)(d.block / r.cw) * r.rows) : 0;
    if (r.kind == RED_COLS && d.grid_y > 1 &&
        ((int64_t)d.grid * d.grid_y > 256 || d.grid_y > 4 * (d.block / r.cw) || d.grid_y > rounds || r.rows < 2))
        fail(path, e, k, B, f64, "a column reduction over more than 256 blocks, 4 partial rows a thread or its rounds",
             d);
    bool full = shape_numel(launch_space_axes(L, mask, false), 2) == 1; /* one output at any batch */
    int64_t want = ceil_div(nred, 2048) < 1 ? 1 : ceil_div(nred, 2048) > 1024 ? 1024 : ceil_div(nred, 2048);
    if (full && (int64_t)d.grid * d.grid_y != want)
        fail(path, e, k, B, f64, "a full reduction not over min(1024, ceil(n / 2048)) blocks", d);
}

static void check_launch(const char *path, const Program *p, const Entry *e, int k, int64_t B, bool f64) {
    const Launch *L = &e->launches[k];
    CudaDims d = cuda_launch_dims(p, e, L, B, f64);
    int64_t n = launch_elems(p->g, L, B), blocks = (int64_t)d.grid * d.grid_y;
    if (d.grid < 1 || d.grid > 0x7fffffffu || d.grid_y < 1 || d.grid_y > 65535 || d.block < 32 ||
        d.block > cuda_launch_max_block(p->g, L, f64) || d.block % 32)
        fail(path, e, k, B, f64, "not a launch a GPU takes", d);
    if (L->kind == L_EW && blocks != (n > 2048 ? ceil_div(n, 2048) : 1))
        fail(path, e, k, B, f64, "an elementwise grid not ceil(n / 2048)", d);
    if (L->kind != L_EW && n > 65536 && blocks == 1) fail(path, e, k, B, f64, "over 64K elements in one block", d);
    if (L->kind == L_REDUCE) check_reduce(path, p, e, k, B, f64, d);
    Op op = p->g->nodes[L->root].op;
    if (L->kind == L_ROW && (op_has(op, OPF_ROW_TOTAL) || op_has(op, OPF_LABELS)) && blocks > CUDA_TICKETS)
        fail(path, e, k, B, f64, "a row total over more blocks than the workspace holds", d);
    over_old_cap |= blocks > 65535;
}

static int check_model(const char *path) {
    size_t len;
    char *src = read_file(path, &len);
    if (!src) {
        printf("FAIL %s: cannot read\n", path);
        return 1;
    }
    Arena arena = {0};
    FILE *quiet = fopen("/dev/null", "w");
    Diag diag = {.file = path, .src = src, .out = quiet};
    Program p = {0};
    Model *m = nn_load_model(&arena, &diag, path, src, "model");
    int before = fails;
    if (!m) {
        printf("FAIL %s: not a valid model\n", path);
        fails++;
        goto out;
    }
    m->g->batch_max = (int)(m->train.present ? m->train.batch : 8);
    p = (Program){.m = m, .g = m->g, .diag = &diag};
    PipelineOpts po = {.target = DEV_CUDA, .fuse = true, .verify = true};
    if (!pipeline_run(&p, &po)) {
        printf("FAIL %s: the passes reject it for cuda\n", path);
        fails++;
        goto out;
    }
    const int64_t Bs[] = {1, 2, m->g->batch_max, HUGE_B};
    int launches = 0;
    for (int x = 0; x < ENTRY_COUNT; x++)
        for (int k = 0; k < p.entry[x].nlaunch; k++) {
            if (!cuda_launch_is_kernel(&p.entry[x].launches[k])) continue;
            launches++;
            for (size_t b = 0; b < NNC_COUNTOF(Bs); b++)
                for (int f64 = 0; f64 < 2; f64++) check_launch(path, &p, &p.entry[x], k, Bs[b], f64);
        }
    printf("%s %s: %d kernel launches\n", fails > before ? "FAIL" : "ok  ", path, launches);
out:
    program_free(&p);
    model_free(m);
    fclose(quiet);
    arena_free(&arena);
    free(src);
    return fails > before;
}

int main(int argc, char **argv) {
    int bad = 0;
    for (int i = 1; i < argc; i++) bad += check_model(argv[i]);
    if (!over_old_cap) {
        printf("FAIL: no launch above 65535 blocks at B = %lld\n", (long long)HUGE_B);
        bad++;
    }
    printf("%d models, %d failed\n", argc - 1, bad);
    return bad || argc < 2;
}
