/*
 * rng.h - counter-based random numbers (Philox4x32-10), header-only.
 *
 * Why counter-based: every random value is a pure function of
 * (seed, stream, index), so parameter initialisation, dropout masks and
 * data shuffles are reproducible on any backend, in any order, on any
 * number of threads, and from Python (tests/ref/philox.py reimplements
 * every function here bit for bit).  There is no state to carry around.
 *
 * This header is also pasted verbatim into generated C code, so it holds
 * only macros and `static inline` functions named nnc_rng_* / NNC_RNG_*,
 * includes nothing but <stdint.h> and <math.h>, and has no globals.
 *
 * The exact mapping (the contract tests/ref/philox.py reproduces):
 *
 *   stream  usually nnc_rng_hash("fc1.weight"): 64-bit FNV-1a of the bytes
 *           of a name (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
 *   block i = Philox4x32-10(counter, key), Salmon et al. 2011 (Random123):
 *             key     = { lo32(seed), hi32(seed) }
 *             counter = { lo32(i), hi32(i), lo32(stream), hi32(stream) }
 *             -> four uint32 words w[0..3]           (nnc_rng_u32x4)
 *   uniform(i) = (((w0 << 32) | w1) >> 11) * 2^-53    in [0, 1)
 *                (53 random bits, exact in a double)
 *   normal(i)  = sqrt(-2 ln u1) * cos(2 pi u2)        Box-Muller, cos branch
 *                u1 = ((((w0 << 32) | w1) >> 11) + 1) * 2^-53  in (0, 1]
 *                u2 = (((w2 << 32) | w3) >> 11) * 2^-53         in [0, 1)
 *                so log() never sees 0; the sin branch is discarded so that
 *                value i depends on block i alone.
 *   permutation(n): perm = 0..n-1, then for k = n-1 down to 1:
 *                j = min(k, (uint64_t)(uniform(seed, stream, k) * (k + 1)))
 *                swap(perm[k], perm[j])                (Fisher-Yates)
 *
 * Usage:
 *   uint64_t s = nnc_rng_hash("fc1.weight");
 *   for (i = 0; i < n; i++) w[i] = scale * nnc_rng_normal(seed, s, i);
 */
#ifndef NNC_RNG_H
#define NNC_RNG_H

#include <math.h>
#include <stdint.h>

#define NNC_RNG_PHILOX_M0 0xD2511F53u /* round multiplier for words 0,1 */
#define NNC_RNG_PHILOX_M1 0xCD9E8D57u /* round multiplier for words 2,3 */
#define NNC_RNG_PHILOX_W0 0x9E3779B9u /* key bump (golden ratio) */
#define NNC_RNG_PHILOX_W1 0xBB67AE85u /* key bump (sqrt(3) - 1) */
#define NNC_RNG_PHILOX_ROUNDS 10
#define NNC_RNG_FNV_OFFSET 0xcbf29ce484222325ull
#define NNC_RNG_FNV_PRIME 0x100000001b3ull
#define NNC_RNG_TWO_PI 6.283185307179586 /* == 2 * math.pi in Python */
#define NNC_RNG_TWO_POW_M53 (1.0 / 9007199254740992.0) /* 2^-53 */

/* 64-bit FNV-1a of a NUL-terminated string: names a stream. */
static inline uint64_t nnc_rng_hash(const char *s)
{
    uint64_t h = NNC_RNG_FNV_OFFSET;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        h ^= (uint64_t)*p++;
        h *= NNC_RNG_FNV_PRIME;
    }
    return h;
}

/* One Philox round on ctr[4] with key[2]. */
static inline void nnc_rng_philox_round(uint32_t ctr[4], const uint32_t key[2])
{
    uint64_t p0 = (uint64_t)NNC_RNG_PHILOX_M0 * ctr[0];
    uint64_t p1 = (uint64_t)NNC_RNG_PHILOX_M1 * ctr[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    ctr[0] = hi1 ^ ctr[1] ^ key[0];
    ctr[1] = lo1;
    ctr[2] = hi0 ^ ctr[3] ^ key[1];
    ctr[3] = lo0;
}

/* Philox4x32-10 block function: matches Random123's philox4x32(ctr, key). */
static inline void nnc_rng_philox(const uint32_t ctr_in[4], const uint32_t key_in[2],
                                  uint32_t out[4])
{
    uint32_t ctr[4] = { ctr_in[0], ctr_in[1], ctr_in[2], ctr_in[3] };
    uint32_t key[2] = { key_in[0], key_in[1] };
    int r;
    for (r = 0; r < NNC_RNG_PHILOX_ROUNDS; r++) {
        if (r > 0) { /* the key is bumped between rounds, not before the first */
            key[0] += NNC_RNG_PHILOX_W0;
            key[1] += NNC_RNG_PHILOX_W1;
        }
        nnc_rng_philox_round(ctr, key);
    }
    out[0] = ctr[0];
    out[1] = ctr[1];
    out[2] = ctr[2];
    out[3] = ctr[3];
}

/* Block i of stream `stream` under `seed`: four independent uint32 words. */
static inline void nnc_rng_u32x4(uint64_t seed, uint64_t stream, uint64_t i, uint32_t out[4])
{
    uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
    uint32_t ctr[4] = { (uint32_t)i, (uint32_t)(i >> 32), (uint32_t)stream,
                        (uint32_t)(stream >> 32) };
    nnc_rng_philox(ctr, key, out);
}

/* Top 53 bits of the 64-bit word (hi << 32 | lo). */
static inline uint64_t nnc_rng_bits53(uint32_t hi, uint32_t lo)
{
    return (((uint64_t)hi << 32) | lo) >> 11;
}

/* The i-th uniform double in [0, 1), from words 0 and 1 of block i. */
static inline double nnc_rng_uniform(uint64_t seed, uint64_t stream, uint64_t i)
{
    uint32_t w[4];
    nnc_rng_u32x4(seed, stream, i, w);
    return (double)nnc_rng_bits53(w[0], w[1]) * NNC_RNG_TWO_POW_M53;
}

/* The i-th standard normal: Box-Muller on the four words of block i. */
static inline double nnc_rng_normal(uint64_t seed, uint64_t stream, uint64_t i)
{
    uint32_t w[4];
    double u1, u2;
    nnc_rng_u32x4(seed, stream, i, w);
    u1 = (double)(nnc_rng_bits53(w[0], w[1]) + 1) * NNC_RNG_TWO_POW_M53; /* (0,1] */
    u2 = (double)nnc_rng_bits53(w[2], w[3]) * NNC_RNG_TWO_POW_M53;       /* [0,1) */
    return sqrt(-2.0 * log(u1)) * cos(NNC_RNG_TWO_PI * u2);
}

/* A uniformly random permutation of 0..n-1 (Fisher-Yates from the end; the
 * swap partner of slot k comes from block k, so any prefix of the work can
 * be recomputed independently). */
static inline void nnc_rng_permutation(int64_t *perm, int64_t n, uint64_t seed, uint64_t stream)
{
    int64_t k;
    for (k = 0; k < n; k++)
        perm[k] = k;
    for (k = n - 1; k >= 1; k--) {
        double u = nnc_rng_uniform(seed, stream, (uint64_t)k);
        uint64_t j = (uint64_t)(u * (double)(k + 1));
        int64_t t;
        if (j > (uint64_t)k) /* u * (k+1) can round up to k+1 for huge k */
            j = (uint64_t)k;
        t = perm[k];
        perm[k] = perm[j];
        perm[j] = t;
    }
}

#endif /* NNC_RNG_H */
