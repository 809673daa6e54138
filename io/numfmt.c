/* numfmt.c - see numfmt.h.  A positive finite double is m * 2^q with m < 2^53.  Its value
 * times 10^p is an integer plus a fraction, both exact in 128 bits when p <= 22
 * (m * 10^22 < 2^127) and the power of two shifts out (q < 0) or in (q >= 0) without
 * overflow; the fraction against one half rounds the integer, half to even.  %g needs the
 * decimal exponent X of the value: the binary exponent guesses it, and the integer part at
 * that guess (which must have exactly P digits) confirms or moves it; rounding up may then carry to
 * 10^P (9.9999999996 -> 10.0000000), one more in the exponent. */
#include "numfmt.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char pairs[201] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                               "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                               "8081828384858687888990919293949596979899";

#if defined(__SIZEOF_INT128__)
typedef unsigned __int128 u128;

static const uint64_t pow10_u64[20] = {1ULL,
                                       10ULL,
                                       100ULL,
                                       1000ULL,
                                       10000ULL,
                                       100000ULL,
                                       1000000ULL,
                                       10000000ULL,
                                       100000000ULL,
                                       1000000000ULL,
                                       10000000000ULL,
                                       100000000000ULL,
                                       1000000000000ULL,
                                       10000000000000ULL,
                                       100000000000000ULL,
                                       1000000000000000ULL,
                                       10000000000000000ULL,
                                       100000000000000000ULL,
                                       1000000000000000000ULL,
                                       10000000000000000000ULL};

static u128 pow10_u128(int p) { /* 0 <= p <= 38 */
    return p < 20 ? pow10_u64[p] : (u128)pow10_u64[19] * pow10_u64[p - 19];
}

/* a = m * 2^q, m < 2^53 odd (or q = 0) */
typedef struct {
    uint64_t m;
    int q;
} Binary;

static Binary binary_of(double a) { /* from the bits: frexp and ldexp cost more than the rest */
    uint64_t bits;
    memcpy(&bits, &a, sizeof bits);
    int be = (int)(bits >> 52 & 0x7ff);
    Binary v = {bits & ((1ULL << 52) - 1), -1074};
    if (be) v.m |= 1ULL << 52, v.q = be - 1075;
    if (v.m && v.q < 0) {
        int tz = __builtin_ctzll(v.m), sh = tz < -v.q ? tz : -v.q;
        v.m >>= sh, v.q += sh;
    }
    return v;
}

/* v * 10^p = *floor_out + a fraction, exactly; *up: the fraction rounds the floor up (half
 * to even).  0 when the exact arithmetic does not reach. */
static int scaled(Binary v, int p, uint64_t *floor_out, int *up) {
    const uint64_t m = v.m;
    const int q = v.q;
    if (p < -22 || p > 22) return 0;
    u128 n, rem2, div; /* the fraction is rem2 / (2 * div) */
    if (p >= 0) {
        u128 num = (u128)m * pow10_u128(p); /* < 2^53 * 10^22 < 2^127 */
        if (q >= 0) {
            if (q > 63 || num >> (127 - q)) return 0;
            n = num << q, rem2 = 0, div = 1;
        } else {
            if (-q > 126) return 0;
            n = num >> -q, rem2 = (num & (((u128)1 << -q) - 1)) << 1, div = (u128)1 << -q;
        }
    } else {
        div = pow10_u128(-p); /* < 2^74 */
        if (q >= 0) {
            if (q > 53) return 0;
            u128 num = (u128)m << q; /* < 2^106 */
            n = num / div, rem2 = num % div << 1;
        } else {
            if (-q > 52) return 0;
            div <<= -q; /* < 2^126 */
            n = m / div, rem2 = m % div << 1;
        }
    }
    if (n >> 63) return 0;
    *floor_out = (uint64_t)n;
    *up = rem2 > div || (rem2 == div && (n & 1));
    return 1;
}

/* the `len` decimal digits of n, leading zeros included: two at a time */
static void digits(char *s, uint64_t n, int len) {
    int i = len;
    for (; i >= 2; i -= 2, n /= 100) memcpy(s + i - 2, pairs + 2 * (n % 100), 2);
    if (i) s[0] = (char)('0' + n % 10);
}

/* %g's own layout of P digits d (no '#'): trailing zeros dropped, and the point with them */
static int layout_g(char *b, int neg, const char *d, int P, int X) {
    int n = 0, last = P;
    while (last > 1 && d[last - 1] == '0') last--;
    if (neg) b[n++] = '-';
    if (X < -4 || X >= P) { /* d.ddde+XX */
        b[n++] = d[0];
        if (last > 1) {
            b[n++] = '.';
            memcpy(b + n, d + 1, (size_t)(last - 1)), n += last - 1;
        }
        b[n++] = 'e', b[n++] = X < 0 ? '-' : '+';
        int ax = X < 0 ? -X : X;
        if (ax >= 100) b[n++] = (char)('0' + ax / 100);
        b[n++] = (char)('0' + ax / 10 % 10), b[n++] = (char)('0' + ax % 10);
    } else if (X >= 0) { /* ddd.ddd */
        memcpy(b + n, d, (size_t)(X + 1)), n += X + 1;
        if (last > X + 1) {
            b[n++] = '.';
            memcpy(b + n, d + X + 1, (size_t)(last - X - 1)), n += last - X - 1;
        }
    } else { /* 0.000ddd */
        b[n++] = '0', b[n++] = '.';
        for (int i = 0; i < -X - 1; i++) b[n++] = '0';
        memcpy(b + n, d, (size_t)last), n += last;
    }
    b[n] = 0;
    return n;
}

static int fast_g(char *b, double x, int P) {
    if (!isfinite(x) || x == 0 || P < 1 || P > 17) return -1;
    Binary v = binary_of(fabs(x));
    int e2 = v.q + 63 - __builtin_clzll(v.m); /* 2^e2 <= a < 2^(e2+1) */
    int X = (int)((e2 * 78913LL) >> 18), up;  /* floor(e2 * log10(2)): a guess, one low at most */
    uint64_t n = 0;
    for (int tries = 0;; tries++) {
        if (tries == 3 || !scaled(v, P - 1 - X, &n, &up)) return -1;
        if (n >= pow10_u64[P]) X++;
        else if (n < pow10_u64[P - 1]) X--;
        else break;
    }
    if ((n += (uint64_t)up) == pow10_u64[P]) n = pow10_u64[P - 1], X++; /* 9.99..96 -> 10.0 */
    char d[20];
    digits(d, n, P);
    return layout_g(b, x < 0, d, P, X);
}

static int fast_f(char *b, double x, int D) {
    double a = fabs(x);
    uint64_t n;
    int up;
    if (!isfinite(x) || a >= 1e15 || D < 0 || D > 17 || !scaled(binary_of(a), D, &n, &up)) return -1;
    n += (uint64_t)up;
    uint64_t ip = n / pow10_u64[D], fp = n % pow10_u64[D];
    int len = 0;
    if (signbit(x)) b[len++] = '-';
    len += numfmt_int(b + len, (long long)ip); /* ip < 10^15 */
    if (D > 0) {
        b[len++] = '.';
        digits(b + len, fp, D);
        len += D;
    }
    b[len] = 0;
    return len;
}
#else
static int fast_g(char *b, double x, int P) {
    (void)b, (void)x, (void)P;
    return -1;
}
static int fast_f(char *b, double x, int D) {
    (void)b, (void)x, (void)D;
    return -1;
}
#endif

int numfmt_int(char b[24], long long v) {
    char t[24];
    int k = sizeof t;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    for (; u >= 100; u /= 100) k -= 2, memcpy(t + k, pairs + 2 * (u % 100), 2);
    if (u >= 10) k -= 2, memcpy(t + k, pairs + 2 * u, 2);
    else t[--k] = (char)('0' + u);
    int n = 0;
    if (v < 0) b[n++] = '-';
    memcpy(b + n, t + k, sizeof t - (size_t)k);
    n += (int)sizeof t - k;
    b[n] = 0;
    return n;
}

static int clamp_len(int n) { return n < 0 ? 0 : n >= NUMFMT_LEN ? NUMFMT_LEN - 1 : n; }

int numfmt_g(char buf[NUMFMT_LEN], double x, int precision) {
    int n = fast_g(buf, x, precision);
    return n >= 0 ? n : clamp_len(snprintf(buf, NUMFMT_LEN, "%.*g", precision, x));
}

int numfmt_f(char buf[NUMFMT_LEN], double x, int decimals) {
    int n = fast_f(buf, x, decimals);
    return n >= 0 ? n : clamp_len(snprintf(buf, NUMFMT_LEN, "%.*f", decimals, x));
}
