/* gradcheck.c - every differentiable op's backward against central finite differences.
 *
 * Each case is a tiny .nn model with parameters and a scalar loss, compiled in float64 through
 * include/nnc.h.  For every element of every parameter, the gradient from NNC_ENTRY_GRAD
 * ("grad.<param>") is compared with (L(p + h) - L(p - h)) / 2h, the loss taken from
 * NNC_ENTRY_EVAL (for a model with a training mode, dropout or batch_norm, from NNC_ENTRY_GRAD:
 * the training-mode loss).  Every case runs fused and unfused.  Inputs are random normals (labels
 * uniform over the classes), so relu kinks and max ties are hit with probability ~0.
 *
 * An element passes when |analytic - numeric| <= RTOL * max(|analytic|, |numeric|) + ATOL:
 * in double with h = 1e-6 the truncation error is ~h^2 and the rounding error of the
 * difference ~eps * |loss| / h, so ATOL = 8 eps (1 + |loss|) / h (1.8e-9 for a loss of 1).
 *
 *   gradcheck [--fused | --unfused] [--shard K/N] [CASE...]
 * (no case names: all cases; default both modes; --shard: only every Nth case from the Kth, so
 * that CTest runs the cases as N tests side by side) prints one line per case and mode with the
 * max abs and relative differences, and fails when no case ran. */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnc.h"

#define RTOL 1e-6
#define STEP 1e-6
/* The rounding error of the central difference: a few ulps of the loss, divided by 2h. */
#define ATOL(loss) (8 * DBL_EPSILON * (1 + fabs(loss)) / STEP)
#define BATCH 4

/* The train section only binds data and names the loss; the inputs come from this program. */
#define TRAIN(data) "\ntrain {\n" data "\n    batch = 4\n    minimize loss\n}\n"

typedef struct {
    const char *name;
    const char *src;
    int classes;        /* for i32 label inputs: labels are in 0..classes-1 */
    double positive;    /* > 0: f32 inputs are |normal| + positive (for log, sqrt, pow 0.5) */
} Case;

/* a table laid out by hand, a case a few lines */
/* clang-format off */
static const Case cases[] = {
    {"matmul", "input x: f32[B, 3]\nparam W: f32[3, 5] = normal(0, 1)\nparam c: f32[5] = normal(0, 1)\n"
               "loss = sum(tanh(x @ W) * c)" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"matmul_transpose", "input x: f32[B, 3]\nparam W: f32[5, 3] = normal(0, 1)\nparam V: f32[4, 5] = normal(0, 1)\n"
                         "h = x @ transpose(V @ W)\n"
                         "loss = sum(tanh(h)) + sum(tanh(transpose(W) @ transpose(V)) * transpose(V @ W))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"matmul_chain", "input x: f32[B, 3]\nparam W1: f32[3, 6] = normal(0, 1)\nparam W2: f32[6, 2] = normal(0, 1)\n"
                     "loss = sum(sigmoid(tanh(x @ W1) @ W2))" TRAIN("data x = randn(8, 3)"), 0, 0},
    /* batched products: a shared 2-d weight (its gradient one product over the batch), a shared
     * left operand (batched products summed), both batched with folded and stored transposes,
     * rank 4; the large ones go through BLAS, the small ones through plain loops */
    {"matmul_batched_shared", "input x: f32[B, 4, 3]\nparam P: f32[4, 3] = normal(0, 1)\nparam W: f32[3, 5] = normal(0, 1)\n"
                              "param V: f32[2, 4] = normal(0, 1)\nparam c: f32[2, 5] = normal(0, 1)\n"
                              "loss = sum(tanh(V @ tanh((x + P) @ W)) * c)" TRAIN("data x = randn(8, 4, 3)"), 0, 0},
    {"matmul_batched", "input x: f32[B, 4, 3]\nparam Q: f32[4, 3] = normal(0, 1)\nparam c: f32[4, 3] = normal(0, 1)\n"
                       "h1 = tanh(x + Q)\nh2 = tanh(x * Q)\ns = h1 @ transpose(h2)\n"
                       "loss = sum(tanh(s @ h1) * c) + sum(tanh(transpose(s)) * s) + sum(tanh(h2.mT @ h1))"
                       TRAIN("data x = randn(8, 4, 3)"), 0, 0},
    {"matmul_rank4", "input x: f32[B, 2, 3, 4]\nparam P: f32[2, 3, 4] = normal(0, 1)\nparam V: f32[3, 2] = normal(0, 1)\n"
                     "h = tanh(x + P)\nloss = sum(tanh((h @ transpose(h)) @ V)) + sum(tanh(transpose(h) @ h) * 0.5)"
                     TRAIN("data x = randn(8, 2, 3, 4)"), 0, 0},
    {"matmul_batched_blas", "input x: f32[B, 8, 16]\nparam P: f32[16, 20] = normal(0, 0.3)\nparam W: f32[16, 40] = normal(0, 0.3)\n"
                            "param c: f32[8, 40] = normal(0, 1)\nparam U: f32[8, 8] = normal(0, 0.3)\n"
                            "g = tanh(x @ P)\nh = transpose(g) @ tanh(x @ W)\n"
                            "loss = sum(tanh(tanh(x @ W) + U @ (x @ W)) * c) + sum(tanh(transpose(g) @ g) * 0.1) + sum(tanh(h) * 0.2)"
                            TRAIN("data x = randn(8, 8, 16)"), 0, 0},
    /* products contracting the batch axis (a Gram matrix over the batch, cross products, both
     * sides, transposed) and with the batch axis last: their gradients are products of the same
     * kinds, inside larger graphs (tests/ref/test_matmul_torch.py checks them against torch) */
    {"batch_contract_gram", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam V: f32[4, 2] = normal(0, 1)\n"
                            "h = x @ W\ngram = transpose(h) @ h\n"
                            "loss = sum(gram * gram) * 0.01 + sum(tanh(h @ tanh(gram * 0.1)) @ V)"
                            TRAIN("data x = randn(8, 3)"), 0, 0},
    {"batch_contract_cross", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam V: f32[3, 2] = normal(0, 1)\n"
                             "param c: f32[4, 2] = normal(0, 1)\n"
                             "h = tanh(x @ W)\nz = sigmoid(x @ V)\n"
                             "loss = sum(tanh(transpose(h) @ z) * c) + sum(tanh(transpose(z) @ h) * transpose(c))"
                             TRAIN("data x = randn(8, 3)"), 0, 0},
    {"batch_contract_last", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam U: f32[2, 4] = normal(0, 1)\n"
                            "h = tanh(x @ W)\nr = U @ transpose(h)\n"
                            "loss = sum(tanh(r) * transpose(x @ transpose(U @ transpose(W)))) + sum(tanh(r @ h))"
                            TRAIN("data x = randn(8, 3)"), 0, 0},
    {"batch_contract_softmax", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam c: f32[4] = normal(0, 1)\n"
                               "h = x @ W\na = softmax(transpose(h) @ h * 0.25, axis = 1)\n"
                               "loss = sum(tanh(transpose(a @ transpose(h))) * c)"
                               TRAIN("data x = randn(8, 3)"), 0, 0},
    {"add_row_bcast", "input x: f32[B, 3]\nparam W: f32[3, 3] = normal(0, 1)\nparam b: f32[3] = normal(0, 1)\n"
                      "param c: f32[3] = normal(0, 1)\n"
                      "loss = sum(tanh(x @ W + b) * c) + sum(tanh(b + x @ W))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"sub_row_bcast", "input x: f32[B, 3]\nparam W: f32[3, 3] = normal(0, 1)\nparam b: f32[3] = normal(0, 1)\n"
                      "loss = sum(tanh(x @ W - b) * x) + sum(sigmoid(b - x @ W))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"mul_row_bcast", "input x: f32[B, 3]\nparam W: f32[3, 3] = normal(0, 1)\nparam a: f32[3] = normal(0, 1)\n"
                      "loss = sum(tanh((x @ W) * a)) + sum(sigmoid(a * x))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"div_row_bcast", "input x: f32[B, 3]\nparam W: f32[3, 3] = normal(0, 1)\nparam a: f32[3] = normal(0, 1)\n"
                      "d = sigmoid(a) + 0.5\n"
                      "loss = sum(tanh(x @ W / d)) + sum(tanh(d / (sigmoid(x @ W) + 0.5)))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"col_bcast", "input x: f32[B, 3]\nparam W: f32[3, 3] = normal(0, 1)\nparam v: f32[3, 1] = normal(0, 1)\n"
                  "s = x @ v\nh = x @ W\n"
                  "loss = sum(tanh(h + s)) + sum(tanh(h - s) * x) + sum(tanh(h * s)) + sum(tanh(h / (sigmoid(s) + 0.5)))"
                  " + sum(tanh(s - h) * x) + sum(tanh(s / (sigmoid(h) + 0.5)))"
                  TRAIN("data x = randn(8, 3)"), 0, 0},
    {"scalar_bcast", "input x: f32[B, 3]\nparam W: f32[3, 3] = normal(0, 1)\nparam k: f32[] = normal(0, 1)\n"
                     "h = x @ W\n"
                     "loss = sum(tanh(h * 2 + 1)) + sum(tanh(3 - h / 2)) + sum(tanh(h * k)) + sum(tanh(k - h))"
                     " + sum(tanh(h / (k * k + 1))) + sum(tanh((k * k + 1) / (h * h + 1))) + k * k * 0.5 + 2 / (k * k + 1)"
                     TRAIN("data x = randn(8, 3)"), 0, 0},
    {"neg", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\n"
            "loss = sum(tanh(-(x @ W)) * (x @ W)) + sum(sigmoid(neg(x @ W))) + sum(-x @ W)" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"relu", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\nparam c: f32[6] = normal(0, 1)\n"
             "loss = sum(relu(x @ W) * c)" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"abs", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\nparam c: f32[6] = normal(0, 1)\n"
            "loss = sum(abs(x @ W) * c) + sum(abs(c - 0.25))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"leaky_relu", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\nparam c: f32[6] = normal(0, 1)\n"
                   "loss = sum(leaky_relu(x @ W) * c) + sum(leaky_relu(x @ W, negative_slope = 0.3) * c)"
                   " + sum(leaky_relu(c, 2))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"gelu_softplus", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\nparam c: f32[6] = normal(0, 1)\n"
                      "h = x @ W\nloss = sum(gelu(h) * c) + sum(gelu(h, approximate = \"tanh\") * c)"
                      " + sum(softplus(h) * c) + sum(softplus(h, beta = 2, threshold = 1) * c)" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"activations", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1.5)\nparam c: f32[6] = normal(0, 1)\n"
                    "h = x @ W\nloss = sum(silu(h) * c) + sum(mish(h) * c) + sum(elu(h) * c) + sum(elu(h, 0.5) * c)"
                    " + sum(selu(h) * c) + sum(celu(h, 2) * c) + sum(softsign(h) * c) + sum(logsigmoid(h) * c)"
                    TRAIN("data x = randn(8, 3)"), 0, 0},
    /* the kinks, at 3 (x @ W is never an integer: the finite differences stay on one side) */
    {"hard_activations", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 3)\nparam c: f32[6] = normal(0, 1)\n"
                         "h = x @ W\nloss = sum(hardtanh(h) * c) + sum(hardtanh(h, -2, 0.5) * c) + sum(relu6(h * 3) * c)"
                         " + sum(hardsigmoid(h) * c) + sum(hardswish(h) * c)"
                         " + sum(floor(h) + ceil(h) + round(h) + trunc(h) + sign(h))"
                         TRAIN("data x = randn(8, 3)"), 0, 0},
    /* binary_cross_entropy_with_logits: the gradient to the logits and to a target that depends
     * on the parameters too; rms_norm, var and std as composed */
    {"bce_logits_norms", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1.5)\nparam V: f32[3, 6] = normal(0, 1)\n"
                         "param g: f32[6] = normal(1, 0.5)\nh = x @ W\nt = sigmoid(x @ V)\n"
                         "loss = binary_cross_entropy_with_logits(h, t) + binary_cross_entropy_with_logits(h * 3, t,"
                         " reduction = \"sum\") + sum(rms_norm(h, g) * t) + sum(var(h, 1) * std(h, 1))"
                         " + l1_loss(h, t * 2)"
                         TRAIN("data x = randn(8, 3)"), 0, 0},
    {"norms", "input x: f32[B, 4]\nparam W: f32[4, 6] = normal(0, 1)\nparam g: f32[6] = normal(1, 0.5)\n"
              "param c: f32[6] = normal(0, 1)\nh = x @ W\n"
              "loss = sum(norm(h, dim = 1)) + norm(h) * 0.5 + sum(norm(h, p = 1, dim = 0) * c) + sum(normalize(h) * c)"
              " + sum(group_norm(h, 3, g, c) * tanh(h))"
              TRAIN("data x = randn(8, 4)"), 0, 0},
    {"math_functions", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\nparam c: f32[6] = normal(0, 1)\n"
                       "h = x @ W\nloss = sum(rsqrt(h * h + 0.5) * c) + sum(reciprocal(h * h + 1) * c) + sum(erf(h) * c)"
                       " + sum(sin(h) * c) + sum(cos(h * c)) + sum(tan(h * 0.3) * c) + sum(atan(h) * c)"
                       " + sum(asin(tanh(h) * 0.9) * c) + sum(acos(tanh(h) * 0.9) * c) + sum(sinh(h) * c) + sum(cosh(h) * c)"
                       " + sum(asinh(h) * c) + sum(acosh(h * h + 1.5) * c) + sum(atanh(tanh(h) * 0.9) * c)"
                       TRAIN("data x = randn(8, 3)"), 0, 0},
    {"math_functions2", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\nparam c: f32[6] = normal(0, 1)\n"
                        "h = x @ W\nloss = sum(log1p(h * h) * c) + sum(expm1(h) * c) + sum(log2(h * h + 0.5) * c)"
                        " + sum(log10(h * h + 0.5) * c) + sum(exp2(h) * c)"
                        " + binary_cross_entropy(sigmoid(h), sigmoid(c * h), reduction = \"sum\")"
                        " + kl_div(log_softmax(h, dim = 1), softmax(c * h, dim = 1), reduction = \"batchmean\")"
                        " + sum(cumsum(h, dim = 1) * c) + sum(topk(h, 2).values * c[:2]) + sum(sort(h * c, dim = 1)[0] * h)"
                        " + sum(h.scatter(1, argmax(h, 1, keepdim = True), h[:, 3:4] * 2) * c)"
                        " + sum(scatter_add(h, 1, topk(h, 2)[1], h[:, :2] * c[:2]) * c)"
                        " + sum(softshrink(h, 0.3) * c) + sum(hardshrink(h, 0.2) * h) + sum(diff(h, dim = 1) * c[1:])"
                        TRAIN("data x = randn(8, 3)"), 0, 0},
    {"remainder_fmod", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\nparam c: f32[6] = normal(0, 1)\n"
                       "h = x @ W\nd = abs(c) + 0.5\nloss = sum((h * 3) % d * c) + sum(fmod(h * 3, -d) * h) + sum((h % 0.7) * c)"
                       " + sum((h // 0.5) * h * c)"
                       TRAIN("data x = randn(8, 3)"), 0, 0},
    {"clamp_square", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\nparam c: f32[6] = normal(0, 1)\n"
                     "h = x @ W\nloss = sum(clamp(h, -0.7, 0.9) * c) + sum(clamp(h, min = 0.1) * c) + sum(square(h) * c)"
                     TRAIN("data x = randn(8, 3)"), 0, 0},
    {"maximum_pow", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\nparam V: f32[3, 6] = normal(0, 1)\n"
                    "param c: f32[6] = normal(0, 1)\nh = x @ W\ng = x @ V\n"
                    "loss = sum(maximum(h, g) * c) + sum(minimum(g, c) * h) + sum((sigmoid(h) + 0.5) ** tanh(g))"
                    TRAIN("data x = randn(8, 3)"), 0, 0},
    {"logsumexp_min", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\nparam c: f32[6] = normal(0, 1)\n"
                      "h = x @ W\nloss = sum(logsumexp(h, axis = 1)) + sum(logsumexp(h * c, axis = 0, keepdim = 1) * c)"
                      " + sum(min(h, axis = 1)) + sum(h.sum(axis = (0, 1)) * c)" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"layer_norm", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\nparam g: f32[6] = normal(1, 0.5)\n"
                   "param b: f32[6] = normal(0, 1)\nparam c: f32[6] = normal(0, 1)\nh = x @ W\n"
                   "loss = sum(layer_norm(h, g, b) * c) + sum(layer_norm(h, eps = 0.1) * c)"
                   " + sum(tanh(layer_norm(reshape(h, B, 2, 3), reshape(g, 2, 3), eps = 0.01)))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"views", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\n"
              "h = tanh(x @ W)\nloss = sum(reshape(h, B, 2, -1).sum(axis = 2) * 2) + sum(flatten(h.view(B, 3, 2), 1) * h)"
              " + sum(W.T @ W.T.T)" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"sigmoid", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam c: f32[4] = normal(0, 1)\n"
                "loss = sum(sigmoid(x @ W) * c)" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"tanh", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam c: f32[4] = normal(0, 1)\n"
             "loss = sum(tanh(x @ W) * c)" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"exp", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 0.5)\nparam c: f32[4] = normal(0, 1)\n"
            "loss = sum(exp(x @ W) * c)" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"log", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam c: f32[4] = normal(0, 1)\n"
            "loss = sum(log(sigmoid(x @ W) + 0.1) * c) + sum(log(x @ W * (x @ W) + 1))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"sqrt", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam c: f32[4] = normal(0, 1)\n"
             "loss = sum(sqrt(x @ W * (x @ W) + 0.5) * c)" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"pow2", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam c: f32[4] = normal(0, 1)\n"
             "loss = sum((x @ W) ** 2 * c)" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"pow3", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam c: f32[4] = normal(0, 1)\n"
             "loss = sum((x @ W) ** 3 * c) + sum(pow(tanh(x @ W), 3))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"pow_half", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam c: f32[4] = normal(0, 1)\n"
                 "loss = sum((sigmoid(x @ W) + 0.1) ** 0.5 * c)" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"pow_positive_input", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\n"
                           "loss = sum(tanh((x ** 0.5) @ W)) + sum(log(x) @ W)" TRAIN("data x = randn(8, 3)"), 0, 0.5},
    {"sum_axis0", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam c: f32[4] = normal(0, 1)\n"
                  "loss = sum(tanh(sum(tanh(x @ W), axis = 0)) * c)" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"sum_axis1", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\n"
                  "loss = sum(tanh(sum(tanh(x @ W), axis = 1)) * sum(x, axis = -1))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"sum_keepdim", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\n"
                    "h = tanh(x @ W)\n"
                    "loss = sum(tanh(h - sum(h, axis = 1, keepdim = 1)) * h) + sum(tanh(h * sum(h, axis = 0, keepdim = 1)))"
                    TRAIN("data x = randn(8, 3)"), 0, 0},
    {"sum_all", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\n"
                "loss = tanh(sum(tanh(x @ W))) + sum(tanh(x @ W) * sum(x @ W))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"mean_axes", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam c: f32[4] = normal(0, 1)\n"
                  "h = tanh(x @ W)\n"
                  "loss = sum(mean(h, axis = 0) * c) + sum(tanh(mean(h, axis = 1)) * sum(x, axis = 1))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"mean_keepdim_all", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam c: f32[4] = normal(0, 1)\n"
                         "h = tanh(x @ W)\n"
                         "loss = sum(tanh(h - mean(h, axis = 1, keepdim = 1)) * c) + sum(tanh(h / (mean(h, axis = 0, keepdim = 1) + 2)))"
                         " + mean(h) * 3 + sum(tanh(mean(h, axis = 1)))"
                         TRAIN("data x = randn(8, 3)"), 0, 0},
    {"max_axes", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam c: f32[4] = normal(0, 1)\n"
                 "h = x @ W\n"
                 "loss = sum(max(h, axis = 0) * c) + sum(tanh(max(h, axis = 1))) + max(h) * 2"
                 " + sum(tanh(h - max(h, axis = 1, keepdim = 1)) * c) + sum(tanh(h - max(h, axis = -1, keepdim = 1)) * h)"
                 TRAIN("data x = randn(8, 3)"), 0, 0},
    {"reduce_3d", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\nparam c: f32[3] = normal(0, 1)\n"
                  "h = reshape(tanh(x @ W), B, 2, 3)\n"
                  "loss = sum(sum(h, axis = 1) * c) + sum(tanh(mean(h, axis = 2)))"
                  " + sum(tanh(max(h, axis = 1, keepdim = 1)) * h) + sum(tanh(sum(h, axis = 0)))"
                  " + sum(tanh(h - mean(h, axis = 1, keepdim = 1)) * h)"
                  TRAIN("data x = randn(8, 3)"), 0, 0},
    {"reshape", "input x: f32[B, 3]\nparam W: f32[3, 6] = normal(0, 1)\nparam V: f32[2, 3] = normal(0, 1)\n"
                "h = reshape(tanh(x @ W), B, 3, 2)\n"
                "loss = sum(tanh(reshape(reshape(h, B, 6), B, 2, 3) * V) * reshape(transpose(V), 2, 3)) + sum(tanh(reshape(W, 18)) * reshape(W, 18))"
                TRAIN("data x = randn(8, 3)"), 0, 0},
    /* the batch axis merged with others ([B, 3, 4] -> [B*3, 4]) and split back: products over the
     * merged rows (one contracting them), row-wise ops and a loss over them */
    {"merge_batch", "input x: f32[B, 3, 2]\ninput y: i32[B, 3]\nparam W: f32[2, 4] = normal(0, 1)\n"
                    "param V: f32[4, 3] = normal(0, 1)\nh = tanh(x @ W)\nm = reshape(h, -1, 4)\nz = m @ V\n"
                    "loss = sum(tanh(reshape(softmax(z), B, 3, 3)) * 0.5) + sum(tanh(transpose(m) @ m)) * 0.1"
                    " + mean(flatten(h, 0, 1) * m) + sum(tanh(reshape(h, 3, B * 4))) + cross_entropy(z, reshape(y, -1))"
                    TRAIN("data x = randn(8, 3, 2)\n data y = randn(8, 3)"), 3, 0},
    /* permute and transpose(x, d0, d1): the inverse order back, the batch axis moved and back */
    {"permute", "input x: f32[B, 3, 2, 2]\nparam W: f32[2, 3] = normal(0, 1)\nparam c: f32[3, 2] = normal(0, 1)\n"
                "h = tanh(x @ W)\nq = permute(h, 0, 2, 1, 3)\n"
                "loss = sum(tanh(q @ transpose(permute(h, 0, 2, 3, 1), 2, 3))) + sum(tanh(permute(h, 1, 3, 0, 2)) * permute(h, 3, 1, 0, 2))"
                " + sum(swapaxes(h, 0, 3) * c.reshape(3, 1, 2, 1)) + sum(h.mT * h.mT)"
                TRAIN("data x = randn(8, 3, 2, 2)"), 0, 0},
    /* split and chunk: the pieces' gradients joined back by one concat (with zeros in gaps) */
    {"split", "input x: f32[B, 2, 3]\nparam W: f32[3, 7] = normal(0, 1)\nparam c: f32[3] = normal(0, 1)\n"
              "q, k, v = split(x @ W, (2, 2, 3), 2)\na, b = chunk(W, 2, dim = 1)\nh = tanh(x @ W)\n"
              "loss = sum(tanh(q * k) * narrow(v, 2, 0, 2)) + sum(a * a) * 0.1 + sum(tanh(b) * c.reshape(3, 1))"
              " + sum(narrow(h, 2, 1, 2) * narrow(h, 2, 4, 2))"
              TRAIN("data x = randn(8, 2, 3)"), 0, 0},
    /* masks: where (both sides, broadcast), masked_fill (a causal -inf before a softmax), tril, triu */
    {"masks", "input x: f32[B, 2, 3, 3]\nparam W: f32[3, 3] = normal(0, 1)\nparam V: f32[3, 3] = normal(0, 1)\n"
              "att = x @ W\np = softmax(masked_fill(att, tril(ones(3, 3)) == 0, -inf))\n"
              "loss = sum(p * att) + sum(tanh(where(att > 0.3, att * V, V - att))) + sum(tanh(triu(att, 1)) * tril(V))"
              " + sum(masked_fill(att * V, arange(3) > 1, 0.5) ** 2)"
              TRAIN("data x = randn(8, 2, 3, 3)"), 0, 0},
    {"transpose", "input x: f32[B, 3]\nparam W: f32[4, 3] = normal(0, 1)\nparam c: f32[4] = normal(0, 1)\n"
                  "loss = sum(tanh(x @ transpose(W)) * c) + sum(tanh(transpose(x @ transpose(W))) * transpose(tanh(x @ transpose(W))))"
                  TRAIN("data x = randn(8, 3)"), 0, 0},
    {"softmax", "input x: f32[B, 3]\nparam W: f32[3, 5] = normal(0, 1)\nparam c: f32[5] = normal(0, 1)\n"
                "loss = sum(softmax(x @ W) * c) + sum(softmax(x @ W, axis = -1) * (x @ W))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"log_softmax", "input x: f32[B, 3]\nparam W: f32[3, 5] = normal(0, 1)\nparam c: f32[5] = normal(0, 1)\n"
                    "loss = sum(log_softmax(x @ W) * c) + sum(log_softmax(x @ W, axis = 1) * (x @ W))" TRAIN("data x = randn(8, 3)"), 0, 0},
    {"mse_loss", "input x: f32[B, 3]\ninput t: f32[B, 4]\nparam W: f32[3, 4] = normal(0, 1)\nparam b: f32[4] = normal(0, 1)\n"
                 "loss = mse_loss(tanh(x @ W + b), t) + mse_loss(t, x @ W) * 0.5"
                 TRAIN("data x = randn(8, 3)\n data t = randn(8, 4)"), 0, 0},
    {"cross_entropy", "input x: f32[B, 3]\ninput y: i32[B]\nparam W: f32[3, 5] = normal(0, 1)\nparam b: f32[5] = normal(0, 1)\n"
                      "logits = x @ W + b\nloss = cross_entropy(logits, y) + cross_entropy(tanh(logits), y) * 0.5"
                      TRAIN("data x = randn(8, 3)\n data y = randn(8)"), 5, 0},
    /* torch's ignore_index (here a class: a label 2 adds nothing) and label smoothing */
    {"cross_entropy_smooth_ignore", "input x: f32[B, 3]\ninput y: i32[B]\nparam W: f32[3, 5] = normal(0, 1)\n"
                                    "param b: f32[5] = normal(0, 1)\nlogits = x @ W + b\n"
                                    "loss = cross_entropy(logits, y, ignore_index = 2, label_smoothing = 0.2)"
                                    " + cross_entropy(tanh(logits), y, label_smoothing = 0.7) * 0.5"
                                    TRAIN("data x = randn(8, 3)\n data y = randn(8)"), 5, 0},
    {"mlp_like", "input x: f32[B, 3]\ninput y: i32[B]\nparam W1: f32[6, 3] = normal(0, 1)\nparam b1: f32[6] = normal(0, 1)\n"
                 "param W2: f32[4, 6] = normal(0, 1)\nparam b2: f32[4] = normal(0, 1)\n"
                 "logits = relu(x @ transpose(W1) + b1) @ transpose(W2) + b2\nloss = cross_entropy(logits, y)"
                 TRAIN("data x = randn(8, 3)\n data y = randn(8)"), 4, 0},
    {"conv2d", "input x: f32[B, 2, 5, 5]\nparam P: f32[2, 5, 5] = normal(0, 1)\nparam W: f32[3, 2, 3, 3] = normal(0, 0.5)\n"
               "param b: f32[3] = normal(0, 1)\nparam c: f32[3, 5, 5] = normal(0, 1)\n"
               "loss = sum(tanh(conv2d(x + P, W, b, padding = 1)) * c)" TRAIN("data x = randn(8, 2, 5, 5)"), 0, 0},
    {"conv2d_groups_strided", "input x: f32[B, 4, 6, 6]\nparam P: f32[4, 6, 6] = normal(0, 1)\n"
                              "param W: f32[6, 2, 3, 2] = normal(0, 0.5)\nparam c: f32[6, 2, 6] = normal(0, 1)\n"
                              "loss = sum(tanh(conv2d(x + P, W, stride = (2, 1), padding = (0, 1), dilation = (1, 2), groups = 2)) * c)"
                              TRAIN("data x = randn(8, 4, 6, 6)"), 0, 0},
    {"max_pool2d", "input x: f32[B, 2, 5, 5]\nparam P: f32[2, 5, 5] = normal(0, 1)\nparam W: f32[3, 2, 3, 3] = normal(0, 0.5)\n"
                   "param c: f32[3, 3, 3] = normal(0, 1)\n"
                   "loss = sum(tanh(max_pool2d(conv2d(x + P, W, padding = 1), 3, stride = 2, padding = 1)) * c)"
                   TRAIN("data x = randn(8, 2, 5, 5)"), 0, 0},
    {"avg_pool2d", "input x: f32[B, 2, 5, 5]\nparam P: f32[2, 5, 5] = normal(0, 1)\nparam c: f32[2, 3, 3] = normal(0, 1)\n"
                   "param d: f32[2, 1, 1] = normal(0, 1)\n"
                   "loss = sum(tanh(avg_pool2d(x * P, 3, stride = 2, padding = 1)) * c) + sum(adaptive_avg_pool2d(x * P, 1) * d)"
                   TRAIN("data x = randn(8, 2, 5, 5)"), 0, 0},
    {"batch_norm", "input x: f32[B, 2, 3, 3]\ninput t: f32[B, 3]\nparam W: f32[3, 2, 2, 2] = normal(0, 0.5)\n"
                   "param g: f32[3] = normal(1, 0.3)\nparam b: f32[3] = normal(0, 0.3)\n"
                   "buffer running_mean: f32[3] = zeros()\nbuffer running_var: f32[3] = ones()\n"
                   "param g1: f32[3] = normal(1, 0.3)\nbuffer running_mean1: f32[3] = zeros()\nbuffer running_var1: f32[3] = ones()\n"
                   "h = batch_norm(conv2d(x, W), running_mean, running_var, g, b)\n"
                   "z = batch_norm(mean(tanh(h), axis = (2, 3)), running_mean1, running_var1, g1)\n"
                   "loss = sum(tanh(z) * t)" TRAIN("data x = randn(8, 2, 3, 3)\n data t = randn(8, 3)"), 0, 0},
    {"concat_slice", "input x: f32[B, 3]\nparam W: f32[3, 4] = normal(0, 1)\nparam V: f32[3, 2] = normal(0, 1)\n"
                     "param c: f32[6] = normal(0, 1)\n"
                     "h = concat((tanh(x @ W), x @ V, slice(x @ W, 1, 0, 4, 3)), axis = 1)\n"
                     "loss = sum(tanh(narrow(h, 1, 1, 6)) * c) + sum(tanh(concat((x @ V, x @ V, x @ V, x @ V, x @ W), axis = 1)))"
                     TRAIN("data x = randn(8, 3)"), 0, 0},
    {"embedding", "input t: i32[B, 5]\ninput x: f32[B, 5, 3]\nparam E: f32[6, 3] = normal(0, 1)\n"
                  "loss = sum(tanh(embedding(t, E)) * x) + sum(embedding(t, E) * embedding(t, E))"
                  TRAIN("data t = randn(8, 5)\n data x = randn(8, 5, 3)"), 6, 0},
    {"dropout", "input x: f32[B, 6]\nparam W: f32[6, 5] = normal(0, 0.5)\nparam c: f32[5] = normal(0, 1)\n"
                "loss = sum(tanh(dropout(tanh(x @ W), 0.4)) * c)" TRAIN("data x = randn(8, 6)"), 0, 0},
    /* fused attention: causal over [B, H, T, D], the backward from the saved row logsumexp;
     * Tq != Tk with a scale and v's head size its own; 3-d with dropout (training mode) */
    {"attention_causal", "input x: f32[B, 2, 5, 3]\nparam Wq: f32[3, 3] = normal(0, 1)\nparam Wk: f32[3, 3] = normal(0, 1)\n"
                         "param Wv: f32[3, 3] = normal(0, 1)\nparam c: f32[2, 5, 3] = normal(0, 1)\n"
                         "loss = sum(tanh(scaled_dot_product_attention(x @ Wq, x @ Wk, x @ Wv, is_causal = true)) * c)"
                         TRAIN("data x = randn(8, 2, 5, 3)"), 0, 0},
    {"attention_cross", "input x: f32[B, 2, 4, 3]\ninput z: f32[B, 2, 6, 3]\nparam Wq: f32[3, 2] = normal(0, 1)\n"
                        "param Wk: f32[3, 2] = normal(0, 1)\nparam Wv: f32[3, 4] = normal(0, 1)\nparam c: f32[2, 4, 4] = normal(0, 1)\n"
                        "loss = sum(tanh(scaled_dot_product_attention(x @ Wq, z @ Wk, tanh(z @ Wv), scale = 0.7)) * c)"
                        TRAIN("data x = randn(8, 2, 4, 3)\n data z = randn(8, 2, 6, 3)"), 0, 0},
    {"attention_dropout", "input x: f32[B, 6, 3]\nparam Wq: f32[3, 3] = normal(0, 1)\nparam Wk: f32[3, 3] = normal(0, 1)\n"
                          "param Wv: f32[3, 3] = normal(0, 1)\nparam c: f32[6, 3] = normal(0, 1)\n"
                          "loss = sum(tanh(scaled_dot_product_attention(x @ Wq, x @ Wk, x @ Wv, dropout_p = 0.3, is_causal = true)) * c)"
                          TRAIN("data x = randn(8, 6, 3)"), 0, 0},
    /* fused attention as nanoGPT feeds it: q, k, v split from one product, viewed as heads and
     * transposed ([B, T, C] -> [B, H, T, D]), and back; and over the heads merged with the batch
     * ([B*H, T, D], a dimension of -H) */
    {"attention_nanogpt", "input x: f32[B, 4, 4]\nparam W: f32[4, 12] = normal(0, 1)\nparam c: f32[4, 4] = normal(0, 1)\n"
                          "q, k, v = (x @ W).split(4, dim = 2)\nq = q.view(B, 4, 2, 2).transpose(1, 2)\n"
                          "k = k.view(B, 4, 2, 2).transpose(1, 2)\nv = v.view(B, 4, 2, 2).transpose(1, 2)\n"
                          "y = scaled_dot_product_attention(q, k, v, is_causal = true).transpose(1, 2).contiguous().view(B, 4, 4)\n"
                          "m = scaled_dot_product_attention(q.reshape(-1, 4, 2), k.reshape(B * 2, 4, 2), tanh(v).reshape(-1, 4, 2))\n"
                          "loss = sum(tanh(y) * c) + sum(tanh(m.view(B, 2, 4, 2)) * q)"
                          TRAIN("data x = randn(8, 4, 4)"), 0, 0},
    /* a tied parameter (b.w = a.w, as nanoGPT ties lm_head to wte): one parameter, its gradient
     * the sum of what both names' uses give it */
    {"tie", "block A() {\n param w: f32[3, 3] = normal(0, 1)\n}\nblock Bk() {\n param w: f32[3, 3] = normal(0, 1)\n}\n"
            "input x: f32[B, 3]\na = A()\nb = Bk()\nb.w = a.w\n"
            "loss = sum(tanh(x @ a.w) * tanh(x @ b.w.T + 1))" TRAIN("data x = randn(8, 3)"), 0, 0},
    /* the same attention written twice: two launches (the schedule merges a forward with its own
     * row logsumexp only), each writing its result */
    {"attention_twice", "input x: f32[B, 2, 4, 3]\nparam Wq: f32[3, 3] = normal(0, 1)\nparam c: f32[2, 4, 3] = normal(0, 1)\n"
                        "q = x @ Wq\ny1 = scaled_dot_product_attention(q, x, x, is_causal = true)\n"
                        "y2 = scaled_dot_product_attention(q, x, x, is_causal = true)\n"
                        "loss = sum(tanh(y1) * c) + sum(y2 * y2 * c)" TRAIN("data x = randn(8, 2, 4, 3)"), 0, 0},
    {"shared_use", "input x: f32[B, 3]\nparam W: f32[3, 3] = normal(0, 1)\n"
                   "h = tanh(x @ W)\nloss = sum(h * h * h) + sum(tanh(h @ W) * h) + sum(W * W)" TRAIN("data x = randn(8, 3)"), 0, 0},
};
/* clang-format on */

/* A small deterministic generator: the test must not depend on the RNG under test. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static double nrand(void) { return sqrt(-2 * log(urand())) * cos(6.283185307179586 * urand()); }

static int64_t numel_of(const nnc_tensor_info *t, int64_t batch) {
    int64_t k = 1;
    for (int i = 0; i < t->rank; i++) k *= t->dims[i] < 0 ? batch : t->dims[i];
    return k;
}

/* The loss of `entry`: EVAL for the differences, unless the model has a training mode (dropout,
 * batch_norm): then GRAD's, the training-mode loss the gradient is of (the step does not move,
 * so dropout draws the same mask each call). */
static double eval_loss(const nnc_model_abi *abi, void *m, int entry, const void *const *in, int *rc) {
    int r = abi->run(m, entry, in, BATCH);
    if (r) {
        fprintf(stderr, "eval failed: %s\n", abi->error(m));
        *rc = 1;
        return NAN;
    }
    return *(const double *)abi->output(m, entry, 0);
}

static bool has_modes(const Case *c) {
    return strstr(c->src, "dropout(") || strstr(c->src, "dropout_p") || strstr(c->src, "batch_norm(");
}

/* Returns 0 when every gradient element agrees. */
static int check_case(const Case *c, int fuse) {
    char err[8192];
    nnc_options o = nnc_default_options();
    o.f64 = 1;
    o.fuse = fuse;
    nnc_compiled *cm = nnc_compile(c->name, c->src, &o, err, sizeof err);
    if (!cm) {
        printf("FAIL %-20s %-7s compile error:\n%s\n", c->name, fuse ? "fused" : "unfused", err);
        return 1;
    }
    const nnc_model_abi *abi = nnc_abi(cm);
    void *m = nnc_model(cm);
    int rc = 0;
    if (abi->real_bytes != 8) {
        printf("FAIL %s: real_bytes %d with opt.f64 = 1\n", c->name, abi->real_bytes);
        nnc_free(cm);
        return 1;
    }
    abi->init(m, 7);
    rng_state = 0x9E3779B97F4A7C15ull ^ (uint64_t)strlen(c->src);
    void *bufs[8] = {0};
    const void *in[8];
    for (int i = 0; i < abi->ninputs; i++) {
        const nnc_tensor_info *t = &abi->inputs[i];
        int64_t n = numel_of(t, BATCH);
        if (t->dtype == NNC_TYPE_I32) {
            int32_t *y = malloc((size_t)n * sizeof *y);
            for (int64_t k = 0; k < n; k++) y[k] = (int32_t)(urand() * c->classes);
            bufs[i] = y;
        } else {
            double *x = malloc((size_t)n * sizeof *x);
            for (int64_t k = 0; k < n; k++) x[k] = c->positive > 0 ? fabs(nrand()) + c->positive : nrand();
            bufs[i] = x;
        }
        in[i] = bufs[i];
    }
    if (abi->run(m, NNC_ENTRY_GRAD, in, BATCH)) {
        printf("FAIL %s: grad run: %s\n", c->name, abi->error(m));
        rc = 1;
        goto done;
    }
    /* Copy the GRAD outputs first: EVAL reuses the activation block they live in. */
    double loss_g = *(const double *)abi->output(m, NNC_ENTRY_GRAD, 0);
    double *grads[64] = {0};
    for (int p = 0; p < abi->nparams && p < 64; p++) {
        const nnc_tensor_info *pt = &abi->params[p];
        char want[256];
        snprintf(want, sizeof want, "grad.%s", pt->name);
        int o = -1;
        for (int j = 1; j < abi->noutputs[NNC_ENTRY_GRAD]; j++)
            if (!strcmp(abi->outputs[NNC_ENTRY_GRAD][j].name, want)) o = j;
        if (o < 0 && strstr(pt->name, "running_")) continue;   /* a buffer: never trained */
        if (o < 0 || numel_of(&abi->outputs[NNC_ENTRY_GRAD][o], BATCH) != numel_of(pt, 1)) {
            printf("FAIL %s: the GRAD entry has no output %s\n", c->name, want);
            rc = 1;
            continue;
        }
        size_t bytes = (size_t)numel_of(pt, 1) * sizeof(double);
        grads[p] = malloc(bytes);
        memcpy(grads[p], abi->output(m, NNC_ENTRY_GRAD, o), bytes);
    }
    const int entry = has_modes(c) ? NNC_ENTRY_GRAD : NNC_ENTRY_EVAL;
    double loss_e = eval_loss(abi, m, entry, in, &rc);
    double maxabs = fabs(loss_g - loss_e), maxrel = 0, maxerr = 0;
    if (maxabs > 1e-12 * (1 + fabs(loss_e))) {
        printf("FAIL %s: GRAD loss %.17g != EVAL loss %.17g\n", c->name, loss_g, loss_e);
        rc = 1;
    }
    int64_t checked = 0;
    for (int p = 0; p < abi->nparams && p < 64; p++) {
        const nnc_tensor_info *pt = &abi->params[p];
        double *ga = grads[p];
        if (!ga) continue;
        int64_t n = numel_of(pt, 1);
        double *w = abi->param(m, p);
        for (int64_t k = 0; k < n; k++) {
            double w0 = w[k];
            w[k] = w0 + STEP;
            double lp = eval_loss(abi, m, entry, in, &rc);
            w[k] = w0 - STEP;
            double lm = eval_loss(abi, m, entry, in, &rc);
            w[k] = w0;
            double num = (lp - lm) / (2 * STEP), d = fabs(ga[k] - num);
            double scale = fmax(fabs(ga[k]), fabs(num));
            double err_k = d / (RTOL * scale + ATOL(loss_e));
            if (d > maxabs) maxabs = d;
            if (scale > 1e-6 && d / scale > maxrel) maxrel = d / scale;
            if (err_k > maxerr) maxerr = err_k;
            if (!(err_k <= 1)) {
                if (rc == 0 || err_k > 1) printf("  %s %s[%lld]: analytic %.12g numeric %.12g\n", c->name, pt->name, (long long)k, ga[k], num);
                rc = 1;
            }
            checked++;
        }
    }
    for (int p = 0; p < 64; p++) free(grads[p]);
    printf("%s %-20s %-7s %4lld elements  maxdiff %.3g  max rel %.3g  (loss %.6g)\n", rc ? "FAIL" : "ok  ", c->name,
           fuse ? "fused" : "unfused", (long long)checked, maxabs, maxrel, loss_e);
done:
    for (int i = 0; i < abi->ninputs; i++) free(bufs[i]);
    nnc_free(cm);
    return rc;
}

int main(int argc, char **argv) {
    int failed = 0, passed = 0, modes = 3, named = 0;
    unsigned shard = 0, nshards = 1;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--fused")) modes = 2;
        else if (!strcmp(argv[a], "--unfused")) modes = 1;
        else if (!strcmp(argv[a], "--shard") && a + 1 < argc) {
            if (sscanf(argv[++a], "%u/%u", &shard, &nshards) != 2 || nshards == 0 || shard >= nshards) {
                fprintf(stderr, "gradcheck: --shard wants K/N with 0 <= K < N, got '%s'\n", argv[a]);
                return 2;
            }
            argv[a] = "";   /* not a case name */
        } else named++;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const Case *c = &cases[i];
        bool want = named == 0;
        for (int a = 1; a < argc; a++) want |= !strcmp(argv[a], c->name);
        if (!want || i % nshards != shard) continue;
        for (int fuse = 1; fuse >= 0; fuse--) {
            if (!(modes >> fuse & 1)) continue;
            if (check_case(c, fuse)) failed++;
            else passed++;
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    if (passed + failed == 0) printf("FAIL no case selected\n");
    return failed || passed == 0 ? 1 : 0;
}
