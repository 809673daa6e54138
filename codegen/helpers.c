/* helpers.c - convolution, pooling, dropout, concat, slices, embedding: the routines both targets run.
 *
 * A convolution is im2col + GEMM, the way Caffe, darknet and ggml do it, over chunks of S
 * samples (Launch.chunk, planned with its scratch by plan.c) so the column buffer stays bounded:
 *   forward     col = im2col(x[n0 .. n0+S))          [C KH KW, S P]   (P = OH OW)
 *               yt_g = W_g @ col_g                   [OC/G, S P] per group g
 *               y[n0 .. n0+S) = to_nchw(yt)
 *   grad input  dyt = from_nchw(dy[n0 ..]);  dcol_g = W_g^T @ dyt_g;  dx[n0 ..] = col2im(dcol)
 *   grad weight col = im2col(x[n0 ..]);  dyt = from_nchw(dy[n0 ..]);  dW_g (+)= dyt_g @ col_g^T
 * These steps, with the GEMMs between them (cblas on the CPU, cuBLAS on CUDA), are each launch's
 * plan (helper_plan.c), which the C dialect prints and the CUDA backend issues.
 *
 * A helper's row in helpers.def names its parameters and its bodies here.  Each helper is one
 * loop body over a flat index i < n, written once in the C that both C99 and CUDA accept; the
 * target wraps it: a static function with an OpenMP loop on the CPU, an `extern "C" __global__`
 * kernel with a grid-stride loop on CUDA.  Every output element is written by exactly one i, as
 * a gather (col2im and the pooling gradients sum over the windows that cover their element), so
 * no atomics and no zeroing pass are needed -- except the embedding's gradient, whose tokens may
 * share a row: its plan zeroes dw and the flat body adds atomically.  The CPU runs its own loop
 * nests of the hot ones (a row's `cpu` body): same results, up to the order of additions. */
#include <ctype.h>
#include <string.h>

#include "helpers.h"

/* The geometry parameters every helper takes after its own, in this order. */
#define GEOM_PARAMS                                                                                 \
    "int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t KH, int64_t KW, int64_t SH, " \
    "int64_t SW, int64_t PH, int64_t PW, int64_t DH, int64_t DW"

/* Opens the loops over the windows that cover input element (h, w): output (th / SH, tw / SW)
 * for each kernel offset (kh, kw) that lands on it; the body closes both braces. */
#define COVERING                                                                \
    "        for (int64_t kh = 0; kh < KH; kh++) {\n"                           \
    "            const int64_t th = h + PH - kh * DH;\n"                        \
    "            if (th < 0 || th % SH || th / SH >= OH) continue;\n"           \
    "            for (int64_t kw = 0; kw < KW; kw++) {\n"                       \
    "                const int64_t tw = w + PW - kw * DW;\n"                    \
    "                if (tw < 0 || tw % SW || tw / SW >= OW) continue;\n"

/* col[(c KH + kh) KW + kw, s P + oh OW + ow] = x[n0 + s, c, oh SH - PH + kh DH, ...], 0 outside */
static const char flat_im2col[] =
    "        const int64_t P = OH * OW, cols = S * P, r = i / cols, q = i % cols;\n"
    "        const int64_t s = q / P, oh = q % P / OW, ow = q % OW;\n"
    "        const int64_t kw = r % KW, kh = r / KW % KH, c = r / (KW * KH);\n"
    "        const int64_t h = oh * SH - PH + kh * DH, w = ow * SW - PW + kw * DW;\n"
    "        col[i] = h >= 0 && h < H && w >= 0 && w < W ? x[(((n0 + s) * C + c) * H + h) * W + w] : (real)0;\n";
/* dx[n0 + s, c, h, w] = the sum of the column entries that im2col copied from there */
static const char flat_col2im[] =
    "        const int64_t w = i % W, h = i / W % H, c = i / (W * H) % C, s = i / (W * H * C);\n"
    "        const int64_t P = OH * OW, cols = S * P;\n"
    "        real acc = 0;\n" COVERING
    "                acc += col[((c * KH + kh) * KW + kw) * cols + s * P + th / SH * OW + tw / SW];\n"
    "            }\n"
    "        }\n"
    "        dx[n0 * C * H * W + i] = acc;\n";
/* y[n0 + s, oc, p] = yt[oc, s P + p] */
static const char flat_to_nchw[] = "        const int64_t p = i % P, oc = i / P % OC, s = i / (P * OC);\n"
                                   "        y[n0 * OC * P + i] = yt[oc * S * P + s * P + p];\n";
/* dyt[oc, s P + p] = dy[n0 + s, oc, p] */
static const char flat_from_nchw[] = "        const int64_t p = i % P, oc = i / P % OC, s = i / (P * OC);\n"
                                     "        dyt[oc * S * P + s * P + p] = dy[n0 * OC * P + i];\n";
/* y[nc, oh, ow] = the window's maximum; NaN wins, as torch */
static const char flat_max_pool[] =
    "        const int64_t ow = i % OW, oh = i / OW % OH;\n"
    "        const real *xp = x + i / (OW * OH) * H * W;\n"
    "        real m = -NNC_HELPER_INF;\n"
    "        for (int64_t kh = 0; kh < KH; kh++)\n"
    "            for (int64_t kw = 0; kw < KW; kw++) {\n"
    "                const int64_t h = oh * SH - PH + kh * DH, w = ow * SW - PW + kw * DW;\n"
    "                if (h < 0 || h >= H || w < 0 || w >= W) continue;\n"
    "                const real v = xp[h * W + w];\n"
    "                if (v > m || v != v) m = v;\n"
    "            }\n"
    "        y[i] = m;\n";
/* dx[nc, h, w] = the sum of dy over the windows whose maximum (torch's index: the first
 * maximum, or the last NaN) is this element.  When the windows tile dx exactly (kernel = stride,
 * no padding or dilation, as max_pool2d(x, 2) on even sizes), index i < n / (KH KW) owns window
 * i instead and writes its KH KW elements (the rest have nothing to do): a window's maximum is
 * found once, not once per element, with a fifth of the integer divisions. */
static const char flat_max_pool_grad[] =
    "        if (KH == SH && KW == SW && DH == 1 && DW == 1 && PH == 0 && PW == 0 && H == OH * SH && W == OW * SW) {\n"
    "            if (i >= n / (KH * KW)) continue;\n"
    "            const int64_t ow = i % OW, oh = i / OW % OH, nc = i / (OW * OH);\n"
    "            const real *xp = x + nc * H * W;\n"
    "            real *dp = dx + nc * H * W;\n"
    "            int64_t best = -1;\n"
    "            real bv = -NNC_HELPER_INF;\n"
    "            for (int64_t kh = 0; kh < KH; kh++)\n"
    "                for (int64_t kw = 0; kw < KW; kw++) {\n"
    "                    const int64_t j = (oh * KH + kh) * W + ow * KW + kw;\n"
    "                    const real v = xp[j];\n"
    "                    if (best < 0 || v > bv || v != v) { bv = v; best = j; }\n"
    "                }\n"
    "            const real g = dy[i];\n"
    "            for (int64_t kh = 0; kh < KH; kh++)\n"
    "                for (int64_t kw = 0; kw < KW; kw++) {\n"
    "                    const int64_t j = (oh * KH + kh) * W + ow * KW + kw;\n"
    "                    dp[j] = j == best ? g : (real)0;\n"
    "                }\n"
    "            continue;\n"
    "        }\n"
    "        const int64_t w = i % W, h = i / W % H, nc = i / (W * H);\n"
    "        const real *xp = x + nc * H * W;\n"
    "        real acc = 0;\n" COVERING "                const int64_t oh = th / SH, ow = tw / SW;\n"
    "                int64_t best = -1;\n"
    "                real bv = -NNC_HELPER_INF;\n"
    "                for (int64_t jh = 0; jh < KH; jh++)\n"
    "                    for (int64_t jw = 0; jw < KW; jw++) {\n"
    "                        const int64_t hh = oh * SH - PH + jh * DH, ww = ow * SW - PW + jw * DW;\n"
    "                        if (hh < 0 || hh >= H || ww < 0 || ww >= W) continue;\n"
    "                        const real v = xp[hh * W + ww];\n"
    "                        if (best < 0 || v > bv || v != v) { bv = v; best = hh * W + ww; }\n"
    "                    }\n"
    "                if (best == h * W + w) acc += dy[(nc * OH + oh) * OW + ow];\n"
    "            }\n"
    "        }\n"
    "        dx[i] = acc;\n";
/* y = the window's mean, the zero padding counted (torch's count_include_pad) */
static const char flat_avg_pool[] =
    "        const int64_t ow = i % OW, oh = i / OW % OH;\n"
    "        const real *xp = x + i / (OW * OH) * H * W;\n"
    "        real acc = 0;\n"
    "        for (int64_t kh = 0; kh < KH; kh++)\n"
    "            for (int64_t kw = 0; kw < KW; kw++) {\n"
    "                const int64_t h = oh * SH - PH + kh * DH, w = ow * SW - PW + kw * DW;\n"
    "                if (h >= 0 && h < H && w >= 0 && w < W) acc += xp[h * W + w];\n"
    "            }\n"
    "        y[i] = acc / (real)(KH * KW);\n";
static const char flat_avg_pool_grad[] =
    "        const int64_t w = i % W, h = i / W % H, nc = i / (W * H);\n"
    "        real acc = 0;\n" COVERING "                acc += dy[(nc * OH + th / SH) * OW + tw / SW];\n"
    "            }\n"
    "        }\n"
    "        dx[i] = acc / (real)(KH * KW);\n";
/* dropout's draw, shared by the dropout helper and attention's dropout (codegen/attention.c):
 * the stream of node `key` at `step` is FNV-1a over (key, step), and for an accumulate call also
 * its micro-batch's number in the group (its step is the previous train_step's: the micro-batches
 * of one group and the step before differ by that); element i's factor is u =
 * include/nnc_rng.h's nnc_rng_uniform(seed, stream, i) (Philox4x32-10), kept as 1 / (1 - p) when
 * u >= p, else 0.  `@` is the functions' qualifier: always inlined on the CPU too, where gcc's
 * -fPIC build called them out of line (a "cold" call).  That, 1 / (1 - p) computed only under
 * the test (a division the loop could not hoist) and the mask's draw made only when training,
 * kept the mask's loop scalar: 65536 draws, one thread, 0.96 -> 0.23 ms vectorised (the same
 * bits; an eval call now draws and drops them). */
static const char dropout_rng_text[] =
    "/* dropout's draw (codegen/helpers.c): Philox4x32-10 over (element, stream), keyed by the seed */\n"
    "@ unsigned long long nnc_dropout_stream(long long key, long long step, long long micro, int accum) {\n"
    "    unsigned long long st = (0xcbf29ce484222325ULL ^ (unsigned long long)key) * 0x100000001b3ULL;\n"
    "    st = (st ^ (unsigned long long)step) * 0x100000001b3ULL;\n"
    "    return accum ? (st ^ (unsigned long long)micro) * 0x100000001b3ULL : st;\n"
    "}\n"
    "/* block i of stream st: Philox4x32-10's four words, the 53-bit halves (hi: words 0 and 1) */\n"
    "@ void nnc_philox_halves(unsigned long long seed, unsigned long long st, unsigned long long i,\n"
    "                         unsigned long long *hi, unsigned long long *lo) {\n"
    "    unsigned int c0 = (unsigned int)i, c1 = (unsigned int)(i >> 32), c2 = (unsigned int)st, c3 = (unsigned int)(st >> 32);\n"
    "    unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);\n"
    "    for (int r = 0; r < 10; r++) {\n"
    "        if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }\n"
    "        const unsigned long long p0 = 0xD2511F53ULL * c0, p1 = 0xCD9E8D57ULL * c2;\n"
    "        c0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0;\n"
    "        c1 = (unsigned int)p1;\n"
    "        c2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;\n"
    "        c3 = (unsigned int)p0;\n"
    "    }\n"
    "    *hi = (((unsigned long long)c0 << 32) | c1) >> 11;\n"
    "    *lo = (((unsigned long long)c2 << 32) | c3) >> 11;\n"
    "}\n"
    "@ real nnc_dropout_keep(unsigned long long seed, unsigned long long st, unsigned long long i, double p) {\n"
    "    unsigned long long a, b;\n"
    "    nnc_philox_halves(seed, st, i, &a, &b);\n"
    "    const double u = (double)a * (1.0 / 9007199254740992.0);\n"
    "    const real keep = (real)(1.0 / (1.0 - p));   /* outside the test: a loop hoists it */\n"
    "    return u >= p ? keep : (real)0;\n"
    "}\n"
    "/* rand's and randn's draw: uniform from words 0 and 1 in [0, 1), or normal by Box-Muller's cosine\n"
    " * branch on all four (include/nnc_rng.h's mapping), in double */\n"
    "@ real nnc_random_draw(unsigned long long seed, unsigned long long st, unsigned long long i, int normal) {\n"
    "    unsigned long long a, b;\n"
    "    nnc_philox_halves(seed, st, i, &a, &b);\n"
    "    if (!normal) return (real)((double)a * (1.0 / 9007199254740992.0));\n"
    "    const double u1 = (double)(a + 1) * (1.0 / 9007199254740992.0), u2 = (double)b * (1.0 / 9007199254740992.0);\n"
    "    return (real)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));\n"
    "}\n";

void dropout_rng_prelude(Str *s, bool cuda) {
    const char *at = cuda ? "__device__ __forceinline__" : "static inline __attribute__((always_inline))";
    str_puts(s, "\n");
    for (const char *c = dropout_rng_text; *c; c++)
        if (*c == '@') str_puts(s, at);
        else str_putc(s, *c);
}

/* dropout's mask: ctl = {step, seed, micro}; the draw is made unconditionally (dropout_rng_text) */
static const char flat_dropout_mask[] =
    "        const real keep = nnc_dropout_keep((unsigned long long)ctl[1], nnc_dropout_stream(node, ctl[0], ctl[2], accum),\n"
    "                                           (unsigned long long)i, p);\n"
    "        mask[i] = training ? keep : (real)1;\n";
/* rand's and randn's values: element i of the node's stream this step */
static const char flat_random[] =
    "        y[i] = nnc_random_draw((unsigned long long)ctl[1], nnc_dropout_stream(node, ctl[0], ctl[2], accum),\n"
    "                               (unsigned long long)i, normal);\n";
/* y = the operands one after another along an axis: y[o, p, r] (outer, axis, inner) comes
 * from the operand whose run holds p; unused operand pointers repeat the first */
static const char flat_concat[] = "        const int64_t r = i % inner, p = i / inner % L, o = i / (inner * L);\n"
                                  "        int64_t q = p, len = n0;\n"
                                  "        const real *src = a0;\n"
                                  "        if (q >= n0) { q -= n0; src = a1; len = n1;\n"
                                  "            if (q >= n1) { q -= n1; src = a2; len = n2;\n"
                                  "                if (q >= n2) { q -= n2; src = a3; len = n3; } } }\n"
                                  "        y[i] = src[(o * len + q) * inner + r];\n";
/* y[o, p, r] = x[o, start + p step, r] */
static const char flat_slice[] = "        const int64_t r = i % inner, p = i / inner % Ly, o = i / (inner * Ly);\n"
                                 "        y[i] = x[(o * Lx + start + p * step) * inner + r];\n";
/* dx[o, j, r] = dy[o, (j - start) / step, r] where j is a sliced position, else 0 (a negative
 * step, flip's, walks back from start) */
static const char flat_slice_grad[] =
    "        const int64_t r = i % inner, j = i / inner % Lx, o = i / (inner * Lx), t = j - start;\n"
    "        dx[i] = (step > 0 ? t >= 0 : t <= 0) && t % step == 0 && t / step < Ly ? dy[(o * Ly + t / step) * inner + r] : (real)0;\n";
/* y[t, d] = w[idx[t], d]; an index outside [0, V) gives 0 and records the first one seen
 * in err (1: the flag, then position, index, V) */
static const char flat_embedding[] =
    "        const int64_t t = i / D;\n"
    "        const int v = idx[t];\n"
    "        if (v < 0 || v >= V) {\n"
    "            if (i % D == 0 && atomicCAS(err, 0, 2) == 0) { err[1] = (int)t; err[2] = v; err[3] = (int)V; }\n"
    "            y[i] = 0;\n"
    "        } else\n"
    "            y[i] = w[v * D + i % D];\n";
/* dw[idx[t], d] += dy[t, d] (dw zeroed first), with atomics: tokens may share a row */
static const char flat_embedding_grad[] = "        const int v = idx[i / D];\n"
                                          "        if (v >= 0 && v < V) atomicAdd(&dw[v * D + i % D], dy[i]);\n";

/* Opens the loops over the input elements (h, w) of output (oh, ow)'s window that lie inside
 * the input (CPU bodies' indentation); the body closes both braces. */
#define WINDOW                                                                  \
    "                for (int64_t kh = 0; kh < KH; kh++) {\n"                   \
    "                    const int64_t h = oh * SH - PH + kh * DH;\n"           \
    "                    if (h < 0 || h >= H) continue;\n"                      \
    "                    for (int64_t kw = 0; kw < KW; kw++) {\n"               \
    "                        const int64_t w = ow * SW - PW + kw * DW;\n"       \
    "                        if (w < 0 || w >= W) continue;\n"

/* The CPU's own versions of the hot helpers: the same signature and result, as loop nests that
 * divide once per row, not once per element (integer division costs more than the copy), and
 * the gradients as scatters within a plane one thread owns (no race, no window search per
 * input element).  Each is a CpuBody (helpers.h): statements, then one or two loops over an outer
 * index i whose iterations write disjoint outputs, split over nnc's pool (include/nnc_pool.h),
 * each piece's iterations in order: the same bits on any thread count, and no OpenMP team beside
 * the pool's threads (issue 29: the two fought over the cores).  A helper with no CpuBody runs its
 * flat body on the pool (cpu_flat_helper). */
/* a bad index zeroes its row and stops the step: the first (lowest) is named, found before the
 * rows are copied */
static const CpuBody cpu_embedding = {
    .pre = "    int64_t bad = -1;\n"
           "    for (int64_t t = 0; t < n / D && bad < 0; t++)\n"
           "        if (idx[t] < 0 || idx[t] >= V) bad = t;\n"
           "    if (bad >= 0) { err[0] = 2; err[1] = (int)bad; err[2] = idx[bad]; err[3] = (int)V; }\n",
    .count = {"n / D"},
    .work = {"n"},
    .body = {"        const int v = idx[i];\n"
             "        if (v < 0 || v >= V) memset(y + i * D, 0, sizeof(real) * (size_t)D);\n"
             "        else memcpy(y + i * D, w + (int64_t)v * D, sizeof(real) * (size_t)D);\n"},
};
/* rows in token order (the same sums on every run), the pieces splitting the columns in blocks
 * of 64; dw zeroed first, as for the flat body */
static const CpuBody cpu_embedding_grad = {
    .count = {"(D + 63) / 64"},
    .work = {"n"},
    .body = {"        const int64_t d0 = i * 64, d1 = d0 + 64 < D ? d0 + 64 : D;\n"
             "        for (int64_t t = 0; t < n / D; t++) {\n"
             "            const int v = idx[t];\n"
             "            if (v < 0 || v >= V) continue;\n"
             "            for (int64_t d = d0; d < d1; d++) dw[v * D + d] += dy[t * D + d];\n"
             "        }\n"},
};
/* im2col's and col2im's shared statements: a batch item's output positions and col's columns */
#define IM2COL_COMMON \
    "    const int64_t P = OH * OW, cols = S * P;\n" \
    "    (void)P, (void)cols, (void)n;\n"
static const CpuBody cpu_im2col = {
    .common = IM2COL_COMMON,
    .count = {"C * KH * KW * S"},
    .work = {"C * KH * KW * cols"},
    .body = {"        const int64_t r = i / S, s = i % S;\n"
             "        const int64_t kw = r % KW, kh = r / KW % KH, c = r / (KW * KH);\n"
             "        const real *xp = x + ((n0 + s) * C + c) * H * W;\n"
             "        real *out = col + r * cols + s * P;\n"
             "        for (int64_t oh = 0; oh < OH; oh++) {\n"
             "            const int64_t h = oh * SH - PH + kh * DH;\n"
             "            real *o = out + oh * OW;\n"
             "            if (h < 0 || h >= H) {\n"
             "                for (int64_t ow = 0; ow < OW; ow++) o[ow] = 0;\n"
             "                continue;\n"
             "            }\n"
             "            const real *xr = xp + h * W;\n"
             "            if (SW == 1) {   /* the columns that land inside the row: one copy */\n"
             "                const int64_t off = kw * DW - PW, lo_ = off < 0 ? -off : 0;\n"
             "                const int64_t hi_ = W - off < OW ? W - off : OW;\n"
             "                int64_t ow = 0;\n"
             "                for (; ow < lo_ && ow < OW; ow++) o[ow] = 0;\n"
             "                if (hi_ > lo_) memcpy(o + lo_, xr + lo_ + off, sizeof(real) * (size_t)(hi_ - lo_));\n"
             "                for (ow = hi_ > lo_ ? hi_ : ow; ow < OW; ow++) o[ow] = 0;\n"
             "                continue;\n"
             "            }\n"
             "            for (int64_t ow = 0; ow < OW; ow++) {\n"
             "                const int64_t w = ow * SW - PW + kw * DW;\n"
             "                o[ow] = w >= 0 && w < W ? xr[w] : (real)0;\n"
             "            }\n"
             "        }\n"},
};
static const CpuBody cpu_col2im = {
    .common = IM2COL_COMMON,
    .count = {"S * C"},
    .work = {"S * C * H * W"},
    .body = {"        const int64_t s = i / C, c = i % C;\n"
             "        real *d = dx + ((n0 + s) * C + c) * H * W;\n"
             "        for (int64_t j = 0; j < H * W; j++) d[j] = 0;\n"
             "        for (int64_t kh = 0; kh < KH; kh++)\n"
             "            for (int64_t kw = 0; kw < KW; kw++) {\n"
             "                const real *cr = col + ((c * KH + kh) * KW + kw) * cols + s * P;\n"
             "                for (int64_t oh = 0; oh < OH; oh++) {\n"
             "                    const int64_t h = oh * SH - PH + kh * DH;\n"
             "                    if (h < 0 || h >= H) continue;\n"
             "                    if (SW == 1) {   /* a contiguous run of the row: no test per element */\n"
             "                        const int64_t off = kw * DW - PW, lo_ = off < 0 ? -off : 0;\n"
             "                        const int64_t hi_ = W - off < OW ? W - off : OW;\n"
             "                        real *dr = d + h * W + off;\n"
             "                        const real *cc = cr + oh * OW;\n"
             "                        for (int64_t ow = lo_; ow < hi_; ow++) dr[ow] += cc[ow];\n"
             "                        continue;\n"
             "                    }\n"
             "                    for (int64_t ow = 0; ow < OW; ow++) {\n"
             "                        const int64_t w = ow * SW - PW + kw * DW;\n"
             "                        if (w >= 0 && w < W) d[h * W + w] += cr[oh * OW + ow];\n"
             "                    }\n"
             "                }\n"
             "            }\n"},
};
static const CpuBody cpu_to_nchw = {
    .common = "    (void)n;\n",
    .count = {"S * OC"},
    .work = {"S * OC * P"},
    .body = {"        const int64_t s = i / OC, oc = i % OC;\n"
             "        memcpy(y + ((n0 + s) * OC + oc) * P, yt + oc * S * P + s * P, sizeof(real) * (size_t)P);\n"},
};
static const CpuBody cpu_from_nchw = {
    .common = "    (void)n;\n",
    .count = {"S * OC"},
    .work = {"S * OC * P"},
    .body = {"        const int64_t s = i / OC, oc = i % OC;\n"
             "        memcpy(dyt + oc * S * P + s * P, dy + ((n0 + s) * OC + oc) * P, sizeof(real) * (size_t)P);\n"},
};
/* 2x2 windows at stride 2 tiling the input (the convnets' pooling): rows of branch-free
 * selects the compiler vectorizes, in the general loop's order (the first maximum; NaN wins) */
#define POOL2X2 \
    "KH == 2 && KW == 2 && SH == 2 && SW == 2 && PH == 0 && PW == 0 && DH == 1 && DW == 1 && H == 2 * OH && W == 2 * OW"
static const CpuBody cpu_max_pool = {
    .guard = POOL2X2,
    .count = {"n / OW", "n / (OH * OW)"},
    .work = {"n", "n"},
    .body = {"        const real *a = x + 2 * i * W, *b = a + W;\n"
             "        real *yp = y + i * OW;\n"
             "        for (int64_t ow = 0; ow < OW; ow++) {\n"
             "            const real v0 = a[2 * ow], v1 = a[2 * ow + 1], v2 = b[2 * ow], v3 = b[2 * ow + 1];\n"
             "            /* selects, not branches (which input wins is data): a maximum instruction,\n"
             "             * then a NaN taken; one select of both made gcc branch where a row is too\n"
             "             * short for a vector (conv2's pooling, OW 7: 0.93 -> 1.8 ms on one thread) */\n"
             "            real m = v0;\n"
             "            m = v1 > m ? v1 : m;\n"
             "            m = v1 != v1 ? v1 : m;\n"
             "            m = v2 > m ? v2 : m;\n"
             "            m = v2 != v2 ? v2 : m;\n"
             "            m = v3 > m ? v3 : m;\n"
             "            yp[ow] = v3 != v3 ? v3 : m;\n"
             "        }\n",
             "        const real *xp = x + i * H * W;\n"
             "        real *yp = y + i * OH * OW;\n"
             "        for (int64_t oh = 0; oh < OH; oh++)\n"
             "            for (int64_t ow = 0; ow < OW; ow++) {\n"
             "                real m = -NNC_HELPER_INF;\n" WINDOW
             "                        const real v = xp[h * W + w];\n"
             "                        if (v > m || v != v) m = v;\n"
             "                    }\n"
             "                }\n"
             "                yp[oh * OW + ow] = m;\n"
             "            }\n"},
};
/* the 2x2 windows tile dx: each element written once, no zeroing pass */
static const CpuBody cpu_max_pool_grad = {
    .guard = POOL2X2,
    .count = {"n / (2 * W)", "n / (H * W)"},
    .work = {"n", "n"},
    .body = {"        const real *a = x + 2 * i * W, *b = a + W, *g = dy + i * OW;\n"
             "        real *da = dx + 2 * i * W, *db = da + W;\n"
             "        NNC_IVDEP   /* the row's stores never meet its loads: no overlap test a row */\n"
             "        for (int64_t ow = 0; ow < OW; ow++) {\n"
             "            const real v0 = a[2 * ow], v1 = a[2 * ow + 1], v2 = b[2 * ow], v3 = b[2 * ow + 1];\n"
             "            /* the input the forward took (the last NaN, else the first maximum), as flags of\n"
             "             * quiet comparisons against its running maximum, and the gradient kept or\n"
             "             * zeroed by a mask of its bits: no branch on data and no float select, so rows\n"
             "             * too short for a vector (conv1's 14, conv2's 7) run branch-free too (alone, one\n"
             "             * thread: 4.46 -> 1.13 and 1.15 -> 0.56 ms; branches on which input won had\n"
             "             * mispredicted) */\n"
             "            real m = v0;\n"
             "            const int t1 = isgreater(v1, m) | (v1 != v1);\n"
             "            m = v1 > m ? v1 : m;\n"
             "            m = v1 != v1 ? v1 : m;\n"
             "            const int t2 = isgreater(v2, m) | (v2 != v2);\n"
             "            m = v2 > m ? v2 : m;\n"
             "            m = v2 != v2 ? v2 : m;\n"
             "            const int t3 = isgreater(v3, m) | (v3 != v3);\n"
             "            const int w3 = t3, w2 = t2 & !t3, w1 = t1 & !t2 & !t3, w0 = !t1 & !t2 & !t3;\n"
             "            nnc_rbits gb, r;\n"
             "            memcpy(&gb, &g[ow], sizeof gb);\n"
             "            r = gb & -(nnc_rbits)w0;\n"
             "            memcpy(&da[2 * ow], &r, sizeof r);\n"
             "            r = gb & -(nnc_rbits)w1;\n"
             "            memcpy(&da[2 * ow + 1], &r, sizeof r);\n"
             "            r = gb & -(nnc_rbits)w2;\n"
             "            memcpy(&db[2 * ow], &r, sizeof r);\n"
             "            r = gb & -(nnc_rbits)w3;\n"
             "            memcpy(&db[2 * ow + 1], &r, sizeof r);\n"
             "        }\n",
             "        const real *xp = x + i * H * W, *dyp = dy + i * OH * OW;\n"
             "        real *d = dx + i * H * W;\n"
             "        for (int64_t j = 0; j < H * W; j++) d[j] = 0;\n"
             "        for (int64_t oh = 0; oh < OH; oh++)\n"
             "            for (int64_t ow = 0; ow < OW; ow++) {\n"
             "                int64_t best = -1;\n"
             "                real bv = -NNC_HELPER_INF;\n" WINDOW
             "                        const real v = xp[h * W + w];\n"
             "                        if (best < 0 || v > bv || v != v) { bv = v; best = h * W + w; }\n"
             "                    }\n"
             "                }\n"
             "                if (best >= 0) d[best] += dyp[oh * OW + ow];\n"
             "            }\n"},
};
#undef POOL2X2

/* concat and the slices as row copies on nnc's thread pool (include/nnc_pool.h, pasted before
 * the helpers): OpenMP's team here fought the pool's threads for the cores, and the flat body
 * divided twice per element.  Pure copies: the same bits on any thread count. */
static const char cpu_rows_text[] =
    "/* `rows` copies of len reals, row o from src + o sstride to dst + o dstride, split over the pool */\n"
    "typedef struct { const real *src; real *dst; int64_t len, sstride, dstride; } nnc_rows_job;\n"
    "static void nnc_rows_part(void *ctx, const void *const *in, int64_t b, int64_t lo, int64_t hi) {\n"
    "    const nnc_rows_job *j = ctx;\n"
    "    (void)in, (void)b;\n"
    "    for (int64_t o = lo; o < hi; o++) memcpy(j->dst + o * j->dstride, j->src + o * j->sstride, sizeof(real) * (size_t)j->len);\n"
    "}\n"
    "static void nnc_copy_rows(real *dst, int64_t dstride, const real *src, int64_t sstride, int64_t len, int64_t rows) {\n"
    "    nnc_rows_job j = {src, dst, len, sstride, dstride};\n"
    "    if (rows > 0 && len > 0) nnc_pool_for(nnc_rows_part, &j, NULL, 0, rows, rows * len);\n"
    "}\n";
static const char cpu_concat_text[] =
    "    const int64_t rows = n / (L * inner), len[4] = {n0, n1, n2, n3};\n"
    "    const real *src[4] = {a0, a1, a2, a3};\n"
    "    int64_t off = 0;\n"
    "    for (int a = 0; a < 4; off += len[a++]) nnc_copy_rows(y + off * inner, L * inner, src[a], len[a] * inner, len[a] * inner, rows);\n";
static const char cpu_slice_text[] =
    "    const int64_t rows = n / (Ly * inner);\n"
    "    if (step == 1) nnc_copy_rows(y, Ly * inner, x + start * inner, Lx * inner, Ly * inner, rows);\n"
    "    else   /* each outer row's picks at stride step */\n"
    "        for (int64_t o = 0; o < rows; o++)\n"
    "            nnc_copy_rows(y + o * Ly * inner, inner, x + (o * Lx + start) * inner, step * inner, inner, Ly);\n";
static const char cpu_slice_grad_text[] =
    "    const int64_t rows = n / (Lx * inner);\n"
    "    memset(dx, 0, sizeof(real) * (size_t)n);\n"
    "    if (step == 1) nnc_copy_rows(dx + start * inner, Lx * inner, dy, Ly * inner, Ly * inner, rows);\n"
    "    else\n"
    "        for (int64_t o = 0; o < rows; o++)\n"
    "            nnc_copy_rows(dx + (o * Lx + start) * inner, step * inner, dy + o * Ly * inner, inner, inner, Ly);\n";

static const CpuBody cpu_concat = {.pre = cpu_concat_text};
static const CpuBody cpu_slice = {.pre = cpu_slice_text};
static const CpuBody cpu_slice_grad = {.pre = cpu_slice_grad_text};

/* helpers.def's rows, in Helper's order by construction. */
const HelperInfo helper_info[HP_COUNT] = {
#define X(id, name, ptrs, after, geom, flat, cpu) [HP_##id] = {#name, ptrs, after, geom, flat, cpu},
#include "helpers.def"
#undef X
};

/* oneDNN for the CPU's f32 convolutions: measured 3-6x faster than im2col + OpenBLAS on the
 * project's machine (bench/conv_methods.c).  A primitive is made once per (launch, batch size)
 * in the layouts oneDNN prefers, with reorders from and to the NCHW/OIHW tensors nnc holds,
 * and shared by every instance; calls take a lock (their buffers are the slot's).  Whatever
 * oneDNN refuses returns nonzero and the launch runs its im2col code instead. */
static const char dnnl_text[] =
    "\n#include <dnnl.h>\n#include <pthread.h>\n"
    "/* oneDNN convolutions (codegen/helpers.c): kind 0 forward (x, w -> y), 1 input gradient\n"
    " * (dy, w -> dx), 2 weight gradient (dy, x -> dw); g = N C H W OC OH OW KH KW SH SW PH PW DH DW G.\n"
    " * The primitive works in the layouts it prefers (blocked: 2-4x faster than on NCHW); the\n"
    " * operands are reordered in and the result out around it, through buffers of its slot. */\n"
    "typedef struct {\n"
    "    int64_t B;\n"
    "    dnnl_primitive_t p, re[3];            /* the convolution; reorders of operand 0, 1 in, result out */\n"
    "    dnnl_memory_desc_t md[3];             /* its operands' and result's layouts */\n"
    "    void *buf[3];                         /* memory in those layouts (NULL: the user's serves) */\n"
    "} nnc_dnnl_slot;\n"
    "typedef struct { nnc_dnnl_slot s[4]; int next; } nnc_dnnl_cache;\n"
    "static pthread_mutex_t nnc_dnnl_lock = PTHREAD_MUTEX_INITIALIZER;   /* calls run one at a time */\n"
    "static dnnl_engine_t nnc_dnnl_engine;\n"
    "static dnnl_stream_t nnc_dnnl_stream;\n"
    "static void nnc_dnnl_mds(const int64_t *g, dnnl_memory_desc_t *x, dnnl_memory_desc_t *w, dnnl_memory_desc_t *y,\n"
    "                         int any) {\n"
    "    dnnl_dims_t xd = {g[0], g[1], g[2], g[3]}, yd = {g[0], g[4], g[5], g[6]};\n"
    "    dnnl_dims_t wd = {g[15], g[4] / g[15], g[1] / g[15], g[7], g[8]};\n"
    "    dnnl_memory_desc_init_by_tag(x, 4, xd, dnnl_f32, any ? dnnl_format_tag_any : dnnl_nchw);\n"
    "    dnnl_memory_desc_init_by_tag(y, 4, yd, dnnl_f32, any ? dnnl_format_tag_any : dnnl_nchw);\n"
    "    if (g[15] > 1) dnnl_memory_desc_init_by_tag(w, 5, wd, dnnl_f32, any ? dnnl_format_tag_any : dnnl_goihw);\n"
    "    else dnnl_memory_desc_init_by_tag(w, 4, wd + 1, dnnl_f32, any ? dnnl_format_tag_any : dnnl_oihw);\n"
    "}\n"
    "/* the roles of (operand 0, operand 1, result) per kind, as x = 0, w = 1, y = 2 */\n"
    "static const int nnc_dnnl_role[3][3] = {{0, 1, 2}, {2, 1, 0}, {2, 0, 1}};\n"
    "static const int nnc_dnnl_arg[3][3] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},\n"
    "                                       {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},\n"
    "                                       {DNNL_ARG_DIFF_DST, DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS}};\n"
    "static int nnc_dnnl_make(nnc_dnnl_slot *s, int kind, const int64_t *g) {\n"
    "    if (!nnc_dnnl_engine && (dnnl_engine_create(&nnc_dnnl_engine, dnnl_cpu, 0) != dnnl_success ||\n"
    "                             dnnl_stream_create(&nnc_dnnl_stream, nnc_dnnl_engine, dnnl_stream_default_flags) != dnnl_success))\n"
    "        return 1;\n"
    "    dnnl_memory_desc_t a[3], u[3];   /* any layout; the user's */\n"
    "    nnc_dnnl_mds(g, &a[0], &a[1], &a[2], 1);\n"
    "    nnc_dnnl_mds(g, &u[0], &u[1], &u[2], 0);\n"
    "    dnnl_dims_t st = {g[9], g[10]}, dil = {g[13] - 1, g[14] - 1}, pl = {g[11], g[12]};\n"
    "    dnnl_dims_t pr = {(g[5] - 1) * g[9] + (g[7] - 1) * g[13] + 1 - g[2] - g[11],\n"
    "                      (g[6] - 1) * g[10] + (g[8] - 1) * g[14] + 1 - g[3] - g[12]};\n"
    "    dnnl_convolution_desc_t fd, bd;\n"
    "    dnnl_primitive_desc_t fpd = NULL, pd = NULL;\n"
    "    if (dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &a[0], &a[1],\n"
    "                                                   NULL, &a[2], st, dil, pl, pr) != dnnl_success ||\n"
    "        dnnl_primitive_desc_create(&fpd, &fd, NULL, nnc_dnnl_engine, NULL) != dnnl_success)\n"
    "        return 1;\n"
    "    if (kind == 0) pd = fpd, fpd = NULL;\n"
    "    else if ((kind == 1 ? dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &a[0], &a[1],\n"
    "                                                                            &a[2], st, dil, pl, pr)\n"
    "                        : dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &a[0],\n"
    "                                                                               &a[1], NULL, &a[2], st, dil, pl, pr))\n"
    "                 != dnnl_success ||\n"
    "             dnnl_primitive_desc_create(&pd, &bd, NULL, nnc_dnnl_engine, fpd) != dnnl_success)\n"
    "        pd = NULL;\n"
    "    int bad = !pd || dnnl_primitive_create(&s->p, pd) != dnnl_success;\n"
    "    for (int i = 0; i < 3 && !bad; i++) {   /* operand 0, operand 1, result */\n"
    "        const int r = nnc_dnnl_role[kind][i];\n"
    "        const dnnl_query_t q = i < 2 ? (kind == 0 ? (i ? dnnl_query_weights_md : dnnl_query_src_md)\n"
    "                                                  : kind == 1 ? (i ? dnnl_query_weights_md : dnnl_query_diff_dst_md)\n"
    "                                                              : (i ? dnnl_query_src_md : dnnl_query_diff_dst_md))\n"
    "                                     : (kind == 0 ? dnnl_query_dst_md : kind == 1 ? dnnl_query_diff_src_md\n"
    "                                                                                 : dnnl_query_diff_weights_md);\n"
    "        s->md[i] = *dnnl_primitive_desc_query_md(pd, q, 0);\n"
    "        if (dnnl_memory_desc_equal(&s->md[i], &u[r])) continue;\n"
    "        dnnl_primitive_desc_t rpd = NULL;\n"
    "        bad = !(s->buf[i] = malloc(dnnl_memory_desc_get_size(&s->md[i]))) ||\n"
    "              (i < 2 ? dnnl_reorder_primitive_desc_create(&rpd, &u[r], nnc_dnnl_engine, &s->md[i], nnc_dnnl_engine, NULL)\n"
    "                     : dnnl_reorder_primitive_desc_create(&rpd, &s->md[i], nnc_dnnl_engine, &u[r], nnc_dnnl_engine, NULL))\n"
    "                  != dnnl_success ||\n"
    "              dnnl_primitive_create(&s->re[i], rpd) != dnnl_success;\n"
    "        if (rpd) dnnl_primitive_desc_destroy(rpd);\n"
    "    }\n"
    "    if (pd) dnnl_primitive_desc_destroy(pd);\n"
    "    if (fpd) dnnl_primitive_desc_destroy(fpd);\n"
    "    return bad;\n"
    "}\n"
    "static void nnc_dnnl_free(nnc_dnnl_slot *s) {\n"
    "    if (s->p) dnnl_primitive_destroy(s->p);\n"
    "    for (int i = 0; i < 3; i++) {\n"
    "        if (s->re[i]) dnnl_primitive_destroy(s->re[i]);\n"
    "        free(s->buf[i]);\n"
    "    }\n"
    "    memset(s, 0, sizeof *s);\n"
    "}\n"
    "static int nnc_dnnl_run(nnc_dnnl_slot *s, int kind, const int64_t *g, void *const *ptr) {\n"
    "    dnnl_memory_desc_t u[3];\n"
    "    nnc_dnnl_mds(g, &u[0], &u[1], &u[2], 0);\n"
    "    dnnl_memory_t um[3] = {0}, im[3] = {0};\n"
    "    int bad = 0;\n"
    "    for (int i = 0; i < 3 && !bad; i++) {\n"
    "        bad = dnnl_memory_create(&um[i], &u[nnc_dnnl_role[kind][i]], nnc_dnnl_engine, ptr[i]) != dnnl_success ||\n"
    "              dnnl_memory_create(&im[i], &s->md[i], nnc_dnnl_engine, s->buf[i] ? s->buf[i] : ptr[i]) != dnnl_success;\n"
    "    }\n"
    "    for (int i = 0; i < 2 && !bad; i++)\n"
    "        if (s->re[i]) {\n"
    "            dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, um[i]}, {DNNL_ARG_TO, im[i]}};\n"
    "            bad = dnnl_primitive_execute(s->re[i], nnc_dnnl_stream, 2, ra) != dnnl_success;\n"
    "        }\n"
    "    if (!bad) {\n"
    "        dnnl_exec_arg_t args[3];\n"
    "        for (int i = 0; i < 3; i++) args[i] = (dnnl_exec_arg_t){nnc_dnnl_arg[kind][i], im[i]};\n"
    "        bad = dnnl_primitive_execute(s->p, nnc_dnnl_stream, 3, args) != dnnl_success;\n"
    "    }\n"
    "    if (!bad && s->re[2]) {\n"
    "        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, im[2]}, {DNNL_ARG_TO, um[2]}};\n"
    "        bad = dnnl_primitive_execute(s->re[2], nnc_dnnl_stream, 2, ra) != dnnl_success;\n"
    "    }\n"
    "    if (!bad) bad = dnnl_stream_wait(nnc_dnnl_stream) != dnnl_success;\n"
    "    for (int i = 0; i < 3; i++) {\n"
    "        if (um[i]) dnnl_memory_destroy(um[i]);\n"
    "        if (im[i]) dnnl_memory_destroy(im[i]);\n"
    "    }\n"
    "    return bad;\n"
    "}\n"
    "static int nnc_dnnl_conv(nnc_dnnl_cache *c, int kind, const int64_t *g, const float *a, const float *b, float *out) {\n"
    "    pthread_mutex_lock(&nnc_dnnl_lock);\n"
    "    nnc_dnnl_slot *s = NULL;\n"
    "    for (int i = 0; i < 4; i++)\n"
    "        if (c->s[i].p && c->s[i].B == g[0]) s = &c->s[i];\n"
    "    if (!s) {\n"
    "        s = &c->s[c->next];\n"
    "        c->next = (c->next + 1) % 4;\n"
    "        nnc_dnnl_free(s);\n"
    "        s->B = g[0];\n"
    "        if (nnc_dnnl_make(s, kind, g)) nnc_dnnl_free(s);\n"
    "    }\n"
    "    void *const ptr[3] = {(void *)a, (void *)b, out};\n"
    "    const int bad = !s->p || nnc_dnnl_run(s, kind, g, ptr);\n"
    "    pthread_mutex_unlock(&nnc_dnnl_lock);\n"
    "    return bad;\n"
    "}\n"
    "/* oneDNN's bf16 matrix product with f32 accumulation (OpenBLAS has none).  Where it is fast:\n"
    " * with AMX (about 5x OpenBLAS's sgemm on one core of a Xeon with AMX), and on AMD's AVX512-BF16\n"
    " * (2.4x sgemm on an EPYC).  On an Intel core without AMX its AVX512-BF16 product ran at a third\n"
    " * of sgemm's speed (the Xeon with AMX hidden from oneDNN), and the f32 product on widened copies\n"
    " * is faster: the launch widens there.  Decided once per process from the CPU, never from a\n"
    " * timing, so a run's numbers do not depend on the machine's load. */\n"
    "static int nnc_dnnl_bf16_fast(void) {\n"
    "    static int fast = -1;\n"
    "    if (fast < 0) {\n"
    "        const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();\n"
    "        const int amx = (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;\n"
    "        const int bf16 = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;\n"
    "#if defined(__x86_64__) || defined(__i386__)\n"
    "        __builtin_cpu_init();\n"
    "        fast = amx || (bf16 && __builtin_cpu_is(\"amd\"));\n"
    "#else\n"
    "        fast = amx || bf16;\n"
    "#endif\n"
    "    }\n"
    "    return fast;\n"
    "}\n"
    "/* d = G M N K lda ldb sa sb ta tb cbf: G products of row-major matrices, A_g = a + g sa\n"
    " * (transposed if ta), B_g likewise (stride 0: one matrix for all, broadcast), C_g [M, N] bf16\n"
    " * (cbf) or f32.  Made once per (launch, shape); nonzero when oneDNN refuses or is slow here\n"
    " * (nnc_dnnl_bf16_fast), and the launch widens to f32 instead. */\n"
    "typedef struct { int64_t d[11]; dnnl_primitive_t p; dnnl_memory_desc_t md[3]; } nnc_dnnl_mm;\n"
    "static int nnc_dnnl_mm_make(nnc_dnnl_mm *c, const int64_t *d) {\n"
    "    if (!nnc_dnnl_bf16_fast()) return 1;\n"
    "    if (!nnc_dnnl_engine && (dnnl_engine_create(&nnc_dnnl_engine, dnnl_cpu, 0) != dnnl_success ||\n"
    "                             dnnl_stream_create(&nnc_dnnl_stream, nnc_dnnl_engine, dnnl_stream_default_flags) != dnnl_success))\n"
    "        return 1;\n"
    "    const int64_t G = d[0], M = d[1], N = d[2], K = d[3];\n"
    "    dnnl_dims_t ad = {d[6] ? G : 1, M, K}, bd = {d[7] ? G : 1, K, N}, cd = {G, M, N};\n"
    "    dnnl_dims_t as = {d[6] ? d[6] : M * K, d[8] ? 1 : d[4], d[8] ? d[4] : 1};\n"
    "    dnnl_dims_t bs = {d[7] ? d[7] : K * N, d[9] ? 1 : d[5], d[9] ? d[5] : 1}, cs = {M * N, N, 1};\n"
    "    dnnl_matmul_desc_t md;\n"
    "    dnnl_primitive_desc_t pd = NULL;\n"
    "    if (dnnl_memory_desc_init_by_strides(&c->md[0], 3, ad, dnnl_bf16, as) != dnnl_success ||\n"
    "        dnnl_memory_desc_init_by_strides(&c->md[1], 3, bd, dnnl_bf16, bs) != dnnl_success ||\n"
    "        dnnl_memory_desc_init_by_strides(&c->md[2], 3, cd, d[10] ? dnnl_bf16 : dnnl_f32, cs) != dnnl_success ||\n"
    "        dnnl_matmul_desc_init(&md, &c->md[0], &c->md[1], NULL, &c->md[2]) != dnnl_success ||\n"
    "        dnnl_primitive_desc_create(&pd, &md, NULL, nnc_dnnl_engine, NULL) != dnnl_success)\n"
    "        return 1;\n"
    "    const int bad = dnnl_primitive_create(&c->p, pd) != dnnl_success;\n"
    "    dnnl_primitive_desc_destroy(pd);\n"
    "    return bad;\n"
    "}\n"
    "static int nnc_dnnl_matmul(nnc_dnnl_mm *c, const int64_t *d, const void *a, const void *b, void *out) {\n"
    "    pthread_mutex_lock(&nnc_dnnl_lock);\n"
    "    if (c->p && memcmp(c->d, d, sizeof c->d)) {\n"
    "        dnnl_primitive_destroy(c->p);\n"
    "        c->p = NULL;\n"
    "    }\n"
    "    int bad = 0;\n"
    "    if (!c->p) {\n"
    "        memcpy(c->d, d, sizeof c->d);\n"
    "        if (nnc_dnnl_mm_make(c, d)) {\n"
    "            if (c->p) dnnl_primitive_destroy(c->p);\n"
    "            c->p = NULL;\n"
    "        }\n"
    "    }\n"
    "    dnnl_memory_t m[3] = {NULL, NULL, NULL};\n"
    "    void *const ptr[3] = {(void *)a, (void *)b, out};\n"
    "    bad = !c->p;\n"
    "    for (int i = 0; i < 3 && !bad; i++) bad = dnnl_memory_create(&m[i], &c->md[i], nnc_dnnl_engine, ptr[i]) != dnnl_success;\n"
    "    if (!bad) {\n"
    "        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}};\n"
    "        bad = dnnl_primitive_execute(c->p, nnc_dnnl_stream, 3, args) != dnnl_success ||\n"
    "              dnnl_stream_wait(nnc_dnnl_stream) != dnnl_success;\n"
    "    }\n"
    "    for (int i = 0; i < 3; i++)\n"
    "        if (m[i]) dnnl_memory_destroy(m[i]);\n"
    "    pthread_mutex_unlock(&nnc_dnnl_lock);\n"
    "    return bad;\n"
    "}\n";

/* f32 products through oneDNN's matmul (brgemm), chunk by chunk as the pool cuts them: on a
 * Xeon with AVX-512, one thread, 1.2-1.6x OpenBLAS's sgemm on a model's shapes (784-128-10 at
 * batch 64: 73 against 103 us for its first layer).  Only where the build says so
 * (-DNNC_DNNL_SGEMM: the in-process build, whose link has oneDNN; a library built ahead of time
 * keeps the CBLAS alone), and never for f64.  Each (shape, strides, alpha, beta) makes one
 * primitive, kept for the process; each thread runs it on its own stream and scratchpad, with
 * OpenMP's threads for it set to one (the pool already has the cores).  oneDNN sums a product's
 * terms in its own order, so results differ from OpenBLAS's in the last bits, and are the same
 * from run to run and on any thread count (each chunk is one single-threaded call).  Nonzero:
 * oneDNN refused, and the chunk runs in the CBLAS. */
#define DNNL_SGEMM_MACS_TEXT "(1 << 18)" /* the least work a chunk gives oneDNN */
#define DNNL_SGEMM_MACS ((int64_t)1 << 18)
static const char dnnl_sgemm_decl[] =
    "#ifdef NNC_DNNL_SGEMM\n"
    "#define NNC_POOL_SGEMM nnc_dnnl_sgemm\n"
    "static int nnc_dnnl_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,\n"
    "                          int ldb, float beta, float *c, int ldc);\n"
    "#endif\n";
static const char dnnl_sgemm_text[] =
    "#ifdef NNC_DNNL_SGEMM   /* f32 products by oneDNN (codegen/helpers.c, dnnl_sgemm_text) */\n"
    "#include <dnnl.h>\n#include <omp.h>\n#include <pthread.h>\n"
    "#define NNC_DNNL_SGEMM_MACS " DNNL_SGEMM_MACS_TEXT "\n"
    "typedef struct { int key[8]; float alpha, beta; dnnl_primitive_t p; size_t scratch; } nnc_sg_entry;\n"
    "static nnc_sg_entry nnc_sg_cache[256];\n"
    "static int nnc_sg_count;\n"
    "static pthread_mutex_t nnc_sg_lock = PTHREAD_MUTEX_INITIALIZER;\n"
    "static dnnl_engine_t nnc_sg_engine;\n"
    "/* each thread's stream and scratchpad, in a slot of these (held here, not only in TLS, so\n"
    " * that LeakSanitizer sees them held) */\n"
    "typedef struct { dnnl_stream_t stream; void *scratch; size_t len; } nnc_sg_thread;\n"
    "static nnc_sg_thread nnc_sg_slot[NNC_POOL_MAX];\n"
    "static int nnc_sg_slots;\n"
    "static _Thread_local int nnc_sg_mine = -1;\n"
    "static dnnl_primitive_t nnc_sg_make(const int *key, float alpha, float beta, size_t *scratch) {\n"
    "    const int ta = key[0], tb = key[1], m = key[2], n = key[3], k = key[4], lda = key[5], ldb = key[6], ldc = key[7];\n"
    "    if (!nnc_sg_engine && dnnl_engine_create(&nnc_sg_engine, dnnl_cpu, 0) != dnnl_success) return NULL;\n"
    "    dnnl_memory_desc_t a, b, c;\n"
    "    dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};\n"
    "    dnnl_dims_t as = {ta ? 1 : lda, ta ? lda : 1}, bs = {tb ? 1 : ldb, tb ? ldb : 1}, cs = {ldc, 1};\n"
    "    if (dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_f32, as) != dnnl_success ||\n"
    "        dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_f32, bs) != dnnl_success ||\n"
    "        dnnl_memory_desc_init_by_strides(&c, 2, cd, dnnl_f32, cs) != dnnl_success)\n"
    "        return NULL;\n"
    "    dnnl_matmul_desc_t md;\n"
    "    dnnl_primitive_attr_t attr = NULL;\n"
    "    dnnl_post_ops_t po = NULL;\n"
    "    dnnl_primitive_desc_t pd = NULL;\n"
    "    dnnl_primitive_t p = NULL;\n"
    "    int bad = dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) != dnnl_success ||\n"
    "              dnnl_primitive_attr_create(&attr) != dnnl_success ||\n"
    "              dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success;\n"
    "    if (!bad && alpha != 1) bad = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) != dnnl_success;\n"
    "    if (!bad && beta != 0)\n"
    "        bad = dnnl_post_ops_create(&po) != dnnl_success || dnnl_post_ops_append_sum(po, beta) != dnnl_success ||\n"
    "              dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success;\n"
    "    if (!bad) bad = dnnl_primitive_desc_create(&pd, &md, attr, nnc_sg_engine, NULL) != dnnl_success;\n"
    "    if (!bad) {\n"
    "        const dnnl_memory_desc_t *sd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);\n"
    "        *scratch = sd ? dnnl_memory_desc_get_size(sd) : 0;\n"
    "        bad = dnnl_primitive_create(&p, pd) != dnnl_success;\n"
    "    }\n"
    "    if (pd) dnnl_primitive_desc_destroy(pd);\n"
    "    if (po) dnnl_post_ops_destroy(po);\n"
    "    if (attr) dnnl_primitive_attr_destroy(attr);\n"
    "    return bad ? NULL : p;\n"
    "}\n"
    "static int nnc_dnnl_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,\n"
    "                          int ldb, float beta, float *c, int ldc) {\n"
    "    /* small products stay in the CBLAS (oneDNN's per-call cost is a few us), and so do those that\n"
    "     * add to C (a fused update: no faster in oneDNN, and slower in a step) */\n"
    "    if (m <= 0 || n <= 0 || k <= 0 || (int64_t)m * n * k < NNC_DNNL_SGEMM_MACS || beta != 0) return 1;\n"
    "    const int key[8] = {ta, tb, m, n, k, lda, ldb, ldc};\n"
    "    nnc_sg_entry *e = NULL;\n"
    "    pthread_mutex_lock(&nnc_sg_lock);\n"
    "    for (int i = 0; i < nnc_sg_count && !e; i++)\n"
    "        if (!memcmp(nnc_sg_cache[i].key, key, sizeof key) && nnc_sg_cache[i].alpha == alpha && nnc_sg_cache[i].beta == beta)\n"
    "            e = &nnc_sg_cache[i];\n"
    "    if (!e && nnc_sg_count < 256) {\n"
    "        e = &nnc_sg_cache[nnc_sg_count];\n"
    "        memcpy(e->key, key, sizeof key);\n"
    "        e->alpha = alpha, e->beta = beta;\n"
    "        const int t = omp_get_max_threads();   /* planned for the one thread it runs on */\n"
    "        if (t != 1) omp_set_num_threads(1);\n"
    "        e->p = nnc_sg_make(key, alpha, beta, &e->scratch);\n"
    "        if (t != 1) omp_set_num_threads(t);\n"
    "        nnc_sg_count++;   /* a refusal is kept too: asked once */\n"
    "    }\n"
    "    if (nnc_sg_mine < 0 && nnc_sg_slots < NNC_POOL_MAX) nnc_sg_mine = nnc_sg_slots++;\n"
    "    pthread_mutex_unlock(&nnc_sg_lock);\n"
    "    if (!e || !e->p || nnc_sg_mine < 0) return 1;\n"
    "    nnc_sg_thread *my = &nnc_sg_slot[nnc_sg_mine];\n"
    "    if (!my->stream && dnnl_stream_create(&my->stream, nnc_sg_engine, dnnl_stream_default_flags) != dnnl_success)\n"
    "        return 1;\n"
    "    if (e->scratch > my->len) {\n"
    "        free(my->scratch);\n"
    "        my->scratch = malloc(e->scratch);\n"
    "        my->len = my->scratch ? e->scratch : 0;\n"
    "        if (!my->scratch) return 1;\n"
    "    }\n"
    "    const dnnl_memory_desc_t *md[4];\n"
    "    const_dnnl_primitive_desc_t pd;\n"
    "    if (dnnl_primitive_get_primitive_desc(e->p, &pd) != dnnl_success) return 1;\n"
    "    md[0] = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);\n"
    "    md[1] = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);\n"
    "    md[2] = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);\n"
    "    md[3] = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);\n"
    "    void *const ptr[4] = {(void *)a, (void *)b, c, my->scratch};\n"
    "    static const int role[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};\n"
    "    dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};\n"
    "    dnnl_exec_arg_t args[4];\n"
    "    int nargs = 0, bad = 0;\n"
    "    for (int i = 0; i < 4 && !bad; i++) {\n"
    "        if (i == 3 && !e->scratch) break;\n"
    "        bad = !md[i] || dnnl_memory_create(&mem[i], md[i], nnc_sg_engine, ptr[i]) != dnnl_success;\n"
    "        if (!bad) args[nargs++] = (dnnl_exec_arg_t){role[i], mem[i]};\n"
    "    }\n"
    "    if (!bad) {\n"
    "        const int t = omp_get_max_threads();   /* one thread: the pool runs the chunks side by side */\n"
    "        if (t != 1) omp_set_num_threads(1);\n"
    "        bad = dnnl_primitive_execute(e->p, my->stream, nargs, args) != dnnl_success ||\n"
    "              dnnl_stream_wait(my->stream) != dnnl_success;\n"
    "        if (t != 1) omp_set_num_threads(t);\n"
    "    }\n"
    "    for (int i = 0; i < 4; i++)\n"
    "        if (mem[i]) dnnl_memory_destroy(mem[i]);\n"
    "    return bad;\n"
    "}\n"
    "#endif\n";

void helper_dnnl_sgemm_decl(Str *s) { str_puts(s, dnnl_sgemm_decl); }
void helper_dnnl_sgemm_prelude(Str *s) { str_puts(s, dnnl_sgemm_text); }

bool helper_uses_dnnl_sgemm(const Program *p, const BuildOpts *o) {
#ifdef NNC_DNNL_LIB
    if (o->f64) return false;
    for (int e = 0; e < ENTRY_COUNT; e++)
        for (int j = 0; j < p->entry[e].nlaunch; j++) {
            const Launch *L = &p->entry[e].launches[j];
            if (L->kind != L_GEMM) continue;
            GemmGeom q = gemm_geom(p->g, L);
            const int64_t B = p->g->batch_max;
            if (dim_size(q.m, B) * dim_size(q.n, B) * dim_size(q.k, B) >= DNNL_SGEMM_MACS) return true;
        }
#else
    (void)p, (void)o;
#endif
    return false;
}

bool helper_uses_dnnl(const Program *p, const BuildOpts *o) {
#ifdef NNC_DNNL_LIB
    if (o->f64) return false;
    for (int i = 0; i < p->g->n; i++) {
        Op op = p->g->nodes[i].op;
        if (op_has(op, OPF_CONV)) return true;
        if (op == OP_MATMUL && p->g->nodes[p->g->nodes[i].in[0]].dtype == DT_BF16) return true;
    }
#else
    (void)p, (void)o;
#endif
    return false;
}

void helper_dnnl_prelude(Str *s) { str_puts(s, dnnl_text); }

bool program_has_helpers(const Program *p) {
    for (int i = 0; i < p->g->n; i++)
        if (op_info[p->g->nodes[i].op].kind == OK_HELPER) return true;
    return false;
}

/* helpers.def's signature of h: its pointers, n, the rest, then the geometry if it takes it. */
static void helper_signature(Str *s, Helper h) {
    const HelperInfo *f = &helper_info[h];
    str_printf(s, "%s, int64_t n%s%s%s", f->ptrs, *f->after ? ", " : "", f->after, f->geom ? ", " GEOM_PARAMS : "");
}

/* The parameter of a signature ("type name, type name") at or after `at`: [*p, *end) the whole
 * "type name", [*name, *end) the name (the identifier it ends with); returns where to look for the
 * next one, or NULL when there is none. */
static const char *sig_param(const char *at, const char **p, const char **end, const char **name) {
    while (*at == ' ') at++;
    if (!*at) return NULL;
    const char *e = strchr(at, ',');
    if (!e) e = at + strlen(at);
    const char *q = e;
    while (q > at && (isalnum((unsigned char)q[-1]) || q[-1] == '_')) q--;
    *p = at, *end = e, *name = q;
    return *e ? e + 1 : e;
}

/* A helper's operands in a job (`NAME_job`, whose fields are the signature's parameters, each
 * "type name" as written there), the statements that copy them back into locals of those names
 * (a piece's), and the names in order (the job's initializer). */
static void cpu_job(Str *s, Helper h, Str *sig, Str *locals, Str *names) {
    Str fields = {0};
    helper_signature(sig, h);
    for (const char *at = sig->buf, *p, *end, *q; (at = sig_param(at, &p, &end, &q));) {
        str_printf(&fields, " %.*s;", (int)(end - p), p);
        str_printf(locals, "    %.*s = j_->%.*s;\n    (void)%.*s;\n", (int)(end - p), p, (int)(end - q), q,
                   (int)(end - q), q);
        str_printf(names, "%s%.*s", names->len ? ", " : "", (int)(end - q), q);
    }
    str_printf(s, "typedef struct {%s } %s_job;\n", fields.buf, helper_info[h].name);
    str_free(&fields);
}

/* A piece NAME_partK over [lo, hi) of a loop's index i, for nnc's pool (include/nnc_pool.h). */
static void cpu_piece(Str *s, const char *name, int k, const char *locals, const char *common, const char *body) {
    str_printf(s,
               "static void %s_part%d(void *ctx, const void *const *in_, int64_t b_, int64_t lo, int64_t hi) {\n"
               "    const %s_job *j_ = ctx;\n"
               "    (void)in_, (void)b_;\n%s%s"
               "    for (int64_t i = lo; i < hi; i++) {\n%s    }\n}\n",
               name, k, name, locals, common ? common : "", body);
}

/* A flat helper on the CPU: a piece over [lo, hi) of its flat index space, each piece's elements
 * in order (the same bits on any thread count). */
static void cpu_flat_helper(Str *s, Helper h) {
    const HelperInfo *f = &helper_info[h];
    Str sig = {0}, locals = {0}, names = {0};
    cpu_job(s, h, &sig, &locals, &names);
    cpu_piece(s, f->name, 0, locals.buf, NULL, f->flat);
    str_printf(s, "static void %s(%s) {\n    %s_job j_ = {%s};\n    nnc_pool_for(%s_part0, &j_, NULL, 0, n, n);\n}\n",
               f->name, sig.buf, f->name, names.buf, f->name);
    str_free(&sig);
    str_free(&locals);
    str_free(&names);
}

/* A helper with a CpuBody (helpers.h): its pre statements, then its loops' pieces on the pool; a
 * body with no loop is the helper's whole text. */
static void cpu_body_helper(Str *s, Helper h) {
    const HelperInfo *f = &helper_info[h];
    const CpuBody *c = f->cpu;
    if (!c->count[0]) {
        str_printf(s, "static void %s(", f->name);
        helper_signature(s, h);
        str_printf(s, ") {\n%s%s}\n", c->common ? c->common : "", c->pre ? c->pre : "");
        return;
    }
    Str sig = {0}, locals = {0}, names = {0};
    cpu_job(s, h, &sig, &locals, &names);
    const int loops = c->guard ? 2 : 1;
    for (int k = 0; k < loops; k++) cpu_piece(s, f->name, k, locals.buf, c->common, c->body[k]);
    str_printf(s, "static void %s(%s) {\n    %s_job j_ = {%s};\n%s%s", f->name, sig.buf, f->name, names.buf,
               c->common ? c->common : "", c->pre ? c->pre : "");
    if (c->guard)
        str_printf(s, "    if (%s) {\n        nnc_pool_for(%s_part0, &j_, NULL, 0, %s, %s);\n        return;\n    }\n",
                   c->guard, f->name, c->count[0], c->work[0]);
    const int k = loops - 1;
    str_printf(s, "    nnc_pool_for(%s_part%d, &j_, NULL, 0, %s, %s);\n}\n", f->name, k, c->count[k], c->work[k]);
    str_free(&sig);
    str_free(&locals);
    str_free(&names);
}

/* s with every whole word int64_t written as I. */
static void put_index_typed(Str *out, const char *s) {
    for (const char *p = s; *p;) {
        const char *q = strstr(p, "int64_t");
        if (!q) {
            str_puts(out, p);
            break;
        }
        const bool word = (q == s || !(isalnum((unsigned char)q[-1]) || q[-1] == '_')) &&
            !(isalnum((unsigned char)q[7]) || q[7] == '_');
        str_printf(out, "%.*s%s", (int)(q - p), p, word ? "I" : "int64_t");
        p = q + 7;
    }
}

/* A flat helper on CUDA: its loop in a template over the index type I, and the kernel, which
 * runs it in int when the launch says every index fits (nnc_i32: the backend's test, in
 * cuda_issue.c) and in int64_t otherwise.  The body's and the value parameters' int64_t become
 * I (pointer parameters keep their types): 64-bit division and remainder, which the bodies do per
 * element, are a long software sequence on a GPU, 32-bit ones a few instructions. */
static void cuda_flat_helper(Str *s, Helper h) {
    const HelperInfo *f = &helper_info[h];
    Str sig = {0}, typed = {0}, names = {0};
    helper_signature(&sig, h);
    for (const char *at = sig.buf, *p, *end, *q; (at = sig_param(at, &p, &end, &q));) {
        const bool value = !strncmp(p, "int64_t ", 8);
        str_printf(&typed, "%s%s%.*s", typed.len ? ", " : "", value ? "I " : "", (int)(value ? end - p - 8 : end - p),
                   value ? p + 8 : p);
        str_printf(&names, "%s%.*s", names.len ? ", " : "", (int)(end - q), q);
    }
    str_printf(s, "template <typename I> __device__ __forceinline__ void %s_body(%s) {\n", f->name, typed.buf);
    str_puts(s, "    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)blockDim.x * gridDim.x) {\n");
    put_index_typed(s, f->flat);
    str_printf(s,
               "    }\n}\n"
               "extern \"C\" __global__ void __launch_bounds__(%d) %s(%s, int nnc_i32) {\n"
               "    if (nnc_i32) %s_body<int>(%s);\n"
               "    else %s_body<int64_t>(%s);\n"
               "}\n",
               HELPER_THREADS, f->name, sig.buf, f->name, names.buf, f->name, names.buf);
    str_free(&sig);
    str_free(&typed);
    str_free(&names);
}

void helper_prelude(Str *s, bool cuda) {
    dropout_rng_prelude(s, cuda);
    str_printf(s, "\n/* Convolution and pooling helpers (codegen/helpers.c): one element of a flat index space each. */\n"
                  "#define NNC_HELPER_INF %s\n", cuda ? "((real)NNC_INF)" : "((real)INFINITY)");
    for (int h = 0; h < HP_COUNT; h++) {
        const HelperInfo *f = &helper_info[h];
        if (h == 0 && !cuda) str_puts(s, cpu_rows_text);
        if (!cuda && !f->cpu) {
            cpu_flat_helper(s, (Helper)h);
            continue;
        }
        if (cuda) {
            cuda_flat_helper(s, (Helper)h);
            continue;
        }
        cpu_body_helper(s, (Helper)h);
    }
}

void spatial_geom_args(const SpatialGeom *q, int64_t out[SPATIAL_GEOM_ARGS]) {
    const int64_t v[SPATIAL_GEOM_ARGS] = {q->C, q->H, q->W, q->OH, q->OW, q->KH, q->KW,
                                          q->SH, q->SW, q->PH, q->PW, q->DH, q->DW};
    for (int i = 0; i < SPATIAL_GEOM_ARGS; i++) out[i] = v[i];
}
