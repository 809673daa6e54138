/* attention.c - fused scaled dot-product attention: the C routines and the CUDA kernels.
 *
 * y = softmax(q k^T scale, causal mask) @ v, row by row over tiles of keys with a running
 * maximum m and sum l (online softmax): a key tile's scores s raise m to m', the row's sum and
 * output so far are scaled by exp(m - m'), and exp(s - m') joins them; at the end y = acc / l
 * and the row's logsumexp m + log(l) is saved (attention_lse).  The [..., Tq, Tk] weights are
 * never stored.  Dropout multiplies each weight, after the sum, by (u >= p) / (1 - p) with u
 * drawn as dropout's mask is (codegen/helpers.c: Philox4x32-10 under the seed, the stream the
 * FNV-1a of (key node, step), an accumulate call's mixed with its micro-batch's number, counter
 * (bh Tq + i) Tk + j), so the backward draws it again.
 *
 * The backward is FlashAttention-2's (Dao, 2023): P = exp(s - lse) recomputed per tile,
 * dv = (P M)^T dy, dP = dy v^T M, dS = P (dP - delta) scale with delta = sum(dy * y) per row
 * (a reduction the graph computes before), dq = dS k, dk = dS^T q.  With q, k and v in a half
 * type the weights (P M) and dS enter their products rounded to it (NNC_RW), as FlashAttention's
 * and PyTorch's kernels do under autocast: on tensor cores a product of one bf16 pair; the row
 * sums and dS are computed from the unrounded weights.
 *
 * The C target calls routines of the prelude, one per storage type of q, k and v (f32, bf16,
 * f16: the routine widens each load and computes in `real`), on the model's thread pool
 * (include/nnc_pool.h, the products' and large elementwise kernels'): the forward's tasks are
 * (head, 16-query tile) pairs, the backward's heads, each task owning its outputs (a head's dq,
 * dk and dv), so the sums run in one order and no two threads write one place.  A tile's 16
 * queries lie across a vector: scores and weights are held transposed ([key][query]), so a
 * query's maximum, sum and mask are lane-wise, with no sum across a vector, and the causal
 * tiles stop at the diagonal's 8-key block.
 *
 * The CUDA target renders a device function per configuration (storage type, tiles, sizes,
 * mask), every size a constant, which each launch's kernel calls with its pointers, heads,
 * scale and dropout (launches alike, a transformer's layers, share one).  Forward: a block of
 * 128 threads per (head, query tile), 16 row groups by 8 lanes; a thread holds RQ query rows and
 * BK / 8 key columns of the score tile, and VD / 8 columns of their output rows; the lanes of a
 * row combine its maximum and sum by shuffles; the weights go through shared memory into the
 * product with v.  Backward: one launch, two kinds of blocks and no atomics: a block per (head,
 * key tile) walks the query tiles for dk and dv, a block per (head, query tile) walks the key
 * tiles for dq.  Tiles are as large as fit 46 KB of static shared memory (attention_tiles),
 * which ATTENTION_MAX_HEAD (ir.h) bounds.  With bf16 storage both run on tensor cores
 * (cuda_fwd_mma_text, cuda_bwd_mma_text: mma.sync, four warps of 16 rows). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "helpers.h"

#define SHARED_BUDGET (46 * 1024) /* bytes of static shared memory a block may use (48 KB) */

AttnGeom attention_geom(const Graph *g, const Launch *L) {
    AttnGeom a;
    memset(&a, 0, sizeof a);
    a.y = a.lse_out = a.dq = a.dk = a.dv = a.dy = a.lse = a.delta = -1;
    const Node *any = NULL;
    for (int i = 0; i < L->nnodes; i++) {
        const Node *n = &g->nodes[L->nodes[i]];
        int *slot = n->op == OP_SDPA ? &a.y
            : n->op == OP_SDPA_LSE   ? &a.lse_out
            : n->op == OP_SDPA_DQ    ? &a.dq
            : n->op == OP_SDPA_DK    ? &a.dk
            : n->op == OP_SDPA_DV    ? &a.dv
                                     : NULL;
        assert(slot);
        *slot = L->nodes[i];
        if (!any || n->op == OP_SDPA || n->nin == 6) any = n;
    }
    assert(any);
    a.q = any->in[0], a.k = any->in[1], a.v = any->in[2];
    a.backward = any->nin == 6;
    if (a.backward) a.dy = any->in[3], a.lse = any->in[4], a.delta = any->in[5];
    a.scale = any->attr.attn.scale, a.dropout = any->attr.attn.dropout, a.causal = any->attr.attn.causal;
    a.key = attention_key(any);
    const Shape *q = &g->nodes[a.q].shape, *k = &g->nodes[a.k].shape, *v = &g->nodes[a.v].shape;
    if (any->attr.attn.heads) { /* heads side by side in [B, T, W] rows (passes/attn_layout.c) */
        a.heads = any->attr.attn.heads;
        a.lead = dim_size(q->d[0], 1) * a.heads, a.batched = dim_is_batch(q->d[0]);
        a.tq = q->d[1], a.tk = k->d[1], a.d = any->attr.attn.hd, a.dv_dim = any->attr.attn.hdv;
        a.ld[0] = q->d[2], a.ld[1] = k->d[2], a.ld[2] = v->d[2], a.ld[3] = a.heads * a.dv_dim;
        for (int j = 0; j < 3; j++) a.col[j] = any->attr.attn.col[j];
        if (any->attr.attn.packed) a.dk = a.dv = a.dq;
        return a;
    }
    a.lead = 1; /* B*H (a dimension -H) counts H and the batch */
    for (int d = 0; d < q->rank - 2; d++) {
        a.batched |= dim_is_batch(q->d[d]);
        a.lead *= dim_size(q->d[d], 1);
    }
    assert(!dim_is_batch(q->d[q->rank - 2]) && !dim_is_batch(k->d[k->rank - 2]) && !dim_is_batch(q->d[q->rank - 1]) &&
           !dim_is_batch(v->d[v->rank - 1]));
    a.tq = q->d[q->rank - 2], a.tk = k->d[k->rank - 2], a.d = q->d[q->rank - 1], a.dv_dim = v->d[v->rank - 1];
    a.heads = 1, a.ld[0] = a.ld[1] = a.d, a.ld[2] = a.ld[3] = a.dv_dim;
    return a;
}

bool program_has_attention(const Program *p) {
    for (int i = 0; i < p->g->n; i++)
        if (op_info[p->g->nodes[i].op].kind == OK_ATTENTION) return true;
    return false;
}

/* The storage types q, k and v come in (attention_prelude's routines, one per type). */
static const struct {
    DType t;
    const char *suffix, *type, *load, *store, *weight;
} storage[] = {
    {DT_F32, "r", "real", "(x)", "(x)", "(x)"},
    {DT_BF16, "bf16", "unsigned short", "nnc_bf16_f32(x)", "nnc_f32_bf16((float)(x))",
     "nnc_bf16_f32(nnc_f32_bf16((float)(x)))"},
    {DT_F16, "f16", "unsigned short", "nnc_f16_f32(x)", "nnc_f32_f16((float)(x))",
     "nnc_f16_f32(nnc_f32_f16((float)(x)))"},
};

static int storage_of(DType t) {
    for (size_t i = 0; i < NNC_COUNTOF(storage); i++)
        if (storage[i].t == t) return (int)i;
    assert(0);
    return 0;
}

/* ---- the C routines ---------------------------------------------------------------------------- */

/* The tile products and work tiles every storage type's routines share. */
static const char c_tiles_text[] =
    "/* attention's tile products: C (+)= A B over K terms for NNC_ATTN_RB rows of C by 16 columns,\n"
    " * held in registers along the sum.  With AVX-512's 32 registers 8 rows, in 512-bit vectors\n"
    " * (NNC_WIDE); else 4 rows, whose 8 accumulators of 256 bits\n"
    " * fit AVX2's 16 registers.  Every C element sums its K terms in order either way: the same bits.\n"
    " * A(r, k) = A[r ars + k aks], B row k at B + k ldb; C's old values join the sum where `add`,\n"
    " * else the sum starts at zero */\n"
    "#if defined(__AVX512F__)\n"
    "#define NNC_ATTN_RB 8\n"
    "#else\n"
    "#define NNC_ATTN_RB 4\n"
    "#endif\n"
    "static inline NNC_WIDE void nnc_attn_block(real *restrict C, int64_t ldc, const real *restrict A, int64_t ars,\n"
    "                                           int64_t aks, const real *restrict B, int64_t ldb, int64_t K, int add) {\n"
    "    real c0[16], c1[16], c2[16], c3[16];\n"
    "#if NNC_ATTN_RB == 8\n"
    "    real c4[16], c5[16], c6[16], c7[16];\n"
    "#endif\n"
    "    for (int c = 0; c < 16; c++) {\n"
    "        c0[c] = add ? C[c] : 0;\n"
    "        c1[c] = add ? C[ldc + c] : 0;\n"
    "        c2[c] = add ? C[2 * ldc + c] : 0;\n"
    "        c3[c] = add ? C[3 * ldc + c] : 0;\n"
    "#if NNC_ATTN_RB == 8\n"
    "        c4[c] = add ? C[4 * ldc + c] : 0;\n"
    "        c5[c] = add ? C[5 * ldc + c] : 0;\n"
    "        c6[c] = add ? C[6 * ldc + c] : 0;\n"
    "        c7[c] = add ? C[7 * ldc + c] : 0;\n"
    "#endif\n"
    "    }\n"
    "    for (int64_t k = 0; k < K; k++) {\n"
    "        const real *a = A + k * aks, *b = B + k * ldb;\n"
    "        const real a0 = a[0], a1 = a[ars], a2 = a[2 * ars], a3 = a[3 * ars];\n"
    "#if NNC_ATTN_RB == 8\n"
    "        const real a4 = a[4 * ars], a5 = a[5 * ars], a6 = a[6 * ars], a7 = a[7 * ars];\n"
    "#endif\n"
    "        for (int c = 0; c < 16; c++) {\n"
    "            c0[c] = NNC_FMA(a0, b[c], c0[c]);\n"
    "            c1[c] = NNC_FMA(a1, b[c], c1[c]);\n"
    "            c2[c] = NNC_FMA(a2, b[c], c2[c]);\n"
    "            c3[c] = NNC_FMA(a3, b[c], c3[c]);\n"
    "#if NNC_ATTN_RB == 8\n"
    "            c4[c] = NNC_FMA(a4, b[c], c4[c]);\n"
    "            c5[c] = NNC_FMA(a5, b[c], c5[c]);\n"
    "            c6[c] = NNC_FMA(a6, b[c], c6[c]);\n"
    "            c7[c] = NNC_FMA(a7, b[c], c7[c]);\n"
    "#endif\n"
    "        }\n"
    "    }\n"
    "    for (int c = 0; c < 16; c++) {\n"
    "        C[c] = c0[c];\n"
    "        C[ldc + c] = c1[c];\n"
    "        C[2 * ldc + c] = c2[c];\n"
    "        C[3 * ldc + c] = c3[c];\n"
    "#if NNC_ATTN_RB == 8\n"
    "        C[4 * ldc + c] = c4[c];\n"
    "        C[5 * ldc + c] = c5[c];\n"
    "        C[6 * ldc + c] = c6[c];\n"
    "        C[7 * ldc + c] = c7[c];\n"
    "#endif\n"
    "    }\n"
    "}\n"
    "/* a 16 x 16 block of floats transposed, dst[k ldd + r] = src[r lds + k]: where the compiler has\n"
    " * generic vectors' shuffles (clang, gcc 12), in four rounds of 16 two-vector shuffles on 16-lane\n"
    " * vectors, else an element at a time.  A copy: the same bits either way.  gpt.nn's head (64 x 32)\n"
    " * took 600 ns an element at a time, 150 so */\n"
    "#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)\n"
    "typedef float nnc_attn_v16 __attribute__((vector_size(64)));\n"
    "#define NNC_SHUF __builtin_shufflevector\n"
    "static inline NNC_WIDE void nnc_attn_tr16(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds) {\n"
    "    nnc_attn_v16 a[16], b[16];\n"
    "    for (int r = 0; r < 16; r++) memcpy(&a[r], src + r * lds, sizeof a[r]);\n"
    "    for (int r = 0; r < 16; r += 2) {   /* round 1: pairs of rows, element by element */\n"
    "        b[r] = NNC_SHUF(a[r], a[r + 1], 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);\n"
    "        b[r + 1] = NNC_SHUF(a[r], a[r + 1], 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);\n"
    "    }\n"
    "    for (int r = 0; r < 16; r += 4)     /* round 2: pairs of pairs */\n"
    "        for (int u = 0; u < 2; u++) {\n"
    "            a[r + u] = NNC_SHUF(b[r + u], b[r + u + 2], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);\n"
    "            a[r + u + 2] = NNC_SHUF(b[r + u], b[r + u + 2], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);\n"
    "        }\n"
    "    for (int r = 0; r < 16; r += 8)     /* round 3: fours */\n"
    "        for (int u = 0; u < 4; u++) {\n"
    "            b[r + u] = NNC_SHUF(a[r + u], a[r + u + 4], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);\n"
    "            b[r + u + 4] = NNC_SHUF(a[r + u], a[r + u + 4], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);\n"
    "        }\n"
    "    for (int u = 0; u < 8; u++) {       /* round 4: eights; vector k is column k */\n"
    "        a[u] = NNC_SHUF(b[u], b[u + 8], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);\n"
    "        a[u + 8] = NNC_SHUF(b[u], b[u + 8], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);\n"
    "    }\n"
    "    for (int k = 0; k < 16; k++) memcpy(dst + k * ldd, &a[k], sizeof a[k]);\n"
    "}\n"
    "#undef NNC_SHUF\n"
    "#else\n"
    "static inline void nnc_attn_tr16(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds) {\n"
    "    for (int k = 0; k < 16; k++)\n"
    "        for (int r = 0; r < 16; r++) dst[k * ldd + r] = src[r * lds + k];\n"
    "}\n"
    "#endif\n"
    "/* rows x cols of src into dst transposed (dst[c ldd + r] = src[r lds + c]), both multiples of 16 */\n"
    "static inline void nnc_attn_tr(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds, int64_t rows,\n"
    "                               int64_t cols) {\n"
    "    for (int64_t r = 0; r < rows; r += 16)\n"
    "        for (int64_t c = 0; c < cols; c += 16) nnc_attn_tr16(dst + c * ldd + r, ldd, src + r * lds + c, lds);\n"
    "}\n"
    "/* the most keys for which the routines read f32 q, k, v and dy where they are (whole tiles\n"
    " * and heads): every query tile reads all of a head's keys again, and past a few hundred rows\n"
    " * spread over as many pages the head's compact copy wins (GPT-2's T = 1024, rows of 9 KB:\n"
    " * the backward 15% slower in place; at 128 and 256 keys 5% faster) */\n"
    "#define NNC_ATTN_DIRECT 256\n"
    "/* whether a call reads its operands in place: f32 storage (NNC_ATTN_TR, per storage type),\n"
    " * whole tiles, heads of whole 16-float blocks, at most NNC_ATTN_DIRECT keys */\n"
    "#define NNC_ATTN_IN_PLACE(Tq, Tk, D, Dv) \\\n"
    "    (NNC_ATTN_TR && (Tk) <= NNC_ATTN_DIRECT && (Tq) % 16 == 0 && (Tk) % 16 == 0 && (D) % 16 == 0 && (Dv) % 16 == 0)\n"
    "#define NNC_ATTN_RND(n, m) (((n) + (m) - 1) / (m) * (m))   /* n rounded up to a multiple of m */\n"
    "/* the chunks of a call of `ntask` tasks and `work` multiply-adds for the model's pool\n"
    " * (include/nnc_pool.h): one, on the calling thread, when small; else a task each (up to 2^16),\n"
    " * claimed one at a time, or at most `per_thread` chunks a thread (0: no such bound) where tasks\n"
    " * cost alike and a chunk has set-up work of its own.  A task writes only its own outputs, in\n"
    " * one order: any thread, same bits */\n"
    "static inline int64_t nnc_attn_parts(int64_t ntask, int64_t work, int64_t per_thread) {\n"
    "    if (work <= 65536 || ntask <= 1) return 1;\n"
    "    nnc_pool_setup();\n"
    "    const int64_t most = per_thread > 0 ? per_thread * (int64_t)nnc_pool_g.max : 65536;\n"
    "    return ntask < most ? ntask : most < 65536 ? most : 65536;\n"
    "}\n"
    "/* a head's operands as the tile products read them, in one allocation of a pool chunk: rows\n"
    " * padded with zeros to whole tiles and columns (calloc's zeros, which the routines never overwrite) */\n"
    "static void *nnc_attn_alloc(size_t bytes) {\n"
    "    void *w = calloc(1, bytes);\n"
    "    if (!w) {\n"
    "        fprintf(stderr, \"nnc: out of memory in attention\\n\");\n"
    "        abort();\n"
    "    }\n"
    "    return w;\n"
    "}\n";

/* `@` is the storage suffix, `T` the storage type, NNC_LD / NNC_ST its widening and rounding. */
static const char c_fwd_text[] =
    "/* attention's forward: one call's operands and sizes, shared by its tasks (a head's tile of\n"
    " * NNC_ATTN_BQ queries each); y or lse may be NULL; p > 0: dropout, stream st */\n"
    "struct nnc_attn_fwd_@ {\n"
    "    const T *q, *k, *v;\n"
    "    T *y;\n"
    "    real *lse;\n"
    "    int64_t Tq, Tk, D, Dv, H, ldq, ldk, ldv, ldo;\n"
    "    real scale;\n"
    "    int causal;\n"
    "    double p;\n"
    "    unsigned long long seed, st;\n"
    "    int64_t ntask, parts;\n"
    "};\n"
    "/* the pool's chunk `chunk` of a forward call: its tasks, a tile of NNC_ATTN_BQ queries against\n"
    " * NNC_ATTN_BK keys at a time (online softmax), the tile's queries across a vector: scores,\n"
    " * weights and outputs are held transposed (ST[key][query], accT[column][query]), so a query's\n"
    " * maximum and sum run down a column, lane by lane, with no sum across a vector.  A chunk's\n"
    " * tasks are consecutive, so most follow one of the same head: its keys and values are laid out\n"
    " * (and widened) once a head */\n"
    "static NNC_WIDE void nnc_attn_fwd_chunk_@(void *ctx, int chunk) {\n"
    "    const struct nnc_attn_fwd_@ *a = ctx;\n"
    "    const T *q = a->q, *k = a->k, *v = a->v;\n"
    "    T *y = a->y;\n"
    "    real *lse = a->lse;\n"
    "    const int64_t Tq = a->Tq, Tk = a->Tk, D = a->D, Dv = a->Dv, nqt = (Tq + NNC_ATTN_BQ - 1) / NNC_ATTN_BQ;\n"
    "    const int64_t H = a->H, ldq = a->ldq, ldk = a->ldk, ldv = a->ldv, ldo = a->ldo;\n"
    "    const real scale = a->scale;\n"
    "    const int causal = a->causal;\n"
    "    const double p = a->p;\n"
    "    const unsigned long long seed = a->seed, st = a->st;\n"
    "    const int64_t DvR = NNC_ATTN_RND(Dv, NNC_ATTN_RB);   /* the columns the tile products touch */\n"
    "    const int64_t TkP = NNC_ATTN_RND(Tk, NNC_ATTN_BK);\n"
    "    real *Kr = nnc_attn_alloc(sizeof(real) * (size_t)(TkP * (D + DvR)));   /* Kr[j][d]: TkP rows of D */\n"
    "    real *Vr = Kr + TkP * D;                                            /* Vr[j][c]: TkP rows of DvR */\n"
    "    int64_t head = -1;\n"
    "    const int direct = NNC_ATTN_IN_PLACE(Tq, Tk, D, Dv);   /* k and v read where they are */\n"
    "    const int64_t kld = direct ? ldk : D, vld = direct ? ldv : DvR;\n"
    "    for (int64_t task = a->ntask * chunk / a->parts; task < a->ntask * (chunk + 1) / a->parts; task++) {\n"
    "        const int64_t bh = task / nqt, q0 = task % nqt * NNC_ATTN_BQ, b = bh / H, h = bh % H;\n"
    "        const real *Kb = direct ? (const real *)(const void *)(k + b * Tk * ldk + h * D) : Kr;\n"
    "        const real *Vb = direct ? (const real *)(const void *)(v + b * Tk * ldv + h * Dv) : Vr;\n"
    "        const int64_t nq = Tq - q0 < NNC_ATTN_BQ ? Tq - q0 : NNC_ATTN_BQ;\n"
    "        const int64_t kend = causal && q0 + nq < Tk ? q0 + nq : Tk;   /* row i sees keys j <= i */\n"
    "        real Qt[NNC_ATTN_MAXD][NNC_ATTN_BQ], accT[NNC_ATTN_MAXD][NNC_ATTN_BQ], ST[NNC_ATTN_BK][NNC_ATTN_BQ];\n"
    "        real mx[NNC_ATTN_BQ], l[NNC_ATTN_BQ], m[NNC_ATTN_BQ], alpha[NNC_ATTN_BQ];\n"
    "        if (!direct && bh != head) {   /* past Tk, and past Dv, zeros from the allocation */\n"
    "            for (int64_t j = 0; j < Tk; j++) {\n"
    "                const T *kr = k + (b * Tk + j) * ldk + h * D, *vr = v + (b * Tk + j) * ldv + h * Dv;\n"
    "                for (int64_t d = 0; d < D; d++) Kr[j * D + d] = NNC_LD(kr[d]);\n"
    "                for (int64_t c = 0; c < Dv; c++) Vr[j * DvR + c] = NNC_LD(vr[c]);\n"
    "            }\n"
    "            head = bh;\n"
    "        }\n"
    "        /* the tile's queries, Qt[d][i]; past Tq zeros, which see keys as a query would (finite\n"
    "         * scores), and are never stored */\n"
    "        if (NNC_ATTN_TR && nq == NNC_ATTN_BQ && D % 16 == 0)   /* floats as they are, by blocks */\n"
    "            nnc_attn_tr((float *)Qt[0], NNC_ATTN_BQ, (const float *)(q + (b * Tq + q0) * ldq + h * D), ldq, NNC_ATTN_BQ, D);\n"
    "        else\n"
    "            for (int64_t d = 0; d < D; d++)\n"
    "                for (int64_t i = 0; i < NNC_ATTN_BQ; i++) Qt[d][i] = i < nq ? NNC_LD(q[(b * Tq + q0 + i) * ldq + h * D + d]) : 0;\n"
    "        memset(accT, 0, sizeof(real) * NNC_ATTN_BQ * (size_t)DvR);\n"
    "        for (int i = 0; i < NNC_ATTN_BQ; i++) mx[i] = -(real)INFINITY, l[i] = 0;\n"
    "        for (int64_t k0 = 0; k0 < kend; k0 += NNC_ATTN_BK) {\n"
    "            const int64_t nk = kend - k0 < NNC_ATTN_BK ? kend - k0 : NNC_ATTN_BK, nkr = NNC_ATTN_RND(nk, NNC_ATTN_RB);\n"
    "            for (int64_t j = 0; j < nkr; j += NNC_ATTN_RB)\n"
    "                nnc_attn_block(ST[j], NNC_ATTN_BQ, Kb + (k0 + j) * kld, kld, 1, Qt[0], NNC_ATTN_BQ, D, 0);\n"
    "            /* scaled; -inf where a query does not see the key (causal, or past Tk), and each\n"
    "             * query's maximum.  Every query sees the tile's first key (k0 <= q0 where causal):\n"
    "             * m is finite */\n"
    "            for (int i = 0; i < NNC_ATTN_BQ; i++) m[i] = mx[i];\n"
    "            for (int64_t j = 0; j < nkr; j++) {\n"
    "                const int64_t key = k0 + j;\n"
    "                /* lanes [lo, 16) see the key */\n"
    "                const int lo = key >= Tk ? NNC_ATTN_BQ : causal && key > q0 ? (int)(key - q0) : 0;\n"
    "                for (int i = 0; i < NNC_ATTN_BQ; i++) {\n"
    "                    const real s = i >= lo ? ST[j][i] * scale : -(real)INFINITY;\n"
    "                    ST[j][i] = s;\n"
    "                    m[i] = s > m[i] ? s : m[i];\n"
    "                }\n"
    "            }\n"
    "            /* e^(mx - m), and 0 at a row's first tile (mx = -inf; EXP(-inf) is 0 too) */\n"
    "            for (int i = 0; i < NNC_ATTN_BQ; i++)\n"
    "                alpha[i] = m[i] == mx[i] ? (real)1 : mx[i] == -(real)INFINITY ? (real)0 : EXP(mx[i] - m[i]);\n"
    "            for (int i = 0; i < NNC_ATTN_BQ; i++) l[i] *= alpha[i];\n"
    "            /* each query's sum in key order; the weights as P v takes them, after dropout */\n"
    "            const int drop = p > 0 && y;\n"
    "            for (int64_t j = 0; j < nkr; j++)\n"
    "                for (int i = 0; i < NNC_ATTN_BQ; i++) {\n"
    "                    const real e = ST[j][i] == -(real)INFINITY ? 0 : EXP(ST[j][i] - m[i]);\n"
    "                    l[i] += e;\n"
    "                    ST[j][i] = drop ? e : NNC_RW(e);\n"
    "                }\n"
    "            if (drop)\n"
    "                for (int64_t j = 0; j < nk; j++)\n"
    "                    for (int64_t i = 0; i < nq; i++) {\n"
    "                        const real e = ST[j][i] * nnc_dropout_keep(seed, st, (unsigned long long)((bh * Tq + q0 + i) * Tk + k0 + j), p);\n"
    "                        ST[j][i] = NNC_RW(e);\n"
    "                    }\n"
    "            if (k0 > 0)\n"
    "                for (int64_t c = 0; c < DvR; c++)\n"
    "                    for (int i = 0; i < NNC_ATTN_BQ; i++) accT[c][i] *= alpha[i];\n"
    "            for (int i = 0; i < NNC_ATTN_BQ; i++) mx[i] = m[i];\n"
    "            for (int64_t c = 0; c < DvR; c += NNC_ATTN_RB)\n"
    "                nnc_attn_block(accT[c], NNC_ATTN_BQ, Vb + k0 * vld + c, 1, vld, ST[0], NNC_ATTN_BQ, nkr, 1);\n"
    "        }\n"
    "        if (y) {   /* divided across the vector, then stored by rows */\n"
    "            for (int64_t c = 0; c < Dv; c++)\n"
    "                for (int i = 0; i < NNC_ATTN_BQ; i++) accT[c][i] /= l[i];\n"
    "            if (NNC_ATTN_TR && nq == NNC_ATTN_BQ && Dv % 16 == 0)\n"
    "                nnc_attn_tr((float *)(y + (b * Tq + q0) * ldo + h * Dv), ldo, (const float *)accT[0], NNC_ATTN_BQ, Dv, NNC_ATTN_BQ);\n"
    "            else\n"
    "                for (int64_t i = 0; i < nq; i++)\n"
    "                    for (int64_t c = 0; c < Dv; c++) y[(b * Tq + q0 + i) * ldo + h * Dv + c] = NNC_ST(accT[c][i]);\n"
    "        }\n"
    "        if (lse)\n"
    "            for (int64_t i = 0; i < nq; i++) lse[(b * Tq + q0 + i) * H + h] = mx[i] + LOG(l[i]);\n"
    "    }\n"
    "    free(Kr);\n"
    "}\n"
    "/* attention's forward over BH heads, H a batch item: head bh's row i of q at\n"
    " * q + (bh / H Tq + i) ldq + bh % H D, k's and v's alike, y's with ldo, lse's at\n"
    " * (bh / H Tq + i) H + bh % H (H = 1 and ld the row's size: [BH, T, D] tensors) */\n"
    "static void nnc_attn_fwd_@(const T *q, const T *k, const T *v, T *y, real *lse, int64_t BH, int64_t H,\n"
    "                           int64_t ldq, int64_t ldk, int64_t ldv, int64_t ldo, int64_t Tq, int64_t Tk,\n"
    "                           int64_t D, int64_t Dv, real scale, int causal, double p,\n"
    "                           unsigned long long seed, unsigned long long st) {\n"
    "    const int64_t ntask = BH * ((Tq + NNC_ATTN_BQ - 1) / NNC_ATTN_BQ);\n"
    "    struct nnc_attn_fwd_@ a = {q, k, v, y, lse, Tq, Tk, D, Dv, H, ldq, ldk, ldv, ldo,\n"
    "                               scale, causal, p, seed, st, ntask, 1};\n"
    "    /* two chunks a thread: each runs its heads' tiles in turn and prepares a head once */\n"
    "    a.parts = nnc_attn_parts(ntask, BH * Tq * Tk * (D + Dv), 2);\n"
    "    nnc_pool_run(nnc_attn_fwd_chunk_@, &a, (int)a.parts);\n"
    "}\n";

static const char c_bwd_text[] =
    "/* n gradients from src into dst from element at: as they are (real), or rounded to T (gh) */\n"
    "static inline NNC_WIDE void nnc_attn_put_@(void *dst, int64_t at, const real *restrict src, int64_t n, int gh) {\n"
    "    if (!gh) {   /* whole vectors then the rest: no call (memcpy's) for a head's 32 columns */\n"
    "        real *restrict d = (real *)dst + at;\n"
    "        int64_t c = 0;\n"
    "        for (; c + 16 <= n; c += 16)\n"
    "            for (int e = 0; e < 16; e++) d[c + e] = src[c + e];\n"
    "        for (; c < n; c++) d[c] = src[c];\n"
    "        return;\n"
    "    }\n"
    "    T *d = (T *)dst + at;\n"
    "    for (int64_t i = 0; i < n; i++) d[i] = NNC_ST(src[i]);\n"
    "}\n"
    "/* attention's gradients: one call's operands and sizes, shared by its tasks (a head each); dq,\n"
    " * dk or dv may be NULL; real, or T where gh (mixed precision: rounded as they are stored) */\n"
    "struct nnc_attn_bwd_@ {\n"
    "    const T *q, *k, *v, *dy;\n"
    "    const real *lse, *delta;\n"
    "    void *dq, *dk, *dv;\n"
    "    int gh;\n"
    "    int64_t Tq, Tk, D, Dv, H, ldq, ldk, ldv, ldo;\n"
    "    real scale;\n"
    "    int causal;\n"
    "    double p;\n"
    "    unsigned long long seed, st;\n"
    "    int64_t ntask, parts;\n"
    "};\n"
    "/* the pool's chunk `chunk` of a backward call: its heads, each by tiles of NNC_ATTN_BQ queries\n"
    " * against NNC_ATTN_BK keys at a time, the weights recomputed from lse, held transposed as the\n"
    " * forward's (ST[key][query], dPT likewise); the chunk owns its heads' dq, dk and dv.  A head's\n"
    " * operands are laid out (and widened) once where they must be: k and v by rows, q and dy both\n"
    " * by rows and transposed (floats in whole tiles: read in place, only transposed); its dk and\n"
    " * dv summed over the query tiles before they are written */\n"
    "static NNC_WIDE void nnc_attn_bwd_chunk_@(void *ctx, int chunk) {\n"
    "    const struct nnc_attn_bwd_@ *a = ctx;\n"
    "    const T *q = a->q, *k = a->k, *v = a->v, *dy = a->dy;\n"
    "    const real *lse = a->lse, *delta = a->delta;\n"
    "    void *dq = a->dq, *dk = a->dk, *dv = a->dv;\n"
    "    const int64_t Tq = a->Tq, Tk = a->Tk, D = a->D, Dv = a->Dv;\n"
    "    const int64_t H = a->H, ldq = a->ldq, ldk = a->ldk, ldv = a->ldv, ldo = a->ldo;\n"
    "    const real scale = a->scale;\n"
    "    const int causal = a->causal;\n"
    "    const double p = a->p;\n"
    "    const unsigned long long seed = a->seed, st = a->st;\n"
    "    const int64_t D16 = NNC_ATTN_RND(D, 16), Dv16 = NNC_ATTN_RND(Dv, 16);\n"
    "    const int64_t TkP = NNC_ATTN_RND(Tk, NNC_ATTN_BK), TqP = NNC_ATTN_RND(Tq, NNC_ATTN_BQ);\n"
    "    /* Kr[j][d], Vr[j][c], Qt[d][i], Ot[c][i], Qr[i][d], Or[i][c], dK[j][d], dV[j][c]: past Tk,\n"
    "     * Tq, D and Dv zeros from the allocation (dK and dV's padding: sums of zeros) */\n"
    "    real *Kr = nnc_attn_alloc(sizeof(real) * (size_t)(TkP * (2 * D16 + Dv + Dv16) + TqP * (D + Dv + D16 + Dv16)));\n"
    "    real *Vr = Kr + TkP * D16, *dK = Vr + TkP * Dv, *dV = dK + TkP * D16, *Qt = dV + TkP * Dv16;\n"
    "    real *Ot = Qt + D * TqP, *Qr = Ot + Dv * TqP, *Or = Qr + TqP * D16;\n"
    "    real ST[NNC_ATTN_BK][NNC_ATTN_BQ], dPT[NNC_ATTN_BK][NNC_ATTN_BQ], dQ[NNC_ATTN_BQ][NNC_ATTN_MAXD];\n"
    "    /* q, k, v and dy where they are, with their row strides; else laid out (and widened) by\n"
    "     * rows, padded */\n"
    "    const int direct = NNC_ATTN_IN_PLACE(Tq, Tk, D, Dv);\n"
    "    for (int64_t bh = a->ntask * chunk / a->parts; bh < a->ntask * (chunk + 1) / a->parts; bh++) {\n"
    "        const int64_t b = bh / H, h = bh % H;\n"
    "        const real *Kb = direct ? (const real *)(const void *)(k + b * Tk * ldk + h * D) : Kr;\n"
    "        const real *Vb = direct ? (const real *)(const void *)(v + b * Tk * ldv + h * Dv) : Vr;\n"
    "        const real *Qb = direct ? (const real *)(const void *)(q + b * Tq * ldq + h * D) : Qr;\n"
    "        const real *Ob = direct ? (const real *)(const void *)(dy + b * Tq * ldo + h * Dv) : Or;\n"
    "        const int64_t kld = direct ? ldk : D16, vld = direct ? ldv : Dv, qld = direct ? ldq : D16, dld = direct ? ldo : Dv16;\n"
    "        if (!direct) {\n"
    "            for (int64_t j = 0; j < Tk; j++) {\n"
    "                const T *kr = k + (b * Tk + j) * ldk + h * D, *vr = v + (b * Tk + j) * ldv + h * Dv;\n"
    "                for (int64_t d = 0; d < D; d++) Kr[j * D16 + d] = NNC_LD(kr[d]);\n"
    "                for (int64_t c = 0; c < Dv; c++) Vr[j * Dv + c] = NNC_LD(vr[c]);\n"
    "            }\n"
    "            for (int64_t i = 0; i < Tq; i++) {\n"
    "                const T *qr = q + (b * Tq + i) * ldq + h * D, *orow = dy + (b * Tq + i) * ldo + h * Dv;\n"
    "                for (int64_t d = 0; d < D; d++) Qr[i * D16 + d] = NNC_LD(qr[d]);\n"
    "                for (int64_t c = 0; c < Dv; c++) Or[i * Dv16 + c] = NNC_LD(orow[c]);\n"
    "            }\n"
    "        }\n"
    "        if (NNC_ATTN_F32 && Tq % 16 == 0 && D % 16 == 0 && Dv % 16 == 0) {   /* by blocks */\n"
    "            nnc_attn_tr((float *)Qt, TqP, (const float *)Qb, qld, Tq, D);\n"
    "            nnc_attn_tr((float *)Ot, TqP, (const float *)Ob, dld, Tq, Dv);\n"
    "        } else {\n"
    "            for (int64_t d = 0; d < D; d++)\n"
    "                for (int64_t i = 0; i < Tq; i++) Qt[d * TqP + i] = Qr[i * D16 + d];\n"
    "            for (int64_t c = 0; c < Dv; c++)\n"
    "                for (int64_t i = 0; i < Tq; i++) Ot[c * TqP + i] = Or[i * Dv16 + c];\n"
    "        }\n"
    "        if (dk) memset(dK, 0, sizeof(real) * (size_t)(TkP * D16));\n"
    "        if (dv) memset(dV, 0, sizeof(real) * (size_t)(TkP * Dv16));\n"
    "        for (int64_t q0 = 0; q0 < Tq; q0 += NNC_ATTN_BQ) {\n"
    "            const int64_t nq = Tq - q0 < NNC_ATTN_BQ ? Tq - q0 : NNC_ATTN_BQ;\n"
    "            const int64_t kend = causal && q0 + nq < Tk ? q0 + nq : Tk;   /* row i sees keys j <= i */\n"
    "            real L[NNC_ATTN_BQ], Di[NNC_ATTN_BQ];\n"
    "            for (int64_t i = 0; i < NNC_ATTN_BQ; i++) {\n"
    "                const int64_t at = (b * Tq + q0 + i) * H + h;\n"
    "                L[i] = i < nq ? lse[at] : 0;\n"
    "                Di[i] = i < nq ? delta[at] : 0;\n"
    "            }\n"
    "            if (dq) memset(dQ, 0, sizeof dQ);\n"
    "            for (int64_t k0 = 0; k0 < kend; k0 += NNC_ATTN_BK) {\n"
    "                const int64_t nk = kend - k0 < NNC_ATTN_BK ? kend - k0 : NNC_ATTN_BK, nkr = NNC_ATTN_RND(nk, NNC_ATTN_RB);\n"
    "                for (int64_t j = 0; j < nkr; j += NNC_ATTN_RB) {\n"
    "                    nnc_attn_block(ST[j], NNC_ATTN_BQ, Kb + (k0 + j) * kld, kld, 1, Qt + q0, TqP, D, 0);\n"
    "                    nnc_attn_block(dPT[j], NNC_ATTN_BQ, Vb + (k0 + j) * vld, vld, 1, Ot + q0, TqP, Dv, 0);\n"
    "                }\n"
    "                /* ST becomes P M, dPT becomes dS; zeros where a query does not see the key (or\n"
    "                 * past Tq) */\n"
    "                for (int64_t j = 0; j < nkr; j++) {\n"
    "                    const int64_t key = k0 + j;\n"
    "                    /* the queries that see the key: lanes [lo, hi) */\n"
    "                    const int lo = causal && key > q0 ? (int)(key - q0) : 0, hi = key < Tk ? (int)nq : 0;\n"
    "                    if (p > 0)\n"
    "                        for (int i = 0; i < NNC_ATTN_BQ; i++) {\n"
    "                            const int seen = i >= lo && i < hi;\n"
    "                            const real P = seen ? EXP(ST[j][i] * scale - L[i]) : 0;\n"
    "                            const real mk = seen ? nnc_dropout_keep(seed, st, (unsigned long long)((bh * Tq + q0 + i) * Tk + key), p) : 1;\n"
    "                            ST[j][i] = NNC_RW(P * mk);\n"
    "                            dPT[j][i] = NNC_RW(P * (dPT[j][i] * mk - Di[i]) * scale);\n"
    "                        }\n"
    "                    else   /* no mask: one branch-free loop the compiler vectorises */\n"
    "                        for (int i = 0; i < NNC_ATTN_BQ; i++) {\n"
    "                            const int seen = i >= lo && i < hi;\n"
    "                            const real P = seen ? EXP(ST[j][i] * scale - L[i]) : 0;\n"
    "                            ST[j][i] = NNC_RW(P);\n"
    "                            dPT[j][i] = NNC_RW(P * (dPT[j][i] - Di[i]) * scale);\n"
    "                        }\n"
    "                }\n"
    "                for (int64_t j = 0; j < nkr; j += NNC_ATTN_RB) {   /* dv += (P M)^T dy, dk += dS^T q */\n"
    "                    if (dv)\n"
    "                        for (int64_t c = 0; c < Dv16; c += 16)\n"
    "                            nnc_attn_block(dV + (k0 + j) * Dv16 + c, Dv16, ST[j], NNC_ATTN_BQ, 1, Ob + q0 * dld + c, dld, NNC_ATTN_BQ, 1);\n"
    "                    if (dk)\n"
    "                        for (int64_t d = 0; d < D16; d += 16)\n"
    "                            nnc_attn_block(dK + (k0 + j) * D16 + d, D16, dPT[j], NNC_ATTN_BQ, 1, Qb + q0 * qld + d, qld, NNC_ATTN_BQ, 1);\n"
    "                }\n"
    "                if (dq)   /* dq += dS k */\n"
    "                    for (int64_t i = 0; i < NNC_ATTN_BQ; i += NNC_ATTN_RB)\n"
    "                        for (int64_t d = 0; d < D16; d += 16)\n"
    "                            nnc_attn_block(dQ[i] + d, NNC_ATTN_MAXD, &dPT[0][i], 1, NNC_ATTN_BQ, Kb + k0 * kld + d, kld, nkr, 1);\n"
    "            }\n"
    "            if (dq)\n"
    "                for (int64_t i = 0; i < nq; i++) nnc_attn_put_@(dq, (b * Tq + q0 + i) * ldq + h * D, dQ[i], D, a->gh);\n"
    "        }\n"
    "        for (int64_t j = 0; j < Tk; j++) {\n"
    "            if (dk) nnc_attn_put_@(dk, (b * Tk + j) * ldk + h * D, dK + j * D16, D, a->gh);\n"
    "            if (dv) nnc_attn_put_@(dv, (b * Tk + j) * ldv + h * Dv, dV + j * Dv16, Dv, a->gh);\n"
    "        }\n"
    "    }\n"
    "    free(Kr);\n"
    "}\n"
    "/* attention's gradients over BH heads, laid out as the forward's (dq as q, dy as y, delta as\n"
    " * lse) */\n"
    "static void nnc_attn_bwd_@(const T *q, const T *k, const T *v, const T *dy, const real *lse, const real *delta,\n"
    "                           void *dq, void *dk, void *dv, int gh, int64_t BH, int64_t H, int64_t ldq, int64_t ldk,\n"
    "                           int64_t ldv, int64_t ldo, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv,\n"
    "                           real scale, int causal, double p, unsigned long long seed, unsigned long long st) {\n"
    "    struct nnc_attn_bwd_@ a = {q, k, v, dy, lse, delta, dq, dk, dv, gh, Tq, Tk, D, Dv, H, ldq, ldk,\n"
    "                               ldv, ldo, scale, causal, p, seed, st, BH, 1};\n"
    "    /* heads cost alike: two chunks a thread balance them, and each chunk allocates a head's\n"
    "     * operands once, not once a head */\n"
    "    a.parts = nnc_attn_parts(BH, BH * Tq * Tk * (D + Dv), 2);\n"
    "    nnc_pool_run(nnc_attn_bwd_chunk_@, &a, (int)a.parts);\n"
    "}\n";

/* Which storage types the program's attention launches read. */
static void storages_used(const Program *p, bool used[NNC_COUNTOF(storage)]) {
    memset(used, 0, NNC_COUNTOF(storage) * sizeof *used);
    for (int i = 0; i < p->g->n; i++)
        if (op_info[p->g->nodes[i].op].kind == OK_ATTENTION)
            used[storage_of(p->g->nodes[p->g->nodes[i].in[0]].dtype)] = true;
}

static bool word_char(char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Copies `text` with `@` replaced by `at` and the word T by `type`. */
static void put_text(Str *s, const char *text, const char *at, const char *type) {
    for (const char *c = text; *c; c++) {
        if (*c == '@') str_puts(s, at);
        else if (*c == 'T' && (c == text || !word_char(c[-1])) && !word_char(c[1])) str_puts(s, type);
        else str_putc(s, *c);
    }
}

static void cuda_device_fns(Str *s, const Program *p, bool f64);

void attention_prelude(Str *s, const Program *p, bool cuda, bool f64) {
    if (!program_has_attention(p)) return;
    str_puts(s, "\n");
    if (!program_has_helpers(p)) dropout_rng_prelude(s, cuda); /* else helper_prelude wrote it */
    if (cuda) { /* each launch's kernel calls one of these (attention_render_cuda) */
        cuda_device_fns(s, p, f64);
        return;
    }
    bool used[NNC_COUNTOF(storage)];
    storages_used(p, used);
    /* NNC_ATTN_F32: real is float (the transposes of 16 x 16 blocks apply); NNC_ATTN_TR: and the
     * storage too, so blocks of q and y move as they are */
    str_printf(s, "#define NNC_ATTN_BQ 16\n#define NNC_ATTN_BK 64\n#define NNC_ATTN_MAXD %d\n#define NNC_ATTN_F32 %d\n",
               ATTENTION_MAX_HEAD, !f64);
    str_puts(s, c_tiles_text);
    for (size_t i = 0; i < NNC_COUNTOF(storage); i++) {
        if (!used[i]) continue;
        str_printf(s, "#define NNC_LD(x) %s\n#define NNC_ST(x) %s\n#define NNC_RW(x) %s\n#define NNC_ATTN_TR %d\n",
                   storage[i].load, storage[i].store, storage[i].weight, storage[i].t == DT_F32 && !f64);
        put_text(s, c_fwd_text, storage[i].suffix, storage[i].type);
        put_text(s, c_bwd_text, storage[i].suffix, storage[i].type);
        str_puts(s, "#undef NNC_LD\n#undef NNC_ST\n#undef NNC_RW\n#undef NNC_ATTN_TR\n");
    }
}

/* The heads at batch B, as a C expression of B. */
static void render_heads(Str *s, const AttnGeom *a) {
    if (a->batched) str_printf(s, "(B * %lldLL)", (long long)a->lead);
    else str_printf(s, "%lldLL", (long long)a->lead);
}

/* Whether the gradients are stored in q's half type (passes/fold_rows.c folds the casts that
 * mixed precision puts after them into the kernel): all of a launch's, or none. */
bool attention_grads_half(const Graph *g, const AttnGeom *a) {
    const int x = a->dq >= 0 ? a->dq : a->dk >= 0 ? a->dk : a->dv;
    return a->backward && x >= 0 && DTYPE_IS_HALF(g->nodes[x].dtype);
}

/* A pointer argument: node x's buffer from element col, or NULL. */
static void ptr_arg(const Kernel *k, int x, int64_t col) {
    if (x < 0) str_puts(k->s, "NULL");
    else if (col) {
        str_puts(k->s, "(");
        k->d->ptr(k, k->s, x);
        str_printf(k->s, " + %lld)", (long long)col);
    } else k->d->ptr(k, k->s, x);
    str_puts(k->s, ", ");
}

/* The dropout stream's argument: key, step and micro-batch as dropout's mask has them
 * (codegen/helpers.c), in the dialect's spelling. */
static void render_stream(const Kernel *k, const AttnGeom *a) {
    str_puts(k->s, "nnc_dropout_stream(");
    if (k->d->int_arg) k->d->int_arg(k, k->s, a->key); /* a parameter: the layers share the kernel */
    else str_printf(k->s, "%d", a->key);
    str_printf(k->s, ", %s, %s, %d)", k->d->step, k->d->micro, k->e->kind == ENTRY_ACCUM);
}

void attention_render_c(const Kernel *k, const Launch *L) {
    const AttnGeom a = attention_geom(k->g, L);
    const char *sfx = storage[storage_of(k->g->nodes[a.q].dtype)].suffix;
    /* dropout only where the training entries draw it, and only for what the mask touches */
    bool drop = a.dropout > 0 && k->e->kind != ENTRY_EVAL && (a.y >= 0 || a.backward);
    char sc[RENDER_NUM_LEN], pp[RENDER_NUM_LEN];
    str_printf(k->s, "    nnc_attn_%s_%s(", a.backward ? "bwd" : "fwd", sfx);
    const int args[] = {a.q, a.k, a.v, a.dy, a.lse, a.delta, a.dq, a.dk, a.dv};
    const int64_t col[] = {a.col[0], a.col[1], a.col[2], 0, 0, 0, a.col[0], a.col[1], a.col[2]};
    if (a.backward) {
        for (size_t i = 0; i < NNC_COUNTOF(args); i++) ptr_arg(k, args[i], col[i]);
        str_printf(k->s, "%d, ", attention_grads_half(k->g, &a));
    } else {
        for (int i = 0; i < 3; i++) ptr_arg(k, args[i], col[i]);
        ptr_arg(k, a.y, 0);
        ptr_arg(k, a.lse_out, 0);
    }
    render_heads(k->s, &a);
    str_printf(k->s, ", %lld, %lld, %lld, %lld, %lld", (long long)a.heads, (long long)a.ld[0], (long long)a.ld[1],
               (long long)a.ld[2], (long long)a.ld[3]);
    str_printf(k->s, ", %lld, %lld, %lld, %lld, (real)%s, %d, %s, (unsigned long long)m->seed, ", (long long)a.tq,
               (long long)a.tk, (long long)a.d, (long long)a.dv_dim, render_num(sc, a.scale), a.causal,
               render_num(pp, drop ? a.dropout : 0));
    render_stream(k, &a);
    str_puts(k->s, ");\n");
}

/* ---- the CUDA kernels -------------------------------------------------------------------------- */

/* A kernel's tiles: BQ x BK (forward) or T2 x T2 (backward, both kinds of blocks), and the row
 * groups TR of its layout (TR x 8 threads). */
typedef struct {
    int bq, bk, tr;
    bool mma; /* on tensor cores (cuda_fwd_mma_text, cuda_bwd_mma_text): tr 16 (four warps), the
               * blocks' own tiles 64 rows (bq; and bk in the backward) */
    int it; /* the backward's tiles of the other side (IT), 64 or 32 */
} AttnTiles;

/* Whether the tensor-core kernels take a launch, and their tile of keys (forward) or of the
 * other side (backward), 64 or 32, as fits the shared budget; 0: not.  bf16 q, k and v in an
 * f32 build (the products' operands are bf16 as stored), unless NNC_ATTN_MMA=0 when the model
 * is compiled (the CUDA-core kernels, to compare).  NNC_ATTN_TILE=32 takes the smaller tile
 * where the larger fits (fewer registers a thread, more blocks an SM: to compare on a GPU). */
static int mma_tile(const AttnGeom *a, DType st, bool f64) {
    const char *env = getenv("NNC_ATTN_MMA");
    if (st != DT_BF16 || f64 || (env && !strcmp(env, "0"))) return 0;
    const int64_t kd = (a->d + 15) / 16 * 16, kv = (a->dv_dim + 15) / 16 * 16;
    const char *tile = getenv("NNC_ATTN_TILE"); /* 32: the smaller tile, to compare */
    for (int64_t t = tile && !strcmp(tile, "32") ? 32 : 64; t >= 32; t /= 2) {
        /* two buffers of t rows of k and v (or of the other side's two), lse and delta's too */
        const int64_t bytes = 2 * 4 * t * (kd / 2 + 4 + kv / 2 + 4) + (a->backward ? 2 * 8 * t : 0);
        if (bytes <= SHARED_BUDGET) return (int)t;
    }
    return 0;
}

static AttnTiles attention_tiles(const AttnGeom *a, DType st, bool f64) {
    const int64_t rb = f64 ? 8 : 4, d = a->d, dv = a->dv_dim;
    const int mt = mma_tile(a, st, f64);
    if (mt) return a->backward ? (AttnTiles){64, 64, 16, true, mt} : (AttnTiles){64, mt, 16, true, 0};
    if (!a->backward) {
        static const int cand[][2] = {{64, 32}, {32, 32}, {32, 16}, {16, 16}, {16, 8}};
        for (size_t i = 0; i < NNC_COUNTOF(cand); i++) {
            const int64_t bq = cand[i][0], bk = cand[i][1];
            if (rb * (bq * (d + 1) + bk * (d + 1) + bk * dv + bq * (bk + 1)) <= SHARED_BUDGET)
                return (AttnTiles){(int)bq, (int)bk, 16, false, 0};
        }
        assert(0 && "a head size above ATTENTION_MAX_HEAD");
    }
    static const int cand[] = {32, 16, 8};
    for (size_t i = 0; i < NNC_COUNTOF(cand); i++) {
        const int64_t t = cand[i];
        if (rb * (2 * t * (d + 1) + 2 * t * (dv + 1) + t * (t + 1) + 2 * t) <= SHARED_BUDGET)
            return (AttnTiles){(int)t, (int)t, t < 16 ? (int)t : 16, false, 0};
    }
    assert(0 && "a head size above ATTENTION_MAX_HEAD");
    return (AttnTiles){8, 8, 8, false, 0};
}

unsigned attention_cuda_threads(const Graph *g, const Launch *L, bool f64) {
    AttnGeom a = attention_geom(g, L);
    return (unsigned)attention_tiles(&a, g->nodes[a.q].dtype, f64).tr * 8;
}

/* NNC_ATTN_MINB=N when the model is compiled: the blocks of the tensor-core backward an SM must
 * hold at once (__launch_bounds__' second number), so that ptxas budgets 65536 / (128 N)
 * registers a thread.  GPT-2 small's backward takes 255 (2 blocks, 8 warps an SM; 88 bytes of
 * spill loads); with 3, 168 (12 warps; 224 bytes), with 4, 128 (820): to compare on a GPU
 * whether occupancy or the spills cost more.  Unset or 0: none asked. */
unsigned attention_cuda_min_blocks(const Graph *g, const Launch *L, bool f64) {
    const char *env = getenv("NNC_ATTN_MINB");
    if (!env) return 0;
    AttnGeom a = attention_geom(g, L);
    const int n = atoi(env);
    return a.backward && attention_tiles(&a, g->nodes[a.q].dtype, f64).mma && n > 0 && n <= 8 ? (unsigned)n : 0;
}

int64_t attention_cuda_blocks(const Graph *g, const Launch *L, int64_t B, bool f64) {
    AttnGeom a = attention_geom(g, L);
    AttnTiles t = attention_tiles(&a, g->nodes[a.q].dtype, f64);
    const int64_t bh = attention_heads(&a, B), nqt = (a.tq + t.bq - 1) / t.bq, nkt = (a.tk + t.bk - 1) / t.bk;
    if (!a.backward) return bh * nqt;
    return (a.dk >= 0 || a.dv >= 0 ? bh * nkt : 0) + (a.dq >= 0 ? bh * nqt : 0);
}

/* Both kernels' loads of a tile: rows [r0, r0 + ROWS) of a [.., N, W] tensor into S[ROWS][..],
 * zeros past N.  `@` stands for "S, ROWS, W, N, SRC, r0". */
static const char cuda_fwd_text[] =
    "    __shared__ real Qs[BQ][HD + 1], Ks[BK][HD + 1], Vs[BK][VD], Ps[BQ][BK + 1];\n"
    "    const int tid = threadIdx.x, tx = tid & 7, ty = tid >> 3;\n"
    "    const int64_t nqt = (TQ + BQ - 1) / BQ;\n"
    "    for (int64_t blk = blockIdx.x; blk < BH * nqt; blk += gridDim.x) {\n"
    "        const int64_t bh = blk / nqt;\n"
    "        const int q0 = (int)(blk % nqt) * BQ;\n"
    "        __syncthreads();   /* the last block's readers are done with the tiles */\n"
    "        for (int e = tid; e < BQ * HD; e += TR * 8)\n"
    "            Qs[e / HD][e % HD] = q0 + e / HD < TQ ? NNC_LD(q[(bh / H * TQ + q0 + e / HD) * LDQ + bh % H * HD + e % HD]) : (real)0;\n"
    "        real m[RQ], l[RQ], acc[RQ][CD];\n"
    "        #pragma unroll\n"
    "        for (int r = 0; r < RQ; r++) {\n"
    "            m[r] = -(real)NNC_INF;\n"
    "            l[r] = 0;\n"
    "            #pragma unroll\n"
    "            for (int c = 0; c < CD; c++) acc[r][c] = 0;\n"
    "        }\n"
    "        const int kend = CAUSAL && q0 + BQ < TK ? q0 + BQ : TK;   /* row i sees keys j <= i */\n"
    "        for (int k0 = 0; k0 < kend; k0 += BK) {\n"
    "            __syncthreads();   /* the last tile's readers are done */\n"
    "            for (int e = tid; e < BK * HD; e += TR * 8)\n"
    "                Ks[e / HD][e % HD] = k0 + e / HD < TK ? NNC_LD(k[(bh / H * TK + k0 + e / HD) * LDK + bh % H * HD + e % HD]) : (real)0;\n"
    "            for (int e = tid; e < BK * VD; e += TR * 8)\n"
    "                Vs[e / VD][e % VD] = k0 + e / VD < TK ? NNC_LD(v[(bh / H * TK + k0 + e / VD) * LDV + bh % H * VD + e % VD]) : (real)0;\n"
    "            __syncthreads();\n"
    "            real s[RQ][CK];\n"
    "            #pragma unroll\n"
    "            for (int r = 0; r < RQ; r++)\n"
    "                #pragma unroll\n"
    "                for (int c = 0; c < CK; c++) s[r][c] = 0;\n"
    "            for (int d = 0; d < HD; d++) {\n"
    "                real a[RQ], b[CK];\n"
    "                #pragma unroll\n"
    "                for (int r = 0; r < RQ; r++) a[r] = Qs[ty + TR * r][d];\n"
    "                #pragma unroll\n"
    "                for (int c = 0; c < CK; c++) b[c] = Ks[tx + 8 * c][d];\n"
    "                #pragma unroll\n"
    "                for (int r = 0; r < RQ; r++)\n"
    "                    #pragma unroll\n"
    "                    for (int c = 0; c < CK; c++) s[r][c] += a[r] * b[c];\n"
    "            }\n"
    "            #pragma unroll\n"
    "            for (int r = 0; r < RQ; r++) {   /* the row's 8 lanes share its maximum and sum */\n"
    "                const int row = q0 + ty + TR * r;\n"
    "                real mt = m[r], ls = 0;\n"
    "                #pragma unroll\n"
    "                for (int c = 0; c < CK; c++) {\n"
    "                    const int col = k0 + tx + 8 * c;\n"
    "                    s[r][c] = col < TK && !(CAUSAL && col > row) ? s[r][c] * scale : -(real)NNC_INF;\n"
    "                    if (s[r][c] > mt) mt = s[r][c];\n"
    "                }\n"
    "                for (int o = 4; o > 0; o >>= 1) {\n"
    "                    const real u = __shfl_xor_sync(0xffffffffu, mt, o);\n"
    "                    if (u > mt) mt = u;\n"
    "                }\n"
    "                const real alpha = mt == m[r] ? (real)1 : EXP(m[r] - mt);\n"
    "                #pragma unroll\n"
    "                for (int c = 0; c < CK; c++) {\n"
    "                    const real e = EXP(s[r][c] - mt);\n"
    "                    ls += e;\n"
    "                    const int col = k0 + tx + 8 * c;\n"
    "                    Ps[ty + TR * r][tx + 8 * c] = NNC_RW(DROP && p > 0 && col < TK ?\n"
    "                        e * nnc_dropout_keep(seed, st, (unsigned long long)((bh * TQ + row) * TK + col), p) : e);\n"
    "                }\n"
    "                for (int o = 4; o > 0; o >>= 1) ls += __shfl_xor_sync(0xffffffffu, ls, o);\n"
    "                l[r] = l[r] * alpha + ls;\n"
    "                m[r] = mt;\n"
    "                #pragma unroll\n"
    "                for (int c = 0; c < CD; c++) acc[r][c] *= alpha;\n"
    "            }\n"
    "            __syncthreads();   /* the weights are in Ps */\n"
    "            for (int j = 0; j < BK; j++) {\n"
    "                real b[CD];\n"
    "                #pragma unroll\n"
    "                for (int c = 0; c < CD; c++) b[c] = tx + 8 * c < VD ? Vs[j][tx + 8 * c] : (real)0;\n"
    "                #pragma unroll\n"
    "                for (int r = 0; r < RQ; r++) {\n"
    "                    const real a = Ps[ty + TR * r][j];\n"
    "                    #pragma unroll\n"
    "                    for (int c = 0; c < CD; c++) acc[r][c] += a * b[c];\n"
    "                }\n"
    "            }\n"
    "        }\n"
    "        #pragma unroll\n"
    "        for (int r = 0; r < RQ; r++) {\n"
    "            const int row = q0 + ty + TR * r;\n"
    "            if (row >= TQ) continue;\n"
    "            #pragma unroll\n"
    "            for (int c = 0; c < CD; c++)\n"
    "                if (y && tx + 8 * c < VD) y[(bh / H * TQ + row) * LDO + bh % H * VD + tx + 8 * c] = NNC_ST(acc[r][c] / l[r]);\n"
    "            if (lse && tx == 0) lse[(bh / H * TQ + row) * H + bh % H] = m[r] + LOG(l[r]);\n"
    "        }\n"
    "    }\n";

/* The backward's two kinds of blocks share the tiles: Qs/Os the queries' q and dy, Ks/Vs the
 * keys' k and v, Ps a weight or dS tile with the block's own rows first. */
static const char cuda_bwd_text[] =
    "    __shared__ real Qs[T2][HD + 1], Os[T2][VD + 1], Ks[T2][HD + 1], Vs[T2][VD + 1], Ps[T2][T2 + 1], Ls[T2], Ds[T2];\n"
    "    const int tid = threadIdx.x, tx = tid & 7, ty = tid >> 3;\n"
    "    const int64_t nkt = (TK + T2 - 1) / T2, nqt = (TQ + T2 - 1) / T2;\n"
    "    const int64_t nkv = dk || dv ? BH * nkt : 0, nall = nkv + (dq ? BH * nqt : 0);\n"
    "    for (int64_t blk = blockIdx.x; blk < nall; blk += gridDim.x) {\n"
    "        const bool kv = blk < nkv;   /* a key tile's dk and dv, or a query tile's dq */\n"
    "        const int64_t bh = kv ? blk / nkt : (blk - nkv) / nqt;\n"
    "        const int own = (int)(kv ? blk % nkt : (blk - nkv) % nqt) * T2;\n"
    "        __syncthreads();   /* the last block's readers are done with the tiles */\n"
    "        if (kv) {\n"
    "            const int k0 = own;\n"
    "            for (int e = tid; e < T2 * HD; e += TR * 8)\n"
    "                Ks[e / HD][e % HD] = k0 + e / HD < TK ? NNC_LD(k[(bh / H * TK + k0 + e / HD) * LDK + bh % H * HD + e % HD]) : (real)0;\n"
    "            for (int e = tid; e < T2 * VD; e += TR * 8)\n"
    "                Vs[e / VD][e % VD] = k0 + e / VD < TK ? NNC_LD(v[(bh / H * TK + k0 + e / VD) * LDV + bh % H * VD + e % VD]) : (real)0;\n"
    "            real dka[RR][CD], dva[RR][CV];\n"
    "            #pragma unroll\n"
    "            for (int r = 0; r < RR; r++) {\n"
    "                #pragma unroll\n"
    "                for (int c = 0; c < CD; c++) dka[r][c] = 0;\n"
    "                #pragma unroll\n"
    "                for (int c = 0; c < CV; c++) dva[r][c] = 0;\n"
    "            }\n"
    "            /* causal: a query before k0 sees none of these keys */\n"
    "            for (int q0 = CAUSAL ? k0 / T2 * T2 : 0; q0 < TQ; q0 += T2) {\n"
    "                __syncthreads();   /* the last query tile's readers are done */\n"
    "                for (int e = tid; e < T2 * HD; e += TR * 8)\n"
    "                    Qs[e / HD][e % HD] = q0 + e / HD < TQ ? NNC_LD(q[(bh / H * TQ + q0 + e / HD) * LDQ + bh % H * HD + e % HD]) : (real)0;\n"
    "                for (int e = tid; e < T2 * VD; e += TR * 8)\n"
    "                    Os[e / VD][e % VD] = q0 + e / VD < TQ ? NNC_LD(dy[(bh / H * TQ + q0 + e / VD) * LDO + bh % H * VD + e % VD]) : (real)0;\n"
    "                for (int e = tid; e < T2; e += TR * 8) {\n"
    "                    Ls[e] = q0 + e < TQ ? lse[(bh / H * TQ + q0 + e) * H + bh % H] : (real)0;\n"
    "                    Ds[e] = q0 + e < TQ ? delta[(bh / H * TQ + q0 + e) * H + bh % H] : (real)0;\n"
    "                }\n"
    "                __syncthreads();\n"
    "                real s[RR][CC], dp[RR][CC];   /* key rows by query columns */\n"
    "                #pragma unroll\n"
    "                for (int r = 0; r < RR; r++)\n"
    "                    #pragma unroll\n"
    "                    for (int c = 0; c < CC; c++) s[r][c] = dp[r][c] = 0;\n"
    "                for (int d = 0; d < HD; d++)\n"
    "                    #pragma unroll\n"
    "                    for (int r = 0; r < RR; r++)\n"
    "                        #pragma unroll\n"
    "                        for (int c = 0; c < CC; c++) s[r][c] += Ks[ty + TR * r][d] * Qs[tx + 8 * c][d];\n"
    "                for (int d = 0; d < VD; d++)\n"
    "                    #pragma unroll\n"
    "                    for (int r = 0; r < RR; r++)\n"
    "                        #pragma unroll\n"
    "                        for (int c = 0; c < CC; c++) dp[r][c] += Vs[ty + TR * r][d] * Os[tx + 8 * c][d];\n"
    "                #pragma unroll\n"
    "                for (int r = 0; r < RR; r++)\n"
    "                    #pragma unroll\n"
    "                    for (int c = 0; c < CC; c++) {\n"
    "                        const int key = k0 + ty + TR * r, qr = q0 + tx + 8 * c;\n"
    "                        const bool in = key < TK && qr < TQ && !(CAUSAL && key > qr);\n"
    "                        const real pv = in ? EXP(s[r][c] * scale - Ls[tx + 8 * c]) : (real)0;\n"
    "                        const real mk = DROP && p > 0 && in ?\n"
    "                            nnc_dropout_keep(seed, st, (unsigned long long)((bh * TQ + qr) * TK + key), p) : (real)1;\n"
    "                        Ps[ty + TR * r][tx + 8 * c] = NNC_RW(pv * mk);\n"
    "                        dp[r][c] = NNC_RW(pv * (dp[r][c] * mk - Ds[tx + 8 * c]) * scale);   /* dS */\n"
    "                    }\n"
    "                __syncthreads();   /* dv += (P M)^T dy */\n"
    "                for (int j = 0; j < T2; j++)\n"
    "                    #pragma unroll\n"
    "                    for (int r = 0; r < RR; r++)\n"
    "                        #pragma unroll\n"
    "                        for (int c = 0; c < CV; c++)\n"
    "                            if (tx + 8 * c < VD) dva[r][c] += Ps[ty + TR * r][j] * Os[j][tx + 8 * c];\n"
    "                __syncthreads();\n"
    "                #pragma unroll\n"
    "                for (int r = 0; r < RR; r++)\n"
    "                    #pragma unroll\n"
    "                    for (int c = 0; c < CC; c++) Ps[ty + TR * r][tx + 8 * c] = dp[r][c];\n"
    "                __syncthreads();   /* dk += dS^T q */\n"
    "                for (int j = 0; j < T2; j++)\n"
    "                    #pragma unroll\n"
    "                    for (int r = 0; r < RR; r++)\n"
    "                        #pragma unroll\n"
    "                        for (int c = 0; c < CD; c++)\n"
    "                            if (tx + 8 * c < HD) dka[r][c] += Ps[ty + TR * r][j] * Qs[j][tx + 8 * c];\n"
    "            }\n"
    "            #pragma unroll\n"
    "            for (int r = 0; r < RR; r++) {\n"
    "                const int key = k0 + ty + TR * r;\n"
    "                if (key >= TK) continue;\n"
    "                #pragma unroll\n"
    "                for (int c = 0; c < CD; c++)\n"
    "                    if (dk && tx + 8 * c < HD) dk[(bh / H * TK + key) * LDK + bh % H * HD + tx + 8 * c] = NNC_GS(dka[r][c]);\n"
    "                #pragma unroll\n"
    "                for (int c = 0; c < CV; c++)\n"
    "                    if (dv && tx + 8 * c < VD) dv[(bh / H * TK + key) * LDV + bh % H * VD + tx + 8 * c] = NNC_GS(dva[r][c]);\n"
    "            }\n"
    "        } else {\n"
    "            const int q0 = own;\n"
    "            for (int e = tid; e < T2 * HD; e += TR * 8)\n"
    "                Qs[e / HD][e % HD] = q0 + e / HD < TQ ? NNC_LD(q[(bh / H * TQ + q0 + e / HD) * LDQ + bh % H * HD + e % HD]) : (real)0;\n"
    "            for (int e = tid; e < T2 * VD; e += TR * 8)\n"
    "                Os[e / VD][e % VD] = q0 + e / VD < TQ ? NNC_LD(dy[(bh / H * TQ + q0 + e / VD) * LDO + bh % H * VD + e % VD]) : (real)0;\n"
    "            for (int e = tid; e < T2; e += TR * 8) {\n"
    "                Ls[e] = q0 + e < TQ ? lse[(bh / H * TQ + q0 + e) * H + bh % H] : (real)0;\n"
    "                Ds[e] = q0 + e < TQ ? delta[(bh / H * TQ + q0 + e) * H + bh % H] : (real)0;\n"
    "            }\n"
    "            real dqa[RR][CD];\n"
    "            #pragma unroll\n"
    "            for (int r = 0; r < RR; r++)\n"
    "                #pragma unroll\n"
    "                for (int c = 0; c < CD; c++) dqa[r][c] = 0;\n"
    "            const int kend = CAUSAL && q0 + T2 < TK ? q0 + T2 : TK;\n"
    "            for (int k0 = 0; k0 < kend; k0 += T2) {\n"
    "                __syncthreads();   /* the last key tile's readers are done */\n"
    "                for (int e = tid; e < T2 * HD; e += TR * 8)\n"
    "                    Ks[e / HD][e % HD] = k0 + e / HD < TK ? NNC_LD(k[(bh / H * TK + k0 + e / HD) * LDK + bh % H * HD + e % HD]) : (real)0;\n"
    "                for (int e = tid; e < T2 * VD; e += TR * 8)\n"
    "                    Vs[e / VD][e % VD] = k0 + e / VD < TK ? NNC_LD(v[(bh / H * TK + k0 + e / VD) * LDV + bh % H * VD + e % VD]) : (real)0;\n"
    "                __syncthreads();\n"
    "                real s[RR][CC], dp[RR][CC];   /* query rows by key columns */\n"
    "                #pragma unroll\n"
    "                for (int r = 0; r < RR; r++)\n"
    "                    #pragma unroll\n"
    "                    for (int c = 0; c < CC; c++) s[r][c] = dp[r][c] = 0;\n"
    "                for (int d = 0; d < HD; d++)\n"
    "                    #pragma unroll\n"
    "                    for (int r = 0; r < RR; r++)\n"
    "                        #pragma unroll\n"
    "                        for (int c = 0; c < CC; c++) s[r][c] += Qs[ty + TR * r][d] * Ks[tx + 8 * c][d];\n"
    "                for (int d = 0; d < VD; d++)\n"
    "                    #pragma unroll\n"
    "                    for (int r = 0; r < RR; r++)\n"
    "                        #pragma unroll\n"
    "                        for (int c = 0; c < CC; c++) dp[r][c] += Os[ty + TR * r][d] * Vs[tx + 8 * c][d];\n"
    "                #pragma unroll\n"
    "                for (int r = 0; r < RR; r++)\n"
    "                    #pragma unroll\n"
    "                    for (int c = 0; c < CC; c++) {\n"
    "                        const int qr = q0 + ty + TR * r, key = k0 + tx + 8 * c;\n"
    "                        const bool in = key < TK && qr < TQ && !(CAUSAL && key > qr);\n"
    "                        const real pv = in ? EXP(s[r][c] * scale - Ls[ty + TR * r]) : (real)0;\n"
    "                        const real mk = DROP && p > 0 && in ?\n"
    "                            nnc_dropout_keep(seed, st, (unsigned long long)((bh * TQ + qr) * TK + key), p) : (real)1;\n"
    "                        Ps[ty + TR * r][tx + 8 * c] = NNC_RW(pv * (dp[r][c] * mk - Ds[ty + TR * r]) * scale);   /* dS */\n"
    "                    }\n"
    "                __syncthreads();   /* dq += dS k */\n"
    "                for (int j = 0; j < T2; j++)\n"
    "                    #pragma unroll\n"
    "                    for (int r = 0; r < RR; r++)\n"
    "                        #pragma unroll\n"
    "                        for (int c = 0; c < CD; c++)\n"
    "                            if (tx + 8 * c < HD) dqa[r][c] += Ps[ty + TR * r][j] * Ks[j][tx + 8 * c];\n"
    "            }\n"
    "            #pragma unroll\n"
    "            for (int r = 0; r < RR; r++) {\n"
    "                const int qr = q0 + ty + TR * r;\n"
    "                if (qr >= TQ) continue;\n"
    "                #pragma unroll\n"
    "                for (int c = 0; c < CD; c++)\n"
    "                    if (tx + 8 * c < HD) dq[(bh / H * TQ + qr) * LDQ + bh % H * HD + tx + 8 * c] = NNC_GS(dqa[r][c]);\n"
    "            }\n"
    "        }\n"
    "    }\n";

/* The forward on tensor cores (bf16 storage, attention_mma): a warp per 16 query rows of the
 * block's BQ = 64, mma.sync m16n8k16 for both products.  s = q k^T takes q's and k's bf16 as
 * they are (their products are exact in f32); P V takes the weights rounded to bf16 (nnc_mma_pack,
 * as every target rounds them: NNC_RW), so the numerics are the CUDA-core kernel's and the CPU's
 * but for the order of the sums.  A lane holds rows g and g + 8 of its
 * warp's 16 (g = lane / 4), columns 2 t and 2 t + 1 of each 8 (t = lane % 4): the fragments of
 * PTX's m16n8k16 (nnc_mma_bf16), so a row's maximum and sum take two shuffles and the weights in
 * s's registers are already P's A fragments.  q's fragments come from global memory once a
 * block; k's and v's tiles of BK keys are rows of bf16 padded by 8 (16 bytes) in two shared
 * buffers: the next tile's copies (cp.async, nnc_mma_tile) fly while the warps work on this one.
 * ldmatrix reads the B fragments, k's as they lie and v's transposed (nnc_ldsm4, nnc_ldsm4t: a
 * matrix's 8 rows of 16 bytes in 32 banks). */
static const char cuda_fwd_mma_text[] =
    "    __shared__ __attribute__((aligned(16))) unsigned Ks[2][BK][KD / 2 + 4], Vs[2][BK][KV / 2 + 4];\n"
    "    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t4 = lane & 3, r0 = (tid >> 5) * 16 + g;\n"
    "    const int lm = lane >> 3, lr = lane & 7;   /* this lane gives ldmatrix row lr of matrix lm */\n"
    "    const int64_t nqt = (TQ + BQ - 1) / BQ;\n"
    "    for (int64_t blk = blockIdx.x; blk < BH * nqt; blk += gridDim.x) {\n"
    "        /* causal: the last query tiles (the most keys) of every head first, so the last wave is short */\n"
    "        const int64_t bh = CAUSAL ? blk % BH : blk / nqt;\n"
    "        const int q0 = (int)(CAUSAL ? nqt - 1 - blk / BH : blk % nqt) * BQ;\n"
    "        const unsigned short *kb = k + bh / H * TK * LDK + bh % H * HD, *vb = v + bh / H * TK * LDV + bh % H * VD;\n"
    "        const int kend = CAUSAL && q0 + BQ < TK ? q0 + BQ : TK;   /* row i sees keys j <= i */\n"
    "        if (kend > 0) {   /* the first tiles of k and v fly while q's fragments load */\n"
    "            nnc_mma_tile(&Ks[0][0][0], KD / 2 + 4, kb, LDK, TK, HD, BK, KD, VEC, tid);\n"
    "            nnc_mma_tile(&Vs[0][0][0], KV / 2 + 4, vb, LDV, TK, VD, BK, KV, VEC, tid);\n"
    "        }\n"
    "        nnc_cp_commit();\n"
    "        unsigned qa[KD / 16][4];   /* the warp's 16 rows of q: A fragments */\n"
    "        const unsigned short *qb = q + (bh / H * TQ + q0) * LDQ + bh % H * HD;\n"
    "        #pragma unroll\n"
    "        for (int h = 0; h < 2; h++)\n"
    "            #pragma unroll\n"
    "            for (int kk = 0; kk < KD / 16; kk++)\n"
    "                #pragma unroll\n"
    "                for (int e = 0; e < 2; e++) {\n"
    "                    const int r = r0 + 8 * h, c = kk * 16 + 2 * t4 + 8 * e;\n"
    "                    qa[kk][h + 2 * e] = nnc_mma_word(nnc_mma_at(qb, LDQ, r, c, TQ - q0, HD), nnc_mma_at(qb, LDQ, r, c + 1, TQ - q0, HD));\n"
    "                }\n"
    "        float m[2] = {-(float)NNC_INF, -(float)NNC_INF}, l[2] = {0, 0}, acc[NO][4];\n"
    "        #pragma unroll\n"
    "        for (int n = 0; n < NO; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0;\n"
    "        for (int k0 = 0, b = 0; k0 < kend; k0 += BK, b ^= 1) {\n"
    "            if (k0 + BK < kend) {   /* the next tiles into the other buffers */\n"
    "                nnc_mma_tile(&Ks[b ^ 1][0][0], KD / 2 + 4, kb + (int64_t)(k0 + BK) * LDK, LDK, TK - k0 - BK, HD, BK, KD, VEC, tid);\n"
    "                nnc_mma_tile(&Vs[b ^ 1][0][0], KV / 2 + 4, vb + (int64_t)(k0 + BK) * LDV, LDV, TK - k0 - BK, VD, BK, KV, VEC, tid);\n"
    "            }\n"
    "            nnc_cp_commit();\n"
    "            nnc_cp_wait(1);   /* this thread's copies of this tile have landed */\n"
    "            __syncthreads();   /* and every thread's */\n"
    "            float s[BK / 8][4];\n"
    "            #pragma unroll\n"
    "            for (int n = 0; n < BK / 8; n++) {\n"
    "                s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;\n"
    "                #pragma unroll\n"
    "                for (int kk = 0; kk < KD / 16; kk += 2) {   /* b0, b1 of k-steps kk and kk + 1 */\n"
    "                    unsigned bb[4];\n"
    "                    nnc_ldsm4(bb, &Ks[b][n * 8 + lr][(kk + (kk + 1 < KD / 16 ? lm >> 1 : 0)) * 8 + (lm & 1) * 4]);\n"
    "                    nnc_mma_bf16(s[n], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], bb[0], bb[1]);\n"
    "                    if (kk + 1 < KD / 16)\n"
    "                        nnc_mma_bf16(s[n], qa[kk + 1][0], qa[kk + 1][1], qa[kk + 1][2], qa[kk + 1][3], bb[2], bb[3]);\n"
    "                }\n"
    "            }\n"
    "            /* a tile of keys every row of the block sees (inside TK, below the diagonal) skips the masks */\n"
    "            const bool full = k0 + BK <= TK && (!CAUSAL || k0 + BK - 1 <= q0);\n"
    "            #pragma unroll\n"
    "            for (int h = 0; h < 2; h++) {   /* rows r0 and r0 + 8: a row's 4 lanes share its maximum and sum */\n"
    "                const int row = q0 + r0 + 8 * h;\n"
    "                float mt = m[h], ls = 0;\n"
    "                #pragma unroll\n"
    "                for (int n = 0; n < BK / 8; n++)\n"
    "                    #pragma unroll\n"
    "                    for (int e = 0; e < 2; e++) {\n"
    "                        const int col = k0 + n * 8 + 2 * t4 + e;\n"
    "                        const float x = full || (col < TK && !(CAUSAL && col > row)) ? s[n][2 * h + e] * scale : -(float)NNC_INF;\n"
    "                        s[n][2 * h + e] = x;\n"
    "                        if (x > mt) mt = x;\n"
    "                    }\n"
    "                for (int o = 1; o < 4; o <<= 1) {\n"
    "                    const float u = __shfl_xor_sync(0xffffffffu, mt, o);\n"
    "                    if (u > mt) mt = u;\n"
    "                }\n"
    "                const float alpha = mt == m[h] ? 1.0f : EXP(m[h] - mt), base = mt == -(float)NNC_INF ? 0.0f : mt;\n"
    "                #pragma unroll\n"
    "                for (int n = 0; n < BK / 8; n++)\n"
    "                    #pragma unroll\n"
    "                    for (int e = 0; e < 2; e++) {\n"
    "                        const int col = k0 + n * 8 + 2 * t4 + e;\n"
    "                        const float x = EXP(s[n][2 * h + e] - base);\n"
    "                        ls += x;\n"
    "                        s[n][2 * h + e] = DROP && p > 0 && col < TK ?\n"
    "                            x * nnc_dropout_keep(seed, st, (unsigned long long)((bh * TQ + row) * TK + col), p) : x;\n"
    "                    }\n"
    "                for (int o = 1; o < 4; o <<= 1) ls += __shfl_xor_sync(0xffffffffu, ls, o);\n"
    "                l[h] = l[h] * alpha + ls;\n"
    "                m[h] = mt;\n"
    "                #pragma unroll\n"
    "                for (int n = 0; n < NO; n++) acc[n][2 * h] *= alpha, acc[n][2 * h + 1] *= alpha;\n"
    "            }\n"
    "            #pragma unroll\n"
    "            for (int kk = 0; kk < BK / 16; kk++) {   /* acc += P v: s's n-tiles 2kk, 2kk + 1 are P's k-step kk */\n"
    "                unsigned a[4];   /* P's A fragment: the weights rounded to bf16 (NNC_RW's) */\n"
    "                a[0] = nnc_mma_pack(s[2 * kk][0], s[2 * kk][1]);\n"
    "                a[1] = nnc_mma_pack(s[2 * kk][2], s[2 * kk][3]);\n"
    "                a[2] = nnc_mma_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);\n"
    "                a[3] = nnc_mma_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);\n"
    "                #pragma unroll\n"
    "                for (int n = 0; n < NO; n += 2) {   /* v's keys kk * 16.. by columns 8 n.. and 8 (n + 1)..: transposed */\n"
    "                    unsigned bb[4];\n"
    "                    nnc_ldsm4t(bb, &Vs[b][kk * 16 + (lm & 1) * 8 + lr][(n + (lm >> 1)) * 4]);\n"
    "                    #pragma unroll\n"
    "                    nnc_mma_bf16(acc[n], a[0], a[1], a[2], a[3], bb[0], bb[1]);\n"
    "                    if (n + 1 < NO) nnc_mma_bf16(acc[n + 1], a[0], a[1], a[2], a[3], bb[2], bb[3]);\n"
    "                }\n"
    "            }\n"
    "            __syncthreads();   /* this tile's readers are done before the next copies land in its buffers */\n"
    "        }\n"
    "        #pragma unroll\n"
    "        for (int h = 0; h < 2; h++) {\n"
    "            const int row = q0 + r0 + 8 * h;\n"
    "            if (row >= TQ) continue;\n"
    "            #pragma unroll\n"
    "            for (int n = 0; n < NO; n++)\n"
    "                #pragma unroll\n"
    "                for (int e = 0; e < 2; e++) {\n"
    "                    const int c = n * 8 + 2 * t4 + e;\n"
    "                    if (y && c < VD) y[(bh / H * TQ + row) * LDO + bh % H * VD + c] = NNC_ST(acc[n][2 * h + e] / l[h]);\n"
    "                }\n"
    "            if (lse && t4 == 0) lse[(bh / H * TQ + row) * H + bh % H] = m[h] + LOG(l[h]);\n"
    "        }\n"
    "    }\n";

/* The backward on tensor cores (bf16 storage): the CUDA-core kernel's two kinds of blocks, each
 * four warps of 16 rows of its own 64 (keys, or queries) walking tiles of IT of the other.  A
 * warp's own rows of k and v (or q and dy) are A fragments in registers, read once; the other
 * side's tiles are rows of bf16 in two shared buffers (R1: q or k, R2: dy or v), the next one's
 * copies (cp.async) flying while the warps work on this one.  ldmatrix reads their B fragments
 * as the rows lie for the products that sum over the head, and transposed for those that sum
 * over the tile.  Key blocks: s^T = k q^T and dP^T = v dy^T, then P^T and dS^T in the
 * accumulators, dv += (P M)^T dy and dk += dS^T q with those as A fragments rounded to bf16
 * (nnc_mma_pack).  Query blocks: s = q k^T, dP = dy v^T, dq += dS k. */
static const char cuda_bwd_mma_text[] =
    "    __shared__ __attribute__((aligned(16))) unsigned R1[2][IT][KD / 2 + 4], R2[2][IT][KV / 2 + 4];\n"
    "    __shared__ float Ls[2][IT], Ds[2][IT];\n"
    "    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t4 = lane & 3, r0 = (tid >> 5) * 16 + g;\n"
    "    const int lm = lane >> 3, lr = lane & 7;   /* this lane gives ldmatrix row lr of matrix lm */\n"
    "    const int64_t nkt = (TK + 63) / 64, nqt = (TQ + 63) / 64;\n"
    "    const int64_t nkv = dk || dv ? BH * nkt : 0, nall = nkv + (dq ? BH * nqt : 0);\n"
    "    /* causal, with as many tiles of keys as of queries: the blocks by decreasing work (a key\n"
    "     * tile walks more query tiles the earlier it is, a query tile more key tiles the later), the\n"
    "     * two kinds in turn, so the longest start first and the last wave is short */\n"
    "    const bool lpt = CAUSAL && nkv > 0 && nall == 2 * nkv && nkt == nqt;\n"
    "    for (int64_t blk = blockIdx.x; blk < nall; blk += gridDim.x) {\n"
    "        const bool kv = lpt ? !(blk & 1) : blk < nkv;   /* a key tile's dk and dv, or a query tile's dq */\n"
    "        const int64_t u = lpt ? blk >> 1 : kv ? blk : blk - nkv;   /* among its kind */\n"
    "        const int64_t bh = lpt ? u % BH : kv ? u / nkt : u / nqt;\n"
    "        const int own = (int)(lpt ? (kv ? u / BH : nqt - 1 - u / BH) : kv ? u % nkt : u % nqt) * 64;\n"
    "        /* the block's own rows (k and v, or q and dy) and the other side's (q and dy, or k and v) */\n"
    "        const unsigned short *oa = kv ? k : q, *ob = kv ? v : dy, *xa = kv ? q : k, *xb = kv ? dy : v;\n"
    "        const int64_t lda = kv ? LDK : LDQ, ldb = kv ? LDV : LDO, ldxa = kv ? LDQ : LDK, ldxb = kv ? LDO : LDV;\n"
    "        const int nown = kv ? TK : TQ, noth = kv ? TQ : TK;\n"
    "        oa += (bh / H * nown + own) * lda + bh % H * HD, ob += (bh / H * nown + own) * ldb + bh % H * VD;\n"
    "        xa += bh / H * noth * ldxa + bh % H * HD, xb += bh / H * noth * ldxb + bh % H * VD;\n"
    "        const real *lh = lse + bh / H * TQ * H + bh % H, *dh = delta + bh / H * TQ * H + bh % H;\n"
    "        /* causal: a key block's queries from its first key on; a query block's keys up to its last query */\n"
    "        const int t0 = kv && CAUSAL ? own / IT * IT : 0, tend = !kv && CAUSAL && own + 64 < TK ? own + 64 : noth;\n"
    "        /* the other side's rows [o, o + IT) into buffer b: q and dy (with lse and delta) or k and v */\n"
    "#define NNC_BWD_TILE(o, b)                                                                          \\\n"
    "        do {                                                                                        \\\n"
    "            nnc_mma_tile(&R1[b][0][0], KD / 2 + 4, xa + (int64_t)(o) * ldxa, ldxa, noth - (o), HD, IT, KD, VEC, tid); \\\n"
    "            nnc_mma_tile(&R2[b][0][0], KV / 2 + 4, xb + (int64_t)(o) * ldxb, ldxb, noth - (o), VD, IT, KV, VEC, tid); \\\n"
    "            if (kv)                                                                                 \\\n"
    "                for (int e = tid; e < IT; e += 128) {                                               \\\n"
    "                    const bool in = (o) + e < TQ;                                                   \\\n"
    "                    nnc_cp4(&Ls[b][e], lh + (in ? (int64_t)((o) + e) * H : 0), in);                 \\\n"
    "                    nnc_cp4(&Ds[b][e], dh + (in ? (int64_t)((o) + e) * H : 0), in);                 \\\n"
    "                }                                                                                   \\\n"
    "        } while (0)\n"
    "        if (t0 < tend) NNC_BWD_TILE(t0, 0);   /* the first tile flies while the own rows load */\n"
    "        nnc_cp_commit();\n"
    "        unsigned fa[KD / 16][4], fb[KV / 16][4];   /* the warp's own rows: A fragments */\n"
    "        #pragma unroll\n"
    "        for (int h = 0; h < 2; h++) {\n"
    "            const int r = r0 + 8 * h, rows = nown - own;\n"
    "            #pragma unroll\n"
    "            for (int kk = 0; kk < KD / 16; kk++)\n"
    "                #pragma unroll\n"
    "                for (int e = 0; e < 2; e++) {\n"
    "                    const int c = kk * 16 + 2 * t4 + 8 * e;\n"
    "                    fa[kk][h + 2 * e] = nnc_mma_word(nnc_mma_at(oa, lda, r, c, rows, HD), nnc_mma_at(oa, lda, r, c + 1, rows, HD));\n"
    "                }\n"
    "            #pragma unroll\n"
    "            for (int kk = 0; kk < KV / 16; kk++)\n"
    "                #pragma unroll\n"
    "                for (int e = 0; e < 2; e++) {\n"
    "                    const int c = kk * 16 + 2 * t4 + 8 * e;\n"
    "                    fb[kk][h + 2 * e] = nnc_mma_word(nnc_mma_at(ob, ldb, r, c, rows, VD), nnc_mma_at(ob, ldb, r, c + 1, rows, VD));\n"
    "                }\n"
    "        }\n"
    "        float Lr[2] = {0, 0}, Dr[2] = {0, 0};   /* a query block's rows' lse and delta */\n"
    "        #pragma unroll\n"
    "        for (int h = 0; h < 2; h++)\n"
    "            if (!kv && own + r0 + 8 * h < TQ) {\n"
    "                Lr[h] = lh[(int64_t)(own + r0 + 8 * h) * H];\n"
    "                Dr[h] = dh[(int64_t)(own + r0 + 8 * h) * H];\n"
    "            }\n"
    "        float g1[KD / 8][4], g2[NO][4];   /* dk and dv, or dq (g1) */\n"
    "        #pragma unroll\n"
    "        for (int n = 0; n < KD / 8; n++) g1[n][0] = g1[n][1] = g1[n][2] = g1[n][3] = 0;\n"
    "        #pragma unroll\n"
    "        for (int n = 0; n < NO; n++) g2[n][0] = g2[n][1] = g2[n][2] = g2[n][3] = 0;\n"
    "        for (int o0 = t0, b = 0; o0 < tend; o0 += IT, b ^= 1) {\n"
    "            if (o0 + IT < tend) NNC_BWD_TILE(o0 + IT, b ^ 1);   /* the next tile into the other buffers */\n"
    "            nnc_cp_commit();\n"
    "            nnc_cp_wait(1);   /* this thread's copies of this tile have landed */\n"
    "            __syncthreads();   /* and every thread's */\n"
    "            float s[IT / 8][4], dp[IT / 8][4];   /* own rows by the tile's: s (or s^T) and dP (or dP^T) */\n"
    "            #pragma unroll\n"
    "            for (int n = 0; n < IT / 8; n++) {\n"
    "                s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;\n"
    "                dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0;\n"
    "                #pragma unroll\n"
    "                for (int kk = 0; kk < KD / 16; kk += 2) {   /* b0, b1 of k-steps kk and kk + 1 */\n"
    "                    unsigned bb[4];\n"
    "                    nnc_ldsm4(bb, &R1[b][n * 8 + lr][(kk + (kk + 1 < KD / 16 ? lm >> 1 : 0)) * 8 + (lm & 1) * 4]);\n"
    "                    nnc_mma_bf16(s[n], fa[kk][0], fa[kk][1], fa[kk][2], fa[kk][3], bb[0], bb[1]);\n"
    "                    if (kk + 1 < KD / 16)\n"
    "                        nnc_mma_bf16(s[n], fa[kk + 1][0], fa[kk + 1][1], fa[kk + 1][2], fa[kk + 1][3], bb[2], bb[3]);\n"
    "                }\n"
    "                #pragma unroll\n"
    "                for (int kk = 0; kk < KV / 16; kk += 2) {\n"
    "                    unsigned bb[4];\n"
    "                    nnc_ldsm4(bb, &R2[b][n * 8 + lr][(kk + (kk + 1 < KV / 16 ? lm >> 1 : 0)) * 8 + (lm & 1) * 4]);\n"
    "                    nnc_mma_bf16(dp[n], fb[kk][0], fb[kk][1], fb[kk][2], fb[kk][3], bb[0], bb[1]);\n"
    "                    if (kk + 1 < KV / 16)\n"
    "                        nnc_mma_bf16(dp[n], fb[kk + 1][0], fb[kk + 1][1], fb[kk + 1][2], fb[kk + 1][3], bb[2], bb[3]);\n"
    "                }\n"
    "            }\n"
    "            /* a tile whose every pair is seen (inside both lengths, below the diagonal) skips the masks */\n"
    "            const bool full = (kv ? own + 64 <= TK && o0 + IT <= TQ : own + 64 <= TQ && o0 + IT <= TK) &&\n"
    "                              (!CAUSAL || (kv ? o0 >= own + 63 : o0 + IT - 1 <= own));\n"
    "            /* s becomes P M (key blocks), dp becomes dS; with NNC_SPLIT, the code twice, a full\n"
    "             * tile's without the masks' tests (the branch is the block's) */\n"
    "            const auto weights = [&](const bool masked) {\n"
    "                #pragma unroll\n"
    "                for (int n = 0; n < IT / 8; n++)\n"
    "                    #pragma unroll\n"
    "                    for (int e = 0; e < 4; e++) {\n"
    "                        const int mine = own + r0 + 8 * (e >> 1), its = n * 8 + 2 * t4 + (e & 1);\n"
    "                        const int key = kv ? mine : o0 + its, qr = kv ? o0 + its : mine;\n"
    "                        const bool in = !masked || (key < TK && qr < TQ && !(CAUSAL && key > qr));\n"
    "                        const float L = kv ? Ls[b][its] : Lr[e >> 1], Di = kv ? Ds[b][its] : Dr[e >> 1];\n"
    "                        const float pv = in ? EXP(s[n][e] * scale - L) : 0.0f;\n"
    "                        const float mk = DROP && p > 0 && in ? nnc_dropout_keep(seed, st, (unsigned long long)((bh * TQ + qr) * TK + key), p) : 1.0f;\n"
    "                        s[n][e] = pv * mk;\n"
    "                        dp[n][e] = pv * (dp[n][e] * mk - Di) * scale;\n"
    "                    }\n"
    "            };\n"
    "            if (NNC_SPLIT && full) weights(false);   /* a second copy, with no tests */\n"
    "            else weights(!full);\n"
    "            #pragma unroll\n"
    "            for (int kk = 0; kk < IT / 16; kk++) {   /* sums over the tile's rows: A fragments from the accumulators */\n"
    "                unsigned a[4];   /* dS's (then P's) A fragment, rounded to bf16 */\n"
    "                a[0] = nnc_mma_pack(dp[2 * kk][0], dp[2 * kk][1]);\n"
    "                a[1] = nnc_mma_pack(dp[2 * kk][2], dp[2 * kk][3]);\n"
    "                a[2] = nnc_mma_pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);\n"
    "                a[3] = nnc_mma_pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);\n"
    "                #pragma unroll\n"
    "                for (int n = 0; n < KD / 8; n += 2) {   /* dk += dS^T q, or dq += dS k: the tile's rows kk * 16.., transposed */\n"
    "                    unsigned bb[4];\n"
    "                    nnc_ldsm4t(bb, &R1[b][kk * 16 + (lm & 1) * 8 + lr][(n + (lm >> 1)) * 4]);\n"
    "                    nnc_mma_bf16(g1[n], a[0], a[1], a[2], a[3], bb[0], bb[1]);\n"
    "                    nnc_mma_bf16(g1[n + 1], a[0], a[1], a[2], a[3], bb[2], bb[3]);\n"
    "                }\n"
    "                if (!kv) continue;\n"
    "                a[0] = nnc_mma_pack(s[2 * kk][0], s[2 * kk][1]);\n"
    "                a[1] = nnc_mma_pack(s[2 * kk][2], s[2 * kk][3]);\n"
    "                a[2] = nnc_mma_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);\n"
    "                a[3] = nnc_mma_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);\n"
    "                #pragma unroll\n"
    "                for (int n = 0; n < NO; n += 2) {   /* dv += (P M)^T dy */\n"
    "                    unsigned bb[4];\n"
    "                    nnc_ldsm4t(bb, &R2[b][kk * 16 + (lm & 1) * 8 + lr][(n + (lm >> 1)) * 4]);\n"
    "                    nnc_mma_bf16(g2[n], a[0], a[1], a[2], a[3], bb[0], bb[1]);\n"
    "                    if (n + 1 < NO) nnc_mma_bf16(g2[n + 1], a[0], a[1], a[2], a[3], bb[2], bb[3]);\n"
    "                }\n"
    "            }\n"
    "            __syncthreads();   /* this tile's readers are done before the next copies land in its buffers */\n"
    "        }\n"
    "#undef NNC_BWD_TILE\n"
    "        #pragma unroll\n"
    "        for (int h = 0; h < 2; h++) {\n"
    "            const int row = own + r0 + 8 * h;\n"
    "            if (row >= nown) continue;\n"
    "            nnc_gt *o1 = kv ? dk : dq;\n"
    "            const int64_t at1 = (bh / H * nown + row) * (kv ? LDK : LDQ) + bh % H * HD;\n"
    "            #pragma unroll\n"
    "            for (int n = 0; n < KD / 8; n++)\n"
    "                #pragma unroll\n"
    "                for (int e = 0; e < 2; e++)\n"
    "                    if (o1 && n * 8 + 2 * t4 + e < HD) o1[at1 + n * 8 + 2 * t4 + e] = NNC_GS(g1[n][2 * h + e]);\n"
    "            if (!kv || !dv) continue;\n"
    "            #pragma unroll\n"
    "            for (int n = 0; n < NO; n++)\n"
    "                #pragma unroll\n"
    "                for (int e = 0; e < 2; e++)\n"
    "                    if (n * 8 + 2 * t4 + e < VD) dv[(bh / H * TK + row) * LDV + bh % H * VD + n * 8 + 2 * t4 + e] = NNC_GS(g2[n][2 * h + e]);\n"
    "        }\n"
    "    }\n";

/* "    const TYPE *NAME = PTR;" or a null pointer where the launch has no such node. */
static void cuda_ptr_decl(const Kernel *k, const char *cnst, int x, const char *type, const char *name, int64_t col) {
    if (x < 0) {
        str_printf(k->s, "    %s%s *%s = (%s *)0;\n", cnst, type, name, type);
        return;
    }
    char decl[96];
    snprintf(decl, sizeof decl, "%s%s *%s", cnst, kernel_type(k, x), name);
    kernel_ptr_line(k, decl, x);
    if (col)
        str_printf(k->s, "    %s += %lld;   /* its first column in the projection's rows */\n", name, (long long)col);
}

/* What a CUDA kernel's code depends on: launches alike share one device function (the layers of
 * a transformer: NVRTC compiles it once); pointers, heads, scale, dropout are its arguments. */
typedef struct {
    bool backward, causal;
    int st; /* storage[] index */
    AttnTiles t;
    int64_t d, dv, tq, tk;
    int64_t h, ld[4]; /* AttnGeom's heads and row strides (1 and the head sizes: [..., T, D]) */
    bool vec; /* the tensor-core kernels' 16-byte loads: every row's offset of q, k, v and dy a
               * multiple of 8 elements (strides, head sizes, columns; buffers start on 256 bytes) */
    bool gh; /* the backward's gradients stored in the storage type (attention_grads_half) */
    bool drop; /* dropout's code compiled in (DROP): the model asks for it (the launch's p may
                * still be 0: evaluation) */
    bool split; /* the backward's weights' code twice, full tiles without masks (NNC_ATTN_SPLIT=1,
                 * to compare on a GPU: ptxas spills 88 bytes of loads where it spilled 36) */
} AttnConfig;

static AttnConfig config_of(const Graph *g, const Launch *L, bool f64) {
    const AttnGeom a = attention_geom(g, L);
    const DType st = g->nodes[a.q].dtype;
    AttnConfig c = {.backward = a.backward,
                    .causal = a.causal,
                    .st = storage_of(st),
                    .t = attention_tiles(&a, st, f64),
                    .d = a.d,
                    .dv = a.dv_dim,
                    .tq = a.tq,
                    .tk = a.tk,
                    .h = a.heads,
                    .ld = {a.ld[0], a.ld[1], a.ld[2], a.ld[3]}};
    c.gh = attention_grads_half(g, &a);
    c.drop = a.dropout > 0;
    const char *sp = getenv("NNC_ATTN_SPLIT");
    c.split = c.t.mma && c.backward && sp && !strcmp(sp, "1");
    c.vec = c.t.mma && a.d % 8 == 0 && a.dv_dim % 8 == 0;
    for (int i = 0; i < 4; i++) c.vec &= a.ld[i] % 8 == 0 && (i == 3 || a.col[i] % 8 == 0);
    return c;
}

static void config_name(const AttnConfig *c, char *buf, size_t n) {
    snprintf(buf, n, "nnc_attn_%s_%s%s_%dx%d_d%lld_v%lld_q%lld_k%lld%s", c->backward ? "bwd" : "fwd",
             storage[c->st].suffix, c->t.mma ? "_mma" : "", c->t.bq, c->t.bk, (long long)c->d, (long long)c->dv,
             (long long)c->tq, (long long)c->tk, c->causal ? "_causal" : "");
    if (c->vec) strncat(buf, "_v8", n - strlen(buf) - 1);
    if (c->gh) strncat(buf, "_gh", n - strlen(buf) - 1);
    if (c->drop) strncat(buf, "_drop", n - strlen(buf) - 1);
    if (c->split) strncat(buf, "_split", n - strlen(buf) - 1);
    if (c->h > 1) { /* heads in a projection's rows (passes/attn_layout.c) */
        size_t at = strlen(buf);
        snprintf(buf + at, n - at, "_h%lld_%lld_%lld_%lld_%lld", (long long)c->h, (long long)c->ld[0],
                 (long long)c->ld[1], (long long)c->ld[2], (long long)c->ld[3]);
    }
}

static void cuda_device_fn(Str *s, const AttnConfig *c) {
    char name[128];
    config_name(c, name, sizeof name);
    const char *T = storage[c->st].type;
    str_printf(s, "#define NNC_LD(x) %s\n#define NNC_ST(x) %s\n#define NNC_RW(x) %s\n#define NNC_SPLIT %d\n",
               storage[c->st].load, storage[c->st].store, storage[c->st].weight, c->split);
    const char *G = c->gh ? T : "real"; /* the gradients' type, NNC_GS their store */
    if (c->backward)
        str_printf(
            s,
            "#define NNC_GS(x) %s\n"
            "__device__ __noinline__ void %s(const %s *q, const %s *k, const %s *v, const %s *dy, const real *lse,\n"
            "        const real *delta, %s *dq, %s *dk, %s *dv, int64_t BH, real scale, double p,\n"
            "        unsigned long long seed, unsigned long long st) {\n"
            "    typedef %s nnc_gt;\n"
            "    enum { T2 = %d, TR = %d, RR = T2 / TR, CC = T2 / 8, ",
            c->gh ? "NNC_ST(x)" : "(x)", name, T, T, T, T, G, G, G, G, c->t.bq, c->t.tr);
    else
        str_printf(
            s,
            "__device__ __noinline__ void %s(const %s *q, const %s *k, const %s *v, %s *y, real *lse, int64_t BH,\n"
            "        real scale, double p, unsigned long long seed, unsigned long long st) {\n"
            "    enum { BQ = %d, BK = %d, TR = %d, RQ = BQ / TR, CK = BK / 8, ",
            name, T, T, T, T, c->t.bq, c->t.bk, c->t.tr);
    str_printf(s,
               "HD = %lld, VD = %lld, CD = (%s + 7) / 8, CV = (VD + 7) / 8, KD = (HD + 15) / 16 * 16, NO = CV,\n"
               "           TQ = %lld, TK = %lld, CAUSAL = %d, DROP = %d,\n",
               (long long)c->d, (long long)c->dv, c->backward ? "HD" : "VD", (long long)c->tq, (long long)c->tk,
               c->causal, c->drop);
    /* head bh's row i of q at q + (bh / H TQ + i) LDQ + bh % H HD, k, v, y and dy alike, lse and
     * delta at (bh / H TQ + i) H + bh % H (AttnGeom) */
    str_printf(s, "           H = %lld, LDQ = %lld, LDK = %lld, LDV = %lld, LDO = %lld };\n", (long long)c->h,
               (long long)c->ld[0], (long long)c->ld[1], (long long)c->ld[2], (long long)c->ld[3]);
    if (c->t.mma) str_printf(s, "    enum { IT = %d, KV = (VD + 15) / 16 * 16, VEC = %d };\n", c->t.it, c->vec);
    str_puts(s,
             c->t.mma ? (c->backward ? cuda_bwd_mma_text : cuda_fwd_mma_text)
                      : (c->backward ? cuda_bwd_text : cuda_fwd_text));
    str_puts(s, "}\n#undef NNC_LD\n#undef NNC_ST\n#undef NNC_RW\n#undef NNC_SPLIT\n");
    if (c->backward) str_puts(s, "#undef NNC_GS\n");
}

/* The tensor-core kernels' helpers: two bf16 in a word (the lower index in the low half); a
 * tile of rows into shared memory (cp.async's 16-byte copies where every row's offset allows);
 * an f32 pair rounded to nearest even into a word of two bf16 (nnc_mma_pack: NNC_RW's rounding,
 * nnc_f32_bf16's, in one instruction on a GPU; a NaN stays a NaN, its payload aside); and the
 * sm_80 warp instructions: D += A B on m16n8k16 fragments, ldmatrix, cp.async (the CUDA emulator
 * has stand-ins). */
static const char cuda_mma_text[] =
    "__device__ __forceinline__ unsigned nnc_mma_word(unsigned short lo, unsigned short hi) {\n"
    "    return lo | (unsigned)hi << 16;\n"
    "}\n"
    "/* element (r, c) of rows of stride ld, 0 past rows x cols */\n"
    "__device__ __forceinline__ unsigned short nnc_mma_at(const unsigned short *x, int64_t ld, int r, int c, int rows, int cols) {\n"
    "    return r < rows && c < cols ? x[(int64_t)r * ld + c] : (unsigned short)0;\n"
    "}\n"
    "/* 8 bf16 of row r from column c (a multiple of 8) as 4 words, one by one; zeros past rows, cols */\n"
    "__device__ __forceinline__ void nnc_mma_ld8(const unsigned short *x, int64_t ld, int r, int c, int rows, int cols,\n"
    "                                            unsigned *w) {\n"
    "    #pragma unroll\n"
    "    for (int i = 0; i < 4; i++)\n"
    "        w[i] = nnc_mma_word(nnc_mma_at(x, ld, r, c + 2 * i, rows, cols), nnc_mma_at(x, ld, r, c + 2 * i + 1, rows, cols));\n"
    "}\n"
    "#ifdef NNC_EMU_KERNEL_H\n"
    "#define nnc_mma_pack(a, b) nnc_mma_word(nnc_f32_bf16(a), nnc_f32_bf16(b))\n"
    "#define nnc_mma_bf16 nnc_emu_mma_bf16\n"
    "#define nnc_ldsm4(r, row) nnc_emu_ldsm4(r, row, 0)\n"
    "#define nnc_ldsm4t(r, row) nnc_emu_ldsm4(r, row, 1)\n"
    "#define nnc_cp16(dst, src, ok) nnc_emu_cp_async(dst, src, 16, ok)\n"
    "#define nnc_cp4(dst, src, ok) nnc_emu_cp_async(dst, src, 4, ok)\n"
    "#define nnc_cp_commit nnc_emu_cp_commit\n"
    "#define nnc_cp_wait nnc_emu_cp_wait\n"
    "#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800\n"
    "#error \"bf16 attention runs on tensor cores from sm_80 on; NNC_ATTN_MMA=0 compiles its CUDA-core kernels\"\n"
    "#else\n"
    "__device__ __forceinline__ unsigned nnc_mma_pack(float a, float b) {   /* a in the low half */\n"
    "    unsigned w;\n"
    "    asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(w) : \"f\"(b), \"f\"(a));\n"
    "    return w;\n"
    "}\n"
    "__device__ __forceinline__ void nnc_mma_bf16(float *c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,\n"
    "                                             unsigned b1) {\n"
    "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, \"\n"
    "                 \"{%0, %1, %2, %3};\"\n"
    "                 : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "                 : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"r\"(b0), \"r\"(b1));\n"
    "}\n"
    "__device__ __forceinline__ unsigned nnc_smem(const void *p) {   /* a shared variable's address in .shared */\n"
    "    unsigned a;\n"
    "    asm(\"{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\" : \"=r\"(a) : \"l\"(p));\n"
    "    return a;\n"
    "}\n"
    "/* four 8x8 matrices of bf16: this lane gives row lane % 8 of matrix lane / 8 (16 bytes) and gets\n"
    " * in r[i] matrix i's row lane / 4, columns 2 (lane % 4) and the next (nnc_ldsm4), or its column\n"
    " * lane / 4, rows 2 (lane % 4) and the next (nnc_ldsm4t): B fragments */\n"
    "__device__ __forceinline__ void nnc_ldsm4(unsigned *r, const unsigned *row) {\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\"\n"
    "                 : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(nnc_smem(row)));\n"
    "}\n"
    "__device__ __forceinline__ void nnc_ldsm4t(unsigned *r, const unsigned *row) {\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\"\n"
    "                 : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(nnc_smem(row)));\n"
    "}\n"
    "/* 16 (or 4) bytes from global to shared memory, in flight until nnc_cp_wait; zeros where !ok */\n"
    "__device__ __forceinline__ void nnc_cp16(void *dst, const void *src, bool ok) {\n"
    "    asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\" :: \"r\"(nnc_smem(dst)), \"l\"(src), \"r\"(ok ? 16 : 0));\n"
    "}\n"
    "__device__ __forceinline__ void nnc_cp4(void *dst, const void *src, bool ok) {\n"
    "    asm volatile(\"cp.async.ca.shared.global [%0], [%1], 4, %2;\" :: \"r\"(nnc_smem(dst)), \"l\"(src), \"r\"(ok ? 4 : 0));\n"
    "}\n"
    "__device__ __forceinline__ void nnc_cp_commit(void) { asm volatile(\"cp.async.commit_group;\" ::: \"memory\"); }\n"
    "/* this thread's copies have landed but those of the n groups committed last */\n"
    "#define nnc_cp_wait(n) asm volatile(\"cp.async.wait_group %0;\" :: \"n\"(n) : \"memory\")\n"
    "#endif\n"
    "/* rows [0, nr) by columns [0, nc) (a multiple of 16) of x (stride ld; zeros past rows, cols) as\n"
    " * words of two bf16 into S (sw words a row): 16-byte copies in flight where vec (every row's\n"
    " * offset a multiple of 8 elements), else loads and stores; a block of 128 threads shares it */\n"
    "__device__ __forceinline__ void nnc_mma_tile(unsigned *S, int sw, const unsigned short *x, int64_t ld, int rows,\n"
    "                                             int cols, int nr, int nc, bool vec, int tid) {\n"
    "    for (int e = tid; e < nr * nc / 8; e += 128) {\n"
    "        const int r = e / (nc / 8), c = e % (nc / 8) * 8;\n"
    "        if (vec) {\n"
    "            const bool ok = r < rows && c < cols;\n"
    "            nnc_cp16(S + r * sw + c / 2, ok ? x + (int64_t)r * ld + c : x, ok);\n"
    "        } else {\n"
    "            unsigned w[4];\n"
    "            nnc_mma_ld8(x, ld, r, c, rows, cols, w);\n"
    "            #pragma unroll\n"
    "            for (int i = 0; i < 4; i++) S[r * sw + c / 2 + i] = w[i];\n"
    "        }\n"
    "    }\n"
    "}\n";

/* One device function per configuration the program's launches have, in launch order. */
static void cuda_device_fns(Str *s, const Program *p, bool f64) {
    AttnConfig *seen = NULL;
    int n = 0;
    bool mma = false;
    for (int e = 0; e < ENTRY_COUNT; e++)
        for (int i = 0; i < p->entry[e].nlaunch; i++) {
            const Launch *L = &p->entry[e].launches[i];
            if (L->kind != L_ATTENTION) continue;
            AttnConfig c = config_of(p->g, L, f64);
            bool dup = false;
            for (int j = 0; j < n && !dup; j++) {
                const AttnConfig *o = &seen[j];
                dup = o->backward == c.backward && o->causal == c.causal && o->st == c.st && o->t.bq == c.t.bq &&
                    o->t.bk == c.t.bk && o->t.tr == c.t.tr && o->t.mma == c.t.mma && o->t.it == c.t.it &&
                    o->vec == c.vec && o->gh == c.gh && o->drop == c.drop && o->split == c.split && o->d == c.d &&
                    o->dv == c.dv && o->tq == c.tq && o->tk == c.tk && o->h == c.h && !memcmp(o->ld, c.ld, sizeof c.ld);
            }
            if (dup) continue;
            if (c.t.mma && !mma) str_puts(s, cuda_mma_text);
            mma |= c.t.mma;
            seen = xrealloc(seen, (size_t)(n + 1) * sizeof *seen);
            seen[n++] = c;
            cuda_device_fn(s, &c);
        }
    free(seen);
}

void attention_render_cuda(const Kernel *k, const Launch *L) {
    const AttnGeom a = attention_geom(k->g, L);
    const AttnConfig c = config_of(k->g, L, k->o->f64);
    bool drop = a.dropout > 0 && k->e->kind != ENTRY_EVAL && (a.y >= 0 || a.backward);
    char sc[RENDER_NUM_LEN], pp[RENDER_NUM_LEN], name[128];
    const char *type = storage[c.st].type;
    cuda_ptr_decl(k, "const ", a.q, type, "q", a.col[0]);
    cuda_ptr_decl(k, "const ", a.k, type, "k", a.col[1]);
    cuda_ptr_decl(k, "const ", a.v, type, "v", a.col[2]);
    if (a.backward) {
        cuda_ptr_decl(k, "const ", a.dy, type, "dy", 0);
        cuda_ptr_decl(k, "const ", a.lse, "real", "lse", 0);
        cuda_ptr_decl(k, "const ", a.delta, "real", "delta", 0);
        const char *G = attention_grads_half(k->g, &a) ? type : "real";
        cuda_ptr_decl(k, "", a.dq, G, "dq", a.col[0]);
        cuda_ptr_decl(k, "", a.dk, G, "dk", a.col[1]);
        cuda_ptr_decl(k, "", a.dv, G, "dv", a.col[2]);
    } else {
        cuda_ptr_decl(k, "", a.y, type, "y", 0);
        cuda_ptr_decl(k, "", a.lse_out, "real", "lse", 0);
    }
    config_name(&c, name, sizeof name);
    str_printf(k->s, "    %s(q, k, v, %s", name, a.backward ? "dy, lse, delta, dq, dk, dv, " : "y, lse, ");
    render_heads(k->s, &a);
    str_printf(k->s, ", (real)%s, %s, (unsigned long long)stepp[1], ", render_num(sc, a.scale),
               render_num(pp, drop ? a.dropout : 0));
    render_stream(k, &a);
    str_puts(k->s, ");\n");
}
