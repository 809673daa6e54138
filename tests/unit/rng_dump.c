/*
 * rng_dump.c - prints rng.h values for tests/ref/test_runtime_py.py to
 * compare with tests/ref/philox.py.  One value per line:
 *   hash <hex of name> <u64>
 *   u32x4 <seed> <stream> <i> <w0> <w1> <w2> <w3>
 *   uniform <seed> <stream> <i> <%a>        (hex float: bit-exact)
 *   normal <seed> <stream> <i> <%a>
 *   perm <seed> <stream> <n> <p0> <p1> ...
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "nnc_rng.h"

static const char *names[] = { "", "a", "fc1.weight", "fc1.bias", "layer.10/attn.q_proj", "\xc3\xa9t\xc3\xa9" };
static const uint64_t seeds[] = { 0, 1, 42, 0xffffffffull, 0x123456789abcdef0ull, UINT64_MAX };
static const uint64_t indices[] = { 0, 1, 2, 3, 1000, 0xffffffffull, 0x100000000ull, UINT64_MAX };

static void dump_hashes(void)
{
    size_t k;
    for (k = 0; k < sizeof names / sizeof names[0]; k++) {
        const unsigned char *p = (const unsigned char *)names[k];
        printf("hash ");
        if (!*p)
            printf("-");
        for (; *p; p++)
            printf("%02x", *p);
        printf(" %" PRIu64 "\n", nnc_rng_hash(names[k]));
    }
}

static void dump_blocks(uint64_t seed, uint64_t stream)
{
    size_t k;
    for (k = 0; k < sizeof indices / sizeof indices[0]; k++) {
        uint64_t i = indices[k];
        uint32_t w[4];
        nnc_rng_u32x4(seed, stream, i, w);
        printf("u32x4 %" PRIu64 " %" PRIu64 " %" PRIu64 " %u %u %u %u\n", seed, stream, i,
               (unsigned)w[0], (unsigned)w[1], (unsigned)w[2], (unsigned)w[3]);
        printf("uniform %" PRIu64 " %" PRIu64 " %" PRIu64 " %a\n", seed, stream, i,
               nnc_rng_uniform(seed, stream, i));
        printf("normal %" PRIu64 " %" PRIu64 " %" PRIu64 " %a\n", seed, stream, i,
               nnc_rng_normal(seed, stream, i));
    }
}

static int dump_perm(uint64_t seed, uint64_t stream, int64_t n)
{
    int64_t *p = malloc((size_t)(n ? n : 1) * sizeof *p), k;
    if (!p) {
        perror("rng_dump: malloc");
        return -1;
    }
    nnc_rng_permutation(p, n, seed, stream);
    printf("perm %" PRIu64 " %" PRIu64 " %" PRId64, seed, stream, n);
    for (k = 0; k < n; k++)
        printf(" %" PRId64, p[k]);
    printf("\n");
    free(p);
    return 0;
}

int main(void)
{
    size_t s;
    int i, rc = 0;
    dump_hashes();
    for (s = 0; s < sizeof seeds / sizeof seeds[0]; s++)
        dump_blocks(seeds[s], nnc_rng_hash(names[s % 6]));
    for (i = 0; i < 200; i++) /* a run of consecutive normals, as initialisers use them */
        printf("normal 7 %" PRIu64 " %d %a\n", nnc_rng_hash("fc1.weight"), i,
               nnc_rng_normal(7, nnc_rng_hash("fc1.weight"), (uint64_t)i));
    rc |= dump_perm(1, 2, 0);
    rc |= dump_perm(1, 2, 1);
    rc |= dump_perm(5, nnc_rng_hash("shuffle"), 10);
    rc |= dump_perm(42, nnc_rng_hash("train"), 1000);
    if (fflush(stdout) != 0 || ferror(stdout))
        return 1;
    return rc ? 1 : 0;
}
