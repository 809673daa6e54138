/*
 * rng_header_check.c - rng.h is pasted into generated code, so it must stay
 * warning-free under strict flags: CMake compiles this file alone with
 * -Wall -Wextra -Wpedantic -Wconversion -Wshadow -Werror.
 */
#include "nnc_rng.h"

void rng_header_check(void);

void rng_header_check(void)
{
    int64_t perm[4];
    uint32_t w[4];
    volatile double sink;
    nnc_rng_u32x4(1, nnc_rng_hash("x"), 2, w);
    sink = nnc_rng_uniform(1, 2, 3) + nnc_rng_normal(1, 2, 3) + (double)w[0];
    nnc_rng_permutation(perm, 4, 1, 2);
    sink = sink + (double)perm[0];
    (void)sink;
}
