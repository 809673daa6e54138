/* elab_nn.c - torch.nn's builtins: the layers of torch.nn.functional that take more than one op
 * (convolution, pooling, dropout, batch and layer normalization, embedding), and the
 * parameter initializers of torch.nn.init. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "elab_impl.h"

/* ---- convolution and pooling (NCHW, as torch.nn.functional) -------------------------------- */

/* An int argument or a pair of them ("stride = 2", "padding = (1, 2)"): out[0] height, out[1]
 * width; at least `lo`. */
static bool pair_arg(Elab *E, const char *fn, const char *name, Args *a, int i, int dflt, int lo, int32_t out[2]) {
    out[0] = out[1] = dflt;
    if (i < 0) return true;
    const Value *v = &a->v[i];
    int n = v->k == V_TUPLE ? v->nitems : 1;
    if (n != 1 && n != 2) {
        diag_error(E->d, a->loc[i], "%s(): %s is a number or a pair (height, width), got %d values", fn, name, n);
        return false;
    }
    for (int k = 0; k < 2; k++) {
        const Value *x = v->k == V_TUPLE ? &v->items[n == 1 ? 0 : k] : v;
        if (x->k != V_NUM || x->num != floor(x->num) || x->num < lo || x->num > 1 << 20) {
            if (x->k != V_NUM)
                diag_error(E->d, a->loc[i], "%s(): %s must be an integer, got a %s", fn, name, kind_name(x->k));
            else diag_error(E->d, a->loc[i], "%s(): %s must be an integer >= %d, got %g", fn, name, lo, x->num);
            return false;
        }
        out[k] = (int32_t)x->num;
    }
    return true;
}

/* An NCHW input: rank 4, f32, and only the batch axis (the first) may be symbolic. */
static bool nchw_arg(Elab *E, const char *fn, int x, SrcLoc loc) {
    if (!need_f32(E, x, fn, loc)) return false;
    Shape s = E->g->nodes[x].shape;
    if (s.rank != 4 || dim_is_batch(s.d[1]) || dim_is_batch(s.d[2]) || dim_is_batch(s.d[3])) {
        diag_error(E->d, loc, "%s(): expected an NCHW tensor [batch, channels, height, width], got %s%s", fn,
                   tstr(E, x), s.rank == 2 ? " (reshape it first: reshape(x, B, 1, 28, 28))" : "");
        return false;
    }
    return true;
}

/* The output size of the window over x; an empty output is an error, as in torch. */
static bool window_out(Elab *E, const char *fn, int x, const Attr *at, int64_t kh, int64_t kw, Shape *out, SrcLoc loc) {
    Shape s = E->g->nodes[x].shape;
    int64_t oh = spatial_out_dim(s.d[2], (int)kh, at->win.s[0], at->win.p[0], at->win.d[0]);
    int64_t ow = spatial_out_dim(s.d[3], (int)kw, at->win.s[1], at->win.p[1], at->win.d[1]);
    if (oh < 1 || ow < 1) {
        diag_error(E->d, loc,
                   "%s(): the %lldx%lld window (dilation %d,%d) does not fit in the %lldx%lld input padded by %d,%d: "
                   "the output would be empty",
                   fn, (long long)kh, (long long)kw, at->win.d[0], at->win.d[1], (long long)s.d[2], (long long)s.d[3],
                   at->win.p[0], at->win.p[1]);
        return false;
    }
    *out = s;
    out->d[2] = oh;
    out->d[3] = ow;
    return true;
}

/* conv2d(x, weight, bias, stride = 1, padding = 0, dilation = 1, groups = 1), as
 * torch.nn.functional.conv2d: x [N, C, H, W], weight [OC, C / groups, KH, KW], bias [OC];
 * padding may also be "valid" (0) or "same" (stride 1, an output as large as the input). */
Value read_conv2d(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "weight", "bias", "stride", "padding", "dilation", "groups"};
    int ix[7];
    if (!bind_args(E, fn, a, names, 7, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), w = tensor_arg(E, a, ix[1]);
    int b = ix[2] >= 0 ? tensor_arg(E, a, ix[2]) : -2;
    if (x < 0 || w < 0 || b == -1 || !nchw_arg(E, fn, x, loc) || !need_f32(E, w, fn, loc)) return verror;
    Attr at = {0};
    bool ok =
        pair_arg(E, fn, "stride", a, ix[3], 1, 1, at.win.s) && pair_arg(E, fn, "dilation", a, ix[5], 1, 1, at.win.d);
    const char *same = ix[4] >= 0 && a->v[ix[4]].k == V_STR ? a->v[ix[4]].str : NULL;
    if (same && strcmp(same, "same") && strcmp(same, "valid")) {
        diag_error(E->d, a->loc[ix[4]], "%s(): padding is a number, a pair, \"same\" or \"valid\", got \"%s\"", fn,
                   same);
        return verror;
    }
    ok = ok && (same || pair_arg(E, fn, "padding", a, ix[4], 0, 0, at.win.p));
    double groups = 1;
    if (ok && ix[6] >= 0) {
        groups = num_arg(E, a, ix[6], 1, &ok);
        if (ok && (groups != floor(groups) || groups < 1 || groups > 1 << 20)) {
            diag_error(E->d, a->loc[ix[6]], "%s(): groups must be a positive integer, got %g", fn, groups);
            ok = false;
        }
    }
    if (!ok) return verror;
    at.win.groups = (int32_t)groups;
    Shape xs = E->g->nodes[x].shape, ws = E->g->nodes[w].shape;
    if (ws.rank != 4 || shape_batch_axis(ws) >= 0 || ws.d[0] % at.win.groups || xs.d[1] != ws.d[1] * at.win.groups) {
        diag_error(E->d, loc,
                   "%s(): weight %s does not fit input %s: expected [out_channels, %lld, kh, kw] with out_channels "
                   "a multiple of groups = %d",
                   fn, tstr(E, w), tstr(E, x), (long long)(xs.d[1] / at.win.groups), at.win.groups);
        return verror;
    }
    if (xs.d[1] % at.win.groups) {
        diag_error(E->d, loc, "%s(): the input's %lld channels do not split into groups = %d", fn, (long long)xs.d[1],
                   at.win.groups);
        return verror;
    }
    if (same && !strcmp(same, "same")) {
        for (int k = 0; k < 2; k++) {
            int64_t span = (int64_t)at.win.d[k] * (ws.d[2 + k] - 1);
            if (at.win.s[k] != 1) {
                diag_error(E->d, a->loc[ix[4]], "%s(): padding=\"same\" needs stride 1, as in torch", fn);
                return verror;
            }
            if (span % 2) {
                diag_error(E->d, a->loc[ix[4]],
                           "%s(): padding=\"same\" with an even kernel needs more padding on one side "
                           "than the other, which nnc does not do; pad explicitly",
                           fn);
                return verror;
            }
            at.win.p[k] = (int32_t)(span / 2);
        }
    }
    Shape ys;
    if (!window_out(E, fn, x, &at, ws.d[2], ws.d[3], &ys, loc)) return verror;
    ys.d[1] = ws.d[0];
    int in[2] = {x, w};
    int y = graph_add(E->g, op, 2, in, ys, DT_F32, loc);
    E->g->nodes[y].attr = at;
    if (b < 0) return vtensor(y);
    Shape bs = E->g->nodes[b].shape;
    if (bs.rank != 1 || bs.d[0] != ws.d[0] || !need_f32(E, b, fn, loc)) {
        diag_error(E->d, loc, "%s(): bias %s should be [%lld], one per output channel", fn, tstr(E, b),
                   (long long)ws.d[0]);
        return verror;
    }
    int64_t bd[3] = {ws.d[0], 1, 1};
    return vtensor(graph_add2(E->g, OP_ADD, y, reshape_node(E, b, shape_of(3, bd), loc), loc));
}

/* max_pool2d(x, kernel_size, stride = kernel_size, padding = 0, dilation = 1) and
 * avg_pool2d(x, kernel_size, stride = kernel_size, padding = 0), as torch (floor mode; the
 * average counts the zero padding, torch's count_include_pad default). */
Value read_pool2d(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "kernel_size", "stride", "padding", "dilation"};
    int ix[5] = {-1, -1, -1, -1, -1}; /* avg_pool2d has no dilation: ix[4] stays -1 */
    if (!bind_args(E, fn, a, names, op == OP_MAX_POOL2D ? 5 : 4, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !nchw_arg(E, fn, x, loc)) return verror;
    Attr at = {0};
    if (!pair_arg(E, fn, "kernel_size", a, ix[1], 1, 1, at.win.k) ||
        !pair_arg(E, fn, "padding", a, ix[3], 0, 0, at.win.p) || !pair_arg(E, fn, "dilation", a, ix[4], 1, 1, at.win.d))
        return verror;
    if (ix[2] < 0) memcpy(at.win.s, at.win.k, sizeof at.win.s);
    else if (!pair_arg(E, fn, "stride", a, ix[2], 1, 1, at.win.s)) return verror;
    for (int k = 0; k < 2; k++)
        if (at.win.p[k] * 2 > at.win.k[k]) {
            diag_error(E->d, arg_loc(a, ix[3], loc),
                       "%s(): padding %d is more than half the kernel size %d, as torch refuses", fn, at.win.p[k],
                       at.win.k[k]);
            return verror;
        }
    at.win.groups = 1;
    Shape ys;
    if (!window_out(E, fn, x, &at, at.win.k[0], at.win.k[1], &ys, loc)) return verror;
    int y = graph_add(E->g, op, 1, &x, ys, DT_F32, loc);
    E->g->nodes[y].attr = at;
    return vtensor(y);
}

/* dropout(x, p = 0.5), as torch.nn.functional.dropout: x times a mask that training entries
 * draw per step and evaluation makes 1 (passes' DROPOUT_MASK). */
Value read_dropout(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "p"};
    int ix[2];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 2, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    double p = num_arg(E, a, ix[1], 0.5, &ok);
    if (x < 0 || !ok || !need_f32(E, x, fn, loc) ||
        !check_range(E, fn, "p", p, 0, false, 1, false, arg_loc(a, ix[1], loc)))
        return verror;
    if (p == 0) return vtensor(x);
    int mask = graph_add(E->g, OP_DROPOUT_MASK, 0, NULL, E->g->nodes[x].shape, DT_F32, loc);
    E->g->nodes[mask].attr.scalars.p[0] = p;
    return vtensor(graph_add2(E->g, OP_MUL, x, mask, loc));
}

/* A normalization layer's weight and bias (when given, and parameters): what the optimizer's
 * no_decay = ["norm"] spares, as minGPT spares every LayerNorm's whatever its name. */
void mark_norm_params(Graph *g, int w, int b) {
    if (w >= 0 && g->nodes[w].op == OP_PARAM) g->nodes[w].layer = PARAM_NORM;
    if (b >= 0 && g->nodes[b].op == OP_PARAM) g->nodes[b].layer = PARAM_NORM;
}

/* ---- scaled dot-product attention ------------------------------------------------------------ */

/* What scaled_dot_product_attention read: its tensors and the attention's attributes. */
typedef struct {
    int q, k, v, mask; /* mask: attn_mask, or -1 */
    Attr at;
} Sdpa;

/* softmax(q k^T scale + mask) @ v as the ops torch's math path uses: the product, the scale, the
 * mask (attn_mask added; a causal one as -inf above the diagonal, as masked_fill(tril(...) == 0,
 * -inf) writes it), softmax, dropout, the product. */
static int sdpa_composed(Elab *E, const Sdpa *A, SrcLoc loc) {
    Graph *g = E->g;
    Shape ks = g->nodes[A->k].shape;
    int64_t t = ks.d[ks.rank - 1];
    ks.d[ks.rank - 1] = ks.d[ks.rank - 2];
    ks.d[ks.rank - 2] = t;
    int kt = graph_add(g, OP_TRANSPOSE, 1, &A->k, ks, g->nodes[A->k].dtype, loc);
    Value sv = matmul(E, vtensor(A->q), vtensor(kt), loc);
    if (sv.k != V_TENSOR) return -1;
    int s = graph_add2(g, OP_MUL, sv.node, graph_const(g, A->at.attn.scale, loc), loc);
    if (A->at.attn.causal) { /* masked_fill(s, triu(ones(Tq, Tk), 1) != 0, -inf): keys j > i hidden */
        Shape qs = g->nodes[A->q].shape;
        int64_t tt[2] = {qs.d[qs.rank - 2], ks.d[ks.rank - 1]};
        int one = graph_const(g, 1, loc);
        int up = graph_add1(g, OP_TRIU, graph_add(g, OP_EXPAND, 1, &one, shape_of(2, tt), DT_F32, loc), loc);
        g->nodes[up].attr.scalars.p[0] = 1;
        int in[3] = {up, graph_const(g, -INFINITY, loc), s};
        s = graph_add(g, OP_SELECT, 3, in, g->nodes[s].shape, DT_F32, loc);
    }
    if (A->mask >= 0) {
        int m = graph_add2(g, OP_ADD, s, A->mask, loc);
        if (m < 0 || !shape_eq(g->nodes[m].shape, g->nodes[s].shape)) {
            diag_error(E->d, loc, "scaled_dot_product_attention(): attn_mask %s does not broadcast to the scores %s",
                       tstr(E, A->mask), tstr(E, s));
            return -1;
        }
        s = m;
    }
    int w = graph_add1(g, OP_SOFTMAX, s, loc);
    if (A->at.attn.dropout > 0) {
        int mask = graph_add(g, OP_DROPOUT_MASK, 0, NULL, g->nodes[w].shape, DT_F32, loc);
        g->nodes[mask].attr.scalars.p[0] = A->at.attn.dropout;
        w = graph_add2(g, OP_MUL, w, mask, loc);
    }
    Value y = matmul(E, vtensor(w), vtensor(A->v), loc);
    return y.k == V_TENSOR ? y.node : -1;
}

/* Why the fused kernel cannot take this call, or NULL. */
static const char *sdpa_unfused_why(Elab *E, const Sdpa *A) {
    Shape q = E->g->nodes[A->q].shape, v = E->g->nodes[A->v].shape;
    if (A->mask >= 0) return "attn_mask is given (the fused kernel's only mask is is_causal)";
    if (q.d[q.rank - 1] > ATTENTION_MAX_HEAD || v.d[v.rank - 1] > ATTENTION_MAX_HEAD)
        return arena_printf(E->a, "head size %lld is above the fused kernel's %d",
                            (long long)(q.d[q.rank - 1] > v.d[v.rank - 1] ? q.d[q.rank - 1] : v.d[v.rank - 1]),
                            ATTENTION_MAX_HEAD);
    return NULL;
}

/* query [..., Tq, D], key [..., Tk, D], value [..., Tk, Dv]: ranks 2 to 4, the same leading axes
 * (the batch axis among them, if any). */
static bool sdpa_shapes(Elab *E, const char *fn, const Sdpa *A, SrcLoc loc) {
    const int x[3] = {A->q, A->k, A->v};
    for (int i = 0; i < 3; i++)
        if (!need_f32(E, x[i], fn, loc)) return false;
    Shape q = E->g->nodes[A->q].shape, k = E->g->nodes[A->k].shape, v = E->g->nodes[A->v].shape;
    int r = q.rank, bq = shape_batch_axis(q);
    bool ok = r >= 2 && k.rank == r && v.rank == r && (bq < 0 || bq < r - 2) && shape_batch_axis(k) == bq &&
        shape_batch_axis(v) == bq;
    for (int d = 0; ok && d < r - 2; d++) ok = k.d[d] == q.d[d] && v.d[d] == q.d[d];
    if (ok && k.d[r - 1] == q.d[r - 1] && v.d[r - 2] == k.d[r - 2]) return true;
    diag_error(E->d, loc,
               "%s(): expected query [..., L, E], key [..., S, E] and value [..., S, Ev] with the same leading axes "
               "(the batch axis among them), got %s, %s and %s",
               fn, tstr(E, A->q), tstr(E, A->k), tstr(E, A->v));
    return false;
}

/* scaled_dot_product_attention(query, key, value, attn_mask, dropout_p = 0, is_causal = false,
 * scale, enable_gqa = false), as torch.nn.functional's, dropout only in training entries (as
 * nnc's dropout): one fused op (OP_SDPA), or the ops it stands for where the fused kernel does
 * not apply (a graph note says which and why). */
Value read_sdpa(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"query",     "key",       "value", "attn_mask",
                                  "dropout_p", "is_causal", "scale", "enable_gqa"};
    int ix[8];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 8, ix, 3, loc)) return verror;
    Sdpa A = {tensor_arg(E, a, ix[0]), tensor_arg(E, a, ix[1]), tensor_arg(E, a, ix[2]), -1, {.attn = {0}}};
    if (A.q < 0 || A.k < 0 || A.v < 0) return verror;
    if (ix[3] >= 0 && ((A.mask = tensor_arg(E, a, ix[3])) < 0 || !need_f32(E, A.mask, fn, a->loc[ix[3]])))
        return verror;
    double p = num_arg(E, a, ix[4], 0, &ok), causal = num_arg(E, a, ix[5], 0, &ok), gqa = num_arg(E, a, ix[7], 0, &ok);
    if (!ok || !sdpa_shapes(E, fn, &A, loc) ||
        !check_range(E, fn, "dropout_p", p, 0, false, 1, false, arg_loc(a, ix[4], loc)))
        return verror;
    Shape qs = E->g->nodes[A.q].shape;
    double scale = num_arg(E, a, ix[6], 1 / sqrt((double)qs.d[qs.rank - 1]), &ok);
    if (!ok || (ix[6] >= 0 && !check_finite(E, fn, "scale", scale, a->loc[ix[6]]))) return verror;
    if (gqa != 0) {
        diag_error(E->d, arg_loc(a, ix[7], loc), "%s(): enable_gqa is not supported: give key and value every head",
                   fn);
        return verror;
    }
    if (causal != 0 && A.mask >= 0) {
        diag_error(E->d, arg_loc(a, ix[5], loc), "%s(): is_causal and attn_mask cannot both be given, as torch refuses",
                   fn);
        return verror;
    }
    A.at.attn.scale = scale;
    A.at.attn.dropout = p;
    A.at.attn.causal = causal != 0;
    A.at.attn.key = -1;
    const char *why = sdpa_unfused_why(E, &A);
    if (why) {
        int y = sdpa_composed(E, &A, loc);
        if (y >= 0) graph_note(E->g, loc, "%s composed of matmul, softmax and matmul: %s", fn, why);
        return y < 0 ? verror : vtensor(y);
    }
    int in[3] = {A.q, A.k, A.v};
    Shape ys = qs;
    ys.d[ys.rank - 1] = E->g->nodes[A.v].shape.d[ys.rank - 1];
    int y = graph_add(E->g, op, 3, in, ys, DT_F32, loc);
    E->g->nodes[y].attr = A.at;
    return vtensor(y);
}

/* batch_norm(x, running_mean, running_var, weight, bias, momentum = 0.1, eps = 1e-5), as
 * torch.nn.functional.batch_norm over axis 1 of [N, C] or [N, C, H, W]: in training entries the
 * batch's statistics normalize x, and the train step moves the running buffers toward them
 * (running_var with the unbiased variance, as torch); in evaluation the running statistics
 * normalize x.  running_mean and running_var are `buffer`s of [C]; weight and bias optional. */
Value read_batch_norm(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "running_mean", "running_var", "weight", "bias", "momentum", "eps"};
    int ix[7];
    bool ok = true;
    if (!bind_args(E, fn, a, names, 7, ix, 3, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), rm = tensor_arg(E, a, ix[1]), rv = tensor_arg(E, a, ix[2]);
    int w = ix[3] >= 0 ? tensor_arg(E, a, ix[3]) : -2, b = ix[4] >= 0 ? tensor_arg(E, a, ix[4]) : -2;
    double mom = num_arg(E, a, ix[5], 0.1, &ok), eps = num_arg(E, a, ix[6], 1e-5, &ok);
    if (x < 0 || rm < 0 || rv < 0 || w == -1 || b == -1 || !ok || !need_f32(E, x, fn, loc)) return verror;
    if (!check_range(E, fn, "momentum", mom, 0, false, 1, false, arg_loc(a, ix[5], loc)) ||
        !check_range(E, fn, "eps", eps, 0, true, INFINITY, false, arg_loc(a, ix[6], loc)))
        return verror;
    Graph *g = E->g;
    Shape xs = g->nodes[x].shape;
    if ((xs.rank != 2 && xs.rank != 4) || dim_is_batch(xs.d[1])) {
        diag_error(E->d, loc, "%s(): expected [N, C] or [N, C, H, W], got %s", fn, tstr(E, x));
        return verror;
    }
    int64_t C = xs.d[1];
    const int stats[4] = {rm, rv, w, b};
    for (int k = 0; k < 4; k++) {
        int t = stats[k];
        if (t < 0) continue;
        const Node *tn = &g->nodes[t];
        if (tn->shape.rank != 1 || tn->shape.d[0] != C || tn->dtype != DT_F32) {
            diag_error(E->d, arg_loc(a, ix[1 + k], loc), "%s(): %s %s should be f32[%lld], one per channel", fn,
                       names[1 + k], tstr(E, t), (long long)C);
            return verror;
        }
        if (k < 2 && (tn->op != OP_PARAM || !tn->frozen)) {
            diag_error(E->d, arg_loc(a, ix[1 + k], loc),
                       "%s(): %s must be a buffer (declared 'buffer %s: f32[%lld] = %s'), "
                       "which the train step updates",
                       fn, names[1 + k], names[1 + k], (long long)C, k ? "ones()" : "zeros()");
            return verror;
        }
    }
    /* statistics over every axis but the channels, kept as [1, C(, 1, 1)] to broadcast */
    int64_t mask = xs.rank == 4 ? 0xd : 0x1;
    bool per_b; /* the reduced elements: per (times B when they include the batch axis) */
    double per = (double)shape_prod(xs, (uint32_t)mask, &per_b);
    Shape ks = {0};
    ks.rank = xs.rank - 1; /* [C] or [C, 1, 1]: aligned on the right against x */
    ks.d[0] = C;
    for (int i = 1; i < ks.rank; i++) ks.d[i] = 1;
    int mean = reduce_node(E, OP_MEAN, x, mask, true, loc);
    int d = graph_add2(g, OP_SUB, x, mean, loc);
    int var = reduce_node(E, OP_MEAN, graph_add2(g, OP_MUL, d, d, loc), mask, true, loc);
    int epsc = graph_const(g, eps, loc);
    int train = graph_add2(g, OP_DIV, d, graph_add1(g, OP_SQRT, graph_add2(g, OP_ADD, var, epsc, loc), loc), loc);
    int rmk = reshape_node(E, rm, ks, loc), rvk = reshape_node(E, rv, ks, loc);
    int centered = graph_add2(g, OP_SUB, x, rmk, loc); /* one node per statement: ids must not
                                                           depend on argument evaluation order */
    int eval = graph_add2(g, OP_DIV, centered, graph_add1(g, OP_SQRT, graph_add2(g, OP_ADD, rvk, epsc, loc), loc), loc);
    int in[2] = {train, eval};
    int y = graph_add(g, OP_MODE, 2, in, xs, DT_F32, loc);
    mark_norm_params(g, w, b);
    if (w >= 0) y = graph_add2(g, OP_MUL, y, reshape_node(E, w, ks, loc), loc);
    if (b >= 0) y = graph_add2(g, OP_ADD, y, reshape_node(E, b, ks, loc), loc);
    /* the running statistics' update, in the train step only: r = (1 - m) r + m s, with the
     * unbiased variance var * n / (n - 1), n the reduced count: var / (1 - 1 / n) */
    Shape cs = shape_of(1, &C);
    int keep = graph_const(g, 1 - mom, loc), mc = graph_const(g, mom, loc);
    int inv_n = graph_const(g, 1 / per, loc);
    g->nodes[inv_n].attr.cnst.batch_power = per_b ? -1 : 0;
    int unbiased = graph_add2(g, OP_DIV, var, graph_add2(g, OP_SUB, graph_const(g, 1, loc), inv_n, loc), loc);
    const int src[2] = {mean, unbiased}, dst[2] = {rm, rv};
    for (int k = 0; k < 2; k++) {
        int s = reshape_node(E, graph_add1(g, OP_DETACH, src[k], loc), cs, loc);
        int old = graph_add2(g, OP_MUL, dst[k], keep, loc);
        int upd = graph_add2(g, OP_ADD, old, graph_add2(g, OP_MUL, s, mc, loc), loc);
        int as[2] = {dst[k], upd};
        int an = graph_add(g, OP_ASSIGN, 2, as, cs, DT_F32, loc);
        g->nodes[an].phase = PH_UPDATE;
    }
    return vtensor(y);
}

Value read_adaptive_avg_pool2d(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "output_size"};
    int ix[2];
    int32_t size[2];
    if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]);
    if (x < 0 || !nchw_arg(E, fn, x, loc) || !pair_arg(E, fn, "output_size", a, ix[1], 1, 1, size)) return verror;
    if (size[0] != 1 || size[1] != 1) {
        diag_error(E->d, a->loc[ix[1]], "%s(): only output_size 1 (global average pooling) is supported", fn);
        return verror;
    }
    return vtensor(reduce_node(E, OP_MEAN, x, 0xc, true, loc));
}

/* layer_norm(x, weight, bias, eps = 1e-5), as torch.nn.functional.layer_norm with
 * normalized_shape = weight's shape: (x - mean) / sqrt(var + eps) * weight + bias over the last
 * weight-rank axes (the last axis without a weight), the variance biased as torch's. */
Value read_layer_norm(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"x", "weight", "bias", "eps"};
    int ix[4], ns;
    bool ok = true;
    if (!take_normalized_shape(E, fn, a, &ns) || !bind_args(E, fn, a, names, 4, ix, 1, loc)) return verror;
    int x = tensor_arg(E, a, ix[0]), w = ix[1] >= 0 ? tensor_arg(E, a, ix[1]) : -2;
    int b = ix[2] >= 0 ? tensor_arg(E, a, ix[2]) : -2;
    double eps = num_arg(E, a, ix[3], 1e-5, &ok);
    if (x < 0 || w == -1 || b == -1 || !ok || !need_f32(E, x, fn, loc)) return verror;
    if (ix[3] >= 0 && !check_range(E, fn, "eps", eps, 0, true, INFINITY, false, a->loc[ix[3]])) return verror;
    Shape s = E->g->nodes[x].shape;
    int k = w >= 0 ? E->g->nodes[w].shape.rank : ns ? ns : 1;
    if (ns && ns != k) {
        diag_error(E->d, loc, "%s(): weight %s is not normalized_shape's", fn, tstr(E, w));
        return verror;
    }
    for (int j = 0; w >= 0 && j < k; j++)
        if (k > s.rank || E->g->nodes[w].shape.d[j] != s.d[s.rank - k + j]) {
            diag_error(E->d, loc, "%s(): weight %s must be the last axes of %s", fn, tstr(E, w), tstr(E, x));
            return verror;
        }
    if (s.rank < k || k < 1 || (b >= 0 && !shape_eq(E->g->nodes[b].shape, E->g->nodes[w >= 0 ? w : x].shape))) {
        diag_error(E->d, loc, "%s(): bias must have weight's shape, and x at least its rank", fn);
        return verror;
    }
    mark_norm_params(E->g, w, b);
    int y;
    if (k == 1) { /* over the last axis: one row-wise op (forward and gradient one pass a row each) */
        y = graph_add1(E->g, OP_LN_NORM, x, loc);
        E->g->nodes[y].attr.scalars.p[0] = eps;
        if (w >= 0) y = graph_add2(E->g, OP_MUL, y, w, loc);
        if (b >= 0) y = graph_add2(E->g, OP_ADD, y, b, loc);
        return vtensor(y);
    }
    int64_t mask = ((int64_t)1 << s.rank) - ((int64_t)1 << (s.rank - k));
    int mean = reduce_node(E, OP_MEAN, x, mask, true, loc);
    int d = graph_add2(E->g, OP_SUB, x, mean, loc);
    int var = reduce_node(E, OP_MEAN, graph_add2(E->g, OP_MUL, d, d, loc), mask, true, loc);
    y = graph_add2(E->g, OP_DIV, d,
                   graph_add1(E->g, OP_SQRT, graph_add2(E->g, OP_ADD, var, graph_const(E->g, eps, loc), loc), loc),
                   loc);
    if (w >= 0) y = graph_add2(E->g, OP_MUL, y, w, loc);
    if (b >= 0) y = graph_add2(E->g, OP_ADD, y, b, loc);
    return vtensor(y);
}
/* embedding(indices, weight), as torch.nn.functional.embedding: indices i32 of any shape (up to
 * 3 axes), weight [V, D]; the result is indices' shape with D appended. */
Value read_embedding(Elab *E, Op op, const char *fn, Args *a, SrcLoc loc) {
    static const char *names[] = {"indices", "weight"};
    int ix[2];
    if (!bind_args(E, fn, a, names, 2, ix, 2, loc)) return verror;
    int idx = tensor_arg(E, a, ix[0]), w = tensor_arg(E, a, ix[1]);
    if (idx < 0 || w < 0) return verror;
    const Node *in = &E->g->nodes[idx], *wn = &E->g->nodes[w];
    if (in->dtype != DT_I32) {
        diag_error(E->d, a->loc[ix[0]], "%s(): indices are i32, got %s", fn, tstr(E, idx));
        return verror;
    }
    if (wn->dtype != DT_F32 || wn->shape.rank != 2 || shape_batch_axis(wn->shape) >= 0) {
        diag_error(E->d, a->loc[ix[1]], "%s(): weight is f32[num_embeddings, embedding_dim], got %s", fn, tstr(E, w));
        return verror;
    }
    if (in->shape.rank >= IR_MAX_RANK) {
        diag_error(E->d, a->loc[ix[0]], "%s(): indices %s have too many axes: the result would have %d, at most %d", fn,
                   tstr(E, idx), in->shape.rank + 1, IR_MAX_RANK);
        return verror;
    }
    Shape s = in->shape;
    s.d[s.rank++] = wn->shape.d[1];
    if (wn->op == OP_PARAM) E->g->nodes[w].layer = PARAM_EMBEDDING;
    int io[2] = {idx, w};
    return vtensor(graph_add(E->g, op, 2, io, s, DT_F32, loc));
}
static double gain_of(const char *nl, double a) {
    if (!strcmp(nl, "relu")) return sqrt(2.0);
    if (!strcmp(nl, "leaky_relu")) return sqrt(2.0 / (1 + a * a));
    if (!strcmp(nl, "tanh")) return 5.0 / 3;
    if (!strcmp(nl, "linear") || !strcmp(nl, "sigmoid")) return 1;
    return -1;
}

/* torch.nn.init: kaiming and xavier reduce to uniform/normal with bounds from the fans. */
static bool init_kaiming_xavier(Elab *E, Node *p, const char *fn, Args *a, SrcLoc loc) {
    static const char *kn[] = {"a", "mode", "nonlinearity"};
    static const char *xn[] = {"gain"};
    int ix[3];
    bool ok = true, kaiming = !strncmp(fn, "kaiming", 7), unif = strstr(fn, "uniform") != NULL;
    if (!bind_args(E, fn, a, kaiming ? kn : xn, kaiming ? 3 : 1, ix, 0, loc)) return false;
    if (p->shape.rank < 2) {
        diag_error(E->d, loc, "%s() needs a tensor with at least 2 dimensions to compute fan_in and fan_out", fn);
        return false;
    }
    double rf = 1;
    for (int i = 2; i < p->shape.rank; i++) rf *= (double)p->shape.d[i];
    double fan_in = (double)p->shape.d[1] * rf, fan_out = (double)p->shape.d[0] * rf;
    double std;
    if (kaiming) {
        double sl = num_arg(E, a, ix[0], 0, &ok);
        if (!ok || !check_finite(E, fn, "a", sl, arg_loc(a, ix[0], loc))) return false;
        for (int j = 1; j < 3; j++)
            if (ix[j] >= 0 && a->v[ix[j]].k != V_STR) {
                diag_error(E->d, a->loc[ix[j]], "%s(): %s is a string such as \"%s\", got a %s", fn, kn[j],
                           j == 1 ? "fan_in" : "relu", kind_name(a->v[ix[j]].k));
                return false;
            }
        const char *mode = ix[1] >= 0 ? a->v[ix[1]].str : "fan_in";
        const char *nl = ix[2] >= 0 ? a->v[ix[2]].str : "leaky_relu";
        double gain = gain_of(nl, sl);
        if (gain < 0 || (strcmp(mode, "fan_in") && strcmp(mode, "fan_out"))) {
            diag_error(
                E->d, loc,
                "%s(): mode is \"fan_in\" or \"fan_out\"; nonlinearity is relu, leaky_relu, tanh, sigmoid or linear",
                fn);
            return false;
        }
        std = gain / sqrt(!strcmp(mode, "fan_in") ? fan_in : fan_out);
    } else {
        double gain = num_arg(E, a, ix[0], 1, &ok);
        if (!ok || !check_finite(E, fn, "gain", gain, arg_loc(a, ix[0], loc))) return false;
        std = gain * sqrt(2.0 / (fan_in + fan_out));
    }
    p->attr.init.kind = unif ? INIT_UNIFORM : INIT_NORMAL;
    p->attr.init.a = unif ? -sqrt(3.0) * std : 0;
    p->attr.init.b = unif ? sqrt(3.0) * std : std;
    return ok;
}

/* torch.nn.init's rules: uniform_(a, b) needs a <= b (and b - a finite), normal_ needs std >= 0. */
static bool init_bounds_check(Elab *E, const char *fn, Node *p, Args *a, int *ix, SrcLoc loc) {
    bool u = fn[0] == 'u';
    double lo = p->attr.init.a, hi = p->attr.init.b;
    if (!check_finite(E, fn, u ? "low" : "mean", lo, arg_loc(a, ix[0], loc))) return false;
    if (!u) return check_range(E, fn, "std", hi, 0, false, INFINITY, false, arg_loc(a, ix[1], loc));
    if (!check_finite(E, fn, "high", hi, arg_loc(a, ix[1], loc))) return false;
    if (lo > hi || !isfinite(hi - lo)) {
        diag_error(E->d, loc, "uniform(): needs low <= high (a finite range), got low = %g, high = %g", lo, hi);
        return false;
    }
    return true;
}

bool eval_init(Elab *E, Env *env, Node *p, Expr *e) {
    if (!e) {
        diag_error(E->d, p->loc, "parameter '%s' needs an initializer, e.g. '= normal(0, 0.01)' or '= zeros()'",
                   p->name);
        return false;
    }
    if (e->k != E_CALL || e->a->k != E_IDENT) {
        diag_error(E->d, e->loc, "an initializer is a call such as zeros(), normal(mean, std) or kaiming_uniform()");
        return false;
    }
    Args a;
    if (!eval_args(E, env, e->args, &a, e->loc)) return false;
    const char *fn = e->a->str;
    static const char *un[] = {"low", "high"}, *nn[] = {"mean", "std"}, *cn[] = {"value"};
    int ix[2];
    bool ok = true;
    if (!strcmp(fn, "zeros") || !strcmp(fn, "ones")) {
        if (!bind_args(E, fn, &a, NULL, 0, ix, 0, e->loc)) return false;
        p->attr.init.kind = fn[0] == 'z' ? INIT_ZEROS : INIT_ONES;
    } else if (!strcmp(fn, "constant")) {
        if (!bind_args(E, fn, &a, cn, 1, ix, 1, e->loc)) return false;
        p->attr.init.kind = INIT_CONSTANT;
        p->attr.init.a = num_arg(E, &a, ix[0], 0, &ok);
        ok = ok && check_finite(E, fn, "value", p->attr.init.a, arg_loc(&a, ix[0], e->loc));
    } else if (!strcmp(fn, "uniform") || !strcmp(fn, "normal")) {
        bool u = fn[0] == 'u';
        if (!bind_args(E, fn, &a, u ? un : nn, 2, ix, 0, e->loc)) return false;
        p->attr.init.kind = u ? INIT_UNIFORM : INIT_NORMAL;
        p->attr.init.a = num_arg(E, &a, ix[0], 0, &ok);
        p->attr.init.b = num_arg(E, &a, ix[1], 1, &ok);
        ok = ok && init_bounds_check(E, fn, p, &a, ix, e->loc);
    } else if (!strcmp(fn, "kaiming_uniform") || !strcmp(fn, "kaiming_normal") || !strcmp(fn, "xavier_uniform") ||
               !strcmp(fn, "xavier_normal")) {
        return init_kaiming_xavier(E, p, fn, &a, e->loc);
    } else {
        static const char *const inits[] = {"zeros",          "ones",           "constant",
                                            "uniform",        "normal",         "kaiming_uniform",
                                            "kaiming_normal", "xavier_uniform", "xavier_normal"};
        int bd = 3;
        const char *best = suggest_list(fn, inits, NNC_COUNTOF(inits), NULL, &bd);
        diag_error(E->d, e->loc,
                   "unknown initializer '%s'%s (zeros, ones, constant, uniform, normal, "
                   "kaiming_uniform, kaiming_normal, xavier_uniform, xavier_normal)",
                   fn, did_you_mean(E, best));
        return false;
    }
    return ok;
}

/* conv1d(x, weight, bias, stride, padding, dilation, groups), max_pool1d(x, kernel_size, stride,
 * padding, dilation) and avg_pool1d (no dilation), as torch.nn.functional's on [N, C, L]: the
 * 2-d op over [N, C, 1, L] (weight [O, C/groups, 1, K]), each size the pair (1, size) (a padding
 * (0, p); "same" and "valid" as they are), the height dropped after. */
Value read_1d(Elab *E, const char *fn, Args *a, SrcLoc loc) {
    static const char *cn[] = {"x", "weight", "bias", "stride", "padding", "dilation", "groups"},
                      *pn[] = {"x", "kernel_size", "stride", "padding", "dilation"};
    const bool conv = !strcmp(fn, "conv1d");
    const char *const *names = conv ? cn : pn;
    const int n = conv ? 7 : strcmp(fn, "avg_pool1d") ? 5 : 4;
    int ix[7] = {-1, -1, -1, -1, -1, -1, -1};
    if (!bind_args(E, fn, a, names, n, ix, 2, loc)) return verror;
    Args b = {.n = 0};
    for (int i = 0; i < n; i++) {
        if (ix[i] < 0) continue;
        Value v = a->v[ix[i]];
        SrcLoc l = a->loc[ix[i]];
        bool size = !strcmp(names[i], "kernel_size") || !strcmp(names[i], "stride") || !strcmp(names[i], "padding") ||
            !strcmp(names[i], "dilation");
        if (i == 0 || (conv && i == 1)) { /* x [N, C, L], weight [O, C/g, K]: a height of 1 */
            int t = tensor_arg(E, a, ix[i]);
            if (t < 0) return verror;
            Shape s = E->g->nodes[t].shape;
            if (s.rank != 3) {
                diag_error(E->d, l, "%s(): %s is %s, 3 axes (%s) expected", fn, i ? "weight" : "input", tstr(E, t),
                           i ? "[out_channels, in_channels / groups, kernel]" : "[N, C, L]");
                return verror;
            }
            Shape r = {.rank = 4, .d = {s.d[0], s.d[1], 1, s.d[2]}};
            v = vtensor(reshape_node(E, t, r, l));
        } else if (size && v.k != V_STR) { /* a number or a 1-tuple: (1 or 0, it) */
            if (v.k == V_TUPLE && v.nitems == 1) v = v.items[0];
            if (v.k != V_NUM) {
                diag_error(E->d, l, "%s(): %s is a number, got a %s", fn, names[i], kind_name(v.k));
                return verror;
            }
            Value *pair = arena_alloc(E->a, 2 * sizeof *pair);
            pair[0] = vnum(!strcmp(names[i], "padding") ? 0 : 1), pair[1] = v;
            v = (Value){.k = V_TUPLE, .items = pair, .nitems = 2};
        }
        b.v[b.n] = v, b.loc[b.n] = l, b.kw[b.n++] = i < 2 ? NULL : names[i];
    }
    Value y = call_builtin(E, conv ? "conv2d" : fn[0] == 'm' ? "max_pool2d" : "avg_pool2d", &b, loc);
    if (y.k == V_ERROR) return verror;
    Shape s = E->g->nodes[y.node].shape, r = {.rank = 3, .d = {s.d[0], s.d[1], s.d[3]}};
    return vtensor(reshape_node(E, y.node, r, loc));
}
