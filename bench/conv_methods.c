/* conv_methods.c - one convolution's forward pass three ways, for choosing how nnc convolves:
 *   im2col + sgemm     what nnc generates (codegen/helpers.c): columns of a chunk of samples,
 *                      one OpenBLAS GEMM per chunk, a permute back to NCHW;
 *   direct             the textbook loop nest (no extra memory), OpenMP over (n, oc);
 *   oneDNN             libdnnl's convolution (what PyTorch uses on the CPU), on NCHW tensors
 *                      as nnc holds them, and on oneDNN's own blocked layout (the reorders to
 *                      and from it not counted: the best case for oneDNN).
 *
 *   cc -O3 -march=native -fopenmp bench/conv_methods.c -lopenblas -ldnnl -o conv_methods
 *   ./conv_methods [N C H W OC K]      (default: convnet.nn's second convolution at batch 64)
 * Prints each method's median time over 10 runs and its GFLOP/s, and the largest difference
 * of each result from im2col's. */
#include <dnnl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int64_t N = 64, C = 32, H = 14, W = 14, OC = 64, K = 5;

static void im2col_conv(const float *x, const float *w, float *y, float *col, float *yt, int64_t S) {
    const int64_t P = H * W, pad = K / 2, ckk = C * K * K;
    for (int64_t n0 = 0; n0 < N; n0 += S) {
        const int64_t s = N - n0 < S ? N - n0 : S, cols = s * P;
        #pragma omp parallel for collapse(2)
        for (int64_t r = 0; r < ckk; r++)
            for (int64_t si = 0; si < s; si++) {
                const int64_t kw = r % K, kh = r / K % K, c = r / (K * K);
                for (int64_t oh = 0; oh < H; oh++)
                    for (int64_t ow = 0; ow < W; ow++) {
                        const int64_t h = oh - pad + kh, ww = ow - pad + kw;
                        col[r * cols + si * P + oh * W + ow] =
                            h >= 0 && h < H && ww >= 0 && ww < W ? x[(((n0 + si) * C + c) * H + h) * W + ww] : 0;
                    }
            }
        cblas_sgemm(101, 111, 111, (int)OC, (int)cols, (int)ckk, 1, w, (int)ckk, col, (int)cols, 0, yt, (int)cols);
        #pragma omp parallel for collapse(2)
        for (int64_t si = 0; si < s; si++)
            for (int64_t oc = 0; oc < OC; oc++)
                memcpy(y + ((n0 + si) * OC + oc) * P, yt + oc * cols + si * P, sizeof(float) * (size_t)P);
    }
}

static void direct_conv(const float *x, const float *w, float *y) {
    const int64_t pad = K / 2;
    #pragma omp parallel for collapse(2)
    for (int64_t n = 0; n < N; n++)
        for (int64_t oc = 0; oc < OC; oc++) {
            float *yp = y + (n * OC + oc) * H * W;
            for (int64_t i = 0; i < H * W; i++) yp[i] = 0;
            for (int64_t c = 0; c < C; c++)
                for (int64_t kh = 0; kh < K; kh++)
                    for (int64_t kw = 0; kw < K; kw++) {
                        const float wv = w[((oc * C + c) * K + kh) * K + kw];
                        const float *xp = x + (n * C + c) * H * W;
                        for (int64_t oh = 0; oh < H; oh++) {
                            const int64_t h = oh - pad + kh;
                            if (h < 0 || h >= H) continue;
                            const int64_t lo = pad - kw > 0 ? pad - kw : 0, hi = W + pad - kw < W ? W + pad - kw : W;
                            for (int64_t ow = lo; ow < hi; ow++) yp[oh * W + ow] += wv * xp[h * W + ow - pad + kw];
                        }
                    }
        }
}

#define DN(call)                                                              \
    do {                                                                      \
        dnnl_status_t s_ = (call);                                            \
        if (s_ != dnnl_success) {                                             \
            fprintf(stderr, "oneDNN error %d at %s:%d\n", (int)s_, __FILE__, __LINE__); \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

/* oneDNN forward convolution; blocked: let it pick its layout (reorders done outside the timing). */
static double onednn_conv(const float *x, const float *w, float *y, int blocked, int reps) {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    DN(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    dnnl_dims_t xd = {N, C, H, W}, wd = {OC, C, K, K}, yd = {N, OC, H, W}, strides = {1, 1}, pad = {K / 2, K / 2};
    dnnl_memory_desc_t xm, wm, ym, xa, wa, ya;
    DN(dnnl_memory_desc_init_by_tag(&xm, 4, xd, dnnl_f32, dnnl_nchw));
    DN(dnnl_memory_desc_init_by_tag(&wm, 4, wd, dnnl_f32, dnnl_oihw));
    DN(dnnl_memory_desc_init_by_tag(&ym, 4, yd, dnnl_f32, dnnl_nchw));
    DN(dnnl_memory_desc_init_by_tag(&xa, 4, xd, dnnl_f32, blocked ? dnnl_format_tag_any : dnnl_nchw));
    DN(dnnl_memory_desc_init_by_tag(&wa, 4, wd, dnnl_f32, blocked ? dnnl_format_tag_any : dnnl_oihw));
    DN(dnnl_memory_desc_init_by_tag(&ya, 4, yd, dnnl_f32, blocked ? dnnl_format_tag_any : dnnl_nchw));
    dnnl_convolution_desc_t cd;
    DN(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, &xa, &wa, NULL, &ya,
                                          strides, pad, pad));
    dnnl_primitive_desc_t pd;
    DN(dnnl_primitive_desc_create(&pd, &cd, NULL, eng, NULL));
    const dnnl_memory_desc_t *sx = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *sw = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *sy = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    dnnl_memory_t ux, uw, uy, mx, mw, my;
    DN(dnnl_memory_create(&ux, &xm, eng, (void *)x));
    DN(dnnl_memory_create(&uw, &wm, eng, (void *)w));
    DN(dnnl_memory_create(&uy, &ym, eng, y));
    DN(dnnl_memory_create(&mx, sx, eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&mw, sw, eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&my, sy, eng, DNNL_MEMORY_ALLOCATE));
    dnnl_primitive_t conv;
    DN(dnnl_primitive_create(&conv, pd));
    /* reorders nchw <-> the primitive's layouts */
    dnnl_primitive_desc_t rpd[3];
    dnnl_primitive_t rp[3];
    DN(dnnl_reorder_primitive_desc_create(&rpd[0], &xm, eng, sx, eng, NULL));
    DN(dnnl_reorder_primitive_desc_create(&rpd[1], &wm, eng, sw, eng, NULL));
    DN(dnnl_reorder_primitive_desc_create(&rpd[2], sy, eng, &ym, eng, NULL));
    for (int i = 0; i < 3; i++) DN(dnnl_primitive_create(&rp[i], rpd[i]));
    dnnl_exec_arg_t r0[] = {{DNNL_ARG_FROM, ux}, {DNNL_ARG_TO, mx}}, r1[] = {{DNNL_ARG_FROM, uw}, {DNNL_ARG_TO, mw}},
                    r2[] = {{DNNL_ARG_FROM, my}, {DNNL_ARG_TO, uy}};
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, my}};
    DN(dnnl_primitive_execute(rp[0], st, 2, r0));
    DN(dnnl_primitive_execute(rp[1], st, 2, r1));
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int i = -2; i < reps; i++) {
        double t0 = now();
        DN(dnnl_primitive_execute(conv, st, 3, args));
        DN(dnnl_stream_wait(st));
        if (i >= 0) t[i] = now() - t0;
    }
    DN(dnnl_primitive_execute(rp[2], st, 2, r2));
    DN(dnnl_stream_wait(st));
    qsort(t, (size_t)reps, sizeof *t, cmp);
    double med = t[reps / 2];
    free(t);
    return med;
}

int main(int argc, char **argv) {
    if (argc == 7) {
        N = atoll(argv[1]), C = atoll(argv[2]), H = atoll(argv[3]), W = atoll(argv[4]), OC = atoll(argv[5]), K = atoll(argv[6]);
    }
    const int reps = 10;
    const double flop = 2.0 * N * OC * H * W * C * K * K;
    float *x = malloc(sizeof(float) * (size_t)(N * C * H * W)), *w = malloc(sizeof(float) * (size_t)(OC * C * K * K));
    float *y0 = malloc(sizeof(float) * (size_t)(N * OC * H * W)), *y1 = malloc(sizeof(float) * (size_t)(N * OC * H * W));
    for (int64_t i = 0; i < N * C * H * W; i++) x[i] = (float)((i * 2654435761u % 1000) / 500.0 - 1);
    for (int64_t i = 0; i < OC * C * K * K; i++) w[i] = (float)((i * 40503u % 1000) / 5000.0 - 0.1);
    /* nnc's chunk: column buffers under 2^22 elements */
    int64_t per = (C * K * K + OC) * H * W, S = (1 << 22) / per;
    S = S < 1 ? 1 : S > N ? N : S;
    float *col = malloc(sizeof(float) * (size_t)(C * K * K * S * H * W)), *yt = malloc(sizeof(float) * (size_t)(OC * S * H * W));
    printf("conv N=%lld C=%lld %lldx%lld OC=%lld K=%lld (same padding): %.2f GFLOP\n", (long long)N, (long long)C,
           (long long)H, (long long)W, (long long)OC, (long long)K, flop / 1e9);
    double t[16];
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        im2col_conv(x, w, y0, col, yt, S);
        t[i] = now() - t0;
    }
    qsort(t, reps, sizeof *t, cmp);
    printf("  im2col + sgemm (chunk %lld)  %8.2f ms  %6.1f GFLOP/s\n", (long long)S, 1e3 * t[reps / 2], flop / t[reps / 2] / 1e9);
    for (int i = 0; i < 3; i++) {
        double t0 = now();
        direct_conv(x, w, y1);
        t[i] = now() - t0;
    }
    qsort(t, 3, sizeof *t, cmp);
    double d = 0;
    for (int64_t i = 0; i < N * OC * H * W; i++) d = fmax(d, fabs(y1[i] - y0[i]));
    printf("  direct loops                 %8.2f ms  %6.1f GFLOP/s  (max diff %.2g)\n", 1e3 * t[1], flop / t[1] / 1e9, d);
    for (int blocked = 0; blocked < 2; blocked++) {
        memset(y1, 0, sizeof(float) * (size_t)(N * OC * H * W));
        double tm = onednn_conv(x, w, y1, blocked, reps);
        d = 0;
        for (int64_t i = 0; i < N * OC * H * W; i++) d = fmax(d, fabs(y1[i] - y0[i]));
        printf("  oneDNN %-21s %8.2f ms  %6.1f GFLOP/s  (max diff %.2g)\n", blocked ? "(its blocked layout)" : "(NCHW)",
               1e3 * tm, flop / tm / 1e9, d);
    }
    return 0;
}
