/* vector_math_sweep.c - the CPU target's inline float EXP, TANH and ERF (nnc_expf, nnc_tanhf,
 * nnc_erff: codegen/cpu/dialect_c.c, pasted in as vector_math.h by test_vector_math.c) against
 * libm's double exp, tanh and erf: the error in units of the last place of the float result, over
 * every STRIDE-th float bit pattern (1: all 2^32) and the edge cases (+-0, +-inf, NaN, the
 * subnormals, overflow and underflow of e^x).  libm's own float functions are measured alike, for
 * the report.  Each block of inputs also goes through a plain loop, which -O3 vectorises: its
 * bits must be the scalar call's.  Exits 1 when an error passes MAX_ULP, a special value differs
 * from libm's or a vector result from the scalar one. */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vector_math.h"

#define MAX_ULP 2.0

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* |got - want| in units of the last place of want rounded to float (2^-149 below the normals). */
static double ulps(float got, double want) {
    float w = (float)want, a = fabsf(w);
    double ulp = isinf(a) ? ldexp(1, 104) : (double)nextafterf(a, INFINITY) - a;
    if (isinf(w) || isinf(got)) return got == w ? 0 : INFINITY;
    return fabs((double)got - want) / ulp;
}

#define BLOCK 4096

typedef struct {
    const char *name;
    void (*block)(const float *in, float *out); /* the vectorised loop */
    float (*mine)(float);
    float (*libm)(float);
    double (*ref)(double);
    double worst, worst_libm;
    float at;
    int bad;
    uint64_t hash; /* of every result's bits: the -O1 and -O3 builds must print the same */
} Fn;

/* the scalar call, kept out of any loop, and the loop the generated kernels have */
#define FN(name, f) \
    __attribute__((noinline)) static float my_##name(float x) { return f(x); } \
    static void block_##name(const float *restrict in, float *restrict out) { \
        for (int i = 0; i < BLOCK; i++) out[i] = f(in[i]); \
    }
FN(exp, nnc_expf)
FN(tanh, nnc_tanhf)
FN(erf, nnc_erff)

/* NaN where libm gives NaN, else the same value with the same sign (-0 included). */
static bool same_special(float a, float b) {
    if (isnan(b)) return isnan(a);
    return to_bits(a) == to_bits(b);
}

static void check(Fn *f, float x, float vec) {
    float got = f->mine(x), lib = f->libm(x);
    f->hash = f->hash * 1000003u + to_bits(got);
    if (to_bits(vec) != to_bits(got) && f->bad++ < 5)
        printf("FAIL %s(%a): vector %a, scalar %a\n", f->name, x, vec, got);
    if (isnan(x) || isinf(x) || x == 0 || isnan(lib)) {
        if (!same_special(got, lib)) {
            if (f->bad++ < 5) printf("FAIL %s(%a) = %a, libm %a\n", f->name, x, got, lib);
        }
        return;
    }
    double want = f->ref(x), e = ulps(got, want), el = ulps(lib, want);
    if (e > f->worst) f->worst = e, f->at = x;
    if (el > f->worst_libm) f->worst_libm = el;
    if (!(e <= MAX_ULP) && f->bad++ < 5) printf("FAIL %s(%a) = %a, want %a (%.2f ulp)\n", f->name, x, got, want, e);
}

int main(int argc, char **argv) {
    uint32_t stride = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 0) : 97;
    Fn fns[] = {{"exp", block_exp, my_exp, expf, exp, 0, 0, 0, 0, 0},
                {"tanh", block_tanh, my_tanh, tanhf, tanh, 0, 0, 0, 0, 0},
                {"erf", block_erf, my_erf, erff, erf, 0, 0, 0, 0, 0}};
    static float in[BLOCK], out[BLOCK];
    static const float edge[] = {0.0f,      -0.0f,       INFINITY, -INFINITY,  NAN,      -NAN,   0x1p-149f, -0x1p-149f,
                                 0x1p-126f, -0x1p-126f,  88.7228f, 88.72284f,  88.7229f, 89.0f,  100.0f,    -87.3f,
                                 -103.27f,  -103.28f,    -103.97f, -104.0f,    -150.0f,  0.625f, -0.625f,   0.62499994f,
                                 1.0f,      0.99999994f, 2.0f,     1.9999999f, 4.0f,     3.9f,   10.0f,     9.0f,
                                 0x1p-20f,  -0x1p-20f,   FLT_MAX,  -FLT_MAX};
    int total = 0;
    for (size_t k = 0; k < sizeof fns / sizeof *fns; k++) {
        Fn *f = &fns[k];
        for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) check(f, edge[i], f->mine(edge[i]));
        for (uint64_t u = 0; u <= UINT32_MAX;) {
            int n = 0;
            for (; n < BLOCK && u <= UINT32_MAX; u += stride) in[n++] = from_bits((uint32_t)u);
            for (int i = n; i < BLOCK; i++) in[i] = 0;
            f->block(in, out);
            for (int i = 0; i < n; i++) check(f, in[i], out[i]);
        }
        printf("%-4s max %.3f ulp at %a (libm's %sf: %.3f ulp), %d failures, results %016llx\n", f->name, f->worst,
               f->at, f->name, f->worst_libm, f->bad, (unsigned long long)f->hash);
        total += f->bad;
    }
    return total ? 1 : 0;
}
