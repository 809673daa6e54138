/* attention.h - fused scaled dot-product attention (codegen/attention.c) for both targets.
 *
 * An L_ATTENTION launch computes torch's softmax(q k^T scale + causal mask) @ v (dropout on the
 * weights in training entries) without storing the [..., Tq, Tk] weights, and its gradients
 * from the row logsumexp the forward saved, as FlashAttention-2 does.  The CPU calls a routine
 * of the prelude (a blocked loop, on the model's thread pool by heads and query tiles); CUDA
 * calls a device function per configuration (a block per head and query tile, the tiles of K
 * and V in shared memory; the backward's blocks take a key tile or a query tile each, so nothing
 * is summed by atomics). */
#ifndef NNC_ATTENTION_H
#define NNC_ATTENTION_H
#include "kernel.h"

/* What one attention launch reads and writes, and its sizes. */
typedef struct {
    int q, k, v; /* the operands */
    int dy, lse, delta; /* a backward launch's other operands, else -1 */
    int y, lse_out; /* a forward launch's results (the output, the row logsumexp), or -1 */
    int dq, dk, dv; /* a backward launch's results, or -1 */
    bool backward;
    int64_t lead; /* the leading axes' extent at batch 1 (dim_size(d, 1): B*12 counts 12) */
    bool batched; /* ... which is then multiplied by the run-time batch */
    int64_t tq, tk, d, dv_dim; /* query and key lengths, q's and v's head sizes */
    /* where the heads lie (Attr.attn.heads): H heads a batch item in rows of ld (q, k, v, and
     * y as dy), q, k and v from their tensors' columns col; H = 1 and ld a row's size for
     * [..., T, D] tensors of their own; a packed attention's dq, dk and dv are its one gradient
     * node, at their columns */
    int64_t heads, ld[4], col[3];
    double scale, dropout;
    bool causal;
    int key; /* attention_key: the node that keys the dropout mask */
} AttnGeom;

AttnGeom attention_geom(const Graph *g, const Launch *L);
/* The heads (the leading axes' extent) at batch B. */
static inline int64_t attention_heads(const AttnGeom *a, int64_t B) { return a->lead * (a->batched ? B : 1); }
bool program_has_attention(const Program *p);
/* Whether a backward launch stores its gradients in q's half type (mixed precision, the casts
 * after them folded in: passes/fold_rows.c), rounded as they are stored; else as real. */
bool attention_grads_half(const Graph *g, const AttnGeom *a);
/* The routines (C) or the shared device code (CUDA) the launches call. */
void attention_prelude(Str *s, const Program *p, bool cuda, bool f64);
void attention_render_c(const Kernel *k, const Launch *L); /* KernelDialect.attention, C */
void attention_render_cuda(const Kernel *k, const Launch *L); /* ... CUDA: the kernel's body */
/* A CUDA launch's threads per block (its __launch_bounds__) and blocks at batch B. */
unsigned attention_cuda_threads(const Graph *g, const Launch *L, bool f64);
unsigned attention_cuda_min_blocks(const Graph *g, const Launch *L, bool f64); /* NNC_ATTN_MINB */
int64_t attention_cuda_blocks(const Graph *g, const Launch *L, int64_t B, bool f64);
#endif
