/*
 * test_rng.c - runtime/rng.h: Philox known answers (Random123's vectors),
 * FNV-1a, and the statistical sanity of uniform, normal and permutation.
 * Bit-exact agreement with tests/ref/philox.py is checked separately by
 * tests/ref/test_runtime_py.py through rng_dump.
 */
#define _XOPEN_SOURCE 700

#include "check.h"
#include "nnc_rng.h"

void rng_header_check(void); /* rng_header_check.c: compiled with -Werror */

static void test_philox_kat(void)
{
    static const uint32_t ctr[3][4] = { { 0, 0, 0, 0 },
                                        { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff },
                                        { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344 } };
    static const uint32_t key[3][2] = { { 0, 0 }, { 0xffffffff, 0xffffffff },
                                        { 0xa4093822, 0x299f31d0 } };
    static const uint32_t want[3][4] = { { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 },
                                         { 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd },
                                         { 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 } };
    int k;
    for (k = 0; k < 3; k++) {
        uint32_t out[4];
        nnc_rng_philox(ctr[k], key[k], out);
        CHECK(memcmp(out, want[k], sizeof out) == 0, "philox4x32-10 known-answer vector %d", k);
    }
}

static void test_mapping(void)
{
    uint32_t a[4], b[4];
    uint32_t ctr[4] = { 5, 0, 0xdeadbeef, 0x01234567 }, key[2] = { 42, 7 };
    nnc_rng_u32x4(((uint64_t)7 << 32) | 42, 0x01234567deadbeefull, 5, a);
    nnc_rng_philox(ctr, key, b);
    CHECK(memcmp(a, b, sizeof a) == 0, "u32x4 maps seed/stream/index to key/counter as documented");
    CHECK(nnc_rng_hash("") == 0xcbf29ce484222325ull, "fnv1a(\"\") is the offset basis");
    CHECK(nnc_rng_hash("a") == 0xaf63dc4c8601ec8cull, "fnv1a(\"a\") = af63dc4c8601ec8c");
    CHECK(nnc_rng_hash("fc1.weight") != nnc_rng_hash("fc1.bias"), "distinct names, distinct streams");
}

static void test_uniform(void)
{
    double sum = 0, lo = 1, hi = 0;
    int i, n = 100000, distinct = 1;
    uint64_t s = nnc_rng_hash("uniform");
    for (i = 0; i < n; i++) {
        double u = nnc_rng_uniform(1, s, (uint64_t)i);
        sum += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    for (i = 1; i < 1000; i++)
        distinct &= nnc_rng_uniform(1, s, (uint64_t)i) != nnc_rng_uniform(1, s, (uint64_t)i - 1);
    CHECK(lo >= 0 && hi < 1, "uniform in [0,1): min %.3g max %.17g", lo, hi);
    CHECK(fabs(sum / n - 0.5) < 0.005, "uniform mean %.5f ~ 0.5", sum / n);
    CHECK(distinct, "consecutive uniforms differ");
    CHECK(nnc_rng_uniform(1, s, 7) == nnc_rng_uniform(1, s, 7), "uniform is a pure function");
    CHECK(nnc_rng_uniform(1, s, 7) != nnc_rng_uniform(2, s, 7), "seed changes the value");
    CHECK(nnc_rng_uniform(1, s, 7) != nnc_rng_uniform(1, s + 1, 7), "stream changes the value");
}

static void test_normal(void)
{
    double sum = 0, sq = 0;
    int i, n = 200000, finite = 1;
    for (i = 0; i < n; i++) {
        double z = nnc_rng_normal(3, 9, (uint64_t)i);
        finite &= isfinite(z);
        sum += z;
        sq += z * z;
    }
    CHECK(finite, "normals are finite");
    CHECK(fabs(sum / n) < 0.01, "normal mean %.5f ~ 0", sum / n);
    CHECK(fabs(sq / n - 1) < 0.02, "normal variance %.5f ~ 1", sq / n);
}

static void test_permutation(void)
{
    enum { N = 1000 };
    int64_t p[N], q[N];
    int seen[N] = { 0 }, ok = 1, moved = 0, i;
    int first_slot[5] = { 0 };
    nnc_rng_permutation(p, N, 11, nnc_rng_hash("shuffle"));
    nnc_rng_permutation(q, N, 11, nnc_rng_hash("shuffle"));
    for (i = 0; i < N; i++) {
        ok &= p[i] >= 0 && p[i] < N && !seen[p[i]];
        if (p[i] >= 0 && p[i] < N)
            seen[p[i]] = 1;
        moved += p[i] != i;
    }
    CHECK(ok, "permutation of %d holds each index once", N);
    CHECK(moved > N / 2, "permutation moves most elements (%d of %d)", moved, N);
    CHECK(memcmp(p, q, sizeof p) == 0, "permutation is reproducible");
    for (i = 0; i < 5000; i++) { /* every element should reach slot 0 about equally often */
        int64_t r[5];
        nnc_rng_permutation(r, 5, (uint64_t)i, 1);
        first_slot[r[0]]++;
    }
    for (i = 0, ok = 1; i < 5; i++)
        ok &= first_slot[i] > 850 && first_slot[i] < 1150;
    CHECK(ok, "slot 0 of a 5-permutation is uniform: %d %d %d %d %d", first_slot[0],
          first_slot[1], first_slot[2], first_slot[3], first_slot[4]);
    nnc_rng_permutation(p, 0, 1, 1);
    nnc_rng_permutation(p, 1, 1, 1);
    CHECK(p[0] == 0, "permutation of 0 and 1 elements");
}

int main(void)
{
    test_philox_kat();
    test_mapping();
    test_uniform();
    test_normal();
    test_permutation();
    rng_header_check();
    CHECK(1, "rng.h compiles with -Wall -Wextra -Wpedantic -Wconversion -Werror");
    return check_done();
}
