/*
 * test_numfmt.c - numfmt_g and numfmt_f give snprintf's "%.*g" and "%.*f" character for
 * character: on random float32 and float64 values over the whole range, on exact ties (where
 * the rounding must go to even, as glibc's does), next to powers of ten (where the exponent
 * changes when rounding carries), and on the values the fast path hands to snprintf; and
 * numfmt_int as "%lld".
 */
#define _XOPEN_SOURCE 700

#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "numfmt.h"

static uint64_t state = 0x9E3779B97F4A7C15ull;

static uint64_t next(void)   /* splitmix64 */
{
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static long mismatches, compared;

/* one value at one precision, both ways; the first few differences are printed */
static void compare(double x, int prec)
{
    char want[512], got[NUMFMT_LEN];
    snprintf(want, sizeof want, "%.*g", prec, x);
    numfmt_g(got, x, prec);
    compared++;
    if (strcmp(want, got) && mismatches++ < 10) printf("  %%.%dg of %a: want %s, got %s\n", prec, x, want, got);
    if (fabs(x) >= 1e15) return;   /* %f of larger values is longer than NUMFMT_LEN allows */
    snprintf(want, sizeof want, "%.*f", prec, x);
    numfmt_f(got, x, prec);
    compared++;
    if (strcmp(want, got) && mismatches++ < 10) printf("  %%.%df of %a: want %s, got %s\n", prec, x, want, got);
}

static double from_bits(uint64_t b)
{
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

static float float_from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static int run(const char *what, void (*gen)(long i), long n)
{
    long before = mismatches;
    for (long i = 0; i < n; i++) gen(i);
    return CHECK(mismatches == before, "%s: %ld values, as snprintf", what, n);
}

static int prec_of(long i) { return (int)(i % 17) + 1; }

static void gen_f32(long i)   /* a loss as the f32 model returns it: every float32 exponent */
{
    float f = float_from_bits((uint32_t)next());
    if (isfinite(f)) compare((double)f, i & 1 ? 9 : prec_of(i));
}

static void gen_f64(long i)
{
    double d = from_bits(next());
    if (isfinite(d)) compare(d, prec_of(i));
}

static void gen_decades(long i)   /* where the fast path works: 1e-14 .. 1e21, any mantissa */
{
    double m = (double)(next() >> 11) / 9007199254740992.0;
    compare((i & 2 ? -1 : 1) * m * pow(10, (double)(int)(next() % 36) - 14), prec_of(i));
}

static void gen_ties(long i)   /* k/2^j and integers ending in 5: exact halfway cases */
{
    int j = (int)(next() % 24);
    double k = (double)(next() % 100000000) + 0.5;
    compare(ldexp(k, -j), prec_of(i));
    compare((double)(next() % 1000000000000ull) * 10 + 5, prec_of(i));
    compare((double)(int64_t)(next() % 2000) / 8 - 125, (int)(i % 4));
}

static void gen_powers(long i)   /* neighbours of 10^k and of 0.99..95 */
{
    int k = (int)(i % 60) - 25;
    double p = pow(10, k);
    for (int d = -3; d <= 3; d++) {
        double x = p;
        for (int s = 0; s < (d < 0 ? -d : d); s++) x = nextafter(x, d < 0 ? 0 : INFINITY);
        compare(x, prec_of(i + d));
        compare(p * (1 - 5 * pow(10, -(double)prec_of(i) - 1)), prec_of(i));
    }
}

static void test_specials(void)
{
    static const double v[] = {0.0, -0.0, 1.0, -1.0, 0.5, 1e-5, 1e-4, 9.99999999e-5, 123456789, 1234567890, 1e15,
                               1e16, 1e21, 1e22, 1e23, 1e300, 5e-324, 2.2250738585072014e-308, 0.1, 0.2, 0.3,
                               0.991272271, 1.0 / 3, 2.0 / 3, 1e-300, 65504, 3.4028234663852886e38};
    long before = mismatches;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        for (int p = 0; p <= 17; p++) {
            compare(v[i], p ? p : 1);
            compare(-v[i], p ? p : 1);
        }
    compare(INFINITY, 9);
    compare(-INFINITY, 9);
    compare(NAN, 9);
    char b[NUMFMT_LEN];
    numfmt_f(b, 1e300, 6);   /* longer than the buffer: cut, still a C string */
    CHECK(strlen(b) == NUMFMT_LEN - 1 && mismatches == before, "zeros, signs, limits, NaN and Inf as snprintf");
}

static void gen_ints(long i)   /* numfmt_int against %lld: every magnitude, both signs, the limits */
{
    static const long long edge[] = {0, 1, -1, 9, 10, 99, 100, 101, LLONG_MAX, LLONG_MIN, LLONG_MIN + 1};
    long long v = i < 11 ? edge[i] : (long long)(next() >> (next() % 64));
    if (i >= 11 && (i & 1)) v = -v;
    char want[32], got[24];
    snprintf(want, sizeof want, "%lld", v);
    int n = numfmt_int(got, v);
    compared++;
    if ((strcmp(want, got) || n != (int)strlen(want)) && mismatches++ < 10) printf("  %%lld of %lld: got %s\n", v, got);
}

int main(void)
{
    test_specials();
    run("float32 bit patterns", gen_f32, 1000000);
    run("float64 bit patterns", gen_f64, 300000);
    run("1e-14 to 1e21, both signs", gen_decades, 1000000);
    run("halfway cases", gen_ties, 300000);
    run("next to powers of ten", gen_powers, 60000);
    run("integers", gen_ints, 200000);
    printf("%ld comparisons, %ld different\n", compared, mismatches);
    return check_done();
}
